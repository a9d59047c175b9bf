// Device suite rdm_atomic: atomics on vrma's RDM endpoint.
//  - the valid queries (endpoint and fi_query_atomic) against the table of
//    libfabric's atomics, written out independently (test/atomic_reference.h);
//  - every op x datatype x kind executed on a peer's memory, three elements
//    at once, the target and the fetched old values against a reference
//    computed here; two remote segments in one fi_atomicmsg;
//  - two initiators incrementing the same words (fetch-add and
//    compare-and-swap loops): exact final values, every old value once;
//  - injects, scalable keys, refusals (local: -FI_E*; remote: FI_EACCES
//    error entries) and recovery; FI_FENCE behind emulated atomics; remote
//    CQ data;
//  - FI_VRMA_RDM_NATIVE_ATOMICS=1: 64-bit sum, read and compare-and-swap by
//    the device, and only those offered on 64-bit integers.
#include "rdm_atomic_harness.h"
#include "../atomic_reference.h"

#include <algorithm>
#include <functional>
#include <cinttypes>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace vt;
using namespace atomic_ref;
using namespace atomic_test;

namespace {

using atomic_test::Region; // not the MSG harness's vt::Region

// ---------------------------------------------------------------------------

// What the endpoint and the domain say they do is libfabric's table, every
// kind x op x datatype (and past them); counts at least 1; caps and order.
START_TEST(rdm_atomic_valid)
{
	AtomicEnv env;
	RdmNode a(env);
	ck_assert_msg((env.info->tx_attr->msg_order & (FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW)) ==
			      (FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW),
		      "msg_order 0x%" PRIx64, env.info->tx_attr->msg_order);
	// Emulated atomics run after RMA that reached the target later: no
	// order between RMA and atomics is claimed, RMA among RMA is.
	for (uint64_t order : {env.info->tx_attr->msg_order, env.info->rx_attr->msg_order}) {
		ck_assert_msg(!(order & (FI_ORDER_RAW | FI_ORDER_WAW | FI_ORDER_RAR)),
			      "msg_order 0x%" PRIx64 " claims RMA/atomic order with FI_ATOMIC", order);
		ck_assert_msg((order & (FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAW | FI_ORDER_RMA_RAR)) ==
				      (FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAW | FI_ORDER_RMA_RAR),
			      "msg_order 0x%" PRIx64, order);
	}
	// Hints asking for FI_ORDER_RAW with atomics match nothing of vrma's
	// RDM endpoint; without atomics they get it.
	for (bool atomics : {true, false}) {
		fi_info *h = vt::rdm_hints(atomics ? atomic_test::kAtomicCaps
						   : (vt::kRdmCaps | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ |
						      FI_REMOTE_WRITE));
		h->domain_attr->mr_mode = atomic_test::kBasicMr;
		h->tx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_RAW | FI_ORDER_WAW;
		fi_info *list = nullptr;
		const int rc = fi_getinfo(FI_VERSION(1, 17), vt::kRdmNodeAddr, nullptr, FI_SOURCE, h, &list);
		const fi_info *native = rc == 0 ? vt::find_native_rdm(list) : nullptr;
		if (atomics)
			ck_assert_msg(!native, "RAW/WAW with FI_ATOMIC matched vrma's RDM endpoint");
		else
			ck_assert_msg(native && (native->tx_attr->msg_order & (FI_ORDER_RAW | FI_ORDER_WAW)) ==
							(FI_ORDER_RAW | FI_ORDER_WAW),
				      "RAW/WAW for RMA without atomics: rc %d", rc);
		fi_freeinfo(list);
		fi_freeinfo(h);
	}
	ck_assert_msg(env.info->tx_attr->caps & FI_ATOMIC, "tx caps 0x%" PRIx64, env.info->tx_attr->caps);
	size_t sizes[kDatatypes] = {};
	for_each_datatype([&](int dt, auto zero) { sizes[dt] = sizeof zero; });
	size_t offered = 0;
	for (Kind k : kKinds) {
		for (int op = 0; op <= FI_MSWAP + 2; op++) {
			for (int dt = 0; dt < kDatatypes + 3; dt++) { // and 3 past FI_UINT128
				size_t count = 0;
				const int rc = valid(a.ep, k, dt, op, &count);
				const bool want = expected_valid(k, op, dt);
				ck_assert_msg(want ? rc == 0 : rc == -FI_EOPNOTSUPP,
					      "%s valid(op %d, datatype %d): %d, expected %s", kind_name(k), op, dt, rc,
					      want ? "0" : "-FI_EOPNOTSUPP");
				fi_atomic_attr attr{};
				const uint64_t flags = k == Kind::Fetch ? FI_FETCH_ATOMIC
						       : k == Kind::Compare ? FI_COMPARE_ATOMIC : 0;
				const int qrc = fi_query_atomic(env.domain, static_cast<fi_datatype>(dt),
								static_cast<fi_op>(op), &attr, flags);
				ck_assert_msg(want ? qrc == 0 : qrc == -FI_EOPNOTSUPP,
					      "fi_query_atomic(%s, op %d, datatype %d): %d", kind_name(k), op, dt, qrc);
				if (!want)
					continue;
				offered++;
				ck_assert_msg(count >= 16, "%s op %d datatype %d: count %zu", kind_name(k), op, dt, count);
				ck_assert_uint_eq(attr.count, count);
				ck_assert_uint_eq(attr.size, sizes[dt]);
			}
		}
	}
	ck_assert_uint_eq(offered, 414);
}
END_TEST

// One kind x op x datatype on three elements at offset one element: the
// target and the old values as the reference says; the elements around
// untouched; the completion's flags.
template <typename T>
void check_combination(RdmNode &a, fi_addr_t to, Region &r, Kind k, int op, int dt, size_t round)
{
	const std::vector<T> s = samples<T>();
	constexpr size_t kN = 3;
	T t[kN + 2], x[kN], c[kN], res[kN], want_t[kN + 2];
	for (size_t i = 0; i < kN + 2; i++)
		t[i] = s[(i + round) % s.size()];
	for (size_t i = 0; i < kN; i++) {
		x[i] = s[(i * 3 + round + 1) % s.size()];
		// Compares that match (even elements) and that do not.
		c[i] = i % 2 == 0 ? t[i + 1] : s[(i * 5 + round + 2) % s.size()];
		res[i] = T{};
	}
	memcpy(r.mem.data(), t, sizeof t);
	std::copy(t, t + kN + 2, want_t);
	for (size_t i = 0; i < kN; i++) {
		T n{};
		if (reference(op, t[i + 1], x[i], c[i], n))
			want_t[i + 1] = n;
	}
	fi_context ctx;
	char what[160];
	snprintf(what, sizeof what, "%s op %d datatype %d round %zu", kind_name(k), op, dt, round);
	const ssize_t rc = post_retry(
		[&] { return post_atomic(a, to, r, sizeof(T), k, dt, op, x, c, res, kN, &ctx); });
	ck_assert_msg(rc == 0, "%s: %zd (%s)", what, rc, fi_strerror(static_cast<int>(-rc)));
	expect_ok(a, &ctx, FI_ATOMIC | (k == Kind::Plain ? FI_WRITE : FI_READ), what);
	for (size_t i = 0; i < kN + 2; i++)
		ck_assert_msg(same(load<T>(r.mem.data() + i * sizeof(T)), want_t[i]), "%s: target element %zu", what,
			      i);
	if (k != Kind::Plain)
		for (size_t i = 0; i < kN; i++)
			ck_assert_msg(same(res[i], t[i + 1]), "%s: old value %zu", what, i);
}

START_TEST(rdm_atomic_every_op)
{
	AtomicEnv ea, eb;
	RdmNode a(ea), b(eb);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Region r(eb, 5 * 32);
	size_t done = 0;
	for (Kind k : kKinds)
		for (int op = 0; op <= FI_MSWAP; op++)
			for_each_datatype([&](int dt, auto zero) {
				using T = decltype(zero);
				if (!expected_valid(k, op, dt))
					return;
				for (size_t round = 0; round < 2; round++)
					check_combination<T>(a, to, r, k, op, dt, round);
				done++;
			});
	ck_assert_uint_eq(done, 414);
	expect_none(a);
	expect_none(b, 100, "the target of atomics");
}
END_TEST

// fi_atomicmsg and fi_fetch_atomicmsg with two remote segments and two local
// pieces; fi_inject_atomic (a counter, no entry); FI_ATOMIC_READ without an
// operand.
START_TEST(rdm_atomic_vectors_and_inject)
{
	AtomicEnv ea, eb;
	RdmNodeOptions opt;
	opt.write_cntr = true;
	RdmNode a(ea, opt), b(eb);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Region r(eb, 64 * sizeof(int32_t));
	std::vector<int32_t> init(64);
	for (int i = 0; i < 64; i++)
		init[i] = i * 10;
	memcpy(r.mem.data(), init.data(), 64 * sizeof(int32_t));
	int32_t x1[3] = {1, 2, 3}, x2[2] = {100, 200};
	const fi_ioc iov[2] = {{x1, 3}, {x2, 2}};
	const fi_rma_ioc rma[2] = {{r.addr(4 * 4), 2, r.key()}, {r.addr(40 * 4), 3, r.key()}};
	fi_msg_atomic m{iov, nullptr, 2, to, rma, 2, FI_INT32, FI_SUM, nullptr, 0};
	fi_context ctx;
	m.context = &ctx;
	post([&] { return fi_atomicmsg(a.ep, &m, FI_COMPLETION | FI_DELIVERY_COMPLETE); }, "fi_atomicmsg over 2 segments");
	expect_ok(a, &ctx, FI_ATOMIC | FI_WRITE, "fi_atomicmsg over 2 segments");
	std::vector<int32_t> want = init;
	want[4] += 1;
	want[5] += 2;
	want[40] += 3;
	want[41] += 100;
	want[42] += 200;
	ck_assert_int_eq(memcmp(r.mem.data(), want.data(), 64 * sizeof(int32_t)), 0);

	int32_t old[5] = {};
	fi_ioc res[2] = {{old, 2}, {old + 2, 3}};
	m.op = FI_ATOMIC_READ;
	m.msg_iov = nullptr;
	m.iov_count = 0;
	post([&] { return fi_fetch_atomicmsg(a.ep, &m, res, nullptr, 2, FI_COMPLETION); }, "fetch_atomicmsg READ");
	expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "fetch_atomicmsg READ");
	const int32_t want_old[5] = {want[4], want[5], want[40], want[41], want[42]};
	ck_assert_int_eq(memcmp(old, want_old, sizeof old), 0);

