// peers::Limit and longest_idle (src/peer_limit.h): the marks of a bound
// (full at max, over above three quarters, back down to half), a bound of
// at least 2, and the choice of the longest idle peers, checked against a
// sort on random tables.
#include "unit.h"
#include "peer_limit.h"

#include <algorithm>
#include <random>
#include <vector>

using vrma::peers::Idle;
using vrma::peers::Limit;
using vrma::peers::longest_idle;

namespace {

START_TEST(test_marks)
{
	const Limit l = Limit::of(8192);
	ck_assert_uint_eq(l.high(), 6144);
	ck_assert_uint_eq(l.low(), 4096);
	ck_assert(!l.full(8191));
	ck_assert(l.full(8192));
	ck_assert(!l.over(6144));
	ck_assert(l.over(6145));
	ck_assert_uint_eq(l.excess(6145), 2049);
	ck_assert_uint_eq(l.excess(4096), 0);
	ck_assert_uint_eq(l.excess(0), 0);
	// The smallest bound still leaves room to take one back.
	const Limit s = Limit::of(0);
	ck_assert_uint_eq(s.max, 2);
	ck_assert(s.full(2));
	ck_assert(!s.full(1));
	ck_assert_uint_eq(s.low(), 1);
	ck_assert(!s.over(2));
	ck_assert(s.over(3));
	const Limit four = Limit::of(4);
	ck_assert_uint_eq(four.high(), 3);
	ck_assert_uint_eq(four.low(), 2);
	ck_assert(four.over(4));
	ck_assert_uint_eq(four.excess(4), 2);
	// Every bound: low <= high <= max, and a full table is over or at high.
	for (size_t m = 0; m < 300; m++) {
		const Limit x = Limit::of(m);
		ck_assert(x.low() <= x.high() && x.high() <= x.max);
		ck_assert(x.low() >= 1);
		ck_assert_uint_eq(x.excess(x.max), x.max - x.low());
	}
}
END_TEST

START_TEST(test_longest_idle)
{
	std::vector<Idle<int>> v = {{1, 50}, {2, 10}, {3, 40}, {4, 20}, {5, 30}};
	ck_assert_uint_eq(longest_idle(v, 2), 2);
	std::vector<int> who;
	for (auto &i : v)
		who.push_back(i.who);
	std::sort(who.begin(), who.end());
	ck_assert_int_eq(who[0], 2);
	ck_assert_int_eq(who[1], 4);
	// More asked than there are: all kept.
	std::vector<Idle<int>> w = {{7, 1}, {8, 2}};
	ck_assert_uint_eq(longest_idle(w, 5), 2);
	ck_assert_uint_eq(longest_idle(w, 0), 0);
	ck_assert(w.empty());
}
END_TEST

START_TEST(test_longest_idle_random)
{
	std::mt19937_64 rng(12345);
	for (int round = 0; round < 500; round++) {
		const size_t n = rng() % 64;
		std::vector<Idle<size_t>> v;
		for (size_t i = 0; i < n; i++)
			v.push_back({i, rng() % 1000});
		std::vector<uint64_t> sorted;
		for (auto &i : v)
			sorted.push_back(i.since);
		std::sort(sorted.begin(), sorted.end());
		const size_t k = n ? rng() % (n + 2) : 0;
		const size_t kept = longest_idle(v, k);
		ck_assert_uint_eq(kept, std::min(k, n));
		// The kept ones are exactly as idle as the k longest: the same
		// multiset of times.
		std::vector<uint64_t> got;
		for (auto &i : v)
			got.push_back(i.since);
		std::sort(got.begin(), got.end());
		ck_assert(std::equal(got.begin(), got.end(), sorted.begin()));
	}
}
END_TEST

} // namespace

Suite *peer_limit_suite()
{
	Suite *s = suite_create("peer_limit");
	TCase *tc = tcase_create("peer_limit");
	tcase_add_test(tc, test_marks);
	tcase_add_test(tc, test_longest_idle);
	tcase_add_test(tc, test_longest_idle_random);
	suite_add_tcase(s, tc);
	return s;
}
