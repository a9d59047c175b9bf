// Counters: completion counts of the endpoints bound to them, advanced as the
// CQs those endpoints use are polled.
//
// Contract: an operation that feeds a counter is always posted signaled, so
// its completion is seen individually. fi_cntr_read/wait poll the CQs of the
// bound endpoints (entries meant for the application stay queued for it), and
// fi_cntr_wait blocks on those CQs' completion channels and on the counter's
// own eventfd, which fi_cntr_add/set and every count made while a thread
// waits write (count_completion in vrma_cq.h). Of several waiting threads one
// sleeps on those descriptors, the others on the counter's WaitGate.
#include "vrma_cq.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

namespace vrma {

namespace {

// fi_cntr_add/set and their error twins: change one count, wake waiters.
int update(Cntr *c, std::atomic<uint64_t> &count, uint64_t value, bool add)
{
	if (add)
		count.fetch_add(value, std::memory_order_acq_rel);
	else
		count.store(value, std::memory_order_release);
	cntr_wake(c);
	return 0;
}

// Runs fn on every CQ whose completions feed the counter, under the
// counter's lock. An endpoint's close detaches its CQs under that lock
// before they can be closed, so no CQ fn is given is freed while it runs,
// whatever another thread closes.
template <typename Fn> void for_each_feeding_cq(Cntr *c, Fn &&fn)
{
	std::lock_guard guard(c->lock);
	for (auto &[cq, n] : c->cqs)
		fn(cq);
}

void progress(Cntr *c)
{
	for_each_feeding_cq(c, [](Cq *cq) { cq_progress(cq); });
	if (c->rdm.any())
		c->rdm.progress();
}

uint64_t cntr_read(fid_cntr *f) noexcept
{
	Cntr *c = static_cast<Cntr *>(f);
	progress(c);
	return c->value.load(std::memory_order_acquire);
}

uint64_t cntr_readerr(fid_cntr *f) noexcept
{
	Cntr *c = static_cast<Cntr *>(f);
	progress(c);
	return c->errors.load(std::memory_order_acquire);
}

int cntr_add(fid_cntr *f, uint64_t value) noexcept
{
	Cntr *c = static_cast<Cntr *>(f);
	return update(c, c->value, value, true);
}

int cntr_set(fid_cntr *f, uint64_t value) noexcept
{
	Cntr *c = static_cast<Cntr *>(f);
	return update(c, c->value, value, false);
}

int cntr_adderr(fid_cntr *f, uint64_t value) noexcept
{
	Cntr *c = static_cast<Cntr *>(f);
	return update(c, c->errors, value, true);
}

int cntr_seterr(fid_cntr *f, uint64_t value) noexcept
{
	Cntr *c = static_cast<Cntr *>(f);
	return update(c, c->errors, value, false);
}

// fi_cntr_wait's registration in Cntr::waiters (see count_completion).
class CntrWaiter {
public:
	explicit CntrWaiter(Cntr *c) noexcept : c_(c) { c_->waiters.fetch_add(1, std::memory_order_seq_cst); }
	~CntrWaiter() { c_->waiters.fetch_sub(1, std::memory_order_seq_cst); }
	CntrWaiter(const CntrWaiter &) = delete;
	CntrWaiter &operator=(const CntrWaiter &) = delete;

private:
	Cntr *c_;
};

// Threads may wait on one counter together (SOS with SHMEM_THREAD_MULTIPLE
// does): one of them sleeps on the epoll set and alone clears event_fd, the
// others on the counter's gate (see WaitGate for the lost wakeup this
// avoids). Every count made while a thread waits notifies both.
int cntr_wait(fid_cntr *f, uint64_t threshold, int timeout) noexcept
{
	Cntr *c = static_cast<Cntr *>(f);
	const Deadline deadline(timeout);
	const CntrWaiter registered(c);
	const uint64_t errors_before = c->errors.load(std::memory_order_seq_cst);
	auto check = [&]() noexcept {
		progress(c);
		if (c->value.load(std::memory_order_seq_cst) >= threshold)
			return 0;
		if (c->errors.load(std::memory_order_seq_cst) != errors_before)
			return -FI_EAVAIL;
		if (deadline.expired())
			return -FI_ETIMEDOUT;
		return WaitGate::kAgain;
	};
	auto sleep_on_fds = [&]() noexcept {
		// Arm every feeding CQ; completions that slipped in before arming
		// are counted by the next progress() instead of raising an event.
		bool armed = true, blocking = true;
		for_each_feeding_cq(c, [&](Cq *cq) {
			if (cq->wait_obj != FI_WAIT_FD)
				blocking = false;
			else if (cq_trywait(cq))
				armed = false;
		});
		if (c->rdm.any() && c->rdm.trywait())
			armed = false;
		if (!armed)
			return 0;
		int ready[4];
		if (!blocking) {
			// A CQ without a wait object cannot wake us: poll gently.
			const Deadline slice(1);
			wait_epoll(c->epoll_fd.get(), slice, ready, 4);
			return 0;
		}
		const int n = wait_epoll(c->epoll_fd.get(), deadline, ready, 4);
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++)
			if (ready[i] == c->event_fd.get())
				eventfd_clear(c->event_fd.get());
		return 0;
	};
	return c->gate.wait_until(check, sleep_on_fds, [&]() noexcept { return deadline.remaining_ms(); });
}

int cntr_close(fid *f) noexcept
{
	Cntr *c = from_fid<Cntr>(f);
	if (c->refs.load()) {
		VRMA_WARN(FI_LOG_CNTR, "counter still bound to %d endpoints\n", c->refs.load());
		return -FI_EBUSY;
	}
	c->domain->refs--;
	delete c;
	return 0;
}

int cntr_control(fid *f, int command, void *arg) noexcept
{
	Cntr *c = from_fid<Cntr>(f);
	return wait_control(c->wait_obj, c->epoll_fd.get(), command, arg, "counter");
}

constexpr fi_ops cntr_fi_ops = {
	.size = sizeof(fi_ops),
	.close = cntr_close,
	.bind = fid_no_bind,
	.control = cntr_control,
	.ops_open = fid_no_ops_open,
	.tostr = fid_tostr,
	.ops_set = fid_no_ops_set,
};

constexpr fi_ops_cntr cntr_ops = {
	.size = sizeof(fi_ops_cntr),
	.read = cntr_read,
	.readerr = cntr_readerr,
	.add = cntr_add,
	.set = cntr_set,
	.wait = cntr_wait,
	.adderr = cntr_adderr,
	.seterr = cntr_seterr,
};

} // namespace

