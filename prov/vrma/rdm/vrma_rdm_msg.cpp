// Messages and tagged messages on RDM endpoints: eager sends, rendezvous,
// matching (src/tag_match.h), the unexpected queue, peek/claim/discard,
// multi-receive buffers, and the completions of the endpoint's internal CQ.
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
constexpr uint64_t kRecvFlags = FI_COMPLETION | FI_MULTI_RECV | FI_MORE | FI_MSG | FI_TAGGED;
constexpr uint64_t kTRecvFlags = kRecvFlags | FI_PEEK | FI_CLAIM | FI_DISCARD;

constexpr size_t kHdr = rdm::kRdmHeaderBytes;

uint32_t next_msg_id(RdmPeer *peer)
{
	uint32_t id = peer->next_msg_id++;
	if (id == 0)
		id = peer->next_msg_id++;
	return id;
}

uint8_t *tx_buf(RdmEp *ep, uint32_t idx) { return ep->tx_bufs.get() + size_t(idx) * ep->buf_stride; }

// A registered send buffer for a request on conn, or -1 when conn holds
// its share or none is free (after progress).
int take_tx_buf(RdmEp *ep, Conn *conn)
{
	if (!ep->tx_share.allows(conn->bufs_held, ep->tx_free.size())) {
		rdm_progress_locked(ep);
		if (!ep->tx_share.allows(conn->bufs_held, ep->tx_free.size()))
			return -1;
	}
	const uint32_t idx = ep->tx_free.back();
	ep->tx_free.pop_back();
	conn->bufs_held++;
	return static_cast<int>(idx);
}

void give_tx_buf(RdmEp *ep, Conn *conn, uint32_t idx)
{
	ep->tx_free.push_back(idx);
	conn->bufs_held--;
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
		uint8_t *b = tx_buf(ep, static_cast<uint32_t>(idx));
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
			give_tx_buf(ep, conn, static_cast<uint32_t>(idx));
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

void complete_tx_op(RdmEp *ep, RdmTxOp *op, int err, int prov_errno)
{
	rdm_report_tx(ep, op->context, op->comp_flags, op->len, op->report, op->cntr, err,
		      prov_errno);
	op->peer->waiting.erase(op->msg_id);
	delete op;
}

// A request of a waiting operation (RndvReq, Awaited: its slot's context is the
// msg_id) failed: the send ends with err, if it still waits.
void fail_waiting_send(RdmEp *ep, RdmPeer *peer, void *slot_context, int err, int prov_errno)
{
	auto w = peer->waiting.find(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(slot_context)));
	if (w != peer->waiting.end())
		complete_tx_op(ep, w->second, err, prov_errno);
}

// Copies `len` bytes of src into the iov from byte `off`; returns how many fit.
[[gnu::always_inline]] inline size_t copy_to_iov(const iovec *iov, size_t count, size_t off,
						  const uint8_t *src, size_t len)
{
	size_t done = 0;
	for (size_t i = 0; i < count && done < len; i++) {
		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		const size_t n = std::min(iov[i].iov_len - off, len - done);
		memcpy(static_cast<uint8_t *>(iov[i].iov_base) + off, src + done, n);
		done += n;
		off = 0;
	}
	return done;
}

// The flags of a receive's entry: its kind, and the message's CQ data.
uint64_t recv_flags(MatchKind kind)
{
	return FI_RECV | (kind == MatchKind::kTagged ? FI_TAGGED : FI_MSG);
}
uint64_t rx_flags(MatchKind kind, const rdm::RdmHeader &h)
{
	return recv_flags(kind) | ((h.flags & rdm::kFlagCqData) ? FI_REMOTE_CQ_DATA : 0);
}

// Where a message of len bytes goes in r: dst and count name the iov (r's
// own, or for a multi-receive buffer `piece`, the part of it the message
// takes); buf is where it starts. Returns the bytes that fit.
[[gnu::always_inline]] inline size_t reserve_space(RdmRecv &r, size_t len, iovec &piece,
						    const iovec *&dst, size_t &count, void *&buf)
{
	if (r.multi) {
		const size_t off = r.space.offset();
		const size_t n = r.space.consume(len);
		piece = {static_cast<uint8_t *>(r.iov[0].iov_base) + off, n};
		dst = &piece;
		count = 1;
		buf = piece.iov_base;
		return n;
	}
	dst = r.iov;
	count = r.count;
	buf = r.count ? r.iov[0].iov_base : nullptr;
	return std::min(len, r.capacity);
}

// The receive took a message: removed unless a multi-receive buffer with
// room left. Returns whether it was released (and must be freed).
[[gnu::always_inline]] inline bool retire_recv(RdmEp *ep, RdmRecv &r, bool &release_flag)
{
	release_flag = false;
	if (r.multi && !r.space.should_release())
		return false;
	release_flag = r.multi;
	(void)ep->matcher.remove(r);
	return true;
}

// A multi-receive buffer that retire_recv() released: true when its
// release is reported now (FI_MULTI_RECV on this completion, then the
// caller frees it); false while rendezvous still read into it, the last
// of which reports it (finish_rndv).
bool release_now(RdmRecv &r)
{
	if (!r.rndv_inflight)
		return true;
	r.release_deferred = true;
	return false;
}

// Retires receive r, which took a message, and ends its part in it with one
// entry: report(flags) posts that entry, given `flags` plus FI_MULTI_RECV
// when r is a multi-receive buffer whose release is reported now; then r is
// freed if it was released now (a released buffer that rendezvous still
// read into is not: its last one reports the release, finish_rndv). report
// may read r (not free it) and must not throw. Returns whether r is gone
// (retire_recv: freed, or owned by its rendezvous).
template <class Report>
bool retire_and_report(RdmEp *ep, RdmRecv *r, uint64_t flags, Report &&report) noexcept
{
	bool release;
	const bool gone = retire_recv(ep, *r, release);
	const bool freed = gone && (!release || release_now(*r));
	report(flags | (release && freed ? FI_MULTI_RECV : 0));
	if (freed)
		rdm_put_recv(ep, r);
	return gone;
}

// The cancellation entry of receive r.
CqPending cancel_entry(const RdmRecv &r)
{
	return rdm_error_entry(r.context, recv_flags(r.kind) | (r.multi ? FI_MULTI_RECV : 0),
			       r.count ? r.iov[0].iov_base : nullptr, 0, 0, 0, 0, FI_ADDR_NOTAVAIL,
			       FI_ECANCELED);
}

// Returns whether r is gone (completed and freed, or owned by its
// rendezvous).
bool place_eager(RdmEp *ep, RdmRecv *r, RdmPeer *peer, const rdm::RdmHeader &h,
		 const uint8_t *payload, fi_addr_t src)
{
	iovec piece;
	const iovec *dst;
	size_t count;
	void *buf;
	const size_t fits = reserve_space(*r, h.length, piece, dst, count, buf);
	const size_t placed = copy_to_iov(dst, count, 0, payload, fits);
	const bool gone = retire_and_report(ep, r, rx_flags(r->kind, h), [&](uint64_t flags) noexcept {
		if (placed < h.length)
			rdm_report_rx_error(ep, rdm_error_entry(r->context, flags, buf, placed, h.length - placed,
								h.cq_data, h.tag, src, FI_ETRUNC));
		else
			rdm_complete_rx(ep, r->report, {r->context, flags, placed, buf, h.cq_data, h.tag}, src);
	});
	if (h.flags & rdm::kFlagDeliveryComplete) {
		uint8_t a[kHdr];
		rdm::encode_delivery_ack(a, h.msg_id);
		send_answer(ep, peer, a);
	}
	return gone;
}

