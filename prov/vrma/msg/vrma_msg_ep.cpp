// Active MSG endpoints: one RC QP on an rdma_cm id.
#include "vrma_msg_ep.h"
#include "vrma_msg_post.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_tagged.h>

#include <thread>
#include <utility>

namespace vrma {

namespace {

// Operations vrma does not offer on MSG endpoints answer -FI_ENOSYS.
constexpr fi_ops_tagged tagged_nosys = {
	.size = sizeof(fi_ops_tagged),
	.recv = VRMA_NOSYS(fi_ops_tagged, recv),
	.recvv = VRMA_NOSYS(fi_ops_tagged, recvv),
	.recvmsg = VRMA_NOSYS(fi_ops_tagged, recvmsg),
	.send = VRMA_NOSYS(fi_ops_tagged, send),
	.sendv = VRMA_NOSYS(fi_ops_tagged, sendv),
	.sendmsg = VRMA_NOSYS(fi_ops_tagged, sendmsg),
	.inject = VRMA_NOSYS(fi_ops_tagged, inject),
	.senddata = VRMA_NOSYS(fi_ops_tagged, senddata),
	.injectdata = VRMA_NOSYS(fi_ops_tagged, injectdata),
};

// Calls fn(counter, cq) for each bound counter and the CQ its completions
// arrive on.
template <typename Fn> void for_each_counter(const Ep *ep, Fn &&fn)
{
	if (ep->cntr_send)
		fn(ep->cntr_send, send_cq_of(ep));
	if (ep->cntr_read)
		fn(ep->cntr_read, send_cq_of(ep));
	if (ep->cntr_write)
		fn(ep->cntr_write, send_cq_of(ep));
	if (ep->cntr_recv)
		fn(ep->cntr_recv, recv_cq_of(ep));
}

void release_cq(Ep *ep)
{
	const bool enabled = ep->conn.tx.depth() != 0; // the rings hold what was reserved
	if (enabled) {
		// A credited queue's slots gave their credits back as they
		// retired (an endpoint leaked undrained keeps the rest: its
		// requests may still complete).
		if (ep->conn.tx_credits)
			cq_credit_detach(ep->conn.tx_credits, ep->conn.tx_spare);
		else
			cq_unreserve(send_cq_of(ep), ep->conn.tx.depth());
		if (ep->rx_credits)
			cq_credit_detach(ep->rx_credits, 0);
		else
			cq_unreserve(recv_cq_of(ep), ep->rx.depth());
	}
	for_each_counter(ep, [&](Cntr *c, Cq *cq) {
		if (enabled)
			cntr_detach_cq(c, cq);
		c->refs--;
	});
	// Remote event counters are bumped (and woken) by the domain's
	// service, not polled through a CQ.
	if (ep->cntr_remote_read)
		ep->cntr_remote_read->refs--;
	if (ep->cntr_remote_write)
		ep->cntr_remote_write->refs--;
	if (ep->tx_cq)
		ep->tx_cq->refs--;
	if (ep->rx_cq)
		ep->rx_cq->refs--;
	if (ep->own_cq)
		fi_close(&ep->own_cq->fid);
}

int ep_close(fid *f) noexcept
{
	Ep *ep = from_fid<Ep>(f);
	// After fi_shutdown, the QP runs until the peer answers (ep_disconnect):
	// the peer answers once its own sends in flight completed (its
	// lingering), whose ACKs this QP still owes. Closing first would drop
	// them, and those delivered sends would end FI_ECANCELED; so fi_close
	// waits for the answer, bounded by the peer's lingering.
	if (ep->disconnect_sent.load(std::memory_order_acquire)) {
		const Deadline until(kLingerMs + 100);
		while (!ep->disconnect_answered.load(std::memory_order_acquire) && !until.expired())
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
	ep->conn.closing.store(true);
	if (ep->eq) {
		// The EQ's progress thread handles events under the EQ lock: once the
		// id no longer names the endpoint, no event handler touches it.
		std::lock_guard guard(ep->eq->lock);
		ep->conn.id->context = nullptr;
		// A lingering connection ends here (the QP goes to the error
		// state below; destroying the id answers the peer).
		eq_linger_forget(ep->eq, ep);
	}
	if (ep->service)
		pmem_ep_quiesce(ep);
	{
		// What FI_MORE holds is discarded with everything outstanding
		// (fi_endpoint(3): no completions). Never posted after the
		// sentinel below: the sentinel's flush retires these slots, and a
		// later flush of them would name retired slots of a freed endpoint.
		std::lock_guard<FastMutex> guard(ep->conn.more_lock);
		if (ep->conn.more) {
			ep->conn.more->nwr = 0;
			ep->conn.more->nsge = 0;
			ep->conn.more->inline_used = 0;
		}
		ep->conn.more_held.store(false, std::memory_order_relaxed);
	}
	bool drained = true;
	if (ep->conn.qp) {
		// A connection the application closes without fi_shutdown sends
		// its disconnect request first too (the ACK hazard of
		// ep_disconnect); nothing can wait for the answer here: the QP
		// goes to the error state now, to flush before it is destroyed.
		if (ep->conn.state.load() == EpState::Connected)
			(void)ep_disconnect(ep);
		ep_set_error(ep);
		conn_post_sentinel(&ep->conn);
		drained = cq_drain_endpoint(send_cq_of(ep), ep, true, 2000) &&
			  cq_drain_endpoint(recv_cq_of(ep), ep, false, 2000);
		if (!drained) {
			// Completions naming this endpoint may still arrive: keep its
			// memory rather than let them point to freed slots.
			VRMA_WARN(FI_LOG_EP_CTRL,
				  "endpoint close: %zu send and %zu receive requests did not flush; leaking the endpoint\n",
				  ep->conn.tx.outstanding(), ep->rx.outstanding());
		}
		rdma_destroy_qp(ep->conn.id.get());
		ep->conn.qp = nullptr;
	}
	if (ep->eq) {
		// Events for this endpoint are read under the EQ lock: destroy the id
		// under it too, then drop queued events that name the endpoint.
		{
			std::lock_guard guard(ep->eq->lock);
			ep->conn.id.reset();
		}
		eq_purge(ep->eq, &ep->fid);
		ep->eq->refs--;
	} else {
		ep->conn.id.reset();
	}
	release_cq(ep);
	if (ep->service_cq)
		pmem_ep_detach(ep);
	ep->domain->refs--;
	if (drained)
		delete ep;
	return 0;
}

int ep_bind(fid *f, fid *bfid, uint64_t flags) noexcept
{
	Ep *ep = from_fid<Ep>(f);
	if (!bfid) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: NULL fid\n");
		return -FI_EINVAL;
	}
	if (ep->conn.qp) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: endpoint already enabled\n");
		return -FI_EOPBADSTATE;
	}
	switch (bfid->fclass) {
	case FI_CLASS_CQ:
		return ep_bind_cq(ep, from_fid<Cq>(bfid), flags);
	case FI_CLASS_EQ: {
		Eq *eq = from_fid<Eq>(bfid);
		if (ep->eq) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(eq): an EQ is already bound\n");
			return -FI_EINVAL;
		}
		ep->eq = eq;
		eq->refs++;
		return 0;
	}
	case FI_CLASS_CNTR: {
		Cntr *c = from_fid<Cntr>(bfid);
		if ((flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) && !ep->rma_events) {
			// One-sided operations leave no trace at an RC target
			// unless the initiator tells (FI_RMA_EVENT endpoints).
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): remote RMA events need an FI_RMA_EVENT endpoint\n");
			return -FI_EOPNOTSUPP;
		}
		if (flags & ~(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): unsupported flags 0x%llx\n",
				  static_cast<unsigned long long>(flags));
			return -FI_EBADFLAGS;
		}
		if (!flags) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): no event named\n");
			return -FI_EINVAL;
		}
		return bind_cntr(c, ep->domain, flags,
				 {{&ep->cntr_send, FI_SEND},
				  {&ep->cntr_recv, FI_RECV},
				  {&ep->cntr_read, FI_READ},
				  {&ep->cntr_write, FI_WRITE},
				  {&ep->cntr_remote_read, FI_REMOTE_READ},
				  {&ep->cntr_remote_write, FI_REMOTE_WRITE}});
	}
	default:
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: cannot bind fid class %zu\n", bfid->fclass);
		return -FI_EINVAL;
	}
}

