// Messaging on MSG endpoints: send/recv and their variants.
#include "vrma_msg_post.h"

namespace vrma {

namespace {

constexpr uint64_t kSendFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
				FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE |
				FI_FENCE | FI_MORE | FI_REMOTE_CQ_DATA;
constexpr uint64_t kRecvFlags = FI_COMPLETION | FI_MORE;

// How a send with FI_DELIVERY_COMPLETE or FI_COMMIT_COMPLETE proves itself.
enum class SendProof : uint8_t {
	None,
	// A zero-length RDMA READ behind the send: RC executes it after the
	// send was placed in the receive the peer's device matched it to (the
	// peer receives into the application's buffers; IBA C9-88: a
	// zero-length request carries no key).
	ReadBack,
	// The peer stages messages and confirms each one marked so, once
	// copied into the matched receive (and made durable: kMsgPersist).
	Confirm,
};

// The proof a send with these flags needs toward this peer, or a negative
// FI_E* code (logged) when none is possible.
ssize_t send_proof(const Ep *ep, uint64_t flags, SendProof &proof)
{
	proof = SendProof::None;
	if (!(flags & (FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE)))
		return 0;
	const bool commit = flags & FI_COMMIT_COMPLETE;
	if (commit && !ep->rma_pmem) {
		VRMA_WARN(FI_LOG_EP_DATA, "send: FI_COMMIT_COMPLETE needs an FI_RMA_PMEM endpoint\n");
		return -FI_EBADFLAGS;
	}
	const uint8_t peer = ep->conn.peer_cm_flags.load(std::memory_order_acquire);
	if (peer & wire::kCmFlagConfirmsMsgs) {
		if (!ep->service) {
			// The answer arrives in a receive: it must be vrma's.
			VRMA_WARN(FI_LOG_EP_DATA, "send: delivery/commit completion toward this peer needs FI_DELIVERY_COMPLETE or FI_COMMIT_COMPLETE in the endpoint's tx_attr->op_flags\n");
			return -FI_EOPNOTSUPP;
		}
		proof = SendProof::Confirm;
		return 0;
	}
	if (ep->peer_rx.load(std::memory_order_acquire) == PeerRx::Staged) {
		VRMA_WARN(FI_LOG_EP_DATA, "send: the peer copies messages out of staging buffers and confirms none (its endpoint was opened without FI_DELIVERY_COMPLETE, FI_COMMIT_COMPLETE, FI_RMA_EVENT or FI_RMA_PMEM)\n");
		return -FI_EOPNOTSUPP;
	}
	if (commit) {
		VRMA_WARN(FI_LOG_EP_DATA, "send: FI_COMMIT_COMPLETE needs a peer that makes messages durable (an endpoint opened with FI_COMMIT_COMPLETE, FI_RMA_PMEM or FI_RMA_EVENT)\n");
		return -FI_EOPNOTSUPP;
	}
	proof = SendProof::ReadBack;
	return 0;
}

// A message to a peer with staged receives (wire::kCmFlagStagedRx): a
// MsgHeader in front of the payload, cut into sends of at most
// wire::kStageBytes, one operation. Small messages go inline with the header
// copied from the stack; injects beyond inline go through a bounce buffer
// with the header; the rest take the header from the slot's header buffer.
// A send proven by the peer's confirmation (SendProof::Confirm) holds a
// pending entry, released if the post fails; the answer completes it.
ssize_t send_staged(Ep *ep, const iovec *iov, void *const *desc, size_t count, uint64_t data,
		    uint64_t flags, void *context, bool inject_call, SendProof proof)
{
	constexpr size_t kHdr = sizeof(wire::MsgHeader);
	ibv_sge seg[kMaxSge + 1]; // [0]: the header
	size_t total;
	const bool inject = inject_call || (flags & FI_INJECT);
	const size_t inline_payload = ep->conn.inline_size > kHdr ? ep->conn.inline_size - kHdr : 0;
	if (ssize_t rc = build_sges(&ep->conn, iov, desc, count, ep->conn.tx_iov_limit, seg + 1, total,
				    inject ? ep->conn.inject_size : inline_payload))
		return rc;
	if (ssize_t rc = check_inject(&ep->conn, inject, total))
		return rc;
	if (total > wire::kStagedMsgMax) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "send of %zu bytes: the peer receives at most %zu (it did not take on FI_RX_CQ_DATA)\n",
			  total, wire::kStagedMsgMax);
		return -FI_EMSGSIZE;
	}
	TxOp op{context, FI_SEND | FI_MSG, total, !inject_call && ep->tx_reports(flags),
		ep->cntr_send, (flags & FI_MORE) != 0};
	if (proof == SendProof::Confirm) {
		const int c = pmem_begin_confirm(ep, context, total, op.cntr, op.want_completion);
		if (c < 0)
			return c;
		op.commit = static_cast<uint32_t>(c); // id + 1
	}
	auto posted = [&](ssize_t rc) {
		if (rc && op.commit)
			pmem_abort_commit(ep, op.commit);
		return rc;
	};
	uint8_t header[kHdr];
	const uint8_t confirm_flags =
		op.commit ? wire::kMsgConfirm | ((flags & FI_COMMIT_COMPLETE) ? wire::kMsgPersist : 0) : 0;
	wire::encode_msg_header(header, total, flags & FI_REMOTE_CQ_DATA, static_cast<uint32_t>(data),
				confirm_flags, static_cast<uint8_t>((op.commit - 1) & 0xff));
	const size_t bytes = kHdr + total;
	ibv_send_wr wrs[wire::kMaxStagePieces];
	const uint32_t fence = (flags & FI_FENCE) ? IBV_SEND_FENCE : 0;
	if (ep->conn.inline_size >= kHdr && total <= inline_payload) {
		seg[0] = {reinterpret_cast<uintptr_t>(header), kHdr, 0};
		wrs[0] = {};
		wrs[0].sg_list = seg;
		wrs[0].num_sge = static_cast<int>(count + 1);
		wrs[0].opcode = IBV_WR_SEND;
		wrs[0].send_flags = IBV_SEND_INLINE | fence;
		return posted(post_send(&ep->conn, wrs[0], op));
	}
	iovec src[kMaxSge + 1];
	if (inject) {
		// One piece (inject_size leaves room for the header), copied.
		src[0] = {header, kHdr};
		std::copy(iov, iov + count, src + 1);
		seg[0] = {0, static_cast<uint32_t>(bytes), 0};
		wrs[0] = {};
		wrs[0].sg_list = seg;
		wrs[0].num_sge = 1;
		wrs[0].opcode = IBV_WR_SEND;
		wrs[0].send_flags = fence;
		op.bounce_src = src;
		op.bounce_count = count + 1;
		return posted(post_send(&ep->conn, wrs[0], op));
	}
	seg[0] = {0, kHdr, 0}; // the slot's header buffer, set when posting
	op.msg_header = header;
	// Pieces of kStageBytes over [header, payload...]; each piece spans at
	// most count + 1 segments, which the QP's max_send_sge allows.
	ibv_sge pieces[kMaxSge + 1 + wire::kMaxStagePieces];
	size_t seg_len[kMaxSge + 1];
	for (size_t i = 0; i <= count; i++)
		seg_len[i] = seg[i].length;
	SgeCursor cursor{seg, seg_len};
	size_t nwr = 0, np = 0;
	for (size_t left = bytes; left;) {
		const size_t want = std::min(left, wire::kStageBytes);
		ibv_send_wr &wr = wrs[nwr++];
		wr = {};
		wr.sg_list = &pieces[np];
		wr.opcode = IBV_WR_SEND;
		wr.num_sge = cursor.take(want, &pieces[np]);
		np += static_cast<size_t>(wr.num_sge);
		left -= want;
	}
	wrs[0].send_flags |= fence;
	return posted(post_send_chain(&ep->conn, wrs, nwr, op));
}

