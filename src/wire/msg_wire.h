// What vrma puts on the wire of its own: the header in front of the
// application's connection-management data, and the commit messages of
// FI_COMMIT_COMPLETE.
//
// rdma_cm pads private data to the transport's maximum and reports that
// maximum as its length, so the header carries the application's real length.
// Every field is one byte: no byte-order concerns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <endian.h>

#include <rdma/fi_ext_vrma.h>

#include "wire/commit.h"

namespace vrma::wire {

inline constexpr uint8_t kCmMagic = 0xA7;
inline constexpr uint8_t kCmVersion = 1;

struct CmHeader {
	uint8_t magic;    // kCmMagic: tells vrma peers from foreign rdma_cm users
	uint8_t version;  // kCmVersion
	uint8_t user_len; // bytes of application data following the header
	uint8_t flags;    // kCmFlag*: what the sender offers as an RMA target
};
static_assert(sizeof(CmHeader) == 4, "CmHeader is a wire format");

// Smallest private-data limit of the rdma_cm messages vrma carries data in:
// an IB/RoCE REQ holds 56 bytes (REP 196, REJ 148). iWARP allows more.
inline constexpr size_t kCmPrivateDataMax = 56;
inline constexpr size_t kCmUserDataMax = kCmPrivateDataMax - sizeof(CmHeader);
static_assert(kCmUserDataMax <= UINT8_MAX, "user_len is one byte");
static_assert(kCmUserDataMax == FI_VRMA_CM_DATA_SIZE, "public header promises this size");

// CmHeader::flags. A flag the receiver does not know is ignored.
inline constexpr uint8_t kCmFlagCommitService = 1 << 0;  // answers commit messages
inline constexpr uint8_t kCmFlagDirectWritePmem = 1 << 1; // writes land in its persistence domain
inline constexpr uint8_t kCmFlagNativeFlush = 1 << 2;     // reserved: native persistent FLUSH
inline constexpr uint8_t kCmFlagRmaEvents = 1 << 3;       // wants an event message per RMA
inline constexpr uint8_t kCmFlagTakesCqData = 1 << 4;     // write-with-immediate costs it no
							  // application receive
inline constexpr uint8_t kCmFlagStagedRx = 1 << 5;        // receives messages through staging
							  // buffers (MsgHeader framing)
inline constexpr uint8_t kCmFlagConfirmsMsgs = 1 << 6;    // staged, and answers messages marked
							  // kMsgConfirm once placed (delivery)
							  // or durable (kMsgPersist)
// RDM only: the peer's 64-bit integer atomics run on its device
// (rdm::kConnFlagNativeAtomics).
inline constexpr uint8_t kCmFlagNativeAtomics = 1 << 7;

// How a peer that announced these flags makes this side's RDMA writes
// durable (FI_COMMIT_COMPLETE); MSG and RDM connections alike. A write
// straight into its persistence domain wins over its commit service: a
// zero-length read behind the writes is then enough.
enum class PeerCommit : uint8_t {
	None,        // no FI_RMA_PMEM endpoint: FI_COMMIT_COMPLETE is refused
	DirectWrite, // kCmFlagDirectWritePmem: a read back proves durability
	Service,     // kCmFlagCommitService: a commit request, answered
};
constexpr PeerCommit peer_commit(uint8_t cm_flags) noexcept
{
	if (cm_flags & kCmFlagDirectWritePmem)
		return PeerCommit::DirectWrite;
	if (cm_flags & kCmFlagCommitService)
		return PeerCommit::Service;
	return PeerCommit::None;
}

// Staged messages. An endpoint that receives messages and remote CQ data but
// did not take on FI_RX_CQ_DATA owns its receive queue: it keeps buffers of
// kStageBytes posted, and its peer sends each message as a MsgHeader
// followed by the payload, cut into sends of at most kStageBytes (one
// receive each, back to back on the QP: RC keeps them in order). The
// receiver copies them into the application's receives in arrival order.
inline constexpr size_t kStageBytes = 64 * 1024;
inline constexpr size_t kMaxStagePieces = 65; // sends of one message
inline constexpr uint8_t kMsgFirst = 0x4d;
inline constexpr uint8_t kMsgVersion = 1;
inline constexpr uint8_t kMsgHasData = 1 << 0; // cq_data is remote CQ data
// FI_DELIVERY_COMPLETE / FI_COMMIT_COMPLETE sends to a kCmFlagConfirmsMsgs
// peer: once the message is in the matched receive (and, with kMsgPersist,
// durable there), the receiver answers with a zero-length send with
// immediate data confirm_reply_imm(confirm_id, status).
inline constexpr uint8_t kMsgConfirm = 1 << 1;
inline constexpr uint8_t kMsgPersist = 1 << 2;
inline constexpr uint8_t kMsgFlagsKnown = kMsgHasData | kMsgConfirm | kMsgPersist;

struct MsgHeader {
	uint8_t type;    // kMsgFirst
	uint8_t version; // kMsgVersion
	uint8_t flags;   // kMsgHas*, kMsgConfirm, kMsgPersist
	uint8_t confirm_id; // with kMsgConfirm: echoed in the answer
	uint32_t cq_data;
	uint64_t total; // payload bytes after the header, over all pieces
};
static_assert(sizeof(MsgHeader) == 16, "MsgHeader is a wire format");
// The largest message a staged receiver takes: a header and the payload in
// kMaxStagePieces receives, rounded down to a power of two.
inline constexpr size_t kStagedMsgMax = (kMaxStagePieces - 1) * kStageBytes;
static_assert(kStagedMsgMax + sizeof(MsgHeader) <= kMaxStagePieces * kStageBytes, "fits");

inline void encode_msg_header(uint8_t *buf, uint64_t total, bool has_data, uint32_t data,
			      uint8_t confirm_flags = 0, uint8_t confirm_id = 0) noexcept
{
	MsgHeader h{kMsgFirst, kMsgVersion,
		    static_cast<uint8_t>((has_data ? kMsgHasData : 0) | confirm_flags), confirm_id,
		    htole32(data), htole64(total)};
	memcpy(buf, &h, sizeof h);
}

// Parses the header at the front of a message's first piece; false if it is
// not one.
inline bool decode_msg_header(const uint8_t *buf, size_t len, uint64_t &total, bool &has_data,
			      uint32_t &data, uint8_t *confirm_flags = nullptr,
			      uint8_t *confirm_id = nullptr) noexcept
{
	MsgHeader h;
	if (len < sizeof h)
		return false;
	memcpy(&h, buf, sizeof h);
	if (h.type != kMsgFirst || h.version != kMsgVersion || (h.flags & ~kMsgFlagsKnown) ||
	    ((h.flags & kMsgPersist) && !(h.flags & kMsgConfirm)))
		return false;
	total = le64toh(h.total);
	has_data = h.flags & kMsgHasData;
	data = le32toh(h.cq_data);
	if (confirm_flags)
		*confirm_flags = h.flags & (kMsgConfirm | kMsgPersist);
	if (confirm_id)
		*confirm_id = h.confirm_id;
	return true;
}

// Commit messages travel on the connection's own QP, behind the writes they
// commit (RC delivers a send only after the earlier writes were placed), into
// receives the provider keeps posted. Multi-byte fields are little-endian.
//
// Request: a send carrying a header and up to kMaxCommitRanges ranges.
// Reply: a zero-length send with immediate data: the request's id in bits
// 0-23, a CommitStatus in bits 24-31.
inline constexpr uint8_t kCommitRequest = 1;
inline constexpr uint8_t kCommitVersion = 1;

struct CommitHeader {
	uint8_t type;    // kCommitRequest
	uint8_t version; // kCommitVersion
	uint8_t nranges;
	uint8_t reserved;
	uint32_t id; // echoed in the reply (24 bits)
};
static_assert(sizeof(CommitHeader) == 8, "CommitHeader is a wire format");

// A range on the wire: the CommitRange (commit.h) with a 32-bit key.
struct MsgCommitRange {
	uint64_t addr;
	uint64_t len;
	uint32_t key;
	uint32_t reserved; // 0
};
static_assert(sizeof(MsgCommitRange) == 24, "MsgCommitRange is a wire format");

inline constexpr size_t kCommitMsgMax =
	sizeof(CommitHeader) + kMaxCommitRanges * sizeof(MsgCommitRange);

// RMA event: a send after the operation's requests, telling a target with
// FI_RMA_EVENT which of its regions the operation touched (their keys).
inline constexpr uint8_t kRmaEvent = 2;
inline constexpr uint8_t kEventWrite = 1;
inline constexpr uint8_t kEventRead = 2;

struct RmaEventHeader {
	uint8_t type;    // kRmaEvent
	uint8_t version; // kCommitVersion
	uint8_t nkeys;
	uint8_t kind; // kEventWrite or kEventRead
};
static_assert(sizeof(RmaEventHeader) == 4, "RmaEventHeader is a wire format");

inline constexpr size_t kRmaEventMax = sizeof(RmaEventHeader) + kMaxCommitRanges * sizeof(uint32_t);
static_assert(kRmaEventMax <= kCommitMsgMax, "events fit the receive buffers");

// Writes an event into buf (kRmaEventMax bytes); returns its length.
inline size_t encode_rma_event(uint8_t *buf, uint8_t kind, const uint32_t *keys, size_t n) noexcept
{
	RmaEventHeader h{kRmaEvent, kCommitVersion, static_cast<uint8_t>(n), kind};
	memcpy(buf, &h, sizeof h);
	for (size_t i = 0; i < n; i++) {
		const uint32_t k = htole32(keys[i]);
		memcpy(buf + sizeof h + i * sizeof k, &k, sizeof k);
	}
	return sizeof h + n * sizeof(uint32_t);
}

// Parses a received event; false if it is not a well-formed one.
inline bool decode_rma_event(const uint8_t *buf, size_t len, uint8_t &kind, uint32_t *keys,
			     size_t &n) noexcept
{
	RmaEventHeader h;
	if (len < sizeof h)
		return false;
	memcpy(&h, buf, sizeof h);
	// No key: a zero-length operation, which touched no region.
	if (h.type != kRmaEvent || h.version != kCommitVersion || h.nkeys > kMaxCommitRanges || (h.kind != kEventWrite && h.kind != kEventRead) ||
	    len < sizeof h + h.nkeys * sizeof(uint32_t))
		return false;
	kind = h.kind;
	n = h.nkeys;
	for (size_t i = 0; i < n; i++) {
		uint32_t k;
		memcpy(&k, buf + sizeof h + i * sizeof k, sizeof k);
		keys[i] = le32toh(k);
	}
	return true;
}

inline constexpr uint32_t kCommitIdMask = 0xffffff;
inline constexpr uint32_t kConfirmReplyBit = 0x80;

inline constexpr uint32_t commit_reply_imm(uint32_t id, CommitStatus status) noexcept
{
	return (id & kCommitIdMask) | static_cast<uint32_t>(status) << 24;
}

inline constexpr uint32_t commit_reply_id(uint32_t imm) noexcept { return imm & kCommitIdMask; }

inline constexpr CommitStatus commit_reply_status(uint32_t imm) noexcept
{
	return static_cast<CommitStatus>((imm >> 24) & ~kConfirmReplyBit);
}

// The answer to a kMsgConfirm message: the header's confirm_id in bits 0-7,
// kConfirmReplyBit | CommitStatus in bits 24-31 (commit answers leave that
// bit clear).
inline constexpr uint32_t confirm_reply_imm(uint8_t id, CommitStatus status) noexcept
{
	return id | (kConfirmReplyBit | static_cast<uint32_t>(status)) << 24;
}

inline constexpr bool is_confirm_reply(uint32_t imm) noexcept
{
	return (imm >> 24) & kConfirmReplyBit;
}

// Writes a request into buf (kCommitMsgMax bytes); returns its length.
// Each range's key is a device rkey (32 bits).
inline size_t encode_commit_request(uint8_t *buf, uint32_t id, const CommitRange *ranges,
				    size_t n) noexcept
{
	CommitHeader h{kCommitRequest, kCommitVersion, static_cast<uint8_t>(n), 0,
		       htole32(id & kCommitIdMask)};
	memcpy(buf, &h, sizeof h);
	for (size_t i = 0; i < n; i++) {
		MsgCommitRange r{htole64(ranges[i].addr), htole64(ranges[i].len),
				 htole32(static_cast<uint32_t>(ranges[i].key)), 0};
		memcpy(buf + sizeof h + i * sizeof r, &r, sizeof r);
	}
	return sizeof h + n * sizeof(MsgCommitRange);
}

// Parses a received request; false if it is not a well-formed one.
inline bool decode_commit_request(const uint8_t *buf, size_t len, uint32_t &id,
				  CommitRange *ranges, size_t &n) noexcept
{
	CommitHeader h;
	if (len < sizeof h)
		return false;
	memcpy(&h, buf, sizeof h);
	if (h.type != kCommitRequest || h.version != kCommitVersion ||
	    h.nranges == 0 || h.nranges > kMaxCommitRanges ||
	    len < sizeof h + h.nranges * sizeof(MsgCommitRange))
		return false;
	id = le32toh(h.id) & kCommitIdMask;
	n = h.nranges;
	for (size_t i = 0; i < n; i++) {
		MsgCommitRange r;
		memcpy(&r, buf + sizeof h + i * sizeof r, sizeof r);
		ranges[i] = {le64toh(r.addr), le64toh(r.len), le32toh(r.key)};
	}
	return true;
}

} // namespace vrma::wire