	// Injects: the operand buffer is free at once; counted, no entry.
	for (int i = 0; i < 10; i++) {
		int64_t one = 1;
		post([&] { return fi_inject_atomic(a.ep, &one, 1, to, r.addr(8 * 8), r.key(), FI_INT64, FI_SUM); },
		     "fi_inject_atomic");
		one = 1000;
	}
	expect_cntr(a.write_cntr, 11, "FI_WRITE counter after 1 atomic and 10 injects");
	int64_t v;
	memcpy(&v, r.mem.data() + 64, 8);
	int64_t base;
	memcpy(&base, init.data() + 16, 8);
	ck_assert_int_eq(v, base + 10);
	expect_none(a);
}
END_TEST

// Two initiators (own domains) on the same words: 150 fetch-adds of 1 each on
// an INT64 and a UINT32 word, posted in bursts; then 40 compare-and-swap
// increments each (read, CSWAP old -> old + 1, again on a mismatch). Final
// values exact; every fetched old value seen once.
START_TEST(rdm_atomic_two_initiators)
{
	AtomicEnv e1, e2, et;
	RdmNode a1(e1), a2(e2), t(et);
	connect_all({&a1, &a2, &t});
	Region r(et, 64);
	memset(r.mem.data(), 0, 64);
	constexpr int kAdds = 150;
	std::multiset<int64_t> seen64;
	std::multiset<uint32_t> seen32;
	struct Slot {
		fi_context ctx;
		int64_t old64;
		uint32_t old32;
	};
	std::vector<Slot> slots(4 * kAdds);
	size_t used = 0;
	const int64_t one64 = 1;
	const uint32_t one32 = 1;
	for (int burst = 0; burst < kAdds / 10; burst++) {
		std::vector<std::pair<RdmNode *, Slot *>> posted;
		for (int i = 0; i < 10; i++) {
			for (RdmNode *n : {&a1, &a2}) {
				Slot *s64 = &slots[used++], *s32 = &slots[used++];
				post([&] { return fi_fetch_atomic(n->ep, &one64, 1, nullptr, &s64->old64, nullptr, n->addr_of(t),
								r.addr(0), r.key(), FI_INT64, FI_SUM, &s64->ctx); },
				     "fetch-add INT64");
				post([&] { return fi_fetch_atomic(n->ep, &one32, 1, nullptr, &s32->old32, nullptr, n->addr_of(t),
								r.addr(8), r.key(), FI_UINT32, FI_SUM, &s32->ctx); },
				     "fetch-add UINT32");
				posted.push_back({n, s64});
				posted.push_back({n, s32});
			}
		}
		for (RdmNode *n : {&a1, &a2})
			for (int i = 0; i < 20; i++) {
				Completion c = next(*n);
				ck_assert_msg(c.ok && c.flags() == (FI_ATOMIC | FI_READ), "fetch-add: %s",
					      c.describe().c_str());
			}
		for (auto &[n, s] : posted) {
			const bool is64 = (s - slots.data()) % 2 == 0;
			if (is64)
				seen64.insert(s->old64);
			else
				seen32.insert(s->old32);
		}
	}
	int64_t v64;
	uint32_t v32;
	memcpy(&v64, r.mem.data(), 8);
	memcpy(&v32, r.mem.data() + 8, 4);
	ck_assert_int_eq(v64, 2 * kAdds);
	ck_assert_uint_eq(v32, 2 * kAdds);
	ck_assert_uint_eq(seen64.size(), 2 * kAdds);
	for (int64_t i = 0; i < 2 * kAdds; i++)
		ck_assert_msg(seen64.count(i) == 1, "INT64 old value %" PRId64 " seen %zu times", i, seen64.count(i));
	for (uint32_t i = 0; i < 2 * kAdds; i++)
		ck_assert_msg(seen32.count(i) == 1, "UINT32 old value %u seen %zu times", i, seen32.count(i));

	// Compare-and-swap increments, interleaved: each initiator's CSWAP may
	// lose to the other's and retry with the value it got back.
	constexpr int kSwaps = 40;
	int64_t guess[2] = {7, 7}; // wrong at first: the word is 0
	int done[2] = {0, 0};
	size_t retries = 0;
	RdmNode *nodes[2] = {&a1, &a2};
	while (done[0] < kSwaps || done[1] < kSwaps) {
		fi_context ctx[2];
		int64_t desired[2], old[2];
		bool posted[2] = {false, false};
		for (int i = 0; i < 2; i++) {
			if (done[i] == kSwaps)
				continue;
			desired[i] = guess[i] + 1;
			post([&] { return fi_compare_atomic(nodes[i]->ep, &desired[i], 1, nullptr, &guess[i], nullptr,
							  &old[i], nullptr, nodes[i]->addr_of(t), r.addr(16), r.key(),
							  FI_INT64, FI_CSWAP, &ctx[i]); },
			     "CSWAP increment");
			posted[i] = true;
		}
		for (int i = 0; i < 2; i++) {
			if (!posted[i])
				continue;
			expect_ok(*nodes[i], &ctx[i], FI_ATOMIC | FI_READ, "CSWAP increment");
			if (old[i] == guess[i])
				done[i]++;
			else
				retries++;
			guess[i] = old[i] == guess[i] ? guess[i] + 1 : old[i];
		}
	}
	int64_t v;
	memcpy(&v, r.mem.data() + 16, 8);
	// The word started at 0: it counts the successful swaps, no more.
	ck_assert_int_eq(v, 2 * kSwaps);
	ck_assert_uint_ge(retries, 2); // the first guesses were wrong
}
END_TEST

