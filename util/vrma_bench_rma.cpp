// vrma_bench: RMA bandwidth, latency and message-rate benchmark for any
// libfabric provider offering FI_RMA on FI_EP_MSG endpoints (vrma, verbs,
// tcp) or on FI_EP_RDM endpoints (-e rdm: vrma's own, "verbs;ofi_rxm",
// tcp). It uses the public libfabric API only. The two endpoint types
// differ only in how the sides find each other and part; every measured
// operation, command and check is the same code, so that `-e msg -o write`
// and `-e rdm -o write` numbers compare. The atomics (-o fadd, cswap, amax:
// one FI_UINT64, latency only) run over FI_EP_RDM with the same connection,
// commands and region, caps FI_ATOMIC added: the client's word is the first
// 8 bytes of the server's rx area (see "Atomics" below).
//
// Protocol between client and server (both ends are this program, on hosts
// of the same byte order):
//  - A CmData goes each way: the region's remote address (0 without
//    FI_MR_VIRT_ADDR: addresses are then offsets), its key and the size of
//    its data areas; the client adds the operation, the mode and the flags,
//    which the server takes over for its own writes. FI_EP_MSG: fi_connect
//    and fi_accept carry it. FI_EP_RDM: the TCP control connection to port
//    -P (vrma_bench_ctl.cpp) does, as the two-sided runs carry their fabric
//    addresses: the server's RmaHello (its fabric address), the client's
//    (its address and CmData), the server's RmaAnswer (its CmData, or why
//    it refuses); each side inserts the other into an FI_AV_TABLE address
//    vector. Nothing else goes over that connection until the client is
//    done.
//  - Each side registers one region: a tx area and an rx area of data_size
//    bytes each, then a control area. Writes go from the local tx area to
//    the peer's rx area; reads from the peer's tx area into the local rx
//    area.
//  - The client drives the server with Command records written into the
//    server's control area. The server polls the record's last 8 bytes
//    (seq) and answers by writing seq into the client's ack slot. Like the
//    latency ping-pong's last-byte polling, this relies on the last bytes
//    of a write being placed last, which RC devices and tcp do (over
//    FI_EP_RDM: the provider's connection to the peer, an RC queue pair or
//    a TCP stream, for vrma, ofi_rxm and tcp).
//  - FI_EP_RDM endpoints connect on the first operation to a peer (vrma's,
//    ofi_rxm's): before the first size the client makes kWarmupRoundTrips
//    untimed command round trips and one read, so that no connection set-up
//    falls into a calibration or a measured run (FI_EP_MSG connects in
//    fi_connect, before any of that too).
//  - Atomics: the server only serves commands (its progress executes the
//    atomics of providers that emulate them at the target, vrma's default);
//    its endpoint needs FI_ATOMIC, so it must be started with an atomic -o
//    as well (any of them), which request_error tells a client that forgot.
//  - The end: the client's quit command, acked; FI_EP_MSG: fi_shutdown.
//    FI_EP_RDM: the client closes its fabric objects, then the control
//    connection; the server closes its own after that end-of-file (as the
//    two-sided runs do: ofi_rxm over verbs crashed in fi_close when both
//    sides closed at once).

