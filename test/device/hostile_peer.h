// A hostile peer for the device suites: it speaks vrma's RDM wire format
// (src/wire/rdm_wire.h) over raw rdma_cm and verbs, from inside the test's
// process, so that a test can send a vrma RDM endpoint (the victim) what no
// honest vrma sends: forged connect headers, malformed and mutated messages,
// answers to nothing, writes with immediate.
//
// It waits the way rdm_harness.h's helpers do: every loop reads every live
// RdmNode's CQ (progress_all), since the victim and the honest peer run
// FI_PROGRESS_MANUAL and move only while read.
//
// What it is not: a vrma peer. It answers nothing unless the test does, and
// it never reads the victim's memory except where a test asks it to.
#pragma once

#include "rdm_harness.h"
#include "wire/rdm_wire.h"

#include <rdma/rdma_cma.h>

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace vt {

struct HostileOptions {
	// The address and nonce the connect header claims. Default: this
	// host's device address and a port nothing listens at, a fresh nonce.
	vrma::rdm::RdmAddr claim{};
	uint64_t nonce = 0;
	uint16_t conn_flags = 0; // kConnFlag* in the connect header
	// With kConnFlagAuth: the cookie and answer the header carries (with
	// kConnFlagAsk: mac is the challenge).
	uint64_t cookie = 0;
	std::array<uint8_t, vrma::rdm::kConnMacBytes> mac{};
	// Receive buffers posted before connecting: each holds the victim's
	// largest message at its largest eager size. None: every send the
	// victim makes to it waits (RNR, retried for ever).
	size_t recv_count = 16;
	// Buffers made ready beside those and posted only by post_later(): a
	// peer that takes nothing (recv_count 0), then takes that many.
	size_t recv_later = 0;
	size_t recv_bytes = vrma::rdm::kEagerSizeMax + vrma::rdm::kRdmHeaderBytes;
};

class HostilePeer {
public:
	// victim: the RDM endpoint's name (fi_getname).
	explicit HostilePeer(const sockaddr_in &victim, const HostileOptions &opt = {});
	~HostilePeer();
	HostilePeer(const HostilePeer &) = delete;
	HostilePeer &operator=(const HostilePeer &) = delete;

	// Connects with the claimed header. True once established; false if
	// the victim refused (rejected or unreachable). Fails the test if
	// neither happens within timeout_ms.
	bool connect(int timeout_ms = kTimeoutMs);
	// Posts one send of these bytes and waits for its work completion;
	// returns its status (IBV_WC_SUCCESS, or the error a dropped
	// connection gives). Sends are signaled one by one.
	ibv_wc_status send(const void *buf, size_t len);
	ibv_wc_status send(const std::vector<uint8_t> &m) { return send(m.data(), m.size()); }
	// An RDMA write with immediate of len bytes (zeros) at raddr/rkey;
	// with len 0 no key is needed (C9-88). The victim's receive
	// completion then says len bytes arrived, though none reached the
	// receive buffer it consumed.
	ibv_wc_status write_imm(uint32_t imm, size_t len = 0, uint64_t raddr = 0, uint32_t rkey = 0);
	// Posts the recv_later buffers (once; they are not reposted unless
	// this peer's own waits pump its completion queue).
	void post_later();
	// Whether the victim dropped the connection (disconnect event or a
	// failed work completion seen); progress until it does or the timeout.
	bool wait_dropped(int timeout_ms = kTimeoutMs);
	bool dropped() const { return dropped_; }
	// The next message the victim sent on this connection, if one comes
	// within timeout_ms.
	bool next_message(std::vector<uint8_t> &out, int timeout_ms = kTimeoutMs);
	// Messages received so far and not yet taken.
	size_t pending_messages() const { return inbox_.size(); }

	// The private data of the victim's reject, if it rejected us.
	const std::vector<uint8_t> &reject_data() const { return reject_data_; }
	uint64_t nonce() const { return nonce_; }
	const vrma::rdm::RdmAddr &claimed() const { return claim_; }
	// The claimed address as an AV would take it.
	sockaddr_in claimed_sockaddr() const;
	rdma_cm_id *id() const { return id_; }
	// Named in this peer's failure messages (what the test was doing).
	std::string label;
	// True: this peer's waits progress no RdmNode, so what it sends stays
	// in the victim's completion queue until the victim's own next
	// progress (a test then picks the call that finds it).
	bool quiet = false;

private:
	void pump();            // one round: every RdmNode, our CM events, our CQ
	void handle_cm(rdma_cm_event *ev);
	void post_recv(size_t i);
	// Posts wr signaled with len bytes of buf (zeros if nullptr) from the
	// send buffer, and waits for its completion (progressing).
	ibv_wc_status post_and_wait(ibv_send_wr &wr, const void *buf, size_t len, const char *what);

	sockaddr_in victim_{};
	vrma::rdm::RdmAddr claim_{};
	uint64_t nonce_ = 0;
	uint16_t conn_flags_ = 0;
	uint64_t cookie_ = 0;
	std::array<uint8_t, vrma::rdm::kConnMacBytes> mac_{};
	std::vector<uint8_t> reject_data_;
	size_t recv_count_, recv_bytes_, recv_later_;

	rdma_event_channel *channel_ = nullptr;
	rdma_cm_id *id_ = nullptr;
	ibv_pd *pd_ = nullptr;
	ibv_cq *cq_ = nullptr;
	ibv_mr *recv_mr_ = nullptr, *send_mr_ = nullptr;
	std::vector<uint8_t> recv_mem_, send_mem_;

	enum class State { Idle, Resolving, Connecting, Connected, Refused, Dropped };
	State state_ = State::Idle;
	bool dropped_ = false;
	bool send_done_ = false;
	ibv_wc_status send_status_ = IBV_WC_SUCCESS;
	std::deque<std::vector<uint8_t>> inbox_;
};

} // namespace vt
