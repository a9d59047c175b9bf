// The persist worker of RDM commit requests (FI_COMMIT_COMPLETE writes to
// an RDM endpoint): a target persists a request's ranges off its endpoint
// lock, on this thread, then answers (vrma_rdm_rma.cpp, rdm_commit_run).
#include "vrma_rdm.h"

#include <algorithm>
#include <condition_variable>
#include <deque>

namespace vrma {

// The persist worker of RDM commit requests: one thread per domain, started
// at the first request. Its lock is a leaf but for the endpoint lock it
// never holds with it: a job is taken under it, run without it (the answer
// under the job's endpoint lock), and `running` names the endpoint of the
// job in hand so that the endpoint's close can wait for it.
struct RdmPersister {
	std::mutex lock;
	std::condition_variable work; // jobs queued, or stop
	std::condition_variable idle; // `running` changed
	std::deque<RdmCommitJob> jobs;
	const RdmEp *running = nullptr;
	bool stop = false;
	std::thread thread;
};

void RdmPersisterDeleter::operator()(RdmPersister *w) const noexcept
{
	delete w;
}

namespace {

void persister_loop(RdmPersister *w)
{
	std::unique_lock guard(w->lock);
	for (;;) {
		w->work.wait(guard, [w] { return w->stop || !w->jobs.empty(); });
		if (w->jobs.empty())
			return; // stopped: the domain's endpoints are closed
		RdmCommitJob job = w->jobs.front();
		w->jobs.pop_front();
		w->running = job.ep;
		guard.unlock();
		rdm_commit_run(job);
		guard.lock();
		w->running = nullptr;
		w->idle.notify_all();
	}
}

// The domain's worker, started if need be (pmem_lock held); nullptr when
// it cannot start.
RdmPersister *persister_of(Domain *dom) noexcept
{
	if (dom->rdm_persister)
		return dom->rdm_persister.get();
	RdmPersisterPtr w(new (std::nothrow) RdmPersister);
	if (!w)
		return nullptr;
	try {
		w->thread = std::thread(persister_loop, w.get());
	} catch (...) {
		VRMA_WARN(FI_LOG_DOMAIN, "cannot start the RDM persist worker: commits are persisted inline\n");
		return nullptr;
	}
	dom->rdm_persister = std::move(w);
	return dom->rdm_persister.get();
}

} // namespace

bool rdm_persist_submit(const RdmCommitJob &job) noexcept
{
	Domain *dom = job.ep->domain;
	std::lock_guard pguard(dom->pmem_lock);
	RdmPersister *w = persister_of(dom);
	if (!w)
		return false;
	{
		std::lock_guard guard(w->lock);
		if (w->jobs.size() >= kRdmPersistQueueMax)
			return false;
		try {
			w->jobs.push_back(job);
		} catch (...) {
			return false;
		}
	}
	w->work.notify_one();
	return true;
}

void rdm_persist_finish(RdmEp *ep) noexcept
{
	RdmPersister *w;
	{
		std::lock_guard pguard(ep->domain->pmem_lock);
		w = ep->domain->rdm_persister.get();
	}
	if (!w)
		return;
	// The worker serves them (in queue order, behind at most the queue's
	// bound of other jobs): their answers go out over connections that
	// still stand, as close lingers after this.
	std::unique_lock guard(w->lock);
	w->idle.wait(guard, [w, ep] {
		return w->running != ep &&
		       std::none_of(w->jobs.begin(), w->jobs.end(), [ep](const RdmCommitJob &j) { return j.ep == ep; });
	});
}

void rdm_persist_stop(Domain *dom) noexcept
{
	RdmPersisterPtr w;
	{
		std::lock_guard pguard(dom->pmem_lock);
		w = std::move(dom->rdm_persister);
	}
	if (!w)
		return;
	{
		std::lock_guard guard(w->lock);
		w->stop = true;
	}
	w->work.notify_one();
	w->thread.join();
}

} // namespace vrma
