// RMA on MSG endpoints: RDMA READ / WRITE / WRITE_WITH_IMM.
#include "vrma_post.h"

namespace vrma {

namespace {

constexpr uint64_t kRmaFlags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
			       FI_TRANSMIT_COMPLETE | FI_MORE | FI_REMOTE_CQ_DATA;

ssize_t rma_common(Ep *ep, ibv_wr_opcode opcode, const iovec *iov, void *const *desc,
		   size_t count, const fi_rma_iov *rma_iov, size_t rma_count, uint64_t data,
		   uint64_t flags, void *context, bool inject_call)
{
	if (ssize_t rc = check_op_flags(flags, kRmaFlags, "RMA"))
		return rc;
	if (rma_count != 1 || !rma_iov) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RMA: %zu remote segments; rma_iov_limit is 1\n", rma_count);
		return -FI_EINVAL;
	}
	if (rma_iov->key > UINT32_MAX) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RMA: key 0x%llx is wider than mr_key_size 4\n",
			  static_cast<unsigned long long>(rma_iov->key));
		return -FI_EINVAL;
	}
	const bool is_read = opcode == IBV_WR_RDMA_READ;
	if (is_read && (inject_call || (flags & (FI_INJECT | FI_REMOTE_CQ_DATA)))) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RMA read cannot be injected or carry CQ data\n");
		return -FI_EINVAL;
	}
	ibv_sge sge[kMaxSge];
	size_t total;
	const bool inject = inject_call || (flags & FI_INJECT);
	if (ssize_t rc = build_sges(ep, iov, desc, count, ep->tx_iov_limit, sge, total, !is_read))
		return rc;
	if (ssize_t rc = check_inject(ep, inject, total))
		return rc;
	if (rma_iov->len < total) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RMA: %zu local bytes but the remote segment holds %zu\n",
			  total, rma_iov->len);
		return -FI_EINVAL;
	}
	ibv_send_wr wr{};
	wr.sg_list = sge;
	wr.num_sge = static_cast<int>(count);
	wr.opcode = opcode;
	if (flags & FI_REMOTE_CQ_DATA) {
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.imm_data = htonl(static_cast<uint32_t>(data));
	}
	wr.wr.rdma.remote_addr = rma_iov->addr;
	wr.wr.rdma.rkey = static_cast<uint32_t>(rma_iov->key);
	if (!is_read && total && total <= ep->inline_size)
		wr.send_flags = IBV_SEND_INLINE;
	const TxOp op{context, FI_RMA | (is_read ? FI_READ : FI_WRITE), total,
		      !inject_call && tx_reports(ep, flags), is_read ? ep->cntr_read : ep->cntr_write};
	return post_send(ep, wr, op);
}

ssize_t rma_read(fid_ep *f, void *buf, size_t len, void *desc, fi_addr_t, uint64_t addr,
		 uint64_t key, void *context) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	const iovec iov{buf, len};
	const fi_rma_iov r{addr, len, key};
	return rma_common(ep, IBV_WR_RDMA_READ, &iov, &desc, 1, &r, 1, 0, ep->tx_op_flags, context,
			  false);
}

ssize_t rma_readv(fid_ep *f, const iovec *iov, void **desc, size_t count, fi_addr_t,
		  uint64_t addr, uint64_t key, void *context) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	const fi_rma_iov r{addr, SIZE_MAX, key};
	return rma_common(ep, IBV_WR_RDMA_READ, iov, desc, count, &r, 1, 0, ep->tx_op_flags,
			  context, false);
}

ssize_t rma_readmsg(fid_ep *f, const fi_msg_rma *msg, uint64_t flags) noexcept
{
	if (!msg) {
		VRMA_WARN(FI_LOG_EP_DATA, "fi_readmsg: NULL message\n");
		return -FI_EINVAL;
	}
	return rma_common(static_cast<Ep *>(f), IBV_WR_RDMA_READ, msg->msg_iov, msg->desc,
			  msg->iov_count, msg->rma_iov, msg->rma_iov_count, 0, flags, msg->context,
			  false);
}

ssize_t rma_write(fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t, uint64_t addr,
		  uint64_t key, void *context) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	const iovec iov{const_cast<void *>(buf), len};
	const fi_rma_iov r{addr, len, key};
	return rma_common(ep, IBV_WR_RDMA_WRITE, &iov, &desc, 1, &r, 1, 0, ep->tx_op_flags,
			  context, false);
}

ssize_t rma_writev(fid_ep *f, const iovec *iov, void **desc, size_t count, fi_addr_t,
		   uint64_t addr, uint64_t key, void *context) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	const fi_rma_iov r{addr, SIZE_MAX, key};
	return rma_common(ep, IBV_WR_RDMA_WRITE, iov, desc, count, &r, 1, 0, ep->tx_op_flags,
			  context, false);
}

ssize_t rma_writemsg(fid_ep *f, const fi_msg_rma *msg, uint64_t flags) noexcept
{
	if (!msg) {
		VRMA_WARN(FI_LOG_EP_DATA, "fi_writemsg: NULL message\n");
		return -FI_EINVAL;
	}
	return rma_common(static_cast<Ep *>(f), IBV_WR_RDMA_WRITE, msg->msg_iov, msg->desc,
			  msg->iov_count, msg->rma_iov, msg->rma_iov_count, msg->data, flags,
			  msg->context, false);
}

ssize_t rma_inject(fid_ep *f, const void *buf, size_t len, fi_addr_t, uint64_t addr,
		   uint64_t key) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	const iovec iov{const_cast<void *>(buf), len};
	const fi_rma_iov r{addr, len, key};
	return rma_common(ep, IBV_WR_RDMA_WRITE, &iov, nullptr, 1, &r, 1, 0, FI_INJECT, nullptr,
			  true);
}

ssize_t rma_writedata(fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data,
		      fi_addr_t, uint64_t addr, uint64_t key, void *context) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	const iovec iov{const_cast<void *>(buf), len};
	const fi_rma_iov r{addr, len, key};
	return rma_common(ep, IBV_WR_RDMA_WRITE, &iov, &desc, 1, &r, 1, data,
			  ep->tx_op_flags | FI_REMOTE_CQ_DATA, context, false);
}

ssize_t rma_injectdata(fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t,
		       uint64_t addr, uint64_t key) noexcept
{
	Ep *ep = static_cast<Ep *>(f);
	const iovec iov{const_cast<void *>(buf), len};
	const fi_rma_iov r{addr, len, key};
	return rma_common(ep, IBV_WR_RDMA_WRITE, &iov, nullptr, 1, &r, 1, data,
			  FI_INJECT | FI_REMOTE_CQ_DATA, nullptr, true);
}

} // namespace

const fi_ops_rma rma_ops = {
	.size = sizeof(fi_ops_rma),
	.read = rma_read,
	.readv = rma_readv,
	.readmsg = rma_readmsg,
	.write = rma_write,
	.writev = rma_writev,
	.writemsg = rma_writemsg,
	.inject = rma_inject,
	.writedata = rma_writedata,
	.injectdata = rma_injectdata,
};

} // namespace vrma
