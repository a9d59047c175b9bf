// The fabric: holds rdma_cm's device list, which every domain and cm id of
// this fabric shares (a QP can only be created on the context its id is on).
#include "vrma_msg_ep.h"

namespace vrma {

namespace {

int fabric_close(fid *f) noexcept
{
	Fabric *fab = from_fid<Fabric>(f);
	if (fab->refs.load()) {
		VRMA_WARN(FI_LOG_FABRIC, "fabric still has %d open objects\n", fab->refs.load());
		return -FI_EBUSY;
	}
	delete fab;
	return 0;
}

int fabric_trywait(fid_fabric *, fid **fids, int count) noexcept
{
	if (count < 0 || (count > 0 && !fids)) {
		VRMA_WARN(FI_LOG_FABRIC, "fi_trywait: bad fid array\n");
		return -FI_EINVAL;
	}
	// The whole array is checked before any object is armed.
	for (int i = 0; i < count; i++) {
		if (!fids[i]) {
			VRMA_WARN(FI_LOG_FABRIC, "fi_trywait: entry %d of the fid array is NULL\n", i);
			return -FI_EINVAL;
		}
		if (fids[i]->fclass != FI_CLASS_CQ && fids[i]->fclass != FI_CLASS_EQ) {
			VRMA_WARN(FI_LOG_FABRIC, "fi_trywait: fid class %zu has no wait object\n",
				  fids[i]->fclass);
			return -FI_EINVAL;
		}
	}
	for (int i = 0; i < count; i++) {
		const int rc = fids[i]->fclass == FI_CLASS_CQ ? cq_trywait(from_fid<Cq>(fids[i]))
							      : eq_trywait(from_fid<Eq>(fids[i]));
		if (rc)
			return rc;
	}
	return 0;
}

int fabric_wait_open(fid_fabric *, fi_wait_attr *, fid_wait **) noexcept
{
	VRMA_WARN(FI_LOG_FABRIC, "wait sets are not supported; use FI_WAIT_FD objects\n");
	return -FI_ENOSYS;
}

int fabric_domain(fid_fabric *fabric, fi_info *info, fid_domain **dom, void *context) noexcept
{
	return domain_open(fabric, info, dom, context);
}

int fabric_domain2(fid_fabric *fabric, fi_info *info, fid_domain **dom, uint64_t flags,
		   void *context) noexcept
{
	if (flags) {
		VRMA_WARN(FI_LOG_FABRIC, "fi_domain2: unsupported flags 0x%llx\n",
			  static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	return domain_open(fabric, info, dom, context);
}

constexpr fi_ops fabric_fi_ops = {
	.size = sizeof(fi_ops),
	.close = fabric_close,
	.bind = fid_no_bind,
	.control = fid_no_control,
	.ops_open = fid_no_ops_open,
	.tostr = fid_tostr,
	.ops_set = fid_no_ops_set,
};

constexpr fi_ops_fabric fabric_ops = {
	.size = sizeof(fi_ops_fabric),
	.domain = fabric_domain,
	.passive_ep = passive_ep_open,
	.eq_open = eq_open,
	.wait_open = fabric_wait_open,
	.trywait = fabric_trywait,
	.domain2 = fabric_domain2,
};

} // namespace

int fabric_open(fi_fabric_attr *attr, fid_fabric **fabric, void *context) noexcept
try {
	if (!attr || !fabric) {
		VRMA_WARN(FI_LOG_FABRIC, "fi_fabric: NULL attribute or output\n");
		return -FI_EINVAL;
	}
	auto fab = std::make_unique<Fabric>();
	int num = 0;
	fab->devices.reset(rdma_get_devices(&num));
	if (!fab->devices || num == 0) {
		VRMA_WARN(FI_LOG_FABRIC, "no RDMA device\n");
		return -FI_ENODEV;
	}
	fab->name = attr->name ? attr->name : "";
	fab->fid.fclass = FI_CLASS_FABRIC;
	fab->fid.context = context;
	fab->fid.ops = const_cast<fi_ops *>(&fabric_fi_ops);
	fab->ops = const_cast<fi_ops_fabric *>(&fabric_ops);
	fab->api_version = attr->api_version;
	*fabric = fab.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

} // namespace vrma
