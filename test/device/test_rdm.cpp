// vrma's native reliable-datagram endpoint (FI_EP_RDM, prov_name "vrma", not
// "vrma;ofi_rxm"): fi_getinfo, the endpoint's life cycle, messages and tagged
// messages of every size between endpoints of one process (same and other
// domains), unexpected messages, truncation, peek/claim/discard, cancel,
// multi-receive buffers, crossing connections, peers outside the AV, closed
// and removed peers, the rendezvous registration cache against unmapped
// memory, FI_THREAD_SAFE, and FI_PROGRESS_AUTO.
//
// Every transfer's data is checked byte by byte (with sentinels after the
// receive buffer), every completion by context, flags, length, tag, data and
// source. One tcase per group, so that a group can be run alone with
// CK_RUN_SUITE=rdm CK_RUN_CASE=<group>: rdm_basic, rdm_msg, rdm_tagged,
// rdm_multi_recv, rdm_conn, rdm_rndv_cache, rdm_threads, rdm_auto.
#include "rdm_harness.h"

#include <arpa/inet.h>
#include <rdma/fi_ext_vrma.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

using namespace vt;

namespace {

constexpr uint64_t kSendMsg = FI_SEND | FI_MSG;
constexpr uint64_t kRecvMsg = FI_RECV | FI_MSG;
constexpr uint64_t kSendTag = FI_SEND | FI_TAGGED;
constexpr uint64_t kRecvTag = FI_RECV | FI_TAGGED;
constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * 1024;
// Bytes after every receive buffer that must stay untouched.
constexpr size_t kSlack = 64;
constexpr uint8_t kSentinel = 0xcc;

// Completions collected by context: each context in a group completes once,
// successfully, with the group's flags (exactly).
class Tracker {
public:
	void expect(fi_context *ctx, size_t count, uint64_t flags, std::string what)
	{
		groups_.push_back({ctx, count, flags, std::move(what)});
		total_ += count;
	}

	void add(const Completion &c)
	{
		const void *ctx = c.context();
		const Group *g = nullptr;
		const std::less<const void *> lt;
		for (const Group &gr : groups_)
			if (!lt(ctx, gr.ctx) && lt(ctx, gr.ctx + gr.count))
				g = &gr;
		ck_assert_msg(g, "a completion for a context nobody posted: %s", c.describe().c_str());
		ck_assert_msg(c.ok, "%s: %s", g->what.c_str(), c.describe().c_str());
		ck_assert_msg(!got_.count(ctx), "%s: context #%td completed twice: %s", g->what.c_str(),
			      static_cast<const fi_context *>(ctx) - g->ctx, c.describe().c_str());
		ck_assert_msg(c.e.flags == g->flags, "%s: flags 0x%" PRIx64 " expected, got %s", g->what.c_str(),
			      g->flags, c.describe().c_str());
		got_[ctx] = c;
	}

	// Everything in n's backlog (all of it must be ours).
	void take(RdmNode &n)
	{
		while (!n.backlog.empty()) {
			Completion c = n.backlog.front();
			n.backlog.pop_front();
			add(c);
		}
	}

	void wait(RdmNode &n)
	{
		while (!done())
			add(next(n));
	}

	void wait_alone(RdmNode &n)
	{
		while (!done())
			add(next_alone(n));
	}

	bool done() const { return got_.size() == total_; }
	size_t count() const { return got_.size(); }
	bool has(const fi_context *ctx) const { return got_.count(ctx) != 0; }

	const Completion &get(const fi_context *ctx) const
	{
		auto it = got_.find(ctx);
		ck_assert_msg(it != got_.end(), "no completion for context %p", static_cast<const void *>(ctx));
		return it->second;
	}

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
void settle_sends(Tracker &t, RdmNode &sender, int quiet_ms = 1000)
{
	using clock = std::chrono::steady_clock;
	Deadline overall(kTimeoutMs);
	size_t seen = t.count();
	auto last = clock::now();
	while (!t.done() && !overall.expired()) {
		progress_all();
		t.take(sender);
		if (t.count() != seen) {
			seen = t.count();
			last = clock::now();
		} else if (clock::now() - last > std::chrono::milliseconds(quiet_ms)) {
			break;
		}
	}
}

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
std::vector<uint8_t> pattern(size_t n, uint32_t seed)
{
	std::vector<uint8_t> v(n ? n : 1);
	fill_pattern(v.data(), n, seed);
	return v;
}

// One message a -> b into a receive posted first: both completions, the
// source, the data, nothing written beyond it. src and dst are the caller's
// (dst holds dst_len bytes; dst_len >= len).
void transfer(RdmNode &a, RdmNode &b, const void *src, size_t len, void *dst, size_t dst_len, uint32_t seed,
	      const char *what)
{
	fi_context rctx, sctx;
	ck_assert_int_eq(fi_recv(b.ep, dst, dst_len, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, src, len, nullptr, a.addr_of(b), &sctx); }), 0);
	Tracker ta, tb;
	ta.expect(&sctx, 1, kSendMsg, std::string(what) + " (send)");
	tb.expect(&rctx, 1, kRecvMsg, std::string(what) + " (receive)");
	tb.wait(b);
	ta.wait(a);
	const Completion &c = tb.get(&rctx);
	ck_assert_msg(c.e.len == len, "%s: len %zu, expected %zu", what, c.e.len, len);
	ck_assert_msg(c.e.buf == dst || (dst == nullptr && len == 0), "%s: buf %p, expected %p", what, c.e.buf, dst);
	ck_assert_msg(c.src == b.addr_of(a), "%s: source %" PRIu64 ", expected %" PRIu64, what, c.src, b.addr_of(a));
	expect_pattern(dst, len, seed, what);
}

// transfer() with buffers of its own: a receive buffer of len + kSlack
// bytes, whose slack must stay untouched.
void send_recv_one(RdmNode &a, RdmNode &b, size_t len, uint32_t seed)
{
	char what[80];
	snprintf(what, sizeof what, "%zu bytes from port %u to port %u", len, a.port(), b.port());
	std::vector<uint8_t> src = pattern(len, seed);
	RecvBuf dst(len);
	transfer(a, b, len ? src.data() : nullptr, len, dst.data(), dst.b.size(), seed, what);
	expect_filled(dst.data() + len, kSlack, kSentinel, what);
}

// A send to dest must fail: an error return at once, or an error entry for
// it within the deadline (not a hang, not a success).
void expect_send_fails(RdmNode &a, fi_addr_t dest, size_t len, bool tagged, const char *what)
{
	std::vector<uint8_t> buf = pattern(len, 99);
	fi_context ctx;
	ssize_t rc = post_retry([&] {
		return tagged ? fi_tsend(a.ep, buf.data(), len, nullptr, dest, 0x5eed, &ctx)
			      : fi_send(a.ep, buf.data(), len, nullptr, dest, &ctx);
	});
	if (rc < 0)
		return; // refused at once
	ck_assert_int_eq(rc, 0);
	expect_err(a, &ctx, 0, what);
}

// The FI_PEEK'ing receive for tag (FI_PEEK | extra), once: its entry.
Completion peek_once(RdmNode &r, uint64_t tag, fi_context *ctx, uint64_t extra = 0,
		     fi_addr_t src = FI_ADDR_UNSPEC)
{
	fi_msg_tagged m = make_tmsg(nullptr, 0, src, tag, 0, ctx);
	ck_assert_int_eq(fi_trecvmsg(r.ep, &m, FI_PEEK | extra), 0);
	Completion c = next(r);
	ck_assert_msg(c.context() == ctx, "peek for tag 0x%" PRIx64 ": %s", tag, c.describe().c_str());
	return c;
}

// Peeks until a message with tag is found; every miss must be an FI_ENOMSG
// error entry with the peek's context.
Completion peek_until_found(RdmNode &r, uint64_t tag, fi_context *ctx, uint64_t extra = 0,
			    fi_addr_t src = FI_ADDR_UNSPEC)
{
	Deadline d(kTimeoutMs);
	for (;;) {
		Completion c = peek_once(r, tag, ctx, extra, src);
		if (c.ok)
			return c;
		ck_assert_msg(c.err.err == FI_ENOMSG, "peek for tag 0x%" PRIx64 ": %s", tag, c.describe().c_str());
		ck_assert_msg(!d.expired(), "no message with tag 0x%" PRIx64 " within %d ms", tag, kTimeoutMs);
		settle(5);
	}
}

void expect_peek_misses(RdmNode &r, uint64_t tag, const char *what)
{
	fi_context ctx;
	Completion c = peek_once(r, tag, &ctx);
	ck_assert_msg(!c.ok && c.err.err == FI_ENOMSG, "%s: a peek for tag 0x%" PRIx64 " gave %s", what, tag,
		      c.describe().c_str());
}

// The address as fi_getname gives it: the device's IPv4 address.
void expect_device_addr(const sockaddr_in &a, const char *what)
{
	ck_assert_msg(a.sin_family == AF_INET, "%s: family %d", what, a.sin_family);
	in_addr want{};
	ck_assert_int_eq(inet_pton(AF_INET, kRdmNodeAddr, &want), 1);
	ck_assert_msg(a.sin_addr.s_addr == want.s_addr, "%s: address %s, expected %s", what, inet_ntoa(a.sin_addr),
		      kRdmNodeAddr);
}

fid_av *open_rdm_av(RdmEnv &env, fi_av_type type = FI_AV_UNSPEC)
{
	fi_av_attr attr{};
	attr.type = type;
	fid_av *av = nullptr;
	ck_assert_int_eq(fi_av_open(env.domain, &attr, &av, nullptr), 0);
	return av;
}

fid_cq *open_rdm_cq(RdmEnv &env)
{
	fi_cq_attr attr{};
	attr.format = FI_CQ_FORMAT_TAGGED;
	attr.wait_obj = FI_WAIT_NONE;
	fid_cq *cq = nullptr;
	ck_assert_int_eq(fi_cq_open(env.domain, &attr, &cq, nullptr), 0);
	return cq;
}

} // namespace

// ---------------------------------------------------------------------------
// rdm_basic

START_TEST(rdm_getinfo_native)
{
	fi_info *h = rdm_hints();
	fi_info *list = get_info(h, kRdmNodeAddr, nullptr, FI_SOURCE);
	const fi_info *i = find_native_rdm(list);
	ck_assert_msg(i, "no native vrma RDM entry among: %s", info_names(list).c_str());
	ck_assert_str_eq(i->fabric_attr->prov_name, "vrma");
	ck_assert_int_eq(i->ep_attr->type, FI_EP_RDM);
	ck_assert_msg((i->caps & kRdmCaps) == kRdmCaps, "caps 0x%" PRIx64 " lack 0x%" PRIx64, i->caps,
		      kRdmCaps & ~i->caps);
	// No mode bit beyond what the hints accept, no local registration.
	ck_assert_msg(!(i->mode & ~FI_CONTEXT), "mode 0x%" PRIx64, i->mode);
	ck_assert_msg(!(i->tx_attr->mode & ~FI_CONTEXT), "tx mode 0x%" PRIx64, i->tx_attr->mode);
	ck_assert_msg(!(i->rx_attr->mode & ~FI_CONTEXT), "rx mode 0x%" PRIx64, i->rx_attr->mode);
	ck_assert_msg(!(i->domain_attr->mr_mode & FI_MR_LOCAL), "mr_mode 0x%x", i->domain_attr->mr_mode);
	ck_assert_int_eq(i->domain_attr->av_type, FI_AV_MAP);
	ck_assert_int_eq(i->addr_format, FI_SOCKADDR_IN);
	// FI_SOURCE with node 10.99.0.1: the source address is the device's.
	ck_assert_ptr_nonnull(i->src_addr);
	ck_assert_uint_eq(i->src_addrlen, sizeof(sockaddr_in));
	expect_device_addr(*static_cast<const sockaddr_in *>(i->src_addr), "src_addr");
	// What the other tests rely on.
	ck_assert_uint_ge(i->domain_attr->cq_data_size, 4);
	ck_assert_uint_ge(i->ep_attr->max_msg_size, 4 * MiB);
	ck_assert_uint_gt(i->tx_attr->inject_size, 0);
	ck_assert_uint_ge(i->tx_attr->iov_limit, 3);
	ck_assert_uint_ge(i->rx_attr->iov_limit, 3);
	// Only vrma's entries (native, or layered under ofi_rxm).
	for (const fi_info *e = list; e; e = e->next)
		ck_assert_msg(!strncmp(e->fabric_attr->prov_name, "vrma", 4), "entry of %s", e->fabric_attr->prov_name);
	fi_freeinfo(list);
	fi_freeinfo(h);

	// FI_AV_TABLE and FI_MULTI_RECV: asked, given.
	h = rdm_hints(kRdmCaps | FI_MULTI_RECV, FI_AV_TABLE);
	fi_info *t = rdm_get_info(h);
	ck_assert_int_eq(t->domain_attr->av_type, FI_AV_TABLE);
	ck_assert_msg(t->caps & FI_MULTI_RECV, "caps 0x%" PRIx64, t->caps);
	fi_freeinfo(t);
	fi_freeinfo(h);
	// The least an RDM user asks for.
	h = rdm_hints(FI_MSG);
	t = rdm_get_info(h);
	ck_assert_msg(t->caps & FI_MSG, "caps 0x%" PRIx64, t->caps);
	fi_freeinfo(t);
	fi_freeinfo(h);
}
END_TEST

START_TEST(rdm_open_bind_enable_close)
{
	RdmEnv env;
	fid_ep *ep = nullptr;
	ck_assert_int_eq(fi_endpoint(env.domain, env.info, &ep, nullptr), 0);
	// Before fi_enable: not yet (-FI_EOPBADSTATE), or an address already.
	sockaddr_in name{};
	size_t len = sizeof name;
	int rc = fi_getname(&ep->fid, &name, &len);
	ck_assert_msg(rc == -FI_EOPBADSTATE || rc == 0, "fi_getname before fi_enable: %d (%s)", rc,
		      fi_strerror(-rc));
	if (rc == 0) {
		ck_assert_uint_eq(len, sizeof(sockaddr_in));
		expect_device_addr(name, "fi_getname before fi_enable");
	}

	fid_av *av = open_rdm_av(env);
	fid_cq *cq = open_rdm_cq(env);
	ck_assert_int_eq(fi_ep_bind(ep, &av->fid, 0), 0);
	ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	ck_assert_int_eq(fi_enable(ep), 0);

	// After: the device's address and the endpoint's own listening port.
	name = sockaddr_in{};
	len = sizeof name;
	ck_assert_int_eq(fi_getname(&ep->fid, &name, &len), 0);
	ck_assert_uint_eq(len, sizeof(sockaddr_in));
	expect_device_addr(name, "fi_getname");
	ck_assert_uint_ne(name.sin_port, 0);
	// Too small a buffer: the length it needs, nothing written past it.
	uint8_t small[4];
	memset(small, 0xa5, sizeof small);
	len = 2;
	ck_assert_int_eq(fi_getname(&ep->fid, small, &len), -FI_ETOOSMALL);
	ck_assert_uint_eq(len, sizeof(sockaddr_in));
	ck_assert_uint_eq(small[2], 0xa5);
	ck_assert_uint_eq(small[3], 0xa5);

	// A second endpoint of the domain listens at another port.
	RdmNode other(env);
	ck_assert_uint_ne(other.name.sin_port, name.sin_port);

	// Nothing binds once enabled.
	fid_cq *cq2 = open_rdm_cq(env);
	fid_av *av2 = open_rdm_av(env);
	fi_cntr_attr cattr{};
	cattr.events = FI_CNTR_EVENTS_COMP;
	fid_cntr *cntr = nullptr;
	ck_assert_int_eq(fi_cntr_open(env.domain, &cattr, &cntr, nullptr), 0);
	rc = fi_ep_bind(ep, &cq2->fid, FI_TRANSMIT | FI_RECV);
	ck_assert_msg(rc < 0, "CQ bound after fi_enable: %d", rc);
	rc = fi_ep_bind(ep, &av2->fid, 0);
	ck_assert_msg(rc < 0, "AV bound after fi_enable: %d", rc);
	rc = fi_ep_bind(ep, &cntr->fid, FI_SEND);
	ck_assert_msg(rc < 0, "counter bound after fi_enable: %d", rc);

	// Close order: what the endpoint uses stays open while it does.
	ck_assert_int_eq(fi_close(&av->fid), -FI_EBUSY);
	ck_assert_int_eq(fi_close(&cq->fid), -FI_EBUSY);
	ck_assert_int_eq(fi_close(&env.domain->fid), -FI_EBUSY);
	ck_assert_int_eq(fi_close(&ep->fid), 0);
	ck_assert_int_eq(fi_close(&av->fid), 0);
	ck_assert_int_eq(fi_close(&cq->fid), 0);
	ck_assert_int_eq(fi_close(&cq2->fid), 0);
	ck_assert_int_eq(fi_close(&av2->fid), 0);
	ck_assert_int_eq(fi_close(&cntr->fid), 0);
}
END_TEST

START_TEST(rdm_enable_without_av)
{
	RdmEnv env;
	fid_ep *ep = nullptr;
	ck_assert_int_eq(fi_endpoint(env.domain, env.info, &ep, nullptr), 0);
	fid_cq *cq = open_rdm_cq(env);
	ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	ck_assert_int_eq(fi_enable(ep), -FI_ENOAV);
	// The refusal left the endpoint as it was: with an AV it enables.
	fid_av *av = open_rdm_av(env);
	ck_assert_int_eq(fi_ep_bind(ep, &av->fid, 0), 0);
	ck_assert_int_eq(fi_enable(ep), 0);
	sockaddr_in name{};
	size_t len = sizeof name;
	ck_assert_int_eq(fi_getname(&ep->fid, &name, &len), 0);
	ck_assert_uint_ne(name.sin_port, 0);
	ck_assert_int_eq(fi_close(&ep->fid), 0);
	ck_assert_int_eq(fi_close(&av->fid), 0);
	ck_assert_int_eq(fi_close(&cq->fid), 0);
}
END_TEST

