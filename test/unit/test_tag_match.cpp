// TagMatcher: the tag and source rules, separation of the untagged and tagged
// kinds, FIFO order of both queues with wildcard and directed receives
// interleaved, peek/claim/discard, cancel, multi-receive buffers that stay
// posted, intrusive removal anywhere in a queue, and a randomized cross-check
// against a naive model.
#include "unit.h"
#include "tag_match.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

using vrma::kAnySource;
using vrma::MatchKind;
using vrma::MsgKey;
using vrma::MultiRecvSpace;
using vrma::RecvKey;

namespace {

constexpr MatchKind kU = MatchKind::kMsg;
constexpr MatchKind kT = MatchKind::kTagged;
constexpr uint64_t kAllBits = ~0ULL;

// The caller's own payload rides along with the engine's base structs.
struct Recv : vrma::PostedRecv {
	int id = -1;
};
struct Msg : vrma::UnexpectedMsg {
	int id = -1;
};
using Matcher = vrma::TagMatcher<Recv, Msg>;

Recv recv(int id, uint64_t tag = 0, uint64_t ignore = 0, uint64_t src = kAnySource,
	  void *context = nullptr)
{
	Recv r;
	r.id = id;
	r.key = {tag, ignore, src};
	r.context = context;
	return r;
}

Msg msg(int id, uint64_t tag = 0, uint64_t src = 0, bool src_known = true)
{
	Msg m;
	m.id = id;
	m.key = {tag, src, src_known};
	return m;
}

std::vector<int> posted_ids(const Matcher &m, MatchKind k)
{
	std::vector<int> ids;
	for (Recv *r = m.posted_front(k); r; r = Matcher::next(*r))
		ids.push_back(r->id);
	return ids;
}

std::vector<int> unexpected_ids(const Matcher &m, MatchKind k)
{
	std::vector<int> ids;
	for (Msg *u = m.unexpected_front(k); u; u = Matcher::next(*u))
		ids.push_back(u->id);
	return ids;
}

std::string str(const std::vector<int> &ids)
{
	std::string s = "[";
	for (size_t i = 0; i < ids.size(); i++)
		s += (i ? "," : "") + std::to_string(ids[i]);
	return s + "]";
}

int id_of(const Recv *r) { return r ? r->id : -1; }
int id_of(const Msg *m) { return m ? m->id : -1; }

// Context pointers: only their identity matters.
char ctx_pool[8];
void *const kCtxA = &ctx_pool[0];
void *const kCtxB = &ctx_pool[1];
void *const kCtxC = &ctx_pool[2];
void *const kCtxD = &ctx_pool[3];

} // namespace

// A queue's ids, oldest first, are exactly the listed ones (and its count agrees).
#define ck_assert_posted(m, k, ...)                                                         \
	do {                                                                                \
		const std::vector<int> want_{__VA_ARGS__};                                   \
		const std::vector<int> got_ = posted_ids(m, k);                              \
		ck_assert_msg(got_ == want_, "posted %s, want %s", str(got_).c_str(),        \
			      str(want_).c_str());                                           \
		ck_assert_uint_eq((m).posted_count(k), want_.size());                        \
	} while (0)
#define ck_assert_unexpected(m, k, ...)                                                     \
	do {                                                                                \
		const std::vector<int> want_{__VA_ARGS__};                                   \
		const std::vector<int> got_ = unexpected_ids(m, k);                          \
		ck_assert_msg(got_ == want_, "unexpected %s, want %s", str(got_).c_str(),    \
			      str(want_).c_str());                                           \
		ck_assert_uint_eq((m).unexpected_count(k), want_.size());                    \
	} while (0)

START_TEST(tag_rule_cases)
{
	struct {
		uint64_t msg_tag, recv_tag, ignore;
		bool match;
	} const cases[] = {
		{0, 0, 0, true},
		{1, 0, 0, false},
		{0, 1, 0, false},
		{0x1234, 0x1234, 0, true},
		{kAllBits, kAllBits, 0, true},
		// Only the top bit differs.
		{kAllBits, 0x7FFFFFFFFFFFFFFFULL, 0, false},
		{0x8000000000000000ULL, 0, 0, false},
		{0x8000000000000000ULL, 0, 0x8000000000000000ULL, true},
		{0x8000000000000001ULL, 0, 0x8000000000000000ULL, false},
		// Only the bottom bit differs.
		{0x0123456789ABCDEFULL, 0x0123456789ABCDEEULL, 0, false},
		{0x0123456789ABCDEFULL, 0x0123456789ABCDEEULL, 1, true},
		{0x0123456789ABCDEFULL, 0x0123456789ABCDEEULL, 2, false},
		// A 32-bit "sender rank | message tag" split, low half wildcarded.
		{0xDEADBEEF12345678ULL, 0xDEADBEEF00000000ULL, 0x00000000FFFFFFFFULL, true},
		{0xDEADBEEE12345678ULL, 0xDEADBEEF00000000ULL, 0x00000000FFFFFFFFULL, false},
		// The receive's own bits under the ignore mask do not matter either.
		{0, 0xFF, 0xFF, true},
		{0x100, 0xFF, 0xFF, false},
		// Ignore everything: anything matches.
		{0, kAllBits, kAllBits, true},
		{0x5555555555555555ULL, 0xAAAAAAAAAAAAAAAAULL, kAllBits, true},
		{0x5555555555555555ULL, 0xAAAAAAAAAAAAAAAAULL, 0x7FFFFFFFFFFFFFFFULL, false},
	};
	for (const auto &c : cases) {
		ck_assert_msg(vrma::tag_matches(c.msg_tag, c.recv_tag, c.ignore) == c.match,
			      "tag %016llx recv %016llx ignore %016llx: want %d",
			      (unsigned long long)c.msg_tag, (unsigned long long)c.recv_tag,
			      (unsigned long long)c.ignore, c.match);

		// Same answer from the matcher, message after receive...
		Matcher m;
		Recv r = recv(1, c.recv_tag, c.ignore);
		Msg u = msg(2, c.msg_tag);
		ck_assert_ptr_null(m.post(kT, r));
		ck_assert_ptr_eq(m.arrive(kT, u), c.match ? &r : nullptr);
		ck_assert_uint_eq(m.unexpected_count(kT), c.match ? 0 : 1);

		// ...and receive after message.
		Matcher m2;
		Recv r2 = recv(1, c.recv_tag, c.ignore);
		Msg u2 = msg(2, c.msg_tag);
		ck_assert_ptr_null(m2.arrive(kT, u2));
		ck_assert_ptr_eq(m2.post(kT, r2), c.match ? &u2 : nullptr);
		ck_assert_uint_eq(m2.posted_count(kT), c.match ? 0 : 1);
	}
}
END_TEST

