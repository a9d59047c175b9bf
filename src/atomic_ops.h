// libfabric's atomic operations (fi_atomic(3)) on host memory, one element or
// an array at a time: what a target executes on behalf of an initiator, and
// what an initiator's compare-and-swap loop over device atomics computes.
//
// The operations (t: the target's element, x: the operand, c: the compare
// value), as fi_atomic(3) defines them:
//   FI_MIN        if (x < t) t = x           FI_MAX        if (x > t) t = x
//   FI_SUM        t = t + x                  FI_PROD       t = t * x
//   FI_LOR        t = t || x                 FI_LAND       t = t && x
//   FI_LXOR       t = (t && !x) || (!t && x)
//   FI_BOR        t = t | x                  FI_BAND       t = t & x
//   FI_BXOR       t = t ^ x
//   FI_ATOMIC_READ  t unchanged (the fetch returns it)
//   FI_ATOMIC_WRITE t = x
//   FI_CSWAP      if (c == t) t = x          FI_CSWAP_NE   if (c != t) t = x
//   FI_CSWAP_LE   if (c <= t) t = x          FI_CSWAP_LT   if (c <  t) t = x
//   FI_CSWAP_GE   if (c >= t) t = x          FI_CSWAP_GT   if (c >  t) t = x
//   FI_MSWAP      t = (x & c) | (t & ~c)
// Integer SUM and PROD wrap (two's complement), signed types included (the
// 128-bit ones too: modulo 2^128). A
// logical op's result is 1 or 0 in the element's type; a complex value is true
// when either part is non-zero, and a logical result is (1 or 0) + 0i.
// Complex values are equal when both parts are.
//
// Which kind of call takes which op (Kind):
//   Plain   (fi_atomic):         MIN .. BXOR, ATOMIC_WRITE
//   Fetch   (fi_fetch_atomic):   MIN .. BXOR, ATOMIC_WRITE, ATOMIC_READ
//   Compare (fi_compare_atomic): CSWAP .. CSWAP_GT, MSWAP
//
// Which datatypes each op is defined on (valid()), as in libfabric's own
// software atomics (prov/util/src/util_atomic.c: its write, read-write and
// swap handler tables):
//   integers (FI_INT8 .. FI_UINT64, FI_INT128, FI_UINT128): every op
//   FI_FLOAT, FI_DOUBLE, FI_LONG_DOUBLE: all but BOR, BAND, BXOR, MSWAP
//   FI_FLOAT_COMPLEX, FI_DOUBLE_COMPLEX, FI_LONG_DOUBLE_COMPLEX: SUM, PROD,
//     LOR, LAND, LXOR, ATOMIC_READ, ATOMIC_WRITE, CSWAP, CSWAP_NE (no order:
//     no MIN, MAX, CSWAP_LE/LT/GE/GT; no bits: no BOR, BAND, BXOR, MSWAP)
// libfabric gives FI_INT128 and FI_UINT128 the entries of the other integers
// in every table, but fills them only where the compiler has lock-free
// 128-bit __atomic builtins (NULL otherwise); built with __atomic builtins it
// drops the other types wider than 8 bytes, which it cannot update lock-free.
// Here the caller provides mutual exclusion, so every width is done. Anything
// past FI_UINT128 is unknown: size 0, never valid.
//
// Representations are the host's: float, double, long double, and
// std::complex of each (layout-compatible with C's _Complex: real, then
// imaginary); FI_INT128 and FI_UINT128 are the compiler's __int128 and
// unsigned __int128 (16 bytes, two's complement, the host's byte order).
// Every element access is a memcpy, so no array need be aligned.
// A long double written here has its padding bytes zeroed (x87's 80-bit format
// fills 10 of its 16 bytes), so no stale host bytes reach a peer that fetches it.
#pragma once

#include <cstddef>
#include <cstdint>

#include <rdma/fi_domain.h>

namespace vrma::atomic {

enum class Kind : uint8_t {
	Plain = 0,   // fi_atomic: no result
	Fetch = 1,   // fi_fetch_atomic: the old values come back
	Compare = 2, // fi_compare_atomic: a compare array; the old values come back
};

inline constexpr bool is_integer(int datatype) noexcept
{
	return (datatype >= FI_INT8 && datatype <= FI_UINT64) || datatype == FI_INT128 ||
	       datatype == FI_UINT128;
}
inline constexpr bool is_complex(int datatype) noexcept
{
	return datatype == FI_FLOAT_COMPLEX || datatype == FI_DOUBLE_COMPLEX ||
	       datatype == FI_LONG_DOUBLE_COMPLEX;
}
inline constexpr bool is_compare_op(int op) noexcept
{
	return op >= FI_CSWAP && op <= FI_MSWAP;
}

// Whether a call of that kind takes op at all (whatever the datatype).
inline constexpr bool kind_takes(Kind kind, int op) noexcept
{
	switch (kind) {
	case Kind::Plain:
		return op >= FI_MIN && op <= FI_ATOMIC_WRITE && op != FI_ATOMIC_READ;
	case Kind::Fetch:
		return op >= FI_MIN && op <= FI_ATOMIC_WRITE;
	case Kind::Compare:
		return is_compare_op(op);
	}
	return false;
}

// Bytes of one element of an enum fi_datatype; 0 for an unknown one.
size_t datatype_size(int datatype) noexcept;

// Whether op is defined on datatype in a call of that kind (the tables above).
bool valid(Kind kind, int op, int datatype) noexcept;

// One element: the value the target holds after op, given old_value (and
// operand, compare as the op needs them: operand is not read for
// FI_ATOMIC_READ, compare only by the compare ops; either may then be
// nullptr). Returns true with the new value in new_value; false when the op
// leaves the target as it was and it must not be written: FI_ATOMIC_READ, a
// compare op whose condition fails, MIN or MAX whose operand does not win.
// new_value then holds a byte copy of old_value. A compare-and-swap loop
// stops on false: the old value it read is the result. new_value may be
// old_value; no other two may overlap. False, new_value untouched, for an op
// not defined on the datatype in any kind.
bool combine(int op, int datatype, const void *old_value, const void *operand,
	     const void *compare, void *new_value) noexcept;

// Applies op to the count elements at target, element by element as combine
// does: result (Fetch and Compare: required; Plain: may be nullptr) receives
// each element's old value; operand is required except for FI_ATOMIC_READ;
// compare is required for Compare and not read otherwise. No two arrays may
// overlap. Returns 0, or -FI_EINVAL (nothing touched) when !valid(kind, op,
// datatype) or a required array is nullptr. Plain code: the caller keeps
// everyone else off target meanwhile.
int apply(Kind kind, int op, int datatype, void *target, const void *operand,
	  const void *compare, void *result, size_t count) noexcept;

} // namespace vrma::atomic
