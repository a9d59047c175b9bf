// Device suite rdm_atomic_flags: every flag fi_atomic(3) allows on the
// atomic calls of vrma's RDM endpoint, on both execution paths (emulated by
// the target's vrma; FI_VRMA_RDM_NATIVE_ATOMICS=1: the device's 64-bit sum,
// read and compare-and-swap) and in both key modes (provider keys at
// virtual addresses; scalable keys, mr_mode 0).
//  - rdm_atomic_flags_table: for every kind x op x datatype the endpoint
//    offers (enumerated with the valid calls), one call per flag and per
//    combination below (kCases), each on a slot of the target between
//    guards. The test keeps an image of the target computed with
//    test/atomic_reference.h in posting order, and checks the target and
//    its guards, every fetched old value, the initiator's entries (a CQ
//    bound with FI_SELECTIVE_COMPLETION: exactly one per call with
//    FI_COMPLETION, with its context and flags, none for the others), the
//    target's remote CQ data entries, and the FI_WRITE/FI_READ counters
//    (every call counted). FI_INJECT calls scribble over their operand and
//    compare arrays as soon as they return.
//  - rdm_atomic_flags_rules: entries without FI_SELECTIVE_COMPLETION;
//    FI_MORE holding requests back until the call without it, a transmit
//    to another peer (atomic, RMA write, send) and a failed call posting
//    them; FI_FENCE behind an RMA write, an RMA read and an atomic the
//    target has not applied yet; FI_INJECT up to inject_size.
// Native variants run in a process of their own (check's fork mode), where
// FI_VRMA_RDM_NATIVE_ATOMICS set before the first fi_getinfo reaches the
// provider.
#include "rdm_atomic_harness.h"
#include "../atomic_reference.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>
#include <vector>

using namespace vt;
using namespace atomic_ref;
using namespace atomic_test;

namespace {

using atomic_test::Region; // not the MSG harness's vt::Region

constexpr size_t kN = 2;           // elements per call
constexpr size_t kSlotBytes = 128; // a guard, kN elements, a guard, of the largest type (32 bytes)
constexpr size_t kSlots = 10;
constexpr uint64_t kScalableKey = 7;

// One call of the table: the flags of its msg form (or fi_inject_atomic),
// and the slot it updates. Calls on one slot see each other's results in
// posting order.
struct Case {
	const char *name;
	uint64_t flags;
	size_t slot;
	bool inject_api = false; // fi_inject_atomic (fi_atomic only): no entry, counted
};

const Case kCases[] = {
	{"FI_COMPLETION", FI_COMPLETION, 0},
	{"no flag (no entry)", 0, 1},
	{"FI_INJECT", FI_INJECT | FI_COMPLETION, 2},
	{"FI_INJECT | FI_DELIVERY_COMPLETE", FI_INJECT | FI_DELIVERY_COMPLETE | FI_COMPLETION, 3},
	{"FI_DELIVERY_COMPLETE", FI_DELIVERY_COMPLETE | FI_COMPLETION, 4},
	{"FI_TRANSMIT_COMPLETE", FI_TRANSMIT_COMPLETE | FI_COMPLETION, 5},
	{"FI_INJECT_COMPLETE", FI_INJECT_COMPLETE | FI_COMPLETION, 6},
	{"FI_REMOTE_CQ_DATA", FI_REMOTE_CQ_DATA | FI_COMPLETION, 7},
	// Fenced behind everything above; on slots 4 and 3 they see those
	// calls' results.
	{"FI_FENCE", FI_FENCE | FI_COMPLETION, 4},
	{"FI_FENCE | FI_INJECT (no entry)", FI_FENCE | FI_INJECT, 3},
	// One chain of four on one slot: three with FI_MORE, one without.
	{"FI_MORE (1 of 4)", FI_MORE | FI_COMPLETION, 8},
	{"FI_MORE | FI_INJECT (2 of 4, no entry)", FI_MORE | FI_INJECT, 8},
	{"FI_MORE | FI_INJECT | FI_DELIVERY_COMPLETE | FI_REMOTE_CQ_DATA (3 of 4)",
	 FI_MORE | FI_INJECT | FI_DELIVERY_COMPLETE | FI_REMOTE_CQ_DATA | FI_COMPLETION, 8},
	{"the chain's end (4 of 4)", FI_COMPLETION, 8},
	{"fi_inject_atomic", 0, 9, true},
};

// The initiator's CQ is bound with FI_SELECTIVE_COMPLETION, with FI_WRITE
// and FI_READ counters.
RdmNodeOptions selective_counted()
{
	RdmNodeOptions o;
	o.cq_bind_flags = FI_SELECTIVE_COMPLETION;
	o.write_cntr = true;
	o.read_cntr = true;
	return o;
}

// An initiator `a` and a target `b` (their own domains), the target's
// region, the counts a's counters must show, and the contexts of every
// call (never reused, so that an entry of an earlier call is told apart).
struct Bed {
	const bool scalable;
	AtomicEnv ea, eb;
	RdmNode a, b;
	Region r;
	fi_addr_t to;
	uint64_t writes = 0, reads = 0;
	uint64_t next_data = 0x8000000100000001ULL; // all 64 bits travel
	std::deque<fi_context> ctx;
	size_t calls = 0;

