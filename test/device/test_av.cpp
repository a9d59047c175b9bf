// Address vectors: fi_av_open's attributes, inserts (sockaddr arrays,
// node/service, symmetric ranges, strings), per-address failures with
// FI_SYNC_ERR, lookup (byte-exact, too-small buffers), straddr, remove,
// FI_AV_MAP handles, FI_EVENT completions on a bound EQ, and the IPv6 and
// FI_ADDR_STR domain formats.
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>

using namespace vt;

namespace {

sockaddr_in sin4(const char *ip, uint16_t port)
{
	sockaddr_in s{};
	s.sin_family = AF_INET;
	s.sin_port = htons(port);
	ck_assert_int_eq(inet_pton(AF_INET, ip, &s.sin_addr), 1);
	return s;
}

sockaddr_in6 sin6(const char *ip, uint16_t port)
{
	sockaddr_in6 s{};
	s.sin6_family = AF_INET6;
	s.sin6_port = htons(port);
	ck_assert_int_eq(inet_pton(AF_INET6, ip, &s.sin6_addr), 1);
	return s;
}

// The handle names exactly this sockaddr_in.
void expect_v4(fid_av *av, fi_addr_t fa, const sockaddr_in &want)
{
	sockaddr_in got;
	memset(&got, 0xa5, sizeof got);
	size_t len = sizeof got;
	ck_assert_int_eq(fi_av_lookup(av, fa, &got, &len), 0);
	ck_assert_uint_eq(len, sizeof(sockaddr_in));
	ck_assert_msg(memcmp(&got, &want, sizeof want) == 0, "handle %llu: another address",
		      static_cast<unsigned long long>(fa));
}

void expect_v4(fid_av *av, fi_addr_t fa, const char *ip, uint16_t port)
{
	expect_v4(av, fa, sin4(ip, port));
}

// fi_av_straddr gives exactly this string.
void expect_straddr(fid_av *av, const void *addr, const char *want)
{
	char buf[128];
	size_t len = sizeof buf;
	ck_assert_ptr_eq(fi_av_straddr(av, addr, buf, &len), buf);
	ck_assert_str_eq(buf, want);
	ck_assert_uint_eq(len, strlen(want) + 1);
}

// An IPv6 domain (the test bed's veth0 has a link-local address).
fi_info *ipv6_hints()
{
	fi_info *h = base_hints();
	h->addr_format = FI_SOCKADDR_IN6;
	return h;
}

} // namespace

START_TEST(av_table_insert_lookup)
{
	Env env;
	fid_av *av = open_av(env, FI_AV_TABLE, 0, 16);
	const sockaddr_in a[3] = {sin4("10.99.0.1", 7000), sin4("10.99.0.2", 7001),
				  sin4("192.168.200.254", 65535)};
	fi_addr_t fa[3] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
	ck_assert_int_eq(fi_av_insert(av, a, 3, fa, 0, nullptr), 3);
	for (fi_addr_t i = 0; i < 3; i++) {
		ck_assert_uint_eq(fa[i], i);
		expect_v4(av, i, a[i]);
	}
	// Indices continue across calls; fi_addr may be NULL with FI_AV_TABLE.
	const sockaddr_in b[2] = {sin4("10.99.0.3", 1), sin4("10.99.0.1", 7002)};
	fi_addr_t fb[2];
	ck_assert_int_eq(fi_av_insert(av, b, 2, fb, FI_MORE, nullptr), 2);
	ck_assert_uint_eq(fb[0], 3);
	ck_assert_uint_eq(fb[1], 4);
	const sockaddr_in c = sin4("172.16.0.9", 80);
	ck_assert_int_eq(fi_av_insert(av, &c, 1, nullptr, 0, nullptr), 1);
	expect_v4(av, 3, b[0]);
	expect_v4(av, 4, b[1]);
	expect_v4(av, 5, c);
	// Nothing beyond.
	sockaddr_in out;
	size_t len = sizeof out;
	ck_assert_int_eq(fi_av_lookup(av, 6, &out, &len), -FI_EINVAL);
	ck_assert_int_eq(fi_av_lookup(av, FI_ADDR_NOTAVAIL, &out, &len), -FI_EINVAL);
	// A count of 0 inserts nothing.
	ck_assert_int_eq(fi_av_insert(av, nullptr, 0, nullptr, 0, nullptr), 0);

	// straddr: exact text; truncation keeps a terminator and reports the
	// whole length.
	expect_straddr(av, &a[0], "fi_sockaddr_in://10.99.0.1:7000");
	expect_straddr(av, &a[2], "fi_sockaddr_in://192.168.200.254:65535");
	const sockaddr_in zero = sin4("0.0.0.0", 0); // printable, though not insertable
	expect_straddr(av, &zero, "fi_sockaddr_in://0.0.0.0:0");
	char small[10];
	memset(small, 'x', sizeof small);
	len = sizeof small;
	ck_assert_ptr_eq(fi_av_straddr(av, &a[0], small, &len), small);
	ck_assert_uint_eq(len, strlen("fi_sockaddr_in://10.99.0.1:7000") + 1);
	ck_assert_str_eq(small, "fi_sockad");
	len = 0; // a size query
	ck_assert_ptr_null(fi_av_straddr(av, &a[0], nullptr, &len));
	ck_assert_uint_eq(len, 32);
	// Not an IPv4 address: no string.
	sockaddr_in unix_family = a[0];
	unix_family.sin_family = AF_UNIX;
	len = sizeof small;
	ck_assert_ptr_null(fi_av_straddr(av, &unix_family, small, &len));

	ck_assert_int_eq(fi_close(&av->fid), 0);
}
END_TEST

