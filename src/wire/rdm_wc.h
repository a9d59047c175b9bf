// What a work completion of an RDM endpoint's queue pairs may be, checked
// before anything acts on it.
//
// Receives: an RDM endpoint's peers only ever send (IBV_WR_SEND, no
// immediate: remote CQ data travels in the message header). A peer that
// does anything else to a receive buffer is not speaking vrma's protocol:
//  - an RDMA write with immediate consumes a receive buffer without writing
//    it (IBV_WC_RECV_RDMA_WITH_IMM); decoding that buffer would replay its
//    previous contents, another peer's message;
//  - a send with immediate (IBV_WC_RECV with IBV_WC_WITH_IMM) is no message
//    vrma's RDM protocol has;
//  - byte_len can never exceed the posted buffer on a conforming device; it
//    is what every decoder is given as the message's length, so it is
//    bounded here rather than trusted.
// Send-queue completions: a successful completion names the request it
// completes (its slot); its opcode must be one that kind of request posts.
//
// Only a successful completion's opcode is defined (verbs leaves it
// unspecified with an error status): callers check status first.
#pragma once

#include <cstddef>
#include <cstdint>

#include <infiniband/verbs.h>

namespace vrma::rdm {

enum class RecvWcCheck : uint8_t {
	Ok = 0,
	Opcode = 1, // not a plain send: nothing to decode
	Length = 2, // more bytes than the buffer holds
};

// A successful receive completion of byte_len bytes into a buffer of
// buf_bytes: Ok only for IBV_WC_RECV without an immediate and byte_len
// within the buffer.
inline RecvWcCheck check_recv_wc(ibv_wc_opcode opcode, unsigned wc_flags, uint32_t byte_len,
				 size_t buf_bytes) noexcept
{
	if (opcode != IBV_WC_RECV || (wc_flags & IBV_WC_WITH_IMM)) [[unlikely]]
		return RecvWcCheck::Opcode;
	if (byte_len > buf_bytes) [[unlikely]]
		return RecvWcCheck::Length;
	return RecvWcCheck::Ok;
}

// A set of send-queue completion opcodes (IBV_WC_SEND .. IBV_WC_FETCH_ADD
// and the others below IBV_WC_RECV), one bit each.
inline constexpr uint32_t wc_bit(ibv_wc_opcode op) noexcept
{
	return uint32_t(1) << static_cast<unsigned>(op);
}
inline constexpr uint32_t kWcSend = wc_bit(IBV_WC_SEND);
inline constexpr uint32_t kWcWrite = wc_bit(IBV_WC_RDMA_WRITE);
inline constexpr uint32_t kWcRead = wc_bit(IBV_WC_RDMA_READ);
inline constexpr uint32_t kWcAtomics = wc_bit(IBV_WC_COMP_SWAP) | wc_bit(IBV_WC_FETCH_ADD);
// Everything an RDM endpoint posts on a send queue.
inline constexpr uint32_t kWcRdmPosted = kWcSend | kWcWrite | kWcRead | kWcAtomics;

// Whether a successful send-queue completion's opcode is in `allowed`
// (receive opcodes, IBV_WC_RECV and up, never are).
inline bool send_wc_allowed(ibv_wc_opcode opcode, uint32_t allowed) noexcept
{
	const unsigned op = static_cast<unsigned>(opcode);
	return op < 32 && ((allowed >> op) & 1) != 0;
}

} // namespace vrma::rdm
