// The bound on an RDM endpoint's peer table (FI_VRMA_RDM_MAX_PEERS) and the
// choice of the idle peers to give back: pure arithmetic, no provider types,
// unit-tested (test/unit/test_peer_limit.cpp).
//
// Contract, per endpoint:
//  - The table never holds more than `max` peers. A connect request from a
//    new address while it is full is turned away for now (the initiator
//    tries again), and a send to a new address returns -FI_EAGAIN: nothing
//    fails, the caller waits for room.
//  - Above `high()` (three quarters of max) the endpoint gives idle peers
//    back, the longest idle first, down to `low()` (half of max): peers
//    with no connection and nothing that refers to them (the provider
//    decides what is idle; this only picks among the idle). Hysteresis, so
//    that a table at the bound does not scan per request.
//  - A peer with a connection is never taken: with more live connections
//    than max, new peers wait until a connection ends.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vrma::peers {

struct Limit {
	static constexpr size_t kMin = 2;
	size_t max = kMin;

	// max, at least kMin.
	static Limit of(size_t max) noexcept { return Limit{std::max(max, kMin)}; }
	size_t high() const noexcept { return max - max / 4; }
	size_t low() const noexcept { return max / 2; }
	// A table of n peers takes no new one.
	bool full(size_t n) const noexcept { return n >= max; }
	// A table of n peers should give idle ones back.
	bool over(size_t n) const noexcept { return n > high(); }
	// How many a table of n peers gives back to reach low().
	size_t excess(size_t n) const noexcept { return n > low() ? n - low() : 0; }
};

// An idle peer: who (the caller's handle) and since when (any clock's
// ticks, larger is later).
template <class Handle>
struct Idle {
	Handle who;
	uint64_t since;
};

// Keeps the `n` longest idle of `idle` (the smallest `since`, ties in any
// order) and drops the others; returns how many it kept.
template <class Handle>
size_t longest_idle(std::vector<Idle<Handle>> &idle, size_t n)
{
	if (n < idle.size()) {
		std::nth_element(idle.begin(), idle.begin() + static_cast<std::ptrdiff_t>(n), idle.end(),
				 [](const Idle<Handle> &a, const Idle<Handle> &b) { return a.since < b.since; });
		idle.resize(n);
	}
	return idle.size();
}

} // namespace vrma::peers
