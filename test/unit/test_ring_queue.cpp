// RingQueue: FIFO order across wrap-around and growth, capacity that grows
// only when full (a cycling short queue never reallocates), the strong
// guarantee of push_back when allocation fails, and clear.
#include "unit.h"
#include "ring_queue.h"

#include <cstdint>
#include <deque>
#include <new>
#include <random>
#include <string>

using vrma::RingQueue;

namespace {

START_TEST(test_fifo_order)
{
	RingQueue<int> q;
	ck_assert(q.empty());
	for (int i = 0; i < 100; i++)
		q.push_back(i);
	ck_assert_uint_eq(q.size(), 100);
	for (int i = 0; i < 100; i++) {
		ck_assert_int_eq(q.front(), i);
		q.pop_front();
	}
	ck_assert(q.empty());
	ck_assert_uint_eq(q.size(), 0);
}
END_TEST

// Push one, pop one, many times: the capacity stays at its first size.
START_TEST(test_cycling_does_not_grow)
{
	RingQueue<uint64_t> q;
	q.push_back(0);
	const size_t cap = q.capacity();
	ck_assert_uint_ge(cap, 1);
	q.pop_front();
	for (uint64_t i = 1; i < 100000; i++) {
		q.push_back(i);
		q.push_back(i + 1000000);
		ck_assert_uint_eq(q.front(), i);
		q.pop_front();
		ck_assert_uint_eq(q.front(), i + 1000000);
		q.pop_front();
	}
	ck_assert_uint_eq(q.capacity(), cap);
	ck_assert(q.empty());
}
END_TEST

// Growth while the contents wrap around the array's end keeps their order:
// checked against std::deque over a random mix of pushes and pops.
START_TEST(test_grow_while_wrapped_matches_deque)
{
	RingQueue<std::string> q;
	std::deque<std::string> ref;
	std::mt19937 rng(7);
	size_t max_cap = 0;
	for (int step = 0; step < 20000; step++) {
		const bool push = ref.empty() || rng() % 5 < 3;
		if (push) {
			std::string v = "v" + std::to_string(step);
			q.push_back(v);
			ref.push_back(v);
		} else {
			ck_assert_str_eq(q.front().c_str(), ref.front().c_str());
			q.pop_front();
			ref.pop_front();
		}
		ck_assert_uint_eq(q.size(), ref.size());
		if (q.capacity() > max_cap)
			max_cap = q.capacity();
		// A power of two, never below the size.
		ck_assert_uint_eq(q.capacity() & (q.capacity() - 1), 0);
		ck_assert_uint_ge(q.capacity(), q.size());
	}
	ck_assert_uint_gt(max_cap, 16); // it did grow past its first array
	while (!ref.empty()) {
		ck_assert_str_eq(q.front().c_str(), ref.front().c_str());
		q.pop_front();
		ref.pop_front();
	}
	ck_assert(q.empty());
}
END_TEST

// An element whose assignment throws once armed: growth that fails midway
// must leave the queue as it was.
struct Fragile {
	static inline int throw_after = -1; // assignments left before one throws
	int v = 0;
	Fragile() = default;
	explicit Fragile(int x) : v(x) {}
	Fragile(const Fragile &) = default;
	Fragile &operator=(const Fragile &o)
	{
		if (throw_after == 0)
			throw std::bad_alloc();
		if (throw_after > 0)
			throw_after--;
		v = o.v;
		return *this;
	}
};

START_TEST(test_push_back_strong_guarantee)
{
	RingQueue<Fragile> q;
	for (int i = 0; i < 10; i++)
		q.push_back(Fragile(i));
	q.pop_front();
	q.pop_front();
	// Fill to capacity so the next push grows (and wraps the contents).
	int next = 10;
	while (q.size() < q.capacity())
		q.push_back(Fragile(next++));
	const size_t size = q.size(), cap = q.capacity();
	Fragile::throw_after = 3; // growth copies a few, then fails
	bool threw = false;
	try {
		q.push_back(Fragile(999));
	} catch (const std::bad_alloc &) {
		threw = true;
	}
	Fragile::throw_after = -1;
	ck_assert(threw);
	ck_assert_uint_eq(q.size(), size);
	ck_assert_uint_eq(q.capacity(), cap);
	for (int want = 2; want < next; want++) {
		ck_assert_int_eq(q.front().v, want);
		q.pop_front();
	}
	ck_assert(q.empty());
}
END_TEST

START_TEST(test_clear)
{
	RingQueue<int> q;
	for (int i = 0; i < 40; i++)
		q.push_back(i);
	const size_t cap = q.capacity();
	q.clear();
	ck_assert(q.empty());
	ck_assert_uint_eq(q.capacity(), cap);
	q.push_back(7);
	ck_assert_int_eq(q.front(), 7);
	ck_assert_uint_eq(q.size(), 1);
}
END_TEST

} // namespace

Suite *ring_queue_suite()
{
	Suite *s = suite_create("ring_queue");
	TCase *tc = tcase_create("ring_queue");
	tcase_add_test(tc, test_fifo_order);
	tcase_add_test(tc, test_cycling_does_not_grow);
	tcase_add_test(tc, test_grow_while_wrapped_matches_deque);
	tcase_add_test(tc, test_push_back_strong_guarantee);
	tcase_add_test(tc, test_clear);
	suite_add_tcase(s, tc);
	return s;
}
