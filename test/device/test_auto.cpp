// FI_PROGRESS_AUTO for MSG endpoints: the domain's progress thread polls the
// CQs its endpoints complete into, so a receiver that posted receives but
// reads nothing still takes messages (staged receives are copied out and
// their staging buffers reposted), fi_cq_sread and fi_cntr_wait see what the
// thread moved, and getinfo reports MANUAL unless AUTO is asked for.
#include "harness.h"

#include <cstdlib>

using namespace vt;

namespace {

// Staging buffers a staged endpoint keeps posted (FI_VRMA_STAGE_BUFFERS'
// default, wire::kMaxStagePieces): one per small message not yet copied.
constexpr size_t kStageBuffers = 65;
constexpr size_t kSlot = 4096; // bytes of each message's receive

size_t msg_len(size_t i)
{
	return 1 + (i * 97) % (kSlot - 1);
}

uint8_t msg_byte(size_t i, size_t j)
{
	return static_cast<uint8_t>(i * 31 + j * 7 + 3);
}

// Messages and RMA without FI_RX_CQ_DATA (staged receives), with the given
// data progress asked for (FI_PROGRESS_UNSPEC: none).
fi_info *progress_hints(fi_progress progress)
{
	fi_info *h = base_hints();
	h->mode = FI_CONTEXT;
	h->domain_attr->data_progress = progress;
	return h;
}

struct HintsHolder {
	fi_info *h;
	explicit HintsHolder(fi_progress p) : h(progress_hints(p)) {}
	~HintsHolder() { fi_freeinfo(h); }
	HintsHolder(const HintsHolder &) = delete;
	HintsHolder &operator=(const HintsHolder &) = delete;
};

struct ProgressEnv : Env {
	explicit ProgressEnv(fi_progress p) : Env(HintsHolder(p).h)
	{
		ck_assert_int_eq(info->domain_attr->data_progress,
				 p == FI_PROGRESS_UNSPEC ? FI_PROGRESS_MANUAL : p);
		ck_assert_uint_eq(info->mode & FI_RX_CQ_DATA, 0); // staged receives
	}
};

// n messages of distinct lengths and contents, each with a receive of kSlot
// bytes at its own offset.
struct Traffic {
	Region src, dst;
	std::vector<int> rctx, sctx;
	Traffic(Env &env, size_t n)
		: src(env, n * kSlot, FI_SEND), dst(env, n * kSlot, FI_RECV), rctx(n), sctx(n)
	{
		for (size_t i = 0; i < n; i++)
			for (size_t j = 0; j < kSlot; j++)
				src.buf[i * kSlot + j] = msg_byte(i, j);
		std::fill(dst.buf.begin(), dst.buf.end(), 0xEE);
	}
	void post_receive(fid_ep *ep, size_t i)
	{
		ck_assert_int_eq(fi_recv(ep, dst.buf.data() + i * kSlot, kSlot, dst.desc(), 0, &rctx[i]), 0);
	}
	void send(fid_ep *ep, size_t i)
	{
		ck_assert_int_eq(fi_send(ep, src.buf.data() + i * kSlot, msg_len(i), src.desc(), 0, &sctx[i]), 0);
	}
	// Posts receives 0..posted-1 on rx, then sends messages 0..sent-1
	// from tx.
	void post_then_send(fid_ep *rx, fid_ep *tx, size_t posted, size_t sent)
	{
		for (size_t i = 0; i < posted; i++)
			post_receive(rx, i);
		for (size_t i = 0; i < sent; i++)
			send(tx, i);
	}
	// The send completions of messages first..end-1, in order.
	void expect_sent(fid_cq *cq, size_t first, size_t end)
	{
		for (size_t i = first; i < end; i++)
			expect_completion(cq, &sctx[i], FI_SEND | FI_MSG);
	}
	// The receive completion of message i (from a CQ) and its bytes.
	void check_received(const fi_cq_data_entry &e, size_t i) const
	{
		ck_assert_msg(e.op_context == &rctx[i], "receive %zu: context of another receive", i);
		ck_assert_msg(e.flags == (FI_RECV | FI_MSG), "receive %zu: flags 0x%llx", i,
			      static_cast<unsigned long long>(e.flags));
		ck_assert_msg(e.len == msg_len(i), "receive %zu: len %zu, sent %zu", i, e.len, msg_len(i));
		ck_assert_ptr_eq(e.buf, dst.buf.data() + i * kSlot);
		check_data(i);
	}
	// The first byte of message i's receive that differs from what was
	// sent, or msg_len(i) (read while the provider's thread may be copying).
	size_t first_wrong(size_t i) const
	{
		const uint8_t *got = dst.buf.data() + i * kSlot;
		size_t j = 0;
		while (j < msg_len(i) && got[j] == msg_byte(i, j))
			j++;
		return j;
	}
	bool placed(size_t i) const { return first_wrong(i) == msg_len(i); }
	// One assertion per message, never one per byte: every passing
	// ck_assert costs check a write() to its message file (_mark_point),
	// about 9 us under TCG: 4096 per message cost the 1000-message test
	// about 40 s, its whole read deadline.
	void check_data(size_t i) const
	{
		const uint8_t *got = dst.buf.data() + i * kSlot;
		size_t j = first_wrong(i);
		ck_assert_msg(j == msg_len(i), "message %zu byte %zu: 0x%02x, sent 0x%02x", i, j, got[j],
			      msg_byte(i, j));
		while (j < kSlot && got[j] == 0xEE)
			j++;
		ck_assert_msg(j == kSlot, "message %zu: byte %zu beyond its length written", i, j);
	}
};

// Reads receive completions 0..n-1 of `t`, in order, by fi_cq_read (the CQ
// may have no wait object), within kTimeoutMs each.
void read_receives(fid_cq *cq, const Traffic &t, size_t first, size_t n)
{
	for (size_t i = first; i < first + n; i++) {
		fi_cq_data_entry e{};
		const Deadline deadline(kTimeoutMs);
		ssize_t rc;
		while ((rc = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN && !deadline.expired())
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		ck_assert_msg(rc == 1, "receive %zu: fi_cq_read %zd (%s)", i, rc,
			      fi_strerror(rc < 0 ? static_cast<int>(-rc) : 0));
		t.check_received(e, i);
	}
}

} // namespace

// The receiver posts N receives, more than it has staging buffers, and then
// never touches its CQ (FI_WAIT_NONE: no wait object of its own). The
// sender's N sends all complete: the domain's thread copied each message
// out and reposted its staging buffer. Then the receiver reads its N
// completions, in order, data checked.
START_TEST(auto_receiver_that_reads_nothing_keeps_its_sender_going)
{
	ProgressEnv env(FI_PROGRESS_AUTO);
	PairOptions opt;
	opt.server_cq_wait = FI_WAIT_NONE;
	Pair p(env, opt);
	constexpr size_t N = 3 * kStageBuffers + 5;
	Traffic t(env, N);
	t.post_then_send(p.server.ep, p.client.ep, N, N);
	t.expect_sent(p.client.cq, 0, N);
	// Every message is placed without the receiver calling anything: the
	// last send completed when its message reached a staging buffer, and
	// the thread copies pieces in arrival order.
	const Deadline placed(kTimeoutMs);
	while (!t.placed(N - 1) && !placed.expired())
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	for (size_t i = 0; i < N; i++)
		t.check_data(i);
	read_receives(p.server.cq, t, 0, N);
	fi_cq_data_entry e;
	ck_assert_int_eq(fi_cq_read(p.server.cq, &e, 1), -FI_EAGAIN);
}
END_TEST

// Issue 13 §3: a target that never polls while 1000 remote-CQ-data writes
// and 1000 messages arrive (its CQ holds them all: 2100 entries). Every
// initiator operation completes without the target calling anything; then
// the target reads 2000 entries: each write's data and CQ data, each
// message in order into its receive.
START_TEST(auto_target_that_never_polls_takes_1000_writes_and_messages)
{
	ProgressEnv env(FI_PROGRESS_AUTO);
	PairOptions opt;
	opt.server_cq_wait = FI_WAIT_NONE;
	opt.server_cq_size = 2100;
	opt.rx_size = 1024;
	Pair p(env, opt);
	constexpr size_t N = 1000;
	Traffic t(env, N);
	Region target(env, N * 64, FI_REMOTE_WRITE);
	Region wsrc(env, N * 64, FI_WRITE);
	for (size_t i = 0; i < wsrc.buf.size(); i++)
		wsrc.buf[i] = static_cast<uint8_t>(i * 13 + 1);
	for (size_t i = 0; i < N; i++)
		t.post_receive(p.server.ep, i);
	// Interleaved, the client reaping its own completions as it goes.
	std::vector<int> wctx(N);
	size_t reaped = 0;
	auto post = [&](auto &&call) {
		ssize_t rc;
		const Deadline deadline(kTimeoutMs);
		while ((rc = call()) == -FI_EAGAIN && !deadline.expired()) {
			fi_cq_data_entry e[16];
			ssize_t n = fi_cq_read(p.client.cq, e, 16);
			if (n > 0)
				reaped += static_cast<size_t>(n);
		}
		ck_assert_int_eq(rc, 0);
	};
	for (size_t i = 0; i < N; i++) {
		post([&] {
			return fi_writedata(p.client.ep, wsrc.buf.data() + i * 64, 64, wsrc.desc(),
					    0xD000 + i, 0, target.addr() + i * 64, target.key(), &wctx[i]);
		});
		post([&] {
			return fi_send(p.client.ep, t.src.buf.data() + i * kSlot, msg_len(i), t.src.desc(), 0,
				       &t.sctx[i]);
		});
	}
	const Deadline all(4 * kTimeoutMs);
	while (reaped < 2 * N && !all.expired()) {
		fi_cq_data_entry e[16];
		ssize_t n = fi_cq_read(p.client.cq, e, 16);
		if (n > 0)
			reaped += static_cast<size_t>(n);
	}
	ck_assert_uint_eq(reaped, 2 * N);
	ck_assert(memcmp(target.buf.data(), wsrc.buf.data(), N * 64) == 0);
	// Now the target reads: 1000 CQ data entries and 1000 receives.
	size_t writes = 0, msgs = 0;
	std::vector<bool> data_seen(N);
	const Deadline read_all(4 * kTimeoutMs);
	while ((writes < N || msgs < N) && !read_all.expired()) {
		fi_cq_data_entry e{};
		if (fi_cq_read(p.server.cq, &e, 1) != 1)
			continue;
		if (e.flags & FI_REMOTE_CQ_DATA) {
			ck_assert_uint_eq(e.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
			ck_assert(e.data >= 0xD000 && e.data < 0xD000 + N);
			ck_assert(!data_seen[e.data - 0xD000]);
			data_seen[e.data - 0xD000] = true;
			writes++;
		} else {
			t.check_received(e, msgs);
			msgs++;
		}
	}
	ck_assert_uint_eq(writes, N);
	ck_assert_uint_eq(msgs, N);
	fi_cq_data_entry e;
	ck_assert_int_eq(fi_cq_read(p.server.cq, &e, 1), -FI_EAGAIN);
}
END_TEST

// The same without FI_PROGRESS_AUTO: the sender stops after as many
// messages as the receiver has staging buffers, until the receiver reads
// its CQ. (What the test above would see without the thread.)
START_TEST(manual_receiver_that_reads_nothing_stops_its_sender)
{
	ProgressEnv env(FI_PROGRESS_UNSPEC); // reported MANUAL
	Pair p(env);
	constexpr size_t N = kStageBuffers + 10;
	Traffic t(env, N);
	t.post_then_send(p.server.ep, p.client.ep, N, N);
	t.expect_sent(p.client.cq, 0, kStageBuffers);
	expect_no_completion(p.client.cq, 1000);
	read_receives(p.server.cq, t, 0, N);
	t.expect_sent(p.client.cq, kStageBuffers, N);
}
END_TEST

// A reader blocked in fi_cq_sread on an AUTO domain's CQ gets the message
// that arrives while it sleeps, whichever of it and the progress thread
// takes the completion channel's event (the thread then wakes it through
// the CQ's eventfd). Rounds make both orders likely.
START_TEST(auto_sread_returns_what_arrives_while_it_sleeps)
{
	ProgressEnv env(FI_PROGRESS_AUTO);
	Pair p(env);
	constexpr size_t N = 20;
	Traffic t(env, N);
	for (size_t i = 0; i < N; i++) {
		t.post_receive(p.server.ep, i);
		std::thread sender([&] {
			std::this_thread::sleep_for(std::chrono::milliseconds(50));
			t.send(p.client.ep, i);
		});
		fi_cq_data_entry e{};
		const auto t0 = std::chrono::steady_clock::now();
		const ssize_t rc = fi_cq_sread(p.server.cq, &e, 1, nullptr, 5000);
		const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
			std::chrono::steady_clock::now() - t0).count();
		sender.join();
		ck_assert_msg(rc == 1, "round %zu: fi_cq_sread %zd after %lld ms", i, rc,
			      static_cast<long long>(waited));
		ck_assert_msg(waited < 2500, "round %zu: fi_cq_sread woke after %lld ms", i,
			      static_cast<long long>(waited));
		t.check_received(e, i);
		expect_completion(p.client.cq, &t.sctx[i], FI_SEND | FI_MSG);
	}
	// A message that arrived before fi_cq_sread was called: returned.
	std::fill(t.dst.buf.begin(), t.dst.buf.begin() + kSlot, 0xEE);
	t.post_receive(p.server.ep, 0);
	t.send(p.client.ep, 0);
	expect_completion(p.client.cq, &t.sctx[0], FI_SEND | FI_MSG);
	fi_cq_data_entry e{};
	ck_assert_int_eq(fi_cq_sread(p.server.cq, &e, 1, nullptr, 5000), 1);
	t.check_received(e, 0);
	expect_no_completion(p.server.cq, 100);
}
END_TEST

// A receive counter of an AUTO endpoint with no CQ (vrma's own CQ, polled by
// the thread): more messages than staging buffers go through while nobody
// calls the receiver; a thread blocked in fi_cntr_wait wakes on the count.
START_TEST(auto_receive_counter)
{
	ProgressEnv env(FI_PROGRESS_AUTO);
	fid_cntr *rc = open_cntr(env);
	PairOptions opt;
	opt.client_cq = false;
	opt.client_cntrs = {{rc, FI_RECV}};
	{
		Pair p(env, opt);
		constexpr size_t N1 = kStageBuffers + 15, N2 = 10, N = N1 + N2;
		Traffic t(env, N);
		t.post_then_send(p.client.ep, p.server.ep, N, N1);
		t.expect_sent(p.server.cq, 0, N1);
		int waited_rc = 1;
		std::thread waiter([&] { waited_rc = fi_cntr_wait(rc, N, kTimeoutMs); });
		std::this_thread::sleep_for(std::chrono::milliseconds(200));
		for (size_t i = N1; i < N; i++)
			t.send(p.server.ep, i);
		t.expect_sent(p.server.cq, N1, N);
		waiter.join();
		ck_assert_int_eq(waited_rc, 0);
		ck_assert_uint_eq(fi_cntr_read(rc), N);
		ck_assert_uint_eq(fi_cntr_readerr(rc), 0);
		for (size_t i = 0; i < N; i++)
			t.check_data(i);
	}
	ck_assert_int_eq(fi_close(&rc->fid), 0);
}
END_TEST

// getinfo: MSG infos report FI_PROGRESS_MANUAL data progress unless the
// hints ask for a kind; control progress is automatic either way.
START_TEST(getinfo_msg_data_progress)
{
	const struct {
		fi_progress asked, reported;
	} cases[] = {{FI_PROGRESS_UNSPEC, FI_PROGRESS_MANUAL},
		     {FI_PROGRESS_MANUAL, FI_PROGRESS_MANUAL},
		     {FI_PROGRESS_AUTO, FI_PROGRESS_AUTO}};
	for (const auto &c : cases) {
		fi_info *h = base_hints();
		h->domain_attr->data_progress = c.asked;
		fi_info *info = get_info(h);
		fi_freeinfo(h);
		size_t n = 0;
		for (fi_info *i = info; i; i = i->next, n++) {
			ck_assert_int_eq(i->ep_attr->type, FI_EP_MSG);
			ck_assert_msg(i->domain_attr->data_progress == c.reported,
				      "asked %d: data_progress %d", c.asked, i->domain_attr->data_progress);
			ck_assert_int_eq(i->domain_attr->control_progress, FI_PROGRESS_AUTO);
		}
		ck_assert_uint_gt(n, 0);
		fi_freeinfo(info);
	}
}
END_TEST

Suite *msg_auto_suite()
{
	Suite *s = suite_create("msg_auto");
	TCase *tc = tcase_create("msg_auto");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, auto_receiver_that_reads_nothing_keeps_its_sender_going);
	tcase_add_test(tc, manual_receiver_that_reads_nothing_stops_its_sender);
	tcase_add_test(tc, auto_target_that_never_polls_takes_1000_writes_and_messages);
	tcase_add_test(tc, auto_sread_returns_what_arrives_while_it_sleeps);
	tcase_add_test(tc, auto_receive_counter);
	tcase_add_test(tc, getinfo_msg_data_progress);
	suite_add_tcase(s, tc);
	return s;
}
