// The RDM endpoint's wire formats: the connection header, the message header,
// the rendezvous request, the RMA event, the atomic request and the answers
// round-trip with their bytes where the layout says; every malformed one is
// refused; crossing connections resolve to exactly one on both sides.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "wire/rdm_wc.h"
#include "wire/rdm_wire.h"
#include "../wire_mutation.h"

#include <array>
#include "unit.h"

using namespace vrma::rdm;

namespace {

RdmAddr v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port)
{
	RdmAddr r;
	r.family = AF_INET;
	r.port = port;
	r.addr[0] = a;
	r.addr[1] = b;
	r.addr[2] = c;
	r.addr[3] = d;
	return r;
}

// fd00::<last> with the given port.
RdmAddr v6(uint8_t last, uint16_t port)
{
	RdmAddr r;
	r.family = AF_INET6;
	r.port = port;
	r.addr[0] = 0xfd;
	r.addr[15] = last;
	return r;
}

RdmConnHeader conn(const RdmAddr &a, uint64_t nonce, uint16_t flags = 0)
{
	RdmConnHeader h;
	h.addr = a;
	h.nonce = nonce;
	h.flags = flags;
	return h;
}

bool decodes_conn(const uint8_t *buf, size_t len)
{
	RdmConnHeader h;
	return decode_conn_header(buf, len, h);
}

bool decodes(const uint8_t *buf, size_t len)
{
	RdmHeader h;
	return decode_header(buf, len, h);
}

RdmHeader header(MsgType type, uint8_t flags, uint64_t length)
{
	RdmHeader h;
	h.type = type;
	h.flags = flags;
	h.length = length;
	h.msg_id = 0x01020304u;
	return h;
}

} // namespace

START_TEST(addr_validity_and_order)
{
	ck_assert(connectable(v4(10, 0, 0, 1, 7471)));
	ck_assert(connectable(v6(1, 1)));
	ck_assert(!valid(RdmAddr{}));
	ck_assert(valid(v4(0, 0, 0, 0, 0)));
	ck_assert(!connectable(v4(0, 0, 0, 0, 7471))); // wildcard
	ck_assert(!connectable(v4(10, 0, 0, 1, 0)));   // no port
	RdmAddr a = v4(10, 0, 0, 1, 1);
	a.addr[4] = 1; // IPv4 with bytes past the fourth
	ck_assert(!valid(a));
	RdmAddr m = v6(0, 1);
	memset(m.addr, 0, 16);
	m.addr[10] = m.addr[11] = 0xff;
	m.addr[15] = 1; // ::ffff:0.0.0.1 must be stored as IPv4
	ck_assert(!valid(m));
	ck_assert(!connectable(m));

	// IPv4 before IPv6, then address bytes, then port.
	ck_assert_int_lt(compare(v4(255, 255, 255, 255, 65535), v6(0, 1)), 0);
	ck_assert_int_lt(compare(v4(10, 0, 0, 1, 9), v4(10, 0, 0, 2, 1)), 0);
	ck_assert_int_lt(compare(v4(10, 0, 0, 1, 1), v4(10, 0, 0, 1, 2)), 0);
	ck_assert_int_gt(compare(v4(10, 0, 0, 1, 256), v4(10, 0, 0, 1, 255)), 0);
	ck_assert_int_eq(compare(v6(3, 4), v6(3, 4)), 0);
	ck_assert(v6(3, 4) == v6(3, 4));
	ck_assert(!(v6(3, 4) == v6(3, 5)));
	ck_assert_uint_eq(RdmAddrHash{}(v6(3, 4)), RdmAddrHash{}(v6(3, 4)));
	ck_assert_uint_ne(RdmAddrHash{}(v6(3, 4)), RdmAddrHash{}(v6(3, 5)));
}
END_TEST

START_TEST(conn_header_round_trip)
{
	ck_assert_uint_le(kConnHeaderBytes, 48);
	for (const RdmAddr &a : {v4(192, 168, 1, 20, 0x1234), v6(0x77, 0xfedc)}) {
		// Unknown flags (bit 7, 12-15) pass through; rejects carry no table.
		for (uint16_t flags : {uint16_t(0), kConnFlagAccept, uint16_t(0xff & ~kConnFlagKeyTable),
				       uint16_t(kConnFlagBusy | 0xf000), uint16_t(kConnFlagCrossing | 0x80)}) {
			uint8_t buf[kConnPrivateDataMax];
			memset(buf, 0xee, sizeof buf);
			ck_assert(encode_conn_header(buf, conn(a, 0x0102030405060708ULL, flags)));
			// Layout: magic, version, flags, family, LE port, 0, addr, LE nonce.
			ck_assert_uint_eq(buf[0], kConnMagic);
			ck_assert_uint_eq(buf[1], kConnVersion);
			ck_assert_uint_eq(buf[2], flags & 0xff);
			ck_assert_uint_eq(buf[3], a.family == AF_INET ? 4 : 6);
			ck_assert_uint_eq(buf[4], a.port & 0xff);
			ck_assert_uint_eq(buf[5], a.port >> 8);
			ck_assert_uint_eq(buf[6], flags >> 8);
			ck_assert_uint_eq(buf[7], 0);
			ck_assert_int_eq(memcmp(buf + 8, a.addr, 16), 0);
			ck_assert_uint_eq(buf[24], 0x08);
			ck_assert_uint_eq(buf[31], 0x01);
			ck_assert_uint_eq(buf[32], 0xee); // nothing past the header
			// rdma_cm pads private data: a longer buffer is fine.
			for (size_t len : {kConnHeaderBytes, sizeof buf}) {
				RdmConnHeader h;
				ck_assert(decode_conn_header(buf, len, h));
				ck_assert(h.addr == a);
				ck_assert_uint_eq(h.nonce, 0x0102030405060708ULL);
				ck_assert_uint_eq(h.flags, flags); // unknown flags pass through
			}
		}
	}
}
END_TEST

START_TEST(malformed_conn_headers_refused)
{
	uint8_t good[kConnHeaderBytes];
	ck_assert(encode_conn_header(good, conn(v4(10, 0, 0, 1, 7471), 42)));
	ck_assert(decodes_conn(good, sizeof good));
	ck_assert(!decodes_conn(good, 0));
	ck_assert(!decodes_conn(good, sizeof good - 1));

	auto refused_with = [&](size_t at, uint8_t value) {
		uint8_t bad[kConnHeaderBytes];
		memcpy(bad, good, sizeof bad);
		bad[at] = value;
		return !decodes_conn(bad, sizeof bad);
	};
	ck_assert(refused_with(0, 0xA7)); // the MSG endpoint's CmHeader magic
	ck_assert(refused_with(0, 0));
	ck_assert(refused_with(1, kConnVersion + 1));
	ck_assert(refused_with(3, 0));    // family
	ck_assert(refused_with(3, 5));
	ck_assert(refused_with(3, AF_INET)); // host AF_* values are not the codes
	ck_assert(refused_with(3, AF_INET6));
	ck_assert(refused_with(7, 1)); // reserved (byte 6 holds flags)
	// Two kinds of reject at once.
	{
		uint8_t bad[kConnHeaderBytes];
		memcpy(bad, good, sizeof bad);
		bad[2] = kConnFlagCrossing;
		bad[6] = kConnFlagBusy >> 8;
		ck_assert(!decodes_conn(bad, sizeof bad));
	}
	// A flag that makes bytes follow, without them.
	ck_assert(refused_with(6, kConnFlagAuth >> 8));
	ck_assert(refused_with(6, kConnFlagAsk >> 8));
	ck_assert(refused_with(6, kConnFlagChallenge >> 8));
	ck_assert(refused_with(8 + 4, 1)); // IPv4 with bytes past the fourth
	ck_assert(refused_with(8 + 15, 1));

	// Not connectable: port 0, the wildcard address; nonce 0. encode refuses
	// them too, so they are forged here.
	uint8_t bad[kConnHeaderBytes];
	memcpy(bad, good, sizeof bad);
	bad[4] = bad[5] = 0;
	ck_assert(!decodes_conn(bad, sizeof bad));
	memcpy(bad, good, sizeof bad);
	memset(bad + 8, 0, 4);
	ck_assert(!decodes_conn(bad, sizeof bad));
	memcpy(bad, good, sizeof bad);
	memset(bad + 24, 0, 8);
	ck_assert(!decodes_conn(bad, sizeof bad));
	// An IPv4-mapped IPv6 address: the sender should have sent IPv4.
	memcpy(bad, good, sizeof bad);
	bad[3] = 6;
	memset(bad + 8, 0, 16);
	bad[8 + 10] = bad[8 + 11] = 0xff;
	memcpy(bad + 8 + 12, good + 8, 4);
	ck_assert(!decodes_conn(bad, sizeof bad));

	memset(bad, 0xee, sizeof bad);
	ck_assert(!encode_conn_header(bad, conn(v4(10, 0, 0, 1, 7471), 0)));
	ck_assert(!encode_conn_header(bad, conn(v4(10, 0, 0, 1, 0), 1)));
	ck_assert(!encode_conn_header(bad, conn(v4(0, 0, 0, 0, 7471), 1)));
	ck_assert(!encode_conn_header(bad, conn(RdmAddr{}, 1)));
	ck_assert_uint_eq(bad[0], 0xee); // nothing written
}
END_TEST

// The authenticated exchange's layouts (conn_auth.h): what follows the
// header in a first request (kConnFlagAsk: the challenge), an answering
// request (kConnFlagAuth: cookie and answer; a table only announced), an
// authenticated answer (proof, then the table) and a challenge reject
// (cookie, proof; never a table). Each is refused when shorter.
START_TEST(conn_header_auth_layouts)
{
	const RdmAddr a = v4(10, 0, 0, 1, 7471);
	std::array<uint8_t, kConnMacBytes> mac;
	for (size_t i = 0; i < mac.size(); i++)
		mac[i] = static_cast<uint8_t>(0xa0 + i);
	struct Case {
		uint16_t flags;
		size_t bytes;
		bool cookie, table;
		size_t mac_at; // 0: none
	};
	const Case cases[] = {
		{kConnFlagAsk | kConnFlagKeyTable, 48, false, false, 32},
		{kConnFlagAuth | kConnFlagKeyTable, 56, true, false, 40},
		{kConnFlagAuth, 56, true, false, 40},
		{kConnFlagAccept | kConnFlagAuth | kConnFlagKeyTable, 64, false, true, 32},
		{kConnFlagAccept | kConnFlagAuth, 48, false, false, 32},
		{kConnFlagChallenge | kConnFlagKeyTable, 56, true, false, 40},
		{kConnFlagBusy | kConnFlagKeyTable, 32, false, false, 0},
		{kConnFlagCrossing | kConnFlagKeyTable, 32, false, false, 0},
	};
	for (const Case &c : cases) {
		RdmConnHeader in = conn(a, 42, c.flags);
		in.cookie = 0x1122334455667788ULL;
		in.mac = mac;
		in.key_table = {0x7000, 0x1234, 64};
		uint8_t buf[kConnHeaderMax + 8];
		memset(buf, 0xee, sizeof buf);
		ck_assert_msg(encode_conn_header(buf, in), "flags %#x", c.flags);
		ck_assert_uint_eq(conn_header_bytes(in), c.bytes);
		ck_assert_uint_eq(buf[c.bytes], 0xee);
		if (c.cookie)
			ck_assert_uint_eq(buf[32], 0x88);
		if (c.mac_at)
			ck_assert_int_eq(memcmp(buf + c.mac_at, mac.data(), mac.size()), 0);
		RdmConnHeader out;
		ck_assert(decode_conn_header(buf, c.bytes, out));
		ck_assert_uint_eq(out.flags, c.flags);
		ck_assert_uint_eq(out.cookie, c.cookie ? in.cookie : 0);
		ck_assert(c.mac_at ? out.mac == mac : out.mac == decltype(mac){});
		ck_assert_uint_eq(out.key_table.buckets, c.table ? 64 : 0);
		ck_assert_msg(!decode_conn_header(buf, c.bytes - 1, out) || c.bytes == kConnHeaderBytes,
			      "flags %#x: %zu bytes decode", c.flags, c.bytes - 1);
	}
	// Every request fits an IB/RoCE REQ.
	ck_assert_uint_le(conn_header_bytes(conn(a, 1, kConnFlagAuth | kConnFlagKeyTable)), kConnPrivateDataMax);
	ck_assert_uint_le(conn_header_bytes(conn(a, 1, kConnFlagKeyTable)), kConnPrivateDataMax);
}
END_TEST