START_TEST(av_map_handles)
{
	Env env;
	// FI_AV_UNSPEC: vrma chooses FI_AV_MAP and says so.
	fi_av_attr attr{};
	attr.type = FI_AV_UNSPEC;
	fid_av *av = nullptr;
	ck_assert_int_eq(fi_av_open(env.domain, &attr, &av, nullptr), 0);
	ck_assert_int_eq(attr.type, FI_AV_MAP);
	const sockaddr_in a[3] = {sin4("10.99.0.1", 7000), sin4("10.99.0.1", 7001),
				  sin4("10.99.0.2", 7000)};
	fi_addr_t fa[3];
	ck_assert_int_eq(fi_av_insert(av, a, 3, fa, 0, nullptr), 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_ne(fa[i], FI_ADDR_NOTAVAIL);
		expect_v4(av, fa[i], a[i]);
	}
	ck_assert_uint_ne(fa[0], fa[1]);
	ck_assert_uint_ne(fa[1], fa[2]);
	// A handle never returned does not resolve.
	sockaddr_in out;
	size_t len = sizeof out;
	ck_assert_int_eq(fi_av_lookup(av, fa[0] | (1ULL << 40), &out, &len), -FI_EINVAL);
	// Removed: dead for good, and a new insert gets a new handle.
	ck_assert_int_eq(fi_av_remove(av, &fa[1], 1, 0), 0);
	ck_assert_int_eq(fi_av_lookup(av, fa[1], &out, &len), -FI_EINVAL);
	fi_addr_t again = FI_ADDR_NOTAVAIL;
	ck_assert_int_eq(fi_av_insert(av, &a[1], 1, &again, 0, nullptr), 1);
	ck_assert_uint_ne(again, fa[1]);
	expect_v4(av, again, a[1]);
	ck_assert_int_eq(fi_av_lookup(av, fa[1], &out, &len), -FI_EINVAL);
	expect_v4(av, fa[0], a[0]);
	expect_v4(av, fa[2], a[2]);
	// MAP handles cannot be guessed: fi_addr is required.
	ck_assert_int_eq(fi_av_insert(av, a, 1, nullptr, 0, nullptr), -FI_EINVAL);
	ck_assert_int_eq(fi_close(&av->fid), 0);
}
END_TEST

