// RDM addresses and the address vector's table: sockaddr and FI_ADDR_STR
// conversions (and the malformed strings refused), insertsym's address
// arithmetic; the table's handles, tombstones, reuse past the cap with
// generations, duplicates and their reverse mapping, bulk results, and a
// random run against a plain model.
#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <rdma/fi_errno.h>

#include "av_table.h"
#include "unit.h"

using namespace vrma::rdm;

namespace {

RdmAddr v4(uint32_t host_order_ip, uint16_t port)
{
	RdmAddr r;
	r.family = AF_INET;
	r.port = port;
	const uint32_t be = htonl(host_order_ip);
	memcpy(r.addr, &be, 4);
	return r;
}

RdmAddr v6(uint32_t low, uint16_t port)
{
	RdmAddr r;
	r.family = AF_INET6;
	r.port = port;
	r.addr[0] = 0xfd;
	const uint32_t be = htonl(low);
	memcpy(r.addr + 12, &be, 4);
	return r;
}

RdmAddr parsed(const char *s)
{
	RdmAddr a;
	ck_assert_msg(parse_addr(s, a), "%s refused", s);
	return a;
}

std::string formatted(const RdmAddr &a)
{
	char buf[kAddrStrMax];
	const size_t n = format_addr(a, buf, sizeof buf);
	ck_assert_uint_lt(n, sizeof buf);
	ck_assert_uint_eq(n, strlen(buf));
	return buf;
}

// Failed checks of a hot loop, reported once: every passing ck_assert writes
// its line to check's log, too slow for 10^6 checks on a loaded machine.
struct Tally {
	size_t bad = 0;
	int first_line = 0;
	void check(bool ok, int line)
	{
		if (!ok && bad++ == 0)
			first_line = line;
	}
};
#define TALLY(t, cond) (t).check((cond), __LINE__)
#define TALLY_DONE(t) ck_assert_msg((t).bad == 0, "%zu checks failed, the first at line %d", \
				    (t).bad, (t).first_line)

fi_addr_t must_insert(AvTable &av, const RdmAddr &a)
{
	fi_addr_t fa = FI_ADDR_NOTAVAIL;
	const int ret = av.insert(a, fa);
	ck_assert_int_eq(ret, 0);
	ck_assert_uint_ne(fa, FI_ADDR_NOTAVAIL);
	return fa;
}

} // namespace

START_TEST(addr_string_round_trip)
{
	struct {
		const char *in;
		const char *out; // the canonical spelling
		uint16_t family;
		uint16_t port;
	} const cases[] = {
		{"fi_sockaddr_in://1.2.3.4:5678", nullptr, AF_INET, 5678},
		{"fi_sockaddr_in://255.255.255.255:65535", nullptr, AF_INET, 65535},
		{"fi_sockaddr_in://0.0.0.0:0", nullptr, AF_INET, 0},
		{"fi_sockaddr_in://10.0.0.1:00080", "fi_sockaddr_in://10.0.0.1:80", AF_INET, 80},
		{"fi_sockaddr_in6://[::1]:5678", nullptr, AF_INET6, 5678},
		{"fi_sockaddr_in6://[fe80::1:2:3:4]:1", nullptr, AF_INET6, 1},
		{"fi_sockaddr_in6://[FD00:0::AB]:7", "fi_sockaddr_in6://[fd00::ab]:7", AF_INET6, 7},
		{"fi_sockaddr_in6://[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", nullptr,
		 AF_INET6, 65535},
		// IPv4-mapped: stored, and written back, as IPv4.
		{"fi_sockaddr_in6://[::ffff:10.1.2.3]:9", "fi_sockaddr_in://10.1.2.3:9", AF_INET, 9},
	};
	for (const auto &c : cases) {
		const RdmAddr a = parsed(c.in);
		ck_assert_uint_eq(a.family, c.family);
		ck_assert_uint_eq(a.port, c.port);
		ck_assert(valid(a));
		const std::string s = formatted(a);
		ck_assert_str_eq(s.c_str(), c.out ? c.out : c.in);
		ck_assert(parsed(s.c_str()) == a);
	}
	const RdmAddr a = parsed("fi_sockaddr_in://1.2.3.4:5678");
	ck_assert_uint_eq(a.addr[0], 1);
	ck_assert_uint_eq(a.addr[3], 4);

	// The longest string fits kAddrStrMax.
	RdmAddr big;
	big.family = AF_INET6;
	big.port = 65535;
	memset(big.addr, 0xff, 16);
	ck_assert_uint_le(formatted(big).size() + 1, kAddrStrMax);

	// Truncation reports the whole length, like snprintf (fi_av_straddr).
	char small[10];
	memset(small, 'x', sizeof small);
	ck_assert_uint_eq(format_addr(a, small, sizeof small), strlen("fi_sockaddr_in://1.2.3.4:5678"));
	ck_assert_str_eq(small, "fi_sockad"); // 9 characters and the NUL
	ck_assert_uint_eq(format_addr(a, nullptr, 0), 29);
	// Not valid: nothing.
	ck_assert_uint_eq(format_addr(RdmAddr{}, small, sizeof small), 0);
	ck_assert_str_eq(small, "");
}
END_TEST