ssize_t send_common(Ep *ep, const iovec *iov, void *const *desc, size_t count, uint64_t data,
		    uint64_t flags, void *context, bool inject_call)
{
	if (ssize_t rc = check_op_flags(flags, kSendFlags, "send"))
		return rc;
	if (ssize_t rc = check_cq_data(flags, data, "send"))
		return rc;
	if (!ep->sends_messages) [[unlikely]] {
		// The peer keeps no receive for a message of this endpoint.
		VRMA_WARN(FI_LOG_EP_DATA, "send on an endpoint without FI_MSG/FI_SEND\n");
		return -FI_EOPNOTSUPP;
	}
	SendProof proof;
	if (ssize_t rc = send_proof(ep, flags, proof))
		return rc;
	if (ep->peer_rx.load(std::memory_order_acquire) == PeerRx::Staged)
		return send_staged(ep, iov, desc, count, data, flags, context, inject_call, proof);
	ibv_sge sge[kMaxSge];
	size_t total;
	const bool inject = inject_call || (flags & FI_INJECT);
	if (ssize_t rc = build_sges(&ep->conn, iov, desc, count, ep->conn.tx_iov_limit, sge, total,
				    inject ? ep->conn.inject_size : ep->conn.inline_size))
		return rc;
	if (ssize_t rc = check_inject(&ep->conn, inject, total))
		return rc;
	// Too large for inline data: the payload goes through a bounce buffer
	// (one piece, filled and addressed when the slot is known).
	const bool bounce = inject && total > ep->conn.inline_size;
	if (bounce)
		sge[0] = {0, static_cast<uint32_t>(total), 0};
	ibv_send_wr wr{};
	wr.sg_list = sge;
	wr.num_sge = bounce ? 1 : static_cast<int>(count);
	wr.opcode = IBV_WR_SEND;
	if (flags & FI_REMOTE_CQ_DATA) {
		wr.opcode = IBV_WR_SEND_WITH_IMM;
		wr.imm_data = htonl(static_cast<uint32_t>(data));
	}
	if (!bounce && total <= ep->conn.inline_size && total)
		wr.send_flags = IBV_SEND_INLINE;
	if (flags & FI_FENCE) // waits for every earlier read (and so every delivery)
		wr.send_flags |= IBV_SEND_FENCE;
	TxOp op{context, FI_SEND | FI_MSG, total, !inject_call && ep->tx_reports(flags),
		ep->cntr_send, (flags & FI_MORE) != 0, bounce ? iov : nullptr, count};
	if (proof != SendProof::ReadBack)
		return post_send(&ep->conn, wr, op);
	ibv_send_wr chain[2];
	chain[0] = wr;
	chain[1] = {};
	chain[1].opcode = IBV_WR_RDMA_READ; // zero-length: no sge, address or key
	op.payload_wrs = 1;
	return post_send_chain(&ep->conn, chain, 2, op);
}

