// What vrma's RDM endpoint puts on the wire, and the addresses it names peers
// by. An RDM endpoint reaches each peer over one RC connection, made on demand
// with rdma_cm: the connect request carries an RdmConnHeader, and every send
// on the connection starts with an RdmHeader.
//
// Conventions (those of msg_wire.h, made stricter):
//  - Every format has a fixed layout, written byte by byte by an encode
//    function and read back by a decode function. No struct is copied to or
//    from the wire, so host padding and byte order never leak; the structs
//    below are the decoded, host-order form.
//  - Multi-byte integers are little-endian; IP addresses are in network order,
//    as in a sockaddr.
//  - Each format has a version byte; decode refuses any version but its own.
//  - decode returns false on anything malformed: a short (or, where the length
//    is fixed, a long) buffer, an unknown magic, version, type, flag or status,
//    a non-zero reserved byte, a length or count out of range. Every count a
//    message names is bounded here, and every count times an element size
//    is computed with an overflow check (checked_mul) and bounded too,
//    before any caller sizes, indexes or copies anything by it. A malformed
//    message means the peer does not speak this protocol (or memory was
//    corrupted): the caller drops the connection instead of guessing. On
//    false, the outputs are unspecified.
//  - encode functions do not check their input (they are on the send path):
//    what they are given must satisfy what decode checks.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <netinet/in.h>
#include <sys/socket.h>

#include "atomic_ops.h"
#include "key_table.h"
#include "wire/commit.h"

namespace vrma::rdm {

// Little-endian integers at any alignment. memcpy of the native value keeps
// each to one load or store on a little-endian host (the byte loops they
// replace cost ~30 instructions a field on the receive path).
namespace le {
template <typename T> inline T to_le(T v) noexcept
{
	if constexpr (std::endian::native == std::endian::little)
		return v;
	else if constexpr (sizeof(T) == 2)
		return __builtin_bswap16(v);
	else if constexpr (sizeof(T) == 4)
		return __builtin_bswap32(v);
	else
		return __builtin_bswap64(v);
}
template <typename T> inline void put(uint8_t *p, T v) noexcept
{
	v = to_le(v);
	memcpy(p, &v, sizeof v);
}
template <typename T> inline T get(const uint8_t *p) noexcept
{
	T v;
	memcpy(&v, p, sizeof v);
	return to_le(v);
}
inline void put16(uint8_t *p, uint16_t v) noexcept { put(p, v); }
inline void put32(uint8_t *p, uint32_t v) noexcept { put(p, v); }
inline void put64(uint8_t *p, uint64_t v) noexcept { put(p, v); }
inline uint16_t get16(const uint8_t *p) noexcept { return get<uint16_t>(p); }
inline uint32_t get32(const uint8_t *p) noexcept { return get<uint32_t>(p); }
inline uint64_t get64(const uint8_t *p) noexcept { return get<uint64_t>(p); }
} // namespace le

// count * size into out; false (out unspecified) when the product does not
// fit a size_t. For every product of a count a peer names: a wrapped
// product passes any later bound (2^61 8-byte elements are 0 bytes).
inline bool checked_mul(uint64_t count, uint64_t size, size_t &out) noexcept
{
	uint64_t p;
	if (__builtin_mul_overflow(count, size, &p) || p > SIZE_MAX)
		return false;
	out = static_cast<size_t>(p);
	return true;
}

// The largest eager size an RDM endpoint takes (FI_VRMA_RDM_EAGER_SIZE is
// clamped to it): no honest peer sends, or asks to be answered, more
// payload than this in one message.
inline constexpr size_t kEagerSizeMax = size_t(1) << 20;

// ---------------------------------------------------------------------------
// Addresses

// An RDM endpoint's address: what the application inserts into an address
// vector and fi_getname returns, and what a connecting endpoint announces as
// its own.
//
// Canonical form (valid() checks it; from_sockaddr and parse_addr produce it):
//  - family is AF_INET or AF_INET6;
//  - an IPv4 address sits in addr[0..3] with addr[4..15] zero;
//  - an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is stored as AF_INET, so a
//    peer is the same key however it was spelled (rdma_cm on an IPv6 socket
//    reports IPv4 peers in the mapped form).
// Equality and hashing are by value, which relies on the canonical form.
//
// Not kept: sin6_flowinfo and sin6_scope_id. A link-local IPv6 address needs a
// scope to be reached, so from_sockaddr refuses a non-zero scope id rather
// than drop it silently.
struct RdmAddr {
	uint16_t family = AF_UNSPEC; // AF_INET or AF_INET6
	uint16_t port = 0;           // host byte order
	uint8_t addr[16] = {};       // network byte order

