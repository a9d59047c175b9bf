// The rdm suite's connections on vrma's native FI_EP_RDM endpoint (tcase
// rdm_conn, added by rdm_suite() in test_rdm.cpp): crossing connections
// (interleaved, and from two threads), senders outside the AV, closed and
// removed peers, a peer that never answers (the connect timeout), sends
// held by FI_MORE when the endpoint or the peer goes, rendezvous whose
// receiver or sender closes, the peer limit, unused connections closed by
// agreement (FI_VRMA_RDM_IDLE_TIMEOUT) and quiet ones kept.
// CK_RUN_SUITE=rdm CK_RUN_CASE=rdm_conn.
#include "rdm_harness.h"

#include <fcntl.h>
#include <rdma/fi_ext_vrma.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>

using namespace vt;

namespace {

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

} // namespace

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

// A peer not listening yet (its endpoint not enabled: a job starts its
// ranks at once): the connect requests are refused for want of a listener
// and tried again, so a send posted before the peer exists waits
// (-FI_EAGAIN) and is delivered once it does. Nobody listening for the
// connection timeout: the send is refused.
START_TEST(rdm_conn_peer_not_yet_listening)
{
	RdmEnv env;
	RdmNode a(env);
	auto closed_port = [&env] {
		RdmNode gone(env);
		return gone.port();
	};
	sockaddr_in addr = a.name;
	addr.sin_port = htons(closed_port());
	const fi_addr_t dest = a.insert_addr(addr);
	std::vector<uint8_t> m = pattern(64, 1620);
	fi_context ctx, rctx;
	Deadline early(300);
	while (!early.expired()) {
		const ssize_t rc = fi_send(a.ep, m.data(), m.size(), nullptr, dest, &ctx);
		ck_assert_msg(rc == -FI_EAGAIN, "a send to a peer not listening yet returned %zd (%s)", rc,
			      fi_strerror(int(-rc)));
		a.poll();
		settle(5);
	}
	RdmNodeOptions o;
	o.port = ntohs(addr.sin_port);
	RdmNode b(env, o);
	RecvBuf r(64);
	ck_assert_int_eq(fi_recv(b.ep, r.data(), r.len, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, m.data(), m.size(), nullptr, dest, &ctx); }), 0);
	expect_ok(a, &ctx, kSendMsg, "the send posted before the peer listened");
	ck_assert_uint_eq(expect_ok(b, &rctx, kRecvMsg, "its receive").e.len, 64);
	r.check(64, 1620, "the message sent before the peer listened");
	// Nobody ever listens there: refused once the timeout passed.
	sockaddr_in nowhere = a.name;
	nowhere.sin_port = htons(closed_port());
	const fi_addr_t none = a.insert_addr(nowhere);
	const ssize_t rc = post_retry([&] { return fi_send(a.ep, m.data(), m.size(), nullptr, none, &ctx); });
	ck_assert_msg(rc == -FI_ECONNREFUSED, "a send to nobody returned %zd (%s)", rc, fi_strerror(int(-rc)));
	expect_none(a);
	expect_none(b);
}
END_TEST

