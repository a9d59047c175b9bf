// Receive-side message matching for a reliable-datagram (FI_EP_RDM)
// endpoint: fi_recv/fi_send and fi_trecv/fi_tsend semantics, with no
// knowledge of how messages travel.
//
// Two independent kinds, each with its own posted-receive queue and
// unexpected-message queue, both strictly FIFO: a message matches only
// receives of its own kind (MatchKind::kMsg never sees a tagged receive),
// the oldest eligible receive wins, and a receive takes the oldest eligible
// unexpected message. A tagged message matches when
// ((msg.tag ^ recv.tag) & ~recv.ignore) == 0; an untagged one ignores tags.
//
// The engine owns no memory: receives and messages are caller-owned objects
// derived from PostedRecv / UnexpectedMsg (the provider keeps them in pools
// and adds its own payload: buffers, lengths, header bytes), linked through
// an intrusive hook. Matching never unlinks anything: find_*() and the
// post()/arrive() conveniences return the match and the caller remove()s it
// once it is consumed, or keeps it queued (an FI_MULTI_RECV buffer with room
// left stays at its place in the queue).
//
// The calls whose result is the match are [[nodiscard]]: dropping what
// post() or arrive() returns loses a message.
//
// Not thread-safe: every call, including the read-only ones, runs under the
// endpoint's receive lock, which also covers the caller's use of a node
// between finding and removing it.
//
// Complexity: append and remove are O(1); matching is a linear scan from the
// oldest entry, like ofi_rxm's dlists. The common cases stop at the head:
// without directed receive an untagged message takes the head receive
// without comparing anything, and an application that pre-posts receives in
// the order its messages arrive matches the head every time. Claimed
// messages stay in the unexpected queue and every scan steps over them until
// their FI_CLAIM receive comes. Hashing by tag or source would make matching
// O(1) but needs sequence numbers to keep the global FIFO order across
// wildcard receives; not worth it before a profile says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace vrma {

// A receive's source meaning "any sender" (libfabric's FI_ADDR_UNSPEC).
inline constexpr uint64_t kAnySource = ~0ULL;

enum class MatchKind : uint8_t {
	kMsg = 0,    // fi_recv / fi_send
	kTagged = 1, // fi_trecv / fi_tsend
};

// What a receive accepts. For MatchKind::kMsg, tag and ignore are not used.
struct RecvKey {
	uint64_t tag = 0;
	uint64_t ignore = 0;	  // bits of tag that do not have to match
	uint64_t src = kAnySource; // fi_addr of the only sender accepted, or any
};

// What identifies an arriving message.
//
// Whether the sender is known is a bool of its own, not a sentinel fi_addr:
// libfabric defines FI_ADDR_NOTAVAIL (sender not in the AV) and
// FI_ADDR_UNSPEC (any source) as the same value, ~0. A message from an
// unknown sender carried as src == FI_ADDR_NOTAVAIL would compare equal to an
// any-source receive's src and, worse, a directed receive can never name it;
// with src_known == false the message matches only any-source receives
// (or any receive when directed receive is off), whatever src holds.
struct MsgKey {
	uint64_t tag = 0;
	uint64_t src = 0;
	bool src_known = false;
};

// The tag rule of fi_tagged(3).
constexpr bool tag_matches(uint64_t msg_tag, uint64_t recv_tag, uint64_t ignore) noexcept
{
	return ((msg_tag ^ recv_tag) & ~ignore) == 0;
}

// The source rule: `directed` is whether the endpoint has FI_DIRECTED_RECV;
// without it a receive's src is ignored (fi_endpoint(3)).
constexpr bool source_matches(const MsgKey &msg, uint64_t recv_src, bool directed) noexcept
{
	return !directed || recv_src == kAnySource || (msg.src_known && msg.src == recv_src);
}

namespace detail {
template <typename T> class MatchList;
} // namespace detail

