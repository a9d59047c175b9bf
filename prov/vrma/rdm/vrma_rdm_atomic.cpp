// Atomics on RDM endpoints: fi_atomic, fi_fetch_atomic, fi_compare_atomic
// (and their v/msg/inject forms), fi_*atomicvalid, to any address of the AV.
//
// Where an operation executes (one rule per datatype, so that no location
// is ever updated by both the device and a CPU, which real devices do not
// make atomic with respect to each other):
//  - by default every op and datatype is executed by the target's vrma:
//    the initiator sends an AtomicRequest (src/wire/rdm_wire.h), the target's
//    progress (its CQ and counter calls with FI_PROGRESS_MANUAL, its thread
//    with FI_PROGRESS_AUTO) applies it (src/atomic_ops.h) under one
//    process-wide lock, so vrma's atomics on the same memory are atomic with
//    respect to each other whatever endpoint or domain they came through,
//    and answers with an AtomicResponse carrying the old values;
//  - with FI_VRMA_RDM_NATIVE_ATOMICS=1 and a device with atomics
//    (atomic_cap), FI_INT64 and FI_UINT64 take only what the device does:
//    FI_SUM (fetch-and-add), FI_ATOMIC_READ (fetch-and-add of 0) and FI_CSWAP
//    (compare-and-swap), on 8-byte aligned targets, one device atomic per
//    element; the valid queries report every other op on those two types as
//    unsupported. The other datatypes stay emulated.
// Flags (fi_atomic(3)), the same on both paths:
//  - FI_INJECT (and fi_inject_atomic): the operand and compare arrays are
//    copied at the call (into the request, or into the device atomics' work
//    requests), so they are the application's again at return; at most
//    inject_size bytes of operand. A fetch's results are written at
//    completion, as without the flag;
//  - FI_COMPLETION: with FI_SELECTIVE_COMPLETION, an entry only with the
//    flag; bound counters count every operation (fi_inject_atomic: no
//    entry, counted);
//  - FI_DELIVERY_COMPLETE, FI_TRANSMIT_COMPLETE, FI_INJECT_COMPLETE: every
//    atomic completes when it was applied at the target (delivery
//    semantics), which is what each of them asks or more;
//  - FI_FENCE: -FI_EAGAIN while an earlier operation to the peer that the
//    peer's answer completes is outstanding (rdm_fence_blocked), and the
//    first request carries IBV_SEND_FENCE, so that earlier reads and
//    device atomics have completed before it runs;
//  - FI_MORE: the requests are held back and go with the peer's next
//    transmit without FI_MORE, one doorbell for the chain; a transmit to
//    another peer, and a call that fails, post them first;
//  - FI_REMOTE_CQ_DATA: 64 bits, reported to the target once the atomic is
//    applied (emulated: carried by the request; native: an event message
//    behind the device atomics);
//  - FI_COMMIT_COMPLETE: refused (-FI_EBADFLAGS).
// Contracts: lock held (RdmEp::lock); an accepted operation ends in exactly
// one completion or error entry (or count), when the target answered (or
// the device completed). A failed remote access is FI_EACCES.
#include "vrma_rdm.h"
#include "vrma_post.h"

#include <algorithm>

namespace vrma {

namespace {

using atomic::Kind;

constexpr uint64_t kAtomicFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
				  FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_FENCE | FI_MORE |
				  FI_REMOTE_CQ_DATA;
constexpr size_t kNativeMax = 16; // device atomics of one operation
constexpr size_t kHdr = rdm::kRdmHeaderBytes;
static_assert(rdm::kMaxAtomicSegments <= rdm::kMaxRmaEventKeys, "an event names every key of an operation");

// Every vrma atomic executed by a CPU in this process, whatever its
// endpoint or domain, holds this lock: two initiators' operations on one
// word never interleave.
std::mutex atomic_exec_lock;

inline RdmEp *rdm(fid_ep *f) { return static_cast<RdmEp *>(f); }

bool native_capable(Kind kind, int op, int datatype) noexcept
{
	if (datatype != FI_INT64 && datatype != FI_UINT64)
		return false;
	switch (kind) {
	case Kind::Plain:
		return op == FI_SUM;
	case Kind::Fetch:
		return op == FI_SUM || op == FI_ATOMIC_READ;
	case Kind::Compare:
		return op == FI_CSWAP;
	}
	return false;
}

// What an operation hands over, whatever call it came through.
struct AtomicCall {
	Kind kind;
	const fi_msg_atomic *msg;
	const fi_ioc *compare;
	size_t ncompare;
	const fi_ioc *result;
	size_t nresult;
	uint64_t flags;
	bool inject_call;
};

// The element count of an ioc list; false (logged) when it has too many
// entries or a NULL buffer.
bool ioc_total(const fi_ioc *ioc, size_t n, const char *what, size_t &total)
{
	if (n > kRdmIovLimit || (n && !ioc)) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: %zu %s entries; iov_limit is %zu\n", n, what,
			  kRdmIovLimit);
		return false;
	}
	total = 0;
	for (size_t i = 0; i < n; i++) {
		if (!ioc[i].addr && ioc[i].count) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: a NULL %s buffer\n", what);
			return false;
		}
		total += ioc[i].count;
	}
	return true;
}