// kConnFlagKeyTable: the 16 bytes after the header locate the sender's
// scalable-key table; a bucket count that is not a power of two up to 2^20,
// or private data too short for it, is refused.
START_TEST(conn_header_key_table)
{
	RdmConnHeader in = conn(v4(10, 0, 0, 1, 7471), 42, kConnFlagKeyTable | kConnFlagAccept);
	in.key_table = {0x00007f1234567000ULL, 0xa1b2c3d4, 512};
	uint8_t buf[kConnPrivateDataMax];
	memset(buf, 0xee, sizeof buf);
	ck_assert(encode_conn_header(buf, in));
	ck_assert_uint_eq(conn_header_bytes(in), 48);
	ck_assert_uint_eq(buf[32], 0x00);
	ck_assert_uint_eq(buf[33], 0x70);
	ck_assert_uint_eq(buf[40], 0xd4);
	ck_assert_uint_eq(buf[44], 0x00);
	ck_assert_uint_eq(buf[45], 0x02);
	ck_assert_uint_eq(buf[48], 0xee);
	RdmConnHeader out;
	ck_assert(decode_conn_header(buf, 48, out));
	ck_assert_uint_eq(out.key_table.addr, in.key_table.addr);
	ck_assert_uint_eq(out.key_table.rkey, in.key_table.rkey);
	ck_assert_uint_eq(out.key_table.buckets, 512);
	ck_assert(!decode_conn_header(buf, 47, out));
	// Without the flag the bytes are not read (an older peer's padding).
	RdmConnHeader plain = conn(v4(10, 0, 0, 1, 7471), 42);
	ck_assert(encode_conn_header(buf, plain));
	ck_assert_uint_eq(conn_header_bytes(plain), kConnHeaderBytes);
	ck_assert(decode_conn_header(buf, kConnHeaderBytes, out));
	ck_assert_uint_eq(out.key_table.buckets, 0);
	for (uint32_t n : {0u, 3u, 1000u, (1u << 20) + 1, 1u << 21}) {
		in.key_table.buckets = n;
		ck_assert(!encode_conn_header(buf, in));
		in.key_table.buckets = 1;
		ck_assert(encode_conn_header(buf, in));
		buf[44] = static_cast<uint8_t>(n);
		buf[45] = static_cast<uint8_t>(n >> 8);
		buf[46] = static_cast<uint8_t>(n >> 16);
		buf[47] = static_cast<uint8_t>(n >> 24);
		ck_assert(!decode_conn_header(buf, 48, out));
	}
	for (uint32_t n : {1u, 2u, 1u << 20}) {
		in.key_table.buckets = n;
		ck_assert(encode_conn_header(buf, in));
		ck_assert(decode_conn_header(buf, 48, out));
		ck_assert_uint_eq(out.key_table.buckets, n);
	}
}
END_TEST

START_TEST(crossing_connections_keep_exactly_one)
{
	const std::vector<RdmAddr> addrs = {
		v4(10, 0, 0, 1, 7471), v4(10, 0, 0, 1, 7472), v4(10, 0, 0, 2, 7471),
		v4(10, 0, 1, 0, 1),    v4(9, 255, 255, 255, 65535), v6(1, 7471),
		v6(1, 7472),           v6(2, 1),
	};
	const std::vector<uint64_t> nonces = {1, 2, 0x8000000000000000ULL, UINT64_MAX};
	struct Side {
		RdmAddr addr;
		uint64_t nonce;
	};
	std::vector<Side> sides;
	for (const RdmAddr &a : addrs)
		for (uint64_t n : nonces)
			sides.push_back({a, n});

	size_t bad = 0;
	for (const Side &x : sides) {
		// An endpoint meeting itself: no pair to break, false by convention.
		bad += keep_initiated(x.addr, x.nonce, x.addr, x.nonce);
		for (const Side &y : sides) {
			if (x.addr == y.addr && x.nonce == y.nonce)
				continue;
			const bool x_keeps = keep_initiated(x.addr, x.nonce, y.addr, y.nonce);
			const bool y_keeps = keep_initiated(y.addr, y.nonce, x.addr, x.nonce);
			// x keeps the one x initiated and drops the one y initiated, or
			// the reverse; y decides the same: one connection survives.
			bad += x_keeps == y_keeps;
			// The address decides first, the nonce only breaks its ties.
			const int c = compare(x.addr, y.addr);
			bad += x_keeps != (c != 0 ? c < 0 : x.nonce < y.nonce);
			// Transitive: a total order over the (address, nonce) pairs.
			for (const Side &z : sides)
				bad += x_keeps && keep_initiated(y.addr, y.nonce, z.addr, z.nonce) &&
				       !keep_initiated(x.addr, x.nonce, z.addr, z.nonce);
		}
	}
	// Checked once: a passing ck_assert per pair would log 10^4 lines.
	ck_assert_uint_eq(bad, 0);
}
END_TEST

START_TEST(header_round_trip)
{
	struct {
		MsgType type;
		uint8_t flags;
		uint64_t tag;
		uint8_t status;
		uint64_t length;
		size_t payload;
	} const cases[] = {
		{MsgType::Eager, kFlagLastPiece, 0, 0, 100, 100},
		{MsgType::Eager, kFlagLastPiece, 0, 0, 0, 0}, // empty message
		{MsgType::Eager, kFlagCqData | kFlagDeliveryComplete, 0, 0, 1 << 20, 65536 - 32},
		{MsgType::EagerTagged, kFlagCqData | kFlagDeliveryComplete | kFlagLastPiece,
		 0xfedcba9876543210ULL, 0, 7, 7},
		{MsgType::EagerTagged, kFlagLastPiece, 0, 0, 1, 1}, // tag 0 is a tag
		{MsgType::DeliveryAck, 0, 0, 0, 0, 0},
		{MsgType::RndvDone, 0, 0, uint8_t(RndvStatus::Ok), 0, 0},
		{MsgType::RndvDone, 0, 0, uint8_t(RndvStatus::Failed), 0, 0},
	};
	for (const auto &c : cases) {
		RdmHeader in = header(c.type, c.flags, c.length);
		in.tag = c.tag;
		in.status = c.status;
		in.cq_data = (c.flags & kFlagCqData) ? 0xa1b2c3d4e5f60718ULL : 0;
		std::vector<uint8_t> buf(kRdmHeaderBytes + c.payload, 0x5a);
		encode_header(buf.data(), in);
		// Layout: type, version, flags, status, LE id, LE tag, LE data, LE length.
		ck_assert_uint_eq(buf[0], uint8_t(c.type));
		ck_assert_uint_eq(buf[1], kRdmVersion);
		ck_assert_uint_eq(buf[2], c.flags);
		ck_assert_uint_eq(buf[3], c.status);
		ck_assert_uint_eq(buf[4], 0x04);
		ck_assert_uint_eq(buf[7], 0x01);
		ck_assert_uint_eq(buf[8], uint8_t(c.tag));
		ck_assert_uint_eq(buf[15], uint8_t(c.tag >> 56));
		ck_assert_uint_eq(buf[16], uint8_t(in.cq_data));
		ck_assert_uint_eq(buf[24], uint8_t(c.length));
		ck_assert_uint_eq(buf[26], uint8_t(c.length >> 16));
		RdmHeader out;
		ck_assert_msg(decode_header(buf.data(), buf.size(), out), "type %u",
			      unsigned(c.type));
		ck_assert(out.type == in.type);
		ck_assert_uint_eq(out.flags, in.flags);
		ck_assert_uint_eq(out.status, in.status);
		ck_assert_uint_eq(out.msg_id, in.msg_id);
		ck_assert_uint_eq(out.tag, in.tag);
		ck_assert_uint_eq(out.cq_data, in.cq_data);
		ck_assert_uint_eq(out.length, in.length);
	}

	uint8_t buf[kRdmHeaderBytes];
	RdmHeader h;
	encode_rndv_done(buf, 0xdeadbeef, RndvStatus::AccessError);
	ck_assert(decode_header(buf, sizeof buf, h));
	ck_assert(h.type == MsgType::RndvDone);
	ck_assert_uint_eq(h.msg_id, 0xdeadbeef);
	ck_assert_uint_eq(h.status, uint8_t(RndvStatus::AccessError));
	encode_delivery_ack(buf, 77);
	ck_assert(decode_header(buf, sizeof buf, h));
	ck_assert(h.type == MsgType::DeliveryAck);
	ck_assert_uint_eq(h.msg_id, 77);
}
END_TEST

// The send fast path's prebuilt header, patched per message, is the header
// encode_header writes for that message, whatever the messages before it
// left in the buffer.
START_TEST(patched_eager_header_equals_encoded)
{
	struct Msg {
		MsgType type;
		uint8_t flags;
		uint64_t tag, cq_data, length;
	} msgs[] = {
		{MsgType::EagerTagged, kFlagLastPiece, 0xfedcba9876543210ULL, 0, 8},
		{MsgType::Eager, kFlagLastPiece | kFlagCqData, 0, 0xa1b2c3d4ULL, 0},
		{MsgType::EagerTagged, kFlagLastPiece, 0, 0, 65536},
		{MsgType::Eager, kFlagLastPiece, 0, 0, 1},
	};
	uint8_t patched[kRdmHeaderBytes];
	encode_header(patched, RdmHeader{});
	for (const Msg &m : msgs) {
		patch_eager_header(patched, m.type, m.flags, m.tag, m.cq_data, m.length);
		RdmHeader h;
		h.type = m.type;
		h.flags = m.flags;
		h.tag = m.tag;
		h.cq_data = m.cq_data;
		h.length = m.length;
		uint8_t encoded[kRdmHeaderBytes];
		encode_header(encoded, h);
		ck_assert_mem_eq(patched, encoded, kRdmHeaderBytes);
		// As it arrives: the header, then the payload.
		std::vector<uint8_t> msg(patched, patched + kRdmHeaderBytes);
		msg.resize(kRdmHeaderBytes + m.length, 0x33);
		RdmHeader out;
		ck_assert(decode_header(msg.data(), msg.size(), out));
		ck_assert(out.type == m.type);
		ck_assert_uint_eq(out.tag, m.tag);
		ck_assert_uint_eq(out.cq_data, m.cq_data);
		ck_assert_uint_eq(out.length, m.length);
		ck_assert_uint_eq(out.msg_id, 0);
	}
}
END_TEST

START_TEST(malformed_headers_refused)
{
	uint8_t buf[kRdmHeaderBytes + 16];
	auto enc = [&](const RdmHeader &h) { encode_header(buf, h); };

	enc(header(MsgType::Eager, kFlagLastPiece, 16));
	ck_assert(decodes(buf, sizeof buf));
	ck_assert(!decodes(buf, 0));
	ck_assert(!decodes(buf, kRdmHeaderBytes - 1));
	buf[0] = 0; // type
	ck_assert(!decodes(buf, sizeof buf));
	buf[0] = kMsgTypeMax + 1;
	ck_assert(!decodes(buf, sizeof buf));
	enc(header(MsgType::Eager, kFlagLastPiece, 16));
	buf[1] = kRdmVersion + 1;
	ck_assert(!decodes(buf, sizeof buf));

	// Flags: unknown ones, and known ones the type may not carry.
	enc(header(MsgType::Eager, kFlagLastPiece | 0x80, 16));
	ck_assert(!decodes(buf, sizeof buf));
	enc(header(MsgType::Eager, kFlagLastPiece | 1 << 3, 16));
	ck_assert(!decodes(buf, sizeof buf));
	enc(header(MsgType::DeliveryAck, kFlagCqData, 0));
	ck_assert(!decodes(buf, kRdmHeaderBytes));
	enc(header(MsgType::RndvDone, kFlagLastPiece, 0));
	ck_assert(!decodes(buf, kRdmHeaderBytes));

	// Fields that must be zero: a tag on an untagged type, CQ data without
	// its flag, a status outside RndvDone, an unknown status.
	RdmHeader h = header(MsgType::Eager, kFlagLastPiece, 16);
	h.tag = 1;
	enc(h);
	ck_assert(!decodes(buf, sizeof buf));
	h.tag = 0;
	h.cq_data = 1;
	enc(h);
	ck_assert(!decodes(buf, sizeof buf));
	h.cq_data = 0;
	h.status = 1;
	enc(h);
	ck_assert(!decodes(buf, sizeof buf));
	h = header(MsgType::RndvDone, 0, 0);
	h.status = kRndvStatusMax + 1;
	enc(h);
	ck_assert(!decodes(buf, kRdmHeaderBytes));

	// Eager lengths: a piece longer than the message; an empty piece of a
	// non-empty message; an empty message's only piece without the flag.
	enc(header(MsgType::Eager, kFlagLastPiece, 15));
	ck_assert(!decodes(buf, sizeof buf));
	ck_assert(decodes(buf, kRdmHeaderBytes + 15));
	enc(header(MsgType::Eager, 0, 16));
	ck_assert(!decodes(buf, kRdmHeaderBytes));
	enc(header(MsgType::Eager, kFlagLastPiece, 16));
	ck_assert(!decodes(buf, kRdmHeaderBytes));
	enc(header(MsgType::Eager, 0, 0));
	ck_assert(!decodes(buf, kRdmHeaderBytes));

	// Answers carry nothing after the header, and no length.
	encode_delivery_ack(buf, 1);
	ck_assert(!decodes(buf, kRdmHeaderBytes + 1));
	enc(header(MsgType::DeliveryAck, 0, 1));
	ck_assert(!decodes(buf, kRdmHeaderBytes));
	encode_rndv_done(buf, 1, RndvStatus::Ok);
	ck_assert(!decodes(buf, kRdmHeaderBytes + 8));
	// ...and answer an id, which is never 0.
	encode_rndv_done(buf, 0, RndvStatus::Ok);
	ck_assert(!decodes(buf, kRdmHeaderBytes));
	encode_delivery_ack(buf, 0);
	ck_assert(!decodes(buf, kRdmHeaderBytes));

	// A rendezvous request of length 0, or without a body.
	uint8_t rbuf[kRndvMsgMax];
	encode_header(rbuf, header(MsgType::RndvRequest, 0, 0));
	ck_assert(!decodes(rbuf, kRndvMsgMin));
	encode_header(rbuf, header(MsgType::RndvRequest, 0, 10));
	ck_assert(decodes(rbuf, kRndvMsgMin));
	ck_assert(!decodes(rbuf, kRndvMsgMin - 1));
	ck_assert(!decodes(rbuf, kRdmHeaderBytes));
}
END_TEST

