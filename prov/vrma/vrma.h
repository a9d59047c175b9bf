// vrma: private declarations shared by the provider's files.
#pragma once

#include <cerrno>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_rma.h>
#include <rdma/providers/fi_log.h>

#include "conn_auth.h"
#include "key_table.h"
#include <rdma/providers/fi_prov.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "av_table.h"
#include "fast_mutex.h"
#include "intrusive_fifo.h"
#include "ring_queue.h"
#include "slot_ring.h"
#include "wait_gate.h"
#include "vrma_errno.h"
#include "vrma_mr_cache.h"
#include "vrma_verbs.h"
#include "vrma_wire.h"

namespace vrma {

namespace rdm { // rdm_wire.h
enum class KeyStatus : uint8_t;
struct KeyAnswer;
} // namespace rdm

// The core writes its own state into provider.context: keep it mutable.
extern fi_provider provider;

inline constexpr uint32_t kProviderVersion = FI_VERSION(0, 1);
inline constexpr uint32_t kApiVersion = FI_VERSION(1, 17);

#define VRMA_WARN(subsys, ...) FI_WARN(&::vrma::provider, subsys, __VA_ARGS__)
#define VRMA_INFO(subsys, ...) FI_INFO(&::vrma::provider, subsys, __VA_ARGS__)
#define VRMA_DBG(subsys, ...) FI_DBG(&::vrma::provider, subsys, __VA_ARGS__)

// Provider parameters (FI_VRMA_*), read once at fi_prov_ini.
struct Params {
	size_t tx_size = 384;      // default send queue depth per endpoint
	size_t rx_size = 384;      // default receive queue depth per endpoint
	size_t iov_limit = 4;      // default scatter/gather entries per operation
	size_t cq_size = 1024;     // default completion queue entries
	int inline_size = -1;      // -1: as much as the device allows
	size_t inject_size = 4096; // beyond the inline size: bounce buffers
	int cm_timeout_ms = 2000;  // address/route resolution timeout
	int listen_backlog = 1024;
	size_t max_wr_size = 0;    // bytes per work request; 0: the device's max_msg_sz
	size_t max_cqe = 0;        // entries a CQ grows to at most; 0: the device's max_cqe
	size_t stage_buffers = wire::kMaxStagePieces; // per staged endpoint, 1..kStageBuffers
	// Answer utility providers (ofi_rxm) that layer over vrma's MSG
	// endpoints. Off: the core lists its layered RDM endpoint ("vrma;ofi_rxm")
	// before any DL provider's own, so `-p vrma -e rdm` would never reach
	// vrma's native RDM endpoint.
	bool util_layering = false;
};
extern Params params;
void params_init() noexcept;

// ThreadSanitizer does not see that a work request's completion follows its
// post: the device orders them, through memory TSan does not watch. TSan
// builds release each request's wr_id (its ring slot) before posting it and
// acquire the wr_id of each completion polled, so what the poster wrote
// into the slot is ordered before the poller's reads of it. Nothing in other
// builds. Every ibv_post_* and every completion handler calls these.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void *addr);
extern "C" void __tsan_release(void *addr);
template <typename Wr> inline void device_will_post(const Wr *wr) noexcept
{
	for (; wr; wr = wr->next)
		__tsan_release(reinterpret_cast<void *>(static_cast<uintptr_t>(wr->wr_id)));
}
inline void device_completed(uint64_t wr_id) noexcept
{
	__tsan_acquire(reinterpret_cast<void *>(static_cast<uintptr_t>(wr_id)));
}
#else
template <typename Wr> inline void device_will_post(const Wr *) noexcept {}
inline void device_completed(uint64_t) noexcept {}
#endif

// memcpy for buffers the application or a peer names: an empty one may be
// null (fi_send(ep, NULL, 0, ...)), and memcpy from or to null is
// undefined even for 0 bytes.
inline void copy_bytes(void *dst, const void *src, size_t n) noexcept
{
	if (n)
		memcpy(dst, src, n);
}

// What vrma offers.
inline constexpr uint64_t kMsgCaps = FI_MSG | FI_SEND | FI_RECV;
inline constexpr uint64_t kRmaCaps =
	FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
inline constexpr uint64_t kDomainCaps = FI_LOCAL_COMM | FI_REMOTE_COMM;
// FI_RMA_PMEM and FI_RMA_EVENT endpoints own their receive queue (offered
// only when asked for); with messages, those arrive through staging buffers.
inline constexpr uint64_t kOwnRxCaps = FI_RMA_PMEM | FI_RMA_EVENT;
inline constexpr uint64_t kCaps = kMsgCaps | kRmaCaps | kDomainCaps | FI_FENCE | kOwnRxCaps;
// FI_DELIVERY_COMPLETE and FI_COMMIT_COMPLETE are honoured for RMA writes
// (a read-back or the target's commit), trivially for reads, and for sends
// (a read-back behind the send to a peer that receives into the
// application's buffers, or the peer's confirmation: uses_service).
inline constexpr uint64_t kTxOpFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
				       FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE |
				       FI_COMMIT_COMPLETE;
inline constexpr uint64_t kRxOpFlags = FI_COMPLETION;
// RC orders everything except a later write or send overtaking an earlier
// read's data (WAR/SAR are not promised).
inline constexpr uint64_t kMsgOrder = FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_RAS |
				      FI_ORDER_WAW | FI_ORDER_WAS | FI_ORDER_SAW |
				      FI_ORDER_SAS;
inline constexpr int kMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
// Modes vrma can take up when the application offers them.
inline constexpr uint64_t kOptionalModes = FI_RX_CQ_DATA;
inline constexpr size_t kCqDataSize = 4; // 32-bit immediate data
// Scatter/gather entries are built on the stack: at most this many.
inline constexpr size_t kMaxSge = 32;
// Remote segments of one RMA operation (rma_iov_limit).
inline constexpr size_t kMaxRmaIov = 16;
// RMA segments longer than one work request carries are split: endpoints
// without messages offer max_msg_size = this many work requests' worth.
inline constexpr size_t kMaxSplitWr = 64;
// Work requests of one operation: one per remote segment and per split,
// plus the read that makes a write delivery-complete or a commit request,
// plus the event message for a peer with FI_RMA_EVENT.
inline constexpr size_t kMaxOpWr = kMaxRmaIov + kMaxSplitWr + 2;
static_assert(wire::kMaxStagePieces <= kMaxOpWr, "a staged message is one operation");
// The requests a send queue holds: tx_depth as asked, but never less than
// the longest operation needs (kMaxOpWr, as far as the device allows). A
// smaller queue would refuse operations that max_msg_size admits.
inline size_t tx_capacity_for(size_t asked, int max_qp_wr) noexcept
{
	const size_t device = max_qp_wr > 1 ? static_cast<size_t>(max_qp_wr) - 1 : 1;
	return std::min(std::max(asked, kMaxOpWr), std::max(asked, device));
}
// Most staging buffers an endpoint with staged receives keeps posted (the
// default of FI_VRMA_STAGE_BUFFERS): a largest message fits without waiting
// for the application. With fewer, the sender's pieces wait in RNR retries
// until the application's receives free buffers; nothing is lost.
inline constexpr size_t kStageBuffers = wire::kMaxStagePieces;
// Smallest FI_VRMA_MAX_WR_SIZE honoured.
inline constexpr size_t kMinWrBytes = 4096;
// Work requests of an injected operation: inject_size is capped at one work
// request's bytes, so an inject never splits (bounce buffers count on it).
inline constexpr size_t kMaxInjectOpWr = kMaxRmaIov + 2;

// Bytes vrma puts in one work request on a port with this max_msg_sz.
inline size_t wr_bytes_limit(uint32_t port_max_msg_sz) noexcept
{
	const size_t port = port_max_msg_sz ? port_max_msg_sz : kMinWrBytes;
	if (!params.max_wr_size || params.max_wr_size >= port)
		return port;
	return std::max(params.max_wr_size, std::min(kMinWrBytes, port));
}
// Whether an endpoint with these caps receives messages / may be the target
// of remote writes (a class bit without direction bits means both).
inline bool receives_messages(uint64_t caps) noexcept
{
	return (caps & FI_MSG) && ((caps & FI_RECV) || !(caps & (FI_SEND | FI_RECV)));
}
inline bool accepts_remote_writes(uint64_t caps) noexcept
{
	constexpr uint64_t dirs = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	return (caps & FI_REMOTE_WRITE) || ((caps & FI_RMA) && !(caps & dirs));
}
// Endpoints whose receive queue is vrma's and completes into the domain's
// service CQ (Ep::service): FI_RMA_PMEM / FI_RMA_EVENT (commit and event
// messages), and message endpoints opened with FI_DELIVERY_COMPLETE or
// FI_COMMIT_COMPLETE (their peer's confirmations of messages arrive there,
// and they confirm what they receive).
inline bool uses_service(uint64_t caps, uint64_t tx_op_flags) noexcept
{
	return (caps & kOwnRxCaps) ||
	       ((caps & FI_MSG) && (tx_op_flags & (FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE)));
}
// Remote CQ data must not take the application's receives unless it took on
// FI_RX_CQ_DATA, nor may a service endpoint's messages: such an endpoint
// receives messages through vrma's staging buffers (wire::MsgHeader),
// copied, at most wire::kStagedMsgMax bytes.
inline bool uses_staged_rx(uint64_t caps, uint64_t mode, uint64_t tx_op_flags = 0) noexcept
{
	return receives_messages(caps) &&
	       (uses_service(caps, tx_op_flags) ||
		(accepts_remote_writes(caps) && !(mode & FI_RX_CQ_DATA)));
}

// At least one send request in this many is signaled (fewer completions to
// poll, yet slots and bounce buffers always come back; see post_send_chain).
inline constexpr uint64_t kSignalPeriod = 16;
static_assert(kMaxRmaIov <= wire::kMaxCommitRanges, "a commit message covers every remote segment");
// FI_COMMIT_COMPLETE operations of one endpoint awaiting the target's answer.
inline constexpr size_t kMaxCommits = 64;

// fi_info owned by a provider object.
struct FiInfoDeleter {
	void operator()(fi_info *i) const noexcept { fi_freeinfo(i); }
};
using FiInfoPtr = std::unique_ptr<fi_info, FiInfoDeleter>;

// Recover the provider object from the fid the application hands back. Each
// object derives from its libfabric fid struct, whose first member is the fid.
template <typename T> T *from_fid(fid *f) noexcept
{
	return static_cast<T *>(reinterpret_cast<typename T::FidType *>(f));
}

struct Eq;
struct Cq;
struct Ep;
struct RdmPeer;
struct Mr;
struct Cntr;
struct PmemService;
struct MsgProgress;
// Defined where MsgProgress is (vrma_progress.cpp).
struct MsgProgressDeleter {
	void operator()(MsgProgress *mp) const noexcept;
};
using MsgProgressPtr = std::unique_ptr<MsgProgress, MsgProgressDeleter>;
// Defined where PmemService is (vrma_pmem.cpp).
struct PmemServiceDeleter {
	void operator()(PmemService *svc) const noexcept;
};
using PmemServicePtr = std::unique_ptr<PmemService, PmemServiceDeleter>;
// The persist worker of RDM commit requests (vrma_pmem.cpp).
struct RdmPersister;
struct RdmPersisterDeleter {
	void operator()(RdmPersister *w) const noexcept;
};
using RdmPersisterPtr = std::unique_ptr<RdmPersister, RdmPersisterDeleter>;

// Target-side counters of the commit service (fi_vrma_commit_stats).
struct CommitStats {
	std::atomic<uint64_t> requests{0}, ranges{0}, bytes{0}, msync_calls{0}, cache_flushes{0},
		failures{0};
};

// Entries for fi_ops members a class does not implement. The inline fi_*
// wrappers call through these pointers unchecked (ofi_rxm probes
// fi_open_ops on the core domain, for instance): never leave one NULL.
int fid_no_bind(fid *f, fid *bfid, uint64_t flags) noexcept;
int fid_no_control(fid *f, int command, void *arg) noexcept;
int fid_no_ops_open(fid *f, const char *name, uint64_t flags, void **ops, void *context) noexcept;
int fid_tostr(const fid *f, char *buf, size_t len) noexcept;
int fid_no_ops_set(fid *f, const char *name, uint64_t flags, void *ops, void *context) noexcept;

// Operation-table entries for calls a class does not offer: -FI_ENOSYS and
// one warning instead of a NULL pointer.
template <typename F> struct NoSys;
template <typename R, typename... A> struct NoSys<R (*)(A...)> {
	static R fn(A...) noexcept
	{
		FI_WARN(&provider, FI_LOG_CORE, "operation not supported by vrma\n");
		return static_cast<R>(-FI_ENOSYS);
	}
};
#define VRMA_NOSYS(table, member) ::vrma::NoSys<decltype(table::member)>::fn

struct Fabric final : fid_fabric {
	using FidType = fid_fabric;
	std::string name;
	DeviceListPtr devices; // rdma_cm's contexts: the ones cm ids are bound to
	std::atomic<int> refs{0};
};

// What an application's desc (fi_mr_desc) points to: the registered range
// and local key of one region, checked and read by the data path.
//
// Contract (issue 13): a desc stays safe to look at after fi_close of its
// region, until fi_close of the domain. Records live in the domain's
// MrDescPool, whose memory goes back to the allocator only with the
// domain. Closing a region empties its record's range (start UINTPTR_MAX,
// end 0: no buffer is inside it, so every post naming it is refused with
// -FI_EINVAL, or on RDM endpoints the desc is ignored) and queues the record
// for reuse behind kMrDescQuarantine others: the desc of a closed region is
// refused at least until that many more regions were closed. After that it
// may name a new region; the bounds check still keeps the device within
// memory registered in this domain, but the application's stale desc then
// goes unnoticed. Fields are relaxed atomics: a post racing the close of
// its region (the application's bug) reads the old or the new values,
// never undefined ones; on x86 they are plain loads.
struct MrDesc {
	std::atomic<uintptr_t> start{UINTPTR_MAX};
	std::atomic<uintptr_t> end{0};
	std::atomic<uint32_t> lkey{0};
	// The device may write into it (RDMA READ targets, receives): on RDM
	// endpoints (no FI_MR_LOCAL) a desc lacking it is ignored rather than
	// trusted.
	std::atomic<bool> local_write{false};
	// A region registered on demand and not registered yet: its range is
	// empty until then, and the MSG data path, which needs the device's
	// key, registers it through this (desc_register_on_demand). Set and
	// cleared under Domain::mr_lock.
	std::atomic<Mr *> on_demand{nullptr};
	MrDesc *next_free = nullptr; // MrDescPool's queue, under Domain::mr_lock

