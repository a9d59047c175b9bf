// The entries of a device completion queue and who holds them: queues that
// reserve their whole ring, and credited queues that share the rest one
// request at a time. Pure arithmetic on atomics, no provider types,
// unit-tested (test/unit/test_cq_credits.cpp); the provider (vrma_cq.cpp)
// holds one per CQ and does the device calls (ibv_resize_cq) and locking.
//
// Contract:
//  - Every entry is either reserved by a bound queue (its whole ring, at
//    fi_enable), held as a credit by a request of a credited queue, or free
//    in the pool: cqe = reserved + credits held + free. The pool is never
//    negative, so even a flush of every queue cannot overrun the device CQ.
//  - Reservations stop short of the device's maximum by an eighth of it
//    (kCqPoolShare), which stays for the credited queues; once one queue is
//    credited every later one is too (a reservation from the shared pool
//    could leave them no credit).
//  - take()/give() run without the CQ's lock, from posters and pollers of
//    every endpoint on the CQ (one relaxed CAS loop / one fetch_add: the
//    data path pays no call). Everything else runs under the CQ's lock.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vrma {

// vrma's own receives a credited receive queue keeps posted at most
// (staging buffers, zero-length or service receives): they hold their
// credits as long as they wait for data, so a few endpoints must not take
// the whole pool.
inline constexpr size_t kCreditedOwnRx = 8;
// Of `wanted` own receives, those a receive queue posts: all when its ring
// is reserved, kCreditedOwnRx at most when it is credited.
constexpr size_t own_rx_limit(size_t wanted, bool credited) noexcept
{
	return credited ? std::min(wanted, kCreditedOwnRx) : wanted;
}

// Entries whole reservations leave to the credit pool at least, as a
// fraction of the CQ's largest size (1/8): the pool is otherwise what the
// last reservation that fitted left over, which can be nothing (64 pairs of
// default endpoints on rxe's 32767 entries: 42 reservations of 769 left 43
// credits for 86 queues).
inline constexpr size_t kCqPoolShare = 8;

// Entries a CQ may have: the device's max_cqe, or `configured`
// (FI_VRMA_MAX_CQE, for tests of the credited queues) when smaller; 0: not
// configured.
constexpr size_t cq_entries_limit(size_t device_max, size_t configured) noexcept
{
	return configured && configured < device_max ? configured : device_max;
}

class CqCredits {
public:
	// Why reserve() refused, or Done.
	enum class Reserve : uint8_t {
		Done,
		Shared,   // queues are credited already: this one must be too
		TooLarge, // beyond the share reservations may take (max - max / 8)
		NotGrown, // the device would not grow the CQ enough
	};

	// The device queue was created with `cqe` entries: all free.
	void open(size_t cqe) noexcept
	{
		cqe_ = cqe;
		credits_.store(static_cast<ptrdiff_t>(cqe), std::memory_order_relaxed);
	}

	// n credits for n requests: false, nothing taken, when fewer are free.
	[[gnu::always_inline]] bool take(size_t n) noexcept
	{
		ptrdiff_t f = credits_.load(std::memory_order_relaxed);
		do {
			if (f < static_cast<ptrdiff_t>(n))
				return false;
		} while (!credits_.compare_exchange_weak(f, f - static_cast<ptrdiff_t>(n),
							  std::memory_order_relaxed));
		return true;
	}
	[[gnu::always_inline]] void give(size_t n) noexcept
	{
		credits_.fetch_add(static_cast<ptrdiff_t>(n), std::memory_order_relaxed);
	}

	// The device queue now has `now` entries (a resize succeeded): the new
	// ones join the pool.
	void grown(size_t now) noexcept
	{
		if (now > cqe_)
			give(now - cqe_);
		cqe_ = now;
	}

	// Whether `entries` more may be reserved in a CQ of at most `max`
	// entries (credited queues aside).
	bool reservation_fits(size_t entries, size_t max) const noexcept
	{
		const size_t limit = max - max / kCqPoolShare;
		return entries <= limit && reserved() <= limit - entries; // no overflow
	}
	// The size to grow the device queue to so that `entries` are free.
	size_t grow_target(size_t entries) const noexcept
	{
		return cqe_ + entries - static_cast<size_t>(std::max<ptrdiff_t>(free(), 0));
	}

	// Reserves `entries` for a queue bound whole, taken from the pool and
	// growing the device queue when the pool has too few. `grow(want)`
	// resizes it and returns its new number of entries (0: refused).
	template <typename Grow>
	Reserve reserve(size_t entries, size_t max, Grow &&grow) noexcept
	{
		if (credited())
			return Reserve::Shared;
		if (!reservation_fits(entries, max))
			return Reserve::TooLarge;
		while (!take(entries)) {
			const size_t want = grow_target(entries);
			const size_t before = cqe_;
			const size_t now = grow(want);
			if (!now)
				return Reserve::NotGrown;
			grown(now);
			if (cqe_ <= before)
				return Reserve::NotGrown;
		}
		reserved_.fetch_add(entries, std::memory_order_relaxed);
		return Reserve::Done;
	}
	// Gives a reservation back (never more than is reserved).
	void unreserve(size_t entries) noexcept
	{
		const size_t r = reserved();
		entries = std::min(entries, r);
		reserved_.store(r - entries, std::memory_order_relaxed);
		give(entries);
	}

	// Binds a credited queue: grows the device queue to `max` (as large a
	// pool as the device allows: every credited queue shares it; `grow` as
	// for reserve(), a refusal keeps the size) and takes `floor` credits
	// for the queue's own use. false, nothing taken, when not even the
	// floor is free.
	template <typename Grow>
	bool attach(size_t floor, size_t max, Grow &&grow) noexcept
	{
		if (cqe_ < max) {
			if (const size_t now = grow(max))
				grown(now);
		}
		if (!take(floor))
			return false;
		credited_.fetch_add(1, std::memory_order_relaxed);
		return true;
	}
	// Forgets a credited queue (its ring drained), giving back the `spare`
	// credits it held outside its requests.
	void detach(size_t spare) noexcept
	{
		give(spare);
		credited_.fetch_sub(1, std::memory_order_relaxed);
	}

	// Whether a queue pair completes into the device queue (a reservation
	// or a credited queue), readable without the lock.
	bool in_use() const noexcept { return reserved() != 0 || credited() != 0; }
	size_t cqe() const noexcept { return cqe_; }
	size_t reserved() const noexcept { return reserved_.load(std::memory_order_relaxed); }
	ptrdiff_t free() const noexcept { return credits_.load(std::memory_order_relaxed); }
	size_t credited() const noexcept { return credited_.load(std::memory_order_relaxed); }

private:
	size_t cqe_ = 0; // entries the device queue holds (lock)
	// Entries promised to bound queues; written under the lock, read
	// without it by a reader deciding whether the device queue matters.
	std::atomic<size_t> reserved_{0};
	// The pool: cqe - reserved - credits held.
	std::atomic<ptrdiff_t> credits_{0};
	// Credited queues bound.
	std::atomic<size_t> credited_{0};
};

} // namespace vrma
