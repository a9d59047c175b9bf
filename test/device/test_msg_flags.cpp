// Issue 13 §1: every completion flag on endpoints that also carry messages.
// FI_RMA_EVENT counters and FI_COMMIT_COMPLETE writes beside messages (commit
// requests and events share vrma's staging buffers with messages, never an
// application receive); FI_DELIVERY_COMPLETE and FI_COMMIT_COMPLETE sends,
// proven by the peer's confirmation (a staging peer) or by a read-back (a
// peer receiving into the application's buffers), which must wait for the
// target's receive. Data and completions checked throughout.
#include "harness.h"

using namespace vt;

namespace {

// Messages and RMA with the given extra caps and default op flags.
fi_info *flag_hints(uint64_t caps, uint64_t tx_op_flags)
{
	fi_info *h = base_hints();
	h->caps = FI_MSG | FI_RMA | caps;
	h->mode = FI_CONTEXT;
	h->tx_attr->op_flags = tx_op_flags;
	return h;
}

struct FlagEnv : Env {
	FlagEnv(uint64_t caps, uint64_t tx_op_flags) : Env(Hints(caps, tx_op_flags).h) {}
	struct Hints {
		fi_info *h;
		Hints(uint64_t caps, uint64_t f) : h(flag_hints(caps, f)) {}
		~Hints() { fi_freeinfo(h); }
	};
};

// The counter reaches `value` and stays there.
void expect_count(fid_cntr *c, uint64_t value)
{
	ck_assert_int_eq(fi_cntr_wait(c, value, kTimeoutMs), 0);
	std::this_thread::sleep_for(std::chrono::milliseconds(50));
	ck_assert_uint_eq(fi_cntr_read(c), value);
	ck_assert_uint_eq(fi_cntr_readerr(c), 0);
}

// A message of `len` bytes of `seed` from `from` to `to`, the receive posted
// first; both completions and the data checked.
void message(Side &from, Side &to, Region &src, Region &dst, size_t len, uint8_t seed,
	     uint64_t flags = FI_COMPLETION)
{
	src.fill(seed);
	std::fill(dst.buf.begin(), dst.buf.end(), 0);
	int rctx, sctx;
	ck_assert_int_eq(fi_recv(to.ep, dst.buf.data(), len, dst.desc(), 0, &rctx), 0);
	iovec iov{src.buf.data(), len};
	void *desc = src.desc();
	fi_msg m{&iov, &desc, 1, 0, &sctx, 0};
	ck_assert_int_eq(fi_sendmsg(from.ep, &m, flags), 0);
	expect_completion(from.cq, &sctx, FI_SEND | FI_MSG);
	fi_cq_data_entry e = expect_completion(to.cq, &rctx, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, len);
	ck_assert_msg(dst.check(seed, len), "message of %zu bytes differs", len);
}

// A send of `len` bytes with `flags` whose receive is posted only after 300
// ms: the send must not complete before, and both complete after; data
// checked. Returns the send's completion.
fi_cq_data_entry send_waits_for_receive(Side &from, Side &to, Region &src, Region &dst,
					size_t len, uint8_t seed, uint64_t flags, uint64_t data = 0)
{
	src.fill(seed);
	std::fill(dst.buf.begin(), dst.buf.end(), 0);
	int rctx, sctx;
	iovec iov{src.buf.data(), len};
	void *desc = src.desc();
	fi_msg m{&iov, &desc, 1, 0, &sctx, data};
	ck_assert_int_eq(fi_sendmsg(from.ep, &m, flags | FI_COMPLETION), 0);
	// Not placed: nothing may complete.
	expect_no_completion(from.cq, 300);
	ck_assert_int_eq(fi_recv(to.ep, dst.buf.data(), len, dst.desc(), 0, &rctx), 0);
	fi_cq_data_entry r = expect_completion(to.cq, &rctx,
					       FI_RECV | FI_MSG | ((flags & FI_REMOTE_CQ_DATA) ? FI_REMOTE_CQ_DATA : 0));
	ck_assert_uint_eq(r.len, len);
	if (flags & FI_REMOTE_CQ_DATA)
		ck_assert_uint_eq(r.data, data);
	ck_assert_msg(dst.check(seed, len), "message of %zu bytes differs", len);
	fi_cq_data_entry s = expect_completion(from.cq, &sctx, FI_SEND | FI_MSG);
	ck_assert_uint_eq(s.len, len);
	return s;
}

} // namespace