// Posts the RDMA READs of a rendezvous receive; false when there is no room
// now (the caller queues it in read_backlog).
bool post_reads(RdmEp *ep, RdmRxOp *op);

void finish_rndv(RdmEp *ep, RdmRxOp *op, int err, int prov_errno)
{
	uint8_t a[kHdr];
	rdm::encode_rndv_done(a, op->msg_id,
			      !err ? rdm::RndvStatus::Ok
			      : err == FI_EACCES ? rdm::RndvStatus::AccessError
						 : rdm::RndvStatus::Failed);
	send_answer(ep, op->peer, a);
	// The last rendezvous into a released multi-receive buffer reports
	// its release (with its own entry, or fi_cancel's after it).
	RdmRecv *owner = op->multi_owner;
	const bool last = owner && --owner->rndv_inflight == 0 && owner->release_deferred;
	const uint64_t flags = op->comp_flags | (last && !owner->cancel_deferred ? FI_MULTI_RECV : 0);
	if (!err && !op->olen) [[likely]]
		rdm_complete_rx(ep, op->report, {op->context, flags, op->len, op->buf, op->data, op->tag},
				op->src);
	else
		rdm_report_rx_error(ep, rdm_error_entry(op->context, flags, op->buf, op->len,
							err ? 0 : op->olen, op->data, op->tag, op->src,
							err ? err : FI_ETRUNC, prov_errno));
	delete op;
	if (last) {
		if (owner->cancel_deferred)
			rdm_report_rx_error(ep, cancel_entry(*owner));
		rdm_put_recv(ep, owner);
	}
}

// A rendezvous request meets its receive. Returns whether r is gone.
bool start_rndv(RdmEp *ep, RdmRecv *r, RdmPeer *peer, const rdm::RdmHeader &h,
		const rdm::RndvSegment *segs, size_t nsegs, fi_addr_t src)
{
	iovec piece;
	const iovec *dst;
	size_t count;
	void *buf;
	const size_t fits = reserve_space(*r, h.length, piece, dst, count, buf);
	auto *op = new (std::nothrow) RdmRxOp;
	if (!op) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM: out of memory for a rendezvous receive\n");
		const bool done = retire_and_report(ep, r, rx_flags(r->kind, h), [&](uint64_t flags) noexcept {
			rdm_report_rx_error(ep, rdm_error_entry(r->context, flags, buf, 0, 0, h.cq_data, h.tag,
								src, FI_ENOMEM));
		});
		uint8_t a[kHdr];
		rdm::encode_rndv_done(a, h.msg_id, rdm::RndvStatus::Failed);
		send_answer(ep, peer, a);
		return done;
	}
	bool release;
	const bool done = retire_recv(ep, *r, release);
	op->peer = peer;
	op->msg_id = h.msg_id;
	op->context = r->context;
	op->comp_flags = rx_flags(r->kind, h);
	op->buf = buf;
	op->len = fits;
	op->olen = h.length - fits;
	op->data = h.cq_data;
	op->tag = h.tag;
	op->src = src;
	op->report = r->report;
	if (r->multi) {
		// The buffer stays until this read ends (RdmRecv::rndv_inflight);
		// released now, its release is reported by its last rendezvous.
		op->multi_owner = r;
		r->rndv_inflight++;
		if (release)
			r->release_deferred = true;
	} else if (done) {
		rdm_put_recv(ep, r);
	}
	// The reads cover what fits, from the start of the sender's data.
	size_t left = fits;
	for (size_t i = 0; i < nsegs && left; i++) {
		op->segs[op->nsegs] = segs[i];
		op->segs[op->nsegs].len = std::min<uint64_t>(segs[i].len, left);
		left -= op->segs[op->nsegs].len;
		op->nsegs++;
	}
	left = fits;
	for (size_t i = 0; i < count && left; i++) {
		const size_t n = std::min(dst[i].iov_len, left);
		if (!n)
			continue;
		op->dst[op->count++] = {dst[i].iov_base, n};
		left -= n;
	}
	if (!fits)
		finish_rndv(ep, op, 0, 0);
	else if (!ep->read_backlog.empty() || !post_reads(ep, op)) {
		// Behind those already waiting (progress retries them).
		try {
			ep->read_backlog.push_back(op);
		} catch (...) {
			finish_rndv(ep, op, FI_ENOMEM, 0);
		}
	}
	return done;
}

} // namespace

ssize_t rdm_post_send_copy(RdmEp *ep, Conn *conn, const uint8_t *src, size_t len, bool more,
			   bool fence) noexcept
{
	return post_copy(ep, conn, src, len, nullptr, 0, 0, nullptr, 0, 0, false, nullptr, more,
			 RdmTx::Internal, fence ? IBV_SEND_FENCE : 0);
}

