// vrma_bench: RMA bandwidth, latency and message-rate benchmark for any
// libfabric provider offering FI_EP_MSG endpoints with FI_RMA (vrma, verbs,
// tcp). It uses the public libfabric API only.
//
// Protocol between client and server (both ends are this program, on hosts
// of the same byte order):
//  - fi_connect and fi_accept carry a CmData each way: the region's remote
//    address (0 without FI_MR_VIRT_ADDR: addresses are then offsets), its
//    key and the size of its data areas; the client adds the operation, the
//    mode and the flags, which the server takes over for its own writes.
//  - Each side registers one region: a tx area and an rx area of data_size
//    bytes each, then a control area. Writes go from the local tx area to
//    the peer's rx area; reads from the peer's tx area into the local rx
//    area.
//  - The client drives the server with Command records written into the
//    server's control area. The server polls the record's last 8 bytes
//    (seq) and answers by writing seq into the client's ack slot. Like the
//    latency ping-pong's last-byte polling, this relies on the last bytes
//    of a write being placed last, which RC devices and tcp do.

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

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
std::atomic<bool> g_abort{false};

[[noreturn]] __attribute__((format(printf, 2, 3))) void fail(int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fflush(stdout);
	fprintf(stderr, "vrma_bench: %s\n", msg);
	g_abort.store(true);
	throw BenchError{status};
}

[[noreturn]] void fail_call(const char *call, long rc)
{
	fail(kExitError, "%s: %s (%ld)", call, fi_strerror(static_cast<int>(-rc)), rc);
}

[[noreturn]] void stop_quietly()
{
	throw BenchError{kExitError};
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t)
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

enum class Op : uint8_t { write, read, writedata, inject_write };
enum class Mode : uint8_t { bw, lat, rate };
enum class Role { loopback, server, client };

// Benchmark flags; the first three shape the getinfo hints, so both ends
// must agree on them.
constexpr uint8_t kFlagDelivery = 1;
constexpr uint8_t kFlagCommit = 2;
constexpr uint8_t kFlagFence = 4;
constexpr uint8_t kFlagMore = 8;
constexpr uint8_t kFlagInject = 16;
constexpr uint8_t kHintFlags = kFlagDelivery | kFlagCommit | kFlagFence;

const char *op_name(Op op)
{
	switch (op) {
	case Op::write: return "write";
	case Op::read: return "read";
	case Op::writedata: return "writedata";
	case Op::inject_write: return "inject_write";
	}
	return "?";
}

const char *mode_name(Mode mode)
{
	switch (mode) {
	case Mode::bw: return "bw";
	case Mode::lat: return "lat";
	case Mode::rate: return "rate";
	}
	return "?";
}

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

constexpr Op kAllOps[] = {Op::write, Op::read, Op::writedata, Op::inject_write};
constexpr Mode kAllModes[] = {Mode::bw, Mode::lat, Mode::rate};

std::string flags_name(uint8_t flags)
{
	static const struct {
		uint8_t bit;
		const char *name;
	} names[] = {{kFlagDelivery, "delivery-complete"}, {kFlagCommit, "commit-complete"},
		     {kFlagFence, "fence"}, {kFlagMore, "more"}, {kFlagInject, "inject"}};
	std::string out;
	for (const auto &n : names) {
		if (!(flags & n.bit))
			continue;
		if (!out.empty())
			out += ',';
		out += n.name;
	}
	return out.empty() ? "none" : out;
}

uint64_t completion_op_flags(uint8_t flags)
{
	return ((flags & kFlagDelivery) ? FI_DELIVERY_COMPLETE : 0) |
	       ((flags & kFlagCommit) ? FI_COMMIT_COMPLETE : 0);
}

struct Options {
	Role role = Role::loopback;
	std::string provider, domain, server_addr, bind_addr;
	int port = kDefaultPort;
	bool port_given = false;
	Op op = Op::write;
	Mode mode = Mode::bw;
	size_t window = 64;
	std::vector<size_t> sizes; // empty: the mode's default
	bool sizes_all = false;
	size_t max_size = kDefaultMaxSize;
	uint64_t iterations = 0; // 0: calibrated
	int64_t warmup = -1;     // -1: 10% of the iterations, at least 2
	double duration = 1.0;
	double timeout = 30.0;
	uint8_t flags = 0;
	bool progress = false;
	std::string json_out, plot_out;
	std::vector<std::string> json_in;
};

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

InfoPtr make_hints(const Options &opt)
{
	InfoPtr hints(fi_allocinfo());
	if (!hints)
		fail(kExitError, "fi_allocinfo: out of memory");
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_RMA;
	if (opt.flags & kFlagCommit)
		hints->caps |= FI_RMA_PMEM;
	if (opt.flags & kFlagFence)
		hints->caps |= FI_FENCE;
	hints->mode = FI_CONTEXT | FI_RX_CQ_DATA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	// Each side is one thread with a domain of its own (as MPI asks for).
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->tx_attr->op_flags = completion_op_flags(opt.flags);
	if (!opt.provider.empty())
		hints->fabric_attr->prov_name = strdup(opt.provider.c_str());
	if (!opt.domain.empty())
		hints->domain_attr->name = strdup(opt.domain.c_str());
	return hints;
}

std::string hints_text(const Options &opt)
{
	std::string caps = "FI_RMA";
	if (opt.flags & kFlagCommit)
		caps += "|FI_RMA_PMEM";
	if (opt.flags & kFlagFence)
		caps += "|FI_FENCE";
	std::string op_flags;
	if (opt.flags & kFlagDelivery)
		op_flags = "FI_DELIVERY_COMPLETE";
	if (opt.flags & kFlagCommit)
		op_flags += op_flags.empty() ? "FI_COMMIT_COMPLETE" : "|FI_COMMIT_COMPLETE";
	return "FI_EP_MSG, FI_THREAD_DOMAIN, caps " + caps + ", tx op_flags " +
	       (op_flags.empty() ? "0" : op_flags);
}

// The first fi_info the provider offers for the options; a refusal is "not
// supported" (exit status 2).
InfoPtr get_info(const Options &opt, const char *node, const char *service, uint64_t flags)
{
	InfoPtr hints = make_hints(opt);
	fi_info *list = nullptr;
	int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), node, service, flags,
			    hints.get(), &list);
	if (rc == -FI_ENODATA)
		fail(kExitUnsupported,
		     "provider %s offers no endpoint for %s%s%s (fi_getinfo: %s): not supported",
		     opt.provider.empty() ? "(any)" : opt.provider.c_str(), hints_text(opt).c_str(),
		     node ? " at " : "", node ? node : "", fi_strerror(-rc));
	if (rc)
		fail_call("fi_getinfo", rc);
	InfoPtr first(fi_dupinfo(list));
	fi_freeinfo(list);
	if (!first)
		fail(kExitError, "fi_dupinfo: out of memory");
	return first;
}

// ---------------------------------------------------------------- wire formats

constexpr uint32_t kCmMagic = 0x76626e63; // "vbnc"
constexpr uint8_t kCmVersion = 1;

struct CmData {
	uint32_t magic;
	uint8_t version;
	uint8_t op;
	uint8_t mode;
	uint8_t flags;
	uint64_t base; // remote address of the region (0 without FI_MR_VIRT_ADDR)
	uint64_t key;
	uint64_t data_size; // bytes of the tx area and of the rx area
};
static_assert(sizeof(CmData) == 32, "CmData is sent as is");

// Control area, after the two data areas; offsets keep every slot 8-byte
// aligned (they are read through atomic_ref).
constexpr size_t kCtrlCmdIn = 0;     // Command written by the client
constexpr size_t kCtrlAckIn = 64;    // seq written back by the server
constexpr size_t kCtrlCmdOut = 128;  // staging of the outgoing Command
constexpr size_t kCtrlAckOut = 192;  // staging of the outgoing ack
constexpr size_t kCtrlCheck = 256;   // 16 bytes read back from the peer
constexpr size_t kCtrlScratch = 320; // buffer of the receives that remote CQ data consumes
constexpr size_t kCtrlBytes = 384;

constexpr uint64_t kCmdLat = 1;  // ping-pong `count` times with `size` bytes
constexpr uint64_t kCmdQuit = 2; // the client is done

struct Command {
	uint64_t kind;
	uint64_t size;
	uint64_t count;
	uint64_t seq; // last: its arrival means the whole record arrived
};

constexpr uint8_t kServerSalt = 0xa5;

uint8_t pattern_byte(size_t i, uint8_t salt)
{
	return static_cast<uint8_t>(i * 131 + (i >> 8) * 7 + salt);
}

// ---------------------------------------------------------------- one endpoint

// One side of a connection: its fabric objects, its registered region and
// the completion bookkeeping. The member order is the teardown order
// reversed: the endpoint closes first, the region is freed after its MR.
class Side {
public:
	explicit Side(const Options &opt, bool is_client) : opt_(opt), is_client_(is_client) {}
	Side(const Side &) = delete;
	Side &operator=(const Side &) = delete;

protected:
	// fi_context comes first: a completion's op_context points at the slot.
	struct OpSlot {
		fi_context ctx;
		bool busy;
	};

	const Options &opt_;
	const bool is_client_;
	InfoPtr info_;
	InfoPtr conn_info_;
	Fid<fid_fabric> fabric_;
	Fid<fid_eq> eq_;
	Fid<fid_domain> domain_;
	Fid<fid_cq> cq_;
	Fid<fid_cntr> cntr_;
	std::unique_ptr<uint8_t, FreeDeleter> region_;
	std::vector<OpSlot> tx_slots_;
	std::vector<OpSlot> rx_slots_;
	Fid<fid_mr> mr_;
	Fid<fid_pep> pep_;
	Fid<fid_ep> ep_;

	uint8_t *base_ = nullptr;
	size_t data_size_ = 0;
	void *desc_ = nullptr;
	bool virt_addr_ = false;
	uint64_t peer_base_ = 0;
	uint64_t peer_key_ = 0;

