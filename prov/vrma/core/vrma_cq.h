// Completion queues and counters (vrma_cq.cpp, vrma_cntr.cpp), the
// progress interface through which they drive endpoints, and the binding
// rules both endpoint kinds share.
#pragma once

#include "cq_credits.h"
#include "vrma_domain.h"

namespace vrma {

// A completion as the CQ will report it.
struct Completion {
	void *op_context = nullptr;
	uint64_t flags = 0;
	size_t len = 0;
	void *buf = nullptr;
	uint64_t data = 0;
	uint64_t tag = 0;
};

// An entry parked in the CQ's software queue: reported later, in order.
struct CqPending {
	bool is_error = false;
	Completion comp;
	fi_cq_err_entry err{};
	fi_addr_t src = FI_ADDR_NOTAVAIL; // fi_cq_readfrom (RDM endpoints)
};

struct RdmEp;

// The RDM endpoints whose completions a CQ or a counter carries: their
// progress runs in its reads and before its waits (FI_PROGRESS_MANUAL), and
// its epoll set watches their completion channels. The lock is taken before
// any endpoint's lock and never under the CQ's own lock
// (vrma_rdm_ep.cpp).
class RdmHooks {
public:
	bool any() const noexcept { return n_.load(std::memory_order_relaxed) != 0; }
	// epoll_fd: the object's epoll set (-1: none); wait_fd: the endpoint's
	// descriptor to watch there (-1: none). 0 or a negative FI_E* code.
	int attach(RdmEp *ep, int epoll_fd, int wait_fd, const char *what) noexcept;
	void detach(RdmEp *ep, int epoll_fd, int wait_fd) noexcept;
	void progress() noexcept;
	// Before a wait: 0 when every endpoint is armed, else what rdm_trywait
	// said (-FI_EAGAIN: something is ready).
	int trywait() noexcept;

private:
	// Recomputes single_ and waits out the readers that may hold an
	// endpoint taken from it (lock_ held; the caller holds no endpoint's
	// lock, which those readers may wait for).
	void republish() noexcept;

