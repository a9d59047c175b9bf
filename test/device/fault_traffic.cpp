// fault_traffic: checked tagged traffic over FI_EP_RDM while the link or a
// host fails (test/device/run-2hosts.sh). Two roles:
//
//   fault_traffic serve --addr-file F [--node IP --port P] [--seconds S]
//       [--tolerate-errors 1]
//       opens an RDM endpoint (on IP:P when given, so that a restarted
//       server has the same address), writes its name to F and takes
//       messages until a STOP names the range it must have had; then checks
//       it had each of those once and none after them, every byte right
//       (messages before the range, sent before a failure, may be missing
//       but not doubled; error completions of receives whose data was
//       lost with a connection fail it, unless tolerated). Exit 0 or 1.
//
//   fault_traffic send --to F0[,F1...] --seconds S [--window W]
//       [--sizes N,...] [--must-fail I --fault-file T --fail-within MS]
//       [--reconnect I=F --reconnect-count K] [--drain-seconds S]
//       [--ready-file R] [--trace 1]
//       keeps W sends in flight to every target for S seconds, sizes in
//       turn (eager and rendezvous), and checks that every send ends with
//       exactly one completion, that the targets other than I see no error
//       and go on completing after I's failure, and that I (when named)
//       fails: all its sends end, the first error within MS of the time
//       written in T (seconds since the epoch, written by the script when
//       it caused the fault). --reconnect reads target I's address again
//       from F (a restarted server; the same address reuses I's fi_addr)
//       and sends K more, which must all succeed. R is written once every
//       target has completed a send (the script's cue for the fault). Then
//       a STOP to every
//       target that did not fail (and the reconnected one): each server
//       checks what it got.
//
//   fault_traffic answer --addr-file F [--seconds S]
//   fault_traffic ask --to F
//       the last word: the asker sends its name to F's endpoint, receives
//       the answerer's checked answer and closes its endpoint at once; the
//       answerer exits 0 when its answer's send completed successfully, 1
//       on an error completion (printed) or none within S seconds. The
//       script drops the asker's acknowledgments: the answer arrives, its
//       acknowledgment does not, and only the asker's Close tells the
//       answerer it was received before the disconnect flushes it.
//
// A message: a header (its kind, sequence number, length; a STOP's range)
// and a body whose byte i is a function of the sequence number and i.

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x66747231; // "ftr1"
constexpr uint64_t kTagData = 1, kTagStop = 2;
constexpr size_t kMaxSize = 65536;
constexpr size_t kServerRx = 16;

struct Hdr {
	uint32_t magic;
	uint32_t kind; // kTagData or kTagStop
	uint64_t seq;
	uint64_t len;
	uint64_t base, count; // STOP: the sequence numbers [base, base + count) must have arrived
};
static_assert(sizeof(Hdr) == 40);

uint8_t pattern(uint64_t seq, size_t i)
{
	return static_cast<uint8_t>(seq * 131 + i * 7 + (i >> 8));
}

[[noreturn]] void die(const char *what, long rc)
{
	fprintf(stderr, "fault_traffic: %s: %ld (%s)\n", what, rc, fi_strerror(static_cast<int>(-rc)));
	exit(2);
}

void check(const char *what, long rc)
{
	if (rc)
		die(what, rc);
}

