// persist: line/page span arithmetic, /proc/<pid>/maps classification (parsed
// lines and real mappings), cache flushes that leave data intact, and msync of
// shared file mappings (whole, unaligned, unmapped).
#include "unit.h"
#include "persist.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

using vrma::persist::Backing;
using vrma::persist::CacheFlush;

namespace {

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// A file of `size` zero bytes under /tmp, closed and unlinked on destruction.
struct TempFile {
	char path[32] = "/tmp/vrma-persist-XXXXXX";
	int fd = -1;

	explicit TempFile(size_t size)
	{
		fd = mkstemp(path);
		ck_assert_msg(fd >= 0, "mkstemp: %s", strerror(errno));
		ck_assert_int_eq(ftruncate(fd, static_cast<off_t>(size)), 0);
	}
	~TempFile()
	{
		if (fd >= 0)
			close(fd);
		if (path[0])
			unlink(path);
	}
	void remove()
	{
		ck_assert_int_eq(unlink(path), 0);
		path[0] = '\0';
	}
};

// An mmap() that must succeed, unmapped on destruction.
struct Mapping {
	void *addr;
	size_t len;

	Mapping(size_t length, int prot, int flags, int fd) : len(length)
	{
		addr = mmap(nullptr, len, prot, flags, fd, 0);
		ck_assert_msg(addr != MAP_FAILED, "mmap: %s", strerror(errno));
	}
	~Mapping() { munmap(addr, len); }
	unsigned char *bytes() const { return static_cast<unsigned char *>(addr); }
};

void fill_pattern(unsigned char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = static_cast<unsigned char>((i * 131 + seed) ^ (i >> 8));
}

bool has_pattern(const unsigned char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != static_cast<unsigned char>((i * 131 + seed) ^ (i >> 8)))
			return false;
	return true;
}

// parse_maps_line() must return `ok` and, when ok, classify as `want`.
void check_line(const char *line, uintptr_t addr, bool ok, Backing want)
{
	Backing got = static_cast<Backing>(0x5a); // sentinel: untouched on false
	const bool r = vrma::persist::parse_maps_line(line, addr, got);
	ck_assert_msg(r == ok, "\"%s\" @%#lx: returned %d, want %d", line ? line : "(null)",
		      static_cast<unsigned long>(addr), r, ok);
	if (ok)
		ck_assert_msg(got == want, "\"%s\": %s, want %s", line,
			      vrma::persist::name(got), vrma::persist::name(want));
	else
		ck_assert_int_eq(static_cast<int>(got), 0x5a);
}

} // namespace

START_TEST(line_span_cases)
{
	struct {
		uintptr_t addr;
		size_t len;
		uintptr_t first;
		size_t count;
	} const cases[] = {
		{0x1000, 64, 0x1000, 1},   // one aligned line
		{0x1000, 128, 0x1000, 2},  // two aligned lines
		{0x1000, 65, 0x1000, 2},   // one byte into the next line
		{0x1010, 16, 0x1000, 1},   // inside a line
		{0x1010, 48, 0x1000, 1},   // up to the end of the line
		{0x1030, 32, 0x1000, 2},   // crossing a boundary
		{0x103f, 2, 0x1000, 2},    // two bytes straddling a boundary
		{0x103f, 1, 0x1000, 1},    // the last byte of a line
		{0x1040, 1, 0x1040, 1},    // the first byte of the next
		{0x1001, 4096, 0x1000, 65}, // unaligned page's worth
		{0x1010, 0, 0x1000, 0},    // empty
		{0x1000, 0, 0x1000, 0},
	};
	for (const auto &c : cases) {
		const auto s = vrma::persist::line_span(c.addr, c.len, 64);
		ck_assert_msg(s.first == c.first && s.count == c.count,
			      "addr %#lx len %zu: {%#lx, %zu}, want {%#lx, %zu}",
			      static_cast<unsigned long>(c.addr), c.len,
			      static_cast<unsigned long>(s.first), s.count,
			      static_cast<unsigned long>(c.first), c.count);
	}
	// Other line sizes.
	auto s = vrma::persist::line_span(0x107f, 2, 128);
	ck_assert_uint_eq(s.first, 0x1000);
	ck_assert_uint_eq(s.count, 2);
	s = vrma::persist::line_span(0x10ff, 1, 256);
	ck_assert_uint_eq(s.first, 0x1000);
	ck_assert_uint_eq(s.count, 1);
}
END_TEST