int ep_control(fid *f, int command, void *arg) noexcept
{
	Ep *ep = from_fid<Ep>(f);
	switch (command) {
	case FI_ENABLE:
		return ep_enable(ep);
	case FI_GETOPSFLAG:
		return ep_get_ops_flag(ep, arg);
	case FI_SETOPSFLAG: {
		if (!arg)
			return -FI_EINVAL;
		uint64_t flags = *static_cast<uint64_t *>(arg);
		if (flags & FI_TRANSMIT) {
			uint64_t f2 = flags & ~FI_TRANSMIT;
			if (f2 & ~kTxOpFlags) {
				VRMA_WARN(FI_LOG_EP_CTRL, "FI_SETOPSFLAG: unsupported transmit flags 0x%llx\n",
					  static_cast<unsigned long long>(f2 & ~kTxOpFlags));
				return -FI_EBADFLAGS;
			}
			if ((f2 & FI_COMMIT_COMPLETE) && !ep->rma_pmem) {
				VRMA_WARN(FI_LOG_EP_CTRL, "FI_SETOPSFLAG: FI_COMMIT_COMPLETE needs FI_RMA_PMEM\n");
				return -FI_EBADFLAGS;
			}
			ep->tx_op_flags = f2;
			msg_set_fast_tx(ep);
		} else {
			uint64_t f2 = flags & ~FI_RECV;
			if (f2 & ~kRxOpFlags) {
				VRMA_WARN(FI_LOG_EP_CTRL, "FI_SETOPSFLAG: unsupported receive flags 0x%llx\n",
					  static_cast<unsigned long long>(f2 & ~kRxOpFlags));
				return -FI_EBADFLAGS;
			}
			ep->rx_op_flags = f2;
		}
		return 0;
	}
	default:
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_control(ep, %d) is not supported\n", command);
		return -FI_ENOSYS;
	}
}

