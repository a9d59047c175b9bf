// What the mutation fuzzers of RDM messages share (unit suite rdm_wire's
// mutated_messages_decoded_safely, device suite hostile's hostile_fuzz):
// the values a length, count or 64-bit field is set to, around every limit
// the decoders check (sizes, powers of two, the 2^64 wrap).
#pragma once

#include <cstdint>

namespace wire_mutation {

inline constexpr uint64_t kEdges[] = {0, 1, 2, 7, 8, 31, 32, 63, 64, 4095, 4096, 8192, 8193, 1u << 20,
				      (1u << 20) + 1, 1ull << 31, 1ull << 32, 1ull << 60, 1ull << 61,
				      1ull << 63, ~0ull, ~0ull - 7};

} // namespace wire_mutation