	friend bool operator==(const RdmAddr &, const RdmAddr &) = default;
};

// The family as it travels: 4 or 6 (AF_INET6 differs between systems); 0 for
// any other family.
inline constexpr uint8_t wire_family(uint16_t family) noexcept
{
	return family == AF_INET ? 4 : family == AF_INET6 ? 6 : 0;
}

inline bool is_v4_mapped(const uint8_t *a16) noexcept
{
	static constexpr uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(a16, prefix, sizeof prefix) == 0;
}

// In canonical form (see RdmAddr).
inline bool valid(const RdmAddr &a) noexcept
{
	static constexpr uint8_t zero[12] = {};
	if (a.family == AF_INET)
		return memcmp(a.addr + 4, zero, sizeof zero) == 0;
	return a.family == AF_INET6 && !is_v4_mapped(a.addr);
}

// Valid, and something an endpoint can listen at and be connected to: a port
// other than 0 and an address other than the unspecified one (0.0.0.0, ::).
inline bool connectable(const RdmAddr &a) noexcept
{
	static constexpr uint8_t zero[16] = {};
	return valid(a) && a.port != 0 && memcmp(a.addr, zero, sizeof zero) != 0;
}

// A total order, the same on every host: family (IPv4 first), then the address
// bytes, then the port. <0, 0, >0 like memcmp.
inline int compare(const RdmAddr &a, const RdmAddr &b) noexcept
{
	const int fa = wire_family(a.family), fb = wire_family(b.family);
	if (fa != fb)
		return fa < fb ? -1 : 1;
	if (const int c = memcmp(a.addr, b.addr, sizeof a.addr))
		return c;
	if (a.port != b.port)
		return a.port < b.port ? -1 : 1;
	return 0;
}

struct RdmAddrHash {
	size_t operator()(const RdmAddr &a) const noexcept
	{
		// splitmix64's finaliser over family/port and the two address halves.
		auto mix = [](uint64_t x) {
			x ^= x >> 30;
			x *= 0xbf58476d1ce4e5b9ULL;
			x ^= x >> 27;
			x *= 0x94d049bb133111ebULL;
			return x ^ (x >> 31);
		};
		uint64_t w0, w1;
		memcpy(&w0, a.addr, 8);
		memcpy(&w1, a.addr + 8, 8);
		uint64_t h = mix(uint64_t(a.family) << 16 | a.port);
		h = mix(h ^ w0);
		return static_cast<size_t>(mix(h ^ w1));
	}
};

// sockaddr_in / sockaddr_in6 -> canonical RdmAddr. len is the caller's buffer
// length (it must hold the family's whole struct). False for another family, a
// short buffer or an IPv6 scope id.
bool from_sockaddr(const sockaddr *sa, size_t len, RdmAddr &out) noexcept;

// RdmAddr -> sockaddr_in (AF_INET) or sockaddr_in6 (AF_INET6, flowinfo and
// scope 0), zero-filled around it. Returns the sockaddr's length, 0 (out
// untouched) if a is not valid.
size_t to_sockaddr(const RdmAddr &a, sockaddr_storage &out) noexcept;

// libfabric's FI_ADDR_STR form, as its fi_av_straddr writes it:
//   fi_sockaddr_in://1.2.3.4:5678
//   fi_sockaddr_in6://[::1]:5678
// (an IPv4-mapped IPv6 address is written in the first form: see RdmAddr).
// kAddrStrMax holds the longest one and its NUL.
inline constexpr size_t kAddrStrMax =
	sizeof("fi_sockaddr_in6://[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535");

// Writes a's string and a NUL into buf, truncated to size - 1 characters
// (nothing when size is 0), like snprintf. Returns the whole string's length
// without the NUL, which is >= size when it was truncated; 0 if a is not
// valid (buf then holds "" when size > 0).
size_t format_addr(const RdmAddr &a, char *buf, size_t size) noexcept;

// Parses the FI_ADDR_STR form (the exact prefixes above, a numeric address as
// inet_pton takes it, in brackets for IPv6, then ':' and a decimal port of 1-5
// digits up to 65535, nothing after). Stricter than libfabric's own parser,
// which takes a missing address or port as 0: here both are required. No
// scope ("%eth0"), no host names. The result is canonical; port 0 and the
// unspecified address parse (they are addresses, just not connectable ones).
bool parse_addr(std::string_view s, RdmAddr &out) noexcept;

// fi_av_insertsvc / fi_av_insertsym's node and service: a numeric IPv4 or
// IPv6 address (no brackets, no host names: rdma_cm addresses are resolved by
// the application) and a decimal port.
bool parse_node_service(const char *node, const char *service, RdmAddr &out) noexcept;

// fi_av_insertsym's address number node_index * svccnt + service_index: base
// with the IP address, read as one big-endian integer, increased by node_index
// and the port by service_index. False if either runs past its last value
// (255.255.255.255, ffff:...:ffff, port 65535) or base is not valid.
bool nth_addr(const RdmAddr &base, uint64_t node_index, uint64_t service_index,
	      RdmAddr &out) noexcept;

// ---------------------------------------------------------------------------
// Connection header: the rdma_cm private data of an RDM connect request, of
// the acceptor's answer (rdma_accept) with kConnFlagAccept, and of a reject
// that tells the initiator what to do (kConnFlagCrossing, kConnFlagBusy,
// kConnFlagChallenge).
//
//   0  u8   kConnMagic (differs from the MSG endpoint's wire::kCmMagic, so
//           neither kind of endpoint accepts the other's requests)
//   1  u8   kConnVersion
//   2  u8   flags, low byte (kConnFlag* below 1 << 8)
//   3  u8   family of addr: 4 or 6 (wire_family)
//   4  u16  port of addr
//   6  u8   flags, high byte (kConnFlag* from 1 << 8)
//   7  u8   reserved, 0
//   8  16   addr: the sender's own listening address, network order (IPv4 in
//           the first 4 bytes, the rest 0)
//   24 u64  nonce: the sender endpoint's instance id, random, never 0
//   32
// What follows depends on the message (conn_header_bytes):
//  - request, kConnFlagAsk (conn_auth.h): 16 bytes, the initiator's fresh
//    challenge (48); never the table;
//  - request, kConnFlagAuth: u64 cookie, 16 bytes answer (56: all an IB/RoCE
//    request has). Its kConnFlagKeyTable says that the table follows in a
//    KeyTable message;
//  - other requests, kConnFlagKeyTable: the table (48);
//  - answer (kConnFlagAccept), kConnFlagAuth: 16 bytes proof, then the table
//    with kConnFlagKeyTable (48 or 64);
//  - answer without kConnFlagAuth: the table with kConnFlagKeyTable (32 or 48);
//  - reject with kConnFlagChallenge: u64 cookie, 16 bytes the acceptor's
//    proof over the initiator's challenge (56); other rejects: 32.
//    A reject never carries the table.
// The table is the sender's scalable-key table (key_table.h):
//   +0  u64  addr of the table
//   +8  u32  rkey of the table (remote read)
//   +12 u32  bucket count: a power of two, at most 2^20
//   +16
//
// The address is the sender's *listening* address (what its fi_getname
// returns and peers insert into their AVs), not the source address of the
// connection, which has an ephemeral port: the acceptor looks it up in its AV
// (AvTable::reverse) to report FI_SOURCE, and to find its own state for that
// peer.
//
// The nonce, drawn once per endpoint (draw again on 0), tells:
//  - a restarted peer: a request from a known address with another nonce
//    comes from a new incarnation; what was kept for the old one (the
//    connection, message ids, acknowledgements due) is stale;
//  - which of two crossing connections to keep (keep_initiated).
inline constexpr uint8_t kConnMagic = 0xA8;
inline constexpr uint8_t kConnVersion = 1;
inline constexpr size_t kConnHeaderBytes = 32;
inline constexpr size_t kConnKeyTableBytes = 16;
inline constexpr size_t kConnCookieBytes = 8;
inline constexpr size_t kConnMacBytes = 16;
// rdma_cm leaves 56 bytes of an IB/RoCE connect request (REQ) to its user,
// 196 of an answer (REP) and 148 of a reject (REJ).
inline constexpr size_t kConnPrivateDataMax = 56;
inline constexpr size_t kConnAnswerMax = 196;
inline constexpr size_t kConnRejectMax = 148;
// The most any of them holds here (an authenticated answer with its table).
inline constexpr size_t kConnHeaderMax = kConnHeaderBytes + kConnMacBytes + kConnKeyTableBytes;
static_assert(kConnHeaderBytes + kConnCookieBytes + kConnMacBytes <= kConnPrivateDataMax &&
		      kConnHeaderBytes + kConnKeyTableBytes <= kConnPrivateDataMax,
	      "every connect request fits an RC REQ's private data");
static_assert(kConnHeaderMax <= kConnAnswerMax &&
		      kConnHeaderBytes + kConnCookieBytes + kConnMacBytes <= kConnRejectMax,
	      "answers fit a REP, rejects a REJ");

// Flags are capabilities and roles: a receiver ignores the ones it does not
// know (decode passes them through), so a newer peer may announce more.
inline constexpr uint16_t kConnFlagAccept = 1 << 0; // this is the acceptor's answer
// In a reject's private data: two connections crossed and the rejecting side
// keeps its own (keep_initiated); the rejected side waits for it instead of
// reporting a failure.
inline constexpr uint16_t kConnFlagCrossing = 1 << 1;
// The sender counts RMA events (FI_RMA_EVENT): the peer follows each of its
// RMA operations with an RmaEvent message.
inline constexpr uint16_t kConnFlagRmaEvents = 1 << 2;
// The sender's domain publishes scalable keys: its key table follows (or,
// in an authenticated request, comes in a KeyTable message).
inline constexpr uint16_t kConnFlagKeyTable = 1 << 3;
// The sender is an FI_RMA_PMEM endpoint: it answers CommitRequests.
inline constexpr uint16_t kConnFlagCommitService = 1 << 4;
// The sender's domain declared that RDMA writes land in its persistence
// domain (fi_vrma_domain_ops::set_direct_write_to_pmem): a read-back after
// the writes makes them durable, no request needed.
inline constexpr uint16_t kConnFlagDirectWritePmem = 1 << 5;
// The sender's 64-bit integer atomics run on its device
// (FI_VRMA_RDM_NATIVE_ATOMICS): a peer uses device atomics for the ops the
// device has, and the sender refuses (Unsupported) emulated requests on
// 64-bit integers, which its CPU would run unatomically with the device's.
inline constexpr uint16_t kConnFlagNativeAtomics = 1 << 6;
// A request: the cookie of the acceptor's challenge and the answer follow;
// an answer: the acceptor's proof follows (conn_auth.h).
inline constexpr uint16_t kConnFlagAuth = 1 << 8;
// In a reject: the acceptor requires a job key; its cookie follows, to be
// answered in the next request, and its proof of the key.
inline constexpr uint16_t kConnFlagChallenge = 1 << 9;
// In a reject: the claimed address has a live connection here, which the
// acceptor is probing; the initiator tries again a little later (a restarted
// peer gets in once the probe has failed the old connection).
inline constexpr uint16_t kConnFlagBusy = 1 << 10;
// A request: the initiator holds a job key; its fresh challenge follows, to
// be proved in the acceptor's kConnFlagChallenge reject.
inline constexpr uint16_t kConnFlagAsk = 1 << 11;
// The sender closes with a Close message (below) before it disconnects, and
// takes one from the peer.
inline constexpr uint16_t kConnFlagClose = 1 << 12;
// The sender takes Idle messages (below): a connection nothing uses may be
// closed by agreement and made again on demand.
inline constexpr uint16_t kConnFlagIdle = 1 << 13;
static_assert(24 + sizeof(uint64_t) == kConnHeaderBytes, "the nonce ends the header");

// Where a peer's scalable-key table is (key_table.h).
struct KeyTableRef {
	uint64_t addr = 0;
	uint32_t rkey = 0;
	uint32_t buckets = 0; // 0: none
};

inline constexpr bool valid_key_table_buckets(uint32_t n) noexcept
{
	return n != 0 && n <= (1u << 20) && (n & (n - 1)) == 0;
}

struct RdmConnHeader {
	uint16_t flags = 0;
	RdmAddr addr;       // sender's listening address; connectable()
	uint64_t nonce = 0; // sender's instance id; not 0
	KeyTableRef key_table; // with kConnFlagKeyTable, where it is inline
	uint64_t cookie = 0;   // request with kConnFlagAuth, reject with kConnFlagChallenge
	// kConnFlagAsk: the challenge; kConnFlagAuth: the answer (request) or
	// the proof (answer); kConnFlagChallenge: the proof
	std::array<uint8_t, kConnMacBytes> mac{};
};

inline constexpr bool conn_is_reject(uint16_t flags) noexcept
{
	return flags & (kConnFlagCrossing | kConnFlagBusy | kConnFlagChallenge);
}

// Whether the key table travels in this header (see the layout above).
inline constexpr bool conn_table_inline(uint16_t flags) noexcept
{
	return (flags & kConnFlagKeyTable) && !conn_is_reject(flags) &&
	       ((flags & kConnFlagAccept) || !(flags & (kConnFlagAuth | kConnFlagAsk)));
}

// Where each part follows the 32-byte header (0: absent) and the bytes in
// all, by the flags: the one statement of the layout above, which
// conn_header_bytes, encode and decode share.
struct ConnLayout {
	size_t cookie = 0, mac = 0, table = 0, bytes = kConnHeaderBytes;
};
inline constexpr ConnLayout conn_layout(uint16_t flags) noexcept
{
	ConnLayout l;
	auto take = [&l](size_t &at, size_t n) {
		at = l.bytes;
		l.bytes += n;
	};
	const bool answer = flags & kConnFlagAccept;
	if (conn_is_reject(flags)) {
		if (flags & kConnFlagChallenge) {
			take(l.cookie, kConnCookieBytes);
			take(l.mac, kConnMacBytes);
		}
		return l;
	}
	if ((flags & kConnFlagAuth) && !answer)
		take(l.cookie, kConnCookieBytes);
	if ((flags & kConnFlagAuth) || ((flags & kConnFlagAsk) && !answer))
		take(l.mac, kConnMacBytes);
	if (conn_table_inline(flags))
		take(l.table, kConnKeyTableBytes);
	return l;
}

inline constexpr size_t conn_header_bytes(const RdmConnHeader &h) noexcept
{
	return conn_layout(h.flags).bytes;
}

// More than one kind of reject at once.
inline constexpr bool conn_rejects_clash(uint16_t flags) noexcept
{
	const uint16_t r = flags & (kConnFlagCrossing | kConnFlagBusy | kConnFlagChallenge);
	return (r & (r - 1)) != 0;
}

// Writes conn_header_bytes(h) into buf. False (nothing written) if h.addr is
// not connectable, h.nonce is 0, a table that travels has no valid bucket
// count, or the flags name two kinds of reject: the peer would refuse it.
inline bool encode_conn_header(uint8_t *buf, const RdmConnHeader &h) noexcept
{
	const ConnLayout l = conn_layout(h.flags);
	if (!connectable(h.addr) || h.nonce == 0 || conn_rejects_clash(h.flags) ||
	    (l.table && !valid_key_table_buckets(h.key_table.buckets)))
		return false;
	buf[0] = kConnMagic;
	buf[1] = kConnVersion;
	buf[2] = static_cast<uint8_t>(h.flags);
	buf[3] = wire_family(h.addr.family);
	le::put16(buf + 4, h.addr.port);
	buf[6] = static_cast<uint8_t>(h.flags >> 8);
	buf[7] = 0;
	memcpy(buf + 8, h.addr.addr, 16);
	le::put64(buf + 24, h.nonce);
	if (l.cookie)
		le::put64(buf + l.cookie, h.cookie);
	if (l.mac)
		memcpy(buf + l.mac, h.mac.data(), kConnMacBytes);
	if (l.table) {
		le::put64(buf + l.table, h.key_table.addr);
		le::put32(buf + l.table + 8, h.key_table.rkey);
		le::put32(buf + l.table + 12, h.key_table.buckets);
	}
	return true;
}

// Parses private data of len bytes (rdma_cm pads it to the transport's
// maximum, so longer is fine). Refuses a non-canonical or unconnectable
// address, a zero nonce, two kinds of reject at once and data shorter than
// its flags say, as well as the usual.
inline bool decode_conn_header(const uint8_t *buf, size_t len, RdmConnHeader &h) noexcept
{
	if (!buf || len < kConnHeaderBytes || buf[0] != kConnMagic || buf[1] != kConnVersion ||
	    buf[7] != 0)
		return false;
	RdmAddr a;
	if (buf[3] == 4)
		a.family = AF_INET;
	else if (buf[3] == 6)
		a.family = AF_INET6;
	else
		return false;
	a.port = le::get16(buf + 4);
	memcpy(a.addr, buf + 8, 16);
	const uint64_t nonce = le::get64(buf + 24);
	const uint16_t flags = static_cast<uint16_t>(buf[2] | buf[6] << 8);
	const ConnLayout l = conn_layout(flags);
	if (!connectable(a) || nonce == 0 || conn_rejects_clash(flags) || len < l.bytes)
		return false;
	h = RdmConnHeader{};
	h.flags = flags;
	h.addr = a;
	h.nonce = nonce;
	if (l.cookie)
		h.cookie = le::get64(buf + l.cookie);
	if (l.mac)
		memcpy(h.mac.data(), buf + l.mac, kConnMacBytes);
	if (l.table) {
		h.key_table = {le::get64(buf + l.table), le::get32(buf + l.table + 8), le::get32(buf + l.table + 12)};
		if (!valid_key_table_buckets(h.key_table.buckets))
			return false;
	}
	return true;
}

// Two endpoints that connect to each other at once end up with two
// connections; each keeps exactly one, the same one: the connection initiated
// by the side whose (address, nonce) is smaller (compare(), then the nonce).
// Returns true when the connection self initiated is the one to keep (and the
// one it accepted from peer is to be dropped), false for the reverse.
//
// Both sides must order the same two pairs: self is what the caller put in
// its own RdmConnHeader, peer what it decoded from the peer's (not the AV's
// entry, which may be spelled differently or stale). For distinct pairs,
// keep_initiated(a, b) == !keep_initiated(b, a). Equal pairs are an endpoint
// that connected to itself: one connection seen from both ends, nothing to
// drop; the caller must recognise that case first (false is returned).
inline bool keep_initiated(const RdmAddr &self, uint64_t self_nonce, const RdmAddr &peer,
			   uint64_t peer_nonce) noexcept
{
	const int c = compare(self, peer);
	return c < 0 || (c == 0 && self_nonce < peer_nonce);
}

// ---------------------------------------------------------------------------
// Message header: the first kRdmHeaderBytes of every send on an RDM
// connection.
//
//   0  u8   type (MsgType)
//   1  u8   kRdmVersion
//   2  u8   flags (kFlag*), only those allowed for the type
//   3  u8   status: RndvDone's RndvStatus, RmaEvent's RmaKind,
//           AtomicResponse's AtomicStatus, CommitAnswer's CommitStatus,
//           KeyAnswer's KeyStatus, Flow's FlowStatus; 0 in every other type
//   4  u32  msg_id
//   8  u64  tag: the tagged types' tag; 0 otherwise
//   16 u64  cq_data: remote CQ data if kFlagCqData; 0 otherwise
//   24 u64  length: the message's total length (Eager*, Rndv*), the bytes
//           moved (RmaEvent), the element count (AtomicRequest), the bytes
//           of fetched data after the header (AtomicResponse), the bytes
//           the ranges hold (CommitRequest); 0 otherwise
//   32
//
// The types:
//  - Eager, EagerTagged: the message's payload follows the header. A message
//    longer than one receive buffer is cut into pieces, each a send with its
//    own header carrying the same type, msg_id, tag, cq_data, length and
//    flags except kFlagLastPiece, which only the final piece has (a one-piece
//    message has it too). The pieces of one message are sent back to back on
//    the connection (RC keeps them in order); the payload of a piece is what
//    the receive got minus the header. Every piece carries at least one byte,
//    except the only piece of an empty message. kFlagLastPiece is redundant
//    with length on purpose: the receiver checks that they agree (a piece
//    that ends the message without the flag, or the flag before the end, is
//    a protocol error).
//  - RndvRequest, RndvRequestTagged: a message too long for eager; the
//    header is followed by the rendezvous body (encode_rndv_request): where
//    the receiver reads the payload from, by RDMA read. The receiver answers
//    with RndvDone once it is done reading (or gave up), after which the
//    sender may complete its send and reuse its buffer.
//  - RndvDone: msg_id is the request's; status says how the reads went.
//    The payload has landed when it is sent, so it doubles as the delivery
//    acknowledgement of the message (kFlagDeliveryComplete needs no more).
//  - DeliveryAck: msg_id is that of an Eager* message sent with
//    kFlagDeliveryComplete, which the receiver has placed in the
//    application's buffer (or discarded, which counts as delivered).
//  - RmaEvent: follows the RDMA WRITEs or READs of one RMA operation on the
//    same connection (RC delivers it after their data was placed or read):
//    the target reports the operation's remote CQ data (kFlagCqData) and
//    counts it (FI_RMA_EVENT). status is the RmaKind; length the bytes the
//    operation moved; msg_id 0. The body (encode_rma_event) names the keys of
//    the target regions the operation touched.
//  - AtomicRequest: an atomic operation (fi_atomic, fi_fetch_atomic,
//    fi_compare_atomic) for the target's CPU to execute on its memory. The
//    body (encode_atomic_request) says which op on which datatype, where
//    (segments of the target's regions), and carries the operand and compare
//    arrays. msg_id is the initiator's request id, never 0; length the total
//    element count, never 0; kFlagCqData: the target reports cq_data as
//    remote CQ data once it applied the operation.
//  - AtomicResponse: answers an AtomicRequest once the target executed it
//    (or refused it): msg_id is the request's, status an AtomicStatus. With
//    Ok, the old values of a Fetch or Compare request follow the header
//    (length bytes: its element count times the datatype's size, which the
//    initiator checks against its request), nothing for Plain; with any
//    other status nothing follows (length 0).
//  - CommitRequest: follows the RDMA WRITEs of an FI_COMMIT_COMPLETE
//    operation on the same connection (RC delivers it after their data was
//    placed): the target makes the written ranges durable and answers with
//    CommitAnswer. msg_id is the initiator's request id, never 0; length the
//    bytes the ranges hold, never 0. It stands for the RmaEvent of the
//    operation too: the target counts it (FI_RMA_EVENT) and reports its
//    remote CQ data (kFlagCqData). The body
//    (encode_commit_request) names the ranges as device keys and virtual
//    addresses.
//  - CommitAnswer: answers a CommitRequest once the ranges are durable (or
//    could not be made so): msg_id is the request's, status a CommitStatus;
//    nothing follows.
//  - KeyRequest: asks for the translation of one of the target's keys whose
//    region the target has not registered with its device yet (registered
//    on demand, see key_table.h's kAccessUnregistered): the target registers
//    it now and answers with KeyAnswer. msg_id is the initiator's request
//    id, never 0; length 0; the body (encode_key_request) names the key.
//  - KeyAnswer: answers a KeyRequest: msg_id is the request's, status a
//    KeyStatus; the body (encode_key_answer) is the region's key entry
//    (key_table.h's fields) with Ok, the key alone otherwise.
//  - KeyTable: where the sender's scalable-key table is (the body is a
//    KeyTableRef: u64 addr, u32 rkey, u32 buckets). Sent once, when the
//    connection is up, by an initiator whose authenticated connect request
//    had no room for it (kConnFlagAuth with kConnFlagKeyTable); from anyone
//    else, or twice, it is malformed. msg_id 0, length 0.
//  - Flow: the receiver's back-pressure on the connection's messages
//    (src/rx_budget.h). status Pause: the sender's unexpected messages
//    exceed what the receiver keeps; the sender sends no more Eager* or
//    Rndv* messages on this connection until Resume (what it had under way
//    still arrives, within the receiver's grace; more is a protocol error
//    that drops the connection). status Resume: it may send again. Nothing
//    else is paused (answers, RMA, atomics). A new connection starts
//    resumed. msg_id 0, length 0, nothing follows.
//  - Close: the sender's endpoint is closing; `length` is the number of
//    messages (requests that consumed one of its receive buffers: sends,
//    writes with immediate data) it received on this connection. RC delivers
//    in order, so they are the first `length` the other side posted, and
//    every request posted before the last of them was executed: when the
//    sender then disconnects, the other side completes those of its requests
//    the disconnect flushes as done instead of failing them (a message whose
//    acknowledgment was still under way; close_settle below). Sent once, only
//    to a peer whose connection header had kConnFlagClose; twice, or counting
//    more messages than were sent, it is malformed. msg_id 0, nothing
//    follows.
//  - Idle: closing a connection neither side uses, by agreement (sent only
//    to a peer whose connection header had kConnFlagIdle). status Query:
//    the sender has had nothing under way and sent nothing on it for
//    `length` milliseconds (its FI_VRMA_RDM_IDLE_TIMEOUT) and asks to close
//    it. The receiver answers once: Agree (it has nothing under way either
//    and sent nothing for as long; from now on it starts no operation on
//    the connection until it ends or a Resume comes) or Refuse. Two Queries
//    that cross: the one of the side keep_initiated() favours stands, the
//    other is void and never answered. After an Agree the asker either
//    disconnects (nothing was posted on the connection since its Query) or
//    sends Resume: the connection stays. msg_id 0, nothing follows; length
//    0 but in a Query. An answer or Resume without its Query or Agree, or
//    a Query while one is agreed, is malformed.
//
// msg_id: chosen by the message's sender, unique among its messages on that
// connection still waiting for an answer (a wrapping counter per connection
// does); the answers (RndvDone, DeliveryAck, AtomicResponse, CommitAnswer,
// KeyAnswer) carry the id of the message they answer, as the other side
// chose it.
inline constexpr uint8_t kRdmVersion = 1;
inline constexpr size_t kRdmHeaderBytes = 32;
static_assert(24 + sizeof(uint64_t) == kRdmHeaderBytes, "length ends the header");

enum class MsgType : uint8_t {
	Eager = 1,
	EagerTagged = 2,
	RndvRequest = 3,
	RndvRequestTagged = 4,
	RndvDone = 5,
	DeliveryAck = 6,
	RmaEvent = 7,
	// 8, 9: never assigned (refused)
	AtomicRequest = 10,
	AtomicResponse = 11,
	CommitRequest = 12,
	CommitAnswer = 13,
	KeyRequest = 14,
	KeyAnswer = 15,
	KeyTable = 16,
	Flow = 17,
	Close = 18,
	Idle = 19,
};
inline constexpr uint8_t kMsgTypeMax = 19;

inline constexpr uint8_t kFlagCqData = 1 << 0;            // cq_data is remote CQ data
inline constexpr uint8_t kFlagDeliveryComplete = 1 << 1;  // answer with DeliveryAck
inline constexpr uint8_t kFlagLastPiece = 1 << 2;         // an eager message's final piece

enum class RndvStatus : uint8_t {
	Ok = 0,          // read (also: the receiver truncated or discarded it; the
			 // sender's send succeeded either way)
	AccessError = 1, // a read was refused (remote access error: key or range)
	Failed = 2,      // the receiver could not read for another reason
};
inline constexpr uint8_t kRndvStatusMax = 2;

// An RmaEvent's status: what the operation did to the target's memory.
enum class RmaKind : uint8_t {
	Write = 1,
	Read = 2,
	AtomicWrite = 3, // an atomic that updates (FI_ATOMIC entries at the target)
	AtomicRead = 4,  // FI_ATOMIC_READ
};
inline constexpr bool rma_kind_writes(uint8_t kind) noexcept
{
	return kind == static_cast<uint8_t>(RmaKind::Write) ||
	       kind == static_cast<uint8_t>(RmaKind::AtomicWrite);
}
inline constexpr bool rma_kind_atomic(uint8_t kind) noexcept
{
	return kind == static_cast<uint8_t>(RmaKind::AtomicWrite) ||
	       kind == static_cast<uint8_t>(RmaKind::AtomicRead);
}

// An AtomicResponse's status.
enum class AtomicStatus : uint8_t {
	Ok = 0,
	AccessError = 1, // unknown key, out of the region, region lacks the access
	Unsupported = 2, // an op/datatype the target cannot do
};
inline constexpr uint8_t kAtomicStatusMax = 2;

// A CommitAnswer's status, and the ranges of a CommitRequest: commit.h's,
// shared with MSG endpoints.
using wire::CommitRange;
using wire::CommitStatus;
using wire::kCommitStatusMax;
using wire::kMaxCommitRanges;

// A KeyAnswer's status.
enum class KeyStatus : uint8_t {
	Ok = 0,
	Absent = 1, // no region with that key is open for remote access
	Failed = 2, // the target could not register the region (memory, limits)
};
inline constexpr uint8_t kKeyStatusMax = 2;

// A Flow message's status.
enum class FlowStatus : uint8_t {
	Pause = 1,
	Resume = 2,
};

// An Idle message's status.
enum class IdleStatus : uint8_t {
	Query = 1,
	Agree = 2,
	Refuse = 3,
	Resume = 4,
};

struct RdmHeader {
	MsgType type = MsgType::Eager;
	uint8_t flags = 0;
	uint8_t status = 0; // RndvDone, RmaEvent and AtomicResponse only
	uint32_t msg_id = 0;
	uint64_t tag = 0;
	uint64_t cq_data = 0;
	uint64_t length = 0;
};

inline constexpr bool is_tagged(MsgType t) noexcept
{
	return t == MsgType::EagerTagged || t == MsgType::RndvRequestTagged;
}
inline constexpr bool is_eager(MsgType t) noexcept
{
	return t == MsgType::Eager || t == MsgType::EagerTagged;
}
inline constexpr bool is_rndv_request(MsgType t) noexcept
{
	return t == MsgType::RndvRequest || t == MsgType::RndvRequestTagged;
}

// The flags a type may carry. A rendezvous request may carry
// kFlagDeliveryComplete (the application asked for it), though its RndvDone
// answers it anyway.
inline constexpr uint8_t allowed_flags(MsgType t) noexcept
{
	if (is_eager(t))
		return kFlagCqData | kFlagDeliveryComplete | kFlagLastPiece;
	if (is_rndv_request(t))
		return kFlagCqData | kFlagDeliveryComplete;
	if (t == MsgType::RmaEvent || t == MsgType::CommitRequest || t == MsgType::AtomicRequest)
		return kFlagCqData;
	return 0;
}

// The statuses a type may carry.
inline constexpr bool status_allowed(MsgType t, uint8_t status) noexcept
{
	switch (t) {
	case MsgType::RndvDone:
		return status <= kRndvStatusMax;
	case MsgType::RmaEvent:
		return status >= static_cast<uint8_t>(RmaKind::Write) &&
		       status <= static_cast<uint8_t>(RmaKind::AtomicRead);
	case MsgType::AtomicResponse:
		return status <= kAtomicStatusMax;
	case MsgType::CommitAnswer:
		return status <= kCommitStatusMax;
	case MsgType::KeyAnswer:
		return status <= kKeyStatusMax;
	case MsgType::Flow:
		return status == static_cast<uint8_t>(FlowStatus::Pause) ||
		       status == static_cast<uint8_t>(FlowStatus::Resume);
	case MsgType::Idle:
		return status >= static_cast<uint8_t>(IdleStatus::Query) &&
		       status <= static_cast<uint8_t>(IdleStatus::Resume);
	default:
		return status == 0;
	}
}

// Writes kRdmHeaderBytes into buf.
inline void encode_header(uint8_t *buf, const RdmHeader &h) noexcept
{
	buf[0] = static_cast<uint8_t>(h.type);
	buf[1] = kRdmVersion;
	buf[2] = h.flags;
	buf[3] = h.status;
	le::put32(buf + 4, h.msg_id);
	le::put64(buf + 8, h.tag);
	le::put64(buf + 16, h.cq_data);
	le::put64(buf + 24, h.length);
}

// The fields that differ between an application's eager messages, written
// into a header that encode_header filled once with the rest at their
// values for such a message (version, status 0, msg_id 0): the send fast
// path's prebuilt header (Conn::one_hdr). Afterwards buf holds what
// encode_header writes for {type, flags, 0, 0, tag, cq_data, length}.
inline void patch_eager_header(uint8_t *buf, MsgType type, uint8_t flags, uint64_t tag,
			       uint64_t cq_data, uint64_t length) noexcept
{
	buf[0] = static_cast<uint8_t>(type);
	buf[2] = flags;
	le::put64(buf + 8, tag);
	le::put64(buf + 16, cq_data);
	le::put64(buf + 24, length);
}

// Rendezvous body, after the header of an Rndv* request:
//
//   0  u8   count: 1..kMaxRndvSegments
//   1  7    reserved, 0
//   8       count segments of 24 bytes:
//           0 u64 addr, 8 u64 len (> 0), 16 u32 rkey, 20 u32 reserved (0)
//
// The segments, in order, hold the message (the header's length is their sum:
// the sender leaves out empty iov entries). The message's total length and
// the sender's message id are the header's length and msg_id.
inline constexpr size_t kMaxRndvSegments = 4;
inline constexpr size_t kRndvBodyHeadBytes = 8;
inline constexpr size_t kRndvSegmentBytes = 24;
inline constexpr size_t kRndvMsgMin = kRdmHeaderBytes + kRndvBodyHeadBytes + kRndvSegmentBytes;
inline constexpr size_t kRndvMsgMax =
	kRdmHeaderBytes + kRndvBodyHeadBytes + kMaxRndvSegments * kRndvSegmentBytes;
static_assert(kRndvMsgMax == 136, "the rendezvous request is a wire format");

inline constexpr size_t rndv_msg_bytes(size_t count) noexcept
{
	return kRdmHeaderBytes + kRndvBodyHeadBytes + count * kRndvSegmentBytes;
}

struct RndvSegment {
	uint64_t addr = 0; // remote virtual address (or offset, as the MR mode says)
	uint64_t len = 0;
	uint32_t rkey = 0;
};

// RmaEvent body, after the header:
//
//   0  u8   count: 0..kMaxRmaEventKeys (0: the operation touched no region,
//           a zero-length one)
//   1  7    reserved, 0
//   8       count keys, u64 each: the target regions' device keys (rkeys,
//           which are fi_mr_key unless the domain uses scalable keys), each
//           once
inline constexpr size_t kMaxRmaEventKeys = 16;
inline constexpr size_t kRmaEventBodyHeadBytes = 8;
inline constexpr size_t kRmaEventMsgMax =
	kRdmHeaderBytes + kRmaEventBodyHeadBytes + kMaxRmaEventKeys * sizeof(uint64_t);
static_assert(kRmaEventMsgMax == 168, "the RMA event is a wire format");

// AtomicRequest body, after the header:
//
//   0  u8   op (enum fi_op)
//   1  u8   datatype (enum fi_datatype)
//   2  u8   kind (atomic::Kind: 0 Plain, 1 Fetch, 2 Compare); the three are
//           a combination atomic::valid() takes
//   3  u8   nseg: 1..kMaxAtomicSegments
//   4  u32  reserved, 0
//   8       nseg segments of 24 bytes, the target's elements in order:
//           0 u64 addr, 8 u64 count (elements, > 0), 16 u64 key
//           then the operand array: the header's length elements of the
//           datatype (atomic::datatype_size each), host representation;
//           absent for FI_ATOMIC_READ
//           then the compare array (Compare only), as long
//
// The segments' counts add up to the header's length. Element i of the
// arrays goes with the i-th element of the segments taken in order. The
// elements (here and in the AtomicResponse) travel as the host stores them,
// unconverted, so that the target can apply them in place: little-endian
// integers and IEEE floats on the little-endian hosts vrma runs on, but
// long double in the host's own format (x87's 80 bits in 16 bytes on
// x86-64), which only a peer of the same architecture shares.
inline constexpr size_t kMaxAtomicSegments = 4;
inline constexpr size_t kAtomicBodyHeadBytes = 8;
inline constexpr size_t kAtomicSegmentBytes = 24;
inline constexpr size_t kAtomicRequestMin =
	kRdmHeaderBytes + kAtomicBodyHeadBytes + kAtomicSegmentBytes;

// Where the operand array starts in a request with nseg segments.
inline constexpr size_t atomic_request_head_bytes(size_t nseg) noexcept
{
	return kRdmHeaderBytes + kAtomicBodyHeadBytes + nseg * kAtomicSegmentBytes;
}

// How many arrays of the elements follow the segments: the operand unless
// op is FI_ATOMIC_READ, and the compare for Compare.
inline constexpr size_t atomic_request_arrays(atomic::Kind kind, int op) noexcept
{
	return (op != FI_ATOMIC_READ ? 1 : 0) + (kind == atomic::Kind::Compare ? 1 : 0);
}

// A whole request's bytes: head, operand and compare arrays for count
// elements; SIZE_MAX if that overflows. kind, op and datatype must be valid.
inline size_t atomic_request_bytes(atomic::Kind kind, int op, int datatype, size_t nseg,
				   uint64_t count) noexcept
{
	const size_t head = atomic_request_head_bytes(nseg);
	const size_t element = atomic_request_arrays(kind, op) * atomic::datatype_size(datatype);
	if (element && count > (SIZE_MAX - head) / element)
		return SIZE_MAX;
	return head + static_cast<size_t>(count) * element;
}

// The most bytes of elements one AtomicRequest names (its total count times
// the datatype's size): the initiator sizes a request so that its operand
// and the answer's old values each fit its eager size (rdm_atomic_max),
// never more than kEagerSizeMax. The decoder refuses more; the target
// also refuses, as Unsupported, an answer larger than its own result
// buffer (atomic_result_bytes).
inline constexpr size_t kAtomicDataMax = kEagerSizeMax;

struct AtomicSegment {
	uint64_t addr = 0;  // remote virtual address (or offset, as the MR mode says)
	uint64_t count = 0; // elements
	uint64_t key = 0;
};

// A request's body, decoded: the arrays point into the received buffer.
struct AtomicRequest {
	uint8_t op = 0;       // enum fi_op
	uint8_t datatype = 0; // enum fi_datatype
	atomic::Kind kind = atomic::Kind::Plain;
	size_t nseg = 0;
	AtomicSegment segs[kMaxAtomicSegments];
	const uint8_t *operand = nullptr; // nullptr for FI_ATOMIC_READ
	size_t operand_bytes = 0;
	const uint8_t *compare = nullptr; // Compare only
	size_t compare_bytes = 0;
	// The header's length (the total count) times the datatype's size, at
	// most kAtomicDataMax: each array's bytes, and the bytes of old values
	// a Fetch or Compare answer carries. Every segment's count times the
	// size is at most this too (the counts add up to the total).
	size_t data_bytes = 0;
};

// The bytes of old values the answer to a decoded request carries: its
// data_bytes for Fetch and Compare (FI_ATOMIC_READ included, which sends no
// array and so is bounded by nothing else), 0 for Plain.
inline size_t atomic_result_bytes(const AtomicRequest &r) noexcept
{
	return r.kind == atomic::Kind::Plain ? 0 : r.data_bytes;
}

// CommitRequest body, after the header:
//
//   0  u8   count: 1..kMaxCommitRanges
//   1  7    reserved, 0
//   8       count ranges of 24 bytes, each written by the operation:
//           0 u64 addr (virtual), 8 u64 len (> 0), 16 u64 key (device rkey)
//
// The ranges' lengths add up to the header's length. An operation that
// wrote nothing sends no request.
inline constexpr size_t kCommitBodyHeadBytes = 8;
inline constexpr size_t kCommitRangeBytes = 24;
inline constexpr size_t kCommitRequestMin =
	kRdmHeaderBytes + kCommitBodyHeadBytes + kCommitRangeBytes;
inline constexpr size_t kCommitRequestMax =
	kRdmHeaderBytes + kCommitBodyHeadBytes + kMaxCommitRanges * kCommitRangeBytes;
static_assert(kCommitRequestMax == 424, "the commit request is a wire format");

// KeyRequest body, after the header:
//
//   0  u64  key: the target's key (fi_mr_key of its region)
//   8  u8   access the initiator needs: keys::kAccessRemoteRead and/or
//           kAccessRemoteWrite
//   9  7    reserved, 0
//
// KeyAnswer body, after the header (always kKeyAnswerBodyBytes): the
// region's key-table entry as key_table.h lays out its fields
// (keys::encode_fields: key, va, start, len, rkey, access), then 3
// reserved bytes, 0. With Ok: a region of len > 0 that does not wrap the
// address space; access has a right, and kAccessUnregistered (with rkey
// 0) when the region lacks what the request needed, so that the target
// did not register it. With any other status every field but the key is
// 0.
inline constexpr size_t kKeyRequestBodyBytes = 16;
inline constexpr size_t kKeyAnswerBodyBytes = keys::kFieldBytes + 3;
inline constexpr size_t kKeyRequestBytes = kRdmHeaderBytes + kKeyRequestBodyBytes;
inline constexpr size_t kKeyAnswerBytes = kRdmHeaderBytes + kKeyAnswerBodyBytes;
static_assert(kKeyAnswerBytes == 72, "the key answer is a wire format");
inline constexpr uint8_t kKeyRights = keys::kAccessRemoteRead | keys::kAccessRemoteWrite;

// A key answer, decoded.
struct KeyAnswer {
	KeyStatus status = KeyStatus::Ok;
	keys::KeyEntry entry; // the key alone unless Ok
};

// A response, decoded: data points into the received buffer.
struct AtomicResponse {
	AtomicStatus status = AtomicStatus::Ok;
	const uint8_t *data = nullptr; // the old values (Ok, Fetch and Compare)
	size_t bytes = 0;
};

// Parses the header of a received send of len bytes (header and payload),
// checking what the header alone tells: for Eager*, that the piece's payload
// fits the message's length (and is not empty unless the message is); for
// RndvDone and DeliveryAck, that nothing follows; for Rndv* and
// AtomicRequest, that length is not 0 and the body's minimum follows (and
// for AtomicRequest, a msg_id); for AtomicResponse, a msg_id and length bytes
// of data, none unless the status is Ok. The bodies of Rndv* requests,
// RmaEvent and AtomicRequest are checked by decode_rndv_request,
// decode_rma_event and decode_atomic_request, which the caller uses for
// those types.
inline bool decode_header(const uint8_t *buf, size_t len, RdmHeader &h) noexcept
{
	if (len < kRdmHeaderBytes || buf[0] == 0 || buf[0] > kMsgTypeMax ||
	    buf[0] == 8 || buf[0] == 9 || buf[1] != kRdmVersion) // 8, 9: never assigned
		return false;
	h.type = static_cast<MsgType>(buf[0]);
	h.flags = buf[2];
	h.status = buf[3];
	h.msg_id = le::get32(buf + 4);
	h.tag = le::get64(buf + 8);
	h.cq_data = le::get64(buf + 16);
	h.length = le::get64(buf + 24);
	if ((h.flags & ~allowed_flags(h.type)) || (!is_tagged(h.type) && h.tag != 0) ||
	    (!(h.flags & kFlagCqData) && h.cq_data != 0))
		return false;
	if (!status_allowed(h.type, h.status))
		return false;
	const size_t payload = len - kRdmHeaderBytes;
	if (is_eager(h.type))
		return payload <= h.length &&
		       (payload > 0 || (h.length == 0 && (h.flags & kFlagLastPiece)));
	if (is_rndv_request(h.type))
		return h.length > 0 && len >= kRndvMsgMin;
	if (h.type == MsgType::RmaEvent)
		return h.msg_id == 0 && payload >= kRmaEventBodyHeadBytes;
	if (h.type == MsgType::AtomicRequest)
		return h.msg_id != 0 && h.length > 0 && len >= kAtomicRequestMin;
	if (h.type == MsgType::AtomicResponse)
		return h.msg_id != 0 && payload == h.length &&
		       (h.length == 0 || h.status == static_cast<uint8_t>(AtomicStatus::Ok));
	if (h.type == MsgType::CommitRequest)
		return h.msg_id != 0 && h.length > 0 && len >= kCommitRequestMin;
	if (h.type == MsgType::CommitAnswer)
		return h.msg_id != 0 && payload == 0 && h.length == 0;
	if (h.type == MsgType::KeyRequest)
		return h.msg_id != 0 && h.length == 0 && payload == kKeyRequestBodyBytes;
	if (h.type == MsgType::KeyAnswer)
		return h.msg_id != 0 && h.length == 0 && payload == kKeyAnswerBodyBytes;
	if (h.type == MsgType::KeyTable)
		return h.msg_id == 0 && h.length == 0 && payload == kConnKeyTableBytes;
	if (h.type == MsgType::Flow)
		return h.msg_id == 0 && h.length == 0 && payload == 0;
	if (h.type == MsgType::Close)
		return h.msg_id == 0 && payload == 0; // length: a count, bounded by its receiver
	if (h.type == MsgType::Idle)
		return h.msg_id == 0 && payload == 0 &&
		       (h.length == 0 || h.status == static_cast<uint8_t>(IdleStatus::Query));
	// RndvDone, DeliveryAck: answers, to ids that are never 0.
	return h.msg_id != 0 && payload == 0 && h.length == 0;
}

// The fixed-size records of a request's body (n of them, `stride` bytes
// apart from `first`), each with its length as a u64 at offset 8: true when
// none is 0, take(i, record, length) accepts each, and the lengths add up to
// `total` without overflowing. One walker for every decoder whose header's
// length is the sum of its segments.
template <typename Take>
inline bool walk_segments(const uint8_t *first, size_t n, size_t stride, uint64_t total,
			  Take &&take) noexcept
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *r = first + i * stride;
		const uint64_t len = le::get64(r + 8);
		if (len == 0 || len > UINT64_MAX - sum || !take(i, r, len))
			return false;
		sum += len;
	}
	return sum == total;
}

