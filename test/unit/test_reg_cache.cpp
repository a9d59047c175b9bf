// RegCache: byte ranges, hits and misses, access flags, covering versus
// partial overlap, merged ranges and their bound, neighbours sharing a page
// (independent entries, invalidated together through the shared page),
// invalidation of unused and in-use entries, LRU eviction by count and by
// bytes, flush, the invalidation race on insert, statistics, and a long
// random run checked against a naive model.
#include "unit.h"
#include "reg_cache.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <new>
#include <random>
#include <set>
#include <vector>

using vrma::RegCache;
using vrma::RegCacheStats;
using vrma::RegEntry;
using vrma::RegPrepared;
using vrma::RegRange;
using vrma::RegRetired;

// Counting (and, when armed, failing) global allocation: lookups must not
// allocate, and an insert that runs out of memory must neither throw nor
// change anything. Replaces the allocator of the whole unit test binary;
// disarmed it only counts. Atomic: the threads of other suites in the binary
// (slot_ring, mem_monitor, fast_mutex, wait_gate) allocate and free through
// it at once (a data race under TSan with plain counters).
namespace {
std::atomic<size_t> g_allocs{0};
std::atomic<size_t> g_frees{0}; // operator delete of a non-null pointer
std::atomic<long> g_fail_in{-1}; // allocations before one throws; -1 for never
} // namespace

// Out of line: GCC would otherwise see free() meet operator new's pointer
// (-Wmismatched-new-delete) where the delete is inlined.
__attribute__((noinline)) void *operator new(size_t n)
{
	g_allocs.fetch_add(1, std::memory_order_relaxed);
	// Armed: count down to 0, where this allocation throws and disarms.
	long left = g_fail_in.load(std::memory_order_relaxed);
	while (left >= 0 && !g_fail_in.compare_exchange_weak(left, left == 0 ? -1 : left - 1,
							       std::memory_order_relaxed)) {
	}
	if (left == 0)
		throw std::bad_alloc();
	if (void *p = std::malloc(n ? n : 1))
		return p;
	throw std::bad_alloc();
}
// The standard's default does this too, but not every runtime's (ASan's).
__attribute__((noinline)) void *operator new(size_t n, const std::nothrow_t &) noexcept
{
	try {
		return ::operator new(n);
	} catch (...) {
		return nullptr;
	}
}
__attribute__((noinline)) void operator delete(void *p) noexcept
{
	if (p)
		g_frees.fetch_add(1, std::memory_order_relaxed);
	std::free(p);
}
__attribute__((noinline)) void operator delete(void *p, size_t) noexcept
{
	::operator delete(p);
}

namespace {

constexpr size_t P = 4096;
constexpr uintptr_t A = 0x40000000;	 // a page-aligned base address
constexpr uint64_t R = 1, W = 2, RR = 4; // access bits (the cache gives them no meaning)

void *H(uintptr_t n) { return reinterpret_cast<void *>(n); }
uintptr_t id(const void *h) { return reinterpret_cast<uintptr_t>(h); }

// Every handle in `out`, in order; leaves it empty.
std::vector<uintptr_t> drain(RegRetired &out)
{
	std::vector<uintptr_t> v;
	while (void *h = out.pop())
		v.push_back(id(h));
	return v;
}

// Caches handle `h` for [start, end) and drops the reference: an unused entry.
RegEntry *add_unused(RegCache &c, uintptr_t start, uintptr_t end, uint64_t access, uintptr_t h)
{
	RegRetired out;
	RegEntry *e = c.insert(start, end, access, H(h), c.epoch(), out);
	ck_assert_ptr_nonnull(e);
	ck_assert(out.empty());
	ck_assert_ptr_null(c.release(e));
	return e;
}

// The provider's miss path after lookup() failed: registers (handle `h`)
// and inserts what merged_range() gives. The entry, with one reference.
RegEntry *insert_merged(RegCache &c, uintptr_t addr, size_t len, uint64_t access, uintptr_t h,
			RegRetired &out)
{
	const uint64_t since = c.epoch();
	RegRange m;
	ck_assert(c.merged_range(addr, len, access, m));
	RegEntry *e = c.insert(m.start, m.end, m.access, H(h), since, out);
	ck_assert_ptr_nonnull(e);
	ck_assert(!e->stale());
	return e;
}

// A lookup that must miss, then the miss path.
RegEntry *miss(RegCache &c, uintptr_t addr, size_t len, uint64_t access, uintptr_t h,
	       RegRetired &out)
{
	ck_assert_ptr_null(c.lookup(addr, len, access));
	return insert_merged(c, addr, len, access, h, out);
}

void check_bounds(const RegEntry *e, uintptr_t start, uintptr_t end)
{
	ck_assert_msg(e->start() == start && e->end() == end,
		      "entry [A%+ld, A%+ld), want [A%+ld, A%+ld)", (long)(e->start() - A),
		      (long)(e->end() - A), (long)(start - A), (long)(end - A));
}

} // namespace

START_TEST(reg_span_bytes)
{
	RegCache c;
	struct {
		uintptr_t addr;
		size_t len;
		uintptr_t start, end;
	} const cases[] = {
		{0x1000, 0x1000, 0x1000, 0x2000},
		{0x1001, 1, 0x1001, 0x1002},
		{0x1fff, 2, 0x1fff, 0x2001},
		{0x1234, 0, 0x1234, 0x1235}, // len 0 is 1
		{0, 1, 0, 1},
	};
	for (const auto &t : cases) {
		RegRange r;
		r.access = R;
		ck_assert(c.span(t.addr, t.len, r));
		ck_assert_msg(r.start == t.start && r.end == t.end && r.access == 0,
			      "%#lx+%zu: [%#lx, %#lx) access %lu, want [%#lx, %#lx) access 0",
			      (unsigned long)t.addr, t.len, (unsigned long)r.start,
			      (unsigned long)r.end, (unsigned long)r.access,
			      (unsigned long)t.start, (unsigned long)t.end);
	}

	// Lookups take the same bytes: no widening to pages.
	RegEntry *e = add_unused(c, 0x1100, 0x2f00, R, 0x10);
	RegEntry *h = c.lookup(0x1100, 0x1e00, R); // exactly
	ck_assert_ptr_eq(h, e);
	c.release(h);
	h = c.lookup(0x2eff, 0, R); // its last byte
	ck_assert_ptr_eq(h, e);
	c.release(h);
	ck_assert_ptr_null(c.lookup(0x10ff, 2, R)); // one byte before it
	ck_assert_ptr_null(c.lookup(0x2eff, 2, R)); // one byte after it
	ck_assert_ptr_null(c.lookup(0x1000, 1, R)); // its first page, not its bytes
	ck_assert_uint_eq(c.stats().hits, 2);
	ck_assert_uint_eq(c.stats().misses, 3);

	// insert() takes any non-empty byte range with a handle.
	RegRetired out;
	const RegCacheStats before = c.stats();
	ck_assert_ptr_null(c.insert(0x5000, 0x5000, R, H(0x20), c.epoch(), out));
	ck_assert_ptr_null(c.insert(0x6000, 0x5000, R, H(0x20), c.epoch(), out));
	ck_assert_ptr_null(c.insert(0x5000, 0x6000, R, nullptr, c.epoch(), out));
	ck_assert(out.empty());
	ck_assert_uint_eq(c.stats().inserts, before.inserts);
	ck_assert_uint_eq(c.stats().entries, 1);
	RegEntry *odd = add_unused(c, 0x5001, 0x5fff, R, 0x30);
	ck_assert_uint_eq(odd->start(), 0x5001);
	ck_assert_uint_eq(odd->end(), 0x5fff);
	ck_assert_uint_eq(odd->len(), 0xffe);
	ck_assert_uint_eq(c.stats().bytes, 0x1e00 + 0xffe);
	c.flush(out);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x10, 0x30}));
}
END_TEST

// A range that wraps the top of the address space, or holds its top byte
// (its end would be 2^64), is never cached; one ending just below is.
START_TEST(reg_wrap_refused)
{
	RegCache c;
	RegRange r;
	ck_assert(!c.span(UINTPTR_MAX - 5, 10, r));
	ck_assert(!c.span(UINTPTR_MAX, 1, r));
	ck_assert(!c.span(UINTPTR_MAX, 0, r));
	ck_assert(!c.span(1, SIZE_MAX, r));
	ck_assert(c.span(0, SIZE_MAX, r));
	ck_assert_uint_eq(r.end, UINTPTR_MAX);
	ck_assert(c.span(UINTPTR_MAX - 10, 5, r));
	ck_assert_uint_eq(r.end, UINTPTR_MAX - 5);
	ck_assert(!c.merged_range(UINTPTR_MAX - 5, 10, R, r));
	ck_assert_ptr_null(c.lookup(UINTPTR_MAX - 5, 10, 0));
	ck_assert_uint_eq(c.stats().misses, 1);

	// The highest cacheable entry: a wrapping request inside it still misses.
	const uintptr_t top = UINTPTR_MAX - P;
	RegEntry *e = add_unused(c, top, UINTPTR_MAX, R, 0x10);
	RegEntry *h = c.lookup(UINTPTR_MAX - 1, 1, R);
	ck_assert_ptr_eq(h, e);
	c.release(h);
	ck_assert_ptr_null(c.lookup(UINTPTR_MAX - 1, 2, R));
	ck_assert(c.merged_range(top, P, W, r));
	ck_assert_uint_eq(r.start, top);
	ck_assert_uint_eq(r.end, UINTPTR_MAX);
	ck_assert_uint_eq(r.access, R | W);
	RegCacheStats s = c.stats();
	ck_assert_uint_eq(s.hits, 1);
	ck_assert_uint_eq(s.misses, 2);
	ck_assert_uint_eq(s.entries, 1);
	ck_assert_uint_eq(s.bytes, P);

	// An invalidation past the top is clamped and still reaches it.
	RegRetired out;
	ck_assert_uint_eq(c.invalidate(UINTPTR_MAX - 1, 100, out), 1);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x10});
	s = c.stats();
	ck_assert_uint_eq(s.invalidations, 1);
	ck_assert_uint_eq(s.entries, 0);
	ck_assert_uint_eq(s.bytes, 0);
}
END_TEST

