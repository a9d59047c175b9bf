// IntrusiveFifo: a first-in first-out list threaded through a pointer member
// of its elements (no allocation, O(1) at both ends).
//
// Contract: the list owns nothing. An element is on at most one such list
// through a given member, and whoever frees elements takes them off first.
// No locking: the owner's lock guards the list.
#pragma once

#include <cstddef>

namespace vrma {

template <typename T, T *T::*Next> class IntrusiveFifo {
public:
	IntrusiveFifo() = default;
	IntrusiveFifo(const IntrusiveFifo &) = delete;
	IntrusiveFifo &operator=(const IntrusiveFifo &) = delete;
	// Takes the other's elements; it is left empty. The list moved onto
	// must be empty (its elements would be forgotten, not freed).
	IntrusiveFifo(IntrusiveFifo &&o) noexcept : head_(o.head_), tail_(o.tail_), size_(o.size_)
	{
		o.head_ = o.tail_ = nullptr;
		o.size_ = 0;
	}
	IntrusiveFifo &operator=(IntrusiveFifo &&o) noexcept
	{
		if (this != &o) {
			head_ = o.head_;
			tail_ = o.tail_;
			size_ = o.size_;
			o.head_ = o.tail_ = nullptr;
			o.size_ = 0;
		}
		return *this;
	}

	bool empty() const noexcept { return head_ == nullptr; }
	size_t size() const noexcept { return size_; }
	T *front() const noexcept { return head_; }

	void push_back(T *e) noexcept
	{
		e->*Next = nullptr;
		if (tail_)
			tail_->*Next = e;
		else
			head_ = e;
		tail_ = e;
		size_++;
	}
	// The oldest element, its link cleared; nullptr when empty.
	T *pop_front() noexcept
	{
		T *e = head_;
		if (!e)
			return nullptr;
		head_ = e->*Next;
		if (!head_)
			tail_ = nullptr;
		e->*Next = nullptr;
		size_--;
		return e;
	}

private:
	T *head_ = nullptr;
	T *tail_ = nullptr;
	size_t size_ = 0;
};

} // namespace vrma
