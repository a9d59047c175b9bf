// SlotRing: capacity rounding, push/unpush accounting, in-order retirement
// that is idempotent and bounded by head, wrap-around, and one producer
// racing one consumer.
#include "unit.h"
#include "slot_ring.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

using vrma::SlotRing;

namespace {

struct Slot {
	uint64_t seq = 0;
	uint64_t cookie = 0;
};

// Fills the next slot with its own sequence number and publishes it.
void push_seq(SlotRing<Slot> &ring)
{
	Slot &s = ring.next();
	s.seq = ring.head();
	s.cookie = ~s.seq;
	ring.push();
}

} // namespace

START_TEST(ring_capacity_is_next_power_of_two)
{
	struct {
		size_t depth;
		size_t capacity;
	} const cases[] = {{1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {8, 8},
			   {9, 16}, {100, 128}, {1000, 1024}, {1024, 1024}, {1025, 2048}};
	for (const auto &c : cases) {
		SlotRing<Slot> ring(c.depth);
		ck_assert_msg(ring.capacity() == c.capacity, "depth %zu: capacity %zu, want %zu",
			      c.depth, ring.capacity(), c.capacity);
		ck_assert_uint_eq(ring.depth(), c.depth);
	}
}
END_TEST

// seq_of finds an outstanding slot's sequence from its place alone, on
// every lap and wherever the tail is.
START_TEST(ring_seq_of_outstanding_slots)
{
	SlotRing<Slot> ring(8);
	for (int lap = 0; lap < 5; lap++) {
		for (int i = 0; i < 5; i++)
			ring.push(); // unwritten: the slots keep older contents
		for (uint64_t seq = ring.tail(); seq < ring.head(); seq++)
			ck_assert_msg(ring.seq_of(ring.at(seq)) == seq, "lap %d: seq %llu: got %llu",
				      lap, static_cast<unsigned long long>(seq),
				      static_cast<unsigned long long>(ring.seq_of(ring.at(seq))));
		ring.retire_through(ring.tail() + 2, [](Slot &, uint64_t) {});
		for (uint64_t seq = ring.tail(); seq < ring.head(); seq++)
			ck_assert_uint_eq(ring.seq_of(ring.at(seq)), seq);
		ring.retire_through(ring.head() - 1, [](Slot &, uint64_t) {});
	}
	ck_assert_uint_eq(ring.head(), 25);
}
END_TEST

START_TEST(ring_starts_empty)
{
	SlotRing<Slot> ring(5);
	ck_assert_uint_eq(ring.head(), 0);
	ck_assert_uint_eq(ring.tail(), 0);
	ck_assert_uint_eq(ring.outstanding(), 0);
	ck_assert_uint_eq(ring.free_slots(), 5);
	ck_assert(!ring.full());
}
END_TEST

START_TEST(ring_push_unpush_accounting)
{
	SlotRing<Slot> ring(5);
	push_seq(ring);
	push_seq(ring);
	push_seq(ring);
	ck_assert_uint_eq(ring.head(), 3);
	ck_assert_uint_eq(ring.outstanding(), 3);
	ck_assert_uint_eq(ring.free_slots(), 2);
	ck_assert(!ring.full());
	// next() is the slot the following push publishes.
	ck_assert_ptr_eq(&ring.next(), &ring.at(3));

	// A failed post takes its slot back.
	ring.unpush();
	ck_assert_uint_eq(ring.head(), 2);
	ck_assert_uint_eq(ring.outstanding(), 2);
	ck_assert_uint_eq(ring.free_slots(), 3);
	ck_assert_ptr_eq(&ring.next(), &ring.at(2));
	ck_assert_uint_eq(ring.at(0).seq, 0);
	ck_assert_uint_eq(ring.at(1).seq, 1);

	// publish(seq) is push() for a producer that read head() once.
	const uint64_t seq = ring.head();
	ring.at(seq).seq = seq;
	ring.publish(seq);
	ck_assert_uint_eq(ring.head(), 3);
	ck_assert_uint_eq(ring.outstanding(), 3);
	ck_assert_uint_eq(ring.at(2).seq, 2);
}
END_TEST

START_TEST(ring_full_at_depth_not_capacity)
{
	SlotRing<Slot> ring(5); // capacity 8
	for (int i = 0; i < 4; i++) {
		push_seq(ring);
		ck_assert(!ring.full());
	}
	push_seq(ring);
	ck_assert(ring.full());
	ck_assert_uint_eq(ring.outstanding(), 5);
	ck_assert_uint_eq(ring.free_slots(), 0);

	// Retiring one slot makes room again.
	size_t n = ring.retire_through(0, [](Slot &, uint64_t) {});
	ck_assert_uint_eq(n, 1);
	ck_assert(!ring.full());
	ck_assert_uint_eq(ring.free_slots(), 1);
}
END_TEST

START_TEST(ring_retire_in_order)
{
	SlotRing<Slot> ring(8);
	for (int i = 0; i < 6; i++)
		push_seq(ring);

	std::vector<uint64_t> seen;
	size_t n = ring.retire_through(3, [&](Slot &s, uint64_t seq) {
		ck_assert_uint_eq(s.seq, seq);
		ck_assert_uint_eq(s.cookie, ~seq);
		seen.push_back(seq);
	});
	ck_assert_uint_eq(n, 4);
	ck_assert_uint_eq(seen.size(), 4);
	for (size_t i = 0; i < seen.size(); i++)
		ck_assert_uint_eq(seen[i], i);
	ck_assert_uint_eq(ring.tail(), 4);
	ck_assert_uint_eq(ring.outstanding(), 2);

	// The next completion continues where the last one stopped.
	seen.clear();
	n = ring.retire_through(5, [&](Slot &, uint64_t seq) { seen.push_back(seq); });
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(seen.size(), 2);
	ck_assert_uint_eq(seen[0], 4);
	ck_assert_uint_eq(seen[1], 5);
	ck_assert_uint_eq(ring.outstanding(), 0);
}
END_TEST

START_TEST(ring_retire_is_idempotent)
{
	SlotRing<Slot> ring(8);
	for (int i = 0; i < 5; i++)
		push_seq(ring);
	ck_assert_uint_eq(ring.retire_through(2, [](Slot &, uint64_t) {}), 3);

	// A flush reports sequences that are already retired: nothing happens.
	int calls = 0;
	auto count = [&](Slot &, uint64_t) { calls++; };
	ck_assert_uint_eq(ring.retire_through(2, count), 0);
	ck_assert_uint_eq(ring.retire_through(1, count), 0);
	ck_assert_uint_eq(ring.retire_through(0, count), 0);
	ck_assert_int_eq(calls, 0);
	ck_assert_uint_eq(ring.tail(), 3);
	ck_assert_uint_eq(ring.outstanding(), 2);

	// A later sequence still retires the rest.
	ck_assert_uint_eq(ring.retire_through(4, count), 2);
	ck_assert_int_eq(calls, 2);
	ck_assert_uint_eq(ring.tail(), 5);
}
END_TEST

START_TEST(ring_never_retires_past_head)
{
	SlotRing<Slot> ring(4);
	int calls = 0;
	auto count = [&](Slot &, uint64_t) { calls++; };

	// Empty ring: nothing to retire, whatever the sequence.
	ck_assert_uint_eq(ring.retire_through(0, count), 0);
	ck_assert_uint_eq(ring.retire_through(UINT64_MAX, count), 0);
	ck_assert_int_eq(calls, 0);
	ck_assert_uint_eq(ring.tail(), 0);

	push_seq(ring);
	push_seq(ring);
	push_seq(ring);
	ck_assert_uint_eq(ring.retire_through(100, count), 3);
	ck_assert_int_eq(calls, 3);
	ck_assert_uint_eq(ring.tail(), 3);
	ck_assert_uint_eq(ring.head(), 3);
	ck_assert_uint_eq(ring.outstanding(), 0);

	// A slot taken back with unpush() is not retired either.
	push_seq(ring);
	push_seq(ring);
	ring.unpush();
	uint64_t last = 0;
	ck_assert_uint_eq(ring.retire_through(UINT64_MAX, [&](Slot &, uint64_t seq) { last = seq; }),
			  1);
	ck_assert_uint_eq(last, 3);
	ck_assert_uint_eq(ring.tail(), 4);
	ck_assert_uint_eq(ring.head(), 4);
}
END_TEST

START_TEST(ring_wraps_around)
{
	constexpr uint64_t kPushes = 10000;
	SlotRing<Slot> ring(5);
	ck_assert_uint_eq(ring.capacity(), 8);

	uint64_t expect = 0; // next sequence the callback must see
	uint64_t retired = 0;
	auto check = [&](Slot &s, uint64_t seq) {
		ck_assert_uint_eq(seq, expect);
		ck_assert_uint_eq(s.seq, seq);
		ck_assert_uint_eq(s.cookie, ~seq);
		ck_assert_ptr_eq(&s, &ring.at(seq));
		expect++;
	};
	unsigned step = 0;
	while (ring.head() < kPushes) {
		// Fill up to a varying level, never past depth.
		const size_t want = 1 + step % ring.depth();
		while (ring.outstanding() < want && ring.head() < kPushes) {
			ck_assert(!ring.full());
			push_seq(ring);
		}
		ck_assert_uint_le(ring.outstanding(), ring.depth());
		// Retire a varying number of them (0 to 3, or everything there is).
		const uint64_t count = step % 4;
		if (step % 7 == 6)
			retired += ring.retire_through(UINT64_MAX, check);
		else if (count)
			retired += ring.retire_through(ring.tail() + count - 1, check);
		step++;
	}
	retired += ring.retire_through(kPushes - 1, check);
	ck_assert_uint_eq(retired, kPushes);
	ck_assert_uint_eq(expect, kPushes);
	ck_assert_uint_eq(ring.tail(), kPushes);
	ck_assert_uint_eq(ring.outstanding(), 0);
	// Sequences one capacity apart share a slot.
	ck_assert_ptr_eq(&ring.at(3), &ring.at(3 + ring.capacity()));
	ck_assert_ptr_ne(&ring.at(3), &ring.at(4));
}
END_TEST

START_TEST(ring_reset_starts_over)
{
	SlotRing<Slot> ring(4);
	for (int i = 0; i < 3; i++)
		push_seq(ring);
	ring.retire_through(0, [](Slot &, uint64_t) {});
	ring.reset(9);
	ck_assert_uint_eq(ring.depth(), 9);
	ck_assert_uint_eq(ring.capacity(), 16);
	ck_assert_uint_eq(ring.head(), 0);
	ck_assert_uint_eq(ring.tail(), 0);
	ck_assert_uint_eq(ring.outstanding(), 0);
	ck_assert_uint_eq(ring.at(0).seq, 0);
	ck_assert_uint_eq(ring.at(0).cookie, 0);
}
END_TEST

// fi_enable builds a ring aside and hands it to the endpoint (and back when
// a later step fails): swap exchanges slots, depth and positions.
START_TEST(ring_swap_exchanges_everything)
{
	SlotRing<Slot> built(4), empty;
	for (int i = 0; i < 3; i++)
		push_seq(built);
	built.retire_through(0, [](Slot &, uint64_t) {});
	Slot *slot1 = &built.at(1);
	empty.swap(built);
	ck_assert_uint_eq(empty.depth(), 4);
	ck_assert_uint_eq(empty.head(), 3);
	ck_assert_uint_eq(empty.tail(), 1);
	ck_assert_ptr_eq(&empty.at(1), slot1); // the slots themselves moved
	ck_assert_uint_eq(built.depth(), 0);
	ck_assert_uint_eq(built.outstanding(), 0);
	built.swap(empty);
	ck_assert_uint_eq(built.depth(), 4);
	ck_assert_uint_eq(built.outstanding(), 2);
	ck_assert_ptr_eq(&built.at(1), slot1);
	ck_assert_uint_eq(empty.depth(), 0);
}
END_TEST

START_TEST(ring_producer_consumer_threads)
{
	constexpr uint64_t kItems = 200000;
	constexpr size_t kDepth = 16;
	SlotRing<Slot> ring(kDepth);

	std::atomic<bool> producer_done{false};
	std::atomic<size_t> max_outstanding{0};
	std::atomic<uint64_t> order_errors{0};
	std::atomic<uint64_t> data_errors{0};
	std::atomic<uint64_t> overfull{0};
	// A broken ring can stall both threads: give up with a message well
	// before check's own timeout.
	std::atomic<bool> timed_out{false};
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	auto expired = [&] {
		if (std::chrono::steady_clock::now() > deadline)
			timed_out = true;
		return timed_out.load();
	};

	std::thread producer([&] {
		for (uint64_t i = 0; i < kItems; i++) {
			while (ring.full() && !expired())
				std::this_thread::yield();
			if (timed_out)
				break;
			if (ring.head() != i)
				order_errors++;
			push_seq(ring);
			const size_t out = ring.outstanding();
			if (out > kDepth)
				overfull++;
			size_t prev = max_outstanding.load();
			while (out > prev && !max_outstanding.compare_exchange_weak(prev, out)) {
			}
		}
		producer_done = true;
	});

	uint64_t retired = 0;
	uint64_t expect = 0;
	std::thread consumer([&] {
		unsigned step = 0;
		while (retired < kItems && !expired()) {
			// Completions arrive for a sequence somewhere ahead of the tail,
			// sometimes past head (which must be ignored), sometimes an
			// already-retired one (a flush).
			const uint64_t t = ring.tail();
			uint64_t seq;
			switch (step++ % 4) {
			case 0:
				seq = t + 2;
				break;
			case 1:
				seq = t + kDepth * 4;
				break;
			case 2:
				seq = t ? t - 1 : 0;
				break;
			default:
				seq = t;
				break;
			}
			retired += ring.retire_through(seq, [&](Slot &s, uint64_t sq) {
				if (sq != expect)
					order_errors++;
				if (s.seq != sq || s.cookie != ~sq)
					data_errors++;
				expect = sq + 1;
			});
			if (ring.outstanding() > kDepth)
				overfull++;
			if (step % 64 == 0)
				std::this_thread::yield();
		}
	});

	producer.join();
	consumer.join();

	ck_assert_msg(!timed_out.load(), "stalled: %llu of %llu retired, head %llu, tail %llu",
		      static_cast<unsigned long long>(retired),
		      static_cast<unsigned long long>(kItems),
		      static_cast<unsigned long long>(ring.head()),
		      static_cast<unsigned long long>(ring.tail()));
	ck_assert(producer_done.load());
	ck_assert_uint_eq(order_errors.load(), 0);
	ck_assert_uint_eq(data_errors.load(), 0);
	ck_assert_uint_eq(overfull.load(), 0);
	ck_assert_uint_le(max_outstanding.load(), kDepth);
	ck_assert_uint_ge(max_outstanding.load(), 1);
	ck_assert_uint_eq(retired, kItems);
	ck_assert_uint_eq(expect, kItems);
	ck_assert_uint_eq(ring.head(), kItems);
	ck_assert_uint_eq(ring.tail(), kItems);
	ck_assert_uint_eq(ring.outstanding(), 0);
}
END_TEST

Suite *slot_ring_suite()
{
	Suite *s = suite_create("slot_ring");

	TCase *tc = tcase_create("single_thread");
	tcase_add_test(tc, ring_capacity_is_next_power_of_two);
	tcase_add_test(tc, ring_starts_empty);
	tcase_add_test(tc, ring_seq_of_outstanding_slots);
	tcase_add_test(tc, ring_push_unpush_accounting);
	tcase_add_test(tc, ring_full_at_depth_not_capacity);
	tcase_add_test(tc, ring_retire_in_order);
	tcase_add_test(tc, ring_retire_is_idempotent);
	tcase_add_test(tc, ring_never_retires_past_head);
	tcase_add_test(tc, ring_wraps_around);
	tcase_add_test(tc, ring_reset_starts_over);
	tcase_add_test(tc, ring_swap_exchanges_everything);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, ring_producer_consumer_threads);
	suite_add_tcase(s, tc);
	return s;
}
