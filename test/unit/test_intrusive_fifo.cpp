// IntrusiveFifo: order, links cleared on the way out, interleaved use, and a
// move that leaves the source empty.
#include "unit.h"
#include "intrusive_fifo.h"

#include <vector>

namespace {

struct Node {
	int v = 0;
	Node *link = reinterpret_cast<Node *>(0x1); // garbage until queued
};
using Fifo = vrma::IntrusiveFifo<Node, &Node::link>;

START_TEST(test_order_and_links)
{
	std::vector<Node> n(5);
	Fifo q;
	ck_assert(q.empty());
	ck_assert_ptr_null(q.pop_front());
	for (int i = 0; i < 5; i++) {
		n[i].v = i;
		q.push_back(&n[i]);
	}
	ck_assert_uint_eq(q.size(), 5);
	ck_assert_ptr_eq(q.front(), &n[0]);
	ck_assert_ptr_null(n[4].link);
	for (int i = 0; i < 5; i++) {
		Node *e = q.pop_front();
		ck_assert_ptr_nonnull(e);
		ck_assert_int_eq(e->v, i);
		ck_assert_ptr_null(e->link);
		ck_assert_uint_eq(q.size(), size_t(4 - i));
	}
	ck_assert(q.empty());
	ck_assert_ptr_null(q.front());
	ck_assert_ptr_null(q.pop_front());
}
END_TEST

// Emptied and refilled through its tail: no stale tail survives.
START_TEST(test_interleaved)
{
	std::vector<Node> n(3);
	for (int i = 0; i < 3; i++)
		n[i].v = i;
	Fifo q;
	q.push_back(&n[0]);
	ck_assert_ptr_eq(q.pop_front(), &n[0]);
	q.push_back(&n[1]);
	q.push_back(&n[2]);
	ck_assert_ptr_eq(q.pop_front(), &n[1]);
	q.push_back(&n[0]);
	ck_assert_ptr_eq(q.pop_front(), &n[2]);
	ck_assert_ptr_eq(q.pop_front(), &n[0]);
	ck_assert(q.empty());
	ck_assert_uint_eq(q.size(), 0);
}
END_TEST

START_TEST(test_move)
{
	std::vector<Node> n(2);
	Fifo a;
	a.push_back(&n[0]);
	a.push_back(&n[1]);
	Fifo b(std::move(a));
	ck_assert(a.empty());
	ck_assert_uint_eq(a.size(), 0);
	ck_assert_uint_eq(b.size(), 2);
	Fifo c;
	c = std::move(b);
	ck_assert(b.empty());
	ck_assert_ptr_eq(c.pop_front(), &n[0]);
	ck_assert_ptr_eq(c.pop_front(), &n[1]);
	a.push_back(&n[1]); // the moved-from list works again
	ck_assert_ptr_eq(a.front(), &n[1]);
}
END_TEST

} // namespace

Suite *intrusive_fifo_suite()
{
	Suite *s = suite_create("intrusive_fifo");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_order_and_links);
	tcase_add_test(tc, test_interleaved);
	tcase_add_test(tc, test_move);
	suite_add_tcase(s, tc);
	return s;
}
