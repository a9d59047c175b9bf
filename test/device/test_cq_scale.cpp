// Many MSG endpoints on one CQ (issue 13 §4). Endpoints whose queues the CQ
// cannot hold whole (it grows up to the device's max_cqe) share what is
// left as credits, one per posted request: before, the 23rd client of 64
// pairs bound to one CQ failed fi_enable with -FI_ENOSPC. The credit cases
// lower the CQ's maximum with FI_VRMA_MAX_CQE, read when the provider
// loads: check forks each test, and each child loads libfabric afresh.
#include <cstdlib>
#include <map>
#include <vector>

#include <netinet/in.h>

#include "harness.h"

using namespace vt;

namespace {

// The endpoints of one connection, both bound to the caller's CQ.
struct SharedPair {
	fid_ep *client = nullptr;
	fid_ep *server = nullptr;
};

// Connects a client to the listening `pep` and accepts it, both endpoints
// bound to `cq` for transmit and receive; events of all clients arrive on
// `cli_eq`, of all servers on `srv_eq`, requests on `pep_eq` (one
// connection at a time, so each is the one waited for).
SharedPair connect_shared(Env &env, fid_cq *cq, fid_eq *cli_eq, fid_eq *srv_eq, fid_eq *pep_eq,
			  const sockaddr_storage &bound, size_t tx_size, size_t rx_size, int n)
{
	SharedPair sp;
	// An endpoint of `info` (freed here) bound to `eq` and the CQ, enabled.
	auto open = [&](fi_info *info, fid_eq *eq, const char *who) {
		if (tx_size)
			info->tx_attr->size = tx_size;
		if (rx_size)
			info->rx_attr->size = rx_size;
		fid_ep *ep = nullptr;
		ck_assert_int_eq(fi_endpoint(env.domain, info, &ep, nullptr), 0);
		fi_freeinfo(info);
		ck_assert_int_eq(fi_ep_bind(ep, &eq->fid, 0), 0);
		ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		int rc = fi_enable(ep);
		ck_assert_msg(rc == 0, "fi_enable of %s %d: %s", who, n, fi_strerror(-rc));
		return ep;
	};
	fi_info *info = fi_dupinfo(env.info);
	info->dest_addr = malloc(sizeof(sockaddr_in));
	memcpy(info->dest_addr, &bound, sizeof(sockaddr_in));
	info->dest_addrlen = sizeof(sockaddr_in);
	reinterpret_cast<sockaddr_in *>(info->src_addr)->sin_port = 0;
	sp.client = open(info, cli_eq, "client");
	ck_assert_int_eq(fi_connect(sp.client, nullptr, nullptr, 0), 0);

	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
	auto *entry = reinterpret_cast<fi_eq_cm_entry *>(buf);
	uint32_t event = 0;
	ssize_t got = wait_eq(pep_eq, &event, buf, sizeof buf);
	ck_assert_msg(got >= static_cast<ssize_t>(sizeof(fi_eq_cm_entry)), "CONNREQ %d: %zd", n, got);
	ck_assert_uint_eq(event, FI_CONNREQ);
	sp.server = open(entry->info, srv_eq, "server");
	ck_assert_int_eq(fi_accept(sp.server, nullptr, 0), 0);
	got = wait_eq(srv_eq, &event, buf, sizeof buf);
	ck_assert_msg(got >= static_cast<ssize_t>(sizeof(fi_eq_cm_entry)), "server %d CONNECTED: %zd", n, got);
	ck_assert_uint_eq(event, FI_CONNECTED);
	ck_assert_ptr_eq(entry->fid, &sp.server->fid);
	got = wait_eq(cli_eq, &event, buf, sizeof buf);
	ck_assert_msg(got >= static_cast<ssize_t>(sizeof(fi_eq_cm_entry)), "client %d CONNECTED: %zd", n, got);
	ck_assert_uint_eq(event, FI_CONNECTED);
	ck_assert_ptr_eq(entry->fid, &sp.client->fid);
	return sp;
}

// A listener, the EQs of all clients and of all servers, and the CQ every
// endpoint is bound to; closed in the destructor (endpoints first: close()).
struct Bed {
	Env &env;
	fid_eq *pep_eq, *cli_eq, *srv_eq;
	sockaddr_storage bound{};
	fid_pep *pep;
	fid_cq *cq;
	explicit Bed(Env &e, size_t cq_size = 0)
		: env(e), pep_eq(open_eq(e)), cli_eq(open_eq(e)), srv_eq(open_eq(e)),
		  pep(listen_pep(e, pep_eq, &bound)), cq(open_cq(e, FI_CQ_FORMAT_DATA, FI_WAIT_FD, cq_size))
	{
	}
	~Bed()
	{
		ck_assert_int_eq(fi_close(&cq->fid), 0);
		ck_assert_int_eq(fi_close(&pep->fid), 0);
		for (fid_eq *eq : {pep_eq, cli_eq, srv_eq})
			ck_assert_int_eq(fi_close(&eq->fid), 0);
	}
	Bed(const Bed &) = delete;
	Bed &operator=(const Bed &) = delete;
	SharedPair connect(size_t tx_size, size_t rx_size, int n)
	{
		return connect_shared(env, cq, cli_eq, srv_eq, pep_eq, bound, tx_size, rx_size, n);
	}
	static void close(SharedPair &p)
	{
		ck_assert_int_eq(fi_close(&p.server->fid), 0);
		ck_assert_int_eq(fi_close(&p.client->fid), 0);
	}
};

// Completions read from a shared CQ, by context; an error fails the test.
struct Seen {
	fid_cq *cq;
	std::map<void *, fi_cq_data_entry> by_ctx;
	size_t total = 0;

