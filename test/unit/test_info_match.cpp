// hints_match / apply_hints and their helpers: the fi_getinfo hint matching
// rules of libfabric's util layer, checked against a capability fi_info built
// the way the provider builds one for an rxe device.
#include "unit.h"
#include "info_match.h"
#include "abi_compat.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

namespace abi = vrma::abi;

using vrma::apply_hints;
using vrma::expand_caps;
using vrma::expand_rx_caps;
using vrma::expand_tx_caps;
using vrma::hints_match;
using vrma::mr_mode_satisfies;
using vrma::progress_satisfies;
using vrma::threading_satisfies;

namespace {

constexpr uint32_t kApi = FI_VERSION(1, 17);
constexpr uint32_t kLegacyApi = FI_VERSION(1, 4); // before the 1.5 mr_mode bits

constexpr uint64_t kMsgCaps = FI_MSG | FI_SEND | FI_RECV;
constexpr uint64_t kRmaCaps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint64_t kCommCaps = FI_LOCAL_COMM | FI_REMOTE_COMM;
constexpr uint64_t kCapCaps = kMsgCaps | kRmaCaps | kCommCaps;
constexpr uint64_t kTxOpFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE;
constexpr uint64_t kRxOpFlags = FI_COMPLETION;
constexpr uint64_t kMsgOrder = FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_RAS | FI_ORDER_WAW |
			       FI_ORDER_WAS | FI_ORDER_SAW | FI_ORDER_SAS;
constexpr uint64_t kCompOrder = abi::kOrderStrict | abi::kOrderData;
constexpr int kProvMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
constexpr int kMrBasicMap = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
constexpr size_t kQueueSize = 1048576;
constexpr size_t kIovLimit = 32;
constexpr size_t kInjectSize = 256;
constexpr size_t kMaxMsgSize = 0x80000000u;
constexpr size_t kDevCount = 16384;
constexpr const char *kDomainName = "rxe0";
constexpr const char *kFabricName = "10.99.0.0/24";

// What the provider passes to apply_hints besides the hints.
constexpr size_t kDefaultTx = 384;
constexpr size_t kDefaultRx = 384;
constexpr size_t kDefaultIov = 4;
constexpr uint64_t kOptionalModes = FI_RX_CQ_DATA;

struct InfoDeleter {
	void operator()(fi_info *info) const noexcept { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// The most one rxe port offers, as the provider describes it.
InfoPtr make_cap()
{
	InfoPtr info(fi_allocinfo());
	ck_assert_ptr_nonnull(info.get());
	info->caps = kCapCaps;
	info->mode = 0;
	info->addr_format = FI_SOCKADDR_IN;
	auto *sin = static_cast<sockaddr_in *>(calloc(1, sizeof(sockaddr_in)));
	ck_assert_ptr_nonnull(sin);
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(0x0a630001); // 10.99.0.1
	info->src_addr = sin;
	info->src_addrlen = sizeof(*sin);

	// Each context holds its own side's directions (fi_getinfo(3); fabtests'
	// getinfo_test checks it).
	fi_tx_attr &tx = *info->tx_attr;
	tx.caps = (kMsgCaps | kRmaCaps) & ~vrma::kRxDirections;
	tx.op_flags = kTxOpFlags;
	tx.msg_order = kMsgOrder;
	tx.comp_order = kCompOrder;
	tx.inject_size = kInjectSize;
	tx.size = kQueueSize;
	tx.iov_limit = kIovLimit;
	tx.rma_iov_limit = 1;

	fi_rx_attr &rx = *info->rx_attr;
	rx.caps = (kMsgCaps | kRmaCaps) & ~vrma::kTxDirections;
	rx.op_flags = kRxOpFlags;
	rx.msg_order = kMsgOrder;
	rx.comp_order = kCompOrder;
	rx.total_buffered_recv = 0;
	rx.size = kQueueSize;
	rx.iov_limit = kIovLimit;

	fi_ep_attr &ep = *info->ep_attr;
	ep.type = FI_EP_MSG;
	ep.protocol = FI_PROTO_RDMA_CM_IB_RC;
	ep.protocol_version = 1;
	ep.max_msg_size = kMaxMsgSize;
	ep.max_order_raw_size = kMaxMsgSize;
	ep.max_order_war_size = 0;
	ep.max_order_waw_size = kMaxMsgSize;
	ep.tx_ctx_cnt = 1;
	ep.rx_ctx_cnt = 1;

	fi_domain_attr &dom = *info->domain_attr;
	dom.name = strdup(kDomainName);
	dom.threading = FI_THREAD_SAFE;
	dom.control_progress = FI_PROGRESS_AUTO;
	dom.data_progress = FI_PROGRESS_AUTO;
	dom.resource_mgmt = FI_RM_ENABLED;
	dom.av_type = FI_AV_UNSPEC;
	dom.mr_mode = kProvMrMode;
	dom.mr_key_size = 4;
	dom.cq_data_size = 4;
	dom.cq_cnt = kDevCount;
	dom.ep_cnt = kDevCount;
	dom.tx_ctx_cnt = kDevCount;
	dom.rx_ctx_cnt = kDevCount;
	dom.max_ep_tx_ctx = 1;
	dom.max_ep_rx_ctx = 1;
	dom.mr_iov_limit = 1;
	dom.caps = kCommCaps;
	dom.max_err_data = 56;
	dom.mr_cnt = 262144;

	fi_fabric_attr &fab = *info->fabric_attr;
	fab.name = strdup(kFabricName);
	fab.prov_version = FI_VERSION(1, 0);
	fab.api_version = kApi;
	ck_assert_ptr_nonnull(dom.name);
	ck_assert_ptr_nonnull(fab.name);
	return info;
}

// The smallest hints a current application sends: every attribute
// structure present and zeroed, plus the mr_mode bits it supports.
InfoPtr make_hints()
{
	InfoPtr hints(fi_allocinfo());
	ck_assert_ptr_nonnull(hints.get());
	hints->domain_attr->mr_mode = kProvMrMode;
	return hints;
}

// ofi_rxm's hints to its core (FI_EP_MSG) provider.
InfoPtr make_rxm_hints()
{
	InfoPtr hints(fi_allocinfo());
	ck_assert_ptr_nonnull(hints.get());
	hints->ep_attr->type = FI_EP_MSG;
	hints->mode = FI_RX_CQ_DATA | FI_CONTEXT;
	hints->caps = FI_MSG | FI_RMA | FI_READ | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND |
		      FI_RECV;
	hints->domain_attr->mr_mode = kProvMrMode;
	hints->tx_attr->op_flags = FI_TRANSMIT_COMPLETE;
	hints->tx_attr->size = 128;
	hints->rx_attr->size = 128;
	return hints;
}

// fi_pingpong's hints (fabtests defaults for an FI_EP_MSG run).
InfoPtr make_pingpong_hints()
{
	InfoPtr hints(fi_allocinfo());
	ck_assert_ptr_nonnull(hints.get());
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode = kProvMrMode;
	return hints;
}

// What the provider returns: its capability narrowed by the hints.
InfoPtr applied(uint32_t api, const InfoPtr &cap, const fi_info *hints)
{
	InfoPtr out(fi_dupinfo(cap.get()));
	ck_assert_ptr_nonnull(out.get());
	apply_hints(api, *out, hints, kDefaultTx, kDefaultRx, kDefaultIov, kOptionalModes);
	return out;
}

} // namespace

// hints_match() must accept; the message names the field it rejected on.
#define ck_match(api, cap, hints)                                                          \
	do {                                                                               \
		std::string why_;                                                          \
		const bool ok_ = hints_match((api), *(cap), (hints), why_);                \
		ck_assert_msg(ok_, "hints rejected on \"%s\", expected a match", why_.c_str()); \
	} while (0)

// hints_match() must reject, naming `field`.
#define ck_reject(api, cap, hints, field)                                                  \
	do {                                                                               \
		std::string why_;                                                          \
		const bool ok_ = hints_match((api), *(cap), (hints), why_);                \
		ck_assert_msg(!ok_, "hints matched, expected a rejection on \"%s\"", (field)); \
		ck_assert_str_eq(why_.c_str(), (field));                                   \
	} while (0)

// ---------------------------------------------------------------- helpers

START_TEST(expand_caps_msg_directions)
{
	ck_assert_uint_eq(expand_caps(FI_MSG), FI_MSG | FI_SEND | FI_RECV);
	ck_assert_uint_eq(expand_caps(FI_TAGGED), FI_TAGGED | FI_SEND | FI_RECV);
	// A direction bit present: only that direction is wanted.
	ck_assert_uint_eq(expand_caps(FI_MSG | FI_SEND), FI_MSG | FI_SEND);
	ck_assert_uint_eq(expand_caps(FI_MSG | FI_RECV), FI_MSG | FI_RECV);
}
END_TEST

START_TEST(expand_caps_rma_directions)
{
	constexpr uint64_t dirs = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	ck_assert_uint_eq(expand_caps(FI_RMA), FI_RMA | dirs);
	ck_assert_uint_eq(expand_caps(FI_ATOMIC), FI_ATOMIC | dirs);
	ck_assert_uint_eq(expand_caps(FI_RMA | FI_READ), FI_RMA | FI_READ);
	ck_assert_uint_eq(expand_caps(FI_RMA | FI_REMOTE_WRITE), FI_RMA | FI_REMOTE_WRITE);
	// Both families expand independently.
	ck_assert_uint_eq(expand_caps(FI_MSG | FI_RMA), FI_MSG | FI_SEND | FI_RECV | FI_RMA | dirs);
	ck_assert_uint_eq(expand_caps(FI_MSG | FI_SEND | FI_RMA), FI_MSG | FI_SEND | FI_RMA | dirs);
	ck_assert_uint_eq(expand_caps(FI_MSG | FI_RMA | FI_WRITE),
			  FI_MSG | FI_SEND | FI_RECV | FI_RMA | FI_WRITE);
}
END_TEST

START_TEST(expand_caps_per_context)
{
	ck_assert_uint_eq(expand_tx_caps(FI_MSG | FI_RMA), FI_MSG | FI_SEND | FI_RMA | FI_READ | FI_WRITE);
	ck_assert_uint_eq(expand_rx_caps(FI_MSG | FI_RMA),
			  FI_MSG | FI_RECV | FI_RMA | FI_REMOTE_READ | FI_REMOTE_WRITE);
	ck_assert_uint_eq(expand_tx_caps(FI_TAGGED | FI_ATOMIC), FI_TAGGED | FI_SEND | FI_ATOMIC | FI_READ | FI_WRITE);
	// Named directions of the other side are not this context's.
	ck_assert_uint_eq(expand_tx_caps(FI_MSG | FI_RECV), FI_MSG);
	ck_assert_uint_eq(expand_rx_caps(FI_RMA | FI_WRITE), FI_RMA);
	ck_assert_uint_eq(expand_rx_caps(FI_MSG | FI_DIRECTED_RECV), FI_MSG | FI_RECV | FI_DIRECTED_RECV);
}
END_TEST

START_TEST(expand_caps_leaves_other_bits)
{
	ck_assert_uint_eq(expand_caps(0), 0);
	ck_assert_uint_eq(expand_caps(kCommCaps), kCommCaps);
	ck_assert_uint_eq(expand_caps(FI_SEND), FI_SEND);
	ck_assert_uint_eq(expand_caps(FI_READ | FI_SOURCE), FI_READ | FI_SOURCE);
}
END_TEST

START_TEST(threading_stronger_serves_weaker)
{
	const int levels[] = {FI_THREAD_SAFE, FI_THREAD_FID, FI_THREAD_DOMAIN,
			      FI_THREAD_COMPLETION, FI_THREAD_ENDPOINT};
	for (int want : levels) {
		// FI_THREAD_SAFE serves everything; every level serves itself.
		ck_assert_msg(threading_satisfies(FI_THREAD_SAFE, want), "SAFE vs %d", want);
		ck_assert_msg(threading_satisfies(want, want), "%d vs itself", want);
		// Any level serves an application that does not care.
		ck_assert_msg(threading_satisfies(want, FI_THREAD_UNSPEC), "%d vs UNSPEC", want);
		// Nothing weaker serves FI_THREAD_SAFE.
		if (want != FI_THREAD_SAFE)
			ck_assert_msg(!threading_satisfies(want, FI_THREAD_SAFE), "%d vs SAFE", want);
	}
	ck_assert(threading_satisfies(FI_THREAD_FID, FI_THREAD_DOMAIN));
	ck_assert(threading_satisfies(FI_THREAD_FID, FI_THREAD_COMPLETION));
	ck_assert(!threading_satisfies(FI_THREAD_DOMAIN, FI_THREAD_FID));
	ck_assert(!threading_satisfies(FI_THREAD_COMPLETION, FI_THREAD_FID));
	// A provider that states nothing guarantees nothing.
	ck_assert(!threading_satisfies(FI_THREAD_UNSPEC, FI_THREAD_DOMAIN));
	ck_assert(threading_satisfies(FI_THREAD_UNSPEC, FI_THREAD_UNSPEC));
}
END_TEST

START_TEST(progress_auto_serves_manual)
{
	ck_assert(progress_satisfies(FI_PROGRESS_AUTO, FI_PROGRESS_AUTO));
	ck_assert(progress_satisfies(FI_PROGRESS_AUTO, FI_PROGRESS_MANUAL));
	ck_assert(progress_satisfies(FI_PROGRESS_AUTO, FI_PROGRESS_UNSPEC));
	ck_assert(progress_satisfies(FI_PROGRESS_MANUAL, FI_PROGRESS_MANUAL));
	ck_assert(progress_satisfies(FI_PROGRESS_MANUAL, FI_PROGRESS_UNSPEC));
	ck_assert(!progress_satisfies(FI_PROGRESS_MANUAL, FI_PROGRESS_AUTO));
}
END_TEST

START_TEST(mr_mode_current_bits)
{
	// The application must support every bit the provider needs; extra
	// bits it supports do not matter.
	ck_assert(mr_mode_satisfies(kApi, kProvMrMode, kProvMrMode, 0));
	ck_assert(mr_mode_satisfies(kApi, kProvMrMode,
				    kProvMrMode | FI_MR_RAW | FI_MR_ENDPOINT | FI_MR_HMEM, 0));
	ck_assert(mr_mode_satisfies(kApi, 0, kProvMrMode, 0));
	const int needed[] = {FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY};
	for (int bit : needed)
		ck_assert_msg(!mr_mode_satisfies(kApi, kProvMrMode, kProvMrMode & ~bit, 0),
			      "accepted without mr_mode bit 0x%x", bit);
	// FI_MR_LOCAL is not needed by a provider that does not ask for it.
	ck_assert(mr_mode_satisfies(kApi, kMrBasicMap, kMrBasicMap, 0));
}
END_TEST

START_TEST(mr_mode_unspec_by_version)
{
	// From API 1.5 on, FI_MR_UNSPEC in the hints supports nothing.
	ck_assert(!mr_mode_satisfies(kApi, kProvMrMode, abi::kMrUnspec, abi::kLocalMr));
	ck_assert(!mr_mode_satisfies(FI_VERSION(1, 5), kMrBasicMap, abi::kMrUnspec, 0));
	// Before, it meant "whatever the provider uses" (local registration
	// being accepted through FI_LOCAL_MR).
	ck_assert(mr_mode_satisfies(kLegacyApi, kProvMrMode, abi::kMrUnspec, abi::kLocalMr));
	ck_assert(mr_mode_satisfies(kLegacyApi, kMrBasicMap, abi::kMrUnspec, 0));
}
END_TEST

START_TEST(mr_mode_basic_legacy_spelling)
{
	for (uint32_t api : {kLegacyApi, kApi}) {
		// FI_MR_BASIC = VIRT_ADDR | ALLOCATED | PROV_KEY; FI_MR_LOCAL is
		// accepted through the FI_LOCAL_MR mode bit.
		ck_assert(mr_mode_satisfies(api, kProvMrMode, abi::kMrBasic, abi::kLocalMr));
		ck_assert(!mr_mode_satisfies(api, kProvMrMode, abi::kMrBasic, 0));
		ck_assert(mr_mode_satisfies(api, kMrBasicMap, abi::kMrBasic, 0));
		ck_assert(mr_mode_satisfies(api, FI_MR_VIRT_ADDR, abi::kMrBasic, 0));
		// Bits FI_MR_BASIC does not stand for are not accepted.
		ck_assert(!mr_mode_satisfies(api, kMrBasicMap | FI_MR_RAW, abi::kMrBasic, abi::kLocalMr));
		ck_assert(!mr_mode_satisfies(api, kMrBasicMap | FI_MR_ENDPOINT, abi::kMrBasic, 0));
	}
}
END_TEST

START_TEST(mr_mode_scalable)
{
	for (uint32_t api : {kLegacyApi, kApi}) {
		// Scalable registration has no virtual addresses and no provider
		// keys.
		ck_assert(!mr_mode_satisfies(api, kProvMrMode, abi::kMrScalable, abi::kLocalMr));
		ck_assert(!mr_mode_satisfies(api, FI_MR_VIRT_ADDR, abi::kMrScalable, 0));
		ck_assert(!mr_mode_satisfies(api, FI_MR_PROV_KEY, abi::kMrScalable, 0));
		ck_assert(mr_mode_satisfies(api, 0, abi::kMrScalable, 0));
		ck_assert(mr_mode_satisfies(api, FI_MR_LOCAL, abi::kMrScalable, abi::kLocalMr));
		ck_assert(!mr_mode_satisfies(api, FI_MR_LOCAL, abi::kMrScalable, 0));
	}
}
END_TEST

// ---------------------------------------------------------------- hints_match

START_TEST(match_no_or_minimal_hints)
{
	InfoPtr cap = make_cap();
	ck_match(kApi, cap, nullptr);
	InfoPtr hints = make_hints();
	ck_match(kApi, cap, hints.get());
	// Hints with no attribute structures at all.
	fi_info bare{};
	ck_match(kApi, cap, &bare);
}
END_TEST

START_TEST(match_caps)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	const uint64_t ok[] = {FI_MSG, FI_RMA, FI_MSG | FI_RMA, FI_SEND, FI_RMA | FI_REMOTE_READ,
			       FI_LOCAL_COMM, FI_REMOTE_COMM, kCapCaps};
	for (uint64_t caps : ok) {
		hints->caps = caps;
		ck_match(kApi, cap, hints.get());
	}
	const uint64_t bad[] = {FI_TAGGED, FI_ATOMIC, FI_MULTI_RECV, FI_SOURCE,
				FI_DIRECTED_RECV, FI_RMA_EVENT, FI_MSG | FI_TAGGED};
	for (uint64_t caps : bad) {
		hints->caps = caps;
		ck_reject(kApi, cap, hints.get(), "caps");
	}
}
END_TEST

START_TEST(match_caps_implied_directions)
{
	// A provider that cannot initiate RMA writes.
	InfoPtr cap = make_cap();
	cap->caps &= ~FI_WRITE;
	cap->tx_attr->caps &= ~FI_WRITE;
	cap->rx_attr->caps &= ~FI_WRITE;
	InfoPtr hints = make_hints();
	// FI_RMA alone implies FI_WRITE ...
	hints->caps = FI_RMA;
	ck_reject(kApi, cap, hints.get(), "caps");
	// ... but not when the application names its directions.
	hints->caps = FI_RMA | FI_READ | FI_REMOTE_WRITE;
	ck_match(kApi, cap, hints.get());
	hints->caps = FI_RMA | FI_WRITE;
	ck_reject(kApi, cap, hints.get(), "caps");

	// On the transmit attributes FI_MSG implies the transmit direction
	// only: a context that cannot send is refused, receiving is not asked.
	InfoPtr cap2 = make_cap();
	cap2->tx_attr->caps &= ~FI_SEND;
	hints->caps = 0;
	hints->tx_attr->caps = FI_MSG;
	ck_reject(kApi, cap2, hints.get(), "tx_attr->caps");
	InfoPtr cap3 = make_cap();
	ck_assert_uint_eq(cap3->tx_attr->caps & FI_RECV, 0);
	ck_match(kApi, cap3, hints.get());
	// And the receive attributes: FI_RMA there asks for remote access.
	hints->tx_attr->caps = 0;
	hints->rx_attr->caps = FI_RMA;
	ck_match(kApi, cap3, hints.get());
	cap3->rx_attr->caps &= ~FI_REMOTE_WRITE;
	ck_reject(kApi, cap3, hints.get(), "rx_attr->caps");
}
END_TEST

START_TEST(match_tx_rx_caps)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->tx_attr->caps = FI_MSG | FI_RMA;
	hints->rx_attr->caps = FI_MSG | FI_RMA;
	ck_match(kApi, cap, hints.get());
	hints->tx_attr->caps = FI_TAGGED;
	ck_reject(kApi, cap, hints.get(), "tx_attr->caps");
	hints->tx_attr->caps = FI_MSG;
	hints->rx_attr->caps = FI_ATOMIC;
	ck_reject(kApi, cap, hints.get(), "rx_attr->caps");
}
END_TEST

