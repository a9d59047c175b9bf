// Staged receives: endpoints with messages and RMA whose application did not
// take on FI_RX_CQ_DATA. Remote CQ data must not consume the application's
// receives, so messages travel through vrma's staging buffers and are
// copied; every size class of the protocol (inline with the header, bounce,
// one piece, several pieces, the largest), unexpected messages, truncation,
// cancel and shutdown, with data and completions checked.
#include "harness.h"

#include <infiniband/verbs.h>

#include <cstdlib>

using namespace vt;

namespace {

constexpr size_t kStagedMax = size_t(4) << 20; // wire::kStagedMsgMax
constexpr size_t kPiece = 64 * 1024;           // wire::kStageBytes

// Messages and RMA, modes without FI_RX_CQ_DATA.
fi_info *staged_hints()
{
	fi_info *h = base_hints();
	h->mode = FI_CONTEXT;
	return h;
}

// An Env for staged endpoints.
struct StagedEnv : Env {
	StagedEnv() : Env(Hints().h) {}
	struct Hints {
		fi_info *h = staged_hints();
		~Hints() { fi_freeinfo(h); }
	};
};

void expect_cq_data(fid_cq *cq, uint64_t data, size_t len)
{
	fi_cq_data_entry e = expect_completion(cq, nullptr, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, data);
	ck_assert_uint_eq(e.len, len);
}

// Sends `len` bytes of pattern `seed` (gathered from two pieces when asked)
// into a receive of len + 1 bytes (scattered over three when asked); checks
// both completions, the data and the byte after it.
void staged_round(Pair &p, Region &src, Region &dst, size_t len, uint8_t seed, bool vectors,
		  bool inject)
{
	src.fill(seed);
	std::fill(dst.buf.begin(), dst.buf.end(), 0xEE);
	int rctx, sctx;
	if (vectors && len >= 3) {
		iovec riov[3] = {{dst.buf.data(), len / 3},
				 {dst.buf.data() + len / 3, 1},
				 {dst.buf.data() + len / 3 + 1, len - len / 3}};
		void *rdesc[3] = {dst.desc(), dst.desc(), dst.desc()};
		ck_assert_int_eq(fi_recvv(p.server.ep, riov, rdesc, 3, 0, &rctx), 0);
	} else {
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), len + 1, dst.desc(), 0, &rctx), 0);
	}
	if (inject) {
		ck_assert_int_eq(fi_inject(p.client.ep, src.buf.data(), len, 0), 0);
	} else if (vectors && len >= 2) {
		iovec siov[2] = {{src.buf.data(), len / 2}, {src.buf.data() + len / 2, len - len / 2}};
		void *sdesc[2] = {src.desc(), src.desc()};
		ck_assert_int_eq(fi_sendv(p.client.ep, siov, sdesc, 2, 0, &sctx), 0);
		expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
	} else {
		ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), len, src.desc(), 0, &sctx), 0);
		expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
	}
	fi_cq_data_entry e = expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, len);
	ck_assert_ptr_eq(e.buf, dst.buf.data());
	ck_assert_msg(dst.check(seed, len), "data differs at size %zu", len);
	ck_assert_msg(dst.buf[len] == 0xEE, "byte after %zu written", len);
}

} // namespace

START_TEST(staged_sizes_and_vectors)
{
	StagedEnv env;
	ck_assert_uint_eq(env.info->mode & FI_RX_CQ_DATA, 0);
	ck_assert_uint_eq(env.info->ep_attr->max_msg_size, kStagedMax);
	Pair p(env);
	Region src(env, kStagedMax, FI_SEND);
	Region dst(env, kStagedMax + 1, FI_RECV);
	// Inline with the header, around the device's inline limit, bounce
	// injects, exactly one piece, one byte more, several pieces, the largest.
	const size_t sizes[] = {0, 1, 100, 200, 239, 240, 241, 300, 4096, kPiece - 16, kPiece - 15,
				3 * kPiece + 7, (size_t(1) << 20) + 3, kStagedMax};
	uint8_t seed = 1;
	for (size_t len : sizes) {
		staged_round(p, src, dst, len, seed++, false, false);
		staged_round(p, src, dst, len, seed++, true, false);
		if (len <= env.info->tx_attr->inject_size)
			staged_round(p, src, dst, len, seed++, false, true);
	}
	// Beyond the largest: refused before anything is sent.
	ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), kStagedMax + 1, src.desc(), 0, nullptr),
			 -FI_EINVAL);
	expect_no_completion(p.server.cq, 100);
}
END_TEST