// send_one's long way, out of its inlined path.
[[gnu::noinline, gnu::cold]] ssize_t send_one_slow(Ep *ep, const void *buf, size_t len, void *desc,
						   uint64_t data, uint64_t flags, void *context,
						   bool inject_call) noexcept
{
	const iovec iov{const_cast<void *>(buf), len};
	return send_common(ep, &iov, &desc, 1, data, flags, context, inject_call);
}

// The common case, as rma_one for RMA: one local buffer sent in one work
// request to a peer that receives into its application's buffers
// (PeerRx::AppBuffers: connected, not staged), no fence, no bounce buffer,
// no argument for the long way to refuse. Everything else, and every
// error, goes through send_common.
[[gnu::always_inline]] inline ssize_t send_one(Ep *ep, const void *buf, size_t len, void *desc,
						uint64_t data, uint64_t flags, void *context,
						bool inject_call) noexcept
{
	const bool copied = len <= ep->conn.inline_size; // inline: no key needed
	const bool peer_other = ep->peer_rx.load(std::memory_order_relaxed) != PeerRx::AppBuffers;
	bool slow;
	if (inject_call) // flags are known; the terms are or-ed in one branch
		slow = (!copied) | (!buf & (len != 0)) | peer_other | cq_data_too_wide(flags, data);
	else
		slow = (flags & ~kOneWrOpFlags) || len > ep->conn.max_msg_size || (!buf && len) ||
		       (!desc && !copied && len) || ((flags & FI_INJECT) && !copied) || peer_other ||
		       cq_data_too_wide(flags, data) || desc_misses(desc, buf, len);
	if (slow) [[unlikely]]
		return send_one_slow(ep, buf, len, desc, data, flags, context, inject_call);
	ibv_sge sge;
	ibv_send_wr wr;
	fill_one_wr(wr, sge, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, buf, len, desc, copied, 0, 0, flags,
		    data);
	return post_send_one(&ep->conn, wr, context, FI_SEND | FI_MSG, len,
			     !inject_call && ep->tx_reports(flags), ep->cntr_send, flags & FI_MORE);
}