START_TEST(match_required_mode)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	// A provider that requires nothing works for applications offering
	// any mode.
	hints->mode = FI_CONTEXT | FI_RX_CQ_DATA | abi::kLocalMr;
	ck_match(kApi, cap, hints.get());

	// A provider that requires FI_CONTEXT needs it in hints->mode.
	cap->mode = FI_CONTEXT;
	hints->mode = 0;
	ck_reject(kApi, cap, hints.get(), "mode");
	hints->mode = FI_RX_CQ_DATA;
	ck_reject(kApi, cap, hints.get(), "mode");
	hints->mode = FI_CONTEXT;
	ck_match(kApi, cap, hints.get());
}
END_TEST

START_TEST(match_domain_mode)
{
	// A domain mode bit (1.x's FI_RESTRICTED_COMP; 2.x headers define that
	// name as 0).
	constexpr uint64_t kDomainModeBit = 1ULL << 53;
	InfoPtr cap = make_cap();
	cap->domain_attr->mode = kDomainModeBit;
	InfoPtr hints = make_hints();
	ck_reject(kApi, cap, hints.get(), "domain_attr->mode");
	// Accepted either on the domain attributes or in the info's mode.
	hints->domain_attr->mode = kDomainModeBit;
	ck_match(kApi, cap, hints.get());
	hints->domain_attr->mode = 0;
	hints->mode = kDomainModeBit;
	ck_match(kApi, cap, hints.get());
}
END_TEST

