// The application's sends on RDM endpoints, messages and tagged: eager
// sends (the inline fast path and the copied one), rendezvous requests,
// delivery-complete sends; vrma's own sends (answers) and the endpoint's
// send buffers; and the fi_msg and fi_tagged entry points. Receives and
// what arrives are the receive side's (vrma_rdm_rx.cpp).
//
// Contracts:
//  - every call runs under RdmEp::lock;
//  - an accepted send ends with exactly one completion or error entry (or a
//    count), whatever happens to its connection: eager sends through their
//    work completion (flushes included), rendezvous and delivery-complete
//    sends through the peer's answer, or the failure of the connection
//    (rdm_fail_waiting);
//  - the application's buffers need no registration: eager payloads are
//    copied (inline or into a registered send buffer), rendezvous buffers
//    are registered for the operation and released when it ends.
#include "vrma_rdm.h"
#include "vrma_post.h"

#include <algorithm>

#include <rdma/fi_tagged.h>

namespace vrma {

namespace {

// FI_FENCE: -FI_EAGAIN while an earlier operation to the peer waits for
// its answer (rdm_fence_blocked); then the send's requests carry
// IBV_SEND_FENCE, which holds them behind the connection's earlier RDMA
// READs (a send's data follows earlier writes on RC anyway).
constexpr uint64_t kSendFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
				FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_REMOTE_CQ_DATA |
				FI_MORE | FI_MSG | FI_TAGGED | FI_FENCE;

constexpr size_t kHdr = rdm::kRdmHeaderBytes;

uint32_t next_msg_id(RdmPeer *peer)
{
	uint32_t id = peer->next_msg_id++;
	if (id == 0)
		id = peer->next_msg_id++;
	return id;
}

// A registered send buffer for a request on conn, or -1 when conn holds
// its share or none is free (after a reclaim).
int take_tx_buf(RdmEp *ep, Conn *conn)
{
	if (!ep->tx_share.allows(conn->bufs_held, ep->tx_free.size())) {
		rdm_tx_reclaim(ep);
		if (!ep->tx_share.allows(conn->bufs_held, ep->tx_free.size()))
			return -1;
	}
	const uint32_t idx = ep->tx_free.back();
	ep->tx_free.pop_back();
	conn->bufs_held++;
	return static_cast<int>(idx);
}


// A send request's fields the device reads, as fill_one_wr does (zeroing
// the whole request costs more than the rest of the path); the rdma fields
// and imm_data because a held-back FI_MORE request is copied whole. The
// caller sets num_sge and send_flags.
[[gnu::always_inline]] inline void init_send_wr(ibv_send_wr &wr, ibv_sge *sge)
{
	wr.opcode = IBV_WR_SEND;
	wr.sg_list = sge;
	wr.imm_data = 0;
	wr.wr.rdma.remote_addr = 0;
	wr.wr.rdma.rkey = 0;
}

// The header fields every send of an application message carries (the
// type and protocol flags are the caller's).
[[gnu::always_inline]] inline rdm::RdmHeader app_header(bool tagged, uint64_t tag, uint64_t data,
							uint64_t flags, size_t len)
{
	rdm::RdmHeader h;
	h.tag = tagged ? tag : 0;
	if (flags & FI_REMOTE_CQ_DATA) {
		h.flags |= rdm::kFlagCqData;
		h.cq_data = data;
	}
	h.length = len;
	return h;
}

// Posts one send of `len` bytes at `src` (header included) on conn: inline
// when it fits, else through a send buffer. `extra` is payload appended
// after src (inline only: iov pieces), for the eager fast path. `fence`
// is added to the request's send_flags (IBV_SEND_FENCE, or 0).
ssize_t post_copy(RdmEp *ep, Conn *conn, const uint8_t *src, size_t len, const iovec *extra,
		  size_t nextra, size_t extra_len, void *context, uint64_t comp_flags,
		  size_t op_len, bool report, Cntr *cntr, bool more, RdmTx kind, unsigned fence = 0)
{
	if (!rdm_tx_room(ep, 1))
		return -FI_EAGAIN;
	ibv_send_wr wr;
	ibv_sge sge[kRdmIovLimit + 1];
	init_send_wr(wr, sge);
	ssize_t rc;
	if (len + extra_len <= conn->inline_size) {
		sge[0] = {reinterpret_cast<uintptr_t>(src), static_cast<uint32_t>(len), 0};
		int n = 1;
		for (size_t i = 0; i < nextra; i++)
			if (extra[i].iov_len)
				sge[n++] = {reinterpret_cast<uintptr_t>(extra[i].iov_base),
					    static_cast<uint32_t>(extra[i].iov_len), 0};
		wr.num_sge = n;
		wr.send_flags = IBV_SEND_INLINE | fence;
		rc = post_send_one(conn, wr, context, comp_flags, op_len, report, cntr, more,
				   rdm_aux(kind, 0));
	} else {
		const int idx = take_tx_buf(ep, conn);
		if (idx < 0)
			return -FI_EAGAIN;
		uint8_t *b = rdm_tx_buf(ep, static_cast<uint32_t>(idx));
		copy_bytes(b, src, len);
		size_t off = len;
		for (size_t i = 0; i < nextra; i++) {
			copy_bytes(b + off, extra[i].iov_base, extra[i].iov_len);
			off += extra[i].iov_len;
		}
		sge[0] = {reinterpret_cast<uintptr_t>(b), static_cast<uint32_t>(off), ep->tx_mr->lkey};
		wr.num_sge = 1;
		wr.send_flags = fence;
		rc = post_send_one(conn, wr, context, comp_flags, op_len, report, cntr, more,
				   rdm_aux(kind, static_cast<uint32_t>(idx) + 1));
		if (rc)
			rdm_give_tx_buf(ep, conn, static_cast<uint32_t>(idx));
	}
	if (!rc)
		ep->tx_wrs++; // its slot's retirement takes it back
	return rc;
}

// Posts an answer: its header and body_len bytes of body.
ssize_t post_answer(RdmEp *ep, Conn *conn, const uint8_t *hdr, const uint8_t *body, size_t body_len)
{
	const iovec extra{const_cast<uint8_t *>(body), body_len};
	return post_copy(ep, conn, hdr, kHdr, body_len ? &extra : nullptr, body_len ? 1 : 0, body_len,
			 nullptr, 0, 0, false, nullptr, false, RdmTx::Internal);
}

// One of vrma's own answers; queued when the ring is full.
void send_answer(RdmEp *ep, RdmPeer *peer, const uint8_t *hdr, const uint8_t *body = nullptr,
		 size_t body_len = 0)
{
	Conn *conn = peer->conn.get();
	if (!conn || conn->state.load() != EpState::Connected)
		return; // the peer's side fails its operation with the connection
	if (!peer->answers_queued && post_answer(ep, conn, hdr, body, body_len) == 0)
		return;
	// Progress the post ran may have ended the connection, after its end
	// cleared the backlog of the peer's answers: this one goes with it
	// (queued, it would go out over a later connection).
	if (conn_lost(conn))
		return;
	if (peer->answers_queued >= ep->peer_allowance) [[unlikely]] {
		rdm_drop_malformed(peer, conn->qp ? conn->qp->qp_num : 0,
				   "more requests than answers it takes (its answer queue is full)");
		return;
	}
	try {
		RdmEp::Answer a{peer, {}, std::vector<uint8_t>(body, body + body_len)};
		memcpy(a.hdr, hdr, kHdr);
		ep->answer_backlog.push_back(std::move(a));
		peer->answers_queued++;
	} catch (...) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM: out of memory queuing an answer: the peer's operation will wait for its connection to end\n");
	}
}

} // namespace

