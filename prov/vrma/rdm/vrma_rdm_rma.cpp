// RMA on RDM endpoints: the nine fi_rma calls to any address of the AV, over
// the peer's connection (made on demand), built by the RMA core MSG
// endpoints use too (vrma_rma.h).
//
// Contracts:
//  - every call runs under RdmEp::lock;
//  - keys are the target's device rkeys and addresses virtual ones
//    (kRdmRmaMrMode), or, in a domain with scalable keys, the application's
//    keys and addresses relative to the region, translated from what the
//    target publishes (vrma_rdm_keys.cpp);
//  - local buffers need no registration: a desc is used when given, data of
//    inline size is copied into the request, injects beyond it go through
//    the endpoint's send buffers, anything else is registered through
//    the domain's registration cache and held by an RdmRmaOp until the
//    operation's last request completed;
//  - the target hears of an operation only when it must: an RmaEvent send
//    follows the data on the same connection when the operation carries
//    remote CQ data (64 bits: cq_data_size 8) or the target counts RMA
//    events (kConnFlagRmaEvents). RC delivers it after the data was placed
//    (writes) or read (reads);
//  - FI_COMMIT_COMPLETE (an FI_RMA_PMEM endpoint's writes): to a target
//    that answers commits (kConnFlagCommitService), a CommitRequest follows
//    the data instead of the RmaEvent and stands for it; the target's
//    CommitAnswer, once the ranges are durable, completes the operation,
//    which waits in RdmPeer::waiting until then. To a target whose writes
//    land in its persistence domain (kConnFlagDirectWritePmem), a
//    read-back proves them, as for FI_DELIVERY_COMPLETE. A target serves
//    requests in its progress: with FI_PROGRESS_MANUAL, when it calls in;
//  - an accepted operation ends with exactly one completion or error entry
//    (or count), through its last request's completion or the flush of its
//    connection.
#include "vrma_rdm.h"
#include "vrma_rma.h"

#include <optional>

namespace vrma {

namespace {

constexpr uint64_t kRdmRmaFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
				  FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE |
				  FI_FENCE | FI_MORE | FI_REMOTE_CQ_DATA;

static_assert(kMaxRmaIov <= rdm::kMaxRmaEventKeys, "an event names every key of an operation");
static_assert(kRdmIovLimit < kMaxSge, "the local pieces fit the core's arrays");
static_assert(kMaxRmaIov <= rdm::kMaxCommitRanges, "a commit request names every range written");

// The checks that need no lock: flags, the local and remote segments and
// their lengths. total is the local byte count.
ssize_t rdm_rma_check(RdmEp *ep, bool is_read, const iovec *iov, size_t count,
		      const fi_rma_iov *rma_iov, size_t rma_count, uint64_t flags, bool inject,
		      size_t &total)
{
	if (ssize_t rc = check_op_flags(flags, kRdmRmaFlags, "RDM RMA"))
		return rc;
	if ((flags & FI_COMMIT_COMPLETE) && !is_read && !ep->rma_pmem) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "FI_COMMIT_COMPLETE needs an FI_RMA_PMEM endpoint\n");
		return -FI_EBADFLAGS;
	}
	if (is_read && (inject || (flags & FI_REMOTE_CQ_DATA))) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RMA read cannot be injected or carry CQ data\n");
		return -FI_EINVAL;
	}
	size_t remote_total = 0;
	if (ssize_t rc = rma_check_remote(rma_iov, rma_count, UINT64_MAX, remote_total))
		return rc;
	if (!ep->scalable_keys) {
		// Provider keys: the device's (32 bits), or on-demand ones.
		for (size_t r = 0; r < rma_count; r++)
			if (rma_iov[r].key > UINT32_MAX && !(rma_iov[r].key & kOnDemandKeyBit)) [[unlikely]] {
				VRMA_WARN(FI_LOG_EP_DATA, "RMA: key 0x%llx is no key of a vrma region\n",
					  static_cast<unsigned long long>(rma_iov[r].key));
				return -FI_EINVAL;
			}
	}
	if (count > kRdmIovLimit || (count && !iov)) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM RMA: %zu local segments; iov_limit is %zu\n", count,
			  kRdmIovLimit);
		return -FI_EINVAL;
	}
	total = 0;
	for (size_t i = 0; i < count; i++) {
		if (!iov[i].iov_base && iov[i].iov_len) [[unlikely]] {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM RMA: NULL buffer of length %zu\n", iov[i].iov_len);
			return -FI_EINVAL;
		}
		if (iov[i].iov_len > kRdmMaxMsg - total) [[unlikely]] {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM RMA: more than max_msg_size %zu bytes\n", kRdmMaxMsg);
			return -FI_EMSGSIZE;
		}
		total += iov[i].iov_len;
	}
	if (inject && total > ep->inject_size) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM RMA inject of %zu bytes exceeds inject_size %zu\n", total,
			  ep->inject_size);
		return -FI_EINVAL;
	}
	if (remote_total < total) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RMA: %zu local bytes but the remote segments hold %zu\n",
			  total, remote_total);
		return -FI_EINVAL;
	}
	return 0;
}