START_TEST(rndv_request_round_trip)
{
	const RndvSegment segs[kMaxRndvSegments] = {
		{0x00007f0000001000ULL, 0x10000, 0x11223344u},
		{0x00007f0000100000ULL, 1, 0xffffffffu},
		{0x0000000000000000ULL, 0x100000000ULL, 0},
		{0xfffffffffffff000ULL, 4096, 0x80000000u},
	};
	for (size_t n = 1; n <= kMaxRndvSegments; n++) {
		for (MsgType type : {MsgType::RndvRequest, MsgType::RndvRequestTagged}) {
			uint64_t total = 0;
			for (size_t i = 0; i < n; i++)
				total += segs[i].len;
			RdmHeader in = header(type, kFlagCqData | kFlagDeliveryComplete, total);
			in.cq_data = 99;
			in.tag = is_tagged(type) ? 0x123456789ULL : 0;
			uint8_t buf[kRndvMsgMax + 8];
			const size_t len = encode_rndv_request(buf, in, segs, n);
			ck_assert_uint_eq(len, rndv_msg_bytes(n));
			ck_assert_uint_le(len, kRndvMsgMax);
			ck_assert_uint_eq(buf[kRdmHeaderBytes], n);
			// The first segment's LE length at 32 + 8 + 8.
			ck_assert_uint_eq(buf[kRdmHeaderBytes + 8 + 8 + 2], 0x01);
			RdmHeader out;
			RndvSegment got[kMaxRndvSegments];
			size_t count = 0;
			ck_assert(decode_rndv_request(buf, len, out, got, count));
			ck_assert_uint_eq(count, n);
			ck_assert(out.type == type);
			ck_assert_uint_eq(out.length, total);
			ck_assert_uint_eq(out.msg_id, in.msg_id);
			ck_assert_uint_eq(out.tag, in.tag);
			ck_assert_uint_eq(out.cq_data, 99);
			for (size_t i = 0; i < n; i++) {
				ck_assert_uint_eq(got[i].addr, segs[i].addr);
				ck_assert_uint_eq(got[i].len, segs[i].len);
				ck_assert_uint_eq(got[i].rkey, segs[i].rkey);
			}
			// The plain header decode takes it too (it is how the type is
			// learnt), but a byte more or less fails the full decode.
			ck_assert(decode_header(buf, len, out));
			ck_assert(!decode_rndv_request(buf, len - 1, out, got, count));
			ck_assert(!decode_rndv_request(buf, len + 1, out, got, count));
		}
	}
}
END_TEST

START_TEST(malformed_rndv_requests_refused)
{
	RndvSegment segs[kMaxRndvSegments] = {{4096, 100, 1}, {8192, 200, 2}};
	uint8_t good[kRndvMsgMax];
	const size_t len = encode_rndv_request(good, header(MsgType::RndvRequest, 0, 300), segs, 2);
	RdmHeader h;
	RndvSegment out[kMaxRndvSegments];
	size_t n;
	ck_assert(decode_rndv_request(good, len, h, out, n));

	uint8_t bad[kRndvMsgMax];
	auto refused = [&](size_t blen) { return !decode_rndv_request(bad, blen, h, out, n); };
	// Counts 0 and past the limit (with a buffer long enough for them).
	memcpy(bad, good, len);
	bad[kRdmHeaderBytes] = 0;
	ck_assert(refused(rndv_msg_bytes(1)));
	memcpy(bad, good, len);
	bad[kRdmHeaderBytes] = kMaxRndvSegments + 1;
	ck_assert(refused(kRndvMsgMax));
	// A count that disagrees with the length received.
	memcpy(bad, good, len);
	bad[kRdmHeaderBytes] = 3;
	ck_assert(refused(len));
	// Reserved bytes of the body and of a segment.
	memcpy(bad, good, len);
	bad[kRdmHeaderBytes + 7] = 1;
	ck_assert(refused(len));
	memcpy(bad, good, len);
	bad[kRdmHeaderBytes + 8 + 24 + 20] = 1;
	ck_assert(refused(len));
	// Not a rendezvous request.
	memcpy(bad, good, len);
	bad[0] = uint8_t(MsgType::Eager);
	ck_assert(refused(len));

	// Lengths: an empty segment, a sum other than the header's, a sum that
	// overflows 64 bits (and would wrap to the header's length).
	auto encode_with = [&](uint64_t total, uint64_t l0, uint64_t l1) {
		segs[0].len = l0;
		segs[1].len = l1;
		return encode_rndv_request(bad, header(MsgType::RndvRequest, 0, total), segs, 2);
	};
	ck_assert(refused(encode_with(100, 0, 100)));
	ck_assert(refused(encode_with(301, 100, 200)));
	ck_assert(refused(encode_with(299, 100, 200)));
	ck_assert(refused(encode_with(1, UINT64_MAX, 2)));
	ck_assert(!refused(encode_with(UINT64_MAX, UINT64_MAX - 1, 1)));
}
END_TEST

START_TEST(rma_event_round_trip)
{
	const uint64_t keys[kMaxRmaEventKeys] = {0x11223344u, 0, UINT64_MAX, 0x8000000000000001ULL};
	for (size_t n : {size_t(0), size_t(1), size_t(4), kMaxRmaEventKeys}) {
		for (RmaKind kind : {RmaKind::Write, RmaKind::Read, RmaKind::AtomicWrite, RmaKind::AtomicRead}) {
			RdmHeader in = header(MsgType::RmaEvent, kind == RmaKind::Write ? kFlagCqData : 0,
					      0x123456789ULL);
			in.status = uint8_t(kind);
			in.msg_id = 0;
			in.cq_data = kind == RmaKind::Write ? 0xfedcba9876543210ULL : 0;
			uint8_t buf[kRmaEventMsgMax + 8];
			const size_t len = encode_rma_event(buf, in, keys, n);
			ck_assert_uint_eq(len, kRdmHeaderBytes + 8 + 8 * n);
			ck_assert_uint_le(len, kRmaEventMsgMax);
			ck_assert_uint_eq(buf[3], uint8_t(kind));
			ck_assert_uint_eq(buf[kRdmHeaderBytes], n);
			if (n)
				ck_assert_uint_eq(buf[kRdmHeaderBytes + 8], 0x44); // LE key
			RdmHeader out;
			uint64_t got[kMaxRmaEventKeys];
			size_t count = 99;
			ck_assert_msg(decode_rma_event(buf, len, out, got, count), "n %zu", n);
			ck_assert(out.type == MsgType::RmaEvent);
			ck_assert_uint_eq(out.status, uint8_t(kind));
			ck_assert_uint_eq(out.flags, in.flags);
			ck_assert_uint_eq(out.cq_data, in.cq_data);
			ck_assert_uint_eq(out.length, 0x123456789ULL);
			ck_assert_uint_eq(count, n);
			for (size_t i = 0; i < n; i++)
				ck_assert_uint_eq(got[i], keys[i]);
			ck_assert(!decode_rma_event(buf, len - 1, out, got, count));
			ck_assert(!decode_rma_event(buf, len + 1, out, got, count));
		}
	}
}
END_TEST

// What an event's kind says: writes or reads, RMA or atomic.
START_TEST(rma_kinds)
{
	ck_assert(rma_kind_writes(uint8_t(RmaKind::Write)) && !rma_kind_atomic(uint8_t(RmaKind::Write)));
	ck_assert(!rma_kind_writes(uint8_t(RmaKind::Read)) && !rma_kind_atomic(uint8_t(RmaKind::Read)));
	ck_assert(rma_kind_writes(uint8_t(RmaKind::AtomicWrite)) && rma_kind_atomic(uint8_t(RmaKind::AtomicWrite)));
	ck_assert(!rma_kind_writes(uint8_t(RmaKind::AtomicRead)) && rma_kind_atomic(uint8_t(RmaKind::AtomicRead)));
}
END_TEST

START_TEST(malformed_rma_events_refused)
{
	const uint64_t keys[2] = {1, 2};
	RdmHeader in = header(MsgType::RmaEvent, 0, 8);
	in.status = uint8_t(RmaKind::Write);
	in.msg_id = 0;
	uint8_t good[kRmaEventMsgMax];
	const size_t len = encode_rma_event(good, in, keys, 2);
	RdmHeader h;
	uint64_t out[kMaxRmaEventKeys];
	size_t n;
	ck_assert(decode_rma_event(good, len, h, out, n));
	uint8_t bad[kRmaEventMsgMax];
	auto refused = [&](size_t blen) { return !decode_rma_event(bad, blen, h, out, n); };
	// Status: none, or unknown.
	for (uint8_t status : {uint8_t(0), uint8_t(5)}) {
		memcpy(bad, good, len);
		bad[3] = status;
		ck_assert(refused(len));
	}
	// A message id, a tag, flags other than CQ data.
	memcpy(bad, good, len);
	bad[4] = 1;
	ck_assert(refused(len));
	memcpy(bad, good, len);
	bad[8] = 1;
	ck_assert(refused(len));
	memcpy(bad, good, len);
	bad[2] = kFlagDeliveryComplete;
	ck_assert(refused(len));
	// A count past the limit or disagreeing with the length; reserved bytes.
	memcpy(bad, good, len);
	bad[kRdmHeaderBytes] = kMaxRmaEventKeys + 1;
	ck_assert(refused(kRmaEventMsgMax));
	memcpy(bad, good, len);
	bad[kRdmHeaderBytes] = 3;
	ck_assert(refused(len));
	memcpy(bad, good, len);
	bad[kRdmHeaderBytes + 5] = 1;
	ck_assert(refused(len));
	// Too short for the body's head (the header decode refuses it too).
	memcpy(bad, good, len);
	ck_assert(refused(kRdmHeaderBytes + 4));
	ck_assert(!decodes(bad, kRdmHeaderBytes));
}
END_TEST

namespace {

using vrma::atomic::Kind;

// An AtomicRequest of nseg segments of the given counts, with operand and
// compare arrays (as the op takes them) of recognisable bytes.
struct AtomicCase {
	Kind kind;
	int op;
	int datatype;
	std::vector<uint64_t> counts;
};

struct BuiltRequest {
	RdmHeader h;
	AtomicRequest r;
	std::vector<uint8_t> operand, compare;
	uint64_t total = 0;
};

BuiltRequest build_request(const AtomicCase &c)
{
	BuiltRequest b;
	b.r.op = uint8_t(c.op);
	b.r.datatype = uint8_t(c.datatype);
	b.r.kind = c.kind;
	b.r.nseg = c.counts.size();
	for (size_t i = 0; i < c.counts.size(); i++) {
		b.r.segs[i] = {0x00007f0000001000ULL + i * 0x10000, c.counts[i],
			       0xa1a2a3a4a5a6a7a8ULL + i};
		b.total += c.counts[i];
	}
	const size_t bytes = b.total * vrma::atomic::datatype_size(c.datatype);
	if (c.op != FI_ATOMIC_READ) {
		for (size_t i = 0; i < bytes; i++)
			b.operand.push_back(uint8_t(i * 7 + 1));
		b.r.operand = b.operand.data();
		b.r.operand_bytes = bytes;
	}
	if (c.kind == Kind::Compare) {
		for (size_t i = 0; i < bytes; i++)
			b.compare.push_back(uint8_t(i * 13 + 5));
		b.r.compare = b.compare.data();
		b.r.compare_bytes = bytes;
	}
	b.h = header(MsgType::AtomicRequest, 0, b.total);
	return b;
}

// The request encoded, in a buffer 8 bytes longer than it.
std::vector<uint8_t> encode_request(const BuiltRequest &b, size_t &len)
{
	const size_t want = atomic_request_bytes(b.r.kind, b.r.op, b.r.datatype, b.r.nseg, b.total);
	std::vector<uint8_t> buf(want + 8, 0xee);
	len = encode_atomic_request(buf.data(), b.h, b.r);
	ck_assert_uint_eq(len, want);
	return buf;
}

// p holds the bytes of v (memcmp takes no nullptr, even for 0 bytes).
bool holds(const uint8_t *p, const std::vector<uint8_t> &v)
{
	return v.empty() || memcmp(p, v.data(), v.size()) == 0;
}

bool decodes_request(const uint8_t *buf, size_t len)
{
	RdmHeader h;
	AtomicRequest r;
	return decode_atomic_request(buf, len, h, r);
}

} // namespace

