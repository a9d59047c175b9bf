// vrma's own FI_EP_RDM endpoint: reliable datagrams over one RC connection
// per peer, made on demand with rdma_cm.
//
// Shape:
//  - RdmEp: the endpoint. Its own rdma_cm listener (its fi_getname address),
//    one internal ibv CQ that every peer's queue pair completes into, one
//    shared receive queue (SRQ) of provider buffers for all peers, the tag
//    matcher, a pool of registered send buffers. The domain's progress
//    engine serves its rdma_cm events (control progress is automatic);
//    data progress runs in the application's calls (FI_PROGRESS_MANUAL) or
//    in the engine too (FI_PROGRESS_AUTO).
//  - RdmPeer: one remote endpoint, by listening address: its Conn (the queue
//    pair and the send ring the MSG endpoint uses too, vrma_conn.h), and the
//    operations waiting for the peer's answer (rendezvous, delivery).
//  - Wire formats: src/wire/rdm_wire.h. Every send starts with an RdmHeader.
//
// Protocols:
//  - eager: header + payload in one send, landing in an SRQ buffer and
//    copied into the matched receive (or kept as an unexpected message);
//  - rendezvous (longer than eager_size): the sender registers its buffer
//    and sends RndvRequest; the receiver, once matched, reads the data with
//    RDMA READ straight into the receive buffer and answers RndvDone, which
//    completes the send.
//
// Serialization (the provider's model: vrma_progress.h): one lock per
// endpoint, RdmEp::lock (a FastMutex: the data path takes it two or three
// times per message, nearly always uncontended), covers everything of the
// endpoint, peers and connections included. Its engine:
//  - rdm_progress_locked (CM events while connecting, every completion,
//    backlogs, Resumes, drain watch) runs from CQ and counter reads, the
//    domain engine's data handler, fi_recv with FI_PEEK, and the
//    DISCONNECTED handler of rdma_cm events; transmit calls run only
//    rdm_tx_reclaim (send completions; receive completions wait in
//    RdmEp::rx_deferred). Neither nests (RdmEp::in_progress).
//  - connections are freed only by rdm_progress_reap, where no caller
//    holds one.
//  - fi_enable builds the endpoint before the engine can reach it, without
//    the lock; fi_close detaches it from the engine before taking the lock.
#pragma once

#include "vrma_rdm_api.h"
#include "vrma_conn.h"
#include "vrma_ep_base.h"
#include "vrma_av.h"
#include "vrma_post.h"
#include "fast_mutex.h"
#include "wire/rdm_wire.h"
#include "wire/rdm_wc.h"
#include "peer_limit.h"
#include "rx_budget.h"
#include "tx_share.h"
#include "tag_match.h"
#include "atomic_ops.h"
#include "free_list.h"

#include <algorithm>
#include <unordered_map>

