// Delivery-complete writes sharing one read-back: the plan
// of which writes drop their read-back, which request proves them, and
// when vrma queues a read of its own. Pure decisions, no provider types,
// unit-tested (test/unit/test_dc_chain.cpp); the provider (vrma_post.h
// dc_plan, dc_mark, close_deferred; vrma_cq.cpp tx_wc_marked) holds the
// state and posts.
//
// The scheme: a write with FI_MORE drops its read-back and waits in the
// held chain, unsignaled (DcMark::Deferred; the connection's chain is then
// open). The next operation queues a zero-length read behind them
// (DcMark::Closer, no completion of its own) or, itself such a write,
// carries its own read-back (DcMark::Proof). The read is signaled; its
// completion's retire walk completes the deferred writes, its error fails
// them.
// Hazards: a signaled request between the writes and their read would
// retire their slots before delivery is proven, so no periodic signal may
// fall on them: a write is deferred only while its requests stay within
// the signal period of the last signaled one, and only while the ring and
// the chain keep room for the read (nothing else can reclaim them). A
// credited send queue never defers: the closing read would post without a
// credit of its own.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vrma {

// A send slot's part in a shared read-back (TxSlot::dc).
enum class DcMark : uint8_t {
	None,
	Deferred, // a write whose read-back was dropped: a later read proves it
	Proof,    // a write whose own read-back also proves the deferred ones
	Closer,   // vrma's read that only proves them: no completion of its own
};

namespace dc {

// The operation as the planner sees it.
struct Op {
	bool share;  // TxOp::dc_share: a delivery-complete write, its read-back last
	bool more;   // FI_MORE: more operations follow
	size_t wrs;  // its requests, the read-back included
};

// The send queue as the planner sees it (tx lock held).
struct Queue {
	uint64_t head;          // the sequence the operation's first request gets
	size_t outstanding;     // requests in the ring
	size_t tx_depth;        // requests in flight before -FI_EAGAIN
	uint64_t last_signaled; // sequence of the last signaled request
	uint64_t signal_period; // Conn::signal_period
};

// Whether the operation may drop its read-back at all: a shared write with
// FI_MORE and at least one write before the read, on an uncredited queue.
constexpr bool may_defer(const Op &op, bool credited) noexcept
{
	return op.share && op.more && op.wrs >= 2 && !credited;
}

// Whether the ring keeps room for the writes and the read that will prove
// them (the read takes the slot of the dropped read-back), and no periodic
// signal would fall on the writes: the last of them stays within the
// signal period of the last signaled request.
constexpr bool window_fits(const Op &op, const Queue &q) noexcept
{
	const uint64_t last_write = q.head + op.wrs - 2;
	return q.outstanding + op.wrs <= q.tx_depth && last_write - q.last_signaled < q.signal_period;
}

// An operation that is not deferred, while the chain is `open` (deferred
// writes wait without their read) or not: its mark, and whether vrma's
// closing read is queued before it. A shared write that fits an empty held
// chain (chain_max requests) proves the deferred writes with its own
// read-back; anything else closes them first.
struct Plan {
	DcMark mark;
	bool close_first;
};
constexpr Plan plan_undeferred(const Op &op, bool open, size_t chain_max) noexcept
{
	if (!open)
		return {DcMark::None, false};
	if (op.share && op.wrs <= chain_max)
		return {DcMark::Proof, false};
	return {DcMark::None, true};
}

// The signals of a marked operation of n requests from `first` (every one
// of them unsignaled first), with `prev_signaled` the last signaled
// sequence before it: a deferred one has none and leaves the last signaled
// sequence as it was, opening the chain; a proof signals only its
// read-back, last, and closes the chain.
struct Signals {
	bool signal_last;
	uint64_t last_signaled;
	bool open;
};
constexpr Signals signals_for(DcMark mark, uint64_t first, size_t n, uint64_t prev_signaled) noexcept
{
	if (mark == DcMark::Deferred)
		return {false, prev_signaled, true};
	return {true, first + n - 1, false};
}

// Whether a slot the retire walk passes is a deferred write whose outcome
// this completion decides: the last request of its operation, not the
// completed request itself, and the connection not closing (its
// completions are dropped).
constexpr bool completes_deferred(DcMark mark, bool op_end, bool completed_slot, bool closing) noexcept
{
	return mark == DcMark::Deferred && op_end && !completed_slot && !closing;
}

// Whether a request completes an operation of the application (success or
// error) at its last request: everything but vrma's closing read.
constexpr bool reports(DcMark mark) noexcept
{
	return mark != DcMark::Closer;
}

} // namespace dc
} // namespace vrma
