// The RDM endpoint object: open, bind, enable, close, names, options, and
// progress (the handlers the domain's progress engine runs: rdma_cm events,
// and with FI_PROGRESS_AUTO data; and the progress the application's calls
// make).
#include "vrma_rdm.h"
#include "vrma_progress.h"

#include <algorithm>
#include <array>
#include <fcntl.h>
#include <random>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <thread>

#include <rdma/fi_atomic.h>
#include <rdma/fi_collective.h>

namespace vrma {

RdmParams rdm_params;

namespace {

constexpr fi_ops_rma rma_nosys = {
	.size = sizeof(fi_ops_rma),
	.read = VRMA_NOSYS(fi_ops_rma, read),
	.readv = VRMA_NOSYS(fi_ops_rma, readv),
	.readmsg = VRMA_NOSYS(fi_ops_rma, readmsg),
	.write = VRMA_NOSYS(fi_ops_rma, write),
	.writev = VRMA_NOSYS(fi_ops_rma, writev),
	.writemsg = VRMA_NOSYS(fi_ops_rma, writemsg),
	.inject = VRMA_NOSYS(fi_ops_rma, inject),
	.writedata = VRMA_NOSYS(fi_ops_rma, writedata),
	.injectdata = VRMA_NOSYS(fi_ops_rma, injectdata),
};

int set_nonblock(int fd)
{
	const int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

// Fetches, handles and acks every pending rdma_cm event (lock held): see
// the id-destruction hazard in vrma_rdm_conn.cpp.
void drain_cm_events(RdmEp *ep)
{
	VRMA_ASSERT_HELD(ep->lock);
	rdma_cm_event *ev;
	while (rdma_get_cm_event(ep->cm_channel.get(), &ev) == 0) {
		rdma_cm_id *destroy = nullptr;
		rdm_cm_event(ep, ev, destroy);
		rdma_ack_cm_event(ev);
		if (destroy)
			rdma_destroy_id(destroy);
	}
}

void drain_channel(RdmEp *ep)
{
	ibv_cq *cq;
	void *ctx;
	while (ibv_get_cq_event(ep->channel.get(), &cq, &ctx) == 0)
		ibv_ack_cq_events(cq, 1);
}

// The domain's progress engine runs these (vrma_progress.h: on its thread,
// its lock held). The rdma_cm event channel: connections are made and
// ended while the application calls nothing.
void cm_ready(void *c) noexcept
{
	RdmEp *ep = static_cast<RdmEp *>(c);
	std::lock_guard guard(ep->lock);
	drain_cm_events(ep);
}

// FI_PROGRESS_AUTO: the internal CQ's completion channel, the kick (a
// reclaim kept receive completions) or the drain watch's tick (a stalled
// peer completes nothing, yet the watch must look).
void data_ready(void *c) noexcept
{
	RdmEp *ep = static_cast<RdmEp *>(c);
	std::lock_guard guard(ep->lock);
	drain_channel(ep);
	eventfd_clear(ep->kick_fd.get());
	rdm_progress_locked(ep);
	ibv_req_notify_cq(ep->cq.get(), 0);
	rdm_progress_reap(ep);
	if (ep->watching())
		rdm_watch_drain(ep);
}

// Once this returns the engine no longer runs the endpoint's handlers
// (without its lock held: the engine's handlers take it).
void progress_detach_all(RdmEp *ep) noexcept
{
	progress_detach(ep->domain, ep->cm_key);
	progress_detach(ep->domain, ep->data_key);
	progress_detach(ep->domain, ep->kick_key);
}

// Every counter bound to the endpoint (some may be the same, or null).
std::array<Cntr *, 6> bound_cntrs(const RdmEp *ep)
{
	return {ep->cntr_send,	     ep->cntr_recv,	     ep->cntr_read,
		ep->cntr_write,	     ep->cntr_remote_read, ep->cntr_remote_write};
}

void report_cntrs_attach(RdmEp *ep, bool attach)
{
	const auto cs = bound_cntrs(ep);
	for (size_t i = 0; i < cs.size(); i++) {
		Cntr *c = cs[i];
		if (!c || std::find(cs.begin(), cs.begin() + i, c) != cs.begin() + i)
			continue;
		const int fd = ep->auto_progress ? -1 : ep->channel->fd;
		if (attach)
			c->rdm.attach(ep, c->epoll_fd.get(), fd, "counter");
		else
			c->rdm.detach(ep, c->epoll_fd.get(), fd);
	}
}

void cqs_attach(RdmEp *ep, bool attach)
{
	Cq *cqs[] = {ep->tx_cq, ep->rx_cq};
	for (size_t i = 0; i < 2; i++) {
		Cq *cq = cqs[i];
		if (!cq || (i == 1 && cq == cqs[0]))
			continue;
		const int fd = ep->auto_progress ? -1 : ep->channel->fd;
		if (attach)
			cq->rdm.attach(ep, cq->epoll_fd.get(), fd, "CQ");
		else
			cq->rdm.detach(ep, cq->epoll_fd.get(), fd);
	}
}

// What the endpoint posted to live peers goes out before its connections
// end (lock held, detached from the engine): answers above all, such as the
// DeliveryAck of a message whose receive already completed, without which
// the peer's FI_DELIVERY_COMPLETE send would fail with FI_ECONNRESET
// because this side closed right after its receive. Each connection with
// sends still outstanding (and not disconnected: CM events are handled
// here, the engine no longer runs the endpoint) gets a signaled zero-byte
// write, whose completion retires the unsignaled ones before it. Bounded
// by kLingerMs; what has not gone by then is flushed as before. Last on each
// connection goes a Close (rdm_wire.h). Messages that arrive meanwhile are
// counted, not served: the endpoint is closing (a peer's request then fails
// with the connection, as it did without the linger); a peer's Close is
// taken.
constexpr int kLingerMs = 1000;
void rdm_linger(RdmEp *ep) noexcept
{
	const Deadline deadline(kLingerMs);
	ep->closing = true;
	for (int round = 0;; round++) {
		// A peer that closed first has disconnected: its connection
		// ends here rather than hold us until the deadline.
		drain_cm_events(ep);
		rdm_progress_locked(ep);
		bool quiet = ep->answer_backlog.empty();
		// Our Close, after what the application posted: how many of the
		// peer's messages we received (rdm_wire.h), so that its requests
		// our disconnect flushes before their acknowledgment came back
		// complete as done. Again next round when the queue was full.
		uint8_t bye[rdm::kRdmHeaderBytes];
		for (auto &[addr, peer] : ep->peers) {
			Conn *c = peer->conn.get();
			if (!c || c->state.load() != EpState::Connected)
				continue;
			bool fresh = false;
			if (c->peer_closes && !c->close_sent && !peer->loopback) {
				rdm::encode_close(bye, c->msgs_received);
				fresh = c->close_sent = rdm_post_answer(ep, c, bye, nullptr, 0) == 0;
				quiet = false;
			}
			if (c->tx.outstanding() == 0)
				continue;
			quiet = false;
			// Once (and after a Close), and again once the backlog went
			// out behind it.
			if ((round == 0 || fresh || (round % 64 == 0 && ep->answer_backlog.empty())) &&
			    conn_post_sentinel(c))
				ep->tx_wrs++;
		}
		if (quiet || deadline.expired())
			return;
		std::this_thread::sleep_for(std::chrono::microseconds(200));
	}
}

int rdm_ep_close(fid *f) noexcept
{
	RdmEp *ep = from_fid<RdmEp>(f);
	if (ep->enabled) {
		progress_detach_all(ep);
		cqs_attach(ep, false);
		report_cntrs_attach(ep, false);
		// No thread progresses it now: the commits the persist worker
		// holds are answered before the connections linger and end.
		rdm_persist_finish(ep);
		{
			std::lock_guard guard(ep->lock);
			rdm_linger(ep);
			ep->enabled = false; // no more SRQ reposts
			ep->peer_cache_n = 0; // no more fast-path sends (RdmEp::peer_cache)
			rdm_close_peers(ep);
			// Flushes come back through the CQ: wait for the rings.
			const Deadline deadline(2000);
			for (;;) {
				ibv_wc wcs[32];
				const int n = ibv_poll_cq(ep->cq.get(), 32, wcs);
				ep->in_progress = true;
				rdm_handle_deferred(ep); // none after rdm_linger's progress
				for (int i = 0; i < n; i++)
					rdm_handle_wc(ep, wcs[i]);
				ep->in_progress = false;
				rdm_reap(ep);
				if (ep->dying.empty() || deadline.expired() || n < 0)
					break;
				if (n == 0)
					std::this_thread::sleep_for(std::chrono::milliseconds(1));
			}
			if (!ep->dying.empty()) {
				VRMA_WARN(FI_LOG_EP_CTRL, "RDM close: %zu connections did not flush; leaking them\n",
					  ep->dying.size());
				for (auto &c : ep->dying)
					(void)c.release();
				ep->dying.clear();
			}
			// Unexpected messages and receives still queued are dropped
			// with the endpoint.
			while (RdmMsg *m = ep->matcher.unexpected_front(MatchKind::kMsg)) {
				(void)ep->matcher.remove(*m);
				delete m;
			}
			while (RdmMsg *m = ep->matcher.unexpected_front(MatchKind::kTagged)) {
				(void)ep->matcher.remove(*m);
				delete m;
			}
			// Rendezvous still waiting end first: they may own (or read
			// into) a multi-receive buffer still queued.
			for (auto &[addr, peer] : ep->peers)
				rdm_fail_waiting(peer.get(), FI_ECANCELED);
			for (MatchKind k : {MatchKind::kMsg, MatchKind::kTagged})
				while (RdmRecv *r = ep->matcher.posted_front(k)) {
					(void)ep->matcher.remove(*r);
					rdm_put_recv(ep, r);
				}
			ep->answer_backlog.clear();
			for (auto &[addr, peer] : ep->peers)
				peer->answers_queued = 0;
		}
		ep->listen_id.reset();
		ep->srq.reset();
		ep->rx_mr.reset();
		ep->tx_mr.reset();
		{
			std::lock_guard guard(ep->lock);
			drain_channel(ep);
		}
		ep->cq.reset();
	}
	if (ep->av)
		ep->av->refs--;
	for (Cntr *c : bound_cntrs(ep))
		if (c)
			c->refs--;
	if (ep->tx_cq)
		ep->tx_cq->refs--;
	if (ep->rx_cq)
		ep->rx_cq->refs--;
	ep->domain->refs--;
	delete ep;
	return 0;
}

int rdm_ep_bind(fid *f, fid *bfid, uint64_t flags) noexcept
{
	RdmEp *ep = from_fid<RdmEp>(f);
	if (!bfid) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: NULL fid\n");
		return -FI_EINVAL;
	}
	if (ep->enabled) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: endpoint already enabled\n");
		return -FI_EOPBADSTATE;
	}
	switch (bfid->fclass) {
	case FI_CLASS_AV: {
		Av *av = from_fid<Av>(bfid);
		if (ep->av) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(av): an AV is already bound\n");
			return -FI_EINVAL;
		}
		if (av->domain != ep->domain) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(av): AV belongs to another domain\n");
			return -FI_EINVAL;
		}
		ep->av = av;
		av->refs++;
		return 0;
	}
	case FI_CLASS_CQ:
		return ep_bind_cq(ep, from_fid<Cq>(bfid), flags);
	case FI_CLASS_CNTR: {
		Cntr *c = from_fid<Cntr>(bfid);
		if ((flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) && !ep->rma_events) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): FI_REMOTE_READ/FI_REMOTE_WRITE count RMA events: open the endpoint with FI_RMA_EVENT\n");
			return -FI_EINVAL;
		}
		if (flags & ~(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) ||
		    !flags) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): unsupported flags 0x%llx\n",
				  static_cast<unsigned long long>(flags));
			return flags ? -FI_EBADFLAGS : -FI_EINVAL;
		}
		return bind_cntr(c, ep->domain, flags,
				 {{&ep->cntr_send, FI_SEND},
				  {&ep->cntr_recv, FI_RECV},
				  {&ep->cntr_read, FI_READ},
				  {&ep->cntr_write, FI_WRITE},
				  {&ep->cntr_remote_read, FI_REMOTE_READ},
				  {&ep->cntr_remote_write, FI_REMOTE_WRITE}});
	}
	case FI_CLASS_EQ:
		// Nothing to report on an EQ: connections are invisible.
		return 0;
	default:
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: cannot bind fid class %zu to an RDM endpoint\n",
			  bfid->fclass);
		return -FI_EINVAL;
	}
}

