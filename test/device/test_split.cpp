// RMA longer than one work request: split by vrma, one completion to the
// user. rxe carries 2 GiB per work request, so these tests lower the limit
// with FI_VRMA_MAX_WR_SIZE, read when the provider loads: check forks each
// test, and each child loads libfabric afresh.
#include <cstdlib>
#include <vector>

#include "harness.h"

using namespace vt;

namespace {

constexpr size_t kWr = 65536;
constexpr size_t kSplitMax = kWr * 64; // what an RMA-only endpoint then offers

fi_info *rma_hints(uint64_t tx_op_flags = 0)
{
	setenv("FI_VRMA_MAX_WR_SIZE", "65536", 1);
	fi_info *h = base_hints();
	h->caps = FI_RMA;
	h->mode &= ~FI_RX_CQ_DATA; // remote CQ data needs no receive then
	h->tx_attr->op_flags = tx_op_flags;
	return h;
}

struct SplitEnv : Env {
	explicit SplitEnv(fi_info *h) : Env(h)
	{
		fi_freeinfo(h);
		ck_assert_msg(info->ep_attr->max_msg_size == kSplitMax,
			      "max_msg_size %zu: FI_VRMA_MAX_WR_SIZE not applied (run with CK_FORK=yes)",
			      info->ep_attr->max_msg_size);
	}
};

} // namespace

