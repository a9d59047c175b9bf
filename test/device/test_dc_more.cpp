// FI_DELIVERY_COMPLETE writes chained with FI_MORE (issue 13 §5): one
// zero-length read-back proves the whole chain. Each test checks the data at
// the target, one completion per write with its context, the counters, and
// how many read-backs went out (fi_vrma_rma_stats).
#include "harness.h"

#include <rdma/fi_ext_vrma.h>

using namespace vt;

namespace {

constexpr uint64_t kDc = FI_DELIVERY_COMPLETE | FI_COMPLETION;

uint64_t read_backs(Env &env)
{
	fi_vrma_domain_ops *d = vrma_domain_ops(env.domain);
	ck_assert_uint_ge(d->size, offsetof(fi_vrma_domain_ops, rma_stats) + sizeof d->rma_stats);
	fi_vrma_rma_stats s{};
	ck_assert_int_eq(d->rma_stats(env.domain, &s), 0);
	return s.read_backs;
}

// A client with a write counter, local and remote regions of `slots`
// 64-byte slots; write i sends slot i filled with seed i.
struct CntrOwner {
	fid_cntr *c;
	~CntrOwner() { fi_close(&c->fid); }
};

struct DcChain {
	Env &env;
	CntrOwner owner; // closed after the pair that binds it
	fid_cntr *wcntr;
	Pair p;
	static constexpr size_t kSlot = 64;
	size_t slots;
	Region local, remote;
	std::vector<int> ctx;

	static PairOptions options(fid_cntr *c, uint64_t bind_flags, size_t tx_size)
	{
		PairOptions opt;
		opt.client_cntrs = {{c, FI_WRITE}};
		opt.bind_flags = bind_flags;
		opt.tx_size = tx_size;
		return opt;
	}
	DcChain(Env &e, size_t n, uint64_t bind_flags = 0, size_t tx_size = 0)
		: env(e), owner{open_cntr(e)}, wcntr(owner.c), p(e, options(wcntr, bind_flags, tx_size)), slots(n),
		  local(e, n * kSlot, FI_WRITE | FI_READ | FI_SEND),
		  remote(e, n * kSlot, FI_REMOTE_WRITE | FI_REMOTE_READ), ctx(n)
	{
		for (size_t i = 0; i < n; i++)
			std::fill_n(local.buf.begin() + i * kSlot, kSlot, static_cast<uint8_t>(i + 1));
		std::fill(remote.buf.begin(), remote.buf.end(), 0);
	}
	ssize_t write(size_t i, uint64_t flags, uint64_t key_xor = 0)
	{
		OneRma one(local.buf.data() + i * kSlot, kSlot, local.desc(), remote.addr() + i * kSlot,
			   remote.key() ^ key_xor, &ctx[i]);
		return fi_writemsg(p.client.ep, &one.msg, flags);
	}
	bool written(size_t i) const
	{
		for (size_t b = 0; b < kSlot; b++)
			if (remote.buf[i * kSlot + b] != static_cast<uint8_t>(i + 1))
				return false;
		return true;
	}
	bool untouched(size_t i) const
	{
		for (size_t b = 0; b < kSlot; b++)
			if (remote.buf[i * kSlot + b] != 0)
				return false;
		return true;
	}
	// Write i's completion, next on the CQ; its data is in place then.
	void expect_written(size_t i)
	{
		expect_completion(p.client.cq, &ctx[i], FI_RMA | FI_WRITE);
		ck_assert_msg(written(i), "write %zu completed before its data was in place", i);
	}
	void expect_count(uint64_t ok, uint64_t err)
	{
		const Deadline deadline(kTimeoutMs);
		while (fi_cntr_read(wcntr) < ok && !deadline.expired())
			fi_cntr_wait(wcntr, ok, 100);
		ck_assert_uint_eq(fi_cntr_read(wcntr), ok);
		ck_assert_uint_eq(fi_cntr_readerr(wcntr), err);
	}
};

// Writes first .. first + n - 1, all but the last with FI_MORE.
void run_chain(DcChain &c, size_t first, size_t n)
{
	for (size_t i = first; i < first + n; i++)
		ck_assert_int_eq(c.write(i, kDc | (i + 1 < first + n ? FI_MORE : 0)), 0);
}

} // namespace