START_TEST(reg_hit_miss)
{
	RegCache c;
	ck_assert_ptr_null(c.lookup(A, P, R));
	RegRetired out;
	RegEntry *e = c.insert(A, A + 2 * P, R, H(0x10), c.epoch(), out);
	ck_assert_ptr_nonnull(e);
	ck_assert_uint_eq(e->refs(), 1);
	ck_assert_uint_eq(e->start(), A);
	ck_assert_uint_eq(e->end(), A + 2 * P);
	ck_assert_uint_eq(e->len(), 2 * P);
	ck_assert_uint_eq(e->access(), R);
	ck_assert_ptr_eq(e->handle(), H(0x10));
	ck_assert(!e->stale());
	ck_assert_uint_eq(c.stats().unused_entries, 0);

	ck_assert_ptr_null(c.release(e));
	ck_assert_uint_eq(e->refs(), 0);
	ck_assert_uint_eq(c.stats().unused_entries, 1);

	ck_assert_ptr_eq(c.lookup(A + 100, 200, R), e);
	ck_assert_uint_eq(e->refs(), 1);
	ck_assert_uint_eq(c.stats().unused_entries, 0);
	ck_assert_ptr_eq(c.lookup(A + P, P, R), e);
	ck_assert_uint_eq(e->refs(), 2);
	ck_assert_ptr_null(c.release(e));
	ck_assert_ptr_null(c.release(e));
	ck_assert_uint_eq(e->refs(), 0);
	ck_assert_ptr_null(c.lookup(A + 2 * P, 1, R));

	const RegCacheStats s = c.stats();
	ck_assert_uint_eq(s.hits, 2);
	ck_assert_uint_eq(s.misses, 2);
	ck_assert_uint_eq(s.inserts, 1);
	ck_assert_uint_eq(s.entries, 1);
	ck_assert_uint_eq(s.bytes, 2 * P);
	ck_assert_uint_eq(s.unused_entries, 1);
	ck_assert_uint_eq(s.stale_entries, 0);
	ck_assert(out.empty());
	RegRetired fl;
	ck_assert_uint_eq(c.flush(fl), 1);
	ck_assert(drain(fl) == std::vector<uintptr_t>{0x10});
}
END_TEST

START_TEST(reg_access_flags)
{
	RegCache c;
	RegEntry *ro = add_unused(c, A, A + 2 * P, R, 0x10);
	RegEntry *rw = add_unused(c, A + 4 * P, A + 6 * P, R | W, 0x20);

	// A read-only entry does not serve a write request.
	ck_assert_ptr_null(c.lookup(A, P, W));
	ck_assert_ptr_null(c.lookup(A, P, R | W));
	ck_assert_ptr_null(c.lookup(A, P, RR));
	RegEntry *e = c.lookup(A, P, R);
	ck_assert_ptr_eq(e, ro);
	c.release(e);
	e = c.lookup(A, P, 0);
	ck_assert_ptr_eq(e, ro);
	c.release(e);
	// A read-write one serves any subset.
	for (uint64_t want : {uint64_t{0}, R, W, R | W}) {
		e = c.lookup(A + 4 * P, 2 * P, want);
		ck_assert_ptr_eq(e, rw);
		c.release(e);
	}
	ck_assert_ptr_null(c.lookup(A + 4 * P, 2 * P, R | W | RR));

	// On the write miss, the merged range asks for both accesses, and its
	// entry replaces the read-only one.
	RegRange m;
	ck_assert(c.merged_range(A + 10, P, W, m));
	ck_assert_uint_eq(m.start, A);
	ck_assert_uint_eq(m.end, A + 2 * P);
	ck_assert_uint_eq(m.access, R | W);
	RegRetired out;
	RegEntry *n = c.insert(m.start, m.end, m.access, H(0x30), c.epoch(), out);
	ck_assert_ptr_nonnull(n);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x10});
	c.release(n);
	e = c.lookup(A, P, R);
	ck_assert_ptr_eq(e, n);
	c.release(e);
	e = c.lookup(A, P, W);
	ck_assert_ptr_eq(e, n);
	c.release(e);
	ck_assert_uint_eq(c.stats().replaced, 1);
	c.flush(out);
	drain(out);
}
END_TEST

START_TEST(reg_cover_vs_partial)
{
	RegCache c;
	RegEntry *e = add_unused(c, A + P, A + 5 * P, R, 0x10);
	struct {
		uintptr_t addr;
		size_t len;
		bool hit;
	} const cases[] = {
		{A + P, 4 * P, true},	      // exactly
		{A + 2 * P, 2 * P, true},     // inside
		{A + 5 * P - 1, 1, true},     // last byte
		{A + P - 1, 2, false},	      // starts a byte early
		{A + 4 * P, P + 1, false},    // ends a byte late
		{A, 6 * P, false},	      // contains it
		{A + 5 * P, 1, false},	      // adjacent after
		{A, P, false},		      // adjacent before
		{A + 100 * P, 10 * P, false}, // elsewhere
	};
	for (const auto &t : cases) {
		RegEntry *got = c.lookup(t.addr, t.len, R);
		ck_assert_msg(got == (t.hit ? e : nullptr), "lookup(A%+ld, %zu): %p, want %s",
			      (long)(t.addr - A), t.len, (void *)got,
			      t.hit ? "the entry" : "a miss");
		if (got)
			c.release(got);
	}
	ck_assert_uint_eq(c.stats().hits, 3);
	ck_assert_uint_eq(c.stats().misses, 6);
	RegRetired out;
	c.flush(out);
	drain(out);
}
END_TEST

// Exact bits (the provider's remote rights): an entry with them serves
// only requests with exactly those, a request with them is registered over
// its own bytes, and entries with them are never joined into another: a
// receive buffer beside (or overlapping) a send buffer whose key a peer
// holds never becomes readable through a merged registration. Local bits
// still serve as supersets and merge.
START_TEST(reg_exact_rights)
{
	constexpr uint64_t L = R, REMOTE = RR; // local right, remote (exact) right
	RegCache c(0, 0, REMOTE);
	RegRetired out;
	// A send buffer, remotely readable: exact range even over an entry.
	RegEntry *send = miss(c, A + 100, 200, L | REMOTE, 0x1, out);
	check_bounds(send, A + 100, A + 300);
	// A receive over the same bytes (local only) does not take the send's
	// registration (wider by REMOTE), and its registration is not merged
	// with it either: it covers the receive's own bytes, local only.
	ck_assert_ptr_null(c.lookup(A + 150, 50, L));
	RegRange m;
	ck_assert(c.merged_range(A + 150, 100, L, m));
	ck_assert_msg(m.start == A + 150 && m.end == A + 250 && m.access == L,
		      "a local-only request joined a remote entry: [A%+ld, A%+ld) access %lu", (long)(m.start - A),
		      (long)(m.end - A), (unsigned long)m.access);
	ck_assert_ptr_null(c.release(send)); // unused now
	RegEntry *recv = c.insert(m.start, m.end, m.access, H(0x2), c.epoch(), out);
	ck_assert_ptr_nonnull(recv);
	// Inserting it retired the overlapping remote entry: its handle is
	// given back for deregistration (the peer's key dies with it).
	ck_assert_uint_eq(out.size(), 1);
	ck_assert_ptr_eq(out.pop(), H(0x1));
	ck_assert_ptr_null(c.release(recv));
	// A remote request over the local entry's bytes: exact, not merged.
	ck_assert_ptr_null(c.lookup(A + 150, 10, L | REMOTE));
	ck_assert(c.merged_range(A + 140, 20, L | REMOTE, m));
	ck_assert(m.start == A + 140 && m.end == A + 160 && m.access == (L | REMOTE));
	// Local requests still merge with local entries and take supersets.
	RegEntry *w = miss(c, A + 200, 100, W, 0x3, out); // overlaps recv [150, 250)
	check_bounds(w, A + 150, A + 300);
	ck_assert_uint_eq(w->access(), L | W);
	ck_assert_ptr_null(c.release(w));
	RegEntry *hit = c.lookup(A + 160, 10, L);
	ck_assert_ptr_eq(hit, w);
	ck_assert_ptr_null(c.release(hit));
	// The same remote request twice: the second is a hit.
	RegEntry *s1 = miss(c, A + 8 * P, 64, L | REMOTE, 0x4, out);
	ck_assert_ptr_null(c.release(s1));
	RegEntry *s2 = c.lookup(A + 8 * P, 64, L | REMOTE);
	ck_assert_ptr_eq(s2, s1);
	// ...but not for a request with fewer remote rights.
	ck_assert_ptr_null(c.lookup(A + 8 * P, 64, L));
	ck_assert_ptr_null(c.release(s2));
	RegRetired all;
	c.flush(all);
	while (all.pop()) {
	}
	while (out.pop()) {
	}
}
END_TEST