// FI_VRMA_RDM_CONNECT_TIMEOUT: a peer whose host takes the connect request
// and never answers it (here a raw rdma_cm listener that never accepts;
// across hosts, a dead host) is given up after the timeout, not after
// rdma_cm's ~100 s: the send returns -FI_EAGAIN until then, then
// -FI_ETIMEDOUT once (nothing was accepted, so no completion), and the next
// send tries again. A live peer is served meanwhile.
START_TEST(rdm_conn_connect_timeout)
{
	ScopedEnv timeout("FI_VRMA_RDM_CONNECT_TIMEOUT", "1500");
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	send_recv_one(a, b, 64, 1630);
	// The silent listener.
	rdma_event_channel *ch = rdma_create_event_channel();
	ck_assert_ptr_nonnull(ch);
	ck_assert_int_eq(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
	rdma_cm_id *listener = nullptr;
	ck_assert_int_eq(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
	sockaddr_in at = a.name;
	at.sin_port = 0;
	ck_assert_int_eq(rdma_bind_addr(listener, reinterpret_cast<sockaddr *>(&at)), 0);
	ck_assert_int_eq(rdma_listen(listener, 8), 0);
	at.sin_port = rdma_get_src_port(listener);
	const fi_addr_t silent = a.insert_addr(at);
	std::vector<rdma_cm_id *> requests;
	auto take_requests = [&] {
		for (rdma_cm_event *ev; rdma_get_cm_event(ch, &ev) == 0;) {
			if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
				requests.push_back(ev->id);
			rdma_ack_cm_event(ev);
		}
	};
	std::vector<uint8_t> m = pattern(64, 1631);
	fi_context ctx;
	const auto t0 = std::chrono::steady_clock::now();
	ssize_t rc;
	for (Deadline d(20000); (rc = fi_send(a.ep, m.data(), m.size(), nullptr, silent, &ctx)) == -FI_EAGAIN &&
				!d.expired();) {
		a.poll();
		take_requests();
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
	const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
	take_requests();
	ck_assert_msg(rc == -FI_ETIMEDOUT, "a send to a peer that never answers returned %zd (%s) after %lld ms", rc,
		      fi_strerror(int(-rc)), static_cast<long long>(ms));
	ck_assert_msg(!requests.empty(), "the listener never saw the connect request");
	// The timeout, plus the watch's look every quarter of it and a margin
	// for a loaded machine; rdma_cm alone takes about 100 s.
	ck_assert_msg(ms >= 1400 && ms <= 8000, "given up after %lld ms (timeout 1500)", static_cast<long long>(ms));
	std::printf("rdm_conn_connect_timeout: given up after %lld ms (timeout 1500)\n", static_cast<long long>(ms));
	expect_none(a, 100, "a refused send left a completion");
	// The next send starts again; the live peer is served meanwhile.
	ck_assert_int_eq(fi_send(a.ep, m.data(), m.size(), nullptr, silent, &ctx), -FI_EAGAIN);
	send_recv_one(a, b, 4096, 1632);
	send_recv_one(b, a, 64, 1633);
	expect_none(a, 100);
	expect_none(b, 100);
	take_requests();
	for (rdma_cm_id *id : requests)
		rdma_destroy_id(id);
	rdma_destroy_id(listener);
	rdma_destroy_event_channel(ch);
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

namespace {

fi_vrma_rdm_conn_stats conn_stats(RdmNode &n)
{
	fi_vrma_rdm_conn_stats st{};
	size_t len = sizeof st;
	ck_assert_int_eq(fi_getopt(&n.ep->fid, FI_OPT_ENDPOINT, FI_VRMA_OPT_RDM_CONN_STATS, &st, &len), 0);
	ck_assert_uint_eq(len, sizeof st);
	return st;
}

// An fi_inject of len bytes from a to b, received and checked (its request
// is unsignaled: it stays outstanding on a quiet connection until the
// watch's probe retires it).
void inject_one(RdmNode &a, RdmNode &b, size_t len, uint32_t seed)
{
	std::vector<uint8_t> src = pattern(len, seed);
	RecvBuf dst(len);
	fi_context rctx;
	ck_assert_int_eq(fi_recv(b.ep, dst.data(), dst.len, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
	ck_assert_int_eq(post_retry([&] { return fi_inject(a.ep, src.data(), len, a.addr_of(b)); }), 0);
	Completion c = expect_ok(b, &rctx, kRecvMsg, "an injected message");
	ck_assert_uint_eq(c.e.len, len);
	dst.check(len, seed, "an injected message");
}

// Both ends' connections to each other closed for being unused, each side
// counting `closes` in all.
bool idle_closed_both(RdmNode &a, RdmNode &b, uint64_t closes)
{
	const fi_vrma_rdm_conn_stats x = conn_stats(a), y = conn_stats(b);
	return x.connections == 0 && y.connections == 0 && x.idle_closed == closes && y.idle_closed == closes;
}

} // namespace

// FI_VRMA_RDM_IDLE_TIMEOUT: a connection unused for that long (after
// messages both ways, eager, injected and rendezvous) is closed by
// agreement, on both sides (no queue pair left, one close counted each),
// without an entry in either CQ; the peers stay. The next operation from
// either side connects again and its data arrives exact; unused again, it
// closes again.
START_TEST(rdm_conn_idle_close)
{
	ScopedEnv idle("FI_VRMA_RDM_IDLE_TIMEOUT", "200");
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	for (int round = 1; round <= 2; round++) {
		const uint32_t seed = 1800 + 10 * static_cast<uint32_t>(round);
		if (round == 1) {
			send_recv_one(a, b, 64, seed);
			send_recv_one(b, a, 300 * KiB, seed + 1);
		} else {
			// The side that did not start it first this time.
			send_recv_one(b, a, 64, seed);
			send_recv_one(a, b, 300 * KiB, seed + 1);
		}
		inject_one(a, b, 100, seed + 2);
		inject_one(b, a, 100, seed + 3);
		ck_assert_uint_eq(conn_stats(a).connections, 1);
		ck_assert_uint_eq(conn_stats(b).connections, 1);
		const uint64_t closes = static_cast<uint64_t>(round);
		ck_assert_msg(progress_until([&] { return idle_closed_both(a, b, closes); }, 10000),
			      "round %d: connections a %" PRIu64 " b %" PRIu64 ", idle closes a %" PRIu64 " b %" PRIu64,
			      round, conn_stats(a).connections, conn_stats(b).connections, conn_stats(a).idle_closed,
			      conn_stats(b).idle_closed);
		expect_none(a, 100, "after an idle close");
		expect_none(b, 100, "after an idle close");
		ck_assert_uint_eq(conn_stats(a).peers, 1);
		ck_assert_uint_eq(conn_stats(b).peers, 1);
	}
	send_recv_one(a, b, 4096, 1890);
	send_recv_one(b, a, 64, 1891);
	expect_none(a, 10);
	expect_none(b, 10);
}
END_TEST

// With the timeout off (the default) nothing closes: the connections of an
// exchange stay after the watch looked several times.
START_TEST(rdm_conn_idle_off)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	send_recv_one(a, b, 64, 1895);
	inject_one(b, a, 100, 1896);
	settle(2500);
	ck_assert_uint_eq(conn_stats(a).connections, 1);
	ck_assert_uint_eq(conn_stats(b).connections, 1);
	ck_assert_uint_eq(conn_stats(a).idle_closed + conn_stats(b).idle_closed, 0);
	expect_none(a, 10);
	expect_none(b, 10);
}
END_TEST

// Requests that asked for no completion (fi_inject) on a connection that
// then goes quiet stay outstanding until a signaled one follows: the watch's
// probe is that one. Without it the drain watch (1 s here) took the quiet
// connection for a stalled one and failed it. The connection stays, and
// carries the next message.
START_TEST(rdm_conn_quiet_unsignaled)
{
	ScopedEnv drain("FI_VRMA_RDM_DRAIN_TIMEOUT", "1000");
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	send_recv_one(a, b, 64, 1897);
	for (uint32_t i = 0; i < 3; i++)
		inject_one(a, b, 100, 1898 + i);
	settle(3000);
	ck_assert_uint_eq(conn_stats(a).connections, 1);
	ck_assert_uint_eq(conn_stats(b).connections, 1);
	ck_assert_uint_eq(conn_stats(a).closing, 0);
	send_recv_one(a, b, 64, 1899);
	expect_none(a, 10);
	expect_none(b, 10);
}
END_TEST

// Idle closes racing traffic: FI_VRMA_RDM_IDLE_TIMEOUT 30 ms, both sides
// sending bursts (eager and rendezvous, tagged by sequence) after pauses of
// 0 to 90 ms for 4 s, so that Queries meet sends in flight, sends posted
// after a Query, crossing Queries and reconnections. Every message arrives
// once, exact and in order; every send completes once; no error; and some
// connections did close idle.
START_TEST(rdm_conn_idle_race)
{
	ScopedEnv idle("FI_VRMA_RDM_IDLE_TIMEOUT", "30");
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	constexpr int kMax = 400;
	struct Side {
		RdmNode *self, *peer;
		uint32_t seed;
		int sent = 0;
		std::vector<std::unique_ptr<RecvBuf>> in;
		std::vector<std::vector<uint8_t>> out;
		fi_context rctx[kMax], sctx[kMax];
		Tracker t; // its sends and its receives (one CQ)
	};
	auto len_of = [](uint32_t seed, int i) {
		return (seed + static_cast<uint32_t>(i)) % 5 == 0 ? size_t(40 * KiB) : size_t(64 + 13 * (i % 50));
	};
	Side sa{&a, &b, 1900}, sb{&b, &a, 2900};
	// Every receive posted ahead, tag = sequence: an extra, a lost or a
	// reordered message shows.
	for (Side *s : {&sa, &sb}) {
		for (int i = 0; i < kMax; i++) {
			const Side &from = s == &sa ? sb : sa;
			s->in.push_back(std::make_unique<RecvBuf>(len_of(from.seed, i)));
			RecvBuf &r = *s->in.back();
			post([&] { return fi_trecv(s->self->ep, r.data(), r.len, nullptr, FI_ADDR_UNSPEC, uint64_t(i), 0,
						  &s->rctx[i]); },
			     "fi_trecv");
		}
	}
	std::mt19937 rng(1234);
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(4);
	while (std::chrono::steady_clock::now() < end && sa.sent < kMax - 3 && sb.sent < kMax - 3) {
		settle(static_cast<int>(rng() % 90));
		for (Side *s : {&sa, &sb}) {
			if (rng() % 3 == 0)
				continue;
			const int burst = 1 + static_cast<int>(rng() % 3);
			for (int k = 0; k < burst; k++) {
				const int i = s->sent++;
				s->out.push_back(pattern(len_of(s->seed, i), s->seed + static_cast<uint32_t>(i)));
				const std::vector<uint8_t> &m = s->out.back();
				post([&] { return fi_tsend(s->self->ep, m.data(), m.size(), nullptr, s->self->addr_of(*s->peer),
							   uint64_t(i), &s->sctx[i]); },
				     "fi_tsend");
			}
		}
	}
	for (Side *s : {&sa, &sb}) {
		s->t.expect(s->sctx, static_cast<size_t>(s->sent), FI_TAGGED | FI_SEND, "racing sends");
		Side &to = s == &sa ? sb : sa;
		to.t.expect(to.rctx, static_cast<size_t>(s->sent), FI_TAGGED | FI_RECV, "racing receives");
	}
	for (Side *s : {&sa, &sb})
		s->t.wait(*s->self);
	for (Side *s : {&sa, &sb}) {
		const Side &from = s == &sa ? sb : sa;
		for (int i = 0; i < from.sent; i++) {
			const Completion &c = s->t.get(&s->rctx[i]);
			char what[64];
			snprintf(what, sizeof what, "message %d from seed %u", i, from.seed);
			ck_assert_msg(c.e.tag == uint64_t(i) && c.e.len == len_of(from.seed, i), "%s: tag %" PRIu64 " len %zu",
				      what, c.e.tag, c.e.len);
			s->in[static_cast<size_t>(i)]->check(c.e.len, from.seed + static_cast<uint32_t>(i), what);
		}
		for (int i = from.sent; i < kMax; i++)
			ck_assert_int_eq(fi_cancel(&s->self->ep->fid, &s->rctx[i]), 0);
	}
	for (Side *s : {&sa, &sb})
		for (int i = (s == &sa ? sb : sa).sent; i < kMax; i++)
			expect_err(*s->self, &s->rctx[i], FI_ECANCELED, "the receives left over");
	expect_none(a, 50);
	expect_none(b, 50);
	const uint64_t closes = conn_stats(a).idle_closed + conn_stats(b).idle_closed;
	fprintf(stderr, "rdm_conn_idle_race: %d and %d messages, %" PRIu64 " idle closes\n", sa.sent, sb.sent, closes);
	ck_assert_msg(closes > 0, "no connection closed idle in 4 s of pauses up to 90 ms");
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

void add_rdm_conn_tcases(Suite *s)
{
	rdm_add_tcase(s, "rdm_conn", 120,
		      {rdm_conn_crossing_interleaved, rdm_conn_crossing_threads, rdm_conn_unknown_sender,
		       rdm_conn_peer_closed, rdm_conn_peer_not_yet_listening, rdm_conn_connect_timeout,
		       rdm_conn_av_remove, rdm_conn_more_close, rdm_conn_more_peer_gone,
		       rdm_rndv_receiver_closes, rdm_rndv_sender_closes, rdm_peer_limit, rdm_conn_idle_close,
		       rdm_conn_idle_off, rdm_conn_idle_race, rdm_conn_quiet_unsignaled});
}