// The send calls without a flags argument, as rma_fast for RMA: what the
// default flags allow was decided when they were set (EpBase::fast_plain,
// fast_report); a call checks its arguments and the peer's mode and posts
// the connection's prebuilt request (post_fast). Anything else takes
// send_one_slow.
enum class FastSend { Send, SendData, Inject, InjectData };

template <FastSend K, bool Serial>
[[gnu::always_inline]] inline ssize_t send_fast(Ep *ep, const void *buf, size_t len, void *desc,
						 uint64_t data, void *context) noexcept
{
	constexpr bool inject = K == FastSend::Inject || K == FastSend::InjectData;
	constexpr bool imm = K == FastSend::SendData || K == FastSend::InjectData;
	Conn *conn = &ep->conn;
	// Inline (no key needed): not empty, and fits. One compare: an empty
	// length wraps past every inline size.
	const bool copied = len - 1 < conn->inline_size;
	const MrDesc *d = static_cast<const MrDesc *>(desc);
	bool slow = ep->peer_rx.load(std::memory_order_relaxed) != PeerRx::AppBuffers;
	if constexpr (imm)
		slow = slow || (data >> 32) != 0;
	if constexpr (!inject)
		slow = slow || !ep->fast_plain;
	auto post = [&](uint32_t lkey, unsigned send_flags) __attribute__((always_inline)) {
		return post_fast<imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, inject, Serial>(
			conn, reinterpret_cast<uintptr_t>(buf), len, lkey,
			send_flags, 0, 0, htonl(static_cast<uint32_t>(data)),
			inject ? nullptr : context, !inject && ep->fast_report, ep->cntr_send,
			FI_SEND | FI_MSG, 0);
	};
	auto long_way = [&]() __attribute__((always_inline)) {
		const uint64_t flags = (inject ? FI_INJECT : ep->tx_op_flags) | (imm ? FI_REMOTE_CQ_DATA : 0);
		return send_one_slow(ep, buf, len, desc, data, flags, context, inject);
	};
	return post_one_buffer<inject>(slow, copied, d, buf, len, conn->max_msg_size, post, long_way);
}

// A receive on an endpoint that receives no messages (RxMode::ZeroLength,
// RxMode::Service): its receive queue is vrma's.
ssize_t recv_refused(Ep *, const iovec *, void *const *, size_t, uint64_t flags, void *) noexcept
{
	if (ssize_t rc = check_op_flags(flags, kRecvFlags, "recv"))
		return rc;
	VRMA_WARN(FI_LOG_EP_DATA, "recv on an endpoint opened without FI_MSG/FI_RECV\n");
	return -FI_EOPNOTSUPP;
}

// A receive's flags and buffers checked, the buffers as scatter entries
// (total: their bytes). keyless_max (build_sges): 0 when the device
// writes them (each needs its desc), SIZE_MAX when vrma copies into them.
inline ssize_t recv_sges(Ep *ep, const iovec *iov, void *const *desc, size_t count,
			 uint64_t flags, size_t keyless_max, ibv_sge *sge, size_t &total) noexcept
{
	if (ssize_t rc = check_op_flags(flags, kRecvFlags, "recv"))
		return rc;
	return build_sges(&ep->conn, iov, desc, count, ep->rx_iov_limit, sge, total, keyless_max,
			  true);
}