START_TEST(malformed_addr_strings_refused)
{
	const char *const bad[] = {
		"",
		"1.2.3.4:5678",
		"fi_sockaddr_in://",
		"fi_sockaddr_in://1.2.3.4",     // no port (libfabric would take 0)
		"fi_sockaddr_in://:5678",       // no address
		"fi_sockaddr_in://1.2.3.4:",
		"fi_sockaddr_in://1.2.3.4:65536",
		"fi_sockaddr_in://1.2.3.4:123456",
		"fi_sockaddr_in://1.2.3.4:-1",
		"fi_sockaddr_in://1.2.3.4:+1",
		"fi_sockaddr_in://1.2.3.4:80x",
		"fi_sockaddr_in://1.2.3.4:80 ",
		"fi_sockaddr_in://1.2.3.4:8:0",
		"fi_sockaddr_in://1.2.3:80",
		"fi_sockaddr_in://1.2.3.256:80",
		"fi_sockaddr_in://1.2.3.4.5:80",
		"fi_sockaddr_in://localhost:80",
		"fi_sockaddr_in://[1.2.3.4]:80",
		"fi_sockaddr_in://::1:80",
		"FI_SOCKADDR_IN://1.2.3.4:80",
		"fi_sockaddr://1.2.3.4:80",
		"fi_sockaddr_ib://1.2.3.4:80",
		"fi_sockaddr_in6://::1:80",       // no brackets
		"fi_sockaddr_in6://[::1]",        // no port
		"fi_sockaddr_in6://[::1]80",
		"fi_sockaddr_in6://[::1]:",
		"fi_sockaddr_in6://[::1:80",
		"fi_sockaddr_in6://[]:80",
		"fi_sockaddr_in6://[1.2.3.4]:80",
		"fi_sockaddr_in6://[fe80::1%eth0]:80",
		"fi_sockaddr_in6://[::g]:80",
		"fi_sockaddr_in6://[1:2:3:4:5:6:7:8:9]:80",
		"fi_sockaddr_in6://[::1]:80]",
		"fi_sockaddr_in6://[0000000000000000000000000000000000000000000000000000000001]:80",
	};
	RdmAddr a = parsed("fi_sockaddr_in://9.9.9.9:9");
	const RdmAddr before = a;
	for (const char *s : bad) {
		ck_assert_msg(!parse_addr(s, a), "'%s' accepted", s);
		ck_assert(a == before); // untouched
	}
	// An embedded NUL ends nothing: the view's length counts.
	const std::string nul("fi_sockaddr_in://1.2.3.4\0junk:80", 32);
	ck_assert(!parse_addr(nul, a));
	const std::string nul_port("fi_sockaddr_in://1.2.3.4:80\0", 28);
	ck_assert(!parse_addr(nul_port, a));
	ck_assert(parse_addr(std::string_view("fi_sockaddr_in://1.2.3.4:80trailing", 27), a));
}
END_TEST