START_TEST(atomic_request_round_trip)
{
	const AtomicCase cases[] = {
		{Kind::Plain, FI_SUM, FI_INT32, {3}},
		{Kind::Plain, FI_ATOMIC_WRITE, FI_LONG_DOUBLE_COMPLEX, {1, 2, 1, 5}},
		{Kind::Fetch, FI_ATOMIC_READ, FI_UINT64, {1}},
		{Kind::Fetch, FI_ATOMIC_READ, FI_FLOAT, {4, 1, 2, 9}},
		{Kind::Fetch, FI_MAX, FI_DOUBLE, {2, 2, 2, 2}},
		{Kind::Compare, FI_CSWAP, FI_INT64, {1}},
		{Kind::Compare, FI_MSWAP, FI_UINT8, {1, 3, 5, 7}},
		{Kind::Compare, FI_CSWAP_NE, FI_DOUBLE_COMPLEX, {2}},
		{Kind::Plain, FI_PROD, FI_INT128, {2, 1}},
		{Kind::Compare, FI_CSWAP_GT, FI_UINT128, {3}},
	};
	for (const AtomicCase &c : cases) {
		const BuiltRequest b = build_request(c);
		size_t len = 0;
		std::vector<uint8_t> buf = encode_request(b, len);
		const size_t head = atomic_request_head_bytes(c.counts.size());
		ck_assert_uint_eq(head, kRdmHeaderBytes + 8 + 24 * c.counts.size());
		ck_assert_uint_eq(len, head + b.operand.size() + b.compare.size());
		ck_assert_uint_eq(buf[len], 0xee); // nothing past the message
		// Layout: the header, then op, datatype, kind, nseg, 4 reserved
		// bytes, the LE segments, the operand, the compare.
		ck_assert_uint_eq(buf[0], uint8_t(MsgType::AtomicRequest));
		ck_assert_uint_eq(buf[0], 10);
		ck_assert_uint_eq(buf[24], uint8_t(b.total));
		const uint8_t *body = buf.data() + kRdmHeaderBytes;
		ck_assert_uint_eq(body[0], c.op);
		ck_assert_uint_eq(body[1], c.datatype);
		ck_assert_uint_eq(body[2], uint8_t(c.kind));
		ck_assert_uint_eq(body[3], c.counts.size());
		ck_assert_uint_eq(body[4] | body[5] | body[6] | body[7], 0);
		ck_assert_uint_eq(body[8], 0x00);  // addr's low byte
		ck_assert_uint_eq(body[8 + 5], 0x7f);
		ck_assert_uint_eq(body[16], uint8_t(c.counts[0]));
		ck_assert_uint_eq(body[24], 0xa8); // key's low byte
		ck_assert_uint_eq(body[31], 0xa1);
		ck_assert(holds(buf.data() + head, b.operand));
		ck_assert(holds(buf.data() + head + b.operand.size(), b.compare));

		RdmHeader h;
		AtomicRequest out;
		ck_assert_msg(decode_atomic_request(buf.data(), len, h, out), "op %d datatype %d",
			      c.op, c.datatype);
		ck_assert(h.type == MsgType::AtomicRequest);
		ck_assert_uint_eq(h.msg_id, b.h.msg_id);
		ck_assert_uint_eq(h.length, b.total);
		ck_assert_uint_eq(out.op, c.op);
		ck_assert_uint_eq(out.datatype, c.datatype);
		ck_assert(out.kind == c.kind);
		ck_assert_uint_eq(out.nseg, c.counts.size());
		for (size_t i = 0; i < out.nseg; i++) {
			ck_assert_uint_eq(out.segs[i].addr, b.r.segs[i].addr);
			ck_assert_uint_eq(out.segs[i].count, c.counts[i]);
			ck_assert_uint_eq(out.segs[i].key, b.r.segs[i].key);
		}
		if (c.op == FI_ATOMIC_READ) {
			ck_assert_ptr_null(out.operand);
			ck_assert_uint_eq(out.operand_bytes, 0);
		} else {
			ck_assert_ptr_eq(out.operand, buf.data() + head);
			ck_assert_uint_eq(out.operand_bytes, b.operand.size());
		}
		if (c.kind == Kind::Compare) {
			ck_assert_ptr_eq(out.compare, buf.data() + head + b.operand.size());
			ck_assert_uint_eq(out.compare_bytes, b.compare.size());
		} else {
			ck_assert_ptr_null(out.compare);
			ck_assert_uint_eq(out.compare_bytes, 0);
		}
		// The header decode takes it (the type is learnt there); a byte
		// more or less fails the full decode.
		ck_assert(decode_header(buf.data(), len, h));
		ck_assert(!decodes_request(buf.data(), len - 1));
		ck_assert(!decodes_request(buf.data(), len + 1));

		// Arrays left to the caller: their space is not written.
		BuiltRequest later = b;
		later.r.operand = later.r.compare = nullptr;
		std::vector<uint8_t> buf2(len, 0xee);
		ck_assert_uint_eq(encode_atomic_request(buf2.data(), later.h, later.r), len);
		ck_assert_int_eq(memcmp(buf2.data(), buf.data(), head), 0);
		for (size_t i = head; i < len; i++)
			ck_assert_uint_eq(buf2[i], 0xee);
	}

	// atomic_request_bytes: no overflow, however many elements.
	ck_assert_uint_eq(atomic_request_bytes(Kind::Compare, FI_CSWAP, FI_UINT64, 1, 3),
			  kRdmHeaderBytes + 8 + 24 + 2 * 3 * 8);
	ck_assert_uint_eq(atomic_request_bytes(Kind::Compare, FI_MSWAP, FI_INT128, 1, 3),
			  kRdmHeaderBytes + 8 + 24 + 2 * 3 * 16);
	const size_t read_all = atomic_request_bytes(Kind::Fetch, FI_ATOMIC_READ, FI_UINT64, 4,
						     UINT64_MAX);
	ck_assert_uint_eq(read_all, atomic_request_head_bytes(4));
	ck_assert_uint_eq(atomic_request_bytes(Kind::Plain, FI_SUM, FI_UINT64, 1, UINT64_MAX / 8),
			  SIZE_MAX);
	ck_assert_uint_eq(atomic_request_bytes(Kind::Compare, FI_CSWAP, FI_LONG_DOUBLE_COMPLEX, 1,
					       SIZE_MAX / 64),
			  SIZE_MAX);
}
END_TEST

START_TEST(malformed_atomic_requests_refused)
{
	// Compare MSWAP on 4-byte integers, 2 + 3 elements.
	const BuiltRequest b = build_request({Kind::Compare, FI_MSWAP, FI_UINT32, {2, 3}});
	size_t len = 0;
	const std::vector<uint8_t> good = encode_request(b, len);
	ck_assert(decodes_request(good.data(), len));
	const size_t body = kRdmHeaderBytes;

	std::vector<uint8_t> bad;
	auto with = [&](size_t at, uint8_t value) {
		bad = good;
		bad[at] = value;
		return decodes_request(bad.data(), len);
	};
	// Short and long.
	ck_assert(!decodes_request(good.data(), 0));
	ck_assert(!decodes_request(good.data(), kRdmHeaderBytes));
	ck_assert(!decodes_request(good.data(), kAtomicRequestMin - 1));
	ck_assert(!decodes_request(good.data(), atomic_request_head_bytes(2)));
	ck_assert(!decodes_request(good.data(), len - 4)); // one compare element short
	ck_assert(!decodes_request(good.data(), len + 8));  // two elements too many
	// Combinations valid() refuses. The same-sized datatype FI_INT32 is
	// fine; FI_FLOAT has no bits to mask; nothing is past FI_UINT128.
	// FI_INT128 takes MSWAP, but its 16-byte elements do not fill the
	// arrays' bytes.
	ck_assert(with(body + 1, FI_INT32));
	ck_assert(!with(body + 1, FI_FLOAT));
	ck_assert(!with(body + 1, FI_INT128));
	ck_assert(!with(body + 1, FI_UINT128 + 1));
	ck_assert(!with(body + 1, 0xff));
	ck_assert(!with(body + 2, uint8_t(Kind::Fetch)));
	ck_assert(!with(body + 2, 3)); // no such kind
	ck_assert(!with(body + 2, 0xff));
	ck_assert(!with(body + 0, FI_SUM)); // not a compare op
	ck_assert(!with(body + 0, FI_ATOMIC_OP_LAST));
	ck_assert(with(body + 0, FI_CSWAP_GT));
	// Segment counts: 0, past the limit, more than the buffer holds.
	ck_assert(!with(body + 3, 0));
	ck_assert(!with(body + 3, kMaxAtomicSegments + 1));
	ck_assert(!with(body + 3, 3));
	ck_assert(!with(body + 3, 1));
	// Reserved bytes.
	for (size_t i = 4; i < 8; i++)
		ck_assert(!with(body + i, 1));
	// The header: a msg_id of 0, flags, a status, a tag, no length.
	{
		RdmHeader h = b.h;
		h.msg_id = 0;
		bad = good;
		encode_header(bad.data(), h);
		ck_assert(!decodes_request(bad.data(), len));
	}
	ck_assert(!with(2, kFlagDeliveryComplete));
	ck_assert(with(2, kFlagCqData)); // remote CQ data (0 here) may ride on it
	ck_assert(!with(3, 1));
	ck_assert(!with(8, 1));
	ck_assert(!with(16, 1));

	// Segment counts: an empty one; a sum other than the header's length
	// (the arrays sized for either); a sum that overflows and wraps to it.
	auto encoded_with = [&](std::vector<uint64_t> counts, uint64_t length, uint64_t elements) {
		BuiltRequest x = build_request({Kind::Compare, FI_MSWAP, FI_UINT32, counts});
		x.h.length = length;
		std::vector<uint8_t> op(elements * 4, 1), cmp(elements * 4, 2);
		x.r.operand = op.data();
		x.r.compare = cmp.data();
		x.r.operand_bytes = x.r.compare_bytes = op.size();
		std::vector<uint8_t> buf(atomic_request_head_bytes(counts.size()) + 2 * op.size());
		const size_t n = encode_atomic_request(buf.data(), x.h, x.r);
		return decodes_request(buf.data(), n);
	};
	ck_assert(encoded_with({2, 3}, 5, 5));
	ck_assert(!encoded_with({0, 5}, 5, 5));
	ck_assert(!encoded_with({5, 0}, 5, 5));
	ck_assert(!encoded_with({2, 3}, 6, 6));
	ck_assert(!encoded_with({2, 3}, 6, 5));
	ck_assert(!encoded_with({2, 3}, 4, 4));
	ck_assert(!encoded_with({UINT64_MAX, 2}, 1, 1));
	ck_assert(!encoded_with({1, 1, 1, 1}, 4, 3));
	ck_assert(encoded_with({1, 1, 1, 1}, 4, 4));

	// FI_ATOMIC_READ carries no operand: one byte after the segments is
	// too many.
	const BuiltRequest rd = build_request({Kind::Fetch, FI_ATOMIC_READ, FI_UINT16, {9}});
	size_t rlen = 0;
	const std::vector<uint8_t> rbuf = encode_request(rd, rlen);
	ck_assert(decodes_request(rbuf.data(), rlen));
	ck_assert(!decodes_request(rbuf.data(), rlen + 2));
	// Another type decoded as a request.
	bad = good;
	bad[0] = uint8_t(MsgType::AtomicResponse);
	ck_assert(!decodes_request(bad.data(), len));
}
END_TEST

START_TEST(atomic_response_round_trip)
{
	uint8_t data[24];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = uint8_t(0x30 + i);
	struct {
		AtomicStatus status;
		size_t bytes;
	} const cases[] = {
		{AtomicStatus::Ok, sizeof data}, // Fetch, Compare
		{AtomicStatus::Ok, 0},           // Plain
		{AtomicStatus::AccessError, 0},
		{AtomicStatus::Unsupported, 0},
	};
	for (const auto &c : cases) {
		uint8_t buf[kRdmHeaderBytes + sizeof data + 8];
		memset(buf, 0xee, sizeof buf);
		const size_t len = encode_atomic_response(buf, 0xfeedf00d, c.status, data, c.bytes);
		ck_assert_uint_eq(len, kRdmHeaderBytes + c.bytes);
		ck_assert_uint_eq(buf[len], 0xee);
		ck_assert_uint_eq(buf[0], 11);
		ck_assert_uint_eq(buf[3], uint8_t(c.status));
		ck_assert_uint_eq(buf[4], 0x0d);
		ck_assert_uint_eq(buf[24], c.bytes);
		RdmHeader h;
		AtomicResponse out;
		ck_assert(decode_atomic_response(buf, len, h, out));
		ck_assert(h.type == MsgType::AtomicResponse);
		ck_assert_uint_eq(h.msg_id, 0xfeedf00d);
		ck_assert(out.status == c.status);
		ck_assert_uint_eq(out.bytes, c.bytes);
		if (c.bytes) {
			ck_assert_ptr_eq(out.data, buf + kRdmHeaderBytes);
			ck_assert_int_eq(memcmp(out.data, data, c.bytes), 0);
		} else {
			ck_assert_ptr_null(out.data);
		}
		ck_assert(!decode_atomic_response(buf, len + 1, h, out));
		if (len > kRdmHeaderBytes)
			ck_assert(!decode_atomic_response(buf, len - 1, h, out));
	}
	// The data left for the caller to write.
	uint8_t buf[kRdmHeaderBytes + 16];
	memset(buf, 0xee, sizeof buf);
	ck_assert_uint_eq(encode_atomic_response(buf, 3, AtomicStatus::Ok, nullptr, 16),
			  sizeof buf);
	ck_assert_uint_eq(buf[kRdmHeaderBytes], 0xee);
	RdmHeader h;
	AtomicResponse out;
	ck_assert(decode_atomic_response(buf, sizeof buf, h, out));
	ck_assert_uint_eq(out.bytes, 16);
}
END_TEST

