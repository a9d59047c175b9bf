// MemMonitor with a real userfaultfd: munmap, madvise(MADV_DONTNEED), mremap
// (moved and grown), brk shrink and mmap(MAP_FIXED) over a watched range
// invalidate it before the call returns; faults in watched ranges (a hole
// punched in a memfd, pages an mremap added) are answered, from user and
// kernel mode; a RegCache behind it never serves a lookup of unmapped memory,
// even with a thread looking up concurrently; mappings userfaultfd cannot
// take are refused; overlapping watches, late unwatch() of dropped ranges,
// close() with a forked child holding the descriptor; and open() without
// privilege. The kernel's side is checked in /proc/self/smaps ("um": armed
// for missing-page faults), not only the monitor's bookkeeping.
// Needs a full userfaultfd (root, CAP_SYS_PTRACE, vm.unprivileged_userfaultfd
// or /dev/userfaultfd): without it each test prints one "skipped" line.
#include "unit.h"
#include "fast_mutex.h"
#include "mem_monitor.h"
#include "reg_cache.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/falloc.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

using vrma::MemMonitor;
using vrma::MemMonitorStats;
using vrma::MemWatch;
using vrma::RegCache;
using vrma::RegEntry;
using vrma::RegRetired;

namespace {

const size_t P = static_cast<size_t>(sysconf(_SC_PAGESIZE));

uintptr_t U(const void *p) { return reinterpret_cast<uintptr_t>(p); }
void *H(uintptr_t n) { return reinterpret_cast<void *>(n); }

struct Range {
	uintptr_t start, end;
};

// The provider's side: a RegCache under its lock, invalidated by the monitor.
// The callback records every range (under the lock, into reserved space: the
// callback must not allocate).
struct Harness {
	vrma::CheckedMutex lock;
	std::vector<Range> calls; // under lock
	RegCache cache;
	RegRetired retired; // under lock
	MemMonitor mon;