#include "vrma_bench.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace vrma_bench {
namespace {

uint64_t completion_op_flags(uint8_t flags)
{
	return ((flags & kFlagDelivery) ? FI_DELIVERY_COMPLETE : 0) |
	       ((flags & kFlagCommit) ? FI_COMMIT_COMPLETE : 0);
}

// FI_RMA on FI_EP_MSG (as it always asked); on FI_EP_RDM the directions
// spelled out, since nothing else (FI_MSG) is asked for; the atomics add
// FI_ATOMIC (the directions cover them too).
constexpr uint64_t kRdmRmaCaps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// addr_format: FI_EP_RDM clients ask in the format of the server's address.
InfoPtr make_hints(const Options &opt, uint32_t addr_format)
{
	const bool rdm = opt.ep_type == EpType::rdm;
	InfoPtr hints = alloc_hints();
	hints->ep_attr->type = rdm ? FI_EP_RDM : FI_EP_MSG;
	hints->caps = (rdm ? kRdmRmaCaps : FI_RMA) | (is_atomic(opt.op) ? FI_ATOMIC : 0);
	hints->addr_format = addr_format;
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
	const bool rdm = opt.ep_type == EpType::rdm;
	std::string caps = rdm ? "FI_RMA|FI_READ|FI_WRITE|FI_REMOTE_READ|FI_REMOTE_WRITE" : "FI_RMA";
	if (is_atomic(opt.op))
		caps += "|FI_ATOMIC";
	if (opt.flags & kFlagCommit)
		caps += "|FI_RMA_PMEM";
	if (opt.flags & kFlagFence)
		caps += "|FI_FENCE";
	std::string op_flags;
	if (opt.flags & kFlagDelivery)
		op_flags = "FI_DELIVERY_COMPLETE";
	if (opt.flags & kFlagCommit)
		op_flags += op_flags.empty() ? "FI_COMMIT_COMPLETE" : "|FI_COMMIT_COMPLETE";
	return std::string(rdm ? "FI_EP_RDM" : "FI_EP_MSG") + ", FI_THREAD_DOMAIN, caps " + caps +
	       ", tx op_flags " + (op_flags.empty() ? "0" : op_flags);
}

// The first fi_info the provider offers for the options; a refusal is "not
// supported" (exit status 2).
InfoPtr get_info(const Options &opt, const char *node, const char *service, uint64_t flags,
		 uint32_t addr_format = FI_FORMAT_UNSPEC)
{
	InfoPtr hints = make_hints(opt, addr_format);
	return first_info(opt, hints.get(), hints_text(opt), node, service, flags);
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

// FI_EP_RDM: what the control connection carries in place of the CM's.
constexpr uint32_t kRmaCtlVersion = 1;

// The server's first hello (cm not yet filled: its region waits for the
// client's sizes), and the client's hello (cm as fi_connect carries it).
struct RmaHello {
	CtlHeader header; // kCtlMagicRma, kRmaCtlVersion
	uint32_t addr_format;
	uint32_t addrlen;
	uint8_t addr[kMaxAddr]; // fi_getname of the endpoint
	CmData cm;
};

// The server's answer to the client's hello: cm as fi_accept carries it,
// or why the server refuses (status: the exit status it ends with).
struct RmaAnswer {
	int32_t status;
	uint32_t reserved;
	CmData cm;
	char text[224];
};

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
constexpr uint64_t kCmdPing = 3; // acked, nothing else: the FI_EP_RDM warm-up

// FI_EP_RDM: the connection warm-up's command round trips (the two-sided
// runs make as many untimed round trips).
constexpr uint64_t kWarmupRoundTrips = 100;

struct Command {
	uint64_t kind;
	uint64_t size;
	uint64_t count;
	uint64_t seq; // last: its arrival means the whole record arrived
};

constexpr uint8_t kServerSalt = 0xa5;

// The server's operation slots; the most receives that remote CQ data
// consumes a side keeps posted (FI_RX_CQ_DATA).
constexpr size_t kServerTxSlots = 16;
constexpr size_t kMaxRxCqData = 256;

// ---------------------------------------------------------------- atomics

// The client's atomics act on one FI_UINT64: the first 8 bytes of the
// server's rx area (8-byte aligned, as device atomics need). The operand
// goes from the client's tx area (cswap's compare value after it), the old
// value comes back into the client's rx area.
constexpr size_t kAtomicCompare = 8; // cswap's compare value, in the tx area
// What fadd adds, and amax's larger operand exceeds the word by: both
// halves of the word change.
constexpr uint64_t kAtomicStep = 0x100000001;
// cswap swaps between these two.
constexpr uint64_t kSwapA = 0xa5a5a5a55a5a5a5a;
constexpr uint64_t kSwapB = ~kSwapA;

fi_op atomic_fi_op(Op op)
{
	return op == Op::fadd ? FI_SUM : op == Op::cswap ? FI_CSWAP : FI_MAX;
}

const char *atomic_fi_op_name(Op op)
{
	return op == Op::fadd ? "FI_SUM" : op == Op::cswap ? "FI_CSWAP" : "FI_MAX";
}

// ---------------------------------------------------------------- one endpoint

// One side of a connection: the Endpoint's fabric objects, region and
// slots, and the RMA bookkeeping (the peer's region, remote CQ data).
class Side : public Endpoint {
public:
	Side(const Options &opt, bool is_client) : Endpoint(opt, is_client) {}

protected:
	const bool rdm_ = opt_.ep_type == EpType::rdm;
	// The peer as every operation names it: FI_EP_RDM, its index in the
	// address vector; FI_EP_MSG ignores it (0).
	fi_addr_t peer_addr_ = 0;
	size_t data_size_ = 0;
	bool virt_addr_ = false;
	uint64_t peer_base_ = 0;
	uint64_t peer_key_ = 0;

	Op op_ = Op::write;
	Mode mode_ = Mode::bw;
	uint8_t flags_ = 0;
	uint64_t perop_ = 0;    // flags every data operation carries
	bool use_msg_ = false;  // data operations go through fi_writemsg/fi_readmsg
	bool selective_ = false; // injects through fi_writemsg must not complete

	bool rx_posts_ = false; // remote CQ data consumes receives we post (FI_RX_CQ_DATA)
	size_t rx_repost_pending_ = 0;
	size_t rx_next_ = 0;
	uint64_t remote_data_count_ = 0;
	uint64_t data_posts_ = 0; // calls of post_once
	uint64_t remote_data_last_ = 0;
	void *quit_answer_ = nullptr; // the server's answer to the quit, once posted

	size_t tx_off() const { return 0; }
	size_t rx_off() const { return data_size_; }
	size_t ctrl_off() const { return 2 * data_size_; }

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

	// Completion queue, counter, region, MR and the enabled endpoint, once
	// the operation (set_operation) and data_size_ are known. An FI_EP_RDM
	// server, whose endpoint must exist before a client tells them, takes
	// the same steps in two goes (RdmServer).
	void setup_endpoint(fi_info *info, size_t tx_slots, uint64_t requested_key)
	{
		inject_size_ = info->tx_attr->inject_size;
		max_msg_size_ = info->ep_attr->max_msg_size;
		const size_t rx_depth = plan_rx_cq_data(info);
		open_cq(tx_slots + rx_depth + 64);
		if (is_client_ && op_ == Op::inject_write && info->domain_attr->cntr_cnt > 0) {
			fi_cntr_attr cntr_attr{};
			cntr_attr.events = FI_CNTR_EVENTS_COMP;
			cntr_attr.wait_obj = FI_WAIT_NONE;
			if (fi_cntr_open(domain_.get(), &cntr_attr, cntr_.out(), nullptr))
				cntr_.reset(); // injects are then flushed with a read
		}
		register_region(info, requested_key);
		init_slots(tx_slots, rx_depth);
		open_active(info);
		post_rx_cq_data(rx_depth);
	}

	// Whether remote CQ data consumes receives we post (writedata under
	// FI_RX_CQ_DATA; sets rx_posts_), and how many to keep posted.
	size_t plan_rx_cq_data(const fi_info *info)
	{
		rx_posts_ = op_ == Op::writedata &&
			    ((info->mode | info->rx_attr->mode) & FI_RX_CQ_DATA);
		return rx_posts_ ? std::clamp<size_t>(info->rx_attr->size, 1, kMaxRxCqData) : 0;
	}

	void open_cq(size_t entries)
	{
		fi_cq_attr cq_attr{};
		cq_attr.size = entries;
		cq_attr.format = FI_CQ_FORMAT_DATA;
		cq_attr.wait_obj = FI_WAIT_NONE;
		const int rc = fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr);
		if (rc)
			fail_call("fi_cq_open", rc);
	}

	// The region (tx and rx areas of data_size_, the control area),
	// registered for every access.
	void register_region(const fi_info *info, uint64_t requested_key)
	{
		const size_t len = alloc_region(2 * data_size_ + kCtrlBytes);
		const int rc = fi_mr_reg(domain_.get(), base_, len,
					 FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, requested_key,
					 0, mr_.out(), nullptr);
		if (rc)
			fail_call("fi_mr_reg", rc);
		desc_ = fi_mr_desc(mr_.get());
		if (fi_mr_key(mr_.get()) == FI_KEY_NOTAVAIL)
			fail(kExitUnsupported, "fi_mr_key: the key is not available (FI_MR_RAW): not supported");
		virt_addr_ = info->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
	}

	// The endpoint, bound to the event queue (FI_EP_MSG) or the address
	// vector (FI_EP_RDM), the CQ and the counter, and enabled.
	void open_active(fi_info *info)
	{
		int rc = fi_endpoint(domain_.get(), info, ep_.out(), nullptr);
		if (rc)
			fail_call("fi_endpoint", rc);
		rc = rdm_ ? fi_ep_bind(ep_.get(), &av_.get()->fid, 0) : fi_ep_bind(ep_.get(), &eq_.get()->fid, 0);
		if (rc)
			fail_call(rdm_ ? "fi_ep_bind(av)" : "fi_ep_bind(eq)", rc);
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
	}

	// Posts the rx_depth receives that remote CQ data consumes (rx_posts_).
	void post_rx_cq_data(size_t rx_depth)
	{
		if (!rx_posts_)
			return;
		rx_repost_pending_ = rx_depth;
		repost_rx();
		if (rx_repost_pending_)
			fail(kExitError, "fi_recv: the endpoint took only %zu of %zu receives",
			     rx_depth - rx_repost_pending_, rx_depth);
	}

	// FI_EP_RDM: the address vector (FI_AV_TABLE: the peer is index 0).
	void open_av()
	{
		fi_av_attr av_attr{};
		av_attr.type = FI_AV_TABLE;
		av_attr.count = 2;
		const int rc = fi_av_open(domain_.get(), &av_attr, av_.out(), nullptr);
		if (rc)
			fail_call("fi_av_open(FI_AV_TABLE)", rc);
	}

	// FI_EP_RDM: the peer's fabric address (from its hello) into the
	// address vector; every operation names it by peer_addr_.
	void insert_peer(const uint8_t *addr)
	{
		const int n = fi_av_insert(av_.get(), addr, 1, &peer_addr_, 0, nullptr);
		if (n != 1)
			fail(kExitError, "%s: fi_av_insert of the peer's address: %s (%d)", who(),
			     n < 0 ? fi_strerror(-n) : "not inserted", n);
	}

	// FI_EP_RDM: our hello, with our endpoint's fabric address; cm empty.
	RmaHello my_hello() const
	{
		RmaHello h{};
		h.header = CtlHeader{kCtlMagicRma, kRmaCtlVersion};
		h.addr_format = info_->addr_format;
		size_t len = sizeof h.addr;
		const int rc = fi_getname(&ep_.get()->fid, h.addr, &len);
		if (rc == -FI_ETOOSMALL)
			fail(kExitUnsupported, "the provider's addresses are %zu bytes, vrma_bench carries %zu: not supported",
			     len, sizeof h.addr);
		if (rc)
			fail_call("fi_getname", rc);
		h.addrlen = static_cast<uint32_t>(len);
		return h;
	}

	// FI_EP_RDM: progresses for `seconds`, so that the provider's own
	// messages (acknowledgements, connection teardown) get done while both
	// sides still exist.
	void linger(double seconds)
	{
		const auto start = Clock::now();
		while (seconds_since(start) < seconds) {
			progress();
			usleep(100);
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
		return valid_cm_data(d);
	}

	static std::optional<CmData> valid_cm_data(const CmData &d)
	{
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

	// FI_EP_MSG, non-blocking: fails when the peer went away.
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

	// Fails on the completion error, but for the one the server expects:
	// its answer to the client's quit flushed because the client, having
	// seen that answer in its memory, hung up before the acknowledgement
	// of the write came back (the slot is then free, as on success).
	void report_cq_error()
	{
		fi_cq_err_entry err;
		const std::string prov = read_cq_error(err);
		if (quit_answer_ && err.op_context == quit_answer_ && err.err == FI_ECANCELED) {
			release_slot(err.op_context);
			return;
		}
		fail(kExitError,
		     "%s: %s operation failed: completion error %s (%d), flags 0x%" PRIx64 ", provider: %s",
		     who(), op_name(op_), fi_strerror(err.err), err.err, err.flags, prov.c_str());
	}

	void repost_rx()
	{
		while (rx_repost_pending_) {
			// Remote CQ data consumes receives in order: the next one to
			// repost is the oldest consumed.
			Slot &slot = rx_slots_[rx_next_ % rx_slots_.size()];
			ssize_t rc = fi_recv(ep_.get(), base_ + ctrl_off() + kCtrlScratch, 8, desc_,
					     rdm_ ? FI_ADDR_UNSPEC : 0, &slot.ctx);
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
		const size_t n = read_cq(entries, [this] { report_cq_error(); });
		for (size_t i = 0; i < n; ++i) {
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
			release_slot(e.op_context, e.flags);
		}
		return n;
	}

	void release_slot(void *ctx, uint64_t flags = 0)
	{
		const std::optional<size_t> index = slot_index(tx_slots_, ctx);
		if (!index)
			fail(kExitError, "%s: completion with unknown context %p, flags 0x%" PRIx64, who(), ctx, flags);
		if (!tx_slots_[*index].busy)
			fail(kExitError, "%s: second completion for context %p", who(), ctx);
		tx_slots_[*index].busy = false;
		free_tx_.push_back(*index);
		++tx_done_;
	}

	void *acquire_tx()
	{
		return &tx_slots_[take_tx("a completion to free an operation context", [this] { progress(); })].ctx;
	}

	void wait_slot(void *ctx, const char *what)
	{
		const Slot *slot = reinterpret_cast<const Slot *>(ctx);
		progress_until(what, [slot] { return !slot->busy; }, [this] { progress(); });
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
				return fi_write(ep_.get(), local, size, desc_, peer_addr_, remote, peer_key_, ctx);
			case Op::read:
				call = "fi_read";
				return fi_read(ep_.get(), local, size, desc_, peer_addr_, remote, peer_key_, ctx);
			case Op::writedata:
				call = "fi_writedata";
				return fi_writedata(ep_.get(), local, size, desc_, data, peer_addr_, remote,
						    peer_key_, ctx);
			case Op::inject_write:
				call = "fi_inject_write";
				return fi_inject_write(ep_.get(), local, size, peer_addr_, remote, peer_key_);
			case Op::fadd:
			case Op::amax:
				call = "fi_fetch_atomic";
				return fi_fetch_atomic(ep_.get(), local, 1, desc_, base_ + rx_off(), desc_, peer_addr_,
						       remote, peer_key_, FI_UINT64, atomic_fi_op(op), ctx);
			case Op::cswap:
				call = "fi_compare_atomic";
				return fi_compare_atomic(ep_.get(), local, 1, desc_, local + kAtomicCompare, desc_,
							 base_ + rx_off(), desc_, peer_addr_, remote, peer_key_,
							 FI_UINT64, FI_CSWAP, ctx);
			case Op::send:
			case Op::tagged:
				break; // two-sided: never here (vrma_bench_twosided.cpp)
			}
		}
		uint64_t flags = perop_ | extra;
		if (op == Op::inject_write)
			flags |= FI_INJECT | (selective_ ? 0 : FI_COMPLETION);
		else
			flags |= FI_COMPLETION;
		if (op == Op::writedata)
			flags |= FI_REMOTE_CQ_DATA;
		call = is_read ? "fi_readmsg" : "fi_writemsg";
		return rma_msg(is_read, local, size, remote, data, ctx, flags);
	}

	// fi_readmsg or fi_writemsg of len bytes between `local` and the peer's
	// `remote`. Inlined into post_once, whose instructions vrma-compare counts.
	[[gnu::always_inline]] ssize_t rma_msg(bool is_read, uint8_t *local, size_t len, uint64_t remote,
					       uint64_t data, void *ctx, uint64_t flags)
	{
		iovec iov{local, len};
		void *desc = desc_;
		fi_rma_iov rma{remote, len, peer_key_};
		fi_msg_rma msg{};
		msg.msg_iov = &iov;
		msg.desc = &desc;
		msg.iov_count = 1;
		msg.rma_iov = &rma;
		msg.rma_iov_count = 1;
		msg.addr = peer_addr_;
		msg.context = ctx;
		msg.data = data;
		return is_read ? fi_readmsg(ep_.get(), &msg, flags) : fi_writemsg(ep_.get(), &msg, flags);
	}

	// Posts one data operation; a full queue (-FI_EAGAIN) is retried after
	// progressing the CQ, without FI_MORE so that held operations go out.
	void post_data(Op op, size_t size, uint64_t extra, uint64_t data, void *ctx)
	{
		post_retry(
			"room in the transmit queue",
			[&](const char *&call) {
				const ssize_t rc = post_once(op, size, extra, data, ctx, call);
				extra &= ~FI_MORE; // for a retry
				return rc;
			},
			[this] { progress(); });
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
		post_retry(
			what,
			[&](const char *&call) {
				call = write ? "fi_writemsg" : "fi_readmsg";
				return rma_msg(!write, base_ + local_off, len, peer_base_ + remote_off, 0, ctx,
					       FI_COMPLETION);
			},
			[this] { progress(); });
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
		progress_until(what, [&] { return remote_data_count_ != seen; }, [this] { progress(); });
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

// What both servers share: the client's request taking effect, and the
// answering of its commands. MsgServer and RdmServer differ in how the
// client reaches them and leaves.
class Server : public Side, public BenchServer {
public:
	explicit Server(const Options &opt) : Side(opt, false) {}

	// Answers commands until the client quits.
	void serve() override
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
					ack(seq, true);
					finish();
					return;
				}
				if (cmd.kind == kCmdPing) {
					ack(seq);
					continue;
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
				check_peer();
				if (g_abort.load(std::memory_order_relaxed))
					stop_quietly();
			}
		}
	}

protected:
	// Non-blocking: fails when the client went away.
	virtual void check_peer() = 0;
	// After the answer to the client's quit: waits until the client is
	// done with it before our objects close.
	virtual void finish() = 0;

	// Why the client's request (its CmData) cannot be served; nothing when
	// it can.
	std::optional<std::string> request_error(const CmData &peer) const
	{
		if ((peer.flags & kHintFlags) != (opt_.flags & kHintFlags))
			return "the client runs with flags " + flags_name(peer.flags & kHintFlags) + ", the server with " +
			       flags_name(opt_.flags & kHintFlags) +
			       ": give both the same --delivery-complete/--commit-complete/--fence";
		if (peer.op > static_cast<uint8_t>(Op::amax) || is_two_sided(static_cast<Op>(peer.op)) ||
		    peer.mode > static_cast<uint8_t>(Mode::rate) || peer.data_size == 0 ||
		    peer.data_size > kLargestSize || peer.data_size % 64)
			return std::string("malformed connection request");
		const Op op = static_cast<Op>(peer.op);
		if (is_atomic(op) && !is_atomic(opt_.op))
			return std::string("the client runs -o ") + op_name(op) +
			       ": start the server with an atomic -o as well (fadd, cswap or amax: its endpoint needs FI_ATOMIC)";
		return std::nullopt;
	}

	// The client's request takes effect: its operation, mode and flags
	// for our own writes, its sizes and region.
	void take_request(const CmData &peer)
	{
		set_operation(static_cast<Op>(peer.op), static_cast<Mode>(peer.mode), peer.flags & ~kFlagMore);
		data_size_ = peer.data_size;
		peer_base_ = peer.base;
		peer_key_ = peer.key;
	}

	// The data the client reads: our pattern in the tx area.
	void fill_tx()
	{
		for (size_t i = 0; i < data_size_; ++i)
			base_[tx_off() + i] = pattern_byte(i, kServerSalt);
	}

	void announce(uint8_t client_flags) const
	{
		if (opt_.role == Role::server)
			fprintf(stderr, "vrma_bench: client connected%s: op %s, mode %s, flags %s\n",
				rdm_ ? " (rdm)" : "", op_name(op_), mode_name(mode_), flags_name(client_flags).c_str());
	}

private:
	// `last`: the answer to the client's quit, which may end flushed (see
	// report_cq_error).
	void ack(uint64_t seq, bool last = false)
	{
		memcpy(base_ + ctrl_off() + kCtrlAckOut, &seq, sizeof seq);
		const char *what = "the answer to the client";
		void *ctx = post_ctrl(true, ctrl_off() + kCtrlAckOut, ctrl_off() + kCtrlAckIn, sizeof seq, what);
		if (last)
			quit_answer_ = ctx;
		wait_slot(ctx, what);
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

// The server of an FI_EP_MSG run: listens with a passive endpoint; the
// client's CmData comes with its connection request.
class MsgServer final : public Server {
public:
	explicit MsgServer(const Options &opt) : Server(opt) {}

	ListenAddress listen() override
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
		open_fabric(info_.get(), true);
		open_passive();
		check_cm_data_size(&pep_.get()->fid);
		int rc = fi_listen(pep_.get());
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

	std::string describe() const override
	{
		return std::string("provider ") + info_->fabric_attr->prov_name + ", domain " +
		       info_->domain_attr->name;
	}

	void accept() override
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
		if (const std::optional<std::string> why = request_error(*peer)) {
			reject();
			fail(kExitError, "server: %s", why->c_str());
		}
		take_request(*peer);

		int rc = fi_domain(fabric_.get(), conn_info_.get(), domain_.out(), nullptr);
		if (rc)
			fail_call("fi_domain", rc);
		setup_endpoint(conn_info_.get(), kServerTxSlots, 0x5e5e);
		fill_tx();
		const CmData mine = my_cm_data();
		rc = fi_accept(ep_.get(), &mine, sizeof mine);
		if (rc)
			fail_call("fi_accept", rc);
		wait_eq(FI_CONNECTED, &ep_.get()->fid, buf, sizeof buf, "the connection to complete",
			opt_.timeout);
		announce(peer->flags);
	}

protected:
	void check_peer() override { check_connection(); }

	// The client shuts down after our last answer; closing first could make
	// it miss that answer.
	void finish() override
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
};

// The server of an FI_EP_RDM run: its endpoint exists from listen() on
// (the client needs its fabric address first), its region only once the
// client's hello gave the sizes.
class RdmServer final : public Server {
public:
	explicit RdmServer(const Options &opt) : Server(opt) {}

	// Opens the endpoint and the control listener.
	ListenAddress listen() override
	{
		std::string node = opt_.bind_addr;
		if (node.empty() && opt_.role == Role::loopback) {
			// The client's fi_getinfo needs an address, not a wildcard:
			// the provider's first local address.
			InfoPtr local = get_info(opt_, nullptr, nullptr, 0);
			if (local->src_addr && local->src_addrlen >= sizeof(sockaddr_in))
				node = sockaddr_host(static_cast<const sockaddr *>(local->src_addr));
		}
		const char *fnode = node.empty() ? nullptr : node.c_str();
		info_ = get_info(opt_, fnode, nullptr, fnode ? FI_SOURCE : 0);
		inject_size_ = info_->tx_attr->inject_size;
		max_msg_size_ = info_->ep_attr->max_msg_size;
		open_fabric(info_.get(), false);
		const int rc = fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr);
		if (rc)
			fail_call("fi_domain", rc);
		open_av();
		// Sized before the client's operation is known: room for the
		// receives remote CQ data may need.
		open_cq(kServerTxSlots + kMaxRxCqData + 64);
		open_active(info_.get());
		hello_ = my_hello();

		ListenAddress a;
		a.host = !opt_.bind_addr.empty() ? opt_.bind_addr : opt_.role == Role::loopback ? "127.0.0.1" : "";
		const bool ephemeral = opt_.role == Role::loopback && !opt_.port_given;
		listener_ = tcp_listen(a.host.empty() ? nullptr : a.host.c_str(),
				       std::to_string(ephemeral ? 0 : opt_.port), a.port);
		a.ok = true;
		return a;
	}

	std::string describe() const override
	{
		return std::string("control over TCP; provider ") + info_->fabric_attr->prov_name + ", domain " +
		       info_->domain_attr->name + ", endpoint rdm";
	}

	void accept() override
	{
		ctl_ = tcp_accept(listener_, nullptr);
		listener_ = Socket();
		send_all(ctl_, &hello_, sizeof hello_);
		RmaHello peer;
		recv_hello(ctl_, &peer, sizeof peer, hello_.header, false, opt_.timeout, "server", nullptr);
		const std::optional<CmData> cm = valid_cm_data(peer.cm);
		if (!cm || peer.addrlen == 0 || peer.addrlen > sizeof peer.addr)
			refuse("malformed hello from the client");
		if (const std::optional<std::string> why = request_error(*cm))
			refuse(*why);
		take_request(*cm);

		const size_t rx_depth = plan_rx_cq_data(info_.get());
		register_region(info_.get(), 0x5e5e);
		init_slots(kServerTxSlots, rx_depth);
		post_rx_cq_data(rx_depth);
		fill_tx();
		fill_wildcard(peer.addr_format, peer.addr, peer.addrlen, ctl_);
		insert_peer(peer.addr);

		RmaAnswer answer{};
		answer.cm = my_cm_data();
		send_all(ctl_, &answer, sizeof answer);
		announce(cm->flags);
	}

protected:
	void check_peer() override
	{
		if (peer_hung_up(ctl_))
			fail(kExitError, "server: the client closed the control connection before it finished");
	}

	// The client closes its fabric objects, then the control connection;
	// we keep progressing until then and close ours after (see the
	// protocol above).
	void finish() override
	{
		const Idle idle = [this] { progress(); };
		uint8_t byte;
		if (wait_readable(ctl_.fd(), opt_.timeout, idle) && recv(ctl_.fd(), &byte, 1, 0) > 0)
			fail(kExitError, "server: the client sent more after quitting");
		linger(0.05);
		close_fabric();
	}

private:
	Socket listener_, ctl_;
	RmaHello hello_{};

	// Tells the client why we do not serve it, and ends.
	[[noreturn]] void refuse(const std::string &why)
	{
		RmaAnswer answer{};
		answer.status = kExitError;
		snprintf(answer.text, sizeof answer.text, "%s", why.c_str());
		send_all(ctl_, &answer, sizeof answer);
		fail(kExitError, "server: %s", why.c_str());
	}
};

// ---------------------------------------------------------------- client

// What both clients share: every timed run and check. MsgClient and
// RdmClient differ in how they reach the server and leave.
class Client : public Side, public ClientRunner {
public:
	explicit Client(const Options &opt) : Side(opt, true), ClientRunner(opt) {}

