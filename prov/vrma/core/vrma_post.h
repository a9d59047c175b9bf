// The data path core shared by the message and RMA entry points: each
// fi_* call builds its work request on the stack and hands it to one of the
// two inlined posting functions below.
#pragma once

#include "vrma_conn.h"
#include "wire/rdm_wire.h"

namespace vrma {

// What the caller of post_send decided about the operation.
struct TxOp {
	void *context;
	uint64_t comp_flags; // flags of the completion entry
	size_t len;
	bool want_completion; // FI_COMPLETION semantics resolved by the caller
	Cntr *cntr;           // counts this operation (forces a signaled request)
	bool more = false;    // FI_MORE: more operations follow, hold the doorbell
	// An inject beyond the inline size: the payload to copy into a bounce
	// buffer. The requests' sges then hold offsets into that buffer.
	const iovec *bounce_src = nullptr;
	size_t bounce_count = 0;
	// Leading requests that carry the payload; the rest (read-back, commit
	// request, event) are the provider's own and keep their buffers.
	size_t payload_wrs = SIZE_MAX;
	uint32_t commit = 0; // TxSlot::commit of every request of the operation
	uint32_t aux = 0;    // TxSlot::aux of every request of the operation
	// An event message for a peer with FI_RMA_EVENT (RDM: or remote CQ
	// data): copied into the connection's event buffer of the last request,
	// which is its send.
	const uint8_t *event = nullptr;
	size_t event_len = 0;
	// A staged message sent as pieces: its MsgHeader, copied into the
	// endpoint's header buffer of the first request's slot, which the
	// first sge then points at.
	const uint8_t *msg_header = nullptr;
	// FI_DELIVERY_COMPLETE write whose last request is its zero-length
	// read-back and nothing else: with FI_MORE the read may be dropped
	// and one read proves the chain (dc_plan).
	bool dc_share = false;
};

// After conn->reclaim: whether the reclaim it ran failed this very
// connection (an error completion it handled). The connection stays
// allocated (only top-level progress frees one), but
// nothing more is posted on it: the caller returns -FI_EAGAIN and the next
// call sees the connection's end.
inline bool conn_lost(const Conn *conn) noexcept
{
	return conn->state.load(std::memory_order_relaxed) != EpState::Connected;
}

// Allocates and registers `bytes` for `bufs` at their first use (tx lock
// held); false, logged, when that fails.
inline bool slot_buffers_ready(Conn *conn, SlotBuffers &bufs, size_t bytes, int access,
			       const char *what) noexcept
{
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	if (bufs.buf) [[likely]]
		return true;
	bufs.buf.reset(new (std::nothrow) uint8_t[bytes]);
	if (bufs.buf)
		bufs.mr.reset(ibv_reg_mr(conn->domain->pd.get(), bufs.buf.get(), bytes, access));
	if (!bufs.mr) {
		VRMA_WARN(FI_LOG_EP_DATA, "cannot set up %zu bytes of %s\n", bytes, what);
		bufs.buf.reset();
		return false;
	}
	return true;
}

// Copies `len` bytes into the buffer of send slot `seq` in `bufs` (`stride`
// bytes per slot) and points `sge` at it (tx lock held): the slot is not
// reused before its request completed.
inline ssize_t copy_to_slot_buffer(Conn *conn, SlotBuffers &bufs, size_t stride, uint64_t seq,
				   const void *src, size_t len, ibv_sge &sge, const char *what) noexcept
{
	if (!slot_buffers_ready(conn, bufs, conn->tx.capacity() * stride, 0, what))
		return -FI_ENOMEM;
	uint8_t *dst = bufs.buf.get() + (seq % conn->tx.capacity()) * stride;
	copy_bytes(dst, src, len);
	sge = {reinterpret_cast<uintptr_t>(dst), static_cast<uint32_t>(len), bufs.mr->lkey};
	return 0;
}

// Copies an injected payload into the bounce buffer of the operation that
// starts at sequence `first` and points its sges there (tx lock held). The
// payload requests' sges hold offsets into the buffer.
// -FI_EAGAIN while that buffer's previous operation is outstanding.
inline ssize_t fill_bounce(Conn *conn, uint64_t first, ibv_send_wr *wrs, size_t n,
			   const TxOp &op) noexcept
{
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	constexpr size_t kCount = Conn::kBounceCount;
	if (!slot_buffers_ready(conn, conn->bounce, kCount * conn->bounce_stride, IBV_ACCESS_LOCAL_WRITE,
				"inject bounce buffers"))
		return -FI_ENOMEM;
	// The buffer's previous user started kCount sequences ago and spans at
	// most kMaxInjectOpWr of them: it has retired once the ring's tail
	// passed it.
	static_assert(kMaxInjectOpWr < kCount, "a bounce buffer can be reused");
	if (conn->tx.outstanding() + n + kMaxInjectOpWr > kCount) {
		conn->reclaim(conn);
		if (conn->tx.outstanding() + n + kMaxInjectOpWr > kCount || conn_lost(conn))
			return -FI_EAGAIN;
	}
	uint8_t *base = conn->bounce.buf.get() + (first % kCount) * conn->bounce_stride;
	size_t off = 0;
	for (size_t i = 0; i < op.bounce_count; i++) {
		copy_bytes(base + off, op.bounce_src[i].iov_base, op.bounce_src[i].iov_len);
		off += op.bounce_src[i].iov_len;
	}
	for (size_t i = 0; i < std::min(n, op.payload_wrs); i++) {
		for (int k = 0; k < wrs[i].num_sge; k++) {
			ibv_sge &sge = wrs[i].sg_list[k];
			sge.addr += reinterpret_cast<uintptr_t>(base);
			sge.lkey = conn->bounce.mr->lkey;
		}
	}
	return 0;
}

// Reports the operations of requests that were accepted but could not be
// posted (a held-back chain whose ibv_post_send failed): their completions
// become errors, nothing is lost. Called with the tx lock held, never with
// more_lock (it takes CQ locks). Reads only wr_id and next of each request.
void report_unposted(Conn *conn, const ibv_send_wr *first, int err) noexcept;

// Requests of a held-back chain whose post failed, copied out (their wr_id)
// so that they are reported once more_lock is released. An operation that
// is held back may flush the chain twice (full, then its own end).
struct Unposted {
	uint64_t wr_id[2 * MoreChain::kMaxWr]; // only the first n are set
	size_t n = 0;
	int err = 0;
};

// Posts the held-back chain (more_lock held) and empties it. Requests the
// device refused go to `unposted`, or, without it, stay held (for a caller
// that may report nothing, ep_cancel_held; the next transmit call posts
// them again and reports a second failure). No request is posted twice:
// they own their ring slots since they were accepted, in order, behind
// everything posted before them.
inline void post_more_locked(Conn *conn, Unposted *unposted) noexcept
{
	VRMA_ASSERT_HELD(conn->more_lock);
	MoreChain &mc = *conn->more;
	if (!mc.nwr)
		return;
	ibv_send_wr *bad = nullptr;
	device_will_post(mc.wr);
	if (int rc = ibv_post_send(conn->qp, mc.wr, &bad)) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "ibv_post_send of a held-back chain: %s\n", strerror(rc));
		size_t k = 0; // requests before `bad` went out
		while (k < mc.nwr && &mc.wr[k] != bad)
			k++;
		if (k == mc.nwr)
			k = 0; // no position given: nothing went out
		if (!unposted) {
			// Keep the tail; its sges stay where they are.
			for (size_t i = k; i < mc.nwr; i++) {
				mc.wr[i - k] = mc.wr[i];
				mc.wr[i - k].next = nullptr;
				if (i > k)
					mc.wr[i - k - 1].next = &mc.wr[i - k];
			}
			mc.nwr -= k;
			return;
		}
		for (size_t i = k; i < mc.nwr; i++)
			unposted->wr_id[unposted->n++] = mc.wr[i].wr_id;
		unposted->err = rc;
	}
	mc.nwr = 0;
	mc.nsge = 0;
	mc.inline_used = 0;
	conn->more_held.store(false, std::memory_order_relaxed);
	conn->tx_one_room.store(conn->tx_one_limit, std::memory_order_relaxed);
}

