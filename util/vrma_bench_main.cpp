// vrma_bench: benchmark of libfabric providers over the public API only:
// RMA over FI_EP_MSG or FI_EP_RDM and atomics over FI_EP_RDM
// (vrma_bench_rma.cpp), two-sided messages over FI_EP_RDM or FI_EP_MSG
// (vrma_bench_twosided.cpp). This file: the command line.

#include "vrma_bench.h"

#include <getopt.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <exception>

namespace vrma_bench {
namespace {

const char kUsage[] =
	"usage: vrma_bench [-p PROVIDER] [-d DOMAIN] [--loopback | --server | -s ADDR] [options]\n"
	"       vrma_bench --plot FILE.png --json-in A.json [--json-in B.json ...]\n"
	"       vrma_bench [-p PROVIDER] --hub N --dir DIR [--rounds R] [--large N] [--large-rounds R] [--idle-wait S]\n"
	"       vrma_bench [-p PROVIDER] --peer-eps M --peer-base B --dir DIR\n"
	"\n"
	"roles:\n"
	"  --loopback            server and client in one process over the device's own address (default)\n"
	"  --server              serve one client on port -P, then exit\n"
	"  -s ADDR               client of the server at ADDR\n"
	"fabric:\n"
	"  -p NAME               provider (vrma, verbs, tcp, ...)\n"
	"  -d NAME               domain\n"
	"  -P PORT               server port (default 47600; loopback: a free port unless given);\n"
	"                        -e rdm and send/tagged: the TCP port of the control connection\n"
	"  --addr ADDR           address the server (or loopback) listens on (default: the provider's)\n"
	"  -e msg|rdm            endpoint type (default: msg for the RMA operations, rdm for send,\n"
	"                        tagged and the atomics; -e rdm alone means -o tagged; -e msg -o send\n"
	"                        is the two-sided floor over FI_EP_MSG; -e rdm -o write measures RMA\n"
	"                        over FI_EP_RDM as -e msg -o write does over FI_EP_MSG)\n"
	"benchmark (client and loopback):\n"
	"  -o OP                 RMA, over -e msg or -e rdm: write | read | writedata | inject_write\n"
	"                        (default write); two-sided messages: tagged (fi_tsend/fi_trecv) |\n"
	"                        send (fi_send/fi_recv); atomics on one FI_UINT64, over -e rdm, -m lat\n"
	"                        only, 8 bytes: fadd (fi_fetch_atomic FI_SUM) | cswap\n"
	"                        (fi_compare_atomic FI_CSWAP) | amax (fi_fetch_atomic FI_MAX)\n"
	"  -m MODE               bw | lat | rate (default bw; lat for the atomics)\n"
	"  -w N                  operations outstanding in bw and rate modes (default 64)\n"
	"  -S all|N[,N...]       sizes in bytes (suffixes k, m: KiB, MiB); all: powers of two up to\n"
	"                        --max-size (default: all for bw and lat, 8 for rate; the atomics: 8\n"
	"                        only)\n"
	"  --max-size N          largest size of -S all (default 4m)\n"
	"  -I N                  iterations per size (default: calibrated to take --duration)\n"
	"  --warmup N            warm-up iterations (default 10% of the iterations, at least 2;\n"
	"                        bw and rate modes also run one window before calibrating)\n"
	"  --duration SEC        time per size when -I is not given (default 1)\n"
	"  --timeout SEC         give up after SEC without progress (default 30)\n"
	"RMA flags (start the server with the same --delivery-complete, --commit-complete, --fence):\n"
	"  --delivery-complete   FI_DELIVERY_COMPLETE in tx op_flags and on every operation (also\n"
	"                        -e msg -o send: every message a confirmed fi_send, never injected)\n"
	"  --commit-complete     FI_COMMIT_COMPLETE likewise, caps FI_RMA_PMEM\n"
	"  --fence               FI_FENCE on every operation (caps FI_FENCE)\n"
	"  --more                FI_MORE on all but the last operation of each posting burst\n"
	"  --inject              FI_INJECT on every write (sizes up to inject_size)\n"
	"two-sided messages (-o tagged, -o send; give the server the same -e, and -o for -e msg):\n"
	"  --auto-progress       ask for FI_PROGRESS_AUTO data progress (default: the provider's choice)\n"
	"  --verify-all          check every byte of every message (default: length, tag, first and\n"
	"                        last byte of every message)\n"
	"output:\n"
	"  --json FILE           also write the results as JSON\n"
	"  --progress            progress line on stderr even when it is not a terminal\n"
	"  --plot FILE.png       plot --json-in files with gnuplot (no benchmark run)\n"
	"  --json-in FILE        a result file to plot (repeatable)\n"
	"many peers (FI_EP_RDM, caps FI_TAGGED; the peer processes take the hub's round options):\n"
	"  --hub N               one endpoint talking to N peer endpoints; prints what they cost it\n"
	"  --peer-eps M          a process of M peer endpoints (one CQ, one AV) ...\n"
	"  --peer-base B         ... numbered B .. B+M-1 (the processes' numbers tile 0 .. N-1)\n"
	"  --dir DIR             where they meet (rounds, hub.addr, peers-B.addr, go, done); empty for each run,\n"
	"                        shared by both hosts when the peers run on another\n"
	"  --rounds R            rounds of 8-byte messages after the first (default 10)\n"
	"  --large N             size of the large rounds' messages (default 64k: the rendezvous)\n"
	"  --large-rounds R      rounds of --large messages (default 2)\n"
	"  --idle-wait S         the hub: after its report, S seconds with nothing to send, then what it holds\n"
	"                        again (set FI_VRMA_RDM_IDLE_TIMEOUT below S to see unused connections go)\n"
	"\n"
	"RMA lat mode: the client writes SIZE bytes into the server's buffer, the server waits for\n"
	"the last byte (writedata: for the remote CQ data) and writes back; one-way latency = round\n"
	"trip / 2 (read: one read's completion time). bw and rate modes keep -w operations\n"
	"outstanding and check the data at the end of each size.\n"
	"RMA over -e rdm: the same runs and checks as over -e msg, on an FI_EP_RDM endpoint (caps\n"
	"FI_RMA and its four directions) with an FI_AV_TABLE address vector. The fabric addresses,\n"
	"regions and keys go over a TCP connection to port -P (never timed); before the first\n"
	"size, 100 untimed command round trips and a read make the connection (vrma's RDM endpoint\n"
	"connects on the first operation). The server: -e rdm and any RMA -o (the client's counts),\n"
	"e.g. vrma_bench -p vrma -e rdm -o write --server.\n"
	"Atomics (-o fadd, cswap, amax; -e rdm, caps FI_ATOMIC besides RMA's): the same connection,\n"
	"warm-up and target region as RMA over -e rdm; the server must be started with an atomic -o\n"
	"(any of the three: its endpoint needs FI_ATOMIC), e.g. vrma_bench -p vrma -e rdm -o fadd\n"
	"--server. lat: the client posts one atomic on an 8-byte word of the server's region, waits\n"
	"for its completion and checks the old value it fetched (fadd adds 0x100000001; cswap swaps\n"
	"between two values, comparing with the current one, so every swap succeeds; amax takes\n"
	"the maximum with a larger and then a smaller operand), then the next; latency = one\n"
	"atomic's completion time, a round trip, not halved (as for read, so that fadd and read\n"
	"figures compare). After the measured run the word is read back and checked. An operation\n"
	"that fi_fetch_atomicvalid/fi_compare_atomicvalid reports unsupported on FI_UINT64 ends\n"
	"with exit status 2: vrma with FI_VRMA_RDM_NATIVE_ATOMICS=1 (fadd and cswap as device\n"
	"atomics) reports amax so; without it vrma's target executes all three (emulated).\n"
	"tagged and send: the server's fabric address reaches the client over a TCP connection to\n"
	"port -P, which then carries the client's commands and the server's data check (never\n"
	"timed); each side inserts the other into an FI_AV_TABLE address vector (FI_EP_RDM) or\n"
	"connects (FI_EP_MSG). Before the first size, 100 untimed 8-byte round trips warm up the\n"
	"path (vrma's RDM endpoint connects on the first send). lat: ping-pong, fi_tinject/fi_inject\n"
	"up to inject_size, else fi_tsend/fi_send; one-way latency = round trip / 2. bw: -w sends\n"
	"outstanding, the receiver pre-posts its receives and acknowledges the last message, timed\n"
	"up to that ack; rate: the same with 8-byte messages (Mops/s: million messages per second).\n"
	"Buffers are registered only when the provider's mr_mode has FI_MR_LOCAL.\n"
	"Many peers: a round posts one tagged receive per partner, then sends one message to each\n"
	"(the hub to every peer endpoint, each peer endpoint to the hub) and waits for all of it;\n"
	"every completion's context, length, tag and first and last bytes are checked. The first\n"
	"round (8 bytes) makes the connections: its time is the setup time. The hub reads its\n"
	"process's VmRSS, VmPin, VmLck and threads (/proc/self/status), heap in use (mallinfo2),\n"
	"open descriptors and queue pairs (rdma resource show qp) after its endpoint and buffers\n"
	"exist and before the peers are inserted, and again after the last round: the difference\n"
	"per peer is what a peer costs. --json appends one line. Set FI_UNIVERSE_SIZE for\n"
	"providers that size their peer tables by it (verbs;ofi_rxm).\n"
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
	kOptAutoProgress,
	kOptVerifyAll,
	kOptHub,
	kOptPeerEps,
	kOptPeerBase,
	kOptDir,
	kOptRounds,
	kOptLarge,
	kOptLargeRounds,
	kOptIdleWait,
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

// The most peers one hub or one peer process takes: the AV and the
// buffers are sized by it.
constexpr size_t kMaxPeers = 65536;

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

// The atomics (-o fadd, cswap, amax): over -e rdm, latency only (the
// default), one FI_UINT64 (-S 8 or no -S).
void check_atomic_args(Options &opt, bool mode_given)
{
	const char *op = op_name(opt.op);
	if (opt.ep_type != EpType::rdm)
		usage_error("-o %s: the atomics are measured over -e rdm", op);
	if (!mode_given)
		opt.mode = Mode::lat;
	if (opt.mode != Mode::lat)
		usage_error("-o %s measures latency only (-m lat), not -m %s", op, mode_name(opt.mode));
	const bool only_8 =
		std::all_of(opt.sizes.begin(), opt.sizes.end(), [](size_t s) { return s == kAtomicSize; });
	if (opt.sizes_all || !only_8)
		usage_error("-o %s moves one 8-byte FI_UINT64: give -S 8 or no -S", op);
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
		{"auto-progress", no_argument, nullptr, kOptAutoProgress},
		{"verify-all", no_argument, nullptr, kOptVerifyAll},
		{"hub", required_argument, nullptr, kOptHub},
		{"peer-eps", required_argument, nullptr, kOptPeerEps},
		{"peer-base", required_argument, nullptr, kOptPeerBase},
		{"dir", required_argument, nullptr, kOptDir},
		{"rounds", required_argument, nullptr, kOptRounds},
		{"large", required_argument, nullptr, kOptLarge},
		{"large-rounds", required_argument, nullptr, kOptLargeRounds},
		{"idle-wait", required_argument, nullptr, kOptIdleWait},
		{"help", no_argument, nullptr, 'h'},
		{nullptr, 0, nullptr, 0},
	};
	Options opt;
	bool server = false, loopback = false, op_given = false, mode_given = false;
	std::optional<EpType> ep_type;
	std::string sizes_text;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":s:p:d:P:e:o:m:w:S:I:h", long_options, nullptr)) != -1) {
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
		case 'e':
			ep_type = parse_name(optarg, kAllEpTypes, ep_type_name);
			if (!ep_type)
				usage_error("-e: unknown endpoint type '%s' (msg, rdm)", optarg);
			break;
		case 'o': {
			const std::optional<Op> op = parse_name(optarg, kAllOps, op_name);
			if (!op)
				usage_error("-o: unknown operation '%s' (write, read, writedata, inject_write, tagged, send, fadd, cswap, amax)",
					    optarg);
			opt.op = *op;
			op_given = true;
			break;
		}
		case 'm': {
			const std::optional<Mode> mode = parse_name(optarg, kAllModes, mode_name);
			if (!mode)
				usage_error("-m: unknown mode '%s' (bw, lat, rate)", optarg);
			opt.mode = *mode;
			mode_given = true;
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
		case kOptAutoProgress: opt.auto_progress = true; break;
		case kOptVerifyAll: opt.verify_all = true; break;
		case kOptHub:
			opt.hub_peers = parse_count(optarg, "--hub");
			if (opt.hub_peers == 0 || opt.hub_peers > kMaxPeers)
				usage_error("--hub: %s peers is out of range (1 .. %zu)", optarg, kMaxPeers);
			break;
		case kOptPeerEps:
			opt.peer_eps = parse_count(optarg, "--peer-eps");
			if (opt.peer_eps == 0 || opt.peer_eps > kMaxPeers)
				usage_error("--peer-eps: %s endpoints is out of range (1 .. %zu)", optarg, kMaxPeers);
			break;
		case kOptPeerBase:
			opt.peer_base = parse_count(optarg, "--peer-base");
			if (opt.peer_base >= kMaxPeers)
				usage_error("--peer-base: %s is out of range (0 .. %zu)", optarg, kMaxPeers - 1);
			break;
		case kOptDir: opt.peers_dir = optarg; break;
		case kOptRounds: opt.peer_rounds = static_cast<uint32_t>(std::min<uint64_t>(parse_count(optarg, "--rounds"), 1u << 20)); break;
		case kOptLarge: opt.large = parse_size(optarg, "--large"); break;
		case kOptIdleWait: opt.idle_wait = static_cast<uint32_t>(std::min<uint64_t>(parse_count(optarg, "--idle-wait"), 3600)); break;
		case kOptLargeRounds: opt.large_rounds = static_cast<uint32_t>(std::min<uint64_t>(parse_count(optarg, "--large-rounds"), 1u << 20)); break;
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
	if (opt.hub_peers || opt.peer_eps) {
		if (opt.hub_peers && opt.peer_eps)
			usage_error("give one of --hub and --peer-eps");
		if (opt.peers_dir.empty())
			usage_error("--hub and --peer-eps need --dir DIR");
		if (server || loopback || !opt.server_addr.empty())
			usage_error("--hub and --peer-eps meet in --dir: no --server, --loopback or -s");
		if (opt.large < 8 || opt.large > (64u << 20))
			usage_error("--large: %zu is out of range (8 .. 64m)", opt.large);
		return opt;
	}
	if (!opt.peers_dir.empty())
		usage_error("--dir goes with --hub or --peer-eps");
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
	// -e rdm alone means tagged messages; send and tagged alone mean RDM.
	if (ep_type == EpType::rdm && !op_given)
		opt.op = Op::tagged;
	// RMA runs over either endpoint type (-e msg by default).
	opt.ep_type = ep_type.value_or(is_two_sided(opt.op) || is_atomic(opt.op) ? EpType::rdm : EpType::msg);
	if (is_atomic(opt.op))
		check_atomic_args(opt, mode_given);
	// Delivery-complete sends (issue 13 §1): -e msg -o send only.
	const bool dc_send = opt.op == Op::send && opt.ep_type == EpType::msg && opt.flags == kFlagDelivery;
	if ((is_two_sided(opt.op) || is_atomic(opt.op)) && opt.flags && !dc_send)
		usage_error("--%s applies to the RMA operations, not to -o %s",
			    flags_name(opt.flags).substr(0, flags_name(opt.flags).find(',')).c_str(),
			    op_name(opt.op));
	if (!is_two_sided(opt.op) && (opt.auto_progress || opt.verify_all))
		usage_error("%s applies to -o tagged and -o send", opt.auto_progress ? "--auto-progress" : "--verify-all");
	if (opt.op == Op::read && (opt.flags & kFlagInject)) {
		fprintf(stderr, "vrma_bench: --inject applies to writes, not to -o read: not supported\n");
		throw BenchError{kExitUnsupported};
	}
	return opt;
}

} // namespace
} // namespace vrma_bench

using namespace vrma_bench;

int main(int argc, char **argv)
{
	try {
		const Options opt = parse_args(argc, argv);
		if (!opt.plot_out.empty())
			return plot(opt);
		if (opt.hub_peers || opt.peer_eps)
			return run_peers(opt);
		return is_two_sided(opt.op) ? run_two_sided(opt) : run_rma(opt);
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
