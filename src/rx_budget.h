// The memory an RDM endpoint spends on unexpected messages (those that
// arrive before a receive matches them), and the back-pressure that keeps it
// bounded: pure arithmetic, no provider types, unit-tested
// (test/unit/test_rx_budget.cpp).
//
// Contract, per endpoint:
//  - Every unexpected message is charged its cost (payload plus bookkeeping)
//    when it is kept and given back when it leaves the queue (delivered,
//    discarded, failed).
//  - While the charge is above the limit, every connection that adds an
//    unexpected message is asked to pause (the caller sends it a Flow Pause):
//    its sender then refuses new messages to this endpoint with -FI_EAGAIN.
//    Nothing is dropped.
//  - A paused connection may still deliver what its sender had under way
//    before the Pause reached it: at most `grace` unexpected messages. One
//    more is a peer that ignores the protocol (hostile or broken): the
//    verdict is Refuse, and the caller drops that connection (and gives back
//    what it held).
//  - Once the charge has fallen to half the limit, every paused connection
//    is resumed (the caller sends Flow Resume): hysteresis, so that a queue
//    hovering at the limit does not pause and resume per message.
//
//  - Another resource the peers fill that this budget does not count (the
//    application's CQ, which remote CQ data fills without the application's
//    receives) may be over its bound: each entry a connection adds then
//    counts against its grace as an unexpected message past the limit does
//    (the first pauses it, one past the grace is Refuse), and nobody is
//    resumed until that resource has drained (unhold).
//
// Memory is then bounded by limit + (paused connections x grace x largest
// message): the limit for honest peers that pause when asked, plus the
// window each connection's sender had in flight. The number of connections
// is bounded by who may connect (authenticated job members with a key, see
// fi_vrma.7 SECURITY).
#pragma once

#include <cstddef>
#include <cstdint>

namespace vrma::flow {

// One connection, as the receiving side sees it.
struct PeerRx {
	bool paused = false;   // asked to pause, not resumed since
	size_t since_pause = 0; // unexpected messages it added while paused
};

enum class Verdict : uint8_t {
	Keep,          // charged
	KeepAndPause,  // charged; ask the connection to pause (it was not)
	Refuse,        // not charged: the connection ignored its pause
};

class RxBudget {
public:
	RxBudget(size_t limit = 0, size_t grace = 0) noexcept { reset(limit, grace); }
	void reset(size_t limit, size_t grace) noexcept
	{
		limit_ = limit;
		grace_ = grace;
		used_ = 0;
		paused_ = 0;
		held_ = false;
	}

	// An unexpected message of `cost` bytes from connection p.
	[[nodiscard]] Verdict admit(PeerRx &p, size_t cost) noexcept
	{
		if (p.paused) {
			if (p.since_pause >= grace_)
				return Verdict::Refuse;
			p.since_pause++;
			used_ += cost;
			return Verdict::Keep;
		}
		used_ += cost;
		if (used_ <= limit_)
			return Verdict::Keep;
		p.paused = true;
		p.since_pause = 0;
		paused_++;
		return Verdict::KeepAndPause;
	}

	// A kept message of `cost` bytes left the queue. True when the paused
	// connections are to be resumed now (each then goes through resumed()).
	[[nodiscard]] bool release(size_t cost) noexcept
	{
		used_ = cost <= used_ ? used_ - cost : 0;
		return paused_ && !held_ && used_ <= limit_ / 2;
	}

	// Connection p added an entry to the other resource, which is over its
	// bound: nothing is charged here.
	[[nodiscard]] Verdict admit_held(PeerRx &p) noexcept
	{
		held_ = true;
		if (p.paused) {
			if (p.since_pause >= grace_)
				return Verdict::Refuse;
			p.since_pause++;
			return Verdict::Keep;
		}
		p.paused = true;
		p.since_pause = 0;
		paused_++;
		return Verdict::KeepAndPause;
	}

	// The other resource drained (to half its bound). True when the paused
	// connections are to be resumed now.
	[[nodiscard]] bool unhold() noexcept
	{
		held_ = false;
		return paused_ && used_ <= limit_ / 2;
	}

	// Connection p was sent its Resume, or ended: no longer paused.
	void resumed(PeerRx &p) noexcept
	{
		if (p.paused && paused_)
			paused_--;
		p.paused = false;
		p.since_pause = 0;
	}

	size_t used() const noexcept { return used_; }
	size_t limit() const noexcept { return limit_; }
	size_t grace() const noexcept { return grace_; }
	size_t paused() const noexcept { return paused_; }
	bool held() const noexcept { return held_; }

private:
	size_t limit_ = 0, grace_ = 0;
	size_t used_ = 0;
	size_t paused_ = 0;
	bool held_ = false;
};

} // namespace vrma::flow
