// One RC connection (Conn): the queue pair, its send slot ring and what
// posts to it. A MSG endpoint owns one, an RDM endpoint one per peer; the
// data path core (vrma_post.h) works on a Conn.
#pragma once

#include "dc_chain.h"
#include "vrma_cq.h"

namespace vrma {

// Work request bookkeeping; wr_id points to a slot.
enum class SlotKind : uint8_t { Tx, Rx };
struct Conn;
struct SlotHeader {
	Conn *conn = nullptr;
	uint64_t seq = 0;
	SlotKind kind = SlotKind::Tx;
	// Tx: a request that takes one of the peer's receive buffers (a send,
	// a write with immediate data): what a peer's RDM Close counts.
	bool message = false;
};
static_assert(sizeof(SlotHeader) == 24, "the flag lives in the padding");
// Whether a request of this opcode takes a receive buffer at the peer.
inline constexpr bool wr_takes_recv(ibv_wr_opcode op) noexcept
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}
// TxSlot::aux bits in which the owner names a buffer the request holds
// until it completes (RDM: a shared send buffer). Such a request is always
// signaled: its buffer comes back with its own completion, not behind a
// later signaled request, which a connection that goes quiet never posts.
inline constexpr uint32_t kAuxHeldBuffer = 0xffffff;

struct TxSlot : SlotHeader {
	uint64_t op_end = 0; // sequence of the operation's last work request
	void *context = nullptr;
	uint64_t comp_flags = 0; // FI_SEND|FI_MSG, FI_RMA|FI_WRITE, ...
	size_t len = 0;
	Cntr *cntr = nullptr;    // counts the completion (success or error)
	bool report = false;     // a successful completion goes to the CQ
	// Its part in a delivery-complete read-back shared by several writes
	// (MSG endpoints; src/dc_chain.h). Set after fill() by dc_mark and
	// close_deferred_locked (vrma_post.h).
	DcMark dc = DcMark::None;
	// FI_COMMIT_COMPLETE through the target: id + 1 of the pending commit
	// the target's answer completes (0: none). Errors of the operation's
	// requests claim it.
	uint32_t commit = 0;
	// The owner's own mark (RDM: what the request is, and the send buffer
	// it holds, kAuxHeldBuffer); MSG endpoints leave it 0.
	uint32_t aux = 0;

	void fill(uint64_t seq_, uint64_t op_end_, void *context_, uint64_t comp_flags_, size_t len_,
		  bool report_, Cntr *cntr_, uint32_t commit_, bool message_, uint32_t aux_ = 0) noexcept
	{
		message = message_;
		aux = aux_;
		seq = seq_;
		op_end = op_end_;
		context = context_;
		comp_flags = comp_flags_;
		len = len_;
		report = report_;
		dc = DcMark::None;
		cntr = cntr_;
		commit = commit_;
	}
};
// The mark lives in the padding after `report`: a slot stays 80 bytes.
static_assert(sizeof(TxSlot) <= 80, "TxSlot grew");
// A request posted with its slot left unwritten (post_fast's Bare: an MSG
// inject, which has no context, reports nothing, holds nothing and counts
// on its endpoint's counter of its kind, bound before fi_enable): its
// wr_id is the slot's address with kTxBare set, and kTxBareSend for a
// send (else an RDMA write); the completion side derives the rest
// (tx_wc_bare). A walk over retired slots skips such a slot: its seq is
// not its position's.
inline constexpr uintptr_t kTxBare = 1, kTxBareSend = 2, kTxBareMask = 3;
static_assert(alignof(TxSlot) > kTxBareMask, "a slot's address leaves the tag bits free");
struct RxSlot : SlotHeader {
	void *context = nullptr;
	void *buf = nullptr;
	size_t len = 0;
	Cntr *cntr = nullptr;
	bool report = true;
	bool internal = false; // posted by vrma for remote CQ data (reposted)
};

// Registered buffers, allocated at first use and indexed by send sequence
// (see Ep and slot_buffers_ready).
struct SlotBuffers {
	std::unique_ptr<uint8_t[]> buf;
	MrPtr mr;
};

// What one work completion turns into for the application.
enum class Outcome { None, Success, Error };

enum class EpState : uint8_t { Idle, Enabled, Connecting, Connected, Shutdown };

