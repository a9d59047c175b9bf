// Who may connect to a vrma RDM endpoint (issue 26, finding 3): the claimed
// address must be the request's real source host; a request that claims a
// peer whose connection is up does not displace it; with a job key
// (domain_attr->auth_key) only holders of the key connect, the key table's
// key reaches only them, and a recorded answer cannot be replayed. Each test
// checks that an honest peer's traffic stays exact around the attempts.
#include "hostile_peer.h"
#include "rdm_atomic_harness.h"

#include "conn_auth.h"

#include <cinttypes>
#include <cstring>

namespace {

using namespace vt;
namespace rdm = vrma::rdm;
namespace auth = vrma::auth;

// An RDM env with scalable keys (mr_mode 0: the key table is in play) and,
// unless key is empty, a job key in domain_attr->auth_key.
struct KeyedHints {
	fi_info *h;
	explicit KeyedHints(const std::string &key) : h(rdm_hints(atomic_test::kAtomicCaps))
	{
		h->domain_attr->mr_mode = 0;
		if (!key.empty()) {
			h->domain_attr->auth_key = static_cast<uint8_t *>(malloc(key.size()));
			memcpy(h->domain_attr->auth_key, key.data(), key.size());
			h->domain_attr->auth_key_size = key.size();
		}
	}
	~KeyedHints() { fi_freeinfo(h); }
	KeyedHints(const KeyedHints &) = delete;
	KeyedHints &operator=(const KeyedHints &) = delete;
};
struct KeyedEnv : private KeyedHints, RdmEnv {
	explicit KeyedEnv(const std::string &key) : KeyedHints(key), RdmEnv(h)
	{
		ck_assert_uint_eq(info->domain_attr->auth_key_size, key.size());
	}
};

// A region of 4096 bytes published under a requested key.
struct Published {
	std::vector<uint8_t> mem = std::vector<uint8_t>(4096, 0);
	fid_mr *mr = nullptr;
	Published(RdmEnv &env, uint64_t key)
	{
		const int rc = fi_mr_reg(env.domain, mem.data(), mem.size(), FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
					 key, 0, &mr, nullptr);
		ck_assert_msg(rc == 0, "fi_mr_reg: %d (%s)", rc, fi_strerror(-rc));
	}
	~Published() { fi_close(&mr->fid); }
	Published(const Published &) = delete;
	Published &operator=(const Published &) = delete;
};

// Tagged messages both ways (eager and rendezvous) between a and b, data,
// tags and sources checked.
void exchange(RdmNode &a, RdmNode &b, uint32_t seed, const char *when)
{
	for (size_t len : {size_t(100), size_t(40000)}) {
		for (int dir = 0; dir < 2; dir++) {
			RdmNode &s = dir ? b : a, &r = dir ? a : b;
			std::vector<uint8_t> out(len), in(len, 0);
			fill_pattern(out.data(), len, seed + dir);
			fi_context rctx{}, sctx{};
			post([&] { return fi_trecv(r.ep, in.data(), len, nullptr, r.addr_of(s), 7, 0, &rctx); }, "fi_trecv");
			post([&] { return fi_tsend(s.ep, out.data(), len, nullptr, s.addr_of(r), 7, &sctx); }, "fi_tsend");
			expect_ok(s, &sctx, FI_TAGGED | FI_SEND, when);
			Completion c = expect_ok(r, &rctx, FI_TAGGED | FI_RECV, when);
			ck_assert_msg(c.e.len == len && c.src == r.addr_of(s), "%s: len %zu source %" PRIu64, when,
				      c.e.len, c.src);
			expect_pattern(in.data(), len, seed + dir, when);
		}
	}
}

// fi_write of 64 bytes from a into b's region published under key (a's
// translation reads b's key table).
void write_to(RdmNode &a, RdmNode &b, Published &region, uint64_t key, uint32_t seed, const char *when)
{
	std::vector<uint8_t> out(64);
	fill_pattern(out.data(), out.size(), seed);
	fi_context ctx{};
	post([&] { return fi_write(a.ep, out.data(), out.size(), nullptr, a.addr_of(b), 128, key, &ctx); },
	     "fi_write");
	expect_ok(a, &ctx, FI_RMA | FI_WRITE, when);
	expect_pattern(region.mem.data() + 128, out.size(), seed, when);
}

// A send to `to` that cannot connect: fi_tsend itself returns err once the
// attempt failed (and nothing reaches the CQ).
void expect_send_refused(RdmNode &from, RdmNode &to, int err, const char *when)
{
	uint64_t v = 1;
	fi_context ctx{};
	const ssize_t rc = post_retry([&] { return fi_tsend(from.ep, &v, sizeof v, nullptr, from.addr_of(to), 1, &ctx); });
	ck_assert_msg(rc == -err, "%s: fi_tsend returned %zd (%s), expected %d", when, rc, fi_strerror(int(-rc)), -err);
	expect_none(from, 100, when);
}

// Two domains with the same job key talk: messages both ways, and writes
// both ways through scalable keys, so that each side reads the other's
// key table (the acceptor learns the initiator's from its KeyTable message).
START_TEST(auth_same_key_talks)
{
	KeyedEnv e1("job-4711"), e2("job-4711");
	RdmNode a(e1), b(e2);
	connect_all({&a, &b});
	Published ra(e1, 0x51), rb(e2, 0x52);
	exchange(a, b, 10, "keyed exchange");
	write_to(a, b, rb, 0x52, 20, "keyed write a->b");
	write_to(b, a, ra, 0x51, 21, "keyed write b->a");
	exchange(a, b, 30, "keyed exchange again");
}
END_TEST

// A key table request reaches an acceptor first: the acceptor's writes wait
// for the initiator's KeyTable message instead of failing.
START_TEST(auth_acceptor_writes_first)
{
	KeyedEnv e1("job-4711"), e2("job-4711");
	RdmNode a(e1), b(e2);
	connect_all({&a, &b});
	Published ra(e1, 0x61);
	// a initiates (its send), b accepts; b writes at once.
	uint64_t v = 5;
	fi_context sctx{}, rctx{};
	uint64_t got = 0;
	post([&] { return fi_trecv(b.ep, &got, sizeof got, nullptr, b.addr_of(a), 3, 0, &rctx); }, "fi_trecv");
	post([&] { return fi_tsend(a.ep, &v, sizeof v, nullptr, a.addr_of(b), 3, &sctx); }, "fi_tsend");
	expect_ok(b, &rctx, FI_TAGGED | FI_RECV, "first message");
	expect_ok(a, &sctx, FI_TAGGED | FI_SEND, "first message");
	ck_assert_uint_eq(got, 5);
	write_to(b, a, ra, 0x61, 40, "acceptor's write");
}
END_TEST

// Another key, no key, and a keyed initiator against an acceptor without one:
// each attempt is refused (FI_ECONNREFUSED to the sender), and a keyed pair
// beside them is undisturbed.
START_TEST(auth_wrong_or_missing_key_refused)
{
	KeyedEnv e1("job-4711"), e2("job-4711"), wrong("job-9999"), none("");
	RdmNode victim(e1), honest(e2), w(wrong), n(none);
	connect_all({&victim, &honest, &w, &n});
	exchange(victim, honest, 50, "before");
	expect_send_refused(w, victim, FI_ECONNREFUSED, "another key");
	expect_send_refused(n, victim, FI_ECONNREFUSED, "no key");
	// A keyed initiator refuses an acceptor that proves nothing.
	expect_send_refused(victim, n, FI_ECONNREFUSED, "an acceptor without a key");
	// And the acceptor with another key fails our proof check of its
	// challenge.
	expect_send_refused(victim, w, FI_ECONNREFUSED, "an acceptor with another key");
	exchange(victim, honest, 60, "after");
}
END_TEST

// The connect header decoded from a reject's private data.
rdm::RdmConnHeader decoded_reject(const HostilePeer &p, const char *what)
{
	rdm::RdmConnHeader h;
	ck_assert_msg(rdm::decode_conn_header(p.reject_data().data(), p.reject_data().size(), h),
		      "%s: the reject carries no vrma header (%zu bytes)", what, p.reject_data().size());
	return h;
}

// A raw peer against a keyed victim: without an answer it gets a challenge
// (and no key table); with a wrong answer, a stale cookie or a replayed
// right answer it is refused; with the right answer it connects. The honest
// keyed peer's traffic stays exact throughout.
START_TEST(auth_hostile_answers)
{
	const std::string key = "job-4711";
	KeyedEnv e1(key), e2(key);
	RdmNode victim(e1), honest(e2);
	connect_all({&victim, &honest});
	exchange(victim, honest, 70, "before");
	auth::Key k;
	ck_assert(k.assign(key.data(), key.size()));

	HostileOptions first;
	first.conn_flags = rdm::kConnFlagAsk;
	for (size_t i = 0; i < first.mac.size(); i++)
		first.mac[i] = static_cast<uint8_t>(i * 29 + 3);
	HostilePeer p1(victim.name, first);
	p1.label = "no answer";
	ck_assert_msg(!p1.connect(), "a keyed victim accepted a request without an answer");
	const rdm::RdmConnHeader ch = decoded_reject(p1, "no answer");
	ck_assert_msg(ch.flags & rdm::kConnFlagChallenge, "reject flags %#x: no challenge", ch.flags);
	ck_assert_msg(!(ch.flags & rdm::kConnFlagKeyTable) && ch.key_table.buckets == 0,
		      "the challenge carries the key table");
	ck_assert_uint_eq(p1.reject_data().size() >= rdm::kConnHeaderBytes + 24, true);
	// The victim proved the key over our challenge.
	auth::Mac ask;
	std::copy(first.mac.begin(), first.mac.end(), ask.begin());
	auth::Mac proof;
	std::copy(ch.mac.begin(), ch.mac.end(), proof.begin());
	ck_assert_msg(auth::mac_equal(proof, auth::challenge_proof(k, ask, ch.cookie, ch.addr, ch.nonce, p1.claimed(),
								   p1.nonce())),
		      "the challenge's proof does not prove the key");

	auto answer_with = [&](const auth::Key &kk, uint64_t cookie) {
		HostileOptions o;
		o.claim = p1.claimed();
		o.nonce = p1.nonce();
		o.conn_flags = rdm::kConnFlagAuth;
		o.cookie = cookie;
		const auth::Mac m = auth::initiator_answer(kk, cookie, p1.claimed(), p1.nonce(), ch.addr, ch.nonce);
		std::copy(m.begin(), m.end(), o.mac.begin());
		return o;
	};
	auth::Key wrong;
	ck_assert(wrong.assign("job-4712", 8));
	{
		HostilePeer p(victim.name, answer_with(wrong, ch.cookie));
		p.label = "wrong key";
		ck_assert_msg(!p.connect(), "a wrong answer was accepted");
	}
	{
		HostilePeer p(victim.name, answer_with(k, ch.cookie ^ 0x1));
		p.label = "forged cookie";
		ck_assert_msg(!p.connect(), "an answer to a cookie the victim never made was accepted");
	}
	exchange(victim, honest, 80, "after the refused answers");
	{
		HostilePeer p(victim.name, answer_with(k, ch.cookie));
		p.label = "right key";
		ck_assert_msg(p.connect(), "the right answer was refused");
		ck_assert(!p.wait_dropped(200));
	}
	{
		HostilePeer p(victim.name, answer_with(k, ch.cookie));
		p.label = "replayed answer";
		ck_assert_msg(!p.connect(), "a replayed answer was accepted");
	}
	exchange(victim, honest, 90, "after");
}
END_TEST

// Without a key: a request that claims another host than its source is
// refused, and one that claims a connected peer's address does not displace
// it (refused with kConnFlagBusy while the victim probes the live
// connection, which survives the probe): the honest peer's traffic and
// replies are exact.
START_TEST(auth_claims_checked)
{
	atomic_test::AtomicEnv env;
	RdmNode victim(env), honest(env);
	connect_all({&victim, &honest});
	exchange(victim, honest, 100, "before");
	{
		HostileOptions o;
		ck_assert(rdm::parse_addr("fi_sockaddr_in://10.99.0.77:7000", o.claim));
		HostilePeer p(victim.name, o);
		p.label = "another host";
		ck_assert_msg(!p.connect(), "a request claiming 10.99.0.77 from 10.99.0.1 was accepted");
	}
	for (int i = 0; i < 3; i++) {
		HostileOptions o;
		ck_assert(rdm::from_sockaddr(reinterpret_cast<const sockaddr *>(&honest.name), sizeof honest.name, o.claim));
		if (i == 1)
			o.nonce = 0; // a fresh nonce: a "restarted" honest peer
		HostilePeer p(victim.name, o);
		p.label = "impostor";
		ck_assert_msg(!p.connect(), "a request claiming the connected honest peer was accepted");
		const rdm::RdmConnHeader h = decoded_reject(p, "impostor");
		ck_assert_msg(h.flags & rdm::kConnFlagBusy, "reject flags %#x, expected kConnFlagBusy", h.flags);
		exchange(victim, honest, 110 + 2 * i, "after an impostor");
	}
	settle(300); // the probes' answers
	exchange(victim, honest, 120, "after the probes");
}
END_TEST

} // namespace

Suite *auth_suite()
{
	Suite *s = suite_create("auth");
	rdm_add_tcase(s, "auth", 120,
		      {auth_same_key_talks, auth_acceptor_writes_first, auth_wrong_or_missing_key_refused,
		       auth_hostile_answers, auth_claims_checked});
	return s;
}