// Refused at once (-FI_E*, nothing sent) and failed remotely (FI_EACCES
// error entries), then a good operation: the connection still works.
START_TEST(rdm_atomic_errors)
{
	AtomicEnv ea, eb;
	RdmNode a(ea), b(eb);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Region rw(eb, 64), ro(eb, 64, FI_REMOTE_READ);
	memset(rw.mem.data(), 0, 64);
	memset(ro.mem.data(), 0, 64);
	int64_t x[64] = {}, res[64] = {}, cmp[64] = {};
	x[0] = 5;
	fi_context ctx;
	const uint64_t bad_key = rw.key() ^ 0x00ffff00ULL;
	expect_rc(fi_atomic(a.ep, x, 1, nullptr, to, rw.addr(0), rw.key(), FI_DOUBLE, FI_BOR, &ctx), -FI_EOPNOTSUPP,
		  "BOR on doubles");
	expect_rc(fi_atomic(a.ep, x, 1, nullptr, to, rw.addr(0), rw.key(), FI_INT64, FI_CSWAP, &ctx), -FI_EOPNOTSUPP,
		  "CSWAP through fi_atomic");
	expect_rc(fi_atomic(a.ep, x, 1, nullptr, to, rw.addr(0), rw.key(), static_cast<fi_datatype>(40), FI_SUM, &ctx),
		  -FI_EOPNOTSUPP, "an unknown datatype");
	expect_rc(fi_atomic(a.ep, x, 0, nullptr, to, rw.addr(0), rw.key(), FI_INT64, FI_SUM, &ctx), -FI_EINVAL,
		  "count 0");
	size_t max = 0;
	ck_assert_int_eq(fi_atomicvalid(a.ep, FI_INT64, FI_SUM, &max), 0);
	std::vector<int64_t> big(max + 1);
	expect_rc(fi_atomic(a.ep, big.data(), max + 1, nullptr, to, rw.addr(0), rw.key(), FI_INT64, FI_SUM, &ctx),
		  -FI_EINVAL, "count beyond fi_atomicvalid's");
	{
		const fi_ioc iov{x, 1};
		const fi_rma_ioc rma{rw.addr(0), 1, rw.key()};
		fi_msg_atomic m{&iov, nullptr, 1, to, &rma, 1, FI_INT64, FI_SUM, &ctx, 0};
		expect_rc(fi_atomicmsg(a.ep, &m, FI_COMMIT_COMPLETE), -FI_EBADFLAGS, "FI_COMMIT_COMPLETE on an atomic");
		expect_rc(fi_atomicmsg(a.ep, nullptr, 0), -FI_EINVAL, "a NULL message");
		m.msg_iov = &iov;
		fi_ioc r2{res, 2};
		expect_rc(fi_fetch_atomicmsg(a.ep, &m, &r2, nullptr, 1, 0), -FI_EINVAL, "2 results for 1 element");
		const fi_rma_ioc five[5] = {rma, rma, rma, rma, rma};
		const fi_ioc iov5{x, 5};
		fi_msg_atomic m5{&iov5, nullptr, 1, to, five, 5, FI_INT64, FI_SUM, &ctx, 0};
		expect_rc(fi_atomicmsg(a.ep, &m5, 0), -FI_EINVAL, "5 remote segments");
	}
	expect_none(a, 100, "refused calls");
	ck_assert_int_eq(memcmp(rw.mem.data(), std::vector<uint8_t>(64, 0).data(), 64), 0);
	post([&] { return fi_compare_atomic(a.ep, x, 2, nullptr, cmp, nullptr, res, nullptr, to, rw.addr(16), rw.key(),
					    FI_INT64, FI_CSWAP, &ctx); }, "a good compare (two elements)");
	expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "a good compare (two elements)");
	int64_t w[4];
	memcpy(w, rw.mem.data(), 32);
	ck_assert(w[0] == 0 && w[1] == 0 && w[2] == 5 && w[3] == 0 && res[0] == 0 && res[1] == 0);

	struct Case {
		const char *what;
		uint64_t addr, key;
		int op;
		Kind kind;
	};
	const Case cases[] = {
		{"an unknown key", rw.addr(0), bad_key, FI_SUM, Kind::Plain},
		{"a range past the region", rw.addr(60), rw.key(), FI_SUM, Kind::Plain},
		{"a region without FI_REMOTE_WRITE", ro.addr(0), ro.key(), FI_SUM, Kind::Fetch},
	};
	for (const Case &c : cases) {
		post([&] {
			return c.kind == Kind::Plain
				       ? fi_atomic(a.ep, x, 1, nullptr, to, c.addr, c.key, FI_INT64, static_cast<fi_op>(c.op), &ctx)
				       : fi_fetch_atomic(a.ep, x, 1, nullptr, res, nullptr, to, c.addr, c.key, FI_INT64,
							 static_cast<fi_op>(c.op), &ctx);
		}, c.what);
		expect_err(a, &ctx, FI_EACCES, c.what);
	}
	// A read-only region can be read atomically.
	int64_t seven = 7;
	memcpy(ro.mem.data(), &seven, 8);
	post([&] { return fi_fetch_atomic(a.ep, nullptr, 1, nullptr, res, nullptr, to, ro.addr(0), ro.key(), FI_INT64,
					  FI_ATOMIC_READ, &ctx); }, "ATOMIC_READ of a read-only region");
	expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "ATOMIC_READ of a read-only region");
	ck_assert_int_eq(res[0], 7);
	int64_t ro_now;
	memcpy(&ro_now, ro.mem.data(), 8);
	ck_assert_int_eq(ro_now, 7);
	post([&] { return fi_atomic(a.ep, x, 1, nullptr, to, rw.addr(8), rw.key(), FI_INT64, FI_SUM, &ctx); },
	     "the good atomic after the errors");
	expect_ok(a, &ctx, FI_ATOMIC | FI_WRITE, "the good atomic after the errors");
	int64_t v;
	memcpy(&v, rw.mem.data() + 8, 8);
	ck_assert_int_eq(v, 5);
	expect_none(a);
}
END_TEST