START_TEST(addr_sockaddr_conversions)
{
	sockaddr_in sin{};
	sin.sin_family = AF_INET;
	sin.sin_port = htons(7471);
	inet_pton(AF_INET, "10.99.0.1", &sin.sin_addr);
	RdmAddr a;
	ck_assert(from_sockaddr(reinterpret_cast<sockaddr *>(&sin), sizeof sin, a));
	ck_assert(a == parsed("fi_sockaddr_in://10.99.0.1:7471"));
	ck_assert(!from_sockaddr(reinterpret_cast<sockaddr *>(&sin), sizeof sin - 1, a));
	sockaddr_storage ss;
	ck_assert_uint_eq(to_sockaddr(a, ss), sizeof(sockaddr_in));
	ck_assert_int_eq(memcmp(&ss, &sin, sizeof sin), 0);

	sockaddr_in6 sin6{};
	sin6.sin6_family = AF_INET6;
	sin6.sin6_port = htons(1);
	inet_pton(AF_INET6, "fd00::1234", &sin6.sin6_addr);
	sin6.sin6_flowinfo = htonl(5); // dropped
	ck_assert(from_sockaddr(reinterpret_cast<sockaddr *>(&sin6), sizeof sin6, a));
	ck_assert(a == parsed("fi_sockaddr_in6://[fd00::1234]:1"));
	ck_assert(!from_sockaddr(reinterpret_cast<sockaddr *>(&sin6), sizeof(sockaddr_in), a));
	ck_assert_uint_eq(to_sockaddr(a, ss), sizeof(sockaddr_in6));
	sin6.sin6_flowinfo = 0;
	ck_assert_int_eq(memcmp(&ss, &sin6, sizeof sin6), 0);
	// A scope id cannot be kept: refused rather than dropped.
	sin6.sin6_scope_id = 2;
	ck_assert(!from_sockaddr(reinterpret_cast<sockaddr *>(&sin6), sizeof sin6, a));
	sin6.sin6_scope_id = 0;
	// IPv4-mapped becomes IPv4, and goes back out as a sockaddr_in.
	inet_pton(AF_INET6, "::ffff:10.99.0.1", &sin6.sin6_addr);
	sin6.sin6_port = htons(7471);
	ck_assert(from_sockaddr(reinterpret_cast<sockaddr *>(&sin6), sizeof sin6, a));
	ck_assert(a == parsed("fi_sockaddr_in://10.99.0.1:7471"));

	sockaddr_storage other{};
	other.ss_family = AF_UNIX;
	ck_assert(!from_sockaddr(reinterpret_cast<sockaddr *>(&other), sizeof other, a));
	ck_assert(!from_sockaddr(nullptr, sizeof other, a));
	ck_assert_uint_eq(to_sockaddr(RdmAddr{}, ss), 0);
}
END_TEST

