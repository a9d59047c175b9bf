// vrma_bench: what every part shares (errors, names, fi_getinfo, addresses).

#include "vrma_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdarg>
#include <cstring>

namespace vrma_bench {

std::atomic<bool> g_abort{false};

void fail(int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fflush(stdout);
	fprintf(stderr, "vrma_bench: %s\n", msg);
	g_abort.store(true);
	throw BenchError{status};
}

void fail_call(const char *call, long rc)
{
	fail(kExitError, "%s: %s (%ld)", call, fi_strerror(static_cast<int>(-rc)), rc);
}

void stop_quietly()
{
	throw BenchError{kExitError};
}

const char *op_name(Op op)
{
	switch (op) {
	case Op::write: return "write";
	case Op::read: return "read";
	case Op::writedata: return "writedata";
	case Op::inject_write: return "inject_write";
	case Op::send: return "send";
	case Op::tagged: return "tagged";
	case Op::fadd: return "fadd";
	case Op::cswap: return "cswap";
	case Op::amax: return "amax";
	}
	return "?";
}

const char *mode_name(Mode mode)
{
	switch (mode) {
	case Mode::bw: return "bw";
	case Mode::lat: return "lat";
	case Mode::rate: return "rate";
	}
	return "?";
}

const char *ep_type_name(EpType type)
{
	switch (type) {
	case EpType::msg: return "msg";
	case EpType::rdm: return "rdm";
	}
	return "?";
}

std::string flags_name(uint8_t flags)
{
	static const struct {
		uint8_t bit;
		const char *name;
	} names[] = {{kFlagDelivery, "delivery-complete"}, {kFlagCommit, "commit-complete"},
		     {kFlagFence, "fence"}, {kFlagMore, "more"}, {kFlagInject, "inject"}};
	std::string out;
	for (const auto &n : names) {
		if (!(flags & n.bit))
			continue;
		if (!out.empty())
			out += ',';
		out += n.name;
	}
	return out.empty() ? "none" : out;
}

std::vector<size_t> run_sizes(const Options &opt)
{
	if (is_atomic(opt.op))
		return {kAtomicSize};
	std::vector<size_t> sizes = opt.sizes;
	if (sizes.empty()) {
		if (opt.sizes_all || opt.mode != Mode::rate)
			for (size_t s = 1; s <= opt.max_size; s *= 2)
				sizes.push_back(s);
		else
			sizes.push_back(8);
	}
	return sizes;
}

InfoPtr alloc_hints()
{
	InfoPtr hints(fi_allocinfo());
	if (!hints)
		fail(kExitError, "fi_allocinfo: out of memory");
	return hints;
}

InfoPtr first_info(const Options &opt, const fi_info *hints, const std::string &what, const char *node,
		   const char *service, uint64_t flags)
{
	fi_info *list = nullptr;
	int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), node, service, flags,
			    hints, &list);
	if (rc == -FI_ENODATA)
		fail(kExitUnsupported,
		     "provider %s offers no endpoint for %s%s%s (fi_getinfo: %s): not supported",
		     opt.provider.empty() ? "(any)" : opt.provider.c_str(), what.c_str(),
		     node ? " at " : "", node ? node : "", fi_strerror(-rc));
	if (rc)
		fail_call("fi_getinfo", rc);
	InfoPtr first(fi_dupinfo(list));
	fi_freeinfo(list);
	if (!first)
		fail(kExitError, "fi_dupinfo: out of memory");
	return first;
}

std::string sockaddr_host(const sockaddr *sa)
{
	char text[INET6_ADDRSTRLEN] = "";
	if (sa->sa_family == AF_INET) {
		const auto *in = reinterpret_cast<const sockaddr_in *>(sa);
		if (in->sin_addr.s_addr == htonl(INADDR_ANY))
			return "";
		inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
	} else if (sa->sa_family == AF_INET6) {
		const auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
		if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
			return "";
		inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
	}
	return text;
}

double percentile(const std::vector<double> &sorted, double p)
{
	size_t rank = static_cast<size_t>(p * static_cast<double>(sorted.size()) + 0.999999);
	rank = std::clamp<size_t>(rank, 1, sorted.size());
	return sorted[rank - 1];
}

} // namespace vrma_bench