	explicit Bed(int mr_mode)
		: scalable(mr_mode == 0), ea(mr_mode), eb(mr_mode), a(ea, selective_counted()), b(eb),
		  r(eb, 4096, kRemote, kScalableKey)
	{
		connect_all({&a, &b});
		to = a.addr_of(b);
	}
	uint64_t raddr(size_t off) const { return scalable ? off : r.addr(off); }
	uint64_t rkey() const { return scalable ? kScalableKey : r.key(); }
	void expect_counts(const char *what)
	{
		const bool reached = progress_until([&] {
			return fi_cntr_read(a.write_cntr) >= writes && fi_cntr_read(a.read_cntr) >= reads;
		});
		ck_assert_msg(reached && fi_cntr_read(a.write_cntr) == writes && fi_cntr_read(a.read_cntr) == reads,
			      "%s: FI_WRITE counter %" PRIu64 " (expected %" PRIu64 "), FI_READ %" PRIu64
			      " (expected %" PRIu64 ")",
			      what, fi_cntr_read(a.write_cntr), writes, fi_cntr_read(a.read_cntr), reads);
		ck_assert_msg(fi_cntr_readerr(a.write_cntr) == 0 && fi_cntr_readerr(a.read_cntr) == 0,
			      "%s: errors counted", what);
	}
};

// One call of the table as posted: its arrays (alive until it completed)
// and what it must fetch.
template <typename T> struct Posted {
	const Case *c = nullptr;
	fi_context *ctx = nullptr;
	std::array<T, kN> x{}, cmp{}, res{}, want_res{};
	uint64_t data = 0;
};

template <typename T> void scribble(std::array<T, kN> &a) { memset(static_cast<void *>(a.data()), 0xa5, sizeof a); }

// Every case of kCases for one kind, op and datatype.
template <typename T> void run_combo(Bed &t, Kind k, int op, int dt)
{
	const std::vector<T> s = samples<T>();
	const size_t size = sizeof(T);
	std::array<std::array<T, kN + 2>, kSlots> img;
	for (size_t slot = 0; slot < kSlots; slot++)
		for (size_t i = 0; i < kN + 2; i++) {
			img[slot][i] = s[(slot * 3 + i + t.calls) % s.size()];
			memcpy(t.r.mem.data() + slot * kSlotBytes + i * size, &img[slot][i], size);
		}
	const bool read = op == FI_ATOMIC_READ;
	std::vector<Posted<T>> posted;
	posted.reserve(std::size(kCases)); // the arrays stay where the calls saw them
	char what[200];
	size_t entries = 0;
	for (const Case &c : kCases) {
		if (c.inject_api && k != Kind::Plain)
			continue;
		snprintf(what, sizeof what, "%s op %d datatype %d, %s", kind_name(k), op, dt, c.name);
		Posted<T> &p = posted.emplace_back();
		p.c = &c;
		p.ctx = &t.ctx.emplace_back();
		std::array<T, kN + 2> &cur = img[c.slot];
		for (size_t i = 0; i < kN; i++) {
			p.x[i] = s[(t.calls * 5 + i * 3 + 1) % s.size()];
			// Compares that match (even elements) and that do not.
			p.cmp[i] = i % 2 == 0 ? cur[i + 1] : s[(t.calls * 7 + i * 5 + 2) % s.size()];
			p.want_res[i] = cur[i + 1];
			T n{};
			if (reference(op, cur[i + 1], p.x[i], p.cmp[i], n))
				cur[i + 1] = n;
		}
		t.calls++;
		if (c.flags & FI_REMOTE_CQ_DATA)
			p.data = t.next_data++;
		fi_ioc ioc{p.x.data(), kN}, cioc{p.cmp.data(), kN}, rioc{p.res.data(), kN};
		const uint64_t addr = t.raddr(c.slot * kSlotBytes + size);
		fi_rma_ioc rma{addr, kN, t.rkey()};
		const fi_msg_atomic m{read ? nullptr : &ioc, nullptr, read ? 0u : 1u, t.to, &rma, 1,
				      static_cast<fi_datatype>(dt), static_cast<fi_op>(op), p.ctx, p.data};
		const ssize_t rc = post_retry([&] {
			return c.inject_api ? fi_inject_atomic(t.a.ep, p.x.data(), kN, t.to, addr, t.rkey(),
							       static_cast<fi_datatype>(dt), static_cast<fi_op>(op))
					    : post_atomicmsg(t.a.ep, k, m, &cioc, &rioc, 1, c.flags);
		});
		ck_assert_msg(rc == 0, "%s: %zd (%s)", what, rc, fi_strerror(static_cast<int>(-rc)));
		if (c.inject_api || (c.flags & FI_INJECT)) {
			// The call copied them: the target must see the values above.
			scribble(p.x);
			scribble(p.cmp);
		}
		if (c.flags & FI_COMPLETION && !c.inject_api)
			entries++;
		(k == Kind::Plain ? t.writes : t.reads)++;
	}
	snprintf(what, sizeof what, "%s op %d datatype %d", kind_name(k), op, dt);
	// The initiator's entries: one per call with FI_COMPLETION, in any order.
	std::vector<bool> seen(posted.size(), false);
	for (size_t n = 0; n < entries; n++) {
		const Completion e = next(t.a);
		ck_assert_msg(e.ok && e.e.flags == done_flags(k), "%s: entry %s (flags 0x%" PRIx64 " expected)", what,
			      e.describe().c_str(), done_flags(k));
		size_t j = 0;
		while (j < posted.size() && posted[j].ctx != e.e.op_context)
			j++;
		ck_assert_msg(j < posted.size(), "%s: an entry for a context of no call of this round: %s", what,
			      e.describe().c_str());
		ck_assert_msg((posted[j].c->flags & FI_COMPLETION) && !posted[j].c->inject_api,
			      "%s: an entry for \"%s\", which has no FI_COMPLETION", what, posted[j].c->name);
		ck_assert_msg(!seen[j], "%s: a second entry for \"%s\"", what, posted[j].c->name);
		seen[j] = true;
	}
	// The target's remote CQ data, in the order the calls were applied.
	const uint64_t remote = FI_ATOMIC | (read ? FI_REMOTE_READ : FI_REMOTE_WRITE) | FI_REMOTE_CQ_DATA;
	for (const Posted<T> &p : posted) {
		if (!(p.c->flags & FI_REMOTE_CQ_DATA))
			continue;
		const Completion e = expect_ok(t.b, nullptr, remote, what);
		ck_assert_msg(e.e.data == p.data && e.e.len == kN * size && e.src == t.b.addr_of(t.a),
			      "%s: the target's entry for \"%s\": %s (data 0x%" PRIx64 ", len %zu expected)", what,
			      p.c->name, e.describe().c_str(), p.data, kN * size);
	}
	// Every call counted, those without an entry too: then all are done.
	t.expect_counts(what);
	for (size_t slot = 0; slot < kSlots; slot++)
		for (size_t i = 0; i < kN + 2; i++)
			ck_assert_msg(same(load<T>(t.r.mem.data() + slot * kSlotBytes + i * size), img[slot][i]),
				      "%s: slot %zu element %zu (%s)", what, slot, i,
				      i == 0 || i == kN + 1 ? "a guard" : "updated");
	if (k != Kind::Plain)
		for (const Posted<T> &p : posted)
			for (size_t i = 0; i < kN; i++)
				ck_assert_msg(same(p.res[i], p.want_res[i]), "%s, %s: old value %zu", what, p.c->name, i);
}

// The table over every combination the endpoint offers, of the datatypes
// `only` names (all when empty); returns how many there were.
size_t run_table(int mr_mode, bool native, std::initializer_list<int> only = {})
{
	Bed t(mr_mode);
	size_t combos = 0;
	for (Kind k : kKinds)
		for (int op = 0; op <= FI_MSWAP; op++)
			for_each_datatype([&](int dt, auto zero) {
				using T = decltype(zero);
				if (only.size() && std::find(only.begin(), only.end(), dt) == only.end())
					return;
				size_t count = 0;
				const bool offered = valid(t.a.ep, k, dt, op, &count) == 0;
				const bool is64 = dt == FI_INT64 || dt == FI_UINT64;
				const bool device = (k == Kind::Plain && op == FI_SUM) ||
						    (k == Kind::Fetch && (op == FI_SUM || op == FI_ATOMIC_READ)) ||
						    (k == Kind::Compare && op == FI_CSWAP);
				const bool want = native && is64 ? device && expected_valid(k, op, dt)
								 : expected_valid(k, op, dt);
				ck_assert_msg(offered == want, "%s op %d datatype %d: offered %d, expected %d",
					      kind_name(k), op, dt, offered, want);
				if (!offered)
					return;
				ck_assert_uint_ge(count, kN);
				run_combo<T>(t, k, op, dt);
				combos++;
			});
	expect_none(t.a, 100, "the initiator after the table");
	expect_none(t.b, 100, "the target after the table");
	t.expect_counts("after the table");
	return combos;
}

START_TEST(rdm_atomic_flags_emulated)
{
	ck_assert_uint_eq(run_table(kBasicMr, false), 414);
}
END_TEST

START_TEST(rdm_atomic_flags_emulated_scalable)
{
	ck_assert_uint_eq(run_table(0, false), 414);
}
END_TEST

// 64-bit sum, read and compare-and-swap by the device; FI_INT32 and
// FI_UINT128 beside them stay emulated on the same connection.
START_TEST(rdm_atomic_flags_native)
{
	if (!with_native_atomics("rdm_atomic_flags_native"))
		return;
	ck_assert_uint_eq(run_table(kBasicMr, true, {FI_INT32, FI_INT64, FI_UINT64, FI_UINT128}), 30 + 8 + 30);
}
END_TEST

START_TEST(rdm_atomic_flags_native_scalable)
{
	if (!with_native_atomics("rdm_atomic_flags_native_scalable"))
		return;
	ck_assert_uint_eq(run_table(0, true, {FI_INT32, FI_INT64, FI_UINT64, FI_UINT128}), 30 + 8 + 30);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_atomic_flags_rules

int64_t word(const Region &r, size_t off)
{
	int64_t v;
	memcpy(&v, r.mem.data() + off, 8);
	return v;
}

// An INT64 atomic of one element at byte `off` of r by its msg form.
struct One {
	int64_t x, cmp = 0, res = -1;
	fi_ioc ioc, cioc, rioc;
	fi_rma_ioc rma;
	fi_msg_atomic m;
	fi_context ctx;
	One(fi_addr_t to, const Region &r, size_t off, int op, int64_t v, uint64_t data = 0)
		: x(v), ioc{&x, 1}, cioc{&cmp, 1}, rioc{&res, 1}, rma{r.addr(off), 1, r.key()},
		  m{op == FI_ATOMIC_READ ? nullptr : &ioc, nullptr, op == FI_ATOMIC_READ ? 0u : 1u, to, &rma, 1,
		    FI_INT64, static_cast<fi_op>(op), &ctx, data}
	{
	}
	One(const One &) = delete;
	One &operator=(const One &) = delete;
	ssize_t post(fid_ep *ep, Kind k, uint64_t flags) { return post_atomicmsg(ep, k, m, &cioc, &rioc, 1, flags); }
};

// Without FI_SELECTIVE_COMPLETION every call has its entry, with or without
// FI_COMPLETION, FI_INJECT and through the non-msg calls; fi_inject_atomic
// has none. Counted all the same. `native`: the INT64 ones by the device.
void check_completions(bool native)
{
	AtomicEnv ea, eb;
	RdmNodeOptions o;
	o.write_cntr = o.read_cntr = true;
	RdmNode a(ea, o), b(eb);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Region r(eb, 64);
	memset(r.mem.data(), 0, 64);
	{
		One sum(to, r, 0, FI_SUM, 3);
		post([&] { return sum.post(a.ep, Kind::Plain, 0); }, "fi_atomicmsg, no flag");
		expect_ok(a, &sum.ctx, FI_ATOMIC | FI_WRITE, "fi_atomicmsg, no flag");
		post([&] { return sum.post(a.ep, Kind::Plain, FI_INJECT); }, "fi_atomicmsg, FI_INJECT");
		sum.x = 1000; // copied at the call
		expect_ok(a, &sum.ctx, FI_ATOMIC | FI_WRITE, "fi_atomicmsg, FI_INJECT");
		sum.x = 3;
		post([&] { return sum.post(a.ep, Kind::Fetch, FI_INJECT); }, "fi_fetch_atomicmsg, FI_INJECT");
		sum.x = 1000;
		expect_ok(a, &sum.ctx, FI_ATOMIC | FI_READ, "fi_fetch_atomicmsg, FI_INJECT");
		ck_assert_int_eq(sum.res, 6);
		sum.cmp = 9;
		sum.x = -1;
		sum.m.op = FI_CSWAP;
		post([&] { return sum.post(a.ep, Kind::Compare, FI_INJECT); }, "fi_compare_atomicmsg, FI_INJECT");
		sum.x = sum.cmp = 1000;
		expect_ok(a, &sum.ctx, FI_ATOMIC | FI_READ, "fi_compare_atomicmsg, FI_INJECT");
		ck_assert_int_eq(sum.res, 9);
		ck_assert_int_eq(word(r, 0), -1);
	}
	int64_t x = 5, c = 5, old = 0;
	fi_context ctx;
	post([&] { return fi_atomic(a.ep, &x, 1, nullptr, to, r.addr(8), r.key(), FI_INT64, FI_SUM, &ctx); }, "fi_atomic");
	expect_ok(a, &ctx, FI_ATOMIC | FI_WRITE, "fi_atomic");
	post([&] { return fi_fetch_atomic(a.ep, &x, 1, nullptr, &old, nullptr, to, r.addr(8), r.key(), FI_INT64, FI_SUM,
					  &ctx); }, "fi_fetch_atomic");
	expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "fi_fetch_atomic");
	ck_assert_int_eq(old, 5);
	x = 50;
	c = 10;
	post([&] { return fi_compare_atomic(a.ep, &x, 1, nullptr, &c, nullptr, &old, nullptr, to, r.addr(8), r.key(),
					    FI_INT64, FI_CSWAP, &ctx); }, "fi_compare_atomic");
	expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "fi_compare_atomic");
	ck_assert_int_eq(old, 10);
	x = 4;
	post([&] { return fi_inject_atomic(a.ep, &x, 1, to, r.addr(8), r.key(), FI_INT64, FI_SUM); }, "fi_inject_atomic");
	x = 1000;
	// An INT32 beside (emulated in both modes).
	int32_t x32 = 9;
	post([&] { return fi_inject_atomic(a.ep, &x32, 1, to, r.addr(16), r.key(), FI_INT32, FI_MAX); },
	     "fi_inject_atomic INT32 MAX");
	x32 = 0;
	expect_cntr(a.write_cntr, 5, native ? "FI_WRITE counter (native)" : "FI_WRITE counter");
	expect_cntr(a.read_cntr, 4, native ? "FI_READ counter (native)" : "FI_READ counter");
	ck_assert_int_eq(word(r, 8), 54);
	int32_t w32;
	memcpy(&w32, r.mem.data() + 16, 4);
	ck_assert_int_eq(w32, 9);
	expect_none(a, 100, "fi_inject_atomic has no entry");
	expect_none(b, 50, "the target");
}

