// libfabric's atomic operations on host memory: one function per op, picked
// once per call by datatype (the host type T) and op, then run over the
// elements through memcpy loads and stores.
#include "atomic_ops.h"

#include <array>
#include <bit>
#include <complex>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <type_traits>

#include <rdma/fi_errno.h>

namespace vrma::atomic {

namespace {

template <typename T> struct IsComplex : std::false_type {};
template <typename T> struct IsComplex<std::complex<T>> : std::true_type {};
template <typename T> constexpr bool kComplex = IsComplex<T>::value;

// The 128-bit integers are named explicitly: under -std=c++20 (no GNU
// extensions) the standard traits do not count them as integral types, so
// std::is_integral_v and std::make_unsigned_t reject them.
using int128 = __int128;
using uint128 = unsigned __int128;
template <typename T>
constexpr bool kInteger =
	std::is_integral_v<T> || std::is_same_v<T, int128> || std::is_same_v<T, uint128>;
template <typename T> struct Unsigned {
	using type = std::make_unsigned_t<T>;
};
template <> struct Unsigned<int128> {
	using type = uint128;
};
template <> struct Unsigned<uint128> {
	using type = uint128;
};

static_assert(std::is_trivially_copyable_v<std::complex<long double>> &&
		      sizeof(std::complex<long double>) == 2 * sizeof(long double),
	      "std::complex is laid out as C's _Complex: real, then imaginary");

// The host type of each datatype, in enum fi_datatype's order (FI_INT8 = 0 ..
// FI_LONG_DOUBLE_COMPLEX = 13, FI_INT128 = 14, FI_UINT128 = 15).
using Types = std::tuple<int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t,
			 float, double, std::complex<float>, std::complex<double>, long double,
			 std::complex<long double>, int128, uint128>;
static_assert(std::tuple_size_v<Types> == FI_UINT128 + 1 && FI_INT8 == 0 && FI_FLOAT == 8 &&
		      FI_FLOAT_COMPLEX == 10 && FI_LONG_DOUBLE == 12 && FI_INT128 == 14,
	      "Types follows enum fi_datatype");
static_assert(sizeof(int128) == 16 && sizeof(uint128) == 16, "FI_INT128 and FI_UINT128 are 16 bytes");

// Calls f(std::type_identity<T>{}) with the datatype's host type T; none for
// an unknown datatype.
template <typename R, typename F, size_t I = 0> R with_type(int datatype, R none, const F &f)
{
	if constexpr (I == std::tuple_size_v<Types>)
		return none;
	else if (datatype == int(I))
		return f(std::type_identity<std::tuple_element_t<I, Types>>{});
	else
		return with_type<R, F, I + 1>(datatype, none, f);
}

// The bytes of T that hold its value: all, but for x87's 80-bit long double
// (the first 10 bytes on a little-endian host; the rest is padding).
template <typename T>
constexpr size_t kValueBytes = std::is_same_v<T, long double> &&
					       std::numeric_limits<long double>::digits == 64 &&
					       std::endian::native == std::endian::little
				       ? 10
				       : sizeof(T);

template <typename T> T load(const unsigned char *p) noexcept
{
	T v;
	memcpy(&v, p, sizeof v);
	return v;
}

// Writes v's value and zeroes its padding.
template <typename T> void store(unsigned char *p, const T &v) noexcept
{
	if constexpr (kComplex<T>) {
		store(p, v.real());
		store(p + sizeof(typename T::value_type), v.imag());
	} else {
		memcpy(p, &v, kValueBytes<T>);
		memset(p + kValueBytes<T>, 0, sizeof(T) - kValueBytes<T>);
	}
}

// Integers wrap: arithmetic in an unsigned type, at least unsigned int (a
// narrower one would be promoted to int, which can overflow).
template <typename T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, typename Unsigned<T>::type>;

template <typename T> T sum(const T &a, const T &b) noexcept
{
	if constexpr (kInteger<T>)
		return static_cast<T>(Wide<T>(a) + Wide<T>(b));
	else
		return a + b;
}

template <typename T> T prod(const T &a, const T &b) noexcept
{
	if constexpr (kInteger<T>)
		return static_cast<T>(Wide<T>(a) * Wide<T>(b));
	else
		return a * b;
}

template <typename T> bool truth(const T &v) noexcept
{
	if constexpr (kComplex<T>)
		return v.real() != 0 || v.imag() != 0;
	else
		return v != 0;
}

template <typename T> T logical(bool b) noexcept { return T(b ? 1 : 0); }

// One op on one element: t the target's old value, x the operand, c the
// compare value. Sets n and returns true when the target takes n; returns
// false when it keeps t.
template <typename T> using Fn = bool (*)(const T &t, const T &x, const T &c, T &n) noexcept;

// The two shapes of op, made from capture-less lambdas (which C++20 can
// default-construct). An op that always writes g(t, x, c):
template <typename T, typename G> constexpr Fn<T> writes(G) noexcept
{
	return [](const T &t, const T &x, const T &c, T &n) noexcept {
		n = G{}(t, x, c);
		return true;
	};
}
// An op that writes the operand when p(t, x, c) holds:
template <typename T, typename P> constexpr Fn<T> swaps_if(P) noexcept
{
	return [](const T &t, const T &x, const T &c, T &n) noexcept {
		n = x;
		return P{}(t, x, c);
	};
}

// op's function on T, or nullptr where op is not defined on T (the tables in
// atomic_ops.h).
template <typename T> constexpr Fn<T> op_fn(int op) noexcept
{
	constexpr bool ordered = !kComplex<T>;
	using A = const T &;
	switch (op) {
	case FI_MIN:
		if constexpr (ordered)
			return swaps_if<T>([](A t, A x, A) { return x < t; });
		break;
	case FI_MAX:
		if constexpr (ordered)
			return swaps_if<T>([](A t, A x, A) { return x > t; });
		break;
	case FI_SUM:
		return writes<T>([](A t, A x, A) { return sum(t, x); });
	case FI_PROD:
		return writes<T>([](A t, A x, A) { return prod(t, x); });
	case FI_LOR:
		return writes<T>([](A t, A x, A) { return logical<T>(truth(t) || truth(x)); });
	case FI_LAND:
		return writes<T>([](A t, A x, A) { return logical<T>(truth(t) && truth(x)); });
	case FI_LXOR:
		return writes<T>([](A t, A x, A) { return logical<T>(truth(t) != truth(x)); });
	case FI_BOR:
		if constexpr (kInteger<T>)
			return writes<T>([](A t, A x, A) { return static_cast<T>(t | x); });
		break;
	case FI_BAND:
		if constexpr (kInteger<T>)
			return writes<T>([](A t, A x, A) { return static_cast<T>(t & x); });
		break;
	case FI_BXOR:
		if constexpr (kInteger<T>)
			return writes<T>([](A t, A x, A) { return static_cast<T>(t ^ x); });
		break;
	case FI_ATOMIC_READ:
		return swaps_if<T>([](A, A, A) { return false; });
	case FI_ATOMIC_WRITE:
		return writes<T>([](A, A x, A) { return x; });
	case FI_CSWAP:
		return swaps_if<T>([](A t, A, A c) { return c == t; });
	case FI_CSWAP_NE:
		return swaps_if<T>([](A t, A, A c) { return c != t; });
	case FI_CSWAP_LE:
		if constexpr (ordered)
			return swaps_if<T>([](A t, A, A c) { return c <= t; });
		break;
	case FI_CSWAP_LT:
		if constexpr (ordered)
			return swaps_if<T>([](A t, A, A c) { return c < t; });
		break;
	case FI_CSWAP_GE:
		if constexpr (ordered)
			return swaps_if<T>([](A t, A, A c) { return c >= t; });
		break;
	case FI_CSWAP_GT:
		if constexpr (ordered)
			return swaps_if<T>([](A t, A, A c) { return c > t; });
		break;
	case FI_MSWAP:
		if constexpr (kInteger<T>)
			return writes<T>([](A t, A x, A c) {
				return static_cast<T>((Wide<T>(x) & Wide<T>(c)) |
						      (Wide<T>(t) & ~Wide<T>(c)));
			});
		break;
	}
	return nullptr;
}

// Runs fn on the element at old (operand at x, compare at c; either nullptr
// when op does not read it).
template <typename T>
bool next(Fn<T> fn, const unsigned char *old, const unsigned char *x, const unsigned char *c,
	  T &n) noexcept
{
	return fn(load<T>(old), x ? load<T>(x) : T{}, c ? load<T>(c) : T{}, n);
}

// The size of each datatype and the ops defined on it (a bit per op),
// tabulated at compile time from Types and op_fn: valid() and
// datatype_size() run on every atomic call and request.
constexpr size_t kTypeCount = std::tuple_size_v<Types>;
constexpr int kOpBits = 32;
static_assert(FI_MSWAP < kOpBits, "every fi_op has a bit");

template <size_t... I> constexpr std::array<uint8_t, kTypeCount> type_sizes(std::index_sequence<I...>)
{
	return {static_cast<uint8_t>(sizeof(std::tuple_element_t<I, Types>))...};
}

template <typename T> constexpr uint32_t defined_ops()
{
	uint32_t m = 0;
	for (int op = 0; op < kOpBits; op++)
		if (op_fn<T>(op) != nullptr)
			m |= uint32_t(1) << op;
	return m;
}

template <size_t... I> constexpr std::array<uint32_t, kTypeCount> type_ops(std::index_sequence<I...>)
{
	return {defined_ops<std::tuple_element_t<I, Types>>()...};
}

constexpr auto kTypeSizes = type_sizes(std::make_index_sequence<kTypeCount>{});
constexpr auto kTypeOps = type_ops(std::make_index_sequence<kTypeCount>{});
static_assert(kTypeSizes[FI_INT8] == 1 && kTypeSizes[FI_UINT64] == 8 && kTypeSizes[FI_UINT128] == 16);
static_assert((kTypeOps[FI_UINT64] >> FI_BOR) & 1 && !((kTypeOps[FI_DOUBLE] >> FI_BOR) & 1) &&
	      !((kTypeOps[FI_FLOAT_COMPLEX] >> FI_MIN) & 1) && (kTypeOps[FI_FLOAT_COMPLEX] >> FI_SUM) & 1);

// The arrays op does not read, as nullptr: neither is touched then.
void drop_unread(int op, const void *&operand, const void *&compare) noexcept
{
	if (op == FI_ATOMIC_READ)
		operand = nullptr;
	if (!is_compare_op(op))
		compare = nullptr;
}

} // namespace

size_t datatype_size(int datatype) noexcept
{
	return static_cast<unsigned>(datatype) < kTypeCount ? kTypeSizes[datatype] : 0;
}

bool valid(Kind kind, int op, int datatype) noexcept
{
	return kind_takes(kind, op) && static_cast<unsigned>(datatype) < kTypeCount &&
	       static_cast<unsigned>(op) < kOpBits && ((kTypeOps[datatype] >> op) & 1);
}

bool combine(int op, int datatype, const void *old_value, const void *operand,
	     const void *compare, void *new_value) noexcept
{
	drop_unread(op, operand, compare);
	return with_type(datatype, false, [&]<typename T>(std::type_identity<T>) {
		const Fn<T> fn = op_fn<T>(op);
		if (!fn)
			return false;
		const auto *old = static_cast<const unsigned char *>(old_value);
		auto *out = static_cast<unsigned char *>(new_value);
		T n;
		if (next(fn, old, static_cast<const unsigned char *>(operand),
			 static_cast<const unsigned char *>(compare), n)) {
			store(out, n);
			return true;
		}
		memmove(out, old, sizeof(T));
		return false;
	});
}

int apply(Kind kind, int op, int datatype, void *target, const void *operand,
	  const void *compare, void *result, size_t count) noexcept
{
	if (!valid(kind, op, datatype) || !target || (!operand && op != FI_ATOMIC_READ) ||
	    (!compare && kind == Kind::Compare) || (!result && kind != Kind::Plain))
		return -FI_EINVAL;
	drop_unread(op, operand, compare);
	with_type(datatype, 0, [&]<typename T>(std::type_identity<T>) {
		const Fn<T> fn = op_fn<T>(op);
		auto *t = static_cast<unsigned char *>(target);
		const auto *x = static_cast<const unsigned char *>(operand);
		const auto *c = static_cast<const unsigned char *>(compare);
		auto *r = static_cast<unsigned char *>(result);
		for (size_t i = 0; i < count; i++) {
			const size_t off = i * sizeof(T);
			if (r)
				memcpy(r + off, t + off, sizeof(T));
			T n;
			if (next(fn, t + off, x ? x + off : nullptr, c ? c + off : nullptr, n))
				store(t + off, n);
		}
		return 0;
	});
	return 0;
}

} // namespace vrma::atomic