START_TEST(split_write_and_read)
{
	SplitEnv env(rma_hints());
	Pair p(env);
	const size_t max = (size_t(1) << 20) + 3;
	Region local(env, max + 64, FI_WRITE | FI_READ);
	Region remote(env, max + 64, FI_REMOTE_READ | FI_REMOTE_WRITE);
	for (size_t len : {kWr, kWr + 1, size_t(1) << 20, max}) {
		local.fill(static_cast<uint8_t>(len >> 3));
		std::fill(remote.buf.begin(), remote.buf.end(), 0);
		int wctx, rctx;
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), len, local.desc(), 0, remote.addr(),
					  remote.key(), &wctx), 0);
		fi_cq_data_entry e = expect_completion(p.client.cq, &wctx, FI_RMA | FI_WRITE);
		ck_assert_uint_eq(e.len, len);
		ck_assert_msg(remote.check(static_cast<uint8_t>(len >> 3), len), "write of %zu", len);
		ck_assert_uint_eq(remote.buf[len], 0);
		std::fill(local.buf.begin(), local.buf.end(), 0);
		ck_assert_int_eq(fi_read(p.client.ep, local.buf.data(), len, local.desc(), 0, remote.addr(),
					 remote.key(), &rctx), 0);
		e = expect_completion(p.client.cq, &rctx, FI_RMA | FI_READ);
		ck_assert_uint_eq(e.len, len);
		ck_assert_msg(local.check(static_cast<uint8_t>(len >> 3), len), "read of %zu", len);
		// One completion per operation, not per work request.
		expect_no_completion(p.client.cq, 20);
	}
	// Beyond max_msg_size: refused.
	Region big(env, kSplitMax + 1, FI_WRITE);
	Region big_remote(env, kSplitMax + 1, FI_REMOTE_WRITE);
	ck_assert_int_eq(fi_write(p.client.ep, big.buf.data(), kSplitMax + 1, big.desc(), 0,
				  big_remote.addr(), big_remote.key(), nullptr), -FI_EINVAL);
	// Exactly max_msg_size: accepted, one completion.
	big.fill(3);
	int ctx;
	ck_assert_int_eq(fi_write(p.client.ep, big.buf.data(), kSplitMax, big.desc(), 0,
				  big_remote.addr(), big_remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	ck_assert(big_remote.check(3, kSplitMax));
}
END_TEST

START_TEST(split_across_local_and_remote_segments)
{
	SplitEnv env(rma_hints());
	Pair p(env);
	Region local(env, 400000, FI_WRITE | FI_READ);
	Region remote(env, 600000, FI_REMOTE_READ | FI_REMOTE_WRITE);
	local.fill(41);
	// Three local pieces onto two remote segments, each longer than a
	// work request: pieces are cut at both kinds of boundary.
	iovec iov[3] = {{local.buf.data(), 100000},
			{local.buf.data() + 100000, 7},
			{local.buf.data() + 100007, 200000}};
	void *desc[3] = {local.desc(), local.desc(), local.desc()};
	fi_rma_iov rma[2] = {{remote.addr() + 1000, 150000, remote.key()},
			     {remote.addr() + 400000, 150007, remote.key()}};
	fi_msg_rma msg = msg_rma(iov, desc, 3, rma, 2);
	int ctx;
	msg.context = &ctx;
	ck_assert_int_eq(fi_writemsg(p.client.ep, &msg, FI_COMPLETION), 0);
	fi_cq_data_entry e = expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	ck_assert_uint_eq(e.len, 300007);
	ck_assert(memcmp(remote.buf.data() + 1000, local.buf.data(), 150000) == 0);
	ck_assert(memcmp(remote.buf.data() + 400000, local.buf.data() + 150000, 150007) == 0);
	ck_assert_uint_eq(remote.buf[999], 0);
	ck_assert_uint_eq(remote.buf[151000], 0);
	// And read back the same way.
	std::fill(local.buf.begin(), local.buf.end(), 0);
	ck_assert_int_eq(fi_readmsg(p.client.ep, &msg, FI_COMPLETION), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_READ);
	ck_assert(memcmp(remote.buf.data() + 1000, local.buf.data(), 150000) == 0);
	ck_assert(memcmp(remote.buf.data() + 400000, local.buf.data() + 150000, 150007) == 0);
	expect_no_completion(p.client.cq, 20);
}
END_TEST

START_TEST(split_with_flags)
{
	SplitEnv env(rma_hints(FI_DELIVERY_COMPLETE));
	Pair p(env);
	const size_t len = 200000; // 3 full work requests and 3392 bytes
	Region local(env, 2 * len, FI_WRITE);
	Region remote(env, 2 * len, FI_REMOTE_READ | FI_REMOTE_WRITE);
	// Delivery-complete (default op_flags): the read-back follows the last
	// piece; the data is there when the completion is.
	local.fill(51);
	int ctx;
	ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), len, local.desc(), 0, remote.addr(),
				  remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	ck_assert(remote.check(51, len));
	// Remote CQ data: one entry at the target, after all of the data; its
	// length is that of the last work request.
	local.fill(52);
	ck_assert_int_eq(fi_writedata(p.client.ep, local.buf.data(), len, local.desc(), 0xABCD, 0,
				      remote.addr(), remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	fi_cq_data_entry e = expect_completion(p.server.cq, nullptr,
					       FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 0xABCD);
	ck_assert_uint_eq(e.len, len % kWr);
	ck_assert(remote.check(52, len));
	expect_no_completion(p.server.cq, 20);
	// FI_MORE: a split operation longer than the held-back chain goes out
	// with what was held before it; both complete.
	local.fill(53);
	int c1, c2;
	OneRma small(local.buf.data(), 64, local.desc(), remote.addr() + len, remote.key(), &c1);
	ck_assert_int_eq(fi_writemsg(p.client.ep, &small.msg, FI_MORE | FI_COMPLETION), 0);
	Region big(env, 40 * kWr, FI_WRITE);
	Region big_remote(env, 40 * kWr, FI_REMOTE_WRITE | FI_REMOTE_READ);
	big.fill(54);
	OneRma large(big.buf.data(), 40 * kWr, big.desc(), big_remote.addr(), big_remote.key(), &c2);
	ck_assert_int_eq(fi_writemsg(p.client.ep, &large.msg, FI_MORE | FI_COMPLETION), 0);
	expect_completion(p.client.cq, &c1, FI_RMA | FI_WRITE);
	expect_completion(p.client.cq, &c2, FI_RMA | FI_WRITE);
	ck_assert(big_remote.check(54, 40 * kWr));
	ck_assert(memcmp(remote.buf.data() + len, local.buf.data(), 64) == 0);
}
END_TEST

// A transmit queue shallower than the longest operation's work requests
// (issue 13 §3): max_msg_size is honoured whatever tx_attr->size was asked,
// over as many remote segments as rma_iov_limit, with the read-back of
// delivery complete and the event of remote CQ data on top.
START_TEST(split_longest_operation_on_small_tx_size)
{
	fi_info *h = rma_hints(FI_DELIVERY_COMPLETE);
	h->tx_attr->size = 8;
	SplitEnv env(h);
	Pair p(env);
	Region local(env, kSplitMax, FI_WRITE | FI_READ);
	Region remote(env, kSplitMax + 64, FI_REMOTE_READ | FI_REMOTE_WRITE);
	local.fill(61);
	int ctx;
	ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), kSplitMax, local.desc(), 0, remote.addr(),
				  remote.key(), &ctx), 0);
	fi_cq_data_entry e = expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	ck_assert_uint_eq(e.len, kSplitMax);
	ck_assert(remote.check(61, kSplitMax));
	ck_assert_uint_eq(remote.buf[kSplitMax], 0);
	// As many remote segments as allowed, each cut in work requests, and
	// remote CQ data.
	const size_t nseg = env.info->tx_attr->rma_iov_limit;
	ck_assert_uint_ge(nseg, 2);
	std::vector<fi_rma_iov> rma(nseg);
	const size_t each = kSplitMax / nseg;
	for (size_t i = 0; i < nseg; i++)
		rma[i] = {remote.addr() + i * each, i + 1 < nseg ? each : kSplitMax - i * each, remote.key()};
	std::fill(remote.buf.begin(), remote.buf.end(), 0);
	local.fill(62);
	iovec iov = {local.buf.data(), kSplitMax};
	void *desc = local.desc();
	fi_msg_rma msg = msg_rma(&iov, &desc, 1, rma.data(), nseg);
	msg.context = &ctx;
	msg.data = 0x5eed;
	ck_assert_int_eq(fi_writemsg(p.client.ep, &msg, FI_COMPLETION | FI_REMOTE_CQ_DATA), 0);
	e = expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	ck_assert_uint_eq(e.len, kSplitMax);
	e = expect_completion(p.server.cq, nullptr, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 0x5eed);
	ck_assert(remote.check(62, kSplitMax));
	// And all of it read back in one operation.
	std::fill(local.buf.begin(), local.buf.end(), 0);
	ck_assert_int_eq(fi_read(p.client.ep, local.buf.data(), kSplitMax, local.desc(), 0, remote.addr(),
				 remote.key(), &ctx), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_READ);
	ck_assert(local.check(62, kSplitMax));
	expect_no_completion(p.client.cq, 20);
}
END_TEST

