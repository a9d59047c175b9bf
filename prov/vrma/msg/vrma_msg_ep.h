// The MSG endpoint (Ep), its passive endpoint (Pep) and connection
// requests: vrma_msg_ep.cpp, vrma_msg_cm.cpp, vrma_msg_sendrecv.cpp, vrma_msg_rma.cpp,
// vrma_msg_staged.cpp, vrma_msg_pmem.cpp.
//
// Serialization model (locks, order, threads): vrma_progress.h, once for
// the whole provider.
#pragma once

#include "vrma_conn.h"
#include "vrma_ep_base.h"
#include "vrma_eq.h"

#include <array>

namespace vrma {

// An application receive on an endpoint with staged receives, waiting in
// vrma's queue (the device's receive queue holds staging buffers).
struct StagedRecv {
	void *context = nullptr;
	iovec iov[kMaxSge];
	size_t count = 0;
	size_t capacity = 0; // bytes of iov
	bool report = true;
	Cntr *cntr = nullptr;
};

// A piece that arrived in a staging buffer, not yet copied out.
struct StagedArrival {
	uint8_t *buf;
	uint32_t len;
};

// An endpoint's staging buffers: `count` of wire::kStageBytes, one
// registration (staged_ep_prepare).
struct StagingBuffers {
	std::unique_ptr<uint8_t[]> buffers;
	MrPtr mr;
	size_t count = 0;
	std::vector<uint8_t *> unposted; // staging buffers a repost failed for
};

// Receive side of staged messages (all under the endpoint's rx lock).
// Pieces are consumed strictly in arrival order; a message is matched to
// the oldest posted receive when its first piece is consumed.
struct StagedRx {
	StagingBuffers stage;
	std::deque<StagedRecv> posted;
	std::deque<StagedArrival> arrivals;
	// The message being copied into `cur`.
	bool active = false;
	StagedRecv cur;
	uint64_t total = 0; // payload bytes the header announced
	uint64_t seen = 0;  // payload bytes arrived so far
	bool has_data = false;
	uint32_t data = 0;
	uint8_t confirm_flags = 0; // wire::kMsgConfirm / kMsgPersist of `cur`'s message
	uint8_t confirm_id = 0;
	bool cancelled = false; // the connection died: receives fail at once
	// Bytes of the message being received still to arrive in later pieces
	// (the poller's view of the stream, ahead of matching): a piece
	// arriving when it is 0 starts a message or is a provider message
	// (commit request, RMA event), told apart by its first byte. A
	// message's pieces are posted as one chain, so nothing comes between.
	uint64_t stream_left = 0;
};

// One FI_COMMIT_COMPLETE operation waiting for the target's answer.
struct PendingCommit {
	bool busy = false;
	uint32_t id = 0; // 24 bits on the wire; index = id % kMaxCommits
	void *context = nullptr;
	size_t len = 0;
	Cntr *cntr = nullptr;
	bool report = false;
	// A message sent with FI_DELIVERY_COMPLETE or FI_COMMIT_COMPLETE,
	// waiting for the peer's confirmation (wire::confirm_reply_imm).
	bool confirm = false;
};

// State of an FI_RMA_PMEM or FI_RMA_EVENT endpoint, or of a message
// endpoint opened with delivery or commit completion (uses_service). Its receive queue is
// vrma's own and completes into the domain's service CQ, whose thread
// answers commit requests and counts RMA events (target) and completes
// answered commits (initiator).
struct ServiceEp {
	CheckedMutex lock; // the commits table (a leaf lock)
	PendingCommit commits[kMaxCommits];
	uint32_t next_id = 0;
	size_t max_commits = kMaxCommits;
	// Request messages, one buffer per commits[] entry.
	std::unique_ptr<uint8_t[]> req_buf;
	MrPtr req_mr;
	// Receive buffers, one per receive queue entry (seq % rx_depth).
	std::unique_ptr<uint8_t[]> rx_buf;
	MrPtr rx_mr;
	std::atomic<bool> cancel{false}; // the connection died: fail what waits
};

// How an MSG endpoint's receive queue is fed, fixed at fi_endpoint from
// its caps, mode and op flags (msg_rx_mode). It picks the endpoint's
// message ops table (msg_ops_for): no receive call tests it.
enum class RxMode : uint8_t {
	// fi_recv posts the application's buffers to the device. Remote CQ
	// data consumes one (the application took on FI_RX_CQ_DATA) or is
	// refused to the peer (kCmFlagTakesCqData unset).
	AppBuffers,
	// No messages are received: vrma keeps zero-length receives posted
	// for remote CQ data (an RMA-only endpoint without FI_RX_CQ_DATA).
	ZeroLength,
	// No messages are received: vrma's buffers (ServiceEp::rx_buf) take
	// commit requests, RMA events and answers, on the domain's service CQ.
	Service,
	// Messages arrive in vrma's staging buffers and are copied into the
	// receives fi_recv queues (StagedRx); a service endpoint's messages
	// (Ep::service set) arrive there too.
	Staged,
};
// The receive mode of an endpoint with these caps, mode bits (FI_RX_CQ_DATA)
// and transmit op flags.
inline RxMode msg_rx_mode(uint64_t caps, uint64_t mode, uint64_t tx_op_flags) noexcept
{
	if (uses_staged_rx(caps, mode, tx_op_flags))
		return RxMode::Staged;
	if (uses_service(caps, tx_op_flags))
		return RxMode::Service;
	if (!(mode & FI_RX_CQ_DATA) && !(caps & (FI_MSG | FI_RECV)))
		return RxMode::ZeroLength;
	return RxMode::AppBuffers;
}

// How the peer takes this side's messages, fixed when the connection is
// made (msg_set_peer_flags) from the wire::kCmFlag* it announced.
enum class PeerRx : uint8_t {
	Unknown,    // not connected yet: sends take the long way (and fail there)
	AppBuffers, // one send per message, into a receive its device matches
	Staged,     // a wire::MsgHeader and pieces into its staging buffers
};

// A MSG endpoint: EpBase (CQs, counters, op flags) and its one connection.
struct Ep final : EpBase {
	Conn conn; // the endpoint's one connection
	Cq *own_cq = nullptr; // created when only counters are bound
	Eq *eq = nullptr;
	bool addr_resolved = false;
	bool passive_side = false; // created from a connection request
	// FI_SHUTDOWN was queued for the endpoint: it gets one when its
	// connection ends, whichever side or failure ended it
	// (report_shutdown, vrma_msg_cm.cpp).
	std::atomic<bool> shutdown_reported{false};
	// In Eq::lingering until then (under the EQ lock).
	std::chrono::steady_clock::time_point linger_until{};
	// fi_shutdown sent the disconnect request; the peer's answer (or the
	// CM giving up) arrived: fi_close waits for it (kLingerMs).
	std::atomic<bool> disconnect_sent{false}, disconnect_answered{false};
	uint8_t responder_resources = 0;
	uint8_t initiator_depth = 0;