// Whether the n bytes at p are all 0 (reserved bytes).
inline bool all_zero(const uint8_t *p, size_t n) noexcept
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0)
			return false;
	return true;
}

// Writes an Rndv* request (h and count segments, 1..kMaxRndvSegments) into buf
// (kRndvMsgMax bytes); returns its length. h.length must be the segments' sum.
inline size_t encode_rndv_request(uint8_t *buf, const RdmHeader &h, const RndvSegment *segs,
				  size_t count) noexcept
{
	encode_header(buf, h);
	uint8_t *body = buf + kRdmHeaderBytes;
	memset(body, 0, kRndvBodyHeadBytes);
	body[0] = static_cast<uint8_t>(count);
	for (size_t i = 0; i < count; i++) {
		uint8_t *s = body + kRndvBodyHeadBytes + i * kRndvSegmentBytes;
		le::put64(s, segs[i].addr);
		le::put64(s + 8, segs[i].len);
		le::put32(s + 16, segs[i].rkey);
		le::put32(s + 20, 0);
	}
	return rndv_msg_bytes(count);
}

// Parses a whole Rndv* request of len bytes: the header as decode_header does,
// then exactly count segments (1..kMaxRndvSegments) into segs (room for
// kMaxRndvSegments), none empty, whose lengths add up to the header's length
// without overflowing.
inline bool decode_rndv_request(const uint8_t *buf, size_t len, RdmHeader &h, RndvSegment *segs,
				size_t &count) noexcept
{
	if (!decode_header(buf, len, h) || !is_rndv_request(h.type))
		return false;
	const uint8_t *body = buf + kRdmHeaderBytes;
	const size_t n = body[0];
	if (n == 0 || n > kMaxRndvSegments || len != rndv_msg_bytes(n) ||
	    !all_zero(body + 1, kRndvBodyHeadBytes - 1))
		return false;
	auto take = [segs](size_t i, const uint8_t *s, uint64_t slen) {
		segs[i] = {le::get64(s), slen, le::get32(s + 16)};
		return le::get32(s + 20) == 0;
	};
	if (!walk_segments(body + kRndvBodyHeadBytes, n, kRndvSegmentBytes, h.length, take))
		return false;
	count = n;
	return true;
}

