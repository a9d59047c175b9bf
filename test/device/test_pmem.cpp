// FI_RMA_PMEM and FI_COMMIT_COMPLETE: the target-assisted commit into a
// file-backed MAP_SHARED region and into anonymous memory, the declared
// direct write to pmem (read-back), what getinfo offers, and the refusals.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "abi_compat.h"

#include <rdma/fi_ext_vrma.h>

namespace abi = vrma::abi;

using namespace vt;

namespace {

fi_info *pmem_hints(uint64_t tx_op_flags = 0)
{
	fi_info *h = base_hints();
	h->caps = FI_RMA | FI_RMA_PMEM;
	h->tx_attr->op_flags = tx_op_flags;
	return h;
}

// Owns the hints only while Env is constructed (bases are built in order).
struct PmemHints {
	fi_info *hints;
	explicit PmemHints(uint64_t tx_op_flags) : hints(pmem_hints(tx_op_flags)) {}
};

struct PmemEnv : private PmemHints, Env {
	explicit PmemEnv(uint64_t tx_op_flags = 0) : PmemHints(tx_op_flags), Env(hints)
	{
		fi_freeinfo(hints);
		hints = nullptr;
	}
};

fi_vrma_commit_stats stats(Env &env) { return vrma_commit_stats(env.domain); }

int commit_method(fid_ep *ep)
{
	int method = -1;
	size_t len = sizeof method;
	ck_assert_int_eq(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_VRMA_OPT_COMMIT_METHOD, &method, &len), 0);
	ck_assert_uint_eq(len, sizeof method);
	return method;
}

// Posts with retries while the endpoint says -FI_EAGAIN (commits in flight
// or a full queue), reading nothing: vrma progresses by itself.
template <typename Post> void post_retrying(Post &&post)
{
	const Deadline deadline(kTimeoutMs);
	ssize_t rc;
	while ((rc = post()) == -FI_EAGAIN) {
		ck_assert_msg(!deadline.expired(), "still -FI_EAGAIN");
		std::this_thread::sleep_for(std::chrono::microseconds(100));
	}
	ck_assert_msg(rc == 0, "post: %s", fi_strerror(static_cast<int>(-rc)));
}

} // namespace

START_TEST(getinfo_offers_pmem_when_asked)
{
	fi_info *h = pmem_hints(FI_COMMIT_COMPLETE);
	fi_info *info = get_info(h);
	ck_assert_uint_eq(info->caps & FI_RMA_PMEM, FI_RMA_PMEM);
	ck_assert_uint_eq(info->caps & FI_MSG, 0);
	ck_assert_uint_eq(info->tx_attr->op_flags & FI_COMMIT_COMPLETE, FI_COMMIT_COMPLETE);
	// Remote CQ data needs no receive on these endpoints.
	ck_assert_uint_eq(info->mode & FI_RX_CQ_DATA, 0);
	// Commits complete when answered, not in posting order.
	ck_assert_uint_eq(info->tx_attr->comp_order & abi::kOrderStrict, 0);
	fi_freeinfo(info);
	// With messages (issue 13 §1: before, -FI_ENODATA): commit messages
	// and messages share vrma's staging buffers.
	h->caps = FI_MSG | FI_RMA | FI_RMA_PMEM;
	info = get_info(h);
	ck_assert_uint_eq(info->caps & (FI_MSG | FI_RMA_PMEM), FI_MSG | FI_RMA_PMEM);
	ck_assert_uint_eq(info->tx_attr->op_flags & FI_COMMIT_COMPLETE, FI_COMMIT_COMPLETE);
	fi_freeinfo(info);
	info = nullptr;
	// A default FI_COMMIT_COMPLETE without FI_RMA_PMEM: nothing to offer.
	h->caps = FI_RMA;
	ck_assert_int_eq(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), -FI_ENODATA);
	// Not asked for: not given (it costs a service thread).
	h->tx_attr->op_flags = 0;
	info = get_info(h);
	ck_assert_uint_eq(info->caps & FI_RMA_PMEM, 0);
	fi_freeinfo(info);
	fi_freeinfo(h);
}
END_TEST