// Copies count elements of size bytes from the ioc list into dst.
void gather(uint8_t *dst, const fi_ioc *ioc, size_t n, size_t size)
{
	for (size_t i = 0; i < n; i++) {
		copy_bytes(dst, ioc[i].addr, ioc[i].count * size);
		dst += ioc[i].count * size;
	}
}

void scatter(const fi_ioc *ioc, size_t n, size_t size, const uint8_t *src, size_t bytes)
{
	for (size_t i = 0; i < n && bytes; i++) {
		const size_t b = std::min(ioc[i].count * size, bytes);
		copy_bytes(ioc[i].addr, src, b);
		src += b;
		bytes -= b;
	}
}

void finish(RdmEp *ep, RdmAtomicOp *op, int err, int prov_errno)
{
	rdm_report_tx(ep, op->context, op->comp_flags, 0, op->report, op->cntr, err, prov_errno);
	ep->atomic_pool.put(op);
}

// An atomic not handed on yet goes back to its endpoint's pool (lock held).
struct AtomicOpPut {
	RdmEp *ep;
	void operator()(RdmAtomicOp *op) const noexcept { ep->atomic_pool.put(op); }
};
using AtomicOpPtr = std::unique_ptr<RdmAtomicOp, AtomicOpPut>;

// The native path: one device atomic per element, old values into a send
// buffer (registered for local writes).
ssize_t post_native(RdmEp *ep, RdmPeer *peer, Conn *conn, const AtomicCall &c,
		    AtomicOpPtr &op, size_t total)
{
	const fi_msg_atomic &m = *c.msg;
	fi_rma_iov remote[rdm::kMaxAtomicSegments];
	for (size_t r = 0; r < m.rma_iov_count; r++) {
		remote[r] = {m.rma_iov[r].addr, m.rma_iov[r].count * 8, m.rma_iov[r].key};
		if (!ep->scalable_keys && (remote[r].addr & 7)) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: native atomics need 8-byte aligned targets (0x%llx)\n",
				  static_cast<unsigned long long>(remote[r].addr));
			return -FI_EINVAL;
		}
	}
	bool translate = ep->scalable_keys;
	for (size_t r = 0; r < m.rma_iov_count && !translate; r++)
		translate = rdm_key_translated(ep, remote[r].key);
	if (translate) {
		fi_rma_iov xlat[rdm::kMaxAtomicSegments];
		if (int rc = rdm_translate_keys(ep, peer, conn, remote, m.rma_iov_count, total * 8,
						keys::kAccessRemoteWrite,
						{op->context, op->comp_flags, 0, op->report, op->cntr},
						xlat))
			return rc > 0 ? 1 : rc;
		std::copy(xlat, xlat + m.rma_iov_count, remote);
		for (size_t r = 0; r < m.rma_iov_count; r++)
			if (remote[r].addr & 7) {
				VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: native atomics need 8-byte aligned targets\n");
				return -FI_EINVAL;
			}
	}
	// A target that counts RMA events (FI_RMA_EVENT), or is to report remote
	// CQ data, hears of the operation from an event message after the
	// device atomics (RC delivers it after they executed), as for RMA.
	const bool cq_data = c.flags & FI_REMOTE_CQ_DATA;
	const bool event = cq_data || peer_has(*conn, wire::kCmFlagRmaEvents);
	if (!rdm_tx_room(ep, total + event))
		return -FI_EAGAIN;
	const int idx = rdm_take_tx_buf(ep, conn);
	if (idx < 0)
		return -FI_EAGAIN;
	op->buf = idx;
	uint8_t *old = rdm_tx_buf(ep, static_cast<uint32_t>(idx));
	uint64_t operand[kNativeMax], compare[kNativeMax];
	if (m.op != FI_ATOMIC_READ)
		gather(reinterpret_cast<uint8_t *>(operand), m.msg_iov, m.iov_count, 8);
	else
		std::fill(operand, operand + total, 0);
	if (c.kind == Kind::Compare)
		gather(reinterpret_cast<uint8_t *>(compare), c.compare, c.ncompare, 8);
	ibv_send_wr wrs[kNativeMax + 1];
	ibv_sge sges[kNativeMax + 1];
	size_t n = 0;
	for (size_t r = 0; r < m.rma_iov_count; r++) {
		for (size_t e = 0; e < m.rma_iov[r].count; e++, n++) {
			ibv_send_wr &wr = wrs[n];
			wr = {};
			sges[n] = {reinterpret_cast<uintptr_t>(old + n * 8), 8, ep->tx_mr->lkey};
			wr.sg_list = &sges[n];
			wr.num_sge = 1;
			wr.wr.atomic.remote_addr = remote[r].addr + e * 8;
			wr.wr.atomic.rkey = static_cast<uint32_t>(remote[r].key);
			if (c.kind == Kind::Compare) {
				wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
				wr.wr.atomic.compare_add = compare[n];
				wr.wr.atomic.swap = operand[n];
			} else {
				wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
				wr.wr.atomic.compare_add = operand[n];
			}
		}
	}
	if (c.flags & FI_FENCE)
		wrs[0].send_flags |= IBV_SEND_FENCE;
	TxOp top{op.get(), op->comp_flags, 0, true, nullptr, (c.flags & FI_MORE) != 0};
	top.aux = rdm_aux(RdmTx::AtomicNative, 0);
	uint8_t event_msg[rdm::kRmaEventMsgMax];
	if (event) {
		uint64_t keys[rdm::kMaxAtomicSegments];
		for (size_t r = 0; r < m.rma_iov_count; r++)
			keys[r] = remote[r].key;
		top.event = event_msg;
		top.event_len = rdm_encode_rma_event(
			event_msg,
			m.op == FI_ATOMIC_READ ? rdm::RmaKind::AtomicRead : rdm::RmaKind::AtomicWrite,
			total * 8, keys, m.rma_iov_count, cq_data, m.data);
		wrs[n] = {};
		wrs[n].sg_list = &sges[n];
		wrs[n].num_sge = 1;
		wrs[n].opcode = IBV_WR_SEND;
		n++;
	}
	if (ssize_t rc = rdm_post_op_chain(ep, conn, wrs, n, top)) {
		rdm_give_tx_buf(ep, conn, static_cast<uint32_t>(idx));
		op->buf = -1;
		return rc;
	}
	return 0;
}