[[gnu::noinline]] inline void report_unposted_slow(Conn *conn, const Unposted &u) noexcept
{
	ibv_send_wr wrs[2 * MoreChain::kMaxWr];
	for (size_t i = 0; i < u.n; i++) {
		wrs[i].wr_id = u.wr_id[i];
		wrs[i].next = i + 1 < u.n ? &wrs[i + 1] : nullptr;
	}
	report_unposted(conn, wrs, u.err);
}

inline void report_unposted(Conn *conn, const Unposted &u) noexcept
{
	if (u.n) [[unlikely]]
		report_unposted_slow(conn, u);
}

// Posts the held-back chain (tx lock held, not more_lock). Only posters,
// which hold the tx lock, set more_held: a false read here is not stale.
inline void flush_more(Conn *conn) noexcept
{
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	if (!conn->more_held.load(std::memory_order_relaxed))
		return;
	Unposted u;
	{
		std::lock_guard<FastMutex> guard(conn->more_lock);
		if (!conn->more_held.load(std::memory_order_relaxed))
			return;
		post_more_locked(conn, &u);
	}
	report_unposted(conn, u);
}

static_assert(kMaxRmaIov + 1 <= MoreChain::kMaxWr, "an unsplit operation fits an empty chain");
static_assert(kMaxSge + kMaxOpWr <= MoreChain::kMaxWr * kMaxSge, "an operation's sges fit");

// Whether n requests fit the held-back chain beside `spare_wr` more
// requests without sges (more_lock held).
[[gnu::always_inline]] inline bool chain_fits(const MoreChain &mc, const ibv_send_wr *wrs, size_t n, size_t spare_wr) noexcept
{
	size_t nsge = 0, inline_bytes = 0;
	for (size_t i = 0; i < n; i++) {
		nsge += static_cast<size_t>(wrs[i].num_sge);
		if (wrs[i].send_flags & IBV_SEND_INLINE)
			for (int k = 0; k < wrs[i].num_sge; k++)
				inline_bytes += wrs[i].sg_list[k].length;
	}
	return mc.nwr + n + spare_wr <= MoreChain::kMaxWr &&
	       mc.nsge + nsge <= MoreChain::kMaxWr * kMaxSge &&
	       mc.inline_used + inline_bytes <= mc.inline_cap;
}

// Appends the operation's requests to the held-back chain, posting what was
// held first when they do not fit (n <= MoreChain::kMaxWr; more_lock held).
[[gnu::always_inline]] inline void hold_back(Conn *conn, const ibv_send_wr *wrs, size_t n, Unposted &unposted) noexcept
{
	VRMA_ASSERT_HELD(conn->more_lock);
	MoreChain &mc = *conn->more;
	if (!chain_fits(mc, wrs, n, 0))
		post_more_locked(conn, &unposted);
	for (size_t i = 0; i < n; i++) {
		ibv_send_wr &w = mc.wr[mc.nwr];
		w = wrs[i];
		w.sg_list = &mc.sge[mc.nsge];
		const bool copy = wrs[i].send_flags & IBV_SEND_INLINE;
		for (int k = 0; k < wrs[i].num_sge; k++) {
			ibv_sge sge = wrs[i].sg_list[k];
			if (copy && sge.length) {
				uint8_t *dst = mc.inline_buf.get() + mc.inline_used;
				memcpy(dst, reinterpret_cast<const void *>(sge.addr), sge.length);
				sge.addr = reinterpret_cast<uintptr_t>(dst);
				mc.inline_used += sge.length;
			}
			mc.sge[mc.nsge++] = sge;
		}
		w.next = nullptr;
		if (mc.nwr)
			mc.wr[mc.nwr - 1].next = &w;
		mc.nwr++;
	}
	conn->more_held.store(true, std::memory_order_relaxed);
	conn->tx_one_room.store(0, std::memory_order_relaxed);
}

