// The delivery-complete chain plan (src/dc_chain.h): only a shared write
// with FI_MORE on an uncredited queue drops its read-back, and only while
// the ring keeps room for the read and its writes stay within the signal
// period (15 single writes after a signaled request, none with a period of
// 0); the next operation proves them with its own read-back when it is a
// shared write that fits the chain, else vrma's read closes them first;
// the retire walk completes only a deferred operation's last request, and
// vrma's read reports nothing.
#include "unit.h"
#include "dc_chain.h"

#include <vector>

using vrma::DcMark;
namespace dc = vrma::dc;

namespace {

constexpr size_t kChainMax = 32; // MoreChain::kMaxWr

dc::Queue fresh(size_t depth = 384, uint64_t period = 16)
{
	return {0, 0, depth, 0, period};
}

START_TEST(test_may_defer)
{
	ck_assert(dc::may_defer({true, true, 2}, false));
	ck_assert(dc::may_defer({true, true, 82}, false));
	ck_assert(!dc::may_defer({false, true, 2}, false)); // not a shared write
	ck_assert(!dc::may_defer({true, false, 2}, false)); // no FI_MORE
	ck_assert(!dc::may_defer({true, true, 1}, false));  // the read-back alone
	ck_assert(!dc::may_defer({true, true, 0}, false));
	ck_assert(!dc::may_defer({true, true, 2}, true));   // credited queue
}
END_TEST

START_TEST(test_window_ring)
{
	// The ring: the writes and the read within tx_depth.
	dc::Queue q = fresh(8);
	q.head = 100;
	q.last_signaled = 99;
	q.outstanding = 6;
	ck_assert(dc::window_fits({true, true, 2}, q));  // 6 + 2 = 8
	ck_assert(!dc::window_fits({true, true, 3}, q)); // 9
	q.outstanding = 7;
	ck_assert(!dc::window_fits({true, true, 2}, q));
	q.outstanding = 0;
	ck_assert(dc::window_fits({true, true, 8}, q)); // last write 106: 7 past
	ck_assert(!dc::window_fits({true, true, 9}, q)); // the ring
	q.signal_period = 7;
	ck_assert(!dc::window_fits({true, true, 8}, q)); // 7 past: the period
	ck_assert(dc::window_fits({true, true, 7}, q));
}
END_TEST

START_TEST(test_window_signal_period)
{
	// The last write (head + wrs - 2) at most period - 1 after the last
	// signaled request.
	dc::Queue q = fresh();
	q.last_signaled = 1000;
	q.head = 1001;
	ck_assert(dc::window_fits({true, true, 2}, q));  // 1001: 1 past
	ck_assert(dc::window_fits({true, true, 16}, q)); // 1015: 15 past
	ck_assert(!dc::window_fits({true, true, 17}, q)); // 1016: 16 past
	q.head = 1015;
	ck_assert(dc::window_fits({true, true, 2}, q));
	q.head = 1016;
	ck_assert(!dc::window_fits({true, true, 2}, q));
	// A fresh connection (nothing signaled yet, sequence 0).
	ck_assert(dc::window_fits({true, true, 2}, fresh()));
	ck_assert(dc::window_fits({true, true, 17}, fresh()));
	ck_assert(!dc::window_fits({true, true, 18}, fresh()));
	// A queue of depth 0 or 1 signals everything: period 0, no deferral.
	ck_assert(!dc::window_fits({true, true, 2}, fresh(384, 0)));
	// Sequences near the top of the 64-bit range.
	q.last_signaled = UINT64_MAX - 4;
	q.head = UINT64_MAX - 3;
	ck_assert(dc::window_fits({true, true, 2}, q));
	q.head = UINT64_MAX;
	ck_assert(dc::window_fits({true, true, 13}, q)); // last write wraps to 10: 15 past
	ck_assert(!dc::window_fits({true, true, 14}, q));
}
END_TEST

START_TEST(test_plan_undeferred)
{
	// Nothing deferred: the operation goes as alone.
	auto p = dc::plan_undeferred({true, false, 2}, false, kChainMax);
	ck_assert(p.mark == DcMark::None && !p.close_first);
	p = dc::plan_undeferred({false, false, 5}, false, kChainMax);
	ck_assert(p.mark == DcMark::None && !p.close_first);
	// Deferred writes wait: a shared write that fits the chain proves them.
	p = dc::plan_undeferred({true, false, 2}, true, kChainMax);
	ck_assert(p.mark == DcMark::Proof && !p.close_first);
	p = dc::plan_undeferred({true, true, 32}, true, kChainMax);
	ck_assert(p.mark == DcMark::Proof && !p.close_first);
	// Too long for the chain, or not a shared write: vrma's read first.
	p = dc::plan_undeferred({true, false, 33}, true, kChainMax);
	ck_assert(p.mark == DcMark::None && p.close_first);
	p = dc::plan_undeferred({false, true, 1}, true, kChainMax);
	ck_assert(p.mark == DcMark::None && p.close_first);
}
END_TEST

START_TEST(test_signals)
{
	// Deferred: no signal, the last signaled sequence kept, chain open.
	auto s = dc::signals_for(DcMark::Deferred, 200, 3, 190);
	ck_assert(!s.signal_last);
	ck_assert_uint_eq(s.last_signaled, 190);
	ck_assert(s.open);
	// A proof: its read-back (the last request) signaled, chain closed.
	s = dc::signals_for(DcMark::Proof, 200, 3, 190);
	ck_assert(s.signal_last);
	ck_assert_uint_eq(s.last_signaled, 202);
	ck_assert(!s.open);
}
END_TEST

START_TEST(test_retire_side)
{
	ck_assert(dc::completes_deferred(DcMark::Deferred, true, false, false));
	ck_assert(!dc::completes_deferred(DcMark::Deferred, false, false, false)); // not its last
	ck_assert(!dc::completes_deferred(DcMark::Deferred, true, true, false));   // the completed slot
	ck_assert(!dc::completes_deferred(DcMark::Deferred, true, false, true));   // closing
	for (DcMark m : {DcMark::None, DcMark::Proof, DcMark::Closer})
		ck_assert(!dc::completes_deferred(m, true, false, false));

	ck_assert(dc::reports(DcMark::None));
	ck_assert(dc::reports(DcMark::Deferred));
	ck_assert(dc::reports(DcMark::Proof));
	ck_assert(!dc::reports(DcMark::Closer));
}
END_TEST

// The provider's sequence (post_send_chain_locked, dc_plan, dc_mark,
// close_deferred) on a model queue whose chain holds kChainMax requests.
struct Model {
	dc::Queue q = fresh();
	bool credited = false;
	bool open = false;
	size_t chain = 0;          // requests held back
	std::vector<DcMark> marks; // per sequence