	// Reads what is there (waiting up to ms for the first entry).
	void read(int ms = 0)
	{
		fi_cq_data_entry e[16];
		ssize_t n = ms ? fi_cq_sread(cq, e, 16, nullptr, ms) : fi_cq_read(cq, e, 16);
		while (n > 0) {
			for (ssize_t i = 0; i < n; i++) {
				ck_assert_msg(by_ctx.count(e[i].op_context) == 0, "context %p completed twice",
					      e[i].op_context);
				by_ctx[e[i].op_context] = e[i];
				total++;
			}
			n = fi_cq_read(cq, e, 16);
		}
		if (n == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			ck_assert_int_eq(fi_cq_readerr(cq, &err, 0), 1);
			ck_abort_msg("error completion: %s (context %p)", fi_strerror(err.err), err.op_context);
		}
		ck_assert_msg(n == -FI_EAGAIN, "fi_cq_read: %zd", n);
	}
	// Waits until `count` completions were seen in all.
	void until(size_t count)
	{
		Deadline d(kTimeoutMs);
		while (total < count) {
			ck_assert_msg(!d.expired(), "%zu completions of %zu", total, count);
			read(100);
		}
	}
	void expect(void *ctx, uint64_t flags, size_t len = SIZE_MAX)
	{
		auto it = by_ctx.find(ctx);
		ck_assert_msg(it != by_ctx.end(), "no completion for context %p", ctx);
		ck_assert_msg(it->second.flags == flags, "context %p: flags 0x%llx, expected 0x%llx", ctx,
			      static_cast<unsigned long long>(it->second.flags),
			      static_cast<unsigned long long>(flags));
		if (len != SIZE_MAX)
			ck_assert_uint_eq(it->second.len, len);
	}
};

// Posts with `post` until it succeeds, reading the CQ between tries (a
// credited endpoint says -FI_EAGAIN while its CQ's credits are taken).
template <typename Fn> void post_retrying(Seen &seen, Fn &&post)
{
	Deadline d(kTimeoutMs);
	for (;;) {
		ssize_t rc = post();
		if (rc == 0)
			return;
		ck_assert_msg(rc == -FI_EAGAIN, "post: %s", fi_strerror(static_cast<int>(-rc)));
		ck_assert_msg(!d.expired(), "post still -FI_EAGAIN");
		seen.read(10);
	}
}

} // namespace

