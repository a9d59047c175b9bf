// RMA over a connected pair: read/write and variants with data verified, remote
// CQ data, and the device enforcing keys and access rights.
#include "harness.h"

#include <infiniband/verbs.h>

using namespace vt;

START_TEST(write_read_sizes)
{
	Env env;
	Pair p(env);
	const size_t max = size_t(1) << 20;
	Region local(env, max, FI_WRITE | FI_READ);
	Region remote(env, max, FI_REMOTE_READ | FI_REMOTE_WRITE);
	for (size_t len : {size_t(1), size_t(255), size_t(4096), size_t(65536), max}) {
		local.fill(static_cast<uint8_t>(len));
		std::fill(remote.buf.begin(), remote.buf.end(), 0);
		int wctx, rctx;
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), len, local.desc(), 0, remote.addr(),
					  remote.key(), &wctx), 0);
		fi_cq_data_entry e = expect_completion(p.client.cq, &wctx, FI_RMA | FI_WRITE);
		ck_assert_msg(remote.check(static_cast<uint8_t>(len), len), "write of %zu differs", len);
		if (len < max)
			ck_assert_uint_eq(remote.buf[len], 0); // nothing beyond
		// Read it back into a cleared buffer.
		std::fill(local.buf.begin(), local.buf.end(), 0);
		ck_assert_int_eq(fi_read(p.client.ep, local.buf.data(), len, local.desc(), 0, remote.addr(),
					 remote.key(), &rctx), 0);
		e = expect_completion(p.client.cq, &rctx, FI_RMA | FI_READ);
		ck_assert_msg(local.check(static_cast<uint8_t>(len), len), "read of %zu differs", len);
	}
	// The target saw no completion for one-sided operations.
	expect_no_completion(p.server.cq);
}
END_TEST

START_TEST(writev_readv_msg)
{
	Env env;
	Pair p(env);
	Region local(env, 4096, FI_WRITE | FI_READ);
	Region remote(env, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE);
	local.fill(5);
	iovec iov[2] = {{local.buf.data(), 1000}, {local.buf.data() + 1000, 3000}};
	void *desc[2] = {local.desc(), local.desc()};
	int ctx;
	ck_assert_int_eq(fi_writev(p.client.ep, iov, desc, 2, 0, remote.addr(), remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	ck_assert(remote.check(5, 4000));

	std::fill(local.buf.begin(), local.buf.end(), 0);
	ck_assert_int_eq(fi_readv(p.client.ep, iov, desc, 2, 0, remote.addr(), remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_READ);
	ck_assert(local.check(5, 4000));

	// writemsg at an offset, readmsg back.
	local.fill(11);
	iovec one = {local.buf.data(), 512};
	void *d = local.desc();
	fi_rma_iov rma = {remote.addr() + 1024, 512, remote.key()};
	fi_msg_rma msg = msg_rma(&one, &d, 1, &rma, 1);
	msg.context = &ctx;
	ck_assert_int_eq(fi_writemsg(p.client.ep, &msg, FI_COMPLETION), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	ck_assert(remote.check(11, 512, 1024));
	std::fill(local.buf.begin(), local.buf.end(), 0);
	ck_assert_int_eq(fi_readmsg(p.client.ep, &msg, FI_COMPLETION), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_READ);
	ck_assert(local.check(11, 512));
}
END_TEST

START_TEST(inject_write_and_writedata)
{
	Env env;
	Pair p(env);
	Region local(env, 4096, FI_WRITE | FI_READ);
	Region remote(env, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE);
	Region rx(env, 64, FI_RECV);
	uint64_t v = 0x0123456789abcdefULL;
	ck_assert_int_eq(fi_inject_write(p.client.ep, &v, sizeof v, 0, remote.addr(), remote.key()), 0);
	v = 0; // reusable at once
	// A read after the write on the same connection sees it (RC order).
	int ctx;
	ck_assert_int_eq(fi_read(p.client.ep, local.buf.data(), 8, local.desc(), 0, remote.addr(),
				 remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_READ);
	uint64_t got;
	memcpy(&got, local.buf.data(), 8);
	ck_assert_uint_eq(got, 0x0123456789abcdefULL);

	// Write with immediate data: the target's posted receive (FI_RX_CQ_DATA
	// mode) reports the remote write and the data.
	int rctx[2];
	ck_assert_int_eq(fi_recv(p.server.ep, rx.buf.data(), 64, rx.desc(), 0, &rctx[0]), 0);
	ck_assert_int_eq(fi_recv(p.server.ep, rx.buf.data(), 64, rx.desc(), 0, &rctx[1]), 0);
	local.fill(21);
	ck_assert_int_eq(fi_writedata(p.client.ep, local.buf.data(), 2048, local.desc(), 0xabcd, 0,
				      remote.addr() + 100, remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	fi_cq_data_entry e =
		expect_completion(p.server.cq, &rctx[0], FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 0xabcd);
	ck_assert_uint_eq(e.len, 2048);
	ck_assert(remote.check(21, 2048, 100));

	ck_assert_int_eq(fi_inject_writedata(p.client.ep, &v, 4, 0x77, 0, remote.addr(), remote.key()), 0);
	e = expect_completion(p.server.cq, &rctx[1], FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 0x77);
	expect_no_completion(p.client.cq);
}
END_TEST

// The calls without a flags argument (fi_write, fi_read, fi_writedata,
// fi_inject_write, fi_inject_writedata) follow the default transmit flags
// as they are at the call, also when FI_SETOPSFLAG changes them after the
// connection is up: with selective completion, a write completes only while
// FI_COMPLETION is a default; with FI_DELIVERY_COMPLETE a default, a write
// still lands and completes once. Both threading levels: an endpoint whose
// calls the application serializes posts without the transmit lock.
START_TEST(default_flags_changed_while_connected)
{
	for (fi_threading threading : {FI_THREAD_DOMAIN, FI_THREAD_SAFE}) {
		fi_info *h = base_hints();
		h->domain_attr->threading = threading;
		Env env(h);
		fi_freeinfo(h);
		PairOptions opt;
		opt.bind_flags = FI_SELECTIVE_COMPLETION;
		Pair p(env, opt);
		Region local(env, 4096, FI_WRITE | FI_READ);
		Region remote(env, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE);
		Region rx(env, 64, FI_RECV);
		int rctx[2];
		ck_assert_int_eq(fi_recv(p.server.ep, rx.buf.data(), 64, rx.desc(), 0, &rctx[0]), 0);
		ck_assert_int_eq(fi_recv(p.server.ep, rx.buf.data(), 64, rx.desc(), 0, &rctx[1]), 0);
		// Reads back `len` bytes at `off` with a completion asked for
		// (RC order: it sees every earlier write) and checks them.
		auto read_back = [&](size_t off, size_t len, uint8_t seed) {
			OneRma r(local.buf.data() + 2048, len, local.desc(), remote.addr() + off,
				 remote.key(), &rctx);
			ck_assert_int_eq(fi_readmsg(p.client.ep, &r.msg, FI_COMPLETION), 0);
			expect_completion(p.client.cq, &rctx, FI_RMA | FI_READ);
			for (size_t i = 0; i < len; i++)
				ck_assert_msg(local.buf[2048 + i] == static_cast<uint8_t>(seed + i),
					      "threading %d: byte %zu at %zu", threading, i, off);
		};
		auto set_tx_flags = [&](uint64_t f) {
			uint64_t flags = FI_TRANSMIT | f;
			ck_assert_int_eq(fi_control(&p.client.ep->fid, FI_SETOPSFLAG, &flags), 0);
		};
		for (size_t i = 0; i < 1024; i++)
			local.buf[i] = static_cast<uint8_t>(7 + i);
		int ctx[6];
		// Default flags 0: no completion for these.
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 16, local.desc(), 0,
					  remote.addr(), remote.key(), &ctx[0]), 0);
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 1024, local.desc(), 0,
					  remote.addr() + 1024, remote.key(), &ctx[1]), 0);
		read_back(0, 16, 7);
		read_back(1024, 1024, 7);
		expect_no_completion(p.client.cq, 50);

		set_tx_flags(FI_COMPLETION);
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data() + 1, 16, local.desc(), 0,
					  remote.addr() + 100, remote.key(), &ctx[2]), 0);
		expect_completion(p.client.cq, &ctx[2], FI_RMA | FI_WRITE);
		read_back(100, 16, 8);
		ck_assert_int_eq(fi_read(p.client.ep, local.buf.data() + 3000, 16, local.desc(), 0,
					 remote.addr() + 100, remote.key(), &ctx[3]), 0);
		expect_completion(p.client.cq, &ctx[3], FI_RMA | FI_READ);
		ck_assert_int_eq(memcmp(local.buf.data() + 3000, local.buf.data() + 1, 16), 0);
		ck_assert_int_eq(fi_writedata(p.client.ep, local.buf.data() + 2, 16, local.desc(), 0x51,
					      0, remote.addr() + 200, remote.key(), &ctx[4]), 0);
		expect_completion(p.client.cq, &ctx[4], FI_RMA | FI_WRITE);
		fi_cq_data_entry e = expect_completion(p.server.cq, &rctx[0],
						       FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
		ck_assert_uint_eq(e.data, 0x51);
		read_back(200, 16, 9);

		// Injects complete never, whatever the defaults.
		uint64_t v = 0x1122334455667788ULL;
		ck_assert_int_eq(fi_inject_write(p.client.ep, &v, 8, 0, remote.addr() + 300,
						 remote.key()), 0);
		ck_assert_int_eq(fi_inject_writedata(p.client.ep, &v, 8, 0x52, 0,
						     remote.addr() + 308, remote.key()), 0);
		e = expect_completion(p.server.cq, &rctx[1], FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
		ck_assert_uint_eq(e.data, 0x52);
		uint64_t got[2];
		OneRma r(got, sizeof got, nullptr, remote.addr() + 300, remote.key(), &rctx);
		ck_assert_int_eq(fi_readmsg(p.client.ep, &r.msg, FI_COMPLETION | FI_INJECT), -FI_EINVAL);
		ck_assert_int_eq(fi_read(p.client.ep, local.buf.data() + 3100, 16, local.desc(), 0,
					 remote.addr() + 300, remote.key(), &ctx[3]), 0);
		expect_completion(p.client.cq, &ctx[3], FI_RMA | FI_READ);
		memcpy(got, local.buf.data() + 3100, sizeof got);
		ck_assert_uint_eq(got[0], v);
		ck_assert_uint_eq(got[1], v);

		// Delivery complete as a default: the write takes the long way
		// and completes once, after its data is at the target.
		set_tx_flags(FI_COMPLETION | FI_DELIVERY_COMPLETE);
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data() + 3, 16, local.desc(), 0,
					  remote.addr() + 400, remote.key(), &ctx[5]), 0);
		expect_completion(p.client.cq, &ctx[5], FI_RMA | FI_WRITE);
		ck_assert_msg(memcmp(remote.buf.data() + 400, local.buf.data() + 3, 16) == 0,
			      "threading %d: delivery-complete write not at the target", threading);
		expect_no_completion(p.client.cq, 50);

		// Back to 0: silent again.
		set_tx_flags(0);
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data() + 4, 16, local.desc(), 0,
					  remote.addr() + 500, remote.key(), &ctx[0]), 0);
		read_back(500, 16, 11);
		expect_no_completion(p.client.cq, 50);
		expect_no_completion(p.server.cq, 50);
	}
}
END_TEST