START_TEST(source_rule_cases)
{
	const MsgKey from7{0, 7, true};
	const MsgKey from8{0, 8, true};
	const MsgKey unknown7{0, 7, false}; // src holds garbage that looks like 7
	const MsgKey unknown_any{0, kAnySource, false};

	// Directed receive on.
	ck_assert(vrma::source_matches(from7, 7, true));
	ck_assert(!vrma::source_matches(from8, 7, true));
	ck_assert(vrma::source_matches(from8, kAnySource, true));
	ck_assert(!vrma::source_matches(unknown7, 7, true));
	ck_assert(vrma::source_matches(unknown7, kAnySource, true));
	ck_assert(vrma::source_matches(unknown_any, kAnySource, true));
	ck_assert(!vrma::source_matches(unknown_any, 0, true));
	// Off: the receive's src does not count.
	ck_assert(vrma::source_matches(from8, 7, false));
	ck_assert(vrma::source_matches(unknown7, 7, false));
	ck_assert(vrma::source_matches(unknown_any, 0, false));
}
END_TEST

START_TEST(untagged_and_tagged_are_separate)
{
	Matcher m(true);
	// An untagged receive's key tag and ignore are meaningless.
	Recv ru = recv(1, 5, 0, kAnySource, kCtxA);
	ck_assert_ptr_null(m.post(kU, ru));

	// A tagged message with the same tag does not see it.
	Msg t5 = msg(10, 5);
	ck_assert_ptr_null(m.arrive(kT, t5));
	ck_assert_posted(m, kU, 1);
	ck_assert_posted(m, kT);
	ck_assert_unexpected(m, kT, 10);
	ck_assert_unexpected(m, kU);

	// An untagged message with any tag lands in it.
	Msg u99 = msg(11, 99);
	ck_assert_ptr_eq(m.arrive(kU, u99), &ru);
	ck_assert(m.remove(ru));
	ck_assert_posted(m, kU);

	// A new untagged receive does not take the tagged message...
	Recv ru2 = recv(2, 5);
	ck_assert_ptr_null(m.post(kU, ru2));
	ck_assert_posted(m, kU, 2);
	ck_assert_unexpected(m, kT, 10);
	// ...a tagged one does.
	Recv rt = recv(3, 5);
	ck_assert_ptr_eq(m.post(kT, rt), &t5);
	ck_assert(!rt.linked());

	// Peek, claim lookup and cancel stay within their kind too.
	ck_assert_ptr_null(m.find_unexpected(kU, RecvKey{5, 0, kAnySource}));
	ck_assert_ptr_eq(m.find_unexpected(kT, RecvKey{5, 0, kAnySource}), &t5);
	ck_assert_ptr_null(m.find_posted(kT, MsgKey{0, 0, true}));
	ck_assert_ptr_eq(m.find_posted(kU, MsgKey{0, 0, true}), &ru2);
	ru2.context = kCtxB;
	ck_assert_ptr_null(m.cancel(kT, kCtxB));
	ck_assert_posted(m, kU, 2);
	m.claim(t5, kCtxC);
	ck_assert_ptr_null(m.find_claimed(kU, kCtxC));
	ck_assert_ptr_eq(m.find_claimed(kT, kCtxC), &t5);
}
END_TEST

START_TEST(directed_receive_honoured)
{
	for (MatchKind k : {kU, kT}) {
		Matcher m(true);
		ck_assert(m.directed(k));
		Recv r7 = recv(1, 0, 0, 7);
		Recv rany = recv(2);
		ck_assert_ptr_null(m.post(k, r7));
		ck_assert_ptr_null(m.post(k, rany));

		// From 8: skips the older receive directed at 7.
		Msg from8 = msg(10, 0, 8);
		ck_assert_ptr_eq(m.arrive(k, from8), &rany);
		// From 7: the directed receive, the older one.
		Msg from7 = msg(11, 0, 7);
		ck_assert_ptr_eq(m.arrive(k, from7), &r7);
		// Unknown sender whose src field happens to read 7: any-source only.
		Msg unknown = msg(12, 0, 7, false);
		ck_assert_ptr_eq(m.arrive(k, unknown), &rany);

		// With only the directed receive left, neither reaches it.
		ck_assert(m.remove(rany));
		Msg unknown2 = msg(13, 0, 7, false);
		Msg from8b = msg(14, 0, 8);
		ck_assert_ptr_null(m.arrive(k, unknown2));
		ck_assert_ptr_null(m.arrive(k, from8b));
		ck_assert_posted(m, k, 1);
		ck_assert_unexpected(m, k, 13, 14);

		// Receives posted now: directed at 8 takes the newer message from 8,
		// not the older unknown one; any-source takes the unknown one.
		Recv r8 = recv(3, 0, 0, 8);
		ck_assert_ptr_eq(m.post(k, r8), &from8b);
		ck_assert(m.remove(from8b));
		Recv r7b = recv(4, 0, 0, 7);
		ck_assert_ptr_null(m.post(k, r7b));
		Recv rany2 = recv(5);
		ck_assert_ptr_eq(m.post(k, rany2), &unknown2);
		ck_assert_posted(m, k, 1, 4);
	}
}
END_TEST