	RunInfo run_info() const override
	{
		RunInfo ri = common_run_info(info_.get(), op_, mode_);
		ri.flags = flags_;
		if (op_ == Op::inject_write && mode_ != Mode::lat)
			ri.inject_flush = cntr_ ? "counter" : "read";
		// FI_EP_MSG runs print and write what they always did.
		if (rdm_)
			ri.endpoint = ep_type_name(EpType::rdm);
		return ri;
	}

protected:
	// Before the endpoint: the operation, and the data areas' size for
	// max_size bytes.
	void plan(size_t max_size)
	{
		set_operation(opt_.op, opt_.mode, opt_.flags);
		data_size_ = (max_size + 63) / 64 * 64;
	}

	// The server's CmData (fi_accept's, or the FI_EP_RDM answer's): its
	// region.
	void take_answer(const std::optional<CmData> &peer)
	{
		if (!peer)
			fail(kExitError, "client: the server's answer carries no vrma_bench %u connection data",
			     kCmVersion);
		if (peer->data_size < data_size_)
			fail(kExitError, "client: the server offers %" PRIu64 " bytes, %zu needed",
			     peer->data_size, data_size_);
		peer_base_ = peer->base;
		peer_key_ = peer->key;
	}

	std::optional<std::string> skip_reason(size_t size) const override
	{
		const bool injects = op_ == Op::inject_write || (flags_ & kFlagInject);
		if (injects && size > inject_size_)
			return too_large("inject_size", inject_size_);
		if (size > max_msg_size_)
			return too_large("max_msg_size", max_msg_size_);
		return std::nullopt;
	}