inline ssize_t post_failed(int rc, const char *what) noexcept
{
	int fi = errno_to_fi(rc, ErrPath::Post);
	if (fi != -FI_EAGAIN)
		VRMA_WARN(FI_LOG_EP_DATA, "%s: %s\n", what, strerror(rc < 0 ? -rc : rc));
	return fi;
}

// The endpoint's tx lock, unless the application serializes its transmits
// (Ep::tx_serialized).
class TxGuard {
public:
	explicit TxGuard(Conn *conn) noexcept : lock_(conn->tx_serialized ? nullptr : &conn->tx_lock)
	{
		if (lock_)
			lock_->lock();
	}
	~TxGuard()
	{
		if (lock_)
			lock_->unlock();
	}
	TxGuard(const TxGuard &) = delete;
	TxGuard &operator=(const TxGuard &) = delete;

private:
	CheckedMutex *lock_;
};

inline ssize_t post_send_chain_locked(Conn *conn, ibv_send_wr *wrs, size_t n, const TxOp &op) noexcept;

// Posts the work requests of one operation (a chain of n, linked here) with
// one doorbell. Only the last request carries the operation's completion
// and counter; the others are unsignaled. Requests that need no completion
// are unsignaled too, except one in every kSignalPeriod so that slots come
// back (RC completes send requests in order). Every slot records the operation's
// last sequence so an error is reported once per operation.
inline ssize_t post_send_chain(Conn *conn, ibv_send_wr *wrs, size_t n, const TxOp &op) noexcept
{
	TxGuard guard(conn);
	return post_send_chain_locked(conn, wrs, n, op);
}

// Operation flags the one-request fast paths (rma_one, send_one) handle;
// any other flag takes the long way.
inline constexpr uint64_t kOneWrOpFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
					  FI_TRANSMIT_COMPLETE | FI_REMOTE_CQ_DATA | FI_MORE;

// A desc given for a non-empty buffer that its region does not cover (or
// a closed region's): the fast paths take the long way, where build_sges
// refuses it. Without this the device fails the request with a local
// protection error, which ends the connection.
[[gnu::always_inline]] inline bool desc_misses(const void *desc, const void *buf, size_t len) noexcept
{
	return desc && len && !static_cast<const MrDesc *>(desc)->covers(buf, len);
}

// How the one buffer of a fast-path call other than an inject goes
// (rma_fast, send_fast; an inject's is inline data or the long way): as
// inline data (a desc given must still hold it: build_sges refuses it the
// long way), by its desc's key, or the long way: `slow` (the caller's own
// reasons), an empty buffer, a desc that does not hold it, none for a
// buffer beyond inline data, more than `max` bytes. `copied`: the buffer
// is not empty and fits inline data. (A callable for the long way would
// put the caller's arguments on the stack.)
enum class FastBuf : uint8_t { Slow, Inline, Keyed };
[[gnu::always_inline]] inline FastBuf fast_buf(bool slow, bool copied, const MrDesc *d,
					       const void *buf, size_t len, size_t max) noexcept
{
	if (slow) [[unlikely]]
		return FastBuf::Slow;
	if (copied)
		return (d ? d->holds(buf, len) : buf != nullptr) ? FastBuf::Inline : FastBuf::Slow;
	if (len && d && len <= max && d->holds(buf, len)) [[likely]]
		return FastBuf::Keyed;
	return FastBuf::Slow;
}

// A fast-path call's one buffer posted (post(lkey, send_flags)) or sent
// the long way (long_way()), as fast_buf says; an inject's is inline data
// or the long way, a branch per term (or-ed, the compiler tests them as a
// chain of flags, which costs more).
template <bool Inject, class Post, class LongWay>
[[gnu::always_inline]] inline ssize_t post_one_buffer(bool slow, bool copied, const MrDesc *d,
						      const void *buf, size_t len, size_t max,
						      Post &&post, LongWay &&long_way) noexcept
{
	if constexpr (Inject) {
		if (slow) [[unlikely]]
			return long_way();
		if (!copied) [[unlikely]]
			return long_way();
		if (!buf) [[unlikely]]
			return long_way();
		return post(0, IBV_SEND_INLINE);
	}
	// Two posts, each with its constants; empty buffers take the long way.
	switch (fast_buf(slow, copied, d, buf, len, max)) {
	case FastBuf::Inline:
		return post(0, IBV_SEND_INLINE);
	case FastBuf::Keyed:
		return post(d->key(), 0);
	case FastBuf::Slow:
		break;
	}
	return long_way();
}

// The one work request of a fast-path operation (rma_one, send_one): `sge`
// covers buf/len with desc's key (inline data needs none); the caller
// checked the desc (desc_misses). Only the fields
// the device reads are set, since zeroing the whole request costs more than
// the rest of the fast path; remote_addr and rkey are set even for sends,
// and imm_data always, because FI_MORE copies the request whole. With
// FI_REMOTE_CQ_DATA the opcode becomes `imm_opcode`.
[[gnu::always_inline]] inline void fill_one_wr(ibv_send_wr &wr, ibv_sge &sge, ibv_wr_opcode opcode,
					       ibv_wr_opcode imm_opcode, const void *buf,
					       size_t len, void *desc, bool copied,
					       uint64_t addr, uint64_t key, uint64_t flags,
					       uint64_t data) noexcept
{
	sge = {reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(len),
	       desc ? static_cast<const MrDesc *>(desc)->key() : 0};
	wr.sg_list = &sge;
	wr.num_sge = len != 0;
	wr.opcode = opcode;
	wr.send_flags = copied && len ? IBV_SEND_INLINE : 0;
	wr.imm_data = 0;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = static_cast<uint32_t>(key);
	if (flags & FI_REMOTE_CQ_DATA) {
		wr.opcode = imm_opcode;
		wr.imm_data = htonl(static_cast<uint32_t>(data));
	}
}

