// FI_PROGRESS_AUTO data progress for MSG endpoints: one thread per domain
// polls the CQs its endpoints complete into when their completion channel
// fires, so that received messages are copied from vrma's staging buffers
// into the application's receives (and the buffers reposted), and counters
// count, while the application calls nothing.
//
// Hazards handled here:
//  - a CQ may be closed while the thread is about to handle its event: the
//    thread handles events under MsgProgress::lock and finds each CQ by the
//    key carried in the epoll data (never a pointer that may be stale or
//    reused); cq_close unregisters under the same lock before it drains the
//    channel and destroys the ibv CQ;
//  - the application may read the channel itself (fi_cq_sread, fi_trywait,
//    fi_cntr_wait): whoever drains it re-arms and polls under the CQ lock,
//    and the thread wakes a reader armed by fi_trywait through the CQ's
//    eventfd (cq_progress_event), so no completion is left unpolled.
#include "vrma_msg_ep.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

namespace vrma {

namespace {

constexpr uint64_t kStopKey = 0; // the stop eventfd's key; CQs get 1, 2, ...

} // namespace

struct MsgProgress {
	Domain *domain = nullptr;
	// Guards cqs, next_key and the thread's start; held by the thread while
	// it handles events.
	CheckedMutex lock;
	std::map<uint64_t, Cq *> cqs;
	uint64_t next_key = kStopKey + 1;
	Fd epoll_fd;
	Fd stop_fd;
	std::thread thread;

	MsgProgress() = default;
	MsgProgress(const MsgProgress &) = delete;
	MsgProgress &operator=(const MsgProgress &) = delete;
	// fi_close of the domain: every CQ is gone; stop and join the thread.
	// (An eventfd write fails only when its count would overflow, which
	// one write to a fresh eventfd cannot.)
	~MsgProgress()
	{
		if (!thread.joinable())
			return;
		eventfd_signal(stop_fd.get());
		thread.join();
	}
};

void MsgProgressDeleter::operator()(MsgProgress *mp) const noexcept
{
	delete mp;
}

namespace {

void run(MsgProgress *mp) noexcept
{
	epoll_event ev[16];
	for (;;) {
		const int n = epoll_wait(mp->epoll_fd.get(), ev, 16, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			VRMA_WARN(FI_LOG_DOMAIN, "data progress thread stops: epoll_wait: %s\n",
				  strerror(errno));
			return;
		}
		std::lock_guard guard(mp->lock);
		for (int i = 0; i < n; i++) {
			if (ev[i].data.u64 == kStopKey)
				return;
			auto it = mp->cqs.find(ev[i].data.u64);
			if (it != mp->cqs.end()) // else closed since epoll_wait returned
				cq_progress_event(it->second);
		}
	}
}

// Creates the epoll set and the stop eventfd and starts the thread (lock
// held). 0 or a negative FI_E* code.
int start(MsgProgress *mp)
{
	VRMA_ASSERT_HELD(mp->lock);
	mp->stop_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (mp->stop_fd.get() < 0)
		return errno_to_fi(errno);
	mp->epoll_fd.reset(epoll_create1(EPOLL_CLOEXEC));
	if (mp->epoll_fd.get() < 0)
		return errno_to_fi(errno);
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.u64 = kStopKey;
	if (epoll_ctl(mp->epoll_fd.get(), EPOLL_CTL_ADD, mp->stop_fd.get(), &ev))
		return errno_to_fi(errno);
	try {
		mp->thread = std::thread(run, mp);
	} catch (...) {
		return -FI_ENOMEM;
	}
	VRMA_INFO(FI_LOG_DOMAIN, "%s: data progress thread started (FI_PROGRESS_AUTO)\n",
		  mp->domain->ctx->device->name);
	return 0;
}

} // namespace

int msg_progress_create(Domain *dom) noexcept
{
	dom->progress.reset(new (std::nothrow) MsgProgress);
	if (!dom->progress) {
		VRMA_WARN(FI_LOG_DOMAIN, "fi_domain: no memory for the data progress state\n");
		return -FI_ENOMEM;
	}
	dom->progress->domain = dom;
	return 0;
}

int msg_progress_attach(Domain *dom, Cq *cq) noexcept
try {
	MsgProgress *mp = dom->progress.get();
	std::lock_guard guard(mp->lock);
	if (!mp->thread.joinable()) {
		if (int rc = start(mp)) {
			VRMA_WARN(FI_LOG_CQ, "fi_cq_open: cannot start the data progress thread: %s\n",
				  fi_strerror(-rc));
			return rc;
		}
	}
	const uint64_t key = mp->next_key++;
	mp->cqs.emplace(key, cq);
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.u64 = key;
	if (epoll_ctl(mp->epoll_fd.get(), EPOLL_CTL_ADD, cq->channel->fd, &ev)) {
		const int err = errno;
		mp->cqs.erase(key);
		VRMA_WARN(FI_LOG_CQ, "fi_cq_open: watching the completion channel: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	cq->progress_key = key;
	return 0;
} catch (...) {
	VRMA_WARN(FI_LOG_CQ, "fi_cq_open: no memory to register the CQ for data progress\n");
	return -FI_ENOMEM;
}

void msg_progress_detach(Domain *dom, Cq *cq) noexcept
{
	MsgProgress *mp = dom->progress.get();
	if (!mp || !cq->progress_key)
		return;
	std::lock_guard guard(mp->lock);
	epoll_ctl(mp->epoll_fd.get(), EPOLL_CTL_DEL, cq->channel->fd, nullptr);
	mp->cqs.erase(cq->progress_key);
	cq->progress_key = 0;
}

} // namespace vrma
