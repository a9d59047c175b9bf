// abi_compat.h: the fields of API versions 1.17 to 2.6 reached by their
// place, never past the size of the caller's version; and hints_match's use
// of the domain fields added after 1.17.
#include "unit.h"
#include "abi_compat.h"
#include "info_match.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

namespace abi = vrma::abi;

namespace {

constexpr uint8_t kGuard = 0xab;
// Larger than any version's structure: what lies past a version's size
// must stay untouched.
constexpr size_t kBuf = 512;

struct Bytes {
	std::vector<uint8_t> b = std::vector<uint8_t>(kBuf, kGuard);
	template <typename T> T *as() { return reinterpret_cast<T *>(b.data()); }
	bool guarded_from(size_t at) const
	{
		for (size_t i = at; i < b.size(); i++)
			if (b[i] != kGuard)
				return false;
		return true;
	}
};

} // namespace

START_TEST(abi_declared_version_is_the_lower)
{
	ck_assert_uint_eq(abi::provider_version(FI_VERSION(1, 17)), FI_VERSION(1, 17));
	ck_assert_uint_eq(abi::provider_version(FI_VERSION(1, 21)), FI_VERSION(1, 21));
	ck_assert_uint_eq(abi::provider_version(FI_VERSION(2, 6)), FI_VERSION(2, 6));
	ck_assert_uint_eq(abi::provider_version(FI_VERSION(2, 9)), abi::kApiMax);
	ck_assert_uint_eq(abi::provider_version(FI_VERSION(3, 0)), abi::kApiMax);
	// The 2.0 bits mean something else before 2.0 (bit 48: FI_VARIABLE_MSG).
	const uint64_t all = FI_MSG | abi::kCapsFrom2_0;
	ck_assert_uint_eq(abi::caps_for(FI_VERSION(1, 22), all), FI_MSG);
	ck_assert_uint_eq(abi::caps_for(FI_VERSION(2, 0), all), all);
}
END_TEST

START_TEST(abi_domain_tail_only_where_the_version_has_it)
{
	// 1.17's structure ends at kDomainTailAt: nothing is written past it.
	Bytes m;
	abi::DomainTail t;
	t.max_ep_auth_key = 1;
	t.max_group_id = 7;
	t.max_cntr_value = UINT64_MAX;
	t.max_err_cntr_value = 12345;
	abi::set_domain_tail(*m.as<fi_domain_attr>(), FI_VERSION(1, 17), t);
	ck_assert(m.guarded_from(0));
	ck_assert_uint_eq(abi::domain_tail(*m.as<fi_domain_attr>(), FI_VERSION(1, 17)).max_group_id, 0);

	// 2.0: max_ep_auth_key (1.20) and max_group_id, not the counter limits.
	Bytes n;
	abi::set_domain_tail(*n.as<fi_domain_attr>(), FI_VERSION(2, 0), t);
	ck_assert(n.guarded_from(abi::kDomainMaxCntrValueAt));
	abi::DomainTail r = abi::domain_tail(*n.as<fi_domain_attr>(), FI_VERSION(2, 0));
	ck_assert_uint_eq(r.max_ep_auth_key, 1);
	ck_assert_uint_eq(r.max_group_id, 7);
	ck_assert_uint_eq(r.max_cntr_value, 0);

	// 2.6: all four, and nothing past the last.
	Bytes o;
	abi::set_domain_tail(*o.as<fi_domain_attr>(), FI_VERSION(2, 6), t);
	ck_assert(o.guarded_from(abi::kDomainMaxErrCntrValueAt + sizeof(uint64_t)));
	r = abi::domain_tail(*o.as<fi_domain_attr>(), FI_VERSION(2, 6));
	ck_assert_uint_eq(r.max_cntr_value, UINT64_MAX);
	ck_assert_uint_eq(r.max_err_cntr_value, 12345);
	// The places follow the 1.17 structure's end (2.6's layout).
	ck_assert_uint_ge(abi::kDomainTailAt, offsetof(fi_domain_attr, tclass) + sizeof(uint32_t));
	ck_assert_uint_eq(abi::kDomainMaxGroupIdAt, abi::kDomainTailAt + 8);
	ck_assert_uint_eq(abi::kDomainMaxCntrValueAt, abi::kDomainTailAt + 16);
}
END_TEST

