// RDM peers and their connections: made on the first send, through the
// endpoint's own rdma_cm channel; accepted from any peer, known to the AV or
// not.
//
// Hazards handled here:
//  - two endpoints connecting to each other at once: each side keeps the
//    connection rdm::keep_initiated() names and rejects the other with
//    kConnFlagCrossing, so the rejected side waits for the peer's connection
//    instead of failing or connecting again;
//  - an endpoint sending to itself: its request arrives at its own listener
//    and both ends live in one peer (conn sends, loopback receives);
//  - a request that claims the address of a peer whose connection is up
//    (an impostor, or that peer restarted before this side noticed): the
//    connection stays, the newcomer is turned away (kConnFlagBusy) and the
//    connection probed; once the probe has failed it (a restart), the
//    newcomer's next attempt gets in. A request that claims another host's
//    address than the one it comes from is refused;
//  - a job key (conn_auth.h): a request without its answer is rejected with
//    a challenge before anything is made for it, and a connection is used
//    only after the acceptor proved the key in its answer;
//  - a restarted peer (same address, new nonce) whose connection was not up
//    yet: the old connection and what waits on it fail, the new one is
//    accepted;
//  - rdma_destroy_id waits for the id's events to be acked: every event is
//    fetched, handled and acked under the endpoint's lock, so an id destroyed
//    under the lock has none outstanding; the id of the event being handled
//    is destroyed after its ack (rdm_cm_event's return value);
//  - a connection's slots are named by completions until its queue pair is
//    flushed: a failed connection moves to RdmEp::dying and is freed by
//    rdm_reap once its ring drained;
//  - a connection nothing uses (FI_VRMA_RDM_IDLE_TIMEOUT) is closed by
//    agreement (rdm_wire.h's Idle): the side that agreed starts nothing on
//    it until it ends or the asker resumes, so that no request of either
//    side is under way when the asker disconnects; both keep the peer, and
//    the next operation connects again;
//  - a full peer table (FI_VRMA_RDM_MAX_PEERS): a new peer is turned away
//    (kConnFlagBusy) or its sender told -FI_EAGAIN; idle peers are freed by
//    rdm_reclaim_peers only where no caller holds a peer, and only those
//    nothing in the endpoint names.
#include "vrma_rdm.h"
#include "vrma_post.h"

#include <unordered_set>

