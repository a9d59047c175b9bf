// Messaging over a connected pair: every call, data verified byte by byte,
// every completion checked.
#include "harness.h"

#include <infiniband/verbs.h>

using namespace vt;

namespace {

void send_recv_size(Pair &p, Env &env, size_t len)
{
	Region src(env, len, FI_SEND);
	Region dst(env, len + 16, FI_RECV);
	src.fill(static_cast<uint8_t>(len));
	int rctx, sctx;
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), dst.buf.size(), dst.desc(), 0, &rctx), 0);
	ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), len, src.desc(), 0, &sctx), 0);
	fi_cq_data_entry e = expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
	e = expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, len);
	ck_assert_ptr_eq(e.buf, dst.buf.data());
	ck_assert_msg(dst.check(static_cast<uint8_t>(len), len), "data differs at size %zu", len);
}

} // namespace

START_TEST(send_recv_sizes)
{
	Env env;
	Pair p(env);
	for (size_t len : {size_t(0), size_t(1), size_t(64), size_t(4096), size_t(65537), size_t(1) << 20})
		send_recv_size(p, env, len);
}
END_TEST

START_TEST(sendv_recvv_scatter)
{
	Env env;
	Pair p(env);
	Region src(env, 3000, FI_SEND);
	Region dst(env, 3000, FI_RECV);
	src.fill(3);
	// Gather from three pieces, scatter into two.
	iovec siov[3] = {{src.buf.data(), 1000}, {src.buf.data() + 1000, 1500}, {src.buf.data() + 2500, 500}};
	void *sdesc[3] = {src.desc(), src.desc(), src.desc()};
	iovec riov[2] = {{dst.buf.data(), 700}, {dst.buf.data() + 700, 2300}};
	void *rdesc[2] = {dst.desc(), dst.desc()};
	int rctx, sctx;
	ck_assert_int_eq(fi_recvv(p.server.ep, riov, rdesc, 2, 0, &rctx), 0);
	ck_assert_int_eq(fi_sendv(p.client.ep, siov, sdesc, 3, 0, &sctx), 0);
	expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
	fi_cq_data_entry e = expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, 3000);
	ck_assert(dst.check(3, 3000));
}
END_TEST

START_TEST(sendmsg_and_senddata)
{
	Env env;
	Pair p(env);
	Region src(env, 256, FI_SEND);
	Region dst(env, 1024, FI_RECV);
	src.fill(9);
	int rctx[3], sctx[2];
	for (int &c : rctx)
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), dst.buf.size(), dst.desc(), 0, &c), 0);

	iovec iov = {src.buf.data(), 256};
	void *desc = src.desc();
	fi_msg msg{};
	msg.msg_iov = &iov;
	msg.desc = &desc;
	msg.iov_count = 1;
	msg.context = &sctx[0];
	msg.data = 0xdeadbeef;
	ck_assert_int_eq(fi_sendmsg(p.client.ep, &msg, FI_COMPLETION | FI_REMOTE_CQ_DATA), 0);
	expect_completion(p.client.cq, &sctx[0], FI_SEND | FI_MSG);
	fi_cq_data_entry e = expect_completion(p.server.cq, &rctx[0], FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 0xdeadbeef);
	ck_assert_uint_eq(e.len, 256);
	ck_assert(dst.check(9, 256));

	ck_assert_int_eq(fi_senddata(p.client.ep, src.buf.data(), 16, src.desc(), 0x1234, 0, &sctx[1]), 0);
	expect_completion(p.client.cq, &sctx[1], FI_SEND | FI_MSG);
	e = expect_completion(p.server.cq, &rctx[1], FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 0x1234);
	ck_assert_uint_eq(e.len, 16);

	// Injected data with immediate: no transmit completion, buffer reusable.
	uint8_t small[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	ck_assert_int_eq(fi_injectdata(p.client.ep, small, sizeof small, 77, 0), 0);
	memset(small, 0, sizeof small);
	e = expect_completion(p.server.cq, &rctx[2], FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 77);
	ck_assert_uint_eq(e.len, 8);
	for (int i = 0; i < 8; i++)
		ck_assert_uint_eq(dst.buf[i], i + 1);
	expect_no_completion(p.client.cq);
}
END_TEST

