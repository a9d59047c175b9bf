#include "key_table.h"
#include "wire/rdm_wire.h"

#include <atomic>
#include <cstring>

namespace vrma::keys {

namespace {

namespace le = rdm::le;


constexpr size_t kSealedBytes = 40;
constexpr uint8_t kStateUsed = 1;

inline uint64_t mix(uint64_t z) noexcept
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

// A 64-bit digest of an entry's first kSealedBytes: a torn copy matches it
// with probability 2^-64.
uint64_t seal(const uint8_t *e) noexcept
{
	uint64_t h = 0x76726d616b657973ULL; // "vrmakeys"
	for (size_t off = 0; off < kSealedBytes; off += 8)
		h = mix(h ^ le::get64(e + off));
	return h;
}

void encode(uint8_t *e, const KeyEntry &k) noexcept
{
	encode_fields(e, k);
	e[37] = kStateUsed;
	le::put16(e + 38, 0);
}

// Writes entry k at e: the body first, the seal last, so that a READ
// between the two sees a used entry with a wrong check (Torn), never a wrong
// entry.
void write_sealed(uint8_t *e, const KeyEntry &k) noexcept
{
	uint8_t tmp[kEntryBytes];
	encode(tmp, k);
	le::put64(tmp + kSealedBytes, seal(tmp));
	memcpy(e, tmp, kSealedBytes);
	std::atomic_thread_fence(std::memory_order_release);
	memcpy(e + kSealedBytes, tmp + kSealedBytes, kEntryBytes - kSealedBytes);
}

bool all_zero(const uint8_t *e) noexcept
{
	static constexpr uint8_t zero[kEntryBytes] = {};
	return memcmp(e, zero, kEntryBytes) == 0;
}

bool sealed(const uint8_t *e) noexcept
{
	return e[37] == kStateUsed && le::get16(e + 38) == 0 &&
	       (e[36] & ~kAccessKnown) == 0 &&
	       le::get64(e + kSealedBytes) == seal(e);
}

} // namespace

void encode_fields(uint8_t *e, const KeyEntry &k) noexcept
{
	le::put64(e, k.key);
	le::put64(e + 8, k.va);
	le::put64(e + 16, k.start);
	le::put64(e + 24, k.len);
	le::put32(e + 32, k.rkey);
	e[36] = k.access;
}

void decode_fields(const uint8_t *e, KeyEntry &k) noexcept
{
	k.key = le::get64(e);
	k.va = le::get64(e + 8);
	k.start = le::get64(e + 16);
	k.len = le::get64(e + 24);
	k.rkey = le::get32(e + 32);
	k.access = e[36];
}

Lookup read_bucket(const uint8_t *bucket, uint64_t key, KeyEntry &out) noexcept
{
	bool found = false;
	for (size_t i = 0; i < kBucketEntries; i++) {
		const uint8_t *e = bucket + i * kEntryBytes;
		if (e[37] == 0) {
			if (!all_zero(e))
				return Lookup::Torn;
			continue;
		}
		if (!sealed(e))
			return Lookup::Torn;
		if (!found && le::get64(e) == key) {
			decode_fields(e, out);
			found = true;
		}
	}
	return found ? Lookup::Found : Lookup::Absent;
}

Insert KeyTable::insert(const KeyEntry &k) noexcept
{
	uint8_t *b = mem_ + bucket_of(k.key, nbuckets_) * kBucketBytes;
	uint8_t *free_entry = nullptr;
	for (size_t i = 0; i < kBucketEntries; i++) {
		uint8_t *e = b + i * kEntryBytes;
		if (e[37] == 0) {
			if (!free_entry)
				free_entry = e;
		} else if (le::get64(e) == k.key) {
			return Insert::Duplicate;
		}
	}
	if (!free_entry)
		return Insert::Full;
	write_sealed(free_entry, k);
	used_++;
	return Insert::Ok;
}

bool KeyTable::update(const KeyEntry &k) noexcept
{
	uint8_t *b = mem_ + bucket_of(k.key, nbuckets_) * kBucketBytes;
	for (size_t i = 0; i < kBucketEntries; i++) {
		uint8_t *e = b + i * kEntryBytes;
		if (e[37] != 0 && le::get64(e) == k.key) {
			// The seal broken first, as erase does: a READ from now
			// until write_sealed's seal sees the entry torn.
			memset(e + kSealedBytes, 0, kEntryBytes - kSealedBytes);
			std::atomic_thread_fence(std::memory_order_release);
			write_sealed(e, k);
			return true;
		}
	}
	return false;
}

bool KeyTable::erase(uint64_t key) noexcept
{
	uint8_t *b = mem_ + bucket_of(key, nbuckets_) * kBucketBytes;
	for (size_t i = 0; i < kBucketEntries; i++) {
		uint8_t *e = b + i * kEntryBytes;
		if (e[37] != 0 && le::get64(e) == key) {
			// The seal first: a READ meanwhile sees a broken entry.
			memset(e + kSealedBytes, 0, kEntryBytes - kSealedBytes);
			std::atomic_thread_fence(std::memory_order_release);
			memset(e, 0, kSealedBytes);
			used_--;
			return true;
		}
	}
	return false;
}

bool KeyTable::find(uint64_t key, KeyEntry &out) const noexcept
{
	const uint8_t *b = mem_ + bucket_of(key, nbuckets_) * kBucketBytes;
	for (size_t i = 0; i < kBucketEntries; i++) {
		const uint8_t *e = b + i * kEntryBytes;
		if (e[37] != 0 && le::get64(e) == key) {
			decode_fields(e, out);
			return true;
		}
	}
	return false;
}

} // namespace vrma::keys
