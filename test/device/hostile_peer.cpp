#include "hostile_peer.h"

#include <algorithm>

#include <fcntl.h>

#include <random>

namespace vt {

namespace rdm = vrma::rdm;

namespace {

uint64_t fresh_nonce()
{
	static std::mt19937_64 gen{std::random_device{}()};
	uint64_t n;
	do
		n = gen();
	while (n == 0);
	return n;
}

} // namespace

HostilePeer::HostilePeer(const sockaddr_in &victim, const HostileOptions &opt)
	: victim_(victim), claim_(opt.claim), nonce_(opt.nonce ? opt.nonce : fresh_nonce()),
	  conn_flags_(opt.conn_flags), cookie_(opt.cookie), mac_(opt.mac), recv_count_(opt.recv_count),
	  recv_bytes_(opt.recv_bytes), recv_later_(opt.recv_later)
{
	channel_ = rdma_create_event_channel();
	ck_assert_msg(channel_, "hostile peer: rdma_create_event_channel: %s", strerror(errno));
	const int fl = fcntl(channel_->fd, F_GETFL);
	ck_assert_msg(fl >= 0 && fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK) == 0,
		      "hostile peer: O_NONBLOCK on the event channel: %s", strerror(errno));
	ck_assert_msg(rdma_create_id(channel_, &id_, this, RDMA_PS_TCP) == 0,
		      "hostile peer: rdma_create_id: %s", strerror(errno));
	// With no receive buffers (a peer that takes nothing) one is still
	// registered and the queue takes one: neither is ever posted.
	recv_mem_.assign(std::max<size_t>(recv_count_ + recv_later_, 1) * recv_bytes_, 0);
	send_mem_.assign(recv_bytes_, 0);
}

HostilePeer::~HostilePeer()
{
	if (id_ && state_ == State::Connected)
		rdma_disconnect(id_);
	if (id_ && id_->qp)
		rdma_destroy_qp(id_);
	if (recv_mr_)
		ibv_dereg_mr(recv_mr_);
	if (send_mr_)
		ibv_dereg_mr(send_mr_);
	if (cq_)
		ibv_destroy_cq(cq_);
	if (pd_)
		ibv_dealloc_pd(pd_);
	// Every event was acked as it was read: destroying the id cannot wait.
	if (id_)
		rdma_destroy_id(id_);
	if (channel_)
		rdma_destroy_event_channel(channel_);
}

sockaddr_in HostilePeer::claimed_sockaddr() const
{
	sockaddr_storage ss{};
	rdm::to_sockaddr(claim_, ss);
	sockaddr_in out{};
	memcpy(&out, &ss, sizeof out);
	return out;
}

void HostilePeer::post_later()
{
	ck_assert_msg(state_ == State::Connected, "hostile peer: post_later before connecting");
	for (size_t i = recv_count_; i < recv_count_ + recv_later_; i++)
		post_recv(i);
	recv_later_ = 0;
}

void HostilePeer::post_recv(size_t i)
{
	ibv_sge sge{};
	sge.addr = reinterpret_cast<uintptr_t>(recv_mem_.data() + i * recv_bytes_);
	sge.length = static_cast<uint32_t>(recv_bytes_);
	sge.lkey = recv_mr_->lkey;
	ibv_recv_wr wr{}, *bad = nullptr;
	wr.wr_id = i;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	// A QP already in error refuses: the connection is gone anyway.
	if (ibv_post_recv(id_->qp, &wr, &bad))
		dropped_ = true;
}

