// The userfaultfd memory monitor: see mem_monitor.h for the contract and
// its hazards.
#include "mem_monitor.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 // Linux 5.14
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00) // Linux 6.1
#endif

namespace vrma {
namespace {

constexpr uint64_t kFeatures =
	UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;

// A full-mode userfaultfd, or -errno. Never UFFD_USER_MODE_ONLY (see the
// header). The device node grants full mode to whoever may open it, which is
// how a site can allow it without vm.unprivileged_userfaultfd.
int open_uffd() noexcept
{
	const int flags = O_CLOEXEC | O_NONBLOCK;
	const long fd = syscall(SYS_userfaultfd, flags);
	if (fd >= 0)
		return static_cast<int>(fd);
	const int err = errno;
	if (err == ENOSYS)
		return -ENOSYS;
	const int dev = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev >= 0) {
		const int u = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
		::close(dev);
		if (u >= 0)
			return u;
	}
	return -err;
}

int hexval(char c) noexcept
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

// The bounds of the mapping holding `addr`, from /proc/self/maps. Reads it
// through a stack buffer: the monitor must not allocate.
bool mapping_bounds(uintptr_t addr, uintptr_t &lo, uintptr_t &hi) noexcept
{
	const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	enum { Start, End, Rest } st = Start;
	uintptr_t a = 0, b = 0;
	bool found = false, done = false;
	char buf[4096];
	while (!done) {
		const ssize_t n = ::read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n && !done; i++) {
			const char c = buf[i];
			switch (st) {
			case Start:
				if (c == '-')
					st = End;
				else if (hexval(c) >= 0)
					a = a * 16 + static_cast<uintptr_t>(hexval(c));
				break;
			case End:
				if (hexval(c) >= 0) {
					b = b * 16 + static_cast<uintptr_t>(hexval(c));
					break;
				}
				st = Rest;
				if (addr >= a && addr < b) {
					lo = a;
					hi = b;
					found = done = true;
				} else if (a > addr) {
					done = true; // lines are sorted
				}
				break;
			case Rest:
				if (c == '\n') {
					st = Start;
					a = b = 0;
				}
				break;
			}
		}
	}
	::close(fd);
	return found;
}

} // namespace

void MemMonitor::Fd::reset(int fd) noexcept
{
	if (fd_ >= 0)
		::close(fd_);
	fd_ = fd;
}

MemMonitor::MemMonitor() noexcept
{
	const long p = sysconf(_SC_PAGESIZE);
	page_ = p > 0 ? static_cast<size_t>(p) : 4096;
}

MemMonitor::~MemMonitor() { close(); }

int MemMonitor::open(LockRef cache_lock, Invalidate invalidate) noexcept
{
	if (!cache_lock || !invalidate)
		return -EINVAL;
	if (thread_.joinable() || uffd_)
		return -EALREADY;

	const int u = open_uffd();
	if (u < 0)
		return u;
	Fd uffd(u);
	uffdio_api api{};
	api.api = UFFD_API;
	api.features = kFeatures;
	if (ioctl(uffd.get(), UFFDIO_API, &api) != 0)
		return -errno; // EINVAL: a kernel without these events
	if ((api.features & kFeatures) != kFeatures)
		return -EINVAL;
	Fd stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	if (!stop)
		return -errno;

	cache_lock_ = cache_lock;
	invalidate_.swap(invalidate);
	uffd_ = std::move(uffd);
	stop_fd_ = std::move(stop);
	failed_.store(false);
	stuck_page_ = 0;
	stuck_n_ = 0;
	{
		std::lock_guard g(mu_);
		gen_++;
		active_.store(true, std::memory_order_release);
	}

	// The monitor takes no signals: the application's handlers must not run
	// on it (it may hold the cache lock).
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = 0;
	try {
		thread_ = std::thread([this] { run(); });
	} catch (...) {
		rc = -EAGAIN;
	}
	pthread_sigmask(SIG_SETMASK, &old, nullptr);
	if (rc != 0) {
		{
			std::lock_guard g(mu_);
			active_.store(false);
			uffd_.reset();
		}
		stop_fd_.reset();
		invalidate_ = nullptr;
		cache_lock_ = {};
		return rc;
	}
	pthread_setname_np(thread_.native_handle(), "vrma-memmon");
	return 0;
}

