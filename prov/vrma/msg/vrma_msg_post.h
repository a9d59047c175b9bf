// The MSG endpoint's receive posting: fi_recv and vrma's own receives
// (zero-length or service receives, staging buffers), inlined into their callers.
#pragma once

#include "vrma_msg_ep.h"
#include "vrma_post.h"

namespace vrma {

// The receive queue is full, or credited (Ep::rx_post_limit is 0): whether
// a credit lets the receive go (kept out of post_recv_locked, which must
// stay small enough to be inlined into fi_recv).
[[gnu::noinline]] inline bool rx_take_credit(Ep *ep) noexcept
{
	return ep->rx_credits && ep->rx.outstanding() < ep->rx_depth && cq_credit_take(ep->rx_credits, 1);
}

[[gnu::noinline]] inline ssize_t post_recv_failed(Ep *ep, int rc) noexcept
{
	ep->rx.unpush();
	if (ep->rx_credits)
		cq_credit_give(ep->rx_credits, 1);
	return post_failed(rc, "ibv_post_recv");
}

// ring_stride: vrma's own receive buffers, one per queue entry: the single
// sge is moved to buffer seq % rx_depth (its previous receive retired).
// The rx lock is held.
inline ssize_t post_recv_locked(Ep *ep, ibv_recv_wr &wr, void *context, void *buf, size_t len,
				bool report, Cntr *cntr, bool internal = false,
				size_t ring_stride = 0) noexcept
{
	VRMA_ASSERT_HELD(ep->rx_lock);
	if (!ep->conn.qp) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "receive posted before fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	// rx_post_limit is 0 for a credited queue: each receive takes a credit.
	if (ep->rx.outstanding() >= ep->rx_post_limit && !rx_take_credit(ep)) [[unlikely]]
		return -FI_EAGAIN;
	const uint64_t seq = ep->rx.head();
	RxSlot &s = ep->rx.next();
	s.seq = seq;
	s.context = context;
	s.buf = buf;
	s.len = len;
	s.report = report;
	s.cntr = cntr;
	s.internal = internal;
	if (ring_stride) {
		wr.sg_list[0].addr += (seq % ep->rx_depth) * ring_stride;
		s.buf = reinterpret_cast<void *>(wr.sg_list[0].addr);
	}
	wr.wr_id = reinterpret_cast<uintptr_t>(&s);
	wr.next = nullptr;
	ep->rx.push();
	ibv_recv_wr *bad;
	device_will_post(&wr);
	if (int rc = ibv_post_recv(ep->conn.qp, &wr, &bad)) [[unlikely]]
		return post_recv_failed(ep, rc);
	return 0;
}

inline ssize_t post_recv(Ep *ep, ibv_recv_wr &wr, void *context, void *buf, size_t len,
			 bool report, Cntr *cntr, bool internal = false,
			 size_t ring_stride = 0) noexcept
{
	std::lock_guard guard(ep->rx_lock);
	return post_recv_locked(ep, wr, context, buf, len, report, cntr, internal, ring_stride);
}

} // namespace vrma
