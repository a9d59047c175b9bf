// The receive side of RDM endpoints that meets the application: its
// receives (fi_recv, fi_trecv with peek, claim, discard and multi-receive
// buffers, fi_cancel), the rendezvous reads that fill them, and the
// back-pressure on unexpected messages (rdm_wire.h's Flow,
// src/rx_budget.h). The receive engine that feeds them (every completion
// of the internal CQ, every message that arrives, eager placement) is
// vrma_rdm_rx.cpp; their shared helpers are vrma_rdm_rx.h.
//
// Contracts (as vrma_rdm_rx.cpp's):
//  - everything here runs under RdmEp::lock: the receive calls take it,
//    the engine is entered with it held;
//  - a rendezvous request's segments were decoded and bounded
//    (rdm_wire.h) before they reach here;
//  - a receive ends with exactly one entry, whichever of its message, its
//    cancellation or its connection's end comes first.
#include "vrma_rdm_rx.h"
#include "vrma_post.h"

#include <algorithm>

namespace vrma {

namespace {

constexpr size_t kHdr = rdm::kRdmHeaderBytes;

constexpr uint64_t kRecvFlags = FI_COMPLETION | FI_MULTI_RECV | FI_MORE | FI_MSG | FI_TAGGED;
constexpr uint64_t kTRecvFlags = kRecvFlags | FI_PEEK | FI_CLAIM | FI_DISCARD;

// An unexpected message meets receive r (r not queued). Frees m; returns
// whether r is gone.
bool deliver_unexpected(RdmEp *ep, RdmRecv *r, RdmMsg *m)
{
	(void)ep->matcher.remove(*m);
	rdm_unexpected_gone(ep, m->cost, true);
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
		return rdm_start_rndv(ep, r, m->peer, m->hdr, m->segs, m->nsegs, m->src);
	return rdm_place_eager(ep, r, m->peer, m->hdr, m->payload_bytes(), m->src);
}

// Matches r (filled, not queued) against the unexpected messages, and
// queues it if none takes it (lock held). A multi-receive buffer takes
// unexpected messages until it is released or none is left.
ssize_t post_recv(RdmEp *ep, RdmRecv *r, MatchKind kind)
{
	rdm_resolve_sources(ep);
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
	rdm_unexpected_gone(ep, m->cost, true);
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

// What the application asks of a receive, as both receive paths fill it.
[[gnu::always_inline]] inline void fill_recv(RdmRecv *r, MatchKind kind, void *context,
					     const iovec *iov, size_t count, size_t total,
					     bool report) noexcept
{
	r->kind = kind;
	r->context = context;
	std::copy(iov, iov + count, r->iov.v);
	r->count = count;
	r->capacity = total;
	r->report = report;
}

void report_nomsg(RdmEp *ep, void *context, MatchKind kind)
{
	rdm_report_rx_error(ep, rdm_error_entry(context, rdm_recv_flags(kind), nullptr, 0, 0, 0, 0,
						FI_ADDR_NOTAVAIL, FI_ENOMSG));
}

[[gnu::cold]] ssize_t exact_src_refused() noexcept
{
	VRMA_WARN(FI_LOG_EP_DATA,
		  "RDM recv: FI_ADDR_UNSPEC on an endpoint with FI_EXACT_DIRECTED_RECV: name the source\n");
	return -FI_EINVAL;
}

} // namespace

void rdm_resolve_sources_slow(RdmEp *ep) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	const uint64_t epoch = ep->av->epoch.load(std::memory_order_acquire);
	if (epoch == ep->unknown_src_epoch)
		return;
	ep->unknown_src_epoch = epoch;
	bool unknown_left = false;
	for (MatchKind kind : {MatchKind::kMsg, MatchKind::kTagged}) {
		for (RdmMsg *m = ep->matcher.unexpected_front(kind); m; m = ep->matcher.next(*m)) {
			if (m->key.src_known)
				continue;
			const fi_addr_t src = rdm_peer_fi_addr(m->peer);
			if (src == FI_ADDR_NOTAVAIL) {
				unknown_left = true;
				continue;
			}
			m->key.src = src;
			m->key.src_known = true;
			m->src = rdm_peer_report_addr(m->peer);
		}
	}
	ep->unknown_src_pending = unknown_left;
}

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
	if (ep->refuses_any_src(kind, src)) [[unlikely]]
		return exact_src_refused();
	RecvKey key;
	key.tag = tag;
	key.ignore = ignore;
	key.src = ep->recv_src(kind, src);
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
		if (r)
			fill_recv(r, kind, context, iov, count, total, ep->rx_reports(flags));
		return r;
	};
	if (flags & FI_PEEK) {
		rdm_resolve_sources(ep);
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
	// The source mode is read again after rdm_get_recv (recv_src) rather
	// than kept across the call (a register fewer to spill on this path).
	if ((flags & FI_MULTI_RECV) || (!buf && len) || ep->refuses_any_src(kind, src)) [[unlikely]] {
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
	const iovec iov{buf, len};
	fill_recv(r, kind, context, &iov, 1, len, ep->rx_reports(flags));
	r->key.tag = tag;
	r->key.ignore = ignore;
	r->key.src = ep->recv_src(kind, src);
	return post_recv(ep, r, kind);
}

// --- rendezvous reads -------------------------------------------------------

void rdm_finish_rndv(RdmEp *ep, RdmRxOp *op, int err, int prov_errno)
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
bool rdm_start_rndv(RdmEp *ep, RdmRecv *r, RdmPeer *peer, const rdm::RdmHeader &h,
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
	rdm_next_reads(ep, op); // its first window (none when nothing fits)
	return done;
}

// Registrations and the next window of READ requests of one rendezvous
// receive. False when they cannot go now (no room in the queues, or the
// connection's READ credits in use): the op waits in read_backlog and is
// planned again.

bool rdm_post_reads(RdmEp *ep, RdmRxOp *op)
{
	RdmPeer *peer = op->peer;
	Conn *conn = peer->conn.get();
	if (!conn || conn->state.load() != EpState::Connected) {
		rdm_finish_rndv(ep, op, FI_ECONNRESET, 0);
		return true;
	}
	if (!op->registered) {
		for (size_t i = 0; i < op->count; i++) {
			if (!op->dst[i].iov_len)
				continue; // nothing lands there (its base may be NULL)
			if (int rc = op->regs[i].acquire(ep->domain, op->dst[i].iov_base,
							 op->dst[i].iov_len, IBV_ACCESS_LOCAL_WRITE)) {
				rdm_finish_rndv(ep, op, rc == -FI_EAGAIN ? FI_ENOMEM : -rc, 0);
				return true;
			}
		}
		op->registered = true;
	}
	// The next window: from op->posted on, one READ per remote piece, each
	// at most the read size, as many as the connection's free READ credits
	// take (kMaxReads at most), carving the local pieces in order.
	// Hazard: the device answers the READs a connection has in flight back
	// to back, and on a lossy link a lost response packet costs the
	// requester a retry of everything after it (on rxe, when it is the last
	// READ's, a whole ACK timeout): READs in flight and their size bound
	// what one loss costs (FI_VRMA_RDM_RNDV_READS, _RNDV_READ_SIZE).
	constexpr size_t kMaxReads = 64;
	const uint32_t credits = conn->read_credits > conn->reads_out ? conn->read_credits - conn->reads_out : 0;
	const size_t max_reads = std::min<size_t>(credits, kMaxReads);
	if (!max_reads) {
		if (!conn_lost(conn))
			return false;
		rdm_finish_rndv(ep, op, FI_ECONNRESET, 0);
		return true;
	}
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
	cursor.skip(op->posted);
	size_t nwr = 0, nsge = 0, bytes = 0;
	const size_t chunk_max = std::min({conn->max_wr_bytes, ep->rndv_read_size, size_t(1) << 30});
	size_t skip = op->posted;
	for (size_t s = 0; s < op->nsegs && nwr < max_reads; s++) {
		if (skip >= op->segs[s].len) {
			skip -= op->segs[s].len;
			continue;
		}
		for (uint64_t done = skip; done < op->segs[s].len && nwr < max_reads;) {
			const size_t chunk = std::min<uint64_t>(op->segs[s].len - done, chunk_max);
			ibv_send_wr &wr = wrs[nwr++];
			wr = {};
			wr.opcode = IBV_WR_RDMA_READ;
			wr.sg_list = &sges[nsge];
			wr.num_sge = cursor.take(chunk, &sges[nsge]);
			nsge += static_cast<size_t>(wr.num_sge);
			wr.wr.rdma.remote_addr = op->segs[s].addr + done;
			wr.wr.rdma.rkey = op->segs[s].rkey;
			done += chunk;
			bytes += chunk;
		}
		skip = 0;
	}
	// A reclaim run here (rdm_tx_room's, or the post's when the queue is
	// full; none inside progress, which does not nest) may end the
	// connection after its end finished the rendezvous in read_backlog:
	// this one ends too rather than wait there (its reads must not go
	// over a later connection, to a sender whose send already failed).
	if (!rdm_tx_room(ep, nwr) || conn->tx.outstanding() + nwr > conn->tx_depth) {
		if (!conn_lost(conn))
			return false;
		rdm_finish_rndv(ep, op, FI_ECONNRESET, 0);
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
		rdm_finish_rndv(ep, op, FI_ECONNRESET, 0);
	} else if (rc) {
		rdm_finish_rndv(ep, op, static_cast<int>(-rc), 0);
	} else {
		op->posted += bytes;
	}
	return true;
}

void rdm_next_reads(RdmEp *ep, RdmRxOp *op) noexcept
{
	if (op->posted >= op->len) {
		rdm_finish_rndv(ep, op, 0, 0);
		return;
	}
	// Behind those already waiting (progress retries them).
	if (ep->read_backlog.empty() && rdm_post_reads(ep, op))
		return;
	try {
		ep->read_backlog.push_back(op);
	} catch (...) {
		rdm_finish_rndv(ep, op, FI_ENOMEM, 0);
	}
}

// --- back-pressure (rdm_wire.h's Flow, src/rx_budget.h) --------------------

// What an unexpected message holds: its bookkeeping (with room for a small
// payload), and an eager message's copied payload beyond that room (a
// rendezvous leaves its data at the sender).
size_t rdm_unexpected_cost(bool rndv, const rdm::RdmHeader &h)
{
	const bool small = rndv || h.length <= RdmMsg::kSmallPayload;
	return sizeof(RdmMsg) + (small ? 0 : static_cast<size_t>(h.length));
}

namespace {

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

// An unexpected message's charge (`cost`) goes back: it left the queue, or
// was never kept. At half the limit the paused peers resume: at once when
// `now` (an application's receive), else at the end of the progress that
// runs next (a connection's end, where sending is not safe; its flushed
// requests run progress).
void rdm_unexpected_gone(RdmEp *ep, size_t cost, bool now)
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
bool rdm_admit_unexpected(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, size_t cost)
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
				rdm_unexpected_gone(ep, m->cost, false);
				rdm_free_msg(ep, m);
			}
			m = next;
		}
	}
	return false;
}



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
