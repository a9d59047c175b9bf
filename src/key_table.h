// Scalable memory keys (mr_mode 0 / FI_MR_SCALABLE): the table in which a
// domain publishes its regions by the keys the application chose, laid out
// so that peers read it with RDMA READ, without the target's CPU.
//
// A domain keeps one table in memory registered for remote read; every RDM
// connection tells the peer where it is (address, rkey, bucket count: the
// connection header's KeyTableRef). An initiator that meets an unknown key
// reads the key's bucket (kBucketBytes, one READ) and parses it here; it
// caches the entry for as long as the connection lives. A passive target
// (one that never calls into libfabric) is served all the same.
//
// Layout: nbuckets (rdm::valid_key_table_buckets) buckets of kBucketEntries entries of
// kEntryBytes, little-endian. A key lives in bucket_of(key) only (no probing
// into other buckets): a full bucket refuses the registration.
//
// Entry (kEntryBytes):
//   0  u64 key      the application's requested_key
//   8  u64 va       virtual address of the region's first byte
//   16 u64 start    the address initiators name that byte by (the
//                   registration's offset: usually 0)
//   24 u64 len      the region's length
//   32 u32 rkey     the device key
//   36 u8  access   kAccessRemoteRead | kAccessRemoteWrite, and
//                   kAccessUnregistered while the region is not registered
//                   with the device (rkey 0): an initiator then asks the
//                   target for it (rdm_wire.h's KeyRequest)
//   37 u8  state    0 free, 1 used
//   38 u16 reserved 0
//   40 u64 check    seal() of bytes 0..39
// A free entry is 48 zero bytes.
//
// Concurrency hazard: a READ is not atomic with respect to the target's CPU
// stores, so it can return an entry half written (insert) or half cleared
// (erase). The check catches that: a used entry whose check does not match,
// or a free one that is not all zero, makes the bucket Torn and the reader
// reads again. The writer holds its own lock; readers on the same host use
// find().
#pragma once

#include <cstddef>
#include <cstdint>

namespace vrma::keys {

inline constexpr size_t kEntryBytes = 48;
inline constexpr size_t kBucketEntries = 8;
inline constexpr size_t kBucketBytes = kEntryBytes * kBucketEntries;
static_assert(kBucketBytes == 384, "a bucket is a wire format");

inline constexpr uint8_t kAccessRemoteRead = 1 << 0;
inline constexpr uint8_t kAccessRemoteWrite = 1 << 1;
// Not a right: the region is registered with the device on demand, at its
// first remote access (vrma_mr.cpp), and has no device key yet.
inline constexpr uint8_t kAccessUnregistered = 1 << 2;
inline constexpr uint8_t kAccessKnown = kAccessRemoteRead | kAccessRemoteWrite | kAccessUnregistered;

struct KeyEntry {
	uint64_t key = 0;
	uint64_t va = 0;
	uint64_t start = 0;
	uint64_t len = 0;
	uint32_t rkey = 0;
	uint8_t access = 0;

	// The virtual address of `addr` (as an initiator names it) when
	// [addr, addr + n) lies within the region; false otherwise.
	bool translate(uint64_t addr, uint64_t n, uint64_t &out) const noexcept
	{
		if (addr < start || addr - start > len || n > len - (addr - start))
			return false;
		out = va + (addr - start);
		return true;
	}
};

// The bucket a key lives in. Consecutive keys land in consecutive buckets,
// so a table of C entries holds any C consecutive keys.
inline size_t bucket_of(uint64_t key, size_t nbuckets) noexcept
{
	return static_cast<size_t>(key ^ (key >> 21) ^ (key >> 42)) & (nbuckets - 1);
}

// An entry's fields as they are laid out (bytes 0..kFieldBytes - 1 above,
// key to access), without state, reserved bytes or check: the form a
// KeyAnswer (rdm_wire.h) carries too.
inline constexpr size_t kFieldBytes = 37;
void encode_fields(uint8_t *e, const KeyEntry &k) noexcept;
void decode_fields(const uint8_t *e, KeyEntry &k) noexcept;

enum class Lookup { Found, Absent, Torn };

// Parses one bucket as read from a peer (kBucketBytes): the entry of key.
Lookup read_bucket(const uint8_t *bucket, uint64_t key, KeyEntry &out) noexcept;

enum class Insert { Ok, Duplicate, Full };

// The publishing side, over memory the caller owns (nbuckets * kBucketBytes
// bytes, zeroed, registered for remote read). Not thread safe.
class KeyTable {
public:
	KeyTable() = default;
	KeyTable(uint8_t *mem, size_t nbuckets) noexcept : mem_(mem), nbuckets_(nbuckets) {}

	size_t buckets() const noexcept { return nbuckets_; }
	size_t capacity() const noexcept { return nbuckets_ * kBucketEntries; }
	size_t size() const noexcept { return used_; }

	Insert insert(const KeyEntry &e) noexcept;
	// Rewrites the entry of e.key in place (false: none). A READ meanwhile
	// sees it torn, never absent: a region registered on demand keeps its
	// key while its device key is filled in.
	bool update(const KeyEntry &e) noexcept;
	bool erase(uint64_t key) noexcept;
	bool find(uint64_t key, KeyEntry &out) const noexcept;

private:
	uint8_t *mem_ = nullptr;
	size_t nbuckets_ = 0;
	size_t used_ = 0;
};

} // namespace vrma::keys