// The long way for post_send_one (tx lock held), out of the inlined path.
[[gnu::noinline]] inline ssize_t post_one_slow(Conn *conn, ibv_send_wr &wr, void *context,
					       uint64_t comp_flags, size_t len, bool report,
					       Cntr *cntr, bool more, uint32_t aux) noexcept
{
	TxOp op{context, comp_flags, len, report, cntr, more};
	op.aux = aux;
	return post_send_chain_locked(conn, &wr, 1, op);
}

// Signals a one-request post's request at seq (tx lock held): adds
// IBV_SEND_SIGNALED to send_flags when its completion is reported or
// counted, it holds an RDM send buffer, or a signal period has passed since
// the last signaled one, which it then is.
[[gnu::always_inline]] inline void tx_signal(Conn *conn, uint64_t seq, bool report, Cntr *cntr,
					     uint32_t aux, unsigned &send_flags) noexcept
{
	if (report || cntr || (aux & kAuxHeldBuffer) ||
	    seq - conn->last_signaled >= conn->signal_period) {
		send_flags |= IBV_SEND_SIGNALED;
		conn->last_signaled = seq;
	}
}

// The device refused a one-request post (post_send_one, post_fast; tx
// lock held): its slot is taken back, and the next request is signaled
// (the refused one may have been the signal a period needs: signaling
// early is always safe, and spares the fast paths keeping the old mark
// alive across the doorbell).
[[gnu::noinline, gnu::cold]] inline ssize_t post_one_refused(Conn *conn, int rc) noexcept
{
	conn->tx.unpush();
	conn->last_signaled = conn->tx.head() - conn->signal_period;
	return post_failed(rc, "ibv_post_send");
}

// One work request that needs nothing of post_send_chain's extras (no
// bounce buffer, event or header; nothing held back by FI_MORE; room in the
// queue): the data path's common case, straight to the device, inlined into
// each entry point. Anything else goes the long way. `wr` needs no wr_id or
// next.
[[gnu::always_inline]] inline ssize_t post_send_one(Conn *conn, ibv_send_wr &wr, void *context,
						     uint64_t comp_flags, size_t len, bool report,
						     Cntr *cntr, bool more, uint32_t aux = 0) noexcept
{
	TxGuard guard(conn);
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	// FI_MORE (and what it held back: tx_one_room 0) takes the long way:
	// batching saves the doorbell, not these instructions. tx_one_limit is
	// 0 for a credited queue: its posts take the long way.
	if (more || conn->state.load(std::memory_order_acquire) != EpState::Connected ||
	    conn->tx.outstanding() >= conn->tx_one_room.load(std::memory_order_relaxed)) [[unlikely]]
		return post_one_slow(conn, wr, context, comp_flags, len, report, cntr, more, aux);
	const uint64_t seq = conn->tx.head();
	TxSlot &s = conn->tx.at(seq);
	s.fill(seq, seq, context, comp_flags, len, report, cntr, 0, wr_takes_recv(wr.opcode), aux);
	tx_signal(conn, seq, report, cntr, aux, wr.send_flags);
	wr.wr_id = reinterpret_cast<uintptr_t>(&s);
	wr.next = nullptr;
	conn->tx.publish(seq);
	ibv_send_wr *bad;
	device_will_post(&wr);
	if (int rc = ibv_post_send(conn->qp, &wr, &bad)) [[unlikely]]
		return post_one_refused(conn, rc);
	return 0;
}

// The arguments of the fast-path post (post_fast): what a call patches
// into the connection's prebuilt request and its slot. Scalars rather than
// a struct: a struct whose address the locked variant takes is built on
// the stack on the serialized path too.
#define VRMA_FAST_POST_PARAMS                                                                     \
	Conn *conn, uintptr_t buf, size_t len, uint32_t lkey, unsigned send_flags,                 \
		uint64_t addr, uint32_t rkey, uint32_t imm_be, void *context, bool report,         \
		Cntr *cntr, uint64_t comp_flags, uint32_t aux
#define VRMA_FAST_POST_ARGS                                                                       \
	conn, buf, len, lkey, send_flags, addr, rkey, imm_be, context, report, cntr, comp_flags,   \
		aux

// post_fast's long way (tx lock held): the request built on the stack, as
// the general path takes it (with the header, Conn::one_sge[0], first).
[[gnu::noinline, gnu::cold]] inline ssize_t post_fast_unready(ibv_wr_opcode opcode, bool hdr,
							      VRMA_FAST_POST_PARAMS) noexcept
{
	ibv_sge sge[2] = {conn->one_sge[0], {buf, static_cast<uint32_t>(len), lkey}};
	ibv_send_wr wr{};
	wr.sg_list = hdr ? sge : sge + 1;
	wr.num_sge = hdr + (len != 0);
	wr.opcode = opcode;
	wr.send_flags = send_flags;
	wr.imm_data = imm_be;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	return post_one_slow(conn, wr, context, comp_flags, len, report, cntr, false, aux);
}