// The listening address: the info's source address (device IP), the port
// from fi_setname or src_addr, 0 for any.
int start_listener(RdmEp *ep)
{
	rdma_cm_id *raw = nullptr;
	if (rdma_create_id(ep->cm_channel.get(), &raw, nullptr, RDMA_PS_TCP)) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: rdma_create_id: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	ep->listen_id.reset(raw);
	sockaddr_storage addr{};
	if (ep->name_set) {
		addr = ep->name;
	} else if (ep->info->src_addr) {
		memcpy(&addr, ep->info->src_addr,
		       std::min(sizeof addr, static_cast<size_t>(ep->info->src_addrlen)));
	} else {
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: fi_enable: the info names no source address\n");
		return -FI_EINVAL;
	}
	if (rdma_bind_addr(raw, reinterpret_cast<sockaddr *>(&addr))) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: binding %s: %s\n",
			  sockaddr_str(reinterpret_cast<sockaddr *>(&addr)).c_str(), strerror(err));
		return errno_to_fi(err);
	}
	if (raw->verbs != ep->domain->ctx) {
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: %s is not on domain %s\n",
			  sockaddr_str(reinterpret_cast<sockaddr *>(&addr)).c_str(),
			  ep->domain->ctx->device->name);
		return -FI_EINVAL;
	}
	if (rdma_listen(raw, params.listen_backlog)) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: rdma_listen: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	const sockaddr *local = rdma_get_local_addr(raw);
	memcpy(&ep->name, local, sockaddr_len(local));
	if (!rdm::from_sockaddr(local, sockaddr_len(local), ep->self) || !rdm::connectable(ep->self)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: %s cannot be an RDM address\n", sockaddr_str(local).c_str());
		return -FI_EINVAL;
	}
	return 0;
}

