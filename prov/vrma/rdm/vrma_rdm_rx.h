// The RDM receive side's private helpers, shared by the receive engine
// (vrma_rdm_rx.cpp: completions, arriving messages, eager placement) and
// the application's receives (vrma_rdm_recv.cpp: receives, rendezvous
// reads, back-pressure). Everything here runs under RdmEp::lock.
#pragma once

#include "vrma_rdm.h"

#include <algorithm>

namespace vrma {

// Copies `len` bytes of src into the iov from byte `off`; returns how many fit.
[[gnu::always_inline]] inline size_t copy_to_iov(const iovec *iov, size_t count, size_t off,
						  const uint8_t *src, size_t len)
{
	size_t done = 0;
	for (size_t i = 0; i < count && done < len; i++) {
		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		const size_t n = std::min(iov[i].iov_len - off, len - done);
		memcpy(static_cast<uint8_t *>(iov[i].iov_base) + off, src + done, n);
		done += n;
		off = 0;
	}
	return done;
}


// Where a message of len bytes goes in r: dst and count name the iov (r's
// own, or for a multi-receive buffer `piece`, the part of it the message
// takes); buf is where it starts. Returns the bytes that fit.
[[gnu::always_inline]] inline size_t reserve_space(RdmRecv &r, size_t len, iovec &piece,
						    const iovec *&dst, size_t &count, void *&buf)
{
	if (r.multi) {
		const size_t off = r.space.offset();
		const size_t n = r.space.consume(len);
		piece = {static_cast<uint8_t *>(r.iov[0].iov_base) + off, n};
		dst = &piece;
		count = 1;
		buf = piece.iov_base;
		return n;
	}
	dst = r.iov;
	count = r.count;
	buf = r.count ? r.iov[0].iov_base : nullptr;
	return std::min(len, r.capacity);
}

// The receive took a message: removed unless a multi-receive buffer with
// room left. Returns whether it was released (and must be freed).
[[gnu::always_inline]] inline bool retire_recv(RdmEp *ep, RdmRecv &r, bool &release_flag)
{
	release_flag = false;
	if (r.multi && !r.space.should_release())
		return false;
	release_flag = r.multi;
	(void)ep->matcher.remove(r);
	return true;
}

// A multi-receive buffer that retire_recv() released: true when its
// release is reported now (FI_MULTI_RECV on this completion, then the
// caller frees it); false while rendezvous still read into it, the last
// of which reports it (rdm_finish_rndv).
inline bool release_now(RdmRecv &r)
{
	if (!r.rndv_inflight)
		return true;
	r.release_deferred = true;
	return false;
}

// Retires receive r, which took a message, and ends its part in it with one
// entry: report(flags) posts that entry, given `flags` plus FI_MULTI_RECV
// when r is a multi-receive buffer whose release is reported now; then r is
// freed if it was released now (a released buffer that rendezvous still
// read into is not: its last one reports the release, rdm_finish_rndv). report
// may read r (not free it) and must not throw. Returns whether r is gone
// (retire_recv: freed, or owned by its rendezvous).
template <class Report>
inline bool retire_and_report(RdmEp *ep, RdmRecv *r, uint64_t flags, Report &&report) noexcept
{
	bool release;
	const bool gone = retire_recv(ep, *r, release);
	const bool freed = gone && (!release || release_now(*r));
	report(flags | (release && freed ? FI_MULTI_RECV : 0));
	if (freed)
		rdm_put_recv(ep, r);
	return gone;
}

// The cancellation entry of receive r.
inline CqPending cancel_entry(const RdmRecv &r)
{
	return rdm_error_entry(r.context, rdm_recv_flags(r.kind) | (r.multi ? FI_MULTI_RECV : 0),
			       r.count ? r.iov[0].iov_base : nullptr, 0, 0, 0, 0, FI_ADDR_NOTAVAIL,
			       FI_ECANCELED);
}

// Places an eager message (payload: h.length bytes, bounded by the caller)
// in receive r and reports it. Returns whether r is gone (completed and
// freed, or owned by its rendezvous).
bool rdm_place_eager(RdmEp *ep, RdmRecv *r, RdmPeer *peer, const rdm::RdmHeader &h,
		     const uint8_t *payload, fi_addr_t src);
// A rendezvous request (its segments decoded and bounded) meets receive r.
// Returns whether r is gone.
bool rdm_start_rndv(RdmEp *ep, RdmRecv *r, RdmPeer *peer, const rdm::RdmHeader &h,
		    const rdm::RndvSegment *segs, size_t nsegs, fi_addr_t src);
// Posts the next window of RDMA READs of a rendezvous receive; false when
// there is no room now (the caller queues it in read_backlog).
bool rdm_post_reads(RdmEp *ep, RdmRxOp *op);
// A rendezvous receive begins, or a window of its READs landed: the next
// window (now, or in read_backlog), or the end (rdm_finish_rndv) when all
// of it has landed.
void rdm_next_reads(RdmEp *ep, RdmRxOp *op) noexcept;
// A rendezvous receive's reads ended (err 0: all landed): its one entry,
// its answer to the sender, and its receive's release.
void rdm_finish_rndv(RdmEp *ep, RdmRxOp *op, int err, int prov_errno);
// What an unexpected message holds (its charge against the budget).
size_t rdm_unexpected_cost(bool rndv, const rdm::RdmHeader &h);
// An unexpected message's charge goes back (see the definition).
void rdm_unexpected_gone(RdmEp *ep, size_t cost, bool now);
// An unexpected message of `cost` bytes from peer: charged (true), or
// refused (false: its connection was dropped).
bool rdm_admit_unexpected(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, size_t cost);

} // namespace vrma