namespace vrma {

namespace {

void rdm_conn_reclaim(Conn *c) noexcept { rdm_tx_reclaim(c->peer->ep); } // its post holds the lock

std::unique_ptr<Conn> new_conn(RdmPeer *peer)
{
	RdmEp *ep = peer->ep;
	auto c = std::make_unique<Conn>();
	c->domain = ep->domain;
	c->peer = peer;
	c->reclaim = rdm_conn_reclaim;
	c->tx_depth = ep->peer_tx_depth;
	c->set_one_limit(ep->peer_tx_depth);
	c->tx_cap = ep->peer_tx_depth;
	c->tx_iov_limit = kRdmIovLimit + 1;
	c->inline_size = ep->inline_size;
	// Sends and RMA injects beyond the inline size go through the
	// endpoint's send buffers (RdmEp::tx_bufs, each connection its share):
	// an RDM connection has no bounce buffers of its own.
	c->inject_size = ep->inject_size;
	c->max_msg_size = kRdmMaxMsg;
	c->max_wr_bytes = ep->domain->max_wr_bytes;
	c->tx_serialized = true; // RdmEp::lock serializes everything
	// The eager fast path's header and request (rdm_msg's send_fast
	// patches them: post_fast_held with a header).
	static_assert(rdm::kRdmHeaderBytes <= Conn::kOneHdrMax);
	rdm::encode_header(c->one_hdr, rdm::RdmHeader{});
	c->one_sge[0] = {reinterpret_cast<uintptr_t>(c->one_hdr),
			 static_cast<uint32_t>(rdm::kRdmHeaderBytes), 0};
	c->one_wr.opcode = IBV_WR_SEND;
	return c;
}

// The queue pair of a connection: the endpoint's CQ and SRQ.
int create_qp(RdmEp *ep, Conn &c)
{
	ibv_qp_init_attr attr{};
	attr.qp_context = &c;
	attr.send_cq = ep->cq.get();
	attr.recv_cq = ep->cq.get();
	attr.srq = ep->srq.get();
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 0;
	attr.cap.max_send_wr = static_cast<uint32_t>(c.tx_depth + 1);
	attr.cap.max_send_sge = static_cast<uint32_t>(c.tx_iov_limit);
	attr.cap.max_inline_data = static_cast<uint32_t>(c.inline_size);
	if (rdma_create_qp(c.id.get(), ep->domain->pd.get(), &attr)) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: rdma_create_qp: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	c.qp = c.id->qp;
	if (attr.cap.max_inline_data < c.inline_size)
		c.inline_size = attr.cap.max_inline_data;
	c.signal_period = signal_period_for(c.tx_depth);
	try {
		c.reset_tx(c.tx_depth + 1);
		ep->by_qp.add(c.qp->qp_num, c.peer);
	} catch (...) {
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: out of memory for a connection\n");
		rdma_destroy_qp(c.id.get());
		c.qp = nullptr;
		return -FI_ENOMEM;
	}
	return 0;
}

// An address for a log line.
struct AddrStr {
	char s[rdm::kAddrStrMax];
	explicit AddrStr(const rdm::RdmAddr &a) { rdm::format_addr(a, s, sizeof s); }
	const char *c_str() const { return s; }
};

rdm::KeyTableRef key_table_ref(const Domain *dom)
{
	return {reinterpret_cast<uintptr_t>(dom->key_table_mem.get()), dom->key_table_mr->rkey,
		static_cast<uint32_t>(dom->key_table.buckets())};
}

struct ConnParam {
	uint8_t hdr[rdm::kConnHeaderMax];
	rdma_conn_param param{};
};

// The connection header of a request (flags 0) or an answer
// (kConnFlagAccept). With a job key, a request carries the answer to the
// peer's challenge (an initiator connects only after one: a first request
// goes without, and without the key table, and is rejected), and an answer
// the proof over the initiator's answer.
void fill_param(RdmEp *ep, ConnParam &p, uint16_t flags, RdmPeer *peer = nullptr,
		const auth::Mac *answer = nullptr)
{
	rdm::RdmConnHeader h;
	h.flags = flags | rdm::kConnFlagClose | rdm::kConnFlagIdle | (ep->rma_events ? rdm::kConnFlagRmaEvents : 0) |
		  (ep->rma_pmem ? rdm::kConnFlagCommitService : 0) |
		  (ep->domain->direct_write_to_pmem.load() ? rdm::kConnFlagDirectWritePmem : 0) |
		  (ep->native_atomics ? rdm::kConnFlagNativeAtomics : 0);
	h.addr = ep->self;
	h.nonce = ep->nonce;
	const bool keyed = !ep->auth_key.empty();
	if (keyed && (flags & rdm::kConnFlagAccept) && answer) {
		h.flags |= rdm::kConnFlagAuth;
		h.mac = auth::acceptor_proof(ep->auth_key, *answer);
	} else if (keyed && !(flags & rdm::kConnFlagAccept) && peer && peer->auth_challenged) {
		h.flags |= rdm::kConnFlagAuth;
		h.cookie = peer->auth_cookie;
		peer->auth_answer = auth::initiator_answer(ep->auth_key, peer->auth_cookie, ep->self, ep->nonce,
							   peer->addr, peer->auth_peer_nonce);
		h.mac = peer->auth_answer;
		peer->auth_challenged = false;
		peer->auth_answered = true;
	} else if (keyed && !(flags & rdm::kConnFlagAccept) && peer) {
		// A first request: the acceptor proves the key over this before
		// we answer its challenge.
		h.flags |= rdm::kConnFlagAsk;
		if (!auth::random_bytes(peer->auth_ask.data(), peer->auth_ask.size()))
			VRMA_WARN(FI_LOG_EP_CTRL, "RDM: no random bytes for a challenge: %s\n", strerror(errno));
		h.mac = peer->auth_ask;
	}
	// The table's rkey goes only where it cannot reach an unproven peer:
	// never in a keyed first request (it is rejected), in a keyed request
	// only as a flag (the KeyTable message follows once the acceptor has
	// proved the key).
	const bool first_keyed_request = (h.flags & rdm::kConnFlagAsk) != 0;
	if (const Domain *dom = ep->domain; dom->scalable_keys && !first_keyed_request) {
		h.flags |= rdm::kConnFlagKeyTable;
		h.key_table = key_table_ref(dom);
	}
	rdm::encode_conn_header(p.hdr, h);
	p.param.private_data = p.hdr;
	p.param.private_data_len = static_cast<uint8_t>(rdm::conn_header_bytes(h));
	const ibv_device_attr &d = ep->domain->dev_attr;
	p.param.responder_resources = static_cast<uint8_t>(std::min(d.max_qp_rd_atom, 16));
	p.param.initiator_depth = static_cast<uint8_t>(std::min(d.max_qp_init_rd_atom, 16));
	p.param.rnr_retry_count = 7; // infinite: the SRQ refills as progress runs
}

// Rejects id with only this endpoint's header (flags: one reject kind) and,
// with kConnFlagChallenge, the cookie and proof: never the key table.
void reject_with(RdmEp *ep, rdma_cm_id *id, uint16_t flags, uint64_t cookie = 0,
		 const auth::Mac &proof = {})
{
	rdm::RdmConnHeader h;
	h.flags = flags;
	h.addr = ep->self;
	h.nonce = ep->nonce;
	h.cookie = cookie;
	h.mac = proof;
	uint8_t buf[rdm::kConnHeaderMax];
	if (rdm::encode_conn_header(buf, h))
		rdma_reject(id, buf, static_cast<uint8_t>(rdm::conn_header_bytes(h)));
	else
		rdma_reject(id, nullptr, 0);
}

// The current time bucket of challenges (conn_auth.h).
uint64_t auth_now()
{
	const auto t = std::chrono::steady_clock::now().time_since_epoch();
	return auth::bucket_of(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(t).count()));
}

// A zero-byte RDMA WRITE on a connection that is up: a live peer's device
// acknowledges it and its vrma sees nothing (no key is checked for zero
// bytes, no receive is consumed); a dead peer's does not, and the failed
// completion (retries exhausted) fails the connection in rdm_handle_wc, or
// (a device that retries without end) the drain watch does, seeing it
// outstanding. Signaled: an unsignaled request on an otherwise quiet
// connection would stay outstanding and look stalled to the watch. At most
// one per kProbeInterval per peer.
constexpr auto kProbeInterval = std::chrono::milliseconds(100);
void probe(RdmEp *ep, RdmPeer *peer, Conn *c)
{
	const auto now = std::chrono::steady_clock::now();
	if (now < peer->probe_after)
		return;
	peer->probe_after = now + kProbeInterval;
	if (!rdm_tx_room(ep, 1) || peer->conn.get() != c ||
	    c->state.load(std::memory_order_relaxed) != EpState::Connected)
		return; // nested progress ended it, or no room: the next request probes
	ibv_send_wr wr{};
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (post_send_one(c, wr, nullptr, 0, 0, false, nullptr, false, rdm_aux(RdmTx::Internal, 0)) == 0)
		ep->tx_wrs++;
}

int start_connect(RdmPeer *peer)
{
	RdmEp *ep = peer->ep;
	std::unique_ptr<Conn> c;
	try {
		c = new_conn(peer);
	} catch (...) {
		return -FI_ENOMEM;
	}
	rdma_cm_id *raw = nullptr;
	if (rdma_create_id(ep->cm_channel.get(), &raw, c.get(), RDMA_PS_TCP)) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: rdma_create_id: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	c->id.reset(raw);
	c->peer_flags_pending = true;
	sockaddr_storage dst{}, src{};
	rdm::to_sockaddr(peer->addr, dst);
	rdm::RdmAddr local = ep->self;
	local.port = 0;
	rdm::to_sockaddr(local, src);
	if (rdma_resolve_addr(raw, reinterpret_cast<sockaddr *>(&src), reinterpret_cast<sockaddr *>(&dst),
			      params.cm_timeout_ms)) {
		const int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: resolving %s: %s\n",
			  sockaddr_str(reinterpret_cast<sockaddr *>(&dst)).c_str(), strerror(err));
		return errno_to_fi(err);
	}
	c->state.store(EpState::Connecting);
	peer->conn = std::move(c);
	peer->conn_epoch++;
	peer->initiated = true;
	if (peer->connect_since == std::chrono::steady_clock::time_point{})
		peer->connect_since = std::chrono::steady_clock::now();
	peer->auth_answered = false; // fill_param answers a challenge it holds
	ep->connecting++;
	return 0;
}

// A run of connection attempts older than FI_VRMA_RDM_CONNECT_TIMEOUT ends:
// the attempt under way fails, and the send that asks next (at once when a
// send found it, rdm_conn_ready) returns -FI_ETIMEDOUT (no operation was
// accepted meanwhile: its sends returned -FI_EAGAIN); the one after starts
// again. Whether it ended the run. Looked at by every send that waits for
// the connection and by the watch (no send may come).
bool connect_expired(RdmEp *ep, RdmPeer *peer, Conn *c, std::chrono::steady_clock::time_point now) noexcept
{
	using clock = std::chrono::steady_clock;
	if (peer->connect_since == clock::time_point{} || !ep->connect_timeout.count() ||
	    now - peer->connect_since < ep->connect_timeout)
		return false;
	VRMA_WARN(FI_LOG_EP_CTRL, "RDM: no connection to %s after %lld ms (FI_VRMA_RDM_CONNECT_TIMEOUT): giving up\n",
		  AddrStr(peer->addr).c_str(),
		  static_cast<long long>(
			  std::chrono::duration_cast<std::chrono::milliseconds>(now - peer->connect_since).count()));
	peer->connect_since = {};
	peer->unheard_since = {};
	if (c) {
		rdm_conn_failed(peer, c, FI_ETIMEDOUT); // sets peer->error
	} else if (now < peer->expect_until) {
		// Between two attempts (a refusal's retry time): its sender is
		// still being told to wait.
		peer->expect_until = {};
		peer->error = FI_ETIMEDOUT;
	}
	return true;
}