START_TEST(directed_flag_off_ignores_src)
{
	for (MatchKind k : {kU, kT}) {
		Matcher m; // no FI_DIRECTED_RECV
		ck_assert(!m.directed(k));
		Recv r7 = recv(1, 0, 0, 7);
		Recv rany = recv(2);
		ck_assert_ptr_null(m.post(k, r7));
		ck_assert_ptr_null(m.post(k, rany));
		// The oldest receive takes everything, whatever its src says.
		Msg from8 = msg(10, 0, 8);
		Msg unknown = msg(11, 0, 3, false);
		ck_assert_ptr_eq(m.arrive(k, from8), &r7);
		ck_assert_ptr_eq(m.arrive(k, unknown), &r7);
		ck_assert(m.remove(r7));
		ck_assert_ptr_eq(m.arrive(k, from8), &rany);
		ck_assert(m.remove(rany));

		// Posting side: a receive "directed" at 7 takes an unknown sender's
		// message.
		ck_assert_ptr_null(m.arrive(k, unknown));
		Recv r7b = recv(3, 0, 0, 7);
		ck_assert_ptr_eq(m.post(k, r7b), &unknown);
		ck_assert(m.remove(unknown));

		// Turning it on applies to later matching.
		m.directed(true);
		ck_assert(m.directed(k));
		ck_assert_ptr_null(m.post(k, r7b));
		ck_assert_ptr_null(m.arrive(k, from8));
		ck_assert_unexpected(m, k, 10);
	}
}
END_TEST

START_TEST(directed_per_kind)
{
	// FI_TAGGED_DIRECTED_RECV-style: only tagged receives honour src.
	Matcher m;
	m.directed(kT, true);
	ck_assert(m.directed(kT));
	ck_assert(!m.directed(kU));
	Recv ru = recv(1, 0, 0, 7);
	Recv rt = recv(2, 0, 0, 7);
	ck_assert_ptr_null(m.post(kU, ru));
	ck_assert_ptr_null(m.post(kT, rt));
	Msg mu = msg(10, 0, 8);
	Msg mt = msg(11, 0, 8);
	ck_assert_ptr_eq(m.arrive(kU, mu), &ru);
	ck_assert_ptr_null(m.arrive(kT, mt));
	ck_assert_unexpected(m, kT, 11);

	m.directed(kT, false);
	ck_assert(!m.directed(kT));
	Recv rt2 = recv(3, 0, 0, 9);
	ck_assert_ptr_eq(m.post(kT, rt2), &mt);
}
END_TEST

START_TEST(unknown_source_never_matches_directed)
{
	// Whatever an unknown-source message's src holds -- including the value
	// FI_ADDR_NOTAVAIL shares with FI_ADDR_UNSPEC -- no directed receive
	// takes it, from either side.
	const uint64_t srcs[] = {0, 1, 7, 0x7FFFFFFFFFFFFFFFULL, kAnySource - 1, kAnySource};
	for (MatchKind k : {kU, kT}) {
		for (uint64_t s : srcs) {
			Matcher m(true);
			Msg u = msg(1, 0, s, false);
			ck_assert_ptr_null(m.arrive(k, u));
			const uint64_t dir = s == kAnySource ? 5 : s;
			ck_assert_ptr_null(m.find_unexpected(k, RecvKey{0, 0, dir}));
			ck_assert_ptr_eq(m.find_unexpected(k, RecvKey{0, 0, kAnySource}), &u);
			Recv rd = recv(2, 0, 0, dir);
			ck_assert_ptr_null(m.post(k, rd));
			ck_assert(m.remove(u));
			ck_assert_ptr_null(m.find_posted(k, MsgKey{0, s, false}));
			// The same src, known, does reach it.
			if (s != kAnySource)
				ck_assert_ptr_eq(m.find_posted(k, MsgKey{0, s, true}), &rd);
			Recv ra = recv(3);
			ck_assert_ptr_null(m.post(k, ra));
			ck_assert_ptr_eq(m.find_posted(k, MsgKey{0, s, false}), &ra);
		}
	}
}
END_TEST

START_TEST(posted_fifo_interleaved)
{
	Matcher m(true);
	Recv r[] = {
		recv(0, 1, 0, kAnySource),
		recv(1, 1, 0, 2),
		recv(2, 1, 0, kAnySource),
		recv(3, 1, 0, 2),
		recv(4, 0, kAllBits, 3), // any tag, from 3 only
		recv(5, 1, 0, kAnySource),
	};
	for (Recv &x : r)
		ck_assert_ptr_null(m.post(kT, x));
	ck_assert_posted(m, kT, 0, 1, 2, 3, 4, 5);

	struct {
		Msg in;
		int want;
	} steps[] = {
		{msg(10, 1, 2), 0},	   // oldest, a wildcard, before the directed 1
		{msg(11, 1, 3), 2},	   // 1 is for 2
		{msg(12, 1, 2), 1},	   // now the oldest
		{msg(13, 9, 3), 4},	   // only the any-tag receive
		{msg(14, 1, 2, false), 5}, // unknown: skips the directed 3
		{msg(15, 1, 2), 3},
	};
	std::vector<int> left{0, 1, 2, 3, 4, 5};
	for (auto &st : steps) {
		Recv *got = m.arrive(kT, st.in);
		ck_assert_msg(id_of(got) == st.want, "message %d went to %d, want %d", st.in.id,
			      id_of(got), st.want);
		ck_assert(m.remove(*got));
		std::erase(left, st.want);
		const std::vector<int> now = posted_ids(m, kT);
		ck_assert_msg(now == left, "posted %s, want %s", str(now).c_str(),
			      str(left).c_str());
	}
	ck_assert(m.empty());

	// Untagged, with repeated identical wildcards: strict posting order.
	Matcher mu;
	Recv ru[6];
	for (int i = 0; i < 6; i++) {
		ru[i] = recv(i);
		ck_assert_ptr_null(mu.post(kU, ru[i]));
	}
	for (int i = 0; i < 6; i++) {
		Msg x = msg(100 + i, uint64_t(i), uint64_t(i));
		Recv *got = mu.arrive(kU, x);
		ck_assert_int_eq(id_of(got), i);
		ck_assert(mu.remove(*got));
	}
	ck_assert(mu.empty());
}
END_TEST