	uint32_t key() const noexcept { return lkey.load(std::memory_order_relaxed); }
	// [buf, buf + len) lies within the open region. Three compares and no
	// branch; when a > end, end - a wraps, but that term is then masked.
	[[gnu::always_inline]] bool covers(const void *buf, size_t len) const noexcept
	{
		const uintptr_t a = reinterpret_cast<uintptr_t>(buf);
		const uintptr_t s = start.load(std::memory_order_relaxed);
		const uintptr_t e = end.load(std::memory_order_relaxed);
		return (a >= s) & (a <= e) & (len <= e - a);
	}
	bool closed() const noexcept
	{
		return start.load(std::memory_order_relaxed) == UINTPTR_MAX &&
		       end.load(std::memory_order_relaxed) == 0;
	}
};

// A closed record is reused only when this many more are queued behind it.
inline constexpr size_t kMrDescQuarantine = 1024;

// The domain's MrDesc records, under Domain::mr_lock: allocated in chunks,
// never freed before the domain (see MrDesc for why).
class MrDescPool {
public:
	MrDescPool() = default;
	MrDescPool(const MrDescPool &) = delete;
	MrDescPool &operator=(const MrDescPool &) = delete;
	// A record for a new region, its range set; nullptr when out of memory.
	MrDesc *take(uintptr_t start, size_t len, uint32_t lkey, bool local_write) noexcept;
	// Closes the record (empty range) and queues it for reuse.
	void give(MrDesc *d) noexcept;

private:
	static constexpr size_t kChunk = 64;
	struct Chunk {
		std::unique_ptr<Chunk> next;
		MrDesc recs[kChunk];
	};
	std::unique_ptr<Chunk> chunks_;
	size_t used_ = kChunk; // records handed out of chunks_ (the newest)
	IntrusiveFifo<MrDesc, &MrDesc::next_free> closed_; // oldest first
};

// One FI_WARN for a non-empty buffer its desc does not cover (closed
// region, or outside its range): -FI_EINVAL. Cold: the data path calls it
// only on refusal.
[[gnu::cold]] ssize_t desc_refused(const MrDesc *d, const void *buf, size_t len) noexcept;
// A desc that does not cover [buf, buf + len) because its region is
// registered on demand and not yet: registers it now (true when the desc
// covers the buffer afterwards). False for any other desc.
[[gnu::cold]] bool desc_register_on_demand(Domain *dom, const MrDesc *d, const void *buf,
					   size_t len) noexcept;

struct Domain final : fid_domain {
	using FidType = fid_domain;
	Fabric *fabric = nullptr;
	ibv_context *ctx = nullptr; // owned by the fabric's device list
	PdPtr pd;
	FiInfoPtr info;
	ibv_device_attr dev_attr{};
	// IBTA 1.5 capabilities from device_cap_flags_ex (bits 38-40; Debian's
	// rdma-core 44 headers lack the names). Detected, not assumed: the 6.1
	// rxe has none of them.
	bool cap_flush_global = false;
	bool cap_flush_persistent = false;
	bool cap_atomic_write = false;
	size_t max_wr_bytes = 0; // wr_bytes_limit() of port 1
	int inline_size = 0; // what a QP of this domain is created with
	std::atomic<int> refs{0};
	// Persistent memory. Declared by the application (fi_ext_vrma.h):
	// RDMA writes into this domain land in the persistence domain.
	std::atomic<bool> direct_write_to_pmem{false};
	// The job key of its RDM endpoints (domain_attr->auth_key, else
	// FI_VRMA_AUTH_KEY; an endpoint's ep_attr->auth_key overrides it);
	// empty: connections are not authenticated (vrma_rdm_conn.cpp).
	auth::Key auth_key;
	// Regions by rkey: the commit service checks requested ranges here,
	// RMA events name regions by it.
	std::mutex mr_lock;
	// Signalled when a region's last msync outside mr_lock ends
	// (Mr::persisting), for the fi_close waiting on it.
	std::condition_variable mr_persisted;
	std::map<uint32_t, Mr *> mrs_by_key;
	MrDescPool mr_descs; // what descs point to (MrDesc), under mr_lock
	// Scalable keys (domain_scalable_keys): regions go by the application's
	// requested_key, published in key_table for peers to read with RDMA
	// READ (key_table.h). The table is under mr_lock.
	bool scalable_keys = false;
	std::unique_ptr<uint8_t[]> key_table_mem;
	MrPtr key_table_mr;
	keys::KeyTable key_table;
	// Registration on demand (vrma_mr.cpp): a large region the application
	// has not touched yet is registered with the device at its first
	// remote access (a peer's KeyRequest) or local device use, not at
	// fi_mr_reg, so that its memory is not pinned (faulted in) before it
	// is used. Domains for FI_EP_RDM only (their peers translate keys);
	// regions of at least on_demand_min bytes (0: never). Under mr_lock:
	// such regions by fid_mr::key, from fi_mr_reg to fi_close, and the
	// next provider key for one (kOnDemandKeyBit set).
	size_t on_demand_min = 0;
	std::unordered_map<uint64_t, Mr *> on_demand;
	uint64_t next_on_demand_key = 1;
	std::atomic<uint64_t> on_demand_regions{0}, on_demand_registered{0};
	// Serves commit messages while FI_RMA_PMEM endpoints exist.
	std::mutex pmem_lock;
	PmemServicePtr pmem;
	// Persists RDM endpoints' commit requests off their locks; started at
	// the first request (under pmem_lock), stopped with the domain.
	RdmPersisterPtr rdm_persister;
	CommitStats commit_stats;
	// Delivery read-backs MSG endpoints posted (fi_vrma_rma_stats).
	std::atomic<uint64_t> read_backs{0};
	// Registrations of application buffers (vrma_mr_cache.h): made at the
	// first rendezvous; state 0 not yet, 1 caching, 2 off.
	std::mutex mr_cache_open_lock;
	std::atomic<int> mr_cache_state{0};
	std::unique_ptr<MrCache, MrCacheDeleter> mr_cache;
	std::atomic<uint64_t> mr_uncached{0}; // registrations for one transfer only
	// FI_PROGRESS_AUTO data progress of MSG endpoints (vrma_progress.cpp):
	// set at fi_domain when the info asks for it (not for FI_EP_RDM, whose
	// endpoints run their own thread); its thread starts with the first CQ.
	MsgProgressPtr progress;
};

struct Mr final : fid_mr {
	using FidType = fid_mr;
	Domain *domain = nullptr;
	// mem_desc: the data path reads the range and key through it, and it
	// outlives this Mr (MrDesc).
	MrDesc *desc = nullptr;
	MrPtr mr;
	uint32_t mr_rkey = 0; // the device key (fid_mr::key is the application's with scalable keys)
	bool published = false; // in the domain's key table (scalable keys, remote access)
	uint64_t access = 0; // FI_* access bits as registered
	// The range as the application registered it, and the verbs rights
	// it maps to.
	void *addr = nullptr;
	size_t len = 0;
	int ibv_access = 0;
	uint64_t offset = 0; // scalable keys: the address initiators name addr by
	// Registered on demand (Domain::on_demand): `mr` is null until the
	// device registration is made (mr_register_now).
	bool on_demand = false;
	// FI_RMA_EVENT counters (fi_mr_bind), read by the domain's service.
	std::atomic<Cntr *> cntr_remote_read{nullptr};
	std::atomic<Cntr *> cntr_remote_write{nullptr};
	// How commits persist this region, a persist::Backing value: found at
	// registration with FI_RMA_PMEM (persistent memory, the application's
	// commit target), else at the first commit into it (-1: not yet;
	// written under the domain's mr_lock).
	std::atomic<int> backing{-1};
	// Commits msyncing this region's file mapping outside mr_lock, and
	// fi_close waiting for them to end (no new one starts then). Both
	// under the domain's mr_lock.
	uint32_t persisting = 0;
	bool closing = false;
};
static_assert(offsetof(fid_mr, mem_desc) > 0, "layout");

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

