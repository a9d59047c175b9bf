// Counters: every operation counted (injected and unsignaled ones too),
// errors counted apart, a real blocking wait.
#include "harness.h"

#include <atomic>
#include <chrono>
#include <thread>

using namespace vt;

START_TEST(counters_count_every_operation)
{
	Env env;
	fid_cntr *wc = open_cntr(env), *rc = open_cntr(env), *sc = open_cntr(env), *rcv = open_cntr(env);
	PairOptions opt;
	opt.bind_flags = FI_SELECTIVE_COMPLETION; // no CQ entries: counters only
	opt.client_cntrs = {{wc, FI_WRITE}, {rc, FI_READ}, {sc, FI_SEND}};
	opt.server_cntrs = {{rcv, FI_RECV}};
	{
		Pair p(env, opt);
		Region local(env, 4096, FI_WRITE | FI_READ | FI_SEND);
		Region remote(env, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE);
		Region rx(env, 4 * 64, FI_RECV);
		local.fill(40);
		for (int i = 0; i < 5; i++)
			ck_assert_int_eq(fi_write(p.client.ep, local.buf.data() + i * 100, 100, local.desc(), 0,
						  remote.addr() + i * 100, remote.key(), nullptr), 0);
		uint64_t v = 0x1122334455667788ULL;
		for (int i = 0; i < 3; i++)
			ck_assert_int_eq(fi_inject_write(p.client.ep, &v, 8, 0, remote.addr() + 1000 + i * 8,
							 remote.key()), 0);
		ck_assert_int_eq(fi_cntr_wait(wc, 8, kTimeoutMs), 0);
		ck_assert_uint_eq(fi_cntr_read(wc), 8);
		ck_assert_uint_eq(fi_cntr_readerr(wc), 0);
		ck_assert(remote.check(40, 500));
		for (int i = 0; i < 3; i++) {
			uint64_t got;
			memcpy(&got, remote.buf.data() + 1000 + i * 8, 8);
			ck_assert_uint_eq(got, v);
		}
		std::fill(local.buf.begin(), local.buf.end(), 0);
		for (int i = 0; i < 2; i++)
			ck_assert_int_eq(fi_read(p.client.ep, local.buf.data() + i * 250, 250, local.desc(), 0,
						 remote.addr() + i * 250, remote.key(), nullptr), 0);
		ck_assert_int_eq(fi_cntr_wait(rc, 2, kTimeoutMs), 0);
		ck_assert_uint_eq(fi_cntr_read(rc), 2);
		ck_assert(local.check(40, 500));

		int rctx[4];
		for (int i = 0; i < 4; i++)
			ck_assert_int_eq(fi_recv(p.server.ep, rx.buf.data() + i * 64, 64, rx.desc(), 0, &rctx[i]), 0);
		ck_assert_int_eq(fi_inject(p.client.ep, "ab", 2, 0), 0);
		ck_assert_int_eq(fi_inject(p.client.ep, "cd", 2, 0), 0);
		ck_assert_int_eq(fi_send(p.client.ep, local.buf.data(), 16, local.desc(), 0, nullptr), 0);
		ck_assert_int_eq(fi_send(p.client.ep, local.buf.data(), 16, local.desc(), 0, nullptr), 0);
		ck_assert_int_eq(fi_cntr_wait(sc, 4, kTimeoutMs), 0);
		ck_assert_int_eq(fi_cntr_wait(rcv, 4, kTimeoutMs), 0);
		ck_assert_uint_eq(fi_cntr_read(rcv), 4);
		ck_assert_uint_eq(rx.buf[0], 'a');
		ck_assert_uint_eq(rx.buf[64], 'c');
		// The server's receives also reached its CQ; the client's CQ saw
		// nothing (selective completion, no FI_COMPLETION).
		for (int i = 0; i < 4; i++)
			expect_completion(p.server.cq, &rctx[i], FI_RECV | FI_MSG);
		expect_no_completion(p.client.cq);
		// Counters are per event: the read counter did not count writes.
		ck_assert_uint_eq(fi_cntr_read(rc), 2);
		ck_assert_uint_eq(fi_cntr_read(wc), 8);
	}
	for (fid_cntr *c : {wc, rc, sc, rcv})
		ck_assert_int_eq(fi_close(&c->fid), 0);
}
END_TEST

START_TEST(counter_errors)
{
	Env env;
	fid_cntr *wc = open_cntr(env);
	PairOptions opt;
	opt.client_cntrs = {{wc, FI_WRITE}};
	{
		Pair p(env, opt);
		Region local(env, 64, FI_WRITE);
		Region remote(env, 64, FI_REMOTE_WRITE);
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 64, local.desc(), 0, remote.addr(),
					  remote.key() ^ 0x5500, nullptr), 0);
		ck_assert_int_eq(fi_cntr_wait(wc, 1, kTimeoutMs), -FI_EAVAIL);
		ck_assert_uint_eq(fi_cntr_readerr(wc), 1);
		ck_assert_uint_eq(fi_cntr_read(wc), 0);
		fi_cq_err_entry err = expect_error(p.client.cq);
		ck_assert_int_eq(err.err, FI_EACCES);
	}
	ck_assert_int_eq(fi_close(&wc->fid), 0);
}
END_TEST

