// A cache of memory registrations of user buffers, for transfers from or into
// memory the application did not register itself (desc NULL): the pure
// bookkeeping, with the registration itself an opaque handle (the provider's
// Mr object) that the cache never dereferences.
//
// Usage (the provider holds its own lock around every call: the cache is not
// thread safe):
//  - lookup() on each transfer; a hit is an entry with a reference taken.
//  - On a miss: epoch(), merged_range(), then register the range it gives
//    (possibly without the lock), then insert() with that epoch. If the
//    registration fails, fall back to the request's own range (span()) with
//    the requested access: the merged access can be more than some pages
//    allow (a read-only page in a range that also needs write access).
//  - release() when the transfer completes.
//  - invalidate() from the memory monitor (munmap, madvise(MADV_DONTNEED),
//    brk shrink, mremap), with the whole pages it reports, *before* the
//    addresses can be mapped again: the cache is only as correct as these
//    notifications. A range unmapped and mapped anew without an
//    invalidate() in between is served by a registration of the old pages:
//    data silently goes to or comes from the wrong memory.
//  - flush() when the domain closes.
// Handles the cache gives up come back for deregistration exactly once,
// either from release() or in a RegRetired list, and never while an entry
// holding them is referenced. Deregistering them is the caller's job and may
// happen after the lock is dropped: a retired handle is no longer known to
// the cache.
//
// Entries are exact byte ranges [addr, addr+len), not pages, as in
// libfabric's own cache: buffers that merely share a page (or touch) are
// independent entries, each registration pinning every page its bytes
// touch (a shared page is pinned twice). Page ranges made neighbours merge:
// a receiver cycling through 64 adjacent 1 MiB buffers had 64 misses whose
// merged ranges grew 1, 2, ... 64 MiB (~2 GiB pinned while warming up), and
// the in-use entries they replaced kept going stale.
//
// Live entries (those lookup() can return) never overlap in bytes: insert()
// retires every live entry that overlaps the new range. So a map keyed by
// start is also ordered by end, the entries overlapping [a, b) are a
// contiguous run found with one map search (no bound on entry length, no
// augmented max-end needed), and a lookup has at most one candidate, the
// entry holding the request's first byte. An entry retired while in use is
// "stale": it keeps serving the transfers that hold it, lookup() no longer
// sees it, and its handle comes back from its last release(). So
// registrations held by the cache (live and stale) may overlap; live ones
// never do.
#pragma once

#include "intrusive_fifo.h"

#include <cstddef>
#include <cstdint>
#include <map>

namespace vrma {

class RegCache;
class RegRetired;

// One cached registration of the bytes [start, end).
class RegEntry {
public:
	uintptr_t start() const noexcept { return start_; }
	uintptr_t end() const noexcept { return end_; }
	size_t len() const noexcept { return end_ - start_; }
	uint64_t access() const noexcept { return access_; }
	void *handle() const noexcept { return handle_; }
	// References held by callers (lookup() and insert() each give one).
	size_t refs() const noexcept { return refs_; }
	// Retired while in use: no longer returned by lookup().
	bool stale() const noexcept { return stale_; }

	RegEntry(const RegEntry &) = delete;
	RegEntry &operator=(const RegEntry &) = delete;

private:
	friend class RegCache;
	friend class RegRetired;

	RegEntry(uintptr_t start, uintptr_t end, uint64_t access, void *handle) noexcept
		: start_(start), end_(end), access_(access), handle_(handle)
	{
	}

