// Connection management over the device: connect/accept with CM data,
// reject with data, names, shutdown.
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <thread>

using namespace vt;

START_TEST(connect_with_cm_data)
{
	Env env;
	PairOptions opt;
	opt.connect_data = "connect-data-from-client";
	opt.accept_data = std::string(52, 'A'); // the full FI_OPT_CM_DATA_SIZE
	Pair p(env, opt);
	ck_assert_str_eq(p.connreq_data.c_str(), opt.connect_data.c_str());
	ck_assert_uint_eq(p.connreq_data.size(), opt.connect_data.size());
	ck_assert_uint_eq(p.connected_data.size(), 52);
	ck_assert(p.connected_data == opt.accept_data);

	// Names agree on both ends.
	sockaddr_in c_local{}, c_peer{}, s_local{}, s_peer{};
	size_t len = sizeof c_local;
	ck_assert_int_eq(fi_getname(&p.client.ep->fid, &c_local, &len), 0);
	len = sizeof c_peer;
	ck_assert_int_eq(fi_getpeer(p.client.ep, &c_peer, &len), 0);
	len = sizeof s_local;
	ck_assert_int_eq(fi_getname(&p.server.ep->fid, &s_local, &len), 0);
	len = sizeof s_peer;
	ck_assert_int_eq(fi_getpeer(p.server.ep, &s_peer, &len), 0);
	ck_assert_uint_eq(c_local.sin_port, s_peer.sin_port);
	ck_assert_uint_eq(c_local.sin_addr.s_addr, s_peer.sin_addr.s_addr);
	ck_assert_uint_eq(s_local.sin_port, c_peer.sin_port);
	len = 2;
	ck_assert_int_eq(fi_getname(&p.client.ep->fid, &c_local, &len), -FI_ETOOSMALL);
	ck_assert_uint_eq(len, sizeof(sockaddr_in));

	size_t size = 0;
	len = sizeof size;
	ck_assert_int_eq(fi_getopt(&p.client.ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &size, &len), 0);
	ck_assert_uint_eq(size, 52);
	ck_assert_int_eq(fi_getopt(&p.pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &size, &len), 0);
	ck_assert_uint_eq(size, 52);
	// An established endpoint cannot connect or accept again.
	ck_assert_int_eq(fi_connect(p.client.ep, nullptr, nullptr, 0), -FI_EOPBADSTATE);
	ck_assert_int_eq(fi_accept(p.server.ep, nullptr, 0), -FI_EOPBADSTATE);
}
END_TEST

START_TEST(reject_with_data)
{
	Env env;
	fid_eq *pep_eq = open_eq(env);
	sockaddr_storage bound{};
	fid_pep *pep = listen_pep(env, pep_eq, &bound);
	Side c = open_client(env, reinterpret_cast<sockaddr *>(&bound));
	ck_assert_int_eq(fi_connect(c.ep, nullptr, "hi", 2), 0);
	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
	auto *entry = reinterpret_cast<fi_eq_cm_entry *>(buf);
	uint32_t event;
	ck_assert_int_eq(wait_eq(pep_eq, &event, buf, sizeof buf), sizeof(fi_eq_cm_entry) + 2);
	ck_assert_uint_eq(event, FI_CONNREQ);
	const char why[] = "go away";
	ck_assert_int_eq(fi_reject(pep, entry->info->handle, why, sizeof why), 0);
	fi_freeinfo(entry->info);

	ck_assert_int_eq(wait_eq(c.eq, &event, buf, sizeof buf), -FI_EAVAIL);
	char data[64] = {};
	fi_eq_err_entry err{};
	err.err_data = data;
	err.err_data_size = sizeof data;
	ck_assert_int_eq(fi_eq_readerr(c.eq, &err, 0), sizeof err);
	ck_assert_int_eq(err.err, FI_ECONNREFUSED);
	ck_assert_ptr_eq(err.fid, &c.ep->fid);
	ck_assert_uint_eq(err.err_data_size, sizeof why);
	ck_assert_str_eq(data, why);
	// Sending on a rejected endpoint fails cleanly.
	ck_assert_int_eq(fi_inject(c.ep, "x", 1, 0), -FI_ENOTCONN);
	close_side(c);
	ck_assert_int_eq(fi_close(&pep->fid), 0);
	ck_assert_int_eq(fi_close(&pep_eq->fid), 0);
}
END_TEST