	void prepare(size_t size, uint8_t salt) override
	{
		if (is_atomic(op_)) {
			word_ = read_word("the read of the atomics' word");
			return;
		}
		for (size_t i = 0; i < size; ++i)
			base_[tx_off() + i] = pattern_byte(i, salt);
	}

	// A read's check bytes must come from the measured run.
	void before_measured(size_t size) override
	{
		if (op_ != Op::read)
			return;
		const size_t check = std::min<size_t>(8, size);
		memset(base_ + rx_off(), 0, check);
		memset(base_ + rx_off() + size - check, 0, check);
	}

	void after_measured(size_t size, uint8_t salt) override
	{
		if (is_atomic(op_))
			check_word(read_word("the read-back of the atomics' word"), "the word read back after");
		else if (mode_ != Mode::lat)
			verify(size, salt);
	}

	double timed_run(size_t size, uint64_t n, std::vector<double> *samples, bool show) override
	{
		if (is_atomic(op_))
			return atomic_run(n, samples, show);
		if (mode_ == Mode::lat)
			return lat_run(size, n, samples, show);
		if (op_ == Op::inject_write)
			return inject_run(size, n, samples, show);
		return bw_run(size, n, samples, show);
	}

	uint64_t posts() const override { return data_posts_; }

	// A read's latency is its completion time, and so is an atomic's (a
	// round trip too, compared with a read's); the others' half a round
	// trip.
	unsigned trips_per_iteration() const override { return op_ == Op::read || is_atomic(op_) ? 1 : 2; }

