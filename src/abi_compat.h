// The libfabric ABI across API versions 1.17 to 2.6, whichever headers vrma
// is built against: what each API version calls a structure, and the fields
// added after 1.17, reached by their place.
//
// Contract (fabric(7) "ABI"): the core and every provider share one soname
// (libfabric.so.1); a structure the core allocates (fi_info and its
// attributes, from fi_allocinfo/fi_dupinfo) has the running core's size, and
// a structure the application hands in or reads back (fi_mr_attr,
// fi_cq_err_entry) has the size of the API version it asked fi_getinfo for
// (fabric->api_version). The core never asks a provider for an API version
// above the provider's fi_version, nor above its own.
//
// Hazards:
// - Reading or writing a field an API version does not have runs past the
//   caller's structure: gate every access on that version (the *_tail
//   functions below do; never assign whole structures across the boundary).
// - Built against 1.17 headers the compiler does not know the new fields;
//   built against newer headers it would copy them with `*a = *b`. The
//   offsets here are computed from the last 1.17 field and checked against
//   the headers that have the fields (static_assert), so both builds agree.
// - Some capability bits mean different things before and after 2.0 (bit 48
//   was FI_VARIABLE_MSG, now FI_EXACT_DIRECTED_RECV): offer them only at
//   the versions that define them (caps_for).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