namespace vrma {

struct RdmPeer;

// The flags the eager send fast path honours by itself (rdm_msg's
// send_fast); EpBase::fast_plain says whether tx_op_flags are among them.
inline constexpr uint64_t kRdmFastTxFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
					    FI_TRANSMIT_COMPLETE | FI_REMOTE_CQ_DATA;

// The send buffer an RDM request holds (index + 1; 0: none).
inline uint32_t rdm_aux_buf(uint32_t aux) noexcept { return aux & kAuxHeldBuffer; }
// The opcodes a successful completion of a request of that kind may carry
// (rdm_wc.h): what the posting sites put in the chains they tag with it.
// Internal covers vrma's own sends, the close sentinel (an RDMA WRITE) and
// the requests of a failed post, retagged whatever they were
// (rdm_post_op_chain); an unknown kind allows nothing.
inline uint32_t rdm_tx_wc_opcodes(RdmTx kind) noexcept
{
	switch (kind) {
	case RdmTx::RndvReq:
		return rdm::kWcSend;
	case RdmTx::RndvRead:
	case RdmTx::KeyRead:
		return rdm::kWcRead;
	case RdmTx::App:
	case RdmTx::Awaited: // a delivery-complete send, or a commit's writes and request
	case RdmTx::RmaOp:   // writes or reads, a delivery read-back, an event send
		return rdm::kWcSend | rdm::kWcWrite | rdm::kWcRead;
	case RdmTx::AtomicNative: // device atomics and their event send
		return rdm::kWcAtomics | rdm::kWcSend;
	case RdmTx::Internal:
		return rdm::kWcRdmPosted;
	}
	return 0;
}

// An operation waiting for the peer's answer: a send (RndvDone,
// DeliveryAck) or an RMA write with FI_COMMIT_COMPLETE (CommitAnswer).
struct RdmTxOp {
	RdmPeer *peer = nullptr;
	uint32_t msg_id = 0;
	// The one answer that completes it, and the connection its request went
	// on (compared, never followed: a connection's end fails its waiting
	// operations before it is freed). Anything else with its msg_id is a
	// protocol error (rdm_answered).
	rdm::MsgType answer = rdm::MsgType::RndvDone;
	const Conn *conn = nullptr;
	void *context = nullptr;
	uint64_t comp_flags = 0;
	size_t len = 0;
	bool report = false;
	Cntr *cntr = nullptr;
	// Its request went out (RdmAwaited::posted). Until then it is its
	// caller's, which enters it in the table before the post: progress
	// the post runs may fail the connection, whose sweep
	// (rdm_fail_waiting) then only takes it out of the table, and the
	// caller's failed post (-FI_EAGAIN) is its one outcome; an answer
	// to it is a protocol error (answered_op).
	bool posted = false;
	// Rendezvous: registrations of the sender's segments; commit: of the
	// local buffers (the answer comes after the target received them all).
	UserReg regs[kRdmIovLimit];
};

// An RMA operation whose local buffers vrma registered (no desc given):
// the registrations live until its last request completes.
struct RdmRmaOp {
	void *context = nullptr;
	bool report = false;  // a successful completion goes to the CQ
	Cntr *cntr = nullptr; // counts the operation
	UserReg regs[kRdmIovLimit];
};
// What rdm_handle_wc knew of an RmaOp request when it completed (its slot
// may be reused once retired).
struct RdmRmaDone {
	void *context; // the RdmRmaOp
	uint64_t comp_flags;
	size_t len;
	uint64_t seq, op_end;
	bool report; // false: a request of a failed post
	bool ok;
	int err, prov_errno;
};

// What this side knows of one of a peer's keys that need translating: a
// scalable key, or a provider key of a region the peer registers on demand
// (kOnDemandKeyBit).
struct RemoteKey {
	enum class State : uint8_t {
		Reading, // a READ of its bucket is in flight (read_id)
		Asking,  // a KeyRequest is in flight (read_id: its msg_id)
		Ready,   // entry holds it (with kAccessUnregistered: ask the peer)
		Absent,  // the peer has no such key: the next operation fails
		Failed,  // the peer could not register the region: the next operation fails
	};
	State state = State::Reading;
	uint32_t read_id = 0;
	keys::KeyEntry entry;
	const Conn *conn = nullptr; // Asking: the connection the request went on
};
// A READ of a peer's key bucket in flight, into the endpoint's key buffer
// `buf`.
struct RdmKeyRead {
	RdmPeer *peer = nullptr;
	uint64_t key = 0;
	uint32_t read_id = 0;
	uint32_t buf = 0;
};

struct RdmAtomicOp;
using RdmAtomicMap = std::unordered_map<uint32_t, RdmAtomicOp *>;

// An atomic operation in flight: emulated ones wait in RdmPeer::atomics
// for the target's AtomicResponse; native ones are the context of their
// device atomics, whose old values land in the send buffer `buf`.
struct RdmAtomicOp {
	RdmPeer *peer = nullptr;
	uint32_t msg_id = 0;
	const Conn *conn = nullptr; // emulated: the connection its request went on
	void *context = nullptr;
	uint64_t comp_flags = 0;
	bool report = false;
	Cntr *cntr = nullptr;
	size_t dt_size = 0;
	fi_ioc result[kRdmIovLimit]; // Fetch, Compare: where the old values go
	size_t nresult = 0;
	size_t result_bytes = 0;
	int buf = -1; // native: the send buffer its old values land in
	// Emulated: its request went out. Until then it is its caller's
	// (post_emulated), as an RdmTxOp before RdmTxOp::posted: the
	// connection's sweep (rdm_fail_atomics) only takes it out of
	// RdmPeer::atomics, and a response to it is a protocol error.
	bool posted = false;
};

// A receive posted by the application.
struct RdmRecv : PostedRecv {
	MatchKind kind = MatchKind::kMsg;
	// The buffers: only the first `count` are read, so a kept receive's
	// are neither zeroed nor copied when the pool resets it (FreeList
	// resets by assignment), as RdmMsg::small.
	struct Iovs {
		Iovs() noexcept {}
		Iovs &operator=(const Iovs &) noexcept { return *this; }
		operator iovec *() noexcept { return v; }
		operator const iovec *() const noexcept { return v; }
		iovec v[kRdmIovLimit];
	} iov;
	size_t count = 0;
	size_t capacity = 0;
	bool report = true;
	bool multi = false; // FI_MULTI_RECV
	MultiRecvSpace space;
	// A multi-receive buffer's rendezvous still reading into it. While
	// there are any, its release (the FI_MULTI_RECV entry, or the
	// FI_ECANCELED entry of fi_cancel) waits: the application may reuse
	// the buffer once released, and the reads would still write into it.
	// The last one to end reports the release and frees the receive
	// (rdm_finish_rndv); until then the rendezvous own it.
	uint32_t rndv_inflight = 0;
	bool release_deferred = false; // released (or cancelled) meanwhile
	bool cancel_deferred = false;  // by fi_cancel: its entry is FI_ECANCELED
};

// A message that arrived before its receive: eager payload copied, or a
// rendezvous request kept until a receive matches.
struct RdmMsg : UnexpectedMsg {
	RdmPeer *peer = nullptr;
	MatchKind kind = MatchKind::kMsg;
	fi_addr_t src = FI_ADDR_NOTAVAIL;
	rdm::RdmHeader hdr;
	// An eager message's hdr.length bytes: in `small` up to kSmallPayload,
	// else in `payload` (payload_bytes() says where). small is neither
	// zeroed nor copied (FreeList resets by assignment): only the bytes the
	// message wrote are read.
	static constexpr size_t kSmallPayload = 128;
	struct SmallPayload {
		SmallPayload() noexcept {}
		SmallPayload &operator=(const SmallPayload &) noexcept { return *this; }
		uint8_t b[kSmallPayload];
	} small;
	std::unique_ptr<uint8_t[]> payload;
	uint8_t *payload_bytes() noexcept { return payload ? payload.get() : small.b; }
	bool rndv = false;
	rdm::RndvSegment segs[rdm::kMaxRndvSegments];
	size_t nsegs = 0;
	// Not 0: the connection it came over failed while its sender waited
	// for its answer (a rendezvous, or FI_DELIVERY_COMPLETE), and the
	// sender's send ended with an error. Unclaimed, such a message is
	// dropped at once (rdm_fail_waiting); a claimed one (FI_PEEK|FI_CLAIM)
	// stays for its FI_CLAIM, which ends with this error and sends no
	// answer: nothing of it acts on a later connection.
	int stale = 0;
	// What it is charged in RdmEp::unexp (rdm_unexpected_cost in
	// vrma_rdm_recv.cpp), given back when it leaves the queue
	// (rdm_unexpected_gone).
	size_t cost = 0;
};
// fi_vrma.7 (Limits) states what an unexpected message costs.
static_assert(sizeof(RdmMsg) <= 384, "an unexpected message's bookkeeping grew");

// A rendezvous receive in progress: RDMA READs into the receive buffer.
struct RdmRxOp {
	RdmPeer *peer = nullptr;
	uint32_t msg_id = 0;   // the sender's, for RndvDone
	void *context = nullptr;
	uint64_t comp_flags = 0;
	void *buf = nullptr;
	size_t len = 0;        // bytes placed
	size_t olen = 0;       // bytes truncated
	uint64_t data = 0;
	uint64_t tag = 0;
	fi_addr_t src = FI_ADDR_NOTAVAIL;
	bool report = true;
	// The multi-receive buffer it reads into (RdmRecv::rndv_inflight).
	RdmRecv *multi_owner = nullptr;
	// The reads: the sender's pieces (cut to what fits) into these of the
	// receive buffer, registered once (mrs) and posted when there is room.
	rdm::RndvSegment segs[rdm::kMaxRndvSegments];
	size_t nsegs = 0;
	iovec dst[kRdmIovLimit];
	size_t count = 0;
	UserReg regs[kRdmIovLimit];
	bool registered = false;
	// Bytes whose READs have been posted: the reads go in windows (one
	// chain at a time, rdm_post_reads), the next from the last one's
	// completion, until `len`.
	size_t posted = 0;
};

// One peer: the connection and what waits for it.
struct RdmPeer {
	RdmEp *ep = nullptr;
	rdm::RdmAddr addr;  // the peer's listening address
	uint64_t nonce = 0; // the peer's instance, once known
	std::unique_ptr<Conn> conn; // the connection sends use (null: none yet)
	bool initiated = false;     // conn is the one this side asked for
	// An endpoint sending to itself: its connect request arrives at its own
	// listener; this is that accepted end (receives arrive on it).
	std::unique_ptr<Conn> loopback;
	// The peer will connect to us (it kept its own crossing connection):
	// sends wait for it rather than connect again, until this deadline.
	std::chrono::steady_clock::time_point expect_until{};
	// The first of a run of refusals for want of a listener (the peer's
	// endpoint not enabled yet): connecting is tried again until
	// cm_timeout_ms after it (zero: no such run).
	std::chrono::steady_clock::time_point unheard_since{};
	// The start of a run of connection attempts not ended yet (retries
	// after a crossing, a busy or unheard refusal and a challenge belong
	// to the run; zero: none): the watch ends the run with FI_ETIMEDOUT at
	// RdmEp::connect_timeout after it, where rdma_cm alone would retry a
	// request to a dead host for about 100 s.
	std::chrono::steady_clock::time_point connect_since{};
	int error = 0; // the last connection failure (FI_E*, positive), for the next send
	// FI_SOURCE: the AV handle of addr, and what completions report for it
	// (its FI_AV_USER_ID id, else the handle), computed again when the AV
	// changed (fi_av_set_user_id changes it too).
	fi_addr_t fi_addr = FI_ADDR_NOTAVAIL;
	fi_addr_t report_addr = FI_ADDR_NOTAVAIL;
	uint64_t av_epoch = ~0ULL;
	uint32_t next_msg_id = 1;
	std::unordered_map<uint32_t, RdmTxOp *> waiting; // by msg_id
	// Scalable keys: where the peer publishes its keys (from its connection
	// header; buckets 0: it does not), and what was read there. The cache
	// lives as long as the connection: rdm_conn_failed empties it, so a key
	// the peer registered again is read again.
	rdm::KeyTableRef key_table;
	// The table comes in the peer's first message (an authenticated request
	// has no room for it): key translations wait until it has come.
	bool key_table_pending = false;
	std::unordered_map<uint64_t, RemoteKey> keys;
	// Authentication (conn_auth.h), as initiator: the acceptor's challenge
	// to answer in the next request, and the answer sent, which the
	// acceptor's proof is checked against.
	auth::Mac auth_ask{};         // the challenge conn's first request carried
	bool auth_challenged = false; // auth_cookie/auth_peer_nonce are the acceptor's challenge
	bool auth_answered = false;   // conn's request carried auth_answer
	uint64_t auth_cookie = 0;
	uint64_t auth_peer_nonce = 0;
	auth::Mac auth_answer{};
	// As acceptor: a newcomer that claims this peer's address while its
	// connection is up is turned away and the connection probed, at most
	// once per kProbeInterval (vrma_rdm_conn.cpp).
	std::chrono::steady_clock::time_point probe_after{};
	RdmAtomicMap atomics; // emulated, by msg_id
	// Back-pressure on messages (rdm_wire.h's Flow, src/rx_budget.h), for
	// the current connection (rdm_conn_failed resets both): tx_paused, the
	// peer asked this side to send it no message until it resumes; flow_rx,
	// this side asked the peer (its unexpected messages fill RdmEp::unexp).
	bool tx_paused = false;
	flow::PeerRx flow_rx;
	// The drain watch (rdm_watch_drain): conn's retired sends when last
	// seen moving, and since when they have not moved (zero: not stalled).
	uint64_t watch_tail = 0;
	std::chrono::steady_clock::time_point stalled_since{};
	// Answers to it waiting in RdmEp::answer_backlog: while any do, later
	// ones queue behind them (its order); other peers' go straight out.
	// Bounded: a peer owed more (RdmEp::peer_allowance) sends requests
	// while it takes nothing, and its connection is dropped.
	uint32_t answers_queued = 0;
	// Which connection is conn: changes whenever conn is set. An answer
	// prepared off the lock (a persisted commit) goes out only over the
	// connection its request came on.
	uint32_t conn_epoch = 0;
	// Its commit requests the persist worker holds (RdmCommitJob): the
	// peer is not given back meanwhile (rdm_reclaim_peers).
	uint32_t persists = 0;
	// Since when it has had no connection (made, or its last one failed):
	// the longest idle are given back first (rdm_reclaim_peers).
	std::chrono::steady_clock::time_point idle_since{};
	// Closing conn by agreement when unused (rdm_wire.h's Idle,
	// FI_VRMA_RDM_IDLE_TIMEOUT; rdm_conn_failed resets it): Asked, our Query
	// went out when conn's posted requests stood at idle_head; Agreed, we
	// agreed to the peer's at agreed_at: no operation starts on conn
	// (rdm_conn_ready, the fast paths) until it ends or the peer resumes.
	enum class Idle : uint8_t { None, Asked, Agreed };
	Idle idle = Idle::None;
	uint64_t idle_head = 0;
	std::chrono::steady_clock::time_point agreed_at{};
	std::chrono::steady_clock::time_point ask_after{}; // a refused Query: not again before
	// The watch's view of conn's use (the idle exchange and the watch's
	// probes excepted): its posted requests and received messages when
	// last seen changing, and since when they have not
	// (zero: not looked at yet).
	uint64_t quiet_head = 0;
	uint64_t quiet_rx = 0;
	std::chrono::steady_clock::time_point quiet_since{};
};

// A provider receive buffer in the SRQ.
struct SrqSlot : SlotHeader {
	uint8_t *buf = nullptr;
};

// An RDM endpoint: EpBase (CQs, counters, op flags; its RMA events come
// as RmaEvent messages and its commits as CommitRequests, peers learn of
// both from the connection header) and everything below.
struct RdmEp final : EpBase {
	Av *av = nullptr;
	// How each kind's receives (MatchKind) use their src: kSrcAny ignores
	// it, kSrcDirected matches it (FI_ADDR_UNSPEC: any), kSrcExact also
	// refuses FI_ADDR_UNSPEC (FI_DIRECTED_RECV, FI_TAGGED_DIRECTED_RECV,
	// FI_EXACT_DIRECTED_RECV: rdm_src_modes).
	enum SrcMode : uint8_t { kSrcAny, kSrcDirected, kSrcExact };
	SrcMode src_mode[2] = {kSrcAny, kSrcAny};
	// The source a receive of `kind` for src matches (RecvKey::src).
	fi_addr_t recv_src(MatchKind kind, fi_addr_t src) const noexcept
	{
		return src_mode[static_cast<int>(kind)] != kSrcAny ? src : FI_ADDR_UNSPEC;
	}
	// FI_EXACT_DIRECTED_RECV refuses a receive of `kind` from any source.
	bool refuses_any_src(MatchKind kind, fi_addr_t src) const noexcept
	{
		return src == FI_ADDR_UNSPEC && src_mode[static_cast<int>(kind)] == kSrcExact;
	}
	// An unexpected message from a sender not in the AV is queued (it
	// matches only receives from any source) and had not been looked up
	// again since the AV's epoch unknown_src_epoch (rdm_resolve_sources).
	bool unknown_src_pending = false;
	uint64_t unknown_src_epoch = ~0ULL;
	bool auto_progress = false; // FI_PROGRESS_AUTO: the engine progresses data
	size_t min_multi_recv = 0;  // FI_OPT_MIN_MULTI_RECV
	size_t eager_size = 0;
	size_t inline_size = 0;  // bytes a send carries inline (header included)
	size_t inject_size = 0;  // fi_inject: eager, copied at once
	size_t peer_tx_depth = 0;
	// Bytes one rendezvous READ asks for at most (FI_VRMA_RDM_RNDV_READ_SIZE).
	size_t rndv_read_size = SIZE_MAX;
	bool enabled = false;
	// fi_close is letting what it posted go out (rdm_linger): received
	// messages are no longer served.
	bool closing = false;
	bool scalable_keys = false; // the domain's (Domain::scalable_keys)
	bool native_atomics = false; // rdm_params.native_atomics and a device that has them
	// Atomic requests are built here (eager_size bytes), and target-side
	// results (lock held).
	std::unique_ptr<uint8_t[]> atomic_buf;
	std::unique_ptr<uint8_t[]> atomic_result;