// The FI_E* code of a failed connection attempt.
int cm_error(rdma_cm_event_type type, int status)
{
	switch (type) {
	case RDMA_CM_EVENT_REJECTED:
		return FI_ECONNREFUSED;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		return FI_EHOSTUNREACH;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return FI_ECONNRESET;
	default:
		return status < 0 ? -errno_to_fi(-status) : FI_EIO;
	}
}

// Which of the peer's connections an id belongs to (nullptr: a dying one).
Conn *live_conn(RdmPeer *peer, Conn *c)
{
	if (peer->conn.get() == c || peer->loopback.get() == c)
		return c;
	return nullptr;
}

// The peer of an address, made if new; nullptr if it is new and the table
// is full (FI_VRMA_RDM_MAX_PEERS: one warning until it has room again).
// Throws std::bad_alloc.
RdmPeer *find_or_add_peer(RdmEp *ep, const rdm::RdmAddr &addr)
{
	auto it = ep->peers.find(addr);
	if (it != ep->peers.end())
		return it->second.get();
	if (ep->peer_limit.full(ep->peers.size())) {
		if (!ep->peers_full_warned)
			VRMA_WARN(FI_LOG_EP_CTRL,
				  "RDM: %zu peers (FI_VRMA_RDM_MAX_PEERS): new ones wait until a peer without a connection is given back\n",
				  ep->peers.size());
		ep->peers_full_warned = true;
		return nullptr;
	}
	auto p = std::make_unique<RdmPeer>();
	p->ep = ep;
	p->addr = addr;
	p->idle_since = std::chrono::steady_clock::now();
	RdmPeer *raw = p.get();
	ep->peers.emplace(addr, std::move(p));
	return raw;
}

// Where a connect request really comes from (rdma_cm's view; port
// ignored): false if rdma_cm cannot say.
bool request_source(rdma_cm_id *id, rdm::RdmAddr &out)
{
	const sockaddr *sa = rdma_get_peer_addr(id);
	if (!sa)
		return false;
	const size_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
	return rdm::from_sockaddr(sa, len, out);
}

// With a job key: whether the request proves it. If not, it has been
// rejected: with a challenge when it carried no answer (nothing is kept
// for it), plainly otherwise (one warning).
bool authenticated(RdmEp *ep, rdma_cm_id *id, const rdm::RdmConnHeader &h, const rdm::RdmAddr &src)
{
	const uint64_t now = auth_now();
	if (!(h.flags & rdm::kConnFlagAuth)) {
		// A request without the kConnFlagAsk challenge (an initiator
		// without a key) gets a proof over zeros: it only learns that a
		// key is needed.
		const uint64_t cookie = auth::make_cookie(ep->auth_secret, h.addr, h.nonce, src, now);
		const auth::Mac ask = (h.flags & rdm::kConnFlagAsk) ? h.mac : auth::Mac{};
		reject_with(ep, id, rdm::kConnFlagChallenge, cookie,
			    auth::challenge_proof(ep->auth_key, ask, cookie, ep->self, ep->nonce, h.addr, h.nonce));
		return false;
	}
	const char *why = nullptr;
	if (!auth::cookie_fresh(ep->auth_secret, h.addr, h.nonce, src, h.cookie, now))
		why = "its challenge is not one this endpoint made for it, or is stale";
	else if (!auth::mac_equal(h.mac, auth::initiator_answer(ep->auth_key, h.cookie, h.addr, h.nonce,
								ep->self, ep->nonce)))
		why = "a wrong answer (no job key, or another one)";
	else if (!ep->auth_replays->record(h.cookie, now))
		why = "an answer given before (a replay), or too many connect requests at once";
	if (!why)
		return true;
	VRMA_WARN(FI_LOG_EP_CTRL, "RDM: refusing a connect request from %s: %s\n",
		  AddrStr(h.addr).c_str(), why);
	rdma_reject(id, nullptr, 0);
	return false;
}

// A connect request at the listener. Returns the id to destroy after the ack
// (a refused request), or nullptr.
rdma_cm_id *accept_request(RdmEp *ep, rdma_cm_event *ev)
{
	rdma_cm_id *id = ev->id;
	rdm::RdmConnHeader h;
	if (!rdm::decode_conn_header(static_cast<const uint8_t *>(ev->param.conn.private_data),
				     ev->param.conn.private_data_len, h) ||
	    (h.flags & rdm::kConnFlagAccept) || rdm::conn_is_reject(h.flags)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: refusing a connect request that is not vrma RDM's\n");
		rdma_reject(id, nullptr, 0);
		return id;
	}
	// The claimed address must be the host the request comes from (its
	// port is the listener's, the request's is ephemeral).
	rdm::RdmAddr src;
	if (!request_source(id, src) || src.family != h.addr.family ||
	    memcmp(src.addr, h.addr.addr, sizeof src.addr) != 0) {
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: refusing a connect request from %s that claims to be %s\n",
			  AddrStr(src).c_str(), AddrStr(h.addr).c_str());
		rdma_reject(id, nullptr, 0);
		return id;
	}
	if (!ep->auth_key.empty() && !authenticated(ep, id, h, src))
		return id;
	const bool self = h.addr == ep->self && h.nonce == ep->nonce;
	RdmPeer *peer;
	try {
		peer = find_or_add_peer(ep, h.addr);
	} catch (...) {
		rdma_reject(id, nullptr, 0);
		return id;
	}
	if (!peer) {
		// The table is full: the initiator tries again (kBusyRetry)
		// while progress gives idle peers back.
		reject_with(ep, id, rdm::kConnFlagBusy);
		return id;
	}
	if (!self) {
		Conn *cur = peer->conn.get();
		if (cur && cur->state.load() == EpState::Connected && peer->idle == RdmPeer::Idle::Agreed &&
		    peer->nonce == h.nonce) {
			// We agreed to close it and hold it: the asker closed its
			// end and connects again before its disconnect reached us.
			ep->idle_closed++;
			rdm_conn_failed(peer, cur, 0);
		}
		cur = peer->conn.get();
		if (cur && cur->state.load() == EpState::Connected) {
			// Alive until proven dead: an impostor must not displace
			// it, a restarted peer gets in once the probe failed it.
			VRMA_INFO(FI_LOG_EP_CTRL,
				  "RDM: a connect request claims %s, whose connection is up: turned away while it is probed\n",
				  AddrStr(h.addr).c_str());
			probe(ep, peer, cur);
			reject_with(ep, id, rdm::kConnFlagBusy);
			return id;
		}
		if (cur && peer->nonce && peer->nonce != h.nonce) {
			VRMA_INFO(FI_LOG_EP_CTRL, "RDM: peer %016llx restarted\n",
				  static_cast<unsigned long long>(h.nonce));
			rdm_conn_failed(peer, cur, FI_ECONNRESET);
			cur = nullptr;
		}
		peer->nonce = h.nonce;
		if (cur) {
			if (peer->initiated) {
				if (rdm::keep_initiated(ep->self, ep->nonce, h.addr, h.nonce)) {
					// Ours wins: the peer accepts it and waits.
					reject_with(ep, id, rdm::kConnFlagCrossing);
					return id;
				}
				// Theirs wins: ours will be rejected; drop it now.
				VRMA_INFO(FI_LOG_EP_CTRL, "RDM: crossing connections: keeping peer %016llx's\n",
					  static_cast<unsigned long long>(h.nonce));
				rdm_conn_failed(peer, cur, 0);
			} else {
				// The same peer connects again before the connection
				// it asked for was up: it gave that one up.
				VRMA_INFO(FI_LOG_EP_CTRL,
					  "RDM: peer %016llx connects again (its accepted connection was not up yet)\n",
					  static_cast<unsigned long long>(h.nonce));
				rdm_conn_failed(peer, cur, FI_ECONNRESET);
			}
		}
	}
	std::unique_ptr<Conn> c;
	try {
		c = new_conn(peer);
	} catch (...) {
		rdma_reject(id, nullptr, 0);
		return id;
	}
	c->id.reset(id);
	id->context = c.get();
	c->peer_cm_flags.store(rdm_peer_cm_flags(h.flags));
	c->peer_closes = !self && (h.flags & rdm::kConnFlagClose);
	c->peer_idles = !self && (h.flags & rdm::kConnFlagIdle);
	if (!self) {
		peer->key_table = h.key_table;
		// An authenticated request had no room for the table.
		peer->key_table_pending = (h.flags & rdm::kConnFlagKeyTable) && !rdm::conn_table_inline(h.flags);
	}
	if (create_qp(ep, *c)) {
		rdma_reject(id, nullptr, 0);
		return c->id.release();
	}
	ConnParam p;
	const bool proven = !ep->auth_key.empty();
	fill_param(ep, p, rdm::kConnFlagAccept, nullptr, proven ? &h.mac : nullptr);
	// READs this side issues are answered by the peer's responder
	// resources, and the other way round: never more than it offered.
	p.param.initiator_depth = std::min(p.param.initiator_depth, ev->param.conn.responder_resources);
	p.param.responder_resources = std::min(p.param.responder_resources, ev->param.conn.initiator_depth);
	conn_set_retry(id, p.param);
	if (rdma_accept(id, &p.param)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: rdma_accept: %s\n", strerror(errno));
		ep->by_qp.erase(c->qp->qp_num);
		rdma_destroy_qp(id);
		c->qp = nullptr;
		return c->id.release();
	}
	c->state.store(EpState::Connecting);
	if (self) {
		peer->loopback = std::move(c);
	} else {
		peer->conn = std::move(c);
		peer->conn_epoch++;
		peer->initiated = false;
		peer->expect_until = {};
		if (peer->connect_since == std::chrono::steady_clock::time_point{})
			peer->connect_since = std::chrono::steady_clock::now();
		ep->connecting++;
	}
	return nullptr;
}

} // namespace

