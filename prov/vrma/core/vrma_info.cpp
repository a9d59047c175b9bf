// fi_getinfo: one fi_info per active verbs port that has an IP address,
// limits read from the device, hints matched by src/info_match.
#include "vrma_msg_ep.h"
#include "info_match.h"
#include "vrma_rdm_api.h"

#include <rdma/fi_ext_vrma.h>
#include <rdma/fi_tagged.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/resource.h>

#include <bit>
#include <cstdio>
#include <map>

namespace vrma {

namespace {

// Descriptors left for CQs and counters: the soft RLIMIT_NOFILE less a
// reserve for the rest of the process (sockets, files, endpoints' rdma_cm
// channels).
size_t descriptor_budget() noexcept
{
	constexpr size_t kReserve = 128;
	rlimit rl{};
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return SIZE_MAX;
	const auto cur = static_cast<size_t>(rl.rlim_cur);
	return cur > 2 * kReserve ? cur - kReserve : cur / 2;
}

struct PortAddr {
	ibv_context *ctx = nullptr;
	uint8_t port = 0;
	sockaddr_storage addr{};
	uint32_t prefix_len = 0; // netmask length of addr
};

struct Port {
	ibv_context *ctx = nullptr;
	uint8_t port = 0;
	ibv_device_attr dev{};
	ibv_port_attr attr{};
	std::vector<PortAddr> addrs;
};

// Probed once per device. Heap-allocated and never destroyed: the core calls
// provider.cleanup from its own destructor, after this library's static
// objects may already be gone.
CheckedMutex &inline_lock = *new CheckedMutex;
std::map<std::string, int> &inline_cache = *new std::map<std::string, int>;

uint32_t mask_prefix_len(const sockaddr *mask)
{
	uint32_t n = 0;
	if (!mask)
		return 0;
	const uint8_t *b;
	size_t len;
	if (mask->sa_family == AF_INET) {
		b = reinterpret_cast<const uint8_t *>(
			&reinterpret_cast<const sockaddr_in *>(mask)->sin_addr);
		len = 4;
	} else if (mask->sa_family == AF_INET6) {
		b = reinterpret_cast<const sockaddr_in6 *>(mask)->sin6_addr.s6_addr;
		len = 16;
	} else {
		return 0;
	}
	for (size_t i = 0; i < len; i++)
		n += __builtin_popcount(b[i]);
	return n;
}

bool same_ip(const sockaddr *a, const sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return reinterpret_cast<const sockaddr_in *>(a)->sin_addr.s_addr ==
		       reinterpret_cast<const sockaddr_in *>(b)->sin_addr.s_addr;
	return !memcmp(&reinterpret_cast<const sockaddr_in6 *>(a)->sin6_addr,
		       &reinterpret_cast<const sockaddr_in6 *>(b)->sin6_addr, 16);
}

bool is_any_ip(const sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return reinterpret_cast<const sockaddr_in *>(a)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (a->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6 *>(a)->sin6_addr);
	return false;
}

void set_port(sockaddr *sa, uint16_t port_be)
{
	if (sa->sa_family == AF_INET)
		reinterpret_cast<sockaddr_in *>(sa)->sin_port = port_be;
	else if (sa->sa_family == AF_INET6)
		reinterpret_cast<sockaddr_in6 *>(sa)->sin6_port = port_be;
}

uint16_t get_port(const sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return reinterpret_cast<const sockaddr_in *>(sa)->sin_port;
	if (sa->sa_family == AF_INET6)
		return reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_port;
	return 0;
}

// Which RDMA device and port each local IP address belongs to: binding an
// rdma_cm id to the address tells (it stays unbound for non-RDMA netdevs).
std::vector<PortAddr> discover_addresses(rdma_event_channel *ch)
{
	std::vector<PortAddr> out;
	ifaddrs *ifa_list = nullptr;
	if (getifaddrs(&ifa_list)) {
		VRMA_WARN(FI_LOG_CORE, "getifaddrs: %s\n", strerror(errno));
		return out;
	}
	for (ifaddrs *ifa = ifa_list; ifa; ifa = ifa->ifa_next) {
		if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP) || (ifa->ifa_flags & IFF_LOOPBACK))
			continue;
		int family = ifa->ifa_addr->sa_family;
		if (family != AF_INET && family != AF_INET6)
			continue;
		rdma_cm_id *raw = nullptr;
		if (rdma_create_id(ch, &raw, nullptr, RDMA_PS_TCP))
			continue;
		CmIdPtr id(raw);
		PortAddr pa;
		memcpy(&pa.addr, ifa->ifa_addr, sockaddr_len(ifa->ifa_addr));
		set_port(reinterpret_cast<sockaddr *>(&pa.addr), 0);
		if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr *>(&pa.addr)) || !id->verbs)
			continue;
		pa.ctx = id->verbs;
		pa.port = id->port_num;
		pa.prefix_len = mask_prefix_len(ifa->ifa_netmask);
		out.push_back(pa);
	}
	freeifaddrs(ifa_list);
	return out;
}

