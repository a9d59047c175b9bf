// Completion queues: one ibv_cq (+ completion channel for FI_WAIT_FD) shared
// by the send and receive queues of any number of endpoints.
//
// Hazards handled here:
//  - work completions carry only a wr_id for errors (opcode is undefined), so
//    the slot a wr_id points to says which endpoint and queue it belongs to
//    (an unwritten slot's, kTxBare, says by its tag what the request was);
//  - an error must not overtake successes polled before it, so once an error
//    is parked, later successes are parked behind it;
//  - an endpoint's slots must outlive every completion that names them: an
//    endpoint is only freed after its rings drained (cq_drain_endpoint).
#include "vrma_msg_ep.h"
#include "vrma_progress.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>

namespace vrma {

namespace {

size_t format_size(fi_cq_format f)
{
	switch (f) {
	case FI_CQ_FORMAT_CONTEXT:
		return sizeof(fi_cq_entry);
	case FI_CQ_FORMAT_MSG:
		return sizeof(fi_cq_msg_entry);
	case FI_CQ_FORMAT_DATA:
		return sizeof(fi_cq_data_entry);
	case FI_CQ_FORMAT_TAGGED:
		return sizeof(fi_cq_tagged_entry);
	default:
		return 0;
	}
}

void write_entry(fi_cq_format fmt, void *dst, const Completion &c)
{
	switch (fmt) {
	case FI_CQ_FORMAT_CONTEXT:
		*static_cast<fi_cq_entry *>(dst) = {c.op_context};
		break;
	case FI_CQ_FORMAT_MSG:
		*static_cast<fi_cq_msg_entry *>(dst) = {c.op_context, c.flags, c.len};
		break;
	case FI_CQ_FORMAT_DATA:
		*static_cast<fi_cq_data_entry *>(dst) = {c.op_context, c.flags, c.len, c.buf, c.data};
		break;
	default:
		*static_cast<fi_cq_tagged_entry *>(dst) = {c.op_context, c.flags, c.len, c.buf,
							   c.data, c.tag};
		break;
	}
}

void fill_error(fi_cq_err_entry &e, const ibv_wc &wc, void *context, uint64_t flags, void *buf)
{
	e = {};
	e.op_context = context;
	e.flags = flags;
	e.buf = buf;
	e.err = wc_status_to_fi(wc.status);
	e.prov_errno = static_cast<int>(wc.status);
}

// A credited queue's retired slots give their credits back (CQ lock held);
// vrma's own receives left unposted for want of credits try again.
[[gnu::noinline]] void credits_back(Ep *ep, Cq *pool, size_t n)
{
	cq_credit_give(pool, n);
	if (ep->own_rx_unposted.load(std::memory_order_relaxed) &&
	    !ep->conn.closing.load(std::memory_order_relaxed))
		ep_repost_own_rx(ep);
}

// A send operation's successful end: counted, and reported if asked.
inline Outcome tx_success(Cntr *cntr, bool report, const Completion &done, Completion &c)
{
	count_completion(cntr, true);
	if (!report)
		return Outcome::None;
	c = done;
	return Outcome::Success;
}

// A delivery-complete write whose read-back was shared (DcMark::Deferred),
// retired by a later completion (cq's lock held): proven by a successful
// read, else failed with that completion's status. Queued ahead of what
// the completion itself turns into.
[[gnu::noinline]] void complete_deferred(Cq *cq, Ep *ep, const TxSlot &t, const ibv_wc &wc,
					 bool proven) noexcept
{
	VRMA_ASSERT_HELD(cq->lock);
	CqPending p;
	if (proven) {
		count_completion(t.cntr, true);
		if (!t.report)
			return;
		p.comp = {t.context, t.comp_flags, t.len, nullptr, 0};
	} else {
		count_completion(t.cntr, false);
		if (!ep->tx_cq)
			return;
		p.is_error = true;
		fill_error(p.err, wc, t.context, t.comp_flags, nullptr);
		if (wc.status == IBV_WC_SUCCESS) {
			// Retired by something other than a read: never proven.
			p.err.err = FI_EIO;
			p.err.prov_errno = IBV_WC_GENERAL_ERR;
		}
	}
	try {
		cq_enqueue(cq, p);
	} catch (...) {
		VRMA_WARN(FI_LOG_CQ, "out of memory queuing a completion: entry lost\n");
	}
}

// handle_wc for a send request that failed or is marked (TxSlot::commit, a
// pmem commit; TxSlot::dc, a delivery write sharing a read-back).
[[gnu::noinline]] Outcome tx_wc_marked(Cq *cq, Ep *ep, TxSlot *s, const ibv_wc &wc, Completion &c,
				       fi_cq_err_entry &e)
{
	VRMA_ASSERT_HELD(cq->lock);
	// Read the slot before retiring it: the poster may reuse it after.
	const Completion done{s->context, s->comp_flags, s->len, nullptr, 0};
	const bool report = s->report;
	const uint64_t seq = s->seq;
	const bool op_done = seq == s->op_end;
	const uint64_t op_end = s->op_end;
	const uint32_t commit = s->commit;
	const DcMark mark = s->dc;
	Cntr *cntr = s->cntr;
	const bool closing = ep->conn.closing.load(std::memory_order_relaxed);
	// A read's success proves the writes before it (RC executes it after
	// them); anything else leaves the deferred writes it retires unproven.
	const bool proven = wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ;
	const size_t retired = ep->conn.tx.retire_through(seq, [&](TxSlot &t, uint64_t ts) {
		if (t.seq != ts)
			return; // left unwritten (kTxBare): an inject, nothing to complete
		if (dc::completes_deferred(t.dc, ts == t.op_end, ts == seq, closing))
			complete_deferred(cq, ep, t, wc, proven);
	});
	if (ep->conn.tx_credits) [[unlikely]]
		credits_back(ep, ep->conn.tx_credits, retired);
	if (closing)
		return Outcome::None;
	if (wc.status != IBV_WC_SUCCESS) {
		// One error per operation: the flushes of its later requests
		// are not reported again.
		if (op_end == ep->conn.failed_op_end)
			return Outcome::None;
		ep->conn.failed_op_end = op_end;
		if (wc.status != IBV_WC_WR_FLUSH_ERR)
			ep_connection_failed(ep);
		if (!dc::reports(mark))
			return Outcome::None; // vrma's read: the walk failed what it proves
		if (commit && !pmem_claim_commit(ep, commit))
			return Outcome::None; // answered before the error
		count_completion(cntr, false);
		// Errors go to the transmit CQ, if the endpoint has one.
		if (!ep->tx_cq)
			return Outcome::None;
		fill_error(e, wc, done.op_context, done.flags, nullptr);
		return Outcome::Error;
	}
	// An intermediate request signaled to reclaim slots: not the end.
	// vrma's read has no completion; a pmem commit's is the target's answer.
	if (!op_done || !dc::reports(mark) || commit)
		return Outcome::None;
	return tx_success(cntr, report, done, c);
}

Outcome handle_wc(Cq *cq, const ibv_wc &wc, Completion &c, fi_cq_err_entry &e);

// handle_wc for a request whose slot was left unwritten (kTxBare): an
// inject, which reports nothing and counts on its endpoint's counter of
// its kind. A success is counted; an error is handled as any other once
// the slot says what the tag does (the slot is the completion side's
// until it retires).
[[gnu::noinline]] Outcome tx_wc_bare(Cq *cq, const ibv_wc &wc, Completion &c, fi_cq_err_entry &e)
{
	VRMA_ASSERT_HELD(cq->lock);
	auto *s = reinterpret_cast<TxSlot *>(wc.wr_id & ~kTxBareMask);
	Conn *conn = s->conn;
	Ep *ep = conn->ep;
	const bool send = wc.wr_id & kTxBareSend;
	Cntr *cntr = send ? ep->cntr_send : ep->cntr_write;
	const uint64_t seq = conn->tx.seq_of(*s);
	if (wc.status == IBV_WC_SUCCESS) {
		const size_t retired = conn->tx.retire_through(seq, [](TxSlot &, uint64_t) {});
		if (conn->tx_credits) [[unlikely]]
			credits_back(ep, conn->tx_credits, retired);
		if (!conn->closing.load(std::memory_order_relaxed))
			count_completion(cntr, true);
		return Outcome::None;
	}
	s->fill(seq, seq, nullptr, send ? FI_SEND | FI_MSG : FI_RMA | FI_WRITE, 0, false, cntr, 0, send);
	ibv_wc filled = wc;
	filled.wr_id = reinterpret_cast<uintptr_t>(s);
	return handle_wc(cq, filled, c, e);
}

// Turns one work completion into what the application sees, retiring the
// slots it covers.
// `cq` is the CQ being polled (its lock held).
Outcome handle_wc(Cq *cq, const ibv_wc &wc, Completion &c, fi_cq_err_entry &e)
{
	VRMA_ASSERT_HELD(cq->lock);
	device_completed(wc.wr_id);
	if (wc.wr_id & kTxBareMask) [[unlikely]]
		return tx_wc_bare(cq, wc, c, e);
	auto *h = reinterpret_cast<SlotHeader *>(wc.wr_id);
	// Only MSG connections complete into application CQs.
	Ep *ep = h->conn->ep;
	if (h->kind == SlotKind::Tx) {
		auto *s = static_cast<TxSlot *>(h);
		if ((s->commit | static_cast<uint32_t>(s->dc) | static_cast<uint32_t>(wc.status)) != 0) [[unlikely]]
			return tx_wc_marked(cq, ep, s, wc, c, e);
		// Read the slot before retiring it: the poster may reuse it after.
		const Completion done{s->context, s->comp_flags, s->len, nullptr, 0};
		const bool report = s->report;
		const bool op_done = s->seq == s->op_end;
		Cntr *cntr = s->cntr;
		const size_t retired = ep->conn.tx.retire_through(s->seq, [](TxSlot &, uint64_t) {});
		if (ep->conn.tx_credits) [[unlikely]]
			credits_back(ep, ep->conn.tx_credits, retired);
		if (ep->conn.closing.load(std::memory_order_relaxed))
			return Outcome::None;
		// An intermediate request signaled to reclaim slots: not the end.
		if (!op_done)
			return Outcome::None;
		return tx_success(cntr, report, done, c);
	}
	auto *s = static_cast<RxSlot *>(h);
	void *context = s->context;
	void *buf = s->buf;
	const bool rx_report = s->report;
	const bool internal = s->internal;
	Cntr *cntr = s->cntr;
	const size_t retired = ep->rx.retire_through(s->seq, [](RxSlot &, uint64_t) {});
	if (ep->rx_credits) [[unlikely]]
		credits_back(ep, ep->rx_credits, retired);
	if (ep->conn.closing.load(std::memory_order_relaxed))
		return Outcome::None;
	if (internal && ep->rx_mode == RxMode::Staged)
		return staged_rx_completion(ep, cq, wc, buf, c, e);
	if (internal && wc.status == IBV_WC_SUCCESS && ep->rx_mode == RxMode::Service) {
		pmem_rx_completion(ep, wc, buf); // reposts, answers, forwards
		return Outcome::None;
	}
	if (internal && wc.status == IBV_WC_SUCCESS) {
		// Keep the provider's receive queue full.
		if (int rc = ep_post_own_rx(ep)) {
			if (rc == -FI_EAGAIN && ep->rx_credits)
				ep->own_rx_unposted.fetch_add(1); // no credit now: later
			else
				VRMA_WARN(FI_LOG_CQ, "reposting a vrma receive: %s\n", fi_strerror(-rc));
		}
	}
	count_completion(cntr, wc.status == IBV_WC_SUCCESS);
	if (wc.status != IBV_WC_SUCCESS) {
		if (wc.status != IBV_WC_WR_FLUSH_ERR)
			ep_connection_failed(ep);
		if (!ep->rx_cq || ep->service_cq)
			return Outcome::None; // vrma's own receive: nothing to report

		fill_error(e, wc, context, FI_RECV | FI_MSG, buf);
		return Outcome::Error;
	}
	if (!rx_report)
		return Outcome::None;
	c = {context, FI_RECV | FI_MSG, wc.byte_len, buf, 0};
	if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		// FI_RX_CQ_DATA mode: the application's receive was consumed by a
		// remote write with immediate data; its buffer was not touched.
		c.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
		c.buf = nullptr;
		c.data = ntohl(wc.imm_data);
	} else if (wc.wc_flags & IBV_WC_WITH_IMM) {
		c.flags |= FI_REMOTE_CQ_DATA;
		c.data = ntohl(wc.imm_data);
	}
	return Outcome::Success;
}

// The device CQ gets completions only while a queue pair uses it (entries
// reserved: MSG endpoints); a CQ of RDM endpoints alone never polls it
// (lock held).
bool device_cq_used(const Cq *cq)
{
	return cq->credits.in_use();
}

// Polls up to `max` work completions into the pending queue (lock held).
// Returns the number of work completions polled, or a negative FI_E* code.
int poll_to_pending(Cq *cq, size_t max)
{
	VRMA_ASSERT_HELD(cq->lock);
	if (!device_cq_used(cq))
		return 0;
	ibv_wc wcs[16];
	size_t total = 0;
	while (total < max) {
		int want = static_cast<int>(std::min<size_t>(16, max - total));
		int k = ibv_poll_cq(cq->cq.get(), want, wcs);
		if (k < 0) {
			VRMA_WARN(FI_LOG_CQ, "ibv_poll_cq failed: %d\n", k);
			return -FI_EIO;
		}
		for (int i = 0; i < k; i++) {
			CqPending p;
			Outcome o = handle_wc(cq, wcs[i], p.comp, p.err);
			if (o == Outcome::None)
				continue;
			p.is_error = o == Outcome::Error;
			cq_enqueue(cq, p);
		}
		total += static_cast<size_t>(k);
		if (k < want)
			break;
	}
	return static_cast<int>(total);
}

// Polls until the device queue is empty (lock held): after the CQ was armed,
// completions already queued raise no event, so none may be left behind.
void poll_all_to_pending(Cq *cq)
{
	VRMA_ASSERT_HELD(cq->lock);
	constexpr size_t kBatch = 256;
	while (poll_to_pending(cq, kBatch) == static_cast<int>(kBatch)) {
	}
}

// Work completions a poller that is not the CQ's reader may still move into
// the pending queue (Cq::limit; lock held).
size_t background_room(const Cq *cq)
{
	const size_t queued = cq->queued.load(std::memory_order_relaxed);
	return queued >= cq->limit ? 0 : cq->limit - queued;
}

// poll_all_to_pending within the room: what it leaves in the device queue
// is the reader's, which polls the device itself (lock held).
void poll_all_within_limit(Cq *cq)
{
	VRMA_ASSERT_HELD(cq->lock);
	constexpr size_t kBatch = 256;
	for (;;) {
		const size_t max = std::min(kBatch, background_room(cq));
		if (!max || poll_to_pending(cq, max) != static_cast<int>(max))
			return;
	}
}

void drain_channel(Cq *cq)
{
	if (!cq->channel)
		return;
	ibv_cq *ev_cq;
	void *ev_ctx;
	while (ibv_get_cq_event(cq->channel.get(), &ev_cq, &ev_ctx) == 0)
		ibv_ack_cq_events(ev_cq, 1);
}

// A fi_cq_read running the progress of the CQ's RDM endpoints on this
// thread: their successful completions for that CQ go straight into the
// reader's buffer (cq_complete) instead of through the pending queue and
// the CQ's lock. Only while nothing is queued: an entry queued before must
// be read first. An endpoint's entries are produced under its lock, so one
// queued earlier by another thread is visible in Cq::queued here.
struct CqSink {
	Cq *cq;
	uint8_t *out;
	fi_addr_t *src_addr;
	size_t count;
	size_t n;
};
// initial-exec: a general-dynamic TLS access costs a call on every
// completion; one pointer fits the static TLS glibc keeps for dlopen.
thread_local CqSink *cq_sink [[gnu::tls_model("initial-exec")]] = nullptr;

class SinkScope {
public:
	explicit SinkScope(CqSink *s) noexcept : prev_(cq_sink) { cq_sink = s; }
	~SinkScope() { cq_sink = prev_; }
	SinkScope(const SinkScope &) = delete;
	SinkScope &operator=(const SinkScope &) = delete;

private:
	CqSink *prev_;
};

ssize_t cq_read_impl(Cq *cq, void *buf, size_t count, fi_addr_t *src_addr)
{
	if (!buf && count) {
		VRMA_WARN(FI_LOG_CQ, "fi_cq_read: NULL buffer for %zu entries\n", count);
		return -FI_EINVAL;
	}
	auto *out = static_cast<uint8_t *>(buf);
	CqSink sink{cq, out, src_addr, count, 0};
	// RDM endpoints' completions reach this queue through cq_complete and
	// cq_push; never under cq->lock.
	if (cq->rdm.any()) {
		{
			SinkScope scope(&sink);
			cq->rdm.progress();
		}
		// Nothing queued and no device queue to look at: done without
		// the CQ's lock, with what was delivered or -FI_EAGAIN (the
		// busy-polling reader's common case). Hazard: Cq::armed stays as
		// it was; a stale true costs cq_push one spurious wakeup, which
		// fi_cq_sread absorbs.
		if ((count && sink.n == count) || (!device_cq_used(cq) &&
					cq->queued.load(std::memory_order_relaxed) == 0))
			return sink.n ? static_cast<ssize_t>(sink.n) : -FI_EAGAIN;
	}
	size_t n = sink.n;
	std::lock_guard guard(cq->lock);
	cq->armed = false;
	auto emit = [&](const Completion &c, fi_addr_t src) {
		write_entry(cq->format, out + n * cq->entry_size, c);
		if (src_addr)
			src_addr[n] = src;
		n++;
	};
	// Queued successes, up to an error (which fi_cq_readerr takes).
	auto drain_successes = [&] {
		while (n < count && !cq->pending.empty() && !cq->pending.front().is_error) {
			emit(cq->pending.front().comp, cq->pending.front().src);
			cq_dequeue(cq);
		}
	};
	drain_successes();
	if (cq->pending.empty() && device_cq_used(cq)) {
		ibv_wc wcs[16];
		while (n < count) {
			int want = static_cast<int>(std::min<size_t>(16, count - n));
			int k = ibv_poll_cq(cq->cq.get(), want, wcs);
			if (k < 0) {
				VRMA_WARN(FI_LOG_CQ, "ibv_poll_cq failed: %d\n", k);
				return n ? static_cast<ssize_t>(n) : -FI_EIO;
			}
			for (int i = 0; i < k; i++) {
				CqPending p;
				Outcome o = handle_wc(cq, wcs[i], p.comp, p.err);
				if (o == Outcome::None) {
					// A shared read-back's completion queued the
					// writes it proves.
					if (!cq->pending.empty()) [[unlikely]]
						drain_successes();
					continue;
				}
				if (o == Outcome::Success && cq->pending.empty() && n < count) {
					emit(p.comp, FI_ADDR_NOTAVAIL);
					continue;
				}
				p.is_error = o == Outcome::Error;
				cq_enqueue(cq, p);
				drain_successes();
			}
			if (k < want)
				break;
		}
	}
	if (n)
		return static_cast<ssize_t>(n);
	if (!cq->pending.empty() && cq->pending.front().is_error)
		return -FI_EAVAIL;
	return -FI_EAGAIN;
}

ssize_t cq_read(fid_cq *f, void *buf, size_t count) noexcept
{
	return cq_read_impl(static_cast<Cq *>(f), buf, count, nullptr);
}

ssize_t cq_readfrom(fid_cq *f, void *buf, size_t count, fi_addr_t *src_addr) noexcept
{
	return cq_read_impl(static_cast<Cq *>(f), buf, count, src_addr);
}

ssize_t cq_readerr(fid_cq *f, fi_cq_err_entry *buf, uint64_t flags) noexcept
{
	Cq *cq = static_cast<Cq *>(f);
	if (!buf) {
		VRMA_WARN(FI_LOG_CQ, "fi_cq_readerr: NULL buffer\n");
		return -FI_EINVAL;
	}
	(void)flags;
	// RDM endpoints' completions reach this queue through cq_push; never
	// under cq->lock.
	if (cq->rdm.any()) [[unlikely]]
		cq->rdm.progress();
	std::lock_guard guard(cq->lock);
	if (cq->pending.empty())
		poll_to_pending(cq, 64);
	if (cq->pending.empty() || !cq->pending.front().is_error)
		return -FI_EAGAIN;
	// Only the bytes the application's API version has (abi_compat.h).
	abi::copy_cq_err(buf, cq->pending.front().err, cq->domain->api(), FI_ADDR_NOTAVAIL);
	cq_dequeue(cq);
	return 1;
}

ssize_t cq_sreadfrom(fid_cq *f, void *buf, size_t count, fi_addr_t *src_addr, const void *,
		     int timeout) noexcept
{
	Cq *cq = static_cast<Cq *>(f);
	if (cq->wait_obj == FI_WAIT_NONE) {
		VRMA_WARN(FI_LOG_CQ, "fi_cq_sread on a CQ opened with FI_WAIT_NONE\n");
		return -FI_ENOSYS;
	}
	const Deadline deadline(timeout);
	for (;;) {
		ssize_t r = cq_read_impl(cq, buf, count, src_addr);
		if (r != -FI_EAGAIN)
			return r;
		if (cq_trywait(cq))
			continue; // something arrived while arming
		if (deadline.expired())
			return -FI_EAGAIN;
		int ready[2];
		int n = wait_epoll(cq->epoll_fd.get(), deadline, ready, 2);
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			if (ready[i] != cq->signal_fd.get())
				continue;
			eventfd_clear(cq->signal_fd.get());
			// Only fi_cq_signal ends the wait empty-handed. An entry the
			// provider queued (cq_push) is read by the loop; its wakeup
			// may also be stale, its entry read by an earlier call.
			if (cq->user_signal.exchange(false))
				return cq_read_impl(cq, buf, count, src_addr);
		}
	}
}