	FastMutex lock;
	sockaddr_storage name{}; // fi_setname before enable; fi_getname after
	bool name_set = false;
	rdm::RdmAddr self;       // the listening address, canonical
	uint64_t nonce = 0;
	// Authentication (conn_auth.h): the job key (empty: none), the secret
	// this endpoint's challenges are made with, and the answers it took
	// (bounded: kAuthReplayMax).
	auth::Key auth_key;
	auth::Secret auth_secret{};
	std::unique_ptr<auth::ReplayCache> auth_replays;
	static constexpr size_t kAuthReplayMax = 1024;
	EventChannelPtr cm_channel;
	CmIdPtr listen_id;
	CompChannelPtr channel; // the internal CQ's events
	CqPtr cq;               // every queue pair's completions
	size_t cqe = 0;
	SrqPtr srq;
	// SRQ buffers: rx_count of buf_stride bytes, one registration.
	size_t buf_stride = 0;
	std::unique_ptr<uint8_t[]> rx_bufs;
	MrPtr rx_mr;
	std::unique_ptr<SrqSlot[]> rx_slots;
	size_t rx_count = 0;
	// Consumed SRQ buffers waiting to be reposted together (srq_batch_max
	// of them: rx_count / 16, 1 to kSrqBatchMax).
	static constexpr size_t kSrqBatchMax = 16;
	uint32_t srq_batch[kSrqBatchMax];
	size_t srq_batch_n = 0;
	size_t srq_batch_max = 1;
	// Eager send buffers (free list of indexes), and how many one
	// connection may hold (tx_share.h: a peer that takes nothing holds its
	// share until the drain timeout, not the pool).
	std::unique_ptr<uint8_t[]> tx_bufs;
	MrPtr tx_mr;
	std::vector<uint32_t> tx_free;
	flow::TxShare tx_share;
	// Send requests outstanding on every queue pair together: with the SRQ
	// they must fit the internal CQ (a flush reports every one).
	size_t tx_wrs = 0;
	size_t tx_credit = 0;

