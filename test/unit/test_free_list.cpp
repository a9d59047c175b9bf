// FreeList and NodeCache (src/free_list.h): a kept object comes back reset,
// the cache holds at most its room and deletes the rest, reuse allocates
// nothing once the room is reserved, and a map fed from kept nodes holds
// exactly what a plain map holds.
#include "unit.h"
#include "free_list.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <new>
#include <random>
#include <unordered_map>

using vrma::FreeList;
using vrma::NodeCache;

namespace {

// Counts the live objects and the allocations made since the last reset.
int g_live = 0;
int g_made = 0;

struct Obj {
	int value = 7;
	char bytes[24] = {};
	Obj() { g_live++, g_made++; }
	~Obj() { g_live--; }
	Obj &operator=(const Obj &o)
	{
		value = o.value;
		std::copy(o.bytes, o.bytes + sizeof bytes, bytes);
		return *this;
	}
	Obj(const Obj &) = delete;
};

START_TEST(test_free_list_reuse)
{
	g_live = g_made = 0;
	{
		FreeList<Obj> l;
		l.reserve(2);
		ck_assert_uint_eq(l.max(), 2);
		Obj *a = l.get(), *b = l.get(), *c = l.get();
		ck_assert(a && b && c);
		ck_assert_int_eq(g_made, 3);
		a->value = 1, a->bytes[3] = 9;
		l.put(a);
		l.put(b);
		l.put(c); // beyond the room: deleted
		ck_assert_uint_eq(l.size(), 2);
		ck_assert_int_eq(g_live, 2);
		l.put(nullptr);
		ck_assert_uint_eq(l.size(), 2);
		// Kept ones come back reset, and the last put first.
		const int made = g_made;
		Obj *d = l.get();
		ck_assert_ptr_eq(d, b);
		Obj *e = l.get();
		ck_assert_ptr_eq(e, a);
		ck_assert_int_eq(e->value, 7);
		ck_assert_int_eq(e->bytes[3], 0);
		// The reset made one temporary each, no lasting object.
		ck_assert_int_eq(g_live, 2);
		ck_assert_int_eq(g_made - made, 2);
		ck_assert_uint_eq(l.size(), 0);
		Obj *f = l.get(); // empty: a new one
		ck_assert_int_eq(g_live, 3);
		l.put(d), l.put(e), l.put(f);
		ck_assert_int_eq(g_live, 2);
	}
	ck_assert_int_eq(g_live, 0); // the list deletes what it keeps
}
END_TEST

START_TEST(test_free_list_no_room)
{
	g_live = g_made = 0;
	FreeList<Obj> l; // never reserved: keeps nothing
	Obj *a = l.get();
	l.put(a);
	ck_assert_uint_eq(l.size(), 0);
	ck_assert_int_eq(g_live, 0);
}
END_TEST

using Map = std::unordered_map<uint32_t, int *>;

START_TEST(test_node_cache_random)
{
	std::mt19937 rng(4242);
	NodeCache<Map> cache;
	cache.reserve(8);
	Map m;
	std::map<uint32_t, int *> ref;
	int cells[64];
	for (int round = 0; round < 20000; round++) {
		const uint32_t key = rng() % 64;
		if (rng() % 2) {
			const bool inserted = cache.insert(m, key, &cells[key]);
			ck_assert_int_eq(inserted, ref.emplace(key, &cells[key]).second);
		} else if (auto it = m.find(key); it != m.end()) {
			cache.erase(m, it);
			ck_assert_uint_eq(ref.erase(key), 1);
		} else {
			ck_assert_uint_eq(ref.count(key), 0);
		}
		ck_assert_uint_le(cache.size(), 8);
		ck_assert_uint_eq(m.size(), ref.size());
	}
	for (auto &[k, v] : ref) {
		auto it = m.find(k);
		ck_assert(it != m.end());
		ck_assert_ptr_eq(it->second, v);
	}
}
END_TEST

START_TEST(test_node_cache_reuse)
{
	NodeCache<Map> cache;
	cache.reserve(2);
	Map m;
	int x = 0, y = 0;
	ck_assert(cache.insert(m, 1, &x));
	ck_assert(cache.insert(m, 2, &y));
	const void *node1 = &*m.find(1);
	cache.erase(m, m.find(1));
	ck_assert_uint_eq(cache.size(), 1);
	ck_assert(m.find(1) == m.end());
	// The kept node carries the next entry: same storage, new key and value.
	ck_assert(cache.insert(m, 5, &y));
	ck_assert_uint_eq(cache.size(), 0);
	ck_assert_ptr_eq(&*m.find(5), node1);
	ck_assert_ptr_eq(m.find(5)->second, &y);
	// A key already there: refused, the node kept for the next one.
	cache.erase(m, m.find(2));
	ck_assert(!cache.insert(m, 5, &x));
	ck_assert_uint_eq(cache.size(), 1);
	ck_assert_ptr_eq(m.find(5)->second, &y);
	ck_assert_uint_eq(m.size(), 1);
}
END_TEST

} // namespace

Suite *free_list_suite()
{
	Suite *s = suite_create("free_list");
	TCase *tc = tcase_create("free_list");
	tcase_add_test(tc, test_free_list_reuse);
	tcase_add_test(tc, test_free_list_no_room);
	tcase_add_test(tc, test_node_cache_random);
	tcase_add_test(tc, test_node_cache_reuse);
	suite_add_tcase(s, tc);
	return s;
}
