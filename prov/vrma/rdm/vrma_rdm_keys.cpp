// Keys an RDM initiator translates before the device can use them:
//  - scalable keys (mr_mode 0 / FI_MR_SCALABLE): an operation names the
//    target's region by the key the application chose and an address
//    relative to it; the initiator learns (key -> device key, address,
//    bounds, access) from the table the target's domain publishes
//    (key_table.h), with one RDMA READ of the key's bucket;
//  - keys of regions the target registers on demand (vrma_mr.cpp): a
//    provider key with kOnDemandKeyBit, or a table entry marked
//    kAccessUnregistered. The initiator asks the target with a KeyRequest;
//    the target's progress registers the region and answers with its entry.
// Either way the initiator keeps the entry for as long as the connection
// lives.
//
// Contracts:
//  - lock held (RdmEp::lock) throughout;
//  - a table READ needs no target CPU (a target that never calls into
//    libfabric is served); a KeyRequest is answered by the target's
//    progress (with FI_PROGRESS_MANUAL, when it calls in), once per region
//    and connection;
//  - an operation on a key being read returns -FI_EAGAIN (the application
//    retries as for a connection being made); on a key the peer does not
//    have, or outside what its region allows, it is accepted and ends in an
//    error entry, FI_EACCES, and one warning: nothing is posted, the
//    connection stays up;
//  - a region the target closed and registered again under the same key
//    has another device key: an operation with the cached one fails with a
//    remote access error, which breaks the connection and with it the
//    cache, so the next operation reads the key again.
#include "vrma_rdm.h"
#include "vrma_post.h"

namespace vrma {

namespace {

// The endpoint's lookup buffers, registered at the first lookup.
int key_bufs_ready(RdmEp *ep) noexcept
{
	if (ep->key_mr) [[likely]]
		return 0;
	const size_t bytes = RdmEp::kKeyReads * keys::kBucketBytes;
	ep->key_bufs.reset(new (std::nothrow) uint8_t[bytes]);
	if (!ep->key_bufs)
		return -FI_ENOMEM;
	try {
		ep->key_free.clear();
		for (uint32_t i = 0; i < RdmEp::kKeyReads; i++)
			ep->key_free.push_back(i);
	} catch (...) {
		return -FI_ENOMEM;
	}
	ep->key_mr.reset(ibv_reg_mr(ep->domain->pd.get(), ep->key_bufs.get(), bytes,
				    IBV_ACCESS_LOCAL_WRITE));
	if (!ep->key_mr) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_DATA, "RDM: registering the key lookup buffers: %s\n",
			  strerror(err));
		return errno_to_fi(err);
	}
	return 0;
}

// Starts the READ of key's bucket in the peer's table: 0, or a negative
// FI_E* code (-FI_EAGAIN: no buffer or queue room now).
int start_key_read(RdmEp *ep, RdmPeer *peer, Conn *conn, uint64_t key) noexcept
{
	if (int rc = key_bufs_ready(ep))
		return rc;
	if (ep->key_free.empty() || !rdm_tx_room(ep, 1))
		return -FI_EAGAIN;
	auto rd = std::unique_ptr<RdmKeyRead>(new (std::nothrow) RdmKeyRead);
	if (!rd)
		return -FI_ENOMEM;
	rd->peer = peer;
	rd->key = key;
	rd->read_id = ep->next_key_read++;
	rd->buf = ep->key_free.back();
	const rdm::KeyTableRef &t = peer->key_table;
	ibv_sge sge{reinterpret_cast<uintptr_t>(ep->key_bufs.get() + rd->buf * keys::kBucketBytes),
		    static_cast<uint32_t>(keys::kBucketBytes), ep->key_mr->lkey};
	ibv_send_wr wr{};
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = t.addr + keys::bucket_of(key, t.buckets) * keys::kBucketBytes;
	wr.wr.rdma.rkey = t.rkey;
	try {
		RemoteKey &k = peer->keys[key];
		k.state = RemoteKey::State::Reading;
		k.read_id = rd->read_id;
	} catch (...) {
		return -FI_ENOMEM;
	}
	if (ssize_t rc = post_send_one(conn, wr, rd.get(), 0, 0, true, nullptr, false,
				       rdm_aux(RdmTx::KeyRead, 0))) {
		peer->keys.erase(key);
		return static_cast<int>(rc);
	}
	ep->tx_wrs++;
	ep->key_free.pop_back();
	(void)rd.release(); // its completion frees it
	return 0;
}