	TagMatcher<RdmRecv, RdmMsg> matcher;
	// What the unexpected messages in `matcher` hold, against the limit
	// (rdm_unexpected_max at fi_endpoint); paused peers have flow_rx.paused.
	flow::RxBudget unexp;
	// What an honest peer can have under way that this side must take
	// before the peer reacts: 4 x the peer queue (rdm_enable). Both a
	// paused connection's grace (unexp) and the answers a peer may be owed
	// (RdmPeer::answers_queued); beyond, the peer ignores the protocol.
	size_t peer_allowance = 0;
	// The budget fell to half with peers paused where their Resume could
	// not be sent (a connection's end): the next progress sends it.
	bool resume_due = false;
	// The watch (rdm_watch_drain): FI_VRMA_RDM_DRAIN_TIMEOUT and
	// FI_VRMA_RDM_CONNECT_TIMEOUT (zero: that half off), the next time it
	// looks, and progress calls counted between looks.
	std::chrono::milliseconds drain_timeout{0};
	std::chrono::milliseconds connect_timeout{0};
	// FI_VRMA_RDM_IDLE_TIMEOUT (zero: connections are never closed for
	// being unused), and the connections so closed, by either side.
	std::chrono::milliseconds idle_timeout{0};
	uint64_t idle_closed = 0;
	bool watching() const noexcept
	{
		return drain_timeout.count() || connect_timeout.count() || idle_timeout.count();
	}
	std::chrono::steady_clock::time_point watch_next{};
	uint32_t watch_calls = 0;
	// Receives and emulated atomics done with, and the atomics' map nodes
	// (RdmPeer::atomics), kept for the next operation: malloc and free cost
	// as much as the rest of a posted receive, and a tenth of an atomic.
	// Their room (kRecvPoolMax, kAtomicPoolMax each) is reserved at open.
	static constexpr size_t kRecvPoolMax = 256;
	static constexpr size_t kAtomicPoolMax = 64;
	// Unexpected messages likewise (rdm_new_msg, rdm_free_msg): a matched
	// one is freed inside the receive call that takes it. A receiver that
	// lags holds many at once: 1024 kept (384 KiB at most).
	static constexpr size_t kMsgPoolMax = 1024;
	FreeList<RdmRecv> recv_pool;
	FreeList<RdmMsg> msg_pool;
	FreeList<RdmAtomicOp> atomic_pool;
	NodeCache<RdmAtomicMap> atomic_nodes;
	std::unordered_map<rdm::RdmAddr, std::unique_ptr<RdmPeer>, rdm::RdmAddrHash> peers;
	// FI_VRMA_RDM_MAX_PEERS (src/peer_limit.h): a full table turns new
	// peers away (one warning while full); above its high mark progress
	// gives idle peers back (rdm_reclaim_peers), at most once per
	// kReclaimInterval.
	peers::Limit peer_limit;
	bool peers_full_warned = false;
	bool budget_logged = false; // the first connection's retry budget, logged once (info)
	std::chrono::steady_clock::time_point reclaim_next{};
	uint64_t peers_reclaimed = 0; // in the endpoint's life (the log's)
	// FI_MORE holds requests back per connection: the peer whose connection
	// may hold some (the last one a transmit with FI_MORE went to), or
	// nullptr. Only one does: a transmit to another peer, and every
	// refused one, first posts what this one holds (rdm_more_switch,
	// rdm_more_flush). Written under `lock`; atomic so that the transmit
	// calls' refusal paths can test it without the lock.
	std::atomic<RdmPeer *> more_peer{nullptr};
	// qp_num -> peer, for receive completions (the SRQ's completions name
	// only the queue pair). A direct-mapped hint in front of the map saves
	// the hash lookup per message; erase() clears the hint with the entry.
	class QpPeers {
	public:
		void add(uint32_t qp_num, RdmPeer *peer)
		{
			map_[qp_num] = peer;
			hint_[qp_num % kHint] = {qp_num, peer};
		}
		void erase(uint32_t qp_num) noexcept
		{
			map_.erase(qp_num);
			if (hint_[qp_num % kHint].qp_num == qp_num)
				hint_[qp_num % kHint] = {};
		}
		[[gnu::always_inline]] RdmPeer *find(uint32_t qp_num) noexcept
		{
			Hint &h = hint_[qp_num % kHint];
			if (h.qp_num == qp_num && h.peer) [[likely]]
				return h.peer;
			auto it = map_.find(qp_num);
			if (it == map_.end())
				return nullptr;
			h = {qp_num, it->second};
			return it->second;
		}

	private:
		static constexpr size_t kHint = 64;
		struct Hint {
			uint32_t qp_num = 0;
			RdmPeer *peer = nullptr;
		};
		Hint hint_[kHint];
		std::unordered_map<uint32_t, RdmPeer *> map_;

	public:
		// Drops every entry of a peer given back (none should be left:
		// its connections' entries went when they were reaped).
		template <class Gone>
		void erase_peers(Gone gone) noexcept
		{
			for (auto it = map_.begin(); it != map_.end();)
				it = gone(it->second) ? map_.erase(it) : std::next(it);
			for (Hint &h : hint_)
				if (h.peer && gone(h.peer))
					h = {};
		}
	};
	QpPeers by_qp;
	// fi_addr_t -> peer for sends, indexed by the handle's slot (its low
	// 32 bits). Valid while the AV's epoch is peer_cache_epoch: an insert
	// or a remove empties it, so a removed handle is looked up again (and
	// fails); so does rdm_reclaim_peers when it gives peers back. Filled
	// only by rdm_peer_of, whose caller checked that the endpoint is
	// enabled, and emptied (peer_cache_n = 0) when fi_close disables it: a
	// hit means an enabled endpoint. An entry whose addr matches has a peer
	// (an empty entry's FI_ADDR_NOTAVAIL has a slot past kPeerCacheMax).
	struct PeerCacheEntry {
		fi_addr_t addr = FI_ADDR_NOTAVAIL;
		RdmPeer *peer = nullptr;
	};
	static constexpr size_t kPeerCacheMax = size_t(1) << 16;
	std::vector<PeerCacheEntry> peer_cache;
	size_t peer_cache_n = 0; // peer_cache.size(), for the send path's bound check
	uint64_t peer_cache_epoch = ~0ULL;
	// Connections replaced or failed, freed once their send rings drained.
	std::vector<std::unique_ptr<Conn>> dying;
	size_t connecting = 0;
	// rdm_progress_locked is not re-entered from the handlers it runs (a
	// handler that finds its queue full leaves the work in a backlog);
	// neither is rdm_tx_reclaim, nor either of them from the other.
	bool in_progress = false;
	// Receive completions a transmit call's reclaim (rdm_tx_reclaim) took
	// from the internal CQ without handling them: the next progress
	// handles them first, in order. The reclaim polls only while a whole
	// batch fits, so they never exceed kRxDeferMax.
	static constexpr int kReclaimBatch = 16;
	static constexpr size_t kRxDeferMax = 64;
	static_assert(kRxDeferMax >= kReclaimBatch && kRxDeferMax % kReclaimBatch == 0);
	uint32_t rx_deferred_n = 0;
	ibv_wc rx_deferred[kRxDeferMax];

	// Work that found its queue full, retried by progress: rendezvous
	// reads and vrma's own answers (RndvDone, DeliveryAck).
	std::deque<RdmRxOp *> read_backlog;
	struct Answer {
		RdmPeer *peer;
		uint8_t hdr[rdm::kRdmHeaderBytes];
		std::vector<uint8_t> body; // an atomic response's data
	};
	std::deque<Answer> answer_backlog;

	// Scalable keys: buffers for READs of peers' key buckets (kKeyReads of
	// kBucketBytes, registered at the first lookup), free ones by index.
	static constexpr size_t kKeyReads = 16;
	std::unique_ptr<uint8_t[]> key_bufs;
	MrPtr key_mr;
	std::vector<uint32_t> key_free;
	uint32_t next_key_read = 1;