// A desc the device may use for this buffer: given, allowing the access
// (a read's target needs local write) and covering [buf, buf + len).
[[gnu::always_inline]] inline bool rdm_desc_usable(const MrDesc *md, bool is_read, const void *buf,
						   size_t len) noexcept
{
	return md && (!is_read || md->local_write.load(std::memory_order_relaxed)) && md->covers(buf, len);
}

ssize_t rma_long(RdmEp *ep, ibv_wr_opcode opcode, const iovec *iov, void *const *desc,
		 size_t count, fi_addr_t dest, const fi_rma_iov *rma_iov, size_t rma_count,
		 uint64_t data, uint64_t flags, void *context, bool inject_call)
{
	const bool is_read = opcode == IBV_WR_RDMA_READ;
	const bool inject = inject_call || (flags & FI_INJECT);
	size_t total = 0;
	if (ssize_t rc = rdm_rma_check(ep, is_read, iov, count, rma_iov, rma_count, flags, inject,
				       total))
		return rc;
	const uint64_t comp_flags = FI_RMA | (is_read ? FI_READ : FI_WRITE);
	const bool report = !inject_call && ep->tx_reports(flags);
	std::lock_guard guard(ep->lock);
	Cntr *cntr = is_read ? ep->cntr_read : ep->cntr_write;
	RdmPeer *peer;
	Conn *conn = nullptr;
	if (int rc = rdm_tx_conn(ep, dest, {context, comp_flags, total, report, cntr}, flags & FI_MORE,
				 peer, conn)) [[unlikely]]
		return rc > 0 ? 0 : rc;
	if (conn->peer_flags_pending) [[unlikely]]
		return -FI_EAGAIN; // the progress engine handles the ESTABLISHED event soon
	if ((flags & FI_FENCE) && rdm_fence_blocked(peer, conn)) [[unlikely]]
		return -FI_EAGAIN;
	if (!is_read && (flags & FI_REMOTE_CQ_DATA) && rdm_tx_paused(peer)) [[unlikely]]
		return -FI_EAGAIN;
	fi_rma_iov translated[kMaxRmaIov];
	bool translate = ep->scalable_keys;
	for (size_t r = 0; r < rma_count && !translate; r++)
		translate = rdm_key_translated(ep, rma_iov[r].key);
	if (translate) {
		const uint8_t access = is_read ? keys::kAccessRemoteRead : keys::kAccessRemoteWrite;
		if (int rc = rdm_translate_keys(ep, peer, conn, rma_iov, rma_count, total, access,
						{context, comp_flags, total, report, cntr}, translated))
			return rc > 0 ? 0 : rc;
		rma_iov = translated;
	}
	// FI_COMMIT_COMPLETE: how this peer makes writes durable. A read
	// commits trivially, and so does a write of nothing.
	bool commit_request = false, commit_read_back = false;
	if (!is_read && (flags & FI_COMMIT_COMPLETE) && total) [[unlikely]] {
		const wire::PeerCommit how =
			wire::peer_commit(conn->peer_cm_flags.load(std::memory_order_acquire));
		commit_read_back = how == wire::PeerCommit::DirectWrite;
		commit_request = how == wire::PeerCommit::Service;
		if (!commit_read_back && !commit_request) {
			VRMA_WARN(FI_LOG_EP_DATA, "FI_COMMIT_COMPLETE: the peer is no FI_RMA_PMEM endpoint and its writes do not land in persistent memory\n");
			return -FI_EOPNOTSUPP;
		}
	}
	// Its answer completes a commit: the operation waits in the peer's
	// table, holding the registrations too.
	RdmAwaited awaited;
	if (commit_request) {
		if (int rc = awaited.create(peer, conn, rdm::MsgType::CommitAnswer,
					    {context, comp_flags, total, report, cntr}))
			return rc;
	}

	// The local pieces and their keys. An inject beyond the inline size is
	// copied into one of the endpoint's send buffers (its share: a
	// connection keeps no buffers of its own), held until the retirement
	// of the operation's last request.
	const bool bounce = inject && total > conn->inline_size;
	const bool copied = !is_read && total <= conn->inline_size;
	ibv_sge local[kRdmIovLimit];
	size_t local_len[kRdmIovLimit];
	std::unique_ptr<RdmRmaOp> op;
	std::optional<RdmTxBufHold> held;
	if (bounce) {
		held.emplace(ep, conn);
		if (!*held || conn_lost(conn))
			return -FI_EAGAIN;
		uint8_t *b = held->data();
		for (size_t i = 0; i < count; i++) {
			copy_bytes(b, iov[i].iov_base, iov[i].iov_len);
			b += iov[i].iov_len;
		}
		local[0] = {reinterpret_cast<uintptr_t>(held->data()), static_cast<uint32_t>(total),
			    ep->tx_mr->lkey};
		local_len[0] = total;
	} else {
		for (size_t i = 0; i < count; i++) {
			const size_t len = iov[i].iov_len;
			local[i] = {reinterpret_cast<uintptr_t>(iov[i].iov_base),
				    static_cast<uint32_t>(std::min<size_t>(len, UINT32_MAX)), 0};
			local_len[i] = len;
			// A desc is used when it allows the access (a read's
			// target must be writable by the device: an application
			// need not register for that without FI_MR_LOCAL) and
			// its region covers the buffer; else (also a closed
			// region's desc, MrDesc) it is ignored, as if absent: a
			// desc is only an optimisation here.
			const MrDesc *md = desc ? static_cast<const MrDesc *>(desc[i]) : nullptr;
			if (rdm_desc_usable(md, is_read, iov[i].iov_base, len)) {
				local[i].lkey = md->key();
				continue;
			}
			if (copied || !len)
				continue;
			if (!op && !awaited) {
				op.reset(new (std::nothrow) RdmRmaOp);
				if (!op)
					return -FI_ENOMEM;
				op->context = context;
				op->report = report;
				op->cntr = cntr;
			}
			UserReg &reg = awaited ? awaited->regs[i] : op->regs[i];
			if (int rc = reg.acquire(ep->domain, iov[i].iov_base, len,
						 is_read ? IBV_ACCESS_LOCAL_WRITE : 0))
				return rc;
			local[i].lkey = reg.lkey();
		}
	}
	RmaWrs w;
	if (ssize_t rc = rma_build_payload(conn, opcode, local, local_len, total, rma_iov, rma_count, w))
		return rc;
	// A commit request arrives after the data: it proves delivery too.
	if (!is_read && (commit_read_back || ((flags & FI_DELIVERY_COMPLETE) && !commit_request)) &&
	    !rma_add_read_back(conn, w, commit_read_back ? kCommitReadLen : 0))
		return -FI_ENOMEM;
	if (flags & FI_FENCE) // waits for every earlier read (and so every delivery) on the connection
		w.wrs[0].send_flags |= IBV_SEND_FENCE;
	// An operation holding registrations is always signaled: its op is
	// freed by its last request's completion (and a failed post clears
	// `report` on the slots it leaves, which the op's handler skips).
	const uint32_t buf_mark = held ? held->aux_buf() : 0;
	TxOp top{op ? static_cast<void *>(op.get()) : context, comp_flags, total,
		 op ? true : report, op ? nullptr : cntr, (flags & FI_MORE) != 0};
	top.payload_wrs = w.payload_wrs;
	top.aux = rdm_aux(op ? RdmTx::RmaOp : RdmTx::App, buf_mark);
	uint8_t event[std::max(rdm::kRmaEventMsgMax, rdm::kCommitRequestMax)];
	const bool cq_data = !is_read && (flags & FI_REMOTE_CQ_DATA);
	if (commit_request) {
		// The requests end the operation only by failing; the answer
		// completes it (RdmTx::Awaited).
		top = {reinterpret_cast<void *>(uintptr_t(awaited->msg_id)), 0, total, false, nullptr,
		       (flags & FI_MORE) != 0};
		top.payload_wrs = w.payload_wrs;
		top.aux = rdm_aux(RdmTx::Awaited, buf_mark);
		rdm::RdmHeader h;
		h.msg_id = awaited->msg_id;
		if (cq_data) {
			h.flags = rdm::kFlagCqData;
			h.cq_data = data;
		}
		rdm::CommitRange ranges[kMaxRmaIov];
		for (size_t i = 0; i < w.nranges; i++)
			ranges[i] = {w.ranges[i].addr, w.ranges[i].len, w.ranges[i].key};
		top.event = event;
		top.event_len = rdm::encode_commit_request(event, h, ranges, w.nranges);
		rma_add_event_send(w);
	} else if (cq_data || peer_has(*conn, wire::kCmFlagRmaEvents)) {
		uint64_t keys[kMaxRmaIov];
		const size_t nkeys = w.keys(keys);
		top.event = event;
		top.event_len = rdm_encode_rma_event(event, is_read ? rdm::RmaKind::Read : rdm::RmaKind::Write,
						     total, keys, nkeys, cq_data, data);
		rma_add_event_send(w);
	}
	if (!rdm_tx_room(ep, w.nwr))
		return -FI_EAGAIN;
	if (awaited) {
		if (int rc = awaited.wait())
			return rc;
	}
	if (ssize_t rc = rdm_post_op_chain(ep, conn, w.wrs, w.nwr, top))
		return rc;
	if (held)
		held->posted();
	(void)op.release(); // its last request's completion frees it
	if (awaited)
		awaited.posted();
	return 0;
}