namespace {

// CM data of `len` bytes that differ with the length and the sender.
std::string cm_pattern(size_t len, char seed)
{
	std::string s(len, '\0');
	for (size_t i = 0; i < len; i++)
		s[i] = static_cast<char>(seed + 7 * i + len);
	return s;
}

// An active endpoint of the domain bound to the given EQ and CQ, enabled.
fid_ep *enabled_ep(Env &env, fi_info *info, fid_eq *eq, fid_cq *cq)
{
	fid_ep *ep = nullptr;
	ck_assert_int_eq(fi_endpoint(env.domain, info, &ep, nullptr), 0);
	ck_assert_int_eq(fi_ep_bind(ep, &eq->fid, 0), 0);
	ck_assert_int_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	ck_assert_int_eq(fi_enable(ep), 0);
	return ep;
}

// Reads one CM event (bounded wait) and asserts its kind, its fid and that
// it carries exactly `data`; returns the entry's info.
fi_info *expect_cm_event(fid_eq *eq, uint32_t want, fid *source, const std::string &data,
			 const char *what)
{
	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 256] = {};
	auto *entry = reinterpret_cast<fi_eq_cm_entry *>(buf);
	uint32_t event = 0;
	ssize_t n = wait_eq(eq, &event, buf, sizeof buf);
	ck_assert_msg(n == static_cast<ssize_t>(sizeof(fi_eq_cm_entry) + data.size()),
		      "%s: read %zd (%s), want %zu bytes", what, n,
		      n < 0 ? fi_strerror(static_cast<int>(-n)) : "", sizeof(fi_eq_cm_entry) + data.size());
	ck_assert_msg(event == want, "%s: event %u, want %u", what, event, want);
	ck_assert_msg(entry->fid == source, "%s: fid %p, want %p", what, static_cast<void *>(entry->fid),
		      static_cast<void *>(source));
	ck_assert_msg(!memcmp(entry->data, data.data(), data.size()), "%s: data differs", what);
	return entry->info;
}

// Nothing more arrives on the EQ for a while.
void expect_no_cm_event(fid_eq *eq, const char *what)
{
	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
	uint32_t event = 0;
	ssize_t n = wait_eq(eq, &event, buf, sizeof buf, 300);
	ck_assert_msg(n == -FI_EAGAIN, "%s: unexpected %zd (event %u)", what, n, event);
}

// `first` shuts the connection down: it reads its FI_SHUTDOWN, then the
// peer `other` reads its own, and other's fi_shutdown finds nothing left
// to end.
void shutdown_from(fid_ep *first, fid_eq *first_eq, fid_ep *other, fid_eq *other_eq)
{
	ck_assert_int_eq(fi_shutdown(first, 0), 0);
	expect_cm_event(first_eq, FI_SHUTDOWN, &first->fid, "", "FI_SHUTDOWN of the side shutting down");
	expect_cm_event(other_eq, FI_SHUTDOWN, &other->fid, "", "FI_SHUTDOWN of its peer");
	ck_assert_int_eq(fi_shutdown(other, 0), -FI_ENOTCONN);
}

} // namespace