// post_fast with the send queue serialized (tx lock held or not needed).
// imm_be is read only for the opcodes that carry an immediate, addr and
// rkey only for RDMA opcodes. Hdr: Conn::one_hdr goes first (len may then
// be 0), on a connection whose one_wr is an IBV_WR_SEND of inline data
// (opcode and the payload's lkey 0 set up with it: RDM). Connected: the
// caller saw the connection connected under the lock that serializes it
// (an RDM endpoint's), so it still is.
// Bare: an MSG inject (no context, report or aux; counted on the
// endpoint's counter of its kind), its slot left unwritten (kTxBare).
template <ibv_wr_opcode Op, bool Hdr = false, bool Connected = false, bool Bare = false>
[[gnu::always_inline]] inline ssize_t post_fast_held(VRMA_FAST_POST_PARAMS) noexcept
{
	constexpr bool imm = Op == IBV_WR_RDMA_WRITE_WITH_IMM || Op == IBV_WR_SEND_WITH_IMM;
	static_assert(!Hdr || Op == IBV_WR_SEND, "a header post is the connection's prebuilt send");
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	const uint64_t seq = conn->tx.head();
	if ((!Connected && conn->state.load(std::memory_order_acquire) != EpState::Connected) ||
	    seq - conn->tx.tail() >= conn->tx_one_room.load(std::memory_order_relaxed)) [[unlikely]]
		return post_fast_unready(Op, Hdr, VRMA_FAST_POST_ARGS);
	static_assert(!Bare || (!Hdr && !Connected && Op != IBV_WR_RDMA_READ),
		      "a bare post is an MSG inject");
	TxSlot &s = conn->tx.at(seq);
	const bool inline_data = send_flags & IBV_SEND_INLINE;
	uintptr_t wr_id = reinterpret_cast<uintptr_t>(&s);
	if constexpr (Bare) {
		// The slot is implied (kTxBare): nothing reported, nothing held.
		constexpr bool send = Op == IBV_WR_SEND || Op == IBV_WR_SEND_WITH_IMM;
		wr_id |= kTxBare | (send ? kTxBareSend : 0);
		tx_signal(conn, seq, false, cntr, 0, send_flags);
	} else {
		s.fill(seq, seq, context, comp_flags, len, report, cntr, 0, wr_takes_recv(Op), aux);
		tx_signal(conn, seq, report, cntr, aux, send_flags);
	}
	ibv_send_wr &wr = conn->one_wr;
	if constexpr (Hdr) {
		// The connection's own kind of request: opcode and key set up
		// with it (inline payload, no key).
		conn->one_sge[1].addr = buf;
		conn->one_sge[1].length = static_cast<uint32_t>(len);
		wr.num_sge = 1 + (len != 0);
	} else {
		conn->one_sge[0].addr = buf;
		conn->one_sge[0].length = static_cast<uint32_t>(len);
		if (!inline_data)
			conn->one_sge[0].lkey = lkey;
		wr.num_sge = 1;
		wr.opcode = Op;
	}
	wr.wr_id = wr_id;
	wr.send_flags = send_flags;
	if constexpr (imm)
		wr.imm_data = imm_be;
	if constexpr (Op != IBV_WR_SEND && Op != IBV_WR_SEND_WITH_IMM) {
		wr.wr.rdma.remote_addr = addr;
		wr.wr.rdma.rkey = rkey;
	}
	conn->tx.publish(seq);
	device_will_post(&wr);
	if (int rc = ibv_post_send(conn->qp, &wr, &conn->one_bad)) [[unlikely]]
		return post_one_refused(conn, rc);
	return 0;
}

// post_fast under the connection's tx lock, out of line: the lock's calls
// would cost the serialized path its registers.
template <ibv_wr_opcode Op, bool Bare>
[[gnu::noinline]] inline ssize_t post_fast_locked(VRMA_FAST_POST_PARAMS) noexcept
{
	TxGuard guard(conn);
	return post_fast_held<Op, false, false, Bare>(VRMA_FAST_POST_ARGS);
}

// The one-request fast path's post: the connection's prebuilt request
// (Conn::one_wr) patched with this operation's fields, one slot, one
// doorbell. The caller checked everything about the arguments (they fit
// one request, the key and desc are good, the peer needs nothing more);
// this checks the connection (connected, room in the ring, nothing held by
// FI_MORE, not credited) and sends anything else the long way. len is not
// 0 (one sge); send_flags is IBV_SEND_INLINE or 0. An RDM connection,
// serialized by its endpoint's lock, calls post_fast_held. Bare: an MSG
// inject (kTxBare). Serial: Conn::tx_serialized, known when the caller's
// ops table was chosen (rma_ops_for, msg_ops_for).
template <ibv_wr_opcode Op, bool Bare, bool Serial>
[[gnu::always_inline]] inline ssize_t post_fast(VRMA_FAST_POST_PARAMS) noexcept
{
	if constexpr (Serial)
		return post_fast_held<Op, false, false, Bare>(VRMA_FAST_POST_ARGS);
	else
		return post_fast_locked<Op, Bare>(VRMA_FAST_POST_ARGS);
}

#undef VRMA_FAST_POST_ARGS
#undef VRMA_FAST_POST_PARAMS

// A credited send queue (Conn::tx_credits) takes one credit per request
// from its CQ's pool (tx lock held): -FI_EAGAIN when the pool has fewer,
// after posting what FI_MORE held (its requests hold credits until they
// complete) and reclaiming what the device finished.
[[gnu::noinline]] inline ssize_t take_tx_credits(Conn *conn, size_t n) noexcept
{
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	if (cq_credit_take(conn->tx_credits, n))
		return 0;
	flush_more(conn);
	conn->reclaim(conn);
	return !conn_lost(conn) && cq_credit_take(conn->tx_credits, n) ? 0 : -FI_EAGAIN;
}

// ensure_more's first time: the chain allocated.
[[gnu::noinline, gnu::cold]] inline bool alloc_more(Conn *conn) noexcept
{
	try {
		auto mc = std::make_unique<MoreChain>();
		mc->inline_cap = MoreChain::kMaxWr * conn->inline_size;
		mc->inline_buf = std::make_unique<uint8_t[]>(mc->inline_cap);
		conn->more = std::move(mc);
	} catch (...) {
		return false;
	}
	return true;
}

