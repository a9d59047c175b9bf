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
#include "unit.h"

using namespace vrma::atomic;

namespace {

using cfloat = std::complex<float>;
using cdouble = std::complex<double>;
using cldouble = std::complex<long double>;

template <typename T> struct IsComplex : std::false_type {};
template <typename T> struct IsComplex<std::complex<T>> : std::true_type {};

constexpr Kind kKinds[] = {Kind::Plain, Kind::Fetch, Kind::Compare};

const char *kind_name(Kind k)
{
	return k == Kind::Plain ? "plain" : k == Kind::Fetch ? "fetch" : "compare";
}

// Calls f(datatype, T{}) for every datatype and its host type, in enum
// fi_datatype's order.
template <typename F> void for_each_datatype(F &&f)
{
	static_assert(FI_INT8 == 0 && FI_FLOAT == 8 && FI_FLOAT_COMPLEX == 10 &&
		      FI_LONG_DOUBLE == 12 && FI_LONG_DOUBLE_COMPLEX == 13);
	int dt = FI_INT8;
	auto each = [&](auto... zero) { (f(dt++, zero), ...); };
	each(int8_t{}, uint8_t{}, int16_t{}, uint16_t{}, int32_t{}, uint32_t{}, int64_t{},
	     uint64_t{}, float{}, double{}, cfloat{}, cdouble{}, static_cast<long double>(0),
	     cldouble{});
}

// The expected table, one row per op: the kinds that take it, the classes of
// datatype it is defined on (libfabric's util_atomic.c handler tables).
struct Row {
	int op;
	bool plain, fetch, compare;
	bool integer, real, complex;
};
constexpr Row kTable[] = {
	{FI_MIN, true, true, false, true, true, false},
	{FI_MAX, true, true, false, true, true, false},
	{FI_SUM, true, true, false, true, true, true},
	{FI_PROD, true, true, false, true, true, true},
	{FI_LOR, true, true, false, true, true, true},
	{FI_LAND, true, true, false, true, true, true},
	{FI_BOR, true, true, false, true, false, false},
	{FI_BAND, true, true, false, true, false, false},
	{FI_LXOR, true, true, false, true, true, true},
	{FI_BXOR, true, true, false, true, false, false},
	{FI_ATOMIC_READ, false, true, false, true, true, true},
	{FI_ATOMIC_WRITE, true, true, false, true, true, true},
	{FI_CSWAP, false, false, true, true, true, true},
	{FI_CSWAP_NE, false, false, true, true, true, true},
	{FI_CSWAP_LE, false, false, true, true, true, false},
	{FI_CSWAP_LT, false, false, true, true, true, false},
	{FI_CSWAP_GE, false, false, true, true, true, false},
	{FI_CSWAP_GT, false, false, true, true, true, false},
	{FI_MSWAP, false, false, true, true, false, false},
};

bool expected_valid(Kind kind, int op, int datatype)
{
	for (const Row &r : kTable) {
		if (r.op != op)
			continue;
		const bool kind_ok = kind == Kind::Plain ? r.plain : kind == Kind::Fetch ? r.fetch
											: r.compare;
		switch (datatype) {
		case FI_INT8: case FI_UINT8: case FI_INT16: case FI_UINT16:
		case FI_INT32: case FI_UINT32: case FI_INT64: case FI_UINT64:
			return kind_ok && r.integer;
		case FI_FLOAT: case FI_DOUBLE: case FI_LONG_DOUBLE:
			return kind_ok && r.real;
		case FI_FLOAT_COMPLEX: case FI_DOUBLE_COMPLEX: case FI_LONG_DOUBLE_COMPLEX:
			return kind_ok && r.complex;
		default:
			return false;
		}
	}
	return false;
}

// Values to combine: zero, small ones of both signs, the extremes.
template <typename T> std::vector<T> samples()
{
	if constexpr (std::is_integral_v<T>) {
		using L = std::numeric_limits<T>;
		std::vector<T> v = {T(0), T(1), T(2), T(5), T(0x5a), L::max(), T(L::max() - 1)};
		if constexpr (std::is_signed_v<T>)
			v.insert(v.end(), {T(-1), T(-2), T(-7), L::min(), T(L::min() + 1)});
		else
			v.push_back(T(L::max() / 2 + 1)); // the top bit alone
		return v;
	} else if constexpr (IsComplex<T>::value) {
		using R = typename T::value_type;
		return {T(0, 0), T(1, 0), T(0, 1), T(R(-1.5), 2), T(3, R(-0.5)), T(2, 2),
			T(R(-0.25), 0)};
	} else {
		return {T(0), T(1), T(-1), T(2.5), T(-0.75), T(3), T(-1000), T(1e6), T(1e-3)};
	}
}

// Integer arithmetic the long way: in 64 unsigned bits, then cut to T.
template <typename T> uint64_t u64(T v) { return static_cast<uint64_t>(v); }

// What fi_atomic(3) says the target becomes, written out plainly: sets n and
// returns true when the target is written, false when it keeps its value.
template <typename T> bool reference(int op, const T &t, const T &x, const T &c, T &n)
{
	const bool tt = !(t == T(0)), xt = !(x == T(0));
	auto swap_if = [&](bool cond) {
		n = x;
		return cond;
	};
	switch (op) {
	case FI_SUM:
		if constexpr (std::is_integral_v<T>)
			n = static_cast<T>(u64(t) + u64(x));
		else
			n = t + x;
		return true;
	case FI_PROD:
		if constexpr (std::is_integral_v<T>)
			n = static_cast<T>(u64(t) * u64(x));
		else if constexpr (IsComplex<T>::value)
			n = T(t.real() * x.real() - t.imag() * x.imag(),
			      t.real() * x.imag() + t.imag() * x.real());
		else
			n = t * x;
		return true;
	case FI_LOR:
		n = (tt || xt) ? T(1) : T(0);
		return true;
	case FI_LAND:
		n = (tt && xt) ? T(1) : T(0);
		return true;
	case FI_LXOR:
		n = ((tt && !xt) || (!tt && xt)) ? T(1) : T(0);
		return true;
	case FI_ATOMIC_READ:
		return false;
	case FI_ATOMIC_WRITE:
		return swap_if(true);
	case FI_CSWAP:
		return swap_if(c == t);
	case FI_CSWAP_NE:
		return swap_if(!(c == t));
	}
	if constexpr (!IsComplex<T>::value) {
		switch (op) {
		case FI_MIN:
			return swap_if(x < t);
		case FI_MAX:
			return swap_if(t < x);
		case FI_CSWAP_LE:
			return swap_if(c < t || c == t);
		case FI_CSWAP_LT:
			return swap_if(c < t);
		case FI_CSWAP_GE:
			return swap_if(t < c || c == t);
		case FI_CSWAP_GT:
			return swap_if(t < c);
		}
	}
	if constexpr (std::is_integral_v<T>) {
		switch (op) {
		case FI_BOR:
			n = static_cast<T>(u64(t) | u64(x));
			return true;
		case FI_BAND:
			n = static_cast<T>(u64(t) & u64(x));
			return true;
		case FI_BXOR:
			n = static_cast<T>(u64(t) ^ u64(x));
			return true;
		case FI_MSWAP:
			n = static_cast<T>((u64(x) & u64(c)) | (u64(t) & ~u64(c)));
			return true;
		}
	}
	ck_abort_msg("reference: op %d", op);
	return false;
}

// Equal values (NaN-free: == is enough; long double's padding is not part of
// its value).
template <typename T> bool same(const T &a, const T &b) { return a == b; }

template <typename T> T load(const uint8_t *p)
{
	T v;
	memcpy(&v, p, sizeof v);
	return v;
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
	ck_assert_uint_eq(known, FI_DATATYPE_LAST);
	ck_assert_uint_eq(datatype_size(FI_INT8), 1);
	ck_assert_uint_eq(datatype_size(FI_UINT64), 8);
	ck_assert_uint_eq(datatype_size(FI_FLOAT_COMPLEX), 8);
	ck_assert_uint_eq(datatype_size(FI_DOUBLE_COMPLEX), 16);
	ck_assert_uint_eq(datatype_size(FI_LONG_DOUBLE_COMPLEX), 2 * sizeof(long double));
	for (int dt : {-1, int(FI_DATATYPE_LAST), int(FI_UINT128), 255, int(FI_VOID)})
		ck_assert_uint_eq(datatype_size(dt), 0);
	ck_assert(is_integer(FI_INT8) && is_integer(FI_UINT64) && !is_integer(FI_FLOAT));
	ck_assert(is_complex(FI_LONG_DOUBLE_COMPLEX) && !is_complex(FI_LONG_DOUBLE));
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
	// Plain 130 (MIN, MAX on 11 types; SUM, PROD, LOR, LAND, LXOR, WRITE
	// on 14; BOR, BAND, BXOR on 8), Fetch those and READ's 14, Compare 80
	// (CSWAP, CSWAP_NE on 14; the four orders on 11; MSWAP on 8).
	ck_assert_uint_eq(valid_count, 130 + 144 + 80);
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
	ck_assert_uint_eq(combinations, 130 + 144 + 80);
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
	tcase_add_test(tc, invalid_calls_touch_nothing);
	tcase_add_test(tc, long_double_padding_zeroed);
	suite_add_tcase(s, tc);
	return s;
}
