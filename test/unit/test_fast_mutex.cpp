// FastMutex: mutual exclusion under contention (the sleeping path included),
// try_lock, and that a sleeper is woken by unlock and not before. Both
// FastMutex and CheckedMutex: the lock checks (held_here).
#include "unit.h"
#include "fast_mutex.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

using vrma::CheckedMutex;
using vrma::FastMutex;

namespace {

// Four threads, each 200000 read-modify-writes of plain memory under the
// lock, with a yield inside every 1000th so that others find it held long
// enough to sleep: nothing lost.
START_TEST(test_contended_counts)
{
	FastMutex m;
	uint64_t counter = 0;
	constexpr int kThreads = 4, kEach = 200000;
	std::vector<std::thread> ts;
	for (int t = 0; t < kThreads; t++)
		ts.emplace_back([&] {
			for (int i = 0; i < kEach; i++) {
				std::lock_guard guard(m);
				const uint64_t v = counter;
				if (i % 1000 == 0)
					std::this_thread::yield();
				counter = v + 1;
			}
		});
	for (auto &t : ts)
		t.join();
	ck_assert_uint_eq(counter, uint64_t(kThreads) * kEach);
}
END_TEST

START_TEST(test_try_lock)
{
	FastMutex m;
	ck_assert(m.try_lock());
	ck_assert(!m.try_lock());
	bool other = true;
	std::thread([&] { other = m.try_lock(); }).join();
	ck_assert_msg(!other, "another thread took a held lock");
	m.unlock();
	ck_assert(m.try_lock());
	m.unlock();
}
END_TEST

// A thread blocked past the spin (the lock held for 100 ms) gets the lock
// only after the holder released it, and does get it.
START_TEST(test_sleeper_woken)
{
	FastMutex m;
	std::atomic<bool> released{false};
	std::atomic<bool> got{false};
	bool saw_released = false;
	m.lock();
	std::thread waiter([&] {
		std::lock_guard guard(m);
		saw_released = released.load();
		got = true;
	});
	std::this_thread::sleep_for(std::chrono::milliseconds(100));
	ck_assert_msg(!got.load(), "the waiter took a held lock");
	released = true;
	m.unlock();
	waiter.join();
	ck_assert(got.load());
	ck_assert_msg(saw_released, "the waiter ran before the release");
	// Left free: both paths (fast and slept) give it back.
	ck_assert(m.try_lock());
	m.unlock();
}
END_TEST

// The lock checks (VRMA_LOCK_CHECKS, on for this program): held_here() is
// true in the thread that holds the mutex, by lock() or try_lock(), and
// false after unlock() and in every other thread meanwhile.
#ifdef VRMA_LOCK_CHECKS
template <class Mutex>
void check_held_here()
{
	Mutex m;
	ck_assert(!m.held_here());
	m.lock();
	ck_assert(m.held_here());
	bool other_sees_held = true;
	std::thread([&] { other_sees_held = m.held_here(); }).join();
	ck_assert(!other_sees_held);
	m.unlock();
	ck_assert(!m.held_here());
	ck_assert(m.try_lock());
	ck_assert(m.held_here());
	// Another thread takes it after us: it holds it, we no longer do.
	m.unlock();
	std::atomic<int> step{0};
	bool other_holds = false;
	std::thread t([&] {
		m.lock();
		other_holds = m.held_here();
		step = 1;
		while (step.load() != 2)
			std::this_thread::yield();
		m.unlock();
	});
	while (step.load() != 1)
		std::this_thread::yield();
	ck_assert(other_holds);
	ck_assert(!m.held_here());
	ck_assert(!m.try_lock());
	step = 2;
	t.join();
	ck_assert(!m.held_here());
}
#endif

} // namespace

START_TEST(test_held_here)
{
#ifndef VRMA_LOCK_CHECKS
	ck_abort_msg("the unit tests are built with VRMA_LOCK_CHECKS");
#else
	check_held_here<FastMutex>();
#endif
}
END_TEST

// The same for CheckedMutex, and through a std::condition_variable_any
// wait: the waiter does not hold it while it sleeps (another thread takes
// it meanwhile and holds it), and holds it again when the wait returns.
START_TEST(test_checked_held_here)
{
#ifndef VRMA_LOCK_CHECKS
	ck_abort_msg("the unit tests are built with VRMA_LOCK_CHECKS");
#else
	check_held_here<CheckedMutex>();
	CheckedMutex m;
	std::condition_variable_any cv;
	bool ready = false, notifier_held = false, held_in_pred = true;
	std::unique_lock guard(m);
	std::thread t([&] {
		std::lock_guard g(m);
		notifier_held = m.held_here();
		ready = true;
		cv.notify_one();
	});
	cv.wait(guard, [&] {
		held_in_pred = held_in_pred && m.held_here();
		return ready;
	});
	ck_assert(m.held_here());
	ck_assert(held_in_pred);
	ck_assert(notifier_held);
	guard.unlock();
	ck_assert(!m.held_here());
	t.join();
#endif
}
END_TEST

Suite *fast_mutex_suite()
{
	Suite *s = suite_create("fast_mutex");
	TCase *tc = tcase_create("fast_mutex");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_contended_counts);
	tcase_add_test(tc, test_try_lock);
	tcase_add_test(tc, test_sleeper_woken);
	tcase_add_test(tc, test_held_here);
	tcase_add_test(tc, test_checked_held_here);
	suite_add_tcase(s, tc);
	return s;
}