// The emulated path: one AtomicRequest; the op waits for the answer.
ssize_t post_emulated(RdmEp *ep, RdmPeer *peer, Conn *conn, const AtomicCall &c,
		      AtomicOpPtr &op, size_t total)
{
	const fi_msg_atomic &m = *c.msg;
	rdm::AtomicRequest r;
	r.op = static_cast<uint8_t>(m.op);
	r.datatype = static_cast<uint8_t>(m.datatype);
	r.kind = c.kind;
	r.nseg = m.rma_iov_count;
	for (size_t i = 0; i < m.rma_iov_count; i++)
		r.segs[i] = {m.rma_iov[i].addr, m.rma_iov[i].count, m.rma_iov[i].key};
	rdm::RdmHeader h;
	h.type = rdm::MsgType::AtomicRequest;
	h.msg_id = rdm_next_msg_id(peer);
	h.length = total;
	if (c.flags & FI_REMOTE_CQ_DATA) {
		h.flags = rdm::kFlagCqData;
		h.cq_data = m.data;
	}
	uint8_t *b = ep->atomic_buf.get();
	const size_t head = rdm::atomic_request_head_bytes(r.nseg);
	const size_t bytes = total * op->dt_size;
	(void)rdm::encode_atomic_request(b, h, r);
	size_t len = head;
	if (m.op != FI_ATOMIC_READ) {
		gather(b + len, m.msg_iov, m.iov_count, op->dt_size);
		len += bytes;
	}
	if (c.kind == Kind::Compare) {
		gather(b + len, c.compare, c.ncompare, op->dt_size);
		len += bytes;
	}
	op->conn = conn;
	try {
		// False: the id is still an atomic's from 2^32 requests ago.
		if (!ep->atomic_nodes.insert(peer->atomics, h.msg_id, op.get())) [[unlikely]]
			return -FI_EAGAIN;
	} catch (...) {
		return -FI_ENOMEM;
	}
	if (ssize_t rc = rdm_post_send_copy(ep, conn, b, len, c.flags & FI_MORE, c.flags & FI_FENCE)) {
		if (auto it = peer->atomics.find(h.msg_id); it != peer->atomics.end())
			ep->atomic_nodes.erase(peer->atomics, it);
		return rc;
	}
	op->msg_id = h.msg_id;
	op->posted = true;
	return 0;
}

