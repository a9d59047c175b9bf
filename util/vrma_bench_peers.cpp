// vrma_bench: the many-peer mode. One FI_EP_RDM endpoint (the hub) talks
// to N peer endpoints, opened by one or more other processes (on this host
// or another), each holding several endpoints on one CQ and one AV. The
// hub measures what the peers cost it: the memory, pinned pages, heap, file
// descriptors and queue pairs its process holds after talking to all of
// them, against the same figures before the first peer was inserted, and
// how long the first exchange with every peer (which makes the
// connections) takes.
//
// The processes meet in a directory (--dir; shared by both hosts in the
// two-host test bed): the hub writes its rounds (which the peers take) and
// its fabric name to hub.addr, each
// peer process writes its endpoints' names to peers-BASE.addr, the hub
// writes go once it has all N and has taken its "before" figures, and
// done after its last round. Nothing of this is timed.
//
// A round: every peer endpoint and the hub post one tagged receive per
// partner (tag: the round in the high half, the peer's index in the low),
// then send one message to each; the round ends when all of them have
// completed. Every completion is checked: its context is one of the
// round's slots, seen once; its length and tag are the expected ones; the
// first and last bytes are the round's pattern. Round 0 (8 bytes) makes
// the connections and is the setup time; then --rounds of 8 bytes and
// --large-rounds of --large bytes (the rendezvous).

#include "vrma_bench.h"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_tagged.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>
#include <thread>

namespace vrma_bench {
namespace {

constexpr uint32_t kAddrFileMagic = 0x76627031; // "vbp1"

// A process's figures, read from /proc and the heap allocator.
struct Usage {
	long rss_kib = -1, pin_kib = -1, lck_kib = -1, threads = -1;
	long heap_bytes = -1, fds = -1, qps = -1;
};

long status_field(const std::string &status, const char *name)
{
	const size_t at = status.find(std::string("\n") + name + ":");
	if (at == std::string::npos)
		return -1;
	return strtol(status.c_str() + at + strlen(name) + 2, nullptr, 10);
}

// The queue pairs this process owns, from the rdma tool's JSON (iproute2):
// each names the thread that created it (a provider's progress thread
// often), so every thread of ours counts. -1 without the tool.
long count_qps()
{
	std::vector<std::string> keys;
	if (DIR *d = opendir("/proc/self/task")) {
		while (const dirent *e = readdir(d))
			if (e->d_name[0] != '.')
				keys.push_back(std::string("\"pid\":") + e->d_name);
		closedir(d);
	}
	FILE *p = popen("rdma -j resource show qp 2>/dev/null", "r");
	if (!p)
		return -1;
	std::string out;
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, p)) > 0)
		out.append(buf, n);
	if (pclose(p) != 0 || out.empty())
		return -1;
	long count = 0;
	for (const std::string &key : keys)
		for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1)) {
			const char next = out[at + key.size()];
			count += next == ',' || next == '}';
		}
	return count;
}

Usage read_usage()
{
	Usage u;
	std::ifstream f("/proc/self/status");
	std::stringstream ss;
	ss << "\n" << f.rdbuf();
	const std::string status = ss.str();
	u.rss_kib = status_field(status, "VmRSS");
	u.pin_kib = status_field(status, "VmPin");
	u.lck_kib = status_field(status, "VmLck");
	u.threads = status_field(status, "Threads");
	const struct mallinfo2 mi = mallinfo2();
	u.heap_bytes = static_cast<long>(mi.uordblks + mi.hblkhd);
	if (DIR *d = opendir("/proc/self/fd")) {
		long n = 0;
		while (const dirent *e = readdir(d))
			n += e->d_name[0] != '.';
		closedir(d);
		u.fds = n - 1; // the directory's own descriptor
	}
	u.qps = count_qps();
	return u;
}

// ---------------------------------------------------------------- the meeting directory

std::string path_in(const Options &opt, const std::string &name)
{
	return opt.peers_dir + "/" + name;
}