	// Whether the provider offers the atomic on FI_UINT64; an operation
	// it reports unsupported ends here (exit status 2). The endpoint is
	// enabled.
	void check_atomic_valid() const
	{
		if (!is_atomic(op_))
			return;
		fid_ep *ep = ep_.get();
		const char *call = op_ == Op::cswap ? "fi_compare_atomicvalid" : "fi_fetch_atomicvalid";
		size_t count = 0;
		int rc = -FI_ENOSYS;
		if (ep->atomic) // providers without atomics may leave it unset
			rc = op_ == Op::cswap ? fi_compare_atomicvalid(ep, FI_UINT64, FI_CSWAP, &count)
					      : fi_fetch_atomicvalid(ep, FI_UINT64, atomic_fi_op(op_), &count);
		if (rc || count == 0)
			fail(kExitUnsupported, "provider %s does not offer -o %s (%s(FI_UINT64, %s): %s): not supported",
			     info_->fabric_attr->prov_name, op_name(op_), call, atomic_fi_op_name(op_),
			     rc ? fi_strerror(-rc) : "count 0");
	}

	void send_command(uint64_t kind, size_t size, uint64_t count)
	{
		const Command cmd{kind, size, count, ++cmd_seq_};
		memcpy(base_ + ctrl_off() + kCtrlCmdOut, &cmd, sizeof cmd);
		rma_ctrl(true, ctrl_off() + kCtrlCmdOut, ctrl_off() + kCtrlCmdIn, sizeof cmd,
			 "the command to the server");
		progress_until(
			"the server's answer", [&] { return load_u64(ctrl_off() + kCtrlAckIn) == cmd.seq; },
			[this] { progress(); });
	}

private:
	uint64_t cmd_seq_ = 0;
	uint64_t word_ = 0;       // atomics: the server's word, as the client's atomics left it
	uint64_t atomic_seq_ = 0; // atomics posted so far (amax alternates its operand)

