// WaitGate: a wait returns at once on a word that moved since its snapshot,
// sleeps until notify() otherwise, honours its timeout; and the protocol
// fi_cntr_wait follows (one thread on an eventfd it alone clears, the others
// on the gate) loses no wakeup with several waiters.
#include "unit.h"
#include "wait_gate.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

using vrma::WaitGate;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t)
{
	return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

START_TEST(test_moved_word_returns_at_once)
{
	WaitGate g;
	const uint32_t seen = g.snapshot();
	g.notify();
	ck_assert_uint_ne(g.snapshot(), seen);
	const auto t = Clock::now();
	g.wait(seen, 5000);
	ck_assert_msg(ms_since(t) < 1000, "a wait on a moved word slept %.0f ms", ms_since(t));
}
END_TEST

START_TEST(test_timeout)
{
	WaitGate g;
	const auto t = Clock::now();
	g.wait(g.snapshot(), 50);
	const double ms = ms_since(t);
	ck_assert_msg(ms >= 40 && ms < 2000, "a 50 ms wait took %.0f ms", ms);
}
END_TEST

START_TEST(test_notify_wakes_sleeper)
{
	WaitGate g;
	std::atomic<bool> woke{false};
	const uint32_t seen = g.snapshot();
	std::thread sleeper([&] {
		g.wait(seen, 10000);
		woke = true;
	});
	std::this_thread::sleep_for(std::chrono::milliseconds(100));
	ck_assert_msg(!woke.load(), "the sleeper returned before notify()");
	const auto t = Clock::now();
	g.notify();
	sleeper.join();
	ck_assert(woke.load());
	ck_assert_msg(ms_since(t) < 5000, "notify() took %.0f ms to wake the sleeper", ms_since(t));
}
END_TEST

// The pattern of fi_cntr_wait under SOS's threads: four waiters and one
// producer, in rounds. Each waiter asks for one count and waits until the
// round's counts are all in; the producer, once every waiter asked, adds
// them with one eventfd write and one notify() (as cntr_wake does), and
// nothing more until the next round's requests. Each waiter runs
// wait_until() as fi_cntr_wait does: the holder of the descriptor role
// sleeps in poll() on the eventfd, clearing it when woken, the others in
// the gate. A waiter that misses the round's only wakeup
// sleeps to its 2 s limit, which fails the test (all waiters sleeping on
// the eventfd fail it within a few hundred rounds).
START_TEST(test_many_waiters_lose_nothing)
{
	constexpr int kWaiters = 4;
	constexpr uint64_t kRounds = 3000;
	WaitGate g;
	const int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(efd, 0);
	std::atomic<uint64_t> value{0}, requested{0};
	std::atomic<bool> failed{false};
	auto wait_for = [&](uint64_t target) {
		const auto start = Clock::now();
		auto left_ms = [&] { return static_cast<int>(std::max(0.0, 2000 - ms_since(start))); };
		const int r = g.wait_until(
			[&] {
				if (value.load() >= target || failed.load())
					return 0;
				return left_ms() == 0 ? -ETIMEDOUT : WaitGate::kAgain;
			},
			[&] {
				pollfd p{efd, POLLIN, 0};
				if (poll(&p, 1, left_ms()) > 0) {
					uint64_t v;
					(void)!read(efd, &v, sizeof v);
				}
				return 0;
			},
			left_ms);
		if (r != 0)
			failed = true;
	};
	std::vector<std::thread> ts;
	for (int i = 0; i < kWaiters; i++)
		ts.emplace_back([&] {
			for (uint64_t r = 1; r <= kRounds && !failed.load(); r++) {
				requested.fetch_add(1);
				wait_for(r * kWaiters);
			}
		});
	const uint64_t one = 1;
	uint64_t rounds = 0;
	for (uint64_t r = 1; r <= kRounds && !failed.load(); r++) {
		while (requested.load() < r * kWaiters && !failed.load())
			std::this_thread::yield();
		value.store(r * kWaiters);
		(void)!write(efd, &one, sizeof one);
		g.notify();
		rounds = r;
	}
	for (auto &t : ts)
		t.join();
	close(efd);
	ck_assert_msg(!failed.load(), "a waiter missed its wakeup (round %llu of %llu)",
		      static_cast<unsigned long long>(rounds), static_cast<unsigned long long>(kRounds));
	ck_assert_uint_eq(value.load(), kRounds * kWaiters);
}
END_TEST

} // namespace

Suite *wait_gate_suite()
{
	Suite *s = suite_create("wait_gate");
	TCase *tc = tcase_create("wait_gate");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_moved_word_returns_at_once);
	tcase_add_test(tc, test_timeout);
	tcase_add_test(tc, test_notify_wakes_sleeper);
	tcase_add_test(tc, test_many_waiters_lose_nothing);
	suite_add_tcase(s, tc);
	return s;
}
