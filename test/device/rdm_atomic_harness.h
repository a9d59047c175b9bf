// What the device suites on RDM atomics share (rdm_atomic, rdm_atomic_flags):
// the three kinds of atomic call, an RdmEnv whose hints ask for atomics in
// either key mode, a registered target region, and the calls by kind.
#pragma once

#include "rdm_harness.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <span>
#include <vector>

namespace atomic_test {

enum class Kind { Plain, Fetch, Compare };
inline constexpr Kind kKinds[] = {Kind::Plain, Kind::Fetch, Kind::Compare};
inline constexpr uint64_t kAtomicCaps = vt::kRdmCaps | FI_ATOMIC | FI_RMA | FI_READ | FI_WRITE |
					FI_REMOTE_READ | FI_REMOTE_WRITE;
inline constexpr uint64_t kRemote = FI_REMOTE_READ | FI_REMOTE_WRITE;
// Provider keys at virtual addresses; mr_mode 0 is scalable keys.
inline constexpr int kBasicMr = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

// FI_VRMA_RDM_NATIVE_ATOMICS=1 for the provider this test loads: false
// (the test is not run) without a process of its own (check's fork mode).
inline bool with_native_atomics(const char *test)
{
	if (!vt::in_fresh_process(test))
		return false;
	setenv("FI_VRMA_RDM_NATIVE_ATOMICS", "1", 1);
	return true;
}

inline const char *kind_name(Kind k)
{
	return k == Kind::Plain ? "fi_atomic" : k == Kind::Fetch ? "fi_fetch_atomic" : "fi_compare_atomic";
}

// The completion flags of an atomic of kind k at the initiator.
inline uint64_t done_flags(Kind k) { return FI_ATOMIC | (k == Kind::Plain ? FI_WRITE : FI_READ); }

struct Hints {
	fi_info *h;
	explicit Hints(int mr_mode, uint64_t extra_caps) : h(vt::rdm_hints(kAtomicCaps | extra_caps))
	{
		h->domain_attr->mr_mode = mr_mode;
	}
	~Hints() { fi_freeinfo(h); }
	Hints(const Hints &) = delete;
	Hints &operator=(const Hints &) = delete;
};

struct AtomicEnv : private Hints, vt::RdmEnv {
	explicit AtomicEnv(int mr_mode = kBasicMr, uint64_t extra_caps = 0)
		: Hints(mr_mode, extra_caps), RdmEnv(h)
	{
		ck_assert_msg(info->caps & FI_ATOMIC, "caps 0x%" PRIx64 " lack FI_ATOMIC", info->caps);
	}
};

// Canaries on both sides of a Region: `bytes` of `byte` each, in the same
// allocation but outside the registration, that nothing may touch
// (Region::expect_canaries). bytes 0: none.
struct Guard {
	size_t bytes = 0;
	uint8_t byte = 0x5a;
};

// A registered target region of `bytes`, 0xcc everywhere; `key` is the
// requested key (used with scalable keys); `guard`: canaries around it.
struct Region {
	std::vector<uint8_t> storage; // the canaries and the region between them
	std::span<uint8_t> mem;       // the region, registered
	Guard guard;
	fid_mr *mr = nullptr;
	Region(vt::RdmEnv &env, size_t bytes, uint64_t access = kRemote, uint64_t key = 0, Guard g = {})
		: storage(g.bytes + bytes + g.bytes, g.byte), mem(storage.data() + g.bytes, bytes), guard(g)
	{
		std::fill(mem.begin(), mem.end(), 0xcc);
		const int rc = fi_mr_reg(env.domain, mem.data(), bytes, access, 0, key, 0, &mr, nullptr);
		ck_assert_msg(rc == 0, "fi_mr_reg: %d (%s)", rc, fi_strerror(-rc));
	}
	~Region()
	{
		if (mr)
			fi_close(&mr->fid);
	}
	Region(const Region &) = delete;
	Region &operator=(const Region &) = delete;
	uint64_t key() const { return fi_mr_key(mr); }
	uint64_t addr(size_t off) const { return reinterpret_cast<uintptr_t>(mem.data()) + off; }
	// Asserts that both canaries are intact (none: nothing to check).
	void expect_canaries(const char *what) const
	{
		vt::expect_filled(storage.data(), guard.bytes, guard.byte, what);
		vt::expect_filled(storage.data() + guard.bytes + mem.size(), guard.bytes, guard.byte, what);
	}
};

inline void expect_rc(ssize_t rc, ssize_t want, const char *what)
{
	ck_assert_msg(rc == want, "%s: %zd (%s), expected %zd (%s)", what, rc, fi_strerror(static_cast<int>(-rc)),
		      want, fi_strerror(static_cast<int>(-want)));
}

inline int valid(fid_ep *ep, Kind k, int dt, int op, size_t *count)
{
	const auto d = static_cast<fi_datatype>(dt);
	const auto o = static_cast<fi_op>(op);
	return k == Kind::Plain ? fi_atomicvalid(ep, d, o, count)
	       : k == Kind::Fetch ? fi_fetch_atomicvalid(ep, d, o, count)
				  : fi_compare_atomicvalid(ep, d, o, count);
}

// Posts one atomic of `count` elements at remote byte offset off.
inline ssize_t post_atomic(vt::RdmNode &a, fi_addr_t to, const Region &r, size_t off, Kind k, int dt, int op,
			   const void *x, const void *c, void *res, size_t count, void *ctx)
{
	const auto d = static_cast<fi_datatype>(dt);
	const auto o = static_cast<fi_op>(op);
	switch (k) {
	case Kind::Plain:
		return fi_atomic(a.ep, x, count, nullptr, to, r.addr(off), r.key(), d, o, ctx);
	case Kind::Fetch:
		return fi_fetch_atomic(a.ep, op == FI_ATOMIC_READ ? nullptr : x, count, nullptr, res, nullptr, to,
				       r.addr(off), r.key(), d, o, ctx);
	case Kind::Compare:
		return fi_compare_atomic(a.ep, x, count, nullptr, c, nullptr, res, nullptr, to, r.addr(off),
					 r.key(), d, o, ctx);
	}
	return -FI_EINVAL;
}

// The msg form of kind k: fi_atomicmsg, fi_fetch_atomicmsg (results in
// res) or fi_compare_atomicmsg (compare array cmp), with these flags.
inline ssize_t post_atomicmsg(fid_ep *ep, Kind k, const fi_msg_atomic &m, const fi_ioc *cmp, fi_ioc *res,
			      size_t nres, uint64_t flags)
{
	switch (k) {
	case Kind::Plain:
		return fi_atomicmsg(ep, &m, flags);
	case Kind::Fetch:
		return fi_fetch_atomicmsg(ep, &m, res, nullptr, nres, flags);
	case Kind::Compare:
		return fi_compare_atomicmsg(ep, &m, cmp, nullptr, 1, res, nullptr, nres, flags);
	}
	return -FI_EINVAL;
}

} // namespace atomic_test
