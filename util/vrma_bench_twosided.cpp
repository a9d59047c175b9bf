// vrma_bench: two-sided messages (fi_tsend/fi_trecv, fi_send/fi_recv) over
// FI_EP_RDM, and over FI_EP_MSG as the floor an RDM endpoint is held to.
// Public libfabric API only: the same binary measures vrma's own RDM
// endpoint, "vrma;ofi_rxm", "verbs;ofi_rxm" and tcp.
//
// Protocol (both ends are this program, on hosts of the same byte order):
//  - The client opens a TCP connection to the server's port -P, the control
//    channel (vrma_bench_ctl.cpp). Each side sends a Hello (it starts as a
//    CtlHeader, whose magic tells it from the RMA module's): endpoint type,
//    address format and fabric address (fi_getname of the RDM endpoint, or
//    of the MSG passive endpoint); the client's also carries its largest
//    size and window, which size the server's receive pool. RDM: each side
//    inserts the other into its FI_AV_TABLE address vector. MSG: the client
//    connects to the address.
//  - Per run the client sends a Command (ping-pong or stream: op, size,
//    count, window, salt); the server posts its receives and answers Ready,
//    the run goes over the fabric, and the server answers Done with the
//    outcome of its data check. No timed section contains control traffic.
//  - Data is pattern_byte(i, salt): the client's salt per size, the
//    server's replies salt ^ kReplySalt. Each received message's length,
//    tag and first and last byte are checked (every byte with
//    --verify-all). The receiver spoils those bytes before it posts a
//    receive, so a completion that delivered nothing cannot pass on what an
//    earlier message left in the buffer.

#include "vrma_bench.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_tagged.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

namespace vrma_bench {
namespace {

constexpr uint32_t kCtlMagic = kCtlMagicTwoSided;
constexpr uint32_t kCtlVersion = 1;
constexpr uint64_t kTagData = 0x7a6b00d1;
constexpr uint64_t kTagAck = 0x7a6b00ac;
constexpr uint8_t kReplySalt = 0x5a;
constexpr size_t kRxPoolMax = 64u << 20; // receive buffers of a streaming receiver
constexpr uint64_t kWarmupRoundTrips = 100;
constexpr size_t kWarmupSize = 8;
constexpr size_t kAlign = 64;
constexpr size_t kMaxPostedRx = 512;

size_t round_up(size_t n, size_t to)
{
	return (n + to - 1) / to * to;
}

struct Hello {
	uint32_t magic;
	uint32_t version;
	uint32_t ep_type;
	uint32_t addr_format;
	uint64_t max_size; // client: the largest message it sends
	uint32_t window;   // client: sends outstanding in bw and rate runs
	uint32_t addrlen;  // 0: no address (the client of an FI_EP_MSG run)
	uint8_t addr[kMaxAddr];
};
// recv_hello reads the first 8 bytes as a CtlHeader.
static_assert(offsetof(Hello, magic) == offsetof(CtlHeader, magic) &&
		      offsetof(Hello, version) == offsetof(CtlHeader, version),
	      "a Hello starts as a CtlHeader");

constexpr uint32_t kCmdPingPong = 1;
constexpr uint32_t kCmdStream = 2;
constexpr uint32_t kCmdQuit = 3;

struct Command {
	uint32_t magic;
	uint32_t kind;
	uint32_t op;     // Op::send or Op::tagged
	uint32_t window; // stream: receives the receiver keeps posted, at most
	uint64_t size;
	uint64_t count;
	uint32_t salt;
	uint32_t verify_all;
};

struct Reply {
	uint32_t magic;
	int32_t status;  // 0, or the exit status the server ends with
	char text[248]; // why, when status != 0
};

const char *progress_name(fi_progress p)
{
	switch (p) {
	case FI_PROGRESS_AUTO: return "auto";
	case FI_PROGRESS_MANUAL: return "manual";
	default: return "unspec";
	}
}

// ---------------------------------------------------------------- one side

// One side of a two-sided run: the Endpoint's fabric objects, region and
// slots, and the message bookkeeping (receives, data checks).
//
// Region: [tx area: max size][control: ack out, ack in][rx pool]. The
// client's pool holds one message (its ping-pong replies); the server's up
// to `window` messages of the run's size, bounded by kRxPoolMax. rx_slots_:
// [0, pool buffers) data, the last one the ack.
class Peer : public Endpoint {
public:
	Peer(const Options &opt, bool is_client) : Endpoint(opt, is_client) {}

protected:
	const bool rdm_ = opt_.ep_type == EpType::rdm;
	size_t tx_bytes_ = 0;   // the tx area
	size_t pool_off_ = 0;   // the rx pool
	size_t pool_bytes_ = 0;
	fi_addr_t peer_ = FI_ADDR_UNSPEC;
	bool has_tagged_ = false;