void MemMonitor::close() noexcept
{
	if (thread_.joinable() && monitor_tid_.load() == gettid())
		return; // from the callback: joining itself would deadlock
	{
		// First, while the monitor still answers events: a forked child
		// may hold a copy of the descriptor, and then closing it would not
		// release the context nor the ranges it watches.
		std::lock_guard g(mu_);
		active_.store(false);
		if (uffd_)
			unregister_all();
	}
	if (thread_.joinable()) {
		const uint64_t one = 1;
		const ssize_t w = ::write(stop_fd_.get(), &one, sizeof one);
		(void)w;
		try {
			thread_.join();
		} catch (...) {
		}
	}
	{
		std::lock_guard g(mu_);
		uffd_.reset(); // the kernel unregisters what is left and wakes its waiters
		gen_++;
	}
	stop_fd_.reset();
	monitor_tid_.store(0);
	invalidate_ = nullptr;
	cache_lock_ = {};
}

void MemMonitor::run() noexcept
{
	monitor_tid_.store(gettid());
	pollfd fds[2] = {{uffd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
	for (;;) {
		fds[0].revents = fds[1].revents = 0;
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			std::lock_guard g(cache_lock_);
			fail();
			return;
		}
		if (fds[1].revents)
			return;
		if (!(fds[0].revents & (POLLIN | POLLERR | POLLHUP | POLLNVAL)))
			continue;
		// The lock before the read, held until every invalidation of what
		// was read is done: see the ordering hazard in the header.
		std::lock_guard g(cache_lock_);
		if ((fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) || !drain()) {
			if (!failed_.load())
				fail();
			return;
		}
	}
}

// Reads and handles what is pending; false on an error the monitor cannot
// go on from (or when handling failed it).
bool MemMonitor::drain() noexcept
{
	uffd_msg msgs[16];
	// Bounded, so lookups get the lock between bursts; the poll comes back
	// at once for the rest.
	for (int round = 0; round < 64; round++) {
		const ssize_t n = ::read(uffd_.get(), msgs, sizeof msgs);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN;
		}
		if (n == 0 || n % static_cast<ssize_t>(sizeof(uffd_msg)) != 0)
			return false;
		for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(uffd_msg); i++) {
			handle(msgs[i]);
			if (failed_.load())
				return false;
		}
	}
	return true;
}

void MemMonitor::handle(const uffd_msg &m) noexcept
{
	switch (m.event) {
	case UFFD_EVENT_UNMAP: {
		ctr_.unmap++;
		const uintptr_t s = m.arg.remove.start, e = m.arg.remove.end;
		{
			// The kernel dropped the registration with the mapping.
			std::lock_guard g(mu_);
			forget(s, e);
		}
		call_invalidate(s, e);
		break;
	}
	case UFFD_EVENT_REMOVE: {
		ctr_.remove++;
		const uintptr_t s = m.arg.remove.start, e = m.arg.remove.end;
		{
			// The mapping stays, its pages go: unregister, so the next
			// touch is an ordinary fault rather than one the monitor has
			// to answer.
			std::lock_guard g(mu_);
			forget(s, e);
			if (uffd_unregister(s, e) != 0)
				ctr_.unregister_failures++;
		}
		call_invalidate(s, e);
		break;
	}
	case UFFD_EVENT_REMAP: {
		ctr_.remap++;
		const uintptr_t from = m.arg.remap.from, to = m.arg.remap.to;
		const uintptr_t len = m.arg.remap.len;
		uintptr_t lo = to, hi = to + len;
		{
			std::lock_guard g(mu_);
			forget(from, from + len);
			// Normally unmapped already (an UNMAP follows); with
			// MREMAP_DONTUNMAP the emptied range stays mapped.
			uffd_unregister(from, from + len);
			// The destination inherited the registration (the whole new
			// mapping, grown or not): release it, nobody watched it.
			forget(to, to + len);
			if (!release_unknown(to, lo, hi)) {
				lo = to;
				hi = to + len;
			}
		}
		call_invalidate(from, from + len);
		call_invalidate(std::min(lo, to), std::max(hi, to + len));
		break;
	}
	case UFFD_EVENT_PAGEFAULT:
		ctr_.fault++;
		on_fault(m.arg.pagefault.address);
		break;
	default:
		ctr_.other++;
		break;
	}
}