std::string fabric_name_for(const Port &p, const PortAddr &a)
{
	char buf[128];
	if (p.attr.link_layer == IBV_LINK_LAYER_INFINIBAND) {
		ibv_gid gid{};
		ibv_query_gid(p.ctx, p.port, 0, &gid);
		std::snprintf(buf, sizeof buf, "IB-0x%016llx",
			      static_cast<unsigned long long>(be64toh(gid.global.subnet_prefix)));
		return buf;
	}
	// Ethernet (RoCE) and iWARP: the IP subnet the port's address is on.
	sockaddr_storage net = a.addr;
	char host[INET6_ADDRSTRLEN] = "";
	if (net.ss_family == AF_INET) {
		auto *in = reinterpret_cast<sockaddr_in *>(&net);
		uint32_t mask = a.prefix_len ? htonl(~0u << (32 - a.prefix_len)) : 0;
		in->sin_addr.s_addr &= mask;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
	} else {
		auto *in6 = reinterpret_cast<sockaddr_in6 *>(&net);
		for (uint32_t i = 0; i < 16; i++) {
			uint32_t bits = a.prefix_len > i * 8 ? a.prefix_len - i * 8 : 0;
			uint8_t m = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
			in6->sin6_addr.s6_addr[i] &= m;
		}
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
	}
	std::snprintf(buf, sizeof buf, "%s/%u", host, a.prefix_len);
	return buf;
}

void *dup_addr(const sockaddr *sa, size_t *len)
{
	*len = sockaddr_len(sa);
	void *p = malloc(*len);
	if (p)
		memcpy(p, sa, *len);
	return p;
}

// The most this port offers: the capability info hints are matched against.
fi_info *build_cap_info(uint32_t api, const Port &p, const PortAddr &a, int inline_size)
{
	fi_info *info = fi_allocinfo();
	if (!info)
		return nullptr;
	const ibv_device_attr &d = p.dev;
	info->caps = kCaps;
	info->mode = 0;
	info->addr_format = a.addr.ss_family == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
	info->src_addr = dup_addr(reinterpret_cast<const sockaddr *>(&a.addr), &info->src_addrlen);

	fi_tx_attr &tx = *info->tx_attr;
	// Each context holds its own side's directions only (fi_getinfo(3)).
	tx.caps = (kMsgCaps | kRmaCaps | FI_FENCE | FI_RMA_PMEM) & ~kRxDirections;
	tx.mode = 0;
	tx.op_flags = kTxOpFlags;
	tx.msg_order = kMsgOrder;
	tx.comp_order = abi::kOrderStrict | abi::kOrderData;
	// What an endpoint grants (fi_endpoint computes it the same way).
	tx.inject_size = msg_inject_size(static_cast<size_t>(inline_size), params.inject_size, 0,
					 wr_bytes_limit(p.attr.max_msg_sz, params.max_wr_size));
	tx.size = static_cast<size_t>(d.max_qp_wr);
	// One scatter entry stays free for the header of a staged message.
	tx.iov_limit = std::min(static_cast<size_t>(d.max_sge), kMaxSge) - 1;
	tx.rma_iov_limit = kMaxRmaIov;

	fi_rx_attr &rx = *info->rx_attr;
	rx.caps = (kMsgCaps | kRmaCaps | kOwnRxCaps) & ~kTxDirections;
	rx.mode = 0;
	rx.op_flags = kRxOpFlags;
	rx.msg_order = kMsgOrder;
	rx.comp_order = abi::kOrderStrict | abi::kOrderData;
	rx.total_buffered_recv = 0;
	rx.size = static_cast<size_t>(d.max_qp_wr);
	rx.iov_limit = std::min(static_cast<size_t>(d.max_sge), kMaxSge);

	fi_ep_attr &ep = *info->ep_attr;
	ep.type = FI_EP_MSG;
	ep.protocol = p.ctx->device->transport_type == IBV_TRANSPORT_IWARP ? FI_PROTO_IWARP
									   : FI_PROTO_RDMA_CM_IB_RC;
	ep.protocol_version = 1;
	// RMA-only endpoints split; with messages it is one work request's
	// worth (set once the capabilities are known).
	ep.max_msg_size = msg_max_msg_size(wr_bytes_limit(p.attr.max_msg_sz, params.max_wr_size), false, false);
	ep.msg_prefix_size = 0;
	ep.max_order_raw_size = p.attr.max_msg_sz;
	ep.max_order_war_size = 0;
	ep.max_order_waw_size = p.attr.max_msg_sz;
	ep.mem_tag_format = 0;
	ep.tx_ctx_cnt = 1;
	ep.rx_ctx_cnt = 1;
	ep.auth_key_size = 0;

	fi_domain_attr &dom = *info->domain_attr;
	dom.name = strdup(p.ctx->device->name);
	dom.threading = FI_THREAD_SAFE;
	dom.control_progress = FI_PROGRESS_AUTO;
	// Offered; infos report MANUAL unless asked (default_manual_data_progress).
	dom.data_progress = FI_PROGRESS_AUTO;
	dom.resource_mgmt = FI_RM_ENABLED;
	dom.av_type = FI_AV_UNSPEC;
	dom.mr_mode = kMrMode;
	dom.mr_key_size = sizeof(uint32_t);
	dom.cq_data_size = kCqDataSize;
	// A CQ with a wait object holds three descriptors (completion channel,
	// eventfd, epoll) and a counter two: the process's descriptor limit
	// bounds them long before the device does (rxe: max_cq 16384 against
	// a usual 1024 descriptors), so cq_cnt and cntr_cnt, "the optimal
	// number" (fi_domain(3)), are what that limit leaves.
	const size_t fds = descriptor_budget();
	dom.cq_cnt = std::min(static_cast<size_t>(d.max_cq), std::max<size_t>(fds / 3, 1));
	dom.ep_cnt = static_cast<size_t>(d.max_qp);
	dom.tx_ctx_cnt = static_cast<size_t>(d.max_qp);
	dom.rx_ctx_cnt = static_cast<size_t>(d.max_qp);
	dom.max_ep_tx_ctx = 1;
	dom.max_ep_rx_ctx = 1;
	dom.max_ep_stx_ctx = 0;
	dom.max_ep_srx_ctx = 0;
	// Counters are software objects: as many as descriptors allow.
	dom.cntr_cnt = std::min(static_cast<size_t>(d.max_cq), std::max<size_t>(fds / 2, 1));
	dom.mr_iov_limit = 1;
	dom.caps = kDomainCaps;
	dom.mode = 0;
	dom.max_err_data = wire::kCmUserDataMax;
	dom.mr_cnt = static_cast<size_t>(d.max_mr);
	// The fields of newer APIs (written only where the caller's has them):
	// MSG endpoints take no job key, no peer groups; counters are 64-bit
	// software counters.
	abi::DomainTail tail;
	tail.max_ep_auth_key = 0;
	tail.max_group_id = 0;
	tail.max_cntr_value = UINT64_MAX;
	tail.max_err_cntr_value = UINT64_MAX;
	abi::set_domain_tail(dom, api, tail);

	fi_fabric_attr &fab = *info->fabric_attr;
	fab.name = strdup(fabric_name_for(p, a).c_str());
	fab.prov_version = kProviderVersion;
	fab.api_version = api_version();
	if (!dom.name || !fab.name || !info->src_addr) {
		fi_freeinfo(info);
		return nullptr;
	}
	return info;
}