START_TEST(abi_cq_err_entry_sized_by_version)
{
	fi_cq_err_entry e{};
	e.op_context = &e;
	e.flags = FI_RECV;
	e.len = 10;
	e.olen = 3;
	e.err = FI_ETRUNC;
	e.prov_errno = 5;
	e.err_data = &e; // never reaches the caller: vrma has no error data
	char user_data[8];

	// 1.17: up to err_data_size; the caller's err_data kept, size 0.
	Bytes a;
	auto *ua = a.as<fi_cq_err_entry>();
	ua->err_data = user_data;
	a.b[offsetof(fi_cq_err_entry, err_data_size)] = 0x11;
	abi::copy_cq_err(ua, e, FI_VERSION(1, 17), 42);
	ck_assert_ptr_eq(ua->op_context, &e);
	ck_assert_int_eq(ua->err, FI_ETRUNC);
	ck_assert_int_eq(ua->prov_errno, 5);
	ck_assert_uint_eq(ua->olen, 3);
	ck_assert_ptr_eq(ua->err_data, user_data);
	ck_assert_uint_eq(ua->err_data_size, 0);
	ck_assert(a.guarded_from(abi::cq_err_entry_size(FI_VERSION(1, 17))));
	ck_assert_uint_eq(abi::cq_err_entry_size(FI_VERSION(1, 17)), abi::kCqErrSrcAddrAt);

	// 1.4: the 1.0 entry (err_data is the provider's: NULL), nothing after.
	Bytes b;
	abi::copy_cq_err(b.as<fi_cq_err_entry>(), e, FI_VERSION(1, 4), 42);
	ck_assert_ptr_null(b.as<fi_cq_err_entry>()->err_data);
	ck_assert(b.guarded_from(offsetof(fi_cq_err_entry, err_data) + sizeof(void *)));

	// 2.6: src_addr too.
	Bytes c;
	abi::copy_cq_err(c.as<fi_cq_err_entry>(), e, FI_VERSION(2, 6), 42);
	fi_addr_t src;
	memcpy(&src, c.b.data() + abi::kCqErrSrcAddrAt, sizeof src);
	ck_assert_uint_eq(src, 42);
	ck_assert(c.guarded_from(abi::kCqErrSrcAddrAt + sizeof(fi_addr_t)));
}
END_TEST

START_TEST(abi_mr_tail_read_by_version)
{
	Bytes m;
	auto *attr = m.as<fi_mr_attr>();
	abi::MrTail t;
	t.hmem_data = &t;
	t.page_size = 4096;
	t.base_mr = reinterpret_cast<const fid_mr *>(&m);
	t.sub_mr_cnt = 3;
	memcpy(m.b.data() + abi::kMrTailAt, &t, sizeof t);
	// 1.17 has none of them: the guard bytes past its end are not read.
	abi::MrTail r = abi::mr_tail(*attr, FI_VERSION(1, 17));
	ck_assert_ptr_null(r.hmem_data);
	ck_assert_ptr_null(r.base_mr);
	ck_assert_uint_eq(r.page_size, 0);
	r = abi::mr_tail(*attr, FI_VERSION(1, 20));
	ck_assert_ptr_eq(r.hmem_data, &t);
	ck_assert_uint_eq(r.page_size, 0);
	r = abi::mr_tail(*attr, FI_VERSION(2, 6));
	ck_assert_uint_eq(r.page_size, 4096);
	ck_assert_ptr_eq(r.base_mr, reinterpret_cast<const fid_mr *>(&m));
	ck_assert_uint_eq(r.sub_mr_cnt, 3);
}
END_TEST