// Sends a KeyRequest for key: 0, or a negative FI_E* code (-FI_EAGAIN: no
// room now; nothing is recorded, the next operation asks again).
int start_key_request(RdmEp *ep, RdmPeer *peer, Conn *conn, uint64_t key, uint8_t access) noexcept
{
	const uint32_t id = rdm_next_msg_id(peer);
	uint8_t msg[rdm::kKeyRequestBytes];
	rdm::encode_key_request(msg, id, key, access);
	RemoteKey *k;
	try {
		k = &peer->keys[key];
	} catch (...) {
		return -FI_ENOMEM;
	}
	if (ssize_t rc = rdm_post_send_copy(ep, conn, msg, sizeof msg)) {
		peer->keys.erase(key);
		return static_cast<int>(rc);
	}
	k->state = RemoteKey::State::Asking;
	k->read_id = id;
	k->conn = conn;
	return 0;
}

int key_error(RdmEp *ep, const RdmTxReport &op, const char *what, uint64_t key) noexcept
{
	VRMA_WARN(FI_LOG_EP_DATA, "RDM RMA: key 0x%llx: %s\n", static_cast<unsigned long long>(key),
		  what);
	rdm_report_tx(ep, op.context, op.comp_flags, op.len, op.report, op.cntr, FI_EACCES, 0);
	return 1;
}

} // namespace

int rdm_translate_keys(RdmEp *ep, RdmPeer *peer, Conn *conn, const fi_rma_iov *in, size_t n,
		       size_t total, uint8_t access, const RdmTxReport &op,
		       fi_rma_iov *out) noexcept
{
	if (peer->key_table_pending) [[unlikely]]
		return -FI_EAGAIN; // its KeyTable message is on its way
	if (ep->scalable_keys && !peer->key_table.buckets) [[unlikely]]
		return key_error(ep, op, "the peer publishes no scalable keys (its domain uses provider keys)",
				 in[0].key);
	// Every unknown key's READ or request starts now: one round trip for
	// all.
	bool waiting = false;
	for (size_t r = 0; r < n; r++) {
		const uint64_t key = in[r].key;
		if (!rdm_key_translated(ep, key))
			continue;
		auto it = peer->keys.find(key);
		int rc = 0;
		if (it == peer->keys.end()) {
			rc = ep->scalable_keys ? start_key_read(ep, peer, conn, key)
					       : start_key_request(ep, peer, conn, key, access);
		} else if (it->second.state == RemoteKey::State::Ready &&
			   (it->second.entry.access & keys::kAccessUnregistered)) {
			// Not registered yet: asked for when the region allows
			// the access (else refused below).
			if ((it->second.entry.access & access) != access)
				continue;
			rc = start_key_request(ep, peer, conn, key, access);
		} else if (it->second.state != RemoteKey::State::Reading &&
			   it->second.state != RemoteKey::State::Asking) {
			continue;
		}
		if (rc && rc != -FI_EAGAIN)
			return rc;
		waiting = true;
	}
	if (waiting)
		return -FI_EAGAIN;
	size_t left = total;
	for (size_t r = 0; r < n; r++) {
		if (!rdm_key_translated(ep, in[r].key)) {
			out[r] = in[r];
			left -= std::min(in[r].len, left);
			continue;
		}
		auto it = peer->keys.find(in[r].key);
		if (it->second.state != RemoteKey::State::Ready) {
			// Said once: the next operation asks the peer again.
			const bool failed = it->second.state == RemoteKey::State::Failed;
			peer->keys.erase(it);
			return key_error(ep, op,
					 failed ? "the peer could not register the region (its memory or limits)"
						: "the peer has no region with this key",
					 in[r].key);
		}
		const keys::KeyEntry &e = it->second.entry;
		if ((e.access & access) != access)
			return key_error(ep, op,
					 access & keys::kAccessRemoteWrite
						 ? "the peer's region does not allow remote writes"
						 : "the peer's region does not allow remote reads",
					 in[r].key);
		if (e.access & keys::kAccessUnregistered) [[unlikely]]
			return -FI_EAGAIN; // asked for above; the answer is on its way
		const size_t used = std::min(in[r].len, left);
		uint64_t va = 0;
		if (!e.translate(in[r].addr, used, va))
			return key_error(ep, op, "the range lies outside the peer's region", in[r].key);
		out[r] = {va, used, e.rkey};
		left -= used;
	}
	return 0;
}