void rdm_send_answer(RdmEp *ep, RdmPeer *peer, const uint8_t *hdr, const uint8_t *body,
		     size_t body_len) noexcept
{
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

void rdm_give_tx_buf(RdmEp *ep, Conn *conn, uint32_t idx) noexcept { give_tx_buf(ep, conn, idx); }

uint8_t *rdm_tx_buf(RdmEp *ep, uint32_t idx) noexcept { return tx_buf(ep, idx); }

// Registrations and READ requests of one rendezvous receive. False when
// they cannot go now (no room in the queues, or the connection's READ
// credits in use): the op waits in read_backlog and is planned again.
namespace {

bool post_reads(RdmEp *ep, RdmRxOp *op)
{
	RdmPeer *peer = op->peer;
	Conn *conn = peer->conn.get();
	if (!conn || conn->state.load() != EpState::Connected) {
		finish_rndv(ep, op, FI_ECONNRESET, 0);
		return true;
	}
	if (!op->registered) {
		for (size_t i = 0; i < op->count; i++) {
			if (!op->dst[i].iov_len)
				continue; // nothing lands there (its base may be NULL)
			if (int rc = op->regs[i].acquire(ep->domain, op->dst[i].iov_base,
							 op->dst[i].iov_len, IBV_ACCESS_LOCAL_WRITE)) {
				finish_rndv(ep, op, rc == -FI_EAGAIN ? FI_ENOMEM : -rc, 0);
				return true;
			}
		}
		op->registered = true;
	}
	// One READ per remote piece, each at most max_wr_bytes, carving the
	// local pieces in order.
	constexpr size_t kMaxReads = 64;
	ibv_send_wr wrs[kMaxReads];
	ibv_sge sges[kMaxReads * kRdmIovLimit];
	ibv_sge local[kRdmIovLimit];
	size_t local_len[kRdmIovLimit];
	for (size_t i = 0; i < op->count; i++) {
		local[i] = {reinterpret_cast<uintptr_t>(op->dst[i].iov_base),
			    static_cast<uint32_t>(op->dst[i].iov_len), op->regs[i] ? op->regs[i].lkey() : 0};
		local_len[i] = op->dst[i].iov_len;
	}
	SgeCursor cursor{local, local_len};
	size_t nwr = 0, nsge = 0;
	const size_t chunk_max = std::min(conn->max_wr_bytes, size_t(1) << 30);
	for (size_t s = 0; s < op->nsegs; s++) {
		for (uint64_t done = 0; done < op->segs[s].len;) {
			const size_t chunk = std::min<uint64_t>(op->segs[s].len - done, chunk_max);
			if (nwr == kMaxReads) {
				VRMA_WARN(FI_LOG_EP_DATA, "RDM: a rendezvous needs more than %zu reads\n", kMaxReads);
				finish_rndv(ep, op, FI_EMSGSIZE, 0);
				return true;
			}
			ibv_send_wr &wr = wrs[nwr++];
			wr = {};
			wr.opcode = IBV_WR_RDMA_READ;
			wr.sg_list = &sges[nsge];
			wr.num_sge = cursor.take(chunk, &sges[nsge]);
			nsge += static_cast<size_t>(wr.num_sge);
			wr.wr.rdma.remote_addr = op->segs[s].addr + done;
			wr.wr.rdma.rkey = op->segs[s].rkey;
			done += chunk;
		}
	}
	// Progress run here (rdm_tx_room's, or the post's when the queue is
	// full; none inside progress, which does not nest) may end the
	// connection after its end finished the rendezvous in read_backlog:
	// this one ends too rather than wait there (its reads must not go
	// over a later connection, to a sender whose send already failed).
	// A chain longer than the credits goes alone (else it never would).
	if (!rdm_tx_room(ep, nwr) || conn->tx.outstanding() + nwr > conn->tx_depth ||
	    (conn->reads_out && conn->reads_out + nwr > conn->read_credits)) {
		if (!conn_lost(conn))
			return false;
		finish_rndv(ep, op, FI_ECONNRESET, 0);
		return true;
	}
	TxOp top{op, 0, op->len, true, nullptr};
	top.aux = rdm_aux(RdmTx::RndvRead, 0);
	// Counted by the slots that stay in the ring (a failed post keeps
	// those before the refused request): each is retired once.
	const uint64_t head = conn->tx.head();
	const ssize_t rc = post_send_chain_locked(conn, wrs, nwr, top);
	const auto pushed = static_cast<uint32_t>(conn->tx.head() - head);
	ep->tx_wrs += pushed;
	conn->reads_out += pushed;
	if (rc == -FI_EAGAIN && !pushed) {
		if (!conn_lost(conn))
			return false;
		finish_rndv(ep, op, FI_ECONNRESET, 0);
	} else if (rc) {
		finish_rndv(ep, op, static_cast<int>(-rc), 0);
	}
	return true;
}

// iov_total's refusal: one warning, -FI_EINVAL.
[[gnu::cold, gnu::noinline]] ssize_t iov_refused(const iovec *iov, size_t count, const char *what)
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

// The byte count of an operation's iov (at most kRdmIovLimit entries, none
// NULL with a length); 0 or -FI_EINVAL with one warning.
[[gnu::always_inline]] inline ssize_t iov_total(const iovec *iov, size_t count, const char *what,
						size_t &total)
{
	if (count > kRdmIovLimit || (count && !iov)) [[unlikely]]
		return iov_refused(iov, count, what);
	total = 0;
	for (size_t i = 0; i < count; i++) {
		if (!iov[i].iov_base && iov[i].iov_len) [[unlikely]]
			return iov_refused(iov, count, what);
		total += iov[i].iov_len;
	}
	return 0;
}

// --- sends ------------------------------------------------------------------

ssize_t send_long(RdmEp *ep, const iovec *iov, size_t count, fi_addr_t dest, uint64_t tag,
		  uint64_t data, uint64_t flags, void *context, bool tagged, bool inject_call)
{
	if (ssize_t rc = check_op_flags(flags, kSendFlags, "RDM send"))
		return rc;
	size_t total = 0;
	if (ssize_t rc = iov_total(iov, count, "RDM send", total))
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
	const bool report = !inject_call && tx_reports(ep, flags);
	std::lock_guard guard(ep->lock);
	RdmPeer *peer;
	Conn *conn = nullptr;
	if (int rc = rdm_tx_conn(ep, dest, {context, comp_flags, total, report, ep->cntr_send},
				 flags & FI_MORE, peer, conn)) [[unlikely]]
		return rc > 0 ? 0 : rc;
	if (!ep->answer_backlog.empty() || !ep->read_backlog.empty() || peer->tx_paused) [[unlikely]] {
		// Progress may bring the peer's Resume.
		rdm_progress_locked(ep);
		if (conn_lost(conn) || peer->tx_paused)
			return -FI_EAGAIN;
	}
	if ((flags & FI_FENCE) && rdm_fence_blocked(ep, peer, conn)) [[unlikely]]
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

// The data path's common send, as send_one is for MSG endpoints: one
// buffer whose header and payload fit inline, to a peer already connected,
// with no flag but kFastSendFlags and nothing waiting in the backlogs.
// Anything else, and every refusal, takes rdm_send from the start (nothing
// was done here then).
constexpr uint64_t kFastSendFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
				    FI_TRANSMIT_COMPLETE | FI_REMOTE_CQ_DATA;

[[gnu::always_inline]] inline ssize_t send_fast(RdmEp *ep, const void *buf, size_t len,
						fi_addr_t dest, uint64_t tag, uint64_t data,
						uint64_t flags, void *context, bool tagged,
						bool inject_call)
{
	const iovec iov{const_cast<void *>(buf), len};
	if ((flags & ~kFastSendFlags) || len > ep->inject_size || (!buf && len)) [[unlikely]]
		return rdm_send(ep, &iov, 1, dest, tag, data, flags, context, tagged, inject_call);
	{
		std::lock_guard guard(ep->lock);
		RdmPeer *peer = ep->enabled ? rdm_peer_cached(ep, dest) : nullptr;
		Conn *conn = peer ? peer->conn.get() : nullptr;
		// One expectation for the whole test: GCC's guess for each term of
		// a && chain multiplies down, and the block it guards would count
		// as unlikely (its small helpers then called, not inlined).
		if (__builtin_expect(conn && conn->state.load(std::memory_order_relaxed) == EpState::Connected &&
					     len + kHdr <= conn->inline_size && ep->tx_wrs < ep->tx_credit &&
					     ep->answer_backlog.empty() && ep->read_backlog.empty() &&
					     !peer->tx_paused && rdm_more_clear(ep, peer),
				     1)) {
			rdm::RdmHeader h = app_header(tagged, tag, data, flags, len);
			h.type = tagged ? rdm::MsgType::EagerTagged : rdm::MsgType::Eager;
			h.flags |= rdm::kFlagLastPiece;
			uint8_t hb[kHdr];
			rdm::encode_header(hb, h);
			ibv_sge sge[2] = {{reinterpret_cast<uintptr_t>(hb), static_cast<uint32_t>(kHdr), 0},
					  {reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(len), 0}};
			ibv_send_wr wr;
			init_send_wr(wr, sge);
			wr.num_sge = len ? 2 : 1;
			wr.send_flags = IBV_SEND_INLINE;
			const bool report = !inject_call && tx_reports(ep, flags);
			const ssize_t rc = post_send_one(conn, wr, context,
							 FI_SEND | (tagged ? FI_TAGGED : FI_MSG), len,
							 report, ep->cntr_send, false,
							 rdm_aux(RdmTx::App, 0));
			if (!rc) [[likely]]
				ep->tx_wrs++; // its slot's retirement takes it back
			else if (ep->more_peer.load(std::memory_order_relaxed))
				rdm_more_flush(ep);
			return rc;
		}
	}
	return rdm_send(ep, &iov, 1, dest, tag, data, flags, context, tagged, inject_call);
}

// --- back-pressure (rdm_wire.h's Flow, src/rx_budget.h) --------------------

// What an unexpected message holds: its bookkeeping, and an eager
// message's copied payload (a rendezvous leaves its data at the sender).
size_t unexpected_cost(bool rndv, const rdm::RdmHeader &h)
{
	return sizeof(RdmMsg) + (rndv ? 0 : static_cast<size_t>(h.length));
}

void send_flow(RdmEp *ep, RdmPeer *peer, rdm::FlowStatus status)
{
	uint8_t a[kHdr];
	rdm::encode_flow(a, status);
	send_answer(ep, peer, a);
}

} // namespace

// Every paused peer may send again. Collected first: sending may run
// progress, whose connection events may add peers to the map.
void rdm_flow_progress(RdmEp *ep) noexcept
{
	if (ep->unexp.held()) {
		// The receive CQ that remote CQ data filled: resumed once its
		// reader has taken it down to half its size.
		const Cq *cq = ep->rx_cq;
		if (cq && cq->queued.load(std::memory_order_relaxed) > cq->limit / 2)
			return;
		if (!ep->unexp.unhold()) {
			ep->resume_due = false; // the budget's own release resumes
			return;
		}
	}
	ep->resume_due = false;
	std::vector<RdmPeer *> paused;
	try {
		paused.reserve(ep->unexp.paused());
		for (auto &[addr, p] : ep->peers)
			if (p->flow_rx.paused)
				paused.push_back(p.get());
	} catch (...) {
		ep->resume_due = true; // the next progress tries again
		return;
	}
	for (RdmPeer *p : paused) {
		ep->unexp.resumed(p->flow_rx);
		send_flow(ep, p, rdm::FlowStatus::Resume);
	}
}

namespace {

// An unexpected message's charge (`cost`) goes back: it left the queue, or
// was never kept. At half the limit the paused peers resume: at once when
// `now` (an application's receive), else at the end of the progress that
// runs next (a connection's end, where sending is not safe; its flushed
// requests run progress).
void unexpected_gone(RdmEp *ep, size_t cost, bool now)
{
	if (ep->unexp.release(cost)) [[unlikely]] {
		ep->resume_due = true;
		if (now)
			rdm_flow_progress(ep);
	}
}

// An unexpected message of `cost` bytes from peer: charged (true), and its
// connection paused as well once the endpoint holds more than its limit;
// or refused (false), the peer having sent more than its grace since its
// Pause: its connection is dropped and what it queued is discarded.
bool admit_unexpected(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, size_t cost)
{
	switch (ep->unexp.admit(peer->flow_rx, cost)) {
	case flow::Verdict::Keep:
		return true;
	case flow::Verdict::KeepAndPause:
		send_flow(ep, peer, rdm::FlowStatus::Pause);
		return true;
	case flow::Verdict::Refuse:
		break;
	}
	rdm_drop_malformed(peer, qp_num, "unexpected messages beyond the grace of a paused connection");
	// Its sender ignored the back-pressure: nothing it queued is served.
	// Claimed messages stay for their FI_CLAIM; those that owe an answer
	// went with the connection (rdm_fail_waiting), or, if the refused one
	// came over a connection already ended, belong to a live one and stay.
	for (MatchKind k : {MatchKind::kMsg, MatchKind::kTagged}) {
		for (RdmMsg *m = ep->matcher.unexpected_front(k); m;) {
			RdmMsg *next = TagMatcher<RdmRecv, RdmMsg>::next(*m);
			if (m->peer == peer && !m->claimed && !m->rndv &&
			    !(m->hdr.flags & rdm::kFlagDeliveryComplete)) {
				(void)ep->matcher.remove(*m);
				unexpected_gone(ep, m->cost, false);
				delete m;
			}
			m = next;
		}
	}
	return false;
}

} // namespace

void rdm_flow_cq_over(RdmPeer *peer, uint32_t qp_num) noexcept
{
	RdmEp *ep = peer->ep;
	switch (ep->unexp.admit_held(peer->flow_rx)) {
	case flow::Verdict::Keep:
		return;
	case flow::Verdict::KeepAndPause:
		send_flow(ep, peer, rdm::FlowStatus::Pause);
		return;
	case flow::Verdict::Refuse:
		break;
	}
	rdm_drop_malformed(peer, qp_num, "remote CQ data beyond the grace of a paused connection (the CQ is full)");
}

void rdm_handle_flow(RdmPeer *peer, const rdm::RdmHeader &h) noexcept
{
	// Any peer may pause this side's messages to it: it only delays them.
	peer->tx_paused = h.status == static_cast<uint8_t>(rdm::FlowStatus::Pause);
}

void rdm_flow_reset(RdmPeer *peer) noexcept
{
	peer->tx_paused = false;
	peer->ep->unexp.resumed(peer->flow_rx);
}

namespace {

// --- receives ---------------------------------------------------------------

// An unexpected message meets receive r (r not queued). Frees m; returns
// whether r is gone.
bool deliver_unexpected(RdmEp *ep, RdmRecv *r, RdmMsg *m)
{
	(void)ep->matcher.remove(*m);
	unexpected_gone(ep, m->cost, true);
	std::unique_ptr<RdmMsg> owner(m);
	if (m->stale) [[unlikely]] {
		return retire_and_report(ep, r, rx_flags(r->kind, m->hdr), [&](uint64_t flags) noexcept {
			rdm_report_rx_error(ep, rdm_error_entry(r->context, flags, nullptr, 0, 0, m->hdr.cq_data,
								m->hdr.tag, m->src, m->stale));
		});
	}
	if (m->rndv)
		return start_rndv(ep, r, m->peer, m->hdr, m->segs, m->nsegs, m->src);
	return place_eager(ep, r, m->peer, m->hdr, m->payload.get(), m->src);
}

// A discarded message still owes its sender an answer.
void discard_msg(RdmEp *ep, RdmMsg *m)
{
	(void)ep->matcher.remove(*m);
	unexpected_gone(ep, m->cost, true);
	uint8_t a[kHdr];
	if (m->stale) {
		// Its sender was told the connection failed: no answer.
	} else if (m->rndv) {
		rdm::encode_rndv_done(a, m->hdr.msg_id, rdm::RndvStatus::Ok);
		send_answer(ep, m->peer, a);
	} else if (m->hdr.flags & rdm::kFlagDeliveryComplete) {
		rdm::encode_delivery_ack(a, m->hdr.msg_id);
		send_answer(ep, m->peer, a);
	}
	delete m;
}

void report_peek(RdmEp *ep, void *context, MatchKind kind, const RdmMsg *m, uint64_t extra_flags)
{
	const uint64_t flags = rx_flags(kind, m->hdr) | extra_flags;
	rdm_complete_rx(ep, true, {context, flags, m->hdr.length, nullptr, m->hdr.cq_data, m->hdr.tag},
			m->src);
}

void report_nomsg(RdmEp *ep, void *context, MatchKind kind)
{
	rdm_report_rx_error(ep, rdm_error_entry(context, recv_flags(kind), nullptr, 0, 0, 0, 0,
						FI_ADDR_NOTAVAIL, FI_ENOMSG));
}

ssize_t rdm_recv(RdmEp *ep, const iovec *iov, size_t count, fi_addr_t src, uint64_t tag,
		 uint64_t ignore, uint64_t flags, void *context, MatchKind kind)
{
	if (ssize_t rc = check_op_flags(flags, kind == MatchKind::kTagged ? kTRecvFlags : kRecvFlags,
					"RDM recv"))
		return rc;
	size_t total = 0;
	if (ssize_t rc = iov_total(iov, count, "RDM recv", total))
		return rc;
	const bool multi = flags & FI_MULTI_RECV;
	if (multi && count != 1) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM recv: FI_MULTI_RECV takes one buffer\n");
		return -FI_EINVAL;
	}
	RecvKey key;
	key.tag = tag;
	key.ignore = ignore;
	key.src = ep->directed ? src : FI_ADDR_UNSPEC;
	std::lock_guard guard(ep->lock);
	if (!ep->enabled) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM recv before fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	// A peek must see what has arrived. A plain receive needs no progress:
	// a message still in the internal CQ meets it when the next CQ read
	// progresses (matching is in arrival order either way).
	if (flags & (FI_PEEK | FI_CLAIM)) [[unlikely]]
		rdm_progress_locked(ep);
	auto new_recv = [&]() -> RdmRecv * {
		RdmRecv *r = rdm_get_recv(ep);
		if (r) {
			r->kind = kind;
			r->context = context;
			std::copy(iov, iov + count, r->iov);
			r->count = count;
			r->capacity = total;
			r->report = rx_reports(ep, flags);
		}
		return r;
	};
	if (flags & FI_PEEK) {
		RdmMsg *m = ep->matcher.find_unexpected(kind, key);
		if (!m) {
			report_nomsg(ep, context, kind);
			return 0;
		}
		if (flags & FI_DISCARD) {
			report_peek(ep, context, kind, m, 0);
			discard_msg(ep, m);
			return 0;
		}
		report_peek(ep, context, kind, m, 0);
		if (flags & FI_CLAIM)
			ep->matcher.claim(*m, context);
		return 0;
	}
	if (flags & FI_CLAIM) {
		RdmMsg *m = ep->matcher.find_claimed(kind, context);
		if (!m) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM recv: FI_CLAIM names no claimed message\n");
			return -FI_EINVAL;
		}
		if (flags & FI_DISCARD) {
			report_peek(ep, context, kind, m, 0);
			discard_msg(ep, m);
			return 0;
		}
		RdmRecv *r = new_recv();
		if (!r)
			return -FI_ENOMEM;
		deliver_unexpected(ep, r, m);
		return 0;
	}
	RdmRecv *r = new_recv();
	if (!r)
		return -FI_ENOMEM;
	r->key = key;
	r->multi = multi;
	if (multi)
		r->space = {total, 0, ep->min_multi_recv};
	// A multi-receive buffer takes unexpected messages until it is
	// released or none is left; then it is queued.
	for (;;) {
		RdmMsg *m = ep->matcher.post(kind, *r);
		if (!m)
			return 0; // queued
		if (deliver_unexpected(ep, r, m))
			return 0;
	}
}

// --- completions ------------------------------------------------------------

// The operation answer h (RndvDone, DeliveryAck, CommitAnswer) completes,
// or nullptr. None waits for its msg_id: a late answer (the operation
// ended with its connection), logged at info level. The id is an emulated
// atomic's (ids are drawn per peer for every kind), or its operation waits
// for another kind of answer or on another connection than the one the
// answer came over: the peer answered what it was not asked, and that
// connection is dropped (a stale or forged answer must not complete a
// later operation that happens to have the same id).
RdmTxOp *answered_op(RdmPeer *peer, uint32_t qp_num, const rdm::RdmHeader &h)
{
	auto w = peer->waiting.find(h.msg_id);
	if (w == peer->waiting.end()) {
		if (peer->atomics.count(h.msg_id)) [[unlikely]] {
			rdm_drop_malformed(peer, qp_num, "an answer to an atomic of the wrong kind");
			return nullptr;
		}
		VRMA_INFO(FI_LOG_EP_DATA, "RDM: an answer (type %u) to message %u, which waits no more\n",
			  static_cast<unsigned>(h.type), h.msg_id);
		return nullptr;
	}
	RdmTxOp *op = w->second;
	if (!op->posted) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "an answer to a request not sent yet");
		return nullptr;
	}
	if (op->answer != h.type) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "an answer of the wrong kind");
		return nullptr;
	}
	if (!rdm_answer_conn_ok(peer, op->conn, qp_num)) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "an answer over another connection than its request's");
		return nullptr;
	}
	return op;
}