fi_addr_t rdm_peer_fi_addr_lookup(RdmPeer *peer, uint64_t epoch) noexcept
{
	peer->fi_addr = av_reverse(peer->ep->av, peer->addr, peer->report_addr);
	peer->av_epoch = epoch;
	return peer->fi_addr;
}

RdmPeer *rdm_peer_of(RdmEp *ep, fi_addr_t fi_addr, int &err) noexcept
{
	// The epoch is read before the AV is: a change in between leaves an
	// entry under the old epoch, which the next call drops.
	const uint64_t epoch = ep->av->epoch.load(std::memory_order_acquire);
	const size_t slot = static_cast<uint32_t>(fi_addr);
	if (epoch == ep->peer_cache_epoch) [[likely]] {
		if (slot < ep->peer_cache_n && ep->peer_cache[slot].addr == fi_addr) [[likely]]
			return ep->peer_cache[slot].peer;
	} else {
		std::fill(ep->peer_cache.begin(), ep->peer_cache.end(), RdmEp::PeerCacheEntry{});
		ep->peer_cache_epoch = epoch;
	}
	rdm::RdmAddr addr;
	if (!av_lookup_addr(ep->av, fi_addr, addr)) {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM: address %#llx is not in the AV (never inserted or removed)\n",
			  static_cast<unsigned long long>(fi_addr));
		err = FI_EADDRNOTAVAIL;
		return nullptr;
	}
	RdmPeer *peer;
	try {
		peer = find_or_add_peer(ep, addr);
	} catch (...) {
		err = FI_ENOMEM;
		return nullptr;
	}
	if (!peer) {
		err = FI_EAGAIN; // a full table: progress gives idle peers back
		return nullptr;
	}
	try {
		if (slot < RdmEp::kPeerCacheMax) {
			if (slot >= ep->peer_cache_n) {
				ep->peer_cache.resize(std::max(slot + 1, 2 * ep->peer_cache_n));
				ep->peer_cache_n = ep->peer_cache.size();
			}
			ep->peer_cache[slot] = {fi_addr, peer};
		}
	} catch (...) {
		// Uncached: the next send looks it up again.
	}
	return peer;
}

int rdm_conn_ready(RdmPeer *peer, Conn *&conn) noexcept
{
	Conn *c = peer->conn.get();
	if (c && c->state.load(std::memory_order_relaxed) == EpState::Connected &&
	    peer->idle != RdmPeer::Idle::Agreed) [[likely]] {
		conn = c;
		return 0;
	}
	// Agreed to an idle close: -FI_EAGAIN (below: connect_since is zero)
	// until the asker closes (then a new connection) or resumes.
	const auto now = std::chrono::steady_clock::now();
	if ((c || now < peer->expect_until) && !connect_expired(peer->ep, peer, c, now))
		return -FI_EAGAIN; // connecting, or between two attempts
	if (peer->error) {
		const int e = peer->error;
		peer->error = 0; // the next send tries again (a restarted peer)
		return -e;
	}
	if (int rc = start_connect(peer))
		return rc;
	return -FI_EAGAIN;
}

int rdm_tx_conn(RdmEp *ep, fi_addr_t dest, const RdmTxReport &op, bool more, RdmPeer *&peer,
		Conn *&conn) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	if (!ep->enabled) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RDM transmit before fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	peer = rdm_peer_cached(ep, dest);
	if (!peer) [[unlikely]] {
		int err = 0;
		peer = rdm_peer_of(ep, dest, err);
		if (!peer) {
			rdm_more_flush(ep);
			if (err == FI_ENOMEM || err == FI_EAGAIN)
				return -err;
			rdm_report_tx(ep, op.context, op.comp_flags, op.len, op.report, op.cntr, err, 0);
			return 1;
		}
	}
	rdm_more_switch(ep, peer, more);
	// A connection still being made: -FI_EAGAIN (the progress engine, or the
	// next progress, handles its events).
	return rdm_conn_ready(peer, conn);
}