// What fabtests' fi_cm_data does, in one process: for every CM data size
// up to FI_OPT_CM_DATA_SIZE, a connection request carrying the data is
// rejected with data (the initiator reads it from its EQ error entry),
// then a new endpoint connects again and is accepted with data, and both
// ends shut the connection down, each reading exactly one FI_SHUTDOWN
// (the shutdown is started by the initiator, by the acceptor, or by both
// at once). The listener and each side's EQ serve every cycle. One byte
// more than the maximum is refused by fi_connect, fi_accept and
// fi_reject with -FI_EINVAL, and the operation can then go on.
START_TEST(cm_data_every_size)
{
	Env env;
	fid_eq *seq = open_eq(env); // the server's: listener and accepted endpoints
	sockaddr_storage bound{};
	fid_pep *pep = listen_pep(env, seq, &bound);
	fid_cq *scq = open_cq(env);
	fid_eq *ceq = open_eq(env);
	fid_cq *ccq = open_cq(env);
	fi_info *cinfo = fi_dupinfo(env.info);
	cinfo->dest_addr = malloc(sizeof(sockaddr_in));
	memcpy(cinfo->dest_addr, &bound, sizeof(sockaddr_in));
	cinfo->dest_addrlen = sizeof(sockaddr_in);
	reinterpret_cast<sockaddr_in *>(cinfo->src_addr)->sin_port = 0;

	size_t max = 0, len = sizeof max;
	ck_assert_int_eq(fi_getopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &max, &len), 0);
	ck_assert_uint_eq(max, 52);
	const std::string too_long(max + 1, 'x');

	std::vector<size_t> sizes;
	for (size_t n = 1; n <= max; n <<= 1)
		sizes.push_back(n);
	sizes.push_back(max);
	int round = 0;
	for (size_t n : sizes) {
		const bool last = n == max;
		const std::string req1 = cm_pattern(n, 'a'), rej = cm_pattern(n, 'r');
		const std::string req2 = cm_pattern(n, 'c'), acc = cm_pattern(n, 'A');

		// Rejected with data.
		fid_ep *c = enabled_ep(env, cinfo, ceq, ccq);
		size_t csize = 0;
		len = sizeof csize;
		ck_assert_int_eq(fi_getopt(&c->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &csize, &len), 0);
		ck_assert_uint_eq(csize, max);
		ck_assert_int_eq(fi_connect(c, nullptr, req1.data(), n), 0);
		fi_info *info = expect_cm_event(seq, FI_CONNREQ, &pep->fid, req1, "CONNREQ (reject)");
		if (last)
			ck_assert_int_eq(fi_reject(pep, info->handle, too_long.data(), too_long.size()),
					 -FI_EINVAL);
		ck_assert_int_eq(fi_reject(pep, info->handle, rej.data(), n), 0);
		fi_freeinfo(info);
		uint32_t event = 0;
		alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
		ck_assert_int_eq(wait_eq(ceq, &event, buf, sizeof buf), -FI_EAVAIL);
		fi_eq_err_entry err{}; // err_data_size 0: the provider's buffer
		ck_assert_int_eq(fi_eq_readerr(ceq, &err, 0), sizeof err);
		ck_assert_int_eq(err.err, FI_ECONNREFUSED);
		ck_assert_ptr_eq(err.fid, &c->fid);
		ck_assert_uint_eq(err.err_data_size, n);
		ck_assert_ptr_nonnull(err.err_data);
		ck_assert(!memcmp(err.err_data, rej.data(), n));
		ck_assert_int_eq(fi_close(&c->fid), 0);

		// Accepted with data.
		c = enabled_ep(env, cinfo, ceq, ccq);
		ck_assert_int_eq(fi_connect(c, nullptr, req2.data(), n), 0);
		info = expect_cm_event(seq, FI_CONNREQ, &pep->fid, req2, "CONNREQ (accept)");
		fid_ep *s = enabled_ep(env, info, seq, scq);
		fi_freeinfo(info);
		if (last)
			ck_assert_int_eq(fi_accept(s, too_long.data(), too_long.size()), -FI_EINVAL);
		ck_assert_int_eq(fi_accept(s, acc.data(), n), 0);
		// The listening side's FI_CONNECTED carries no data.
		expect_cm_event(seq, FI_CONNECTED, &s->fid, "", "server FI_CONNECTED");
		expect_cm_event(ceq, FI_CONNECTED, &c->fid, acc, "client FI_CONNECTED");

		// Shut down by one side, the other, or both; one FI_SHUTDOWN each.
		switch (round++ % 3) {
		case 0:
			shutdown_from(c, ceq, s, seq);
			break;
		case 1:
			shutdown_from(s, seq, c, ceq);
			break;
		default: {
			ck_assert_int_eq(fi_shutdown(c, 0), 0);
			int rc = fi_shutdown(s, 0); // the peer's disconnect may be here already
			ck_assert_msg(rc == 0 || rc == -FI_ENOTCONN, "fi_shutdown: %d", rc);
			expect_cm_event(ceq, FI_SHUTDOWN, &c->fid, "", "client FI_SHUTDOWN");
			expect_cm_event(seq, FI_SHUTDOWN, &s->fid, "", "server FI_SHUTDOWN");
			break;
		}
		}
		expect_no_cm_event(ceq, "client after FI_SHUTDOWN");
		expect_no_cm_event(seq, "server after FI_SHUTDOWN");
		ck_assert_int_eq(fi_close(&s->fid), 0);
		ck_assert_int_eq(fi_close(&c->fid), 0);
	}

	// One byte over the maximum: refused before anything is sent.
	fid_ep *c = enabled_ep(env, cinfo, ceq, ccq);
	ck_assert_int_eq(fi_connect(c, nullptr, too_long.data(), too_long.size()), -FI_EINVAL);
	expect_no_cm_event(seq, "listener after a refused fi_connect");
	ck_assert_int_eq(fi_close(&c->fid), 0);
	fi_freeinfo(cinfo);
	ck_assert_int_eq(fi_close(&pep->fid), 0);
	ck_assert_int_eq(fi_close(&ccq->fid), 0);
	ck_assert_int_eq(fi_close(&scq->fid), 0);
	ck_assert_int_eq(fi_close(&ceq->fid), 0);
	ck_assert_int_eq(fi_close(&seq->fid), 0);
}
END_TEST

