// RxBudget (src/rx_budget.h): charges up to the limit keep quietly, the
// first charge past it pauses its connection, a paused connection gets
// exactly `grace` more and is refused after, releases resume only at half
// the limit, resumed() keeps the paused count exact, and a resource held
// over its bound pauses with the same grace and holds every resume.
#include "unit.h"
#include "rx_budget.h"

#include <random>
#include <vector>

using vrma::flow::PeerRx;
using vrma::flow::RxBudget;
using vrma::flow::Verdict;

namespace {

START_TEST(test_keep_until_limit)
{
	RxBudget b(1000, 4);
	PeerRx p;
	for (int i = 0; i < 10; i++)
		ck_assert(b.admit(p, 100) == Verdict::Keep);
	ck_assert_uint_eq(b.used(), 1000);
	ck_assert(!p.paused);
	ck_assert(b.admit(p, 1) == Verdict::KeepAndPause);
	ck_assert(p.paused);
	ck_assert_uint_eq(b.paused(), 1);
	ck_assert_uint_eq(b.used(), 1001);
}
END_TEST

START_TEST(test_grace_then_refuse)
{
	RxBudget b(100, 3);
	PeerRx p;
	ck_assert(b.admit(p, 200) == Verdict::KeepAndPause);
	for (int i = 0; i < 3; i++)
		ck_assert(b.admit(p, 10) == Verdict::Keep);
	ck_assert_uint_eq(b.used(), 230);
	ck_assert(b.admit(p, 10) == Verdict::Refuse);
	ck_assert(b.admit(p, 10) == Verdict::Refuse);
	ck_assert_uint_eq(b.used(), 230); // refused ones are not charged
	// Another connection is paused on its own first charge, with its own
	// grace.
	PeerRx q;
	ck_assert(b.admit(q, 1) == Verdict::KeepAndPause);
	ck_assert_uint_eq(b.paused(), 2);
	for (int i = 0; i < 3; i++)
		ck_assert(b.admit(q, 1) == Verdict::Keep);
	ck_assert(b.admit(q, 1) == Verdict::Refuse);
}
END_TEST

// Resume at half the limit, not before; then a connection starts over.
START_TEST(test_resume_hysteresis)
{
	RxBudget b(1000, 8);
	PeerRx p, q;
	ck_assert(b.admit(p, 600) == Verdict::Keep);
	ck_assert(b.admit(q, 600) == Verdict::KeepAndPause);
	ck_assert(b.admit(p, 100) == Verdict::KeepAndPause);
	ck_assert_uint_eq(b.used(), 1300);
	ck_assert(!b.release(600)); // 700: above half
	ck_assert(!b.release(100)); // 600
	ck_assert(b.release(100));  // 500: half
	b.resumed(p);
	b.resumed(q);
	ck_assert_uint_eq(b.paused(), 0);
	ck_assert(!p.paused && !q.paused);
	ck_assert(!b.release(100)); // nobody paused: nothing to resume
	ck_assert(b.admit(p, 100) == Verdict::Keep);
	ck_assert_uint_eq(b.used(), 500);
}
END_TEST

// resumed() of a connection that is not paused (it ended, or was resumed
// already) changes no count; an over-release never wraps.
START_TEST(test_resumed_idempotent)
{
	RxBudget b(10, 1);
	PeerRx p, q;
	b.resumed(q);
	ck_assert_uint_eq(b.paused(), 0);
	ck_assert(b.admit(p, 20) == Verdict::KeepAndPause);
	b.resumed(p);
	b.resumed(p);
	ck_assert_uint_eq(b.paused(), 0);
	ck_assert(!b.release(1000));
	ck_assert_uint_eq(b.used(), 0);
}
END_TEST

// Random traffic from several connections against a model: the charge is
// the sum of what was kept and not released, no connection is ever kept
// beyond its grace while paused, and the charge never exceeds the bound
// the header states (limit + connections x (grace + 1) x largest cost).
START_TEST(test_random_against_model)
{
	constexpr size_t kLimit = 5000, kGrace = 6, kConns = 5, kMaxCost = 300;
	RxBudget b(kLimit, kGrace);
	std::vector<PeerRx> conns(kConns);
	std::vector<std::vector<size_t>> kept(kConns);
	std::vector<size_t> since(kConns, 0);
	std::mt19937 rng(1234);
	size_t model = 0;
	for (int step = 0; step < 200000; step++) {
		const size_t c = rng() % kConns;
		if (rng() % 2) {
			const size_t cost = 1 + rng() % kMaxCost;
			const bool was_paused = conns[c].paused;
			const Verdict v = b.admit(conns[c], cost);
			if (was_paused) {
				if (since[c] == kGrace) {
					ck_assert(v == Verdict::Refuse);
					continue;
				}
				ck_assert(v == Verdict::Keep);
				since[c]++;
			} else {
				ck_assert(v == (model + cost > kLimit ? Verdict::KeepAndPause : Verdict::Keep));
				if (v == Verdict::KeepAndPause)
					since[c] = 0;
			}
			kept[c].push_back(cost);
			model += cost;
		} else if (!kept[c].empty()) {
			const size_t cost = kept[c].back();
			kept[c].pop_back();
			model -= cost;
			if (b.release(cost)) {
				ck_assert_uint_le(model, kLimit / 2);
				for (size_t k = 0; k < kConns; k++)
					b.resumed(conns[k]);
				ck_assert_uint_eq(b.paused(), 0);
			}
		}
		ck_assert_uint_eq(b.used(), model);
		ck_assert_uint_le(model, kLimit + kConns * (kGrace + 1) * kMaxCost);
		size_t paused = 0;
		for (const PeerRx &p : conns)
			paused += p.paused;
		ck_assert_uint_eq(b.paused(), paused);
	}
}
END_TEST

// The other resource (the application's CQ) over its bound: its entries
// pause their connection and count against the same grace; nothing is
// charged; no release resumes before unhold(), and unhold() resumes only
// when the budget itself is at half its limit.
START_TEST(test_held_resource)
{
	RxBudget b(1000, 2);
	PeerRx p, q;
	ck_assert(b.admit(q, 600) == Verdict::Keep);
	ck_assert(!b.held());
	ck_assert(b.admit_held(p) == Verdict::KeepAndPause);
	ck_assert(b.held() && p.paused);
	ck_assert_uint_eq(b.paused(), 1);
	ck_assert_uint_eq(b.used(), 600);
	ck_assert(b.admit_held(p) == Verdict::Keep);
	ck_assert(b.admit(p, 10) == Verdict::Keep); // one grace for both
	ck_assert(b.admit_held(p) == Verdict::Refuse);
	ck_assert(b.admit(p, 10) == Verdict::Refuse);
	// Held: even an empty budget resumes nobody.
	ck_assert(!b.release(610));
	ck_assert_uint_eq(b.used(), 0);
	ck_assert(b.unhold());
	ck_assert(!b.held());
	b.resumed(p);
	ck_assert_uint_eq(b.paused(), 0);
	// unhold() while the budget is over half its limit: the budget's own
	// release resumes later.
	ck_assert(b.admit(q, 900) == Verdict::Keep);
	ck_assert(b.admit_held(p) == Verdict::KeepAndPause);
	ck_assert(!b.unhold());
	ck_assert(!b.release(300));
	ck_assert(b.release(200));
	// reset() forgets the hold.
	ck_assert(b.admit_held(q) == Verdict::KeepAndPause);
	b.reset(1000, 2);
	ck_assert(!b.held());
	ck_assert_uint_eq(b.paused(), 0);
}
END_TEST

} // namespace

Suite *rx_budget_suite()
{
	Suite *s = suite_create("rx_budget");
	TCase *tc = tcase_create("rx_budget");
	tcase_add_test(tc, test_keep_until_limit);
	tcase_add_test(tc, test_grace_then_refuse);
	tcase_add_test(tc, test_resume_hysteresis);
	tcase_add_test(tc, test_resumed_idempotent);
	tcase_add_test(tc, test_random_against_model);
	tcase_add_test(tc, test_held_resource);
	suite_add_tcase(s, tc);
	return s;
}
