// Memory registration: one ibv_mr per fid_mr; key = rkey (or the
// application's key with scalable keys), desc = the region's MrDesc.
//
// Registration on demand (domains for FI_EP_RDM): ibv_reg_mr pins every
// page of a region, faulting in the ones the application never touched, so
// a large buffer registered "just in case" (fabtests' result and compare
// buffers, a SHMEM heap) costs its whole size in resident memory at once.
// A region of at least Domain::on_demand_min bytes of which fewer than half
// the pages are resident (mincore) is therefore registered with the device
// only when the device first needs it:
//  - a peer's RDMA to it: the peer cannot know the device key yet (provider
//    keys of such regions carry kOnDemandKeyBit; with scalable keys the
//    table entry says kAccessUnregistered), so it sends a KeyRequest, and
//    the target's progress registers the region and answers
//    (domain_key_request);
//  - an MSG endpoint's local use of its desc (desc_register_on_demand).
// vrma's emulated atomics need no device key (the target's CPU applies
// them), and RDM endpoints use a desc only when it covers the buffer
// (otherwise the registration cache registers just what an operation
// touches): neither registers the region.
#include "vrma_cq.h"
#include "vrma_rdm_api.h"

#include <bit>
#include <sys/mman.h>
#include <unistd.h>

namespace vrma {

namespace {

constexpr uint64_t kAccessKnown =
	FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// Each libfabric access right maps to the verbs right it needs. The device
// enforces them: a remote write into a region without FI_REMOTE_WRITE fails.
int access_to_ibv(uint64_t access, bool device_atomics)
{
	if (!(access & kAccessKnown))
		access = FI_SEND | FI_RECV; // 0: local use only
	int a = 0;
	// Local write: the device writes received or read data into the buffer.
	if (access & (FI_RECV | FI_READ))
		a |= IBV_ACCESS_LOCAL_WRITE;
	if (access & FI_REMOTE_WRITE)
		a |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE; // verbs requires both
	// Native atomics (FI_VRMA_RDM_NATIVE_ATOMICS), where the device has
	// them: a device atomic always returns the old value, so it reads as
	// well as writes. Granted only to regions open for both: a fetch-add
	// of 0 must not read a write-only region.
	if ((access & FI_REMOTE_WRITE) && (access & FI_REMOTE_READ) && device_atomics)
		a |= IBV_ACCESS_REMOTE_ATOMIC;
	if (access & FI_REMOTE_READ)
		a |= IBV_ACCESS_REMOTE_READ;
	return a;
}

// Whether to register [buf, buf + len) on demand: a domain that does so,
// a region at least on_demand_min long, fewer than half of whose pages are
// resident. The answer is a snapshot (mincore); a region it cannot tell
// about is registered at once.
bool register_on_demand(const Domain *dom, const void *buf, size_t len) noexcept
{
	if (!dom->on_demand_min || len < dom->on_demand_min)
		return false;
	static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
	const uintptr_t first = reinterpret_cast<uintptr_t>(buf) & ~(page - 1);
	const uintptr_t end = reinterpret_cast<uintptr_t>(buf) + len;
	const size_t pages = (end - first + page - 1) / page;
	size_t resident = 0;
	unsigned char vec[4096];
	for (size_t done = 0; done < pages;) {
		const size_t n = std::min(pages - done, sizeof vec);
		if (mincore(reinterpret_cast<void *>(first + done * page), n * page, vec) != 0)
			return false; // part of it is not mapped: ibv_reg_mr says so
		for (size_t i = 0; i < n; i++)
			resident += vec[i] & 1;
		done += n;
	}
	return resident * 2 < pages;
}

// The region's entry in the key table (scalable keys).
keys::KeyEntry table_entry(const Mr *mr) noexcept
{
	keys::KeyEntry e;
	e.key = mr->key;
	e.va = reinterpret_cast<uintptr_t>(mr->addr);
	e.start = mr->offset;
	e.len = mr->len;
	e.rkey = mr->mr_rkey;
	e.access = ((mr->access & FI_REMOTE_READ) ? keys::kAccessRemoteRead : 0) |
		   ((mr->access & FI_REMOTE_WRITE) ? keys::kAccessRemoteWrite : 0) |
		   (mr->mr ? 0 : keys::kAccessUnregistered);
	return e;
}

int mr_close(fid *f) noexcept
{
	Mr *mr = from_fid<Mr>(f);
	Domain *dom = mr->domain;
	// Out of the registry first: the commit service must not persist a
	// range whose registration is going away (it flushes CPU caches under
	// this lock, and msyncs outside it with the region marked persisting:
	// closing waits for those, and no new one starts).
	std::unique_lock guard(dom->mr_lock);
	mr->closing = true;
	dom->mr_persisted.wait(guard, [mr] { return mr->persisting == 0; });
	// Unpublished before the device key dies: a peer that cached it gets
	// a remote access error, never another region's memory.
	if (mr->published)
		dom->key_table.erase(mr->key);
	if (mr->mr) {
		ibv_mr *raw = mr->mr.release();
		if (int rc = ibv_dereg_mr(raw)) {
			VRMA_WARN(FI_LOG_MR, "ibv_dereg_mr: %s\n", strerror(rc));
			mr->mr.reset(raw);
			mr->closing = false;
			if (mr->published)
				(void)dom->key_table.insert(table_entry(mr));
			return errno_to_fi(rc);
		}
		dom->mrs_by_key.erase(mr->mr_rkey);
	}
	if (mr->on_demand)
		dom->on_demand.erase(mr->key);
	// The desc outlives the Mr, closed: posts naming it are refused.
	mr->desc->on_demand.store(nullptr, std::memory_order_relaxed);
	dom->mr_descs.give(mr->desc);
	for (Cntr *c : {mr->cntr_remote_read.load(), mr->cntr_remote_write.load()})
		if (c)
			c->refs--;
	mr->domain->refs--;
	delete mr;
	return 0;
}

// FI_RMA_EVENT: a counter of the peer's operations on this region. Counted
// when the initiating endpoint's event message reaches an FI_RMA_EVENT
// endpoint of this domain.
int mr_bind(fid *f, fid *bfid, uint64_t flags) noexcept
{
	Mr *mr = from_fid<Mr>(f);
	if (!bfid || bfid->fclass != FI_CLASS_CNTR) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_bind: only counters can be bound (FI_RMA_EVENT)\n");
		return -FI_EINVAL;
	}
	if (!flags || (flags & ~(FI_REMOTE_READ | FI_REMOTE_WRITE))) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_bind: flags 0x%llx; FI_REMOTE_READ and/or FI_REMOTE_WRITE\n",
			  static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	Cntr *c = from_fid<Cntr>(bfid);
	if (c->domain != mr->domain) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_bind: counter belongs to another domain\n");
		return -FI_EINVAL;
	}
	if (((flags & FI_REMOTE_READ) && mr->cntr_remote_read.load()) ||
	    ((flags & FI_REMOTE_WRITE) && mr->cntr_remote_write.load())) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_bind: a counter is already bound for that event\n");
		return -FI_EINVAL;
	}
	if (flags & FI_REMOTE_READ) {
		c->refs++;
		mr->cntr_remote_read.store(c, std::memory_order_release);
	}
	if (flags & FI_REMOTE_WRITE) {
		c->refs++;
		mr->cntr_remote_write.store(c, std::memory_order_release);
	}
	return 0;
}