START_TEST(reg_merged_range)
{
	RegCache c;
	RegRange m;
	// Nothing cached: the request's bytes and access.
	ck_assert(c.merged_range(A + 5, P, RR, m));
	ck_assert_uint_eq(m.start, A + 5);
	ck_assert_uint_eq(m.end, A + P + 5);
	ck_assert_uint_eq(m.access, RR);

	add_unused(c, A, A + 2 * P, R, 0x1);	      // E1
	add_unused(c, A + 4 * P, A + 6 * P, W, 0x2);  // E2
	add_unused(c, A + 8 * P, A + 9 * P, RR, 0x3); // E3
	add_unused(c, A + 9 * P, A + 10 * P, R, 0x4); // E4, adjacent to E3

	struct {
		uintptr_t addr;
		size_t len;
		uint64_t access;
		uintptr_t start, end;
		uint64_t merged_access;
	} const cases[] = {
		// adjacent to E1's end only: not joined
		{A + 2 * P, P, 0, A + 2 * P, A + 3 * P, 0},
		// adjacent to E2's start only
		{A + 3 * P, P, 0, A + 3 * P, A + 4 * P, 0},
		// the gap between them, exactly
		{A + 2 * P, 2 * P, RR, A + 2 * P, A + 4 * P, RR},
		// E1's last byte
		{A + 2 * P - 1, P, 0, A, A + 3 * P - 1, R},
		// overlaps both
		{A + P, 4 * P, 0, A, A + 6 * P, R | W},
		// inside E2
		{A + 4 * P + 5, P, R, A + 4 * P, A + 6 * P, R | W},
		// inside E2 but far shorter: E2 would be more than twice the
		// request plus kMergeSlack, so the request alone
		{A + 4 * P + 5, 10, R, A + 4 * P + 5, A + 4 * P + 15, R},
		// E4's last byte: E4 joins, E3 (adjacent to E4) does not
		{A + 10 * P - 1, P, 0, A + 9 * P, A + 11 * P - 1, R},
		// overlaps nothing
		{A + 20 * P, P, W, A + 20 * P, A + 21 * P, W},
	};
	for (const auto &t : cases) {
		ck_assert(c.merged_range(t.addr, t.len, t.access, m));
		ck_assert_msg(
			m.start == t.start && m.end == t.end && m.access == t.merged_access,
			"A%+ld+%zu: [A%+ld, A%+ld) access %lu, want [A%+ld, A%+ld) access %lu",
			(long)(t.addr - A), t.len, (long)(m.start - A), (long)(m.end - A),
			(unsigned long)m.access, (long)(t.start - A), (long)(t.end - A),
			(unsigned long)t.merged_access);
	}

	// Inserting a merged range replaces what it joined.
	RegRetired out;
	ck_assert(c.merged_range(A + P, 4 * P, 0, m));
	RegEntry *n = c.insert(m.start, m.end, m.access, H(0x5), c.epoch(), out);
	ck_assert_ptr_nonnull(n);
	std::vector<uintptr_t> gone = drain(out);
	ck_assert(gone == (std::vector<uintptr_t>{0x1, 0x2})); // address order
	ck_assert_uint_eq(c.stats().replaced, 2);
	ck_assert_uint_eq(c.stats().entries, 3);
	ck_assert_uint_eq(c.stats().bytes, 8 * P);
	c.release(n);
	RegEntry *e = c.lookup(A + 5 * P, 1, W);
	ck_assert_ptr_eq(e, n);
	c.release(e);

	// A replaced entry in use goes stale and comes back at its release.
	RegEntry *e3 = c.lookup(A + 8 * P, P, RR);
	ck_assert_ptr_nonnull(e3);
	ck_assert(c.merged_range(A + 5 * P, 5 * P, 0, m)); // n, E3 and E4
	ck_assert_uint_eq(m.start, A);
	ck_assert_uint_eq(m.end, A + 10 * P);
	ck_assert_uint_eq(m.access, R | W | RR);
	RegEntry *big = c.insert(m.start, m.end, m.access, H(0x6), c.epoch(), out);
	ck_assert_ptr_nonnull(big);
	gone = drain(out);
	ck_assert(gone == (std::vector<uintptr_t>{0x5, 0x4}));
	ck_assert(e3->stale());
	ck_assert_uint_eq(c.stats().stale_entries, 1);
	e = c.lookup(A + 8 * P, P, RR);
	ck_assert_ptr_eq(e, big);
	c.release(e);
	ck_assert_ptr_eq(c.release(e3), H(0x3));
	ck_assert_uint_eq(c.stats().stale_entries, 0);
	c.release(big);
	ck_assert_uint_eq(c.flush(out), 1);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x6});
}
END_TEST

// Page-aligned neighbours (which used to merge for touching) are two
// entries, each hit on reuse, and neither retires the other, even while
// both are in use.
START_TEST(reg_adjacent_independent)
{
	RegCache c;
	RegRetired out;
	RegEntry *a = miss(c, A, P, R | W, 0x1, out);
	RegEntry *b = miss(c, A + P, P, R | W, 0x2, out); // `a` still in use
	ck_assert(out.empty());
	check_bounds(a, A, A + P);
	check_bounds(b, A + P, A + 2 * P);
	ck_assert(!a->stale() && !b->stale());
	for (int round = 0; round < 3; round++) {
		RegEntry *ha = c.lookup(A, P, W);
		RegEntry *hb = c.lookup(A + P, P, W);
		ck_assert_ptr_eq(ha, a);
		ck_assert_ptr_eq(hb, b);
		ck_assert(!c.release(ha, out));
		ck_assert(!c.release(hb, out));
	}
	ck_assert(!c.release(a, out));
	ck_assert(!c.release(b, out));
	ck_assert(out.empty());
	const RegCacheStats s = c.stats();
	ck_assert_uint_eq(s.misses, 2);
	ck_assert_uint_eq(s.hits, 6);
	ck_assert_uint_eq(s.inserts, 2);
	ck_assert_uint_eq(s.replaced, 0);
	ck_assert_uint_eq(s.stale_inserts, 0);
	ck_assert_uint_eq(s.entries, 2);
	ck_assert_uint_eq(s.bytes, 2 * P);
	ck_assert_uint_eq(s.stale_entries, 0);
	ck_assert_uint_eq(s.unused_entries, 2);
	ck_assert_uint_eq(c.flush(out), 2);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x1, 0x2}));
}
END_TEST

// The receive benchmark that made page entries pin ~2 GiB: 64 adjacent
// 1 MiB buffers (neighbours sharing a page at offset 128, touching at
// offset 0) cycled three times, up to 64 in use, released in order. Exactly
// one miss per buffer, each entry exactly its buffer, then only hits;
// nothing retired, nothing stale.
START_TEST(reg_adjacent_pool_cycle)
{
	constexpr size_t M = size_t(1) << 20;
	constexpr size_t N = 64;
	for (const uintptr_t offset : {uintptr_t{128}, uintptr_t{0}}) {
		RegCache c(1024, size_t(1) << 30); // the provider's default limits
		const uintptr_t base = A + offset;
		RegEntry *ent[N] = {};
		std::deque<RegEntry *> held;
		RegRetired out;
		size_t wrong = 0, released_stale = 0;
		for (int cycle = 0; cycle < 3; cycle++) {
			for (size_t i = 0; i < N; i++) {
				if (held.size() == N) {
					released_stale += c.release(held.front(), out);
					held.pop_front();
				}
				const uintptr_t at = base + i * M;
				RegEntry *e = c.lookup(at, M, W);
				if (!e) {
					e = insert_merged(c, at, M, W, 0x10 * (i + 1), out);
					wrong += cycle != 0 || ent[i] != nullptr;
					ent[i] = e;
				}
				wrong += e != ent[i] || e->start() != at || e->end() != at + M ||
					 e->stale();
				held.push_back(e);
			}
		}
		ck_assert_uint_eq(wrong, 0);
		ck_assert_uint_eq(released_stale, 0);
		ck_assert(out.empty());
		RegCacheStats s = c.stats();
		ck_assert_uint_eq(s.misses, N);
		ck_assert_uint_eq(s.hits, 2 * N);
		ck_assert_uint_eq(s.inserts, N);
		ck_assert_uint_eq(s.replaced, 0);
		ck_assert_uint_eq(s.stale_inserts, 0);
		ck_assert_uint_eq(s.evictions, 0);
		ck_assert_uint_eq(s.entries, N);
		ck_assert_uint_eq(s.bytes, N * M);
		ck_assert_uint_eq(s.stale_entries, 0);
		ck_assert_uint_eq(s.unused_entries, 0);
		while (!held.empty()) {
			ck_assert(!c.release(held.front(), out));
			held.pop_front();
		}
		ck_assert_uint_eq(c.stats().unused_entries, N);
		ck_assert_uint_eq(c.flush(out), N);
		const std::vector<uintptr_t> gone = drain(out);
		ck_assert_uint_eq(gone.size(), N);
		for (size_t i = 0; i < N; i++)
			ck_assert_uint_eq(gone[i], 0x10 * (i + 1)); // address order
	}
}
END_TEST

// Two overlapping requests become one entry covering both, which then
// serves both; the first entry is retired (unused: handed back; in use:
// stale until its release).
START_TEST(reg_overlap_merges)
{
	for (const bool first_in_use : {false, true}) {
		RegCache c;
		RegRetired out;
		RegEntry *first = miss(c, A + 100, 2 * P, R, 0x1, out);
		check_bounds(first, A + 100, A + 2 * P + 100);
		if (!first_in_use)
			ck_assert(!c.release(first, out));
		RegEntry *both = miss(c, A + P, 2 * P, W, 0x2, out);
		check_bounds(both, A + 100, A + 3 * P);
		ck_assert_uint_eq(both->access(), R | W);
		if (first_in_use) {
			ck_assert(out.empty());
			ck_assert(first->stale());
			ck_assert_uint_eq(c.stats().stale_entries, 1);
			ck_assert(c.release(first, out));
		}
		ck_assert(drain(out) == std::vector<uintptr_t>{0x1});
		ck_assert(!c.release(both, out));
		RegEntry *h = c.lookup(A + 100, 2 * P, R);
		ck_assert_ptr_eq(h, both);
		ck_assert(!c.release(h, out));
		h = c.lookup(A + P, 2 * P, W);
		ck_assert_ptr_eq(h, both);
		ck_assert(!c.release(h, out));
		const RegCacheStats s = c.stats();
		ck_assert_uint_eq(s.misses, 2);
		ck_assert_uint_eq(s.hits, 2);
		ck_assert_uint_eq(s.inserts, 2);
		ck_assert_uint_eq(s.replaced, 1);
		ck_assert_uint_eq(s.stale_inserts, 0);
		ck_assert_uint_eq(s.entries, 1);
		ck_assert_uint_eq(s.bytes, 3 * P - 100);
		ck_assert_uint_eq(s.stale_entries, 0);
		ck_assert_uint_eq(c.flush(out), 1);
		ck_assert(drain(out) == std::vector<uintptr_t>{0x2});
	}
}
END_TEST

