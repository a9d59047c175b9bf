// Persistent memory: FI_RMA_PMEM endpoints, FI_COMMIT_COMPLETE through the
// target, and the domain extension that declares direct write to pmem.
//
// An FI_RMA_PMEM endpoint's receive queue belongs to vrma: its receives (with
// buffers) complete into the domain's commit-service CQ, not the
// application's. One service thread per domain polls that CQ, so that
//  - a target persists the ranges of a commit request and answers it
//    without any call from the target application;
//  - an initiator's commit completes when the answer arrives, even while
//    the application only waits on its own CQ;
//  - remote CQ data is forwarded to the application's receive CQ.
//
// Hazards handled here:
//  - requests are copied out of their receive buffer before the receive is
//    reposted (the buffer is the next receive's);
//  - the answer is posted outside every CQ lock (posting may poll the
//    endpoint's send CQ: lock order tx, then CQ);
//  - an endpoint being closed has its queued work dropped under the service
//    lock before it is drained, and the service thread holds that lock for
//    a whole iteration, so no job outlives its endpoint;
//  - the commits table is a leaf lock; entries carry a 24-bit id so a late
//    answer or error never completes a reused entry.
#include "vrma_msg_ep.h"
#include "vrma_post.h"

#include <algorithm>
#include <condition_variable>

#include <poll.h>
#include <sys/eventfd.h>

#include "persist.h"