// Writes an RmaEvent (h.type RmaEvent, h.status an RmaKind, h.msg_id 0;
// count keys, at most kMaxRmaEventKeys) into buf (kRmaEventMsgMax bytes);
// returns its length.
inline size_t encode_rma_event(uint8_t *buf, const RdmHeader &h, const uint64_t *keys,
			       size_t count) noexcept
{
	encode_header(buf, h);
	uint8_t *body = buf + kRdmHeaderBytes;
	memset(body, 0, kRmaEventBodyHeadBytes);
	body[0] = static_cast<uint8_t>(count);
	for (size_t i = 0; i < count; i++)
		le::put64(body + kRmaEventBodyHeadBytes + i * sizeof(uint64_t), keys[i]);
	return kRdmHeaderBytes + kRmaEventBodyHeadBytes + count * sizeof(uint64_t);
}

// Parses a whole RmaEvent of len bytes: the header as decode_header does,
// then exactly count keys (0..kMaxRmaEventKeys) into keys (room for
// kMaxRmaEventKeys).
inline bool decode_rma_event(const uint8_t *buf, size_t len, RdmHeader &h, uint64_t *keys,
			     size_t &count) noexcept
{
	if (!decode_header(buf, len, h) || h.type != MsgType::RmaEvent)
		return false;
	const uint8_t *body = buf + kRdmHeaderBytes;
	const size_t n = body[0];
	if (n > kMaxRmaEventKeys ||
	    len != kRdmHeaderBytes + kRmaEventBodyHeadBytes + n * sizeof(uint64_t) ||
	    !all_zero(body + 1, kRmaEventBodyHeadBytes - 1))
		return false;
	for (size_t i = 0; i < n; i++)
		keys[i] = le::get64(body + kRmaEventBodyHeadBytes + i * sizeof(uint64_t));
	count = n;
	return true;
}