// FI_RMA_EVENT: a target's FI_REMOTE_WRITE/FI_REMOTE_READ counters (its
// endpoint's and a region's) count atomics from a peer: updates as writes,
// FI_ATOMIC_READ as reads. `native`: the 64-bit ones go to the device.
void check_atomic_events(bool native)
{
	AtomicEnv ea, eb(kBasicMr, FI_RMA_EVENT);
	RdmNodeOptions topt;
	topt.remote_write_cntr = true;
	topt.remote_read_cntr = true;
	RdmNode a(ea), b(eb, topt);
	connect_all({&a, &b});
	Region r(eb, 64);
	memset(r.mem.data(), 0, 64);
	fid_cntr *region_writes = nullptr;
	fi_cntr_attr attr{};
	attr.events = FI_CNTR_EVENTS_COMP;
	ck_assert_int_eq(fi_cntr_open(eb.domain, &attr, &region_writes, nullptr), 0);
	ck_assert_int_eq(fi_mr_bind(r.mr, &region_writes->fid, FI_REMOTE_WRITE), 0);
	size_t count = 0;
	ck_assert_int_eq(fi_atomicvalid(a.ep, FI_INT64, FI_MIN, &count), native ? -FI_EOPNOTSUPP : 0);
	const int64_t one = 1;
	int64_t old = -1;
	fi_context ctx;
	for (int i = 0; i < 3; i++) {
		post([&] { return fi_fetch_atomic(a.ep, &one, 1, nullptr, &old, nullptr, a.addr_of(b), r.addr(0), r.key(),
						  FI_INT64, FI_SUM, &ctx); }, "fetch-add INT64");
		expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "fetch-add INT64");
	}
	post([&] { return fi_fetch_atomic(a.ep, nullptr, 1, nullptr, &old, nullptr, a.addr_of(b), r.addr(0), r.key(),
					  FI_INT64, FI_ATOMIC_READ, &ctx); }, "ATOMIC_READ INT64");
	expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "ATOMIC_READ INT64");
	ck_assert_int_eq(old, 3);
	const int32_t two = 2;
	post([&] { return fi_atomic(a.ep, &two, 1, nullptr, a.addr_of(b), r.addr(8), r.key(), FI_INT32, FI_SUM, &ctx); },
	     "SUM INT32 (emulated in both modes)");
	expect_ok(a, &ctx, FI_ATOMIC | FI_WRITE, "SUM INT32");
	expect_cntr(b.remote_write_cntr, 4, native ? "FI_REMOTE_WRITE (native)" : "FI_REMOTE_WRITE");
	expect_cntr(b.remote_read_cntr, 1, native ? "FI_REMOTE_READ (native)" : "FI_REMOTE_READ");
	expect_cntr(region_writes, 4, "the region's FI_REMOTE_WRITE counter");
	ck_assert_int_eq(fi_close(&r.mr->fid), 0); // the region holds its counter
	r.mr = nullptr;
	ck_assert_int_eq(fi_close(&region_writes->fid), 0);
}

