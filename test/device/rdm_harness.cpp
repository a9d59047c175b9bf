#include "rdm_harness.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>

namespace vt {

namespace {

// The live nodes, in creation order.
std::vector<RdmNode *> &registry()
{
	static std::vector<RdmNode *> nodes;
	return nodes;
}

const char *prov_name(const fi_info *i)
{
	return i->fabric_attr && i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "(null)";
}

const char *ep_type_name(fi_ep_type t)
{
	switch (t) {
	case FI_EP_MSG:
		return "FI_EP_MSG";
	case FI_EP_RDM:
		return "FI_EP_RDM";
	case FI_EP_DGRAM:
		return "FI_EP_DGRAM";
	default:
		return "other";
	}
}

} // namespace

fi_info *rdm_hints(uint64_t caps, fi_av_type av_type)
{
	fi_info *h = fi_allocinfo();
	ck_assert_ptr_nonnull(h);
	h->ep_attr->type = FI_EP_RDM;
	h->caps = caps;
	h->mode = FI_CONTEXT;
	h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->domain_attr->av_type = av_type;
	h->fabric_attr->prov_name = strdup("vrma");
	h->addr_format = FI_SOCKADDR_IN;
	return h;
}

const fi_info *find_native_rdm(const fi_info *list)
{
	for (const fi_info *i = list; i; i = i->next)
		if (!strcmp(prov_name(i), "vrma") && i->ep_attr && i->ep_attr->type == FI_EP_RDM)
			return i;
	return nullptr;
}

std::string info_names(const fi_info *list)
{
	std::string s;
	for (const fi_info *i = list; i; i = i->next) {
		if (!s.empty())
			s += ", ";
		s += prov_name(i);
		s += "/";
		s += i->ep_attr ? ep_type_name(i->ep_attr->type) : "?";
	}
	return s.empty() ? "(none)" : s;
}

fi_info *rdm_get_info(const fi_info *hints)
{
	fi_info *own = nullptr;
	if (!hints)
		hints = own = rdm_hints();
	fi_info *list = get_info(const_cast<fi_info *>(hints), kRdmNodeAddr, nullptr, FI_SOURCE);
	if (own)
		fi_freeinfo(own);
	const fi_info *native = find_native_rdm(list);
	ck_assert_msg(native, "fi_getinfo gave no native vrma RDM entry: %s", info_names(list).c_str());
	fi_info *info = fi_dupinfo(native);
	fi_freeinfo(list);
	ck_assert_ptr_nonnull(info);
	return info;
}

RdmEnv::RdmEnv(const fi_info *hints)
{
	info = rdm_get_info(hints);
	ck_assert_int_eq(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
	ck_assert_int_eq(fi_domain(fabric, info, &domain, nullptr), 0);
}

RdmEnv::~RdmEnv()
{
	if (domain)
		ck_assert_int_eq(fi_close(&domain->fid), 0);
	if (fabric)
		ck_assert_int_eq(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
}

uint64_t RdmEnv::cq_data_mask() const
{
	const size_t n = info->domain_attr->cq_data_size;
	return n >= 8 ? ~0ULL : (1ULL << (8 * n)) - 1;
}

std::string Completion::describe() const
{
	char buf[320];
	if (ok)
		snprintf(buf, sizeof buf,
			 "completion ctx %p flags 0x%" PRIx64 " len %zu buf %p data 0x%" PRIx64
			 " tag 0x%" PRIx64 " src %" PRIu64,
			 e.op_context, e.flags, e.len, e.buf, e.data, e.tag, src);
	else
		snprintf(buf, sizeof buf,
			 "error entry ctx %p flags 0x%" PRIx64 " err %d (%s) prov_errno %d len %zu olen %zu",
			 err.op_context, err.flags, err.err, fi_strerror(err.err), err.prov_errno, err.len,
			 err.olen);
	return buf;
}

RdmNode::RdmNode(RdmEnv &e, const RdmNodeOptions &opt) : env(e)
{
	info = fi_dupinfo(env.info);
	ck_assert_ptr_nonnull(info);
	if (info->src_addr) {
		ck_assert_uint_eq(info->src_addrlen, sizeof(sockaddr_in));
		reinterpret_cast<sockaddr_in *>(info->src_addr)->sin_port = htons(opt.port);
	} else {
		ck_assert_msg(opt.port == 0, "the info has no src_addr to put port %u in", opt.port);
	}
	if (opt.tx_size)
		info->tx_attr->size = opt.tx_size;
	if (opt.rx_size)
		info->rx_attr->size = opt.rx_size;

	fi_av_attr av_attr{};
	av_attr.type = opt.av_type != FI_AV_UNSPEC ? opt.av_type : env.info->domain_attr->av_type;
	av_attr.flags = opt.av_flags;
	ck_assert_int_eq(fi_av_open(env.domain, &av_attr, &av, nullptr), 0);
	fi_cq_attr cq_attr{};
	cq_attr.format = FI_CQ_FORMAT_TAGGED;
	cq_attr.wait_obj = FI_WAIT_NONE;
	cq_attr.size = opt.cq_size;
	ck_assert_int_eq(fi_cq_open(env.domain, &cq_attr, &cq, nullptr), 0);
	ck_assert_int_eq(fi_endpoint(env.domain, info, &ep, nullptr), 0);
	ck_assert_int_eq(fi_ep_bind(ep, &av->fid, 0), 0);
	ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV | opt.cq_bind_flags), 0);
	fi_cntr_attr cntr_attr{};
	cntr_attr.events = FI_CNTR_EVENTS_COMP;
	cntr_attr.wait_obj = FI_WAIT_UNSPEC;
	if (opt.tx_cntr) {
		ck_assert_int_eq(fi_cntr_open(env.domain, &cntr_attr, &tx_cntr, nullptr), 0);
		ck_assert_int_eq(fi_ep_bind(ep, &tx_cntr->fid, FI_SEND), 0);
	}
	if (opt.rx_cntr) {
		ck_assert_int_eq(fi_cntr_open(env.domain, &cntr_attr, &rx_cntr, nullptr), 0);
		ck_assert_int_eq(fi_ep_bind(ep, &rx_cntr->fid, FI_RECV), 0);
	}
	// The RMA counters, each bound with its one flag.
	const struct {
		bool want;
		fid_cntr **cntr;
		uint64_t flags;
	} rma_cntrs[] = {
		{opt.write_cntr, &write_cntr, FI_WRITE},
		{opt.read_cntr, &read_cntr, FI_READ},
		{opt.remote_write_cntr, &remote_write_cntr, FI_REMOTE_WRITE},
		{opt.remote_read_cntr, &remote_read_cntr, FI_REMOTE_READ},
	};
	for (const auto &k : rma_cntrs) {
		if (!k.want)
			continue;
		ck_assert_int_eq(fi_cntr_open(env.domain, &cntr_attr, k.cntr, nullptr), 0);
		const int rc = fi_ep_bind(ep, &(*k.cntr)->fid, k.flags);
		ck_assert_msg(rc == 0, "fi_ep_bind(counter, 0x%" PRIx64 "): %d (%s)", k.flags, rc, fi_strerror(-rc));
	}
	if (opt.min_multi_recv) {
		size_t min = opt.min_multi_recv;
		ck_assert_int_eq(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min), 0);
	}
	if (opt.before_enable)
		opt.before_enable(ep);
	ck_assert_int_eq(fi_enable(ep), 0);