START_TEST(match_addr_format)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->addr_format = FI_FORMAT_UNSPEC;
	ck_match(kApi, cap, hints.get());
	hints->addr_format = FI_SOCKADDR_IN;
	ck_match(kApi, cap, hints.get());
	hints->addr_format = FI_SOCKADDR_IN6;
	ck_reject(kApi, cap, hints.get(), "addr_format");
	hints->addr_format = FI_SOCKADDR_IB;
	ck_reject(kApi, cap, hints.get(), "addr_format");
	// FI_SOCKADDR: any sockaddr will do.
	hints->addr_format = FI_SOCKADDR;
	ck_match(kApi, cap, hints.get());
}
END_TEST

START_TEST(match_fabric_name)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->fabric_attr->name = strdup(kFabricName);
	ck_match(kApi, cap, hints.get());
	free(hints->fabric_attr->name);
	hints->fabric_attr->name = strdup("10.98.0.0/24");
	ck_reject(kApi, cap, hints.get(), "fabric_attr->name");
	free(hints->fabric_attr->name);
	hints->fabric_attr->name = strdup("10.99.0.0");
	ck_reject(kApi, cap, hints.get(), "fabric_attr->name");
}
END_TEST

START_TEST(match_domain_name)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->domain_attr->name = strdup(kDomainName);
	ck_match(kApi, cap, hints.get());
	free(hints->domain_attr->name);
	hints->domain_attr->name = strdup("mlx5_0");
	ck_reject(kApi, cap, hints.get(), "domain_attr->name");
	free(hints->domain_attr->name);
	hints->domain_attr->name = strdup("rxe");
	ck_reject(kApi, cap, hints.get(), "domain_attr->name");
}
END_TEST

