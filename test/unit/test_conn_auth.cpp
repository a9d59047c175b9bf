// conn_auth.h: the MACs of an authenticated RDM connection, against HMAC-SHA-256
// test vectors and against each other (every input bound, keys and secrets
// distinguished), and the replay cache's bounds.
#include "conn_auth.h"
#include "unit.h"

#include <nettle/hmac.h>

#include <cstring>

namespace {

using namespace vrma;
using namespace vrma::auth;

rdm::RdmAddr v4(uint8_t last, uint16_t port)
{
	rdm::RdmAddr a;
	a.family = AF_INET;
	a.port = port;
	a.addr[0] = 10;
	a.addr[1] = 99;
	a.addr[3] = last;
	return a;
}

Key key_of(const char *s)
{
	Key k;
	ck_assert(k.assign(s, strlen(s)));
	return k;
}

// RFC 4231 test case 2: the library computes HMAC-SHA-256 (what every MAC
// here truncates).
START_TEST(hmac_sha256_vector)
{
	static const uint8_t want[32] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
					 0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
					 0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
	hmac_sha256_ctx ctx;
	hmac_sha256_set_key(&ctx, 4, reinterpret_cast<const uint8_t *>("Jefe"));
	const char *msg = "what do ya want for nothing?";
	hmac_sha256_update(&ctx, strlen(msg), reinterpret_cast<const uint8_t *>(msg));
	uint8_t got[32];
	hmac_sha256_digest(&ctx, sizeof got, got);
	ck_assert_int_eq(memcmp(got, want, sizeof want), 0);
}
END_TEST

START_TEST(key_bounds)
{
	Key k;
	ck_assert(k.empty());
	uint8_t big[kKeyMax + 1] = {};
	ck_assert(!k.assign(big, 0));
	ck_assert(!k.assign(big, kKeyMax + 1));
	ck_assert(!k.assign(nullptr, 4));
	ck_assert(k.empty());
	ck_assert(k.assign(big, kKeyMax));
	ck_assert_uint_eq(k.len, kKeyMax);
}
END_TEST

// A cookie is fresh in its bucket and the next, for exactly what it was made
// for: another claimed address, nonce, source host, secret or an older
// bucket refuses it; the source's port does not matter.
START_TEST(cookie_binds_and_expires)
{
	Secret s{}, other{};
	ck_assert(random_bytes(s.data(), s.size()));
	other = s;
	other[0] ^= 1;
	const rdm::RdmAddr claim = v4(1, 7000), src = v4(1, 40000);
	const uint64_t c = make_cookie(s, claim, 42, src, 100);
	ck_assert(cookie_fresh(s, claim, 42, src, c, 100));
	ck_assert(cookie_fresh(s, claim, 42, src, c, 101));
	ck_assert(!cookie_fresh(s, claim, 42, src, c, 102));
	ck_assert(!cookie_fresh(s, claim, 42, src, c, 99));
	ck_assert(cookie_fresh(s, claim, 42, v4(1, 40001), c, 100)); // another port
	ck_assert(!cookie_fresh(s, claim, 42, v4(2, 40000), c, 100));
	ck_assert(!cookie_fresh(s, v4(1, 7001), 42, src, c, 100));
	ck_assert(!cookie_fresh(s, claim, 43, src, c, 100));
	ck_assert(!cookie_fresh(other, claim, 42, src, c, 100));
	ck_assert(!cookie_fresh(s, claim, 42, src, c ^ 1, 100));
}
END_TEST

// Answers and proofs: the same inputs give the same MAC; any other key,
// cookie, address or nonce another one; and the kinds never coincide.
START_TEST(answers_and_proofs_bind_everything)
{
	const Key k = key_of("job-4711"), k2 = key_of("job-4712");
	const rdm::RdmAddr i = v4(1, 7000), a = v4(1, 7001);
	const Mac ans = initiator_answer(k, 5, i, 10, a, 20);
	ck_assert(mac_equal(ans, initiator_answer(k, 5, i, 10, a, 20)));
	ck_assert(!mac_equal(ans, initiator_answer(k2, 5, i, 10, a, 20)));
	ck_assert(!mac_equal(ans, initiator_answer(k, 6, i, 10, a, 20)));
	ck_assert(!mac_equal(ans, initiator_answer(k, 5, a, 10, i, 20)));
	ck_assert(!mac_equal(ans, initiator_answer(k, 5, i, 11, a, 20)));
	ck_assert(!mac_equal(ans, initiator_answer(k, 5, i, 10, a, 21)));
	const Mac proof = acceptor_proof(k, ans);
	ck_assert(!mac_equal(proof, ans));
	ck_assert(!mac_equal(proof, acceptor_proof(k2, ans)));
	Mac other = ans;
	other[15] ^= 0x80;
	ck_assert(!mac_equal(proof, acceptor_proof(k, other)));
	Mac ask{};
	ask[0] = 1;
	const Mac cp = challenge_proof(k, ask, 5, a, 20, i, 10);
	ck_assert(mac_equal(cp, challenge_proof(k, ask, 5, a, 20, i, 10)));
	ck_assert(!mac_equal(cp, challenge_proof(k2, ask, 5, a, 20, i, 10)));
	ck_assert(!mac_equal(cp, challenge_proof(k, Mac{}, 5, a, 20, i, 10)));
	ck_assert(!mac_equal(cp, challenge_proof(k, ask, 6, a, 20, i, 10)));
	ck_assert(!mac_equal(cp, challenge_proof(k, ask, 5, i, 20, a, 10)));
	ck_assert(!mac_equal(cp, challenge_proof(k, ask, 5, a, 21, i, 10)));
	// A key that is a prefix of another is another key.
	ck_assert(!mac_equal(ans, initiator_answer(key_of("job-471"), 5, i, 10, a, 20)));
}
END_TEST

// The replay cache: a cookie is taken once; entries go when their cookie can
// no longer be fresh; a full cache refuses rather than forgets.
START_TEST(replay_cache_bounded)
{
	ReplayCache rc(3);
	ck_assert(rc.record(1, 10));
	ck_assert(!rc.record(1, 10));
	ck_assert(!rc.record(1, 11)); // still fresh one bucket later
	ck_assert(rc.record(2, 10));
	ck_assert(rc.record(3, 11));
	ck_assert(!rc.record(4, 11)); // full of fresh entries
	ck_assert_uint_eq(rc.size(), 3);
	ck_assert(rc.record(4, 12)); // 1 and 2 (bucket 10) expired
	ck_assert_uint_eq(rc.size(), 2);
	ck_assert(!rc.record(3, 12));
	ck_assert(rc.record(1, 13)); // expired entries are gone: stale cookies are refused by cookie_fresh
}
END_TEST

} // namespace

Suite *conn_auth_suite()
{
	Suite *s = suite_create("conn_auth");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, hmac_sha256_vector);
	tcase_add_test(tc, key_bounds);
	tcase_add_test(tc, cookie_binds_and_expires);
	tcase_add_test(tc, answers_and_proofs_bind_everything);
	tcase_add_test(tc, replay_cache_bounded);
	suite_add_tcase(s, tc);
	return s;
}