	std::mutex lock_;
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
	std::mutex lock;
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
	size_t cqe = 0;      // entries the ibv CQ holds
	// Entries promised to bound queues; written under `lock`, read without
	// it by a reader deciding whether the device queue matters.
	std::atomic<size_t> reserved{0};
	// The rest of the device queue, cqe - reserved - credits held: the
	// pool the credited queues (cq_reserve_or_credit) take one credit from
	// per posted request and give it back when its slot retires. Taken
	// and given without `lock` (cq_credit_take/give) by posters and
	// pollers of every endpoint on the CQ; cq_reserve takes from it under
	// `lock`. Never negative: a queue holds no more requests than credits,
	// so even a flush of every queue cannot overrun the device CQ.
	std::atomic<ptrdiff_t> credits{0};
	// Credited queues bound (under `lock`): the device queue is used.
	std::atomic<size_t> credited{0};
	std::atomic<int> refs{0};
	// A reader may sleep on the wait object (fi_trywait succeeded): entries
	// queued by cq_push must signal it. Set and read under `lock`.
	bool armed = false;
	RdmHooks rdm; // RDM endpoints whose completions come here
	// The key of this CQ in its domain's MsgProgress (0: not progressed by
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
	std::mutex lock;
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

// Work request bookkeeping; wr_id points to a slot.
enum class SlotKind : uint8_t { Tx, Rx };
struct Conn;
struct SlotHeader {
	Conn *conn = nullptr;
	uint64_t seq = 0;
	SlotKind kind = SlotKind::Tx;
};
// TxSlot::aux bits in which the owner names a buffer the request holds
// until it completes (RDM: a shared send buffer). Such a request is always
// signaled: its buffer comes back with its own completion, not behind a
// later signaled request, which a connection that goes quiet never posts.
inline constexpr uint32_t kAuxHeldBuffer = 0xffffff;

struct TxSlot : SlotHeader {
	uint64_t op_end = 0; // sequence of the operation's last work request
	void *context = nullptr;
	uint64_t comp_flags = 0; // FI_SEND|FI_MSG, FI_RMA|FI_WRITE, ...
	size_t len = 0;
	Cntr *cntr = nullptr;    // counts the completion (success or error)
	bool report = false;     // a successful completion goes to the CQ
	// FI_COMMIT_COMPLETE through the target: id + 1 of the pending commit
	// the target's answer completes (0: none). Errors of the operation's
	// requests claim it.
	uint32_t commit = 0;
	// The owner's own mark (RDM: what the request is, and the send buffer
	// it holds, kAuxHeldBuffer); MSG endpoints leave it 0.
	uint32_t aux = 0;

