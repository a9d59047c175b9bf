// The MSG passive endpoint (fi_passive_ep): a listening rdma_cm id whose
// connection requests arrive on its EQ (vrma_msg_cm.cpp turns them into
// FI_CONNREQ entries), and fi_reject of those requests.
#include "vrma_msg_ep.h"

namespace vrma {

namespace {

int pep_setname(fid_t f, void *addr, size_t addrlen) noexcept
{
	const sockaddr *sa = setname_addr(addr, addrlen);
	if (!sa)
		return -FI_EINVAL;
	Pep *pep = from_fid<Pep>(f);
	if (pep->listening) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_setname: passive endpoint already listens\n");
		return -FI_EOPBADSTATE;
	}
	memcpy(&pep->src, sa, sockaddr_len(sa));
	pep->src_len = static_cast<socklen_t>(sockaddr_len(sa));
	return 0;
}

int pep_getname(fid_t f, void *addr, size_t *addrlen) noexcept
{
	Pep *pep = from_fid<Pep>(f);
	if (pep->listening)
		return copy_name(rdma_get_local_addr(pep->id.get()), addr, addrlen);
	return copy_name(reinterpret_cast<sockaddr *>(&pep->src), addr, addrlen);
}

int pep_listen(fid_pep *f) noexcept
{
	Pep *pep = static_cast<Pep *>(f);
	if (pep->listening)
		return -FI_EALREADY;
	if (!pep->eq) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_listen: passive endpoint is not bound to an EQ\n");
		return -FI_ENOEQ;
	}
	rdma_cm_id *raw = nullptr;
	if (rdma_create_id(pep->eq->channel.get(), &raw, &pep->fid, RDMA_PS_TCP)) {
		int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "rdma_create_id: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	CmIdPtr id(raw);
	if (pep->src_len && rdma_bind_addr(id.get(), reinterpret_cast<sockaddr *>(&pep->src))) {
		int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_listen: binding %s: %s\n",
			  sockaddr_str(reinterpret_cast<sockaddr *>(&pep->src)).c_str(), strerror(err));
		return errno_to_fi(err);
	}
	if (rdma_listen(id.get(), params.listen_backlog)) {
		int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "rdma_listen: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	pep->id = std::move(id);
	pep->listening = true;
	return 0;
}

int pep_reject(fid_pep *, fid_t handle, const void *param, size_t paramlen) noexcept
{
	if (!handle || handle->fclass != FI_CLASS_CONNREQ) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_reject: not a connection request handle\n");
		return -FI_EINVAL;
	}
	PrivateData pd;
	uint8_t pd_len;
	if (int rc = build_private_data(param, paramlen, 0, pd, pd_len))
		return rc;
	auto *cr = static_cast<ConnReq *>(handle);
	int rc = 0;
	if (rdma_reject(cr->id, pd.data(), pd_len)) {
		int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "rdma_reject: %s\n", strerror(err));
		rc = errno_to_fi(err);
	}
	rdma_destroy_id(cr->id);
	delete cr;
	return rc;
}

int pep_bind(fid *f, fid *bfid, uint64_t flags) noexcept
{
	Pep *pep = from_fid<Pep>(f);
	(void)flags;
	if (!bfid || bfid->fclass != FI_CLASS_EQ) {
		VRMA_WARN(FI_LOG_EP_CTRL, "a passive endpoint binds only an EQ\n");
		return -FI_EINVAL;
	}
	if (pep->listening) {
		VRMA_WARN(FI_LOG_EP_CTRL, "passive endpoint already listens\n");
		return -FI_EOPBADSTATE;
	}
	Eq *eq = from_fid<Eq>(bfid);
	if (pep->eq)
		pep->eq->refs--;
	pep->eq = eq;
	eq->refs++;
	return 0;
}

int pep_close(fid *f) noexcept
{
	Pep *pep = from_fid<Pep>(f);
	if (pep->eq) {
		std::lock_guard guard(pep->eq->lock);
		pep->id.reset();
	}
	if (pep->eq) {
		eq_purge(pep->eq, &pep->fid);
		pep->eq->refs--;
	}
	pep->fabric->refs--;
	delete pep;
	return 0;
}

