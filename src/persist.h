// Making a byte range of local memory durable, for a target that answers
// commit requests (FI_COMMIT_COMPLETE) after remote RDMA writes landed in it.
//
// What "durable" takes depends on what backs the memory (backing_of()):
//  - DaxDevice (and a file on a DAX filesystem mapped MAP_SYNC): the CPU
//    caches are the only volatile layer; flush_cache_range() suffices.
//  - SharedFile on an ordinary filesystem: the page cache is volatile too;
//    sync_mapped_file() is needed (no cache flush first: the write-back I/O
//    is cache coherent). Hazard: the kernel only writes back pages it saw
//    dirtied, and a NIC's DMA into a pinned page never marks it dirty, so
//    sync_mapped_file() first dirties each page with an atomic add of zero.
//    Linux 6.5+ refuses long-term writable pins (ibv_reg_mr) of mappings of
//    ordinary files outright (tmpfs/shmem still work). Device DAX is the
//    dependable commit target.
//  - Anonymous / PrivateFile: nothing behind the memory survives a crash; a
//    flush only makes the data globally visible, never persistent.
// None of this waits for RDMA writes still in flight: the caller must already
// know every write it commits has been placed in memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vrma::persist {

// The cache line write-back instruction available on this CPU.
enum class CacheFlush : uint8_t { None, Clflush, Clflushopt, Clwb };

// "none", "clflush", "clflushopt", "clwb" ("?" for an out-of-range value).
const char *name(CacheFlush how) noexcept;

// Best instruction the CPU reports (CPUID), preferring clwb (writes back and
// may keep the line) over clflushopt over clflush. Always None on non-x86.
CacheFlush detect_cache_flush() noexcept;

// Writes back every cache line of [addr, addr+len), then fences (sfence; a
// seq_cst fence for None) so the write-backs are ordered before any later
// store, e.g. the commit acknowledgement. len 0: fence only.
// Hazard: `how` must be supported by this CPU (detect_cache_flush() or a
// weaker method); an unsupported instruction raises SIGILL. On non-x86 builds
// every method degrades to the fence. The range must be mapped and readable.
void flush_cache_range(CacheFlush how, const void *addr, size_t len) noexcept;

// The lines of size `line` (a power of two) covering [addr, addr+len):
// `first` is the address of the first line, `count` how many (0 for len 0).
// The range must not wrap around the address space.
struct LineSpan {
	uintptr_t first;
	size_t count;
};
LineSpan line_span(uintptr_t addr, size_t len, size_t line) noexcept;

// The pages of size `page` (a power of two) covering [addr, addr+len):
// `start` is page aligned and `len` a multiple of `page`. len 0 gives
// {addr rounded down, 0}.
struct PageSpan {
	uintptr_t start;
	size_t len;
};
PageSpan page_span(uintptr_t addr, size_t len, size_t page) noexcept;

// msync(MS_SYNC) over the pages covering [addr, addr+len): returns once the
// file's storage holds them. 0 or -errno; -ENOMEM when part of the range is
// not mapped. Succeeds without making anything durable on anonymous or
// private mappings. Blocks on I/O: not for a progress thread holding locks.
int sync_mapped_file(void *addr, size_t len) noexcept;

// What a mapping is backed by, as /proc/<pid>/maps describes it.
enum class Backing : uint8_t { Unknown, Anonymous, SharedFile, PrivateFile, DaxDevice };

// "unknown", "anonymous", "shared-file", "private-file", "dax-device".
const char *name(Backing b) noexcept;

// Parses one /proc/<pid>/maps line ("start-end perms offset dev inode [path]",
// trailing newline allowed). Returns true if the line is well formed and its
// range [start, end) contains addr, with `out` set:
//  - shared ('s') with a file path: SharedFile, or DaxDevice for /dev/dax*;
//  - private ('p') with a file path: PrivateFile;
//  - otherwise Anonymous: no path, inode 0, pseudo paths ("[heap]",
//    "[stack]", "anon_inode:..."), and shmem objects that only look like
//    files (shared anonymous memory "/dev/zero (deleted)", System V segments
//    "/SYSV...", memfds "/memfd:...").
// A file path is absolute with a non-zero inode; a " (deleted)" suffix still
// names a file. `out` is untouched when false is returned.
bool parse_maps_line(const char *line, uintptr_t addr, Backing &out) noexcept;

// Looks addr up in /proc/self/maps: Unknown if it is not mapped or the file
// cannot be read. The answer is a snapshot (a concurrent mmap/munmap may
// change it), and the read takes the process's mmap lock and is linear in the
// number of mappings: call it at registration time, not per commit.
Backing backing_of(const void *addr) noexcept;

} // namespace vrma::persist