ssize_t cq_sread(fid_cq *f, void *buf, size_t count, const void *cond, int timeout) noexcept
{
	return cq_sreadfrom(f, buf, count, nullptr, cond, timeout);
}

int cq_signal(fid_cq *f) noexcept
{
	Cq *cq = static_cast<Cq *>(f);
	if (cq->signal_fd.get() < 0)
		return -FI_ENOSYS;
	cq->user_signal.store(true);
	return eventfd_signal(cq->signal_fd.get());
}

const char *cq_strerror(fid_cq *, int prov_errno, const void *, char *buf, size_t len) noexcept
{
	const char *s = ibv_wc_status_str(static_cast<ibv_wc_status>(prov_errno));
	if (buf && len) {
		strncpy(buf, s, len - 1);
		buf[len - 1] = '\0';
		return buf;
	}
	return s;
}

int cq_close(fid *f) noexcept
{
	Cq *cq = from_fid<Cq>(f);
	if (cq->refs.load()) {
		VRMA_WARN(FI_LOG_CQ, "CQ still bound to %d endpoints\n", cq->refs.load());
		return -FI_EBUSY;
	}
	// The progress thread forgets the CQ before its channel goes.
	progress_detach(cq->domain, cq->progress_key);
	{
		std::lock_guard guard(cq->lock);
		drain_channel(cq);
	}
	ibv_cq *raw = cq->cq.release();
	if (int rc = ibv_destroy_cq(raw)) {
		VRMA_WARN(FI_LOG_CQ, "ibv_destroy_cq: %s\n", strerror(rc));
		cq->cq.reset(raw);
		return errno_to_fi(rc);
	}
	cq->domain->refs--;
	delete cq;
	return 0;
}