// FI_MORE on sends: the messages are held until the one without it, whose
// doorbell posts them all; inline payloads are copied when held, so the
// caller's buffer may change at once. All arrive in order, each with its
// own completion.
START_TEST(sends_held_by_fi_more)
{
	Env env;
	Pair p(env);
	Region src(env, 4 * 100, FI_SEND);
	Region dst(env, 4 * 128, FI_RECV);
	src.fill(31);
	int rctx[4], sctx[4];
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + i * 128, 128, dst.desc(), 0, &rctx[i]), 0);
	uint8_t small[4] = {5, 6, 7, 8};
	for (int i = 0; i < 4; i++) {
		iovec iov = {src.buf.data() + i * 100, 100};
		void *desc = src.desc();
		fi_msg msg{};
		msg.msg_iov = &iov;
		msg.desc = &desc;
		msg.iov_count = 1;
		msg.context = &sctx[i];
		msg.data = 100 + static_cast<uint64_t>(i);
		uint64_t flags = FI_COMPLETION | (i < 3 ? FI_MORE : 0);
		if (i == 1) { // an inline payload, changed right after the call
			iov = {small, sizeof small};
			desc = nullptr;
			flags |= FI_INJECT;
		}
		if (i == 2)
			flags |= FI_REMOTE_CQ_DATA;
		ck_assert_int_eq(fi_sendmsg(p.client.ep, &msg, flags), 0);
		if (i == 1)
			memset(small, 0, sizeof small);
		if (i == 2) // held: nothing has reached the peer yet
			expect_no_completion(p.server.cq, 200);
	}
	for (int i = 0; i < 4; i++) {
		expect_completion(p.client.cq, &sctx[i], FI_SEND | FI_MSG);
		fi_cq_data_entry e = expect_completion(p.server.cq, &rctx[i],
						       FI_RECV | FI_MSG | (i == 2 ? FI_REMOTE_CQ_DATA : 0));
		ck_assert_uint_eq(e.len, i == 1 ? 4 : 100);
		if (i == 2)
			ck_assert_uint_eq(e.data, 102);
	}
	ck_assert(memcmp(dst.buf.data(), src.buf.data(), 100) == 0);
	for (int k = 0; k < 4; k++)
		ck_assert_uint_eq(dst.buf[128 + k], 5 + k);
	ck_assert(memcmp(dst.buf.data() + 256, src.buf.data() + 200, 100) == 0);
	ck_assert(memcmp(dst.buf.data() + 384, src.buf.data() + 300, 100) == 0);
	expect_no_completion(p.client.cq);
}
END_TEST

START_TEST(inject_many)
{
	Env env;
	PairOptions opt;
	opt.tx_size = 16;
	opt.rx_size = 64;
	Pair p(env, opt);
	Region dst(env, 64 * 64, FI_RECV);
	// More injects than the send queue holds: unsignaled requests must have
	// their slots reclaimed without any completion reaching the CQ.
	const int total = 200;
	int received = 0;
	std::vector<int> ctx(64);
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + i * 64, 64, dst.desc(), 0, &ctx[i]), 0);
	// Checks one arrival (in order) and reposts its buffer.
	auto consume = [&](const fi_cq_data_entry &e) {
		ck_assert_uint_eq(e.flags, FI_RECV | FI_MSG);
		ck_assert_uint_eq(e.len, sizeof(uint32_t));
		int slot = static_cast<int>(static_cast<int *>(e.op_context) - ctx.data());
		ck_assert(slot >= 0 && slot < 64);
		uint32_t got;
		memcpy(&got, dst.buf.data() + slot * 64, 4);
		ck_assert_uint_eq(got, static_cast<uint32_t>(received));
		received++;
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + slot * 64, 64, dst.desc(), 0,
					 &ctx[slot]), 0);
	};
	for (int i = 0; i < total; i++) {
		uint32_t v = static_cast<uint32_t>(i);
		ssize_t rc;
		while ((rc = fi_inject(p.client.ep, &v, sizeof v, 0)) == -FI_EAGAIN) {
			fi_cq_data_entry e;
			ck_assert_int_eq(fi_cq_read(p.client.cq, &e, 1), -FI_EAGAIN);
			if (fi_cq_read(p.server.cq, &e, 1) == 1)
				consume(e);
		}
		ck_assert_int_eq(rc, 0);
		v = 0xffffffff; // the buffer is reusable at once
	}
	while (received < total) {
		fi_cq_data_entry e;
		ck_assert_int_eq(wait_cq(p.server.cq, &e), 1);
		consume(e);
	}
	ck_assert_int_eq(received, total);
	expect_no_completion(p.client.cq);
}
END_TEST

