// vrma_bench: shared declarations of the benchmark's parts.
//
//  - vrma_bench_main.cpp      command line, usage, main
//  - vrma_bench_common.cpp    errors, names, fi_getinfo, addresses
//  - vrma_bench_rma.cpp       RMA (write, read, writedata, inject_write; bw,
//                             lat, rate) over FI_EP_MSG, and over FI_EP_RDM
//                             with the same measuring code; atomics (fadd,
//                             cswap, amax; lat) over FI_EP_RDM
//  - vrma_bench_twosided.cpp  two-sided messages (send, tagged) over
//                             FI_EP_RDM, and over FI_EP_MSG as the floor RDM
//                             is held to
//  - vrma_bench_peers.cpp    the many-peer mode: what N peers cost one
//                             FI_EP_RDM endpoint (memory, pinned pages,
//                             queue pairs, descriptors, setup time)
//  - vrma_bench_ctl.cpp       the TCP control connection of the FI_EP_RDM
//                             runs (and of the two-sided FI_EP_MSG ones)
//  - vrma_bench_runner.cpp    what both modules share: a side's fabric
//                             objects (Endpoint), the roles (server, client,
//                             loopback) and the measuring of one size
//                             (ClientRunner)
//  - vrma_bench_report.cpp    the table, JSON, --plot
//
// Everything uses the public libfabric API only, so the same binary measures
// vrma, verbs, tcp and the layered "X;ofi_rxm" providers.

#ifndef VRMA_BENCH_H
#define VRMA_BENCH_H

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <sys/socket.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace vrma_bench {

constexpr int kExitError = 1;
constexpr int kExitUnsupported = 2; // the provider refused what was asked (or no gnuplot)

constexpr int kDefaultPort = 47600;
constexpr size_t kDefaultMaxSize = 4u << 20;
constexpr size_t kLargestSize = 1u << 30;

// Thrown once the message has been printed; main and the thread entry
// points turn it into the exit status.
struct BenchError {
	int status;
};

// Set by whichever side fails first; in a loopback run the other side's
// wait loops see it and stop quietly.
extern std::atomic<bool> g_abort;

[[noreturn]] __attribute__((format(printf, 2, 3))) void fail(int status, const char *fmt, ...);
[[noreturn]] void fail_call(const char *call, long rc);
[[noreturn]] void stop_quietly();

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t)
{
	return std::chrono::duration<double>(Clock::now() - t).count();
}

// A spin-wait hint to the CPU.
inline void cpu_relax()
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

// Gives up when a wait sees no progress for `limit` seconds (<= 0: never),
// and stops when the other side of a loopback run failed.
// Hazard: a watchdog is made for every posted operation, and in the soft-RoCE
// VM one steady_clock read costs about 1 us (the guest's clocksource is the
// HPET, which has no vDSO path, because the kernel marks TCG's TSCs
// unstable). So it reads no clock until a wait has lasted 256 polls: the
// limit then counts from that first look.
class Watchdog {
public:
	Watchdog(double limit, const char *what) : limit_(limit), what_(what) {}
	void progressed() { started_ = false; }
	void poll()
	{
		if ((++calls_ & 255) != 0)
			return;
		if (g_abort.load(std::memory_order_relaxed))
			stop_quietly();
		if (limit_ <= 0)
			return;
		if (!started_) {
			last_ = Clock::now();
			started_ = true;
		} else if (seconds_since(last_) > limit_) {
			fail(kExitError, "nothing happened for %.0f s while waiting for %s (peer gone? see --timeout)",
			     limit_, what_);
		}
	}

private:
	double limit_;
	const char *what_;
	Clock::time_point last_;
	bool started_ = false;
	unsigned calls_ = 0;
};

// Timestamps of latency samples. perftest reads the TSC; steady_clock costs
// about 1 us per read in the VM (see Watchdog), several times per round
// trip, which would be charged to the provider under test. On x86 with
// RDTSCP the samples therefore come from the TSC: its processor id tells
// when a sample spans a move between processors, whose TSCs the guest
// kernel found unsynchronised, and such a sample is dropped. The tick rate is
// measured once against steady_clock. Elsewhere: steady_clock.
struct Stamp {
	uint64_t ticks;
	uint32_t cpu;
};