// fi_cancel: posted verbs receives cannot be withdrawn one by one; a
// staged endpoint's wait in vrma's queue and can (staged_ep_ops).
ssize_t ep_cancel(fid_t, void *) noexcept
{
	return -FI_ENOENT;
}

ssize_t staged_ep_cancel(fid_t f, void *context) noexcept
{
	return staged_cancel(from_fid<Ep>(f), context);
}

ssize_t ep_rx_size_left(fid_ep *f) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	if (!ep->conn.qp)
		return -FI_EOPBADSTATE;
	return static_cast<ssize_t>(ep->rx_depth - ep->rx.outstanding());
}

ssize_t staged_ep_rx_size_left(fid_ep *f) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	if (!ep->conn.qp)
		return -FI_EOPBADSTATE;
	return static_cast<ssize_t>(staged_rx_left(ep));
}

ssize_t ep_tx_size_left(fid_ep *f) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	if (!ep->conn.qp)
		return -FI_EOPBADSTATE;
	size_t used = ep->conn.tx.outstanding();
	return used >= ep->conn.tx_depth ? 0 : static_cast<ssize_t>(ep->conn.tx_depth - used);
}

constexpr fi_ops ep_fi_ops = {
	.size = sizeof(fi_ops),
	.close = ep_close,
	.bind = ep_bind,
	.control = ep_control,
	.ops_open = fid_no_ops_open,
	.tostr = fid_tostr,
	.ops_set = fid_no_ops_set,
};

// One table per receive side: the device's receive queue, or a staged
// endpoint's queue (RxMode::Staged), chosen at fi_endpoint.
template <auto Cancel, auto RxSizeLeft> constexpr fi_ops_ep ep_ops_with() noexcept
{
	return {
		.size = sizeof(fi_ops_ep),
		.cancel = Cancel,
		.getopt = ep_getopt,
		.setopt = ep_setopt,
		.tx_ctx = VRMA_NOSYS(fi_ops_ep, tx_ctx),
		.rx_ctx = VRMA_NOSYS(fi_ops_ep, rx_ctx),
		.rx_size_left = RxSizeLeft,
		.tx_size_left = ep_tx_size_left,
	};
}
constexpr fi_ops_ep ep_ops = ep_ops_with<ep_cancel, ep_rx_size_left>();
constexpr fi_ops_ep staged_ep_ops = ep_ops_with<staged_ep_cancel, staged_ep_rx_size_left>();

} // namespace

const fi_ops_atomic atomic_nosys = {
	.size = sizeof(fi_ops_atomic),
	.write = VRMA_NOSYS(fi_ops_atomic, write),
	.writev = VRMA_NOSYS(fi_ops_atomic, writev),
	.writemsg = VRMA_NOSYS(fi_ops_atomic, writemsg),
	.inject = VRMA_NOSYS(fi_ops_atomic, inject),
	.readwrite = VRMA_NOSYS(fi_ops_atomic, readwrite),
	.readwritev = VRMA_NOSYS(fi_ops_atomic, readwritev),
	.readwritemsg = VRMA_NOSYS(fi_ops_atomic, readwritemsg),
	.compwrite = VRMA_NOSYS(fi_ops_atomic, compwrite),
	.compwritev = VRMA_NOSYS(fi_ops_atomic, compwritev),
	.compwritemsg = VRMA_NOSYS(fi_ops_atomic, compwritemsg),
	.writevalid = VRMA_NOSYS(fi_ops_atomic, writevalid),
	.readwritevalid = VRMA_NOSYS(fi_ops_atomic, readwritevalid),
	.compwritevalid = VRMA_NOSYS(fi_ops_atomic, compwritevalid),
};

const fi_ops_collective collective_nosys = {
	.size = sizeof(fi_ops_collective),
	.barrier = VRMA_NOSYS(fi_ops_collective, barrier),
	.broadcast = VRMA_NOSYS(fi_ops_collective, broadcast),
	.alltoall = VRMA_NOSYS(fi_ops_collective, alltoall),
	.allreduce = VRMA_NOSYS(fi_ops_collective, allreduce),
	.allgather = VRMA_NOSYS(fi_ops_collective, allgather),
	.reduce_scatter = VRMA_NOSYS(fi_ops_collective, reduce_scatter),
	.reduce = VRMA_NOSYS(fi_ops_collective, reduce),
	.scatter = VRMA_NOSYS(fi_ops_collective, scatter),
	.gather = VRMA_NOSYS(fi_ops_collective, gather),
	.msg = VRMA_NOSYS(fi_ops_collective, msg),
	.barrier2 = VRMA_NOSYS(fi_ops_collective, barrier2),
};

