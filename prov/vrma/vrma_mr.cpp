// Memory registration: one ibv_mr per fid_mr; key = rkey, desc = the Mr.
#include "vrma.h"
#include "vrma_rdm.h"

#include <bit>

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
	// Native atomics (FI_VRMA_RDM_NATIVE_ATOMICS) update remotely writable
	// regions: granted where the device has atomics.
	if ((access & FI_REMOTE_WRITE) && device_atomics)
		a |= IBV_ACCESS_REMOTE_ATOMIC;
	if (access & FI_REMOTE_READ)
		a |= IBV_ACCESS_REMOTE_READ;
	return a;
}

int mr_close(fid *f) noexcept
{
	Mr *mr = from_fid<Mr>(f);
	Domain *dom = mr->domain;
	// Out of the registry first: the commit service must not persist a
	// range whose registration is going away (it flushes under this lock).
	std::lock_guard<std::mutex> guard(dom->mr_lock);
	// Unpublished before the device key dies: a peer that cached it gets
	// a remote access error, never another region's memory.
	if (mr->published)
		dom->key_table.erase(mr->key);
	ibv_mr *raw = mr->mr.release();
	if (int rc = ibv_dereg_mr(raw)) {
		VRMA_WARN(FI_LOG_MR, "ibv_dereg_mr: %s\n", strerror(rc));
		mr->mr.reset(raw);
		return errno_to_fi(rc);
	}
	// The desc outlives the Mr, closed: posts naming it are refused.
	dom->mr_descs.give(mr->desc);
	dom->mrs_by_key.erase(mr->mr_rkey);
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

int mr_regattr(fid *f, const fi_mr_attr *attr, uint64_t flags, fid_mr **mr_out) noexcept
try {
	if (!f || f->fclass != FI_CLASS_DOMAIN) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_reg: not a domain\n");
		return -FI_EINVAL;
	}
	Domain *dom = from_fid<Domain>(f);
	if (!attr || !mr_out) {
		VRMA_WARN(FI_LOG_MR, "fi_mr_regattr: NULL attribute or output\n");
		return -FI_EINVAL;
	}
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
	const int ibv_access = access_to_ibv(
		attr->access, rdm_params.native_atomics && dom->dev_attr.atomic_cap != IBV_ATOMIC_NONE);
	mr->mr.reset(ibv_reg_mr(dom->pd.get(), iov.iov_base, iov.iov_len, ibv_access));
	if (!mr->mr) {
		int err = errno;
		VRMA_WARN(FI_LOG_MR, "ibv_reg_mr(%p, %zu): %s\n", iov.iov_base, iov.iov_len,
			  strerror(err));
		// EINVAL/EFAULT here mean a bad buffer, not a full table.
		return errno_to_fi(err);
	}
	if (flags & FI_RMA_PMEM)
		mr->backing.store(pmem_region_backing(mr->mr->addr, true), std::memory_order_relaxed);
	mr->fid.fclass = FI_CLASS_MR;
	mr->fid.context = attr->context;
	mr->fid.ops = const_cast<fi_ops *>(&mr_fi_ops);
	mr->mr_rkey = mr->mr->rkey;
	mr->key = dom->scalable_keys ? attr->requested_key : mr->mr->rkey;
	mr->access = attr->access;
	// Scalable keys: published when peers may access the region (a
	// local-only registration needs no key, so its key is not checked).
	mr->published = dom->scalable_keys && (attr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE));
	{
		std::lock_guard<std::mutex> guard(dom->mr_lock);
		// The range as registered (the device's view of it).
		mr->desc = dom->mr_descs.take(reinterpret_cast<uintptr_t>(mr->mr->addr), mr->mr->length,
					      mr->mr->lkey, ibv_access & IBV_ACCESS_LOCAL_WRITE);
		if (!mr->desc)
			return -FI_ENOMEM;
		mr->mem_desc = mr->desc;
		dom->mrs_by_key[mr->mr->rkey] = mr.get();
		if (mr->published) {
			keys::KeyEntry e;
			e.key = attr->requested_key;
			e.va = reinterpret_cast<uintptr_t>(iov.iov_base);
			e.start = attr->offset;
			e.len = iov.iov_len;
			e.rkey = mr->mr->rkey;
			e.access = ((attr->access & FI_REMOTE_READ) ? keys::kAccessRemoteRead : 0) |
				   ((attr->access & FI_REMOTE_WRITE) ? keys::kAccessRemoteWrite : 0);
			const keys::Insert r = dom->key_table.insert(e);
			if (r != keys::Insert::Ok) {
				dom->mrs_by_key.erase(mr->mr->rkey);
				dom->mr_descs.give(mr->desc);
				if (r == keys::Insert::Duplicate) {
					VRMA_WARN(FI_LOG_MR, "fi_mr_reg: key 0x%llx is in use in this domain\n",
						  static_cast<unsigned long long>(e.key));
					return -FI_ENOKEY;
				}
				VRMA_WARN(FI_LOG_MR, "fi_mr_reg: no room for key 0x%llx (%zu of %zu keys used; FI_VRMA_MR_KEYS)\n",
					  static_cast<unsigned long long>(e.key), dom->key_table.size(),
					  dom->key_table.capacity());
				return -FI_ENOSPC;
			}
		}
	}
	dom->refs++;
	*mr_out = mr.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

