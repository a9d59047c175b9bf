// Registration on demand on RDM domains (vrma_mr.cpp): a large region that
// is mostly untouched when fi_mr_reg sees it is not registered with the
// device (its memory is not pinned, so not faulted in) until the device
// first needs it: a peer's RDMA (the peer asks with a KeyRequest) or a
// local MSG operation naming its desc. Emulated atomics need no device and
// leave it unregistered.
//
// Each test checks the data moved, the completions, the domain's
// fi_vrma_mr_stats, and which pages of the region are resident (mincore):
// what a registration on demand saves, and that registering it later pins
// it.
// CK_RUN_SUITE=rdm_on_demand.
#include "rdm_harness.h"

#include <utility>

#include <rdma/fi_atomic.h>
#include <rdma/fi_ext_vrma.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace vt;

namespace {

constexpr uint64_t kRmaCaps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint64_t kRemoteAccess = FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint64_t kOnDemandKeyBit = uint64_t(1) << 63;

const char *err_name(ssize_t rc) { return fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)); }

// How many pages of [p, p + len) are resident (mincore); p page aligned.
size_t resident_pages(const void *p, size_t len)
{
	const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
	std::vector<unsigned char> vec((len + page - 1) / page);
	ck_assert_int_eq(mincore(const_cast<void *>(p), len, vec.data()), 0);
	size_t n = 0;
	for (unsigned char v : vec)
		n += v & 1;
	return n;
}

// len bytes of fresh anonymous memory, untouched (no page resident).
struct Untouched {
	uint8_t *p = nullptr;
	size_t len;
	explicit Untouched(size_t n) : len(n)
	{
		void *m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ck_assert_msg(m != MAP_FAILED, "mmap(%zu): %s", n, strerror(errno));
		p = static_cast<uint8_t *>(m);
	}
	~Untouched() { munmap(p, len); }
	Untouched(const Untouched &) = delete;
	Untouched &operator=(const Untouched &) = delete;
	uint64_t addr(size_t off = 0) const { return reinterpret_cast<uintptr_t>(p) + off; }
};

struct OwnedMr {
	fid_mr *mr = nullptr;
	OwnedMr(fid_domain *dom, void *buf, size_t len, uint64_t access, uint64_t key = 0, uint64_t flags = 0)
	{
		const int rc = fi_mr_reg(dom, buf, len, access, 0, key, flags, &mr, nullptr);
		ck_assert_msg(rc == 0, "fi_mr_reg(%zu bytes, access 0x%" PRIx64 "): %d (%s)", len, access, rc,
			      err_name(rc));
	}
	~OwnedMr() { close(); }
	OwnedMr(const OwnedMr &) = delete;
	OwnedMr &operator=(const OwnedMr &) = delete;
	void close()
	{
		if (mr)
			ck_assert_int_eq(fi_close(&mr->fid), 0);
		mr = nullptr;
	}
	uint64_t key() const { return fi_mr_key(mr); }
	void *desc() const { return fi_mr_desc(mr); }
};

fi_vrma_mr_stats mr_stats(fid_domain *dom)
{
	fi_vrma_domain_ops *ops = nullptr;
	ck_assert_int_eq(fi_open_ops(&dom->fid, FI_VRMA_DOMAIN_OPS, 0, reinterpret_cast<void **>(&ops), nullptr), 0);
	ck_assert_uint_ge(ops->size, offsetof(fi_vrma_domain_ops, mr_stats) + sizeof ops->mr_stats);
	fi_vrma_mr_stats st{};
	ck_assert_int_eq(ops->mr_stats(dom, &st), 0);
	return st;
}

void expect_stats(fid_domain *dom, uint64_t on_demand, uint64_t registered, const char *what)
{
	const fi_vrma_mr_stats st = mr_stats(dom);
	ck_assert_msg(st.on_demand == on_demand && st.registered == registered,
		      "%s: %" PRIu64 " regions on demand, %" PRIu64 " registered; expected %" PRIu64 " and %" PRIu64,
		      what, st.on_demand, st.registered, on_demand, registered);
}

// RDM hints with messages, RMA and atomics; mr_mode 0 for scalable keys.
fi_info *env_hints(bool scalable)
{
	fi_info *h = rdm_hints(kRdmCaps | kRmaCaps | FI_ATOMIC | FI_RMA_EVENT);
	if (scalable)
		h->domain_attr->mr_mode = 0;
	return h;
}