int ep_post_own_rx(Ep *ep) noexcept
{
	ibv_recv_wr wr{};
	if (ep->rx_mode == RxMode::Service) {
		// Commit requests arrive here too: each receive has a buffer.
		constexpr size_t kLen = wire::kCommitMsgMax;
		ibv_sge sge{reinterpret_cast<uintptr_t>(ep->service->rx_buf.get()), kLen,
			    ep->service->rx_mr->lkey};
		wr.sg_list = &sge;
		wr.num_sge = 1;
		return static_cast<int>(post_recv(ep, wr, nullptr, nullptr, kLen, true, nullptr, true, kLen));
	}
	// No scatter entries: write-with-immediate places no data here.
	return static_cast<int>(post_recv(ep, wr, nullptr, nullptr, 0, true, nullptr, true));
}

void ep_repost_own_rx(Ep *ep) noexcept
{
	if (ep->rx_mode == RxMode::AppBuffers)
		return;
	if (ep->rx_mode == RxMode::Staged) {
		staged_repost_unposted(ep);
		return;
	}
	// Claim one missing receive at a time: the send and receive CQs'
	// pollers may both be here.
	size_t n = ep->own_rx_unposted.load(std::memory_order_relaxed);
	while (n) {
		if (!ep->own_rx_unposted.compare_exchange_weak(n, n - 1, std::memory_order_relaxed))
			continue;
		if (ep_post_own_rx(ep)) {
			ep->own_rx_unposted.fetch_add(1, std::memory_order_relaxed);
			return;
		}
		n = ep->own_rx_unposted.load(std::memory_order_relaxed);
	}
}

void msg_report_unposted(Conn *conn, const ibv_send_wr *first, int err) noexcept
{
	Ep *ep = conn->ep;
	const int fi_err = -errno_to_fi(err, ErrPath::Post);
	for (const ibv_send_wr *w = first; w; w = w->next) {
		auto *s = reinterpret_cast<TxSlot *>(w->wr_id);
		if (s->seq != s->op_end || !dc::reports(s->dc))
			continue; // one report per operation, at its last request
		if (s->commit && !pmem_claim_commit(ep, s->commit))
			continue;
		count_completion(s->cntr, false);
		if (!ep->tx_cq)
			continue;
		CqPending p;
		p.is_error = true;
		p.err.op_context = s->context;
		p.err.flags = s->comp_flags;
		p.err.err = fi_err;
		p.err.prov_errno = IBV_WC_GENERAL_ERR; // the post failed, not a request
		cq_push(ep->tx_cq, p);
	}
}

void ep_set_error(Ep *ep) noexcept
{
	if (!ep->conn.qp)
		return;
	ibv_qp_attr attr{};
	attr.qp_state = IBV_QPS_ERR;
	// After a disconnect rdma_cm may already have torn the QP's connection
	// down; failing to move it again is expected then.
	if (int rc = ibv_modify_qp(ep->conn.qp, &attr, IBV_QP_STATE))
		VRMA_INFO(FI_LOG_EP_CTRL, "moving QP %u to the error state: %s\n", ep->conn.qp->qp_num,
			  strerror(rc));
}

// Hazard: the device may still owe the peer the ACK of a message whose
// completion this side has already read: soft-RoCE writes the receive's CQE
// before it sends the ACK. The error state drops an ACK not yet sent, and
// the peer's send, delivered, then ends flushed (FI_ECANCELED) when the
// disconnect reaches it: fabtests' finalize does exactly this (the client
// leaves as soon as it has the server's last message). rdma_disconnect
// would move the QP first; here the QP stays in RTS while the request goes
// out, and goes to the error state when the peer's answer arrives
// (RDMA_CM_EVENT_DISCONNECTED, or the CM's timeout when the peer is gone):
// every ACK this side owes leaves before the peer even learns of the end.
// librdmacm moves the QP only when the id names one, and touches the id's
// QP on no later event once it is ESTABLISHED: hiding it for the call is
// safe for a connected endpoint only.
int ep_disconnect(Ep *ep) noexcept
{
	rdma_cm_id *id = ep->conn.id.get();
	ibv_qp *qp = std::exchange(id->qp, nullptr);
	const int rc = rdma_disconnect(id);
	const int err = errno;
	id->qp = qp;
	errno = err;
	return rc;
}

void ep_cancel_held(Ep *ep) noexcept
{
	Conn &conn = ep->conn;
	std::lock_guard<FastMutex> guard(conn.more_lock);
	if (!conn.more_held.load(std::memory_order_relaxed))
		return;
	// Never run: the requests flush only if the QP is in the error state
	// before they reach it (rdma_cm usually moved it there already).
	ep_set_error(ep);
	post_more_locked(&conn, nullptr);
}