	Harness() { calls.reserve(4096); }
	~Harness()
	{
		mon.close();
		std::lock_guard g(lock);
		cache.flush(retired);
		while (retired.pop()) {
		}
	}
	int open()
	{
		return mon.open(&lock, [this](uintptr_t s, uintptr_t e) {
			if (calls.size() < calls.capacity())
				calls.push_back({s, e});
			cache.invalidate(s, e - s, retired);
		});
	}
	std::vector<Range> take_calls()
	{
		std::lock_guard g(lock);
		std::vector<Range> v = calls;
		calls.clear();
		return v;
	}
	// Waits for the monitor to finish what it is handling.
	void sync() { std::lock_guard g(lock); }
};

// Opens h's monitor; false after one "skipped" line when userfaultfd is not
// available to this process.
bool open_or_skip(Harness &h, const char *test)
{
	const int rc = h.open();
	if (rc == -EPERM || rc == -EACCES || rc == -ENOSYS) {
		printf("mem_monitor: %s: skipped: no full userfaultfd here (%s)\n", test,
		       strerror(-rc));
		return false;
	}
	ck_assert_int_eq(rc, 0);
	ck_assert(h.mon.active());
	return true;
}

char *map_anon(size_t pages, int fill = 0x5a)
{
	void *p = mmap(nullptr, pages * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	ck_assert(p != MAP_FAILED);
	memset(p, fill, pages * P);
	return static_cast<char *>(p);
}

bool has_call(const std::vector<Range> &v, uintptr_t start, uintptr_t end)
{
	for (const Range &r : v)
		if (r.start == start && r.end == end)
			return true;
	return false;
}

bool call_covers(const std::vector<Range> &v, uintptr_t start, uintptr_t end)
{
	for (const Range &r : v)
		if (r.start <= start && r.end >= end)
			return true;
	return false;
}

// The kernel's view: mappings and whether each is armed for missing-page
// userfaults ("um" in VmFlags).
struct Vma {
	uintptr_t lo, hi;
	bool armed;
};

std::vector<Vma> read_vmas()
{
	std::ifstream f("/proc/self/smaps");
	std::vector<Vma> v;
	std::string line;
	while (std::getline(f, line)) {
		unsigned long lo, hi;
		char c;
		if (sscanf(line.c_str(), "%lx-%lx%c", &lo, &hi, &c) == 3 && c == ' ') {
			v.push_back({lo, hi, false});
		} else if (line.rfind("VmFlags:", 0) == 0 && !v.empty()) {
			v.back().armed = (line + " ").find(" um ") != std::string::npos;
		}
	}
	return v;
}

bool armed_in(const std::vector<Vma> &v, uintptr_t a)
{
	for (const Vma &m : v)
		if (a >= m.lo && a < m.hi)
			return m.armed;
	return false;
}

bool armed(const void *p) { return armed_in(read_vmas(), U(p)); }

// A hang is a failure, also with CK_FORK=no.
struct Deadline {
	explicit Deadline(unsigned s) { alarm(s); }
	~Deadline() { alarm(0); }
};

} // namespace

START_TEST(mm_munmap)
{
	Harness h;
	if (!open_or_skip(h, "munmap"))
		return;
	Deadline d(20);
	char *a = map_anon(4);
	MemWatch w;
	ck_assert_int_eq(h.mon.watch(U(a) + 10, 4 * P - 20, w), 0);
	ck_assert_uint_eq(w.start, U(a));
	ck_assert_uint_eq(w.end, U(a) + 4 * P);
	ck_assert(h.mon.watched(U(a), 4 * P));
	ck_assert(armed(a) && armed(a + 3 * P));

	// A page in the middle: the callback ran with exactly that page before
	// munmap returned (it runs under the lock from before the monitor reads
	// the event, and munmap returns only once it is read).
	ck_assert_int_eq(munmap(a + P, P), 0);
	{
		std::lock_guard g(h.lock);
		ck_assert_uint_eq(h.calls.size(), 1);
		ck_assert_uint_eq(h.calls[0].start, U(a) + P);
		ck_assert_uint_eq(h.calls[0].end, U(a) + 2 * P);
		h.calls.clear();
	}
	ck_assert(h.mon.watched(U(a), P));
	ck_assert(!h.mon.watched(U(a) + P, P));
	ck_assert(h.mon.watched(U(a) + 2 * P, 2 * P));
	MemMonitorStats s = h.mon.stats();
	ck_assert_uint_eq(s.watched_runs, 2);
	ck_assert_uint_eq(s.watched_bytes, 3 * P);

	ck_assert_int_eq(munmap(a, 4 * P), 0);
	{
		std::lock_guard g(h.lock);
		ck_assert_uint_eq(h.calls.size(), 1);
		ck_assert_uint_eq(h.calls[0].start, U(a));
		ck_assert_uint_eq(h.calls[0].end, U(a) + 4 * P);
	}
	s = h.mon.stats();
	ck_assert_uint_eq(s.unmap_events, 2);
	ck_assert_uint_eq(s.watched_bytes, 0);
	ck_assert_uint_eq(s.fault_events, 0);
	// The provider unwatches when it deregisters, long after: nothing left.
	h.mon.unwatch(w);
	ck_assert_uint_eq(h.mon.stats().watched_bytes, 0);
	ck_assert(!s.failed);
}
END_TEST

START_TEST(mm_dontneed)
{
	Harness h;
	if (!open_or_skip(h, "dontneed"))
		return;
	Deadline d(20);
	char *a = map_anon(2, 0xab);
	MemWatch w;
	ck_assert_int_eq(h.mon.watch(U(a), 2 * P, w), 0);
	ck_assert_int_eq(madvise(a, 2 * P, MADV_DONTNEED), 0);
	{
		std::lock_guard g(h.lock);
		ck_assert_uint_eq(h.calls.size(), 1);
		ck_assert_uint_eq(h.calls[0].start, U(a));
		ck_assert_uint_eq(h.calls[0].end, U(a) + 2 * P);
	}
	ck_assert_uint_eq(h.mon.stats().remove_events, 1);
	ck_assert(!h.mon.watched(U(a), 1));
	ck_assert(!armed(a)); // unregistered: the next touches are ordinary faults

	// User mode: zero-filled pages.
	ck_assert_int_eq(a[0], 0);
	ck_assert_int_eq(a[P - 1], 0);
	a[0] = 1;
	// Kernel mode: read(2) into the other zapped page.
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(write(p[1], "hello", 5), 5);
	ck_assert_int_eq(read(p[0], a + P + 100, 5), 5);
	ck_assert_int_eq(memcmp(a + P + 100, "hello", 5), 0);
	ck_assert_int_eq(a[P], 0);
	ck_assert_int_eq(a[0], 1);
	close(p[0]);
	close(p[1]);
	// The event was handled (under the lock) before anything touched the
	// pages: no fault reached the monitor.
	h.sync();
	ck_assert_uint_eq(h.mon.stats().fault_events, 0);
	h.mon.unwatch(w);
	munmap(a, 2 * P);
}
END_TEST

// A hole punched in a memfd zaps its pages with no event: the cache keeps the
// old page until something touches the range, and that touch is a fault the
// monitor answers (invalidate, unregister, wake), from user or kernel mode.
START_TEST(mm_fault_punched_hole)
{
	Harness h;
	if (!open_or_skip(h, "fault_punched_hole"))
		return;
	Deadline d(20);
	const int fd = memfd_create("mm_fault", MFD_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4 * P), 0);
	char *a = static_cast<char *>(
		mmap(nullptr, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
	ck_assert(a != MAP_FAILED);
	memset(a, 0x33, 4 * P);
	MemWatch w;
	ck_assert_int_eq(h.mon.watch(U(a), 4 * P, w), 0); // shmem can be watched
	{
		std::lock_guard g(h.lock);
		RegRetired out;
		RegEntry *e = h.cache.insert(U(a), U(a) + 4 * P, 1, H(0x10), h.cache.epoch(), out);
		ck_assert_ptr_nonnull(e);
		h.cache.release(e);
	}

	ck_assert_int_eq(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, P, P), 0);
	h.sync();
	ck_assert_uint_eq(h.take_calls().size(), 0); // the hazard: no event
	{
		std::lock_guard g(h.lock);
		RegEntry *e = h.cache.lookup(U(a), P, 1);
		ck_assert_ptr_nonnull(e); // still served from the old page
		h.cache.release(e);
	}

	// Kernel-mode fault: read(2) into the punched page.
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(write(p[1], "hello", 5), 5);
	ck_assert_int_eq(read(p[0], a + P + 8, 5), 5);
	ck_assert_int_eq(memcmp(a + P + 8, "hello", 5), 0);
	ck_assert_int_eq(a[P], 0);
	ck_assert_int_eq(a[0], 0x33);
	// The unregistration already woke the thread; the monitor finishes
	// (invalidation, counters) before it lets go of the lock.
	h.sync();
	std::vector<Range> calls = h.take_calls();
	ck_assert(has_call(calls, U(a), U(a) + 4 * P)); // the whole watched run
	MemMonitorStats s = h.mon.stats();
	ck_assert_uint_eq(s.fault_events, 1);
	ck_assert_uint_eq(s.faults_woken, 1);
	ck_assert(!h.mon.watched(U(a), 1));
	ck_assert(!armed(a));
	{
		std::lock_guard g(h.lock);
		ck_assert_ptr_null(h.cache.lookup(U(a), P, 1));
		ck_assert_ptr_eq(h.retired.pop(), H(0x10));
	}
	h.mon.unwatch(w);

	// User-mode fault: watch again, punch, write.
	ck_assert_int_eq(h.mon.watch(U(a), 4 * P, w), 0);
	ck_assert_int_eq(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 3 * P, P), 0);
	a[3 * P + 1] = 7;
	ck_assert_int_eq(a[3 * P], 0);
	ck_assert_int_eq(a[3 * P + 1], 7);
	h.sync();
	s = h.mon.stats();
	ck_assert_uint_eq(s.fault_events, 2);
	ck_assert_uint_eq(s.faults_woken, 2);
	ck_assert(has_call(h.take_calls(), U(a), U(a) + 4 * P));
	ck_assert(!s.failed);
	h.mon.unwatch(w);
	close(p[0]);
	close(p[1]);
	munmap(a, 4 * P);
	close(fd);
}
END_TEST