START_TEST(addr_node_service_and_nth)
{
	RdmAddr a;
	ck_assert(parse_node_service("10.0.0.1", "7471", a));
	ck_assert(a == parsed("fi_sockaddr_in://10.0.0.1:7471"));
	ck_assert(parse_node_service("fd00::1", "1", a));
	ck_assert(a == parsed("fi_sockaddr_in6://[fd00::1]:1"));
	ck_assert(parse_node_service("::ffff:1.2.3.4", "5", a));
	ck_assert_uint_eq(a.family, AF_INET);
	ck_assert(!parse_node_service("[fd00::1]", "1", a));
	ck_assert(!parse_node_service("localhost", "1", a));
	ck_assert(!parse_node_service("10.0.0.1", "http", a));
	ck_assert(!parse_node_service("10.0.0.1", "", a));
	ck_assert(!parse_node_service(nullptr, "1", a));
	ck_assert(!parse_node_service("10.0.0.1", nullptr, a));

	// insertsym: nodes count up the address with carries, services the port.
	const RdmAddr base = parsed("fi_sockaddr_in://10.0.0.254:7000");
	RdmAddr out;
	ck_assert(nth_addr(base, 0, 0, out) && out == base);
	ck_assert(nth_addr(base, 1, 2, out));
	ck_assert(out == parsed("fi_sockaddr_in://10.0.0.255:7002"));
	ck_assert(nth_addr(base, 3, 0, out));
	ck_assert(out == parsed("fi_sockaddr_in://10.0.1.1:7000"));
	ck_assert(nth_addr(base, 0x10000, 0, out));
	ck_assert(out == parsed("fi_sockaddr_in://10.1.0.254:7000"));
	ck_assert(nth_addr(parsed("fi_sockaddr_in://255.255.255.254:1"), 1, 65534, out));
	ck_assert(out == parsed("fi_sockaddr_in://255.255.255.255:65535"));
	ck_assert(!nth_addr(parsed("fi_sockaddr_in://255.255.255.254:1"), 2, 0, out));
	ck_assert(!nth_addr(base, 0, 65535 - 7000 + 1, out));
	ck_assert(!nth_addr(base, UINT64_MAX, 0, out));
	ck_assert(nth_addr(parsed("fi_sockaddr_in6://[fd00::ffff:ffff:ffff]:1"), 1, 0, out));
	ck_assert(out == parsed("fi_sockaddr_in6://[fd00:0:0:0:1::]:1"));
	ck_assert(nth_addr(parsed("fi_sockaddr_in6://[fd00::]:1"), UINT64_MAX, 0, out));
	ck_assert(out == parsed("fi_sockaddr_in6://[fd00::ffff:ffff:ffff:ffff]:1"));
	ck_assert(!nth_addr(parsed("fi_sockaddr_in6://[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:1"),
			    1, 0, out));
	// An IPv6 address counting into the IPv4-mapped range is not one.
	ck_assert(!nth_addr(parsed("fi_sockaddr_in6://[::fffe:ffff:ffff]:1"), 1, 0, out));
	ck_assert(!nth_addr(RdmAddr{}, 0, 0, out));
}
END_TEST

START_TEST(av_insert_lookup_remove_reverse)
{
	AvTable av;
	const RdmAddr a = v4(0x0a000001, 1), b = v6(2, 2), c = v4(0x0a000001, 2);
	ck_assert_uint_eq(av.reverse(a), FI_ADDR_NOTAVAIL);
	ck_assert(!av.lookup(0));
	ck_assert_uint_eq(must_insert(av, a), 0);
	ck_assert_uint_eq(must_insert(av, b), 1);
	ck_assert_uint_eq(must_insert(av, c), 2);
	ck_assert_uint_eq(av.size(), 3);
	for (fi_addr_t i = 0; i < 3; i++) {
		const auto e = av.lookup(i);
		ck_assert(e.has_value());
		ck_assert_uint_eq(e->index, i);
		ck_assert_uint_eq(e->gen, 0);
		ck_assert(e->addr == (i == 0 ? a : i == 1 ? b : c));
		ck_assert_uint_eq(av.reverse(e->addr), i);
	}
	ck_assert_int_eq(av.remove(1), 0);
	ck_assert_uint_eq(av.size(), 2);
	ck_assert(!av.lookup(1));
	ck_assert_uint_eq(av.reverse(b), FI_ADDR_NOTAVAIL);
	ck_assert_int_eq(av.remove(1), -FI_EINVAL); // twice
	ck_assert(av.lookup(0) && av.lookup(2));
	// Never inserted, and handles with bits a Table never hands out.
	ck_assert(!av.lookup(3));
	ck_assert_int_eq(av.remove(3), -FI_EINVAL);
	ck_assert(!av.lookup(FI_ADDR_NOTAVAIL));
	ck_assert(!av.lookup(fi_addr_t(1) << 32));
	ck_assert_int_eq(av.remove(FI_ADDR_NOTAVAIL), -FI_EINVAL);
}
END_TEST

