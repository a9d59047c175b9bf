// A fixed-capacity ring of per-work-request slots, indexed by a 64-bit
// sequence number that never wraps in practice.
//
// Contract (single producer under the owner's lock, single consumer under the
// completion queue's lock):
//  - the producer fills next(), publishes it with push() *before* posting the
//    work request (a completion may arrive before ibv_post_* returns), and
//    takes it back with unpush() when the post fails;
//  - work requests on one RC queue complete in posting order, so a completion
//    for sequence s retires every slot up to and including s (unsignaled slots
//    before a signaled one never get a completion of their own);
//  - retire_through() is idempotent for sequences already retired, which a
//    flushed queue produces (a flush reports every outstanding slot).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace vrma {

template <typename Slot> class SlotRing {
public:
	SlotRing() = default;
	explicit SlotRing(size_t depth) { reset(depth); }

	// depth: how many slots may be outstanding at once (the queue depth).
	void reset(size_t depth)
	{
		size_t cap = 1;
		while (cap < depth)
			cap <<= 1;
		slots_ = std::make_unique<Slot[]>(cap);
		mask_ = cap - 1;
		depth_ = depth;
		head_.store(0, std::memory_order_relaxed);
		tail_.store(0, std::memory_order_relaxed);
	}

	// Exchanges the two rings' slots and positions; neither may be in use
	// by another thread.
	void swap(SlotRing &o) noexcept
	{
		slots_.swap(o.slots_);
		std::swap(mask_, o.mask_);
		std::swap(depth_, o.depth_);
		const uint64_t h = head(), t = tail_.load(std::memory_order_relaxed);
		head_.store(o.head(), std::memory_order_relaxed);
		tail_.store(o.tail_.load(std::memory_order_relaxed), std::memory_order_relaxed);
		o.head_.store(h, std::memory_order_relaxed);
		o.tail_.store(t, std::memory_order_relaxed);
	}

	size_t depth() const noexcept { return depth_; }
	size_t capacity() const noexcept { return mask_ + 1; }
	uint64_t head() const noexcept { return head_.load(std::memory_order_relaxed); }
	uint64_t tail() const noexcept { return tail_.load(std::memory_order_acquire); }
	size_t outstanding() const noexcept { return static_cast<size_t>(head() - tail()); }
	size_t free_slots() const noexcept { return depth_ - outstanding(); }
	bool full() const noexcept { return outstanding() >= depth_; }

	Slot &at(uint64_t seq) noexcept { return slots_[seq & mask_]; }
	// The sequence of an outstanding slot (tail <= seq < head), from its
	// place in the ring: for a slot whose producer did not write it, so
	// that nothing in it says (a consumer's view; the slot not retired).
	uint64_t seq_of(const Slot &s) const noexcept
	{
		const uint64_t t = tail_.load(std::memory_order_relaxed);
		const uint64_t index = static_cast<uint64_t>(&s - slots_.get());
		return t + ((index - t) & mask_);
	}
	// The slot the next push() publishes.
	Slot &next() noexcept { return at(head()); }
	void push() noexcept { head_.store(head() + 1, std::memory_order_release); }
	// push() for a producer that read head() as `seq` and filled at(seq).
	void publish(uint64_t seq) noexcept { head_.store(seq + 1, std::memory_order_release); }
	void unpush() noexcept { head_.store(head() - 1, std::memory_order_release); }

	// Retires every slot with sequence <= seq; calls fn(slot, seq) for each,
	// oldest first. Returns the number retired.
	template <typename Fn> size_t retire_through(uint64_t seq, Fn &&fn)
	{
		uint64_t t = tail_.load(std::memory_order_relaxed);
		size_t n = 0;
		const uint64_t h = head_.load(std::memory_order_acquire);
		for (; t <= seq && t < h; ++t, ++n)
			fn(at(t), t);
		tail_.store(t, std::memory_order_release);
		return n;
	}

private:
	std::unique_ptr<Slot[]> slots_;
	uint64_t mask_ = 0;
	size_t depth_ = 0;
	std::atomic<uint64_t> head_{0};
	std::atomic<uint64_t> tail_{0};
};

} // namespace vrma