// A failed fi_enable leaves nothing behind, and a retry builds everything
// (issue 13). Refused registrations (as under a low RLIMIT_MEMLOCK) fail
// with -FI_ENOMEM, every time; a listening address in use fails after the
// buffers, CQ and SRQ were made, which a retry used to build a second
// time over the first: the send buffers' free list then held every buffer
// twice (fi_tx_size_left twice the queue's size, two sends in one buffer).
// With the limit back and a free port the endpoint enables, offers exactly
// its buffers, and exchanges messages both ways.
START_TEST(rdm_failed_enable_leaves_nothing)
{
	drop_ipc_lock();
	RdmEnv env;
	RdmNode a(env);
	RdmNodeOptions opt;
	opt.before_enable = [&a](fid_ep *ep) {
		{
			MemlockLimit low(256 * 1024);
			for (int attempt = 1; attempt <= 2; attempt++) {
				const int rc = fi_enable(ep);
				ck_assert_msg(rc != 0 || attempt > 1,
					      "fi_enable under RLIMIT_MEMLOCK %llu succeeded: registration ignored the limit",
					      static_cast<unsigned long long>(low.limit()));
				ck_assert_msg(rc == -FI_ENOMEM,
					      "fi_enable attempt %d under a low RLIMIT_MEMLOCK: %d (%s), expected -FI_ENOMEM",
					      attempt, rc, fi_strerror(rc < 0 ? -rc : rc));
				ck_assert_int_eq(fi_tx_size_left(ep), -FI_EOPBADSTATE);
			}
		}
		// a's address: in use.
		ck_assert_int_eq(fi_setname(&ep->fid, &a.name, sizeof a.name), 0);
		for (int attempt = 1; attempt <= 2; attempt++) {
			const int rc = fi_enable(ep);
			ck_assert_msg(rc == -FI_EADDRINUSE, "fi_enable attempt %d on a port in use: %d (%s)",
				      attempt, rc, fi_strerror(rc < 0 ? -rc : rc));
			ck_assert_int_eq(fi_tx_size_left(ep), -FI_EOPBADSTATE);
		}
		sockaddr_in any = a.name;
		any.sin_port = 0;
		ck_assert_int_eq(fi_setname(&ep->fid, &any, sizeof any), 0);
	};
	RdmNode b(env, opt);
	ck_assert_uint_ne(b.port(), a.port());
	const ssize_t left = fi_tx_size_left(b.ep);
	ck_assert_msg(left == static_cast<ssize_t>(b.info->tx_attr->size),
		      "fi_tx_size_left after a retried fi_enable: %zd, the queue holds %zu", left,
		      b.info->tx_attr->size);
	connect_all({&a, &b});
	uint32_t seed = 31;
	for (size_t len : {size_t(1), size_t(4096), 300 * KiB}) {
		send_recv_one(a, b, len, seed++);
		send_recv_one(b, a, len, seed++);
	}
	expect_none(a);
	expect_none(b);
}
END_TEST

// Endpoints of one domain and of another (its own fabric and domain) talk to
// each other in one process, each naming the others by its own handles.
START_TEST(rdm_several_endpoints)
{
	RdmEnv env1, env2;
	RdmNode a(env1), b(env1), c(env2);
	connect_all({&a, &b, &c});
	ck_assert_uint_ne(a.port(), b.port());
	ck_assert_uint_ne(a.port(), c.port());
	ck_assert_uint_ne(b.port(), c.port());
	uint32_t seed = 1;
	for (RdmNode *from : {&a, &b, &c})
		for (RdmNode *to : {&a, &b, &c})
			if (from != to)
				send_recv_one(*from, *to, 1000, seed++);
	// One receiver, two senders at once: each message names its sender.
	fi_context rctx[2], sctx[2];
	RecvBuf r0(256), r1(256);
	ck_assert_int_eq(fi_recv(c.ep, r0.data(), r0.len, nullptr, FI_ADDR_UNSPEC, &rctx[0]), 0);
	ck_assert_int_eq(fi_recv(c.ep, r1.data(), r1.len, nullptr, FI_ADDR_UNSPEC, &rctx[1]), 0);
	std::vector<uint8_t> fa = pattern(100, 50), fb = pattern(200, 51);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, fa.data(), 100, nullptr, a.addr_of(c), &sctx[0]); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(b.ep, fb.data(), 200, nullptr, b.addr_of(c), &sctx[1]); }), 0);
	Tracker tc, ta, tb;
	tc.expect(rctx, 2, kRecvMsg, "receives at c");
	ta.expect(&sctx[0], 1, kSendMsg, "a's send");
	tb.expect(&sctx[1], 1, kSendMsg, "b's send");
	tc.wait(c);
	ta.wait(a);
	tb.wait(b);
	for (int k = 0; k < 2; k++) {
		const Completion &e = tc.get(&rctx[k]);
		const bool from_a = e.src == c.addr_of(a);
		ck_assert_msg(from_a || e.src == c.addr_of(b), "source %" PRIu64, e.src);
		ck_assert_uint_eq(e.e.len, from_a ? 100 : 200);
		(k ? r1 : r0).check(e.e.len, from_a ? 50 : 51, "two senders");
	}
	ck_assert_uint_ne(tc.get(&rctx[0]).src, tc.get(&rctx[1]).src);
	expect_none(a);
	expect_none(b);
	expect_none(c);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_msg

START_TEST(rdm_msg_sizes)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t sizes[] = {0, 1, 8, 64, 4096, 8192, 65536, MiB, 4 * MiB};
	uint32_t seed = 1;
	for (size_t len : sizes)
		send_recv_one(a, b, len, seed++);
	// The other way, over what the first direction set up.
	send_recv_one(b, a, 100, seed++);
	send_recv_one(b, a, 300 * KiB, seed++);
	// An empty message into a receive without a buffer.
	fi_context rctx, sctx;
	ck_assert_int_eq(fi_recv(b.ep, nullptr, 0, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, nullptr, 0, nullptr, a.addr_of(b), &sctx); }), 0);
	expect_ok(a, &sctx, kSendMsg, "empty send");
	Completion c = expect_ok(b, &rctx, kRecvMsg, "empty receive");
	ck_assert_uint_eq(c.e.len, 0);
	ck_assert_uint_eq(c.src, b.addr_of(a));
	expect_none(a);
	expect_none(b);
}
END_TEST

START_TEST(rdm_msg_av_table)
{
	fi_info *h = rdm_hints(kRdmCaps, FI_AV_TABLE);
	RdmEnv env(h);
	fi_freeinfo(h);
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	// FI_AV_TABLE handles are indices from 0.
	ck_assert_uint_eq(a.addr_of(b), 0);
	ck_assert_uint_eq(b.addr_of(a), 0);
	uint32_t seed = 10;
	for (size_t len : {size_t(1), size_t(4096), 256 * KiB}) {
		send_recv_one(a, b, len, seed++);
		send_recv_one(b, a, len, seed++);
	}
}
END_TEST

START_TEST(rdm_sendv_recvv)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	// Eager: gather 1000 + 1 + 2999 bytes, scatter into 1500 + 1500 + 1000.
	{
		std::vector<uint8_t> src = pattern(4000, 5);
		iovec siov[3] = {{src.data(), 1000}, {src.data() + 1000, 1}, {src.data() + 1001, 2999}};
		RecvBuf dst(4000);
		iovec riov[3] = {{dst.data(), 1500}, {dst.data() + 1500, 1500}, {dst.data() + 3000, 1000}};
		fi_context rctx, sctx;
		ck_assert_int_eq(fi_recvv(b.ep, riov, nullptr, 3, FI_ADDR_UNSPEC, &rctx), 0);
		ck_assert_int_eq(post_retry([&] { return fi_sendv(a.ep, siov, nullptr, 3, a.addr_of(b), &sctx); }), 0);
		expect_ok(a, &sctx, kSendMsg, "sendv");
		Completion c = expect_ok(b, &rctx, kRecvMsg, "recvv");
		ck_assert_uint_eq(c.e.len, 4000);
		ck_assert_uint_eq(c.src, b.addr_of(a));
		dst.check(4000, 5, "sendv/recvv 4000");
	}
	// Rendezvous: three separate pieces (100 + 50 + 150 KiB) into three
	// others split elsewhere (120 + 80 + 100 KiB).
	{
		const size_t s[3] = {100 * KiB, 50 * KiB, 150 * KiB}, total = 300 * KiB;
		std::vector<uint8_t> p[3];
		size_t off = 0;
		for (int k = 0; k < 3; k++) {
			p[k].resize(s[k]);
			fill_pattern(p[k].data(), s[k], 6, off);
			off += s[k];
		}
		iovec siov[3] = {{p[0].data(), s[0]}, {p[1].data(), s[1]}, {p[2].data(), s[2]}};
		std::vector<uint8_t> q0(120 * KiB, kSentinel), q1(80 * KiB, kSentinel), q2(100 * KiB + kSlack, kSentinel);
		iovec riov[3] = {{q0.data(), q0.size()}, {q1.data(), q1.size()}, {q2.data(), 100 * KiB}};
		fi_context rctx, sctx;
		ck_assert_int_eq(fi_recvv(b.ep, riov, nullptr, 3, FI_ADDR_UNSPEC, &rctx), 0);
		ck_assert_int_eq(post_retry([&] { return fi_sendv(a.ep, siov, nullptr, 3, a.addr_of(b), &sctx); }), 0);
		Tracker ta, tb;
		ta.expect(&sctx, 1, kSendMsg, "large sendv");
		tb.expect(&rctx, 1, kRecvMsg, "large recvv");
		tb.wait(b);
		ta.wait(a);
		ck_assert_uint_eq(tb.get(&rctx).e.len, total);
		expect_pattern(q0.data(), q0.size(), 6, "recvv piece 0", 0);
		expect_pattern(q1.data(), q1.size(), 6, "recvv piece 1", q0.size());
		expect_pattern(q2.data(), 100 * KiB, 6, "recvv piece 2", q0.size() + q1.size());
		expect_filled(q2.data() + 100 * KiB, kSlack, kSentinel, "after recvv piece 2");
	}
	// Rendezvous with empty NULL pieces on both sides (nothing to register
	// there): 64 + 0 + 64 KiB into 0 + 128 KiB.
	{
		std::vector<uint8_t> src = pattern(128 * KiB, 7);
		iovec siov[3] = {{src.data(), 64 * KiB}, {nullptr, 0}, {src.data() + 64 * KiB, 64 * KiB}};
		RecvBuf dst(128 * KiB);
		iovec riov[2] = {{nullptr, 0}, {dst.data(), 128 * KiB}};
		fi_context rctx, sctx;
		ck_assert_int_eq(fi_recvv(b.ep, riov, nullptr, 2, FI_ADDR_UNSPEC, &rctx), 0);
		ck_assert_int_eq(post_retry([&] { return fi_sendv(a.ep, siov, nullptr, 3, a.addr_of(b), &sctx); }), 0);
		Tracker ta, tb;
		ta.expect(&sctx, 1, kSendMsg, "sendv with an empty piece");
		tb.expect(&rctx, 1, kRecvMsg, "recvv with an empty piece");
		tb.wait(b);
		ta.wait(a);
		ck_assert_uint_eq(tb.get(&rctx).e.len, 128 * KiB);
		dst.check(128 * KiB, 7, "rendezvous around empty pieces");
	}
}
END_TEST

START_TEST(rdm_sendmsg_recvmsg)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const uint64_t data = 0xa1b2c3d4 & env.cq_data_mask();
	// fi_sendmsg with remote CQ data into fi_recvmsg.
	std::vector<uint8_t> src = pattern(256, 7);
	RecvBuf dst(256);
	fi_context rctx[3], sctx[3];
	iovec riov = {dst.data(), dst.len};
	fi_msg rm = make_msg(&riov, 1, FI_ADDR_UNSPEC, &rctx[0]);
	ck_assert_int_eq(fi_recvmsg(b.ep, &rm, FI_COMPLETION), 0);
	iovec siov = {src.data(), 256};
	fi_msg sm = make_msg(&siov, 1, a.addr_of(b), &sctx[0], data);
	ck_assert_int_eq(post_retry([&] { return fi_sendmsg(a.ep, &sm, FI_COMPLETION | FI_REMOTE_CQ_DATA); }), 0);
	expect_ok(a, &sctx[0], kSendMsg, "sendmsg");
	Completion c = expect_ok(b, &rctx[0], kRecvMsg | FI_REMOTE_CQ_DATA, "recvmsg");
	ck_assert_uint_eq(c.e.len, 256);
	ck_assert_uint_eq(c.e.data, data);
	ck_assert_ptr_eq(c.e.buf, dst.data());
	ck_assert_uint_eq(c.src, b.addr_of(a));
	dst.check(256, 7, "sendmsg");

	// FI_INJECT: the buffer is the caller's again when the call returns;
	// FI_COMPLETION asks for the completion anyway.
	std::vector<uint8_t> small = pattern(32, 8);
	RecvBuf d2(64);
	ck_assert_int_eq(fi_recv(b.ep, d2.data(), d2.len, nullptr, FI_ADDR_UNSPEC, &rctx[1]), 0);
	siov = {small.data(), 32};
	sm = make_msg(&siov, 1, a.addr_of(b), &sctx[1]);
	ck_assert_int_eq(post_retry([&] { return fi_sendmsg(a.ep, &sm, FI_INJECT | FI_COMPLETION); }), 0);
	memset(small.data(), 0xee, small.size());
	expect_ok(a, &sctx[1], kSendMsg, "sendmsg FI_INJECT");
	c = expect_ok(b, &rctx[1], kRecvMsg, "receive of FI_INJECT");
	ck_assert_uint_eq(c.e.len, 32);
	d2.check(32, 8, "sendmsg FI_INJECT");

	// Flags 0 on an endpoint without FI_SELECTIVE_COMPLETION: it completes.
	std::vector<uint8_t> s3 = pattern(10, 9);
	RecvBuf d3(10);
	ck_assert_int_eq(fi_recv(b.ep, d3.data(), d3.len, nullptr, FI_ADDR_UNSPEC, &rctx[2]), 0);
	siov = {s3.data(), 10};
	sm = make_msg(&siov, 1, a.addr_of(b), &sctx[2]);
	ck_assert_int_eq(post_retry([&] { return fi_sendmsg(a.ep, &sm, 0); }), 0);
	expect_ok(a, &sctx[2], kSendMsg, "sendmsg flags 0");
	c = expect_ok(b, &rctx[2], kRecvMsg, "receive of sendmsg flags 0");
	ck_assert_uint_eq(c.e.len, 10);
	d3.check(10, 9, "sendmsg flags 0");
	expect_none(a);
	expect_none(b);
}
END_TEST

START_TEST(rdm_inject)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t inj = env.info->tx_attr->inject_size;
	uint32_t seed = 20;
	for (size_t len : {size_t(1), size_t(64), inj}) {
		char what[64];
		snprintf(what, sizeof what, "fi_inject of %zu bytes", len);
		std::vector<uint8_t> src = pattern(len, seed);
		RecvBuf dst(len);
		fi_context rctx;
		ck_assert_int_eq(fi_recv(b.ep, dst.data(), dst.len, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
		ck_assert_int_eq(post_retry([&] { return fi_inject(a.ep, src.data(), len, a.addr_of(b)); }), 0);
		memset(src.data(), 0xee, len); // reusable at once
		Completion c = expect_ok(b, &rctx, kRecvMsg, what);
		ck_assert_uint_eq(c.e.len, len);
		ck_assert_uint_eq(c.src, b.addr_of(a));
		dst.check(len, seed, what);
		seed++;
	}
	// No transmit completion for any of them.
	expect_none(a, 300, "fi_inject");
	// Beyond inject_size: refused, nothing sent.
	std::vector<uint8_t> big = pattern(inj + 1, 1);
	ssize_t rc = fi_inject(a.ep, big.data(), inj + 1, a.addr_of(b));
	ck_assert_msg(rc < 0 && rc != -FI_EAGAIN, "fi_inject of inject_size + 1 bytes: %zd", rc);
	expect_none(b, 300, "refused fi_inject");
}
END_TEST

START_TEST(rdm_senddata_injectdata)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	ck_assert_uint_ge(env.info->domain_attr->cq_data_size, 4);
	const uint64_t mask = env.cq_data_mask();
	const uint64_t d[3] = {0xa1b2c3d4 & mask, 0x0badf00d & mask, 0x12345678 & mask};
	const size_t len[3] = {100, 16, 300 * KiB}; // the last by rendezvous
	std::vector<uint8_t> src[3];
	RecvBuf *dst[3];
	std::unique_ptr<RecvBuf> own[3];
	fi_context rctx[4], sctx[4];
	for (int k = 0; k < 3; k++) {
		src[k] = pattern(len[k], 30 + k);
		own[k] = std::make_unique<RecvBuf>(len[k]);
		dst[k] = own[k].get();
		ck_assert_int_eq(fi_recv(b.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, &rctx[k]), 0);
	}
	ck_assert_int_eq(post_retry([&] {
				 return fi_senddata(a.ep, src[0].data(), len[0], nullptr, d[0], a.addr_of(b), &sctx[0]);
			 }),
			 0);
	ck_assert_int_eq(post_retry([&] { return fi_injectdata(a.ep, src[1].data(), len[1], d[1], a.addr_of(b)); }),
			 0);
	memset(src[1].data(), 0xee, len[1]);
	ck_assert_int_eq(post_retry([&] {
				 return fi_senddata(a.ep, src[2].data(), len[2], nullptr, d[2], a.addr_of(b), &sctx[2]);
			 }),
			 0);
	// And a message without data: no FI_REMOTE_CQ_DATA.
	std::vector<uint8_t> plain = pattern(40, 33);
	RecvBuf pdst(40);
	ck_assert_int_eq(fi_recv(b.ep, pdst.data(), pdst.len, nullptr, FI_ADDR_UNSPEC, &rctx[3]), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, plain.data(), 40, nullptr, a.addr_of(b), &sctx[3]); }), 0);

	Tracker tb, ta;
	tb.expect(rctx, 3, kRecvMsg | FI_REMOTE_CQ_DATA, "receives with data");
	tb.expect(&rctx[3], 1, kRecvMsg, "receive without data");
	ta.expect(&sctx[0], 1, kSendMsg, "senddata");
	ta.expect(&sctx[2], 1, kSendMsg, "large senddata");
	ta.expect(&sctx[3], 1, kSendMsg, "send");
	tb.wait(b);
	ta.wait(a);
	for (int k = 0; k < 3; k++) {
		const Completion &c = tb.get(&rctx[k]);
		ck_assert_uint_eq(c.e.data, d[k]);
		ck_assert_uint_eq(c.e.len, len[k]);
		ck_assert_uint_eq(c.src, b.addr_of(a));
		dst[k]->check(len[k], 30 + k, "data message");
	}
	ck_assert_uint_eq(tb.get(&rctx[3]).e.len, 40);
	pdst.check(40, 33, "message without data");
	expect_none(a, 300, "injectdata");
	expect_none(b);
}
END_TEST

