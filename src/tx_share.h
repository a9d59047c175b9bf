// How much of a pool shared by every connection of an endpoint one
// connection may hold: pure arithmetic, no provider types, unit-tested
// (test/unit/test_tx_share.cpp).
//
// The hazard: what a connection takes from the pool (an RDM endpoint's
// registered send buffers) comes back only when its requests complete, and
// a peer that posts no receive buffers completes none (RNR, retried for
// ever) until the drain timeout fails it. Without a limit two such peers
// hold every buffer, and every other peer's sends and vrma's answers to them
// wait as long.
//
// The rule, for a connection holding `held` that wants n more with `free`
// in the pool:
//  - never more than `cap` in all: an eighth of the pool, but at least
//    `floor` (the caller's signal period: a connection refused at its cap
//    then holds a signaled request, whose completion gives back what it
//    holds) and at most the pool;
//  - and afterwards no more than stays free (held + n <= free - n): the
//    dynamic threshold of shared switch buffers (Choudhury and Hahne), so
//    that the last free part goes in ever smaller shares.
// Consequences (tested): a lone connection gets min(cap, pool / 2); up to
// seven connections that give nothing back leave the others an eighth of
// the pool; each further one at most halves what remains; a connection
// holding nothing can take one while two are free.
#pragma once

#include <algorithm>
#include <cstddef>

namespace vrma::flow {

class TxShare {
public:
	TxShare(size_t total = 0, size_t floor = 0) noexcept { reset(total, floor); }
	void reset(size_t total, size_t floor) noexcept
	{
		total_ = total;
		cap_ = std::clamp(total / 8, std::min(floor, total), total);
	}
	[[nodiscard]] bool allows(size_t held, size_t free, size_t n = 1) const noexcept
	{
		return held + n <= cap_ && held + 2 * n <= free;
	}
	size_t cap() const noexcept { return cap_; }
	size_t total() const noexcept { return total_; }

private:
	size_t total_ = 0;
	size_t cap_ = 0;
};

} // namespace vrma::flow