START_TEST(av_insertsvc_insertsym)
{
	Env env;
	fid_av *av = open_av(env, FI_AV_TABLE);
	fi_addr_t fa = FI_ADDR_NOTAVAIL;
	ck_assert_int_eq(fi_av_insertsvc(av, "10.99.0.1", "4711", &fa, 0, nullptr), 1);
	ck_assert_uint_eq(fa, 0);
	expect_v4(av, 0, "10.99.0.1", 4711);
	// An FI_ADDR_STR node with no service.
	ck_assert_int_eq(fi_av_insertsvc(av, "fi_sockaddr_in://10.99.0.2:4712", nullptr, &fa, 0, nullptr), 1);
	ck_assert_uint_eq(fa, 1);
	expect_v4(av, 1, "10.99.0.2", 4712);
	// A host name.
	ck_assert_int_eq(fi_av_insertsvc(av, "localhost", "4713", &fa, 0, nullptr), 1);
	ck_assert_uint_eq(fa, 2);
	expect_v4(av, 2, "127.0.0.1", 4713);

	// Three services of one node: ports count up.
	fi_addr_t sym[6];
	ck_assert_int_eq(fi_av_insertsym(av, "10.99.0.1", 1, "5000", 3, sym, 0, nullptr), 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(sym[i], 3 + i);
		expect_v4(av, sym[i], "10.99.0.1", static_cast<uint16_t>(5000 + i));
	}
	// Two nodes of three services: a node's services before the next node,
	// the address counting up across the last byte.
	ck_assert_int_eq(fi_av_insertsym(av, "10.99.0.255", 2, "6000", 3, sym, 0, nullptr), 6);
	const char *nodes[2] = {"10.99.0.255", "10.99.1.0"};
	for (int i = 0; i < 6; i++) {
		ck_assert_uint_eq(sym[i], 6 + i);
		expect_v4(av, sym[i], nodes[i / 3], static_cast<uint16_t>(6000 + i % 3));
	}
	// Nothing to insert.
	ck_assert_int_eq(fi_av_insertsym(av, "10.99.0.1", 0, "5000", 3, sym, 0, nullptr), 0);

	// Per-address failures: the port runs past 65535.
	int errors[3] = {-1, -1, -1};
	ck_assert_int_eq(fi_av_insertsym(av, "10.99.0.3", 1, "65534", 3, sym, FI_SYNC_ERR, errors), 2);
	ck_assert_uint_eq(sym[0], 12);
	ck_assert_uint_eq(sym[1], 13);
	ck_assert_uint_eq(sym[2], FI_ADDR_NOTAVAIL);
	ck_assert_int_eq(errors[0], 0);
	ck_assert_int_eq(errors[1], 0);
	ck_assert_int_eq(errors[2], FI_EINVAL);
	expect_v4(av, 13, "10.99.0.3", 65535);
	// A port out of range, port 0, an IPv6 node in an IPv4 AV, a malformed
	// address string: nothing inserted, each with FI_EINVAL.
	const char *bad[][2] = {{"10.99.0.1", "70000"}, {"10.99.0.1", "0"}, {"fd00::1", "4711"},
				{"fi_sockaddr_in://10.99.0.1", nullptr}};
	for (auto &nb : bad) {
		int err = -1;
		fa = 0;
		ck_assert_msg(fi_av_insertsvc(av, nb[0], nb[1], &fa, FI_SYNC_ERR, &err) == 0,
			      "%s:%s inserted", nb[0], nb[1] ? nb[1] : "(null)");
		ck_assert_uint_eq(fa, FI_ADDR_NOTAVAIL);
		ck_assert_int_eq(err, FI_EINVAL);
	}
	// Whole-call errors.
	ck_assert_int_eq(fi_av_insertsvc(av, nullptr, "4711", &fa, 0, nullptr), -FI_EINVAL);
	ck_assert_int_eq(fi_av_insertsym(av, "localhost", 2, "4711", 1, sym, 0, nullptr), -FI_EINVAL);
	ck_assert_uint_eq(sym[0], FI_ADDR_NOTAVAIL);
	ck_assert_uint_eq(sym[1], FI_ADDR_NOTAVAIL);
	// None of the failures took an index.
	ck_assert_int_eq(fi_av_insertsvc(av, "10.99.0.4", "1", &fa, 0, nullptr), 1);
	ck_assert_uint_eq(fa, 14);
	ck_assert_int_eq(fi_close(&av->fid), 0);
}
END_TEST