START_TEST(connect_without_listener)
{
	Env env;
	fid_eq *pep_eq = open_eq(env);
	sockaddr_storage bound{};
	fid_pep *pep = listen_pep(env, pep_eq, &bound);
	// Close the listener: nothing answers on that port any more.
	ck_assert_int_eq(fi_close(&pep->fid), 0);
	Side c = open_client(env, reinterpret_cast<sockaddr *>(&bound));
	ck_assert_int_eq(fi_connect(c.ep, nullptr, nullptr, 0), 0);
	uint32_t event;
	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
	ck_assert_int_eq(wait_eq(c.eq, &event, buf, sizeof buf, 30000), -FI_EAVAIL);
	fi_eq_err_entry err{};
	ck_assert_int_eq(fi_eq_readerr(c.eq, &err, 0), sizeof err);
	ck_assert_ptr_eq(err.fid, &c.ep->fid);
	ck_assert_msg(err.err == FI_ECONNREFUSED || err.err == FI_ETIMEDOUT ||
			      err.err == FI_EHOSTUNREACH,
		      "err %d (%s)", err.err, fi_strerror(err.err));
	close_side(c);
	ck_assert_int_eq(fi_close(&pep_eq->fid), 0);
}
END_TEST

// The side that shuts down: its own outstanding receive ends FI_ECANCELED
// once the peer has answered (the queue pair runs until then).
START_TEST(shutdown_reaches_peer)
{
	Env env;
	Pair p(env);
	Region r(env, 64, FI_RECV), own(env, 64, FI_RECV);
	int ctx, own_ctx;
	ck_assert_int_eq(fi_recv(p.server.ep, r.buf.data(), 64, r.desc(), 0, &ctx), 0);
	ck_assert_int_eq(fi_recv(p.client.ep, own.buf.data(), 64, own.desc(), 0, &own_ctx), 0);
	ck_assert_int_eq(fi_shutdown(p.client.ep, 0), 0);
	fi_cq_err_entry own_err = expect_error(p.client.cq);
	ck_assert_int_eq(own_err.err, FI_ECANCELED);
	ck_assert_ptr_eq(own_err.op_context, &own_ctx);
	ck_assert_uint_eq(own_err.flags, FI_RECV | FI_MSG);
	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
	auto *entry = reinterpret_cast<fi_eq_cm_entry *>(buf);
	uint32_t event;
	ck_assert_int_eq(wait_eq(p.server.eq, &event, buf, sizeof buf), sizeof(fi_eq_cm_entry));
	ck_assert_uint_eq(event, FI_SHUTDOWN);
	ck_assert_ptr_eq(entry->fid, &p.server.ep->fid);
	// The receive that was outstanding completes as cancelled.
	fi_cq_err_entry err = expect_error(p.server.cq);
	ck_assert_int_eq(err.err, FI_ECANCELED);
	ck_assert_ptr_eq(err.op_context, &ctx);
	ck_assert_uint_eq(err.flags, FI_RECV | FI_MSG);
	ck_assert_int_eq(fi_shutdown(p.server.ep, 0), -FI_ENOTCONN);
	ck_assert_int_eq(fi_send(p.server.ep, r.buf.data(), 1, r.desc(), 0, nullptr), -FI_ENOTCONN);
}
END_TEST