START_TEST(rdm_atomic_flags_completions)
{
	check_completions(false);
}
END_TEST

START_TEST(rdm_atomic_flags_native_completions)
{
	if (!with_native_atomics("rdm_atomic_flags_native_completions"))
		return;
	check_completions(true);
}
END_TEST

// Requests held back by FI_MORE do not run: while every node progresses,
// a gets no entry and the target word keeps its value v.
void expect_held(RdmNode &a, const Region &r, size_t off, int64_t v, const char *what)
{
	settle(150);
	ck_assert_msg(a.backlog.empty(), "%s: %s", what, a.backlog.front().describe().c_str());
	ck_assert_msg(word(r, off) == v, "%s: the target word is %" PRId64 ", expected %" PRId64 " (not yet updated)",
		      what, word(r, off), v);
}

// FI_MORE: held back until a call without it (one chain), and posted by a
// transmit to another peer (an atomic, an RMA write, a send) or by a call
// that fails. With FI_VRMA_RDM_NATIVE_ATOMICS=1 the INT64 sums are the
// device's.
void check_more()
{
	AtomicEnv ea, eb;
	RdmNode a(ea), b(eb), c(eb);
	connect_all({&a, &b, &c});
	const fi_addr_t tb = a.addr_of(b), tc = a.addr_of(c);
	Region r(eb, 128);
	memset(r.mem.data(), 0, 128);
	// Both connections up first: the calls below take their usual paths.
	for (fi_addr_t to : {tb, tc}) {
		One warm(to, r, 120, FI_SUM, 1);
		post([&] { return warm.post(a.ep, Kind::Plain, FI_COMPLETION); }, "connecting");
		expect_ok(a, &warm.ctx, FI_ATOMIC | FI_WRITE, "connecting");
	}
	// A chain of four to b: three fetch-adds held back, then the last.
	{
		One op1(tb, r, 0, FI_SUM, 1), op2(tb, r, 0, FI_SUM, 2), op3(tb, r, 0, FI_SUM, 3), op4(tb, r, 0, FI_SUM, 4);
		post([&] { return op1.post(a.ep, Kind::Fetch, FI_MORE | FI_COMPLETION); }, "FI_MORE 1");
		post([&] { return op2.post(a.ep, Kind::Fetch, FI_MORE | FI_INJECT | FI_COMPLETION); }, "FI_MORE 2");
		op2.x = 1000;
		post([&] { return op3.post(a.ep, Kind::Plain, FI_MORE | FI_DELIVERY_COMPLETE | FI_COMPLETION); },
		     "FI_MORE 3");
		expect_held(a, r, 0, 0, "three calls with FI_MORE");
		post([&] { return op4.post(a.ep, Kind::Fetch, FI_COMPLETION); }, "the chain's end");
		expect_ok(a, &op1.ctx, FI_ATOMIC | FI_READ, "FI_MORE 1");
		expect_ok(a, &op2.ctx, FI_ATOMIC | FI_READ, "FI_MORE 2");
		expect_ok(a, &op3.ctx, FI_ATOMIC | FI_WRITE, "FI_MORE 3");
		expect_ok(a, &op4.ctx, FI_ATOMIC | FI_READ, "the chain's end");
		ck_assert(op1.res == 0 && op2.res == 1 && op4.res == 6);
		ck_assert_int_eq(word(r, 0), 10);
	}
	// Held for b, then a call to c without FI_MORE: both go.
	{
		One held(tb, r, 8, FI_SUM, 5), other(tc, r, 16, FI_SUM, 6);
		post([&] { return held.post(a.ep, Kind::Plain, FI_MORE | FI_COMPLETION); }, "FI_MORE to b");
		post([&] { return other.post(a.ep, Kind::Plain, FI_COMPLETION); }, "then to c");
		Completion e1 = next(a), e2 = next(a);
		ck_assert_msg(e1.ok && e2.ok && e1.context() != e2.context() &&
				      (e1.context() == &held.ctx || e1.context() == &other.ctx) &&
				      (e2.context() == &held.ctx || e2.context() == &other.ctx),
			      "an atomic held for b and one to c: %s / %s", e1.describe().c_str(), e2.describe().c_str());
		ck_assert(word(r, 8) == 5 && word(r, 16) == 6);
	}
	// Held for b, then an RMA write to c (its fast path).
	{
		One held(tb, r, 24, FI_SUM, 7);
		post([&] { return held.post(a.ep, Kind::Plain, FI_MORE | FI_COMPLETION); }, "FI_MORE to b");
		const int64_t v = 42;
		fi_context wctx;
		post([&] { return fi_write(a.ep, &v, 8, nullptr, tc, r.addr(32), r.key(), &wctx); }, "fi_write to c");
		Completion e1 = next(a), e2 = next(a);
		ck_assert_msg(e1.ok && e2.ok &&
				      ((e1.context() == &held.ctx && e2.context() == &wctx) ||
				       (e1.context() == &wctx && e2.context() == &held.ctx)),
			      "an atomic held for b and a write to c: %s / %s", e1.describe().c_str(), e2.describe().c_str());
		ck_assert(word(r, 24) == 7 && word(r, 32) == 42);
	}
	// Held for b, then a send to c.
	{
		One held(tb, r, 40, FI_SUM, 8);
		char in[8] = {}, out[8] = "to c";
		fi_context rctx, sctx;
		post([&] { return fi_recv(c.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rctx); }, "c's receive");
		post([&] { return held.post(a.ep, Kind::Plain, FI_MORE | FI_COMPLETION); }, "FI_MORE to b");
		post([&] { return fi_send(a.ep, out, sizeof out, nullptr, tc, &sctx); }, "fi_send to c");
		Completion e1 = next(a), e2 = next(a);
		ck_assert_msg(e1.ok && e2.ok &&
				      ((e1.context() == &held.ctx && e2.context() == &sctx) ||
				       (e1.context() == &sctx && e2.context() == &held.ctx)),
			      "an atomic held for b and a send to c: %s / %s", e1.describe().c_str(), e2.describe().c_str());
		expect_ok(c, &rctx, FI_RECV | FI_MSG, "c's receive");
		ck_assert(word(r, 40) == 8 && !strcmp(in, "to c"));
	}
	// Held, then a call refused at once: the held one goes (fi_atomic(3)).
	{
		One held(tb, r, 48, FI_SUM, 9), bad(tb, r, 48, FI_SUM, 1);
		post([&] { return held.post(a.ep, Kind::Plain, FI_MORE | FI_COMPLETION); }, "FI_MORE to b");
		bad.ioc.count = 0;
		bad.rma.count = 0;
		expect_rc(bad.post(a.ep, Kind::Plain, FI_MORE | FI_COMPLETION), -FI_EINVAL, "an atomic of no element");
		expect_ok(a, &held.ctx, FI_ATOMIC | FI_WRITE, "the atomic held before a refused call");
		ck_assert_int_eq(word(r, 48), 9);
		// ... and an inject of more elements than the valid call allows,
		// to another peer.
		post([&] { return held.post(a.ep, Kind::Plain, FI_MORE | FI_COMPLETION); }, "FI_MORE to b again");
		size_t max = 0;
		ck_assert_int_eq(fi_atomicvalid(a.ep, FI_DOUBLE, FI_SUM, &max), 0);
		std::vector<double> big(max + 1, 1.0);
		expect_rc(fi_inject_atomic(a.ep, big.data(), max + 1, tc, r.addr(64), r.key(), FI_DOUBLE, FI_SUM),
			  -FI_EINVAL, "fi_inject_atomic of too many elements");
		expect_ok(a, &held.ctx, FI_ATOMIC | FI_WRITE, "the atomic held before a refused inject");
		ck_assert_int_eq(word(r, 48), 18);
	}
	expect_none(a, 100, "the initiator");
	expect_none(b, 50, "b");
	expect_none(c, 50, "c");
	ck_assert_int_eq(word(r, 120), 2);
}