START_TEST(av_remove)
{
	Env env;
	fid_av *av = open_av(env, FI_AV_TABLE);
	const sockaddr_in a[3] = {sin4("10.99.0.1", 7000), sin4("10.99.0.2", 7000),
				  sin4("10.99.0.3", 7000)};
	fi_addr_t fa[3];
	ck_assert_int_eq(fi_av_insert(av, a, 3, fa, 0, nullptr), 3);
	fi_addr_t one = 1;
	ck_assert_int_eq(fi_av_remove(av, &one, 1, 0), 0);
	sockaddr_in out;
	size_t len = sizeof out;
	ck_assert_int_eq(fi_av_lookup(av, 1, &out, &len), -FI_EINVAL);
	expect_v4(av, 0, a[0]);
	expect_v4(av, 2, a[2]);
	// A second remove of the same handle fails.
	ck_assert_int_eq(fi_av_remove(av, &one, 1, 0), -FI_EINVAL);
	ck_assert_int_eq(fi_av_remove(av, &one, 1, 1), -FI_EBADFLAGS);
	ck_assert_int_eq(fi_av_remove(av, nullptr, 1, 0), -FI_EINVAL);
	ck_assert_int_eq(fi_av_remove(av, nullptr, 0, 0), 0);
	// The index is not reused: the next insert gets 3, and the removed
	// address can come back.
	fi_addr_t again = FI_ADDR_NOTAVAIL;
	ck_assert_int_eq(fi_av_insert(av, &a[1], 1, &again, 0, nullptr), 1);
	ck_assert_uint_eq(again, 3);
	expect_v4(av, 3, a[1]);
	ck_assert_int_eq(fi_av_lookup(av, 1, &out, &len), -FI_EINVAL);
	// A mix: the live handles go, the call reports the dead one.
	fi_addr_t mix[3] = {0, 1, 2};
	ck_assert_int_eq(fi_av_remove(av, mix, 3, 0), -FI_EINVAL);
	ck_assert_int_eq(fi_av_lookup(av, 0, &out, &len), -FI_EINVAL);
	ck_assert_int_eq(fi_av_lookup(av, 2, &out, &len), -FI_EINVAL);
	expect_v4(av, 3, a[1]);
	ck_assert_int_eq(fi_close(&av->fid), 0);
}
END_TEST

START_TEST(av_bad_addresses)
{
	Env env;
	fid_av *av = open_av(env, FI_AV_TABLE);
	sockaddr_in a[4] = {sin4("10.99.0.1", 7000), sin4("10.99.0.2", 7000), sin4("10.99.0.3", 0),
			    sin4("0.0.0.0", 7000)};
	a[1].sin_family = AF_UNIX;
	fi_addr_t fa[4] = {0, 0, 0, 0};
	int errors[4] = {-1, -1, -1, -1};
	ck_assert_int_eq(fi_av_insert(av, a, 4, fa, FI_SYNC_ERR, errors), 1);
	ck_assert_uint_eq(fa[0], 0);
	for (int i = 1; i < 4; i++) {
		ck_assert_uint_eq(fa[i], FI_ADDR_NOTAVAIL);
		ck_assert_int_eq(errors[i], FI_EINVAL);
	}
	ck_assert_int_eq(errors[0], 0);
	expect_v4(av, 0, a[0]);
	// Without FI_SYNC_ERR: the same, reported through fi_addr only.
	ck_assert_int_eq(fi_av_insert(av, a, 4, fa, 0, nullptr), 1);
	ck_assert_uint_eq(fa[0], 1);
	ck_assert_uint_eq(fa[1], FI_ADDR_NOTAVAIL);

	// A count with a NULL array: the call fails, and every entry with it.
	fi_addr_t fb[2] = {0, 0};
	int eb[2] = {-1, -1};
	ck_assert_int_eq(fi_av_insert(av, nullptr, 2, fb, FI_SYNC_ERR, eb), -FI_EINVAL);
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(fb[i], FI_ADDR_NOTAVAIL);
		ck_assert_int_eq(eb[i], FI_EINVAL);
	}
	// Flags vrma does not take (FI_AUTH_KEY: no keys per address), FI_SYNC_ERR
	// without its array.
	fb[0] = 0;
	ck_assert_int_eq(fi_av_insert(av, a, 1, fb, 1ULL << 57, nullptr), -FI_EBADFLAGS);
	ck_assert_uint_eq(fb[0], FI_ADDR_NOTAVAIL);
	ck_assert_int_eq(fi_av_insert(av, a, 1, fb, FI_SYNC_ERR, nullptr), -FI_EINVAL);
	// An IPv6 address in an IPv4 AV is not an address of its format.
	const sockaddr_in6 six = sin6("fd00::1", 7000);
	int e6 = -1;
	ck_assert_int_eq(fi_av_insert(av, &six, 1, fb, FI_SYNC_ERR, &e6), 0);
	ck_assert_int_eq(e6, FI_EINVAL);
	// None of it took an index.
	ck_assert_int_eq(fi_av_insert(av, &a[0], 1, fb, 0, nullptr), 1);
	ck_assert_uint_eq(fb[0], 2);
	ck_assert_int_eq(fi_close(&av->fid), 0);
}
END_TEST