	bool tagged_ = true; // the current run's messages
	size_t tx_busy_ = 0;
	std::deque<size_t> rx_ready_; // completed receives, in completion order
	uint64_t posts_ = 0;          // send calls, retries included
	std::string data_error_;      // the first failed check
	uint64_t data_errors_ = 0;
	std::vector<uint8_t> expect_; // --verify-all: the whole expected message

	uint8_t *tx_area() const { return base_; }
	uint8_t *ack_out() const { return base_ + tx_bytes_; }
	uint8_t *ack_in() const { return base_ + tx_bytes_ + kAlign; }
	size_t ack_slot() const { return rx_slots_.size() - 1; }
	uint8_t *pool_buf(size_t i, size_t size) const { return base_ + pool_off_ + i * round_up(size, kAlign); }
	size_t pool_count(size_t size) const
	{
		return std::max<size_t>(1, std::min(rx_slots_.size() - 1, pool_bytes_ / round_up(size, kAlign)));
	}

	InfoPtr hints(uint32_t addr_format) const
	{
		InfoPtr h = alloc_hints();
		h->ep_attr->type = rdm_ ? FI_EP_RDM : FI_EP_MSG;
		h->caps = FI_MSG | ((rdm_ || opt_.op == Op::tagged) ? FI_TAGGED : 0);
		h->mode = FI_CONTEXT | FI_CONTEXT2;
		h->addr_format = addr_format;
		h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
		// Each side is one thread with a domain of its own (as MPI asks for).
		h->domain_attr->threading = FI_THREAD_DOMAIN;
		if (opt_.auto_progress)
			h->domain_attr->data_progress = FI_PROGRESS_AUTO;
		if (opt_.flags & kFlagDelivery)
			h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
		if (!opt_.provider.empty())
			h->fabric_attr->prov_name = strdup(opt_.provider.c_str());
		if (!opt_.domain.empty())
			h->domain_attr->name = strdup(opt_.domain.c_str());
		return h;
	}

	std::string hints_text() const
	{
		return std::string(rdm_ ? "FI_EP_RDM" : "FI_EP_MSG") + ", FI_THREAD_DOMAIN, caps FI_MSG" +
		       ((rdm_ || opt_.op == Op::tagged) ? "|FI_TAGGED" : "") +
		       (opt_.auto_progress ? ", data progress FI_PROGRESS_AUTO" : "") +
		       ((opt_.flags & kFlagDelivery) ? ", tx op_flags FI_DELIVERY_COMPLETE" : "");
	}

	void get_info(const char *node, const char *service, uint64_t flags, uint32_t addr_format)
	{
		InfoPtr h = hints(addr_format);
		info_ = first_info(opt_, h.get(), hints_text(), node, service, flags);
		has_tagged_ = info_->caps & FI_TAGGED;
		inject_size_ = info_->tx_attr->inject_size;
		max_msg_size_ = info_->ep_attr->max_msg_size;
	}

	// Domain, CQ, and for RDM the address vector.
	void open_domain(fi_info *info, size_t cq_entries)
	{
		int rc = fi_domain(fabric_.get(), info, domain_.out(), nullptr);
		if (rc)
			fail_call("fi_domain", rc);
		fi_cq_attr cq_attr{};
		cq_attr.size = cq_entries;
		cq_attr.format = FI_CQ_FORMAT_TAGGED;
		cq_attr.wait_obj = FI_WAIT_NONE;
		rc = fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr);
		if (rc)
			fail_call("fi_cq_open", rc);
		if (rdm_) {
			fi_av_attr av_attr{};
			av_attr.type = FI_AV_TABLE;
			av_attr.count = 2;
			rc = fi_av_open(domain_.get(), &av_attr, av_.out(), nullptr);
			if (rc)
				fail_call("fi_av_open(FI_AV_TABLE)", rc);
		}
	}

	// The endpoint, bound and enabled (an FI_EP_MSG one is then connected
	// or accepted by the caller).
	void open_endpoint(fi_info *info)
	{
		int rc = fi_endpoint(domain_.get(), info, ep_.out(), nullptr);
		if (rc)
			fail_call("fi_endpoint", rc);
		rc = rdm_ ? fi_ep_bind(ep_.get(), &av_.get()->fid, 0) : fi_ep_bind(ep_.get(), &eq_.get()->fid, 0);
		if (rc)
			fail_call(rdm_ ? "fi_ep_bind(av)" : "fi_ep_bind(eq)", rc);
		rc = fi_ep_bind(ep_.get(), &cq_.get()->fid, FI_TRANSMIT | FI_RECV);
		if (rc)
			fail_call("fi_ep_bind(cq)", rc);
		rc = fi_enable(ep_.get());
		if (rc)
			fail_call("fi_enable", rc);
	}