// 100 messages of varied sizes (a few by rendezvous) before any receive: all
// matched in order with their data once the receives come.
START_TEST(rdm_msg_unexpected)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	constexpr int N = 100;
	static const size_t cycle[] = {0, 1, 7, 64, 100, 512, 1000, 2048, 4095, 4096, 4097, 8192, 16000, 33000, 65536, 70000};
	auto size_of = [](int i) { return i % 25 == 24 ? 256 * KiB : cycle[i % 16]; };
	std::vector<std::vector<uint8_t>> src(N);
	fi_context sctx[N], rctx[N];
	Tracker ta, tb;
	ta.expect(sctx, N, kSendMsg, "unexpected sends");
	tb.expect(rctx, N, kRecvMsg, "late receives");
	for (int i = 0; i < N; i++) {
		src[i] = pattern(size_of(i), 100 + i);
		ck_assert_int_eq(post_retry([&] {
					 return fi_send(a.ep, src[i].data(), size_of(i), nullptr, a.addr_of(b), &sctx[i]);
				 }),
				 0);
	}
	settle_sends(ta, a);
	ck_assert_msg(b.backlog.empty(), "a completion at the receiver before any receive: %s",
		      b.backlog.front().describe().c_str());
	std::vector<std::unique_ptr<RecvBuf>> dst(N);
	for (int i = 0; i < N; i++) {
		dst[i] = std::make_unique<RecvBuf>(size_of(i));
		ck_assert_int_eq(post_retry([&] {
					 return fi_recv(b.ep, dst[i]->data(), dst[i]->len, nullptr, FI_ADDR_UNSPEC, &rctx[i]);
				 }),
				 0);
	}
	tb.wait(b);
	ta.wait(a);
	for (int i = 0; i < N; i++) {
		const Completion &c = tb.get(&rctx[i]);
		char what[48];
		snprintf(what, sizeof what, "unexpected message %d", i);
		ck_assert_msg(c.e.len == size_of(i), "%s: len %zu, expected %zu", what, c.e.len, size_of(i));
		ck_assert_uint_eq(c.src, b.addr_of(a));
		dst[i]->check(size_of(i), 100 + i, what);
	}
	expect_none(a);
	expect_none(b);
}
END_TEST

// A message longer than its receive: FI_ETRUNC with len = the buffer, olen =
// what did not fit, the prefix in place, nothing beyond; the send succeeds.
START_TEST(rdm_truncation)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	struct Case {
		size_t msg, buf;
		bool tagged;
		const char *what;
	} cases[] = {{1000, 100, false, "eager"}, {200 * KiB, 64 * KiB, false, "rendezvous"},
		     {500, 50, true, "tagged eager"}};
	uint32_t seed = 40;
	for (const Case &k : cases) {
		std::vector<uint8_t> src = pattern(k.msg, seed);
		RecvBuf dst(k.buf);
		fi_context rctx, sctx;
		if (k.tagged) {
			ck_assert_int_eq(fi_trecv(b.ep, dst.data(), k.buf, nullptr, FI_ADDR_UNSPEC, 0x42, 0, &rctx), 0);
			ck_assert_int_eq(post_retry([&] {
						 return fi_tsend(a.ep, src.data(), k.msg, nullptr, a.addr_of(b), 0x42, &sctx);
					 }),
					 0);
		} else {
			ck_assert_int_eq(fi_recv(b.ep, dst.data(), k.buf, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
			ck_assert_int_eq(post_retry([&] {
						 return fi_send(a.ep, src.data(), k.msg, nullptr, a.addr_of(b), &sctx);
					 }),
					 0);
		}
		fi_cq_err_entry err = expect_err(b, &rctx, FI_ETRUNC, k.what);
		ck_assert_msg(err.len == k.buf, "%s: len %zu, expected %zu", k.what, err.len, k.buf);
		ck_assert_msg(err.olen == k.msg - k.buf, "%s: olen %zu, expected %zu", k.what, err.olen, k.msg - k.buf);
		ck_assert_msg(err.flags & FI_RECV, "%s: flags 0x%" PRIx64, k.what, err.flags);
		if (k.tagged)
			ck_assert_uint_eq(err.tag, 0x42);
		dst.check(k.buf, seed, k.what);
		expect_ok(a, &sctx, k.tagged ? kSendTag : kSendMsg, k.what);
		seed++;
	}
	// The endpoints go on.
	send_recv_one(a, b, 128, seed++);
	send_recv_one(b, a, 128, seed++);
	expect_none(a);
	expect_none(b);
}
END_TEST

// Completions a CQ read delivers straight into the reader's buffer must
// not overtake an entry queued before them: with every message already in
// the device's queue when the reader first looks, an error entry (a
// truncation) comes first, then the successes in arrival order, read one
// at a time (the rest wait in the queue) and two at a time.
START_TEST(rdm_cq_order_direct_and_queued)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	send_recv_one(a, b, 16, 90); // connected both ways
	constexpr int N = 6;
	constexpr size_t kLen = 100;
	std::vector<std::vector<uint8_t>> src(N);
	std::vector<std::unique_ptr<RecvBuf>> dst(N);
	fi_context rctx[N];
	for (int i = 0; i < N; i++) {
		src[i] = pattern(kLen, 91 + i);
		dst[i] = std::make_unique<RecvBuf>(i == 0 ? kLen / 2 : kLen);
		ck_assert_int_eq(fi_recv(b.ep, dst[i]->data(), dst[i]->len, nullptr, FI_ADDR_UNSPEC, &rctx[i]), 0);
	}
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(post_retry([&] { return fi_inject(a.ep, src[i].data(), kLen, a.addr_of(b)); }, &a), 0);
	usleep(500 * 1000); // b reads nothing meanwhile: all six wait in its device queue
	fi_cq_tagged_entry e[2];
	ssize_t rc = fi_cq_read(b.cq, e, 1);
	ck_assert_msg(rc == -FI_EAVAIL, "first read: %zd, expected -FI_EAVAIL (the truncation first)", rc);
	fi_cq_err_entry err{};
	ck_assert_int_eq(fi_cq_readerr(b.cq, &err, 0), 1);
	ck_assert_ptr_eq(err.op_context, &rctx[0]);
	ck_assert_int_eq(err.err, FI_ETRUNC);
	ck_assert_uint_eq(err.olen, kLen - kLen / 2);
	dst[0]->check(kLen / 2, 91, "truncated");
	for (int i = 1; i < N; i++) {
		rc = fi_cq_read(b.cq, e, 1);
		ck_assert_msg(rc == 1, "read %d: %zd", i, rc);
		ck_assert_msg(e[0].op_context == &rctx[i], "entry %d out of order", i);
		ck_assert_uint_eq(e[0].len, kLen);
		ck_assert_uint_eq(e[0].flags, kRecvMsg);
		dst[i]->check(kLen, 91 + i, "in order");
	}
	// No error this time: pairs, in order.
	for (int i = 0; i < 4; i++) {
		dst[i] = std::make_unique<RecvBuf>(kLen);
		ck_assert_int_eq(fi_recv(b.ep, dst[i]->data(), kLen, nullptr, FI_ADDR_UNSPEC, &rctx[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(post_retry([&] { return fi_inject(a.ep, src[i].data(), kLen, a.addr_of(b)); }, &a), 0);
	usleep(500 * 1000);
	for (int i = 0; i < 4; i += 2) {
		rc = fi_cq_read(b.cq, e, 2);
		ck_assert_msg(rc == 2, "pair %d: %zd", i / 2, rc);
		ck_assert_ptr_eq(e[0].op_context, &rctx[i]);
		ck_assert_ptr_eq(e[1].op_context, &rctx[i + 1]);
		dst[i]->check(kLen, 91 + i, "pair");
		dst[i + 1]->check(kLen, 92 + i, "pair");
	}
	expect_none(a);
	expect_none(b);
}
END_TEST

START_TEST(rdm_selective_completion)
{
	RdmEnv env;
	RdmNodeOptions sel;
	sel.cq_bind_flags = FI_SELECTIVE_COMPLETION;
	RdmNode a(env, sel), b(env);
	connect_all({&a, &b});
	// 0-9 fi_send, 10 fi_sendmsg(FI_COMPLETION), 11 fi_sendmsg(0),
	// 12 a rendezvous fi_send, 13 fi_sendmsg(FI_COMPLETION).
	constexpr int N = 14;
	auto size_of = [](int i) { return i == 12 ? 256 * KiB : size_t(64 + i); };
	std::vector<std::vector<uint8_t>> src(N);
	std::vector<std::unique_ptr<RecvBuf>> dst(N);
	fi_context sctx[N], rctx[N];
	for (int i = 0; i < N; i++) {
		src[i] = pattern(size_of(i), 50 + i);
		dst[i] = std::make_unique<RecvBuf>(size_of(i));
		ck_assert_int_eq(fi_recv(b.ep, dst[i]->data(), dst[i]->len, nullptr, FI_ADDR_UNSPEC, &rctx[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		iovec iov = {src[i].data(), size_of(i)};
		fi_msg m = make_msg(&iov, 1, a.addr_of(b), &sctx[i]);
		ssize_t rc = post_retry([&] {
			if (i == 10 || i == 13)
				return fi_sendmsg(a.ep, &m, FI_COMPLETION);
			if (i == 11)
				return fi_sendmsg(a.ep, &m, 0);
			return fi_send(a.ep, src[i].data(), size_of(i), nullptr, a.addr_of(b), &sctx[i]);
		});
		ck_assert_int_eq(rc, 0);
	}
	Tracker tb, ta;
	tb.expect(rctx, N, kRecvMsg, "receives");
	ta.expect(&sctx[10], 1, kSendMsg, "fi_sendmsg(FI_COMPLETION) #10");
	ta.expect(&sctx[13], 1, kSendMsg, "fi_sendmsg(FI_COMPLETION) #13");
	tb.wait(b);
	ta.wait(a);
	for (int i = 0; i < N; i++) {
		ck_assert_uint_eq(tb.get(&rctx[i]).e.len, size_of(i));
		dst[i]->check(size_of(i), 50 + i, "selective completion");
	}
	// Exactly those two.
	expect_none(a, 300, "sends without FI_COMPLETION");
}
END_TEST

START_TEST(rdm_counters)
{
	RdmEnv env;
	RdmNodeOptions o;
	o.tx_cntr = o.rx_cntr = true;
	RdmNode a(env, o), b(env, o);
	connect_all({&a, &b});
	// fi_send, fi_inject, fi_senddata, a rendezvous fi_send, fi_tsend.
	const size_t len[5] = {64, 16, 128, 256 * KiB, 32};
	std::vector<uint8_t> src[5];
	std::unique_ptr<RecvBuf> dst[5];
	fi_context sctx[5], rctx[5];
	for (int k = 0; k < 5; k++) {
		src[k] = pattern(len[k], 60 + k);
		dst[k] = std::make_unique<RecvBuf>(len[k]);
		if (k == 4)
			ck_assert_int_eq(fi_trecv(b.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, 3, 0, &rctx[k]), 0);
		else
			ck_assert_int_eq(fi_recv(b.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, &rctx[k]), 0);
	}
	const fi_addr_t to = a.addr_of(b);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, src[0].data(), len[0], nullptr, to, &sctx[0]); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_inject(a.ep, src[1].data(), len[1], to); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_senddata(a.ep, src[2].data(), len[2], nullptr, 7, to, &sctx[2]); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, src[3].data(), len[3], nullptr, to, &sctx[3]); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_tsend(a.ep, src[4].data(), len[4], nullptr, to, 3, &sctx[4]); }), 0);
	expect_cntr(b.rx_cntr, 5, "b's receive counter");
	expect_cntr(a.tx_cntr, 5, "a's send counter (the inject counts)");
	ck_assert_uint_eq(fi_cntr_read(a.rx_cntr), 0);
	ck_assert_uint_eq(fi_cntr_read(b.tx_cntr), 0);
	// The CQ reports them too (all but the inject).
	Tracker ta, tb;
	ta.expect(&sctx[0], 1, kSendMsg, "send");
	ta.expect(&sctx[2], 2, kSendMsg, "senddata, large send");
	ta.expect(&sctx[4], 1, kSendTag, "tsend");
	tb.expect(rctx, 2, kRecvMsg, "receives 0-1");
	tb.expect(&rctx[2], 1, kRecvMsg | FI_REMOTE_CQ_DATA, "receive 2");
	tb.expect(&rctx[3], 1, kRecvMsg, "receive 3");
	tb.expect(&rctx[4], 1, kRecvTag, "tagged receive");
	ta.wait(a);
	tb.wait(b);
	for (int k = 0; k < 5; k++)
		dst[k]->check(len[k], 60 + k, "counted message");
	// One more each way moves each counter by one.
	send_recv_one(b, a, 10, 70);
	expect_cntr(b.tx_cntr, 1, "b's send counter");
	expect_cntr(a.rx_cntr, 1, "a's receive counter");
	ck_assert_uint_eq(fi_cntr_read(a.tx_cntr), 5);
	ck_assert_uint_eq(fi_cntr_read(b.rx_cntr), 5);
}
END_TEST

START_TEST(rdm_send_to_self)
{
	RdmEnv env;
	RdmNode a(env);
	const fi_addr_t self = a.insert(a);
	uint32_t seed = 80;
	for (size_t len : {size_t(100), 300 * KiB}) {
		std::vector<uint8_t> src = pattern(len, seed);
		RecvBuf dst(len);
		fi_context rctx, sctx;
		ck_assert_int_eq(fi_recv(a.ep, dst.data(), dst.len, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
		ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, src.data(), len, nullptr, self, &sctx); }), 0);
		Tracker t;
		t.expect(&sctx, 1, kSendMsg, "send to self");
		t.expect(&rctx, 1, kRecvMsg, "receive from self");
		t.wait(a);
		ck_assert_uint_eq(t.get(&rctx).e.len, len);
		ck_assert_uint_eq(t.get(&rctx).src, self);
		dst.check(len, seed, "send to self");
		seed++;
	}
	// Tagged, unexpected: sent before the receive.
	std::vector<uint8_t> src = pattern(50, seed);
	RecvBuf dst(50);
	fi_context rctx, sctx;
	ck_assert_int_eq(post_retry([&] { return fi_tsend(a.ep, src.data(), 50, nullptr, self, 0x5e1f, &sctx); }), 0);
	settle(100);
	ck_assert_int_eq(fi_trecv(a.ep, dst.data(), dst.len, nullptr, self, 0x5e1f, 0, &rctx), 0);
	Tracker t;
	t.expect(&sctx, 1, kSendTag, "tsend to self");
	t.expect(&rctx, 1, kRecvTag, "trecv from self");
	t.wait(a);
	ck_assert_uint_eq(t.get(&rctx).e.tag, 0x5e1f);
	ck_assert_uint_eq(t.get(&rctx).src, self);
	dst.check(50, seed, "tsend to self");
	expect_none(a);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_tagged

START_TEST(rdm_tagged_match_ignore)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b), from = b.addr_of(a);
	std::vector<uint8_t> src[6];
	const size_t len[6] = {100, 120, 130, 1, 40, 50};
	for (int k = 0; k < 6; k++)
		src[k] = pattern(len[k], 200 + k);
	RecvBuf r0(256), r1(256), r2(256), r3(256), r4(256), r5(256);
	fi_context rctx[6], sctx[6];
	auto tsend = [&](int k, uint64_t tag) {
		ck_assert_int_eq(post_retry([&] { return fi_tsend(a.ep, src[k].data(), len[k], nullptr, to, tag, &sctx[k]); }),
				 0);
	};
	// r0 takes 0x12?? (low byte ignored), r1 exactly 0xab.
	ck_assert_int_eq(fi_trecv(b.ep, r0.data(), r0.len, nullptr, FI_ADDR_UNSPEC, 0x1200, 0xff, &rctx[0]), 0);
	ck_assert_int_eq(fi_trecv(b.ep, r1.data(), r1.len, nullptr, FI_ADDR_UNSPEC, 0xab, 0, &rctx[1]), 0);
	// 0xab differs from 0x1200 outside the ignored bits: it passes r0 by.
	tsend(0, 0xab);
	Completion c = expect_ok(b, &rctx[1], kRecvTag, "tag 0xab");
	ck_assert_uint_eq(c.e.tag, 0xab);
	ck_assert_uint_eq(c.e.len, len[0]);
	ck_assert_uint_eq(c.src, from);
	r1.check(len[0], 200, "tag 0xab");
	// 0x2234 matches neither.
	tsend(1, 0x2234);
	expect_none(b, 300, "tag 0x2234 with no receive for it");
	// 0x1299 is r0's.
	tsend(2, 0x1299);
	c = expect_ok(b, &rctx[0], kRecvTag, "tag 0x1299");
	ck_assert_uint_eq(c.e.tag, 0x1299);
	ck_assert_uint_eq(c.e.len, len[2]);
	r0.check(len[2], 202, "tag 0x1299");
	// The one that matched nothing waited for its own receive.
	ck_assert_int_eq(fi_trecv(b.ep, r2.data(), r2.len, nullptr, FI_ADDR_UNSPEC, 0x2234, 0, &rctx[2]), 0);
	c = expect_ok(b, &rctx[2], kRecvTag, "tag 0x2234");
	ck_assert_uint_eq(c.e.tag, 0x2234);
	ck_assert_uint_eq(c.e.len, len[1]);
	r2.check(len[1], 201, "tag 0x2234");
	// Every bit ignored: any tag, reported as sent.
	ck_assert_int_eq(fi_trecv(b.ep, r3.data(), r3.len, nullptr, FI_ADDR_UNSPEC, 0, ~0ULL, &rctx[3]), 0);
	tsend(3, 0xdeadbeefcafe0001ULL);
	c = expect_ok(b, &rctx[3], kRecvTag, "any tag");
	ck_assert_uint_eq(c.e.tag, 0xdeadbeefcafe0001ULL);
	r3.check(len[3], 203, "any tag");
	// Tagged and untagged never meet: each waits for its own kind.
	ck_assert_int_eq(fi_recv(b.ep, r4.data(), r4.len, nullptr, FI_ADDR_UNSPEC, &rctx[4]), 0);
	ck_assert_int_eq(fi_trecv(b.ep, r5.data(), r5.len, nullptr, FI_ADDR_UNSPEC, 5, 0, &rctx[5]), 0);
	tsend(4, 5);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, src[5].data(), len[5], nullptr, to, &sctx[5]); }), 0);
	Tracker tb, ta;
	tb.expect(&rctx[4], 1, kRecvMsg, "untagged receive");
	tb.expect(&rctx[5], 1, kRecvTag, "tagged receive");
	ta.expect(sctx, 5, kSendTag, "tagged sends");
	ta.expect(&sctx[5], 1, kSendMsg, "untagged send");
	tb.wait(b);
	ta.wait(a);
	ck_assert_uint_eq(tb.get(&rctx[4]).e.len, len[5]);
	r4.check(len[5], 205, "untagged");
	ck_assert_uint_eq(tb.get(&rctx[5]).e.len, len[4]);
	ck_assert_uint_eq(tb.get(&rctx[5]).e.tag, 5);
	r5.check(len[4], 204, "tagged");
	expect_none(a);
	expect_none(b);
}
END_TEST

