// vrma's own wire formats: the commit request and the RMA event round-trip,
// every malformed one is refused, and the answer's immediate packs id and
// status.
#include <cstdint>
#include <cstring>
#include <vector>

#include "unit.h"
#include "wire/msg_wire.h"

using namespace vrma::wire;

START_TEST(commit_request_round_trip)
{
	CommitRange in[kMaxCommitRanges];
	for (size_t i = 0; i < kMaxCommitRanges; i++)
		in[i] = {0x1000000000ULL * (i + 1) + i, (uint64_t(1) << 33) + i, uint32_t(0xA0000000u + i)};
	for (size_t n : {size_t(1), size_t(3), kMaxCommitRanges}) {
		uint8_t buf[kCommitMsgMax];
		const size_t len = encode_commit_request(buf, 0x12345678u, in, n);
		ck_assert_uint_eq(len, sizeof(CommitHeader) + n * sizeof(MsgCommitRange));
		ck_assert_uint_le(len, kCommitMsgMax);
		// Little-endian on the wire whatever the host.
		ck_assert_uint_eq(buf[0], kCommitRequest);
		ck_assert_uint_eq(buf[2], n);
		ck_assert_uint_eq(buf[4], 0x78);
		ck_assert_uint_eq(buf[6], 0x34);
		ck_assert_uint_eq(buf[7], 0); // 24-bit id
		uint32_t id = 0;
		size_t got = 0;
		CommitRange out[kMaxCommitRanges] = {};
		ck_assert(decode_commit_request(buf, len, id, out, got));
		ck_assert_uint_eq(id, 0x345678u);
		ck_assert_uint_eq(got, n);
		for (size_t i = 0; i < n; i++) {
			ck_assert_uint_eq(out[i].addr, in[i].addr);
			ck_assert_uint_eq(out[i].len, in[i].len);
			ck_assert_uint_eq(out[i].key, in[i].key);
		}
	}
}
END_TEST

START_TEST(malformed_commit_requests_refused)
{
	CommitRange r{4096, 64, 7};
	uint8_t good[kCommitMsgMax];
	const size_t len = encode_commit_request(good, 5, &r, 1);
	uint32_t id;
	size_t n;
	CommitRange out[kMaxCommitRanges];
	ck_assert(decode_commit_request(good, len, id, out, n));
	// Short, truncated ranges, wrong type, wrong version, 0 or too many ranges.
	ck_assert(!decode_commit_request(good, 0, id, out, n));
	ck_assert(!decode_commit_request(good, sizeof(CommitHeader) - 1, id, out, n));
	ck_assert(!decode_commit_request(good, len - 1, id, out, n));
	uint8_t bad[kCommitMsgMax];
	memcpy(bad, good, len);
	bad[0] = 9;
	ck_assert(!decode_commit_request(bad, len, id, out, n));
	memcpy(bad, good, len);
	bad[1] = kCommitVersion + 1;
	ck_assert(!decode_commit_request(bad, len, id, out, n));
	memcpy(bad, good, len);
	bad[2] = 0;
	ck_assert(!decode_commit_request(bad, len, id, out, n));
	memcpy(bad, good, len);
	bad[2] = kMaxCommitRanges + 1;
	ck_assert(!decode_commit_request(bad, kCommitMsgMax, id, out, n));
}
END_TEST

START_TEST(commit_reply_packs_id_and_status)
{
	for (uint32_t id : {0u, 1u, 0xABCDEFu, 0xFFFFFFu, 0x1000001u}) {
		for (CommitStatus st : {CommitStatus::Ok, CommitStatus::AccessError,
					CommitStatus::PersistFailed, CommitStatus::Malformed}) {
			const uint32_t imm = commit_reply_imm(id, st);
			ck_assert_uint_eq(commit_reply_id(imm), id & kCommitIdMask);
			ck_assert(commit_reply_status(imm) == st);
		}
	}
	ck_assert_uint_eq(commit_reply_imm(0x123456, CommitStatus::Ok), 0x123456u);
}
END_TEST

START_TEST(rma_event_round_trip_and_refusals)
{
	const uint32_t keys[3] = {0x11223344u, 7u, 0xFFFFFFFFu};
	uint8_t buf[kRmaEventMax];
	for (size_t n : {size_t(0), size_t(1), size_t(3)}) {
		const size_t len = encode_rma_event(buf, kEventRead, keys, n);
		ck_assert_uint_eq(len, sizeof(RmaEventHeader) + 4 * n);
		uint8_t kind = 0;
		uint32_t out[kMaxCommitRanges];
		size_t got = 99;
		ck_assert(decode_rma_event(buf, len, kind, out, got));
		ck_assert_uint_eq(kind, kEventRead);
		ck_assert_uint_eq(got, n);
		for (size_t i = 0; i < n; i++)
			ck_assert_uint_eq(out[i], keys[i]);
	}
	size_t len = encode_rma_event(buf, kEventWrite, keys, 3);
	ck_assert_uint_eq(buf[4], 0x44); // little-endian
	uint8_t kind;
	uint32_t out[kMaxCommitRanges];
	size_t n;
	ck_assert(!decode_rma_event(buf, len - 1, kind, out, n)); // truncated
	ck_assert(!decode_rma_event(buf, 3, kind, out, n));
	buf[3] = 9; // unknown kind
	ck_assert(!decode_rma_event(buf, len, kind, out, n));
	buf[3] = kEventWrite;
	buf[0] = kCommitRequest; // a commit request is not an event
	ck_assert(!decode_rma_event(buf, len, kind, out, n));
	buf[0] = kRmaEvent;
	buf[2] = kMaxCommitRanges + 1;
	ck_assert(!decode_rma_event(buf, kRmaEventMax, kind, out, n));
}
END_TEST