START_TEST(selective_completion)
{
	Env env;
	PairOptions opt;
	opt.bind_flags = FI_SELECTIVE_COMPLETION;
	opt.tx_size = 8;
	Pair p(env, opt);
	Region src(env, 64, FI_SEND);
	Region dst(env, 64 * 40, FI_RECV);
	std::vector<int> rctx(40);
	for (int i = 0; i < 40; i++)
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + i * 64, 64, dst.desc(), 0, &rctx[i]), 0);
	// 39 sends without FI_COMPLETION (more than the queue: slots are
	// reclaimed), then one with it: exactly one transmit completion.
	for (int i = 0; i < 39; i++) {
		src.buf[0] = static_cast<uint8_t>(i);
		ssize_t rc;
		while ((rc = fi_send(p.client.ep, src.buf.data(), 1, src.desc(), 0, nullptr)) == -FI_EAGAIN) {
			fi_cq_data_entry e;
			ck_assert_int_eq(fi_cq_read(p.client.cq, &e, 1), -FI_EAGAIN);
		}
		ck_assert_int_eq(rc, 0);
		expect_completion(p.server.cq, &rctx[i], FI_RECV | FI_MSG);
		ck_assert_uint_eq(dst.buf[i * 64], i);
	}
	int sctx;
	iovec iov = {src.buf.data(), 1};
	void *desc = src.desc();
	fi_msg msg{};
	msg.msg_iov = &iov;
	msg.desc = &desc;
	msg.iov_count = 1;
	msg.context = &sctx;
	ck_assert_int_eq(fi_sendmsg(p.client.ep, &msg, FI_COMPLETION), 0);
	expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
	expect_completion(p.server.cq, &rctx[39], FI_RECV | FI_MSG);
	expect_no_completion(p.client.cq);
}
END_TEST

// fi_recvmsg with one buffer takes fi_recv's inlined way (recv_one) when it
// has a desc, a non-empty buffer and only FI_COMPLETION/FI_MORE; an empty
// buffer without a desc takes the long way. Under selective completion
// each reports exactly when asked to, in order, and every message lands in
// its own buffer.
START_TEST(receives_one_buffer)
{
	Env env;
	PairOptions opt;
	opt.bind_flags = FI_SELECTIVE_COMPLETION; // the client's CQ, which receives here
	Pair p(env, opt);
	constexpr size_t kLen = 64;
	Region in0(env, kLen, FI_RECV), in1(env, kLen, FI_RECV), in3(env, kLen, FI_RECV);
	Region out(env, 3 * kLen, FI_SEND);
	for (int i = 0; i < 3; i++) {
		Region tmp(env, kLen, FI_SEND);
		tmp.fill(static_cast<uint8_t>(40 + i));
		std::copy(tmp.buf.begin(), tmp.buf.end(), out.buf.begin() + i * kLen);
	}
	int ctx[4];
	auto post = [&](Region *r, size_t len, uint64_t flags, int *c) {
		iovec iov = {r ? r->buf.data() : nullptr, len};
		void *desc = r ? r->desc() : nullptr;
		fi_msg msg{};
		msg.msg_iov = &iov;
		msg.desc = &desc;
		msg.iov_count = 1;
		msg.context = c;
		ck_assert_int_eq(fi_recvmsg(p.client.ep, &msg, flags), 0);
	};
	post(&in0, kLen, 0, &ctx[0]);                         // no completion asked
	post(&in1, kLen, FI_COMPLETION, &ctx[1]);
	post(nullptr, 0, FI_COMPLETION, &ctx[2]);             // the long way
	post(&in3, kLen, FI_COMPLETION | FI_MORE, &ctx[3]);
	int sctx[4];
	const size_t lens[4] = {kLen, kLen, 0, kLen};
	const size_t from[4] = {0, kLen, 0, 2 * kLen};
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(fi_send(p.server.ep, out.buf.data() + from[i], lens[i], out.desc(), 0, &sctx[i]), 0);
		expect_completion(p.server.cq, &sctx[i], FI_SEND | FI_MSG);
	}
	fi_cq_data_entry e = expect_completion(p.client.cq, &ctx[1], FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, kLen);
	e = expect_completion(p.client.cq, &ctx[2], FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, 0);
	e = expect_completion(p.client.cq, &ctx[3], FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, kLen);
	expect_no_completion(p.client.cq);
	// Receives complete in order: the first landed before the second.
	ck_assert(in0.check(40, kLen));
	ck_assert(in1.check(41, kLen));
	ck_assert(in3.check(42, kLen));
}
END_TEST