// Writes the names (each addrlen bytes) to `name` in the directory,
// atomically: a reader sees all of it or nothing.
void write_names(const Options &opt, const std::string &name, const std::vector<uint8_t> &names, uint32_t count,
		 uint32_t addrlen)
{
	const std::string path = path_in(opt, name), tmp = path + ".tmp";
	FILE *f = fopen(tmp.c_str(), "wb");
	if (!f)
		fail(kExitError, "%s: %s", tmp.c_str(), strerror(errno));
	const uint32_t head[3] = {kAddrFileMagic, count, addrlen};
	const bool ok = fwrite(head, sizeof head, 1, f) == 1 &&
			(names.empty() || fwrite(names.data(), names.size(), 1, f) == 1);
	if (fclose(f) != 0 || !ok || rename(tmp.c_str(), path.c_str()) != 0)
		fail(kExitError, "%s: cannot write: %s", path.c_str(), strerror(errno));
}

// Reads a names file; false when it is not there (yet).
bool read_names(const std::string &path, std::vector<uint8_t> &names, uint32_t &count, uint32_t &addrlen)
{
	FILE *f = fopen(path.c_str(), "rb");
	if (!f)
		return false;
	uint32_t head[3];
	bool ok = fread(head, sizeof head, 1, f) == 1 && head[0] == kAddrFileMagic && head[2] > 0 &&
		  head[2] <= kMaxAddr && head[1] <= (1u << 20);
	if (ok) {
		count = head[1];
		addrlen = head[2];
		names.resize(static_cast<size_t>(count) * addrlen);
		ok = names.empty() || fread(names.data(), names.size(), 1, f) == 1;
	}
	fclose(f);
	if (!ok)
		fail(kExitError, "%s: not a vrma_bench names file", path.c_str());
	return true;
}

// B of a file named peers-B.addr (B decimal digits); nothing for another.
std::optional<size_t> peers_file_base(const char *name)
{
	constexpr std::string_view kHead = "peers-", kTail = ".addr";
	const std::string_view n(name);
	if (n.size() <= kHead.size() + kTail.size() || n.substr(0, kHead.size()) != kHead ||
	    n.substr(n.size() - kTail.size()) != kTail)
		return std::nullopt;
	const std::string_view digits = n.substr(kHead.size(), n.size() - kHead.size() - kTail.size());
	if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos)
		return std::nullopt;
	return static_cast<size_t>(std::stoul(std::string(digits)));
}

bool file_exists(const std::string &path)
{
	struct stat st;
	return stat(path.c_str(), &st) == 0;
}

// Waits (polling every 5 ms, calling idle() between looks) until ready()
// holds; fails after --timeout.
template <class Ready, class Idle> void wait_for(const Options &opt, const char *what, Ready ready, Idle idle)
{
	const auto start = Clock::now();
	while (!ready()) {
		if (seconds_since(start) > opt.timeout)
			fail(kExitError, "nothing after %.0f s while waiting for %s (see --timeout)", opt.timeout, what);
		idle();
		std::this_thread::sleep_for(std::chrono::milliseconds(5));
	}
}

template <class Ready> void wait_for(const Options &opt, const char *what, Ready ready)
{
	wait_for(opt, what, ready, [] {});
}

// ---------------------------------------------------------------- a side

constexpr uint64_t tag_of(uint32_t round, uint32_t peer)
{
	return static_cast<uint64_t>(round) << 32 | peer;
}

inline uint8_t round_salt(uint32_t round, bool from_hub)
{
	return static_cast<uint8_t>(round * 2 + (from_hub ? 1 : 0));
}

// One process's fabric objects: the hub's one endpoint or a peer process's
// endpoints, all on one CQ and one AV; per partner one receive and one
// send slot. The member order is the teardown order reversed.
class Side {
public:
	Side(const Options &opt, bool hub) : opt_(opt), hub_(hub) {}