	Hello my_hello(fid_t named, uint64_t max_size, uint32_t window) const
	{
		Hello h{};
		h.magic = kCtlMagic;
		h.version = kCtlVersion;
		h.ep_type = static_cast<uint32_t>(opt_.ep_type);
		h.addr_format = info_->addr_format;
		h.max_size = max_size;
		h.window = window;
		if (named) {
			size_t len = sizeof h.addr;
			const int rc = fi_getname(named, h.addr, &len);
			if (rc == -FI_ETOOSMALL)
				fail(kExitUnsupported, "the provider's addresses are %zu bytes, vrma_bench carries %zu: not supported",
				     len, sizeof h.addr);
			if (rc)
				fail_call("fi_getname", rc);
			h.addrlen = static_cast<uint32_t>(len);
		}
		return h;
	}

	// Receives the peer's hello (a client answers a server of the other
	// module with its own header: see recv_hello) and checks it.
	Hello recv_peer_hello(const Socket &s) const
	{
		Hello h;
		recv_hello(s, &h, sizeof h, CtlHeader{kCtlMagic, kCtlVersion}, is_client_, opt_.timeout, who(),
			   nullptr);
		if (h.ep_type != static_cast<uint32_t>(opt_.ep_type))
			fail(kExitError, "%s: the peer runs -e %s, we run -e %s: give both the same -e", who(),
			     h.ep_type == static_cast<uint32_t>(EpType::rdm) ? "rdm" : "msg", ep_type_name(opt_.ep_type));
		if (h.addrlen > sizeof h.addr)
			fail(kExitError, "%s: malformed hello from the peer", who());
		return h;
	}

	void insert_peer(const Hello &h)
	{
		if (!h.addrlen)
			fail(kExitError, "%s: the peer sent no fabric address", who());
		const int n = fi_av_insert(av_.get(), h.addr, 1, &peer_, 0, nullptr);
		if (n != 1)
			fail(kExitError, "%s: fi_av_insert of the peer's address: %s (%d)", who(),
			     n < 0 ? fi_strerror(-n) : "not inserted", n);
	}

	// The registered region and the operation slots.
	void setup_region(size_t max_size, size_t pool_bytes, size_t pool_slots, size_t tx_slots)
	{
		tx_bytes_ = round_up(std::max(max_size, kWarmupSize), kAlign);
		pool_off_ = tx_bytes_ + 2 * kAlign;
		pool_bytes_ = pool_bytes;
		const size_t len = alloc_region(pool_off_ + pool_bytes_);
		const fi_info *active = conn_info_ ? conn_info_.get() : info_.get();
		if (active->domain_attr->mr_mode & FI_MR_LOCAL) {
			const int rc = fi_mr_reg(domain_.get(), base_, len, FI_SEND | FI_RECV, 0,
						 is_client_ ? 0xc2 : 0x52, 0, mr_.out(), nullptr);
			if (rc)
				fail_call("fi_mr_reg", rc);
			desc_ = fi_mr_desc(mr_.get());
		}
		init_slots(tx_slots, pool_slots + 1);
	}

	[[noreturn]] void report_cq_error()
	{
		fi_cq_err_entry err;
		const std::string prov = read_cq_error(err);
		fail(kExitError,
		     "%s: %s operation failed: completion error %s (%d), flags 0x%" PRIx64 ", len %zu, provider: %s",
		     who(), (err.flags & FI_RECV) ? "receive" : "send", fi_strerror(err.err), err.err, err.flags,
		     err.len, prov.c_str());
	}

	// Reads what the completion queue holds; returns the number of entries.
	size_t progress()
	{
		fi_cq_tagged_entry entries[32];
		const size_t n = read_cq(entries, [this] { report_cq_error(); });
		for (size_t i = 0; i < n; ++i) {
			const fi_cq_tagged_entry &e = entries[i];
			const std::optional<size_t> tx = slot_index(tx_slots_, e.op_context);
			const std::optional<size_t> rx = tx ? std::nullopt : slot_index(rx_slots_, e.op_context);
			Slot *slot = tx ? &tx_slots_[*tx] : rx ? &rx_slots_[*rx] : nullptr;
			if (!slot || !slot->busy)
				fail(kExitError, "%s: completion with %s context %p, flags 0x%" PRIx64, who(),
				     slot ? "an idle" : "an unknown", e.op_context, e.flags);
			slot->busy = false;
			if (tx) {
				free_tx_.push_back(*tx);
				--tx_busy_;
				++tx_done_;
			} else {
				slot->len = e.len;
				slot->tag = e.tag;
				rx_ready_.push_back(*rx);
			}
		}
		return n;
	}