	// TxSlot::commit marks of delivery-complete writes sharing one
	// read-back (MSG endpoints; pmem commit ids are 24 bits):
	// kDcDeferred, a write whose proof is a later read (its read-back
	// dropped); kDcProof, a write whose own read-back also proves the
	// deferred writes before it; kDcCloser, vrma's read that does only
	// that (no completion of its own).
	static constexpr uint32_t kDcDeferred = UINT32_MAX, kDcProof = UINT32_MAX - 1,
				  kDcCloser = UINT32_MAX - 2;
	static bool pmem_commit(uint32_t c) noexcept { return c && c < kDcCloser; }

	void fill(uint64_t seq_, uint64_t op_end_, void *context_, uint64_t comp_flags_, size_t len_,
		  bool report_, Cntr *cntr_, uint32_t commit_, uint32_t aux_ = 0) noexcept
	{
		aux = aux_;
		seq = seq_;
		op_end = op_end_;
		context = context_;
		comp_flags = comp_flags_;
		len = len_;
		report = report_;
		cntr = cntr_;
		commit = commit_;
	}
};
struct RxSlot : SlotHeader {
	void *context = nullptr;
	void *buf = nullptr;
	size_t len = 0;
	Cntr *cntr = nullptr;
	bool report = true;
	bool internal = false; // posted by vrma for remote CQ data (reposted)
};

// Registered buffers, allocated at first use and indexed by send sequence
// (see Ep and slot_buffers_ready).
struct SlotBuffers {
	std::unique_ptr<uint8_t[]> buf;
	MrPtr mr;
};

// What one work completion turns into for the application.
enum class Outcome { None, Success, Error };

// An application receive on an endpoint with staged receives, waiting in
// vrma's queue (the device's receive queue holds staging buffers).
struct StagedRecv {
	void *context = nullptr;
	iovec iov[kMaxSge];
	size_t count = 0;
	size_t capacity = 0; // bytes of iov
	bool report = true;
	Cntr *cntr = nullptr;
};

// A piece that arrived in a staging buffer, not yet copied out.
struct StagedArrival {
	uint8_t *buf;
	uint32_t len;
};

// An endpoint's staging buffers: `count` of wire::kStageBytes, one
// registration (staged_ep_prepare).
struct StagingBuffers {
	std::unique_ptr<uint8_t[]> buffers;
	MrPtr mr;
	size_t count = 0;
	std::vector<uint8_t *> unposted; // staging buffers a repost failed for
};

// Receive side of staged messages (all under the endpoint's rx lock).
// Pieces are consumed strictly in arrival order; a message is matched to
// the oldest posted receive when its first piece is consumed.
struct StagedRx {
	StagingBuffers stage;
	std::deque<StagedRecv> posted;
	std::deque<StagedArrival> arrivals;
	// The message being copied into `cur`.
	bool active = false;
	StagedRecv cur;
	uint64_t total = 0; // payload bytes the header announced
	uint64_t seen = 0;  // payload bytes arrived so far
	bool has_data = false;
	uint32_t data = 0;
	uint8_t confirm_flags = 0; // wire::kMsgConfirm / kMsgPersist of `cur`'s message
	uint8_t confirm_id = 0;
	bool cancelled = false; // the connection died: receives fail at once
	// Bytes of the message being received still to arrive in later pieces
	// (the poller's view of the stream, ahead of matching): a piece
	// arriving when it is 0 starts a message or is a provider message
	// (commit request, RMA event), told apart by its first byte. A
	// message's pieces are posted as one chain, so nothing comes between.
	uint64_t stream_left = 0;
};

enum class EpState : uint8_t { Idle, Enabled, Connecting, Connected, Shutdown };

// Work requests held back by FI_MORE, posted with one doorbell by the first
// operation without it (or when full). Copies: the caller's stack is gone.
// Inline payloads are copied here (the device copies inline data only when
// the chain is posted, and the caller may reuse its buffer at once).
struct MoreChain {
	static constexpr size_t kMaxWr = 32;
	ibv_send_wr wr[kMaxWr];
	ibv_sge sge[kMaxWr * kMaxSge];
	size_t nwr = 0;
	size_t nsge = 0;
	std::unique_ptr<uint8_t[]> inline_buf; // kMaxWr * the endpoint's inline size
	size_t inline_cap = 0;
	size_t inline_used = 0;
	// Conn::dc_open: where the closing zero-length read goes (no key is
	// checked for it, but the address is the last write's).
	uint64_t dc_addr = 0;
	uint32_t dc_rkey = 0;
};

// One FI_COMMIT_COMPLETE operation waiting for the target's answer.
struct PendingCommit {
	bool busy = false;
	uint32_t id = 0; // 24 bits on the wire; index = id % kMaxCommits
	void *context = nullptr;
	size_t len = 0;
	Cntr *cntr = nullptr;
	bool report = false;
	// A message sent with FI_DELIVERY_COMPLETE or FI_COMMIT_COMPLETE,
	// waiting for the peer's confirmation (wire::confirm_reply_imm).
	bool confirm = false;
};

// State of an FI_RMA_PMEM or FI_RMA_EVENT endpoint, or of a message
// endpoint opened with delivery or commit completion (uses_service). Its receive queue is
// vrma's own and completes into the domain's service CQ, whose thread
// answers commit requests and counts RMA events (target) and completes
// answered commits (initiator).
struct ServiceEp {
	std::mutex lock; // the commits table (a leaf lock)
	PendingCommit commits[kMaxCommits];
	uint32_t next_id = 0;
	size_t max_commits = kMaxCommits;
	// Request messages, one buffer per commits[] entry.
	std::unique_ptr<uint8_t[]> req_buf;
	MrPtr req_mr;
	// Receive buffers, one per receive queue entry (seq % rx_depth).
	std::unique_ptr<uint8_t[]> rx_buf;
	MrPtr rx_mr;
	std::atomic<bool> cancel{false}; // the connection died: fail what waits
};

// One RC connection: the queue pair and everything that posts to it (the
// send slot ring, the FI_MORE chain, the bounce, event and header buffers,
// the peer's CM flags, the connection state). A MSG endpoint owns one; an
// RDM endpoint owns one per peer. The data path core (vrma_post.h) works on
// a Conn, so both endpoint kinds share rma_one/send_one/post_send_one.
// Hazard: slots name their Conn (SlotHeader::conn) and completions arrive
// until the QP is drained: a Conn is freed only after its ring drained.
struct Conn {
	Domain *domain = nullptr;
	Ep *ep = nullptr;       // the MSG endpoint owning it, or nullptr
	RdmPeer *peer = nullptr; // the RDM peer owning it, or nullptr
	CmIdPtr id;
	ibv_qp *qp = nullptr; // id->qp once enabled
	std::atomic<EpState> state{EpState::Idle};
	std::atomic<bool> closing{false};
	// wire::kCmFlag* the peer announced; set before Connected, read
	// through peer_has().
	std::atomic<uint8_t> peer_cm_flags{0};
	// RDM, a connection this side initiated: the acceptor's flags arrive
	// with the ESTABLISHED event, which a first message from the peer can
	// overtake (rdm_conn_established). Until the event was handled, RMA
	// waits (-FI_EAGAIN): whether the target counts events is unknown.
	bool peer_flags_pending = false;