// Remote CQ data wider than cq_data_size (4 bytes) is refused by every call
// that carries it, and nothing reaches the target: the one valid write
// after them takes the first posted receive with its data intact.
START_TEST(cq_data_wider_than_cq_data_size)
{
	Env env;
	ck_assert_uint_eq(env.info->domain_attr->cq_data_size, 4);
	Pair p(env);
	Region local(env, 4096, FI_WRITE | FI_READ | FI_SEND);
	Region remote(env, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE);
	Region rx(env, 64, FI_RECV);
	int rctx[2];
	ck_assert_int_eq(fi_recv(p.server.ep, rx.buf.data(), 64, rx.desc(), 0, &rctx[0]), 0);
	ck_assert_int_eq(fi_recv(p.server.ep, rx.buf.data(), 64, rx.desc(), 0, &rctx[1]), 0);
	const uint64_t wide = 0xABCD00001234ULL;
	fid_ep *ep = p.client.ep;
	int ctx;
	ck_assert_int_eq(fi_writedata(ep, local.buf.data(), 64, local.desc(), wide, 0, remote.addr(), remote.key(),
				      &ctx),
			 -FI_EINVAL);
	ck_assert_int_eq(fi_writedata(ep, local.buf.data(), 4096, local.desc(), wide, 0, remote.addr(),
				      remote.key(), &ctx),
			 -FI_EINVAL);
	ck_assert_int_eq(fi_inject_writedata(ep, local.buf.data(), 8, wide, 0, remote.addr(), remote.key()),
			 -FI_EINVAL);
	ck_assert_int_eq(fi_senddata(ep, local.buf.data(), 8, local.desc(), wide, 0, &ctx), -FI_EINVAL);
	ck_assert_int_eq(fi_injectdata(ep, local.buf.data(), 8, wide, 0), -FI_EINVAL);
	iovec iov{local.buf.data(), 64};
	void *d = local.desc();
	fi_rma_iov rma{remote.addr(), 64, remote.key()};
	fi_msg_rma rmsg{};
	rmsg.msg_iov = &iov;
	rmsg.desc = &d;
	rmsg.iov_count = 1;
	rmsg.rma_iov = &rma;
	rmsg.rma_iov_count = 1;
	rmsg.context = &ctx;
	rmsg.data = wide;
	ck_assert_int_eq(fi_writemsg(ep, &rmsg, FI_REMOTE_CQ_DATA | FI_COMPLETION), -FI_EINVAL);
	fi_msg msg{};
	msg.msg_iov = &iov;
	msg.desc = &d;
	msg.iov_count = 1;
	msg.context = &ctx;
	msg.data = wide;
	ck_assert_int_eq(fi_sendmsg(ep, &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION), -FI_EINVAL);
	// The same width without FI_REMOTE_CQ_DATA carries no data: accepted.
	ck_assert_int_eq(fi_writemsg(ep, &rmsg, FI_COMPLETION), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	// Data that fits goes through, into the first receive.
	local.fill(31);
	ck_assert_int_eq(fi_writedata(ep, local.buf.data(), 256, local.desc(), 0xFFFFFFFFULL, 0, remote.addr(),
				      remote.key(), &ctx),
			 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	fi_cq_data_entry e =
		expect_completion(p.server.cq, &rctx[0], FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 0xFFFFFFFFULL);
	ck_assert(remote.check(31, 256));
	expect_no_completion(p.server.cq);
	expect_no_completion(p.client.cq);
}
END_TEST

namespace {

// Runs one write that the target's device must refuse; checks the error
// completion and that the target memory is untouched.
void expect_write_refused(Env &env, Pair &p, Region &remote, uint64_t key)
{
	Region local(env, 256, FI_WRITE);
	local.fill(1);
	std::fill(remote.buf.begin(), remote.buf.end(), 0x5a);
	// The refused write, and one posted behind it before anything failed.
	int ctx, behind;
	ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 256, local.desc(), 0, remote.addr(), key,
				  &ctx), 0);
	ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 8, local.desc(), 0, remote.addr(), key,
				  &behind), 0);
	fi_cq_err_entry err = expect_error(p.client.cq);
	ck_assert_ptr_eq(err.op_context, &ctx);
	ck_assert_uint_eq(err.flags, FI_RMA | FI_WRITE);
	ck_assert_int_eq(err.err, FI_EACCES);
	ck_assert_int_eq(err.prov_errno, IBV_WC_REM_ACCESS_ERR);
	char text[128];
	const char *s = fi_cq_strerror(p.client.cq, err.prov_errno, err.err_data, text, sizeof text);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_gt(strlen(s), 0);
	// The one behind it is flushed, not lost.
	err = expect_error(p.client.cq);
	ck_assert_ptr_eq(err.op_context, &behind);
	ck_assert_int_eq(err.err, FI_ECANCELED);
	for (uint8_t b : remote.buf)
		ck_assert_uint_eq(b, 0x5a);
	// The QP is dead: both ends learn it on their EQ, once.
	alignas(fi_eq_cm_entry) uint8_t ev[sizeof(fi_eq_cm_entry) + 64];
	uint32_t event;
	ck_assert_int_eq(wait_eq(p.client.eq, &event, ev, sizeof ev), sizeof(fi_eq_cm_entry));
	ck_assert_uint_eq(event, FI_SHUTDOWN);
	ck_assert_ptr_eq(reinterpret_cast<fi_eq_cm_entry *>(ev)->fid, &p.client.ep->fid);
	ck_assert_int_eq(wait_eq(p.server.eq, &event, ev, sizeof ev), sizeof(fi_eq_cm_entry));
	ck_assert_uint_eq(event, FI_SHUTDOWN);
	ck_assert_int_eq(wait_eq(p.client.eq, &event, ev, sizeof ev, 300), -FI_EAGAIN);
	// Later operations are refused: the endpoint is not connected any more.
	ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 8, local.desc(), 0, remote.addr(), key,
				  &ctx), -FI_ENOTCONN);
}

} // namespace