struct OdEnv : private OwnedHints, RdmEnv {
	explicit OdEnv(bool scalable = false) : OwnedHints(env_hints(scalable)), RdmEnv(h)
	{
		ck_assert_uint_eq(info->domain_attr->mr_key_size, 8);
	}
};

// An RDMA write then read into a region the target registers on demand,
// at its start, middle and end: the first access registers it (once), the
// data lands and reads back, and only then is its memory resident.
void write_read_on_demand(RdmNode &a, fi_addr_t to, RdmEnv &target, Untouched &r, uint64_t key,
			  uint64_t base, const char *what)
{
	uint8_t src[4096], back[4096 + 64];
	const size_t offs[] = {0, r.len / 2 + 8, r.len - sizeof src};
	uint32_t seed = 11;
	for (size_t off : offs) {
		fill_pattern(src, sizeof src, seed);
		fi_context w, rd;
		post([&] { return fi_write(a.ep, src, sizeof src, nullptr, to, base + off, key, &w); }, what);
		expect_ok(a, &w, FI_RMA | FI_WRITE, what);
		expect_pattern(r.p + off, sizeof src, seed, what);
		memset(back, 0xcc, sizeof back);
		post([&] { return fi_read(a.ep, back, sizeof src, nullptr, to, base + off, key, &rd); }, what);
		expect_ok(a, &rd, FI_RMA | FI_READ, what);
		expect_pattern(back, sizeof src, seed, what);
		expect_filled(back + sizeof src, 64, 0xcc, what);
		seed += 3;
	}
	expect_stats(target.domain, 1, 1, what);
}

// Provider keys: an untouched 8 MiB region gets an on-demand key and costs
// no resident memory until a peer writes into it; the peer's first write
// registers it (the whole region is then resident: pinned), later ones
// reuse the answer. A region the application touched is registered at once
// under its device key.
START_TEST(rdm_on_demand_provider_keys)
{
	OdEnv ti, tt;
	RdmNode a(ti), b(tt);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Untouched r(8 * MiB);
	OwnedMr mr(tt.domain, r.p, r.len, kRemoteAccess);
	ck_assert_msg(mr.key() & kOnDemandKeyBit, "key 0x%" PRIx64 " of an untouched region", mr.key());
	ck_assert_uint_eq(resident_pages(r.p, r.len), 0);
	expect_stats(tt.domain, 1, 0, "after fi_mr_reg");
	write_read_on_demand(a, to, tt, r, mr.key(), r.addr(), "provider key on demand");
	// Registered: pinned, every page resident.
	ck_assert_uint_eq(resident_pages(r.p, r.len), r.len / 4096);
	// Touched memory: registered at once, under the device key.
	std::vector<uint8_t> touched(4 * MiB, 1);
	OwnedMr eager(tt.domain, touched.data(), touched.size(), kRemoteAccess);
	ck_assert_uint_le(eager.key(), UINT32_MAX);
	expect_stats(tt.domain, 1, 1, "a touched region");
	// A small region is never registered on demand.
	Untouched small(512 * KiB);
	OwnedMr small_mr(tt.domain, small.p, small.len, kRemoteAccess);
	ck_assert_uint_le(small_mr.key(), UINT32_MAX);
	expect_stats(tt.domain, 1, 1, "a small untouched region");
}
END_TEST

// Scalable keys: the table entry of an untouched region says it is not
// registered; the initiator reads it, asks, and writes at an offset.
START_TEST(rdm_on_demand_scalable_keys)
{
	OdEnv ti(true), tt(true);
	RdmNode a(ti), b(tt);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Untouched r(4 * MiB);
	OwnedMr mr(tt.domain, r.p, r.len, kRemoteAccess, 7);
	ck_assert_uint_eq(mr.key(), 7);
	ck_assert_uint_eq(resident_pages(r.p, r.len), 0);
	expect_stats(tt.domain, 1, 0, "after fi_mr_reg");
	write_read_on_demand(a, to, tt, r, 7, 0, "scalable key on demand");
	// A second initiator asks again (its own connection) and finds it
	// registered: nothing is registered twice.
	RdmNode c(ti);
	connect_all({&c, &b});
	uint64_t v = 0x1122334455667788ULL, got = 0;
	fi_context w, rd;
	post([&] { return fi_write(c.ep, &v, 8, nullptr, c.addr_of(b), 64, 7, &w); }, "second initiator");
	expect_ok(c, &w, FI_RMA | FI_WRITE, "second initiator's write");
	post([&] { return fi_read(c.ep, &got, 8, nullptr, c.addr_of(b), 64, 7, &rd); }, "second initiator");
	expect_ok(c, &rd, FI_RMA | FI_READ, "second initiator's read");
	ck_assert_uint_eq(got, v);
	expect_stats(tt.domain, 1, 1, "a second initiator");
}
END_TEST

