// What both endpoint kinds' commit protocols (FI_COMMIT_COMPLETE) share: a
// target's verdict on a commit request and the range a request names, in
// decoded host form. Each protocol has its own encoding: msg_wire.h (MSG: a
// 32-bit device key per range, the status in an immediate's high byte),
// rdm_wire.h (RDM: a 64-bit key, the status in the CommitAnswer's header).
#pragma once

#include <cstddef>
#include <cstdint>

namespace vrma::wire {

// A commit request's outcome at the target. The values are on the wire
// (both protocols): never renumber.
enum class CommitStatus : uint8_t {
	Ok = 0,
	AccessError = 1,   // a range outside every region open for remote writes
	PersistFailed = 2, // the target could not make a range durable (msync)
	Malformed = 3,     // the request did not decode
};
inline constexpr uint8_t kCommitStatusMax = 3;

// Ranges one commit request names (an RMA operation's remote segments).
inline constexpr size_t kMaxCommitRanges = 16;

// One range a commit makes durable: `len` bytes at `addr` of the target's
// region `key` (MSG: a device rkey, at most 32 bits).
struct CommitRange {
	uint64_t addr = 0;
	uint64_t len = 0;
	uint64_t key = 0;
};

} // namespace vrma::wire