void handle_message(RdmEp *ep, const ibv_wc &wc, const uint8_t *buf)
{
	RdmPeer *peer = ep->by_qp.find(wc.qp_num);
	if (!peer) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM: a message on an unknown queue pair %u\n", wc.qp_num);
		return;
	}
	if (Conn *pc = peer->conn.get();
	    pc && pc->state.load(std::memory_order_relaxed) != EpState::Connected && pc->qp &&
	    pc->qp->qp_num == wc.qp_num) [[unlikely]]
		rdm_conn_established(peer, pc);
	rdm::RdmHeader h;
	if (!rdm::decode_header(buf, wc.byte_len, h)) {
		rdm_drop_malformed(peer, wc.qp_num, "a malformed message");
		return;
	}
	const fi_addr_t src = rdm_peer_fi_addr(peer);
	const MatchKind kind = rdm::is_tagged(h.type) ? MatchKind::kTagged : MatchKind::kMsg;
	MsgKey key{h.tag, src, src != FI_ADDR_NOTAVAIL};
	switch (h.type) {
	case rdm::MsgType::Eager:
	case rdm::MsgType::EagerTagged: {
		const uint8_t *payload = buf + kHdr;
		if (wc.byte_len - kHdr != h.length || !(h.flags & rdm::kFlagLastPiece)) {
			rdm_drop_malformed(peer, wc.qp_num,
					   "a multi-piece eager message (not sent by vrma's RDM protocol 1)");
			return;
		}
		if (RdmRecv *r = ep->matcher.find_posted(kind, key)) {
			place_eager(ep, r, peer, h, payload, src);
			return;
		}
		const size_t cost = unexpected_cost(false, h);
		if (!admit_unexpected(ep, peer, wc.qp_num, cost))
			return;
		auto *m = new (std::nothrow) RdmMsg;
		if (m && h.length)
			m->payload.reset(new (std::nothrow) uint8_t[h.length]);
		if (!m || (h.length && !m->payload)) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM: out of memory for an unexpected message: dropped\n");
			delete m;
			unexpected_gone(ep, cost, false);
			return;
		}
		m->cost = cost;
		m->key = key;
		m->peer = peer;
		m->kind = kind;
		m->src = src;
		m->hdr = h;
		copy_bytes(m->payload.get(), payload, h.length);
		(void)ep->matcher.append_unexpected(kind, *m);
		return;
	}
	case rdm::MsgType::RndvRequest:
	case rdm::MsgType::RndvRequestTagged: {
		rdm::RndvSegment segs[rdm::kMaxRndvSegments];
		size_t n = 0;
		if (!rdm::decode_rndv_request(buf, wc.byte_len, h, segs, n)) {
			rdm_drop_malformed(peer, wc.qp_num, "a malformed rendezvous request");
			return;
		}
		if (RdmRecv *r = ep->matcher.find_posted(kind, key)) {
			start_rndv(ep, r, peer, h, segs, n, src);
			return;
		}
		const size_t cost = unexpected_cost(true, h);
		if (!admit_unexpected(ep, peer, wc.qp_num, cost))
			return;
		auto *m = new (std::nothrow) RdmMsg;
		if (!m) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM: out of memory for an unexpected rendezvous: failing it\n");
			unexpected_gone(ep, cost, false);
			uint8_t a[kHdr];
			rdm::encode_rndv_done(a, h.msg_id, rdm::RndvStatus::Failed);
			send_answer(ep, peer, a);
			return;
		}
		m->cost = cost;
		m->key = key;
		m->peer = peer;
		m->kind = kind;
		m->src = src;
		m->hdr = h;
		m->rndv = true;
		std::copy(segs, segs + n, m->segs);
		m->nsegs = n;
		(void)ep->matcher.append_unexpected(kind, *m);
		return;
	}
	case rdm::MsgType::RmaEvent:
		rdm_handle_rma_event(ep, peer, wc.qp_num, buf, wc.byte_len);
		return;
	case rdm::MsgType::RndvDone:
	case rdm::MsgType::DeliveryAck: {
		RdmTxOp *op = answered_op(peer, wc.qp_num, h);
		if (!op)
			return;
		const auto status = static_cast<rdm::RndvStatus>(h.status);
		const int err = status == rdm::RndvStatus::Ok		 ? 0
				: status == rdm::RndvStatus::AccessError ? FI_EACCES
									 : FI_EIO;
		complete_tx_op(ep, op, err, 0);
		return;
	}
	case rdm::MsgType::AtomicRequest:
	case rdm::MsgType::AtomicResponse:
		rdm_handle_atomic(ep, peer, wc.qp_num, buf, wc.byte_len);
		return;
	case rdm::MsgType::CommitRequest:
		rdm_handle_commit(ep, peer, wc.qp_num, buf, wc.byte_len);
		return;
	case rdm::MsgType::KeyRequest:
		rdm_handle_key_request(ep, peer, wc.qp_num, buf, wc.byte_len);
		return;
	case rdm::MsgType::KeyAnswer:
		rdm_handle_key_answer(ep, peer, wc.qp_num, buf, wc.byte_len);
		return;
	case rdm::MsgType::KeyTable:
		rdm_handle_key_table(peer, wc.qp_num, buf, wc.byte_len);
		return;
	case rdm::MsgType::Flow:
		rdm_handle_flow(peer, h);
		return;
	case rdm::MsgType::CommitAnswer: {
		RdmTxOp *op = answered_op(peer, wc.qp_num, h);
		if (!op)
			return;
		// As MSG endpoints report their commits (vrma_msg_pmem.cpp).
		switch (static_cast<rdm::CommitStatus>(h.status)) {
		case rdm::CommitStatus::Ok:
			complete_tx_op(ep, op, 0, 0);
			break;
		case rdm::CommitStatus::AccessError:
			complete_tx_op(ep, op, FI_EACCES, IBV_WC_REM_ACCESS_ERR);
			break;
		case rdm::CommitStatus::PersistFailed:
			complete_tx_op(ep, op, FI_EREMOTEIO, IBV_WC_REM_OP_ERR);
			break;
		default:
			complete_tx_op(ep, op, FI_EREMOTEIO, IBV_WC_REM_INV_REQ_ERR);
			break;
		}
		return;
	}
	}
}

} // namespace

