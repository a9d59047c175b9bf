#include "vrma_errno.h"

#include <cerrno>
#include <infiniband/verbs.h>
#include <rdma/fi_errno.h>

namespace vrma {

int errno_to_fi(int err, ErrPath path) noexcept
{
	if (err < 0)
		err = -err;
	switch (err) {
	case 0:
		return 0;
	// ibv_post_send/recv return ENOMEM when the work queue is full: the only
	// retryable conditions.
	case ENOMEM:
	case ENOBUFS:
		return path == ErrPath::Post ? -FI_EAGAIN : -FI_ENOMEM;
	case EBUSY:
		return path == ErrPath::Post ? -FI_EAGAIN : -FI_EBUSY;
	case EAGAIN:
		return -FI_EAGAIN;
	case EINVAL:
		return -FI_EINVAL;
	case ENOSYS:
	case EOPNOTSUPP:
		return -FI_EOPNOTSUPP;
	case ENODEV:
	case ENXIO:
		return -FI_ENODEV;
	case ENOENT:
		return -FI_ENOENT;
	case EACCES:
	case EPERM:
		return -FI_EACCES;
	case EFAULT:
		return -FI_EFAULT;
	case ETIMEDOUT:
		return -FI_ETIMEDOUT;
	case ECONNREFUSED:
		return -FI_ECONNREFUSED;
	case ECONNRESET:
		return -FI_ECONNRESET;
	case ECONNABORTED:
		return -FI_ECONNABORTED;
	case EADDRINUSE:
		return -FI_EADDRINUSE;
	case EADDRNOTAVAIL:
		return -FI_EADDRNOTAVAIL;
	case ENETUNREACH:
		return -FI_ENETUNREACH;
	case EHOSTUNREACH:
		return -FI_EHOSTUNREACH;
	case EISCONN:
		return -FI_EISCONN;
	case ENOTCONN:
		return -FI_ENOTCONN;
	case EALREADY:
		return -FI_EALREADY;
	case ENOSPC:
		return -FI_ENOSPC;
	case EMSGSIZE:
		return -FI_EMSGSIZE;
	case ENODATA:
		return -FI_ENODATA;
	case EIO:
		return -FI_EIO;
	case ECANCELED:
		return -FI_ECANCELED;
	case EBADF:
		return -FI_EBADF;
	default:
		// Any other errno is still a distinct, non-retryable failure. The
		// FI_E* values below 256 are the errno values themselves.
		return err < 256 ? -err : -FI_EOTHER;
	}
}

int wc_status_to_fi(int status) noexcept
{
	switch (status) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_WR_FLUSH_ERR:
		// The QP went to the error state before this request ran.
		return FI_ECANCELED;
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_MW_BIND_ERR:
		// Bad key, access beyond the region, or missing access rights.
		return FI_EACCES;
	case IBV_WC_LOC_LEN_ERR:
		// The receive buffer was too small for the incoming message.
		return FI_ETRUNC;
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_LOC_QP_OP_ERR:
		return FI_EINVAL;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return FI_ETIMEDOUT;
	case IBV_WC_REM_OP_ERR:
	case IBV_WC_REM_ABORT_ERR:
		return FI_EREMOTEIO;
	case IBV_WC_FATAL_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
	case IBV_WC_GENERAL_ERR:
	case IBV_WC_BAD_RESP_ERR:
	case IBV_WC_LOC_ACCESS_ERR:
	case IBV_WC_LOC_EEC_OP_ERR:
	case IBV_WC_LOC_RDD_VIOL_ERR:
	case IBV_WC_REM_INV_RD_REQ_ERR:
	case IBV_WC_INV_EECN_ERR:
	case IBV_WC_INV_EEC_STATE_ERR:
	default:
		return FI_EIO;
	}
}

} // namespace vrma
