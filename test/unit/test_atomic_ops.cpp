// vrma::atomic: valid() against a table written out here for every kind, op
// and datatype; apply() against a plain reference for every valid combination
// on many values at once (unaligned arrays, old values fetched, failed
// compares leaving the target's bytes alone); combine() against apply() one
// element at a time; invalid calls touch nothing; a few results worked out by
// hand, so that the reference is not merely the implementation twice.
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <rdma/fi_errno.h>

#include "atomic_ops.h"
#include "../atomic_reference.h"
#include "unit.h"

using namespace vrma::atomic;

namespace {

using namespace atomic_ref;

constexpr Kind kKinds[] = {Kind::Plain, Kind::Fetch, Kind::Compare};

const char *kind_name(Kind k)
{
	return k == Kind::Plain ? "plain" : k == Kind::Fetch ? "fetch" : "compare";
}

// Failures, counted (a passing ck_assert per element would log 10^5 lines);
// the first is described, with the combination at() last named.
struct Tally {
	size_t bad = 0;
	std::string first;
	Kind kind = Kind::Plain;
	int op = 0, datatype = 0;
	void at(Kind k, int o, int dt)
	{
		kind = k;
		op = o;
		datatype = dt;
	}
	void check(bool ok, const char *what, size_t element = 0)
	{
		if (ok || bad++ > 0)
			return;
		char b[160];
		snprintf(b, sizeof b, "%s: kind %s op %d datatype %d element %zu", what,
			 kind_name(kind), op, datatype, element);
		first = b;
	}
};

#define TALLY_DONE(t) ck_assert_msg((t).bad == 0, "%zu checks failed; the first: %s", (t).bad, \
				    (t).first.c_str())

// Calls f(kind, op, datatype) for every kind, every op and datatype and a few
// values past them; tally.at() names each.
template <typename F> void for_each_combination(Tally &tally, F &&f)
{
	std::vector<int> ops = {-1, 255, int(FI_NOOP)}, datatypes = {-1, 255, int(FI_VOID)};
	for (int op = 0; op <= FI_ATOMIC_OP_LAST; op++)
		ops.push_back(op);
	for (int dt = 0; dt <= FI_UINT128 + 1; dt++)
		datatypes.push_back(dt);
	for (Kind kind : kKinds)
		for (int op : ops)
			for (int dt : datatypes) {
				tally.at(kind, op, dt);
				f(kind, op, dt);
			}
}

// Calls f(T{}, kind, op, datatype) for every valid combination of the table
// (T the datatype's host type); returns how many.
template <typename F> size_t for_each_valid(Tally &tally, F &&f)
{
	size_t n = 0;
	for_each_datatype([&](int dt, auto zero) {
		for (Kind kind : kKinds)
			for (const Row &r : kTable)
				if (expected_valid(kind, r.op, dt)) {
					tally.at(kind, r.op, dt);
					f(zero, kind, r.op, dt);
					n++;
				}
	});
	return n;
}

// Every (t, x, c) of the samples, as three arrays (c only varies for the
// compare ops).
template <typename T> struct Cases {
	std::vector<T> t, x, c;
	Cases(int op)
	{
		const std::vector<T> s = samples<T>();
		const std::vector<T> cs = is_compare_op(op) ? s : std::vector<T>{s[1]};
		for (const T &a : s)
			for (const T &b : s)
				for (const T &d : cs) {
					t.push_back(a);
					x.push_back(b);
					c.push_back(d);
				}
	}
	size_t size() const { return t.size(); }
};

// Unaligned copies: the arrays start `skew` bytes into a byte buffer.
template <typename T> std::vector<uint8_t> unaligned(const std::vector<T> &v, size_t skew)
{
	std::vector<uint8_t> b(skew + v.size() * sizeof(T), 0xa5);
	if (!v.empty())
		memcpy(b.data() + skew, v.data(), v.size() * sizeof(T));
	return b;
}