	uintptr_t start_;
	uintptr_t end_;
	uint64_t access_;
	void *handle_;
	size_t refs_ = 1;
	bool stale_ = false;
	// Links of the one list the entry is on: the LRU list (live, unused),
	// the stale list (stale, in use) or a RegRetired (next_ only). A live
	// entry in use is on none.
	RegEntry *prev_ = nullptr;
	RegEntry *next_ = nullptr;
	// Its node in the map while live: eviction and invalidation take it
	// out without another search.
	std::map<uintptr_t, RegEntry *>::iterator pos_;
	// The map node while the entry is out of the map (stale, retired, or
	// prepared and not inserted): it is freed with the entry, never when the
	// entry leaves the map, so no call under the caller's lock frees memory.
	std::map<uintptr_t, RegEntry *>::node_type node_;
};

// The allocations insert() needs (an entry and its map node), made by
// RegCache::prepare() before the caller takes its lock. An unused or
// leftover one frees them when destroyed: destroy it after the lock is
// dropped.
class RegPrepared {
public:
	RegPrepared() = default;
	RegPrepared(RegPrepared &&o) noexcept : e_(o.e_) { o.e_ = nullptr; }
	RegPrepared &operator=(RegPrepared &&o) noexcept;
	RegPrepared(const RegPrepared &) = delete;
	RegPrepared &operator=(const RegPrepared &) = delete;
	~RegPrepared();
	explicit operator bool() const noexcept { return e_ != nullptr; }

private:
	friend class RegCache;
	RegEntry *e_ = nullptr;
};

// Registrations the cache gave up, for the caller to deregister: filled by
// insert(), invalidate(), flush(), make_room() and evict_unused(), in the
// order they were retired (evictions least recently released first). Owns
// the retired entries; moving it is O(1), so the caller can take it out of
// its lock. Never allocates.
// Hazard: drain it with pop(). Entries still in it when it is destroyed are
// freed, but their handles are lost, never deregistered.
class RegRetired {
public:
	RegRetired() = default;
	RegRetired(RegRetired &&other) noexcept;
	RegRetired &operator=(RegRetired &&other) noexcept;
	RegRetired(const RegRetired &) = delete;
	RegRetired &operator=(const RegRetired &) = delete;
	~RegRetired();

	bool empty() const noexcept { return list_.empty(); }
	size_t size() const noexcept { return list_.size(); }
	// The next handle to deregister (its entry is freed), or nullptr once
	// empty.
	void *pop() noexcept;

private:
	friend class RegCache;
	void push(RegEntry *e) noexcept;
	void clear() noexcept;

	IntrusiveFifo<RegEntry, &RegEntry::next_> list_;
};

// A byte range [start, end) and the access a registration of it needs.
struct RegRange {
	uintptr_t start = 0;
	uintptr_t end = 0;
	uint64_t access = 0;
};

struct RegCacheStats {
	uint64_t hits = 0;
	uint64_t misses = 0;
	uint64_t inserts = 0;	    // insert() calls that cached a handle
	uint64_t stale_inserts = 0; // of those, entries stale on arrival
	uint64_t replaced = 0;	    // live entries retired by an overlapping insert()
	uint64_t evictions = 0;	    // unused entries retired for the limits
	uint64_t invalidations = 0; // live entries retired by invalidate()
	uint64_t flushed = 0;	    // live entries retired by flush()
	// Registrations the cache holds now (live and stale; what the limits
	// count), and of those the stale ones and the unused (evictable) ones.
	size_t entries = 0;
	size_t bytes = 0;
	size_t stale_entries = 0;
	size_t stale_bytes = 0;
	size_t unused_entries = 0;
};

class RegCache {
public:
	// merged_range() joins overlapping entries only while the union stays
	// within twice the request's length plus this (a page): a sliding
	// sequence of overlapping requests then grows no entry past that, at
	// the price of retiring what the request overlaps.
	static constexpr size_t kMergeSlack = 4096;
	// How many invalidations insert() can check a registration against;
	// more between epoch() and insert() and the new entry is stale.
	static constexpr size_t kInvalLog = 16;