START_TEST(page_span_cases)
{
	struct {
		uintptr_t addr;
		size_t len;
		uintptr_t start;
		size_t span;
	} const cases[] = {
		{0x10000, 4096, 0x10000, 4096},  // one aligned page
		{0x10000, 8192, 0x10000, 8192},  // two aligned pages
		{0x10000, 4097, 0x10000, 8192},  // one byte into the next page
		{0x10010, 10, 0x10000, 4096},    // inside a page
		{0x10010, 4080, 0x10000, 4096},  // up to the end of the page
		{0x10ff0, 32, 0x10000, 8192},    // crossing a boundary
		{0x10fff, 1, 0x10000, 4096},     // the last byte of a page
		{0x10fff, 2, 0x10000, 8192},     // straddling a boundary
		{0x11000, 1, 0x11000, 4096},     // the first byte of the next
		{0x10001, 3 * 4096, 0x10000, 4 * 4096},
		{0x10010, 0, 0x10000, 0},        // empty: start rounded down
		{0x10000, 0, 0x10000, 0},
	};
	for (const auto &c : cases) {
		const auto s = vrma::persist::page_span(c.addr, c.len, 4096);
		ck_assert_msg(s.start == c.start && s.len == c.span,
			      "addr %#lx len %zu: {%#lx, %zu}, want {%#lx, %zu}",
			      static_cast<unsigned long>(c.addr), c.len,
			      static_cast<unsigned long>(s.start), s.len,
			      static_cast<unsigned long>(c.start), c.span);
	}
	const auto s = vrma::persist::page_span(0x200001, 1, 0x200000);
	ck_assert_uint_eq(s.start, 0x200000);
	ck_assert_uint_eq(s.len, 0x200000);
}
END_TEST

START_TEST(names_are_distinct)
{
	ck_assert_str_eq(vrma::persist::name(CacheFlush::None), "none");
	ck_assert_str_eq(vrma::persist::name(CacheFlush::Clflush), "clflush");
	ck_assert_str_eq(vrma::persist::name(CacheFlush::Clflushopt), "clflushopt");
	ck_assert_str_eq(vrma::persist::name(CacheFlush::Clwb), "clwb");
	ck_assert_str_eq(vrma::persist::name(Backing::Unknown), "unknown");
	ck_assert_str_eq(vrma::persist::name(Backing::Anonymous), "anonymous");
	ck_assert_str_eq(vrma::persist::name(Backing::SharedFile), "shared-file");
	ck_assert_str_eq(vrma::persist::name(Backing::PrivateFile), "private-file");
	ck_assert_str_eq(vrma::persist::name(Backing::DaxDevice), "dax-device");
	ck_assert_ptr_nonnull(vrma::persist::name(static_cast<CacheFlush>(99)));
	ck_assert_ptr_nonnull(vrma::persist::name(static_cast<Backing>(99)));
}
END_TEST

START_TEST(maps_shared_file)
{
	check_line("7f3a1d000000-7f3a1d021000 rw-s 00000000 08:01 1311234"
		   "                    /tmp/vrma-persist-abc123\n",
		   0x7f3a1d010000, true, Backing::SharedFile);
	// Read-only shared, path with a space, no trailing newline.
	check_line("7f3a1d000000-7f3a1d001000 r--s 00002000 fd:00 77 /srv/data/my file.bin",
		   0x7f3a1d000000, true, Backing::SharedFile);
}
END_TEST

