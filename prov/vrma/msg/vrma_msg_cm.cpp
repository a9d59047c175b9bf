// Connection management of the MSG endpoint over rdma_cm: connect/accept/
// shutdown, names, CM data, and the translation of rdma_cm events into EQ
// entries (the passive endpoint's: vrma_msg_pep.cpp).
#include "vrma_msg_ep.h"

namespace vrma {

// Puts vrma's header (with the sender's wire::kCmFlag*) in front of the
// application's CM data.
int build_private_data(const void *param, size_t len, uint8_t flags, PrivateData &out,
		       uint8_t &out_len)
{
	if (len > wire::kCmUserDataMax) {
		VRMA_WARN(FI_LOG_EP_CTRL, "CM data of %zu bytes exceeds FI_OPT_CM_DATA_SIZE (%zu)\n",
			  len, wire::kCmUserDataMax);
		return -FI_EINVAL;
	}
	if (!param && len) {
		VRMA_WARN(FI_LOG_EP_CTRL, "NULL CM data of length %zu\n", len);
		return -FI_EINVAL;
	}
	wire::CmHeader h{wire::kCmMagic, wire::kCmVersion, static_cast<uint8_t>(len), flags};
	memcpy(out.data(), &h, sizeof h);
	if (len)
		memcpy(out.data() + sizeof h, param, len);
	out_len = static_cast<uint8_t>(sizeof h + len);
	return 0;
}

int copy_name(const sockaddr *sa, void *addr, size_t *addrlen)
{
	if (!addrlen) {
		VRMA_WARN(FI_LOG_EP_CTRL, "NULL address length\n");
		return -FI_EINVAL;
	}
	size_t need = sockaddr_len(sa);
	if (!need)
		return -FI_EADDRNOTAVAIL;
	size_t have = *addrlen;
	*addrlen = need;
	if (have < need || !addr)
		return -FI_ETOOSMALL;
	memcpy(addr, sa, need);
	return 0;
}

const sockaddr *setname_addr(const void *addr, size_t addrlen)
{
	const sockaddr *sa = static_cast<const sockaddr *>(addr);
	if (!addr || addrlen < sockaddr_len(sa) || !sockaddr_len(sa)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_setname: not a sockaddr_in/in6 address\n");
		return nullptr;
	}
	return sa;
}

namespace {

// wire::kCmFlag* this endpoint announces to its peer.
uint8_t ep_cm_flags(const Ep *ep)
{
	uint8_t flags = 0;
	if (ep->rma_pmem)
		flags |= wire::kCmFlagCommitService;
	if (ep->rma_events)
		flags |= wire::kCmFlagRmaEvents;
	// Immediate data lands in vrma's own receives, or the application
	// took on FI_RX_CQ_DATA; otherwise it would eat a posted receive.
	if (ep->rx_mode != RxMode::AppBuffers || ep->rx_cq_data_mode)
		flags |= wire::kCmFlagTakesCqData;
	if (ep->rx_mode == RxMode::Staged)
		flags |= wire::kCmFlagStagedRx;
	if (ep->rx_mode == RxMode::Staged && ep->service)
		flags |= wire::kCmFlagConfirmsMsgs;
	if (ep->domain->direct_write_to_pmem.load())
		flags |= wire::kCmFlagDirectWritePmem;
	return flags;
}

// The application's part of received private data and the peer's flags;
// false if it is not from a vrma peer (or absent).
bool parse_private_data(const void *data, size_t len, const uint8_t **user, size_t *user_len,
			uint8_t *flags = nullptr)
{
	*user = nullptr;
	*user_len = 0;
	if (flags)
		*flags = 0;
	if (!data || len < sizeof(wire::CmHeader))
		return false;
	wire::CmHeader h;
	memcpy(&h, data, sizeof h);
	if (h.magic != wire::kCmMagic || h.version != wire::kCmVersion ||
	    h.user_len > len - sizeof h)
		return false;
	*user = static_cast<const uint8_t *>(data) + sizeof h;
	*user_len = h.user_len;
	if (flags)
		*flags = h.flags;
	return true;
}

fid *context_fid(rdma_cm_id *id) { return id ? static_cast<fid *>(id->context) : nullptr; }

Ep *context_ep(rdma_cm_id *id)
{
	fid *f = context_fid(id);
	return f && f->fclass == FI_CLASS_EP ? from_fid<Ep>(f) : nullptr;
}

std::vector<uint8_t> cm_entry(fid *source, fi_info *info, const uint8_t *user, size_t user_len)
{
	std::vector<uint8_t> buf(sizeof(fi_eq_cm_entry) + user_len);
	fi_eq_cm_entry entry{};
	entry.fid = source;
	entry.info = info;
	memcpy(buf.data(), &entry, sizeof entry);
	if (user_len)
		memcpy(buf.data() + sizeof entry, user, user_len);
	return buf;
}

// FI_SHUTDOWN for the endpoint.
EqEntry shutdown_event(Ep *ep)
{
	EqEntry e;
	e.event = FI_SHUTDOWN;
	e.source = &ep->fid;
	e.data = cm_entry(&ep->fid, nullptr, nullptr, 0);
	return e;
}

// Queues the endpoint's one FI_SHUTDOWN: its connection ended, by its own
// fi_shutdown, the peer's, both at once, or a failed request. `locked` is
// the endpoint's EQ when the caller holds its lock (an event handler).
void report_shutdown(Ep *ep, Eq *locked) noexcept
try {
	if (locked)
		VRMA_ASSERT_HELD(locked->lock);
	if (!ep->eq || ep->shutdown_reported.exchange(true))
		return;
	if (locked)
		locked->queue.push_back(shutdown_event(ep));
	else
		eq_post(ep->eq, shutdown_event(ep));
} catch (...) {
	VRMA_WARN(FI_LOG_EQ, "out of memory reporting FI_SHUTDOWN: event lost\n");
}

void push_error(Eq *eq, Ep *ep, int err, int prov_errno, const uint8_t *data, size_t len)
{
	VRMA_ASSERT_HELD(eq->lock);
	EqEntry e;
	e.is_error = true;
	e.source = &ep->fid;
	e.err.fid = &ep->fid;
	e.err.context = ep->fid.context;
	e.err.err = err;
	e.err.prov_errno = prov_errno;
	if (len)
		e.data.assign(data, data + len);
	eq->queue.push_back(std::move(e));
}

rdma_cm_id *handle_connect_request(Eq *eq, rdma_cm_event *ev)
{
	VRMA_ASSERT_HELD(eq->lock);
	fid *lf = context_fid(ev->listen_id);
	if (!lf || lf->fclass != FI_CLASS_PEP) {
		rdma_reject(ev->id, nullptr, 0);
		return ev->id;
	}
	Pep *pep = from_fid<Pep>(lf);
	const uint8_t *user;
	size_t user_len;
	uint8_t peer_flags;
	if (!parse_private_data(ev->param.conn.private_data, ev->param.conn.private_data_len,
				&user, &user_len, &peer_flags)) {
		VRMA_INFO(FI_LOG_EP_CTRL, "refusing a connection request from a non-vrma peer\n");
		rdma_reject(ev->id, nullptr, 0);
		return ev->id;
	}
	FiInfoPtr info(abi::dup_info(pep->info.get(), api_version()));
	auto cr = std::make_unique<ConnReq>();
	if (!info) {
		rdma_reject(ev->id, nullptr, 0);
		return ev->id;
	}
	free(info->src_addr);
	free(info->dest_addr);
	info->src_addr = info->dest_addr = nullptr;
	const sockaddr *local = rdma_get_local_addr(ev->id);
	const sockaddr *peer = rdma_get_peer_addr(ev->id);
	info->src_addrlen = sockaddr_len(local);
	info->dest_addrlen = sockaddr_len(peer);
	info->src_addr = malloc(info->src_addrlen);
	info->dest_addr = malloc(info->dest_addrlen);
	if (info->src_addr)
		memcpy(info->src_addr, local, info->src_addrlen);
	if (info->dest_addr)
		memcpy(info->dest_addr, peer, info->dest_addrlen);
	if (ev->id->verbs && info->domain_attr) {
		free(info->domain_attr->name);
		info->domain_attr->name = strdup(ev->id->verbs->device->name);
	}
	cr->fclass = FI_CLASS_CONNREQ;
	cr->context = nullptr;
	cr->ops = nullptr;
	cr->id = ev->id;
	cr->responder_resources = ev->param.conn.responder_resources;
	cr->initiator_depth = ev->param.conn.initiator_depth;
	cr->peer_cm_flags = peer_flags;
	info->handle = cr.release();
	EqEntry e;
	e.event = FI_CONNREQ;
	e.source = &pep->fid;
	e.info = info.get();
	e.data = cm_entry(&pep->fid, info.release(), user, user_len);
	eq->queue.push_back(std::move(e));
	return nullptr;
}

} // namespace

void ep_connection_failed(Ep *ep) noexcept
try {
	EpState expected = EpState::Connected;
	if (!ep->conn.state.compare_exchange_strong(expected, EpState::Shutdown))
		return; // already reported (or never connected)
	VRMA_INFO(FI_LOG_EP_DATA, "QP %u failed: connection shut down\n", ep->conn.qp ? ep->conn.qp->qp_num : 0);
	report_shutdown(ep, nullptr);
	if (ep->service)
		pmem_connection_lost(ep);
	// The failed request moved the QP to the error state: what FI_MORE
	// held flushes now rather than at the DISCONNECTED event, which waits
	// for a peer that may be gone (more_lock is a leaf: fine under the CQ
	// lock, and the poster never holds it while polling).
	ep_cancel_held(ep);
	// Tell the peer: its side shuts down too instead of waiting for a
	// retry timeout.
	rdma_disconnect(ep->conn.id.get());
} catch (...) {
	VRMA_WARN(FI_LOG_EQ, "out of memory reporting a failed connection\n");
}

namespace {

// The connection is over on both sides: outstanding operations complete
// with FI_ECANCELED, held ones too.
void end_connection(Ep *ep) noexcept
{
	ep_set_error(ep);
	ep_cancel_held(ep);
	if (ep->service)
		pmem_connection_lost(ep);
}

// The peer ended the connection and this side is done with it: flush, and
// answer the peer's request so that its side learns the end (its
// DISCONNECTED: the QP it kept up for its own ACKs goes down) without
// waiting for this endpoint's fi_close or the request's timeout.
void end_peer_disconnect(Ep *ep) noexcept
{
	end_connection(ep);
	if (rdma_disconnect(ep->conn.id.get()))
		VRMA_INFO(FI_LOG_EP_CTRL, "answering the peer's disconnect: %s\n", strerror(errno));
}

// Hazard (the other half of ep_disconnect's): the peer's request can
// overtake the ACKs of this side's last sends. On soft-RoCE the peer's
// responder completes a receive before it sends the ACK, and a thread of
// this side that posts the send carries both through the device; a peer
// that reads the message and shuts down at once can have its request
// handled here while that thread is still between the two. The error state
// now would flush a send the peer has: it would end FI_ECANCELED. So while
// sends are in flight the QP stays up and the request unanswered (the peer
// keeps its QP up until the answer: its ACKs still leave), until the sends
// completed (the application reads them) or kLingerMs passed. False: end
// the connection now (nothing in flight, FI_MORE holds requests, fi_close
// is under way, or no memory to remember it).
bool linger_begin(Eq *eq, Ep *ep) noexcept
try {
	VRMA_ASSERT_HELD(eq->lock);
	Conn &conn = ep->conn;
	if (!conn.qp || conn.tx.outstanding() == 0 || conn.closing.load() ||
	    conn.more_held.load(std::memory_order_relaxed))
		return false;
	ep->linger_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLingerMs);
	eq->lingering.push_back(ep);
	eventfd_signal(eq->kick_fd.get());
	return true;
} catch (...) {
	return false;
}

} // namespace