// Writes an AtomicRequest (h.type AtomicRequest, h.msg_id not 0, h.length
// the segments' total count; r as decode_atomic_request checks it) into buf,
// atomic_request_bytes() long; returns that length. The arrays are copied
// from r.operand and r.compare, r.operand_bytes and r.compare_bytes long
// (the total count times the datatype's size, or 0 where the array is
// absent). Where one's pointer is nullptr (and its bytes are not 0) its space
// is left for the caller to fill: the operand at
// atomic_request_head_bytes(r.nseg), the compare after it.
inline size_t encode_atomic_request(uint8_t *buf, const RdmHeader &h,
				    const AtomicRequest &r) noexcept
{
	encode_header(buf, h);
	uint8_t *body = buf + kRdmHeaderBytes;
	body[0] = r.op;
	body[1] = r.datatype;
	body[2] = static_cast<uint8_t>(r.kind);
	body[3] = static_cast<uint8_t>(r.nseg);
	le::put32(body + 4, 0);
	for (size_t i = 0; i < r.nseg; i++) {
		uint8_t *s = body + kAtomicBodyHeadBytes + i * kAtomicSegmentBytes;
		le::put64(s, r.segs[i].addr);
		le::put64(s + 8, r.segs[i].count);
		le::put64(s + 16, r.segs[i].key);
	}
	uint8_t *p = buf + atomic_request_head_bytes(r.nseg);
	if (r.operand)
		memcpy(p, r.operand, r.operand_bytes);
	p += r.operand_bytes;
	if (r.compare)
		memcpy(p, r.compare, r.compare_bytes);
	return atomic_request_head_bytes(r.nseg) + r.operand_bytes + r.compare_bytes;
}