// apply() over every case at once, unaligned, against the reference.
template <typename T> void check_apply(Tally &tally, Kind kind, int op, int dt)
{
	const Cases<T> cases(op);
	const size_t n = cases.size();
	const std::vector<uint8_t> before = unaligned(cases.t, 1);
	const std::vector<uint8_t> operand = unaligned(cases.x, 3), compare = unaligned(cases.c, 5);
	// Plain: without a result array, and with one (filled too).
	for (bool with_result : {kind != Kind::Plain, true}) {
		std::vector<uint8_t> target = before, result(7 + n * sizeof(T), 0x5a);
		uint8_t *r = with_result ? result.data() + 7 : nullptr;
		tally.check(apply(kind, op, dt, target.data() + 1, operand.data() + 3,
				  compare.data() + 5, r, n) == 0,
			    "rc");
		tally.check(target[0] == 0xa5, "byte before");
		for (size_t i = 0; i < n; i++) {
			const uint8_t *now = target.data() + 1 + i * sizeof(T);
			const uint8_t *was = before.data() + 1 + i * sizeof(T);
			T want{};
			if (reference(op, cases.t[i], cases.x[i], cases.c[i], want))
				tally.check(same(load<T>(now), want), "new value", i);
			else // not even a byte of padding changed
				tally.check(memcmp(now, was, sizeof(T)) == 0, "kept value", i);
			if (r) // the old value fetched
				tally.check(memcmp(r + i * sizeof(T), was, sizeof(T)) == 0, "old", i);
		}
	}
}

// combine() on each case, unaligned: the bytes apply() leaves in a one-element
// target, and whether the reference writes.
template <typename T> void check_combine(Tally &tally, Kind kind, int op, int dt)
{
	const Cases<T> cases(op);
	for (size_t i = 0; i < cases.size(); i++) {
		uint8_t old[sizeof(T) + 1], x[sizeof(T) + 2], c[sizeof(T) + 3], out[sizeof(T) + 3];
		uint8_t target[sizeof(T) + 1], fetched[sizeof(T)];
		memcpy(old + 1, &cases.t[i], sizeof(T));
		memcpy(x + 2, &cases.x[i], sizeof(T));
		memcpy(c + 3, &cases.c[i], sizeof(T));
		memcpy(target + 1, old + 1, sizeof(T));
		memset(out, 0x77, sizeof out);
		const bool wrote = combine(op, dt, old + 1, x + 2, c + 3, out + 3);
		T want{};
		tally.check(wrote == reference(op, cases.t[i], cases.x[i], cases.c[i], want),
			    "verdict", i);
		tally.check(apply(kind, op, dt, target + 1, x + 2, c + 3, fetched, 1) == 0, "rc", i);
		tally.check(memcmp(out + 3, target + 1, sizeof(T)) == 0, "bytes", i);
		// In place: new_value may be old_value.
		const bool again = combine(op, dt, old + 1, x + 2, c + 3, old + 1);
		tally.check(again == wrote && memcmp(old + 1, out + 3, sizeof(T)) == 0, "in place", i);
	}
}

} // namespace

