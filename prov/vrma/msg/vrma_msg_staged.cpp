// Staged receives: an endpoint that receives messages and may be the target
// of remote CQ data, whose application did not take on FI_RX_CQ_DATA.
//
// One RC receive queue serves sends and writes with immediate data in
// arrival order, so remote CQ data would consume whatever receive is at its
// head. Here that queue holds vrma's staging buffers only: remote CQ data
// takes one and gives it back at once; messages (wire::MsgHeader framing,
// cut into pieces of wire::kStageBytes by the sender) are copied into the
// application's receives, which wait in vrma's own queue.
//
// Hazards handled here:
//  - pieces must be consumed strictly in arrival order, and a message is
//    matched to the oldest receive posted when its first piece is consumed;
//  - a staging buffer is reposted only once copied out, so a receiver that
//    posts no receives stops its peer (RNR) instead of losing data;
//  - called from the CQ poller (CQ lock held, then the rx lock) and from
//    fi_recv (rx lock, then cq_push after releasing it): never the reverse.
#include "vrma_msg_post.h"

#include <algorithm>

namespace vrma {

namespace {

constexpr size_t kHeaderLen = sizeof(wire::MsgHeader);

// Posts one staging buffer (rx lock held). On failure the buffer is kept
// for the next attempt: a shrinking queue only slows the peer down.
void repost(Ep *ep, uint8_t *buf)
{
	VRMA_ASSERT_HELD(ep->rx_lock);
	StagedRx &st = *ep->staged;
	ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(wire::kStageBytes),
		    st.stage.mr->lkey};
	ibv_recv_wr wr{};
	wr.sg_list = &sge;
	wr.num_sge = 1;
	if (ssize_t rc = post_recv_locked(ep, wr, nullptr, buf, wire::kStageBytes, true, nullptr,
					  true)) {
		// A credited queue out of credits: expected, retried later.
		if (rc != -FI_EAGAIN || !ep->rx_credits)
			VRMA_WARN(FI_LOG_EP_DATA, "reposting a staging buffer: %s\n",
				  fi_strerror(static_cast<int>(-rc)));
		st.stage.unposted.push_back(buf);
		ep->own_rx_unposted.store(st.stage.unposted.size(), std::memory_order_relaxed);
	}
}

// Gives back buffers an earlier repost failed for (rx lock held).
void repost_unposted(Ep *ep)
{
	VRMA_ASSERT_HELD(ep->rx_lock);
	StagingBuffers &b = ep->staged->stage;
	while (!b.unposted.empty()) {
		const size_t before = b.unposted.size();
		uint8_t *buf = b.unposted.back();
		b.unposted.pop_back();
		repost(ep, buf); // pushes it back on failure
		if (b.unposted.size() == before)
			break; // no credit: the others would fail too
	}
	ep->own_rx_unposted.store(b.unposted.size(), std::memory_order_relaxed);
}

// Copies `len` bytes into the receive at payload offset `at`, clipped to its
// capacity (the rest is truncated).
void copy_into(const StagedRecv &r, uint64_t at, const uint8_t *src, size_t len)
{
	size_t i = 0, base = 0;
	while (len && i < r.count) {
		const size_t seg = r.iov[i].iov_len;
		if (at < base + seg) {
			const size_t off = static_cast<size_t>(at - base);
			const size_t n = std::min(len, seg - off);
			memcpy(static_cast<uint8_t *>(r.iov[i].iov_base) + off, src, n);
			src += n;
			len -= n;
			at += n;
		}
		base += seg;
		i++;
	}
}

// The completion of a received message (rx lock held).
Outcome finish(StagedRx &st, Completion &c, fi_cq_err_entry &e)
{
	const StagedRecv &r = st.cur;
	void *buf = r.count ? r.iov[0].iov_base : nullptr;
	st.active = false;
	if (st.total > r.capacity) {
		e = {};
		e.op_context = r.context;
		e.flags = FI_RECV | FI_MSG | (st.has_data ? FI_REMOTE_CQ_DATA : 0);
		e.len = r.capacity;
		e.buf = buf;
		e.data = st.data;
		e.olen = st.total - r.capacity;
		e.err = FI_ETRUNC;
		return Outcome::Error;
	}
	c = {r.context, FI_RECV | FI_MSG | (st.has_data ? FI_REMOTE_CQ_DATA : 0),
	     static_cast<size_t>(st.total), buf, st.data};
	return Outcome::Success;
}

// A message its sender asked to have confirmed (wire::kMsgConfirm), now in
// the application's receive: answered once the rx lock is released.
struct ConfirmDue {
	bool due = false;
	uint8_t id = 0;
	bool persist = false;
	StagedRecv r;
	size_t len = 0; // bytes copied into r
};

void confirm(Ep *ep, const ConfirmDue &d)
{
	if (!d.due)
		return;
	if (!ep->service) {
		// kCmFlagConfirmsMsgs was not announced: a peer that asks anyway
		// is not vrma speaking its protocol.
		VRMA_WARN(FI_LOG_EP_DATA, "staged receive: a confirmation was asked of an endpoint that offers none\n");
		return;
	}
	pmem_confirm_received(ep, d.id, d.persist, d.r.iov, d.r.count, d.len);
}

// Consumes arrived pieces in order while receives are there to take them;
// returns the completion of the message that ended, if one did (rx lock
// held). At most one can: a new piece completes only the message it belongs
// to, and a new receive takes only one message.
Outcome advance(Ep *ep, Completion &c, fi_cq_err_entry &e, Cntr *&cntr, bool &report,
		ConfirmDue &conf)
{
	VRMA_ASSERT_HELD(ep->rx_lock);
	StagedRx &st = *ep->staged;
	while (!st.arrivals.empty()) {
		const StagedArrival a = st.arrivals.front();
		const uint8_t *payload = a.buf;
		size_t len = a.len;
		if (!st.active) {
			if (st.posted.empty())
				return Outcome::None;
			uint64_t total;
			bool has_data;
			uint32_t data;
			uint8_t cflags, cid;
			if (!wire::decode_msg_header(a.buf, a.len, total, has_data, data, &cflags, &cid)) {
				// Not a vrma peer speaking the protocol it announced:
				// drop the piece, keep the connection.
				VRMA_WARN(FI_LOG_EP_DATA, "staged receive: %u bytes without a message header dropped\n",
					  a.len);
				st.arrivals.pop_front();
				repost(ep, a.buf);
				continue;
			}
			st.cur = st.posted.front();
			st.posted.pop_front();
			st.active = true;
			st.total = total;
			st.seen = 0;
			st.has_data = has_data;
			st.data = data;
			st.confirm_flags = cflags;
			st.confirm_id = cid;
			payload += kHeaderLen;
			len -= kHeaderLen;
		}
		// A peer sending more than it announced is clipped, not trusted.
		len = static_cast<size_t>(std::min<uint64_t>(len, st.total - st.seen));
		copy_into(st.cur, st.seen, payload, len);
		st.seen += len;
		st.arrivals.pop_front();
		repost(ep, a.buf);
		if (st.seen == st.total) {
			cntr = st.cur.cntr;
			report = st.cur.report;
			if (st.confirm_flags & wire::kMsgConfirm) {
				conf.due = true;
				conf.id = st.confirm_id;
				conf.persist = st.confirm_flags & wire::kMsgPersist;
				conf.r = st.cur;
				conf.len = static_cast<size_t>(std::min<uint64_t>(st.total, st.cur.capacity));
			}
			return finish(st, c, e);
		}
	}
	return Outcome::None;
}

CqPending cancelled(const StagedRecv &r)
{
	CqPending p;
	p.is_error = true;
	p.err.op_context = r.context;
	p.err.flags = FI_RECV | FI_MSG;
	p.err.buf = r.count ? r.iov[0].iov_base : nullptr;
	p.err.err = FI_ECANCELED;
	return p;
}

} // namespace