	bool sends_messages = false; // FI_MSG with FI_SEND (or no direction)
	size_t rx_depth = 0;
	// Receives posted before post_recv_locked takes the long way: rx_depth,
	// or 0 when the receive queue is credited (rx_credits).
	size_t rx_post_limit = 0;
	// The receive CQ whose credit pool receives are posted from (nullptr:
	// the whole queue is reserved), vrma's own receives included.
	Cq *rx_credits = nullptr;
	// vrma's own receives (RxMode other than AppBuffers) left unposted
	// for want of a credit; reposted when the endpoint's requests complete
	// (ep_repost_own_rx) or, staged, at the next fi_recv.
	std::atomic<size_t> own_rx_unposted{0};
	size_t rx_iov_limit = 0;
	RxMode rx_mode = RxMode::AppBuffers;
	// The application took on FI_RX_CQ_DATA (RxMode::AppBuffers only).
	bool rx_cq_data_mode = false;
	// Written once before the connection is announced (Connected);
	// read relaxed by the send fast path, which takes the long way on
	// anything but AppBuffers.
	std::atomic<PeerRx> peer_rx{PeerRx::Unknown};
	// RxMode::Staged: the staging buffers and queued receives, set up at
	// fi_enable.
	std::unique_ptr<StagedRx> staged;
	// FI_RMA_PMEM / FI_RMA_EVENT: commit and event messages share vrma's
	// receive queue, which the domain's service polls.
	std::unique_ptr<ServiceEp> service;
	Cq *service_cq = nullptr; // the receive CQ then (the domain's service's)