// Emulated atomics are applied by the target's CPU: into a region
// registered on demand they need no device registration, and the region's
// FI_RMA_EVENT counter counts them all the same. Native atomics (device
// ones) register it.
START_TEST(rdm_on_demand_atomics)
{
	OdEnv ti, tt;
	RdmNodeOptions topt;
	topt.remote_write_cntr = true;
	RdmNode a(ti), b(tt, topt);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Untouched r(4 * MiB);
	OwnedMr mr(tt.domain, r.p, r.len, kRemoteAccess, 0, FI_RMA_EVENT);
	fid_cntr *region_cntr = nullptr;
	fi_cntr_attr cattr{};
	cattr.events = FI_CNTR_EVENTS_COMP;
	ck_assert_int_eq(fi_cntr_open(tt.domain, &cattr, &region_cntr, nullptr), 0);
	ck_assert_int_eq(fi_mr_bind(mr.mr, &region_cntr->fid, FI_REMOTE_WRITE), 0);
	ck_assert_int_eq(fi_mr_enable(mr.mr), 0);
	ck_assert(mr.key() & kOnDemandKeyBit);
	const size_t off = 2 * MiB + 64;
	int64_t one = 5, old = -1;
	fi_context c1, c2;
	post([&] { return fi_atomic(a.ep, &one, 1, nullptr, to, r.addr(off), mr.key(), FI_INT64, FI_SUM, &c1); },
	     "fi_atomic into an on-demand region");
	expect_ok(a, &c1, FI_ATOMIC | FI_WRITE, "fi_atomic into an on-demand region");
	post([&] {
		return fi_fetch_atomic(a.ep, &one, 1, nullptr, &old, nullptr, to, r.addr(off), mr.key(), FI_INT64,
				       FI_SUM, &c2);
	},
	     "fi_fetch_atomic into an on-demand region");
	expect_ok(a, &c2, FI_ATOMIC | FI_READ, "fi_fetch_atomic into an on-demand region");
	ck_assert_int_eq(old, 5);
	int64_t now;
	memcpy(&now, r.p + off, 8);
	ck_assert_int_eq(now, 10);
	expect_cntr(region_cntr, 2, "the region's FI_REMOTE_WRITE counter");
	expect_cntr(b.remote_write_cntr, 2, "the endpoint's FI_REMOTE_WRITE counter");
	expect_stats(tt.domain, 1, 0, "after emulated atomics");
	// The page the atomics touched (a transparent huge page: up to 2 MiB),
	// not the region.
	ck_assert_uint_le(resident_pages(r.p, r.len), 2 * MiB / 4096);
	mr.close();
	ck_assert_int_eq(fi_close(&region_cntr->fid), 0);
}
END_TEST

START_TEST(rdm_on_demand_native_atomics)
{
	if (!in_fresh_process("rdm_on_demand_native_atomics"))
		return;
	setenv("FI_VRMA_RDM_NATIVE_ATOMICS", "1", 1);
	OdEnv ti, tt;
	RdmNode a(ti), b(tt);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Untouched r(4 * MiB);
	OwnedMr mr(tt.domain, r.p, r.len, kRemoteAccess);
	ck_assert(mr.key() & kOnDemandKeyBit);
	uint64_t add = 9, old = 1, cmp = 9, swap = 77;
	fi_context c1, c2;
	post([&] {
		return fi_fetch_atomic(a.ep, &add, 1, nullptr, &old, nullptr, to, r.addr(MiB), mr.key(), FI_UINT64,
				       FI_SUM, &c1);
	},
	     "native fetch-add into an on-demand region");
	expect_ok(a, &c1, FI_ATOMIC | FI_READ, "native fetch-add");
	ck_assert_uint_eq(old, 0);
	post([&] {
		return fi_compare_atomic(a.ep, &swap, 1, nullptr, &cmp, nullptr, &old, nullptr, to, r.addr(MiB),
					 mr.key(), FI_UINT64, FI_CSWAP, &c2);
	},
	     "native compare-and-swap");
	expect_ok(a, &c2, FI_ATOMIC | FI_READ, "native compare-and-swap");
	ck_assert_uint_eq(old, 9);
	uint64_t now;
	memcpy(&now, r.p + MiB, 8);
	ck_assert_uint_eq(now, 77);
	expect_stats(tt.domain, 1, 1, "after device atomics");
}
END_TEST