START_TEST(wrong_key_refused)
{
	Env env;
	Pair p(env);
	Region remote(env, 4096, FI_REMOTE_WRITE);
	expect_write_refused(env, p, remote, remote.key() ^ 0x5500);
}
END_TEST

START_TEST(beyond_region_refused)
{
	Env env;
	Pair p(env);
	Region remote(env, 128, FI_REMOTE_WRITE); // the write is 256 bytes
	expect_write_refused(env, p, remote, remote.key());
}
END_TEST

START_TEST(no_remote_write_access_refused)
{
	Env env;
	Pair p(env);
	Region remote(env, 4096, FI_REMOTE_READ);
	expect_write_refused(env, p, remote, remote.key());
}
END_TEST

START_TEST(closed_mr_key_stops_working)
{
	Env env;
	Pair p(env);
	Region remote(env, 4096, FI_REMOTE_WRITE);
	Region local(env, 64, FI_WRITE);
	int ctx;
	ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 64, local.desc(), 0, remote.addr(),
				  remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	uint64_t key = remote.key();
	ck_assert_int_eq(fi_close(&remote.mr->fid), 0);
	remote.mr = nullptr;
	expect_write_refused(env, p, remote, key);
}
END_TEST

START_TEST(several_remote_segments)
{
	Env env;
	fid_cntr *wc = open_cntr(env);
	PairOptions opt;
	opt.client_cntrs = {{wc, FI_WRITE}};
	{
		Pair p(env, opt);
		Region local(env, 8192, FI_WRITE | FI_READ);
		Region remote(env, 8192, FI_REMOTE_READ | FI_REMOTE_WRITE);
		local.fill(60);
		std::fill(remote.buf.begin(), remote.buf.end(), 0);
		// Two local pieces (1000 + 3000) into three remote segments whose
		// boundaries fall inside the local pieces, plus an empty one.
		iovec iov[2] = {{local.buf.data(), 1000}, {local.buf.data() + 1000, 3000}};
		void *desc[2] = {local.desc(), local.desc()};
		fi_rma_iov rma[4] = {{remote.addr() + 100, 700, remote.key()},
				     {remote.addr() + 2000, 0, remote.key()},
				     {remote.addr() + 3000, 1800, remote.key()},
				     {remote.addr() + 6000, 1500, remote.key()}};
		fi_msg_rma msg = msg_rma(iov, desc, 2, rma, 4);
		int ctx;
		msg.context = &ctx;
		ck_assert_int_eq(fi_writemsg(p.client.ep, &msg, FI_COMPLETION), 0);
		// One completion and one count for the whole operation.
		fi_cq_data_entry e = expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
		ck_assert_uint_eq(fi_cntr_read(wc), 1);
		(void)e;
		expect_no_completion(p.client.cq, 100);
		ck_assert(remote.check(60, 700, 100));
		// Bytes 700..2499 of the source went to the third segment, the rest
		// to the fourth.
		for (size_t i = 0; i < 1800; i++)
			ck_assert_uint_eq(remote.buf[3000 + i], local.buf[700 + i]);
		for (size_t i = 0; i < 1500; i++)
			ck_assert_uint_eq(remote.buf[6000 + i], local.buf[2500 + i]);
		ck_assert_uint_eq(remote.buf[99], 0);
		ck_assert_uint_eq(remote.buf[800], 0);
		ck_assert_uint_eq(remote.buf[7500], 0);

		// Read the same segments back into a cleared buffer.
		std::fill(local.buf.begin(), local.buf.end(), 0);
		ck_assert_int_eq(fi_readmsg(p.client.ep, &msg, FI_COMPLETION), 0);
		expect_completion(p.client.cq, &ctx, FI_RMA | FI_READ);
		ck_assert(local.check(60, 4000));

		// More segments than rma_iov_limit.
		std::vector<fi_rma_iov> many(17, fi_rma_iov{remote.addr(), 1, remote.key()});
		msg.rma_iov = many.data();
		msg.rma_iov_count = many.size();
		ck_assert_int_eq(fi_writemsg(p.client.ep, &msg, 0), -FI_EINVAL);
	}
	ck_assert_int_eq(fi_close(&wc->fid), 0);
}
END_TEST

START_TEST(error_in_one_segment_reported_once)
{
	Env env;
	Pair p(env);
	Region local(env, 4096, FI_WRITE);
	Region remote(env, 4096, FI_REMOTE_WRITE);
	std::fill(remote.buf.begin(), remote.buf.end(), 0x33);
	iovec iov = {local.buf.data(), 3000};
	void *desc = local.desc();
	fi_rma_iov rma[3] = {{remote.addr(), 1000, remote.key()},
			     {remote.addr() + 1000, 1000, remote.key() ^ 0x5500},
			     {remote.addr() + 2000, 1000, remote.key()}};
	fi_msg_rma msg = msg_rma(&iov, &desc, 1, rma, 3);
	int ctx;
	msg.context = &ctx;
	ck_assert_int_eq(fi_writemsg(p.client.ep, &msg, FI_COMPLETION), 0);
	fi_cq_err_entry err = expect_error(p.client.cq);
	ck_assert_ptr_eq(err.op_context, &ctx);
	ck_assert_int_eq(err.err, FI_EACCES);
	ck_assert_uint_eq(err.flags, FI_RMA | FI_WRITE);
	// The third segment's flush is not a second error for the operation.
	expect_no_completion(p.client.cq, 300);
	for (size_t i = 1000; i < 3000; i++)
		ck_assert_uint_eq(remote.buf[i], 0x33);
}
END_TEST

