// vrma's native reliable-datagram endpoint (FI_EP_RDM, prov_name "vrma", not
// "vrma;ofi_rxm"), the rdm suite: fi_getinfo, the endpoint's life cycle,
// messages of every size between endpoints of one process (same and other
// domains), unexpected messages, truncation, completion order, selective
// completion, counters, and multi-receive buffers. The suite's other
// tcases are in files of their own: tagged messages (test_rdm_tagged.cpp),
// connections and peers (test_rdm_conn.cpp), the rendezvous registration
// cache against unmapped memory (test_rdm_rndv_cache.cpp), FI_THREAD_SAFE
// and FI_PROGRESS_AUTO (test_rdm_threads.cpp); the helpers they share are
// in rdm_harness.h.
//
// Every transfer's data is checked byte by byte (with sentinels after the
// receive buffer), every completion by context, flags, length, tag, data and
// source. One tcase per group, so that a group can be run alone with
// CK_RUN_SUITE=rdm CK_RUN_CASE=<group>: rdm_basic, rdm_msg, rdm_tagged,
// rdm_multi_recv, rdm_conn, rdm_rndv_cache, rdm_threads, rdm_auto.
#include "rdm_harness.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>

using namespace vt;

namespace {

// The address as fi_getname gives it: the device's IPv4 address.
void expect_device_addr(const sockaddr_in &a, const char *what)
{
	ck_assert_msg(a.sin_family == AF_INET, "%s: family %d", what, a.sin_family);
	in_addr want{};
	ck_assert_int_eq(inet_pton(AF_INET, kRdmNodeAddr, &want), 1);
	ck_assert_msg(a.sin_addr.s_addr == want.s_addr, "%s: address %s, expected %s", what, inet_ntoa(a.sin_addr),
		      kRdmNodeAddr);
}

fid_av *open_rdm_av(RdmEnv &env, fi_av_type type = FI_AV_UNSPEC)
{
	fi_av_attr attr{};
	attr.type = type;
	fid_av *av = nullptr;
	ck_assert_int_eq(fi_av_open(env.domain, &attr, &av, nullptr), 0);
	return av;
}

fid_cq *open_rdm_cq(RdmEnv &env)
{
	fi_cq_attr attr{};
	attr.format = FI_CQ_FORMAT_TAGGED;
	attr.wait_obj = FI_WAIT_NONE;
	fid_cq *cq = nullptr;
	ck_assert_int_eq(fi_cq_open(env.domain, &attr, &cq, nullptr), 0);
	return cq;
}

} // namespace

// ---------------------------------------------------------------------------
// rdm_basic

START_TEST(rdm_getinfo_native)
{
	fi_info *h = rdm_hints();
	fi_info *list = get_info(h, kRdmNodeAddr, nullptr, FI_SOURCE);
	const fi_info *i = find_native_rdm(list);
	ck_assert_msg(i, "no native vrma RDM entry among: %s", info_names(list).c_str());
	ck_assert_str_eq(i->fabric_attr->prov_name, "vrma");
	ck_assert_int_eq(i->ep_attr->type, FI_EP_RDM);
	ck_assert_msg((i->caps & kRdmCaps) == kRdmCaps, "caps 0x%" PRIx64 " lack 0x%" PRIx64, i->caps,
		      kRdmCaps & ~i->caps);
	// No mode bit beyond what the hints accept, no local registration.
	ck_assert_msg(!(i->mode & ~FI_CONTEXT), "mode 0x%" PRIx64, i->mode);
	ck_assert_msg(!(i->tx_attr->mode & ~FI_CONTEXT), "tx mode 0x%" PRIx64, i->tx_attr->mode);
	ck_assert_msg(!(i->rx_attr->mode & ~FI_CONTEXT), "rx mode 0x%" PRIx64, i->rx_attr->mode);
	ck_assert_msg(!(i->domain_attr->mr_mode & FI_MR_LOCAL), "mr_mode 0x%x", i->domain_attr->mr_mode);
	ck_assert_int_eq(i->domain_attr->av_type, FI_AV_MAP);
	ck_assert_int_eq(i->addr_format, FI_SOCKADDR_IN);
	// FI_SOURCE with node 10.99.0.1: the source address is the device's.
	ck_assert_ptr_nonnull(i->src_addr);
	ck_assert_uint_eq(i->src_addrlen, sizeof(sockaddr_in));
	expect_device_addr(*static_cast<const sockaddr_in *>(i->src_addr), "src_addr");
	// What the other tests rely on.
	ck_assert_uint_ge(i->domain_attr->cq_data_size, 4);
	ck_assert_uint_ge(i->ep_attr->max_msg_size, 4 * MiB);
	ck_assert_uint_gt(i->tx_attr->inject_size, 0);
	ck_assert_uint_ge(i->tx_attr->iov_limit, 3);
	ck_assert_uint_ge(i->rx_attr->iov_limit, 3);
	// Only vrma's entries (native, or layered under ofi_rxm).
	for (const fi_info *e = list; e; e = e->next)
		ck_assert_msg(!strncmp(e->fabric_attr->prov_name, "vrma", 4), "entry of %s", e->fabric_attr->prov_name);
	fi_freeinfo(list);
	fi_freeinfo(h);

	// FI_AV_TABLE and FI_MULTI_RECV: asked, given.
	h = rdm_hints(kRdmCaps | FI_MULTI_RECV, FI_AV_TABLE);
	fi_info *t = rdm_get_info(h);
	ck_assert_int_eq(t->domain_attr->av_type, FI_AV_TABLE);
	ck_assert_msg(t->caps & FI_MULTI_RECV, "caps 0x%" PRIx64, t->caps);
	fi_freeinfo(t);
	fi_freeinfo(h);
	// The least an RDM user asks for.
	h = rdm_hints(FI_MSG);
	t = rdm_get_info(h);
	ck_assert_msg(t->caps & FI_MSG, "caps 0x%" PRIx64, t->caps);
	fi_freeinfo(t);
	fi_freeinfo(h);
}
END_TEST