size_t staged_buffer_count(const Ep *ep) noexcept
{
	return staging_buffers_for(ep->rx_depth, params.stage_buffers);
}

int staged_ep_prepare(Ep *ep, StagingBuffers &out, bool credited) noexcept
try {
	StagingBuffers b;
	b.count = own_rx_limit(staged_buffer_count(ep), credited);
	const size_t bytes = b.count * wire::kStageBytes;
	b.buffers.reset(new (std::nothrow) uint8_t[bytes]);
	if (!b.buffers) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: no memory for %zu bytes of staging buffers\n", bytes);
		return -FI_ENOMEM;
	}
	b.mr.reset(ibv_reg_mr(ep->domain->pd.get(), b.buffers.get(), bytes, IBV_ACCESS_LOCAL_WRITE));
	if (!b.mr) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: registering %zu bytes of staging buffers: %s\n",
			  bytes, strerror(err));
		return errno_to_fi(err);
	}
	b.unposted.reserve(b.count); // a failed repost never allocates
	out = std::move(b);
	return 0;
} catch (...) {
	VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: out of memory for the staging buffers\n");
	return -FI_ENOMEM;
}

int staged_ep_post(Ep *ep) noexcept
{
	StagingBuffers &b = ep->staged->stage;
	std::lock_guard guard(ep->rx_lock);
	for (size_t i = 0; i < b.count; i++)
		repost(ep, b.buffers.get() + i * wire::kStageBytes);
	// A credited queue may start with none posted: they follow credits.
	if (b.unposted.size() == b.count && !ep->rx_credits)
		return -FI_ENOMEM; // logged by repost
	VRMA_DBG(FI_LOG_EP_CTRL, "staged receives: %zu buffers of %zu bytes\n", b.count, wire::kStageBytes);
	return 0;
}