START_TEST(counter_api_and_blocking_wait)
{
	Env env;
	fid_cntr *c = open_cntr(env, FI_WAIT_FD);
	ck_assert_uint_eq(fi_cntr_read(c), 0);
	ck_assert_int_eq(fi_cntr_add(c, 5), 0);
	ck_assert_uint_eq(fi_cntr_read(c), 5);
	ck_assert_int_eq(fi_cntr_set(c, 2), 0);
	ck_assert_uint_eq(fi_cntr_read(c), 2);
	ck_assert_int_eq(fi_cntr_adderr(c, 3), 0);
	ck_assert_uint_eq(fi_cntr_readerr(c), 3);
	ck_assert_int_eq(fi_cntr_seterr(c, 0), 0);
	ck_assert_uint_eq(fi_cntr_readerr(c), 0);
	ck_assert_int_eq(fi_cntr_wait(c, 2, 0), 0);
	int fd = -1;
	ck_assert_int_eq(fi_control(&c->fid, FI_GETWAIT, &fd), 0);
	ck_assert_int_ge(fd, 0);

	// A timed-out wait returns -FI_ETIMEDOUT after (about) the timeout.
	auto t0 = std::chrono::steady_clock::now();
	ck_assert_int_eq(fi_cntr_wait(c, 3, 200), -FI_ETIMEDOUT);
	auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
		std::chrono::steady_clock::now() - t0).count();
	ck_assert_int_ge(ms, 190);
	// A blocked waiter wakes when another thread adds.
	std::thread t([&] {
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
		fi_cntr_add(c, 1);
	});
	ck_assert_int_eq(fi_cntr_wait(c, 3, 20000), 0);
	t.join();
	ck_assert_uint_eq(fi_cntr_read(c), 3);

	fi_cntr_attr attr{};
	attr.events = FI_CNTR_EVENTS_COMP;
	attr.flags = 1;
	fid_cntr *bad = nullptr;
	ck_assert_int_eq(fi_cntr_open(env.domain, &attr, &bad, nullptr), -FI_EBADFLAGS);
	ck_assert_int_eq(fi_close(&c->fid), 0);
}
END_TEST

START_TEST(counters_only_endpoint)
{
	Env env;
	fid_cntr *wc = open_cntr(env);
	PairOptions opt;
	opt.client_cq = false;
	opt.client_cntrs = {{wc, FI_WRITE | FI_READ}};
	{
		Pair p(env, opt);
		Region local(env, 256, FI_WRITE | FI_READ);
		Region remote(env, 256, FI_REMOTE_WRITE | FI_REMOTE_READ);
		local.fill(77);
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 256, local.desc(), 0, remote.addr(),
					  remote.key(), nullptr), 0);
		ck_assert_int_eq(fi_read(p.client.ep, local.buf.data(), 16, local.desc(), 0, remote.addr(),
					 remote.key(), nullptr), 0);
		ck_assert_int_eq(fi_cntr_wait(wc, 2, kTimeoutMs), 0);
		ck_assert(remote.check(77, 256));
	}
	// Remote events need FI_RMA_EVENT, which vrma does not offer (yet).
	fid_ep *ep = nullptr;
	ck_assert_int_eq(fi_endpoint(env.domain, env.info, &ep, nullptr), 0);
	ck_assert_int_eq(fi_ep_bind(ep, &wc->fid, FI_REMOTE_WRITE), -FI_EOPNOTSUPP);
	ck_assert_int_eq(fi_ep_bind(ep, &wc->fid, 1ULL << 40), -FI_EBADFLAGS);
	ck_assert_int_eq(fi_ep_bind(ep, &wc->fid, 0), -FI_EINVAL);
	ck_assert_int_eq(fi_ep_bind(ep, &wc->fid, FI_WRITE), 0);
	ck_assert_int_eq(fi_ep_bind(ep, &wc->fid, FI_WRITE), -FI_EINVAL); // already bound
	// A bound counter refuses to close.
	ck_assert_int_eq(fi_close(&wc->fid), -FI_EBUSY);
	ck_assert_int_eq(fi_close(&ep->fid), 0);
	ck_assert_int_eq(fi_close(&wc->fid), 0);
}
END_TEST