ssize_t atomic_long(RdmEp *ep, const AtomicCall &c) noexcept
{
	const fi_msg_atomic *m = c.msg;
	if (!m) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: NULL message\n");
		return -FI_EINVAL;
	}
	if (ssize_t rc = check_op_flags(c.flags, kAtomicFlags, "RDM atomic"))
		return rc;
	const size_t max = rdm_atomic_max(c.kind, m->op, m->datatype, ep->native_atomics, ep->eager_size);
	if (!max) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: op %d on datatype %d is not offered (fi_atomicvalid)\n",
			  m->op, m->datatype);
		return -FI_EOPNOTSUPP;
	}
	size_t total = 0, n = 0;
	// FI_ATOMIC_READ ignores the operand (fi_atomic(3): "ignored and may
	// be NULL"): SOS's shmem_atomic_fetch passes {NULL, 1}.
	if (m->op != FI_ATOMIC_READ && !ioc_total(m->msg_iov, m->iov_count, "operand", total))
		return -FI_EINVAL;
	if (!m->rma_iov || m->rma_iov_count == 0 || m->rma_iov_count > rdm::kMaxAtomicSegments) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: %zu remote segments; rma_iov_limit for atomics is %zu\n",
			  m->rma_iov_count, rdm::kMaxAtomicSegments);
		return -FI_EINVAL;
	}
	size_t remote = 0;
	for (size_t r = 0; r < m->rma_iov_count; r++) {
		if (!m->rma_iov[r].count) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: an empty remote segment\n");
			return -FI_EINVAL;
		}
		remote += m->rma_iov[r].count;
	}
	if (m->op == FI_ATOMIC_READ)
		total = remote;
	if (total != remote || total == 0 || total > max) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: %zu local and %zu remote elements (1 to %zu, equal)\n",
			  total, remote, max);
		return -FI_EINVAL;
	}
	// FI_INJECT (fi_atomic(3)): the operand and compare buffers are free
	// at return, a fetch's result is written at completion. Both paths
	// copy them at the call (the request, or the device atomics' work
	// requests); only the size is bounded.
	const bool inject = c.inject_call || (c.flags & FI_INJECT);
	if (inject && m->op != FI_ATOMIC_READ &&
	    total * atomic::datatype_size(m->datatype) > ep->inject_size) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic inject of %zu bytes exceeds inject_size %zu\n",
			  total * atomic::datatype_size(m->datatype), ep->inject_size);
		return -FI_EINVAL;
	}
	if (c.kind == Kind::Compare) {
		if (!ioc_total(c.compare, c.ncompare, "compare", n))
			return -FI_EINVAL;
		if (n != total) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: %zu compare elements for %zu\n", n, total);
			return -FI_EINVAL;
		}
	}
	if (c.kind != Kind::Plain) {
		if (!ioc_total(c.result, c.nresult, "result", n))
			return -FI_EINVAL;
		if (n != total) {
			VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: %zu result elements for %zu\n", n, total);
			return -FI_EINVAL;
		}
	}
	const bool fetch = c.kind != Kind::Plain;
	const uint64_t comp_flags = FI_ATOMIC | (fetch ? FI_READ : FI_WRITE);
	const bool report = !c.inject_call && ep->tx_reports(c.flags);
	std::lock_guard guard(ep->lock);
	Cntr *cntr = fetch ? ep->cntr_read : ep->cntr_write;
	RdmPeer *peer;
	Conn *conn = nullptr;
	if (int rc = rdm_tx_conn(ep, m->addr, {m->context, comp_flags, 0, report, cntr}, c.flags & FI_MORE,
				 peer, conn)) [[unlikely]]
		return rc > 0 ? 0 : rc;
	if (conn->peer_flags_pending) [[unlikely]]
		return -FI_EAGAIN;
	if ((c.flags & FI_FENCE) && rdm_fence_blocked(peer, conn)) [[unlikely]]
		return -FI_EAGAIN;
	if ((c.flags & FI_REMOTE_CQ_DATA) && rdm_tx_paused(peer)) [[unlikely]]
		return -FI_EAGAIN;
	AtomicOpPtr op(ep->atomic_pool.get(), AtomicOpPut{ep});
	if (!op)
		return -FI_ENOMEM;
	op->peer = peer;
	op->context = m->context;
	op->comp_flags = comp_flags;
	op->report = report;
	op->cntr = cntr;
	op->dt_size = atomic::datatype_size(m->datatype);
	op->result_bytes = fetch ? total * op->dt_size : 0;
	if (fetch) {
		std::copy(c.result, c.result + c.nresult, op->result);
		op->nresult = c.nresult;
	}
	// Device atomics only to a peer that runs its 64-bit atomics on its
	// device too (agreed per connection): one that does not applies every
	// atomic with its CPU, and mixing the two on a word is not atomic.
	const ssize_t rc = ep->native_atomics && native_capable(c.kind, m->op, m->datatype) &&
					   peer_has(*conn, wire::kCmFlagNativeAtomics)
				   ? post_native(ep, peer, conn, c, op, total)
				   : post_emulated(ep, peer, conn, c, op, total);
	if (rc > 0)
		return 0; // ended in an error entry (a scalable key the peer lacks)
	if (rc)
		return rc;
	(void)op.release(); // the answer or the device completion ends it
	return 0;
}