int mr_control(fid *, int command, void *) noexcept
{
	// Regions registered with FI_RMA_EVENT are enabled after binding;
	// vrma's count from the bind on.
	if (command == FI_ENABLE)
		return 0;
	VRMA_WARN(FI_LOG_MR, "fi_control(mr, %d) is not supported\n", command);
	return -FI_ENOSYS;
}

constexpr fi_ops mr_fi_ops = {
	.size = sizeof(fi_ops),
	.close = mr_close,
	.bind = mr_bind,
	.control = mr_control,
	.ops_open = fid_no_ops_open,
	.tostr = fid_tostr,
	.ops_set = fid_no_ops_set,
};

// Registers one region of `dom`; `attr` has the 1.17 fields only (the later
// ones were checked by the caller).
int mr_register(Domain *dom, const fi_mr_attr *attr, uint64_t flags, fid_mr **mr_out) noexcept
try {
	// The top bits are libfabric's internal flags (ofi_rxm passes its
	// registration-cache bit to the core provider): ignored.
	constexpr uint64_t kPrivateFlags = ~((1ULL << 59) - 1);
	// FI_RMA_EVENT: counters will be bound (fi_mr_bind, then FI_ENABLE).
	// FI_RMA_PMEM: persistent memory, the target of commits
	// (FI_COMMIT_COMPLETE): its backing is found now, not at the first
	// commit. Commits into regions without it are served the same way.
	if (flags & ~(kPrivateFlags | FI_RMA_EVENT | FI_RMA_PMEM)) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_reg: unsupported flags 0x%llx\n",
			  static_cast<unsigned long long>(flags & ~kPrivateFlags));
		return -FI_EBADFLAGS;
	}
	if (attr->iov_count != 1 || !attr->mr_iov) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_reg: %zu segments; vrma registers exactly one (mr_iov_limit 1)\n",
			  attr->iov_count);
		return -FI_EINVAL;
	}
	if (attr->access & ~kAccessKnown) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_reg: unsupported access bits 0x%llx\n",
			  static_cast<unsigned long long>(attr->access & ~kAccessKnown));
		return -FI_EINVAL;
	}
	if (attr->iface != FI_HMEM_SYSTEM) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_reg: only host memory (FI_HMEM_SYSTEM) is supported\n");
		return -FI_EINVAL;
	}
	const iovec &iov = attr->mr_iov[0];
	if (!iov.iov_base && iov.iov_len) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_reg: NULL buffer of length %zu\n", iov.iov_len);
		return -FI_EINVAL;
	}
	auto mr = std::make_unique<Mr>();
	mr->domain = dom;
	mr->addr = iov.iov_base;
	mr->len = iov.iov_len;
	mr->offset = attr->offset;
	mr->access = attr->access;
	mr->ibv_access = access_to_ibv(
		attr->access, rdm_params.native_atomics && dom->dev_attr.atomic_cap != IBV_ATOMIC_NONE);
	mr->on_demand = register_on_demand(dom, iov.iov_base, iov.iov_len);
	if (!mr->on_demand) {
		mr->mr.reset(ibv_reg_mr(dom->pd.get(), iov.iov_base, iov.iov_len, mr->ibv_access));
		if (!mr->mr) {
			int err = errno;
			VRMA_WARN(FI_LOG_MR, "ibv_reg_mr(%p, %zu): %s\n", iov.iov_base, iov.iov_len,
				  strerror(err));
			// EINVAL/EFAULT here mean a bad buffer, not a full table.
			return errno_to_fi(err);
		}
		mr->mr_rkey = mr->mr->rkey;
	}
	if (flags & FI_RMA_PMEM)
		mr->backing.store(pmem_region_backing(mr->addr, true), std::memory_order_relaxed);
	mr->fid.fclass = FI_CLASS_MR;
	mr->fid.context = attr->context;
	mr->fid.ops = const_cast<fi_ops *>(&mr_fi_ops);
	// Scalable keys: published when peers may access the region (a
	// local-only registration needs no key, so its key is not checked).
	const bool remote = attr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE);
	mr->published = dom->scalable_keys && remote;
	{
		std::lock_guard guard(dom->mr_lock);
		mr->key = dom->scalable_keys ? attr->requested_key
			  : mr->on_demand    ? kOnDemandKeyBit | dom->next_on_demand_key++
					     : mr->mr_rkey;
		// The range as registered (the device's view of it); none yet
		// for a region registered on demand.
		mr->desc = mr->on_demand ? dom->mr_descs.take(UINTPTR_MAX, 0, 0, false)
					 : dom->mr_descs.take(reinterpret_cast<uintptr_t>(mr->mr->addr),
							      mr->mr->length, mr->mr->lkey,
							      mr->ibv_access & IBV_ACCESS_LOCAL_WRITE);
		if (!mr->desc)
			return -FI_ENOMEM;
		if (mr->on_demand) {
			mr->desc->end.store(0, std::memory_order_relaxed);
			mr->desc->on_demand.store(mr.get(), std::memory_order_relaxed);
		}
		mr->mem_desc = mr->desc;
		if (mr->published) {
			const keys::Insert r = dom->key_table.insert(table_entry(mr.get()));
			if (r != keys::Insert::Ok) {
				mr->desc->on_demand.store(nullptr, std::memory_order_relaxed);
				dom->mr_descs.give(mr->desc);
				if (r == keys::Insert::Duplicate) {
					VRMA_WARN(FI_LOG_MR, "fi_mr_reg: key 0x%llx is in use in this domain\n",
						  static_cast<unsigned long long>(mr->key));
					return -FI_ENOKEY;
				}
				VRMA_WARN(FI_LOG_MR, "fi_mr_reg: no room for key 0x%llx (%zu of %zu keys used; FI_VRMA_MR_KEYS)\n",
					  static_cast<unsigned long long>(mr->key), dom->key_table.size(),
					  dom->key_table.capacity());
				return -FI_ENOSPC;
			}
		}
		// Peers reach a region registered on demand by its key (unique:
		// the table refused a duplicate, provider keys are never reused).
		if (mr->on_demand && remote) {
			try {
				dom->on_demand[mr->key] = mr.get();
			} catch (...) {
				if (mr->published)
					dom->key_table.erase(mr->key);
				mr->desc->on_demand.store(nullptr, std::memory_order_relaxed);
				dom->mr_descs.give(mr->desc);
				return -FI_ENOMEM;
			}
		}
		if (mr->mr)
			dom->mrs_by_key[mr->mr_rkey] = mr.get();
	}
	if (mr->on_demand) {
		dom->on_demand_regions.fetch_add(1, std::memory_order_relaxed);
		VRMA_INFO(FI_LOG_MR, "fi_mr_reg(%p, %zu): mostly untouched, registered with the device at its first use\n",
			  iov.iov_base, iov.iov_len);
	}
	dom->refs++;
	*mr_out = mr.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