class SampleClock {
public:
	SampleClock()
	{
#if defined(__x86_64__)
		unsigned a, b, c, d;
		if (!__get_cpuid(0x80000001, &a, &b, &c, &d) || !(d & (1u << 27)))
			return; // no RDTSCP
		for (int attempt = 0; attempt < 5 && !tsc_; ++attempt) {
			const auto s0 = Clock::now();
			const Stamp t0 = tsc_now();
			while (Clock::now() - s0 < std::chrono::milliseconds(20))
				;
			const Stamp t1 = tsc_now();
			const double us = std::chrono::duration<double, std::micro>(Clock::now() - s0).count();
			if (t0.cpu == t1.cpu && t1.ticks > t0.ticks) {
				ticks_per_us_ = static_cast<double>(t1.ticks - t0.ticks) / us;
				tsc_ = true;
			}
		}
#endif
	}
	Stamp now() const
	{
#if defined(__x86_64__)
		if (tsc_)
			return tsc_now();
#endif
		return {static_cast<uint64_t>(
				std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
					.count()),
			0};
	}
	// Microseconds from a to b; nothing when they were taken on different
	// processors.
	std::optional<double> micros(Stamp a, Stamp b) const
	{
		if (a.cpu != b.cpu || b.ticks < a.ticks)
			return std::nullopt;
		return static_cast<double>(b.ticks - a.ticks) / ticks_per_us_;
	}
	const char *source() const { return tsc_ ? "tsc" : "steady_clock"; }

private:
#if defined(__x86_64__)
	static Stamp tsc_now()
	{
		unsigned aux;
		const uint64_t t = __rdtscp(&aux);
		return {t, aux};
	}
#endif
	bool tsc_ = false;
	double ticks_per_us_ = 1000; // steady_clock stamps are in ns
};

// The RMA operations go over FI_EP_MSG or FI_EP_RDM (vrma_bench_rma.cpp);
// send and tagged are two-sided messages (vrma_bench_twosided.cpp); the
// atomics (one FI_UINT64 each: fi_fetch_atomic FI_SUM, fi_compare_atomic
// FI_CSWAP, fi_fetch_atomic FI_MAX) go over FI_EP_RDM with the RMA module.
// The numeric values of the RMA and atomic ones travel in the RMA module's
// connection data: new operations go at the end.
enum class Op : uint8_t { write, read, writedata, inject_write, send, tagged, fadd, cswap, amax };
enum class Mode : uint8_t { bw, lat, rate };
enum class Role { loopback, server, client };
enum class EpType : uint8_t { msg, rdm };

// Benchmark flags (RMA operations); the first three shape the getinfo hints,
// so both ends must agree on them.
constexpr uint8_t kFlagDelivery = 1;
constexpr uint8_t kFlagCommit = 2;
constexpr uint8_t kFlagFence = 4;
constexpr uint8_t kFlagMore = 8;
constexpr uint8_t kFlagInject = 16;
constexpr uint8_t kHintFlags = kFlagDelivery | kFlagCommit | kFlagFence;

const char *op_name(Op op);
const char *mode_name(Mode mode);
const char *ep_type_name(EpType type);
std::string flags_name(uint8_t flags);

inline bool is_two_sided(Op op)
{
	return op == Op::send || op == Op::tagged;
}

inline bool is_atomic(Op op)
{
	return op == Op::fadd || op == Op::cswap || op == Op::amax;
}

// The bytes an atomic operation moves: one FI_UINT64.
constexpr size_t kAtomicSize = 8;

// The value of `all` whose name is `text`: the names are op_name and
// mode_name's, so parsing and printing cannot drift apart.
template <typename E, size_t N>
std::optional<E> parse_name(const std::string &text, const E (&all)[N], const char *(*name)(E))
{
	for (E e : all)
		if (text == name(e))
			return e;
	return std::nullopt;
}

constexpr Op kAllOps[] = {Op::write, Op::read, Op::writedata, Op::inject_write, Op::send,
			  Op::tagged, Op::fadd, Op::cswap, Op::amax};
constexpr Mode kAllModes[] = {Mode::bw, Mode::lat, Mode::rate};
constexpr EpType kAllEpTypes[] = {EpType::msg, EpType::rdm};