// mremap growing a watched mapping in place: the new pages inherit the
// registration (no event). The first touch is answered, and the whole grown
// tail is released at once.
START_TEST(mm_fault_grown_tail)
{
	Harness h;
	if (!open_or_skip(h, "fault_grown_tail"))
		return;
	Deadline d(20);
	char *a = map_anon(8);
	ck_assert_int_eq(munmap(a + 2 * P, 6 * P), 0);
	MemWatch w;
	ck_assert_int_eq(h.mon.watch(U(a), 2 * P, w), 0);
	char *b = static_cast<char *>(mremap(a, 2 * P, 6 * P, 0));
	ck_assert(b == a);
	ck_assert(armed(a + 4 * P)); // inherited
	b[4 * P] = 7;
	ck_assert_int_eq(b[4 * P], 7);
	h.sync();
	MemMonitorStats s = h.mon.stats();
	ck_assert_uint_eq(s.fault_events, 1);
	ck_assert_uint_eq(s.faults_woken, 1);
	b[2 * P] = 8;
	b[5 * P] = 9;
	h.sync();
	ck_assert_uint_eq(h.mon.stats().fault_events, 1);
	std::vector<Vma> v = read_vmas();
	ck_assert(armed_in(v, U(a)) && armed_in(v, U(a) + P));
	ck_assert(!armed_in(v, U(a) + 2 * P) && !armed_in(v, U(a) + 5 * P));
	ck_assert(h.mon.watched(U(a), 2 * P)); // the watched part is untouched
	ck_assert_int_eq(a[0], 0x5a);
	h.mon.unwatch(w);
	ck_assert(!armed(a));
	munmap(a, 6 * P);
}
END_TEST