// 64 connected pairs, client and server endpoints (128) all on one CQ; on
// every pair a send each way and an RMA write each way, data and every
// completion checked.
START_TEST(cq_scale_64_pairs_one_cq)
{
	constexpr int kPairs = 64;
	constexpr size_t kLen = 200;
	constexpr size_t kStride = 1024; // per pair: send src, recv dst, write src, write dst
	Env env;
	Bed bed(env);
	fid_cq *cq = bed.cq;
	std::vector<SharedPair> pairs;
	for (int i = 0; i < kPairs; i++)
		pairs.push_back(bed.connect(0, 0, i));

	const uint64_t access = FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE;
	Region cli(env, kPairs * kStride, access), srv(env, kPairs * kStride, access);
	std::fill(cli.buf.begin(), cli.buf.end(), 0);
	std::fill(srv.buf.begin(), srv.buf.end(), 0);
	auto pattern = [](int pair, int kind, size_t j) {
		return static_cast<uint8_t>(pair * 7 + kind * 31 + j);
	};
	auto fill = [&](Region &r, int pair, size_t off, int kind) {
		for (size_t j = 0; j < kLen; j++)
			r.buf[pair * kStride + off + j] = pattern(pair, kind, j);
	};
	// Contexts: [pair][0] client recv, [1] server recv, [2] client send,
	// [3] server send, [4] client write, [5] server write.
	static char ctx[kPairs][6];
	Seen seen{cq, {}};
	for (int i = 0; i < kPairs; i++) {
		fill(cli, i, 0, 0);   // client's message
		fill(srv, i, 0, 1);   // server's message
		fill(cli, i, 512, 2); // client's write, into the server's 768
		fill(srv, i, 512, 3); // server's write, into the client's 768
		SharedPair &p = pairs[i];
		post_retrying(seen, [&] {
			return fi_recv(p.client, &cli.buf[i * kStride + 256], kLen, cli.desc(), 0, &ctx[i][0]);
		});
		post_retrying(seen, [&] {
			return fi_recv(p.server, &srv.buf[i * kStride + 256], kLen, srv.desc(), 0, &ctx[i][1]);
		});
	}
	for (int i = 0; i < kPairs; i++) {
		SharedPair &p = pairs[i];
		post_retrying(seen, [&] {
			return fi_send(p.client, &cli.buf[i * kStride], kLen, cli.desc(), 0, &ctx[i][2]);
		});
		post_retrying(seen, [&] {
			return fi_send(p.server, &srv.buf[i * kStride], kLen, srv.desc(), 0, &ctx[i][3]);
		});
		post_retrying(seen, [&] {
			return fi_write(p.client, &cli.buf[i * kStride + 512], kLen, cli.desc(), 0,
					srv.addr() + i * kStride + 768, srv.key(), &ctx[i][4]);
		});
		post_retrying(seen, [&] {
			return fi_write(p.server, &srv.buf[i * kStride + 512], kLen, srv.desc(), 0,
					cli.addr() + i * kStride + 768, cli.key(), &ctx[i][5]);
		});
	}
	seen.until(kPairs * 6);
	for (int i = 0; i < kPairs; i++) {
		seen.expect(&ctx[i][0], FI_RECV | FI_MSG, kLen);
		seen.expect(&ctx[i][1], FI_RECV | FI_MSG, kLen);
		seen.expect(&ctx[i][2], FI_SEND | FI_MSG);
		seen.expect(&ctx[i][3], FI_SEND | FI_MSG);
		seen.expect(&ctx[i][4], FI_RMA | FI_WRITE);
		seen.expect(&ctx[i][5], FI_RMA | FI_WRITE);
		for (size_t j = 0; j < kLen; j++) {
			ck_assert_msg(cli.buf[i * kStride + 256 + j] == pattern(i, 1, j), "pair %d: client's message byte %zu", i, j);
			ck_assert_msg(srv.buf[i * kStride + 256 + j] == pattern(i, 0, j), "pair %d: server's message byte %zu", i, j);
			ck_assert_msg(srv.buf[i * kStride + 768 + j] == pattern(i, 2, j), "pair %d: client's write byte %zu", i, j);
			ck_assert_msg(cli.buf[i * kStride + 768 + j] == pattern(i, 3, j), "pair %d: server's write byte %zu", i, j);
		}
	}
	seen.read(50);
	ck_assert_uint_eq(seen.total, kPairs * 6);
	for (SharedPair &p : pairs)
		Bed::close(p);
}
END_TEST