// FI_DIRECTED_RECV with three endpoints: a receive for one source ignores the
// same tag from another.
START_TEST(rdm_tagged_directed_recv)
{
	RdmEnv env;
	RdmNode r(env), s1(env), s2(env);
	connect_all({&r, &s1, &s2});
	const fi_addr_t f1 = r.addr_of(s1), f2 = r.addr_of(s2);
	std::vector<uint8_t> m[6];
	for (int k = 0; k < 6; k++)
		m[k] = pattern(64 + 8 * k, 300 + k);
	fi_context sc1[3], sc2[3], pk;
	auto send = [&](RdmNode &s, int k, uint64_t tag, fi_context *ctx, bool tagged = true) {
		ck_assert_int_eq(post_retry([&] {
					 return tagged ? fi_tsend(s.ep, m[k].data(), m[k].size(), nullptr, s.addr_of(r), tag, ctx)
						       : fi_send(s.ep, m[k].data(), m[k].size(), nullptr, s.addr_of(r), ctx);
				 }),
				 0);
	};
	auto check = [&](const Completion &c, int k, fi_addr_t src, RecvBuf &buf, const char *what) {
		ck_assert_msg(c.e.len == m[k].size(), "%s: len %zu", what, c.e.len);
		ck_assert_msg(c.src == src, "%s: source %" PRIu64 ", expected %" PRIu64, what, c.src, src);
		buf.check(m[k].size(), 300 + k, what);
	};
	RecvBuf b[6] = {RecvBuf(256), RecvBuf(256), RecvBuf(256), RecvBuf(256), RecvBuf(256), RecvBuf(256)};
	fi_context rc[6];

	// s2's message with tag 7 arrives first and waits.
	send(s2, 0, 7, &sc2[0]);
	Completion p = peek_until_found(r, 7, &pk);
	ck_assert_uint_eq(p.src, f2);
	// A receive for s1 only leaves it there...
	ck_assert_int_eq(fi_trecv(r.ep, b[0].data(), b[0].len, nullptr, f1, 7, 0, &rc[0]), 0);
	expect_none(r, 300, "receive directed at s1, message from s2");
	// ...and takes s1's.
	send(s1, 1, 7, &sc1[0]);
	check(expect_ok(r, &rc[0], kRecvTag, "directed at s1"), 1, f1, b[0], "directed at s1");
	// Any source: s2's waiting message.
	ck_assert_int_eq(fi_trecv(r.ep, b[1].data(), b[1].len, nullptr, FI_ADDR_UNSPEC, 7, 0, &rc[1]), 0);
	check(expect_ok(r, &rc[1], kRecvTag, "any source"), 0, f2, b[1], "any source after directed");

	// The directed receive first, the wrong sender's message after it.
	ck_assert_int_eq(fi_trecv(r.ep, b[2].data(), b[2].len, nullptr, f2, 9, 0, &rc[2]), 0);
	send(s1, 2, 9, &sc1[1]);
	expect_none(r, 300, "receive directed at s2, message from s1");
	send(s2, 3, 9, &sc2[1]);
	check(expect_ok(r, &rc[2], kRecvTag, "directed at s2"), 3, f2, b[2], "directed at s2");
	ck_assert_int_eq(fi_trecv(r.ep, b[3].data(), b[3].len, nullptr, f1, 9, 0, &rc[3]), 0);
	check(expect_ok(r, &rc[3], kRecvTag, "directed at s1, waiting"), 2, f1, b[3], "directed at s1, waiting");

	// Untagged receives are directed the same way.
	ck_assert_int_eq(fi_recv(r.ep, b[4].data(), b[4].len, nullptr, f2, &rc[4]), 0);
	send(s1, 4, 0, &sc1[2], false);
	expect_none(r, 300, "untagged receive directed at s2, message from s1");
	send(s2, 5, 0, &sc2[2], false);
	check(expect_ok(r, &rc[4], kRecvMsg, "untagged directed"), 5, f2, b[4], "untagged directed at s2");
	ck_assert_int_eq(fi_recv(r.ep, b[5].data(), b[5].len, nullptr, FI_ADDR_UNSPEC, &rc[5]), 0);
	check(expect_ok(r, &rc[5], kRecvMsg, "untagged any"), 4, f1, b[5], "untagged any source");

	Tracker t1, t2;
	t1.expect(sc1, 2, kSendTag, "s1's tagged sends");
	t1.expect(&sc1[2], 1, kSendMsg, "s1's send");
	t2.expect(sc2, 2, kSendTag, "s2's tagged sends");
	t2.expect(&sc2[2], 1, kSendMsg, "s2's send");
	t1.wait(s1);
	t2.wait(s2);
	expect_none(r);
}
END_TEST

START_TEST(rdm_tagged_any_source)
{
	RdmEnv env;
	RdmNode r(env), s1(env), s2(env);
	connect_all({&r, &s1, &s2});
	std::vector<uint8_t> m1 = pattern(40, 11), m2 = pattern(50, 12), m3 = pattern(60, 13), m4 = pattern(70, 14);
	RecvBuf b[4] = {RecvBuf(256), RecvBuf(256), RecvBuf(256), RecvBuf(256)};
	fi_context rc[4], sc1[2], sc2[2];
	for (int k = 0; k < 2; k++)
		ck_assert_int_eq(fi_trecv(r.ep, b[k].data(), b[k].len, nullptr, FI_ADDR_UNSPEC, 9, 0, &rc[k]), 0);
	// One after the other: the receives in posting order, each naming its
	// sender.
	ck_assert_int_eq(post_retry([&] { return fi_tsend(s1.ep, m1.data(), 40, nullptr, s1.addr_of(r), 9, &sc1[0]); }), 0);
	Completion c = expect_ok(r, &rc[0], kRecvTag, "from s1");
	ck_assert_uint_eq(c.src, r.addr_of(s1));
	ck_assert_uint_eq(c.e.len, 40);
	b[0].check(40, 11, "from s1");
	ck_assert_int_eq(post_retry([&] { return fi_tsend(s2.ep, m2.data(), 50, nullptr, s2.addr_of(r), 9, &sc2[0]); }), 0);
	c = expect_ok(r, &rc[1], kRecvTag, "from s2");
	ck_assert_uint_eq(c.src, r.addr_of(s2));
	ck_assert_uint_eq(c.e.len, 50);
	b[1].check(50, 12, "from s2");
	// Both at once: each receive gets one of them, whole, with its source.
	for (int k = 2; k < 4; k++)
		ck_assert_int_eq(fi_trecv(r.ep, b[k].data(), b[k].len, nullptr, FI_ADDR_UNSPEC, 9, 0, &rc[k]), 0);
	ck_assert_int_eq(post_retry([&] { return fi_tsend(s1.ep, m3.data(), 60, nullptr, s1.addr_of(r), 9, &sc1[1]); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_tsend(s2.ep, m4.data(), 70, nullptr, s2.addr_of(r), 9, &sc2[1]); }), 0);
	Tracker tr, t1, t2;
	tr.expect(&rc[2], 2, kRecvTag, "two at once");
	t1.expect(sc1, 2, kSendTag, "s1's sends");
	t2.expect(sc2, 2, kSendTag, "s2's sends");
	tr.wait(r);
	t1.wait(s1);
	t2.wait(s2);
	std::set<fi_addr_t> sources;
	for (int k = 2; k < 4; k++) {
		const Completion &e = tr.get(&rc[k]);
		sources.insert(e.src);
		const bool one = e.src == r.addr_of(s1);
		ck_assert_msg(one || e.src == r.addr_of(s2), "source %" PRIu64, e.src);
		ck_assert_uint_eq(e.e.len, one ? 60 : 70);
		ck_assert_uint_eq(e.e.tag, 9);
		b[k].check(e.e.len, one ? 13 : 14, "two at once");
	}
	ck_assert_uint_eq(sources.size(), 2);
	expect_none(r);
}
END_TEST

// Tagged messages before their receives: each receive, posted in another
// order, gets the message with its tag; same-tag messages in send order.
START_TEST(rdm_tagged_unexpected)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	constexpr int N = 20;
	auto size_of = [](int i) { return i == 7 ? 200 * KiB : i == 13 ? 100 * KiB : size_t(i * 397 % 5000); };
	std::vector<std::vector<uint8_t>> src(N);
	fi_context sctx[N + 3], rctx[N + 3];
	Tracker ta, tb;
	ta.expect(sctx, N + 3, kSendTag, "unexpected tagged sends");
	tb.expect(rctx, N + 3, kRecvTag, "late tagged receives");
	for (int i = 0; i < N; i++) {
		src[i] = pattern(size_of(i), 400 + i);
		ck_assert_int_eq(post_retry([&] {
					 return fi_tsend(a.ep, src[i].data(), size_of(i), nullptr, a.addr_of(b), 100 + i,
							 &sctx[i]);
				 }),
				 0);
	}
	// Three of one tag.
	std::vector<uint8_t> same[3];
	for (int k = 0; k < 3; k++) {
		same[k] = pattern(10 * (k + 1), 450 + k);
		ck_assert_int_eq(post_retry([&] {
					 return fi_tsend(a.ep, same[k].data(), same[k].size(), nullptr, a.addr_of(b), 500,
							 &sctx[N + k]);
				 }),
				 0);
	}
	settle_sends(ta, a);
	ck_assert_msg(b.backlog.empty(), "a completion before any receive: %s", b.backlog.front().describe().c_str());
	// Receives in reverse tag order.
	std::vector<std::unique_ptr<RecvBuf>> dst(N);
	for (int i = N - 1; i >= 0; i--) {
		dst[i] = std::make_unique<RecvBuf>(size_of(i));
		ck_assert_int_eq(post_retry([&] {
					 return fi_trecv(b.ep, dst[i]->data(), dst[i]->len, nullptr, FI_ADDR_UNSPEC, 100 + i, 0,
							 &rctx[i]);
				 }),
				 0);
	}
	RecvBuf sd[3] = {RecvBuf(64), RecvBuf(64), RecvBuf(64)};
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(fi_trecv(b.ep, sd[k].data(), sd[k].len, nullptr, FI_ADDR_UNSPEC, 500, 0, &rctx[N + k]), 0);
	tb.wait(b);
	ta.wait(a);
	for (int i = 0; i < N; i++) {
		const Completion &c = tb.get(&rctx[i]);
		char what[48];
		snprintf(what, sizeof what, "tag %d", 100 + i);
		ck_assert_msg(c.e.tag == uint64_t(100 + i), "%s: tag 0x%" PRIx64, what, c.e.tag);
		ck_assert_msg(c.e.len == size_of(i), "%s: len %zu", what, c.e.len);
		ck_assert_uint_eq(c.src, b.addr_of(a));
		dst[i]->check(size_of(i), 400 + i, what);
	}
	for (int k = 0; k < 3; k++) {
		const Completion &c = tb.get(&rctx[N + k]);
		ck_assert_msg(c.e.len == 10 * size_t(k + 1), "same tag, receive %d: len %zu (out of order?)", k, c.e.len);
		sd[k].check(c.e.len, 450 + k, "same tag, in order");
	}
	expect_none(a);
	expect_none(b);
}
END_TEST

START_TEST(rdm_tagged_inject_data)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const uint64_t mask = env.cq_data_mask();
	const size_t inj = env.info->tx_attr->inject_size;
	const fi_addr_t to = a.addr_of(b);
	const size_t len[4] = {std::min<size_t>(inj, 48), 200, std::min<size_t>(inj, 24), 256 * KiB};
	const uint64_t tag[4] = {0x1000000000000001ULL, 2, 3, 4};
	const uint64_t data[4] = {0, 0xa1b2c3d4 & mask, 0x01020304 & mask, 0xfeedf00d & mask};
	std::vector<uint8_t> src[4];
	std::unique_ptr<RecvBuf> dst[4];
	fi_context rctx[4], sctx[4];
	for (int k = 0; k < 4; k++) {
		src[k] = pattern(len[k], 500 + k);
		dst[k] = std::make_unique<RecvBuf>(len[k]);
		ck_assert_int_eq(fi_trecv(b.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, tag[k], 0, &rctx[k]), 0);
	}
	ck_assert_int_eq(post_retry([&] { return fi_tinject(a.ep, src[0].data(), len[0], to, tag[0]); }), 0);
	memset(src[0].data(), 0xee, len[0]);
	ck_assert_int_eq(post_retry([&] {
				 return fi_tsenddata(a.ep, src[1].data(), len[1], nullptr, data[1], to, tag[1], &sctx[1]);
			 }),
			 0);
	ck_assert_int_eq(post_retry([&] { return fi_tinjectdata(a.ep, src[2].data(), len[2], data[2], to, tag[2]); }), 0);
	memset(src[2].data(), 0xee, len[2]);
	ck_assert_int_eq(post_retry([&] {
				 return fi_tsenddata(a.ep, src[3].data(), len[3], nullptr, data[3], to, tag[3], &sctx[3]);
			 }),
			 0);
	Tracker tb, ta;
	tb.expect(rctx, 1, kRecvTag, "tinject");
	tb.expect(&rctx[1], 3, kRecvTag | FI_REMOTE_CQ_DATA, "with data");
	ta.expect(&sctx[1], 1, kSendTag, "tsenddata");
	ta.expect(&sctx[3], 1, kSendTag, "large tsenddata");
	tb.wait(b);
	ta.wait(a);
	for (int k = 0; k < 4; k++) {
		const Completion &c = tb.get(&rctx[k]);
		ck_assert_uint_eq(c.e.tag, tag[k]);
		ck_assert_uint_eq(c.e.len, len[k]);
		if (k)
			ck_assert_uint_eq(c.e.data, data[k]);
		ck_assert_uint_eq(c.src, b.addr_of(a));
		dst[k]->check(len[k], 500 + k, "tagged inject/data");
	}
	expect_none(a, 300, "tinject, tinjectdata");
	expect_none(b);
}
END_TEST