	// The receive call alone, out of line: util/vrma-compare counts its
	// instructions on the receiving side (--toggle-collect=*recv_once*),
	// as post_once's for the RMA calls.
	[[gnu::noinline]] ssize_t recv_once(uint8_t *buf, size_t len, uint64_t tag, void *ctx)
	{
		return tagged_ ? fi_trecv(ep_.get(), buf, len, desc_, FI_ADDR_UNSPEC, tag, 0, ctx)
			       : fi_recv(ep_.get(), buf, len, desc_, FI_ADDR_UNSPEC, ctx);
	}

	void post_recv(size_t index, uint8_t *buf, size_t len, uint64_t tag)
	{
		Slot &slot = rx_slots_[index];
		slot.busy = true;
		post_retry(
			"room in the receive queue",
			[&](const char *&call) {
				call = tagged_ ? "fi_trecv" : "fi_recv";
				return recv_once(buf, len, tag, &slot.ctx);
			},
			[this] { progress(); });
	}

	// The send calls alone, out of line: util/vrma-compare counts their
	// instructions on the sending side (--toggle-collect=*send_once* or
	// *inject_once*), as post_once's for the RMA calls. Two functions, so
	// that a run's count holds one kind of call: a ping-pong's (lat)
	// messages up to inject_size are injected, a stream's (bw, rate) sent.
	[[gnu::noinline]] ssize_t send_once(const uint8_t *buf, size_t len, uint64_t tag, void *ctx)
	{
		return tagged_ ? fi_tsend(ep_.get(), buf, len, desc_, peer_, tag, ctx)
			       : fi_send(ep_.get(), buf, len, desc_, peer_, ctx);
	}

	[[gnu::noinline]] ssize_t inject_once(const uint8_t *buf, size_t len, uint64_t tag)
	{
		return tagged_ ? fi_tinject(ep_.get(), buf, len, peer_, tag) : fi_inject(ep_.get(), buf, len, peer_);
	}

	// One message to the peer: injected when `may_inject` and it fits
	// (no completion), else sent with a slot (waits for a free one).
	void send_msg(const uint8_t *buf, size_t len, uint64_t tag, bool may_inject)
	{
		// An inject has no completion to wait for delivery with.
		const bool inject = may_inject && len <= inject_size_ && !(opt_.flags & kFlagDelivery);
		void *ctx = nullptr;
		if (!inject) {
			ctx = &tx_slots_[take_tx("a send completion to free an operation context", [this] { progress(); })]
				       .ctx;
			++tx_busy_;
		}
		post_retry(
			"room in the transmit queue",
			[&](const char *&call) -> ssize_t {
				++posts_;
				if (inject) {
					call = tagged_ ? "fi_tinject" : "fi_inject";
					return inject_once(buf, len, tag);
				}
				call = tagged_ ? "fi_tsend" : "fi_send";
				return send_once(buf, len, tag, ctx);
			},
			[this] { progress(); });
	}

	size_t wait_rx(const char *what)
	{
		progress_until(what, [this] { return !rx_ready_.empty(); }, [this] { progress(); });
		const size_t index = rx_ready_.front();
		rx_ready_.pop_front();
		return index;
	}

	void wait_tx_idle()
	{
		progress_until("the last send completions", [this] { return tx_busy_ == 0; }, [this] { progress(); });
	}

	// Prepares the expected contents of messages of `size` bytes.
	void expect(size_t size, uint8_t salt, bool verify_all)
	{
		expect_.clear();
		if (verify_all) {
			expect_.resize(size);
			for (size_t i = 0; i < size; ++i)
				expect_[i] = pattern_byte(i, salt);
		}
	}

	// Before posting a receive: the checked bytes get values the message
	// must overwrite.
	void spoil(uint8_t *buf, size_t size, uint8_t salt)
	{
		if (!expect_.empty()) {
			for (size_t i = 0; i < size; ++i)
				buf[i] = static_cast<uint8_t>(~expect_[i]);
			return;
		}
		buf[0] = static_cast<uint8_t>(~pattern_byte(0, salt));
		buf[size - 1] = static_cast<uint8_t>(~pattern_byte(size - 1, salt));
	}