namespace vrma::abi {

// The highest API version vrma implements. It declares the lower of this and
// the running core's fi_version() (provider_version).
inline constexpr uint32_t kApiMax = FI_VERSION(2, 6);
// The lowest core vrma is built for (configure checks the headers).
inline constexpr uint32_t kApiMin = FI_VERSION(1, 17);

// API versions at which fields and bits appeared.
inline constexpr uint32_t kV1_5 = FI_VERSION(1, 5);   // cq_err_entry err_data_size
inline constexpr uint32_t kV1_19 = FI_VERSION(1, 19); // mr_attr hmem_data
inline constexpr uint32_t kV1_20 = FI_VERSION(1, 20); // max_ep_auth_key, cq_err src_addr, av ops
inline constexpr uint32_t kV1_22 = FI_VERSION(1, 22); // mr_attr page_size
inline constexpr uint32_t kV2_0 = FI_VERSION(2, 0);   // max_group_id, base_mr, directed-recv caps
inline constexpr uint32_t kV2_5 = FI_VERSION(2, 5);   // max_cntr_value, max_err_cntr_value

// What the provider declares to a core whose fi_version() is `core`.
constexpr uint32_t provider_version(uint32_t core) noexcept
{
	return core < kApiMax ? core : kApiMax;
}

// Capability bits defined from 2.0 on (the same bits meant other, now
// removed, things before).
inline constexpr uint64_t kTaggedDirectedRecv = 1ULL << 45; // FI_TAGGED_DIRECTED_RECV
inline constexpr uint64_t kTaggedMultiRecv = 1ULL << 46;    // FI_TAGGED_MULTI_RECV
inline constexpr uint64_t kExactDirectedRecv = 1ULL << 48;  // FI_EXACT_DIRECTED_RECV
inline constexpr uint64_t kAuthKeyFlag = 1ULL << 57;        // FI_AUTH_KEY
inline constexpr uint64_t kCapsFrom2_0 = kTaggedDirectedRecv | kTaggedMultiRecv | kExactDirectedRecv;
// FI_AV_AUTH_KEY: a domain auth_key_size meaning "keys per AV entry" (1.20).
inline constexpr size_t kAvAuthKey = SIZE_MAX;
// FI_MR_DMABUF (fi_mr_regattr flag; spelled in fabric.h before 2.0).
inline constexpr uint64_t kMrDmabuf = 1ULL << 40;

// The 1.x spellings 2.0 deprecated, still accepted from applications (2.x
// headers warn at each use, so vrma names them itself; same values).
inline constexpr int kMrUnspec = 0;                    // FI_MR_UNSPEC
inline constexpr int kMrBasic = 1 << 0;                // FI_MR_BASIC
inline constexpr int kMrScalable = 1 << 1;             // FI_MR_SCALABLE
inline constexpr uint64_t kLocalMr = 1ULL << 55;       // FI_LOCAL_MR (a mode bit)
inline constexpr uint64_t kOrderNone = 0;              // FI_ORDER_NONE
inline constexpr uint64_t kOrderStrict = 0x1FF;        // FI_ORDER_STRICT
inline constexpr uint64_t kOrderData = 1ULL << 16;     // FI_ORDER_DATA
#if FI_MAJOR_VERSION < 2
static_assert(kMrBasic == FI_MR_BASIC && kMrScalable == FI_MR_SCALABLE && kMrUnspec == FI_MR_UNSPEC);
static_assert(kLocalMr == FI_LOCAL_MR && kOrderStrict == FI_ORDER_STRICT &&
	      kOrderData == FI_ORDER_DATA && kOrderNone == FI_ORDER_NONE);
#endif

// `caps` without the bits `api` does not define.
constexpr uint64_t caps_for(uint32_t api, uint64_t caps) noexcept
{
	return api >= kV2_0 ? caps : caps & ~kCapsFrom2_0;
}

namespace detail {
constexpr size_t align_up(size_t n, size_t a) noexcept { return (n + a - 1) / a * a; }
} // namespace detail

// ---- fi_domain_attr: fields after tclass (the last 1.17 field).
struct DomainTail {
	size_t max_ep_auth_key = 0;  // API 1.20
	uint32_t max_group_id = 0;   // API 2.0
	uint64_t max_cntr_value = 0; // API 2.5
	uint64_t max_err_cntr_value = 0;
};
inline constexpr size_t kDomainTailAt =
	detail::align_up(offsetof(fi_domain_attr, tclass) + sizeof(uint32_t), alignof(size_t));
inline constexpr size_t kDomainMaxEpAuthKeyAt = kDomainTailAt;
inline constexpr size_t kDomainMaxGroupIdAt = kDomainTailAt + sizeof(size_t);
inline constexpr size_t kDomainMaxCntrValueAt =
	detail::align_up(kDomainMaxGroupIdAt + sizeof(uint32_t), alignof(uint64_t));
inline constexpr size_t kDomainMaxErrCntrValueAt = kDomainMaxCntrValueAt + sizeof(uint64_t);

// ---- fi_mr_attr: fields after device (the last 1.17 field).
struct MrTail {
	void *hmem_data = nullptr;             // API 1.19
	size_t page_size = 0;                  // API 1.22
	const fid_mr *base_mr = nullptr;       // API 2.0
	size_t sub_mr_cnt = 0;                 // API 2.0
};
inline constexpr size_t kMrTailAt = detail::align_up(
	offsetof(fi_mr_attr, device) + sizeof(fi_mr_attr::device), alignof(void *));

// ---- fi_cq_err_entry: err_data/err_data_size from 1.5, src_addr from 1.20.
inline constexpr size_t kCqErrSrcAddrAt =
	detail::align_up(offsetof(fi_cq_err_entry, err_data_size) + sizeof(size_t), alignof(fi_addr_t));
// Bytes of fi_cq_err_entry the application of `api` passed.
constexpr size_t cq_err_entry_size(uint32_t api) noexcept
{
	if (api < kV1_5)
		return offsetof(fi_cq_err_entry, err_data) + sizeof(void *);
	if (api < kV1_20)
		return kCqErrSrcAddrAt;
	return kCqErrSrcAddrAt + sizeof(fi_addr_t);
}

#ifdef FI_AV_AUTH_KEY // headers of 1.20 or newer name the fields: check the places
static_assert(offsetof(fi_domain_attr, max_ep_auth_key) == kDomainMaxEpAuthKeyAt);
static_assert(offsetof(fi_cq_err_entry, src_addr) == kCqErrSrcAddrAt);
#endif
#if FI_MAJOR_VERSION >= 2
static_assert(offsetof(fi_domain_attr, max_group_id) == kDomainMaxGroupIdAt);
static_assert(offsetof(fi_mr_attr, hmem_data) == kMrTailAt);
static_assert(offsetof(fi_mr_attr, page_size) == kMrTailAt + offsetof(MrTail, page_size));
static_assert(offsetof(fi_mr_attr, base_mr) == kMrTailAt + offsetof(MrTail, base_mr));
static_assert(offsetof(fi_mr_attr, sub_mr_cnt) == kMrTailAt + offsetof(MrTail, sub_mr_cnt));
#if FI_MINOR_VERSION >= 5 || FI_MAJOR_VERSION > 2
static_assert(offsetof(fi_domain_attr, max_cntr_value) == kDomainMaxCntrValueAt);
static_assert(offsetof(fi_domain_attr, max_err_cntr_value) == kDomainMaxErrCntrValueAt);
#endif
#endif

namespace detail {
template <typename T> T load(const void *base, size_t at) noexcept
{
	T v;
	std::memcpy(&v, static_cast<const char *>(base) + at, sizeof v);
	return v;
}
template <typename T> void store(void *base, size_t at, T v) noexcept
{
	std::memcpy(static_cast<char *>(base) + at, &v, sizeof v);
}
} // namespace detail

// The fields `api` has of a core-allocated domain attribute (the others 0).
inline DomainTail domain_tail(const fi_domain_attr &a, uint32_t api) noexcept
{
	DomainTail t;
	if (api >= kV1_20)
		t.max_ep_auth_key = detail::load<size_t>(&a, kDomainMaxEpAuthKeyAt);
	if (api >= kV2_0)
		t.max_group_id = detail::load<uint32_t>(&a, kDomainMaxGroupIdAt);
	if (api >= kV2_5) {
		t.max_cntr_value = detail::load<uint64_t>(&a, kDomainMaxCntrValueAt);
		t.max_err_cntr_value = detail::load<uint64_t>(&a, kDomainMaxErrCntrValueAt);
	}
	return t;
}

// Writes the fields `api` has.
inline void set_domain_tail(fi_domain_attr &a, uint32_t api, const DomainTail &t) noexcept
{
	if (api >= kV1_20)
		detail::store<size_t>(&a, kDomainMaxEpAuthKeyAt, t.max_ep_auth_key);
	if (api >= kV2_0)
		detail::store<uint32_t>(&a, kDomainMaxGroupIdAt, t.max_group_id);
	if (api >= kV2_5) {
		detail::store<uint64_t>(&a, kDomainMaxCntrValueAt, t.max_cntr_value);
		detail::store<uint64_t>(&a, kDomainMaxErrCntrValueAt, t.max_err_cntr_value);
	}
}

// The fields `api` has of an application's fi_mr_attr (the others 0).
inline MrTail mr_tail(const fi_mr_attr &a, uint32_t api) noexcept
{
	MrTail t;
	if (api >= kV1_19)
		t.hmem_data = detail::load<void *>(&a, kMrTailAt + offsetof(MrTail, hmem_data));
	if (api >= kV1_22)
		t.page_size = detail::load<size_t>(&a, kMrTailAt + offsetof(MrTail, page_size));
	if (api >= kV2_0) {
		t.base_mr = detail::load<const fid_mr *>(&a, kMrTailAt + offsetof(MrTail, base_mr));
		t.sub_mr_cnt = detail::load<size_t>(&a, kMrTailAt + offsetof(MrTail, sub_mr_cnt));
	}
	return t;
}

// Copies an error entry into the application's buffer, only the bytes its
// API version has. vrma has no provider error data: before 1.5 err_data
// (the provider's) is NULL; from 1.5 err_data is the caller's buffer, kept,
// and err_data_size 0; src_addr from 1.20.
inline void copy_cq_err(fi_cq_err_entry *to, const fi_cq_err_entry &from, uint32_t api,
			fi_addr_t src_addr) noexcept
{
	const size_t n = cq_err_entry_size(api);
	const size_t head = offsetof(fi_cq_err_entry, err_data);
	std::memcpy(to, &from, head);
	if (api < kV1_5)
		detail::store<void *>(to, offsetof(fi_cq_err_entry, err_data), nullptr);
	else
		detail::store<size_t>(to, offsetof(fi_cq_err_entry, err_data_size), 0);
	if (n > kCqErrSrcAddrAt)
		detail::store<fi_addr_t>(to, kCqErrSrcAddrAt, src_addr);
}

// fi_dupinfo that keeps the fields of newer APIs. Hazard: a provider built
// against older headers calls the core's compatibility fi_dupinfo of that
// ABI (FABRIC_1.3 for 1.17), which copies only the older structures and
// zeroes the rest; both infos are the running core's, of its size, which
// `api` (never above the core's version) fits in.
inline fi_info *dup_info(const fi_info *src, uint32_t api) noexcept
{
	fi_info *d = fi_dupinfo(src);
	if (d && src && src->domain_attr && d->domain_attr)
		set_domain_tail(*d->domain_attr, api, domain_tail(*src->domain_attr, api));
	return d;
}

// ---- fi_ops_av as of 1.20 (insert_auth_key, lookup_auth_key, set_user_id
// appended; fi_av_* check .size before calling them). vrma's table has this
// layout whatever the headers; the core and applications read it as theirs.
struct OpsAv {
	size_t size;
	decltype(fi_ops_av::insert) insert;
	decltype(fi_ops_av::insertsvc) insertsvc;
	decltype(fi_ops_av::insertsym) insertsym;
	decltype(fi_ops_av::remove) remove;
	decltype(fi_ops_av::lookup) lookup;
	decltype(fi_ops_av::straddr) straddr;
	decltype(fi_ops_av::av_set) av_set;
	int (*insert_auth_key)(fid_av *av, const void *auth_key, size_t auth_key_size,
			       fi_addr_t *fi_addr, uint64_t flags);
	int (*lookup_auth_key)(fid_av *av, fi_addr_t fi_addr, void *auth_key,
			       size_t *auth_key_size);
	int (*set_user_id)(fid_av *av, fi_addr_t fi_addr, fi_addr_t user_id, uint64_t flags);
};
static_assert(offsetof(OpsAv, av_set) == offsetof(fi_ops_av, av_set));
#ifdef FI_AV_AUTH_KEY
static_assert(sizeof(OpsAv) == sizeof(fi_ops_av));
static_assert(offsetof(OpsAv, set_user_id) == offsetof(fi_ops_av, set_user_id));
#endif

} // namespace vrma::abi
