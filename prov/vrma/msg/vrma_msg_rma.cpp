// RMA on MSG endpoints: RDMA READ / WRITE / WRITE_WITH_IMM.
#include "vrma_msg_ep.h"
#include "vrma_rma.h"

namespace vrma {

namespace {

constexpr uint64_t kRmaFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
			       FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE |
			       FI_FENCE | FI_MORE | FI_REMOTE_CQ_DATA;

ssize_t rma_common(Ep *ep, ibv_wr_opcode opcode, const iovec *iov, void *const *desc,
		   size_t count, const fi_rma_iov *rma_iov, size_t rma_count, uint64_t data,
		   uint64_t flags, void *context, bool inject_call)
{
	if (ssize_t rc = check_op_flags(flags, kRmaFlags, "RMA"))
		return rc;
	if (ssize_t rc = check_cq_data(flags, data, "RMA write"))
		return rc;
	size_t remote_total = 0;
	if (ssize_t rc = rma_check_remote(rma_iov, rma_count, UINT32_MAX, remote_total))
		return rc;
	const bool is_read = opcode == IBV_WR_RDMA_READ;
	if (is_read && (inject_call || (flags & (FI_INJECT | FI_REMOTE_CQ_DATA)))) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RMA read cannot be injected or carry CQ data\n");
		return -FI_EINVAL;
	}
	// FI_COMMIT_COMPLETE: the method was agreed when connecting.
	const bool commit = !is_read && (flags & FI_COMMIT_COMPLETE);
	int method = FI_VRMA_COMMIT_NONE;
	if (commit) [[unlikely]] {
		if (!ep->rma_pmem) {
			VRMA_WARN(FI_LOG_EP_DATA, "FI_COMMIT_COMPLETE needs an FI_RMA_PMEM endpoint\n");
			return -FI_EBADFLAGS;
		}
		method = pmem_commit_method(ep);
		if (method == FI_VRMA_COMMIT_NONE &&
		    ep->conn.state.load(std::memory_order_acquire) == EpState::Connected) {
			VRMA_WARN(FI_LOG_EP_DATA, "FI_COMMIT_COMPLETE: the peer offers no way to make writes durable (not an FI_RMA_PMEM endpoint)\n");
			return -FI_EOPNOTSUPP;
		}
	}
	// Remote CQ data consumes a receive at the target: refused when that
	// would be one of the application's (it took on no FI_RX_CQ_DATA).
	if ((flags & FI_REMOTE_CQ_DATA) && !peer_has(ep->conn, wire::kCmFlagTakesCqData) &&
	    ep->conn.state.load(std::memory_order_acquire) == EpState::Connected) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "FI_REMOTE_CQ_DATA: the peer receives messages and did not take on FI_RX_CQ_DATA; the write would consume one of its receives\n");
		return -FI_EOPNOTSUPP;
	}
	// A fence waits for earlier reads on the QP, not for commit answers:
	// hold a fenced operation back while commits are unanswered.
	if ((flags & FI_FENCE) && ep->service && pmem_commits_pending(ep)) [[unlikely]]
		return -FI_EAGAIN;
	ibv_sge local[kMaxSge];
	size_t total;
	const bool inject = inject_call || (flags & FI_INJECT);
	const size_t keyless = is_read ? 0 : inject ? ep->conn.inject_size : ep->conn.inline_size;
	if (ssize_t rc = build_sges(&ep->conn, iov, desc, count, ep->conn.tx_iov_limit, local, total, keyless))
		return rc;
	if (ssize_t rc = check_inject(&ep->conn, inject, total))
		return rc;
	// Too large for inline data: the payload goes through a bounce buffer;
	// the pieces below are offsets into it until the slot is known.
	const bool bounce = inject && total > ep->conn.inline_size;
	if (bounce)
		local[0] = {0, static_cast<uint32_t>(total), 0};
	// The pieces' lengths, unclipped: a local segment may exceed the 32
	// bits of an sge when it is split over several work requests.
	size_t local_len[kMaxSge];
	for (size_t i = 0; i < (bounce ? 1 : count); i++)
		local_len[i] = bounce ? total : iov[i].iov_len;
	if (remote_total < total) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RMA: %zu local bytes but the remote segments hold %zu\n",
			  total, remote_total);
		return -FI_EINVAL;
	}
	RmaWrs w;
	if (ssize_t rc = rma_build_payload(&ep->conn, opcode, local, local_len, total, rma_iov,
					   rma_count, w))
		return rc;
	if (flags & FI_REMOTE_CQ_DATA) {
		// The target hears of the operation once, after all of its data.
		w.wrs[w.nwr - 1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		w.wrs[w.nwr - 1].imm_data = htonl(static_cast<uint32_t>(data));
	}
	// Proof of placement: a read-back for delivery, and for commit when the
	// target's writes land in its persistence domain. A target commit
	// implies delivery: its request arrives after the writes.
	const bool target_commit = commit && method == FI_VRMA_COMMIT_TARGET && w.nranges;
	const bool read_back = ((flags & FI_DELIVERY_COMPLETE) && !target_commit) ||
			       (commit && method == FI_VRMA_COMMIT_DIRECT_WRITE);
	const size_t read_len = commit ? kCommitReadLen : 0;
	const size_t before_read = w.nwr;
	if (!is_read && read_back && !rma_add_read_back(&ep->conn, w, read_len))
		return -FI_ENOMEM;
	if (flags & FI_FENCE) // waits for every earlier read (and so every delivery)
		w.wrs[0].send_flags |= IBV_SEND_FENCE;
	TxOp op{context, FI_RMA | (is_read ? FI_READ : FI_WRITE), total,
		!inject_call && ep->tx_reports(flags), is_read ? ep->cntr_read : ep->cntr_write,
		(flags & FI_MORE) != 0, bounce ? iov : nullptr, count};
	op.payload_wrs = w.payload_wrs;
	// A delivery read-back, last: FI_MORE chains share one (post_send_chain).
	op.dc_share = !commit && w.nwr > before_read;
	if (target_commit) {
		// The request follows the writes; the target's answer, not the
		// request's completion, completes the operation.
		ibv_sge &req = w.sges[w.nsge++];
		int c = pmem_begin_commit(ep, w.ranges, w.nranges, context, total, op.cntr,
					  op.want_completion, req);
		if (c < 0)
			return c;
		ibv_send_wr &send = w.wrs[w.nwr++];
		send = {};
		send.sg_list = &req;
		send.num_sge = 1;
		send.opcode = IBV_WR_SEND;
		if (req.length <= ep->conn.inline_size)
			send.send_flags = IBV_SEND_INLINE;
		op.commit = static_cast<uint32_t>(c);
	}
	uint8_t event[wire::kRmaEventMax];
	if (peer_has(ep->conn, wire::kCmFlagRmaEvents)) [[unlikely]] {
		// The target counts the operation when this arrives, after the
		// operation's data (RC keeps the order): the keys it touched.
		uint64_t keys64[kMaxRmaIov];
		uint32_t keys[kMaxRmaIov];
		const size_t nkeys = w.keys(keys64);
		for (size_t i = 0; i < nkeys; i++)
			keys[i] = static_cast<uint32_t>(keys64[i]);
		op.event = event;
		op.dc_share = false; // the event send follows the read-back
		op.event_len = wire::encode_rma_event(event, is_read ? wire::kEventRead : wire::kEventWrite,
						      keys, nkeys);
		rma_add_event_send(w);
	}
	ssize_t rc = post_send_chain(&ep->conn, w.wrs, w.nwr, op);
	if (rc && op.commit)
		pmem_abort_commit(ep, op.commit);
	return rc;
}