int pep_control(fid *, int command, void *) noexcept
{
	VRMA_WARN(FI_LOG_EP_CTRL, "fi_control(pep, %d) is not supported\n", command);
	return -FI_ENOSYS;
}

constexpr fi_ops pep_fi_ops = {
	.size = sizeof(fi_ops),
	.close = pep_close,
	.bind = pep_bind,
	.control = pep_control,
	.ops_open = fid_no_ops_open,
	.tostr = fid_tostr,
	.ops_set = fid_no_ops_set,
};

ssize_t pep_cancel(fid_t, void *) noexcept { return -FI_ENOENT; }

// A passive endpoint names, listens and rejects; the active endpoint's calls
// are not its own (-FI_ENOSYS, not a cast).
constexpr fi_ops_cm pep_cm_ops = {
	.size = sizeof(fi_ops_cm),
	.setname = pep_setname,
	.getname = pep_getname,
	.getpeer = VRMA_NOSYS(fi_ops_cm, getpeer),
	.connect = VRMA_NOSYS(fi_ops_cm, connect),
	.listen = pep_listen,
	.accept = VRMA_NOSYS(fi_ops_cm, accept),
	.reject = pep_reject,
	.shutdown = VRMA_NOSYS(fi_ops_cm, shutdown),
	.join = VRMA_NOSYS(fi_ops_cm, join),
};

constexpr fi_ops_ep pep_ep_ops = {
	.size = sizeof(fi_ops_ep),
	.cancel = pep_cancel,
	.getopt = ep_getopt,
	.setopt = ep_setopt,
	.tx_ctx = VRMA_NOSYS(fi_ops_ep, tx_ctx),
	.rx_ctx = VRMA_NOSYS(fi_ops_ep, rx_ctx),
	.rx_size_left = VRMA_NOSYS(fi_ops_ep, rx_size_left),
	.tx_size_left = VRMA_NOSYS(fi_ops_ep, tx_size_left),
};

} // namespace

const Pep *as_vrma_pep(const fid *f) noexcept
{
	if (!f || f->fclass != FI_CLASS_PEP || f->ops != &pep_fi_ops)
		return nullptr;
	return from_fid<Pep>(const_cast<fid *>(f));
}

int passive_ep_open(fid_fabric *fabric, fi_info *info, fid_pep **pep_out, void *context) noexcept
try {
	if (!fabric || !info || !pep_out) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_passive_ep: NULL fabric, info or output\n");
		return -FI_EINVAL;
	}
	if (info->ep_attr && info->ep_attr->type != FI_EP_MSG && info->ep_attr->type != FI_EP_UNSPEC) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_passive_ep: only FI_EP_MSG\n");
		return -FI_EINVAL;
	}
	auto pep = std::make_unique<Pep>();
	pep->fabric = from_fid<Fabric>(&fabric->fid);
	pep->info.reset(abi::dup_info(info, api_version()));
	if (!pep->info)
		return -FI_ENOMEM;
	if (info->src_addr) {
		const sockaddr *sa = static_cast<const sockaddr *>(info->src_addr);
		size_t len = sockaddr_len(sa);
		if (!len || info->src_addrlen < len) {
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_passive_ep: src_addr is not sockaddr_in/in6\n");
			return -FI_EINVAL;
		}
		memcpy(&pep->src, sa, len);
		pep->src_len = static_cast<socklen_t>(len);
	}
	pep->fid.fclass = FI_CLASS_PEP;
	pep->fid.context = context;
	pep->fid.ops = const_cast<fi_ops *>(&pep_fi_ops);
	pep->ops = const_cast<fi_ops_ep *>(&pep_ep_ops);
	pep->cm = const_cast<fi_ops_cm *>(&pep_cm_ops);
	pep->fabric->refs++;
	*pep_out = pep.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

} // namespace vrma