	// Opens the fabric, domain, CQ, AV and `eps` endpoints; buffers for
	// `partners` exchanges of up to --large bytes, registered (and
	// touched) so that they weigh in before the first figures are taken.
	void open(size_t eps, size_t partners)
	{
		InfoPtr hints = alloc_hints();
		hints->ep_attr->type = FI_EP_RDM;
		hints->caps = FI_TAGGED;
		hints->mode = FI_CONTEXT | FI_CONTEXT2;
		hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
		hints->domain_attr->av_type = FI_AV_TABLE;
		if (!opt_.provider.empty())
			hints->fabric_attr->prov_name = strdup(opt_.provider.c_str());
		if (!opt_.domain.empty())
			hints->domain_attr->name = strdup(opt_.domain.c_str());
		info_ = first_info(opt_, hints.get(), "FI_EP_RDM with FI_TAGGED", nullptr, nullptr, 0);
		int rc = fi_fabric(info_->fabric_attr, fabric_.out(), nullptr);
		if (rc)
			fail_call("fi_fabric", rc);
		rc = fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr);
		if (rc)
			fail_call("fi_domain", rc);
		fi_cq_attr cq_attr{};
		cq_attr.format = FI_CQ_FORMAT_TAGGED;
		cq_attr.size = std::max<size_t>(2 * partners + 64, info_->tx_attr->size);
		rc = fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr);
		if (rc)
			fail_call("fi_cq_open", rc);
		fi_av_attr av_attr{};
		av_attr.type = FI_AV_TABLE;
		av_attr.count = partners;
		rc = fi_av_open(domain_.get(), &av_attr, av_.out(), nullptr);
		if (rc)
			fail_call("fi_av_open", rc);
		eps_ = std::make_unique<Fid<fid_ep>[]>(eps);
		ep_count_ = eps;
		for (size_t k = 0; k < eps; ++k) {
			Fid<fid_ep> &ep = eps_[k];
			rc = fi_endpoint(domain_.get(), info_.get(), ep.out(), nullptr);
			if (rc)
				fail_call("fi_endpoint", rc);
			if ((rc = fi_ep_bind(ep.get(), &cq_.get()->fid, FI_TRANSMIT | FI_RECV)) ||
			    (rc = fi_ep_bind(ep.get(), &av_.get()->fid, 0)))
				fail_call("fi_ep_bind", rc);
			rc = fi_enable(ep.get());
			if (rc)
				fail_call("fi_enable", rc);
		}
		// Buffers: a receive area per partner, one send area (every send of
		// a round carries the same bytes).
		const size_t stride = opt_.large;
		bytes_ = (partners + 1) * stride;
		void *mem = nullptr;
		if (posix_memalign(&mem, 4096, bytes_))
			fail(kExitError, "out of memory for %zu bytes of buffers", bytes_);
		region_.reset(static_cast<uint8_t *>(mem));
		memset(region_.get(), 0, bytes_);
		rc = fi_mr_reg(domain_.get(), region_.get(), bytes_, FI_SEND | FI_RECV, 0, 1, 0, mr_.out(), nullptr);
		if (rc && (info_->domain_attr->mr_mode & FI_MR_LOCAL))
			fail_call("fi_mr_reg", rc);
		desc_ = rc ? nullptr : fi_mr_desc(mr_.get());
		rx_.assign(partners, Slot{});
		tx_.assign(partners, Slot{});
		addrs_.assign(partners, FI_ADDR_NOTAVAIL);
	}

	// The fabric names of the endpoints, addrlen bytes each.
	std::vector<uint8_t> names(uint32_t &addrlen)
	{
		std::vector<uint8_t> out;
		addrlen = 0;
		for (size_t k = 0; k < ep_count_; ++k) {
			Fid<fid_ep> &ep = eps_[k];
			uint8_t name[kMaxAddr];
			size_t len = sizeof name;
			const int rc = fi_getname(&ep.get()->fid, name, &len);
			if (rc)
				fail_call("fi_getname", rc);
			if (addrlen && len != addrlen)
				fail(kExitError, "fi_getname: names of %u and %zu bytes", addrlen, len);
			addrlen = static_cast<uint32_t>(len);
			out.insert(out.end(), name, name + len);
		}
		return out;
	}

	// Inserts `count` names as partners first .. first + count - 1.
	void insert(const std::vector<uint8_t> &names, uint32_t count, size_t first)
	{
		const int n = fi_av_insert(av_.get(), names.data(), count, addrs_.data() + first, 0, nullptr);
		if (n != static_cast<int>(count))
			fail(kExitError, "fi_av_insert: %d of %u addresses inserted", n, count);
	}

	// Inserts one name as every partner's (a peer process: the hub).
	void insert_for_all(const std::vector<uint8_t> &name)
	{
		insert(name, 1, 0);
		std::fill(addrs_.begin() + 1, addrs_.end(), addrs_[0]);
	}

	// Drives the provider's progress without taking a completion.
	void progress() { (void)fi_cq_read(cq_.get(), nullptr, 0); }

	// One round with every partner: partner i talks over endpoint
	// ep_of(i) (the hub: its one endpoint; a peer process: its i-th) to
	// AV entry i under tag id_of(i).
	template <class EpOf, class IdOf> void round(uint32_t round, size_t len, EpOf ep_of, IdOf id_of)
	{
		uint8_t *send = region_.get() + rx_.size() * opt_.large;
		const uint8_t salt = round_salt(round, hub_);
		send[0] = pattern_byte(0, salt);
		send[len - 1] = pattern_byte(len - 1, salt);
		for (auto &s : rx_)
			s = Slot{};
		for (auto &s : tx_)
			s = Slot{};
		const size_t n = rx_.size();
		size_t rx_posted = 0, tx_posted = 0;
		done_ = 0;
		Watchdog wd(opt_.timeout, hub_ ? "the hub's round" : "a peer process's round");
		// Posts with post(i) from `posted` on until the queue is full.
		auto post_all = [&](size_t &posted, const char *call, auto post) {
			bool moved = false;
			for (; posted < n; ++posted, moved = true) {
				const ssize_t rc = post(posted);
				if (rc == -FI_EAGAIN)
					break;
				if (rc)
					fail_call(call, rc);
			}
			return moved;
		};
		while (done_ < 2 * n) {
			// Receives first, so that a partner's message finds its buffer.
			bool moved = post_all(rx_posted, "fi_trecv", [&](size_t i) {
				return fi_trecv(ep_of(i), region_.get() + i * opt_.large, len, desc_, addrs_[i],
						tag_of(round, id_of(i)), 0, &rx_[i].ctx);
			});
			moved |= post_all(tx_posted, "fi_tsend", [&](size_t i) {
				return fi_tsend(ep_of(i), send, len, desc_, addrs_[i], tag_of(round, id_of(i)),
						&tx_[i].ctx);
			});
			if (reap(round, len, id_of) || moved)
				wd.progressed();
			else
				wd.poll();
		}
	}

	size_t partners() const { return rx_.size(); }
	fid_ep *ep(size_t i) const { return eps_[i].get(); }
	const fi_info *info() const { return info_.get(); }