ssize_t rdm_atomic(RdmEp *ep, const AtomicCall &c) noexcept
{
	return rdm_more_on_error(ep, atomic_long(ep, c));
}

// The entry points, each building an AtomicCall.
ssize_t a_writemsg(fid_ep *f, const fi_msg_atomic *msg, uint64_t flags) noexcept
{
	return rdm_atomic(rdm(f), {Kind::Plain, msg, nullptr, 0, nullptr, 0, flags, false});
}

ssize_t a_writev(fid_ep *f, const fi_ioc *iov, void **desc, size_t count, fi_addr_t dest,
		 uint64_t addr, uint64_t key, fi_datatype datatype, fi_op op, void *context) noexcept
{
	size_t total = 0;
	for (size_t i = 0; iov && i < count; i++)
		total += iov[i].count;
	const fi_rma_ioc r{addr, total, key};
	const fi_msg_atomic m{iov, desc, count, dest, &r, 1, datatype, op, context, 0};
	return rdm_atomic(rdm(f), {Kind::Plain, &m, nullptr, 0, nullptr, 0, rdm(f)->tx_op_flags, false});
}

ssize_t a_write(fid_ep *f, const void *buf, size_t count, void *desc, fi_addr_t dest, uint64_t addr,
		uint64_t key, fi_datatype datatype, fi_op op, void *context) noexcept
{
	const fi_ioc iov{const_cast<void *>(buf), count};
	return a_writev(f, &iov, &desc, 1, dest, addr, key, datatype, op, context);
}

ssize_t a_inject(fid_ep *f, const void *buf, size_t count, fi_addr_t dest, uint64_t addr,
		 uint64_t key, fi_datatype datatype, fi_op op) noexcept
{
	const fi_ioc iov{const_cast<void *>(buf), count};
	const fi_rma_ioc r{addr, count, key};
	const fi_msg_atomic m{&iov, nullptr, 1, dest, &r, 1, datatype, op, nullptr, 0};
	return rdm_atomic(rdm(f), {Kind::Plain, &m, nullptr, 0, nullptr, 0, FI_INJECT, true});
}

ssize_t a_readwritemsg(fid_ep *f, const fi_msg_atomic *msg, fi_ioc *resultv, void **, size_t result_count,
		       uint64_t flags) noexcept
{
	return rdm_atomic(rdm(f), {Kind::Fetch, msg, nullptr, 0, resultv, result_count, flags, false});
}

