// The RDM receive engine: every completion of an endpoint's internal CQ
// (rdm_handle_wc, and rdm_tx_reclaim for a transmit short of room) and
// every message that arrives (handle_message): eager placement, the
// answers that complete sends, the backlogs of work that found its queue
// full, and the shared receive queue's buffers. The application's
// receives, rendezvous reads and back-pressure are vrma_rdm_recv.cpp.
//
// Contracts:
//  - everything here runs under RdmEp::lock: the receive calls take it,
//    the engine is entered with it held (progress, a transmit's reclaim);
//  - everything a message says is hostile input: it is decoded and bounded
//    (rdm_wire.h) before use, and anything malformed drops its connection
//    with one warning (rdm_drop_malformed);
//  - an operation ends with exactly one entry, whichever of its work
//    completion, its answer or its connection's end comes first.
#include "vrma_rdm_rx.h"
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

// Whether a request the peer executed is done on this side too: its effect
// is at the peer (a send, a write, vrma's own messages), not an answer still
// to come back (a read's data, a device atomic's old value).
constexpr bool rdm_executed_is_done(RdmTx kind, uint64_t comp_flags) noexcept
{
	return kind != RdmTx::RndvRead && kind != RdmTx::KeyRead && kind != RdmTx::AtomicNative &&
	       !(comp_flags & FI_READ);
}

// Whether c is the connection of the local queue pair qp_num (what a work
// completion names).
bool conn_on_qp(const Conn *c, uint32_t qp_num) noexcept
{
	return c && c->qp && c->qp->qp_num == qp_num;
}

} // namespace

// Returns whether r is gone (completed and freed, or owned by its
// rendezvous).
bool rdm_place_eager(RdmEp *ep, RdmRecv *r, RdmPeer *peer, const rdm::RdmHeader &h,
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

// Queues an arriving message no receive matched (its payload or segments
// already in m): one from a sender not in the AV marks the endpoint for
// rdm_resolve_sources.
void queue_unexpected(RdmEp *ep, RdmMsg *m, size_t cost, RdmPeer *peer, MatchKind kind, const MsgKey &key,
		      fi_addr_t report, const rdm::RdmHeader &h)
{
	m->cost = cost;
	m->key = key;
	m->peer = peer;
	m->kind = kind;
	m->src = report;
	m->hdr = h;
	ep->unknown_src_pending |= !key.src_known;
	(void)ep->matcher.append_unexpected(kind, *m);
}

// The peer's current connection when a message arrived over it (not over
// a loopback end or a connection being replaced), else nullptr.
Conn *arrived_on(RdmPeer *peer, uint32_t qp_num) noexcept
{
	return conn_on_qp(peer->conn.get(), qp_num) ? peer->conn.get() : nullptr;
}

// A peer's Close (rdm_wire.h) that arrived over c (arrived_on): which of our
// outstanding requests it executed, for the flush its disconnect brings
// (rdm_handle_wc).
void handle_close(RdmPeer *peer, Conn *c, uint32_t qp_num, const rdm::RdmHeader &h) noexcept
{
	VRMA_ASSERT_HELD(peer->ep->lock);
	if (!c)
		return; // says nothing of the current connection
	if (c->peer_closed) {
		rdm_drop_malformed(peer, qp_num, "a second Close");
		return;
	}
	c->peer_closed = true;
	const uint64_t tail = c->tx.tail();
	const rdm::CloseSettle r = rdm::close_settle(h.length, c->msgs_retired, c->tx.head() - tail,
						     [c, tail](size_t i) { return c->tx.at(tail + i).message; });
	if (r.malformed) {
		rdm_drop_malformed(peer, qp_num, "a Close counting more messages than were sent");
		return;
	}
	if (r.through >= 0)
		c->close_executed = tail + static_cast<uint64_t>(r.through) + 1;
}

// A message (its completion checked) that arrived while the endpoint
// closes (rdm_linger): counted, and a Close taken; nothing else is served.
void closing_message(RdmEp *ep, const ibv_wc &wc, const uint8_t *buf) noexcept
{
	RdmPeer *peer = ep->by_qp.find(wc.qp_num);
	if (!peer)
		return;
	Conn *c = arrived_on(peer, wc.qp_num);
	if (c)
		c->msgs_received++;
	rdm::RdmHeader h;
	if (rdm::decode_header(buf, wc.byte_len, h) && h.type == rdm::MsgType::Close)
		handle_close(peer, c, wc.qp_num, h);
}

void handle_message(RdmEp *ep, const ibv_wc &wc, const uint8_t *buf)
{
	RdmPeer *peer = ep->by_qp.find(wc.qp_num);
	if (!peer) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM: a message on an unknown queue pair %u\n", wc.qp_num);
		return;
	}
	Conn *on = arrived_on(peer, wc.qp_num);
	if (on) [[likely]] {
		on->msgs_received++; // what our Close will count
		if (on->state.load(std::memory_order_relaxed) != EpState::Connected) [[unlikely]]
			rdm_conn_established(peer, on);
	}
	rdm::RdmHeader h;
	if (!rdm::decode_header(buf, wc.byte_len, h)) {
		rdm_drop_malformed(peer, wc.qp_num, "a malformed message");
		return;
	}
	const fi_addr_t src = rdm_peer_fi_addr(peer);
	const MatchKind kind = rdm::is_tagged(h.type) ? MatchKind::kTagged : MatchKind::kMsg;
	MsgKey key{h.tag, src, src != FI_ADDR_NOTAVAIL};
	// Matching takes the handle (key), completions report this.
	const fi_addr_t report = peer->report_addr;
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
			rdm_place_eager(ep, r, peer, h, payload, report);
			return;
		}
		const size_t cost = rdm_unexpected_cost(false, h);
		if (!rdm_admit_unexpected(ep, peer, wc.qp_num, cost))
			return;
		RdmMsg *m = rdm_new_msg(ep, h.length);
		if (!m) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM: out of memory for an unexpected message: dropped\n");
			rdm_unexpected_gone(ep, cost, false);
			return;
		}
		copy_bytes(m->payload_bytes(), payload, h.length);
		queue_unexpected(ep, m, cost, peer, kind, key, report, h);
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
			rdm_start_rndv(ep, r, peer, h, segs, n, report);
			return;
		}
		const size_t cost = rdm_unexpected_cost(true, h);
		if (!rdm_admit_unexpected(ep, peer, wc.qp_num, cost))
			return;
		RdmMsg *m = rdm_new_msg(ep, 0);
		if (!m) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM: out of memory for an unexpected rendezvous: failing it\n");
			rdm_unexpected_gone(ep, cost, false);
			uint8_t a[kHdr];
			rdm::encode_rndv_done(a, h.msg_id, rdm::RndvStatus::Failed);
			rdm_send_answer(ep, peer, a);
			return;
		}
		m->rndv = true;
		std::copy(segs, segs + n, m->segs);
		m->nsegs = n;
		queue_unexpected(ep, m, cost, peer, kind, key, report, h);
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
	case rdm::MsgType::Close:
		handle_close(peer, on, wc.qp_num, h);
		return;
	case rdm::MsgType::Idle:
		rdm_handle_idle(ep, peer, on, wc.qp_num, h);
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
					rdm_unexpected_gone(ep, m->cost, false);
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
		rdm_finish_rndv(ep, op, err, 0);
	}
}