START_TEST(av_refuses_unreachable_addresses)
{
	AvTable av;
	fi_addr_t fa = 12345;
	RdmAddr mapped = v6(1, 1);
	memset(mapped.addr, 0, 16);
	mapped.addr[10] = mapped.addr[11] = 0xff;
	mapped.addr[15] = 1;
	for (const RdmAddr &bad : {RdmAddr{}, v4(0x0a000001, 0), v4(0, 80), v6(0, 0), mapped}) {
		ck_assert_int_eq(av.insert(bad, fa), -FI_EINVAL);
		ck_assert_uint_eq(fa, 12345); // untouched
	}
	ck_assert_uint_eq(av.size(), 0);
	ck_assert_uint_eq(av.slots(), 0);
	ck_assert_uint_eq(must_insert(av, v4(0x0a000001, 80)), 0); // numbering unaffected
}
END_TEST

START_TEST(av_tombstones_are_not_reused_below_the_cap)
{
	AvTable av(AvTable::Kind::Table, 1000);
	for (uint32_t round = 0; round < 300; round++) {
		const fi_addr_t fa = must_insert(av, v4(0x0a000000 + round, 1));
		ck_assert_uint_eq(fa, round); // always a fresh index
		ck_assert_int_eq(av.remove(fa), 0);
	}
	ck_assert_uint_eq(av.size(), 0);
	ck_assert_uint_eq(av.slots(), 300);
	// Every old handle stays dead, even for an address inserted again.
	must_insert(av, v4(0x0a000000, 1));
	for (fi_addr_t i = 0; i < 300; i++) {
		ck_assert(!av.lookup(i));
		ck_assert_int_eq(av.remove(i), -FI_EINVAL);
	}
	ck_assert_uint_eq(av.reverse(v4(0x0a000000, 1)), 300);
}
END_TEST

START_TEST(av_reuse_past_the_cap)
{
	for (AvTable::Kind kind : {AvTable::Kind::Table, AvTable::Kind::Map}) {
		AvTable av(kind, 3);
		const fi_addr_t h0 = must_insert(av, v4(1, 1));
		const fi_addr_t h1 = must_insert(av, v4(2, 1));
		const fi_addr_t h2 = must_insert(av, v4(3, 1));
		ck_assert_uint_eq(h0, 0); // Map handles equal Table ones before reuse
		ck_assert_uint_eq(h2, 2);
		fi_addr_t fa;
		ck_assert_int_eq(av.insert(v4(4, 1), fa), -FI_ENOSPC);
		// Oldest removal first: 1, then 0.
		ck_assert_int_eq(av.remove(h1), 0);
		ck_assert_int_eq(av.remove(h0), 0);
		const fi_addr_t n1 = must_insert(av, v4(4, 1));
		const fi_addr_t n0 = must_insert(av, v4(5, 1));
		ck_assert_int_eq(av.insert(v4(6, 1), fa), -FI_ENOSPC);
		ck_assert_uint_eq(av.slots(), 3);
		const auto e1 = av.lookup(n1), e0 = av.lookup(n0);
		ck_assert(e1 && e0);
		ck_assert_uint_eq(e1->index, 1);
		ck_assert_uint_eq(e0->index, 0);
		ck_assert_uint_eq(e1->gen, 1);
		ck_assert(e1->addr == v4(4, 1));
		ck_assert_uint_eq(av.reverse(v4(4, 1)), n1);
		ck_assert_uint_eq(av.reverse(v4(2, 1)), FI_ADDR_NOTAVAIL);
		if (kind == AvTable::Kind::Map) {
			// The generation is in the handle: the stale one is dead.
			ck_assert_uint_eq(n1, fi_addr_t(1) << 32 | 1);
			ck_assert(!av.lookup(h1));
			ck_assert_int_eq(av.remove(h1), -FI_EINVAL);
			ck_assert(!av.lookup(n1 + (fi_addr_t(1) << 56)));
		} else {
			// Documented hazard: a Table handle is the bare index.
			ck_assert_uint_eq(n1, 1);
			ck_assert(av.lookup(h1)->addr == v4(4, 1));
		}
	}
}
END_TEST