// Requests of L bytes sliding by L/2: each overlaps the previous entry.
// The union grows while it stays within 2L + kMergeSlack; past that the
// request is inserted alone (with only its own access), retiring what it
// overlaps, and growth starts over from there.
START_TEST(reg_merge_bounded)
{
	constexpr size_t L = 16 * P;
	constexpr size_t S = L / 2;
	static_assert(RegCache::kMergeSlack < S, "the table assumes a slack under L/2");
	struct {
		uintptr_t lo, hi; // in steps of S
		uint64_t access;
	} const want[] = {
		{0, 2, R},	{0, 3, R | W}, {0, 4, R | W}, {3, 5, W},     {3, 6, R | W},
		{3, 7, R | W}, {6, 8, R},     {6, 9, R | W}, {6, 10, R | W}, {9, 11, W},
	};
	RegCache c;
	RegRetired out;
	constexpr size_t kSteps = sizeof(want) / sizeof(want[0]);
	for (size_t k = 0; k < kSteps; k++) {
		RegEntry *e = miss(c, A + k * S, L, k % 2 ? W : R, 0x10 + k, out);
		check_bounds(e, A + want[k].lo * S, A + want[k].hi * S);
		ck_assert_uint_eq(e->access(), want[k].access);
		ck_assert_uint_le(e->len(), 2 * L + RegCache::kMergeSlack);
		ck_assert(!c.release(e, out));
		// The previous entry, always overlapped, always retired.
		ck_assert(drain(out) == (k ? std::vector<uintptr_t>{0x10 + k - 1}
					   : std::vector<uintptr_t>{}));
		ck_assert_uint_eq(c.stats().entries, 1);
	}
	RegCacheStats s = c.stats();
	ck_assert_uint_eq(s.misses, kSteps);
	ck_assert_uint_eq(s.inserts, kSteps);
	ck_assert_uint_eq(s.replaced, kSteps - 1);
	ck_assert_uint_eq(s.bytes, L);
	ck_assert_uint_eq(s.stale_entries, 0);
	ck_assert_uint_eq(c.flush(out), 1);
	ck_assert_uint_eq(drain(out).size(), 1);

	// The bound itself: a union of exactly 2L + kMergeSlack is joined, one
	// byte more is not.
	RegRange m;
	const uintptr_t at = A + L + RegCache::kMergeSlack; // the request [at, at + L)
	add_unused(c, A, at + 1, R, 0x1);
	ck_assert(c.merged_range(at, L, W, m));
	ck_assert_uint_eq(m.start, A);
	ck_assert_uint_eq(m.end, at + L);
	ck_assert_uint_eq(m.access, R | W);
	ck_assert_uint_eq(c.flush(out), 1);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x1});
	add_unused(c, A - 1, at + 1, R, 0x2);
	ck_assert(c.merged_range(at, L, W, m));
	ck_assert_uint_eq(m.start, at);
	ck_assert_uint_eq(m.end, at + L);
	ck_assert_uint_eq(m.access, W);
	ck_assert_uint_eq(c.flush(out), 1);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x2});
}
END_TEST

// Neighbours at a 128-byte offset share a page. The monitor invalidates
// whole pages: the shared one retires both, a page only one of them touches
// retires only that one.
START_TEST(reg_invalidate_shared_page)
{
	RegCache c;
	RegRetired out;
	const uintptr_t b1 = A + 128;	  // pages A and A+P
	const uintptr_t b2 = A + P + 128; // pages A+P and A+2P
	auto insert_both = [&](uintptr_t h1, uintptr_t h2, RegEntry *&e1, RegEntry *&e2) {
		e1 = miss(c, b1, P, R, h1, out);
		e2 = miss(c, b2, P, R, h2, out);
		ck_assert(out.empty());
		check_bounds(e1, b1, b1 + P);
		check_bounds(e2, b2, b2 + P);
		ck_assert(!c.release(e1, out));
		ck_assert(!c.release(e2, out));
	};
	RegEntry *e1, *e2;
	insert_both(0x1, 0x2, e1, e2);
	ck_assert_uint_eq(c.invalidate(A + P, P, out), 2);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x1, 0x2}));
	ck_assert_uint_eq(c.stats().entries, 0);

	insert_both(0x3, 0x4, e1, e2);
	ck_assert_uint_eq(c.invalidate(A, P, out), 1);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x3});
	RegEntry *h = c.lookup(b2, P, R);
	ck_assert_ptr_eq(h, e2);
	ck_assert_ptr_null(c.lookup(b1, P, R));

	// Page A+2P, with b2 in use: only b2, stale until its release.
	e1 = insert_merged(c, b1, P, R, 0x5, out);
	check_bounds(e1, b1, b1 + P);
	ck_assert(!c.release(e1, out));
	ck_assert_uint_eq(c.invalidate(A + 2 * P, P, out), 1);
	ck_assert(out.empty());
	ck_assert(h->stale());
	RegEntry *h1 = c.lookup(b1, P, R);
	ck_assert_ptr_eq(h1, e1);
	ck_assert(!c.release(h1, out));
	ck_assert_ptr_eq(c.release(h), H(0x4));

	const RegCacheStats s = c.stats();
	ck_assert_uint_eq(s.invalidations, 4);
	ck_assert_uint_eq(s.replaced, 0);
	ck_assert_uint_eq(s.entries, 1);
	ck_assert_uint_eq(s.bytes, P);
	ck_assert_uint_eq(s.stale_entries, 0);
	ck_assert_uint_eq(c.flush(out), 1);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x5});
}
END_TEST

START_TEST(reg_invalidate_unused)
{
	RegCache c;
	add_unused(c, A, A + 2 * P, R, 0x1);
	RegEntry *e2 = add_unused(c, A + 4 * P, A + 5 * P, R, 0x2);
	RegRetired out;
	// E1's last byte.
	ck_assert_uint_eq(c.invalidate(A + 2 * P - 1, 1, out), 1);
	ck_assert_uint_eq(out.size(), 1);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x1});
	ck_assert_ptr_null(c.lookup(A, P, R));
	RegEntry *e = c.lookup(A + 4 * P, P, R);
	ck_assert_ptr_eq(e, e2);
	c.release(e);
	const RegCacheStats s = c.stats();
	ck_assert_uint_eq(s.invalidations, 1);
	ck_assert_uint_eq(s.entries, 1);
	ck_assert_uint_eq(s.bytes, P);
	ck_assert_uint_eq(s.unused_entries, 1);
	c.flush(out);
	drain(out);
}
END_TEST

START_TEST(reg_invalidate_in_use)
{
	RegCache c;
	RegRetired out;
	RegEntry *e = c.insert(A, A + 2 * P, R, H(0x1), c.epoch(), out);
	ck_assert_ptr_eq(c.lookup(A, P, R), e);
	ck_assert_uint_eq(e->refs(), 2);

	ck_assert_uint_eq(c.invalidate(A + P, P, out), 1);
	ck_assert(out.empty()); // in use: not handed back yet
	ck_assert(e->stale());
	ck_assert_ptr_null(c.lookup(A, P, R));
	RegCacheStats s = c.stats();
	ck_assert_uint_eq(s.invalidations, 1);
	ck_assert_uint_eq(s.entries, 1); // still registered
	ck_assert_uint_eq(s.bytes, 2 * P);
	ck_assert_uint_eq(s.stale_entries, 1);
	ck_assert_uint_eq(s.stale_bytes, 2 * P);

	// A new registration of the same pages is independent of the stale one.
	RegEntry *n = c.insert(A, A + 2 * P, R, H(0x2), c.epoch(), out);
	ck_assert_ptr_nonnull(n);
	ck_assert(!n->stale());
	ck_assert(out.empty());
	ck_assert_uint_eq(c.stats().entries, 2);
	ck_assert_ptr_null(c.release(n));

	// Invalidating again does not touch the stale entry a second time.
	ck_assert_uint_eq(c.invalidate(A, P, out), 1);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x2});

	ck_assert_ptr_null(c.release(e));
	ck_assert_uint_eq(e->refs(), 1);
	ck_assert_ptr_null(c.lookup(A, P, R));
	ck_assert_ptr_eq(c.release(e), H(0x1)); // last reference
	s = c.stats();
	ck_assert_uint_eq(s.entries, 0);
	ck_assert_uint_eq(s.bytes, 0);
	ck_assert_uint_eq(s.stale_entries, 0);
	ck_assert_uint_eq(s.stale_bytes, 0);
}
END_TEST

START_TEST(reg_invalidate_several)
{
	RegCache c;
	RegEntry *e[5];
	for (uintptr_t i = 0; i < 5; i++)
		e[i] = add_unused(c, A + i * 2 * P, A + i * 2 * P + P, R, 0x10 + i);
	RegEntry *held = c.lookup(A + 4 * P, 1, R);
	ck_assert_ptr_eq(held, e[2]);

	RegRetired out;
	// [A+P+1, A+6P+1): overlaps entries 1, 2 and 3 (its last byte is entry
	// 3's first); entry 0 ends at A+P, entry 4 starts at A+8P.
	ck_assert_uint_eq(c.invalidate(A + P + 1, 5 * P, out), 3);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x11, 0x13}));
	ck_assert(held->stale());
	for (uintptr_t i = 0; i < 5; i++) {
		RegEntry *got = c.lookup(A + i * 2 * P, P, R);
		ck_assert_ptr_eq(got, (i == 0 || i == 4) ? e[i] : nullptr);
		if (got)
			c.release(got);
	}
	ck_assert_ptr_eq(c.release(held), H(0x12));
	ck_assert_uint_eq(c.stats().entries, 2);
	ck_assert_uint_eq(c.stats().invalidations, 3);

	// A range covering everything, ending at the top of the address space.
	ck_assert_uint_eq(c.invalidate(A - P + 7, SIZE_MAX, out), 2);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x10, 0x14}));
	ck_assert_uint_eq(c.stats().entries, 0);
}
END_TEST

