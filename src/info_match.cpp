#include "info_match.h"

#include "abi_compat.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

namespace vrma {

namespace {

constexpr uint64_t kMsgDirections = FI_SEND | FI_RECV;
constexpr uint64_t kRmaDirections = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

bool subset(uint64_t want, uint64_t have) { return (want & ~have) == 0; }

bool fail(std::string &why, const char *field)
{
	why = field;
	return false;
}

bool tx_match(const fi_tx_attr &cap, const fi_tx_attr *h, std::string &why)
{
	if (!h)
		return true;
	if (!subset(expand_tx_caps(h->caps), cap.caps))
		return fail(why, "tx_attr->caps");
	if (!subset(h->op_flags, cap.op_flags))
		return fail(why, "tx_attr->op_flags");
	if (!subset(h->msg_order, cap.msg_order))
		return fail(why, "tx_attr->msg_order");
	if (!subset(h->comp_order, cap.comp_order))
		return fail(why, "tx_attr->comp_order");
	if (h->inject_size > cap.inject_size)
		return fail(why, "tx_attr->inject_size");
	if (h->size > cap.size)
		return fail(why, "tx_attr->size");
	if (h->iov_limit > cap.iov_limit)
		return fail(why, "tx_attr->iov_limit");
	if (h->rma_iov_limit > cap.rma_iov_limit)
		return fail(why, "tx_attr->rma_iov_limit");
	return true;
}

bool rx_match(const fi_rx_attr &cap, const fi_rx_attr *h, std::string &why)
{
	if (!h)
		return true;
	if (!subset(expand_rx_caps(h->caps), cap.caps))
		return fail(why, "rx_attr->caps");
	if (!subset(h->op_flags, cap.op_flags))
		return fail(why, "rx_attr->op_flags");
	if (!subset(h->msg_order, cap.msg_order))
		return fail(why, "rx_attr->msg_order");
	if (!subset(h->comp_order, cap.comp_order))
		return fail(why, "rx_attr->comp_order");
	if (h->total_buffered_recv > cap.total_buffered_recv)
		return fail(why, "rx_attr->total_buffered_recv");
	if (h->size > cap.size)
		return fail(why, "rx_attr->size");
	if (h->iov_limit > cap.iov_limit)
		return fail(why, "rx_attr->iov_limit");
	return true;
}

bool ep_match(const fi_ep_attr &cap, const fi_ep_attr *h, std::string &why)
{
	if (!h)
		return true;
	if (h->type != FI_EP_UNSPEC && h->type != cap.type)
		return fail(why, "ep_attr->type");
	if (h->protocol != FI_PROTO_UNSPEC && h->protocol != cap.protocol)
		return fail(why, "ep_attr->protocol");
	if (h->protocol_version > cap.protocol_version)
		return fail(why, "ep_attr->protocol_version");
	if (h->max_msg_size > cap.max_msg_size)
		return fail(why, "ep_attr->max_msg_size");
	if (h->msg_prefix_size > cap.msg_prefix_size)
		return fail(why, "ep_attr->msg_prefix_size");
	if (h->max_order_raw_size > cap.max_order_raw_size ||
	    h->max_order_war_size > cap.max_order_war_size ||
	    h->max_order_waw_size > cap.max_order_waw_size)
		return fail(why, "ep_attr->max_order_*_size");
	if (h->tx_ctx_cnt > cap.tx_ctx_cnt && h->tx_ctx_cnt != FI_SHARED_CONTEXT)
		return fail(why, "ep_attr->tx_ctx_cnt");
	if (h->tx_ctx_cnt == FI_SHARED_CONTEXT || h->rx_ctx_cnt == FI_SHARED_CONTEXT)
		return fail(why, "ep_attr shared contexts");
	if (h->rx_ctx_cnt > cap.rx_ctx_cnt)
		return fail(why, "ep_attr->rx_ctx_cnt");
	if (h->auth_key_size > cap.auth_key_size || (h->auth_key_size && !h->auth_key))
		return fail(why, "ep_attr->auth_key_size");
	return true;
}

bool domain_match(uint32_t version, const fi_domain_attr &cap, const fi_domain_attr *h,
		  uint64_t user_mode, std::string &why)
{
	if (!h)
		return true;
	if (h->name && (!cap.name || std::string(h->name) != cap.name))
		return fail(why, "domain_attr->name");
	if (!threading_satisfies(cap.threading, h->threading))
		return fail(why, "domain_attr->threading");
	if (!progress_satisfies(cap.control_progress, h->control_progress))
		return fail(why, "domain_attr->control_progress");
	if (!progress_satisfies(cap.data_progress, h->data_progress))
		return fail(why, "domain_attr->data_progress");
	if (h->resource_mgmt == FI_RM_ENABLED && cap.resource_mgmt != FI_RM_ENABLED)
		return fail(why, "domain_attr->resource_mgmt");
	if (!mr_mode_satisfies(version, cap.mr_mode, h->mr_mode, user_mode))
		return fail(why, "domain_attr->mr_mode");
	if (h->mr_key_size > cap.mr_key_size)
		return fail(why, "domain_attr->mr_key_size");
	if (h->cq_data_size > cap.cq_data_size)
		return fail(why, "domain_attr->cq_data_size");
	if (h->cq_cnt > cap.cq_cnt || h->ep_cnt > cap.ep_cnt ||
	    h->tx_ctx_cnt > cap.tx_ctx_cnt || h->rx_ctx_cnt > cap.rx_ctx_cnt ||
	    h->max_ep_tx_ctx > cap.max_ep_tx_ctx || h->max_ep_rx_ctx > cap.max_ep_rx_ctx ||
	    h->max_ep_stx_ctx > cap.max_ep_stx_ctx || h->max_ep_srx_ctx > cap.max_ep_srx_ctx ||
	    h->cntr_cnt > cap.cntr_cnt || h->mr_iov_limit > cap.mr_iov_limit ||
	    h->mr_cnt > cap.mr_cnt || h->max_err_data > cap.max_err_data)
		return fail(why, "domain_attr limits");
	if (!subset(h->caps, cap.caps))
		return fail(why, "domain_attr->caps");
	if (!subset(cap.mode, h->mode | user_mode))
		return fail(why, "domain_attr->mode");
	if (version >= abi::kV1_20 && h->auth_key_size == abi::kAvAuthKey)
		return fail(why, "domain_attr->auth_key_size (FI_AV_AUTH_KEY: no keys per address)");
	if (h->auth_key_size > cap.auth_key_size || (h->auth_key_size && !h->auth_key))
		return fail(why, "domain_attr->auth_key_size");
	// The fields of newer APIs, those the caller's version has (0 otherwise).
	const abi::DomainTail want = abi::domain_tail(*h, version);
	const abi::DomainTail have = abi::domain_tail(cap, version);
	if (want.max_ep_auth_key > have.max_ep_auth_key)
		return fail(why, "domain_attr->max_ep_auth_key");
	if (want.max_group_id > have.max_group_id)
		return fail(why, "domain_attr->max_group_id");
	// 0 offered means the full range (fi_domain(3)).
	if (have.max_cntr_value && want.max_cntr_value > have.max_cntr_value)
		return fail(why, "domain_attr->max_cntr_value");
	if (have.max_err_cntr_value && want.max_err_cntr_value > have.max_err_cntr_value)
		return fail(why, "domain_attr->max_err_cntr_value");
	return true;
}

} // namespace

uint64_t expand_caps(uint64_t caps) noexcept
{
	if ((caps & (FI_MSG | FI_TAGGED)) && !(caps & kMsgDirections))
		caps |= kMsgDirections;
	if ((caps & (FI_RMA | FI_ATOMIC)) && !(caps & kRmaDirections))
		caps |= kRmaDirections;
	return caps;
}

uint64_t expand_tx_caps(uint64_t caps) noexcept
{
	return expand_caps(caps) & ~kRxDirections;
}

uint64_t expand_rx_caps(uint64_t caps) noexcept
{
	return expand_caps(caps) & ~kTxDirections;
}

bool threading_satisfies(int have, int want) noexcept
{
	// The enum runs from the strongest guarantee (FI_THREAD_SAFE) to the
	// weakest; a stronger level serves every weaker request.
	return want == FI_THREAD_UNSPEC || (have != FI_THREAD_UNSPEC && have <= want);
}

bool progress_satisfies(int have, int want) noexcept
{
	if (want == FI_PROGRESS_UNSPEC || want == have)
		return true;
	// Automatic progress also serves applications written for manual progress.
	return have == FI_PROGRESS_AUTO && want == FI_PROGRESS_MANUAL;
}

bool mr_mode_satisfies(uint32_t api_version, int prov_mode, int user_mode,
		       uint64_t user_info_mode) noexcept
{
	// Local registration is needed by the provider: the application must
	// say it registers local buffers, in either spelling, at any version.
	if ((prov_mode & FI_MR_LOCAL) && !(user_mode & FI_MR_LOCAL) &&
	    !(user_info_mode & abi::kLocalMr))
		return false;
	if (user_mode == abi::kMrUnspec) {
		// Before API 1.5, 0 meant "whatever the provider uses"; since, it
		// means the application takes on no mode bit.
		return api_version < FI_VERSION(1, 5) || prov_mode == 0;
	}
	if (user_mode & abi::kMrScalable)
		return (prov_mode & ~FI_MR_LOCAL) == 0 &&
		       (!(prov_mode & FI_MR_LOCAL) || (user_info_mode & abi::kLocalMr));
	if (user_mode & abi::kMrBasic) {
		// Legacy FI_MR_BASIC = virtual addresses, allocated memory, provider
		// keys; local registration was the separate FI_LOCAL_MR mode bit.
		int basic = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
		if (user_info_mode & abi::kLocalMr)
			basic |= FI_MR_LOCAL;
		basic |= user_mode & ~abi::kMrBasic;
		return (prov_mode & ~basic) == 0;
	}
	return (prov_mode & ~user_mode) == 0;
}

bool hints_match(uint32_t api_version, const fi_info &cap, const fi_info *hints,
		 std::string &why)
{
	if (!hints)
		return true;
	if (!subset(expand_caps(hints->caps), cap.caps))
		return fail(why, "caps");
	// Every mode the provider requires must be one the application accepts.
	uint64_t user_mode = hints->mode;
	if (!subset(cap.mode, user_mode))
		return fail(why, "mode");
	// FI_SOCKADDR means any sockaddr: IPv4 and IPv6 both qualify.
	const bool any_sockaddr = hints->addr_format == FI_SOCKADDR &&
				  (cap.addr_format == FI_SOCKADDR_IN || cap.addr_format == FI_SOCKADDR_IN6);
	if (hints->addr_format != FI_FORMAT_UNSPEC && hints->addr_format != cap.addr_format &&
	    !any_sockaddr)
		return fail(why, "addr_format");
	if (hints->fabric_attr && hints->fabric_attr->name && cap.fabric_attr &&
	    std::string(hints->fabric_attr->name) != cap.fabric_attr->name)
		return fail(why, "fabric_attr->name");
	if (!ep_match(*cap.ep_attr, hints->ep_attr, why))
		return false;
	if (!domain_match(api_version, *cap.domain_attr, hints->domain_attr, user_mode, why))
		return false;
	if (!tx_match(*cap.tx_attr, hints->tx_attr, why))
		return false;
	if (!rx_match(*cap.rx_attr, hints->rx_attr, why))
		return false;
	return true;
}

void apply_hints(uint32_t api_version, fi_info &out, const fi_info *hints,
		 size_t default_tx_size, size_t default_rx_size, size_t default_iov_limit,
		 uint64_t optional_modes)
{
	const uint64_t all_caps = out.caps;
	out.tx_attr->size = default_tx_size < out.tx_attr->size ? default_tx_size : out.tx_attr->size;
	out.rx_attr->size = default_rx_size < out.rx_attr->size ? default_rx_size : out.rx_attr->size;
	if (default_iov_limit < out.tx_attr->iov_limit)
		out.tx_attr->iov_limit = default_iov_limit;
	if (default_iov_limit < out.rx_attr->iov_limit)
		out.rx_attr->iov_limit = default_iov_limit;
	// Without hints, op_flags are the defaults applied to every operation:
	// report none rather than the set of flags we merely support.
	out.tx_attr->op_flags = 0;
	out.rx_attr->op_flags = 0;
	// A capability's auth_key_size is the longest key it takes; an info
	// carries the hints' keys (copied: fi_freeinfo frees them), or none.
	out.domain_attr->auth_key_size = 0;
	out.ep_attr->auth_key_size = 0;
	if (!hints)
		return;
	auto copy_key = [](const uint8_t *key, size_t size, uint8_t *&to, size_t &to_size) {
		if (!size || !key)
			return;
		to = static_cast<uint8_t *>(malloc(size));
		if (!to)
			throw std::bad_alloc();
		memcpy(to, key, size);
		to_size = size;
	};
	if (hints->domain_attr)
		copy_key(hints->domain_attr->auth_key, hints->domain_attr->auth_key_size,
			 out.domain_attr->auth_key, out.domain_attr->auth_key_size);
	if (hints->ep_attr)
		copy_key(hints->ep_attr->auth_key, hints->ep_attr->auth_key_size, out.ep_attr->auth_key,
			 out.ep_attr->auth_key_size);

	if (hints->caps) {
		// Local/remote communication are implied when neither is named.
		uint64_t caps = expand_caps(hints->caps) & all_caps;
		if (!(hints->caps & (FI_LOCAL_COMM | FI_REMOTE_COMM)))
			caps |= all_caps & (FI_LOCAL_COMM | FI_REMOTE_COMM);
		out.caps = caps;
		out.tx_attr->caps &= caps;
		out.rx_attr->caps &= caps;
	}
	// Optional modes are taken up only when the application accepts them.
	out.mode |= hints->mode & optional_modes;
	out.rx_attr->mode |= hints->mode & optional_modes;
	if (hints->tx_attr) {
		if (hints->tx_attr->caps)
			out.tx_attr->caps &= expand_tx_caps(hints->tx_attr->caps);
		out.tx_attr->op_flags = hints->tx_attr->op_flags;
		if (hints->tx_attr->size)
			out.tx_attr->size = hints->tx_attr->size;
		if (hints->tx_attr->iov_limit > out.tx_attr->iov_limit)
			out.tx_attr->iov_limit = hints->tx_attr->iov_limit;
		if (hints->tx_attr->msg_order)
			out.tx_attr->msg_order &= hints->tx_attr->msg_order;
		if (hints->tx_attr->comp_order)
			out.tx_attr->comp_order &= hints->tx_attr->comp_order;
	}
	if (hints->rx_attr) {
		if (hints->rx_attr->caps)
			out.rx_attr->caps &= expand_rx_caps(hints->rx_attr->caps);
		out.rx_attr->op_flags = hints->rx_attr->op_flags;
		if (hints->rx_attr->size)
			out.rx_attr->size = hints->rx_attr->size;
		if (hints->rx_attr->iov_limit > out.rx_attr->iov_limit)
			out.rx_attr->iov_limit = hints->rx_attr->iov_limit;
		if (hints->rx_attr->msg_order)
			out.rx_attr->msg_order &= hints->rx_attr->msg_order;
		if (hints->rx_attr->comp_order)
			out.rx_attr->comp_order &= hints->rx_attr->comp_order;
	}
	if (hints->domain_attr) {
		const fi_domain_attr &h = *hints->domain_attr;
		if (h.threading != FI_THREAD_UNSPEC)
			out.domain_attr->threading = h.threading;
		if (h.control_progress != FI_PROGRESS_UNSPEC)
			out.domain_attr->control_progress = h.control_progress;
		if (h.data_progress != FI_PROGRESS_UNSPEC)
			out.domain_attr->data_progress = h.data_progress;
		if (h.resource_mgmt != FI_RM_UNSPEC)
			out.domain_attr->resource_mgmt = h.resource_mgmt;
		if (h.av_type != FI_AV_UNSPEC)
			out.domain_attr->av_type = h.av_type;
		const bool legacy = (h.mr_mode & abi::kMrBasic) ||
				    (h.mr_mode == abi::kMrUnspec && api_version < FI_VERSION(1, 5));
		if (legacy) {
			// The legacy spelling has no local bit: local registration is
			// the FI_LOCAL_MR mode bit instead.
			if (out.domain_attr->mr_mode & FI_MR_LOCAL)
				out.mode |= abi::kLocalMr;
			out.domain_attr->mr_mode = abi::kMrBasic;
		} else if ((h.mr_mode & abi::kMrScalable) && out.domain_attr->mr_mode == 0) {
			// The legacy spelling of "no mode bit": answered in kind.
			out.domain_attr->mr_mode = abi::kMrScalable;
		}
	}
}

} // namespace vrma
