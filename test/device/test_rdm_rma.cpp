// RMA on vrma's native reliable-datagram endpoint (FI_EP_RDM, prov_name
// "vrma"): fi_getinfo with and without the memory-registration modes RMA
// needs, the nine fi_rma calls of every size (one domain and two, desc NULL
// and from a registered region, stack and heap buffers, unaligned), gather
// and scatter on both sides, injection, remote CQ data (full 64 bits, its
// source, no receive consumed), the completion flags (delivery, inject,
// transmit complete, FI_MORE, FI_FENCE, FI_COMMIT_COMPLETE refused,
// selective completion), FI_COMMIT_COMPLETE on FI_RMA_PMEM endpoints (into
// file mappings and memory, the completion waiting for the target, direct
// write targets, its errors), loopback through the endpoint's own address,
// FI_RMA_EVENT counters of a target that only waits on them, remote access
// errors and the connection after them, and the calls refused at once.
//
// Every target region lies between sentinel guards and the test keeps an
// image of what it must hold: each check compares the whole region and
// its guards, so a byte written where it should not be is caught as well
// as a byte missing. One tcase per group (CK_RUN_SUITE=rdm_rma
// CK_RUN_CASE=<group>): rdm_rma_basic, rdm_rma_data, rdm_rma_flags,
// rdm_rma_events, rdm_rma_errors, rdm_rma_keys, rdm_rma_commit.
#include "rdm_harness.h"
#include "abi_compat.h"

#include <rdma/fi_ext_vrma.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <functional>
#include <string>
#include <thread>
#include <memory>
#include <optional>
#include <vector>

namespace abi = vrma::abi;

using namespace vt;

namespace {

constexpr size_t kPage = 4096;
// Sentinel bytes on each side of a Mem.
constexpr size_t kGuard = 256;

constexpr uint64_t kRmaCaps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint64_t kRemoteAccess = FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint64_t kLocalAccess = FI_READ | FI_WRITE;
// Completion flags: the initiator's write and read, the target's entry for
// remote CQ data.
constexpr uint64_t kWriteDone = FI_RMA | FI_WRITE;
constexpr uint64_t kReadDone = FI_RMA | FI_READ;
constexpr uint64_t kRemoteData = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;

// The RDM hints (FI_CONTEXT, mr_mode VIRT_ADDR | ALLOCATED | PROV_KEY) with
// messages, tagged messages and RMA in every direction with FI_FENCE.
fi_info *rma_hints(uint64_t extra_caps = 0)
{
	return rdm_hints(kRdmCaps | kRmaCaps | FI_FENCE | extra_caps);
}

// An RdmEnv opened from rma_hints(extra_caps).
struct RmaEnv : private OwnedHints, RdmEnv {
	explicit RmaEnv(uint64_t extra_caps = 0) : OwnedHints(rma_hints(extra_caps)), RdmEnv(h)
	{
		ck_assert_msg((info->caps & kRmaCaps) == kRmaCaps, "the native RDM entry's caps 0x%" PRIx64 " lack 0x%" PRIx64,
			      info->caps, kRmaCaps & ~info->caps);
	}
};

const char *err_name(ssize_t rc)
{
	return fi_strerror(static_cast<int>(rc < 0 ? -rc : rc));
}

// A call that must be refused at once with `want`.
void expect_rc(ssize_t rc, ssize_t want, const char *what)
{
	ck_assert_msg(rc == want, "%s: %zd (%s), expected %zd (%s)", what, rc, err_name(rc), want, err_name(want));
}

// len bytes on a page boundary between kGuard sentinel bytes each side,
// with the image of what they must hold: put() writes memory and image
// (the CPU's doing), expect() only the image (what the device is to
// write). reg() registers the len bytes, not the guards.
class Mem {
public:
	uint8_t *p = nullptr;
	fid_mr *mr = nullptr;

	explicit Mem(size_t len) : len_(len), want_(len, kSentinel)
	{
		total_ = kPage + (len + kGuard + kPage - 1) / kPage * kPage;
		base_ = static_cast<uint8_t *>(aligned_alloc(kPage, total_));
		ck_assert_ptr_nonnull(base_);
		p = base_ + kPage;
		memset(base_, kSentinel, total_);
	}
	~Mem()
	{
		close_mr();
		free(base_);
	}
	Mem(const Mem &) = delete;
	Mem &operator=(const Mem &) = delete;

	size_t len() const { return len_; }
	void reg(RdmEnv &env, uint64_t access, uint64_t flags = 0)
	{
		const int rc = fi_mr_reg(env.domain, p, len_, access, 0, 0, flags, &mr, nullptr);
		ck_assert_msg(rc == 0, "fi_mr_reg(%zu bytes, access 0x%" PRIx64 ", flags 0x%" PRIx64 "): %d (%s)", len_,
			      access, flags, rc, err_name(rc));
	}
	// Scalable keys: the application's key.
	void reg_key(RdmEnv &env, uint64_t access, uint64_t key)
	{
		const int rc = fi_mr_reg(env.domain, p, len_, access, 0, key, 0, &mr, nullptr);
		ck_assert_msg(rc == 0, "fi_mr_reg(%zu bytes, key 0x%" PRIx64 "): %d (%s)", len_, key, rc, err_name(rc));
		ck_assert_uint_eq(fi_mr_key(mr), key);
	}
	void close_mr()
	{
		if (mr)
			ck_assert_int_eq(fi_close(&mr->fid), 0);
		mr = nullptr;
	}
	uint64_t key() const { return fi_mr_key(mr); }
	void *desc() const { return fi_mr_desc(mr); }
	// The remote address of byte off (FI_MR_VIRT_ADDR).
	uint64_t addr(size_t off = 0) const { return reinterpret_cast<uintptr_t>(p) + off; }

	// Everything back to the sentinel, memory and image.
	void reset()
	{
		memset(base_, kSentinel, total_);
		std::fill(want_.begin(), want_.end(), kSentinel);
	}
	void put(size_t off, size_t n, uint32_t seed, size_t from = 0)
	{
		ck_assert_uint_le(off + n, len_);
		fill_pattern(p + off, n, seed, from);
		fill_pattern(want_.data() + off, n, seed, from);
	}
	void expect(size_t off, size_t n, uint32_t seed, size_t from = 0)
	{
		ck_assert_uint_le(off + n, len_);
		fill_pattern(want_.data() + off, n, seed, from);
	}
	bool matches() const
	{
		std::atomic_thread_fence(std::memory_order_acquire);
		if (memcmp(p, want_.data(), len_))
			return false;
		for (size_t i = 0; i < kGuard; i++)
			if (p[-1 - static_cast<ptrdiff_t>(i)] != kSentinel || p[len_ + i] != kSentinel)
				return false;
		return true;
	}
	// Memory and guards as the image says, now; names the first difference.
	void check(const char *what) const
	{
		std::atomic_thread_fence(std::memory_order_acquire);
		expect_filled(p - kGuard, kGuard, kSentinel, (std::string(what) + ": the guard before the region").c_str());
		expect_filled(p + len_, kGuard, kSentinel, (std::string(what) + ": the guard after the region").c_str());
		for (size_t i = 0; i < len_; i++)
			if (p[i] != want_[i])
				ck_abort_msg("%s: byte %zu of the %zu-byte region is 0x%02x, expected 0x%02x%s", what, i, len_,
					     p[i], want_[i], want_[i] == kSentinel ? " (untouched)" : "");
	}
	// Progresses every node until the memory matches the image (what a
	// completion without delivery semantics leaves on the way), then checks.
	void await(const char *what) const
	{
		progress_until([&] { return matches(); });
		check(what);
	}

private:
	size_t len_, total_ = 0;
	uint8_t *base_ = nullptr;
	std::vector<uint8_t> want_;
};

// A counter of the domain (FI_CNTR_EVENTS_COMP, waitable).
struct Cntr {
	fid_cntr *c = nullptr;
	explicit Cntr(RdmEnv &env)
	{
		fi_cntr_attr attr{};
		attr.events = FI_CNTR_EVENTS_COMP;
		attr.wait_obj = FI_WAIT_UNSPEC;
		ck_assert_int_eq(fi_cntr_open(env.domain, &attr, &c, nullptr), 0);
	}
	~Cntr()
	{
		if (c)
			ck_assert_int_eq(fi_close(&c->fid), 0);
	}
	Cntr(const Cntr &) = delete;
	Cntr &operator=(const Cntr &) = delete;
};

// Completions expected by context: each once, successful, with exactly
// its flags; any other entry fails the test.
class Expected {
public:
	void add(const void *ctx, uint64_t flags, std::string what) { want_.push_back({ctx, flags, std::move(what)}); }

	void take(const Completion &c)
	{
		for (Want &w : want_) {
			if (w.ctx != c.context())
				continue;
			ck_assert_msg(!w.got, "%s: completed twice: %s", w.what.c_str(), c.describe().c_str());
			ck_assert_msg(c.ok, "%s: %s", w.what.c_str(), c.describe().c_str());
			ck_assert_msg(c.e.flags == w.flags, "%s: flags 0x%" PRIx64 " expected, got %s", w.what.c_str(), w.flags,
				      c.describe().c_str());
			w.got = true;
			got_++;
			return;
		}
		ck_abort_msg("a completion nobody expected: %s", c.describe().c_str());
	}

	bool done() const { return got_ == want_.size(); }

	void wait(RdmNode &n)
	{
		while (!done())
			take(next(n));
	}

	// Reads only these nodes' CQs (the others may belong to another
	// thread); fails the test after timeout_ms.
	void wait_alone(std::initializer_list<RdmNode *> nodes, int timeout_ms = kTimeoutMs)
	{
		Deadline d(timeout_ms);
		while (!done()) {
			for (RdmNode *n : nodes) {
				n->poll();
				while (!n->backlog.empty()) {
					Completion c = n->backlog.front();
					n->backlog.pop_front();
					take(c);
				}
			}
			if (!done() && d.expired())
				ck_abort_msg("%zu of %zu completions within %d ms; first missing: %s", got_, want_.size(),
					     timeout_ms, missing().c_str());
		}
	}

	std::string missing() const
	{
		for (const Want &w : want_)
			if (!w.got)
				return w.what;
		return "(none)";
	}

private:
	struct Want {
		const void *ctx;
		uint64_t flags;
		std::string what;
		bool got = false;
	};
	std::vector<Want> want_;
	size_t got_ = 0;
};

// fi_write of len bytes from src into remote at off; the target memory
// must then hold them (and nothing else changed). Then the CPU puts another
// pattern there, and fi_read brings it back into back (len + kSlack bytes
// of room), with nothing written beyond len.
void write_then_read(RdmNode &a, fi_addr_t to, Mem &remote, size_t off, size_t len, uint8_t *src, void *src_desc,
		     uint8_t *back, void *back_desc, uint32_t seed, const char *what)
{
	char w[160];
	fill_pattern(src, len, seed);
	fi_context wctx, rctx;
	snprintf(w, sizeof w, "fi_write: %s", what);
	post([&] { return fi_write(a.ep, src, len, src_desc, to, remote.addr(off), remote.key(), &wctx); }, w);
	expect_ok(a, &wctx, kWriteDone, w);
	remote.expect(off, len, seed);
	remote.await(w);

	remote.put(off, len, seed + 1);
	memset(back, kSentinel, len + kSlack);
	snprintf(w, sizeof w, "fi_read: %s", what);
	post([&] { return fi_read(a.ep, back, len, back_desc, to, remote.addr(off), remote.key(), &rctx); }, w);
	expect_ok(a, &rctx, kReadDone, w);
	expect_pattern(back, len, seed + 1, w);
	expect_filled(back + len, kSlack, kSentinel, w);
	remote.check(w); // a read leaves the target as it was
}

// fi_writemsg of one local buffer to one remote range, with these flags.
ssize_t writemsg1(RdmNode &a, fi_addr_t to, const void *buf, size_t len, void *desc, const Mem &remote, size_t off,
		  uint64_t flags, void *ctx, uint64_t data = 0)
{
	iovec iov{const_cast<void *>(buf), len};
	fi_rma_iov rma{remote.addr(off), len, remote.key()};
	fi_msg_rma m{};
	m.msg_iov = &iov;
	m.desc = &desc;
	m.iov_count = 1;
	m.addr = to;
	m.rma_iov = &rma;
	m.rma_iov_count = 1;
	m.context = ctx;
	m.data = data;
	return fi_writemsg(a.ep, &m, flags);
}

ssize_t readmsg1(RdmNode &a, fi_addr_t to, void *buf, size_t len, void *desc, const Mem &remote, size_t off,
		 uint64_t flags, void *ctx)
{
	iovec iov{buf, len};
	fi_rma_iov rma{remote.addr(off), len, remote.key()};
	fi_msg_rma m{};
	m.msg_iov = &iov;
	m.desc = &desc;
	m.iov_count = 1;
	m.addr = to;
	m.rma_iov = &rma;
	m.rma_iov_count = 1;
	m.context = ctx;
	return fi_readmsg(a.ep, &m, flags);
}

// The target's entry for remote CQ data: no context, exactly kRemoteData,
// the full 64-bit value, the bytes written, the initiator's address in the
// target's AV (FI_ADDR_NOTAVAIL if it is not there); the data is in place
// when the entry is read.
Completion expect_remote_data(RdmNode &t, uint64_t data, size_t len, fi_addr_t src, const Mem &region,
			      const char *what)
{
	Completion c = expect_ok(t, nullptr, kRemoteData, what);
	ck_assert_msg(c.e.data == data, "%s: data 0x%" PRIx64 ", expected 0x%" PRIx64, what, c.e.data, data);
	ck_assert_msg(c.e.len == len, "%s: len %zu, expected %zu", what, c.e.len, len);
	ck_assert_msg(c.src == src, "%s: source %" PRIu64 ", expected %" PRIu64, what, c.src, src);
	region.check(what);
	return c;
}

} // namespace

// ---------------------------------------------------------------------------
// rdm_rma_basic