START_TEST(unexpected_fifo_interleaved)
{
	Matcher m(true);
	Msg u[] = {
		msg(0, 1, 1),
		msg(1, 1, 2),
		msg(2, 1, 7, false),
		msg(3, 2, 1),
		msg(4, 1, 2),
		msg(5, 1, 1),
	};
	for (Msg &x : u)
		ck_assert_ptr_null(m.arrive(kT, x));
	ck_assert_unexpected(m, kT, 0, 1, 2, 3, 4, 5);

	struct {
		Recv in;
		int want;
	} steps[] = {
		{recv(10, 1, 0, 2), 1},		 // from 2: the older of 1 and 4
		{recv(11, 1, 0, kAnySource), 0}, // any: the oldest
		{recv(12, 0, kAllBits, 1), 3},	 // any tag from 1: 3 before 5
		{recv(13, 1, 0, 1), 5},		 // skips the unknown 2 and 4 from 2
		{recv(14, 1, 0, kAnySource), 2}, // the unknown one, now the oldest
		{recv(15, 1, 0, 1), -1},	 // none left from 1: queued
	};
	std::vector<int> left{0, 1, 2, 3, 4, 5};
	for (auto &st : steps) {
		Msg *got = m.post(kT, st.in);
		ck_assert_msg(id_of(got) == st.want, "receive %d took %d, want %d", st.in.id,
			      id_of(got), st.want);
		if (got) {
			ck_assert(!st.in.linked());
			ck_assert(m.remove(*got));
			std::erase(left, st.want);
		} else {
			ck_assert(st.in.linked());
		}
		const std::vector<int> now = unexpected_ids(m, kT);
		ck_assert_msg(now == left, "unexpected %s, want %s", str(now).c_str(),
			      str(left).c_str());
	}
	ck_assert_unexpected(m, kT, 4);
	ck_assert_posted(m, kT, 15);

	// Untagged, identical keys: strict arrival order.
	Matcher mu;
	Msg uu[6];
	for (int i = 0; i < 6; i++) {
		uu[i] = msg(i, uint64_t(i) * 3);
		ck_assert_ptr_null(mu.arrive(kU, uu[i]));
	}
	for (int i = 0; i < 6; i++) {
		Recv x = recv(100 + i, 77);
		Msg *got = mu.post(kU, x);
		ck_assert_int_eq(id_of(got), i);
		ck_assert(mu.remove(*got));
	}
	ck_assert(mu.empty());
}
END_TEST

START_TEST(unexpected_then_post)
{
	Matcher m;
	Msg u = msg(1, 42, 3);
	ck_assert_ptr_null(m.arrive(kT, u));
	ck_assert(u.linked());
	ck_assert_unexpected(m, kT, 1);

	// The receive takes it and is not queued; the message stays until the
	// caller has copied it out and removes it.
	Recv r = recv(2, 42);
	ck_assert_ptr_eq(m.post(kT, r), &u);
	ck_assert(!r.linked());
	ck_assert_posted(m, kT);
	ck_assert_unexpected(m, kT, 1);
	ck_assert(m.remove(u));
	ck_assert(!u.linked());
	ck_assert(m.empty());

	// The same receive posted again now waits.
	ck_assert_ptr_null(m.post(kT, r));
	ck_assert_posted(m, kT, 2);
	// The low-level pair does the same as arrive(): find, then queue.
	Msg v = msg(3, 43);
	ck_assert_ptr_null(m.find_posted(kT, v.key));
	ck_assert(m.append_unexpected(kT, v));
	ck_assert_unexpected(m, kT, 3);
	ck_assert_ptr_eq(m.find_posted(kT, MsgKey{42, 9, true}), &r);
}
END_TEST

START_TEST(cancel_by_context)
{
	Matcher m;
	Recv r[] = {
		recv(0, 1, 0, kAnySource, kCtxA),
		recv(1, 1, 0, kAnySource, kCtxB),
		recv(2, 1, 0, kAnySource, kCtxC),
		recv(3, 1, 0, kAnySource, kCtxB), // a second operation, same context
		recv(4, 1, 0, kAnySource, nullptr),
	};
	for (Recv &x : r)
		ck_assert_ptr_null(m.post(kT, x));
	Msg other = msg(9, 2);
	ck_assert_ptr_null(m.arrive(kT, other));

	// Same tag everywhere: the context alone picks, oldest first.
	ck_assert_ptr_eq(m.cancel(kT, kCtxB), &r[1]);
	ck_assert(!r[1].linked());
	ck_assert_posted(m, kT, 0, 2, 3, 4);
	ck_assert_ptr_null(m.cancel(kT, kCtxD));
	ck_assert_ptr_null(m.cancel(kCtxD));
	ck_assert_posted(m, kT, 0, 2, 3, 4);
	ck_assert_ptr_eq(m.cancel(kCtxB), &r[3]);
	ck_assert_ptr_null(m.cancel(kCtxB));
	ck_assert_ptr_eq(m.cancel(nullptr), &r[4]);
	ck_assert_posted(m, kT, 0, 2);
	// The unexpected queue is not touched.
	ck_assert_unexpected(m, kT, 9);

	// A cancelled receive no longer matches; the next oldest does.
	ck_assert_ptr_eq(m.cancel(kCtxA), &r[0]);
	Msg x = msg(10, 1);
	ck_assert_ptr_eq(m.arrive(kT, x), &r[2]);

	// The kind-less form searches both kinds.
	Recv ru = recv(5, 0, 0, kAnySource, kCtxD);
	ck_assert_ptr_null(m.post(kU, ru));
	ck_assert_ptr_null(m.cancel(kT, kCtxD));
	ck_assert_ptr_eq(m.cancel(kCtxD), &ru);
	ck_assert_posted(m, kU);
	ck_assert_ptr_eq(m.cancel(kCtxC), &r[2]);
	ck_assert_ptr_null(m.cancel(kCtxC));
	ck_assert_posted(m, kT);

	// One context in both kinds (an application bug): untagged goes first.
	Recv dt = recv(6, 0, 0, kAnySource, kCtxA);
	Recv du = recv(7, 0, 0, kAnySource, kCtxA);
	ck_assert_ptr_null(m.post(kT, dt));
	ck_assert_ptr_null(m.post(kU, du));
	ck_assert_ptr_eq(m.cancel(kCtxA), &du);
	ck_assert_ptr_eq(m.cancel(kCtxA), &dt);
	ck_assert_ptr_null(m.cancel(kCtxA));
}
END_TEST

