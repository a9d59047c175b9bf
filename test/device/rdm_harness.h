// Device-test harness for vrma's native FI_EP_RDM endpoint: one fabric and
// domain per RdmEnv, any number of endpoints (RdmNode) on it or on other
// domains, all in one process over the device's address (10.99.0.1 in the
// test bed).
//
// Progress is FI_PROGRESS_MANUAL: an endpoint moves only while its CQ is
// read. Every RdmNode therefore registers itself, and the waiting helpers
// (next, expect_ok, expect_err, expect_none, settle, progress_until,
// post_retry) read the CQ of *every* live node while they wait, keeping what
// they read for the other nodes in each node's backlog, in CQ order. The
// helpers are for one thread: multi-threaded tests read their CQs by hand.
//
// No memory registration: the domain is opened without FI_MR_LOCAL, so
// buffers are plain memory and every desc is NULL (the RMA tests register
// their target regions themselves, on an RdmEnv whose hints ask for RMA;
// RdmNodeOptions binds the RMA counters). The endpoint is opened
// with mode FI_CONTEXT, so every operation context is a struct fi_context
// that stays untouched until the operation completes.
#pragma once

#include "harness.h"
#include "capacity.h"

#include <cstdlib>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <netinet/in.h>

namespace vt {

// The test bed's device address (rxe0 on veth0).
inline constexpr const char *kRdmNodeAddr = "10.99.0.1";
// What every RDM test asks for.
inline constexpr uint64_t kRdmCaps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE;

inline constexpr size_t KiB = 1024;
// FI_VRMA_RDM_PEER_TX_SIZE's default: what a paused peer may still deliver
// (its grace) is 4 times it.
inline constexpr size_t kPeerGrace = 4 * vrma::kRdmPeerTxSizeDefault;
inline constexpr size_t MiB = 1024 * 1024;
// Bytes after every receive buffer that must stay untouched, and what they
// hold.
inline constexpr size_t kSlack = 64;
inline constexpr uint8_t kSentinel = 0xcc;
// The completion flags of messages and tagged messages, sent and received.
inline constexpr uint64_t kSendMsg = FI_SEND | FI_MSG;
inline constexpr uint64_t kRecvMsg = FI_RECV | FI_MSG;
inline constexpr uint64_t kSendTag = FI_SEND | FI_TAGGED;
inline constexpr uint64_t kRecvTag = FI_RECV | FI_TAGGED;

// Hints for vrma's native RDM endpoint: ep_type FI_EP_RDM, the given caps,
// mode FI_CONTEXT, mr_mode FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY
// (no FI_MR_LOCAL), the given AV type, prov_name "vrma", FI_SOCKADDR_IN.
fi_info *rdm_hints(uint64_t caps = kRdmCaps, fi_av_type av_type = FI_AV_MAP);
// The entry for vrma's own RDM endpoint in a fi_getinfo list: prov_name
// exactly "vrma" (not "vrma;ofi_rxm") and FI_EP_RDM; nullptr if none.
const fi_info *find_native_rdm(const fi_info *list);
// fi_getinfo(hints, "10.99.0.1", NULL, FI_SOURCE) and a copy of the native RDM
// entry (caller frees); asserts there is one.
fi_info *rdm_get_info(const fi_info *hints);
// The names of a fi_getinfo list, for messages ("vrma/FI_EP_MSG, ...").
std::string info_names(const fi_info *list);

// Hints that live as long as their holder (a base class of an env built
// from them).
struct OwnedHints {
	fi_info *h;
	explicit OwnedHints(fi_info *hints) : h(hints) {}
	~OwnedHints() { fi_freeinfo(h); }
	OwnedHints(const OwnedHints &) = delete;
	OwnedHints &operator=(const OwnedHints &) = delete;
};

// A fabric and domain opened from the native RDM entry.
struct RdmEnv {
	fi_info *info = nullptr;
	fid_fabric *fabric = nullptr;
	fid_domain *domain = nullptr;
	// hints stay the caller's; nullptr: rdm_hints().
	explicit RdmEnv(const fi_info *hints = nullptr);
	~RdmEnv();
	RdmEnv(const RdmEnv &) = delete;
	RdmEnv &operator=(const RdmEnv &) = delete;
	// cq_data_size as a mask (all ones for 8 bytes).
	uint64_t cq_data_mask() const;
};

// One CQ entry as the helpers keep it.
struct Completion {
	bool ok = false;
	fi_cq_tagged_entry e{};           // ok
	fi_cq_err_entry err{};            // !ok (err_data cleared: it dies with the next read)
	fi_addr_t src = FI_ADDR_NOTAVAIL; // ok: fi_cq_readfrom's source
	void *context() const { return ok ? e.op_context : err.op_context; }
	uint64_t flags() const { return ok ? e.flags : err.flags; }
	std::string describe() const;
};

struct RdmNodeOptions {
	fi_av_type av_type = FI_AV_UNSPEC; // UNSPEC: the domain's type
	uint64_t av_flags = 0;             // fi_av_attr::flags
	uint64_t cq_bind_flags = 0;        // added to FI_TRANSMIT | FI_RECV (FI_SELECTIVE_COMPLETION)
	size_t cq_size = 0;
	bool tx_cntr = false; // a counter bound with FI_SEND
	bool rx_cntr = false; // a counter bound with FI_RECV
	// RMA counters, each bound on its own: FI_WRITE and FI_READ (the
	// node's own operations), FI_REMOTE_WRITE and FI_REMOTE_READ (peers'
	// operations on it: needs FI_RMA_EVENT in the env's caps).
	bool write_cntr = false, read_cntr = false;
	bool remote_write_cntr = false, remote_read_cntr = false;
	uint16_t port = 0;    // listening port asked in src_addr before fi_enable (0: any)
	size_t min_multi_recv = 0; // FI_OPT_MIN_MULTI_RECV set before fi_enable when not 0
	size_t tx_size = 0, rx_size = 0; // 0: the info's
	// Called with the endpoint bound and not yet enabled, before the
	// harness's fi_enable (which must then succeed).
	std::function<void(fid_ep *)> before_enable;
};

// An enabled RDM endpoint with its own AV and FI_CQ_FORMAT_TAGGED CQ (bound
// for transmit and receive), and the fi_addr of every peer inserted with
// insert().
struct RdmNode {
	RdmEnv &env;
	fi_info *info = nullptr;
	fid_av *av = nullptr;
	fid_cq *cq = nullptr;
	fid_ep *ep = nullptr;
	fid_cntr *tx_cntr = nullptr;
	fid_cntr *rx_cntr = nullptr;
	fid_cntr *write_cntr = nullptr, *read_cntr = nullptr;               // FI_WRITE, FI_READ
	fid_cntr *remote_write_cntr = nullptr, *remote_read_cntr = nullptr; // FI_REMOTE_WRITE, FI_REMOTE_READ
	sockaddr_in name{}; // fi_getname after fi_enable
	std::deque<Completion> backlog;
	std::vector<std::pair<const RdmNode *, fi_addr_t>> peers;
	// False: poll() leaves the CQ alone and progresses the endpoint through
	// tx_cntr (if any), as an application that does not read its CQ.
	bool reading = true;