// RMA is offered with the registration modes it needs (the keys are the
// provider's, the addresses virtual), and only then: without them the
// native entry still serves messages, but not RMA.
START_TEST(rdm_rma_getinfo)
{
	fi_info *h = rdm_hints(FI_RMA | FI_RMA_EVENT);
	fi_info *list = get_info(h, kRdmNodeAddr, nullptr, FI_SOURCE);
	const fi_info *i = find_native_rdm(list);
	ck_assert_msg(i, "caps FI_RMA | FI_RMA_EVENT: no native vrma RDM entry among: %s", info_names(list).c_str());
	ck_assert_msg((i->caps & (FI_RMA | FI_RMA_EVENT)) == (FI_RMA | FI_RMA_EVENT), "caps 0x%" PRIx64, i->caps);
	ck_assert_msg(i->tx_attr->rma_iov_limit > 1, "rma_iov_limit %zu", i->tx_attr->rma_iov_limit);
	ck_assert_msg(i->tx_attr->caps & FI_RMA, "tx caps 0x%" PRIx64, i->tx_attr->caps);
	fi_freeinfo(list);
	fi_freeinfo(h);

	// Everything the other tests use, asked for explicitly.
	h = rma_hints(FI_RMA_EVENT);
	list = get_info(h, kRdmNodeAddr, nullptr, FI_SOURCE);
	i = find_native_rdm(list);
	ck_assert_msg(i, "full RMA caps: no native vrma RDM entry among: %s", info_names(list).c_str());
	const uint64_t want = kRdmCaps | kRmaCaps | FI_FENCE | FI_RMA_EVENT;
	ck_assert_msg((i->caps & want) == want, "caps 0x%" PRIx64 " lack 0x%" PRIx64, i->caps, want & ~i->caps);
	ck_assert_msg((i->tx_attr->caps & (FI_READ | FI_WRITE)) == (FI_READ | FI_WRITE), "tx caps 0x%" PRIx64,
		      i->tx_attr->caps);
	ck_assert_uint_ge(i->tx_attr->rma_iov_limit, 5);
	ck_assert_uint_ge(i->tx_attr->iov_limit, 4);
	ck_assert_uint_gt(i->tx_attr->inject_size, 0);
	ck_assert_uint_ge(i->ep_attr->max_msg_size, MiB);
	ck_assert_uint_eq(i->domain_attr->cq_data_size, 8);
	// Keys are the provider's and addresses virtual; no local registration,
	// and remote CQ data takes no receive (no FI_RX_CQ_DATA).
	const int need = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
	ck_assert_msg((i->domain_attr->mr_mode & need) == need, "mr_mode 0x%x", i->domain_attr->mr_mode);
	ck_assert_msg(!(i->domain_attr->mr_mode & FI_MR_LOCAL), "mr_mode 0x%x", i->domain_attr->mr_mode);
	ck_assert_msg(!(i->mode & ~FI_CONTEXT), "mode 0x%" PRIx64, i->mode);
	ck_assert_msg(!(i->rx_attr->mode & FI_RX_CQ_DATA), "rx mode 0x%" PRIx64, i->rx_attr->mode);
	fi_freeinfo(list);
	fi_freeinfo(h);

	// mr_mode 0: RMA with scalable keys (the application's, 64 bits;
	// addresses are offsets) ...
	for (uint64_t caps : {uint64_t(FI_RMA), uint64_t(kRdmCaps | FI_RMA), uint64_t(FI_RMA | FI_READ | FI_REMOTE_WRITE)}) {
		h = rdm_hints(caps);
		h->domain_attr->mr_mode = 0;
		fi_info *s = rdm_get_info(h);
		ck_assert_msg((s->caps & caps) == caps, "mr_mode 0: caps 0x%" PRIx64 " lack 0x%" PRIx64, s->caps,
			      caps & ~s->caps);
		ck_assert_int_eq(s->domain_attr->mr_mode, 0);
		ck_assert_uint_eq(s->domain_attr->mr_key_size, 8);
		ck_assert_uint_gt(s->domain_attr->mr_cnt, 0);
		fi_freeinfo(s);
		fi_freeinfo(h);
	}
	// ... also in the legacy spelling, answered in kind.
	h = rdm_hints(FI_RMA);
	h->domain_attr->mr_mode = abi::kMrScalable;
	list = nullptr;
	ck_assert_int_eq(fi_getinfo(FI_VERSION(1, 4), kRdmNodeAddr, nullptr, FI_SOURCE, h, &list), 0);
	i = find_native_rdm(list);
	ck_assert_msg(i, "FI_MR_SCALABLE: no native vrma RDM entry among: %s", info_names(list).c_str());
	ck_assert_int_eq(i->domain_attr->mr_mode, abi::kMrScalable);
	fi_freeinfo(list);
	fi_freeinfo(h);
	// Messages without RMA keep no registration mode.
	h = rdm_hints(FI_TAGGED);
	h->domain_attr->mr_mode = 0;
	fi_info *t = rdm_get_info(h);
	ck_assert_msg(t->caps & FI_TAGGED, "caps 0x%" PRIx64, t->caps);
	ck_assert_msg(!(t->caps & FI_RMA), "mr_mode 0: caps 0x%" PRIx64 " offer FI_RMA", t->caps);
	fi_freeinfo(t);
	fi_freeinfo(h);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_rma_data

START_TEST(rdm_rma_write_read_sizes)
{
	char what[128];
	uint32_t seed = 1;
	{
		RmaEnv env;
		RdmNode a(env), b(env);
		connect_all({&a, &b});
		const fi_addr_t to = a.addr_of(b);
		Mem remote(MiB + 2 * kPage);
		remote.reg(env, kRemoteAccess);
		Mem src(MiB + kPage), back(MiB + kPage);
		// Heap buffers, desc NULL, every size.
		for (size_t len : {size_t(0), size_t(1), size_t(8), size_t(63), size_t(200), size_t(4096), size_t(65536), MiB}) {
			snprintf(what, sizeof what, "%zu bytes, heap, desc NULL", len);
			remote.reset();
			write_then_read(a, to, remote, 0, len, src.p, nullptr, back.p, nullptr, seed, what);
			seed += 2;
		}
		// Stack buffers, desc NULL.
		for (size_t len : {size_t(1), size_t(63), size_t(200)}) {
			uint8_t s[256], r[256 + kSlack];
			snprintf(what, sizeof what, "%zu bytes, stack, desc NULL", len);
			remote.reset();
			write_then_read(a, to, remote, 16, len, s, nullptr, r, nullptr, seed, what);
			seed += 2;
		}
		// Nothing page-aligned: remote at 4097, local at +3 and +5.
		remote.reset();
		write_then_read(a, to, remote, kPage + 1, MiB - 3, src.p + 3, nullptr, back.p + 5, nullptr, seed,
				"1 MiB - 3 bytes, unaligned, desc NULL");
		seed += 2;
		// desc from registered local regions.
		Mem lsrc(256 * KiB + kPage), lback(256 * KiB + kPage);
		lsrc.reg(env, kLocalAccess);
		lback.reg(env, kLocalAccess);
		for (size_t len : {size_t(1), size_t(63), size_t(200), size_t(4096), size_t(65536)}) {
			snprintf(what, sizeof what, "%zu bytes, registered, desc given", len);
			remote.reset();
			write_then_read(a, to, remote, 0, len, lsrc.p, lsrc.desc(), lback.p, lback.desc(), seed, what);
			seed += 2;
		}
		remote.reset();
		write_then_read(a, to, remote, 123, 256 * KiB - 7, lsrc.p + 7, lsrc.desc(), lback.p + 1, lback.desc(), seed,
				"256 KiB - 7 bytes, unaligned in registered regions");
		seed += 2;
		expect_none(a);
		expect_none(b, 300, "the target of one-sided operations");
	}
	// Two domains: the region is the target's domain's, the local one the
	// initiator's.
	{
		RmaEnv e1, e2;
		RdmNode x(e1), y(e2);
		connect_all({&x, &y});
		const fi_addr_t to = x.addr_of(y);
		Mem remote(256 * KiB + kPage);
		remote.reg(e2, kRemoteAccess);
		Mem src(256 * KiB + kPage), back(256 * KiB + kPage);
		Mem lsrc(8 * KiB), lback(8 * KiB);
		lsrc.reg(e1, kLocalAccess);
		lback.reg(e1, kLocalAccess);
		write_then_read(x, to, remote, 0, 256 * KiB + 100, src.p, nullptr, back.p, nullptr, seed,
				"256 KiB + 100 bytes to another domain, desc NULL");
		seed += 2;
		remote.reset();
		write_then_read(x, to, remote, 1000, 4096, lsrc.p, lsrc.desc(), lback.p, lback.desc(), seed,
				"4096 bytes to another domain, desc given");
		seed += 2;
		remote.reset();
		write_then_read(x, to, remote, 5, 17, src.p, nullptr, back.p, nullptr, seed,
				"17 bytes to another domain, desc NULL");
		expect_none(x);
		expect_none(y, 300, "the target of one-sided operations");
	}
}
END_TEST

// A desc is only an optimisation on RDM endpoints (issue 13 §4): one whose
// region does not cover the buffer (64 KiB of unregistered memory with the
// desc of an 8 KiB region; a buffer running past the region's end; one
// starting before it), or the desc of a region already closed, is ignored
// and the buffer registered through the cache. The data must arrive, and
// the connection keep working. (Before: the desc's key was used as given,
// and the device failed the operation with a local protection error.)
START_TEST(rdm_rma_desc_not_covering)
{
	uint32_t seed = 11;
	RmaEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Mem remote(256 * KiB);
	remote.reg(env, kRemoteAccess);
	Mem small(8 * KiB), small_back(8 * KiB);
	small.reg(env, kLocalAccess);
	small_back.reg(env, kLocalAccess);
	Mem unreg(64 * KiB), unreg_back(64 * KiB);
	remote.reset();
	write_then_read(a, to, remote, 0, 64 * KiB, unreg.p, small.desc(), unreg_back.p, small_back.desc(), seed,
			"64 KiB of unregistered memory with another region's desc");
	seed += 2;
	// Runs past the end of the region: its last 4 KiB and 4 KiB beyond (Mem's guard).
	Mem wide(64 * KiB), wide_back(64 * KiB);
	fid_mr *head = nullptr, *head_back = nullptr;
	ck_assert_int_eq(fi_mr_reg(env.domain, wide.p, 32 * KiB, kLocalAccess, 0, 0, 0, &head, nullptr), 0);
	ck_assert_int_eq(fi_mr_reg(env.domain, wide_back.p, 32 * KiB, kLocalAccess, 0, 0, 0, &head_back, nullptr), 0);
	remote.reset();
	write_then_read(a, to, remote, 0, 8 * KiB, wide.p + 28 * KiB, fi_mr_desc(head), wide_back.p + 28 * KiB,
			fi_mr_desc(head_back), seed, "a buffer running past its desc's region");
	seed += 2;
	// Starts before the region: the region is the upper half.
	fid_mr *tail = nullptr, *tail_back = nullptr;
	ck_assert_int_eq(fi_mr_reg(env.domain, wide.p + 32 * KiB, 32 * KiB, kLocalAccess, 0, 0, 0, &tail, nullptr), 0);
	ck_assert_int_eq(fi_mr_reg(env.domain, wide_back.p + 32 * KiB, 32 * KiB, kLocalAccess, 0, 0, 0, &tail_back,
				   nullptr), 0);
	remote.reset();
	write_then_read(a, to, remote, 0, 8 * KiB, wide.p + 28 * KiB, fi_mr_desc(tail), wide_back.p + 28 * KiB,
			fi_mr_desc(tail_back), seed, "a buffer starting before its desc's region");
	seed += 2;
	// The desc of a region already closed (its memory still allocated).
	void *closed = fi_mr_desc(head), *closed_back = fi_mr_desc(head_back);
	ck_assert_int_eq(fi_close(&head->fid), 0);
	ck_assert_int_eq(fi_close(&head_back->fid), 0);
	remote.reset();
	write_then_read(a, to, remote, 0, 16 * KiB, wide.p, closed, wide_back.p, closed_back, seed,
			"the desc of a closed region");
	seed += 2;
	// Small enough to go inline (write) with a wrong desc.
	remote.reset();
	write_then_read(a, to, remote, 0, 32, unreg.p, small.desc(), unreg_back.p, small_back.desc(), seed,
			"32 bytes of unregistered memory with another region's desc");
	seed += 2;
	// The connection still works with a correct desc.
	remote.reset();
	write_then_read(a, to, remote, 0, 8 * KiB, small.p, small.desc(), small_back.p, small_back.desc(), seed,
			"8 KiB, desc given and correct");
	ck_assert_int_eq(fi_close(&tail->fid), 0);
	ck_assert_int_eq(fi_close(&tail_back->fid), 0);
	expect_none(a);
	expect_none(b, 300, "the target of one-sided operations");
}
END_TEST

// Gather and scatter: fi_writev / fi_readv with four local pieces in
// separate buffers, fi_writemsg / fi_readmsg with three local pieces and
// five remote segments over two regions (uneven, one empty).
START_TEST(rdm_rma_vector)
{
	RmaEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	ck_assert_uint_ge(a.info->tx_attr->iov_limit, 4);
	ck_assert_uint_ge(a.info->tx_attr->rma_iov_limit, 5);
	const fi_addr_t to = a.addr_of(b);
	Mem ra(64 * KiB), rb(16 * KiB);
	ra.reg(env, kRemoteAccess);
	rb.reg(env, kRemoteAccess);

	// fi_writev: 700 + 1 + 3000 + 395 bytes from four buffers into one
	// range at offset 100.
	{
		const size_t s[4] = {700, 1, 3000, 395};
		std::vector<uint8_t> piece[4];
		iovec iov[4];
		size_t from = 0;
		for (int k = 0; k < 4; k++) {
			piece[k].resize(s[k]);
			fill_pattern(piece[k].data(), s[k], 11, from);
			iov[k] = {piece[k].data(), s[k]};
			from += s[k];
		}
		ck_assert_uint_eq(from, 4096);
		fi_context ctx;
		post([&] { return fi_writev(a.ep, iov, nullptr, 4, to, ra.addr(100), ra.key(), &ctx); }, "fi_writev");
		expect_ok(a, &ctx, kWriteDone, "fi_writev");
		ra.expect(100, 4096, 11);
		ra.await("fi_writev of 4 pieces");

		// fi_readv of new content into 2000 + 96 + 1 + 1999 bytes.
		ra.put(100, 4096, 12);
		const size_t r[4] = {2000, 96, 1, 1999};
		std::vector<uint8_t> dst[4];
		void *desc[4] = {nullptr, nullptr, nullptr, nullptr};
		for (int k = 0; k < 4; k++) {
			dst[k].assign(r[k] + kSlack, kSentinel);
			iov[k] = {dst[k].data(), r[k]};
		}
		post([&] { return fi_readv(a.ep, iov, desc, 4, to, ra.addr(100), ra.key(), &ctx); }, "fi_readv");
		expect_ok(a, &ctx, kReadDone, "fi_readv");
		from = 0;
		for (int k = 0; k < 4; k++) {
			char what[48];
			snprintf(what, sizeof what, "fi_readv piece %d", k);
			expect_pattern(dst[k].data(), r[k], 12, what, from);
			expect_filled(dst[k].data() + r[k], kSlack, kSentinel, what);
			from += r[k];
		}
		ra.check("after fi_readv");
	}

	// fi_writemsg: 3000 bytes of a registered region (desc given), one
	// stack byte, 5191 heap bytes, into five segments: 100 bytes of ra, an
	// empty one, 4000 of ra, 1 of rb, 4091 of rb, with gaps between.
	{
		struct Seg {
			Mem *m;
			size_t off, len;
		};
		const Seg seg[5] = {{&ra, 0, 100}, {&ra, 200, 0}, {&ra, 1000, 4000}, {&rb, 7, 1}, {&rb, 4096 + 5, 4091}};
		fi_rma_iov rma[5];
		for (int j = 0; j < 5; j++)
			rma[j] = {seg[j].m->addr(seg[j].off), seg[j].len, seg[j].m->key()};
		ra.reset();
		rb.reset();
		Mem lreg(3000);
		lreg.reg(env, kLocalAccess);
		uint8_t one;
		std::vector<uint8_t> heap(5191);
		fill_pattern(lreg.p, 3000, 21, 0);
		fill_pattern(&one, 1, 21, 3000);
		fill_pattern(heap.data(), 5191, 21, 3001);
		iovec iov[3] = {{lreg.p, 3000}, {&one, 1}, {heap.data(), 5191}};
		void *desc[3] = {lreg.desc(), nullptr, nullptr};
		fi_context ctx;
		fi_msg_rma m{};
		m.msg_iov = iov;
		m.desc = desc;
		m.iov_count = 3;
		m.addr = to;
		m.rma_iov = rma;
		m.rma_iov_count = 5;
		m.context = &ctx;
		post([&] { return fi_writemsg(a.ep, &m, FI_COMPLETION); }, "fi_writemsg 3 -> 5");
		expect_ok(a, &ctx, kWriteDone, "fi_writemsg 3 -> 5");
		size_t from = 0;
		for (const Seg &s : seg) {
			s.m->expect(s.off, s.len, 21, from);
			from += s.len;
		}
		ck_assert_uint_eq(from, 8192);
		ra.await("fi_writemsg, region a");
		rb.await("fi_writemsg, region b");

		// fi_readmsg of new content in the same segments into 4096 bytes
		// of a registered region, an empty NULL piece, 4096 heap bytes.
		from = 0;
		for (const Seg &s : seg) {
			s.m->put(s.off, s.len, 22, from);
			from += s.len;
		}
		Mem lback(4096 + kSlack);
		lback.reg(env, kLocalAccess);
		std::vector<uint8_t> hback(4096 + kSlack, kSentinel);
		iovec riov[3] = {{lback.p, 4096}, {nullptr, 0}, {hback.data(), 4096}};
		void *rdesc[3] = {lback.desc(), nullptr, nullptr};
		m.msg_iov = riov;
		m.desc = rdesc;
		post([&] { return fi_readmsg(a.ep, &m, FI_COMPLETION); }, "fi_readmsg 3 <- 5");
		expect_ok(a, &ctx, kReadDone, "fi_readmsg 3 <- 5");
		expect_pattern(lback.p, 4096, 22, "fi_readmsg piece 0", 0);
		expect_filled(lback.p + 4096, kSlack, kSentinel, "fi_readmsg piece 0");
		expect_pattern(hback.data(), 4096, 22, "fi_readmsg piece 2", 4096);
		expect_filled(hback.data() + 4096, kSlack, kSentinel, "fi_readmsg piece 2");
		ra.check("after fi_readmsg, region a");
		rb.check("after fi_readmsg, region b");
	}
	expect_none(a);
	expect_none(b, 300, "the target of one-sided operations");
}
END_TEST

// fi_inject_write: the buffer is the caller's again when the call returns,
// no CQ entry, the FI_WRITE counter counts each; fi_writemsg(FI_INJECT)
// completes when asked; beyond inject_size: -FI_EINVAL.
START_TEST(rdm_rma_inject)
{
	RmaEnv env;
	RdmNodeOptions o;
	o.write_cntr = true;
	RdmNode a(env, o), b(env);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	const size_t inj = a.info->tx_attr->inject_size;
	ck_assert_uint_ge(inj, 200);
	Mem r(inj + 8 * KiB);
	r.reg(env, kRemoteAccess);
	const size_t off[4] = {0, 64, 512, 4096};
	const size_t len[4] = {1, 64, 200, inj};
	uint64_t count = 0;
	for (int k = 0; k < 4; k++) {
		char what[64];
		snprintf(what, sizeof what, "fi_inject_write of %zu bytes", len[k]);
		std::vector<uint8_t> src(len[k]);
		fill_pattern(src.data(), len[k], 30 + k);
		post([&] { return fi_inject_write(a.ep, src.data(), len[k], to, r.addr(off[k]), r.key()); }, what);
		memset(src.data(), 0xee, len[k]); // reusable at once
		r.expect(off[k], len[k], 30 + k);
		expect_cntr(a.write_cntr, ++count, what);
		r.await(what);
	}
	// Several in a row, the buffer rewritten between them.
	std::vector<uint8_t> buf(100);
	for (int k = 0; k < 8; k++) {
		fill_pattern(buf.data(), 100, 40 + k);
		post([&] { return fi_inject_write(a.ep, buf.data(), 100, to, r.addr(1024 + k * 128), r.key()); },
		     "fi_inject_write in a row");
		r.expect(1024 + k * 128, 100, 40 + k);
	}
	memset(buf.data(), 0xee, buf.size());
	count += 8;
	expect_cntr(a.write_cntr, count, "8 fi_inject_write in a row");
	r.await("8 fi_inject_write in a row");
	expect_none(a, 300, "fi_inject_write (no CQ entry)");

	// fi_writemsg(FI_INJECT | FI_COMPLETION): reusable at once, completes.
	{
		std::vector<uint8_t> src(150);
		fill_pattern(src.data(), 150, 50);
		fi_context ctx;
		post([&] { return writemsg1(a, to, src.data(), 150, nullptr, r, 2048, FI_INJECT | FI_COMPLETION, &ctx); },
		     "fi_writemsg(FI_INJECT)");
		memset(src.data(), 0xee, src.size());
		r.expect(2048, 150, 50);
		expect_ok(a, &ctx, kWriteDone, "fi_writemsg(FI_INJECT | FI_COMPLETION)");
		expect_cntr(a.write_cntr, ++count, "fi_writemsg(FI_INJECT)");
		r.await("fi_writemsg(FI_INJECT)");
	}

	// Beyond inject_size: refused, nothing written, nothing counted.
	std::vector<uint8_t> big(inj + 1);
	fill_pattern(big.data(), inj + 1, 60);
	expect_rc(fi_inject_write(a.ep, big.data(), inj + 1, to, r.addr(4096), r.key()), -FI_EINVAL,
		  "fi_inject_write of inject_size + 1 bytes");
	settle(200);
	ck_assert_uint_eq(fi_cntr_read(a.write_cntr), count);
	ck_assert_uint_eq(fi_cntr_readerr(a.write_cntr), 0);
	r.check("after the refused fi_inject_write");
	expect_none(a, 100, "the refused fi_inject_write");
	expect_none(b, 100, "the target of injected writes");
}
END_TEST

// Remote CQ data: one entry at the target per write carrying it (full 64
// bits, length, source), none for plain writes, no application receive
// consumed.
// RMA injects beyond the inline size took bounce buffers of their
// connection's own: 64 of the inject size (over 512 KiB), registered at the
// first such inject and kept as long as the connection. They now take one
// of the endpoint's shared send buffers each, back when the write
// completes: injecting to 16 peers costs the initiator no memory beyond
// their connections, and every buffer is free again at the end.
START_TEST(rdm_rma_inject_shared_buffers)
{
	constexpr size_t kPeers = 16, kLen = 4096;
	RmaEnv env;
	RdmNode a(env);
	std::vector<std::unique_ptr<RdmNode>> peers;
	std::vector<fi_addr_t> to;
	for (size_t i = 0; i < kPeers; i++) {
		peers.push_back(std::make_unique<RdmNode>(env));
		to.push_back(a.insert(*peers.back()));
		peers.back()->insert(a);
	}
	ck_assert_uint_le(kLen, a.info->tx_attr->inject_size);
	Mem r(2 * kPeers * kLen);
	r.reg(env, kRemoteAccess);
	const ssize_t pool = fi_tx_size_left(a.ep);
	std::vector<uint8_t> src(kLen);
	// Connections first: an inline write to each.
	for (size_t i = 0; i < kPeers; i++) {
		fill_pattern(src.data(), 8, static_cast<uint32_t>(200 + i));
		post([&] { return fi_inject_write(a.ep, src.data(), 8, to[i], r.addr(i * kLen), r.key()); },
		     "an inline fi_inject_write");
		r.expect(i * kLen, 8, static_cast<uint32_t>(200 + i));
	}
	r.await("the inline injects");
	const size_t rss0 = resident_bytes();
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < kPeers; i++) {
			const auto seed = static_cast<uint32_t>(300 + 100 * round + i);
			const size_t off = (kPeers + i) * kLen;
			fill_pattern(src.data(), kLen, seed);
			post([&] { return fi_inject_write(a.ep, src.data(), kLen, to[i], r.addr(off), r.key()); },
			     "a 4 KiB fi_inject_write");
			memset(src.data(), 0xee, kLen); // reusable at once
			r.expect(off, kLen, seed);
		}
		r.await("the 4 KiB injects");
	}
	const size_t grew = resident_bytes() - rss0;
	ck_assert_msg(grew < 2 * KiB * KiB, "injects to %zu peers grew the initiator by %zu bytes", kPeers, grew);
	ck_assert_msg(progress_until([&] { return fi_tx_size_left(a.ep) == pool; }),
		      "%zd of %zd send buffers free after the injects completed", fi_tx_size_left(a.ep), pool);
	expect_none(a);
}
END_TEST