// RxMode::AppBuffers: the application's buffers go to the device.
ssize_t recv_common(Ep *ep, const iovec *iov, void *const *desc, size_t count, uint64_t flags,
		    void *context) noexcept
{
	ibv_sge sge[kMaxSge];
	size_t total;
	if (ssize_t rc = recv_sges(ep, iov, desc, count, flags, 0, sge, total))
		return rc;
	ibv_recv_wr wr{};
	wr.sg_list = sge;
	wr.num_sge = static_cast<int>(count);
	return post_recv(ep, wr, context, count ? iov[0].iov_base : nullptr, total,
			 ep->rx_reports(flags), ep->cntr_recv);
}

// RxMode::Staged: the receive waits in vrma's queue and is filled by copies
// out of the staging buffers (no descriptor needed).
ssize_t recv_staged(Ep *ep, const iovec *iov, void *const *desc, size_t count, uint64_t flags,
		    void *context) noexcept
{
	ibv_sge sge[kMaxSge];
	size_t total;
	if (ssize_t rc = recv_sges(ep, iov, desc, count, flags, SIZE_MAX, sge, total))
		return rc;
	return staged_recv(ep, iov, count, total, context, ep->rx_reports(flags), ep->cntr_recv);
}

// recv_one's long way, out of its inlined path.
[[gnu::noinline, gnu::cold]] ssize_t recv_one_slow(Ep *ep, void *buf, size_t len, void *desc,
						   uint64_t flags, void *context) noexcept
{
	const iovec iov{buf, len};
	return recv_common(ep, &iov, &desc, 1, flags, context);
}

// The common receive, as send_one for sends (RxMode::AppBuffers): one
// non-empty buffer with a desc that covers it, no larger than a message, no
// flag beyond kRecvFlags. Everything else, and every error, goes through
// recv_common.
[[gnu::always_inline]] inline ssize_t recv_one(Ep *ep, void *buf, size_t len, void *desc,
						uint64_t flags, void *context) noexcept
{
	if ((flags & ~kRecvFlags) || !buf || !len || !desc || len > ep->conn.max_msg_size ||
	    !static_cast<const MrDesc *>(desc)->covers(buf, len)) [[unlikely]]
		return recv_one_slow(ep, buf, len, desc, flags, context);
	// An sge holds 32 bits of length: capped as build_sges caps it (an
	// RMA-only endpoint's max_msg_size may exceed 4 GiB).
	ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(std::min<size_t>(len, UINT32_MAX)),
		    static_cast<const MrDesc *>(desc)->key()};
	ibv_recv_wr wr;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return post_recv(ep, wr, context, buf, len, ep->rx_reports(flags), ep->cntr_recv);
}

// The receive entry points, one set per mode over its common path
// (RxMode::AppBuffers: recv_common, whose one-buffer case is recv_one).
using RecvPath = ssize_t (*)(Ep *, const iovec *, void *const *, size_t, uint64_t, void *) noexcept;

template <RecvPath Path>
ssize_t msg_recv(fid_ep *f, void *buf, size_t len, void *desc, fi_addr_t, void *context) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	if constexpr (Path == recv_common) {
		return recv_one(ep, buf, len, desc, ep->rx_op_flags, context);
	} else {
		const iovec iov{buf, len};
		return Path(ep, &iov, &desc, 1, ep->rx_op_flags, context);
	}
}

template <RecvPath Path>
ssize_t msg_recvv(fid_ep *f, const iovec *iov, void **desc, size_t count, fi_addr_t,
		  void *context) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	return Path(ep, iov, desc, count, ep->rx_op_flags, context);
}

template <RecvPath Path> ssize_t msg_recvmsg(fid_ep *f, const fi_msg *msg, uint64_t flags) noexcept
{
	if (!msg) {
		VRMA_WARN(FI_LOG_EP_DATA, "fi_recvmsg: NULL message\n");
		return -FI_EINVAL;
	}
	Ep *ep = static_cast<Ep *>(f);
	if constexpr (Path == recv_common)
		if (msg->iov_count == 1 && msg->msg_iov)
			return recv_one(ep, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len,
					msg->desc ? msg->desc[0] : nullptr, flags, msg->context);
	return Path(ep, msg->msg_iov, msg->desc, msg->iov_count, flags, msg->context);
}