START_TEST(peek_leaves_message)
{
	Matcher m;
	Msg a = msg(1, 5);
	Msg b = msg(2, 6);
	ck_assert_ptr_null(m.arrive(kT, a));
	ck_assert_ptr_null(m.arrive(kT, b));

	const RecvKey k5{5, 0, kAnySource};
	ck_assert_ptr_eq(m.find_unexpected(kT, k5), &a);
	ck_assert_ptr_eq(m.find_unexpected(kT, k5), &a);
	ck_assert_ptr_eq(m.find_unexpected(kT, RecvKey{0, kAllBits, kAnySource}), &a);
	ck_assert_ptr_eq(m.find_unexpected(kT, RecvKey{6, 0, kAnySource}), &b);
	ck_assert_ptr_null(m.find_unexpected(kT, RecvKey{7, 0, kAnySource}));
	// A peek that finds nothing queues nothing.
	ck_assert_posted(m, kT);
	ck_assert_unexpected(m, kT, 1, 2);

	Recv r = recv(3, 6);
	ck_assert_ptr_eq(m.post(kT, r), &b);
}
END_TEST

START_TEST(peek_discard)
{
	// FI_PEEK|FI_DISCARD: the caller removes what the peek found, no copy.
	Matcher m;
	Msg a = msg(1, 5);
	Msg b = msg(2, 5);
	ck_assert_ptr_null(m.arrive(kT, a));
	ck_assert_ptr_null(m.arrive(kT, b));
	Msg *p = m.find_unexpected(kT, RecvKey{5, 0, kAnySource});
	ck_assert_ptr_eq(p, &a);
	ck_assert(m.remove(*p));
	ck_assert_unexpected(m, kT, 2);
	Recv r = recv(3, 5);
	ck_assert_ptr_eq(m.post(kT, r), &b);
	ck_assert(m.remove(b));
	Recv r2 = recv(4, 5);
	ck_assert_ptr_null(m.post(kT, r2));
	ck_assert_posted(m, kT, 4);
}
END_TEST

START_TEST(peek_claim_then_claim)
{
	Matcher m;
	Msg a = msg(1, 5, 1);
	Msg b = msg(2, 5, 2);
	Msg c = msg(3, 5, 3);
	for (Msg *x : {&a, &b, &c})
		ck_assert_ptr_null(m.arrive(kT, *x));
	const RecvKey any5{5, 0, kAnySource};
	const RecvKey anything{0, kAllBits, kAnySource};

	// FI_PEEK|FI_CLAIM twice: each peek sees the next unclaimed message.
	Msg *p = m.find_unexpected(kT, any5);
	ck_assert_ptr_eq(p, &a);
	m.claim(*p, kCtxA);
	ck_assert(a.claimed);
	p = m.find_unexpected(kT, any5);
	ck_assert_ptr_eq(p, &b);
	m.claim(*p, nullptr); // a null context is a context like any other
	ck_assert_ptr_eq(m.find_unexpected(kT, anything), &c);

	// Claimed messages are invisible to receives, wildcards included.
	Recv r = recv(10, 0, kAllBits);
	ck_assert_ptr_eq(m.post(kT, r), &c);
	ck_assert(m.remove(c));
	ck_assert_ptr_null(m.find_unexpected(kT, anything));
	Recv r2 = recv(11, 5);
	ck_assert_ptr_null(m.post(kT, r2));
	ck_assert_posted(m, kT, 11);
	ck_assert_unexpected(m, kT, 1, 2);

	// They stay where they are and are found by their claim context only.
	ck_assert_ptr_eq(m.find_claimed(kT, kCtxA), &a);
	ck_assert_ptr_eq(m.find_claimed(kT, nullptr), &b);
	ck_assert_ptr_null(m.find_claimed(kT, kCtxB));
	ck_assert_ptr_null(m.find_claimed(kU, kCtxA));
	// An unclaimed message is not found by a claim lookup, even with a null
	// context (the default claim_context).
	Msg d = msg(4, 9);
	ck_assert_ptr_null(m.arrive(kT, d));
	ck_assert_ptr_null(m.find_claimed(kT, kCtxC));
	ck_assert_ptr_eq(m.find_claimed(kT, nullptr), &b);

	// FI_CLAIM: the caller copies and removes it.
	ck_assert(m.remove(a));
	ck_assert_ptr_null(m.find_claimed(kT, kCtxA));
	// FI_CLAIM|FI_DISCARD: removed with no copy.
	p = m.find_claimed(kT, nullptr);
	ck_assert_ptr_eq(p, &b);
	ck_assert(m.remove(*p));
	ck_assert_ptr_null(m.find_claimed(kT, nullptr));
	ck_assert_unexpected(m, kT, 4);

	// A recycled node comes back unclaimed.
	ck_assert(a.claimed);
	ck_assert(m.append_unexpected(kT, a));
	ck_assert(!a.claimed);
	ck_assert_ptr_null(a.claim_context);
	ck_assert_ptr_eq(m.find_unexpected(kT, any5), &a);
	ck_assert_ptr_null(m.find_claimed(kT, kCtxA));

	// Peek and claim work the same for untagged messages.
	Msg u = msg(20, 0, 1);
	ck_assert_ptr_null(m.arrive(kU, u));
	m.claim(u, kCtxD);
	ck_assert_ptr_null(m.find_unexpected(kU, RecvKey{}));
	ck_assert_ptr_eq(m.find_claimed(kU, kCtxD), &u);
}
END_TEST

START_TEST(multi_recv_stays_posted)
{
	Matcher m;
	Recv mr = recv(1, 0, 0, kAnySource, kCtxA);
	Recv after = recv(2);
	ck_assert_ptr_null(m.post(kU, mr));
	ck_assert_ptr_null(m.post(kU, after));
	MultiRecvSpace space{100, 0, 30};

	// Every message lands in the buffer at the head, which stays there.
	Msg x[5];
	for (int i = 0; i < 4; i++) {
		x[i] = msg(10 + i);
		ck_assert_ptr_eq(m.arrive(kU, x[i]), &mr);
		ck_assert_uint_eq(space.offset(), size_t(20 * i));
		ck_assert_uint_eq(space.consume(20), 20);
		ck_assert_posted(m, kU, 1, 2);
		ck_assert(space.should_release() == (i == 3)); // 20 left < 30
	}
	ck_assert(m.remove(mr));
	x[4] = msg(14);
	ck_assert_ptr_eq(m.arrive(kU, x[4]), &after);
	ck_assert(m.remove(after));

	// A buffer posted onto unexpected messages drains them one per post().
	Msg q[3];
	for (int i = 0; i < 3; i++) {
		q[i] = msg(20 + i);
		ck_assert_ptr_null(m.arrive(kU, q[i]));
	}
	Recv mr2 = recv(3);
	for (int i = 0; i < 3; i++) {
		Msg *got = m.post(kU, mr2);
		ck_assert_int_eq(id_of(got), 20 + i);
		ck_assert(!mr2.linked());
		ck_assert(m.remove(*got));
	}
	ck_assert_ptr_null(m.post(kU, mr2));
	ck_assert_posted(m, kU, 3);
	ck_assert_unexpected(m, kU);
}
END_TEST