private:
	struct Slot {
		fi_context2 ctx;
		bool done;
	};

	const Options &opt_;
	const bool hub_;
	InfoPtr info_;
	Fid<fid_fabric> fabric_;
	Fid<fid_domain> domain_;
	Fid<fid_cq> cq_;
	Fid<fid_av> av_;
	std::unique_ptr<uint8_t, FreeDeleter> region_;
	Fid<fid_mr> mr_;
	std::unique_ptr<Fid<fid_ep>[]> eps_; // closed first
	size_t ep_count_ = 0;
	size_t bytes_ = 0;
	void *desc_ = nullptr;
	std::vector<Slot> rx_, tx_;
	std::vector<fi_addr_t> addrs_;
	size_t done_ = 0;

	// Reads and checks completions; true when it read any.
	template <class IdOf> bool reap(uint32_t round, size_t len, IdOf id_of)
	{
		fi_cq_tagged_entry entries[64];
		const ssize_t got = fi_cq_read(cq_.get(), entries, 64);
		if (got == -FI_EAGAIN)
			return false;
		if (got == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			fi_cq_readerr(cq_.get(), &err, 0);
			char text[256] = "-";
			fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, text, sizeof text);
			fail(kExitError, "round %u: error completion: %s (%d), provider: %s", round,
			     fi_strerror(err.err), err.err, text);
		}
		if (got < 0)
			fail_call("fi_cq_read", got);
		const uint8_t peer_salt = round_salt(round, !hub_);
		for (ssize_t k = 0; k < got; ++k) {
			const fi_cq_tagged_entry &e = entries[k];
			if (const auto i = index_of_context(rx_, e.op_context)) {
				if (rx_[*i].done)
					fail(kExitError, "round %u: a second completion of the receive from partner %zu",
					     round, *i);
				rx_[*i].done = true;
				uint8_t *buf = region_.get() + *i * opt_.large;
				if (!(e.flags & FI_RECV) || e.len != len || e.tag != tag_of(round, id_of(*i)) ||
				    buf[0] != pattern_byte(0, peer_salt) || buf[len - 1] != pattern_byte(len - 1, peer_salt))
					fail(kExitError,
					     "round %u: partner %zu's message: flags %#llx, %zu bytes, tag %#llx, bytes %#x..%#x (expected %zu bytes, tag %#llx, %#x..%#x)",
					     round, *i, static_cast<unsigned long long>(e.flags), e.len,
					     static_cast<unsigned long long>(e.tag), buf[0], buf[len - 1], len,
					     static_cast<unsigned long long>(tag_of(round, id_of(*i))),
					     pattern_byte(0, peer_salt), pattern_byte(len - 1, peer_salt));
				buf[0] = buf[len - 1] = 0; // the next round must bring its own
			} else if (const auto j = index_of_context(tx_, e.op_context)) {
				if (tx_[*j].done)
					fail(kExitError, "round %u: a second completion of the send to partner %zu", round,
					     *j);
				if (!(e.flags & FI_SEND))
					fail(kExitError, "round %u: the send to partner %zu completed with flags %#llx",
					     round, *j, static_cast<unsigned long long>(e.flags));
				tx_[*j].done = true;
			} else {
				fail(kExitError, "round %u: a completion with a context of no operation (%p)", round,
				     e.op_context);
			}
			++done_;
		}
		return got > 0;
	}
};

