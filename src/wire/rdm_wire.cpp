// RdmAddr conversions: sockaddrs, libfabric's FI_ADDR_STR form, insertsym's
// node/service pairs.
#include "wire/rdm_wire.h"

#include <arpa/inet.h>
#include <cstdio>

namespace vrma::rdm {

namespace {

constexpr std::string_view kPrefix4 = "fi_sockaddr_in://";
constexpr std::string_view kPrefix6 = "fi_sockaddr_in6://";

// A 16-byte IPv6 address into canonical form.
void set_v6(RdmAddr &a, const uint8_t *a16) noexcept
{
	memset(a.addr, 0, sizeof a.addr);
	if (is_v4_mapped(a16)) {
		a.family = AF_INET;
		memcpy(a.addr, a16 + 12, 4);
	} else {
		a.family = AF_INET6;
		memcpy(a.addr, a16, 16);
	}
}

// 1-5 decimal digits, at most 65535, nothing else.
bool parse_port(std::string_view s, uint16_t &port) noexcept
{
	if (s.empty() || s.size() > 5)
		return false;
	uint32_t v = 0;
	for (char c : s) {
		if (c < '0' || c > '9')
			return false;
		v = v * 10 + static_cast<uint32_t>(c - '0');
	}
	if (v > UINT16_MAX)
		return false;
	port = static_cast<uint16_t>(v);
	return true;
}

// A numeric address of family af (inet_pton's syntax) into a16 (4 or 16
// bytes). s need not be NUL-terminated; an embedded NUL is refused.
bool parse_ip(int af, std::string_view s, uint8_t *a16) noexcept
{
	char buf[INET6_ADDRSTRLEN];
	if (s.empty() || s.size() >= sizeof buf || s.find('\0') != std::string_view::npos)
		return false;
	memcpy(buf, s.data(), s.size());
	buf[s.size()] = '\0';
	return inet_pton(af, buf, a16) == 1;
}

} // namespace

bool from_sockaddr(const sockaddr *sa, size_t len, RdmAddr &out) noexcept
{
	if (!sa || len < sizeof(sa_family_t))
		return false;
	sa_family_t family;
	memcpy(&family, &sa->sa_family, sizeof family);
	if (family == AF_INET) {
		sockaddr_in sin;
		if (len < sizeof sin)
			return false;
		memcpy(&sin, sa, sizeof sin);
		RdmAddr a;
		a.family = AF_INET;
		a.port = ntohs(sin.sin_port);
		memcpy(a.addr, &sin.sin_addr, 4);
		out = a;
		return true;
	}
	if (family == AF_INET6) {
		sockaddr_in6 sin6;
		if (len < sizeof sin6)
			return false;
		memcpy(&sin6, sa, sizeof sin6);
		if (sin6.sin6_scope_id != 0)
			return false;
		RdmAddr a;
		a.port = ntohs(sin6.sin6_port);
		set_v6(a, sin6.sin6_addr.s6_addr);
		out = a;
		return true;
	}
	return false;
}

size_t to_sockaddr(const RdmAddr &a, sockaddr_storage &out) noexcept
{
	if (!valid(a))
		return 0;
	memset(&out, 0, sizeof out);
	if (a.family == AF_INET) {
		sockaddr_in sin{};
		sin.sin_family = AF_INET;
		sin.sin_port = htons(a.port);
		memcpy(&sin.sin_addr, a.addr, 4);
		memcpy(&out, &sin, sizeof sin);
		return sizeof sin;
	}
	sockaddr_in6 sin6{};
	sin6.sin6_family = AF_INET6;
	sin6.sin6_port = htons(a.port);
	memcpy(&sin6.sin6_addr, a.addr, 16);
	memcpy(&out, &sin6, sizeof sin6);
	return sizeof sin6;
}

size_t format_addr(const RdmAddr &a, char *buf, size_t size) noexcept
{
	char ip[INET6_ADDRSTRLEN];
	if (!valid(a) || !inet_ntop(a.family, a.addr, ip, sizeof ip)) {
		if (size > 0)
			buf[0] = '\0';
		return 0;
	}
	const int n = a.family == AF_INET
			      ? snprintf(buf, size, "%s%s:%u", kPrefix4.data(), ip, unsigned(a.port))
			      : snprintf(buf, size, "%s[%s]:%u", kPrefix6.data(), ip, unsigned(a.port));
	return n < 0 ? 0 : static_cast<size_t>(n);
}

bool parse_addr(std::string_view s, RdmAddr &out) noexcept
{
	RdmAddr a;
	std::string_view port;
	if (s.starts_with(kPrefix6)) {
		s.remove_prefix(kPrefix6.size());
		const size_t close = s.find(']');
		if (s.empty() || s[0] != '[' || close == std::string_view::npos ||
		    close + 1 >= s.size() || s[close + 1] != ':')
			return false;
		uint8_t a16[16];
		if (!parse_ip(AF_INET6, s.substr(1, close - 1), a16))
			return false;
		set_v6(a, a16);
		port = s.substr(close + 2);
	} else if (s.starts_with(kPrefix4)) {
		s.remove_prefix(kPrefix4.size());
		const size_t colon = s.find(':');
		if (colon == std::string_view::npos || !parse_ip(AF_INET, s.substr(0, colon), a.addr))
			return false;
		a.family = AF_INET;
		port = s.substr(colon + 1);
	} else {
		return false;
	}
	if (!parse_port(port, a.port))
		return false;
	out = a;
	return true;
}

bool parse_node_service(const char *node, const char *service, RdmAddr &out) noexcept
{
	if (!node || !service)
		return false;
	RdmAddr a;
	uint8_t a16[16];
	if (parse_ip(AF_INET, node, a.addr)) {
		a.family = AF_INET;
	} else if (parse_ip(AF_INET6, node, a16)) {
		set_v6(a, a16);
	} else {
		return false;
	}
	if (!parse_port(service, a.port))
		return false;
	out = a;
	return true;
}

bool nth_addr(const RdmAddr &base, uint64_t node_index, uint64_t service_index,
	      RdmAddr &out) noexcept
{
	if (!valid(base) || service_index > uint64_t(UINT16_MAX - base.port))
		return false;
	RdmAddr a = base;
	a.port = static_cast<uint16_t>(a.port + service_index);
	// Add node_index to the address as a big-endian integer, byte by byte
	// from the last; carry holds what is still to add, shifted to the byte.
	uint64_t carry = node_index;
	for (size_t i = a.family == AF_INET ? 4 : 16; i-- > 0 && carry;) {
		const uint64_t v = a.addr[i] + (carry & 0xff);
		a.addr[i] = static_cast<uint8_t>(v);
		carry = (carry >> 8) + (v >> 8);
	}
	// Past the last address, or an IPv6 one that turned into a mapped IPv4
	// address (not canonical: it would be another family's address).
	if (carry || !valid(a))
		return false;
	out = a;
	return true;
}

} // namespace vrma::rdm