START_TEST(rdm_open_bind_enable_close)
{
	RdmEnv env;
	fid_ep *ep = nullptr;
	ck_assert_int_eq(fi_endpoint(env.domain, env.info, &ep, nullptr), 0);
	// Before fi_enable: not yet (-FI_EOPBADSTATE), or an address already.
	sockaddr_in name{};
	size_t len = sizeof name;
	int rc = fi_getname(&ep->fid, &name, &len);
	ck_assert_msg(rc == -FI_EOPBADSTATE || rc == 0, "fi_getname before fi_enable: %d (%s)", rc,
		      fi_strerror(-rc));
	if (rc == 0) {
		ck_assert_uint_eq(len, sizeof(sockaddr_in));
		expect_device_addr(name, "fi_getname before fi_enable");
	}

	fid_av *av = open_rdm_av(env);
	fid_cq *cq = open_rdm_cq(env);
	ck_assert_int_eq(fi_ep_bind(ep, &av->fid, 0), 0);
	ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	ck_assert_int_eq(fi_enable(ep), 0);

	// After: the device's address and the endpoint's own listening port.
	name = sockaddr_in{};
	len = sizeof name;
	ck_assert_int_eq(fi_getname(&ep->fid, &name, &len), 0);
	ck_assert_uint_eq(len, sizeof(sockaddr_in));
	expect_device_addr(name, "fi_getname");
	ck_assert_uint_ne(name.sin_port, 0);
	// Too small a buffer: the length it needs, nothing written past it.
	uint8_t small[4];
	memset(small, 0xa5, sizeof small);
	len = 2;
	ck_assert_int_eq(fi_getname(&ep->fid, small, &len), -FI_ETOOSMALL);
	ck_assert_uint_eq(len, sizeof(sockaddr_in));
	ck_assert_uint_eq(small[2], 0xa5);
	ck_assert_uint_eq(small[3], 0xa5);

	// A second endpoint of the domain listens at another port.
	RdmNode other(env);
	ck_assert_uint_ne(other.name.sin_port, name.sin_port);

	// Nothing binds once enabled.
	fid_cq *cq2 = open_rdm_cq(env);
	fid_av *av2 = open_rdm_av(env);
	fi_cntr_attr cattr{};
	cattr.events = FI_CNTR_EVENTS_COMP;
	fid_cntr *cntr = nullptr;
	ck_assert_int_eq(fi_cntr_open(env.domain, &cattr, &cntr, nullptr), 0);
	rc = fi_ep_bind(ep, &cq2->fid, FI_TRANSMIT | FI_RECV);
	ck_assert_msg(rc < 0, "CQ bound after fi_enable: %d", rc);
	rc = fi_ep_bind(ep, &av2->fid, 0);
	ck_assert_msg(rc < 0, "AV bound after fi_enable: %d", rc);
	rc = fi_ep_bind(ep, &cntr->fid, FI_SEND);
	ck_assert_msg(rc < 0, "counter bound after fi_enable: %d", rc);

	// Close order: what the endpoint uses stays open while it does.
	ck_assert_int_eq(fi_close(&av->fid), -FI_EBUSY);
	ck_assert_int_eq(fi_close(&cq->fid), -FI_EBUSY);
	ck_assert_int_eq(fi_close(&env.domain->fid), -FI_EBUSY);
	ck_assert_int_eq(fi_close(&ep->fid), 0);
	ck_assert_int_eq(fi_close(&av->fid), 0);
	ck_assert_int_eq(fi_close(&cq->fid), 0);
	ck_assert_int_eq(fi_close(&cq2->fid), 0);
	ck_assert_int_eq(fi_close(&av2->fid), 0);
	ck_assert_int_eq(fi_close(&cntr->fid), 0);
}
END_TEST

START_TEST(rdm_enable_without_av)
{
	RdmEnv env;
	fid_ep *ep = nullptr;
	ck_assert_int_eq(fi_endpoint(env.domain, env.info, &ep, nullptr), 0);
	fid_cq *cq = open_rdm_cq(env);
	ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	ck_assert_int_eq(fi_enable(ep), -FI_ENOAV);
	// The refusal left the endpoint as it was: with an AV it enables.
	fid_av *av = open_rdm_av(env);
	ck_assert_int_eq(fi_ep_bind(ep, &av->fid, 0), 0);
	ck_assert_int_eq(fi_enable(ep), 0);
	sockaddr_in name{};
	size_t len = sizeof name;
	ck_assert_int_eq(fi_getname(&ep->fid, &name, &len), 0);
	ck_assert_uint_ne(name.sin_port, 0);
	ck_assert_int_eq(fi_close(&ep->fid), 0);
	ck_assert_int_eq(fi_close(&av->fid), 0);
	ck_assert_int_eq(fi_close(&cq->fid), 0);
}
END_TEST

// A failed fi_enable leaves nothing behind, and a retry builds everything
// (issue 13). Refused registrations (as under a low RLIMIT_MEMLOCK) fail
// with -FI_ENOMEM, every time; a listening address in use fails after the
// buffers, CQ and SRQ were made, which a retry used to build a second
// time over the first: the send buffers' free list then held every buffer
// twice (fi_tx_size_left twice the queue's size, two sends in one buffer).
// With the limit back and a free port the endpoint enables, offers exactly
// its buffers, and exchanges messages both ways.
START_TEST(rdm_failed_enable_leaves_nothing)
{
	drop_ipc_lock();
	RdmEnv env;
	RdmNode a(env);
	RdmNodeOptions opt;
	opt.before_enable = [&a](fid_ep *ep) {
		{
			MemlockLimit low(256 * 1024);
			for (int attempt = 1; attempt <= 2; attempt++) {
				const int rc = fi_enable(ep);
				ck_assert_msg(rc != 0 || attempt > 1,
					      "fi_enable under RLIMIT_MEMLOCK %llu succeeded: registration ignored the limit",
					      static_cast<unsigned long long>(low.limit()));
				ck_assert_msg(rc == -FI_ENOMEM,
					      "fi_enable attempt %d under a low RLIMIT_MEMLOCK: %d (%s), expected -FI_ENOMEM",
					      attempt, rc, fi_strerror(rc < 0 ? -rc : rc));
				ck_assert_int_eq(fi_tx_size_left(ep), -FI_EOPBADSTATE);
			}
			// The data calls refuse too (their fast paths included).
			uint8_t byte = 0;
			ck_assert_int_eq(fi_recv(ep, &byte, 1, nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EOPBADSTATE);
			ck_assert_int_eq(fi_trecv(ep, &byte, 1, nullptr, FI_ADDR_UNSPEC, 0, 0, nullptr),
					 -FI_EOPBADSTATE);
			ck_assert_int_eq(fi_tinject(ep, &byte, 1, 0, 0), -FI_EOPBADSTATE);
			ck_assert_int_eq(fi_send(ep, &byte, 1, nullptr, 0, nullptr), -FI_EOPBADSTATE);
		}
		// a's address: in use.
		ck_assert_int_eq(fi_setname(&ep->fid, &a.name, sizeof a.name), 0);
		for (int attempt = 1; attempt <= 2; attempt++) {
			const int rc = fi_enable(ep);
			ck_assert_msg(rc == -FI_EADDRINUSE, "fi_enable attempt %d on a port in use: %d (%s)",
				      attempt, rc, fi_strerror(rc < 0 ? -rc : rc));
			ck_assert_int_eq(fi_tx_size_left(ep), -FI_EOPBADSTATE);
		}
		sockaddr_in any = a.name;
		any.sin_port = 0;
		ck_assert_int_eq(fi_setname(&ep->fid, &any, sizeof any), 0);
	};
	RdmNode b(env, opt);
	ck_assert_uint_ne(b.port(), a.port());
	const ssize_t left = fi_tx_size_left(b.ep);
	ck_assert_msg(left == static_cast<ssize_t>(b.info->tx_attr->size),
		      "fi_tx_size_left after a retried fi_enable: %zd, the queue holds %zu", left,
		      b.info->tx_attr->size);
	connect_all({&a, &b});
	uint32_t seed = 31;
	for (size_t len : {size_t(1), size_t(4096), 300 * KiB}) {
		send_recv_one(a, b, len, seed++);
		send_recv_one(b, a, len, seed++);
	}
	expect_none(a);
	expect_none(b);
}
END_TEST

// Endpoints of one domain and of another (its own fabric and domain) talk to
// each other in one process, each naming the others by its own handles.
START_TEST(rdm_several_endpoints)
{
	RdmEnv env1, env2;
	RdmNode a(env1), b(env1), c(env2);
	connect_all({&a, &b, &c});
	ck_assert_uint_ne(a.port(), b.port());
	ck_assert_uint_ne(a.port(), c.port());
	ck_assert_uint_ne(b.port(), c.port());
	uint32_t seed = 1;
	for (RdmNode *from : {&a, &b, &c})
		for (RdmNode *to : {&a, &b, &c})
			if (from != to)
				send_recv_one(*from, *to, 1000, seed++);
	// One receiver, two senders at once: each message names its sender.
	fi_context rctx[2], sctx[2];
	RecvBuf r0(256), r1(256);
	ck_assert_int_eq(fi_recv(c.ep, r0.data(), r0.len, nullptr, FI_ADDR_UNSPEC, &rctx[0]), 0);
	ck_assert_int_eq(fi_recv(c.ep, r1.data(), r1.len, nullptr, FI_ADDR_UNSPEC, &rctx[1]), 0);
	std::vector<uint8_t> fa = pattern(100, 50), fb = pattern(200, 51);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, fa.data(), 100, nullptr, a.addr_of(c), &sctx[0]); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(b.ep, fb.data(), 200, nullptr, b.addr_of(c), &sctx[1]); }), 0);
	Tracker tc, ta, tb;
	tc.expect(rctx, 2, kRecvMsg, "receives at c");
	ta.expect(&sctx[0], 1, kSendMsg, "a's send");
	tb.expect(&sctx[1], 1, kSendMsg, "b's send");
	tc.wait(c);
	ta.wait(a);
	tb.wait(b);
	for (int k = 0; k < 2; k++) {
		const Completion &e = tc.get(&rctx[k]);
		const bool from_a = e.src == c.addr_of(a);
		ck_assert_msg(from_a || e.src == c.addr_of(b), "source %" PRIu64, e.src);
		ck_assert_uint_eq(e.e.len, from_a ? 100 : 200);
		(k ? r1 : r0).check(e.e.len, from_a ? 50 : 51, "two senders");
	}
	ck_assert_uint_ne(tc.get(&rctx[0]).src, tc.get(&rctx[1]).src);
	expect_none(a);
	expect_none(b);
	expect_none(c);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_msg

