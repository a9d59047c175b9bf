// Bad arguments from the application: a clear negative code, never a crash
// or a silent success.
#include "harness.h"

using namespace vt;

START_TEST(data_path_bad_arguments)
{
	Env env;
	Pair p(env);
	Region r(env, 4096, FI_SEND | FI_RECV | FI_WRITE | FI_READ | FI_REMOTE_READ | FI_REMOTE_WRITE);
	fid_ep *ep = p.client.ep;
	// NULL buffer with a length.
	ck_assert_int_eq(fi_send(ep, nullptr, 16, r.desc(), 0, nullptr), -FI_EINVAL);
	ck_assert_int_eq(fi_recv(ep, nullptr, 16, r.desc(), 0, nullptr), -FI_EINVAL);
	// Missing descriptor for a buffer too large to go inline (FI_MR_LOCAL).
	ck_assert_int_eq(fi_send(ep, r.buf.data(), 4096, nullptr, 0, nullptr), -FI_EINVAL);
	ck_assert_int_eq(fi_recv(ep, r.buf.data(), 16, nullptr, 0, nullptr), -FI_EINVAL);
	ck_assert_int_eq(fi_read(ep, r.buf.data(), 16, nullptr, 0, r.addr(), r.key(), nullptr), -FI_EINVAL);
	// Too many segments.
	std::vector<iovec> iov(64, iovec{r.buf.data(), 1});
	std::vector<void *> desc(64, r.desc());
	ck_assert_int_eq(fi_sendv(ep, iov.data(), desc.data(), 64, 0, nullptr), -FI_EINVAL);
	ck_assert_int_eq(fi_recvv(ep, iov.data(), desc.data(), 64, 0, nullptr), -FI_EINVAL);
	ck_assert_int_eq(fi_writev(ep, iov.data(), desc.data(), 64, 0, r.addr(), r.key(), nullptr), -FI_EINVAL);
	// Unknown flags.
	iovec one = {r.buf.data(), 8};
	void *d = r.desc();
	fi_msg msg{};
	msg.msg_iov = &one;
	msg.desc = &d;
	msg.iov_count = 1;
	ck_assert_int_eq(fi_sendmsg(ep, &msg, 1ULL << 45), -FI_EBADFLAGS);
	ck_assert_int_eq(fi_recvmsg(ep, &msg, FI_MULTI_RECV), -FI_EBADFLAGS);
	ck_assert_int_eq(fi_sendmsg(ep, nullptr, 0), -FI_EINVAL);
	// Inject larger than inject_size.
	size_t inject = env.info->tx_attr->inject_size;
	std::vector<uint8_t> big(inject + 1);
	ck_assert_int_eq(fi_inject(ep, big.data(), big.size(), 0), -FI_EINVAL);
	ck_assert_int_eq(fi_inject_write(ep, big.data(), big.size(), 0, r.addr(), r.key()), -FI_EINVAL);
	msg.iov_count = 1;
	one.iov_len = inject + 1;
	ck_assert_int_eq(fi_sendmsg(ep, &msg, FI_INJECT), -FI_EINVAL);
	// RMA: no remote segment, a key wider than 32 bits, remote segments
	// shorter than the data.
	fi_rma_iov rma[2] = {{r.addr(), 8, r.key()}, {r.addr() + 8, 8, r.key()}};
	fi_msg_rma rmsg{};
	one.iov_len = 16;
	rmsg.msg_iov = &one;
	rmsg.desc = &d;
	rmsg.iov_count = 1;
	rmsg.rma_iov = rma;
	rmsg.rma_iov_count = 1;
	ck_assert_int_eq(fi_writemsg(ep, &rmsg, 0), -FI_EINVAL); // 16 bytes into 8
	rmsg.rma_iov_count = 0;
	ck_assert_int_eq(fi_writemsg(ep, &rmsg, 0), -FI_EINVAL);
	rmsg.rma_iov_count = 1;
	ck_assert_int_eq(fi_write(ep, r.buf.data(), 8, r.desc(), 0, r.addr(), 1ULL << 33, nullptr), -FI_EINVAL);
	ck_assert_int_eq(fi_readmsg(ep, &rmsg, FI_INJECT), -FI_EINVAL);
	// Nothing of the above was posted.
	expect_no_completion(p.client.cq, 100);
	// Not offered on MSG endpoints: an error, not a crash.
	ck_assert_int_eq(fi_tsend(ep, r.buf.data(), 8, r.desc(), 0, 1, nullptr), -FI_ENOSYS);
}
END_TEST