START_TEST(malformed_atomic_responses_refused)
{
	const uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	uint8_t good[kRdmHeaderBytes + sizeof data];
	const size_t len = encode_atomic_response(good, 9, AtomicStatus::Ok, data, sizeof data);
	RdmHeader h;
	AtomicResponse out;
	ck_assert(decode_atomic_response(good, len, h, out));
	uint8_t bad[sizeof good];
	auto refused = [&](size_t at, uint8_t value) {
		memcpy(bad, good, sizeof bad);
		bad[at] = value;
		return !decode_atomic_response(bad, len, h, out);
	};
	// Data with a status other than Ok; an unknown status.
	ck_assert(refused(3, uint8_t(AtomicStatus::AccessError)));
	ck_assert(refused(3, uint8_t(AtomicStatus::Unsupported)));
	ck_assert(refused(3, kAtomicStatusMax + 1));
	// Without data, a failure is fine, an unknown status not.
	uint8_t empty[kRdmHeaderBytes];
	encode_atomic_response(empty, 9, AtomicStatus::Unsupported, nullptr, 0);
	ck_assert(decode_atomic_response(empty, sizeof empty, h, out));
	empty[3] = kAtomicStatusMax + 1;
	ck_assert(!decode_atomic_response(empty, sizeof empty, h, out));
	// A length other than the data's; a msg_id of 0; flags; a tag.
	ck_assert(refused(24, sizeof data - 1));
	ck_assert(refused(24, sizeof data + 1));
	ck_assert(refused(4, 0));
	ck_assert(refused(2, kFlagCqData));
	ck_assert(refused(2, kFlagLastPiece));
	ck_assert(refused(8, 1));
	ck_assert(!decode_atomic_response(good, len - 1, h, out));
	ck_assert(!decode_atomic_response(good, kRdmHeaderBytes - 1, h, out));
	// Not a response.
	ck_assert(refused(0, uint8_t(MsgType::AtomicRequest)));
	ck_assert(refused(0, uint8_t(MsgType::DeliveryAck)));
}
END_TEST

// Types 8 and 9 belong to another protocol change: not defined here.
START_TEST(undefined_types_refused)
{
	uint8_t buf[kRdmHeaderBytes];
	encode_delivery_ack(buf, 5);
	ck_assert(decodes(buf, sizeof buf));
	for (uint8_t t :
	     {uint8_t(0), uint8_t(8), uint8_t(9), uint8_t(kMsgTypeMax + 1), uint8_t(0xff)}) {
		buf[0] = t;
		ck_assert_msg(!decodes(buf, sizeof buf), "type %u", t);
	}
	ck_assert_uint_eq(kMsgTypeMax, 19);
}
END_TEST

// KeyTable: a header (msg_id 0, length 0) and a KeyTableRef; anything else,
// or an invalid bucket count, is refused.
START_TEST(key_table_message)
{
	uint8_t buf[kKeyTableMsgBytes + 8];
	encode_key_table(buf, {0x00007f0000001000ULL, 0xabcdef01, 256});
	ck_assert_uint_eq(buf[0], uint8_t(MsgType::KeyTable));
	KeyTableRef t;
	ck_assert(decode_key_table(buf, kKeyTableMsgBytes, t));
	ck_assert_uint_eq(t.addr, 0x00007f0000001000ULL);
	ck_assert_uint_eq(t.rkey, 0xabcdef01);
	ck_assert_uint_eq(t.buckets, 256);
	ck_assert(!decode_key_table(buf, kKeyTableMsgBytes - 1, t));
	ck_assert(!decode_key_table(buf, kKeyTableMsgBytes + 1, t));
	uint8_t bad[kKeyTableMsgBytes];
	memcpy(bad, buf, sizeof bad);
	bad[4] = 1; // msg_id
	ck_assert(!decode_key_table(bad, sizeof bad, t));
	memcpy(bad, buf, sizeof bad);
	bad[24] = 1; // length
	ck_assert(!decode_key_table(bad, sizeof bad, t));
	memcpy(bad, buf, sizeof bad);
	bad[kRdmHeaderBytes + 12] = 3; // buckets 3
	bad[kRdmHeaderBytes + 13] = 0;
	ck_assert(!decode_key_table(bad, sizeof bad, t));
	encode_key_table(bad, {1, 2, 0});
	ck_assert(!decode_key_table(bad, sizeof bad, t));
}
END_TEST

// Flow: a bare header with status Pause or Resume; any other status, an id,
// a length or a body is refused.
START_TEST(flow_message)
{
	for (FlowStatus st : {FlowStatus::Pause, FlowStatus::Resume}) {
		uint8_t buf[kRdmHeaderBytes + 1] = {};
		encode_flow(buf, st);
		RdmHeader h;
		ck_assert(decode_header(buf, kRdmHeaderBytes, h));
		ck_assert(h.type == MsgType::Flow);
		ck_assert_uint_eq(h.status, uint8_t(st));
		ck_assert(!decode_header(buf, kRdmHeaderBytes + 1, h)); // a body
		uint8_t bad[kRdmHeaderBytes];
		for (int k = 0; k < 5; k++) {
			memcpy(bad, buf, sizeof bad);
			switch (k) {
			case 0: bad[3] = 0; break;            // no status
			case 1: bad[3] = 3; break;            // unknown status
			case 2: bad[4] = 1; break;            // an id
			case 3: bad[24] = 1; break;           // a length
			case 4: bad[2] = kFlagCqData; break;  // a flag
			}
			ck_assert_msg(!decode_header(bad, sizeof bad, h), "mutation %d of status %u", k,
				      unsigned(st));
		}
	}
}
END_TEST

// Close: a bare header whose length is the count (any value, 0 too); a
// status, an id, a flag or a body is refused.
START_TEST(close_message)
{
	for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(0x123456789aULL), UINT64_MAX}) {
		uint8_t buf[kRdmHeaderBytes + 1] = {};
		encode_close(buf, n);
		RdmHeader h;
		ck_assert(decode_header(buf, kRdmHeaderBytes, h));
		ck_assert(h.type == MsgType::Close);
		ck_assert_uint_eq(buf[0], 18);
		ck_assert_uint_eq(h.length, n);
		ck_assert_uint_eq(buf[24], uint8_t(n)); // LE length, low byte
		ck_assert(!decode_header(buf, kRdmHeaderBytes + 1, h)); // a body
		uint8_t bad[kRdmHeaderBytes];
		for (int k = 0; k < 4; k++) {
			memcpy(bad, buf, sizeof bad);
			switch (k) {
			case 0: bad[3] = 1; break;           // a status
			case 1: bad[4] = 1; break;           // an id
			case 2: bad[2] = kFlagCqData; break; // a flag
			case 3: bad[8] = 1; break;           // a tag
			}
			ck_assert_msg(!decode_header(bad, sizeof bad, h), "mutation %d of count %llu", k,
				      static_cast<unsigned long long>(n));
		}
	}
}
END_TEST

// Idle: a bare header with one of four statuses; only a Query carries a
// length (the asker's quiet milliseconds, any value). An unknown status, a
// length on an answer, an id, a flag, a tag or a body is refused.
START_TEST(idle_message)
{
	for (IdleStatus st : {IdleStatus::Query, IdleStatus::Agree, IdleStatus::Refuse, IdleStatus::Resume}) {
		uint8_t buf[kRdmHeaderBytes + 1] = {};
		const uint64_t ms = st == IdleStatus::Query ? 0x1234567ULL : 0;
		encode_idle(buf, st, 0x1234567ULL);
		RdmHeader h;
		ck_assert(decode_header(buf, kRdmHeaderBytes, h));
		ck_assert(h.type == MsgType::Idle);
		ck_assert_uint_eq(buf[0], 19);
		ck_assert_uint_eq(h.status, uint8_t(st));
		ck_assert_uint_eq(h.length, ms); // an answer's quiet time is not sent
		ck_assert(!decode_header(buf, kRdmHeaderBytes + 1, h)); // a body
		uint8_t bad[kRdmHeaderBytes];
		for (int k = 0; k < 6; k++) {
			memcpy(bad, buf, sizeof bad);
			switch (k) {
			case 0: bad[3] = 0; break;            // no status
			case 1: bad[3] = 5; break;            // unknown status
			case 2: bad[4] = 1; break;            // an id
			case 3: bad[2] = kFlagCqData; break;  // a flag
			case 4: bad[8] = 1; break;            // a tag
			case 5: bad[24] ^= 1; break;          // a length on an answer (a Query's changes)
			}
			const bool refused = !decode_header(bad, sizeof bad, h);
			const bool expect = !(k == 5 && st == IdleStatus::Query);
			ck_assert_msg(refused == expect, "mutation %d of status %u", k, unsigned(st));
		}
	}
}
END_TEST

// close_settle: the messages the peer counted beyond those already
// completed are the first outstanding ones; every request up to the last of
// them was executed; counting more than were posted is malformed.
START_TEST(close_settle_counts)
{
	// Outstanding: write, message, write, message, message, read.
	const bool msgs[] = {false, true, false, true, true, false};
	auto is_msg = [&](size_t i) { return msgs[i]; };
	struct Case {
		uint64_t received, retired;
		bool malformed;
		ptrdiff_t through;
	} cases[] = {
		{10, 10, false, -1}, // none of the outstanding
		{9, 10, false, -1},  // counted before its last receive was read
		{0, 0, false, -1},
		{11, 10, false, 1},  // the first message: the write before it too
		{12, 10, false, 3},
		{13, 10, false, 4},  // all three; the read after them is not known
		{14, 10, true, -1},  // one more than were posted
		{UINT64_MAX, 0, true, -1},
	};
	for (const Case &c : cases) {
		const CloseSettle r = close_settle(c.received, c.retired, 6, is_msg);
		ck_assert_msg(r.malformed == c.malformed && (c.malformed || r.through == c.through),
			      "received %llu retired %llu: malformed %d through %td",
			      static_cast<unsigned long long>(c.received), static_cast<unsigned long long>(c.retired),
			      r.malformed, r.through);
	}
	// Nothing outstanding: any count beyond the retired ones is malformed.
	ck_assert(!close_settle(5, 5, 0, is_msg).malformed);
	ck_assert(close_settle(6, 5, 0, is_msg).malformed);
	// Writes alone outstanding: a count beyond the retired is malformed.
	ck_assert(close_settle(1, 0, 1, is_msg).malformed);
}
END_TEST

START_TEST(commit_request_round_trip)
{
	CommitRange ranges[kMaxCommitRanges];
	for (size_t i = 0; i < kMaxCommitRanges; i++)
		ranges[i] = {0x7f0000001000ULL + i * 0x10000, 1 + i * 4096, 0x1234u + i};
	ranges[1].key = UINT64_MAX;
	for (size_t n : {size_t(1), size_t(3), kMaxCommitRanges}) {
		uint8_t buf[kCommitRequestMax + 8];
		RdmHeader in;
		in.msg_id = 0xabcdef01u;
		if (n == 3) {
			in.flags = kFlagCqData;
			in.cq_data = 0xfedcba9876543210ULL;
		}
		const size_t len = encode_commit_request(buf, in, ranges, n);
		ck_assert_uint_eq(len, kRdmHeaderBytes + 8 + 24 * n);
		ck_assert_uint_le(len, kCommitRequestMax);
		ck_assert_uint_eq(buf[0], uint8_t(MsgType::CommitRequest));
		ck_assert_uint_eq(buf[kRdmHeaderBytes], n);
		ck_assert_uint_eq(buf[kRdmHeaderBytes + 8], 0x00); // LE addr, low byte
		ck_assert_uint_eq(buf[kRdmHeaderBytes + 9], 0x10);
		RdmHeader h;
		CommitRange got[kMaxCommitRanges];
		size_t count = 99;
		ck_assert_msg(decode_commit_request(buf, len, h, got, count), "n %zu", n);
		ck_assert_uint_eq(h.msg_id, 0xabcdef01u);
		ck_assert_uint_eq(h.flags, in.flags);
		ck_assert_uint_eq(h.cq_data, in.cq_data);
		uint64_t sum = 0;
		for (size_t i = 0; i < n; i++)
			sum += ranges[i].len;
		ck_assert_uint_eq(h.length, sum);
		ck_assert_uint_eq(count, n);
		for (size_t i = 0; i < n; i++) {
			ck_assert_uint_eq(got[i].addr, ranges[i].addr);
			ck_assert_uint_eq(got[i].len, ranges[i].len);
			ck_assert_uint_eq(got[i].key, ranges[i].key);
		}
		ck_assert(!decode_commit_request(buf, len - 1, h, got, count));
		ck_assert(!decode_commit_request(buf, len + 1, h, got, count));
	}
	// The answer: a bare header with a status.
	for (CommitStatus st : {CommitStatus::Ok, CommitStatus::AccessError,
				CommitStatus::PersistFailed, CommitStatus::Malformed}) {
		uint8_t buf[kRdmHeaderBytes];
		encode_commit_answer(buf, 77, st);
		RdmHeader h;
		ck_assert(decode_header(buf, sizeof buf, h));
		ck_assert(h.type == MsgType::CommitAnswer);
		ck_assert_uint_eq(h.msg_id, 77);
		ck_assert_uint_eq(h.status, uint8_t(st));
	}
}
END_TEST