void rdm_drop_malformed(RdmPeer *peer, uint32_t qp_num, const char *what) noexcept
{
	VRMA_ASSERT_HELD(peer->ep->lock);
	VRMA_WARN(FI_LOG_EP_DATA, "RDM: %s from a peer: dropping its connection\n", what);
	Conn *c = nullptr;
	if (conn_on_qp(peer->conn.get(), qp_num))
		c = peer->conn.get();
	else if (conn_on_qp(peer->loopback.get(), qp_num))
		c = peer->loopback.get();
	if (c) // else it arrived on a connection already dying
		rdm_conn_failed(peer, c, FI_EIO);
}

bool rdm_answer_conn_ok(const RdmPeer *peer, const Conn *sent_on, uint32_t qp_num) noexcept
{
	const Conn *c = peer->conn.get();
	return c && c == sent_on && (conn_on_qp(c, qp_num) || conn_on_qp(peer->loopback.get(), qp_num));
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
		if (rdm_post_reads(ep, op)) {
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
		if (wc.status == IBV_WC_SUCCESS) [[likely]] {
			const rdm::RecvWcCheck check =
				rdm::check_recv_wc(wc.opcode, wc.wc_flags, wc.byte_len, ep->buf_stride);
			if (check != rdm::RecvWcCheck::Ok) [[unlikely]] {
				if (!ep->closing)
					refuse_recv_wc(ep, wc, check);
			} else if (!ep->closing) [[likely]] {
				handle_message(ep, wc, s->buf);
			} else {
				closing_message(ep, wc, s->buf);
			}
		} else if (wc.status != IBV_WC_WR_FLUSH_ERR) {
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
		c->msgs_retired += t.message;
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
	// The peer's Close counted a message at or after this request: the
	// peer executed it, and its disconnect flushed only the acknowledgment
	// (rdm_wire.h). Not a read or a device atomic: their answer is lost.
	if (status == IBV_WC_WR_FLUSH_ERR && seq < c->close_executed &&
	    rdm_executed_is_done(kind, comp_flags)) [[unlikely]]
		status = IBV_WC_SUCCESS;
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
			// What waits for the peer's answer ends as the peer's silence
			// did (the retry budget: FI_ETIMEDOUT), else FI_EIO.
			rdm_conn_failed(peer, c, status == IBV_WC_RETRY_EXC_ERR ? FI_ETIMEDOUT : FI_EIO);
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
			rdm_finish_rndv(ep, op, status == IBV_WC_REM_ACCESS_ERR ? FI_EACCES : err, status);
			return;
		}
		if (ok && seq == op_end)
			rdm_next_reads(ep, op); // the next window, or the end
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
		s->message = false; // never sent: no Close counts it
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


} // namespace vrma
