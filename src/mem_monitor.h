// Keeps a registration cache (RegCache) correct when the application unmaps
// memory: a Linux userfaultfd(2) that reports munmap, brk shrink,
// madvise(MADV_DONTNEED/MADV_REMOVE) and mremap of the ranges it watches, and
// a monitor thread that turns each report into an invalidation of the cache.
// One per domain; only cache misses touch it (watch()), never the hot path.
//
// Caller protocol (cache_lock is the mutex the provider holds around every
// RegCache call):
//  - miss: under cache_lock lookup(), since = epoch(), merged_range(); drop
//    the lock; watch(range) (failure: register this transfer's own pages and
//    do not cache them); register the range without the lock (failure:
//    unwatch()); under cache_lock insert(..., since, ...).
//  - keep the MemWatch with the registration; when RegCache gives the handle
//    back (release() or a RegRetired), deregister and unwatch() it.
//  Watch before registering: an unmap between the registration and watch()
//  would go unreported and the cache would keep the old pages. Invalidations
//  from watch() on are reported and the epoch check makes such an insert
//  stale.
//
// Hazard, privilege: this needs a full userfaultfd. Without CAP_SYS_PTRACE,
// vm.unprivileged_userfaultfd=1 or access to /dev/userfaultfd, the kernel
// grants only UFFD_USER_MODE_ONLY, in which a fault the kernel itself takes
// in a watched range (read(2) or recv(2) into a page that MADV_DONTNEED just
// zapped, before the monitor unregistered it) fails with EFAULT instead of
// waiting for the monitor: that breaks correct applications, so open() never
// falls back to it. open() fails instead and the caller must not cache
// (register per transfer).
//
// Hazard, ordering: the kernel holds munmap/madvise/mremap/brk in the calling
// thread only until the monitor has *read* the event, not until it acted on
// it. The monitor takes cache_lock before each read and keeps it until every
// invalidation that read produced is done, so any lookup that starts after
// munmap() returned waits for the invalidation. The price is a set of rules
// for everyone holding cache_lock (otherwise: deadlock, the monitor waiting
// for the lock, the lock holder waiting for the monitor). While holding
// cache_lock a thread must not
//  - unmap, zap, move or shrink memory that may be watched (munmap,
//    madvise(MADV_DONTNEED/MADV_REMOVE), mremap, brk/sbrk, mmap(MAP_FIXED)
//    over it), directly or through free()/delete: allocators give memory back
//    that way;
//  - touch or pin watched memory that may be missing (a page zapped, hole
//    punched, or never populated): e.g. register a range it just watched;
//  - call watch() (it populates the range) or close() (joins the monitor);
//  - wait for a thread doing any of the above. This includes allocator
//    locks: glibc trims its heap (brk shrink, MADV_DONTNEED of a thread
//    arena, malloc_trim) while holding the arena lock, so a cache_lock holder
//    blocked in malloc() on that arena, while the trimming thread waits for
//    the monitor, deadlocks. RegCache::insert() allocates under the lock: the
//    window is small but real in multithreaded programs.
//
// Hazard, not reported (the cache keeps the old pages until a thread touches
// the range): fallocate(PUNCH_HOLE) or ftruncate() of a shmem/memfd file
// mapped MAP_SHARED zap pages without an event; the next touch is a fault in
// a watched range, which the monitor treats as an invalidation (below).
// MADV_FREE sends no event either, but cannot discard pinned pages.
//
// Faults: registration is UFFDIO_REGISTER_MODE_MISSING, so a thread touching
// a watched page that is not present waits for the monitor. The monitor
// invalidates and unregisters the watched run holding the page and wakes the
// thread, which faults again with normal handling; no thread is left waiting.
// watch() populates the range first (MADV_POPULATE_READ) so that registering
// it afterwards does not fault. Pages an mremap adds to a watched mapping
// inherit the registration and are released the same way at first touch.
//
// Hazard, fork: UFFD_FEATURE_EVENT_FORK is not requested, so the kernel drops
// the registration from the child's copy of every mapping: the child's
// memory behaves normally and its unmaps are not reported (the child has no
// use for the domain). The child inherits the descriptor until exec
// (O_CLOEXEC), and while it holds it the context outlives close() in the
// parent: close() therefore unregisters every watched range itself. If the
// monitor holds cache_lock at the fork, the child's copy of it stays locked.
//
// Limits: one userfaultfd per mapping. A range watched here cannot be watched
// by another monitor (another domain) or the application's own userfaultfd:
// -EBUSY, not cached. Each watched range splits its mapping (VMA), so
// vm.max_map_count bounds how many disjoint ranges can be watched (-ENOMEM
// beyond). hugetlb ranges must be huge-page aligned (-EINVAL otherwise).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