START_TEST(getinfo_offers_every_flag_with_messages)
{
	// Before issue 13 §1: -FI_ENODATA for each of these.
	struct Case {
		uint64_t caps, op_flags;
	} cases[] = {{FI_RMA_EVENT, 0},
		     {FI_RMA_PMEM, FI_COMMIT_COMPLETE},
		     {0, FI_DELIVERY_COMPLETE},
		     {FI_RMA_EVENT | FI_RMA_PMEM, FI_DELIVERY_COMPLETE}};
	for (const Case &c : cases) {
		fi_info *h = flag_hints(c.caps, c.op_flags);
		fi_info *info = get_info(h);
		ck_assert_uint_eq(info->caps & (FI_MSG | FI_RMA | c.caps), FI_MSG | FI_RMA | c.caps);
		ck_assert_uint_eq(info->tx_attr->op_flags & c.op_flags, c.op_flags);
		ck_assert_uint_eq(info->mode & FI_RX_CQ_DATA, 0);
		// Messages go through staging buffers.
		ck_assert_uint_eq(info->ep_attr->max_msg_size, 4u << 20);
		fi_freeinfo(info);
		fi_freeinfo(h);
	}
}
END_TEST

START_TEST(rma_events_counted_beside_messages)
{
	FlagEnv env(FI_RMA_EVENT, 0);
	fid_cntr *remote_writes = open_cntr(env), *remote_reads = open_cntr(env);
	PairOptions opt;
	opt.server_cntrs = {{remote_writes, FI_REMOTE_WRITE}, {remote_reads, FI_REMOTE_READ}};
	{
		Pair p(env, opt);
		const size_t big = 200 * 1024; // four staging pieces
		Region src(env, big, FI_SEND | FI_WRITE | FI_READ | FI_RECV);
		Region dst(env, big, FI_RECV | FI_SEND | FI_REMOTE_WRITE | FI_REMOTE_READ);
		// Messages both ways first.
		message(p.client, p.server, src, dst, 100, 1);
		message(p.server, p.client, dst, src, 5000, 2);
		// Unexpected messages around RMA: a large message, writes, a read, a
		// small message, all before any receive is posted. The events are
		// counted at once and take no application receive; the messages wait.
		src.fill(3);
		int s1, s2;
		ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), big, src.desc(), 0, &s1), 0);
		Region wsrc(env, 4096, FI_WRITE | FI_READ);
		Region target(env, 1 << 16, FI_REMOTE_WRITE | FI_REMOTE_READ);
		wsrc.fill(4);
		std::vector<int> wctx(6);
		for (int i = 0; i < 5; i++)
			ck_assert_int_eq(fi_write(p.client.ep, wsrc.buf.data(), 1000, wsrc.desc(), 0,
						  target.addr() + i * 1000, target.key(), &wctx[i]), 0);
		ck_assert_int_eq(fi_read(p.client.ep, wsrc.buf.data() + 2000, 100, wsrc.desc(), 0,
					 target.addr() + 5000, target.key(), &wctx[5]), 0);
		uint8_t small[8] = {9, 8, 7, 6, 5, 4, 3, 2};
		ck_assert_int_eq(fi_inject(p.client.ep, small, sizeof small, 0), 0);
		ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), 10, src.desc(), 0, &s2), 0);
		expect_count(remote_writes, 5);
		expect_count(remote_reads, 1);
		// In posting order (sends to a staging peer complete when sent).
		expect_completion(p.client.cq, &s1, FI_SEND | FI_MSG);
		for (int i = 0; i < 5; i++)
			expect_completion(p.client.cq, &wctx[i], FI_RMA | FI_WRITE);
		expect_completion(p.client.cq, &wctx[5], FI_RMA | FI_READ);
		expect_completion(p.client.cq, &s2, FI_SEND | FI_MSG);
		for (int i = 0; i < 5; i++)
			ck_assert(target.check(4, 1000, i * 1000));
		// Now the receives: the three messages, in order, intact.
		int r1, r2, r3;
		std::fill(dst.buf.begin(), dst.buf.end(), 0);
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), big, dst.desc(), 0, &r1), 0);
		fi_cq_data_entry e = expect_completion(p.server.cq, &r1, FI_RECV | FI_MSG);
		ck_assert_uint_eq(e.len, big);
		ck_assert(dst.check(3, big));
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), 64, dst.desc(), 0, &r2), 0);
		e = expect_completion(p.server.cq, &r2, FI_RECV | FI_MSG);
		ck_assert_uint_eq(e.len, 8);
		ck_assert(memcmp(dst.buf.data(), small, 8) == 0);
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + 100, 64, dst.desc(), 0, &r3), 0);
		e = expect_completion(p.server.cq, &r3, FI_RECV | FI_MSG);
		ck_assert_uint_eq(e.len, 10);
		ck_assert(memcmp(dst.buf.data() + 100, src.buf.data(), 10) == 0);
		// Remote CQ data on this endpoint takes no receive either.
		ck_assert_int_eq(fi_writedata(p.client.ep, wsrc.buf.data(), 16, wsrc.desc(), 0xCAFE, 0,
					      target.addr(), target.key(), &wctx[0]), 0);
		expect_completion(p.client.cq, &wctx[0], FI_RMA | FI_WRITE);
		fi_cq_data_entry d = expect_completion(p.server.cq, nullptr, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
		ck_assert_uint_eq(d.data, 0xCAFE);
		expect_count(remote_writes, 6);
		expect_no_completion(p.server.cq);
	}
	ck_assert_int_eq(fi_close(&remote_writes->fid), 0);
	ck_assert_int_eq(fi_close(&remote_reads->fid), 0);
}
END_TEST