int cq_control(fid *f, int command, void *arg) noexcept
{
	Cq *cq = from_fid<Cq>(f);
	return wait_control(cq->wait_obj, cq->epoll_fd.get(), command, arg, "CQ");
}

constexpr fi_ops cq_fi_ops = {
	.size = sizeof(fi_ops),
	.close = cq_close,
	.bind = fid_no_bind,
	.control = cq_control,
	.ops_open = fid_no_ops_open,
	.tostr = fid_tostr,
	.ops_set = fid_no_ops_set,
};

constexpr fi_ops_cq cq_ops = {
	.size = sizeof(fi_ops_cq),
	.read = cq_read,
	.readfrom = cq_readfrom,
	.readerr = cq_readerr,
	.sread = cq_sread,
	.sreadfrom = cq_sreadfrom,
	.signal = cq_signal,
	.strerror = cq_strerror,
};

int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

} // namespace

int cq_trywait(Cq *cq) noexcept
{
	if (cq->wait_obj == FI_WAIT_NONE) {
		VRMA_WARN(FI_LOG_CQ, "fi_trywait on a CQ without a wait object\n");
		return -FI_EINVAL;
	}
	if (cq->rdm.any()) {
		if (int rc = cq->rdm.trywait())
			return rc;
	}
	std::lock_guard guard(cq->lock);
	// Whoever drains the channel re-arms it, entries pending or not: the
	// domain's progress thread (FI_PROGRESS_AUTO) sleeps on it too.
	drain_channel(cq);
	if (int rc = ibv_req_notify_cq(cq->cq.get(), 0))
		return errno_to_fi(rc);
	if (!cq->pending.empty())
		return -FI_EAGAIN;
	// Completions that arrived before arming raise no event: look once more.
	poll_all_to_pending(cq);
	if (!cq->pending.empty())
		return -FI_EAGAIN;
	cq->armed = true;
	return 0;
}