START_TEST(match_ep_type)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->ep_attr->type = FI_EP_UNSPEC;
	ck_match(kApi, cap, hints.get());
	hints->ep_attr->type = FI_EP_MSG;
	ck_match(kApi, cap, hints.get());
	hints->ep_attr->type = FI_EP_RDM;
	ck_reject(kApi, cap, hints.get(), "ep_attr->type");
	hints->ep_attr->type = FI_EP_DGRAM;
	ck_reject(kApi, cap, hints.get(), "ep_attr->type");
}
END_TEST

START_TEST(match_protocol)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->ep_attr->protocol = FI_PROTO_RDMA_CM_IB_RC;
	hints->ep_attr->protocol_version = 1;
	ck_match(kApi, cap, hints.get());
	hints->ep_attr->protocol = FI_PROTO_IWARP;
	ck_reject(kApi, cap, hints.get(), "ep_attr->protocol");
	hints->ep_attr->protocol = FI_PROTO_SOCK_TCP;
	ck_reject(kApi, cap, hints.get(), "ep_attr->protocol");
	hints->ep_attr->protocol = FI_PROTO_UNSPEC;
	hints->ep_attr->protocol_version = 2;
	ck_reject(kApi, cap, hints.get(), "ep_attr->protocol_version");
}
END_TEST

START_TEST(match_ep_limits)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->ep_attr->max_msg_size = kMaxMsgSize;
	hints->ep_attr->max_order_raw_size = kMaxMsgSize;
	hints->ep_attr->max_order_waw_size = kMaxMsgSize;
	hints->ep_attr->tx_ctx_cnt = 1;
	hints->ep_attr->rx_ctx_cnt = 1;
	ck_match(kApi, cap, hints.get());

	hints->ep_attr->max_msg_size = kMaxMsgSize + 1;
	ck_reject(kApi, cap, hints.get(), "ep_attr->max_msg_size");
	hints->ep_attr->max_msg_size = 0;
	hints->ep_attr->msg_prefix_size = 8;
	ck_reject(kApi, cap, hints.get(), "ep_attr->msg_prefix_size");
	hints->ep_attr->msg_prefix_size = 0;
	hints->ep_attr->max_order_war_size = 1;
	ck_reject(kApi, cap, hints.get(), "ep_attr->max_order_*_size");
	hints->ep_attr->max_order_war_size = 0;
	hints->ep_attr->tx_ctx_cnt = 2;
	ck_reject(kApi, cap, hints.get(), "ep_attr->tx_ctx_cnt");
	hints->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
	ck_reject(kApi, cap, hints.get(), "ep_attr shared contexts");
	hints->ep_attr->tx_ctx_cnt = 1;
	hints->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	ck_reject(kApi, cap, hints.get(), "ep_attr shared contexts");
	hints->ep_attr->rx_ctx_cnt = 2;
	ck_reject(kApi, cap, hints.get(), "ep_attr->rx_ctx_cnt");
	hints->ep_attr->rx_ctx_cnt = 1;
	hints->ep_attr->auth_key_size = 16;
	ck_reject(kApi, cap, hints.get(), "ep_attr->auth_key_size");
}
END_TEST

START_TEST(match_tx_op_flags)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	const uint64_t ok[] = {0, FI_COMPLETION, FI_INJECT, FI_INJECT_COMPLETE,
			       FI_TRANSMIT_COMPLETE, kTxOpFlags};
	for (uint64_t flags : ok) {
		hints->tx_attr->op_flags = flags;
		ck_match(kApi, cap, hints.get());
	}
	const uint64_t bad[] = {FI_DELIVERY_COMPLETE, FI_COMMIT_COMPLETE, FI_MULTICAST,
				FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE};
	for (uint64_t flags : bad) {
		hints->tx_attr->op_flags = flags;
		ck_reject(kApi, cap, hints.get(), "tx_attr->op_flags");
	}
}
END_TEST