namespace {

// Closes the CQ fi_enable opened for an endpoint with counters only.
struct CqCloser {
	void operator()(Cq *cq) const noexcept { fi_close(&cq->fid); }
};
using OwnCqPtr = std::unique_ptr<Cq, CqCloser>;

// What fi_enable builds, held here until every step succeeded: a failed
// fi_enable frees all of it and leaves the endpoint as it was, so that a
// retry builds everything again (issue 13: a failure after the QP was
// created left it there, and the next fi_enable returned 0 for an endpoint
// without staging buffers). Members are destroyed in reverse order: the QP
// before the buffers and rings it names, before the CQ reservations, before
// the commit service and the CQs it completes into.
// Hazard: the QP may hold posted receives when it is destroyed. It was
// never connected nor moved to the error state, so nothing completes for
// them: no completion names a ring slot after it is freed.
struct EnableParts {
	OwnCqPtr own_cq;
	PmemAttachment pmem;
	CqReservation send_reserved, recv_reserved;
	MrPtr scratch_mr;
	StagingBuffers stage;
	SlotRing<TxSlot> tx;
	SlotRing<RxSlot> rx;
	CmQpPtr qp;
};

// Sizes a ring whose slots name `conn`.
template <typename Slot> void size_ring(SlotRing<Slot> &ring, size_t depth, Conn *conn, SlotKind kind)
{
	ring.reset(depth); // throws std::bad_alloc
	for (uint64_t i = 0; i < ring.capacity(); i++) {
		ring.at(i).conn = conn;
		ring.at(i).kind = kind;
	}
}

// Lends the endpoint the QP, the rings and the staging buffers of `parts`
// while vrma's receives are posted (they name all three): unless kept,
// destruction hands them back to `parts`, which frees them.
class LentParts {
public:
	LentParts(Ep *ep, EnableParts &parts) noexcept : ep_(ep), parts_(parts) { exchange(); }
	~LentParts()
	{
		if (ep_)
			exchange();
	}
	LentParts(const LentParts &) = delete;
	LentParts &operator=(const LentParts &) = delete;
	void keep() noexcept { ep_ = nullptr; }

private:
	void exchange() noexcept
	{
		ep_->conn.qp = ep_->conn.qp ? nullptr : parts_.qp->qp;
		ep_->conn.tx.swap(parts_.tx);
		ep_->rx.swap(parts_.rx);
		if (ep_->staged)
			std::swap(ep_->staged->stage, parts_.stage);
	}
	Ep *ep_;
	EnableParts &parts_;
};

// Makes the endpoint's queues credited (a null CQ: that direction has its
// whole ring reserved) while vrma's own receives are posted (they take
// credits); unless kept, destruction gives back the credits they took
// (the QP that holds them is destroyed without completing them) and leaves
// the endpoint static again. Destroyed before LentParts hands the rings back.
class CreditMode {
public:
	CreditMode(Ep *ep, Cq *send_cq, Cq *recv_cq) noexcept : ep_(ep)
	{
		ep->conn.tx_credits = send_cq;
		ep->conn.tx_spare = send_cq ? 1 : 0;
		ep->conn.set_one_limit(send_cq ? 0 : ep->conn.tx_depth);
		ep->rx_credits = recv_cq;
		ep->rx_post_limit = recv_cq ? 0 : ep->rx_depth;
	}
	~CreditMode()
	{
		if (!ep_)
			return;
		if (ep_->rx_credits)
			cq_credit_give(ep_->rx_credits, ep_->rx.outstanding());
		ep_->conn.tx_credits = nullptr;
		ep_->conn.tx_spare = 0;
		ep_->conn.set_one_limit(ep_->conn.tx_depth);
		ep_->rx_credits = nullptr;
		ep_->rx_post_limit = ep_->rx_depth;
		ep_->own_rx_unposted.store(0);
	}
	CreditMode(const CreditMode &) = delete;
	CreditMode &operator=(const CreditMode &) = delete;
	void keep() noexcept { ep_ = nullptr; }

private:
	Ep *ep_;
};

} // namespace