// Runs the rounds; returns the seconds each kind took: setup (round 0),
// small (per round), large (per round).
struct Times {
	double setup = 0, small = 0, large = 0;
};

template <class EpOf, class IdOf> Times run_rounds(const Options &opt, Side &side, EpOf ep_of, IdOf id_of)
{
	Times t;
	auto start = Clock::now();
	side.round(0, 8, ep_of, id_of);
	t.setup = seconds_since(start);
	uint32_t r = 1;
	start = Clock::now();
	for (uint32_t k = 0; k < opt.peer_rounds; ++k)
		side.round(r++, 8, ep_of, id_of);
	if (opt.peer_rounds)
		t.small = seconds_since(start) / opt.peer_rounds;
	start = Clock::now();
	for (uint32_t k = 0; k < opt.large_rounds; ++k)
		side.round(r++, opt.large, ep_of, id_of);
	if (opt.large_rounds)
		t.large = seconds_since(start) / opt.large_rounds;
	return t;
}

std::string figure(long v, long div = 1)
{
	return v < 0 ? "n/a" : std::to_string(v / div);
}

std::string per_peer(long before, long after, size_t n, double scale = 1)
{
	if (before < 0 || after < 0 || n == 0)
		return "n/a";
	char text[32];
	snprintf(text, sizeof text, "%.1f", static_cast<double>(after - before) * scale / static_cast<double>(n));
	return text;
}