// Parses a whole AtomicRequest of len bytes: the header as decode_header
// does; an op, datatype and kind atomic::valid() takes (so each is one of
// the known enum values); 1..kMaxAtomicSegments segments, none empty, whose
// counts add up to the header's length without overflowing; that many
// elements of the datatype at most kAtomicDataMax bytes, whatever the op
// (FI_ATOMIC_READ carries no array that would bound its count); the
// reserved word 0; then exactly the arrays the op takes for that many
// elements. out's arrays point into buf.
inline bool decode_atomic_request(const uint8_t *buf, size_t len, RdmHeader &h,
				  AtomicRequest &out) noexcept
{
	if (!decode_header(buf, len, h) || h.type != MsgType::AtomicRequest)
		return false;
	const uint8_t *body = buf + kRdmHeaderBytes;
	const uint8_t op = body[0], datatype = body[1];
	const auto kind = static_cast<atomic::Kind>(body[2]);
	const size_t n = body[3];
	if (!atomic::valid(kind, op, datatype) || n == 0 || n > kMaxAtomicSegments ||
	    le::get32(body + 4) != 0 || len < atomic_request_head_bytes(n))
		return false;
	auto take = [&out](size_t i, const uint8_t *s, uint64_t count) {
		out.segs[i] = {le::get64(s), count, le::get64(s + 16)};
		return true;
	};
	if (!walk_segments(body + kAtomicBodyHeadBytes, n, kAtomicSegmentBytes, h.length, take))
		return false;
	size_t bytes = 0; // the elements', and each array's
	if (!checked_mul(h.length, atomic::datatype_size(datatype), bytes) || bytes > kAtomicDataMax)
		return false;
	// At most 2 arrays of at most kAtomicDataMax bytes: no overflow.
	if (len - atomic_request_head_bytes(n) != atomic_request_arrays(kind, op) * bytes)
		return false;
	const size_t head = atomic_request_head_bytes(n);
	out.op = op;
	out.datatype = datatype;
	out.kind = kind;
	out.nseg = n;
	const bool has_operand = op != FI_ATOMIC_READ;
	out.operand = has_operand ? buf + head : nullptr;
	out.operand_bytes = has_operand ? bytes : 0;
	const bool has_compare = kind == atomic::Kind::Compare;
	out.compare = has_compare ? buf + head + out.operand_bytes : nullptr;
	out.compare_bytes = has_compare ? bytes : 0;
	out.data_bytes = bytes;
	return true;
}