	CheckedMutex rx_lock;
	SlotRing<RxSlot> rx;
};

// EpBase::fast_plain and fast_report of a MSG endpoint: rma_fast and
// send_fast post one request for these flags.
inline void msg_set_fast_tx(Ep *ep) noexcept
{
	ep_set_fast_tx(ep, FI_COMPLETION | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE);
}

// The CQs the QP's queues complete into: the bound one, the other direction's
// when only one is bound, or the endpoint's own when only counters are.
// fi_enable asks with the CQ it opened for the endpoint, before the
// endpoint holds it.
inline Cq *send_cq_of(const Ep *ep, Cq *own_cq) noexcept
{
	return ep->tx_cq ? ep->tx_cq : ep->rx_cq ? ep->rx_cq : own_cq;
}

inline Cq *recv_cq_of(const Ep *ep, Cq *own_cq) noexcept
{
	if (ep->service_cq)
		return ep->service_cq;
	return ep->rx_cq ? ep->rx_cq : ep->tx_cq ? ep->tx_cq : own_cq;
}

inline Cq *send_cq_of(const Ep *ep) noexcept
{
	return send_cq_of(ep, ep->own_cq);
}

inline Cq *recv_cq_of(const Ep *ep) noexcept
{
	return recv_cq_of(ep, ep->own_cq);
}

struct Pep final : fid_pep {
	using FidType = fid_pep;
	Fabric *fabric = nullptr;
	FiInfoPtr info;
	CmIdPtr id;
	Eq *eq = nullptr;
	sockaddr_storage src{};
	socklen_t src_len = 0;
	bool listening = false;
};

// f as a vrma passive endpoint, or nullptr (another class or provider).
const Pep *as_vrma_pep(const fid *f) noexcept;

// The handle of a connection request (fi_info::handle of FI_CONNREQ).
struct ConnReq final : fid {
	using FidType = fid;
	rdma_cm_id *id = nullptr; // owned until fi_endpoint or fi_reject takes it
	uint8_t responder_resources = 0;
	uint8_t initiator_depth = 0;
	uint8_t peer_cm_flags = 0; // wire::kCmFlag* the requester offers
};

// vrma_msg_cm.cpp
extern const fi_ops_cm ep_cm_ops;
// CM private data: vrma's header (with the sender's wire::kCmFlag*) in front
// of the application's CM data; 0 or -FI_EINVAL (logged).
using PrivateData = std::array<uint8_t, wire::kCmPrivateDataMax>;
int build_private_data(const void *param, size_t len, uint8_t flags, PrivateData &out,
		       uint8_t &out_len);
// fi_getname's copy of an address (-FI_ETOOSMALL with the length needed).
int copy_name(const sockaddr *sa, void *addr, size_t *addrlen);
// fi_setname's address as a sockaddr_in/in6 of addrlen bytes, or nullptr
// (one warning).
const sockaddr *setname_addr(const void *addr, size_t addrlen);
// Handles one rdma_cm event for the EQ (called with eq->lock held). Returns
// an id to destroy once the event was acked (a refused connection request).
rdma_cm_id *eq_handle_cm_event(Eq *eq, rdma_cm_event *event) noexcept;
// How long an endpoint whose peer ended the connection waits for its own
// sends in flight (Eq::lingering), and so at most how long the peer's
// fi_close waits for the answer to its fi_shutdown. Ample for an ACK on a
// working fabric (and a retransmission or two); far below the seconds
// after which a CM repeats a disconnect request nobody answered.
inline constexpr int kLingerMs = 500;
// Ends the lingering connections (Eq::lingering) whose sends completed or
// whose deadline passed; the EQ lock held.
void eq_linger_check(Eq *eq) noexcept;
// Forgets a closing endpoint (the EQ lock held): fi_close ends it.
void eq_linger_forget(Eq *eq, Ep *ep) noexcept;
// A work request failed (not flushed): the QP is dead. Reports FI_SHUTDOWN
// on the endpoint's EQ once and disconnects.
void ep_connection_failed(Ep *ep) noexcept;
int ep_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen) noexcept;
int ep_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen) noexcept;