namespace {

// Both sides' queues; the CQ holds 255 entries (rxe rounds a CQ to 2^k - 1).
constexpr size_t kTx = 64, kRx = 128;
constexpr size_t kMsg = 32;

// Sends from `from` until a post says -FI_EAGAIN, the peer having no
// receive posted: the sends wait (RNR, retried without end) and keep their
// credits. Returns how many were accepted.
size_t send_until_full(fid_ep *from, Region &r, char *ctx)
{
	size_t n = 0;
	for (;;) {
		ssize_t rc = fi_send(from, &r.buf[n * kMsg], kMsg, r.desc(), 0, &ctx[n]);
		if (rc == -FI_EAGAIN)
			return n;
		ck_assert_msg(rc == 0, "fi_send %zu: %s", n, fi_strerror(static_cast<int>(-rc)));
		n++;
		ck_assert_msg(n <= kTx, "more sends accepted than tx_size");
	}
}

// Waits for n sends (contexts sctx[0..n)) and the n receives they met
// (rctx[0..n)), each of kMsg bytes.
void expect_exchanged(Seen &seen, const char *sctx, const char *rctx, size_t n)
{
	seen.until(2 * n);
	for (size_t i = 0; i < n; i++) {
		seen.expect(const_cast<char *>(&sctx[i]), FI_SEND | FI_MSG);
		seen.expect(const_cast<char *>(&rctx[i]), FI_RECV | FI_MSG, kMsg);
	}
}

} // namespace