// FI_PEEK, FI_PEEK | FI_CLAIM then FI_CLAIM, FI_PEEK | FI_DISCARD,
// FI_CLAIM | FI_DISCARD.
START_TEST(rdm_tagged_peek_claim_discard)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	const uint64_t data = 0x5eed1234 & env.cq_data_mask();
	fi_context pk, cl, cl2, plain, rc0, sc[6];
	auto tsend = [&](std::vector<uint8_t> &m, uint64_t tag, fi_context *ctx) {
		ck_assert_int_eq(post_retry([&] { return fi_tsend(a.ep, m.data(), m.size(), nullptr, to, tag, ctx); }), 0);
	};

	// Nothing there: FI_ENOMSG.
	Completion c = peek_once(b, 0x55, &pk);
	ck_assert_msg(!c.ok && c.err.err == FI_ENOMSG, "peek with nothing sent: %s", c.describe().c_str());

	// A message: the peek reports it (length, tag, data, source) and leaves it.
	std::vector<uint8_t> m0 = pattern(100, 600);
	ck_assert_int_eq(post_retry([&] { return fi_tsenddata(a.ep, m0.data(), 100, nullptr, data, to, 0x55, &sc[0]); }),
			 0);
	c = peek_until_found(b, 0x55, &pk);
	ck_assert_msg((c.e.flags & (FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA)) == (FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA),
		      "peek: %s", c.describe().c_str());
	ck_assert_uint_eq(c.e.len, 100);
	ck_assert_uint_eq(c.e.tag, 0x55);
	ck_assert_uint_eq(c.e.data, data);
	ck_assert_uint_eq(c.src, b.addr_of(a));
	c = peek_once(b, 0x55, &pk);
	ck_assert_msg(c.ok && c.e.len == 100, "second peek: %s", c.describe().c_str());
	RecvBuf d0(256);
	ck_assert_int_eq(fi_trecv(b.ep, d0.data(), d0.len, nullptr, FI_ADDR_UNSPEC, 0x55, 0, &rc0), 0);
	c = expect_ok(b, &rc0, kRecvTag | FI_REMOTE_CQ_DATA, "receive after peek");
	ck_assert_uint_eq(c.e.len, 100);
	ck_assert_uint_eq(c.e.data, data);
	d0.check(100, 600, "receive after peek");
	expect_peek_misses(b, 0x55, "after the receive");

	// FI_PEEK | FI_CLAIM: the message is the claim's; an ordinary receive and
	// a peek no longer see it; FI_CLAIM with the same context gets it.
	std::vector<uint8_t> m1 = pattern(150, 601);
	tsend(m1, 0x66, &sc[1]);
	c = peek_until_found(b, 0x66, &cl, FI_CLAIM);
	ck_assert_uint_eq(c.e.len, 150);
	ck_assert_uint_eq(c.e.tag, 0x66);
	RecvBuf pbuf(256), cbuf(256);
	ck_assert_int_eq(fi_trecv(b.ep, pbuf.data(), pbuf.len, nullptr, FI_ADDR_UNSPEC, 0x66, 0, &plain), 0);
	expect_none(b, 300, "ordinary receive for a claimed message");
	expect_peek_misses(b, 0x66, "peek at a claimed message");
	iovec iov = {cbuf.data(), cbuf.len};
	fi_msg_tagged m = make_tmsg(&iov, 1, FI_ADDR_UNSPEC, 0x66, 0, &cl);
	ck_assert_int_eq(fi_trecvmsg(b.ep, &m, FI_CLAIM), 0);
	c = expect_ok(b, &cl, kRecvTag, "FI_CLAIM");
	ck_assert_uint_eq(c.e.len, 150);
	ck_assert_uint_eq(c.e.tag, 0x66);
	cbuf.check(150, 601, "FI_CLAIM");
	// The ordinary receive takes the next one.
	std::vector<uint8_t> m2 = pattern(60, 602);
	tsend(m2, 0x66, &sc[2]);
	c = expect_ok(b, &plain, kRecvTag, "receive after the claim");
	ck_assert_uint_eq(c.e.len, 60);
	pbuf.check(60, 602, "receive after the claim");

	// FI_PEEK | FI_DISCARD, small and rendezvous: gone, and the sends succeed.
	std::vector<uint8_t> m3 = pattern(70, 603), m4 = pattern(256 * KiB, 604);
	tsend(m3, 0x77, &sc[3]);
	tsend(m4, 0x78, &sc[4]);
	c = peek_until_found(b, 0x77, &pk, FI_DISCARD);
	c = peek_until_found(b, 0x78, &pk, FI_DISCARD);
	expect_peek_misses(b, 0x77, "after FI_PEEK | FI_DISCARD");
	expect_peek_misses(b, 0x78, "after FI_PEEK | FI_DISCARD (rendezvous)");

	// FI_PEEK | FI_CLAIM, then FI_CLAIM | FI_DISCARD: the buffer is ignored.
	std::vector<uint8_t> m5 = pattern(80, 605);
	tsend(m5, 0x88, &sc[5]);
	c = peek_until_found(b, 0x88, &cl2, FI_CLAIM);
	ck_assert_uint_eq(c.e.len, 80);
	std::vector<uint8_t> dbuf(256, kSentinel);
	iov = {dbuf.data(), dbuf.size()};
	m = make_tmsg(&iov, 1, FI_ADDR_UNSPEC, 0x88, 0, &cl2);
	ck_assert_int_eq(fi_trecvmsg(b.ep, &m, FI_CLAIM | FI_DISCARD), 0);
	c = next(b);
	ck_assert_msg(c.ok && c.e.op_context == &cl2, "FI_CLAIM | FI_DISCARD: %s", c.describe().c_str());
	expect_filled(dbuf.data(), dbuf.size(), kSentinel, "FI_CLAIM | FI_DISCARD wrote into the buffer");
	expect_peek_misses(b, 0x88, "after FI_CLAIM | FI_DISCARD");

	Tracker ta;
	ta.expect(sc, 6, kSendTag, "sends of peeked, claimed and discarded messages");
	ta.wait(a);
	expect_none(a);
	expect_none(b);
}
END_TEST

START_TEST(rdm_tagged_cancel)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	RecvBuf b1(256), b2(256), b3(256), b4(256);
	fi_context c1, c2, c3, c4, sc[2];
	// A cancelled receive completes with FI_ECANCELED and takes nothing.
	ck_assert_int_eq(fi_trecv(b.ep, b1.data(), b1.len, nullptr, FI_ADDR_UNSPEC, 0x99, 0, &c1), 0);
	ck_assert_int_eq(fi_cancel(&b.ep->fid, &c1), 0);
	expect_err(b, &c1, FI_ECANCELED, "cancelled trecv");
	ck_assert_int_eq(fi_trecv(b.ep, b2.data(), b2.len, nullptr, FI_ADDR_UNSPEC, 0x99, 0, &c2), 0);
	std::vector<uint8_t> m0 = pattern(90, 700);
	ck_assert_int_eq(post_retry([&] { return fi_tsend(a.ep, m0.data(), 90, nullptr, a.addr_of(b), 0x99, &sc[0]); }), 0);
	Completion c = expect_ok(b, &c2, kRecvTag, "receive after the cancelled one");
	ck_assert_uint_eq(c.e.len, 90);
	b2.check(90, 700, "receive after the cancelled one");
	expect_filled(b1.data(), b1.b.size(), kSentinel, "cancelled receive's buffer");
	// Untagged the same.
	ck_assert_int_eq(fi_recv(b.ep, b3.data(), b3.len, nullptr, FI_ADDR_UNSPEC, &c3), 0);
	ck_assert_int_eq(fi_cancel(&b.ep->fid, &c3), 0);
	expect_err(b, &c3, FI_ECANCELED, "cancelled recv");
	ck_assert_int_eq(fi_recv(b.ep, b4.data(), b4.len, nullptr, FI_ADDR_UNSPEC, &c4), 0);
	std::vector<uint8_t> m1 = pattern(33, 701);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, m1.data(), 33, nullptr, a.addr_of(b), &sc[1]); }), 0);
	c = expect_ok(b, &c4, kRecvMsg, "recv after the cancelled one");
	ck_assert_uint_eq(c.e.len, 33);
	b4.check(33, 701, "recv after the cancelled one");
	expect_filled(b3.data(), b3.b.size(), kSentinel, "cancelled recv's buffer");
	// Cancelling what already completed reports nothing more.
	(void)fi_cancel(&b.ep->fid, &c1);
	(void)fi_cancel(&b.ep->fid, &c2);
	expect_none(b, 300, "cancel of completed receives");
	Tracker ta;
	ta.expect(sc, 1, kSendTag, "tsend");
	ta.expect(&sc[1], 1, kSendMsg, "send");
	ta.wait(a);
}
END_TEST

// Back-pressure: with FI_VRMA_RDM_UNEXPECTED_MAX at 256 KiB, 4 KiB messages
// nobody receives pause their sender once the receiver holds more than the
// limit (its sends return -FI_EAGAIN, for good while nothing is received);
// nothing is dropped and no connection fails. Once receives are posted the
// queue drains, the sender resumes, and every message arrives exactly once,
// in order, with its bytes, and every send completes.
START_TEST(rdm_unexpected_backpressure)
{
	constexpr size_t kLimit = 256 * KiB, kLen = 4 * KiB, kMax = 1024;
	ScopedEnv limit("FI_VRMA_RDM_UNEXPECTED_MAX", "262144");
	RdmEnv env;
	RdmNode r(env), s(env);
	connect_all({&r, &s});
	std::vector<std::vector<uint8_t>> out(kMax), in(kMax);
	std::vector<fi_context> sctx(kMax), rctx(kMax);
	for (size_t i = 0; i < kMax; i++) {
		out[i] = pattern(kLen, static_cast<uint32_t>(3000 + i));
		in[i].assign(kLen, 0);
	}
	auto send = [&](size_t i) {
		return fi_tsend(s.ep, out[i].data(), kLen, nullptr, s.addr_of(r), 0x500 + i, &sctx[i]);
	};
	// No receive posted: send until the sender has been refused for 2 s
	// with every node progressing.
	const size_t sent = post_until_refused(send, kMax, 2000, "fi_tsend");
	fprintf(stderr, "rdm_unexpected_backpressure: %zu messages of %zu bytes before the sender stopped\n", sent, kLen);
	// Paused past the limit and within the grace (4 x the peer queue of
	// 128); without back-pressure all 1024 (4 MiB) would be kept.
	ck_assert_msg(sent < kMax, "the sender was never paused: %zu messages of %zu bytes kept", sent, kLen);
	ck_assert_msg(sent * kLen > kLimit, "paused after %zu messages, below the limit of %zu bytes", sent, kLimit);
	ck_assert_msg(sent <= kLimit / kLen + 4 * 128, "paused only after %zu messages", sent);
	ck_assert_uint_eq(env.info->rx_attr->total_buffered_recv, kLimit);
	for (const Completion &c : s.backlog)
		ck_assert_msg(c.ok, "the paused sender got %s", c.describe().c_str());
	for (const Completion &c : r.backlog)
		ck_assert_msg(false, "the receiver got %s before it posted a receive", c.describe().c_str());
	// Receives for all: the first `sent` take the queued messages, the
	// sender resumes, the rest go straight to their receives.
	for (size_t i = 0; i < kMax; i++)
		post([&] { return fi_trecv(r.ep, in[i].data(), kLen, nullptr, r.addr_of(s), 0x500 + i, 0, &rctx[i]); },
		     "fi_trecv");
	for (size_t i = sent; i < kMax; i++)
		post([&] { return send(i); }, "fi_tsend after the receives");
	Tracker ts, tr;
	ts.expect(sctx.data(), kMax, kSendTag, "sends");
	tr.expect(rctx.data(), kMax, kRecvTag, "receives");
	Deadline d(kTimeoutMs);
	while (!ts.done() || !tr.done()) {
		ck_assert_msg(!d.expired(), "%zu sends and %zu receives of %zu completed", ts.count(), tr.count(), kMax);
		progress_all();
		ts.take(s);
		tr.take(r);
	}
	for (size_t i = 0; i < kMax; i++) {
		const Completion &c = tr.get(&rctx[i]);
		ck_assert_msg(c.e.len == kLen && c.e.tag == 0x500 + i && c.src == r.addr_of(s),
			      "receive %zu: len %zu tag %#" PRIx64, i, c.e.len, c.e.tag);
		expect_pattern(in[i].data(), kLen, static_cast<uint32_t>(3000 + i), "a paused sender's message");
	}
	expect_none(r);
	expect_none(s);
}
END_TEST

// The drain watch: a receiver that never progresses takes its 256 receive
// buffers' worth of messages, and then none (RNR). With
// FI_VRMA_RDM_DRAIN_TIMEOUT at 2 s the sender, progressing alone, fails that
// connection after 2 s without movement: each send ends exactly once, a
// prefix with success and the rest with FI_ETIMEDOUT. The receiver then
// delivers, in order, each once and exact, every message its sender was told
// arrived, and perhaps some of those that failed: RC acknowledges what the
// receiver took, and an acknowledgement still owed when the queue pair is
// flushed (rxe acknowledged only half of the 256 messages it took before
// the RNR NAK) leaves that send's outcome unknown, reported as failed.
START_TEST(rdm_drain_timeout)
{
	constexpr size_t kLen = 64, kMax = 600;
	ScopedEnv timeout("FI_VRMA_RDM_DRAIN_TIMEOUT", "2000");
	RdmEnv env;
	RdmNode r(env), s(env);
	connect_all({&r, &s});
	std::vector<std::vector<uint8_t>> out(kMax);
	std::vector<fi_context> sctx(kMax);
	for (size_t i = 0; i < kMax; i++)
		out[i] = pattern(kLen, static_cast<uint32_t>(4000 + i));
	using clock = std::chrono::steady_clock;
	std::map<const void *, Completion> done;
	clock::time_point last_ok = clock::now(), first_err{};
	auto take = [&] {
		s.poll();
		while (!s.backlog.empty()) {
			Completion c = s.backlog.front();
			s.backlog.pop_front();
			ck_assert_msg(done.emplace(c.context(), c).second, "a send completed twice: %s", c.describe().c_str());
			if (c.ok)
				last_ok = clock::now();
			else if (first_err == clock::time_point{})
				first_err = clock::now();
		}
	};
	size_t posted = 0;
	Deadline d(30000);
	while (first_err == clock::time_point{}) {
		ck_assert_msg(!d.expired(), "no send failed in 30 s (%zu posted, %zu completed)", posted, done.size());
		if (posted < kMax) {
			const ssize_t rc = fi_tsend(s.ep, out[posted].data(), kLen, nullptr, s.addr_of(r), posted,
						    &sctx[posted]);
			if (rc == 0) {
				posted++;
				continue;
			}
			ck_assert_msg(rc == -FI_EAGAIN, "fi_tsend #%zu: %zd", posted, rc);
		}
		take();
	}
	const double waited = std::chrono::duration<double>(first_err - last_ok).count();
	// Every posted send ends: wait for the rest of the flush.
	while (done.size() < posted) {
		ck_assert_msg(!d.expired(), "%zu of %zu sends completed", done.size(), posted);
		take();
	}
	std::set<uint64_t> delivered_ok;
	size_t failed = 0;
	for (size_t i = 0; i < posted; i++) {
		auto it = done.find(&sctx[i]);
		ck_assert_msg(it != done.end(), "send %zu never completed", i);
		if (it->second.ok) {
			ck_assert_msg(!failed, "send %zu succeeded after an earlier one failed", i);
			delivered_ok.insert(i);
		} else {
			ck_assert_msg(it->second.err.err == FI_ETIMEDOUT, "send %zu: %s", i, it->second.describe().c_str());
			failed++;
		}
	}
	ck_assert_msg(posted > 256 && failed > 0, "%zu posted, %zu failed: the receiver never ran out", posted, failed);
	ck_assert_msg(waited > 1.5 && waited < 8.0, "the connection failed %.2f s after the last send completed", waited);
	// The receiver, progressing again: messages 0, 1, 2, ... in order,
	// each with its bytes, at least all that succeeded and none that was
	// not sent.
	std::vector<uint8_t> in(kLen);
	size_t got = 0;
	for (;;) {
		fi_context rctx{};
		post([&] { return fi_trecv(r.ep, in.data(), kLen, nullptr, FI_ADDR_UNSPEC, 0, ~0ull, &rctx); },
		     "fi_trecv");
		if (got >= delivered_ok.size()) { // beyond what succeeded: maybe nothing more
			settle(500);
			if (r.backlog.empty()) {
				ck_assert_int_eq(fi_cancel(&r.ep->fid, &rctx), 0);
				expect_err(r, &rctx, FI_ECANCELED, "the last receive");
				break;
			}
		}
		Completion c = expect_ok(r, &rctx, kRecvTag, "a message taken before the timeout");
		ck_assert_msg(c.e.tag == got && got < posted, "delivered tag %" PRIu64 ", expected %zu (%zu posted)", c.e.tag,
			      got, posted);
		expect_pattern(in.data(), kLen, static_cast<uint32_t>(4000 + c.e.tag), "a drained message");
		got++;
	}
	fprintf(stderr, "rdm_drain_timeout: %zu sends succeeded, %zu failed, %zu delivered; failed %.2f s after the last success\n",
		delivered_ok.size(), failed, got, waited);
	// And the pair talks again (a new connection).
	fi_context sc{}, rc{};
	post([&] { return fi_trecv(r.ep, in.data(), kLen, nullptr, r.addr_of(s), 77, 0, &rc); }, "fi_trecv");
	post([&] { return fi_tsend(s.ep, out[0].data(), kLen, nullptr, s.addr_of(r), 77, &sc); }, "fi_tsend again");
	expect_ok(s, &sc, kSendTag, "a send after the timeout");
	expect_ok(r, &rc, kRecvTag, "its receive");
	expect_pattern(in.data(), kLen, 4000, "after the timeout");
}
END_TEST

// 1 MiB by rendezvous, arriving before its receive.
START_TEST(rdm_tagged_large_unexpected)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	std::vector<uint8_t> src = pattern(MiB, 800);
	fi_context pk, rctx, sctx;
	ck_assert_int_eq(post_retry([&] { return fi_tsend(a.ep, src.data(), MiB, nullptr, a.addr_of(b), 0x1000, &sctx); }),
			 0);
	Completion c = peek_until_found(b, 0x1000, &pk);
	ck_assert_uint_eq(c.e.len, MiB);
	ck_assert_uint_eq(c.src, b.addr_of(a));
	RecvBuf dst(MiB);
	ck_assert_int_eq(fi_trecv(b.ep, dst.data(), dst.len, nullptr, FI_ADDR_UNSPEC, 0x1000, 0, &rctx), 0);
	Tracker ta, tb;
	ta.expect(&sctx, 1, kSendTag, "1 MiB tsend");
	tb.expect(&rctx, 1, kRecvTag, "1 MiB trecv");
	tb.wait(b);
	ta.wait(a);
	ck_assert_uint_eq(tb.get(&rctx).e.len, MiB);
	ck_assert_uint_eq(tb.get(&rctx).e.tag, 0x1000);
	dst.check(MiB, 800, "1 MiB unexpected");
	expect_none(a);
	expect_none(b);
}
END_TEST

// Small, large, small with one tag from one peer: received in that order by
// receives posted once they all arrived.
START_TEST(rdm_tagged_order_small_large)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t len[3] = {100, MiB, 200};
	std::vector<uint8_t> src[3];
	fi_context sctx[3], rctx[3];
	Tracker ta, tb;
	ta.expect(sctx, 3, kSendTag, "small, large, small");
	tb.expect(rctx, 3, kRecvTag, "their receives");
	for (int k = 0; k < 3; k++) {
		src[k] = pattern(len[k], 900 + k);
		ck_assert_int_eq(post_retry([&] {
					 return fi_tsend(a.ep, src[k].data(), len[k], nullptr, a.addr_of(b), 5, &sctx[k]);
				 }),
				 0);
	}
	// The small ones have arrived once their sends completed (else give them
	// two seconds).
	progress_until(
		[&] {
			ta.take(a);
			return ta.has(&sctx[0]) && ta.has(&sctx[2]);
		},
		2000);
	std::unique_ptr<RecvBuf> dst[3];
	for (int k = 0; k < 3; k++) {
		dst[k] = std::make_unique<RecvBuf>(MiB);
		ck_assert_int_eq(fi_trecv(b.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, 5, 0, &rctx[k]), 0);
	}
	tb.wait(b);
	ta.wait(a);
	for (int k = 0; k < 3; k++) {
		const Completion &c = tb.get(&rctx[k]);
		ck_assert_msg(c.e.len == len[k], "receive %d got %zu bytes, expected %zu (order broken)", k, c.e.len, len[k]);
		dst[k]->check(len[k], 900 + k, "small/large/small");
	}
	expect_none(a);
	expect_none(b);
}
END_TEST