START_TEST(av_map_handles_carry_the_generation)
{
	// One slot reused over and over: each handle is new, the old ones dead.
	AvTable av(AvTable::Kind::Map, 1);
	fi_addr_t fa = must_insert(av, v4(1, 1));
	std::vector<fi_addr_t> old;
	for (uint32_t i = 1; i <= 1000; i++) {
		ck_assert_int_eq(av.remove(fa), 0);
		old.push_back(fa);
		fa = must_insert(av, v4(1 + i % 2, 1));
		ck_assert_uint_eq(fa, fi_addr_t(i) << 32);
		ck_assert_uint_eq(av.lookup(fa)->gen, i);
	}
	for (fi_addr_t o : old)
		ck_assert(!av.lookup(o));
	// Bits 56-63 are never set, and a handle with them is refused.
	ck_assert(!av.lookup(fa | fi_addr_t(1) << 63));
}
END_TEST

START_TEST(av_duplicates_reverse_to_the_lowest_live_index)
{
	AvTable av;
	const RdmAddr a = v6(1, 9), b = v6(2, 9);
	ck_assert_uint_eq(must_insert(av, a), 0);
	ck_assert_uint_eq(must_insert(av, b), 1);
	ck_assert_uint_eq(must_insert(av, a), 2); // a duplicate gets its own index
	ck_assert_uint_eq(must_insert(av, a), 3);
	ck_assert_uint_eq(av.reverse(a), 0);
	ck_assert(av.lookup(3)->addr == a);
	ck_assert_int_eq(av.remove(2), 0); // from the middle of the list
	ck_assert_uint_eq(av.reverse(a), 0);
	ck_assert_int_eq(av.remove(0), 0);
	ck_assert_uint_eq(av.reverse(a), 3);
	ck_assert_int_eq(av.remove(3), 0);
	ck_assert_uint_eq(av.reverse(a), FI_ADDR_NOTAVAIL);
	ck_assert_uint_eq(av.reverse(b), 1);

	// A reused slot can be lower than the address's live ones.
	AvTable capped(AvTable::Kind::Table, 3);
	must_insert(capped, a); // 0
	must_insert(capped, a); // 1
	must_insert(capped, b); // 2
	ck_assert_int_eq(capped.remove(0), 0);
	ck_assert_uint_eq(capped.reverse(a), 1);
	ck_assert_uint_eq(must_insert(capped, a), 0);
	ck_assert_uint_eq(capped.reverse(a), 0);
	ck_assert_int_eq(capped.remove(0), 0);
	ck_assert_uint_eq(capped.reverse(a), 1);
	ck_assert_int_eq(capped.remove(1), 0);
	ck_assert_uint_eq(capped.reverse(a), FI_ADDR_NOTAVAIL);
}
END_TEST

START_TEST(av_bulk_insert_reports_each_entry)
{
	AvTable av(AvTable::Kind::Table, 4);
	const RdmAddr in[] = {v4(1, 1), RdmAddr{}, v4(2, 1), v4(1, 1), v4(3, 0), v4(4, 1), v4(5, 1)};
	constexpr size_t n = sizeof in / sizeof in[0];
	fi_addr_t out[n];
	int err[n];
	ck_assert_uint_eq(av.insert_bulk(in, n, out, err), 4);
	const fi_addr_t want[n] = {0, FI_ADDR_NOTAVAIL, 1, 2, FI_ADDR_NOTAVAIL, 3, FI_ADDR_NOTAVAIL};
	const int want_err[n] = {0, -FI_EINVAL, 0, 0, -FI_EINVAL, 0, -FI_ENOSPC};
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(out[i], want[i]);
		ck_assert_int_eq(err[i], want_err[i]);
	}
	// Without result arrays (FI_AV_TABLE applications may pass none).
	AvTable av2;
	ck_assert_uint_eq(av2.insert_bulk(in, n, nullptr, nullptr), 5);
	ck_assert_uint_eq(av2.insert_bulk(in, 0, nullptr, nullptr), 0);
	ck_assert(av2.lookup(4)->addr == v4(5, 1));
}
END_TEST

