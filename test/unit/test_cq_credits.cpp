// CqCredits (src/cq_credits.h) against a fake device that grows a CQ as
// asked up to its max_cqe: reservations come out of the pool and grow the
// CQ by exactly what is missing; they stop at max - max / 8 (28672 of
// rxe's 32767: 37 rings of 769), leaving 4095 and more to credited queues;
// a refused or useless resize refuses the reservation; once a queue is
// credited every later one is; take() is all or nothing and, raced by
// several threads, never overdraws the pool or loses a credit.
#include "unit.h"
#include "cq_credits.h"

#include <thread>
#include <vector>

using vrma::CqCredits;
using Reserve = vrma::CqCredits::Reserve;

namespace {

// ibv_resize_cq on a device of `max` entries: to `want` rounded up to
// `round` (0: exact), refused beyond max or when `refuse` is set.
struct FakeDevice {
	size_t max;
	size_t round = 0;
	bool refuse = false;
	std::vector<size_t> asked; // every resize asked for

	size_t operator()(size_t want)
	{
		asked.push_back(want);
		if (refuse || want > max)
			return 0;
		return round ? (want + round - 1) / round * round : want;
	}
};

// The CQ's size, the entries reserved, the credits free.
void expect(const CqCredits &c, size_t cqe, size_t reserved, ptrdiff_t free)
{
	ck_assert_uint_eq(c.cqe(), cqe);
	ck_assert_uint_eq(c.reserved(), reserved);
	ck_assert_int_eq(c.free(), free);
}

START_TEST(test_entries_limit)
{
	ck_assert_uint_eq(vrma::cq_entries_limit(32767, 0), 32767);
	ck_assert_uint_eq(vrma::cq_entries_limit(32767, 1000), 1000);
	ck_assert_uint_eq(vrma::cq_entries_limit(32767, 32767), 32767);
	ck_assert_uint_eq(vrma::cq_entries_limit(32767, 40000), 32767);
	ck_assert_uint_eq(vrma::cq_entries_limit(0, 0), 0);
	ck_assert_uint_eq(vrma::cq_entries_limit(0, 5), 0);
	ck_assert_uint_eq(vrma::cq_entries_limit(1, 0), 1);
}
END_TEST

START_TEST(test_own_rx_limit)
{
	// A reserved receive queue posts all its own receives, a credited one
	// 8 at most.
	ck_assert_uint_eq(vrma::own_rx_limit(384, false), 384);
	ck_assert_uint_eq(vrma::own_rx_limit(384, true), 8);
	ck_assert_uint_eq(vrma::own_rx_limit(65, true), 8);
	ck_assert_uint_eq(vrma::own_rx_limit(8, true), 8);
	ck_assert_uint_eq(vrma::own_rx_limit(3, true), 3);
	ck_assert_uint_eq(vrma::own_rx_limit(0, true), 0);
	ck_assert_uint_eq(vrma::own_rx_limit(0, false), 0);
}
END_TEST

START_TEST(test_reserve_grows_by_what_is_missing)
{
	FakeDevice dev{32767};
	CqCredits c;
	c.open(1024);
	// Fits the pool: no resize.
	ck_assert(c.reserve(769, dev.max, dev) == Reserve::Done);
	ck_assert(dev.asked.empty());
	expect(c, 1024, 769, 255);
	// 255 free, 769 wanted: grown to 1024 + 769 - 255 = 1538.
	ck_assert_uint_eq(c.grow_target(769), 1538);
	ck_assert(c.reserve(769, dev.max, dev) == Reserve::Done);
	ck_assert_uint_eq(dev.asked.size(), 1);
	ck_assert_uint_eq(dev.asked[0], 1538);
	expect(c, 1538, 1538, 0);
	ck_assert(c.in_use());
	// Given back: the pool has them again, the CQ keeps its size.
	c.unreserve(769);
	ck_assert_uint_eq(c.reserved(), 769);
	ck_assert_int_eq(c.free(), 769);
	// Never more than was reserved.
	c.unreserve(10000);
	ck_assert_uint_eq(c.reserved(), 0);
	ck_assert_int_eq(c.free(), 1538);
	ck_assert(!c.in_use());
}
END_TEST

START_TEST(test_reserve_stops_at_seven_eighths)
{
	// rxe: 32767 entries, 4095 kept for credits, 28672 for reservations.
	FakeDevice dev{32767};
	CqCredits c;
	c.open(1024);
	ck_assert(c.reservation_fits(28672, 32767));
	ck_assert(!c.reservation_fits(28673, 32767));
	int done = 0;
	while (c.reserve(769, dev.max, dev) == Reserve::Done)
		done++;
	ck_assert_int_eq(done, 37);
	ck_assert_uint_eq(c.reserved(), 37 * 769);
	ck_assert(c.reserve(769, dev.max, dev) == Reserve::TooLarge);
	// A smaller one still fits: 28453 + 219 = 28672.
	ck_assert(c.reserve(219, dev.max, dev) == Reserve::Done);
	ck_assert(c.reserve(1, dev.max, dev) == Reserve::TooLarge);
	// Sizes that would wrap the sum are refused, not wrapped into a fit.
	ck_assert(!c.reservation_fits(SIZE_MAX, 32767));
	ck_assert(!c.reservation_fits(SIZE_MAX - 28672 + 1, 32767));
	ck_assert(c.reserve(SIZE_MAX, dev.max, dev) == Reserve::TooLarge);
	ck_assert_uint_eq(c.reserved(), 28672);
	// The credited queues get the rest once the CQ is grown whole.
	ck_assert(c.attach(1, dev.max, dev));
	ck_assert_uint_eq(c.cqe(), 32767);
	ck_assert_int_eq(c.free(), 32767 - 28672 - 1);
	ck_assert_uint_eq(c.credited(), 1);
	// From now on, reservations are refused whatever their size.
	ck_assert(c.reserve(1, dev.max, dev) == Reserve::Shared);
	c.detach(1);
	ck_assert_uint_eq(c.credited(), 0);
	ck_assert_int_eq(c.free(), 32767 - 28672);
	ck_assert(c.reserve(0, dev.max, dev) == Reserve::Done);
}
END_TEST

START_TEST(test_tiny_device)
{
	// max_cqe 0 or 1: 0 and 1 entries may be reserved (max / 8 is 0).
	FakeDevice none{0};
	CqCredits c;
	c.open(0);
	ck_assert(c.reserve(1, none.max, none) == Reserve::TooLarge);
	ck_assert(c.reserve(0, none.max, none) == Reserve::Done);
	ck_assert(!c.attach(1, none.max, none));
	ck_assert(c.attach(0, none.max, none));
	ck_assert_uint_eq(c.credited(), 1);

	FakeDevice one{1};
	CqCredits d;
	d.open(1);
	ck_assert(d.reserve(1, one.max, one) == Reserve::Done);
	ck_assert(d.reserve(1, one.max, one) == Reserve::TooLarge);
	ck_assert_int_eq(d.free(), 0);
}
END_TEST

START_TEST(test_resize_refused_or_useless)
{
	FakeDevice dev{32767, 0, true};
	CqCredits c;
	c.open(100);
	ck_assert(c.reserve(200, dev.max, dev) == Reserve::NotGrown);
	ck_assert_uint_eq(dev.asked.size(), 1);
	ck_assert_uint_eq(dev.asked[0], 200);
	expect(c, 100, 0, 100); // nothing taken or reserved
	// A resize that succeeds without growing: refused, no loop.
	auto same = [&](size_t) { return c.cqe(); };
	ck_assert(c.reserve(200, 32767, same) == Reserve::NotGrown);
	ck_assert_int_eq(c.free(), 100);
	// A resize that grows too little the first time: asked again.
	std::vector<size_t> asked;
	auto halfway = [&](size_t want) {
		asked.push_back(want);
		return asked.size() == 1 ? c.cqe() + 50 : want;
	};
	ck_assert(c.reserve(200, 32767, halfway) == Reserve::Done);
	ck_assert_uint_eq(asked.size(), 2);
	ck_assert_uint_eq(asked[0], 200);
	ck_assert_uint_eq(asked[1], 200); // 150 entries + 200 - 150 free
	ck_assert_uint_eq(c.cqe(), 200);
	ck_assert_int_eq(c.free(), 0);
}
END_TEST

START_TEST(test_device_rounds_up)
{
	// mlx5 rounds to its own sizes: the extra entries join the pool.
	FakeDevice dev{1 << 22, 1024};
	CqCredits c;
	c.open(1023);
	ck_assert(c.reserve(1500, dev.max, dev) == Reserve::Done);
	ck_assert_uint_eq(dev.asked[0], 1500);
	ck_assert_uint_eq(c.cqe(), 2048);
	ck_assert_int_eq(c.free(), 548);
	// A resize reported smaller than the queue (never, but) keeps the
	// pool as it is.
	c.grown(1000);
	ck_assert_uint_eq(c.cqe(), 1000);
	ck_assert_int_eq(c.free(), 548);
}
END_TEST

START_TEST(test_attach_refused)
{
	FakeDevice dev{64};
	CqCredits c;
	c.open(16);
	ck_assert(c.reserve(56, dev.max, dev) == Reserve::Done); // 64 - 8
	ck_assert_uint_eq(c.cqe(), 56);
	ck_assert(!c.attach(9, dev.max, dev)); // grown to 64: 8 free
	ck_assert_uint_eq(c.cqe(), 64);
	ck_assert_int_eq(c.free(), 8);
	ck_assert_uint_eq(c.credited(), 0);
	ck_assert(c.attach(8, dev.max, dev));
	ck_assert_int_eq(c.free(), 0);
	// A device that refuses to grow: the pool is what the CQ has.
	FakeDevice stuck{64, 0, true};
	CqCredits d;
	d.open(10);
	ck_assert(d.attach(10, stuck.max, stuck));
	ck_assert_uint_eq(stuck.asked.size(), 1);
	ck_assert_uint_eq(d.cqe(), 10);
	ck_assert(!d.attach(1, stuck.max, stuck));
	ck_assert_uint_eq(d.credited(), 1);
}
END_TEST

START_TEST(test_take_is_all_or_nothing)
{
	CqCredits c;
	c.open(5);
	ck_assert(!c.take(6));
	ck_assert_int_eq(c.free(), 5);
	ck_assert(c.take(5));
	ck_assert_int_eq(c.free(), 0);
	ck_assert(!c.take(1));
	ck_assert(c.take(0));
	c.give(2);
	ck_assert(!c.take(3));
	ck_assert(c.take(2));
	ck_assert_int_eq(c.free(), 0);
}
END_TEST

START_TEST(test_take_give_race)
{
	// Posters take one or a few, pollers give them back: the pool never
	// goes negative and ends where it started.
	constexpr size_t kPool = 20; // the two largest takers cannot both hold
	CqCredits c;
	c.open(kPool);
	std::atomic<bool> negative{false};
	std::vector<std::thread> threads;
	for (int t = 0; t < 4; t++)
		threads.emplace_back([&, t] {
			const size_t n = 1 + static_cast<size_t>(t) * 5; // 1, 6, 11, 16
			for (int i = 0; i < 20000; i++) {
				if (c.take(n)) {
					if (c.free() < 0)
						negative = true;
					c.give(n);
				}
			}
		});
	for (auto &t : threads)
		t.join();
	ck_assert(!negative);
	ck_assert_int_eq(c.free(), static_cast<ptrdiff_t>(kPool));
}
END_TEST

} // namespace

Suite *cq_credits_suite()
{
	Suite *s = suite_create("cq_credits");
	TCase *tc = tcase_create("cq_credits");
	tcase_add_test(tc, test_entries_limit);
	tcase_add_test(tc, test_own_rx_limit);
	tcase_add_test(tc, test_reserve_grows_by_what_is_missing);
	tcase_add_test(tc, test_reserve_stops_at_seven_eighths);
	tcase_add_test(tc, test_tiny_device);
	tcase_add_test(tc, test_resize_refused_or_useless);
	tcase_add_test(tc, test_device_rounds_up);
	tcase_add_test(tc, test_attach_refused);
	tcase_add_test(tc, test_take_is_all_or_nothing);
	tcase_add_test(tc, test_take_give_race);
	suite_add_tcase(s, tc);
	return s;
}