void rdm_conn_failed(RdmPeer *peer, Conn *conn, int err) noexcept
{
	VRMA_ASSERT_HELD(peer->ep->lock);
	RdmEp *ep = peer->ep;
	std::unique_ptr<Conn> *slot = nullptr;
	if (peer->conn.get() == conn)
		slot = &peer->conn;
	else if (peer->loopback.get() == conn)
		slot = &peer->loopback;
	if (!slot)
		return; // already dying
	const bool was_connecting = conn->state.load() != EpState::Connected && slot == &peer->conn;
	if (was_connecting && ep->connecting)
		ep->connecting--;
	// Sends held back by FI_MORE go out now, to complete or flush with
	// the queue pair: nothing accepted ends without a completion.
	if (conn->more_held)
		flush_more(conn);
	const bool was_connected = conn->state.load() == EpState::Connected;
	conn->state.store(EpState::Shutdown);
	if (conn->qp) {
		ibv_qp_attr attr{};
		attr.qp_state = IBV_QPS_ERR;
		ibv_modify_qp(conn->qp, &attr, IBV_QP_STATE);
		// The peer learns now (DISCONNECTED), not when its requests
		// time out against a queue pair that no longer answers.
		if (was_connected && conn->id)
			(void)rdma_disconnect(conn->id.get());
		if (conn_post_sentinel(conn))
			ep->tx_wrs++; // the sentinel's slot, taken back when it flushes
	}
	try {
		ep->dying.push_back(std::move(*slot));
	} catch (...) {
		// Cannot park it: leak it rather than free slots a flush names.
		(void)slot->release();
	}
	if (!peer->conn && !peer->loopback)
		peer->idle_since = std::chrono::steady_clock::now();
	if (slot == &peer->conn) {
		peer->keys.clear(); // read again over the next connection
		peer->key_table_pending = false;
		peer->auth_challenged = false; // a challenge answers one attempt
		rdm_flow_reset(peer); // a new connection starts resumed
		peer->stalled_since = {}; // and the drain watch starts over on it
		peer->idle = RdmPeer::Idle::None; // and the idle close
		peer->quiet_since = {};
		peer->ask_after = {};
		// Answers to what was sent on it will not come.
		rdm_fail_waiting(peer, err ? err : FI_ECONNRESET);
		if (was_connecting && err) {
			peer->error = err;
			peer->connect_since = {}; // the run of attempts ends with it
		}
		if (err)
			peer->unheard_since = {}; // a run of refusals ends with any failure
	}
}

namespace {

// Whether nothing of this side's with peer depends on c (rdm_wire.h's Idle):
// no operation waits for the peer's answer, none is held back or paused,
// no answer or read waits in a backlog, no key is being fetched. What is
// on c's queue pair the caller checks (outstanding requests, or none posted
// since the Query).
bool idle_here(RdmEp *ep, RdmPeer *peer, const Conn *c) noexcept
{
	if (!c->peer_idles || peer->loopback || ep->closing || !peer->waiting.empty() || !peer->atomics.empty() ||
	    peer->answers_queued || peer->persists || peer->key_table_pending || c->more_held ||
	    ep->more_peer.load(std::memory_order_relaxed) == peer || peer->tx_paused || peer->flow_rx.paused)
		return false;
	for (const RdmRxOp *op : ep->read_backlog)
		if (op->peer == peer)
			return false;
	for (const auto &[key, k] : peer->keys)
		if (k.state == RemoteKey::State::Reading || k.state == RemoteKey::State::Asking)
			return false;
	return true;
}

// Posts `post` (one of the idle exchange's messages, or a probe) on c
// without it counting as c's use: neither for the watch, if c was quiet
// (it would otherwise see the answer to each Query as use, and refuse the
// next), nor for our Query, if nothing was posted since it.
template <typename Post>
void post_unused(RdmPeer *peer, const Conn *c, Post &&post) noexcept
{
	const bool quiet = c->tx.head() == peer->quiet_head;
	const bool asked = peer->idle == RdmPeer::Idle::Asked && c->tx.head() == peer->idle_head;
	post();
	if (peer->conn.get() != c)
		return;
	if (quiet)
		peer->quiet_head = c->tx.head();
	if (asked)
		peer->idle_head = c->tx.head();
}

// The asker's end of an agreed idle close.
void idle_close(RdmEp *ep, RdmPeer *peer, Conn *c) noexcept
{
	VRMA_INFO(FI_LOG_EP_CTRL, "RDM: closing the unused connection to %s (FI_VRMA_RDM_IDLE_TIMEOUT)\n",
		  AddrStr(peer->addr).c_str());
	ep->idle_closed++;
	rdm_conn_failed(peer, c, 0);
}

// Asks the peer to close c, quiet since peer->quiet_since: not when a
// request is still outstanding (a quiet connection's unsignaled requests
// retire with the watch's probe) or nothing can be posted now (the next
// look asks again).
void idle_ask(RdmEp *ep, RdmPeer *peer, Conn *c) noexcept
{
	if (c->tx.outstanding() || !idle_here(ep, peer, c))
		return;
	uint8_t q[rdm::kRdmHeaderBytes];
	rdm::encode_idle(q, rdm::IdleStatus::Query, static_cast<uint64_t>(ep->idle_timeout.count()));
	bool posted = false;
	post_unused(peer, c, [&] { posted = rdm_post_answer(ep, c, q, nullptr, 0) == 0; });
	if (!posted || peer->conn.get() != c)
		return;
	peer->idle = RdmPeer::Idle::Asked;
	peer->idle_head = c->tx.head();
	VRMA_DBG(FI_LOG_EP_CTRL, "RDM: asking %s to close the unused connection\n", AddrStr(peer->addr).c_str());
}

} // namespace

void rdm_handle_idle(RdmEp *ep, RdmPeer *peer, Conn *c, uint32_t qp_num, const rdm::RdmHeader &h) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	VRMA_DBG(FI_LOG_EP_CTRL, "RDM: idle message %u from %s (%s, ours %d)\n", unsigned(h.status),
		 AddrStr(peer->addr).c_str(), c ? "current connection" : "an old connection", int(peer->idle));
	if (!c || c->state.load(std::memory_order_relaxed) != EpState::Connected)
		return; // says nothing of the current connection
	if (!c->peer_idles) {
		rdm_drop_malformed(peer, qp_num, "an idle message from a peer that did not announce them");
		return;
	}
	using clock = std::chrono::steady_clock;
	using rdm::IdleStatus;
	const auto status = static_cast<IdleStatus>(h.status);
	if (peer->quiet_rx + 1 == c->msgs_received)
		peer->quiet_rx++; // nor is receiving one
	switch (status) {
	case IdleStatus::Query: {
		if (peer->idle == RdmPeer::Idle::Agreed) {
			rdm_drop_malformed(peer, qp_num, "an idle query while one was agreed");
			return;
		}
		// Nothing posted since our own crossing Query counts as quiet.
		bool quiet_now = false;
		if (peer->idle == RdmPeer::Idle::Asked) {
			if (rdm::keep_initiated(ep->self, ep->nonce, peer->addr, peer->nonce))
				return; // ours stands: the peer answers it, this one is void
			peer->idle = RdmPeer::Idle::None; // ours is void: never answered
			quiet_now = c->tx.head() == peer->idle_head;
		}
		// As quiet as the asker: nothing posted since the watch saw c
		// change, that long ago (a watch that never looked: not known).
		const auto asked = std::chrono::milliseconds(std::min<uint64_t>(h.length, uint64_t(1) << 40));
		const clock::time_point now = clock::now();
		const bool quiet = quiet_now || (peer->quiet_since != clock::time_point{} &&
						 c->tx.head() == peer->quiet_head && now - peer->quiet_since >= asked);
		const bool agree = quiet && c->tx.outstanding() <= (quiet_now ? 1u : 0u) && idle_here(ep, peer, c);
		uint8_t a[rdm::kRdmHeaderBytes];
		rdm::encode_idle(a, agree ? IdleStatus::Agree : IdleStatus::Refuse);
		if (agree) {
			peer->idle = RdmPeer::Idle::Agreed;
			peer->agreed_at = now;
		}
		post_unused(peer, c, [&] { rdm_send_answer(ep, peer, a); });
		return;
	}
	case IdleStatus::Agree:
	case IdleStatus::Refuse:
		if (peer->idle != RdmPeer::Idle::Asked) {
			rdm_drop_malformed(peer, qp_num, "an answer to an idle query never sent");
			return;
		}
		peer->idle = RdmPeer::Idle::None;
		if (status == IdleStatus::Refuse) {
			// Not before another timeout (the peer used it, or may ask
			// itself); the quiet time goes on counting.
			peer->ask_after = clock::now() + ep->idle_timeout;
			return;
		}
		if (c->tx.head() == peer->idle_head && idle_here(ep, peer, c)) {
			idle_close(ep, peer, c);
			return;
		}
		// Used since the Query: the peer holds until it hears.
		peer->quiet_since = {};
		{
			uint8_t r[rdm::kRdmHeaderBytes];
			rdm::encode_idle(r, IdleStatus::Resume);
			rdm_send_answer(ep, peer, r);
		}
		return;
	case IdleStatus::Resume:
		if (peer->idle != RdmPeer::Idle::Agreed) {
			rdm_drop_malformed(peer, qp_num, "an idle resume without an agreement");
			return;
		}
		peer->idle = RdmPeer::Idle::None;
		peer->quiet_since = {};
		return;
	}
}

