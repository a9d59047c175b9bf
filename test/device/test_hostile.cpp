// A hostile peer against a vrma RDM endpoint (issue 26): the victim serves an
// honest vrma peer (tagged messages, rendezvous, fetch atomics, data checked)
// while a raw rdma_cm/verbs peer (hostile_peer.h) sends it what no vrma
// sends. After each attack: the victim is up (the test's own process), the
// canaries around its registered region are intact, the attacker's
// connection was dropped where the message was malformed, and the honest
// peer's traffic and completions are exact.
#include "hostile_peer.h"
#include "rdm_atomic_harness.h"
#include "../wire_mutation.h"

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>

#include <unistd.h>

namespace {

using namespace vt;
namespace rdm = vrma::rdm;
namespace vatomic = vrma::atomic;
using atomic_test::AtomicEnv;
using atomic_test::Region; // not the MSG harness's vt::Region

// The regions the attacks aim at: kRegion bytes between two canaries of
// 4096 bytes that nothing may touch.
constexpr size_t kRegion = 4096;
constexpr atomic_test::Guard kGuard{4096, 0x5a};

// The victim, its honest peer and the victim's region.
struct Scene {
	AtomicEnv env;
	RdmNode victim;
	RdmNode honest{env};
	Region region{env, kRegion, atomic_test::kRemote, 0, kGuard};
	uint64_t rounds = 0; // honest fetch-adds applied to region word 0
	explicit Scene(const RdmNodeOptions &victim_opt = {}) : victim(env, victim_opt)
	{
		// Word 0 counts the honest fetch-adds; word 1 no one may change.
		std::fill(region.mem.begin(), region.mem.end(), 0);
		connect_all({&victim, &honest});
	}

	// One exact exchange each way: tagged messages (eager and rendezvous)
	// and a fetch-add by the honest peer on the victim's region.
	void honest_round(const char *when)
	{
		const uint32_t seed = static_cast<uint32_t>(rounds * 2 + 1);
		for (size_t len : {size_t(200), size_t(64 * 1024)}) {
			std::vector<uint8_t> out(len), in(len, 0);
			fill_pattern(out.data(), len, seed);
			fi_context rctx{}, sctx{};
			const uint64_t tag = 0x100 + rounds;
			post([&] { return fi_trecv(victim.ep, in.data(), len, nullptr, victim.addr_of(honest), tag, 0, &rctx); },
			     "victim fi_trecv");
			post([&] { return fi_tsend(honest.ep, out.data(), len, nullptr, honest.addr_of(victim), tag, &sctx); },
			     "honest fi_tsend");
			expect_ok(honest, &sctx, FI_TAGGED | FI_SEND, when);
			Completion c = expect_ok(victim, &rctx, FI_TAGGED | FI_RECV, when);
			ck_assert_msg(c.e.len == len && c.e.tag == tag, "%s: len %zu tag %#" PRIx64, when, c.e.len, c.e.tag);
			ck_assert_msg(c.src == victim.addr_of(honest), "%s: source %" PRIu64 ", expected the honest peer", when,
				      c.src);
			expect_pattern(in.data(), len, seed, when);
			// And back.
			fill_pattern(out.data(), len, seed + 1);
			post([&] { return fi_trecv(honest.ep, in.data(), len, nullptr, honest.addr_of(victim), tag, 0, &rctx); },
			     "honest fi_trecv");
			post([&] { return fi_tsend(victim.ep, out.data(), len, nullptr, victim.addr_of(honest), tag, &sctx); },
			     "victim fi_tsend");
			expect_ok(victim, &sctx, FI_TAGGED | FI_SEND, when);
			expect_ok(honest, &rctx, FI_TAGGED | FI_RECV, when);
			expect_pattern(in.data(), len, seed + 1, when);
		}
		uint64_t one = 1, old = ~0ull;
		fi_context actx{};
		post([&] {
			return fi_fetch_atomic(honest.ep, &one, 1, nullptr, &old, nullptr, honest.addr_of(victim),
					       region.addr(0), region.key(), FI_UINT64, FI_SUM, &actx);
		}, "honest fi_fetch_atomic");
		expect_ok(honest, &actx, FI_ATOMIC | FI_READ, when);
		ck_assert_msg(old == rounds, "%s: fetch-add returned %" PRIu64 ", expected %" PRIu64, when, old, rounds);
		rounds++;
		uint64_t now;
		memcpy(&now, region.mem.data(), sizeof now);
		ck_assert_msg(now == rounds, "%s: region word %" PRIu64 ", expected %" PRIu64, when, now, rounds);
		region.expect_canaries(when);
	}

	// Entries the attacker's well-formed RMA events left in the victim's
	// CQ (remote CQ data of writes it claims to have made: a peer holding
	// a key may do that), dropped before an honest round; returns how
	// many.
	size_t drop_remote_events()
	{
		settle(50);
		size_t n = 0;
		for (auto it = victim.backlog.begin(); it != victim.backlog.end();) {
			if (it->ok && !it->e.op_context && (it->e.flags & (FI_REMOTE_WRITE | FI_REMOTE_READ))) {
				it = victim.backlog.erase(it);
				n++;
			} else {
				++it;
			}
		}
		return n;
	}