// Writes an AtomicResponse into buf (kRdmHeaderBytes + bytes); returns its
// length. bytes must be 0 unless status is Ok. The data is copied from data,
// or, if that is nullptr, left for the caller to write at kRdmHeaderBytes
// (apply()'s result array can be the send buffer).
inline size_t encode_atomic_response(uint8_t *buf, uint32_t msg_id, AtomicStatus status,
				     const void *data, size_t bytes) noexcept
{
	RdmHeader h;
	h.type = MsgType::AtomicResponse;
	h.status = static_cast<uint8_t>(status);
	h.msg_id = msg_id;
	h.length = bytes;
	encode_header(buf, h);
	if (data)
		memcpy(buf + kRdmHeaderBytes, data, bytes);
	return kRdmHeaderBytes + bytes;
}

// Parses a whole AtomicResponse of len bytes (decode_header checks it all).
// out.data points into buf; nullptr when no data follows.
inline bool decode_atomic_response(const uint8_t *buf, size_t len, RdmHeader &h,
				   AtomicResponse &out) noexcept
{
	if (!decode_header(buf, len, h) || h.type != MsgType::AtomicResponse)
		return false;
	out.status = static_cast<AtomicStatus>(h.status);
	out.bytes = static_cast<size_t>(h.length);
	out.data = out.bytes ? buf + kRdmHeaderBytes : nullptr;
	return true;
}

// The answers: a bare header each (kRdmHeaderBytes).
inline void encode_rndv_done(uint8_t *buf, uint32_t msg_id, RndvStatus status) noexcept
{
	RdmHeader h;
	h.type = MsgType::RndvDone;
	h.status = static_cast<uint8_t>(status);
	h.msg_id = msg_id;
	encode_header(buf, h);
}

inline void encode_delivery_ack(uint8_t *buf, uint32_t msg_id) noexcept
{
	RdmHeader h;
	h.type = MsgType::DeliveryAck;
	h.msg_id = msg_id;
	encode_header(buf, h);
}