// Data progress of an info after apply_hints: manual unless the hints ask
// for a kind (automatic costs the domain's progress thread a wake-up per
// completion event, vrma_progress.h).
void default_manual_data_progress(fi_info &out, const fi_info *hints)
{
	if (!hints || !hints->domain_attr || hints->domain_attr->data_progress == FI_PROGRESS_UNSPEC)
		out.domain_attr->data_progress = FI_PROGRESS_MANUAL;
}

// The most an RDM endpoint on this port offers: messages and tagged
// messages over on-demand connections, no memory registration needed.
fi_info *build_rdm_cap_info(uint32_t api, const Port &p, const PortAddr &a, int inline_size)
{
	fi_info *info = build_cap_info(api, p, a, inline_size);
	if (!info)
		return nullptr;
	// Receives name their source (FI_DIRECTED_RECV) for both kinds, for
	// tagged ones only (FI_TAGGED_DIRECTED_RECV), or always
	// (FI_EXACT_DIRECTED_RECV); completions report the AV's user ids
	// (FI_AV_USER_ID). The 2.0 bits only where the API has them.
	const uint64_t directed = abi::caps_for(api, abi::kTaggedDirectedRecv | abi::kExactDirectedRecv);
	info->caps = kRdmCaps | FI_AV_USER_ID | directed;
	fi_tx_attr &tx = *info->tx_attr;
	tx.caps = kRdmCaps &
		  (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_FENCE | FI_RMA_PMEM | kTxDirections);
	tx.op_flags = kRdmTxOpFlags;
	const uint64_t order = kRdmMsgOrder | (rdm_params.native_atomics ? 0 : kRdmAtomicOrder);
	tx.msg_order = order;
	// A rendezvous send completes when the receiver has read it: later
	// eager sends may complete first.
	tx.comp_order = abi::kOrderNone;
	tx.inject_size = rdm_params.eager_size;
	tx.size = rdm_params.tx_buffers;
	tx.iov_limit = kRdmIovLimit;
	tx.rma_iov_limit = kMaxRmaIov;
	fi_rx_attr &rx = *info->rx_attr;
	rx.caps = (kRdmCaps & (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_RMA_EVENT | FI_RMA_PMEM |
			       FI_DIRECTED_RECV | FI_MULTI_RECV | FI_SOURCE | kRxDirections)) |
		  directed;
	rx.op_flags = kRdmRxOpFlags;
	rx.msg_order = order;
	rx.comp_order = abi::kOrderNone;
	rx.total_buffered_recv = rdm_unexpected_max(); // rx_budget.h
	rx.size = 65536; // receives wait in memory, not in a device queue
	rx.iov_limit = kRdmIovLimit;
	fi_ep_attr &ep = *info->ep_attr;
	ep.type = FI_EP_RDM;
	ep.protocol = FI_PROTO_VRMA_RDM;
	ep.protocol_version = rdm::kRdmVersion;
	ep.max_msg_size = kRdmMaxMsg;
	// One RC connection per peer orders RMA of any size (RAW, WAW).
	ep.max_order_raw_size = kRdmMaxMsg;
	ep.max_order_waw_size = kRdmMaxMsg;
	ep.mem_tag_format = 0xaaaaaaaaaaaaaaaaULL; // FI_TAG_GENERIC: any 64-bit tag
	fi_domain_attr &dom = *info->domain_attr;
	// Messages need no registration from the application; RMA needs
	// keys and virtual addresses of the target's (without_rdm_rma drops
	// RMA and this mode for applications that do not take it on).
	dom.mr_mode = kRdmRmaMrMode;
	// Provider keys of regions registered on demand have 64 bits
	// (kOnDemandKeyBit); device keys 32.
	dom.mr_key_size = rdm_params.mr_on_demand ? sizeof(uint64_t) : sizeof(uint32_t);
	dom.cq_data_size = kRdmCqDataSize;
	dom.av_type = FI_AV_UNSPEC;
	dom.max_err_data = 0;
	// Job keys (vrma_rdm_conn.cpp): apply_hints gives an info the hints'.
	dom.auth_key_size = auth::kKeyMax;
	info->ep_attr->auth_key_size = auth::kKeyMax;
	dom.caps |= FI_AV_USER_ID;
	// One job key per endpoint (its domain's or its own).
	abi::DomainTail tail = abi::domain_tail(dom, api);
	tail.max_ep_auth_key = 1;
	abi::set_domain_tail(dom, api, tail);
	return info;
}