// Remote CQ data on atomics (fi_atomicmsg and its fetch and compare
// forms with FI_REMOTE_CQ_DATA): the target gets one entry per operation,
// no context, FI_ATOMIC with FI_REMOTE_WRITE (updates) or FI_REMOTE_READ
// (FI_ATOMIC_READ) and FI_REMOTE_CQ_DATA, the full 64 bits, the bytes, the
// initiator's address; the update is in place when it is read. Native
// (INT64 sum, read, compare-and-swap by the device) or emulated.
void check_atomic_cq_data(bool native)
{
	AtomicEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Region r(env, 64);
	memset(r.mem.data(), 0, 64);
	int64_t *w = reinterpret_cast<int64_t *>(r.mem.data());
	fi_context ctx;
	auto remote_entry = [&](uint64_t flags, uint64_t data, size_t len, const char *what) {
		Completion c = expect_ok(b, nullptr, flags, what);
		ck_assert_msg(c.e.data == data, "%s: data 0x%" PRIx64, what, c.e.data);
		ck_assert_msg(c.e.len == len, "%s: len %zu, expected %zu", what, c.e.len, len);
		ck_assert_msg(c.src == b.addr_of(a), "%s: source %" PRIu64, what, c.src);
	};
	constexpr uint64_t kWriteData = FI_ATOMIC | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
	constexpr uint64_t kReadData = FI_ATOMIC | FI_REMOTE_READ | FI_REMOTE_CQ_DATA;
	// A sum of two INT64 elements.
	{
		int64_t x[2] = {7, -9};
		fi_ioc ioc{x, 2};
		fi_rma_ioc rioc{r.addr(0), 2, r.key()};
		fi_msg_atomic m{&ioc, nullptr, 1, to, &rioc, 1, FI_INT64, FI_SUM, &ctx, 0xfedcba9876543210ULL};
		post([&] { return fi_atomicmsg(a.ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION); }, "sum with CQ data");
		expect_ok(a, &ctx, FI_ATOMIC | FI_WRITE, "sum with CQ data");
		remote_entry(kWriteData, 0xfedcba9876543210ULL, 16, "sum with CQ data: the target's entry");
		ck_assert(w[0] == 7 && w[1] == -9);
	}
	// An atomic read and a compare-and-swap, fetching.
	{
		int64_t old = -1;
		fi_ioc res{&old, 1};
		fi_rma_ioc rioc{r.addr(0), 1, r.key()};
		fi_msg_atomic m{nullptr, nullptr, 0, to, &rioc, 1, FI_INT64, FI_ATOMIC_READ, &ctx, 1};
		post([&] { return fi_fetch_atomicmsg(a.ep, &m, &res, nullptr, 1, FI_REMOTE_CQ_DATA | FI_COMPLETION); },
		     "atomic read with CQ data");
		expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "atomic read with CQ data");
		ck_assert_int_eq(old, 7);
		remote_entry(kReadData, 1, 8, "atomic read with CQ data: the target's entry");
		int64_t sw = 100, cmp = 7;
		fi_ioc ioc{&sw, 1}, cioc{&cmp, 1};
		fi_msg_atomic cm{&ioc, nullptr, 1, to, &rioc, 1, FI_INT64, FI_CSWAP, &ctx, 2};
		post([&] { return fi_compare_atomicmsg(a.ep, &cm, &cioc, nullptr, 1, &res, nullptr, 1,
						       FI_REMOTE_CQ_DATA | FI_COMPLETION); }, "cswap with CQ data");
		expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "cswap with CQ data");
		ck_assert_int_eq(old, 7);
		remote_entry(kWriteData, 2, 8, "cswap with CQ data: the target's entry");
		ck_assert_int_eq(w[0], 100);
	}
	// Emulated in both modes: INT32 MAX; without the flag, no entry.
	{
		int32_t v = 42;
		fi_ioc ioc{&v, 1};
		fi_rma_ioc rioc{r.addr(16), 1, r.key()};
		fi_msg_atomic m{&ioc, nullptr, 1, to, &rioc, 1, FI_INT32, FI_MAX, &ctx, 3};
		post([&] { return fi_atomicmsg(a.ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION); }, "INT32 max with CQ data");
		expect_ok(a, &ctx, FI_ATOMIC | FI_WRITE, "INT32 max with CQ data");
		remote_entry(kWriteData, 3, 4, "INT32 max with CQ data: the target's entry");
		post([&] { return fi_atomicmsg(a.ep, &m, FI_COMPLETION); }, "INT32 max without CQ data");
		expect_ok(a, &ctx, FI_ATOMIC | FI_WRITE, "INT32 max without CQ data");
		expect_none(b, 300, native ? "an atomic without CQ data (native mode)" : "an atomic without CQ data");
	}
}