START_TEST(rdm_msg_sizes)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t sizes[] = {0, 1, 8, 64, 4096, 8192, 65536, MiB, 4 * MiB};
	uint32_t seed = 1;
	for (size_t len : sizes)
		send_recv_one(a, b, len, seed++);
	// The other way, over what the first direction set up.
	send_recv_one(b, a, 100, seed++);
	send_recv_one(b, a, 300 * KiB, seed++);
	// An empty message into a receive without a buffer.
	fi_context rctx, sctx;
	ck_assert_int_eq(fi_recv(b.ep, nullptr, 0, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, nullptr, 0, nullptr, a.addr_of(b), &sctx); }), 0);
	expect_ok(a, &sctx, kSendMsg, "empty send");
	Completion c = expect_ok(b, &rctx, kRecvMsg, "empty receive");
	ck_assert_uint_eq(c.e.len, 0);
	ck_assert_uint_eq(c.src, b.addr_of(a));
	expect_none(a);
	expect_none(b);
}
END_TEST

START_TEST(rdm_msg_av_table)
{
	fi_info *h = rdm_hints(kRdmCaps, FI_AV_TABLE);
	RdmEnv env(h);
	fi_freeinfo(h);
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	// FI_AV_TABLE handles are indices from 0.
	ck_assert_uint_eq(a.addr_of(b), 0);
	ck_assert_uint_eq(b.addr_of(a), 0);
	uint32_t seed = 10;
	for (size_t len : {size_t(1), size_t(4096), 256 * KiB}) {
		send_recv_one(a, b, len, seed++);
		send_recv_one(b, a, len, seed++);
	}
}
END_TEST

// fi_sendv of three pieces of sizes s (a pattern with `salt` across them)
// into fi_recvv of three of sizes r (the same total) by rendezvous: one
// completion each side, every byte in place, the slack after the last
// piece untouched.
static void rndv_three_pieces(RdmNode &a, RdmNode &b, const std::array<size_t, 3> &s, const std::array<size_t, 3> &r,
		       uint8_t salt, const char *what)
{
	const size_t total = s[0] + s[1] + s[2];
	ck_assert_uint_eq(r[0] + r[1] + r[2], total);
	std::vector<uint8_t> p[3], q[3];
	iovec siov[3], riov[3];
	size_t off = 0;
	for (int k = 0; k < 3; k++) {
		p[k].resize(s[k]);
		fill_pattern(p[k].data(), s[k], salt, off);
		off += s[k];
		siov[k] = {p[k].data(), s[k]};
		q[k].assign(r[k] + (k == 2 ? kSlack : 0), kSentinel);
		riov[k] = {q[k].data(), r[k]};
	}
	fi_context rctx, sctx;
	ck_assert_int_eq(fi_recvv(b.ep, riov, nullptr, 3, FI_ADDR_UNSPEC, &rctx), 0);
	ck_assert_int_eq(post_retry([&] { return fi_sendv(a.ep, siov, nullptr, 3, a.addr_of(b), &sctx); }), 0);
	Tracker ta, tb;
	ta.expect(&sctx, 1, kSendMsg, what);
	tb.expect(&rctx, 1, kRecvMsg, what);
	tb.wait(b);
	ta.wait(a);
	ck_assert_uint_eq(tb.get(&rctx).e.len, total);
	off = 0;
	for (int k = 0; k < 3; k++) {
		expect_pattern(q[k].data(), r[k], salt, what, off);
		off += r[k];
	}
	expect_filled(q[2].data() + r[2], kSlack, kSentinel, what);
}

START_TEST(rdm_sendv_recvv)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	// Eager: gather 1000 + 1 + 2999 bytes, scatter into 1500 + 1500 + 1000.
	{
		std::vector<uint8_t> src = pattern(4000, 5);
		iovec siov[3] = {{src.data(), 1000}, {src.data() + 1000, 1}, {src.data() + 1001, 2999}};
		RecvBuf dst(4000);
		iovec riov[3] = {{dst.data(), 1500}, {dst.data() + 1500, 1500}, {dst.data() + 3000, 1000}};
		fi_context rctx, sctx;
		ck_assert_int_eq(fi_recvv(b.ep, riov, nullptr, 3, FI_ADDR_UNSPEC, &rctx), 0);
		ck_assert_int_eq(post_retry([&] { return fi_sendv(a.ep, siov, nullptr, 3, a.addr_of(b), &sctx); }), 0);
		expect_ok(a, &sctx, kSendMsg, "sendv");
		Completion c = expect_ok(b, &rctx, kRecvMsg, "recvv");
		ck_assert_uint_eq(c.e.len, 4000);
		ck_assert_uint_eq(c.src, b.addr_of(a));
		dst.check(4000, 5, "sendv/recvv 4000");
	}
	// Rendezvous: three separate pieces (100 + 50 + 150 KiB) into three
	// others split elsewhere (120 + 80 + 100 KiB).
	rndv_three_pieces(a, b, {100 * KiB, 50 * KiB, 150 * KiB}, {120 * KiB, 80 * KiB, 100 * KiB}, 6,
			  "large sendv/recvv");
	// Rendezvous in many windows (FI_VRMA_RDM_RNDV_READ_SIZE 16 KiB,
	// _RNDV_READS 8 by default: 128 KiB a window): pieces of odd sizes on
	// both sides, so that windows and READs begin inside a piece and
	// pieces end inside a READ.
	rndv_three_pieces(a, b, {100 * KiB + 3, 7, 900 * KiB + 1}, {33 * KiB + 5, 1, 967 * KiB + 5}, 8,
			  "sendv/recvv in windows");
	// Rendezvous with empty NULL pieces on both sides (nothing to register
	// there): 64 + 0 + 64 KiB into 0 + 128 KiB.
	{
		std::vector<uint8_t> src = pattern(128 * KiB, 7);
		iovec siov[3] = {{src.data(), 64 * KiB}, {nullptr, 0}, {src.data() + 64 * KiB, 64 * KiB}};
		RecvBuf dst(128 * KiB);
		iovec riov[2] = {{nullptr, 0}, {dst.data(), 128 * KiB}};
		fi_context rctx, sctx;
		ck_assert_int_eq(fi_recvv(b.ep, riov, nullptr, 2, FI_ADDR_UNSPEC, &rctx), 0);
		ck_assert_int_eq(post_retry([&] { return fi_sendv(a.ep, siov, nullptr, 3, a.addr_of(b), &sctx); }), 0);
		Tracker ta, tb;
		ta.expect(&sctx, 1, kSendMsg, "sendv with an empty piece");
		tb.expect(&rctx, 1, kRecvMsg, "recvv with an empty piece");
		tb.wait(b);
		ta.wait(a);
		ck_assert_uint_eq(tb.get(&rctx).e.len, 128 * KiB);
		dst.check(128 * KiB, 7, "rendezvous around empty pieces");
	}
}
END_TEST

