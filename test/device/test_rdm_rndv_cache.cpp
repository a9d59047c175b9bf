// The rdm suite's rendezvous registration cache on vrma's native FI_EP_RDM
// endpoint (tcase rdm_rndv_cache, added by rdm_suite() in test_rdm.cpp):
// rendezvous from and into memory that was unmapped and mapped again,
// replaced by mmap(MAP_FIXED), or freed and allocated again carry the new
// pages, and the cache's counters show its hits and invalidations.
// CK_RUN_SUITE=rdm CK_RUN_CASE=rdm_rndv_cache.
#include "rdm_harness.h"

#include <rdma/fi_ext_vrma.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

using namespace vt;

// ---------------------------------------------------------------------------
// rdm_rndv_cache

// Sends from and receives into 1 MiB mappings, unmapped and mapped again at
// the same addresses with other contents: the new pages travel (a
// registration cache must not keep the old ones).
START_TEST(rdm_rndv_mmap_remap)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t len = MiB;
	const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
	auto *p = static_cast<uint8_t *>(mmap(nullptr, len, prot, flags, -1, 0));
	auto *q = static_cast<uint8_t *>(mmap(nullptr, len, prot, flags, -1, 0));
	ck_assert(p != MAP_FAILED && q != MAP_FAILED);
	fill_pattern(p, len, 1);
	transfer(a, b, p, len, q, len, 1, "first mapping");
	ck_assert_int_eq(munmap(p, len), 0);
	ck_assert_int_eq(munmap(q, len), 0);
	// MAP_FIXED_NOREPLACE: never clobber what another thread may have mapped
	// there meanwhile.
	auto *p2 = static_cast<uint8_t *>(mmap(p, len, prot, flags | MAP_FIXED_NOREPLACE, -1, 0));
	auto *q2 = static_cast<uint8_t *>(mmap(q, len, prot, flags | MAP_FIXED_NOREPLACE, -1, 0));
	ck_assert_msg(p2 == p && q2 == q, "could not map the same addresses again (%p %p, %p %p)", static_cast<void *>(p),
		      static_cast<void *>(p2), static_cast<void *>(q), static_cast<void *>(q2));
	fill_pattern(p, len, 2);
	expect_filled(q, len, 0, "new receive mapping"); // fresh pages
	transfer(a, b, p, len, q, len, 2, "second mapping, same addresses");
	// The same mappings, contents changed in place.
	fill_pattern(p, len, 3);
	memset(q, 0, len);
	transfer(a, b, p, len, q, len, 3, "same mapping, new contents");
	ck_assert_int_eq(munmap(p, len), 0);
	ck_assert_int_eq(munmap(q, len), 0);
}
END_TEST

namespace {

// The domain's registration-cache counters (fi_ext_vrma.h).
fi_vrma_mr_cache_stats cache_stats(RdmEnv &env)
{
	fi_vrma_mr_cache_stats st{};
	ck_assert_int_eq(vrma_domain_ops(env.domain)->mr_cache_stats(env.domain, &st), 0);
	return st;
}

// Whether this process may open a full userfaultfd, which the cache needs
// (root, as in the test bed, or vm.unprivileged_userfaultfd=1).
bool full_userfaultfd_allowed()
{
	if (geteuid() == 0)
		return true;
	FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "r");
	int v = 0;
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v == 1;
}

} // namespace