	// Requests in flight before a post says -FI_EAGAIN (tx_attr->size).
	size_t tx_depth = 0;
	// Requests the send queue holds (tx_capacity_for): an operation of more
	// than tx_depth requests (a long split RMA) goes alone, when nothing
	// else is in flight.
	size_t tx_cap = 0;
	// Requests in flight before post_send_one takes the long way: tx_depth,
	// or 0 when the send queue is credited (tx_credits), so that every
	// post of such a queue goes through post_send_chain_locked, which
	// takes the credits; the fast path pays nothing for credits.
	size_t tx_one_limit = 0;
	// The send CQ whose credit pool this queue posts from (nullptr: its
	// whole ring is reserved in the CQ, cq_reserve). One credit per pushed
	// slot, given back when the slot retires (handle_wc) or is unpushed.
	Cq *tx_credits = nullptr;
	// Credits held by no slot: the one taken at fi_enable for the close
	// sentinel (conn_post_sentinel), given back at close if not used.
	size_t tx_spare = 0;
	size_t tx_iov_limit = 0;
	size_t inline_size = 0; // bytes the QP takes inline
	size_t inject_size = 0; // bytes an inject may carry (bounce beyond inline)
	size_t max_msg_size = 0;
	size_t max_wr_bytes = 0; // longer RMA segments are split
	// RDMA READs posted and not retired, and how many may be: a READ the
	// queue pair has no credit for (max_rd_atomic) stalls the send queue,
	// and every request behind it, until an earlier READ completes. The
	// RDM endpoint holds further READs back rather than post them (an
	// answer the peer waits for must not queue behind them).
	uint32_t reads_out = 0;
	uint32_t read_credits = 1;
	// RDM: the endpoint's send buffers this connection's requests hold
	// (RdmEp::tx_free; its share: RdmEp::tx_share).
	uint32_t bufs_held = 0;

	std::mutex tx_lock;
	// The application serializes this connection's transmit calls (domain
	// threading FI_THREAD_DOMAIN, FI_THREAD_COMPLETION or
	// FI_THREAD_ENDPOINT) and no provider thread posts on it: the data
	// path skips tx_lock (TxGuard).
	bool tx_serialized = false;
	SlotRing<TxSlot> tx;
	uint64_t last_signaled = 0; // sequence of the last signaled send WR
	// An unsignaled request at least this far after the last signaled one
	// is signaled (min(tx_depth / 2, kSignalPeriod), set at fi_enable).
	uint64_t signal_period = 1;
	// Touched by the CQ poller only: the last operation an error was
	// reported for (its other requests' flushes are not reported again).
	uint64_t failed_op_end = UINT64_MAX;
	// RDM: why the connection was failed, when its flushed requests should
	// say so rather than FI_ECANCELED (FI_ETIMEDOUT: the drain watch); 0.
	int fail_err = 0;
	// Reclaims finished send requests when the ring is full (slow path):
	// polls the CQ the send queue completes into.
	void (*progress)(Conn *) noexcept = nullptr;
	// Target of the small RDMA READ that makes writes durable (commit).
	uint64_t scratch[2] = {0, 0};
	MrPtr scratch_mr;
	std::unique_ptr<MoreChain> more; // allocated at the first FI_MORE (tx lock)
	// Guards the chain's contents and more_held. Posters take it under
	// the tx lock; when the connection ends ep_cancel_held takes it under
	// the EQ lock (EQ thread) or a CQ lock (the poller that saw a request
	// fail), which may not take the tx lock, and a serialized endpoint has
	// none. A leaf: nothing is locked under it, so what a failed post of
	// the chain reports (report_unposted takes CQ locks) waits until it is
	// released, and no poster holds it while polling. A FastMutex: posters
	// take it once per FI_MORE call, nearly always uncontended (std::mutex
	// cost 90 instructions per such call, callgrind).
	FastMutex more_lock;
	// The chain holds requests; read without more_lock by the fast path,
	// which then takes the long way.
	std::atomic<bool> more_held{false};
	// Delivery-complete writes wait in the held chain with their
	// read-backs dropped (kDcDeferred) and no read is queued behind them
	// yet (tx lock; close_deferred, vrma_post.h). Whatever is posted next
	// queues one first, or carries it (kDcProof).
	bool dc_open = false;
	// Provider messages that ride with an operation, one buffer per send
	// slot, allocated at first use (copy_to_slot_buffer): RMA event
	// messages (wire::RmaEvent), and headers of staged messages sent as
	// pieces (wire::MsgHeader); RDM commit requests too long for an event
	// buffer (rdm::kCommitRequestMax).
	SlotBuffers event_bufs;
	SlotBuffers msg_hdr_bufs;
	SlotBuffers commit_bufs;
	// Registered copies of injected payloads too large for inline data,
	// allocated at the first such inject. Buffer i serves the operation
	// whose first sequence is i modulo kBounceCount: free once that
	// operation retired, which post_send_chain checks from the ring.
	static constexpr size_t kBounceCount = 64;
	size_t bounce_stride = 0; // inject_size and room for a header
	SlotBuffers bounce;

	// Points every slot of a freshly sized ring at this connection.
	void reset_tx(size_t depth) // throws std::bad_alloc
	{
		tx.reset(depth);
		for (uint64_t i = 0; i < tx.capacity(); i++) {
			tx.at(i).conn = this;
			tx.at(i).kind = SlotKind::Tx;
		}
	}
};

struct Ep final : fid_ep {
	using FidType = fid_ep;
	Domain *domain = nullptr;
	FiInfoPtr info;
	Conn conn; // the endpoint's one connection
	Cq *tx_cq = nullptr;
	Cq *rx_cq = nullptr;
	Cq *own_cq = nullptr; // created when only counters are bound
	Cntr *cntr_send = nullptr;
	Cntr *cntr_recv = nullptr;
	Cntr *cntr_read = nullptr;
	Cntr *cntr_write = nullptr;
	bool tx_selective = false;
	bool rx_selective = false;
	Eq *eq = nullptr;
	bool addr_resolved = false;
	bool passive_side = false; // created from a connection request
	// FI_SHUTDOWN was queued for the endpoint: it gets one when its
	// connection ends, whichever side or failure ended it
	// (report_shutdown, vrma_cm.cpp).
	std::atomic<bool> shutdown_reported{false};
	uint8_t responder_resources = 0;
	uint8_t initiator_depth = 0;