// Never inlined: inside rdm_recv the reset of a kept receive costs more
// than the call (callgrind: 20 to 55 instructions more per fi_trecv).
[[gnu::noinline]] RdmRecv *rdm_get_recv(RdmEp *ep) noexcept
{
	return ep->recv_pool.get(); // unlinked: the hook's assignment copies no links
}

[[gnu::noinline]] void rdm_put_recv(RdmEp *ep, RdmRecv *r) noexcept
{
	ep->recv_pool.put(r);
}

void rdm_fail_waiting(RdmPeer *peer, int err) noexcept
{
	RdmEp *ep = peer->ep;
	while (!peer->waiting.empty()) {
		RdmTxOp *op = peer->waiting.begin()->second;
		if (op->posted)
			complete_tx_op(ep, op, err, 0);
		else // its caller's post fails: RdmTxOp::posted
			peer->waiting.erase(peer->waiting.begin());
	}
	rdm_fail_atomics(peer, err);
	// Unexpected messages of the peer that owe it an answer: their sends
	// failed with the connection, so they are not delivered (a resend
	// would be a duplicate) and never answered or read over a later one.
	for (MatchKind k : {MatchKind::kMsg, MatchKind::kTagged}) {
		for (RdmMsg *m = ep->matcher.unexpected_front(k); m;) {
			RdmMsg *next = TagMatcher<RdmRecv, RdmMsg>::next(*m);
			if (m->peer == peer && !m->stale &&
			    (m->rndv || (m->hdr.flags & rdm::kFlagDeliveryComplete))) {
				if (m->claimed) {
					m->stale = err;
				} else {
					(void)ep->matcher.remove(*m);
					unexpected_gone(ep, m->cost, false);
					delete m;
				}
			}
			m = next;
		}
	}
	for (auto it = ep->answer_backlog.begin(); it != ep->answer_backlog.end();)
		it = it->peer == peer ? ep->answer_backlog.erase(it) : it + 1;
	peer->answers_queued = 0;
	for (auto it = ep->read_backlog.begin(); it != ep->read_backlog.end();) {
		if ((*it)->peer != peer) {
			++it;
			continue;
		}
		RdmRxOp *op = *it;
		it = ep->read_backlog.erase(it);
		finish_rndv(ep, op, err, 0);
	}
}