	Op op_ = Op::write;
	Mode mode_ = Mode::bw;
	uint8_t flags_ = 0;
	uint64_t perop_ = 0;    // flags every data operation carries
	bool use_msg_ = false;  // data operations go through fi_writemsg/fi_readmsg
	bool selective_ = false; // injects through fi_writemsg must not complete
	size_t inject_size_ = 0;
	size_t max_msg_size_ = 0;

	std::vector<size_t> free_tx_;
	uint64_t tx_done_ = 0;
	bool rx_posts_ = false; // remote CQ data consumes receives we post (FI_RX_CQ_DATA)
	size_t rx_repost_pending_ = 0;
	size_t rx_next_ = 0;
	uint64_t remote_data_count_ = 0;
	uint64_t data_posts_ = 0; // calls of post_once
	uint64_t remote_data_last_ = 0;

	size_t tx_off() const { return 0; }
	size_t rx_off() const { return data_size_; }
	size_t ctrl_off() const { return 2 * data_size_; }
	const char *who() const { return is_client_ ? "client" : "server"; }

	void open_fabric(fi_info *info)
	{
		int rc = fi_fabric(info->fabric_attr, fabric_.out(), nullptr);
		if (rc)
			fail_call("fi_fabric", rc);
		fi_eq_attr attr{};
		attr.size = 64;
		attr.wait_obj = FI_WAIT_UNSPEC;
		rc = fi_eq_open(fabric_.get(), &attr, eq_.out(), nullptr);
		if (rc)
			fail_call("fi_eq_open", rc);
	}

	void check_cm_data_size(fid_t fid)
	{
		size_t max = 0;
		size_t len = sizeof max;
		int rc = fi_getopt(fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &max, &len);
		if (rc == 0 && max < sizeof(CmData))
			fail(kExitUnsupported,
			     "the provider carries %zu bytes of connection data (FI_OPT_CM_DATA_SIZE), vrma_bench needs %zu: not supported",
			     max, sizeof(CmData));
	}

	void set_operation(Op op, Mode mode, uint8_t flags)
	{
		op_ = op;
		mode_ = mode;
		flags_ = flags;
		perop_ = completion_op_flags(flags) | ((flags & kFlagFence) ? FI_FENCE : 0) |
			 ((flags & kFlagInject) ? FI_INJECT : 0);
		use_msg_ = perop_ != 0 || (is_client_ && (flags & kFlagMore));
		selective_ = is_client_ && op == Op::inject_write && use_msg_;
	}

	// Completion queue, counter, region, MR and the enabled endpoint.
	void setup_endpoint(fi_info *info, size_t tx_slots, uint64_t requested_key)
	{
		inject_size_ = info->tx_attr->inject_size;
		max_msg_size_ = info->ep_attr->max_msg_size;
		rx_posts_ = op_ == Op::writedata &&
			    ((info->mode | info->rx_attr->mode) & FI_RX_CQ_DATA);
		const size_t rx_depth = rx_posts_ ? std::clamp<size_t>(info->rx_attr->size, 1, 256) : 0;

		fi_cq_attr cq_attr{};
		cq_attr.size = tx_slots + rx_depth + 64;
		cq_attr.format = FI_CQ_FORMAT_DATA;
		cq_attr.wait_obj = FI_WAIT_NONE;
		int rc = fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr);
		if (rc)
			fail_call("fi_cq_open", rc);

		if (is_client_ && op_ == Op::inject_write && info->domain_attr->cntr_cnt > 0) {
			fi_cntr_attr cntr_attr{};
			cntr_attr.events = FI_CNTR_EVENTS_COMP;
			cntr_attr.wait_obj = FI_WAIT_NONE;
			if (fi_cntr_open(domain_.get(), &cntr_attr, cntr_.out(), nullptr))
				cntr_.reset(); // injects are then flushed with a read
		}

		const size_t len = (2 * data_size_ + kCtrlBytes + 4095) / 4096 * 4096;
		region_.reset(static_cast<uint8_t *>(aligned_alloc(4096, len)));
		if (!region_)
			fail(kExitError, "cannot allocate %zu bytes", len);
		base_ = region_.get();
		memset(base_, 0, len);
		rc = fi_mr_reg(domain_.get(), base_, len,
			       FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, requested_key,
			       0, mr_.out(), nullptr);
		if (rc)
			fail_call("fi_mr_reg", rc);
		desc_ = fi_mr_desc(mr_.get());
		if (fi_mr_key(mr_.get()) == FI_KEY_NOTAVAIL)
			fail(kExitUnsupported, "fi_mr_key: the key is not available (FI_MR_RAW): not supported");
		virt_addr_ = info->domain_attr->mr_mode & FI_MR_VIRT_ADDR;

		tx_slots_.assign(tx_slots, OpSlot{});
		free_tx_.clear();
		for (size_t i = tx_slots; i > 0; --i)
			free_tx_.push_back(i - 1);
		rx_slots_.assign(rx_depth, OpSlot{});