START_TEST(av_lookup_small_buffer)
{
	Env env;
	fid_av *av = open_av(env, FI_AV_TABLE);
	const sockaddr_in a = sin4("10.99.0.7", 7471);
	fi_addr_t fa;
	ck_assert_int_eq(fi_av_insert(av, &a, 1, &fa, 0, nullptr), 1);
	uint8_t buf[sizeof(sockaddr_in)];
	memset(buf, 0xa5, sizeof buf);
	size_t len = 4;
	ck_assert_int_eq(fi_av_lookup(av, fa, buf, &len), -FI_ETOOSMALL);
	ck_assert_uint_eq(len, sizeof(sockaddr_in));
	ck_assert_int_eq(memcmp(buf, &a, 4), 0); // truncated
	for (size_t i = 4; i < sizeof buf; i++)
		ck_assert_uint_eq(buf[i], 0xa5);
	// A size query.
	len = 0;
	ck_assert_int_eq(fi_av_lookup(av, fa, nullptr, &len), -FI_ETOOSMALL);
	ck_assert_uint_eq(len, sizeof(sockaddr_in));
	// Larger than needed: the length is the address's.
	sockaddr_storage big;
	len = sizeof big;
	ck_assert_int_eq(fi_av_lookup(av, fa, &big, &len), 0);
	ck_assert_uint_eq(len, sizeof(sockaddr_in));
	ck_assert_int_eq(memcmp(&big, &a, sizeof a), 0);
	ck_assert_int_eq(fi_av_lookup(av, fa, &big, nullptr), -FI_EINVAL);
	len = sizeof big;
	ck_assert_int_eq(fi_av_lookup(av, fa, nullptr, &len), -FI_EINVAL);
	ck_assert_int_eq(fi_close(&av->fid), 0);
}
END_TEST

