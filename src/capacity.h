// How deep an endpoint's queues are and how much one work request or
// operation carries, from what the application asked and what the device
// allows: pure arithmetic, no provider types, unit-tested
// (test/unit/test_capacity.cpp). Device limits come in as ibv_device_attr
// gives them (int, possibly 0 or negative on a broken device).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "wire/msg_wire.h"

namespace vrma {

// Scatter/gather entries are built on the stack: at most this many.
inline constexpr size_t kMaxSge = 32;
// Remote segments of one RMA operation (rma_iov_limit).
inline constexpr size_t kMaxRmaIov = 16;
// RMA segments longer than one work request carries are split: endpoints
// without messages offer max_msg_size = this many work requests' worth.
inline constexpr size_t kMaxSplitWr = 64;
// Work requests of one operation: one per remote segment and per split,
// plus the read that makes a write delivery-complete or a commit request,
// plus the event message for a peer with FI_RMA_EVENT.
inline constexpr size_t kMaxOpWr = kMaxRmaIov + kMaxSplitWr + 2;
static_assert(wire::kMaxStagePieces <= kMaxOpWr, "a staged message is one operation");
// Work requests of an injected operation: inject_size is capped at one work
// request's bytes, so an inject never splits (bounce buffers count on it).
inline constexpr size_t kMaxInjectOpWr = kMaxRmaIov + 2;
// Smallest FI_VRMA_MAX_WR_SIZE honoured.
inline constexpr size_t kMinWrBytes = 4096;
// Most staging buffers an endpoint with staged receives keeps posted (the
// default of FI_VRMA_STAGE_BUFFERS): a largest message fits without waiting
// for the application. With fewer, the sender's pieces wait in RNR retries
// until the application's receives free buffers; nothing is lost.
inline constexpr size_t kStageBuffers = wire::kMaxStagePieces;
// At least one send request in this many is signaled (fewer completions to
// poll, yet slots and bounce buffers always come back; see post_send_chain).
inline constexpr uint64_t kSignalPeriod = 16;

// An attribute the application may leave 0: `asked`, else `fallback` (the
// provider's default), never above the device's maximum, which counts as 1
// when the device reports none (0 or negative).
constexpr size_t clamp_to_device(size_t asked, size_t fallback, int device_max) noexcept
{
	const size_t v = asked ? asked : fallback;
	const size_t max = static_cast<size_t>(device_max > 0 ? device_max : 1);
	return v > max ? max : v;
}

// The requests a send queue holds: tx_depth as asked, but never less than
// the longest operation needs (kMaxOpWr, as far as the device allows: one
// of its max_qp_wr is kept for the close sentinel). A smaller queue would
// refuse operations that max_msg_size admits.
constexpr size_t tx_capacity_for(size_t asked, int max_qp_wr) noexcept
{
	const size_t device = max_qp_wr > 1 ? static_cast<size_t>(max_qp_wr) - 1 : 1;
	return std::min(std::max(asked, kMaxOpWr), std::max(asked, device));
}

// Bytes vrma puts in one work request on a port with this max_msg_sz
// (0: unknown, kMinWrBytes), narrowed by FI_VRMA_MAX_WR_SIZE
// (`max_wr_size`; 0: no narrowing) but never below kMinWrBytes unless the
// port itself is smaller.
constexpr size_t wr_bytes_limit(uint32_t port_max_msg_sz, size_t max_wr_size) noexcept
{
	const size_t port = port_max_msg_sz ? port_max_msg_sz : kMinWrBytes;
	if (!max_wr_size || max_wr_size >= port)
		return port;
	return std::max(max_wr_size, std::min(kMinWrBytes, port));
}

// The largest operation of a MSG endpoint, `wr_bytes` being one work
// request's (wr_bytes_limit): with messages, one work request's worth (a
// receive takes one send); RMA alone splits, up to kMaxSplitWr of them.
// Staged receives carry at most wire::kStagedMsgMax.
constexpr size_t msg_max_msg_size(size_t wr_bytes, bool messages, bool staged) noexcept
{
	const size_t size = messages ? wr_bytes : wr_bytes * kMaxSplitWr;
	return staged ? std::min(size, wire::kStagedMsgMax) : size;
}

// Bytes an inject carries on a MSG endpoint: the inline size or
// FI_VRMA_INJECT_SIZE (`configured`), whichever is larger, narrowed to
// what the application asked (0: nothing asked); never more than one work
// request carries (an inject never splits: bounce buffers count on it) nor
// than a staged piece holds beside its header.
constexpr size_t msg_inject_size(size_t inline_size, size_t configured, size_t asked,
				 size_t wr_bytes) noexcept
{
	size_t size = std::max(inline_size, configured);
	if (asked && asked < size)
		size = asked;
	size = std::min(size, wr_bytes);
	return std::min(size, wire::kStageBytes - sizeof(wire::MsgHeader));
}

// Conn::signal_period of a send queue tx_depth deep: kSignalPeriod, or
// half the queue when that is less, so that a full queue always holds a
// signaled request to reclaim it by. 0 (a depth below 2): every request is
// signaled.
constexpr uint64_t signal_period_for(size_t tx_depth) noexcept
{
	return std::min<uint64_t>(tx_depth / 2, kSignalPeriod);
}

// Staging buffers a staged MSG endpoint keeps: one per receive slot, at
// most FI_VRMA_STAGE_BUFFERS (`configured`); a credited receive queue posts
// fewer (own_rx_limit, cq_credits.h).
constexpr size_t staging_buffers_for(size_t rx_depth, size_t configured) noexcept
{
	return std::min(rx_depth, configured);
}

// RDM send buffers an endpoint registers: FI_VRMA_RDM_TX_BUFFERS, below
// kAuxHeldBuffer (0xffffff, TxSlot::aux), which marks a request that holds
// one by its index.
constexpr size_t rdm_tx_buffer_count(size_t configured) noexcept
{
	return std::min<size_t>(configured, 0xfffffe);
}

// Entries asked for an RDM endpoint's CQ: four per receive buffer, at least
// 16384, at most the device's max_cqe.
constexpr size_t rdm_cq_entries(size_t rx_count, size_t max_cqe) noexcept
{
	return std::min<size_t>(max_cqe, std::max<size_t>(4 * rx_count, 16384));
}

// Whether an RDM CQ of `cqe` entries serves `rx_count` receive buffers and
// one peer's send queue beside them (and its close sentinel). The send
// credit is then cqe - rx_count.
constexpr bool rdm_cq_serves(size_t cqe, size_t rx_count, size_t peer_tx_depth) noexcept
{
	return cqe > rx_count + peer_tx_depth + 1;
}

// FI_VRMA_RDM_PEER_TX_SIZE's default. A connection's queue pair holds one
// more request (the close sentinel) and its TxSlot ring as many; devices
// (rxe: the slots a queue of N entries takes are N + 1 rounded up) and
// SlotRing round up to a power of two, so 126 fills 128 where 128 would
// take 256: on rxe 68 KiB of send queue per peer instead of 132.
inline constexpr size_t kRdmPeerTxSizeDefault = 126;
static_assert(std::has_single_bit(kRdmPeerTxSizeDefault + 2), "the queue pair's entries and one fill a power of two");

// Send queue depth of each RDM connection: FI_VRMA_RDM_PEER_TX_SIZE, below
// max_qp_wr, raised to the longest operation (tx_capacity_for).
// Hazard: a device reporting max_qp_wr <= 0 wraps max_qp_wr - 1 to
// SIZE_MAX: the configured size is used as is (a MSG endpoint's queues on
// such a device are 1 deep, clamp_to_device).
constexpr size_t rdm_peer_tx_depth(size_t configured, int max_qp_wr) noexcept
{
	return tx_capacity_for(std::min<size_t>(configured, static_cast<size_t>(max_qp_wr - 1)), max_qp_wr);
}

} // namespace vrma