void cq_push(Cq *cq, const CqPending &entry) noexcept
{
	bool wake;
	try {
		std::lock_guard guard(cq->lock);
		cq_enqueue(cq, entry);
		wake = cq->armed;
	} catch (...) {
		VRMA_WARN(FI_LOG_CQ, "out of memory queuing a completion: entry lost\n");
		return;
	}
	// Wake a reader that may sleep on the wait object (it armed the CQ
	// with fi_trywait under the lock): no device event will. A reader
	// that has not armed it yet finds the entry when it does.
	if (wake && cq->signal_fd.get() >= 0)
		eventfd_signal(cq->signal_fd.get());
}

void cq_complete(Cq *cq, const Completion &c, fi_addr_t src) noexcept
{
	CqSink *s = cq_sink;
	if (s && s->cq == cq && s->n < s->count &&
	    cq->queued.load(std::memory_order_relaxed) == 0) [[likely]] {
		write_entry(cq->format, s->out + s->n * cq->entry_size, c);
		if (s->src_addr)
			s->src_addr[s->n] = src;
		s->n++;
		return;
	}
	CqPending p;
	p.comp = c;
	p.src = src;
	cq_push(cq, p);
}

void cq_progress_event(Cq *cq) noexcept
{
	bool wake = false;
	try {
		std::lock_guard guard(cq->lock);
		drain_channel(cq);
		if (int rc = ibv_req_notify_cq(cq->cq.get(), 0))
			VRMA_WARN(FI_LOG_CQ, "data progress: ibv_req_notify_cq: %s\n", strerror(rc));
		poll_all_within_limit(cq);
		wake = cq->armed && !cq->pending.empty();
	} catch (...) {
		VRMA_WARN(FI_LOG_CQ, "data progress: out of memory queuing completions\n");
	}
	// A reader armed by fi_trywait may sleep on the wait object, whose
	// channel this thread just drained: wake it as cq_push does.
	if (wake && cq->signal_fd.get() >= 0)
		eventfd_signal(cq->signal_fd.get());
}