// A message the peer has read is delivered: its send completes successfully
// even when the reader shuts down the moment it has it (fabtests' finalize).
// The send is posted from another thread, whose call carries the message and
// its acknowledgement through soft-RoCE while this thread reads the receive
// and calls fi_shutdown at once: a shutdown that moves the QP to the error
// state before the peer answers its disconnect request can drop the
// acknowledgement not yet sent, and the send ends FI_ECANCELED.
START_TEST(shutdown_after_delivery)
{
	Env env;
	constexpr int kRounds = 100;
	for (int round = 0; round < kRounds; round++) {
		Pair p(env);
		Region src(env, 64, FI_SEND), dst(env, 64, FI_RECV);
		src.fill(static_cast<uint8_t>(round));
		int rctx, sctx;
		ck_assert_int_eq(fi_recv(p.client.ep, dst.buf.data(), 64, dst.desc(), 0, &rctx), 0);
		ssize_t send_rc = 1;
		std::thread sender([&] {
			send_rc = fi_send(p.server.ep, src.buf.data(), 64, src.desc(), 0, &sctx);
		});
		fi_cq_data_entry e{};
		ssize_t n;
		Deadline until(kTimeoutMs);
		while ((n = fi_cq_read(p.client.cq, &e, 1)) == -FI_EAGAIN && !until.expired())
			;
		ck_assert_int_eq(fi_shutdown(p.client.ep, 0), 0);
		sender.join();
		ck_assert_int_eq(send_rc, 0);
		ck_assert_msg(n == 1, "round %d: the receive: %zd", round, n);
		ck_assert_ptr_eq(e.op_context, &rctx);
		ck_assert_uint_eq(e.len, 64);
		ck_assert(dst.check(static_cast<uint8_t>(round), 64));
		fi_cq_data_entry se{};
		fi_cq_err_entry err{};
		n = wait_cq(p.server.cq, &se, &err);
		ck_assert_msg(n == 1, "round %d: the delivered send ended %zd (err %d %s, prov_errno %d)",
			      round, n, err.err, err.err ? fi_strerror(err.err) : "", err.prov_errno);
		ck_assert_ptr_eq(se.op_context, &sctx);
		ck_assert_uint_eq(se.flags, FI_SEND | FI_MSG);
		expect_no_completion(p.server.cq, 0);
	}
}
END_TEST

// A 4 MiB message from the server to the client, sent from another thread
// (soft-RoCE carries the message in that thread's call); the constructor
// returns once its first bytes landed, `midway` says whether its last had
// not.
struct MessageInFlight {
	static constexpr size_t kLen = 4 << 20;
	Region src, dst;
	int rctx = 0, sctx = 0;
	ssize_t send_rc = 1;
	bool midway = false;
	std::thread sender;
	MessageInFlight(Env &env, Pair &p, uint8_t seed)
	    : src(env, kLen, FI_SEND), dst(env, kLen, FI_RECV)
	{
		src.fill(seed);
		ck_assert_int_eq(fi_recv(p.client.ep, dst.buf.data(), kLen, dst.desc(), 0, &rctx), 0);
		sender = std::thread([this, &p] {
			send_rc = fi_send(p.server.ep, src.buf.data(), kLen, src.desc(), 0, &sctx);
		});
		const volatile uint8_t *first = dst.buf.data(), *last = dst.buf.data() + kLen - 1;
		const uint8_t before = *last;
		Deadline until(kTimeoutMs);
		while (*first != src.buf[0] && !until.expired())
			;
		midway = *last == before;
	}
	void join()
	{
		sender.join();
		ck_assert_int_eq(send_rc, 0);
		if (!midway)
			fprintf(stderr, "the message had arrived before the shutdown\n");
	}
	// The server's send: one successful completion.
	void expect_sent(Pair &p)
	{
		fi_cq_data_entry e{};
		fi_cq_err_entry err{};
		ssize_t n = wait_cq(p.server.cq, &e, &err);
		ck_assert_msg(n == 1, "the send ended %zd (err %d, prov_errno %d)", n, err.err, err.prov_errno);
		ck_assert_ptr_eq(e.op_context, &sctx);
		ck_assert_uint_eq(e.flags, FI_SEND | FI_MSG);
		expect_no_completion(p.server.cq, 0);
	}
};