void rdm_watch_drain(RdmEp *ep) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	using clock = std::chrono::steady_clock;
	const clock::time_point now = clock::now();
	if (now < ep->watch_next)
		return;
	clock::duration period = std::chrono::seconds(1);
	for (const std::chrono::milliseconds t : {ep->drain_timeout, ep->connect_timeout, ep->idle_timeout})
		if (t.count())
			period = std::min<clock::duration>(period, t / 4);
	ep->watch_next = now + period;
	for (auto &[addr, p] : ep->peers) {
		RdmPeer *peer = p.get();
		Conn *c = peer->conn.get();
		if (!c || c->state.load(std::memory_order_relaxed) != EpState::Connected) {
			peer->stalled_since = {};
			(void)connect_expired(ep, peer, c, now);
			continue;
		}
		// Its use: what was posted on it and received over it.
		if (peer->quiet_since == clock::time_point{} || c->tx.head() != peer->quiet_head ||
		    c->msgs_received != peer->quiet_rx) {
			peer->quiet_head = c->tx.head();
			peer->quiet_rx = c->msgs_received;
			peer->quiet_since = now;
		}
		if (peer->idle == RdmPeer::Idle::Agreed && ep->drain_timeout.count() &&
		    now - peer->agreed_at >= ep->drain_timeout) {
			// The asker neither closed nor resumed (its application
			// has not progressed since): what it held of ours ends.
			VRMA_WARN(FI_LOG_EP_CTRL,
				  "RDM: %s agreed an idle close %lld ms ago and neither closed nor resumed (FI_VRMA_RDM_DRAIN_TIMEOUT): failing its connection\n",
				  AddrStr(peer->addr).c_str(),
				  static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
								 now - peer->agreed_at).count()));
			rdm_conn_failed(peer, c, FI_ETIMEDOUT);
			continue;
		}
		if (peer->idle == RdmPeer::Idle::Agreed)
			continue; // nothing of ours is under way; no probe may meet the asker's close
		if (ep->idle_timeout.count() && peer->idle == RdmPeer::Idle::None &&
		    now - peer->quiet_since >= ep->idle_timeout && now >= peer->ask_after)
			idle_ask(ep, peer, c);
		if (!c->tx.outstanding()) {
			peer->stalled_since = {};
			// Operations that wait for the peer's answer (rendezvous and
			// delivery-complete sends, emulated atomics, commits) have
			// nothing on the queue pair once their request went: a peer
			// that died or whose link is cut would leave them waiting for
			// ever. A probe puts one request there, which the peer's
			// device answers at once if it is alive; if not, the retry
			// budget or this watch fails the connection, and them with it.
			// The probe runs whenever the watch does: with the drain
			// timeout off, the retry budget alone ends them.
			if (!peer->waiting.empty() || !peer->atomics.empty())
				probe(ep, peer, c);
			continue;
		}
		const uint64_t tail = c->tx.tail();
		if (tail != peer->watch_tail || peer->stalled_since == clock::time_point{}) {
			peer->watch_tail = tail;
			peer->stalled_since = now;
			continue;
		}
		// Nothing retired since the last look. Requests that need no
		// completion stay outstanding on a quiet connection until a
		// signaled one follows: a probe is one (a stalled peer's queue
		// pair takes it behind the others, to no harm).
		post_unused(peer, c, [&] { probe(ep, peer, c); });
		if (!ep->drain_timeout.count() || now - peer->stalled_since < ep->drain_timeout)
			continue;
		VRMA_WARN(FI_LOG_EP_DATA,
			  "RDM: a peer took none of %zu sends for %lld ms (FI_VRMA_RDM_DRAIN_TIMEOUT): failing its connection\n",
			  c->tx.outstanding(),
			  static_cast<long long>(
				  std::chrono::duration_cast<std::chrono::milliseconds>(now - peer->stalled_since).count()));
		peer->stalled_since = {};
		c->fail_err = FI_ETIMEDOUT;
		rdm_conn_failed(peer, c, FI_ETIMEDOUT);
	}
}

void rdm_reap(RdmEp *ep) noexcept
{
	VRMA_ASSERT_HELD(ep->lock);
	for (size_t i = 0; i < ep->dying.size();) {
		Conn *c = ep->dying[i].get();
		if (c->qp && c->tx.outstanding()) {
			i++;
			continue;
		}
		if (c->qp) {
			if (ep->by_qp.find(c->qp->qp_num) == c->peer && c->peer->conn.get() != c &&
			    c->peer->loopback.get() != c)
				ep->by_qp.erase(c->qp->qp_num);
			rdma_destroy_qp(c->id.get());
			c->qp = nullptr;
		}
		ep->dying.erase(ep->dying.begin() + static_cast<std::ptrdiff_t>(i));
	}
}

namespace {

// At most one scan of the table per interval: a table over its high mark
// whose peers are all busy costs a scan per interval, not per progress.
constexpr auto kReclaimInterval = std::chrono::milliseconds(100);

} // namespace