START_TEST(send_queue_full)
{
	Env env;
	PairOptions opt;
	opt.tx_size = 4;
	Pair p(env, opt);
	Region src(env, 64, FI_SEND);
	Region dst(env, 64 * 8, FI_RECV);
	// No receive posted: the sends wait on the receiver (RNR retry), the
	// queue fills and the provider says -FI_EAGAIN, not an error.
	int sctx[4];
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), 8, src.desc(), 0, &sctx[i]), 0);
	ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), 8, src.desc(), 0, nullptr), -FI_EAGAIN);
	ck_assert_int_eq(fi_tx_size_left(p.client.ep), 0);
	int rctx[4];
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + i * 64, 64, dst.desc(), 0, &rctx[i]), 0);
	for (int i = 0; i < 4; i++) {
		expect_completion(p.server.cq, &rctx[i], FI_RECV | FI_MSG);
		expect_completion(p.client.cq, &sctx[i], FI_SEND | FI_MSG);
	}
	ck_assert_int_eq(fi_tx_size_left(p.client.ep), 4);
}
END_TEST

START_TEST(receive_too_small)
{
	Env env;
	Pair p(env);
	Region src(env, 128, FI_SEND);
	Region dst(env, 128, FI_RECV);
	int rctx, sctx;
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), 16, dst.desc(), 0, &rctx), 0);
	ck_assert_int_eq(fi_send(p.client.ep, src.buf.data(), 128, src.desc(), 0, &sctx), 0);
	fi_cq_err_entry err = expect_error(p.server.cq);
	ck_assert_ptr_eq(err.op_context, &rctx);
	// Hardware reports a length error; 6.1's rxe reports a local QP operation
	// error for the same event. Either way the code says what happened.
	ck_assert_msg((err.err == FI_ETRUNC && err.prov_errno == IBV_WC_LOC_LEN_ERR) ||
			      (err.err == FI_EINVAL && err.prov_errno == IBV_WC_LOC_QP_OP_ERR),
		      "err %d prov_errno %d (%s)", err.err, err.prov_errno,
		      ibv_wc_status_str(static_cast<ibv_wc_status>(err.prov_errno)));
	char text[128];
	ck_assert_ptr_nonnull(fi_cq_strerror(p.server.cq, err.prov_errno, err.err_data, text, sizeof text));
	// The sender learns of it too, with its own context.
	err = expect_error(p.client.cq);
	ck_assert_ptr_eq(err.op_context, &sctx);
	ck_assert_int_ne(err.err, 0);
}
END_TEST