// What rdm_enable builds into the endpoint's members. A failed fi_enable
// moves what it built here, to be freed in reverse order of the members (the
// listener before its event channel, the SRQ before its buffers, the CQ
// before its completion channel), so that a retry starts from nothing
// (issue 13: it used to build over the first attempt's leftovers, and the
// free list then held every send buffer twice).
struct RdmEnableParts {
	EventChannelPtr cm_channel;
	Fd kick_fd;
	std::unique_ptr<uint8_t[]> rx_bufs, tx_bufs;
	MrPtr rx_mr, tx_mr;
	std::vector<uint32_t> tx_free;
	CompChannelPtr channel;
	CqPtr cq;
	std::unique_ptr<SrqSlot[]> rx_slots;
	SrqPtr srq;
	CmIdPtr listen_id;

	// Exchanges these with the endpoint's members.
	void exchange(RdmEp *ep) noexcept
	{
		std::swap(cm_channel, ep->cm_channel);
		std::swap(kick_fd, ep->kick_fd);
		std::swap(rx_bufs, ep->rx_bufs);
		std::swap(tx_bufs, ep->tx_bufs);
		std::swap(rx_mr, ep->rx_mr);
		std::swap(tx_mr, ep->tx_mr);
		std::swap(tx_free, ep->tx_free);
		std::swap(channel, ep->channel);
		std::swap(cq, ep->cq);
		std::swap(rx_slots, ep->rx_slots);
		std::swap(srq, ep->srq);
		std::swap(listen_id, ep->listen_id);
	}
};

