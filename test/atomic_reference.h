// The expected behaviour of libfabric's atomics, written out plainly for
// the tests (unit suite atomic_ops, device suite rdm_atomic): which kind, op
// and datatype go together, sample values, and what fi_atomic(3) says the
// target becomes. Independent of src/atomic_ops, so that a test compares the
// implementation with something else than itself.
#pragma once

#include <check.h>
#undef fail

#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <rdma/fi_atomic.h>

namespace atomic_ref {

using cfloat = std::complex<float>;
using cdouble = std::complex<double>;
using cldouble = std::complex<long double>;
using int128 = __int128;
using uint128 = unsigned __int128;

template <typename T> struct IsComplex : std::false_type {};
template <typename T> struct IsComplex<std::complex<T>> : std::true_type {};

// The integer types, the 128-bit ones named (under -std=c++20 the standard
// traits do not count them: std::is_integral_v and std::is_signed_v are
// false for them).
template <typename T>
constexpr bool kInt = std::is_integral_v<T> || std::is_same_v<T, int128> || std::is_same_v<T, uint128>;
template <typename T> constexpr bool kInt128 = std::is_same_v<T, int128> || std::is_same_v<T, uint128>;
template <typename T> constexpr bool kSigned = kInt<T> && T(-1) < T(0);

// Calls f(datatype, T{}) for every datatype and its host type, in enum
// fi_datatype's order.
template <typename F> void for_each_datatype(F &&f)
{
	static_assert(FI_INT8 == 0 && FI_FLOAT == 8 && FI_FLOAT_COMPLEX == 10 &&
		      FI_LONG_DOUBLE == 12 && FI_LONG_DOUBLE_COMPLEX == 13 && FI_INT128 == 14 &&
		      FI_UINT128 == 15);
	int dt = FI_INT8;
	auto each = [&](auto... zero) { (f(dt++, zero), ...); };
	each(int8_t{}, uint8_t{}, int16_t{}, uint16_t{}, int32_t{}, uint32_t{}, int64_t{},
	     uint64_t{}, float{}, double{}, cfloat{}, cdouble{}, static_cast<long double>(0),
	     cldouble{}, int128{}, uint128{});
}
// How many datatypes for_each_datatype() visits.
inline constexpr int kDatatypes = FI_UINT128 + 1;

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

// K: an enum with Plain, Fetch and Compare.
template <typename K> bool expected_valid(K kind, int op, int datatype)
{
	for (const Row &r : kTable) {
		if (r.op != op)
			continue;
		const bool kind_ok = kind == K::Plain ? r.plain : kind == K::Fetch ? r.fetch : r.compare;
		switch (datatype) {
		case FI_INT8: case FI_UINT8: case FI_INT16: case FI_UINT16:
		case FI_INT32: case FI_UINT32: case FI_INT64: case FI_UINT64:
		case FI_INT128: case FI_UINT128:
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

// The 128-bit integers as two 64-bit halves, so that the reference does
// their arithmetic without the compiler's 128-bit operations.
struct Halves {
	uint64_t lo, hi;
};
template <typename T> Halves split(T v)
{
	const uint128 u = static_cast<uint128>(v);
	return {static_cast<uint64_t>(u), static_cast<uint64_t>(u >> 64)};
}
template <typename T> T join(uint64_t lo, uint64_t hi)
{
	return static_cast<T>((static_cast<uint128>(hi) << 64) | lo);
}

// Values to combine: zero, small ones of both signs, the extremes; for the
// 128-bit integers also values whose sums and products carry from the low
// half into the high one.
template <typename T> std::vector<T> samples()
{
	if constexpr (kInt<T>) {
		using L = std::numeric_limits<T>; // specialized for __int128 too
		std::vector<T> v = {T(0), T(1), T(2), T(5), T(0x5a), L::max(), T(L::max() - 1)};
		if constexpr (kSigned<T>)
			v.insert(v.end(), {T(-1), T(-2), T(-7), L::min(), T(L::min() + 1)});
		else
			v.push_back(T(L::max() / 2 + 1)); // the top bit alone
		if constexpr (kInt128<T>)
			v.insert(v.end(), {join<T>(~0ULL, 0), join<T>(0, 1), join<T>(0xfedcba9876543210ULL, 0x0123456789abcdefULL),
					   join<T>(3, ~0ULL)});
		return v;
	} else if constexpr (IsComplex<T>::value) {
		using R = typename T::value_type;
		return {T(0, 0), T(1, 0), T(0, 1), T(R(-1.5), 2), T(3, R(-0.5)), T(2, 2),
			T(R(-0.25), 0)};
	} else {
		return {T(0), T(1), T(-1), T(2.5), T(-0.75), T(3), T(-1000), T(1e6), T(1e-3)};
	}
}

// Integer arithmetic the long way: in 64 unsigned bits, then cut to T; the
// 128-bit integers in two halves of 64, carries by hand.
template <typename T> uint64_t u64(T v) { return static_cast<uint64_t>(v); }

// a * b as 128 bits {lo, hi}, from 32-bit pieces.
inline Halves mul64(uint64_t a, uint64_t b)
{
	const uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
	const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
	const uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
	return {(mid << 32) | (p00 & 0xffffffffu), p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32)};
}

template <typename T> T wrap_sum(T a, T b)
{
	if constexpr (kInt128<T>) {
		const Halves x = split(a), y = split(b);
		const uint64_t lo = x.lo + y.lo;
		return join<T>(lo, x.hi + y.hi + (lo < x.lo ? 1 : 0));
	} else {
		return static_cast<T>(u64(a) + u64(b));
	}
}

template <typename T> T wrap_prod(T a, T b)
{
	if constexpr (kInt128<T>) { // (x.hi 2^64 + x.lo)(y.hi 2^64 + y.lo) mod 2^128
		const Halves x = split(a), y = split(b), low = mul64(x.lo, y.lo);
		return join<T>(low.lo, low.hi + x.lo * y.hi + x.hi * y.lo);
	} else {
		return static_cast<T>(u64(a) * u64(b));
	}
}

// A bitwise op on each half: f(a, b, c) on 64 bits.
template <typename T, typename F> T bitwise(T a, T b, T c, F f)
{
	if constexpr (kInt128<T>) {
		const Halves x = split(a), y = split(b), z = split(c);
		return join<T>(f(x.lo, y.lo, z.lo), f(x.hi, y.hi, z.hi));
	} else {
		return static_cast<T>(f(u64(a), u64(b), u64(c)));
	}
}

// a < b; the 128-bit integers by halves: the high ones (signed for
// FI_INT128), then the low ones.
template <typename T> bool less(const T &a, const T &b)
{
	if constexpr (kInt128<T>) {
		const Halves x = split(a), y = split(b);
		if (x.hi != y.hi)
			return kSigned<T> ? static_cast<int64_t>(x.hi) < static_cast<int64_t>(y.hi) : x.hi < y.hi;
		return x.lo < y.lo;
	} else {
		return a < b;
	}
}

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
		if constexpr (kInt<T>)
			n = wrap_sum(t, x);
		else
			n = t + x;
		return true;
	case FI_PROD:
		if constexpr (kInt<T>)
			n = wrap_prod(t, x);
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
			return swap_if(less(x, t));
		case FI_MAX:
			return swap_if(less(t, x));
		case FI_CSWAP_LE:
			return swap_if(less(c, t) || c == t);
		case FI_CSWAP_LT:
			return swap_if(less(c, t));
		case FI_CSWAP_GE:
			return swap_if(less(t, c) || c == t);
		case FI_CSWAP_GT:
			return swap_if(less(t, c));
		}
	}
	if constexpr (kInt<T>) {
		switch (op) {
		case FI_BOR:
			n = bitwise(t, x, c, [](uint64_t a, uint64_t b, uint64_t) { return a | b; });
			return true;
		case FI_BAND:
			n = bitwise(t, x, c, [](uint64_t a, uint64_t b, uint64_t) { return a & b; });
			return true;
		case FI_BXOR:
			n = bitwise(t, x, c, [](uint64_t a, uint64_t b, uint64_t) { return a ^ b; });
			return true;
		case FI_MSWAP:
			n = bitwise(t, x, c, [](uint64_t a, uint64_t b, uint64_t m) { return (b & m) | (a & ~m); });
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

} // namespace atomic_ref