// The peer shuts down while this side's message is still arriving: the
// send in flight keeps its connection (the QP and the answer to the peer's
// request wait for it), so the message is delivered and both sides'
// completions succeed. A send ended at the disconnect request would flush
// (FI_ECANCELED here, and the peer's receive with it).
START_TEST(shutdown_during_a_send)
{
	Env env;
	Pair p(env);
	MessageInFlight m(env, p, 0x5a);
	ck_assert_int_eq(fi_shutdown(p.client.ep, 0), 0);
	m.join();
	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
	uint32_t event;
	ck_assert_int_eq(wait_eq(p.server.eq, &event, buf, sizeof buf), sizeof(fi_eq_cm_entry));
	ck_assert_uint_eq(event, FI_SHUTDOWN);
	m.expect_sent(p);
	fi_cq_data_entry e{};
	fi_cq_err_entry err{};
	ssize_t n = wait_cq(p.client.cq, &e, &err);
	ck_assert_msg(n == 1, "the receive ended %zd (err %d, prov_errno %d)", n, err.err, err.prov_errno);
	ck_assert_ptr_eq(e.op_context, &m.rctx);
	ck_assert_uint_eq(e.len, m.kLen);
	ck_assert(m.dst.check(0x5a, m.kLen));
	expect_no_completion(p.client.cq, 0);
}
END_TEST

// The same, with the reader closing its endpoint right after fi_shutdown
// (fabtests' finalize): fi_close waits for the peer's answer, which comes
// once the peer's send completed, so the QP still acknowledges the rest of
// the message and the send succeeds. The close runs on another thread while
// this one reads the sender's CQ (the sender's lingering ends when its
// application has read the send's completion or after a deadline).
START_TEST(shutdown_and_close_during_a_send)
{
	Env env;
	Pair p(env);
	MessageInFlight m(env, p, 0x33);
	int shutdown_rc = 1, close_rc = 1;
	std::thread closer([&] {
		shutdown_rc = fi_shutdown(p.client.ep, 0);
		close_rc = fi_close(&p.client.ep->fid);
	});
	m.join();
	m.expect_sent(p);
	closer.join();
	p.client.ep = nullptr;
	ck_assert_int_eq(shutdown_rc, 0);
	ck_assert_int_eq(close_rc, 0);
}
END_TEST

// A send the peer never takes (no receive posted: the device retries it)
// does not hold the connection for ever: once the wait for sends in flight
// ends, it completes FI_ECANCELED, once, and the peer gets its answer.
START_TEST(shutdown_with_a_send_never_taken)
{
	Env env;
	Pair p(env);
	Region src(env, 64, FI_SEND);
	int sctx;
	ck_assert_int_eq(fi_send(p.server.ep, src.buf.data(), 64, src.desc(), 0, &sctx), 0);
	ck_assert_int_eq(fi_shutdown(p.client.ep, 0), 0);
	alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
	uint32_t event;
	ck_assert_int_eq(wait_eq(p.server.eq, &event, buf, sizeof buf), sizeof(fi_eq_cm_entry));
	ck_assert_uint_eq(event, FI_SHUTDOWN);
	fi_cq_err_entry err = expect_error(p.server.cq);
	ck_assert_int_eq(err.err, FI_ECANCELED);
	ck_assert_ptr_eq(err.op_context, &sctx);
	ck_assert_uint_eq(err.flags, FI_SEND | FI_MSG);
	expect_no_completion(p.server.cq, 0);
	// The client's own FI_SHUTDOWN, queued by fi_shutdown.
	ck_assert_int_eq(wait_eq(p.client.eq, &event, buf, sizeof buf), sizeof(fi_eq_cm_entry));
	ck_assert_uint_eq(event, FI_SHUTDOWN);
}
END_TEST

