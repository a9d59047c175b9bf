// The receive side of RDM endpoints: the application's receives (fi_recv,
// fi_trecv with peek, claim, discard and multi-receive buffers, fi_cancel)
// and the receive engine: every completion of an endpoint's internal CQ
// (rdm_handle_wc, and rdm_tx_reclaim for a transmit short of room) and
// every message that arrives (handle_message): eager placement, rendezvous
// reads, the answers that complete sends, flow control of unexpected
// messages, the backlogs of work that found its queue full, and the shared
// receive queue's buffers.
//
// Contracts:
//  - everything here runs under RdmEp::lock: the receive calls take it,
//    the engine is entered with it held (progress, a transmit's reclaim);
//  - everything a message says is hostile input: it is decoded and bounded
//    (rdm_wire.h) before use, and anything malformed drops its connection
//    with one warning (rdm_drop_malformed);
//  - an operation ends with exactly one entry, whichever of its work
//    completion, its answer or its connection's end comes first.
#include "vrma_rdm.h"
#include "vrma_post.h"

#include <algorithm>

namespace vrma {

namespace {

constexpr size_t kHdr = rdm::kRdmHeaderBytes;

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
	return rdm_error_entry(r.context, rdm_recv_flags(r.kind) | (r.multi ? FI_MULTI_RECV : 0),
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
	const bool gone = retire_and_report(ep, r, rdm_rx_flags(r->kind, h), [&](uint64_t flags) noexcept {
		if (placed < h.length)
			rdm_report_rx_error(ep, rdm_error_entry(r->context, flags, buf, placed, h.length - placed,
								h.cq_data, h.tag, src, FI_ETRUNC));
		else
			rdm_complete_rx(ep, r->report, {r->context, flags, placed, buf, h.cq_data, h.tag}, src);
	});
	if (h.flags & rdm::kFlagDeliveryComplete) {
		uint8_t a[kHdr];
		rdm::encode_delivery_ack(a, h.msg_id);
		rdm_send_answer(ep, peer, a);
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
	rdm_send_answer(ep, op->peer, a);
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
		const bool done = retire_and_report(ep, r, rdm_rx_flags(r->kind, h), [&](uint64_t flags) noexcept {
			rdm_report_rx_error(ep, rdm_error_entry(r->context, flags, buf, 0, 0, h.cq_data, h.tag,
								src, FI_ENOMEM));
		});
		uint8_t a[kHdr];
		rdm::encode_rndv_done(a, h.msg_id, rdm::RndvStatus::Failed);
		rdm_send_answer(ep, peer, a);
		return done;
	}
	bool release;
	const bool done = retire_recv(ep, *r, release);
	op->peer = peer;
	op->msg_id = h.msg_id;
	op->context = r->context;
	op->comp_flags = rdm_rx_flags(r->kind, h);
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

// Registrations and READ requests of one rendezvous receive. False when
// they cannot go now (no room in the queues, or the connection's READ
// credits in use): the op waits in read_backlog and is planned again.

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
	// A reclaim run here (rdm_tx_room's, or the post's when the queue is
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

// --- back-pressure (rdm_wire.h's Flow, src/rx_budget.h) --------------------

// What an unexpected message holds: its bookkeeping (with room for a small
// payload), and an eager message's copied payload beyond that room (a
// rendezvous leaves its data at the sender).
size_t unexpected_cost(bool rndv, const rdm::RdmHeader &h)
{
	const bool small = rndv || h.length <= RdmMsg::kSmallPayload;
	return sizeof(RdmMsg) + (small ? 0 : static_cast<size_t>(h.length));
}

void send_flow(RdmEp *ep, RdmPeer *peer, rdm::FlowStatus status)
{
	uint8_t a[kHdr];
	rdm::encode_flow(a, status);
	rdm_send_answer(ep, peer, a);
}

} // namespace

// Every paused peer may send again. Collected first: sending may run
// progress, whose connection events may add peers to the map.
void rdm_flow_progress(RdmEp *ep) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
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
				rdm_free_msg(ep, m);
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

constexpr uint64_t kRecvFlags = FI_COMPLETION | FI_MULTI_RECV | FI_MORE | FI_MSG | FI_TAGGED;
constexpr uint64_t kTRecvFlags = kRecvFlags | FI_PEEK | FI_CLAIM | FI_DISCARD;

// An unexpected message meets receive r (r not queued). Frees m; returns
// whether r is gone.
bool deliver_unexpected(RdmEp *ep, RdmRecv *r, RdmMsg *m)
{
	(void)ep->matcher.remove(*m);
	unexpected_gone(ep, m->cost, true);
	struct Owner {
		RdmEp *ep;
		RdmMsg *m;
		~Owner() { rdm_free_msg(ep, m); }
	} owner{ep, m};
	if (m->stale) [[unlikely]] {
		return retire_and_report(ep, r, rdm_rx_flags(r->kind, m->hdr), [&](uint64_t flags) noexcept {
			rdm_report_rx_error(ep, rdm_error_entry(r->context, flags, nullptr, 0, 0, m->hdr.cq_data,
								m->hdr.tag, m->src, m->stale));
		});
	}
	if (m->rndv)
		return start_rndv(ep, r, m->peer, m->hdr, m->segs, m->nsegs, m->src);
	return place_eager(ep, r, m->peer, m->hdr, m->payload_bytes(), m->src);
}

// Matches r (filled, not queued) against the unexpected messages, and
// queues it if none takes it (lock held). A multi-receive buffer takes
// unexpected messages until it is released or none is left.
ssize_t post_recv(RdmEp *ep, RdmRecv *r, MatchKind kind)
{
	for (;;) {
		RdmMsg *m = ep->matcher.post(kind, *r);
		if (!m) [[likely]]
			return 0; // queued
		if (deliver_unexpected(ep, r, m))
			return 0;
	}
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
		rdm_send_answer(ep, m->peer, a);
	} else if (m->hdr.flags & rdm::kFlagDeliveryComplete) {
		rdm::encode_delivery_ack(a, m->hdr.msg_id);
		rdm_send_answer(ep, m->peer, a);
	}
	rdm_free_msg(ep, m);
}

void report_peek(RdmEp *ep, void *context, MatchKind kind, const RdmMsg *m, uint64_t extra_flags)
{
	const uint64_t flags = rdm_rx_flags(kind, m->hdr) | extra_flags;
	rdm_complete_rx(ep, true, {context, flags, m->hdr.length, nullptr, m->hdr.cq_data, m->hdr.tag},
			m->src);
}

void report_nomsg(RdmEp *ep, void *context, MatchKind kind)
{
	rdm_report_rx_error(ep, rdm_error_entry(context, rdm_recv_flags(kind), nullptr, 0, 0, 0, 0,
						FI_ADDR_NOTAVAIL, FI_ENOMSG));
}

} // namespace