START_TEST(reg_invalidate_none)
{
	RegCache c;
	RegRetired out;
	ck_assert_uint_eq(c.invalidate(A, P, out), 0); // empty cache
	RegEntry *e1 = add_unused(c, A, A + P, R, 0x1);
	RegEntry *e2 = add_unused(c, A + 3 * P, A + 4 * P, R, 0x2);
	const uint64_t epoch = c.epoch();
	ck_assert_uint_eq(c.invalidate(A + P, 2 * P, out), 0);	// the gap, exactly
	ck_assert_uint_eq(c.invalidate(A + 10 * P, P, out), 0); // beyond all
	ck_assert_uint_eq(c.invalidate(0, P, out), 0);		// before all
	ck_assert(out.empty());
	ck_assert_uint_eq(c.epoch(), epoch + 3); // counted all the same
	ck_assert_uint_eq(c.stats().invalidations, 0);
	ck_assert_uint_eq(c.stats().entries, 2);
	RegEntry *e = c.lookup(A, P, R);
	ck_assert_ptr_eq(e, e1);
	c.release(e);
	e = c.lookup(A + 3 * P, P, R);
	ck_assert_ptr_eq(e, e2);
	c.release(e);
	c.flush(out);
	drain(out);
}
END_TEST

START_TEST(reg_lru_by_count)
{
	RegCache c(3, 0);
	RegRetired out;
	add_unused(c, A, A + P, R, 0x1);
	add_unused(c, A + 2 * P, A + 3 * P, R, 0x2);
	add_unused(c, A + 4 * P, A + 5 * P, R, 0x3);
	// A hit makes entry 1 the most recent: 2, 3, 1.
	c.release(c.lookup(A, P, R));

	RegEntry *e4 = c.insert(A + 6 * P, A + 7 * P, R, H(0x4), c.epoch(), out);
	ck_assert_ptr_nonnull(e4);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x2});
	ck_assert_uint_eq(c.stats().entries, 3);
	c.release(e4); // 3, 1, 4
	RegEntry *e5 = c.insert(A + 8 * P, A + 9 * P, R, H(0x5), c.epoch(), out);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x3});
	c.release(e5); // 1, 4, 5
	// Recency is that of the release: holding 1 across two inserts does not
	// make it older than them.
	RegEntry *e1 = c.lookup(A, P, R);
	RegEntry *e6 = c.insert(A + 10 * P, A + 11 * P, R, H(0x6), c.epoch(), out);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x4});
	c.release(e1); // 5, 1 (6 in use)
	c.release(e6); // 5, 1, 6
	RegEntry *e7 = c.insert(A + 12 * P, A + 13 * P, R, H(0x7), c.epoch(), out);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x5});
	ck_assert_ptr_null(c.lookup(A + 2 * P, P, R));
	ck_assert_ptr_null(c.lookup(A + 4 * P, P, R));
	ck_assert_ptr_null(c.lookup(A + 6 * P, P, R));
	ck_assert_ptr_null(c.lookup(A + 8 * P, P, R));
	const RegCacheStats s = c.stats();
	ck_assert_uint_eq(s.evictions, 4);
	ck_assert_uint_eq(s.entries, 3);
	ck_assert_uint_eq(s.unused_entries, 2);
	c.flush(out);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x1, 0x6}));
	ck_assert_uint_eq(c.stats().stale_entries, 1); // 7 is still held
	ck_assert_ptr_eq(c.release(e7), H(0x7));
}
END_TEST

START_TEST(reg_lru_by_bytes)
{
	RegCache c(0, 8 * P);
	RegRetired out;
	RegEntry *e1 = c.insert(A, A + 2 * P, R, H(0x1), c.epoch(), out);
	RegEntry *e2 = c.insert(A + 2 * P, A + 5 * P, R, H(0x2), c.epoch(), out);
	RegEntry *e3 = c.insert(A + 10 * P, A + 12 * P, R, H(0x3), c.epoch(), out);
	ck_assert(out.empty());
	ck_assert_uint_eq(c.stats().bytes, 7 * P);
	c.release(e2);
	c.release(e1);
	c.release(e3); // 2, 1, 3

	// 7 + 4 = 11 pages: evicting 2 (3 pages) is enough.
	RegEntry *e4 = c.insert(A + 20 * P, A + 24 * P, R, H(0x4), c.epoch(), out);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x2});
	ck_assert_uint_eq(c.stats().bytes, 8 * P);
	c.release(e4); // 1, 3, 4
	// 8 + 4 = 12 pages: 1 and 3 go, oldest first.
	RegEntry *e5 = c.insert(A + 30 * P, A + 34 * P, R, H(0x5), c.epoch(), out);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x1, 0x3}));
	ck_assert_uint_eq(c.stats().bytes, 8 * P);
	ck_assert_uint_eq(c.stats().entries, 2);
	ck_assert_uint_eq(c.stats().evictions, 3);
	c.release(e5);

	// A registration larger than the limit is cached, alone once released.
	RegEntry *huge = c.insert(A + 40 * P, A + 50 * P, R, H(0x6), c.epoch(), out);
	ck_assert_ptr_nonnull(huge);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x4, 0x5}));
	ck_assert_uint_eq(c.stats().bytes, 10 * P);
	c.release(huge);
	ck_assert(c.make_room(P, out)); // by evicting it
	ck_assert(drain(out) == std::vector<uintptr_t>{0x6});
	ck_assert(!c.make_room(9 * P, out)); // never fits
	ck_assert(c.make_room(8 * P, out));
	ck_assert_uint_eq(c.stats().entries, 0);
}
END_TEST

START_TEST(reg_in_use_never_evicted)
{
	RegCache c(2, 0);
	RegRetired out;
	RegEntry *e1 = c.insert(A, A + P, R, H(0x1), c.epoch(), out);
	RegEntry *e2 = c.insert(A + P, A + 2 * P, R, H(0x2), c.epoch(), out);
	// Over the limit with everything in use: cached anyway.
	RegEntry *e3 = c.insert(A + 2 * P, A + 3 * P, R, H(0x3), c.epoch(), out);
	ck_assert_ptr_nonnull(e3);
	ck_assert(out.empty());
	ck_assert_uint_eq(c.stats().entries, 3);
	ck_assert(!c.make_room(0, out));
	ck_assert(out.empty());

	// A release does not evict, even over the limit.
	ck_assert_ptr_null(c.release(e2));
	ck_assert_uint_eq(c.stats().entries, 3);
	ck_assert_uint_eq(c.stats().unused_entries, 1);
	// The next insert evicts the only unused one and stays over.
	RegEntry *e4 = c.insert(A + 3 * P, A + 4 * P, R, H(0x4), c.epoch(), out);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x2});
	ck_assert_uint_eq(c.stats().entries, 3);
	ck_assert_uint_eq(e1->refs(), 1);
	ck_assert_uint_eq(e3->refs(), 1);
	ck_assert(!e1->stale() && !e3->stale() && !e4->stale());

	// Stale entries in use count against the limits too.
	ck_assert_uint_eq(c.invalidate(A, P, out), 1);
	ck_assert(out.empty());
	ck_assert_uint_eq(c.stats().entries, 3);

	c.release(e3);
	c.release(e4); // 3, 4
	// 1 (stale, held) + 1 more fits once both unused ones are gone.
	ck_assert(c.make_room(P, out));
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x3, 0x4}));
	ck_assert_uint_eq(c.stats().entries, 1);
	ck_assert_ptr_eq(c.release(e1), H(0x1));
	ck_assert(c.make_room(P, out));
	ck_assert(out.empty());
	ck_assert_uint_eq(c.stats().entries, 0);

	// evict_unused() empties the LRU list and nothing else.
	RegCache d;
	add_unused(d, A, A + P, R, 0x7);
	add_unused(d, A + 4 * P, A + 5 * P, R, 0x8);
	RegEntry *held = d.insert(A + 8 * P, A + 9 * P, R, H(0x9), d.epoch(), out);
	ck_assert_uint_eq(d.evict_unused(out), 2);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x7, 0x8}));
	ck_assert(!held->stale());
	ck_assert_ptr_eq(d.lookup(A + 8 * P, P, R), held);
	d.release(held);
	d.release(held);
	d.flush(out);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x9});
}
END_TEST

START_TEST(reg_flush)
{
	RegCache c;
	RegRetired out;
	add_unused(c, A, A + P, R, 0x1);
	add_unused(c, A + 8 * P, A + 9 * P, R, 0x2);
	RegEntry *held = c.insert(A + 4 * P, A + 6 * P, R, H(0x3), c.epoch(), out);
	const uint64_t since = c.epoch(); // a registration in flight across the flush

	ck_assert_uint_eq(c.flush(out), 3);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x1, 0x2}));
	ck_assert(held->stale());
	ck_assert_ptr_null(c.lookup(A, P, R));
	ck_assert_ptr_null(c.lookup(A + 4 * P, P, R));
	ck_assert_ptr_null(c.lookup(A + 8 * P, P, R));
	RegCacheStats s = c.stats();
	ck_assert_uint_eq(s.flushed, 3);
	ck_assert_uint_eq(s.entries, 1);
	ck_assert_uint_eq(s.stale_entries, 1);

	RegEntry *late = c.insert(A + 20 * P, A + 21 * P, R, H(0x4), since, out);
	ck_assert_ptr_nonnull(late);
	ck_assert(late->stale());
	ck_assert_ptr_null(c.lookup(A + 20 * P, P, R));
	ck_assert_ptr_eq(c.release(late), H(0x4));
	ck_assert_ptr_eq(c.release(held), H(0x3));
	ck_assert_uint_eq(c.flush(out), 0);
	s = c.stats();
	ck_assert_uint_eq(s.entries, 0);
	ck_assert_uint_eq(s.bytes, 0);
	ck_assert(out.empty());
}
END_TEST