// The held-back chain, allocated at the first FI_MORE (tx lock held);
// false without memory. Inlined: every FI_MORE operation asks.
[[gnu::always_inline]] inline bool ensure_more(Conn *conn) noexcept
{
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	if (conn->more) [[likely]]
		return true;
	return alloc_more(conn);
}

// Delivery-complete writes sharing one read-back: the plan and its hazards
// are src/dc_chain.h's; the posting is here. The writes never leave the
// chain before a read's slot follows them in the ring: every post of the
// chain (FI_MORE's end, a full chain or ring, the connection's end seen by
// a poster) closes first; ep_cancel_held posts them into the error state,
// where each flushes on its own.

// Queues the read that proves the deferred writes (tx lock and more_lock
// held): signaled, no completion of its own. Its ring slot and chain entry
// were kept free when the writes were deferred.
[[gnu::noinline]] inline void close_deferred_locked(Conn *conn) noexcept
{
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	VRMA_ASSERT_HELD(conn->more_lock);
	conn->dc_open = false;
	MoreChain &mc = *conn->more;
	if (!mc.nwr)
		return; // the connection ended: ep_cancel_held posted them
	const uint64_t seq = conn->tx.head();
	TxSlot &s = conn->tx.next();
	s.fill(seq, seq, nullptr, 0, 0, false, nullptr, 0, false);
	s.dc = DcMark::Closer;
	ibv_send_wr rd{};
	rd.wr_id = reinterpret_cast<uintptr_t>(&s);
	rd.opcode = IBV_WR_RDMA_READ;
	rd.send_flags = IBV_SEND_SIGNALED;
	rd.wr.rdma.remote_addr = mc.dc_addr;
	rd.wr.rdma.rkey = mc.dc_rkey;
	conn->last_signaled = seq;
	conn->tx.push();
	conn->domain->read_backs.fetch_add(1, std::memory_order_relaxed);
	Unposted unposted; // stays empty: the read fits
	hold_back(conn, &rd, 1, unposted);
}

// close_deferred_locked, with the tx lock only.
[[gnu::noinline]] inline void close_deferred(Conn *conn) noexcept
{
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	std::lock_guard<FastMutex> guard(conn->more_lock);
	close_deferred_locked(conn);
}

// How an operation takes part in sharing (tx lock held; dc_open or
// op.dc_share): Deferred (drop the read-back), Proof (its read-back proves
// the writes waiting), None (as alone; what waited got its read, queued
// here).
[[gnu::noinline]] inline DcMark dc_plan(Conn *conn, const ibv_send_wr *wrs, size_t n,
					const TxOp &op) noexcept
{
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	const dc::Op dop{op.dc_share, op.more, n};
	if (dc::may_defer(dop, conn->tx_credits != nullptr) && ensure_more(conn)) {
		const dc::Queue q{conn->tx.head(), conn->tx.outstanding(), conn->tx_depth,
				  conn->last_signaled, conn->signal_period};
		if (dc::window_fits(dop, q)) {
			// The writes, then room in the chain for the read.
			std::lock_guard<FastMutex> guard(conn->more_lock);
			if (chain_fits(*conn->more, wrs, n - 1, 1))
				return DcMark::Deferred;
		}
	}
	const dc::Plan plan = dc::plan_undeferred(dop, conn->dc_open, MoreChain::kMaxWr);
	if (plan.close_first)
		close_deferred(conn);
	return plan.mark;
}

// After the slots of an operation that takes part in sharing were filled
// (tx lock held): their marks, and their signals (deferred: none; a proof:
// only its read). A deferred write's dropped read (wrs[n]) says where the
// closing read goes; it is held next, and opens the deferral.
[[gnu::noinline]] inline void dc_mark(Conn *conn, ibv_send_wr *wrs, size_t n, uint64_t first,
				      DcMark mark, uint64_t prev_signaled) noexcept
{
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	for (size_t i = 0; i < n; i++) {
		conn->tx.at(first + i).dc = mark;
		wrs[i].send_flags &= ~static_cast<unsigned>(IBV_SEND_SIGNALED);
	}
	const dc::Signals sig = dc::signals_for(mark, first, n, prev_signaled);
	if (sig.signal_last)
		wrs[n - 1].send_flags |= IBV_SEND_SIGNALED;
	conn->last_signaled = sig.last_signaled;
	conn->dc_open = sig.open;
	if (mark == DcMark::Deferred) {
		conn->more->dc_addr = wrs[n].wr.rdma.remote_addr;
		conn->more->dc_rkey = wrs[n].wr.rdma.rkey;
	}
}