	// The victim has nothing for anyone: a wildcard receive stays empty.
	void expect_nothing_delivered(const char *when)
	{
		std::vector<uint8_t> in(64 * 1024);
		fi_context rctx{};
		post([&] { return fi_trecv(victim.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, 0, ~0ull, &rctx); },
		     "victim wildcard fi_trecv");
		settle(300);
		progress_all();
		if (!victim.backlog.empty())
			ck_abort_msg("%s: the victim delivered %s", when, victim.backlog.front().describe().c_str());
		ck_assert_int_eq(fi_cancel(&victim.ep->fid, &rctx), 0);
		expect_err(victim, &rctx, FI_ECANCELED, "the cancelled wildcard receive");
	}
};

// An AtomicRequest as an initiator would encode it, for the attacker to
// send (count elements of uint64 at addr; arrays as the op takes them).
std::vector<uint8_t> atomic_request(uint32_t msg_id, vatomic::Kind kind, int op, uint64_t addr, uint64_t key,
				    uint64_t count, size_t array_bytes)
{
	rdm::RdmHeader h;
	h.type = rdm::MsgType::AtomicRequest;
	h.msg_id = msg_id;
	h.length = count;
	rdm::AtomicRequest r;
	r.op = static_cast<uint8_t>(op);
	r.datatype = FI_UINT64;
	r.kind = kind;
	r.nseg = 1;
	r.segs[0] = {addr, count, key};
	const size_t arrays = rdm::atomic_request_arrays(kind, op) * array_bytes;
	std::vector<uint8_t> m(rdm::atomic_request_head_bytes(1) + arrays, 0);
	r.operand_bytes = op == FI_ATOMIC_READ ? 0 : array_bytes;
	r.compare_bytes = kind == vatomic::Kind::Compare ? array_bytes : 0;
	rdm::encode_atomic_request(m.data(), h, r);
	return m;
}

std::vector<uint8_t> header_only(rdm::MsgType type, uint32_t msg_id, uint8_t status = 0, uint8_t flags = 0,
				 uint64_t length = 0)
{
	rdm::RdmHeader h;
	h.type = type;
	h.msg_id = msg_id;
	h.status = status;
	h.flags = flags;
	h.length = length;
	std::vector<uint8_t> m(rdm::kRdmHeaderBytes);
	rdm::encode_header(m.data(), h);
	return m;
}

// The Flow Pauses among the messages the victim sent a (taken).
size_t pauses_received(HostilePeer &a)
{
	size_t pauses = 0;
	std::vector<uint8_t> got;
	while (a.pending_messages() && a.next_message(got, 0)) {
		rdm::RdmHeader g;
		if (rdm::decode_header(got.data(), got.size(), g) && g.type == rdm::MsgType::Flow &&
		    g.status == static_cast<uint8_t>(rdm::FlowStatus::Pause))
			pauses++;
	}
	return pauses;
}

// An RmaEvent with remote CQ data `data`, as an initiator sends it after
// its RMA operation (kind) of `length` bytes on the regions `keys`.
std::vector<uint8_t> rma_event(rdm::RmaKind kind, uint64_t length, std::initializer_list<uint64_t> keys,
			       uint64_t data = 0)
{
	rdm::RdmHeader h;
	h.type = rdm::MsgType::RmaEvent;
	h.status = static_cast<uint8_t>(kind);
	h.flags = rdm::kFlagCqData;
	h.length = length;
	h.cq_data = data;
	std::vector<uint8_t> m(rdm::kRdmHeaderBytes + rdm::kRmaEventBodyHeadBytes + 8 * keys.size(), 0);
	rdm::encode_header(m.data(), h);
	m[rdm::kRdmHeaderBytes] = static_cast<uint8_t>(keys.size());
	size_t i = 0;
	for (uint64_t k : keys)
		rdm::le::put64(m.data() + rdm::kRdmHeaderBytes + rdm::kRmaEventBodyHeadBytes + 8 * i++, k);
	return m;
}

// A tagged rendezvous request of 4096 bytes (tag 0) in one segment of the
// attacker's (an address and key it never registered).
std::vector<uint8_t> rndv_request(uint32_t msg_id)
{
	rdm::RdmHeader h;
	h.type = rdm::MsgType::RndvRequestTagged;
	h.msg_id = msg_id;
	h.length = 4096;
	const rdm::RndvSegment seg{0x10000, 4096, 0x1234};
	std::vector<uint8_t> m(rdm::rndv_msg_bytes(1));
	rdm::encode_rndv_request(m.data(), h, &seg, 1);
	return m;
}

// Item 1: an emulated FI_ATOMIC_READ carries no array, so its element count
// was bounded by nothing; 2^61 8-byte elements wrapped the byte count to 0,
// which passed every later check, and the victim read 2^61 elements past
// its 8 KiB result buffer (SIGSEGV). Each count here must be refused as
// malformed (the connection dropped), whatever the kind.
START_TEST(hostile_atomic_count_overflow)
{
	Scene s;
	s.honest_round("before the attacks");
	struct Case {
		const char *what;
		vatomic::Kind kind;
		int op;
		uint64_t count;
		size_t array_bytes; // what the message really carries
	};
	const Case cases[] = {
		{"FI_ATOMIC_READ of 2^61 elements (byte count wraps to 0)", vatomic::Kind::Fetch, FI_ATOMIC_READ,
		 uint64_t(1) << 61, 0},
		{"FI_ATOMIC_READ of 2^60 elements", vatomic::Kind::Fetch, FI_ATOMIC_READ, uint64_t(1) << 60, 0},
		{"FI_ATOMIC_READ beyond kAtomicDataMax", vatomic::Kind::Fetch, FI_ATOMIC_READ,
		 rdm::kAtomicDataMax / 8 + 1, 0},
		{"fetch FI_SUM of 2^61 elements with an 8-byte operand", vatomic::Kind::Fetch, FI_SUM,
		 uint64_t(1) << 61, 8},
		{"compare FI_CSWAP of 2^61 elements with no arrays", vatomic::Kind::Compare, FI_CSWAP,
		 uint64_t(1) << 61, 0},
	};
	for (const Case &c : cases) {
		HostilePeer a(s.victim.name);
		ck_assert_msg(a.connect(), "%s: the victim refused the attacker's first connection", c.what);
		const auto m = atomic_request(7, c.kind, c.op, s.region.addr(0), s.region.key(), c.count, c.array_bytes);
		a.send(m);
		ck_assert_msg(a.wait_dropped(), "%s: the victim kept the connection", c.what);
		std::vector<uint8_t> answer;
		while (a.next_message(answer, 0)) {
			rdm::RdmHeader h;
			ck_assert_msg(!rdm::decode_header(answer.data(), answer.size(), h) ||
					      h.type != rdm::MsgType::AtomicResponse || h.length == 0,
				      "%s: the victim answered %" PRIu64 " bytes of its memory", c.what, h.length);
		}
		s.region.expect_canaries(c.what);
		s.honest_round(c.what);
	}
}
END_TEST

// Item 4: a write with immediate consumes a receive buffer without writing
// it; a victim that decoded the buffer anyway delivered the previous
// message it held again (another peer's, with source FI_ADDR_NOTAVAIL).
// With 16 receive buffers, 40 honest messages of 256 bytes leave an old
// message in every one; 32 writes with immediate of their length (288
// bytes, into the victim's region, whose key the attacker holds) and 32
// of none must replay none of them.
START_TEST(hostile_write_imm_replay)
{
	if (!in_fresh_process("hostile_write_imm_replay"))
		return;
	setenv("FI_VRMA_RDM_RX_BUFFERS", "16", 1);
	Scene s;
	for (uint32_t i = 0; i < 40; i++) {
		uint8_t out[256], in[256] = {};
		fill_pattern(out, sizeof out, 1000 + i);
		fi_context rctx{}, sctx{};
		post([&] { return fi_trecv(s.victim.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, 0x7000 + i, 0, &rctx); },
		     "victim fi_trecv");
		post([&] { return fi_tsend(s.honest.ep, out, sizeof out, nullptr, s.honest.addr_of(s.victim), 0x7000 + i, &sctx); },
		     "honest fi_tsend");
		expect_ok(s.honest, &sctx, FI_TAGGED | FI_SEND, "an honest message");
		expect_ok(s.victim, &rctx, FI_TAGGED | FI_RECV, "an honest message");
		expect_pattern(in, sizeof in, 1000 + i, "an honest message");
	}
	for (size_t len : {size_t(rdm::kRdmHeaderBytes + 256), size_t(0)}) {
		HostilePeer a(s.victim.name);
		ck_assert(a.connect());
		size_t accepted = 0;
		for (uint32_t i = 0; i < 32 && !a.dropped(); i++)
			if (a.write_imm(0x1000 + i, len, s.region.addr(1024), static_cast<uint32_t>(s.region.key())) ==
			    IBV_WC_SUCCESS)
				accepted++;
		ck_assert_msg(a.wait_dropped(),
			      "the victim kept a connection that wrote %zu bytes with immediate (%zu accepted)", len,
			      accepted);
		s.expect_nothing_delivered(len ? "after writes with immediate" : "after empty writes with immediate");
		s.region.expect_canaries("after writes with immediate");
	}
	s.honest_round("after writes with immediate");
}
END_TEST

// Item 8 (answers): an answer completes only what waits for that kind of
// answer on that connection. The victim sends the attacker a message with
// FI_DELIVERY_COMPLETE; an RndvDone (the wrong kind) carrying its msg_id
// must fail the send and drop the connection, never complete it.
START_TEST(hostile_answer_kind)
{
	Scene s;
	s.honest_round("before");
	for (bool right_kind : {true, false}) {
		HostilePeer a(s.victim.name);
		ck_assert(a.connect());
		const fi_addr_t to = s.victim.insert_addr(a.claimed_sockaddr());
		uint8_t out[64];
		fill_pattern(out, sizeof out, 77);
		iovec iov{out, sizeof out};
		fi_context sctx{};
		const fi_msg_tagged m = make_tmsg(&iov, 1, to, 0x55, 0, &sctx);
		post([&] { return fi_tsendmsg(s.victim.ep, &m, FI_DELIVERY_COMPLETE); }, "victim fi_tsendmsg");
		std::vector<uint8_t> got;
		ck_assert_msg(a.next_message(got), "the victim's message did not reach the attacker");
		rdm::RdmHeader h;
		ck_assert(rdm::decode_header(got.data(), got.size(), h));
		ck_assert_msg(h.type == rdm::MsgType::EagerTagged && (h.flags & rdm::kFlagDeliveryComplete),
			      "type %d flags %#x", int(h.type), h.flags);
		const auto answer = right_kind ? header_only(rdm::MsgType::DeliveryAck, h.msg_id)
					       : header_only(rdm::MsgType::RndvDone, h.msg_id);
		a.send(answer);
		if (right_kind) {
			expect_ok(s.victim, &sctx, FI_TAGGED | FI_SEND, "a send acknowledged by a DeliveryAck");
		} else {
			expect_err(s.victim, &sctx, 0, "a send 'acknowledged' by an RndvDone");
			ck_assert_msg(a.wait_dropped(), "the victim kept the connection after a wrong answer");
		}
		s.honest_round(right_kind ? "after a right answer" : "after a wrong answer");
	}
}
END_TEST

// Item 8 (lifetimes): a message that owes its sender an answer (a
// rendezvous request, an eager message with FI_DELIVERY_COMPLETE) and
// waits unexpected when its connection fails is not delivered later: its
// sender's send failed with the connection (a resend would be a duplicate),
// and answering it or reading its data would act on a later connection.
START_TEST(hostile_stale_unexpected)
{
	Scene s;
	s.honest_round("before");
	for (bool rndv : {false, true}) {
		HostilePeer a(s.victim.name);
		ck_assert(a.connect());
		std::vector<uint8_t> m;
		if (rndv) {
			m = rndv_request(9);
		} else {
			m = header_only(rdm::MsgType::EagerTagged, 9, 0,
					rdm::kFlagLastPiece | rdm::kFlagDeliveryComplete, 32);
			m.resize(m.size() + 32, 0xee);
		}
		ck_assert_int_eq(a.send(m), IBV_WC_SUCCESS);
		settle(100); // the victim queues it as unexpected
		// Then a malformed message (protocol version 2) ends the
		// connection.
		auto bad = header_only(rdm::MsgType::DeliveryAck, 5);
		bad[1] = 2;
		a.send(bad);
		ck_assert_msg(a.wait_dropped(), "the victim kept a connection that sent a version 2 header");
		s.expect_nothing_delivered(rndv ? "a rendezvous request of a failed connection"
						: "a delivery-complete message of a failed connection");
		s.honest_round("after a stale message");
	}
}
END_TEST

// Item 2: a transmit call that progresses to make room (no send buffer
// free, a full ring, no send credit) holds its connection across that
// progress. A malformed message from the connection's peer, waiting in the
// victim's completion queue, ends the connection inside the call; the old
// code then freed it (its ring was empty) and the call went on with the
// freed connection (ASan: heap-use-after-free in the victim's fi_tsend).
// Three peers that take nothing hold the victim's send buffers (before fair
// shares they held all 256), then the first takes 32 messages; the
// attacker's connection is idle and its version-2 header unread, 100
// honest messages behind it, when the victim sends to it: the progress
// inside that send frees buffers, ends the connection and polls on while
// the device flushes it. Whatever that send
// returns, every operation ends with exactly one completion, the victim
// stays up, its buffers all come back and the honest peer is served.
START_TEST(hostile_conn_lost_in_transmit)
{
	Scene s;
	s.honest_round("before");
	const ssize_t pool = fi_tx_size_left(s.victim.ep);
	HostilePeer a(s.victim.name);
	a.label = "attacker";
	ck_assert(a.connect());
	const fi_addr_t to_a = s.victim.insert_addr(a.claimed_sockaddr());
	constexpr size_t kLen = 1024; // beyond the inline size: each send takes a send buffer
	std::vector<uint8_t> out(kLen);
	fill_pattern(out.data(), kLen, 5);
	{
		// The victim's connection to the attacker is up and its ring empty.
		fi_context sctx{};
		post([&] { return fi_tsend(s.victim.ep, out.data(), kLen, nullptr, to_a, 0x21, &sctx); },
		     "victim fi_tsend to the attacker");
		expect_ok(s.victim, &sctx, FI_TAGGED | FI_SEND, "the victim's first send to the attacker");
		std::vector<uint8_t> got;
		ck_assert_msg(a.next_message(got), "the victim's send did not reach the attacker");
		ck_assert_uint_eq(got.size(), rdm::kRdmHeaderBytes + kLen);
	}
	HostileOptions o;
	o.recv_count = 0;
	std::vector<std::unique_ptr<HostilePeer>> stalled;
	std::deque<fi_context> held; // their sends' contexts (stable addresses)
	for (int i = 0; i < 3; i++) {
		o.recv_later = i == 0 ? 32 : 0;
		auto b = std::make_unique<HostilePeer>(s.victim.name, o);
		b->label = "stalled peer " + std::to_string(i);
		ck_assert_msg(b->connect(), "the victim refused stalled peer %d", i);
		const fi_addr_t to = s.victim.insert_addr(b->claimed_sockaddr());
		post_until_refused([&](size_t) {
			held.emplace_back();
			const ssize_t rc = fi_tsend(s.victim.ep, out.data(), kLen, nullptr, to, 0x22, &held.back());
			if (rc)
				held.pop_back();
			return rc;
		}, 512, 300, "victim fi_tsend to a stalled peer");
		stalled.push_back(std::move(b));
	}
	fprintf(stderr, "hostile_conn_lost_in_transmit: %zu sends held by three stalled peers, %zd of %zd send buffers free\n",
		held.size(), fi_tx_size_left(s.victim.ep), pool);
	// The first stalled peer takes 32 of its messages: their completions
	// wait in the victim's queue, so that its next progress frees send
	// buffers (the call that progresses then goes on to use one).
	stalled[0]->post_later();
	usleep(1500 * 1000); // past rxe's RNR timer (655 ms), nobody progressing
	// The malformed message reaches the victim's device, not its progress.
	a.quiet = true;
	auto bad = header_only(rdm::MsgType::DeliveryAck, 5);
	bad[1] = 2;
	ck_assert_int_eq(a.send(bad), IBV_WC_SUCCESS);
	a.quiet = false;
	// Behind it, messages from the honest peer: the progress that takes
	// the attacker's message goes on polling them while the device
	// flushes the failed connection, so the connection's end is complete
	// (reapable) before that progress returns into the send.
	constexpr int kBehind = 100;
	constexpr size_t kBehindLen = 64;
	std::vector<std::vector<uint8_t>> behind(kBehind, std::vector<uint8_t>(kBehindLen));
	std::vector<fi_context> bctx(kBehind);
	for (int i = 0; i < kBehind; i++) {
		fill_pattern(behind[i].data(), kBehindLen, 1000 + i);
		post([&] {
			return fi_tsend(s.honest.ep, behind[i].data(), kBehindLen, nullptr, s.honest.addr_of(s.victim),
					0x77, &bctx[i]);
		}, "honest fi_tsend behind the attacker's message", &s.honest);
	}
	for (int i = 0; i < kBehind; i++) {
		const Completion c = next_alone(s.honest);
		ck_assert_msg(c.ok && (c.e.flags & FI_SEND), "the honest peer's send behind: %s", c.describe().c_str());
	}
	// The victim's next send to the attacker is the call that finds it.
	fi_context last{};
	const ssize_t rc = fi_tsend(s.victim.ep, out.data(), kLen, nullptr, to_a, 0x23, &last);
	ck_assert_msg(rc == 0 || rc == -FI_EAGAIN, "the send to a connection lost under it returned %zd (%s)", rc,
		      fi_strerror(static_cast<int>(-rc)));
	ck_assert_msg(a.wait_dropped(), "the victim kept a connection that sent a version 2 header");
	// Every operation ends once: the send to the attacker (if taken), then,
	// as the stalled peers leave, each send they held.
	std::map<const void *, int> ends;
	size_t want = held.size() + (rc == 0);
	stalled.clear();
	for (size_t n = 0; n < want; n++) {
		const Completion c = next(s.victim);
		const void *ctx = c.context();
		const bool known = ctx == &last ? rc == 0
					      : std::any_of(held.begin(), held.end(), [&](const fi_context &h) {
							return &h == ctx;
						});
		ck_assert_msg(known, "an entry for no operation of the victim's: %s", c.describe().c_str());
		ck_assert_msg(++ends[ctx] == 1, "a second entry for one send: %s", c.describe().c_str());
	}
	expect_none(s.victim, 300, "after every send ended");
	// The honest messages arrived once each, in order.
	for (int i = 0; i < kBehind; i++) {
		std::vector<uint8_t> in(kBehindLen, 0);
		fi_context rctx{};
		post([&] {
			return fi_trecv(s.victim.ep, in.data(), kBehindLen, nullptr, s.victim.addr_of(s.honest), 0x77, 0,
					&rctx);
		}, "victim fi_trecv of a message behind");
		const Completion c = expect_ok(s.victim, &rctx, FI_TAGGED | FI_RECV, "a message behind the attacker's");
		ck_assert_uint_eq(c.e.len, kBehindLen);
		expect_pattern(in.data(), kBehindLen, 1000 + i, "a message behind the attacker's");
	}
	for (int i = 0; i < 500 && fi_tx_size_left(s.victim.ep) != pool; i++)
		settle(20);
	ck_assert_int_eq(fi_tx_size_left(s.victim.ep), pool);
	s.region.expect_canaries("after a connection lost under a send");
	s.honest_round("after a connection lost under a send");
}
END_TEST

// Finding 9 (fair shares): a peer that posts no receive buffers holds every
// send the victim makes to it (RNR, retried for ever) with its send buffer,
// until the drain timeout (300 s) fails it. Three such peers, each asking
// 160 fetches whose answers need a send buffer (1 KiB of old values), held
// all 256 of the victim's: the honest peer's fetch of as many values and
// the victim's eager sends waited as long. Each now holds its share (an
// eighth of the pool) and the rest serve the honest peer.
START_TEST(hostile_stalled_receivers)
{
	Scene s;
	s.honest_round("before the stalled peers");
	const ssize_t pool = fi_tx_size_left(s.victim.ep);
	ck_assert_int_eq(pool, 256);
	constexpr uint64_t kCount = 128; // 1 KiB of old values per answer
	HostileOptions o;
	o.recv_count = 0;
	std::vector<std::unique_ptr<HostilePeer>> stalled;
	for (int i = 0; i < 3; i++) {
		auto a = std::make_unique<HostilePeer>(s.victim.name, o);
		a->label = "stalled peer " + std::to_string(i);
		ck_assert_msg(a->connect(), "the victim refused stalled peer %d", i);
		for (uint32_t id = 1; id <= 160; id++) {
			const auto m = atomic_request(id, vatomic::Kind::Fetch, FI_ATOMIC_READ, s.region.addr(0),
						      s.region.key(), kCount, 0);
			ck_assert_int_eq(a->send(m), IBV_WC_SUCCESS);
		}
		stalled.push_back(std::move(a));
	}
	settle(200);
	progress_all();
	// Each holds its share of the 256 buffers (32), no more.
	const ssize_t left = fi_tx_size_left(s.victim.ep);
	ck_assert_msg(left == pool - 3 * pool / 8, "%zd of %zd send buffers left with three stalled peers, expected %zd",
		      left, pool, pool - 3 * pool / 8);
	// The honest peer: a fetch of as many values, then tagged messages
	// both ways (the victim's 200-byte send takes a buffer) and a fetch-add.
	std::vector<uint64_t> old(kCount, ~0ull);
	fi_context actx{};
	post([&] {
		return fi_fetch_atomic(s.honest.ep, nullptr, kCount, nullptr, old.data(), nullptr,
				       s.honest.addr_of(s.victim), s.region.addr(0), s.region.key(), FI_UINT64,
				       FI_ATOMIC_READ, &actx);
	}, "honest fi_fetch_atomic of 128 values");
	expect_ok(s.honest, &actx, FI_ATOMIC | FI_READ, "the honest fetch beside stalled peers");
	std::vector<uint64_t> want(kCount);
	memcpy(want.data(), s.region.mem.data(), kCount * 8);
	ck_assert_msg(old == want, "the honest fetch returned other values than the region holds");
	for (int r = 0; r < 3; r++)
		s.honest_round("beside three stalled peers");
	for (const auto &a : stalled) {
		ck_assert_msg(!a->dropped(), "%s: the victim dropped a peer that is only slow", a->label.c_str());
		ck_assert_uint_eq(a->pending_messages(), 0);
	}
	// Their connections end: their buffers come back.
	stalled.clear();
	for (int i = 0; i < 500 && fi_tx_size_left(s.victim.ep) != pool; i++)
		settle(20);
	ck_assert_int_eq(fi_tx_size_left(s.victim.ep), pool);
	s.honest_round("after the stalled peers left");
}
END_TEST

// Finding 3 (peers never freed): every connect request from a new address
// made a peer, kept for the endpoint's life, so one host could grow the
// table (and its queue pairs) without end. With FI_VRMA_RDM_MAX_PEERS at 8
// the victim, already holding the honest peer, admits 7 of 20 attackers
// (each its own address) and turns the 13 others away as busy, serving the
// honest peer throughout; once the 7 are gone their peers are given back
// and new ones get in.
START_TEST(hostile_peer_table)
{
	ScopedEnv max("FI_VRMA_RDM_MAX_PEERS", "8");
	Scene s;
	s.honest_round("before the attackers");
	std::vector<std::unique_ptr<HostilePeer>> in;
	size_t busy = 0;
	for (int i = 0; i < 20; i++) {
		auto a = std::make_unique<HostilePeer>(s.victim.name);
		a->label = "attacker " + std::to_string(i);
		if (a->connect()) {
			in.push_back(std::move(a));
			continue;
		}
		rdm::RdmConnHeader h;
		ck_assert_msg(rdm::decode_conn_header(a->reject_data().data(), a->reject_data().size(), h) &&
				      (h.flags & rdm::kConnFlagBusy),
			      "%s: refused, but not as busy", a->label.c_str());
		busy++;
	}
	ck_assert_msg(in.size() == 7 && busy == 13, "%zu attackers admitted and %zu turned away, expected 7 and 13",
		      in.size(), busy);
	s.honest_round("with the table full");
	for (const auto &a : in)
		ck_assert_msg(!a->dropped(), "%s: dropped though it did nothing", a->label.c_str());
	in.clear();
	// Given back once their connections ended (progress, every 100 ms).
	size_t again = 0;
	for (Deadline d(kTimeoutMs); again < 7 && !d.expired();) {
		auto a = std::make_unique<HostilePeer>(s.victim.name);
		a->label = "attacker after";
		if (a->connect())
			in.push_back(std::move(a)), again++;
		else
			settle(100);
	}
	ck_assert_msg(again == 7, "%zu new peers admitted after 7 left, expected 7", again);
	s.honest_round("after the table turned over");
}
END_TEST

// Finding 9 (remote CQ data): each RmaEvent with remote CQ data adds an
// entry to the victim's CQ, which no receive of the application bounds.
// Past the CQ's size (64 here) the sender is paused; a sender that goes on
// is allowed its grace (4 x the peer queue) and then dropped: the CQ holds
// at most its size plus the grace and the refused one, every entry exact.
// The application reads them; the honest peer is served after.
START_TEST(hostile_cq_data_flood)
{
	constexpr size_t kCq = 64, kGrace = kPeerGrace;
	RdmNodeOptions vo;
	vo.cq_size = kCq;
	vo.tx_cntr = true; // progress without reading the CQ
	Scene s(vo);
	s.honest_round("before");
	s.victim.reading = false;
	HostilePeer a(s.victim.name);
	a.label = "remote CQ data flood";
	ck_assert(a.connect());
	size_t sent = 0;
	while (sent < 4 * kGrace && a.send(rma_event(rdm::RmaKind::Write, 8, {s.region.key()}, 0x5000 + sent)) ==
					    IBV_WC_SUCCESS)
		sent++;
	ck_assert_msg(a.wait_dropped(), "the victim kept a connection that ignored its Pause (%zu entries)", sent);
	const size_t pauses = pauses_received(a);
	ck_assert_msg(pauses == 1, "the victim sent %zu Pauses, expected 1", pauses);
	// The application reads: the CQ's size, the one that paused, the
	// grace, the refused one; in order, each with its data.
	s.victim.reading = true;
	settle(100);
	size_t n = 0;
	for (const Completion &c : s.victim.backlog) {
		if (!c.ok || c.e.op_context || !(c.e.flags & FI_REMOTE_CQ_DATA))
			continue;
		ck_assert_msg(c.e.data == 0x5000 + n && c.e.len == 8, "entry %zu: data %#" PRIx64 ", len %zu", n,
			      c.e.data, c.e.len);
		n++;
	}
	ck_assert_msg(n == kCq + kGrace + 2, "%zu remote CQ data entries (%zu sent), expected %zu", n, sent,
		      kCq + kGrace + 2);
	ck_assert_uint_eq(s.drop_remote_events(), n);
	s.honest_round("after the flood");
}
END_TEST

// Item 9 (flood): unexpected messages past the victim's limit
// (FI_VRMA_RDM_UNEXPECTED_MAX, 1 MiB here) get their sender a Pause; one
// that ignores it is allowed its grace (what an honest sender has under
// way: 4 x the peer queue of 126 messages) and then dropped, and what it
// queued is discarded. The victim's memory grows by no more than the limit
// and the grace (on ab56bc5 it kept all 32 MiB), and the honest peer's
// traffic is exact before, during and after.
START_TEST(hostile_unexpected_flood)
{
	constexpr size_t kLimit = 1 << 20, kLen = 8192, kCount = 4096; // 32 MiB offered
	constexpr size_t kGrace = kPeerGrace;
	ScopedEnv limit("FI_VRMA_RDM_UNEXPECTED_MAX", "1048576");
	Scene s;
	s.honest_round("before");
	HostilePeer a(s.victim.name);
	a.label = "flood";
	ck_assert(a.connect());
	auto m = header_only(rdm::MsgType::EagerTagged, 0, 0, rdm::kFlagLastPiece, kLen);
	m[8] = 0x77; // a tag no receive asks for
	m.resize(m.size() + kLen, 0xab);
	const size_t rss0 = resident_bytes();
	size_t peak = rss0, sent = 0;
	while (sent < kCount) {
		if (a.send(m) != IBV_WC_SUCCESS)
			break;
		sent++;
		if (sent % 64 == 0) {
			peak = std::max(peak, resident_bytes());
			if (sent == 64 * 4) // honest traffic while the flood is on
				s.honest_round("during the flood");
		}
	}
	ck_assert_msg(a.wait_dropped(), "the victim kept a connection that ignored its Pause (%zu messages)", sent);
	peak = std::max(peak, resident_bytes());
	const size_t pauses = pauses_received(a);
	ck_assert_msg(pauses == 1, "the victim sent %zu Pauses, expected 1", pauses);
	// It kept up to the limit, paused, then allowed the grace; the next
	// one dropped the connection (the ones in flight behind it failed).
	ck_assert_msg(sent * (kLen + rdm::kRdmHeaderBytes) > kLimit && sent <= kLimit / kLen + kGrace + 16,
		      "dropped after %zu messages", sent);
	const size_t grew = peak - rss0;
	ck_assert_msg(grew < kLimit + kGrace * (kLen + 1024) + 4 * (1 << 20),
		      "the victim's memory grew by %zu bytes under the flood", grew);
	// What the flooder queued is gone; the honest peer is served.
	s.expect_nothing_delivered("a flooder's queued messages");
	s.honest_round("after the flood");
}
END_TEST

// Item 9 (RMA events): an RmaEvent's remote CQ data becomes a CQ entry
// whose length the application may trust, and its keys count on regions'
// counters. An event is taken only when every key names a region open for
// the access it claims and its length fits them; anything else is no
// operation a peer could have made, and drops its connection with no
// entry. (On ab56bc5 each of these put an entry of any length in the
// victim's CQ.)
START_TEST(hostile_rma_events)
{
	Scene s;
	Region ro(s.env, kRegion, FI_REMOTE_READ, 0, kGuard);
	auto event = [](rdm::RmaKind kind, uint64_t length, std::initializer_list<uint64_t> keys) {
		return rma_event(kind, length, keys);
	};
	struct Case {
		const char *what;
		std::vector<uint8_t> m;
		bool taken;
	};
	const Case cases[] = {
		{"a write event on the region, its whole length", event(rdm::RmaKind::Write, kRegion, {s.region.key()}), true},
		{"a read event on the read-only region", event(rdm::RmaKind::Read, 64, {ro.key()}), true},
		{"a write event on a key nobody registered", event(rdm::RmaKind::Write, 8, {0x7eadbeefull}), false},
		{"a write event on the read-only region", event(rdm::RmaKind::Write, 8, {ro.key()}), false},
		{"an atomic write event on the read-only region", event(rdm::RmaKind::AtomicWrite, 8, {ro.key()}), false},
		{"a write event of 2^40 bytes", event(rdm::RmaKind::Write, 1ull << 40, {s.region.key()}), false},
		{"a write event of more than 16 times the region",
		 event(rdm::RmaKind::Write, kRegion * 16 + 1, {s.region.key()}), false},
		{"an event of 8 bytes naming no region", event(rdm::RmaKind::Write, 8, {}), false},
		{"a key beyond 32 bits", event(rdm::RmaKind::Read, 8, {s.region.key() | (1ull << 32)}), false},
	};
	s.honest_round("before");
	for (const Case &c : cases) {
		HostilePeer a(s.victim.name);
		a.label = c.what;
		ck_assert(a.connect());
		// A refused one may lose its acknowledgement to the drop (flushed).
		const ibv_wc_status st = a.send(c.m);
		if (c.taken) {
			ck_assert_msg(st == IBV_WC_SUCCESS, "%s: the send failed: %s", c.what, ibv_wc_status_str(st));
			settle(100);
			ck_assert_msg(!a.dropped(), "%s: the victim dropped the connection", c.what);
			const Completion *e = nullptr;
			for (const Completion &x : s.victim.backlog)
				if (x.ok && !x.e.op_context && (x.e.flags & FI_REMOTE_CQ_DATA))
					e = &x;
			ck_assert_msg(e, "%s: no remote CQ data entry", c.what);
			uint64_t len = 0;
			rdm::RdmHeader h;
			ck_assert(rdm::decode_header(c.m.data(), c.m.size(), h));
			len = h.length;
			ck_assert_msg(e->e.len == len, "%s: entry of %zu bytes", c.what, e->e.len);
			ck_assert_uint_eq(s.drop_remote_events(), 1);
		} else {
			ck_assert_msg(a.wait_dropped(), "%s: the victim kept the connection", c.what);
			ck_assert_msg(s.drop_remote_events() == 0, "%s: the victim reported it", c.what);
		}
		s.honest_round(c.what);
	}
	ro.expect_canaries("the read-only region");
}
END_TEST

// Item 6 (rights): a device atomic reads as well as writes (it returns the
// old value), so native atomics get no access to a region registered with
// FI_REMOTE_WRITE alone: a fetch-add of 0 there fails, reading nothing.
START_TEST(hostile_native_rights)
{
	if (!atomic_test::with_native_atomics("hostile_native_rights"))
		return;
	Scene s;
	Region wo(s.env, kRegion, FI_REMOTE_WRITE, 0, kGuard);
	const uint64_t secret = 0x5ec2e75ec2e75ec2ull;
	memcpy(wo.mem.data(), &secret, sizeof secret);
	const uint64_t zero = 0;
	uint64_t got = 0;
	fi_context ctx{};
	post([&] {
		return fi_fetch_atomic(s.honest.ep, &zero, 1, nullptr, &got, nullptr, s.honest.addr_of(s.victim),
				       wo.addr(0), wo.key(), FI_UINT64, FI_SUM, &ctx);
	}, "a native fetch-add of 0 on a write-only region");
	expect_err(s.honest, &ctx, 0, "a native fetch-add of 0 on a write-only region");
	ck_assert_msg(got != secret, "a write-only region was read by a device atomic");
	wo.expect_canaries("the write-only region");
}
END_TEST

// Item 6 (agreement): native atomics are agreed per connection. A native
// victim refuses emulated requests on 64-bit integers from a peer that
// does not announce native atomics (its CPU would update words the device
// updates for other peers), and sends such a peer emulated requests, not
// device atomics it cannot take.
START_TEST(hostile_native_agreement)
{
	if (!atomic_test::with_native_atomics("hostile_native_agreement"))
		return;
	Scene s;
	s.honest_round("before");
	HostilePeer a(s.victim.name); // announces no native atomics
	ck_assert(a.connect());
	uint64_t one = 1;
	auto req = atomic_request(11, vatomic::Kind::Fetch, FI_SUM, s.region.addr(8), s.region.key(), 1, 8);
	memcpy(req.data() + rdm::atomic_request_head_bytes(1), &one, 8);
	ck_assert_int_eq(a.send(req), IBV_WC_SUCCESS);
	std::vector<uint8_t> got;
	ck_assert_msg(a.next_message(got), "no answer to an emulated request");
	rdm::RdmHeader h;
	rdm::AtomicResponse resp;
	ck_assert(rdm::decode_atomic_response(got.data(), got.size(), h, resp));
	ck_assert_msg(h.msg_id == 11 && h.status == static_cast<uint8_t>(rdm::AtomicStatus::Unsupported),
		      "an emulated 64-bit request to a native endpoint: id %u status %u", h.msg_id, h.status);
	uint64_t word;
	memcpy(&word, s.region.mem.data() + 8, 8);
	ck_assert_msg(word == 0, "the refused request changed the word to %" PRIu64, word);
	// The victim's own atomic to that peer: an emulated request.
	const fi_addr_t to = s.victim.insert_addr(a.claimed_sockaddr());
	uint64_t old = 0;
	fi_context ctx{};
	post([&] {
		return fi_fetch_atomic(s.victim.ep, &one, 1, nullptr, &old, nullptr, to, 0x1000, 0x77, FI_UINT64,
				       FI_SUM, &ctx);
	}, "the victim's fetch-add to a peer without native atomics");
	ck_assert_msg(a.next_message(got), "the victim sent no atomic request (a device atomic?)");
	rdm::AtomicRequest r;
	ck_assert_msg(rdm::decode_atomic_request(got.data(), got.size(), h, r), "not an AtomicRequest: type %u",
		      got.empty() ? 0u : got[0]);
	ck_assert(r.op == FI_SUM && r.datatype == FI_UINT64 && r.nseg == 1 && r.segs[0].key == 0x77);
	const uint64_t answer_value = 41;
	std::vector<uint8_t> ans(rdm::kRdmHeaderBytes + 8);
	rdm::encode_atomic_response(ans.data(), h.msg_id, rdm::AtomicStatus::Ok, &answer_value, 8);
	ck_assert_int_eq(a.send(ans), IBV_WC_SUCCESS);
	expect_ok(s.victim, &ctx, FI_ATOMIC | FI_READ, "the victim's emulated fetch-add");
	ck_assert_uint_eq(old, answer_value);
	s.honest_round("after");
}
END_TEST

// Item 9: only an FI_RMA_PMEM endpoint answers commits (it announces the
// service); a CommitRequest to any other, well-formed or not, drops the
// connection instead of making the victim msync regions under its lock.
START_TEST(hostile_commit_without_pmem)
{
	Scene s;
	s.honest_round("before");
	HostilePeer a(s.victim.name);
	ck_assert(a.connect());
	rdm::RdmHeader h;
	h.msg_id = 3;
	h.length = 64;
	const rdm::CommitRange range{s.region.addr(0), 64, s.region.key()};
	std::vector<uint8_t> m(rdm::kCommitRequestMax);
	m.resize(rdm::encode_commit_request(m.data(), h, &range, 1));
	a.send(m);
	ck_assert_msg(a.wait_dropped(), "an endpoint without FI_RMA_PMEM kept a connection that asked for a commit");
	std::vector<uint8_t> got;
	ck_assert_msg(!a.next_message(got, 0), "the victim answered a commit request (%zu bytes)", got.size());
	s.honest_round("after");
}
END_TEST

// Close (rdm_wire.h), the victim sending: its message to a peer that posts
// no receive waits (RNR) when the peer sends its Close and disconnects. A
// Close that counts the message completes the send as done when the
// disconnect flushes it; one that counts none leaves the flush an error; one
// counting more than the victim sent, or a second Close, drops the
// connection (the send fails). Exactly one completion each time.
START_TEST(hostile_close_counts)
{
	Scene s;
	s.honest_round("before");
	enum Case { Counted, NotCounted, TooMany, Twice };
	for (Case c : {Counted, NotCounted, TooMany, Twice}) {
		HostileOptions opt;
		opt.recv_count = 0; // the victim's message waits at the device
		fi_context sctx{};
		uint8_t out[64];
		fill_pattern(out, sizeof out, 91);
		{
			HostilePeer a(s.victim.name, opt);
			a.label = "close case " + std::to_string(int(c));
			ck_assert(a.connect());
			const fi_addr_t to = s.victim.insert_addr(a.claimed_sockaddr());
			post([&] { return fi_tsend(s.victim.ep, out, sizeof out, nullptr, to, 0x77, &sctx); },
			     "victim fi_tsend");
			expect_none(s.victim, 50, "a send the peer did not take");
			const uint64_t count = c == Counted ? 1 : c == TooMany ? 2 : 0;
			ck_assert_int_eq(a.send(header_only(rdm::MsgType::Close, 0, 0, 0, count)), IBV_WC_SUCCESS);
			if (c == Twice)
				(void)a.send(header_only(rdm::MsgType::Close, 0, 0, 0, 0));
			if (c == TooMany || c == Twice)
				ck_assert_msg(a.wait_dropped(), "case %d: the victim kept the connection", int(c));
			else
				expect_none(s.victim, 50, "a send whose peer sent its Close");
		} // the peer disconnects: the victim's request is flushed
		if (c == Counted)
			expect_ok(s.victim, &sctx, FI_TAGGED | FI_SEND, "a send the peer's Close counted");
		else
			expect_err(s.victim, &sctx, 0, "a send the peer's Close did not count");
		expect_none(s.victim, 100, "after the send's one completion");
		s.honest_round("after a Close");
	}
}
END_TEST

// Close, the victim closing: a peer that announced kConnFlagClose gets a
// Close counting every message it sent (served or not) before the
// disconnect; one that did not announce it gets none.
START_TEST(hostile_close_sent)
{
	AtomicEnv env;
	for (bool announced : {true, false}) {
		RdmNode victim(env);
		HostileOptions opt;
		opt.conn_flags = announced ? rdm::kConnFlagClose : 0;
		HostilePeer a(victim.name, opt);
		a.label = announced ? "a peer taking Close" : "a peer not taking Close";
		ck_assert(a.connect());
		const size_t sent = 3;
		for (size_t i = 0; i < sent; i++)
			ck_assert_int_eq(a.send(header_only(rdm::MsgType::Eager, 0, 0, rdm::kFlagLastPiece, 0)),
					 IBV_WC_SUCCESS);
		victim.close_ep();
		std::vector<uint8_t> got;
		if (announced) {
			ck_assert_msg(a.next_message(got), "no Close before the disconnect");
			rdm::RdmHeader h;
			ck_assert(rdm::decode_header(got.data(), got.size(), h));
			ck_assert_msg(h.type == rdm::MsgType::Close && h.length == sent, "type %d count %llu",
				      int(h.type), static_cast<unsigned long long>(h.length));
		}
		ck_assert_msg(!a.next_message(got, 0), "a message after the Close (%zu bytes)", got.size());
		ck_assert_msg(a.wait_dropped(), "the closed endpoint did not disconnect");
	}
}
END_TEST

// Idle (rdm_wire.h): a peer's Query is answered once; after its Agree the
// victim starts nothing towards that peer (its sends return -FI_EAGAIN)
// until the peer's Resume, and then sends at once. Out of turn (an answer
// to a Query never sent, a Resume without an agreement, a Query while one
// is agreed, any Idle from a peer that did not announce kConnFlagIdle) the
// connection is dropped. The honest peer is served throughout.
START_TEST(hostile_idle_turns)
{
	Scene s;
	s.honest_round("before");
	auto idle = [](rdm::IdleStatus st, uint64_t ms = 0) {
		return header_only(rdm::MsgType::Idle, 0, static_cast<uint8_t>(st), 0, ms);
	};
	auto answer_of = [](HostilePeer &a) {
		std::vector<uint8_t> got;
		ck_assert_msg(a.next_message(got), "%s: no answer to its idle query", a.label.c_str());
		rdm::RdmHeader h;
		ck_assert(rdm::decode_header(got.data(), got.size(), h));
		ck_assert_msg(h.type == rdm::MsgType::Idle, "%s: a message of type %d, expected Idle", a.label.c_str(),
			      int(h.type));
		return static_cast<rdm::IdleStatus>(h.status);
	};
	HostileOptions opt;
	opt.conn_flags = rdm::kConnFlagIdle;
	{
		HostilePeer a(s.victim.name, opt);
		a.label = "idle asker";
		ck_assert(a.connect());
		const fi_addr_t to = s.victim.insert_addr(a.claimed_sockaddr());
		// The victim's watch looks every second: by 1.5 s it has seen the
		// connection unused (nothing was sent on it).
		settle(1500);
		ck_assert_int_eq(a.send(idle(rdm::IdleStatus::Query, 100)), IBV_WC_SUCCESS);
		ck_assert_msg(answer_of(a) == rdm::IdleStatus::Agree, "an unused connection was not agreed to close");
		uint8_t out[64];
		fill_pattern(out, sizeof out, 93);
		fi_context sctx{};
		for (Deadline d(300); !d.expired(); settle(20))
			ck_assert_int_eq(fi_tsend(s.victim.ep, out, sizeof out, nullptr, to, 0x91, &sctx), -FI_EAGAIN);
		s.honest_round("while the victim holds for the asker");
		ck_assert_int_eq(a.send(idle(rdm::IdleStatus::Resume)), IBV_WC_SUCCESS);
		post([&] { return fi_tsend(s.victim.ep, out, sizeof out, nullptr, to, 0x91, &sctx); }, "victim fi_tsend");
		expect_ok(s.victim, &sctx, FI_TAGGED | FI_SEND, "the send held by the agreement");
		std::vector<uint8_t> got;
		ck_assert_msg(a.next_message(got), "the held send did not arrive after the Resume");
		ck_assert_uint_eq(got.size(), rdm::kRdmHeaderBytes + sizeof out);
		expect_pattern(got.data() + rdm::kRdmHeaderBytes, sizeof out, 93, "the held send");
		// Just used: the next Query is refused.
		ck_assert_int_eq(a.send(idle(rdm::IdleStatus::Query, 100)), IBV_WC_SUCCESS);
		ck_assert_msg(answer_of(a) == rdm::IdleStatus::Refuse, "a connection used just now was agreed to close");
		settle(2500);
		ck_assert_int_eq(a.send(idle(rdm::IdleStatus::Query, 100)), IBV_WC_SUCCESS);
		ck_assert_msg(answer_of(a) == rdm::IdleStatus::Agree, "unused again, not agreed");
		// A second Query while agreed.
		ck_assert_int_eq(a.send(idle(rdm::IdleStatus::Query, 100)), IBV_WC_SUCCESS);
		ck_assert_msg(a.wait_dropped(), "a Query while agreed kept the connection");
		s.victim.poll();
		expect_none(s.victim, 50, "after the drop");
	}
	s.honest_round("after the asker");
	for (rdm::IdleStatus st : {rdm::IdleStatus::Agree, rdm::IdleStatus::Refuse, rdm::IdleStatus::Resume}) {
		HostilePeer a(s.victim.name, opt);
		a.label = "idle out of turn " + std::to_string(int(st));
		ck_assert(a.connect());
		ck_assert_int_eq(a.send(idle(st)), IBV_WC_SUCCESS);
		ck_assert_msg(a.wait_dropped(), "%s: kept", a.label.c_str());
	}
	{
		HostilePeer a(s.victim.name);
		a.label = "idle query without kConnFlagIdle";
		ck_assert(a.connect());
		ck_assert_int_eq(a.send(idle(rdm::IdleStatus::Query, 100)), IBV_WC_SUCCESS);
		ck_assert_msg(a.wait_dropped(), "%s: kept", a.label.c_str());
	}
	s.honest_round("after");
	expect_none(s.victim, 50, "at the end");
}
END_TEST

// A peer that asks to close an unused connection, is agreed to, and then
// neither closes nor resumes: the victim holds its sends to it only for
// FI_VRMA_RDM_DRAIN_TIMEOUT (1 s here), then fails the connection (one
// warning); the honest peer is served throughout.
START_TEST(hostile_idle_never_closes)
{
	ScopedEnv drain("FI_VRMA_RDM_DRAIN_TIMEOUT", "1000");
	Scene s;
	s.honest_round("before");
	HostileOptions opt;
	opt.conn_flags = rdm::kConnFlagIdle;
	HostilePeer a(s.victim.name, opt);
	a.label = "idle asker that never closes";
	ck_assert(a.connect());
	settle(600); // the watch (every 250 ms) has seen it unused
	ck_assert_int_eq(a.send(header_only(rdm::MsgType::Idle, 0, static_cast<uint8_t>(rdm::IdleStatus::Query), 0, 1)),
			 IBV_WC_SUCCESS);
	std::vector<uint8_t> got;
	ck_assert_msg(a.next_message(got), "no answer to the idle query");
	rdm::RdmHeader h;
	ck_assert(rdm::decode_header(got.data(), got.size(), h));
	ck_assert_msg(h.type == rdm::MsgType::Idle && h.status == static_cast<uint8_t>(rdm::IdleStatus::Agree),
		      "type %d status %u, expected an Agree", int(h.type), unsigned(h.status));
	const auto agreed = std::chrono::steady_clock::now();
	s.honest_round("while held");
	ck_assert_msg(a.wait_dropped(), "the victim held for a peer that never closed");
	const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - agreed).count();
	ck_assert_msg(ms >= 900 && ms < 4000, "dropped %lld ms after agreeing, expected 1000 to 1250 and some progress",
		      static_cast<long long>(ms));
	s.honest_round("after");
	expect_none(s.victim, 50);
}
END_TEST