	// The server's word, read with an RMA read.
	uint64_t read_word(const char *what)
	{
		rma_ctrl(false, ctrl_off() + kCtrlCheck, rx_off(), kAtomicSize, what);
		return load_u64(ctrl_off() + kCtrlCheck);
	}

	void check_word(uint64_t got, const char *what) const
	{
		if (got != word_)
			fail(kExitError, "data check failed: %s %s is 0x%016" PRIx64 ", expected 0x%016" PRIx64,
			     what, op_name(op_), got, word_);
	}

	// The next atomic's operands, into the tx area; returns the word's
	// value after it. fadd adds kAtomicStep; cswap compares with the word
	// and swaps in the other of kSwapA and kSwapB, so every swap succeeds;
	// amax alternates an operand above the word (the new value) and one
	// below it (no change).
	uint64_t set_operands()
	{
		uint64_t operand = 0, after = 0;
		if (op_ == Op::fadd) {
			operand = kAtomicStep;
			after = word_ + operand;
		} else if (op_ == Op::cswap) {
			operand = word_ == kSwapA ? kSwapB : kSwapA;
			memcpy(base_ + tx_off() + kAtomicCompare, &word_, sizeof word_);
			after = operand;
		} else {
			operand = (atomic_seq_ & 1) ? word_ / 2 : word_ + kAtomicStep;
			after = std::max(word_, operand);
		}
		memcpy(base_ + tx_off(), &operand, sizeof operand);
		return after;
	}