inline ssize_t post_send_chain_locked(Conn *conn, ibv_send_wr *wrs, size_t n, const TxOp &op) noexcept
{
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	if (conn->state.load(std::memory_order_acquire) != EpState::Connected) [[unlikely]] {
		// Requests the connection's end could not post (ep_cancel_held
		// keeps what the device refused) get their second chance here,
		// where a failure can be reported.
		if (conn->dc_open)
			close_deferred(conn);
		flush_more(conn);
		// An RDM connection (conn->peer) is Connected when its caller
		// took it (rdm_tx_conn, or a check of its own): it ended since,
		// in progress the caller ran (conn_lost). That is no error of
		// the call: -FI_EAGAIN, as every other post that finds it lost,
		// and the retry meets the connection's end (the peer's error,
		// or a new connection). Nothing of the call stays behind:
		// operations entered in the peer's tables before the post are
		// left to their caller by the failure's sweep (RdmTxOp::posted,
		// RdmAtomicOp::posted), and a rendezvous' reads or an answer
		// whose post was refused so end with the connection
		// (rdm_post_reads, send_answer). A MSG endpoint's transmit after its
		// connection's end is the application's error.
		if (conn->peer)
			return -FI_EAGAIN;
		VRMA_WARN(FI_LOG_EP_DATA, "transmit on an endpoint that is not connected\n");
		return -FI_ENOTCONN;
	}
	DcMark dc = DcMark::None;
	if (conn->dc_open | op.dc_share) [[unlikely]] {
		dc = dc_plan(conn, wrs, n, op);
		if (dc == DcMark::Deferred)
			n--; // the read-back, last, is dropped
	}
	if (conn->tx.outstanding() + n > conn->tx_depth) [[unlikely]] {
		if (n > conn->tx_cap) {
			VRMA_WARN(FI_LOG_EP_DATA, "operation needs %zu work requests; the send queue holds %zu\n", n,
				  conn->tx_cap);
			return -FI_EINVAL;
		}
		// Automatic progress: post what FI_MORE held back (its slots can
		// only come back once posted), reclaim what the device finished,
		// and only then say the queue is full.
		if (conn->dc_open)
			close_deferred(conn);
		flush_more(conn);
		conn->reclaim(conn);
		// One longer than tx_depth goes alone, into the spare capacity.
		const size_t out = conn->tx.outstanding();
		if ((out + n > conn->tx_depth && (n <= conn->tx_depth || out != 0)) || conn_lost(conn))
			return -FI_EAGAIN;
	}
	const uint64_t first = conn->tx.head();
	const uint64_t last = first + n - 1;
	const uint64_t prev_signaled = conn->last_signaled;
	if (op.event_len) [[unlikely]] {
		// The event send is the operation's last request: MSG endpoints'
		// events (wire::RmaEvent), RDM endpoints' or their larger commit
		// requests, which get buffers of their own.
		constexpr size_t kStride =
			(std::max(wire::kRmaEventMax, rdm::kRmaEventMsgMax) + 7) & ~size_t(7);
		constexpr size_t kCommitStride = (rdm::kCommitRequestMax + 7) & ~size_t(7);
		const bool commit = op.event_len > kStride;
		if (ssize_t rc = copy_to_slot_buffer(
			    conn, commit ? conn->commit_bufs : conn->event_bufs,
			    commit ? kCommitStride : kStride, last, op.event, op.event_len,
			    wrs[n - 1].sg_list[0], commit ? "commit request buffers" : "RMA event buffers"))
			return rc;
	}
	if (op.bounce_src) {
		if (ssize_t rc = fill_bounce(conn, first, wrs, n, op))
			return rc;
	}
	if (op.msg_header) {
		// The header leads the first piece.
		constexpr size_t kLen = sizeof(wire::MsgHeader);
		if (ssize_t rc = copy_to_slot_buffer(conn, conn->msg_hdr_bufs, kLen, first, op.msg_header,
						     kLen, wrs[0].sg_list[0], "message headers"))
			return rc;
	}
	if (conn->tx_credits) [[unlikely]] {
		if (ssize_t rc = take_tx_credits(conn, n))
			return rc;
	}
	for (size_t i = 0; i < n; i++) {
		const uint64_t seq = first + i;
		TxSlot &s = conn->tx.next();
		s.fill(seq, last, op.context, op.comp_flags, op.len, op.want_completion, op.cntr, op.commit,
		       wr_takes_recv(wrs[i].opcode), op.aux);
		const bool needed = seq == last && (op.want_completion || op.cntr || (op.aux & kAuxHeldBuffer));
		// Unsignaled requests come back only behind a signaled one: one in
		// every kSignalPeriod is signaled, so a full ring or a busy bounce
		// buffer is always reclaimable by polling the CQ.
		if (needed || seq - conn->last_signaled >= conn->signal_period) {
			wrs[i].send_flags |= IBV_SEND_SIGNALED;
			conn->last_signaled = seq;
		}
		wrs[i].wr_id = reinterpret_cast<uintptr_t>(&s);
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
		conn->tx.push();
	}
	if (op.dc_share) [[unlikely]] {
		// A shared write never carries a pmem commit (TxSlot::commit).
		if (dc != DcMark::None)
			dc_mark(conn, wrs, n, first, dc, prev_signaled);
		if (dc != DcMark::Deferred)
			conn->domain->read_backs.fetch_add(1, std::memory_order_relaxed);
	}
	// FI_MORE: hold the doorbell (inline payloads are copied into the
	// chain: the caller may reuse its buffer at once).
	const bool held = conn->more_held.load(std::memory_order_relaxed);
	if (op.more || held) [[unlikely]] {
		if (n > MoreChain::kMaxWr) {
			// A split operation too long to hold: it goes now, after
			// what was held (one doorbell each).
			if (held)
				flush_more(conn);
			goto post_now;
		}
		if (!ensure_more(conn))
			goto post_now; // no memory for batching: post at once
		Unposted unposted;
		{
			std::lock_guard<FastMutex> guard(conn->more_lock);
			hold_back(conn, wrs, n, unposted);
			// The connection may have ended since the check above:
			// ep_cancel_held posted what was held then, not these, and
			// no one else will. Posted now, they flush (or run, if the
			// QP is not in the error state yet): one completion each;
			// deferred writes with their read behind them.
			if (!op.more || conn->state.load() != EpState::Connected) {
				if (conn->dc_open) [[unlikely]]
					close_deferred_locked(conn);
				post_more_locked(conn, &unposted);
			}
		}
		report_unposted(conn, unposted);
		return 0;
	}
post_now:
	ibv_send_wr *bad = nullptr;
	device_will_post(wrs);
	if (int rc = ibv_post_send(conn->qp, wrs, &bad)) [[unlikely]] {
		// Requests before `bad` went out; take back the slots of the rest.
		size_t posted = 0;
		while (posted < n && &wrs[posted] != bad)
			posted++;
		for (size_t i = posted; i < n; i++)
			conn->tx.unpush();
		if (conn->tx_credits)
			cq_credit_give(conn->tx_credits, n - posted);
		for (size_t i = 0; i < posted; i++) {
			// Part of a failed operation: no completion, no count.
			TxSlot &s = conn->tx.at(first + i);
			s.report = false;
			s.cntr = nullptr;
		}
		if (!posted)
			conn->last_signaled = prev_signaled;
		return post_failed(rc, "ibv_post_send");
	}
	return 0;
}