START_TEST(multi_recv_space)
{
	MultiRecvSpace s{100, 0, 30};
	ck_assert_uint_eq(s.available(), 100);
	ck_assert(!s.should_release());
	ck_assert_uint_eq(s.consume(50), 50);
	ck_assert_uint_eq(s.offset(), 50);
	ck_assert(!s.should_release());
	ck_assert_uint_eq(s.consume(20), 20);
	ck_assert_uint_eq(s.available(), 30);
	ck_assert(!s.should_release()); // exactly min_free left: still usable
	ck_assert_uint_eq(s.consume(1), 1);
	ck_assert(s.should_release());

	// A message larger than what is left is truncated.
	MultiRecvSpace t{10, 0, 0};
	ck_assert_uint_eq(t.consume(4), 4);
	ck_assert(!t.should_release());
	ck_assert_uint_eq(t.consume(25), 6);
	ck_assert_uint_eq(t.available(), 0);
	// min_free 0 still releases a full buffer.
	ck_assert(t.should_release());
	ck_assert_uint_eq(t.consume(5), 0);

	// Zero-length messages take no room.
	MultiRecvSpace z{8, 0, 1};
	ck_assert_uint_eq(z.consume(0), 0);
	ck_assert_uint_eq(z.offset(), 0);
	ck_assert(!z.should_release());
}
END_TEST

START_TEST(remove_head_middle_tail)
{
	for (MatchKind k : {kU, kT}) {
		Matcher m;
		Recv r[5];
		Msg u[5];
		for (int i = 0; i < 5; i++) {
			r[i] = recv(i, 0, 0, kAnySource);
			u[i] = msg(i, 1); // tag 1: not taken by the tag-0 receives
			ck_assert(m.append_posted(k, r[i]));
			ck_assert(m.append_unexpected(k, u[i]));
		}
		ck_assert(m.remove(r[2]));
		ck_assert_posted(m, k, 0, 1, 3, 4);
		ck_assert(m.remove(r[0]));
		ck_assert_posted(m, k, 1, 3, 4);
		ck_assert(m.remove(r[4]));
		ck_assert_posted(m, k, 1, 3);
		ck_assert_ptr_eq(m.posted_front(k), &r[1]);
		ck_assert_ptr_eq(Matcher::next(r[1]), &r[3]);
		ck_assert_ptr_null(Matcher::next(r[3]));
		// Removing twice, or a node never queued, changes nothing.
		ck_assert(!m.remove(r[2]));
		Recv stray = recv(9);
		ck_assert(!m.remove(stray));
		ck_assert_posted(m, k, 1, 3);
		// The links still hold: append at the tail, match at the head.
		ck_assert(m.append_posted(k, r[4]));
		ck_assert(m.append_posted(k, r[0]));
		ck_assert_posted(m, k, 1, 3, 4, 0);
		Msg x = msg(7, 0, 0);
		ck_assert_ptr_eq(m.find_posted(k, x.key), &r[1]);
		// Down to one node (head and tail), then none.
		ck_assert(m.remove(r[3]));
		ck_assert(m.remove(r[1]));
		ck_assert(m.remove(r[0]));
		ck_assert_posted(m, k, 4);
		ck_assert(m.remove(r[4]));
		ck_assert_posted(m, k);
		ck_assert_ptr_null(m.posted_front(k));

		// The same on the unexpected queue.
		ck_assert(m.remove(u[2]));
		ck_assert(m.remove(u[0]));
		ck_assert(m.remove(u[4]));
		ck_assert_unexpected(m, k, 1, 3);
		ck_assert(!m.remove(u[4]));
		ck_assert(m.append_unexpected(k, u[0]));
		ck_assert_unexpected(m, k, 1, 3, 0);
		ck_assert_ptr_eq(m.unexpected_front(k), &u[1]);
		ck_assert_ptr_eq(Matcher::next(u[3]), &u[0]);
		ck_assert(m.remove(u[3]));
		ck_assert(m.remove(u[1]));
		ck_assert(m.remove(u[0]));
		ck_assert(m.empty());
	}
}
END_TEST

START_TEST(nodes_belong_to_one_matcher)
{
	Matcher a;
	Matcher b;
	Recv r = recv(1);
	Msg u = msg(2, 0, 0);
	ck_assert(a.append_posted(kT, r));
	ck_assert(b.append_unexpected(kU, u));
	// Already linked: refused, wherever.
	ck_assert(!a.append_posted(kU, r));
	ck_assert(!b.append_posted(kT, r));
	ck_assert(!a.append_unexpected(kT, u));
	// Another matcher's node is not removed.
	ck_assert(!b.remove(r));
	ck_assert(!a.remove(u));
	ck_assert_posted(a, kT, 1);
	ck_assert_unexpected(b, kU, 2);
	ck_assert(a.remove(r));
	ck_assert(b.remove(u));
	ck_assert(a.empty());
	ck_assert(b.empty());
}
END_TEST

START_TEST(copying_a_node_keeps_links_apart)
{
	Matcher m;
	Recv r[3] = {recv(0), recv(1), recv(2)};
	for (Recv &x : r)
		ck_assert(m.append_posted(kT, x));

	// A copy of a queued node starts unlinked.
	Recv copy = r[1];
	ck_assert(!copy.linked());
	ck_assert_int_eq(copy.id, 1);
	ck_assert(!m.remove(copy));
	ck_assert_posted(m, kT, 0, 1, 2);

	// Assigning over a queued node (a pool reset) keeps it where it is.
	r[1] = recv(7, 3);
	ck_assert(r[1].linked());
	ck_assert_posted(m, kT, 0, 7, 2);
	ck_assert(m.remove(r[1]));
	ck_assert_posted(m, kT, 0, 2);
	// Assigning a queued node to an unlinked one does not link it.
	Recv fresh;
	fresh = r[0];
	ck_assert(!fresh.linked());
	ck_assert_posted(m, kT, 0, 2);
}
END_TEST