START_TEST(messages_are_one_work_request)
{
	fi_info *h = rma_hints();
	h->caps = FI_MSG | FI_RMA;
	Env env(h);
	fi_freeinfo(h);
	// A receive takes one send: messages are never split, so endpoints
	// with FI_MSG offer one work request's worth.
	ck_assert_uint_eq(env.info->ep_attr->max_msg_size, kWr);
	h = rma_hints();
	h->caps = FI_MSG | FI_RMA;
	h->ep_attr->max_msg_size = kWr + 1;
	fi_info *info = nullptr;
	ck_assert_int_eq(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), -FI_ENODATA);
	fi_freeinfo(h);
}
END_TEST

// Every RMA call, each flag that applies to it, and lengths 0, 1, beyond
// the inline size, 4 KiB, beyond one work request and 1 MiB: data verified
// byte by byte, every completion checked (context, flags, length, data).
START_TEST(calls_flags_lengths_matrix)
{
	SplitEnv env(rma_hints());
	Pair p(env);
	const size_t inject_max = env.info->tx_attr->inject_size;
	const size_t max = size_t(1) << 20;
	Region local(env, max + 1, FI_WRITE | FI_READ);
	Region remote(env, max + 1, FI_REMOTE_WRITE | FI_REMOTE_READ);
	Region probe(env, 8, FI_READ);
	enum Call { Write, Writev, Writemsg, InjectWrite, Writedata, InjectWritedata, Read, Readv, Readmsg };
	struct Case {
		Call call;
		uint64_t flags; // for the *msg calls
	};
	const Case cases[] = {
		{Write, 0}, {Writev, 0}, {Writedata, 0}, {InjectWrite, 0}, {InjectWritedata, 0},
		{Read, 0}, {Readv, 0},
		{Writemsg, FI_COMPLETION}, {Writemsg, FI_COMPLETION | FI_DELIVERY_COMPLETE},
		{Writemsg, FI_COMPLETION | FI_FENCE}, {Writemsg, FI_COMPLETION | FI_MORE},
		{Writemsg, FI_COMPLETION | FI_INJECT}, {Writemsg, FI_COMPLETION | FI_REMOTE_CQ_DATA},
		{Writemsg, FI_COMPLETION | FI_INJECT_COMPLETE}, {Writemsg, FI_COMPLETION | FI_TRANSMIT_COMPLETE},
		{Writemsg, FI_COMPLETION | FI_DELIVERY_COMPLETE | FI_REMOTE_CQ_DATA | FI_FENCE},
		{Readmsg, FI_COMPLETION}, {Readmsg, FI_COMPLETION | FI_FENCE}, {Readmsg, FI_COMPLETION | FI_MORE},
	};
	uint8_t seed = 0;
	int ops = 0;
	// 300: beyond many devices' inline size (an inject then goes through a
	// bounce buffer); inject_max + 1: beyond any inject.
	for (size_t len : {size_t(0), size_t(1), size_t(300), size_t(4096), inject_max + 1, kWr + 1, max}) {
		for (const Case &c : cases) {
			const bool read = c.call == Read || c.call == Readv || c.call == Readmsg;
			const bool inject_call = c.call == InjectWrite || c.call == InjectWritedata;
			const bool inject = inject_call || (c.flags & FI_INJECT);
			const bool cq_data = c.call == Writedata || c.call == InjectWritedata ||
					     (c.flags & FI_REMOTE_CQ_DATA);
			if (inject && len > inject_max)
				continue; // -FI_EINVAL, tested elsewhere
			seed++;
			// Source filled, destination cleared, one sentinel byte after.
			Region &src = read ? remote : local;
			Region &dst = read ? local : remote;
			src.fill(seed);
			std::fill(dst.buf.begin(), dst.buf.end(), 0);
			dst.buf[len] = 0xEE;
			int ctx;
			const uint64_t data = 0x5000 + seed;
			iovec iov[2] = {{local.buf.data(), len / 2}, {local.buf.data() + len / 2, len - len / 2}};
			void *desc[2] = {local.desc(), local.desc()};
			fi_rma_iov rma{remote.addr(), len, remote.key()};
			fi_msg_rma msg = msg_rma(iov, desc, 2, &rma, 1);
			msg.context = &ctx;
			msg.data = data;
			ssize_t rc = -1;
			fid_ep *ep = p.client.ep;
			switch (c.call) {
			case Write:
				rc = fi_write(ep, local.buf.data(), len, local.desc(), 0, remote.addr(), remote.key(), &ctx);
				break;
			case Writev:
				rc = fi_writev(ep, iov, desc, 2, 0, remote.addr(), remote.key(), &ctx);
				break;
			case Writemsg:
				rc = fi_writemsg(ep, &msg, c.flags);
				break;
			case InjectWrite:
				rc = fi_inject_write(ep, local.buf.data(), len, 0, remote.addr(), remote.key());
				break;
			case Writedata:
				rc = fi_writedata(ep, local.buf.data(), len, local.desc(), data, 0, remote.addr(),
						  remote.key(), &ctx);
				break;
			case InjectWritedata:
				rc = fi_inject_writedata(ep, local.buf.data(), len, data, 0, remote.addr(), remote.key());
				break;
			case Read:
				rc = fi_read(ep, local.buf.data(), len, local.desc(), 0, remote.addr(), remote.key(), &ctx);
				break;
			case Readv:
				rc = fi_readv(ep, iov, desc, 2, 0, remote.addr(), remote.key(), &ctx);
				break;
			case Readmsg:
				rc = fi_readmsg(ep, &msg, c.flags);
				break;
			}
			ck_assert_msg(rc == 0, "call %d flags 0x%llx len %zu: %s", c.call,
				      static_cast<unsigned long long>(c.flags), len,
				      fi_strerror(static_cast<int>(-rc)));
			ops++;
			if (c.flags & FI_MORE) {
				// Held back until an operation without FI_MORE.
				int pctx;
				ck_assert_int_eq(fi_read(ep, probe.buf.data(), 1, probe.desc(), 0, remote.addr(),
							 remote.key(), &pctx), 0);
				expect_completion(p.client.cq, &ctx, FI_RMA | (read ? FI_READ : FI_WRITE));
				expect_completion(p.client.cq, &pctx, FI_RMA | FI_READ);
			} else if (inject_call) {
				// No completion: a read behind it (RC order) proves it landed.
				int pctx;
				ck_assert_int_eq(fi_read(ep, probe.buf.data(), 1, probe.desc(), 0, remote.addr(),
							 remote.key(), &pctx), 0);
				expect_completion(p.client.cq, &pctx, FI_RMA | FI_READ);
			} else {
				fi_cq_data_entry e = expect_completion(p.client.cq, &ctx, FI_RMA | (read ? FI_READ : FI_WRITE));
				ck_assert_uint_eq(e.len, len);
			}
			ck_assert_msg(dst.check(seed, len), "call %d flags 0x%llx len %zu: data differs", c.call,
				      static_cast<unsigned long long>(c.flags), len);
			ck_assert_msg(dst.buf[len] == 0xEE, "call %d len %zu: wrote past the end", c.call, len);
			if (cq_data) {
				fi_cq_data_entry e = expect_completion(p.server.cq, nullptr,
								       FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
				ck_assert_uint_eq(e.data, data);
				ck_assert_uint_eq(e.len, len <= kWr ? len : (len % kWr ? len % kWr : kWr));
			}
			expect_no_completion(p.client.cq, 0);
		}
	}
	// Nothing else reached either side.
	expect_no_completion(p.client.cq, 20);
	expect_no_completion(p.server.cq, 20);
	ck_assert_int_gt(ops, 100);
}
END_TEST

Suite *split_suite()
{
	Suite *s = suite_create("split");
	TCase *tc = tcase_create("split");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, split_write_and_read);
	tcase_add_test(tc, split_across_local_and_remote_segments);
	tcase_add_test(tc, split_with_flags);
	tcase_add_test(tc, split_longest_operation_on_small_tx_size);
	tcase_add_test(tc, messages_are_one_work_request);
	tcase_add_test(tc, calls_flags_lengths_matrix);
	suite_add_tcase(s, tc);
	return s;
}