ssize_t rdm_post_send_copy(RdmEp *ep, Conn *conn, const uint8_t *src, size_t len, bool more,
			   bool fence) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	return post_copy(ep, conn, src, len, nullptr, 0, 0, nullptr, 0, 0, false, nullptr, more,
			 RdmTx::Internal, fence ? IBV_SEND_FENCE : 0);
}

void rdm_send_answer(RdmEp *ep, RdmPeer *peer, const uint8_t *hdr, const uint8_t *body,
		     size_t body_len) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	send_answer(ep, peer, hdr, body, body_len);
}

uint32_t rdm_next_msg_id(RdmPeer *peer) noexcept { return next_msg_id(peer); }

int RdmAwaited::create(RdmPeer *peer, const Conn *conn, rdm::MsgType answer,
		       const RdmTxReport &r) noexcept
{
	op_.reset(new (std::nothrow) RdmTxOp);
	if (!op_)
		return -FI_ENOMEM;
	op_->peer = peer;
	op_->msg_id = next_msg_id(peer);
	op_->answer = answer;
	op_->conn = conn;
	op_->context = r.context;
	op_->comp_flags = r.comp_flags;
	op_->len = r.len;
	op_->report = r.report;
	op_->cntr = r.cntr;
	return 0;
}

int RdmAwaited::wait() noexcept
{
	try {
		op_->peer->waiting.emplace(op_->msg_id, op_.get());
	} catch (...) {
		return -FI_ENOMEM;
	}
	waiting_ = true;
	return 0;
}

