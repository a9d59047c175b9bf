#include "conn_auth.h"

#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace vrma::auth {

namespace {

// Domain separation: each MAC's input starts with its own label, so that no
// value of one kind is ever accepted as another.
constexpr char kCookieLabel[] = "vrma-rdm-cookie-1";
constexpr char kAnswerLabel[] = "vrma-rdm-answer-1";
constexpr char kProofLabel[] = "vrma-rdm-proof-1";
constexpr char kChallengeLabel[] = "vrma-rdm-challenge-1";

class Hmac {
public:
	Hmac(const uint8_t *key, size_t len) noexcept { hmac_sha256_set_key(&ctx_, len, key); }
	Hmac &label(const char *s) noexcept { return bytes(s, strlen(s) + 1); }
	Hmac &bytes(const void *p, size_t n) noexcept
	{
		hmac_sha256_update(&ctx_, n, static_cast<const uint8_t *>(p));
		return *this;
	}
	Hmac &u64(uint64_t v) noexcept
	{
		uint8_t b[8];
		rdm::le::put64(b, v);
		return bytes(b, sizeof b);
	}
	// Family, port, address: the address as its connect header spells it.
	Hmac &addr(const rdm::RdmAddr &a, bool with_port = true) noexcept
	{
		uint8_t b[19];
		b[0] = rdm::wire_family(a.family);
		rdm::le::put16(b + 1, with_port ? a.port : 0);
		memcpy(b + 3, a.addr, 16);
		return bytes(b, sizeof b);
	}
	void digest(uint8_t *out, size_t n) noexcept { hmac_sha256_digest(&ctx_, n, out); }

private:
	hmac_sha256_ctx ctx_;
};

uint64_t cookie_for(const Secret &secret, const rdm::RdmAddr &claimed, uint64_t nonce,
		    const rdm::RdmAddr &source, uint64_t bucket) noexcept
{
	uint8_t out[kCookieBytes];
	Hmac(secret.data(), secret.size())
		.label(kCookieLabel)
		.addr(claimed)
		.u64(nonce)
		.addr(source, false)
		.u64(bucket)
		.digest(out, sizeof out);
	return rdm::le::get64(out);
}

} // namespace

bool Key::assign(const void *data, size_t n) noexcept
{
	if (n == 0 || n > kKeyMax || !data)
		return false;
	memcpy(bytes.data(), data, n);
	len = n;
	return true;
}

bool random_bytes(void *out, size_t n) noexcept
{
	auto *p = static_cast<uint8_t *>(out);
	while (n) {
		const ssize_t got = getrandom(p, n, 0);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		p += got;
		n -= static_cast<size_t>(got);
	}
	return true;
}

uint64_t make_cookie(const Secret &secret, const rdm::RdmAddr &claimed, uint64_t nonce,
		     const rdm::RdmAddr &source, uint64_t bucket) noexcept
{
	return cookie_for(secret, claimed, nonce, source, bucket);
}

bool cookie_fresh(const Secret &secret, const rdm::RdmAddr &claimed, uint64_t nonce,
		  const rdm::RdmAddr &source, uint64_t cookie, uint64_t now) noexcept
{
	uint8_t want[8], got[8];
	rdm::le::put64(got, cookie);
	bool ok = false;
	for (uint64_t b : {now, now - 1}) {
		rdm::le::put64(want, cookie_for(secret, claimed, nonce, source, b));
		ok |= memeql_sec(want, got, sizeof want) != 0;
	}
	return ok;
}

Mac initiator_answer(const Key &key, uint64_t cookie, const rdm::RdmAddr &init_addr,
		     uint64_t init_nonce, const rdm::RdmAddr &acc_addr, uint64_t acc_nonce) noexcept
{
	Mac m;
	Hmac(key.bytes.data(), key.len)
		.label(kAnswerLabel)
		.u64(cookie)
		.addr(init_addr)
		.u64(init_nonce)
		.addr(acc_addr)
		.u64(acc_nonce)
		.digest(m.data(), m.size());
	return m;
}

Mac challenge_proof(const Key &key, const Mac &ask, uint64_t cookie, const rdm::RdmAddr &acc_addr,
		    uint64_t acc_nonce, const rdm::RdmAddr &init_addr, uint64_t init_nonce) noexcept
{
	Mac m;
	Hmac(key.bytes.data(), key.len)
		.label(kChallengeLabel)
		.bytes(ask.data(), ask.size())
		.u64(cookie)
		.addr(acc_addr)
		.u64(acc_nonce)
		.addr(init_addr)
		.u64(init_nonce)
		.digest(m.data(), m.size());
	return m;
}

Mac acceptor_proof(const Key &key, const Mac &answer) noexcept
{
	Mac m;
	Hmac(key.bytes.data(), key.len).label(kProofLabel).bytes(answer.data(), answer.size()).digest(m.data(), m.size());
	return m;
}

bool mac_equal(const Mac &a, const Mac &b) noexcept { return memeql_sec(a.data(), b.data(), a.size()) != 0; }

bool ReplayCache::record(uint64_t cookie, uint64_t now) noexcept
{
	// A cookie answered in bucket b was made in b or b - 1, so it is fresh
	// until b + 1 ends; after that cookie_fresh refuses it and its entry
	// can go.
	std::erase_if(entries_, [now](const Entry &e) { return e.bucket + 1 < now; });
	for (const Entry &e : entries_)
		if (e.cookie == cookie)
			return false;
	if (entries_.size() >= capacity_)
		return false;
	entries_.push_back({cookie, now}); // reserved: never allocates
	return true;
}

} // namespace vrma::auth