// rma_one's long way, out of its inlined path.
[[gnu::noinline, gnu::cold]] ssize_t rma_one_slow(Ep *ep, ibv_wr_opcode opcode, const void *buf,
						  size_t len, void *desc, uint64_t addr,
						  uint64_t key, uint64_t data, uint64_t flags,
						  void *context, bool inject_call) noexcept
{
	const iovec iov{const_cast<void *>(buf), len};
	const fi_rma_iov r{addr, len, key};
	return rma_common(ep, opcode, &iov, &desc, 1, &r, 1, data, flags, context, inject_call);
}

// The common case: one local buffer, one remote segment that one work
// request carries, and no flag that adds requests (delivery or commit
// completion, fence) or a check the long way makes (bad arguments,
// a bounce buffer, an event for the peer). Everything else, and every
// error, goes through rma_common.
[[gnu::always_inline]] inline ssize_t rma_one(Ep *ep, ibv_wr_opcode opcode, const void *buf,
					       size_t len, void *desc, uint64_t addr, uint64_t key,
					       uint64_t data, uint64_t flags, void *context,
					       bool inject_call) noexcept
{
	const bool is_read = opcode == IBV_WR_RDMA_READ;
	const bool inject = inject_call || (flags & FI_INJECT);
	const uint8_t peer = ep->conn.peer_cm_flags.load(std::memory_order_relaxed);
	const bool copied = !is_read && len <= ep->conn.inline_size; // inline: no key needed
	bool slow;
	if (inject_call) {
		// fi_inject_write(data): flags are known, it must go inline
		// (inline_size <= max_wr_bytes). The terms are or-ed without
		// short-circuit: one branch for all of them.
		slow = !copied | (key > UINT32_MAX) | (!buf & (len != 0)) |
		       ((peer & wire::kCmFlagRmaEvents) != 0) | cq_data_too_wide(flags, data) |
		       (((flags & FI_REMOTE_CQ_DATA) != 0) & !(peer & wire::kCmFlagTakesCqData));
	} else {
		slow = (flags & ~kOneWrOpFlags) || key > UINT32_MAX || len > ep->conn.max_wr_bytes ||
		       (!buf && len) || (!desc && !copied && len) || (inject && !copied) ||
		       (is_read && (inject || (flags & FI_REMOTE_CQ_DATA))) ||
		       (peer & wire::kCmFlagRmaEvents) || cq_data_too_wide(flags, data) ||
		       ((flags & FI_REMOTE_CQ_DATA) && !(peer & wire::kCmFlagTakesCqData)) ||
		       desc_misses(desc, buf, len);
	}
	if (slow) [[unlikely]]
		return rma_one_slow(ep, opcode, buf, len, desc, addr, key, data, flags, context,
				    inject_call);
	ibv_sge sge;
	ibv_send_wr wr;
	fill_one_wr(wr, sge, opcode, IBV_WR_RDMA_WRITE_WITH_IMM, buf, len, desc, copied, addr, key,
		    flags, data);
	return post_send_one(&ep->conn, wr, context, FI_RMA | (is_read ? FI_READ : FI_WRITE), len,
			     !inject_call && ep->tx_reports(flags),
			     is_read ? ep->cntr_read : ep->cntr_write, flags & FI_MORE);
}