START_TEST(malformed_commits_refused)
{
	const CommitRange ranges[2] = {{0x1000, 64, 7}, {0x9000, 8, 8}};
	uint8_t good[kCommitRequestMax];
	RdmHeader in;
	in.msg_id = 5;
	const size_t len = encode_commit_request(good, in, ranges, 2);
	RdmHeader h;
	CommitRange out[kMaxCommitRanges];
	size_t n;
	ck_assert(decode_commit_request(good, len, h, out, n));
	uint8_t bad[kCommitRequestMax + 24];
	auto refused = [&](size_t blen) { return !decode_commit_request(bad, blen, h, out, n); };
	auto reset = [&] { memcpy(bad, good, len); };
	reset();
	le::put32(bad + 4, 0); // msg_id 0
	ck_assert(refused(len));
	reset();
	bad[3] = 1; // a status
	ck_assert(refused(len));
	reset();
	bad[2] = kFlagDeliveryComplete; // a flag it may not carry
	ck_assert(refused(len));
	reset();
	le::put64(bad + 16, 9); // CQ data without its flag
	ck_assert(refused(len));
	reset();
	bad[kRdmHeaderBytes] = 0; // no ranges
	ck_assert(refused(len));
	reset();
	bad[kRdmHeaderBytes] = kMaxCommitRanges + 1;
	ck_assert(refused(len));
	reset();
	bad[kRdmHeaderBytes] = 3; // more ranges than follow
	ck_assert(refused(len));
	reset();
	bad[kRdmHeaderBytes + 5] = 1; // reserved
	ck_assert(refused(len));
	reset();
	le::put64(bad + kRdmHeaderBytes + 8 + 8, 0); // an empty range
	ck_assert(refused(len));
	reset();
	le::put64(bad + 24, 71); // length disagrees with the ranges
	ck_assert(refused(len));
	reset();
	le::put64(bad + 24, 0); // length 0
	ck_assert(refused(len));
	// Lengths that overflow when added.
	const CommitRange huge[2] = {{0, UINT64_MAX, 1}, {0, 2, 1}};
	const size_t hlen = encode_commit_request(bad, in, huge, 2);
	ck_assert(refused(hlen));
	// Not a request.
	encode_commit_answer(bad, 5, CommitStatus::Ok);
	ck_assert(refused(kRdmHeaderBytes));
	// An answer with an unknown status, a body, or no msg_id.
	encode_commit_answer(bad, 5, CommitStatus::Ok);
	bad[3] = kCommitStatusMax + 1;
	ck_assert(!decode_header(bad, kRdmHeaderBytes, h));
	encode_commit_answer(bad, 5, CommitStatus::Ok);
	ck_assert(!decode_header(bad, kRdmHeaderBytes + 8, h));
	encode_commit_answer(bad, 0, CommitStatus::Ok);
	ck_assert(!decode_header(bad, kRdmHeaderBytes, h));
}
END_TEST

// KeyRequest and KeyAnswer: round trips of every status, and each field
// decode checks refused.
START_TEST(key_request_and_answer_round_trip)
{
	uint8_t req[kKeyRequestBytes];
	encode_key_request(req, 41, 0x8000000000000007ULL, 2);
	RdmHeader h;
	uint64_t key = 0;
	uint8_t access = 0;
	ck_assert(decode_key_request(req, sizeof req, h, key, access));
	ck_assert(h.type == MsgType::KeyRequest);
	ck_assert_uint_eq(h.msg_id, 41);
	ck_assert_uint_eq(key, 0x8000000000000007ULL);
	ck_assert_uint_eq(access, 2);

	KeyAnswer a;
	a.entry = {0x8000000000000007ULL, 0x7f0000001000ULL, 0x7f0000001000ULL, 1 << 20, 0x1234, 3};
	uint8_t ans[kKeyAnswerBytes];
	encode_key_answer(ans, 41, a);
	KeyAnswer out;
	ck_assert(decode_key_answer(ans, sizeof ans, h, out));
	ck_assert(h.type == MsgType::KeyAnswer && h.msg_id == 41);
	const vrma::keys::KeyEntry &o = out.entry;
	ck_assert(out.status == KeyStatus::Ok && o.key == a.entry.key && o.va == a.entry.va &&
		  o.start == a.entry.start && o.len == a.entry.len && o.rkey == 0x1234 && o.access == 3);
	for (KeyStatus st : {KeyStatus::Absent, KeyStatus::Failed}) {
		KeyAnswer b = a;
		b.status = st;
		encode_key_answer(ans, 9, b);
		ck_assert(decode_key_answer(ans, sizeof ans, h, out));
		// Only the key travels with a refusal.
		ck_assert(out.status == st && out.entry.key == a.entry.key && out.entry.va == 0 &&
			  out.entry.len == 0 && out.entry.rkey == 0 && out.entry.access == 0);
	}
	// A region that lacks the right asked for: its entry, unregistered.
	KeyAnswer c = a;
	c.entry.rkey = 0;
	c.entry.access = 1 | vrma::keys::kAccessUnregistered;
	encode_key_answer(ans, 9, c);
	ck_assert(decode_key_answer(ans, sizeof ans, h, out));
	ck_assert(out.status == KeyStatus::Ok && out.entry.rkey == 0 &&
		  out.entry.access == (1 | vrma::keys::kAccessUnregistered));
}
END_TEST

START_TEST(malformed_key_messages_refused)
{
	uint8_t good[kKeyRequestBytes];
	encode_key_request(good, 41, 7, 3);
	uint8_t bad[kKeyAnswerBytes + 8];
	RdmHeader h;
	uint64_t key;
	uint8_t access;
	auto req_refused = [&](size_t len) { return !decode_key_request(bad, len, h, key, access); };
	auto reset = [&](const uint8_t *src, size_t len) { memcpy(bad, src, len); };
	reset(good, sizeof good);
	ck_assert(!req_refused(sizeof good));
	ck_assert(req_refused(sizeof good - 1)); // short
	ck_assert(req_refused(sizeof good + 1)); // long
	le::put32(bad + 4, 0); // msg_id 0
	ck_assert(req_refused(sizeof good));
	reset(good, sizeof good);
	le::put64(bad + 24, 8); // a length
	ck_assert(req_refused(sizeof good));
	reset(good, sizeof good);
	bad[3] = 1; // a status
	ck_assert(req_refused(sizeof good));
	reset(good, sizeof good);
	bad[2] = kFlagCqData; // a flag
	ck_assert(req_refused(sizeof good));
	reset(good, sizeof good);
	bad[kRdmHeaderBytes + 8] = 0; // no access
	ck_assert(req_refused(sizeof good));
	reset(good, sizeof good);
	bad[kRdmHeaderBytes + 8] = vrma::keys::kAccessUnregistered; // not a right
	ck_assert(req_refused(sizeof good));
	reset(good, sizeof good);
	bad[kRdmHeaderBytes + 15] = 1; // reserved
	ck_assert(req_refused(sizeof good));

	KeyAnswer a;
	a.entry = {7, 0x1000, 0, 4096, 5, 1};
	uint8_t ans[kKeyAnswerBytes];
	encode_key_answer(ans, 41, a);
	KeyAnswer out;
	auto ans_refused = [&](size_t len) { return !decode_key_answer(bad, len, h, out); };
	reset(ans, sizeof ans);
	ck_assert(!ans_refused(sizeof ans));
	ck_assert(ans_refused(sizeof ans - 1));
	ck_assert(ans_refused(sizeof ans + 1));
	le::put32(bad + 4, 0); // msg_id 0
	ck_assert(ans_refused(sizeof ans));
	reset(ans, sizeof ans);
	bad[3] = kKeyStatusMax + 1; // unknown status
	ck_assert(ans_refused(sizeof ans));
	reset(ans, sizeof ans);
	le::put64(bad + kRdmHeaderBytes + 24, 0); // an empty region
	ck_assert(ans_refused(sizeof ans));
	reset(ans, sizeof ans);
	le::put64(bad + kRdmHeaderBytes + 8, UINT64_MAX - 100); // wraps the address space
	ck_assert(ans_refused(sizeof ans));
	reset(ans, sizeof ans);
	le::put64(bad + kRdmHeaderBytes + 16, UINT64_MAX); // start wraps
	ck_assert(ans_refused(sizeof ans));
	reset(ans, sizeof ans);
	bad[kRdmHeaderBytes + 36] = 0; // no access
	ck_assert(ans_refused(sizeof ans));
	reset(ans, sizeof ans);
	bad[kRdmHeaderBytes + 36] = vrma::keys::kAccessUnregistered; // no right
	ck_assert(ans_refused(sizeof ans));
	reset(ans, sizeof ans);
	bad[kRdmHeaderBytes + 36] = 1 | vrma::keys::kAccessUnregistered; // unregistered, with a device key
	ck_assert(ans_refused(sizeof ans));
	reset(ans, sizeof ans);
	bad[kRdmHeaderBytes + 36] = 1 << 5; // an unknown bit
	ck_assert(ans_refused(sizeof ans));
	reset(ans, sizeof ans);
	bad[kRdmHeaderBytes + 38] = 1; // reserved
	ck_assert(ans_refused(sizeof ans));
	// A refusal that carries an entry.
	a.status = KeyStatus::Absent;
	encode_key_answer(ans, 41, a);
	reset(ans, sizeof ans);
	ck_assert(!ans_refused(sizeof ans));
	le::put32(bad + kRdmHeaderBytes + 32, 5);
	ck_assert(ans_refused(sizeof ans));
	// One type is not the other.
	reset(good, sizeof good);
	ck_assert(!decode_key_answer(bad, sizeof good, h, out));
	reset(ans, sizeof ans);
	ck_assert(!decode_key_request(bad, sizeof ans, h, key, access));
}
END_TEST

// --- bounds on what a peer names ----------------------------------------------

namespace {

// A request of one segment of `count` elements whose header's length says
// the same, followed by `array_bytes` bytes of arrays (0x5a), as a hostile
// peer writes it: the encoder is not asked to agree.
std::vector<uint8_t> forged_request(Kind kind, int op, int datatype, uint64_t count,
				    size_t array_bytes)
{
	AtomicRequest r;
	r.op = uint8_t(op);
	r.datatype = uint8_t(datatype);
	r.kind = kind;
	r.nseg = 1;
	r.segs[0] = {0x7f0000001000ULL, count, 7};
	std::vector<uint8_t> buf(atomic_request_head_bytes(1) + array_bytes, 0x5a);
	RdmHeader h = header(MsgType::AtomicRequest, 0, count);
	AtomicRequest head_only = r; // arrays left as they are
	(void)encode_atomic_request(buf.data(), h, head_only);
	return buf;
}

bool forged_decodes(Kind kind, int op, int datatype, uint64_t count, size_t array_bytes,
		    AtomicRequest *out = nullptr)
{
	const std::vector<uint8_t> buf = forged_request(kind, op, datatype, count, array_bytes);
	RdmHeader h;
	AtomicRequest r;
	const bool ok = decode_atomic_request(buf.data(), buf.size(), h, r);
	if (out)
		*out = r;
	return ok;
}

} // namespace

START_TEST(checked_products)
{
	size_t out = 1;
	ck_assert(checked_mul(0, 16, out));
	ck_assert_uint_eq(out, 0);
	ck_assert(checked_mul(3, 8, out));
	ck_assert_uint_eq(out, 24);
	ck_assert(checked_mul(UINT64_MAX, 1, out));
	ck_assert_uint_eq(out, SIZE_MAX);
	ck_assert(checked_mul(1, UINT64_MAX, out));
	ck_assert_uint_eq(out, SIZE_MAX);
	// The product of item 1 of issue 26: 2^61 8-byte elements wrap to 0.
	ck_assert_uint_eq((uint64_t(1) << 61) * 8, 0);
	ck_assert(!checked_mul(uint64_t(1) << 61, 8, out));
	ck_assert(!checked_mul(uint64_t(1) << 60, 16, out));
	ck_assert(!checked_mul((uint64_t(1) << 60) + 1, 16, out)); // wraps to 16
	ck_assert(!checked_mul(UINT64_MAX, 2, out));
	ck_assert(!checked_mul(UINT64_MAX / 8 + 1, 8, out));
	ck_assert(checked_mul(UINT64_MAX / 8, 8, out));
	ck_assert_uint_eq(out, UINT64_MAX / 8 * 8);
}
END_TEST