// A CQ of at most 255 entries (FI_VRMA_MAX_CQE) and one pair on it, each
// side with tx_size 64 and rx_size 128: the client's reservation fits (82
// send + 128 receive), the server's does not and posts on credits (44). Its
// sends and receives get -FI_EAGAIN once the credits are taken, short of
// its queues' depth; reading the CQ gives them back, and closing the
// endpoints with requests in flight gives every credit back: the same pair
// built again gets as many.
START_TEST(cq_scale_credits_run_out_and_come_back)
{
	setenv("FI_VRMA_MAX_CQE", "255", 1);
	Env env;
	Bed bed(env, 255);
	fid_cq *cq = bed.cq;
	Region srv_buf(env, kRx * kMsg, FI_SEND | FI_RECV), cli_buf(env, kRx * kMsg, FI_SEND | FI_RECV);
	static char sctx[kRx + 1], rctx[kRx + 1];
	Seen seen{cq, {}};

	SharedPair p = bed.connect(kTx, kRx, 0);
	for (size_t i = 0; i < srv_buf.buf.size(); i++)
		srv_buf.buf[i] = static_cast<uint8_t>(i * 3 + 1);
	// The server's sends wait for receives: each holds a credit.
	const size_t credits = send_until_full(p.server, srv_buf, sctx);
	ck_assert_msg(credits > 0 && credits < kTx,
		      "%zu sends accepted: the server's queue should run on fewer credits than its depth %zu",
		      credits, kTx);
	// Receives take from the same pool, now empty.
	ck_assert_int_eq(fi_recv(p.server, &srv_buf.buf[0], kMsg, srv_buf.desc(), 0, &rctx[0]), -FI_EAGAIN);
	seen.read(100);
	ck_assert_uint_eq(seen.total, 0);

	// The client receives them: the sends complete, credits come back.
	std::fill(cli_buf.buf.begin(), cli_buf.buf.end(), 0);
	for (size_t i = 0; i < credits; i++)
		ck_assert_int_eq(fi_recv(p.client, &cli_buf.buf[i * kMsg], kMsg, cli_buf.desc(), 0, &rctx[i]), 0);
	expect_exchanged(seen, sctx, rctx, credits);
	for (size_t i = 0; i < credits; i++) {
		ck_assert_msg(memcmp(&cli_buf.buf[i * kMsg], &srv_buf.buf[i * kMsg], kMsg) == 0, "message %zu", i);
	}

	// Posting resumed: as many receives as the pool holds.
	size_t recvs = 0;
	while (fi_recv(p.server, &srv_buf.buf[recvs * kMsg], kMsg, srv_buf.desc(), 0, &rctx[recvs]) == 0) {
		recvs++;
		ck_assert_uint_le(recvs, kRx);
	}
	ck_assert_uint_eq(recvs, credits);
	// The client sends into them: the receives complete, credits come back.
	seen = Seen{cq, {}};
	for (size_t i = 0; i < recvs; i++)
		cli_buf.buf[i * kMsg] = static_cast<uint8_t>(0xa0 + i);
	for (size_t i = 0; i < recvs; i++)
		ck_assert_int_eq(fi_send(p.client, &cli_buf.buf[i * kMsg], kMsg, cli_buf.desc(), 0, &sctx[i]), 0);
	expect_exchanged(seen, sctx, rctx, recvs);
	for (size_t i = 0; i < recvs; i++)
		ck_assert_uint_eq(srv_buf.buf[i * kMsg], static_cast<uint8_t>(0xa0 + i));

	// Sends waiting on the peer again, all credits taken, then both
	// endpoints closed with them in flight (fi_close: no completions).
	ck_assert_uint_eq(send_until_full(p.server, srv_buf, sctx), credits);
	Bed::close(p);
	seen = Seen{cq, {}};
	seen.read(100);
	ck_assert_uint_eq(seen.total, 0);

	// Every credit came back: the same pair built again gets as many.
	SharedPair q = bed.connect(kTx, kRx, 1);
	ck_assert_uint_eq(send_until_full(q.server, srv_buf, sctx), credits);
	Bed::close(q);
}
END_TEST