// Chains of 1, 2, several and the longest one read proves (the signal
// period, 16 for a default queue): one read-back each, one completion per
// write in order, data in place at each completion, the counter exact.
START_TEST(dc_more_chain_shares_one_read_back)
{
	Env env;
	const size_t lens[] = {1, 2, 5, 16};
	size_t total = 0;
	for (size_t n : lens)
		total += n;
	DcChain c(env, total);
	size_t first = 0;
	for (size_t n : lens) {
		const uint64_t before = read_backs(env);
		run_chain(c, first, n);
		for (size_t i = first; i < first + n; i++)
			c.expect_written(i);
		ck_assert_msg(read_backs(env) - before == 1, "a chain of %zu: %llu read-backs", n,
			      static_cast<unsigned long long>(read_backs(env) - before));
		first += n;
		c.expect_count(first, 0);
	}
	expect_no_completion(c.p.client.cq, 100);
}
END_TEST

// Longer than one read may prove: a read-back per signal period (16 writes
// with a default queue), never one per write; completions read in batches
// (fi_cq_read returns the successes a read-back queued).
START_TEST(dc_more_chain_beyond_the_cap)
{
	Env env;
	constexpr size_t kN = 40;
	DcChain c(env, kN);
	const uint64_t before = read_backs(env);
	run_chain(c, 0, kN);
	size_t got = 0;
	const Deadline deadline(kTimeoutMs);
	while (got < kN) {
		fi_cq_data_entry e[16];
		const ssize_t n = fi_cq_read(c.p.client.cq, e, 16);
		if (n == -FI_EAGAIN) {
			ck_assert_msg(!deadline.expired(), "%zu of %zu completions", got, kN);
			continue;
		}
		ck_assert_int_gt(n, 0);
		for (ssize_t k = 0; k < n; k++, got++) {
			ck_assert_ptr_eq(e[k].op_context, &c.ctx[got]);
			ck_assert_uint_eq(e[k].flags, FI_RMA | FI_WRITE);
			ck_assert_msg(c.written(got), "write %zu completed before its data", got);
		}
	}
	const uint64_t reads = read_backs(env) - before;
	ck_assert_msg(reads >= 2 && reads <= 3, "40 writes: %llu read-backs",
		      static_cast<unsigned long long>(reads));
	c.expect_count(kN, 0);
	expect_no_completion(c.p.client.cq, 100);
}
END_TEST

// Another operation in the middle of a chain closes it: the writes before it
// get their read first, the writes after it one of their own. A plain
// write, a read and a send, each with FI_MORE.
START_TEST(dc_more_chain_interleaved)
{
	Env env;
	for (int kind = 0; kind < 3; kind++) {
		DcChain c(env, 6);
		Region dst(env, 64, FI_RECV);
		int rctx;
		if (kind == 2)
			ck_assert_int_eq(fi_recv(c.p.server.ep, dst.buf.data(), 64, dst.desc(), 0, &rctx), 0);
		Region rbuf(env, 64, FI_READ);
		// Slot 5 of the remote region holds what the read fetches.
		std::fill_n(c.remote.buf.begin() + 5 * 64, 64, uint8_t(99));
		const uint64_t before = read_backs(env);
		ck_assert_int_eq(c.write(0, kDc | FI_MORE), 0);
		ck_assert_int_eq(c.write(1, kDc | FI_MORE), 0);
		int mctx;
		if (kind == 0) {
			OneRma one(c.local.buf.data() + 2 * 64, 64, c.local.desc(), c.remote.addr() + 2 * 64,
				   c.remote.key(), &mctx);
			ck_assert_int_eq(fi_writemsg(c.p.client.ep, &one.msg, FI_COMPLETION | FI_MORE), 0);
		} else if (kind == 1) {
			OneRma one(rbuf.buf.data(), 64, rbuf.desc(), c.remote.addr() + 5 * 64, c.remote.key(),
				   &mctx);
			ck_assert_int_eq(fi_readmsg(c.p.client.ep, &one.msg, FI_COMPLETION | FI_MORE), 0);
		} else {
			iovec iov{c.local.buf.data() + 2 * 64, 64};
			void *desc = c.local.desc();
			fi_msg m{};
			m.msg_iov = &iov;
			m.desc = &desc;
			m.iov_count = 1;
			m.context = &mctx;
			ck_assert_int_eq(fi_sendmsg(c.p.client.ep, &m, FI_COMPLETION | FI_MORE), 0);
		}
		ck_assert_int_eq(c.write(3, kDc | FI_MORE), 0);
		ck_assert_int_eq(c.write(4, kDc), 0);
		c.expect_written(0);
		c.expect_written(1);
		const uint64_t mflags = kind == 0 ? FI_RMA | FI_WRITE : kind == 1 ? FI_RMA | FI_READ
										 : FI_SEND | FI_MSG;
		expect_completion(c.p.client.cq, &mctx, mflags);
		c.expect_written(3);
		c.expect_written(4);
		ck_assert_msg(read_backs(env) - before == 2, "kind %d: %llu read-backs", kind,
			      static_cast<unsigned long long>(read_backs(env) - before));
		if (kind == 0)
			ck_assert(c.written(2));
		if (kind == 1)
			for (uint8_t b : rbuf.buf)
				ck_assert_uint_eq(b, 99);
		if (kind == 2) {
			expect_completion(c.p.server.cq, &rctx, FI_RECV | FI_MSG);
			ck_assert(memcmp(dst.buf.data(), c.local.buf.data() + 2 * 64, 64) == 0);
		}
		c.expect_count(kind == 0 ? 5 : 4, 0);
		expect_no_completion(c.p.client.cq, 100);
	}
}
END_TEST

