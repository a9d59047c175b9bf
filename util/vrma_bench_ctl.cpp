// vrma_bench: the TCP control connection of the runs over FI_EP_RDM (and of
// the two-sided runs over FI_EP_MSG): it carries each side's fabric address
// (an RDM endpoint has no connection data to carry it) and, per module, the
// rest of the set-up, never anything inside a timed section.

#include "vrma_bench.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vrma_bench {

Socket::~Socket()
{
	if (fd_ >= 0)
		close(fd_);
}

namespace {

addrinfo *resolve_tcp(const char *host, const std::string &port, bool passive)
{
	addrinfo hints{};
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = passive ? AI_PASSIVE : 0;
	addrinfo *res = nullptr;
	const int rc = getaddrinfo(host, port.c_str(), &hints, &res);
	if (rc)
		fail(kExitError, "control connection: cannot resolve %s port %s: %s", host ? host : "*",
		     port.c_str(), gai_strerror(rc));
	return res;
}

// What a hello's magic says the peer measures; nullptr: not vrma_bench.
const char *ctl_kind(uint32_t magic)
{
	switch (magic) {
	case kCtlMagicTwoSided: return "two-sided messages (-o tagged or -o send)";
	case kCtlMagicRma: return "RMA over FI_EP_RDM (-e rdm -o write, read, writedata or inject_write)";
	}
	return nullptr;
}

} // namespace

Socket tcp_listen(const char *host, const std::string &port, std::string &bound_port)
{
	addrinfo *res = resolve_tcp(host, port, true);
	int err = 0;
	for (addrinfo *ai = res; ai; ai = ai->ai_next) {
		Socket s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
		if (s.fd() < 0) {
			err = errno;
			continue;
		}
		const int one = 1;
		setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(s.fd(), ai->ai_addr, ai->ai_addrlen) || ::listen(s.fd(), 1)) {
			err = errno;
			continue;
		}
		sockaddr_storage name{};
		socklen_t len = sizeof name;
		getsockname(s.fd(), reinterpret_cast<sockaddr *>(&name), &len);
		bound_port = std::to_string(ntohs(name.ss_family == AF_INET6
							  ? reinterpret_cast<sockaddr_in6 *>(&name)->sin6_port
							  : reinterpret_cast<sockaddr_in *>(&name)->sin_port));
		freeaddrinfo(res);
		return s;
	}
	freeaddrinfo(res);
	fail(kExitError, "control connection: cannot listen on %s port %s: %s", host ? host : "*",
	     port.c_str(), strerror(err));
}

bool wait_readable(int fd, double limit, const Idle &idle)
{
	const auto start = Clock::now();
	for (;;) {
		pollfd p{fd, POLLIN, 0};
		const int n = poll(&p, 1, idle ? 1 : 100);
		if (n > 0)
			return true;
		if (n < 0 && errno != EINTR)
			fail(kExitError, "control connection: poll: %s", strerror(errno));
		if (g_abort.load(std::memory_order_relaxed))
			stop_quietly();
		if (idle)
			idle();
		if (limit > 0 && seconds_since(start) > limit)
			return false;
	}
}