START_TEST(commit_through_target_into_file)
{
	PmemEnv env;
	Pair p(env);
	ck_assert_int_eq(commit_method(p.client.ep), FI_VRMA_COMMIT_TARGET);
	ck_assert_int_eq(commit_method(p.server.ep), FI_VRMA_COMMIT_TARGET);
	const size_t max = size_t(1) << 20;
	Region local(env, max, FI_WRITE);
	FileMapping remote(env.domain, max, FI_REMOTE_WRITE);
	const fi_vrma_commit_stats before = stats(env);
	int n = 0;
	for (size_t len : {size_t(1), size_t(4096), size_t(100000), max}) {
		local.fill(static_cast<uint8_t>(len + 3));
		int ctx;
		OneRma one(local.buf.data(), len, local.desc(), remote.addr(), remote.key(), &ctx);
		ck_assert_int_eq(fi_writemsg(p.client.ep, &one.msg, FI_COMMIT_COMPLETE | FI_COMPLETION), 0);
		fi_cq_data_entry e = expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
		ck_assert_uint_eq(e.len, len);
		n++;
		// Committed: the target's service answered after msync.
		const fi_vrma_commit_stats now = stats(env);
		ck_assert_uint_eq(now.requests, before.requests + n);
		ck_assert_uint_eq(now.msync_calls, before.msync_calls + n);
		ck_assert_uint_eq(now.failures, before.failures);
		std::vector<uint8_t> got = remote.file_bytes(0, len);
		ck_assert_msg(memcmp(got.data(), local.buf.data(), len) == 0, "file differs at len %zu", len);
	}
	// Several remote segments: one request, one range each, one completion.
	local.fill(77);
	iovec iov{local.buf.data(), 3000};
	void *desc = local.desc();
	fi_rma_iov rma[3] = {{remote.addr() + 8192, 1000, remote.key()},
			     {remote.addr() + 65536, 1000, remote.key()},
			     {remote.addr() + 200000, 1000, remote.key()}};
	fi_msg_rma msg = msg_rma(&iov, &desc, 1, rma, 3);
	int ctx;
	msg.context = &ctx;
	const fi_vrma_commit_stats mid = stats(env);
	ck_assert_int_eq(fi_writemsg(p.client.ep, &msg, FI_COMMIT_COMPLETE | FI_COMPLETION), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	const fi_vrma_commit_stats after = stats(env);
	ck_assert_uint_eq(after.requests, mid.requests + 1);
	ck_assert_uint_eq(after.ranges, mid.ranges + 3);
	ck_assert_uint_eq(after.bytes, mid.bytes + 3000);
	for (int i = 0; i < 3; i++) {
		std::vector<uint8_t> got = remote.file_bytes(rma[i].addr - remote.addr(), 1000);
		ck_assert(memcmp(got.data(), local.buf.data() + i * 1000, 1000) == 0);
	}
	// The target application never read its CQ, and saw nothing there.
	expect_no_completion(p.server.cq);
}
END_TEST

// Regions registered with FI_RMA_PMEM (their backing found at
// registration): a commit into a file mapping is made durable with msync,
// one into anonymous memory (accepted, with a warning that it does not
// survive a crash) with a cache write-back; each completes once persisted,
// its bytes in place. An unknown flag, beside FI_RMA_PMEM or alone, is
// refused.
START_TEST(commit_into_pmem_regions)
{
	PmemEnv env;
	Pair p(env);
	Region local(env, 65536, FI_WRITE);
	FileMapping file(env.domain, 65536, FI_REMOTE_WRITE, FI_RMA_PMEM);
	Region anon(env, 65536, FI_REMOTE_WRITE, FI_RMA_PMEM);
	local.fill(41);
	int ctx;
	fi_vrma_commit_stats before = stats(env);
	OneRma to_file(local.buf.data(), 20000, local.desc(), file.addr(4096), file.key(), &ctx);
	ck_assert_int_eq(fi_writemsg(p.client.ep, &to_file.msg, FI_COMMIT_COMPLETE | FI_COMPLETION), 0);
	fi_cq_data_entry e = expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	ck_assert_uint_eq(e.len, 20000);
	fi_vrma_commit_stats now = stats(env);
	ck_assert_uint_eq(now.requests, before.requests + 1);
	ck_assert_uint_eq(now.msync_calls, before.msync_calls + 1);
	ck_assert_uint_eq(now.cache_flushes, before.cache_flushes);
	ck_assert_uint_eq(now.failures, before.failures);
	std::vector<uint8_t> got = file.file_bytes(4096, 20000);
	ck_assert_msg(memcmp(got.data(), local.buf.data(), 20000) == 0, "the file differs");

	local.fill(42);
	before = now;
	OneRma to_anon(local.buf.data(), 30000, local.desc(), anon.addr(), anon.key(), &ctx);
	ck_assert_int_eq(fi_writemsg(p.client.ep, &to_anon.msg, FI_COMMIT_COMPLETE | FI_COMPLETION), 0);
	e = expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	ck_assert_uint_eq(e.len, 30000);
	now = stats(env);
	ck_assert_uint_eq(now.requests, before.requests + 1);
	ck_assert_uint_eq(now.msync_calls, before.msync_calls);
	ck_assert_uint_eq(now.cache_flushes, before.cache_flushes + 1);
	ck_assert_uint_eq(now.failures, before.failures);
	ck_assert(anon.check(42, 30000));
	ck_assert_uint_eq(anon.buf[30000], 0);

	std::vector<uint8_t> buf(64);
	fid_mr *mr = nullptr;
	ck_assert_int_eq(fi_mr_reg(env.domain, buf.data(), buf.size(), FI_REMOTE_WRITE, 0, 0, FI_RMA_PMEM | FI_FENCE,
				   &mr, nullptr),
			 -FI_EBADFLAGS);
	ck_assert_int_eq(fi_mr_reg(env.domain, buf.data(), buf.size(), FI_REMOTE_WRITE, 0, 0, FI_MULTI_RECV, &mr,
				   nullptr),
			 -FI_EBADFLAGS);
	ck_assert_ptr_null(mr);
	expect_no_completion(p.server.cq);
	expect_no_completion(p.client.cq, 50);
}
END_TEST

START_TEST(commit_many_in_flight_anonymous)
{
	// Default op_flags: every write is committed; more than the 64 commits
	// an endpoint keeps in flight, into ordinary (cache-flushed) memory.
	PmemEnv env(FI_COMMIT_COMPLETE);
	fid_cntr *cntr = open_cntr(env);
	PairOptions opt;
	opt.client_cntrs = {{cntr, FI_WRITE}};
	Region local(env, 200 * 64, FI_WRITE);
	Region remote(env, 200 * 64, FI_REMOTE_WRITE);
	local.fill(9);
	{
		Pair p(env, opt);
		const fi_vrma_commit_stats before = stats(env);
		std::vector<int> ctx(200);
		for (int i = 0; i < 200; i++)
			post_retrying([&] {
				return fi_write(p.client.ep, local.buf.data() + i * 64, 64, local.desc(), 0,
						remote.addr() + i * 64, remote.key(), &ctx[i]);
			});
		ck_assert_int_eq(fi_cntr_wait(cntr, 200, kTimeoutMs), 0);
		ck_assert_uint_eq(fi_cntr_readerr(cntr), 0);
		// Every context exactly once, in order.
		for (int i = 0; i < 200; i++)
			expect_completion(p.client.cq, &ctx[i], FI_RMA | FI_WRITE);
		expect_no_completion(p.client.cq, 50);
		ck_assert(remote.check(9, 200 * 64));
		const fi_vrma_commit_stats after = stats(env);
		ck_assert_uint_eq(after.requests, before.requests + 200);
		ck_assert_uint_eq(after.cache_flushes, before.cache_flushes + 200);
		ck_assert_uint_eq(after.msync_calls, before.msync_calls);
		ck_assert_ptr_nonnull(after.cache_flush);
	}
	ck_assert_int_eq(fi_close(&cntr->fid), 0);
}
END_TEST

START_TEST(commit_with_cq_data_and_fence)
{
	PmemEnv env;
	Pair p(env);
	Region local(env, 4096, FI_WRITE | FI_READ);
	Region remote(env, 4096, FI_REMOTE_WRITE | FI_REMOTE_READ);
	local.fill(21);
	int ctx;
	OneRma one(local.buf.data(), 512, local.desc(), remote.addr(), remote.key(), &ctx);
	one.msg.data = 0xC0FFEE;
	ck_assert_int_eq(fi_writemsg(p.client.ep, &one.msg,
				     FI_COMMIT_COMPLETE | FI_COMPLETION | FI_REMOTE_CQ_DATA), 0);
	expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
	// The target hears of the data though its receive queue is vrma's.
	fi_cq_data_entry e = expect_completion(p.server.cq, nullptr,
					       FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
	ck_assert_uint_eq(e.data, 0xC0FFEE);
	ck_assert_uint_eq(e.len, 512);
	ck_assert(remote.check(21, 512));
	// A fence waits for commits in flight: the fenced read sees the
	// committed bytes.
	local.fill(22);
	int wctx, rctx;
	OneRma w(local.buf.data(), 1024, local.desc(), remote.addr(), remote.key(), &wctx);
	ck_assert_int_eq(fi_writemsg(p.client.ep, &w.msg, FI_COMMIT_COMPLETE | FI_COMPLETION), 0);
	std::vector<uint8_t> back(1024);
	fid_mr *back_mr;
	ck_assert_int_eq(fi_mr_reg(env.domain, back.data(), back.size(), FI_READ, 0, 0, 0, &back_mr, nullptr), 0);
	OneRma r(back.data(), 1024, fi_mr_desc(back_mr), remote.addr(), remote.key(), &rctx);
	post_retrying([&] { return fi_readmsg(p.client.ep, &r.msg, FI_FENCE | FI_COMPLETION); });
	expect_completion(p.client.cq, &wctx, FI_RMA | FI_WRITE);
	expect_completion(p.client.cq, &rctx, FI_RMA | FI_READ);
	ck_assert(memcmp(back.data(), local.buf.data(), back.size()) == 0);
	ck_assert_int_eq(fi_close(&back_mr->fid), 0);
}
END_TEST

START_TEST(commit_by_read_back_when_declared)
{
	PmemEnv env;
	fi_vrma_domain_ops *ops = vrma_domain_ops(env.domain);
	ck_assert_int_eq(ops->set_direct_write_to_pmem(env.domain, 1), 0);
	Pair p(env);
	ck_assert_int_eq(commit_method(p.client.ep), FI_VRMA_COMMIT_DIRECT_WRITE);
	Region local(env, 65536, FI_WRITE);
	Region remote(env, 65536, FI_REMOTE_WRITE | FI_REMOTE_READ);
	const fi_vrma_commit_stats before = stats(env);
	for (size_t len : {size_t(1), size_t(8), size_t(65536)}) {
		local.fill(static_cast<uint8_t>(len + 5));
		int ctx;
		OneRma one(local.buf.data(), len, local.desc(), remote.addr(), remote.key(), &ctx);
		ck_assert_int_eq(fi_writemsg(p.client.ep, &one.msg, FI_COMMIT_COMPLETE | FI_COMPLETION), 0);
		expect_completion(p.client.cq, &ctx, FI_RMA | FI_WRITE);
		ck_assert(remote.check(static_cast<uint8_t>(len + 5), len));
	}
	// No commit message went to the target.
	ck_assert_uint_eq(stats(env).requests, before.requests);
	// The read-back needs FI_REMOTE_READ on the target region.
	Region no_read(env, 64, FI_REMOTE_WRITE);
	int ctx;
	OneRma one(local.buf.data(), 64, local.desc(), no_read.addr(), no_read.key(), &ctx);
	ck_assert_int_eq(fi_writemsg(p.client.ep, &one.msg, FI_COMMIT_COMPLETE | FI_COMPLETION), 0);
	fi_cq_err_entry err = expect_error(p.client.cq);
	ck_assert_ptr_eq(err.op_context, &ctx);
	ck_assert_int_eq(err.err, FI_EACCES);
	ck_assert_int_eq(ops->set_direct_write_to_pmem(env.domain, 0), 0);
}
END_TEST

START_TEST(commit_refused_without_pmem)
{
	Env env; // FI_MSG | FI_RMA endpoints: no FI_RMA_PMEM
	Pair p(env);
	Region local(env, 64, FI_WRITE);
	Region remote(env, 64, FI_REMOTE_WRITE);
	int ctx;
	OneRma one(local.buf.data(), 64, local.desc(), remote.addr(), remote.key(), &ctx);
	ck_assert_int_eq(fi_writemsg(p.client.ep, &one.msg, FI_COMMIT_COMPLETE), -FI_EBADFLAGS);
	ck_assert_int_eq(commit_method(p.client.ep), FI_VRMA_COMMIT_NONE);
	expect_no_completion(p.client.cq, 50);
	ck_assert_uint_eq(remote.buf[0], 0);
	// Unknown ops are refused, not crashed on.
	void *ops = nullptr;
	ck_assert_int_eq(fi_open_ops(&env.domain->fid, "no_such_ops", 0, &ops, nullptr), -FI_ENOSYS);
	// Before connecting there is no method yet.
	Side lone = open_client(env, static_cast<const sockaddr *>(env.info->src_addr));
	int method;
	size_t len = sizeof method;
	ck_assert_int_eq(fi_getopt(&lone.ep->fid, FI_OPT_ENDPOINT, FI_VRMA_OPT_COMMIT_METHOD, &method, &len),
			 -FI_EOPBADSTATE);
	close_side(lone);
}
END_TEST

// Collects one entry per context of `ctx` (success or error) within 30 s;
// returns the error entries.
std::vector<fi_cq_err_entry> reap_once(fid_cq *cq, std::vector<int> &ctx)
{
	const size_t count = ctx.size();
	std::vector<fi_cq_err_entry> errors;
	std::vector<int> seen(count, 0);
	size_t done = 0;
	const Deadline deadline(30000);
	while (done < count) {
		ck_assert_msg(!deadline.expired(), "%zu of %zu operations reported", done, count);
		fi_cq_data_entry e{};
		fi_cq_err_entry err{};
		ssize_t n = wait_cq(cq, &e, &err, 1000);
		if (n == -FI_EAGAIN)
			continue;
		void *op = n == 1 ? e.op_context : err.op_context;
		ck_assert_msg(n == 1 || n == -FI_EAVAIL, "fi_cq_sread: %zd", n);
		if (n == -FI_EAVAIL) {
			ck_assert_int_ne(err.err, 0);
			errors.push_back(err);
		}
		auto it = std::find_if(ctx.begin(), ctx.end(), [&](int &c) { return &c == op; });
		ck_assert_msg(it != ctx.end(), "unknown context %p", op);
		ck_assert_int_eq(seen[it - ctx.begin()]++, 0);
		done++;
	}
	expect_no_completion(cq, 100);
	return errors;
}

void expect_shutdown(fid_eq *eq)
{
	uint32_t event;
	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
	ck_assert_int_eq(wait_eq(eq, &event, buf, sizeof buf), static_cast<ssize_t>(sizeof(fi_eq_cm_entry)));
	ck_assert_uint_eq(event, FI_SHUTDOWN);
}

START_TEST(commits_end_once_when_the_target_goes_away)
{
	// Commits in flight when the target endpoint closes: every operation
	// is reported exactly once (answered, or an error), none waits
	// forever, and the initiator sees FI_SHUTDOWN.
	PmemEnv env;
	Pair p(env);
	const size_t each = 1024 * 1024, count = 64;
	Region local(env, each, FI_WRITE);
	Region remote(env, each * count, FI_REMOTE_WRITE);
	local.fill(31);
	std::vector<int> ctx(count);
	for (size_t i = 0; i < count; i++) {
		OneRma one(local.buf.data(), each, local.desc(), remote.addr() + i * each, remote.key(), &ctx[i]);
		post_retrying([&] {
			return fi_writemsg(p.client.ep, &one.msg, FI_COMMIT_COMPLETE | FI_COMPLETION);
		});
	}
	close_side(p.server);
	reap_once(p.client.cq, ctx);
	expect_shutdown(p.client.eq);
}
END_TEST

START_TEST(commits_end_once_when_the_connection_fails)
{
	// A bad write among commits kills the connection: it fails with
	// FI_EACCES, every other operation is reported once (answered,
	// flushed, or cancelled while waiting for its answer).
	PmemEnv env;
	Pair p(env);
	const size_t each = 64 * 1024, count = 40;
	Region local(env, each, FI_WRITE);
	Region remote(env, each * count, FI_REMOTE_WRITE);
	local.fill(33);
	std::vector<int> ctx(count);
	for (size_t i = 0; i < count; i++) {
		const bool bad = i == count / 2;
		OneRma one(local.buf.data(), each, local.desc(), remote.addr() + i * each,
			   bad ? remote.key() ^ 0xffff : remote.key(), &ctx[i]);
		post_retrying([&] {
			return fi_writemsg(p.client.ep, &one.msg, (bad ? 0 : FI_COMMIT_COMPLETE) | FI_COMPLETION);
		});
	}
	std::vector<fi_cq_err_entry> errors = reap_once(p.client.cq, ctx);
	ck_assert_uint_ge(errors.size(), 1);
	auto bad = std::find_if(errors.begin(), errors.end(),
				[&](const fi_cq_err_entry &e) { return e.op_context == &ctx[count / 2]; });
	ck_assert_msg(bad != errors.end(), "the bad write reported no error");
	ck_assert_int_eq(bad->err, FI_EACCES);
	for (const fi_cq_err_entry &e : errors)
		ck_assert_msg(e.err == FI_EACCES || e.err == FI_ECANCELED, "err %d", e.err);
	expect_shutdown(p.client.eq);
}
END_TEST

Suite *pmem_suite()
{
	Suite *s = suite_create("pmem");
	TCase *tc = tcase_create("commit");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, getinfo_offers_pmem_when_asked);
	tcase_add_test(tc, commit_through_target_into_file);
	tcase_add_test(tc, commit_into_pmem_regions);
	tcase_add_test(tc, commit_many_in_flight_anonymous);
	tcase_add_test(tc, commit_with_cq_data_and_fence);
	tcase_add_test(tc, commit_by_read_back_when_declared);
	tcase_add_test(tc, commit_refused_without_pmem);
	tcase_add_test(tc, commits_end_once_when_the_target_goes_away);
	tcase_add_test(tc, commits_end_once_when_the_connection_fails);
	suite_add_tcase(s, tc);
	return s;
}