	size_t len = sizeof name;
	ck_assert_int_eq(fi_getname(&ep->fid, &name, &len), 0);
	ck_assert_uint_eq(len, sizeof(sockaddr_in));
	ck_assert_int_eq(name.sin_family, AF_INET);
	ck_assert_uint_ne(name.sin_port, 0);
	if (opt.port)
		ck_assert_uint_eq(ntohs(name.sin_port), opt.port);
	in_addr want{};
	ck_assert_int_eq(inet_pton(AF_INET, kRdmNodeAddr, &want), 1);
	ck_assert_msg(name.sin_addr.s_addr == want.s_addr, "fi_getname gave %s, not the device's %s",
		      inet_ntoa(name.sin_addr), kRdmNodeAddr);
	registry().push_back(this);
}

RdmNode::~RdmNode()
{
	auto &r = registry();
	r.erase(std::remove(r.begin(), r.end(), this), r.end());
	close_ep();
	if (cq)
		ck_assert_int_eq(fi_close(&cq->fid), 0);
	if (av)
		ck_assert_int_eq(fi_close(&av->fid), 0);
	fi_freeinfo(info);
}

void RdmNode::close_ep()
{
	if (ep)
		ck_assert_int_eq(fi_close(&ep->fid), 0);
	ep = nullptr;
	if (tx_cntr)
		ck_assert_int_eq(fi_close(&tx_cntr->fid), 0);
	tx_cntr = nullptr;
	if (rx_cntr)
		ck_assert_int_eq(fi_close(&rx_cntr->fid), 0);
	rx_cntr = nullptr;
	for (fid_cntr **c : {&write_cntr, &read_cntr, &remote_write_cntr, &remote_read_cntr}) {
		if (*c)
			ck_assert_int_eq(fi_close(&(*c)->fid), 0);
		*c = nullptr;
	}
}