// A thread touched a missing page the monitor's userfaultfd covers, and
// waits. A watched page went missing without an event (hole punched,
// truncated), or was zapped before the REMOVE was handled: the registrations
// of its run may pin pages no longer mapped there. Or it is a page an mremap
// added to a watched mapping. Either way: unregister, invalidate, wake; the
// thread faults again and the kernel handles it as usual.
void MemMonitor::on_fault(uintptr_t addr) noexcept
{
	const uintptr_t page = addr & ~static_cast<uintptr_t>(page_ - 1);
	uintptr_t lo = page, hi = page + page_;
	bool released;
	{
		std::lock_guard g(mu_);
		if (run_around(page, lo, hi)) {
			forget(lo, hi);
			released = uffd_unregister(lo, hi) == 0 ||
				   uffd_unregister(page, page + page_) == 0;
		} else {
			released = release_unknown(page, lo, hi);
		}
		uintptr_t vlo, vhi;
		if (!released && !mapping_bounds(page, vlo, vhi))
			released = true; // unmapped since: the wake lets it fail as it would have
	}
	call_invalidate(lo, hi);
	uffdio_range r{page, page_};
	if (ioctl(uffd_.get(), UFFDIO_WAKE, &r) == 0)
		ctr_.woken++;
	if (released) {
		stuck_n_ = 0;
		return;
	}
	ctr_.unregister_failures++;
	// Could not unregister (vm.max_map_count, say): the thread will fault
	// again. A few times in a row, and only closing the userfaultfd is
	// left to release it.
	if (page != stuck_page_) {
		stuck_page_ = page;
		stuck_n_ = 0;
	}
	if (++stuck_n_ >= 3)
		fail();
}

// Unrecoverable: nothing can be watched any more. Closing the userfaultfd
// unregisters everything and releases every waiting thread; the cache lock
// (held) keeps lookups out until everything is invalidated.
void MemMonitor::fail() noexcept
{
	failed_.store(true);
	{
		std::lock_guard g(mu_);
		active_.store(false);
		unregister_all();
		uffd_.reset();
		gen_++;
	}
	call_invalidate(0, UINTPTR_MAX);
}

void MemMonitor::call_invalidate(uintptr_t start, uintptr_t end) noexcept
{
	ctr_.invalidations++;
	try {
		invalidate_(start, end);
	} catch (...) {
	}
}