struct uffd_msg;

namespace vrma {

// What watch() registered, for the matching unwatch(): the page range and
// the monitor's generation at the time. Ranges the monitor dropped after an
// unmap and watched anew by a later watch() are newer than `gen`, so a late
// unwatch() of the old registration leaves the new one alone.
struct MemWatch {
	uintptr_t start = 0;
	uintptr_t end = 0;
	uint64_t gen = 0;
	bool empty() const noexcept { return start == end; }
};

struct MemMonitorStats {
	uint64_t unmap_events = 0;  // munmap, brk shrink, mmap/mremap over a range
	uint64_t remove_events = 0; // madvise(MADV_DONTNEED/MADV_REMOVE)
	uint64_t remap_events = 0;  // mremap moving a watched mapping
	uint64_t fault_events = 0;  // a thread touched a missing watched page
	uint64_t other_events = 0;
	uint64_t faults_woken = 0;  // faulting threads woken after unregistering
	uint64_t invalidations = 0; // callback calls
	uint64_t watches = 0;	    // watch() calls that succeeded
	uint64_t watch_failures = 0;
	uint64_t unwatches = 0;	// unwatch() calls with a non-empty MemWatch
	uint64_t unregister_failures = 0;
	// Watched now: maximal runs of contiguous watched pages, their bytes.
	size_t watched_runs = 0;
	size_t watched_bytes = 0;
	// The monitor hit an error it cannot recover from: it invalidated
	// everything and closed its userfaultfd (active() is false).
	bool failed = false;
};

// The caller's cache lock as the monitor takes it: any Lockable, locked
// through code instantiated in the caller's translation unit. The lock's
// layout is the caller's business (a provider built with VRMA_LOCK_CHECKS
// records holders in its mutexes; this library is built without and never
// touches their members).
class LockRef {
public:
	LockRef() noexcept = default;
	LockRef(std::nullptr_t) noexcept {}
	template <typename M>
	LockRef(M *m) noexcept
		: m_(m), lock_([](void *p) noexcept { static_cast<M *>(p)->lock(); }),
		  unlock_([](void *p) noexcept { static_cast<M *>(p)->unlock(); })
	{
	}
	explicit operator bool() const noexcept { return m_ != nullptr; }
	void lock() const noexcept { lock_(m_); }
	void unlock() const noexcept { unlock_(m_); }

private:
	void *m_ = nullptr;
	void (*lock_)(void *) noexcept = nullptr;
	void (*unlock_)(void *) noexcept = nullptr;
};

// open() and close() from one thread at a time; watch(), unwatch(),
// stats() and active() from any thread, concurrently.
class MemMonitor {
public:
	// Called with cache_lock held, on the monitor thread, for every range
	// whose registrations are no longer valid: [start, end) as the kernel
	// reported it (page aligned; end UINTPTR_MAX means everything). Must not
	// throw, allocate (see the ordering hazard), call watch() or close();
	// may call unwatch(). Called until close() returns.
	using Invalidate = std::function<void(uintptr_t start, uintptr_t end)>;

	MemMonitor() noexcept;
	~MemMonitor(); // close()
	MemMonitor(const MemMonitor &) = delete;
	MemMonitor &operator=(const MemMonitor &) = delete;

	// Opens a full-mode userfaultfd (the syscall, then /dev/userfaultfd)
	// with the unmap, remove and remap events, and starts the monitor.
	// 0, or a negative errno: -EPERM/-EACCES without privilege (see above),
	// -ENOSYS without userfaultfd, -EINVAL for a kernel without the events
	// or null arguments, -EALREADY when open. On failure nothing is left
	// open and the caller must not cache.
	int open(LockRef cache_lock, Invalidate invalidate) noexcept;
	bool active() const noexcept { return active_.load(std::memory_order_acquire); }

	// Watches the pages of [addr, addr+len) (len 0 is 1 byte), counting
	// overlapping watches. 0 and `out` filled, or a negative errno and
	// `out` empty: -EINVAL for memory that cannot be watched (file mappings
	// other than shmem, device or hugetlb-misaligned mappings, a wrapping or
	// unmapped range), -ENOMEM for a range with holes or past
	// vm.max_map_count, -EBUSY for a range another userfaultfd watches,
	// -ENODEV when not open, -EDEADLK on the monitor thread. The caller must
	// not cache a range it could not watch. Call without cache_lock.
	int watch(uintptr_t addr, size_t len, MemWatch &out) noexcept;
	// Drops one watch; pages no other watch covers are unregistered. Parts
	// the monitor already dropped (unmapped, removed, faulted) are skipped.
	// Empty or already closed: nothing. Each MemWatch exactly once. From the
	// callback it takes spare nodes and allocates only when they run out
	// (watch() keeps some); deferring it out of the callback is better.
	void unwatch(const MemWatch &w) noexcept;