	explicit RdmNode(RdmEnv &env, const RdmNodeOptions &opt = {});
	~RdmNode();
	RdmNode(const RdmNode &) = delete;
	RdmNode &operator=(const RdmNode &) = delete;

	// Inserts peer's name into this node's AV and remembers its handle.
	fi_addr_t insert(const RdmNode &peer);
	fi_addr_t insert_addr(const sockaddr_in &addr);
	// The handle insert() returned for peer (asserts there is one).
	fi_addr_t addr_of(const RdmNode &peer) const;
	void forget(const RdmNode &peer); // drops peer from `peers` (not from the AV)
	uint16_t port() const { return ntohs(name.sin_port); }
	// Reads everything the CQ has now into the backlog; returns how many.
	size_t poll();
	// Closes the endpoint (and its counters); the CQ and AV stay, and are
	// still read by the helpers.
	void close_ep();
};

// Every node inserts every other one.
void connect_all(std::initializer_list<RdmNode *> nodes);

// Reads every live node's CQ once.
void progress_all();
// The next entry of n's CQ (backlog first), reading every node's CQ while
// waiting; fails the test after timeout_ms.
Completion next(RdmNode &n, int timeout_ms = kTimeoutMs);
// The same, reading n's CQ only (the others make no progress).
Completion next_alone(RdmNode &n, int timeout_ms = kTimeoutMs);
// next(), which must be a success with this context and exactly these flags.
Completion expect_ok(RdmNode &n, const void *ctx, uint64_t flags, const char *what = "");
// next(), which must be an error entry with this context and, unless err is
// 0, this error code.
fi_cq_err_entry expect_err(RdmNode &n, const void *ctx, int err, const char *what = "");
// Nothing reaches n's CQ for ms (every node progressing meanwhile).
void expect_none(RdmNode &n, int ms = 300, const char *what = "");
// Progresses every node for ms.
void settle(int ms);
// Progresses every node until done() (true) or the timeout (false).
bool progress_until(const std::function<bool()> &done, int timeout_ms = kTimeoutMs);
// The process's resident memory, in bytes.
size_t resident_bytes();
// Posts post(0), post(1), ... up to max, progressing every node whenever
// one says -FI_EAGAIN, until post has been refused for quiet_ms in a row (a
// sender that is paused, not slow: a send that met a full receive queue
// waits for its RNR retry, 655 ms on rxe). Returns how many were posted;
// any other error fails the test.
size_t post_until_refused(const std::function<ssize_t(size_t)> &post, size_t max, int quiet_ms,
			  const char *what);
// Calls op until it returns something other than -FI_EAGAIN, progressing
// every node (or only `only`) in between; returns that value. Fails the
// test if it is still -FI_EAGAIN after timeout_ms.
ssize_t post_retry(const std::function<ssize_t()> &op, RdmNode *only = nullptr,
		   int timeout_ms = kTimeoutMs);
// post_retry(op, only), which must then accept the operation (0).
void post(const std::function<ssize_t()> &op, const char *what, RdmNode *only = nullptr);
// Whether this test has a process of its own (check's fork mode), where
// FI_VRMA_* variables set now reach the provider it loads; prints why the
// test is not run otherwise.
bool in_fresh_process(const char *test);
// Sets an environment variable for one scope (the provider reads some of
// its FI_VRMA_* variables at fi_domain or fi_endpoint), and takes it away
// after: in CK_FORK=no the next test runs in this process.
struct ScopedEnv {
	const char *name;
	ScopedEnv(const char *n, const char *v) : name(n) { setenv(n, v, 1); }
	~ScopedEnv() { unsetenv(name); }
	ScopedEnv(const ScopedEnv &) = delete;
	ScopedEnv &operator=(const ScopedEnv &) = delete;
};
// Waits until the counter reaches `value` (progressing every node); asserts
// it does not go beyond and reports no error.
void expect_cntr(fid_cntr *c, uint64_t value, const char *what = "");

// Forgets every registered node (a checked fixture: a test that failed in a
// CK_FORK=no run leaves its nodes registered).
void rdm_reset();
// Adds a tcase of these tests to s, with `timeout` seconds and rdm_reset
// as its checked fixture.
void rdm_add_tcase(Suite *s, const char *name, int timeout, std::initializer_list<const TTest *> tests);

// Data patterns: seed s at offset i. Two seeds that differ by 1..255 mod 256
// differ at every byte.
inline uint8_t pattern_byte(uint32_t seed, size_t i)
{
	return static_cast<uint8_t>(seed * 131u + i * 7u + (i >> 8) * 3u + (i >> 16));
}
void fill_pattern(void *p, size_t n, uint32_t seed, size_t from = 0);
// Asserts p[0, n) holds the pattern of seed from offset `from`; names the
// first differing byte.
void expect_pattern(const void *p, size_t n, uint32_t seed, const char *what, size_t from = 0);
// Asserts p[0, n) are all v (sentinels around a buffer).
void expect_filled(const void *p, size_t n, uint8_t v, const char *what);

// fi_msg / fi_msg_tagged over the caller's iovecs (desc NULL).
fi_msg make_msg(const iovec *iov, size_t count, fi_addr_t addr, void *ctx, uint64_t data = 0);
fi_msg_tagged make_tmsg(const iovec *iov, size_t count, fi_addr_t addr, uint64_t tag,
			uint64_t ignore, void *ctx, uint64_t data = 0);

// Completions collected by context: each context in a group completes once,
// successfully, with the group's flags (exactly).
class Tracker {
public:
	void expect(fi_context *ctx, size_t count, uint64_t flags, std::string what)
	{
		groups_.push_back({ctx, count, flags, std::move(what)});
		total_ += count;
	}