// Every RMA that does not take the fast path; an error posts what FI_MORE
// held back first (rdm_more_on_error).
ssize_t rdm_rma(RdmEp *ep, ibv_wr_opcode opcode, const iovec *iov, void *const *desc,
		size_t count, fi_addr_t dest, const fi_rma_iov *rma_iov, size_t rma_count,
		uint64_t data, uint64_t flags, void *context, bool inject_call)
{
	return rdm_more_on_error(ep, rma_long(ep, opcode, iov, desc, count, dest, rma_iov, rma_count,
					      data, flags, context, inject_call));
}

// The common case, as rma_one is for MSG endpoints: one local buffer that
// is copied inline or has a desc, one remote segment that one request
// carries, a connected peer that counts no events, no flag that adds
// requests. Anything else, and every refusal, takes rdm_rma from the start.
constexpr uint64_t kFastRmaFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
				   FI_TRANSMIT_COMPLETE;

[[gnu::always_inline]] inline ssize_t rma_fast(RdmEp *ep, ibv_wr_opcode opcode, const void *buf,
					       size_t len, void *desc, fi_addr_t dest,
					       uint64_t addr, uint64_t key, uint64_t flags,
					       void *context, bool inject_call)
{
	const bool is_read = opcode == IBV_WR_RDMA_READ;
	const bool inject = inject_call || (flags & FI_INJECT);
	if (!((flags & ~kFastRmaFlags) || (!buf && len) || (is_read && inject))) [[likely]] {
		std::lock_guard guard(ep->lock);
		RdmPeer *peer = rdm_peer_cached(ep, dest); // a hit: enabled
		Conn *conn = rdm_fast_conn(peer);
		uint64_t raddr = addr, rkey = key;
		// A key that is neither scalable nor the device's (32 bits) is
		// looked up too: on-demand keys are found, others take the long
		// way, which refuses them.
		if (conn && (ep->scalable_keys || key > UINT32_MAX)) {
			const keys::KeyEntry *e = rdm_key_ready(
				peer, key, is_read ? keys::kAccessRemoteRead : keys::kAccessRemoteWrite);
			if (!e || !e->translate(addr, len, raddr))
				conn = nullptr; // the long way reads or refuses it
			else
				rkey = e->rkey;
		}
		const bool copied = !is_read && len <= (conn ? conn->inline_size : 0);
		// One expectation for the whole test (see send_fast).
		if (__builtin_expect(
			    conn && conn->state.load(std::memory_order_relaxed) == EpState::Connected &&
				    (copied || (!inject && rdm_desc_usable(static_cast<const MrDesc *>(desc), is_read,
									   buf, len))) &&
				    len <= conn->max_wr_bytes && !peer_has(*conn, wire::kCmFlagRmaEvents) &&
				    !conn->peer_flags_pending && ep->tx_wrs < ep->tx_credit &&
				    ep->answer_backlog.empty() && ep->read_backlog.empty() && rdm_more_clear(ep, peer),
			    1)) {
			ibv_sge sge;
			ibv_send_wr wr;
			fill_one_wr(wr, sge, opcode, opcode, buf, len, copied ? nullptr : desc, copied,
				    raddr, rkey, 0, 0);
			const ssize_t rc = post_send_one(conn, wr, context,
							 FI_RMA | (is_read ? FI_READ : FI_WRITE), len,
							 !inject_call && ep->tx_reports(flags),
							 is_read ? ep->cntr_read : ep->cntr_write, false,
							 rdm_aux(RdmTx::App, 0));
			if (!rc) [[likely]]
				ep->tx_wrs++;
			else if (ep->more_peer.load(std::memory_order_relaxed))
				rdm_more_flush(ep);
			return rc;
		}
	}
	const iovec iov{const_cast<void *>(buf), len};
	const fi_rma_iov r{addr, len, key};
	return rdm_rma(ep, opcode, &iov, &desc, 1, dest, &r, 1, 0, flags, context, inject_call);
}