ssize_t a_readwritev(fid_ep *f, const fi_ioc *iov, void **desc, size_t count, fi_ioc *resultv,
		     void **result_desc, size_t result_count, fi_addr_t dest, uint64_t addr, uint64_t key,
		     fi_datatype datatype, fi_op op, void *context) noexcept
{
	size_t total = 0;
	for (size_t i = 0; resultv && i < result_count; i++)
		total += resultv[i].count;
	const fi_rma_ioc r{addr, total, key};
	const fi_msg_atomic m{iov, desc, count, dest, &r, 1, datatype, op, context, 0};
	return a_readwritemsg(f, &m, resultv, result_desc, result_count, rdm(f)->tx_op_flags);
}

ssize_t a_readwrite(fid_ep *f, const void *buf, size_t count, void *desc, void *result,
		    void *result_desc, fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype datatype,
		    fi_op op, void *context) noexcept
{
	const fi_ioc iov{const_cast<void *>(buf), buf ? count : 0};
	fi_ioc res{result, count};
	return a_readwritev(f, &iov, &desc, buf ? 1 : 0, &res, &result_desc, 1, dest, addr, key,
			    datatype, op, context);
}

ssize_t a_compwritemsg(fid_ep *f, const fi_msg_atomic *msg, const fi_ioc *comparev, void **,
		       size_t compare_count, fi_ioc *resultv, void **, size_t result_count,
		       uint64_t flags) noexcept
{
	return rdm_atomic(rdm(f), {Kind::Compare, msg, comparev, compare_count, resultv, result_count,
				   flags, false});
}

ssize_t a_compwritev(fid_ep *f, const fi_ioc *iov, void **desc, size_t count, const fi_ioc *comparev,
		     void **compare_desc, size_t compare_count, fi_ioc *resultv, void **result_desc,
		     size_t result_count, fi_addr_t dest, uint64_t addr, uint64_t key,
		     fi_datatype datatype, fi_op op, void *context) noexcept
{
	size_t total = 0;
	for (size_t i = 0; iov && i < count; i++)
		total += iov[i].count;
	const fi_rma_ioc r{addr, total, key};
	const fi_msg_atomic m{iov, desc, count, dest, &r, 1, datatype, op, context, 0};
	return a_compwritemsg(f, &m, comparev, compare_desc, compare_count, resultv, result_desc,
			      result_count, rdm(f)->tx_op_flags);
}

ssize_t a_compwrite(fid_ep *f, const void *buf, size_t count, void *desc, const void *compare,
		    void *compare_desc, void *result, void *result_desc, fi_addr_t dest, uint64_t addr,
		    uint64_t key, fi_datatype datatype, fi_op op, void *context) noexcept
{
	const fi_ioc iov{const_cast<void *>(buf), count};
	const fi_ioc cmp{const_cast<void *>(compare), count};
	fi_ioc res{result, count};
	return a_compwritev(f, &iov, &desc, 1, &cmp, &compare_desc, 1, &res, &result_desc, 1, dest,
			    addr, key, datatype, op, context);
}

int valid_reply(RdmEp *ep, Kind kind, fi_datatype datatype, fi_op op, size_t *count) noexcept
{
	const size_t max = rdm_atomic_max(kind, op, datatype, ep->native_atomics, ep->eager_size);
	if (!max)
		return -FI_EOPNOTSUPP;
	if (count)
		*count = max;
	return 0;
}

int a_writevalid(fid_ep *f, fi_datatype datatype, fi_op op, size_t *count) noexcept
{
	return valid_reply(rdm(f), Kind::Plain, datatype, op, count);
}

int a_readwritevalid(fid_ep *f, fi_datatype datatype, fi_op op, size_t *count) noexcept
{
	return valid_reply(rdm(f), Kind::Fetch, datatype, op, count);
}

int a_compwritevalid(fid_ep *f, fi_datatype datatype, fi_op op, size_t *count) noexcept
{
	return valid_reply(rdm(f), Kind::Compare, datatype, op, count);
}

