// Address vectors: fi_addr_t handles for the listening addresses of peers,
// which RDM endpoints bind (MSG endpoints take no AV).
//
// The table is rdm::AvTable (src/av_table.h): FI_AV_TABLE handles are 0, 1,
// 2, ... in insertion order, FI_AV_MAP handles carry the slot's generation,
// removed handles stay dead. This file is the fid around it:
//  - FI_AV_UNSPEC opens an FI_AV_MAP AV (or the domain's av_type if it names
//    one): a stale MAP handle keeps failing even after its slot is reused.
//  - Addresses are in the domain's addr_format: struct sockaddr_in
//    (FI_SOCKADDR_IN), struct sockaddr_in6 (FI_SOCKADDR_IN6; an IPv4-mapped
//    address is the IPv4 peer and is looked up in the mapped form),
//    sockaddr_in or sockaddr_in6 as the first entry's family says
//    (FI_SOCKADDR), or an array of "fi_sockaddr_in[6]://" strings
//    (FI_ADDR_STR). fi_av_lookup returns the same form.
//  - Inserts convert (and, for host names, resolve) every address before
//    taking the lock, then insert each on its own: per-address failures set
//    fi_addr[i] to FI_ADDR_NOTAVAIL and consume no index, FI_SYNC_ERR's
//    array gets 0 or the positive FI_E* code, and the call returns how many
//    were inserted. A whole-call failure (bad flags, NULL arrays) returns a
//    negative code and marks every address failed the same way.
//  - FI_EVENT: the insert is done synchronously all the same; the EQ bound
//    with fi_av_bind gets one FI_AV_COMPLETE error entry per failed address
//    (data: its index, err: the positive code) and then one FI_AV_COMPLETE
//    entry (data: how many were inserted), all with the insert's context;
//    the call returns 0. fi_close leaves those entries in the EQ (fi_av(3)).
//  - Named (shared) AVs and FI_READ: -FI_ENOSYS; rx_ctx_bits: 0 only (no
//    scalable endpoints); ep_per_node ignored; count reserves room (a hint).
#include "vrma_av.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace vrma {