fi_addr_t RdmNode::insert_addr(const sockaddr_in &addr)
{
	fi_addr_t fa = FI_ADDR_NOTAVAIL;
	ck_assert_int_eq(fi_av_insert(av, &addr, 1, &fa, 0, nullptr), 1);
	ck_assert_uint_ne(fa, FI_ADDR_NOTAVAIL);
	return fa;
}

fi_addr_t RdmNode::insert(const RdmNode &peer)
{
	const fi_addr_t fa = insert_addr(peer.name);
	forget(peer);
	peers.emplace_back(&peer, fa);
	return fa;
}

fi_addr_t RdmNode::addr_of(const RdmNode &peer) const
{
	for (auto &[p, fa] : peers)
		if (p == &peer)
			return fa;
	ck_abort_msg("peer (port %u) was not inserted into this node's AV", peer.port());
	return FI_ADDR_NOTAVAIL;
}

void RdmNode::forget(const RdmNode &peer)
{
	std::erase_if(peers, [&](auto &p) { return p.first == &peer; });
}

size_t RdmNode::poll()
{
	if (!reading) {
		if (tx_cntr)
			(void)fi_cntr_read(tx_cntr);
		return 0;
	}
	const bool source = (info->caps & FI_SOURCE) != 0;
	size_t got = 0;
	for (;;) {
		fi_cq_tagged_entry e[8];
		fi_addr_t src[8];
		ssize_t n = source ? fi_cq_readfrom(cq, e, 8, src) : fi_cq_read(cq, e, 8);
		if (n > 0) {
			for (ssize_t i = 0; i < n; i++) {
				Completion c;
				c.ok = true;
				c.e = e[i];
				c.src = source ? src[i] : FI_ADDR_NOTAVAIL;
				backlog.push_back(c);
			}
			got += static_cast<size_t>(n);
			continue;
		}
		if (n == -FI_EAVAIL) {
			Completion c;
			ssize_t r = fi_cq_readerr(cq, &c.err, 0);
			ck_assert_msg(r == 1, "fi_cq_readerr after -FI_EAVAIL: %zd", r);
			c.err.err_data = nullptr;
			c.err.err_data_size = 0;
			backlog.push_back(c);
			got++;
			continue;
		}
		ck_assert_msg(n == -FI_EAGAIN, "fi_cq_read%s: %zd (%s)", source ? "from" : "", n,
			      fi_strerror(static_cast<int>(-n)));
		return got;
	}
}