namespace vrma {

struct PmemService {
	Domain *domain = nullptr;
	Cq *cq = nullptr; // receive CQ of every FI_RMA_PMEM endpoint
	Fd wake_fd;       // new jobs, lost connections, stop
	Fd epoll_fd;      // the CQ's wait set and wake_fd
	std::thread thread;
	std::atomic<bool> stop{false};
	// Held by the thread for each iteration; guards eps and the jobs being
	// served.
	CheckedMutex lock;
	std::vector<Ep *> eps;
	// Requests received, to be served (a leaf lock: appended while CQs are
	// polled).
	struct Job {
		Ep *ep;
		uint32_t id;
		size_t n;
		wire::CommitRange ranges[wire::kMaxCommitRanges];
		bool persisted = false; // done: only the answer is left
		wire::CommitStatus status = wire::CommitStatus::Ok;
		// A received message to confirm (wire::kMsgConfirm): the answer is
		// confirm_reply_imm(id); with kMsgPersist its bytes in the
		// application's receive (`local`) are made durable first.
		bool confirm = false;
		size_t nlocal = 0;
		iovec local[kMaxSge];
	};
	CheckedMutex jobs_lock;
	std::deque<Job> jobs;
	// Answers that found the send queue full, retried first, in order
	// (guarded by lock).
	std::deque<Job> retry;
};

namespace {

// Forgets the jobs of an endpoint being closed (service lock held).
void drop_jobs(PmemService *svc, const Ep *ep)
{
	VRMA_ASSERT_HELD(svc->lock);
	auto of_ep = [ep](const PmemService::Job &j) { return j.ep == ep; };
	std::erase_if(svc->retry, of_ep);
	std::lock_guard guard(svc->jobs_lock);
	std::erase_if(svc->jobs, of_ep);
}

} // namespace

void PmemServiceDeleter::operator()(PmemService *svc) const noexcept
{
	delete svc;
}

namespace {

void wake(PmemService *svc)
{
	eventfd_signal(svc->wake_fd.get());
}

persist::CacheFlush cache_flush_method()
{
	static const persist::CacheFlush method = persist::detect_cache_flush();
	return method;
}

// Makes len bytes at addr durable by their backing: msync for memory of a
// shared file mapping (a file's page cache is made durable by writing it
// back; on a DAX file system msync also flushes the CPU caches), a CPU
// cache write-back otherwise; commit_stats counts each.
wire::CommitStatus persist_bytes(Domain *dom, void *addr, size_t len, persist::Backing backing) noexcept
{
	CommitStats &st = dom->commit_stats;
	st.ranges.fetch_add(1, std::memory_order_relaxed);
	st.bytes.fetch_add(len, std::memory_order_relaxed);
	if (backing == persist::Backing::SharedFile) {
		st.msync_calls.fetch_add(1, std::memory_order_relaxed);
		if (int rc = persist::sync_mapped_file(addr, len)) {
			VRMA_WARN(FI_LOG_EP_DATA, "commit: msync(%p, %zu): %s\n", addr, len, strerror(-rc));
			return wire::CommitStatus::PersistFailed;
		}
		return wire::CommitStatus::Ok;
	}
	st.cache_flushes.fetch_add(1, std::memory_order_relaxed);
	persist::flush_cache_range(cache_flush_method(), addr, len);
	return wire::CommitStatus::Ok;
}

} // namespace

wire::CommitStatus commit_persist_range(Domain *dom, uint64_t key, uint64_t addr_,
					uint64_t len) noexcept
{
	// The region stays registered while it is persisted: CPU caches are
	// flushed under mr_lock (cheap), but msync of a file mapping may take
	// milliseconds of I/O, so it runs with the region marked persisting
	// and mr_lock released. fi_mr_reg and every endpoint's key look-ups in
	// this domain do not wait for it; only fi_close of this region does
	// (the application may unmap the memory once it returns, and
	// sync_mapped_file touches every page).
	std::unique_lock guard(dom->mr_lock);
	Mr *mr = mr_by_device_key(dom, key);
	if (!mr || mr->closing)
		return wire::CommitStatus::AccessError;
	const uintptr_t base = reinterpret_cast<uintptr_t>(mr->mr->addr);
	if (!(mr->access & FI_REMOTE_WRITE) || addr_ < base || len > mr->mr->length ||
	    addr_ - base > mr->mr->length - len)
		return wire::CommitStatus::AccessError;
	void *addr = reinterpret_cast<void *>(static_cast<uintptr_t>(addr_));
	// A region registered without FI_RMA_PMEM is persisted all the same,
	// its backing found now (under mr_lock: the look-up reads
	// /proc/self/maps, once per region).
	int backing = mr->backing.load(std::memory_order_relaxed);
	if (backing < 0) {
		backing = pmem_region_backing(mr->addr, false);
		mr->backing.store(backing, std::memory_order_relaxed);
	}
	const auto how = static_cast<persist::Backing>(backing);
	if (how != persist::Backing::SharedFile)
		return persist_bytes(dom, addr, static_cast<size_t>(len), how);
	mr->persisting++;
	guard.unlock();
	const wire::CommitStatus status = persist_bytes(dom, addr, static_cast<size_t>(len), how);
	guard.lock();
	if (--mr->persisting == 0 && mr->closing)
		dom->mr_persisted.notify_all();
	return status;
}

int pmem_region_backing(const void *addr, bool pmem) noexcept
{
	const persist::Backing b = persist::backing_of(addr);
	const bool msync = b == persist::Backing::SharedFile;
	VRMA_INFO(FI_LOG_MR, "region %p%s: %s memory, commits persist it with %s\n", addr,
		  pmem ? " (FI_RMA_PMEM)" : "", persist::name(b),
		  msync ? "msync" : persist::name(cache_flush_method()));
	if (pmem && (b == persist::Backing::Anonymous || b == persist::Backing::PrivateFile ||
		     b == persist::Backing::Unknown))
		VRMA_WARN(FI_LOG_MR,
			  "fi_mr_reg: FI_RMA_PMEM region %p is %s memory, which does not survive a crash: commits into it make data visible, not durable\n",
			  addr, b == persist::Backing::Unknown ? "unidentified" : persist::name(b));
	return static_cast<int>(b);
}

namespace {

// Persists a job's ranges (once) and posts the answer. False when the
// answer must be retried (the send queue is full).
bool serve(PmemService *svc, PmemService::Job &job)
{
	VRMA_ASSERT_HELD(svc->lock);
	if (!job.persisted) {
		// A malformed request arrives with its status set and no ranges.
		for (size_t i = 0; i < job.n && job.status == wire::CommitStatus::Ok; i++)
			job.status = commit_persist_range(svc->domain, job.ranges[i].key,
							  job.ranges[i].addr, job.ranges[i].len);
		for (size_t i = 0; i < job.nlocal && job.status == wire::CommitStatus::Ok; i++)
			// A received message's bytes in the application's receive
			// (no key: vrma copied them there).
			job.status = persist_bytes(svc->domain, job.local[i].iov_base, job.local[i].iov_len,
						   persist::backing_of(job.local[i].iov_base));
		job.persisted = true;
		if (job.n || job.nlocal) {
			svc->domain->commit_stats.requests.fetch_add(1, std::memory_order_relaxed);
			if (job.status != wire::CommitStatus::Ok)
				svc->domain->commit_stats.failures.fetch_add(1, std::memory_order_relaxed);
		}
	}
	ibv_send_wr wr{};
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htonl(job.confirm ? wire::confirm_reply_imm(static_cast<uint8_t>(job.id), job.status)
					: wire::commit_reply_imm(job.id, job.status));
	const TxOp op{nullptr, 0, 0, false, nullptr};
	const ssize_t rc = post_send(&job.ep->conn, wr, op);
	if (rc == -FI_EAGAIN)
		return false;
	if (rc)
		VRMA_INFO(FI_LOG_EP_DATA, "commit answer not sent: %s\n", fi_strerror(static_cast<int>(-rc)));
	return true;
}

// Reports a finished commit or confirmed message to the initiator's CQ and
// counter.
void finish_commit(Ep *ep, const PendingCommit &pc, int err, int prov_errno)
{
	count_completion(pc.cntr, !err);
	if (!ep->tx_cq || (!err && !pc.report))
		return;
	const uint64_t flags = pc.confirm ? FI_SEND | FI_MSG : FI_RMA | FI_WRITE;
	CqPending p;
	if (err) {
		p.is_error = true;
		p.err.op_context = pc.context;
		p.err.flags = flags;
		p.err.err = err;
		p.err.prov_errno = prov_errno;
	} else {
		p.comp = {pc.context, flags, pc.len, nullptr, 0};
	}
	cq_push(ep->tx_cq, p);
}

// An RMA event from the peer: the endpoint's counter, and the counter of
// each region the operation touched.
void count_rma_event(Ep *ep, uint8_t kind, const uint32_t *keys, size_t n)
{
	const bool write = kind == wire::kEventWrite;
	count_completion(write ? ep->cntr_remote_write : ep->cntr_remote_read, true);
	uint64_t keys64[wire::kMaxCommitRanges];
	for (size_t i = 0; i < n; i++)
		keys64[i] = keys[i];
	count_region_events(ep->domain, write, keys64, n);
}

// Takes the busy entry at `id` (mod kMaxCommits) that `match` accepts out
// of the table.
template <typename Match> bool take_pending(Ep *ep, uint32_t id, Match match, PendingCommit &out)
{
	ServiceEp &pm = *ep->service;
	std::lock_guard guard(pm.lock);
	PendingCommit &pc = pm.commits[id % kMaxCommits];
	if (!pc.busy || !match(pc))
		return false;
	out = pc;
	pc.busy = false;
	return true;
}

// Takes the pending commit with this id out of the table.
bool take_commit(Ep *ep, uint32_t id, PendingCommit &out)
{
	return take_pending(ep, id, [id](const PendingCommit &pc) { return pc.id == id; }, out);
}

// Takes the pending confirmation a peer's answer names: the low 8 bits of
// its id (kMaxCommits divides 256, and entries are taken in id order, so
// they name one entry).
bool take_confirm(Ep *ep, uint8_t id8, PendingCommit &out)
{
	static_assert(256 % kMaxCommits == 0, "an 8-bit id names one entry");
	return take_pending(
		ep, id8, [id8](const PendingCommit &pc) { return pc.confirm && (pc.id & 0xff) == id8; }, out);
}

void cancel_commits(Ep *ep)
{
	size_t cancelled = 0;
	for (PendingCommit &entry : ep->service->commits) {
		PendingCommit pc;
		{
			std::lock_guard guard(ep->service->lock);
			if (!entry.busy)
				continue;
			pc = entry;
			entry.busy = false;
		}
		finish_commit(ep, pc, FI_ECANCELED, IBV_WC_WR_FLUSH_ERR);
		cancelled++;
	}
	if (cancelled)
		VRMA_INFO(FI_LOG_EP_DATA, "connection lost: %zu commits cancelled while awaiting their answer\n",
			  cancelled);
}

void service_loop(PmemService *svc)
{
	while (!svc->stop.load(std::memory_order_acquire)) {
		bool retrying;
		{
			std::lock_guard guard(svc->lock);
			cq_progress(svc->cq); // answers complete, requests become jobs
			std::deque<PmemService::Job> work;
			work.swap(svc->retry);
			{
				std::lock_guard jguard(svc->jobs_lock);
				work.insert(work.end(), svc->jobs.begin(), svc->jobs.end());
				svc->jobs.clear();
			}
			for (auto &job : work) {
				if (job.ep->conn.closing.load(std::memory_order_acquire))
					continue;
				if (!serve(svc, job))
					svc->retry.push_back(job);
			}
			for (Ep *ep : svc->eps)
				if (ep->service->cancel.exchange(false))
					cancel_commits(ep);
			retrying = !svc->retry.empty();
		}
		if (retrying) {
			poll(nullptr, 0, 1); // the send queue drains by itself
			continue;
		}
		if (cq_trywait(svc->cq))
			continue; // completions arrived while arming
		int ready[2];
		const int n = wait_epoll(svc->epoll_fd.get(), Deadline(-1), ready, 2);
		for (int i = 0; i < n; i++)
			if (ready[i] == svc->wake_fd.get())
				eventfd_clear(svc->wake_fd.get());
	}
}

int service_start(Domain *dom)
{
	VRMA_ASSERT_HELD(dom->pmem_lock);
	auto svc = std::make_unique<PmemService>();
	svc->domain = dom;
	fi_cq_attr attr{};
	attr.format = FI_CQ_FORMAT_CONTEXT;
	attr.wait_obj = FI_WAIT_FD;
	attr.size = params.rx_size;
	fid_cq *cq = nullptr;
	if (int rc = cq_open_unprogressed(dom, &attr, &cq))
		return rc;
	svc->cq = static_cast<Cq *>(cq);
	svc->wake_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	int rc = svc->wake_fd.get() < 0 ? errno_to_fi(errno) : 0;
	if (!rc)
		rc = wait_epoll_create(svc->epoll_fd, {svc->cq->epoll_fd.get(), svc->wake_fd.get()});
	if (!rc) {
		try {
			svc->thread = std::thread(service_loop, svc.get());
		} catch (...) {
			rc = -FI_ENOMEM;
		}
	}
	if (rc) {
		VRMA_WARN(FI_LOG_DOMAIN, "cannot start the commit service: %s\n", fi_strerror(-rc));
		fi_close(&svc->cq->fid);
		return rc;
	}
	VRMA_INFO(FI_LOG_DOMAIN, "commit service started (cache flush: %s)\n",
		  persist::name(cache_flush_method()));
	dom->pmem.reset(svc.release());
	return 0;
}

void service_stop(Domain *dom)
{
	VRMA_ASSERT_HELD(dom->pmem_lock);
	PmemServicePtr svc = std::move(dom->pmem);
	svc->stop.store(true, std::memory_order_release);
	wake(svc.get());
	svc->thread.join();
	if (int rc = fi_close(&svc->cq->fid))
		VRMA_WARN(FI_LOG_DOMAIN, "closing the commit service CQ: %s\n", fi_strerror(-rc));
}

} // namespace

namespace {

MrPtr register_buffer(Domain *dom, std::unique_ptr<uint8_t[]> &buf, size_t bytes)
{
	buf.reset(new (std::nothrow) uint8_t[bytes]());
	if (!buf)
		return nullptr;
	return MrPtr(ibv_reg_mr(dom->pd.get(), buf.get(), bytes, IBV_ACCESS_LOCAL_WRITE));
}

int set_direct_write_to_pmem(fid_domain *domain, int enable) noexcept
{
	if (!domain || domain->fid.fclass != FI_CLASS_DOMAIN) {
		VRMA_WARN(FI_LOG_DOMAIN, "set_direct_write_to_pmem: not a vrma domain\n");
		return -FI_EINVAL;
	}
	Domain *dom = from_fid<Domain>(&domain->fid);
	dom->direct_write_to_pmem.store(enable != 0);
	VRMA_INFO(FI_LOG_DOMAIN, "%s: RDMA writes %s the persistence domain directly\n",
		  dom->ctx->device->name, enable ? "land in" : "do not land in");
	return 0;
}

int commit_stats(fid_domain *domain, fi_vrma_commit_stats *out) noexcept
{
	if (!domain || domain->fid.fclass != FI_CLASS_DOMAIN || !out) {
		VRMA_WARN(FI_LOG_DOMAIN, "commit_stats: NULL output or not a vrma domain\n");
		return -FI_EINVAL;
	}
	Domain *dom = from_fid<Domain>(&domain->fid);
	const CommitStats &st = dom->commit_stats;
	out->requests = st.requests.load();
	out->ranges = st.ranges.load();
	out->bytes = st.bytes.load();
	out->msync_calls = st.msync_calls.load();
	out->cache_flushes = st.cache_flushes.load();
	out->failures = st.failures.load();
	out->cache_flush = persist::name(cache_flush_method());
	return 0;
}

int mr_cache_stats_op(fid_domain *domain, fi_vrma_mr_cache_stats *out) noexcept
{
	if (!domain || domain->fid.fclass != FI_CLASS_DOMAIN || !out) {
		VRMA_WARN(FI_LOG_DOMAIN, "mr_cache_stats: NULL output or not a vrma domain\n");
		return -FI_EINVAL;
	}
	mr_cache_stats(from_fid<Domain>(&domain->fid), *out);
	return 0;
}

int rma_stats_op(fid_domain *domain, fi_vrma_rma_stats *out) noexcept
{
	if (!domain || domain->fid.fclass != FI_CLASS_DOMAIN || !out) {
		VRMA_WARN(FI_LOG_DOMAIN, "rma_stats: NULL output or not a vrma domain\n");
		return -FI_EINVAL;
	}
	out->read_backs = from_fid<Domain>(&domain->fid)->read_backs.load();
	return 0;
}

int mr_stats_op(fid_domain *domain, fi_vrma_mr_stats *out) noexcept
{
	if (!domain || domain->fid.fclass != FI_CLASS_DOMAIN || !out) {
		VRMA_WARN(FI_LOG_DOMAIN, "mr_stats: NULL output or not a vrma domain\n");
		return -FI_EINVAL;
	}
	const Domain *dom = from_fid<Domain>(&domain->fid);
	out->on_demand = dom->on_demand_regions.load();
	out->registered = dom->on_demand_registered.load();
	return 0;
}

const fi_vrma_domain_ops vrma_domain_ops = {
	.size = sizeof(fi_vrma_domain_ops),
	.set_direct_write_to_pmem = set_direct_write_to_pmem,
	.commit_stats = commit_stats,
	.mr_cache_stats = mr_cache_stats_op,
	.rma_stats = rma_stats_op,
	.mr_stats = mr_stats_op,
};

} // namespace

int domain_ops_open(fid *f, const char *name, uint64_t flags, void **ops, void *context) noexcept
{
	if (name && ops && !strcmp(name, FI_VRMA_DOMAIN_OPS)) {
		if (flags) {
			VRMA_WARN(FI_LOG_DOMAIN, "fi_open_ops(%s): unsupported flags\n", name);
			return -FI_EBADFLAGS;
		}
		*ops = const_cast<fi_vrma_domain_ops *>(&vrma_domain_ops);
		return 0;
	}
	return fid_no_ops_open(f, name, flags, ops, context);
}

int pmem_commit_method(const Ep *ep) noexcept
{
	if (!ep->rma_pmem)
		return FI_VRMA_COMMIT_NONE;
	// Native FLUSH (kCmFlagNativeFlush) needs ibv_wr_flush, which
	// rdma-core 44 lacks: never chosen by this build.
	switch (wire::peer_commit(ep->conn.peer_cm_flags.load(std::memory_order_acquire))) {
	case wire::PeerCommit::DirectWrite:
		return FI_VRMA_COMMIT_DIRECT_WRITE;
	case wire::PeerCommit::Service:
		return FI_VRMA_COMMIT_TARGET;
	case wire::PeerCommit::None:
		break;
	}
	return FI_VRMA_COMMIT_NONE;
}

int pmem_ep_enable(Ep *ep, PmemAttachment &attachment) noexcept
try {
	Domain *dom = ep->domain;
	std::unique_ptr<uint8_t[]> req_buf, rx_buf;
	MrPtr req_mr = register_buffer(dom, req_buf, kMaxCommits * wire::kCommitMsgMax);
	// A staged endpoint receives into its staging buffers.
	const bool staged = ep->rx_mode == RxMode::Staged;
	MrPtr rx_mr = req_mr && !staged
			      ? register_buffer(dom, rx_buf, ep->rx_depth * wire::kCommitMsgMax)
			      : nullptr;
	if (!req_mr || (!rx_mr && !staged)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_enable: cannot register the commit message buffers\n");
		return -FI_ENOMEM;
	}
	std::lock_guard guard(dom->pmem_lock);
	const bool first = !dom->pmem;
	if (first) {
		if (int rc = service_start(dom))
			return rc;
	}
	try {
		std::lock_guard sguard(dom->pmem->lock);
		dom->pmem->eps.push_back(ep); // the last step that can fail
	} catch (...) {
		if (first)
			service_stop(dom); // nobody else uses it yet
		return -FI_ENOMEM;
	}
	ServiceEp &pm = *ep->service;
	// Answers consume the receives vrma keeps posted.
	pm.max_commits = std::min(kMaxCommits, staged ? staged_buffer_count(ep) : ep->rx_depth);
	pm.req_buf = std::move(req_buf);
	pm.req_mr = std::move(req_mr);
	pm.rx_buf = std::move(rx_buf);
	pm.rx_mr = std::move(rx_mr);
	ep->service_cq = dom->pmem->cq;
	attachment.hold(ep);
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

PmemAttachment::~PmemAttachment()
{
	if (!ep_)
		return;
	pmem_ep_detach(ep_);
	ServiceEp &pm = *ep_->service;
	pm.req_mr.reset();
	pm.req_buf.reset();
	pm.rx_mr.reset();
	pm.rx_buf.reset();
}

void pmem_ep_quiesce(Ep *ep) noexcept
{
	PmemService *svc = ep->domain->pmem.get();
	if (!ep->service_cq || !svc)
		return;
	// ep->conn.closing is set: no new job names it once this lock is ours.
	std::lock_guard guard(svc->lock);
	drop_jobs(svc, ep);
}

void pmem_ep_detach(Ep *ep) noexcept
{
	Domain *dom = ep->domain;
	std::lock_guard guard(dom->pmem_lock);
	if (!dom->pmem)
		return;
	bool last;
	{
		std::lock_guard sguard(dom->pmem->lock);
		std::erase(dom->pmem->eps, ep);
		drop_jobs(dom->pmem.get(), ep);
		last = dom->pmem->eps.empty();
	}
	ep->service_cq = nullptr;
	if (last)
		service_stop(dom);
}

namespace {

// Queues a request (or a confirmation) for the service thread.
void queue_job(Ep *ep, PmemService::Job &job)
{
	PmemService *svc = ep->domain->pmem.get();
	if (!svc)
		return;
	job.ep = ep;
	{
		std::lock_guard guard(svc->jobs_lock);
		svc->jobs.push_back(job);
	}
	wake(svc);
}

} // namespace

void pmem_control_message(Ep *ep, const uint8_t *msg, size_t len) noexcept
try {
	if (len && msg[0] == wire::kRmaEvent) {
		uint8_t kind = 0;
		uint32_t keys[wire::kMaxCommitRanges];
		size_t nkeys = 0;
		if (!wire::decode_rma_event(msg, len, kind, keys, nkeys))
			VRMA_WARN(FI_LOG_EP_DATA, "malformed RMA event (%zu bytes) ignored\n", len);
		else if (ep->rma_events)
			count_rma_event(ep, kind, keys, nkeys);
		return;
	}
	PmemService::Job job{};
	bool is_request = wire::decode_commit_request(msg, len, job.id, job.ranges, job.n);
	if (!is_request && len >= sizeof(wire::CommitHeader)) {
		// Answer it as malformed: the initiator must not wait forever.
		wire::CommitHeader h;
		memcpy(&h, msg, sizeof h);
		job.id = le32toh(h.id) & wire::kCommitIdMask;
		job.status = wire::CommitStatus::Malformed;
		job.n = 0;
		is_request = true;
	}
	if (job.status != wire::CommitStatus::Ok || !is_request)
		VRMA_WARN(FI_LOG_EP_DATA, "malformed commit request (%zu bytes)\n", len);
	if (is_request)
		queue_job(ep, job);
} catch (...) {
	VRMA_WARN(FI_LOG_EP_DATA, "out of memory handling a commit message\n");
}

void pmem_answer(Ep *ep, uint32_t imm) noexcept
{
	PendingCommit pc;
	const bool found = wire::is_confirm_reply(imm)
				   ? take_confirm(ep, static_cast<uint8_t>(imm & 0xff), pc)
				   : take_commit(ep, wire::commit_reply_id(imm), pc);
	if (!found)
		return; // failed or cancelled meanwhile
	switch (wire::commit_reply_status(imm)) {
	case wire::CommitStatus::Ok:
		finish_commit(ep, pc, 0, 0);
		break;
	case wire::CommitStatus::AccessError:
		finish_commit(ep, pc, FI_EACCES, IBV_WC_REM_ACCESS_ERR);
		break;
	case wire::CommitStatus::PersistFailed:
		finish_commit(ep, pc, FI_EREMOTEIO, IBV_WC_REM_OP_ERR);
		break;
	default:
		finish_commit(ep, pc, FI_EREMOTEIO, IBV_WC_REM_INV_REQ_ERR);
		break;
	}
}

void pmem_confirm_received(Ep *ep, uint8_t id, bool persist, const iovec *iov, size_t count,
			   size_t len) noexcept
try {
	PmemService::Job job{};
	job.id = id;
	job.confirm = true;
	if (persist) {
		// The bytes copied: the receive's pieces from the front, up to len.
		for (size_t i = 0; i < count && len && job.nlocal < kMaxSge; i++) {
			const size_t n = std::min(len, iov[i].iov_len);
			if (n)
				job.local[job.nlocal++] = {iov[i].iov_base, n};
			len -= n;
		}
	}
	queue_job(ep, job);
} catch (...) {
	VRMA_WARN(FI_LOG_EP_DATA, "out of memory confirming a message\n");
}

void pmem_rx_completion(Ep *ep, const ibv_wc &wc, const void *buf) noexcept
{
	const auto *msg = static_cast<const uint8_t *>(buf);
	const bool plain = wc.opcode == IBV_WC_RECV && !(wc.wc_flags & IBV_WC_WITH_IMM);
	if (plain) {
		// Copied by the handler: reposting hands the buffer to the next
		// receive.
		pmem_control_message(ep, msg, wc.byte_len);
	}
	if (int rc = ep_post_own_rx(ep))
		VRMA_WARN(FI_LOG_CQ, "reposting a vrma receive: %s\n", fi_strerror(-rc));
	if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		// Remote CQ data: the application's receive CQ hears of it (or
		// its only CQ, as on other RMA-only endpoints).
		if (Cq *cq = ep->rx_cq ? ep->rx_cq : ep->tx_cq) {
			CqPending p;
			p.comp = {nullptr, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, wc.byte_len,
				  nullptr, ntohl(wc.imm_data)};
			cq_push(cq, p);
		}
		return;
	}
	if (wc.opcode == IBV_WC_RECV && (wc.wc_flags & IBV_WC_WITH_IMM))
		pmem_answer(ep, ntohl(wc.imm_data)); // to one of our commits or messages
}

namespace {

// The next pending entry, in id order (ServiceEp::lock held); nullptr when
// as many answers are awaited as the endpoint has receives for (answers
// consume them) or the entry is still busy.
PendingCommit *next_pending(ServiceEp &pm)
{
	VRMA_ASSERT_HELD(pm.lock);
	size_t busy = 0;
	for (const PendingCommit &pc : pm.commits)
		busy += pc.busy;
	const uint32_t id = pm.next_id & wire::kCommitIdMask;
	PendingCommit &pc = pm.commits[id % kMaxCommits];
	if (pc.busy || busy >= pm.max_commits)
		return nullptr;
	pm.next_id = (pm.next_id + 1) & wire::kCommitIdMask;
	pc.id = id;
	return &pc;
}

} // namespace

int pmem_begin_confirm(Ep *ep, void *context, size_t len, Cntr *cntr, bool report) noexcept
{
	ServiceEp &pm = *ep->service;
	std::lock_guard guard(pm.lock);
	PendingCommit *pc = next_pending(pm);
	if (!pc)
		return -FI_EAGAIN;
	const uint32_t id = pc->id;
	*pc = {true, id, context, len, cntr, report, true};
	return static_cast<int>(id + 1);
}

int pmem_begin_commit(Ep *ep, const wire::CommitRange *ranges, size_t n, void *context,
		      size_t len, Cntr *cntr, bool report, ibv_sge &request) noexcept
{
	ServiceEp &pm = *ep->service;
	std::lock_guard guard(pm.lock);
	PendingCommit *slot = next_pending(pm);
	if (!slot)
		return -FI_EAGAIN;
	const uint32_t id = slot->id;
	*slot = {true, id, context, len, cntr, report};
	uint8_t *msg = pm.req_buf.get() + (id % kMaxCommits) * wire::kCommitMsgMax;
	const size_t msg_len = wire::encode_commit_request(msg, id, ranges, n);
	request = {reinterpret_cast<uintptr_t>(msg), static_cast<uint32_t>(msg_len), pm.req_mr->lkey};
	return static_cast<int>(id + 1);
}

void pmem_abort_commit(Ep *ep, uint32_t commit) noexcept
{
	pmem_claim_commit(ep, commit);
}

bool pmem_claim_commit(Ep *ep, uint32_t commit) noexcept
{
	PendingCommit pc;
	return ep->service && take_commit(ep, commit - 1, pc);
}

bool pmem_commits_pending(Ep *ep) noexcept
{
	std::lock_guard guard(ep->service->lock);
	for (const PendingCommit &pc : ep->service->commits)
		if (pc.busy)
			return true;
	return false;
}

void pmem_connection_lost(Ep *ep) noexcept
{
	ep->service->cancel.store(true, std::memory_order_release);
	if (PmemService *svc = ep->domain->pmem.get())
		wake(svc);
}

} // namespace vrma