START_TEST(rdm_sendmsg_recvmsg)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const uint64_t data = 0xa1b2c3d4 & env.cq_data_mask();
	// fi_sendmsg with remote CQ data into fi_recvmsg.
	std::vector<uint8_t> src = pattern(256, 7);
	RecvBuf dst(256);
	fi_context rctx[3], sctx[3];
	iovec riov = {dst.data(), dst.len};
	fi_msg rm = make_msg(&riov, 1, FI_ADDR_UNSPEC, &rctx[0]);
	ck_assert_int_eq(fi_recvmsg(b.ep, &rm, FI_COMPLETION), 0);
	iovec siov = {src.data(), 256};
	fi_msg sm = make_msg(&siov, 1, a.addr_of(b), &sctx[0], data);
	ck_assert_int_eq(post_retry([&] { return fi_sendmsg(a.ep, &sm, FI_COMPLETION | FI_REMOTE_CQ_DATA); }), 0);
	expect_ok(a, &sctx[0], kSendMsg, "sendmsg");
	Completion c = expect_ok(b, &rctx[0], kRecvMsg | FI_REMOTE_CQ_DATA, "recvmsg");
	ck_assert_uint_eq(c.e.len, 256);
	ck_assert_uint_eq(c.e.data, data);
	ck_assert_ptr_eq(c.e.buf, dst.data());
	ck_assert_uint_eq(c.src, b.addr_of(a));
	dst.check(256, 7, "sendmsg");

	// FI_INJECT: the buffer is the caller's again when the call returns;
	// FI_COMPLETION asks for the completion anyway.
	std::vector<uint8_t> small = pattern(32, 8);
	RecvBuf d2(64);
	ck_assert_int_eq(fi_recv(b.ep, d2.data(), d2.len, nullptr, FI_ADDR_UNSPEC, &rctx[1]), 0);
	siov = {small.data(), 32};
	sm = make_msg(&siov, 1, a.addr_of(b), &sctx[1]);
	ck_assert_int_eq(post_retry([&] { return fi_sendmsg(a.ep, &sm, FI_INJECT | FI_COMPLETION); }), 0);
	memset(small.data(), 0xee, small.size());
	expect_ok(a, &sctx[1], kSendMsg, "sendmsg FI_INJECT");
	c = expect_ok(b, &rctx[1], kRecvMsg, "receive of FI_INJECT");
	ck_assert_uint_eq(c.e.len, 32);
	d2.check(32, 8, "sendmsg FI_INJECT");

	// Flags 0 on an endpoint without FI_SELECTIVE_COMPLETION: it completes.
	std::vector<uint8_t> s3 = pattern(10, 9);
	RecvBuf d3(10);
	ck_assert_int_eq(fi_recv(b.ep, d3.data(), d3.len, nullptr, FI_ADDR_UNSPEC, &rctx[2]), 0);
	siov = {s3.data(), 10};
	sm = make_msg(&siov, 1, a.addr_of(b), &sctx[2]);
	ck_assert_int_eq(post_retry([&] { return fi_sendmsg(a.ep, &sm, 0); }), 0);
	expect_ok(a, &sctx[2], kSendMsg, "sendmsg flags 0");
	c = expect_ok(b, &rctx[2], kRecvMsg, "receive of sendmsg flags 0");
	ck_assert_uint_eq(c.e.len, 10);
	d3.check(10, 9, "sendmsg flags 0");
	expect_none(a);
	expect_none(b);
}
END_TEST

START_TEST(rdm_inject)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	const size_t inj = env.info->tx_attr->inject_size;
	uint32_t seed = 20;
	for (size_t len : {size_t(1), size_t(64), inj}) {
		char what[64];
		snprintf(what, sizeof what, "fi_inject of %zu bytes", len);
		std::vector<uint8_t> src = pattern(len, seed);
		RecvBuf dst(len);
		fi_context rctx;
		ck_assert_int_eq(fi_recv(b.ep, dst.data(), dst.len, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
		ck_assert_int_eq(post_retry([&] { return fi_inject(a.ep, src.data(), len, a.addr_of(b)); }), 0);
		memset(src.data(), 0xee, len); // reusable at once
		Completion c = expect_ok(b, &rctx, kRecvMsg, what);
		ck_assert_uint_eq(c.e.len, len);
		ck_assert_uint_eq(c.src, b.addr_of(a));
		dst.check(len, seed, what);
		seed++;
	}
	// No transmit completion for any of them.
	expect_none(a, 300, "fi_inject");
	// Beyond inject_size: refused, nothing sent.
	std::vector<uint8_t> big = pattern(inj + 1, 1);
	ssize_t rc = fi_inject(a.ep, big.data(), inj + 1, a.addr_of(b));
	ck_assert_msg(rc < 0 && rc != -FI_EAGAIN, "fi_inject of inject_size + 1 bytes: %zd", rc);
	expect_none(b, 300, "refused fi_inject");
}
END_TEST

START_TEST(rdm_senddata_injectdata)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	ck_assert_uint_ge(env.info->domain_attr->cq_data_size, 4);
	const uint64_t mask = env.cq_data_mask();
	const uint64_t d[3] = {0xa1b2c3d4 & mask, 0x0badf00d & mask, 0x12345678 & mask};
	const size_t len[3] = {100, 16, 300 * KiB}; // the last by rendezvous
	std::vector<uint8_t> src[3];
	RecvBuf *dst[3];
	std::unique_ptr<RecvBuf> own[3];
	fi_context rctx[4], sctx[4];
	for (int k = 0; k < 3; k++) {
		src[k] = pattern(len[k], 30 + k);
		own[k] = std::make_unique<RecvBuf>(len[k]);
		dst[k] = own[k].get();
		ck_assert_int_eq(fi_recv(b.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, &rctx[k]), 0);
	}
	ck_assert_int_eq(post_retry([&] {
				 return fi_senddata(a.ep, src[0].data(), len[0], nullptr, d[0], a.addr_of(b), &sctx[0]);
			 }),
			 0);
	ck_assert_int_eq(post_retry([&] { return fi_injectdata(a.ep, src[1].data(), len[1], d[1], a.addr_of(b)); }),
			 0);
	memset(src[1].data(), 0xee, len[1]);
	ck_assert_int_eq(post_retry([&] {
				 return fi_senddata(a.ep, src[2].data(), len[2], nullptr, d[2], a.addr_of(b), &sctx[2]);
			 }),
			 0);
	// And a message without data: no FI_REMOTE_CQ_DATA.
	std::vector<uint8_t> plain = pattern(40, 33);
	RecvBuf pdst(40);
	ck_assert_int_eq(fi_recv(b.ep, pdst.data(), pdst.len, nullptr, FI_ADDR_UNSPEC, &rctx[3]), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, plain.data(), 40, nullptr, a.addr_of(b), &sctx[3]); }), 0);

	Tracker tb, ta;
	tb.expect(rctx, 3, kRecvMsg | FI_REMOTE_CQ_DATA, "receives with data");
	tb.expect(&rctx[3], 1, kRecvMsg, "receive without data");
	ta.expect(&sctx[0], 1, kSendMsg, "senddata");
	ta.expect(&sctx[2], 1, kSendMsg, "large senddata");
	ta.expect(&sctx[3], 1, kSendMsg, "send");
	tb.wait(b);
	ta.wait(a);
	for (int k = 0; k < 3; k++) {
		const Completion &c = tb.get(&rctx[k]);
		ck_assert_uint_eq(c.e.data, d[k]);
		ck_assert_uint_eq(c.e.len, len[k]);
		ck_assert_uint_eq(c.src, b.addr_of(a));
		dst[k]->check(len[k], 30 + k, "data message");
	}
	ck_assert_uint_eq(tb.get(&rctx[3]).e.len, 40);
	pdst.check(40, 33, "message without data");
	expect_none(a, 300, "injectdata");
	expect_none(b);
}
END_TEST