START_TEST(staged_cq_data_takes_no_receive)
{
	StagedEnv env;
	Pair p(env);
	Region src(env, 2 * kPiece, FI_SEND | FI_WRITE);
	Region target(env, 4096, FI_REMOTE_WRITE);
	Region dst(env, 2 * kPiece, FI_RECV);
	src.fill(5);
	int r1, r2, ctx;
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), 64, dst.desc(), 0, &r1), 0);
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + 64, kPiece + 100, dst.desc(), 0, &r2), 0);
	// More writes with data than receives posted, and more than the
	// staging buffers' count: none takes an application receive.
	for (uint64_t i = 0; i < 100; i++) {
		ck_assert_int_eq(fi_writedata(p.client.ep, src.buf.data(), 64, src.desc(), 1000 + i, 0,
					      target.addr(), target.key(), &ctx), 0);
		expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
		expect_cq_data(p.server.cq, 1000 + i, 64);
	}
	ck_assert_int_eq(fi_inject_writedata(p.client.ep, src.buf.data(), 8, 7, 0, target.addr(),
					     target.key()), 0);
	expect_cq_data(p.server.cq, 7, 8);
	ck_assert(target.check(5, 64));
	// The receives are still there for the messages, in order.
	ck_assert_int_eq(fi_senddata(p.client.ep, src.buf.data(), 33, src.desc(), 0xABCDEF12, 0, &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_SEND | FI_MSG);
	fi_cq_data_entry e = expect_completion(p.server.cq, &r1, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 0xABCDEF12);
	ck_assert_uint_eq(e.len, 33);
	ck_assert(dst.check(5, 33));
	ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), kPiece + 100, src.desc(), 0, &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_SEND | FI_MSG);
	e = expect_completion(p.server.cq, &r2, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, kPiece + 100);
	ck_assert(dst.check(5, kPiece + 100, 64));
	expect_no_completion(p.server.cq, 100);
}
END_TEST

START_TEST(staged_unexpected_messages_wait_in_order)
{
	StagedEnv env;
	Pair p(env);
	Region src(env, 300 * 1024, FI_SEND | FI_WRITE);
	Region target(env, 64, FI_REMOTE_WRITE);
	Region dst(env, 300 * 1024, FI_RECV);
	src.fill(11);
	const size_t lens[] = {10, 200 * 1024, 20, 0, 70000};
	int sctx[5];
	// Sent before any receive is posted: the sends complete (the data sits
	// in staging buffers), remote CQ data still arrives at once.
	for (int i = 0; i < 5; i++) {
		if (i == 2)
			ck_assert_int_eq(fi_senddata(p.client.ep, src.buf.data() + i, lens[i], src.desc(), 42,
						     0, &sctx[i]), 0);
		else
			ck_assert_int_eq(fi_send(p.client.ep, src.buf.data() + i, lens[i], src.desc(), 0,
						 &sctx[i]), 0);
		if (i == 1) {
			int wctx;
			ck_assert_int_eq(fi_writedata(p.client.ep, src.buf.data(), 64, src.desc(), 9, 0,
						      target.addr(), target.key(), &wctx), 0);
			expect_completion(p.client.cq, &sctx[0], FI_SEND | FI_MSG);
			expect_completion(p.client.cq, &sctx[1], FI_SEND | FI_MSG);
			expect_completion(p.client.cq, &wctx, FI_RMA | FI_WRITE);
		}
	}
	for (int i = 2; i < 5; i++)
		expect_completion(p.client.cq, &sctx[i], FI_SEND | FI_MSG);
	expect_cq_data(p.server.cq, 9, 64);
	expect_no_completion(p.server.cq, 100);
	// Posted now, one at a time: each takes the next message, in order.
	Region ref(env, 300 * 1024, FI_SEND);
	for (int i = 0; i < 5; i++) {
		int rctx;
		std::fill(dst.buf.begin(), dst.buf.end(), 0);
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), dst.buf.size(), dst.desc(), 0, &rctx), 0);
		fi_cq_data_entry e = expect_completion(p.server.cq, &rctx,
						       FI_RECV | FI_MSG | (i == 2 ? FI_REMOTE_CQ_DATA : 0));
		ck_assert_uint_eq(e.len, lens[i]);
		if (i == 2)
			ck_assert_uint_eq(e.data, 42);
		ck_assert_msg(memcmp(dst.buf.data(), src.buf.data() + i, lens[i]) == 0, "message %d differs", i);
	}
	expect_no_completion(p.server.cq, 100);
}
END_TEST