void rdm_drop_malformed(RdmPeer *peer, uint32_t qp_num, const char *what) noexcept
{
	VRMA_WARN(FI_LOG_EP_DATA, "RDM: %s from a peer: dropping its connection\n", what);
	Conn *c = nullptr;
	if (peer->conn && peer->conn->qp && peer->conn->qp->qp_num == qp_num)
		c = peer->conn.get();
	else if (peer->loopback && peer->loopback->qp && peer->loopback->qp->qp_num == qp_num)
		c = peer->loopback.get();
	if (c) // else it arrived on a connection already dying
		rdm_conn_failed(peer, c, FI_EIO);
}

bool rdm_answer_conn_ok(const RdmPeer *peer, const Conn *sent_on, uint32_t qp_num) noexcept
{
	const Conn *c = peer->conn.get();
	if (!c || c != sent_on)
		return false;
	if (c->qp && c->qp->qp_num == qp_num)
		return true;
	const Conn *lb = peer->loopback.get();
	return lb && lb->qp && lb->qp->qp_num == qp_num;
}

// A successful receive completion that is no message of vrma's protocol
// (rdm_wc.h): the buffer holds nothing of it (an RDMA write with immediate
// consumed it unwritten), so it is not decoded; the connection it came
// over is dropped.
[[gnu::cold]] static void refuse_recv_wc(RdmEp *ep, const ibv_wc &wc, rdm::RecvWcCheck why) noexcept
{
	RdmPeer *peer = ep->by_qp.find(wc.qp_num);
	if (!peer) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM: a receive completion (opcode %d) on an unknown queue pair %u\n",
			  static_cast<int>(wc.opcode), wc.qp_num);
		return;
	}
	rdm_drop_malformed(peer, wc.qp_num,
			   why == rdm::RecvWcCheck::Length
				   ? "a receive longer than its buffer"
				   : "a receive completion other than a plain send (RDMA write or send with immediate)");
}