START_TEST(inject_beyond_inline)
{
	Env env;
	Pair p(env);
	const size_t inject = env.info->tx_attr->inject_size;
	ck_assert_uint_ge(inject, 4096); // not capped by the device's inline size
	Region dst(env, 3 * inject, FI_RECV);
	int rctx[3];
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + i * inject, inject, dst.desc(), 0,
					 &rctx[i]), 0);
	std::vector<uint8_t> src(inject);
	for (size_t i = 0; i < inject; i++)
		src[i] = static_cast<uint8_t>(i * 13 + 1);
	// fi_inject with no descriptor: copied before the call returns.
	ck_assert_int_eq(fi_inject(p.client.ep, src.data(), inject, 0), 0);
	std::vector<uint8_t> expect = src;
	std::fill(src.begin(), src.end(), 0xee);
	fi_cq_data_entry e = expect_completion(p.server.cq, &rctx[0], FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, inject);
	ck_assert(!memcmp(dst.buf.data(), expect.data(), inject));
	// fi_sendmsg(FI_INJECT) from two pieces still reports its completion.
	for (size_t i = 0; i < inject; i++)
		src[i] = static_cast<uint8_t>(i * 5 + 3);
	expect = src;
	iovec iov[2] = {{src.data(), 1000}, {src.data() + 1000, 1500}};
	int sctx;
	fi_msg msg{};
	msg.msg_iov = iov;
	msg.iov_count = 2;
	msg.context = &sctx;
	ck_assert_int_eq(fi_sendmsg(p.client.ep, &msg, FI_INJECT | FI_COMPLETION), 0);
	std::fill(src.begin(), src.end(), 0xdd);
	expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
	e = expect_completion(p.server.cq, &rctx[1], FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, 2500);
	ck_assert(!memcmp(dst.buf.data() + inject, expect.data(), 2500));
	// With immediate data.
	ck_assert_int_eq(fi_injectdata(p.client.ep, expect.data(), 3000, 0x5151, 0), 0);
	e = expect_completion(p.server.cq, &rctx[2], FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 0x5151);
	ck_assert(!memcmp(dst.buf.data() + 2 * inject, expect.data(), 3000));
	expect_no_completion(p.client.cq);
}
END_TEST

// FI_VRMA_INJECT_SIZE beyond what one staged piece holds beside its header:
// fi_getinfo offers what an endpoint grants, and the endpoint injects all of
// it (a byte more is refused).
START_TEST(inject_size_as_offered)
{
	setenv("FI_VRMA_INJECT_SIZE", "200000", 1);
	Env env;
	const size_t inject = env.info->tx_attr->inject_size;
	ck_assert_uint_le(inject, 65536 - 16);
	ck_assert_uint_ge(inject, 4096);
	Pair p(env);
	Region dst(env, inject, FI_RECV);
	int rctx;
	ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data(), inject, dst.desc(), 0, &rctx), 0);
	std::vector<uint8_t> src(inject + 1);
	for (size_t i = 0; i < src.size(); i++)
		src[i] = static_cast<uint8_t>(i * 7 + 5);
	ck_assert_int_eq(fi_inject(p.client.ep, src.data(), inject + 1, 0), -FI_EINVAL);
	ck_assert_int_eq(fi_inject(p.client.ep, src.data(), inject, 0), 0);
	fi_cq_data_entry e = expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, inject);
	ck_assert(!memcmp(dst.buf.data(), src.data(), inject));
	expect_no_completion(p.client.cq);
}
END_TEST

Suite *msg_suite()
{
	Suite *s = suite_create("msg");
	TCase *tc = tcase_create("msg");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, send_recv_sizes);
	tcase_add_test(tc, sendv_recvv_scatter);
	tcase_add_test(tc, sendmsg_and_senddata);
	tcase_add_test(tc, sends_held_by_fi_more);
	tcase_add_test(tc, inject_many);
	tcase_add_test(tc, selective_completion);
	tcase_add_test(tc, receives_one_buffer);
	tcase_add_test(tc, send_queue_full);
	tcase_add_test(tc, receive_too_small);
	tcase_add_test(tc, inject_beyond_inline);
	tcase_add_test(tc, inject_size_as_offered);
	suite_add_tcase(s, tc);
	return s;
}