	// Checks the receive of `index` (a data message of `size` bytes into
	// buf); records the first failure, the run goes on so that both sides
	// reach its end.
	void check(size_t index, const uint8_t *buf, size_t size, uint8_t salt, uint64_t seq)
	{
		const Slot &slot = rx_slots_[index];
		char what[200] = "";
		if (slot.len != size) {
			snprintf(what, sizeof what, "%zu bytes arrived, %zu sent", slot.len, size);
		} else if (tagged_ && slot.tag != kTagData) {
			snprintf(what, sizeof what, "tag 0x%" PRIx64 ", 0x%" PRIx64 " sent", slot.tag, kTagData);
		} else if (!expect_.empty()) {
			const auto mismatch = std::mismatch(buf, buf + size, expect_.begin());
			if (mismatch.first != buf + size) {
				const size_t at = static_cast<size_t>(mismatch.first - buf);
				snprintf(what, sizeof what, "byte %zu is %02x, expected %02x", at, buf[at], expect_[at]);
			}
		} else {
			for (const size_t at : {size_t{0}, size - 1})
				if (buf[at] != pattern_byte(at, salt)) {
					snprintf(what, sizeof what, "byte %zu is %02x, expected %02x", at, buf[at],
						 pattern_byte(at, salt));
					break;
				}
		}
		if (!what[0])
			return;
		if (!data_errors_++) {
			char text[300];
			snprintf(text, sizeof text, "message %" PRIu64 " of %zu bytes (%s) at the %s: %s", seq, size,
				 tagged_ ? "tagged" : "send", who(), what);
			data_error_ = text;
		}
	}

	std::string take_data_error()
	{
		std::string text;
		if (data_errors_) {
			text = "data check failed: " + data_error_;
			if (data_errors_ > 1)
				text += " (and " + std::to_string(data_errors_ - 1) + " more)";
		}
		data_error_.clear();
		data_errors_ = 0;
		return text;
	}

	void fill_tx(size_t size, uint8_t salt)
	{
		for (size_t i = 0; i < size; ++i)
			tx_area()[i] = pattern_byte(i, salt);
	}

	// FI_EP_MSG: waits for CM event `want` (from `want_fid` when given).
	ssize_t wait_cm(uint32_t want, fid_t want_fid, uint8_t *buf, size_t len, const char *what, double limit)
	{
		Watchdog wd(limit, what);
		for (;;) {
			uint32_t event = 0;
			const ssize_t rc = fi_eq_read(eq_.get(), &event, buf, len, 0);
			if (rc == -FI_EAGAIN) {
				usleep(50);
				wd.poll();
				continue;
			}
			if (rc == -FI_EAVAIL) {
				fi_eq_err_entry err{};
				if (fi_eq_readerr(eq_.get(), &err, 0) < 0)
					fail(kExitError, "%s: event queue error while waiting for %s", who(), what);
				fail(kExitError, "%s: event queue error while waiting for %s: %s (%d)", who(), what,
				     fi_strerror(err.err), err.err);
			}
			if (rc < 0)
				fail_call("fi_eq_read", rc);
			const auto *entry = reinterpret_cast<const fi_eq_entry *>(buf);
			if (event == want && (!want_fid || entry->fid == want_fid))
				return rc;
			fail(kExitError, "%s: unexpected event %u while waiting for %s", who(), event, what);
		}
	}

	// Progresses for `seconds`: the provider's own messages (rendezvous
	// acknowledgements, connection teardown) get done while both sides
	// still exist.
	void linger(double seconds)
	{
		const auto start = Clock::now();
		while (seconds_since(start) < seconds) {
			progress();
			usleep(100);
		}
	}
};

// ---------------------------------------------------------------- server

class Server : public Peer, public BenchServer {
public:
	explicit Server(const Options &opt) : Peer(opt, false) {}

	// Opens the fabric side and the control listener.
	ListenAddress listen() override
	{
		std::string node = opt_.bind_addr;
		if (node.empty() && opt_.role == Role::loopback) {
			// The client's fi_getinfo needs an address, not a wildcard:
			// the provider's first local address.
			InfoPtr h = hints(FI_FORMAT_UNSPEC);
			InfoPtr local = first_info(opt_, h.get(), hints_text(), nullptr, nullptr, 0);
			if (local->src_addr && local->src_addrlen >= sizeof(sockaddr_in))
				node = sockaddr_host(static_cast<const sockaddr *>(local->src_addr));
		}
		const char *fnode = node.empty() ? nullptr : node.c_str();
		// An FI_EP_MSG listener takes any free port: the client learns it
		// from the Hello.
		get_info(fnode, rdm_ ? nullptr : "0", fnode || !rdm_ ? FI_SOURCE : 0, FI_FORMAT_UNSPEC);
		open_fabric(info_.get(), !rdm_);
		if (rdm_) {
			open_domain(info_.get(), 2 * kMaxPostedRx);
			open_endpoint(info_.get());
		} else {
			open_passive();
			const int rc = fi_listen(pep_.get());
			if (rc)
				fail_call("fi_listen", rc);
		}
		hello_ = my_hello(rdm_ ? &ep_.get()->fid : &pep_.get()->fid, 0, 0);

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
		       info_->domain_attr->name + ", endpoint " + ep_type_name(opt_.ep_type);
	}