void rdm_retry_backlog(RdmEp *ep) noexcept
{
	// First come first served per connection: once one of a connection's
	// rendezvous waits, its later ones wait too; other peers' go on.
	constexpr size_t kBlockedMax = 8;
	const Conn *blocked[kBlockedMax];
	size_t nblocked = 0;
	for (auto it = ep->read_backlog.begin(); it != ep->read_backlog.end();) {
		RdmRxOp *op = *it;
		const Conn *c = op->peer->conn.get();
		if (std::find(blocked, blocked + nblocked, c) != blocked + nblocked) {
			++it;
			continue;
		}
		if (post_reads(ep, op)) {
			it = ep->read_backlog.erase(it);
			continue;
		}
		if (nblocked == kBlockedMax)
			break;
		blocked[nblocked++] = c;
		++it;
	}
	// Answers, in order per peer: a peer whose queue is full keeps its
	// answers and the others' go on; when the endpoint's own send credit
	// or buffers are out, all wait. Taken out of the backlog first: a post
	// that fails a connection erases that peer's answers from it.
	std::deque<RdmEp::Answer> todo;
	todo.swap(ep->answer_backlog);
	// An answer leaves the backlog (a connection's end counted them all out
	// already: rdm_fail_waiting).
	auto gone = [](RdmPeer *p) noexcept {
		if (p->answers_queued)
			p->answers_queued--;
	};
	const Conn *ans_blocked[kBlockedMax];
	size_t nans = 0;
	bool all_wait = false;
	while (!todo.empty()) {
		RdmEp::Answer a = std::move(todo.front());
		todo.pop_front();
		RdmPeer *peer = a.peer;
		Conn *conn = peer->conn.get();
		if (!conn || conn->state.load() != EpState::Connected) {
			gone(peer);
			continue;
		}
		const bool wait = all_wait || std::find(ans_blocked, ans_blocked + nans, conn) != ans_blocked + nans;
		if (!wait) {
			const ssize_t rc = post_answer(ep, conn, a.hdr, a.body.data(), a.body.size());
			if (rc != -FI_EAGAIN) {
				gone(peer);
				continue;
			}
			if (ep->tx_wrs >= ep->tx_credit || !ep->tx_share.allows(0, ep->tx_free.size()) ||
			    nans == kBlockedMax)
				all_wait = true;
			else
				ans_blocked[nans++] = conn;
		}
		if (conn_lost(conn)) // the post ended it: its answers went with it
			continue;
		try {
			ep->answer_backlog.push_back(std::move(a));
		} catch (...) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM: out of memory keeping an answer: the peer's operation will wait for its connection to end\n");
			gone(peer);
		}
	}
}

int rdm_post_srq(RdmEp *ep, const uint32_t *idx, size_t n) noexcept
{
	ibv_sge sge[RdmEp::kSrqBatchMax];
	ibv_recv_wr wr[RdmEp::kSrqBatchMax];
	for (size_t k = 0; k < n; k++) {
		SrqSlot &s = ep->rx_slots[idx[k]];
		sge[k] = {reinterpret_cast<uintptr_t>(s.buf), static_cast<uint32_t>(ep->buf_stride),
			  ep->rx_mr->lkey};
		wr[k].wr_id = reinterpret_cast<uintptr_t>(&s);
		wr[k].sg_list = &sge[k];
		wr[k].num_sge = 1;
		wr[k].next = k + 1 < n ? &wr[k + 1] : nullptr;
	}
	ibv_recv_wr *bad;
	device_will_post(wr);
	if (int rc = ibv_post_srq_recv(ep->srq.get(), wr, &bad)) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM: ibv_post_srq_recv: %s\n", strerror(rc));
		return errno_to_fi(rc, ErrPath::Post);
	}
	return 0;
}

