// The rdm suite's threads on vrma's native FI_EP_RDM endpoint (tcases
// rdm_threads and rdm_auto, added by rdm_suite() in test_rdm.cpp):
// FI_THREAD_SAFE, with several threads sending on one endpoint and several
// receiving on its peer, and FI_PROGRESS_AUTO, with a target that is not
// called at all. CK_RUN_SUITE=rdm CK_RUN_CASE=rdm_threads (or rdm_auto).
#include "rdm_harness.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

using namespace vt;

// ---------------------------------------------------------------------------
// rdm_threads

namespace {

constexpr int kSendThreads = 4, kPerThread = 200, kRecvThreads = 2;
constexpr int kThreadMsgs = kSendThreads * kPerThread;

struct ThreadMsg {
	std::vector<uint8_t> src, dst;
	size_t len = 0;
	uint64_t tag = 0;
	uint32_t seed = 0;
	fi_context sctx, rctx;
	std::atomic<int> sent{0}, received{0};
};

struct ThreadShared {
	std::vector<ThreadMsg> msgs = std::vector<ThreadMsg>(kThreadMsgs);
	RdmNode *s = nullptr, *r = nullptr;
	fi_addr_t to = FI_ADDR_NOTAVAIL, from = FI_ADDR_NOTAVAIL;
	std::atomic<int> sends_done{0}, recvs_done{0};
	std::mutex lock;
	std::string err;

	void fail(const std::string &what)
	{
		std::lock_guard<std::mutex> g(lock);
		if (err.empty())
			err = what;
	}
	bool failed()
	{
		std::lock_guard<std::mutex> g(lock);
		return !err.empty();
	}

	// Index of the message whose member `ctx` (sctx or rctx) this is.
	int index_of(void *ctx, bool send)
	{
		for (int i = 0; i < kThreadMsgs; i++)
			if (ctx == (send ? &msgs[i].sctx : &msgs[i].rctx))
				return i;
		return -1;
	}

	// One read of the sender's or the receiver's CQ, from any thread.
	void poll(bool sender)
	{
		fid_cq *cq = sender ? s->cq : r->cq;
		fi_cq_tagged_entry e[16];
		fi_addr_t src[16];
		ssize_t n = fi_cq_readfrom(cq, e, 16, src);
		if (n == -FI_EAGAIN)
			return;
		if (n == -FI_EAVAIL) {
			fi_cq_err_entry ee{};
			if (fi_cq_readerr(cq, &ee, 0) == 1)
				fail(std::string(sender ? "sender" : "receiver") + " error entry: " + fi_strerror(ee.err));
			return;
		}
		if (n < 0) {
			fail("fi_cq_readfrom: " + std::string(fi_strerror(static_cast<int>(-n))));
			return;
		}
		for (ssize_t k = 0; k < n; k++) {
			const int i = index_of(e[k].op_context, sender);
			if (i < 0) {
				fail("completion for an unknown context");
				continue;
			}
			ThreadMsg &m = msgs[i];
			if (sender) {
				if (m.sent++ || e[k].flags != kSendTag)
					fail("send " + std::to_string(i) + ": twice, or flags");
				sends_done++;
				continue;
			}
			if (m.received++ || e[k].flags != kRecvTag || e[k].len != m.len || e[k].tag != m.tag ||
			    src[k] != from)
				fail("receive " + std::to_string(i) + ": twice, or flags/len/tag/source");
			for (size_t j = 0; j < m.len; j++)
				if (m.dst[j] != pattern_byte(m.seed, j)) {
					fail("receive " + std::to_string(i) + ": data differs at " + std::to_string(j));
					break;
				}
			for (size_t j = m.len; j < m.dst.size(); j++)
				if (m.dst[j] != kSentinel) {
					fail("receive " + std::to_string(i) + ": written beyond the message");
					break;
				}
			recvs_done++;
		}
	}
};

void thread_sender(ThreadShared &sh, int t, Deadline &d)
{
	for (int k = 0; k < kPerThread && !sh.failed(); k++) {
		ThreadMsg &m = sh.msgs[t * kPerThread + k];
		ssize_t rc;
		while ((rc = fi_tsend(sh.s->ep, m.src.data(), m.len, nullptr, sh.to, m.tag, &m.sctx)) == -FI_EAGAIN) {
			sh.poll(true);
			if (d.expired()) {
				sh.fail("fi_tsend stayed -FI_EAGAIN");
				return;
			}
		}
		if (rc)
			sh.fail("fi_tsend: " + std::string(fi_strerror(static_cast<int>(-rc))));
	}
	while (sh.sends_done.load() < kThreadMsgs && !sh.failed() && !d.expired())
		sh.poll(true);
}

void thread_receiver(ThreadShared &sh, int j, Deadline &d)
{
	// Receiver j posts for senders 2j and 2j + 1, alternating.
	for (int k = 0; k < kPerThread && !sh.failed(); k++)
		for (int t = 2 * j; t < 2 * j + 2; t++) {
			ThreadMsg &m = sh.msgs[t * kPerThread + k];
			ssize_t rc;
			while ((rc = fi_trecv(sh.r->ep, m.dst.data(), m.dst.size() - kSlack, nullptr, FI_ADDR_UNSPEC, m.tag, 0,
					      &m.rctx)) == -FI_EAGAIN) {
				sh.poll(false);
				if (d.expired()) {
					sh.fail("fi_trecv stayed -FI_EAGAIN");
					return;
				}
			}
			if (rc)
				sh.fail("fi_trecv: " + std::string(fi_strerror(static_cast<int>(-rc))));
		}
	while (sh.recvs_done.load() < kThreadMsgs && !sh.failed() && !d.expired())
		sh.poll(false);
}

} // namespace