void connect_all(std::initializer_list<RdmNode *> nodes)
{
	for (RdmNode *a : nodes)
		for (RdmNode *b : nodes)
			if (a != b)
				a->insert(*b);
}

void progress_all()
{
	// A copy: nothing registers while we poll, but stay safe anyway.
	std::vector<RdmNode *> nodes = registry();
	for (RdmNode *n : nodes)
		n->poll();
}

namespace {

Completion next_impl(RdmNode &n, int timeout_ms, bool alone)
{
	Deadline d(timeout_ms);
	for (;;) {
		if (!n.backlog.empty()) {
			Completion c = n.backlog.front();
			n.backlog.pop_front();
			return c;
		}
		if (alone)
			n.poll();
		else
			progress_all();
		if (n.backlog.empty() && d.expired())
			break;
	}
	ck_abort_msg("no completion on the node at port %u within %d ms", n.port(), timeout_ms);
	return {};
}

} // namespace

Completion next(RdmNode &n, int timeout_ms)
{
	return next_impl(n, timeout_ms, false);
}

Completion next_alone(RdmNode &n, int timeout_ms)
{
	return next_impl(n, timeout_ms, true);
}

Completion expect_ok(RdmNode &n, const void *ctx, uint64_t flags, const char *what)
{
	Completion c = next(n);
	ck_assert_msg(c.ok, "%s: expected a completion with ctx %p, got %s", what, ctx, c.describe().c_str());
	ck_assert_msg(c.e.op_context == ctx, "%s: expected ctx %p, got %s", what, ctx, c.describe().c_str());
	ck_assert_msg(c.e.flags == flags, "%s: expected flags 0x%" PRIx64 ", got %s", what, flags,
		      c.describe().c_str());
	return c;
}

fi_cq_err_entry expect_err(RdmNode &n, const void *ctx, int err, const char *what)
{
	Completion c = next(n);
	ck_assert_msg(!c.ok, "%s: expected an error entry with ctx %p, got %s", what, ctx, c.describe().c_str());
	ck_assert_msg(c.err.op_context == ctx, "%s: expected ctx %p, got %s", what, ctx, c.describe().c_str());
	if (err)
		ck_assert_msg(c.err.err == err, "%s: expected err %d (%s), got %s", what, err, fi_strerror(err),
			      c.describe().c_str());
	else
		ck_assert_msg(c.err.err != 0, "%s: an error entry with err 0: %s", what, c.describe().c_str());
	return c.err;
}

void expect_none(RdmNode &n, int ms, const char *what)
{
	settle(ms);
	ck_assert_msg(n.backlog.empty(), "%s: unexpected %s (and %zu more)", what,
		      n.backlog.empty() ? "" : n.backlog.front().describe().c_str(),
		      n.backlog.empty() ? 0 : n.backlog.size() - 1);
}

void settle(int ms)
{
	Deadline d(ms);
	do
		progress_all();
	while (!d.expired());
}

bool progress_until(const std::function<bool()> &done, int timeout_ms)
{
	Deadline d(timeout_ms);
	for (;;) {
		if (done())
			return true;
		if (d.expired())
			return false;
		progress_all();
	}
}

size_t resident_bytes()
{
	FILE *f = fopen("/proc/self/statm", "r");
	ck_assert_ptr_nonnull(f);
	unsigned long pages = 0, rss = 0;
	const int n = fscanf(f, "%lu %lu", &pages, &rss);
	fclose(f);
	ck_assert_int_eq(n, 2);
	return rss * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

size_t post_until_refused(const std::function<ssize_t(size_t)> &post, size_t max, int quiet_ms,
			  const char *what)
{
	using clock = std::chrono::steady_clock;
	size_t n = 0;
	auto last = clock::now();
	while (n < max) {
		const ssize_t rc = post(n);
		if (rc == 0) {
			n++;
			last = clock::now();
			continue;
		}
		ck_assert_msg(rc == -FI_EAGAIN, "%s #%zu: %zd (%s)", what, n, rc, fi_strerror(static_cast<int>(-rc)));
		progress_all();
		if (clock::now() - last > std::chrono::milliseconds(quiet_ms))
			break;
	}
	return n;
}

ssize_t post_retry(const std::function<ssize_t()> &op, RdmNode *only, int timeout_ms)
{
	Deadline d(timeout_ms);
	for (;;) {
		ssize_t rc = op();
		if (rc != -FI_EAGAIN)
			return rc;
		ck_assert_msg(!d.expired(), "still -FI_EAGAIN after %d ms", timeout_ms);
		if (only)
			only->poll();
		else
			progress_all();
	}
}

void post(const std::function<ssize_t()> &op, const char *what, RdmNode *only)
{
	const ssize_t rc = post_retry(op, only);
	ck_assert_msg(rc == 0, "%s: %zd (%s)", what, rc, fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)));
}