START_TEST(pep_setname_then_listen)
{
	Env env;
	fid_eq *eq = open_eq(env);
	fid_pep *pep = nullptr;
	ck_assert_int_eq(fi_passive_ep(env.fabric, env.info, &pep, nullptr), 0);
	ck_assert_int_eq(fi_pep_bind(pep, &eq->fid, 0), 0);
	sockaddr_in addr = *static_cast<sockaddr_in *>(env.info->src_addr);
	addr.sin_port = htons(47777);
	ck_assert_int_eq(fi_setname(&pep->fid, &addr, sizeof addr), 0);
	ck_assert_int_eq(fi_listen(pep), 0);
	sockaddr_in got{};
	size_t len = sizeof got;
	ck_assert_int_eq(fi_getname(&pep->fid, &got, &len), 0);
	ck_assert_uint_eq(ntohs(got.sin_port), 47777);
	ck_assert_uint_eq(got.sin_addr.s_addr, addr.sin_addr.s_addr);
	ck_assert_int_eq(fi_setname(&pep->fid, &addr, sizeof addr), -FI_EOPBADSTATE);
	// A second listener on the same port is refused with a meaningful code.
	fid_pep *pep2 = nullptr;
	ck_assert_int_eq(fi_passive_ep(env.fabric, env.info, &pep2, nullptr), 0);
	ck_assert_int_eq(fi_pep_bind(pep2, &eq->fid, 0), 0);
	ck_assert_int_eq(fi_setname(&pep2->fid, &addr, sizeof addr), 0);
	ck_assert_int_eq(fi_listen(pep2), -FI_EADDRINUSE);
	ck_assert_int_eq(fi_close(&pep2->fid), 0);
	ck_assert_int_eq(fi_close(&pep->fid), 0);
	ck_assert_int_eq(fi_close(&eq->fid), 0);
}
END_TEST

// An active endpoint takes over the address of a passive endpoint named in
// fi_getinfo's hints->handle (what fabtests' fi_msg_sockets does): the
// infos carry the handle, fi_endpoint binds the passive endpoint's address,
// and it stays after the passive endpoint is closed. A listening passive
// endpoint keeps its address (-FI_EOPBADSTATE).
START_TEST(ep_takes_pep_address)
{
	Env env;
	fid_eq *eq = open_eq(env);
	fid_pep *pep = nullptr;
	ck_assert_int_eq(fi_passive_ep(env.fabric, env.info, &pep, nullptr), 0);
	sockaddr_in addr = *static_cast<sockaddr_in *>(env.info->src_addr);
	addr.sin_port = htons(47781);
	ck_assert_int_eq(fi_setname(&pep->fid, &addr, sizeof addr), 0);
	fi_info *hints = base_hints();
	hints->handle = &pep->fid;
	fi_info *info = get_info(hints, nullptr, nullptr, 0);
	hints->handle = nullptr;
	fi_freeinfo(hints);
	ck_assert_ptr_eq(info->handle, &pep->fid);
	fid_ep *ep = nullptr;
	ck_assert_int_eq(fi_endpoint(env.domain, info, &ep, nullptr), 0);
	sockaddr_in got{};
	size_t len = sizeof got;
	ck_assert_int_eq(fi_getname(&ep->fid, &got, &len), 0);
	ck_assert_uint_eq(ntohs(got.sin_port), 47781);
	ck_assert_uint_eq(got.sin_addr.s_addr, addr.sin_addr.s_addr);
	ck_assert_int_eq(fi_close(&pep->fid), 0);
	len = sizeof got;
	ck_assert_int_eq(fi_getname(&ep->fid, &got, &len), 0);
	ck_assert_uint_eq(ntohs(got.sin_port), 47781);
	ck_assert_int_eq(fi_close(&ep->fid), 0);

	// A listening one.
	ck_assert_int_eq(fi_passive_ep(env.fabric, env.info, &pep, nullptr), 0);
	ck_assert_int_eq(fi_pep_bind(pep, &eq->fid, 0), 0);
	addr.sin_port = htons(47782);
	ck_assert_int_eq(fi_setname(&pep->fid, &addr, sizeof addr), 0);
	ck_assert_int_eq(fi_listen(pep), 0);
	info->handle = &pep->fid;
	ck_assert_int_eq(fi_endpoint(env.domain, info, &ep, nullptr), -FI_EOPBADSTATE);
	info->handle = nullptr;
	fi_freeinfo(info);
	ck_assert_int_eq(fi_close(&pep->fid), 0);
	ck_assert_int_eq(fi_close(&eq->fid), 0);
}
END_TEST