int MemMonitor::watch(uintptr_t addr, size_t len, MemWatch &out) noexcept
{
	out = MemWatch{};
	if (!active()) {
		ctr_.watch_failures++;
		return -ENODEV;
	}
	if (monitor_tid_.load() == gettid())
		return -EDEADLK;
	if (len == 0)
		len = 1;
	const uintptr_t mask = page_ - 1;
	if (addr > UINTPTR_MAX - (len - 1) || ((addr + (len - 1)) | mask) == UINTPTR_MAX) {
		ctr_.watch_failures++;
		return -EINVAL;
	}
	const uintptr_t start = addr & ~mask;
	const uintptr_t end = ((addr + (len - 1)) | mask) + 1;

	// Populated pages do not fault once registered (a fault would cost the
	// watch). Best effort, but a hole means the range cannot be cached.
	if (madvise(reinterpret_cast<void *>(start), end - start, MADV_POPULATE_READ) != 0 &&
	    errno == ENOMEM) {
		ctr_.watch_failures++;
		return -ENOMEM;
	}

	NodePool pool; // allocated out here, consumed under mu_
	int rc = -EAGAIN;
	for (int attempt = 0; attempt < 8; attempt++) {
		size_t want;
		{
			std::lock_guard g(mu_);
			if (!active_.load()) {
				rc = -ENODEV;
				break;
			}
			const size_t need = 2 + count_gaps(start, end);
			const size_t topup = spare_n_ < kSpareLow ? kSpareLow - spare_n_ : 0;
			if (pool.size() >= need) {
				split_at(start, &pool);
				split_at(end, &pool);
				// Uncovered pages get segments of count 0 first, so a
				// refused registration leaves everything as it was.
				uintptr_t pos = start;
				auto it = segs_.lower_bound(start);
				while (pos < end) {
					if (it != segs_.end() && it->first == pos) {
						pos = it->second.end;
						++it;
						continue;
					}
					const uintptr_t gap_end =
						(it == segs_.end() || it->first > end) ? end : it->first;
					Node nh;
					take_node(nh, &pool);
					nh.key() = pos;
					nh.mapped() = Seg{gap_end, 0, 0};
					it = std::next(segs_.insert(it, std::move(nh)));
					pos = gap_end;
				}
				uffdio_register reg{};
				reg.range.start = start;
				reg.range.len = end - start;
				reg.mode = UFFDIO_REGISTER_MODE_MISSING;
				if (ioctl(uffd_.get(), UFFDIO_REGISTER, &reg) != 0) {
					rc = -errno;
				} else {
					for (it = segs_.lower_bound(start);
					     it != segs_.end() && it->first < end; ++it)
						if (it->second.count++ == 0)
							it->second.since = gen_;
					out = MemWatch{start, end, gen_};
					rc = 0;
				}
				normalize(start, end);
				while (!pool.empty() && spare_n_ < kSpareMax) {
					put_spare(std::move(pool.back()));
					pool.pop_back();
				}
				break;
			}
			want = need + topup - pool.size();
		}
		try {
			Segs tmp;
			for (size_t i = 0; i < want; i++)
				tmp.emplace_hint(tmp.end(), i, Seg{0, 0, 0});
			pool.reserve(pool.size() + want);
			while (!tmp.empty())
				pool.push_back(tmp.extract(tmp.begin()));
		} catch (...) {
			rc = -ENOMEM;
			break;
		}
	}
	if (rc == 0)
		ctr_.watches++;
	else
		ctr_.watch_failures++;
	return rc; // what is left of `pool` is freed here, without mu_
}

void MemMonitor::unwatch(const MemWatch &w) noexcept
{
	if (w.empty())
		return;
	ctr_.unwatches++;
	NodePool pool;
	for (int attempt = 0; attempt < 2; attempt++) {
		{
			std::lock_guard g(mu_);
			if (!active_.load())
				return; // closed or failed: nothing is registered
			if (spare_n_ + pool.size() >= 2 || attempt == 1) {
				// Splits first: decrementing a segment that reaches past
				// the watch would drop someone else's coverage.
				if (!split_at(w.start, &pool) || !split_at(w.end, &pool)) {
					normalize(w.start, w.end);
					return; // out of memory: the range stays watched
				}
				auto it = segs_.lower_bound(w.start);
				for (; it != segs_.end() && it->first < w.end; ++it)
					if (it->second.since <= w.gen && it->second.count > 0)
						it->second.count--;
				it = segs_.lower_bound(w.start);
				while (it != segs_.end() && it->first < w.end) {
					if (it->second.count != 0) {
						++it;
						continue;
					}
					const uintptr_t lo = it->first;
					uintptr_t hi = it->second.end;
					auto j = std::next(it);
					while (j != segs_.end() && j->first == hi && j->first < w.end &&
					       j->second.count == 0) {
						hi = j->second.end;
						++j;
					}
					// Fails harmlessly when the range is already unmapped
					// and its event not yet handled.
					if (uffd_unregister(lo, hi) != 0)
						ctr_.unregister_failures++;
					it = j;
				}
				normalize(w.start, w.end);
				while (!pool.empty() && spare_n_ < kSpareMax) {
					put_spare(std::move(pool.back()));
					pool.pop_back();
				}
				return;
			}
		}
		try {
			Segs tmp;
			tmp.emplace(0, Seg{0, 0, 0});
			tmp.emplace(1, Seg{0, 0, 0});
			pool.reserve(2);
			while (!tmp.empty())
				pool.push_back(tmp.extract(tmp.begin()));
		} catch (...) {
		}
	}
}