// The mutation fuzzer: well-formed messages of every type, each mutated at
// random (bytes flipped or set to edge values, length fields set to edge
// values, the message cut or extended), sent one by one. A connection the
// victim drops is replaced by a new one (same claimed address, new nonce).
// Seeded: VRMA_TEST_SEED reproduces a run; VRMA_TEST_FUZZ sets the
// count (default 10000).
START_TEST(hostile_fuzz)
{
	if (!in_fresh_process("hostile_fuzz"))
		return;
	const char *seed_env = getenv("VRMA_TEST_SEED");
	const uint64_t seed = seed_env ? strtoull(seed_env, nullptr, 0) : std::random_device{}();
	const char *n_env = getenv("VRMA_TEST_FUZZ");
	const size_t total = n_env ? strtoull(n_env, nullptr, 0) : 10000;
	fprintf(stderr, "hostile_fuzz: seed %" PRIu64 " (VRMA_TEST_SEED), %zu messages\n", seed, total);
	std::mt19937_64 rng(seed);
	Scene s;
	// The attacker's own region, which its well-formed atomics may change
	// (the honest peer's word is elsewhere in the victim's memory).
	Region target(s.env, kRegion, atomic_test::kRemote, 0, kGuard);
	s.honest_round("before the fuzzer");

	std::vector<std::vector<uint8_t>> templates;
	{
		std::vector<uint8_t> eager = header_only(rdm::MsgType::EagerTagged, 1, 0, rdm::kFlagLastPiece, 64);
		eager.resize(eager.size() + 64, 0xab);
		templates.push_back(eager);
		auto plain = header_only(rdm::MsgType::Eager, 2, 0, rdm::kFlagLastPiece | rdm::kFlagDeliveryComplete, 16);
		plain.resize(plain.size() + 16, 0xcd);
		templates.push_back(plain);
		for (auto k : {vatomic::Kind::Plain, vatomic::Kind::Fetch, vatomic::Kind::Compare})
			templates.push_back(atomic_request(3, k, k == vatomic::Kind::Compare ? FI_CSWAP : FI_SUM,
							   target.addr(64), target.key(), 2, 16));
		templates.push_back(atomic_request(4, vatomic::Kind::Fetch, FI_ATOMIC_READ, target.addr(0), target.key(), 4, 0));
		for (auto t : {rdm::MsgType::RndvDone, rdm::MsgType::DeliveryAck, rdm::MsgType::AtomicResponse,
			       rdm::MsgType::CommitAnswer, rdm::MsgType::KeyAnswer})
			templates.push_back(header_only(t, 5));
		auto key_req = header_only(rdm::MsgType::KeyRequest, 6);
		key_req.resize(rdm::kKeyRequestBytes, 0);
		rdm::le::put64(key_req.data() + rdm::kRdmHeaderBytes, target.key());
		key_req[rdm::kRdmHeaderBytes + 8] = vrma::keys::kAccessRemoteRead;
		templates.push_back(key_req);
		templates.push_back(rndv_request(7));
		{
			rdm::RdmHeader ch;
			ch.msg_id = 8;
			ch.length = 16;
			const rdm::CommitRange cr{target.addr(0), 16, target.key()};
			std::vector<uint8_t> commit(rdm::kCommitRequestMax);
			commit.resize(rdm::encode_commit_request(commit.data(), ch, &cr, 1));
			templates.push_back(commit);
		}
		templates.push_back(header_only(rdm::MsgType::Idle, 0, static_cast<uint8_t>(rdm::IdleStatus::Query), 0, 100));
		auto event = header_only(rdm::MsgType::RmaEvent, 0, static_cast<uint8_t>(rdm::RmaKind::Write), 0, 8);
		event.resize(event.size() + 8 + 8, 0);
		event[rdm::kRdmHeaderBytes] = 1;
		rdm::le::put64(event.data() + rdm::kRdmHeaderBytes + 8, target.key());
		templates.push_back(event);
	}
	const auto &edges = wire_mutation::kEdges;
	auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
	auto mutate = [&](std::vector<uint8_t> m) {
		const size_t rounds = 1 + pick(4);
		for (size_t r = 0; r < rounds; r++) {
			switch (pick(6)) {
			case 0: // flip a bit in the first 128 bytes
				if (!m.empty())
					m[pick(std::min<size_t>(m.size(), 128))] ^= static_cast<uint8_t>(1u << pick(8));
				break;
			case 1: { // a byte to an edge value
				static constexpr uint8_t b[] = {0, 1, 2, 4, 0x7f, 0x80, 0xfe, 0xff};
				if (!m.empty())
					m[pick(std::min<size_t>(m.size(), 128))] = b[pick(sizeof b)];
				break;
			}
			case 2: // the header's length
				if (m.size() >= rdm::kRdmHeaderBytes)
					rdm::le::put64(m.data() + 24, edges[pick(std::size(edges))]);
				break;
			case 3: // a 64-bit field of the body
				if (m.size() >= rdm::kRdmHeaderBytes + 16) {
					const size_t off = rdm::kRdmHeaderBytes + 8 * pick((m.size() - rdm::kRdmHeaderBytes) / 8);
					if (off + 8 <= m.size())
						rdm::le::put64(m.data() + off, edges[pick(std::size(edges))]);
				}
				break;
			case 4: // cut
				m.resize(pick(m.size() + 1));
				break;
			case 5: // extend
				m.resize(m.size() + 1 + pick(64), static_cast<uint8_t>(rng()));
				break;
			}
		}
		return m;
	};

	HostileOptions opt;
	// Room for the victim's largest message: its eager size (an RDM
	// endpoint's inject_size) and the header.
	opt.recv_bytes = s.env.info->tx_attr->inject_size + rdm::kRdmHeaderBytes + 64;
	auto attacker = std::make_unique<HostilePeer>(s.victim.name, opt);
	ck_assert(attacker->connect());
	opt.claim = attacker->claimed();
	size_t drops = 0, refused = 0, events = 0;
	for (size_t i = 0; i < total; i++) {
		if (attacker->dropped()) {
			drops++;
			attacker.reset();
			for (;;) {
				attacker = std::make_unique<HostilePeer>(s.victim.name, opt);
				if (attacker->connect())
					break;
				// The victim may still be closing the previous
				// connection: a refusal is fine, a hang is not.
				ck_assert_msg(++refused < total, "the victim refuses every connection");
				attacker.reset();
				settle(20);
			}
		}
		const size_t ti = pick(templates.size());
		const auto m = mutate(templates[ti]);
		char label[160];
		int n = snprintf(label, sizeof label, "message %zu, template %zu, %zu bytes:", i, ti, m.size());
		for (size_t b = 0; b < std::min<size_t>(m.size(), 40) && n < int(sizeof label) - 4; b++)
			n += snprintf(label + n, sizeof label - n, " %02x", m[b]);
		attacker->label = label;
		attacker->send(m);
		std::vector<uint8_t> drain;
		while (attacker->next_message(drain, 0)) {
		}
		if (i % 1000 == 999) {
			s.region.expect_canaries("during the fuzzer");
			target.expect_canaries("during the fuzzer");
			events += s.drop_remote_events();
			s.honest_round("during the fuzzer");
		}
	}
	attacker.reset();
	events += s.drop_remote_events();
	fprintf(stderr,
		"hostile_fuzz: %zu messages, %zu connections dropped, %zu reconnects refused, %zu remote events\n",
		total, drops, refused, events);
	s.region.expect_canaries("after the fuzzer");
	target.expect_canaries("after the fuzzer");
	s.honest_round("after the fuzzer");
	ck_assert_msg(drops > total / 10, "only %zu of %zu mutated messages dropped a connection", drops, total);
}
END_TEST

} // namespace

Suite *hostile_suite()
{
	Suite *s = suite_create("hostile");
	rdm_add_tcase(s, "hostile_messages", 120,
		      {hostile_atomic_count_overflow, hostile_write_imm_replay, hostile_answer_kind,
		       hostile_stale_unexpected, hostile_native_rights, hostile_native_agreement,
		       hostile_commit_without_pmem, hostile_unexpected_flood, hostile_rma_events,
		       hostile_stalled_receivers, hostile_cq_data_flood, hostile_peer_table,
		       hostile_close_counts, hostile_close_sent, hostile_idle_turns,
		       hostile_idle_never_closes});
	rdm_add_tcase(s, "hostile_lifetimes", 60, {hostile_conn_lost_in_transmit});
	rdm_add_tcase(s, "hostile_fuzz", 600, {hostile_fuzz});
	return s;
}