	// Unregisters everything, stops the monitor, closes the descriptors.
	// Not with cache_lock held, not from the callback. The cache is no longer
	// protected afterwards: flush it first (or stop caching).
	void close() noexcept;

	MemMonitorStats stats() const noexcept;
	size_t page() const noexcept { return page_; }
	// Whether every page of [addr, addr+len) is watched (for tests).
	bool watched(uintptr_t addr, size_t len) const noexcept;

private:
	// An owned file descriptor.
	class Fd {
	public:
		Fd() noexcept = default;
		explicit Fd(int fd) noexcept : fd_(fd) {}
		Fd(Fd &&o) noexcept : fd_(o.release()) {}
		Fd &operator=(Fd &&o) noexcept
		{
			reset(o.release());
			return *this;
		}
		~Fd() { reset(); }
		int get() const noexcept { return fd_; }
		explicit operator bool() const noexcept { return fd_ >= 0; }
		int release() noexcept
		{
			const int fd = fd_;
			fd_ = -1;
			return fd;
		}
		void reset(int fd = -1) noexcept;

	private:
		int fd_ = -1;
	};

	struct Seg {
		uintptr_t end;
		uint32_t count; // watches covering it; 0 only transiently
		uint64_t since; // gen_ when count last rose from 0
	};
	using Segs = std::map<uintptr_t, Seg>;
	using Node = Segs::node_type;
	using NodePool = std::vector<Node>;
	static constexpr size_t kSpareMax = 256;
	static constexpr size_t kSpareLow = 16;

	// Monitor thread.
	void run() noexcept;
	bool drain() noexcept;
	void handle(const struct ::uffd_msg &m) noexcept;
	void on_fault(uintptr_t addr) noexcept;
	void fail() noexcept; // with cache_lock held
	void call_invalidate(uintptr_t start, uintptr_t end) noexcept;

	// Under mu_. None of them allocates: new segments come from `pool`
	// (filled by the caller before taking mu_) or the spare nodes.
	bool take_node(Node &nh, NodePool *pool) noexcept;
	void put_spare(Node &&nh) noexcept;
	size_t count_gaps(uintptr_t start, uintptr_t end) const noexcept;
	bool split_at(uintptr_t at, NodePool *pool) noexcept;
	Segs::iterator recycle(Segs::iterator it) noexcept;
	void normalize(uintptr_t start, uintptr_t end) noexcept;
	void forget(uintptr_t start, uintptr_t end) noexcept;
	bool run_around(uintptr_t page, uintptr_t &lo, uintptr_t &hi) const noexcept;
	bool release_unknown(uintptr_t page, uintptr_t &lo, uintptr_t &hi) noexcept;
	int uffd_unregister(uintptr_t start, uintptr_t end) noexcept;
	void unregister_all() noexcept;

	size_t page_;
	LockRef cache_lock_;
	Invalidate invalidate_;
	Fd uffd_;
	Fd stop_fd_;
	std::thread thread_;
	std::atomic<pid_t> monitor_tid_{0};
	std::atomic<bool> active_{false};
	std::atomic<bool> failed_{false};
	// Monitor thread only: a fault it could not release, and how often in a
	// row (a thread faulting again and again on it makes the monitor fail).
	uintptr_t stuck_page_ = 0;
	unsigned stuck_n_ = 0;

	// Watched pages as disjoint segments; mu_ guards them, gen_, the spare
	// nodes, and the ioctls on uffd_ other than the monitor's read and wake.
	// Lock order: cache_lock, then mu_. Nothing allocates under mu_: the
	// monitor takes it with cache_lock held.
	mutable std::mutex mu_;
	Segs segs_;
	uint64_t gen_ = 1;
	Node spare_[kSpareMax];
	size_t spare_n_ = 0;

	struct Counters {
		std::atomic<uint64_t> unmap{0}, remove{0}, remap{0}, fault{0}, other{0};
		std::atomic<uint64_t> woken{0}, invalidations{0}, watches{0};
		std::atomic<uint64_t> watch_failures{0}, unwatches{0}, unregister_failures{0};
	};
	Counters ctr_;
};

} // namespace vrma
