// What every endpoint has, whichever its kind (MSG: Ep, vrma_msg_ep.h;
// RDM: RdmEp, vrma_rdm.h): its domain and info, the CQs and counters bound
// to it, its default operation flags and selective completion, and the
// capabilities both kinds serve as an RMA target. The rules for binding a
// CQ and for FI_GETOPSFLAG are the same for both, here once.
#pragma once

#include "vrma_cq.h"

namespace vrma {

struct EpBase : fid_ep {
	using FidType = fid_ep;
	Domain *domain = nullptr;
	FiInfoPtr info;
	Cq *tx_cq = nullptr;
	Cq *rx_cq = nullptr;
	// FI_SELECTIVE_COMPLETION of each binding: only operations with
	// FI_COMPLETION get an entry.
	bool tx_selective = false;
	bool rx_selective = false;
	// FI_RMA_EVENT: counts the peers' RMA operations on this endpoint.
	bool rma_events = false;
	// FI_RMA_PMEM: this side's writes may ask for FI_COMMIT_COMPLETE, and
	// it answers its peers' commits.
	bool rma_pmem = false;
	Cntr *cntr_send = nullptr;
	Cntr *cntr_recv = nullptr;
	Cntr *cntr_read = nullptr;
	Cntr *cntr_write = nullptr;
	Cntr *cntr_remote_read = nullptr;
	Cntr *cntr_remote_write = nullptr;
	uint64_t tx_op_flags = 0;
	uint64_t rx_op_flags = 0;
	// What a transmit call without a flags argument may take for granted
	// about tx_op_flags (the one-request fast paths): they ask for nothing
	// beyond what the fast path does (fast_plain), and a success is
	// reported (fast_report). Set by ep_set_fast_tx when the endpoint is
	// enabled and by FI_SETOPSFLAG; the application's thread writes and
	// reads them, as it does tx_op_flags.
	bool fast_plain = false;
	bool fast_report = false;

	// Whether an operation with these flags gets a completion entry.
	bool tx_reports(uint64_t flags) const noexcept
	{
		return tx_cq && (!tx_selective || (flags & FI_COMPLETION));
	}
	bool rx_reports(uint64_t flags) const noexcept
	{
		return rx_cq && (!rx_selective || (flags & FI_COMPLETION));
	}
};

// EpBase::fast_plain and fast_report from tx_op_flags; `plain`: the flags
// the endpoint kind's fast path honours by itself.
inline void ep_set_fast_tx(EpBase *ep, uint64_t plain) noexcept
{
	ep->fast_plain = !(ep->tx_op_flags & ~plain);
	ep->fast_report = ep->tx_reports(ep->tx_op_flags);
}

// fi_ep_bind of a CQ (vrma_cq.cpp): FI_TRANSMIT and/or FI_RECV, optionally
// FI_SELECTIVE_COMPLETION; the CQ of the endpoint's domain; one per
// direction. 0 or a negative FI_E* code with one warning.
int ep_bind_cq(EpBase *ep, Cq *cq, uint64_t flags) noexcept;
// fi_control FI_GETOPSFLAG: the transmit or the receive default flags
// (exactly one of FI_TRANSMIT, FI_RECV in *arg).
int ep_get_ops_flag(const EpBase *ep, void *arg) noexcept;

} // namespace vrma
