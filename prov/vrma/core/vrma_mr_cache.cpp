// The registration cache of application buffers: vrma_mr_cache.h.
#include "vrma_domain.h"
#include "vrma_mr_cache.h"

#include <cinttypes>

#include "mem_monitor.h"
#include "reg_cache.h"

namespace vrma {

MrCacheParams mr_cache_params;

// What the RegCache keeps as a handle: the registration and its watch.
struct UserRegHandle {
	MrPtr mr;
	MemWatch watch; // empty: not watched (an uncached registration)
};

struct MrCache {
	// The monitor's cache_lock: RegCache calls only (nothing that
	// allocates, frees, registers or touches user memory).
	CheckedMutex lock;
	RegCache cache;
	// Retired by the monitor's invalidations, deregistered by the next
	// caller outside the lock (the monitor's callback must not free).
	RegRetired deferred;
	MemMonitor monitor; // last member: closed (joined) first

	// Remote rights are exact: a registration whose key went to a peer
	// never covers more bytes or rights than that operation asked for (a
	// receive buffer beside a send buffer must not become readable).
	MrCache(size_t max_count, size_t max_size) noexcept
		: cache(max_count, max_size,
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)
	{
	}
};

namespace {

enum : int { kUnknown = 0, kActive = 1, kOff = 2 };

void destroy_handle(MrCache *c, UserRegHandle *h) noexcept
{
	h->mr.reset(); // ibv_dereg_mr: unpins first
	if (c && !h->watch.empty())
		c->monitor.unwatch(h->watch);
	delete h;
}

void drain(MrCache *c, RegRetired &out) noexcept
{
	while (void *h = out.pop())
		destroy_handle(c, static_cast<UserRegHandle *>(h));
}

// Takes what the monitor retired (lock held; `out` empty, so the move frees
// nothing): O(1), no allocation.
void take_deferred(MrCache *c, RegRetired &out) noexcept
{
	VRMA_ASSERT_HELD(c->lock);
	if (!c->deferred.empty()) [[unlikely]]
		out = std::move(c->deferred);
}

// The domain's cache, made and its monitor started at the first call;
// nullptr when caching is off (disabled, or no userfaultfd here).
MrCache *cache_of(Domain *dom) noexcept
{
	const int state = dom->mr_cache_state.load(std::memory_order_acquire);
	if (state == kActive) [[likely]]
		return dom->mr_cache.get();
	if (state == kOff)
		return nullptr;
	std::lock_guard guard(dom->mr_cache_open_lock);
	if (dom->mr_cache_state.load() != kUnknown)
		return dom->mr_cache_state.load() == kActive ? dom->mr_cache.get() : nullptr;
	if (!mr_cache_params.enabled) {
		VRMA_INFO(FI_LOG_MR, "registration cache off (FI_VRMA_MR_CACHE=0)\n");
		dom->mr_cache_state.store(kOff, std::memory_order_release);
		return nullptr;
	}
	std::unique_ptr<MrCache, MrCacheDeleter> c(
		new (std::nothrow) MrCache(mr_cache_params.max_count, mr_cache_params.max_size));
	if (!c) {
		dom->mr_cache_state.store(kOff, std::memory_order_release);
		return nullptr;
	}
	MrCache *raw = c.get();
	const int rc = c->monitor.open(&c->lock, [raw](uintptr_t start, uintptr_t end) noexcept {
		// Under raw->lock, on the monitor thread: no allocation, no free.
		VRMA_ASSERT_HELD(raw->lock);
		if (end == UINTPTR_MAX)
			(void)raw->cache.flush(raw->deferred);
		else
			(void)raw->cache.invalidate(start, end - start, raw->deferred);
	});
	if (rc) {
		// Not a warning: an unprivileged process has no full userfaultfd,
		// and per-transfer registration is correct, only slower.
		VRMA_INFO(FI_LOG_MR,
			  "registration cache off: no memory monitor (userfaultfd: %s); each rendezvous registers its buffer\n",
			  strerror(-rc));
		c.reset();
		dom->mr_cache_state.store(kOff, std::memory_order_release);
		return nullptr;
	}
	dom->mr_cache = std::move(c);
	dom->mr_cache_state.store(kActive, std::memory_order_release);
	return raw;
}

ibv_mr *reg(Domain *dom, uintptr_t start, size_t len, int access) noexcept
{
	return ibv_reg_mr(dom->pd.get(), reinterpret_cast<void *>(start), len, access);
}

// A miss: watches and registers the merged range rr into h and caches it.
// The entry (one reference), or nullptr with h unwatched: unregistered when
// the range cannot be watched or registered (the caller registers the
// request's own bytes instead), registered when insert() refused it (the
// caller keeps it as this transfer's own).
RegEntry *cache_miss(MrCache *c, Domain *dom, const RegRange &rr, uint64_t since,
		     UserRegHandle *h) noexcept
{
	RegPrepared prep = RegCache::prepare();
	// Watch before registering (mem_monitor.h): an unmap in between would
	// otherwise go unseen.
	if (!prep || c->monitor.watch(rr.start, rr.end - rr.start, h->watch) != 0)
		return nullptr;
	const int access = static_cast<int>(rr.access);
	ibv_mr *mr = reg(dom, rr.start, rr.end - rr.start, access);
	if (!mr && errno == ENOMEM) {
		// The cache's own pins may be what is short.
		RegRetired out;
		{
			std::lock_guard guard(c->lock);
			(void)c->cache.evict_unused(out);
		}
		drain(c, out);
		mr = reg(dom, rr.start, rr.end - rr.start, access);
	}
	if (!mr) {
		// The merged range may need more than its pages allow (a
		// read-only page joined to a writable range).
		c->monitor.unwatch(h->watch);
		h->watch = {};
		return nullptr;
	}
	h->mr.reset(mr);
	RegRetired out;
	RegEntry *e;
	{
		std::lock_guard guard(c->lock);
		e = c->cache.insert(rr.start, rr.end, rr.access, h, since, out, prep);
	}
	drain(c, out);
	if (!e) {
		// Not cached: nothing will unwatch it with the entry.
		c->monitor.unwatch(h->watch);
		h->watch = {};
	}
	return e;
}

} // namespace

void MrCacheDeleter::operator()(MrCache *c) const noexcept
{
	if (!c)
		return;
	c->monitor.close(); // no callback after this; not under c->lock
	RegRetired out;
	{
		std::lock_guard guard(c->lock);
		take_deferred(c, out);
		(void)c->cache.flush(out);
	}
	drain(c, out);
	delete c;
}

void mr_cache_close(Domain *dom) noexcept
{
	if (dom->mr_cache_state.load(std::memory_order_acquire) == kActive ||
	    dom->mr_uncached.load(std::memory_order_relaxed)) {
		fi_vrma_mr_cache_stats st;
		mr_cache_stats(dom, st);
		VRMA_INFO(FI_LOG_MR,
			  "registration cache: %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
			  " invalidations, %" PRIu64 " evictions, %" PRIu64 " uncached\n",
			  st.hits, st.misses, st.invalidations, st.evictions, st.uncached);
	}
	dom->mr_cache.reset();
	dom->mr_cache_state.store(kOff);
}

UserReg::UserReg(UserReg &&o) noexcept
	: dom_(o.dom_), mr_(o.mr_), entry_(o.entry_), own_(o.own_)
{
	o.dom_ = nullptr;
	o.mr_ = nullptr;
	o.entry_ = nullptr;
	o.own_ = nullptr;
}

UserReg &UserReg::operator=(UserReg &&o) noexcept
{
	if (this != &o) {
		reset();
		std::swap(dom_, o.dom_);
		std::swap(mr_, o.mr_);
		std::swap(entry_, o.entry_);
		std::swap(own_, o.own_);
	}
	return *this;
}

void UserReg::reset() noexcept
{
	if (own_) {
		destroy_handle(nullptr, own_);
	} else if (entry_) {
		MrCache *c = dom_->mr_cache.get();
		RegRetired out;
		{
			std::lock_guard guard(c->lock);
			take_deferred(c, out);
			(void)c->cache.release(entry_, out);
		}
		drain(c, out);
	}
	dom_ = nullptr;
	mr_ = nullptr;
	entry_ = nullptr;
	own_ = nullptr;
}

int UserReg::acquire(Domain *dom, void *addr, size_t len, int access) noexcept
{
	reset();
	const auto a = reinterpret_cast<uintptr_t>(addr);
	MrCache *c = cache_of(dom);
	RegRange rr;
	uint64_t since = 0;
	bool cacheable = false;
	if (c) {
		RegRetired out;
		{
			std::lock_guard guard(c->lock);
			take_deferred(c, out);
			if (RegEntry *e = c->cache.lookup(a, len, static_cast<uint64_t>(access))) [[likely]] {
				dom_ = dom;
				entry_ = e;
				mr_ = static_cast<UserRegHandle *>(e->handle())->mr.get();
			} else {
				since = c->cache.epoch();
				cacheable = c->cache.merged_range(a, len, static_cast<uint64_t>(access), rr);
			}
		}
		drain(c, out);
		if (entry_)
			return 0;
	}
	auto *h = new (std::nothrow) UserRegHandle;
	if (!h) {
		VRMA_WARN(FI_LOG_MR, "out of memory registering a %zu-byte buffer\n", len);
		return -FI_ENOMEM;
	}
	dom_ = dom;
	if (cacheable) {
		if (RegEntry *e = cache_miss(c, dom, rr, since, h)) {
			entry_ = e;
			mr_ = h->mr.get();
			return 0;
		}
	}
	if (!h->mr) {
		// This transfer's own bytes, uncached.
		h->mr.reset(reg(dom, a, len ? len : 1, access));
		if (!h->mr) {
			const int e = errno;
			VRMA_WARN(FI_LOG_MR, "registering a %zu-byte buffer: %s\n", len, strerror(e));
			delete h;
			dom_ = nullptr;
			return e == ENOMEM || e == EAGAIN ? -FI_EAGAIN : errno_to_fi(e);
		}
	}
	dom->mr_uncached.fetch_add(1, std::memory_order_relaxed);
	mr_ = h->mr.get();
	own_ = h;
	return 0;
}

void mr_cache_stats(Domain *dom, fi_vrma_mr_cache_stats &out) noexcept
{
	out = {};
	out.uncached = dom->mr_uncached.load(std::memory_order_relaxed);
	if (dom->mr_cache_state.load(std::memory_order_acquire) != kActive)
		return;
	MrCache *c = dom->mr_cache.get();
	RegCacheStats st;
	{
		std::lock_guard guard(c->lock);
		st = c->cache.stats();
	}
	out.active = c->monitor.active() ? 1 : 0;
	out.hits = st.hits;
	out.misses = st.misses;
	out.invalidations = st.invalidations;
	out.evictions = st.evictions;
	out.entries = st.entries;
	out.bytes = st.bytes;
}

} // namespace vrma