void report(const Options &opt, const Side &side, size_t n, const Usage &b, const Usage &a, const Times &t,
	    double av_seconds)
{
	const fi_info *info = side.info();
	printf("# vrma_bench hub: provider %s, domain %s, %zu peers, %u+%u rounds (8 B, %zu B)\n",
	       info->fabric_attr->prov_name, info->domain_attr->name, n, opt.peer_rounds, opt.large_rounds,
	       opt.large);
	printf("# setup (first exchange with every peer) %.3f s, AV insert %.3f s, 8 B round %.3f ms, %zu B round %.3f ms\n",
	       t.setup, av_seconds, t.small * 1e3, opt.large, t.large * 1e3);
	printf("%-12s %12s %12s %12s\n", "figure", "before", "after", "per peer");
	const struct {
		const char *name;
		long before, after;
		const char *unit;
		double scale;
	} rows[] = {
		{"VmRSS", b.rss_kib, a.rss_kib, "KiB", 1},     {"VmPin", b.pin_kib, a.pin_kib, "KiB", 1},
		{"VmLck", b.lck_kib, a.lck_kib, "KiB", 1},     {"heap", b.heap_bytes, a.heap_bytes, "KiB", 1.0 / 1024},
		{"fds", b.fds, a.fds, "", 1},                  {"QPs", b.qps, a.qps, "", 1},
		{"threads", b.threads, a.threads, "", 1},
	};
	for (const auto &r : rows) {
		const long div = r.scale < 1 ? 1024 : 1;
		char name[32];
		snprintf(name, sizeof name, "%s%s%s%s", r.name, *r.unit ? " (" : "", r.unit, *r.unit ? ")" : "");
		printf("%-12s %12s %12s %12s\n", name, figure(r.before, div).c_str(), figure(r.after, div).c_str(),
		       per_peer(r.before, r.after, n, r.scale).c_str());
	}
	fflush(stdout);
	if (opt.json_out.empty())
		return;
	FILE *f = fopen(opt.json_out.c_str(), "a");
	if (!f)
		fail(kExitError, "%s: %s", opt.json_out.c_str(), strerror(errno));
	fprintf(f,
		"{\"mode\":\"peers\",\"provider\":\"%s\",\"peers\":%zu,\"setup_s\":%.6f,\"av_insert_s\":%.6f,"
		"\"small_round_ms\":%.4f,\"large_round_ms\":%.4f,\"large\":%zu,"
		"\"rss_kib\":[%ld,%ld],\"pin_kib\":[%ld,%ld],\"lck_kib\":[%ld,%ld],\"heap_bytes\":[%ld,%ld],"
		"\"fds\":[%ld,%ld],\"qps\":[%ld,%ld],\"threads\":[%ld,%ld]}\n",
		info->fabric_attr->prov_name, n, t.setup, av_seconds, t.small * 1e3, t.large * 1e3, opt.large,
		b.rss_kib, a.rss_kib, b.pin_kib, a.pin_kib, b.lck_kib, a.lck_kib, b.heap_bytes, a.heap_bytes, b.fds,
		a.fds, b.qps, a.qps, b.threads, a.threads);
	fclose(f);
}

int run_hub(const Options &opt)
{
	const size_t n = opt.hub_peers;
	for (const char *stale : {"rounds", "hub.addr", "go", "done"})
		if (file_exists(path_in(opt, stale)))
			fail(kExitError, "%s holds an earlier run's %s: give the hub an empty --dir", opt.peers_dir.c_str(),
			     stale);
	Side side(opt, true);
	side.open(1, n);
	uint32_t addrlen = 0;
	const std::vector<uint8_t> name = side.names(addrlen);
	// The peers take the hub's rounds.
	const uint64_t r[3] = {opt.peer_rounds, opt.large_rounds, opt.large};
	write_names(opt, "rounds", std::vector<uint8_t>(reinterpret_cast<const uint8_t *>(r),
							 reinterpret_cast<const uint8_t *>(r) + sizeof r),
		    1, sizeof r);
	write_names(opt, "hub.addr", name, 1, addrlen);

	// The peers' names: peers-B.addr files until there are n, each read
	// once (a file appears whole: write_names renames it into place).
	struct Announced {
		uint32_t count;
		std::vector<uint8_t> names;
	};
	std::map<size_t, Announced> files; // by base
	size_t have = 0;
	wait_for(opt, "the peers' names", [&] {
		DIR *d = opendir(opt.peers_dir.c_str());
		if (!d)
			fail(kExitError, "%s: %s", opt.peers_dir.c_str(), strerror(errno));
		while (const dirent *e = readdir(d)) {
			const std::optional<size_t> base = peers_file_base(e->d_name);
			if (!base || files.count(*base))
				continue;
			Announced a;
			uint32_t len = 0;
			if (!read_names(path_in(opt, e->d_name), a.names, a.count, len))
				continue;
			if (len != addrlen)
				fail(kExitError, "%s: names of %u bytes, the hub's have %u", e->d_name, len, addrlen);
			have += a.count;
			files.emplace(*base, std::move(a));
		}
		closedir(d);
		if (have > n)
			fail(kExitError, "%zu peer endpoints announced, --hub %zu expected", have, n);
		return have == n;
	});
	// Partner i of the hub is peer endpoint i (base + index in its file);
	// the bases must tile 0..n-1.
	std::vector<bool> seen(n, false);
	for (const auto &[base, a] : files)
		for (uint32_t j = 0; j < a.count; ++j) {
			const size_t id = base + size_t{j};
			if (id >= n || seen[id])
				fail(kExitError, "peer endpoint %zu announced twice or out of range (--peer-base)", id);
			seen[id] = true;
		}

	const Usage before = read_usage();
	const auto av_start = Clock::now();
	for (const auto &[base, a] : files)
		side.insert(a.names, a.count, base);
	const double av_seconds = seconds_since(av_start);
	write_names(opt, "go", {}, 0, 1);
	fid_ep *ep = side.ep(0);
	const Times t = run_rounds(
		opt, side, [ep](size_t) { return ep; }, [](size_t i) { return static_cast<uint32_t>(i); });
	const Usage after = read_usage();
	report(opt, side, n, before, after, t, av_seconds);
	if (opt.idle_wait) {
		const auto idle_start = Clock::now();
		while (seconds_since(idle_start) < opt.idle_wait)
			side.progress();
		const Usage idle = read_usage();
		printf("# after %u s with nothing to send: VmRSS %s KiB (%s per peer over before), heap %s KiB (%s), QPs %s\n",
		       opt.idle_wait, figure(idle.rss_kib).c_str(), per_peer(before.rss_kib, idle.rss_kib, n).c_str(),
		       figure(idle.heap_bytes, 1024).c_str(), per_peer(before.heap_bytes, idle.heap_bytes, n, 1.0 / 1024).c_str(),
		       figure(idle.qps).c_str());
		fflush(stdout);
	}
	write_names(opt, "done", {}, 0, 1);
	return 0;
}