START_TEST(commit_writes_beside_messages)
{
	FlagEnv env(FI_RMA_PMEM, 0);
	Pair p(env);
	Region src(env, 1 << 16, FI_SEND | FI_WRITE | FI_RECV);
	Region dst(env, 1 << 16, FI_RECV | FI_SEND);
	FileMapping remote(env.domain, 1 << 20, FI_REMOTE_WRITE);
	message(p.client, p.server, src, dst, 3000, 11);
	const fi_vrma_commit_stats before = vrma_commit_stats(env.domain);
	for (int i = 0; i < 3; i++) {
		src.fill(static_cast<uint8_t>(20 + i));
		int ctx;
		OneRma one(src.buf.data(), 50000, src.desc(), remote.addr(i * 65536), remote.key(), &ctx);
		ck_assert_int_eq(fi_writemsg(p.client.ep, &one.msg, FI_COMMIT_COMPLETE | FI_COMPLETION), 0);
		fi_cq_data_entry e = expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
		ck_assert_uint_eq(e.len, 50000);
		const fi_vrma_commit_stats now = vrma_commit_stats(env.domain);
		ck_assert_uint_eq(now.requests, before.requests + i + 1);
		ck_assert_uint_eq(now.msync_calls, before.msync_calls + i + 1);
		std::vector<uint8_t> got = remote.file_bytes(i * 65536, 50000);
		ck_assert(memcmp(got.data(), src.buf.data(), 50000) == 0);
		// A message after each commit still reaches its receive.
		message(p.server, p.client, dst, src, 100 + i, static_cast<uint8_t>(30 + i));
	}
	// The commits took no application receive: nothing else arrived.
	expect_no_completion(p.server.cq);
	expect_no_completion(p.client.cq);
}
END_TEST

