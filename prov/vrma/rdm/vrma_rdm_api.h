// The RDM endpoint as the rest of the provider sees it: what it offers
// (fi_getinfo), its parameters (FI_VRMA_RDM_*), its entry points, and the
// marks its requests leave in shared send slots. Its types are in
// vrma_rdm.h, which only the RDM files include.
#pragma once

#include "vrma_base.h"
#include "atomic_ops.h"
#include "wire/rdm_wire.h"

namespace vrma {

struct Conn;
struct Domain;

// What the RDM endpoint offers. RMA needs the application's registrations
// named by device keys at virtual addresses (kRdmRmaMrMode): offered only
// to applications that take that mode on.
inline constexpr uint64_t kRdmMsgCaps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV |
					FI_MULTI_RECV | FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;
// FI_RMA_PMEM: offered only when asked for (vrma_info.cpp).
inline constexpr uint64_t kRdmRmaCaps = FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ |
					FI_REMOTE_WRITE | FI_RMA_EVENT | FI_FENCE | FI_RMA_PMEM;
inline constexpr uint64_t kRdmCaps = kRdmMsgCaps | kRdmRmaCaps;
inline constexpr int kRdmRmaMrMode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
// FI_COMMIT_COMPLETE as a default: RMA writes only (getinfo offers it only
// without messages).
inline constexpr uint64_t kRdmTxOpFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
					  FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE |
					  FI_COMMIT_COMPLETE;
inline constexpr uint64_t kRdmRxOpFlags = FI_COMPLETION | FI_MULTI_RECV;
// One RC connection per peer keeps the order of sends and RMA between two
// endpoints, and a rendezvous message completes its receive before any
// later message of the peer is matched (matching is in arrival order).
// RMA among RMA: RAR, RAW, WAW (an RDMA WRITE may pass an earlier READ's
// data: no WAR).
inline constexpr uint64_t kRdmMsgOrder = FI_ORDER_SAS | FI_ORDER_SAW | FI_ORDER_WAS |
					 FI_ORDER_RAS | FI_ORDER_RMA_RAR | FI_ORDER_RMA_RAW |
					 FI_ORDER_RMA_WAW;
// Emulated atomics run in the target's arrival order: ordered among
// themselves. Not with native atomics, where the device applies 64-bit
// ones on arrival and the target's progress the others later.
inline constexpr uint64_t kRdmAtomicOrder = FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW |
					    FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW;
// RAR, RAW and WAW order RMA and atomics together, which emulated atomics
// do not give (the target applies one after RMA that arrived later):
// offered only to applications that ask for RMA without atomics.
inline constexpr uint64_t kRdmRmaAtomicOrder = FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_WAW;
inline constexpr size_t kRdmCqDataSize = 8; // the header carries 64 bits
// Scatter entries of a send or receive: a rendezvous request names at most
// this many of the sender's segments.
inline constexpr size_t kRdmIovLimit = rdm::kMaxRndvSegments;
// Largest message: a rendezvous registration is one ibv MR per segment.
inline constexpr size_t kRdmMaxMsg = size_t(1) << 31;

// Parameters (FI_VRMA_RDM_*), read at fi_prov_ini (vrma_init.cpp).
struct RdmParams {
	// Payload bytes sent eagerly; longer: rendezvous. 16 KiB, not less: a
	// lost packet of a SEND is NAKed and resent at once, a lost READ
	// response waits for the requester's ACK timeout (rxe asks again only
	// then), so on a lossy link the smallest rendezvous costs most. Costs
	// the SRQ and send buffers (rx_buffers + tx_buffers) x 16 KiB pinned.
	size_t eager_size = 16384;
	size_t rx_buffers = 256;   // SRQ buffers per endpoint
	size_t tx_buffers = 256;   // registered eager send buffers per endpoint
	size_t peer_tx_size = kRdmPeerTxSizeDefault; // send queue depth per peer (capacity.h)
	// Bytes a peer's connection sends inline at most (below the device's
	// and FI_VRMA_INLINE_SIZE): the inline area is part of every send
	// queue entry, so it is paid for per peer, however small the sends.
	size_t peer_inline_size = 256;
	size_t rndv_reads = 8;     // READs in flight per connection (0: max_rd_atomic)
	size_t rndv_read_size = size_t(16) << 10; // bytes per rendezvous READ at most
	size_t mr_keys = 4096;     // scalable keys a domain publishes (key_table.h)
	bool native_atomics = false; // (U)INT64 SUM, READ, CSWAP as device atomics
	size_t mr_on_demand = size_t(1) << 20; // Domain::on_demand_min (0: off)
};
extern RdmParams rdm_params;
// FI_VRMA_RDM_UNEXPECTED_MAX: bytes of unexpected messages an endpoint keeps
// before it pauses their senders (src/rx_budget.h); read at each
// fi_endpoint (and fi_getinfo, for rx_attr->total_buffered_recv), so that
// one process may open endpoints with different limits. Never 0.
inline constexpr size_t kRdmUnexpectedMaxDefault = size_t(64) << 20;
size_t rdm_unexpected_max() noexcept;
// FI_VRMA_RDM_DRAIN_TIMEOUT: ms a connection's sends may make no progress
// (the peer takes none of them: it posts no receive buffers, or is gone)
// before the connection fails with FI_ETIMEDOUT and gives back what they
// hold; 0: never. Read at each fi_endpoint.
inline constexpr int64_t kRdmDrainTimeoutDefaultMs = 300000;
inline constexpr int64_t kRdmConnectTimeoutDefaultMs = 60000;
int64_t rdm_drain_timeout_ms() noexcept;
int64_t rdm_connect_timeout_ms() noexcept;
// FI_VRMA_RDM_IDLE_TIMEOUT: ms a connection may go unused before the
// endpoint asks its peer to close it (rdm_wire.h's Idle); 0 (the default):
// never. Read at each fi_endpoint.
int64_t rdm_idle_timeout_ms() noexcept;
// FI_VRMA_RDM_MAX_PEERS: peers an endpoint's table holds at most
// (src/peer_limit.h; at least 2); read at each fi_endpoint.
inline constexpr size_t kRdmMaxPeersDefault = 8192;
size_t rdm_max_peers() noexcept;

// TxSlot::aux of an RDM request: what it is (the top byte) and the send
// buffer it holds (index + 1 in the low 24 bits, 0: none).
enum class RdmTx : uint8_t {
	App = 0,      // an application send: its completion is the operation's
	Internal = 1, // vrma's own message (answers): no completion
	RndvReq = 2,  // a rendezvous request: context is the RdmTxOp
	RndvRead = 3, // an RDMA READ of a rendezvous receive: context is the RdmRxOp
	// A request of an operation the peer's answer completes (an eager send
	// with FI_DELIVERY_COMPLETE, an RMA write with FI_COMMIT_COMPLETE):
	// context is the msg_id of its RdmTxOp in RdmPeer::waiting; only an
	// error completion ends the operation.
	Awaited = 4,
	RmaOp = 5,    // an RMA operation holding registrations: context is the RdmRmaOp
	KeyRead = 6,  // a READ of a peer's key bucket: context is the RdmKeyRead
	AtomicNative = 7, // a device atomic of an operation: context is the RdmAtomicOp
};
inline constexpr uint32_t rdm_aux(RdmTx kind, uint32_t buf_plus1) noexcept
{
	return static_cast<uint32_t>(kind) << 24 | buf_plus1;
}
inline RdmTx rdm_aux_kind(uint32_t aux) noexcept { return static_cast<RdmTx>(aux >> 24); }
// vrma_rdm_ep.cpp: fi_endpoint of an FI_EP_RDM info.
int rdm_ep_open(fid_domain *domain, fi_info *info, fid_ep **ep, void *context) noexcept;

// vrma_rdm_persist.cpp: the persist worker of RDM commit requests.
// Stops the domain's worker (its endpoints are closed).
void rdm_persist_stop(Domain *dom) noexcept;

// vrma_rdm_atomic.cpp
// The largest element count of an atomic of this kind, op and datatype on an
// RDM endpoint (0: not offered). native: rdm_params.native_atomics in effect.
size_t rdm_atomic_max(atomic::Kind kind, int op, int datatype, bool native,
		      size_t eager_size) noexcept;

// vrma_rdm_msg.cpp
// Requests of an RDM connection accepted but never posted (a held-back
// FI_MORE chain whose post failed): one error per operation.
void rdm_report_unposted(Conn *conn, const ibv_send_wr *first, int err) noexcept;

} // namespace vrma