START_TEST(match_rx_op_flags)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->rx_attr->op_flags = FI_COMPLETION;
	ck_match(kApi, cap, hints.get());
	hints->rx_attr->op_flags = FI_MULTI_RECV;
	ck_reject(kApi, cap, hints.get(), "rx_attr->op_flags");
	hints->rx_attr->op_flags = FI_COMPLETION | FI_INJECT;
	ck_reject(kApi, cap, hints.get(), "rx_attr->op_flags");
}
END_TEST

START_TEST(match_msg_order)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->tx_attr->msg_order = kMsgOrder;
	hints->rx_attr->msg_order = FI_ORDER_SAS;
	ck_match(kApi, cap, hints.get());
	// RC does not promise that a later write overtakes no earlier read.
	hints->tx_attr->msg_order = FI_ORDER_WAR;
	ck_reject(kApi, cap, hints.get(), "tx_attr->msg_order");
	hints->tx_attr->msg_order = abi::kOrderStrict;
	ck_reject(kApi, cap, hints.get(), "tx_attr->msg_order");
	hints->tx_attr->msg_order = FI_ORDER_SAS;
	hints->rx_attr->msg_order = FI_ORDER_SAR;
	ck_reject(kApi, cap, hints.get(), "rx_attr->msg_order");
}
END_TEST

START_TEST(match_comp_order)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->tx_attr->comp_order = abi::kOrderStrict;
	hints->rx_attr->comp_order = abi::kOrderStrict | abi::kOrderData;
	ck_match(kApi, cap, hints.get());

	// A provider that orders no completions.
	cap->tx_attr->comp_order = abi::kOrderNone;
	cap->rx_attr->comp_order = abi::kOrderNone;
	ck_reject(kApi, cap, hints.get(), "tx_attr->comp_order");
	hints->tx_attr->comp_order = abi::kOrderNone;
	ck_reject(kApi, cap, hints.get(), "rx_attr->comp_order");
	hints->rx_attr->comp_order = abi::kOrderNone;
	ck_match(kApi, cap, hints.get());
}
END_TEST

START_TEST(match_tx_sizes)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->tx_attr->size = kQueueSize;
	hints->tx_attr->iov_limit = kIovLimit;
	hints->tx_attr->inject_size = kInjectSize;
	hints->tx_attr->rma_iov_limit = 1;
	ck_match(kApi, cap, hints.get());

	hints->tx_attr->size = kQueueSize + 1;
	ck_reject(kApi, cap, hints.get(), "tx_attr->size");
	hints->tx_attr->size = 128;
	hints->tx_attr->iov_limit = kIovLimit + 1;
	ck_reject(kApi, cap, hints.get(), "tx_attr->iov_limit");
	hints->tx_attr->iov_limit = 1;
	hints->tx_attr->inject_size = kInjectSize + 1;
	ck_reject(kApi, cap, hints.get(), "tx_attr->inject_size");
	hints->tx_attr->inject_size = 64;
	hints->tx_attr->rma_iov_limit = 2;
	ck_reject(kApi, cap, hints.get(), "tx_attr->rma_iov_limit");
}
END_TEST

START_TEST(match_rx_sizes)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->rx_attr->size = kQueueSize;
	hints->rx_attr->iov_limit = kIovLimit;
	ck_match(kApi, cap, hints.get());

	hints->rx_attr->size = kQueueSize + 1;
	ck_reject(kApi, cap, hints.get(), "rx_attr->size");
	hints->rx_attr->size = 128;
	hints->rx_attr->iov_limit = kIovLimit + 1;
	ck_reject(kApi, cap, hints.get(), "rx_attr->iov_limit");
	hints->rx_attr->iov_limit = 1;
	hints->rx_attr->total_buffered_recv = 4096;
	ck_reject(kApi, cap, hints.get(), "rx_attr->total_buffered_recv");
}
END_TEST

START_TEST(match_threading)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	const int levels[] = {FI_THREAD_UNSPEC, FI_THREAD_SAFE, FI_THREAD_FID, FI_THREAD_DOMAIN,
			      FI_THREAD_COMPLETION, FI_THREAD_ENDPOINT};
	for (int level : levels) {
		hints->domain_attr->threading = static_cast<fi_threading>(level);
		ck_match(kApi, cap, hints.get());
	}
	// A provider that needs the application to serialize per domain.
	cap->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	ck_reject(kApi, cap, hints.get(), "domain_attr->threading");
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	ck_match(kApi, cap, hints.get());
}
END_TEST

START_TEST(match_progress)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	ck_match(kApi, cap, hints.get());
	hints->domain_attr->control_progress = FI_PROGRESS_AUTO;
	hints->domain_attr->data_progress = FI_PROGRESS_AUTO;
	ck_match(kApi, cap, hints.get());

	// A manual-progress provider does not serve an application that
	// relies on automatic progress.
	cap->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	cap->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	ck_reject(kApi, cap, hints.get(), "domain_attr->control_progress");
	hints->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
	ck_reject(kApi, cap, hints.get(), "domain_attr->data_progress");
	hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	ck_match(kApi, cap, hints.get());
}
END_TEST

START_TEST(match_resource_mgmt)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
	ck_match(kApi, cap, hints.get());
	hints->domain_attr->resource_mgmt = FI_RM_DISABLED;
	ck_match(kApi, cap, hints.get());
	cap->domain_attr->resource_mgmt = FI_RM_DISABLED;
	hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
	ck_reject(kApi, cap, hints.get(), "domain_attr->resource_mgmt");
}
END_TEST

START_TEST(match_mr_mode)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	ck_match(kApi, cap, hints.get());

	// Missing a bit the provider needs.
	hints->domain_attr->mr_mode = kMrBasicMap;
	ck_reject(kApi, cap, hints.get(), "domain_attr->mr_mode");
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	ck_reject(kApi, cap, hints.get(), "domain_attr->mr_mode");
	// FI_LOCAL_MR does not stand in for FI_MR_LOCAL with current bits.
	hints->domain_attr->mr_mode = kMrBasicMap;
	hints->mode = abi::kLocalMr;
	ck_reject(kApi, cap, hints.get(), "domain_attr->mr_mode");
	hints->mode = 0;
	// FI_MR_UNSPEC supports nothing since API 1.5.
	hints->domain_attr->mr_mode = abi::kMrUnspec;
	ck_reject(kApi, cap, hints.get(), "domain_attr->mr_mode");
	// Scalable registration cannot work with provider keys.
	hints->domain_attr->mr_mode = abi::kMrScalable;
	hints->mode = abi::kLocalMr;
	ck_reject(kApi, cap, hints.get(), "domain_attr->mr_mode");
	ck_reject(kLegacyApi, cap, hints.get(), "domain_attr->mr_mode");
	// FI_MR_BASIC with FI_LOCAL_MR is this provider's mode in old words.
	hints->domain_attr->mr_mode = abi::kMrBasic;
	ck_match(kApi, cap, hints.get());
	ck_match(kLegacyApi, cap, hints.get());
	hints->mode = 0;
	ck_reject(kApi, cap, hints.get(), "domain_attr->mr_mode");
	ck_reject(kLegacyApi, cap, hints.get(), "domain_attr->mr_mode");
	// Before 1.5, FI_MR_UNSPEC is any mode (local registration accepted
	// through FI_LOCAL_MR).
	hints->domain_attr->mr_mode = abi::kMrUnspec;
	hints->mode = abi::kLocalMr;
	ck_match(kLegacyApi, cap, hints.get());
}
END_TEST