START_TEST(datatype_sizes)
{
	size_t known = 0;
	for_each_datatype([&](int dt, auto zero) {
		ck_assert_uint_eq(datatype_size(dt), sizeof zero);
		known++;
	});
	ck_assert_uint_eq(known, kDatatypes);
	ck_assert_uint_eq(known, 16);
	ck_assert_uint_eq(datatype_size(FI_INT8), 1);
	ck_assert_uint_eq(datatype_size(FI_UINT64), 8);
	ck_assert_uint_eq(datatype_size(FI_FLOAT_COMPLEX), 8);
	ck_assert_uint_eq(datatype_size(FI_DOUBLE_COMPLEX), 16);
	ck_assert_uint_eq(datatype_size(FI_LONG_DOUBLE_COMPLEX), 2 * sizeof(long double));
	ck_assert_uint_eq(datatype_size(FI_INT128), 16);
	ck_assert_uint_eq(datatype_size(FI_UINT128), 16);
	for (int dt : {-1, int(FI_UINT128) + 1, 255, int(FI_VOID)})
		ck_assert_uint_eq(datatype_size(dt), 0);
	ck_assert(is_integer(FI_INT8) && is_integer(FI_UINT64) && !is_integer(FI_FLOAT));
	ck_assert(is_integer(FI_INT128) && is_integer(FI_UINT128) && !is_integer(FI_UINT128 + 1));
	ck_assert(!is_integer(FI_LONG_DOUBLE_COMPLEX) && !is_integer(-1));
	ck_assert(is_complex(FI_LONG_DOUBLE_COMPLEX) && !is_complex(FI_LONG_DOUBLE));
	ck_assert(!is_complex(FI_INT128));
}
END_TEST

START_TEST(validity_table)
{
	Tally tally;
	size_t valid_count = 0;
	for_each_combination(tally, [&](Kind kind, int op, int dt) {
		const bool v = valid(kind, op, dt);
		tally.check(v == expected_valid(kind, op, dt), "valid");
		// Whatever the datatype, a kind takes an op or not.
		tally.check(!v || kind_takes(kind, op), "kind_takes");
		valid_count += v;
	});
	TALLY_DONE(tally);
	// Plain 152 (MIN, MAX on 13 types; SUM, PROD, LOR, LAND, LXOR, WRITE
	// on 16; BOR, BAND, BXOR on 10), Fetch those and READ's 16, Compare 94
	// (CSWAP, CSWAP_NE on 16; the four orders on 13; MSWAP on 10).
	ck_assert_uint_eq(valid_count, 152 + 168 + 94);
	// Every op on the 128-bit integers, in every kind that takes it.
	for (Kind kind : kKinds)
		for (int op = 0; op < FI_ATOMIC_OP_LAST; op++)
			for (int dt : {int(FI_INT128), int(FI_UINT128)})
				ck_assert(valid(kind, op, dt) == kind_takes(kind, op));
	for (Kind kind : kKinds)
		for (int op = 0; op < FI_ATOMIC_OP_LAST; op++)
			ck_assert(!valid(kind, op, FI_UINT128 + 1));
	ck_assert(!valid(static_cast<Kind>(3), FI_SUM, FI_INT32));
	ck_assert(!kind_takes(Kind::Plain, FI_ATOMIC_READ));
	ck_assert(kind_takes(Kind::Fetch, FI_ATOMIC_READ));
	ck_assert(!kind_takes(Kind::Compare, FI_ATOMIC_WRITE));
}
END_TEST

// For every valid kind, op and datatype: apply() over every combination of
// the samples at once, against the reference.
START_TEST(apply_matches_reference)
{
	Tally tally;
	const size_t combinations = for_each_valid(tally, [&](auto zero, Kind kind, int op, int dt) {
		check_apply<decltype(zero)>(tally, kind, op, dt);
	});
	TALLY_DONE(tally);
	ck_assert_uint_eq(combinations, 152 + 168 + 94);
}
END_TEST

// combine() on one element gives the bytes apply() leaves there, and says
// whether it wrote.
START_TEST(combine_matches_apply)
{
	Tally tally;
	for_each_valid(tally, [&](auto zero, Kind kind, int op, int dt) {
		check_combine<decltype(zero)>(tally, kind, op, dt);
	});
	TALLY_DONE(tally);
}
END_TEST