		rc = fi_endpoint(domain_.get(), info, ep_.out(), nullptr);
		if (rc)
			fail_call("fi_endpoint", rc);
		rc = fi_ep_bind(ep_.get(), &eq_.get()->fid, 0);
		if (rc)
			fail_call("fi_ep_bind(eq)", rc);
		rc = fi_ep_bind(ep_.get(), &cq_.get()->fid,
				FI_TRANSMIT | FI_RECV | (selective_ ? FI_SELECTIVE_COMPLETION : 0));
		if (rc)
			fail_call("fi_ep_bind(cq)", rc);
		if (cntr_) {
			rc = fi_ep_bind(ep_.get(), &cntr_.get()->fid, FI_WRITE);
			if (rc)
				fail_call("fi_ep_bind(cntr, FI_WRITE)", rc);
		}
		rc = fi_enable(ep_.get());
		if (rc)
			fail_call("fi_enable", rc);
		if (rx_posts_) {
			rx_repost_pending_ = rx_depth;
			repost_rx();
			if (rx_repost_pending_)
				fail(kExitError, "fi_recv: the endpoint took only %zu of %zu receives",
				     rx_depth - rx_repost_pending_, rx_depth);
		}
	}

	CmData my_cm_data() const
	{
		CmData d{};
		d.magic = kCmMagic;
		d.version = kCmVersion;
		d.op = static_cast<uint8_t>(op_);
		d.mode = static_cast<uint8_t>(mode_);
		d.flags = flags_;
		d.base = virt_addr_ ? reinterpret_cast<uintptr_t>(base_) : 0;
		d.key = fi_mr_key(mr_.get());
		d.data_size = data_size_;
		return d;
	}

	static std::optional<CmData> parse_cm_data(const uint8_t *entry_buf, ssize_t len)
	{
		if (len < static_cast<ssize_t>(sizeof(fi_eq_cm_entry) + sizeof(CmData)))
			return std::nullopt;
		CmData d;
		memcpy(&d, entry_buf + sizeof(fi_eq_cm_entry), sizeof d);
		if (d.magic != kCmMagic || d.version != kCmVersion)
			return std::nullopt;
		return d;
	}

	[[noreturn]] void report_eq_error(const char *what)
	{
		fi_eq_err_entry err{};
		ssize_t rc = fi_eq_readerr(eq_.get(), &err, 0);
		if (rc < 0)
			fail_call("fi_eq_readerr", rc);
		if (err.err == FI_ECONNREFUSED)
			fail(kExitError,
			     "%s: connection refused while waiting for %s: no server listening there, or it runs with other --delivery-complete/--commit-complete/--fence flags",
			     who(), what);
		char buf[256] = "";
		const char *prov = fi_eq_strerror(eq_.get(), err.prov_errno, err.err_data, buf, sizeof buf);
		fail(kExitError, "%s: event queue error while waiting for %s: %s (%d), provider: %s", who(),
		     what, fi_strerror(err.err), err.err, prov ? prov : "-");
	}

	// Waits for event `want` (from `want_fid` when given); returns the bytes
	// fi_eq_read stored in buf.
	ssize_t wait_eq(uint32_t want, fid_t want_fid, uint8_t *buf, size_t len, const char *what,
			double limit)
	{
		Watchdog wd(limit, what);
		for (;;) {
			uint32_t event = 0;
			ssize_t rc = fi_eq_read(eq_.get(), &event, buf, len, 0);
			if (rc == -FI_EAGAIN) {
				usleep(50);
				wd.poll();
				continue;
			}
			if (rc == -FI_EAVAIL)
				report_eq_error(what);
			if (rc < 0)
				fail_call("fi_eq_read", rc);
			const auto *entry = reinterpret_cast<const fi_eq_entry *>(buf);
			if (event == want && (!want_fid || entry->fid == want_fid))
				return rc;
			if (event == FI_SHUTDOWN)
				fail(kExitError, "%s: the peer closed the connection while we waited for %s", who(), what);
			fail(kExitError, "%s: unexpected event %u while waiting for %s", who(), event, what);
		}
	}

	// Non-blocking: fails when the peer went away.
	void check_connection()
	{
		uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
		uint32_t event = 0;
		ssize_t rc = fi_eq_read(eq_.get(), &event, buf, sizeof buf, 0);
		if (rc == -FI_EAGAIN)
			return;
		if (rc == -FI_EAVAIL)
			report_eq_error("the peer's next request");
		if (rc < 0)
			fail_call("fi_eq_read", rc);
		if (event == FI_SHUTDOWN)
			fail(kExitError, "%s: the peer closed the connection before it finished", who());
		fail(kExitError, "%s: unexpected event %u on a connected endpoint", who(), event);
	}

	[[noreturn]] void report_cq_error()
	{
		fi_cq_err_entry err{};
		ssize_t rc = fi_cq_readerr(cq_.get(), &err, 0);
		if (rc < 0)
			fail_call("fi_cq_readerr", rc);
		char buf[256] = "";
		const char *prov = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, buf, sizeof buf);
		fail(kExitError,
		     "%s: %s operation failed: completion error %s (%d), flags 0x%" PRIx64 ", provider: %s",
		     who(), op_name(op_), fi_strerror(err.err), err.err, err.flags, prov ? prov : "-");
	}

	void repost_rx()
	{
		while (rx_repost_pending_) {
			// Remote CQ data consumes receives in order: the next one to
			// repost is the oldest consumed.
			OpSlot &slot = rx_slots_[rx_next_ % rx_slots_.size()];
			ssize_t rc = fi_recv(ep_.get(), base_ + ctrl_off() + kCtrlScratch, 8, desc_, 0,
					     &slot.ctx);
			if (rc == -FI_EAGAIN)
				return;
			if (rc)
				fail_call("fi_recv", rc);
			++rx_next_;
			--rx_repost_pending_;
		}
	}

	// Reads what the completion queue holds; returns the number of entries.
	size_t progress()
	{
		if (rx_repost_pending_)
			repost_rx();
		fi_cq_data_entry entries[32];
		ssize_t n = fi_cq_read(cq_.get(), entries, 32);
		if (n == -FI_EAGAIN)
			return 0;
		if (n == -FI_EAVAIL)
			report_cq_error();
		if (n < 0)
			fail_call("fi_cq_read", n);
		for (ssize_t i = 0; i < n; ++i) {
			const fi_cq_data_entry &e = entries[i];
			if (e.flags & FI_REMOTE_CQ_DATA) {
				++remote_data_count_;
				remote_data_last_ = e.data;
				if (rx_posts_)
					++rx_repost_pending_;
				continue;
			}
			if (e.flags & (FI_REMOTE_WRITE | FI_REMOTE_READ))
				continue;
			const auto addr = reinterpret_cast<uintptr_t>(e.op_context);
			const auto first = reinterpret_cast<uintptr_t>(tx_slots_.data());
			const auto end = reinterpret_cast<uintptr_t>(tx_slots_.data() + tx_slots_.size());
			if (addr < first || addr >= end || (addr - first) % sizeof(OpSlot))
				fail(kExitError, "%s: completion with unknown context %p, flags 0x%" PRIx64, who(),
				     e.op_context, e.flags);
			const size_t index = (addr - first) / sizeof(OpSlot);
			if (!tx_slots_[index].busy)
				fail(kExitError, "%s: second completion for context %p", who(), e.op_context);
			tx_slots_[index].busy = false;
			free_tx_.push_back(index);
			++tx_done_;
		}
		return static_cast<size_t>(n);
	}

	void *acquire_tx()
	{
		Watchdog wd(opt_.timeout, "a completion to free an operation context");
		while (free_tx_.empty()) {
			progress();
			wd.poll();
		}
		const size_t index = free_tx_.back();
		free_tx_.pop_back();
		tx_slots_[index].busy = true;
		return &tx_slots_[index].ctx;
	}

	void wait_slot(void *ctx, const char *what)
	{
		const OpSlot *slot = reinterpret_cast<const OpSlot *>(ctx);
		Watchdog wd(opt_.timeout, what);
		while (slot->busy) {
			progress();
			wd.poll();
		}
	}

	bool op_completes(Op op) const { return !(op == Op::inject_write && (!use_msg_ || selective_)); }

	// One call of the operation under test. Kept out of line: util/
	// vrma-compare counts its instructions with callgrind
	// (--toggle-collect=*post_once*).
	[[gnu::noinline]] ssize_t post_once(Op op, size_t size, uint64_t extra, uint64_t data,
					    void *ctx, const char *&call)
	{
		++data_posts_;
		const bool is_read = op == Op::read;
		uint8_t *local = base_ + (is_read ? rx_off() : tx_off());
		const uint64_t remote = peer_base_ + (is_read ? tx_off() : rx_off());
		if (!use_msg_) {
			switch (op) {
			case Op::write:
				call = "fi_write";
				return fi_write(ep_.get(), local, size, desc_, 0, remote, peer_key_, ctx);
			case Op::read:
				call = "fi_read";
				return fi_read(ep_.get(), local, size, desc_, 0, remote, peer_key_, ctx);
			case Op::writedata:
				call = "fi_writedata";
				return fi_writedata(ep_.get(), local, size, desc_, data, 0, remote, peer_key_,
						    ctx);
			case Op::inject_write:
				call = "fi_inject_write";
				return fi_inject_write(ep_.get(), local, size, 0, remote, peer_key_);
			}
		}
		iovec iov{local, size};
		void *desc = desc_;
		fi_rma_iov rma{remote, size, peer_key_};
		fi_msg_rma msg{};
		msg.msg_iov = &iov;
		msg.desc = &desc;
		msg.iov_count = 1;
		msg.rma_iov = &rma;
		msg.rma_iov_count = 1;
		msg.context = ctx;
		msg.data = data;
		uint64_t flags = perop_ | extra;
		if (op == Op::inject_write)
			flags |= FI_INJECT | (selective_ ? 0 : FI_COMPLETION);
		else
			flags |= FI_COMPLETION;
		if (op == Op::writedata)
			flags |= FI_REMOTE_CQ_DATA;
		call = is_read ? "fi_readmsg" : "fi_writemsg";
		return is_read ? fi_readmsg(ep_.get(), &msg, flags) : fi_writemsg(ep_.get(), &msg, flags);
	}

	// Posts one data operation; a full queue (-FI_EAGAIN) is retried after
	// progressing the CQ, without FI_MORE so that held operations go out.
	void post_data(Op op, size_t size, uint64_t extra, uint64_t data, void *ctx)
	{
		Watchdog wd(opt_.timeout, "room in the transmit queue");
		for (;;) {
			const char *call = "";
			ssize_t rc = post_once(op, size, extra, data, ctx, call);
			if (rc == 0)
				return;
			if (rc != -FI_EAGAIN)
				fail_call(call, rc);
			extra &= ~FI_MORE;
			progress();
			wd.poll();
		}
	}

	// A control write or read of the region's own bytes, waited for.
	void rma_ctrl(bool write, size_t local_off, size_t remote_off, size_t len, const char *what)
	{
		wait_slot(post_ctrl(write, local_off, remote_off, len, what), what);
	}

	// The same, posted only: returns the context that wait_slot waits on.
	void *post_ctrl(bool write, size_t local_off, size_t remote_off, size_t len, const char *what)
	{
		void *ctx = acquire_tx();
		iovec iov{base_ + local_off, len};
		void *desc = desc_;
		fi_rma_iov rma{peer_base_ + remote_off, len, peer_key_};
		fi_msg_rma msg{};
		msg.msg_iov = &iov;
		msg.desc = &desc;
		msg.iov_count = 1;
		msg.rma_iov = &rma;
		msg.rma_iov_count = 1;
		msg.context = ctx;
		Watchdog wd(opt_.timeout, what);
		for (;;) {
			ssize_t rc = write ? fi_writemsg(ep_.get(), &msg, FI_COMPLETION)
					   : fi_readmsg(ep_.get(), &msg, FI_COMPLETION);
			if (rc == 0)
				break;
			if (rc != -FI_EAGAIN)
				fail_call(write ? "fi_writemsg" : "fi_readmsg", rc);
			progress();
			wd.poll();
		}
		return ctx;
	}

	uint64_t load_u64(size_t off) const
	{
		return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t *>(base_ + off))
			.load(std::memory_order_acquire);
	}
	uint8_t load_u8(size_t off) const
	{
		return std::atomic_ref<uint8_t>(base_[off]).load(std::memory_order_acquire);
	}
	void store_u8(size_t off, uint8_t value)
	{
		std::atomic_ref<uint8_t>(base_[off]).store(value, std::memory_order_release);
	}

	void wait_byte(size_t off, uint8_t value, const char *what)
	{
		Watchdog wd(opt_.timeout, what);
		while (load_u8(off) != value) {
			// The byte decides the latency: look at it often, and reap
			// completions (which cost a provider call) between looks.
			for (int i = 0; i < 64 && load_u8(off) != value; ++i)
				cpu_relax();
			if (load_u8(off) == value)
				break;
			progress();
			wd.poll();
		}
	}

	// Waits for the next remote CQ data entry and checks its value.
	void wait_remote_data(uint64_t &seen, uint64_t value, const char *what)
	{
		Watchdog wd(opt_.timeout, what);
		while (remote_data_count_ == seen) {
			progress();
			wd.poll();
		}
		++seen;
		if (remote_data_count_ != seen)
			fail(kExitError, "%s: %" PRIu64 " remote CQ data entries where 1 was expected", who(),
			     remote_data_count_ - seen + 1);
		if (remote_data_last_ != value)
			fail(kExitError, "%s: remote CQ data %" PRIu64 ", expected %" PRIu64, who(),
			     remote_data_last_, value);
	}
};

// ---------------------------------------------------------------- server

struct ListenAddress {
	bool ok = false;
	std::string host, port;
};

std::string sockaddr_host(const sockaddr *sa)
{
	char text[INET6_ADDRSTRLEN] = "";
	if (sa->sa_family == AF_INET) {
		const auto *in = reinterpret_cast<const sockaddr_in *>(sa);
		if (in->sin_addr.s_addr == htonl(INADDR_ANY))
			return "";
		inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
	} else if (sa->sa_family == AF_INET6) {
		const auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
		if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
			return "";
		inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
	}
	return text;
}

class Server : public Side {
public:
	explicit Server(const Options &opt) : Side(opt, false) {}