namespace {

// The reference: vectors, linear scans, the rules spelled out bit by bit.
struct ModelRecv {
	int id;
	RecvKey key;
	void *context;
};
struct ModelMsg {
	int id;
	MsgKey key;
	bool claimed;
	void *claim_context;
};

bool model_matches(bool tagged, bool directed, const RecvKey &r, const MsgKey &m)
{
	if (tagged)
		for (int bit = 0; bit < 64; bit++) {
			const bool ignored = (r.ignore >> bit) & 1;
			if (!ignored && ((r.tag >> bit) & 1) != ((m.tag >> bit) & 1))
				return false;
		}
	if (directed && r.src != kAnySource && (!m.src_known || m.src != r.src))
		return false;
	return true;
}

struct Model {
	std::vector<ModelRecv> posted[2];
	std::vector<ModelMsg> unexpected[2];
	bool directed[2];

	int find_unexpected(int k, const RecvKey &key) const
	{
		for (size_t i = 0; i < unexpected[k].size(); i++)
			if (!unexpected[k][i].claimed &&
			    model_matches(k == 1, directed[k], key, unexpected[k][i].key))
				return int(i);
		return -1;
	}
	int find_posted(int k, const MsgKey &key) const
	{
		for (size_t i = 0; i < posted[k].size(); i++)
			if (model_matches(k == 1, directed[k], posted[k][i].key, key))
				return int(i);
		return -1;
	}
};

struct RandomRun {
	std::mt19937_64 rng;
	Matcher m;
	Model model;
	static constexpr int kPool = 256;
	Recv recvs[kPool];
	Msg msgs[kPool];
	std::vector<int> free_recvs;
	std::vector<int> free_msgs;
	// What the run exercised, so that a broken generator cannot pass
	// vacuously.
	unsigned posted_matches = 0, unexpected_matches = 0, kept_multi = 0, claims = 0,
		 claim_hits = 0, cancels = 0, removals = 0, misses = 0;

	RandomRun(uint64_t seed, bool dir_u, bool dir_t) : rng(seed)
	{
		m.directed(kU, dir_u);
		m.directed(kT, dir_t);
		model.directed[0] = dir_u;
		model.directed[1] = dir_t;
		for (int i = kPool - 1; i >= 0; i--) {
			recvs[i].id = i;
			msgs[i].id = i;
			free_recvs.push_back(i);
			free_msgs.push_back(i);
		}
	}

	uint64_t pick(uint64_t n) { return rng() % n; }
	MatchKind kind(int k) const { return k ? kT : kU; }

	uint64_t random_tag()
	{
		static const uint64_t tags[] = {0, 1, 2, 3, 0x8000000000000000ULL,
						0x8000000000000001ULL, kAllBits};
		return tags[pick(sizeof(tags) / sizeof(tags[0]))];
	}
	RecvKey random_recv_key()
	{
		static const uint64_t ignores[] = {0, 0, 0, 1, 2, 3, 0x8000000000000000ULL,
						   0x7FFFFFFFFFFFFFFFULL, kAllBits};
		RecvKey k;
		k.tag = random_tag();
		k.ignore = ignores[pick(sizeof(ignores) / sizeof(ignores[0]))];
		k.src = pick(2) ? kAnySource : pick(3);
		return k;
	}
	MsgKey random_msg_key()
	{
		MsgKey k;
		k.tag = random_tag();
		k.src_known = pick(5) != 0;
		// An unknown sender's src is garbage, sometimes one a directed
		// receive names, sometimes FI_ADDR_NOTAVAIL.
		k.src = k.src_known ? pick(3) : (pick(2) ? pick(3) : kAnySource);
		return k;
	}
	void *random_context()
	{
		const uint64_t i = pick(5);
		return i == 4 ? nullptr : &ctx_pool[i];
	}

	size_t model_msg_index(int k, int id) const
	{
		for (size_t i = 0; i < model.unexpected[k].size(); i++)
			if (model.unexpected[k][i].id == id)
				return i;
		ck_abort_msg("message %d not in the model", id);
		return 0;
	}

	void drop_msg(int k, size_t idx)
	{
		const int id = model.unexpected[k][idx].id;
		ck_assert(m.remove(msgs[id]));
		model.unexpected[k].erase(model.unexpected[k].begin() + long(idx));
		free_msgs.push_back(id);
		removals++;
	}
	void drop_recv(int k, size_t idx)
	{
		const int id = model.posted[k][idx].id;
		ck_assert(m.remove(recvs[id]));
		model.posted[k].erase(model.posted[k].begin() + long(idx));
		free_recvs.push_back(id);
		removals++;
	}

	void op_post(int k)
	{
		if (free_recvs.empty())
			return;
		const int id = free_recvs.back();
		Recv &r = recvs[id];
		r.key = random_recv_key();
		r.context = random_context();
		const int want = model.find_unexpected(k, r.key);
		const int want_id = want < 0 ? -1 : model.unexpected[k][size_t(want)].id;
		Msg *got = m.post(kind(k), r);
		ck_assert_int_eq(id_of(got), want_id);
		if (got) {
			ck_assert(!r.linked());
			drop_msg(k, size_t(want));
			unexpected_matches++;
		} else {
			free_recvs.pop_back();
			model.posted[k].push_back({id, r.key, r.context});
			misses++;
		}
	}

	void op_arrive(int k)
	{
		if (free_msgs.empty())
			return;
		const int id = free_msgs.back();
		Msg &u = msgs[id];
		u.key = random_msg_key();
		// Leftovers from the node's last life must not matter.
		u.claimed = pick(2);
		const int want = model.find_posted(k, u.key);
		const int want_id = want < 0 ? -1 : model.posted[k][size_t(want)].id;
		Recv *got = m.arrive(kind(k), u);
		ck_assert_int_eq(id_of(got), want_id);
		if (got) {
			ck_assert(!u.linked());
			posted_matches++;
			if (pick(4) == 0)
				kept_multi++; // a multi-receive buffer with room left
			else
				drop_recv(k, size_t(want));
		} else {
			free_msgs.pop_back();
			model.unexpected[k].push_back({id, u.key, false, nullptr});
			misses++;
		}
	}