// Results worked out by hand, and libfabric's edge semantics.
START_TEST(worked_examples)
{
	auto one = [](int op, int dt, auto t, auto x, auto c) {
		decltype(t) n;
		combine(op, dt, &t, &x, &c, &n);
		return n;
	};
	// Signed overflow wraps; no UB (the build would trap under UBSan).
	ck_assert_int_eq(one(FI_SUM, FI_INT8, int8_t(127), int8_t(1), int8_t(0)), -128);
	ck_assert_int_eq(one(FI_PROD, FI_INT32, INT32_MIN, int32_t(-1), int32_t(0)), INT32_MIN);
	ck_assert_uint_eq(one(FI_PROD, FI_UINT16, uint16_t(65535), uint16_t(65535), uint16_t(0)),
			  1);
	ck_assert_int_eq(one(FI_SUM, FI_INT64, INT64_MAX, int64_t(2), int64_t(0)), INT64_MIN + 1);
	ck_assert_uint_eq(one(FI_PROD, FI_UINT8, uint8_t(16), uint8_t(17), uint8_t(0)), 16);
	// MIN keeps the smaller: the operand wins only when less than the target.
	ck_assert_int_eq(one(FI_MIN, FI_INT16, int16_t(-3), int16_t(4), int16_t(0)), -3);
	ck_assert_int_eq(one(FI_MAX, FI_INT16, int16_t(-3), int16_t(4), int16_t(0)), 4);
	ck_assert(one(FI_MIN, FI_DOUBLE, 2.0, -0.5, 0.0) == -0.5);
	// Bits: MSWAP takes the operand's bits where compare has ones.
	ck_assert_uint_eq(one(FI_MSWAP, FI_UINT8, uint8_t(0xf0), uint8_t(0x3c), uint8_t(0x0f)),
			  0xfc);
	ck_assert_int_eq(one(FI_MSWAP, FI_INT8, int8_t(-1), int8_t(0), int8_t(0x70)), int8_t(0x8f));
	ck_assert_uint_eq(one(FI_BXOR, FI_UINT32, 0xff00ff00u, 0x0ff00ff0u, 0u), 0xf0f0f0f0u);
	// Logical: 1 or 0; a float is true when non-zero; a complex when
	// either part is.
	ck_assert_int_eq(one(FI_LOR, FI_INT32, int32_t(0), int32_t(-9), int32_t(0)), 1);
	ck_assert_int_eq(one(FI_LAND, FI_INT32, int32_t(3), int32_t(-9), int32_t(0)), 1);
	ck_assert_int_eq(one(FI_LXOR, FI_INT32, int32_t(3), int32_t(-9), int32_t(0)), 0);
	ck_assert_int_eq(one(FI_LXOR, FI_UINT64, uint64_t(0), uint64_t(1) << 63, uint64_t(0)), 1);
	ck_assert(one(FI_LOR, FI_FLOAT, 0.0f, 2.5f, 0.0f) == 1.0f);
	ck_assert(one(FI_LAND, FI_FLOAT, 0.25f, 0.0f, 0.0f) == 0.0f);
	ck_assert(one(FI_LAND, FI_DOUBLE_COMPLEX, cdouble(0, 1), cdouble(2, 0), cdouble()) ==
		  cdouble(1, 0));
	ck_assert(one(FI_LXOR, FI_FLOAT_COMPLEX, cfloat(0, 0), cfloat(0, -3), cfloat()) ==
		  cfloat(1, 0));
	ck_assert(one(FI_PROD, FI_FLOAT_COMPLEX, cfloat(1, 2), cfloat(3, 4), cfloat()) ==
		  cfloat(-5, 10));
	// Compares: compare OP target, in that order.
	ck_assert_int_eq(one(FI_CSWAP_LT, FI_INT32, int32_t(5), int32_t(9), int32_t(3)), 9);
	ck_assert_int_eq(one(FI_CSWAP_LT, FI_INT32, int32_t(5), int32_t(9), int32_t(7)), 5);
	ck_assert_int_eq(one(FI_CSWAP_LT, FI_INT32, int32_t(5), int32_t(9), int32_t(5)), 5);
	ck_assert_int_eq(one(FI_CSWAP_LE, FI_INT32, int32_t(5), int32_t(9), int32_t(5)), 9);
	ck_assert_int_eq(one(FI_CSWAP_GT, FI_INT32, int32_t(5), int32_t(9), int32_t(7)), 9);
	ck_assert_int_eq(one(FI_CSWAP_GT, FI_INT32, int32_t(5), int32_t(9), int32_t(3)), 5);
	ck_assert_int_eq(one(FI_CSWAP_GE, FI_UINT8, uint8_t(200), uint8_t(1), uint8_t(200)), 1);
	ck_assert_int_eq(one(FI_CSWAP_GE, FI_INT8, int8_t(-1), int8_t(1), int8_t(-2)), -1);
	ck_assert_int_eq(one(FI_CSWAP_NE, FI_INT64, int64_t(5), int64_t(9), int64_t(5)), 5);
	// Complex values are equal only when both parts are.
	ck_assert(one(FI_CSWAP, FI_DOUBLE_COMPLEX, cdouble(1, 2), cdouble(7, 7), cdouble(1, 3)) ==
		  cdouble(1, 2));
	ck_assert(one(FI_CSWAP, FI_DOUBLE_COMPLEX, cdouble(1, 2), cdouble(7, 7), cdouble(1, 2)) ==
		  cdouble(7, 7));
	ck_assert(one(FI_CSWAP_NE, FI_LONG_DOUBLE_COMPLEX, cldouble(1, 2), cldouble(7, 7),
		      cldouble(2, 2)) == cldouble(7, 7));

	// The verdicts: false for a read, a failed compare, a MIN that keeps.
	int32_t t = 5, x = 1, c = 4, n = 0;
	ck_assert(!combine(FI_ATOMIC_READ, FI_INT32, &t, nullptr, nullptr, &n) && n == 5);
	n = 0;
	ck_assert(!combine(FI_CSWAP, FI_INT32, &t, &x, &c, &n) && n == 5);
	ck_assert(!combine(FI_MAX, FI_INT32, &t, &x, nullptr, &n));
	ck_assert(combine(FI_MIN, FI_INT32, &t, &x, nullptr, &n) && n == 1);
	ck_assert(combine(FI_SUM, FI_INT32, &t, &c, nullptr, &n) && n == 9);
	ck_assert(combine(FI_ATOMIC_WRITE, FI_INT32, &t, &t, nullptr, &n) && n == 5);
}
END_TEST