// Issue 26, item 1: FI_ATOMIC_READ carries no array, so the message's
// length bounded nothing and a count of 2^61 (times 8 bytes: 0) was taken.
// Every op kind's count is bounded by kAtomicDataMax bytes, whatever
// arrays follow.
START_TEST(atomic_read_count_bounded)
{
	const uint64_t wraps = uint64_t(1) << 61; // * 8 == 0 (mod 2^64)
	ck_assert(!forged_decodes(Kind::Fetch, FI_ATOMIC_READ, FI_UINT64, wraps, 0));
	ck_assert(!forged_decodes(Kind::Fetch, FI_ATOMIC_READ, FI_UINT64, UINT64_MAX, 0));
	ck_assert(!forged_decodes(Kind::Fetch, FI_ATOMIC_READ, FI_INT8, UINT64_MAX, 0));
	ck_assert(!forged_decodes(Kind::Fetch, FI_ATOMIC_READ, FI_LONG_DOUBLE_COMPLEX,
				  uint64_t(1) << 60, 0)); // * 32 == 0
	// Up to kAtomicDataMax bytes of old values, not one element more.
	AtomicRequest r;
	ck_assert(forged_decodes(Kind::Fetch, FI_ATOMIC_READ, FI_UINT64, kAtomicDataMax / 8, 0, &r));
	ck_assert_uint_eq(r.data_bytes, kAtomicDataMax);
	ck_assert_uint_eq(atomic_result_bytes(r), kAtomicDataMax);
	ck_assert_uint_eq(r.operand_bytes, 0);
	ck_assert(!forged_decodes(Kind::Fetch, FI_ATOMIC_READ, FI_UINT64, kAtomicDataMax / 8 + 1, 0));
	ck_assert(!forged_decodes(Kind::Fetch, FI_ATOMIC_READ, FI_UINT8, kAtomicDataMax + 1, 0));
	ck_assert(forged_decodes(Kind::Fetch, FI_ATOMIC_READ, FI_UINT16, 3, 0, &r));
	ck_assert_uint_eq(r.data_bytes, 6);
	ck_assert_uint_eq(atomic_result_bytes(r), 6);

	// The ops with arrays: a count whose arrays' size wraps to what follows.
	ck_assert(!forged_decodes(Kind::Plain, FI_SUM, FI_UINT64, wraps + 1, 8));
	ck_assert(!forged_decodes(Kind::Fetch, FI_SUM, FI_UINT64, wraps + 2, 16));
	ck_assert(!forged_decodes(Kind::Compare, FI_CSWAP, FI_UINT64, (uint64_t(1) << 60) + 1, 16));
	ck_assert(!forged_decodes(Kind::Compare, FI_MSWAP, FI_UINT128, (uint64_t(1) << 59) + 1, 32));
	// The bound holds with the arrays present too (a peer with an eager
	// size past kEagerSizeMax does not exist).
	ck_assert(!forged_decodes(Kind::Plain, FI_ATOMIC_WRITE, FI_UINT8, kAtomicDataMax + 1,
				  kAtomicDataMax + 1));
	ck_assert(forged_decodes(Kind::Plain, FI_ATOMIC_WRITE, FI_UINT8, kAtomicDataMax,
				 kAtomicDataMax, &r));
	ck_assert_uint_eq(atomic_result_bytes(r), 0); // Plain: no answer data
	ck_assert(forged_decodes(Kind::Compare, FI_CSWAP, FI_UINT32, 5, 40, &r));
	ck_assert_uint_eq(r.data_bytes, 20);
	ck_assert_uint_eq(r.operand_bytes, 20);
	ck_assert_uint_eq(r.compare_bytes, 20);
	ck_assert_uint_eq(atomic_result_bytes(r), 20);

	// Op, datatype and kind outside the known enums.
	ck_assert(!forged_decodes(Kind::Fetch, FI_ATOMIC_OP_LAST, FI_UINT64, 1, 8));
	ck_assert(!forged_decodes(Kind::Fetch, 0xff, FI_UINT64, 1, 8));
	ck_assert(!forged_decodes(Kind::Fetch, FI_ATOMIC_READ, FI_UINT128 + 1, 1, 0));
	ck_assert(!forged_decodes(Kind::Fetch, FI_ATOMIC_READ, 0xff, 1, 0));
	ck_assert(!forged_decodes(Kind(3), FI_ATOMIC_READ, FI_UINT64, 1, 0));
	ck_assert(!forged_decodes(Kind(0xff), FI_SUM, FI_UINT64, 1, 8));
}
END_TEST

namespace {

// One well-formed message of each type that carries a body, each in a
// vector of exactly its size.
std::vector<std::vector<uint8_t>> body_samples()
{
	std::vector<std::vector<uint8_t>> msgs;
	auto keep = [&](const uint8_t *p, size_t len) { msgs.emplace_back(p, p + len); };
	uint8_t buf[kCommitRequestMax + kRmaEventMsgMax];
	const RndvSegment segs[3] = {{0x1000, 10, 1}, {0x2000, 20, 2}, {0x9000, 4096, 3}};
	keep(buf, encode_rndv_request(buf, header(MsgType::RndvRequestTagged, 0, 4126), segs, 3));
	const uint64_t ev_keys[3] = {5, 6, 7};
	RdmHeader ev = header(MsgType::RmaEvent, 0, 8);
	ev.msg_id = 0;
	ev.status = uint8_t(RmaKind::Write);
	keep(buf, encode_rma_event(buf, ev, ev_keys, 3));
	const CommitRange ranges[2] = {{0x1000, 8, 1}, {0x3000, 8, 2}};
	RdmHeader ch;
	ch.msg_id = 9;
	keep(buf, encode_commit_request(buf, ch, ranges, 2));
	encode_key_request(buf, 3, 0x8000000000000001ULL, 1);
	keep(buf, kKeyRequestBytes);
	KeyAnswer ka;
	ka.entry = {0x8000000000000001ULL, 0x7f0000001000ULL, 0, 4096, 0x99, 1};
	encode_key_answer(buf, 3, ka);
	keep(buf, kKeyAnswerBytes);
	const uint8_t old[16] = {1, 2, 3};
	keep(buf, encode_atomic_response(buf, 4, AtomicStatus::Ok, old, sizeof old));
	for (const AtomicCase &c : {AtomicCase{Kind::Fetch, FI_ATOMIC_READ, FI_UINT64, {2, 1}},
				    AtomicCase{Kind::Compare, FI_CSWAP, FI_UINT32, {3}},
				    AtomicCase{Kind::Plain, FI_SUM, FI_DOUBLE, {1, 1, 2}},
				    AtomicCase{Kind::Fetch, FI_BXOR, FI_UINT8, {5, 7}}}) {
		const BuiltRequest b = build_request(c);
		size_t len = 0;
		const std::vector<uint8_t> req = encode_request(b, len);
		keep(req.data(), len);
	}
	return msgs;
}

// Sums segment lengths as the decoders must: false past 2^64.
template <typename Seg> bool lengths_add_up(const Seg *segs, size_t n, uint64_t want)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++)
		if (!segs[i].len || __builtin_add_overflow(sum, segs[i].len, &sum))
			return false;
	return sum == want;
}

// p and n lie inside [buf, buf + len).
bool inside(const uint8_t *p, size_t n, const uint8_t *buf, size_t len)
{
	return !n || (p >= buf && p <= buf + len && n <= size_t(buf + len - p));
}

// Decodes m (header, then its type's body) as the RDM receive path does and,
// when it is accepted, checks what the decoder promises its callers: counts
// within their limits, lengths that add up to the header's, arrays inside
// the message. Returns whether it was accepted.
bool decode_checked(const std::vector<uint8_t> &m, const char *label)
{
	const uint8_t *b = m.data();
	const size_t n = m.size();
	RdmHeader h;
	if (!decode_header(b, n, h))
		return false;
	size_t count = 0;
	switch (h.type) {
	case MsgType::RndvRequest:
	case MsgType::RndvRequestTagged: {
		RndvSegment s[kMaxRndvSegments];
		if (!decode_rndv_request(b, n, h, s, count))
			return false;
		ck_assert_msg(count >= 1 && count <= kMaxRndvSegments && n == rndv_msg_bytes(count) &&
				      lengths_add_up(s, count, h.length),
			      "%s: a rendezvous request of %zu segments accepted", label, count);
		return true;
	}
	case MsgType::RmaEvent: {
		uint64_t k[kMaxRmaEventKeys];
		if (!decode_rma_event(b, n, h, k, count))
			return false;
		ck_assert_msg(count <= kMaxRmaEventKeys && n == kRdmHeaderBytes + 8 + count * 8,
			      "%s: an RMA event of %zu keys accepted in %zu bytes", label, count, n);
		return true;
	}
	case MsgType::CommitRequest: {
		CommitRange c[kMaxCommitRanges];
		if (!decode_commit_request(b, n, h, c, count))
			return false;
		ck_assert_msg(count >= 1 && count <= kMaxCommitRanges && lengths_add_up(c, count, h.length),
			      "%s: a commit request of %zu ranges accepted", label, count);
		return true;
	}
	case MsgType::KeyRequest: {
		uint64_t key = 0;
		uint8_t access = 0;
		if (!decode_key_request(b, n, h, key, access))
			return false;
		ck_assert_msg(access && n == kKeyRequestBytes, "%s: a key request accepted", label);
		return true;
	}
	case MsgType::KeyAnswer: {
		KeyAnswer a;
		if (!decode_key_answer(b, n, h, a))
			return false;
		ck_assert_msg(n == kKeyAnswerBytes, "%s: a key answer of %zu bytes accepted", label, n);
		return true;
	}
	case MsgType::KeyTable: {
		KeyTableRef t;
		if (!decode_key_table(b, n, t))
			return false;
		ck_assert_msg(valid_key_table_buckets(t.buckets), "%s: %u key table buckets accepted", label,
			      t.buckets);
		return true;
	}
	case MsgType::AtomicRequest: {
		AtomicRequest r;
		if (!decode_atomic_request(b, n, h, r))
			return false;
		uint64_t total = 0;
		bool sums = r.nseg >= 1 && r.nseg <= kMaxAtomicSegments;
		for (size_t i = 0; sums && i < r.nseg; i++)
			sums = !__builtin_add_overflow(total, r.segs[i].count, &total);
		ck_assert_msg(sums && total == h.length && r.data_bytes <= kAtomicDataMax &&
				      inside(r.operand, r.operand_bytes, b, n) &&
				      inside(r.compare, r.compare_bytes, b, n) && r.operand_bytes <= r.data_bytes &&
				      r.compare_bytes <= r.data_bytes,
			      "%s: an atomic request of %zu segments, %zu data bytes accepted", label, r.nseg,
			      r.data_bytes);
		return true;
	}
	case MsgType::AtomicResponse: {
		AtomicResponse resp;
		if (!decode_atomic_response(b, n, h, resp))
			return false;
		ck_assert_msg(inside(resp.data, resp.bytes, b, n) && resp.bytes <= kAtomicDataMax,
			      "%s: an atomic response of %zu bytes accepted in %zu", label, resp.bytes, n);
		return true;
	}
	case MsgType::Eager:
	case MsgType::EagerTagged:
		// The piece's payload follows the header and fits the message.
		ck_assert_msg(n - kRdmHeaderBytes <= h.length, "%s: an eager piece of %zu bytes for %llu",
			      label, n - kRdmHeaderBytes, static_cast<unsigned long long>(h.length));
		return true;
	default:
		return true; // the header says it all (decode_header)
	}
}

} // namespace

// Every decoder refuses every truncation of a well-formed message (an eager
// piece excepted: its payload may be shorter than the message) and counts
// past its limits.
START_TEST(truncated_and_huge_counts_refused)
{
	const std::vector<std::vector<uint8_t>> msgs = body_samples();
	uint8_t buf[kCommitRequestMax];
	RdmHeader ev = header(MsgType::RmaEvent, 0, 77);
	ev.msg_id = 0;
	ev.status = uint8_t(RmaKind::Write);
	RdmHeader ch;
	ch.msg_id = 9;
	for (const std::vector<uint8_t> &m : msgs) {
		ck_assert_msg(decode_checked(m, "a sample"), "type %u", m[0]);
		// Each truncation in a buffer of its own size, so that a read
		// past it is a fault under a sanitizer, not a silent pass.
		size_t accepted = 0;
		for (size_t n = 0; n < m.size(); n++) {
			const std::vector<uint8_t> cut(m.begin(), m.begin() + long(n));
			accepted += decode_checked(cut, "a truncation");
		}
		ck_assert_msg(accepted == 0, "type %u: %zu truncations accepted", m[0], accepted);
	}

	// Counts past their limits, in a buffer long enough for any of them.
	std::vector<uint8_t> big(kRdmHeaderBytes + 8 + 255 * 24, 0);
	RdmHeader h;
	RndvSegment s[kMaxRndvSegments];
	uint64_t k[kMaxRmaEventKeys];
	CommitRange c[kMaxCommitRanges];
	AtomicRequest r;
	size_t count = 0;
	size_t refused = 0, tried = 0;
	for (unsigned n = 0; n < 256; n++) {
		// Rendezvous segments past kMaxRndvSegments, each of length 1.
		if (n == 0 || n > kMaxRndvSegments) {
			std::fill(big.begin(), big.end(), 0);
			encode_header(big.data(), header(MsgType::RndvRequest, 0, n));
			big[kRdmHeaderBytes] = uint8_t(n);
			for (unsigned i = 0; i < n; i++)
				big[kRdmHeaderBytes + 8 + i * 24 + 8] = 1;
			tried++;
			refused += !decode_rndv_request(big.data(), rndv_msg_bytes(n), h, s, count);
		}
		if (n > kMaxRmaEventKeys) {
			std::fill(big.begin(), big.end(), 0);
			RdmHeader e = ev;
			encode_header(big.data(), e);
			big[kRdmHeaderBytes] = uint8_t(n);
			tried++;
			refused += !decode_rma_event(big.data(), kRdmHeaderBytes + 8 + n * 8, h, k, count);
		}
		if (n == 0 || n > kMaxCommitRanges) {
			std::fill(big.begin(), big.end(), 0);
			RdmHeader x = header(MsgType::CommitRequest, 0, n);
			encode_header(big.data(), x);
			big[kRdmHeaderBytes] = uint8_t(n);
			for (unsigned i = 0; i < n; i++)
				big[kRdmHeaderBytes + 8 + i * 24 + 8] = 1;
			tried++;
			refused += !decode_commit_request(big.data(), kRdmHeaderBytes + 8 + n * 24, h, c,
							  count);
		}
		if (n == 0 || n > kMaxAtomicSegments) {
			std::fill(big.begin(), big.end(), 0);
			encode_header(big.data(), header(MsgType::AtomicRequest, 0, n ? n : 1));
			big[kRdmHeaderBytes] = FI_ATOMIC_READ;
			big[kRdmHeaderBytes + 1] = FI_UINT8;
			big[kRdmHeaderBytes + 2] = uint8_t(Kind::Fetch);
			big[kRdmHeaderBytes + 3] = uint8_t(n);
			for (unsigned i = 0; i < n; i++)
				big[kRdmHeaderBytes + 8 + i * 24 + 8] = 1;
			tried++;
			refused += !decode_atomic_request(big.data(), atomic_request_head_bytes(n), h, r);
		}
	}
	ck_assert_uint_eq(refused, tried);
	// Lengths that add up past 2^64 and wrap to the header's.
	const RndvSegment wrap[2] = {{0, UINT64_MAX, 1}, {0, 2, 1}};
	const size_t rlen = encode_rndv_request(buf, header(MsgType::RndvRequest, 0, 1), wrap, 2);
	ck_assert(!decode_rndv_request(buf, rlen, h, s, count));
	const CommitRange cwrap[2] = {{0, UINT64_MAX, 1}, {0, 2, 1}};
	const size_t clen = encode_commit_request(buf, ch, cwrap, 2); // length: the wrapped sum, 1
	ck_assert(!decode_commit_request(buf, clen, h, c, count));
	// An atomic response whose length says more than follows.
	encode_header(buf, header(MsgType::AtomicResponse, 0, UINT64_MAX));
	AtomicResponse resp;
	ck_assert(!decode_atomic_response(buf, kRdmHeaderBytes + 8, h, resp));
}
END_TEST