START_TEST(cm_bad_arguments)
{
	Env env;
	fid_eq *pep_eq = open_eq(env);
	sockaddr_storage bound{};
	fid_pep *pep = listen_pep(env, pep_eq, &bound);
	ck_assert_int_eq(fi_listen(pep), -FI_EALREADY);
	Side c = open_client(env, reinterpret_cast<sockaddr *>(&bound));
	std::string too_long(53, 'x');
	ck_assert_int_eq(fi_connect(c.ep, nullptr, too_long.data(), too_long.size()), -FI_EINVAL);
	ck_assert_int_eq(fi_connect(c.ep, nullptr, nullptr, 4), -FI_EINVAL);
	ck_assert_int_eq(fi_accept(c.ep, nullptr, 0), -FI_EOPBADSTATE);
	int not_a_handle = 0;
	(void)not_a_handle;
	ck_assert_int_eq(fi_reject(pep, &c.ep->fid, nullptr, 0), -FI_EINVAL);
	// The other kind's calls (fid_ep and fid_pep start alike, so the
	// inline wrappers take either): -FI_ENOSYS, never one object read as
	// the other.
	auto *ep_as_pep = reinterpret_cast<fid_pep *>(c.ep);
	auto *pep_as_ep = reinterpret_cast<fid_ep *>(pep);
	ck_assert_int_eq(fi_listen(ep_as_pep), -FI_ENOSYS);
	ck_assert_int_eq(fi_reject(ep_as_pep, &c.ep->fid, nullptr, 0), -FI_ENOSYS);
	ck_assert_int_eq(fi_connect(pep_as_ep, &bound, nullptr, 0), -FI_ENOSYS);
	ck_assert_int_eq(fi_accept(pep_as_ep, nullptr, 0), -FI_ENOSYS);
	ck_assert_int_eq(fi_shutdown(pep_as_ep, 0), -FI_ENOSYS);
	char name[64];
	size_t name_len = sizeof name;
	ck_assert_int_eq(fi_getpeer(pep_as_ep, name, &name_len), -FI_ENOSYS);
	// The passive endpoint still listens, and names its address.
	name_len = sizeof name;
	ck_assert_int_eq(fi_getname(&pep->fid, name, &name_len), 0);
	ck_assert_uint_eq(name_len, bound.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
	close_side(c);

	// A passive endpoint without an EQ cannot listen.
	fid_pep *lonely = nullptr;
	ck_assert_int_eq(fi_passive_ep(env.fabric, env.info, &lonely, nullptr), 0);
	ck_assert_int_eq(fi_listen(lonely), -FI_ENOEQ);
	ck_assert_int_eq(fi_close(&lonely->fid), 0);
	ck_assert_int_eq(fi_close(&pep->fid), 0);
	ck_assert_int_eq(fi_close(&pep_eq->fid), 0);
}
END_TEST

Suite *cm_suite()
{
	Suite *s = suite_create("cm");
	TCase *tc = tcase_create("cm");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, connect_with_cm_data);
	tcase_add_test(tc, reject_with_data);
	tcase_add_test(tc, connect_without_listener);
	tcase_add_test(tc, shutdown_reaches_peer);
	tcase_add_test(tc, shutdown_after_delivery);
	tcase_add_test(tc, shutdown_during_a_send);
	tcase_add_test(tc, shutdown_and_close_during_a_send);
	tcase_add_test(tc, shutdown_with_a_send_never_taken);
	tcase_add_test(tc, pep_setname_then_listen);
	tcase_add_test(tc, ep_takes_pep_address);
	tcase_add_test(tc, cm_bad_arguments);
	suite_add_tcase(s, tc);
	// Its own case (CK_RUN_CASE=cm_data): many connections, about a minute
	// under emulation.
	TCase *data = tcase_create("cm_data");
	tcase_set_timeout(data, 240);
	tcase_add_test(data, cm_data_every_size);
	suite_add_tcase(s, data);
	return s;
}