MemMonitorStats MemMonitor::stats() const noexcept
{
	MemMonitorStats s;
	s.unmap_events = ctr_.unmap.load();
	s.remove_events = ctr_.remove.load();
	s.remap_events = ctr_.remap.load();
	s.fault_events = ctr_.fault.load();
	s.other_events = ctr_.other.load();
	s.faults_woken = ctr_.woken.load();
	s.invalidations = ctr_.invalidations.load();
	s.watches = ctr_.watches.load();
	s.watch_failures = ctr_.watch_failures.load();
	s.unwatches = ctr_.unwatches.load();
	s.unregister_failures = ctr_.unregister_failures.load();
	s.failed = failed_.load();
	std::lock_guard g(mu_);
	uintptr_t last_end = 0;
	bool first = true;
	for (const auto &[start, seg] : segs_) {
		if (first || start != last_end)
			s.watched_runs++;
		first = false;
		s.watched_bytes += seg.end - start;
		last_end = seg.end;
	}
	return s;
}

bool MemMonitor::watched(uintptr_t addr, size_t len) const noexcept
{
	if (len == 0)
		len = 1;
	const uintptr_t mask = page_ - 1;
	if (addr > UINTPTR_MAX - (len - 1) || ((addr + (len - 1)) | mask) == UINTPTR_MAX)
		return false;
	uintptr_t pos = addr & ~mask;
	const uintptr_t end = ((addr + (len - 1)) | mask) + 1;
	std::lock_guard g(mu_);
	auto it = segs_.upper_bound(pos);
	if (it == segs_.begin())
		return false;
	--it;
	while (pos < end) {
		if (it == segs_.end() || it->first > pos || it->second.end <= pos ||
		    it->second.count == 0)
			return false;
		pos = it->second.end;
		++it;
	}
	return true;
}

bool MemMonitor::take_node(Node &nh, NodePool *pool) noexcept
{
	if (pool && !pool->empty()) {
		nh = std::move(pool->back());
		pool->pop_back();
		return true;
	}
	if (spare_n_ == 0)
		return false;
	nh = std::move(spare_[--spare_n_]);
	return true;
}

void MemMonitor::put_spare(Node &&nh) noexcept
{
	if (spare_n_ < kSpareMax)
		spare_[spare_n_++] = std::move(nh);
	// else: nh frees its node when it goes (rare: the pool is full)
}

// Uncovered stretches of [start, end).
size_t MemMonitor::count_gaps(uintptr_t start, uintptr_t end) const noexcept
{
	uintptr_t pos = start;
	auto it = segs_.upper_bound(start);
	if (it != segs_.begin()) {
		auto p = std::prev(it);
		if (p->second.end > start)
			pos = p->second.end;
	}
	size_t n = 0;
	while (pos < end) {
		if (it == segs_.end() || it->first >= end) {
			n++;
			break;
		}
		if (it->first > pos)
			n++;
		pos = it->second.end;
		++it;
	}
	return n;
}

// Makes `at` a segment boundary. False (nothing changed) without a node.
bool MemMonitor::split_at(uintptr_t at, NodePool *pool) noexcept
{
	auto it = segs_.upper_bound(at);
	if (it == segs_.begin())
		return true;
	--it;
	if (it->first == at || it->second.end <= at)
		return true;
	Node nh;
	if (!take_node(nh, pool))
		return false;
	nh.key() = at;
	nh.mapped() = it->second;
	it->second.end = at;
	segs_.insert(std::next(it), std::move(nh));
	return true;
}

MemMonitor::Segs::iterator MemMonitor::recycle(Segs::iterator it) noexcept
{
	auto next = std::next(it);
	put_spare(segs_.extract(it));
	return next;
}