START_TEST(rdm_rma_writedata)
{
	RmaEnv env;
	ck_assert_uint_eq(env.info->domain_attr->cq_data_size, 8);
	RdmNode a(env), b(env), c(env);
	connect_all({&a, &b});
	const fi_addr_t c_to_b = c.insert(b); // b does not know c
	const fi_addr_t to = a.addr_of(b), from_a = b.addr_of(a);
	Mem r(128 * KiB);
	r.reg(env, kRemoteAccess);
	// A receive posted first: the writes below must leave it alone.
	std::vector<uint8_t> rbuf(256 + kSlack, kSentinel);
	fi_context rctx, sctx, ctx;
	ck_assert_int_eq(fi_recv(b.ep, rbuf.data(), 256, nullptr, FI_ADDR_UNSPEC, &rctx), 0);

	// fi_writedata, 64 KiB + 5, data 0x0123456789abcdef.
	{
		const size_t len = 64 * KiB + 5;
		std::vector<uint8_t> src(len);
		fill_pattern(src.data(), len, 70);
		post([&] { return fi_writedata(a.ep, src.data(), len, nullptr, 0x0123456789abcdefULL, to, r.addr(0), r.key(), &ctx); },
		     "fi_writedata");
		r.expect(0, len, 70);
		expect_remote_data(b, 0x0123456789abcdefULL, len, from_a, r, "fi_writedata 0x0123456789abcdef");
		expect_ok(a, &ctx, kWriteDone, "fi_writedata");
	}
	// fi_writedata with data 0 (still an entry, with FI_REMOTE_CQ_DATA).
	{
		std::vector<uint8_t> src(300);
		fill_pattern(src.data(), 300, 71);
		post([&] { return fi_writedata(a.ep, src.data(), 300, nullptr, 0, to, r.addr(66000), r.key(), &ctx); },
		     "fi_writedata 0");
		r.expect(66000, 300, 71);
		expect_remote_data(b, 0, 300, from_a, r, "fi_writedata 0");
		expect_ok(a, &ctx, kWriteDone, "fi_writedata 0");
	}
	// fi_inject_writedata: both values; the buffer is reusable at once.
	{
		const uint64_t data[2] = {0x0123456789abcdefULL, 0};
		for (int k = 0; k < 2; k++) {
			std::vector<uint8_t> src(100);
			fill_pattern(src.data(), 100, 72 + k);
			post([&] { return fi_inject_writedata(a.ep, src.data(), 100, data[k], to, r.addr(70000 + k * 200), r.key()); },
			     "fi_inject_writedata");
			memset(src.data(), 0xee, src.size());
			r.expect(70000 + k * 200, 100, 72 + k);
			expect_remote_data(b, data[k], 100, from_a, r, k ? "fi_inject_writedata 0" : "fi_inject_writedata 0x0123456789abcdef");
		}
	}
	// fi_writemsg(FI_REMOTE_CQ_DATA): two local pieces, two segments.
	{
		std::vector<uint8_t> p0(300), p1(200);
		fill_pattern(p0.data(), 300, 74, 0);
		fill_pattern(p1.data(), 200, 74, 300);
		iovec iov[2] = {{p0.data(), 300}, {p1.data(), 200}};
		fi_rma_iov rma[2] = {{r.addr(80000), 250, r.key()}, {r.addr(90000), 250, r.key()}};
		fi_msg_rma m{};
		m.msg_iov = iov;
		m.iov_count = 2;
		m.addr = to;
		m.rma_iov = rma;
		m.rma_iov_count = 2;
		m.context = &ctx;
		m.data = 0xfedcba9876543210ULL;
		post([&] { return fi_writemsg(a.ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION); }, "fi_writemsg(FI_REMOTE_CQ_DATA)");
		r.expect(80000, 250, 74, 0);
		r.expect(90000, 250, 74, 250);
		expect_remote_data(b, 0xfedcba9876543210ULL, 500, from_a, r, "fi_writemsg(FI_REMOTE_CQ_DATA)");
		expect_ok(a, &ctx, kWriteDone, "fi_writemsg(FI_REMOTE_CQ_DATA)");
	}
	// Without FI_REMOTE_CQ_DATA, the message's data field carries nothing.
	{
		std::vector<uint8_t> src(64);
		fill_pattern(src.data(), 64, 75);
		post([&] { return writemsg1(a, to, src.data(), 64, nullptr, r, 95000, FI_COMPLETION, &ctx, 0x1111); },
		     "fi_writemsg with data but no FI_REMOTE_CQ_DATA");
		r.expect(95000, 64, 75);
		expect_ok(a, &ctx, kWriteDone, "fi_writemsg with data but no FI_REMOTE_CQ_DATA");
		r.await("fi_writemsg with data but no FI_REMOTE_CQ_DATA");
		expect_none(b, 200, "a write without FI_REMOTE_CQ_DATA");
	}
	// 0 bytes: the entry with its data and len 0, nothing written.
	{
		uint8_t none = 0x5a;
		post([&] { return fi_writedata(a.ep, &none, 0, nullptr, 0x8000000000000001ULL, to, r.addr(100000), r.key(), &ctx); },
		     "0-byte fi_writedata");
		expect_remote_data(b, 0x8000000000000001ULL, 0, from_a, r, "0-byte fi_writedata");
		expect_ok(a, &ctx, kWriteDone, "0-byte fi_writedata");
	}
	// From a peer b's AV does not hold: source FI_ADDR_NOTAVAIL.
	{
		std::vector<uint8_t> src(1000);
		fill_pattern(src.data(), 1000, 76);
		post([&] { return fi_writedata(c.ep, src.data(), 1000, nullptr, 0x5a5a5a5aa5a5a5a5ULL, c_to_b, r.addr(110000), r.key(), &ctx); },
		     "fi_writedata from a peer outside the AV");
		r.expect(110000, 1000, 76);
		expect_remote_data(b, 0x5a5a5a5aa5a5a5a5ULL, 1000, FI_ADDR_NOTAVAIL, r, "fi_writedata from a peer outside the AV");
		expect_ok(c, &ctx, kWriteDone, "fi_writedata from a peer outside the AV");
	}
	// The receive posted first is still there: a message takes it.
	std::vector<uint8_t> msg(100);
	fill_pattern(msg.data(), 100, 77);
	post([&] { return fi_send(a.ep, msg.data(), 100, nullptr, to, &sctx); }, "fi_send after the writes");
	Completion rc = expect_ok(b, &rctx, FI_RECV | FI_MSG, "the receive posted before the writes");
	ck_assert_uint_eq(rc.e.len, 100);
	ck_assert_uint_eq(rc.src, from_a);
	expect_pattern(rbuf.data(), 100, 77, "the message after the writes");
	expect_filled(rbuf.data() + 100, 256 - 100 + kSlack, kSentinel, "the message after the writes");
	expect_ok(a, &sctx, FI_SEND | FI_MSG, "fi_send after the writes");
	r.check("at the end");
	expect_none(a);
	expect_none(b);
	expect_none(c);
}
END_TEST