START_TEST(rdm_atomic_flags_more)
{
	check_more();
}
END_TEST

START_TEST(rdm_atomic_flags_native_more)
{
	if (!with_native_atomics("rdm_atomic_flags_native_more"))
		return;
	check_more();
}
END_TEST

// FI_FENCE behind an RMA write and an RMA read of the word a fenced
// fetch-add updates (the add sees the write; the read returns what was
// there before the add), and behind an INT32 sum the target has not applied
// yet (emulated in both modes): the fenced INT64 atomic is refused with
// -FI_EAGAIN while only the initiator progresses, and runs after it.
void check_fence()
{
	AtomicEnv ea, eb;
	RdmNode a(ea), b(eb);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Region r(eb, 64);
	memset(r.mem.data(), 0, 64);
	const int64_t hundred = 100;
	fi_context wctx, rctx;
	post([&] { return fi_write(a.ep, &hundred, 8, nullptr, to, r.addr(0), r.key(), &wctx); }, "the write");
	One add(to, r, 0, FI_SUM, 1);
	post([&] { return add.post(a.ep, Kind::Fetch, FI_FENCE | FI_COMPLETION); }, "a fenced fetch-add after a write");
	expect_ok(a, &wctx, FI_RMA | FI_WRITE, "the write");
	expect_ok(a, &add.ctx, FI_ATOMIC | FI_READ, "a fenced fetch-add after a write");
	ck_assert_int_eq(add.res, 100);
	int64_t back = -1;
	post([&] { return fi_read(a.ep, &back, 8, nullptr, to, r.addr(0), r.key(), &rctx); }, "the read");
	post([&] { return add.post(a.ep, Kind::Fetch, FI_FENCE | FI_COMPLETION); }, "a fenced fetch-add after a read");
	expect_ok(a, &rctx, FI_RMA | FI_READ, "the read");
	expect_ok(a, &add.ctx, FI_ATOMIC | FI_READ, "a fenced fetch-add after a read");
	ck_assert_int_eq(back, 101);
	ck_assert_int_eq(add.res, 101);
	ck_assert_int_eq(word(r, 0), 102);

	// The target stops progressing: an INT32 sum waits in its queue.
	int32_t ten = 10;
	fi_context sctx;
	ck_assert_int_eq(post_retry([&] { return fi_atomic(a.ep, &ten, 1, nullptr, to, r.addr(8), r.key(), FI_INT32,
							   FI_SUM, &sctx); }, &a), 0);
	One fenced(to, r, 16, FI_SUM, 5);
	for (int i = 0; i < 10; i++) {
		a.poll();
		expect_rc(fenced.post(a.ep, Kind::Fetch, FI_FENCE | FI_INJECT | FI_COMPLETION), -FI_EAGAIN,
			  "a fenced atomic while an earlier one is not applied");
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	}
	ck_assert_int_eq(word(r, 16), 0);
	post([&] { return fenced.post(a.ep, Kind::Fetch, FI_FENCE | FI_INJECT | FI_COMPLETION); }, "the fenced atomic");
	expect_ok(a, &sctx, FI_ATOMIC | FI_WRITE, "the INT32 sum");
	expect_ok(a, &fenced.ctx, FI_ATOMIC | FI_READ, "the fenced atomic");
	int32_t w32;
	memcpy(&w32, r.mem.data() + 8, 4);
	ck_assert(w32 == 10 && fenced.res == 0 && word(r, 16) == 5);
	expect_none(a, 100, "the initiator");
}