	uint64_t tx_op_flags = 0;
	uint64_t rx_op_flags = 0;
	bool sends_messages = false; // FI_MSG with FI_SEND (or no direction)
	size_t rx_depth = 0;
	// Receives posted before post_recv_locked takes the long way: rx_depth,
	// or 0 when the receive queue is credited (rx_credits).
	size_t rx_post_limit = 0;
	// The receive CQ whose credit pool receives are posted from (nullptr:
	// the whole queue is reserved), vrma's own receives included.
	Cq *rx_credits = nullptr;
	// vrma's own receives (provider_rx, staging buffers) left unposted
	// for want of a credit; reposted when the endpoint's requests complete
	// (ep_repost_own_rx) or, staged, at the next fi_recv.
	std::atomic<size_t> own_rx_unposted{0};
	size_t rx_iov_limit = 0;
	bool rx_cq_data_mode = false;
	// RMA-only endpoint without FI_RX_CQ_DATA: vrma keeps zero-length
	// receives posted so that remote CQ data needs no application receive.
	bool provider_rx = false;
	// Receives messages and remote CQ data without FI_RX_CQ_DATA: staged
	// receives (uses_staged_rx), set up at fi_enable.
	std::unique_ptr<StagedRx> staged;
	// FI_RMA_PMEM / FI_RMA_EVENT: commit and event messages share vrma's
	// receive queue, which the domain's service polls.
	std::unique_ptr<ServiceEp> service;
	Cq *service_cq = nullptr; // the receive CQ then (the domain's service's)
	bool rma_pmem = false;      // FI_RMA_PMEM: commits, and answers them
	bool rma_events = false;    // FI_RMA_EVENT: counts the peer's RMA
	Cntr *cntr_remote_read = nullptr;
	Cntr *cntr_remote_write = nullptr;

	std::mutex rx_lock;
	SlotRing<RxSlot> rx;
};

// The CQs the QP's queues complete into: the bound one, the other direction's
// when only one is bound, or the endpoint's own when only counters are.
// fi_enable asks with the CQ it opened for the endpoint, before the
// endpoint holds it.
inline Cq *send_cq_of(const Ep *ep, Cq *own_cq) noexcept
{
	return ep->tx_cq ? ep->tx_cq : ep->rx_cq ? ep->rx_cq : own_cq;
}

inline Cq *recv_cq_of(const Ep *ep, Cq *own_cq) noexcept
{
	if (ep->service_cq)
		return ep->service_cq;
	return ep->rx_cq ? ep->rx_cq : ep->tx_cq ? ep->tx_cq : own_cq;
}

inline Cq *send_cq_of(const Ep *ep) noexcept
{
	return send_cq_of(ep, ep->own_cq);
}

inline Cq *recv_cq_of(const Ep *ep) noexcept
{
	return recv_cq_of(ep, ep->own_cq);
}

// What the peer announced while connecting.
inline bool peer_has(const Conn &conn, uint8_t cm_flag) noexcept
{
	return conn.peer_cm_flags.load(std::memory_order_acquire) & cm_flag;
}

struct Pep final : fid_pep {
	using FidType = fid_pep;
	Fabric *fabric = nullptr;
	FiInfoPtr info;
	CmIdPtr id;
	Eq *eq = nullptr;
	sockaddr_storage src{};
	socklen_t src_len = 0;
	bool listening = false;
};

// f as a vrma passive endpoint, or nullptr (another class or provider).
const Pep *as_vrma_pep(const fid *f) noexcept;

// The handle of a connection request (fi_info::handle of FI_CONNREQ).
struct ConnReq final : fid {
	using FidType = fid;
	rdma_cm_id *id = nullptr; // owned until fi_endpoint or fi_reject takes it
	uint8_t responder_resources = 0;
	uint8_t initiator_depth = 0;
	uint8_t peer_cm_flags = 0; // wire::kCmFlag* the requester offers
};

struct EqEntry {
	uint32_t event = 0;
	bool is_error = false;
	std::vector<uint8_t> data; // the event's buffer, or the error's err_data
	fi_eq_err_entry err{};
	fid *source = nullptr; // for purging entries of a closed endpoint
	fi_info *info = nullptr; // FI_CONNREQ: owned until delivered
};

struct Eq final : fid_eq {
	using FidType = fid_eq;
	Fabric *fabric = nullptr;
	fi_wait_obj wait_obj = FI_WAIT_NONE;
	EventChannelPtr channel; // rdma_cm events of bound endpoints
	Fd epoll_fd;
	Fd event_fd; // written by fi_eq_write
	std::mutex lock;
	std::deque<EqEntry> queue;
	std::vector<uint8_t> last_err_data; // backs err_data returned by readerr
	std::atomic<int> refs{0};
	// Connection management makes progress without the application: the
	// active side must answer the peer's accept (RTU) even while the
	// application waits on another object.
	std::thread progress_thread;
	Fd stop_fd;
};

// An address vector (vrma_av.cpp): fi_addr_t handles for peers' listening
// addresses, for the RDM endpoint. The table is rdm::AvTable (src/av_table.h);
// the AV adds the domain's address format, the lock and FI_EVENT reporting.
struct Av final : fid_av {
	using FidType = fid_av;
	Domain *domain = nullptr;
	fi_av_type type = FI_AV_MAP; // FI_AV_MAP or FI_AV_TABLE (never UNSPEC)
	// The domain's addr_format: what fi_av_insert takes and fi_av_lookup
	// returns (FI_SOCKADDR_IN, FI_SOCKADDR_IN6, FI_SOCKADDR or FI_ADDR_STR).
	uint32_t addr_format = FI_SOCKADDR_IN;
	bool events = false; // FI_EVENT: inserts report to the bound EQ
	// Guards table and eq. Every call takes it, lookups too (an insert may
	// reallocate the table). Hazard: the RDM data path will resolve handles
	// through av_lookup_addr; a handle the application removed must never
	// silently reach a newer peer. AvTable does not reuse a removed slot
	// until max_slots were handed out, and FI_AV_MAP handles carry the
	// slot's generation, so lookup of a removed handle fails; per-peer state
	// an endpoint keeps by slot must be keyed by (index, gen) as well.
	std::mutex lock;
	rdm::AvTable table;
	Eq *eq = nullptr;         // FI_EVENT: bound by fi_av_bind (once)
	std::atomic<int> refs{0}; // endpoints bound (fi_close: -FI_EBUSY)
	// Changes with every insert and remove: RDM endpoints cache the handle
	// of each peer (FI_SOURCE) and look again when it moved.
	std::atomic<uint64_t> epoch{0};
};

// vrma_info.cpp
int getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
	    const fi_info *hints, fi_info **info) noexcept;
int probe_inline_size(ibv_context *ctx) noexcept;
void info_cleanup() noexcept;

// vrma_fabric.cpp
int fabric_open(fi_fabric_attr *attr, fid_fabric **fabric, void *context) noexcept;

// vrma_domain.cpp
int domain_open(fid_fabric *fabric, fi_info *info, fid_domain **domain, void *context) noexcept;

