// Provider registration and parameters.
#include "vrma_base.h"
#include "vrma_rdm_api.h"

#include <algorithm>

#include <arpa/inet.h>
#include <cstdio>
#include <cstdlib>

namespace vrma {

namespace {

void cleanup() noexcept { info_cleanup(); }

int fabric_entry(fi_fabric_attr *attr, fid_fabric **fabric, void *context)
{
	return fabric_open(attr, fabric, context);
}

int getinfo_entry(uint32_t version, const char *node, const char *service, uint64_t flags,
		  const fi_info *hints, fi_info **info)
{
	return getinfo(version, node, service, flags, hints, info);
}

void define_size(const char *name, const char *help, size_t *value)
{
	fi_param_define(&provider, name, FI_PARAM_SIZE_T, help);
	size_t v;
	if (fi_param_get_size_t(&provider, name, &v) == FI_SUCCESS && v > 0)
		*value = v;
}

void define_int(const char *name, const char *help, int *value)
{
	fi_param_define(&provider, name, FI_PARAM_INT, help);
	int v;
	if (fi_param_get_int(&provider, name, &v) == FI_SUCCESS)
		*value = v;
}

} // namespace

int64_t rdm_drain_timeout_ms() noexcept
{
	size_t v;
	if (fi_param_get_size_t(&provider, "rdm_drain_timeout", &v) == FI_SUCCESS)
		return static_cast<int64_t>(std::min<size_t>(v, size_t(1) << 40));
	return kRdmDrainTimeoutDefaultMs;
}

int64_t rdm_connect_timeout_ms() noexcept
{
	size_t v;
	if (fi_param_get_size_t(&provider, "rdm_connect_timeout", &v) == FI_SUCCESS)
		return static_cast<int64_t>(std::min<size_t>(v, size_t(1) << 40));
	return kRdmConnectTimeoutDefaultMs;
}

int64_t rdm_idle_timeout_ms() noexcept
{
	size_t v;
	if (fi_param_get_size_t(&provider, "rdm_idle_timeout", &v) == FI_SUCCESS)
		return static_cast<int64_t>(std::min<size_t>(v, size_t(1) << 40));
	return 0;
}

size_t rdm_max_peers() noexcept
{
	size_t v;
	if (fi_param_get_size_t(&provider, "rdm_max_peers", &v) == FI_SUCCESS && v > 0)
		return v;
	return kRdmMaxPeersDefault;
}

size_t rdm_unexpected_max() noexcept
{
	size_t v;
	if (fi_param_get_size_t(&provider, "rdm_unexpected_max", &v) == FI_SUCCESS && v > 0)
		return v;
	return kRdmUnexpectedMaxDefault;
}

fi_provider provider = {
	.version = kProviderVersion,
	.fi_version = abi::kApiMin,
	.context = {},
	.name = "vrma",
	.getinfo = getinfo_entry,
	.fabric = fabric_entry,
	.cleanup = cleanup,
};

Params params;

void params_init() noexcept
{
	define_size("tx_size", "Default send queue depth of an endpoint (default: 384)",
		    &params.tx_size);
	define_size("rx_size", "Default receive queue depth of an endpoint (default: 384)",
		    &params.rx_size);
	define_size("iov_limit",
		    "Default scatter/gather entries per operation, up to the device limit (default: 4)",
		    &params.iov_limit);
	define_size("cq_size", "Default completion queue size (default: 1024)", &params.cq_size);
	define_int("inline_size",
		   "Bytes sent inline in the work request; -1 uses the device maximum (default: -1)",
		   &params.inline_size);
	define_size("inject_size",
		    "Bytes an inject may carry; beyond the inline size they are copied into registered bounce buffers (default: 4096)",
		    &params.inject_size);
	define_size("max_wr_size",
		    "Largest byte count of one work request; longer RMA segments are split (default: 0, the device's max_msg_sz)",
		    &params.max_wr_size);
	define_size("max_cqe",
		    "Testing: entries a completion queue grows to at most, below the device's max_cqe (default: 0, the device's)",
		    &params.max_cqe);
	define_int("cm_timeout", "Address and route resolution timeout in ms (default: 2000)",
		   &params.cm_timeout_ms);
	define_int("ack_timeout",
		   "RC connections: the ACK timeout as an exponent, 4.096 us times 2^N, 1 to 31; a request unanswered that long is sent again; 0: rdma_cm's, from the path (Linux 6.1 RoCE: 19, 2.1 s) (default: 17, 0.54 s)",
		   &params.ack_timeout);
	define_int("retry_count",
		   "RC connections: times an unanswered request is sent again before the connection fails, 0 to 7 (soft-RoCE takes 7 as without end) (default: 7)",
		   &params.retry_count);
	if (params.ack_timeout < 0 || params.ack_timeout > 31) {
		VRMA_WARN(FI_LOG_CORE, "FI_VRMA_ACK_TIMEOUT=%d is not 0 to 31: %d is used\n", params.ack_timeout,
			  Params::kAckTimeoutDefault);
		params.ack_timeout = Params::kAckTimeoutDefault;
	}
	if (params.retry_count < 0 || params.retry_count > 7) {
		VRMA_WARN(FI_LOG_CORE, "FI_VRMA_RETRY_COUNT=%d is not 0 to 7: 7 is used\n", params.retry_count);
		params.retry_count = 7;
	}
	define_int("listen_backlog", "Backlog of a listening passive endpoint (default: 1024)",
		   &params.listen_backlog);
	define_size("stage_buffers",
		    "Staging buffers of 64 KiB an endpoint with staged receives keeps registered and posted, 1 to 65 (default: 65)",
		    &params.stage_buffers);
	if (params.stage_buffers > kStageBuffers) {
		VRMA_WARN(FI_LOG_CORE, "FI_VRMA_STAGE_BUFFERS=%zu: at most %zu are used\n",
			  params.stage_buffers, kStageBuffers);
		params.stage_buffers = kStageBuffers;
	}
	define_size("rdm_eager_size",
		    "RDM endpoints: messages up to this many bytes are copied through provider buffers; longer ones are read by the receiver straight from the sender's buffer (default: 16384)",
		    &rdm_params.eager_size);
	define_size("rdm_rx_buffers", "RDM endpoints: receive buffers shared by all peers (default: 256)",
		    &rdm_params.rx_buffers);
	define_size("rdm_tx_buffers", "RDM endpoints: registered send buffers shared by all peers (default: 256)",
		    &rdm_params.tx_buffers);
	define_size("rdm_peer_tx_size",
		    "RDM endpoints: send queue depth of each peer's connection; its queue pair holds one more, and devices round queues up to a power of two, so 2^k - 2 uses a queue fully (default: 126)",
		    &rdm_params.peer_tx_size);
	{
		// 0 is a value here (nothing inline), unlike define_size's.
		fi_param_define(&provider, "rdm_peer_inline_size", FI_PARAM_SIZE_T,
				"RDM endpoints: bytes a peer's connection sends inline (header included) at most, below the device's inline size and FI_VRMA_INLINE_SIZE; every send queue entry of every peer has room for them; longer sends go through the endpoint's send buffers (default: 256)");
		size_t v;
		if (fi_param_get_size_t(&provider, "rdm_peer_inline_size", &v) == FI_SUCCESS)
			rdm_params.peer_inline_size = std::min<size_t>(v, 65536);
	}
	define_size("rdm_rndv_reads",
		    "RDM endpoints: rendezvous RDMA READs a connection keeps in flight at most, up to what its queue pair issues at once (max_rd_atomic); 0: that many (default: 8)",
		    &rdm_params.rndv_reads);
	define_size("rdm_rndv_read_size",
		    "RDM endpoints: bytes one rendezvous RDMA READ asks for at most; a message goes in windows of FI_VRMA_RDM_RNDV_READS such READs; 0: the device's largest (default: 16384)",
		    &rdm_params.rndv_read_size);
	fi_param_define(&provider, "rdm_drain_timeout", FI_PARAM_SIZE_T,
			"RDM endpoints: milliseconds a connection's sends may make no progress (the peer takes none of them) before it fails with FI_ETIMEDOUT and its operations end with errors; 0: never; read at each fi_endpoint (default: 300000)");
	fi_param_define(&provider, "rdm_connect_timeout", FI_PARAM_SIZE_T,
			"RDM endpoints: milliseconds a send may wait for a connection to its peer (from the first attempt, its retries included, until the connection is up) before the attempt ends and the next send returns -FI_ETIMEDOUT; 0: rdma_cm's own limit (about 100 s to a host that does not answer); read at each fi_endpoint (default: 60000)");
	fi_param_define(&provider, "rdm_idle_timeout", FI_PARAM_SIZE_T,
			"RDM endpoints: milliseconds a connection may go unused (nothing under way, nothing sent either way) before the endpoint asks its peer to close it; closed by agreement, it gives back its queue pair and is made again by the next operation; 0: never; read at each fi_endpoint (default: 0)");
	fi_param_define(&provider, "rdm_max_peers", FI_PARAM_SIZE_T,
			"RDM endpoints: peers (addresses it has exchanged messages with) an endpoint keeps at most, 2 or more; beyond, a send to a new address returns -FI_EAGAIN and a new peer's connect request is turned away until a peer without a connection is given back (from three quarters of this, the longest idle first); read at each fi_endpoint (default: 8192)");
	fi_param_define(&provider, "rdm_unexpected_max", FI_PARAM_SIZE_T,
			"RDM endpoints: bytes of unexpected messages (arrived before a matching receive) an endpoint keeps; beyond, their senders are paused (their sends return -FI_EAGAIN) until the queue has drained to half; read at each fi_endpoint (default: 67108864)");
	{
		int on = 0;
		fi_param_define(&provider, "rdm_native_atomics", FI_PARAM_BOOL,
				"RDM endpoints: FI_INT64/FI_UINT64 FI_SUM, FI_ATOMIC_READ and FI_CSWAP as device atomics (fetch-and-add, compare-and-swap) where the device has them; the other ops on those two types are then not offered, so that no word is updated by both the device and a CPU (default: false: every atomic executed by the target's vrma)");
		if (fi_param_get_bool(&provider, "rdm_native_atomics", &on) == 0)
			rdm_params.native_atomics = on != 0;
	}
	define_size("mr_keys",
		    "Scalable keys (mr_mode 0 or FI_MR_SCALABLE): regions a domain can publish under keys the application chose, rounded up to a power of two times 8 (default: 4096)",
		    &rdm_params.mr_keys);
	{
		// 0 is a value here (off), unlike define_size's.
		fi_param_define(&provider, "mr_on_demand", FI_PARAM_SIZE_T,
				"RDM domains: a region of at least this many bytes, mostly untouched when registered, is registered with the device (and its memory pinned) at its first remote access instead of at fi_mr_reg; 0: always at fi_mr_reg (default: 1048576)");
		size_t v;
		if (fi_param_get_size_t(&provider, "mr_on_demand", &v) == FI_SUCCESS)
			rdm_params.mr_on_demand = v;
	}
	// The wire bounds what a peer may name by the largest eager size.
	rdm_params.eager_size = std::clamp<size_t>(rdm_params.eager_size, 64, rdm::kEagerSizeMax);
	rdm_params.mr_keys = std::clamp<size_t>(rdm_params.mr_keys, keys::kBucketEntries,
						keys::kBucketEntries << 20);
	rdm_params.rx_buffers = std::clamp<size_t>(rdm_params.rx_buffers, 16, 65536);
	rdm_params.tx_buffers = std::clamp<size_t>(rdm_params.tx_buffers, 16, 65536);
	rdm_params.peer_tx_size = std::clamp<size_t>(rdm_params.peer_tx_size, 8, 16384);
	{
		int on = 1;
		fi_param_define(&provider, "mr_cache", FI_PARAM_BOOL,
				"RDM endpoints: keep the registrations of application buffers that rendezvous transfers make, invalidated through userfaultfd when the memory is unmapped (needs CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1 or /dev/userfaultfd; without it each transfer registers its buffer) (default: true)");
		if (fi_param_get_bool(&provider, "mr_cache", &on) == 0)
			mr_cache_params.enabled = on != 0;
	}
	define_size("mr_cache_max_size", "RDM endpoints: bytes of cached registrations a domain keeps at most (default: 1073741824)",
		    &mr_cache_params.max_size);
	define_size("mr_cache_max_count", "RDM endpoints: cached registrations a domain keeps at most (default: 1024)",
		    &mr_cache_params.max_count);
	// Read at each fi_domain (domain_auth_key), defined here for fi_info -e.
	fi_param_define(&provider, "auth_key", FI_PARAM_STRING,
			"RDM endpoints: the job key (1 to 64 bytes) of domains opened without domain_attr->auth_key: only peers that hold the same key connect; it never crosses the wire (default: none, connections are not authenticated)");
	{
		int layering = 0;
		fi_param_define(&provider, "util_layering", FI_PARAM_BOOL,
				"Offer vrma's MSG endpoints to utility providers, so that the core lists \"vrma;ofi_rxm\" RDM endpoints (listed before vrma's own RDM endpoint, which -p vrma then no longer selects) (default: false)");
		if (fi_param_get_bool(&provider, "util_layering", &layering) == 0)
			params.util_layering = layering != 0;
	}
	if (params.cm_timeout_ms <= 0)
		params.cm_timeout_ms = 2000;
	if (params.listen_backlog <= 0)
		params.listen_backlog = 1024;
}

int fid_no_bind(fid *f, fid *bfid, uint64_t) noexcept
{
	VRMA_WARN(FI_LOG_CORE, "fid class %zu cannot bind fid class %zu\n", f->fclass,
		  bfid ? bfid->fclass : 0);
	return -FI_ENOSYS;
}

int fid_no_control(fid *f, int command, void *) noexcept
{
	VRMA_WARN(FI_LOG_CORE, "fi_control(%d) is not supported on fid class %zu\n", command,
		  f->fclass);
	return -FI_ENOSYS;
}

int fid_no_ops_open(fid *f, const char *name, uint64_t, void **, void *) noexcept
{
	// Applications and utility providers probe for extensions: not a warning.
	VRMA_INFO(FI_LOG_CORE, "no ops '%s' on fid class %zu\n", name ? name : "(null)", f->fclass);
	return -FI_ENOSYS;
}

int fid_tostr(const fid *f, char *buf, size_t len) noexcept
{
	int n = std::snprintf(buf, len, "vrma fid class %zu", f->fclass);
	return n < 0 ? -FI_EINVAL : 0;
}

int fid_no_ops_set(fid *f, const char *name, uint64_t, void *, void *) noexcept
{
	// Utility providers probe this too (ofi_rxm: dynamic receive buffers).
	VRMA_INFO(FI_LOG_CORE, "fi_ops_set('%s') is not supported on fid class %zu\n",
		  name ? name : "(null)", f->fclass);
	return -FI_ENOSYS;
}

size_t sockaddr_len(const sockaddr *sa) noexcept
{
	if (!sa)
		return 0;
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(sockaddr_in);
	case AF_INET6:
		return sizeof(sockaddr_in6);
	default:
		return 0;
	}
}