START_TEST(msg_header_round_trip_and_refusals)
{
	uint8_t buf[sizeof(MsgHeader) + 4];
	for (bool has_data : {false, true}) {
		encode_msg_header(buf, 0x0102030405060708ull, has_data, 0xA1B2C3D4u);
		uint64_t total = 0;
		bool got_data = !has_data;
		uint32_t data = 0;
		ck_assert(decode_msg_header(buf, sizeof(MsgHeader), total, got_data, data));
		ck_assert_uint_eq(total, 0x0102030405060708ull);
		ck_assert_int_eq(got_data, has_data);
		ck_assert_uint_eq(data, 0xA1B2C3D4u);
	}
	// Little-endian on the wire: data at 4, total at 8.
	ck_assert_uint_eq(buf[4], 0xD4);
	ck_assert_uint_eq(buf[8], 0x08);
	uint64_t total;
	bool has_data;
	uint32_t data;
	ck_assert(!decode_msg_header(buf, sizeof(MsgHeader) - 1, total, has_data, data));
	buf[2] = 0x80; // unknown flag
	ck_assert(!decode_msg_header(buf, sizeof buf, total, has_data, data));
	buf[2] = kMsgHasData;
	buf[0] = kRmaEvent; // not a message header
	ck_assert(!decode_msg_header(buf, sizeof buf, total, has_data, data));
	buf[0] = kMsgFirst;
	buf[1] = kMsgVersion + 1;
	ck_assert(!decode_msg_header(buf, sizeof buf, total, has_data, data));
	// Confirmation: the flags and the id round-trip; persist without
	// confirm is refused.
	encode_msg_header(buf, 77, false, 0, kMsgConfirm | kMsgPersist, 0xC5);
	uint8_t cflags = 0, cid = 0;
	ck_assert(decode_msg_header(buf, sizeof buf, total, has_data, data, &cflags, &cid));
	ck_assert_uint_eq(total, 77);
	ck_assert_uint_eq(cflags, kMsgConfirm | kMsgPersist);
	ck_assert_uint_eq(cid, 0xC5);
	buf[2] = kMsgPersist;
	ck_assert(!decode_msg_header(buf, sizeof buf, total, has_data, data, &cflags, &cid));
	encode_msg_header(buf, 5, true, 9);
	ck_assert(decode_msg_header(buf, sizeof buf, total, has_data, data, &cflags, &cid));
	ck_assert_uint_eq(cflags, 0);
	// The largest staged message and its header fit the pieces.
	ck_assert_uint_eq(kStagedMsgMax, 4u << 20);
	ck_assert_uint_le((kStagedMsgMax + sizeof(MsgHeader) + kStageBytes - 1) / kStageBytes,
			  kMaxStagePieces);
}
END_TEST

START_TEST(confirm_and_commit_replies_apart)
{
	for (uint32_t id : {0u, 1u, 0xABu, 0xFFu})
		for (CommitStatus st : {CommitStatus::Ok, CommitStatus::AccessError,
					CommitStatus::PersistFailed, CommitStatus::Malformed}) {
			const uint32_t c = confirm_reply_imm(static_cast<uint8_t>(id), st);
			ck_assert(is_confirm_reply(c));
			ck_assert_uint_eq(c & 0xff, id);
			ck_assert_int_eq(static_cast<int>(commit_reply_status(c)), static_cast<int>(st));
			const uint32_t r = commit_reply_imm(id | 0xABCD00, st);
			ck_assert(!is_confirm_reply(r));
			ck_assert_uint_eq(commit_reply_id(r), id | 0xABCD00);
			ck_assert_int_eq(static_cast<int>(commit_reply_status(r)), static_cast<int>(st));
		}
}
END_TEST

START_TEST(peer_commit_prefers_direct_write)
{
	ck_assert(peer_commit(0) == PeerCommit::None);
	ck_assert(peer_commit(kCmFlagCommitService) == PeerCommit::Service);
	ck_assert(peer_commit(kCmFlagDirectWritePmem) == PeerCommit::DirectWrite);
	ck_assert(peer_commit(kCmFlagDirectWritePmem | kCmFlagCommitService) ==
		  PeerCommit::DirectWrite);
	// Flags about other things never make a commit method.
	const uint8_t others = kCmFlagNativeFlush | kCmFlagRmaEvents | kCmFlagTakesCqData |
			       kCmFlagStagedRx | kCmFlagConfirmsMsgs | kCmFlagNativeAtomics;
	ck_assert(peer_commit(others) == PeerCommit::None);
	ck_assert(peer_commit(others | kCmFlagCommitService) == PeerCommit::Service);
}
END_TEST

Suite *wire_suite()
{
	Suite *s = suite_create("wire");
	TCase *tc = tcase_create("commit");
	tcase_add_test(tc, commit_request_round_trip);
	tcase_add_test(tc, malformed_commit_requests_refused);
	tcase_add_test(tc, commit_reply_packs_id_and_status);
	tcase_add_test(tc, rma_event_round_trip_and_refusals);
	tcase_add_test(tc, msg_header_round_trip_and_refusals);
	tcase_add_test(tc, confirm_and_commit_replies_apart);
	tcase_add_test(tc, peer_commit_prefers_direct_write);
	suite_add_tcase(s, tc);
	return s;
}