// Segments whose lengths do not fit an sge's 32 bits, or whose sum wraps:
// never posted cut short. Two 2^63-byte send segments add up to 0 and used
// to go out as an empty message; a 4 GiB + 16 receive segment used to be
// posted as 16 bytes (a 100-byte message then failed with FI_ETRUNC). The
// receive is capped at max_msg_size instead (no message is longer).
START_TEST(segment_lengths_beyond_32_bits)
{
	Env env;
	Pair p(env);
	Region tx(env, 4096, FI_SEND);
	Region rx(env, 4096, FI_RECV);
	const size_t half = size_t(1) << 63;
	iovec two[2] = {{tx.buf.data(), half}, {tx.buf.data(), half}};
	void *d2[2] = {tx.desc(), tx.desc()};
	ck_assert_int_eq(fi_sendv(p.client.ep, two, d2, 2, 0, nullptr), -FI_EINVAL);
	expect_no_completion(p.client.cq, 100);
	int rctx, sctx;
	ck_assert_int_eq(fi_recv(p.server.ep, rx.buf.data(), (size_t(4) << 30) + 16, rx.desc(), 0, &rctx), 0);
	tx.fill(41);
	ck_assert_int_eq(fi_send(p.client.ep, tx.buf.data(), 100, tx.desc(), 0, &sctx), 0);
	expect_completion(p.client.cq, &sctx, FI_SEND | FI_MSG);
	fi_cq_data_entry e = expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG);
	ck_assert_uint_eq(e.len, 100);
	ck_assert(rx.check(41, 100));
}
END_TEST

START_TEST(endpoint_state_errors)
{
	Env env;
	fid_eq *eq = open_eq(env);
	fid_cq *cq = open_cq(env);
	Region r(env, 64, FI_SEND | FI_RECV);
	fid_ep *ep = nullptr;
	ck_assert_int_eq(fi_endpoint(env.domain, env.info, &ep, nullptr), 0);
	// Receives need an enabled endpoint; enabling needs an EQ and a CQ.
	ck_assert_int_eq(fi_recv(ep, r.buf.data(), 64, r.desc(), 0, nullptr), -FI_EOPBADSTATE);
	ck_assert_int_eq(fi_enable(ep), -FI_ENOEQ);
	ck_assert_int_eq(fi_ep_bind(ep, &eq->fid, 0), 0);
	ck_assert_int_eq(fi_enable(ep), -FI_ENOCQ);
	ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, 1ULL << 40), -FI_EBADFLAGS);
	ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, 0), -FI_EINVAL);
	ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT), -FI_EINVAL); // already bound
	ck_assert_int_eq(fi_enable(ep), 0);
	ck_assert_int_eq(fi_enable(ep), 0); // idempotent
	fid_cq *cq2 = open_cq(env);
	ck_assert_int_eq(fi_ep_bind(ep, &cq2->fid, FI_RECV), -FI_EOPBADSTATE);
	// Unconnected: sends fail cleanly, receives may be posted.
	ck_assert_int_eq(fi_send(ep, r.buf.data(), 8, r.desc(), 0, nullptr), -FI_ENOTCONN);
	ck_assert_int_eq(fi_write(ep, r.buf.data(), 8, r.desc(), 0, r.addr(), r.key(), nullptr), -FI_ENOTCONN);
	int ctx;
	ck_assert_int_eq(fi_recv(ep, r.buf.data(), 64, r.desc(), 0, &ctx), 0);
	ck_assert_int_eq(fi_rx_size_left(ep), static_cast<ssize_t>(env.info->rx_attr->size) - 1);
	ck_assert_int_eq(fi_shutdown(ep, 0), -FI_ENOTCONN);
	uint64_t flags = FI_TRANSMIT;
	ck_assert_int_eq(fi_control(&ep->fid, FI_GETOPSFLAG, &flags), 0);
	ck_assert_uint_eq(flags, 0);
	flags = FI_TRANSMIT | FI_COMMIT_COMPLETE;
	ck_assert_int_eq(fi_control(&ep->fid, FI_SETOPSFLAG, &flags), -FI_EBADFLAGS);
	// Closing with a receive outstanding neither hangs nor reports it.
	ck_assert_int_eq(fi_close(&ep->fid), 0);
	expect_no_completion(cq, 50);
	ck_assert_int_eq(fi_close(&cq2->fid), 0);
	ck_assert_int_eq(fi_close(&cq->fid), 0);
	ck_assert_int_eq(fi_close(&eq->fid), 0);
}
END_TEST

Suite *errors_suite()
{
	Suite *s = suite_create("errors");
	TCase *tc = tcase_create("errors");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, data_path_bad_arguments);
	tcase_add_test(tc, endpoint_state_errors);
	tcase_add_test(tc, segment_lengths_beyond_32_bits);
	suite_add_tcase(s, tc);
	return s;
}