START_TEST(mm_mremap_move)
{
	Harness h;
	if (!open_or_skip(h, "mremap_move"))
		return;
	Deadline d(20);
	char *dst = static_cast<char *>(
		mmap(nullptr, 16 * P, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	ck_assert(dst != MAP_FAILED);
	char *a = map_anon(2, 0x11);
	MemWatch w;
	ck_assert_int_eq(h.mon.watch(U(a), 2 * P, w), 0);
	char *b = static_cast<char *>(
		mremap(a, 2 * P, 2 * P, MREMAP_MAYMOVE | MREMAP_FIXED, dst + 2 * P));
	ck_assert(b == dst + 2 * P);
	ck_assert(call_covers(h.take_calls(), U(a), U(a) + 2 * P));
	MemMonitorStats s = h.mon.stats();
	ck_assert_uint_eq(s.remap_events, 1);
	ck_assert_uint_eq(s.watched_bytes, 0);
	ck_assert(!armed(b)); // the destination inherited it and was released
	ck_assert_int_eq(b[0], 0x11);
	ck_assert_int_eq(b[2 * P - 1], 0x11);
	const uint64_t unmaps = s.unmap_events;
	ck_assert_int_eq(munmap(b, 2 * P), 0);
	h.sync();
	ck_assert_uint_eq(h.mon.stats().unmap_events, unmaps); // not registered any more

	// Moved and grown: the whole new mapping is released, no fault later.
	a = map_anon(2, 0x22);
	ck_assert_int_eq(h.mon.watch(U(a), 2 * P, w), 0);
	b = static_cast<char *>(mremap(a, 2 * P, 4 * P, MREMAP_MAYMOVE | MREMAP_FIXED, dst + 8 * P));
	ck_assert(b == dst + 8 * P);
	ck_assert(call_covers(h.take_calls(), U(a), U(a) + 2 * P));
	ck_assert(!armed(b) && !armed(b + 3 * P));
	b[3 * P] = 1;
	ck_assert_int_eq(b[P], 0x22);
	h.sync();
	s = h.mon.stats();
	ck_assert_uint_eq(s.remap_events, 2);
	ck_assert_uint_eq(s.fault_events, 0);
	h.mon.unwatch(w);
	munmap(dst, 16 * P);
}
END_TEST

// The whole point, with a RegCache: an address unmapped and mapped again with
// new content is never served from the old registration, not even by a lookup
// racing the munmap from another thread.
START_TEST(mm_regcache_remap)
{
	Harness h;
	if (!open_or_skip(h, "regcache_remap"))
		return;
	Deadline d(60);
	RegCache &c = h.cache;

	char *a = map_anon(4, 'o');
	uint64_t since;
	{
		std::lock_guard g(h.lock);
		ck_assert_ptr_null(c.lookup(U(a), P, 1));
		since = c.epoch();
	}
	MemWatch w;
	ck_assert_int_eq(h.mon.watch(U(a), 4 * P, w), 0); // without the lock
	{
		std::lock_guard g(h.lock);
		RegEntry *e = c.insert(U(a), U(a) + 4 * P, 1, H(0x100), since, h.retired);
		ck_assert_ptr_nonnull(e);
		ck_assert(!e->stale());
		c.release(e);
		e = c.lookup(U(a) + P, P, 1);
		ck_assert_ptr_nonnull(e);
		c.release(e);
	}
	ck_assert_int_eq(munmap(a, 4 * P), 0);
	{
		std::lock_guard g(h.lock);
		ck_assert_ptr_null(c.lookup(U(a) + P, P, 1));
		ck_assert_ptr_eq(h.retired.pop(), H(0x100));
	}
	void *n = mmap(a, 4 * P, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (n == MAP_FAILED) {
		// Another thread's mapping (a sanitizer's allocator) took it.
		ck_assert_int_eq(errno, EEXIST);
		printf("mem_monitor: regcache_remap: the address was taken, new mapping "
		       "elsewhere\n");
	} else {
		ck_assert(n == a);
		memset(n, 'n', 4 * P);
		{
			std::lock_guard g(h.lock);
			ck_assert_ptr_null(c.lookup(U(a), 4 * P, 1));
		}
		h.mon.unwatch(w); // the deregistration: the new mapping was never watched
		ck_assert(!armed(a));
		munmap(a, 4 * P);
	}

	// An invalidation between epoch() and insert() makes the insert stale.
	a = map_anon(1);
	{
		std::lock_guard g(h.lock);
		since = c.epoch();
	}
	ck_assert_int_eq(h.mon.watch(U(a), P, w), 0);
	ck_assert_int_eq(madvise(a, P, MADV_DONTNEED), 0);
	{
		std::lock_guard g(h.lock);
		RegEntry *e = c.insert(U(a), U(a) + P, 1, H(0x200), since, h.retired);
		ck_assert_ptr_nonnull(e);
		ck_assert(e->stale());
		ck_assert_ptr_eq(c.release(e), H(0x200));
	}
	h.mon.unwatch(w);
	munmap(a, P);

	// A thread looking up each range whose munmap has returned must miss
	// (a hit on the registration of the old mapping is what the monitor's
	// lock ordering prevents). The kernel tends to hand back the same
	// address, so new mappings often reuse it.
	struct Gone {
		uintptr_t addr;
		void *handle;
	};
	const int kRounds = 300;
	std::vector<Gone> gone(kRounds);
	std::atomic<int> published{-1};
	std::atomic<bool> stop{false};
	std::atomic<int> checked{-1}; // the last round the thread looked up
	std::atomic<long> bad{0}, lookups{0};
	std::thread t([&] {
		while (!stop.load()) {
			const int i = published.load(std::memory_order_acquire);
			if (i < 0)
				continue;
			std::lock_guard g(h.lock);
			RegEntry *e = c.lookup(gone[i].addr, P, 1);
			lookups++;
			if (e) {
				if (e->handle() == gone[i].handle)
					bad++;
				c.release(e);
			}
			checked.store(i);
		}
	});
	long main_bad = 0;
	for (int i = 0; i < kRounds; i++) {
		char *m = map_anon(2, i);
		{
			std::lock_guard g(h.lock);
			since = c.epoch();
		}
		ck_assert_int_eq(h.mon.watch(U(m), 2 * P, w), 0);
		void *handle = H(0x1000 + 16 * static_cast<uintptr_t>(i));
		{
			std::lock_guard g(h.lock);
			RegEntry *e = c.insert(U(m), U(m) + 2 * P, 1, handle, since, h.retired);
			ck_assert_ptr_nonnull(e);
			c.release(e);
		}
		ck_assert_int_eq(munmap(m, 2 * P), 0);
		gone[i] = {U(m), handle};
		published.store(i, std::memory_order_release);
		{
			std::lock_guard g(h.lock);
			RegEntry *e = c.lookup(U(m), P, 1);
			if (e) {
				main_bad++;
				c.release(e);
			}
			while (h.retired.pop()) {
			}
		}
		h.mon.unwatch(w);
		// It keeps looking this one up during the next round's munmap.
		while (checked.load() < i)
			std::this_thread::yield();
	}
	stop.store(true);
	t.join();
	ck_assert_int_eq(main_bad, 0);
	ck_assert_int_eq(bad.load(), 0);
	ck_assert_int_ge(lookups.load(), kRounds);
	const MemMonitorStats s = h.mon.stats();
	ck_assert_uint_ge(s.unmap_events, kRounds + 1);
	ck_assert_uint_eq(s.watched_bytes, 0);
	ck_assert(!s.failed);
}
END_TEST

START_TEST(mm_brk_shrink)
{
	Harness h;
	if (!open_or_skip(h, "brk_shrink"))
		return;
	Deadline d(20);
	char *cur = static_cast<char *>(sbrk(0));
	const size_t pad = (P - U(cur) % P) % P;
	ck_assert(sbrk(static_cast<intptr_t>(pad + 4 * P)) == cur);
	char *a = cur + pad;
	memset(a, 1, 4 * P);
	MemWatch w;
	ck_assert_int_eq(h.mon.watch(U(a), 4 * P, w), 0);
	if (sbrk(0) != a + 4 * P) {
		// Something (malloc) moved the break in between: shrinking it
		// now would take that memory away.
		printf("mem_monitor: brk_shrink: skipped: the break moved under the test\n");
		h.mon.unwatch(w);
		return;
	}
	ck_assert(sbrk(-static_cast<intptr_t>(4 * P)) != reinterpret_cast<void *>(-1));
	{
		std::lock_guard g(h.lock);
		ck_assert(has_call(h.calls, U(a), U(a) + 4 * P));
	}
	ck_assert_uint_eq(h.mon.stats().unmap_events, 1);
	ck_assert(!h.mon.watched(U(a), 1));
	ck_assert(sbrk(-static_cast<intptr_t>(pad)) != reinterpret_cast<void *>(-1));
	h.mon.unwatch(w);
}
END_TEST

START_TEST(mm_refused)
{
	Harness h;
	if (!open_or_skip(h, "refused"))
		return;
	Deadline d(20);
	MemWatch w;
	// A file on a disk filesystem (tmpfs would be shmem, which is allowed).
	const char *dirs[] = {"/var/tmp", "/tmp", "."};
	const char *dir = nullptr;
	for (const char *dd : dirs) {
		struct statfs sf;
		if (statfs(dd, &sf) == 0 && sf.f_type != TMPFS_MAGIC && access(dd, W_OK) == 0) {
			dir = dd;
			break;
		}
	}
	if (!dir) {
		printf("mem_monitor: refused: file mappings skipped: no writable disk directory\n");
	} else {
		std::string path = std::string(dir) + "/vrma-mm-XXXXXX";
		std::vector<char> buf(path.begin(), path.end());
		buf.push_back('\0');
		const int fd = mkstemp(buf.data());
		ck_assert_int_ge(fd, 0);
		unlink(buf.data());
		ck_assert_int_eq(ftruncate(fd, 4 * P), 0);
		void *s = mmap(nullptr, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		void *pv = mmap(nullptr, 4 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
		ck_assert(s != MAP_FAILED && pv != MAP_FAILED);
		ck_assert_int_eq(h.mon.watch(U(s), 4 * P, w), -EINVAL);
		ck_assert(w.empty());
		ck_assert_int_eq(h.mon.watch(U(pv), 4 * P, w), -EINVAL);
		ck_assert(!h.mon.watched(U(s), 1) && !armed(s) && !armed(pv));
		munmap(s, 4 * P);
		munmap(pv, 4 * P);
		close(fd);
	}

	// Unmapped, with a hole, wrapping.
	char *a = map_anon(3);
	ck_assert_int_eq(munmap(a + P, P), 0);
	ck_assert_int_lt(h.mon.watch(U(a) + P, P, w), 0);
	ck_assert_int_eq(h.mon.watch(U(a), 3 * P, w), -ENOMEM);
	ck_assert(!armed(a) && !armed(a + 2 * P));
	ck_assert_int_eq(h.mon.watch(UINTPTR_MAX - 10, 100, w), -EINVAL);
	ck_assert_int_eq(h.mon.watch(UINTPTR_MAX - 10, 1, w), -EINVAL);
	ck_assert_uint_eq(h.mon.stats().watched_bytes, 0);

	// Another userfaultfd (another domain's monitor) owns the range.
	Harness other;
	ck_assert_int_eq(other.open(), 0);
	MemWatch ow;
	ck_assert_int_eq(other.mon.watch(U(a), P, ow), 0);
	ck_assert_int_eq(h.mon.watch(U(a), P, w), -EBUSY);
	other.mon.unwatch(ow);
	ck_assert_int_eq(h.mon.watch(U(a), P, w), 0);
	h.mon.unwatch(w);
	munmap(a, 3 * P);
	ck_assert_uint_ge(h.mon.stats().watch_failures, 5);
}
END_TEST

START_TEST(mm_overlap)
{
	Harness h;
	if (!open_or_skip(h, "overlap"))
		return;
	Deadline d(20);
	char *a = map_anon(8);
	MemWatch A, B;
	ck_assert_int_eq(h.mon.watch(U(a), 4 * P, A), 0);
	ck_assert_int_eq(h.mon.watch(U(a) + 2 * P, 4 * P, B), 0);
	MemMonitorStats s = h.mon.stats();
	ck_assert_uint_eq(s.watched_runs, 1);
	ck_assert_uint_eq(s.watched_bytes, 6 * P);
	std::vector<Vma> v = read_vmas();
	ck_assert(armed_in(v, U(a)) && armed_in(v, U(a) + 5 * P) && !armed_in(v, U(a) + 6 * P));

	h.mon.unwatch(A);
	ck_assert(!h.mon.watched(U(a), 2 * P));
	ck_assert(h.mon.watched(U(a) + 2 * P, 4 * P));
	v = read_vmas();
	ck_assert(!armed_in(v, U(a)) && !armed_in(v, U(a) + P));
	ck_assert(armed_in(v, U(a) + 2 * P) && armed_in(v, U(a) + 5 * P));
	ck_assert_int_eq(munmap(a, P), 0); // not watched any more: no event
	h.sync();
	ck_assert_uint_eq(h.mon.stats().unmap_events, 0);
	ck_assert_uint_eq(h.take_calls().size(), 0);
	h.mon.unwatch(B);
	ck_assert_uint_eq(h.mon.stats().watched_bytes, 0);
	ck_assert(!armed(a + 2 * P));

	// The same range twice, and a range inside another.
	MemWatch C, D, E, F;
	ck_assert_int_eq(h.mon.watch(U(a) + P, 2 * P, C), 0);
	ck_assert_int_eq(h.mon.watch(U(a) + P, 2 * P, D), 0);
	h.mon.unwatch(C);
	ck_assert(h.mon.watched(U(a) + P, 2 * P) && armed(a + P));
	h.mon.unwatch(D);
	ck_assert(!h.mon.watched(U(a) + P, 1) && !armed(a + P));
	ck_assert_int_eq(h.mon.watch(U(a) + P, 7 * P, E), 0);
	ck_assert_int_eq(h.mon.watch(U(a) + 3 * P, P, F), 0);
	h.mon.unwatch(E);
	ck_assert(h.mon.watched(U(a) + 3 * P, P));
	ck_assert_uint_eq(h.mon.stats().watched_bytes, P);
	v = read_vmas();
	ck_assert(armed_in(v, U(a) + 3 * P) && !armed_in(v, U(a) + 2 * P) &&
		  !armed_in(v, U(a) + 4 * P));
	h.mon.unwatch(F);
	ck_assert_uint_eq(h.mon.stats().watched_bytes, 0);

	// A late unwatch() of a range that was unmapped and watched again must
	// leave the new watch alone.
	MemWatch W1, W2;
	ck_assert_int_eq(h.mon.watch(U(a) + 4 * P, 2 * P, W1), 0);
	void *n = mmap(a + 4 * P, 2 * P, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	ck_assert(n == a + 4 * P);
	ck_assert(has_call(h.take_calls(), U(a) + 4 * P, U(a) + 6 * P));
	ck_assert_int_eq(h.mon.watch(U(a) + 4 * P, 2 * P, W2), 0);
	h.mon.unwatch(W1);
	ck_assert(h.mon.watched(U(a) + 4 * P, 2 * P));
	ck_assert(armed(a + 4 * P) && armed(a + 5 * P));
	ck_assert_int_eq(munmap(a + 5 * P, P), 0); // still reported
	ck_assert(has_call(h.take_calls(), U(a) + 5 * P, U(a) + 6 * P));
	h.mon.unwatch(W2);
	ck_assert(!armed(a + 4 * P));
	ck_assert_uint_eq(h.mon.stats().watched_bytes, 0);
	munmap(a, 8 * P);
}
END_TEST

// Random watches, unwatches, madvise and mmap(MAP_FIXED) over an arena,
// against a model of which page each live watch still covers; the monitor's
// bookkeeping and the kernel's registration must both match it.
START_TEST(mm_random_vs_model)
{
	Harness h;
	if (!open_or_skip(h, "random_vs_model"))
		return;
	Deadline d(120);
	const size_t N = 48;
	char *a = map_anon(N);
	struct Live {
		MemWatch w;
		std::vector<bool> pages; // still covered by this watch
	};
	std::vector<Live> live;
	std::mt19937 rng(12345);
	auto pick = [&](size_t &lo, size_t &hi) {
		lo = rng() % N;
		hi = lo + 1 + rng() % std::min<size_t>(N - lo, 12);
	};
	auto covered = [&](size_t pg) {
		for (const Live &l : live)
			if (l.pages[pg])
				return true;
		return false;
	};
	auto drop = [&](size_t lo, size_t hi) {
		for (Live &l : live)
			for (size_t pg = lo; pg < hi; pg++)
				l.pages[pg] = false;
	};
	size_t watches = 0, unwatches = 0, removes = 0, remaps = 0;
	for (int op = 0; op < 600; op++) {
		size_t lo, hi;
		pick(lo, hi);
		switch (rng() % 5) {
		case 0:
		case 1: {
			Live l;
			ck_assert_int_eq(h.mon.watch(U(a) + lo * P, (hi - lo) * P, l.w), 0);
			l.pages.assign(N, false);
			for (size_t pg = lo; pg < hi; pg++)
				l.pages[pg] = true;
			live.push_back(l);
			watches++;
			break;
		}
		case 2:
			if (!live.empty()) {
				const size_t i = rng() % live.size();
				h.mon.unwatch(live[i].w);
				live.erase(live.begin() + static_cast<long>(i));
				unwatches++;
			}
			break;
		case 3:
			ck_assert_int_eq(madvise(a + lo * P, (hi - lo) * P, MADV_DONTNEED), 0);
			drop(lo, hi);
			removes++;
			break;
		case 4: {
			void *n = mmap(a + lo * P, (hi - lo) * P, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			ck_assert(n == a + lo * P);
			drop(lo, hi);
			remaps++;
			break;
		}
		}
		h.sync();
		for (size_t pg = 0; pg < N; pg++)
			ck_assert_msg(h.mon.watched(U(a) + pg * P, 1) == covered(pg),
				      "op %d page %zu: monitor %d, model %d", op, pg,
				      h.mon.watched(U(a) + pg * P, 1), covered(pg));
		if (op % 20 == 0) {
			const std::vector<Vma> v = read_vmas();
			for (size_t pg = 0; pg < N; pg++)
				ck_assert_msg(armed_in(v, U(a) + pg * P) == covered(pg),
					      "op %d page %zu: kernel %d, model %d", op, pg,
					      armed_in(v, U(a) + pg * P), covered(pg));
		}
	}
	ck_assert_uint_gt(watches, 100);
	ck_assert_uint_gt(unwatches, 50);
	ck_assert_uint_gt(removes, 50);
	ck_assert_uint_gt(remaps, 50);
	for (const Live &l : live)
		h.mon.unwatch(l.w);
	ck_assert_uint_eq(h.mon.stats().watched_bytes, 0);
	ck_assert(!armed(a) && !armed(a + (N - 1) * P));
	const MemMonitorStats s = h.mon.stats();
	ck_assert_uint_eq(s.fault_events, 0);
	ck_assert(!s.failed);
	munmap(a, N * P);
}
END_TEST

// close() unregisters everything itself: a forked child keeps a copy of the
// descriptor (no exec), so closing it does not release the context, and an
// munmap of a still-registered range would wait for a reader forever.
START_TEST(mm_close_with_forked_child)
{
	Harness h;
	if (!open_or_skip(h, "close_with_forked_child"))
		return;
	Deadline d(20);
	char *a = map_anon(2);
	MemWatch w;
	ck_assert_int_eq(h.mon.watch(U(a), 2 * P, w), 0);
	const pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		// The child's copy of the mapping is not registered.
		_exit(armed(a) ? 1 : (pause(), 0));
	}
	h.mon.close();
	ck_assert(!h.mon.active());
	ck_assert(!armed(a));
	ck_assert_int_eq(munmap(a, 2 * P), 0); // must not hang
	ck_assert_int_eq(h.mon.watch(U(a), P, w), -ENODEV);
	h.mon.unwatch(w);
	int status = 0;
	kill(child, SIGKILL);
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFSIGNALED(status)); // it was still there, holding the fd
	// And the monitor can be opened again.
	ck_assert_int_eq(h.open(), 0);
	a = map_anon(1);
	ck_assert_int_eq(h.mon.watch(U(a), P, w), 0);
	ck_assert_int_eq(munmap(a, P), 0);
	ck_assert(has_call(h.take_calls(), U(a), U(a) + P));
}
END_TEST

// Without privilege open() fails (no user-mode-only fallback) and the caller
// does not cache.
START_TEST(mm_unavailable)
{
	MemMonitor m;
	vrma::CheckedMutex l;
	ck_assert_int_eq(m.open(nullptr, [](uintptr_t, uintptr_t) {}), -EINVAL);
	ck_assert_int_eq(m.open(&l, nullptr), -EINVAL);
	ck_assert(!m.active());
	MemWatch w;
	char *a = map_anon(1);
	ck_assert_int_eq(m.watch(U(a), P, w), -ENODEV);
	ck_assert(w.empty());
	m.unwatch(w);
	m.close();
	const int rc = m.open(&l, [](uintptr_t, uintptr_t) {});
	if (rc == 0) {
		ck_assert_int_eq(m.open(&l, [](uintptr_t, uintptr_t) {}), -EALREADY);
		m.close();
	}

	// As an unprivileged user: a child that gives up root.
	fflush(stdout);
	const pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		if (geteuid() == 0 && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 ||
				       setuid(65534) != 0))
			_exit(77);
		MemMonitor u;
		vrma::CheckedMutex ul;
		const int r = u.open(&ul, [](uintptr_t, uintptr_t) {});
		if (r == 0)
			_exit(78);
		if (r != -EPERM && r != -EACCES && r != -ENOSYS)
			_exit(10);
		if (u.active())
			_exit(11);
		MemWatch uw;
		if (u.watch(U(a), P, uw) != -ENODEV || !uw.empty())
			_exit(12);
		if (u.stats().watches != 0)
			_exit(13);
		// The mode open() refuses to fall back to is there.
		const long um = syscall(SYS_userfaultfd, 1 /* UFFD_USER_MODE_ONLY */ | O_CLOEXEC);
		printf("mem_monitor: unavailable: open() as uid 65534: %s; user-mode-only "
		       "userfaultfd %s (not used)\n",
		       strerror(-r), um >= 0 ? "available" : "unavailable too");
		fflush(stdout);
		_exit(0);
	}
	int status = 0;
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		printf("mem_monitor: unavailable: skipped: cannot drop privileges\n");
	else if (WEXITSTATUS(status) == 78)
		printf("mem_monitor: unavailable: skipped: unprivileged users get a full "
		       "userfaultfd here (vm.unprivileged_userfaultfd=1 or /dev/userfaultfd)\n");
	else
		ck_assert_int_eq(WEXITSTATUS(status), 0);
	munmap(a, P);
}
END_TEST

Suite *mem_monitor_suite()
{
	Suite *s = suite_create("mem_monitor");
	TCase *tc = tcase_create("events");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, mm_munmap);
	tcase_add_test(tc, mm_dontneed);
	tcase_add_test(tc, mm_fault_punched_hole);
	tcase_add_test(tc, mm_fault_grown_tail);
	tcase_add_test(tc, mm_mremap_move);
	tcase_add_test(tc, mm_regcache_remap);
	tcase_add_test(tc, mm_brk_shrink);
	tcase_add_test(tc, mm_refused);
	tcase_add_test(tc, mm_overlap);
	tcase_add_test(tc, mm_close_with_forked_child);
	tcase_add_test(tc, mm_unavailable);
	suite_add_tcase(s, tc);

	tc = tcase_create("random");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, mm_random_vs_model);
	suite_add_tcase(s, tc);
	return s;
}