// The entry points whose flags are known (the endpoint's defaults, or
// FI_INJECT): their fast path, rma_fast.
enum class FastRma { Read, Write, WriteData, Inject, InjectData };

// rma_one for the calls without a flags argument: what the default flags
// allow was decided when they were set (EpBase::fast_plain, fast_report),
// so a call checks its arguments and the peer, fills the connection's
// prebuilt request and posts it (post_fast). Anything else takes
// rma_one_slow, which decides again from the flags.
template <FastRma K, bool Serial>
[[gnu::always_inline]] inline ssize_t rma_fast(Ep *ep, const void *buf, size_t len, void *desc,
					       uint64_t addr, uint64_t key, uint64_t data,
					       void *context) noexcept
{
	constexpr bool is_read = K == FastRma::Read;
	constexpr bool inject = K == FastRma::Inject || K == FastRma::InjectData;
	constexpr bool imm = K == FastRma::WriteData || K == FastRma::InjectData;
	Conn *conn = &ep->conn;
	const uint8_t peer = conn->peer_cm_flags.load(std::memory_order_relaxed);
	// Inline (no key needed): not empty, and fits. One compare: an empty
	// length wraps past every inline size.
	const bool copied = !is_read && len - 1 < conn->inline_size;
	const MrDesc *d = static_cast<const MrDesc *>(desc);
	// One branch per term, each to the long way: cheaper than or-ing
	// flags where every term is a load and a test.
	bool slow = (key > UINT32_MAX) || (peer & wire::kCmFlagRmaEvents);
	if constexpr (imm)
		slow = slow || (data >> 32) != 0 || !(peer & wire::kCmFlagTakesCqData);
	if constexpr (!inject)
		slow = slow || !ep->fast_plain;
	constexpr ibv_wr_opcode opcode = is_read ? IBV_WR_RDMA_READ
					 : imm  ? IBV_WR_RDMA_WRITE_WITH_IMM
						: IBV_WR_RDMA_WRITE;
	auto post = [&](uint32_t lkey, unsigned send_flags) __attribute__((always_inline)) {
		return post_fast<opcode, inject, Serial>(conn, reinterpret_cast<uintptr_t>(buf), len, lkey,
					 send_flags, addr,
					 static_cast<uint32_t>(key), htonl(static_cast<uint32_t>(data)),
					 inject ? nullptr : context, !inject && ep->fast_report,
					 is_read ? ep->cntr_read : ep->cntr_write,
					 FI_RMA | (is_read ? FI_READ : FI_WRITE), 0);
	};
	auto long_way = [&]() __attribute__((always_inline)) {
		const uint64_t flags = (inject ? FI_INJECT : ep->tx_op_flags) | (imm ? FI_REMOTE_CQ_DATA : 0);
		return rma_one_slow(ep, is_read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE, buf, len, desc,
				    addr, key, data, flags, context, inject);
	};
	return post_one_buffer<inject>(slow, copied, d, buf, len, conn->max_wr_bytes, post, long_way);
}