int ep_enable(Ep *ep) noexcept
try {
	if (ep->conn.qp)
		return 0;
	if (!ep->eq) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: MSG endpoint needs an EQ\n");
		return -FI_ENOEQ;
	}
	if (!ep->tx_cq && !ep->rx_cq &&
	    !ep->cntr_send && !ep->cntr_recv && !ep->cntr_read && !ep->cntr_write) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: endpoint needs a CQ or a counter\n");
		return -FI_ENOCQ;
	}
	if (!ep->conn.id->verbs) {
		VRMA_WARN(FI_LOG_EP_CTRL,
			  "fi_enable: endpoint has neither source nor destination address on an RDMA device\n");
		return -FI_EOPBADSTATE;
	}
	if (ep->conn.id->verbs != ep->domain->ctx) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: the endpoint's address is on %s, not on domain %s\n",
			  ep->conn.id->verbs->device->name, ep->domain->ctx->device->name);
		return -FI_EINVAL;
	}
	EnableParts p;
	if (!ep->tx_cq && !ep->rx_cq) {
		// Counters only: the QP still needs a CQ to complete into.
		fi_cq_attr attr{};
		attr.format = FI_CQ_FORMAT_CONTEXT;
		attr.wait_obj = FI_WAIT_FD;
		attr.size = ep->conn.tx_cap + 1 + ep->rx_depth;
		fid_cq *cq = nullptr;
		if (int rc = cq_open_unbounded(ep->domain, &attr, &cq))
			return rc;
		p.own_cq.reset(static_cast<Cq *>(cq));
	}
	if (ep->service) {
		if (int rc = pmem_ep_enable(ep, p.pmem)) // sets service_cq: the receive CQ
			return rc;
	}
	Cq *send_cq = send_cq_of(ep, p.own_cq.get());
	Cq *recv_cq = recv_cq_of(ep, p.own_cq.get());
	// One extra send slot for the close-time sentinel.
	const size_t send_wrs = ep->conn.tx_cap + 1;
	// Queues the CQ cannot hold whole are credited (one credit kept for
	// the close sentinel); the commit service's CQ is never shared so.
	if (int rc = p.send_reserved.reserve_or_credit(send_cq, send_wrs, 1))
		return rc;
	if (int rc = ep->service_cq ? p.recv_reserved.reserve(recv_cq, ep->rx_depth)
				    : p.recv_reserved.reserve_or_credit(recv_cq, ep->rx_depth, 0))
		return rc;
	// Registrations before the QP: the ones a low RLIMIT_MEMLOCK refuses.
	p.scratch_mr.reset(ibv_reg_mr(ep->domain->pd.get(), ep->conn.scratch, sizeof ep->conn.scratch,
				      IBV_ACCESS_LOCAL_WRITE));
	if (!p.scratch_mr) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "registering the endpoint's scratch buffer: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	if (ep->rx_mode == RxMode::Staged) {
		if (int rc = staged_ep_prepare(ep, p.stage, p.recv_reserved.credited()))
			return rc;
	}
	size_ring(p.tx, send_wrs, &ep->conn, SlotKind::Tx);
	size_ring(p.rx, ep->rx_depth, &ep->conn, SlotKind::Rx);
	ibv_qp_init_attr attr{};
	attr.qp_context = ep;
	attr.send_cq = send_cq->cq.get();
	attr.recv_cq = recv_cq->cq.get();
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 0;
	attr.cap.max_send_wr = static_cast<uint32_t>(send_wrs);
	attr.cap.max_recv_wr = static_cast<uint32_t>(ep->rx_depth);
	attr.cap.max_send_sge = static_cast<uint32_t>(ep->conn.tx_iov_limit + 1);
	attr.cap.max_recv_sge = static_cast<uint32_t>(ep->rx_iov_limit);
	attr.cap.max_inline_data = static_cast<uint32_t>(ep->conn.inline_size);
	if (rdma_create_qp(ep->conn.id.get(), ep->domain->pd.get(), &attr)) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "rdma_create_qp(send %zu, recv %zu, inline %zu): %s\n",
			  send_wrs, ep->rx_depth, ep->conn.inline_size, strerror(err));
		return errno_to_fi(err);
	}
	p.qp.reset(ep->conn.id.get());

	// vrma's own receives, the last step that can fail.
	LentParts lent(ep, p);
	CreditMode credits(ep, p.send_reserved.credited() ? send_cq : nullptr,
			   p.recv_reserved.credited() ? recv_cq : nullptr);
	if (ep->rx_mode == RxMode::Staged) {
		if (int rc = staged_ep_post(ep))
			return rc;
	}
	if (ep->rx_mode == RxMode::ZeroLength || ep->rx_mode == RxMode::Service) {
		const size_t own = own_rx_limit(ep->rx_depth, ep->rx_credits != nullptr);
		for (size_t i = 0; i < own; i++)
			if (int rc = ep_post_own_rx(ep)) {
				if (rc == -FI_EAGAIN && ep->rx_credits) {
					// No credit free: the rest follow as credits come back.
					ep->own_rx_unposted.store(own - i);
					break;
				}
				VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: posting vrma's receives: %s\n",
					  fi_strerror(-rc));
				return rc;
			}
	}

	// Nothing fails from here: the endpoint keeps what was built.
	credits.keep();
	lent.keep();
	(void)p.qp.release();
	p.send_reserved.release();
	p.recv_reserved.release();
	p.pmem.release();
	ep->own_cq = p.own_cq.release();
	ep->conn.scratch_mr = std::move(p.scratch_mr);
	if (attr.cap.max_inline_data < ep->conn.inline_size)
		ep->conn.inline_size = attr.cap.max_inline_data;
	ep->conn.signal_period = signal_period_for(ep->conn.tx_depth);
	msg_set_fast_tx(ep);
	int attach_rc = 0;
	for_each_counter(ep, [&](Cntr *c, Cq *cq) {
		if (int rc = cntr_attach_cq(c, cq))
			attach_rc = rc;
	});
	if (attach_rc)
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: counters cannot wait on the CQ; they still count\n");
	ep->conn.state.store(EpState::Enabled);
	return 0;
} catch (...) {
	VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: out of memory\n");
	return -FI_ENOMEM;
}