START_TEST(delivery_complete_send_waits_for_the_receive)
{
	FlagEnv env(0, FI_DELIVERY_COMPLETE);
	fid_cntr *sends = open_cntr(env);
	PairOptions opt;
	opt.client_cntrs = {{sends, FI_SEND}};
	{
		Pair p(env, opt);
		const size_t big = 300 * 1024;
		Region src(env, big, FI_SEND | FI_RECV | FI_WRITE);
		Region dst(env, big, FI_RECV | FI_SEND | FI_REMOTE_WRITE);
		uint64_t n = 0;
		// Confirmed by the staging peer: one piece, several pieces, CQ data.
		for (size_t len : {size_t(1), size_t(4000), big}) {
			send_waits_for_receive(p.client, p.server, src, dst, len, static_cast<uint8_t>(len),
					       FI_DELIVERY_COMPLETE);
			expect_count(sends, ++n);
		}
		send_waits_for_receive(p.client, p.server, src, dst, 64, 5,
				       FI_DELIVERY_COMPLETE | FI_REMOTE_CQ_DATA, 0x1234);
		expect_count(sends, ++n);
		// The default op flags: fi_send is delivery complete too.
		src.fill(6);
		int sctx, rctx;
		ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), 128, src.desc(), 0, &sctx), 0);
		expect_no_completion(p.client.cq, 300);
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), 128, dst.desc(), 0, &rctx), 0);
		expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG);
		expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
		expect_count(sends, ++n);
		ck_assert(dst.check(6, 128));
		// Writes on the same endpoint are delivery complete too (the
		// read-back), and take no receive of the peer.
		Region target(env, 1 << 16, FI_REMOTE_WRITE);
		src.fill(9);
		int wctx;
		ck_assert_int_eq(fi_write(p.client.ep, src.buf.data(), 40000, src.desc(), 0, target.addr(),
					  target.key(), &wctx), 0);
		expect_completion(p.client.cq, &wctx, FI_RMA | FI_WRITE);
		ck_assert(target.check(9, 40000));
		expect_no_completion(p.server.cq, 100);
		// The other way, and a transmit-complete send that need not wait.
		send_waits_for_receive(p.server, p.client, dst, src, 1000, 7, FI_DELIVERY_COMPLETE);
		message(p.client, p.server, src, dst, 200, 8, FI_TRANSMIT_COMPLETE | FI_COMPLETION);
		expect_count(sends, ++n);
		// Many in flight, receives posted later: each completes once.
		std::vector<int> ctx(40);
		for (size_t i = 0; i < ctx.size(); i++) {
			iovec iov{src.buf.data() + i, 1};
			void *desc = src.desc();
			fi_msg m{&iov, &desc, 1, 0, &ctx[i], 0};
			ssize_t rc;
			while ((rc = fi_sendmsg(p.client.ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION)) == -FI_EAGAIN) {
				fi_cq_data_entry e;
				fi_cq_read(p.client.cq, &e, 0);
			}
			ck_assert_int_eq(rc, 0);
		}
		expect_no_completion(p.client.cq, 200);
		std::vector<int> rx(ctx.size());
		for (size_t i = 0; i < ctx.size(); i++)
			ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + i, 1, dst.desc(), 0, &rx[i]), 0);
		for (size_t i = 0; i < ctx.size(); i++)
			expect_completion(p.server.cq, &rx[i], FI_RECV | FI_MSG);
		std::vector<bool> seen(ctx.size());
		for (size_t i = 0; i < ctx.size(); i++) {
			fi_cq_data_entry e;
			ck_assert_int_eq(wait_cq(p.client.cq, &e), 1);
			auto *c = static_cast<int *>(e.op_context);
			ck_assert(c >= ctx.data() && c < ctx.data() + ctx.size());
			ck_assert(!seen[static_cast<size_t>(c - ctx.data())]);
			seen[static_cast<size_t>(c - ctx.data())] = true;
		}
		expect_no_completion(p.client.cq);
		expect_count(sends, n + ctx.size());
		ck_assert(memcmp(dst.buf.data(), src.buf.data(), ctx.size()) == 0);
	}
	ck_assert_int_eq(fi_close(&sends->fid), 0);
}
END_TEST

START_TEST(delivery_complete_send_to_direct_receiver_reads_back)
{
	// A peer that receives into the application's buffers (FI_RX_CQ_DATA
	// taken on, no staging): the send carries a zero-length read behind it,
	// which completes only once the send was placed in a posted receive.
	Env env;
	Pair p(env);
	Region src(env, 1 << 16, FI_SEND | FI_RECV);
	Region dst(env, 1 << 16, FI_RECV | FI_SEND);
	for (size_t len : {size_t(8), size_t(60000)})
		send_waits_for_receive(p.client, p.server, src, dst, len, static_cast<uint8_t>(len),
				       FI_DELIVERY_COMPLETE);
	send_waits_for_receive(p.client, p.server, src, dst, 100, 3,
			       FI_DELIVERY_COMPLETE | FI_REMOTE_CQ_DATA, 77);
	// Commit needs FI_RMA_PMEM here, and a peer that persists messages.
	iovec iov{src.buf.data(), 8};
	void *desc = src.desc();
	fi_msg m{&iov, &desc, 1, 0, nullptr, 0};
	ck_assert_int_eq(fi_sendmsg(p.client.ep, &m, FI_COMMIT_COMPLETE), -FI_EBADFLAGS);
	expect_no_completion(p.client.cq);
}
END_TEST