ssize_t rdm_recv(RdmEp *ep, const iovec *iov, size_t count, fi_addr_t src, uint64_t tag,
		 uint64_t ignore, uint64_t flags, void *context, MatchKind kind) noexcept
{
	if (ssize_t rc = check_op_flags(flags, kind == MatchKind::kTagged ? kTRecvFlags : kRecvFlags,
					"RDM recv"))
		return rc;
	size_t total = 0;
	if (ssize_t rc = rdm_iov_total(iov, count, "RDM recv", total))
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
			r->report = ep->rx_reports(flags);
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
	return post_recv(ep, r, kind);
}

ssize_t rdm_recv_one(RdmEp *ep, void *buf, size_t len, fi_addr_t src, uint64_t tag,
		     uint64_t ignore, void *context, MatchKind kind) noexcept
{
	const uint64_t flags = ep->rx_op_flags;
	if ((flags & FI_MULTI_RECV) || (!buf && len)) [[unlikely]] {
		const iovec iov{buf, len};
		return rdm_recv(ep, &iov, 1, src, tag, ignore, flags, context, kind);
	}
	std::lock_guard guard(ep->lock);
	if (!ep->enabled) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM recv before fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	RdmRecv *r = rdm_get_recv(ep);
	if (!r) [[unlikely]]
		return -FI_ENOMEM;
	r->kind = kind;
	r->context = context;
	r->iov[0] = {buf, len};
	r->count = 1;
	r->capacity = len;
	r->report = ep->rx_reports(flags);
	r->key.tag = tag;
	r->key.ignore = ignore;
	r->key.src = ep->directed ? src : FI_ADDR_UNSPEC;
	return post_recv(ep, r, kind);
}


