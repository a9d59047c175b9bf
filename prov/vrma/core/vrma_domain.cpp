// The domain: one protection domain on one RDMA device.
#include "vrma_av.h"
#include "vrma_cq.h"
#include "vrma_progress.h"
#include "vrma_rdm_api.h"

namespace vrma {

namespace {

int domain_close(fid *f) noexcept
{
	Domain *dom = from_fid<Domain>(f);
	if (dom->refs.load()) {
		VRMA_WARN(FI_LOG_DOMAIN, "domain still has %d open objects\n", dom->refs.load());
		return -FI_EBUSY;
	}
	// Every CQ and endpoint is closed: the progress thread (if any) has
	// nothing left to watch; stop and join it.
	dom->progress.reset();
	rdm_persist_stop(dom); // every RDM endpoint is closed: it holds no job
	// Cached registrations go before the protection domain they are in.
	mr_cache_close(dom);
	dom->key_table_mr.reset(); // its registration is in the protection domain too
	ibv_pd *pd = dom->pd.release();
	if (int rc = ibv_dealloc_pd(pd)) {
		VRMA_WARN(FI_LOG_DOMAIN, "ibv_dealloc_pd: %s (a registration, queue pair or SRQ of this domain is still alive)\n",
			  strerror(rc));
		dom->pd.reset(pd);
		return errno_to_fi(rc);
	}
	dom->fabric->refs--;
	delete dom;
	return 0;
}

int domain_scalable_ep(fid_domain *, fi_info *, fid_ep **, void *) noexcept
{
	VRMA_WARN(FI_LOG_DOMAIN, "scalable endpoints are not supported\n");
	return -FI_ENOSYS;
}

int domain_poll_open(fid_domain *, fi_poll_attr *, fid_poll **) noexcept
{
	VRMA_WARN(FI_LOG_DOMAIN, "poll sets are not supported\n");
	return -FI_ENOSYS;
}

int domain_stx_ctx(fid_domain *, fi_tx_attr *, fid_stx **, void *) noexcept
{
	VRMA_WARN(FI_LOG_DOMAIN, "shared transmit contexts are not supported\n");
	return -FI_ENOSYS;
}

int domain_srx_ctx(fid_domain *, fi_rx_attr *, fid_ep **, void *) noexcept
{
	VRMA_WARN(FI_LOG_DOMAIN, "shared receive contexts are not supported yet\n");
	return -FI_ENOSYS;
}

// What the domain's RDM endpoints do (fi_query_atomic): MSG endpoints
// have no atomics.
int domain_query_atomic(fid_domain *d, fi_datatype datatype, fi_op op, fi_atomic_attr *attr,
			uint64_t flags) noexcept
{
	if (!attr) {
		VRMA_WARN(FI_LOG_DOMAIN, "fi_query_atomic: NULL attr\n");
		return -FI_EINVAL;
	}
	if (flags & ~(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC) ||
	    (flags & FI_FETCH_ATOMIC && flags & FI_COMPARE_ATOMIC)) {
		VRMA_WARN(FI_LOG_DOMAIN, "fi_query_atomic: flags 0x%llx\n", static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	const Domain *dom = from_fid<Domain>(&d->fid);
	const auto kind = flags & FI_COMPARE_ATOMIC ? atomic::Kind::Compare
			  : flags & FI_FETCH_ATOMIC ? atomic::Kind::Fetch
						    : atomic::Kind::Plain;
	const bool native = rdm_params.native_atomics && dom->dev_attr.atomic_cap != IBV_ATOMIC_NONE;
	const size_t max = rdm_atomic_max(kind, op, datatype, native, rdm_params.eager_size);
	if (!max)
		return -FI_EOPNOTSUPP;
	attr->size = atomic::datatype_size(datatype);
	attr->count = max;
	return 0;
}

int domain_query_collective(fid_domain *, fi_collective_op, fi_collective_attr *,
			    uint64_t) noexcept
{
	return -FI_ENOSYS;
}

// fi_endpoint: the MSG endpoint (vrma_msg_ep.cpp) or the RDM one (vrma_rdm_ep.cpp).
int domain_endpoint(fid_domain *domain, fi_info *info, fid_ep **ep, void *context) noexcept
{
	if (!domain || !info || !ep) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: NULL domain, info or output\n");
		return -FI_EINVAL;
	}
	const fi_ep_type type = info->ep_attr ? info->ep_attr->type : FI_EP_UNSPEC;
	if (type == FI_EP_RDM)
		return rdm_ep_open(domain, info, ep, context);
	if (type != FI_EP_MSG && type != FI_EP_UNSPEC) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_endpoint: vrma offers FI_EP_MSG and FI_EP_RDM\n");
		return -FI_EINVAL;
	}
	return msg_ep_open(domain, info, ep, context);
}

int domain_endpoint2(fid_domain *domain, fi_info *info, fid_ep **ep, uint64_t flags,
		     void *context) noexcept
{
	if (flags) {
		VRMA_WARN(FI_LOG_DOMAIN, "fi_endpoint2: unsupported flags 0x%llx\n",
			  static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	return domain_endpoint(domain, info, ep, context);
}

constexpr fi_ops domain_fi_ops = {
	.size = sizeof(fi_ops),
	.close = domain_close,
	.bind = fid_no_bind,
	.control = fid_no_control,
	.ops_open = domain_ops_open, // FI_VRMA_DOMAIN_OPS
	.tostr = fid_tostr,
	.ops_set = fid_no_ops_set,
};

constexpr fi_ops_domain domain_ops = {
	.size = sizeof(fi_ops_domain),
	.av_open = av_open,
	.cq_open = cq_open,
	.endpoint = domain_endpoint,
	.scalable_ep = domain_scalable_ep,
	.cntr_open = cntr_open,
	.poll_open = domain_poll_open,
	.stx_ctx = domain_stx_ctx,
	.srx_ctx = domain_srx_ctx,
	.query_atomic = domain_query_atomic,
	.query_collective = domain_query_collective,
	.endpoint2 = domain_endpoint2,
};

} // namespace

namespace {

// The domain's job key: domain_attr->auth_key, else FI_VRMA_AUTH_KEY (read
// now, so a process may set it before opening its domain). Keys are for RDM
// endpoints: a MSG endpoint's connections are the application's to accept.
int domain_auth_key(const fi_info &info, auth::Key &out) noexcept
{
	const fi_domain_attr *d = info.domain_attr;
	if (d && (d->auth_key_size || d->auth_key)) {
		if (int rc = take_attr_auth_key(d->auth_key, d->auth_key_size, out, "fi_domain"))
			return rc;
	} else {
		char *env = nullptr;
		if (fi_param_get_str(&provider, "auth_key", &env) == FI_SUCCESS && env && *env &&
		    !out.assign(env, strlen(env))) {
			VRMA_WARN(FI_LOG_DOMAIN, "fi_domain: FI_VRMA_AUTH_KEY must be 1 to %zu bytes\n",
				  auth::kKeyMax);
			return -FI_EINVAL;
		}
	}
	if (!out.empty() && !(info.ep_attr && info.ep_attr->type == FI_EP_RDM))
		VRMA_INFO(FI_LOG_DOMAIN, "fi_domain: the job key applies to RDM endpoints only\n");
	return 0;
}

} // namespace

int take_attr_auth_key(const uint8_t *key, size_t size, auth::Key &out, const char *call) noexcept
{
	if (!key && !size)
		return 0;
	if (!key || !out.assign(key, size)) {
		VRMA_WARN(FI_LOG_CORE, "%s: auth_key must be 1 to %zu bytes (auth_key_size %zu%s)\n", call,
			  auth::kKeyMax, size, key ? "" : ", auth_key NULL");
		return -FI_EINVAL;
	}
	return 0;
}

int domain_open(fid_fabric *fabric, fi_info *info, fid_domain **domain, void *context) noexcept
try {
	if (!fabric || !info || !domain || !info->domain_attr || !info->domain_attr->name) {
		VRMA_WARN(FI_LOG_DOMAIN, "fi_domain: NULL fabric, info, output or domain name\n");
		return -FI_EINVAL;
	}
	Fabric *fab = from_fid<Fabric>(&fabric->fid);
	ibv_context *ctx = nullptr;
	for (ibv_context **c = fab->devices.get(); c && *c; c++)
		if (!strcmp((*c)->device->name, info->domain_attr->name))
			ctx = *c;
	if (!ctx) {
		VRMA_WARN(FI_LOG_DOMAIN, "fi_domain: no RDMA device named '%s'\n",
			  info->domain_attr->name);
		return -FI_ENODEV;
	}
	auto dom = std::make_unique<Domain>();
	dom->fabric = fab;
	dom->ctx = ctx;
	dom->pd.reset(ibv_alloc_pd(ctx));
	if (!dom->pd) {
		int err = errno;
		VRMA_WARN(FI_LOG_DOMAIN, "ibv_alloc_pd(%s): %s\n", info->domain_attr->name,
			  strerror(err));
		return errno_to_fi(err);
	}
	if (int rc = ibv_query_device(ctx, &dom->dev_attr)) {
		VRMA_WARN(FI_LOG_DOMAIN, "ibv_query_device: %s\n", strerror(rc));
		return errno_to_fi(rc);
	}
	ibv_device_attr_ex ex{};
	if (ibv_query_device_ex(ctx, nullptr, &ex) == 0) {
		constexpr uint64_t kFlushGlobal = 1ULL << 38;
		constexpr uint64_t kFlushPersistent = 1ULL << 39;
		constexpr uint64_t kAtomicWrite = 1ULL << 40;
		dom->cap_flush_global = ex.device_cap_flags_ex & kFlushGlobal;
		dom->cap_flush_persistent = ex.device_cap_flags_ex & kFlushPersistent;
		dom->cap_atomic_write = ex.device_cap_flags_ex & kAtomicWrite;
	}
	VRMA_INFO(FI_LOG_DOMAIN,
		  "%s: RDMA FLUSH global %s, persistent %s, ATOMIC WRITE %s; delivery completion by read-back\n",
		  info->domain_attr->name, dom->cap_flush_global ? "yes" : "no",
		  dom->cap_flush_persistent ? "yes" : "no", dom->cap_atomic_write ? "yes" : "no");
	ibv_port_attr port{};
	if (ibv_query_port(ctx, 1, &port) == 0)
		dom->max_wr_bytes = wr_bytes_limit(port.max_msg_sz, params.max_wr_size);
	dom->info.reset(fi_dupinfo(info));
	if (!dom->info)
		return -FI_ENOMEM;
	if (int rc = domain_auth_key(*info, dom->auth_key))
		return rc;
	if (int rc = progress_create(dom.get()))
		return rc;
	// FI_PROGRESS_AUTO for MSG endpoints: the engine polls their CQs. RDM
	// endpoints attach their own internal CQ (rdm_enable).
	const bool rdm = info->ep_attr && info->ep_attr->type == FI_EP_RDM;
	dom->msg_auto_progress =
		info->domain_attr && info->domain_attr->data_progress == FI_PROGRESS_AUTO && !rdm;
	if (domain_scalable_keys(*info)) {
		if (int rc = domain_open_key_table(dom.get()))
			return rc;
	}
	// Registration on demand (vrma_mr.cpp) where peers translate keys: RDM
	// domains, whose provider keys may then need 64 bits (an application
	// that opens the domain with a narrower mr_key_size keeps device keys).
	const size_t key_size = info->domain_attr ? info->domain_attr->mr_key_size : 0;
	if (rdm && (dom->scalable_keys || key_size == 0 || key_size >= sizeof(uint64_t)))
		dom->on_demand_min = rdm_params.mr_on_demand;
	dom->inline_size = probe_inline_size(ctx);
	dom->fid.fclass = FI_CLASS_DOMAIN;
	dom->fid.context = context;
	dom->fid.ops = const_cast<fi_ops *>(&domain_fi_ops);
	dom->ops = const_cast<fi_ops_domain *>(&domain_ops);
	dom->mr = const_cast<fi_ops_mr *>(&mr_ops);
	fab->refs++;
	*domain = dom.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

} // namespace vrma