	ListenAddress listen()
	{
		// Port 0: the loopback server takes a free port and tells the client.
		const bool ephemeral = opt_.role == Role::loopback && !opt_.port_given;
		const std::string port = std::to_string(ephemeral ? 0 : opt_.port);
		std::string node = opt_.bind_addr;
		if (node.empty() && opt_.role == Role::loopback) {
			// The client needs an address to connect to, not a wildcard:
			// the provider's first local address.
			InfoPtr local = get_info(opt_, nullptr, nullptr, 0);
			if (local->src_addr && local->src_addrlen >= sizeof(sockaddr_in))
				node = sockaddr_host(static_cast<const sockaddr *>(local->src_addr));
		}
		info_ = get_info(opt_, node.empty() ? nullptr : node.c_str(), port.c_str(), FI_SOURCE);
		open_fabric(info_.get());
		int rc = fi_passive_ep(fabric_.get(), info_.get(), pep_.out(), nullptr);
		if (rc)
			fail_call("fi_passive_ep", rc);
		rc = fi_pep_bind(pep_.get(), &eq_.get()->fid, 0);
		if (rc)
			fail_call("fi_pep_bind", rc);
		check_cm_data_size(&pep_.get()->fid);
		rc = fi_listen(pep_.get());
		if (rc)
			fail_call("fi_listen", rc);

		sockaddr_storage name{};
		size_t len = sizeof name;
		rc = fi_getname(&pep_.get()->fid, &name, &len);
		if (rc)
			fail_call("fi_getname", rc);
		const auto *sa = reinterpret_cast<const sockaddr *>(&name);
		ListenAddress addr;
		if (sa->sa_family == AF_INET)
			addr.port = std::to_string(ntohs(reinterpret_cast<const sockaddr_in *>(sa)->sin_port));
		else if (sa->sa_family == AF_INET6)
			addr.port = std::to_string(ntohs(reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_port));
		else
			fail(kExitUnsupported, "the provider's addresses are not IP addresses (format %u): use --server and -s",
			     info_->addr_format);
		addr.host = sockaddr_host(sa);
		if (addr.host.empty() && info_->src_addr && info_->src_addrlen >= sizeof(sockaddr_in))
			addr.host = sockaddr_host(static_cast<const sockaddr *>(info_->src_addr));
		if (addr.host.empty() && opt_.role == Role::loopback)
			fail(kExitError, "the provider gives no local address to connect to: give one with --addr");
		addr.ok = true;
		return addr;
	}

	const char *provider() const { return info_->fabric_attr->prov_name; }
	const char *domain() const { return info_->domain_attr->name; }

	void accept()
	{
		uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
		ssize_t len = wait_eq(FI_CONNREQ, nullptr, buf, sizeof buf, "a client", 0);
		auto *entry = reinterpret_cast<fi_eq_cm_entry *>(buf);
		conn_info_.reset(entry->info);
		const std::optional<CmData> peer = parse_cm_data(buf, len);
		if (!peer) {
			reject();
			fail(kExitError, "server: the connection request does not come from vrma_bench %u", kCmVersion);
		}
		if ((peer->flags & kHintFlags) != (opt_.flags & kHintFlags)) {
			reject();
			fail(kExitError,
			     "server: the client runs with flags %s, the server with %s: give both the same --delivery-complete/--commit-complete/--fence",
			     flags_name(peer->flags & kHintFlags).c_str(),
			     flags_name(opt_.flags & kHintFlags).c_str());
		}
		if (peer->op > static_cast<uint8_t>(Op::inject_write) ||
		    peer->mode > static_cast<uint8_t>(Mode::rate) || peer->data_size == 0 ||
		    peer->data_size > kLargestSize || peer->data_size % 64) {
			reject();
			fail(kExitError, "server: malformed connection request");
		}
		set_operation(static_cast<Op>(peer->op), static_cast<Mode>(peer->mode),
			      peer->flags & ~kFlagMore);
		data_size_ = peer->data_size;
		peer_base_ = peer->base;
		peer_key_ = peer->key;

		int rc = fi_domain(fabric_.get(), conn_info_.get(), domain_.out(), nullptr);
		if (rc)
			fail_call("fi_domain", rc);
		setup_endpoint(conn_info_.get(), 16, 0x5e5e);
		for (size_t i = 0; i < data_size_; ++i)
			base_[tx_off() + i] = pattern_byte(i, kServerSalt);
		const CmData mine = my_cm_data();
		rc = fi_accept(ep_.get(), &mine, sizeof mine);
		if (rc)
			fail_call("fi_accept", rc);
		wait_eq(FI_CONNECTED, &ep_.get()->fid, buf, sizeof buf, "the connection to complete",
			opt_.timeout);
		if (opt_.role == Role::server)
			fprintf(stderr, "vrma_bench: client connected: op %s, mode %s, flags %s\n",
				op_name(op_), mode_name(mode_), flags_name(peer->flags).c_str());
	}

	// Answers commands until the client quits.
	void serve()
	{
		uint64_t last_seq = 0;
		unsigned spins = 0;
		const size_t cmd_off = ctrl_off() + kCtrlCmdIn;
		for (;;) {
			progress();
			const uint64_t seq = load_u64(cmd_off + offsetof(Command, seq));
			if (seq != last_seq) {
				last_seq = seq;
				Command cmd;
				memcpy(&cmd, base_ + cmd_off, sizeof cmd);
				if (cmd.kind == kCmdQuit) {
					ack(seq);
					return;
				}
				if (cmd.kind != kCmdLat || cmd.size == 0 || cmd.size > data_size_)
					fail(kExitError, "server: malformed command (kind %" PRIu64 ", size %" PRIu64 ")",
					     cmd.kind, cmd.size);
				store_u8(rx_off() + cmd.size - 1, 0);
				// Counted before the ack: the client's first write may
				// arrive, and be counted, while the ack is waited for.
				const uint64_t seen = remote_data_count_;
				ack(seq);
				pong(cmd.size, cmd.count, seen);
				continue;
			}
			if ((++spins & 4095) == 0) {
				check_connection();
				if (g_abort.load(std::memory_order_relaxed))
					stop_quietly();
			}
		}
	}

	// The client shuts down after our last answer; closing first could make
	// it miss that answer.
	void finish()
	{
		uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
		const auto start = Clock::now();
		while (seconds_since(start) < 2.0) {
			uint32_t event = 0;
			ssize_t rc = fi_eq_read(eq_.get(), &event, buf, sizeof buf, 0);
			if (rc == -FI_EAGAIN) {
				usleep(1000);
				continue;
			}
			if (rc < 0 || event == FI_SHUTDOWN)
				return;
		}
	}

private:
	void reject()
	{
		int rc = fi_reject(pep_.get(), conn_info_->handle, nullptr, 0);
		if (rc)
			fprintf(stderr, "vrma_bench: fi_reject: %s (%d)\n", fi_strerror(-rc), rc);
	}

	void ack(uint64_t seq)
	{
		memcpy(base_ + ctrl_off() + kCtrlAckOut, &seq, sizeof seq);
		rma_ctrl(true, ctrl_off() + kCtrlAckOut, ctrl_off() + kCtrlAckIn, sizeof seq,
			 "the answer to the client");
	}

	// `seen`: remote CQ data entries counted before the command was acked.
	void pong(size_t size, uint64_t count, uint64_t seen)
	{
		const size_t last = rx_off() + size - 1;
		for (uint64_t i = 0; i < count; ++i) {
			const uint8_t value = static_cast<uint8_t>(i % 255 + 1);
			if (op_ == Op::writedata)
				wait_remote_data(seen, value, "the client's write (remote CQ data)");
			else
				wait_byte(last, value, "the client's write");
			base_[tx_off() + size - 1] = value;
			post_data(op_, size, 0, value, op_completes(op_) ? acquire_tx() : nullptr);
		}
	}
};

// ---------------------------------------------------------------- client

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

double percentile(const std::vector<double> &sorted, double p)
{
	size_t rank = static_cast<size_t>(p * static_cast<double>(sorted.size()) + 0.999999);
	rank = std::clamp<size_t>(rank, 1, sorted.size());
	return sorted[rank - 1];
}

class Client : public Side {
public:
	explicit Client(const Options &opt)
		: Side(opt, true), progress_line_(opt.progress || isatty(STDERR_FILENO))
	{
	}

	void connect(const std::string &host, const std::string &port, size_t max_size)
	{
		info_ = get_info(opt_, host.c_str(), port.c_str(), 0);
		open_fabric(info_.get());
		int rc = fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr);
		if (rc)
			fail_call("fi_domain", rc);
		set_operation(opt_.op, opt_.mode, opt_.flags);
		data_size_ = (max_size + 63) / 64 * 64;
		window_ = std::max<size_t>(1, std::min<size_t>(opt_.window, info_->tx_attr->size));
		if (window_ < opt_.window)
			fprintf(stderr, "vrma_bench: window %zu clamped to the transmit queue size %zu\n",
				opt_.window, window_);
		setup_endpoint(info_.get(), window_ + 16, 0xc1c1);
		check_cm_data_size(&ep_.get()->fid);
		const CmData mine = my_cm_data();
		rc = fi_connect(ep_.get(), info_->dest_addr, &mine, sizeof mine);
		if (rc)
			fail_call("fi_connect", rc);
		uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
		ssize_t len = wait_eq(FI_CONNECTED, &ep_.get()->fid, buf, sizeof buf,
				      "the connection to the server", opt_.timeout);
		const std::optional<CmData> peer = parse_cm_data(buf, len);
		if (!peer)
			fail(kExitError, "client: the server's answer carries no vrma_bench %u connection data",
			     kCmVersion);
		if (peer->data_size < data_size_)
			fail(kExitError, "client: the server offers %" PRIu64 " bytes, %zu needed",
			     peer->data_size, data_size_);
		peer_base_ = peer->base;
		peer_key_ = peer->key;
	}

	RunInfo run_info() const
	{
		RunInfo ri;
		ri.provider = info_->fabric_attr->prov_name ? info_->fabric_attr->prov_name : "?";
		ri.fabric = info_->fabric_attr->name ? info_->fabric_attr->name : "?";
		ri.domain = info_->domain_attr->name ? info_->domain_attr->name : "?";
		ri.op = op_;
		ri.mode = mode_;
		ri.flags = flags_;
		ri.window = window_;
		ri.sample_clock = sample_clock_.source();
		if (op_ == Op::inject_write && mode_ != Mode::lat)
			ri.inject_flush = cntr_ ? "counter" : "read";
		return ri;
	}

	Row measure(size_t size, size_t index)
	{
		Row row;
		row.size = size;
		const bool injects = op_ == Op::inject_write || (flags_ & kFlagInject);
		if (injects && size > inject_size_) {
			row.skipped = true;
			row.note = "larger than inject_size (" + std::to_string(inject_size_) + ")";
			return row;
		}
		if (size > max_msg_size_) {
			row.skipped = true;
			row.note = "larger than max_msg_size (" + std::to_string(max_msg_size_) + ")";
			return row;
		}
		const uint8_t salt = static_cast<uint8_t>(0x11 + 0x3b * index);
		for (size_t i = 0; i < size; ++i)
			base_[tx_off() + i] = pattern_byte(i, salt);

		uint64_t iterations = opt_.iterations;
		if (!iterations)
			iterations = calibrate(size);
		const uint64_t warmup = opt_.warmup >= 0 ? static_cast<uint64_t>(opt_.warmup)
							 : std::max<uint64_t>(2, iterations / 10);
		if (warmup)
			run(size, warmup, nullptr, false);
		const size_t check = std::min<size_t>(8, size);
		if (op_ == Op::read) {
			memset(base_ + rx_off(), 0, check);
			memset(base_ + rx_off() + size - check, 0, check);
		}
		std::vector<double> samples;
		const uint64_t posts_before = data_posts_;
		const uint64_t dropped_before = dropped_samples_;
		const double elapsed = run(size, iterations, &samples, true);
		row.posts = data_posts_ - posts_before;
		row.dropped_samples = dropped_samples_ - dropped_before;
		if (mode_ != Mode::lat)
			verify(size, salt);

		row.iterations = iterations;
		const double n = static_cast<double>(iterations);
		if (mode_ == Mode::lat) {
			const double per_op = elapsed / n / (op_ == Op::read ? 1 : 2);
			row.mbps = static_cast<double>(size) / per_op / 1e6;
			row.mops = 1 / per_op / 1e6;
		} else {
			row.mbps = static_cast<double>(size) * n / elapsed / 1e6;
			row.mops = n / elapsed / 1e6;
		}
		if (!samples.empty()) {
			std::sort(samples.begin(), samples.end());
			row.p50 = percentile(samples, 0.50);
			row.p99 = percentile(samples, 0.99);
		}
		return row;
	}

	void quit()
	{
		send_command(kCmdQuit, 0, 0);
		int rc = fi_shutdown(ep_.get(), 0);
		if (rc)
			fprintf(stderr, "vrma_bench: fi_shutdown: %s (%d)\n", fi_strerror(-rc), rc);
	}

