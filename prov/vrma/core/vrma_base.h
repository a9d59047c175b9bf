// vrma's ground header: what every file of the provider needs (the provider
// object, parameters, capability constants, fid helpers, wait helpers).
// The fid classes each have their own header: vrma_domain.h (fabric,
// domain, memory regions), vrma_cq.h (CQs and counters), vrma_eq.h,
// vrma_av.h, vrma_conn.h (one RC connection, both endpoint kinds),
// vrma_msg_ep.h (the MSG endpoint) and vrma_rdm.h (the RDM endpoint).
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

#include "abi_compat.h"
#include "conn_auth.h"
#include "key_table.h"
#include <rdma/providers/fi_prov.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "av_table.h"
#include "capacity.h"
#include "fast_mutex.h"
#include "intrusive_fifo.h"
#include "ring_queue.h"
#include "slot_ring.h"
#include "wait_gate.h"
#include "vrma_errno.h"
#include "vrma_mr_cache.h"
#include "vrma_verbs.h"
#include "wire/msg_wire.h"

namespace vrma {

namespace rdm { // rdm_wire.h
enum class KeyStatus : uint8_t;
struct KeyAnswer;
} // namespace rdm

// The core writes its own state into provider.context: keep it mutable.
extern fi_provider provider;

inline constexpr uint32_t kProviderVersion = FI_VERSION(0, 1);
// The API version vrma declares: abi::provider_version of the running core
// (set at fi_prov_ini, read-only after).
inline uint32_t api_version() noexcept { return provider.fi_version; }

#define VRMA_WARN(subsys, ...) FI_WARN(&::vrma::provider, subsys, __VA_ARGS__)
#define VRMA_INFO(subsys, ...) FI_INFO(&::vrma::provider, subsys, __VA_ARGS__)
#define VRMA_DBG(subsys, ...) FI_DBG(&::vrma::provider, subsys, __VA_ARGS__)

// Held-lock assertions (builds with VRMA_LOCK_CHECKS: the sanitizer builds,
// or configure --enable-lock-checks): a function whose contract says
// "lock held" states it with VRMA_ASSERT_HELD(lock) on a FastMutex or a
// CheckedMutex (or anything with held_here(): tx_lock_of, vrma_conn.h); a
// violation prints which lock, where, and aborts. Without the checks the
// assertion is nothing.
#ifdef VRMA_LOCK_CHECKS
[[noreturn, gnu::cold]] void lock_check_failed(const char *lock, const char *func, const char *file,
					       int line) noexcept;
#define VRMA_ASSERT_HELD(m)                                                              \
	do {                                                                              \
		if (!(m).held_here()) [[unlikely]]                                           \
			::vrma::lock_check_failed(#m, __func__, __FILE__, __LINE__);          \
	} while (0)
#else
#define VRMA_ASSERT_HELD(m)                                                              \
	do {                                                                              \
	} while (0)
#endif

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
	// An RC connection's retry budget (conn_set_retry): the ACK timeout's
	// exponent (4.096 us << n; 0: rdma_cm's, from the path: 2^19 on Linux
	// 6.1 RoCE, 2.1 s, which a lost packet then costs) and the retries of
	// an unanswered request (0..7; rxe takes 7 as unlimited, hardware as
	// seven). 17: 0.54 s a loss, 8 x 0.54 = 4.3 s to a dead peer.
	static constexpr int kAckTimeoutDefault = 17;
	int ack_timeout = kAckTimeoutDefault;
	int retry_count = 7;
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
struct Progress;
// Defined where Progress is (vrma_progress.cpp).
struct ProgressDeleter {
	void operator()(Progress *p) const noexcept;
};
using ProgressPtr = std::unique_ptr<Progress, ProgressDeleter>;
// Defined where PmemService is (vrma_msg_pmem.cpp).
struct PmemServiceDeleter {
	void operator()(PmemService *svc) const noexcept;
};
using PmemServicePtr = std::unique_ptr<PmemService, PmemServiceDeleter>;
// The persist worker of RDM commit requests (vrma_rdm_persist.cpp).
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

// What endpoints answer for the atomic and collective calls they do not offer
// (vrma_msg_ep.cpp).
extern const fi_ops_atomic atomic_nosys;
extern const fi_ops_collective collective_nosys;

// vrma_info.cpp
int getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
	    const fi_info *hints, fi_info **info) noexcept;
int probe_inline_size(ibv_context *ctx) noexcept;
void info_cleanup() noexcept;

// vrma_fabric.cpp
int fabric_open(fi_fabric_attr *attr, fid_fabric **fabric, void *context) noexcept;

// fi_endpoint of a MSG endpoint (vrma_msg_ep.cpp; the domain dispatches, RDM
// endpoints to rdm_ep_open) and fi_passive_ep (vrma_msg_cm.cpp).
int msg_ep_open(fid_domain *domain, fi_info *info, fid_ep **ep, void *context) noexcept;
int passive_ep_open(fid_fabric *fabric, fi_info *info, fid_pep **pep, void *context) noexcept;

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