void cq_progress(Cq *cq) noexcept
{
	std::lock_guard guard(cq->lock);
	poll_to_pending(cq, std::min<size_t>(256, background_room(cq)));
}

namespace {

// Resizes the device CQ to `want` entries (lock held): its new number of
// entries, which the caller adds to the credit pool (CqCredits::grown), or
// 0 when the device refuses.
size_t cq_grow(Cq *cq, size_t want) noexcept
{
	VRMA_ASSERT_HELD(cq->lock);
	if (int rc = ibv_resize_cq(cq->cq.get(), static_cast<int>(want))) {
		VRMA_WARN(FI_LOG_CQ, "ibv_resize_cq(%zu): %s\n", want, strerror(rc));
		return 0;
	}
	const size_t now = static_cast<size_t>(cq->cq->cqe);
	VRMA_INFO(FI_LOG_CQ, "CQ grown to %zu entries\n", now);
	return now;
}

size_t max_cq_entries(const Cq *cq) noexcept
{
	return cq_entries_limit(static_cast<size_t>(cq->domain->dev_attr.max_cqe), params.max_cqe);
}

} // namespace

int cq_reserve(Cq *cq, size_t entries) noexcept
{
	std::lock_guard guard(cq->lock);
	const size_t max = max_cq_entries(cq);
	const auto grow = [cq](size_t want) noexcept { return cq_grow(cq, want); };
	switch (cq->credits.reserve(entries, max, grow)) {
	case CqCredits::Reserve::Done:
		return 0;
	case CqCredits::Reserve::TooLarge:
		VRMA_INFO(FI_LOG_CQ, "CQ would need %zu entries; the device allows %zu, %zu of them kept for credits\n",
			  cq->credits.reserved() + entries, max, max / kCqPoolShare);
		return -FI_ENOSPC;
	case CqCredits::Reserve::Shared:
	case CqCredits::Reserve::NotGrown:
		break;
	}
	return -FI_ENOSPC;
}