void HostilePeer::handle_cm(rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: {
		if (claim_.family == AF_UNSPEC) {
			// This host's address and our own source port: nothing
			// listens there, so the victim can never connect back.
			ck_assert(rdm::from_sockaddr(rdma_get_local_addr(id_), sizeof(sockaddr_in), claim_));
			claim_.port = ntohs(rdma_get_src_port(id_));
		}
		pd_ = ibv_alloc_pd(id_->verbs);
		ck_assert_msg(pd_, "hostile peer: ibv_alloc_pd: %s", strerror(errno));
		cq_ = ibv_create_cq(id_->verbs, static_cast<int>(recv_count_ + recv_later_ + 16), nullptr, nullptr, 0);
		ck_assert_msg(cq_, "hostile peer: ibv_create_cq: %s", strerror(errno));
		recv_mr_ = ibv_reg_mr(pd_, recv_mem_.data(), recv_mem_.size(), IBV_ACCESS_LOCAL_WRITE);
		send_mr_ = ibv_reg_mr(pd_, send_mem_.data(), send_mem_.size(), IBV_ACCESS_LOCAL_WRITE);
		ck_assert_msg(recv_mr_ && send_mr_, "hostile peer: ibv_reg_mr: %s", strerror(errno));
		ibv_qp_init_attr attr{};
		attr.send_cq = cq_;
		attr.recv_cq = cq_;
		attr.qp_type = IBV_QPT_RC;
		attr.cap.max_send_wr = 16;
		attr.cap.max_recv_wr = static_cast<uint32_t>(std::max<size_t>(recv_count_ + recv_later_, 1));
		attr.cap.max_send_sge = 1;
		attr.cap.max_recv_sge = 1;
		ck_assert_msg(rdma_create_qp(id_, pd_, &attr) == 0, "hostile peer: rdma_create_qp: %s",
			      strerror(errno));
		for (size_t i = 0; i < recv_count_; i++)
			post_recv(i);
		ck_assert_msg(rdma_resolve_route(id_, 2000) == 0, "hostile peer: rdma_resolve_route: %s",
			      strerror(errno));
		break;
	}
	case RDMA_CM_EVENT_ROUTE_RESOLVED: {
		uint8_t hdr[rdm::kConnHeaderMax] = {};
		rdm::RdmConnHeader h;
		h.flags = conn_flags_;
		h.addr = claim_;
		h.nonce = nonce_;
		h.cookie = cookie_;
		h.mac = mac_;
		ck_assert_msg(rdm::encode_conn_header(hdr, h), "hostile peer: the claimed address is not connectable");
		rdma_conn_param p{};
		p.private_data = hdr;
		p.private_data_len = static_cast<uint8_t>(rdm::conn_header_bytes(h));
		p.responder_resources = 1;
		p.initiator_depth = 1;
		p.retry_count = 7;
		p.rnr_retry_count = 7;
		ck_assert_msg(rdma_connect(id_, &p) == 0, "hostile peer: rdma_connect: %s", strerror(errno));
		state_ = State::Connecting;
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		state_ = State::Connected;
		break;
	case RDMA_CM_EVENT_REJECTED:
		if (state_ == State::Connected) {
			// Our RTU had not reached the victim when it dropped the
			// connection (destroying an id that waits for the RTU
			// rejects): dropped, not refused.
			state_ = State::Dropped;
			dropped_ = true;
			break;
		}
		if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
			const auto *p = static_cast<const uint8_t *>(ev->param.conn.private_data);
			reject_data_.assign(p, p + ev->param.conn.private_data_len);
		}
		state_ = State::Refused;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		state_ = State::Refused;
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		if (state_ == State::Connected)
			state_ = State::Dropped;
		dropped_ = true;
		break;
	default:
		break;
	}
}

void HostilePeer::pump()
{
	if (!quiet)
		progress_all();
	rdma_cm_event *ev;
	while (rdma_get_cm_event(channel_, &ev) == 0) {
		// Copy what handle_cm reads, then ack: the ack frees ev.
		rdma_cm_event copy = *ev;
		std::vector<uint8_t> pdata;
		if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
			const auto *p = static_cast<const uint8_t *>(ev->param.conn.private_data);
			pdata.assign(p, p + ev->param.conn.private_data_len);
		}
		copy.param.conn.private_data = pdata.empty() ? nullptr : pdata.data();
		rdma_ack_cm_event(ev);
		handle_cm(&copy);
	}
	if (!cq_)
		return;
	ibv_wc wc[16];
	int n;
	while ((n = ibv_poll_cq(cq_, 16, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				dropped_ = true;
			if (wc[i].opcode & IBV_WC_RECV) {
				if (wc[i].status != IBV_WC_SUCCESS)
					continue;
				const uint8_t *p = recv_mem_.data() + wc[i].wr_id * recv_bytes_;
				inbox_.emplace_back(p, p + wc[i].byte_len);
				post_recv(wc[i].wr_id);
			} else {
				send_done_ = true;
				send_status_ = wc[i].status;
			}
		}
	}
}