bool in_fresh_process(const char *test)
{
	const char *fork = getenv("CK_FORK");
	if (fork && !strcmp(fork, "no")) {
		fprintf(stderr, "%s: needs check's fork mode (a fresh provider); not run\n", test);
		return false;
	}
	return true;
}

void expect_cntr(fid_cntr *c, uint64_t value, const char *what)
{
	ck_assert_ptr_nonnull(c);
	bool reached = progress_until([&] { return fi_cntr_read(c) >= value; });
	ck_assert_msg(reached, "%s: counter at %" PRIu64 ", expected %" PRIu64, what, fi_cntr_read(c), value);
	settle(50);
	ck_assert_msg(fi_cntr_read(c) == value, "%s: counter at %" PRIu64 ", expected %" PRIu64, what,
		      fi_cntr_read(c), value);
	ck_assert_msg(fi_cntr_readerr(c) == 0, "%s: %" PRIu64 " errors counted", what, fi_cntr_readerr(c));
}

void rdm_reset()
{
	registry().clear();
}

void rdm_add_tcase(Suite *s, const char *name, int timeout, std::initializer_list<const TTest *> tests)
{
	TCase *tc = tcase_create(name);
	tcase_set_timeout(tc, timeout);
	tcase_add_checked_fixture(tc, rdm_reset, nullptr);
	for (const TTest *t : tests)
		tcase_add_test(tc, t);
	suite_add_tcase(s, tc);
}

void fill_pattern(void *p, size_t n, uint32_t seed, size_t from)
{
	auto *b = static_cast<uint8_t *>(p);
	for (size_t i = 0; i < n; i++)
		b[i] = pattern_byte(seed, from + i);
}

void expect_pattern(const void *p, size_t n, uint32_t seed, const char *what, size_t from)
{
	const auto *b = static_cast<const uint8_t *>(p);
	for (size_t i = 0; i < n; i++)
		if (b[i] != pattern_byte(seed, from + i))
			ck_abort_msg("%s: byte %zu of %zu is 0x%02x, expected 0x%02x (seed %u)", what, i, n, b[i],
				     pattern_byte(seed, from + i), seed);
}