START_TEST(av_event_eq)
{
	Env env;
	fid_av *av = open_av(env, FI_AV_TABLE, FI_EVENT);
	const sockaddr_in a[3] = {sin4("10.99.0.1", 7000), sin4("10.99.0.2", 0),
				  sin4("10.99.0.3", 7000)};
	fi_addr_t fa[3] = {0, 0, 0};
	// No EQ yet.
	ck_assert_int_eq(fi_av_insert(av, a, 3, fa, 0, nullptr), -FI_ENOEQ);
	ck_assert_uint_eq(fa[0], FI_ADDR_NOTAVAIL);
	fid_eq *eq = open_eq(env);
	ck_assert_int_eq(fi_av_bind(av, &eq->fid, 1), -FI_EBADFLAGS);
	ck_assert_int_eq(fi_av_bind(av, &eq->fid, 0), 0);
	ck_assert_int_eq(fi_av_bind(av, &eq->fid, 0), -FI_EINVAL);
	// FI_SYNC_ERR is for synchronous AVs.
	int errors[3];
	ck_assert_int_eq(fi_av_insert(av, a, 3, fa, FI_SYNC_ERR, errors), -FI_EBADFLAGS);

	int marker = 0;
	ck_assert_int_eq(fi_av_insert(av, a, 3, fa, 0, &marker), 0);
	ck_assert_uint_eq(fa[0], 0);
	ck_assert_uint_eq(fa[1], FI_ADDR_NOTAVAIL);
	ck_assert_uint_eq(fa[2], 1);
	// The failed address's error entry first, then the completion.
	fi_eq_entry entry{};
	uint32_t event = 0;
	ck_assert_int_eq(fi_eq_read(eq, &event, &entry, sizeof entry, 0), -FI_EAVAIL);
	fi_eq_err_entry err{};
	ck_assert_int_eq(fi_eq_readerr(eq, &err, 0), sizeof(fi_eq_err_entry));
	ck_assert_ptr_eq(err.fid, &av->fid);
	ck_assert_ptr_eq(err.context, &marker);
	ck_assert_uint_eq(err.data, 1);
	ck_assert_int_eq(err.err, FI_EINVAL);
	ck_assert_int_eq(wait_eq(eq, &event, &entry, sizeof entry), sizeof(fi_eq_entry));
	ck_assert_uint_eq(event, FI_AV_COMPLETE);
	ck_assert_ptr_eq(entry.fid, &av->fid);
	ck_assert_ptr_eq(entry.context, &marker);
	ck_assert_uint_eq(entry.data, 2);
	expect_v4(av, 0, a[0]);
	expect_v4(av, 1, a[2]);

	// insertsvc and insertsym complete the same way.
	int marker2 = 0;
	fi_addr_t fb[3];
	ck_assert_int_eq(fi_av_insertsvc(av, "10.99.0.1", "4711", fb, 0, &marker2), 0);
	ck_assert_uint_eq(fb[0], 2);
	ck_assert_int_eq(wait_eq(eq, &event, &entry, sizeof entry), sizeof(fi_eq_entry));
	ck_assert_uint_eq(event, FI_AV_COMPLETE);
	ck_assert_ptr_eq(entry.context, &marker2);
	ck_assert_uint_eq(entry.data, 1);
	ck_assert_int_eq(fi_av_insertsym(av, "10.99.0.1", 1, "5000", 3, fb, 0, &marker), 0);
	ck_assert_int_eq(wait_eq(eq, &event, &entry, sizeof entry), sizeof(fi_eq_entry));
	ck_assert_uint_eq(event, FI_AV_COMPLETE);
	ck_assert_ptr_eq(entry.context, &marker);
	ck_assert_uint_eq(entry.data, 3);
	ck_assert_uint_eq(fb[2], 5);
	// Every insert call completes, even one with nothing to insert.
	ck_assert_int_eq(fi_av_insert(av, nullptr, 0, nullptr, 0, &marker2), 0);
	ck_assert_int_eq(wait_eq(eq, &event, &entry, sizeof entry), sizeof(fi_eq_entry));
	ck_assert_ptr_eq(entry.context, &marker2);
	ck_assert_uint_eq(entry.data, 0);
	ck_assert_int_eq(fi_eq_read(eq, &event, &entry, sizeof entry, 0), -FI_EAGAIN);

	// The EQ stays open while the AV is bound to it.
	ck_assert_int_eq(fi_close(&eq->fid), -FI_EBUSY);
	ck_assert_int_eq(fi_close(&av->fid), 0);
	ck_assert_int_eq(fi_close(&eq->fid), 0);

	// An AV opened without FI_EVENT takes no EQ.
	av = open_av(env, FI_AV_TABLE);
	eq = open_eq(env);
	ck_assert_int_eq(fi_av_bind(av, &eq->fid, 0), -FI_EINVAL);
	ck_assert_int_eq(fi_close(&av->fid), 0);
	ck_assert_int_eq(fi_close(&eq->fid), 0);
}
END_TEST