// vrma_mr.cpp
extern const fi_ops_mr mr_ops;
// Whether a domain opened with this info names regions by the application's
// keys (mr_mode 0 or FI_MR_SCALABLE, for RDM endpoints with RMA).
bool domain_scalable_keys(const fi_info &info) noexcept;
// An attribute's auth_key (domain_attr or ep_attr: `key`, `size`) into out:
// 0 when absent (out unchanged) or taken; -FI_EINVAL with one warning naming
// `call` when it is NULL with a size, empty, or longer than auth::kKeyMax.
int take_attr_auth_key(const uint8_t *key, size_t size, auth::Key &out, const char *call) noexcept;
// Allocates and registers the domain's key table (rdm_params.mr_keys).
int domain_open_key_table(Domain *dom) noexcept;
// The region a peer names by key (fi_mr_key: the rkey, the provider key of
// a region registered on demand, or the application's key with scalable
// keys) as a key-table entry, and its Mr when the domain has it at hand
// (nullptr allowed); false when there is none. An entry of a region not
// registered yet has rkey 0 and keys::kAccessUnregistered. mr_lock held.
bool domain_resolve_key(Domain *dom, uint64_t key, keys::KeyEntry &out, Mr **mr = nullptr) noexcept;
// Provider keys of regions registered on demand have this bit set (device
// keys are 32 bits): initiators translate them (vrma_rdm_keys.cpp).
inline constexpr uint64_t kOnDemandKeyBit = uint64_t(1) << 63;
// Registers a region registered on demand with the device, if it is not
// yet (mr_lock held): 0, or a negative FI_E* code (logged).
int mr_register_now(Domain *dom, Mr *mr) noexcept;
// A peer's KeyRequest for key, needing `access` (keys::kAccessRemote*):
// the region's entry, registered with the device first when it was not and
// allows that access (mr_lock taken here). Absent for a key the domain has
// no region of with remote rights.
rdm::KeyStatus domain_key_request(Domain *dom, uint64_t key, uint8_t access, rdm::KeyAnswer &out) noexcept;

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
	ptrdiff_t f = cq->credits.load(std::memory_order_relaxed);
	do {
		if (f < static_cast<ptrdiff_t>(n))
			return false;
	} while (!cq->credits.compare_exchange_weak(f, f - static_cast<ptrdiff_t>(n),
						     std::memory_order_relaxed));
	return true;
}
inline void cq_credit_give(Cq *cq, size_t n) noexcept
{
	cq->credits.fetch_add(static_cast<ptrdiff_t>(n), std::memory_order_relaxed);
}
// vrma's own receives a credited receive queue keeps posted at most
// (staging buffers, provider_rx receives): they hold their credits as long
// as they wait for data, so a few endpoints must not take the whole pool.
inline constexpr size_t kCreditedOwnRx = 8;
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
	cq->pending.push_back(entry); // may throw std::bad_alloc
	cq->queued.store(cq->pending.size(), std::memory_order_relaxed);
}
inline void cq_dequeue(Cq *cq) noexcept
{
	cq->pending.pop_front();
	cq->queued.store(cq->pending.size(), std::memory_order_relaxed);
}
// A successful completion produced outside the CQ's own polling (RDM
// endpoints): written straight into the buffer of a fi_cq_read that this
// thread runs on that CQ (CqSink, vrma_cq.cpp) when nothing is queued
// before it, else queued as cq_push does. Never call it for the CQ whose
// lock the caller holds.
void cq_complete(Cq *cq, const Completion &c, fi_addr_t src) noexcept;

// vrma_progress.cpp: the data progress thread of an FI_PROGRESS_AUTO domain
// (MSG endpoints). One per domain, sleeping on an epoll set of its CQs'
// completion channels; it handles an event under MsgProgress::lock, so CQ
// close, which unregisters under that lock, never races it. Lock order:
// MsgProgress::lock, then the CQ lock (and what the CQ poller takes).
// Never call these with a CQ, endpoint or EQ lock held.
// The domain's state (fi_domain of an FI_PROGRESS_AUTO info); no thread yet.
int msg_progress_create(Domain *dom) noexcept;
// Registers a CQ with a completion channel (cq_open); starts the thread at
// the first. 0 or a negative FI_E* code.
int msg_progress_attach(Domain *dom, Cq *cq) noexcept;
// Unregisters it (cq_close, before the channel is drained): once this
// returns the thread no longer touches the CQ.
void msg_progress_detach(Domain *dom, Cq *cq) noexcept;

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

// FI_RMA_EVENT: a peer's operation touched the regions with these keys
// (vrma_mr.cpp): each region's bound counter counts it once; keys of
// regions closed meanwhile are skipped.
void count_region_events(Domain *dom, bool write, const uint64_t *keys, size_t n) noexcept;
// The same for regions the caller resolved (mr_lock held).
void count_region_event(Mr *mr, bool write) noexcept;
// The region registered with the device under a peer's key (a device
// rkey: 32 bits), or nullptr (mr_lock held).
Mr *mr_by_device_key(Domain *dom, uint64_t key) noexcept;
// Whether a peer's RMA event can stand for an operation it made: every key
// names a region registered here and open for the access (FI_REMOTE_WRITE
// or FI_REMOTE_READ), and `length` bytes fit them (at most kMaxRmaIov
// times each: an operation's segments may name a region more than once);
// no key, no bytes. Anything else a peer holding those keys could not have
// done.
bool rma_event_plausible(Domain *dom, bool write, const uint64_t *keys, size_t n,
			 uint64_t length) noexcept;
// The counter polls (and waits on) the CQs that carry its completions.
int cntr_attach_cq(Cntr *cntr, Cq *cq) noexcept;
void cntr_detach_cq(Cntr *cntr, Cq *cq) noexcept;

// vrma_eq.cpp
int eq_open(fid_fabric *fabric, fi_eq_attr *attr, fid_eq **eq, void *context) noexcept;
int eq_trywait(Eq *eq) noexcept;
// Queues an event for the application and wakes its waiters.
void eq_post(Eq *eq, EqEntry &&entry);
void eq_purge(Eq *eq, fid *source) noexcept;

// vrma_av.cpp
int av_open(fid_domain *domain, fi_av_attr *attr, fid_av **av, void *context) noexcept;
// For the RDM endpoint. The address a live handle names (false for a handle
// never returned, removed, or stale), and the handle of an address (the
// lowest live one; FI_ADDR_NOTAVAIL when absent: FI_SOURCE of a peer the
// AV does not know). Both take the AV's lock.
bool av_lookup_addr(Av *av, fi_addr_t fi_addr, rdm::RdmAddr &out) noexcept;
fi_addr_t av_reverse(Av *av, const rdm::RdmAddr &addr) noexcept;

// vrma_cm.cpp
int passive_ep_open(fid_fabric *fabric, fi_info *info, fid_pep **pep, void *context) noexcept;
extern const fi_ops_cm ep_cm_ops;
extern const fi_ops_ep pep_ep_ops;
// Handles one rdma_cm event for the EQ (called with eq->lock held). Returns
// an id to destroy once the event was acked (a refused connection request).
rdma_cm_id *eq_handle_cm_event(Eq *eq, rdma_cm_event *event) noexcept;
// A work request failed (not flushed): the QP is dead. Reports FI_SHUTDOWN
// on the endpoint's EQ once and disconnects. Lock order: CQ, then EQ.
void ep_connection_failed(Ep *ep) noexcept;
int ep_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen) noexcept;
int ep_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen) noexcept;

// fi_ep_bind of a CQ, the rules both endpoint kinds share (E has domain,
// tx_cq, rx_cq, tx_selective and rx_selective).
template <typename E> int bind_cq(E *ep, Cq *cq, uint64_t flags) noexcept
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

// One counter slot of an endpoint and the bind flag that fills it.
struct CntrSlot {
	Cntr **slot;
	uint64_t flag;
};
// fi_ep_bind of a counter once the caller checked its flags: the counter is
// the endpoint's domain's, no named slot is taken yet; then it fills them.
int bind_cntr(Cntr *c, const Domain *domain, uint64_t flags,
	      std::initializer_list<CntrSlot> slots) noexcept;

// vrma_ep.cpp
// What endpoints answer for the atomic and collective calls they do not offer.
extern const fi_ops_atomic atomic_nosys;
extern const fi_ops_collective collective_nosys;
int ep_open(fid_domain *domain, fi_info *info, fid_ep **ep, void *context) noexcept;
int ep_enable(Ep *ep) noexcept;
// Posts one of the provider's own zero-length receives (provider_rx).
int ep_post_provider_rx(Ep *ep) noexcept;
// Posts vrma's own receives left unposted for want of credits (staging
// buffers, provider_rx receives) while credits last; takes the rx lock.
void ep_repost_own_rx(Ep *ep) noexcept;
// Moves the QP to the error state so that outstanding requests flush.
void ep_set_error(Ep *ep) noexcept;
// Ends a connected endpoint's connection: rdma_disconnect's request to the
// peer, then the QP to the error state (outstanding requests flush now).
// Returns rdma_disconnect's result, errno set.
int ep_disconnect(Ep *ep) noexcept;
// The connection ended (fi_shutdown, the peer disconnected, a request
// failed, the device went): what FI_MORE held back is posted into the error
// state, so that each operation ends like every posted one, with one
// FI_ECANCELED flush reported and counted by the CQ poller. Needs no tx
// lock (the EQ thread, a CQ poller) and reports nothing itself; what the
// device refuses stays held for the next transmit call to report.
void ep_cancel_held(Ep *ep) noexcept;
// On a QP in the error state: a signaled zero-length write whose flush
// retires every earlier unsignaled request (completed ones never report
// again). The ring keeps one slot free for it. Whether it was posted.
bool conn_post_sentinel(Conn *conn) noexcept;

