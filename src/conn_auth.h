// Authenticated RDM connections: the proofs a connect request and its answer
// carry when a job key is set (auth_key, FI_VRMA_AUTH_KEY), computed with
// HMAC-SHA-256 (nettle) and truncated. The key never crosses the wire.
//
// The exchange (rdm_wire.h has the bytes, vrma_rdm_conn.cpp the states):
//  1. The initiator sends a connect request with a fresh random challenge
//     of its own (kConnFlagAsk).
//  2. The acceptor rejects it with a challenge: a cookie, which is a MAC
//     under the acceptor's own secret over what the request claimed (its
//     address and nonce), the connection's real source address and a time
//     bucket, and its proof of the key over the initiator's challenge. The
//     acceptor keeps nothing: no queue pair, no entry. The initiator checks
//     the proof before it answers.
//  3. The initiator connects again with the cookie and its answer: a MAC
//     under the job key over the cookie and both ends' addresses and nonces.
//  4. The acceptor checks that the cookie is its own and fresh (this or the
//     previous bucket), that it was not answered before (ReplayCache), and
//     the answer. Only then does it make a queue pair, and it accepts with
//     its own proof: a MAC under the key over the initiator's answer.
//  5. The initiator checks that proof before it uses the connection.
//
// What this defends against and what not is fi_vrma.7's SECURITY section.
#pragma once

#include "wire/rdm_wire.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vrma::auth {

inline constexpr size_t kKeyMax = 64;      // bytes of a job key at most
inline constexpr size_t kSecretBytes = 32; // an acceptor's cookie secret
inline constexpr size_t kCookieBytes = 8;
inline constexpr size_t kMacBytes = 16;
// A cookie is fresh in the bucket it was made in and the next one: it lives
// between kBucketSeconds and twice that.
inline constexpr uint64_t kBucketSeconds = 4;
static_assert(kCookieBytes == sizeof(uint64_t), "a cookie travels as a u64");

using Secret = std::array<uint8_t, kSecretBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// A job key: up to kKeyMax bytes; empty means none (no authentication).
struct Key {
	std::array<uint8_t, kKeyMax> bytes{};
	size_t len = 0;
	bool empty() const noexcept { return len == 0; }
	// False (key unchanged) if len is 0 or over kKeyMax.
	bool assign(const void *data, size_t n) noexcept;
};

// Fills out with n bytes from the kernel's random source; false if it
// cannot.
bool random_bytes(void *out, size_t n) noexcept;

// The time bucket of a steady clock reading in seconds.
inline constexpr uint64_t bucket_of(uint64_t seconds) noexcept { return seconds / kBucketSeconds; }

// The acceptor's challenge for a request that claimed (addr, nonce) and came
// from source (the address rdma_cm reports for the connection; its port is
// ignored, the initiator's next request comes from another one).
uint64_t make_cookie(const Secret &secret, const rdm::RdmAddr &claimed, uint64_t nonce,
		     const rdm::RdmAddr &source, uint64_t bucket) noexcept;
// Whether cookie is one make_cookie gave for these in bucket now or now - 1.
bool cookie_fresh(const Secret &secret, const rdm::RdmAddr &claimed, uint64_t nonce,
		  const rdm::RdmAddr &source, uint64_t cookie, uint64_t now) noexcept;

// The initiator's answer to cookie, binding both ends: the initiator's
// (address, nonce) from its request, the acceptor's from the challenge.
Mac initiator_answer(const Key &key, uint64_t cookie, const rdm::RdmAddr &init_addr,
		     uint64_t init_nonce, const rdm::RdmAddr &acc_addr, uint64_t acc_nonce) noexcept;
// The acceptor's proof in its challenge, over the initiator's challenge ask,
// its own cookie and both ends.
Mac challenge_proof(const Key &key, const Mac &ask, uint64_t cookie, const rdm::RdmAddr &acc_addr,
		    uint64_t acc_nonce, const rdm::RdmAddr &init_addr, uint64_t init_nonce) noexcept;
// The acceptor's proof in its answer, over the initiator's answer.
Mac acceptor_proof(const Key &key, const Mac &answer) noexcept;
// Constant-time comparison.
bool mac_equal(const Mac &a, const Mac &b) noexcept;

// Cookies answered already, so that a recorded request cannot be replayed
// while its cookie is fresh. Bounded: when full of fresh entries it refuses
// (the acceptor pushes back: the initiator's attempt fails and it tries
// again) rather than forgets one that could then be replayed.
class ReplayCache {
public:
	// Throws std::bad_alloc (its memory is taken here, once).
	explicit ReplayCache(size_t capacity) : capacity_(capacity) { entries_.reserve(capacity); }
	// Records a fresh cookie answered in time bucket now: true if new and
	// recorded, false if seen before or the cache is full.
	bool record(uint64_t cookie, uint64_t now) noexcept;
	size_t size() const noexcept { return entries_.size(); }

private:
	struct Entry {
		uint64_t cookie, bucket; // bucket: when it was answered
	};
	size_t capacity_;
	std::vector<Entry> entries_;
};

} // namespace vrma::auth