START_TEST(reg_insert_races)
{
	RegCache c;
	RegRetired out;

	// munmap of the range while it was being registered: serve this caller,
	// never cache it.
	uint64_t since = c.epoch();
	c.invalidate(A + 3 * P, 1, out);
	RegEntry *e = c.insert(A, A + 4 * P, R, H(0x1), since, out);
	ck_assert_ptr_nonnull(e);
	ck_assert(e->stale());
	ck_assert_uint_eq(e->refs(), 1);
	ck_assert_ptr_null(c.lookup(A, P, R));
	ck_assert_uint_eq(c.stats().stale_inserts, 1);
	ck_assert_ptr_eq(c.release(e), H(0x1));

	// An invalidation elsewhere does not matter.
	since = c.epoch();
	c.invalidate(A + 4 * P, P, out); // adjacent to its end
	c.invalidate(A - P, P, out);
	e = c.insert(A, A + 4 * P, R, H(0x2), since, out);
	ck_assert(!e->stale());
	c.release(e);
	RegEntry *h = c.lookup(A, 4 * P, R);
	ck_assert_ptr_eq(h, e);
	c.release(h);

	// More invalidations than the log holds: assume the worst.
	since = c.epoch();
	for (size_t i = 0; i <= RegCache::kInvalLog; i++)
		c.invalidate(A + (100 + i) * P, P, out);
	e = c.insert(A + 10 * P, A + 11 * P, R, H(0x3), since, out);
	ck_assert(e->stale());
	ck_assert_ptr_eq(c.release(e), H(0x3));
	// Exactly as many as it holds: still checked precisely.
	since = c.epoch();
	for (size_t i = 0; i < RegCache::kInvalLog; i++)
		c.invalidate(A + (100 + i) * P, P, out);
	e = c.insert(A + 10 * P, A + 11 * P, R, H(0x4), since, out);
	ck_assert(!e->stale());
	c.release(e);

	// Two callers missed on the same pages and both registered: the first
	// insert is kept, the second serves its caller only.
	ck_assert_ptr_null(c.lookup(A + 20 * P, P, R));
	ck_assert_ptr_null(c.lookup(A + 20 * P, P, R));
	since = c.epoch();
	RegEntry *first = c.insert(A + 20 * P, A + 21 * P, R, H(0x5), since, out);
	RegEntry *second = c.insert(A + 20 * P, A + 21 * P, R, H(0x6), since, out);
	ck_assert(!first->stale());
	ck_assert(second->stale());
	ck_assert(out.empty());
	ck_assert_ptr_eq(c.release(second), H(0x6));
	h = c.lookup(A + 20 * P, P, R);
	ck_assert_ptr_eq(h, first);
	c.release(h);
	c.release(first);
	// With more access, the newcomer replaces it.
	RegEntry *third = c.insert(A + 20 * P, A + 21 * P, R | W, H(0x7), c.epoch(), out);
	ck_assert(!third->stale());
	ck_assert(drain(out) == std::vector<uintptr_t>{0x5});
	c.release(third);
	ck_assert_uint_eq(c.stats().stale_inserts, 3);

	c.flush(out);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x2, 0x4, 0x7}));
}
END_TEST

START_TEST(reg_stats)
{
	RegCache c(2, 0);
	RegRetired out;
	RegCacheStats s = c.stats();
	ck_assert_uint_eq(s.hits + s.misses + s.inserts + s.evictions + s.invalidations, 0);
	ck_assert_uint_eq(s.entries + s.bytes + s.stale_entries + s.unused_entries, 0);

	ck_assert_ptr_null(c.lookup(A, P, R)); // a miss
	add_unused(c, A, A + P, R, 0x1);
	add_unused(c, A + P, A + 3 * P, R, 0x2);
	c.release(c.lookup(A, 1, R)); // a hit
	// Evicts 2, the least recently released.
	RegEntry *e = c.insert(A + 8 * P, A + 9 * P, R, H(0x3), c.epoch(), out);
	c.invalidate(A, 1, out); // 1
	RegRange m;
	ck_assert(c.merged_range(A + 7 * P, P + 1, R, m)); // joins 3 (its first byte)
	ck_assert_uint_eq(m.start, A + 7 * P);
	ck_assert_uint_eq(m.end, A + 9 * P);
	// Replaces 3, in use: it goes stale.
	RegEntry *n = c.insert(m.start, m.end, R, H(0x4), c.epoch(), out);
	s = c.stats();
	ck_assert_uint_eq(s.hits, 1);
	ck_assert_uint_eq(s.misses, 1);
	ck_assert_uint_eq(s.inserts, 4);
	ck_assert_uint_eq(s.stale_inserts, 0);
	ck_assert_uint_eq(s.evictions, 1);
	ck_assert_uint_eq(s.replaced, 1);
	ck_assert_uint_eq(s.invalidations, 1);
	ck_assert_uint_eq(s.flushed, 0);
	ck_assert_uint_eq(s.entries, 2);
	ck_assert_uint_eq(s.bytes, 3 * P);
	ck_assert_uint_eq(s.stale_entries, 1);
	ck_assert_uint_eq(s.stale_bytes, P);
	ck_assert_uint_eq(s.unused_entries, 0);
	ck_assert(drain(out) == (std::vector<uintptr_t>{0x2, 0x1}));
	ck_assert_ptr_eq(c.release(e), H(0x3));
	c.release(n);
	ck_assert_uint_eq(c.flush(out), 1);
	ck_assert(drain(out) == std::vector<uintptr_t>{0x4});
	s = c.stats();
	ck_assert_uint_eq(s.flushed, 1);
	ck_assert_uint_eq(s.entries + s.bytes + s.stale_entries + s.unused_entries, 0);
}
END_TEST

START_TEST(reg_retired_moves)
{
	RegCache c;
	RegRetired out;
	add_unused(c, A, A + P, R, 0x1);
	add_unused(c, A + 2 * P, A + 3 * P, R, 0x2);
	c.flush(out);
	ck_assert_uint_eq(out.size(), 2);
	RegRetired taken(std::move(out));
	ck_assert(out.empty());
	ck_assert_uint_eq(out.size(), 0);
	ck_assert_ptr_null(out.pop());
	ck_assert_uint_eq(taken.size(), 2);
	RegRetired again;
	again = std::move(taken);
	ck_assert(taken.empty());
	ck_assert_ptr_eq(again.pop(), H(0x1));
	ck_assert_uint_eq(again.size(), 1);
	ck_assert_ptr_eq(again.pop(), H(0x2));
	ck_assert(again.empty());
	ck_assert_ptr_null(again.pop());
}
END_TEST

START_TEST(reg_no_alloc_no_throw)
{
	RegCache c(4, 0);
	RegRetired out;
	for (uintptr_t i = 0; i < 4; i++)
		add_unused(c, A + i * 2 * P, A + i * 2 * P + P, R, 0x10 + i);
	RegEntry *held = c.lookup(A, P, R);
	ck_assert_ptr_nonnull(held);

	const size_t before = g_allocs;
	for (int i = 0; i < 100; i++) {
		RegEntry *e = c.lookup(A + 2 * P, 1, R);
		ck_assert_ptr_nonnull(e);
		ck_assert_ptr_null(c.release(e));
		ck_assert_ptr_null(c.lookup(A + P, P, R));
		ck_assert_ptr_null(c.lookup(A + 2 * P, 1, W));
		RegRange m;
		ck_assert(c.merged_range(A + P, P, R, m));
		ck_assert(c.span(A + 3, 5, m));
	}
	ck_assert_uint_eq(c.invalidate(A + 2 * P, 1, out), 1);
	ck_assert_uint_eq(c.invalidate(A + 100 * P, 1, out), 0);
	ck_assert(c.make_room(P, out));
	ck_assert_uint_eq(c.evict_unused(out), 2);
	ck_assert_uint_eq(c.flush(out), 1); // the held one goes stale
	ck_assert_uint_eq(c.stats().hits, 101);
	size_t handed = 0;
	while (out.pop())
		handed++;
	ck_assert_uint_eq(handed, 3);
	ck_assert_ptr_eq(c.release(held), H(0x10));
	ck_assert_uint_eq(g_allocs, before);

	// Out of memory for the entry (0), then for its map node (1): not
	// cached, nothing thrown, nothing changed (not even the overlapped entry).
	RegCache d;
	add_unused(d, A, A + 2 * P, R, 0x1);
	const RegCacheStats s0 = d.stats();
	for (long fail : {0L, 1L}) {
		g_fail_in = fail;
		ck_assert_ptr_null(d.insert(A + P, A + 3 * P, R | W, H(0x2), d.epoch(), out));
		ck_assert_int_eq(g_fail_in, -1); // the failure did happen
		ck_assert(out.empty());
		const RegCacheStats s = d.stats();
		ck_assert_uint_eq(s.inserts, s0.inserts);
		ck_assert_uint_eq(s.replaced, 0);
		ck_assert_uint_eq(s.entries, 1);
		ck_assert_uint_eq(s.bytes, 2 * P);
		RegEntry *e = d.lookup(A, 2 * P, R);
		ck_assert_ptr_nonnull(e);
		d.release(e);
	}
	RegEntry *n = d.insert(A + P, A + 3 * P, R | W, H(0x2), d.epoch(), out);
	ck_assert_ptr_nonnull(n);
	ck_assert_ptr_eq(out.pop(), H(0x1));
	d.release(n);
	d.flush(out);
	ck_assert_ptr_eq(out.pop(), H(0x2));
}
END_TEST