	void accept() override
	{
		ctl_ = tcp_accept(listener_, nullptr);
		listener_ = Socket();
		send_all(ctl_, &hello_, sizeof hello_);
		Hello peer = recv_peer_hello(ctl_);
		if (peer.max_size == 0 || peer.max_size > kLargestSize || peer.window == 0 || peer.window > 65536)
			fail(kExitError, "server: malformed hello from the client");
		const size_t max_size = round_up(std::max<size_t>(peer.max_size, kWarmupSize), kAlign);
		const size_t pool = std::max(max_size, std::min(kRxPoolMax, max_size * peer.window));
		// Receives posted at once: bounded by the receive queue and by the
		// CQ opened before the window was known (RDM).
		const size_t pool_slots = std::clamp<size_t>(
			std::min({size_t{peer.window}, pool / kAlign, kMaxPostedRx, info_->rx_attr->size - 1}), 1,
			kMaxPostedRx);
		const size_t tx_slots = 16;
		if (rdm_) {
			setup_region(max_size, pool, pool_slots, tx_slots);
			fill_wildcard(peer.addr_format, peer.addr, peer.addrlen, ctl_);
			insert_peer(peer);
		} else {
			uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
			wait_cm(FI_CONNREQ, nullptr, buf, sizeof buf, "the client's connection request", opt_.timeout);
			conn_info_.reset(reinterpret_cast<fi_eq_cm_entry *>(buf)->info);
			open_domain(conn_info_.get(), pool_slots + tx_slots + 64);
			setup_region(max_size, pool, pool_slots, tx_slots);
			open_endpoint(conn_info_.get());
			int rc = fi_accept(ep_.get(), nullptr, 0);
			if (rc)
				fail_call("fi_accept", rc);
			wait_cm(FI_CONNECTED, &ep_.get()->fid, buf, sizeof buf, "the connection to complete",
				opt_.timeout);
		}
		if (opt_.role == Role::server)
			fprintf(stderr, "vrma_bench: client connected (%s)\n", ep_type_name(opt_.ep_type));
	}

	// Runs the client's commands until it quits.
	void serve() override
	{
		const Idle idle = [this] { progress(); };
		for (;;) {
			Command cmd;
			recv_all(ctl_, &cmd, sizeof cmd, 0, "the client's next command", idle);
			if (cmd.magic != kCtlMagic)
				fail(kExitError, "server: malformed command");
			if (cmd.kind == kCmdQuit) {
				reply(0, "");
				goodbye();
				return;
			}
			// The pool holds at least one message of tx_bytes_.
			if ((cmd.kind != kCmdPingPong && cmd.kind != kCmdStream) || cmd.size == 0 ||
			    cmd.size > tx_bytes_ || cmd.count == 0 ||
			    (cmd.op != static_cast<uint32_t>(Op::send) && cmd.op != static_cast<uint32_t>(Op::tagged)))
				fail(kExitError, "server: malformed command (kind %u, size %" PRIu64 ")", cmd.kind, cmd.size);
			tagged_ = cmd.op == static_cast<uint32_t>(Op::tagged);
			if (tagged_ && !has_tagged_) {
				const char *text = "the server's endpoint has no FI_TAGGED (start it with -o tagged): not supported";
				reply(kExitUnsupported, text);
				fail(kExitUnsupported, "server: %s", text);
			}
			const uint8_t salt = static_cast<uint8_t>(cmd.salt);
			expect(cmd.size, salt, cmd.verify_all);
			if (cmd.kind == kCmdPingPong)
				pong(cmd.size, cmd.count, salt);
			else
				sink(cmd.size, cmd.count, cmd.window, salt);
			const std::string error = take_data_error();
			if (!error.empty()) {
				reply(kExitError, error);
				fail(kExitError, "server: %s", error.c_str());
			}
			reply(0, "");
		}
	}

private:
	Socket listener_, ctl_;
	Hello hello_{};

	// The client closes its fabric objects, then the control connection;
	// we keep progressing until then and close ours after. Hazard: ofi_rxm
	// over verbs (libfabric 1.17) crashed in fi_close of the endpoint, on
	// either side, after runs of 1 and 4 MiB messages when both sides
	// closed at once.
	void goodbye()
	{
		const Idle idle = [this] { progress(); };
		uint8_t byte;
		if (wait_readable(ctl_.fd(), opt_.timeout, idle) && recv(ctl_.fd(), &byte, 1, 0) > 0)
			fail(kExitError, "server: the client sent more after quitting");
		linger(0.05);
		close_fabric();
	}

	void reply(int status, const std::string &text)
	{
		Reply r{};
		r.magic = kCtlMagic;
		r.status = status;
		snprintf(r.text, sizeof r.text, "%s", text.c_str());
		send_all(ctl_, &r, sizeof r);
	}