// FI_SELECTIVE_COMPLETION: writes without FI_COMPLETION in a shared chain
// are counted, with no entry; the one that asks gets its entry.
START_TEST(dc_more_chain_selective)
{
	Env env;
	DcChain c(env, 4, FI_SELECTIVE_COMPLETION);
	const uint64_t before = read_backs(env);
	ck_assert_int_eq(c.write(0, FI_DELIVERY_COMPLETE | FI_MORE), 0);
	ck_assert_int_eq(c.write(1, kDc | FI_MORE), 0);
	ck_assert_int_eq(c.write(2, FI_DELIVERY_COMPLETE | FI_MORE), 0);
	ck_assert_int_eq(c.write(3, FI_DELIVERY_COMPLETE), 0);
	c.expect_written(1);
	c.expect_count(4, 0);
	for (size_t i = 0; i < 4; i++)
		ck_assert(c.written(i));
	ck_assert_uint_eq(read_backs(env) - before, 1);
	expect_no_completion(c.p.client.cq, 200);
}
END_TEST

// A small send queue (8: a signal period of 4): long chains, retried on
// -FI_EAGAIN, never stall and complete each write once, in order.
START_TEST(dc_more_small_queue)
{
	Env env;
	constexpr size_t kN = 60;
	DcChain c(env, kN, 0, 8);
	size_t done = 0;
	auto reap = [&] {
		fi_cq_data_entry e[8];
		ssize_t n;
		while ((n = fi_cq_read(c.p.client.cq, e, 8)) > 0)
			for (ssize_t k = 0; k < n; k++, done++) {
				ck_assert_ptr_eq(e[k].op_context, &c.ctx[done]);
				ck_assert(c.written(done));
			}
		ck_assert_int_eq(n, -FI_EAGAIN);
	};
	const uint64_t before = read_backs(env);
	for (size_t i = 0; i < kN; i++) {
		const uint64_t flags = kDc | (i % 20 != 19 ? FI_MORE : 0);
		ssize_t rc;
		const Deadline deadline(kTimeoutMs);
		while ((rc = c.write(i, flags)) == -FI_EAGAIN) {
			ck_assert_msg(!deadline.expired(), "send queue stuck at write %zu", i);
			reap();
		}
		ck_assert_int_eq(rc, 0);
	}
	const Deadline deadline(kTimeoutMs);
	while (done < kN) {
		ck_assert_msg(!deadline.expired(), "%zu of %zu completions", done, kN);
		reap();
	}
	ck_assert_uint_lt(read_backs(env) - before, kN / 2);
	c.expect_count(kN, 0);
}
END_TEST