void expect_filled(const void *p, size_t n, uint8_t v, const char *what)
{
	const auto *b = static_cast<const uint8_t *>(p);
	for (size_t i = 0; i < n; i++)
		if (b[i] != v)
			ck_abort_msg("%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, n, b[i], v);
}

fi_msg make_msg(const iovec *iov, size_t count, fi_addr_t addr, void *ctx, uint64_t data)
{
	fi_msg m{};
	m.msg_iov = iov;
	m.desc = nullptr;
	m.iov_count = count;
	m.addr = addr;
	m.context = ctx;
	m.data = data;
	return m;
}

fi_msg_tagged make_tmsg(const iovec *iov, size_t count, fi_addr_t addr, uint64_t tag, uint64_t ignore,
			void *ctx, uint64_t data)
{
	fi_msg_tagged m{};
	m.msg_iov = iov;
	m.desc = nullptr;
	m.iov_count = count;
	m.addr = addr;
	m.tag = tag;
	m.ignore = ignore;
	m.context = ctx;
	m.data = data;
	return m;
}

void Tracker::add(const Completion &c)
{
	const void *ctx = c.context();
	const Group *g = nullptr;
	const std::less<const void *> lt;
	for (const Group &gr : groups_)
		if (!lt(ctx, gr.ctx) && lt(ctx, gr.ctx + gr.count))
			g = &gr;
	ck_assert_msg(g, "a completion for a context nobody posted: %s", c.describe().c_str());
	ck_assert_msg(c.ok, "%s: %s", g->what.c_str(), c.describe().c_str());
	ck_assert_msg(!got_.count(ctx), "%s: context #%td completed twice: %s", g->what.c_str(),
		      static_cast<const fi_context *>(ctx) - g->ctx, c.describe().c_str());
	ck_assert_msg(c.e.flags == g->flags, "%s: flags 0x%" PRIx64 " expected, got %s", g->what.c_str(),
		      g->flags, c.describe().c_str());
	got_[ctx] = c;
}

void Tracker::take(RdmNode &n)
{
	while (!n.backlog.empty()) {
		Completion c = n.backlog.front();
		n.backlog.pop_front();
		add(c);
	}
}

void Tracker::wait(RdmNode &n)
{
	while (!done())
		add(next(n));
}

void Tracker::wait_alone(RdmNode &n)
{
	while (!done())
		add(next_alone(n));
}

const Completion &Tracker::get(const fi_context *ctx) const
{
	auto it = got_.find(ctx);
	ck_assert_msg(it != got_.end(), "no completion for context %p", static_cast<const void *>(ctx));
	return it->second;
}

void settle_sends(Tracker &t, RdmNode &sender, int quiet_ms)
{
	using clock = std::chrono::steady_clock;
	Deadline overall(kTimeoutMs);
	size_t seen = t.count();
	auto last = clock::now();
	while (!t.done() && !overall.expired()) {
		progress_all();
		t.take(sender);
		if (t.count() != seen) {
			seen = t.count();
			last = clock::now();
		} else if (clock::now() - last > std::chrono::milliseconds(quiet_ms)) {
			break;
		}
	}
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed)
{
	std::vector<uint8_t> v(n ? n : 1);
	fill_pattern(v.data(), n, seed);
	return v;
}

void transfer(RdmNode &a, RdmNode &b, const void *src, size_t len, void *dst, size_t dst_len, uint32_t seed,
	      const char *what)
{
	fi_context rctx, sctx;
	ck_assert_int_eq(fi_recv(b.ep, dst, dst_len, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, src, len, nullptr, a.addr_of(b), &sctx); }), 0);
	Tracker ta, tb;
	ta.expect(&sctx, 1, kSendMsg, std::string(what) + " (send)");
	tb.expect(&rctx, 1, kRecvMsg, std::string(what) + " (receive)");
	tb.wait(b);
	ta.wait(a);
	const Completion &c = tb.get(&rctx);
	ck_assert_msg(c.e.len == len, "%s: len %zu, expected %zu", what, c.e.len, len);
	ck_assert_msg(c.e.buf == dst || (dst == nullptr && len == 0), "%s: buf %p, expected %p", what, c.e.buf, dst);
	ck_assert_msg(c.src == b.addr_of(a), "%s: source %" PRIu64 ", expected %" PRIu64, what, c.src, b.addr_of(a));
	expect_pattern(dst, len, seed, what);
}

void send_recv_one(RdmNode &a, RdmNode &b, size_t len, uint32_t seed)
{
	char what[80];
	snprintf(what, sizeof what, "%zu bytes from port %u to port %u", len, a.port(), b.port());
	std::vector<uint8_t> src = pattern(len, seed);
	RecvBuf dst(len);
	transfer(a, b, len ? src.data() : nullptr, len, dst.data(), dst.b.size(), seed, what);
	expect_filled(dst.data() + len, kSlack, kSentinel, what);
}

} // namespace vt