void staged_repost_unposted(Ep *ep) noexcept
{
	std::lock_guard guard(ep->rx_lock);
	repost_unposted(ep);
}

ssize_t staged_recv(Ep *ep, const iovec *iov, size_t count, size_t capacity, void *context,
		    bool report, Cntr *cntr) noexcept
try {
	StagedRx &st = *ep->staged;
	Completion c;
	fi_cq_err_entry e;
	Cntr *done_cntr = nullptr;
	bool done_report = false;
	ConfirmDue conf;
	Outcome o;
	StagedRecv r;
	r.context = context;
	std::copy(iov, iov + count, r.iov);
	r.count = count;
	r.capacity = capacity;
	r.report = report;
	r.cntr = cntr;
	bool refused = false;
	{
		std::lock_guard guard(ep->rx_lock);
		if (!ep->conn.qp) [[unlikely]] {
			VRMA_WARN(FI_LOG_EP_DATA, "receive posted before fi_enable\n");
			return -FI_EOPBADSTATE;
		}
		if (st.posted.size() >= ep->rx_depth)
			return -FI_EAGAIN;
		// The connection is gone: nothing will arrive; the receive ends
		// as one the device flushed would.
		refused = st.cancelled;
		if (!refused)
			st.posted.push_back(r);
		repost_unposted(ep);
		o = refused ? Outcome::None : advance(ep, c, e, done_cntr, done_report, conf);
	}
	confirm(ep, conf);
	if (refused) {
		count_completion(cntr, false);
		if (ep->rx_cq)
			cq_push(ep->rx_cq, cancelled(r));
		return 0;
	}
	if (o == Outcome::None)
		return 0;
	count_completion(done_cntr, o == Outcome::Success);
	if (!ep->rx_cq || (!done_report && o == Outcome::Success))
		return 0;
	CqPending p;
	p.is_error = o == Outcome::Error;
	p.comp = c;
	p.err = e;
	cq_push(ep->rx_cq, p);
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

Outcome staged_rx_completion(Ep *ep, Cq *cq, const ibv_wc &wc, void *buf, Completion &c,
			     fi_cq_err_entry &e) noexcept
try {
	VRMA_ASSERT_HELD(cq->lock);
	StagedRx &st = *ep->staged;
	if (wc.status != IBV_WC_SUCCESS) {
		if (wc.status != IBV_WC_WR_FLUSH_ERR)
			ep_connection_failed(ep);
		// The queue is flushed: every receive waiting in vrma's queue
		// ends now, as the device's own would.
		std::deque<StagedRecv> failed;
		{
			std::lock_guard guard(ep->rx_lock);
			if (st.cancelled)
				return Outcome::None;
			st.cancelled = true;
			if (st.active)
				failed.push_back(st.cur);
			st.active = false;
			failed.insert(failed.end(), st.posted.begin(), st.posted.end());
			st.posted.clear();
			st.arrivals.clear();
		}
		for (const StagedRecv &r : failed) {
			count_completion(r.cntr, false);
			if (ep->rx_cq == cq) // the CQ being polled: its lock is held
				cq_enqueue(cq, cancelled(r));
			else if (ep->rx_cq)
				cq_push(ep->rx_cq, cancelled(r));
		}
		return Outcome::None;
	}
	auto *piece = static_cast<uint8_t *>(buf);
	// What completes for the application goes to its receive CQ: returned
	// when that is the CQ being polled, pushed when this is the service's.
	auto deliver = [&](Outcome o) {
		if (o == Outcome::None || ep->rx_cq == cq)
			return o;
		CqPending p;
		p.is_error = o == Outcome::Error;
		p.comp = c;
		p.err = e;
		cq_push(ep->rx_cq, p);
		return Outcome::None;
	};
	if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM || (wc.wc_flags & IBV_WC_WITH_IMM)) {
		// Remote CQ data, or (a send with immediate data) the answer to
		// one of our commits or confirmed messages: the buffer goes
		// straight back.
		{
			std::lock_guard guard(ep->rx_lock);
			repost(ep, piece);
		}
		if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
			if (ep->service)
				pmem_answer(ep, ntohl(wc.imm_data));
			else
				VRMA_WARN(FI_LOG_EP_DATA, "staged receive: an answer to nothing asked dropped\n");
			return Outcome::None;
		}
		if (!ep->rx_cq)
			return Outcome::None;
		c = {nullptr, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, wc.byte_len, nullptr,
		     ntohl(wc.imm_data)};
		return deliver(Outcome::Success);
	}
	Cntr *cntr = nullptr;
	bool report = false;
	ConfirmDue conf;
	Outcome o = Outcome::None;
	bool control = false;
	{
		std::lock_guard guard(ep->rx_lock);
		if (st.stream_left == 0) {
			uint64_t total;
			bool has_data;
			uint32_t data;
			if (wc.byte_len && (piece[0] == wire::kCommitRequest || piece[0] == wire::kRmaEvent))
				control = true;
			else if (wire::decode_msg_header(piece, wc.byte_len, total, has_data, data) &&
				 total + kHeaderLen > wc.byte_len)
				st.stream_left = total + kHeaderLen - wc.byte_len;
		} else {
			st.stream_left -= std::min<uint64_t>(st.stream_left, wc.byte_len);
		}
		if (!control) {
			st.arrivals.push_back({piece, wc.byte_len});
			o = advance(ep, c, e, cntr, report, conf);
		}
	}
	if (control) {
		// A commit request or an RMA event between messages: handled
		// (copied) before its buffer is reposted.
		if (ep->service)
			pmem_control_message(ep, piece, wc.byte_len);
		else
			VRMA_WARN(FI_LOG_EP_DATA, "staged receive: a commit or event message for an endpoint without FI_RMA_PMEM/FI_RMA_EVENT dropped\n");
		std::lock_guard guard(ep->rx_lock);
		repost(ep, piece);
		return Outcome::None;
	}
	confirm(ep, conf);
	if (o == Outcome::None)
		return o;
	count_completion(cntr, o == Outcome::Success);
	if (!ep->rx_cq || (o == Outcome::Success && !report))
		return Outcome::None;
	return deliver(o);
} catch (...) {
	VRMA_WARN(FI_LOG_CQ, "out of memory handling a staged receive\n");
	return Outcome::None;
}

ssize_t staged_cancel(Ep *ep, void *context) noexcept
{
	StagedRx &st = *ep->staged;
	CqPending p;
	Cntr *cntr = nullptr;
	{
		std::lock_guard guard(ep->rx_lock);
		auto it = std::find_if(st.posted.begin(), st.posted.end(),
				       [&](const StagedRecv &r) { return r.context == context; });
		if (it == st.posted.end())
			return -FI_ENOENT; // unknown, or already matched
		p = cancelled(*it);
		cntr = it->cntr;
		st.posted.erase(it);
	}
	count_completion(cntr, false);
	if (ep->rx_cq)
		cq_push(ep->rx_cq, p);
	return 0;
}

size_t staged_rx_left(Ep *ep) noexcept
{
	std::lock_guard guard(ep->rx_lock);
	const size_t used = ep->staged->posted.size();
	return used >= ep->rx_depth ? 0 : ep->rx_depth - used;
}

} // namespace vrma