void rdm_reclaim_peers(RdmEp *ep) noexcept
try {
	VRMA_ASSERT_HELD(ep->lock);
	using clock = std::chrono::steady_clock;
	const clock::time_point now = clock::now();
	if (now < ep->reclaim_next)
		return;
	ep->reclaim_next = now + kReclaimInterval;
	// What refers to a peer after its connections ended: the dying ones
	// (their completions name it until reaped), unexpected messages (for
	// their source), answers and reads left in the backlogs, an FI_MORE
	// hold, commits the persist worker holds (RdmPeer::persists).
	// Operations end with their connection (rdm_fail_waiting).
	std::unordered_set<const RdmPeer *> held;
	for (const auto &c : ep->dying)
		held.insert(c->peer);
	for (MatchKind k : {MatchKind::kMsg, MatchKind::kTagged})
		for (RdmMsg *m = ep->matcher.unexpected_front(k); m; m = TagMatcher<RdmRecv, RdmMsg>::next(*m))
			held.insert(m->peer);
	for (const RdmEp::Answer &a : ep->answer_backlog)
		held.insert(a.peer);
	for (const RdmRxOp *op : ep->read_backlog)
		held.insert(op->peer);
	held.insert(ep->more_peer.load(std::memory_order_relaxed));
	std::vector<peers::Idle<RdmPeer *>> idle;
	for (auto &[addr, p] : ep->peers) {
		RdmPeer *peer = p.get();
		if (peer->conn || peer->loopback || !peer->waiting.empty() || !peer->atomics.empty() ||
		    peer->answers_queued || peer->persists || now < peer->expect_until || held.count(peer))
			continue;
		idle.push_back({peer, static_cast<uint64_t>((peer->idle_since - clock::time_point{}).count())});
	}
	const size_t n = peers::longest_idle(idle, ep->peer_limit.excess(ep->peers.size()));
	if (!n)
		return;
	std::unordered_set<const RdmPeer *> gone;
	for (const auto &i : idle)
		gone.insert(i.who);
	ep->by_qp.erase_peers([&](const RdmPeer *p) { return gone.count(p) != 0; });
	// Cached handles of given-back peers: looked up again.
	std::fill(ep->peer_cache.begin(), ep->peer_cache.end(), RdmEp::PeerCacheEntry{});
	for (const auto &i : idle) {
		const rdm::RdmAddr addr = i.who->addr; // not a key inside the node erased
		ep->peers.erase(addr);
	}
	ep->peers_reclaimed += n;
	if (!ep->peer_limit.full(ep->peers.size()))
		ep->peers_full_warned = false;
	VRMA_INFO(FI_LOG_EP_CTRL, "RDM: gave back %zu idle peers (%zu left, %llu in all)\n", n, ep->peers.size(),
		  static_cast<unsigned long long>(ep->peers_reclaimed));
} catch (...) {
	// Out of memory for the scan: the table stays as it is (full, new
	// peers keep waiting), and the next interval tries again.
}

namespace {

// How long an initiator turned away with kConnFlagBusy waits before it tries
// again: a few probes.
constexpr auto kBusyRetry = std::chrono::milliseconds(250);
// The connection manager's reason for a request nobody listens for
// (IB_CM_REJ_INVALID_SERVICE_ID): the peer's endpoint may be still on its
// way to fi_enable, as when jobs start all their ranks at once (fabtests'
// client may connect before its server listens). Tried again every
// kUnheardRetry until cm_timeout_ms after the first, then refused.
constexpr int kRejNoListener = 8;
constexpr auto kUnheardRetry = std::chrono::milliseconds(50);

// Whether a refusal for want of a listener is tried again (its retry time
// set) rather than reported.
bool retry_unheard(RdmPeer *peer)
{
	const auto now = std::chrono::steady_clock::now();
	if (peer->unheard_since == std::chrono::steady_clock::time_point{})
		peer->unheard_since = now;
	if (now - peer->unheard_since >= std::chrono::milliseconds(params.cm_timeout_ms)) {
		peer->unheard_since = {};
		return false;
	}
	peer->expect_until = now + kUnheardRetry;
	return true;
}

// The acceptor's challenge (a kConnFlagChallenge reject of c): answered with
// a new connection once the acceptor proved the key; c ends either way.
void answer_challenge(RdmEp *ep, RdmPeer *peer, Conn *c, const rdm::RdmConnHeader &h)
{
	const char *why = nullptr;
	if (ep->auth_key.empty())
		why = "it requires a job key (auth_key, FI_VRMA_AUTH_KEY) and this endpoint has none";
	else if (peer->auth_answered)
		why = "it challenged our answer again";
	else if (!(h.addr == peer->addr))
		why = "its challenge names another address";
	else if (!auth::mac_equal(h.mac, auth::challenge_proof(ep->auth_key, peer->auth_ask, h.cookie, h.addr,
								h.nonce, ep->self, ep->nonce)))
		why = "it did not prove the job key (another key, or not the peer)";
	if (why) {
		VRMA_WARN(FI_LOG_EP_CTRL, "RDM: not connecting to %s: %s\n", AddrStr(peer->addr).c_str(), why);
		rdm_conn_failed(peer, c, FI_ECONNREFUSED);
		return;
	}
	rdm_conn_failed(peer, c, 0);
	peer->auth_challenged = true;
	peer->auth_cookie = h.cookie;
	peer->auth_peer_nonce = h.nonce;
	if (int rc = start_connect(peer))
		peer->error = -rc;
}

} // namespace