void eq_linger_check(Eq *eq) noexcept
{
	VRMA_ASSERT_HELD(eq->lock);
	const auto now = std::chrono::steady_clock::now();
	std::erase_if(eq->lingering, [now](Ep *ep) {
		const size_t left = ep->conn.tx.outstanding();
		if (left && now < ep->linger_until)
			return false;
		if (left)
			VRMA_INFO(FI_LOG_EP_CTRL, "QP %u: %zu requests still in flight %d ms after the peer's disconnect; flushing them\n",
				  ep->conn.qp->qp_num, left, kLingerMs);
		end_peer_disconnect(ep);
		return true;
	});
}

void eq_linger_forget(Eq *eq, Ep *ep) noexcept
{
	VRMA_ASSERT_HELD(eq->lock);
	std::erase(eq->lingering, ep);
}

rdma_cm_id *eq_handle_cm_event(Eq *eq, rdma_cm_event *ev) noexcept
try {
	VRMA_ASSERT_HELD(eq->lock);
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
		return handle_connect_request(eq, ev);
	Ep *ep = context_ep(ev->id);
	if (!ep) {
		VRMA_DBG(FI_LOG_EP_CTRL, "rdma_cm event %s for no endpoint\n", rdma_event_str(ev->event));
		return nullptr;
	}
	const uint8_t *user = nullptr;
	size_t user_len = 0;
	switch (ev->event) {
	case RDMA_CM_EVENT_ESTABLISHED: {
		uint8_t peer_flags = 0;
		parse_private_data(ev->param.conn.private_data, ev->param.conn.private_data_len,
				   &user, &user_len, &peer_flags);
		// The accepting side learnt the peer's flags from the request.
		if (!ep->passive_side)
			msg_set_peer_flags(ep, peer_flags);
		EpState expected = EpState::Connecting;
		if (!ep->conn.state.compare_exchange_strong(expected, EpState::Connected)) {
			// fi_shutdown while connecting reported FI_SHUTDOWN: the
			// connection ends here, it is not announced.
			rdma_disconnect(ev->id);
			break;
		}
		EqEntry e;
		e.event = FI_CONNECTED;
		e.source = &ep->fid;
		e.data = cm_entry(&ep->fid, nullptr, user, user_len);
		eq->queue.push_back(std::move(e));
		break;
	}
	case RDMA_CM_EVENT_REJECTED:
		parse_private_data(ev->param.conn.private_data, ev->param.conn.private_data_len,
				   &user, &user_len);
		ep->conn.state.store(EpState::Shutdown, std::memory_order_release);
		push_error(eq, ep, FI_ECONNREFUSED, ev->status, user, user_len);
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		ep->conn.state.store(EpState::Shutdown, std::memory_order_release);
		push_error(eq, ep, ev->status < 0 ? -errno_to_fi(ev->status) : FI_ECONNREFUSED,
			   ev->status, nullptr, 0);
		break;
	case RDMA_CM_EVENT_DISCONNECTED: {
		EpState was = ep->conn.state.exchange(EpState::Shutdown);
		ep->disconnect_answered.store(true, std::memory_order_release);
		if (was == EpState::Connected || was == EpState::Connecting) {
			// The peer ended the connection: FI_SHUTDOWN now (no new
			// operation is taken from here on); the QP and the answer
			// may wait for the sends in flight (linger_begin).
			report_shutdown(ep, eq);
			if (!linger_begin(eq, ep))
				end_peer_disconnect(ep);
		} else {
			// This side ended it (fi_shutdown, a failed request), which
			// reported FI_SHUTDOWN already; this is the peer's answer.
			end_connection(ep);
		}
		break;
	}
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		ep->conn.state.store(EpState::Shutdown, std::memory_order_release);
		ep_set_error(ep);
		ep_cancel_held(ep);
		push_error(eq, ep, FI_ENODEV, 0, nullptr, 0);
		break;
	default:
		VRMA_DBG(FI_LOG_EP_CTRL, "ignoring rdma_cm event %s\n", rdma_event_str(ev->event));
		break;
	}
	return nullptr;
} catch (...) {
	VRMA_WARN(FI_LOG_EQ, "out of memory translating rdma_cm event %s: event lost\n",
		  rdma_event_str(ev->event));
	return nullptr;
}