inline void encode_flow(uint8_t *buf, FlowStatus status) noexcept
{
	RdmHeader h;
	h.type = MsgType::Flow;
	h.status = static_cast<uint8_t>(status);
	encode_header(buf, h);
}

// A Close counting `received` messages.
inline void encode_close(uint8_t *buf, uint64_t received) noexcept
{
	RdmHeader h;
	h.type = MsgType::Close;
	h.length = received;
	encode_header(buf, h);
}

// An Idle message; quiet_ms (the asker's quiet time) in a Query only.
inline void encode_idle(uint8_t *buf, IdleStatus status, uint64_t quiet_ms = 0) noexcept
{
	RdmHeader h;
	h.type = MsgType::Idle;
	h.status = static_cast<uint8_t>(status);
	h.length = status == IdleStatus::Query ? quiet_ms : 0;
	encode_header(buf, h);
}

// What a peer's Close says of the requests still outstanding on the
// connection, given `retired` (the messages among requests that already
// completed, all of which the peer received) and `outstanding` (the
// outstanding requests, oldest first, each true when it is a message).
// Malformed: the peer counts more messages than were posted. Otherwise
// `through` is the position in `outstanding` up to which (inclusive) every
// request was executed by the peer (the last message it counted), or -1
// when it counted none of the outstanding ones. Messages it received but
// had not counted when it sent the Close (their receives not yet read) are
// taken as not received: their requests fail, as any flushed request.
struct CloseSettle {
	bool malformed = false;
	ptrdiff_t through = -1;
};
template <typename IsMessage>
inline CloseSettle close_settle(uint64_t received, uint64_t retired, size_t outstanding,
				IsMessage &&is_message) noexcept
{
	CloseSettle r;
	uint64_t todo = received > retired ? received - retired : 0;
	for (size_t i = 0; i < outstanding && todo; i++)
		if (is_message(i) && --todo == 0)
			r.through = static_cast<ptrdiff_t>(i);
	r.malformed = todo != 0;
	return r;
}

inline void encode_commit_answer(uint8_t *buf, uint32_t msg_id, CommitStatus status) noexcept
{
	RdmHeader h;
	h.type = MsgType::CommitAnswer;
	h.status = static_cast<uint8_t>(status);
	h.msg_id = msg_id;
	encode_header(buf, h);
}

// Writes a CommitRequest (h.msg_id not 0; h.flags kFlagCqData or none, with
// h.cq_data; count ranges, 1..kMaxCommitRanges, none empty) into buf
// (kCommitRequestMax bytes); returns its length. The type and length are
// set here.
inline size_t encode_commit_request(uint8_t *buf, RdmHeader h, const CommitRange *ranges,
				    size_t count) noexcept
{
	h.type = MsgType::CommitRequest;
	h.length = 0;
	for (size_t i = 0; i < count; i++)
		h.length += ranges[i].len;
	encode_header(buf, h);
	uint8_t *body = buf + kRdmHeaderBytes;
	memset(body, 0, kCommitBodyHeadBytes);
	body[0] = static_cast<uint8_t>(count);
	for (size_t i = 0; i < count; i++) {
		uint8_t *r = body + kCommitBodyHeadBytes + i * kCommitRangeBytes;
		le::put64(r, ranges[i].addr);
		le::put64(r + 8, ranges[i].len);
		le::put64(r + 16, ranges[i].key);
	}
	return kRdmHeaderBytes + kCommitBodyHeadBytes + count * kCommitRangeBytes;
}

// Parses a whole CommitRequest of len bytes: the header as decode_header
// does, then exactly count ranges (1..kMaxCommitRanges) into ranges (room for
// kMaxCommitRanges), none empty, whose lengths add up to the header's length
// without overflowing; reserved bytes 0.
inline bool decode_commit_request(const uint8_t *buf, size_t len, RdmHeader &h,
				  CommitRange *ranges, size_t &count) noexcept
{
	if (!decode_header(buf, len, h) || h.type != MsgType::CommitRequest)
		return false;
	const uint8_t *body = buf + kRdmHeaderBytes;
	const size_t n = body[0];
	if (n == 0 || n > kMaxCommitRanges ||
	    len != kRdmHeaderBytes + kCommitBodyHeadBytes + n * kCommitRangeBytes ||
	    !all_zero(body + 1, kCommitBodyHeadBytes - 1))
		return false;
	auto take = [ranges](size_t i, const uint8_t *r, uint64_t rlen) {
		ranges[i] = {le::get64(r), rlen, le::get64(r + 16)};
		return true;
	};
	if (!walk_segments(body + kCommitBodyHeadBytes, n, kCommitRangeBytes, h.length, take))
		return false;
	count = n;
	return true;
}

// Writes a KeyRequest for key, needing access (kKeyRights bits, not 0),
// into buf (kKeyRequestBytes); msg_id not 0.
inline void encode_key_request(uint8_t *buf, uint32_t msg_id, uint64_t key, uint8_t access) noexcept
{
	RdmHeader h;
	h.type = MsgType::KeyRequest;
	h.msg_id = msg_id;
	encode_header(buf, h);
	uint8_t *b = buf + kRdmHeaderBytes;
	memset(b, 0, kKeyRequestBodyBytes);
	le::put64(b, key);
	b[8] = access;
}

// Parses a whole KeyRequest of len bytes: an access of known rights, not 0;
// reserved bytes 0.
inline bool decode_key_request(const uint8_t *buf, size_t len, RdmHeader &h, uint64_t &key,
			       uint8_t &access) noexcept
{
	if (!decode_header(buf, len, h) || h.type != MsgType::KeyRequest)
		return false;
	const uint8_t *b = buf + kRdmHeaderBytes;
	key = le::get64(b);
	access = b[8];
	return access != 0 && (access & ~kKeyRights) == 0 && all_zero(b + 9, kKeyRequestBodyBytes - 9);
}

// Writes a KeyAnswer to request msg_id into buf (kKeyAnswerBytes): a.status
// and the entry's key always, the whole entry with Ok (as
// decode_key_answer checks it), zeros otherwise.
inline void encode_key_answer(uint8_t *buf, uint32_t msg_id, const KeyAnswer &a) noexcept
{
	RdmHeader h;
	h.type = MsgType::KeyAnswer;
	h.status = static_cast<uint8_t>(a.status);
	h.msg_id = msg_id;
	encode_header(buf, h);
	uint8_t *b = buf + kRdmHeaderBytes;
	memset(b, 0, kKeyAnswerBodyBytes);
	if (a.status == KeyStatus::Ok)
		keys::encode_fields(b, a.entry);
	else
		le::put64(b, a.entry.key);
}

// Parses a whole KeyAnswer of len bytes (see the body's layout above).
inline bool decode_key_answer(const uint8_t *buf, size_t len, RdmHeader &h, KeyAnswer &out) noexcept
{
	if (!decode_header(buf, len, h) || h.type != MsgType::KeyAnswer)
		return false;
	const uint8_t *b = buf + kRdmHeaderBytes;
	if (!all_zero(b + keys::kFieldBytes, kKeyAnswerBodyBytes - keys::kFieldBytes))
		return false;
	out.status = static_cast<KeyStatus>(h.status);
	keys::decode_fields(b, out.entry);
	const keys::KeyEntry &e = out.entry;
	if (out.status != KeyStatus::Ok)
		return all_zero(b + 8, keys::kFieldBytes - 8);
	return e.len != 0 && e.va <= UINT64_MAX - (e.len - 1) && e.start <= UINT64_MAX - (e.len - 1) &&
	       (e.access & kKeyRights) != 0 && (e.access & ~keys::kAccessKnown) == 0 &&
	       (!(e.access & keys::kAccessUnregistered) || e.rkey == 0);
}

// A KeyTable message (kKeyTableMsgBytes) for t.
inline constexpr size_t kKeyTableMsgBytes = kRdmHeaderBytes + kConnKeyTableBytes;
inline void encode_key_table(uint8_t *buf, const KeyTableRef &t) noexcept
{
	RdmHeader h;
	h.type = MsgType::KeyTable;
	encode_header(buf, h);
	le::put64(buf + kRdmHeaderBytes, t.addr);
	le::put32(buf + kRdmHeaderBytes + 8, t.rkey);
	le::put32(buf + kRdmHeaderBytes + 12, t.buckets);
}

// Parses a whole KeyTable message of len bytes; refuses an invalid bucket
// count.
inline bool decode_key_table(const uint8_t *buf, size_t len, KeyTableRef &t) noexcept
{
	RdmHeader h;
	if (!decode_header(buf, len, h) || h.type != MsgType::KeyTable)
		return false;
	const uint8_t *b = buf + kRdmHeaderBytes;
	t = {le::get64(b), le::get32(b + 8), le::get32(b + 12)};
	return valid_key_table_buckets(t.buckets);
}

} // namespace vrma::rdm
