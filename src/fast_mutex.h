// A mutex for data-path locks that are almost never contended (an RDM
// endpoint's lock: the application thread, and rarely the connection or
// auto-progress thread). Uncontended, lock() is one compare-exchange and
// unlock() one exchange, inlined; std::mutex costs two calls into glibc
// and its kind checks, about 55 instructions per pair, which is a tenth of
// an 8-byte RDM send.
//
// Contract: Lockable (std::lock_guard, std::unique_lock, std::scoped_lock),
// not recursive, not fair. A contended lock() spins briefly, then sleeps in
// the kernel (std::atomic::wait, a futex on Linux) until unlock() wakes one
// waiter. Hazard: no condition_variable works with it (use
// std::condition_variable_any), and no priority inheritance.
//
// Lock checks (VRMA_LOCK_CHECKS, on in the sanitizer builds: configure
// --enable-lock-checks): the mutex records which thread holds it, and
// held_here() says whether the calling thread does; functions whose
// contract is "lock held" assert it (VRMA_ASSERT_HELD). Without the checks
// nothing is recorded and the assertion compiles to nothing.
// Hazard: the checks change the mutexes' layout, and the unit tests are
// built with them while src/libvrma-util follows configure: no type or
// interface of that library may hold or take these mutexes (MemMonitor
// takes its caller's lock as a LockRef).
//
// CheckedMutex, below: a std::mutex with the same lock checks, for the
// locks that may be contended or held long (CQ, EQ, transmit and receive
// locks of MSG endpoints, the domain's and the provider threads' locks).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace vrma {

// The lock checks' record of which thread holds a mutex (both mutexes
// derive from it). Without VRMA_LOCK_CHECKS it is empty and costs nothing.
class LockHolder {
#ifdef VRMA_LOCK_CHECKS
public:
	// Whether the calling thread holds the mutex.
	bool held_here() const noexcept { return owner_.load(std::memory_order_relaxed) == tag(); }

protected:
	void set_owner() noexcept { owner_.store(tag(), std::memory_order_relaxed); }
	void clear_owner() noexcept { owner_.store(nullptr, std::memory_order_relaxed); }

private:
	// A per-thread address names the thread (no syscall, no formatting).
	static const void *tag() noexcept
	{
		static thread_local const char t = 0;
		return &t;
	}
	std::atomic<const void *> owner_{nullptr};
#else
protected:
	void set_owner() noexcept {}
	void clear_owner() noexcept {}
#endif
};

[[gnu::always_inline]] inline void cpu_relax() noexcept
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	asm volatile("yield" ::: "memory");
#endif
}

class FastMutex : public LockHolder {
public:
	FastMutex() = default;
	FastMutex(const FastMutex &) = delete;
	FastMutex &operator=(const FastMutex &) = delete;

	[[gnu::always_inline]] void lock() noexcept
	{
		uint32_t expected = kFree;
		if (state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
						   std::memory_order_relaxed)) [[likely]] {
			set_owner();
			return;
		}
		lock_contended();
		set_owner();
	}

	[[gnu::always_inline]] bool try_lock() noexcept
	{
		uint32_t expected = kFree;
		const bool ok = state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
							       std::memory_order_relaxed);
		if (ok)
			set_owner();
		return ok;
	}

	[[gnu::always_inline]] void unlock() noexcept
	{
		clear_owner();
		// kWaiters: somebody may sleep; wake one (it takes the lock as
		// kWaiters again, so a later unlock wakes the next).
		if (state_.exchange(kFree, std::memory_order_release) == kWaiters) [[unlikely]]
			state_.notify_one();
	}

private:
	static constexpr uint32_t kFree = 0;
	static constexpr uint32_t kLocked = 1;  // held, nobody sleeping
	static constexpr uint32_t kWaiters = 2; // held, someone may sleep

	[[gnu::noinline]] void lock_contended() noexcept
	{
		// A holder usually leaves within a few hundred instructions.
		for (int i = 0; i < 64; i++) {
			uint32_t expected = kFree;
			if (state_.load(std::memory_order_relaxed) == kFree &&
			    state_.compare_exchange_weak(expected, kLocked, std::memory_order_acquire,
							 std::memory_order_relaxed))
				return;
			cpu_relax();
		}
		// From here on this thread counts as a waiter: it takes the lock
		// as kWaiters, so that its own unlock wakes any other sleeper.
		while (state_.exchange(kWaiters, std::memory_order_acquire) != kFree)
			state_.wait(kWaiters, std::memory_order_relaxed);
	}

	std::atomic<uint32_t> state_{kFree};
};

// A std::mutex that, with VRMA_LOCK_CHECKS, records its holder as FastMutex
// does (held_here(), VRMA_ASSERT_HELD); without them it is a std::mutex:
// the same size, and lock()/unlock() inline to std::mutex's own.
// Contract: Lockable, not recursive. Hazard: std::condition_variable takes
// only std::mutex; use std::condition_variable_any, whose wait unlocks and
// relocks through this class and so keeps the holder right (the inner
// std::mutex is not exposed: a wait on it would leave the holder stale).
class CheckedMutex : public LockHolder {
public:
	CheckedMutex() = default;
	CheckedMutex(const CheckedMutex &) = delete;
	CheckedMutex &operator=(const CheckedMutex &) = delete;

	[[gnu::always_inline]] void lock()
	{
		m_.lock();
		set_owner();
	}

	[[gnu::always_inline]] bool try_lock() noexcept
	{
		if (!m_.try_lock())
			return false;
		set_owner();
		return true;
	}

	[[gnu::always_inline]] void unlock() noexcept
	{
		clear_owner();
		m_.unlock();
	}

private:
	std::mutex m_;
};

#ifndef VRMA_LOCK_CHECKS
static_assert(sizeof(CheckedMutex) == sizeof(std::mutex) && alignof(CheckedMutex) == alignof(std::mutex),
	      "without lock checks a CheckedMutex is a std::mutex");
static_assert(sizeof(FastMutex) == sizeof(uint32_t), "without lock checks a FastMutex is its state");
#endif

} // namespace vrma