// Regression: FI_MR_UNSPEC before API 1.5 must still honour FI_MR_LOCAL.
// libfabric's ofi_check_mr_mode() rejects a provider that needs
// FI_MR_LOCAL before any version-specific rule unless the application set
// FI_LOCAL_MR in hints->mode (or FI_MR_LOCAL in mr_mode).
START_TEST(match_legacy_unspec_mr_mode_needs_local_mr)
{
	// A provider without FI_MR_LOCAL serves such an application.
	ck_assert(mr_mode_satisfies(kLegacyApi, kMrBasicMap, abi::kMrUnspec, 0));

	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->domain_attr->mr_mode = abi::kMrUnspec;
	hints->mode = FI_CONTEXT; // no FI_LOCAL_MR: buffers are not registered
	ck_assert_msg(!mr_mode_satisfies(kLegacyApi, kProvMrMode, abi::kMrUnspec, FI_CONTEXT),
		      "mr_mode_satisfies(1.4, FI_MR_LOCAL|..., FI_MR_UNSPEC, mode without "
		      "FI_LOCAL_MR) accepted a provider that needs local registration");
	ck_reject(kLegacyApi, cap, hints.get(), "domain_attr->mr_mode");
}
END_TEST

START_TEST(match_domain_limits)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->domain_attr->mr_key_size = 4;
	hints->domain_attr->cq_data_size = 4;
	hints->domain_attr->cq_cnt = kDevCount;
	hints->domain_attr->ep_cnt = kDevCount;
	hints->domain_attr->mr_iov_limit = 1;
	hints->domain_attr->max_ep_tx_ctx = 1;
	hints->domain_attr->caps = kCommCaps;
	ck_match(kApi, cap, hints.get());

	hints->domain_attr->mr_key_size = 8;
	ck_reject(kApi, cap, hints.get(), "domain_attr->mr_key_size");
	hints->domain_attr->mr_key_size = 4;
	hints->domain_attr->cq_data_size = 8;
	ck_reject(kApi, cap, hints.get(), "domain_attr->cq_data_size");
	hints->domain_attr->cq_data_size = 0;

	size_t fi_domain_attr::*limits[] = {
		&fi_domain_attr::cq_cnt,	 &fi_domain_attr::ep_cnt,
		&fi_domain_attr::tx_ctx_cnt,	 &fi_domain_attr::rx_ctx_cnt,
		&fi_domain_attr::max_ep_tx_ctx,	 &fi_domain_attr::max_ep_rx_ctx,
		&fi_domain_attr::max_ep_stx_ctx, &fi_domain_attr::max_ep_srx_ctx,
		&fi_domain_attr::cntr_cnt,	 &fi_domain_attr::mr_iov_limit,
		&fi_domain_attr::mr_cnt,	 &fi_domain_attr::max_err_data,
	};
	for (auto field : limits) {
		const size_t saved = hints->domain_attr->*field;
		hints->domain_attr->*field = cap->domain_attr->*field + 1;
		ck_reject(kApi, cap, hints.get(), "domain_attr limits");
		hints->domain_attr->*field = saved;
	}
	ck_match(kApi, cap, hints.get());

	hints->domain_attr->caps = FI_SHARED_AV;
	ck_reject(kApi, cap, hints.get(), "domain_attr->caps");
	hints->domain_attr->caps = 0;
	hints->domain_attr->auth_key_size = 16;
	ck_reject(kApi, cap, hints.get(), "domain_attr->auth_key_size");
}
END_TEST

// ---------------------------------------------------------------- real hints

START_TEST(rxm_hints_match_and_apply)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_rxm_hints();
	ck_match(kApi, cap, hints.get());

	InfoPtr out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->tx_attr->size, 128);
	ck_assert_uint_eq(out->rx_attr->size, 128);
	ck_assert_uint_eq(out->tx_attr->op_flags, FI_TRANSMIT_COMPLETE);
	ck_assert_uint_eq(out->rx_attr->op_flags, 0);
	// rxm accepts FI_RX_CQ_DATA, which the provider can use; FI_CONTEXT it
	// does not need.
	ck_assert_uint_eq(out->mode & FI_RX_CQ_DATA, FI_RX_CQ_DATA);
	ck_assert_uint_eq(out->rx_attr->mode & FI_RX_CQ_DATA, FI_RX_CQ_DATA);
	ck_assert_uint_eq(out->mode & FI_CONTEXT, 0);
	// Directions were named, so only those are granted (no FI_WRITE);
	// local/remote communication come along.
	ck_assert_uint_eq(out->caps, FI_MSG | FI_RMA | FI_READ | FI_REMOTE_READ | FI_REMOTE_WRITE |
					     FI_SEND | FI_RECV | kCommCaps);
	ck_assert_uint_eq(out->tx_attr->caps & ~out->caps, 0);
	ck_assert_uint_eq(out->rx_attr->caps & ~out->caps, 0);
	ck_assert_uint_eq(out->tx_attr->caps & (FI_MSG | FI_SEND | FI_RMA | FI_READ),
			  FI_MSG | FI_SEND | FI_RMA | FI_READ);
	ck_assert_int_eq(out->domain_attr->mr_mode, kProvMrMode);
	ck_assert_int_eq(out->domain_attr->threading, FI_THREAD_SAFE);
	ck_assert_int_eq(out->ep_attr->type, FI_EP_MSG);
	ck_assert_uint_eq(out->tx_attr->inject_size, kInjectSize);
	ck_assert_str_eq(out->domain_attr->name, kDomainName);
	ck_assert_str_eq(out->fabric_attr->name, kFabricName);
}
END_TEST

START_TEST(rxm_delivery_complete_rejected)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_rxm_hints();
	hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	ck_reject(kApi, cap, hints.get(), "tx_attr->op_flags");
}
END_TEST

START_TEST(pingpong_hints_match_and_apply)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_pingpong_hints();
	ck_match(kApi, cap, hints.get());

	InfoPtr out = applied(kApi, cap, hints.get());
	// FI_MSG implies both directions; local and remote communication are
	// kept since neither was named.
	ck_assert_uint_eq(out->caps, FI_MSG | FI_SEND | FI_RECV | kCommCaps);
	ck_assert_uint_eq(out->tx_attr->caps, FI_MSG | FI_SEND);
	ck_assert_uint_eq(out->rx_attr->caps, FI_MSG | FI_RECV);
	ck_assert_uint_eq(out->mode, 0);
	ck_assert_uint_eq(out->tx_attr->size, kDefaultTx);
	ck_assert_uint_eq(out->rx_attr->size, kDefaultRx);
	ck_assert_uint_eq(out->tx_attr->iov_limit, kDefaultIov);
	ck_assert_uint_eq(out->tx_attr->op_flags, 0);
	ck_assert_int_eq(out->domain_attr->mr_mode, kProvMrMode);
}
END_TEST

START_TEST(rdm_hints_rejected)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_pingpong_hints();
	hints->ep_attr->type = FI_EP_RDM;
	ck_reject(kApi, cap, hints.get(), "ep_attr->type");
	hints = make_rxm_hints();
	hints->ep_attr->type = FI_EP_RDM;
	ck_reject(kApi, cap, hints.get(), "ep_attr->type");
}
END_TEST