// FI_VRMA_STAGE_BUFFERS=2: the staged endpoint keeps 2 buffers posted. A
// message of 3 pieces sent before its receive waits: its last piece finds no
// buffer, and the sender's RNR retries carry it once the receive frees one.
// Then 1 MiB messages (17 pieces each) pass through the 2 buffers intact.
// The variable is read when the provider loads: this test sets it before its
// first libfabric call, in the process check forks for it (CK_FORK=no would
// make the wait assertion fail).
START_TEST(staged_with_two_stage_buffers)
{
	ck_assert_int_eq(setenv("FI_VRMA_STAGE_BUFFERS", "2", 1), 0);
	StagedEnv env;
	Pair p(env);
	const size_t big = size_t(1) << 20;
	Region src(env, big, FI_SEND);
	Region dst(env, big, FI_RECV);
	src.fill(61);
	const size_t three = 2 * kPiece + 100; // with its 16-byte header: 3 pieces
	int sctx, rctx;
	ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), three, src.desc(), 0, &sctx), 0);
	expect_no_completion(p.client.cq, 500);
	std::fill(dst.buf.begin(), dst.buf.end(), 0);
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), big, dst.desc(), 0, &rctx), 0);
	fi_cq_data_entry e = expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, three);
	expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
	ck_assert(dst.check(61, three));
	for (uint8_t seed = 70; seed < 73; seed++) {
		src.fill(seed);
		std::fill(dst.buf.begin(), dst.buf.end(), 0);
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), big, dst.desc(), 0, &rctx), 0);
		ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), big, src.desc(), 0, &sctx), 0);
		e = expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG);
		ck_assert_uint_eq(e.len, big);
		expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
		ck_assert_msg(dst.check(seed, big), "1 MiB message %d differs", seed);
	}
	expect_no_completion(p.server.cq, 100);
}
END_TEST

START_TEST(staged_truncation_and_cancel)
{
	StagedEnv env;
	Pair p(env);
	Region src(env, 3 * kPiece, FI_SEND);
	Region dst(env, 3 * kPiece, FI_RECV);
	src.fill(21);
	int r1, r2, r3, ctx;
	// Longer than the receive: the first 100 bytes land, the rest is
	// reported as truncated, and the next message is intact.
	for (size_t len : {size_t(1000), 2 * kPiece + 5}) {
		std::fill(dst.buf.begin(), dst.buf.end(), 0xEE);
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), 100, dst.desc(), 0, &r1), 0);
		ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), len, src.desc(), 0, &ctx), 0);
		expect_completion(p.client.cq, &ctx, FI_SEND | FI_MSG);
		fi_cq_err_entry err = expect_error(p.server.cq);
		ck_assert_int_eq(err.err, FI_ETRUNC);
		ck_assert_ptr_eq(err.op_context, &r1);
		ck_assert_uint_eq(err.flags, FI_RECV | FI_MSG);
		ck_assert_uint_eq(err.len, 100);
		ck_assert_uint_eq(err.olen, len - 100);
		ck_assert(dst.check(21, 100));
		ck_assert_uint_eq(dst.buf[100], 0xEE);
	}
	// Cancel: the receive ends with FI_ECANCELED, once; the message goes
	// to the next one.
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), 64, dst.desc(), 0, &r2), 0);
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + 64, 64, dst.desc(), 0, &r3), 0);
	ck_assert_int_eq(fi_rx_size_left(p.server.ep), static_cast<ssize_t>(env.info->rx_attr->size) - 2);
	ck_assert_int_eq(fi_cancel(&p.server.ep->fid, &r2), 0);
	fi_cq_err_entry err = expect_error(p.server.cq);
	ck_assert_int_eq(err.err, FI_ECANCELED);
	ck_assert_ptr_eq(err.op_context, &r2);
	ck_assert_int_eq(fi_cancel(&p.server.ep->fid, &r2), -FI_ENOENT);
	ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), 50, src.desc(), 0, &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_SEND | FI_MSG);
	fi_cq_data_entry e = expect_completion(p.server.cq, &r3, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, 50);
	ck_assert(dst.check(21, 50, 64));
	ck_assert_int_eq(fi_cancel(&p.server.ep->fid, &r3), -FI_ENOENT); // already done
	// fi_recvmsg queues the same way, with its flags checked; no message,
	// no receive.
	std::fill(dst.buf.begin(), dst.buf.end(), 0xEE);
	iovec iov{dst.buf.data(), 64};
	void *desc = dst.desc();
	fi_msg msg = msg_of(&iov, &desc, 1, &r1);
	ck_assert_int_eq(fi_recvmsg(p.server.ep, nullptr, 0), -FI_EINVAL);
	ck_assert_int_eq(fi_recvmsg(p.server.ep, &msg, FI_FENCE), -FI_EBADFLAGS);
	ck_assert_int_eq(fi_recvmsg(p.server.ep, &msg, FI_COMPLETION), 0);
	ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), 40, src.desc(), 0, &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_SEND | FI_MSG);
	e = expect_completion(p.server.cq, &r1, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, 40);
	ck_assert(dst.check(21, 40));
	ck_assert_uint_eq(dst.buf[40], 0xEE);
}
END_TEST