START_TEST(av_many_entries)
{
	constexpr uint32_t kCount = 100000;
	AvTable av(AvTable::Kind::Map);
	ck_assert_int_eq(av.reserve(kCount), 0);
	std::vector<RdmAddr> addrs;
	for (uint32_t i = 0; i < kCount; i++)
		addrs.push_back(i % 3 ? v4(0x0a000000 + i, uint16_t(1 + i % 7)) : v6(i, 7471));
	Tally t;
	fi_addr_t fa = 0;
	for (uint32_t i = 0; i < kCount; i++)
		TALLY(t, av.insert(addrs[i], fa) == 0 && fa == i);
	for (uint32_t i = 0; i < kCount; i++) {
		const auto e = av.lookup(i);
		TALLY(t, e && e->addr == addrs[i]);
		TALLY(t, av.reverse(addrs[i]) == i);
	}
	for (uint32_t i = 0; i < kCount; i += 2)
		TALLY(t, av.remove(i) == 0);
	TALLY_DONE(t);
	ck_assert_uint_eq(av.size(), kCount / 2);
	for (uint32_t i = 0; i < kCount; i++) {
		TALLY(t, av.lookup(i).has_value() == (i % 2 == 1));
		TALLY(t, av.reverse(addrs[i]) == (i % 2 ? i : FI_ADDR_NOTAVAIL));
	}
	// The removed addresses come back under new indices.
	for (uint32_t i = 0; i < kCount; i += 2)
		TALLY(t, av.insert(addrs[i], fa) == 0 && fa == kCount + i / 2);
	TALLY_DONE(t);
	ck_assert_uint_eq(av.reverse(addrs[0]), kCount);
	ck_assert_uint_eq(av.size(), kCount);
}
END_TEST

// Random inserts and removes over a few addresses (many duplicates) in a small
// capped table, checked after every step against a plain model: a list of
// slots, reverse = the lowest live slot with the address.
START_TEST(av_random_against_model)
{
	for (AvTable::Kind kind : {AvTable::Kind::Table, AvTable::Kind::Map}) {
		constexpr size_t kCap = 16;
		AvTable av(kind, kCap);
		struct ModelSlot {
			RdmAddr addr;
			uint32_t gen = 0;
			bool live = false;
		};
		std::vector<ModelSlot> model;
		std::vector<uint32_t> removal_order; // tombstones, oldest first
		std::vector<fi_addr_t> handed_out;
		std::mt19937 rng(7 + int(kind));
		auto handle = [&](uint32_t i) {
			return kind == AvTable::Kind::Table ? fi_addr_t(i)
							    : fi_addr_t(model[i].gen) << 32 | i;
		};
		Tally t;
		for (int step = 0; step < 20000; step++) {
			const unsigned op = rng() % 8;
			if (op < 4) {
				const RdmAddr a = v4(1 + rng() % 5, 1);
				fi_addr_t fa;
				const int ret = av.insert(a, fa);
				uint32_t idx;
				if (model.size() < kCap) {
					idx = uint32_t(model.size());
					model.push_back({});
				} else if (!removal_order.empty()) {
					idx = removal_order.front();
					removal_order.erase(removal_order.begin());
					model[idx].gen++;
				} else {
					TALLY(t, ret == -FI_ENOSPC);
					continue;
				}
				TALLY(t, ret == 0);
				model[idx].addr = a;
				model[idx].live = true;
				TALLY(t, fa == handle(idx));
				handed_out.push_back(fa);
			} else if (!handed_out.empty()) {
				const fi_addr_t fa = handed_out[rng() % handed_out.size()];
				const uint32_t idx = uint32_t(fa & UINT32_MAX);
				const bool live = model[idx].live && handle(idx) == fa;
				TALLY(t, av.remove(fa) == (live ? 0 : -FI_EINVAL));
				if (live) {
					model[idx].live = false;
					removal_order.push_back(idx);
				}
			}
			size_t live = 0;
			for (uint32_t i = 0; i < model.size(); i++) {
				const auto e = av.lookup(handle(i));
				TALLY(t, e.has_value() == model[i].live);
				live += model[i].live;
				if (e)
					TALLY(t, e->addr == model[i].addr && e->gen == model[i].gen);
			}
			TALLY(t, av.size() == live);
			for (uint32_t host = 1; host <= 5; host++) {
				fi_addr_t want = FI_ADDR_NOTAVAIL;
				for (uint32_t i = 0; i < model.size() && want == FI_ADDR_NOTAVAIL; i++)
					if (model[i].live && model[i].addr == v4(host, 1))
						want = handle(i);
				TALLY(t, av.reverse(v4(host, 1)) == want);
			}
		}
		TALLY_DONE(t);
		// The run reached the cap and reused slots.
		ck_assert_uint_eq(av.slots(), kCap);
		ck_assert(std::any_of(model.begin(), model.end(),
				      [](const ModelSlot &m) { return m.gen > 1; }));
	}
}
END_TEST