// What a peer cannot reach: a local-only region registered on demand (its
// key names no remote rights: refused, never registered), a region without
// the access asked, a closed one, an on-demand key that was never given
// out; a provider key that is neither a device key nor an on-demand one is
// refused at the call. The connection survives every refusal.
START_TEST(rdm_on_demand_refusals)
{
	OdEnv ti, tt;
	RdmNode a(ti), b(tt);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	Untouched local(2 * MiB), ro(2 * MiB), gone(2 * MiB);
	OwnedMr lmr(tt.domain, local.p, local.len, FI_READ | FI_WRITE);
	OwnedMr romr(tt.domain, ro.p, ro.len, FI_REMOTE_READ);
	OwnedMr gmr(tt.domain, gone.p, gone.len, kRemoteAccess);
	ck_assert(lmr.key() & kOnDemandKeyBit);
	ck_assert(romr.key() & kOnDemandKeyBit);
	const uint64_t gone_key = gmr.key();
	gmr.close();
	expect_stats(tt.domain, 3, 0, "three regions on demand");
	uint64_t v = 42;
	struct Case {
		const char *what;
		uint64_t addr, key;
	} cases[] = {
		{"a local-only region", local.addr(), lmr.key()},
		{"a read-only region", ro.addr(), romr.key()},
		{"a closed region", gone.addr(), gone_key},
		{"a key never given out", local.addr(), kOnDemandKeyBit | 0xabcdef},
	};
	for (const Case &c : cases) {
		fi_context ctx;
		post([&] { return fi_write(a.ep, &v, sizeof v, nullptr, to, c.addr, c.key, &ctx); }, c.what);
		const fi_cq_err_entry e = expect_err(a, &ctx, FI_EACCES, c.what);
		ck_assert_uint_eq(e.flags, FI_RMA | FI_WRITE);
	}
	expect_stats(tt.domain, 3, 0, "after the refusals");
	fi_context ctx;
	ck_assert_int_eq(fi_write(a.ep, &v, sizeof v, nullptr, to, local.addr(), uint64_t(1) << 40, &ctx),
			 -FI_EINVAL);
	// The read-only region reads (and is registered for it).
	uint64_t got = 1;
	post([&] { return fi_read(a.ep, &got, 8, nullptr, to, ro.addr(64), romr.key(), &ctx); }, "a read");
	expect_ok(a, &ctx, FI_RMA | FI_READ, "reading the read-only region");
	ck_assert_uint_eq(got, 0);
	expect_stats(tt.domain, 3, 1, "after the read");
	// Messages still flow both ways.
	uint64_t m = 0;
	fi_context sc, rc;
	post([&] { return fi_recv(b.ep, &m, 8, nullptr, FI_ADDR_UNSPEC, &rc); }, "recv");
	post([&] { return fi_send(a.ep, &v, 8, nullptr, to, &sc); }, "send");
	expect_ok(a, &sc, FI_MSG | FI_SEND, "send after the refusals");
	expect_ok(b, &rc, FI_MSG | FI_RECV, "recv after the refusals");
	ck_assert_uint_eq(m, 42);
}
END_TEST

// A local buffer's desc of a region registered on demand: RDM operations
// use the registration cache for it (the desc does not cover it yet) and
// leave the region unregistered.
START_TEST(rdm_on_demand_local_desc)
{
	OdEnv ti, tt;
	RdmNode a(ti), b(tt);
	connect_all({&a, &b});
	const fi_addr_t to = a.addr_of(b);
	std::vector<uint8_t> target(64 * KiB, 0);
	OwnedMr tmr(tt.domain, target.data(), target.size(), kRemoteAccess);
	Untouched local(4 * MiB);
	OwnedMr lmr(ti.domain, local.p, local.len, FI_READ | FI_WRITE | FI_SEND | FI_RECV);
	fill_pattern(local.p + MiB, 32 * KiB, 5);
	fi_context w, r;
	post([&] {
		return fi_write(a.ep, local.p + MiB, 32 * KiB, lmr.desc(), to, reinterpret_cast<uintptr_t>(target.data()),
				tmr.key(), &w);
	},
	     "a write from an on-demand region");
	expect_ok(a, &w, FI_RMA | FI_WRITE, "a write from an on-demand region");
	expect_pattern(target.data(), 32 * KiB, 5, "the written bytes");
	post([&] {
		return fi_read(a.ep, local.p + 2 * MiB, 32 * KiB, lmr.desc(), to,
			       reinterpret_cast<uintptr_t>(target.data()), tmr.key(), &r);
	},
	     "a read into an on-demand region");
	expect_ok(a, &r, FI_RMA | FI_READ, "a read into an on-demand region");
	expect_pattern(local.p + 2 * MiB, 32 * KiB, 5, "the read bytes");
	expect_stats(ti.domain, 1, 0, "the initiator's region");
}
END_TEST