START_TEST(delivery_complete_write)
{
	Env env(0, FI_DELIVERY_COMPLETE); // default op_flags: rma only
	ck_assert_uint_eq(env.info->tx_attr->op_flags & FI_DELIVERY_COMPLETE, FI_DELIVERY_COMPLETE);
	Pair p(env);
	Region local(env, 1 << 16, FI_WRITE | FI_READ | FI_SEND);
	Region remote(env, 1 << 16, FI_REMOTE_READ | FI_REMOTE_WRITE);
	for (size_t len : {size_t(1), size_t(7), size_t(8), size_t(4096), size_t(1) << 16}) {
		local.fill(static_cast<uint8_t>(len + 1));
		std::fill(remote.buf.begin(), remote.buf.end(), 0);
		int ctx;
		// fi_write: the endpoint's default flags carry FI_DELIVERY_COMPLETE.
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), len, local.desc(), 0, remote.addr(),
					  remote.key(), &ctx), 0);
		fi_cq_data_entry e = expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
		ck_assert_uint_eq(e.len, len);
		// Completion means placed: the data is there when the completion is.
		ck_assert_msg(remote.check(static_cast<uint8_t>(len + 1), len), "len %zu", len);
	}
	// Explicitly, and fenced after a read: the read sees the old data.
	uint64_t old_value = 0x0101010101010101ULL, new_value = 0x0202020202020202ULL;
	memcpy(remote.buf.data(), &old_value, 8);
	memcpy(local.buf.data() + 64, &new_value, 8);
	int rctx, wctx;
	ck_assert_int_eq(fi_read(p.client.ep, local.buf.data(), 8, local.desc(), 0, remote.addr(),
				 remote.key(), &rctx), 0);
	OneRma one(local.buf.data() + 64, 8, local.desc(), remote.addr(), remote.key(), &wctx);
	fi_msg_rma &msg = one.msg;
	ck_assert_int_eq(fi_writemsg(p.client.ep, &msg, FI_FENCE | FI_DELIVERY_COMPLETE | FI_COMPLETION), 0);
	expect_completion(p.client.cq, &rctx, FI_RMA | FI_READ);
	expect_completion(p.client.cq, &wctx, FI_RMA | FI_WRITE);
	uint64_t got;
	memcpy(&got, local.buf.data(), 8);
	ck_assert_uint_eq(got, old_value);
	memcpy(&got, remote.buf.data(), 8);
	ck_assert_uint_eq(got, new_value);
	// An RMA-only endpoint sends no messages: refused (before issue 13
	// §1, for the default FI_DELIVERY_COMPLETE).
	ck_assert_int_eq(fi_send(p.client.ep, local.buf.data(), 8, local.desc(), 0, nullptr), -FI_EOPNOTSUPP);
}
END_TEST

START_TEST(delivery_complete_without_remote_read)
{
	// The proof of placement is a zero-length read, whose key the target
	// does not check (IBA C9-88): a region registered for remote writes
	// only takes delivery-complete writes. A read of it is still refused.
	Env env(0, FI_DELIVERY_COMPLETE);
	Pair p(env);
	Region local(env, 4096, FI_WRITE | FI_READ);
	Region remote(env, 4096, FI_REMOTE_WRITE);
	for (size_t len : {size_t(1), size_t(64), size_t(4096)}) {
		local.fill(static_cast<uint8_t>(len + 3));
		std::fill(remote.buf.begin(), remote.buf.end(), 0);
		int ctx;
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), len, local.desc(), 0,
					  remote.addr(), remote.key(), &ctx), 0);
		fi_cq_data_entry e = expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
		ck_assert_uint_eq(e.len, len);
		ck_assert_msg(remote.check(static_cast<uint8_t>(len + 3), len), "len %zu", len);
	}
	int rctx;
	ck_assert_int_eq(fi_read(p.client.ep, local.buf.data(), 8, local.desc(), 0, remote.addr(),
				 remote.key(), &rctx), 0);
	fi_cq_err_entry err = expect_error(p.client.cq);
	ck_assert_ptr_eq(err.op_context, &rctx);
	ck_assert_int_eq(err.err, FI_EACCES);
}
END_TEST

START_TEST(more_holds_the_doorbell)
{
	Env env;
	Pair p(env);
	const size_t len = 8192; // beyond the inject size: not copied at post time
	ck_assert_uint_lt(env.info->tx_attr->inject_size, len);
	Region local(env, 11 * len, FI_WRITE);
	Region remote(env, 11 * len, FI_REMOTE_WRITE);
	local.fill(90);
	std::fill(remote.buf.begin(), remote.buf.end(), 0);
	int ctx[11];
	auto write = [&](int i, uint64_t flags) {
		OneRma one(local.buf.data() + i * len, len, local.desc(), remote.addr() + i * len,
			   remote.key(), &ctx[i]);
		fi_msg_rma &msg = one.msg;
		return fi_writemsg(p.client.ep, &msg, flags);
	};
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(write(i, FI_COMPLETION | FI_MORE), 0);
	// Held back: nothing went out yet.
	expect_no_completion(p.client.cq, 300);
	for (size_t i = 0; i < 10 * len; i++)
		ck_assert_uint_eq(remote.buf[i], 0);
	// The first operation without FI_MORE rings the doorbell for all.
	ck_assert_int_eq(write(10, FI_COMPLETION), 0);
	for (int i = 0; i < 11; i++)
		expect_completion(p.client.cq, &ctx[i], FI_RMA | FI_WRITE);
	ck_assert(remote.check(90, 11 * len));

	// An injected operation is copied at once, so it rings the doorbell for
	// what was held back before it.
	ck_assert_int_eq(write(0, FI_COMPLETION | FI_MORE), 0);
	uint64_t v = 42;
	ck_assert_int_eq(fi_inject_write(p.client.ep, &v, 8, 0, remote.addr() + 11 * len - 8, remote.key()), 0);
	expect_completion(p.client.cq, &ctx[0], FI_RMA | FI_WRITE);
}
END_TEST

START_TEST(more_holds_inline_injects)
{
	// Small injects with FI_MORE are held back too: their payload is copied
	// when the call returns (the buffer is overwritten at once) and goes
	// out with the first operation without FI_MORE.
	Env env;
	Pair p(env);
	Region remote(env, 4096, FI_REMOTE_WRITE);
	std::fill(remote.buf.begin(), remote.buf.end(), 0);
	constexpr int kHeld = 20;
	int ctx[kHeld];
	uint64_t v = 0;
	for (int i = 0; i < kHeld; i++) {
		v = 1000 + i;
		OneRma one(&v, sizeof v, nullptr, remote.addr() + 8 * i, remote.key(), &ctx[i]);
		ck_assert_int_eq(fi_writemsg(p.client.ep, &one.msg, FI_INJECT | FI_COMPLETION | FI_MORE), 0);
		v = 0xdeadbeef; // the caller's buffer is reusable at once
	}
	expect_no_completion(p.client.cq, 300);
	for (int i = 0; i < kHeld; i++)
		ck_assert_uint_eq(reinterpret_cast<const uint64_t *>(remote.buf.data())[i], 0);
	v = 2000;
	int last;
	OneRma one(&v, sizeof v, nullptr, remote.addr() + 8 * kHeld, remote.key(), &last);
	ck_assert_int_eq(fi_writemsg(p.client.ep, &one.msg, FI_INJECT | FI_COMPLETION), 0);
	for (int i = 0; i < kHeld; i++)
		expect_completion(p.client.cq, &ctx[i], FI_RMA | FI_WRITE);
	expect_completion(p.client.cq, &last, FI_RMA | FI_WRITE);
	for (int i = 0; i < kHeld; i++)
		ck_assert_uint_eq(reinterpret_cast<const uint64_t *>(remote.buf.data())[i], 1000 + i);
	ck_assert_uint_eq(reinterpret_cast<const uint64_t *>(remote.buf.data())[kHeld], 2000);
}
END_TEST