// One local buffer and one remote segment that holds it.
inline bool one_segment(const fi_msg_rma *msg) noexcept
{
	return msg->iov_count == 1 && msg->rma_iov_count == 1 && msg->msg_iov && msg->rma_iov &&
	       msg->rma_iov[0].len >= msg->msg_iov[0].iov_len;
}

template <bool Serial>
ssize_t rma_read(fid_ep *f, void *buf, size_t len, void *desc, fi_addr_t, uint64_t addr,
		 uint64_t key, void *context) noexcept
{
	return rma_fast<FastRma::Read, Serial>(static_cast<Ep *>(f), buf, len, desc, addr, key, 0, context);
}

ssize_t rma_readv(fid_ep *f, const iovec *iov, void **desc, size_t count, fi_addr_t,
		  uint64_t addr, uint64_t key, void *context) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	const fi_rma_iov r{addr, SIZE_MAX, key};
	return rma_common(ep, IBV_WR_RDMA_READ, iov, desc, count, &r, 1, 0, ep->tx_op_flags,
			  context, false);
}

ssize_t rma_readmsg(fid_ep *f, const fi_msg_rma *msg, uint64_t flags) noexcept
{
	if (!msg) {
		VRMA_WARN(FI_LOG_EP_DATA, "fi_readmsg: NULL message\n");
		return -FI_EINVAL;
	}
	if (one_segment(msg))
		return rma_one(static_cast<Ep *>(f), IBV_WR_RDMA_READ, msg->msg_iov[0].iov_base,
			       msg->msg_iov[0].iov_len, msg->desc ? msg->desc[0] : nullptr,
			       msg->rma_iov[0].addr, msg->rma_iov[0].key, 0, flags, msg->context,
			       false);
	return rma_common(static_cast<Ep *>(f), IBV_WR_RDMA_READ, msg->msg_iov, msg->desc,
			  msg->iov_count, msg->rma_iov, msg->rma_iov_count, 0, flags, msg->context,
			  false);
}