	void push(size_t n, DcMark m, bool signal_last)
	{
		for (size_t i = 0; i < n; i++)
			marks.push_back(m);
		q.head += n;
		q.outstanding += n;
		chain += n;
		if (signal_last)
			q.last_signaled = q.head - 1;
	}
	void close()
	{
		open = false;
		push(1, DcMark::Closer, true);
	}
	// One shared write of `wrs` requests (its read-back last).
	DcMark write(size_t wrs, bool more)
	{
		const dc::Op op{true, more, wrs};
		DcMark m = DcMark::None;
		if (dc::may_defer(op, credited) && dc::window_fits(op, q) && chain + wrs - 1 + 1 <= kChainMax) {
			m = DcMark::Deferred;
		} else {
			const dc::Plan p = dc::plan_undeferred(op, open, kChainMax);
			if (p.close_first)
				close();
			m = p.mark;
		}
		const uint64_t first = q.head, prev = q.last_signaled;
		const size_t n = m == DcMark::Deferred ? wrs - 1 : wrs;
		push(n, m, true); // the plain path signals the operation's end
		if (m != DcMark::None) {
			const dc::Signals s = dc::signals_for(m, first, n, prev);
			q.last_signaled = s.last_signaled;
			open = s.open;
		}
		if (!more) {
			if (open)
				close();
			chain = 0; // the doorbell
		}
		return m;
	}
};

START_TEST(test_model_chain)
{
	// Right after a signaled request, 15 single writes with FI_MORE drop
	// their read-backs; the 16th would put a write 16 past it: it proves
	// the 15 with its own read-back.
	Model m;
	m.q.head = 1;
	m.q.last_signaled = 0;
	for (int i = 0; i < 15; i++)
		ck_assert(m.write(2, true) == DcMark::Deferred);
	ck_assert(m.open);
	ck_assert_uint_eq(m.q.last_signaled, 0);
	ck_assert(m.write(2, true) == DcMark::Proof);
	ck_assert(!m.open);
	ck_assert_uint_eq(m.q.last_signaled, 17); // 15 writes, then write + read
	// FI_MORE's end with deferred writes: vrma's read closes them.
	ck_assert(m.write(2, true) == DcMark::Deferred);
	ck_assert(m.write(2, false) == DcMark::Proof);
	ck_assert(!m.open);
	ck_assert(m.write(2, true) == DcMark::Deferred);
	m.write(2, true);
	ck_assert(m.open);
	const size_t before = m.marks.size();
	// An operation that is no shared write: the read goes first.
	const dc::Plan p = dc::plan_undeferred({false, false, 1}, m.open, kChainMax);
	ck_assert(p.close_first);
	m.close();
	ck_assert(m.marks[before] == DcMark::Closer);
	ck_assert(!m.open);
}
END_TEST

START_TEST(test_model_credited_and_small)
{
	// A credited queue never defers; a shallow queue (depth 1: period 0)
	// neither.
	Model credited;
	credited.credited = true;
	for (int i = 0; i < 4; i++)
		ck_assert(credited.write(2, true) == DcMark::None);
	Model shallow;
	shallow.q = fresh(1, 0);
	ck_assert(shallow.write(2, true) == DcMark::None);
	// A ring of depth 4 (period 2): one write fits the window.
	Model small;
	small.q = fresh(4, 2);
	small.q.head = 1;
	ck_assert(small.write(2, true) == DcMark::Deferred);
	ck_assert(small.write(2, true) == DcMark::Proof);
}
END_TEST

} // namespace

Suite *dc_chain_suite()
{
	Suite *s = suite_create("dc_chain");
	TCase *tc = tcase_create("dc_chain");
	tcase_add_test(tc, test_may_defer);
	tcase_add_test(tc, test_window_ring);
	tcase_add_test(tc, test_window_signal_period);
	tcase_add_test(tc, test_plan_undeferred);
	tcase_add_test(tc, test_signals);
	tcase_add_test(tc, test_retire_side);
	tcase_add_test(tc, test_model_chain);
	tcase_add_test(tc, test_model_credited_and_small);
	suite_add_tcase(s, tc);
	return s;
}