// The domain of a registration call's fid, or null after one warning.
Domain *mr_domain(fid *f) noexcept
{
	if (!f || f->fclass != FI_CLASS_DOMAIN) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_reg: not a domain\n");
		return nullptr;
	}
	return from_fid<Domain>(f);
}

// fi_mr_regattr: `attr` is the application's, of its API version's size
// (abi_compat.h): the fields after 1.17 are read where that version has them.
int mr_regattr(fid *f, const fi_mr_attr *attr, uint64_t flags, fid_mr **mr_out) noexcept
{
	Domain *dom = mr_domain(f);
	if (!dom)
		return -FI_EINVAL;
	if (!attr || !mr_out) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_regattr: NULL attribute or output\n");
		return -FI_EINVAL;
	}
	if (flags & abi::kMrDmabuf) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_regattr: FI_MR_DMABUF: vrma registers host memory only\n");
		return -FI_EOPNOTSUPP;
	}
	const abi::MrTail tail = abi::mr_tail(*attr, dom->api());
	if (tail.base_mr) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_regattr: base_mr: vrma creates no sub-regions\n");
		return -FI_EOPNOTSUPP;
	}
	if (tail.hmem_data) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_regattr: hmem_data is reserved and must be NULL\n");
		return -FI_EINVAL;
	}
	// page_size and sub_mr_cnt are hints: the device picks its pages, and
	// there are no sub-regions to prepare for.
	return mr_register(dom, attr, flags, mr_out);
}

