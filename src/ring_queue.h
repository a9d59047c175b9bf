// A FIFO in one circular array that doubles when full and never shrinks.
//
// Why not std::deque: libstdc++'s deque allocates a 512-byte block per few
// large elements and frees it again as the front passes it, so a queue that
// stays short but cycles (a CQ's completions: push one, read one) calls
// malloc and free every few entries. This one allocates only when it grows
// past its largest size so far.
//
// Contract: T is default-constructible and copy-assignable (slots are
// assigned, not constructed in place; a popped slot keeps its old value
// until overwritten). push_back gives the strong guarantee: on bad_alloc the
// queue is unchanged. Not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace vrma {

template <typename T> class RingQueue {
public:
	RingQueue() = default;
	RingQueue(const RingQueue &) = delete;
	RingQueue &operator=(const RingQueue &) = delete;

	bool empty() const noexcept { return size_ == 0; }
	size_t size() const noexcept { return size_; }
	size_t capacity() const noexcept { return cap_; }

	// The oldest entry; the queue must not be empty.
	T &front() noexcept { return slots_[head_]; }
	const T &front() const noexcept { return slots_[head_]; }

	void pop_front() noexcept
	{
		head_ = (head_ + 1) & (cap_ - 1);
		size_--;
	}

	void push_back(const T &v)
	{
		if (size_ == cap_)
			grow(); // may throw: nothing changed yet
		slots_[(head_ + size_) & (cap_ - 1)] = v;
		size_++;
	}

	void clear() noexcept
	{
		head_ = 0;
		size_ = 0;
	}

private:
	static constexpr size_t kMinCapacity = 16; // a power of two, as cap_ stays

	void grow()
	{
		const size_t ncap = cap_ ? 2 * cap_ : kMinCapacity;
		auto n = std::make_unique<T[]>(ncap);
		// Moved only when a move cannot throw: a copy that throws halfway
		// leaves the old slots whole (the strong guarantee).
		for (size_t i = 0; i < size_; i++)
			n[i] = std::move_if_noexcept(slots_[(head_ + i) & (cap_ - 1)]);
		slots_ = std::move(n);
		cap_ = ncap;
		head_ = 0;
	}

	std::unique_ptr<T[]> slots_;
	size_t cap_ = 0;
	size_t head_ = 0;
	size_t size_ = 0;
};

} // namespace vrma