// The intrusive link. Copying or assigning a node does not copy its links:
// the copy starts unlinked and an assigned-to node stays where it is, so a
// pool may reset a node with `node = T{}` without corrupting a queue.
template <typename T> class MatchHook {
public:
	MatchHook() noexcept = default;
	MatchHook(const MatchHook &) noexcept {}
	MatchHook &operator=(const MatchHook &) noexcept { return *this; }

	// In a queue of some matcher.
	bool linked() const noexcept { return owner_ != nullptr; }

private:
	template <typename> friend class detail::MatchList;
	T *prev_ = nullptr;
	T *next_ = nullptr;
	const void *owner_ = nullptr; // the MatchList holding this node
};

// Base of a caller's receive object.
struct PostedRecv : MatchHook<PostedRecv> {
	RecvKey key;
	void *context = nullptr; // the operation's context, for fi_cancel
};

// Base of a caller's unexpected-message object.
struct UnexpectedMsg : MatchHook<UnexpectedMsg> {
	MsgKey key;
	// FI_PEEK|FI_CLAIM: a claimed message is invisible to every match and
	// peek and is found only by find_claimed(claim_context). Its own bool
	// because a claim's context may legitimately be null.
	bool claimed = false;
	void *claim_context = nullptr;
};

namespace detail {

// Doubly linked, null-terminated (no sentinel, so no pointer into itself
// beyond the owner tag its nodes carry).
template <typename T> class MatchList {
public:
	T *front() const noexcept { return head_; }
	static T *next(const T &n) noexcept { return n.next_; }
	size_t size() const noexcept { return size_; }
	bool empty() const noexcept { return head_ == nullptr; }
	bool holds(const T &n) const noexcept { return n.owner_ == this; }

	// Precondition: n is not linked.
	void push_back(T &n) noexcept
	{
		n.prev_ = tail_;
		n.next_ = nullptr;
		n.owner_ = this;
		if (tail_)
			tail_->next_ = &n;
		else
			head_ = &n;
		tail_ = &n;
		size_++;
	}

	// Precondition: holds(n).
	void erase(T &n) noexcept
	{
		if (n.prev_)
			n.prev_->next_ = n.next_;
		else
			head_ = n.next_;
		if (n.next_)
			n.next_->prev_ = n.prev_;
		else
			tail_ = n.prev_;
		n.prev_ = n.next_ = nullptr;
		n.owner_ = nullptr;
		size_--;
	}

private:
	T *head_ = nullptr;
	T *tail_ = nullptr;
	size_t size_ = 0;
};

} // namespace detail