int mr_regv(fid *f, const iovec *iov, size_t count, uint64_t access, uint64_t offset,
	    uint64_t requested_key, uint64_t flags, fid_mr **mr, void *context) noexcept
{
	fi_mr_attr attr{};
	attr.mr_iov = iov;
	attr.iov_count = count;
	attr.access = access;
	attr.offset = offset;
	attr.requested_key = requested_key; // the key with scalable keys; else ignored
	attr.context = context;
	attr.iface = FI_HMEM_SYSTEM;
	return mr_regattr(f, &attr, flags, mr);
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
	       ((mode & FI_MR_SCALABLE) || !(mode & (FI_MR_BASIC | FI_MR_PROV_KEY)));
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

bool domain_resolve_key(Domain *dom, uint64_t key, keys::KeyEntry &out) noexcept
{
	if (dom->scalable_keys)
		return dom->key_table.find(key, out);
	if (key > UINT32_MAX)
		return false;
	auto it = dom->mrs_by_key.find(static_cast<uint32_t>(key));
	if (it == dom->mrs_by_key.end())
		return false;
	const Mr *mr = it->second;
	out.key = key;
	out.va = reinterpret_cast<uintptr_t>(mr->mr->addr);
	out.start = out.va; // virtual addresses
	out.len = mr->mr->length;
	out.rkey = mr->mr_rkey;
	out.access = ((mr->access & FI_REMOTE_READ) ? keys::kAccessRemoteRead : 0) |
		     ((mr->access & FI_REMOTE_WRITE) ? keys::kAccessRemoteWrite : 0);
	return true;
}

void count_region_events(Domain *dom, bool write, const uint64_t *keys, size_t n) noexcept
{
	std::lock_guard<std::mutex> guard(dom->mr_lock);
	for (size_t i = 0; i < n; i++) {
		if (keys[i] > UINT32_MAX)
			continue; // no region has it
		auto it = dom->mrs_by_key.find(static_cast<uint32_t>(keys[i]));
		if (it == dom->mrs_by_key.end())
			continue;
		Mr *mr = it->second;
		count_completion((write ? mr->cntr_remote_write : mr->cntr_remote_read).load(std::memory_order_acquire),
				 true);
	}
}

const fi_ops_mr mr_ops = {
	.size = sizeof(fi_ops_mr),
	.reg = mr_reg,
	.regv = mr_regv,
	.regattr = mr_regattr,
};

} // namespace vrma