// 100 messages of varied sizes (a few by rendezvous) before any receive: all
// matched in order with their data once the receives come.
START_TEST(rdm_msg_unexpected)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	constexpr int N = 100;
	static const size_t cycle[] = {0, 1, 7, 64, 100, 512, 1000, 2048, 4095, 4096, 4097, 8192, 16000, 33000, 65536, 70000};
	auto size_of = [](int i) { return i % 25 == 24 ? 256 * KiB : cycle[i % 16]; };
	std::vector<std::vector<uint8_t>> src(N);
	fi_context sctx[N], rctx[N];
	Tracker ta, tb;
	ta.expect(sctx, N, kSendMsg, "unexpected sends");
	tb.expect(rctx, N, kRecvMsg, "late receives");
	for (int i = 0; i < N; i++) {
		src[i] = pattern(size_of(i), 100 + i);
		ck_assert_int_eq(post_retry([&] {
					 return fi_send(a.ep, src[i].data(), size_of(i), nullptr, a.addr_of(b), &sctx[i]);
				 }),
				 0);
	}
	settle_sends(ta, a);
	ck_assert_msg(b.backlog.empty(), "a completion at the receiver before any receive: %s",
		      b.backlog.front().describe().c_str());
	std::vector<std::unique_ptr<RecvBuf>> dst(N);
	for (int i = 0; i < N; i++) {
		dst[i] = std::make_unique<RecvBuf>(size_of(i));
		ck_assert_int_eq(post_retry([&] {
					 return fi_recv(b.ep, dst[i]->data(), dst[i]->len, nullptr, FI_ADDR_UNSPEC, &rctx[i]);
				 }),
				 0);
	}
	tb.wait(b);
	ta.wait(a);
	for (int i = 0; i < N; i++) {
		const Completion &c = tb.get(&rctx[i]);
		char what[48];
		snprintf(what, sizeof what, "unexpected message %d", i);
		ck_assert_msg(c.e.len == size_of(i), "%s: len %zu, expected %zu", what, c.e.len, size_of(i));
		ck_assert_uint_eq(c.src, b.addr_of(a));
		dst[i]->check(size_of(i), 100 + i, what);
	}
	expect_none(a);
	expect_none(b);
}
END_TEST