void cq_unreserve(Cq *cq, size_t entries) noexcept
{
	std::lock_guard guard(cq->lock);
	cq->credits.unreserve(entries);
}

int cq_credit_attach(Cq *cq, size_t floor) noexcept
{
	std::lock_guard guard(cq->lock);
	const auto grow = [cq](size_t want) noexcept { return cq_grow(cq, want); };
	if (!cq->credits.attach(floor, max_cq_entries(cq), grow)) {
		VRMA_WARN(FI_LOG_CQ, "CQ of %zu entries: not even %zu free for another queue\n", cq->credits.cqe(),
			  floor);
		return -FI_ENOSPC;
	}
	VRMA_INFO(FI_LOG_CQ, "queue bound with credits (%zd free of %zu entries)\n", cq->credits.free(),
		  cq->credits.cqe());
	return 0;
}

void cq_credit_detach(Cq *cq, size_t spare) noexcept
{
	std::lock_guard guard(cq->lock);
	cq->credits.detach(spare);
}

bool cq_drain_endpoint(Cq *cq, Ep *ep, bool tx_side, int timeout_ms) noexcept
{
	const Deadline deadline(timeout_ms);
	auto done = [&] { return tx_side ? ep->conn.tx.outstanding() == 0 : ep->rx.outstanding() == 0; };
	for (;;) {
		{
			// Seen under the lock: another poller (the domain's progress
			// thread, an application thread) that retired the last slot is
			// out of handle_wc, so the endpoint may be freed.
			std::lock_guard guard(cq->lock);
			poll_to_pending(cq, 256);
			if (done())
				return true;
		}
		if (deadline.expired())
			return false;
		poll(nullptr, 0, 1);
	}
}

