#include "persist.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define VRMA_PERSIST_X86 1
#endif

namespace vrma::persist {

namespace {

constexpr size_t kDefaultLine = 64;
constexpr size_t kDefaultPage = 4096;

bool starts_with(const char *s, const char *prefix)
{
	return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

#ifdef VRMA_PERSIST_X86

// The line size the flush instructions act on (CPUID leaf 1 EBX[15:8], in
// 8-byte units). A stride smaller than the real line only flushes some lines
// twice; a larger one would skip lines, so never guess above the CPU.
size_t detect_flush_line() noexcept
{
	unsigned eax, ebx, ecx, edx;
	if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
		return kDefaultLine;
	const size_t line = ((ebx >> 8) & 0xff) * 8;
	return line ? line : kDefaultLine;
}

size_t flush_line() noexcept
{
	// CPUID traps to the hypervisor in a VM: ask once.
	static const size_t line = detect_flush_line();
	return line;
}

void sfence() noexcept { asm volatile("sfence" ::: "memory"); }

void clflush_lines(LineSpan s, size_t line) noexcept
{
	for (size_t i = 0; i < s.count; i++)
		asm volatile("clflush %0" ::"m"(*reinterpret_cast<const char *>(s.first + i * line))
			     : "memory");
}

__attribute__((target("clflushopt"))) void clflushopt_lines(LineSpan s, size_t line) noexcept
{
	for (size_t i = 0; i < s.count; i++)
		_mm_clflushopt(reinterpret_cast<void *>(s.first + i * line));
}

__attribute__((target("clwb"))) void clwb_lines(LineSpan s, size_t line) noexcept
{
	for (size_t i = 0; i < s.count; i++)
		_mm_clwb(reinterpret_cast<void *>(s.first + i * line));
}

#endif // VRMA_PERSIST_X86

// Hex digits up to the first non-hex character; false on none or overflow.
bool parse_hex(const char *&p, uint64_t &v)
{
	const char *begin = p;
	v = 0;
	for (;; p++) {
		unsigned d;
		if (*p >= '0' && *p <= '9')
			d = *p - '0';
		else if (*p >= 'a' && *p <= 'f')
			d = *p - 'a' + 10;
		else if (*p >= 'A' && *p <= 'F')
			d = *p - 'A' + 10;
		else
			break;
		if (v >> 60)
			return false;
		v = v << 4 | d;
	}
	return p != begin;
}

bool parse_dec(const char *&p, uint64_t &v)
{
	const char *begin = p;
	v = 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		const unsigned d = *p - '0';
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	return p != begin;
}

bool expect(const char *&p, char c)
{
	if (*p != c)
		return false;
	p++;
	return true;
}

bool is_space(char c) { return c == ' ' || c == '\t'; }

} // namespace

const char *name(CacheFlush how) noexcept
{
	switch (how) {
	case CacheFlush::None:
		return "none";
	case CacheFlush::Clflush:
		return "clflush";
	case CacheFlush::Clflushopt:
		return "clflushopt";
	case CacheFlush::Clwb:
		return "clwb";
	}
	return "?";
}

CacheFlush detect_cache_flush() noexcept
{
#ifdef VRMA_PERSIST_X86
	const unsigned max_leaf = __get_cpuid_max(0, nullptr);
	unsigned eax, ebx, ecx, edx;
	if (max_leaf >= 7 && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
		if (ebx & (1u << 24))
			return CacheFlush::Clwb;
		if (ebx & (1u << 23))
			return CacheFlush::Clflushopt;
	}
	if (max_leaf >= 1 && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (edx & (1u << 19)))
		return CacheFlush::Clflush;
#endif
	return CacheFlush::None;
}

void flush_cache_range(CacheFlush how, const void *addr, size_t len) noexcept
{
#ifdef VRMA_PERSIST_X86
	if (how != CacheFlush::None) {
		const size_t line = flush_line();
		const LineSpan s = line_span(reinterpret_cast<uintptr_t>(addr), len, line);
		switch (how) {
		case CacheFlush::Clflush:
			clflush_lines(s, line);
			break;
		case CacheFlush::Clflushopt:
			clflushopt_lines(s, line);
			break;
		case CacheFlush::Clwb:
			clwb_lines(s, line);
			break;
		case CacheFlush::None:
			break;
		}
		// clflushopt and clwb are only ordered by a fence.
		sfence();
		return;
	}
#else
	(void)how;
#endif
	(void)addr;
	(void)len;
	std::atomic_thread_fence(std::memory_order_seq_cst);
}

LineSpan line_span(uintptr_t addr, size_t len, size_t line) noexcept
{
	const uintptr_t mask = ~static_cast<uintptr_t>(line - 1);
	const uintptr_t first = addr & mask;
	if (len == 0)
		return {first, 0};
	const uintptr_t last = (addr + len - 1) & mask;
	return {first, (last - first) / line + 1};
}

PageSpan page_span(uintptr_t addr, size_t len, size_t page) noexcept
{
	const uintptr_t mask = ~static_cast<uintptr_t>(page - 1);
	const uintptr_t start = addr & mask;
	if (len == 0)
		return {start, 0};
	const uintptr_t end = (addr + len - 1) & mask;
	return {start, end - start + page};
}

int sync_mapped_file(void *addr, size_t len) noexcept
{
	static const long sys_page = sysconf(_SC_PAGESIZE);
	const size_t page = sys_page > 0 ? static_cast<size_t>(sys_page) : kDefaultPage;
	const PageSpan s = page_span(reinterpret_cast<uintptr_t>(addr), len, page);
	// Unmapped memory must fail, not fault, in the loop below.
	if (msync(reinterpret_cast<void *>(s.start), s.len, MS_ASYNC) != 0)
		return -errno;
	// DMA leaves pages clean in the kernel's eyes: a locked add of zero to
	// one byte of the range in each page is a CPU write fault (the page
	// becomes dirty) that cannot undo a concurrent DMA write to that byte.
	const uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
	for (uintptr_t p = s.start; len && p < s.start + s.len; p += page) {
		auto *byte = reinterpret_cast<uint8_t *>(std::max(p, begin));
		__atomic_fetch_add(byte, 0, __ATOMIC_RELAXED);
	}
	if (msync(reinterpret_cast<void *>(s.start), s.len, MS_SYNC) != 0)
		return -errno;
	return 0;
}

const char *name(Backing b) noexcept
{
	switch (b) {
	case Backing::Unknown:
		return "unknown";
	case Backing::Anonymous:
		return "anonymous";
	case Backing::SharedFile:
		return "shared-file";
	case Backing::PrivateFile:
		return "private-file";
	case Backing::DaxDevice:
		return "dax-device";
	}
	return "?";
}

bool parse_maps_line(const char *line, uintptr_t addr, Backing &out) noexcept
{
	if (!line)
		return false;
	const char *p = line;
	uint64_t start, end, offset, major, minor, inode;
	if (!parse_hex(p, start) || !expect(p, '-') || !parse_hex(p, end) || !expect(p, ' '))
		return false;
	if (start >= end || end - 1 > UINTPTR_MAX)
		return false;

	const char *perms = p;
	if ((perms[0] != 'r' && perms[0] != '-') || (perms[1] != 'w' && perms[1] != '-') ||
	    (perms[2] != 'x' && perms[2] != '-') || (perms[3] != 's' && perms[3] != 'p'))
		return false;
	p += 4;
	const bool shared = perms[3] == 's';

	if (!expect(p, ' ') || !parse_hex(p, offset) || !expect(p, ' ') || !parse_hex(p, major) ||
	    !expect(p, ':') || !parse_hex(p, minor) || !expect(p, ' ') || !parse_dec(p, inode))
		return false;
	if (*p != '\0' && *p != '\n' && !is_space(*p))
		return false;
	while (is_space(*p))
		p++;
	const char *path = p;
	if (*path == '\n')
		path = "";

	if (addr < start || addr > end - 1)
		return false;

	// Shared anonymous memory, System V segments and memfds are shmem objects
	// that /proc shows under a file-like name: nothing durable behind them.
	const bool file = inode != 0 && path[0] == '/' && !starts_with(path, "/dev/zero") &&
			  !starts_with(path, "/SYSV") && !starts_with(path, "/memfd:");
	if (!file)
		out = Backing::Anonymous;
	else if (!shared)
		out = Backing::PrivateFile;
	else if (starts_with(path, "/dev/dax"))
		out = Backing::DaxDevice;
	else
		out = Backing::SharedFile;
	return true;
}

Backing backing_of(const void *addr) noexcept
{
	FILE *f = std::fopen("/proc/self/maps", "re");
	if (!f)
		return Backing::Unknown;
	Backing b = Backing::Unknown;
	char *line = nullptr;
	size_t cap = 0;
	const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
	while (getline(&line, &cap, f) >= 0)
		if (parse_maps_line(line, a, b))
			break;
	std::free(line);
	std::fclose(f);
	return b;
}

} // namespace vrma::persist