// RMA with scalable keys: for applications that take on no registration
// mode (mr_mode 0, or the legacy FI_MR_SCALABLE). Keys are the
// application's, 64 bits, as many as the domain's key table holds.
void with_scalable_keys(fi_info &info)
{
	info.domain_attr->mr_mode = 0;
	info.domain_attr->mr_key_size = sizeof(uint64_t);
	info.domain_attr->mr_cnt = std::min(info.domain_attr->mr_cnt,
					    std::bit_ceil(rdm_params.mr_keys / keys::kBucketEntries) *
						    keys::kBucketEntries);
}

// FI_RMA_PMEM on an RDM endpoint: offered when asked for, or implied by a
// default FI_COMMIT_COMPLETE, which is honoured for RMA writes only: such an
// info carries no messages or atomics (false, logged: the hints ask for
// them, or for the default without FI_RMA_PMEM, or RMA was ruled out).
bool rdm_pmem_caps(fi_info &info, const fi_info *hints)
{
	const uint64_t asked = hints ? hints->caps : 0;
	auto drop = [&info](uint64_t caps) {
		info.caps &= ~caps;
		info.tx_attr->caps &= ~caps;
		info.rx_attr->caps &= ~caps;
	};
	if (!(info.tx_attr->op_flags & FI_COMMIT_COMPLETE)) {
		if (!(asked & FI_RMA_PMEM))
			drop(FI_RMA_PMEM);
		return true;
	}
	constexpr uint64_t kNotRma = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_ATOMIC |
				     FI_DIRECTED_RECV | FI_MULTI_RECV | abi::kTaggedDirectedRecv |
				     abi::kExactDirectedRecv;
	if ((asked && !(asked & FI_RMA_PMEM)) || (asked & kNotRma) || !(info.caps & FI_RMA)) {
		VRMA_INFO(FI_LOG_CORE, "RDM: a default FI_COMMIT_COMPLETE needs FI_RMA and FI_RMA_PMEM, and is honoured for RMA writes only (no FI_MSG, FI_TAGGED or FI_ATOMIC)\n");
		return false;
	}
	drop(kNotRma);
	return true;
}

// The RDM endpoint without RMA: messages only, no registration mode.
void without_rdm_rma(fi_info &info)
{
	info.caps &= ~kRdmRmaCaps;
	info.tx_attr->caps &= ~kRdmRmaCaps;
	info.rx_attr->caps &= ~kRdmRmaCaps;
	info.tx_attr->rma_iov_limit = 0;
	info.domain_attr->mr_mode = 0;
	info.domain_attr->mr_key_size = sizeof(uint32_t);
	info.ep_attr->max_order_raw_size = 0;
	info.ep_attr->max_order_waw_size = 0;
}