START_TEST(av_open_attributes)
{
	Env env;
	fid_av *av = nullptr;
	ck_assert_int_eq(fi_av_open(env.domain, nullptr, &av, nullptr), -FI_EINVAL);
	fi_av_attr attr{};
	attr.type = FI_AV_TABLE;
	attr.name = "shared";
	ck_assert_int_eq(fi_av_open(env.domain, &attr, &av, nullptr), -FI_ENOSYS);
	attr.name = nullptr;
	attr.flags = FI_READ;
	ck_assert_int_eq(fi_av_open(env.domain, &attr, &av, nullptr), -FI_ENOSYS);
	attr.flags = 1ULL << 40;
	ck_assert_int_eq(fi_av_open(env.domain, &attr, &av, nullptr), -FI_EBADFLAGS);
	attr.flags = 0;
	attr.rx_ctx_bits = 2;
	ck_assert_int_eq(fi_av_open(env.domain, &attr, &av, nullptr), -FI_ENOSYS);
	attr.rx_ctx_bits = 0;
	attr.type = static_cast<fi_av_type>(7);
	ck_assert_int_eq(fi_av_open(env.domain, &attr, &av, nullptr), -FI_EINVAL);
	ck_assert_ptr_null(av);
	// count is a hint (too large to reserve is no error); ep_per_node,
	// FI_SYMMETRIC and a map_addr without a name are ignored.
	attr.type = FI_AV_TABLE;
	attr.count = SIZE_MAX;
	attr.ep_per_node = 4;
	attr.flags = FI_SYMMETRIC;
	attr.map_addr = reinterpret_cast<void *>(0x10000);
	ck_assert_int_eq(fi_av_open(env.domain, &attr, &av, nullptr), 0);
	ck_assert_int_eq(attr.type, FI_AV_TABLE);
	// The domain stays open while the AV is.
	ck_assert_int_eq(fi_close(&env.domain->fid), -FI_EBUSY);
	ck_assert_int_eq(fi_close(&av->fid), 0);

	// A domain opened for one type takes that one (and UNSPEC) only.
	fi_info *h = base_hints();
	h->domain_attr->av_type = FI_AV_TABLE;
	Env table_env(h);
	fi_freeinfo(h);
	ck_assert_int_eq(table_env.info->domain_attr->av_type, FI_AV_TABLE);
	fi_av_attr t{};
	t.type = FI_AV_MAP;
	av = nullptr;
	ck_assert_int_eq(fi_av_open(table_env.domain, &t, &av, nullptr), -FI_EINVAL);
	t.type = FI_AV_UNSPEC;
	ck_assert_int_eq(fi_av_open(table_env.domain, &t, &av, nullptr), 0);
	ck_assert_int_eq(t.type, FI_AV_TABLE);
	ck_assert_int_eq(fi_close(&av->fid), 0);
}
END_TEST

START_TEST(av_ipv6_format)
{
	fi_info *h = ipv6_hints();
	Env env(h);
	fi_freeinfo(h);
	ck_assert_int_eq(env.info->addr_format, FI_SOCKADDR_IN6);
	fid_av *av = open_av(env, FI_AV_TABLE);
	const sockaddr_in6 a[2] = {sin6("fd00::1", 7000), sin6("fe80::1:2", 65535)};
	fi_addr_t fa[2];
	ck_assert_int_eq(fi_av_insert(av, a, 2, fa, 0, nullptr), 2);
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(fa[i], static_cast<fi_addr_t>(i));
		sockaddr_in6 got;
		memset(&got, 0xa5, sizeof got);
		size_t len = sizeof got;
		ck_assert_int_eq(fi_av_lookup(av, fa[i], &got, &len), 0);
		ck_assert_uint_eq(len, sizeof(sockaddr_in6));
		ck_assert_int_eq(memcmp(&got, &a[i], sizeof got), 0);
	}
	expect_straddr(av, &a[0], "fi_sockaddr_in6://[fd00::1]:7000");
	// An IPv4 node is stored as the IPv4 peer and looked up IPv4-mapped.
	fi_addr_t f4;
	ck_assert_int_eq(fi_av_insertsvc(av, "10.99.0.1", "4711", &f4, 0, nullptr), 1);
	ck_assert_uint_eq(f4, 2);
	const sockaddr_in6 mapped = sin6("::ffff:10.99.0.1", 4711);
	sockaddr_in6 got;
	size_t len = sizeof got;
	ck_assert_int_eq(fi_av_lookup(av, f4, &got, &len), 0);
	ck_assert_uint_eq(len, sizeof(sockaddr_in6));
	ck_assert_int_eq(memcmp(&got, &mapped, sizeof got), 0);
	expect_straddr(av, &mapped, "fi_sockaddr_in://10.99.0.1:4711");
	// A scope id (link-local peers need one) is refused, not dropped.
	sockaddr_in6 scoped = a[1];
	scoped.sin6_scope_id = 2;
	int err = -1;
	ck_assert_int_eq(fi_av_insert(av, &scoped, 1, fa, FI_SYNC_ERR, &err), 0);
	ck_assert_int_eq(err, FI_EINVAL);
	// insertsym counts an IPv6 node up as well.
	fi_addr_t sym[2];
	ck_assert_int_eq(fi_av_insertsym(av, "fd00::ff", 2, "9000", 1, sym, 0, nullptr), 2);
	const sockaddr_in6 next = sin6("fd00::100", 9000);
	len = sizeof got;
	ck_assert_int_eq(fi_av_lookup(av, sym[1], &got, &len), 0);
	ck_assert_int_eq(memcmp(&got, &next, sizeof got), 0);
	ck_assert_int_eq(fi_close(&av->fid), 0);
}
END_TEST