template <bool Serial>
ssize_t msg_send(fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t,
		 void *context) noexcept
{
	return send_fast<FastSend::Send, Serial>(static_cast<Ep *>(f), buf, len, desc, 0, context);
}

ssize_t msg_sendv(fid_ep *f, const iovec *iov, void **desc, size_t count, fi_addr_t,
		  void *context) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	return send_common(ep, iov, desc, count, 0, ep->tx_op_flags, context, false);
}

ssize_t msg_sendmsg(fid_ep *f, const fi_msg *msg, uint64_t flags) noexcept
{
	if (!msg) {
		VRMA_WARN(FI_LOG_EP_DATA, "fi_sendmsg: NULL message\n");
		return -FI_EINVAL;
	}
	if (msg->iov_count == 1 && msg->msg_iov)
		return send_one(static_cast<Ep *>(f), msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len,
				msg->desc ? msg->desc[0] : nullptr, msg->data, flags, msg->context,
				false);
	return send_common(static_cast<Ep *>(f), msg->msg_iov, msg->desc, msg->iov_count,
			   msg->data, flags, msg->context, false);
}

template <bool Serial>
ssize_t msg_inject(fid_ep *f, const void *buf, size_t len, fi_addr_t) noexcept
{
	return send_fast<FastSend::Inject, Serial>(static_cast<Ep *>(f), buf, len, nullptr, 0, nullptr);
}

template <bool Serial>
ssize_t msg_senddata(fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data,
		     fi_addr_t, void *context) noexcept
{
	return send_fast<FastSend::SendData, Serial>(static_cast<Ep *>(f), buf, len, desc, data, context);
}

template <bool Serial>
ssize_t msg_injectdata(fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t) noexcept
{
	return send_fast<FastSend::InjectData, Serial>(static_cast<Ep *>(f), buf, len, nullptr, data,
					       nullptr);
}

} // namespace

// One table per receive mode and transmit serialization
// (Conn::tx_serialized): the sends without a flags argument post without
// testing it.
template <RecvPath Path, bool Serial> constexpr fi_ops_msg msg_ops_receiving() noexcept
{
	return {
		.size = sizeof(fi_ops_msg),
		.recv = msg_recv<Path>,
		.recvv = msg_recvv<Path>,
		.recvmsg = msg_recvmsg<Path>,
		.send = msg_send<Serial>,
		.sendv = msg_sendv,
		.sendmsg = msg_sendmsg,
		.inject = msg_inject<Serial>,
		.senddata = msg_senddata<Serial>,
		.injectdata = msg_injectdata<Serial>,
	};
}
constexpr fi_ops_msg app_msg_ops[2] = {msg_ops_receiving<recv_common, false>(),
				       msg_ops_receiving<recv_common, true>()};
constexpr fi_ops_msg staged_msg_ops[2] = {msg_ops_receiving<recv_staged, false>(),
					  msg_ops_receiving<recv_staged, true>()};
constexpr fi_ops_msg refused_msg_ops[2] = {msg_ops_receiving<recv_refused, false>(),
					   msg_ops_receiving<recv_refused, true>()};

const fi_ops_msg *msg_ops_for(RxMode mode, bool serialized) noexcept
{
	switch (mode) {
	case RxMode::AppBuffers:
		return &app_msg_ops[serialized];
	case RxMode::Staged:
		return &staged_msg_ops[serialized];
	case RxMode::ZeroLength:
	case RxMode::Service:
		break;
	}
	return &refused_msg_ops[serialized];
}

void msg_set_peer_flags(Ep *ep, uint8_t flags) noexcept
{
	ep->conn.peer_cm_flags.store(flags, std::memory_order_release);
	ep->peer_rx.store(flags & wire::kCmFlagStagedRx ? PeerRx::Staged : PeerRx::AppBuffers,
			  std::memory_order_release);
}

} // namespace vrma