namespace {

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
		RdmMsg *m = rdm_new_msg(ep, h.length);
		if (!m) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM: out of memory for an unexpected message: dropped\n");
			unexpected_gone(ep, cost, false);
			return;
		}
		m->cost = cost;
		m->key = key;
		m->peer = peer;
		m->kind = kind;
		m->src = src;
		m->hdr = h;
		copy_bytes(m->payload_bytes(), payload, h.length);
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
		RdmMsg *m = rdm_new_msg(ep, 0);
		if (!m) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM: out of memory for an unexpected rendezvous: failing it\n");
			unexpected_gone(ep, cost, false);
			uint8_t a[kHdr];
			rdm::encode_rndv_done(a, h.msg_id, rdm::RndvStatus::Failed);
			rdm_send_answer(ep, peer, a);
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

RdmMsg *rdm_new_msg(RdmEp *ep, size_t len) noexcept
{
	RdmMsg *m = ep->msg_pool.get();
	if (m && len > RdmMsg::kSmallPayload) {
		m->payload.reset(new (std::nothrow) uint8_t[len]);
		if (!m->payload) {
			ep->msg_pool.put(m);
			return nullptr;
		}
	}
	return m;
}

void rdm_free_msg(RdmEp *ep, RdmMsg *m) noexcept
{
	if (!m)
		return;
	m->payload.reset();
	ep->msg_pool.put(m);
}

void rdm_fail_waiting(RdmPeer *peer, int err) noexcept
{
	VRMA_ASSERT_HELD(peer->ep->lock);
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
					rdm_free_msg(ep, m);
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
	VRMA_ASSERT_HELD(peer->ep->lock);
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
	VRMA_ASSERT_HELD(ep->lock);
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
			const ssize_t rc = rdm_post_answer(ep, conn, a.hdr, a.body.data(), a.body.size());
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
	VRMA_ASSERT_HELD(ep->lock);
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
				rdm_give_tx_buf(ep, c, b - 1);
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

// A peer's Flow message (Pause, Resume) governs this side's transmits: a
// reclaim applies it at once, as progress would, so that a sender that
// only sends still stops within the peer's grace (rx_budget.h). Any other
// receive completion waits for progress.
static bool flow_message(const RdmEp *ep, const ibv_wc &wc) noexcept
{
	if (wc.status != IBV_WC_SUCCESS || ep->closing ||
	    rdm::check_recv_wc(wc.opcode, wc.wc_flags, wc.byte_len, ep->buf_stride) != rdm::RecvWcCheck::Ok)
		return false;
	const auto *s = reinterpret_cast<const SrqSlot *>(wc.wr_id);
	rdm::RdmHeader h;
	return rdm::decode_header(s->buf, wc.byte_len, h) && h.type == rdm::MsgType::Flow;
}

void rdm_tx_reclaim(RdmEp *ep) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	if (ep->in_progress) [[unlikely]]
		return; // a handler's post: progress goes on after it
	ep->in_progress = true;
	bool kept = false;
	// From an error completion on, everything is handled in order (what
	// was kept first): a failed request may end its connection, and what
	// the peer sent before must be seen before that end, as progress
	// would see it (an answer completes its operation, not the failure).
	bool in_order = false;
	// Only while a whole batch fits among the kept: progress handles them.
	while (ep->rx_deferred_n + RdmEp::kReclaimBatch <= RdmEp::kRxDeferMax) {
		ibv_wc wcs[RdmEp::kReclaimBatch];
		const int n = ibv_poll_cq(ep->cq.get(), RdmEp::kReclaimBatch, wcs);
		for (int i = 0; i < n; i++) {
			device_completed(wcs[i].wr_id); // before reading its slot
			if (!in_order && wcs[i].status != IBV_WC_SUCCESS) [[unlikely]] {
				rdm_handle_deferred(ep);
				in_order = true;
			}
			if (!in_order && reinterpret_cast<const SlotHeader *>(wcs[i].wr_id)->kind == SlotKind::Rx &&
			    !flow_message(ep, wcs[i])) {
				ep->rx_deferred[ep->rx_deferred_n++] = wcs[i];
				kept = true;
			} else {
				rdm_handle_wc(ep, wcs[i]);
			}
		}
		if (n < RdmEp::kReclaimBatch)
			break;
	}
	ep->in_progress = false;
	// No CQ event announces them again: the engine must look.
	if (kept && ep->auto_progress)
		(void)eventfd_signal(ep->kick_fd.get());
}

void rdm_handle_deferred(RdmEp *ep) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	// Handlers do not add to them: a reclaim does nothing inside progress
	// (or close), which is where this runs.
	for (uint32_t i = 0; i < ep->rx_deferred_n; i++)
		rdm_handle_wc(ep, ep->rx_deferred[i]);
	ep->rx_deferred_n = 0;
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

} // namespace vrma