private:
	size_t window_ = 1;
	uint64_t cmd_seq_ = 0;
	ProgressLine progress_line_;
	SampleClock sample_clock_;
	uint64_t dropped_samples_ = 0; // spanned two processors (see SampleClock)

	// One sample: the microseconds from a to b, divided by `per`.
	void add_sample(std::vector<double> &samples, Stamp a, Stamp b, double per)
	{
		if (const auto us = sample_clock_.micros(a, b))
			samples.push_back(*us / per);
		else
			++dropped_samples_;
	}

	// Doubles a run's length until it takes a twentieth of --duration, then
	// scales to --duration.
	uint64_t calibrate(size_t size)
	{
		const double target = opt_.duration / 20;
		for (uint64_t n = 2;; n *= 2) {
			const double t = run(size, n, nullptr, false);
			if (t >= target || n >= (uint64_t{1} << 30)) {
				const double per_op = std::max(t, 1e-9) / static_cast<double>(n);
				return std::max<uint64_t>(10, static_cast<uint64_t>(opt_.duration / per_op));
			}
		}
	}

	// Runs n operations; returns the seconds they took. samples gets one
	// value in microseconds per iteration (lat) or per window (bw, rate).
	double run(size_t size, uint64_t n, std::vector<double> *samples, bool show)
	{
		if (show)
			progress_line_.start(size, n);
		double elapsed;
		if (mode_ == Mode::lat)
			elapsed = lat_run(size, n, samples, show);
		else if (op_ == Op::inject_write)
			elapsed = inject_run(size, n, samples, show);
		else
			elapsed = bw_run(size, n, samples, show);
		if (show)
			progress_line_.clear();
		return elapsed;
	}

	double bw_run(size_t size, uint64_t n, std::vector<double> *samples, bool show)
	{
		Watchdog wd(opt_.timeout, "completions");
		const uint64_t base = tx_done_;
		uint64_t posted = 0;
		uint64_t next_mark = window_;
		const auto start = Clock::now();
		Stamp mark = sample_clock_.now();
		while (tx_done_ - base < n) {
			const uint64_t outstanding = posted - (tx_done_ - base);
			const uint64_t burst = std::min<uint64_t>(window_ - outstanding, n - posted);
			for (uint64_t j = 0; j < burst; ++j) {
				const uint64_t more = ((flags_ & kFlagMore) && j + 1 < burst) ? FI_MORE : 0;
				post_data(op_, size, more, posted & 0xffffffff, acquire_tx());
				++posted;
			}
			if (progress()) {
				wd.progressed();
				while (tx_done_ - base >= next_mark) {
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
				progress_line_.update(tx_done_ - base);
		}
		return seconds_since(start);
	}

	// Injects have no completions: each window is flushed with the write
	// counter or, without counters, with a read that RC orders after them.
	// Two windows are in flight, as an application keeps its queue busy:
	// the next window is posted before waiting for the one before it.
	double inject_run(size_t size, uint64_t n, std::vector<double> *samples, bool show)
	{
		const uint64_t cntr_base = cntr_ ? fi_cntr_read(cntr_.get()) : 0;
		const uint64_t err_base = cntr_ ? fi_cntr_readerr(cntr_.get()) : 0;
		uint64_t posted = 0;
		uint64_t last_burst = 0;
		void *flush_ctx = nullptr; // the read after the previous window
		const auto start = Clock::now();
		Stamp mark = sample_clock_.now();
		// Waits until the first `upto` injects have completed.
		auto wait_flushed = [&](uint64_t upto, void *ctx) {
			if (cntr_) {
				Watchdog wd(opt_.timeout, "the write counter");
				while (fi_cntr_read(cntr_.get()) < cntr_base + upto) {
					if (fi_cntr_readerr(cntr_.get()) > err_base) {
						progress();
						fail(kExitError, "client: %" PRIu64 " injected write(s) failed (write counter errors)",
						     fi_cntr_readerr(cntr_.get()) - err_base);
					}
					progress();
					wd.poll();
				}
			} else if (ctx) {
				wait_slot(ctx, "the read after a window of injects");
			}
			const Stamp now = sample_clock_.now();
			if (samples && last_burst == window_)
				add_sample(*samples, mark, now, static_cast<double>(window_));
			mark = now;
		};
		while (posted < n) {
			const uint64_t burst = std::min<uint64_t>(window_, n - posted);
			for (uint64_t j = 0; j < burst; ++j) {
				const uint64_t more = ((flags_ & kFlagMore) && j + 1 < burst) ? FI_MORE : 0;
				post_data(op_, size, more, 0, nullptr);
			}
			void *ctx = cntr_ ? nullptr
					  : post_ctrl(false, ctrl_off() + kCtrlCheck, rx_off(), 8,
						      "the read after a window of injects");
			if (posted) // the windows before this one
				wait_flushed(posted, flush_ctx);
			posted += burst;
			flush_ctx = ctx;
			last_burst = burst;
			if (show)
				progress_line_.update(posted);
		}
		if (posted)
			wait_flushed(posted, flush_ctx);
		return seconds_since(start);
	}

	double lat_run(size_t size, uint64_t n, std::vector<double> *samples, bool show)
	{
		if (op_ == Op::read) {
			const auto start = Clock::now();
			for (uint64_t i = 0; i < n; ++i) {
				const Stamp t0 = sample_clock_.now();
				void *ctx = acquire_tx();
				post_data(op_, size, 0, 0, ctx);
				wait_slot(ctx, "a read's completion");
				if (samples)
					add_sample(*samples, t0, sample_clock_.now(), 1);
				if (show)
					progress_line_.update(i + 1);
			}
			return seconds_since(start);
		}
		const size_t last = rx_off() + size - 1;
		store_u8(last, 0);
		send_command(kCmdLat, size, n);
		uint64_t seen = remote_data_count_;
		const auto start = Clock::now();
		for (uint64_t i = 0; i < n; ++i) {
			const uint8_t value = static_cast<uint8_t>(i % 255 + 1);
			base_[tx_off() + size - 1] = value;
			const Stamp t0 = sample_clock_.now();
			post_data(op_, size, 0, value, op_completes(op_) ? acquire_tx() : nullptr);
			if (op_ == Op::writedata)
				wait_remote_data(seen, value, "the server's write (remote CQ data)");
			else
				wait_byte(last, value, "the server's write");
			if (samples)
				add_sample(*samples, t0, sample_clock_.now(), 2);
			if (show)
				progress_line_.update(i + 1);
		}
		return seconds_since(start);
	}

	void send_command(uint64_t kind, size_t size, uint64_t count)
	{
		const Command cmd{kind, size, count, ++cmd_seq_};
		memcpy(base_ + ctrl_off() + kCtrlCmdOut, &cmd, sizeof cmd);
		rma_ctrl(true, ctrl_off() + kCtrlCmdOut, ctrl_off() + kCtrlCmdIn, sizeof cmd,
			 "the command to the server");
		Watchdog wd(opt_.timeout, "the server's answer");
		while (load_u64(ctrl_off() + kCtrlAckIn) != cmd.seq) {
			progress();
			wd.poll();
		}
	}

	static std::string hex(const uint8_t *p, size_t len)
	{
		std::string out;
		char byte[4];
		for (size_t i = 0; i < len; ++i) {
			snprintf(byte, sizeof byte, "%02x", p[i]);
			out += byte;
		}
		return out;
	}

	// Checks the first and last bytes that the last operation of a size
	// moved: read back from the target (writes) or against the server's
	// pattern (reads).
	void verify(size_t size, uint8_t salt)
	{
		const size_t k = std::min<size_t>(8, size);
		const size_t offsets[2] = {0, size - k};
		uint8_t expected[2][8];
		const uint8_t *got[2];
		for (int part = 0; part < 2; ++part) {
			const size_t off = offsets[part];
			for (size_t i = 0; i < k; ++i)
				expected[part][i] = pattern_byte(off + i, op_ == Op::read ? kServerSalt : salt);
			if (op_ == Op::read) {
				got[part] = base_ + rx_off() + off;
			} else {
				const size_t local = ctrl_off() + kCtrlCheck + 8 * static_cast<size_t>(part);
				rma_ctrl(false, local, rx_off() + off, k, "the read-back of the written data");
				got[part] = base_ + local;
			}
		}
		for (int part = 0; part < 2; ++part)
			if (memcmp(got[part], expected[part], k) != 0)
				fail(kExitError,
				     "data check failed after %s of %zu bytes: bytes [%zu, %zu) at the %s are %s, expected %s",
				     op_name(op_), size, offsets[part], offsets[part] + k,
				     op_ == Op::read ? "client" : "server", hex(got[part], k).c_str(),
				     hex(expected[part], k).c_str());
	}
};

// ---------------------------------------------------------------- output

std::string fmt_opt(const std::optional<double> &v)
{
	if (!v)
		return "-";
	char buf[32];
	snprintf(buf, sizeof buf, "%.2f", *v);
	return buf;
}

void print_header(const RunInfo &ri)
{
	printf("# vrma_bench: provider %s, fabric %s, domain %s, op %s, mode %s, flags %s",
	       ri.provider.c_str(), ri.fabric.c_str(), ri.domain.c_str(), op_name(ri.op),
	       mode_name(ri.mode), flags_name(ri.flags).c_str());
	if (ri.mode != Mode::lat)
		printf(", window %zu", ri.window);
	if (!ri.inject_flush.empty())
		printf(", inject flush: %s", ri.inject_flush.c_str());
	printf("\n");
	if (ri.mode == Mode::lat)
		printf("# MB = 10^6 bytes; lat: %s\n",
		       ri.op == Op::read ? "one read's completion time"
					 : "one-way latency = round trip / 2, per iteration");
	else
		printf("# MB = 10^6 bytes; lat: time per operation within a window (window time / %zu)\n",
		       ri.window);
	printf("# %8s  %10s  %10s  %10s  %10s\n", "size", "MB/s", "Mops/s", "lat_p50_us", "lat_p99_us");
	fflush(stdout);
}

void print_row(const Row &row)
{
	if (row.skipped)
		printf("# %8zu  skipped: %s\n", row.size, row.note.c_str());
	else
		printf("%10zu  %10.2f  %10.4f  %10s  %10s\n", row.size, row.mbps, row.mops,
		       fmt_opt(row.p50).c_str(), fmt_opt(row.p99).c_str());
	fflush(stdout);
}

std::string json_string(const std::string &s)
{
	std::string out = "\"";
	for (char c : s) {
		if (c == '"' || c == '\\') {
			out += '\\';
			out += c;
		} else if (static_cast<unsigned char>(c) < 0x20) {
			char buf[8];
			snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
			out += buf;
		} else {
			out += c;
		}
	}
	return out + "\"";
}

std::string json_number(const std::optional<double> &v)
{
	if (!v)
		return "null";
	char buf[32];
	snprintf(buf, sizeof buf, "%.9g", *v);
	return buf;
}

void write_json(const std::string &path, const RunInfo &ri, const std::vector<Row> &rows)
{
	FILE *f = fopen(path.c_str(), "w");
	if (!f)
		fail(kExitError, "cannot write %s: %s", path.c_str(), strerror(errno));
	fprintf(f, "{\n  \"provider\": %s,\n  \"fabric\": %s,\n  \"domain\": %s,\n",
		json_string(ri.provider).c_str(), json_string(ri.fabric).c_str(),
		json_string(ri.domain).c_str());
	fprintf(f, "  \"op\": %s,\n  \"mode\": %s,\n  \"flags\": %s,\n  \"window\": %zu,\n",
		json_string(op_name(ri.op)).c_str(), json_string(mode_name(ri.mode)).c_str(),
		json_string(ri.flags ? flags_name(ri.flags) : "").c_str(), ri.window);
	fprintf(f, "  \"sample_clock\": %s,\n", json_string(ri.sample_clock).c_str());
	fprintf(f, "  \"results\": [");
	bool first = true;
	for (const Row &row : rows) {
		if (row.skipped)
			continue;
		fprintf(f, "%s\n    {\"size\": %zu, \"mbps\": %s, \"mops\": %s, \"p50_us\": %s, \"p99_us\": %s, \"iterations\": %" PRIu64 ", \"posts\": %" PRIu64 ", \"dropped_samples\": %" PRIu64 "}",
			first ? "" : ",", row.size, json_number(row.mbps).c_str(),
			json_number(row.mops).c_str(), json_number(row.p50).c_str(),
			json_number(row.p99).c_str(), row.iterations, row.posts, row.dropped_samples);
		first = false;
	}
	fprintf(f, "\n  ]\n}\n");
	if (fclose(f) != 0)
		fail(kExitError, "cannot write %s: %s", path.c_str(), strerror(errno));
}

// ---------------------------------------------------------------- roles

int run_server(const Options &opt, std::promise<ListenAddress> *ready)
{
	bool announced = false;
	auto announce = [&](const ListenAddress &addr) {
		if (ready && !announced) {
			ready->set_value(addr);
			announced = true;
		}
	};
	int status = 0;
	try {
		Server server(opt);
		const ListenAddress addr = server.listen();
		if (ready)
			announce(addr);
		else
			fprintf(stderr, "vrma_bench: server listening on %s port %s (provider %s, domain %s)\n",
				addr.host.empty() ? "*" : addr.host.c_str(), addr.port.c_str(),
				server.provider(), server.domain());
		server.accept();
		server.serve();
		server.finish();
	} catch (const BenchError &e) {
		status = e.status;
	} catch (const std::exception &e) {
		fprintf(stderr, "vrma_bench: server: %s\n", e.what());
		g_abort.store(true);
		status = kExitError;
	} catch (...) {
		fprintf(stderr, "vrma_bench: server: unexpected error\n");
		g_abort.store(true);
		status = kExitError;
	}
	announce(ListenAddress{});
	return status;
}

int run_client(const Options &opt, const std::string &host, const std::string &port)
{
	try {
		std::vector<size_t> sizes = opt.sizes;
		if (sizes.empty()) {
			if (opt.sizes_all || opt.mode != Mode::rate)
				for (size_t s = 1; s <= opt.max_size; s *= 2)
					sizes.push_back(s);
			else
				sizes.push_back(8);
		}
		const size_t max_size = *std::max_element(sizes.begin(), sizes.end());
		Client client(opt);
		client.connect(host, port, max_size);
		const RunInfo ri = client.run_info();
		print_header(ri);
		std::vector<Row> rows;
		for (size_t i = 0; i < sizes.size(); ++i) {
			rows.push_back(client.measure(sizes[i], i));
			print_row(rows.back());
		}
		client.quit();
		if (!opt.json_out.empty())
			write_json(opt.json_out, ri, rows);
		return 0;
	} catch (const BenchError &e) {
		return e.status;
	} catch (const std::exception &e) {
		fprintf(stderr, "vrma_bench: client: %s\n", e.what());
		g_abort.store(true);
		return kExitError;
	} catch (...) {
		fprintf(stderr, "vrma_bench: client: unexpected error\n");
		g_abort.store(true);
		return kExitError;
	}
}

int run_loopback(const Options &opt)
{
	std::promise<ListenAddress> ready;
	std::future<ListenAddress> listening = ready.get_future();
	int server_status = 0;
	std::thread server([&] { server_status = run_server(opt, &ready); });
	const ListenAddress addr = listening.get();
	int client_status = addr.ok ? run_client(opt, addr.host, addr.port) : 0;
	server.join();
	if (!addr.ok)
		return server_status;
	return client_status ? client_status : server_status;
}

// ---------------------------------------------------------------- plot mode

struct JsonValue {
	enum class Type { null, boolean, number, string, array, object } type = Type::null;
	bool boolean = false;
	double number = 0;
	std::string string;
	std::vector<JsonValue> items;   // array elements or object values
	std::vector<std::string> keys; // object keys, parallel to items

	const JsonValue *get(const char *key) const
	{
		for (size_t i = 0; i < keys.size(); ++i)
			if (keys[i] == key)
				return &items[i];
		return nullptr;
	}
};

// Enough JSON for the files --json writes (and any other well-formed JSON).
class JsonParser {
public:
	explicit JsonParser(const std::string &text) : s_(text) {}
	bool parse(JsonValue &out, std::string &error)
	{
		if (!value(out, 0) || (skip_ws(), pos_ != s_.size())) {
			error = "invalid JSON near byte " + std::to_string(pos_);
			return false;
		}
		return true;
	}

private:
	const std::string &s_;
	size_t pos_ = 0;

	void skip_ws()
	{
		while (pos_ < s_.size() && strchr(" \t\r\n", s_[pos_]))
			++pos_;
	}
	// After an item of an object or array: ',' means more follow, `close`
	// ends it; anything else is malformed (false).
	bool after_item(char close, bool &more)
	{
		skip_ws();
		if (pos_ < s_.size() && (s_[pos_] == ',' || s_[pos_] == close)) {
			more = s_[pos_++] == ',';
			return true;
		}
		return false;
	}
	bool literal(const char *word)
	{
		const size_t len = strlen(word);
		if (s_.compare(pos_, len, word) != 0)
			return false;
		pos_ += len;
		return true;
	}
	bool string(std::string &out)
	{
		if (pos_ >= s_.size() || s_[pos_] != '"')
			return false;
		++pos_;
		while (pos_ < s_.size() && s_[pos_] != '"') {
			char c = s_[pos_++];
			if (c != '\\') {
				out += c;
				continue;
			}
			if (pos_ >= s_.size())
				return false;
			c = s_[pos_++];
			switch (c) {
			case 'n': out += '\n'; break;
			case 't': out += '\t'; break;
			case 'r': out += '\r'; break;
			case 'b': out += '\b'; break;
			case 'f': out += '\f'; break;
			case 'u': {
				if (pos_ + 4 > s_.size())
					return false;
				const unsigned long code = strtoul(s_.substr(pos_, 4).c_str(), nullptr, 16);
				pos_ += 4;
				out += code < 0x80 ? static_cast<char>(code) : '?';
				break;
			}
			default: out += c; break;
			}
		}
		if (pos_ >= s_.size())
			return false;
		++pos_;
		return true;
	}
	bool value(JsonValue &out, int depth)
	{
		if (depth > 64)
			return false;
		skip_ws();
		if (pos_ >= s_.size())
			return false;
		const char c = s_[pos_];
		if (c == '{') {
			out.type = JsonValue::Type::object;
			++pos_;
			skip_ws();
			if (pos_ < s_.size() && s_[pos_] == '}') {
				++pos_;
				return true;
			}
			for (;;) {
				skip_ws();
				std::string key;
				if (!string(key))
					return false;
				skip_ws();
				if (pos_ >= s_.size() || s_[pos_] != ':')
					return false;
				++pos_;
				JsonValue item;
				if (!value(item, depth + 1))
					return false;
				out.keys.push_back(std::move(key));
				out.items.push_back(std::move(item));
				bool more;
				if (!after_item('}', more))
					return false;
				if (!more)
					return true;
			}
		}
		if (c == '[') {
			out.type = JsonValue::Type::array;
			++pos_;
			skip_ws();
			if (pos_ < s_.size() && s_[pos_] == ']') {
				++pos_;
				return true;
			}
			for (;;) {
				JsonValue item;
				if (!value(item, depth + 1))
					return false;
				out.items.push_back(std::move(item));
				bool more;
				if (!after_item(']', more))
					return false;
				if (!more)
					return true;
			}
		}
		if (c == '"') {
			out.type = JsonValue::Type::string;
			return string(out.string);
		}
		if (literal("null")) {
			out.type = JsonValue::Type::null;
			return true;
		}
		if (literal("true") || literal("false")) {
			out.type = JsonValue::Type::boolean;
			out.boolean = s_[pos_ - 1] == 'e' && s_[pos_ - 2] == 'u';
			return true;
		}
		char *end = nullptr;
		out.number = strtod(s_.c_str() + pos_, &end);
		if (end == s_.c_str() + pos_)
			return false;
		out.type = JsonValue::Type::number;
		pos_ = static_cast<size_t>(end - s_.c_str());
		return true;
	}
};

struct Series {
	std::string label;
	std::vector<std::array<std::optional<double>, 3>> points; // size, MB/s, p50
};

std::optional<double> json_opt_number(const JsonValue *v)
{
	if (v && v->type == JsonValue::Type::number)
		return v->number;
	return std::nullopt;
}

std::string json_opt_string(const JsonValue &root, const char *key)
{
	const JsonValue *v = root.get(key);
	return v && v->type == JsonValue::Type::string ? v->string : "";
}

Series read_series(const std::string &path)
{
	FILE *f = fopen(path.c_str(), "r");
	if (!f)
		fail(kExitError, "cannot read %s: %s", path.c_str(), strerror(errno));
	std::string text;
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		text.append(buf, n);
	fclose(f);
	JsonValue root;
	std::string error;
	if (!JsonParser(text).parse(root, error))
		fail(kExitError, "%s: %s", path.c_str(), error.c_str());
	const JsonValue *results = root.get("results");
	if (root.type != JsonValue::Type::object || !results || results->type != JsonValue::Type::array)
		fail(kExitError, "%s: not a vrma_bench result (no \"results\" array)", path.c_str());
	Series series;
	series.label = json_opt_string(root, "provider") + " " + json_opt_string(root, "op") + "/" +
		       json_opt_string(root, "mode");
	const std::string flags = json_opt_string(root, "flags");
	if (!flags.empty())
		series.label += " " + flags;
	for (const JsonValue &r : results->items) {
		const auto size = json_opt_number(r.get("size"));
		if (!size || *size <= 0)
			continue;
		series.points.push_back({size, json_opt_number(r.get("mbps")), json_opt_number(r.get("p50_us"))});
	}
	return series;
}

std::string find_in_path(const char *program)
{
	const char *path = getenv("PATH");
	std::string dirs = path ? path : "/usr/bin:/bin";
	size_t start = 0;
	while (start <= dirs.size()) {
		size_t end = dirs.find(':', start);
		if (end == std::string::npos)
			end = dirs.size();
		std::string candidate = dirs.substr(start, end - start);
		candidate = (candidate.empty() ? "." : candidate) + "/" + program;
		if (access(candidate.c_str(), X_OK) == 0)
			return candidate;
		start = end + 1;
	}
	return "";
}

std::string gnuplot_quote(const std::string &s)
{
	std::string out = "'";
	for (char c : s)
		out += c == '\'' ? std::string("''") : std::string(1, c);
	return out + "'";
}

std::string shell_quote(const std::string &s)
{
	std::string out = "'";
	for (char c : s)
		out += c == '\'' ? std::string("'\\''") : std::string(1, c);
	return out + "'";
}

int plot(const Options &opt)
{
	try {
		const std::string gnuplot = find_in_path("gnuplot");
		if (gnuplot.empty())
			fail(kExitUnsupported, "--plot needs gnuplot, which is not in PATH (Debian: apt-get install -y gnuplot-nox)");
		std::vector<Series> all;
		for (const std::string &path : opt.json_in)
			all.push_back(read_series(path));

		const char *tmp = getenv("TMPDIR");
		std::string dir_template = std::string(tmp && *tmp ? tmp : "/tmp") + "/vrma_bench_plot.XXXXXX";
		std::vector<char> dir_buf(dir_template.begin(), dir_template.end());
		dir_buf.push_back('\0');
		if (!mkdtemp(dir_buf.data()))
			fail(kExitError, "mkdtemp(%s): %s", dir_template.c_str(), strerror(errno));
		const std::string dir = dir_buf.data();
		std::vector<std::string> files;
		auto cleanup = [&] {
			for (const std::string &file : files)
				unlink(file.c_str());
			rmdir(dir.c_str());
		};

		std::string bw_plots, lat_plots;
		for (size_t i = 0; i < all.size(); ++i) {
			const std::string data = dir + "/series" + std::to_string(i) + ".dat";
			files.push_back(data);
			FILE *f = fopen(data.c_str(), "w");
			if (!f) {
				cleanup();
				fail(kExitError, "cannot write %s: %s", data.c_str(), strerror(errno));
			}
			bool has_bw = false, has_lat = false;
			for (const auto &p : all[i].points) {
				fprintf(f, "%.0f %s %s\n", *p[0], p[1] ? json_number(p[1]).c_str() : "?",
					p[2] && *p[2] > 0 ? json_number(p[2]).c_str() : "?");
				has_bw |= p[1].has_value();
				has_lat |= p[2].has_value() && *p[2] > 0;
			}
			fclose(f);
			const std::string title = gnuplot_quote(all[i].label);
			if (has_bw)
				bw_plots += (bw_plots.empty() ? "" : ", ") + gnuplot_quote(data) +
					    " using 1:2 with linespoints title " + title;
			if (has_lat)
				lat_plots += (lat_plots.empty() ? "" : ", ") + gnuplot_quote(data) +
					     " using 1:3 with linespoints title " + title;
		}
		if (bw_plots.empty() && lat_plots.empty()) {
			cleanup();
			fail(kExitError, "no bandwidth or latency values in the result files");
		}
		// One panel per kind of value present, side by side when both are.
		const bool both = !bw_plots.empty() && !lat_plots.empty();
		std::string gp = "set terminal pngcairo noenhanced size " +
				 std::string(both ? "1400,520" : "760,520") + "\n" +
				 "set output " + gnuplot_quote(opt.plot_out) + "\n" +
				 "set datafile missing '?'\n";
		if (both)
			gp += "set multiplot layout 1,2 title 'vrma_bench'\n";
		gp += "set logscale x 2\n"
		      "set format x '%.0b%BB'\n"
		      "set xlabel 'size (bytes)'\n"
		      "set grid\n"
		      "set key top left\n";
		if (!bw_plots.empty())
			gp += "set title 'bandwidth'\nset ylabel 'MB/s'\nplot " + bw_plots + "\n";
		if (!lat_plots.empty())
			gp += "set title 'latency (p50)'\nset logscale y 10\nset ylabel 'us'\nplot " +
			      lat_plots + "\n";
		if (both)
			gp += "unset multiplot\n";

		const std::string script = dir + "/plot.gp";
		files.push_back(script);
		FILE *f = fopen(script.c_str(), "w");
		if (!f) {
			cleanup();
			fail(kExitError, "cannot write %s: %s", script.c_str(), strerror(errno));
		}
		fputs(gp.c_str(), f);
		fclose(f);
		const std::string command = shell_quote(gnuplot) + " " + shell_quote(script);
		const int status = system(command.c_str());
		cleanup();
		if (status == -1)
			fail(kExitError, "cannot run gnuplot: %s", strerror(errno));
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail(kExitError, "gnuplot failed (status %d) drawing %s", status, opt.plot_out.c_str());
		fprintf(stderr, "vrma_bench: wrote %s\n", opt.plot_out.c_str());
		return 0;
	} catch (const BenchError &e) {
		return e.status;
	}
}

// ---------------------------------------------------------------- command line

const char kUsage[] =
	"usage: vrma_bench [-p PROVIDER] [-d DOMAIN] [--loopback | --server | -s ADDR] [options]\n"
	"       vrma_bench --plot FILE.png --json-in A.json [--json-in B.json ...]\n"
	"\n"
	"roles:\n"
	"  --loopback            server and client in one process over the device's own address (default)\n"
	"  --server              serve one client on port -P, then exit\n"
	"  -s ADDR               client of the server at ADDR\n"
	"fabric:\n"
	"  -p NAME               provider (vrma, verbs, tcp, ...)\n"
	"  -d NAME               domain\n"
	"  -P PORT               server port (default 47600; loopback: a free port unless given)\n"
	"  --addr ADDR           address the server (or loopback) listens on (default: the provider's)\n"
	"benchmark (client and loopback):\n"
	"  -o OP                 write | read | writedata | inject_write (default write)\n"
	"  -m MODE               bw | lat | rate (default bw)\n"
	"  -w N                  operations outstanding in bw and rate modes (default 64)\n"
	"  -S all|N[,N...]       sizes in bytes (suffixes k, m: KiB, MiB); all: powers of two up to\n"
	"                        --max-size (default: all for bw and lat, 8 for rate)\n"
	"  --max-size N          largest size of -S all (default 4m)\n"
	"  -I N                  iterations per size (default: calibrated to take --duration)\n"
	"  --warmup N            warm-up iterations (default 10% of the iterations, at least 2)\n"
	"  --duration SEC        time per size when -I is not given (default 1)\n"
	"  --timeout SEC         give up after SEC without progress (default 30)\n"
	"operation flags (start the server with the same --delivery-complete, --commit-complete, --fence):\n"
	"  --delivery-complete   FI_DELIVERY_COMPLETE in tx op_flags and on every operation\n"
	"  --commit-complete     FI_COMMIT_COMPLETE likewise, caps FI_RMA_PMEM\n"
	"  --fence               FI_FENCE on every operation (caps FI_FENCE)\n"
	"  --more                FI_MORE on all but the last operation of each posting burst\n"
	"  --inject              FI_INJECT on every write (sizes up to inject_size)\n"
	"output:\n"
	"  --json FILE           also write the results as JSON\n"
	"  --progress            progress line on stderr even when it is not a terminal\n"
	"  --plot FILE.png       plot --json-in files with gnuplot (no benchmark run)\n"
	"  --json-in FILE        a result file to plot (repeatable)\n"
	"\n"
	"lat mode: the client writes SIZE bytes into the server's buffer, the server waits for the\n"
	"last byte (writedata: for the remote CQ data) and writes back; one-way latency = round\n"
	"trip / 2 (read: one read's completion time). bw and rate modes keep -w operations\n"
	"outstanding and check the data at the end of each size.\n"
	"exit status: 0 success, 1 error, 2 not supported by the provider (or no gnuplot)\n";

enum LongOption {
	kOptServer = 256,
	kOptLoopback,
	kOptAddr,
	kOptMaxSize,
	kOptWarmup,
	kOptDuration,
	kOptTimeout,
	kOptDelivery,
	kOptCommit,
	kOptFence,
	kOptMore,
	kOptInject,
	kOptJson,
	kOptPlot,
	kOptJsonIn,
	kOptProgress,
};

[[noreturn]] __attribute__((format(printf, 1, 2))) void usage_error(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "vrma_bench: %s\n(vrma_bench -h for help)\n", msg);
	throw BenchError{kExitError};
}

