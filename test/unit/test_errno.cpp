// errno_to_fi / wc_status_to_fi: transient conditions are the only thing
// reported as -FI_EAGAIN, and permanent failures keep distinct codes.
#include "unit.h"
#include "vrma_errno.h"

#include <cerrno>
#include <cstddef>
#include <set>

#include <infiniband/verbs.h>
#include <rdma/fi_errno.h>

using vrma::errno_to_fi;
using vrma::wc_status_to_fi;

namespace {

struct ErrnoCase {
	int err;
	int fi;
};

using vrma::ErrPath;

// The conditions an ibv_post_* call reports when its work queue is
// momentarily full.
constexpr int kTransient[] = {ENOMEM, ENOBUFS, EAGAIN, EBUSY};

bool is_transient(int err, ErrPath path = ErrPath::Post)
{
	if (path == ErrPath::Control)
		return err == EAGAIN;
	for (int t : kTransient)
		if (t == err)
			return true;
	return false;
}

// A representative set of distinct errno values and their libfabric codes.
constexpr ErrnoCase kMapped[] = {
	{EINVAL, -FI_EINVAL},
	{ENOSYS, -FI_EOPNOTSUPP},
	{EOPNOTSUPP, -FI_EOPNOTSUPP},
	{ENODEV, -FI_ENODEV},
	{ENXIO, -FI_ENODEV},
	{ENOENT, -FI_ENOENT},
	{EACCES, -FI_EACCES},
	{EPERM, -FI_EACCES},
	{EFAULT, -FI_EFAULT},
	{ETIMEDOUT, -FI_ETIMEDOUT},
	{ECONNREFUSED, -FI_ECONNREFUSED},
	{ECONNRESET, -FI_ECONNRESET},
	{ECONNABORTED, -FI_ECONNABORTED},
	{EADDRINUSE, -FI_EADDRINUSE},
	{EADDRNOTAVAIL, -FI_EADDRNOTAVAIL},
	{ENETUNREACH, -FI_ENETUNREACH},
	{EHOSTUNREACH, -FI_EHOSTUNREACH},
	{EISCONN, -FI_EISCONN},
	{ENOTCONN, -FI_ENOTCONN},
	{EALREADY, -FI_EALREADY},
	{ENOSPC, -FI_ENOSPC},
	{EMSGSIZE, -FI_EMSGSIZE},
	{ENODATA, -FI_ENODATA},
	{EIO, -FI_EIO},
	{ECANCELED, -FI_ECANCELED},
	{EBADF, -FI_EBADF},
};

// Distinct permanent failures that must stay distinguishable after the
// conversion (none of them is an alias of another in the mapping).
constexpr int kDistinct[] = {
	EINVAL, ENOSYS, ENODEV, ENOENT, EACCES, EFAULT, ETIMEDOUT, ECONNREFUSED,
	ECONNRESET, ECONNABORTED, EADDRINUSE, EADDRNOTAVAIL, ENETUNREACH,
	EHOSTUNREACH, EISCONN, ENOTCONN, EALREADY, ENOSPC, EMSGSIZE, ENODATA,
	EIO, ECANCELED, EBADF, EROFS, EPIPE, ESTALE, EPROTO, EREMOTEIO, ENOTSOCK,
	E2BIG, EEXIST, ERANGE, EOVERFLOW, ENETDOWN, EHOSTDOWN,
};

} // namespace

START_TEST(errno_zero_is_success)
{
	ck_assert_int_eq(errno_to_fi(0), 0);
	ck_assert_int_eq(errno_to_fi(-0), 0);
}
END_TEST

START_TEST(errno_transient_is_eagain)
{
	for (int err : kTransient) {
		ck_assert_msg(errno_to_fi(err, ErrPath::Post) == -FI_EAGAIN,
			      "errno %d -> %d, want -FI_EAGAIN", err, errno_to_fi(err, ErrPath::Post));
		ck_assert_msg(errno_to_fi(-err, ErrPath::Post) == -FI_EAGAIN,
			      "errno -%d -> %d, want -FI_EAGAIN", err, errno_to_fi(-err, ErrPath::Post));
	}
	// EWOULDBLOCK is EAGAIN's other spelling.
	ck_assert_int_eq(errno_to_fi(EWOULDBLOCK, ErrPath::Post), -FI_EAGAIN);
	ck_assert_int_eq(errno_to_fi(EWOULDBLOCK), -FI_EAGAIN);
}
END_TEST

// Outside a post, memory is memory and busy is busy: an application told
// -FI_EAGAIN would retry a failed registration or a close forever
// (issue 13: a domain close answered -FI_EAGAIN after ibv_dealloc_pd's
// EBUSY; staging buffers over RLIMIT_MEMLOCK reported as -FI_EAGAIN).
START_TEST(errno_control_path_is_not_eagain)
{
	ck_assert_int_eq(errno_to_fi(ENOMEM), -FI_ENOMEM);
	ck_assert_int_eq(errno_to_fi(ENOBUFS), -FI_ENOMEM);
	ck_assert_int_eq(errno_to_fi(EBUSY), -FI_EBUSY);
	ck_assert_int_eq(errno_to_fi(-EBUSY, ErrPath::Control), -FI_EBUSY);
	ck_assert_int_eq(errno_to_fi(EAGAIN, ErrPath::Control), -FI_EAGAIN);
	// Every other errno maps the same on both paths.
	for (int err = 1; err < 4096; err++)
		if (!is_transient(err))
			ck_assert_msg(errno_to_fi(err) == errno_to_fi(err, ErrPath::Post),
				      "errno %d: control %d, post %d", err, errno_to_fi(err),
				      errno_to_fi(err, ErrPath::Post));
}
END_TEST