void rdm_handle_key_request(RdmEp *ep, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf,
			    size_t len) noexcept
{
	rdm::RdmHeader h;
	uint64_t key = 0;
	uint8_t access = 0;
	if (!rdm::decode_key_request(buf, len, h, key, access)) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "a malformed key request");
		return;
	}
	rdm::KeyAnswer a;
	(void)domain_key_request(ep->domain, key, access, a);
	uint8_t msg[rdm::kKeyAnswerBytes];
	rdm::encode_key_answer(msg, h.msg_id, a);
	rdm_send_answer(ep, peer, msg, msg + rdm::kRdmHeaderBytes, rdm::kKeyAnswerBodyBytes);
}

void rdm_handle_key_table(RdmPeer *peer, uint32_t qp_num, const uint8_t *buf, size_t len) noexcept
{
	rdm::KeyTableRef t;
	if (!rdm::decode_key_table(buf, len, t)) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "a malformed key table message");
		return;
	}
	const Conn *c = peer->conn.get();
	if (!peer->key_table_pending || !c || !c->qp || c->qp->qp_num != qp_num) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "a key table message nobody announced");
		return;
	}
	peer->key_table = t;
	peer->key_table_pending = false;
}

void rdm_handle_key_answer(RdmEp *, RdmPeer *peer, uint32_t qp_num, const uint8_t *buf,
			   size_t len) noexcept
{
	rdm::RdmHeader h;
	rdm::KeyAnswer a;
	if (!rdm::decode_key_answer(buf, len, h, a)) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "a malformed key answer");
		return;
	}
	// The id names one pending thing of the peer's: a waiting send or
	// commit, an emulated atomic, or a key request. Only the last takes a
	// KeyAnswer, and only over the connection the request went on.
	if (peer->waiting.count(h.msg_id) || peer->atomics.count(h.msg_id)) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "a key answer to another kind of request");
		return;
	}
	auto it = peer->keys.find(a.entry.key);
	if (it == peer->keys.end() || it->second.state != RemoteKey::State::Asking ||
	    it->second.read_id != h.msg_id) {
		VRMA_INFO(FI_LOG_EP_DATA, "RDM: an answer for key 0x%llx, which waits no more\n",
			  static_cast<unsigned long long>(a.entry.key));
		return;
	}
	if (!rdm_answer_conn_ok(peer, it->second.conn, qp_num)) [[unlikely]] {
		rdm_drop_malformed(peer, qp_num, "a key answer over another connection than its request's");
		return;
	}
	switch (a.status) {
	case rdm::KeyStatus::Ok:
		it->second.entry = a.entry;
		it->second.state = RemoteKey::State::Ready;
		break;
	case rdm::KeyStatus::Absent:
		it->second.state = RemoteKey::State::Absent;
		break;
	case rdm::KeyStatus::Failed:
		it->second.state = RemoteKey::State::Failed;
		break;
	}
}

void rdm_key_read_done(RdmEp *ep, RdmKeyRead *rd, bool ok) noexcept
{
	std::unique_ptr<RdmKeyRead> owner(rd);
	ep->key_free.push_back(rd->buf); // reserved at open: never allocates
	RdmPeer *peer = rd->peer;
	auto it = peer->keys.find(rd->key);
	if (it == peer->keys.end() || it->second.read_id != rd->read_id ||
	    it->second.state != RemoteKey::State::Reading)
		return; // the connection failed meanwhile, or a newer read owns the key
	if (!ok) {
		peer->keys.erase(it);
		return;
	}
	keys::KeyEntry e;
	switch (keys::read_bucket(ep->key_bufs.get() + rd->buf * keys::kBucketBytes, rd->key, e)) {
	case keys::Lookup::Found:
		it->second.entry = e;
		it->second.state = RemoteKey::State::Ready;
		break;
	case keys::Lookup::Absent:
		it->second.state = RemoteKey::State::Absent;
		break;
	case keys::Lookup::Torn:
		// The peer was registering or closing a region of that bucket:
		// the next operation reads it again.
		peer->keys.erase(it);
		break;
	}
}

} // namespace vrma