int run_peer_eps(const Options &given)
{
	const size_t m = given.peer_eps;
	std::vector<uint8_t> hub;
	uint32_t count = 0, addrlen = 0;
	wait_for(given, "the hub's name (hub.addr)",
		 [&] { return read_names(path_in(given, "hub.addr"), hub, count, addrlen); });
	if (count != 1)
		fail(kExitError, "hub.addr holds %u names", count);
	// The rounds are the hub's (written before hub.addr).
	Options opt = given;
	std::vector<uint8_t> rounds;
	uint32_t rcount = 0, rlen = 0;
	if (!read_names(path_in(opt, "rounds"), rounds, rcount, rlen) || rcount != 1 || rlen != 3 * sizeof(uint64_t))
		fail(kExitError, "%s: the hub's rounds are missing", path_in(opt, "rounds").c_str());
	uint64_t r[3];
	memcpy(r, rounds.data(), sizeof r);
	if (r[2] < 8 || r[2] > (64u << 20) || r[0] > (1u << 20) || r[1] > (1u << 20))
		fail(kExitError, "%s: rounds out of range", path_in(opt, "rounds").c_str());
	opt.peer_rounds = static_cast<uint32_t>(r[0]);
	opt.large_rounds = static_cast<uint32_t>(r[1]);
	opt.large = static_cast<size_t>(r[2]);
	Side side(opt, false);
	side.open(m, m);
	uint32_t mine = 0;
	const std::vector<uint8_t> names = side.names(mine);
	if (mine != addrlen)
		fail(kExitError, "the hub's name has %u bytes, ours %u", addrlen, mine);
	// Every endpoint talks to the hub.
	side.insert_for_all(hub);
	write_names(opt, "peers-" + std::to_string(opt.peer_base) + ".addr", names, static_cast<uint32_t>(m),
		    addrlen);
	wait_for(opt, "the hub's go", [&] { return file_exists(path_in(opt, "go")); });
	const size_t base = opt.peer_base;
	run_rounds(
		opt, side, [&side](size_t i) { return side.ep(i); },
		[base](size_t i) { return static_cast<uint32_t>(base + i); });
	// The hub's last sends may still need this side's progress: keep
	// reading until it says done.
	wait_for(
		opt, "the hub's done", [&] { return file_exists(path_in(opt, "done")); }, [&] { side.progress(); });
	return 0;
}

} // namespace

int run_peers(const Options &opt)
{
	return guarded(opt.hub_peers ? "hub" : "peer", [&] { return opt.hub_peers ? run_hub(opt) : run_peer_eps(opt); });
}

} // namespace vrma_bench