START_TEST(rdm_atomic_cq_data)
{
	check_atomic_cq_data(false);
}
END_TEST

START_TEST(rdm_atomic_native_cq_data)
{
	if (!with_native_atomics("rdm_atomic_native_cq_data"))
		return;
	check_atomic_cq_data(true);
}
END_TEST

START_TEST(rdm_atomic_events)
{
	check_atomic_events(false);
}
END_TEST

// Scalable keys: the target resolves the application's key and offset.
START_TEST(rdm_atomic_scalable_keys)
{
	AtomicEnv ea(0), eb(0);
	RdmNode a(ea), b(eb);
	connect_all({&a, &b});
	Region r(eb, 64, kRemote, 3);
	memset(r.mem.data(), 0, 64);
	int64_t x = 40, old = -1;
	fi_context ctx;
	for (int i = 0; i < 2; i++) {
		post([&] { return fi_fetch_atomic(a.ep, &x, 1, nullptr, &old, nullptr, a.addr_of(b), 8, 3, FI_INT64,
						  FI_SUM, &ctx); }, "fetch-add on key 3 at offset 8");
		expect_ok(a, &ctx, FI_ATOMIC | FI_READ, "fetch-add on key 3 at offset 8");
		ck_assert_int_eq(old, 40 * i);
	}
	int64_t v;
	memcpy(&v, r.mem.data() + 8, 8);
	ck_assert_int_eq(v, 80);
	post([&] { return fi_atomic(a.ep, &x, 1, nullptr, a.addr_of(b), 8, 4, FI_INT64, FI_SUM, &ctx); },
	     "an atomic on key 4, which the target lacks");
	expect_err(a, &ctx, FI_EACCES, "an atomic on key 4, which the target lacks");
}
END_TEST

// FI_VRMA_RDM_NATIVE_ATOMICS=1 (read when the provider loads: this test's
// process, forked by check, loads it afresh): on 64-bit integers only the
// device's sum, read and compare-and-swap are offered, and they work; other
// types stay emulated.
// FI_FENCE waits for earlier atomics the target applies itself: with the
// target passive, a fenced read of the word an emulated sum updates is
// refused with -FI_EAGAIN (the device's fence would let it read the old
// value); once the target progressed, it reads the sum. A fenced atomic
// waits the same way.
START_TEST(rdm_atomic_fence)
{
	AtomicEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Region r(env, 64);
	int32_t *word = reinterpret_cast<int32_t *>(r.mem.data());
	*word = 5;
	const int32_t ten = 10;
	int32_t back = 0;
	fi_context actx, rctx;
	// Connected first, both sides progressing.
	post([&] { return post_atomic(a, to, r, 0, Kind::Plain, FI_INT32, FI_SUM, &ten, nullptr, nullptr, 1, &actx); },
	     "the first sum");
	expect_ok(a, &actx, FI_ATOMIC | FI_WRITE, "the first sum");
	ck_assert_int_eq(*word, 15);

	// The target makes no progress: the sum waits in its receive queue.
	ck_assert_int_eq(post_retry([&] {
		return post_atomic(a, to, r, 0, Kind::Plain, FI_INT32, FI_SUM, &ten, nullptr, nullptr, 1, &actx);
	}, &a), 0);
	auto fenced_read = [&] {
		iovec iov{&back, sizeof back};
		void *desc = nullptr;
		fi_rma_iov rma{r.addr(0), sizeof back, r.key()};
		fi_msg_rma m{&iov, &desc, 1, to, &rma, 1, &rctx, 0};
		return fi_readmsg(a.ep, &m, FI_FENCE | FI_COMPLETION);
	};
	for (int i = 0; i < 20; i++) {
		a.poll();
		expect_rc(fenced_read(), -FI_EAGAIN, "a fenced read while the sum is not applied");
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	}
	const int64_t one = 1;
	expect_rc(fi_atomicmsg(a.ep, nullptr, FI_FENCE), -FI_EINVAL, "a NULL message");
	{
		fi_ioc ioc{const_cast<int64_t *>(&one), 1};
		fi_rma_ioc rioc{r.addr(8), 1, r.key()};
		fi_msg_atomic m{&ioc, nullptr, 1, to, &rioc, 1, FI_INT64, FI_SUM, &rctx, 0};
		expect_rc(fi_atomicmsg(a.ep, &m, FI_FENCE), -FI_EAGAIN, "a fenced atomic while the sum is not applied");
	}
	// A fenced send waits for the sum too (FI_FENCE is in the tx caps).
	uint8_t msg[48], got[48] = {};
	fill_pattern(msg, sizeof msg, 31);
	fi_context sctx, trctx;
	iovec siov{msg, sizeof msg};
	const fi_msg_tagged sm = make_tmsg(&siov, 1, to, 0x77, 0, &sctx);
	expect_rc(fi_tsendmsg(a.ep, &sm, FI_FENCE | FI_COMPLETION), -FI_EAGAIN,
		  "a fenced send while the sum is not applied");
	ck_assert_int_eq(*word, 15);
	// Everyone progresses: the sum is applied, then the read runs.
	post(fenced_read, "the fenced read");
	Completion c1 = next(a), c2 = next(a);
	ck_assert_msg(c1.ok && c2.ok, "%s / %s", c1.describe().c_str(), c2.describe().c_str());
	ck_assert_msg(c1.context() == &actx && c2.context() == &rctx, "the sum completes before the fenced read");
	ck_assert_int_eq(*word, 25);
	ck_assert_int_eq(back, 25);
	// The fenced send once nothing is outstanding: accepted, delivered.
	post([&] { return fi_trecv(b.ep, got, sizeof got, nullptr, b.addr_of(a), 0x77, 0, &trctx); }, "the receive");
	post([&] { return fi_tsendmsg(a.ep, &sm, FI_FENCE | FI_COMPLETION); }, "the fenced send");
	expect_ok(a, &sctx, FI_TAGGED | FI_SEND, "the fenced send");
	expect_ok(b, &trctx, FI_TAGGED | FI_RECV, "the fenced send's receive");
	expect_pattern(got, sizeof got, 31, "the fenced send's data");
}
END_TEST