START_TEST(maps_private_file)
{
	check_line("7f3a1c028000-7f3a1c1bd000 r-xp 00028000 08:01 2621445"
		   "                   /usr/lib/x86_64-linux-gnu/libc.so.6\n",
		   0x7f3a1c100000, true, Backing::PrivateFile);
	check_line("55d0c8a00000-55d0c8a21000 rw-p 00020000 08:01 1311000 /usr/bin/app\n",
		   0x55d0c8a00000, true, Backing::PrivateFile);
}
END_TEST

START_TEST(maps_anonymous)
{
	// Inode 0, no path: with and without the padding some kernels emit.
	check_line("7f3a1c400000-7f3a1c40d000 rw-p 00000000 00:00 0 \n", 0x7f3a1c400000, true,
		   Backing::Anonymous);
	check_line("7f3a1c400000-7f3a1c40d000 rw-p 00000000 00:00 0", 0x7f3a1c40cfff, true,
		   Backing::Anonymous);
	check_line("7f3a1c400000-7f3a1c40d000 ---p 00000000 00:00 0\n", 0x7f3a1c400800, true,
		   Backing::Anonymous);
	check_line("55d0c9b2e000-55d0c9b4f000 rw-p 00000000 00:00 0"
		   "                          [heap]\n",
		   0x55d0c9b30000, true, Backing::Anonymous);
	check_line("7ffc6e5d0000-7ffc6e5f1000 rw-p 00000000 00:00 0"
		   "                          [stack]\n",
		   0x7ffc6e5f0ff8, true, Backing::Anonymous);
	check_line("ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0"
		   "                  [vsyscall]\n",
		   0xffffffffff600000, true, Backing::Anonymous);
	// Shared mappings whose "path" is a pseudo name or a shmem object.
	check_line("7f3a1b000000-7f3a1b100000 rw-s 00000000 00:00 0 [anon:ring]\n",
		   0x7f3a1b000000, true, Backing::Anonymous);
	check_line("7f3a1b000000-7f3a1b100000 rw-s 00000000 00:01 1034"
		   "                       /dev/zero (deleted)\n",
		   0x7f3a1b000000, true, Backing::Anonymous);
	check_line("7f3a1b000000-7f3a1b100000 rw-s 00000000 00:01 5 /SYSV00000000 (deleted)\n",
		   0x7f3a1b000000, true, Backing::Anonymous);
	check_line("7f3a1b000000-7f3a1b100000 rw-s 00000000 00:01 6 /memfd:ring (deleted)\n",
		   0x7f3a1b000000, true, Backing::Anonymous);
	check_line("7f3a1b000000-7f3a1b001000 rw-s 00000000 00:0e 12 anon_inode:[io_uring]\n",
		   0x7f3a1b000000, true, Backing::Anonymous);
	// A path with inode 0 is not a file.
	check_line("7f3a1b000000-7f3a1b001000 rw-s 00000000 00:00 0 /not/a/file\n",
		   0x7f3a1b000000, true, Backing::Anonymous);
}
END_TEST

START_TEST(maps_dax_device)
{
	check_line("7f0000000000-7f0040000000 rw-s 00000000 00:06 417"
		   "                        /dev/dax0.0\n",
		   0x7f0020000000, true, Backing::DaxDevice);
	check_line("7f0000000000-7f0040000000 rw-s 00000000 00:06 418 /dev/dax1.3\n",
		   0x7f0000000000, true, Backing::DaxDevice);
	// A private mapping of a DAX device is private memory.
	check_line("7f0000000000-7f0040000000 rw-p 00000000 00:06 417 /dev/dax0.0\n",
		   0x7f0000000000, true, Backing::PrivateFile);
}
END_TEST

