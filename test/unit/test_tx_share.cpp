// TxShare (src/tx_share.h): a lone connection gets min(cap, pool / 2); seven
// that give nothing back leave an eighth of the pool; each further one takes
// at most half of what remains; a holder of nothing is refused only when
// fewer than two are free; and, under random traffic, one honest
// connection beside seven stalled ones is never refused its first.
#include "unit.h"
#include "tx_share.h"

#include <random>
#include <vector>

using vrma::flow::TxShare;

namespace {

constexpr size_t kFloor = 16; // the provider's signal period

// A connection that takes while allowed and gives nothing back: what it
// ends up holding, with `free` updated.
size_t greedy(const TxShare &s, size_t &free)
{
	size_t held = 0;
	while (s.allows(held, free)) {
		held++;
		free--;
	}
	return held;
}

START_TEST(test_lone_connection)
{
	for (size_t total : {16, 17, 64, 128, 256, 1000, 4096, 65536}) {
		const TxShare s(total, kFloor);
		const size_t cap = std::max(total / 8, std::min(kFloor, total));
		ck_assert_uint_eq(s.cap(), cap);
		size_t free = total;
		const size_t held = greedy(s, free);
		ck_assert_uint_eq(held, std::min(cap, total / 2));
		ck_assert_uint_eq(held + free, total);
	}
	// A pool smaller than the floor: the cap is the pool.
	ck_assert_uint_eq(TxShare(10, kFloor).cap(), 10);
}
END_TEST

START_TEST(test_seven_stalled_leave_an_eighth)
{
	for (size_t total : {128, 256, 1024, 65536}) {
		const TxShare s(total, kFloor);
		size_t free = total;
		for (int k = 0; k < 7; k++)
			ck_assert_uint_eq(greedy(s, free), total / 8);
		ck_assert_uint_ge(free, total / 8);
		// The rest can still go in and out.
		size_t held = greedy(s, free);
		ck_assert_uint_gt(held, 0);
		ck_assert(s.allows(held - 1, free + 1));
	}
}
END_TEST

START_TEST(test_further_stalled_halve)
{
	const TxShare s(256, kFloor);
	size_t free = 256;
	for (int k = 0; k < 7; k++)
		(void)greedy(s, free);
	int more = 0;
	while (free >= 2) {
		const size_t before = free;
		const size_t held = greedy(s, free);
		ck_assert_uint_ge(held, 1);
		ck_assert_uint_le(held, before / 2);
		more++;
	}
	ck_assert_int_ge(more, 4);
	// A holder of nothing: refused below two free, allowed at two.
	ck_assert(!s.allows(0, 1));
	ck_assert(s.allows(0, 2));
	ck_assert(!s.allows(0, 0));
}
END_TEST

START_TEST(test_many_at_once)
{
	const TxShare s(256, kFloor);
	ck_assert(s.allows(0, 256, 32));
	ck_assert(!s.allows(0, 256, 33));   // beyond the cap
	ck_assert(!s.allows(1, 256, 32));
	ck_assert(!s.allows(0, 63, 32));    // afterwards more held than free
	ck_assert(s.allows(0, 64, 32));
	ck_assert(s.allows(0, 0, 0)); // nothing asked, nothing refused
}
END_TEST

// Seven stalled connections that take whenever allowed and never give
// back, one honest that takes and gives back at random, in random order:
// the pool's books stay exact, nobody passes the cap, and the honest
// connection is never refused while it holds nothing.
START_TEST(test_random_against_model)
{
	std::mt19937_64 rng(26);
	for (size_t total : {16, 64, 256, 4096}) {
		const TxShare s(total, kFloor);
		std::vector<size_t> stalled(7, 0);
		size_t honest = 0, free = total;
		// Plain tests inside the loop: check's assertions each write a
		// mark to the test's pipe.
		for (int step = 0; step < 200000; step++) {
			const size_t who = rng() % 9;
			if (who < 7) {
				if (s.allows(stalled[who], free)) {
					stalled[who]++;
					free--;
				}
			} else if (who == 7 || honest == 0) {
				const bool ok = s.allows(honest, free);
				if (!ok && honest == 0 && total >= 8 * kFloor)
					ck_abort_msg("pool %zu: the honest connection refused its first (free %zu)", total,
						     free);
				if (ok) {
					honest++;
					free--;
				}
			} else {
				honest--;
				free++;
			}
			size_t sum = honest + free;
			bool capped = honest <= s.cap();
			for (size_t h : stalled) {
				capped = capped && h <= s.cap();
				sum += h;
			}
			if (sum != total || !capped)
				ck_abort_msg("pool %zu, step %d: %zu accounted, a holder past the cap: %d", total, step,
					     sum, !capped);
		}
	}
}
END_TEST

} // namespace

Suite *tx_share_suite()
{
	Suite *s = suite_create("tx_share");
	TCase *tc = tcase_create("tx_share");
	tcase_add_test(tc, test_lone_connection);
	tcase_add_test(tc, test_seven_stalled_leave_an_eighth);
	tcase_add_test(tc, test_further_stalled_halve);
	tcase_add_test(tc, test_many_at_once);
	tcase_add_test(tc, test_random_against_model);
	suite_add_tcase(s, tc);
	return s;
}