	// max_entries, max_bytes: limits on the registrations held (live and
	// stale), 0 for none. insert() evicts unused entries, least recently
	// released first, to stay within them. When only entries in use are
	// left, insert() still caches the new one and the cache is over its
	// limits until enough entries are released and the next insert() or
	// make_room() evicts them. An entry larger than max_bytes is cached too
	// (alone, once it is released); a caller that would rather not pin that
	// much should register such a request outside the cache.
	// exact: the access bits that grant something to other parties (the
	// remote rights, whose registrations' keys go to peers). An entry
	// serves a request only if it has exactly the request's exact bits
	// (other bits: at least the request's), and a request with any of
	// them is never merged (its registration covers its own bytes, no
	// more); a request without them merges only with entries without
	// them. So no cached registration is wider in those rights or, with
	// them, in range than the operation using it asked for, while local
	// rights still share entries. 0: every bit merges and serves as a
	// superset.
	explicit RegCache(size_t max_entries = 0, size_t max_bytes = 0, uint64_t exact = 0) noexcept;
	// Frees every entry. Handles of live entries are lost (call flush() and
	// drain it first); no entry may still be in use.
	~RegCache();
	RegCache(const RegCache &) = delete;
	RegCache &operator=(const RegCache &) = delete;

	size_t max_entries() const noexcept { return max_entries_; }
	size_t max_bytes() const noexcept { return max_bytes_; }

	// The bytes [addr, addr+len) (len 0 is taken as 1 everywhere), access 0.
	// False when the range wraps around the top of the address space or
	// holds its top byte (its end would be 2^64): such a range is never
	// cached.
	bool span(uintptr_t addr, size_t len, RegRange &out) const noexcept;

	// The live entry covering every byte of [addr, addr+len) with at least
	// `access` (a bit set: every requested bit must be in the entry's, and
	// of the exact bits exactly the requested ones), with
	// a reference taken; nullptr on a miss. A partial overlap is a miss. The
	// entry stays valid until the matching release(). O(log n), never
	// allocates.
	RegEntry *lookup(uintptr_t addr, size_t len, uint64_t access) noexcept;

	// What to register on a miss: the request's bytes joined with every live
	// entry that overlaps them in bytes (merely adjacent ones stay apart)
	// and has none of the exact bits, and the union of their access with
	// `access`; just the request when `access` has exact bits. insert() of it replaces
	// those entries, so a buffer touched piecewise ends up as one entry.
	// Not transitive: only entries overlapping the request join (live
	// entries being disjoint, the union overlaps no other). Bounded: if the
	// union is longer than twice the request plus kMergeSlack, just the
	// request with `access`, whose insert() still retires the entries it
	// overlaps (in-use ones go stale). False as span().
	bool merged_range(uintptr_t addr, size_t len, uint64_t access,
			  RegRange &out) const noexcept;

	// Counts invalidate() and flush() calls. Read it, under the same lock,
	// before registering a range for insert().
	uint64_t epoch() const noexcept { return epoch_; }

	// Caches `handle`, a registration of [start, end) with `access`, and
	// returns its entry with one reference; nullptr when it is not cached
	// (start >= end, handle nullptr, or out of memory): the caller then
	// keeps the handle, and nothing changed. The handle must cover every
	// byte of [start, end): lookup() serves any request inside it. It
	// allocates (the entry and its map node); no other call does. Live
	// entries overlapping the range are retired (unused ones into `out`,
	// those in use go stale); then unused entries are evicted into `out`
	// while over the limits.
	// The entry is stale from the start (serves this caller only, its handle
	// comes back from release()) when
	//  - an invalidate() or flush() since `since` (an epoch() read before
	//    registering) overlapped the range: the registration may pin pages
	//    that are no longer mapped there, or
	//  - a live entry already covers the range with at least `access`
	//    (another caller inserted the same miss first); that one is kept.
	// Never throws.
	RegEntry *insert(uintptr_t start, uintptr_t end, uint64_t access, void *handle,
			 uint64_t since, RegRetired &out) noexcept;
	// The allocations of an insert(), made outside the lock (empty when out
	// of memory). Static: it touches no cache state.
	static RegPrepared prepare() noexcept;
	// insert() with allocations made beforehand: neither allocates nor
	// frees. `prep` is consumed when the entry is cached (live or stale);
	// nullptr and `prep` left as it was on the argument errors above or an
	// empty `prep`.
	RegEntry *insert(uintptr_t start, uintptr_t end, uint64_t access, void *handle,
			 uint64_t since, RegRetired &out, RegPrepared &prep) noexcept;