// The 128-bit integers worked out by hand: carries and wraps across the two
// halves, signed and unsigned order, bits in both halves.
START_TEST(int128_worked_examples)
{
	auto one = [](int op, int dt, auto t, auto x, auto c) {
		decltype(t) n = t;
		combine(op, dt, &t, &x, &c, &n);
		return n;
	};
	const uint64_t all = ~0ULL, top = 1ULL << 63;
	auto u = [](uint64_t lo, uint64_t hi) { return join<uint128>(lo, hi); };
	auto s = [](uint64_t lo, uint64_t hi) { return join<int128>(lo, hi); };
	const int128 zs = 0;
	const uint128 zu = 0;
	// SUM: the carry out of the low half, the wrap at 2^128 and at the
	// signed extremes.
	ck_assert(one(FI_SUM, FI_UINT128, u(all, 0), u(1, 0), zu) == u(0, 1));
	ck_assert(one(FI_SUM, FI_UINT128, u(all, all), u(2, 0), zu) == u(1, 0));
	ck_assert(one(FI_SUM, FI_INT128, s(all, top - 1), s(1, 0), zs) == s(0, top)); // max + 1
	ck_assert(one(FI_SUM, FI_INT128, s(0, top), s(all, all), zs) == s(all, top - 1)); // min - 1
	// PROD: the low half's product into the high half, the wrap.
	ck_assert(one(FI_PROD, FI_UINT128, u(0, 1), u(0, 1), zu) == u(0, 0)); // 2^64 * 2^64
	ck_assert(one(FI_PROD, FI_UINT128, u(all, 0), u(all, 0), zu) == u(1, all - 1));
	ck_assert(one(FI_PROD, FI_UINT128, u(0x100000000ULL, 0), u(0x100000000ULL, 0), zu) == u(0, 1));
	ck_assert(one(FI_PROD, FI_INT128, s(0, top), s(all, all), zs) == s(0, top)); // min * -1
	ck_assert(one(FI_PROD, FI_INT128, s(0, all), s(2, 0), zs) == s(0, all - 1)); // -2^64 * 2
	ck_assert(one(FI_PROD, FI_INT128, s(all, all), s(all, all), zs) == s(1, 0)); // -1 * -1
	// Order: the same bits, signed and unsigned; the high half first.
	ck_assert(one(FI_MIN, FI_INT128, s(all, all), s(1, 0), zs) == s(all, all)); // -1 < 1
	ck_assert(one(FI_MIN, FI_UINT128, u(all, all), u(1, 0), zu) == u(1, 0));
	ck_assert(one(FI_MAX, FI_INT128, s(all, 0), s(0, 1), zs) == s(0, 1)); // 2^64 - 1 < 2^64
	ck_assert(one(FI_MAX, FI_INT128, s(0, 1), s(0, top), zs) == s(0, 1)); // min loses
	ck_assert(one(FI_MAX, FI_UINT128, u(0, 1), u(0, top), zu) == u(0, top));
	ck_assert(one(FI_CSWAP_GT, FI_INT128, s(5, 1), s(7, 7), s(4, 2)) == s(7, 7));
	ck_assert(one(FI_CSWAP_GT, FI_INT128, s(5, 1), s(7, 7), s(6, 0)) == s(5, 1));
	ck_assert(one(FI_CSWAP_LT, FI_INT128, s(0, 0), s(7, 7), s(0, all)) == s(7, 7)); // -2^64 < 0
	ck_assert(one(FI_CSWAP_LT, FI_UINT128, u(0, 0), u(7, 7), u(0, all)) == u(0, 0));
	ck_assert(one(FI_CSWAP_GE, FI_UINT128, u(9, 3), u(1, 1), u(9, 3)) == u(1, 1));
	ck_assert(one(FI_CSWAP_LE, FI_INT128, s(9, 3), s(1, 1), s(all, 2)) == s(1, 1));
	// Equality needs both halves.
	ck_assert(one(FI_CSWAP, FI_UINT128, u(5, 1), u(7, 7), u(5, 2)) == u(5, 1));
	ck_assert(one(FI_CSWAP, FI_UINT128, u(5, 1), u(7, 7), u(5, 1)) == u(7, 7));
	ck_assert(one(FI_CSWAP_NE, FI_INT128, s(5, 1), s(7, 7), s(6, 1)) == s(7, 7));
	// Bits in both halves.
	ck_assert(one(FI_MSWAP, FI_UINT128, u(0xf0f0f0f0f0f0f0f0ULL, 0xf0f0f0f0f0f0f0f0ULL), u(all, all),
		      u(0x0f, all)) == u(0xf0f0f0f0f0f0f0ffULL, all));
	ck_assert(one(FI_BXOR, FI_INT128, s(0xff00, 0xff00), s(0x0ff0, top), zs) == s(0xf0f0, top | 0xff00));
	ck_assert(one(FI_BAND, FI_UINT128, u(0xff, 0xf0), u(0x0f, 0x3c), zu) == u(0x0f, 0x30));
	ck_assert(one(FI_BOR, FI_INT128, s(1, 0), s(0, top), zs) == s(1, top));
	// Logical: a value non-zero in its high half alone is true.
	ck_assert(one(FI_LXOR, FI_UINT128, u(0, 0), u(0, top), zu) == u(1, 0));
	ck_assert(one(FI_LAND, FI_INT128, s(0, 1), s(0, top), zs) == s(1, 0));
	ck_assert(one(FI_LOR, FI_INT128, s(0, 0), s(0, 0), zs) == s(0, 0));
	ck_assert(one(FI_ATOMIC_WRITE, FI_UINT128, u(1, 2), u(3, 4), zu) == u(3, 4));

	// An array of them, unaligned: each element 16 bytes, fetched old
	// values included.
	uint8_t target[1 + 3 * 16], operand[3 + 3 * 16], result[5 + 3 * 16];
	const uint128 t[3] = {u(all, 0), u(1, 1), u(0, all)}, x[3] = {u(1, 0), u(all, all), u(0, 1)};
	memcpy(target + 1, t, sizeof t);
	memcpy(operand + 3, x, sizeof x);
	ck_assert_int_eq(apply(Kind::Fetch, FI_SUM, FI_UINT128, target + 1, operand + 3, nullptr, result + 5, 3),
			 0);
	const uint128 want[3] = {u(0, 1), u(0, 1), u(0, 0)};
	ck_assert_int_eq(memcmp(target + 1, want, sizeof want), 0);
	ck_assert_int_eq(memcmp(result + 5, t, sizeof t), 0);
}
END_TEST