// A write of the chain fails (a bad key): it reports its own error, the
// deferred write before it is unproven and fails, those after it flush;
// each write ends in error exactly once, counted once.
START_TEST(dc_more_chain_write_fails)
{
	Env env;
	DcChain c(env, 4);
	ck_assert_int_eq(c.write(0, kDc | FI_MORE), 0);
	ck_assert_int_eq(c.write(1, kDc | FI_MORE, 0x5500), 0);
	ck_assert_int_eq(c.write(2, kDc | FI_MORE), 0);
	ck_assert_int_eq(c.write(3, kDc), 0);
	int seen[4] = {};
	for (int k = 0; k < 4; k++) {
		fi_cq_err_entry err = expect_error(c.p.client.cq);
		int i = 0;
		while (i < 4 && err.op_context != &c.ctx[i])
			i++;
		ck_assert_msg(i < 4, "an error for an unknown context");
		ck_assert_msg(!seen[i]++, "two entries for write %d", i);
		ck_assert_uint_eq(err.flags, FI_RMA | FI_WRITE);
		if (i == 1)
			ck_assert_int_eq(err.err, FI_EACCES);
		if (i >= 2)
			ck_assert_int_eq(err.err, FI_ECANCELED);
		ck_assert(c.untouched(1));
	}
	c.expect_count(0, 4);
	expect_no_completion(c.p.client.cq, 300);
	c.expect_count(0, 4);
}
END_TEST

// The connection ends while deferred writes wait for their read: each ends
// once, FI_ECANCELED, counted once, none ran (fi_shutdown; the peer going).
START_TEST(dc_more_chain_held_at_shutdown)
{
	Env env;
	for (int how = 0; how < 2; how++) {
		DcChain c(env, 3);
		for (size_t i = 0; i < 3; i++)
			ck_assert_int_eq(c.write(i, kDc | FI_MORE), 0);
		expect_no_completion(c.p.client.cq, 100);
		if (how == 0)
			ck_assert_int_eq(fi_shutdown(c.p.client.ep, 0), 0);
		else
			close_side(c.p.server);
		int seen[3] = {};
		for (int k = 0; k < 3; k++) {
			fi_cq_err_entry err = expect_error(c.p.client.cq);
			int i = 0;
			while (i < 3 && err.op_context != &c.ctx[i])
				i++;
			ck_assert_msg(i < 3, "an error for an unknown context");
			ck_assert_msg(!seen[i]++, "two entries for write %d", i);
			ck_assert_int_eq(err.err, FI_ECANCELED);
		}
		c.expect_count(0, 3);
		// A later write is refused and reports nothing again.
		ck_assert_int_eq(c.write(0, kDc), -FI_ENOTCONN);
		expect_no_completion(c.p.client.cq, 300);
		c.expect_count(0, 3);
		for (size_t i = 0; i < 3; i++)
			ck_assert(c.untouched(i));
	}
}
END_TEST

// fi_close with deferred writes held: discarded, no completions, no wait.
START_TEST(dc_more_chain_discarded_by_close)
{
	Env env;
	DcChain c(env, 3);
	for (size_t i = 0; i < 3; i++)
		ck_assert_int_eq(c.write(i, kDc | FI_MORE), 0);
	ck_assert_int_eq(fi_close(&c.p.client.ep->fid), 0);
	c.p.client.ep = nullptr;
	expect_no_completion(c.p.client.cq, 300);
	c.expect_count(0, 0);
	for (size_t i = 0; i < 3; i++)
		ck_assert(c.untouched(i));
}
END_TEST

Suite *dc_more_suite()
{
	Suite *s = suite_create("dc_more");
	TCase *tc = tcase_create("dc_more");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, dc_more_chain_shares_one_read_back);
	tcase_add_test(tc, dc_more_chain_beyond_the_cap);
	tcase_add_test(tc, dc_more_chain_interleaved);
	tcase_add_test(tc, dc_more_chain_selective);
	tcase_add_test(tc, dc_more_small_queue);
	tcase_add_test(tc, dc_more_chain_write_fails);
	tcase_add_test(tc, dc_more_chain_held_at_shutdown);
	tcase_add_test(tc, dc_more_chain_discarded_by_close);
	suite_add_tcase(s, tc);
	return s;
}