template <bool Serial>
ssize_t rma_write(fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t, uint64_t addr,
		  uint64_t key, void *context) noexcept
{
	return rma_fast<FastRma::Write, Serial>(static_cast<Ep *>(f), buf, len, desc, addr, key, 0, context);
}

ssize_t rma_writev(fid_ep *f, const iovec *iov, void **desc, size_t count, fi_addr_t,
		   uint64_t addr, uint64_t key, void *context) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	const fi_rma_iov r{addr, SIZE_MAX, key};
	return rma_common(ep, IBV_WR_RDMA_WRITE, iov, desc, count, &r, 1, 0, ep->tx_op_flags,
			  context, false);
}

ssize_t rma_writemsg(fid_ep *f, const fi_msg_rma *msg, uint64_t flags) noexcept
{
	if (!msg) {
		VRMA_WARN(FI_LOG_EP_DATA, "fi_writemsg: NULL message\n");
		return -FI_EINVAL;
	}
	if (one_segment(msg))
		return rma_one(static_cast<Ep *>(f), IBV_WR_RDMA_WRITE, msg->msg_iov[0].iov_base,
			       msg->msg_iov[0].iov_len, msg->desc ? msg->desc[0] : nullptr,
			       msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->data, flags,
			       msg->context, false);
	return rma_common(static_cast<Ep *>(f), IBV_WR_RDMA_WRITE, msg->msg_iov, msg->desc,
			  msg->iov_count, msg->rma_iov, msg->rma_iov_count, msg->data, flags,
			  msg->context, false);
}

template <bool Serial>
ssize_t rma_inject(fid_ep *f, const void *buf, size_t len, fi_addr_t, uint64_t addr,
		   uint64_t key) noexcept
{
	return rma_fast<FastRma::Inject, Serial>(static_cast<Ep *>(f), buf, len, nullptr, addr, key, 0,
					 nullptr);
}

template <bool Serial>
ssize_t rma_writedata(fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data,
		      fi_addr_t, uint64_t addr, uint64_t key, void *context) noexcept
{
	return rma_fast<FastRma::WriteData, Serial>(static_cast<Ep *>(f), buf, len, desc, addr, key, data,
					    context);
}

template <bool Serial>
ssize_t rma_injectdata(fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t,
		       uint64_t addr, uint64_t key) noexcept
{
	return rma_fast<FastRma::InjectData, Serial>(static_cast<Ep *>(f), buf, len, nullptr, addr, key,
					     data, nullptr);
}

} // namespace

namespace {

// One table per transmit serialization (Conn::tx_serialized): the calls
// without a flags argument post without testing it.
template <bool Serial> constexpr fi_ops_rma rma_ops_serialized() noexcept
{
	return {
		.size = sizeof(fi_ops_rma),
		.read = rma_read<Serial>,
		.readv = rma_readv,
		.readmsg = rma_readmsg,
		.write = rma_write<Serial>,
		.writev = rma_writev,
		.writemsg = rma_writemsg,
		.inject = rma_inject<Serial>,
		.writedata = rma_writedata<Serial>,
		.injectdata = rma_injectdata<Serial>,
	};
}
constexpr fi_ops_rma locked_rma_ops = rma_ops_serialized<false>();
constexpr fi_ops_rma serial_rma_ops = rma_ops_serialized<true>();

} // namespace

const fi_ops_rma *rma_ops_for(bool serialized) noexcept
{
	return serialized ? &serial_rma_ops : &locked_rma_ops;
}

} // namespace vrma