	void add(const Completion &c);
	// Everything in n's backlog (all of it must be ours).
	void take(RdmNode &n);
	// Until every context completed, by next(n) (every node progressing)
	// or next_alone(n).
	void wait(RdmNode &n);
	void wait_alone(RdmNode &n);

	bool done() const { return got_.size() == total_; }
	size_t count() const { return got_.size(); }
	bool has(const fi_context *ctx) const { return got_.count(ctx) != 0; }

	const Completion &get(const fi_context *ctx) const;

private:
	struct Group {
		fi_context *ctx;
		size_t count;
		uint64_t flags;
		std::string what;
	};
	std::vector<Group> groups_;
	size_t total_ = 0;
	std::map<const void *, Completion> got_;
};

// Progresses every node until the sends in t completed or none has completed
// for quiet_ms: what can reach the receiver without a receive (eager sends)
// has reached it; rendezvous sends wait for their receive.
void settle_sends(Tracker &t, RdmNode &sender, int quiet_ms = 1000);

// A receive buffer: len bytes and kSlack sentinel bytes after them.
struct RecvBuf {
	std::vector<uint8_t> b;
	size_t len;
	explicit RecvBuf(size_t n) : b(n + kSlack, kSentinel), len(n) {}
	uint8_t *data() { return b.data(); }
	// The first n bytes hold seed's pattern, and nothing beyond the buffer
	// was written.
	void check(size_t n, uint32_t seed, const char *what) const
	{
		expect_pattern(b.data(), n, seed, what);
		expect_filled(b.data() + len, kSlack, kSentinel, what);
	}
};

// A buffer holding seed's pattern.
std::vector<uint8_t> pattern(size_t n, uint32_t seed);

// One message a -> b into a receive posted first: both completions, the
// source, the data, nothing written beyond it. src and dst are the caller's
// (dst holds dst_len bytes; dst_len >= len).
void transfer(RdmNode &a, RdmNode &b, const void *src, size_t len, void *dst, size_t dst_len, uint32_t seed,
	      const char *what);

// transfer() with buffers of its own: a receive buffer of len + kSlack
// bytes, whose slack must stay untouched.
void send_recv_one(RdmNode &a, RdmNode &b, size_t len, uint32_t seed);

} // namespace vt

Suite *rdm_suite();
// The tcases of the rdm suite that live in files of their own, added by
// rdm_suite() in its order: test_rdm_tagged.cpp (rdm_tagged),
// test_rdm_conn.cpp (rdm_conn), test_rdm_rndv_cache.cpp (rdm_rndv_cache),
// test_rdm_threads.cpp (rdm_threads, rdm_auto).
void add_rdm_tagged_tcases(Suite *s);
void add_rdm_conn_tcases(Suite *s);
void add_rdm_rndv_cache_tcases(Suite *s);
void add_rdm_threads_tcases(Suite *s);
Suite *rdm_rma_suite();