// Invalid combinations, missing arrays: -FI_EINVAL and not a byte touched.
// Arrays the op does not read are not read.
START_TEST(invalid_calls_touch_nothing)
{
	Tally tally;
	uint8_t target[64], operand[64], compare[64], result[64];
	memset(operand, 1, sizeof operand);
	memset(compare, 2, sizeof compare);
	auto untouched = [&] {
		for (size_t i = 0; i < sizeof target; i++)
			if (target[i] != 0xee || result[i] != 0xdd)
				return false;
		return true;
	};
	for_each_combination(tally, [&](Kind kind, int op, int dt) {
		if (valid(kind, op, dt))
			return;
		memset(target, 0xee, sizeof target);
		memset(result, 0xdd, sizeof result);
		const int rc = apply(kind, op, dt, target, operand, compare, result, 2);
		tally.check(rc == -FI_EINVAL && untouched(), "invalid");
		// combine: false, new_value untouched, unless the op is defined
		// on the datatype in another kind.
		if (!valid(Kind::Plain, op, dt) && !valid(Kind::Fetch, op, dt) &&
		    !valid(Kind::Compare, op, dt))
			tally.check(!combine(op, dt, operand, operand, compare, target) && untouched(),
				    "combine");
	});
	TALLY_DONE(tally);

	// Missing arrays.
	struct {
		Kind kind;
		int op;
		bool target, operand, compare, result;
	} const missing[] = {
		{Kind::Plain, FI_SUM, false, true, false, false},
		{Kind::Plain, FI_SUM, true, false, false, false},
		{Kind::Fetch, FI_SUM, true, true, false, false},
		{Kind::Fetch, FI_ATOMIC_READ, true, false, false, false},
		{Kind::Fetch, FI_ATOMIC_READ, false, false, false, true},
		{Kind::Compare, FI_CSWAP, true, true, false, true},
		{Kind::Compare, FI_CSWAP, true, false, true, true},
		{Kind::Compare, FI_CSWAP, true, true, true, false},
	};
	for (const auto &m : missing) {
		memset(target, 0xee, sizeof target);
		memset(result, 0xdd, sizeof result);
		ck_assert_int_eq(apply(m.kind, m.op, FI_UINT32, m.target ? target : nullptr,
				       m.operand ? operand : nullptr, m.compare ? compare : nullptr,
				       m.result ? result : nullptr, 4),
				 -FI_EINVAL);
		ck_assert(untouched());
	}

	// Not read: FI_ATOMIC_READ's operand, a non-compare op's compare (a
	// bad pointer would crash the test).
	const void *bad = reinterpret_cast<const void *>(uintptr_t(8));
	uint32_t t[3] = {7, 8, 9}, r[3] = {}, x[3] = {1, 1, 1};
	ck_assert_int_eq(apply(Kind::Fetch, FI_ATOMIC_READ, FI_UINT32, t, bad, bad, r, 3), 0);
	ck_assert(r[0] == 7 && r[2] == 9 && t[1] == 8);
	ck_assert_int_eq(apply(Kind::Plain, FI_SUM, FI_UINT32, t, x, bad, nullptr, 3), 0);
	ck_assert(t[0] == 8 && t[2] == 10);
	uint32_t n = 0;
	ck_assert(combine(FI_BOR, FI_UINT32, t, x, bad, &n) && n == 9);
	ck_assert(!combine(FI_ATOMIC_READ, FI_UINT32, t, bad, bad, &n) && n == 8);
	// No elements: nothing done, still checked.
	ck_assert_int_eq(apply(Kind::Plain, FI_SUM, FI_UINT32, t, x, nullptr, nullptr, 0), 0);
	ck_assert_int_eq(apply(Kind::Plain, FI_BOR, FI_FLOAT, t, x, nullptr, nullptr, 0),
			 -FI_EINVAL);
}
END_TEST