	// Latency of the atomics, as of read: one operation posted, its
	// completion waited for (its time is the sample, a round trip), then
	// the old value it fetched checked against the word before it.
	double atomic_run(uint64_t n, std::vector<double> *samples, bool show)
	{
		const auto start = Clock::now();
		for (uint64_t i = 0; i < n; ++i) {
			const uint64_t after = set_operands();
			const uint64_t spoiled = ~word_; // a result never written fails the check
			memcpy(base_ + rx_off(), &spoiled, sizeof spoiled);
			const Stamp t0 = sample_clock_.now();
			void *ctx = acquire_tx();
			post_data(op_, kAtomicSize, 0, 0, ctx);
			wait_slot(ctx, "an atomic's completion");
			lap(samples, t0, 1, show, i + 1);
			check_word(load_u64(rx_off()), "the old value fetched by");
			word_ = after;
			++atomic_seq_;
		}
		return seconds_since(start);
	}

	double bw_run(size_t size, uint64_t n, std::vector<double> *samples, bool show)
	{
		const auto post = [&](uint64_t posted, uint64_t burst) {
			for (uint64_t j = 0; j < burst; ++j) {
				const uint64_t more = ((flags_ & kFlagMore) && j + 1 < burst) ? FI_MORE : 0;
				post_data(op_, size, more, (posted + j) & 0xffffffff, acquire_tx());
			}
		};
		return seconds_since(windowed_run(n, tx_done_, post, [this] { return progress(); }, samples, show,
						  "completions"));
	}