inline RdmEp *rdm(fid_ep *f) { return static_cast<RdmEp *>(f); }

ssize_t r_read(fid_ep *f, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t addr,
	       uint64_t key, void *context) noexcept
{
	return rma_fast(rdm(f), IBV_WR_RDMA_READ, buf, len, desc, src, addr, key, rdm(f)->tx_op_flags,
			context, false);
}

ssize_t r_readv(fid_ep *f, const iovec *iov, void **desc, size_t count, fi_addr_t src,
		uint64_t addr, uint64_t key, void *context) noexcept
{
	const fi_rma_iov r{addr, SIZE_MAX, key};
	return rdm_rma(rdm(f), IBV_WR_RDMA_READ, iov, desc, count, src, &r, 1, 0,
		       rdm(f)->tx_op_flags, context, false);
}

// fi_readmsg / fi_writemsg.
ssize_t rma_msg(fid_ep *f, ibv_wr_opcode opcode, const fi_msg_rma *msg, uint64_t flags) noexcept
{
	if (!msg) {
		VRMA_WARN(FI_LOG_EP_DATA, "fi_readmsg/fi_writemsg: NULL message\n");
		return -FI_EINVAL;
	}
	return rdm_rma(rdm(f), opcode, msg->msg_iov, msg->desc, msg->iov_count, msg->addr,
		       msg->rma_iov, msg->rma_iov_count,
		       opcode == IBV_WR_RDMA_READ ? 0 : msg->data, flags, msg->context, false);
}