int msg_ep_open(fid_domain *domain, fi_info *info, fid_ep **ep_out, void *context) noexcept
try {
	Domain *dom = from_fid<Domain>(&domain->fid);
	if (info->ep_attr && (info->ep_attr->auth_key_size || info->ep_attr->auth_key)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: auth keys are for RDM endpoints; a MSG endpoint's connections are the application's to accept\n");
		return -FI_EINVAL;
	}
	if (dom->scalable_keys && (!info->caps || (info->caps & (FI_RMA | FI_ATOMIC)))) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: MSG endpoints name regions by provider keys; this domain uses scalable keys (open it with an FI_EP_MSG info)\n");
		return -FI_EINVAL;
	}
	auto ep = std::make_unique<Ep>();
	ep->domain = dom;
	ep->conn.domain = dom;
	ep->conn.ep = ep.get();
	ep->conn.reclaim = [](Conn *c) noexcept {
		VRMA_ASSERT_HELD(tx_lock_of(c));
		cq_progress(send_cq_of(c->ep));
	};
	ep->info.reset(fi_dupinfo(info));
	if (!ep->info)
		return -FI_ENOMEM;
	ep->info->handle = nullptr;
	const ibv_device_attr &d = dom->dev_attr;
	ep->conn.tx_depth = clamp_to_device(info->tx_attr ? info->tx_attr->size : 0, params.tx_size, d.max_qp_wr - 1);
	ep->conn.tx_cap = tx_capacity_for(ep->conn.tx_depth, d.max_qp_wr);
	ep->rx_depth = clamp_to_device(info->rx_attr ? info->rx_attr->size : 0, params.rx_size, d.max_qp_wr);
	ep->conn.set_one_limit(ep->conn.tx_depth);
	ep->rx_post_limit = ep->rx_depth;
	const int max_sge = std::min(d.max_sge, static_cast<int>(kMaxSge));
	// One send scatter entry stays free for a staged message's header.
	ep->conn.tx_iov_limit = clamp_to_device(info->tx_attr ? info->tx_attr->iov_limit : 0, params.iov_limit, max_sge - 1);
	ep->rx_iov_limit = clamp_to_device(info->rx_attr ? info->rx_attr->iov_limit : 0, params.iov_limit, max_sge);
	ep->conn.inline_size = static_cast<size_t>(dom->inline_size);
	ep->conn.inject_size = msg_inject_size(ep->conn.inline_size, params.inject_size,
					       info->tx_attr ? info->tx_attr->inject_size : 0, dom->max_wr_bytes);
	ep->conn.inline_size = std::min(ep->conn.inline_size, ep->conn.inject_size);
	ep->conn.bounce_stride = ep->conn.inject_size + sizeof(wire::MsgHeader);
	// Sends cannot be split (a receive takes one); RMA can.
	ep->conn.max_wr_bytes = dom->max_wr_bytes;
	ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags & kTxOpFlags : 0;
	ep->sends_messages = (info->caps & FI_MSG) &&
			     ((info->caps & FI_SEND) || !(info->caps & (FI_SEND | FI_RECV)));
	ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags & kRxOpFlags : 0;
	const uint64_t rx_mode_bits = (info->mode | (info->rx_attr ? info->rx_attr->mode : 0)) & FI_RX_CQ_DATA;
	ep->rx_mode = msg_rx_mode(info->caps, rx_mode_bits, ep->tx_op_flags);
	ep->rx_cq_data_mode = ep->rx_mode == RxMode::AppBuffers && rx_mode_bits;
	if (ep->rx_mode == RxMode::Staged)
		ep->staged = std::make_unique<StagedRx>();
	ep->conn.max_msg_size = msg_max_msg_size(dom->max_wr_bytes,
						 (info->caps & (FI_MSG | FI_SEND | FI_RECV)) != 0,
						 ep->rx_mode == RxMode::Staged);
	if (info->ep_attr && info->ep_attr->max_msg_size &&
	    info->ep_attr->max_msg_size < ep->conn.max_msg_size)
		ep->conn.max_msg_size = info->ep_attr->max_msg_size;
	ep->rma_pmem = info->caps & FI_RMA_PMEM;
	ep->rma_events = info->caps & FI_RMA_EVENT;
	// Commit and event messages, and answers to commits and confirmed
	// messages, use the receive queue: it is vrma's alone (RxMode::Service,
	// or Staged when messages arrive there too).
	if (uses_service(info->caps, ep->tx_op_flags))
		ep->service = std::make_unique<ServiceEp>();
	{
		const int threading = dom->info && dom->info->domain_attr
					      ? dom->info->domain_attr->threading
					      : FI_THREAD_SAFE;
		ep->conn.tx_serialized = !ep->service && (threading == FI_THREAD_DOMAIN ||
						     threading == FI_THREAD_COMPLETION ||
						     threading == FI_THREAD_ENDPOINT);
	}
	if ((ep->tx_op_flags & FI_COMMIT_COMPLETE) && !ep->rma_pmem) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: FI_COMMIT_COMPLETE needs FI_RMA_PMEM in caps\n");
		return -FI_EINVAL;
	}

	// A passive endpoint as the handle (fi_getinfo's hints->handle): the
	// active endpoint takes over its address (fi_endpoint(3)). vrma's
	// passive endpoint binds only when it listens, so the address is free
	// to take; a listening one keeps it.
	const sockaddr *pep_src = nullptr;
	if (info->handle && info->handle->fclass == FI_CLASS_PEP) {
		const Pep *pep = as_vrma_pep(info->handle);
		if (!pep) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: info->handle is another provider's passive endpoint\n");
			return -FI_EINVAL;
		}
		if (pep->listening) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: info->handle is a listening passive endpoint: its address stays with it\n");
			return -FI_EOPBADSTATE;
		}
		if (pep->src_len)
			pep_src = reinterpret_cast<const sockaddr *>(&pep->src);
	}
	if (info->handle && info->handle->fclass != FI_CLASS_PEP) {
		if (info->handle->fclass != FI_CLASS_CONNREQ) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: info->handle is not a connection request\n");
			return -FI_EINVAL;
		}
		auto *cr = static_cast<ConnReq *>(info->handle);
		if (cr->id->verbs != dom->ctx) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: connection request arrived on %s, not on domain %s\n",
				  cr->id->verbs ? cr->id->verbs->device->name : "?", dom->ctx->device->name);
			return -FI_EINVAL;
		}
		ep->conn.id.reset(cr->id);
		ep->responder_resources = cr->responder_resources;
		ep->initiator_depth = cr->initiator_depth;
		msg_set_peer_flags(ep.get(), cr->peer_cm_flags);
		ep->passive_side = true;
		ep->addr_resolved = true;
		// The application's info keeps a dangling handle, as with every
		// provider: the request is consumed here.
		delete cr;
		info->handle = nullptr;
	} else {
		rdma_cm_id *raw = nullptr;
		// A synchronous id: address resolution blocks here (bounded by
		// FI_VRMA_CM_TIMEOUT) so the device is known before fi_enable.
		if (rdma_create_id(nullptr, &raw, nullptr, RDMA_PS_TCP)) {
			int err = errno;
			VRMA_WARN(FI_LOG_EP_CTRL, "rdma_create_id: %s\n", strerror(err));
			return errno_to_fi(err);
		}
		ep->conn.id.reset(raw);
		auto *src = pep_src ? const_cast<sockaddr *>(pep_src) : static_cast<sockaddr *>(info->src_addr);
		auto *dst = static_cast<sockaddr *>(info->dest_addr);
		if (dst) {
			if (rdma_resolve_addr(ep->conn.id.get(), src, dst, params.cm_timeout_ms)) {
				int err = errno;
				VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: resolving %s: %s\n",
					  sockaddr_str(dst).c_str(), strerror(err));
				return errno_to_fi(err);
			}
			ep->addr_resolved = true;
		} else if (src) {
			if (rdma_bind_addr(ep->conn.id.get(), src)) {
				int err = errno;
				VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: binding %s: %s\n",
					  sockaddr_str(src).c_str(), strerror(err));
				return errno_to_fi(err);
			}
		}
		if (ep->conn.id->verbs && ep->conn.id->verbs != dom->ctx) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: address is on %s, not on domain %s\n",
				  ep->conn.id->verbs->device->name, dom->ctx->device->name);
			return -FI_EINVAL;
		}
	}
	ep->conn.id->context = &ep->fid;
	ep->fid.fclass = FI_CLASS_EP;
	ep->fid.context = context;
	ep->fid.ops = const_cast<fi_ops *>(&ep_fi_ops);
	ep->ops = const_cast<fi_ops_ep *>(ep->rx_mode == RxMode::Staged ? &staged_ep_ops : &ep_ops);
	ep->cm = const_cast<fi_ops_cm *>(&ep_cm_ops);
	ep->msg = const_cast<fi_ops_msg *>(msg_ops_for(ep->rx_mode, ep->conn.tx_serialized));
	ep->rma = const_cast<fi_ops_rma *>(rma_ops_for(ep->conn.tx_serialized));
	ep->tagged = const_cast<fi_ops_tagged *>(&tagged_nosys);
	ep->atomic = const_cast<fi_ops_atomic *>(&atomic_nosys);
	ep->collective = const_cast<fi_ops_collective *>(&collective_nosys);
	dom->refs++;
	*ep_out = ep.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

} // namespace vrma