// Rendezvous receives beyond a connection's READ credits wait in the
// receiver's backlog and go out as earlier READs retire. One credit
// (FI_VRMA_RDM_RNDV_READS=1, read when the provider loads: each test runs
// in a child) and 64 KiB work requests, so a 300 KiB message is a chain of
// five READs that must go alone. Two senders, so that one connection's
// waiting reads do not hold back the other's; eager messages in between,
// whose receives complete while the reads wait.
START_TEST(rdm_rndv_read_credits)
{
	setenv("FI_VRMA_RDM_RNDV_READS", "1", 1);
	setenv("FI_VRMA_MAX_WR_SIZE", "65536", 1);
	RdmEnv env;
	RdmNode a(env), c(env), b(env);
	connect_all({&a, &c, &b});
	constexpr int kPer = 6;
	const size_t len[kPer] = {100 * KiB, 300 * KiB, 50, 64 * KiB + 1, 200 * KiB, 300};
	RdmNode *from[2] = {&a, &c};
	std::vector<uint8_t> src[2][kPer];
	fi_context sctx[2][kPer], rctx[2][kPer];
	Tracker ts[2], tb;
	for (int s = 0; s < 2; s++)
		ts[s].expect(sctx[s], kPer, kSendTag, s ? "sends of c" : "sends of a");
	tb.expect(&rctx[0][0], 2 * kPer, kRecvTag, "receives of b");
	// Everything arrives before its receive: the receives match at once and
	// all their reads are wanted together.
	for (int s = 0; s < 2; s++)
		for (int k = 0; k < kPer; k++) {
			src[s][k] = pattern(len[k], 2600 + 10 * s + k);
			ck_assert_int_eq(post_retry([&] {
						 return fi_tsend(from[s]->ep, src[s][k].data(), len[k], nullptr,
								 from[s]->addr_of(b), 0x100 + s, &sctx[s][k]);
					 }),
					 0);
		}
	std::unique_ptr<RecvBuf> dst[2][kPer];
	for (int k = 0; k < kPer; k++)
		for (int s = 0; s < 2; s++) {
			dst[s][k] = std::make_unique<RecvBuf>(300 * KiB);
			ck_assert_int_eq(fi_trecv(b.ep, dst[s][k]->data(), dst[s][k]->len, nullptr, b.addr_of(*from[s]),
						  0x100 + s, 0, &rctx[s][k]),
					 0);
		}
	tb.wait(b);
	ts[0].wait(a);
	ts[1].wait(c);
	for (int s = 0; s < 2; s++)
		for (int k = 0; k < kPer; k++) {
			const Completion &r = tb.get(&rctx[s][k]);
			ck_assert_msg(r.e.len == len[k], "receive %d of sender %d: %zu bytes, %zu sent", k, s, r.e.len,
				      len[k]);
			ck_assert_uint_eq(r.e.tag, 0x100 + s);
			ck_assert_uint_eq(r.src, b.addr_of(*from[s]));
			dst[s][k]->check(len[k], 2600 + 10 * s + k, "rendezvous behind one READ credit");
			ck_assert_uint_eq(ts[s].get(&sctx[s][k]).e.len, len[k]);
		}
	expect_none(a);
	expect_none(b);
	expect_none(c);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_multi_recv

// Two FI_MULTI_RECV buffers of 16 KiB, FI_OPT_MIN_MULTI_RECV 4 KiB, eight
// messages of 3000 bytes: the first buffer takes messages back to back
// (increasing, non-overlapping buf) until less than 4 KiB is left, then is
// released (FI_MULTI_RECV on its last message, or on a completion of its
// own); the rest go to the second.
START_TEST(rdm_multi_recv_buffer)
{
	fi_info *h = rdm_hints(kRdmCaps | FI_MULTI_RECV);
	RdmEnv env(h);
	fi_freeinfo(h);
	ck_assert_msg(env.info->caps & FI_MULTI_RECV, "caps 0x%" PRIx64, env.info->caps);
	constexpr size_t kBuf = 16384, kMin = 4096, kMsg = 3000, kAlignSlack = 64;
	constexpr int N = 8;
	RdmNodeOptions ro;
	ro.min_multi_recv = kMin;
	RdmNode r(env, ro), s(env);
	connect_all({&r, &s});
	size_t got_min = 0, optlen = sizeof got_min;
	ck_assert_int_eq(fi_getopt(&r.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got_min, &optlen), 0);
	ck_assert_uint_eq(got_min, kMin);

	std::vector<uint8_t> A(kBuf, kSentinel), B(kBuf, kSentinel);
	fi_context ca, cb, sctx[N];
	iovec ia = {A.data(), kBuf}, ib = {B.data(), kBuf};
	fi_msg ma = make_msg(&ia, 1, FI_ADDR_UNSPEC, &ca), mb = make_msg(&ib, 1, FI_ADDR_UNSPEC, &cb);
	ck_assert_int_eq(fi_recvmsg(r.ep, &ma, FI_MULTI_RECV), 0);
	ck_assert_int_eq(fi_recvmsg(r.ep, &mb, FI_MULTI_RECV), 0);
	std::vector<uint8_t> src[N];
	for (int i = 0; i < N; i++) {
		src[i] = pattern(kMsg, 1000 + i);
		ck_assert_int_eq(post_retry([&] { return fi_send(s.ep, src[i].data(), kMsg, nullptr, s.addr_of(r), &sctx[i]); }),
				 0);
	}

	int msgs = 0, in_a = 0, in_b = 0;
	bool a_released = false;
	uint8_t *end_a = A.data(), *end_b = B.data(); // end of the last message placed
	while (msgs < N || !a_released) {
		Completion c = next(r);
		ck_assert_msg(c.ok, "multi-receive: %s", c.describe().c_str());
		const bool is_a = c.e.op_context == &ca;
		ck_assert_msg(is_a || c.e.op_context == &cb, "multi-receive: %s", c.describe().c_str());
		if (!(c.e.flags & FI_RECV)) {
			// A release of its own.
			ck_assert_msg(c.e.flags == FI_MULTI_RECV && is_a && !a_released, "multi-receive: %s",
				      c.describe().c_str());
			a_released = true;
			ck_assert_msg(size_t(A.data() + kBuf - end_a) < kMin + kAlignSlack,
				      "buffer released with %td bytes left", A.data() + kBuf - end_a);
			continue;
		}
		ck_assert_msg((c.e.flags & ~FI_MULTI_RECV) == kRecvMsg, "multi-receive flags: %s", c.describe().c_str());
		ck_assert_uint_eq(c.e.len, kMsg);
		ck_assert_uint_eq(c.src, r.addr_of(s));
		uint8_t *p = static_cast<uint8_t *>(c.e.buf);
		uint8_t *base = is_a ? A.data() : B.data();
		uint8_t *&end = is_a ? end_a : end_b;
		ck_assert_msg(p >= end && p + kMsg <= base + kBuf, "message %d at offset %td of %s (last ended at %td)", msgs,
			      p - base, is_a ? "A" : "B", end - base);
		char what[48];
		snprintf(what, sizeof what, "message %d in buffer %s", msgs, is_a ? "A" : "B");
		expect_pattern(p, kMsg, 1000 + msgs, what);
		end = p + kMsg;
		if (is_a) {
			ck_assert_msg(!a_released && in_b == 0, "message %d in A after A was released or B was used", msgs);
			in_a++;
		} else {
			in_b++;
		}
		if (c.e.flags & FI_MULTI_RECV) {
			ck_assert_msg(is_a, "buffer B released with %td bytes left", B.data() + kBuf - end_b);
			a_released = true;
			ck_assert_msg(size_t(A.data() + kBuf - end_a) < kMin + kAlignSlack,
				      "buffer released with %td bytes left", A.data() + kBuf - end_a);
		}
		msgs++;
	}
	// 16384 bytes hold five messages of 3000 (4 KiB free after four).
	ck_assert_msg(in_a >= 4 && in_a <= 5, "%d messages in A", in_a);
	ck_assert_int_eq(in_a + in_b, N);
	Tracker ts;
	ts.expect(sctx, N, kSendMsg, "sends into multi-receive buffers");
	ts.wait(s);
	// B stays posted, not released.
	expect_none(r, 300, "multi-receive B");
}
END_TEST

// A rendezvous message into a multi-receive buffer, then an eager one
// that leaves less than FI_OPT_MIN_MULTI_RECV: the buffer is released only
// once the rendezvous' reads have landed (its FI_MULTI_RECV entry is the
// buffer's last), not with the eager message while they still write into
// it. One READ at a time, 4 KiB each, keeps the reads in flight long after
// the eager message arrived.
START_TEST(rdm_multi_recv_rndv_release)
{
	setenv("FI_VRMA_RDM_RNDV_READS", "1", 1);
	setenv("FI_VRMA_MAX_WR_SIZE", "4096", 1);
	fi_info *h = rdm_hints(kRdmCaps | FI_MULTI_RECV);
	RdmEnv env(h);
	fi_freeinfo(h);
	constexpr size_t kLong = 48 * KiB, kShort = 6000, kMin = 4096;
	constexpr size_t kBuf = kLong + kShort + kMin - 64; // the short one leaves < kMin
	RdmNodeOptions ro;
	ro.min_multi_recv = kMin;
	RdmNode r(env, ro), s(env);
	connect_all({&r, &s});
	std::vector<uint8_t> buf(kBuf, kSentinel);
	fi_context cbuf, sctx[2];
	iovec iov = {buf.data(), kBuf};
	fi_msg m = make_msg(&iov, 1, FI_ADDR_UNSPEC, &cbuf);
	ck_assert_int_eq(fi_recvmsg(r.ep, &m, FI_MULTI_RECV), 0);
	const std::vector<uint8_t> lng = pattern(kLong, 51), sht = pattern(kShort, 52);
	post([&] { return fi_send(s.ep, lng.data(), kLong, nullptr, s.addr_of(r), &sctx[0]); }, "the long send");
	post([&] { return fi_send(s.ep, sht.data(), kShort, nullptr, s.addr_of(r), &sctx[1]); }, "the short send");
	bool got_long = false, got_short = false, released = false;
	while (!released) {
		Completion c = next(r);
		ck_assert_msg(c.ok && c.e.op_context == &cbuf, "multi-receive: %s", c.describe().c_str());
		ck_assert_msg(!released, "an entry after the buffer's release: %s", c.describe().c_str());
		if (c.e.flags & FI_RECV) {
			if (c.e.len == kLong) {
				ck_assert(!got_long);
				got_long = true;
				expect_pattern(c.e.buf, kLong, 51, "the rendezvous message");
			} else {
				ck_assert_uint_eq(c.e.len, kShort);
				ck_assert(!got_short);
				got_short = true;
				expect_pattern(c.e.buf, kShort, 52, "the eager message");
			}
		}
		if (c.e.flags & FI_MULTI_RECV) {
			ck_assert_msg(got_long && got_short,
				      "the buffer was released while the rendezvous (%s) or the eager message (%s) "
				      "had not completed",
				      got_long ? "done" : "still reading", got_short ? "done" : "not placed");
			released = true;
		}
	}
	Tracker ts;
	ts.expect(sctx, 2, kSendMsg, "the two sends");
	ts.wait(s);
	expect_none(r, 300, "after the release");
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_conn

// Both sides send first, interleaved before either reads its CQ: 50 each
// way, all arrive once, in order.
START_TEST(rdm_conn_crossing_interleaved)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	constexpr int N = 50;
	auto len_of = [](int i) { return size_t(64 + 7 * i); };
	std::vector<uint8_t> sa[N], sb[N];
	std::unique_ptr<RecvBuf> ra[N], rb[N];
	fi_context rca[N], rcb[N], sca[N], scb[N];
	for (int i = 0; i < N; i++) {
		ra[i] = std::make_unique<RecvBuf>(512);
		rb[i] = std::make_unique<RecvBuf>(512);
		// (Nothing is sent yet: progress while posting changes nothing.)
		ck_assert_int_eq(post_retry([&] { return fi_recv(a.ep, ra[i]->data(), ra[i]->len, nullptr, FI_ADDR_UNSPEC, &rca[i]); }),
				 0);
		ck_assert_int_eq(post_retry([&] { return fi_recv(b.ep, rb[i]->data(), rb[i]->len, nullptr, FI_ADDR_UNSPEC, &rcb[i]); }),
				 0);
		sa[i] = pattern(len_of(i), 1100 + i);
		sb[i] = pattern(len_of(i), 1200 + i);
	}
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, sa[i].data(), len_of(i), nullptr, a.addr_of(b), &sca[i]); }),
				 0);
		ck_assert_int_eq(post_retry([&] { return fi_send(b.ep, sb[i].data(), len_of(i), nullptr, b.addr_of(a), &scb[i]); }),
				 0);
	}
	Tracker ta, tb;
	ta.expect(rca, N, kRecvMsg, "a's receives");
	ta.expect(sca, N, kSendMsg, "a's sends");
	tb.expect(rcb, N, kRecvMsg, "b's receives");
	tb.expect(scb, N, kSendMsg, "b's sends");
	ta.wait(a);
	tb.wait(b);
	for (int i = 0; i < N; i++) {
		char what[48];
		snprintf(what, sizeof what, "crossing message %d", i);
		const Completion &x = ta.get(&rca[i]), &y = tb.get(&rcb[i]);
		ck_assert_msg(x.e.len == len_of(i) && y.e.len == len_of(i), "%s: lengths %zu, %zu", what, x.e.len, y.e.len);
		ck_assert_uint_eq(x.src, a.addr_of(b));
		ck_assert_uint_eq(y.src, b.addr_of(a));
		ra[i]->check(len_of(i), 1200 + i, what);
		rb[i]->check(len_of(i), 1100 + i, what);
	}
	// Exactly once.
	expect_none(a);
	expect_none(b);
}
END_TEST

namespace {

// What one thread of rdm_conn_crossing_threads does with its node, by hand
// (the helpers are single-threaded): 50 receives, wait for the other, 50
// sends, then read its own CQ until all 100 completed. Failures go to err.
struct CrossSide {
	RdmNode *self = nullptr;
	fi_addr_t peer = FI_ADDR_NOTAVAIL;
	uint32_t seed = 0, peer_seed = 0;
	static constexpr int N = 50;
	// Room for the longest message (len_of(N - 1) = 737 bytes) and a sentinel.
	static constexpr size_t kBuf = 1024;
	std::vector<uint8_t> src[N];
	std::vector<uint8_t> dst[N];
	fi_context rctx[N], sctx[N];
	int rdone[N] = {}, sdone[N] = {};
	std::string err;

	static size_t len_of(int i) { return size_t(100 + 13 * i); }

	void fail(const std::string &what)
	{
		if (err.empty())
			err = what;
	}

	// One CQ read; false when the test must stop.
	bool poll()
	{
		fi_cq_tagged_entry e[8];
		fi_addr_t src_addr[8];
		ssize_t n = fi_cq_readfrom(self->cq, e, 8, src_addr);
		if (n == -FI_EAGAIN)
			return true;
		if (n == -FI_EAVAIL) {
			fi_cq_err_entry ee{};
			fi_cq_readerr(self->cq, &ee, 0);
			fail("error entry: " + std::string(fi_strerror(ee.err)));
			return false;
		}
		if (n < 0) {
			fail("fi_cq_readfrom: " + std::string(fi_strerror(static_cast<int>(-n))));
			return false;
		}
		for (ssize_t k = 0; k < n; k++) {
			auto *ctx = static_cast<fi_context *>(e[k].op_context);
			if (ctx >= rctx && ctx < rctx + N) {
				const int i = static_cast<int>(ctx - rctx);
				if (rdone[i]++ || e[k].flags != kRecvMsg || e[k].len != len_of(i) || src_addr[k] != peer) {
					fail("receive " + std::to_string(i) + ": twice, or wrong flags/len/source");
					return false;
				}
				for (size_t j = 0; j < len_of(i); j++)
					if (dst[i][j] != pattern_byte(peer_seed + i, j)) {
						fail("receive " + std::to_string(i) + ": data differs at " + std::to_string(j));
						return false;
					}
			} else if (ctx >= sctx && ctx < sctx + N) {
				const int i = static_cast<int>(ctx - sctx);
				if (sdone[i]++ || e[k].flags != kSendMsg) {
					fail("send " + std::to_string(i) + ": twice, or wrong flags");
					return false;
				}
			} else {
				fail("completion for an unknown context");
				return false;
			}
		}
		return true;
	}

	bool all_done() const
	{
		for (int i = 0; i < N; i++)
			if (rdone[i] != 1 || sdone[i] != 1)
				return false;
		return true;
	}

	void run(std::atomic<int> &ready)
	{
		Deadline d(2 * kTimeoutMs);
		for (int i = 0; i < N; i++) {
			src[i] = pattern(len_of(i), seed + i);
			dst[i].assign(kBuf, kSentinel);
			if (fi_recv(self->ep, dst[i].data(), dst[i].size(), nullptr, FI_ADDR_UNSPEC, &rctx[i])) {
				fail("fi_recv failed");
				return;
			}
		}
		ready++;
		while (ready.load() < 2)
			if (d.expired()) {
				fail("the other thread never got ready");
				return;
			}
		for (int i = 0; i < N; i++) {
			ssize_t rc;
			while ((rc = fi_send(self->ep, src[i].data(), len_of(i), nullptr, peer, &sctx[i])) == -FI_EAGAIN)
				if (!poll() || d.expired()) {
					fail("fi_send stayed -FI_EAGAIN");
					return;
				}
			if (rc) {
				fail("fi_send: " + std::string(fi_strerror(static_cast<int>(-rc))));
				return;
			}
		}
		while (!all_done()) {
			if (!poll())
				return;
			if (d.expired()) {
				fail("not everything completed in time");
				return;
			}
		}
	}
};

} // namespace