int mr_regv(fid *f, const iovec *iov, size_t count, uint64_t access, uint64_t offset,
	    uint64_t requested_key, uint64_t flags, fid_mr **mr, void *context) noexcept
{
	Domain *dom = mr_domain(f);
	if (!dom)
		return -FI_EINVAL;
	if (!mr) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_reg: NULL output\n");
		return -FI_EINVAL;
	}
	fi_mr_attr attr{};
	attr.mr_iov = iov;
	attr.iov_count = count;
	attr.access = access;
	attr.offset = offset;
	attr.requested_key = requested_key; // the key with scalable keys; else ignored
	attr.context = context;
	attr.iface = FI_HMEM_SYSTEM;
	// vrma's own attribute, of the 1.17 size: not mr_regattr's reading.
	return mr_register(dom, &attr, flags, mr);
}

int mr_reg(fid *f, const void *buf, size_t len, uint64_t access, uint64_t offset,
	   uint64_t requested_key, uint64_t flags, fid_mr **mr, void *context) noexcept
{
	const iovec iov = {const_cast<void *>(buf), len};
	return mr_regv(f, &iov, 1, access, offset, requested_key, flags, mr, context);
}

} // namespace

MrDesc *MrDescPool::take(uintptr_t start, size_t len, uint32_t lkey, bool local_write) noexcept
{
	MrDesc *d;
	if (closed_.size() > kMrDescQuarantine) {
		d = closed_.pop_front();
	} else {
		if (used_ == kChunk) {
			std::unique_ptr<Chunk> c(new (std::nothrow) Chunk);
			if (!c)
				return nullptr;
			c->next = std::move(chunks_);
			chunks_ = std::move(c);
			used_ = 0;
		}
		d = &chunks_->recs[used_++];
	}
	// The key before the range: a racing post that sees the new range
	// (relaxed, so only in practice) uses a key of this domain either way.
	d->lkey.store(lkey, std::memory_order_relaxed);
	d->local_write.store(local_write, std::memory_order_relaxed);
	d->end.store(start + len, std::memory_order_relaxed);
	d->start.store(start, std::memory_order_relaxed);
	return d;
}