bool HostilePeer::connect(int timeout_ms)
{
	ck_assert_msg(state_ == State::Idle, "hostile peer: connect() twice");
	sockaddr_in dst = victim_;
	state_ = State::Resolving;
	ck_assert_msg(rdma_resolve_addr(id_, nullptr, reinterpret_cast<sockaddr *>(&dst), 2000) == 0,
		      "hostile peer: rdma_resolve_addr: %s", strerror(errno));
	Deadline d(timeout_ms);
	while (state_ == State::Resolving || state_ == State::Connecting) {
		ck_assert_msg(!d.expired(), "hostile peer: neither accepted nor refused within %d ms", timeout_ms);
		pump();
	}
	return state_ == State::Connected;
}

ibv_wc_status HostilePeer::send(const void *buf, size_t len)
{
	ibv_send_wr wr{};
	wr.opcode = IBV_WR_SEND;
	return post_and_wait(wr, buf, len, "a send");
}

ibv_wc_status HostilePeer::write_imm(uint32_t imm, size_t len, uint64_t raddr, uint32_t rkey)
{
	ibv_send_wr wr{};
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return post_and_wait(wr, nullptr, len, "a write with immediate");
}

ibv_wc_status HostilePeer::post_and_wait(ibv_send_wr &wr, const void *buf, size_t len, const char *what)
{
	ck_assert_msg(len <= send_mem_.size(), "hostile peer: %s of %zu bytes", what, len);
	if (dropped_ || state_ != State::Connected)
		return IBV_WC_WR_FLUSH_ERR;
	if (buf)
		memcpy(send_mem_.data(), buf, len);
	else
		memset(send_mem_.data(), 0, len);
	ibv_sge sge{};
	sge.addr = reinterpret_cast<uintptr_t>(send_mem_.data());
	sge.length = static_cast<uint32_t>(len);
	sge.lkey = send_mr_->lkey;
	wr.sg_list = &sge;
	wr.num_sge = len ? 1 : 0;
	wr.send_flags = IBV_SEND_SIGNALED;
	ibv_send_wr *bad = nullptr;
	send_done_ = false;
	if (ibv_post_send(id_->qp, &wr, &bad)) {
		dropped_ = true;
		return IBV_WC_WR_FLUSH_ERR;
	}
	Deadline d(kTimeoutMs);
	while (!send_done_) {
		if (dropped_) {
			// Disconnected: flush what is posted rather than wait for
			// the retries against a queue pair that is gone.
			ibv_qp_attr attr{};
			attr.qp_state = IBV_QPS_ERR;
			ibv_modify_qp(id_->qp, &attr, IBV_QP_STATE);
		}
		ck_assert_msg(!d.expired(), "hostile peer: %s did not complete (%s; %s)", what, label.c_str(),
			      dropped_ ? "connection dropped" : "connection up");
		pump();
	}
	return send_status_;
}

bool HostilePeer::wait_dropped(int timeout_ms)
{
	Deadline d(timeout_ms);
	while (!dropped_ && !d.expired())
		pump();
	return dropped_;
}

bool HostilePeer::next_message(std::vector<uint8_t> &out, int timeout_ms)
{
	Deadline d(timeout_ms);
	while (inbox_.empty() && !dropped_ && !d.expired())
		pump();
	if (inbox_.empty())
		return false;
	out = std::move(inbox_.front());
	inbox_.pop_front();
	return true;
}

} // namespace vt