uint64_t parse_count(const char *text, const char *what)
{
	char *end = nullptr;
	errno = 0;
	const unsigned long long v = strtoull(text, &end, 10);
	if (errno || end == text || *end || text[0] == '-')
		usage_error("%s: not a number: '%s'", what, text);
	return v;
}

size_t parse_size(const std::string &text, const char *what)
{
	char *end = nullptr;
	errno = 0;
	unsigned long long v = strtoull(text.c_str(), &end, 10);
	if (errno || end == text.c_str() || text[0] == '-')
		usage_error("%s: not a size: '%s'", what, text.c_str());
	std::string suffix = end;
	if (suffix == "k" || suffix == "K")
		v <<= 10;
	else if (suffix == "m" || suffix == "M")
		v <<= 20;
	else if (suffix == "g" || suffix == "G")
		v <<= 30;
	else if (!suffix.empty())
		usage_error("%s: not a size: '%s'", what, text.c_str());
	if (v == 0 || v > kLargestSize)
		usage_error("%s: %s is out of range (1 .. 1g)", what, text.c_str());
	return static_cast<size_t>(v);
}

double parse_seconds(const char *text, const char *what)
{
	char *end = nullptr;
	const double v = strtod(text, &end);
	if (end == text || *end || !(v > 0))
		usage_error("%s: not a positive number of seconds: '%s'", what, text);
	return v;
}