	// The endpoint's sources in the domain's progress engine
	// (vrma_progress.h; 0: none): the rdma_cm channel, always; with
	// FI_PROGRESS_AUTO the internal CQ's channel and kick_fd.
	uint64_t cm_key = 0, data_key = 0, kick_key = 0;
	// FI_PROGRESS_AUTO: makes the engine run progress when a reclaim
	// kept receive completions (no CQ event announces them again).
	Fd kick_fd;
};

// vrma_rdm_ep.cpp
// The progress engine, with the endpoint's lock held: CM events while
// connecting, every completion of the internal CQ (those a reclaim kept
// first), the backlogs, Resumes due, the drain watch. Transmit calls never
// run it (rdm_tx_reclaim is theirs). It never frees a connection: its
// callers may hold Conn pointers (the DISCONNECTED handler, an
// fi_recv with FI_PEEK), and a message it handles may fail the very
// connection they hold (which moves to RdmEp::dying, alive).
void rdm_progress_locked(RdmEp *ep) noexcept;
// A transmit call's only entry into the engine (vrma_rdm_rx.cpp), when it
// is short of send credit, send buffers or ring slots (lock held): polls
// the internal CQ and handles the completions of send requests (their
// slots retire, their operations complete) and the peers' Flow messages
// (a Pause must stop a sender that only sends); other receive completions
// are kept for the next progress (RdmEp::rx_deferred). It drains no CM event,
// retries no backlog, sends no Resume and frees nothing; an error
// completion it handles may fail a connection, so the caller re-checks
// its own (conn_lost). Nothing inside progress or another reclaim.
void rdm_tx_reclaim(RdmEp *ep) noexcept;
// Handles the receive completions a reclaim kept (progress, close).
void rdm_handle_deferred(RdmEp *ep) noexcept;
// rdm_progress_locked, then frees the failed connections whose rings
// drained (rdm_reap). Only where no caller holds a connection: the CQ's
// progress (rdm_progress), the engine's data handler, fi_trywait, close.
void rdm_progress_reap(RdmEp *ep) noexcept;
// Completion entries for the application (lock held).
void rdm_report_tx(RdmEp *ep, void *context, uint64_t flags, size_t len, bool report, Cntr *cntr,
		   int err, int prov_errno) noexcept;
void rdm_report_rx_error(RdmEp *ep, const CqPending &p) noexcept;
// Back-pressure (vrma_rdm_msg.cpp): a peer's Flow message; the end of a
// connection's pauses either way (rdm_conn_failed); the Resumes that
// RdmEp::resume_due or a full CQ (RxBudget::held) holds back (progress,
// lock held); remote CQ data from peer while the receive CQ holds more
// than its size (pause, or drop past the grace).
void rdm_handle_flow(RdmPeer *peer, const rdm::RdmHeader &h) noexcept;
void rdm_flow_reset(RdmPeer *peer) noexcept;
void rdm_flow_progress(RdmEp *ep) noexcept;
void rdm_flow_cq_over(RdmPeer *peer, uint32_t qp_num) noexcept;
// Fails every connection whose sends have not moved for the endpoint's
// drain timeout, and every run of connection attempts older than its
// connect timeout (vrma_rdm_conn.cpp); looks at most every quarter of the
// shorter (and every second). Lock held; frees nothing (connections go to
// dying).
void rdm_watch_drain(RdmEp *ep) noexcept;
// A peer's Idle message (rdm_wire.h) that arrived over c (the current
// connection, else nullptr: ignored): answers a Query (Agree only with
// nothing under way here and c as quiet as the asker was), closes c on an
// Agree to ours if nothing was posted since, ends a hold on a Resume; an
// exchange out of turn drops the connection. Lock held; frees nothing.
void rdm_handle_idle(RdmEp *ep, RdmPeer *peer, Conn *c, uint32_t qp_num, const rdm::RdmHeader &h) noexcept;
// An error entry: err with prov_errno, and what the operation got done:
// `len` bytes placed or sent at `buf`, `olen` cut off (FI_ETRUNC).
inline CqPending rdm_error_entry(void *context, uint64_t flags, void *buf, size_t len, size_t olen,
				 uint64_t data, uint64_t tag, fi_addr_t src, int err,
				 int prov_errno = 0) noexcept
{
	CqPending p;
	p.src = src;
	p.is_error = true;
	p.err.op_context = context;
	p.err.flags = flags;
	p.err.len = len;
	p.err.buf = buf;
	p.err.data = data;
	p.err.tag = tag;
	p.err.olen = olen;
	p.err.err = err;
	p.err.prov_errno = prov_errno;
	return p;
}
// A successful receive: counted, and its entry (without building a
// CqPending) when `report`.
void rdm_complete_rx(RdmEp *ep, bool report, const Completion &c, fi_addr_t src) noexcept;
// The endpoint's src_mode of each MatchKind from its caps (vrma_rdm_ep.cpp).
void rdm_src_modes(uint64_t caps, RdmEp::SrcMode (&mode)[2]) noexcept;

// Room for n more send requests within the internal CQ's reserve (after
// a reclaim, when short).
inline bool rdm_tx_room(RdmEp *ep, size_t n) noexcept
{
	if (ep->tx_wrs + n <= ep->tx_credit) [[likely]]
		return true;
	rdm_tx_reclaim(ep);
	return ep->tx_wrs + n <= ep->tx_credit;
}

// A transmit that adds to what the peer's flow control counts (a message,
// remote CQ data) waits while the peer has paused this side: the caller
// returns -FI_EAGAIN, and the peer's Resume arrives with progress.
inline bool rdm_tx_paused(const RdmPeer *peer) noexcept
{
	return peer->tx_paused;
}

// vrma_rdm_conn.cpp: peers and connections (lock held).
// An operation a transmit call was given, as its entry reports it.
struct RdmTxReport {
	void *context;
	uint64_t comp_flags;
	size_t len;
	bool report;
	Cntr *cntr;
};
// An operation that waits in its peer's table for the answer that completes
// it (a delivery-complete or rendezvous send, a commit write). Until
// posted() says its request is on the wire, destruction takes it back out
// of the table and frees it: a refused post leaves no trace behind.
class RdmAwaited {
public:
	// A new operation reported as `r` says, with the peer's next message
	// id, whose request goes on conn and which `answer` completes: 0, or
	// -FI_ENOMEM.
	int create(RdmPeer *peer, const Conn *conn, rdm::MsgType answer,
		   const RdmTxReport &r) noexcept;
	// Enters it in the peer's table: 0, or -FI_ENOMEM.
	int wait() noexcept;
	// Its request was posted: the answer, or the connection's end, frees it.
	void posted() noexcept
	{
		op_->posted = true;
		(void)op_.release();
	}
	RdmTxOp *operator->() const noexcept { return op_.get(); }
	explicit operator bool() const noexcept { return op_ != nullptr; }
	RdmAwaited() = default;
	RdmAwaited(const RdmAwaited &) = delete;
	RdmAwaited &operator=(const RdmAwaited &) = delete;
	~RdmAwaited();

private:
	std::unique_ptr<RdmTxOp> op_;
	bool waiting_ = false;
};

// The connection a transmit to `dest` goes on: 0 and peer/conn;
// -FI_EOPBADSTATE before fi_enable; 1 when dest names no peer: the
// operation is accepted and ends at once in an error entry (as any failed
// operation: the caller returns 0); -FI_EAGAIN while connecting (the CM
// thread makes the connection); another negative FI_E* code when the last
// attempt failed.
// `more`: the transmit has FI_MORE (rdm_more_switch).
int rdm_tx_conn(RdmEp *ep, fi_addr_t dest, const RdmTxReport &op, bool more, RdmPeer *&peer,
		Conn *&conn) noexcept;

// FI_MORE across peers (lock held). Requests held back on one peer's
// connection are posted by the next transmit on that connection without
// FI_MORE; a transmit to another peer would leave them held, so it posts
// them first: rdm_more_flush posts what RdmEp::more_peer holds and forgets
// it, and rdm_more_switch does so for a transmit to `peer` (`more`: with
// FI_MORE, which makes `peer` the one that may hold requests).
void rdm_more_flush(RdmEp *ep) noexcept;
[[gnu::always_inline]] inline void rdm_more_switch(RdmEp *ep, RdmPeer *peer, bool more) noexcept
{
	RdmPeer *held = ep->more_peer.load(std::memory_order_relaxed);
	if (held && held != peer) [[unlikely]]
		rdm_more_flush(ep);
	if (more) [[unlikely]]
		ep->more_peer.store(peer, std::memory_order_relaxed);
}
// Whether a fast path's transmit to `peer` leaves nothing held elsewhere
// (else it takes the long way, which posts that first).
[[gnu::always_inline]] inline bool rdm_more_clear(const RdmEp *ep, const RdmPeer *peer) noexcept
{
	const RdmPeer *held = ep->more_peer.load(std::memory_order_relaxed);
	return !held || held == peer;
}
// fi_atomic(3), FI_MORE: a transmit call that returns an error posts what
// earlier calls held back (their operations then complete; the
// application that retries after -FI_EAGAIN makes progress on them).
// Called without the endpoint's lock, with the call's result.
[[gnu::cold, gnu::noinline]] void rdm_more_flush_unlocked(RdmEp *ep) noexcept;
inline ssize_t rdm_more_on_error(RdmEp *ep, ssize_t rc) noexcept
{
	if (rc < 0 && ep->more_peer.load(std::memory_order_relaxed)) [[unlikely]]
		rdm_more_flush_unlocked(ep);
	return rc;
}
// The peer for an AV handle, or nullptr (-FI_EINVAL logged) for a bad one.
RdmPeer *rdm_peer_of(RdmEp *ep, fi_addr_t addr, int &err) noexcept;
// The connection to send on: 0 and the Conn once connected; -FI_EAGAIN while
// connecting (a connection is started); another negative FI_E* code when
// the last attempt failed (reported once).
int rdm_conn_ready(RdmPeer *peer, Conn *&conn) noexcept;
// rdm_peer_of's cache hit, inlined into the data path; nullptr: ask
// rdm_peer_of. The epoch is read before the entry (see rdm_peer_of).
inline RdmPeer *rdm_peer_cached(RdmEp *ep, fi_addr_t fi_addr) noexcept
{
	static_assert(uint32_t(FI_ADDR_NOTAVAIL) >= RdmEp::kPeerCacheMax);
	const size_t slot = static_cast<uint32_t>(fi_addr);
	if (ep->av->epoch.load(std::memory_order_acquire) == ep->peer_cache_epoch &&
	    slot < ep->peer_cache_n && ep->peer_cache[slot].addr == fi_addr) [[likely]] {
		RdmPeer *peer = ep->peer_cache[slot].peer;
		if (!peer)
			__builtin_unreachable(); // see RdmEp::peer_cache
		return peer;
	}
	return nullptr;
}

// The connection the one-request fast paths may post on: the peer's, unless
// this side agreed to close it (RdmPeer::Idle::Agreed: the long way returns
// -FI_EAGAIN). Its state the caller checks.
inline Conn *rdm_fast_conn(RdmPeer *peer) noexcept
{
	return peer && peer->idle != RdmPeer::Idle::Agreed ? peer->conn.get() : nullptr;
}
// Handles one rdma_cm event of the endpoint's channel; `destroy` is an id
// to destroy once the event was acked (a refused request).
void rdm_cm_event(RdmEp *ep, rdma_cm_event *ev, rdma_cm_id *&destroy) noexcept;
// The connection broke: its waiting operations fail, it is replaced by the
// next send. Safe to call more than once.
void rdm_conn_failed(RdmPeer *peer, Conn *conn, int err) noexcept;
// The connection is up: its ESTABLISHED event, or a first message that
// arrived on it before that event was handled (the accepting side's queue
// pair can send once rdma_accept returned, so the peer's first message can
// overtake the event; a rendezvous read or an answer to it must not find
// the connection still "connecting"). Idempotent.
void rdm_conn_established(RdmPeer *peer, Conn *c) noexcept;
// Frees connections whose send rings drained.
void rdm_reap(RdmEp *ep) noexcept;
// Gives idle peers back once the table is over its high mark (src/
// peer_limit.h): peers with no connection that nothing refers to (no dying
// connection, unexpected message, queued answer or read, FI_MORE hold),
// the longest idle first. Only where no caller holds a peer
// (rdm_progress_reap).
void rdm_reclaim_peers(RdmEp *ep) noexcept;
// fi_cq_readfrom's address of a peer (FI_ADDR_NOTAVAIL when not in the AV),
// kept per peer and looked up again (rdm_peer_fi_addr_lookup) once the AV
// changed: every received message asks.
fi_addr_t rdm_peer_fi_addr_lookup(RdmPeer *peer, uint64_t epoch) noexcept;
inline fi_addr_t rdm_peer_fi_addr(RdmPeer *peer) noexcept
{
	const uint64_t epoch = peer->ep->av->epoch.load(std::memory_order_acquire);
	if (peer->av_epoch != epoch) [[unlikely]]
		return rdm_peer_fi_addr_lookup(peer, epoch);
	return peer->fi_addr;
}
// Unexpected messages that came from senders not in the AV name them once
// the AV has them (the application inserts a sender after its first
// message: a directed receive then takes it, FI_SOURCE reports it). Runs
// before a receive meets the unexpected queues; the walk happens only
// after the AV changed while such messages wait. RdmEp::lock held.
void rdm_resolve_sources_slow(RdmEp *ep) noexcept;
inline void rdm_resolve_sources(RdmEp *ep) noexcept
{
	if (ep->unknown_src_pending) [[unlikely]]
		rdm_resolve_sources_slow(ep);
}
// The source a completion reports for peer: its handle, or its
// FI_AV_USER_ID id. Matching keeps using the handle (rdm_peer_fi_addr).
inline fi_addr_t rdm_peer_report_addr(RdmPeer *peer) noexcept
{
	(void)rdm_peer_fi_addr(peer);
	return peer->report_addr;
}
// At close: every connection down, drained, freed.
void rdm_close_peers(RdmEp *ep) noexcept;

// vrma_rdm_rma.cpp
extern const fi_ops_rma rdm_rma_ops;
// The RmaEvent of an operation into buf (rdm::kRmaEventMsgMax bytes): what
// it did, the bytes it moved, the target keys it touched (n of them,
// repeats dropped), and its remote CQ data when cq_data. Returns its length.
inline size_t rdm_encode_rma_event(uint8_t *buf, rdm::RmaKind kind, uint64_t bytes,
				   const uint64_t *keys, size_t n, bool cq_data,
				   uint64_t data) noexcept
{
	rdm::RdmHeader h;
	h.type = rdm::MsgType::RmaEvent;
	h.status = static_cast<uint8_t>(kind);
	h.length = bytes;
	if (cq_data) {
		h.flags = rdm::kFlagCqData;
		h.cq_data = data;
	}
	uint64_t distinct[rdm::kMaxRmaEventKeys];
	size_t nd = 0;
	for (size_t i = 0; i < n; i++)
		if (std::find(distinct, distinct + nd, keys[i]) == distinct + nd)
			distinct[nd++] = keys[i];
	return rdm::encode_rma_event(buf, h, distinct, nd);
}
// An RmaEvent from a peer (lock held): remote CQ data and FI_RMA_EVENT
// counts.
void rdm_handle_rma_event(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf,
			  size_t len) noexcept;
// What a peer's operation did to this endpoint's memory (lock held), from
// its RmaEvent, CommitRequest or AtomicRequest: its remote CQ data (h's
// kFlagCqData, an entry with `flags` | FI_REMOTE_CQ_DATA and h's length)
// and the FI_RMA_EVENT counts of the endpoint and of the regions `keys`
// (device keys, each once). It may drop the connection (qp_num's): a
// paused peer adding remote CQ data beyond its grace.
void rdm_report_rma_event(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, uint64_t flags,
			  const rdm::RdmHeader &h, const uint64_t *keys, size_t n) noexcept;
// An RmaOp request completed: the operation's entry at its last request
// (or its first error), then the op is freed.
void rdm_rma_op_done(RdmEp *ep, Conn *c, const RdmRmaDone &d) noexcept;
// A CommitRequest from a peer (lock held): reports it as an RmaEvent would
// be, then hands it to the domain's persist worker, or persists it here
// when the worker's queue is full (or the endpoint closes) and answers.
void rdm_handle_commit(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf,
		       size_t len) noexcept;
// A commit request the persist worker serves: msync of a file mapping may
// take milliseconds to seconds of I/O, which must not stall the endpoint
// (every peer's progress runs under its lock). The worker persists with no
// lock held, then answers under the endpoint's lock, only if the peer's
// connection is still the one the request came on (conn_epoch). The peer
// stays alive meanwhile (RdmPeer::persists), the endpoint too (its close
// runs or waits for its jobs first: rdm_persist_finish).
struct RdmCommitJob {
	RdmEp *ep = nullptr;
	RdmPeer *peer = nullptr;
	uint32_t conn_epoch = 0;
	uint32_t msg_id = 0;
	size_t n = 0;
	rdm::CommitRange ranges[rdm::kMaxCommitRanges];
};
// Jobs the domain's worker holds at most; a request beyond them is persisted
// where it arrives (the endpoint then waits for it, as a full queue pushes
// back on every sender, and nothing grows).
inline constexpr size_t kRdmPersistQueueMax = 256;
// vrma_rdm_persist.cpp. Queues a job (endpoint lock held; lock order: endpoint,
// Domain::pmem_lock, the worker's): false when the queue is full or the
// worker cannot start.
bool rdm_persist_submit(const RdmCommitJob &job) noexcept;
// Waits until the worker has served the endpoint's jobs (endpoint lock NOT
// held: the worker takes it to answer). Called by fi_close once no thread
// can hand it new ones.
void rdm_persist_finish(RdmEp *ep) noexcept;
// vrma_rdm_rma.cpp: persists a job's ranges (no lock held), then answers
// under the endpoint's lock.
void rdm_commit_run(RdmCommitJob &job) noexcept;
// The wire::kCmFlag* a peer's connection header announces (Conn::peer_cm_flags).
inline uint8_t rdm_peer_cm_flags(uint16_t conn_flags) noexcept
{
	return ((conn_flags & rdm::kConnFlagRmaEvents) ? wire::kCmFlagRmaEvents : 0) |
	       ((conn_flags & rdm::kConnFlagCommitService) ? wire::kCmFlagCommitService : 0) |
	       ((conn_flags & rdm::kConnFlagDirectWritePmem) ? wire::kCmFlagDirectWritePmem : 0) |
	       ((conn_flags & rdm::kConnFlagNativeAtomics) ? wire::kCmFlagNativeAtomics : 0);
}

// Whether this completion of a request of an operation posted as one chain
// (RmaOp, AtomicNative) ends the operation: its first error, or its last
// request's success. False for a request of a failed post (the call
// returned the error), later errors of a failed operation and the requests
// before the last.
inline bool rdm_op_ends(Conn *c, const RdmRmaDone &d) noexcept
{
	if (!d.report)
		return false;
	if (d.ok)
		return d.seq == d.op_end;
	if (d.op_end == c->failed_op_end)
		return false;
	c->failed_op_end = d.op_end;
	return true;
}

// Posts an operation's chain (room checked by the caller). The requests of a
// failed post that went out complete as vrma's own: the call's error is the
// operation's only outcome.
inline ssize_t rdm_post_op_chain(RdmEp *ep, Conn *conn, ibv_send_wr *wrs, size_t n,
				 const TxOp &top) noexcept
{
	const uint64_t head = conn->tx.head();
	const ssize_t rc = post_send_chain_locked(conn, wrs, n, top);
	const uint64_t pushed = conn->tx.head() - head;
	ep->tx_wrs += pushed; // each slot's retirement takes one back
	if (rc)
		for (uint64_t seq = head; seq < head + pushed; seq++)
			conn->tx.at(seq).aux = rdm_aux(RdmTx::Internal, 0);
	return rc;
}

// FI_FENCE: a fenced operation waits until every earlier operation to the
// peer has completed. The device's fence (IBV_SEND_FENCE) covers reads and
// device atomics; the operations the peer's answer completes (rendezvous
// and delivery-complete sends, commits, emulated atomics, which the target
// applies after a later READ could have run) are waited for here: true
// while any is outstanding, after posting what FI_MORE held back (so that
// it can end). The caller returns -FI_EAGAIN; the answers arrive with
// progress.
inline bool rdm_fence_blocked(const RdmPeer *peer, Conn *conn) noexcept
{
	if (peer->waiting.empty() && peer->atomics.empty()) [[likely]]
		return false;
	if (conn->more_held)
		flush_more(conn);
	return true;
}

// vrma_rdm_keys.cpp: scalable keys and keys of regions registered on
// demand (lock held).
// Whether key must be translated before the device can use it.
inline bool rdm_key_translated(const RdmEp *ep, uint64_t key) noexcept
{
	return ep->scalable_keys || (key & kOnDemandKeyBit);
}
// The remote segments of an operation of `total` bytes translated into the
// peer's device keys and virtual addresses (out, n entries; a device key
// passes unchanged): 0; -FI_EAGAIN while a key is being read from the
// peer's table or asked for (the READs and KeyRequests were started); 1
// when the operation ended in an error entry (FI_EACCES: a key the peer
// does not have, a range outside its region, an access it does not allow,
// a region it could not register); another negative FI_E* code.
int rdm_translate_keys(RdmEp *ep, RdmPeer *peer, Conn *conn, const fi_rma_iov *in, size_t n,
		       size_t total, uint8_t access, const RdmTxReport &op,
		       fi_rma_iov *out) noexcept;
// The cached entry of a key the peer allows `access` on, or nullptr.
inline const keys::KeyEntry *rdm_key_ready(RdmPeer *peer, uint64_t key, uint8_t access) noexcept
{
	auto it = peer->keys.find(key);
	if (it == peer->keys.end() || it->second.state != RemoteKey::State::Ready ||
	    (it->second.entry.access & (access | keys::kAccessUnregistered)) != access)
		return nullptr;
	return &it->second.entry;
}
// A KeyRead request completed.
void rdm_key_read_done(RdmEp *ep, RdmKeyRead *rd, bool ok) noexcept;
// A KeyRequest from a peer: answered (its region registered first).
void rdm_handle_key_request(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf,
			    size_t len) noexcept;
// A KeyAnswer from a peer: the key's state.
void rdm_handle_key_answer(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf,
			   size_t len) noexcept;
// A KeyTable message: where the peer's table is, once, over the connection
// whose authenticated request announced it.
void rdm_handle_key_table(RdmPeer *peer, uint32_t qp_num, const uint8_t *buf, size_t len) noexcept;

// vrma_rdm_atomic.cpp
extern const fi_ops_atomic rdm_atomic_ops;
// An AtomicRequest or AtomicResponse from a peer (lock held).
void rdm_handle_atomic(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf,
		       size_t len) noexcept;
// A native atomic's request completed.
void rdm_atomic_native_done(RdmEp *ep, Conn *c, const RdmRmaDone &d) noexcept;
// The peer's connection went away: its emulated atomics fail with err.
void rdm_fail_atomics(RdmPeer *peer, int err) noexcept;

// vrma_rdm_msg.cpp
extern const fi_ops_msg rdm_msg_ops;
// One send of len bytes (vrma's own: no completion) on conn, copied at the
// call (inline, or into a send buffer); `more` holds it back as FI_MORE
// does, `fence` sets IBV_SEND_FENCE (it waits for earlier reads and device
// atomics on the connection).
ssize_t rdm_post_send_copy(RdmEp *ep, Conn *conn, const uint8_t *src, size_t len, bool more = false,
			   bool fence = false) noexcept;
// An answer to the peer (a header, body_len bytes of body), queued when
// the ring is full.
void rdm_send_answer(RdmEp *ep, RdmPeer *peer, const uint8_t *hdr, const uint8_t *body = nullptr,
		     size_t body_len = 0) noexcept;
// An answer posted on conn now: 0, or -FI_EAGAIN when the ring, the
// endpoint's send credit or its buffers are short (after a reclaim).
ssize_t rdm_post_answer(RdmEp *ep, Conn *conn, const uint8_t *hdr, const uint8_t *body,
			size_t body_len) noexcept;
uint32_t rdm_next_msg_id(RdmPeer *peer) noexcept;
// A registered send buffer for a request on conn (-1: conn holds its
// share, RdmEp::tx_share, or none is free, after a reclaim); giving it
// back; its memory.
int rdm_take_tx_buf(RdmEp *ep, Conn *conn) noexcept;
inline void rdm_give_tx_buf(RdmEp *ep, Conn *conn, uint32_t idx) noexcept
{
	ep->tx_free.push_back(idx); // never reallocates: reserved for every buffer
	conn->bufs_held--;
}
inline uint8_t *rdm_tx_buf(RdmEp *ep, uint32_t idx) noexcept
{
	return ep->tx_bufs.get() + size_t(idx) * ep->buf_stride;
}
// A send buffer taken for an operation not posted yet: given back at
// destruction unless its post succeeded (posted(): the retirement of the
// operation's last request gives it back, rdm_aux_buf).
class RdmTxBufHold {
public:
	RdmTxBufHold(RdmEp *ep, Conn *conn) noexcept : ep_(ep), conn_(conn), idx_(rdm_take_tx_buf(ep, conn)) {}
	~RdmTxBufHold()
	{
		if (idx_ >= 0)
			rdm_give_tx_buf(ep_, conn_, static_cast<uint32_t>(idx_));
	}
	RdmTxBufHold(const RdmTxBufHold &) = delete;
	RdmTxBufHold &operator=(const RdmTxBufHold &) = delete;
	explicit operator bool() const noexcept { return idx_ >= 0; }
	uint8_t *data() const noexcept { return rdm_tx_buf(ep_, static_cast<uint32_t>(idx_)); }
	// The slot mark's buffer field (rdm_aux).
	uint32_t aux_buf() const noexcept { return static_cast<uint32_t>(idx_) + 1; }
	void posted() noexcept { idx_ = -1; }

private:
	RdmEp *ep_;
	Conn *conn_;
	int idx_;
};
// The flags of a receive's entry: its kind, and the message's CQ data.
inline uint64_t rdm_recv_flags(MatchKind kind) noexcept
{
	return FI_RECV | (kind == MatchKind::kTagged ? FI_TAGGED : FI_MSG);
}
inline uint64_t rdm_rx_flags(MatchKind kind, const rdm::RdmHeader &h) noexcept
{
	return rdm_recv_flags(kind) | ((h.flags & rdm::kFlagCqData) ? FI_REMOTE_CQ_DATA : 0);
}

// The byte count of an operation's iov (at most kRdmIovLimit entries, none
// NULL with a length); 0, or -FI_EINVAL with one warning (rdm_iov_refused).
[[gnu::cold, gnu::noinline]] ssize_t rdm_iov_refused(const iovec *iov, size_t count,
						     const char *what) noexcept;
[[gnu::always_inline]] inline ssize_t rdm_iov_total(const iovec *iov, size_t count, const char *what,
						    size_t &total) noexcept
{
	if (count > kRdmIovLimit || (count && !iov)) [[unlikely]]
		return rdm_iov_refused(iov, count, what);
	total = 0;
	for (size_t i = 0; i < count; i++) {
		if (!iov[i].iov_base && iov[i].iov_len) [[unlikely]]
			return rdm_iov_refused(iov, count, what);
		total += iov[i].iov_len;
	}
	return 0;
}

// vrma_rdm_rx.cpp: the receive side.
// fi_recv and fi_trecv (kind), with peek, claim, discard and multi-receive
// buffers: an unexpected message that matches is delivered at once.
ssize_t rdm_recv(RdmEp *ep, const iovec *iov, size_t count, fi_addr_t src, uint64_t tag,
		 uint64_t ignore, uint64_t flags, void *context, MatchKind kind) noexcept;
// fi_recv and fi_trecv of one buffer with the endpoint's rx_op_flags: the
// common case without rdm_recv's flag and vector checks (FI_MULTI_RECV
// among the defaults, or a NULL buffer, go to rdm_recv).
ssize_t rdm_recv_one(RdmEp *ep, void *buf, size_t len, fi_addr_t src, uint64_t tag,
		     uint64_t ignore, void *context, MatchKind kind) noexcept;
// A receive from the endpoint's pool (or the heap), default-initialised;
// nullptr when out of memory. rdm_put_recv takes it back (lock held for
// both).
RdmRecv *rdm_get_recv(RdmEp *ep) noexcept;
void rdm_put_recv(RdmEp *ep, RdmRecv *r) noexcept;
// An unexpected message from the endpoint's pool (or the heap), with room
// for an eager payload of len bytes (payload_bytes()); nullptr when out of
// memory. rdm_free_msg ends one (unlinked), its large payload freed at once
// (lock held for both).
RdmMsg *rdm_new_msg(RdmEp *ep, size_t len) noexcept;
void rdm_free_msg(RdmEp *ep, RdmMsg *m) noexcept;
extern const fi_ops_tagged rdm_tagged_ops;
// A completion of the internal CQ (lock held).
void rdm_handle_wc(RdmEp *ep, const ibv_wc &wc) noexcept;
// fi_cancel of a posted receive.
ssize_t rdm_cancel(RdmEp *ep, void *context) noexcept;
// Posts the n SRQ buffers named by idx (n at most RdmEp::kSrqBatchMax).
int rdm_post_srq(RdmEp *ep, const uint32_t *idx, size_t n) noexcept;
// Retries what waits in the backlogs.
void rdm_retry_backlog(RdmEp *ep) noexcept;
// The peer's connection went away: its waiting sends fail.
void rdm_fail_waiting(RdmPeer *peer, int err) noexcept;
// A message from the peer on queue pair qp_num broke the protocol (it did
// not decode, or answered what it was not asked): one warning naming
// `what`, and the connection it arrived on is dropped (rdm_conn_failed;
// nothing more if that one is already dying). Nothing of the message is
// acted on. The handlers of received messages (lock held) end with it.
[[gnu::cold]] void rdm_drop_malformed(RdmPeer *peer, uint32_t qp_num, const char *what) noexcept;
// Whether a message that arrived on qp_num came over `sent_on`, the
// connection a request went on, so that it may answer that request: it
// must be the peer's current connection and the message must have come
// over it (an endpoint's messages to itself arrive on the accepted end,
// RdmPeer::loopback).
bool rdm_answer_conn_ok(const RdmPeer *peer, const Conn *sent_on, uint32_t qp_num) noexcept;

} // namespace vrma