void rdm_handle_wc(RdmEp *ep, const ibv_wc &wc) noexcept
{
	device_completed(wc.wr_id);
	auto *h = reinterpret_cast<SlotHeader *>(wc.wr_id);
	if (h->kind == SlotKind::Rx) {
		auto *s = static_cast<SrqSlot *>(h);
		// A closing endpoint (rdm_linger) serves nothing more.
		if (wc.status == IBV_WC_SUCCESS && !ep->closing) [[likely]] {
			const rdm::RecvWcCheck check =
				rdm::check_recv_wc(wc.opcode, wc.wc_flags, wc.byte_len, ep->buf_stride);
			if (check == rdm::RecvWcCheck::Ok) [[likely]]
				handle_message(ep, wc, s->buf);
			else
				refuse_recv_wc(ep, wc, check);
		} else if (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM: receive failed: %s\n", ibv_wc_status_str(wc.status));
		}
		// Reposted in batches: one call (and one lock of the device's
		// queue) for kSrqBatchMax buffers; the few held back are a small
		// part of the queue (rx_buffers is at least 16).
		if (ep->enabled) {
			ep->srq_batch[ep->srq_batch_n++] = static_cast<uint32_t>(s->seq);
			if (ep->srq_batch_n == ep->srq_batch_max) {
				ep->srq_batch_n = 0;
				(void)rdm_post_srq(ep, ep->srq_batch, ep->srq_batch_max);
			}
		}
		return;
	}
	auto *s = static_cast<TxSlot *>(h);
	Conn *c = h->conn;
	RdmPeer *peer = c->peer;
	const uint64_t seq = s->seq, op_end = s->op_end;
	void *context = s->context;
	const uint64_t comp_flags = s->comp_flags;
	const size_t len = s->len;
	const bool report = s->report;
	Cntr *cntr = s->cntr;
	const RdmTx kind = rdm_aux_kind(s->aux);
	c->tx.retire_through(seq, [ep, c](TxSlot &t, uint64_t t_seq) {
		// An operation's send buffer (each of its requests carries the
		// mark) comes back with its last request.
		if (const uint32_t b = rdm_aux_buf(t.aux)) {
			if (t_seq == t.op_end)
				give_tx_buf(ep, c, b - 1);
		} else if (rdm_aux_kind(t.aux) == RdmTx::RndvRead) {
			c->reads_out--;
		}
		ep->tx_wrs--;
	});
	// A successful completion whose opcode is not what its request posts
	// (rdm_tx_wc_opcodes) is taken as that request's failure: the device
	// or the ring's bookkeeping is wrong, and nothing it says is trusted.
	ibv_wc_status status = wc.status;
	if (status == IBV_WC_SUCCESS && !rdm::send_wc_allowed(wc.opcode, rdm_tx_wc_opcodes(kind)))
	    [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM: a completion of opcode %d for a request of kind %u: dropping the connection\n",
			  static_cast<int>(wc.opcode), static_cast<unsigned>(kind));
		status = IBV_WC_GENERAL_ERR;
	}
	const bool ok = status == IBV_WC_SUCCESS;
	const int err = ok				       ? 0
			: status == IBV_WC_WR_FLUSH_ERR && c->fail_err ? c->fail_err
								       : wc_status_to_fi(status);
	if (!ok) {
		// A waiting operation whose own request failed ends with that
		// error, before the connection's end fails the others.
		if (kind == RdmTx::RndvReq || kind == RdmTx::Awaited)
			fail_waiting_send(ep, peer, context, err, status);
		if (status != IBV_WC_WR_FLUSH_ERR) {
			if (status == wc.status)
				VRMA_WARN(FI_LOG_EP_DATA, "RDM: a request to a peer failed: %s\n",
					  ibv_wc_status_str(status));
			rdm_conn_failed(peer, c, FI_EIO);
		}
	}
	switch (kind) {
	case RdmTx::App:
		if (!ok) {
			if (op_end == c->failed_op_end)
				return;
			c->failed_op_end = op_end;
			rdm_report_tx(ep, context, comp_flags, len, report, cntr, err, status);
			return;
		}
		if (seq == op_end)
			rdm_report_tx(ep, context, comp_flags, len, report, cntr, 0, 0);
		return;
	case RdmTx::RndvRead: {
		if (!report)
			return; // part of a chain whose post failed: the op ended then
		auto *op = static_cast<RdmRxOp *>(context);
		if (!ok && op_end != c->failed_op_end) {
			c->failed_op_end = op_end;
			finish_rndv(ep, op, status == IBV_WC_REM_ACCESS_ERR ? FI_EACCES : err, status);
			return;
		}
		if (ok && seq == op_end)
			finish_rndv(ep, op, 0, 0);
		return;
	}
	case RdmTx::RndvReq:
	case RdmTx::Awaited: {
		if (!ok) // else the peer's answer completes it
			fail_waiting_send(ep, peer, context, err, status);
		return;
	}
	case RdmTx::RmaOp:
		rdm_rma_op_done(ep, c, {context, comp_flags, len, seq, op_end, report, ok, err,
					static_cast<int>(status)});
		return;
	case RdmTx::KeyRead:
		rdm_key_read_done(ep, static_cast<RdmKeyRead *>(context), ok);
		return;
	case RdmTx::AtomicNative:
		rdm_atomic_native_done(ep, c, {context, comp_flags, len, seq, op_end, report, ok, err,
					       static_cast<int>(status)});
		return;
	case RdmTx::Internal:
		return;
	}
}

void rdm_report_unposted(Conn *conn, const ibv_send_wr *first, int err) noexcept
{
	RdmPeer *peer = conn->peer;
	RdmEp *ep = peer->ep;
	const int fi_err = -errno_to_fi(err, ErrPath::Post);
	for (const ibv_send_wr *w = first; w; w = w->next) {
		auto *s = reinterpret_cast<TxSlot *>(w->wr_id);
		if (s->seq != s->op_end)
			continue; // one report per operation, at its last request
		// The slots stay in the ring: a later completion (the sentinel's
		// flush when the connection goes) retires them, reporting nothing.
		switch (rdm_aux_kind(s->aux)) {
		case RdmTx::App:
			rdm_report_tx(ep, s->context, s->comp_flags, s->len, true, s->cntr, fi_err,
				      IBV_WC_GENERAL_ERR);
			break;
		case RdmTx::RndvReq:
		case RdmTx::Awaited:
			fail_waiting_send(ep, peer, s->context, fi_err, IBV_WC_GENERAL_ERR);
			break;
		case RdmTx::RmaOp:
			// No request of it was posted: none completes later.
			rdm_rma_op_done(ep, conn, {s->context, s->comp_flags, s->len, s->op_end, s->op_end,
						   s->report, false, fi_err, IBV_WC_GENERAL_ERR});
			break;
		case RdmTx::KeyRead:
			rdm_key_read_done(ep, static_cast<RdmKeyRead *>(s->context), false);
			break;
		case RdmTx::AtomicNative:
			rdm_atomic_native_done(ep, conn, {s->context, s->comp_flags, s->len, s->op_end,
							  s->op_end, s->report, false, fi_err,
							  IBV_WC_GENERAL_ERR});
			break;
		default:
			break;
		}
	}
}

ssize_t rdm_cancel(RdmEp *ep, void *context) noexcept
{
	std::lock_guard guard(ep->lock);
	RdmRecv *r = ep->matcher.cancel(context);
	if (!r)
		return -FI_ENOENT;
	if (r->rndv_inflight) {
		// Its rendezvous still write into it: cancelled (nothing more
		// lands in it), reported once they ended.
		r->release_deferred = true;
		r->cancel_deferred = true;
		return 0;
	}
	const CqPending p = cancel_entry(*r);
	rdm_put_recv(ep, r);
	rdm_report_rx_error(ep, p);
	return 0;
}

namespace {

// --- entry points -----------------------------------------------------------

inline RdmEp *rdm(fid_ep *f) { return static_cast<RdmEp *>(f); }

ssize_t m_recv(fid_ep *f, void *buf, size_t len, void *, fi_addr_t src, void *context) noexcept
{
	const iovec iov{buf, len};
	return rdm_recv(rdm(f), &iov, 1, src, 0, 0, rdm(f)->rx_op_flags, context, MatchKind::kMsg);
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
	return send_fast(rdm(f), buf, len, dest, 0, 0, rdm(f)->tx_op_flags, context, false, false);
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
	return send_fast(rdm(f), buf, len, dest, 0, data, rdm(f)->tx_op_flags | FI_REMOTE_CQ_DATA,
			 context, false, false);
}
ssize_t m_injectdata(fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest) noexcept
{
	return send_fast(rdm(f), buf, len, dest, 0, data, FI_INJECT | FI_REMOTE_CQ_DATA, nullptr, false,
			 true);
}

ssize_t t_recv(fid_ep *f, void *buf, size_t len, void *, fi_addr_t src, uint64_t tag,
	       uint64_t ignore, void *context) noexcept
{
	const iovec iov{buf, len};
	return rdm_recv(rdm(f), &iov, 1, src, tag, ignore, rdm(f)->rx_op_flags, context,
			MatchKind::kTagged);
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
	return send_fast(rdm(f), buf, len, dest, tag, 0, rdm(f)->tx_op_flags, context, true, false);
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
	return send_fast(rdm(f), buf, len, dest, tag, data, rdm(f)->tx_op_flags | FI_REMOTE_CQ_DATA,
			 context, true, false);
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