START_TEST(av_user_ids_follow_their_entry)
{
	for (AvTable::Kind kind : {AvTable::Kind::Table, AvTable::Kind::Map}) {
		AvTable av(kind, 2);
		const fi_addr_t h0 = must_insert(av, v4(1, 1));
		const fi_addr_t h1 = must_insert(av, v4(2, 1));
		// Without an id an entry reports its handle; unknown stays unknown.
		ck_assert_uint_eq(av.report_addr(h0), h0);
		ck_assert_uint_eq(av.report_addr(FI_ADDR_NOTAVAIL), FI_ADDR_NOTAVAIL);
		ck_assert_int_eq(av.set_user_id(h0, 0xfeedULL), 0);
		ck_assert_int_eq(av.set_user_id(h1, FI_ADDR_NOTAVAIL), 0);
		ck_assert_uint_eq(av.report_addr(h0), 0xfeedULL);
		ck_assert_uint_eq(av.report_addr(h1), FI_ADDR_NOTAVAIL);
		ck_assert_int_eq(av.set_user_id(h0, 7), 0); // set again: replaced
		ck_assert_uint_eq(av.report_addr(h0), 7);
		// Not live: refused, and reported as given.
		ck_assert_int_eq(av.set_user_id(5, 1), -FI_EINVAL);
		ck_assert_int_eq(av.remove(h0), 0);
		ck_assert_int_eq(av.set_user_id(h0, 1), -FI_EINVAL);
		ck_assert_uint_eq(av.report_addr(h0), h0);
		// The slot reused (the cap is 2): its new entry has no id.
		const fi_addr_t n0 = must_insert(av, v4(3, 1));
		ck_assert_uint_eq(av.report_addr(n0), n0);
		ck_assert_uint_eq(av.report_addr(h1), FI_ADDR_NOTAVAIL);
	}
}
END_TEST

Suite *av_table_suite()
{
	Suite *s = suite_create("av_table");
	TCase *addr = tcase_create("addr");
	tcase_add_test(addr, addr_string_round_trip);
	tcase_add_test(addr, malformed_addr_strings_refused);
	tcase_add_test(addr, addr_sockaddr_conversions);
	tcase_add_test(addr, addr_node_service_and_nth);
	suite_add_tcase(s, addr);
	TCase *tc = tcase_create("table");
	tcase_add_test(tc, av_insert_lookup_remove_reverse);
	tcase_add_test(tc, av_refuses_unreachable_addresses);
	tcase_add_test(tc, av_tombstones_are_not_reused_below_the_cap);
	tcase_add_test(tc, av_reuse_past_the_cap);
	tcase_add_test(tc, av_map_handles_carry_the_generation);
	tcase_add_test(tc, av_duplicates_reverse_to_the_lowest_live_index);
	tcase_add_test(tc, av_bulk_insert_reports_each_entry);
	tcase_add_test(tc, av_many_entries);
	tcase_add_test(tc, av_random_against_model);
	tcase_add_test(tc, av_user_ids_follow_their_entry);
	suite_add_tcase(s, tc);
	return s;
}