RdmAwaited::~RdmAwaited()
{
	if (op_ && waiting_)
		op_->peer->waiting.erase(op_->msg_id);
}

int rdm_take_tx_buf(RdmEp *ep, Conn *conn) noexcept { return take_tx_buf(ep, conn); }

ssize_t rdm_post_answer(RdmEp *ep, Conn *conn, const uint8_t *hdr, const uint8_t *body,
			size_t body_len) noexcept
{
	return post_answer(ep, conn, hdr, body, body_len);
}

// rdm_iov_total's refusal: one warning, -FI_EINVAL.
ssize_t rdm_iov_refused(const iovec *iov, size_t count, const char *what) noexcept
{
	if (count > kRdmIovLimit || !iov) {
		VRMA_WARN(FI_LOG_EP_DATA, "%s: %zu segments; iov_limit is %zu\n", what, count, kRdmIovLimit);
		return -FI_EINVAL;
	}
	for (size_t i = 0; i < count; i++)
		if (!iov[i].iov_base && iov[i].iov_len) {
			VRMA_WARN(FI_LOG_EP_DATA, "%s: NULL buffer of length %zu\n", what, iov[i].iov_len);
			break;
		}
	return -FI_EINVAL;
}

namespace {


// --- sends ------------------------------------------------------------------

ssize_t send_long(RdmEp *ep, const iovec *iov, size_t count, fi_addr_t dest, uint64_t tag,
		  uint64_t data, uint64_t flags, void *context, bool tagged, bool inject_call)
{
	if (ssize_t rc = check_op_flags(flags, kSendFlags, "RDM send"))
		return rc;
	size_t total = 0;
	if (ssize_t rc = rdm_iov_total(iov, count, "RDM send", total))
		return rc;
	const bool inject = inject_call || (flags & FI_INJECT);
	if (inject && total > ep->inject_size) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM inject of %zu bytes exceeds inject_size %zu\n", total,
			  ep->inject_size);
		return -FI_EINVAL;
	}
	if (total > kRdmMaxMsg) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM send of %zu bytes exceeds max_msg_size %zu\n", total,
			  kRdmMaxMsg);
		return -FI_EMSGSIZE;
	}
	const uint64_t comp_flags = FI_SEND | (tagged ? FI_TAGGED : FI_MSG);
	const bool report = !inject_call && ep->tx_reports(flags);
	std::lock_guard guard(ep->lock);
	RdmPeer *peer;
	Conn *conn = nullptr;
	if (int rc = rdm_tx_conn(ep, dest, {context, comp_flags, total, report, ep->cntr_send},
				 flags & FI_MORE, peer, conn)) [[unlikely]]
		return rc > 0 ? 0 : rc;
	// Paused by the peer: its Resume arrives with progress. (What waits in
	// the backlogs goes first at the next progress, which retries them
	// after reclaiming: a send does not run them.)
	if (rdm_tx_paused(peer)) [[unlikely]]
		return -FI_EAGAIN;
	if ((flags & FI_FENCE) && rdm_fence_blocked(peer, conn)) [[unlikely]]
		return -FI_EAGAIN;
	const unsigned fence = (flags & FI_FENCE) ? IBV_SEND_FENCE : 0;
	rdm::RdmHeader h = app_header(tagged, tag, data, flags, total);
	const bool dc = (flags & FI_DELIVERY_COMPLETE) != 0;
	if (total <= ep->eager_size) {
		h.type = tagged ? rdm::MsgType::EagerTagged : rdm::MsgType::Eager;
		h.flags |= rdm::kFlagLastPiece;
		uint8_t hb[kHdr];
		if (!dc) [[likely]] {
			rdm::encode_header(hb, h);
			return post_copy(ep, conn, hb, kHdr, iov, count, total, context, comp_flags, total,
					 report, ep->cntr_send, flags & FI_MORE, RdmTx::App, fence);
		}
		// Delivery complete: the receiver's DeliveryAck completes it.
		RdmAwaited op;
		if (int rc = op.create(peer, conn, rdm::MsgType::DeliveryAck,
				       {context, comp_flags, total, report, ep->cntr_send}))
			return rc;
		h.flags |= rdm::kFlagDeliveryComplete;
		h.msg_id = op->msg_id;
		rdm::encode_header(hb, h);
		if (int rc = op.wait())
			return rc;
		ssize_t rc = post_copy(ep, conn, hb, kHdr, iov, count, total,
				       reinterpret_cast<void *>(uintptr_t(op->msg_id)), 0, total, false,
				       nullptr, flags & FI_MORE, RdmTx::Awaited, fence);
		if (!rc)
			op.posted();
		return rc;
	}
	// Rendezvous: register the sender's pieces for the receiver to read
	// (with or without FI_DELIVERY_COMPLETE, its RndvDone completes it).
	RdmAwaited op;
	if (int rc = op.create(peer, conn, rdm::MsgType::RndvDone,
			       {context, comp_flags, total, report, ep->cntr_send}))
		return rc;
	rdm::RndvSegment segs[rdm::kMaxRndvSegments];
	size_t nsegs = 0;
	for (size_t i = 0; i < count; i++) {
		if (!iov[i].iov_len)
			continue;
		if (int rc = op->regs[nsegs].acquire(ep->domain, iov[i].iov_base, iov[i].iov_len,
						     IBV_ACCESS_REMOTE_READ))
			return rc;
		segs[nsegs] = {reinterpret_cast<uintptr_t>(iov[i].iov_base), iov[i].iov_len,
			       op->regs[nsegs].rkey()};
		nsegs++;
	}
	h.type = tagged ? rdm::MsgType::RndvRequestTagged : rdm::MsgType::RndvRequest;
	if (dc)
		h.flags |= rdm::kFlagDeliveryComplete;
	h.msg_id = op->msg_id;
	uint8_t req[rdm::kRndvMsgMax];
	const size_t len = rdm::encode_rndv_request(req, h, segs, nsegs);
	if (int rc = op.wait())
		return rc;
	ssize_t rc = post_copy(ep, conn, req, len, nullptr, 0, 0,
			       reinterpret_cast<void *>(uintptr_t(op->msg_id)), 0, total, false, nullptr,
			       flags & FI_MORE, RdmTx::RndvReq, fence);
	if (!rc)
		op.posted();
	return rc;
}