// A node writes and reads its own region through its own address.
// Remote CQ data fills the target's CQ without the target's receives: past
// the CQ's size (64 here) the writer is paused: its fi_inject_writedata
// returns -FI_EAGAIN, progressing, while the target progresses without
// reading its CQ. Once the target reads, the writer resumes; every write
// lands and every entry arrives once, in order, with its data. (Before,
// the CQ took all 512.)
START_TEST(rdm_rma_cq_data_backpressure)
{
	constexpr size_t kCq = 64, kMax = 512, kLen = 64;
	RmaEnv env;
	RdmNodeOptions to_opt;
	to_opt.cq_size = kCq;
	to_opt.tx_cntr = true; // progress without reading the CQ
	RdmNode a(env), b(env, to_opt);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b), from_a = b.addr_of(a);
	Mem r(kMax * kLen);
	r.reg(env, kRemoteAccess);
	std::vector<uint8_t> src(kMax * kLen);
	fill_pattern(src.data(), src.size(), 91);
	auto write = [&](size_t i) {
		return fi_inject_writedata(a.ep, src.data() + i * kLen, kLen, 0x9000 + i, to, r.addr(i * kLen), r.key());
	};
	b.reading = false;
	const size_t sent = post_until_refused(write, kMax, 2000, "fi_inject_writedata");
	fprintf(stderr, "rdm_rma_cq_data_backpressure: %zu writes before the writer stopped\n", sent);
	ck_assert_msg(sent < kMax, "the writer was never paused: %zu entries for a CQ of %zu", sent, kCq);
	ck_assert_msg(sent > kCq && sent <= kCq + kPeerGrace, "paused after %zu writes", sent);
	// The target reads; the writer goes on.
	b.reading = true;
	for (size_t i = sent; i < kMax; i++)
		post([&] { return write(i); }, "fi_inject_writedata after the target read");
	for (size_t i = 0; i < kMax; i++) {
		r.expect(i * kLen, kLen, 91, i * kLen);
		const std::string what = "remote CQ data " + std::to_string(i);
		ck_assert_msg(progress_until([&] { return !b.backlog.empty(); }), "%s: none came", what.c_str());
		const Completion c = b.backlog.front();
		b.backlog.pop_front();
		ck_assert_msg(c.ok && c.e.flags == kRemoteData && c.e.data == 0x9000 + i && c.e.len == kLen &&
				      c.src == from_a,
			      "%s: %s", what.c_str(), c.describe().c_str());
	}
	r.check("the paused writer's writes");
	expect_none(a);
	expect_none(b);
}
END_TEST