int cntr_attach_cq(Cntr *c, Cq *cq) noexcept
try {
	std::lock_guard guard(c->lock);
	if (c->cqs[cq]++ == 0 && cq->wait_obj == FI_WAIT_FD) {
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.fd = cq->epoll_fd.get();
		if (epoll_ctl(c->epoll_fd.get(), EPOLL_CTL_ADD, cq->epoll_fd.get(), &ev)) {
			int err = errno;
			c->cqs.erase(cq);
			VRMA_WARN(FI_LOG_CNTR, "counter: watching the CQ: %s\n", strerror(err));
			return errno_to_fi(err);
		}
	}
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

void cntr_detach_cq(Cntr *c, Cq *cq) noexcept
{
	std::lock_guard guard(c->lock);
	auto it = c->cqs.find(cq);
	if (it == c->cqs.end() || --it->second)
		return;
	if (cq->wait_obj == FI_WAIT_FD)
		epoll_ctl(c->epoll_fd.get(), EPOLL_CTL_DEL, cq->epoll_fd.get(), nullptr);
	c->cqs.erase(it);
}

void cntr_wake(Cntr *cntr) noexcept
{
	eventfd_signal(cntr->event_fd.get());
	cntr->gate.notify();
}

int cntr_open(fid_domain *domain, fi_cntr_attr *attr, fid_cntr **cntr_out, void *context) noexcept
try {
	if (!domain || !cntr_out) {
		VRMA_WARN(FI_LOG_CNTR, "fi_cntr_open: NULL domain or output\n");
		return -FI_EINVAL;
	}
	fi_cntr_attr defaults{};
	defaults.events = FI_CNTR_EVENTS_COMP;
	defaults.wait_obj = FI_WAIT_UNSPEC;
	if (!attr)
		attr = &defaults;
	if (attr->events != FI_CNTR_EVENTS_COMP) {
		VRMA_WARN(FI_LOG_CNTR, "fi_cntr_open: only FI_CNTR_EVENTS_COMP counters\n");
		return -FI_ENOSYS;
	}
	if (attr->flags) {
		VRMA_WARN(FI_LOG_CNTR, "fi_cntr_open: unsupported flags 0x%llx\n",
			  static_cast<unsigned long long>(attr->flags));
		return -FI_EBADFLAGS;
	}
	const fi_wait_obj wait = wait_obj_resolve(attr->wait_obj);
	if (wait == FI_WAIT_SET)
		return -FI_ENOSYS;
	auto c = std::make_unique<Cntr>();
	c->domain = from_fid<Domain>(&domain->fid);
	c->wait_obj = wait;
	c->event_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (c->event_fd.get() < 0)
		return errno_to_fi(errno);
	// The counter always has an epoll descriptor: fi_cntr_wait blocks on it
	// even when the application asked for no wait object of its own.
	if (int rc = wait_epoll_create(c->epoll_fd, {c->event_fd.get()}))
		return rc;
	c->fid.fclass = FI_CLASS_CNTR;
	c->fid.context = context;
	c->fid.ops = const_cast<fi_ops *>(&cntr_fi_ops);
	c->ops = const_cast<fi_ops_cntr *>(&cntr_ops);
	c->domain->refs++;
	*cntr_out = c.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

int bind_cntr(Cntr *c, const Domain *domain, uint64_t flags,
	      std::initializer_list<CntrSlot> slots) noexcept
{
	if (c->domain != domain) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): counter belongs to another domain\n");
		return -FI_EINVAL;
	}
	for (const CntrSlot &s : slots)
		if ((flags & s.flag) && *s.slot) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): a counter is already bound for that event\n");
			return -FI_EINVAL;
		}
	for (const CntrSlot &s : slots)
		if (flags & s.flag) {
			*s.slot = c;
			c->refs++;
		}
	return 0;
}

} // namespace vrma