// The mutation fuzzer of the device suite (hostile_fuzz), here against the
// decoders alone, where a run of 200,000 mutations costs a second: every
// well-formed message type, mutated at random (bits flipped, bytes and
// length fields set to edge values, cut, extended), each in a buffer of
// exactly its size (a read past it is a fault under the sanitizers), and
// what a decoder accepts must keep its promises (decode_checked). Seeded:
// VRMA_TEST_SEED reproduces a run; VRMA_TEST_FUZZ sets the count.
START_TEST(mutated_messages_decoded_safely)
{
	const char *seed_env = getenv("VRMA_TEST_SEED");
	const uint64_t seed = seed_env ? strtoull(seed_env, nullptr, 0) : std::random_device{}();
	const char *n_env = getenv("VRMA_TEST_FUZZ");
	const size_t total = n_env ? strtoull(n_env, nullptr, 0) * 20 : 200000;
	std::mt19937_64 rng(seed);
	std::vector<std::vector<uint8_t>> templates = body_samples();
	auto keep = [&](const uint8_t *p, size_t len) { templates.emplace_back(p, p + len); };
	uint8_t buf[kRdmHeaderBytes + 64];
	encode_header(buf, header(MsgType::EagerTagged, kFlagLastPiece, 64));
	memset(buf + kRdmHeaderBytes, 0xab, 64);
	keep(buf, kRdmHeaderBytes + 64);
	encode_header(buf, header(MsgType::Eager, kFlagLastPiece | kFlagDeliveryComplete, 16));
	keep(buf, kRdmHeaderBytes + 16);
	encode_key_table(buf, {0x7f0000002000ULL, 0x55, 64});
	keep(buf, kRdmHeaderBytes + 16);
	encode_rndv_done(buf, 5, RndvStatus::Ok);
	keep(buf, kRdmHeaderBytes);
	encode_delivery_ack(buf, 6);
	keep(buf, kRdmHeaderBytes);
	encode_commit_answer(buf, 7, CommitStatus::Ok);
	keep(buf, kRdmHeaderBytes);
	encode_flow(buf, FlowStatus::Pause);
	keep(buf, kRdmHeaderBytes);
	encode_close(buf, 42);
	keep(buf, kRdmHeaderBytes);
	for (const auto &t : templates)
		ck_assert_msg(decode_checked(t, "a template"), "template of type %u refused", t[0]);

	const auto &edges = wire_mutation::kEdges;
	auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
	size_t accepted = 0;
	char label[96];
	for (size_t i = 0; i < total; i++) {
		const size_t ti = pick(templates.size());
		std::vector<uint8_t> m = templates[ti];
		for (size_t r = 0, rounds = 1 + pick(4); r < rounds; r++) {
			switch (pick(8)) {
			case 7: { // a count with the size its layout gives, elements
				  // copied, the header's length their sum or not
				const auto t = m.empty() ? MsgType(0) : MsgType(m[0]);
				const size_t elem = t == MsgType::RmaEvent ? 8
						    : is_rndv_request(t) || t == MsgType::CommitRequest ? 24
													  : 0;
				if (!elem || m.size() < kRdmHeaderBytes + 8 + elem)
					break;
				const size_t first = kRdmHeaderBytes + 8, cnt = pick(3) ? 1 + pick(20) : rng() & 0xff;
				const std::vector<uint8_t> one(m.begin() + long(first), m.begin() + long(first + elem));
				m.resize(first);
				m[kRdmHeaderBytes] = uint8_t(cnt);
				uint64_t sum = 0;
				for (size_t e = 0; e < cnt; e++) {
					m.insert(m.end(), one.begin(), one.end());
					if (elem == 24)
						sum += le::get64(one.data() + 8);
				}
				if (elem == 24 && pick(2))
					le::put64(m.data() + 24, sum);
				break;
			}
			case 0: // a bit flipped
				if (!m.empty())
					m[pick(m.size())] ^= uint8_t(1u << pick(8));
				break;
			case 1: { // a byte set to an edge value
				static constexpr uint8_t e8[] = {0, 1, 2, 4, 16, 17, 0x7f, 0x80, 0xfe, 0xff};
				if (!m.empty())
					m[pick(m.size())] = e8[pick(std::size(e8))];
				break;
			}
			case 2: // the header's length
				if (m.size() >= kRdmHeaderBytes)
					le::put64(m.data() + 24, edges[pick(std::size(edges))]);
				break;
			case 3: // a 64-bit word of the body
				if (m.size() >= kRdmHeaderBytes + 8) {
					const size_t off = kRdmHeaderBytes + 8 * pick((m.size() - kRdmHeaderBytes) / 8);
					le::put64(m.data() + off, edges[pick(std::size(edges))]);
				}
				break;
			case 4: // the body's count byte (segments, keys, ranges)
				if (m.size() > kRdmHeaderBytes + 3)
					m[kRdmHeaderBytes + pick(4)] = uint8_t(pick(2) ? pick(34) : rng());
				break;
			case 5: // cut
				m.resize(pick(m.size() + 1));
				break;
			case 6: // extended
				m.resize(m.size() + 1 + pick(64), uint8_t(rng()));
				break;
			}
		}
		m.shrink_to_fit(); // exactly its size: a read past it is a fault under ASan
		snprintf(label, sizeof label, "seed %llu (VRMA_TEST_SEED), mutation %zu of template %zu",
			 static_cast<unsigned long long>(seed), i, ti);
		accepted += decode_checked(m, label);
	}
	fprintf(stderr, "mutated_messages_decoded_safely: seed %llu (VRMA_TEST_SEED), %zu of %zu accepted\n",
		static_cast<unsigned long long>(seed), accepted, total);
	// Mutations that keep a message well formed (a payload byte, an
	// address) are accepted: the fuzzer reaches past the first checks.
	ck_assert_msg(accepted > total / 100 && accepted < total,
		      "seed %llu: %zu of %zu mutated messages accepted", static_cast<unsigned long long>(seed),
		      accepted, total);
}
END_TEST

// Issue 26, item 4: a receive completion is decoded only when it is a plain
// send that fits its buffer; a send-queue completion only with an opcode
// its request posts.
START_TEST(work_completion_checks)
{
	constexpr size_t buf = 8256;
	ck_assert(check_recv_wc(IBV_WC_RECV, 0, 32, buf) == RecvWcCheck::Ok);
	ck_assert(check_recv_wc(IBV_WC_RECV, 0, buf, buf) == RecvWcCheck::Ok);
	ck_assert(check_recv_wc(IBV_WC_RECV, 0, 0, buf) == RecvWcCheck::Ok);
	// An RDMA write with immediate consumed the buffer without writing it.
	ck_assert(check_recv_wc(IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_WITH_IMM, 96, buf) ==
		  RecvWcCheck::Opcode);
	ck_assert(check_recv_wc(IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_WITH_IMM, 0, buf) ==
		  RecvWcCheck::Opcode);
	ck_assert(check_recv_wc(IBV_WC_RECV_RDMA_WITH_IMM, 0, 0, buf) == RecvWcCheck::Opcode);
	// A send with immediate: no message of the protocol.
	ck_assert(check_recv_wc(IBV_WC_RECV, IBV_WC_WITH_IMM, 32, buf) == RecvWcCheck::Opcode);
	// Send-queue opcodes on a receive buffer.
	ck_assert(check_recv_wc(IBV_WC_SEND, 0, 32, buf) == RecvWcCheck::Opcode);
	ck_assert(check_recv_wc(IBV_WC_RDMA_READ, 0, 32, buf) == RecvWcCheck::Opcode);
	ck_assert(check_recv_wc(ibv_wc_opcode(0xff), 0, 32, buf) == RecvWcCheck::Opcode);
	// Longer than the buffer.
	ck_assert(check_recv_wc(IBV_WC_RECV, 0, buf + 1, buf) == RecvWcCheck::Length);
	ck_assert(check_recv_wc(IBV_WC_RECV, 0, UINT32_MAX, buf) == RecvWcCheck::Length);

	ck_assert(send_wc_allowed(IBV_WC_SEND, kWcSend));
	ck_assert(!send_wc_allowed(IBV_WC_RDMA_WRITE, kWcSend));
	ck_assert(send_wc_allowed(IBV_WC_RDMA_READ, kWcRead));
	ck_assert(!send_wc_allowed(IBV_WC_SEND, kWcRead));
	ck_assert(send_wc_allowed(IBV_WC_FETCH_ADD, kWcAtomics));
	ck_assert(send_wc_allowed(IBV_WC_COMP_SWAP, kWcAtomics));
	ck_assert(!send_wc_allowed(IBV_WC_RDMA_READ, kWcAtomics));
	for (ibv_wc_opcode op : {IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP,
				 IBV_WC_FETCH_ADD})
		ck_assert(send_wc_allowed(op, kWcRdmPosted));
	// Never posted by an RDM endpoint, and receive opcodes, whatever the set.
	ck_assert(!send_wc_allowed(IBV_WC_BIND_MW, kWcRdmPosted));
	ck_assert(!send_wc_allowed(IBV_WC_LOCAL_INV, kWcRdmPosted));
	ck_assert(!send_wc_allowed(IBV_WC_RECV, ~uint32_t(0)));
	ck_assert(!send_wc_allowed(IBV_WC_RECV_RDMA_WITH_IMM, ~uint32_t(0)));
	ck_assert(!send_wc_allowed(ibv_wc_opcode(32), ~uint32_t(0)));
	ck_assert(!send_wc_allowed(IBV_WC_SEND, 0));
}
END_TEST

Suite *rdm_wire_suite()
{
	Suite *s = suite_create("rdm_wire");
	TCase *tc = tcase_create("rdm_wire");
	tcase_add_test(tc, addr_validity_and_order);
	tcase_add_test(tc, key_request_and_answer_round_trip);
	tcase_add_test(tc, malformed_key_messages_refused);
	tcase_add_test(tc, conn_header_round_trip);
	tcase_add_test(tc, malformed_conn_headers_refused);
	tcase_add_test(tc, conn_header_key_table);
	tcase_add_test(tc, conn_header_auth_layouts);
	tcase_add_test(tc, key_table_message);
	tcase_add_test(tc, flow_message);
	tcase_add_test(tc, crossing_connections_keep_exactly_one);
	tcase_add_test(tc, header_round_trip);
	tcase_add_test(tc, patched_eager_header_equals_encoded);
	tcase_add_test(tc, malformed_headers_refused);
	tcase_add_test(tc, rndv_request_round_trip);
	tcase_add_test(tc, malformed_rndv_requests_refused);
	tcase_add_test(tc, rma_event_round_trip);
	tcase_add_test(tc, malformed_rma_events_refused);
	tcase_add_test(tc, rma_kinds);
	tcase_add_test(tc, atomic_request_round_trip);
	tcase_add_test(tc, malformed_atomic_requests_refused);
	tcase_add_test(tc, atomic_response_round_trip);
	tcase_add_test(tc, malformed_atomic_responses_refused);
	tcase_add_test(tc, undefined_types_refused);
	tcase_add_test(tc, close_message);
	tcase_add_test(tc, idle_message);
	tcase_add_test(tc, close_settle_counts);
	tcase_add_test(tc, commit_request_round_trip);
	tcase_add_test(tc, malformed_commits_refused);
	tcase_add_test(tc, checked_products);
	tcase_add_test(tc, atomic_read_count_bounded);
	tcase_add_test(tc, truncated_and_huge_counts_refused);
	tcase_add_test(tc, mutated_messages_decoded_safely);
	tcase_add_test(tc, work_completion_checks);
	suite_add_tcase(s, tc);
	return s;
}