ssize_t r_readmsg(fid_ep *f, const fi_msg_rma *msg, uint64_t flags) noexcept
{
	return rma_msg(f, IBV_WR_RDMA_READ, msg, flags);
}

ssize_t r_write(fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t addr,
		uint64_t key, void *context) noexcept
{
	return rma_fast(rdm(f), IBV_WR_RDMA_WRITE, buf, len, desc, dest, addr, key,
			rdm(f)->tx_op_flags, context, false);
}

ssize_t r_writev(fid_ep *f, const iovec *iov, void **desc, size_t count, fi_addr_t dest,
		 uint64_t addr, uint64_t key, void *context) noexcept
{
	const fi_rma_iov r{addr, SIZE_MAX, key};
	return rdm_rma(rdm(f), IBV_WR_RDMA_WRITE, iov, desc, count, dest, &r, 1, 0,
		       rdm(f)->tx_op_flags, context, false);
}

ssize_t r_writemsg(fid_ep *f, const fi_msg_rma *msg, uint64_t flags) noexcept
{
	return rma_msg(f, IBV_WR_RDMA_WRITE, msg, flags);
}

ssize_t r_inject(fid_ep *f, const void *buf, size_t len, fi_addr_t dest, uint64_t addr,
		 uint64_t key) noexcept
{
	return rma_fast(rdm(f), IBV_WR_RDMA_WRITE, buf, len, nullptr, dest, addr, key, FI_INJECT,
			nullptr, true);
}