// An fi_enable in progress: unless kept, destruction detaches the endpoint
// from the progress engine, marks it disabled and moves what was built into
// `parts` (which then frees it).
class RdmEnabling {
public:
	RdmEnabling(RdmEp *ep, RdmEnableParts &parts) noexcept : ep_(ep), parts_(parts) {}
	~RdmEnabling()
	{
		if (!ep_)
			return;
		progress_detach_all(ep_);
		ep_->enabled = false;
		parts_.exchange(ep_);
	}
	RdmEnabling(const RdmEnabling &) = delete;
	RdmEnabling &operator=(const RdmEnabling &) = delete;
	void keep() noexcept { ep_ = nullptr; }

private:
	RdmEp *ep_;
	RdmEnableParts &parts_;
};

// Buffers, CQ, SRQ, listener, threads: all or nothing.
int rdm_enable(RdmEp *ep) noexcept
try {
	if (ep->enabled)
		return 0;
	if (!ep->av) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: RDM endpoint needs an AV\n");
		return -FI_ENOAV;
	}
	const auto cntrs = bound_cntrs(ep);
	if (!ep->tx_cq && !ep->rx_cq &&
	    std::all_of(cntrs.begin(), cntrs.end(), [](const Cntr *c) { return !c; })) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: endpoint needs a CQ or a counter\n");
		return -FI_ENOCQ;
	}
	RdmEnableParts parts;
	RdmEnabling enabling(ep, parts);
	Domain *dom = ep->domain;
	ibv_pd *pd = dom->pd.get();
	std::random_device rd;
	do
		ep->nonce = (uint64_t(rd()) << 32) ^ rd() ^
			    uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
	while (ep->nonce == 0);

	rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: rdma_create_event_channel: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	ep->cm_channel.reset(ch);
	set_nonblock(ch->fd);
	if (ep->auto_progress) {
		ep->kick_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
		if (ep->kick_fd.get() < 0)
			return errno_to_fi(errno);
	}

	// Buffers.
	// Every vrma message fits a buffer, whatever the eager size.
	ep->buf_stride = (rdm::kRdmHeaderBytes +
			  std::max({ep->eager_size, rdm::kRndvMsgMax, rdm::kCommitRequestMax}) + 63) &
			 ~size_t(63);
	ep->rx_count = std::min<size_t>(rdm_params.rx_buffers, static_cast<size_t>(dom->dev_attr.max_srq_wr));
	const size_t tx_count = rdm_tx_buffer_count(rdm_params.tx_buffers);
	ep->rx_bufs.reset(new uint8_t[ep->rx_count * ep->buf_stride]);
	ep->tx_bufs.reset(new uint8_t[tx_count * ep->buf_stride]);
	ep->rx_mr.reset(ibv_reg_mr(pd, ep->rx_bufs.get(), ep->rx_count * ep->buf_stride,
				   IBV_ACCESS_LOCAL_WRITE));
	// Local write: native atomics return old values into send buffers.
	ep->tx_mr.reset(ibv_reg_mr(pd, ep->tx_bufs.get(), tx_count * ep->buf_stride,
				   ep->native_atomics ? IBV_ACCESS_LOCAL_WRITE : 0));
	if (!ep->rx_mr || !ep->tx_mr) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: registering %zu bytes of buffers: %s\n",
			  (ep->rx_count + tx_count) * ep->buf_stride, strerror(err));
		return err == ENOMEM || err == EPERM ? -FI_ENOMEM : errno_to_fi(err);
	}
	ep->tx_share.reset(tx_count, kSignalPeriod);
	ep->tx_free.reserve(tx_count);
	for (size_t i = tx_count; i-- > 0;)
		ep->tx_free.push_back(static_cast<uint32_t>(i));

	// CQ: the SRQ's entries plus every send request outstanding.
	ibv_comp_channel *cc = ibv_create_comp_channel(dom->ctx);
	if (!cc) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: ibv_create_comp_channel: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	ep->channel.reset(cc);
	set_nonblock(cc->fd);
	ep->cqe = rdm_cq_entries(ep->rx_count, static_cast<size_t>(dom->dev_attr.max_cqe));
	ep->cq.reset(ibv_create_cq(dom->ctx, static_cast<int>(ep->cqe), ep, cc, 0));
	if (!ep->cq) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: ibv_create_cq(%zu): %s\n", ep->cqe, strerror(err));
		return errno_to_fi(err);
	}
	ep->cqe = static_cast<size_t>(ep->cq->cqe);
	if (!rdm_cq_serves(ep->cqe, ep->rx_count, ep->peer_tx_depth)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: a CQ of %zu entries cannot serve %zu receive buffers\n",
			  ep->cqe, ep->rx_count);
		return -FI_ENOSPC;
	}
	ep->tx_credit = ep->cqe - ep->rx_count;

	ibv_srq_init_attr sattr{};
	sattr.srq_context = ep;
	sattr.attr.max_wr = static_cast<uint32_t>(ep->rx_count);
	sattr.attr.max_sge = 1;
	ep->srq.reset(ibv_create_srq(pd, &sattr));
	if (!ep->srq) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: ibv_create_srq(%zu): %s\n", ep->rx_count, strerror(err));
		return errno_to_fi(err);
	}
	ep->rx_slots.reset(new SrqSlot[ep->rx_count]);
	for (size_t i = 0; i < ep->rx_count; i++) {
		SrqSlot &s = ep->rx_slots[i];
		s.kind = SlotKind::Rx;
		s.seq = i;
		s.buf = ep->rx_bufs.get() + i * ep->buf_stride;
		const uint32_t idx = static_cast<uint32_t>(i);
		if (int rc = rdm_post_srq(ep, &idx, 1))
			return rc;
	}
	ep->srq_batch_max = std::clamp<size_t>(ep->rx_count / 16, 1, RdmEp::kSrqBatchMax);
	if (int rc = start_listener(ep))
		return rc;

	ep_set_fast_tx(ep, kRdmFastTxFlags);
	ep->enabled = true;
	if (ep->auto_progress) {
		ibv_req_notify_cq(ep->cq.get(), 0);
		const int tick = ep->watching() ? 1000 : 0;
		if (int rc = progress_attach(dom, ep->channel->fd, tick, data_ready, ep, ep->data_key))
			return rc;
		if (int rc = progress_attach(dom, ep->kick_fd.get(), 0, data_ready, ep, ep->kick_key))
			return rc;
	}
	// Last: once it is watched, peers can connect.
	if (int rc = progress_attach(dom, ep->cm_channel->fd, 0, cm_ready, ep, ep->cm_key))
		return rc;
	enabling.keep();
	cqs_attach(ep, true);
	report_cntrs_attach(ep, true);
	return 0;
} catch (...) {
	VRMA_WARN(FI_LOG_EP_CTRL, "RDM: fi_enable: out of memory\n");
	return -FI_ENOMEM;
}