// Work requests held back by FI_MORE, posted with one doorbell by the first
// operation without it (or when full). Copies: the caller's stack is gone.
// Inline payloads are copied here (the device copies inline data only when
// the chain is posted, and the caller may reuse its buffer at once).
struct MoreChain {
	static constexpr size_t kMaxWr = 32;
	ibv_send_wr wr[kMaxWr];
	ibv_sge sge[kMaxWr * kMaxSge];
	size_t nwr = 0;
	size_t nsge = 0;
	std::unique_ptr<uint8_t[]> inline_buf; // kMaxWr * the endpoint's inline size
	size_t inline_cap = 0;
	size_t inline_used = 0;
	// Conn::dc_open: where the closing zero-length read goes (no key is
	// checked for it, but the address is the last write's).
	uint64_t dc_addr = 0;
	uint32_t dc_rkey = 0;
};

// One RC connection: the queue pair and everything that posts to it (the
// send slot ring, the FI_MORE chain, the bounce, event and header buffers,
// the peer's CM flags, the connection state). A MSG endpoint owns one; an
// RDM endpoint owns one per peer. The data path core (vrma_post.h) works on
// a Conn, so both endpoint kinds share rma_one/send_one/post_send_one.
// Hazard: slots name their Conn (SlotHeader::conn) and completions arrive
// until the QP is drained: a Conn is freed only after its ring drained.
struct Conn {
	Domain *domain = nullptr;
	Ep *ep = nullptr;       // the MSG endpoint owning it, or nullptr
	RdmPeer *peer = nullptr; // the RDM peer owning it, or nullptr
	CmIdPtr id;
	ibv_qp *qp = nullptr; // id->qp once enabled
	std::atomic<EpState> state{EpState::Idle};
	std::atomic<bool> closing{false};
	// wire::kCmFlag* the peer announced; set before Connected, read
	// through peer_has().
	std::atomic<uint8_t> peer_cm_flags{0};
	// RDM, a connection this side initiated: the acceptor's flags arrive
	// with the ESTABLISHED event, which a first message from the peer can
	// overtake (rdm_conn_established). Until the event was handled, RMA
	// waits (-FI_EAGAIN): whether the target counts events is unknown.
	bool peer_flags_pending = false;

	// Requests in flight before a post says -FI_EAGAIN (tx_attr->size).
	size_t tx_depth = 0;
	// Requests the send queue holds (tx_capacity_for): an operation of more
	// than tx_depth requests (a long split RMA) goes alone, when nothing
	// else is in flight.
	size_t tx_cap = 0;
	// Requests in flight before post_send_one takes the long way: tx_depth,
	// or 0 when the send queue is credited (tx_credits), so that every
	// post of such a queue goes through post_send_chain_locked, which
	// takes the credits; the fast path pays nothing for credits. Set with
	// set_one_limit.
	size_t tx_one_limit = 0;
	// What the one-request fast paths compare with: tx_one_limit, or 0
	// while FI_MORE holds requests back (hold_back closes it,
	// post_more_locked opens it again, both under more_lock), so that no
	// fast post overtakes them: one compare for both conditions. Read
	// without a lock by posters (under the tx lock, which every hold_back
	// holds too); ep_cancel_held opens it from other threads once the
	// chain is posted, so a poster sees it closed at most a moment longer.
	std::atomic<size_t> tx_one_room{0};
	// The send CQ whose credit pool this queue posts from (nullptr: its
	// whole ring is reserved in the CQ, cq_reserve). One credit per pushed
	// slot, given back when the slot retires (handle_wc) or is unpushed.
	Cq *tx_credits = nullptr;
	// Credits held by no slot: the one taken at fi_enable for the close
	// sentinel (conn_post_sentinel), given back at close if not used.
	size_t tx_spare = 0;
	size_t tx_iov_limit = 0;
	size_t inline_size = 0; // bytes the QP takes inline
	size_t inject_size = 0; // bytes an inject may carry (bounce beyond inline)
	size_t max_msg_size = 0;
	size_t max_wr_bytes = 0; // longer RMA segments are split
	// RDMA READs posted and not retired, and how many may be: a READ the
	// queue pair has no credit for (max_rd_atomic) stalls the send queue,
	// and every request behind it, until an earlier READ completes. The
	// RDM endpoint holds further READs back rather than post them (an
	// answer the peer waits for must not queue behind them).
	uint32_t reads_out = 0;
	uint32_t read_credits = 1;
	// RDM: the endpoint's send buffers this connection's requests hold
	// (RdmEp::tx_free; its share: RdmEp::tx_share).
	uint32_t bufs_held = 0;