	// Drops a reference, one that lookup() or insert() gave. Returns the
	// handle to deregister when the entry is stale and this was its last
	// reference (the entry is freed), nullptr otherwise. A caller whose
	// reference is gone must forget `e`: any later call may free it.
	// A live entry without references joins the most recently used end of
	// the LRU list (recency is the time of the last release: an entry in
	// use is never an eviction candidate). Does not evict, even when the
	// cache is over its limits.
	void *release(RegEntry *e) noexcept;
	// release() that frees nothing: a stale entry whose last reference this
	// was goes into `out` (whose pop() gives its handle and frees it).
	// Returns whether it did.
	bool release(RegEntry *e, RegRetired &out) noexcept;

	// Retires every live entry whose bytes overlap [addr, addr+len)
	// (clamped at the top of the address space): unused ones into `out`,
	// ones in use go stale. Returns how many. O(log n + k).
	// Hazard: pass whole pages (the monitor reports them). An entry pins
	// every page its bytes touch, so only a page-aligned range reaches every
	// entry pinning an unmapped page; a sub-page range misses a neighbour
	// that shares the page outside it.
	size_t invalidate(uintptr_t addr, size_t len, RegRetired &out) noexcept;

	// Evicts unused entries, least recently released first, until one more
	// registration of `bytes` fits within the limits (before registering it,
	// so the cache's own pins do not make the registration fail). True when
	// it fits.
	bool make_room(size_t bytes, RegRetired &out) noexcept;

	// Evicts every unused entry, least recently released first (a
	// registration failed for want of lockable memory). Returns how many.
	size_t evict_unused(RegRetired &out) noexcept;

	// Retires every live entry (unused ones into `out`, in-use ones go
	// stale). Returns how many.
	size_t flush(RegRetired &out) noexcept;

	RegCacheStats stats() const noexcept;

private:
	struct List {
		RegEntry *head = nullptr; // least recent
		RegEntry *tail = nullptr;
		size_t count = 0;
		void push_back(RegEntry *e) noexcept;
		void remove(RegEntry *e) noexcept;
	};
	struct Inval {
		uintptr_t start;
		uintptr_t end;
	};
	using Map = std::map<uintptr_t, RegEntry *>;

	RegEntry *covering(uintptr_t start, uintptr_t end) const noexcept;
	Map::const_iterator first_overlapping(uintptr_t start) const noexcept;
	size_t retire_range(uintptr_t start, uintptr_t end, RegRetired &out) noexcept;
	void retire(RegEntry *e, RegRetired &out) noexcept;
	void make_stale(RegEntry *e) noexcept;
	void evict_one(RegRetired &out) noexcept;
	bool fits(size_t entries, size_t bytes) const noexcept;
	void log_inval(uintptr_t start, uintptr_t end) noexcept;
	bool raced(uint64_t since, uintptr_t start, uintptr_t end) const noexcept;

	size_t max_entries_;
	size_t max_bytes_;
	uint64_t exact_;
	// Whether e serves a request for `access` (see lookup()).
	bool serves(const RegEntry *e, uint64_t access) const noexcept
	{
		return (e->access_ & access) == access && ((e->access_ ^ access) & exact_) == 0;
	}
	Map live_;
	List lru_;   // live entries without references
	List stale_; // stale entries still referenced
	size_t live_bytes_ = 0;
	size_t stale_bytes_ = 0;
	uint64_t epoch_ = 0;
	Inval inval_log_[kInvalLog] = {}; // invalidation e at [e % kInvalLog]
	RegCacheStats counters_;
};

} // namespace vrma
