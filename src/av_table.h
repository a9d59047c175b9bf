// The table behind an RDM address vector: fi_addr_t <-> RdmAddr.
//
// Handles (fi_addr_t values):
//  - FI_AV_TABLE (Kind::Table): the handle is the slot index, assigned 0, 1,
//    2, ... in insertion order, as libfabric promises (applications compute
//    handles from insertion order).
//  - FI_AV_MAP (Kind::Map): the handle is opaque to the application, so it
//    also carries the slot's generation: bits 0-31 the index, bits 32-55 the
//    generation's low 24 bits, bits 56-63 zero (room for fi_rx_addr's context
//    bits, and never FI_ADDR_NOTAVAIL). Until a slot is reused its handle
//    equals the Table one.
//
// Removal and reuse: fi_av_remove tombstones the slot. Slots are not reused
// while the table can grow: a handle that was removed fails lookup() and
// remove() ever after, it never silently names a newer peer. Only once
// max_slots slots have been handed out does insert reuse tombstones, oldest
// removal first (the longest-dead handle); the slot's generation is then
// bumped. Hazard: after such a reuse a stale Table handle (a bare index)
// reaches the new entry; libfabric allows it (the application must not use a
// handle after removing it), and max_slots keeps it rare. A stale Map handle
// still fails unless the slot was reused 2^24 times in between.
//
// Duplicates: inserting an address that is already present gets a new slot
// (libfabric lets a table hold an address more than once); reverse() answers
// the lowest live index holding the address, and the next one once that is
// removed.
//
// Addresses: insert takes only connectable() ones (rdm_wire.h): port 0 or a
// wildcard address could never be a peer's listening address, so they are
// refused (-FI_EINVAL) rather than accepted into an entry no send can reach.
//
// Errors are negative libfabric codes (<rdma/fi_errno.h>); no member throws
// (allocation failure is -FI_ENOMEM and leaves the table as it was).
//
// Not thread-safe: the AV serialises every call with its own lock (lookups
// included: an insert may reallocate the slots).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include <rdma/fabric.h>

#include "wire/rdm_wire.h"

namespace vrma::rdm {

// What a live handle names.
struct AvEntry {
	RdmAddr addr;
	uint32_t index; // the slot (an endpoint's per-peer arrays are indexed by it)
	uint32_t gen;   // the slot's generation: (index, gen) names this entry
			// for good, even across a reuse of the slot
};

class AvTable {
public:
	enum class Kind : uint8_t { Table, Map };

	// Slots handed out before tombstones are reused: 1 Mi entries, 32 MiB
	// of slots at most, plus the reverse map's nodes.
	static constexpr size_t kDefaultMaxSlots = size_t(1) << 20;
	// Indices are 32 bits, and UINT32_MAX is the table's own "none".
	static constexpr size_t kSlotLimit = UINT32_MAX;
	static constexpr uint32_t kGenMask = 0xffffff; // bits of it in a Map handle

	// max_slots is clamped to 1..kSlotLimit.
	explicit AvTable(Kind kind = Kind::Table, size_t max_slots = kDefaultMaxSlots) noexcept;

	Kind kind() const noexcept { return kind_; }
	size_t max_slots() const noexcept { return max_slots_; }
	// Live entries.
	size_t size() const noexcept { return live_; }
	// Slots handed out so far: live ones and tombstones.
	size_t slots() const noexcept { return slots_.size(); }

	// Makes room for count entries (fi_av_attr::count); 0 or -FI_ENOMEM.
	int reserve(size_t count) noexcept;

	// Adds addr; on success (0) fi_addr is its handle. -FI_EINVAL if addr is
	// not connectable(), -FI_ENOSPC if max_slots slots are live, -FI_ENOMEM.
	int insert(const RdmAddr &addr, fi_addr_t &fi_addr) noexcept;

	// fi_av_insert: inserts addrs[0..n), each on its own. fi_addrs[i] (if
	// fi_addrs) gets the handle or FI_ADDR_NOTAVAIL, errors[i] (if errors) 0
	// or insert's negative code (FI_SYNC_ERR wants the positive one).
	// Returns how many were inserted. An address that failed conversion can
	// be passed as a default RdmAddr: it fails with -FI_EINVAL.
	size_t insert_bulk(const RdmAddr *addrs, size_t n, fi_addr_t *fi_addrs,
			   int *errors) noexcept;

	// Tombstones the entry: 0, or -FI_EINVAL if fi_addr is not live (never
	// inserted, already removed, stale).
	int remove(fi_addr_t fi_addr) noexcept;

	// The live entry fi_addr names; nullopt for anything else.
	std::optional<AvEntry> lookup(fi_addr_t fi_addr) const noexcept;

	// The handle of the lowest live slot holding addr, FI_ADDR_NOTAVAIL if
	// none (FI_SOURCE of a receive from a peer the AV does not know).
	fi_addr_t reverse(const RdmAddr &addr) const noexcept;

	// FI_AV_USER_ID: the identifier completions report for a live entry in
	// place of its handle (any value, FI_ADDR_NOTAVAIL included). 0, or
	// -FI_EINVAL if fi_addr is not live. A slot's id ends with its entry.
	int set_user_id(fi_addr_t fi_addr, fi_addr_t user_id) noexcept;
	// What a completion reports for fi_addr: its user id if it has one,
	// else fi_addr itself (also for anything not live: FI_ADDR_NOTAVAIL
	// stays so).
	fi_addr_t report_addr(fi_addr_t fi_addr) const noexcept;

private:
	static constexpr uint32_t kNone = UINT32_MAX;

	struct Slot {
		RdmAddr addr;
		uint32_t gen = 0;
		// Live: the next live slot with the same address (ascending).
		// Tombstone: the next tombstone in removal order.
		uint32_t next = kNone;
		bool live = false;
		bool has_user_id = false;
		fi_addr_t user_id = FI_ADDR_NOTAVAIL;
	};

	fi_addr_t handle(uint32_t index) const noexcept;
	// The slot a live handle names, kNone otherwise.
	uint32_t live_index(fi_addr_t fi_addr) const noexcept;

	Kind kind_;
	size_t max_slots_;
	size_t live_ = 0;
	std::vector<Slot> slots_;
	// Address -> lowest live slot holding it; the others hang off Slot::next.
	std::unordered_map<RdmAddr, uint32_t, RdmAddrHash> reverse_;
	// Tombstones, oldest removal first, linked through Slot::next.
	uint32_t free_head_ = kNone;
	uint32_t free_tail_ = kNone;
};

} // namespace vrma::rdm