// A message longer than its receive: FI_ETRUNC with len = the buffer, olen =
// what did not fit, the prefix in place, nothing beyond; the send succeeds.
START_TEST(rdm_truncation)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	struct Case {
		size_t msg, buf;
		bool tagged;
		const char *what;
	} cases[] = {{1000, 100, false, "eager"}, {200 * KiB, 64 * KiB, false, "rendezvous"},
		     {500, 50, true, "tagged eager"}};
	uint32_t seed = 40;
	for (const Case &k : cases) {
		std::vector<uint8_t> src = pattern(k.msg, seed);
		RecvBuf dst(k.buf);
		fi_context rctx, sctx;
		if (k.tagged) {
			ck_assert_int_eq(fi_trecv(b.ep, dst.data(), k.buf, nullptr, FI_ADDR_UNSPEC, 0x42, 0, &rctx), 0);
			ck_assert_int_eq(post_retry([&] {
						 return fi_tsend(a.ep, src.data(), k.msg, nullptr, a.addr_of(b), 0x42, &sctx);
					 }),
					 0);
		} else {
			ck_assert_int_eq(fi_recv(b.ep, dst.data(), k.buf, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
			ck_assert_int_eq(post_retry([&] {
						 return fi_send(a.ep, src.data(), k.msg, nullptr, a.addr_of(b), &sctx);
					 }),
					 0);
		}
		fi_cq_err_entry err = expect_err(b, &rctx, FI_ETRUNC, k.what);
		ck_assert_msg(err.len == k.buf, "%s: len %zu, expected %zu", k.what, err.len, k.buf);
		ck_assert_msg(err.olen == k.msg - k.buf, "%s: olen %zu, expected %zu", k.what, err.olen, k.msg - k.buf);
		ck_assert_msg(err.flags & FI_RECV, "%s: flags 0x%" PRIx64, k.what, err.flags);
		if (k.tagged)
			ck_assert_uint_eq(err.tag, 0x42);
		dst.check(k.buf, seed, k.what);
		expect_ok(a, &sctx, k.tagged ? kSendTag : kSendMsg, k.what);
		seed++;
	}
	// The endpoints go on.
	send_recv_one(a, b, 128, seed++);
	send_recv_one(b, a, 128, seed++);
	expect_none(a);
	expect_none(b);
}
END_TEST

// Completions a CQ read delivers straight into the reader's buffer must
// not overtake an entry queued before them: with every message already in
// the device's queue when the reader first looks, an error entry (a
// truncation) comes first, then the successes in arrival order, read one
// at a time (the rest wait in the queue) and two at a time.
START_TEST(rdm_cq_order_direct_and_queued)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	connect_all({&a, &b});
	send_recv_one(a, b, 16, 90); // connected both ways
	constexpr int N = 6;
	constexpr size_t kLen = 100;
	std::vector<std::vector<uint8_t>> src(N);
	std::vector<std::unique_ptr<RecvBuf>> dst(N);
	fi_context rctx[N];
	for (int i = 0; i < N; i++) {
		src[i] = pattern(kLen, 91 + i);
		dst[i] = std::make_unique<RecvBuf>(i == 0 ? kLen / 2 : kLen);
		ck_assert_int_eq(fi_recv(b.ep, dst[i]->data(), dst[i]->len, nullptr, FI_ADDR_UNSPEC, &rctx[i]), 0);
	}
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(post_retry([&] { return fi_inject(a.ep, src[i].data(), kLen, a.addr_of(b)); }, &a), 0);
	usleep(500 * 1000); // b reads nothing meanwhile: all six wait in its device queue
	fi_cq_tagged_entry e[2];
	ssize_t rc = fi_cq_read(b.cq, e, 1);
	ck_assert_msg(rc == -FI_EAVAIL, "first read: %zd, expected -FI_EAVAIL (the truncation first)", rc);
	fi_cq_err_entry err{};
	ck_assert_int_eq(fi_cq_readerr(b.cq, &err, 0), 1);
	ck_assert_ptr_eq(err.op_context, &rctx[0]);
	ck_assert_int_eq(err.err, FI_ETRUNC);
	ck_assert_uint_eq(err.olen, kLen - kLen / 2);
	dst[0]->check(kLen / 2, 91, "truncated");
	for (int i = 1; i < N; i++) {
		rc = fi_cq_read(b.cq, e, 1);
		ck_assert_msg(rc == 1, "read %d: %zd", i, rc);
		ck_assert_msg(e[0].op_context == &rctx[i], "entry %d out of order", i);
		ck_assert_uint_eq(e[0].len, kLen);
		ck_assert_uint_eq(e[0].flags, kRecvMsg);
		dst[i]->check(kLen, 91 + i, "in order");
	}
	// No error this time: pairs, in order.
	for (int i = 0; i < 4; i++) {
		dst[i] = std::make_unique<RecvBuf>(kLen);
		ck_assert_int_eq(fi_recv(b.ep, dst[i]->data(), kLen, nullptr, FI_ADDR_UNSPEC, &rctx[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(post_retry([&] { return fi_inject(a.ep, src[i].data(), kLen, a.addr_of(b)); }, &a), 0);
	usleep(500 * 1000);
	for (int i = 0; i < 4; i += 2) {
		rc = fi_cq_read(b.cq, e, 2);
		ck_assert_msg(rc == 2, "pair %d: %zd", i / 2, rc);
		ck_assert_ptr_eq(e[0].op_context, &rctx[i]);
		ck_assert_ptr_eq(e[1].op_context, &rctx[i + 1]);
		dst[i]->check(kLen, 91 + i, "pair");
		dst[i + 1]->check(kLen, 92 + i, "pair");
	}
	expect_none(a);
	expect_none(b);
}
END_TEST

START_TEST(rdm_selective_completion)
{
	RdmEnv env;
	RdmNodeOptions sel;
	sel.cq_bind_flags = FI_SELECTIVE_COMPLETION;
	RdmNode a(env, sel), b(env);
	connect_all({&a, &b});
	// 0-9 fi_send, 10 fi_sendmsg(FI_COMPLETION), 11 fi_sendmsg(0),
	// 12 a rendezvous fi_send, 13 fi_sendmsg(FI_COMPLETION).
	constexpr int N = 14;
	auto size_of = [](int i) { return i == 12 ? 256 * KiB : size_t(64 + i); };
	std::vector<std::vector<uint8_t>> src(N);
	std::vector<std::unique_ptr<RecvBuf>> dst(N);
	fi_context sctx[N], rctx[N];
	for (int i = 0; i < N; i++) {
		src[i] = pattern(size_of(i), 50 + i);
		dst[i] = std::make_unique<RecvBuf>(size_of(i));
		ck_assert_int_eq(fi_recv(b.ep, dst[i]->data(), dst[i]->len, nullptr, FI_ADDR_UNSPEC, &rctx[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		iovec iov = {src[i].data(), size_of(i)};
		fi_msg m = make_msg(&iov, 1, a.addr_of(b), &sctx[i]);
		ssize_t rc = post_retry([&] {
			if (i == 10 || i == 13)
				return fi_sendmsg(a.ep, &m, FI_COMPLETION);
			if (i == 11)
				return fi_sendmsg(a.ep, &m, 0);
			return fi_send(a.ep, src[i].data(), size_of(i), nullptr, a.addr_of(b), &sctx[i]);
		});
		ck_assert_int_eq(rc, 0);
	}
	Tracker tb, ta;
	tb.expect(rctx, N, kRecvMsg, "receives");
	ta.expect(&sctx[10], 1, kSendMsg, "fi_sendmsg(FI_COMPLETION) #10");
	ta.expect(&sctx[13], 1, kSendMsg, "fi_sendmsg(FI_COMPLETION) #13");
	tb.wait(b);
	ta.wait(a);
	for (int i = 0; i < N; i++) {
		ck_assert_uint_eq(tb.get(&rctx[i]).e.len, size_of(i));
		dst[i]->check(size_of(i), 50 + i, "selective completion");
	}
	// Exactly those two.
	expect_none(a, 300, "sends without FI_COMPLETION");

	// FI_COMPLETION made a default on the enabled endpoint: fi_send and
	// fi_tsend (the calls that take the defaults) complete from then on;
	// back to 0, they do not.
	for (uint64_t dflt : {uint64_t(FI_COMPLETION), uint64_t(0)}) {
		uint64_t flags = FI_TRANSMIT | dflt;
		ck_assert_int_eq(fi_control(&a.ep->fid, FI_SETOPSFLAG, &flags), 0);
		const std::vector<uint8_t> msg = pattern(48, dflt ? 70 : 71);
		RecvBuf r0(48), r1(48);
		fi_context c[2], rc[2];
		ck_assert_int_eq(fi_recv(b.ep, r0.data(), r0.len, nullptr, FI_ADDR_UNSPEC, &rc[0]), 0);
		ck_assert_int_eq(fi_trecv(b.ep, r1.data(), r1.len, nullptr, FI_ADDR_UNSPEC, 9, 0, &rc[1]), 0);
		ck_assert_int_eq(post_retry([&] {
			return fi_send(a.ep, msg.data(), msg.size(), nullptr, a.addr_of(b), &c[0]);
		}), 0);
		ck_assert_int_eq(post_retry([&] {
			return fi_tsend(a.ep, msg.data(), msg.size(), nullptr, a.addr_of(b), 9, &c[1]);
		}), 0);
		Tracker rb, sa;
		rb.expect(&rc[0], 1, kRecvMsg, "receive after FI_SETOPSFLAG");
		rb.expect(&rc[1], 1, FI_RECV | FI_TAGGED, "tagged receive after FI_SETOPSFLAG");
		rb.wait(b);
		r0.check(48, dflt ? 70 : 71, "send after FI_SETOPSFLAG");
		r1.check(48, dflt ? 70 : 71, "tagged send after FI_SETOPSFLAG");
		if (dflt) {
			sa.expect(&c[0], 1, kSendMsg, "fi_send with FI_COMPLETION a default");
			sa.expect(&c[1], 1, FI_SEND | FI_TAGGED, "fi_tsend with FI_COMPLETION a default");
			sa.wait(a);
		}
		expect_none(a, 200, "sends after FI_SETOPSFLAG");
	}
}
END_TEST

START_TEST(rdm_counters)
{
	RdmEnv env;
	RdmNodeOptions o;
	o.tx_cntr = o.rx_cntr = true;
	RdmNode a(env, o), b(env, o);
	connect_all({&a, &b});
	// fi_send, fi_inject, fi_senddata, a rendezvous fi_send, fi_tsend.
	const size_t len[5] = {64, 16, 128, 256 * KiB, 32};
	std::vector<uint8_t> src[5];
	std::unique_ptr<RecvBuf> dst[5];
	fi_context sctx[5], rctx[5];
	for (int k = 0; k < 5; k++) {
		src[k] = pattern(len[k], 60 + k);
		dst[k] = std::make_unique<RecvBuf>(len[k]);
		if (k == 4)
			ck_assert_int_eq(fi_trecv(b.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, 3, 0, &rctx[k]), 0);
		else
			ck_assert_int_eq(fi_recv(b.ep, dst[k]->data(), dst[k]->len, nullptr, FI_ADDR_UNSPEC, &rctx[k]), 0);
	}
	const fi_addr_t to = a.addr_of(b);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, src[0].data(), len[0], nullptr, to, &sctx[0]); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_inject(a.ep, src[1].data(), len[1], to); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_senddata(a.ep, src[2].data(), len[2], nullptr, 7, to, &sctx[2]); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, src[3].data(), len[3], nullptr, to, &sctx[3]); }), 0);
	ck_assert_int_eq(post_retry([&] { return fi_tsend(a.ep, src[4].data(), len[4], nullptr, to, 3, &sctx[4]); }), 0);
	expect_cntr(b.rx_cntr, 5, "b's receive counter");
	expect_cntr(a.tx_cntr, 5, "a's send counter (the inject counts)");
	ck_assert_uint_eq(fi_cntr_read(a.rx_cntr), 0);
	ck_assert_uint_eq(fi_cntr_read(b.tx_cntr), 0);
	// The CQ reports them too (all but the inject).
	Tracker ta, tb;
	ta.expect(&sctx[0], 1, kSendMsg, "send");
	ta.expect(&sctx[2], 2, kSendMsg, "senddata, large send");
	ta.expect(&sctx[4], 1, kSendTag, "tsend");
	tb.expect(rctx, 2, kRecvMsg, "receives 0-1");
	tb.expect(&rctx[2], 1, kRecvMsg | FI_REMOTE_CQ_DATA, "receive 2");
	tb.expect(&rctx[3], 1, kRecvMsg, "receive 3");
	tb.expect(&rctx[4], 1, kRecvTag, "tagged receive");
	ta.wait(a);
	tb.wait(b);
	for (int k = 0; k < 5; k++)
		dst[k]->check(len[k], 60 + k, "counted message");
	// One more each way moves each counter by one.
	send_recv_one(b, a, 10, 70);
	expect_cntr(b.tx_cntr, 1, "b's send counter");
	expect_cntr(a.rx_cntr, 1, "a's receive counter");
	ck_assert_uint_eq(fi_cntr_read(a.tx_cntr), 5);
	ck_assert_uint_eq(fi_cntr_read(b.rx_cntr), 5);
}
END_TEST

START_TEST(rdm_send_to_self)
{
	RdmEnv env;
	RdmNode a(env);
	const fi_addr_t self = a.insert(a);
	uint32_t seed = 80;
	for (size_t len : {size_t(100), 300 * KiB}) {
		std::vector<uint8_t> src = pattern(len, seed);
		RecvBuf dst(len);
		fi_context rctx, sctx;
		ck_assert_int_eq(fi_recv(a.ep, dst.data(), dst.len, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
		ck_assert_int_eq(post_retry([&] { return fi_send(a.ep, src.data(), len, nullptr, self, &sctx); }), 0);
		Tracker t;
		t.expect(&sctx, 1, kSendMsg, "send to self");
		t.expect(&rctx, 1, kRecvMsg, "receive from self");
		t.wait(a);
		ck_assert_uint_eq(t.get(&rctx).e.len, len);
		ck_assert_uint_eq(t.get(&rctx).src, self);
		dst.check(len, seed, "send to self");
		seed++;
	}
	// Tagged, unexpected: sent before the receive.
	std::vector<uint8_t> src = pattern(50, seed);
	RecvBuf dst(50);
	fi_context rctx, sctx;
	ck_assert_int_eq(post_retry([&] { return fi_tsend(a.ep, src.data(), 50, nullptr, self, 0x5e1f, &sctx); }), 0);
	settle(100);
	ck_assert_int_eq(fi_trecv(a.ep, dst.data(), dst.len, nullptr, self, 0x5e1f, 0, &rctx), 0);
	Tracker t;
	t.expect(&sctx, 1, kSendTag, "tsend to self");
	t.expect(&rctx, 1, kRecvTag, "trecv from self");
	t.wait(a);
	ck_assert_uint_eq(t.get(&rctx).e.tag, 0x5e1f);
	ck_assert_uint_eq(t.get(&rctx).src, self);
	dst.check(50, seed, "tsend to self");
	expect_none(a);
}
END_TEST

// ---------------------------------------------------------------------------
// rdm_multi_recv

namespace {

// Two FI_MULTI_RECV buffers of 16 KiB, FI_OPT_MIN_MULTI_RECV 4 KiB, eight
// messages of 3000 bytes: the first buffer takes messages back to back
// (increasing, non-overlapping buf) until less than 4 KiB is left, then is
// released (FI_MULTI_RECV on its last message, or on a completion of its
// own); the rest go to the second. by_default: FI_MULTI_RECV is the
// endpoint's receive default (FI_SETOPSFLAG) and the buffers are posted by
// fi_recv, which takes it; else by fi_recvmsg with the flag.
void multi_recv_buffers(bool by_default)
{
	fi_info *h = rdm_hints(kRdmCaps | FI_MULTI_RECV);
	RdmEnv env(h);
	fi_freeinfo(h);
	ck_assert_msg(env.info->caps & FI_MULTI_RECV, "caps 0x%" PRIx64, env.info->caps);
	constexpr size_t kBuf = 16384, kMin = 4096, kMsg = 3000, kAlignSlack = 64;
	constexpr int N = 8;
	RdmNodeOptions ro;
	ro.min_multi_recv = kMin;
	RdmNode r(env, ro), s(env);
	connect_all({&r, &s});
	size_t got_min = 0, optlen = sizeof got_min;
	ck_assert_int_eq(fi_getopt(&r.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got_min, &optlen), 0);
	ck_assert_uint_eq(got_min, kMin);

	std::vector<uint8_t> A(kBuf, kSentinel), B(kBuf, kSentinel);
	fi_context ca, cb, sctx[N];
	iovec ia = {A.data(), kBuf}, ib = {B.data(), kBuf};
	fi_msg ma = make_msg(&ia, 1, FI_ADDR_UNSPEC, &ca), mb = make_msg(&ib, 1, FI_ADDR_UNSPEC, &cb);
	if (by_default) {
		uint64_t flags = FI_RECV | FI_MULTI_RECV;
		ck_assert_int_eq(fi_control(&r.ep->fid, FI_SETOPSFLAG, &flags), 0);
		ck_assert_int_eq(fi_recv(r.ep, A.data(), kBuf, nullptr, FI_ADDR_UNSPEC, &ca), 0);
		ck_assert_int_eq(fi_recv(r.ep, B.data(), kBuf, nullptr, FI_ADDR_UNSPEC, &cb), 0);
	} else {
		ck_assert_int_eq(fi_recvmsg(r.ep, &ma, FI_MULTI_RECV), 0);
		ck_assert_int_eq(fi_recvmsg(r.ep, &mb, FI_MULTI_RECV), 0);
	}
	std::vector<uint8_t> src[N];
	for (int i = 0; i < N; i++) {
		src[i] = pattern(kMsg, 1000 + i);
		ck_assert_int_eq(post_retry([&] { return fi_send(s.ep, src[i].data(), kMsg, nullptr, s.addr_of(r), &sctx[i]); }),
				 0);
	}

	int msgs = 0, in_a = 0, in_b = 0;
	bool a_released = false;
	uint8_t *end_a = A.data(), *end_b = B.data(); // end of the last message placed
	while (msgs < N || !a_released) {
		Completion c = next(r);
		ck_assert_msg(c.ok, "multi-receive: %s", c.describe().c_str());
		const bool is_a = c.e.op_context == &ca;
		ck_assert_msg(is_a || c.e.op_context == &cb, "multi-receive: %s", c.describe().c_str());
		if (!(c.e.flags & FI_RECV)) {
			// A release of its own.
			ck_assert_msg(c.e.flags == FI_MULTI_RECV && is_a && !a_released, "multi-receive: %s",
				      c.describe().c_str());
			a_released = true;
			ck_assert_msg(size_t(A.data() + kBuf - end_a) < kMin + kAlignSlack,
				      "buffer released with %td bytes left", A.data() + kBuf - end_a);
			continue;
		}
		ck_assert_msg((c.e.flags & ~FI_MULTI_RECV) == kRecvMsg, "multi-receive flags: %s", c.describe().c_str());
		ck_assert_uint_eq(c.e.len, kMsg);
		ck_assert_uint_eq(c.src, r.addr_of(s));
		uint8_t *p = static_cast<uint8_t *>(c.e.buf);
		uint8_t *base = is_a ? A.data() : B.data();
		uint8_t *&end = is_a ? end_a : end_b;
		ck_assert_msg(p >= end && p + kMsg <= base + kBuf, "message %d at offset %td of %s (last ended at %td)", msgs,
			      p - base, is_a ? "A" : "B", end - base);
		char what[48];
		snprintf(what, sizeof what, "message %d in buffer %s", msgs, is_a ? "A" : "B");
		expect_pattern(p, kMsg, 1000 + msgs, what);
		end = p + kMsg;
		if (is_a) {
			ck_assert_msg(!a_released && in_b == 0, "message %d in A after A was released or B was used", msgs);
			in_a++;
		} else {
			in_b++;
		}
		if (c.e.flags & FI_MULTI_RECV) {
			ck_assert_msg(is_a, "buffer B released with %td bytes left", B.data() + kBuf - end_b);
			a_released = true;
			ck_assert_msg(size_t(A.data() + kBuf - end_a) < kMin + kAlignSlack,
				      "buffer released with %td bytes left", A.data() + kBuf - end_a);
		}
		msgs++;
	}
	// 16384 bytes hold five messages of 3000 (4 KiB free after four).
	ck_assert_msg(in_a >= 4 && in_a <= 5, "%d messages in A", in_a);
	ck_assert_int_eq(in_a + in_b, N);
	Tracker ts;
	ts.expect(sctx, N, kSendMsg, "sends into multi-receive buffers");
	ts.wait(s);
	// B stays posted, not released.
	expect_none(r, 300, "multi-receive B");
}

} // namespace

START_TEST(rdm_multi_recv_buffer)
{
	multi_recv_buffers(false);
}
END_TEST

START_TEST(rdm_multi_recv_default)
{
	multi_recv_buffers(true);
}
END_TEST

// A rendezvous message into a multi-receive buffer, then an eager one
// that leaves less than FI_OPT_MIN_MULTI_RECV: the buffer is released only
// once the rendezvous' reads have landed (its FI_MULTI_RECV entry is the
// buffer's last), not with the eager message while they still write into
// it. One READ at a time, 4 KiB each, keeps the reads in flight long after
// the eager message arrived.
START_TEST(rdm_multi_recv_rndv_release)
{
	setenv("FI_VRMA_RDM_RNDV_READS", "1", 1);
	setenv("FI_VRMA_MAX_WR_SIZE", "4096", 1);
	fi_info *h = rdm_hints(kRdmCaps | FI_MULTI_RECV);
	RdmEnv env(h);
	fi_freeinfo(h);
	constexpr size_t kLong = 48 * KiB, kShort = 6000, kMin = 4096;
	constexpr size_t kBuf = kLong + kShort + kMin - 64; // the short one leaves < kMin
	RdmNodeOptions ro;
	ro.min_multi_recv = kMin;
	RdmNode r(env, ro), s(env);
	connect_all({&r, &s});
	std::vector<uint8_t> buf(kBuf, kSentinel);
	fi_context cbuf, sctx[2];
	iovec iov = {buf.data(), kBuf};
	fi_msg m = make_msg(&iov, 1, FI_ADDR_UNSPEC, &cbuf);
	ck_assert_int_eq(fi_recvmsg(r.ep, &m, FI_MULTI_RECV), 0);
	const std::vector<uint8_t> lng = pattern(kLong, 51), sht = pattern(kShort, 52);
	post([&] { return fi_send(s.ep, lng.data(), kLong, nullptr, s.addr_of(r), &sctx[0]); }, "the long send");
	post([&] { return fi_send(s.ep, sht.data(), kShort, nullptr, s.addr_of(r), &sctx[1]); }, "the short send");
	bool got_long = false, got_short = false, released = false;
	while (!released) {
		Completion c = next(r);
		ck_assert_msg(c.ok && c.e.op_context == &cbuf, "multi-receive: %s", c.describe().c_str());
		ck_assert_msg(!released, "an entry after the buffer's release: %s", c.describe().c_str());
		if (c.e.flags & FI_RECV) {
			if (c.e.len == kLong) {
				ck_assert(!got_long);
				got_long = true;
				expect_pattern(c.e.buf, kLong, 51, "the rendezvous message");
			} else {
				ck_assert_uint_eq(c.e.len, kShort);
				ck_assert(!got_short);
				got_short = true;
				expect_pattern(c.e.buf, kShort, 52, "the eager message");
			}
		}
		if (c.e.flags & FI_MULTI_RECV) {
			ck_assert_msg(got_long && got_short,
				      "the buffer was released while the rendezvous (%s) or the eager message (%s) "
				      "had not completed",
				      got_long ? "done" : "still reading", got_short ? "done" : "not placed");
			released = true;
		}
	}
	Tracker ts;
	ts.expect(sctx, 2, kSendMsg, "the two sends");
	ts.wait(s);
	expect_none(r, 300, "after the release");
}
END_TEST

Suite *rdm_suite()
{
	Suite *s = suite_create("rdm");
	auto add = [&](const char *name, int timeout, std::initializer_list<const TTest *> tests) {
		rdm_add_tcase(s, name, timeout, tests);
	};
	add("rdm_basic", 60, {rdm_getinfo_native, rdm_open_bind_enable_close, rdm_enable_without_av, rdm_several_endpoints,
			       rdm_failed_enable_leaves_nothing});
	add("rdm_msg", 180,
	    {rdm_msg_sizes, rdm_msg_av_table, rdm_sendv_recvv, rdm_sendmsg_recvmsg, rdm_inject, rdm_senddata_injectdata,
	     rdm_msg_unexpected, rdm_truncation, rdm_cq_order_direct_and_queued, rdm_selective_completion, rdm_counters, rdm_send_to_self});
	add_rdm_tagged_tcases(s);
	add("rdm_multi_recv", 90, {rdm_multi_recv_buffer, rdm_multi_recv_default, rdm_multi_recv_rndv_release});
	add_rdm_conn_tcases(s);
	add_rdm_rndv_cache_tcases(s);
	add_rdm_threads_tcases(s);
	return s;
}
