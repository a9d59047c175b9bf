// WaitGate: lets several threads block on one condition whose changes are
// announced through a level-triggered descriptor (an eventfd in an epoll
// set) without losing a wakeup.
//
// The hazard it removes: with two threads sleeping on the same eventfd, the
// one that wakes first clears it; the other, still between its check of the
// condition and its epoll_wait, then sleeps through the change it was
// waiting for (fi_cntr_wait from many threads on one counter: Sandia
// OpenSHMEM with SHMEM_THREAD_MULTIPLE hung that way).
//
// Contract: one thread at a time holds the descriptor role: it alone sleeps
// on the descriptors and clears the eventfd. The others sleep on a
// generation word (a futex on Linux), which a notifier bumps before it
// wakes them, so a change made after a thread's snapshot() never goes
// unseen: wait() returns at once when the word moved. The holder gives the
// role up when it stops waiting, which wakes the others so that one takes
// it over. A notifier calls notify() after the change is visible (the
// condition's own store first, seq_cst). wait_until() is that protocol
// whole: waiters use it, not the pieces.
#pragma once

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace vrma {

class WaitGate {
public:
	WaitGate() = default;
	WaitGate(const WaitGate &) = delete;
	WaitGate &operator=(const WaitGate &) = delete;

	// Taken before the caller checks its condition.
	uint32_t snapshot() const noexcept { return word_.load(std::memory_order_seq_cst); }

	// Sleeps until the word differs from `seen`, a notify() wakes the
	// caller, or timeout_ms passes (< 0: no limit). Spurious returns are
	// allowed: callers check their condition again.
	void wait(uint32_t seen, int timeout_ms) noexcept
	{
		sleepers_.fetch_add(1, std::memory_order_seq_cst);
		timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
		syscall(SYS_futex, word_addr(), FUTEX_WAIT_PRIVATE, seen, timeout_ms < 0 ? nullptr : &ts, nullptr,
			0);
		sleepers_.fetch_sub(1, std::memory_order_seq_cst);
	}

	// The condition changed: wakes every thread in wait().
	void notify() noexcept
	{
		word_.fetch_add(1, std::memory_order_seq_cst);
		if (sleepers_.load(std::memory_order_seq_cst) != 0)
			syscall(SYS_futex, word_addr(), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
	}

	// check() returns kAgain while the caller must go on waiting, anything
	// else ends the wait with that value. The descriptor role's holder then
	// calls sleep_on_fds(), which sleeps on the descriptors (and clears the
	// eventfd it woke on) and returns 0 or a negative error that ends the
	// wait; the others sleep in the gate for at most remaining_ms() (< 0: no
	// limit). check() runs after the snapshot, so a change announced between
	// it and the sleep wakes the sleeper at once. The role is given up on
	// every return.
	//
	// A caller that has just taken the role checks again before it sleeps
	// on the descriptors: a change made after its check may have been
	// announced there already, and the previous holder, still sleeping on
	// them then, cleared the eventfd and left, content with the change
	// (its check saw it; so does the new holder's, which comes after that
	// holder let go). Sleeping at once, the new holder would wait for the
	// next change: 4 waiters and a producer in rounds (unit test
	// test_many_waiters_lose_nothing) lost a round's only wakeup about
	// once in 30 runs, and under TSan's scheduling once in 3.
	static constexpr int kAgain = 1;
	template <class Check, class SleepOnFds, class RemainingMs>
	int wait_until(Check &&check, SleepOnFds &&sleep_on_fds, RemainingMs &&remaining_ms) noexcept
	{
		FdRole role(*this);
		for (;;) {
			const uint32_t seen = snapshot();
			if (const int r = check(); r != kAgain)
				return r;
			if (role.held()) {
				if (const int r = sleep_on_fds(); r < 0)
					return r;
			} else if (!role.take()) {
				wait(seen, remaining_ms());
			} // else just taken: check again first
		}
	}

private:
	// Whether the caller now holds the descriptor role (it keeps it until
	// leave_fd_role).
	bool take_fd_role() noexcept
	{
		bool expected = false;
		return fd_role_.compare_exchange_strong(expected, true, std::memory_order_acq_rel);
	}

	void leave_fd_role() noexcept
	{
		fd_role_.store(false, std::memory_order_release);
		notify();
	}

	// The descriptor role while one wait_until() holds it.
	class FdRole {
	public:
		explicit FdRole(WaitGate &gate) noexcept : gate_(gate) {}
		~FdRole()
		{
			if (held_)
				gate_.leave_fd_role();
		}
		FdRole(const FdRole &) = delete;
		FdRole &operator=(const FdRole &) = delete;
		// Whether this wait holds the role.
		bool held() const noexcept { return held_; }
		// Takes the role if it is free; whether it did.
		bool take() noexcept { return held_ = gate_.take_fd_role(); }

	private:
		WaitGate &gate_;
		bool held_ = false;
	};

	// The futex is the word itself.
	static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
			      std::atomic<uint32_t>::is_always_lock_free,
		      "the futex word is an atomic uint32_t");
	uint32_t *word_addr() noexcept { return reinterpret_cast<uint32_t *>(&word_); }

	std::atomic<uint32_t> word_{0};
	// Threads in wait(): notify() skips the wake call without them. A
	// sleeper counts itself before the futex compares the word, and a
	// notifier bumps the word before it reads the count (both seq_cst):
	// either the futex sees the new word, or the notifier sees the sleeper.
	std::atomic<int> sleepers_{0};
	std::atomic<bool> fd_role_{false};
};

} // namespace vrma