START_TEST(maps_deleted_file)
{
	check_line("7f3a1b000000-7f3a1b100000 rw-s 00000000 00:1f 42"
		   "                         /tmp/vrma-persist-x (deleted)\n",
		   0x7f3a1b000000, true, Backing::SharedFile);
	check_line("7f3a1b000000-7f3a1b100000 r--p 00000000 08:01 43 /usr/lib/old.so (deleted)\n",
		   0x7f3a1b000000, true, Backing::PrivateFile);
	check_line("7f0000000000-7f0040000000 rw-s 00000000 00:06 417 /dev/dax0.0 (deleted)\n",
		   0x7f0000000000, true, Backing::DaxDevice);
}
END_TEST

START_TEST(maps_address_outside_range)
{
	const char *line = "7f3a1d000000-7f3a1d021000 rw-s 00000000 08:01 1311234 /tmp/f\n";
	check_line(line, 0x7f3a1d000000, true, Backing::SharedFile);  // start: inside
	check_line(line, 0x7f3a1d020fff, true, Backing::SharedFile);  // end - 1: inside
	check_line(line, 0x7f3a1d021000, false, Backing::Unknown);    // end: outside
	check_line(line, 0x7f3a1cffffff, false, Backing::Unknown);    // below start
	check_line(line, 0, false, Backing::Unknown);
	check_line(line, UINTPTR_MAX, false, Backing::Unknown);
}
END_TEST

START_TEST(maps_malformed)
{
	const uintptr_t a = 0x1800;
	const char *const bad[] = {
		"",
		"\n",
		"garbage",
		"1000",
		"1000-",
		"1000-2000",
		"1000-2000 ",
		"1000-2000 rw",
		"1000-2000 rw-p",
		"1000-2000 rw-x 00000000 00:00 0",   // neither shared nor private
		"1000-2000 rwxpp 00000000 00:00 0",  // five permission characters
		"1000-2000 zw-p 00000000 00:00 0",
		"1000-2000 rw-p 00000000",
		"1000-2000 rw-p 00000000 00:00",
		"1000-2000 rw-p 00000000 0000 0",
		"1000-2000 rw-p 00000000 00: 0",
		"1000-2000 rw-p 00000000 00:00 x /tmp/f",
		"1000-2000 rw-p 00000000 00:00 12abc /tmp/f", // junk after the inode
		"1000-2000 rw-p zz 00:00 0",
		"1000 - 2000 rw-p 00000000 00:00 0",
		"2000-1000 rw-p 00000000 00:00 0",   // start after end
		"1000-1000 rw-p 00000000 00:00 0",   // empty range
		"11000000000000000-11000000000001000 rw-p 00000000 00:00 0", // 68-bit
		"1000-2000 rw-p 00000000 00:00 99999999999999999999999 /tmp/f", // inode overflow
	};
	for (const char *line : bad)
		check_line(line, a, false, Backing::Unknown);
	check_line(nullptr, a, false, Backing::Unknown);
	// The same line well formed, for contrast.
	check_line("1000-2000 rw-p 00000000 00:00 0", a, true, Backing::Anonymous);
}
END_TEST

START_TEST(backing_shared_file)
{
	const size_t len = 2 * page_size();
	TempFile f(len);
	Mapping m(len, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd);
	ck_assert_str_eq(vrma::persist::name(vrma::persist::backing_of(m.addr)), "shared-file");
	ck_assert(vrma::persist::backing_of(m.bytes() + len - 1) == Backing::SharedFile);
	// Still a file once unlinked (" (deleted)").
	f.remove();
	ck_assert(vrma::persist::backing_of(m.bytes() + 1) == Backing::SharedFile);
}
END_TEST

START_TEST(backing_private_file)
{
	const size_t len = page_size();
	TempFile f(len);
	Mapping m(len, PROT_READ | PROT_WRITE, MAP_PRIVATE, f.fd);
	ck_assert(vrma::persist::backing_of(m.addr) == Backing::PrivateFile);
	Mapping ro(len, PROT_READ, MAP_PRIVATE, f.fd);
	ck_assert(vrma::persist::backing_of(ro.addr) == Backing::PrivateFile);
}
END_TEST