// Every send that does not take the fast path; an error posts what FI_MORE
// held back first (rdm_more_on_error).
ssize_t rdm_send(RdmEp *ep, const iovec *iov, size_t count, fi_addr_t dest, uint64_t tag,
		 uint64_t data, uint64_t flags, void *context, bool tagged, bool inject_call)
{
	return rdm_more_on_error(ep, send_long(ep, iov, count, dest, tag, data, flags, context, tagged,
					       inject_call));
}

// rdm_send of one buffer, out of send_fast's inlined path.
[[gnu::noinline]] ssize_t rdm_send_one(RdmEp *ep, const void *buf, size_t len, fi_addr_t dest,
				       uint64_t tag, uint64_t data, uint64_t flags, void *context,
				       bool tagged, bool inject_call)
{
	const iovec iov{const_cast<void *>(buf), len};
	return rdm_send(ep, &iov, 1, dest, tag, data, flags, context, tagged, inject_call);
}

// The data path's common send, as send_one is for MSG endpoints: one
// buffer whose header and payload fit inline, to a peer already connected,
// with no flag but kRdmFastTxFlags and nothing waiting in the backlogs.
// Anything else, and every refusal, takes rdm_send from the start (nothing
// was done here then).
// Defaults: flags are the endpoint's tx_op_flags (with FI_REMOTE_CQ_DATA
// for the data calls), whose check was made when they were set
// (EpBase::fast_plain, fast_report).
template <bool Defaults = false>
[[gnu::always_inline]] inline ssize_t send_fast(RdmEp *ep, const void *buf, size_t len,
						fi_addr_t dest, uint64_t tag, uint64_t data,
						uint64_t flags, void *context, bool tagged,
						bool inject_call)
{
	const bool odd_flags = Defaults ? !ep->fast_plain : (flags & ~kRdmFastTxFlags) != 0;
	if (odd_flags || len > ep->inject_size || (!buf && len)) [[unlikely]]
		return rdm_send_one(ep, buf, len, dest, tag, data, flags, context, tagged, inject_call);
	{
		std::lock_guard guard(ep->lock);
		RdmPeer *peer = rdm_peer_cached(ep, dest); // a hit: enabled
		Conn *conn = rdm_fast_conn(peer);
		// One expectation for the whole test: GCC's guess for each term of
		// a && chain multiplies down, and the block it guards would count
		// as unlikely (its small helpers then called, not inlined).
		if (__builtin_expect(conn && conn->state.load(std::memory_order_relaxed) == EpState::Connected &&
					     len + kHdr <= conn->inline_size && ep->tx_wrs < ep->tx_credit &&
					     ep->answer_backlog.empty() && ep->read_backlog.empty() &&
					     !peer->tx_paused && rdm_more_clear(ep, peer),
				     1)) {
			// The connection's prebuilt header and request, patched
			// (Conn::one_hdr: inline, copied by the post).
			const bool cq_data = flags & FI_REMOTE_CQ_DATA;
			rdm::patch_eager_header(conn->one_hdr,
						tagged ? rdm::MsgType::EagerTagged : rdm::MsgType::Eager,
						rdm::kFlagLastPiece | (cq_data ? rdm::kFlagCqData : 0),
						tagged ? tag : 0, cq_data ? data : 0, len);
			const ssize_t rc = post_fast_held<IBV_WR_SEND, true, true>(
				conn, reinterpret_cast<uintptr_t>(buf), len, 0,
				IBV_SEND_INLINE, 0, 0, 0, context,
				!inject_call && (Defaults ? ep->fast_report : ep->tx_reports(flags)),
				ep->cntr_send, FI_SEND | (tagged ? FI_TAGGED : FI_MSG),
				rdm_aux(RdmTx::App, 0));
			if (!rc) [[likely]]
				ep->tx_wrs++; // its slot's retirement takes it back
			else if (ep->more_peer.load(std::memory_order_relaxed))
				rdm_more_flush(ep);
			return rc;
		}
	}
	return rdm_send_one(ep, buf, len, dest, tag, data, flags, context, tagged, inject_call);
}

} // namespace

