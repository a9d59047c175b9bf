// The rdm suite's threads on vrma's native FI_EP_RDM endpoint (tcases
// rdm_threads and rdm_auto, added by rdm_suite() in test_rdm.cpp):
// FI_THREAD_SAFE, with several threads sending on one endpoint and several
// receiving on its peer, and FI_PROGRESS_AUTO, with a target that is not
// called at all. CK_RUN_SUITE=rdm CK_RUN_CASE=rdm_threads (or rdm_auto).
#include "rdm_harness.h"

#include <atomic>
#include <cstring>
#include <dirent.h>
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

namespace {

// t's receives rctx[first, first + n), read from t's CQ alone: each
// completed once, with its length, from `from`, its buffer holding the
// pattern of seed + k (k its index).
template <typename LenOf>
void expect_received(RdmNode &t, const RdmNode &from, fi_context *rctx,
		     const std::unique_ptr<RecvBuf> *dst, int first, int n, LenOf len_of,
		     uint32_t seed, const char *what)
{
	Tracker tt;
	tt.expect(rctx + first, static_cast<size_t>(n), kRecvMsg, what);
	tt.wait_alone(t);
	for (int k = first; k < first + n; k++) {
		const Completion &c = tt.get(&rctx[k]);
		ck_assert_uint_eq(c.e.len, len_of(k));
		ck_assert_uint_eq(c.src, t.addr_of(from));
		dst[k]->check(len_of(k), seed + static_cast<uint32_t>(k), what);
	}
	expect_none(t);
}
// in sends src[k] (len_of(k) bytes) to target_of(k) for every k < n, then
// waits for its n send completions reading its own CQ alone (nothing calls
// the targets).
template <typename LenOf, typename TargetOf>
void send_alone(RdmNode &in, int n, const std::vector<uint8_t> *src, fi_context *sctx,
		LenOf len_of, TargetOf target_of)
{
	for (int k = 0; k < n; k++) {
		const fi_addr_t to = in.addr_of(target_of(k));
		ck_assert_int_eq(post_retry([&] { return fi_send(in.ep, src[k].data(), len_of(k), nullptr, to, &sctx[k]); },
					    &in),
				 0);
	}
	Tracker ti;
	ti.expect(sctx, static_cast<size_t>(n), kSendMsg, "initiator's sends");
	ti.wait_alone(in);
}

constexpr const char *kEngine = "vrma-progress"; // the engine thread's name
constexpr int kTargets = 4;

// The threads of this process named name (/proc/self/task/*/comm); an
// empty name counts them all.
size_t threads_named(const char *name = "")
{
	size_t n = 0;
	DIR *d = opendir("/proc/self/task");
	ck_assert_ptr_nonnull(d);
	while (dirent *e = readdir(d)) {
		if (e->d_name[0] == '.')
			continue;
		if (!*name) {
			n++;
			continue;
		}
		char path[300], comm[32] = {};
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		if (FILE *f = fopen(path, "r")) {
			if (fgets(comm, sizeof comm, f))
				comm[strcspn(comm, "\n")] = '\0';
			fclose(f);
		}
		n += strcmp(comm, name) == 0;
	}
	closedir(d);
	return n;
}

} // namespace

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
	send_alone(in, N, src, sctx, len_of, [&](int) -> RdmNode & { return t; });
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
	expect_received(t, in, rctx, dst, 0, N, len_of, 1800, "auto progress");
	expect_none(in);
}
END_TEST

// One progress engine per domain: an RDM endpoint starts no thread of its
// own. Two FI_PROGRESS_AUTO domains: the first endpoint of each starts its
// domain's engine ("vrma-progress"), three more endpoints on the target
// domain add no thread, and the one engine serves all four targets (not
// called while the initiator sends each an eager message and a rendezvous
// one, which the target must read). Domain close stops both engines.
START_TEST(rdm_auto_one_engine_per_domain)
{
	const size_t engines = threads_named(kEngine);
	fi_info *h = rdm_hints();
	h->domain_attr->data_progress = FI_PROGRESS_AUTO;
	{
		RdmEnv et(h), ei(h);
		ck_assert_uint_eq(threads_named(kEngine), engines); // nothing attached yet
		RdmNode in(ei);
		std::vector<std::unique_ptr<RdmNode>> ts;
		ts.push_back(std::make_unique<RdmNode>(et));
		ck_assert_uint_eq(threads_named(kEngine), engines + 2);
		const size_t all = threads_named();
		for (int k = 1; k < kTargets; k++)
			ts.push_back(std::make_unique<RdmNode>(et));
		ck_assert_msg(threads_named() == all, "%d more endpoints: %zu threads, %zu before",
			      kTargets - 1, threads_named(), all);
		connect_all({&in, ts[0].get(), ts[1].get(), ts[2].get(), ts[3].get()});
		static_assert(kTargets == 4);

		auto len_of = [](int k) { return k % 2 ? 96 * KiB : size_t(700 + k); };
		constexpr int N = 2 * kTargets;
		std::vector<uint8_t> src[N];
		std::unique_ptr<RecvBuf> dst[N];
		fi_context rctx[N], sctx[N];
		for (int k = 0; k < N; k++) {
			RdmNode &t = *ts[k / 2];
			src[k] = pattern(len_of(k), 2100 + k);
			dst[k] = std::make_unique<RecvBuf>(len_of(k));
			ck_assert_int_eq(post_retry([&] { return fi_recv(t.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, &rctx[k]); },
						    &t),
					 0);
		}
		// From here on, nothing calls a target until its CQ is read.
		send_alone(in, N, src, sctx, len_of, [&](int k) -> RdmNode & { return *ts[k / 2]; });
		for (int j = 0; j < kTargets; j++)
			expect_received(*ts[j], in, rctx, dst, 2 * j, 2, len_of, 2100, "one engine");
		expect_none(in);
		ck_assert_uint_eq(threads_named(kEngine), engines + 2);
	}
	fi_freeinfo(h);
	// Domain close joined both engines (a joined thread may linger in
	// /proc for a moment).
	Deadline d(2000);
	while (threads_named(kEngine) != engines && !d.expired())
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	ck_assert_uint_eq(threads_named(kEngine), engines);
}
END_TEST

void add_rdm_threads_tcases(Suite *s)
{
	rdm_add_tcase(s, "rdm_threads", 120, {rdm_threads_tagged});
	rdm_add_tcase(s, "rdm_auto", 60, {rdm_auto_progress, rdm_auto_one_engine_per_domain});
}