int rdm_ep_control(fid *f, int command, void *arg) noexcept
{
	RdmEp *ep = from_fid<RdmEp>(f);
	switch (command) {
	case FI_ENABLE:
		return rdm_enable(ep);
	case FI_GETOPSFLAG:
		return ep_get_ops_flag(ep, arg);
	case FI_SETOPSFLAG: {
		if (!arg)
			return -FI_EINVAL;
		const uint64_t flags = *static_cast<uint64_t *>(arg);
		const bool tx = flags & FI_TRANSMIT;
		const uint64_t f2 = flags & ~(FI_TRANSMIT | FI_RECV);
		const uint64_t allowed = tx ? kRdmTxOpFlags : kRdmRxOpFlags;
		if (f2 & ~allowed) {
			VRMA_WARN(FI_LOG_EP_CTRL, "FI_SETOPSFLAG: unsupported flags 0x%llx\n",
				  static_cast<unsigned long long>(f2 & ~allowed));
			return -FI_EBADFLAGS;
		}
		(tx ? ep->tx_op_flags : ep->rx_op_flags) = f2;
		if (tx)
			ep_set_fast_tx(ep, kRdmFastTxFlags);
		return 0;
	}
	default:
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_control(rdm ep, %d) is not supported\n", command);
		return -FI_ENOSYS;
	}
}

int rdm_getname(fid_t f, void *addr, size_t *addrlen) noexcept
{
	RdmEp *ep = from_fid<RdmEp>(f);
	if (!addrlen) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_getname: NULL addrlen\n");
		return -FI_EINVAL;
	}
	std::lock_guard guard(ep->lock);
	if (!ep->enabled && !ep->name_set) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_getname: the RDM endpoint's address is known after fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	const size_t len = sockaddr_len(reinterpret_cast<const sockaddr *>(&ep->name));
	const size_t room = *addrlen;
	*addrlen = len;
	if (room < len || !addr)
		return -FI_ETOOSMALL;
	memcpy(addr, &ep->name, len);
	return 0;
}

int rdm_setname(fid_t f, void *addr, size_t addrlen) noexcept
{
	RdmEp *ep = from_fid<RdmEp>(f);
	std::lock_guard guard(ep->lock);
	if (ep->enabled) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_setname: endpoint already enabled\n");
		return -FI_EOPBADSTATE;
	}
	rdm::RdmAddr a;
	if (!addr || !rdm::from_sockaddr(static_cast<const sockaddr *>(addr), addrlen, a)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_setname: not a sockaddr_in/sockaddr_in6\n");
		return -FI_EINVAL;
	}
	memset(&ep->name, 0, sizeof ep->name);
	memcpy(&ep->name, addr, sockaddr_len(static_cast<const sockaddr *>(addr)));
	ep->name_set = true;
	return 0;
}

int rdm_getpeer(fid_ep *, void *, size_t *) noexcept
{
	VRMA_WARN(FI_LOG_EP_CTRL, "fi_getpeer: RDM endpoints have no single peer\n");
	return -FI_ENOSYS;
}