namespace {

// fi_cq_open; `progressed`: the domain's progress thread (FI_PROGRESS_AUTO)
// polls the CQ, which then has a completion channel whatever its wait
// object (ibv_create_cq takes the channel at creation).
int cq_create(fid_domain *domain, fi_cq_attr *attr, fid_cq **cq_out, void *context,
	      bool progressed, bool bounded) noexcept
try {
	if (!domain || !attr || !cq_out) {
		VRMA_WARN(FI_LOG_CQ, "fi_cq_open: NULL domain, attribute or output\n");
		return -FI_EINVAL;
	}
	Domain *dom = from_fid<Domain>(&domain->fid);
	fi_cq_format format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
	if (!format_size(format)) {
		VRMA_WARN(FI_LOG_CQ, "fi_cq_open: unsupported format %d\n", attr->format);
		return -FI_ENOSYS;
	}
	const fi_wait_obj wait = wait_obj_resolve(attr->wait_obj);
	if (wait == FI_WAIT_SET)
		return -FI_ENOSYS;
	if (attr->wait_cond != FI_CQ_COND_NONE && attr->wait_cond != FI_CQ_COND_THRESHOLD) {
		VRMA_WARN(FI_LOG_CQ, "fi_cq_open: unsupported wait condition %d\n", attr->wait_cond);
		return -FI_EINVAL;
	}
	if (attr->flags & ~static_cast<uint64_t>(FI_AFFINITY)) {
		VRMA_WARN(FI_LOG_CQ, "fi_cq_open: unsupported flags 0x%llx\n",
			  static_cast<unsigned long long>(attr->flags));
		return -FI_EBADFLAGS;
	}
	// FI_VRMA_MAX_CQE: tests of the credited queues.
	const size_t max = cq_entries_limit(static_cast<size_t>(dom->dev_attr.max_cqe), params.max_cqe);
	size_t size = attr->size ? attr->size : params.cq_size;
	if (size > max) {
		VRMA_INFO(FI_LOG_CQ, "CQ size %zu clamped to the device's %zu\n", size, max);
		size = max;
	}
	auto cq = std::make_unique<Cq>();
	cq->domain = dom;
	if (bounded)
		cq->limit = size;
	cq->format = format;
	cq->entry_size = format_size(format);
	cq->wait_obj = wait;
	progressed = progressed && dom->msg_auto_progress;
	if (wait == FI_WAIT_FD || progressed) {
		cq->channel.reset(ibv_create_comp_channel(dom->ctx));
		if (!cq->channel) {
			int err = errno;
			VRMA_WARN(FI_LOG_CQ, "ibv_create_comp_channel: %s\n", strerror(err));
			return errno_to_fi(err);
		}
		if (set_nonblock(cq->channel->fd))
			return errno_to_fi(errno);
	}
	if (wait == FI_WAIT_FD) {
		cq->signal_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
		if (cq->signal_fd.get() < 0)
			return errno_to_fi(errno);
		if (int rc = wait_epoll_create(cq->epoll_fd, {cq->channel->fd, cq->signal_fd.get()}))
			return rc;
	}
	int comp_vector = (attr->flags & FI_AFFINITY) ? attr->signaling_vector : 0;
	if (comp_vector >= dom->ctx->num_comp_vectors)
		comp_vector = 0;
	cq->cq.reset(ibv_create_cq(dom->ctx, static_cast<int>(size), cq.get(), cq->channel.get(),
				   comp_vector));
	if (!cq->cq) {
		int err = errno;
		VRMA_WARN(FI_LOG_CQ, "ibv_create_cq(%zu): %s\n", size, strerror(err));
		return errno_to_fi(err);
	}
	cq->credits.open(static_cast<size_t>(cq->cq->cqe));
	if (cq->channel)
		ibv_req_notify_cq(cq->cq.get(), 0);
	cq->fid.fclass = FI_CLASS_CQ;
	cq->fid.context = context;
	cq->fid.ops = const_cast<fi_ops *>(&cq_fi_ops);
	cq->ops = const_cast<fi_ops_cq *>(&cq_ops);
	if (progressed) {
		auto event = [](void *c) noexcept { cq_progress_event(static_cast<Cq *>(c)); };
		if (int rc = progress_attach(dom, cq->channel->fd, 0, event, cq.get(), cq->progress_key))
			return rc;
	}
	dom->refs++;
	*cq_out = cq.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

} // namespace

int cq_open(fid_domain *domain, fi_cq_attr *attr, fid_cq **cq_out, void *context) noexcept
{
	return cq_create(domain, attr, cq_out, context, true, true);
}

int cq_open_unbounded(fid_domain *domain, fi_cq_attr *attr, fid_cq **cq_out) noexcept
{
	return cq_create(domain, attr, cq_out, nullptr, true, false);
}

int cq_open_unprogressed(fid_domain *domain, fi_cq_attr *attr, fid_cq **cq_out) noexcept
{
	return cq_create(domain, attr, cq_out, nullptr, false, false);
}

int ep_bind_cq(EpBase *ep, Cq *cq, uint64_t flags) noexcept
{
	if (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): unsupported flags 0x%llx\n",
			  static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	if (!(flags & (FI_TRANSMIT | FI_RECV))) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): need FI_TRANSMIT and/or FI_RECV\n");
		return -FI_EINVAL;
	}
	if (cq->domain != ep->domain) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): CQ belongs to another domain\n");
		return -FI_EINVAL;
	}
	if (((flags & FI_TRANSMIT) && ep->tx_cq) || ((flags & FI_RECV) && ep->rx_cq)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cq): a CQ is already bound for that direction\n");
		return -FI_EINVAL;
	}
	if (flags & FI_TRANSMIT) {
		ep->tx_cq = cq;
		ep->tx_selective = flags & FI_SELECTIVE_COMPLETION;
		cq->refs++;
	}
	if (flags & FI_RECV) {
		ep->rx_cq = cq;
		ep->rx_selective = flags & FI_SELECTIVE_COMPLETION;
		cq->refs++;
	}
	return 0;
}

int ep_get_ops_flag(const EpBase *ep, void *arg) noexcept
{
	if (!arg)
		return -FI_EINVAL;
	uint64_t *flags = static_cast<uint64_t *>(arg);
	if ((*flags & FI_TRANSMIT) && (*flags & FI_RECV))
		return -FI_EINVAL;
	*flags = (*flags & FI_TRANSMIT) ? ep->tx_op_flags : ep->rx_op_flags;
	return 0;
}

} // namespace vrma