void rdm_cm_event(RdmEp *ep, rdma_cm_event *ev, rdma_cm_id *&destroy) noexcept
{
	destroy = nullptr;
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		destroy = accept_request(ep, ev);
		return;
	}
	auto *c = static_cast<Conn *>(ev->id->context);
	if (!c || ev->listen_id)
		return;
	RdmPeer *peer = c->peer;
	if (!live_conn(peer, c))
		return; // a connection that lost a crossing, or failed: being reaped
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(c->id.get(), params.cm_timeout_ms)) {
			VRMA_WARN(FI_LOG_EP_CTRL, "RDM: rdma_resolve_route: %s\n", strerror(errno));
			rdm_conn_failed(peer, c, FI_EHOSTUNREACH);
		}
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED: {
		if (int rc = create_qp(ep, *c)) {
			rdm_conn_failed(peer, c, -rc);
			break;
		}
		ConnParam p;
		fill_param(ep, p, 0, peer);
		conn_set_retry(c->id.get(), p.param);
		if (rdma_connect(c->id.get(), &p.param)) {
			VRMA_WARN(FI_LOG_EP_CTRL, "RDM: rdma_connect: %s\n", strerror(errno));
			rdm_conn_failed(peer, c, FI_ECONNREFUSED);
		}
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED: {
		const bool ours = peer->conn.get() == c && peer->initiated;
		if (ours) {
			rdm::RdmConnHeader h;
			const bool decoded = rdm::decode_conn_header(
				static_cast<const uint8_t *>(ev->param.conn.private_data),
				ev->param.conn.private_data_len, h) && (h.flags & rdm::kConnFlagAccept);
			if (!ep->auth_key.empty() &&
			    (!decoded || !(h.flags & rdm::kConnFlagAuth) || !peer->auth_answered ||
			     !auth::mac_equal(h.mac, auth::acceptor_proof(ep->auth_key, peer->auth_answer)))) {
				VRMA_WARN(FI_LOG_EP_CTRL,
					  "RDM: the peer at %s did not prove the job key in its answer: connection dropped\n",
					  AddrStr(peer->addr).c_str());
				rdm_conn_failed(peer, c, FI_ECONNREFUSED);
				break;
			}
			if (decoded) {
				peer->nonce = h.nonce;
				c->peer_cm_flags.store(rdm_peer_cm_flags(h.flags));
				c->peer_closes = h.flags & rdm::kConnFlagClose;
				c->peer_idles = h.flags & rdm::kConnFlagIdle;
				peer->key_table = h.key_table;
			}
		}
		c->peer_flags_pending = false;
		rdm_conn_established(peer, c);
		// An authenticated request had no room for our key table: it
		// follows now that the acceptor proved the key.
		if (ours && peer->auth_answered && ep->domain->scalable_keys && live_conn(peer, c)) {
			uint8_t m[rdm::kKeyTableMsgBytes];
			rdm::encode_key_table(m, key_table_ref(ep->domain));
			if (ssize_t rc = rdm_post_send_copy(ep, c, m, sizeof m)) {
				VRMA_WARN(FI_LOG_EP_CTRL, "RDM: cannot send the key table to %s: %s\n",
					  AddrStr(peer->addr).c_str(), fi_strerror(static_cast<int>(-rc)));
				rdm_conn_failed(peer, c, FI_ECONNABORTED);
			}
		}
		break;
	}
	case RDMA_CM_EVENT_REJECTED: {
		rdm::RdmConnHeader h;
		const bool decoded = rdm::decode_conn_header(
			static_cast<const uint8_t *>(ev->param.conn.private_data), ev->param.conn.private_data_len, h);
		if (decoded && (h.flags & rdm::kConnFlagCrossing)) {
			// The peer keeps its own connection to us: wait for it.
			peer->expect_until = std::chrono::steady_clock::now() +
					     std::chrono::milliseconds(4 * params.cm_timeout_ms);
			rdm_conn_failed(peer, c, 0);
			break;
		}
		if (decoded && (h.flags & rdm::kConnFlagBusy)) {
			// Our address has a live connection there (we restarted, or
			// someone claims it), or its peer table is full: try again
			// once its probe or its reclaim had time.
			VRMA_INFO(FI_LOG_EP_CTRL,
				  "RDM: %s turned us away for now (a live connection for our address, or a full peer table): trying again\n",
				  AddrStr(peer->addr).c_str());
			peer->expect_until = std::chrono::steady_clock::now() + kBusyRetry;
			rdm_conn_failed(peer, c, 0);
			break;
		}
		if (decoded && (h.flags & rdm::kConnFlagChallenge)) {
			answer_challenge(ep, peer, c, h);
			break;
		}
		if (!decoded && ev->status == kRejNoListener && retry_unheard(peer)) {
			VRMA_DBG(FI_LOG_EP_CTRL, "RDM: nobody listens at %s yet: trying again\n",
				 AddrStr(peer->addr).c_str());
			rdm_conn_failed(peer, c, 0);
			break;
		}
		if (peer->auth_answered)
			VRMA_WARN(FI_LOG_EP_CTRL, "RDM: %s refused our answer to its challenge (another job key?)\n",
				  AddrStr(peer->addr).c_str());
		else
			VRMA_INFO(FI_LOG_EP_CTRL, "RDM: connection refused (status %d)\n", ev->status);
		rdm_conn_failed(peer, c, FI_ECONNREFUSED);
		break;
	}
	case RDMA_CM_EVENT_DISCONNECTED:
		// What the peer sent before it disconnected may still wait in
		// the CQ (with FI_PROGRESS_MANUAL nobody has read it): an answer
		// there completes its operation instead of being reported lost
		// with the connection (SOS's last barrier atomic, answered just
		// before the peer's shmem_finalize closed its endpoint).
		// Progress frees no connection, so c stays valid.
		rdm_progress_locked(ep);
		if (!live_conn(peer, c))
			break;
		if (peer->conn.get() == c && peer->idle == RdmPeer::Idle::Agreed) {
			// The asker closed as we agreed.
			VRMA_INFO(FI_LOG_EP_CTRL, "RDM: the unused connection to %s closed\n",
				  AddrStr(peer->addr).c_str());
			ep->idle_closed++;
			rdm_conn_failed(peer, c, 0);
			break;
		}
		[[fallthrough]];
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		VRMA_INFO(FI_LOG_EP_CTRL, "RDM: connection event %s (status %d)\n",
			  rdma_event_str(ev->event), ev->status);
		rdm_conn_failed(peer, c, cm_error(ev->event, ev->status));
		break;
	default:
		break;
	}
}

void rdm_conn_established(RdmPeer *peer, Conn *c) noexcept
{
	if (c->state.load() != EpState::Connecting)
		return; // seen already (the event after a first message), or failed
	if (peer->conn.get() == c) {
		if (peer->ep->connecting)
			peer->ep->connecting--;
		peer->error = 0;
		peer->unheard_since = {};
		peer->connect_since = {};
	}
	// What the queue pair issues at once, as rdma_cm settled it with the
	// peer's responder resources (both sides' limits).
	ibv_qp_attr attr{};
	ibv_qp_init_attr init{};
	const bool queried =
		c->qp && !ibv_query_qp(c->qp, &attr, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT, &init);
	const uint32_t issued = queried ? std::max<uint32_t>(attr.max_rd_atomic, 1) : 1;
	if (queried && !peer->ep->budget_logged) {
		// What the device got (rdma_cm's path timeout, or
		// FI_VRMA_ACK_TIMEOUT / FI_VRMA_RETRY_COUNT): a peer that answers
		// nothing fails the queue pair after (retry_cnt + 1) x timeout.
		peer->ep->budget_logged = true;
		VRMA_INFO(FI_LOG_EP_CTRL, "RDM: connections resend after 4.096 us x 2^%u, %u times%s\n",
			  static_cast<unsigned>(attr.timeout), static_cast<unsigned>(attr.retry_cnt),
			  attr.retry_cnt == 7 ? " (7: without end on soft-RoCE)" : "");
	}
	c->read_credits = rdm_params.rndv_reads
				  ? static_cast<uint32_t>(std::min<size_t>(rdm_params.rndv_reads, issued))
				  : issued;
	c->state.store(EpState::Connected, std::memory_order_release);
}

#ifdef VRMA_LOCK_CHECKS
bool rdm_conn_held_here(const Conn *conn) noexcept
{
	return conn->peer->ep->lock.held_here();
}
#endif

void rdm_more_flush(RdmEp *ep) noexcept
{
	RdmPeer *held = ep->more_peer.exchange(nullptr, std::memory_order_relaxed);
	if (held && held->conn && held->conn->more_held)
		flush_more(held->conn.get());
}

void rdm_more_flush_unlocked(RdmEp *ep) noexcept
{
	std::lock_guard guard(ep->lock);
	rdm_more_flush(ep);
}

void rdm_close_peers(RdmEp *ep) noexcept
{
	ep->more_peer.store(nullptr, std::memory_order_relaxed);
	for (auto &[addr, peer] : ep->peers) {
		if (peer->conn)
			rdm_conn_failed(peer.get(), peer->conn.get(), FI_ECANCELED);
		if (peer->loopback)
			rdm_conn_failed(peer.get(), peer->loopback.get(), FI_ECANCELED);
	}
}

} // namespace vrma