namespace {

// The bytes of a request (len 0 is 1; the random requests never wrap).
RegRange bytes_of(uintptr_t addr, size_t len)
{
	return {addr, addr + (len ? len : 1), 0};
}

// The naive model: every registration not yet handed back, in a vector,
// with the rules of reg_cache.h applied by brute force.
struct ModelEntry {
	uintptr_t start, end;
	uint64_t access;
	uintptr_t handle;
	size_t refs;
	bool stale;
	uint64_t released_at; // LRU order among unused live entries
};

struct Model {
	size_t max_entries, max_bytes;
	std::vector<ModelEntry> ents;
	uint64_t clock = 0;

	ModelEntry *find(uintptr_t handle)
	{
		for (auto &m : ents)
			if (m.handle == handle)
				return &m;
		return nullptr;
	}
	void erase(uintptr_t handle)
	{
		ents.erase(std::find_if(ents.begin(), ents.end(),
					[&](const ModelEntry &m) { return m.handle == handle; }));
	}
	// Live entries overlapping [s, e), in address order.
	std::vector<ModelEntry *> overlapping(uintptr_t s, uintptr_t e)
	{
		std::vector<ModelEntry *> v;
		for (auto &m : ents)
			if (!m.stale && m.start < e && s < m.end)
				v.push_back(&m);
		std::sort(v.begin(), v.end(), [](auto *a, auto *b) { return a->start < b->start; });
		return v;
	}
	// A live entry holding all of [s, e) with at least `access`.
	ModelEntry *covering(uintptr_t s, uintptr_t e, uint64_t access)
	{
		ModelEntry *found = nullptr;
		for (ModelEntry *m : overlapping(s, e))
			if (m->start <= s && m->end >= e && (m->access & access) == access)
				found = m;
		return found;
	}
	// `bounded`: the union was too long, so the request alone.
	RegRange merged(RegRange r, uint64_t access, bool &bounded)
	{
		RegRange m{r.start, r.end, access};
		for (ModelEntry *x : overlapping(r.start, r.end)) {
			m.start = std::min(m.start, x->start);
			m.end = std::max(m.end, x->end);
			m.access |= x->access;
		}
		bounded = m.end - m.start > 2 * (r.end - r.start) + RegCache::kMergeSlack;
		return bounded ? RegRange{r.start, r.end, access} : m;
	}
	// Retires the live entries overlapping [s, e): unused ones appended to
	// `gone` (and dropped), the others made stale.
	void retire(uintptr_t s, uintptr_t e, std::vector<uintptr_t> &gone)
	{
		std::vector<uintptr_t> now;
		for (ModelEntry *m : overlapping(s, e)) {
			if (m->refs)
				m->stale = true;
			else
				now.push_back(m->handle);
		}
		for (uintptr_t h : now)
			erase(h);
		gone.insert(gone.end(), now.begin(), now.end());
	}
	size_t bytes() const
	{
		size_t b = 0;
		for (auto &m : ents)
			b += m.end - m.start;
		return b;
	}
	bool fits(size_t n, size_t b) const
	{
		return (!max_entries || n <= max_entries) && (!max_bytes || b <= max_bytes);
	}
	ModelEntry *lru_oldest()
	{
		ModelEntry *o = nullptr;
		for (auto &m : ents)
			if (!m.stale && m.refs == 0 && (!o || m.released_at < o->released_at))
				o = &m;
		return o;
	}
	void evict_one(std::vector<uintptr_t> &gone)
	{
		ModelEntry *o = lru_oldest();
		gone.push_back(o->handle);
		erase(o->handle);
	}
	// insert() of a registration made after a miss; `raced` if an
	// invalidation touched it meanwhile. Returns whether it is stale.
	bool insert(const RegRange &reg, bool raced, uintptr_t h, std::vector<uintptr_t> &gone)
	{
		const bool stale = raced || covering(reg.start, reg.end, reg.access);
		if (!stale)
			retire(reg.start, reg.end, gone);
		ents.push_back({reg.start, reg.end, reg.access, h, 1, stale, 0});
		while (!fits(ents.size(), bytes()) && lru_oldest())
			evict_one(gone);
		return stale;
	}
	// release(): whether the handle is handed back.
	bool release(uintptr_t h)
	{
		ModelEntry *m = find(h);
		if (--m->refs > 0)
			return false;
		if (m->stale) {
			erase(h);
			return true;
		}
		m->released_at = ++clock;
		return false;
	}
	// Live entries pairwise disjoint, stale ones all referenced.
	bool consistent() const
	{
		for (const auto &a : ents) {
			if (a.stale && a.refs == 0)
				return false;
			for (const auto &b : ents)
				if (&a != &b && !a.stale && !b.stale && a.start < b.end &&
				    b.start < a.end)
					return false;
		}
		return true;
	}
};

} // namespace

START_TEST(reg_random_vs_model)
{
	constexpr size_t kOps = 30000;
	constexpr size_t kPages = 48;
	constexpr uintptr_t kBase = 0x7f0000000000;
	Model model{12, 40 * P, {}};
	RegCache c(model.max_entries, model.max_bytes);
	std::mt19937_64 rng(20240611);
	auto rnd = [&](uint64_t n) { return rng() % n; }; // [0, n)

	struct Held {
		RegEntry *e;
		uintptr_t handle;
	};
	std::vector<Held> held;
	std::set<uintptr_t> returned;
	uintptr_t next_handle = 1;
	size_t inserted = 0, hits = 0, stale_returns = 0, merges_bounded = 0;
	size_t step = 0;

	// Every handle the cache gives up: given once, and never while held.
	// (ck_assert records each passing check: keep them out of inner loops.)
	auto hand_back = [&](uintptr_t h) {
		ck_assert_msg(returned.insert(h).second, "handle %#lx returned twice",
			      (unsigned long)h);
		const bool is_held = std::any_of(held.begin(), held.end(),
						 [&](const Held &x) { return x.handle == h; });
		ck_assert_msg(!is_held, "handle %#lx returned while held", (unsigned long)h);
		ck_assert_ptr_null(model.find(h)); // the model dropped it already
	};
	// What the cache retired into `out` must be exactly `want`, in order.
	auto check_out = [&](RegRetired &out, const std::vector<uintptr_t> &want) {
		std::vector<uintptr_t> got = drain(out);
		ck_assert_msg(got == want, "step %zu: %zu handles retired, want %zu", step,
			      got.size(), want.size());
		for (uintptr_t h : got)
			hand_back(h);
	};
	// Half of them buffers the application reuses (few distinct byte
	// ranges, neighbours sharing pages), for hits; the rest any bytes.
	auto random_request = [&](uintptr_t &addr, size_t &len) {
		if (rnd(2)) {
			addr = kBase + 128 + rnd(8) * (3 * P / 2);
			len = rnd(4) ? 3 * P / 2 : 3 * P;
			return;
		}
		addr = kBase + rnd(kPages * P);
		len = 1 + rnd(rnd(4) == 0 ? 12 * P : 2 * P);
	};
	auto release = [&](size_t i) {
		const Held x = held[i];
		held.erase(held.begin() + static_cast<ptrdiff_t>(i));
		ck_assert_uint_eq(x.e->refs(), model.find(x.handle)->refs);
		void *h = c.release(x.e);
		if (model.release(x.handle)) {
			ck_assert_msg(id(h) == x.handle, "step %zu: stale entry not handed back",
				      step);
			hand_back(x.handle);
			stale_returns++;
		} else {
			ck_assert_ptr_null(h);
		}
	};
	// A transfer: lookup, and on most misses register and insert.
	auto transfer = [&] {
		uintptr_t addr;
		size_t len;
		random_request(addr, len);
		const uint64_t acc = rnd(8);
		const RegRange r = bytes_of(addr, len);
		ModelEntry *want = model.covering(r.start, r.end, acc);
		RegEntry *e = c.lookup(addr, len, acc);
		if (want) {
			ck_assert_msg(e && id(e->handle()) == want->handle, "step %zu: missed",
				      step);
			want->refs++;
			held.push_back({e, want->handle});
			hits++;
			return;
		}
		ck_assert_msg(e == nullptr, "step %zu: hit %#lx, want a miss", step,
			      (unsigned long)(e ? id(e->handle()) : 0));
		if (rnd(10) < 3)
			return;

		const uint64_t since = c.epoch();
		RegRange reg{r.start, r.end, acc};
		if (rnd(10) < 6) {
			RegRange m;
			ck_assert(c.merged_range(addr, len, acc, m));
			bool bounded;
			reg = model.merged(r, acc, bounded);
			merges_bounded += bounded;
			ck_assert_msg(m.start == reg.start && m.end == reg.end &&
					      m.access == reg.access,
				      "step %zu: merged_range", step);
		}
		// Sometimes memory is unmapped while the range is registered.
		bool raced = false;
		if (rnd(10) == 0) {
			RegRetired out;
			uintptr_t ia;
			size_t il;
			random_request(ia, il);
			const RegRange ir = bytes_of(ia, il);
			raced = ir.start < reg.end && reg.start < ir.end;
			std::vector<uintptr_t> gone;
			model.retire(ir.start, ir.end, gone);
			c.invalidate(ia, il, out);
			check_out(out, gone);
		}
		// Now and then a second caller registered the same miss: its entry
		// is always stale (raced, or the first one covers it).
		const int callers = rnd(20) == 0 ? 2 : 1;
		for (int k = 0; k < callers; k++) {
			RegRetired out;
			const uintptr_t h = next_handle++ << 4;
			std::vector<uintptr_t> gone;
			const bool stale = model.insert(reg, raced, h, gone);
			ck_assert(k == 0 || stale);
			RegEntry *n = c.insert(reg.start, reg.end, reg.access, H(h), since, out);
			ck_assert_ptr_nonnull(n);
			ck_assert_msg(n->stale() == stale, "step %zu: stale %d, want %d", step,
				      n->stale(), stale);
			check_out(out, gone);
			held.push_back({n, h});
			inserted++;
		}
	};

	for (; step < kOps; step++) {
		RegRetired out;
		std::vector<uintptr_t> gone;
		const uint64_t op = rnd(100);
		if (op < 45) {
			transfer();
		} else if (op < 80 || held.size() > 24) {
			if (!held.empty())
				release(rnd(held.size()));
		} else if (op < 93) {
			uintptr_t addr;
			size_t len;
			random_request(addr, len);
			const RegRange r = bytes_of(addr, len);
			const size_t touched = model.overlapping(r.start, r.end).size();
			model.retire(r.start, r.end, gone);
			ck_assert_uint_eq(c.invalidate(addr, len, out), touched);
			check_out(out, gone);
		} else if (op < 98) {
			const size_t bytes = rnd(16) * P;
			auto fits = [&] {
				return model.fits(model.ents.size() + 1, model.bytes() + bytes);
			};
			while (!fits() && model.lru_oldest())
				model.evict_one(gone);
			ck_assert_int_eq(c.make_room(bytes, out), fits());
			check_out(out, gone);
		} else if (op < 99) {
			while (model.lru_oldest())
				model.evict_one(gone);
			ck_assert_uint_eq(c.evict_unused(out), gone.size());
			check_out(out, gone);
		} else {
			const size_t live = model.overlapping(0, UINTPTR_MAX).size();
			model.retire(0, UINTPTR_MAX, gone);
			ck_assert_uint_eq(c.flush(out), live);
			check_out(out, gone);
		}

		ck_assert_msg(model.consistent(), "step %zu: the model broke its own rules", step);
		const RegCacheStats s = c.stats();
		size_t stale_n = 0, stale_b = 0, unused = 0;
		for (const auto &m : model.ents) {
			stale_n += m.stale;
			stale_b += m.stale ? m.end - m.start : 0;
			unused += !m.stale && m.refs == 0;
		}
		ck_assert_msg(s.entries == model.ents.size() && s.bytes == model.bytes() &&
				      s.stale_entries == stale_n && s.stale_bytes == stale_b &&
				      s.unused_entries == unused,
			      "step %zu: stats %zu entries %zu bytes, want %zu %zu", step,
			      s.entries, s.bytes, model.ents.size(), model.bytes());
	}

	// Wind down: every reference dropped, then a flush.
	while (!held.empty())
		release(held.size() - 1);
	RegRetired out;
	std::vector<uintptr_t> gone;
	model.retire(0, UINTPTR_MAX, gone);
	c.flush(out);
	check_out(out, gone);
	ck_assert_uint_eq(model.ents.size(), 0);
	ck_assert_uint_eq(c.stats().entries, 0);
	ck_assert_uint_eq(c.stats().bytes, 0);
	// Every handle ever inserted came back exactly once.
	ck_assert_uint_eq(returned.size(), inserted);
	ck_assert_uint_eq(inserted, next_handle - 1);
	for (uintptr_t h = 1; h < next_handle; h++)
		ck_assert(returned.count(h << 4) == 1);

	// The run must have exercised every path, not just passed.
	const RegCacheStats s = c.stats();
	ck_assert_uint_gt(hits, 1000);
	ck_assert_uint_eq(s.hits, hits);
	ck_assert_uint_gt(s.evictions, 100);
	ck_assert_uint_gt(s.replaced, 100);
	ck_assert_uint_gt(s.invalidations, 100);
	ck_assert_uint_gt(s.stale_inserts, 10);
	ck_assert_uint_gt(s.flushed, 10);
	ck_assert_uint_gt(stale_returns, 100);
	ck_assert_uint_gt(merges_bounded, 100);
}
END_TEST