START_TEST(staged_receives_end_at_shutdown)
{
	StagedEnv env;
	Pair p(env);
	Region dst(env, 256, FI_RECV);
	int r1, r2;
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), 128, dst.desc(), 0, &r1), 0);
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + 128, 128, dst.desc(), 0, &r2), 0);
	ck_assert_int_eq(fi_shutdown(p.client.ep, 0), 0);
	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
	uint32_t event;
	ck_assert_int_eq(wait_eq(p.server.eq, &event, buf, sizeof buf), sizeof(fi_eq_cm_entry));
	ck_assert_uint_eq(event, FI_SHUTDOWN);
	// Both receives end as cancelled, in the order they were posted.
	for (int *ctx : {&r1, &r2}) {
		fi_cq_err_entry err = expect_error(p.server.cq);
		ck_assert_int_eq(err.err, FI_ECANCELED);
		ck_assert_ptr_eq(err.op_context, ctx);
		ck_assert_uint_eq(err.flags, FI_RECV | FI_MSG);
	}
	expect_no_completion(p.server.cq, 100);
}
END_TEST

START_TEST(direct_sender_to_staged_receiver)
{
	// The client took on FI_RX_CQ_DATA (receives straight into its
	// buffers, max_msg_size one work request); the server did not
	// (staged). Each side speaks the other's protocol.
	Env env;
	ck_assert_uint_gt(env.info->ep_attr->max_msg_size, kStagedMax);
	PairOptions opt;
	opt.server_mode_off = FI_RX_CQ_DATA;
	Pair p(env, opt);
	Region big(env, kStagedMax + 1, FI_SEND | FI_RECV | FI_WRITE);
	Region target(env, 4096, FI_REMOTE_WRITE);
	Region dst(env, kStagedMax, FI_RECV | FI_SEND);
	big.fill(31);
	int ctx, rctx;
	// Client to server: staged, up to 4 MiB.
	ck_assert_int_eq(fi_send(p.client.ep, big.buf.data(), kStagedMax + 1, big.desc(), 0, &ctx),
			 -FI_EMSGSIZE);
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), kStagedMax, dst.desc(), 0, &rctx), 0);
	ck_assert_int_eq(fi_writedata(p.client.ep, big.buf.data(), 100, big.desc(), 5, 0, target.addr(),
				      target.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	expect_cq_data(p.server.cq, 5, 100);
	ck_assert_int_eq(fi_send(p.client.ep, big.buf.data(), kStagedMax, big.desc(), 0, &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_SEND | FI_MSG);
	fi_cq_data_entry e = expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, kStagedMax);
	ck_assert(dst.check(31, kStagedMax));
	// Server to client: straight into the client's receives, and remote
	// CQ data takes one of them (FI_RX_CQ_DATA).
	int c1, c2;
	ck_assert_int_eq(fi_recv(p.client.ep, big.buf.data(), 4096, big.desc(), 0, &c1), 0);
	ck_assert_int_eq(fi_recv(p.client.ep, big.buf.data() + 4096, 4096, big.desc(), 0, &c2), 0);
	ck_assert_int_eq(fi_writedata(p.server.ep, dst.buf.data(), 10, dst.desc(), 6, 0, target.addr(),
				      target.key(), &ctx), 0);
	expect_completion(p.server.cq, &ctx, FI_RMA | FI_WRITE);
	e = expect_completion(p.client.cq, &c1, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 6);
	ck_assert_int_eq(fi_send(p.server.ep, dst.buf.data(), 3000, dst.desc(), 0, &ctx), 0);
	expect_completion(p.server.cq, &ctx, FI_SEND | FI_MSG);
	e = expect_completion(p.client.cq, &c2, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, 3000);
	ck_assert(memcmp(big.buf.data() + 4096, dst.buf.data(), 3000) == 0);
}
END_TEST

START_TEST(sread_waits_after_a_queued_entry)
{
	// A receive posted after its message arrived completes from fi_recv
	// (vrma queues the entry and wakes waiters). Read without waiting, that
	// wakeup stays behind: a later fi_cq_sread must still wait for its
	// timeout, or for the next entry, and not return -FI_EAGAIN at once.
	StagedEnv env;
	Pair p(env);
	Region src(env, 64, FI_SEND);
	Region dst(env, 64, FI_RECV);
	int sctx, rctx;
	ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), 8, src.desc(), 0, &sctx), 0);
	expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
	expect_no_completion(p.server.cq, 100); // polls: the message waits unclaimed
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), 64, dst.desc(), 0, &rctx), 0);
	fi_cq_data_entry e;
	ck_assert_int_eq(fi_cq_read(p.server.cq, &e, 1), 1);
	ck_assert_ptr_eq(e.op_context, &rctx);
	const auto t0 = std::chrono::steady_clock::now();
	ck_assert_int_eq(fi_cq_sread(p.server.cq, &e, 1, nullptr, 300), -FI_EAGAIN);
	const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
		std::chrono::steady_clock::now() - t0).count();
	ck_assert_msg(waited >= 250, "fi_cq_sread returned after %lld ms of 300", static_cast<long long>(waited));
	// fi_cq_signal still ends a wait at once.
	ck_assert_int_eq(fi_cq_signal(p.server.cq), 0);
	ck_assert_int_eq(fi_cq_sread(p.server.cq, &e, 1, nullptr, 5000), -FI_EAGAIN);
}
END_TEST