struct Options {
	Role role = Role::loopback;
	std::string provider, domain, server_addr, bind_addr;
	int port = kDefaultPort;
	bool port_given = false;
	Op op = Op::write;
	Mode mode = Mode::bw;
	EpType ep_type = EpType::msg; // rdm for send/tagged unless -e says otherwise; either for RMA; rdm for atomics
	size_t window = 64;
	std::vector<size_t> sizes; // empty: the mode's default
	bool sizes_all = false;
	size_t max_size = kDefaultMaxSize;
	uint64_t iterations = 0; // 0: calibrated
	int64_t warmup = -1;     // -1: 10% of the iterations, at least 2 (bw, rate: and a window first)
	double duration = 1.0;
	double timeout = 30.0;
	uint8_t flags = 0;
	bool progress = false;
	bool auto_progress = false; // two-sided: ask for FI_PROGRESS_AUTO data progress
	bool verify_all = false;    // two-sided: compare every byte of every message
	std::string json_out, plot_out;
	std::vector<std::string> json_in;
	// The many-peer mode (vrma_bench_peers.cpp): the hub of hub_peers peer
	// endpoints, or a process of peer_eps of them numbered from peer_base;
	// both meet in peers_dir.
	size_t hub_peers = 0;
	size_t peer_eps = 0;
	size_t peer_base = 0;
	std::string peers_dir;
	uint32_t peer_rounds = 10; // rounds of 8-byte messages after the first
	uint32_t large_rounds = 2; // rounds of `large`-byte messages
	size_t large = 64u << 10;
	// The hub, after its report: seconds it goes on progressing with nothing
	// to send (connections closed for being unused, FI_VRMA_RDM_IDLE_TIMEOUT,
	// give their memory back), then reports again.
	uint32_t idle_wait = 0;
};

// The sizes a client measures: -S, or the mode's default (powers of two up
// to --max-size for bw and lat, 8 bytes for rate); 8 bytes for the atomics.
std::vector<size_t> run_sizes(const Options &opt);

// ---------------------------------------------------------------- libfabric objects

template <class T> class Fid {
public:
	Fid() = default;
	Fid(const Fid &) = delete;
	Fid &operator=(const Fid &) = delete;
	~Fid() { reset(); }
	T **out()
	{
		reset();
		return &p_;
	}
	T *get() const { return p_; }
	explicit operator bool() const { return p_ != nullptr; }
	void reset()
	{
		if (!p_)
			return;
		int rc = fi_close(&p_->fid);
		if (rc)
			fprintf(stderr, "vrma_bench: fi_close: %s (%d)\n", fi_strerror(-rc), rc);
		p_ = nullptr;
	}

private:
	T *p_ = nullptr;
};

