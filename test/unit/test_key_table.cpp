// The scalable-key table: what a peer's READ of a bucket finds (entries,
// absent keys, torn copies), duplicates and full buckets refused, erase,
// consecutive keys filling the whole capacity, translation bounds.
#include "unit.h"
#include "key_table.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

using namespace vrma::keys;

namespace {

struct Table {
	explicit Table(size_t nb) : mem(nb * kBucketBytes, 0), t(mem.data(), nb) {}
	std::vector<uint8_t> mem;
	KeyTable t;
	const uint8_t *bucket(uint64_t key) const
	{
		return mem.data() + bucket_of(key, t.buckets()) * kBucketBytes;
	}
};

KeyEntry entry(uint64_t key)
{
	KeyEntry e;
	e.key = key;
	e.va = 0x7f0000000000ULL + key * 0x10000;
	e.start = key & 1 ? 0x1000 : 0;
	e.len = 4096 + key;
	e.rkey = static_cast<uint32_t>(0x100 + key);
	e.access = key & 1 ? kAccessRemoteRead : (kAccessRemoteRead | kAccessRemoteWrite);
	return e;
}

void assert_same(const KeyEntry &a, const KeyEntry &b)
{
	ck_assert_uint_eq(a.key, b.key);
	ck_assert_uint_eq(a.va, b.va);
	ck_assert_uint_eq(a.start, b.start);
	ck_assert_uint_eq(a.len, b.len);
	ck_assert_uint_eq(a.rkey, b.rkey);
	ck_assert_uint_eq(a.access, b.access);
}

START_TEST(test_insert_read_erase)
{
	Table tb(16);
	for (uint64_t k : {0ULL, 1ULL, 0xC0DEULL, ~0ULL})
		ck_assert(tb.t.insert(entry(k)) == Insert::Ok);
	ck_assert_uint_eq(tb.t.size(), 4);
	for (uint64_t k : {0ULL, 1ULL, 0xC0DEULL, ~0ULL}) {
		KeyEntry got;
		ck_assert(read_bucket(tb.bucket(k), k, got) == Lookup::Found);
		assert_same(got, entry(k));
		KeyEntry local;
		ck_assert(tb.t.find(k, local));
		assert_same(local, entry(k));
	}
	KeyEntry got;
	ck_assert(read_bucket(tb.bucket(2), 2, got) == Lookup::Absent);
	ck_assert(!tb.t.find(2, got));
	ck_assert(tb.t.insert(entry(1)) == Insert::Duplicate);
	ck_assert(tb.t.erase(1));
	ck_assert(!tb.t.erase(1));
	ck_assert(read_bucket(tb.bucket(1), 1, got) == Lookup::Absent);
	ck_assert_uint_eq(tb.t.size(), 3);
	// The key can be registered again, with other values.
	KeyEntry again = entry(1);
	again.rkey = 77;
	ck_assert(tb.t.insert(again) == Insert::Ok);
	ck_assert(read_bucket(tb.bucket(1), 1, got) == Lookup::Found);
	ck_assert_uint_eq(got.rkey, 77);
	// Erasing everything leaves zero bytes only.
	for (uint64_t k : {0ULL, 1ULL, 0xC0DEULL, ~0ULL})
		ck_assert(tb.t.erase(k));
	for (uint8_t b : tb.mem)
		ck_assert_uint_eq(b, 0);
}
END_TEST

// A region registered on demand: published unregistered, then updated in
// place with its device key. A READ meanwhile finds it torn, never absent,
// and the update leaves the bucket's other entries alone.
START_TEST(test_update_in_place)
{
	Table tb(1);
	KeyEntry lazy = entry(4);
	lazy.rkey = 0;
	lazy.access = kAccessRemoteWrite | kAccessUnregistered;
	ck_assert(tb.t.insert(entry(2)) == Insert::Ok);
	ck_assert(tb.t.insert(lazy) == Insert::Ok);
	KeyEntry got;
	ck_assert(read_bucket(tb.bucket(4), 4, got) == Lookup::Found);
	assert_same(got, lazy);
	std::vector<uint8_t> before = tb.mem;
	KeyEntry done = lazy;
	done.rkey = 0x4321;
	done.access = kAccessRemoteWrite;
	ck_assert(tb.t.update(done));
	ck_assert_uint_eq(tb.t.size(), 2);
	ck_assert(read_bucket(tb.bucket(4), 4, got) == Lookup::Found);
	assert_same(got, done);
	ck_assert(read_bucket(tb.bucket(2), 2, got) == Lookup::Found);
	assert_same(got, entry(2));
	// Every mix of the old and new bytes of the entry (a READ racing the
	// update) is either one of the two whole entries or torn.
	for (size_t cut = 0; cut <= kEntryBytes; cut += 8) {
		std::vector<uint8_t> mixed = tb.mem;
		for (size_t i = 0; i < kBucketBytes; i++)
			if (i % kEntryBytes >= cut)
				mixed[i] = before[i];
		const Lookup l = read_bucket(mixed.data(), 4, got);
		ck_assert(l != Lookup::Absent);
		if (l == Lookup::Found)
			ck_assert(got.rkey == 0 || got.rkey == 0x4321);
	}
	// An unknown key is not updated; an unknown access bit is torn.
	ck_assert(!tb.t.update(entry(9)));
	std::vector<uint8_t> odd = tb.mem;
	for (size_t e = 0; e < kBucketEntries; e++)
		if (odd[e * kEntryBytes + 37])
			odd[e * kEntryBytes + 36] |= 1 << 5;
	ck_assert(read_bucket(odd.data(), 4, got) == Lookup::Torn);
}
END_TEST

// Consecutive keys (as applications number their regions) fill every entry;
// one more is refused as Full, not placed elsewhere.
START_TEST(test_consecutive_keys_fill_capacity)
{
	Table tb(64);
	for (uint64_t k = 1000; k < 1000 + tb.t.capacity(); k++)
		ck_assert(tb.t.insert(entry(k)) == Insert::Ok);
	ck_assert_uint_eq(tb.t.size(), tb.t.capacity());
	ck_assert(tb.t.insert(entry(1000 + tb.t.capacity())) == Insert::Full);
	for (uint64_t k = 1000; k < 1000 + tb.t.capacity(); k++) {
		KeyEntry got;
		ck_assert(read_bucket(tb.bucket(k), k, got) == Lookup::Found);
		assert_same(got, entry(k));
	}
}
END_TEST

// A copy with any byte of a used entry changed, or a free entry with a stray
// byte, is Torn: what a READ racing a registration or a close can return.
START_TEST(test_torn_copies_detected)
{
	Table tb(4);
	ck_assert(tb.t.insert(entry(5)) == Insert::Ok);
	ck_assert(tb.t.insert(entry(9)) == Insert::Ok);
	const uint8_t *b = tb.bucket(5);
	for (size_t i = 0; i < kBucketBytes; i++) {
		uint8_t copy[kBucketBytes];
		memcpy(copy, b, sizeof copy);
		copy[i] ^= 0x40;
		KeyEntry got;
		const Lookup l = read_bucket(copy, 5, got);
		// A flip in a used entry or a free one is caught, except the
		// key byte of another entry turning it into a different valid
		// key, which the seal covers too.
		ck_assert_msg(l == Lookup::Torn, "byte %zu flipped went unnoticed", i);
	}
	// Half an insert: body written, seal not yet.
	uint8_t half[kBucketBytes];
	memcpy(half, b, sizeof half);
	for (size_t e = 0; e < kBucketEntries; e++)
		if (half[e * kEntryBytes + 37])
			memset(half + e * kEntryBytes + 40, 0, 8);
	KeyEntry got;
	ck_assert(read_bucket(half, 5, got) == Lookup::Torn);
}
END_TEST

START_TEST(test_translate_bounds)
{
	KeyEntry e;
	e.va = 0x10000;
	e.start = 0x100;
	e.len = 0x1000;
	uint64_t va = 0;
	ck_assert(e.translate(0x100, 0x1000, va));
	ck_assert_uint_eq(va, 0x10000);
	ck_assert(e.translate(0x1100, 0, va));
	ck_assert_uint_eq(va, 0x11000);
	ck_assert(e.translate(0x180, 8, va));
	ck_assert_uint_eq(va, 0x10080);
	ck_assert(!e.translate(0xff, 1, va));     // before the start
	ck_assert(!e.translate(0x100, 0x1001, va)); // one past the end
	ck_assert(!e.translate(0x1101, 0, va));
	ck_assert(!e.translate(0x200, ~0ULL, va)); // no wrap-around
	ck_assert(!e.translate(~0ULL, 2, va));
}
END_TEST

// Random keys against a model: inserts, duplicates, erases and lookups agree.
START_TEST(test_random_against_model)
{
	Table tb(32);
	std::mt19937_64 rng(7);
	std::vector<uint64_t> live;
	for (int round = 0; round < 20000; round++) {
		const uint64_t k = rng() % 512;
		const bool present = std::find(live.begin(), live.end(), k) != live.end();
		KeyEntry got;
		ck_assert(read_bucket(tb.bucket(k), k, got) ==
			  (present ? Lookup::Found : Lookup::Absent));
		if (present) {
			assert_same(got, entry(k));
			if (rng() & 1) {
				ck_assert(tb.t.erase(k));
				live.erase(std::find(live.begin(), live.end(), k));
			} else {
				ck_assert(tb.t.insert(entry(k)) == Insert::Duplicate);
			}
		} else {
			const Insert r = tb.t.insert(entry(k));
			ck_assert(r != Insert::Duplicate);
			if (r == Insert::Ok)
				live.push_back(k);
		}
		ck_assert_uint_eq(tb.t.size(), live.size());
	}
}
END_TEST

} // namespace

Suite *key_table_suite()
{
	Suite *s = suite_create("key_table");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_insert_read_erase);
	tcase_add_test(tc, test_consecutive_keys_fill_capacity);
	tcase_add_test(tc, test_update_in_place);
	tcase_add_test(tc, test_torn_copies_detected);
	tcase_add_test(tc, test_translate_bounds);
	tcase_add_test(tc, test_random_against_model);
	suite_add_tcase(s, tc);
	return s;
}
