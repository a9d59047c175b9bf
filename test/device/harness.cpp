#include "harness.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace vt {

uint32_t test_api = FI_VERSION(1, 17);
GetinfoFn test_getinfo = fi_getinfo;

fi_info *base_hints()
{
	fi_info *h = fi_allocinfo();
	ck_assert_ptr_nonnull(h);
	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG | FI_RMA;
	h->mode = FI_CONTEXT | FI_RX_CQ_DATA;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->fabric_attr->prov_name = strdup("vrma");
	h->addr_format = FI_SOCKADDR_IN;
	return h;
}

fi_info *get_info(fi_info *hints, const char *node, const char *service, uint64_t flags)
{
	fi_info *own = nullptr;
	if (!hints)
		hints = own = base_hints();
	fi_info *info = nullptr;
	int rc = test_getinfo(test_api, node, service, flags, hints, &info);
	if (own)
		fi_freeinfo(own);
	ck_assert_msg(rc == 0, "fi_getinfo: %s", fi_strerror(-rc));
	ck_assert_ptr_nonnull(info);
	return info;
}

Env::Env(uint64_t extra_mode, uint64_t tx_op_flags)
{
	fi_info *h = base_hints();
	h->mode |= extra_mode;
	h->tx_attr->op_flags = tx_op_flags;
	if (tx_op_flags & FI_DELIVERY_COMPLETE)
		h->caps = FI_RMA; // honoured for RMA only
	info = get_info(h);
	fi_freeinfo(h);
	ck_assert_int_eq(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
	ck_assert_int_eq(fi_domain(fabric, info, &domain, nullptr), 0);
}

Env::Env(fi_info *hints)
{
	info = get_info(hints);
	ck_assert_int_eq(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
	ck_assert_int_eq(fi_domain(fabric, info, &domain, nullptr), 0);
}

Env::~Env()
{
	if (domain)
		ck_assert_int_eq(fi_close(&domain->fid), 0);
	if (fabric)
		ck_assert_int_eq(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
}

fid_eq *open_eq(Env &env)
{
	fi_eq_attr attr{};
	attr.wait_obj = FI_WAIT_FD;
	fid_eq *eq = nullptr;
	ck_assert_int_eq(fi_eq_open(env.fabric, &attr, &eq, nullptr), 0);
	return eq;
}

fid_cq *open_cq(Env &env, fi_cq_format format, fi_wait_obj wait, size_t size)
{
	fi_cq_attr attr{};
	attr.format = format;
	attr.wait_obj = wait;
	attr.size = size;
	fid_cq *cq = nullptr;
	ck_assert_int_eq(fi_cq_open(env.domain, &attr, &cq, nullptr), 0);
	return cq;
}

fid_av *open_av(Env &env, fi_av_type type, uint64_t flags, size_t count)
{
	fi_av_attr attr{};
	attr.type = type;
	attr.flags = flags;
	attr.count = count;
	fid_av *av = nullptr;
	ck_assert_int_eq(fi_av_open(env.domain, &attr, &av, nullptr), 0);
	ck_assert_ptr_nonnull(av);
	return av;
}

fid_pep *listen_pep(Env &env, fid_eq *eq, sockaddr_storage *bound)
{
	fi_info *info = fi_dupinfo(env.info);
	// Listen on the device address, any port.
	reinterpret_cast<sockaddr_in *>(info->src_addr)->sin_port = 0;
	fid_pep *pep = nullptr;
	ck_assert_int_eq(fi_passive_ep(env.fabric, info, &pep, nullptr), 0);
	fi_freeinfo(info);
	ck_assert_int_eq(fi_pep_bind(pep, &eq->fid, 0), 0);
	ck_assert_int_eq(fi_listen(pep), 0);
	size_t len = sizeof *bound;
	ck_assert_int_eq(fi_getname(&pep->fid, bound, &len), 0);
	ck_assert_int_eq(len, sizeof(sockaddr_in));
	ck_assert_int_ne(reinterpret_cast<sockaddr_in *>(bound)->sin_port, 0);
	return pep;
}

Side open_client(Env &env, const sockaddr *dest, uint64_t bind_flags, size_t tx_size,
		 size_t rx_size)
{
	PairOptions opt;
	opt.bind_flags = bind_flags;
	opt.tx_size = tx_size;
	opt.rx_size = rx_size;
	return open_client(env, dest, opt);
}

fid_cntr *open_cntr(Env &env, fi_wait_obj wait)
{
	fi_cntr_attr attr{};
	attr.events = FI_CNTR_EVENTS_COMP;
	attr.wait_obj = wait;
	fid_cntr *c = nullptr;
	ck_assert_int_eq(fi_cntr_open(env.domain, &attr, &c, nullptr), 0);
	return c;
}

Side open_client(Env &env, const sockaddr *dest, const PairOptions &opt)
{
	const uint64_t bind_flags = opt.bind_flags;
	const size_t tx_size = opt.tx_size, rx_size = opt.rx_size;
	Side s;
	s.info = fi_dupinfo(env.info);
	s.info->dest_addr = malloc(sizeof(sockaddr_in));
	memcpy(s.info->dest_addr, dest, sizeof(sockaddr_in));
	s.info->dest_addrlen = sizeof(sockaddr_in);
	reinterpret_cast<sockaddr_in *>(s.info->src_addr)->sin_port = 0;
	if (tx_size)
		s.info->tx_attr->size = tx_size;
	if (rx_size)
		s.info->rx_attr->size = rx_size;
	s.eq = open_eq(env);
	ck_assert_int_eq(fi_endpoint(env.domain, s.info, &s.ep, nullptr), 0);
	ck_assert_int_eq(fi_ep_bind(s.ep, &s.eq->fid, 0), 0);
	if (opt.client_cq) {
		s.cq = open_cq(env, FI_CQ_FORMAT_DATA, FI_WAIT_FD, opt.client_cq_size);
		ck_assert_int_eq(fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV | bind_flags), 0);
	}
	for (auto &[c, flags] : opt.client_cntrs)
		ck_assert_int_eq(fi_ep_bind(s.ep, &c->fid, flags), 0);
	if (opt.client_before_enable)
		opt.client_before_enable(s.ep);
	ck_assert_int_eq(fi_enable(s.ep), 0);
	return s;
}

void close_side(Side &s)
{
	if (s.ep)
		ck_assert_int_eq(fi_close(&s.ep->fid), 0);
	if (s.cq)
		ck_assert_int_eq(fi_close(&s.cq->fid), 0);
	if (s.eq)
		ck_assert_int_eq(fi_close(&s.eq->fid), 0);
	fi_freeinfo(s.info);
	s = Side{};
}

ssize_t wait_eq(fid_eq *eq, uint32_t *event, void *buf, size_t len, int timeout_ms)
{
	return fi_eq_sread(eq, event, buf, len, timeout_ms, 0);
}

Pair::Pair(Env &e, const PairOptions &opt) : env(e)
{
	pep_eq = open_eq(env);
	sockaddr_storage bound{};
	pep = listen_pep(env, pep_eq, &bound);
	client = open_client(env, reinterpret_cast<sockaddr *>(&bound), opt);
	ck_assert_int_eq(fi_connect(client.ep, nullptr, opt.connect_data.data(),
				    opt.connect_data.size()), 0);

	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
	auto *entry = reinterpret_cast<fi_eq_cm_entry *>(buf);
	uint32_t event = 0;
	ssize_t n = wait_eq(pep_eq, &event, buf, sizeof buf);
	ck_assert_msg(n >= static_cast<ssize_t>(sizeof(fi_eq_cm_entry)), "CONNREQ: %zd", n);
	ck_assert_uint_eq(event, FI_CONNREQ);
	ck_assert_ptr_eq(entry->fid, &pep->fid);
	connreq_data.assign(reinterpret_cast<char *>(entry->data), n - sizeof(fi_eq_cm_entry));
	server.info = entry->info;
	if (opt.tx_size)
		server.info->tx_attr->size = opt.tx_size;
	if (opt.rx_size)
		server.info->rx_attr->size = opt.rx_size;
	server.info->mode &= ~opt.server_mode_off;
	server.info->rx_attr->mode &= ~opt.server_mode_off;
	server.eq = open_eq(env);
	server.cq = open_cq(env, FI_CQ_FORMAT_DATA, opt.server_cq_wait, opt.server_cq_size);
	ck_assert_int_eq(fi_endpoint(env.domain, server.info, &server.ep, nullptr), 0);
	ck_assert_int_eq(fi_ep_bind(server.ep, &server.eq->fid, 0), 0);
	ck_assert_int_eq(fi_ep_bind(server.ep, &server.cq->fid, FI_TRANSMIT | FI_RECV), 0);
	for (auto &[c, flags] : opt.server_cntrs)
		ck_assert_int_eq(fi_ep_bind(server.ep, &c->fid, flags), 0);
	if (opt.server_before_enable)
		opt.server_before_enable(server.ep);
	ck_assert_int_eq(fi_enable(server.ep), 0);
	ck_assert_int_eq(fi_accept(server.ep, opt.accept_data.data(), opt.accept_data.size()), 0);

	n = wait_eq(server.eq, &event, buf, sizeof buf);
	ck_assert_msg(n >= static_cast<ssize_t>(sizeof(fi_eq_cm_entry)), "server CONNECTED: %zd", n);
	ck_assert_uint_eq(event, FI_CONNECTED);
	ck_assert_ptr_eq(entry->fid, &server.ep->fid);
	n = wait_eq(client.eq, &event, buf, sizeof buf);
	ck_assert_msg(n >= static_cast<ssize_t>(sizeof(fi_eq_cm_entry)), "client CONNECTED: %zd", n);
	ck_assert_uint_eq(event, FI_CONNECTED);
	ck_assert_ptr_eq(entry->fid, &client.ep->fid);
	connected_data.assign(reinterpret_cast<char *>(entry->data), n - sizeof(fi_eq_cm_entry));
}

Pair::~Pair()
{
	close_side(client);
	close_side(server);
	if (pep)
		ck_assert_int_eq(fi_close(&pep->fid), 0);
	if (pep_eq)
		ck_assert_int_eq(fi_close(&pep_eq->fid), 0);
}

ssize_t wait_cq(fid_cq *cq, fi_cq_data_entry *entry, fi_cq_err_entry *err, int timeout_ms)
{
	ssize_t n = fi_cq_sread(cq, entry, 1, nullptr, timeout_ms);
	if (n == -FI_EAVAIL && err) {
		*err = fi_cq_err_entry{};
		ssize_t r = fi_cq_readerr(cq, err, 0);
		ck_assert_int_eq(r, 1);
	}
	return n;
}

fi_cq_data_entry expect_completion(fid_cq *cq, void *context, uint64_t flags)
{
	fi_cq_data_entry e{};
	fi_cq_err_entry err{};
	ssize_t n = wait_cq(cq, &e, &err);
	ck_assert_msg(n == 1, "expected a completion, got %zd (%s; err %d %s)", n,
		      fi_strerror(n < 0 ? static_cast<int>(-n) : 0), err.err,
		      err.err ? fi_strerror(err.err) : "");
	ck_assert_ptr_eq(e.op_context, context);
	ck_assert_msg(e.flags == flags, "flags 0x%llx, expected 0x%llx",
		      static_cast<unsigned long long>(e.flags), static_cast<unsigned long long>(flags));
	return e;
}

fi_cq_err_entry expect_error(fid_cq *cq)
{
	fi_cq_data_entry e{};
	fi_cq_err_entry err{};
	ssize_t n = wait_cq(cq, &e, &err);
	ck_assert_msg(n == -FI_EAVAIL, "expected an error completion, got %zd", n);
	return err;
}

void expect_no_completion(fid_cq *cq, int ms)
{
	fi_cq_data_entry e{};
	ssize_t n = fi_cq_sread(cq, &e, 1, nullptr, ms);
	ck_assert_msg(n == -FI_EAGAIN, "unexpected completion: %zd (context %p flags 0x%llx)", n,
		      n == 1 ? e.op_context : nullptr,
		      static_cast<unsigned long long>(n == 1 ? e.flags : 0));
}

namespace {

// The process's pinned memory (VmPin of /proc/self/status), in bytes.
rlim_t pinned_bytes()
{
	FILE *f = fopen("/proc/self/status", "r");
	ck_assert_ptr_nonnull(f);
	char line[256];
	unsigned long kb = 0;
	bool found = false;
	while (!found && fgets(line, sizeof line, f))
		found = sscanf(line, "VmPin: %lu kB", &kb) == 1;
	fclose(f);
	ck_assert_msg(found, "no VmPin in /proc/self/status");
	return static_cast<rlim_t>(kb) * 1024;
}

} // namespace

void drop_ipc_lock()
{
	__user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
	ck_assert_msg(syscall(SYS_capget, &hdr, data) == 0, "capget: %s", strerror(errno));
	constexpr uint32_t bit = 1u << (CAP_IPC_LOCK % 32);
	__user_cap_data_struct &d = data[CAP_IPC_LOCK / 32];
	if (!(d.effective & bit))
		return;
	d.effective &= ~bit;
	ck_assert_msg(syscall(SYS_capset, &hdr, data) == 0, "capset without CAP_IPC_LOCK: %s", strerror(errno));
}

MemlockLimit::MemlockLimit(rlim_t bytes)
{
	ck_assert_int_eq(getrlimit(RLIMIT_MEMLOCK, &saved_), 0);
	limit_ = pinned_bytes() + bytes;
	rlimit low = saved_;
	low.rlim_cur = std::min(limit_, saved_.rlim_max);
	ck_assert_msg(setrlimit(RLIMIT_MEMLOCK, &low) == 0, "setrlimit(RLIMIT_MEMLOCK): %s", strerror(errno));
	active_ = true;
}

void MemlockLimit::restore()
{
	if (!active_)
		return;
	active_ = false;
	ck_assert_msg(setrlimit(RLIMIT_MEMLOCK, &saved_) == 0, "restoring RLIMIT_MEMLOCK: %s", strerror(errno));
}

Region::Region(Env &env, size_t len, uint64_t access, uint64_t flags) : buf(len ? len : 1)
{
	ck_assert_int_eq(fi_mr_reg(env.domain, buf.data(), buf.size(), access, 0, 0, flags, &mr, nullptr), 0);
}

Region::~Region()
{
	if (mr)
		fi_close(&mr->fid);
}

void Region::fill(uint8_t seed)
{
	for (size_t i = 0; i < buf.size(); i++)
		buf[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}

bool Region::check(uint8_t seed, size_t len, size_t offset) const
{
	for (size_t i = 0; i < len; i++)
		if (buf[offset + i] != static_cast<uint8_t>(seed + i * 7 + (i >> 8)))
			return false;
	return true;
}

fi_vrma_domain_ops *vrma_domain_ops(fid_domain *domain)
{
	void *ops = nullptr;
	ck_assert_int_eq(fi_open_ops(&domain->fid, FI_VRMA_DOMAIN_OPS, 0, &ops, nullptr), 0);
	ck_assert_ptr_nonnull(ops);
	auto *d = static_cast<fi_vrma_domain_ops *>(ops);
	ck_assert_uint_ge(d->size, sizeof(fi_vrma_domain_ops));
	return d;
}

fi_vrma_commit_stats vrma_commit_stats(fid_domain *domain)
{
	fi_vrma_commit_stats s{};
	ck_assert_int_eq(vrma_domain_ops(domain)->commit_stats(domain, &s), 0);
	return s;
}

FileMapping::FileMapping(fid_domain *domain, size_t n, uint64_t access, uint64_t flags) : len(n)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	path = std::string(dir) + "/vrma-file-XXXXXX";
	fd = mkstemp(path.data());
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, static_cast<off_t>(len)), 0);
	map_and_register(domain, access, flags);
}

FileMapping::FileMapping(fid_domain *domain, const char *existing, size_t n, uint64_t access)
	: path(existing), len(n), temporary(false)
{
	fd = open(existing, O_RDWR | O_CLOEXEC);
	ck_assert_msg(fd >= 0, "open %s: %s", existing, strerror(errno));
	map_and_register(domain, access, 0);
}

void FileMapping::map_and_register(fid_domain *domain, uint64_t access, uint64_t flags)
{
	void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	p = static_cast<uint8_t *>(m);
	ck_assert_int_eq(fi_mr_reg(domain, p, len, access, 0, 0, flags, &mr, nullptr), 0);
}

FileMapping::~FileMapping()
{
	if (mr)
		fi_close(&mr->fid);
	munmap(p, len);
	close(fd);
	if (temporary)
		unlink(path.c_str());
}

std::vector<uint8_t> FileMapping::file_bytes(size_t off, size_t n) const
{
	std::vector<uint8_t> out(n);
	ck_assert_int_eq(pread(fd, out.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
	return out;
}

} // namespace vt