// Drops segments of count 0 and merges equal neighbours in and around
// [start, end).
void MemMonitor::normalize(uintptr_t start, uintptr_t end) noexcept
{
	auto it = segs_.lower_bound(start);
	if (it != segs_.begin())
		it = std::prev(it);
	while (it != segs_.end() && it->first <= end) {
		if (it->second.count == 0) {
			it = recycle(it);
			continue;
		}
		auto nx = std::next(it);
		if (nx != segs_.end() && nx->first == it->second.end &&
		    nx->second.count == it->second.count && nx->second.since == it->second.since) {
			it->second.end = nx->second.end;
			recycle(nx);
			continue;
		}
		++it;
	}
}

// The monitor no longer watches [start, end): its mapping is gone or
// unregistered. Without a spare node to split an edge segment, the whole
// segment goes: that part stays registered with the kernel, unrecorded, which
// is safe (its events still invalidate; it is only never unregistered).
void MemMonitor::forget(uintptr_t start, uintptr_t end) noexcept
{
	if (start >= end)
		return;
	gen_++;
	split_at(start, nullptr);
	split_at(end, nullptr);
	auto it = segs_.upper_bound(start);
	if (it != segs_.begin()) {
		auto p = std::prev(it);
		if (p->second.end > start)
			it = p;
	}
	while (it != segs_.end() && it->first < end)
		it = recycle(it);
}

// The run of contiguous watched segments holding `page`.
bool MemMonitor::run_around(uintptr_t page, uintptr_t &lo, uintptr_t &hi) const noexcept
{
	auto it = segs_.upper_bound(page);
	if (it == segs_.begin())
		return false;
	--it;
	if (it->second.end <= page)
		return false;
	auto first = it;
	while (first != segs_.begin() && std::prev(first)->second.end == first->first)
		--first;
	auto last = it;
	for (auto nx = std::next(last); nx != segs_.end() && nx->first == last->second.end; ++nx)
		last = nx;
	lo = first->first;
	hi = last->second.end;
	return true;
}

// Unregisters what the kernel has registered around an unwatched `page`: its
// mapping, clipped to the stretch between watched segments (so a mapping
// grown by mremap is released at once, not page by page); the page alone
// when that fails (the range reached a mapping userfaultfd cannot take).
bool MemMonitor::release_unknown(uintptr_t page, uintptr_t &lo, uintptr_t &hi) noexcept
{
	uintptr_t glo = 0, ghi = UINTPTR_MAX & ~static_cast<uintptr_t>(page_ - 1);
	auto it = segs_.upper_bound(page);
	if (it != segs_.end())
		ghi = it->first;
	if (it != segs_.begin())
		glo = std::prev(it)->second.end;
	uintptr_t vlo, vhi;
	if (mapping_bounds(page, vlo, vhi)) {
		lo = std::max(glo, vlo);
		hi = std::min(ghi, vhi);
		if (lo <= page && page < hi && uffd_unregister(lo, hi) == 0)
			return true;
	}
	lo = page;
	hi = page + page_;
	return uffd_unregister(lo, hi) == 0;
}

int MemMonitor::uffd_unregister(uintptr_t start, uintptr_t end) noexcept
{
	if (!uffd_ || start >= end)
		return -EBADF;
	uffdio_range r{start, end - start};
	return ioctl(uffd_.get(), UFFDIO_UNREGISTER, &r) == 0 ? 0 : -errno;
}

// Every watched run, unregistered and forgotten.
void MemMonitor::unregister_all() noexcept
{
	auto it = segs_.begin();
	while (it != segs_.end()) {
		const uintptr_t lo = it->first;
		uintptr_t hi = it->second.end;
		auto j = std::next(it);
		while (j != segs_.end() && j->first == hi) {
			hi = j->second.end;
			++j;
		}
		uffd_unregister(lo, hi);
		it = j;
	}
	while (!segs_.empty())
		recycle(segs_.begin());
	gen_++;
}

} // namespace vrma