namespace {

using rdm::RdmAddr;

const char *type_name(fi_av_type t) noexcept
{
	switch (t) {
	case FI_AV_MAP:
		return "FI_AV_MAP";
	case FI_AV_TABLE:
		return "FI_AV_TABLE";
	case FI_AV_UNSPEC:
		return "FI_AV_UNSPEC";
	default:
		return "unknown";
	}
}

sa_family_t family_at(const void *p) noexcept
{
	sa_family_t family;
	memcpy(&family, static_cast<const uint8_t *>(p) + offsetof(sockaddr, sa_family),
	       sizeof family);
	return family;
}

// Bytes of the sockaddr at p in this AV format, 0 if p is not one (another
// family).
size_t sockaddr_entry_len(uint32_t format, const void *p) noexcept
{
	const sa_family_t family = family_at(p);
	switch (format) {
	case FI_SOCKADDR_IN:
		return family == AF_INET ? sizeof(sockaddr_in) : 0;
	case FI_SOCKADDR_IN6:
		return family == AF_INET6 ? sizeof(sockaddr_in6) : 0;
	default: // FI_SOCKADDR
		return family == AF_INET ? sizeof(sockaddr_in)
		       : family == AF_INET6 ? sizeof(sockaddr_in6)
					    : 0;
	}
}

// One address in the AV's format (a sockaddr, or the string itself for
// FI_ADDR_STR) into out; false if it is not one.
bool read_addr(const Av *av, const void *p, RdmAddr &out) noexcept
{
	if (av->addr_format == FI_ADDR_STR)
		return rdm::parse_addr(static_cast<const char *>(p), out);
	const size_t len = sockaddr_entry_len(av->addr_format, p);
	return len && rdm::from_sockaddr(static_cast<const sockaddr *>(p), len, out);
}

// Whether the AV's format can give the address back: an FI_SOCKADDR_IN AV
// holds IPv4 addresses only.
bool representable(const Av *av, const RdmAddr &a) noexcept
{
	return av->addr_format != FI_SOCKADDR_IN || a.family == AF_INET;
}

// a in the AV's format (what fi_av_lookup returns) into out; its length.
size_t write_addr(const Av *av, const RdmAddr &a, uint8_t (&out)[rdm::kAddrStrMax]) noexcept
{
	if (av->addr_format == FI_ADDR_STR) {
		char *s = reinterpret_cast<char *>(out);
		return rdm::format_addr(a, s, sizeof out) + 1;
	}
	sockaddr_storage ss;
	size_t len;
	if (av->addr_format == FI_SOCKADDR_IN6 && a.family == AF_INET) {
		// The IPv4 peer as an IPv6 socket names it: ::ffff:a.b.c.d.
		sockaddr_in6 sin6{};
		sin6.sin6_family = AF_INET6;
		sin6.sin6_port = htons(a.port);
		sin6.sin6_addr.s6_addr[10] = 0xff;
		sin6.sin6_addr.s6_addr[11] = 0xff;
		memcpy(&sin6.sin6_addr.s6_addr[12], a.addr, 4);
		memcpy(&ss, &sin6, sizeof sin6);
		len = sizeof sin6;
	} else {
		len = rdm::to_sockaddr(a, ss);
	}
	static_assert(sizeof(sockaddr_in6) <= sizeof out, "a sockaddr fits");
	memcpy(out, &ss, len);
	return len;
}

// The addresses of one insert call, converted before the lock is taken.
struct Batch {
	std::vector<RdmAddr> addrs;
	std::vector<int> errors; // 0, or why addrs[i] could not be had (negative)
};

int batch_init(Batch &b, size_t n) noexcept
{
	try {
		b.addrs.assign(n, RdmAddr{});
		b.errors.assign(n, 0);
	} catch (...) {
		return -FI_ENOMEM;
	}
	return 0;
}

// A whole insert call failed: so did every address (fi_addr[i] is
// FI_ADDR_NOTAVAIL, FI_SYNC_ERR's entry the positive code).
int insert_failed(size_t count, fi_addr_t *fi_addr, int *sync_errors, int rc) noexcept
{
	for (size_t i = 0; fi_addr && i < count; i++)
		fi_addr[i] = FI_ADDR_NOTAVAIL;
	for (size_t i = 0; sync_errors && i < count; i++)
		sync_errors[i] = -rc;
	return rc;
}

// The checks every insert call starts with; 0 or a negative code (after one
// warning, with every address marked failed).
int check_insert(Av *av, const char *call, size_t count, fi_addr_t *fi_addr, uint64_t flags,
		 void *context) noexcept
{
	if (count > INT_MAX) {
		// The return value is an int; and a count that large is garbage
		// more likely than an array: leave fi_addr alone.
		VRMA_WARN(FI_LOG_AV, "%s: count %zu is too large\n", call, count);
		return -FI_EINVAL;
	}
	constexpr uint64_t kInsertFlags = FI_MORE | FI_SYNC_ERR | FI_AV_USER_ID;
	if (flags & ~kInsertFlags) {
		VRMA_WARN(FI_LOG_AV, "%s: unsupported flags 0x%llx\n", call,
			  static_cast<unsigned long long>(flags & ~kInsertFlags));
		return insert_failed(count, fi_addr, nullptr, -FI_EBADFLAGS);
	}
	if ((flags & FI_AV_USER_ID) && av->user_id_attr) {
		VRMA_WARN(FI_LOG_AV, "%s: FI_AV_USER_ID on an AV opened with FI_AV_USER_ID (name ids with fi_av_set_user_id)\n",
			  call);
		return insert_failed(count, fi_addr, nullptr, -FI_EINVAL);
	}
	if ((flags & FI_AV_USER_ID) && !fi_addr && count) {
		VRMA_WARN(FI_LOG_AV, "%s: FI_AV_USER_ID without the fi_addr array of ids\n", call);
		return -FI_EINVAL;
	}
	if ((flags & FI_SYNC_ERR) && av->events) {
		VRMA_WARN(FI_LOG_AV, "%s: FI_SYNC_ERR on an FI_EVENT AV (errors go to its EQ)\n", call);
		return insert_failed(count, fi_addr, nullptr, -FI_EBADFLAGS);
	}
	if ((flags & FI_SYNC_ERR) && !context && count) {
		VRMA_WARN(FI_LOG_AV, "%s: FI_SYNC_ERR without an error array in context\n", call);
		return insert_failed(count, fi_addr, nullptr, -FI_EINVAL);
	}
	int *sync_errors = (flags & FI_SYNC_ERR) ? static_cast<int *>(context) : nullptr;
	if (av->events) {
		std::lock_guard guard(av->lock);
		if (!av->eq) {
			VRMA_WARN(FI_LOG_AV, "%s: FI_EVENT AV without a bound EQ\n", call);
			return insert_failed(count, fi_addr, sync_errors, -FI_ENOEQ);
		}
	}
	if (!fi_addr && count && av->type == FI_AV_MAP) {
		VRMA_WARN(FI_LOG_AV, "%s: FI_AV_MAP handles need an fi_addr array\n", call);
		return insert_failed(count, fi_addr, sync_errors, -FI_EINVAL);
	}
	return 0;
}

// The end of every insert call: inserts what converted, reports each
// address (fi_addr, FI_SYNC_ERR's array, FI_EVENT's error entries, one
// warning for all failures) and returns what the call returns.
int finish_insert(Av *av, const char *call, Batch &b, fi_addr_t *fi_addr, uint64_t flags,
		  void *context) noexcept
{
	const size_t n = b.addrs.size();
	size_t inserted = 0, first_bad = n;
	Eq *eq;
	{
		std::lock_guard guard(av->lock);
		eq = av->eq;
		// Before any entry's epoch: endpoints that see it look ids up.
		if (flags & FI_AV_USER_ID)
			av->user_ids.store(true, std::memory_order_relaxed);
		for (size_t i = 0; i < n; i++) {
			fi_addr_t handle = FI_ADDR_NOTAVAIL;
			int &err = b.errors[i];
			if (!err && !representable(av, b.addrs[i]))
				err = -FI_EINVAL;
			if (!err) {
				err = av->table.insert(b.addrs[i], handle);
				av->epoch.fetch_add(1, std::memory_order_release);
			}
			// FI_AV_USER_ID: fi_addr[i] is the entry's id on input.
			if (!err && (flags & FI_AV_USER_ID))
				(void)av->table.set_user_id(handle, fi_addr[i]);
			else if (!err && av->user_id_attr)
				(void)av->table.set_user_id(handle, FI_ADDR_NOTAVAIL);
			if (!err)
				inserted++;
			else if (first_bad == n)
				first_bad = i;
			if (fi_addr)
				fi_addr[i] = err ? FI_ADDR_NOTAVAIL : handle;
		}
	}
	if (flags & FI_SYNC_ERR)
		for (size_t i = 0; i < n; i++)
			static_cast<int *>(context)[i] = -b.errors[i];
	if (first_bad < n)
		VRMA_WARN(FI_LOG_AV, "%s: %zu of %zu addresses not inserted (the first, #%zu: %s)\n",
			  call, n - inserted, n, first_bad, fi_strerror(-b.errors[first_bad]));
	if (!av->events)
		return static_cast<int>(inserted);

	// Error entries first, then the completion (fi_av(3)). The addresses
	// are in the AV whatever happens here.
	try {
		for (size_t i = first_bad; i < n; i++) {
			if (!b.errors[i])
				continue;
			EqEntry e;
			e.event = FI_AV_COMPLETE;
			e.is_error = true;
			e.err.fid = &av->fid;
			e.err.context = context;
			e.err.data = i;
			e.err.err = -b.errors[i];
			eq_post(eq, std::move(e));
		}
		fi_eq_entry done{};
		done.fid = &av->fid;
		done.context = context;
		done.data = inserted;
		EqEntry e;
		e.event = FI_AV_COMPLETE;
		const auto *bytes = reinterpret_cast<const uint8_t *>(&done);
		e.data.assign(bytes, bytes + sizeof done);
		eq_post(eq, std::move(e));
	} catch (...) {
		VRMA_WARN(FI_LOG_AV, "%s: out of memory queuing FI_AV_COMPLETE\n", call);
		return -FI_ENOMEM;
	}
	return 0;
}

bool all_digits(std::string_view s) noexcept
{
	if (s.empty())
		return false;
	for (char c : s)
		if (c < '0' || c > '9')
			return false;
	return true;
}

// A node and service (fi_getinfo's meaning) into one address: an
// FI_ADDR_STR node when service is NULL; a numeric address and decimal
// port; otherwise getaddrinfo (host names, service names), which blocks:
// no lock is held. 0, -FI_EINVAL (malformed), -FI_EADDRNOTAVAIL (the name
// does not resolve).
int resolve(const Av *av, const char *node, const char *service, RdmAddr &out) noexcept
{
	if (!service)
		return rdm::parse_addr(node, out) ? 0 : -FI_EINVAL;
	if (rdm::parse_node_service(node, service, out))
		return 0;
	addrinfo hints{};
	hints.ai_family = av->addr_format == FI_SOCKADDR_IN ? AF_INET : AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if (all_digits(service)) {
		// parse_node_service takes any port number: the node is a name.
		if (strlen(service) > 5 || atoi(service) > UINT16_MAX)
			return -FI_EINVAL;
		hints.ai_flags |= AI_NUMERICSERV;
	}
	addrinfo *res = nullptr;
	if (getaddrinfo(node, service, &hints, &res) != 0 || !res) {
		VRMA_INFO(FI_LOG_AV, "%s:%s does not resolve\n", node, service);
		return -FI_EADDRNOTAVAIL;
	}
	bool ok = false;
	for (const addrinfo *r = res; r && !ok; r = r->ai_next)
		ok = rdm::from_sockaddr(r->ai_addr, r->ai_addrlen, out);
	freeaddrinfo(res);
	return ok ? 0 : -FI_EADDRNOTAVAIL;
}

bool numeric_node(const char *node) noexcept
{
	uint8_t a16[16];
	return inet_pton(AF_INET, node, a16) == 1 || inet_pton(AF_INET6, node, a16) == 1;
}

// insertsym's addresses into b (nodecnt * svccnt entries, the services of
// a node before the next node). A numeric node (or an FI_ADDR_STR one) is
// counted up as one big-endian integer, a host name by its numeric suffix
// (width kept: node09, node10). 0, or a negative code that fails the
// whole call (a host name without the suffix nodecnt > 1 needs).
int sym_addrs(const Av *av, const char *node, size_t nodecnt, const char *service,
	      size_t svccnt, Batch &b)
{
	auto fill_node = [&](size_t n, int rc, const RdmAddr &base, uint64_t node_step) {
		for (size_t s = 0; s < svccnt; s++) {
			const size_t i = n * svccnt + s;
			if (rc)
				b.errors[i] = rc;
			else if (!rdm::nth_addr(base, node_step, s, b.addrs[i]))
				b.errors[i] = -FI_EINVAL; // past the last address or port
		}
	};
	if (nodecnt == 0 || svccnt == 0)
		return 0;
	if (nodecnt == 1 || !service || numeric_node(node)) {
		RdmAddr base;
		const int rc = resolve(av, node, service, base);
		for (size_t n = 0; n < nodecnt; n++)
			fill_node(n, rc, base, n);
		return 0;
	}
	const std::string_view name(node);
	size_t digits = 0;
	while (digits < name.size() && name[name.size() - 1 - digits] >= '0' &&
	       name[name.size() - 1 - digits] <= '9')
		digits++;
	if (digits == 0 || digits > 18) {
		VRMA_WARN(FI_LOG_AV, "fi_av_insertsym: host name '%s' has no numeric suffix to count %zu nodes from\n",
			  node, nodecnt);
		return -FI_EINVAL;
	}
	const std::string prefix(name.substr(0, name.size() - digits));
	const uint64_t first = strtoull(node + name.size() - digits, nullptr, 10);
	for (size_t n = 0; n < nodecnt; n++) {
		char num[32];
		snprintf(num, sizeof num, "%0*llu", static_cast<int>(digits),
			 static_cast<unsigned long long>(first + n));
		RdmAddr base;
		const int rc = resolve(av, (prefix + num).c_str(), service, base);
		fill_node(n, rc, base, 0);
	}
	return 0;
}

int av_insert(fid_av *f, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags,
	      void *context) noexcept
{
	Av *av = from_fid<Av>(&f->fid);
	constexpr const char *call = "fi_av_insert";
	if (int rc = check_insert(av, call, count, fi_addr, flags, context))
		return rc;
	int *sync_errors = (flags & FI_SYNC_ERR) ? static_cast<int *>(context) : nullptr;
	if (!addr && count) {
		VRMA_WARN(FI_LOG_AV, "%s: NULL addr with count %zu\n", call, count);
		return insert_failed(count, fi_addr, sync_errors, -FI_EINVAL);
	}
	size_t stride = 0;
	if (count && av->addr_format != FI_ADDR_STR) {
		stride = av->addr_format == FI_SOCKADDR_IN    ? sizeof(sockaddr_in)
			 : av->addr_format == FI_SOCKADDR_IN6 ? sizeof(sockaddr_in6)
							      : sockaddr_entry_len(FI_SOCKADDR, addr);
		if (!stride) {
			VRMA_WARN(FI_LOG_AV, "%s: the first address has family %u: not a sockaddr_in or sockaddr_in6\n",
				  call, unsigned(family_at(addr)));
			return insert_failed(count, fi_addr, sync_errors, -FI_EINVAL);
		}
	}
	Batch b;
	if (int rc = batch_init(b, count)) {
		VRMA_WARN(FI_LOG_AV, "%s: out of memory for %zu addresses\n", call, count);
		return insert_failed(count, fi_addr, sync_errors, rc);
	}
	for (size_t i = 0; i < count; i++) {
		const void *p = stride ? static_cast<const void *>(static_cast<const uint8_t *>(addr) + i * stride)
				       : static_cast<const void *>(static_cast<const char *const *>(addr)[i]);
		if (!p || !read_addr(av, p, b.addrs[i]))
			b.errors[i] = -FI_EINVAL;
	}
	return finish_insert(av, call, b, fi_addr, flags, context);
}

int av_insertsvc(fid_av *f, const char *node, const char *service, fi_addr_t *fi_addr,
		 uint64_t flags, void *context) noexcept
{
	Av *av = from_fid<Av>(&f->fid);
	constexpr const char *call = "fi_av_insertsvc";
	if (int rc = check_insert(av, call, 1, fi_addr, flags, context))
		return rc;
	if (!node) {
		VRMA_WARN(FI_LOG_AV, "%s: NULL node\n", call);
		return insert_failed(1, fi_addr, (flags & FI_SYNC_ERR) ? static_cast<int *>(context) : nullptr,
				     -FI_EINVAL);
	}
	Batch b;
	if (int rc = batch_init(b, 1))
		return insert_failed(1, fi_addr, (flags & FI_SYNC_ERR) ? static_cast<int *>(context) : nullptr,
				     rc);
	b.errors[0] = resolve(av, node, service, b.addrs[0]);
	return finish_insert(av, call, b, fi_addr, flags, context);
}

int av_insertsym(fid_av *f, const char *node, size_t nodecnt, const char *service,
		 size_t svccnt, fi_addr_t *fi_addr, uint64_t flags, void *context) noexcept
try {
	Av *av = from_fid<Av>(&f->fid);
	constexpr const char *call = "fi_av_insertsym";
	if (nodecnt && svccnt > SIZE_MAX / nodecnt) {
		VRMA_WARN(FI_LOG_AV, "%s: %zu nodes x %zu services overflow\n", call, nodecnt, svccnt);
		return -FI_EINVAL;
	}
	const size_t count = nodecnt * svccnt;
	if (int rc = check_insert(av, call, count, fi_addr, flags, context))
		return rc;
	int *sync_errors = (flags & FI_SYNC_ERR) ? static_cast<int *>(context) : nullptr;
	if (!node) {
		VRMA_WARN(FI_LOG_AV, "%s: NULL node\n", call);
		return insert_failed(count, fi_addr, sync_errors, -FI_EINVAL);
	}
	Batch b;
	if (int rc = batch_init(b, count)) {
		VRMA_WARN(FI_LOG_AV, "%s: out of memory for %zu addresses\n", call, count);
		return insert_failed(count, fi_addr, sync_errors, rc);
	}
	if (int rc = sym_addrs(av, node, nodecnt, service, svccnt, b))
		return insert_failed(count, fi_addr, sync_errors, rc);
	return finish_insert(av, call, b, fi_addr, flags, context);
} catch (...) { // std::string in sym_addrs
	VRMA_WARN(FI_LOG_AV, "fi_av_insertsym: out of memory\n");
	return -FI_ENOMEM;
}

int av_remove(fid_av *f, fi_addr_t *fi_addr, size_t count, uint64_t flags) noexcept
{
	Av *av = from_fid<Av>(&f->fid);
	if (flags) {
		VRMA_WARN(FI_LOG_AV, "fi_av_remove: unsupported flags 0x%llx\n",
			  static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	if (!fi_addr && count) {
		VRMA_WARN(FI_LOG_AV, "fi_av_remove: NULL fi_addr with count %zu\n", count);
		return -FI_EINVAL;
	}
	// Every live handle is removed, even when others in the array are not.
	size_t bad = 0;
	fi_addr_t first_bad = FI_ADDR_NOTAVAIL;
	{
		std::lock_guard guard(av->lock);
		av->epoch.fetch_add(1, std::memory_order_release);
		for (size_t i = 0; i < count; i++)
			if (av->table.remove(fi_addr[i]) && bad++ == 0)
				first_bad = fi_addr[i];
	}
	if (bad) {
		VRMA_WARN(FI_LOG_AV, "fi_av_remove: %zu of %zu handles not in the AV (the first: 0x%llx)\n",
			  bad, count, static_cast<unsigned long long>(first_bad));
		return -FI_EINVAL;
	}
	return 0;
}

int av_lookup(fid_av *f, fi_addr_t fi_addr, void *addr, size_t *addrlen) noexcept
{
	Av *av = from_fid<Av>(&f->fid);
	if (!addrlen || (!addr && *addrlen)) {
		VRMA_WARN(FI_LOG_AV, "fi_av_lookup: NULL %s\n", addrlen ? "addr" : "addrlen");
		return -FI_EINVAL;
	}
	RdmAddr a;
	if (!av_lookup_addr(av, fi_addr, a)) {
		VRMA_WARN(FI_LOG_AV, "fi_av_lookup: handle 0x%llx is not in the AV\n",
			  static_cast<unsigned long long>(fi_addr));
		return -FI_EINVAL;
	}
	uint8_t buf[rdm::kAddrStrMax];
	const size_t need = write_addr(av, a, buf);
	const size_t have = *addrlen;
	*addrlen = need;
	if (have >= need) {
		memcpy(addr, buf, need);
		return 0;
	}
	// Truncated (fi_av(3)); a string keeps its terminator. A size query,
	// not an error: no warning.
	if (have) {
		memcpy(addr, buf, have);
		if (av->addr_format == FI_ADDR_STR)
			static_cast<char *>(addr)[have - 1] = '\0';
	}
	return -FI_ETOOSMALL;
}

const char *av_straddr(fid_av *f, const void *addr, char *buf, size_t *len) noexcept
{
	Av *av = from_fid<Av>(&f->fid);
	if (!addr || !len || (!buf && *len)) {
		VRMA_WARN(FI_LOG_AV, "fi_av_straddr: NULL %s\n", !addr ? "addr" : !len ? "len" : "buf");
		return nullptr;
	}
	RdmAddr a;
	if (!read_addr(av, addr, a)) {
		VRMA_WARN(FI_LOG_AV, "fi_av_straddr: not an address of the AV's format\n");
		return nullptr;
	}
	// Truncated like snprintf; *len is what the whole string needs.
	*len = rdm::format_addr(a, buf, *len) + 1;
	return buf;
}

int av_set_user_id(fid_av *f, fi_addr_t fi_addr, fi_addr_t user_id, uint64_t flags) noexcept
{
	Av *av = from_fid<Av>(&f->fid);
	if (flags) {
		VRMA_WARN(FI_LOG_AV, "fi_av_set_user_id: unsupported flags 0x%llx%s\n",
			  static_cast<unsigned long long>(flags),
			  (flags & abi::kAuthKeyFlag) ? " (FI_AUTH_KEY: no keys per address)" : "");
		return (flags & abi::kAuthKeyFlag) ? -FI_EOPNOTSUPP : -FI_EBADFLAGS;
	}
	if (!av->user_id_attr) {
		VRMA_WARN(FI_LOG_AV, "fi_av_set_user_id: the AV was opened without FI_AV_USER_ID\n");
		return -FI_EINVAL;
	}
	std::lock_guard guard(av->lock);
	av->epoch.fetch_add(1, std::memory_order_release);
	if (av->table.set_user_id(fi_addr, user_id)) {
		VRMA_WARN(FI_LOG_AV, "fi_av_set_user_id: handle 0x%llx is not in the AV\n",
			  static_cast<unsigned long long>(fi_addr));
		return -FI_EINVAL;
	}
	return 0;
}

// Keys per address (FI_AV_AUTH_KEY) are not offered: a domain has one job
// key (domain_attr->auth_key), getinfo refuses FI_AV_AUTH_KEY.
int av_insert_auth_key(fid_av *, const void *, size_t, fi_addr_t *, uint64_t) noexcept
{
	VRMA_WARN(FI_LOG_AV, "fi_av_insert_auth_key: vrma has no keys per address (FI_AV_AUTH_KEY)\n");
	return -FI_ENOSYS;
}

int av_lookup_auth_key(fid_av *, fi_addr_t, void *, size_t *) noexcept
{
	VRMA_WARN(FI_LOG_AV, "fi_av_lookup_auth_key: vrma has no keys per address (FI_AV_AUTH_KEY)\n");
	return -FI_ENOSYS;
}

int av_bind(fid *f, fid *bfid, uint64_t flags) noexcept
{
	Av *av = from_fid<Av>(f);
	if (!bfid || bfid->fclass != FI_CLASS_EQ) {
		VRMA_WARN(FI_LOG_AV, "fi_av_bind: an AV binds an EQ only\n");
		return -FI_EINVAL;
	}
	if (flags) {
		VRMA_WARN(FI_LOG_AV, "fi_av_bind: unsupported flags 0x%llx\n",
			  static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	if (!av->events) {
		VRMA_WARN(FI_LOG_AV, "fi_av_bind: the AV was opened without FI_EVENT\n");
		return -FI_EINVAL;
	}
	Eq *eq = from_fid<Eq>(bfid);
	if (eq->fabric != av->domain->fabric) {
		VRMA_WARN(FI_LOG_AV, "fi_av_bind: the EQ belongs to another fabric\n");
		return -FI_EINVAL;
	}
	std::lock_guard guard(av->lock);
	if (av->eq) {
		VRMA_WARN(FI_LOG_AV, "fi_av_bind: an EQ is already bound\n");
		return -FI_EINVAL;
	}
	av->eq = eq;
	eq->refs++;
	return 0;
}

int av_close(fid *f) noexcept
{
	Av *av = from_fid<Av>(f);
	if (av->refs.load()) {
		VRMA_WARN(FI_LOG_AV, "AV still bound to %d endpoints\n", av->refs.load());
		return -FI_EBUSY;
	}
	if (av->eq)
		av->eq->refs--;
	av->domain->refs--;
	delete av;
	return 0;
}

constexpr fi_ops av_fi_ops = {
	.size = sizeof(fi_ops),
	.close = av_close,
	.bind = av_bind,
	.control = fid_no_control,
	.ops_open = fid_no_ops_open,
	.tostr = fid_tostr,
	.ops_set = fid_no_ops_set,
};

// The 1.20 layout whatever the headers (abi::OpsAv): fi_av_set_user_id
// and the auth-key calls find their entries by .size.
constexpr abi::OpsAv av_ops = {
	.size = sizeof(abi::OpsAv),
	.insert = av_insert,
	.insertsvc = av_insertsvc,
	.insertsym = av_insertsym,
	.remove = av_remove,
	.lookup = av_lookup,
	.straddr = av_straddr,
	.av_set = VRMA_NOSYS(fi_ops_av, av_set),
	.insert_auth_key = av_insert_auth_key,
	.lookup_auth_key = av_lookup_auth_key,
	.set_user_id = av_set_user_id,
};

} // namespace

bool av_lookup_addr(Av *av, fi_addr_t fi_addr, RdmAddr &out) noexcept
{
	std::lock_guard guard(av->lock);
	const auto e = av->table.lookup(fi_addr);
	if (!e)
		return false;
	out = e->addr;
	return true;
}

fi_addr_t av_reverse(Av *av, const RdmAddr &addr, fi_addr_t &report) noexcept
{
	std::lock_guard guard(av->lock);
	const fi_addr_t handle = av->table.reverse(addr);
	report = av->user_ids.load(std::memory_order_relaxed) ? av->table.report_addr(handle) : handle;
	return handle;
}

int av_open(fid_domain *domain, fi_av_attr *attr, fid_av **av_out, void *context) noexcept
try {
	if (!domain || !attr || !av_out) {
		VRMA_WARN(FI_LOG_AV, "fi_av_open: NULL domain, attribute or output\n");
		return -FI_EINVAL;
	}
	Domain *dom = from_fid<Domain>(&domain->fid);
	if (attr->name || (attr->flags & FI_READ)) {
		VRMA_WARN(FI_LOG_AV, "fi_av_open: named (shared) AVs and FI_READ are not supported\n");
		return -FI_ENOSYS;
	}
	constexpr uint64_t kAvFlags = FI_EVENT | FI_SYMMETRIC | FI_AV_USER_ID;
	if (attr->flags & ~kAvFlags) {
		VRMA_WARN(FI_LOG_AV, "fi_av_open: unsupported flags 0x%llx\n",
			  static_cast<unsigned long long>(attr->flags & ~kAvFlags));
		return -FI_EBADFLAGS;
	}
	if (attr->rx_ctx_bits) {
		VRMA_WARN(FI_LOG_AV, "fi_av_open: rx_ctx_bits %d: no scalable endpoints\n",
			  attr->rx_ctx_bits);
		return attr->rx_ctx_bits < 0 ? -FI_EINVAL : -FI_ENOSYS;
	}
	if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP && attr->type != FI_AV_TABLE) {
		VRMA_WARN(FI_LOG_AV, "fi_av_open: unknown type %d\n", static_cast<int>(attr->type));
		return -FI_EINVAL;
	}
	const fi_av_type dom_type =
		dom->info->domain_attr ? dom->info->domain_attr->av_type : FI_AV_UNSPEC;
	if (attr->type != FI_AV_UNSPEC && dom_type != FI_AV_UNSPEC && attr->type != dom_type) {
		VRMA_WARN(FI_LOG_AV, "fi_av_open: type %s, but the domain was opened for %s\n",
			  type_name(attr->type), type_name(dom_type));
		return -FI_EINVAL;
	}
	uint32_t format = dom->info->addr_format;
	if (format == FI_FORMAT_UNSPEC)
		format = FI_SOCKADDR;
	if (format != FI_SOCKADDR_IN && format != FI_SOCKADDR_IN6 && format != FI_SOCKADDR &&
	    format != FI_ADDR_STR) {
		VRMA_WARN(FI_LOG_AV, "fi_av_open: the domain's address format %u is not an IP one\n",
			  format);
		return -FI_EINVAL;
	}
	fi_av_type type = attr->type;
	if (type == FI_AV_UNSPEC)
		type = dom_type != FI_AV_UNSPEC ? dom_type : FI_AV_MAP;

	auto av = std::make_unique<Av>();
	av->domain = dom;
	av->type = type;
	av->addr_format = format;
	av->events = attr->flags & FI_EVENT;
	av->user_id_attr = attr->flags & FI_AV_USER_ID;
	av->user_ids.store(av->user_id_attr, std::memory_order_relaxed);
	av->table = rdm::AvTable(type == FI_AV_MAP ? rdm::AvTable::Kind::Map
						   : rdm::AvTable::Kind::Table);
	if (attr->count && av->table.reserve(std::min(attr->count, av->table.max_slots())))
		VRMA_INFO(FI_LOG_AV, "fi_av_open: no room reserved for %zu addresses\n", attr->count);
	av->fid.fclass = FI_CLASS_AV;
	av->fid.context = context;
	av->fid.ops = const_cast<fi_ops *>(&av_fi_ops);
	av->ops = reinterpret_cast<fi_ops_av *>(const_cast<abi::OpsAv *>(&av_ops));
	attr->type = type;
	dom->refs++;
	*av_out = av.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

} // namespace vrma