// The steady clock's time SECONDS from now.
Clock::time_point after(double seconds)
{
	return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double now_epoch()
{
	return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One RDM endpoint with its CQ, AV and one registered buffer.
struct Endpoint {
	fi_info *info = nullptr;
	fid_fabric *fabric = nullptr;
	fid_domain *domain = nullptr;
	fid_ep *ep = nullptr;
	fid_cq *cq = nullptr;
	fid_av *av = nullptr;
	fid_mr *mr = nullptr;
	std::vector<uint8_t> buf;
	void *desc = nullptr;

	Endpoint(const char *node, const char *service, size_t bytes)
	{
		fi_info *hints = fi_allocinfo();
		hints->ep_attr->type = FI_EP_RDM;
		hints->caps = FI_TAGGED;
		hints->mode = FI_CONTEXT | FI_CONTEXT2;
		hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
		hints->fabric_attr->prov_name = strdup("vrma");
		check("fi_getinfo", fi_getinfo(FI_VERSION(1, 17), node, service, node ? FI_SOURCE : 0, hints, &info));
		fi_freeinfo(hints);
		check("fi_fabric", fi_fabric(info->fabric_attr, &fabric, nullptr));
		check("fi_domain", fi_domain(fabric, info, &domain, nullptr));
		fi_cq_attr cq_attr{};
		cq_attr.format = FI_CQ_FORMAT_TAGGED;
		cq_attr.wait_obj = FI_WAIT_UNSPEC;
		cq_attr.size = 1024;
		check("fi_cq_open", fi_cq_open(domain, &cq_attr, &cq, nullptr));
		fi_av_attr av_attr{};
		av_attr.type = FI_AV_TABLE;
		check("fi_av_open", fi_av_open(domain, &av_attr, &av, nullptr));
		check("fi_endpoint", fi_endpoint(domain, info, &ep, nullptr));
		check("fi_ep_bind cq", fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
		check("fi_ep_bind av", fi_ep_bind(ep, &av->fid, 0));
		check("fi_enable", fi_enable(ep));
		buf.resize(bytes);
		check("fi_mr_reg", fi_mr_reg(domain, buf.data(), buf.size(), FI_SEND | FI_RECV, 0, 0, 0, &mr, nullptr));
		desc = fi_mr_desc(mr);
	}
	~Endpoint()
	{
		fi_close(&mr->fid);
		fi_close(&ep->fid);
		fi_close(&av->fid);
		fi_close(&cq->fid);
		fi_close(&domain->fid);
		fi_close(&fabric->fid);
		fi_freeinfo(info);
	}
	std::string name() const
	{
		char a[256];
		size_t len = sizeof(a);
		check("fi_getname", fi_getname(&ep->fid, a, &len));
		return std::string(a, len);
	}
};

std::string hex(const std::string &s)
{
	std::string out;
	char b[3];
	for (unsigned char c : s) {
		snprintf(b, sizeof(b), "%02x", c);
		out += b;
	}
	return out;
}

std::string unhex(const std::string &h)
{
	std::string out;
	for (size_t i = 0; i + 1 < h.size(); i += 2)
		out += static_cast<char>(strtoul(h.substr(i, 2).c_str(), nullptr, 16));
	return out;
}

// Writes NAME's hex to PATH atomically (a reader sees all of it or nothing).
void write_addr(const std::string &path, const std::string &name)
{
	const std::string tmp = path + ".tmp";
	std::ofstream(tmp) << hex(name) << "\n";
	if (rename(tmp.c_str(), path.c_str()))
		die("rename", -errno);
}

// Waits up to SECONDS for PATH; empty when it did not appear.
std::string read_addr(const std::string &path, int seconds)
{
	const Clock::time_point end = Clock::now() + std::chrono::seconds(seconds);
	while (Clock::now() < end) {
		std::ifstream f(path);
		std::string h;
		if (f >> h && !h.empty())
			return unhex(h);
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
	}
	return {};
}

struct Args {
	std::map<std::string, std::string> kv;
	std::string get(const std::string &k, const std::string &def = "") const
	{
		auto it = kv.find(k);
		return it == kv.end() ? def : it->second;
	}
	long num(const std::string &k, long def) const
	{
		auto it = kv.find(k);
		return it == kv.end() ? def : strtol(it->second.c_str(), nullptr, 10);
	}
};

std::vector<std::string> split(const std::string &s, char sep)
{
	std::vector<std::string> out;
	std::stringstream ss(s);
	std::string item;
	while (std::getline(ss, item, sep))
		if (!item.empty())
			out.push_back(item);
	return out;
}

// ---- serve ----

int serve(const Args &a)
{
	const std::string node = a.get("--node"), port = a.get("--port");
	Endpoint e(node.empty() ? nullptr : node.c_str(), port.empty() ? nullptr : port.c_str(),
		   kServerRx * kMaxSize);
	write_addr(a.get("--addr-file"), e.name());
	std::vector<fi_context2> ctx(kServerRx);
	auto post = [&](size_t i) {
		ssize_t rc;
		while ((rc = fi_trecv(e.ep, e.buf.data() + i * kMaxSize, kMaxSize, e.desc, FI_ADDR_UNSPEC, 0,
				      ~0ULL, &ctx[i])) == -FI_EAGAIN)
			fi_cq_read(e.cq, nullptr, 0);
		check("fi_trecv", rc);
	};
	for (size_t i = 0; i < kServerRx; i++)
		post(i);
	std::vector<uint8_t> seen; // seen[seq]: times message seq arrived
	uint64_t data = 0, bad = 0, errors = 0;
	const bool tolerate = a.num("--tolerate-errors", 0) != 0;
	bool stopped = false;
	uint64_t base = 0, count = 0;
	const Clock::time_point end = Clock::now() + std::chrono::seconds(a.num("--seconds", 300));
	Clock::time_point stop_deadline{};
	auto done = [&] {
		uint64_t got = 0;
		for (uint64_t s = base; s < base + count && s < seen.size(); s++)
			got += seen[s] != 0;
		return got == count;
	};
	while (Clock::now() < end && !(stopped && (done() || Clock::now() > stop_deadline))) {
		fi_cq_tagged_entry c[8];
		const ssize_t n = fi_cq_sread(e.cq, c, 8, nullptr, 200);
		if (n == -FI_EAGAIN)
			continue;
		if (n == -FI_EAVAIL) {
			// A receive whose message came over a connection that failed
			// (its data was being read when the link went): with
			// --tolerate-errors 1 an error, counted, and the buffer posted
			// again; without, a failure.
			fi_cq_err_entry err{};
			if (fi_cq_readerr(e.cq, &err, 0) != 1)
				continue;
			printf("serve: error completion: %s (prov_errno %d)\n", fi_strerror(err.err), err.prov_errno);
			const size_t i = static_cast<fi_context2 *>(err.op_context) - ctx.data();
			if (i >= kServerRx) {
				bad++;
				continue;
			}
			errors++;
			if (!tolerate)
				bad++;
			post(i);
			continue;
		}
		if (n < 0)
			die("fi_cq_sread", n);
		for (ssize_t k = 0; k < n; k++) {
			const size_t i = static_cast<fi_context2 *>(c[k].op_context) - ctx.data();
			if (i >= kServerRx || !(c[k].flags & FI_RECV)) {
				printf("serve: completion of an unknown context or not a receive\n");
				bad++;
				continue;
			}
			const uint8_t *m = e.buf.data() + i * kMaxSize;
			Hdr h;
			memcpy(&h, m, sizeof(h));
			if (c[k].len < sizeof(h) || h.magic != kMagic || h.len != c[k].len || c[k].tag != h.kind) {
				printf("serve: malformed message (len %zu, tag %" PRIu64 ")\n", c[k].len, c[k].tag);
				bad++;
			} else if (h.kind == kTagStop) {
				stopped = true;
				base = h.base;
				count = h.count;
				stop_deadline = Clock::now() + std::chrono::seconds(20);
			} else {
				for (size_t b = sizeof(h); b < h.len; b++)
					if (m[b] != pattern(h.seq, b)) {
						printf("serve: message %" PRIu64 " byte %zu is %u, not %u\n", h.seq, b, m[b],
						       pattern(h.seq, b));
						bad++;
						break;
					}
				if (h.seq >= (1u << 24)) {
					bad++;
				} else {
					if (seen.size() <= h.seq)
						seen.resize(h.seq + 1);
					if (seen[h.seq]++)
						printf("serve: message %" PRIu64 " arrived twice\n", h.seq), bad++;
				}
				data++;
			}
			post(i);
		}
	}
	uint64_t extra = 0, missing = 0;
	for (uint64_t s = 0; s < seen.size(); s++) {
		if (seen[s] && s >= base + count)
			extra++;
		if (!seen[s] && s >= base && s < base + count)
			missing++;
	}
	if (base + count > seen.size())
		missing += base + count - std::max<uint64_t>(seen.size(), base);
	printf("serve: %" PRIu64 " messages, STOP %s [%" PRIu64 ", %" PRIu64 "), %" PRIu64 " missing, %" PRIu64
	       " after it, %" PRIu64 " error completions, %" PRIu64 " bad\n",
	       data, stopped ? "for" : "never came:", base, base + count, missing, extra, errors, bad);
	return stopped && !missing && !extra && !bad ? 0 : 1;
}

// ---- send ----

struct Target {
	std::string file, name;
	fi_addr_t addr = FI_ADDR_NOTAVAIL;
	uint64_t next_seq = 0, ok = 0, errors = 0, in_flight = 0;
	uint64_t base = 0; // the STOP's range starts here (the reconnection's first)
	bool failed = false;
	double last_ok = 0, first_error = 0, last_end = 0, max_gap = 0;
};

struct Slot {
	fi_context2 ctx;
	size_t target;
	uint64_t seq;
	bool busy;
};

struct Sender {
	Endpoint &e;
	std::vector<Target> &t;
	std::vector<Slot> slots;
	std::vector<size_t> sizes;
	size_t window;
	bool trace = false; // a line a second: each target's completions/in flight
	uint64_t doubled = 0, unknown = 0;

	Sender(Endpoint &ep, std::vector<Target> &targets, size_t w, std::vector<size_t> sz)
		: e(ep), t(targets), slots(targets.size() * w), sizes(std::move(sz)), window(w)
	{
	}

	uint8_t *slot_buf(size_t s) { return e.buf.data() + s * kMaxSize; }

	// Posts message KIND to target I from slot S; false on -FI_EAGAIN.
	bool post(size_t s, size_t i, uint64_t kind, size_t len, uint64_t base = 0, uint64_t count = 0)
	{
		Target &tg = t[i];
		uint8_t *m = slot_buf(s);
		const Hdr h{kMagic, static_cast<uint32_t>(kind), kind == kTagData ? tg.next_seq : 0, len, base, count};
		memcpy(m, &h, sizeof(h));
		for (size_t b = sizeof(h); b < len; b++)
			m[b] = pattern(h.seq, b);
		Slot &sl = slots[s];
		sl.target = i;
		sl.seq = h.seq;
		const ssize_t rc = fi_tsend(e.ep, m, len, e.desc, tg.addr, kind, &sl.ctx);
		if (rc == -FI_EAGAIN)
			return false;
		if (rc) {
			// Refused at once: that is this send's one end.
			printf("send: fi_tsend to target %zu: %s (%zd)\n", i, fi_strerror(static_cast<int>(-rc)), rc);
			note_error(tg);
			return true;
		}
		sl.busy = true;
		tg.in_flight++;
		if (kind == kTagData)
			tg.next_seq++;
		return true;
	}

	void note_error(Target &tg)
	{
		const double now = now_epoch();
		if (!tg.errors)
			tg.first_error = now;
		tg.errors++;
		tg.failed = true;
		tg.last_end = now;
	}

	// Reaps what has completed; waits up to MS for the first.
	void reap(int ms)
	{
		fi_cq_tagged_entry c[16];
		const ssize_t n = fi_cq_sread(e.cq, c, 16, nullptr, ms);
		if (n == -FI_EAGAIN)
			return;
		if (n == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			if (fi_cq_readerr(e.cq, &err, 0) != 1)
				return;
			if (Slot *sl = slot_of(err.op_context)) {
				Target &tg = t[sl->target];
				if (!tg.errors)
					printf("send: target %zu: first error completion: %s (err %d, prov_errno %d)\n",
					       sl->target, fi_strerror(err.err), err.err, err.prov_errno);
				end(*sl);
				note_error(tg);
			}
			return;
		}
		if (n < 0)
			die("fi_cq_sread", n);
		const double now = now_epoch();
		for (ssize_t k = 0; k < n; k++) {
			Slot *sl = slot_of(c[k].op_context);
			if (!sl)
				continue;
			Target &tg = t[sl->target];
			if (!(c[k].flags & FI_SEND) || !(c[k].flags & FI_TAGGED)) {
				printf("send: completion flags 0x%" PRIx64 " are not a tagged send's\n", c[k].flags);
				unknown++;
			}
			end(*sl);
			if (tg.last_ok > 0)
				tg.max_gap = std::max(tg.max_gap, now - tg.last_ok);
			tg.last_ok = now;
			tg.last_end = now;
			tg.ok++;
		}
	}

	Slot *slot_of(void *ctx)
	{
		auto *p = static_cast<Slot *>(ctx);
		if (p < slots.data() || p >= slots.data() + slots.size()) {
			printf("send: a completion for a context that is not ours\n");
			unknown++;
			return nullptr;
		}
		if (!p->busy) {
			printf("send: a second completion for one send (target %zu, message %" PRIu64 ")\n", p->target,
			       p->seq);
			doubled++;
			return nullptr;
		}
		return p;
	}

	void end(Slot &sl)
	{
		sl.busy = false;
		t[sl.target].in_flight--;
	}

	uint64_t in_flight() const
	{
		uint64_t n = 0;
		for (const Target &tg : t)
			n += tg.in_flight;
		return n;
	}

	// Posts data messages to target I into its free slots while it has not
	// failed and fewer than LIMIT went since its base, until the device
	// pushes back.
	void fill(size_t i, uint64_t limit)
	{
		Target &tg = t[i];
		for (size_t w = 0; w < window && !tg.failed && tg.next_seq - tg.base < limit; w++) {
			const size_t s = i * window + w;
			if (!slots[s].busy && !post(s, i, kTagData, sizes[tg.next_seq % sizes.size()]))
				break;
		}
	}

	// Keeps WINDOW data messages in flight to every target that has not
	// failed, for SECONDS; writes READY_FILE (when named) once every target
	// has completed one (its connection is up).
	void stream(double seconds, const std::string &ready_file)
	{
		const Clock::time_point end_at = after(seconds);
		bool ready = ready_file.empty();
		Clock::time_point next_trace = Clock::now();
		while (Clock::now() < end_at) {
			if (trace && Clock::now() >= next_trace) {
				next_trace += std::chrono::seconds(1);
				printf("trace %.1f:", now_epoch());
				for (const Target &tg : t)
					printf(" %" PRIu64 "/%" PRIu64, tg.ok, tg.in_flight);
				printf("\n");
			}
			if (!ready && std::all_of(t.begin(), t.end(), [](const Target &tg) { return tg.ok > 0; })) {
				std::ofstream(ready_file) << now_epoch() << "\n";
				ready = true;
			}
			for (size_t i = 0; i < t.size(); i++)
				fill(i, UINT64_MAX);
			reap(50);
		}
	}

	// Waits up to SECONDS for every send to end; false if some did not.
	bool drain(double seconds)
	{
		const Clock::time_point end_at = after(seconds);
		while (in_flight() && Clock::now() < end_at)
			reap(100);
		return in_flight() == 0;
	}
};

int send(const Args &a)
{
	std::vector<Target> t;
	for (const std::string &f : split(a.get("--to"), ','))
		t.emplace_back().file = f;
	if (t.empty()) {
		fprintf(stderr, "send: --to names no target\n");
		return 2;
	}
	const size_t window = static_cast<size_t>(a.num("--window", 8));
	std::vector<size_t> sizes;
	for (const std::string &s : split(a.get("--sizes", "4096,65536"), ','))
		sizes.push_back(std::clamp<size_t>(strtoul(s.c_str(), nullptr, 10), sizeof(Hdr), kMaxSize));
	const long must_fail = a.num("--must-fail", -1);
	Endpoint e(nullptr, nullptr, t.size() * window * kMaxSize);
	for (Target &tg : t) {
		tg.name = read_addr(tg.file, 60);
		if (tg.name.empty()) {
			fprintf(stderr, "send: no address in %s after 60 s\n", tg.file.c_str());
			return 2;
		}
		if (fi_av_insert(e.av, tg.name.data(), 1, &tg.addr, 0, nullptr) != 1)
			die("fi_av_insert", -FI_EINVAL);
	}
	Sender s(e, t, window, sizes);
	s.trace = a.num("--trace", 0) != 0;
	const double start = now_epoch();
	s.stream(static_cast<double>(a.num("--seconds", 10)), a.get("--ready-file"));
	bool ok = s.drain(static_cast<double>(a.num("--drain-seconds", 30)));
	int rc = 0;
	if (!ok) {
		printf("FAILED: %" PRIu64 " sends never completed\n", s.in_flight());
		rc = 1;
	}
	// The fault's time, written by the script.
	double fault = 0;
	if (const std::string ff = a.get("--fault-file"); !ff.empty())
		std::ifstream(ff) >> fault;
	for (size_t i = 0; i < t.size(); i++) {
		const Target &tg = t[i];
		printf("send: target %zu: %" PRIu64 " sent, %" PRIu64 " completed, %" PRIu64
		       " errors; longest gap between completions %.2f s",
		       i, tg.next_seq, tg.ok, tg.errors, tg.max_gap);
		if (tg.failed && fault > 0)
			printf("; first error %.2f s after the fault, last send ended %.2f s after it",
			       tg.first_error - fault, tg.last_end - fault);
		printf("\n");
		if (static_cast<long>(i) == must_fail) {
			if (!tg.failed) {
				printf("FAILED: target %zu did not fail\n", i);
				rc = 1;
			} else if (fault > 0 && (tg.last_end - fault) * 1000 > a.num("--fail-within", 1 << 30)) {
				printf("FAILED: target %zu's sends ended %.0f ms after the fault, over --fail-within %ld\n", i,
				       (tg.last_end - fault) * 1000, a.num("--fail-within", 0));
				rc = 1;
			} else if (fault > 0 && tg.first_error < fault) {
				printf("FAILED: target %zu failed before the fault\n", i);
				rc = 1;
			}
		} else {
			if (tg.errors) {
				printf("FAILED: target %zu had %" PRIu64 " error completions\n", i, tg.errors);
				rc = 1;
			}
			if (must_fail >= 0 && t[must_fail].failed && tg.last_ok <= t[must_fail].first_error) {
				printf("FAILED: target %zu completed nothing after target %ld failed\n", i, must_fail);
				rc = 1;
			}
		}
	}
	if (s.doubled || s.unknown) {
		printf("FAILED: %" PRIu64 " doubled and %" PRIu64 " unknown completions\n", s.doubled, s.unknown);
		rc = 1;
	}
	// A restarted server: the same address keeps the target's fi_addr (the
	// provider must connect again), another is inserted.
	if (const std::string re = a.get("--reconnect"); !re.empty() && rc == 0) {
		const size_t eq = re.find('=');
		const size_t i = strtoul(re.substr(0, eq).c_str(), nullptr, 10);
		if (eq == std::string::npos || i >= t.size()) {
			fprintf(stderr, "send: --reconnect I=FILE\n");
			return 2;
		}
		Target &tg = t[i];
		const std::string name = read_addr(re.substr(eq + 1), 120);
		if (name.empty()) {
			printf("FAILED: no restarted server's address in %s\n", re.substr(eq + 1).c_str());
			return 1;
		}
		if (name != tg.name && fi_av_insert(e.av, name.data(), 1, &tg.addr, 0, nullptr) != 1)
			die("fi_av_insert", -FI_EINVAL);
		printf("send: target %zu restarted (%s address); sending again\n", i,
		       name == tg.name ? "the same" : "a new");
		tg.errors = 0;
		const uint64_t want = static_cast<uint64_t>(a.num("--reconnect-count", 64));
		const uint64_t ok_before = tg.ok;
		// One send at a time until the connection is up (a refused connect
		// while the server starts ends a send with an error; try again).
		for (int tries = 0; tg.ok == ok_before && tries < 60; tries++) {
			tg.failed = false;
			tg.base = tg.next_seq;
			while (!s.post(i * window, i, kTagData, sizes[0]))
				s.reap(10);
			s.drain(30);
			if (tg.ok == ok_before)
				std::this_thread::sleep_for(std::chrono::milliseconds(500));
		}
		const uint64_t errors_connecting = tg.errors;
		tg.errors = 0;
		while (!tg.failed && tg.next_seq - tg.base < want) {
			s.fill(i, want);
			s.reap(50);
		}
		s.drain(30);
		printf("send: target %zu after the restart: %" PRIu64 " sent, %" PRIu64
		       " completed, %" PRIu64 " errors (%" PRIu64 " refused while it started)\n",
		       i, tg.next_seq - tg.base, tg.ok - ok_before, tg.errors, errors_connecting);
		if (tg.failed || tg.ok - ok_before != tg.next_seq - tg.base) {
			printf("FAILED: sending to the restarted target %zu\n", i);
			rc = 1;
		}
	}
	// STOP to every target that did not fail: its server checks the range.
	for (size_t i = 0; i < t.size() && rc == 0; i++) {
		Target &tg = t[i];
		if (tg.failed)
			continue;
		while (!s.post(i * window, i, kTagStop, sizeof(Hdr), tg.base, tg.next_seq - tg.base))
			s.reap(10);
		if (!s.drain(30) || tg.failed) {
			printf("FAILED: the STOP to target %zu\n", i);
			rc = 1;
		}
	}
	printf("send: %.1f s, %s\n", now_epoch() - start, rc ? "FAILED" : "ok");
	return rc;
}

} // namespace

// ---- the last word ----

constexpr uint64_t kTagAsk = 3, kTagAnswer = 4;
constexpr size_t kAnswerLen = 1024;

// Waits up to `until` for the completion of ctx; false with the error
// printed (or none came).
bool wait_for(Endpoint &e, void *ctx, Clock::time_point until, const char *who, fi_cq_tagged_entry *out = nullptr)
{
	while (Clock::now() < until) {
		fi_cq_tagged_entry c;
		const ssize_t n = fi_cq_sread(e.cq, &c, 1, nullptr, 100);
		if (n == -FI_EAGAIN)
			continue;
		if (n == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			if (fi_cq_readerr(e.cq, &err, 0) == 1) {
				printf("%s: error completion: %s (prov_errno %d)\n", who, fi_strerror(err.err),
				       err.prov_errno);
				return false;
			}
			continue;
		}
		if (n < 0)
			die("fi_cq_sread", n);
		if (c.op_context == ctx) {
			if (out)
				*out = c;
			return true;
		}
		printf("%s: a completion of another operation\n", who);
		return false;
	}
	printf("%s: no completion in time\n", who);
	return false;
}

int answer(const Args &a)
{
	Endpoint e(nullptr, nullptr, 2 * kMaxSize);
	write_addr(a.get("--addr-file"), e.name());
	const Clock::time_point until = after(static_cast<double>(a.num("--seconds", 60)));
	fi_context2 rctx{}, sctx{};
	check("fi_trecv", fi_trecv(e.ep, e.buf.data(), 256, e.desc, FI_ADDR_UNSPEC, kTagAsk, 0, &rctx));
	fi_cq_tagged_entry c{};
	if (!wait_for(e, &rctx, until, "answer: the ask", &c))
		return 1;
	fi_addr_t to = FI_ADDR_NOTAVAIL;
	if (fi_av_insert(e.av, e.buf.data(), 1, &to, 0, nullptr) != 1)
		die("fi_av_insert", -FI_EINVAL);
	uint8_t *out = e.buf.data() + kMaxSize;
	for (size_t i = 0; i < kAnswerLen; i++)
		out[i] = pattern(kTagAnswer, i);
	ssize_t rc;
	while ((rc = fi_tsend(e.ep, out, kAnswerLen, e.desc, to, kTagAnswer, &sctx)) == -FI_EAGAIN)
		fi_cq_read(e.cq, nullptr, 0);
	check("fi_tsend", rc);
	if (!wait_for(e, &sctx, until, "answer: the answer's send"))
		return 1;
	printf("answer: the answer's send completed successfully\n");
	return 0;
}

int ask(const Args &a)
{
	Endpoint e(nullptr, nullptr, 2 * kMaxSize);
	const std::string target = read_addr(a.get("--to"), 60);
	if (target.empty())
		die("no answerer's address", -FI_ENOENT);
	fi_addr_t to = FI_ADDR_NOTAVAIL;
	if (fi_av_insert(e.av, target.data(), 1, &to, 0, nullptr) != 1)
		die("fi_av_insert", -FI_EINVAL);
	const Clock::time_point until = after(60);
	fi_context2 rctx{}, sctx{};
	check("fi_trecv", fi_trecv(e.ep, e.buf.data(), kAnswerLen, e.desc, to, kTagAnswer, 0, &rctx));
	const std::string me = e.name();
	memcpy(e.buf.data() + kMaxSize, me.data(), me.size());
	ssize_t rc;
	while ((rc = fi_tsend(e.ep, e.buf.data() + kMaxSize, me.size(), e.desc, to, kTagAsk, &sctx)) == -FI_EAGAIN)
		fi_cq_read(e.cq, nullptr, 0);
	check("fi_tsend", rc);
	fi_cq_tagged_entry c{};
	if (!wait_for(e, &sctx, until, "ask: the ask's send") || !wait_for(e, &rctx, until, "ask: the answer", &c))
		return 1;
	for (size_t i = 0; i < kAnswerLen; i++)
		if (c.len != kAnswerLen || e.buf[i] != pattern(kTagAnswer, i)) {
			printf("ask: the answer is wrong (length %zu, byte %zu)\n", c.len, i);
			return 1;
		}
	printf("ask: the answer is right; closing\n");
	return 0; // the endpoint closes now
}

int main(int argc, char **argv)
{
	setvbuf(stdout, nullptr, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: fault_traffic serve|send|answer|ask [--option value]...\n");
		return 2;
	}
	Args a;
	for (int i = 2; i + 1 < argc; i += 2)
		a.kv[argv[i]] = argv[i + 1];
	const std::string role = argv[1];
	if (role == "serve")
		return serve(a);
	if (role == "send")
		return send(a);
	if (role == "answer")
		return answer(a);
	if (role == "ask")
		return ask(a);
	fprintf(stderr, "fault_traffic: unknown role %s\n", role.c_str());
	return 2;
}