int rdm_getopt(fid_t f, int level, int optname, void *optval, size_t *optlen) noexcept
{
	RdmEp *ep = from_fid<RdmEp>(f);
	if (level != FI_OPT_ENDPOINT || !optval || !optlen)
		return -FI_EINVAL;
	switch (optname) {
	case FI_OPT_MIN_MULTI_RECV:
		if (*optlen < sizeof(size_t))
			return -FI_ETOOSMALL;
		*static_cast<size_t *>(optval) = ep->min_multi_recv;
		*optlen = sizeof(size_t);
		return 0;
	case FI_OPT_CM_DATA_SIZE:
		if (*optlen < sizeof(size_t))
			return -FI_ETOOSMALL;
		*static_cast<size_t *>(optval) = 0;
		*optlen = sizeof(size_t);
		return 0;
	case FI_VRMA_OPT_RDM_CONN_STATS: {
		if (*optlen < sizeof(fi_vrma_rdm_conn_stats)) {
			*optlen = sizeof(fi_vrma_rdm_conn_stats);
			return -FI_ETOOSMALL;
		}
		fi_vrma_rdm_conn_stats st{};
		std::lock_guard guard(ep->lock);
		st.peers = ep->peers.size();
		for (const auto &[addr, peer] : ep->peers)
			st.connections += (peer->conn ? 1 : 0) + (peer->loopback ? 1 : 0);
		st.closing = ep->dying.size();
		st.idle_closed = ep->idle_closed;
		st.peers_given_back = ep->peers_reclaimed;
		memcpy(optval, &st, sizeof st);
		*optlen = sizeof st;
		return 0;
	}
	default:
		return -FI_ENOPROTOOPT;
	}
}

int rdm_setopt(fid_t f, int level, int optname, const void *optval, size_t optlen) noexcept
{
	RdmEp *ep = from_fid<RdmEp>(f);
	if (level != FI_OPT_ENDPOINT || !optval)
		return -FI_EINVAL;
	switch (optname) {
	case FI_OPT_MIN_MULTI_RECV:
		if (optlen != sizeof(size_t))
			return -FI_EINVAL;
		ep->min_multi_recv = *static_cast<const size_t *>(optval);
		return 0;
	default:
		return -FI_ENOPROTOOPT;
	}
}

ssize_t rdm_ep_cancel(fid_t f, void *context) noexcept
{
	return rdm_cancel(from_fid<RdmEp>(f), context);
}

ssize_t rdm_rx_size_left(fid_ep *f) noexcept
{
	RdmEp *ep = static_cast<RdmEp *>(f);
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	return static_cast<ssize_t>(ep->info->rx_attr->size); // receives are queued in memory
}

ssize_t rdm_tx_size_left(fid_ep *f) noexcept
{
	RdmEp *ep = static_cast<RdmEp *>(f);
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	std::lock_guard guard(ep->lock);
	return static_cast<ssize_t>(ep->tx_free.size());
}

constexpr fi_ops rdm_fi_ops = {
	.size = sizeof(fi_ops),
	.close = rdm_ep_close,
	.bind = rdm_ep_bind,
	.control = rdm_ep_control,
	.ops_open = fid_no_ops_open,
	.tostr = fid_tostr,
	.ops_set = fid_no_ops_set,
};

constexpr fi_ops_ep rdm_ep_ops = {
	.size = sizeof(fi_ops_ep),
	.cancel = rdm_ep_cancel,
	.getopt = rdm_getopt,
	.setopt = rdm_setopt,
	.tx_ctx = VRMA_NOSYS(fi_ops_ep, tx_ctx),
	.rx_ctx = VRMA_NOSYS(fi_ops_ep, rx_ctx),
	.rx_size_left = rdm_rx_size_left,
	.tx_size_left = rdm_tx_size_left,
};

constexpr fi_ops_cm rdm_cm_ops = {
	.size = sizeof(fi_ops_cm),
	.setname = rdm_setname,
	.getname = rdm_getname,
	.getpeer = rdm_getpeer,
	.connect = VRMA_NOSYS(fi_ops_cm, connect),
	.listen = VRMA_NOSYS(fi_ops_cm, listen),
	.accept = VRMA_NOSYS(fi_ops_cm, accept),
	.reject = VRMA_NOSYS(fi_ops_cm, reject),
	.shutdown = VRMA_NOSYS(fi_ops_cm, shutdown),
	.join = VRMA_NOSYS(fi_ops_cm, join),
};

} // namespace

void rdm_progress_locked(RdmEp *ep) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	if (ep->in_progress) [[unlikely]]
		return;
	ep->in_progress = true;
	if (ep->connecting) [[unlikely]]
		drain_cm_events(ep);
	if (ep->rx_deferred_n) [[unlikely]]
		rdm_handle_deferred(ep);
	ibv_wc wcs[16];
	for (;;) {
		const int n = ibv_poll_cq(ep->cq.get(), 16, wcs);
		if (n <= 0)
			break;
		for (int i = 0; i < n; i++)
			rdm_handle_wc(ep, wcs[i]);
		if (n < 16)
			break;
	}
	if (!ep->read_backlog.empty() || !ep->answer_backlog.empty()) [[unlikely]]
		rdm_retry_backlog(ep);
	if (ep->resume_due || ep->unexp.held()) [[unlikely]]
		rdm_flow_progress(ep);
	// The drain watch reads the clock: every 256th progress only (the
	// engine's data handler also looks on its ticks).
	if ((++ep->watch_calls & 255) == 0 && ep->watching()) [[unlikely]]
		rdm_watch_drain(ep);
	ep->in_progress = false;
}

void rdm_progress_reap(RdmEp *ep) noexcept
{
	rdm_progress_locked(ep);
	if (!ep->dying.empty() && !ep->in_progress) [[unlikely]]
		rdm_reap(ep);
	if (ep->peer_limit.over(ep->peers.size()) && !ep->in_progress) [[unlikely]]
		rdm_reclaim_peers(ep);
}