// vrma's own receives on credited queues (FI_VRMA_MAX_CQE as above): a
// staged server (messages and remote writes without FI_RX_CQ_DATA) keeps
// at most 8 staging buffers posted on credits, an RMA-only server at most
// 8 of its zero-length receives for remote CQ data; both reposted as
// their credits come back. Messages of several pieces each way and a run
// of writes with CQ data, more than 8 in flight, all arrive intact.
START_TEST(cq_scale_credited_own_receives)
{
	setenv("FI_VRMA_MAX_CQE", "255", 1);
	for (const bool staged : {true, false}) {
		fi_info *h = base_hints();
		h->caps = staged ? FI_MSG | FI_RMA : FI_RMA;
		h->mode &= ~FI_RX_CQ_DATA;
		Env env(h);
		fi_freeinfo(h);
		Bed bed(env, 255);
		fid_cq *cq = bed.cq;
		SharedPair p = bed.connect(kTx, kRx, staged);
		constexpr size_t kCount = 20;
		constexpr size_t kBig = 150 * 1024; // three staging buffers
		const uint64_t access = FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE;
		Region cli(env, kCount * kBig, access), srv(env, kCount * kBig, access);
		for (size_t i = 0; i < cli.buf.size(); i++) {
			cli.buf[i] = static_cast<uint8_t>(i * 7 + i / 4093);
			srv.buf[i] = static_cast<uint8_t>(i * 5 + 3);
		}
		static char ctx[4][kCount];
		Seen seen{cq, {}};
		if (staged) {
			Region got_srv(env, kCount * kBig, FI_RECV), got_cli(env, kCount * kBig, FI_RECV);
			for (size_t i = 0; i < kCount; i++) {
				post_retrying(seen, [&] {
					return fi_recv(p.server, &got_srv.buf[i * kBig], kBig, got_srv.desc(), 0,
						       &ctx[0][i]);
				});
				post_retrying(seen, [&] {
					return fi_recv(p.client, &got_cli.buf[i * kBig], kBig, got_cli.desc(), 0,
						       &ctx[1][i]);
				});
			}
			for (size_t i = 0; i < kCount; i++) {
				post_retrying(seen, [&] {
					return fi_send(p.client, &cli.buf[i * kBig], kBig, cli.desc(), 0, &ctx[2][i]);
				});
				post_retrying(seen, [&] {
					return fi_send(p.server, &srv.buf[i * kBig], kBig, srv.desc(), 0, &ctx[3][i]);
				});
			}
			seen.until(4 * kCount);
			for (size_t i = 0; i < kCount; i++) {
				seen.expect(&ctx[0][i], FI_RECV | FI_MSG, kBig);
				seen.expect(&ctx[1][i], FI_RECV | FI_MSG, kBig);
				seen.expect(&ctx[2][i], FI_SEND | FI_MSG);
				seen.expect(&ctx[3][i], FI_SEND | FI_MSG);
			}
			ck_assert_msg(got_srv.buf == cli.buf, "the client's messages");
			ck_assert_msg(got_cli.buf == srv.buf, "the server's messages");
		} else {
			// Writes with CQ data into the server, each consuming one of
			// its own receives; the CQ data come in order.
			constexpr size_t kLen = 1000;
			for (size_t i = 0; i < kCount; i++)
				post_retrying(seen, [&] {
					return fi_writedata(p.client, &cli.buf[i * kLen], kLen, cli.desc(), 0x100 + i, 0,
							    srv.addr() + i * kLen, srv.key(), &ctx[2][i]);
				});
			std::vector<uint64_t> data;
			size_t writes = 0;
			Deadline d(kTimeoutMs);
			while (data.size() < kCount || writes < kCount) {
				ck_assert_msg(!d.expired(), "%zu CQ data, %zu writes of %zu", data.size(), writes, kCount);
				fi_cq_data_entry e{};
				fi_cq_err_entry err{};
				ssize_t n = wait_cq(cq, &e, &err, 100);
				if (n == -FI_EAGAIN)
					continue;
				ck_assert_msg(n == 1, "fi_cq_sread: %zd (%s)", n, err.err ? fi_strerror(err.err) : "");
				if (e.flags & FI_REMOTE_CQ_DATA) {
					ck_assert_uint_eq(e.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
					data.push_back(e.data);
				} else {
					ck_assert_ptr_eq(e.op_context, &ctx[2][writes]);
					ck_assert_uint_eq(e.flags, FI_RMA | FI_WRITE);
					writes++;
				}
			}
			for (size_t i = 0; i < kCount; i++) {
				ck_assert_uint_eq(data[i], 0x100 + i);
				ck_assert_msg(memcmp(&srv.buf[i * kLen], &cli.buf[i * kLen], kLen) == 0, "write %zu", i);
			}
		}
		Bed::close(p);
	}
}
END_TEST

Suite *cq_scale_suite()
{
	Suite *s = suite_create("cq_scale");
	TCase *tc = tcase_create("cq_scale");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, cq_scale_64_pairs_one_cq);
	tcase_add_test(tc, cq_scale_credits_run_out_and_come_back);
	tcase_add_test(tc, cq_scale_credited_own_receives);
	suite_add_tcase(s, tc);
	return s;
}
