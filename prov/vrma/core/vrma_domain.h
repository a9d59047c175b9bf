// Fabric, domain and memory regions (vrma_fabric.cpp, vrma_domain.cpp,
// vrma_mr.cpp; the domain's commit service in vrma_msg_pmem.cpp).
#pragma once

#include "vrma_base.h"

namespace vrma {

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
	// covers() with a branch per compare, for a caller that branches on
	// the answer at once (the fast paths' fast_buf): three instructions
	// fewer there than combining the results.
	[[gnu::always_inline]] bool holds(const void *buf, size_t len) const noexcept
	{
		const uintptr_t a = reinterpret_cast<uintptr_t>(buf);
		const uintptr_t e = end.load(std::memory_order_relaxed);
		if (a < start.load(std::memory_order_relaxed) || a > e) [[unlikely]]
			return false;
		return len <= e - a;
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

	// The API version the application asked fi_getinfo for: the sizes of
	// the structures it hands in and reads back (abi_compat.h).
	uint32_t api() const noexcept { return fabric->api_version; }
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
	CheckedMutex mr_lock;
	// Signalled when a region's last msync outside mr_lock ends
	// (Mr::persisting), for the fi_close waiting on it.
	std::condition_variable_any mr_persisted; // with mr_lock (a CheckedMutex)
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
	CheckedMutex pmem_lock;
	PmemServicePtr pmem;
	// Persists RDM endpoints' commit requests off their locks; started at
	// the first request (under pmem_lock), stopped with the domain.
	RdmPersisterPtr rdm_persister;
	CommitStats commit_stats;
	// Delivery read-backs MSG endpoints posted (fi_vrma_rma_stats).
	std::atomic<uint64_t> read_backs{0};
	// Registrations of application buffers (vrma_mr_cache.h): made at the
	// first rendezvous; state 0 not yet, 1 caching, 2 off.
	CheckedMutex mr_cache_open_lock;
	std::atomic<int> mr_cache_state{0};
	std::unique_ptr<MrCache, MrCacheDeleter> mr_cache;
	std::atomic<uint64_t> mr_uncached{0}; // registrations for one transfer only
	// The progress engine (vrma_progress.h): made at fi_domain, its thread
	// starts with the first source (an RDM endpoint's enable, or a CQ of
	// an auto-progress MSG domain).
	ProgressPtr progress;
	// FI_PROGRESS_AUTO data progress of MSG endpoints: the engine watches
	// every CQ's completion channel (not for FI_EP_RDM infos, whose
	// endpoints attach their own internal CQ).
	bool msg_auto_progress = false;
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
// vrma_msg_pmem.cpp: the domain's side of commits (fi_open_ops, persisting).
int domain_ops_open(fid *f, const char *name, uint64_t flags, void **ops, void *context) noexcept;
// Makes len bytes at virtual address addr of the region with device key
// `key` durable: msync for memory of a shared file mapping, a CPU cache
// flush otherwise (commit_stats counts both). AccessError unless the bytes lie
// inside one region registered for remote writes; PersistFailed when msync
// fails. Takes the domain's mr_lock.
wire::CommitStatus commit_persist_range(Domain *dom, uint64_t key, uint64_t addr,
					uint64_t len) noexcept;
// What backs the memory at addr (a persist::Backing value, read from
// /proc/self/maps: linear in the mappings, so once per region), logged at
// FI_INFO with how commits will persist it; `pmem` (a region registered
// with FI_RMA_PMEM) adds one FI_WARN when that memory does not survive a
// crash (anonymous or private mappings, or unknown).
int pmem_region_backing(const void *addr, bool pmem) noexcept;

} // namespace vrma