// Recv and Msg are the caller's node types; every pointer handed back is
// one the caller put in, cast back to its own type.
//
// The matcher must not move while nodes are linked (they point at its
// lists), hence no copy or move.
template <typename Recv = PostedRecv, typename Msg = UnexpectedMsg> class TagMatcher {
	static_assert(std::is_base_of_v<PostedRecv, Recv>, "Recv must derive from PostedRecv");
	static_assert(std::is_base_of_v<UnexpectedMsg, Msg>, "Msg must derive from UnexpectedMsg");

public:
	// directed: the endpoint has FI_DIRECTED_RECV (for both kinds).
	explicit TagMatcher(bool directed = false) noexcept { this->directed(directed); }
	TagMatcher(const TagMatcher &) = delete;
	TagMatcher &operator=(const TagMatcher &) = delete;

	// Whether receives' src is honoured. Per kind so that a later
	// FI_TAGGED_DIRECTED_RECV (tagged only) maps onto it. Meant to be set
	// before the endpoint is enabled; a change applies to later matching
	// only and does not re-examine what is already queued.
	void directed(bool on) noexcept { q_[0].directed = q_[1].directed = on; }
	void directed(MatchKind k, bool on) noexcept { q(k).directed = on; }
	bool directed(MatchKind k) const noexcept { return q(k).directed; }

	// --- A receive is posted -------------------------------------------

	// The oldest unclaimed unexpected message `key` accepts, left in place:
	// the receive's first step, and FI_PEEK (FI_PEEK|FI_CLAIM then claim()s
	// it, FI_PEEK|FI_DISCARD remove()s it).
	[[nodiscard]] Msg *find_unexpected(MatchKind k, const RecvKey &key) noexcept
	{
		Queues &qs = q(k);
		const bool tagged = k == MatchKind::kTagged;
		for (UnexpectedMsg *m = qs.unexpected.front(); m; m = qs.unexpected.next(*m)) {
			if (m->claimed)
				continue;
			if (tagged && !tag_matches(m->key.tag, key.tag, key.ignore))
				continue;
			if (source_matches(m->key, key.src, qs.directed))
				return static_cast<Msg *>(m);
		}
		return nullptr;
	}

	// Queues r as the newest receive. Returns false (and does nothing) when
	// r is already linked somewhere.
	bool append_posted(MatchKind k, Recv &r) noexcept
	{
		if (r.linked())
			return false;
		q(k).posted.push_back(r);
		return true;
	}

	// A receive arrives from the application: returns the message it takes
	// (still queued: the caller copies it out and remove()s it), or queues r
	// and returns nullptr. When a message is returned r is *not* queued; a
	// multi-receive buffer with room left after taking it is post()ed again,
	// which drains the unexpected queue one message at a time.
	// Precondition: r is not linked.
	[[nodiscard]] Msg *post(MatchKind k, Recv &r) noexcept
	{
		if (Msg *m = find_unexpected(k, r.key))
			return m;
		append_posted(k, r);
		return nullptr;
	}

	// --- A message arrives ---------------------------------------------

	// The oldest receive that accepts `key`, left in place. The per-message
	// hot path: the kind and directed branches are hoisted out of the scan.
	[[nodiscard]] Recv *find_posted(MatchKind k, const MsgKey &key) noexcept
	{
		Queues &qs = q(k);
		PostedRecv *r;
		if (k == MatchKind::kTagged)
			r = qs.directed ? scan_posted<true, true>(qs.posted, key)
					: scan_posted<true, false>(qs.posted, key);
		else
			r = qs.directed ? scan_posted<false, true>(qs.posted, key)
					: qs.posted.front(); // every receive matches
		return static_cast<Recv *>(r);
	}

	// Queues m as the newest unexpected message (unclaimed). Returns false
	// (and does nothing) when m is already linked somewhere.
	bool append_unexpected(MatchKind k, Msg &m) noexcept
	{
		if (m.linked())
			return false;
		m.claimed = false;
		m.claim_context = nullptr;
		q(k).unexpected.push_back(m);
		return true;
	}

	// A message arrives: returns the receive it lands in (still queued), or
	// queues m as unexpected and returns nullptr. A provider that takes m
	// from a pool only when it is needed calls find_posted() and
	// append_unexpected() itself. Precondition: m is not linked.
	[[nodiscard]] Recv *arrive(MatchKind k, Msg &m) noexcept
	{
		if (Recv *r = find_posted(k, m.key))
			return r;
		append_unexpected(k, m);
		return nullptr;
	}

	// --- Claims (FI_PEEK|FI_CLAIM, then FI_CLAIM) ----------------------

	// Hides m from matching and peeks until find_claimed(context) finds it.
	// Precondition: m is queued in this matcher.
	void claim(Msg &m, void *context) noexcept
	{
		m.claimed = true;
		m.claim_context = context;
	}

	// The oldest message claimed with `context`, left in place.
	[[nodiscard]] Msg *find_claimed(MatchKind k, const void *context) noexcept
	{
		Queues &qs = q(k);
		for (UnexpectedMsg *m = qs.unexpected.front(); m; m = qs.unexpected.next(*m))
			if (m->claimed && m->claim_context == context)
				return static_cast<Msg *>(m);
		return nullptr;
	}

	// --- Removal -------------------------------------------------------

	// Unlinks r / m from whichever queue of this matcher holds it. Returns
	// false, changing nothing, when it is in none of them (never queued,
	// already removed, or queued in another matcher).
	bool remove(Recv &r) noexcept
	{
		for (Queues &qs : q_)
			if (qs.posted.holds(r)) {
				qs.posted.erase(r);
				return true;
			}
		return false;
	}
	bool remove(Msg &m) noexcept
	{
		for (Queues &qs : q_)
			if (qs.unexpected.holds(m)) {
				qs.unexpected.erase(m);
				return true;
			}
		return false;
	}

	// fi_cancel: removes and returns the oldest posted receive of kind k
	// whose context is `context`, or nullptr. The caller completes it with
	// FI_ECANCELED.
	[[nodiscard]] Recv *cancel(MatchKind k, const void *context) noexcept
	{
		detail::MatchList<PostedRecv> &l = q(k).posted;
		for (PostedRecv *r = l.front(); r; r = l.next(*r))
			if (r->context == context) {
				l.erase(*r);
				return static_cast<Recv *>(r);
			}
		return nullptr;
	}
	// fi_cancel does not say which kind: untagged first, then tagged. A
	// context names one operation, so only a misbehaving application has it
	// in both.
	[[nodiscard]] Recv *cancel(const void *context) noexcept
	{
		if (Recv *r = cancel(MatchKind::kMsg, context))
			return r;
		return cancel(MatchKind::kTagged, context);
	}

	// --- Walking the queues (oldest first; flush on close, debugging) ---

	Recv *posted_front(MatchKind k) const noexcept
	{
		return static_cast<Recv *>(q(k).posted.front());
	}
	Msg *unexpected_front(MatchKind k) const noexcept
	{
		return static_cast<Msg *>(q(k).unexpected.front());
	}
	static Recv *next(const Recv &r) noexcept
	{
		return static_cast<Recv *>(detail::MatchList<PostedRecv>::next(r));
	}
	static Msg *next(const Msg &m) noexcept
	{
		return static_cast<Msg *>(detail::MatchList<UnexpectedMsg>::next(m));
	}
	size_t posted_count(MatchKind k) const noexcept { return q(k).posted.size(); }
	size_t unexpected_count(MatchKind k) const noexcept { return q(k).unexpected.size(); }
	bool empty() const noexcept
	{
		for (const Queues &qs : q_)
			if (!qs.posted.empty() || !qs.unexpected.empty())
				return false;
		return true;
	}

private:
	struct Queues {
		detail::MatchList<PostedRecv> posted;
		detail::MatchList<UnexpectedMsg> unexpected;
		bool directed = false;
	};

	template <bool Tagged, bool Directed>
	static PostedRecv *scan_posted(const detail::MatchList<PostedRecv> &l,
				       const MsgKey &key) noexcept
	{
		for (PostedRecv *r = l.front(); r; r = l.next(*r)) {
			if (Tagged && !tag_matches(key.tag, r->key.tag, r->key.ignore))
				continue;
			if (source_matches(key, r->key.src, Directed))
				return r;
		}
		return nullptr;
	}

	Queues &q(MatchKind k) noexcept { return q_[static_cast<size_t>(k) & 1]; }
	const Queues &q(MatchKind k) const noexcept { return q_[static_cast<size_t>(k) & 1]; }

	Queues q_[2];
};

// Space accounting of one FI_MULTI_RECV buffer. Messages are placed back to
// back; the buffer is released (its FI_MULTI_RECV completion written and the
// receive removed) once less than min_free bytes are left
// (FI_OPT_MIN_MULTI_RECV), or none at all: with min_free == 0 a full buffer
// would otherwise stay posted and truncate every later message to nothing.
struct MultiRecvSpace {
	size_t capacity = 0;
	size_t consumed = 0;
	size_t min_free = 0;

	size_t available() const noexcept { return capacity - consumed; }
	// Where the next message goes, as an offset into the buffer.
	size_t offset() const noexcept { return consumed; }
	// Places a message of len bytes; returns how many fit (fewer means the
	// message is truncated: an FI_ETRUNC completion).
	size_t consume(size_t len) noexcept
	{
		const size_t n = len < available() ? len : available();
		consumed += n;
		return n;
	}
	bool should_release() const noexcept { return available() == 0 || available() < min_free; }
};

} // namespace vrma