namespace {

int cm_setname(fid_t f, void *addr, size_t addrlen) noexcept
{
	const sockaddr *sa = setname_addr(addr, addrlen);
	if (!sa)
		return -FI_EINVAL;
	Ep *ep = from_fid<Ep>(f);
	if (ep->addr_resolved || ep->passive_side || ep->conn.state.load() != EpState::Idle) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_setname: endpoint already has an address\n");
		return -FI_EOPBADSTATE;
	}
	if (rdma_bind_addr(ep->conn.id.get(), const_cast<sockaddr *>(sa))) {
		int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_setname(%s): %s\n", sockaddr_str(sa).c_str(),
			  strerror(err));
		return errno_to_fi(err);
	}
	return 0;
}

int cm_getname(fid_t f, void *addr, size_t *addrlen) noexcept
{
	Ep *ep = from_fid<Ep>(f);
	return copy_name(rdma_get_local_addr(ep->conn.id.get()), addr, addrlen);
}

int cm_getpeer(fid_ep *f, void *addr, size_t *addrlen) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	const sockaddr *sa = rdma_get_peer_addr(ep->conn.id.get());
	if (!sockaddr_len(sa) ||
	    (sa->sa_family == AF_INET && !reinterpret_cast<const sockaddr_in *>(sa)->sin_port)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_getpeer: endpoint has no peer\n");
		return -FI_ENOTCONN;
	}
	return copy_name(sa, addr, addrlen);
}