// The target side of one AtomicRequest: resolved, applied, answered.
// Hazard: every count and size below comes from the peer. The decoder
// bounds the elements' bytes (data_bytes, so every segment's count times
// the size) by kAtomicDataMax without overflow, and the old values must
// fit the result buffer (eager_size bytes) before anything is resolved or
// applied; an op, datatype and kind outside the known enums never decode.
void serve_request(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf, size_t len)
{
	rdm::RdmHeader h;
	rdm::AtomicRequest r;
	uint8_t answer[kHdr];
	if (!rdm::decode_atomic_request(buf, len, h, r)) {
		// An honest peer sends only what atomic::valid() takes, within
		// kAtomicDataMax: anything else is a broken or hostile one.
		rdm_drop_malformed(peer, qp_num, "a malformed atomic request");
		return;
	}
	if (!ep->atomic_result) { // an endpoint opened without FI_ATOMIC
		rdm::encode_atomic_response(answer, h.msg_id, rdm::AtomicStatus::Unsupported, nullptr, 0);
		rdm_send_answer(ep, peer, answer, nullptr, 0);
		return;
	}
	const size_t size = atomic::datatype_size(r.datatype);
	const bool writes = r.kind != Kind::Plain ? r.op != FI_ATOMIC_READ : true;
	const bool reads = r.kind != Kind::Plain;
	const uint8_t need = (writes ? keys::kAccessRemoteWrite : 0) | (reads ? keys::kAccessRemoteRead : 0);
	// A peer with a larger eager size may ask for more than this side's
	// result buffer holds: refused, not malformed.
	const size_t result_bytes = rdm::atomic_result_bytes(r);
	// With native atomics this endpoint's 64-bit integers are updated by
	// the device alone (kConnFlagNativeAtomics): its CPU applying one
	// would not be atomic with the device's. A peer without native
	// atomics asking for one is refused.
	const bool device_owned = ep->native_atomics && (r.datatype == FI_INT64 || r.datatype == FI_UINT64);
	if (result_bytes > ep->eager_size || device_owned) {
		rdm::encode_atomic_response(answer, h.msg_id, rdm::AtomicStatus::Unsupported, nullptr, 0);
		rdm_send_answer(ep, peer, answer, nullptr, 0);
		return;
	}
	rdm::AtomicStatus status = rdm::AtomicStatus::Ok;
	{
		Domain *dom = ep->domain;
		std::lock_guard mr_guard(dom->mr_lock); // no region goes away meanwhile
		uint8_t *targets[rdm::kMaxAtomicSegments];
		// The regions touched, each once (FI_RMA_EVENT counts them):
		// a region registered on demand may have no device key yet.
		Mr *regions[rdm::kMaxAtomicSegments];
		size_t nregions = 0;
		for (size_t i = 0; i < r.nseg; i++) {
			keys::KeyEntry e;
			Mr *mr = nullptr;
			uint64_t va = 0;
			if (!domain_resolve_key(dom, r.segs[i].key, e, &mr) || (e.access & need) != need ||
			    !e.translate(r.segs[i].addr, r.segs[i].count * size, va)) {
				status = rdm::AtomicStatus::AccessError;
				break;
			}
			targets[i] = reinterpret_cast<uint8_t *>(va);
			if (mr && std::find(regions, regions + nregions, mr) == regions + nregions)
				regions[nregions++] = mr;
		}
		if (status == rdm::AtomicStatus::Ok) {
			std::lock_guard exec_guard(atomic_exec_lock);
			size_t off = 0;
			for (size_t i = 0; i < r.nseg; i++) {
				const size_t b = r.segs[i].count * size;
				(void)atomic::apply(r.kind, r.op, r.datatype, targets[i],
						    r.operand ? r.operand + off : nullptr,
						    r.compare ? r.compare + off : nullptr,
						    reads ? ep->atomic_result.get() + off : nullptr,
						    r.segs[i].count);
				off += b;
			}
			if (ep->rma_events)
				for (size_t i = 0; i < nregions; i++)
					count_region_event(regions[i], writes);
		}
	}
	if (status == rdm::AtomicStatus::Ok) {
		// The header's length counts elements; the entry's len is bytes.
		// The regions were counted above.
		rdm::RdmHeader ev = h;
		ev.length = r.data_bytes;
		rdm_report_rma_event(ep, peer, qp_num, FI_ATOMIC | (writes ? FI_REMOTE_WRITE : FI_REMOTE_READ),
				     ev, nullptr, 0);
	}
	const bool ok = status == rdm::AtomicStatus::Ok;
	rdm::encode_atomic_response(answer, h.msg_id, status, nullptr, ok ? result_bytes : 0);
	rdm_send_answer(ep, peer, answer, ok ? ep->atomic_result.get() : nullptr, ok ? result_bytes : 0);
}

} // namespace