// A long double written by apply() or combine() has no stray bytes in its
// padding (x87's 80 bits in 16 bytes): a peer fetching it learns nothing else.
START_TEST(long_double_padding_zeroed)
{
	if (std::numeric_limits<long double>::digits != 64 || sizeof(long double) <= 10)
		return; // no padding to speak of
	const size_t pad = sizeof(long double) - 10;
	uint8_t target[1 + 2 * sizeof(long double)], operand[2 * sizeof(long double)];
	memset(target, 0xcc, sizeof target);
	const long double one = 1.5L;
	memcpy(target + 1, &one, 10);
	memcpy(target + 1 + sizeof(long double), &one, 10);
	memset(operand, 0xcc, sizeof operand);
	memcpy(operand, &one, 10);
	memcpy(operand + sizeof(long double), &one, 10);
	ck_assert_int_eq(apply(Kind::Plain, FI_SUM, FI_LONG_DOUBLE, target + 1, operand, nullptr,
			       nullptr, 2),
			 0);
	const uint8_t zeros[16] = {};
	for (size_t i = 0; i < 2; i++) {
		const uint8_t *e = target + 1 + i * sizeof(long double);
		ck_assert_int_eq(memcmp(e + 10, zeros, pad), 0);
		long double v;
		memcpy(&v, e, sizeof v);
		ck_assert(v == 3.0L);
	}
	// The complex kind: both parts.
	uint8_t c[sizeof(cldouble)];
	memset(c, 0xcc, sizeof c);
	memcpy(c, &one, 10);
	memcpy(c + sizeof(long double), &one, 10);
	uint8_t out[sizeof(cldouble)];
	memset(out, 0xcc, sizeof out);
	ck_assert(combine(FI_PROD, FI_LONG_DOUBLE_COMPLEX, c, c, nullptr, out));
	ck_assert_int_eq(memcmp(out + 10, zeros, pad), 0);
	ck_assert_int_eq(memcmp(out + sizeof(long double) + 10, zeros, pad), 0);
	cldouble v;
	memcpy(&v, out, sizeof v);
	ck_assert(v == cldouble(0, 4.5L)); // (1.5 + 1.5i)^2
}
END_TEST

Suite *atomic_ops_suite()
{
	Suite *s = suite_create("atomic_ops");
	TCase *tc = tcase_create("atomic_ops");
	tcase_add_test(tc, datatype_sizes);
	tcase_add_test(tc, validity_table);
	tcase_add_test(tc, apply_matches_reference);
	tcase_add_test(tc, combine_matches_apply);
	tcase_add_test(tc, worked_examples);
	tcase_add_test(tc, int128_worked_examples);
	tcase_add_test(tc, invalid_calls_touch_nothing);
	tcase_add_test(tc, long_double_padding_zeroed);
	suite_add_tcase(s, tc);
	return s;
}