ssize_t r_writedata(fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data,
		    fi_addr_t dest, uint64_t addr, uint64_t key, void *context) noexcept
{
	const iovec iov{const_cast<void *>(buf), len};
	const fi_rma_iov r{addr, len, key};
	return rdm_rma(rdm(f), IBV_WR_RDMA_WRITE, &iov, &desc, 1, dest, &r, 1, data,
		       rdm(f)->tx_op_flags | FI_REMOTE_CQ_DATA, context, false);
}

ssize_t r_injectdata(fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
		     uint64_t addr, uint64_t key) noexcept
{
	const iovec iov{const_cast<void *>(buf), len};
	const fi_rma_iov r{addr, len, key};
	void *desc = nullptr;
	return rdm_rma(rdm(f), IBV_WR_RDMA_WRITE, &iov, &desc, 1, dest, &r, 1, data,
		       FI_INJECT | FI_REMOTE_CQ_DATA, nullptr, true);
}

} // namespace

void rdm_rma_op_done(RdmEp *ep, Conn *c, const RdmRmaDone &d) noexcept
{
	if (!rdm_op_ends(c, d))
		return;
	auto *op = static_cast<RdmRmaOp *>(d.context);
	rdm_report_tx(ep, op->context, d.comp_flags, d.len, op->report, op->cntr, d.err, d.prov_errno);
	delete op;
}

void rdm_report_rma_event(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, uint64_t flags,
			  const rdm::RdmHeader &h, const uint64_t *keys, size_t n) noexcept
{
	if (ep->rma_events) {
		const bool write = flags & FI_REMOTE_WRITE;
		count_completion(write ? ep->cntr_remote_write : ep->cntr_remote_read, true);
		count_region_events(ep->domain, write, keys, n);
	}
	if (!(h.flags & rdm::kFlagCqData) || !ep->rx_cq)
		return;
	// Remote CQ data: an entry of its own, whatever the receive side's
	// selective completion says (it answers no receive). Peers add these
	// without the application's receives: past the CQ's size the peer is
	// paused (last: it may lose its connection).
	cq_complete(ep->rx_cq, {nullptr, flags | FI_REMOTE_CQ_DATA, h.length, nullptr, h.cq_data, 0},
		    rdm_peer_report_addr(peer));
	if (ep->rx_cq->queued.load(std::memory_order_relaxed) > ep->rx_cq->limit) [[unlikely]]
		rdm_flow_cq_over(peer, qp_num);
}

void rdm_handle_rma_event(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf,
			  size_t len) noexcept
{
	rdm::RdmHeader h;
	uint64_t keys[rdm::kMaxRmaEventKeys];
	size_t n = 0;
	if (!rdm::decode_rma_event(buf, len, h, keys, n)) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "a malformed RMA event");
		return;
	}
	// Its CQ entry and counts stand for memory the peer touched: only
	// regions it could have touched so, and no more bytes than they hold.
	const bool write = rdm::rma_kind_writes(h.status);
	if (!rma_event_plausible(ep->domain, write, keys, n, h.length)) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "an RMA event naming regions not open to it, or more bytes than they hold");
		return;
	}
	rdm_report_rma_event(ep, peer, qp_num,
			     (rdm::rma_kind_atomic(h.status) ? FI_ATOMIC : FI_RMA) |
				     (write ? FI_REMOTE_WRITE : FI_REMOTE_READ),
			     h, keys, n);
}

