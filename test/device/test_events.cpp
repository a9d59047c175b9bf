// FI_RMA_EVENT: the target counts the peer's RMA operations, per endpoint
// (FI_REMOTE_WRITE / FI_REMOTE_READ counters) and per region (fi_mr_bind),
// without any call of its own; what getinfo offers; the refusals.
#include "harness.h"

using namespace vt;

namespace {

fi_info *event_hints()
{
	fi_info *h = base_hints();
	h->caps = FI_RMA | FI_RMA_EVENT;
	return h;
}

struct EventEnv : Env {
	explicit EventEnv(fi_info *h) : Env(h) { fi_freeinfo(h); }
};

// The counter reaches `value` (blocking wait) and stays there.
void expect_count(fid_cntr *c, uint64_t value)
{
	ck_assert_int_eq(fi_cntr_wait(c, value, kTimeoutMs), 0);
	std::this_thread::sleep_for(std::chrono::milliseconds(50));
	ck_assert_uint_eq(fi_cntr_read(c), value);
	ck_assert_uint_eq(fi_cntr_readerr(c), 0);
}

} // namespace

START_TEST(getinfo_offers_rma_event_when_asked)
{
	fi_info *h = event_hints();
	fi_info *info = get_info(h);
	ck_assert_uint_eq(info->caps & FI_RMA_EVENT, FI_RMA_EVENT);
	ck_assert_uint_eq(info->caps & (FI_MSG | FI_RMA_PMEM), 0);
	fi_freeinfo(info);
	// With messages (issue 13 §1: before, -FI_ENODATA): they arrive
	// through vrma's staging buffers.
	h->caps = FI_MSG | FI_RMA | FI_RMA_EVENT;
	info = get_info(h);
	ck_assert_uint_eq(info->caps & (FI_MSG | FI_RMA_EVENT), FI_MSG | FI_RMA_EVENT);
	ck_assert_uint_eq(info->caps & FI_RMA_PMEM, 0);
	ck_assert_uint_eq(info->mode & FI_RX_CQ_DATA, 0);
	fi_freeinfo(info);
	h->caps = FI_RMA;
	info = get_info(h);
	ck_assert_uint_eq(info->caps & FI_RMA_EVENT, 0);
	fi_freeinfo(info);
	fi_freeinfo(h);
}
END_TEST

START_TEST(target_counts_remote_operations)
{
	EventEnv env(event_hints());
	fid_cntr *ep_writes = open_cntr(env), *ep_reads = open_cntr(env);
	fid_cntr *a_writes = open_cntr(env), *a_reads = open_cntr(env);
	Region local(env, 1 << 16, FI_WRITE | FI_READ);
	Region a(env, 1 << 16, FI_REMOTE_WRITE | FI_REMOTE_READ);
	Region b(env, 1 << 16, FI_REMOTE_WRITE);
	ck_assert_int_eq(fi_mr_bind(a.mr, &a_writes->fid, FI_REMOTE_WRITE), 0);
	ck_assert_int_eq(fi_mr_bind(a.mr, &a_reads->fid, FI_REMOTE_READ), 0);
	ck_assert_int_eq(fi_mr_enable(a.mr), 0);
	// One counter per event and region; no other objects.
	ck_assert_int_eq(fi_mr_bind(a.mr, &a_reads->fid, FI_REMOTE_READ), -FI_EINVAL);
	ck_assert_int_eq(fi_mr_bind(b.mr, &a_reads->fid, FI_WRITE), -FI_EBADFLAGS);
	{
		PairOptions opt;
		opt.server_cntrs = {{ep_writes, FI_REMOTE_WRITE}, {ep_reads, FI_REMOTE_READ}};
		Pair p(env, opt);
		local.fill(61);
		std::vector<int> ctx(16);
		int k = 0;
		for (int i = 0; i < 5; i++, k++) {
			ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 4096, local.desc(), 0,
						  a.addr() + i * 4096, a.key(), &ctx[k]), 0);
			expect_completion(p.client.cq, &ctx[k], FI_RMA | FI_WRITE);
		}
		for (int i = 0; i < 3; i++) // injects count too
			ck_assert_int_eq(fi_inject_write(p.client.ep, local.buf.data(), 8, 0,
							 a.addr() + 30000 + i * 8, a.key()), 0);
		for (int i = 0; i < 2; i++, k++) {
			ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 100, local.desc(), 0,
						  b.addr(), b.key(), &ctx[k]), 0);
			expect_completion(p.client.cq, &ctx[k], FI_RMA | FI_WRITE);
		}
		for (int i = 0; i < 4; i++, k++) {
			ck_assert_int_eq(fi_read(p.client.ep, local.buf.data() + 40000, 1000, local.desc(), 0,
						 a.addr(), a.key(), &ctx[k]), 0);
			expect_completion(p.client.cq, &ctx[k], FI_RMA | FI_READ);
		}
		// One operation over both regions: one event, each region once.
		iovec iov{local.buf.data(), 200};
		void *desc = local.desc();
		fi_rma_iov rma[2] = {{a.addr() + 50000, 100, a.key()}, {b.addr() + 500, 100, b.key()}};
		fi_msg_rma msg = msg_rma(&iov, &desc, 1, rma, 2);
		msg.context = &ctx[k];
		ck_assert_int_eq(fi_writemsg(p.client.ep, &msg, FI_COMPLETION), 0);
		expect_completion(p.client.cq, &ctx[k], FI_RMA | FI_WRITE);
		// The target application never polled anything.
		expect_count(ep_writes, 5 + 3 + 2 + 1);
		expect_count(ep_reads, 4);
		expect_count(a_writes, 5 + 3 + 1);
		expect_count(a_reads, 4);
		ck_assert(a.check(61, 4096, 4 * 4096)); // the data landed too
		ck_assert(memcmp(b.buf.data() + 500, local.buf.data() + 100, 100) == 0);
		expect_no_completion(p.server.cq, 20);
	}
	// Regions hold their counters: the counters close after them.
	ck_assert_int_eq(fi_close(&a_writes->fid), -FI_EBUSY);
	ck_assert_int_eq(fi_close(&a.mr->fid), 0);
	a.mr = nullptr;
	for (fid_cntr *c : {ep_writes, ep_reads, a_writes, a_reads})
		ck_assert_int_eq(fi_close(&c->fid), 0);
}
END_TEST

START_TEST(remote_counters_need_rma_event)
{
	Env env; // FI_MSG | FI_RMA: the peer's operations are not observable
	fid_cntr *c = open_cntr(env);
	fi_info *info = fi_dupinfo(env.info);
	fid_ep *ep = nullptr;
	ck_assert_int_eq(fi_endpoint(env.domain, info, &ep, nullptr), 0);
	ck_assert_int_eq(fi_ep_bind(ep, &c->fid, FI_REMOTE_WRITE), -FI_EOPNOTSUPP);
	ck_assert_int_eq(fi_close(&ep->fid), 0);
	fi_freeinfo(info);
	ck_assert_int_eq(fi_close(&c->fid), 0);
}
END_TEST

Suite *events_suite()
{
	Suite *s = suite_create("events");
	TCase *tc = tcase_create("rma_event");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, getinfo_offers_rma_event_when_asked);
	tcase_add_test(tc, target_counts_remote_operations);
	tcase_add_test(tc, remote_counters_need_rma_event);
	suite_add_tcase(s, tc);
	return s;
}