	CheckedMutex lock_;
	std::atomic<size_t> n_{0};
	std::vector<RdmEp *> eps_;
	// The only attached endpoint (nullptr: none or several), progressed
	// without lock_: a reader counts itself in readers_ before loading it,
	// and detach() clears it before waiting for readers_ to drain, so an
	// endpoint never goes while a reader holds it (both sides seq_cst).
	std::atomic<RdmEp *> single_{nullptr};
	std::atomic<uint32_t> readers_{0};
};

struct Cq final : fid_cq {
	using FidType = fid_cq;
	Domain *domain = nullptr;
	fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
	fi_wait_obj wait_obj = FI_WAIT_NONE;
	size_t entry_size = 0;
	CompChannelPtr channel;
	CqPtr cq;
	Fd epoll_fd;  // waits on the completion channel and signal_fd
	Fd signal_fd; // eventfd written by fi_cq_signal and cq_push
	std::atomic<bool> user_signal{false}; // fi_cq_signal was called
	CheckedMutex lock;
	RingQueue<CqPending> pending; // change it through cq_enqueue/cq_dequeue only
	// Entries that may wait in `pending` before the pollers that run for
	// the application's posts, counters and the progress thread stop
	// taking work completions from the device (the application's CQ size;
	// unbounded for vrma's own CQs). Send slots then stay unretired and
	// posts say -FI_EAGAIN: a CQ nobody reads holds at most this many
	// entries plus the device's, never a queue that grows without bound.
	// A reader polls the device itself, whatever the bound.
	size_t limit = SIZE_MAX;
	// pending.size(), readable without the lock: a reader's direct delivery
	// (CqSink) must not overtake an entry queued before it.
	std::atomic<size_t> queued{0};
	// The device queue's entries: reserved by bound queues, or the pool
	// the credited queues (cq_reserve_or_credit) take one credit from per
	// posted request and give back when its slot retires. Taken and given
	// without `lock` (cq_credit_take/give) by posters and pollers of every
	// endpoint on the CQ; everything else under `lock`.
	CqCredits credits;
	std::atomic<int> refs{0};
	// A reader may sleep on the wait object (fi_trywait succeeded): entries
	// queued by cq_push must signal it. Set and read under `lock`.
	bool armed = false;
	RdmHooks rdm; // RDM endpoints whose completions come here
	// The key of this CQ in its domain's progress engine (0: not progressed by
	// it). The thread finds CQs by key, never by a pointer it kept.
	uint64_t progress_key = 0;
};

struct Cntr final : fid_cntr {
	using FidType = fid_cntr;
	Domain *domain = nullptr;
	fi_wait_obj wait_obj = FI_WAIT_NONE;
	std::atomic<uint64_t> value{0};
	std::atomic<uint64_t> errors{0};
	Fd event_fd; // written by fi_cntr_add/set: wakes fi_cntr_wait
	Fd epoll_fd; // event_fd and the epoll descriptors of the feeding CQs
	CheckedMutex lock;
	std::map<Cq *, int> cqs; // CQs whose completions feed the counter
	std::atomic<int> refs{0};
	// Threads inside fi_cntr_wait. A count made while one waits writes
	// event_fd: the waiter may sleep on a completion channel that another
	// thread's CQ wait has already drained, or on no channel at all.
	std::atomic<int> waiters{0};
	// Waiters beyond the one that sleeps on epoll_fd sleep here (cntr_wait).
	WaitGate gate;
	RdmHooks rdm; // RDM endpoints whose completions it counts
};

// vrma_cq.cpp
int cq_open(fid_domain *domain, fi_cq_attr *attr, fid_cq **cq, void *context) noexcept;
// A CQ of vrma's own (an endpoint with counters only): no entry limit.
int cq_open_unbounded(fid_domain *domain, fi_cq_attr *attr, fid_cq **cq) noexcept;
int cq_trywait(Cq *cq) noexcept;
// Promises `entries` completion slots to a queue bound to this CQ (grows the
// ibv CQ when needed); returns 0 or a negative FI_E* code.
int cq_reserve(Cq *cq, size_t entries) noexcept;
void cq_unreserve(Cq *cq, size_t entries) noexcept;
// A queue whose reservation does not fit (-FI_ENOSPC from cq_reserve) binds
// as a credited one: grows the CQ to the device's maximum, takes `floor`
// credits for the queue's own use, and counts the queue in Cq::credited.
// 0 or -FI_ENOSPC (not even the floor is free).
int cq_credit_attach(Cq *cq, size_t floor) noexcept;
// Gives back `spare` credits and forgets the queue (its ring drained).
void cq_credit_detach(Cq *cq, size_t spare) noexcept;
// One credit per request: false, nothing taken, when fewer than n are free.
[[gnu::always_inline]] inline bool cq_credit_take(Cq *cq, size_t n) noexcept
{
	return cq->credits.take(n);
}
inline void cq_credit_give(Cq *cq, size_t n) noexcept
{
	cq->credits.give(n);
}
// Entries reserved in a CQ (cq_reserve), given back on destruction unless
// release()d to the queue that uses them.
class CqReservation {
public:
	CqReservation() = default;
	CqReservation(const CqReservation &) = delete;
	CqReservation &operator=(const CqReservation &) = delete;
	~CqReservation()
	{
		if (cq_ && credited_)
			cq_credit_detach(cq_, entries_);
		else if (cq_)
			cq_unreserve(cq_, entries_);
	}
	int reserve(Cq *cq, size_t entries) noexcept
	{
		if (int rc = cq_reserve(cq, entries))
			return rc;
		cq_ = cq;
		entries_ = entries;
		return 0;
	}
	// reserve(), or, when the CQ cannot hold `entries` more, a credited
	// queue holding `floor` credits (cq_credit_attach).
	int reserve_or_credit(Cq *cq, size_t entries, size_t floor) noexcept
	{
		int rc = reserve(cq, entries);
		if (rc != -FI_ENOSPC)
			return rc;
		if ((rc = cq_credit_attach(cq, floor)))
			return rc;
		cq_ = cq;
		entries_ = floor;
		credited_ = true;
		return 0;
	}
	bool credited() const noexcept { return credited_; }
	void release() noexcept { cq_ = nullptr; }

private:
	Cq *cq_ = nullptr;
	size_t entries_ = 0;
	bool credited_ = false;
};
// Polls the CQ until the endpoint has no outstanding work requests or the
// deadline passes; entries of other endpoints are kept for the application.
bool cq_drain_endpoint(Cq *cq, Ep *ep, bool tx_side, int timeout_ms) noexcept;
// Polls what the device has completed into the CQ's queue (counting it).
void cq_progress(Cq *cq) noexcept;
// FI_PROGRESS_AUTO: the domain's progress thread saw the CQ's completion
// channel readable. Under the CQ lock: drains the channel, re-arms it, polls
// the device queue empty into the pending queue, and wakes a reader armed by
// fi_trywait when entries wait.
void cq_progress_event(Cq *cq) noexcept;
// A CQ the domain's progress thread leaves alone (the commit service polls
// its own CQ, under its own lock).
int cq_open_unprogressed(fid_domain *domain, fi_cq_attr *attr, fid_cq **cq) noexcept;
// Queues an entry produced outside the CQ's own polling and wakes waiters.
// Never call it for the CQ whose lock the caller holds.
void cq_push(Cq *cq, const CqPending &entry) noexcept;
// The CQ's software queue (lock held).
inline void cq_enqueue(Cq *cq, const CqPending &entry)
{
	VRMA_ASSERT_HELD(cq->lock);
	cq->pending.push_back(entry); // may throw std::bad_alloc
	cq->queued.store(cq->pending.size(), std::memory_order_relaxed);
}
inline void cq_dequeue(Cq *cq) noexcept
{
	VRMA_ASSERT_HELD(cq->lock);
	cq->pending.pop_front();
	cq->queued.store(cq->pending.size(), std::memory_order_relaxed);
}
// A successful completion produced outside the CQ's own polling (RDM
// endpoints): written straight into the buffer of a fi_cq_read that this
// thread runs on that CQ (CqSink, vrma_cq.cpp) when nothing is queued
// before it, else queued as cq_push does. Never call it for the CQ whose
// lock the caller holds.
void cq_complete(Cq *cq, const Completion &c, fi_addr_t src) noexcept;


// vrma_rdm_ep.cpp: what CQs and counters call.
// Progress of an RDM endpoint: connection events and completions.
void rdm_progress(RdmEp *ep) noexcept;
// Before a wait: progress, then arm the endpoint's completion channel;
// -FI_EAGAIN when something is ready (no sleeping).
int rdm_trywait(RdmEp *ep) noexcept;

// vrma_cntr.cpp
int cntr_open(fid_domain *domain, fi_cntr_attr *attr, fid_cntr **cntr, void *context) noexcept;
// Wakes the threads in fi_cntr_wait (vrma_cntr.cpp).
void cntr_wake(Cntr *cntr) noexcept;
// Counts one completion (success or error) on a counter, if any, from
// whichever thread found it: a CQ poll, a posting call, a provider thread.
// Hazard: the count and fi_cntr_wait's registration in `waiters` are
// sequentially consistent, so either the waiter sees the count before it
// sleeps or this call sees the waiter and wakes it; no count is missed and
// the data path pays a load, not a syscall, when nobody waits.
inline void count_completion(Cntr *cntr, bool success) noexcept
{
	if (!cntr)
		return;
	(success ? cntr->value : cntr->errors).fetch_add(1, std::memory_order_seq_cst);
	if (cntr->waiters.load(std::memory_order_seq_cst) != 0) [[unlikely]]
		cntr_wake(cntr);
}

// The counter polls (and waits on) the CQs that carry its completions.
int cntr_attach_cq(Cntr *cntr, Cq *cq) noexcept;
void cntr_detach_cq(Cntr *cntr, Cq *cq) noexcept;

// One counter slot of an endpoint and the bind flag that fills it.
struct CntrSlot {
	Cntr **slot;
	uint64_t flag;
};
// fi_ep_bind of a counter once the caller checked its flags: the counter is
// the endpoint's domain's, no named slot is taken yet; then it fills them.
int bind_cntr(Cntr *c, const Domain *domain, uint64_t flags,
	      std::initializer_list<CntrSlot> slots) noexcept;

} // namespace vrma