void MrDescPool::give(MrDesc *d) noexcept
{
	// Start first: while it is UINTPTR_MAX nothing is covered.
	d->start.store(UINTPTR_MAX, std::memory_order_relaxed);
	d->end.store(0, std::memory_order_relaxed);
	d->lkey.store(0, std::memory_order_relaxed);
	d->local_write.store(false, std::memory_order_relaxed);
	closed_.push_back(d);
}

ssize_t desc_refused(const MrDesc *d, const void *buf, size_t len) noexcept
{
	if (d->closed()) {
		VRMA_WARN(FI_LOG_EP_DATA, "desc %p names a memory region already closed (buffer %p, %zu bytes)\n",
			  static_cast<const void *>(d), buf, len);
	} else {
		const uintptr_t s = d->start.load(std::memory_order_relaxed);
		const uintptr_t e = d->end.load(std::memory_order_relaxed);
		VRMA_WARN(FI_LOG_EP_DATA, "buffer %p of %zu bytes is outside the region of its desc (%p, %zu bytes)\n",
			  buf, len, reinterpret_cast<const void *>(s), static_cast<size_t>(e - s));
	}
	return -FI_EINVAL;
}

bool domain_scalable_keys(const fi_info &info) noexcept
{
	const int mode = info.domain_attr->mr_mode;
	const bool rma = !info.caps || (info.caps & (FI_RMA | FI_ATOMIC));
	return rma && info.ep_attr && info.ep_attr->type == FI_EP_RDM &&
	       ((mode & abi::kMrScalable) || !(mode & (abi::kMrBasic | FI_MR_PROV_KEY)));
}

int domain_open_key_table(Domain *dom) noexcept
{
	const size_t buckets = std::bit_ceil(rdm_params.mr_keys / keys::kBucketEntries);
	const size_t bytes = buckets * keys::kBucketBytes;
	dom->key_table_mem.reset(new (std::nothrow) uint8_t[bytes]());
	if (!dom->key_table_mem)
		return -FI_ENOMEM;
	dom->key_table_mr.reset(ibv_reg_mr(dom->pd.get(), dom->key_table_mem.get(), bytes,
					   IBV_ACCESS_REMOTE_READ));
	if (!dom->key_table_mr) {
		const int err = errno;
		VRMA_WARN(FI_LOG_DOMAIN, "registering the key table (%zu bytes): %s\n", bytes,
			  strerror(err));
		return errno_to_fi(err);
	}
	dom->key_table = keys::KeyTable(dom->key_table_mem.get(), buckets);
	dom->scalable_keys = true;
	return 0;
}

bool domain_resolve_key(Domain *dom, uint64_t key, keys::KeyEntry &out, Mr **mr_out) noexcept
{
	VRMA_ASSERT_HELD(dom->mr_lock);
	const Mr *mr = nullptr;
	if (dom->scalable_keys) {
		if (!dom->key_table.find(key, out))
			return false;
		if (mr_out) {
			if (out.access & keys::kAccessUnregistered) {
				auto it = dom->on_demand.find(key);
				*mr_out = it == dom->on_demand.end() ? nullptr : it->second;
			} else {
				auto it = dom->mrs_by_key.find(out.rkey);
				*mr_out = it == dom->mrs_by_key.end() ? nullptr : it->second;
			}
		}
		return true;
	}
	if (key & kOnDemandKeyBit) {
		auto it = dom->on_demand.find(key);
		if (it == dom->on_demand.end())
			return false;
		mr = it->second;
	} else {
		mr = mr_by_device_key(dom, key);
		if (!mr)
			return false;
	}
	out = table_entry(mr);
	out.key = key;
	out.start = out.va; // virtual addresses
	if (mr_out)
		*mr_out = const_cast<Mr *>(mr);
	return true;
}