	void op_peek(int k)
	{
		const RecvKey key = random_recv_key();
		const int want = model.find_unexpected(k, key);
		const int want_id = want < 0 ? -1 : model.unexpected[k][size_t(want)].id;
		Msg *got = m.find_unexpected(kind(k), key);
		ck_assert_int_eq(id_of(got), want_id);
		if (!got)
			return;
		switch (pick(3)) {
		case 0: { // FI_PEEK|FI_CLAIM
			void *ctx = random_context();
			m.claim(*got, ctx);
			model.unexpected[k][size_t(want)].claimed = true;
			model.unexpected[k][size_t(want)].claim_context = ctx;
			claims++;
			break;
		}
		case 1: // FI_PEEK|FI_DISCARD
			drop_msg(k, size_t(want));
			break;
		default: // plain FI_PEEK
			break;
		}
	}

	void op_claimed(int k)
	{
		void *ctx = random_context();
		int want = -1;
		for (const ModelMsg &x : model.unexpected[k])
			if (x.claimed && x.claim_context == ctx) {
				want = x.id;
				break;
			}
		Msg *got = m.find_claimed(kind(k), ctx);
		ck_assert_int_eq(id_of(got), want);
		if (got) {
			drop_msg(k, model_msg_index(k, want));
			claim_hits++;
		}
	}

	void op_cancel()
	{
		void *ctx = random_context();
		const uint64_t how = pick(3); // 0: untagged, 1: tagged, 2: kind-less
		int want = -1, want_kind = -1;
		for (int k : {0, 1}) {
			if ((how == 0 && k == 1) || (how == 1 && k == 0) || want >= 0)
				continue;
			for (size_t i = 0; i < model.posted[k].size(); i++)
				if (model.posted[k][i].context == ctx) {
					want = int(i);
					want_kind = k;
					break;
				}
		}
		Recv *got = how == 2 ? m.cancel(ctx) : m.cancel(kind(int(how)), ctx);
		if (want < 0) {
			ck_assert_ptr_null(got);
			return;
		}
		const int want_id = model.posted[want_kind][size_t(want)].id;
		ck_assert_int_eq(id_of(got), want_id);
		ck_assert(!got->linked());
		model.posted[want_kind].erase(model.posted[want_kind].begin() + want);
		free_recvs.push_back(got->id);
		cancels++;
	}

	void check_queues()
	{
		for (int k : {0, 1}) {
			const MatchKind mk = kind(k);
			ck_assert_uint_eq(m.posted_count(mk), model.posted[k].size());
			ck_assert_uint_eq(m.unexpected_count(mk), model.unexpected[k].size());
			size_t i = 0;
			for (Recv *r = m.posted_front(mk); r; r = Matcher::next(*r), i++) {
				ck_assert_uint_lt(i, model.posted[k].size());
				ck_assert_int_eq(r->id, model.posted[k][i].id);
			}
			ck_assert_uint_eq(i, model.posted[k].size());
			i = 0;
			for (Msg *u = m.unexpected_front(mk); u; u = Matcher::next(*u), i++) {
				ck_assert_uint_lt(i, model.unexpected[k].size());
				ck_assert_int_eq(u->id, model.unexpected[k][i].id);
				ck_assert(u->claimed == model.unexpected[k][i].claimed);
			}
			ck_assert_uint_eq(i, model.unexpected[k].size());
		}
	}

	void run(int ops)
	{
		for (int n = 0; n < ops; n++) {
			const int k = int(pick(2));
			const uint64_t op = pick(100);
			if (op < 30)
				op_post(k);
			else if (op < 60)
				op_arrive(k);
			else if (op < 72)
				op_peek(k);
			else if (op < 80)
				op_claimed(k);
			else if (op < 88)
				op_cancel();
			else if (op < 94) {
				if (!model.posted[k].empty())
					drop_recv(k, pick(model.posted[k].size()));
			} else if (!model.unexpected[k].empty()) {
				drop_msg(k, pick(model.unexpected[k].size()));
			}
			check_queues();
		}
	}
};

} // namespace

START_TEST(random_against_model)
{
	struct {
		uint64_t seed;
		bool dir_u, dir_t;
	} const runs[] = {
		{0x7A6D41C4ULL, false, false},
		{0x5EEDF00DULL, true, true},
		{0x0DDBA11ULL, false, true},
	};
	for (const auto &c : runs) {
		auto run = std::make_unique<RandomRun>(c.seed, c.dir_u, c.dir_t);
		run->run(4000);
		// Every path was taken, many times.
		ck_assert_uint_gt(run->posted_matches, 200);
		ck_assert_uint_gt(run->unexpected_matches, 200);
		ck_assert_uint_gt(run->kept_multi, 30);
		ck_assert_uint_gt(run->misses, 200);
		ck_assert_uint_gt(run->claims, 20);
		ck_assert_uint_gt(run->claim_hits, 10);
		ck_assert_uint_gt(run->cancels, 30);
		ck_assert_uint_gt(run->removals, 300);
	}
}
END_TEST

Suite *tag_match_suite()
{
	Suite *s = suite_create("tag_match");

	TCase *tc = tcase_create("rules");
	tcase_add_test(tc, tag_rule_cases);
	tcase_add_test(tc, source_rule_cases);
	tcase_add_test(tc, untagged_and_tagged_are_separate);
	tcase_add_test(tc, directed_receive_honoured);
	tcase_add_test(tc, directed_flag_off_ignores_src);
	tcase_add_test(tc, directed_per_kind);
	tcase_add_test(tc, unknown_source_never_matches_directed);
	suite_add_tcase(s, tc);

	tc = tcase_create("queues");
	tcase_add_test(tc, posted_fifo_interleaved);
	tcase_add_test(tc, unexpected_fifo_interleaved);
	tcase_add_test(tc, unexpected_then_post);
	tcase_add_test(tc, cancel_by_context);
	tcase_add_test(tc, peek_leaves_message);
	tcase_add_test(tc, peek_discard);
	tcase_add_test(tc, peek_claim_then_claim);
	tcase_add_test(tc, multi_recv_stays_posted);
	tcase_add_test(tc, multi_recv_space);
	tcase_add_test(tc, remove_head_middle_tail);
	tcase_add_test(tc, nodes_belong_to_one_matcher);
	tcase_add_test(tc, copying_a_node_keeps_links_apart);
	suite_add_tcase(s, tc);

	tc = tcase_create("random");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, random_against_model);
	suite_add_tcase(s, tc);
	return s;
}