int resolve_name(const char *node, const char *service, bool passive, int family,
		 sockaddr_storage *out)
{
	addrinfo hints{};
	hints.ai_family = family;
	hints.ai_socktype = SOCK_STREAM;
	if (passive)
		hints.ai_flags |= AI_PASSIVE;
	addrinfo *res = nullptr;
	int rc = getaddrinfo(node, service, &hints, &res);
	if (rc) {
		VRMA_INFO(FI_LOG_CORE, "getaddrinfo(%s, %s): %s\n", node ? node : "-",
			  service ? service : "-", gai_strerror(rc));
		return -FI_ENODATA;
	}
	memcpy(out, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

// Finds the local RDMA port and address that reach `dest`.
int resolve_route_source(rdma_event_channel *, const sockaddr *src, const sockaddr *dest,
			 ibv_context **ctx, uint8_t *port, sockaddr_storage *local)
{
	rdma_cm_id *raw = nullptr;
	// Synchronous id: rdma_resolve_addr blocks until resolved or timed out.
	if (rdma_create_id(nullptr, &raw, nullptr, RDMA_PS_TCP))
		return errno_to_fi(errno);
	CmIdPtr id(raw);
	if (rdma_resolve_addr(id.get(), const_cast<sockaddr *>(src), const_cast<sockaddr *>(dest),
			      params.cm_timeout_ms)) {
		VRMA_INFO(FI_LOG_CORE, "no RDMA route to %s: %s\n", sockaddr_str(dest).c_str(),
			  strerror(errno));
		return -FI_ENODATA;
	}
	if (!id->verbs)
		return -FI_ENODATA;
	*ctx = id->verbs;
	*port = id->port_num;
	const sockaddr *l = rdma_get_local_addr(id.get());
	memcpy(local, l, sockaddr_len(l));
	return 0;
}

} // namespace

int probe_inline_size(ibv_context *ctx) noexcept
{
	std::lock_guard guard(inline_lock);
	auto it = inline_cache.find(ctx->device->name);
	if (it != inline_cache.end())
		return it->second;
	int result = 0;
	ibv_pd *pd = ibv_alloc_pd(ctx);
	ibv_cq *cq = pd ? ibv_create_cq(ctx, 4, nullptr, nullptr, 0) : nullptr;
	if (cq) {
		// Ask for decreasing inline sizes; the device reports what it grants.
		for (uint32_t want : {1024u, 512u, 256u, 128u, 64u, 32u, 0u}) {
			ibv_qp_init_attr attr{};
			attr.send_cq = cq;
			attr.recv_cq = cq;
			attr.qp_type = IBV_QPT_RC;
			attr.cap.max_send_wr = static_cast<uint32_t>(params.tx_size);
			attr.cap.max_recv_wr = 1;
			attr.cap.max_send_sge = static_cast<uint32_t>(params.iov_limit);
			attr.cap.max_recv_sge = 1;
			attr.cap.max_inline_data = want;
			ibv_qp *qp = ibv_create_qp(pd, &attr);
			if (qp) {
				result = static_cast<int>(attr.cap.max_inline_data);
				ibv_destroy_qp(qp);
				break;
			}
		}
	}
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	if (params.inline_size >= 0 && params.inline_size < result)
		result = params.inline_size;
	inline_cache[ctx->device->name] = result;
	VRMA_INFO(FI_LOG_CORE, "%s: inline size %d\n", ctx->device->name, result);
	return result;
}

void info_cleanup() noexcept
{
	std::lock_guard guard(inline_lock);
	inline_cache.clear();
}

namespace {

// What an fi_getinfo call names: the address family its hints allow, and
// the source and destination addresses from its node, service and hints.
struct Query {
	int family = AF_UNSPEC;
	sockaddr_storage src{}, dest{};
	bool have_src = false, have_dest = false;
	uint16_t src_port = 0; // network order: a service without a node
	sockaddr *src_sa() { return reinterpret_cast<sockaddr *>(&src); }
	sockaddr *dest_sa() { return reinterpret_cast<sockaddr *>(&dest); }
};

// The address family of the hints' addr_format: 0, or -FI_ENODATA for a
// format vrma does not offer.
int query_family(const fi_info *hints, Query &q)
{
	if (hints && hints->addr_format == FI_SOCKADDR_IN)
		q.family = AF_INET;
	else if (hints && hints->addr_format == FI_SOCKADDR_IN6)
		q.family = AF_INET6;
	else if (hints && hints->addr_format != FI_FORMAT_UNSPEC &&
		 hints->addr_format != FI_SOCKADDR) {
		VRMA_INFO(FI_LOG_CORE, "address format %u not offered\n", hints->addr_format);
		return -FI_ENODATA;
	}
	return 0;
}

// An address of the hints' (src_addr or dest_addr): false when its length
// is short or its family unknown.
bool copy_hint_addr(const void *addr, size_t addrlen, sockaddr_storage &out)
{
	const size_t len = sockaddr_len(static_cast<const sockaddr *>(addr));
	if (addrlen < len || !len)
		return false;
	memcpy(&out, addr, len);
	return true;
}

// The addresses the call names: node (the source with FI_SOURCE, else the
// destination), then the hints' own; a service without a node is the
// local port to listen on.
int query_addresses(const char *node, const char *service, uint64_t flags, const fi_info *hints,
		    Query &q)
{
	const bool source = flags & FI_SOURCE;
	if (node || service) {
		if (source || !node) {
			if (node) {
				if (int rc = resolve_name(node, service, true, q.family, &q.src))
					return rc;
				q.have_src = true;
			}
		} else {
			if (int rc = resolve_name(node, service, false, q.family, &q.dest))
				return rc;
			q.have_dest = true;
		}
	}
	if (hints && hints->src_addr && !q.have_src) {
		if (!copy_hint_addr(hints->src_addr, hints->src_addrlen, q.src))
			return -FI_ENODATA;
		q.have_src = true;
	}
	if (hints && hints->dest_addr && !q.have_dest) {
		if (!copy_hint_addr(hints->dest_addr, hints->dest_addrlen, q.dest))
			return -FI_ENODATA;
		q.have_dest = true;
	}
	if (service && !q.have_src && (source || !node)) {
		char *end = nullptr;
		unsigned long p = strtoul(service, &end, 10);
		if (!end || *end || p > 65535) {
			VRMA_WARN(FI_LOG_CORE, "service '%s' is not a port number\n", service);
			return -FI_EINVAL;
		}
		q.src_port = htons(static_cast<uint16_t>(p));
	}
	return 0;
}

// The local RDMA addresses the query may use: the one that routes to its
// destination, those matching its source (given the source's port), or
// all (given the service's port).
int query_local_addrs(rdma_event_channel *ch, Query &q, std::vector<PortAddr> &addrs)
{
	addrs = discover_addresses(ch);
	std::vector<PortAddr> chosen;
	if (q.have_dest) {
		ibv_context *ctx = nullptr;
		uint8_t port = 0;
		sockaddr_storage local{};
		if (int rc = resolve_route_source(ch, q.have_src ? q.src_sa() : nullptr, q.dest_sa(), &ctx,
						  &port, &local))
			return rc;
		// The resolving id used its own device list: match by name.
		for (PortAddr &a : addrs)
			if (!strcmp(a.ctx->device->name, ctx->device->name) && a.port == port &&
			    same_ip(reinterpret_cast<sockaddr *>(&a.addr), reinterpret_cast<sockaddr *>(&local))) {
				if (q.have_src)
					set_port(reinterpret_cast<sockaddr *>(&a.addr), get_port(q.src_sa()));
				chosen.push_back(a);
			}
		addrs.swap(chosen);
	} else if (q.have_src) {
		const sockaddr *s = q.src_sa();
		for (PortAddr &a : addrs) {
			if (a.addr.ss_family != s->sa_family)
				continue;
			if (!is_any_ip(s) && !same_ip(reinterpret_cast<sockaddr *>(&a.addr), s))
				continue;
			set_port(reinterpret_cast<sockaddr *>(&a.addr), get_port(s));
			chosen.push_back(a);
		}
		addrs.swap(chosen);
	} else if (q.src_port) {
		for (PortAddr &a : addrs)
			set_port(reinterpret_cast<sockaddr *>(&a.addr), q.src_port);
	}
	return 0;
}

// The active ports those addresses are on, each with its addresses of the
// wanted family (one info per device port).
std::vector<Port> group_ports(const std::vector<PortAddr> &addrs, int family)
{
	std::vector<Port> ports;
	for (const PortAddr &a : addrs) {
		if (family != AF_UNSPEC && a.addr.ss_family != family)
			continue;
		Port *p = nullptr;
		for (Port &q : ports)
			if (!strcmp(q.ctx->device->name, a.ctx->device->name) && q.port == a.port)
				p = &q;
		if (!p) {
			Port np;
			np.ctx = a.ctx;
			np.port = a.port;
			if (ibv_query_device(a.ctx, &np.dev) || ibv_query_port(a.ctx, a.port, &np.attr))
				continue;
			if (np.attr.state != IBV_PORT_ACTIVE) {
				VRMA_INFO(FI_LOG_CORE, "%s port %u is not active\n", a.ctx->device->name, a.port);
				continue;
			}
			ports.push_back(np);
			p = &ports.back();
		}
		p->addrs.push_back(a);
	}
	return ports;
}

// The address a port's infos carry: IPv4 when the port has one (the
// application said no preference, or there is no other), else IPv6, a
// global address before a link-local one; nullptr when it has none.
const PortAddr *port_address(const Port &p)
{
	const PortAddr *chosen = nullptr;
	for (const PortAddr &a : p.addrs) {
		if (!chosen || (chosen->addr.ss_family == AF_INET6 && a.addr.ss_family == AF_INET))
			chosen = &a;
		if (chosen->addr.ss_family == AF_INET6 && a.addr.ss_family == AF_INET6 &&
		    IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6 *>(&chosen->addr)->sin6_addr) &&
		    !IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6 *>(&a.addr)->sin6_addr))
			chosen = &a;
	}
	return chosen;
}