// An MSG endpoint opened on an RDM domain (which registers on demand)
// sends from a region registered on demand, naming its desc: the send
// registers the region first (MSG endpoints hand the device the region's
// key), and the data arrives.
START_TEST(rdm_on_demand_msg_desc)
{
	vt::Env msg;
	OwnedHints rh(env_hints(false));
	fi_info *ri = rdm_get_info(rh.h);
	fid_domain *rdm_dom = nullptr;
	ck_assert_int_eq(fi_domain(msg.fabric, ri, &rdm_dom, nullptr), 0);
	std::swap(msg.domain, rdm_dom); // the pair's endpoints and regions go there
	{
		Pair p(msg);
		Untouched src(4 * MiB);
		OwnedMr smr(msg.domain, src.p, src.len, FI_SEND);
		ck_assert(smr.key() & kOnDemandKeyBit);
		expect_stats(msg.domain, 1, 0, "a local region on demand");
		std::vector<uint8_t> dst(4096 + 64, 0xcc);
		OwnedMr dmr(msg.domain, dst.data(), dst.size(), FI_RECV);
		fill_pattern(src.p + MiB, 4096, 3);
		fi_context sc, rc;
		ck_assert_int_eq(fi_recv(p.server.ep, dst.data(), 4096, dmr.desc(), 0, &rc), 0);
		ck_assert_int_eq(fi_send(p.client.ep, src.p + MiB, 4096, smr.desc(), 0, &sc), 0);
		expect_completion(p.client.cq, &sc, FI_MSG | FI_SEND);
		expect_completion(p.server.cq, &rc, FI_MSG | FI_RECV);
		expect_pattern(dst.data(), 4096, 3, "the message sent from an on-demand region");
		expect_filled(dst.data() + 4096, 64, 0xcc, "after the message");
		expect_stats(msg.domain, 1, 1, "the send registered it");
		// A desc that does not cover the buffer is still refused.
		ck_assert_int_eq(fi_send(p.client.ep, dst.data(), 4096, smr.desc(), 0, &sc), -FI_EINVAL);
	}
	std::swap(msg.domain, rdm_dom);
	ck_assert_int_eq(fi_close(&rdm_dom->fid), 0);
	fi_freeinfo(ri);
}
END_TEST

// FI_VRMA_MR_ON_DEMAND=0: every region is registered at fi_mr_reg, under
// its device key, and provider keys stay 4 bytes.
START_TEST(rdm_on_demand_off)
{
	if (!in_fresh_process("rdm_on_demand_off"))
		return;
	setenv("FI_VRMA_MR_ON_DEMAND", "0", 1);
	OwnedHints h(env_hints(false));
	RdmEnv tt(h.h);
	ck_assert_uint_eq(tt.info->domain_attr->mr_key_size, 4);
	Untouched r(4 * MiB);
	OwnedMr mr(tt.domain, r.p, r.len, kRemoteAccess);
	ck_assert_uint_le(mr.key(), UINT32_MAX);
	ck_assert_uint_eq(resident_pages(r.p, r.len), r.len / 4096); // pinned at once
	expect_stats(tt.domain, 0, 0, "FI_VRMA_MR_ON_DEMAND=0");
}
END_TEST

} // namespace

Suite *rdm_on_demand_suite()
{
	Suite *s = suite_create("rdm_on_demand");
	TCase *tc = tcase_create("rdm_on_demand");
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, nullptr, rdm_reset);
	tcase_add_test(tc, rdm_on_demand_provider_keys);
	tcase_add_test(tc, rdm_on_demand_scalable_keys);
	tcase_add_test(tc, rdm_on_demand_atomics);
	tcase_add_test(tc, rdm_on_demand_native_atomics);
	tcase_add_test(tc, rdm_on_demand_refusals);
	tcase_add_test(tc, rdm_on_demand_local_desc);
	tcase_add_test(tc, rdm_on_demand_msg_desc);
	tcase_add_test(tc, rdm_on_demand_off);
	suite_add_tcase(s, tc);
	return s;
}