// ---------------------------------------------------------------- apply_hints

START_TEST(apply_without_hints)
{
	InfoPtr cap = make_cap();
	InfoPtr out = applied(kApi, cap, nullptr);
	ck_assert_uint_eq(out->caps, kCapCaps);
	ck_assert_uint_eq(out->mode, 0);
	ck_assert_uint_eq(out->tx_attr->size, kDefaultTx);
	ck_assert_uint_eq(out->rx_attr->size, kDefaultRx);
	ck_assert_uint_eq(out->tx_attr->iov_limit, kDefaultIov);
	ck_assert_uint_eq(out->rx_attr->iov_limit, kDefaultIov);
	// op_flags are the defaults applied to every operation, not the set of
	// supported flags.
	ck_assert_uint_eq(out->tx_attr->op_flags, 0);
	ck_assert_uint_eq(out->rx_attr->op_flags, 0);
	ck_assert_uint_eq(out->tx_attr->inject_size, kInjectSize);
	ck_assert_uint_eq(out->tx_attr->rma_iov_limit, 1);
	ck_assert_int_eq(out->domain_attr->mr_mode, kProvMrMode);
	ck_assert_int_eq(out->domain_attr->threading, FI_THREAD_SAFE);
}
END_TEST

START_TEST(apply_defaults_capped_by_device)
{
	InfoPtr cap = make_cap();
	cap->tx_attr->size = 100;
	cap->rx_attr->size = 200;
	cap->tx_attr->iov_limit = 2;
	cap->rx_attr->iov_limit = 3;
	InfoPtr out = applied(kApi, cap, nullptr);
	ck_assert_uint_eq(out->tx_attr->size, 100);
	ck_assert_uint_eq(out->rx_attr->size, 200);
	ck_assert_uint_eq(out->tx_attr->iov_limit, 2);
	ck_assert_uint_eq(out->rx_attr->iov_limit, 3);
}
END_TEST

START_TEST(apply_sizes_from_hints)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->tx_attr->size = 4096;
	hints->rx_attr->size = 2048;
	hints->tx_attr->iov_limit = 16;
	hints->rx_attr->iov_limit = kIovLimit;
	InfoPtr out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->tx_attr->size, 4096);
	ck_assert_uint_eq(out->rx_attr->size, 2048);
	ck_assert_uint_eq(out->tx_attr->iov_limit, 16);
	ck_assert_uint_eq(out->rx_attr->iov_limit, kIovLimit);

	// Nothing asked: the provider's defaults.
	hints = make_hints();
	out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->tx_attr->size, kDefaultTx);
	ck_assert_uint_eq(out->rx_attr->size, kDefaultRx);
	ck_assert_uint_eq(out->tx_attr->iov_limit, kDefaultIov);
	ck_assert_uint_eq(out->rx_attr->iov_limit, kDefaultIov);
}
END_TEST

START_TEST(apply_op_flags_from_hints)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->tx_attr->op_flags = FI_COMPLETION | FI_INJECT_COMPLETE;
	hints->rx_attr->op_flags = FI_COMPLETION;
	InfoPtr out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->tx_attr->op_flags, FI_COMPLETION | FI_INJECT_COMPLETE);
	ck_assert_uint_eq(out->rx_attr->op_flags, FI_COMPLETION);
}
END_TEST

START_TEST(apply_caps_narrowed)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->caps = FI_RMA;
	InfoPtr out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->caps, kRmaCaps | kCommCaps);
	ck_assert_uint_eq(out->tx_attr->caps, FI_RMA | FI_READ | FI_WRITE);
	ck_assert_uint_eq(out->rx_attr->caps, FI_RMA | FI_REMOTE_READ | FI_REMOTE_WRITE);

	// Naming one of local/remote communication keeps just that one.
	hints->caps = FI_MSG | FI_REMOTE_COMM;
	out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->caps, kMsgCaps | FI_REMOTE_COMM);

	// No caps in the hints: everything the provider has.
	hints->caps = 0;
	out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->caps, kCapCaps);
	ck_assert_uint_eq(out->tx_attr->caps, FI_MSG | FI_SEND | FI_RMA | FI_READ | FI_WRITE);
}
END_TEST

START_TEST(apply_tx_rx_caps)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->tx_attr->caps = FI_MSG;
	hints->rx_attr->caps = FI_RMA | FI_REMOTE_WRITE;
	InfoPtr out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->caps, kCapCaps);
	ck_assert_uint_eq(out->tx_attr->caps, FI_MSG | FI_SEND);
	ck_assert_uint_eq(out->rx_attr->caps, FI_RMA | FI_REMOTE_WRITE);
}
END_TEST

START_TEST(apply_optional_modes)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->mode = FI_RX_CQ_DATA | FI_CONTEXT;
	InfoPtr out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->mode, FI_RX_CQ_DATA);
	ck_assert_uint_eq(out->rx_attr->mode, FI_RX_CQ_DATA);

	// Not offered: not taken up.
	hints->mode = FI_CONTEXT;
	out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->mode, 0);
	ck_assert_uint_eq(out->rx_attr->mode, 0);

	// Offered, but the provider has no use for it.
	hints->mode = FI_RX_CQ_DATA;
	out.reset(fi_dupinfo(cap.get()));
	ck_assert_ptr_nonnull(out.get());
	apply_hints(kApi, *out, hints.get(), kDefaultTx, kDefaultRx, kDefaultIov, 0);
	ck_assert_uint_eq(out->mode, 0);
}
END_TEST

START_TEST(apply_order_narrowed)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->tx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_RAW;
	hints->rx_attr->msg_order = FI_ORDER_SAS;
	hints->tx_attr->comp_order = abi::kOrderStrict;
	InfoPtr out = applied(kApi, cap, hints.get());
	ck_assert_uint_eq(out->tx_attr->msg_order, FI_ORDER_SAS | FI_ORDER_RAW);
	ck_assert_uint_eq(out->rx_attr->msg_order, FI_ORDER_SAS);
	ck_assert_uint_eq(out->tx_attr->comp_order, abi::kOrderStrict);
	// Unspecified: what the provider offers.
	ck_assert_uint_eq(out->rx_attr->comp_order, kCompOrder);
}
END_TEST

START_TEST(apply_domain_attrs)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	InfoPtr out = applied(kApi, cap, hints.get());
	ck_assert_int_eq(out->domain_attr->threading, FI_THREAD_SAFE);
	ck_assert_int_eq(out->domain_attr->data_progress, FI_PROGRESS_AUTO);
	ck_assert_int_eq(out->domain_attr->resource_mgmt, FI_RM_ENABLED);

	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	hints->domain_attr->resource_mgmt = FI_RM_DISABLED;
	hints->domain_attr->av_type = FI_AV_MAP;
	out = applied(kApi, cap, hints.get());
	ck_assert_int_eq(out->domain_attr->threading, FI_THREAD_DOMAIN);
	ck_assert_int_eq(out->domain_attr->control_progress, FI_PROGRESS_MANUAL);
	ck_assert_int_eq(out->domain_attr->data_progress, FI_PROGRESS_MANUAL);
	ck_assert_int_eq(out->domain_attr->resource_mgmt, FI_RM_DISABLED);
	ck_assert_int_eq(out->domain_attr->av_type, FI_AV_MAP);
	ck_assert_uint_eq(out->domain_attr->mr_key_size, 4);
	ck_assert_uint_eq(out->domain_attr->cq_data_size, 4);
}
END_TEST