namespace {

struct InfoDeleter {
	void operator()(fi_info *info) const noexcept { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// An info whose domain attribute has room for 2.6's fields (the linked core
// may be 1.17, which allocates less): what a 2.6 core hands a provider.
InfoPtr info_26()
{
	InfoPtr info(fi_allocinfo());
	ck_assert_ptr_nonnull(info.get());
	free(info->domain_attr);
	info->domain_attr = static_cast<fi_domain_attr *>(calloc(1, kBuf));
	ck_assert_ptr_nonnull(info->domain_attr);
	return info;
}

} // namespace

START_TEST(abi_hints_domain_fields_of_newer_apis)
{
	constexpr uint32_t kV26 = FI_VERSION(2, 6);
	InfoPtr cap = info_26();
	cap->caps = FI_MSG | FI_SEND | FI_RECV;
	cap->domain_attr->threading = FI_THREAD_SAFE;
	cap->domain_attr->auth_key_size = 64;
	abi::DomainTail have;
	have.max_ep_auth_key = 1;
	have.max_cntr_value = UINT64_MAX;
	have.max_err_cntr_value = UINT64_MAX;
	abi::set_domain_tail(*cap->domain_attr, kV26, have);

	InfoPtr h = info_26();
	std::string why;
	ck_assert(vrma::hints_match(kV26, *cap, h.get(), why));
	abi::DomainTail want;
	want.max_ep_auth_key = 1;
	want.max_cntr_value = UINT64_MAX;
	abi::set_domain_tail(*h->domain_attr, kV26, want);
	ck_assert_msg(vrma::hints_match(kV26, *cap, h.get(), why), "%s", why.c_str());

	want.max_ep_auth_key = 2;
	abi::set_domain_tail(*h->domain_attr, kV26, want);
	ck_assert(!vrma::hints_match(kV26, *cap, h.get(), why));
	ck_assert_str_eq(why.c_str(), "domain_attr->max_ep_auth_key");
	// The same bytes at 1.17 are not that version's: not read.
	ck_assert(vrma::hints_match(FI_VERSION(1, 17), *cap, h.get(), why));

	want.max_ep_auth_key = 0;
	want.max_group_id = 1; // peer groups: not offered
	abi::set_domain_tail(*h->domain_attr, kV26, want);
	ck_assert(!vrma::hints_match(kV26, *cap, h.get(), why));
	ck_assert_str_eq(why.c_str(), "domain_attr->max_group_id");

	// A provider that names no counter limit serves every request.
	want.max_group_id = 0;
	abi::set_domain_tail(*h->domain_attr, kV26, want);
	have.max_cntr_value = 1000;
	abi::set_domain_tail(*cap->domain_attr, kV26, have);
	ck_assert(!vrma::hints_match(kV26, *cap, h.get(), why));
	ck_assert_str_eq(why.c_str(), "domain_attr->max_cntr_value");
	have.max_cntr_value = 0;
	abi::set_domain_tail(*cap->domain_attr, kV26, have);
	ck_assert(vrma::hints_match(kV26, *cap, h.get(), why));

	// FI_AV_AUTH_KEY (1.20): keys per address, not offered.
	h->domain_attr->auth_key_size = abi::kAvAuthKey;
	ck_assert(!vrma::hints_match(kV26, *cap, h.get(), why));
	ck_assert(why.find("FI_AV_AUTH_KEY") != std::string::npos);
	h->domain_attr->auth_key_size = 0;

	// 2.0 capability bits are refused at 1.x (there bit 48 was
	// FI_VARIABLE_MSG) when the provider offers them only at 2.x.
	cap->caps |= abi::caps_for(FI_VERSION(1, 17), abi::kExactDirectedRecv);
	h->caps = FI_MSG | abi::kExactDirectedRecv;
	ck_assert(!vrma::hints_match(FI_VERSION(1, 17), *cap, h.get(), why));
	cap->caps |= abi::caps_for(kV26, abi::kExactDirectedRecv);
	ck_assert(vrma::hints_match(kV26, *cap, h.get(), why));
}
END_TEST

Suite *abi_compat_suite()
{
	Suite *s = suite_create("abi_compat");
	TCase *tc = tcase_create("abi");
	tcase_add_test(tc, abi_declared_version_is_the_lower);
	tcase_add_test(tc, abi_domain_tail_only_where_the_version_has_it);
	tcase_add_test(tc, abi_cq_err_entry_sized_by_version);
	tcase_add_test(tc, abi_mr_tail_read_by_version);
	tcase_add_test(tc, abi_hints_domain_fields_of_newer_apis);
	suite_add_tcase(s, tc);
	return s;
}