// The cache at work, seen through its counters: repeated rendezvous from
// and into the same buffers hit; munmap invalidates before it returns (the
// next lookup cannot find the old pages); the remapped buffers miss and
// carry their new contents. Without a full userfaultfd, every transfer
// registers its own pages (uncached) and the data is still right.
START_TEST(rdm_rndv_cache_counters)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t len = 256 * KiB;
	const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
	auto *p = static_cast<uint8_t *>(mmap(nullptr, len, prot, flags, -1, 0));
	auto *q = static_cast<uint8_t *>(mmap(nullptr, len, prot, flags, -1, 0));
	ck_assert(p != MAP_FAILED && q != MAP_FAILED);
	const fi_vrma_mr_cache_stats s0 = cache_stats(env);
	for (uint32_t i = 0; i < 4; i++) {
		fill_pattern(p, len, 20 + i);
		memset(q, 0, len);
		transfer(a, b, p, len, q, len, 20 + i, "same buffers again");
	}
	const fi_vrma_mr_cache_stats s1 = cache_stats(env);
	if (!full_userfaultfd_allowed()) {
		ck_assert_int_eq(s1.active, 0);
		ck_assert_uint_ge(s1.uncached - s0.uncached, 8); // a send and a receive each time
		munmap(p, len);
		munmap(q, len);
		return;
	}
	ck_assert_msg(s1.active == 1, "no registration cache although userfaultfd is allowed (FI_LOG_LEVEL=info says why)");
	// Two misses (the sender's and the receiver's buffer), then hits.
	ck_assert_uint_eq(s1.misses - s0.misses, 2);
	ck_assert_uint_ge(s1.hits - s0.hits, 6);
	ck_assert_uint_ge(s1.entries, 1); // one when the two mappings touch (merged)
	ck_assert_uint_eq(s1.uncached, s0.uncached);
	// munmap returns only after the monitor invalidated (mem_monitor.h).
	ck_assert_int_eq(munmap(p, len), 0);
	const fi_vrma_mr_cache_stats s2 = cache_stats(env);
	ck_assert_uint_ge(s2.invalidations - s1.invalidations, 1);
	ck_assert_int_eq(munmap(q, len), 0);
	const fi_vrma_mr_cache_stats s3 = cache_stats(env);
	auto *p2 = static_cast<uint8_t *>(mmap(p, len, prot, flags | MAP_FIXED_NOREPLACE, -1, 0));
	auto *q2 = static_cast<uint8_t *>(mmap(q, len, prot, flags | MAP_FIXED_NOREPLACE, -1, 0));
	ck_assert_msg(p2 == p && q2 == q, "could not map the same addresses again");
	fill_pattern(p, len, 30);
	transfer(a, b, p, len, q, len, 30, "remapped at the same addresses");
	const fi_vrma_mr_cache_stats s4 = cache_stats(env);
	ck_assert_uint_eq(s4.misses - s3.misses, 2);
	// madvise(MADV_DONTNEED) zaps the pages in place: the next send must
	// not read the old ones (they are zero now, then written anew).
	ck_assert_int_eq(madvise(p, len, MADV_DONTNEED), 0);
	fill_pattern(p, len, 31);
	memset(q, 0, len);
	transfer(a, b, p, len, q, len, 31, "after MADV_DONTNEED");
	const fi_vrma_mr_cache_stats s5 = cache_stats(env);
	ck_assert_uint_ge(s5.invalidations - s4.invalidations, 1);
	ck_assert_int_eq(munmap(p, len), 0);
	ck_assert_int_eq(munmap(q, len), 0);
}
END_TEST

// A mapping replaced by mmap(MAP_FIXED) over it, without munmap.
START_TEST(rdm_rndv_mmap_fixed_replace)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t len = MiB;
	const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
	auto *p = static_cast<uint8_t *>(mmap(nullptr, len, prot, flags, -1, 0));
	ck_assert(p != MAP_FAILED);
	std::vector<uint8_t> dst(len);
	fill_pattern(p, len, 4);
	transfer(a, b, p, len, dst.data(), len, 4, "before MAP_FIXED");
	ck_assert_ptr_eq(mmap(p, len, prot, flags | MAP_FIXED, -1, 0), p);
	fill_pattern(p, len, 5);
	memset(dst.data(), 0, len);
	transfer(a, b, p, len, dst.data(), len, 5, "after MAP_FIXED over it");
	ck_assert_int_eq(munmap(p, len), 0);
}
END_TEST

// Heap buffers freed and allocated again (likely at the same address).
START_TEST(rdm_rndv_malloc_reuse)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t len = 512 * KiB;
	std::vector<uint8_t> dst(len);
	auto *p = static_cast<uint8_t *>(malloc(len));
	ck_assert_ptr_nonnull(p);
	fill_pattern(p, len, 6);
	transfer(a, b, p, len, dst.data(), len, 6, "first heap buffer");
	free(p);
	auto *p2 = static_cast<uint8_t *>(malloc(len));
	ck_assert_ptr_nonnull(p2);
	fill_pattern(p2, len, 7);
	memset(dst.data(), 0, len);
	transfer(a, b, p2, len, dst.data(), len, 7, "heap buffer after free and malloc");
	fill_pattern(p2, len, 8);
	memset(dst.data(), 0, len);
	transfer(a, b, p2, len, dst.data(), len, 8, "same heap buffer, new contents");
	free(p2);
	// And on the receiving side.
	auto *r = static_cast<uint8_t *>(malloc(len));
	ck_assert_ptr_nonnull(r);
	std::vector<uint8_t> src = pattern(len, 9);
	transfer(a, b, src.data(), len, r, len, 9, "into a heap buffer");
	free(r);
	auto *r2 = static_cast<uint8_t *>(malloc(len));
	ck_assert_ptr_nonnull(r2);
	memset(r2, 0, len);
	fill_pattern(src.data(), len, 10);
	transfer(a, b, src.data(), len, r2, len, 10, "into a heap buffer after free and malloc");
	free(r2);
}
END_TEST

void add_rdm_rndv_cache_tcases(Suite *s)
{
	rdm_add_tcase(s, "rdm_rndv_cache", 60,
		      {rdm_rndv_mmap_remap, rdm_rndv_mmap_fixed_replace, rdm_rndv_malloc_reuse, rdm_rndv_cache_counters});
}