	// Injects have no completions: each window is flushed with the write
	// counter or, without counters, with a read that RC orders after them
	// (over FI_EP_RDM: the provider's connection to the peer, as for the
	// commands; vrma, ofi_rxm and tcp have counters anyway).
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
				lap(samples, t0, 1, show, i + 1);
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
			lap(samples, t0, 2, show, i + 1);
		}
		return seconds_since(start);
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

// The client of an FI_EP_MSG run: fi_connect carries its CmData, the
// connection's answer the server's.
class MsgClient final : public Client {
public:
	explicit MsgClient(const Options &opt) : Client(opt) {}

	void connect(const std::string &host, const std::string &port, size_t max_size) override
	{
		info_ = get_info(opt_, host.c_str(), port.c_str(), 0);
		open_fabric(info_.get(), true);
		int rc = fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr);
		if (rc)
			fail_call("fi_domain", rc);
		plan(max_size);
		set_window(info_->tx_attr->size);
		setup_endpoint(info_.get(), window_ + 16, 0xc1c1);
		check_cm_data_size(&ep_.get()->fid);
		const CmData mine = my_cm_data();
		rc = fi_connect(ep_.get(), info_->dest_addr, &mine, sizeof mine);
		if (rc)
			fail_call("fi_connect", rc);
		uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
		ssize_t len = wait_eq(FI_CONNECTED, &ep_.get()->fid, buf, sizeof buf,
				      "the connection to the server", opt_.timeout);
		take_answer(parse_cm_data(buf, len));
	}

	void quit() override
	{
		send_command(kCmdQuit, 0, 0);
		int rc = fi_shutdown(ep_.get(), 0);
		if (rc)
			fprintf(stderr, "vrma_bench: fi_shutdown: %s (%d)\n", fi_strerror(-rc), rc);
	}
};

// The client of an FI_EP_RDM run: the control connection carries the
// fabric addresses and CmData both ways (see the protocol above).
class RdmClient final : public Client {
public:
	explicit RdmClient(const Options &opt) : Client(opt) {}

	void connect(const std::string &host, const std::string &port, size_t max_size) override
	{
		ctl_ = tcp_connect(host, port, opt_.timeout);
		RmaHello server;
		recv_hello(ctl_, &server, sizeof server, CtlHeader{kCtlMagicRma, kRmaCtlVersion}, true, opt_.timeout,
			   "client", nullptr);
		if (server.addrlen == 0 || server.addrlen > sizeof server.addr)
			fail(kExitError, "client: malformed hello from the server");
		fill_wildcard(server.addr_format, server.addr, server.addrlen, ctl_);
		// The server's address picks the fabric and domain that reach it.
		std::string node, service;
		const bool ip = ip_node(server.addr_format, server.addr, server.addrlen, node, service);
		info_ = get_info(opt_, ip ? node.c_str() : nullptr, ip ? service.c_str() : nullptr, 0,
				 server.addr_format);
		open_fabric(info_.get(), false);
		const int rc = fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr);
		if (rc)
			fail_call("fi_domain", rc);
		open_av();
		plan(max_size);
		set_window(info_->tx_attr->size);
		setup_endpoint(info_.get(), window_ + 16, 0xc1c1);
		check_atomic_valid();
		RmaHello mine = my_hello();
		mine.cm = my_cm_data();
		send_all(ctl_, &mine, sizeof mine);
		insert_peer(server.addr);

		RmaAnswer answer;
		recv_all(ctl_, &answer, sizeof answer, opt_.timeout, "the server's answer", [this] { progress(); });
		if (answer.status != 0) {
			answer.text[sizeof answer.text - 1] = '\0';
			// In a loopback run the server said why already.
			if (opt_.role == Role::loopback)
				throw BenchError{answer.status};
			fail(answer.status, "the server reports: %s", answer.text);
		}
		take_answer(valid_cm_data(answer.cm));
		warm_up();
	}

	void quit() override
	{
		send_command(kCmdQuit, 0, 0);
		linger(0.1);
		// First our fabric objects, then the control connection, whose
		// end tells the server to close its own (RdmServer::finish).
		close_fabric();
		ctl_ = Socket();
	}

private:
	Socket ctl_;

	// The endpoint connects on the first operation to the server (vrma's,
	// ofi_rxm's): untimed command round trips (an RMA write each way) and
	// a read, so that neither connection set-up nor first-touch costs fall
	// into the first size's calibration or measured run. Each size's own
	// warm-up follows as for FI_EP_MSG (ClientRunner::measure).
	void warm_up()
	{
		for (uint64_t i = 0; i < kWarmupRoundTrips; ++i)
			send_command(kCmdPing, 0, 0);
		rma_ctrl(false, ctrl_off() + kCtrlCheck, tx_off(), 8, "the warm-up read");
	}
};

} // namespace

int run_rma(const Options &opt)
{
	if (opt.ep_type == EpType::rdm)
		return run_roles<RdmServer, RdmClient>(opt);
	return run_roles<MsgServer, MsgClient>(opt);
}

} // namespace vrma_bench