namespace {

// Makes a commit request's ranges durable and counts it (no lock but
// mr_lock for the look-ups, see commit_persist_range: msync of a file
// mapping may take long).
rdm::CommitStatus persist_commit(const RdmCommitJob &job) noexcept
{
	Domain *dom = job.ep->domain;
	auto status = rdm::CommitStatus::Ok;
	for (size_t i = 0; i < job.n && status == rdm::CommitStatus::Ok; i++)
		status = commit_persist_range(dom, job.ranges[i].key, job.ranges[i].addr, job.ranges[i].len);
	dom->commit_stats.requests.fetch_add(1, std::memory_order_relaxed);
	if (status != rdm::CommitStatus::Ok) {
		dom->commit_stats.failures.fetch_add(1, std::memory_order_relaxed);
		VRMA_INFO(FI_LOG_EP_DATA, "RDM: commit %u answered with status %u\n", job.msg_id,
			  static_cast<unsigned>(status));
	}
	return status;
}

void answer_commit(RdmEp *ep, RdmPeer *peer, uint32_t msg_id, rdm::CommitStatus status) noexcept
{
	uint8_t answer[rdm::kRdmHeaderBytes];
	rdm::encode_commit_answer(answer, msg_id, status);
	rdm_send_answer(ep, peer, answer, nullptr, 0);
}

} // namespace

void rdm_handle_commit(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf,
		       size_t len) noexcept
{
	rdm::RdmHeader h;
	RdmCommitJob job;
	// A malformed request ends its connection, as every malformed message
	// does; the initiator's waiting commit fails with it.
	if (!rdm::decode_commit_request(buf, len, h, job.ranges, job.n)) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "a malformed commit request");
		return;
	}
	// Only an FI_RMA_PMEM endpoint announces the commit service
	// (kConnFlagCommitService); a request to any other is a peer that
	// does not follow the protocol (or one making this endpoint msync
	// whole regions): dropped.
	if (!ep->rma_pmem) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "a commit request to an endpoint without FI_RMA_PMEM");
		return;
	}
	// The data was placed whether or not it can be made durable: its
	// event is reported now, before the answer can complete the commit.
	uint64_t keys[rdm::kMaxCommitRanges];
	size_t nkeys = 0;
	for (size_t i = 0; i < job.n; i++)
		if (std::find(keys, keys + nkeys, job.ranges[i].key) == keys + nkeys)
			keys[nkeys++] = job.ranges[i].key;
	rdm_report_rma_event(ep, peer, qp_num, FI_RMA | FI_REMOTE_WRITE, h, keys, nkeys);
	job.ep = ep;
	job.peer = peer;
	job.conn_epoch = peer->conn_epoch;
	job.msg_id = h.msg_id;
	if (!ep->closing && rdm_persist_submit(job)) {
		peer->persists++;
		return;
	}
	// The worker's queue is full: persisted here, under the endpoint's
	// lock (every peer of this endpoint waits meanwhile: the push-back).
	answer_commit(ep, peer, h.msg_id, persist_commit(job));
}

void rdm_commit_run(RdmCommitJob &job) noexcept
{
	const rdm::CommitStatus status = persist_commit(job);
	RdmEp *ep = job.ep;
	std::lock_guard guard(ep->lock);
	RdmPeer *peer = job.peer;
	peer->persists--;
	// A later connection of the peer (a restarted process) never sees an
	// answer to a request of an earlier one: that one failed the commit.
	if (peer->conn_epoch == job.conn_epoch)
		answer_commit(ep, peer, job.msg_id, status);
}

const fi_ops_rma rdm_rma_ops = {
	.size = sizeof(fi_ops_rma),
	.read = r_read,
	.readv = r_readv,
	.readmsg = r_readmsg,
	.write = r_write,
	.writev = r_writev,
	.writemsg = r_writemsg,
	.inject = r_inject,
	.writedata = r_writedata,
	.injectdata = r_injectdata,
};

} // namespace vrma
