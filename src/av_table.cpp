#include "av_table.h"

#include <algorithm>
#include <tuple>

#include <rdma/fi_errno.h>

namespace vrma::rdm {

AvTable::AvTable(Kind kind, size_t max_slots) noexcept
	: kind_(kind), max_slots_(std::clamp(max_slots, size_t(1), kSlotLimit))
{
}

int AvTable::reserve(size_t count) noexcept
{
	try {
		slots_.reserve(std::min(count, max_slots_));
		reverse_.reserve(count);
	} catch (...) { // bad_alloc, length_error
		return -FI_ENOMEM;
	}
	return 0;
}

fi_addr_t AvTable::handle(uint32_t index) const noexcept
{
	if (kind_ == Kind::Table)
		return index;
	return fi_addr_t(slots_[index].gen & kGenMask) << 32 | index;
}

uint32_t AvTable::live_index(fi_addr_t fi_addr) const noexcept
{
	const uint64_t index = fi_addr & UINT32_MAX;
	if (kind_ == Kind::Table ? fi_addr != index : (fi_addr >> 56) != 0)
		return kNone;
	if (index >= slots_.size() || !slots_[index].live)
		return kNone;
	if (kind_ == Kind::Map && (fi_addr >> 32) != (slots_[index].gen & kGenMask))
		return kNone;
	return static_cast<uint32_t>(index);
}

int AvTable::insert(const RdmAddr &addr, fi_addr_t &fi_addr) noexcept
{
	if (!connectable(addr))
		return -FI_EINVAL;
	const bool grow = slots_.size() < max_slots_;
	if (!grow && free_head_ == kNone)
		return -FI_ENOSPC;
	const uint32_t index = grow ? static_cast<uint32_t>(slots_.size()) : free_head_;

	// The two allocations first, undone if the second fails; nothing else
	// changes until both are done.
	try {
		if (grow)
			slots_.emplace_back();
	} catch (...) {
		return -FI_ENOMEM;
	}
	std::unordered_map<RdmAddr, uint32_t, RdmAddrHash>::iterator it;
	bool first;
	try {
		std::tie(it, first) = reverse_.try_emplace(addr, index);
	} catch (...) {
		if (grow)
			slots_.pop_back();
		return -FI_ENOMEM;
	}

	Slot &s = slots_[index];
	if (!grow) {
		free_head_ = s.next;
		if (free_head_ == kNone)
			free_tail_ = kNone;
		s.gen++;
	}
	s.addr = addr;
	s.live = true;
	s.next = kNone;
	s.has_user_id = false;
	s.user_id = FI_ADDR_NOTAVAIL;
	if (!first) {
		// A duplicate: into the address's ascending list. A new slot is
		// the highest index, but a reused one may be lower than any.
		uint32_t &head = it->second;
		if (index < head) {
			s.next = head;
			head = index;
		} else {
			uint32_t p = head;
			while (slots_[p].next != kNone && slots_[p].next < index)
				p = slots_[p].next;
			s.next = slots_[p].next;
			slots_[p].next = index;
		}
	}
	live_++;
	fi_addr = handle(index);
	return 0;
}

size_t AvTable::insert_bulk(const RdmAddr *addrs, size_t n, fi_addr_t *fi_addrs,
			    int *errors) noexcept
{
	size_t inserted = 0;
	for (size_t i = 0; i < n; i++) {
		fi_addr_t a = FI_ADDR_NOTAVAIL;
		const int ret = insert(addrs[i], a);
		if (ret == 0)
			inserted++;
		if (fi_addrs)
			fi_addrs[i] = ret == 0 ? a : FI_ADDR_NOTAVAIL;
		if (errors)
			errors[i] = ret;
	}
	return inserted;
}

int AvTable::remove(fi_addr_t fi_addr) noexcept
{
	const uint32_t index = live_index(fi_addr);
	if (index == kNone)
		return -FI_EINVAL;
	Slot &s = slots_[index];
	// A live slot's address is always in the map, its list holding the slot.
	const auto it = reverse_.find(s.addr);
	if (it->second == index) {
		if (s.next == kNone)
			reverse_.erase(it);
		else
			it->second = s.next;
	} else {
		uint32_t p = it->second;
		while (slots_[p].next != index)
			p = slots_[p].next;
		slots_[p].next = s.next;
	}
	s.live = false;
	s.next = kNone;
	if (free_tail_ == kNone)
		free_head_ = index;
	else
		slots_[free_tail_].next = index;
	free_tail_ = index;
	live_--;
	return 0;
}

std::optional<AvEntry> AvTable::lookup(fi_addr_t fi_addr) const noexcept
{
	const uint32_t index = live_index(fi_addr);
	if (index == kNone)
		return std::nullopt;
	const Slot &s = slots_[index];
	return AvEntry{s.addr, index, s.gen};
}

fi_addr_t AvTable::reverse(const RdmAddr &addr) const noexcept
{
	const auto it = reverse_.find(addr);
	return it == reverse_.end() ? FI_ADDR_NOTAVAIL : handle(it->second);
}

int AvTable::set_user_id(fi_addr_t fi_addr, fi_addr_t user_id) noexcept
{
	const uint32_t index = live_index(fi_addr);
	if (index == kNone)
		return -FI_EINVAL;
	slots_[index].has_user_id = true;
	slots_[index].user_id = user_id;
	return 0;
}

fi_addr_t AvTable::report_addr(fi_addr_t fi_addr) const noexcept
{
	const uint32_t index = live_index(fi_addr);
	if (index == kNone || !slots_[index].has_user_id)
		return fi_addr;
	return slots_[index].user_id;
}

} // namespace vrma::rdm