START_TEST(rdm_rma_loopback)
{
	RmaEnv env;
	RdmNode a(env);
	const fi_addr_t self = a.insert(a);
	Mem r(512 * KiB);
	r.reg(env, kRemoteAccess);
	Mem src(512 * KiB), back(512 * KiB);
	uint32_t seed = 90;
	for (size_t len : {size_t(100), size_t(4096), 300 * KiB}) {
		char what[64];
		snprintf(what, sizeof what, "%zu bytes to self", len);
		r.reset();
		write_then_read(a, self, r, 8, len, src.p, nullptr, back.p, nullptr, seed, what);
		seed += 2;
	}
	// fi_inject_write to self.
	r.reset();
	std::vector<uint8_t> small(64);
	fill_pattern(small.data(), 64, seed);
	post([&] { return fi_inject_write(a.ep, small.data(), 64, self, r.addr(1000), r.key()); }, "fi_inject_write to self");
	memset(small.data(), 0xee, small.size());
	r.expect(1000, 64, seed++);
	r.await("fi_inject_write to self");
	// fi_writedata to self: the write's completion and the remote CQ data
	// entry, both on this node's CQ, in either order.
	std::vector<uint8_t> d(2000);
	fill_pattern(d.data(), 2000, seed);
	fi_context ctx;
	post([&] { return fi_writedata(a.ep, d.data(), 2000, nullptr, 0xabcdef0123456789ULL, self, r.addr(4096), r.key(), &ctx); },
	     "fi_writedata to self");
	r.expect(4096, 2000, seed++);
	bool got_write = false, got_data = false;
	for (int k = 0; k < 2; k++) {
		Completion c = next(a);
		ck_assert_msg(c.ok, "fi_writedata to self: %s", c.describe().c_str());
		if (c.e.op_context == &ctx) {
			ck_assert_msg(!got_write && c.e.flags == kWriteDone, "fi_writedata to self: %s", c.describe().c_str());
			got_write = true;
			continue;
		}
		ck_assert_msg(!got_data && !c.e.op_context && c.e.flags == kRemoteData, "fi_writedata to self: %s",
			      c.describe().c_str());
		ck_assert_uint_eq(c.e.data, 0xabcdef0123456789ULL);
		ck_assert_uint_eq(c.e.len, 2000);
		ck_assert_uint_eq(c.src, self);
		r.check("fi_writedata to self, when its entry is read");
		got_data = true;
	}
	// fi_readmsg from two segments of its own region.
	r.put(20000, 500, seed, 0);
	r.put(30000, 700, seed, 500);
	std::vector<uint8_t> rb(1200 + kSlack, kSentinel);
	iovec iov{rb.data(), 1200};
	fi_rma_iov rma[2] = {{r.addr(20000), 500, r.key()}, {r.addr(30000), 700, r.key()}};
	fi_msg_rma m{};
	m.msg_iov = &iov;
	m.iov_count = 1;
	m.addr = self;
	m.rma_iov = rma;
	m.rma_iov_count = 2;
	m.context = &ctx;
	post([&] { return fi_readmsg(a.ep, &m, FI_COMPLETION); }, "fi_readmsg from self");
	expect_ok(a, &ctx, kReadDone, "fi_readmsg from self");
	expect_pattern(rb.data(), 1200, seed, "fi_readmsg from self");
	expect_filled(rb.data() + 1200, kSlack, kSentinel, "fi_readmsg from self");
	r.check("at the end");
	expect_none(a);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_rma_flags

START_TEST(rdm_rma_flags)
{
	RmaEnv ea, eb;
	RdmNode a(ea), b(eb);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Mem r(512 * KiB);
	r.reg(eb, kRemoteAccess);
	Mem src(512 * KiB), back(512 * KiB);
	fi_context ctx;
	uint32_t seed = 100;

	// The connection first.
	fill_pattern(src.p, 8, seed);
	post([&] { return fi_write(a.ep, src.p, 8, nullptr, to, r.addr(0), r.key(), &ctx); }, "first write");
	expect_ok(a, &ctx, kWriteDone, "first write");
	r.expect(0, 8, seed++);
	r.await("first write");

	// FI_DELIVERY_COMPLETE: in the target's memory when the completion is
	// read (checked at once, nothing called on the target in between).
	for (size_t len : {size_t(8), size_t(200), 64 * KiB, 256 * KiB}) {
		char what[64];
		snprintf(what, sizeof what, "FI_DELIVERY_COMPLETE, %zu bytes", len);
		r.reset();
		fill_pattern(src.p, len, seed);
		post([&] { return writemsg1(a, to, src.p, len, nullptr, r, 100, FI_DELIVERY_COMPLETE | FI_COMPLETION, &ctx); },
		     what);
		r.expect(100, len, seed++);
		expect_ok(a, &ctx, kWriteDone, what);
		r.check(what);
	}

	// FI_INJECT_COMPLETE: the buffer is the caller's again at the
	// completion; the target gets what it held before.
	for (size_t len : {size_t(4096), 256 * KiB}) {
		char what[64];
		snprintf(what, sizeof what, "FI_INJECT_COMPLETE, %zu bytes", len);
		r.reset();
		fill_pattern(src.p, len, seed);
		post([&] { return writemsg1(a, to, src.p, len, nullptr, r, 0, FI_INJECT_COMPLETE | FI_COMPLETION, &ctx); },
		     what);
		r.expect(0, len, seed++);
		expect_ok(a, &ctx, kWriteDone, what);
		memset(src.p, 0xee, len);
		r.await(what);
	}

	// FI_TRANSMIT_COMPLETE.
	{
		r.reset();
		fill_pattern(src.p, 64 * KiB, seed);
		post([&] { return writemsg1(a, to, src.p, 64 * KiB, nullptr, r, 3, FI_TRANSMIT_COMPLETE | FI_COMPLETION, &ctx); },
		     "FI_TRANSMIT_COMPLETE");
		r.expect(3, 64 * KiB, seed++);
		expect_ok(a, &ctx, kWriteDone, "FI_TRANSMIT_COMPLETE");
		r.await("FI_TRANSMIT_COMPLETE");
	}

	// FI_MORE: eight writes announcing more, then one without; all nine
	// complete and land.
	{
		r.reset();
		fi_context mctx[9];
		Expected e;
		for (int k = 0; k < 9; k++) {
			const size_t len = 1000 + 333 * k, off = k * 8 * KiB;
			fill_pattern(src.p + off, len, seed + k);
			const uint64_t flags = (k < 8 ? FI_MORE : 0) | FI_COMPLETION;
			post([&] { return writemsg1(a, to, src.p + off, len, nullptr, r, off, flags, &mctx[k]); },
			     k < 8 ? "fi_writemsg(FI_MORE)" : "fi_writemsg ending the FI_MORE chain");
			r.expect(off, len, seed + k);
			e.add(&mctx[k], kWriteDone, "write " + std::to_string(k) + " of the FI_MORE chain");
		}
		seed += 9;
		e.wait(a);
		r.await("the FI_MORE chain");
	}

	// FI_FENCE: a read, then a fenced write to the same bytes; the read
	// sees what was there before the write.
	for (size_t len : {size_t(4096), 64 * KiB, 256 * KiB}) {
		char what[80];
		snprintf(what, sizeof what, "fi_read then fenced write, %zu bytes", len);
		r.reset();
		r.put(0, len, seed);
		fill_pattern(src.p, len, seed + 1);
		memset(back.p, kSentinel, len + kSlack);
		fi_context rctx, wctx;
		post([&] { return fi_read(a.ep, back.p, len, nullptr, to, r.addr(0), r.key(), &rctx); }, what);
		post([&] { return writemsg1(a, to, src.p, len, nullptr, r, 0, FI_FENCE | FI_COMPLETION, &wctx); }, what);
		Expected e;
		e.add(&rctx, kReadDone, std::string(what) + " (the read)");
		e.add(&wctx, kWriteDone, std::string(what) + " (the fenced write)");
		e.wait(a);
		expect_pattern(back.p, len, seed, what);
		expect_filled(back.p + len, kSlack, kSentinel, what);
		r.expect(0, len, seed + 1);
		r.await(what);
		seed += 2;
	}

	// FI_COMMIT_COMPLETE: the endpoint lacks FI_RMA_PMEM (rdm_rma_commit).
	{
		r.reset();
		fill_pattern(src.p, 64, seed);
		expect_rc(writemsg1(a, to, src.p, 64, nullptr, r, 0, FI_COMMIT_COMPLETE | FI_COMPLETION, &ctx), -FI_EBADFLAGS,
			  "fi_writemsg(FI_COMMIT_COMPLETE)");
		expect_none(a, 200, "the refused FI_COMMIT_COMPLETE write");
		r.check("the refused FI_COMMIT_COMPLETE write");
	}
	expect_none(b, 100, "the target of one-sided operations");

	// FI_SELECTIVE_COMPLETION: only the calls with FI_COMPLETION report;
	// the FI_WRITE and FI_READ counters count every operation.
	{
		RdmNodeOptions o;
		o.cq_bind_flags = FI_SELECTIVE_COMPLETION;
		o.write_cntr = o.read_cntr = true;
		RdmNode s(ea, o);
		connect_all({&s, &b});
		const fi_addr_t sto = s.addr_of(b);
		r.reset();
		fi_context wc[4], rc[3];
		uint8_t *p = src.p;
		fill_pattern(p, 4 * KiB, seed);
		post([&] { return fi_write(s.ep, p, 1000, nullptr, sto, r.addr(0), r.key(), &wc[0]); }, "fi_write");
		post([&] { return writemsg1(s, sto, p + 1000, 1000, nullptr, r, 2000, FI_COMPLETION, &wc[1]); },
		     "fi_writemsg(FI_COMPLETION)");
		post([&] { return writemsg1(s, sto, p + 2000, 1000, nullptr, r, 4000, 0, &wc[2]); }, "fi_writemsg(0)");
		post([&] { return fi_inject_write(s.ep, p + 3000, 64, sto, r.addr(6000), r.key()); }, "fi_inject_write");
		post([&] { return fi_writedata(s.ep, p + 3100, 500, nullptr, 0x77, sto, r.addr(7000), r.key(), &wc[3]); },
		     "fi_writedata");
		r.expect(0, 1000, seed, 0);
		r.expect(2000, 1000, seed, 1000);
		r.expect(4000, 1000, seed, 2000);
		r.expect(6000, 64, seed, 3000);
		r.expect(7000, 500, seed, 3100);
		expect_cntr(s.write_cntr, 5, "FI_WRITE counter, selective completion (the inject and fi_writedata too)");
		r.await("writes with selective completion");
		expect_remote_data(b, 0x77, 500, b.addr_of(s), r, "fi_writedata without a completion at the initiator");
		// The reads, once the writes are in place.
		uint8_t *bk = back.p;
		memset(bk, kSentinel, 3 * 1024 + kSlack);
		post([&] { return fi_read(s.ep, bk, 1000, nullptr, sto, r.addr(0), r.key(), &rc[0]); }, "fi_read");
		post([&] { return readmsg1(s, sto, bk + 1024, 1000, nullptr, r, 2000, FI_COMPLETION, &rc[1]); },
		     "fi_readmsg(FI_COMPLETION)");
		post([&] { return readmsg1(s, sto, bk + 2048, 1000, nullptr, r, 4000, 0, &rc[2]); }, "fi_readmsg(0)");
		expect_cntr(s.read_cntr, 3, "FI_READ counter, selective completion");
		Expected e;
		e.add(&wc[1], kWriteDone, "fi_writemsg(FI_COMPLETION)");
		e.add(&rc[1], kReadDone, "fi_readmsg(FI_COMPLETION)");
		e.wait(s);
		expect_none(s, 300, "operations without FI_COMPLETION");
		expect_pattern(bk, 1000, seed, "fi_read without a completion", 0);
		expect_pattern(bk + 1024, 1000, seed, "fi_readmsg(FI_COMPLETION)", 1000);
		expect_pattern(bk + 2048, 1000, seed, "fi_readmsg(0)", 2000);
		expect_filled(bk + 3072, kSlack, kSentinel, "after the reads");
		ck_assert_uint_eq(fi_cntr_read(s.write_cntr), 5);
		ck_assert_uint_eq(fi_cntr_readerr(s.write_cntr), 0);
		ck_assert_uint_eq(fi_cntr_readerr(s.read_cntr), 0);
	}
	expect_none(a);
	expect_none(b, 100, "the target at the end");
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_rma_events

// A target with FI_RMA_EVENT counts the remote writes and reads of two
// initiators (one of them not in its AV) on its endpoint's counters, and
// per region on the counters bound to each region; it calls nothing but
// fi_cntr_wait, from a thread of its own.
START_TEST(rdm_rma_events_two_peers)
{
	RmaEnv et(FI_RMA_EVENT), ei;
	ck_assert_msg(et.info->caps & FI_RMA_EVENT, "caps 0x%" PRIx64, et.info->caps);
	Cntr aw(et), ar(et), bw(et), br(et); // the regions' counters
	RdmNodeOptions topt;
	topt.remote_write_cntr = topt.remote_read_cntr = true;
	RdmNode t(et, topt), i1(ei), i2(ei);
	t.insert(i1); // i2 stays unknown to t
	const fi_addr_t to[2] = {i1.insert(t), i2.insert(t)};
	RdmNode *in[2] = {&i1, &i2};
	Mem ra(64 * KiB), rb(64 * KiB);
	ra.reg(et, kRemoteAccess, FI_RMA_EVENT);
	rb.reg(et, kRemoteAccess, FI_RMA_EVENT);
	ck_assert_int_eq(fi_mr_bind(ra.mr, &aw.c->fid, FI_REMOTE_WRITE), 0);
	ck_assert_int_eq(fi_mr_bind(ra.mr, &ar.c->fid, FI_REMOTE_READ), 0);
	ck_assert_int_eq(fi_mr_bind(rb.mr, &bw.c->fid, FI_REMOTE_WRITE), 0);
	ck_assert_int_eq(fi_mr_bind(rb.mr, &br.c->fid, FI_REMOTE_READ), 0);
	ck_assert_int_eq(fi_mr_enable(ra.mr), 0);
	ck_assert_int_eq(fi_mr_enable(rb.mr), 0);

	// Per initiator k, in its own 32 KiB of each region: 4 fi_write to a,
	// 2 to b, 1 fi_inject_write to a, 1 fi_writemsg over a and b (N = 8
	// writes: a 6, b 3); 2 fi_read from a, 1 from b (M = 3 reads: a 2,
	// b 1), of bytes the CPU put there first.
	constexpr uint64_t kWrites = 8, kReads = 3;
	struct Wait {
		fid_cntr *c;
		uint64_t want;
		const char *what;
		int rc = 1;
	};
	Wait waits[6] = {{t.remote_write_cntr, 2 * kWrites, "the endpoint's FI_REMOTE_WRITE counter"},
			 {t.remote_read_cntr, 2 * kReads, "the endpoint's FI_REMOTE_READ counter"},
			 {aw.c, 2 * 6, "region a's FI_REMOTE_WRITE counter"},
			 {ar.c, 2 * 2, "region a's FI_REMOTE_READ counter"},
			 {bw.c, 2 * 3, "region b's FI_REMOTE_WRITE counter"},
			 {br.c, 2 * 1, "region b's FI_REMOTE_READ counter"}};
	for (int k = 0; k < 2; k++) {
		ra.put(k * 32 * KiB + 28 * KiB, 1000, 200 + k);
		rb.put(k * 32 * KiB + 28 * KiB, 500, 210 + k);
	}
	std::vector<uint8_t> src[2], back[2];
	for (int k = 0; k < 2; k++) {
		src[k].resize(16 * KiB);
		fill_pattern(src[k].data(), src[k].size(), 220 + k);
		back[k].assign(3 * 1024 + kSlack, kSentinel);
	}
	fi_context wctx[2][7], rctx[2][3];

	// The target's thread: nothing but fi_cntr_wait, which progresses it.
	std::atomic<bool> waiting{false};
	std::thread waiter([&] {
		waiting = true;
		for (Wait &w : waits)
			w.rc = fi_cntr_wait(w.c, w.want, 10000);
	});
	while (!waiting)
		std::this_thread::yield();

	// This thread reads the initiators' CQs only (the target's belongs to
	// the waiter).
	Expected e;
	for (int k = 0; k < 2; k++) {
		RdmNode &n = *in[k];
		const size_t base = k * 32 * KiB;
		const uint8_t *s = src[k].data();
		for (int j = 0; j < 4; j++) {
			post([&] { return fi_write(n.ep, s + j * 2000, 2000, nullptr, to[k], ra.addr(base + j * 4096), ra.key(), &wctx[k][j]); },
			     "fi_write to region a", &n);
			ra.expect(base + j * 4096, 2000, 220 + k, j * 2000);
		}
		for (int j = 0; j < 2; j++) {
			post([&] { return fi_write(n.ep, s + 8000 + j * 1000, 1000, nullptr, to[k], rb.addr(base + j * 4096), rb.key(), &wctx[k][4 + j]); },
			     "fi_write to region b", &n);
			rb.expect(base + j * 4096, 1000, 220 + k, 8000 + j * 1000);
		}
		post([&] { return fi_inject_write(n.ep, s + 10000, 64, to[k], ra.addr(base + 20000), ra.key()); },
		     "fi_inject_write to region a", &n);
		ra.expect(base + 20000, 64, 220 + k, 10000);
		{
			iovec iov{const_cast<uint8_t *>(s) + 11000, 600};
			fi_rma_iov rma[2] = {{ra.addr(base + 24000), 300, ra.key()}, {rb.addr(base + 24000), 300, rb.key()}};
			fi_msg_rma m{};
			m.msg_iov = &iov;
			m.iov_count = 1;
			m.addr = to[k];
			m.rma_iov = rma;
			m.rma_iov_count = 2;
			m.context = &wctx[k][6];
			post([&] { return fi_writemsg(n.ep, &m, FI_COMPLETION); }, "fi_writemsg over regions a and b", &n);
			ra.expect(base + 24000, 300, 220 + k, 11000);
			rb.expect(base + 24000, 300, 220 + k, 11300);
		}
		uint8_t *bk = back[k].data();
		for (int j = 0; j < 2; j++)
			post([&] { return fi_read(n.ep, bk + j * 1024, 1000, nullptr, to[k], ra.addr(base + 28 * KiB), ra.key(), &rctx[k][j]); },
			     "fi_read from region a", &n);
		post([&] { return fi_read(n.ep, bk + 2048, 500, nullptr, to[k], rb.addr(base + 28 * KiB), rb.key(), &rctx[k][2]); },
		     "fi_read from region b", &n);
		for (int j = 0; j < 7; j++)
			e.add(&wctx[k][j], kWriteDone, "initiator " + std::to_string(k + 1) + " write " + std::to_string(j));
		for (int j = 0; j < 3; j++)
			e.add(&rctx[k][j], kReadDone, "initiator " + std::to_string(k + 1) + " read " + std::to_string(j));
	}
	e.wait_alone({&i1, &i2}, 2 * kTimeoutMs);
	waiter.join();

	for (const Wait &w : waits)
		ck_assert_msg(w.rc == 0, "%s: fi_cntr_wait(%" PRIu64 ", 10000 ms) gave %d (%s) at %" PRIu64, w.what, w.want,
			      w.rc, err_name(w.rc), fi_cntr_read(w.c));
	settle(100);
	for (const Wait &w : waits) {
		ck_assert_msg(fi_cntr_read(w.c) == w.want, "%s: %" PRIu64 ", expected exactly %" PRIu64, w.what,
			      fi_cntr_read(w.c), w.want);
		ck_assert_msg(fi_cntr_readerr(w.c) == 0, "%s: %" PRIu64 " errors", w.what, fi_cntr_readerr(w.c));
	}
	ra.check("region a");
	rb.check("region b");
	for (int k = 0; k < 2; k++) {
		expect_pattern(back[k].data(), 1000, 200 + k, "fi_read from region a");
		expect_pattern(back[k].data() + 1024, 1000, 200 + k, "fi_read from region a");
		expect_pattern(back[k].data() + 2048, 500, 210 + k, "fi_read from region b");
		expect_filled(back[k].data() + 2548, kSlack, kSentinel, "after the reads");
	}
	// Counters only: nothing on the target's CQ.
	expect_none(t, 200, "the FI_RMA_EVENT target");
	expect_none(i1);
	expect_none(i2);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_rma_errors

// What the target's device refuses: an error entry with the context, the
// target memory untouched; the next good write to the peer succeeds.
START_TEST(rdm_rma_remote_errors)
{
	RmaEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Mem good(64 * KiB), ro(4096), gone(4096);
	good.reg(env, kRemoteAccess);
	ro.reg(env, FI_REMOTE_READ);
	gone.reg(env, kRemoteAccess);
	const uint64_t gone_key = gone.key(), gone_addr = gone.addr();
	gone.close_mr();
	const uint64_t bad_key = good.key() ^ 0x00ffff00ULL;
	ck_assert_uint_ne(bad_key, good.key());
	ck_assert_uint_ne(bad_key, ro.key());
	Mem src(64 * KiB), back(64 * KiB);
	fill_pattern(src.p, 64 * KiB, 150);
	uint32_t seed = 160;
	size_t good_off = 0;
	auto check_all = [&](const char *what) {
		good.check(what);
		ro.check(what);
		gone.check(what);
	};
	// A good write to the peer, at a fresh place each time.
	auto good_write = [&](const char *what) {
		std::vector<uint8_t> s(512);
		fill_pattern(s.data(), 512, seed);
		fi_context ctx;
		post([&] { return fi_write(a.ep, s.data(), 512, nullptr, to, good.addr(good_off), good.key(), &ctx); }, what);
		expect_ok(a, &ctx, kWriteDone, what);
		good.expect(good_off, 512, seed++);
		good_off += 1024;
		good.await(what);
		check_all(what);
	};
	good_write("the write before any error");

	struct Case {
		const char *what;
		uint64_t addr;
		size_t len;
		uint64_t key;
	};
	const Case cases[] = {
		{"a bad key", good.addr(0), 256, bad_key},
		{"an address beyond the region's end", good.addr(64 * KiB - 100), 256, good.key()},
		{"an address before the region", good.addr(0) - 64, 128, good.key()},
		{"a region without FI_REMOTE_WRITE", ro.addr(0), 256, ro.key()},
		{"a closed region", gone_addr, 256, gone_key},
	};
	for (const Case &c : cases) {
		char what[96];
		snprintf(what, sizeof what, "write with %s", c.what);
		fi_context ctx;
		post([&] { return fi_write(a.ep, src.p, c.len, nullptr, to, c.addr, c.key, &ctx); }, what);
		const bool closed = c.key == gone_key;
		fi_cq_err_entry err = expect_err(a, &ctx, closed ? 0 : FI_EACCES, what);
		if (closed)
			ck_assert_msg(err.err == FI_EACCES || err.err == FI_EIO, "%s: err %d (%s)", what, err.err,
				      fi_strerror(err.err));
		check_all(what);
		snprintf(what, sizeof what, "the good write after a write with %s", c.what);
		good_write(what);
	}

	// A read with a bad key, then a good read.
	{
		fi_context ctx;
		post([&] { return fi_read(a.ep, back.p, 256, nullptr, to, good.addr(0), bad_key, &ctx); }, "read with a bad key");
		expect_err(a, &ctx, FI_EACCES, "read with a bad key");
		check_all("read with a bad key");
		good.put(32 * KiB, 300, seed);
		memset(back.p, kSentinel, 300 + kSlack);
		post([&] { return fi_read(a.ep, back.p, 300, nullptr, to, good.addr(32 * KiB), good.key(), &ctx); },
		     "the good read after a read with a bad key");
		expect_ok(a, &ctx, kReadDone, "the good read after a read with a bad key");
		expect_pattern(back.p, 300, seed++, "the good read after a read with a bad key");
		expect_filled(back.p + 300, kSlack, kSentinel, "the good read after a read with a bad key");
	}
	good_write("the last write");
	expect_none(a);
	expect_none(b, 100, "the target of refused operations");
}
END_TEST

// Calls refused at once with -FI_EINVAL or -FI_EBADFLAGS: nothing posted,
// counted, written or completed.
START_TEST(rdm_rma_bad_input)
{
	RmaEnv env;
	RdmNodeOptions o;
	o.write_cntr = o.read_cntr = true;
	RdmNode a(env, o), b(env);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	const size_t iov_limit = a.info->tx_attr->iov_limit, rma_limit = a.info->tx_attr->rma_iov_limit;
	const size_t inj = a.info->tx_attr->inject_size;
	Mem r(64 * KiB);
	r.reg(env, kRemoteAccess);
	std::vector<uint8_t> src(64 * KiB), back(64 * KiB + kSlack, kSentinel);
	fill_pattern(src.data(), src.size(), 170);
	fi_context ctx;
	auto msg = [&](const iovec *iov, size_t n, const fi_rma_iov *rma, size_t rn) {
		fi_msg_rma m{};
		m.msg_iov = iov;
		m.iov_count = n;
		m.addr = to;
		m.rma_iov = rma;
		m.rma_iov_count = rn;
		m.context = &ctx;
		return m;
	};

	// NULL buffers with a length.
	expect_rc(fi_write(a.ep, nullptr, 64, nullptr, to, r.addr(), r.key(), &ctx), -FI_EINVAL, "fi_write from NULL");
	expect_rc(fi_read(a.ep, nullptr, 64, nullptr, to, r.addr(), r.key(), &ctx), -FI_EINVAL, "fi_read into NULL");
	expect_rc(fi_inject_write(a.ep, nullptr, 8, to, r.addr(), r.key()), -FI_EINVAL, "fi_inject_write from NULL");
	expect_rc(fi_writedata(a.ep, nullptr, 64, nullptr, 1, to, r.addr(), r.key(), &ctx), -FI_EINVAL,
		  "fi_writedata from NULL");
	{
		iovec iov[2] = {{src.data(), 32}, {nullptr, 32}};
		expect_rc(fi_writev(a.ep, iov, nullptr, 2, to, r.addr(), r.key(), &ctx), -FI_EINVAL,
			  "fi_writev with a NULL piece of 32 bytes");
		iov[0].iov_base = back.data();
		expect_rc(fi_readv(a.ep, iov, nullptr, 2, to, r.addr(), r.key(), &ctx), -FI_EINVAL,
			  "fi_readv with a NULL piece of 32 bytes");
	}
	// More local pieces than iov_limit.
	{
		std::vector<iovec> iov(iov_limit + 1);
		for (size_t k = 0; k < iov.size(); k++)
			iov[k] = {src.data() + k * 16, 16};
		expect_rc(fi_writev(a.ep, iov.data(), nullptr, iov.size(), to, r.addr(), r.key(), &ctx), -FI_EINVAL,
			  "fi_writev beyond iov_limit");
		fi_rma_iov rma{r.addr(), 16 * iov.size(), r.key()};
		fi_msg_rma m = msg(iov.data(), iov.size(), &rma, 1);
		expect_rc(fi_writemsg(a.ep, &m, FI_COMPLETION), -FI_EINVAL, "fi_writemsg beyond iov_limit");
		for (size_t k = 0; k < iov.size(); k++)
			iov[k] = {back.data() + k * 16, 16};
		expect_rc(fi_readv(a.ep, iov.data(), nullptr, iov.size(), to, r.addr(), r.key(), &ctx), -FI_EINVAL,
			  "fi_readv beyond iov_limit");
		expect_rc(fi_readmsg(a.ep, &m, FI_COMPLETION), -FI_EINVAL, "fi_readmsg beyond iov_limit");
	}
	// No remote segment, more than rma_iov_limit.
	{
		iovec iov{src.data(), 64};
		fi_rma_iov one{r.addr(), 64, r.key()};
		fi_msg_rma m = msg(&iov, 1, &one, 0);
		expect_rc(fi_writemsg(a.ep, &m, FI_COMPLETION), -FI_EINVAL, "fi_writemsg with rma_iov_count 0");
		iov.iov_base = back.data();
		expect_rc(fi_readmsg(a.ep, &m, FI_COMPLETION), -FI_EINVAL, "fi_readmsg with rma_iov_count 0");
		std::vector<fi_rma_iov> rma(rma_limit + 1);
		for (size_t k = 0; k < rma.size(); k++)
			rma[k] = {r.addr(k * 32), 16, r.key()};
		iov = {src.data(), 16 * rma.size()};
		m = msg(&iov, 1, rma.data(), rma.size());
		expect_rc(fi_writemsg(a.ep, &m, FI_COMPLETION), -FI_EINVAL, "fi_writemsg beyond rma_iov_limit");
		iov.iov_base = back.data();
		expect_rc(fi_readmsg(a.ep, &m, FI_COMPLETION), -FI_EINVAL, "fi_readmsg beyond rma_iov_limit");
	}
	// More local bytes than the remote segments hold.
	{
		iovec iov{src.data(), 128};
		fi_rma_iov rma{r.addr(), 64, r.key()};
		fi_msg_rma m = msg(&iov, 1, &rma, 1);
		expect_rc(fi_writemsg(a.ep, &m, FI_COMPLETION), -FI_EINVAL, "fi_writemsg of 128 bytes into 64");
		iov.iov_base = back.data();
		expect_rc(fi_readmsg(a.ep, &m, FI_COMPLETION), -FI_EINVAL, "fi_readmsg of 64 bytes into 128");
		iovec three[3] = {{src.data(), 50}, {src.data() + 100, 50}, {src.data() + 200, 50}};
		fi_rma_iov two[2] = {{r.addr(0), 64, r.key()}, {r.addr(1024), 64, r.key()}};
		m = msg(three, 3, two, 2);
		expect_rc(fi_writemsg(a.ep, &m, FI_COMPLETION), -FI_EINVAL, "fi_writemsg of 3 x 50 bytes into 2 x 64");
	}
	// Flags.
	{
		iovec iov{src.data(), 64};
		fi_rma_iov rma{r.addr(), 64, r.key()};
		fi_msg_rma m = msg(&iov, 1, &rma, 1);
		expect_rc(fi_writemsg(a.ep, &m, FI_COMMIT_COMPLETE | FI_COMPLETION), -FI_EBADFLAGS,
			  "fi_writemsg(FI_COMMIT_COMPLETE)");
		expect_rc(fi_writemsg(a.ep, &m, FI_MULTI_RECV | FI_COMPLETION), -FI_EBADFLAGS,
			  "fi_writemsg with an unknown flag (FI_MULTI_RECV)");
		iov.iov_base = back.data();
		expect_rc(fi_readmsg(a.ep, &m, FI_INJECT | FI_COMPLETION), -FI_EINVAL, "fi_readmsg(FI_INJECT)");
		expect_rc(fi_readmsg(a.ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION), -FI_EINVAL,
			  "fi_readmsg(FI_REMOTE_CQ_DATA)");
		expect_rc(fi_readmsg(a.ep, &m, FI_MULTI_RECV | FI_COMPLETION), -FI_EBADFLAGS,
			  "fi_readmsg with an unknown flag (FI_MULTI_RECV)");
	}
	// Injection beyond inject_size.
	{
		std::vector<uint8_t> big(inj + 1);
		fill_pattern(big.data(), big.size(), 171);
		expect_rc(fi_inject_write(a.ep, big.data(), inj + 1, to, r.addr(), r.key()), -FI_EINVAL,
			  "fi_inject_write of inject_size + 1 bytes");
		expect_rc(fi_inject_writedata(a.ep, big.data(), inj + 1, 5, to, r.addr(), r.key()), -FI_EINVAL,
			  "fi_inject_writedata of inject_size + 1 bytes");
	}

	// Nothing was posted.
	expect_none(a, 300, "refused calls");
	expect_none(b, 100, "the target of refused calls");
	r.check("after the refused calls");
	expect_filled(back.data(), back.size(), kSentinel, "the read buffer after the refused calls");
	ck_assert_uint_eq(fi_cntr_read(a.write_cntr), 0);
	ck_assert_uint_eq(fi_cntr_read(a.read_cntr), 0);
	ck_assert_uint_eq(fi_cntr_readerr(a.write_cntr), 0);
	ck_assert_uint_eq(fi_cntr_readerr(a.read_cntr), 0);
	// The endpoint goes on: one good write, alone.
	post([&] { return fi_write(a.ep, src.data(), 64, nullptr, to, r.addr(), r.key(), &ctx); }, "the good write");
	expect_ok(a, &ctx, kWriteDone, "the good write after refused calls");
	r.expect(0, 64, 170);
	r.await("the good write after refused calls");
	expect_cntr(a.write_cntr, 1, "FI_WRITE counter after refused calls");
	ck_assert_uint_eq(fi_cntr_read(a.read_cntr), 0);
	expect_none(a);
	expect_none(b);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_rma_keys: scalable keys (mr_mode 0)

// An RdmEnv whose hints take on no registration mode: the domain names
// regions by the application's keys, at offsets.
struct KeyEnv : private OwnedHints, RdmEnv {
	static fi_info *hints()
	{
		fi_info *h = rma_hints(FI_RMA_EVENT);
		h->domain_attr->mr_mode = 0;
		return h;
	}
	KeyEnv() : OwnedHints(hints()), RdmEnv(h)
	{
		ck_assert_int_eq(info->domain_attr->mr_mode, 0);
		ck_assert_uint_eq(info->domain_attr->mr_key_size, 8);
	}
};

// Initiator and target in two domains. The target never calls into
// libfabric while the initiator learns its keys: they are read from its
// table, not asked of its CPU. Then: offsets, keys of 64 bits, several keys
// in one operation, the fast path, a key registered twice refused, RMA
// event counts of a region, and what fails as FI_EACCES without breaking
// anything: an unknown key (then registered: found), a range outside the
// region, a region without the access.
START_TEST(rdm_rma_scalable_keys)
{
	KeyEnv ti, tt;
	RdmNodeOptions topt;
	topt.remote_write_cntr = true;
	RdmNode a(ti), b(tt, topt);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	constexpr uint64_t kBig = 0x123456789abcdef0ULL;
	Mem r0(64 * KiB), r1(4096), big(MiB), r7(4096);
	r0.reg_key(tt, kRemoteAccess, 0);
	r1.reg_key(tt, FI_REMOTE_READ, 1);
	big.reg_key(tt, kRemoteAccess, kBig);
	// Keys are per domain: key 0 again is refused there, fine in another.
	{
		fid_mr *dup = nullptr;
		uint8_t x[64];
		expect_rc(fi_mr_reg(tt.domain, x, sizeof x, kRemoteAccess, 0, 0, 0, &dup, nullptr), -FI_ENOKEY,
			  "key 0 registered twice in a domain");
		ck_assert_int_eq(fi_mr_reg(ti.domain, x, sizeof x, kRemoteAccess, 0, 0, 0, &dup, nullptr), 0);
		ck_assert_int_eq(fi_close(&dup->fid), 0);
		// Local-only registrations publish nothing: their keys may repeat.
		fid_mr *l1 = nullptr, *l2 = nullptr;
		ck_assert_int_eq(fi_mr_reg(tt.domain, x, sizeof x, FI_READ | FI_WRITE, 0, 0, 0, &l1, nullptr), 0);
		ck_assert_int_eq(fi_mr_reg(tt.domain, x, sizeof x, FI_SEND, 0, 0, 0, &l2, nullptr), 0);
		ck_assert_int_eq(fi_close(&l1->fid), 0);
		ck_assert_int_eq(fi_close(&l2->fid), 0);
	}
	Cntr region_writes(tt);
	ck_assert_int_eq(fi_mr_bind(r0.mr, &region_writes.c->fid, FI_REMOTE_WRITE), 0);

	// Passive target: only a progresses (and reads only its own CQ).
	std::vector<uint8_t> src(8 * KiB), back(8 * KiB + kSlack);
	fill_pattern(src.data(), 512, 200);
	fi_context ctx;
	post([&] { return fi_write(a.ep, src.data(), 512, nullptr, to, 100, 0, &ctx); }, "write to key 0 at 100", &a);
	{
		Expected e;
		e.add(&ctx, kWriteDone, "write to key 0 at offset 100, the target passive");
		e.wait_alone({&a});
	}
	r0.expect(100, 512, 200);
	progress_until([&] { return r0.matches(); }, 2000); // the data landed before the completion
	r0.check("write to key 0 at offset 100");
	// The key is known now: an inline write takes the fast path.
	fill_pattern(src.data(), 8, 201);
	post([&] { return fi_inject_write(a.ep, src.data(), 8, to, 64 * KiB - 8, 0); }, "inject to the last 8 bytes of key 0");
	r0.expect(64 * KiB - 8, 8, 201);
	r0.await("inject to the last 8 bytes of key 0");
	// A 64-bit key, a read back.
	big.put(MiB - 4096, 4096, 202);
	post([&] { return fi_read(a.ep, back.data(), 4096, nullptr, to, MiB - 4096, kBig, &ctx); }, "read from the 64-bit key");
	expect_ok(a, &ctx, kReadDone, "read from the 64-bit key");
	expect_pattern(back.data(), 4096, 202, "read from the 64-bit key");
	// Three remote segments over two keys, one operation.
	{
		fill_pattern(src.data(), 3000, 203);
		const iovec iov{src.data(), 3000};
		const fi_rma_iov rma[3] = {{0, 1000, 0}, {4096, 1000, kBig}, {2000, 1000, 0}};
		fi_msg_rma m{};
		m.msg_iov = &iov;
		m.iov_count = 1;
		m.addr = to;
		m.rma_iov = rma;
		m.rma_iov_count = 3;
		m.context = &ctx;
		post([&] { return fi_writemsg(a.ep, &m, FI_COMPLETION | FI_DELIVERY_COMPLETE); }, "writemsg over keys 0, big, 0");
		expect_ok(a, &ctx, kWriteDone, "writemsg over keys 0, big, 0");
		r0.expect(0, 1000, 203);
		big.expect(4096, 1000, 203, 1000);
		r0.expect(2000, 1000, 203, 2000);
		r0.check("writemsg over keys 0, big, 0 (delivery complete)");
		big.check("writemsg over keys 0, big, 0 (delivery complete)");
	}
	// The region's own RMA event counter: three operations wrote to key 0.
	expect_cntr(region_writes.c, 3, "FI_REMOTE_WRITE counter bound to key 0");

	// Refusals: each an error entry FI_EACCES, nothing written, and the
	// good write after it works on the same connection.
	struct Case {
		const char *what;
		uint64_t off, key;
		size_t len;
	};
	const Case cases[] = {
		{"an unknown key", 0, 7, 64},
		{"a range past the region's end", 64 * KiB - 10, 0, 20},
		{"a key with no FI_REMOTE_WRITE", 0, 1, 64},
		{"an offset far beyond the region", ~0ULL - 8, kBig, 64},
	};
	uint32_t seed = 210;
	for (const Case &c : cases) {
		char what[96];
		snprintf(what, sizeof what, "write to %s", c.what);
		post([&] { return fi_write(a.ep, src.data(), c.len, nullptr, to, c.off, c.key, &ctx); }, what);
		expect_err(a, &ctx, FI_EACCES, what);
		r0.check(what);
		r1.check(what);
		big.check(what);
		fill_pattern(src.data(), 256, seed);
		snprintf(what, sizeof what, "the good write after a write to %s", c.what);
		post([&] { return fi_write(a.ep, src.data(), 256, nullptr, to, 8192, kBig, &ctx); }, what);
		expect_ok(a, &ctx, kWriteDone, what);
		big.expect(8192, 256, seed++);
		big.await(what);
	}
	// A read of the read-only key works.
	r1.put(0, 128, 220);
	post([&] { return fi_read(a.ep, back.data(), 128, nullptr, to, 0, 1, &ctx); }, "read from key 1");
	expect_ok(a, &ctx, kReadDone, "read from key 1");
	expect_pattern(back.data(), 128, 220, "read from key 1");
	// Key 7 registered now: the failure was not remembered.
	r7.reg_key(tt, kRemoteAccess, 7);
	fill_pattern(src.data(), 64, 221);
	post([&] { return fi_write(a.ep, src.data(), 64, nullptr, to, 32, 7, &ctx); }, "write to key 7 once registered");
	expect_ok(a, &ctx, kWriteDone, "write to key 7 once registered");
	r7.expect(32, 64, 221);
	r7.await("write to key 7 once registered");
	expect_cntr(region_writes.c, 3, "key 0's counter after writes elsewhere");
	expect_none(a);
	expect_none(b, 100, "the target of scalable-key RMA");
	r0.close_mr(); // before its counter
}
END_TEST

// A key closed and registered again over other memory: the initiator's
// cached device key is stale. The first write fails (remote access error:
// nothing lands anywhere), the connection is made again, and the next write
// reaches the new region.
START_TEST(rdm_rma_scalable_key_reregistered)
{
	KeyEnv ti, tt;
	RdmNode a(ti), b(tt);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Mem old_mem(4096), new_mem(4096);
	old_mem.reg_key(tt, kRemoteAccess, 5);
	std::vector<uint8_t> src(256);
	fill_pattern(src.data(), 256, 230);
	fi_context ctx;
	post([&] { return fi_write(a.ep, src.data(), 256, nullptr, to, 0, 5, &ctx); }, "write to key 5");
	expect_ok(a, &ctx, kWriteDone, "write to key 5");
	old_mem.expect(0, 256, 230);
	old_mem.await("write to key 5");

	old_mem.close_mr();
	new_mem.reg_key(tt, kRemoteAccess, 5);
	fill_pattern(src.data(), 256, 231);
	post([&] { return fi_write(a.ep, src.data(), 256, nullptr, to, 0, 5, &ctx); }, "write with a stale key 5");
	fi_cq_err_entry err = expect_err(a, &ctx, 0, "write with a stale key 5");
	ck_assert_msg(err.err == FI_EACCES || err.err == FI_EIO, "stale key: err %d (%s)", err.err, fi_strerror(err.err));
	settle(200);
	old_mem.check("write with a stale key 5");
	new_mem.check("write with a stale key 5");
	post([&] { return fi_write(a.ep, src.data(), 256, nullptr, to, 0, 5, &ctx); }, "write to key 5 read again");
	expect_ok(a, &ctx, kWriteDone, "write to key 5 read again");
	new_mem.expect(0, 256, 231);
	new_mem.await("write to key 5 read again");
	old_mem.check("write to key 5 read again");
}
END_TEST

// Provider keys and scalable keys do not mix: a MSG endpoint with RMA in a
// scalable-key domain is refused, and a scalable-key initiator meeting a
// provider-key target gets FI_EACCES.
START_TEST(rdm_rma_scalable_keys_mismatch)
{
	KeyEnv ti;
	RmaEnv tp;
	RdmNode a(ti), b(tp);
	connect_all({&a, &b});
	Mem r(4096);
	r.reg(tp, kRemoteAccess);
	std::vector<uint8_t> src(64, 1);
	fi_context ctx;
	post([&] { return fi_write(a.ep, src.data(), 64, nullptr, a.addr_of(b), 0, r.key(), &ctx); },
	     "scalable-key write to a provider-key peer");
	expect_err(a, &ctx, FI_EACCES, "scalable-key write to a provider-key peer");
	r.check("scalable-key write to a provider-key peer");

	fi_info *mh = base_hints();
	mh->caps = FI_MSG | FI_RMA;
	fi_info *msg = get_info(mh, kRdmNodeAddr);
	fid_ep *ep = nullptr;
	expect_rc(fi_endpoint(ti.domain, msg, &ep, nullptr), -FI_EINVAL, "a MSG endpoint with RMA in a scalable-key domain");
	fi_freeinfo(msg);
	fi_freeinfo(mh);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_rma_commit: FI_COMMIT_COMPLETE on FI_RMA_PMEM endpoints

namespace {

fi_vrma_commit_stats commit_stats(RdmEnv &env) { return vrma_commit_stats(env.domain); }

// What the target's commit counters moved by.
struct CommitDelta {
	uint64_t requests, ranges, bytes, msyncs, flushes, failures;
};
CommitDelta delta(const fi_vrma_commit_stats &a, const fi_vrma_commit_stats &b)
{
	return {b.requests - a.requests, b.ranges - a.ranges,	    b.bytes - a.bytes,
		b.msync_calls - a.msync_calls, b.cache_flushes - a.cache_flushes, b.failures - a.failures};
}
void expect_delta(const CommitDelta &d, const CommitDelta &want, const char *what)
{
	ck_assert_msg(d.requests == want.requests && d.ranges == want.ranges && d.bytes == want.bytes &&
			      d.msyncs == want.msyncs && d.flushes == want.flushes && d.failures == want.failures,
		      "%s: the target's commit counters moved by requests %" PRIu64 " ranges %" PRIu64 " bytes %" PRIu64
		      " msync %" PRIu64 " flushes %" PRIu64 " failures %" PRIu64 "; expected %" PRIu64 " %" PRIu64
		      " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
		      what, d.requests, d.ranges, d.bytes, d.msyncs, d.flushes, d.failures, want.requests, want.ranges,
		      want.bytes, want.msyncs, want.flushes, want.failures);
}

// The pattern must be in the file, read through the file.
void expect_file(const FileMapping &f, size_t off, size_t n, uint32_t seed, const char *what, size_t from = 0)
{
	const std::vector<uint8_t> got = f.file_bytes(off, n);
	expect_pattern(got.data(), n, seed, what, from);
}

// An RMA env whose endpoints have FI_RMA_PMEM (and FI_RMA_EVENT), and
// optionally a default FI_COMMIT_COMPLETE (then RMA only).
struct PmemEnv : private OwnedHints, RdmEnv {
	static fi_info *hints(bool default_commit)
	{
		fi_info *h = rma_hints(FI_RMA_PMEM | FI_RMA_EVENT);
		if (default_commit) {
			h->caps = kRmaCaps | FI_RMA_PMEM;
			h->tx_attr->op_flags = FI_COMMIT_COMPLETE;
		}
		return h;
	}
	explicit PmemEnv(bool default_commit = false) : OwnedHints(hints(default_commit)), RdmEnv(h)
	{
		ck_assert_msg(info->caps & FI_RMA_PMEM, "the native RDM entry lacks FI_RMA_PMEM: caps 0x%" PRIx64,
			      info->caps);
	}
};

fi_msg_rma rma_msg(iovec *iov, size_t count, fi_rma_iov *rma, size_t rma_count, fi_addr_t to, void *ctx,
		   uint64_t data = 0)
{
	fi_msg_rma m{};
	m.msg_iov = iov;
	m.iov_count = count;
	m.addr = to;
	m.rma_iov = rma;
	m.rma_iov_count = rma_count;
	m.context = ctx;
	m.data = data;
	return m;
}

// Reads only n's CQ for ms: nothing may arrive (the others make no
// progress meanwhile).
void expect_none_alone(RdmNode &n, int ms, const char *what)
{
	const Deadline d(ms);
	while (!d.expired()) {
		n.poll();
		ck_assert_msg(n.backlog.empty(), "%s: %s", what, n.backlog.front().describe().c_str());
		std::this_thread::sleep_for(std::chrono::milliseconds(5));
	}
}

} // namespace

// FI_RMA_PMEM is offered on the native RDM entry when asked for; a default
// FI_COMMIT_COMPLETE makes an RMA-only entry, and is declined with
// messages or atomics, and without FI_RMA_PMEM.
START_TEST(rdm_rma_commit_getinfo)
{
	auto native = [](fi_info *h) -> fi_info * {
		fi_info *list = nullptr;
		const int rc = fi_getinfo(FI_VERSION(1, 17), kRdmNodeAddr, nullptr, FI_SOURCE, h, &list);
		fi_info *out = rc == 0 && find_native_rdm(list) ? fi_dupinfo(find_native_rdm(list)) : nullptr;
		fi_freeinfo(list);
		fi_freeinfo(h);
		return out;
	};
	fi_info *plain = native(rma_hints());
	ck_assert_ptr_nonnull(plain);
	ck_assert_msg(!(plain->caps & FI_RMA_PMEM), "FI_RMA_PMEM offered unasked");
	fi_freeinfo(plain);
	fi_info *pmem = native(rma_hints(FI_RMA_PMEM));
	ck_assert_ptr_nonnull(pmem);
	ck_assert(pmem->caps & FI_RMA_PMEM);
	ck_assert(pmem->caps & FI_MSG); // per-operation commits go with messages
	fi_freeinfo(pmem);

	fi_info *h = rma_hints(FI_RMA_PMEM);
	h->caps = kRmaCaps | FI_RMA_PMEM;
	h->tx_attr->op_flags = FI_COMMIT_COMPLETE;
	fi_info *def = native(h);
	ck_assert_ptr_nonnull(def);
	ck_assert_uint_eq(def->tx_attr->op_flags & FI_COMMIT_COMPLETE, FI_COMMIT_COMPLETE);
	ck_assert_msg(!(def->caps & (FI_MSG | FI_TAGGED | FI_ATOMIC)), "caps 0x%" PRIx64, def->caps);
	fi_freeinfo(def);
	h = rma_hints(FI_RMA_PMEM); // with FI_MSG
	h->tx_attr->op_flags = FI_COMMIT_COMPLETE;
	ck_assert_ptr_null(native(h));
	h = rma_hints();
	h->caps = kRmaCaps; // no FI_RMA_PMEM
	h->tx_attr->op_flags = FI_COMMIT_COMPLETE;
	ck_assert_ptr_null(native(h));
}
END_TEST

// Commits into a file mapping (msync) and anonymous memory (cache flush):
// the completion comes after the target persisted every range written;
// gather and scatter, remote CQ data and RMA events ride on the request;
// inject, registration by vrma (desc NULL, 1 MiB), a zero-length write, a
// read with the flag, and a default FI_COMMIT_COMPLETE.
START_TEST(rdm_rma_commit_data)
{
	PmemEnv env;
	RdmNodeOptions topt;
	topt.remote_write_cntr = true;
	RdmNode a(env), b(env, topt);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	FileMapping f(env.domain, 4 * MiB, kRemoteAccess);
	Mem anon(64 * KiB), src(2 * MiB), back(4096 + kSlack);
	anon.reg(env, kRemoteAccess);
	uint64_t writes = 0;
	fi_context ctx;

	// 4 KiB into the file.
	fi_vrma_commit_stats before = commit_stats(env);
	fill_pattern(src.p, 4096, 1);
	post([&] { return writemsg1(a, to, src.p, 4096, nullptr, anon, 0, FI_COMPLETION, &ctx); }, "warm-up");
	expect_ok(a, &ctx, kWriteDone, "warm-up write");
	anon.expect(0, 4096, 1);
	anon.await("warm-up write");
	writes++;
	{
		iovec iov{src.p, 4096};
		fi_rma_iov rma{f.addr(8192), 4096, f.key()};
		fi_msg_rma m = rma_msg(&iov, 1, &rma, 1, to, &ctx);
		before = commit_stats(env);
		post([&] { return fi_writemsg(a.ep, &m, FI_COMMIT_COMPLETE | FI_COMPLETION); }, "commit 4 KiB to a file");
		expect_ok(a, &ctx, kWriteDone, "commit 4 KiB to a file");
		writes++;
		expect_delta(delta(before, commit_stats(env)), {1, 1, 4096, 1, 0, 0}, "commit 4 KiB to a file");
		expect_file(f, 8192, 4096, 1, "commit 4 KiB to a file: the file");
	}
	// Three local pieces into three ranges of the file, with CQ data.
	{
		fill_pattern(src.p, 3000, 2);
		iovec iov[3] = {{src.p, 1000}, {src.p + 1000, 1000}, {src.p + 2000, 1000}};
		fi_rma_iov rma[3] = {{f.addr(0), 500, f.key()}, {f.addr(MiB), 1500, f.key()}, {f.addr(3 * MiB), 1000, f.key()}};
		fi_msg_rma m = rma_msg(iov, 3, rma, 3, to, &ctx, 0xfedcba9876543210ULL);
		before = commit_stats(env);
		post([&] { return fi_writemsg(a.ep, &m, FI_COMMIT_COMPLETE | FI_REMOTE_CQ_DATA | FI_COMPLETION); },
		     "commit 3 ranges with CQ data");
		expect_ok(a, &ctx, kWriteDone, "commit 3 ranges with CQ data");
		writes++;
		expect_delta(delta(before, commit_stats(env)), {1, 3, 3000, 3, 0, 0}, "commit 3 ranges");
		expect_file(f, 0, 500, 2, "commit 3 ranges: range 1");
		expect_file(f, MiB, 1500, 2, "commit 3 ranges: range 2", 500);
		expect_file(f, 3 * MiB, 1000, 2, "commit 3 ranges: range 3", 2000);
		Completion c = expect_ok(b, nullptr, kRemoteData, "commit 3 ranges: the target's CQ data");
		ck_assert_uint_eq(c.e.data, 0xfedcba9876543210ULL);
		ck_assert_uint_eq(c.e.len, 3000);
		ck_assert_uint_eq(c.src, b.addr_of(a));
	}
	// Anonymous memory: a cache flush; 1 MiB from memory vrma registers.
	{
		fill_pattern(src.p, MiB, 3);
		iovec iov{src.p, MiB};
		fi_rma_iov rma{anon.addr(0), 64 * KiB, anon.key()};
		iov.iov_len = 64 * KiB;
		fi_msg_rma m = rma_msg(&iov, 1, &rma, 1, to, &ctx);
		before = commit_stats(env);
		post([&] { return fi_writemsg(a.ep, &m, FI_COMMIT_COMPLETE | FI_COMPLETION); }, "commit 64 KiB to memory");
		expect_ok(a, &ctx, kWriteDone, "commit 64 KiB to memory");
		writes++;
		expect_delta(delta(before, commit_stats(env)), {1, 1, 64 * KiB, 0, 1, 0}, "commit 64 KiB to memory");
		anon.expect(0, 64 * KiB, 3);
		anon.check("commit 64 KiB to memory");
		fi_rma_iov frma{f.addr(2 * MiB), MiB, f.key()};
		iov.iov_len = MiB;
		m = rma_msg(&iov, 1, &frma, 1, to, &ctx);
		post([&] { return fi_writemsg(a.ep, &m, FI_COMMIT_COMPLETE | FI_COMPLETION); }, "commit 1 MiB to the file");
		expect_ok(a, &ctx, kWriteDone, "commit 1 MiB to the file");
		writes++;
		expect_file(f, 2 * MiB, MiB, 3, "commit 1 MiB to the file");
	}
	// FI_INJECT: the data is copied at once, committed all the same.
	{
		fill_pattern(src.p, 16, 4);
		iovec iov{src.p, 16};
		fi_rma_iov rma{f.addr(4 * MiB - 16), 16, f.key()};
		fi_msg_rma m = rma_msg(&iov, 1, &rma, 1, to, &ctx);
		before = commit_stats(env);
		post([&] { return fi_writemsg(a.ep, &m, FI_COMMIT_COMPLETE | FI_INJECT | FI_COMPLETION); },
		     "inject with commit");
		fill_pattern(src.p, 16, 99); // the inject copied its data
		expect_ok(a, &ctx, kWriteDone, "inject with commit");
		writes++;
		expect_delta(delta(before, commit_stats(env)), {1, 1, 16, 1, 0, 0}, "inject with commit");
		expect_file(f, 4 * MiB - 16, 16, 4, "inject with commit");
	}
	// A zero-length commit and a read with the flag: nothing to persist.
	{
		before = commit_stats(env);
		post([&] { return writemsg1(a, to, src.p, 0, nullptr, anon, 0, FI_COMMIT_COMPLETE | FI_COMPLETION, &ctx); },
		     "zero-length commit");
		expect_ok(a, &ctx, kWriteDone, "zero-length commit");
		writes++;
		anon.put(0, 4096, 5);
		post([&] { return readmsg1(a, to, back.p, 4096, nullptr, anon, 0, FI_COMMIT_COMPLETE | FI_COMPLETION, &ctx); },
		     "read with FI_COMMIT_COMPLETE");
		expect_ok(a, &ctx, kReadDone, "read with FI_COMMIT_COMPLETE");
		expect_pattern(back.p, 4096, 5, "read with FI_COMMIT_COMPLETE");
		expect_delta(delta(before, commit_stats(env)), {0, 0, 0, 0, 0, 0}, "a zero-length commit and a read");
	}
	// Every write counted once at the target (events ride on the requests).
	expect_cntr(b.remote_write_cntr, writes, "the target's FI_REMOTE_WRITE counter");

	// A default FI_COMMIT_COMPLETE: plain fi_write commits.
	PmemEnv denv(true);
	RdmNode c(denv), d(denv);
	connect_all({&c, &d});
	FileMapping g(denv.domain, 64 * KiB, kRemoteAccess);
	fill_pattern(src.p, 256, 6);
	before = commit_stats(denv);
	post([&] { return fi_write(c.ep, src.p, 256, nullptr, c.addr_of(d), g.addr(512), g.key(), &ctx); },
	     "fi_write with a default FI_COMMIT_COMPLETE");
	expect_ok(c, &ctx, kWriteDone, "fi_write with a default FI_COMMIT_COMPLETE");
	expect_delta(delta(before, commit_stats(denv)), {1, 1, 256, 1, 0, 0}, "fi_write with a default commit");
	expect_file(g, 512, 256, 6, "fi_write with a default FI_COMMIT_COMPLETE");
}
END_TEST

// The completion waits for the target: while the target makes no progress
// (FI_PROGRESS_MANUAL, it never calls in) a commit does not complete,
// though a delivery-complete write beside it does; the target's first
// progress answers it. A target whose writes land in its persistence
// domain (set_direct_write_to_pmem) needs no progress: a read-back proves
// them.
START_TEST(rdm_rma_commit_waits)
{
	PmemEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Mem r(64 * KiB), src(64 * KiB);
	r.reg(env, kRemoteAccess);
	fi_context warm, dc, cc;
	// Connected first (both sides progress).
	fill_pattern(src.p, 8, 0);
	post([&] { return writemsg1(a, to, src.p, 8, nullptr, r, 0, FI_COMPLETION, &warm); }, "warm-up");
	expect_ok(a, &warm, kWriteDone, "warm-up");
	r.expect(0, 8, 0);
	r.await("warm-up");

	fi_vrma_commit_stats before = commit_stats(env);
	fill_pattern(src.p, 4096, 7);
	post([&] { return writemsg1(a, to, src.p, 4096, nullptr, r, 4096, FI_COMMIT_COMPLETE | FI_COMPLETION, &cc); },
	     "commit", &a);
	post([&] { return writemsg1(a, to, src.p, 4096, nullptr, r, 8192, FI_DELIVERY_COMPLETE | FI_COMPLETION, &dc); },
	     "delivery complete", &a);
	{
		Expected e;
		e.add(&dc, kWriteDone, "the delivery-complete write, the target passive");
		e.wait_alone({&a});
	}
	expect_none_alone(a, 500, "the commit while the target makes no progress");
	expect_delta(delta(before, commit_stats(env)), {0, 0, 0, 0, 0, 0}, "a passive target");
	// A fenced operation waits for the commit's answer.
	fi_context fc;
	fill_pattern(src.p + 8192, 64, 70);
	expect_rc(writemsg1(a, to, src.p + 8192, 64, nullptr, r, 16384, FI_FENCE | FI_COMPLETION, &fc), -FI_EAGAIN,
		  "a fenced write behind an unanswered commit");
	expect_ok(a, &cc, kWriteDone, "the commit once the target progresses");
	post([&] { return writemsg1(a, to, src.p + 8192, 64, nullptr, r, 16384, FI_FENCE | FI_COMPLETION, &fc); },
	     "the fenced write after the commit");
	expect_ok(a, &fc, kWriteDone, "the fenced write after the commit");
	r.expect(16384, 64, 70);
	expect_delta(delta(before, commit_stats(env)), {1, 1, 4096, 0, 1, 0}, "the commit served");
	r.expect(4096, 4096, 7);
	r.expect(8192, 4096, 7);
	r.check("commit and delivery");

	// Direct write to pmem, declared before the connection: no request.
	PmemEnv denv;
	ck_assert_int_eq(vrma_domain_ops(denv.domain)->set_direct_write_to_pmem(denv.domain, 1), 0);
	RdmNode c(env), d(denv);
	connect_all({&c, &d});
	Mem dr(4096);
	dr.reg(denv, kRemoteAccess);
	post([&] { return writemsg1(c, c.addr_of(d), src.p, 8, nullptr, dr, 0, FI_COMPLETION, &warm); }, "warm-up d");
	expect_ok(c, &warm, kWriteDone, "warm-up d");
	before = commit_stats(denv);
	fill_pattern(src.p, 512, 8);
	post([&] { return writemsg1(c, c.addr_of(d), src.p, 512, nullptr, dr, 1024, FI_COMMIT_COMPLETE | FI_COMPLETION, &cc); },
	     "commit to a direct-write target", &c);
	{
		Expected e;
		e.add(&cc, kWriteDone, "commit to a direct-write target, the target passive");
		e.wait_alone({&c});
	}
	dr.expect(0, 8, 7);
	dr.expect(1024, 512, 8);
	dr.check("commit to a direct-write target");
	expect_delta(delta(before, commit_stats(denv)), {0, 0, 0, 0, 0, 0}, "a direct-write target");
}
END_TEST

// What fails: FI_COMMIT_COMPLETE without FI_RMA_PMEM (refused at once), to
// a peer that is no FI_RMA_PMEM endpoint (-FI_EOPNOTSUPP), to a key the
// target lacks (one FI_EACCES error entry, then the next commit works), and
// a commit whose target goes away before it answers: one error entry,
// nothing lost.
// Regions registered with FI_RMA_PMEM (their backing found at
// registration): a commit into a file mapping is made durable with msync,
// one into anonymous memory (accepted with a warning that it does not
// survive a crash) with a cache write-back; both complete once persisted,
// the bytes in place and nothing around them touched. An unknown flag
// beside FI_RMA_PMEM is refused.
START_TEST(rdm_rma_commit_pmem_regions)
{
	PmemEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	FileMapping f(env.domain, 64 * KiB, kRemoteAccess, FI_RMA_PMEM);
	Mem anon(16 * KiB), src(16 * KiB);
	anon.reg(env, kRemoteAccess, FI_RMA_PMEM);
	fi_context ctx;
	fill_pattern(src.p, 12000, 11);
	iovec iov{src.p, 12000};
	fi_rma_iov rma{f.addr(1000), 12000, f.key()};
	fi_msg_rma m = rma_msg(&iov, 1, &rma, 1, to, &ctx);
	fi_vrma_commit_stats before = commit_stats(env);
	post([&] { return fi_writemsg(a.ep, &m, FI_COMMIT_COMPLETE | FI_COMPLETION); }, "commit into an FI_RMA_PMEM file");
	expect_ok(a, &ctx, kWriteDone, "commit into an FI_RMA_PMEM file");
	expect_delta(delta(before, commit_stats(env)), {1, 1, 12000, 1, 0, 0}, "commit into an FI_RMA_PMEM file");
	expect_file(f, 1000, 12000, 11, "commit into an FI_RMA_PMEM file");

	fill_pattern(src.p, 16 * KiB, 12);
	iov.iov_len = 10000;
	rma = {anon.addr(4096), 10000, anon.key()};
	before = commit_stats(env);
	post([&] { return fi_writemsg(a.ep, &m, FI_COMMIT_COMPLETE | FI_COMPLETION); },
	     "commit into FI_RMA_PMEM anonymous memory");
	expect_ok(a, &ctx, kWriteDone, "commit into FI_RMA_PMEM anonymous memory");
	expect_delta(delta(before, commit_stats(env)), {1, 1, 10000, 0, 1, 0}, "commit into FI_RMA_PMEM anonymous memory");
	anon.expect(4096, 10000, 12);
	anon.check("commit into FI_RMA_PMEM anonymous memory");

	Mem refused(64);
	expect_rc(fi_mr_reg(env.domain, refused.p, 64, kRemoteAccess, 0, 0, FI_RMA_PMEM | FI_MORE, &refused.mr, nullptr),
		  -FI_EBADFLAGS, "fi_mr_reg with FI_RMA_PMEM and an unknown flag");
	ck_assert_ptr_null(refused.mr);
	expect_none(a, 100, "the initiator");
	expect_none(b, 50, "the target");
}
END_TEST

START_TEST(rdm_rma_commit_errors)
{
	PmemEnv env;
	RmaEnv plain_env;
	RdmNode a(env), b(env), p(plain_env), q(plain_env);
	connect_all({&a, &b, &p, &q});
	Mem r(4096), src(4096), pr(4096);
	r.reg(env, kRemoteAccess);
	pr.reg(plain_env, kRemoteAccess);
	fi_context ctx;
	fill_pattern(src.p, 64, 9);

	expect_rc(writemsg1(p, p.addr_of(q), src.p, 64, nullptr, pr, 0, FI_COMMIT_COMPLETE | FI_COMPLETION, &ctx),
		  -FI_EBADFLAGS, "FI_COMMIT_COMPLETE on an endpoint without FI_RMA_PMEM");
	const ssize_t rc = post_retry(
		[&] { return writemsg1(a, a.addr_of(p), src.p, 64, nullptr, pr, 0, FI_COMMIT_COMPLETE | FI_COMPLETION, &ctx); });
	expect_rc(rc, -FI_EOPNOTSUPP, "FI_COMMIT_COMPLETE to a peer without FI_RMA_PMEM");
	expect_none(a, 100, "the refused commit");
	pr.check("the refused commit");

	// A key the target does not have.
	post([&] {
		iovec iov{src.p, 64};
		fi_rma_iov rma{r.addr(), 64, r.key() ^ 0x5a};
		fi_msg_rma m = rma_msg(&iov, 1, &rma, 1, a.addr_of(b), &ctx);
		return fi_writemsg(a.ep, &m, FI_COMMIT_COMPLETE | FI_COMPLETION);
	}, "commit to a key the target lacks");
	expect_err(a, &ctx, FI_EACCES, "commit to a key the target lacks");
	expect_none(a, 300, "a second entry of the failed commit");
	r.check("commit to a key the target lacks");
	post([&] { return writemsg1(a, a.addr_of(b), src.p, 64, nullptr, r, 0, FI_COMMIT_COMPLETE | FI_COMPLETION, &ctx); },
	     "commit after the error");
	expect_ok(a, &ctx, kWriteDone, "commit after the error");
	r.expect(0, 64, 9);
	r.check("commit after the error");

	// The target goes away with the commit unanswered.
	fi_context lost;
	post([&] { return writemsg1(a, a.addr_of(b), src.p, 64, nullptr, r, 64, FI_COMMIT_COMPLETE | FI_COMPLETION, &lost); },
	     "commit to a target about to close", &a);
	expect_none_alone(a, 200, "the commit to a passive target");
	b.close_ep();
	fi_cq_err_entry e = expect_err(a, &lost, 0, "commit whose target closed");
	ck_assert_msg(e.err != 0, "no error code");
	ck_assert_uint_eq(e.flags & kWriteDone, kWriteDone);
	expect_none(a, 300, "a second entry of the lost commit");
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_rma_persist: a slow persist does not stall its endpoint

namespace {

// A block device whose writes each take VRMA_TEST_SLOW_MS (dm-delay over a
// loop device on VRMA_TEST_SLOW_IMG: test/device/run-in-vm.sh makes it),
// mapped shared and registered: msync of its dirty pages waits that long.
struct SlowDevice {
	static const char *env(const char *name)
	{
		const char *v = getenv(name);
		ck_assert_msg(v, "%s unset: VRMA_TEST_SLOW_DEV, VRMA_TEST_SLOW_IMG and VRMA_TEST_SLOW_MS name a block "
				 "device with slow writes and its backing file (test/device/run-in-vm.sh sets them up)",
			      name);
		return v;
	}
	FileMapping map;
	int img;
	int delay_ms;
	SlowDevice(RdmEnv &env_, size_t n, uint64_t access)
		: map(env_.domain, env("VRMA_TEST_SLOW_DEV"), n, access),
		  img(open(env("VRMA_TEST_SLOW_IMG"), O_RDONLY | O_CLOEXEC)), delay_ms(atoi(env("VRMA_TEST_SLOW_MS")))
	{
		ck_assert_msg(img >= 0, "open %s: %s", env("VRMA_TEST_SLOW_IMG"), strerror(errno));
	}
	~SlowDevice() { close(img); }
	SlowDevice(const SlowDevice &) = delete;
	SlowDevice &operator=(const SlowDevice &) = delete;
	// What the device holds, read from its backing file: written there
	// only once the device's delayed writes completed (map.file_bytes
	// would read the device's page cache).
	std::vector<uint8_t> stored(size_t off, size_t n) const
	{
		std::vector<uint8_t> out(n);
		ck_assert_int_eq(pread(img, out.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
		return out;
	}
};

} // namespace

// While the target persists a commit into a device whose writes take
// VRMA_TEST_SLOW_MS, a second peer's messages to the same endpoint keep
// arriving (the persist runs off the endpoint's lock); the commit
// completes only once its bytes are in the device, not before the delay.
START_TEST(rdm_rma_commit_slow_persist)
{
	PmemEnv env;
	RdmNode a(env), b(env), c(env);
	connect_all({&a, &b, &c});
	const fi_addr_t a_to_b = a.addr_of(b), c_to_b = c.addr_of(b);
	SlowDevice dev(env, MiB, kRemoteAccess);
	constexpr size_t kOff = 64 * KiB, kLen = 8 * KiB, kMsg = 64;
	// A pattern the device does not hold yet (an earlier run in this boot
	// left its own there).
	const uint32_t seed = 90 + static_cast<uint32_t>(getpid() % 1000);
	Mem src(kLen);
	fill_pattern(src.p, kLen, seed);
	ck_assert_msg(dev.stored(kOff, kLen) != std::vector<uint8_t>(src.p, src.p + kLen),
		      "the slow device holds the pattern before the commit");
	std::vector<uint8_t> sbuf(kMsg), rbuf(kMsg + kSlack, kSentinel);
	fi_context wctx, sctx, rctx;
	// One message c -> b, its data checked; false once the commit has
	// completed meanwhile (t_done set).
	using clock = std::chrono::steady_clock;
	clock::time_point t_done{};
	std::optional<Completion> commit;
	auto round_trip = [&](size_t i) {
		fill_pattern(sbuf.data(), kMsg, static_cast<uint32_t>(1000 + i));
		ck_assert_int_eq(fi_recv(b.ep, rbuf.data(), kMsg, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
		post([&] { return fi_send(c.ep, sbuf.data(), kMsg, nullptr, c_to_b, &sctx); }, "a message c -> b");
		Expected e;
		e.add(&rctx, FI_RECV | FI_MSG, "message " + std::to_string(i) + " received");
		e.add(&sctx, FI_SEND | FI_MSG, "message " + std::to_string(i) + " sent");
		const Deadline d(kTimeoutMs);
		while (!e.done()) {
			progress_all();
			for (RdmNode *n : {&b, &c})
				for (; !n->backlog.empty(); n->backlog.pop_front()) {
					const Completion &got = n->backlog.front();
					ck_assert_msg(got.context() != &rctx || (got.ok && got.e.len == kMsg), "message %zu: %s", i,
						      got.describe().c_str());
					e.take(got);
				}
			// a has only the commit outstanding.
			if (!commit && !a.backlog.empty()) {
				commit = a.backlog.front();
				a.backlog.pop_front();
				t_done = clock::now();
			}
			ck_assert_msg(!d.expired(), "message %zu: %s missing after %d ms", i, e.missing().c_str(), kTimeoutMs);
		}
		expect_pattern(rbuf.data(), kMsg, static_cast<uint32_t>(1000 + i), "a message c -> b");
		return !commit;
	};
	round_trip(0); // c's connection made, its path warm
	{
		Mem warm(4096);
		warm.reg(env, kRemoteAccess);
		fi_context ctx;
		fill_pattern(src.p, 64, 89);
		post([&] { return writemsg1(a, a_to_b, src.p, 64, nullptr, warm, 0, FI_COMPLETION, &ctx); }, "warm-up a -> b");
		expect_ok(a, &ctx, kWriteDone, "warm-up a -> b");
		warm.expect(0, 64, 89);
		warm.check("warm-up a -> b");
		fill_pattern(src.p, kLen, seed);
	}

	const fi_vrma_commit_stats before = commit_stats(env);
	iovec iov{src.p, kLen};
	fi_rma_iov rma{dev.map.addr(kOff), kLen, dev.map.key()};
	fi_msg_rma m = rma_msg(&iov, 1, &rma, 1, a_to_b, &wctx);
	const clock::time_point t_post = clock::now();
	post([&] { return fi_writemsg(a.ep, &m, FI_COMMIT_COMPLETE | FI_COMPLETION); }, "commit into the slow device");
	size_t during = 0;
	for (size_t i = 1; round_trip(i); i++)
		during++;
	ck_assert_msg(commit->ok && commit->context() == &wctx && commit->e.flags == kWriteDone, "the commit: %s",
		      commit->describe().c_str());
	const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(t_done - t_post).count();
	// Not before the device took the bytes: its writes each wait the delay.
	ck_assert_msg(took >= dev.delay_ms * 3 / 4, "the commit completed after %lld ms; the device's writes take %d ms",
		      static_cast<long long>(took), dev.delay_ms);
	const std::vector<uint8_t> stored = dev.stored(kOff, kLen);
	expect_pattern(stored.data(), kLen, seed, "the committed bytes in the slow device's backing file");
	expect_delta(delta(before, commit_stats(env)), {1, 1, kLen, 1, 0, 0}, "the slow commit");
	// The endpoint kept serving c meanwhile (a persist under its lock
	// would let no message through while the msync runs).
	ck_assert_msg(during >= 10, "only %zu messages reached the target in the %lld ms its commit took", during,
		      static_cast<long long>(took));
	std::printf("rdm_rma_commit_slow_persist: %zu messages in the %lld ms of the commit\n", during,
		    static_cast<long long>(took));
}
END_TEST

Suite *rdm_rma_suite()
{
	Suite *s = suite_create("rdm_rma");
	auto add = [&](const char *name, int timeout, std::initializer_list<const TTest *> tests) {
		rdm_add_tcase(s, name, timeout, tests);
	};
	add("rdm_rma_basic", 30, {rdm_rma_getinfo});
	add("rdm_rma_data", 180,
	    {rdm_rma_write_read_sizes, rdm_rma_vector, rdm_rma_inject, rdm_rma_inject_shared_buffers,
	     rdm_rma_writedata, rdm_rma_loopback, rdm_rma_cq_data_backpressure});
	add("rdm_rma_flags", 120, {rdm_rma_flags});
	add("rdm_rma_events", 90, {rdm_rma_events_two_peers});
	add("rdm_rma_errors", 120, {rdm_rma_remote_errors, rdm_rma_bad_input, rdm_rma_desc_not_covering});
	add("rdm_rma_keys", 120, {rdm_rma_scalable_keys, rdm_rma_scalable_key_reregistered, rdm_rma_scalable_keys_mismatch});
	add("rdm_rma_commit", 120, {rdm_rma_commit_getinfo, rdm_rma_commit_data, rdm_rma_commit_waits,
				    rdm_rma_commit_pmem_regions, rdm_rma_commit_errors});
	add("rdm_rma_persist", 90, {rdm_rma_commit_slow_persist});
	return s;
}