// vrma_msg_ep.cpp
int ep_enable(Ep *ep) noexcept;
// Posts one of vrma's own receives of RxMode::ZeroLength (no buffer) or
// RxMode::Service (a commit message buffer).
int ep_post_own_rx(Ep *ep) noexcept;
// Posts vrma's own receives left unposted for want of credits (staging
// buffers, zero-length or service receives) while credits last; takes the
// rx lock.
void ep_repost_own_rx(Ep *ep) noexcept;
// Moves the QP to the error state so that outstanding requests flush.
void ep_set_error(Ep *ep) noexcept;
// Ends a connected endpoint's connection: rdma_disconnect's request to the
// peer, the QP left in RTS (it goes to the error state, and outstanding
// requests flush, at RDMA_CM_EVENT_DISCONNECTED). Returns rdma_disconnect's
// result, errno set.
int ep_disconnect(Ep *ep) noexcept;
// The connection ended (fi_shutdown, the peer disconnected, a request
// failed, the device went): what FI_MORE held back is posted into the error
// state, so that each operation ends like every posted one, with one
// FI_ECANCELED flush reported and counted by the CQ poller. Needs no tx
// lock (the EQ thread, a CQ poller) and reports nothing itself; what the
// device refuses stays held for the next transmit call to report.
void ep_cancel_held(Ep *ep) noexcept;

// vrma_msg_pmem.cpp: FI_RMA_PMEM endpoints and the domain's commit service.
// An endpoint attached to its domain's commit service, with its commit
// message buffers (pmem_ep_enable). Destruction detaches it and frees the
// buffers unless release()d; the endpoint's QP must be gone by then.
class PmemAttachment {
public:
	PmemAttachment() = default;
	PmemAttachment(const PmemAttachment &) = delete;
	PmemAttachment &operator=(const PmemAttachment &) = delete;
	~PmemAttachment();
	void hold(Ep *ep) noexcept { ep_ = ep; }
	void release() noexcept { ep_ = nullptr; }

private:
	Ep *ep_ = nullptr;
};
// Sets up an FI_RMA_PMEM endpoint at fi_enable, all or nothing: its commit
// message buffers, the domain's service (started by the first endpoint) and
// the service CQ as its receive CQ (Ep::service_cq), held by `attachment`.
// 0 or a negative FI_E* code.
int pmem_ep_enable(Ep *ep, PmemAttachment &attachment) noexcept;
// At close, before draining: the service forgets the endpoint's work.
void pmem_ep_quiesce(Ep *ep) noexcept;
// At close, after the QP is gone: the last endpoint stops the service.
void pmem_ep_detach(Ep *ep) noexcept;
// A successful completion of one of vrma's receives on a service endpoint
// without staged receives (buf: the message, copied before the receive is
// reposted).
void pmem_rx_completion(Ep *ep, const ibv_wc &wc, const void *buf) noexcept;
// A provider message (commit request, RMA event) received into one of vrma's
// buffers: counted, or copied into a job for the service thread.
void pmem_control_message(Ep *ep, const uint8_t *msg, size_t len) noexcept;
// A zero-length send with immediate data on a service endpoint: the answer
// to one of its commits or confirmed messages, which completes now.
void pmem_answer(Ep *ep, uint32_t imm) noexcept;
// Reserves a pending confirmation for a message sent with delivery or
// commit completion to a wire::kCmFlagConfirmsMsgs peer; returns its id + 1
// (TxSlot::commit; the low 8 bits of the id go in the MsgHeader), or
// -FI_EAGAIN.
int pmem_begin_confirm(Ep *ep, void *context, size_t len, Cntr *cntr, bool report) noexcept;
// A message marked wire::kMsgConfirm was copied (len bytes) into the
// application's receive `iov`: the service thread answers it, after making
// those bytes durable when `persist`. Any thread, any lock (the job queue is
// a leaf).
void pmem_confirm_received(Ep *ep, uint8_t id, bool persist, const iovec *iov, size_t count,
			   size_t len) noexcept;