// The same with two threads, each owning an endpoint on a domain of its own,
// sending at the same moment.
START_TEST(rdm_conn_crossing_threads)
{
	RdmEnv e1, e2;
	RdmNode a(e1), b(e2);
	connect_all({&a, &b});
	auto x = std::make_unique<CrossSide>(), y = std::make_unique<CrossSide>();
	x->self = &a;
	x->peer = a.addr_of(b);
	x->seed = 1300;
	x->peer_seed = 1400;
	y->self = &b;
	y->peer = b.addr_of(a);
	y->seed = 1400;
	y->peer_seed = 1300;
	std::atomic<int> ready{0};
	std::thread tx([&] { x->run(ready); }), ty([&] { y->run(ready); });
	tx.join();
	ty.join();
	ck_assert_msg(x->err.empty(), "a: %s", x->err.c_str());
	ck_assert_msg(y->err.empty(), "b: %s", y->err.c_str());
	for (int i = 0; i < CrossSide::N; i++) {
		expect_filled(x->dst[i].data() + CrossSide::len_of(i), CrossSide::kBuf - CrossSide::len_of(i), kSentinel, "a's buffer");
		expect_filled(y->dst[i].data() + CrossSide::len_of(i), CrossSide::kBuf - CrossSide::len_of(i), kSentinel, "b's buffer");
	}
	expect_none(a);
	expect_none(b);
}
END_TEST

// A sender the receiver's AV does not hold: the message arrives, its source
// is FI_ADDR_NOTAVAIL; once inserted, the sender is named.
START_TEST(rdm_conn_unknown_sender)
{
	RdmEnv env;
	RdmNode r(env), s(env);
	s.insert(r); // r's AV stays empty
	const size_t len[2] = {100, 200 * KiB};
	std::vector<uint8_t> src[2];
	std::unique_ptr<RecvBuf> dst[2];
	fi_context rctx[2], sctx[2];
	for (int k = 0; k < 2; k++) {
		src[k] = pattern(len[k], 1500 + k);
		dst[k] = std::make_unique<RecvBuf>(len[k]);
		ck_assert_int_eq(fi_recv(r.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, &rctx[k]), 0);
		ck_assert_int_eq(post_retry([&] { return fi_send(s.ep, src[k].data(), len[k], nullptr, s.addr_of(r), &sctx[k]); }),
				 0);
	}
	Tracker tr, ts;
	tr.expect(rctx, 2, kRecvMsg, "from an unknown sender");
	ts.expect(sctx, 2, kSendMsg, "to a peer that does not know us");
	tr.wait(r);
	ts.wait(s);
	for (int k = 0; k < 2; k++) {
		const Completion &c = tr.get(&rctx[k]);
		ck_assert_msg(c.src == FI_ADDR_NOTAVAIL, "source %" PRIu64 " for a sender outside the AV", c.src);
		ck_assert_uint_eq(c.e.len, len[k]);
		dst[k]->check(len[k], 1500 + k, "unknown sender");
	}
	// Inserted now: named from the next message on, and reachable back.
	const fi_addr_t fs = r.insert(s);
	std::vector<uint8_t> m = pattern(64, 1510);
	RecvBuf d(64);
	fi_context rc2, sc2;
	ck_assert_int_eq(fi_recv(r.ep, d.data(), d.len, nullptr, FI_ADDR_UNSPEC, &rc2), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(s.ep, m.data(), 64, nullptr, s.addr_of(r), &sc2); }), 0);
	expect_ok(s, &sc2, kSendMsg, "send after the insert");
	Completion c = expect_ok(r, &rc2, kRecvMsg, "receive after the insert");
	ck_assert_msg(c.src == fs, "source %" PRIu64 ", expected %" PRIu64, c.src, fs);
	d.check(64, 1510, "after the insert");
	send_recv_one(r, s, 80, 1511);
}
END_TEST

// A peer whose endpoint closed: sends to it fail within the deadline, other
// peers are not affected, and a new endpoint at the same address is reached
// after fi_av_remove + fi_av_insert.
// Sends held back by FI_MORE when the endpoint closes: each still ends with
// exactly one entry on the CQ (success or error), none is lost.
START_TEST(rdm_conn_more_close)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	// Connected first: the held sends go on the queue pair's chain.
	std::vector<uint8_t> first = pattern(64, 70);
	RecvBuf r0(64);
	fi_context rctx, sctx;
	ck_assert_int_eq(fi_recv(b.ep, r0.data(), r0.len, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, first.data(), 64, nullptr, a.addr_of(b), &sctx); }), 0);
	expect_ok(a, &sctx, kSendMsg, "the first send");
	expect_ok(b, &rctx, kRecvMsg, "the first receive");
	constexpr int N = 3;
	std::vector<uint8_t> src = pattern(128, 71);
	fi_context mctx[N];
	for (int i = 0; i < N; i++) {
		iovec iov{src.data(), src.size()};
		fi_msg m = make_msg(&iov, 1, a.addr_of(b), &mctx[i]);
		ck_assert_int_eq(fi_sendmsg(a.ep, &m, FI_MORE | FI_COMPLETION), 0);
	}
	a.close_ep();
	int seen[N] = {};
	for (int k = 0; k < N; k++) {
		Completion c = next_alone(a);
		int i = 0;
		while (i < N && c.context() != &mctx[i])
			i++;
		ck_assert_msg(i < N, "an entry for an unknown context: %s", c.describe().c_str());
		ck_assert_msg(!seen[i]++, "two entries for held send %d", i);
		ck_assert_msg(c.flags() & FI_SEND, "held send %d: %s", i, c.describe().c_str());
	}
	expect_none(a, 300, "after the held sends");
}
END_TEST

// Sends held back by FI_MORE when the peer goes away: the connection fails
// and each held send still ends with exactly one entry (success or error).
START_TEST(rdm_conn_more_peer_gone)
{
	RdmEnv env;
	RdmNode a(env);
	auto b = std::make_unique<RdmNode>(env);
	connect_all({&a, b.get()});
	send_recv_one(a, *b, 64, 1700);
	constexpr int N = 3;
	std::vector<uint8_t> src = pattern(128, 72);
	fi_context mctx[N];
	for (int i = 0; i < N; i++) {
		iovec iov{src.data(), src.size()};
		fi_msg m = make_msg(&iov, 1, a.addr_of(*b), &mctx[i]);
		ck_assert_int_eq(fi_sendmsg(a.ep, &m, FI_MORE | FI_COMPLETION), 0);
	}
	a.forget(*b);
	b.reset();
	int seen[N] = {};
	for (int k = 0; k < N; k++) {
		Completion c = next_alone(a);
		int i = 0;
		while (i < N && c.context() != &mctx[i])
			i++;
		ck_assert_msg(i < N, "an entry for an unknown context: %s", c.describe().c_str());
		ck_assert_msg(!seen[i]++, "two entries for held send %d", i);
		ck_assert_msg(c.flags() & FI_SEND, "held send %d: %s", i, c.describe().c_str());
	}
	expect_none(a, 300, "after the held sends");
}
END_TEST

START_TEST(rdm_conn_peer_closed)
{
	RdmEnv env;
	RdmNode a(env), c(env);
	auto b = std::make_unique<RdmNode>(env);
	connect_all({&a, b.get(), &c});
	send_recv_one(a, *b, 64, 1600);
	send_recv_one(*b, a, 64, 1601);
	const fi_addr_t old = a.addr_of(*b);
	const uint16_t port = b->port();
	a.forget(*b);
	c.forget(*b);
	b.reset();
	expect_send_fails(a, old, 64, false, "small send to a closed peer");
	expect_send_fails(a, old, 256 * KiB, false, "rendezvous send to a closed peer");
	expect_send_fails(a, old, 32, true, "tagged send to a closed peer");
	// The others are fine.
	send_recv_one(a, c, 100, 1602);
	send_recv_one(c, a, 100, 1603);
	// A new endpoint at the same address and port.
	RdmNodeOptions o;
	o.port = port;
	RdmNode b2(env, o);
	ck_assert_uint_eq(b2.port(), port);
	ck_assert_int_eq(fi_av_remove(a.av, const_cast<fi_addr_t *>(&old), 1, 0), 0);
	a.insert(b2);
	b2.insert(a);
	send_recv_one(a, b2, 100, 1604);
	send_recv_one(b2, a, 300 * KiB, 1605);
	send_recv_one(a, b2, 300 * KiB, 1606);
	expect_none(a);
	expect_none(b2);
	expect_none(c);
}
END_TEST

// FI_VRMA_RDM_MAX_PEERS: an endpoint whose table holds 4 peers, all
// connected, turns a fifth away (its sends return -FI_EAGAIN as to a peer
// still connecting: its connect requests are refused as busy and tried
// again) and returns -FI_EAGAIN for its own send to a new address, nothing
// arriving anywhere, while the four are served. Once a peer's connection
// ends, that peer is given back and the fifth gets in (data exact both
// ways); full again, the next one's end lets the send to a new address out.
START_TEST(rdm_peer_limit)
{
	ScopedEnv max("FI_VRMA_RDM_MAX_PEERS", "4");
	RdmEnv env;
	RdmNode s(env);
	std::vector<std::unique_ptr<RdmNode>> c;
	for (size_t i = 0; i < 6; i++) {
		c.push_back(std::make_unique<RdmNode>(env));
		s.insert(*c[i]);
		c[i]->insert(s);
	}
	for (uint32_t i = 0; i < 4; i++)
		send_recv_one(*c[i], s, 64, 1700 + i);
	std::vector<uint8_t> m = pattern(64, 1790);
	fi_context ctx{};
	size_t tries = 0;
	for (Deadline d(1000); !d.expired(); settle(20), tries++) {
		ck_assert_int_eq(fi_tsend(c[4]->ep, m.data(), m.size(), nullptr, c[4]->addr_of(s), 1, &ctx), -FI_EAGAIN);
		ck_assert_int_eq(fi_tsend(s.ep, m.data(), m.size(), nullptr, s.addr_of(*c[5]), 1, &ctx), -FI_EAGAIN);
	}
	ck_assert_uint_gt(tries, 5);
	expect_none(s, 10, "while the table is full");
	expect_none(*c[4], 10, "the turned-away peer");
	expect_none(*c[5], 10, "the new address");
	send_recv_one(s, *c[3], 64, 1704);
	send_recv_one(*c[2], s, 64, 1705);
	// The first peer goes away: given back, the fifth gets in.
	s.forget(*c[0]);
	c[0].reset();
	send_recv_one(*c[4], s, 4096, 1706);
	send_recv_one(s, *c[4], 100, 1707);
	// Full again (1 to 4).
	ck_assert_int_eq(fi_tsend(s.ep, m.data(), m.size(), nullptr, s.addr_of(*c[5]), 1, &ctx), -FI_EAGAIN);
	s.forget(*c[1]);
	c[1].reset();
	send_recv_one(s, *c[5], 100, 1708);
	send_recv_one(*c[5], s, 300 * KiB, 1709);
	for (uint32_t i = 2; i < 6; i++)
		send_recv_one(*c[i], s, 64, 1710 + i);
	expect_none(s);
	for (size_t i = 2; i < 6; i++)
		expect_none(*c[i], 10);
}
END_TEST

// A rendezvous whose receiver goes away before it read the data: the send
// ends with an error entry (not a hang, not a success), and the sender still
// reaches other peers.
START_TEST(rdm_rndv_receiver_closes)
{
	RdmEnv env;
	RdmNode a(env), c(env);
	auto b = std::make_unique<RdmNode>(env);
	connect_all({&a, b.get(), &c});
	send_recv_one(a, *b, 64, 1610); // connected
	const size_t len = 256 * KiB;
	std::vector<uint8_t> src = pattern(len, 1611);
	fi_context sctx;
	const fi_addr_t to_b = a.addr_of(*b);
	ck_assert_int_eq(post_retry([&] {
		return fi_tsend(a.ep, src.data(), len, nullptr, to_b, 0x77, &sctx);
	}), 0);
	// b holds the request as an unexpected message, never matched.
	settle(200);
	a.forget(*b);
	c.forget(*b);
	b.reset();
	fi_cq_err_entry e = expect_err(a, &sctx, 0, "rendezvous send to a receiver that closed");
	ck_assert_uint_eq(e.flags & (FI_SEND | FI_TAGGED), FI_SEND | FI_TAGGED);
	send_recv_one(a, c, 300 * KiB, 1612);
	expect_none(a);
	expect_none(c);
}
END_TEST

// A rendezvous whose sender closes its endpoint after the request went out
// but before the receiver read the data: the sender's send ends with
// FI_ECANCELED at close, the receive with an error entry (the data is gone),
// and the receiver keeps working with others.
START_TEST(rdm_rndv_sender_closes)
{
	RdmEnv env;
	RdmNode b(env), c(env);
	auto a = std::make_unique<RdmNode>(env);
	connect_all({a.get(), &b, &c});
	send_recv_one(*a, b, 64, 1620);
	send_recv_one(b, *a, 64, 1621);
	const size_t len = 256 * KiB;
	std::vector<uint8_t> src = pattern(len, 1622);
	RecvBuf dst(len);
	fi_context sctx, rctx;
	ck_assert_int_eq(fi_trecv(b.ep, dst.data(), len, nullptr, FI_ADDR_UNSPEC, 0x78, 0, &rctx), 0);
	const fi_addr_t to_b = a->addr_of(b);
	// Only a progresses: the request reaches b's queue, b does not read it.
	ck_assert_int_eq(post_retry([&] {
		return fi_tsend(a->ep, src.data(), len, nullptr, to_b, 0x78, &sctx);
	}, a.get()), 0);
	const Deadline d(200);
	while (!d.expired())
		a->poll();
	ck_assert_msg(a->backlog.empty(), "the rendezvous send completed before the receiver read it: %s",
		      a->backlog.front().describe().c_str());
	a->close_ep();
	fi_cq_err_entry se = expect_err(*a, &sctx, FI_ECANCELED, "rendezvous send at its endpoint's close");
	ck_assert_uint_eq(se.flags & (FI_SEND | FI_TAGGED), FI_SEND | FI_TAGGED);
	fi_cq_err_entry re = expect_err(b, &rctx, 0, "rendezvous receive from a sender that closed");
	ck_assert_uint_eq(re.flags & (FI_RECV | FI_TAGGED), FI_RECV | FI_TAGGED);
	a->forget(b);
	b.forget(*a);
	c.forget(*a);
	a.reset();
	send_recv_one(c, b, 300 * KiB, 1623);
	send_recv_one(b, c, 64, 1624);
	expect_none(b);
	expect_none(c);
}
END_TEST

// After fi_av_remove, the old handle sends nowhere (an error, not a success),
// in FI_AV_MAP and FI_AV_TABLE; a new insert gives a new handle that works.
START_TEST(rdm_conn_av_remove)
{
	for (fi_av_type type : {FI_AV_MAP, FI_AV_TABLE}) {
		fi_info *h = rdm_hints(kRdmCaps, type);
		RdmEnv env(h);
		fi_freeinfo(h);
		RdmNode a(env), b(env);
		connect_all({&a, &b});
		send_recv_one(a, b, 64, 1700);
		fi_addr_t fa = a.addr_of(b);
		ck_assert_int_eq(fi_av_remove(a.av, &fa, 1, 0), 0);
		a.forget(b);
		RecvBuf d(256), td(256);
		fi_context rctx, trctx, sctx;
		ck_assert_int_eq(fi_recv(b.ep, d.data(), d.len, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
		ck_assert_int_eq(fi_trecv(b.ep, td.data(), td.len, nullptr, FI_ADDR_UNSPEC, 0x5eed, 0, &trctx), 0);
		expect_send_fails(a, fa, 64, false, type == FI_AV_MAP ? "send to a removed MAP handle"
								     : "send to a removed TABLE index");
		expect_send_fails(a, fa, 64, true, "tagged send to a removed handle");
		expect_none(b, 300, "a send to a removed handle arrived");
		// Inserted again: a new handle, which reaches b.
		const fi_addr_t again = a.insert(b);
		ck_assert_uint_ne(again, fa);
		std::vector<uint8_t> m = pattern(64, 1701);
		ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, m.data(), 64, nullptr, again, &sctx); }), 0);
		expect_ok(a, &sctx, kSendMsg, "send to the new handle");
		Completion c = expect_ok(b, &rctx, kRecvMsg, "receive from the new handle");
		ck_assert_uint_eq(c.src, b.addr_of(a));
		d.check(64, 1701, "after remove and insert");
		ck_assert_int_eq(fi_cancel(&b.ep->fid, &trctx), 0);
		expect_err(b, &trctx, FI_ECANCELED, "cancel");
	}
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_rndv_cache

// Sends from and receives into 1 MiB mappings, unmapped and mapped again at
// the same addresses with other contents: the new pages travel (a
// registration cache must not keep the old ones).
START_TEST(rdm_rndv_mmap_remap)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t len = MiB;
	const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
	auto *p = static_cast<uint8_t *>(mmap(nullptr, len, prot, flags, -1, 0));
	auto *q = static_cast<uint8_t *>(mmap(nullptr, len, prot, flags, -1, 0));
	ck_assert(p != MAP_FAILED && q != MAP_FAILED);
	fill_pattern(p, len, 1);
	transfer(a, b, p, len, q, len, 1, "first mapping");
	ck_assert_int_eq(munmap(p, len), 0);
	ck_assert_int_eq(munmap(q, len), 0);
	// MAP_FIXED_NOREPLACE: never clobber what another thread may have mapped
	// there meanwhile.
	auto *p2 = static_cast<uint8_t *>(mmap(p, len, prot, flags | MAP_FIXED_NOREPLACE, -1, 0));
	auto *q2 = static_cast<uint8_t *>(mmap(q, len, prot, flags | MAP_FIXED_NOREPLACE, -1, 0));
	ck_assert_msg(p2 == p && q2 == q, "could not map the same addresses again (%p %p, %p %p)", static_cast<void *>(p),
		      static_cast<void *>(p2), static_cast<void *>(q), static_cast<void *>(q2));
	fill_pattern(p, len, 2);
	expect_filled(q, len, 0, "new receive mapping"); // fresh pages
	transfer(a, b, p, len, q, len, 2, "second mapping, same addresses");
	// The same mappings, contents changed in place.
	fill_pattern(p, len, 3);
	memset(q, 0, len);
	transfer(a, b, p, len, q, len, 3, "same mapping, new contents");
	ck_assert_int_eq(munmap(p, len), 0);
	ck_assert_int_eq(munmap(q, len), 0);
}
END_TEST

namespace {

// The domain's registration-cache counters (fi_ext_vrma.h).
fi_vrma_mr_cache_stats cache_stats(RdmEnv &env)
{
	fi_vrma_mr_cache_stats st{};
	ck_assert_int_eq(vrma_domain_ops(env.domain)->mr_cache_stats(env.domain, &st), 0);
	return st;
}

// Whether this process may open a full userfaultfd, which the cache needs
// (root, as in the test bed, or vm.unprivileged_userfaultfd=1).
bool full_userfaultfd_allowed()
{
	if (geteuid() == 0)
		return true;
	FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "r");
	int v = 0;
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v == 1;
}

} // namespace