size_t rdm_atomic_max(Kind kind, int op, int datatype, bool native, size_t eager_size) noexcept
{
	if (!atomic::valid(kind, op, datatype))
		return 0;
	if (native && (datatype == FI_INT64 || datatype == FI_UINT64))
		return native_capable(kind, op, datatype) ? kNativeMax : 0;
	// The request (head, operand, compare) and the response (header, old
	// values) each fit one eager buffer.
	const size_t size = atomic::datatype_size(datatype);
	const size_t arrays = std::max<size_t>(rdm::atomic_request_arrays(kind, op), 1);
	const size_t head = rdm::atomic_request_head_bytes(rdm::kMaxAtomicSegments);
	if (eager_size <= head) // FI_VRMA_RDM_EAGER_SIZE below 137 bytes
		return 0;
	return (eager_size - head) / (arrays * size);
}

void rdm_handle_atomic(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf,
		       size_t len) noexcept
{
	if (buf[0] == static_cast<uint8_t>(rdm::MsgType::AtomicRequest)) {
		serve_request(ep, peer, qp_num, buf, len);
		return;
	}
	rdm::RdmHeader h;
	rdm::AtomicResponse resp;
	if (!rdm::decode_atomic_response(buf, len, h, resp)) {
		rdm_drop_malformed(peer, qp_num, "a malformed atomic response");
		return;
	}
	auto it = peer->atomics.find(h.msg_id);
	if (it == peer->atomics.end()) {
		// Ids are drawn per peer for every kind of request.
		if (peer->waiting.count(h.msg_id)) [[unlikely]] {
			rdm_drop_malformed(peer, qp_num, "an atomic response to another kind of request");
			return;
		}
		VRMA_INFO(FI_LOG_EP_DATA, "RDM: an answer to atomic %u, which waits no more\n", h.msg_id);
		return;
	}
	RdmAtomicOp *op = it->second;
	if (!op->posted) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "an atomic response to a request not sent yet");
		return;
	}
	if (!rdm_answer_conn_ok(peer, op->conn, qp_num)) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "an atomic response over another connection than its request's");
		return;
	}
	ep->atomic_nodes.erase(peer->atomics, it);
	if (resp.status != rdm::AtomicStatus::Ok) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: the target refused it (%s)\n",
			  resp.status == rdm::AtomicStatus::AccessError ? "no such key, range or access"
									: "unsupported");
		finish(ep, op, resp.status == rdm::AtomicStatus::AccessError ? FI_EACCES : FI_EOPNOTSUPP, 0);
		return;
	}
	if (resp.bytes != op->result_bytes) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM atomic: %zu bytes of old values for %zu\n", resp.bytes,
			  op->result_bytes);
		finish(ep, op, FI_EIO, 0);
		return;
	}
	scatter(op->result, op->nresult, op->dt_size, resp.data, resp.bytes);
	finish(ep, op, 0, 0);
}

void rdm_atomic_native_done(RdmEp *ep, Conn *c, const RdmRmaDone &d) noexcept
{
	if (!rdm_op_ends(c, d))
		return;
	auto *op = static_cast<RdmAtomicOp *>(d.context);
	const auto buf = static_cast<uint32_t>(op->buf);
	if (d.ok)
		scatter(op->result, op->nresult, 8, rdm_tx_buf(ep, buf), op->result_bytes);
	rdm_give_tx_buf(ep, c, buf);
	op->buf = -1;
	finish(ep, op, d.ok ? 0 : d.err, d.ok ? 0 : d.prov_errno);
}

void rdm_fail_atomics(RdmPeer *peer, int err) noexcept
{
	RdmEp *ep = peer->ep;
	while (!peer->atomics.empty()) {
		RdmAtomicOp *op = peer->atomics.begin()->second;
		peer->atomics.erase(peer->atomics.begin());
		if (op->posted) // else its caller's post fails: RdmAtomicOp::posted
			finish(ep, op, err, 0);
	}
}

const fi_ops_atomic rdm_atomic_ops = {
	.size = sizeof(fi_ops_atomic),
	.write = a_write,
	.writev = a_writev,
	.writemsg = a_writemsg,
	.inject = a_inject,
	.readwrite = a_readwrite,
	.readwritev = a_readwritev,
	.readwritemsg = a_readwritemsg,
	.compwrite = a_compwrite,
	.compwritev = a_compwritev,
	.compwritemsg = a_compwritemsg,
	.writevalid = a_writevalid,
	.readwritevalid = a_readwritevalid,
	.compwritevalid = a_compwritevalid,
};

} // namespace vrma