// FI_THREAD_SAFE: four threads send 200 tagged messages each from one
// endpoint, two threads of the peer post the receives and read its CQ.
START_TEST(rdm_threads_tagged)
{
	fi_info *h = rdm_hints();
	h->domain_attr->threading = FI_THREAD_SAFE;
	RdmEnv env(h);
	fi_freeinfo(h);
	ck_assert_int_eq(env.info->domain_attr->threading, FI_THREAD_SAFE);
	RdmNode s(env), r(env);
	connect_all({&s, &r});
	auto sh = std::make_unique<ThreadShared>();
	sh->s = &s;
	sh->r = &r;
	sh->to = s.addr_of(r);
	sh->from = r.addr_of(s);
	for (int t = 0; t < kSendThreads; t++)
		for (int k = 0; k < kPerThread; k++) {
			ThreadMsg &m = sh->msgs[t * kPerThread + k];
			m.len = 1 + size_t(t * 37 + k * 13) % 1024;
			m.tag = uint64_t(t + 1) << 32 | uint64_t(k);
			m.seed = uint32_t(t * 1000 + k);
			m.src = pattern(m.len, m.seed);
			m.dst.assign(m.len + kSlack, kSentinel);
		}
	Deadline d(3 * kTimeoutMs);
	std::vector<std::thread> threads;
	for (int t = 0; t < kSendThreads; t++)
		threads.emplace_back([&, t] { thread_sender(*sh, t, d); });
	for (int j = 0; j < kRecvThreads; j++)
		threads.emplace_back([&, j] { thread_receiver(*sh, j, d); });
	for (std::thread &th : threads)
		th.join();
	ck_assert_msg(sh->err.empty(), "%s", sh->err.c_str());
	ck_assert_int_eq(sh->sends_done.load(), kThreadMsgs);
	ck_assert_int_eq(sh->recvs_done.load(), kThreadMsgs);
	for (int i = 0; i < kThreadMsgs; i++) {
		ck_assert_int_eq(sh->msgs[i].sent.load(), 1);
		ck_assert_int_eq(sh->msgs[i].received.load(), 1);
	}
	expect_none(s);
	expect_none(r);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_auto

// FI_PROGRESS_AUTO: the target, on a domain of its own, posts 50 receives
// and then is not called at all; the initiator reads only its own CQ. Its
// sends (some by rendezvous, which needs the target to read) complete, the
// data lands in the target's buffers, and the target's CQ then holds the 50
// completions.
START_TEST(rdm_auto_progress)
{
	fi_info *h = rdm_hints();
	h->domain_attr->data_progress = FI_PROGRESS_AUTO;
	RdmEnv et(h), ei(h);
	fi_freeinfo(h);
	ck_assert_int_eq(et.info->domain_attr->data_progress, FI_PROGRESS_AUTO);
	RdmNode t(et), in(ei);
	connect_all({&t, &in});
	constexpr int N = 50;
	auto len_of = [](int k) { return k % 10 == 9 ? 128 * KiB : size_t(1500 + k); };
	std::vector<uint8_t> src[N];
	std::unique_ptr<RecvBuf> dst[N];
	fi_context rctx[N], sctx[N];
	for (int k = 0; k < N; k++) {
		src[k] = pattern(len_of(k), 1800 + k);
		dst[k] = std::make_unique<RecvBuf>(len_of(k));
		ck_assert_int_eq(post_retry([&] { return fi_recv(t.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, &rctx[k]); },
					    &t),
				 0);
	}
	// From here on, nothing calls the target until its CQ is read below.
	for (int k = 0; k < N; k++)
		ck_assert_int_eq(post_retry([&] { return fi_send(in.ep, src[k].data(), len_of(k), nullptr, in.addr_of(t), &sctx[k]); },
					    &in),
				 0);
	Tracker ti;
	ti.expect(sctx, N, kSendMsg, "initiator's sends");
	ti.wait_alone(in);
	// The data is in place without a call on the target (memory only).
	Deadline d(kTimeoutMs);
	auto landed = [&] {
		for (int k = 0; k < N; k++) {
			const volatile uint8_t *b = dst[k]->data();
			for (size_t j = 0; j < len_of(k); j++)
				if (b[j] != pattern_byte(1800 + k, j))
					return false;
		}
		return true;
	};
	while (!landed()) {
		ck_assert_msg(!d.expired(), "the target's buffers did not fill without calls on it");
		std::this_thread::sleep_for(std::chrono::milliseconds(5));
	}
	std::atomic_thread_fence(std::memory_order_acquire);
	Tracker tt;
	tt.expect(rctx, N, kRecvMsg, "target's receives");
	tt.wait_alone(t);
	for (int k = 0; k < N; k++) {
		const Completion &c = tt.get(&rctx[k]);
		ck_assert_uint_eq(c.e.len, len_of(k));
		ck_assert_uint_eq(c.src, t.addr_of(in));
		dst[k]->check(len_of(k), 1800 + k, "auto progress");
	}
	expect_none(t);
	expect_none(in);
}
END_TEST

void add_rdm_threads_tcases(Suite *s)
{
	rdm_add_tcase(s, "rdm_threads", 120, {rdm_threads_tagged});
	rdm_add_tcase(s, "rdm_auto", 60, {rdm_auto_progress});
}
