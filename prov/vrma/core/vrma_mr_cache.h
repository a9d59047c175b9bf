// Registrations of application buffers the application did not register
// itself (RDM endpoints need no FI_MR_LOCAL: desc is NULL), for the
// zero-copy rendezvous: the sender's buffer (remote read) and the
// receiver's (local write).
//
// One MrCache per domain, made at the first use: a RegCache (src/) of ibv
// registrations kept correct by a MemMonitor (src/, userfaultfd), which
// reports munmap, brk shrink, madvise(MADV_DONTNEED) and mremap of every
// cached range before the addresses can be mapped again.
//
// The hazard it closes: a cache without invalidation keeps the pinned old
// pages of a buffer that was freed and whose address came back with new
// memory (free + malloc, munmap + mmap): the peer then reads or writes the
// old pages, silently. Interception of munmap/brk/madvise by symbol (what
// libfabric's memhooks do) misses raw system calls and the allocator's own
// calls inside libc; userfaultfd events come from the kernel.
//
// Without userfaultfd (an unprivileged process: it needs CAP_SYS_PTRACE,
// vm.unprivileged_userfaultfd=1 or /dev/userfaultfd), with
// FI_VRMA_MR_CACHE=0, or for a range the monitor cannot watch, each
// transfer registers its own pages and deregisters them when it ends.
//
// Locks (see mem_monitor.h for why): MrCache::lock is the monitor's
// cache_lock, held only around RegCache calls, which neither allocate nor
// free (RegCache::prepare, RegRetired). Registering, watching, and
// deregistering happen outside it. Callers may hold their endpoint's lock:
// the monitor thread takes no lock but MrCache::lock.
#pragma once

#include "vrma_verbs.h"

#include <rdma/fi_ext_vrma.h>

#include <cstddef>
#include <cstdint>

namespace vrma {

struct Domain;
struct MrCache;
struct UserRegHandle;
class RegEntry;

struct MrCacheDeleter {
	void operator()(MrCache *c) const noexcept;
};

// Parameters (FI_VRMA_MR_CACHE*), read at fi_prov_ini.
struct MrCacheParams {
	bool enabled = true;
	size_t max_size = size_t(1) << 30; // bytes of cached registrations
	size_t max_count = 1024;           // cached registrations
};
extern MrCacheParams mr_cache_params;

// A registration of [addr, addr+len) for one transfer, from the cache or its
// own; released when reset or destroyed. Needs the domain's lock order: no
// MrCache::lock held by the caller (none ever is outside this module).
class UserReg {
public:
	UserReg() = default;
	UserReg(UserReg &&o) noexcept;
	UserReg &operator=(UserReg &&o) noexcept;
	UserReg(const UserReg &) = delete;
	UserReg &operator=(const UserReg &) = delete;
	~UserReg() { reset(); }

	// access: IBV_ACCESS_* bits. 0, or a negative FI_E* code (one warning).
	int acquire(Domain *dom, void *addr, size_t len, int access) noexcept;
	void reset() noexcept;
	explicit operator bool() const noexcept { return mr_ != nullptr; }
	uint32_t lkey() const noexcept { return mr_->lkey; }
	uint32_t rkey() const noexcept { return mr_->rkey; }

private:
	Domain *dom_ = nullptr;
	ibv_mr *mr_ = nullptr;
	RegEntry *entry_ = nullptr;     // cached: the entry referenced
	UserRegHandle *own_ = nullptr;  // not cached: this transfer's own
};

// fi_vrma_domain_ops.mr_cache_stats.
void mr_cache_stats(Domain *dom, fi_vrma_mr_cache_stats &out) noexcept;

// At domain close (no UserReg left): stops the monitor, deregisters all.
void mr_cache_close(Domain *dom) noexcept;

} // namespace vrma