uint8_t clamp_rd_atom(int device_value)
{
	return static_cast<uint8_t>(std::min(device_value, 255));
}

// Binds the endpoint's cm id to the EQ's event channel, from its private
// synchronous channel or from the listener's.
int attach_to_eq(Ep *ep)
{
	if (!ep->eq) {
		VRMA_WARN(FI_LOG_EP_CTRL, "endpoint is not bound to an EQ\n");
		return -FI_ENOEQ;
	}
	if (ep->conn.id->channel == ep->eq->channel.get())
		return 0;
	std::lock_guard guard(ep->eq->lock);
	if (rdma_migrate_id(ep->conn.id.get(), ep->eq->channel.get())) {
		int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "rdma_migrate_id: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	return 0;
}

int cm_connect(fid_ep *f, const void *addr, const void *param, size_t paramlen) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	if (ep->passive_side || ep->conn.state.load() == EpState::Connecting ||
	    ep->conn.state.load() == EpState::Connected || ep->conn.state.load() == EpState::Shutdown) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_connect: endpoint cannot connect in its state\n");
		return -FI_EOPBADSTATE;
	}
	PrivateData pd;
	uint8_t pd_len;
	if (int rc = build_private_data(param, paramlen, ep_cm_flags(ep), pd, pd_len))
		return rc;
	if (!ep->eq) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_connect: endpoint is not bound to an EQ\n");
		return -FI_ENOEQ;
	}
	const sockaddr *dest = static_cast<const sockaddr *>(addr);
	if (dest && !sockaddr_len(dest)) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_connect: not a sockaddr_in/in6 address\n");
		return -FI_EINVAL;
	}
	if (!dest && !ep->addr_resolved) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_connect: no destination address\n");
		return -FI_EINVAL;
	}
	if (dest && ep->addr_resolved) {
		const sockaddr *have = rdma_get_peer_addr(ep->conn.id.get());
		if (sockaddr_len(have) != sockaddr_len(dest) ||
		    memcmp(have, dest, sockaddr_len(dest))) {
			if (ep->conn.qp) {
				VRMA_WARN(FI_LOG_EP_CTRL,
					  "fi_connect: %s differs from the address the endpoint was enabled for\n",
					  sockaddr_str(dest).c_str());
				return -FI_EINVAL;
			}
		} else {
			dest = nullptr; // already resolved to it
		}
	}
	if (dest) {
		const sockaddr *src = static_cast<const sockaddr *>(ep->info->src_addr);
		if (rdma_resolve_addr(ep->conn.id.get(), const_cast<sockaddr *>(src),
				      const_cast<sockaddr *>(dest), params.cm_timeout_ms)) {
			int err = errno;
			VRMA_WARN(FI_LOG_EP_CTRL, "fi_connect: resolving %s: %s\n",
				  sockaddr_str(dest).c_str(), strerror(err));
			return errno_to_fi(err);
		}
		ep->addr_resolved = true;
	}
	if (ep->conn.id->verbs != ep->domain->ctx) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_connect: the destination is not reached through %s\n",
			  ep->domain->ctx->device->name);
		return -FI_EINVAL;
	}
	if (!ep->conn.qp) {
		if (int rc = ep_enable(ep))
			return rc;
	}
	// Route resolution is quick once the address is resolved; done on the
	// private synchronous channel before the id moves to the EQ.
	if (ep->conn.id->channel != ep->eq->channel.get() &&
	    rdma_resolve_route(ep->conn.id.get(), params.cm_timeout_ms)) {
		int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_connect: route resolution: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	if (int rc = attach_to_eq(ep))
		return rc;
	rdma_conn_param cp{};
	cp.private_data = pd.data();
	cp.private_data_len = pd_len;
	cp.responder_resources = clamp_rd_atom(ep->domain->dev_attr.max_qp_rd_atom);
	cp.initiator_depth = clamp_rd_atom(ep->domain->dev_attr.max_qp_init_rd_atom);
	conn_set_retry(ep->conn.id.get(), cp);
	cp.rnr_retry_count = 7; // infinite: a send waits for the peer's receive
	ep->conn.state.store(EpState::Connecting);
	if (rdma_connect(ep->conn.id.get(), &cp)) {
		int err = errno;
		ep->conn.state.store(EpState::Enabled);
		VRMA_WARN(FI_LOG_EP_CTRL, "rdma_connect: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	return 0;
}

int cm_accept(fid_ep *f, const void *param, size_t paramlen) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	if (!ep->passive_side || ep->conn.state.load() == EpState::Connecting ||
	    ep->conn.state.load() == EpState::Connected) {
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_accept: endpoint was not created from a connection request, or already accepted\n");
		return -FI_EOPBADSTATE;
	}
	PrivateData pd;
	uint8_t pd_len;
	if (int rc = build_private_data(param, paramlen, ep_cm_flags(ep), pd, pd_len))
		return rc;
	if (!ep->conn.qp) {
		if (int rc = ep_enable(ep))
			return rc;
	}
	if (int rc = attach_to_eq(ep))
		return rc;
	rdma_conn_param cp{};
	cp.private_data = pd.data();
	cp.private_data_len = pd_len;
	cp.responder_resources = std::min(ep->responder_resources,
					  clamp_rd_atom(ep->domain->dev_attr.max_qp_rd_atom));
	cp.initiator_depth = std::min(ep->initiator_depth,
				      clamp_rd_atom(ep->domain->dev_attr.max_qp_init_rd_atom));
	conn_set_retry(ep->conn.id.get(), cp);
	cp.rnr_retry_count = 7;
	ep->conn.state.store(EpState::Connecting);
	if (rdma_accept(ep->conn.id.get(), &cp)) {
		int err = errno;
		ep->conn.state.store(EpState::Enabled);
		VRMA_WARN(FI_LOG_EP_CTRL, "rdma_accept: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	return 0;
}

int cm_shutdown(fid_ep *f, uint64_t flags) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	(void)flags;
	EpState was = ep->conn.state.exchange(EpState::Shutdown);
	if (was != EpState::Connected && was != EpState::Connecting) {
		ep->conn.state.store(was);
		VRMA_WARN(FI_LOG_EP_CTRL, "fi_shutdown: endpoint is not connected\n");
		return -FI_ENOTCONN;
	}
	int rc = 0;
	if (was == EpState::Connected ? ep_disconnect(ep) : rdma_disconnect(ep->conn.id.get())) {
		int err = errno;
		VRMA_WARN(FI_LOG_EP_CTRL, "rdma_disconnect: %s\n", strerror(err));
		rc = errno_to_fi(err);
	} else if (was == EpState::Connected) {
		ep->disconnect_sent.store(true, std::memory_order_release);
	}
	// Cancelled, not discarded: what FI_MORE held flushes into the CQ now
	// (posted operations flush with the QP), each operation once.
	ep_cancel_held(ep);
	// The local end is notified too (what fabtests' fi_cm_data waits for
	// on both sides): now, not when the peer answers, which a peer that is
	// gone never does.
	report_shutdown(ep, nullptr);
	return rc;
}

int cm_join(fid_ep *, const void *, uint64_t, fid_mc **, void *) noexcept
{
	VRMA_WARN(FI_LOG_EP_CTRL, "multicast is not supported\n");
	return -FI_ENOSYS;
}

} // namespace

int ep_getopt(fid_t f, int level, int optname, void *optval, size_t *optlen) noexcept
{
	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	switch (optname) {
	case FI_VRMA_OPT_COMMIT_METHOD: {
		if (!optval || !optlen || *optlen < sizeof(int)) {
			if (optlen)
				*optlen = sizeof(int);
			return -FI_ETOOSMALL;
		}
		if (f->fclass != FI_CLASS_EP)
			return -FI_ENOPROTOOPT;
		Ep *ep = from_fid<Ep>(f);
		if (ep->conn.state.load(std::memory_order_acquire) != EpState::Connected) {
			VRMA_WARN(FI_LOG_EP_CTRL, "FI_VRMA_OPT_COMMIT_METHOD: known once connected\n");
			return -FI_EOPBADSTATE;
		}
		*static_cast<int *>(optval) = pmem_commit_method(ep);
		*optlen = sizeof(int);
		return 0;
	}
	case FI_OPT_CM_DATA_SIZE:
		if (!optval || !optlen || *optlen < sizeof(size_t)) {
			if (optlen)
				*optlen = sizeof(size_t);
			return -FI_ETOOSMALL;
		}
		*static_cast<size_t *>(optval) = wire::kCmUserDataMax;
		*optlen = sizeof(size_t);
		return 0;
	default:
		return -FI_ENOPROTOOPT;
	}
}

int ep_setopt(fid_t, int level, int optname, const void *, size_t) noexcept
{
	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	(void)optname;
	return -FI_ENOPROTOOPT;
}

const fi_ops_cm ep_cm_ops = {
	.size = sizeof(fi_ops_cm),
	.setname = cm_setname,
	.getname = cm_getname,
	.getpeer = cm_getpeer,
	.connect = cm_connect,
	.listen = VRMA_NOSYS(fi_ops_cm, listen),
	.accept = cm_accept,
	.reject = VRMA_NOSYS(fi_ops_cm, reject),
	.shutdown = cm_shutdown,
	.join = cm_join,
};

} // namespace vrma