int mr_register_now(Domain *dom, Mr *mr) noexcept
{
	VRMA_ASSERT_HELD(dom->mr_lock);
	if (mr->mr)
		return 0;
	mr->mr.reset(ibv_reg_mr(dom->pd.get(), mr->addr, mr->len, mr->ibv_access));
	if (!mr->mr) {
		const int err = errno;
		VRMA_WARN(FI_LOG_MR, "registering region %p (%zu bytes) on demand: ibv_reg_mr: %s\n",
			  mr->addr, mr->len, strerror(err));
		return errno_to_fi(err);
	}
	try {
		dom->mrs_by_key[mr->mr->rkey] = mr;
	} catch (...) {
		(void)ibv_dereg_mr(mr->mr.release());
		return -FI_ENOMEM;
	}
	mr->mr_rkey = mr->mr->rkey;
	// The key before the range, as MrDescPool::take orders them.
	MrDesc *d = mr->desc;
	d->lkey.store(mr->mr->lkey, std::memory_order_relaxed);
	d->local_write.store(mr->ibv_access & IBV_ACCESS_LOCAL_WRITE, std::memory_order_relaxed);
	d->end.store(reinterpret_cast<uintptr_t>(mr->mr->addr) + mr->mr->length, std::memory_order_relaxed);
	d->start.store(reinterpret_cast<uintptr_t>(mr->mr->addr), std::memory_order_relaxed);
	d->on_demand.store(nullptr, std::memory_order_relaxed);
	if (mr->published)
		(void)dom->key_table.update(table_entry(mr));
	dom->on_demand_registered.fetch_add(1, std::memory_order_relaxed);
	VRMA_INFO(FI_LOG_MR, "region %p (%zu bytes) registered on demand\n", mr->addr, mr->len);
	return 0;
}

rdm::KeyStatus domain_key_request(Domain *dom, uint64_t key, uint8_t access, rdm::KeyAnswer &out) noexcept
{
	out = {};
	out.entry.key = key;
	std::lock_guard guard(dom->mr_lock);
	keys::KeyEntry e;
	Mr *mr = nullptr;
	constexpr uint8_t kRights = keys::kAccessRemoteRead | keys::kAccessRemoteWrite;
	if (!domain_resolve_key(dom, key, e, &mr) || !(e.access & kRights) || !mr || !mr->len)
		return out.status = rdm::KeyStatus::Absent;
	// Registered (pinned) only for an access the region allows: the
	// answer without a device key tells the initiator what it lacks.
	if ((e.access & access) == access && mr_register_now(dom, mr))
		return out.status = rdm::KeyStatus::Failed;
	out.entry = table_entry(mr);
	out.entry.key = key;
	if (!dom->scalable_keys)
		out.entry.start = out.entry.va; // virtual addresses
	return out.status = rdm::KeyStatus::Ok;
}

bool desc_register_on_demand(Domain *dom, const MrDesc *d, const void *buf, size_t len) noexcept
{
	if (!d->on_demand.load(std::memory_order_relaxed))
		return false;
	std::lock_guard guard(dom->mr_lock);
	// Again under the lock: fi_close clears it before the Mr goes.
	Mr *mr = d->on_demand.load(std::memory_order_relaxed);
	if (mr && mr_register_now(dom, mr))
		return false;
	return d->covers(buf, len);
}

void count_region_event(Mr *mr, bool write) noexcept
{
	VRMA_ASSERT_HELD(mr->domain->mr_lock);
	count_completion((write ? mr->cntr_remote_write : mr->cntr_remote_read).load(std::memory_order_acquire),
			 true);
}

void count_region_events(Domain *dom, bool write, const uint64_t *keys, size_t n) noexcept
{
	std::lock_guard guard(dom->mr_lock);
	for (size_t i = 0; i < n; i++)
		if (Mr *mr = mr_by_device_key(dom, keys[i]))
			count_region_event(mr, write);
}

Mr *mr_by_device_key(Domain *dom, uint64_t key) noexcept
{
	VRMA_ASSERT_HELD(dom->mr_lock);
	if (key > UINT32_MAX)
		return nullptr; // no region has it
	auto it = dom->mrs_by_key.find(static_cast<uint32_t>(key));
	return it == dom->mrs_by_key.end() ? nullptr : it->second;
}

bool rma_event_plausible(Domain *dom, bool write, const uint64_t *keys, size_t n,
			 uint64_t length) noexcept
{
	if (!n)
		return length == 0;
	const uint64_t need = write ? FI_REMOTE_WRITE : FI_REMOTE_READ;
	uint64_t room = 0; // n <= 16 regions of < 2^48 bytes: no overflow
	std::lock_guard guard(dom->mr_lock);
	for (size_t i = 0; i < n; i++) {
		const Mr *mr = mr_by_device_key(dom, keys[i]);
		if (!mr || !(mr->access & need))
			return false;
		room += mr->len;
	}
	return length <= room * kMaxRmaIov;
}

const fi_ops_mr mr_ops = {
	.size = sizeof(fi_ops_mr),
	.reg = mr_reg,
	.regv = mr_regv,
	.regattr = mr_regattr,
};

} // namespace vrma