START_TEST(apply_mr_mode_spelling)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->domain_attr->mr_mode = kProvMrMode | FI_MR_RAW;
	InfoPtr out = applied(kApi, cap, hints.get());
	ck_assert_int_eq(out->domain_attr->mr_mode, kProvMrMode);

	// The application spoke the old words: answer in them.
	hints->domain_attr->mr_mode = abi::kMrBasic;
	hints->mode = abi::kLocalMr;
	out = applied(kApi, cap, hints.get());
	ck_assert_int_eq(out->domain_attr->mr_mode, abi::kMrBasic);
	out = applied(kLegacyApi, cap, hints.get());
	ck_assert_int_eq(out->domain_attr->mr_mode, abi::kMrBasic);
	hints->domain_attr->mr_mode = abi::kMrUnspec;
	out = applied(kLegacyApi, cap, hints.get());
	ck_assert_int_eq(out->domain_attr->mr_mode, abi::kMrBasic);

	// A provider without mode bits (scalable keys) asked in the legacy
	// FI_MR_SCALABLE: answered FI_MR_SCALABLE; provider modes are refused.
	hints->mode = 0;
	hints->domain_attr->mr_mode = abi::kMrScalable;
	ck_reject(kLegacyApi, cap, hints.get(), "domain_attr->mr_mode");
	cap->domain_attr->mr_mode = 0;
	for (uint32_t api : {kLegacyApi, kApi}) {
		ck_match(api, cap, hints.get());
		out = applied(api, cap, hints.get());
		ck_assert_int_eq(out->domain_attr->mr_mode, abi::kMrScalable);
	}
	hints->domain_attr->mr_mode = abi::kMrUnspec;
	out = applied(kApi, cap, hints.get());
	ck_assert_int_eq(out->domain_attr->mr_mode, 0);
}
END_TEST

// Regression: when apply_hints() answers in FI_MR_BASIC, which has no local
// bit, the only legacy way to say "local buffers must be registered" is
// FI_LOCAL_MR in info->mode. libfabric's ofi_alter_info() sets FI_LOCAL_MR in mode when
// the provider's mr_mode has FI_MR_LOCAL and the API is < 1.5 or the hints
// used FI_MR_BASIC / FI_MR_SCALABLE.
START_TEST(apply_legacy_basic_reports_local_mr)
{
	InfoPtr cap = make_cap();
	InfoPtr hints = make_hints();
	hints->mode = abi::kLocalMr;

	hints->domain_attr->mr_mode = abi::kMrBasic;
	ck_match(kApi, cap, hints.get());
	InfoPtr out = applied(kApi, cap, hints.get());
	ck_assert_int_eq(out->domain_attr->mr_mode, abi::kMrBasic);
	ck_assert_msg(out->mode & abi::kLocalMr,
		      "FI_MR_BASIC answer (API 1.17) without FI_LOCAL_MR in mode: "
		      "the application will not register local buffers");

	hints->domain_attr->mr_mode = abi::kMrUnspec;
	ck_match(kLegacyApi, cap, hints.get());
	out = applied(kLegacyApi, cap, hints.get());
	ck_assert_int_eq(out->domain_attr->mr_mode, abi::kMrBasic);
	ck_assert_msg(out->mode & abi::kLocalMr,
		      "FI_MR_BASIC answer (API 1.4) without FI_LOCAL_MR in mode: "
		      "the application will not register local buffers");
}
END_TEST

Suite *info_match_suite()
{
	Suite *s = suite_create("info_match");

	TCase *tc = tcase_create("helpers");
	tcase_add_test(tc, expand_caps_msg_directions);
	tcase_add_test(tc, expand_caps_rma_directions);
	tcase_add_test(tc, expand_caps_per_context);
	tcase_add_test(tc, expand_caps_leaves_other_bits);
	tcase_add_test(tc, threading_stronger_serves_weaker);
	tcase_add_test(tc, progress_auto_serves_manual);
	tcase_add_test(tc, mr_mode_current_bits);
	tcase_add_test(tc, mr_mode_unspec_by_version);
	tcase_add_test(tc, mr_mode_basic_legacy_spelling);
	tcase_add_test(tc, mr_mode_scalable);
	suite_add_tcase(s, tc);

	tc = tcase_create("hints_match");
	tcase_add_test(tc, match_no_or_minimal_hints);
	tcase_add_test(tc, match_caps);
	tcase_add_test(tc, match_caps_implied_directions);
	tcase_add_test(tc, match_tx_rx_caps);
	tcase_add_test(tc, match_required_mode);
	tcase_add_test(tc, match_domain_mode);
	tcase_add_test(tc, match_addr_format);
	tcase_add_test(tc, match_fabric_name);
	tcase_add_test(tc, match_domain_name);
	tcase_add_test(tc, match_ep_type);
	tcase_add_test(tc, match_protocol);
	tcase_add_test(tc, match_ep_limits);
	tcase_add_test(tc, match_tx_op_flags);
	tcase_add_test(tc, match_rx_op_flags);
	tcase_add_test(tc, match_msg_order);
	tcase_add_test(tc, match_comp_order);
	tcase_add_test(tc, match_tx_sizes);
	tcase_add_test(tc, match_rx_sizes);
	tcase_add_test(tc, match_threading);
	tcase_add_test(tc, match_progress);
	tcase_add_test(tc, match_resource_mgmt);
	tcase_add_test(tc, match_mr_mode);
	tcase_add_test(tc, match_legacy_unspec_mr_mode_needs_local_mr);
	tcase_add_test(tc, match_domain_limits);
	suite_add_tcase(s, tc);

	tc = tcase_create("real_hints");
	tcase_add_test(tc, rxm_hints_match_and_apply);
	tcase_add_test(tc, rxm_delivery_complete_rejected);
	tcase_add_test(tc, pingpong_hints_match_and_apply);
	tcase_add_test(tc, rdm_hints_rejected);
	suite_add_tcase(s, tc);

	tc = tcase_create("apply_hints");
	tcase_add_test(tc, apply_without_hints);
	tcase_add_test(tc, apply_defaults_capped_by_device);
	tcase_add_test(tc, apply_sizes_from_hints);
	tcase_add_test(tc, apply_op_flags_from_hints);
	tcase_add_test(tc, apply_caps_narrowed);
	tcase_add_test(tc, apply_tx_rx_caps);
	tcase_add_test(tc, apply_optional_modes);
	tcase_add_test(tc, apply_order_narrowed);
	tcase_add_test(tc, apply_domain_attrs);
	tcase_add_test(tc, apply_mr_mode_spelling);
	tcase_add_test(tc, apply_legacy_basic_reports_local_mr);
	suite_add_tcase(s, tc);
	return s;
}