struct InfoDeleter {
	void operator()(fi_info *info) const { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

struct FreeDeleter {
	void operator()(void *p) const { free(p); }
};

InfoPtr alloc_hints();

// The first fi_info the provider offers for `hints`; a refusal is "not
// supported" (exit status 2), `what` says what was asked for.
InfoPtr first_info(const Options &opt, const fi_info *hints, const std::string &what, const char *node,
		   const char *service, uint64_t flags);

// The numeric host of an IP socket address; "" for a wildcard or another
// family.
std::string sockaddr_host(const sockaddr *sa);

inline uint8_t pattern_byte(size_t i, uint8_t salt)
{
	return static_cast<uint8_t>(i * 131 + (i >> 8) * 7 + salt);
}

// The index of the element of `slots` at ctx (a completion's op_context
// points at its operation's slot); nothing when ctx is not one of theirs.
template <class Slot> std::optional<size_t> index_of_context(const std::vector<Slot> &slots, const void *ctx)
{
	const auto addr = reinterpret_cast<uintptr_t>(ctx);
	const auto first = reinterpret_cast<uintptr_t>(slots.data());
	if (addr < first || addr >= first + slots.size() * sizeof(Slot) || (addr - first) % sizeof(Slot))
		return std::nullopt;
	return (addr - first) / sizeof(Slot);
}

// ---------------------------------------------------------------- control connection (vrma_bench_ctl.cpp)

// A TCP connection between server and client of the runs whose endpoints
// have no connection data of their own (FI_EP_RDM; and the two-sided runs
// over FI_EP_MSG): it carries the fabric addresses and the set-up, never
// anything inside a timed section. Both ends are this program, on hosts of
// the same byte order: records go as they are in memory.
class Socket {
public:
	Socket() = default;
	explicit Socket(int fd) : fd_(fd) {}
	Socket(const Socket &) = delete;
	Socket &operator=(const Socket &) = delete;
	Socket(Socket &&o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
	Socket &operator=(Socket &&o) noexcept
	{
		std::swap(fd_, o.fd_);
		return *this;
	}
	~Socket();
	int fd() const { return fd_; }

private:
	int fd_ = -1;
};

// Every hello over the control connection starts with this header: the
// magic says which module sent it, so that a client and a server started
// for different modules say so instead of misreading each other's records.
struct CtlHeader {
	uint32_t magic;
	uint32_t version;
};
constexpr uint32_t kCtlMagicTwoSided = 0x76627432; // "vbt2": vrma_bench_twosided.cpp
constexpr uint32_t kCtlMagicRma = 0x76627231;      // "vbr1": RMA over FI_EP_RDM, vrma_bench_rma.cpp
// The longest fabric address (fi_getname) a hello carries.
constexpr size_t kMaxAddr = 256;

// Called while a control read waits: the side keeps its fabric progressing
// (manual progress: a peer's completion may need our reads of the CQ).
using Idle = std::function<void()>;

// Listens on host (nullptr: every address) and port ("0": any free one);
// returns the socket and the port taken.
Socket tcp_listen(const char *host, const std::string &port, std::string &bound_port);
// Waits until fd is readable; nothing to read (false) after `limit` seconds
// (<= 0: never). Stops when the other side of a loopback run failed.
bool wait_readable(int fd, double limit, const Idle &idle);
Socket tcp_accept(const Socket &listener, const Idle &idle);
// Connects, retrying while nothing listens yet (the server may start just
// after the client) for up to `limit` seconds.
Socket tcp_connect(const std::string &host, const std::string &port, double limit);
void send_all(const Socket &s, const void *buf, size_t len);
void recv_all(const Socket &s, void *buf, size_t len, double limit, const char *what, const Idle &idle);
// Receives the peer's hello, `len` bytes starting with a CtlHeader, into
// `hello`. The header is read first: a hello of the other module fails with
// what to change (after sending `mine` when `answer`, so that a peer still
// waiting for our hello learns it too), another version fails as well.
void recv_hello(const Socket &s, void *hello, size_t len, const CtlHeader &mine, bool answer, double limit,
		const char *who, const Idle &idle);
// Non-blocking: whether the peer closed the connection (or it broke).
bool peer_hung_up(const Socket &s);

// A wildcard IP address in a peer's fabric address (a provider that bound
// to every address) becomes the address the control connection reached the
// peer at.
void fill_wildcard(uint32_t addr_format, uint8_t *addr, uint32_t addrlen, const Socket &s);
// Host and port of an IP fabric address, for fi_getinfo's node and service.
bool ip_node(uint32_t addr_format, const uint8_t *addr, uint32_t addrlen, std::string &host, std::string &port);

// ---------------------------------------------------------------- one side's fabric objects (vrma_bench_runner.cpp)

// What a client or server of either module holds: its fabric objects, its
// registered region and the operation slots. The member order is the
// teardown order reversed: the endpoint closes first (before the AV,
// counter, CQ and MR it uses), the region is freed after its MR.
class Endpoint {
public:
	Endpoint(const Options &opt, bool is_client) : opt_(opt), is_client_(is_client) {}
	Endpoint(const Endpoint &) = delete;
	Endpoint &operator=(const Endpoint &) = delete;

protected:
	// fi_context2 first (it serves FI_CONTEXT as well): a completion's
	// op_context points at the slot.
	struct Slot {
		fi_context2 ctx;
		bool busy;
		size_t len; // receives: what arrived
		uint64_t tag;
	};

	const Options &opt_;
	const bool is_client_;
	InfoPtr info_;
	InfoPtr conn_info_; // a server's FI_EP_MSG endpoint: the connection request's
	Fid<fid_fabric> fabric_;
	Fid<fid_eq> eq_; // FI_EP_MSG only
	Fid<fid_domain> domain_;
	Fid<fid_cq> cq_;
	Fid<fid_cntr> cntr_; // the RMA client's write counter (inject_write)
	Fid<fid_av> av_;     // FI_EP_RDM only
	std::unique_ptr<uint8_t, FreeDeleter> region_;
	std::vector<Slot> tx_slots_;
	std::vector<Slot> rx_slots_;
	Fid<fid_mr> mr_;
	Fid<fid_pep> pep_;
	Fid<fid_ep> ep_;

	uint8_t *base_ = nullptr; // the region
	void *desc_ = nullptr;    // its fi_mr_desc (two-sided: only with FI_MR_LOCAL)
	size_t inject_size_ = 0;
	size_t max_msg_size_ = 0;
	std::vector<size_t> free_tx_; // the idle tx_slots_
	uint64_t tx_done_ = 0;        // completions of tx_slots_

	const char *who() const { return is_client_ ? "client" : "server"; }

	// The fabric of `info`, and with `with_eq` its event queue.
	void open_fabric(const fi_info *info, bool with_eq);
	// A passive endpoint for info_, bound to the event queue (not yet
	// listening).
	void open_passive();
	// The region: `bytes` rounded up to whole pages, zeroed; returns its
	// length.
	size_t alloc_region(size_t bytes);
	// `tx` idle tx slots and `rx` rx slots.
	void init_slots(size_t tx, size_t rx);
	// Closes the fabric objects in teardown order.
	void close_fabric();

	static std::optional<size_t> slot_index(const std::vector<Slot> &slots, const void *ctx)
	{
		return index_of_context(slots, ctx);
	}

	// Reads the completion queue into `entries`: how many it read, 0 when
	// there were none; report() is called for an error entry and must not
	// return (see read_cq_error).
	template <class Entry, size_t N, class Report> size_t read_cq(Entry (&entries)[N], Report report)
	{
		const ssize_t n = fi_cq_read(cq_.get(), entries, N);
		if (n == -FI_EAGAIN)
			return 0;
		if (n == -FI_EAVAIL) {
			report(); // fails, or takes an error the caller expects
			return 0;
		}
		if (n < 0)
			fail_call("fi_cq_read", n);
		return static_cast<size_t>(n);
	}
	// Reads the completion queue's error entry into err; returns the
	// provider's words for it ("-": none).
	std::string read_cq_error(fi_cq_err_entry &err);

	// Calls progress() (reads completions) until done() holds; the
	// Watchdog gives up after --timeout without progress.
	template <class Done, class Progress> void progress_until(const char *what, Done done, Progress progress)
	{
		Watchdog wd(opt_.timeout, what);
		while (!done()) {
			progress();
			wd.poll();
		}
	}

	// Marks an idle tx slot busy and returns its index; progress() reads
	// completions until one is idle.
	template <class Progress> size_t take_tx(const char *what, Progress progress)
	{
		progress_until(what, [this] { return !free_tx_.empty(); }, progress);
		const size_t index = free_tx_.back();
		free_tx_.pop_back();
		tx_slots_[index].busy = true;
		return index;
	}

	// Posts with post(call) until the queue takes it: a full queue
	// (-FI_EAGAIN) is retried after progress(), another error fails with
	// the `call` that post names.
	template <class Post, class Progress> void post_retry(const char *what, Post post, Progress progress)
	{
		Watchdog wd(opt_.timeout, what);
		for (;;) {
			const char *call = "";
			const ssize_t rc = post(call);
			if (rc == 0)
				return;
			if (rc != -FI_EAGAIN)
				fail_call(call, rc);
			progress();
			wd.poll();
		}
	}
};

// ---------------------------------------------------------------- results

struct Row {
	size_t size = 0;
	bool skipped = false;
	std::string note;
	double mbps = 0, mops = 0;
	std::optional<double> p50, p99;
	uint64_t iterations = 0;
	uint64_t posts = 0; // calls of the operation in the measured run, retries included
	uint64_t dropped_samples = 0; // latency samples that spanned two processors
};

struct RunInfo {
	std::string provider, fabric, domain;
	Op op = Op::write;
	Mode mode = Mode::bw;
	uint8_t flags = 0;
	size_t window = 0;
	std::string inject_flush; // how bw/rate injects are waited for
	std::string sample_clock; // what timed the latency samples
	// "rdm" or "msg" for two-sided runs; "rdm" for RMA over FI_EP_RDM,
	// empty for RMA over FI_EP_MSG (whose output stays as it always was).
	std::string endpoint;
	// Two-sided runs only (RMA output has none of these).
	std::string data_progress; // "manual", "auto", ...
	size_t inject_size = 0;
};

// Shows "size: done/total" on stderr during long runs.
class ProgressLine {
public:
	explicit ProgressLine(bool enabled) : enabled_(enabled) {}
	void start(size_t size, uint64_t total)
	{
		size_ = size;
		total_ = total;
		start_ = last_ = Clock::now();
	}
	void update(uint64_t done)
	{
		if (!enabled_ || (++calls_ & 63) != 0)
			return;
		const auto now = Clock::now();
		if (std::chrono::duration<double>(now - start_).count() < 0.5 ||
		    std::chrono::duration<double>(now - last_).count() < 0.2)
			return;
		last_ = now;
		fprintf(stderr, "\r%zu B: %" PRIu64 "/%" PRIu64 " iterations ", size_, done, total_);
		shown_ = true;
	}
	void clear()
	{
		if (shown_)
			fprintf(stderr, "\r%60s\r", "");
		shown_ = false;
	}

private:
	bool enabled_;
	size_t size_ = 0;
	uint64_t total_ = 0;
	Clock::time_point start_, last_;
	unsigned calls_ = 0;
	bool shown_ = false;
};

double percentile(const std::vector<double> &sorted, double p);

// ---------------------------------------------------------------- roles and runs (vrma_bench_runner.cpp)

// Runs body and returns its status; a failure becomes the exit status (a
// BenchError's, or kExitError once what `who` ran into is printed).
int guarded(const char *who, const std::function<int()> &body);

// Where a server listens: what a loopback client connects to.
struct ListenAddress {
	bool ok = false;
	std::string host, port;
};

// The server of a module (RMA or two-sided): it serves one client.
class BenchServer {
public:
	virtual ~BenchServer() = default;
	// Opens the fabric side and listens.
	virtual ListenAddress listen() = 0;
	// How --server tells what it listens with: "provider P, domain D", ...
	virtual std::string describe() const = 0;
	// Takes the client's connection.
	virtual void accept() = 0;
	// Answers the client until it quits.
	virtual void serve() = 0;
};

// The client of a module. The module connects and times runs of n
// iterations (timed_run); the runner measures each size: calibration to
// --duration, the warm-up, the measured run with its samples, and the Row.
class ClientRunner {
public:
	explicit ClientRunner(const Options &opt);
	virtual ~ClientRunner() = default;
	ClientRunner(const ClientRunner &) = delete;
	ClientRunner &operator=(const ClientRunner &) = delete;

	// Connects to the server; max_size: the largest size to be measured.
	virtual void connect(const std::string &host, const std::string &port, size_t max_size) = 0;
	virtual RunInfo run_info() const = 0;
	// Measures `size`, the index-th size of the run.
	Row measure(size_t size, size_t index);
	// Tells the server that the client is done, and disconnects.
	virtual void quit() = 0;

protected:
	size_t window_ = 1; // operations outstanding in bw and rate runs
	ProgressLine progress_line_;
	SampleClock sample_clock_;

	// Why `size` cannot be measured (the Row's note); nothing when it can.
	virtual std::optional<std::string> skip_reason(size_t size) const = 0;
	// Before a size's runs: the data to send (pattern_byte with `salt`)
	// and what the checks expect.
	virtual void prepare(size_t size, uint8_t salt) = 0;
	// After the warm-up, just before the measured run.
	virtual void before_measured(size_t /*size*/) {}
	// After the measured run: the module's own data check.
	virtual void after_measured(size_t /*size*/, uint8_t /*salt*/) {}
	// Runs n iterations; returns the seconds they took. samples (when
	// given) gets one value in microseconds per iteration (lat) or per
	// window (bw, rate); show: keep progress_line_ up to date.
	virtual double timed_run(size_t size, uint64_t n, std::vector<double> *samples, bool show) = 0;
	// Calls of the operation under test so far, retries included.
	virtual uint64_t posts() const = 0;
	// lat: the one-way trips one iteration takes (a round trip: 2).
	virtual unsigned trips_per_iteration() const { return 2; }

	bool lat() const { return options_.mode == Mode::lat; }
	// window_: -w, clamped to the transmit queue size (which it says).
	void set_window(size_t tx_queue_size);
	// The RunInfo fields every module fills.
	RunInfo common_run_info(const fi_info *info, Op op, Mode mode) const;
	// A skip_reason: "larger than <limit_name> (<limit>)".
	static std::string too_large(const char *limit_name, size_t limit);

	// One sample: the microseconds from a to b, divided by `per`.
	void add_sample(std::vector<double> &samples, Stamp a, Stamp b, double per);
	// The end of a latency iteration that began at t0 and took `per`
	// one-way trips: its sample, and the progress line (`done` iterations).
	void lap(std::vector<double> *samples, Stamp t0, double per, bool show, uint64_t done)
	{
		if (samples)
			add_sample(*samples, t0, sample_clock_.now(), per);
		if (show)
			progress_line_.update(done);
	}

	// Keeps up to window_ operations outstanding until n have completed:
	// post(posted, burst) posts `burst` more after the first `posted`,
	// reap() reads completions (returns how many entries it read), `done`
	// counts the completed operations. samples get the time per operation
	// of each window. Returns when the run started.
	template <class Post, class Reap>
	Clock::time_point windowed_run(uint64_t n, const uint64_t &done, Post post, Reap reap,
				       std::vector<double> *samples, bool show, const char *what)
	{
		Watchdog wd(options_.timeout, what);
		const uint64_t base = done;
		uint64_t posted = 0;
		uint64_t next_mark = window_;
		const auto start = Clock::now();
		Stamp mark = sample_clock_.now();
		while (done - base < n) {
			const uint64_t outstanding = posted - (done - base);
			const uint64_t burst = std::min<uint64_t>(window_ - outstanding, n - posted);
			post(posted, burst);
			posted += burst;
			if (reap()) {
				wd.progressed();
				while (done - base >= next_mark) {
					const Stamp now = sample_clock_.now();
					if (samples)
						add_sample(*samples, mark, now, static_cast<double>(window_));
					mark = now;
					next_mark += window_;
				}
			} else {
				wd.poll();
			}
			if (show)
				progress_line_.update(done - base);
		}
		return start;
	}

private:
	const Options &options_;
	uint64_t dropped_samples_ = 0; // spanned two processors (see SampleClock)

	// Doubles a run's length until it takes a twentieth of --duration, then
	// scales to --duration.
	uint64_t calibrate(size_t size);
	// timed_run with the progress line shown (show) and cleared after.
	double run(size_t size, uint64_t n, std::vector<double> *samples, bool show);
};

using MakeServer = std::unique_ptr<BenchServer> (*)(const Options &opt);
using MakeClient = std::unique_ptr<ClientRunner> (*)(const Options &opt);

// A module's benchmark by opt.role: --server, the client of -s, or both
// in one process (loopback), with the module's server and client.
int run_roles(const Options &opt, MakeServer make_server, MakeClient make_client);

template <class ServerT, class ClientT> int run_roles(const Options &opt)
{
	return run_roles(
		opt, [](const Options &o) -> std::unique_ptr<BenchServer> { return std::make_unique<ServerT>(o); },
		[](const Options &o) -> std::unique_ptr<ClientRunner> { return std::make_unique<ClientT>(o); });
}

// vrma_bench_report.cpp
void print_header(const RunInfo &ri);
void print_row(const Row &row);
void write_json(const std::string &path, const RunInfo &ri, const std::vector<Row> &rows);
int plot(const Options &opt);

// vrma_bench_rma.cpp: RMA over FI_EP_MSG or FI_EP_RDM.
int run_rma(const Options &opt);

// vrma_bench_twosided.cpp: two-sided messages over FI_EP_RDM or FI_EP_MSG.
int run_two_sided(const Options &opt);

// vrma_bench_peers.cpp: one FI_EP_RDM endpoint and many peers (--hub,
// --peer-eps).
int run_peers(const Options &opt);

} // namespace vrma_bench

#endif