START_TEST(commit_complete_send_persists_the_receive)
{
	FlagEnv env(FI_RMA_PMEM, FI_COMMIT_COMPLETE);
	Pair p(env);
	Region src(env, 1 << 16, FI_SEND | FI_WRITE | FI_RECV);
	FileMapping dst(env.domain, 1 << 16, FI_RECV);
	const fi_vrma_commit_stats before = vrma_commit_stats(env.domain);
	src.fill(41);
	int sctx, rctx;
	iovec iov{src.buf.data(), 30000};
	void *desc = src.desc();
	fi_msg m{&iov, &desc, 1, 0, &sctx, 0};
	ck_assert_int_eq(fi_sendmsg(p.client.ep, &m, FI_COMMIT_COMPLETE | FI_COMPLETION), 0);
	expect_no_completion(p.client.cq, 300);
	ck_assert_int_eq(fi_recv(p.server.ep, dst.p, 40000, fi_mr_desc(dst.mr), 0, &rctx), 0);
	fi_cq_data_entry r = expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG);
	ck_assert_uint_eq(r.len, 30000);
	expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
	// Durable before the answer: the service synced the file's pages.
	const fi_vrma_commit_stats now = vrma_commit_stats(env.domain);
	ck_assert_uint_eq(now.requests, before.requests + 1);
	ck_assert_uint_eq(now.msync_calls, before.msync_calls + 1);
	ck_assert_uint_eq(now.bytes, before.bytes + 30000);
	ck_assert_uint_eq(now.failures, before.failures);
	std::vector<uint8_t> got = dst.file_bytes(0, 30000);
	ck_assert(memcmp(got.data(), src.buf.data(), 30000) == 0);
	// Delivery alone persists nothing.
	Region plain(env, 4096, FI_RECV);
	message(p.client, p.server, src, plain, 10, 42, FI_DELIVERY_COMPLETE | FI_COMPLETION);
	ck_assert_uint_eq(vrma_commit_stats(env.domain).requests, now.requests);
}
END_TEST

START_TEST(unconfirmed_sends_end_once_when_the_peer_goes)
{
	// Delivery-complete sends whose receives never come, then the target
	// closes: each ends exactly once, with FI_ECANCELED.
	FlagEnv env(0, FI_DELIVERY_COMPLETE);
	Pair p(env);
	Region src(env, 4096, FI_SEND | FI_RECV);
	std::vector<int> ctx(8);
	for (size_t i = 0; i < ctx.size(); i++)
		ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), 100, src.desc(), 0, &ctx[i]), 0);
	expect_no_completion(p.client.cq, 200);
	close_side(p.server);
	std::vector<int> seen(ctx.size());
	for (size_t i = 0; i < ctx.size(); i++) {
		fi_cq_data_entry e;
		fi_cq_err_entry err{};
		ssize_t rc = wait_cq(p.client.cq, &e, &err);
		ck_assert_int_eq(rc, -FI_EAVAIL);
		ck_assert_int_eq(err.err, FI_ECANCELED);
		auto *c = static_cast<int *>(err.op_context);
		ck_assert(c >= ctx.data() && c < ctx.data() + ctx.size());
		seen[static_cast<size_t>(c - ctx.data())]++;
	}
	for (int s : seen)
		ck_assert_int_eq(s, 1);
	expect_no_completion(p.client.cq);
}
END_TEST

Suite *msg_flags_suite()
{
	Suite *s = suite_create("msg_flags");
	TCase *tc = tcase_create("msg_flags");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, getinfo_offers_every_flag_with_messages);
	tcase_add_test(tc, rma_events_counted_beside_messages);
	tcase_add_test(tc, commit_writes_beside_messages);
	tcase_add_test(tc, delivery_complete_send_waits_for_the_receive);
	tcase_add_test(tc, delivery_complete_send_to_direct_receiver_reads_back);
	tcase_add_test(tc, commit_complete_send_persists_the_receive);
	tcase_add_test(tc, unconfirmed_sends_end_once_when_the_peer_goes);
	suite_add_tcase(s, tc);
	return s;
}
