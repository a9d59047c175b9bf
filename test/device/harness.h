// Device-test harness: opens vrma on the first RDMA device and connects
// endpoint pairs over it (client and server in one process, both through the
// device and the fabric, as two processes would be).
#pragma once

#include <cerrno>

// Standard headers first: check.h defines a `fail` macro.
#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/socket.h>

#include <check.h>
// check.h's deprecated fail() macro breaks standard headers included later.
#undef fail

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_ext_vrma.h>

namespace vt {

inline constexpr int kTimeoutMs = 10000;

// A point in time kTimeoutMs (or the given ms) from construction.
class Deadline {
public:
	explicit Deadline(int ms) : end_(std::chrono::steady_clock::now() + std::chrono::milliseconds(ms)) {}
	bool expired() const { return std::chrono::steady_clock::now() > end_; }

private:
	std::chrono::steady_clock::time_point end_;
};

// fi_getinfo hints selecting vrma MSG endpoints.
fi_info *base_hints();
// The API version get_info asks for (default 1.17) and the fi_getinfo it
// calls (default: the one this binary links, libfabric 1.17's ABI). The abi
// suite swaps both for the running core's newest ABI (FABRIC_1.9 from 2.5
// on), which reads hints as a 2.x application hands them over.
using GetinfoFn = int (*)(uint32_t, const char *, const char *, uint64_t, const fi_info *,
			  fi_info **);
extern uint32_t test_api;
extern GetinfoFn test_getinfo;
// fi_getinfo for vrma with `hints` (freed by caller); asserts success.
fi_info *get_info(fi_info *hints = nullptr, const char *node = nullptr,
		  const char *service = nullptr, uint64_t flags = 0);

struct Env {
	fi_info *info = nullptr; // what fi_getinfo returned for the device
	fid_fabric *fabric = nullptr;
	fid_domain *domain = nullptr;
	explicit Env(uint64_t extra_mode = 0, uint64_t tx_op_flags = 0);
	explicit Env(fi_info *hints); // hints stay the caller's
	~Env();
	Env(const Env &) = delete;
	Env &operator=(const Env &) = delete;
};

struct Side {
	fid_eq *eq = nullptr;
	fid_cq *cq = nullptr;
	fid_ep *ep = nullptr;
	fi_info *info = nullptr;
};

struct PairOptions {
	uint64_t bind_flags = 0; // e.g. FI_SELECTIVE_COMPLETION for the client's CQ
	size_t tx_size = 0;
	size_t rx_size = 0;
	std::string connect_data;
	std::string accept_data;
	// Counters bound (before fi_enable) with the given flags.
	std::vector<std::pair<fid_cntr *, uint64_t>> client_cntrs, server_cntrs;
	bool client_cq = true; // false: the client has counters only
	size_t client_cq_size = 0; // 0: the provider's default
	// Mode bits the server's endpoint does not take on (from the
	// FI_CONNREQ info), e.g. FI_RX_CQ_DATA for a staged server.
	uint64_t server_mode_off = 0;
	fi_wait_obj server_cq_wait = FI_WAIT_FD; // the server's CQ's wait object
	size_t server_cq_size = 0; // 0: the provider's default
	// Called with the endpoint bound and not yet enabled, before the
	// harness's fi_enable (which must then succeed).
	std::function<void(fid_ep *)> client_before_enable, server_before_enable;
};

// A connected client/server pair, both with a FI_CQ_FORMAT_DATA CQ bound for
// transmit and receive and their own EQ.
struct Pair {
	Env &env;
	fid_pep *pep = nullptr;
	fid_eq *pep_eq = nullptr;
	Side client, server;
	std::string connreq_data;   // what the server saw in FI_CONNREQ
	std::string connected_data; // what the client saw in FI_CONNECTED
	Pair(Env &env, const PairOptions &opt = {});
	~Pair();
	Pair(const Pair &) = delete;
	Pair &operator=(const Pair &) = delete;
};

// An fi_msg_rma over the caller's arrays (context 0 and data 0).
inline fi_msg_rma msg_rma(const iovec *iov, void **desc, size_t iov_count, const fi_rma_iov *rma,
			  size_t rma_count)
{
	fi_msg_rma msg{};
	msg.msg_iov = iov;
	msg.desc = desc;
	msg.iov_count = iov_count;
	msg.rma_iov = rma;
	msg.rma_iov_count = rma_count;
	return msg;
}

// An fi_msg over the caller's arrays (data 0).
inline fi_msg msg_of(const iovec *iov, void **desc, size_t iov_count, void *context = nullptr)
{
	fi_msg msg{};
	msg.msg_iov = iov;
	msg.desc = desc;
	msg.iov_count = iov_count;
	msg.context = context;
	return msg;
}

// One local buffer to one remote segment: an fi_msg_rma owning its parts.
struct OneRma {
	iovec iov;
	void *desc;
	fi_rma_iov rma;
	fi_msg_rma msg{};
	OneRma(void *buf, size_t len, void *d, uint64_t addr, uint64_t key, void *context)
		: iov{buf, len}, desc(d), rma{addr, len, key}
	{
		msg = msg_rma(&iov, &desc, 1, &rma, 1);
		msg.context = context;
	}
	OneRma(const OneRma &) = delete;
	OneRma &operator=(const OneRma &) = delete;
};

// Opens the server side: a listening passive endpoint; returns its port.
fid_pep *listen_pep(Env &env, fid_eq *eq, sockaddr_storage *bound);
fid_eq *open_eq(Env &env);
fid_cq *open_cq(Env &env, fi_cq_format format = FI_CQ_FORMAT_DATA,
		fi_wait_obj wait = FI_WAIT_FD, size_t size = 0);
// An address vector of the domain; asserts success.
fid_av *open_av(Env &env, fi_av_type type, uint64_t flags = 0, size_t count = 0);
// Client endpoint for `dest` with its own EQ and CQ (not connected).
Side open_client(Env &env, const sockaddr *dest, uint64_t bind_flags = 0, size_t tx_size = 0,
		 size_t rx_size = 0);
Side open_client(Env &env, const sockaddr *dest, const PairOptions &opt);
fid_cntr *open_cntr(Env &env, fi_wait_obj wait = FI_WAIT_UNSPEC);
void close_side(Side &s);

// Waits for one CQ entry: returns 1 with *entry filled, or -FI_EAVAIL with
// *err filled, or -FI_EAGAIN on timeout.
ssize_t wait_cq(fid_cq *cq, fi_cq_data_entry *entry, fi_cq_err_entry *err = nullptr,
		int timeout_ms = kTimeoutMs);
// Asserts that the CQ yields a success entry with the given context/flags.
fi_cq_data_entry expect_completion(fid_cq *cq, void *context, uint64_t flags);
// Asserts that the CQ yields an error entry; returns it.
fi_cq_err_entry expect_error(fid_cq *cq);
// Asserts that nothing arrives on the CQ for `ms` milliseconds.
void expect_no_completion(fid_cq *cq, int ms = 200);
// Reads one EQ event (sread with timeout); returns the event or a negative code.
ssize_t wait_eq(fid_eq *eq, uint32_t *event, void *buf, size_t len, int timeout_ms = kTimeoutMs);

struct Region {
	std::vector<uint8_t> buf;
	fid_mr *mr = nullptr;
	Region(Env &env, size_t len, uint64_t access, uint64_t flags = 0); // flags: fi_mr_reg's
	~Region();
	void *desc() const { return fi_mr_desc(mr); }
	uint64_t key() const { return fi_mr_key(mr); }
	uint64_t addr() const { return reinterpret_cast<uintptr_t>(buf.data()); }
	void fill(uint8_t seed);
	bool check(uint8_t seed, size_t len, size_t offset = 0) const;
};

// Takes CAP_IPC_LOCK out of the effective capabilities for the rest of the
// (forked) test: with it, root's registrations ignore RLIMIT_MEMLOCK, and
// the device tests run as root. Call it before anything opens an RDMA
// device or rdma_cm: their write() commands refuse a caller whose
// credentials changed since the file was opened (the kernel's
// ib_safe_file_access; capset makes new credentials), with EACCES.
void drop_ipc_lock();

// Registrations beyond `bytes` more than the process has pinned now (VmPin)
// fail as under a low RLIMIT_MEMLOCK (after drop_ipc_lock): lowers the soft
// limit, and restore() (or destruction) puts it back.
class MemlockLimit {
public:
	explicit MemlockLimit(rlim_t bytes);
	~MemlockLimit() { restore(); }
	MemlockLimit(const MemlockLimit &) = delete;
	MemlockLimit &operator=(const MemlockLimit &) = delete;
	rlim_t limit() const { return limit_; }
	void restore();

private:
	rlimit saved_{};
	rlim_t limit_ = 0;
	bool active_ = false;
};

// The domain's vrma extension ops (fi_ext_vrma.h), checked to be there
// and at least as large as this build knows them.
fi_vrma_domain_ops *vrma_domain_ops(fid_domain *domain);
// The domain's commit-service counters.
fi_vrma_commit_stats vrma_commit_stats(fid_domain *domain);

// A file of n bytes mapped MAP_SHARED and registered with `access` and
// fi_mr_reg's `flags` (the guest's /tmp is tmpfs: msync is what makes such
// memory durable, and the commit counters tell msync from a cache
// write-back).
struct FileMapping {
	std::string path;
	int fd = -1;
	uint8_t *p = nullptr;
	size_t len;
	fid_mr *mr = nullptr;
	bool temporary = true; // made here, unlinked at the end
	FileMapping(fid_domain *domain, size_t n, uint64_t access, uint64_t flags = 0);
	// The first n bytes of an existing file or block device, left in place.
	FileMapping(fid_domain *domain, const char *existing, size_t n, uint64_t access);
	~FileMapping();
	FileMapping(const FileMapping &) = delete;
	FileMapping &operator=(const FileMapping &) = delete;
	uint64_t addr(size_t off = 0) const { return reinterpret_cast<uintptr_t>(p) + off; }
	uint64_t key() const { return fi_mr_key(mr); }
	// The file's bytes, read through the file, not the mapping.
	std::vector<uint8_t> file_bytes(size_t off, size_t n) const;

private:
	void map_and_register(fid_domain *domain, uint64_t access, uint64_t flags);
};

} // namespace vt

// Suites, one per file.
Suite *objects_suite();
Suite *cm_suite();
Suite *msg_suite();
Suite *rma_suite();
Suite *dc_more_suite();
Suite *errors_suite();
Suite *cntr_suite();
Suite *pmem_suite();
Suite *split_suite();
Suite *cq_scale_suite();
Suite *events_suite();
Suite *staged_suite();
Suite *msg_flags_suite();
Suite *rdm_suite();
Suite *rdm_rma_suite();
Suite *rdm_atomic_suite();
Suite *rdm_on_demand_suite();
Suite *rdm_atomic_flags_suite();
Suite *av_suite();
Suite *msg_auto_suite();
Suite *hostile_suite();
Suite *auth_suite();
Suite *abi_suite();