// An error of a commit operation's request: true if the operation was
// still pending (the caller reports the error), false if already done.
bool pmem_claim_commit(Ep *ep, uint32_t commit) noexcept;
// The connection died: pending commits fail (done by the service thread).
void pmem_connection_lost(Ep *ep) noexcept;
// fi_vrma_commit_method of this endpoint's writes to its peer.
int pmem_commit_method(const Ep *ep) noexcept;
// Reserves a pending commit and writes its request (remote segments
// written by the operation); returns its id + 1 (TxSlot::commit), or a
// negative FI_E* code.
int pmem_begin_commit(Ep *ep, const wire::CommitRange *ranges, size_t n, void *context,
		      size_t len, Cntr *cntr, bool report, ibv_sge &request) noexcept;
// Whether commits wait for their answer (an FI_FENCE must wait for them).
bool pmem_commits_pending(Ep *ep) noexcept;
// Releases a commit whose requests were never posted.
void pmem_abort_commit(Ep *ep, uint32_t commit) noexcept;

// vrma_msg_staged.cpp: staged receives (uses_staged_rx).
// The staging buffers an endpoint keeps posted.
size_t staged_buffer_count(const Ep *ep) noexcept;
// fi_enable: allocates and registers the staging buffers into `out`; 0 or
// a negative FI_E* code (-FI_ENOMEM when the registration is refused).
// `credited`: the receive queue is credited (own_rx_limit).
int staged_ep_prepare(Ep *ep, StagingBuffers &out, bool credited) noexcept;
// fi_enable, the endpoint holding its QP and staging buffers: posts every
// staging buffer; -FI_ENOMEM when none could be posted.
int staged_ep_post(Ep *ep) noexcept;
// Posts the staging buffers a repost left unposted (takes the rx lock).
void staged_repost_unposted(Ep *ep) noexcept;
// Queues an application receive and copies what already arrived for it.
ssize_t staged_recv(Ep *ep, const iovec *iov, size_t count, size_t capacity, void *context,
		    bool report, Cntr *cntr) noexcept;
// A work completion of a staging buffer, polled from `cq` (its lock held):
// a piece, remote CQ data, or a flush that fails the queued receives.
Outcome staged_rx_completion(Ep *ep, Cq *cq, const ibv_wc &wc, void *buf, Completion &c,
			     fi_cq_err_entry &e) noexcept;
// fi_cancel of a queued receive: 0 (an FI_ECANCELED error reported) or
// -FI_ENOENT.
ssize_t staged_cancel(Ep *ep, void *context) noexcept;
size_t staged_rx_left(Ep *ep) noexcept;

// vrma_msg_sendrecv.cpp, vrma_msg_rma.cpp
// The message ops of an endpoint with this receive mode (it chooses the
// receives) and Conn::tx_serialized (it chooses the sends without a flags
// argument, which then take or skip the tx lock without testing).
const fi_ops_msg *msg_ops_for(RxMode mode, bool serialized) noexcept;
// Records the peer's wire::kCmFlag* and the modes derived from them; called
// once per connection, before it is announced (Connected).
void msg_set_peer_flags(Ep *ep, uint8_t flags) noexcept;
// The RMA ops of an endpoint, chosen by Conn::tx_serialized as the sends.
const fi_ops_rma *rma_ops_for(bool serialized) noexcept;

} // namespace vrma