// The cache at work, seen through its counters: repeated rendezvous from
// and into the same buffers hit; munmap invalidates before it returns (the
// next lookup cannot find the old pages); the remapped buffers miss and
// carry their new contents. Without a full userfaultfd, every transfer
// registers its own pages (uncached) and the data is still right.
START_TEST(rdm_rndv_cache_counters)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t len = 256 * KiB;
	const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
	auto *p = static_cast<uint8_t *>(mmap(nullptr, len, prot, flags, -1, 0));
	auto *q = static_cast<uint8_t *>(mmap(nullptr, len, prot, flags, -1, 0));
	ck_assert(p != MAP_FAILED && q != MAP_FAILED);
	const fi_vrma_mr_cache_stats s0 = cache_stats(env);
	for (uint32_t i = 0; i < 4; i++) {
		fill_pattern(p, len, 20 + i);
		memset(q, 0, len);
		transfer(a, b, p, len, q, len, 20 + i, "same buffers again");
	}
	const fi_vrma_mr_cache_stats s1 = cache_stats(env);
	if (!full_userfaultfd_allowed()) {
		ck_assert_int_eq(s1.active, 0);
		ck_assert_uint_ge(s1.uncached - s0.uncached, 8); // a send and a receive each time
		munmap(p, len);
		munmap(q, len);
		return;
	}
	ck_assert_msg(s1.active == 1, "no registration cache although userfaultfd is allowed (FI_LOG_LEVEL=info says why)");
	// Two misses (the sender's and the receiver's buffer), then hits.
	ck_assert_uint_eq(s1.misses - s0.misses, 2);
	ck_assert_uint_ge(s1.hits - s0.hits, 6);
	ck_assert_uint_ge(s1.entries, 1); // one when the two mappings touch (merged)
	ck_assert_uint_eq(s1.uncached, s0.uncached);
	// munmap returns only after the monitor invalidated (mem_monitor.h).
	ck_assert_int_eq(munmap(p, len), 0);
	const fi_vrma_mr_cache_stats s2 = cache_stats(env);
	ck_assert_uint_ge(s2.invalidations - s1.invalidations, 1);
	ck_assert_int_eq(munmap(q, len), 0);
	const fi_vrma_mr_cache_stats s3 = cache_stats(env);
	auto *p2 = static_cast<uint8_t *>(mmap(p, len, prot, flags | MAP_FIXED_NOREPLACE, -1, 0));
	auto *q2 = static_cast<uint8_t *>(mmap(q, len, prot, flags | MAP_FIXED_NOREPLACE, -1, 0));
	ck_assert_msg(p2 == p && q2 == q, "could not map the same addresses again");
	fill_pattern(p, len, 30);
	transfer(a, b, p, len, q, len, 30, "remapped at the same addresses");
	const fi_vrma_mr_cache_stats s4 = cache_stats(env);
	ck_assert_uint_eq(s4.misses - s3.misses, 2);
	// madvise(MADV_DONTNEED) zaps the pages in place: the next send must
	// not read the old ones (they are zero now, then written anew).
	ck_assert_int_eq(madvise(p, len, MADV_DONTNEED), 0);
	fill_pattern(p, len, 31);
	memset(q, 0, len);
	transfer(a, b, p, len, q, len, 31, "after MADV_DONTNEED");
	const fi_vrma_mr_cache_stats s5 = cache_stats(env);
	ck_assert_uint_ge(s5.invalidations - s4.invalidations, 1);
	ck_assert_int_eq(munmap(p, len), 0);
	ck_assert_int_eq(munmap(q, len), 0);
}
END_TEST

// A mapping replaced by mmap(MAP_FIXED) over it, without munmap.
START_TEST(rdm_rndv_mmap_fixed_replace)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t len = MiB;
	const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
	auto *p = static_cast<uint8_t *>(mmap(nullptr, len, prot, flags, -1, 0));
	ck_assert(p != MAP_FAILED);
	std::vector<uint8_t> dst(len);
	fill_pattern(p, len, 4);
	transfer(a, b, p, len, dst.data(), len, 4, "before MAP_FIXED");
	ck_assert_ptr_eq(mmap(p, len, prot, flags | MAP_FIXED, -1, 0), p);
	fill_pattern(p, len, 5);
	memset(dst.data(), 0, len);
	transfer(a, b, p, len, dst.data(), len, 5, "after MAP_FIXED over it");
	ck_assert_int_eq(munmap(p, len), 0);
}
END_TEST

// Heap buffers freed and allocated again (likely at the same address).
START_TEST(rdm_rndv_malloc_reuse)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t len = 512 * KiB;
	std::vector<uint8_t> dst(len);
	auto *p = static_cast<uint8_t *>(malloc(len));
	ck_assert_ptr_nonnull(p);
	fill_pattern(p, len, 6);
	transfer(a, b, p, len, dst.data(), len, 6, "first heap buffer");
	free(p);
	auto *p2 = static_cast<uint8_t *>(malloc(len));
	ck_assert_ptr_nonnull(p2);
	fill_pattern(p2, len, 7);
	memset(dst.data(), 0, len);
	transfer(a, b, p2, len, dst.data(), len, 7, "heap buffer after free and malloc");
	fill_pattern(p2, len, 8);
	memset(dst.data(), 0, len);
	transfer(a, b, p2, len, dst.data(), len, 8, "same heap buffer, new contents");
	free(p2);
	// And on the receiving side.
	auto *r = static_cast<uint8_t *>(malloc(len));
	ck_assert_ptr_nonnull(r);
	std::vector<uint8_t> src = pattern(len, 9);
	transfer(a, b, src.data(), len, r, len, 9, "into a heap buffer");
	free(r);
	auto *r2 = static_cast<uint8_t *>(malloc(len));
	ck_assert_ptr_nonnull(r2);
	memset(r2, 0, len);
	fill_pattern(src.data(), len, 10);
	transfer(a, b, src.data(), len, r2, len, 10, "into a heap buffer after free and malloc");
	free(r2);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_threads

namespace {

constexpr int kSendThreads = 4, kPerThread = 200, kRecvThreads = 2;
constexpr int kThreadMsgs = kSendThreads * kPerThread;

struct ThreadMsg {
	std::vector<uint8_t> src, dst;
	size_t len = 0;
	uint64_t tag = 0;
	uint32_t seed = 0;
	fi_context sctx, rctx;
	std::atomic<int> sent{0}, received{0};
};

struct ThreadShared {
	std::vector<ThreadMsg> msgs = std::vector<ThreadMsg>(kThreadMsgs);
	RdmNode *s = nullptr, *r = nullptr;
	fi_addr_t to = FI_ADDR_NOTAVAIL, from = FI_ADDR_NOTAVAIL;
	std::atomic<int> sends_done{0}, recvs_done{0};
	std::mutex lock;
	std::string err;

	void fail(const std::string &what)
	{
		std::lock_guard<std::mutex> g(lock);
		if (err.empty())
			err = what;
	}
	bool failed()
	{
		std::lock_guard<std::mutex> g(lock);
		return !err.empty();
	}

	// Index of the message whose member `ctx` (sctx or rctx) this is.
	int index_of(void *ctx, bool send)
	{
		for (int i = 0; i < kThreadMsgs; i++)
			if (ctx == (send ? &msgs[i].sctx : &msgs[i].rctx))
				return i;
		return -1;
	}

	// One read of the sender's or the receiver's CQ, from any thread.
	void poll(bool sender)
	{
		fid_cq *cq = sender ? s->cq : r->cq;
		fi_cq_tagged_entry e[16];
		fi_addr_t src[16];
		ssize_t n = fi_cq_readfrom(cq, e, 16, src);
		if (n == -FI_EAGAIN)
			return;
		if (n == -FI_EAVAIL) {
			fi_cq_err_entry ee{};
			if (fi_cq_readerr(cq, &ee, 0) == 1)
				fail(std::string(sender ? "sender" : "receiver") + " error entry: " + fi_strerror(ee.err));
			return;
		}
		if (n < 0) {
			fail("fi_cq_readfrom: " + std::string(fi_strerror(static_cast<int>(-n))));
			return;
		}
		for (ssize_t k = 0; k < n; k++) {
			const int i = index_of(e[k].op_context, sender);
			if (i < 0) {
				fail("completion for an unknown context");
				continue;
			}
			ThreadMsg &m = msgs[i];
			if (sender) {
				if (m.sent++ || e[k].flags != kSendTag)
					fail("send " + std::to_string(i) + ": twice, or flags");
				sends_done++;
				continue;
			}
			if (m.received++ || e[k].flags != kRecvTag || e[k].len != m.len || e[k].tag != m.tag ||
			    src[k] != from)
				fail("receive " + std::to_string(i) + ": twice, or flags/len/tag/source");
			for (size_t j = 0; j < m.len; j++)
				if (m.dst[j] != pattern_byte(m.seed, j)) {
					fail("receive " + std::to_string(i) + ": data differs at " + std::to_string(j));
					break;
				}
			for (size_t j = m.len; j < m.dst.size(); j++)
				if (m.dst[j] != kSentinel) {
					fail("receive " + std::to_string(i) + ": written beyond the message");
					break;
				}
			recvs_done++;
		}
	}
};

void thread_sender(ThreadShared &sh, int t, Deadline &d)
{
	for (int k = 0; k < kPerThread && !sh.failed(); k++) {
		ThreadMsg &m = sh.msgs[t * kPerThread + k];
		ssize_t rc;
		while ((rc = fi_tsend(sh.s->ep, m.src.data(), m.len, nullptr, sh.to, m.tag, &m.sctx)) == -FI_EAGAIN) {
			sh.poll(true);
			if (d.expired()) {
				sh.fail("fi_tsend stayed -FI_EAGAIN");
				return;
			}
		}
		if (rc)
			sh.fail("fi_tsend: " + std::string(fi_strerror(static_cast<int>(-rc))));
	}
	while (sh.sends_done.load() < kThreadMsgs && !sh.failed() && !d.expired())
		sh.poll(true);
}

void thread_receiver(ThreadShared &sh, int j, Deadline &d)
{
	// Receiver j posts for senders 2j and 2j + 1, alternating.
	for (int k = 0; k < kPerThread && !sh.failed(); k++)
		for (int t = 2 * j; t < 2 * j + 2; t++) {
			ThreadMsg &m = sh.msgs[t * kPerThread + k];
			ssize_t rc;
			while ((rc = fi_trecv(sh.r->ep, m.dst.data(), m.dst.size() - kSlack, nullptr, FI_ADDR_UNSPEC, m.tag, 0,
					      &m.rctx)) == -FI_EAGAIN) {
				sh.poll(false);
				if (d.expired()) {
					sh.fail("fi_trecv stayed -FI_EAGAIN");
					return;
				}
			}
			if (rc)
				sh.fail("fi_trecv: " + std::string(fi_strerror(static_cast<int>(-rc))));
		}
	while (sh.recvs_done.load() < kThreadMsgs && !sh.failed() && !d.expired())
		sh.poll(false);
}

} // namespace

// FI_THREAD_SAFE: four threads send 200 tagged messages each from one
// endpoint, two threads of the peer post the receives and read its CQ.
START_TEST(rdm_threads_tagged)
{
	fi_info *h = rdm_hints();
	h->domain_attr->threading = FI_THREAD_SAFE;
	RdmEnv env(h);
	fi_freeinfo(h);
	ck_assert_int_eq(env.info->domain_attr->threading, FI_THREAD_SAFE);
	RdmNode s(env), r(env);
	connect_all({&s, &r});
	auto sh = std::make_unique<ThreadShared>();
	sh->s = &s;
	sh->r = &r;
	sh->to = s.addr_of(r);
	sh->from = r.addr_of(s);
	for (int t = 0; t < kSendThreads; t++)
		for (int k = 0; k < kPerThread; k++) {
			ThreadMsg &m = sh->msgs[t * kPerThread + k];
			m.len = 1 + size_t(t * 37 + k * 13) % 1024;
			m.tag = uint64_t(t + 1) << 32 | uint64_t(k);
			m.seed = uint32_t(t * 1000 + k);
			m.src = pattern(m.len, m.seed);
			m.dst.assign(m.len + kSlack, kSentinel);
		}
	Deadline d(3 * kTimeoutMs);
	std::vector<std::thread> threads;
	for (int t = 0; t < kSendThreads; t++)
		threads.emplace_back([&, t] { thread_sender(*sh, t, d); });
	for (int j = 0; j < kRecvThreads; j++)
		threads.emplace_back([&, j] { thread_receiver(*sh, j, d); });
	for (std::thread &th : threads)
		th.join();
	ck_assert_msg(sh->err.empty(), "%s", sh->err.c_str());
	ck_assert_int_eq(sh->sends_done.load(), kThreadMsgs);
	ck_assert_int_eq(sh->recvs_done.load(), kThreadMsgs);
	for (int i = 0; i < kThreadMsgs; i++) {
		ck_assert_int_eq(sh->msgs[i].sent.load(), 1);
		ck_assert_int_eq(sh->msgs[i].received.load(), 1);
	}
	expect_none(s);
	expect_none(r);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_auto

// FI_PROGRESS_AUTO: the target, on a domain of its own, posts 50 receives
// and then is not called at all; the initiator reads only its own CQ. Its
// sends (some by rendezvous, which needs the target to read) complete, the
// data lands in the target's buffers, and the target's CQ then holds the 50
// completions.
START_TEST(rdm_auto_progress)
{
	fi_info *h = rdm_hints();
	h->domain_attr->data_progress = FI_PROGRESS_AUTO;
	RdmEnv et(h), ei(h);
	fi_freeinfo(h);
	ck_assert_int_eq(et.info->domain_attr->data_progress, FI_PROGRESS_AUTO);
	RdmNode t(et), in(ei);
	connect_all({&t, &in});
	constexpr int N = 50;
	auto len_of = [](int k) { return k % 10 == 9 ? 128 * KiB : size_t(1500 + k); };
	std::vector<uint8_t> src[N];
	std::unique_ptr<RecvBuf> dst[N];
	fi_context rctx[N], sctx[N];
	for (int k = 0; k < N; k++) {
		src[k] = pattern(len_of(k), 1800 + k);
		dst[k] = std::make_unique<RecvBuf>(len_of(k));
		ck_assert_int_eq(post_retry([&] { return fi_recv(t.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, &rctx[k]); },
					    &t),
				 0);
	}
	// From here on, nothing calls the target until its CQ is read below.
	for (int k = 0; k < N; k++)
		ck_assert_int_eq(post_retry([&] { return fi_send(in.ep, src[k].data(), len_of(k), nullptr, in.addr_of(t), &sctx[k]); },
					    &in),
				 0);
	Tracker ti;
	ti.expect(sctx, N, kSendMsg, "initiator's sends");
	ti.wait_alone(in);
	// The data is in place without a call on the target (memory only).
	Deadline d(kTimeoutMs);
	auto landed = [&] {
		for (int k = 0; k < N; k++) {
			const volatile uint8_t *b = dst[k]->data();
			for (size_t j = 0; j < len_of(k); j++)
				if (b[j] != pattern_byte(1800 + k, j))
					return false;
		}
		return true;
	};
	while (!landed()) {
		ck_assert_msg(!d.expired(), "the target's buffers did not fill without calls on it");
		std::this_thread::sleep_for(std::chrono::milliseconds(5));
	}
	std::atomic_thread_fence(std::memory_order_acquire);
	Tracker tt;
	tt.expect(rctx, N, kRecvMsg, "target's receives");
	tt.wait_alone(t);
	for (int k = 0; k < N; k++) {
		const Completion &c = tt.get(&rctx[k]);
		ck_assert_uint_eq(c.e.len, len_of(k));
		ck_assert_uint_eq(c.src, t.addr_of(in));
		dst[k]->check(len_of(k), 1800 + k, "auto progress");
	}
	expect_none(t);
	expect_none(in);
}
END_TEST

Suite *rdm_suite()
{
	Suite *s = suite_create("rdm");
	auto add = [&](const char *name, int timeout, std::initializer_list<const TTest *> tests) {
		rdm_add_tcase(s, name, timeout, tests);
	};
	add("rdm_basic", 60, {rdm_getinfo_native, rdm_open_bind_enable_close, rdm_enable_without_av, rdm_several_endpoints,
			       rdm_failed_enable_leaves_nothing});
	add("rdm_msg", 180,
	    {rdm_msg_sizes, rdm_msg_av_table, rdm_sendv_recvv, rdm_sendmsg_recvmsg, rdm_inject, rdm_senddata_injectdata,
	     rdm_msg_unexpected, rdm_truncation, rdm_cq_order_direct_and_queued, rdm_selective_completion, rdm_counters, rdm_send_to_self});
	add("rdm_tagged", 180,
	    {rdm_tagged_match_ignore, rdm_tagged_directed_recv, rdm_tagged_any_source, rdm_tagged_unexpected,
	     rdm_tagged_inject_data, rdm_tagged_peek_claim_discard, rdm_tagged_cancel, rdm_tagged_large_unexpected,
	     rdm_tagged_order_small_large, rdm_rndv_read_credits, rdm_unexpected_backpressure,
	     rdm_drain_timeout});
	add("rdm_multi_recv", 60, {rdm_multi_recv_buffer, rdm_multi_recv_rndv_release});
	add("rdm_conn", 120,
	    {rdm_conn_crossing_interleaved, rdm_conn_crossing_threads, rdm_conn_unknown_sender, rdm_conn_peer_closed,
	     rdm_conn_av_remove, rdm_conn_more_close, rdm_conn_more_peer_gone, rdm_rndv_receiver_closes, rdm_rndv_sender_closes,
	     rdm_peer_limit});
	add("rdm_rndv_cache", 60, {rdm_rndv_mmap_remap, rdm_rndv_mmap_fixed_replace, rdm_rndv_malloc_reuse,
				   rdm_rndv_cache_counters});
	add("rdm_threads", 120, {rdm_threads_tagged});
	add("rdm_auto", 60, {rdm_auto_progress});
	return s;
}