START_TEST(rdm_atomic_native)
{
	if (!with_native_atomics("rdm_atomic_native"))
		return;
	AtomicEnv ea, eb;
	// The device applies 64-bit atomics on arrival, the target's progress
	// the others later: no order among atomics is claimed.
	ck_assert_msg(!(ea.info->tx_attr->msg_order & (FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW |
						       FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_WAR)),
		      "msg_order 0x%" PRIx64 " with native atomics", ea.info->tx_attr->msg_order);
	RdmNode a1(ea), a2(ea), b(eb);
	connect_all({&a1, &a2, &b});
	size_t count = 0;
	ck_assert_int_eq(fi_atomicvalid(a1.ep, FI_INT64, FI_SUM, &count), 0);
	ck_assert_int_eq(fi_fetch_atomicvalid(a1.ep, FI_UINT64, FI_ATOMIC_READ, &count), 0);
	ck_assert_int_eq(fi_compare_atomicvalid(a1.ep, FI_INT64, FI_CSWAP, &count), 0);
	ck_assert_int_eq(fi_atomicvalid(a1.ep, FI_INT64, FI_MIN, &count), -FI_EOPNOTSUPP);
	ck_assert_int_eq(fi_compare_atomicvalid(a1.ep, FI_UINT64, FI_MSWAP, &count), -FI_EOPNOTSUPP);
	ck_assert_int_eq(fi_atomicvalid(a1.ep, FI_INT32, FI_MIN, &count), 0);
	// The 128-bit integers stay emulated: every op still offered.
	ck_assert_int_eq(fi_atomicvalid(a1.ep, FI_INT128, FI_MIN, &count), 0);
	ck_assert_int_eq(fi_fetch_atomicvalid(a1.ep, FI_UINT128, FI_SUM, &count), 0);
	ck_assert_int_eq(fi_compare_atomicvalid(a1.ep, FI_UINT128, FI_MSWAP, &count), 0);
	Region r(eb, 64);
	memset(r.mem.data(), 0, 64);
	int64_t x[3] = {5, -3, 1000}, old[3] = {}, cmp[3];
	fi_context ctx;
	post([&] { return fi_fetch_atomic(a1.ep, x, 3, nullptr, old, nullptr, a1.addr_of(b), r.addr(8), r.key(), FI_INT64,
					  FI_SUM, &ctx); }, "native fetch-add of 3 elements");
	expect_ok(a1, &ctx, FI_ATOMIC | FI_READ, "native fetch-add of 3 elements");
	int64_t v[4];
	memcpy(v, r.mem.data(), 32);
	ck_assert(v[0] == 0 && v[1] == 5 && v[2] == -3 && v[3] == 1000);
	ck_assert(old[0] == 0 && old[1] == 0 && old[2] == 0);
	cmp[0] = 5;  // matches
	cmp[1] = 9;  // does not
	cmp[2] = 1000;
	int64_t sw[3] = {50, 60, 70};
	post([&] { return fi_compare_atomic(a1.ep, sw, 3, nullptr, cmp, nullptr, old, nullptr, a1.addr_of(b), r.addr(8),
					    r.key(), FI_INT64, FI_CSWAP, &ctx); }, "native CSWAP of 3 elements");
	expect_ok(a1, &ctx, FI_ATOMIC | FI_READ, "native CSWAP of 3 elements");
	memcpy(v, r.mem.data(), 32);
	ck_assert(v[1] == 50 && v[2] == -3 && v[3] == 70);
	ck_assert(old[0] == 5 && old[1] == -3 && old[2] == 1000);
	post([&] { return fi_fetch_atomic(a1.ep, nullptr, 1, nullptr, old, nullptr, a1.addr_of(b), r.addr(24), r.key(),
					  FI_UINT64, FI_ATOMIC_READ, &ctx); }, "native ATOMIC_READ");
	expect_ok(a1, &ctx, FI_ATOMIC | FI_READ, "native ATOMIC_READ");
	ck_assert_int_eq(old[0], 70);
	expect_rc(fi_atomic(a1.ep, x, 1, nullptr, a1.addr_of(b), r.addr(4), r.key(), FI_INT64, FI_SUM, &ctx), -FI_EINVAL,
		  "a native atomic at an address not 8-byte aligned");
	// Two initiators, 100 fetch-adds of 1 each, interleaved: exact.
	std::multiset<int64_t> seen;
	const int64_t one = 1;
	for (int round = 0; round < 100; round++) {
		fi_context c1, c2;
		int64_t o1 = -1, o2 = -1;
		post([&] { return fi_fetch_atomic(a1.ep, &one, 1, nullptr, &o1, nullptr, a1.addr_of(b), r.addr(32), r.key(),
						  FI_INT64, FI_SUM, &c1); }, "native fetch-add from a1");
		post([&] { return fi_fetch_atomic(a2.ep, &one, 1, nullptr, &o2, nullptr, a2.addr_of(b), r.addr(32), r.key(),
						  FI_INT64, FI_SUM, &c2); }, "native fetch-add from a2");
		expect_ok(a1, &c1, FI_ATOMIC | FI_READ, "native fetch-add from a1");
		expect_ok(a2, &c2, FI_ATOMIC | FI_READ, "native fetch-add from a2");
		seen.insert(o1);
		seen.insert(o2);
	}
	memcpy(v, r.mem.data() + 32, 8);
	ck_assert_int_eq(v[0], 200);
	for (int64_t i = 0; i < 200; i++)
		ck_assert_msg(seen.count(i) == 1, "old value %" PRId64 " seen %zu times", i, seen.count(i));
	expect_none(b, 100, "the target of native atomics (no CPU involved)");
}
END_TEST