	// Ping-pong: answers each message with one of the same size.
	void pong(size_t size, uint64_t count, uint8_t salt)
	{
		fill_tx(size, salt ^ kReplySalt);
		uint8_t *buf = pool_buf(0, size);
		spoil(buf, size, salt);
		post_recv(0, buf, size, kTagData);
		reply(0, "");
		for (uint64_t i = 0; i < count; ++i) {
			const size_t index = wait_rx("the client's message");
			check(index, buf, size, salt, i);
			if (i + 1 < count) {
				spoil(buf, size, salt);
				post_recv(0, buf, size, kTagData);
			}
			send_msg(tx_area(), size, kTagData, true);
		}
		wait_tx_idle();
	}

	// Stream: receives `count` messages with up to `window` receives
	// posted, then acknowledges the last one.
	void sink(size_t size, uint64_t count, size_t window, uint8_t salt)
	{
		const size_t bufs = std::min<uint64_t>(std::min(window, pool_count(size)), count);
		for (size_t b = 0; b < bufs; ++b) {
			spoil(pool_buf(b, size), size, salt);
			post_recv(b, pool_buf(b, size), size, kTagData);
		}
		uint64_t posted = bufs;
		reply(0, "");
		for (uint64_t received = 0; received < count; ++received) {
			const size_t index = wait_rx("the client's messages");
			check(index, pool_buf(index, size), size, salt, received);
			if (posted < count) {
				spoil(pool_buf(index, size), size, salt);
				post_recv(index, pool_buf(index, size), size, kTagData);
				++posted;
			}
		}
		memcpy(ack_out(), &count, sizeof count);
		send_msg(ack_out(), sizeof count, kTagAck, true);
		wait_tx_idle();
	}
};

// ---------------------------------------------------------------- client

class Client : public Peer, public ClientRunner {
public:
	explicit Client(const Options &opt) : Peer(opt, true), ClientRunner(opt) {}

	void connect(const std::string &host, const std::string &port, size_t max_size) override
	{
		ctl_ = tcp_connect(host, port, opt_.timeout);
		Hello server = recv_peer_hello(ctl_);
		if (!server.addrlen)
			fail(kExitError, "client: the server sent no fabric address");
		fill_wildcard(server.addr_format, server.addr, server.addrlen, ctl_);
		std::string node, service;
		const bool ip = ip_node(server.addr_format, server.addr, server.addrlen, node, service);
		get_info(ip ? node.c_str() : nullptr, ip ? service.c_str() : nullptr, 0, server.addr_format);
		set_window(info_->tx_attr->size);
		open_fabric(info_.get(), !rdm_);
		open_domain(info_.get(), window_ + 64);
		setup_region(max_size, round_up(std::max(max_size, kWarmupSize), kAlign), 1, window_ + 4);
		open_endpoint(info_.get());
		const Hello mine = my_hello(rdm_ ? &ep_.get()->fid : nullptr, max_size, static_cast<uint32_t>(window_));
		send_all(ctl_, &mine, sizeof mine);
		if (rdm_) {
			insert_peer(server);
		} else {
			int rc = fi_connect(ep_.get(), info_->dest_addr, nullptr, 0);
			if (rc)
				fail_call("fi_connect", rc);
			uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
			wait_cm(FI_CONNECTED, &ep_.get()->fid, buf, sizeof buf, "the connection to the server",
				opt_.timeout);
		}
		// Untimed round trips first: vrma's RDM endpoint (and rxm) make
		// their connection on the first send, and the first messages
		// also fault in buffers on both sides.
		tagged_ = opt_.op == Op::tagged;
		salt_ = 0x77;
		fill_tx(kWarmupSize, salt_);
		expect(kWarmupSize, static_cast<uint8_t>(salt_ ^ kReplySalt), opt_.verify_all);
		ping(kWarmupSize, kWarmupRoundTrips, nullptr, false);
	}

	RunInfo run_info() const override
	{
		RunInfo ri = common_run_info(info_.get(), opt_.op, opt_.mode);
		ri.endpoint = ep_type_name(opt_.ep_type);
		ri.data_progress = progress_name(info_->domain_attr->data_progress);
		ri.inject_size = inject_size_;
		return ri;
	}

	void quit() override
	{
		Command cmd{};
		cmd.magic = kCtlMagic;
		cmd.kind = kCmdQuit;
		send_all(ctl_, &cmd, sizeof cmd);
		await_reply("the server's goodbye");
		linger(0.1);
		if (!rdm_) {
			const int rc = fi_shutdown(ep_.get(), 0);
			if (rc)
				fprintf(stderr, "vrma_bench: fi_shutdown: %s (%d)\n", fi_strerror(-rc), rc);
		}
		// First our fabric objects, then the control connection, whose
		// end tells the server to close its own (see Server::goodbye).
		close_fabric();
		ctl_ = Socket();
	}

protected:
	std::optional<std::string> skip_reason(size_t size) const override
	{
		if (size > max_msg_size_)
			return too_large("max_msg_size", max_msg_size_);
		return std::nullopt;
	}