// The list fi_getinfo returns, built in order.
class InfoList {
public:
	void append(FiInfoPtr item) noexcept
	{
		fi_info *i = item.release();
		if (tail_)
			*tail_ = i;
		else
			head_.reset(i);
		tail_ = &i->next;
	}
	fi_info *head() const noexcept { return head_.get(); }
	fi_info *release() noexcept { return head_.release(); }

private:
	FiInfoPtr head_;
	fi_info **tail_ = nullptr;
};

// The native RDM endpoint's info for port p at address a, appended to out;
// 0 also when the hints rule it out. RMA when the application takes on its
// registration mode (or does not say), scalable keys when it refuses
// provider keys, messages alone when it asks for neither RMA nor that mode.
int add_rdm_info(uint32_t api, const Port &p, const PortAddr &a, const fi_info *hints, Query &q,
		 InfoList &out)
{
	FiInfoPtr rcap(build_rdm_cap_info(api, p, a, probe_inline_size(p.ctx)));
	if (!rcap)
		return -FI_ENOMEM;
	std::string rwhy;
	const bool asks_rma = hints && hints->caps &&
			      (hints->caps & (FI_RMA | FI_ATOMIC | FI_RMA_EVENT | FI_READ | FI_WRITE |
					      FI_REMOTE_READ | FI_REMOTE_WRITE));
	const bool rma_ruled_out = hints && hints->caps && !asks_rma;
	if (rma_ruled_out)
		without_rdm_rma(*rcap);
	else if (hints && hints->caps && !(hints->caps & FI_ATOMIC)) {
		rcap->tx_attr->msg_order |= kRdmRmaAtomicOrder;
		rcap->rx_attr->msg_order |= kRdmRmaAtomicOrder;
	}
	if (!hints_match(api, *rcap, hints, rwhy)) {
		std::string why2;
		bool ok = false;
		if (!rma_ruled_out) {
			with_scalable_keys(*rcap);
			ok = hints_match(api, *rcap, hints, why2);
		}
		if (!ok)
			without_rdm_rma(*rcap);
		if (!ok && (asks_rma || !hints_match(api, *rcap, hints, why2))) {
			VRMA_INFO(FI_LOG_CORE, "%s (RDM): hints not satisfied: %s\n", p.ctx->device->name,
				  rwhy.c_str());
			return 0;
		}
	}
	FiInfoPtr rout(abi::dup_info(rcap.get(), api));
	if (!rout)
		return -FI_ENOMEM;
	apply_hints(api, *rout, hints, rdm_params.tx_buffers, 65536, kRdmIovLimit, 0);
	default_manual_data_progress(*rout, hints);
	// Modifiers that narrow what a receive may name: only when asked for
	// (an application that names no caps keeps FI_ADDR_UNSPEC receives).
	if (const uint64_t unasked = (abi::kTaggedDirectedRecv | abi::kExactDirectedRecv) &
				     ~(hints ? hints->caps : 0)) {
		rout->caps &= ~unasked;
		rout->rx_attr->caps &= ~unasked;
	}
	if (!rdm_pmem_caps(*rout, hints))
		return 0;
	if (q.have_dest) {
		rout->dest_addr = dup_addr(q.dest_sa(), &rout->dest_addrlen);
		if (!rout->dest_addr)
			return -FI_ENOMEM;
	}
	out.append(std::move(rout));
	return 0;
}