// SOS's shmem_atomic_fetch: fi_fetch_atomicmsg of FI_ATOMIC_READ whose
// operand is {NULL, 1} (fi_atomic(3): ignored, may be NULL), with FI_INJECT
// and no completion requested (the FI_READ counter counts it), on 32- and
// 64-bit words; the target is unchanged. `native`: the 64-bit one goes to
// the device.
void check_atomic_read_null_operand(bool native)
{
	AtomicEnv ea, eb;
	RdmNodeOptions opt;
	opt.read_cntr = true;
	opt.cq_bind_flags = FI_SELECTIVE_COMPLETION;
	RdmNode a(ea, opt), b(eb);
	connect_all({&a, &b});
	Region r(eb, 64);
	const int64_t v64 = -0x123456789abcLL;
	const int32_t v32 = 0x7eadbeef;
	memcpy(r.mem.data() + 8, &v64, 8);
	memcpy(r.mem.data() + 20, &v32, 4);
	const std::vector<uint8_t> before(r.mem.begin(), r.mem.end());
	int64_t old64 = 0;
	int32_t old32 = 0;
	const fi_ioc none{nullptr, 1};
	fi_ioc res64{&old64, 1}, res32{&old32, 1};
	const fi_rma_ioc at64{r.addr(8), 1, r.key()}, at32{r.addr(20), 1, r.key()};
	const fi_msg_atomic m64{&none, nullptr, 1, a.addr_of(b), &at64, 1, FI_INT64, FI_ATOMIC_READ, nullptr, 0};
	const fi_msg_atomic m32{&none, nullptr, 1, a.addr_of(b), &at32, 1, FI_INT32, FI_ATOMIC_READ, nullptr, 0};
	post([&] { return fi_fetch_atomicmsg(a.ep, &m64, &res64, nullptr, 1, FI_INJECT); },
	     "ATOMIC_READ INT64, operand {NULL, 1}, FI_INJECT");
	post([&] { return fi_fetch_atomicmsg(a.ep, &m32, &res32, nullptr, 1, FI_INJECT); },
	     "ATOMIC_READ INT32, operand {NULL, 1}, FI_INJECT");
	expect_cntr(a.read_cntr, 2, native ? "FI_READ counter (native)" : "FI_READ counter");
	ck_assert_msg(old64 == v64, "INT64 read 0x%" PRIx64, static_cast<uint64_t>(old64));
	ck_assert_msg(old32 == v32, "INT32 read 0x%x", static_cast<unsigned>(old32));
	ck_assert_int_eq(memcmp(r.mem.data(), before.data(), 64), 0);
	expect_none(a, 100, "fetch atomics without FI_COMPLETION (selective completion)");
}

START_TEST(rdm_atomic_read_null_operand)
{
	check_atomic_read_null_operand(false);
}
END_TEST

START_TEST(rdm_atomic_native_read_null_operand)
{
	if (!with_native_atomics("rdm_atomic_native_read_null_operand"))
		return;
	check_atomic_read_null_operand(true);
}
END_TEST

START_TEST(rdm_atomic_native_events)
{
	if (!with_native_atomics("rdm_atomic_native_events"))
		return;
	check_atomic_events(true);
}
END_TEST

} // namespace

Suite *rdm_atomic_suite()
{
	Suite *s = suite_create("rdm_atomic");
	auto add = [&](const char *name, int timeout, std::initializer_list<const TTest *> tests) {
		rdm_add_tcase(s, name, timeout, tests);
	};
	add("rdm_atomic_ops", 240,
	    {rdm_atomic_valid, rdm_atomic_every_op, rdm_atomic_vectors_and_inject, rdm_atomic_read_null_operand});
	add("rdm_atomic_concurrent", 180, {rdm_atomic_two_initiators});
	add("rdm_atomic_errors", 120,
	    {rdm_atomic_errors, rdm_atomic_scalable_keys, rdm_atomic_events, rdm_atomic_fence, rdm_atomic_cq_data});
	add("rdm_atomic_native", 120,
	    {rdm_atomic_native, rdm_atomic_native_events, rdm_atomic_native_cq_data, rdm_atomic_native_read_null_operand});
	return s;
}