START_TEST(inject_write_beyond_inline)
{
	Env env;
	Pair p(env);
	const size_t inject = env.info->tx_attr->inject_size;
	const int count = 200; // cycles the bounce buffers several times
	Region remote(env, count * 64 + inject, FI_REMOTE_READ | FI_REMOTE_WRITE);
	Region local(env, count * 64 + inject, FI_READ);
	std::vector<uint8_t> src(inject);
	for (int i = 0; i < count; i++) {
		std::fill(src.begin(), src.begin() + 1000, static_cast<uint8_t>(i));
		ssize_t rc;
		while ((rc = fi_inject_write(p.client.ep, src.data(), 1000, 0, remote.addr() + i * 64,
					     remote.key())) == -FI_EAGAIN) {
			fi_cq_data_entry e;
			ck_assert_int_eq(fi_cq_read(p.client.cq, &e, 1), -FI_EAGAIN);
		}
		ck_assert_int_eq(rc, 0);
	}
	// Largest inject, then read everything back behind it.
	for (size_t i = 0; i < inject; i++)
		src[i] = static_cast<uint8_t>(i * 3);
	ck_assert_int_eq(fi_inject_write(p.client.ep, src.data(), inject, 0, remote.addr() + count * 64,
					 remote.key()), 0);
	std::vector<uint8_t> expect = src;
	std::fill(src.begin(), src.end(), 0);
	int ctx;
	ck_assert_int_eq(fi_read(p.client.ep, local.buf.data(), local.buf.size(), local.desc(), 0,
				 remote.addr(), remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_READ);
	// Each 1000-byte write was overlapped by the next ones, in order: bytes
	// i*64 .. i*64+63 hold i.
	for (int i = 0; i < count; i++)
		for (int k = 0; k < 64; k++)
			ck_assert_uint_eq(local.buf[i * 64 + k], static_cast<uint8_t>(i));
	ck_assert(!memcmp(local.buf.data() + count * 64, expect.data(), inject));
	expect_no_completion(p.client.cq);
}
END_TEST

START_TEST(more_with_a_small_queue)
{
	// Held-back requests occupy send slots: a full queue must post them
	// rather than answer -FI_EAGAIN forever.
	Env env;
	PairOptions opt;
	opt.tx_size = 4;
	Pair p(env, opt);
	const size_t len = 8192;
	Region local(env, 21 * len, FI_WRITE);
	Region remote(env, 21 * len, FI_REMOTE_WRITE);
	local.fill(33);
	int ctx[21];
	int completed = 0;
	auto reap = [&] {
		fi_cq_data_entry e;
		while (fi_cq_read(p.client.cq, &e, 1) == 1) {
			ck_assert_ptr_eq(e.op_context, &ctx[completed]);
			completed++;
		}
	};
	for (int i = 0; i < 21; i++) {
		OneRma one(local.buf.data() + i * len, len, local.desc(), remote.addr() + i * len,
			   remote.key(), &ctx[i]);
		fi_msg_rma &msg = one.msg;
		const uint64_t flags = FI_COMPLETION | (i < 20 ? FI_MORE : 0);
		ssize_t rc;
		const Deadline deadline(kTimeoutMs);
		while ((rc = fi_writemsg(p.client.ep, &msg, flags)) == -FI_EAGAIN) {
			ck_assert_msg(!deadline.expired(), "send queue stuck at operation %d", i);
			reap();
		}
		ck_assert_int_eq(rc, 0);
	}
	while (completed < 21) {
		fi_cq_data_entry e;
		ck_assert_int_eq(wait_cq(p.client.cq, &e), 1);
		ck_assert_ptr_eq(e.op_context, &ctx[completed]);
		completed++;
	}
	ck_assert(remote.check(33, 21 * len));
}
END_TEST

START_TEST(inline_then_bounce_injects)
{
	// Many unsignaled inline injects, then one through a bounce buffer: the
	// bounce buffer must become free (fi_pingpong -S all found this).
	Env env;
	Pair p(env);
	Region remote(env, 8192, FI_REMOTE_WRITE | FI_REMOTE_READ);
	Region local(env, 8192, FI_READ);
	uint64_t v = 7;
	for (int i = 0; i < 150; i++) {
		ssize_t rc;
		const Deadline deadline(kTimeoutMs);
		while ((rc = fi_inject_write(p.client.ep, &v, 8, 0, remote.addr(), remote.key())) == -FI_EAGAIN)
			ck_assert_msg(!deadline.expired(), "inline inject %d stuck", i);
		ck_assert_int_eq(rc, 0);
	}
	std::vector<uint8_t> big(2000, 0xab);
	ssize_t rc;
	const Deadline deadline(kTimeoutMs);
	while ((rc = fi_inject_write(p.client.ep, big.data(), big.size(), 0, remote.addr() + 4096,
				     remote.key())) == -FI_EAGAIN) {
		ck_assert_msg(!deadline.expired(), "bounce inject stuck behind unsignaled injects");
		fi_cq_data_entry e;
		ck_assert_int_eq(fi_cq_read(p.client.cq, &e, 1), -FI_EAGAIN);
	}
	ck_assert_int_eq(rc, 0);
	int ctx;
	ck_assert_int_eq(fi_read(p.client.ep, local.buf.data(), 8192, local.desc(), 0, remote.addr(),
				 remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_READ);
	ck_assert_uint_eq(local.buf[0], 7);
	for (size_t i = 0; i < 2000; i++)
		ck_assert_uint_eq(local.buf[4096 + i], 0xab);
}
END_TEST

START_TEST(cq_data_without_application_receives)
{
	// An RMA-only endpoint that did not take on FI_RX_CQ_DATA: remote CQ
	// data arrives without any receive posted by the application.
	fi_info *h = base_hints();
	h->caps = FI_RMA;
	h->mode = FI_CONTEXT;
	Env env(h);
	fi_freeinfo(h);
	ck_assert_uint_eq(env.info->mode & FI_RX_CQ_DATA, 0);
	PairOptions opt;
	opt.rx_size = 8; // fewer than the writes: vrma's receives are reposted
	Pair p(env, opt);
	Region local(env, 4096, FI_WRITE);
	Region remote(env, 4096, FI_REMOTE_WRITE);
	local.fill(17);
	for (uint64_t i = 0; i < 20; i++) {
		int ctx;
		ck_assert_int_eq(fi_writedata(p.client.ep, local.buf.data() + i * 64, 64, local.desc(), 1000 + i, 0,
					      remote.addr() + i * 64, remote.key(), &ctx), 0);
		expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
		fi_cq_data_entry e =
			expect_completion(p.server.cq, nullptr, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
		ck_assert_uint_eq(e.data, 1000 + i);
		ck_assert_uint_eq(e.len, 64);
	}
	ck_assert(remote.check(17, 20 * 64));
	// No messages on such an endpoint: a receive is refused, not lost,
	// whichever call posts it; a bad flag or a NULL message still says so.
	ck_assert_int_eq(fi_recv(p.server.ep, remote.buf.data(), 8, remote.desc(), 0, nullptr), -FI_EOPNOTSUPP);
	iovec iov{remote.buf.data(), 8};
	void *desc = remote.desc();
	ck_assert_int_eq(fi_recvv(p.server.ep, &iov, &desc, 1, 0, nullptr), -FI_EOPNOTSUPP);
	fi_msg msg = msg_of(&iov, &desc, 1);
	ck_assert_int_eq(fi_recvmsg(p.server.ep, &msg, 0), -FI_EOPNOTSUPP);
	ck_assert_int_eq(fi_recvmsg(p.server.ep, &msg, FI_FENCE), -FI_EBADFLAGS);
	ck_assert_int_eq(fi_recvmsg(p.server.ep, nullptr, 0), -FI_EINVAL);
	// The writes still land: nothing of vrma's receive queue was taken.
	int ctx;
	ck_assert_int_eq(fi_writedata(p.client.ep, local.buf.data(), 64, local.desc(), 7, 0,
				      remote.addr(), remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	fi_cq_data_entry e =
		expect_completion(p.server.cq, nullptr, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 7);
}
END_TEST

START_TEST(cq_data_refused_where_it_would_eat_a_receive)
{
	// Messages, RMA as an initiator only (no FI_REMOTE_WRITE), and no
	// FI_RX_CQ_DATA: the target receives straight into the application's
	// buffers and takes no remote CQ data, so a write with immediate data
	// would consume one of its receives: the initiator refuses it, and the
	// target's receive stays for messages. (With FI_REMOTE_WRITE the
	// target would use staged receives: the staged suite.)
	fi_info *h = base_hints();
	h->mode = FI_CONTEXT;
	h->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE;
	Env env(h);
	fi_freeinfo(h);
	ck_assert_uint_eq(env.info->mode & FI_RX_CQ_DATA, 0);
	ck_assert_uint_eq(env.info->caps & FI_MSG, FI_MSG);
	Pair p(env);
	Region local(env, 4096, FI_WRITE | FI_SEND);
	Region remote(env, 4096, FI_REMOTE_WRITE | FI_RECV);
	int rctx, ctx;
	ck_assert_int_eq(fi_recv(p.server.ep, remote.buf.data() + 1024, 64, remote.desc(), 0, &rctx), 0);
	local.fill(23);
	ck_assert_int_eq(fi_writedata(p.client.ep, local.buf.data(), 64, local.desc(), 77, 0,
				      remote.addr(), remote.key(), &ctx), -FI_EOPNOTSUPP);
	ck_assert_int_eq(fi_inject_writedata(p.client.ep, local.buf.data(), 8, 77, 0, remote.addr(),
					     remote.key()), -FI_EOPNOTSUPP);
	// Plain writes and messages with CQ data still go; the receive takes
	// the message.
	ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 64, local.desc(), 0, remote.addr(),
				  remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	ck_assert_int_eq(fi_senddata(p.client.ep, local.buf.data() + 64, 64, local.desc(), 78, 0, &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_SEND | FI_MSG);
	fi_cq_data_entry e = expect_completion(p.server.cq, &rctx, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 78);
	ck_assert_uint_eq(e.len, 64);
	ck_assert(memcmp(remote.buf.data() + 1024, local.buf.data() + 64, 64) == 0);
	ck_assert(remote.check(23, 64));
}
END_TEST

// Operations held back by FI_MORE (a chain never ended by an operation
// without it) when the connection ends. The held chain: two writes (one of
// them split over two remote segments), an inline inject write and a send.
struct HeldChain {
	static constexpr int kOps = 4;
	int ctx[kOps];
	Region local, remote;
	HeldChain(Env &env) : local(env, 4096, FI_WRITE | FI_SEND), remote(env, 4096, FI_REMOTE_WRITE)
	{
		local.fill(55);
		std::fill(remote.buf.begin(), remote.buf.end(), 0);
	}
	void post(fid_ep *ep)
	{
		OneRma w0(local.buf.data(), 512, local.desc(), remote.addr(), remote.key(), &ctx[0]);
		ck_assert_int_eq(fi_writemsg(ep, &w0.msg, FI_COMPLETION | FI_MORE), 0);
		iovec iov{local.buf.data() + 512, 1024};
		void *desc = local.desc();
		fi_rma_iov rma[2] = {{remote.addr() + 512, 512, remote.key()},
				     {remote.addr() + 2048, 512, remote.key()}};
		fi_msg_rma w1 = msg_rma(&iov, &desc, 1, rma, 2);
		w1.context = &ctx[1];
		ck_assert_int_eq(fi_writemsg(ep, &w1, FI_COMPLETION | FI_MORE), 0);
		uint64_t v = 77;
		OneRma w2(&v, sizeof v, nullptr, remote.addr() + 4000, remote.key(), &ctx[2]);
		ck_assert_int_eq(fi_writemsg(ep, &w2.msg, FI_INJECT | FI_COMPLETION | FI_MORE), 0);
		iovec siov{local.buf.data(), 64};
		fi_msg m{};
		m.msg_iov = &siov;
		m.desc = &desc;
		m.iov_count = 1;
		m.context = &ctx[3];
		ck_assert_int_eq(fi_sendmsg(ep, &m, FI_COMPLETION | FI_MORE), 0);
	}
	static uint64_t flags_of(int i) { return i == 3 ? (FI_SEND | FI_MSG) : (FI_RMA | FI_WRITE); }
	// Each held operation ends with exactly one FI_ECANCELED error entry,
	// and nothing follows; none of them ran.
	void expect_cancelled(fid_cq *cq, const char *when)
	{
		int seen[kOps] = {};
		for (int k = 0; k < kOps; k++) {
			fi_cq_data_entry e{};
			fi_cq_err_entry err{};
			const ssize_t n = wait_cq(cq, &e, &err);
			ck_assert_msg(n == -FI_EAVAIL, "%s: held operation %d of %d: expected an error entry, got %zd%s",
				      when, k + 1, kOps, n, n == 1 ? " (a success)" : "");
			int i = 0;
			while (i < kOps && err.op_context != &ctx[i])
				i++;
			ck_assert_msg(i < kOps, "%s: an error entry for an unknown context %p", when, err.op_context);
			ck_assert_msg(!seen[i]++, "%s: two entries for held operation %d", when, i);
			ck_assert_msg(err.err == FI_ECANCELED, "%s: held operation %d: err %d (%s)", when, i,
				      err.err, fi_strerror(err.err));
			ck_assert_msg(err.flags == flags_of(i), "%s: held operation %d: flags 0x%llx", when, i,
				      static_cast<unsigned long long>(err.flags));
		}
		expect_no_completion(cq, 300);
		for (size_t b = 0; b < remote.buf.size(); b++)
			ck_assert_msg(remote.buf[b] == 0, "%s: byte %zu was written", when, b);
	}
};

// Counters bound on the client: FI_WRITE and FI_SEND.
struct HeldCntrs {
	fid_cntr *wc, *sc;
	explicit HeldCntrs(Env &env) : wc(open_cntr(env)), sc(open_cntr(env)) {}
	~HeldCntrs()
	{
		fi_close(&wc->fid);
		fi_close(&sc->fid);
	}
	PairOptions options() const
	{
		PairOptions opt;
		opt.client_cntrs = {{wc, FI_WRITE}, {sc, FI_SEND}};
		return opt;
	}
	void expect_errors(uint64_t writes, uint64_t sends) const
	{
		ck_assert_uint_eq(fi_cntr_readerr(wc), writes);
		ck_assert_uint_eq(fi_cntr_read(wc), 0);
		ck_assert_uint_eq(fi_cntr_readerr(sc), sends);
		ck_assert_uint_eq(fi_cntr_read(sc), 0);
	}
};

void expect_shutdown_event(fid_eq *eq)
{
	uint32_t event = 0;
	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
	ck_assert_int_eq(wait_eq(eq, &event, buf, sizeof buf), static_cast<ssize_t>(sizeof(fi_eq_cm_entry)));
	ck_assert_uint_eq(event, FI_SHUTDOWN);
}

// Closes the client's endpoint only: its CQ stays to be read.
void close_client_ep(Pair &p)
{
	ck_assert_int_eq(fi_close(&p.client.ep->fid), 0);
	p.client.ep = nullptr;
}

// fi_shutdown cancels what FI_MORE held: one FI_ECANCELED entry and one
// counted error each, never a second one (neither from a later post nor
// from fi_close).
START_TEST(more_held_cancelled_by_shutdown)
{
	Env env;
	HeldCntrs cntrs(env);
	{
		Pair p(env, cntrs.options());
		HeldChain held(env);
		held.post(p.client.ep);
		expect_no_completion(p.client.cq, 100);
		ck_assert_int_eq(fi_shutdown(p.client.ep, 0), 0);
		held.expect_cancelled(p.client.cq, "after fi_shutdown");
		cntrs.expect_errors(3, 1);
		// A later operation is refused and reports nothing again.
		ck_assert_int_eq(fi_write(p.client.ep, held.local.buf.data(), 8, held.local.desc(), 0,
					  held.remote.addr(), held.remote.key(), nullptr), -FI_ENOTCONN);
		close_client_ep(p);
		expect_no_completion(p.client.cq, 300);
		cntrs.expect_errors(3, 1);
	}
}
END_TEST

// The peer goes away (its endpoint closes): FI_SHUTDOWN, and what FI_MORE
// held ends cancelled, once each.
START_TEST(more_held_cancelled_when_the_peer_goes)
{
	Env env;
	HeldCntrs cntrs(env);
	{
		Pair p(env, cntrs.options());
		HeldChain held(env);
		held.post(p.client.ep);
		close_side(p.server);
		expect_shutdown_event(p.client.eq);
		held.expect_cancelled(p.client.cq, "after the peer closed");
		cntrs.expect_errors(3, 1);
		ck_assert_int_eq(fi_write(p.client.ep, held.local.buf.data(), 8, held.local.desc(), 0,
					  held.remote.addr(), held.remote.key(), nullptr), -FI_ENOTCONN);
		close_client_ep(p);
		expect_no_completion(p.client.cq, 300);
		cntrs.expect_errors(3, 1);
	}
}
END_TEST

// A posted request fails (a bad key) while FI_MORE holds others: the failed
// one reports its error, the connection shuts down, and each held one ends
// cancelled, once, although both the failure's poller and the DISCONNECTED
// event that follows cancel what is held.
START_TEST(more_held_cancelled_when_a_request_fails)
{
	Env env;
	HeldCntrs cntrs(env);
	{
		Pair p(env, cntrs.options());
		HeldChain held(env);
		int bad;
		ck_assert_int_eq(fi_write(p.client.ep, held.local.buf.data(), 64, held.local.desc(), 0,
					  held.remote.addr(), held.remote.key() ^ 0x5500, &bad), 0);
		held.post(p.client.ep);
		fi_cq_err_entry err = expect_error(p.client.cq);
		ck_assert_ptr_eq(err.op_context, &bad);
		ck_assert_int_eq(err.err, FI_EACCES);
		held.expect_cancelled(p.client.cq, "after a failed write");
		expect_shutdown_event(p.client.eq);
		expect_no_completion(p.client.cq, 300);
		cntrs.expect_errors(4, 1);
	}
}
END_TEST

// fi_close discards what is outstanding, held or posted, with no
// completions (fi_endpoint(3): "Discarded operations will silently be
// dropped"): an application may free the contexts once fi_close returned,
// so no entry may name them later. Nothing runs, and the close does not
// wait for requests that were never posted.
START_TEST(more_held_discarded_by_close)
{
	Env env;
	HeldCntrs cntrs(env);
	{
		Pair p(env, cntrs.options());
		HeldChain held(env);
		held.post(p.client.ep);
		const auto start = std::chrono::steady_clock::now();
		close_client_ep(p);
		const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
					std::chrono::steady_clock::now() - start).count();
		ck_assert_msg(ms < 1000, "fi_close took %lld ms", static_cast<long long>(ms));
		expect_no_completion(p.client.cq, 300);
		cntrs.expect_errors(0, 0);
		for (size_t b = 0; b < held.remote.buf.size(); b++)
			ck_assert_msg(held.remote.buf[b] == 0, "byte %zu was written", b);
	}
}
END_TEST

namespace {

// A send queue of 16: its ring wraps every few dozen requests.
PairOptions small_queue()
{
	PairOptions opt;
	opt.tx_size = 16;
	return opt;
}

// An inject, retried while the queue is full: injects report nothing, so
// the client's CQ stays empty meanwhile.
template <class Post> void inject_retrying(Pair &p, Post post)
{
	ssize_t rc;
	const Deadline until(kTimeoutMs);
	while ((rc = post()) == -FI_EAGAIN && !until.expired()) {
		fi_cq_data_entry e;
		ck_assert_int_eq(fi_cq_read(p.client.cq, &e, 1), -FI_EAGAIN);
	}
	ck_assert_int_eq(rc, 0);
}

// fi_inject_write of v at addr, retried while the queue is full.
void inject_write_retrying(Pair &p, uint64_t v, uint64_t addr, uint64_t key)
{
	inject_retrying(p, [&] { return fi_inject_write(p.client.ep, &v, 8, 0, addr, key); });
}

// The next entry on cq: an inject's error (no context).
fi_cq_err_entry expect_inject_error(fid_cq *cq, uint64_t flags, int err)
{
	fi_cq_err_entry e = expect_error(cq);
	ck_assert_ptr_null(e.op_context);
	ck_assert_uint_eq(e.flags, flags);
	ck_assert_int_eq(e.err, err);
	return e;
}

} // namespace

// Injects alone, several laps of a small send queue: most go unsignaled
// with their ring slots left as earlier laps wrote them, and none ever
// completes (the CQ stays empty while they run). The data all arrives.
// Then a refused inject and two injects behind it: each ends with one
// error entry (no context, its own flags), the refused one FI_EACCES, the
// ones behind FI_ECANCELED, nothing more, and the connection shuts down.
START_TEST(unsignaled_inject_errors_reported_once)
{
	Env env;
	Pair p(env, small_queue());
	constexpr size_t kWords = 64;
	Region remote(env, kWords * 8, FI_REMOTE_WRITE | FI_REMOTE_READ);
	Region local(env, kWords * 8, FI_READ);
	constexpr uint64_t kInjects = 16 * 8 + 5;
	for (uint64_t i = 0; i < kInjects; i++)
		inject_write_retrying(p, 0xabc0000000000000ULL | i, remote.addr() + (i % kWords) * 8,
				      remote.key());
	int rctx;
	ck_assert_int_eq(fi_read(p.client.ep, local.buf.data(), kWords * 8, local.desc(), 0,
				 remote.addr(), remote.key(), &rctx), 0);
	expect_completion(p.client.cq, &rctx, FI_RMA | FI_READ);
	for (uint64_t k = 0; k < kWords; k++) {
		uint64_t last = k + ((kInjects - 1 - k) / kWords) * kWords, got;
		memcpy(&got, local.buf.data() + k * 8, 8);
		ck_assert_msg(got == (0xabc0000000000000ULL | last), "word %llu: %llx",
			      static_cast<unsigned long long>(k), static_cast<unsigned long long>(got));
	}
	const uint64_t v = 7;
	ck_assert_int_eq(fi_inject_write(p.client.ep, &v, 8, 0, remote.addr(), remote.key() ^ 0x5500), 0);
	ck_assert_int_eq(fi_inject(p.client.ep, &v, 8, 0), 0);
	ck_assert_int_eq(fi_inject_write(p.client.ep, &v, 8, 0, remote.addr() + 8, remote.key()), 0);
	const fi_cq_err_entry err = expect_inject_error(p.client.cq, FI_RMA | FI_WRITE, FI_EACCES);
	ck_assert_int_eq(err.prov_errno, IBV_WC_REM_ACCESS_ERR);
	expect_inject_error(p.client.cq, FI_SEND | FI_MSG, FI_ECANCELED);
	expect_inject_error(p.client.cq, FI_RMA | FI_WRITE, FI_ECANCELED);
	expect_no_completion(p.client.cq, 300);
	expect_shutdown_event(p.client.eq);
}
END_TEST

// Counted injects leave their slots unwritten as well (kTxBare): each
// success counts once on the endpoint's counter of its kind, a refused one
// counts as that counter's error and reports one entry without a context.
START_TEST(counted_injects_without_slots)
{
	Env env;
	HeldCntrs cntrs(env);
	PairOptions opt = cntrs.options();
	opt.tx_size = 16;
	Pair p(env, opt);
	constexpr uint64_t kWrites = 100, kSends = 40;
	Region remote(env, 64 * 8, FI_REMOTE_WRITE);
	Region dst(env, kSends * 8, FI_RECV);
	int rctx[kSends];
	for (uint64_t i = 0; i < kSends; i++)
		ck_assert_int_eq(fi_recv(p.server.ep, dst.buf.data() + 8 * i, 8, dst.desc(), 0, &rctx[i]), 0);
	for (uint64_t i = 0; i < kWrites; i++)
		inject_write_retrying(p, 0x5150000000000000ULL | i, remote.addr() + (i % 64) * 8,
				      remote.key());
	for (uint64_t i = 0; i < kSends; i++) {
		const uint64_t v = 0x5e0d000000000000ULL | i;
		inject_retrying(p, [&] { return fi_inject(p.client.ep, &v, 8, 0); });
	}
	const Deadline until(kTimeoutMs);
	while ((fi_cntr_read(cntrs.wc) < kWrites || fi_cntr_read(cntrs.sc) < kSends) && !until.expired())
		fi_cntr_wait(cntrs.wc, kWrites, 10);
	ck_assert_uint_eq(fi_cntr_read(cntrs.wc), kWrites);
	ck_assert_uint_eq(fi_cntr_read(cntrs.sc), kSends);
	ck_assert_uint_eq(fi_cntr_readerr(cntrs.wc), 0);
	ck_assert_uint_eq(fi_cntr_readerr(cntrs.sc), 0);
	for (uint64_t i = 0; i < kSends; i++) {
		expect_completion(p.server.cq, &rctx[i], FI_RECV | FI_MSG);
		uint64_t got;
		memcpy(&got, dst.buf.data() + 8 * i, 8);
		ck_assert_uint_eq(got, 0x5e0d000000000000ULL | i);
	}
	for (uint64_t k = 0; k < 64; k++) {
		const uint64_t last = k + ((kWrites - 1 - k) / 64) * 64;
		uint64_t got;
		memcpy(&got, remote.buf.data() + 8 * k, 8);
		ck_assert_uint_eq(got, 0x5150000000000000ULL | last);
	}
	const uint64_t v = 9;
	ck_assert_int_eq(fi_inject_write(p.client.ep, &v, 8, 0, remote.addr(), remote.key() ^ 0x5500), 0);
	expect_inject_error(p.client.cq, FI_RMA | FI_WRITE, FI_EACCES);
	ck_assert_uint_eq(fi_cntr_readerr(cntrs.wc), 1);
	ck_assert_uint_eq(fi_cntr_read(cntrs.wc), kWrites);
	expect_no_completion(p.client.cq, 300);
	expect_shutdown_event(p.client.eq);
}
END_TEST

// A delivery-complete completion walks back over the slots it retires,
// looking for the writes it proves; unsignaled injects leave their slots
// as an earlier lap wrote them, marks of shared read-backs included. At
// every offset in a small ring: a chain of three delivery-complete writes
// (FI_MORE, one read-back), then r injects, then one delivery-complete
// write: exactly four completions, each once, with its own context.
START_TEST(delivery_complete_after_unsignaled_injects)
{
	Env env;
	Pair p(env, small_queue());
	Region local(env, 64, FI_WRITE);
	Region remote(env, 4096, FI_REMOTE_WRITE | FI_REMOTE_READ);
	constexpr uint64_t kDc = FI_DELIVERY_COMPLETE | FI_COMPLETION;
	for (int r = 0; r < 40; r++) {
		int ctx[4];
		for (int i = 0; i < 3; i++) {
			OneRma one(local.buf.data(), 64, local.desc(), remote.addr() + 64 * i,
				   remote.key(), &ctx[i]);
			ck_assert_int_eq(fi_writemsg(p.client.ep, &one.msg, kDc | (i < 2 ? FI_MORE : 0)), 0);
		}
		for (int i = 0; i < 3; i++)
			expect_completion(p.client.cq, &ctx[i], FI_RMA | FI_WRITE);
		for (int i = 0; i < r; i++)
			inject_write_retrying(p, static_cast<uint64_t>(i), remote.addr() + 1024 + 8 * i,
					      remote.key());
		OneRma one(local.buf.data(), 64, local.desc(), remote.addr() + 256, remote.key(), &ctx[3]);
		ck_assert_int_eq(fi_writemsg(p.client.ep, &one.msg, kDc), 0);
		expect_completion(p.client.cq, &ctx[3], FI_RMA | FI_WRITE);
		expect_no_completion(p.client.cq, 0);
	}
	expect_no_completion(p.client.cq, 100);
}
END_TEST

Suite *rma_suite()
{
	Suite *s = suite_create("rma");
	TCase *tc = tcase_create("rma");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, write_read_sizes);
	tcase_add_test(tc, writev_readv_msg);
	tcase_add_test(tc, inject_write_and_writedata);
	tcase_add_test(tc, cq_data_wider_than_cq_data_size);
	tcase_add_test(tc, wrong_key_refused);
	tcase_add_test(tc, beyond_region_refused);
	tcase_add_test(tc, no_remote_write_access_refused);
	tcase_add_test(tc, closed_mr_key_stops_working);
	tcase_add_test(tc, several_remote_segments);
	tcase_add_test(tc, error_in_one_segment_reported_once);
	tcase_add_test(tc, delivery_complete_write);
	tcase_add_test(tc, delivery_complete_without_remote_read);
	tcase_add_test(tc, more_holds_the_doorbell);
	tcase_add_test(tc, more_holds_inline_injects);
	tcase_add_test(tc, inject_write_beyond_inline);
	tcase_add_test(tc, more_with_a_small_queue);
	tcase_add_test(tc, inline_then_bounce_injects);
	tcase_add_test(tc, cq_data_without_application_receives);
	tcase_add_test(tc, cq_data_refused_where_it_would_eat_a_receive);
	tcase_add_test(tc, more_held_cancelled_by_shutdown);
	tcase_add_test(tc, more_held_cancelled_when_the_peer_goes);
	tcase_add_test(tc, more_held_cancelled_when_a_request_fails);
	tcase_add_test(tc, more_held_discarded_by_close);
	tcase_add_test(tc, default_flags_changed_while_connected);
	tcase_add_test(tc, unsignaled_inject_errors_reported_once);
	tcase_add_test(tc, counted_injects_without_slots);
	tcase_add_test(tc, delivery_complete_after_unsignaled_injects);
	suite_add_tcase(s, tc);
	return s;
}
