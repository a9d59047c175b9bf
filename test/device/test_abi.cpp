// The abi suite: one provider under every core from 1.17 to 2.6. Run under
// Debian's 1.17 core and again under the 2.6 core (test/device/run-in-vm.sh,
// LD_LIBRARY_PATH). This binary is built against 1.17 headers: as a 1.17
// application it calls the core's 1.17 ABI (FABRIC_1.3); as a 2.x
// application it calls the running core's newest ABI (FABRIC_1.9, found by
// dlvsym) with structures of 2.x's layout (abi_compat.h places the fields).
// The 2.x cases need a core of 2.5 or newer: under an older one they say so
// and check what that core offers instead.
#include "rdm_harness.h"
#include "abi_compat.h"

#include <dlfcn.h>

#include <cstring>
#include <vector>

namespace abi = vrma::abi;
using namespace vt;

namespace {

constexpr uint32_t kV117 = FI_VERSION(1, 17);

// The running core's current-ABI fi_getinfo (a 2.5+ core's FABRIC_1.9), or
// null under an older core.
GetinfoFn current_getinfo()
{
	void *f = dlvsym(RTLD_DEFAULT, "fi_getinfo", "FABRIC_1.9");
	return reinterpret_cast<GetinfoFn>(f);
}

// The newest API this core and vrma share: what a 2.x application asks for.
uint32_t newest_api() { return abi::provider_version(fi_version()); }

// get_info and the RDM harness ask for `api` through `fn` while it lives.
struct ApiScope {
	uint32_t saved_api = test_api;
	GetinfoFn saved_fn = test_getinfo;
	ApiScope(uint32_t api, GetinfoFn fn)
	{
		test_api = api;
		test_getinfo = fn;
	}
	~ApiScope()
	{
		test_api = saved_api;
		test_getinfo = saved_fn;
	}
};

// A 2.x application's scope, or false (after one line) under a core without
// the 2.5 ABI.
bool newer_core(const char *test)
{
	if (current_getinfo() && fi_version() >= abi::kV2_5)
		return true;
	std::printf("%s: the running core is %u.%u (no FABRIC_1.9): its 2.x half is not run here\n",
		    test, FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
	return false;
}

const fi_info *find(const fi_info *list, fi_ep_type type)
{
	for (const fi_info *i = list; i; i = i->next)
		if (i->fabric_attr && i->fabric_attr->prov_name &&
		    !std::strcmp(i->fabric_attr->prov_name, "vrma") && i->ep_attr->type == type)
			return i;
	return nullptr;
}

} // namespace

// The core lists vrma for every API version up to the lower of its own and
// vrma's (a core skips providers whose fi_version is below the request).
START_TEST(abi_listed_up_to_the_core_version)
{
	const uint32_t newest = newest_api();
	ck_assert_uint_ge(newest, kV117);
	for (uint32_t api : {kV117, newest}) {
		// No hints, as fi_info asks: every provider's every entry.
		fi_info *list = nullptr;
		GetinfoFn fn = api >= abi::kV2_5 && current_getinfo() ? current_getinfo() : fi_getinfo;
		const int rc = fn(api, nullptr, nullptr, 0, nullptr, &list);
		ck_assert_msg(rc == 0, "API %u.%u: fi_getinfo %d", FI_MAJOR(api), FI_MINOR(api), rc);
		const fi_info *msg = find(list, FI_EP_MSG), *rdm = find(list, FI_EP_RDM);
		ck_assert_msg(msg && rdm, "API %u.%u: %s", FI_MAJOR(api), FI_MINOR(api),
			      info_names(list).c_str());
		ck_assert_uint_eq(rdm->fabric_attr->api_version, api);
		// FI_AV_USER_ID at every version; the 2.0 receive modifiers only
		// when asked for (below).
		ck_assert(rdm->caps & FI_AV_USER_ID);
		ck_assert(rdm->domain_attr->caps & FI_AV_USER_ID);
		ck_assert(!(rdm->caps & abi::kCapsFrom2_0));
		ck_assert(!(msg->caps & (abi::kCapsFrom2_0 | FI_AV_USER_ID)));
		const abi::DomainTail t = abi::domain_tail(*rdm->domain_attr, api);
		if (api >= abi::kV1_20)
			ck_assert_uint_eq(t.max_ep_auth_key, 1);
		if (api >= abi::kV2_5) {
			ck_assert_uint_eq(t.max_cntr_value, UINT64_MAX);
			ck_assert_uint_eq(t.max_err_cntr_value, UINT64_MAX);
		}
		ck_assert_uint_eq(t.max_group_id, 0);
		fi_freeinfo(list);
	}
	// At 1.x bit 48 is FI_VARIABLE_MSG, which vrma does not offer.
	fi_info *h = rdm_hints(kRdmCaps | abi::kExactDirectedRecv);
	fi_info *list = nullptr;
	ck_assert_int_eq(fi_getinfo(kV117, kRdmNodeAddr, nullptr, FI_SOURCE, h, &list), -FI_ENODATA);
	// From 2.0 both modifiers, asked for, are granted.
	if (newest >= abi::kV2_0 && current_getinfo()) {
		h->caps = FI_TAGGED | abi::kTaggedDirectedRecv | abi::kExactDirectedRecv;
		ck_assert_int_eq(current_getinfo()(newest, kRdmNodeAddr, nullptr, FI_SOURCE, h, &list), 0);
		const fi_info *rdm = find(list, FI_EP_RDM);
		ck_assert_ptr_nonnull(rdm);
		ck_assert_uint_eq(rdm->caps & abi::kCapsFrom2_0,
				  abi::kTaggedDirectedRecv | abi::kExactDirectedRecv);
		ck_assert(rdm->rx_attr->caps & abi::kTaggedDirectedRecv);
		fi_freeinfo(list);
	}
	fi_freeinfo(h);
}
END_TEST

// A 2.x application's domain requests: peer groups and more than one key
// per endpoint are refused, the full counter range granted.
START_TEST(abi_domain_limits_of_newer_apis)
{
	if (!newer_core("abi_domain_limits_of_newer_apis"))
		return;
	const uint32_t api = newest_api();
	GetinfoFn fn = current_getinfo();
	auto ask = [&](const abi::DomainTail &want, size_t auth_key_size) {
		fi_info *h = rdm_hints();
		abi::set_domain_tail(*h->domain_attr, api, want);
		h->domain_attr->auth_key_size = auth_key_size;
		fi_info *list = nullptr;
		const int rc = fn(api, kRdmNodeAddr, nullptr, FI_SOURCE, h, &list);
		fi_freeinfo(h);
		const bool found = rc == 0 && find(list, FI_EP_RDM);
		fi_freeinfo(list);
		return found;
	};
	abi::DomainTail want;
	ck_assert(ask(want, 0));
	want.max_cntr_value = UINT64_MAX;
	want.max_err_cntr_value = UINT64_MAX;
	want.max_ep_auth_key = 1;
	ck_assert(ask(want, 0));
	want.max_ep_auth_key = 2;
	ck_assert(!ask(want, 0));
	want.max_ep_auth_key = 0;
	want.max_group_id = 1;
	ck_assert(!ask(want, 0));
	want.max_group_id = 0;
	ck_assert(!ask(want, abi::kAvAuthKey)); // FI_AV_AUTH_KEY
}
END_TEST

// FI_AV_USER_ID on insert (any version): fi_addr carries the id in, the
// handle out; completions report the id, directed receives take the handle.
START_TEST(abi_av_user_id_on_insert)
{
	RdmEnv env;
	RdmNode a(env), b(env);
	a.insert(b);
	fi_addr_t fa = 0x5eed0001;
	ck_assert_int_eq(fi_av_insert(b.av, &a.name, 1, &fa, FI_AV_USER_ID, nullptr), 1);
	ck_assert_uint_ne(fa, 0x5eed0001);
	ck_assert_uint_ne(fa, FI_ADDR_NOTAVAIL);
	RecvBuf r0(64), r1(64);
	fi_context rc0, rc1, sc[2];
	ck_assert_int_eq(fi_trecv(b.ep, r0.data(), r0.len, nullptr, fa, 7, 0, &rc0), 0);
	std::vector<uint8_t> m = pattern(40, 11);
	post([&] { return fi_tsend(a.ep, m.data(), 40, nullptr, a.addr_of(b), 7, &sc[0]); }, "tsend");
	Completion c = expect_ok(b, &rc0, kRecvTag, "directed by the handle, reported by the id");
	ck_assert_uint_eq(c.src, 0x5eed0001);
	r0.check(40, 11, "tagged receive");
	ck_assert_int_eq(fi_recv(b.ep, r1.data(), r1.len, nullptr, FI_ADDR_UNSPEC, &rc1), 0);
	post([&] { return fi_send(a.ep, m.data(), 20, nullptr, a.addr_of(b), &sc[1]); }, "send");
	c = expect_ok(b, &rc1, kRecvMsg, "untagged");
	ck_assert_uint_eq(c.src, 0x5eed0001);
	// Without the array of ids the flag is refused.
	ck_assert_int_eq(fi_av_insert(b.av, &a.name, 1, nullptr, FI_AV_USER_ID, nullptr), -FI_EINVAL);
	Tracker t;
	t.expect(&sc[0], 1, kSendTag, "tsend");
	t.expect(&sc[1], 1, kSendMsg, "send");
	t.wait(a);
}
END_TEST

// An AV opened with FI_AV_USER_ID: FI_ADDR_NOTAVAIL until
// fi_av_set_user_id names the id (reached through the 1.20 ops table, as a
// 2.x application's fi_av_set_user_id does, under any core).
START_TEST(abi_av_set_user_id)
{
	RdmEnv env;
	RdmNodeOptions o;
	o.av_flags = FI_AV_USER_ID;
	RdmNode a(env), b(env, o);
	a.insert(b);
	const fi_addr_t fa = b.insert(a);
	ck_assert_uint_ge(b.av->ops->size, sizeof(abi::OpsAv));
	const auto *ops = reinterpret_cast<const abi::OpsAv *>(b.av->ops);
	RecvBuf r0(64), r1(64);
	fi_context rc0, rc1, sc[2];
	std::vector<uint8_t> m = pattern(24, 3);
	ck_assert_int_eq(fi_trecv(b.ep, r0.data(), r0.len, nullptr, fa, 1, 0, &rc0), 0);
	post([&] { return fi_tsend(a.ep, m.data(), 24, nullptr, a.addr_of(b), 1, &sc[0]); }, "tsend");
	Completion c = expect_ok(b, &rc0, kRecvTag, "before an id is set");
	ck_assert_uint_eq(c.src, FI_ADDR_NOTAVAIL);
	ck_assert_int_eq(ops->set_user_id(b.av, fa, 0xabcdef, 0), 0);
	ck_assert_int_eq(fi_trecv(b.ep, r1.data(), r1.len, nullptr, fa, 1, 0, &rc1), 0);
	post([&] { return fi_tsend(a.ep, m.data(), 24, nullptr, a.addr_of(b), 1, &sc[1]); }, "tsend");
	c = expect_ok(b, &rc1, kRecvTag, "after fi_av_set_user_id");
	ck_assert_uint_eq(c.src, 0xabcdef);
	r1.check(24, 3, "receive");
	// Refused: the insert flag on this AV, an unknown handle, FI_AUTH_KEY,
	// an AV opened without the flag; keys per address are not offered.
	fi_addr_t id = 9;
	ck_assert_int_eq(fi_av_insert(b.av, &a.name, 1, &id, FI_AV_USER_ID, nullptr), -FI_EINVAL);
	ck_assert_int_eq(ops->set_user_id(b.av, fa + 1000, 1, 0), -FI_EINVAL);
	ck_assert_int_eq(ops->set_user_id(b.av, fa, 1, abi::kAuthKeyFlag), -FI_EOPNOTSUPP);
	const auto *aops = reinterpret_cast<const abi::OpsAv *>(a.av->ops);
	ck_assert_int_eq(aops->set_user_id(a.av, a.addr_of(b), 1, 0), -FI_EINVAL);
	fi_addr_t key_addr;
	ck_assert_int_eq(ops->insert_auth_key(b.av, "k", 1, &key_addr, 0), -FI_ENOSYS);
	Tracker t;
	t.expect(sc, 2, kSendTag, "tsends");
	t.wait(a);
}
END_TEST

// FI_TAGGED_DIRECTED_RECV directs tagged receives only; with
// FI_EXACT_DIRECTED_RECV a receive must name its source.
START_TEST(abi_directed_receive_kinds)
{
	if (!newer_core("abi_directed_receive_kinds"))
		return;
	ApiScope scope(newest_api(), current_getinfo());
	for (const bool exact : {false, true}) {
		fi_info *h = rdm_hints(FI_MSG | FI_TAGGED | FI_SOURCE | abi::kTaggedDirectedRecv |
				       (exact ? abi::kExactDirectedRecv : 0));
		RdmEnv env(h);
		fi_freeinfo(h);
		ck_assert(env.info->caps & abi::kTaggedDirectedRecv);
		ck_assert(!(env.info->caps & FI_DIRECTED_RECV));
		RdmNode a(env), b(env), c(env);
		connect_all({&a, &b, &c});
		RecvBuf rt(64), ru(64), rt2(64);
		fi_context ct, cu, ct2, sc[3];
		std::vector<uint8_t> m = pattern(16, 5);
		// Tagged, directed at a: c's message passes it by.
		ck_assert_int_eq(fi_trecv(b.ep, rt.data(), rt.len, nullptr, b.addr_of(a), 4, 0, &ct), 0);
		// Untagged: not directed, whatever it names (a), c's message lands.
		ck_assert_int_eq(fi_recv(b.ep, ru.data(), ru.len, nullptr, b.addr_of(a), &cu), 0);
		post([&] { return fi_tsend(c.ep, m.data(), 16, nullptr, c.addr_of(b), 4, &sc[0]); }, "tsend c");
		post([&] { return fi_send(c.ep, m.data(), 12, nullptr, c.addr_of(b), &sc[1]); }, "send c");
		Completion got = expect_ok(b, &cu, kRecvMsg, "untagged from c");
		ck_assert_uint_eq(got.src, b.addr_of(c));
		expect_none(b, 300, "tagged receive directed at a");
		post([&] { return fi_tsend(a.ep, m.data(), 16, nullptr, a.addr_of(b), 4, &sc[2]); }, "tsend a");
		got = expect_ok(b, &ct, kRecvTag, "tagged from a");
		ck_assert_uint_eq(got.src, b.addr_of(a));
		// c's tagged message waits unexpected: a receive from c takes it;
		// with FI_EXACT_DIRECTED_RECV one from anybody is refused.
		const ssize_t any = fi_trecv(b.ep, rt2.data(), rt2.len, nullptr, FI_ADDR_UNSPEC, 4, 0, &ct2);
		if (exact) {
			ck_assert_int_eq(any, -FI_EINVAL);
			ck_assert_int_eq(fi_trecv(b.ep, rt2.data(), rt2.len, nullptr, b.addr_of(c), 4, 0, &ct2), 0);
		} else {
			ck_assert_int_eq(any, 0);
		}
		got = expect_ok(b, &ct2, kRecvTag, "c's tagged message");
		ck_assert_uint_eq(got.src, b.addr_of(c));
		Tracker ta, tc;
		ta.expect(&sc[2], 1, kSendTag, "tsend a");
		ta.wait(a);
		tc.expect(&sc[0], 1, kSendTag, "tsend c");
		tc.expect(&sc[1], 1, kSendMsg, "send c");
		tc.wait(c);
	}
}
END_TEST

namespace {

// fi_mr_regattr with an attribute laid out as 2.x's, the bytes after 1.17's
// fields holding `tail`: what the domain of `api` makes of it.
int regattr_with_tail(fid_domain *domain, void *buf, size_t len, const abi::MrTail &tail,
		      uint64_t flags, fid_mr **mr)
{
	std::vector<uint8_t> bytes(512, 0);
	auto *attr = reinterpret_cast<fi_mr_attr *>(bytes.data());
	static iovec iov;
	iov = {buf, len};
	attr->mr_iov = &iov;
	attr->iov_count = 1;
	attr->access = FI_REMOTE_READ | FI_REMOTE_WRITE;
	attr->iface = FI_HMEM_SYSTEM;
	std::memcpy(bytes.data() + abi::kMrTailAt, &tail, sizeof tail);
	return fi_mr_regattr(domain, attr, flags, mr);
}

} // namespace

// fi_mr_regattr reads the fields of the domain's API version only: a 1.17
// application's attribute ends at device, whatever lies after it.
START_TEST(abi_mr_attr_by_version)
{
	std::vector<uint8_t> mem(4096);
	abi::MrTail bad;
	bad.base_mr = reinterpret_cast<const fid_mr *>(&bad);
	bad.hmem_data = &bad;
	fid_mr *mr = nullptr;
	{
		fi_info *h = rdm_hints(kRdmCaps | FI_RMA);
		RdmEnv env(h);
		fi_freeinfo(h);
		ck_assert_int_eq(regattr_with_tail(env.domain, mem.data(), mem.size(), bad, 0, &mr), 0);
		ck_assert_int_eq(fi_close(&mr->fid), 0);
		ck_assert_int_eq(regattr_with_tail(env.domain, mem.data(), mem.size(), {}, abi::kMrDmabuf, &mr),
				 -FI_EOPNOTSUPP);
	}
	if (!newer_core("abi_mr_attr_by_version"))
		return;
	ApiScope scope(newest_api(), current_getinfo());
	fi_info *h = rdm_hints(kRdmCaps | FI_RMA);
	RdmEnv env(h);
	fi_freeinfo(h);
	abi::MrTail t;
	t.base_mr = bad.base_mr;
	ck_assert_int_eq(regattr_with_tail(env.domain, mem.data(), mem.size(), t, 0, &mr), -FI_EOPNOTSUPP);
	t = {};
	t.hmem_data = &t;
	ck_assert_int_eq(regattr_with_tail(env.domain, mem.data(), mem.size(), t, 0, &mr), -FI_EINVAL);
	t = {};
	t.page_size = 4096; // a hint
	t.sub_mr_cnt = 2;   // a hint
	ck_assert_int_eq(regattr_with_tail(env.domain, mem.data(), mem.size(), t, 0, &mr), 0);
	ck_assert_int_eq(fi_close(&mr->fid), 0);
}
END_TEST

namespace {

// Reads n's next entry, which must be an error, into a guard-filled buffer
// of kBytes; returns the buffer.
std::vector<uint8_t> read_error_raw(RdmNode &n)
{
	constexpr size_t kBytes = 256;
	std::vector<uint8_t> raw(kBytes, 0xab);
	fi_cq_tagged_entry e;
	const Deadline d(kTimeoutMs);
	ssize_t rc;
	while ((rc = fi_cq_read(n.cq, &e, 1)) == -FI_EAGAIN && !d.expired())
		;
	ck_assert_int_eq(rc, -FI_EAVAIL);
	auto *err = reinterpret_cast<fi_cq_err_entry *>(raw.data());
	err->err_data = nullptr;
	err->err_data_size = 0;
	ck_assert_int_eq(fi_cq_readerr(n.cq, err, 0), 1);
	return raw;
}

} // namespace

// fi_cq_readerr writes the entry of the CQ's API version: up to
// err_data_size for 1.17, src_addr too for 1.20 and later.
START_TEST(abi_cq_err_entry_by_version)
{
	for (const bool newer : {false, true}) {
		if (newer && !newer_core("abi_cq_err_entry_by_version"))
			return;
		ApiScope scope(newer ? newest_api() : kV117, newer ? current_getinfo() : fi_getinfo);
		RdmEnv env;
		RdmNode b(env);
		RecvBuf r(64);
		fi_context c;
		ck_assert_int_eq(fi_trecv(b.ep, r.data(), r.len, nullptr, FI_ADDR_UNSPEC, 1, 0, &c), 0);
		ck_assert_int_eq(fi_cancel(&b.ep->fid, &c), 0);
		const std::vector<uint8_t> raw = read_error_raw(b);
		fi_cq_err_entry head;
		std::memcpy(&head, raw.data(), abi::kCqErrSrcAddrAt);
		ck_assert_ptr_eq(head.op_context, &c);
		ck_assert_int_eq(head.err, FI_ECANCELED);
		ck_assert_uint_eq(head.err_data_size, 0);
		const size_t end = abi::cq_err_entry_size(test_api);
		if (newer) {
			fi_addr_t src;
			std::memcpy(&src, raw.data() + abi::kCqErrSrcAddrAt, sizeof src);
			ck_assert_uint_eq(src, FI_ADDR_NOTAVAIL);
		}
		for (size_t i = end; i < raw.size(); i++)
			ck_assert_msg(raw[i] == 0xab, "byte %zu past the %zu of API %u.%u written", i, end,
				      FI_MAJOR(test_api), FI_MINOR(test_api));
	}
}
END_TEST

Suite *abi_suite()
{
	Suite *s = suite_create("abi");
	TCase *tc = tcase_create("abi");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, abi_listed_up_to_the_core_version);
	tcase_add_test(tc, abi_domain_limits_of_newer_apis);
	tcase_add_test(tc, abi_av_user_id_on_insert);
	tcase_add_test(tc, abi_av_set_user_id);
	tcase_add_test(tc, abi_directed_receive_kinds);
	tcase_add_test(tc, abi_mr_attr_by_version);
	tcase_add_test(tc, abi_cq_err_entry_by_version);
	suite_add_tcase(s, tc);
	return s;
}
