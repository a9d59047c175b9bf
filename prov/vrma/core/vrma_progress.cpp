// The domain's progress engine (contract: vrma_progress.h).
//
// Hazards handled here:
//  - an object may be closed while the thread is about to handle its
//    event: the thread handles events under Progress::lock and finds each
//    source by the key carried in the epoll data (never a pointer that may
//    be stale), and progress_detach removes it under the same lock;
//  - a source attached with a tick while the thread sleeps without a
//    deadline: the attach wakes it (wake_fd) to recompute its timeout;
//  - many sources: a wake-up touches only the sources whose tick is due
//    (a min-heap of deadlines), never the whole set.
#include "vrma_progress.h"
#include "vrma_domain.h"

#include <map>
#include <pthread.h>
#include <queue>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <thread>

namespace vrma {

namespace {

// The engine's own eventfds; sources get kFirstKey, kFirstKey + 1, ...
constexpr uint64_t kStopKey = 0;
constexpr uint64_t kWakeKey = 1;
constexpr uint64_t kFirstKey = 2;

using Clock = std::chrono::steady_clock;

} // namespace

struct Progress {
	Domain *domain = nullptr;
	struct Source {
		ProgressFn fn;
		void *ctx;
		int fd;                // -1: ticks only
		Clock::duration tick;  // zero: no ticks
		Clock::time_point due; // the next tick
	};
	// A tick's deadline. The heap holds one entry per ticking source
	// whose `due` equals the source's; an entry whose source was detached,
	// or whose tick a run for its descriptor pushed later, is dropped (or
	// pushed again) when it comes up. Detached sources' entries leave
	// within one tick: the heap stays bounded by what was attached lately.
	struct Deadline {
		Clock::time_point due;
		uint64_t key;
		bool operator>(const Deadline &o) const noexcept { return due > o.due; }
	};
	// Guards sources, ticks, next_key and the thread's start; held by the
	// thread while it runs handlers.
	CheckedMutex lock;
	std::map<uint64_t, Source> sources;
	std::priority_queue<Deadline, std::vector<Deadline>, std::greater<Deadline>> ticks;
	uint64_t next_key = kFirstKey;
	Fd epoll_fd;
	Fd stop_fd;
	Fd wake_fd;
	std::thread thread;