	CheckedMutex tx_lock;
	// The application serializes this connection's transmit calls (domain
	// threading FI_THREAD_DOMAIN, FI_THREAD_COMPLETION or
	// FI_THREAD_ENDPOINT) and no provider thread posts on it: the data
	// path skips tx_lock (TxGuard). Fixed at fi_endpoint, which chooses
	// the MSG ops tables by it (rma_ops_for, msg_ops_for).
	bool tx_serialized = false;
	SlotRing<TxSlot> tx;
	uint64_t last_signaled = 0; // sequence of the last signaled send WR
	// An unsignaled request at least this far after the last signaled one
	// is signaled (min(tx_depth / 2, kSignalPeriod), set at fi_enable).
	uint64_t signal_period = 1;
	// Touched by the CQ poller only: the last operation an error was
	// reported for (its other requests' flushes are not reported again).
	uint64_t failed_op_end = UINT64_MAX;
	// RDM: why the connection was failed, when its flushed requests should
	// say so rather than FI_ECANCELED (FI_ETIMEDOUT: the drain watch); 0.
	int fail_err = 0;
	// RDM Close (rdm_wire.h), under the endpoint's lock: the messages
	// received on this connection (what our Close counts) and those among
	// our retired requests; whether the peer takes a Close (its connection
	// header) and ours went out; once the peer's came, every request with a
	// sequence below close_executed was executed by the peer (0: none
	// known), so that the disconnect's flush completes them as done.
	uint64_t msgs_received = 0;
	uint64_t msgs_retired = 0;
	uint64_t close_executed = 0;
	bool peer_closes = false;
	bool peer_idles = false; // RDM: the peer takes Idle messages (kConnFlagIdle)
	bool close_sent = false;
	bool peer_closed = false;
	// The prebuilt request of the one-request fast paths (post_fast, tx
	// lock held): next and sg_list are set once, a post patches the rest.
	// Never handed to the long way, which links and copies requests
	// (post_fast_unready builds its own). A post with a header (RDM eager
	// sends) sends one_hdr as one_sge[0], set up with the connection, and
	// its payload as one_sge[1] (the connection then sets one_wr's opcode
	// once, and posts no other kind); one without sends one_sge[0]. Inline
	// data only: the device has copied the header when ibv_post_send
	// returns. An inline post leaves one_sge[0].lkey as it was: a device
	// reads no key for inline data (it copies addr and length only).
	static constexpr size_t kOneHdrMax = 32;
	ibv_send_wr one_wr{};
	ibv_sge one_sge[2]{};
	alignas(8) uint8_t one_hdr[kOneHdrMax]{};
	// Reclaims finished send requests when the ring, its credits or its
	// buffers are short (slow path, tx lock held): polls the CQ the send
	// queue completes into (MSG: the bound send CQ; RDM: rdm_tx_reclaim).
	void (*reclaim)(Conn *) noexcept = nullptr;
	// Target of the small RDMA READ that makes writes durable (commit).
	uint64_t scratch[2] = {0, 0};
	MrPtr scratch_mr;
	std::unique_ptr<MoreChain> more; // allocated at the first FI_MORE (tx lock)
	// Guards the chain's contents and more_held. Posters take it under
	// the tx lock; when the connection ends ep_cancel_held takes it under
	// the EQ lock (EQ thread) or a CQ lock (the poller that saw a request
	// fail), which may not take the tx lock, and a serialized endpoint has
	// none. A leaf: nothing is locked under it, so what a failed post of
	// the chain reports (report_unposted takes CQ locks) waits until it is
	// released, and no poster holds it while polling. A FastMutex: posters
	// take it once per FI_MORE call, nearly always uncontended (std::mutex
	// cost 90 instructions per such call, callgrind).
	FastMutex more_lock;
	// The chain holds requests; read without more_lock by the long way
	// (the fast paths read tx_one_room).
	std::atomic<bool> more_held{false};
	// Delivery-complete writes wait in the held chain with their
	// read-backs dropped (DcMark::Deferred) and no read is queued behind
	// them yet (tx lock; close_deferred, vrma_post.h). Whatever is posted
	// next queues one first, or carries it (DcMark::Proof).
	bool dc_open = false;
	// Provider messages that ride with an operation, one buffer per send
	// slot, allocated at first use (copy_to_slot_buffer): RMA event
	// messages (wire::RmaEvent), and headers of staged messages sent as
	// pieces (wire::MsgHeader); RDM commit requests too long for an event
	// buffer (rdm::kCommitRequestMax).
	SlotBuffers event_bufs;
	SlotBuffers msg_hdr_bufs;
	SlotBuffers commit_bufs;
	// Registered copies of injected payloads too large for inline data,
	// allocated at the first such inject. Buffer i serves the operation
	// whose first sequence is i modulo kBounceCount: free once that
	// operation retired, which post_send_chain checks from the ring.
	static constexpr size_t kBounceCount = 64;
	size_t bounce_stride = 0; // inject_size and room for a header
	SlotBuffers bounce;
	// ibv_post_send's bad_wr for one_wr (tx lock held): a member, as a
	// stack slot costs the fast path its frame; last, as the fast path
	// takes only its address and the device writes it only on failure.
	ibv_send_wr *one_bad = nullptr;