// fi_cntr_wait in one thread while another waits on the CQ that carries the
// counted completions (fi_cq_sread, as an MPI progress thread does): the
// counter's waiter wakes whichever thread takes the completion channel's
// event and counts. It used to sleep to its timeout when the fi_cq_sread
// thread drained the channel first.
START_TEST(counter_wait_wakes_when_another_thread_counts)
{
	constexpr int kRounds = 20;
	Env env;
	fid_cntr *wc = open_cntr(env);
	PairOptions opt;
	opt.bind_flags = FI_SELECTIVE_COMPLETION; // counted, no CQ entries
	opt.client_cntrs = {{wc, FI_WRITE}};
	{
		Pair p(env, opt);
		Region local(env, 64 * kRounds, FI_WRITE);
		Region remote(env, 64 * kRounds, FI_REMOTE_WRITE);
		local.fill(23);
		std::atomic<bool> stop{false};
		std::atomic<int> unexpected_sread{0};
		std::thread cq_waiter([&] {
			fi_cq_data_entry entry;
			while (!stop.load()) {
				ssize_t rc = fi_cq_sread(p.client.cq, &entry, 1, nullptr, 20);
				if (rc != -FI_EAGAIN)
					unexpected_sread = static_cast<int>(rc);
			}
		});
		for (int i = 0; i < kRounds; i++) {
			int waited_rc = 1;
			long long waited_ms = 0;
			std::thread waiter([&] {
				const auto t0 = std::chrono::steady_clock::now();
				waited_rc = fi_cntr_wait(wc, static_cast<uint64_t>(i) + 1, 4000);
				waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
					std::chrono::steady_clock::now() - t0).count();
			});
			std::this_thread::sleep_for(std::chrono::milliseconds(30)); // both asleep
			ck_assert_int_eq(fi_write(p.client.ep, local.buf.data() + i * 64, 64, local.desc(), 0,
						  remote.addr() + i * 64, remote.key(), nullptr), 0);
			waiter.join();
			ck_assert_int_eq(waited_rc, 0);
			ck_assert_msg(waited_ms < 2500, "round %d: fi_cntr_wait woke after %lld ms", i, waited_ms);
		}
		stop = true;
		cq_waiter.join();
		ck_assert_int_eq(unexpected_sread.load(), 0);
		ck_assert_uint_eq(fi_cntr_read(wc), kRounds);
		ck_assert_uint_eq(fi_cntr_readerr(wc), 0);
		ck_assert(remote.check(23, 64 * kRounds));
		expect_no_completion(p.client.cq);
	}
	ck_assert_int_eq(fi_close(&wc->fid), 0);
}
END_TEST

// A counter read and waited on by one thread while another opens and
// closes the endpoints and CQs that feed it (issue 13 §3, lifetimes): the
// counter never touches a closed CQ, and counts every write exactly once.
START_TEST(counter_outlives_the_cqs_it_polls)
{
	constexpr int kRounds = 12;
	Env env;
	fid_cntr *wc = open_cntr(env);
	std::atomic<bool> stop{false};
	std::atomic<int> bad_wait{0};
	std::thread reader([&] {
		while (!stop.load()) {
			(void)fi_cntr_read(wc);
			const int rc = fi_cntr_wait(wc, UINT64_MAX, 1);
			if (rc != -FI_ETIMEDOUT)
				bad_wait = rc ? rc : 1;
		}
	});
	for (int i = 0; i < kRounds; i++) {
		PairOptions opt;
		opt.bind_flags = FI_SELECTIVE_COMPLETION;
		opt.client_cntrs = {{wc, FI_WRITE}};
		Pair p(env, opt);
		Region local(env, 64, FI_WRITE);
		Region remote(env, 64, FI_REMOTE_WRITE);
		local.fill(static_cast<uint8_t>(i + 1));
		ck_assert_int_eq(fi_write(p.client.ep, local.buf.data(), 64, local.desc(), 0, remote.addr(),
					  remote.key(), nullptr), 0);
		ck_assert_int_eq(fi_cntr_wait(wc, static_cast<uint64_t>(i) + 1, 4000), 0);
		ck_assert(remote.check(static_cast<uint8_t>(i + 1), 64));
		// The pair's endpoints and CQs close here, the reader still polling.
	}
	stop = true;
	reader.join();
	ck_assert_int_eq(bad_wait.load(), 0);
	ck_assert_uint_eq(fi_cntr_read(wc), kRounds);
	ck_assert_uint_eq(fi_cntr_readerr(wc), 0);
	ck_assert_int_eq(fi_close(&wc->fid), 0);
}
END_TEST

Suite *cntr_suite()
{
	Suite *s = suite_create("cntr");
	TCase *tc = tcase_create("cntr");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, counters_count_every_operation);
	tcase_add_test(tc, counter_errors);
	tcase_add_test(tc, counter_api_and_blocking_wait);
	tcase_add_test(tc, counters_only_endpoint);
	tcase_add_test(tc, counter_wait_wakes_when_another_thread_counts);
	tcase_add_test(tc, counter_outlives_the_cqs_it_polls);
	suite_add_tcase(s, tc);
	return s;
}