START_TEST(errno_einval)
{
	ck_assert_int_eq(errno_to_fi(EINVAL), -FI_EINVAL);
	ck_assert_int_eq(errno_to_fi(-EINVAL), -FI_EINVAL);
}
END_TEST

START_TEST(errno_mapped_codes)
{
	for (const ErrnoCase &c : kMapped) {
		ck_assert_msg(errno_to_fi(c.err) == c.fi, "errno %d -> %d, want %d", c.err,
			      errno_to_fi(c.err), c.fi);
		ck_assert_msg(errno_to_fi(-c.err) == c.fi, "errno -%d -> %d, want %d", c.err,
			      errno_to_fi(-c.err), c.fi);
	}
}
END_TEST

START_TEST(errno_nothing_else_is_eagain)
{
	// Every other errno (and the values above the errno range) is a
	// permanent failure: negative and never -FI_EAGAIN.
	for (int err = 1; err < 4096; err++) {
		for (ErrPath path : {ErrPath::Post, ErrPath::Control}) {
			if (is_transient(err, path))
				continue;
			const int fi = errno_to_fi(err, path);
			ck_assert_msg(fi != -FI_EAGAIN, "errno %d reported as -FI_EAGAIN", err);
			ck_assert_msg(fi < 0, "errno %d -> %d, want a negative code", err, fi);
		}
	}
}
END_TEST

START_TEST(errno_negative_input_like_positive)
{
	for (int err = 1; err < 4096; err++)
		ck_assert_msg(errno_to_fi(-err) == errno_to_fi(err), "errno %d: %d vs -%d: %d",
			      err, errno_to_fi(err), err, errno_to_fi(-err));
}
END_TEST

START_TEST(errno_distinct_codes_stay_distinct)
{
	std::set<int> seen;
	for (int err : kDistinct) {
		const int fi = errno_to_fi(err);
		ck_assert_msg(fi < 0, "errno %d -> %d", err, fi);
		ck_assert_msg(seen.insert(fi).second,
			      "errno %d -> %d, a code another distinct errno already has", err, fi);
	}
	ck_assert_uint_eq(seen.size(), std::size(kDistinct));
}
END_TEST

START_TEST(errno_unmapped_keeps_value)
{
	// Unlisted errno values below 256 keep their value (the FI_E* codes are
	// the errno values); anything larger is -FI_EOTHER.
	ck_assert_int_eq(errno_to_fi(EROFS), -EROFS);
	ck_assert_int_eq(errno_to_fi(EPIPE), -EPIPE);
	ck_assert_int_eq(errno_to_fi(-EPROTO), -EPROTO);
	ck_assert_int_eq(errno_to_fi(300), -FI_EOTHER);
	ck_assert_int_eq(errno_to_fi(-4000), -FI_EOTHER);
}
END_TEST

START_TEST(wc_success_is_zero)
{
	ck_assert_int_eq(wc_status_to_fi(IBV_WC_SUCCESS), 0);
}
END_TEST

START_TEST(wc_specific_statuses)
{
	ck_assert_int_eq(wc_status_to_fi(IBV_WC_WR_FLUSH_ERR), FI_ECANCELED);
	ck_assert_int_eq(wc_status_to_fi(IBV_WC_REM_ACCESS_ERR), FI_EACCES);
	ck_assert_int_eq(wc_status_to_fi(IBV_WC_LOC_PROT_ERR), FI_EACCES);
	ck_assert_int_eq(wc_status_to_fi(IBV_WC_LOC_LEN_ERR), FI_ETRUNC);
	ck_assert_int_eq(wc_status_to_fi(IBV_WC_RETRY_EXC_ERR), FI_ETIMEDOUT);
	ck_assert_int_eq(wc_status_to_fi(IBV_WC_REM_OP_ERR), FI_EREMOTEIO);
}
END_TEST

START_TEST(wc_every_error_status_is_positive)
{
	for (int s = IBV_WC_SUCCESS + 1; s <= IBV_WC_TM_RNDV_INCOMPLETE; s++) {
		const int fi = wc_status_to_fi(s);
		ck_assert_msg(fi > 0, "%s (%d) -> %d, want a positive FI_E* code",
			      ibv_wc_status_str(static_cast<ibv_wc_status>(s)), s, fi);
		ck_assert_msg(fi != FI_EAGAIN, "%s (%d) reported as FI_EAGAIN",
			      ibv_wc_status_str(static_cast<ibv_wc_status>(s)), s);
	}
	// A status newer than this build knows about is still an error.
	ck_assert_int_gt(wc_status_to_fi(IBV_WC_TM_RNDV_INCOMPLETE + 100), 0);
}
END_TEST

Suite *errno_suite()
{
	Suite *s = suite_create("errno");

	TCase *tc = tcase_create("errno_to_fi");
	tcase_add_test(tc, errno_zero_is_success);
	tcase_add_test(tc, errno_transient_is_eagain);
	tcase_add_test(tc, errno_control_path_is_not_eagain);
	tcase_add_test(tc, errno_einval);
	tcase_add_test(tc, errno_mapped_codes);
	tcase_add_test(tc, errno_nothing_else_is_eagain);
	tcase_add_test(tc, errno_negative_input_like_positive);
	tcase_add_test(tc, errno_distinct_codes_stay_distinct);
	tcase_add_test(tc, errno_unmapped_keeps_value);
	suite_add_tcase(s, tc);

	tc = tcase_create("wc_status_to_fi");
	tcase_add_test(tc, wc_success_is_zero);
	tcase_add_test(tc, wc_specific_statuses);
	tcase_add_test(tc, wc_every_error_status_is_positive);
	suite_add_tcase(s, tc);
	return s;
}