std::string sockaddr_str(const sockaddr *sa)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	if (sa && sa->sa_family == AF_INET) {
		auto *in = reinterpret_cast<const sockaddr_in *>(sa);
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
		port = ntohs(in->sin_port);
	} else if (sa && sa->sa_family == AF_INET6) {
		auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
		port = ntohs(in6->sin6_port);
	}
	char out[INET6_ADDRSTRLEN + 16];
	std::snprintf(out, sizeof out, "%s:%u", host, port);
	return out;
}

#ifdef VRMA_LOCK_CHECKS
void lock_check_failed(const char *lock, const char *func, const char *file, int line) noexcept
{
	// Also on stderr: the core's log level may hide the warning.
	VRMA_WARN(FI_LOG_CORE, "lock check: %s not held by this thread in %s (%s:%d)\n", lock, func,
		  file, line);
	fprintf(stderr, "vrma: lock check: %s not held by this thread in %s (%s:%d)\n", lock, func,
		file, line);
	abort();
}
#endif

} // namespace vrma

// The one symbol the library exports: the core dlopen()s libvrma-fi.so and
// calls it once.
extern "C" __attribute__((visibility("default"))) fi_provider *fi_prov_ini(void)
{
	// A core lists a provider only for API versions up to its fi_version:
	// declare every version vrma implements that this core knows.
	const uint32_t core = fi_version();
	vrma::provider.fi_version = vrma::abi::provider_version(core);
	vrma::params_init();
	VRMA_INFO(FI_LOG_CORE, "libfabric core %u.%u: declaring API %u.%u\n", FI_MAJOR(core), FI_MINOR(core),
		  FI_MAJOR(vrma::provider.fi_version), FI_MINOR(vrma::provider.fi_version));
	return &vrma::provider;
}