// vrma_pmem.cpp: FI_RMA_PMEM endpoints and the domain's commit service.
int domain_ops_open(fid *f, const char *name, uint64_t flags, void **ops, void *context) noexcept;
// An endpoint attached to its domain's commit service, with its commit
// message buffers (pmem_ep_enable). Destruction detaches it and frees the
// buffers unless release()d; the endpoint's QP must be gone by then.
class PmemAttachment {
public:
	PmemAttachment() = default;
	PmemAttachment(const PmemAttachment &) = delete;
	PmemAttachment &operator=(const PmemAttachment &) = delete;
	~PmemAttachment();
	void hold(Ep *ep) noexcept { ep_ = ep; }
	void release() noexcept { ep_ = nullptr; }

private:
	Ep *ep_ = nullptr;
};
// Sets up an FI_RMA_PMEM endpoint at fi_enable, all or nothing: its commit
// message buffers, the domain's service (started by the first endpoint) and
// the service CQ as its receive CQ (Ep::service_cq), held by `attachment`.
// 0 or a negative FI_E* code.
int pmem_ep_enable(Ep *ep, PmemAttachment &attachment) noexcept;
// At close, before draining: the service forgets the endpoint's work.
void pmem_ep_quiesce(Ep *ep) noexcept;
// At close, after the QP is gone: the last endpoint stops the service.
void pmem_ep_detach(Ep *ep) noexcept;
// A successful completion of one of vrma's receives on a service endpoint
// without staged receives (buf: the message, copied before the receive is
// reposted).
void pmem_rx_completion(Ep *ep, const ibv_wc &wc, const void *buf) noexcept;
// A provider message (commit request, RMA event) received into one of vrma's
// buffers: counted, or copied into a job for the service thread.
void pmem_control_message(Ep *ep, const uint8_t *msg, size_t len) noexcept;
// A zero-length send with immediate data on a service endpoint: the answer
// to one of its commits or confirmed messages, which completes now.
void pmem_answer(Ep *ep, uint32_t imm) noexcept;
// Reserves a pending confirmation for a message sent with delivery or
// commit completion to a wire::kCmFlagConfirmsMsgs peer; returns its id + 1
// (TxSlot::commit; the low 8 bits of the id go in the MsgHeader), or
// -FI_EAGAIN.
int pmem_begin_confirm(Ep *ep, void *context, size_t len, Cntr *cntr, bool report) noexcept;
// A message marked wire::kMsgConfirm was copied (len bytes) into the
// application's receive `iov`: the service thread answers it, after making
// those bytes durable when `persist`. Any thread, any lock (the job queue is
// a leaf).
void pmem_confirm_received(Ep *ep, uint8_t id, bool persist, const iovec *iov, size_t count,
			   size_t len) noexcept;
// An error of a commit operation's request: true if the operation was
// still pending (the caller reports the error), false if already done.
bool pmem_claim_commit(Ep *ep, uint32_t commit) noexcept;
// The connection died: pending commits fail (done by the service thread).
void pmem_connection_lost(Ep *ep) noexcept;
// fi_vrma_commit_method of this endpoint's writes to its peer.
int pmem_commit_method(const Ep *ep) noexcept;
// Reserves a pending commit and writes its request (remote segments
// written by the operation); returns its id + 1 (TxSlot::commit), or a
// negative FI_E* code.
int pmem_begin_commit(Ep *ep, const wire::CommitRange *ranges, size_t n, void *context,
		      size_t len, Cntr *cntr, bool report, ibv_sge &request) noexcept;
// Makes len bytes at virtual address addr of the region with device key
// `key` durable: msync for memory of a shared file mapping, a CPU cache
// flush otherwise (commit_stats counts both). BadRange unless the bytes lie
// inside one region registered for remote writes; PersistFailed when msync
// fails. Takes the domain's mr_lock.
wire::CommitStatus commit_persist_range(Domain *dom, uint64_t key, uint64_t addr,
					uint64_t len) noexcept;
// Whether commits wait for their answer (an FI_FENCE must wait for them).
bool pmem_commits_pending(Ep *ep) noexcept;
// What backs the memory at addr (a persist::Backing value, read from
// /proc/self/maps: linear in the mappings, so once per region), logged at
// FI_INFO with how commits will persist it; `pmem` (a region registered
// with FI_RMA_PMEM) adds one FI_WARN when that memory does not survive a
// crash (anonymous or private mappings, or unknown).
int pmem_region_backing(const void *addr, bool pmem) noexcept;
// Releases a commit whose requests were never posted.
void pmem_abort_commit(Ep *ep, uint32_t commit) noexcept;

// vrma_staged.cpp: staged receives (uses_staged_rx).
// The staging buffers an endpoint keeps posted.
size_t staged_buffer_count(const Ep *ep) noexcept;
// fi_enable: allocates and registers the staging buffers into `out`; 0 or
// a negative FI_E* code (-FI_ENOMEM when the registration is refused).
int staged_ep_prepare(Ep *ep, StagingBuffers &out, size_t max_buffers) noexcept;
// fi_enable, the endpoint holding its QP and staging buffers: posts every
// staging buffer; -FI_ENOMEM when none could be posted.
int staged_ep_post(Ep *ep) noexcept;
// Posts the staging buffers a repost left unposted (takes the rx lock).
void staged_repost_unposted(Ep *ep) noexcept;
// Queues an application receive and copies what already arrived for it.
ssize_t staged_recv(Ep *ep, const iovec *iov, size_t count, size_t capacity, void *context,
		    bool report, Cntr *cntr) noexcept;
// A work completion of a staging buffer, polled from `cq` (its lock held):
// a piece, remote CQ data, or a flush that fails the queued receives.
Outcome staged_rx_completion(Ep *ep, Cq *cq, const ibv_wc &wc, void *buf, Completion &c,
			     fi_cq_err_entry &e) noexcept;
// fi_cancel of a queued receive: 0 (an FI_ECANCELED error reported) or
// -FI_ENOENT.
ssize_t staged_cancel(Ep *ep, void *context) noexcept;
size_t staged_rx_left(Ep *ep) noexcept;

// vrma_msg.cpp, vrma_rma.cpp
extern const fi_ops_msg msg_ops;
extern const fi_ops_rma rma_ops;

// vrma_wait.cpp: the FD wait object of CQs and EQs.
class Deadline {
public:
	explicit Deadline(int timeout_ms) noexcept; // < 0: no deadline
	int remaining_ms() const noexcept;           // -1 without deadline, 0 when expired
	bool expired() const noexcept { return remaining_ms() == 0; }

private:
	bool forever_;
	std::chrono::steady_clock::time_point end_;
};
// Creates an epoll descriptor watching `fds` for input.
int wait_epoll_create(Fd &epoll_fd, std::initializer_list<int> fds) noexcept;
// Waits until a watched descriptor is readable or the deadline passes;
// returns how many are ready (written to ready_fds, at most max) or a
// negative FI_E* code.
int wait_epoll(int epoll_fd, const Deadline &deadline, int *ready_fds, int max) noexcept;
// Makes a (non-blocking) eventfd readable, waking whoever waits on it;
// 0 or a negative FI_E* code (logged).
int eventfd_signal(int fd) noexcept;
// Makes it unreadable again.
void eventfd_clear(int fd) noexcept;
// FI_GETWAIT / FI_GETWAITOBJ for an object with this wait object.
int wait_control(fi_wait_obj wait_obj, int epoll_fd, int command, void *arg,
		 const char *what) noexcept;
// FI_WAIT_UNSPEC -> FI_WAIT_FD; FI_WAIT_SET for anything unsupported.
fi_wait_obj wait_obj_resolve(fi_wait_obj requested) noexcept;

// Socket address helpers.
size_t sockaddr_len(const sockaddr *sa) noexcept;
std::string sockaddr_str(const sockaddr *sa);

} // namespace vrma