int RdmHooks::attach(RdmEp *ep, int epoll_fd, int wait_fd, const char *what) noexcept
try {
	std::lock_guard guard(lock_);
	if (wait_fd >= 0 && epoll_fd >= 0) {
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.fd = wait_fd;
		if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wait_fd, &ev) && errno != EEXIST)
			// It still progresses the endpoint; a blocking wait may
			// sleep through its completions.
			VRMA_WARN(FI_LOG_EP_CTRL, "RDM: a %s cannot wait on the endpoint: %s\n", what,
				  strerror(errno));
	}
	eps_.push_back(ep);
	n_.store(eps_.size());
	republish();
	return 0;
} catch (...) {
	VRMA_WARN(FI_LOG_EP_CTRL, "RDM: out of memory attaching the endpoint to a %s\n", what);
	return -FI_ENOMEM;
}

void RdmHooks::detach(RdmEp *ep, int epoll_fd, int wait_fd) noexcept
{
	std::lock_guard guard(lock_);
	std::erase(eps_, ep);
	n_.store(eps_.size());
	republish();
	if (wait_fd >= 0 && epoll_fd >= 0)
		epoll_ctl(epoll_fd, EPOLL_CTL_DEL, wait_fd, nullptr);
}

void RdmHooks::republish() noexcept
{
	single_.store(eps_.size() == 1 ? eps_.front() : nullptr);
	while (readers_.load() != 0)
		std::this_thread::yield();
}

void RdmHooks::progress() noexcept
{
	readers_.fetch_add(1);
	RdmEp *single = single_.load();
	if (single) [[likely]]
		rdm_progress(single);
	readers_.fetch_sub(1, std::memory_order_release);
	if (single)
		return;
	std::lock_guard guard(lock_);
	for (RdmEp *ep : eps_)
		rdm_progress(ep);
}

int RdmHooks::trywait() noexcept
{
	std::lock_guard guard(lock_);
	for (RdmEp *ep : eps_)
		if (int rc = rdm_trywait(ep))
			return rc;
	return 0;
}

void rdm_progress(RdmEp *ep) noexcept
{
	std::lock_guard guard(ep->lock);
	rdm_progress_reap(ep);
}

int rdm_trywait(RdmEp *ep) noexcept
{
	if (ep->auto_progress)
		return 0; // the engine reports through the CQ's own wakeup
	std::lock_guard guard(ep->lock);
	if (ep->rx_deferred_n) {
		// Taken from the CQ by a transmit's reclaim: no event comes.
		rdm_progress_reap(ep);
		return -FI_EAGAIN;
	}
	drain_channel(ep);
	if (int rc = ibv_req_notify_cq(ep->cq.get(), 0))
		return errno_to_fi(rc);
	// Completions that arrived before arming raise no event: poll once more.
	ibv_wc wc;
	const int n = ibv_poll_cq(ep->cq.get(), 1, &wc);
	if (n > 0) {
		ep->in_progress = true;
		rdm_handle_wc(ep, wc);
		ep->in_progress = false;
		rdm_progress_reap(ep);
		return -FI_EAGAIN;
	}
	return 0;
}

void rdm_report_tx(RdmEp *ep, void *context, uint64_t flags, size_t len, bool report, Cntr *cntr,
		   int err, int prov_errno) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	count_completion(cntr, err == 0);
	if (!ep->tx_cq || (!report && !err))
		return;
	if (!err) [[likely]] {
		cq_complete(ep->tx_cq, {context, flags, len, nullptr, 0, 0}, FI_ADDR_NOTAVAIL);
		return;
	}
	cq_push(ep->tx_cq, rdm_error_entry(context, flags, nullptr, len, 0, 0, 0, FI_ADDR_NOTAVAIL, err,
					   prov_errno));
}

void rdm_report_rx_error(RdmEp *ep, const CqPending &p) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	count_completion(ep->cntr_recv, false);
	if (ep->rx_cq)
		cq_push(ep->rx_cq, p);
}

void rdm_complete_rx(RdmEp *ep, bool report, const Completion &c, fi_addr_t src) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	count_completion(ep->cntr_recv, true);
	if (report && ep->rx_cq)
		cq_complete(ep->rx_cq, c, src);
}

void rdm_src_modes(uint64_t caps, RdmEp::SrcMode (&mode)[2]) noexcept
{
	// FI_EXACT_DIRECTED_RECV alone directs both kinds; with
	// FI_TAGGED_DIRECTED_RECV (and without FI_DIRECTED_RECV) tagged ones only.
	const bool exact = caps & abi::kExactDirectedRecv;
	const bool msg = (caps & FI_DIRECTED_RECV) || (exact && !(caps & abi::kTaggedDirectedRecv));
	const bool tagged = caps & (FI_DIRECTED_RECV | abi::kTaggedDirectedRecv | abi::kExactDirectedRecv);
	const RdmEp::SrcMode on = exact ? RdmEp::kSrcExact : RdmEp::kSrcDirected;
	mode[static_cast<int>(MatchKind::kMsg)] = msg ? on : RdmEp::kSrcAny;
	mode[static_cast<int>(MatchKind::kTagged)] = tagged ? on : RdmEp::kSrcAny;
}