	void prepare(size_t size, uint8_t salt) override
	{
		salt_ = salt;
		fill_tx(size, salt_);
		// The client checks data only in ping-pong (the server's answers).
		expect(size, static_cast<uint8_t>(salt_ ^ kReplySalt), opt_.verify_all && lat());
	}

	// util/vrma-compare zeroes callgrind's counts on entering it
	// (--zero-before=*Client::timed_run*): with -I and --warmup 0 its one
	// call is the measured run, and what came before (the connection, made
	// by the first send, and the warm-up round trips) is left out.
	double timed_run(size_t size, uint64_t n, std::vector<double> *samples, bool show) override
	{
		return lat() ? ping(size, n, samples, show) : stream(size, n, samples, show);
	}

	uint64_t posts() const override { return posts_; }

private:
	Socket ctl_;
	uint8_t salt_ = 0;

	void command(uint32_t kind, size_t size, uint64_t count)
	{
		Command cmd{};
		cmd.magic = kCtlMagic;
		cmd.kind = kind;
		cmd.op = static_cast<uint32_t>(tagged_ ? Op::tagged : Op::send);
		cmd.window = static_cast<uint32_t>(window_);
		cmd.size = size;
		cmd.count = count;
		cmd.salt = salt_;
		cmd.verify_all = opt_.verify_all;
		send_all(ctl_, &cmd, sizeof cmd);
		await_reply("the server to get ready");
	}

	// Waits for the server's answer; its failure ends the run (in a
	// loopback run the server said why already).
	void await_reply(const char *what)
	{
		Reply r;
		recv_all(ctl_, &r, sizeof r, opt_.timeout, what, [this] { progress(); });
		if (r.magic != kCtlMagic)
			fail(kExitError, "client: malformed answer from the server");
		if (r.status == 0)
			return;
		r.text[sizeof r.text - 1] = '\0';
		if (opt_.role == Role::loopback)
			throw BenchError{r.status};
		fail(r.status, "the server reports: %s", r.text);
	}

	// After a run: our own data check, then the server's.
	void finish_run()
	{
		const std::string error = take_data_error();
		if (!error.empty()) {
			// The server's answer first: it is still to come.
			await_reply("the server's end of the run");
			fail(kExitError, "client: %s", error.c_str());
		}
		await_reply("the server's end of the run");
	}

	// Ping-pong of n messages of `size` bytes; samples get one-way times
	// (round trip / 2).
	double ping(size_t size, uint64_t n, std::vector<double> *samples, bool show)
	{
		const uint8_t reply_salt = static_cast<uint8_t>(salt_ ^ kReplySalt);
		uint8_t *buf = pool_buf(0, size);
		spoil(buf, size, reply_salt);
		post_recv(0, buf, size, kTagData);
		command(kCmdPingPong, size, n);
		const auto start = Clock::now();
		for (uint64_t i = 0; i < n; ++i) {
			const Stamp t0 = sample_clock_.now();
			send_msg(tx_area(), size, kTagData, true);
			const size_t index = wait_rx("the server's answer");
			lap(samples, t0, 2, show, i + 1);
			check(index, buf, size, reply_salt, i);
			if (i + 1 < n) {
				spoil(buf, size, reply_salt);
				post_recv(0, buf, size, kTagData);
			}
		}
		wait_tx_idle();
		const double elapsed = seconds_since(start);
		finish_run();
		return elapsed;
	}

	// n messages with window_ outstanding, timed up to the server's ack;
	// samples get the time per message of each window.
	double stream(size_t size, uint64_t n, std::vector<double> *samples, bool show)
	{
		memset(ack_in(), 0, sizeof(uint64_t));
		post_recv(ack_slot(), ack_in(), sizeof(uint64_t), kTagAck);
		command(kCmdStream, size, n);
		const auto post = [&](uint64_t, uint64_t burst) {
			for (uint64_t j = 0; j < burst; ++j)
				send_msg(tx_area(), size, kTagData, false);
		};
		const auto start = windowed_run(n, tx_done_, post, [this] { return progress(); }, samples, show,
						"send completions");
		const size_t index = wait_rx("the server's acknowledgement");
		const double elapsed = seconds_since(start);
		uint64_t acked = 0;
		memcpy(&acked, ack_in(), sizeof acked);
		const Slot &ack = rx_slots_[index];
		if (index != ack_slot() || ack.len != sizeof acked || (tagged_ && ack.tag != kTagAck) || acked != n)
			fail(kExitError, "client: the server's acknowledgement is wrong (%zu bytes, %" PRIu64 " messages, %" PRIu64 " sent)",
			     ack.len, acked, n);
		finish_run();
		return elapsed;
	}
};

} // namespace

int run_two_sided(const Options &opt)
{
	return run_roles<Server, Client>(opt);
}

} // namespace vrma_bench