START_TEST(counter_wait_wakes_on_a_receive_completed_by_fi_recv)
{
	// The client counts receives on a counter and has no CQ. A message
	// waits unclaimed; a thread blocks in fi_cntr_wait; fi_recv then
	// completes the receive at once: the waiter must wake then, not at
	// its timeout (no CQ entry is made that could wake it).
	StagedEnv env;
	fid_cntr *rc = open_cntr(env);
	PairOptions opt;
	opt.client_cq = false;
	opt.client_cntrs = {{rc, FI_RECV}};
	{
		Pair p(env, opt);
		Region src(env, 64, FI_SEND);
		Region dst(env, 64, FI_RECV);
		src.fill(41);
		int sctx;
		ck_assert_int_eq(fi_send(p.server.ep, src.buf.data(), 48, src.desc(), 0, &sctx), 0);
		expect_completion(p.server.cq, &sctx, FI_SEND | FI_MSG);
		ck_assert_uint_eq(fi_cntr_read(rc), 0); // polls: the message waits unclaimed
		int waited_rc = 1;
		long long waited_ms = -1;
		std::thread waiter([&] {
			const auto t0 = std::chrono::steady_clock::now();
			waited_rc = fi_cntr_wait(rc, 1, 5000);
			waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
				std::chrono::steady_clock::now() - t0).count();
		});
		std::this_thread::sleep_for(std::chrono::milliseconds(300));
		ck_assert_int_eq(fi_recv(p.client.ep, dst.buf.data(), 64, dst.desc(), 0, nullptr), 0);
		waiter.join();
		ck_assert_int_eq(waited_rc, 0);
		ck_assert_msg(waited_ms < 2500, "fi_cntr_wait woke after %lld ms", waited_ms);
		ck_assert_uint_eq(fi_cntr_read(rc), 1);
		ck_assert(dst.check(41, 48));
	}
	ck_assert_int_eq(fi_close(&rc->fid), 0);
}
END_TEST

Suite *staged_suite()
{
	Suite *s = suite_create("staged");
	TCase *tc = tcase_create("staged");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, staged_sizes_and_vectors);
	tcase_add_test(tc, staged_cq_data_takes_no_receive);
	tcase_add_test(tc, staged_unexpected_messages_wait_in_order);
	tcase_add_test(tc, staged_with_two_stage_buffers);
	tcase_add_test(tc, staged_truncation_and_cancel);
	tcase_add_test(tc, staged_receives_end_at_shutdown);
	tcase_add_test(tc, direct_sender_to_staged_receiver);
	tcase_add_test(tc, sread_waits_after_a_queued_entry);
	tcase_add_test(tc, counter_wait_wakes_on_a_receive_completed_by_fi_recv);
	suite_add_tcase(s, tc);
	return s;
}