// What a provider calls under the lock its memory monitor also takes
// (mem_monitor.h: no allocation, no free there, or a heap trim can wait for
// the monitor while the monitor waits for the lock) neither allocates nor
// frees: insert() with prepared allocations, lookup, release into a
// RegRetired, invalidate, eviction, make_room and flush. The memory goes
// when the caller drains the RegRetired and drops leftover RegPrepared,
// outside the lock.
START_TEST(reg_locked_calls_neither_allocate_nor_free)
{
	RegCache c(3, 0);
	std::vector<RegPrepared> preps;
	for (int i = 0; i < 8; i++) {
		preps.push_back(RegCache::prepare());
		ck_assert(preps.back());
	}
	RegRetired out;
	const size_t allocs = g_allocs, frees = g_frees;
	// "Locked" from here.
	RegEntry *a = c.insert(A, A + 2 * P, R, H(0x10), c.epoch(), out, preps[0]);
	RegEntry *b = c.insert(A + 8 * P, A + 9 * P, R, H(0x20), c.epoch(), out, preps[1]);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert(!preps[0]);
	ck_assert(!c.release(a, out)); // live: to the LRU, nothing retired
	ck_assert_ptr_eq(c.lookup(A + 100, 10, R), a);
	ck_assert_ptr_null(c.lookup(A + 20 * P, 10, R)); // a miss
	// A stale insert (covered already): its unused node stays with it.
	RegEntry *dup = c.insert(A, A + P, R, H(0x30), c.epoch(), out, preps[2]);
	ck_assert_ptr_nonnull(dup);
	ck_assert(dup->stale());
	ck_assert(c.release(dup, out)); // its last reference: into out
	// An overlapping insert retires `a`, which is in use: stale.
	RegEntry *wide = c.insert(A, A + 4 * P, R | W, H(0x40), c.epoch(), out, preps[3]);
	ck_assert_ptr_nonnull(wide);
	ck_assert(a->stale());
	ck_assert(c.release(a, out));
	const uint64_t since = c.epoch();
	ck_assert_uint_eq(c.invalidate(A + 8 * P, P, out), 1); // b, in use: stale
	ck_assert(c.release(b, out));
	// Raced with that invalidation: stale on arrival.
	RegEntry *raced = c.insert(A + 8 * P, A + 9 * P, R, H(0x50), since, out, preps[4]);
	ck_assert(raced->stale());
	ck_assert(c.release(raced, out));
	ck_assert(!c.release(wide, out));
	for (int i = 0; i < 3; i++) {
		const uintptr_t at = A + (100 + 10 * i) * P;
		RegEntry *e = c.insert(at, at + P, R, H(0x60 + 0x10 * i), c.epoch(), out, preps[5 + i]);
		ck_assert(!c.release(e, out));
	}
	ck_assert(c.make_room(P, out));
	ck_assert_uint_gt(c.evict_unused(out), 0);
	(void)c.flush(out);
	ck_assert_uint_eq(g_allocs, allocs);
	ck_assert_uint_eq(g_frees, frees);
	// "Unlocked": every handle comes back once, and now memory is freed.
	std::vector<uintptr_t> got = drain(out);
	std::sort(got.begin(), got.end());
	const std::vector<uintptr_t> want = {0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80};
	ck_assert_uint_eq(got.size(), want.size());
	for (size_t i = 0; i < want.size(); i++)
		ck_assert_uint_eq(got[i], want[i]);
	ck_assert_uint_gt(g_frees, frees);
	ck_assert_uint_eq(c.stats().entries, 0);
}
END_TEST

// An empty RegPrepared (out of memory at prepare()) caches nothing and
// changes nothing; a used one is emptied, an unused one kept.
START_TEST(reg_prepared_empty_and_leftover)
{
	RegCache c;
	RegRetired out;
	RegPrepared none;
	ck_assert(!none);
	ck_assert_ptr_null(c.insert(A, A + P, R, H(0x1), c.epoch(), out, none));
	ck_assert_uint_eq(c.stats().entries, 0);
	RegPrepared p = RegCache::prepare();
	ck_assert_ptr_null(c.insert(A + P, A + P, R, H(0x1), c.epoch(), out, p)); // empty
	ck_assert(p); // kept for the caller
	g_fail_in = 0;
	RegPrepared failed = RegCache::prepare();
	g_fail_in = -1;
	ck_assert(!failed);
	RegEntry *e = c.insert(A, A + P, R, H(0x2), c.epoch(), out, p);
	ck_assert_ptr_nonnull(e);
	ck_assert(!p);
	ck_assert_ptr_eq(c.lookup(A, P, R), e);
	ck_assert(!c.release(e, out));
	ck_assert(!c.release(e, out));
	ck_assert(out.empty());
	(void)c.flush(out);
	ck_assert_uint_eq(drain(out).size(), 1);
}
END_TEST

Suite *reg_cache_suite()
{
	Suite *s = suite_create("reg_cache");

	TCase *tc = tcase_create("core");
	tcase_add_test(tc, reg_span_bytes);
	tcase_add_test(tc, reg_wrap_refused);
	tcase_add_test(tc, reg_hit_miss);
	tcase_add_test(tc, reg_access_flags);
	tcase_add_test(tc, reg_cover_vs_partial);
	tcase_add_test(tc, reg_merged_range);
	tcase_add_test(tc, reg_exact_rights);
	tcase_add_test(tc, reg_adjacent_independent);
	tcase_add_test(tc, reg_adjacent_pool_cycle);
	tcase_add_test(tc, reg_overlap_merges);
	tcase_add_test(tc, reg_merge_bounded);
	tcase_add_test(tc, reg_invalidate_shared_page);
	tcase_add_test(tc, reg_invalidate_unused);
	tcase_add_test(tc, reg_invalidate_in_use);
	tcase_add_test(tc, reg_invalidate_several);
	tcase_add_test(tc, reg_invalidate_none);
	tcase_add_test(tc, reg_lru_by_count);
	tcase_add_test(tc, reg_lru_by_bytes);
	tcase_add_test(tc, reg_in_use_never_evicted);
	tcase_add_test(tc, reg_flush);
	tcase_add_test(tc, reg_insert_races);
	tcase_add_test(tc, reg_stats);
	tcase_add_test(tc, reg_retired_moves);
	tcase_add_test(tc, reg_no_alloc_no_throw);
	tcase_add_test(tc, reg_locked_calls_neither_allocate_nor_free);
	tcase_add_test(tc, reg_prepared_empty_and_leftover);
	suite_add_tcase(s, tc);

	tc = tcase_create("random");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, reg_random_vs_model);
	suite_add_tcase(s, tc);
	return s;
}
