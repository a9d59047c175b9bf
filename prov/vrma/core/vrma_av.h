// Address vectors (vrma_av.cpp).
#pragma once

#include "vrma_domain.h"
#include "vrma_eq.h"

namespace vrma {

// An address vector (vrma_av.cpp): fi_addr_t handles for peers' listening
// addresses, for the RDM endpoint. The table is rdm::AvTable (src/av_table.h);
// the AV adds the domain's address format, the lock and FI_EVENT reporting.
struct Av final : fid_av {
	using FidType = fid_av;
	Domain *domain = nullptr;
	fi_av_type type = FI_AV_MAP; // FI_AV_MAP or FI_AV_TABLE (never UNSPEC)
	// The domain's addr_format: what fi_av_insert takes and fi_av_lookup
	// returns (FI_SOCKADDR_IN, FI_SOCKADDR_IN6, FI_SOCKADDR or FI_ADDR_STR).
	uint32_t addr_format = FI_SOCKADDR_IN;
	bool events = false; // FI_EVENT: inserts report to the bound EQ
	// FI_AV_USER_ID in fi_av_attr::flags: every entry reports
	// FI_ADDR_NOTAVAIL until fi_av_set_user_id names its id (the insert
	// flag is then refused).
	bool user_id_attr = false;
	// Some entry may report a user id (user_id_attr, or an insert with the
	// FI_AV_USER_ID flag). Never cleared. Setting an id bumps epoch, so
	// that endpoints look their peers' report_addr up again.
	std::atomic<bool> user_ids{false};
	// Guards table and eq. Every call takes it, lookups too (an insert may
	// reallocate the table). Hazard: the RDM data path resolves handles
	// through av_lookup_addr; a handle the application removed must never
	// silently reach a newer peer. AvTable does not reuse a removed slot
	// until max_slots were handed out, and FI_AV_MAP handles carry the
	// slot's generation, so lookup of a removed handle fails; per-peer state
	// an endpoint keeps by slot must be keyed by (index, gen) as well.
	CheckedMutex lock;
	rdm::AvTable table;
	Eq *eq = nullptr;         // FI_EVENT: bound by fi_av_bind (once)
	std::atomic<int> refs{0}; // endpoints bound (fi_close: -FI_EBUSY)
	// Changes with every insert and remove: RDM endpoints cache the handle
	// of each peer (FI_SOURCE) and look again when it moved.
	std::atomic<uint64_t> epoch{0};
};

// vrma_av.cpp
int av_open(fid_domain *domain, fi_av_attr *attr, fid_av **av, void *context) noexcept;
// For the RDM endpoint. The address a live handle names (false for a handle
// never returned, removed, or stale), and the handle of an address (the
// lowest live one; FI_ADDR_NOTAVAIL when absent: FI_SOURCE of a peer the
// AV does not know). Both take the AV's lock.
bool av_lookup_addr(Av *av, fi_addr_t fi_addr, rdm::RdmAddr &out) noexcept;
// av_reverse also sets `report` to what completions report for the
// handle (its user id, else the handle: AvTable::report_addr).
fi_addr_t av_reverse(Av *av, const rdm::RdmAddr &addr, fi_addr_t &report) noexcept;

} // namespace vrma
