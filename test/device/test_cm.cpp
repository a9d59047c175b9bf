// Connection management over the device: connect/accept with CM data,
// reject with data, names, shutdown.
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>

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

START_TEST(shutdown_reaches_peer)
{
	Env env;
	Pair p(env);
	Region r(env, 64, FI_RECV);
	int ctx;
	ck_assert_int_eq(fi_recv(p.server.ep, r.buf.data(), 64, r.desc(), 0, &ctx), 0);
	ck_assert_int_eq(fi_shutdown(p.client.ep, 0), 0);
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
	tcase_add_test(tc, pep_setname_then_listen);
	tcase_add_test(tc, ep_takes_pep_address);
	tcase_add_test(tc, cm_bad_arguments);
	suite_add_tcase(s, tc);
	return s;
}