START_TEST(rdm_atomic_flags_fence)
{
	check_fence();
}
END_TEST

START_TEST(rdm_atomic_flags_native_fence)
{
	if (!with_native_atomics("rdm_atomic_flags_native_fence"))
		return;
	check_fence();
}
END_TEST

// FI_INJECT is bounded by inject_size bytes of operand: an endpoint opened
// with a 64-byte inject_size takes 8 doubles with FI_INJECT (a fetch, its
// operand scribbled at return; fi_inject_atomic) and refuses 9 with
// -FI_EINVAL, sending nothing; without FI_INJECT, 9 go.
START_TEST(rdm_atomic_flags_inject_size)
{
	AtomicEnv ea, eb;
	constexpr size_t kInject = 64, kMax = kInject / sizeof(double);
	ea.info->tx_attr->inject_size = kInject;
	RdmNode a(ea), b(eb);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Region r(eb, 16 * sizeof(double));
	std::vector<double> t(16), x(16), old(16, -1.0);
	for (size_t i = 0; i < 16; i++) {
		t[i] = static_cast<double>(i);
		x[i] = 0.5 * static_cast<double>(i);
	}
	memcpy(r.mem.data(), t.data(), r.mem.size());
	auto element = [&](size_t i) {
		double v;
		memcpy(&v, r.mem.data() + i * sizeof v, sizeof v);
		return v;
	};
	fi_ioc ioc{x.data(), kMax}, rioc{old.data(), kMax};
	fi_rma_ioc rma{r.addr(0), kMax, r.key()};
	fi_msg_atomic m{&ioc, nullptr, 1, to, &rma, 1, FI_DOUBLE, FI_SUM, nullptr, 0};
	fi_context ctx;
	m.context = &ctx;
	post([&] { return fi_fetch_atomicmsg(a.ep, &m, &rioc, nullptr, 1, FI_INJECT | FI_COMPLETION); },
	     "a fetch of inject_size bytes with FI_INJECT");
	std::fill(x.begin(), x.end(), 1e9);
	expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "a fetch of inject_size bytes with FI_INJECT");
	for (size_t i = 0; i < kMax; i++)
		ck_assert_msg(element(i) == 1.5 * static_cast<double>(i) && old[i] == static_cast<double>(i),
			      "element %zu: %g, old %g", i, element(i), old[i]);
	ioc.count = rioc.count = rma.count = kMax + 1;
	expect_rc(fi_fetch_atomicmsg(a.ep, &m, &rioc, nullptr, 1, FI_INJECT | FI_COMPLETION), -FI_EINVAL,
		  "a fetch of more than inject_size bytes with FI_INJECT");
	std::fill(x.begin(), x.end(), 2.0);
	expect_rc(fi_inject_atomic(a.ep, x.data(), kMax + 1, to, r.addr(0), r.key(), FI_DOUBLE, FI_SUM), -FI_EINVAL,
		  "fi_inject_atomic of more than inject_size bytes");
	expect_none(a, 100, "refused injects");
	ck_assert(element(0) == 0.0 && element(kMax) == static_cast<double>(kMax));
	post([&] { return fi_inject_atomic(a.ep, x.data(), kMax, to, r.addr(0), r.key(), FI_DOUBLE, FI_SUM); },
	     "fi_inject_atomic of inject_size bytes");
	x[0] = 1e9;
	post([&] { return fi_fetch_atomicmsg(a.ep, &m, &rioc, nullptr, 1, FI_COMPLETION); },
	     "a fetch of more than inject_size bytes without FI_INJECT");
	expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "a fetch of more than inject_size bytes without FI_INJECT");
	// The inject ran first (same connection, in order): +2 on the first 8.
	for (size_t i = 0; i <= kMax; i++) {
		const double before = (i < kMax ? 1.5 * static_cast<double>(i) + 2.0 : static_cast<double>(i));
		ck_assert_msg(old[i] == before, "old value %zu: %g, expected %g", i, old[i], before);
		ck_assert_msg(element(i) == before + (i == 0 ? 1e9 : 2.0), "element %zu: %g", i, element(i));
	}
}
END_TEST

} // namespace

Suite *rdm_atomic_flags_suite()
{
	Suite *s = suite_create("rdm_atomic_flags");
	auto add = [&](const char *name, int timeout, std::initializer_list<const TTest *> tests) {
		rdm_add_tcase(s, name, timeout, tests);
	};
	add("rdm_atomic_flags_table", 600,
	    {rdm_atomic_flags_emulated, rdm_atomic_flags_emulated_scalable, rdm_atomic_flags_native,
	     rdm_atomic_flags_native_scalable});
	add("rdm_atomic_flags_rules", 180,
	    {rdm_atomic_flags_completions, rdm_atomic_flags_native_completions, rdm_atomic_flags_more,
	     rdm_atomic_flags_native_more, rdm_atomic_flags_fence, rdm_atomic_flags_native_fence,
	     rdm_atomic_flags_inject_size});
	return s;
}