namespace {

// --- entry points -----------------------------------------------------------

inline RdmEp *rdm(fid_ep *f) { return static_cast<RdmEp *>(f); }

ssize_t m_recv(fid_ep *f, void *buf, size_t len, void *, fi_addr_t src, void *context) noexcept
{
	return rdm_recv_one(rdm(f), buf, len, src, 0, 0, context, MatchKind::kMsg);
}
ssize_t m_recvv(fid_ep *f, const iovec *iov, void **, size_t count, fi_addr_t src,
		void *context) noexcept
{
	return rdm_recv(rdm(f), iov, count, src, 0, 0, rdm(f)->rx_op_flags, context, MatchKind::kMsg);
}
ssize_t m_recvmsg(fid_ep *f, const fi_msg *msg, uint64_t flags) noexcept
{
	if (!msg)
		return -FI_EINVAL;
	return rdm_recv(rdm(f), msg->msg_iov, msg->iov_count, msg->addr, 0, 0, flags, msg->context,
			MatchKind::kMsg);
}
ssize_t m_send(fid_ep *f, const void *buf, size_t len, void *, fi_addr_t dest,
	       void *context) noexcept
{
	return send_fast<true>(rdm(f), buf, len, dest, 0, 0, rdm(f)->tx_op_flags, context, false,
			       false);
}
ssize_t m_sendv(fid_ep *f, const iovec *iov, void **, size_t count, fi_addr_t dest,
		void *context) noexcept
{
	return rdm_send(rdm(f), iov, count, dest, 0, 0, rdm(f)->tx_op_flags, context, false, false);
}
ssize_t m_sendmsg(fid_ep *f, const fi_msg *msg, uint64_t flags) noexcept
{
	if (!msg)
		return -FI_EINVAL;
	return rdm_send(rdm(f), msg->msg_iov, msg->iov_count, msg->addr, 0, msg->data, flags,
			msg->context, false, false);
}
ssize_t m_inject(fid_ep *f, const void *buf, size_t len, fi_addr_t dest) noexcept
{
	return send_fast(rdm(f), buf, len, dest, 0, 0, FI_INJECT, nullptr, false, true);
}
ssize_t m_senddata(fid_ep *f, const void *buf, size_t len, void *, uint64_t data, fi_addr_t dest,
		   void *context) noexcept
{
	return send_fast<true>(rdm(f), buf, len, dest, 0, data,
			       rdm(f)->tx_op_flags | FI_REMOTE_CQ_DATA, context, false, false);
}
ssize_t m_injectdata(fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest) noexcept
{
	return send_fast(rdm(f), buf, len, dest, 0, data, FI_INJECT | FI_REMOTE_CQ_DATA, nullptr, false,
			 true);
}

ssize_t t_recv(fid_ep *f, void *buf, size_t len, void *, fi_addr_t src, uint64_t tag,
	       uint64_t ignore, void *context) noexcept
{
	return rdm_recv_one(rdm(f), buf, len, src, tag, ignore, context, MatchKind::kTagged);
}
ssize_t t_recvv(fid_ep *f, const iovec *iov, void **, size_t count, fi_addr_t src, uint64_t tag,
		uint64_t ignore, void *context) noexcept
{
	return rdm_recv(rdm(f), iov, count, src, tag, ignore, rdm(f)->rx_op_flags, context,
			MatchKind::kTagged);
}
ssize_t t_recvmsg(fid_ep *f, const fi_msg_tagged *msg, uint64_t flags) noexcept
{
	if (!msg)
		return -FI_EINVAL;
	return rdm_recv(rdm(f), msg->msg_iov, msg->iov_count, msg->addr, msg->tag, msg->ignore, flags,
			msg->context, MatchKind::kTagged);
}
ssize_t t_send(fid_ep *f, const void *buf, size_t len, void *, fi_addr_t dest, uint64_t tag,
	       void *context) noexcept
{
	return send_fast<true>(rdm(f), buf, len, dest, tag, 0, rdm(f)->tx_op_flags, context, true,
			       false);
}
ssize_t t_sendv(fid_ep *f, const iovec *iov, void **, size_t count, fi_addr_t dest, uint64_t tag,
		void *context) noexcept
{
	return rdm_send(rdm(f), iov, count, dest, tag, 0, rdm(f)->tx_op_flags, context, true, false);
}
ssize_t t_sendmsg(fid_ep *f, const fi_msg_tagged *msg, uint64_t flags) noexcept
{
	if (!msg)
		return -FI_EINVAL;
	return rdm_send(rdm(f), msg->msg_iov, msg->iov_count, msg->addr, msg->tag, msg->data, flags,
			msg->context, true, false);
}
ssize_t t_inject(fid_ep *f, const void *buf, size_t len, fi_addr_t dest, uint64_t tag) noexcept
{
	return send_fast(rdm(f), buf, len, dest, tag, 0, FI_INJECT, nullptr, true, true);
}
ssize_t t_senddata(fid_ep *f, const void *buf, size_t len, void *, uint64_t data, fi_addr_t dest,
		   uint64_t tag, void *context) noexcept
{
	return send_fast<true>(rdm(f), buf, len, dest, tag, data,
			       rdm(f)->tx_op_flags | FI_REMOTE_CQ_DATA, context, true, false);
}
ssize_t t_injectdata(fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
		     uint64_t tag) noexcept
{
	return send_fast(rdm(f), buf, len, dest, tag, data, FI_INJECT | FI_REMOTE_CQ_DATA, nullptr, true,
			 true);
}

} // namespace

const fi_ops_msg rdm_msg_ops = {
	.size = sizeof(fi_ops_msg),
	.recv = m_recv,
	.recvv = m_recvv,
	.recvmsg = m_recvmsg,
	.send = m_send,
	.sendv = m_sendv,
	.sendmsg = m_sendmsg,
	.inject = m_inject,
	.senddata = m_senddata,
	.injectdata = m_injectdata,
};

const fi_ops_tagged rdm_tagged_ops = {
	.size = sizeof(fi_ops_tagged),
	.recv = t_recv,
	.recvv = t_recvv,
	.recvmsg = t_recvmsg,
	.send = t_send,
	.sendv = t_sendv,
	.sendmsg = t_sendmsg,
	.inject = t_inject,
	.senddata = t_senddata,
	.injectdata = t_injectdata,
};

} // namespace vrma