START_TEST(av_addr_str_format)
{
	// A domain opened with FI_ADDR_STR: inserts take an array of strings,
	// lookup gives the string back.
	fi_info *info = get_info();
	fid_fabric *fabric = nullptr;
	fid_domain *domain = nullptr;
	ck_assert_int_eq(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
	info->addr_format = FI_ADDR_STR;
	ck_assert_int_eq(fi_domain(fabric, info, &domain, nullptr), 0);
	fi_av_attr attr{};
	attr.type = FI_AV_TABLE;
	fid_av *av = nullptr;
	ck_assert_int_eq(fi_av_open(domain, &attr, &av, nullptr), 0);
	const char *addrs[3] = {"fi_sockaddr_in://10.99.0.1:7000", "fi_sockaddr_in6://[fd00::2]:7001",
				"10.99.0.1:7000"};
	fi_addr_t fa[3];
	int errors[3];
	ck_assert_int_eq(fi_av_insert(av, addrs, 3, fa, FI_SYNC_ERR, errors), 2);
	ck_assert_uint_eq(fa[0], 0);
	ck_assert_uint_eq(fa[1], 1);
	ck_assert_uint_eq(fa[2], FI_ADDR_NOTAVAIL);
	ck_assert_int_eq(errors[2], FI_EINVAL);
	for (int i = 0; i < 2; i++) {
		char buf[64];
		size_t len = sizeof buf;
		ck_assert_int_eq(fi_av_lookup(av, fa[i], buf, &len), 0);
		ck_assert_uint_eq(len, strlen(addrs[i]) + 1);
		ck_assert_str_eq(buf, addrs[i]);
	}
	char small[8];
	size_t len = sizeof small;
	ck_assert_int_eq(fi_av_lookup(av, 0, small, &len), -FI_ETOOSMALL);
	ck_assert_uint_eq(len, strlen(addrs[0]) + 1);
	ck_assert_str_eq(small, "fi_sock");
	char out[64];
	len = sizeof out;
	ck_assert_ptr_eq(fi_av_straddr(av, addrs[1], out, &len), out);
	ck_assert_str_eq(out, addrs[1]);
	ck_assert_int_eq(fi_close(&av->fid), 0);
	ck_assert_int_eq(fi_close(&domain->fid), 0);
	ck_assert_int_eq(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
}
END_TEST

Suite *av_suite()
{
	Suite *s = suite_create("av");
	TCase *tc = tcase_create("av");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, av_table_insert_lookup);
	tcase_add_test(tc, av_map_handles);
	tcase_add_test(tc, av_insertsvc_insertsym);
	tcase_add_test(tc, av_remove);
	tcase_add_test(tc, av_bad_addresses);
	tcase_add_test(tc, av_lookup_small_buffer);
	tcase_add_test(tc, av_event_eq);
	tcase_add_test(tc, av_open_attributes);
	tcase_add_test(tc, av_ipv6_format);
	tcase_add_test(tc, av_addr_str_format);
	suite_add_tcase(s, tc);
	return s;
}