	Progress() = default;
	Progress(const Progress &) = delete;
	Progress &operator=(const Progress &) = delete;
	// Domain close: every object is closed; stop and join the thread. (A
	// write to a fresh eventfd cannot overflow it.)
	~Progress()
	{
		if (!thread.joinable())
			return;
		eventfd_signal(stop_fd.get());
		thread.join();
	}
};

void ProgressDeleter::operator()(Progress *p) const noexcept
{
	delete p;
}

namespace {

// Runs the ticks that are due and returns the epoll timeout until the next
// one (-1: none). Lock held. Each push follows a pop: the heap's storage
// never grows here, so nothing throws.
int run_ticks(Progress *p) noexcept
{
	VRMA_ASSERT_HELD(p->lock);
	const Clock::time_point now = Clock::now();
	while (!p->ticks.empty() && p->ticks.top().due <= now) {
		const Progress::Deadline d = p->ticks.top();
		p->ticks.pop();
		auto it = p->sources.find(d.key);
		if (it == p->sources.end())
			continue; // detached
		Progress::Source &s = it->second;
		if (s.due <= now) {
			s.fn(s.ctx);
			s.due = now + s.tick;
		}
		p->ticks.push({s.due, d.key}); // its next tick (or the one a run pushed later)
	}
	if (p->ticks.empty())
		return -1;
	const auto ms =
		std::chrono::ceil<std::chrono::milliseconds>(p->ticks.top().due - Clock::now()).count();
	return static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
}

void run(Progress *p) noexcept
{
	epoll_event ev[16];
	int timeout = -1;
	for (;;) {
		const int n = epoll_wait(p->epoll_fd.get(), ev, 16, timeout);
		if (n < 0 && errno != EINTR) {
			VRMA_WARN(FI_LOG_DOMAIN, "progress thread stops: epoll_wait: %s\n", strerror(errno));
			return;
		}
		std::lock_guard guard(p->lock);
		for (int i = 0; i < n; i++) {
			const uint64_t key = ev[i].data.u64;
			if (key == kStopKey)
				return;
			if (key == kWakeKey) {
				eventfd_clear(p->wake_fd.get());
				continue;
			}
			auto it = p->sources.find(key);
			if (it == p->sources.end())
				continue; // detached since epoll_wait returned
			Progress::Source &s = it->second;
			s.fn(s.ctx);
			// The same handler serves the tick: this run was it.
			if (s.tick != Clock::duration::zero())
				s.due = Clock::now() + s.tick;
		}
		timeout = run_ticks(p);
	}
}

int watch(Progress *p, int fd, uint64_t key)
{
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.u64 = key;
	return epoll_ctl(p->epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev) ? errno_to_fi(errno) : 0;
}

// Creates the epoll set and the engine's eventfds and starts the thread
// (lock held). 0 or a negative FI_E* code.
int start(Progress *p)
{
	VRMA_ASSERT_HELD(p->lock);
	p->stop_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	p->wake_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (p->stop_fd.get() < 0 || p->wake_fd.get() < 0)
		return errno_to_fi(errno);
	p->epoll_fd.reset(epoll_create1(EPOLL_CLOEXEC));
	if (p->epoll_fd.get() < 0)
		return errno_to_fi(errno);
	if (int rc = watch(p, p->stop_fd.get(), kStopKey))
		return rc;
	if (int rc = watch(p, p->wake_fd.get(), kWakeKey))
		return rc;
	try {
		p->thread = std::thread(run, p);
	} catch (...) {
		return -FI_ENOMEM;
	}
	// Named before the caller goes on (by the thread itself it would race
	// whoever lists threads right after fi_enable).
	pthread_setname_np(p->thread.native_handle(), "vrma-progress");
	VRMA_INFO(FI_LOG_DOMAIN, "%s: progress thread started\n", p->domain->ctx->device->name);
	return 0;
}

} // namespace

int progress_create(Domain *dom) noexcept
{
	dom->progress.reset(new (std::nothrow) Progress);
	if (!dom->progress) {
		VRMA_WARN(FI_LOG_DOMAIN, "fi_domain: no memory for the progress engine\n");
		return -FI_ENOMEM;
	}
	dom->progress->domain = dom;
	return 0;
}

int progress_attach(Domain *dom, int fd, int tick_ms, ProgressFn fn, void *ctx,
		    uint64_t &key) noexcept
try {
	key = 0;
	Progress *p = dom->progress.get();
	std::lock_guard guard(p->lock);
	if (!p->thread.joinable()) {
		if (int rc = start(p)) {
			VRMA_WARN(FI_LOG_DOMAIN, "cannot start the progress thread: %s\n", fi_strerror(-rc));
			return rc;
		}
	}
	const uint64_t k = p->next_key++;
	const Clock::duration tick = tick_ms > 0 ? Clock::duration(std::chrono::milliseconds(tick_ms))
						 : Clock::duration::zero();
	const Clock::time_point due = Clock::now() + tick;
	p->sources.emplace(k, Progress::Source{fn, ctx, fd, tick, due});
	if (tick_ms > 0) {
		try {
			p->ticks.push({due, k});
		} catch (...) {
			p->sources.erase(k);
			throw;
		}
	}
	if (fd >= 0) {
		if (int rc = watch(p, fd, k)) {
			p->sources.erase(k); // its heap entry, if any, is dropped when due
			VRMA_WARN(FI_LOG_DOMAIN, "progress: cannot watch descriptor %d: %s\n", fd,
				  fi_strerror(-rc));
			return rc;
		}
	}
	if (tick_ms > 0)
		eventfd_signal(p->wake_fd.get());
	key = k;
	return 0;
} catch (...) {
	VRMA_WARN(FI_LOG_DOMAIN, "progress: no memory to register a source\n");
	return -FI_ENOMEM;
}

void progress_detach(Domain *dom, uint64_t &key) noexcept
{
	Progress *p = dom->progress.get();
	if (!p || !key)
		return;
	std::lock_guard guard(p->lock);
	auto it = p->sources.find(key);
	if (it != p->sources.end()) {
		if (it->second.fd >= 0)
			epoll_ctl(p->epoll_fd.get(), EPOLL_CTL_DEL, it->second.fd, nullptr);
		p->sources.erase(it);
	}
	key = 0;
}

} // namespace vrma