	Conn() noexcept { one_wr.sg_list = one_sge; }
	Conn(const Conn &) = delete;
	Conn &operator=(const Conn &) = delete;

	// tx_one_limit and the room it gives (nothing is held while it is set).
	void set_one_limit(size_t n) noexcept
	{
		tx_one_limit = n;
		tx_one_room.store(n, std::memory_order_relaxed);
	}

	// Points every slot of a freshly sized ring at this connection.
	void reset_tx(size_t depth) // throws std::bad_alloc
	{
		tx.reset(depth);
		for (uint64_t i = 0; i < tx.capacity(); i++) {
			tx.at(i).conn = this;
			tx.at(i).kind = SlotKind::Tx;
		}
	}
};

// What serializes a connection's send queue, for
// VRMA_ASSERT_HELD(tx_lock_of(conn)) in the functions whose contract is
// "tx lock held": an RDM peer's connection, its endpoint's lock
// (RdmEp::lock; tx_serialized); a MSG endpoint's, its tx_lock, unless the
// application serializes its transmit calls (tx_serialized), which no lock
// shows: accepted as held.
#ifdef VRMA_LOCK_CHECKS
// vrma_rdm_conn.cpp: whether this thread holds the lock of the RDM
// endpoint whose peer owns conn.
bool rdm_conn_held_here(const Conn *conn) noexcept;
#endif
struct ConnTxLock {
	const Conn *conn;
#ifdef VRMA_LOCK_CHECKS
	bool held_here() const noexcept
	{
		if (conn->peer)
			return rdm_conn_held_here(conn);
		return conn->tx_serialized || conn->tx_lock.held_here();
	}
#endif
};
inline ConnTxLock tx_lock_of(const Conn *conn) noexcept
{
	return {conn};
}

// What the peer announced while connecting.
inline bool peer_has(const Conn &conn, uint8_t cm_flag) noexcept
{
	return conn.peer_cm_flags.load(std::memory_order_acquire) & cm_flag;
}

// vrma_conn.cpp
// On a QP in the error state: a signaled zero-length write whose flush
// retires every earlier unsignaled request (completed ones never report
// again). The ring keeps one slot free for it. Whether it was posted.
bool conn_post_sentinel(Conn *conn) noexcept;
// The retry budget of a connection about to connect or accept on ID
// (FI_VRMA_ACK_TIMEOUT, FI_VRMA_RETRY_COUNT): into PARAM and onto ID.
// Beyond it an unanswered request fails the queue pair
// (IBV_WC_RETRY_EXC_ERR) and with it the connection.
void conn_set_retry(rdma_cm_id *id, rdma_conn_param &param) noexcept;

// vrma_msg_ep.cpp: report_unposted (vrma_post.h) of a MSG endpoint's connection
// (an RDM one's: rdm_report_unposted, vrma_rdm_api.h).
void msg_report_unposted(Conn *conn, const ibv_send_wr *first, int err) noexcept;

} // namespace vrma
