// The rdm suite's tagged messages on vrma's native FI_EP_RDM endpoint (tcase
// rdm_tagged, added by rdm_suite() in test_rdm.cpp): matching with ignore
// bits, directed and any-source receives, unexpected messages small and
// large, inject with data, peek/claim/discard, cancel, the order of small
// and large messages, rendezvous READ credits, back-pressure on unexpected
// messages, and the drain timeout. CK_RUN_SUITE=rdm CK_RUN_CASE=rdm_tagged.
#include "rdm_harness.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>

using namespace vt;

namespace {

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

} // namespace

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

// Messages from senders the receiver's AV does not hold yet wait unexpected;
// once the receiver inserts the senders, receives directed at each take its
// own message (eager and rendezvous) and name it, and a receive directed
// at the other sender leaves it (fabtests' fi_unexpected_msg -e rdm).
START_TEST(rdm_tagged_directed_after_insert)
{
	RdmEnv env;
	RdmNode r(env), s1(env), s2(env);
	s1.insert(r);
	s2.insert(r);
	const size_t len1 = 64, len2 = 200 * KiB;
	std::vector<uint8_t> m1 = pattern(len1, 1701), m2 = pattern(len2, 1702), m3 = pattern(32, 1703);
	fi_context sc1, sc2, sc3, pk;
	ck_assert_int_eq(post_retry([&] { return fi_tsend(s1.ep, m1.data(), len1, nullptr, s1.addr_of(r), 7, &sc1); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_tsend(s2.ep, m2.data(), len2, nullptr, s2.addr_of(r), 8, &sc2); }), 0);
	ck_assert_uint_eq(peek_until_found(r, 7, &pk).src, FI_ADDR_NOTAVAIL);
	ck_assert_uint_eq(peek_until_found(r, 8, &pk).src, FI_ADDR_NOTAVAIL);
	const fi_addr_t f2 = r.insert(s2), f1 = r.insert(s1);
	ck_assert_uint_ne(f1, f2);
	RecvBuf b1(len1), b2(len2), b3(32);
	fi_context rc1, rc2, rc3;
	// Directed at s2, tag 7: s1's message stays where it is.
	ck_assert_int_eq(fi_trecv(r.ep, b3.data(), b3.len, nullptr, f2, 7, 0, &rc3), 0);
	expect_none(r, 300, "receive directed at s2, s1's message waiting");
	ck_assert_int_eq(fi_trecv(r.ep, b1.data(), b1.len, nullptr, f1, 7, 0, &rc1), 0);
	Completion c = expect_ok(r, &rc1, kRecvTag, "directed at s1, after the insert");
	ck_assert_msg(c.src == f1, "source %" PRIu64 ", expected %" PRIu64, c.src, f1);
	ck_assert_uint_eq(c.e.len, len1);
	b1.check(len1, 1701, "s1's eager message");
	ck_assert_int_eq(fi_trecv(r.ep, b2.data(), b2.len, nullptr, f2, 8, 0, &rc2), 0);
	c = expect_ok(r, &rc2, kRecvTag, "directed at s2, after the insert");
	ck_assert_msg(c.src == f2, "source %" PRIu64 ", expected %" PRIu64, c.src, f2);
	ck_assert_uint_eq(c.e.len, len2);
	b2.check(len2, 1702, "s2's rendezvous message");
	// s2's next tag-7 message takes the receive directed at it.
	ck_assert_int_eq(post_retry([&] { return fi_tsend(s2.ep, m3.data(), 32, nullptr, s2.addr_of(r), 7, &sc3); }), 0);
	c = expect_ok(r, &rc3, kRecvTag, "directed at s2, its own message");
	ck_assert_msg(c.src == f2, "source %" PRIu64 ", expected %" PRIu64, c.src, f2);
	b3.check(32, 1703, "s2's tag-7 message");
	Tracker t1, t2;
	t1.expect(&sc1, 1, kSendTag, "s1's send");
	t2.expect(&sc2, 1, kSendTag, "s2's rendezvous send");
	t2.expect(&sc3, 1, kSendTag, "s2's second send");
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

void add_rdm_tagged_tcases(Suite *s)
{
	rdm_add_tcase(s, "rdm_tagged", 180,
		      {rdm_tagged_match_ignore, rdm_tagged_directed_recv, rdm_tagged_directed_after_insert, rdm_tagged_any_source, rdm_tagged_unexpected,
		       rdm_tagged_inject_data, rdm_tagged_peek_claim_discard, rdm_tagged_cancel, rdm_tagged_large_unexpected,
		       rdm_tagged_order_small_large, rdm_rndv_read_credits, rdm_unexpected_backpressure, rdm_drain_timeout});
}