Socket tcp_accept(const Socket &listener, const Idle &idle)
{
	wait_readable(listener.fd(), 0, idle);
	Socket s(accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
	if (s.fd() < 0)
		fail(kExitError, "control connection: accept: %s", strerror(errno));
	const int one = 1;
	setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return s;
}

Socket tcp_connect(const std::string &host, const std::string &port, double limit)
{
	const auto start = Clock::now();
	for (;;) {
		addrinfo *res = resolve_tcp(host.c_str(), port, false);
		int err = 0;
		for (addrinfo *ai = res; ai; ai = ai->ai_next) {
			Socket s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
			if (s.fd() < 0 || connect(s.fd(), ai->ai_addr, ai->ai_addrlen)) {
				err = errno;
				continue;
			}
			freeaddrinfo(res);
			const int one = 1;
			setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
			return s;
		}
		freeaddrinfo(res);
		if (g_abort.load(std::memory_order_relaxed))
			stop_quietly();
		if (err != ECONNREFUSED || (limit > 0 && seconds_since(start) > limit))
			fail(kExitError, "control connection to %s port %s: %s (no vrma_bench --server with the same -e there?)",
			     host.c_str(), port.c_str(), strerror(err));
		usleep(100000);
	}
}

void send_all(const Socket &s, const void *buf, size_t len)
{
	const auto *p = static_cast<const uint8_t *>(buf);
	while (len) {
		const ssize_t n = send(s.fd(), p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail(kExitError, "control connection: send: %s", strerror(errno));
		p += n;
		len -= static_cast<size_t>(n);
	}
}

void recv_all(const Socket &s, void *buf, size_t len, double limit, const char *what, const Idle &idle)
{
	auto *p = static_cast<uint8_t *>(buf);
	while (len) {
		if (!wait_readable(s.fd(), limit, idle))
			fail(kExitError, "nothing on the control connection for %.0f s while waiting for %s (see --timeout)",
			     limit, what);
		const ssize_t n = recv(s.fd(), p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			fail(kExitError, "control connection: recv: %s", strerror(errno));
		if (n == 0) {
			if (g_abort.load())
				stop_quietly();
			fail(kExitError, "the peer closed the control connection while we waited for %s", what);
		}
		p += n;
		len -= static_cast<size_t>(n);
	}
}

void recv_hello(const Socket &s, void *hello, size_t len, const CtlHeader &mine, bool answer, double limit,
		const char *who, const Idle &idle)
{
	CtlHeader peer;
	recv_all(s, &peer, sizeof peer, limit, "the peer's hello", idle);
	if (peer.magic != mine.magic) {
		const char *theirs = ctl_kind(peer.magic);
		if (!theirs)
			fail(kExitError, "%s: the peer of the control connection is not vrma_bench", who);
		if (answer)
			send_all(s, &mine, sizeof mine);
		fail(kExitError,
		     "%s: the peer measures %s, this side %s: give the server and the client the same -e and the same kind of -o",
		     who, theirs, ctl_kind(mine.magic));
	}
	if (peer.version != mine.version)
		fail(kExitError, "%s: the peer runs another version of vrma_bench (control protocol %u, ours %u)", who,
		     peer.version, mine.version);
	memcpy(hello, &peer, sizeof peer);
	recv_all(s, static_cast<uint8_t *>(hello) + sizeof peer, len - sizeof peer, limit, "the peer's hello",
		 idle);
}

bool peer_hung_up(const Socket &s)
{
	pollfd p{s.fd(), POLLIN, 0};
	if (poll(&p, 1, 0) <= 0)
		return false;
	uint8_t byte;
	const ssize_t n = recv(s.fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

void fill_wildcard(uint32_t addr_format, uint8_t *addr, uint32_t addrlen, const Socket &s)
{
	if (addr_format != FI_SOCKADDR_IN && addr_format != FI_SOCKADDR_IN6 && addr_format != FI_SOCKADDR)
		return;
	auto *sa = reinterpret_cast<sockaddr *>(addr);
	if (addrlen < sizeof(sockaddr_in) || !sockaddr_host(sa).empty())
		return;
	sockaddr_storage peer{};
	socklen_t len = sizeof peer;
	if (getpeername(s.fd(), reinterpret_cast<sockaddr *>(&peer), &len) || peer.ss_family != sa->sa_family)
		return;
	if (sa->sa_family == AF_INET)
		reinterpret_cast<sockaddr_in *>(sa)->sin_addr = reinterpret_cast<sockaddr_in *>(&peer)->sin_addr;
	else if (sa->sa_family == AF_INET6 && addrlen >= sizeof(sockaddr_in6))
		reinterpret_cast<sockaddr_in6 *>(sa)->sin6_addr = reinterpret_cast<sockaddr_in6 *>(&peer)->sin6_addr;
}

bool ip_node(uint32_t addr_format, const uint8_t *addr, uint32_t addrlen, std::string &host, std::string &port)
{
	if ((addr_format != FI_SOCKADDR_IN && addr_format != FI_SOCKADDR_IN6 && addr_format != FI_SOCKADDR) ||
	    addrlen < sizeof(sockaddr_in))
		return false;
	const auto *sa = reinterpret_cast<const sockaddr *>(addr);
	host = sockaddr_host(sa);
	if (sa->sa_family == AF_INET)
		port = std::to_string(ntohs(reinterpret_cast<const sockaddr_in *>(sa)->sin_port));
	else if (sa->sa_family == AF_INET6 && addrlen >= sizeof(sockaddr_in6))
		port = std::to_string(ntohs(reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_port));
	else
		return false;
	return !host.empty();
}

} // namespace vrma_bench