START_TEST(backing_anonymous)
{
	const size_t len = 4 * page_size();
	Mapping m(len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
	ck_assert(vrma::persist::backing_of(m.bytes() + len / 2) == Backing::Anonymous);
	// Shared anonymous memory is shmem: nothing durable behind it either.
	Mapping s(len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1);
	ck_assert(vrma::persist::backing_of(s.addr) == Backing::Anonymous);
}
END_TEST

START_TEST(backing_stack)
{
	volatile int on_stack = 1;
	ck_assert(vrma::persist::backing_of(const_cast<int *>(&on_stack)) == Backing::Anonymous);
	ck_assert_int_eq(on_stack, 1);
}
END_TEST

START_TEST(backing_unmapped)
{
	ck_assert(vrma::persist::backing_of(nullptr) == Backing::Unknown);
	const size_t len = page_size();
	void *gone = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert(gone != MAP_FAILED);
	ck_assert_int_eq(munmap(gone, len), 0);
	ck_assert(vrma::persist::backing_of(gone) == Backing::Unknown);
}
END_TEST

START_TEST(detect_names_a_method)
{
	const CacheFlush how = vrma::persist::detect_cache_flush();
	const char *n = vrma::persist::name(how);
	ck_assert_ptr_nonnull(n);
	ck_assert_str_ne(n, "?");
	// Stable across calls.
	ck_assert(vrma::persist::detect_cache_flush() == how);
#if !defined(__x86_64__) && !defined(__i386__)
	ck_assert(how == CacheFlush::None);
#endif
}
END_TEST

START_TEST(flush_keeps_data)
{
	constexpr size_t kLen = 1 << 20;
	std::vector<unsigned char> buf(kLen);
	fill_pattern(buf.data(), kLen, 7);

	// Only methods this CPU certainly has: the fence, clflush under any
	// detected instruction, and the detected one.
	const CacheFlush best = vrma::persist::detect_cache_flush();
	std::vector<CacheFlush> methods{CacheFlush::None};
	if (best != CacheFlush::None)
		methods.push_back(CacheFlush::Clflush);
	if (best != CacheFlush::None && best != CacheFlush::Clflush)
		methods.push_back(best);

	for (CacheFlush how : methods) {
		vrma::persist::flush_cache_range(how, buf.data(), kLen);
		ck_assert_msg(has_pattern(buf.data(), kLen, 7), "%s", vrma::persist::name(how));
		// Unaligned head and tail, a single byte, and an empty range.
		vrma::persist::flush_cache_range(how, buf.data() + 3, kLen - 70);
		vrma::persist::flush_cache_range(how, buf.data() + 63, 1);
		vrma::persist::flush_cache_range(how, buf.data() + 5, 0);
		vrma::persist::flush_cache_range(how, nullptr, 0);
		ck_assert_msg(has_pattern(buf.data(), kLen, 7), "%s", vrma::persist::name(how));
		// Stores after a flush land as usual.
		fill_pattern(buf.data(), kLen, 11);
		vrma::persist::flush_cache_range(how, buf.data(), kLen);
		ck_assert_msg(has_pattern(buf.data(), kLen, 11), "%s", vrma::persist::name(how));
		fill_pattern(buf.data(), kLen, 7);
	}
}
END_TEST

START_TEST(sync_shared_file_reaches_file)
{
	const size_t len = 3 * page_size();
	TempFile f(len);
	Mapping m(len, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd);
	std::vector<unsigned char> src(len);
	fill_pattern(src.data(), len, 3);
	memcpy(m.addr, src.data(), len);
	ck_assert_int_eq(vrma::persist::sync_mapped_file(m.addr, len), 0);

	std::vector<unsigned char> back(len);
	ck_assert_int_eq(pread(f.fd, back.data(), len, 0), static_cast<ssize_t>(len));
	ck_assert_int_eq(memcmp(back.data(), src.data(), len), 0);
}
END_TEST

START_TEST(sync_unaligned_subrange)
{
	const size_t page = page_size();
	const size_t len = 3 * page;
	TempFile f(len);
	Mapping m(len, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd);

	// Crossing the first page boundary, from an odd offset.
	const size_t off = page - 100, n = 300;
	std::vector<unsigned char> src(n);
	fill_pattern(src.data(), n, 9);
	memcpy(m.bytes() + off, src.data(), n);
	ck_assert_int_eq(vrma::persist::sync_mapped_file(m.bytes() + off, n), 0);
	std::vector<unsigned char> back(n);
	ck_assert_int_eq(pread(f.fd, back.data(), n, static_cast<off_t>(off)),
			 static_cast<ssize_t>(n));
	ck_assert_int_eq(memcmp(back.data(), src.data(), n), 0);

	// One byte: the last of the mapping; and an empty range.
	m.bytes()[len - 1] = 0xa5;
	ck_assert_int_eq(vrma::persist::sync_mapped_file(m.bytes() + len - 1, 1), 0);
	unsigned char last = 0;
	ck_assert_int_eq(pread(f.fd, &last, 1, static_cast<off_t>(len - 1)), 1);
	ck_assert_uint_eq(last, 0xa5);
	ck_assert_int_eq(vrma::persist::sync_mapped_file(m.bytes() + 17, 0), 0);
}
END_TEST

START_TEST(sync_unmapped_is_enomem)
{
	const size_t page = page_size();
	void *gone = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert(gone != MAP_FAILED);
	ck_assert_int_eq(munmap(gone, 2 * page), 0);
	ck_assert_int_eq(vrma::persist::sync_mapped_file(static_cast<char *>(gone) + 5, 10),
			 -ENOMEM);

	// A range running past the end of a mapping.
	TempFile f(2 * page);
	Mapping m(2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd);
	ck_assert_int_eq(munmap(m.bytes() + page, page), 0);
	ck_assert_int_eq(vrma::persist::sync_mapped_file(m.addr, 2 * page), -ENOMEM);
	ck_assert_int_eq(vrma::persist::sync_mapped_file(m.addr, page), 0);
}
END_TEST

Suite *persist_suite()
{
	Suite *s = suite_create("persist");

	TCase *tc = tcase_create("spans");
	tcase_add_test(tc, line_span_cases);
	tcase_add_test(tc, page_span_cases);
	tcase_add_test(tc, names_are_distinct);
	suite_add_tcase(s, tc);

	tc = tcase_create("maps_lines");
	tcase_add_test(tc, maps_shared_file);
	tcase_add_test(tc, maps_private_file);
	tcase_add_test(tc, maps_anonymous);
	tcase_add_test(tc, maps_dax_device);
	tcase_add_test(tc, maps_deleted_file);
	tcase_add_test(tc, maps_address_outside_range);
	tcase_add_test(tc, maps_malformed);
	suite_add_tcase(s, tc);

	tc = tcase_create("backing");
	tcase_add_test(tc, backing_shared_file);
	tcase_add_test(tc, backing_private_file);
	tcase_add_test(tc, backing_anonymous);
	tcase_add_test(tc, backing_stack);
	tcase_add_test(tc, backing_unmapped);
	suite_add_tcase(s, tc);

	tc = tcase_create("flush_sync");
	tcase_add_test(tc, detect_names_a_method);
	tcase_add_test(tc, flush_keeps_data);
	tcase_add_test(tc, sync_shared_file_reaches_file);
	tcase_add_test(tc, sync_unaligned_subrange);
	tcase_add_test(tc, sync_unmapped_is_enomem);
	suite_add_tcase(s, tc);
	return s;
}
