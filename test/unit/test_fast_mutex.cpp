// FastMutex: mutual exclusion under contention (the sleeping path included),
// try_lock, and that a sleeper is woken by unlock and not before.
#include "unit.h"
#include "fast_mutex.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

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

} // namespace

Suite *fast_mutex_suite()
{
	Suite *s = suite_create("fast_mutex");
	TCase *tc = tcase_create("fast_mutex");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_contended_counts);
	tcase_add_test(tc, test_try_lock);
	tcase_add_test(tc, test_sleeper_woken);
	suite_add_tcase(s, tc);
	return s;
}