inline ssize_t post_send(Conn *conn, ibv_send_wr &wr, const TxOp &op) noexcept
{
	return post_send_chain(conn, &wr, 1, op);
}

// Fills scatter/gather entries from an iovec and its descriptors. With
// FI_MR_LOCAL every non-empty segment needs a descriptor, unless the data is
// copied (inline, or into a bounce buffer): up to keyless_max bytes. A
// receive buffer may be larger than any message (max_msg_size). A desc
// given for a non-empty segment must cover the whole segment, whether or
// not the device reads it (copied data) — one rule, whatever the size —
// and must not be a closed region's (MrDesc): else -FI_EINVAL.
inline ssize_t build_sges(const Conn *conn, const iovec *iov, void *const *desc, size_t count,
			  size_t limit, ibv_sge *sge, size_t &total, size_t keyless_max,
			  bool receive = false) noexcept
{
	if (count > limit) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "%zu segments exceed iov_limit %zu\n", count, limit);
		return -FI_EINVAL;
	}
	if (count && !iov) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "NULL iov with count %zu\n", count);
		return -FI_EINVAL;
	}
	total = 0;
	bool need_keys = false;
	for (size_t i = 0; i < count; i++) {
		if (!iov[i].iov_base && iov[i].iov_len) [[unlikely]] {
			VRMA_WARN(FI_LOG_EP_DATA, "NULL buffer of length %zu\n", iov[i].iov_len);
			return -FI_EINVAL;
		}
		// An sge holds 32 bits of length. A receive segment is capped at
		// max_msg_size (no message is longer); a send longer than that
		// is refused below; RMA splits with the full lengths (SgeCursor).
		size_t len = iov[i].iov_len;
		if (receive)
			len = std::min(len, conn->max_msg_size);
		if (len > SIZE_MAX - total) [[unlikely]] {
			VRMA_WARN(FI_LOG_EP_DATA, "the %zu segments' lengths add up to more than SIZE_MAX\n", count);
			return -FI_EINVAL;
		}
		sge[i].addr = reinterpret_cast<uintptr_t>(iov[i].iov_base);
		sge[i].length = static_cast<uint32_t>(std::min<size_t>(len, UINT32_MAX));
		const MrDesc *md = desc ? static_cast<const MrDesc *>(desc[i]) : nullptr;
		if (md && iov[i].iov_len && !md->covers(iov[i].iov_base, iov[i].iov_len) &&
		    !desc_register_on_demand(conn->domain, md, iov[i].iov_base, iov[i].iov_len)) [[unlikely]]
			return desc_refused(md, iov[i].iov_base, iov[i].iov_len);
		sge[i].lkey = md ? md->key() : 0;
		if (!md && len)
			need_keys = true;
		total += len;
	}
	if (total > conn->max_msg_size && !receive) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "%zu bytes exceed max_msg_size %zu\n", total, conn->max_msg_size);
		return -FI_EINVAL;
	}
	if (need_keys && total > keyless_max) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "missing memory descriptor (FI_MR_LOCAL)\n");
		return -FI_EINVAL;
	}
	return 0;
}

// An injected payload must fit the inline size: the caller may reuse the
// buffer as soon as the call returns.
inline ssize_t check_inject(const Conn *conn, bool inject, size_t total) noexcept
{
	if (inject && total > conn->inject_size) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "inject of %zu bytes exceeds inject_size %zu\n", total,
			  conn->inject_size);
		return -FI_EINVAL;
	}
	return 0;
}

// Hands out an operation's local data in order as the scatter entries of
// successive work requests. len[i] is entry i's full length (the 32-bit
// length of an sge may be too small for a segment split over several
// requests); empty and used-up entries are skipped.
struct SgeCursor {
	const ibv_sge *sge;
	const size_t *len;
	size_t i = 0, off = 0;

	// Appends the entries covering the next `need` bytes to out (which
	// must exist); returns how many.
	int take(size_t need, ibv_sge *out) noexcept
	{
		int n = 0;
		while (need) {
			while (len[i] == off) {
				i++;
				off = 0;
			}
			const size_t part = std::min(need, len[i] - off);
			out[n++] = {sge[i].addr + off, static_cast<uint32_t>(part), sge[i].lkey};
			off += part;
			need -= part;
		}
		return n;
	}
	// Passes over the next `n` bytes (which must exist).
	void skip(size_t n) noexcept
	{
		while (n) {
			while (len[i] == off) {
				i++;
				off = 0;
			}
			const size_t part = std::min(n, len[i] - off);
			off += part;
			n -= part;
		}
	}
};

// Remote CQ data wider than cq_data_size (kCqDataSize: the 32-bit
// immediate) would reach the target cut to its low bytes: refused.
[[gnu::always_inline]] inline bool cq_data_too_wide(uint64_t flags, uint64_t data) noexcept
{
	static_assert(kCqDataSize == 4, "the check below is for 32-bit immediate data");
	return ((flags & FI_REMOTE_CQ_DATA) != 0) & ((data >> 32) != 0);
}
inline ssize_t check_cq_data(uint64_t flags, uint64_t data, const char *what) noexcept
{
	if (cq_data_too_wide(flags, data)) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "%s: CQ data 0x%llx is wider than cq_data_size %zu\n", what,
			  static_cast<unsigned long long>(data), kCqDataSize);
		return -FI_EINVAL;
	}
	return 0;
}

// Unknown operation flags are refused, not ignored.
inline ssize_t check_op_flags(uint64_t flags, uint64_t accepted, const char *what) noexcept
{
	if (flags & ~accepted) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "%s: unsupported flags 0x%llx\n", what,
			  static_cast<unsigned long long>(flags & ~accepted));
		return -FI_EBADFLAGS;
	}
	return 0;
}

} // namespace vrma