int rdm_ep_open(fid_domain *domain, fi_info *info, fid_ep **ep_out, void *context) noexcept
try {
	Domain *dom = from_fid<Domain>(&domain->fid);
	auto ep = std::make_unique<RdmEp>();
	ep->domain = dom;
	ep->info.reset(fi_dupinfo(info));
	if (!ep->info)
		return -FI_ENOMEM;
	// The 2.0 receive bits only where the application's API has them.
	const uint64_t offered =
		kRdmCaps | FI_AV_USER_ID |
		abi::caps_for(dom->api(), abi::kTaggedDirectedRecv | abi::kExactDirectedRecv);
	const uint64_t caps = info->caps ? info->caps : kRdmCaps;
	if (caps & ~offered) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: RDM endpoints do not offer caps 0x%llx\n",
			  static_cast<unsigned long long>(caps & ~offered));
		return -FI_EINVAL;
	}
	rdm_src_modes(caps, ep->src_mode);
	ep->rma_events = caps & FI_RMA_EVENT;
	ep->rma_pmem = caps & FI_RMA_PMEM;
	ep->scalable_keys = dom->scalable_keys;
	ep->auth_key = dom->auth_key;
	if (const fi_ep_attr *a = info->ep_attr)
		if (int rc = take_attr_auth_key(a->auth_key, a->auth_key_size, ep->auth_key, "fi_endpoint"))
			return rc;
	if (!ep->auth_key.empty()) {
		if (!auth::random_bytes(ep->auth_secret.data(), ep->auth_secret.size())) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: no random bytes for the challenge secret: %s\n",
				  strerror(errno));
			return -FI_EIO;
		}
		ep->auth_replays = std::make_unique<auth::ReplayCache>(RdmEp::kAuthReplayMax);
	}
	ep->native_atomics = rdm_params.native_atomics && dom->dev_attr.atomic_cap != IBV_ATOMIC_NONE;
	ep->matcher.directed(MatchKind::kMsg, ep->src_mode[0] != RdmEp::kSrcAny);
	ep->matcher.directed(MatchKind::kTagged, ep->src_mode[1] != RdmEp::kSrcAny);
	ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags & kRdmTxOpFlags : 0;
	ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags & kRdmRxOpFlags : 0;
	ep->auto_progress = dom->info && dom->info->domain_attr &&
			    dom->info->domain_attr->data_progress == FI_PROGRESS_AUTO;
	ep->eager_size = rdm_params.eager_size;
	ep->inline_size = std::min(static_cast<size_t>(dom->inline_size), rdm_params.peer_inline_size);
	ep->inject_size = ep->eager_size;
	if (info->tx_attr && info->tx_attr->inject_size && info->tx_attr->inject_size < ep->inject_size)
		ep->inject_size = info->tx_attr->inject_size;
	// Internal queues: as deep as the longest operation, whatever was set.
	ep->peer_tx_depth = rdm_peer_tx_depth(rdm_params.peer_tx_size, dom->dev_attr.max_qp_wr);
	ep->rndv_read_size = rdm_params.rndv_read_size ? rdm_params.rndv_read_size : SIZE_MAX;
	ep->min_multi_recv = ep->eager_size;
	// A peer's messages (or requests) already under way: at most its send
	// queue (in flight when the Pause arrived, or unanswered) and what it
	// posted before its progress saw the Pause (its queue full forces
	// that), with the same FI_VRMA_RDM_PEER_TX_SIZE on both sides; twice
	// that again as margin. One more is a peer that ignores the protocol.
	ep->peer_allowance = 4 * ep->peer_tx_depth;
	ep->unexp.reset(rdm_unexpected_max(), ep->peer_allowance);
	ep->drain_timeout = std::chrono::milliseconds(rdm_drain_timeout_ms());
	ep->connect_timeout = std::chrono::milliseconds(rdm_connect_timeout_ms());
	ep->idle_timeout = std::chrono::milliseconds(rdm_idle_timeout_ms());
	ep->peer_limit = peers::Limit::of(rdm_max_peers());
	ep->recv_pool.reserve(RdmEp::kRecvPoolMax);
	ep->atomic_pool.reserve(RdmEp::kAtomicPoolMax);
	ep->msg_pool.reserve(RdmEp::kMsgPoolMax);
	ep->atomic_nodes.reserve(RdmEp::kAtomicPoolMax);
	ep->fid.fclass = FI_CLASS_EP;
	ep->fid.context = context;
	ep->fid.ops = const_cast<fi_ops *>(&rdm_fi_ops);
	ep->ops = const_cast<fi_ops_ep *>(&rdm_ep_ops);
	ep->cm = const_cast<fi_ops_cm *>(&rdm_cm_ops);
	ep->msg = const_cast<fi_ops_msg *>(&rdm_msg_ops);
	ep->rma = const_cast<fi_ops_rma *>(caps & FI_RMA ? &rdm_rma_ops : &rma_nosys);
	ep->tagged = const_cast<fi_ops_tagged *>(&rdm_tagged_ops);
	ep->atomic = const_cast<fi_ops_atomic *>(caps & FI_ATOMIC ? &rdm_atomic_ops : &atomic_nosys);
	if (caps & FI_ATOMIC) {
		ep->atomic_buf.reset(new uint8_t[ep->eager_size + rdm::kRdmHeaderBytes]);
		ep->atomic_result.reset(new uint8_t[ep->eager_size]);
	}
	ep->collective = const_cast<fi_ops_collective *>(&collective_nosys);
	dom->refs++;
	*ep_out = ep.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

} // namespace vrma