// The MSG endpoint's info from its capability template `cap` (which the
// hints matched), or none when the hints rule it out. Throws bad_alloc.
FiInfoPtr msg_info(uint32_t api, const Port &p, const fi_info &cap, const fi_info *hints, Query &q)
{
	FiInfoPtr out(abi::dup_info(&cap, api));
	if (!out)
		throw std::bad_alloc();
	apply_hints(api, *out, hints, params.tx_size, params.rx_size, params.iov_limit, kOptionalModes);
	default_manual_data_progress(*out, hints);
	// FI_RMA_PMEM and FI_RMA_EVENT endpoints keep their receive queue for
	// commit and event messages: offered when asked for (FI_RMA_PMEM also
	// when implied by a default FI_COMMIT_COMPLETE). With messages too,
	// those arrive through vrma's staging buffers (uses_staged_rx).
	const uint64_t asked = hints ? hints->caps : 0;
	const bool commit = out->tx_attr->op_flags & FI_COMMIT_COMPLETE;
	const bool wants_msgs = asked & (FI_MSG | FI_SEND | FI_RECV);
	if (commit && asked && !(asked & FI_RMA_PMEM)) {
		VRMA_INFO(FI_LOG_CORE, "FI_COMMIT_COMPLETE needs FI_RMA_PMEM in caps\n");
		return FiInfoPtr();
	}
	auto drop_caps = [&](uint64_t drop) {
		out->caps &= ~drop;
		out->tx_attr->caps &= ~drop;
		out->rx_attr->caps &= ~drop;
	};
	if ((asked & kOwnRxCaps) || commit) {
		drop_caps(kOwnRxCaps & ~(asked & kOwnRxCaps) & ~(commit ? FI_RMA_PMEM : 0));
		// Not asked for: RMA only, whose messages may be larger.
		if (!wants_msgs)
			drop_caps(kMsgCaps);
		// A commit completes when the target answers: later operations
		// may complete before it.
		out->tx_attr->comp_order &= ~abi::kOrderStrict;
	} else {
		drop_caps(kOwnRxCaps);
	}
	// Delivery: a read-back for writes; for sends a read-back or the
	// peer's confirmation (an application that named no capabilities gets
	// RMA, as before sends honoured it).
	if ((out->tx_attr->op_flags & FI_DELIVERY_COMPLETE) && !wants_msgs)
		drop_caps(kMsgCaps);
	if (uses_service(out->caps, out->tx_attr->op_flags)) {
		// Remote CQ data never needs an application receive; answered
		// operations complete when the answer comes.
		out->mode &= ~FI_RX_CQ_DATA;
		out->rx_attr->mode &= ~FI_RX_CQ_DATA;
		out->tx_attr->comp_order &= ~abi::kOrderStrict;
	}
	if (out->caps & (FI_MSG | FI_SEND | FI_RECV)) {
		// Staged receives carry at most kStagedMsgMax; taking on
		// FI_RX_CQ_DATA lifts that.
		const bool staged = uses_staged_rx(out->caps, out->mode, out->tx_attr->op_flags);
		const size_t limit =
			msg_max_msg_size(wr_bytes_limit(p.attr.max_msg_sz, params.max_wr_size), true, staged);
		if (hints && hints->ep_attr && hints->ep_attr->max_msg_size > limit) {
			VRMA_INFO(FI_LOG_CORE, "max_msg_size %zu: messages are at most %zu bytes%s\n",
				  hints->ep_attr->max_msg_size, limit, staged ? " without FI_RX_CQ_DATA" : "");
			return FiInfoPtr();
		}
		out->ep_attr->max_msg_size = limit;
	}
	if (q.have_dest) {
		out->dest_addr = dup_addr(q.dest_sa(), &out->dest_addrlen);
		if (!out->dest_addr)
			throw std::bad_alloc();
	}
	return out;
}

} // namespace

int getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
	    const fi_info *hints, fi_info **info) noexcept
try {
	*info = nullptr;
	// The core's private flag of a utility provider's query (OFI_CORE_PROV_ONLY).
	constexpr uint64_t kCoreProvOnly = 1ULL << 59;
	if ((flags & kCoreProvOnly) && !params.util_layering) {
		VRMA_INFO(FI_LOG_CORE, "not offered to utility providers: vrma's own RDM endpoint serves FI_EP_RDM (FI_VRMA_UTIL_LAYERING=1 offers \"vrma;ofi_rxm\")\n");
		return -FI_ENODATA;
	}
	if (hints && hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC &&
	    hints->ep_attr->type != FI_EP_MSG && hints->ep_attr->type != FI_EP_RDM) {
		VRMA_INFO(FI_LOG_CORE, "only FI_EP_MSG and FI_EP_RDM endpoints are offered\n");
		return -FI_ENODATA;
	}
	Query q;
	if (int rc = query_family(hints, q))
		return rc;
	int num = 0;
	DeviceListPtr devices(rdma_get_devices(&num));
	if (!devices || num == 0) {
		VRMA_INFO(FI_LOG_CORE, "no RDMA device\n");
		return -FI_ENODATA;
	}
	rdma_event_channel *raw_ch = rdma_create_event_channel();
	if (!raw_ch) {
		VRMA_INFO(FI_LOG_CORE, "rdma_cm unavailable: %s\n", strerror(errno));
		return -FI_ENODATA;
	}
	EventChannelPtr ch(raw_ch);
	if (int rc = query_addresses(node, service, flags, hints, q))
		return rc;
	std::vector<PortAddr> addrs;
	if (int rc = query_local_addrs(ch.get(), q, addrs))
		return rc;

	// Per active port: the MSG endpoint's info, then the RDM endpoint's (an
	// application asking for FI_EP_UNSPEC keeps what it got first).
	InfoList list;
	const uint32_t api = version;
	for (const Port &p : group_ports(addrs, q.family)) {
		const PortAddr *a = port_address(p);
		if (!a)
			continue;
		FiInfoPtr cap(build_cap_info(api, p, *a, probe_inline_size(p.ctx)));
		if (!cap)
			return -FI_ENOMEM;
		std::string why;
		if (!hints_match(api, *cap, hints, why))
			VRMA_INFO(FI_LOG_CORE, "%s: hints not satisfied: %s\n", p.ctx->device->name, why.c_str());
		else if (FiInfoPtr out = msg_info(api, p, *cap, hints, q))
			list.append(std::move(out));
		if (int rc = add_rdm_info(api, p, *a, hints, q, list))
			return rc;
	}
	if (!list.head())
		return -FI_ENODATA;
	// A passive endpoint in the hints: MSG endpoints opened from these
	// infos take over its address (fi_endpoint). RDM endpoints listen on
	// their own.
	if (hints && hints->handle && as_vrma_pep(hints->handle))
		for (fi_info *i = list.head(); i; i = i->next)
			if (i->ep_attr && i->ep_attr->type == FI_EP_MSG)
				i->handle = hints->handle;
	*info = list.release();
	return 0;
} catch (...) {
	VRMA_WARN(FI_LOG_CORE, "out of memory\n");
	return -FI_ENOMEM;
}

} // namespace vrma
