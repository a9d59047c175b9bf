// Bounded caches of freed objects, so that a fast path that creates and
// ends one object per operation (a posted receive, an emulated atomic and
// its entry in a map by id) does not pay malloc and free each time.
//
// Contract:
//  - reserve(max) allocates the cache's whole room once (it may throw: at
//    open, where failing is allowed); after it, FreeList::put() and
//    NodeCache::erase() never allocate and never throw.
//  - A cache holds at most max objects; beyond that a freed one is deleted.
//    It never grows because a peer or an application misbehaves.
//  - FreeList::get() hands out a value-initialised T (a kept one is reset by
//    assignment from T{}): the caller sees no trace of its last use. T's
//    assignment must therefore be what resets it (an intrusive hook whose
//    assignment copies no links qualifies).
//  - No locking: the owner's lock guards the cache and its objects.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace vrma {

template <class T> class FreeList {
public:
	void reserve(size_t max) { kept_.reserve(max); }
	size_t max() const noexcept { return kept_.capacity(); }
	size_t size() const noexcept { return kept_.size(); }

	// A fresh T, or nullptr when none is kept and memory is out.
	T *get() noexcept
	{
		if (kept_.empty()) [[unlikely]]
			return new (std::nothrow) T;
		T *t = kept_.back().release();
		kept_.pop_back();
		*t = T{};
		return t;
	}
	// Ends t (nullptr is ignored): kept while there is room, else deleted.
	void put(T *t) noexcept
	{
		if (!t)
			return;
		if (kept_.size() < kept_.capacity()) [[likely]]
			kept_.emplace_back(t); // within the reserved room
		else
			delete t;
	}

private:
	std::vector<std::unique_ptr<T>> kept_;
};

// The nodes of an unordered map (any node-based container with extract()
// and insert(node_type&&)) that erase() took out, for insert() to reuse.
template <class Map> class NodeCache {
public:
	using Node = typename Map::node_type;
	void reserve(size_t max) { kept_.reserve(max); }
	size_t size() const noexcept { return kept_.size(); }

	// Inserts {key, value} into m, on a kept node when there is one. Throws
	// what m's insert throws (its bucket array may grow), m then unchanged.
	// Returns false, m unchanged, when key is already there.
	bool insert(Map &m, const typename Map::key_type &key, const typename Map::mapped_type &value)
	{
		if (kept_.empty())
			return m.emplace(key, value).second;
		Node n = std::move(kept_.back());
		kept_.pop_back();
		n.key() = key;
		n.mapped() = value;
		auto r = m.insert(std::move(n));
		if (!r.inserted)
			keep(std::move(r.node));
		return r.inserted;
	}
	// Erases the entry at it from m and keeps its node if there is room.
	void erase(Map &m, typename Map::iterator it) noexcept
	{
		if (kept_.size() < kept_.capacity()) [[likely]]
			kept_.push_back(m.extract(it)); // within the reserved room
		else
			m.erase(it);
	}

private:
	void keep(Node &&n) noexcept
	{
		if (kept_.size() < kept_.capacity())
			kept_.push_back(std::move(n));
	}
	std::vector<Node> kept_;
};

} // namespace vrma