// Returns the options, or throws BenchError after -h (status 0) or a usage
// error.
Options parse_args(int argc, char **argv)
{
	static const option long_options[] = {
		{"server", no_argument, nullptr, kOptServer},
		{"loopback", no_argument, nullptr, kOptLoopback},
		{"addr", required_argument, nullptr, kOptAddr},
		{"max-size", required_argument, nullptr, kOptMaxSize},
		{"warmup", required_argument, nullptr, kOptWarmup},
		{"duration", required_argument, nullptr, kOptDuration},
		{"timeout", required_argument, nullptr, kOptTimeout},
		{"delivery-complete", no_argument, nullptr, kOptDelivery},
		{"commit-complete", no_argument, nullptr, kOptCommit},
		{"fence", no_argument, nullptr, kOptFence},
		{"more", no_argument, nullptr, kOptMore},
		{"inject", no_argument, nullptr, kOptInject},
		{"json", required_argument, nullptr, kOptJson},
		{"plot", required_argument, nullptr, kOptPlot},
		{"json-in", required_argument, nullptr, kOptJsonIn},
		{"progress", no_argument, nullptr, kOptProgress},
		{"help", no_argument, nullptr, 'h'},
		{nullptr, 0, nullptr, 0},
	};
	Options opt;
	bool server = false, loopback = false;
	std::string sizes_text;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":s:p:d:P:o:m:w:S:I:h", long_options, nullptr)) != -1) {
		switch (c) {
		case 's': opt.server_addr = optarg; break;
		case 'p': opt.provider = optarg; break;
		case 'd': opt.domain = optarg; break;
		case 'P': {
			const uint64_t port = parse_count(optarg, "-P");
			if (port == 0 || port > 65535)
				usage_error("-P: port %s is out of range", optarg);
			opt.port = static_cast<int>(port);
			opt.port_given = true;
			break;
		}
		case 'o': {
			const std::optional<Op> op = parse_name(optarg, kAllOps, op_name);
			if (!op)
				usage_error("-o: unknown operation '%s' (write, read, writedata, inject_write)", optarg);
			opt.op = *op;
			break;
		}
		case 'm': {
			const std::optional<Mode> mode = parse_name(optarg, kAllModes, mode_name);
			if (!mode)
				usage_error("-m: unknown mode '%s' (bw, lat, rate)", optarg);
			opt.mode = *mode;
			break;
		}
		case 'w':
			opt.window = parse_count(optarg, "-w");
			if (opt.window == 0 || opt.window > 65536)
				usage_error("-w: window %s is out of range (1 .. 65536)", optarg);
			break;
		case 'S': sizes_text = optarg; break;
		case 'I':
			opt.iterations = parse_count(optarg, "-I");
			if (opt.iterations == 0)
				usage_error("-I: at least one iteration");
			break;
		case 'h':
			fputs(kUsage, stdout);
			throw BenchError{0};
		case kOptServer: server = true; break;
		case kOptLoopback: loopback = true; break;
		case kOptAddr: opt.bind_addr = optarg; break;
		case kOptMaxSize: opt.max_size = parse_size(optarg, "--max-size"); break;
		case kOptWarmup: opt.warmup = static_cast<int64_t>(parse_count(optarg, "--warmup")); break;
		case kOptDuration: opt.duration = parse_seconds(optarg, "--duration"); break;
		case kOptTimeout: opt.timeout = parse_seconds(optarg, "--timeout"); break;
		case kOptDelivery: opt.flags |= kFlagDelivery; break;
		case kOptCommit: opt.flags |= kFlagCommit; break;
		case kOptFence: opt.flags |= kFlagFence; break;
		case kOptMore: opt.flags |= kFlagMore; break;
		case kOptInject: opt.flags |= kFlagInject; break;
		case kOptJson: opt.json_out = optarg; break;
		case kOptPlot: opt.plot_out = optarg; break;
		case kOptJsonIn: opt.json_in.push_back(optarg); break;
		case kOptProgress: opt.progress = true; break;
		case ':': usage_error("%s needs an argument", argv[optind - 1]);
		default: usage_error("unknown option %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (!opt.plot_out.empty()) {
		if (opt.json_in.empty())
			usage_error("--plot needs at least one --json-in FILE");
		return opt;
	}
	if (!opt.json_in.empty())
		usage_error("--json-in goes with --plot");
	if (int(server) + int(loopback) + int(!opt.server_addr.empty()) > 1)
		usage_error("give one of --server, --loopback and -s ADDR");
	opt.role = server ? Role::server : !opt.server_addr.empty() ? Role::client : Role::loopback;

	if (!sizes_text.empty()) {
		if (sizes_text == "all") {
			opt.sizes_all = true;
		} else {
			size_t start = 0;
			while (start <= sizes_text.size()) {
				size_t end = sizes_text.find(',', start);
				if (end == std::string::npos)
					end = sizes_text.size();
				opt.sizes.push_back(parse_size(sizes_text.substr(start, end - start), "-S"));
				start = end + 1;
			}
		}
	}
	if (opt.op == Op::read && (opt.flags & kFlagInject)) {
		fprintf(stderr, "vrma_bench: --inject applies to writes, not to -o read: not supported\n");
		throw BenchError{kExitUnsupported};
	}
	return opt;
}

} // namespace

int main(int argc, char **argv)
{
	try {
		const Options opt = parse_args(argc, argv);
		if (!opt.plot_out.empty())
			return plot(opt);
		switch (opt.role) {
		case Role::server:
			return run_server(opt, nullptr);
		case Role::client:
			return run_client(opt, opt.server_addr, std::to_string(opt.port));
		case Role::loopback:
			return run_loopback(opt);
		}
		return kExitError;
	} catch (const BenchError &e) {
		return e.status;
	} catch (const std::exception &e) {
		fprintf(stderr, "vrma_bench: %s\n", e.what());
		return kExitError;
	} catch (...) {
		fprintf(stderr, "vrma_bench: unexpected error\n");
		return kExitError;
	}
}
