#include "reg_cache.h"

#include <algorithm>
#include <iterator>
#include <new>
#include <utility>

namespace vrma {

// ---- RegRetired ----

RegRetired::RegRetired(RegRetired &&other) noexcept : list_(std::move(other.list_)) {}

RegRetired &RegRetired::operator=(RegRetired &&other) noexcept
{
	if (this != &other) {
		clear();
		list_ = std::move(other.list_);
	}
	return *this;
}

RegRetired::~RegRetired() { clear(); }

void RegRetired::push(RegEntry *e) noexcept
{
	e->prev_ = nullptr;
	list_.push_back(e);
}

void *RegRetired::pop() noexcept
{
	RegEntry *e = list_.pop_front();
	if (!e)
		return nullptr;
	void *handle = e->handle_;
	delete e;
	return handle;
}

void RegRetired::clear() noexcept
{
	while (RegEntry *e = list_.pop_front())
		delete e;
}

// ---- RegCache::List ----

void RegCache::List::push_back(RegEntry *e) noexcept
{
	e->next_ = nullptr;
	e->prev_ = tail;
	if (tail)
		tail->next_ = e;
	else
		head = e;
	tail = e;
	count++;
}

void RegCache::List::remove(RegEntry *e) noexcept
{
	if (e->prev_)
		e->prev_->next_ = e->next_;
	else
		head = e->next_;
	if (e->next_)
		e->next_->prev_ = e->prev_;
	else
		tail = e->prev_;
	e->prev_ = e->next_ = nullptr;
	count--;
}

// ---- RegPrepared ----

RegPrepared &RegPrepared::operator=(RegPrepared &&o) noexcept
{
	if (this != &o) {
		delete e_;
		e_ = o.e_;
		o.e_ = nullptr;
	}
	return *this;
}

RegPrepared::~RegPrepared() { delete e_; }

// ---- RegCache ----

RegCache::RegCache(size_t max_entries, size_t max_bytes, uint64_t exact) noexcept
	: max_entries_(max_entries), max_bytes_(max_bytes), exact_(exact)
{
}

RegCache::~RegCache()
{
	for (auto &kv : live_)
		delete kv.second;
	while (RegEntry *e = stale_.head) {
		stale_.remove(e);
		delete e;
	}
}

bool RegCache::span(uintptr_t addr, size_t len, RegRange &out) const noexcept
{
	const size_t n = len ? len : 1;
	// The end must be representable: a range holding the top byte would
	// end at 2^64 (wrapping to 0).
	if (n > UINTPTR_MAX - addr)
		return false;
	out.start = addr;
	out.end = addr + n;
	out.access = 0;
	return true;
}

RegEntry *RegCache::covering(uintptr_t start, uintptr_t end) const noexcept
{
	// The only candidate is the last entry starting at or before `start`:
	// any earlier one ends at or before that one's start.
	auto it = live_.upper_bound(start);
	if (it == live_.begin())
		return nullptr;
	RegEntry *e = std::prev(it)->second;
	return e->end_ >= end ? e : nullptr;
}

RegCache::Map::const_iterator RegCache::first_overlapping(uintptr_t start) const noexcept
{
	// Entries starting at or after `start` all end after it; of those
	// starting before it, only the last can reach past it (they are
	// disjoint).
	auto it = live_.lower_bound(start);
	if (it != live_.begin()) {
		auto prev = std::prev(it);
		if (prev->second->end_ > start)
			return prev;
	}
	return it;
}

RegEntry *RegCache::lookup(uintptr_t addr, size_t len, uint64_t access) noexcept
{
	RegRange r;
	RegEntry *e = span(addr, len, r) ? covering(r.start, r.end) : nullptr;
	if (!e || !serves(e, access)) {
		counters_.misses++;
		return nullptr;
	}
	if (e->refs_++ == 0)
		lru_.remove(e);
	counters_.hits++;
	return e;
}

bool RegCache::merged_range(uintptr_t addr, size_t len, uint64_t access,
			    RegRange &out) const noexcept
{
	RegRange req;
	if (!span(addr, len, req))
		return false;
	req.access = access;
	out = req;
	if (access & exact_)
		return true;
	// Only entries overlapping the request: not transitive.
	for (auto it = first_overlapping(req.start);
	     it != live_.end() && it->second->start_ < req.end; ++it) {
		const RegEntry *e = it->second;
		if (e->access_ & exact_)
			continue; // replaced by the request's entry, not joined
		out.start = std::min(out.start, e->start_);
		out.end = std::max(out.end, e->end_);
		out.access |= e->access_;
	}
	// Union longer than 2 * request + kMergeSlack (written so that nothing
	// overflows): the request alone.
	const size_t req_len = req.end - req.start;
	const size_t extra = (out.end - out.start) - req_len;
	if (extra > kMergeSlack && extra - kMergeSlack > req_len)
		out = req;
	return true;
}

void RegCache::make_stale(RegEntry *e) noexcept
{
	e->stale_ = true;
	stale_.push_back(e);
	stale_bytes_ += e->len();
}

// `e` has just left the map.
void RegCache::retire(RegEntry *e, RegRetired &out) noexcept
{
	live_bytes_ -= e->len();
	if (e->refs_ == 0) {
		lru_.remove(e);
		out.push(e);
	} else {
		make_stale(e);
	}
}

size_t RegCache::retire_range(uintptr_t start, uintptr_t end, RegRetired &out) noexcept
{
	size_t n = 0;
	auto it = first_overlapping(start);
	while (it != live_.end() && it->second->start_ < end) {
		RegEntry *e = it->second;
		const auto next = std::next(it);
		e->node_ = live_.extract(it); // freed with the entry, not here
		it = next;
		retire(e, out);
		n++;
	}
	return n;
}

void RegCache::evict_one(RegRetired &out) noexcept
{
	RegEntry *e = lru_.head;
	e->node_ = live_.extract(e->pos_);
	retire(e, out);
	counters_.evictions++;
}

bool RegCache::fits(size_t entries, size_t bytes) const noexcept
{
	return (max_entries_ == 0 || entries <= max_entries_) &&
	       (max_bytes_ == 0 || bytes <= max_bytes_);
}

void RegCache::log_inval(uintptr_t start, uintptr_t end) noexcept
{
	epoch_++;
	inval_log_[epoch_ % kInvalLog] = {start, end};
}

bool RegCache::raced(uint64_t since, uintptr_t start, uintptr_t end) const noexcept
{
	if (since == epoch_)
		return false;
	// Older than the log reaches (or not an epoch at all): assume the worst.
	if (since > epoch_ || epoch_ - since > kInvalLog)
		return true;
	for (uint64_t ep = since + 1; ep <= epoch_; ep++) {
		const Inval &v = inval_log_[ep % kInvalLog];
		if (v.start < end && start < v.end)
			return true;
	}
	return false;
}

RegPrepared RegCache::prepare() noexcept
{
	RegPrepared p;
	auto *e = new (std::nothrow) RegEntry(0, 0, 0, nullptr);
	if (!e)
		return p;
	try {
		Map one;
		one.emplace(0, e);
		e->node_ = one.extract(one.begin());
	} catch (...) {
		delete e;
		return p;
	}
	p.e_ = e;
	return p;
}

RegEntry *RegCache::insert(uintptr_t start, uintptr_t end, uint64_t access, void *handle,
			   uint64_t since, RegRetired &out) noexcept
{
	// Both allocations come first: running out of memory changes nothing.
	RegPrepared prep = prepare();
	return insert(start, end, access, handle, since, out, prep);
}

RegEntry *RegCache::insert(uintptr_t start, uintptr_t end, uint64_t access, void *handle,
			   uint64_t since, RegRetired &out, RegPrepared &prep) noexcept
{
	if (!handle || start >= end || !prep)
		return nullptr;
	RegEntry *e = prep.e_;
	prep.e_ = nullptr;
	e->start_ = start;
	e->end_ = end;
	e->access_ = access;
	e->handle_ = handle;
	e->refs_ = 1;
	e->node_.key() = start;

	const RegEntry *have = covering(start, end);
	if (raced(since, start, end) || (have && serves(have, access))) {
		make_stale(e); // the unused node stays with `e`
		counters_.stale_inserts++;
	} else {
		// Retiring the overlaps frees `start` in the map, so the node
		// goes in (inserting a node does not allocate).
		counters_.replaced += retire_range(start, end, out);
		e->pos_ = live_.insert(std::move(e->node_)).position;
		live_bytes_ += e->len();
	}
	counters_.inserts++;
	// The new entry is in use, so it is never the one evicted.
	while (lru_.head && !fits(live_.size() + stale_.count, live_bytes_ + stale_bytes_))
		evict_one(out);
	return e;
}

void *RegCache::release(RegEntry *e) noexcept
{
	RegRetired out;
	release(e, out);
	return out.pop();
}

bool RegCache::release(RegEntry *e, RegRetired &out) noexcept
{
	if (!e || e->refs_ == 0 || --e->refs_ > 0)
		return false;
	if (!e->stale_) {
		lru_.push_back(e);
		return false;
	}
	stale_.remove(e);
	stale_bytes_ -= e->len();
	out.push(e);
	return true;
}

size_t RegCache::invalidate(uintptr_t addr, size_t len, RegRetired &out) noexcept
{
	const size_t n = len ? len : 1;
	// No entry holds the top byte (its end would be 2^64), so clamping the
	// end one byte short of 2^64 loses nothing.
	const uintptr_t end = n > UINTPTR_MAX - addr ? UINTPTR_MAX : addr + n;
	log_inval(addr, end);
	const size_t retired = retire_range(addr, end, out);
	counters_.invalidations += retired;
	return retired;
}

bool RegCache::make_room(size_t bytes, RegRetired &out) noexcept
{
	auto fits_one_more = [&] {
		const size_t held = live_bytes_ + stale_bytes_;
		if (max_bytes_ && (bytes > max_bytes_ || held > max_bytes_ - bytes))
			return false;
		return max_entries_ == 0 || live_.size() + stale_.count < max_entries_;
	};
	while (lru_.head && !fits_one_more())
		evict_one(out);
	return fits_one_more();
}

size_t RegCache::evict_unused(RegRetired &out) noexcept
{
	size_t n = 0;
	for (; lru_.head; n++)
		evict_one(out);
	return n;
}

size_t RegCache::flush(RegRetired &out) noexcept
{
	log_inval(0, UINTPTR_MAX);
	const size_t n = retire_range(0, UINTPTR_MAX, out);
	counters_.flushed += n;
	return n;
}

RegCacheStats RegCache::stats() const noexcept
{
	RegCacheStats s = counters_;
	s.entries = live_.size() + stale_.count;
	s.bytes = live_bytes_ + stale_bytes_;
	s.stale_entries = stale_.count;
	s.stale_bytes = stale_bytes_;
	s.unused_entries = lru_.count;
	return s;
}

} // namespace vrma
