// The RMA core both endpoint kinds build on (vrma_msg_rma.cpp for MSG,
// vrma_rdm_rma.cpp for RDM): the checks of the remote side and the work
// requests of one operation on one connection (splits, the delivery
// read-back, a trailing provider send). What differs between the kinds (how
// local buffers get keys, commits, how the target hears of CQ data and
// events) stays with each.
#pragma once

#include "vrma_post.h"

#include <algorithm>

namespace vrma {

// Local pieces: each work request boundary may split one local segment in
// two; plus the read-back or commit request and the event send.
inline constexpr size_t kMaxOpSge = kMaxSge + kMaxOpWr;

// Bytes the read that makes writes durable (FI_COMMIT_COMPLETE to a target
// whose writes land in its persistence domain) fetches back: as librpma
// does, a few bytes of the region just written, on the same QP. A read of
// memory pushes the writes before it out of the target's PCIe posted
// queue; RC executes it after them.
inline constexpr size_t kCommitReadLen = 8;

// The remote segments of an operation: present, at most kMaxRmaIov, keys
// within key_max. Their byte total (saturated) in remote_total.
inline ssize_t rma_check_remote(const fi_rma_iov *rma_iov, size_t rma_count, uint64_t key_max,
				size_t &remote_total) noexcept
{
	if (!rma_iov || rma_count == 0 || rma_count > kMaxRmaIov) [[unlikely]] {
		VRMA_WARN(FI_LOG_EP_DATA, "RMA: %zu remote segments; rma_iov_limit is %zu\n", rma_count,
			  kMaxRmaIov);
		return -FI_EINVAL;
	}
	remote_total = 0;
	for (size_t r = 0; r < rma_count; r++) {
		if (rma_iov[r].key > key_max) [[unlikely]] {
			VRMA_WARN(FI_LOG_EP_DATA, "RMA: key 0x%llx is wider than mr_key_size\n",
				  static_cast<unsigned long long>(rma_iov[r].key));
			return -FI_EINVAL;
		}
		remote_total = rma_iov[r].len > SIZE_MAX - remote_total ? SIZE_MAX
									  : remote_total + rma_iov[r].len;
	}
	return 0;
}

// The work requests of one RMA operation, on the stack of the caller. Only
// the entries used are initialised: the arrays are large and this is the
// data path.
struct RmaWrs {
	ibv_send_wr wrs[kMaxOpWr];
	ibv_sge sges[kMaxOpSge];
	size_t nwr = 0, nsge = 0;
	size_t payload_wrs = 0; // the leading requests that carry the payload
	// The remote segments the operation fills, and how much of each.
	wire::CommitRange ranges[kMaxRmaIov];
	size_t nranges = 0;
	const fi_rma_iov *last_written = nullptr;
	size_t last_written_len = 0;

	// The distinct keys of the segments the operation touches (at most
	// kMaxRmaIov), for an event message; returns how many.
	size_t keys(uint64_t *out) const noexcept
	{
		size_t n = 0;
		for (size_t i = 0; i < nranges; i++)
			if (std::find(out, out + n, uint64_t(ranges[i].key)) == out + n)
				out[n++] = ranges[i].key;
		return n;
	}
};

// One work request per remote segment (several when a segment is longer
// than one request carries: max_wr_bytes), carving the local pieces (local,
// with their full lengths in local_len) in order. A zero-length operation is
// one empty request. -FI_EINVAL (logged) when a request would span more
// local pieces than the connection's iov limit. Writes of inline size go
// inline (their sges then need no key).
inline ssize_t rma_build_payload(const Conn *conn, ibv_wr_opcode opcode, const ibv_sge *local,
				 const size_t *local_len, size_t total, const fi_rma_iov *rma_iov,
				 size_t rma_count, RmaWrs &w) noexcept
{
	const bool is_read = opcode == IBV_WR_RDMA_READ;
	size_t left = total;
	SgeCursor cursor{local, local_len};
	for (size_t r = 0; r < rma_count && (left || w.nwr == 0); r++) {
		size_t seg = std::min(rma_iov[r].len, left);
		if (!seg && left)
			continue; // an empty remote segment takes nothing
		size_t done = 0;
		do {
			// max_msg_size bounds the splits: total / max_wr_bytes work
			// requests plus one per remote segment fit kMaxOpWr.
			const size_t chunk = std::min(seg - done, conn->max_wr_bytes);
			ibv_send_wr &wr = w.wrs[w.nwr++];
			wr = {};
			wr.sg_list = &w.sges[w.nsge];
			wr.opcode = opcode;
			wr.wr.rdma.remote_addr = rma_iov[r].addr + done;
			wr.wr.rdma.rkey = static_cast<uint32_t>(rma_iov[r].key);
			wr.num_sge = cursor.take(chunk, &w.sges[w.nsge]);
			w.nsge += static_cast<size_t>(wr.num_sge);
			if (static_cast<size_t>(wr.num_sge) > conn->tx_iov_limit) [[unlikely]] {
				VRMA_WARN(FI_LOG_EP_DATA, "RMA: a work request would span more than iov_limit %zu local pieces\n",
					  conn->tx_iov_limit);
				return -FI_EINVAL;
			}
			if (!is_read && chunk && chunk <= conn->inline_size)
				wr.send_flags = IBV_SEND_INLINE;
			done += chunk;
		} while (done < seg);
		left -= seg;
		if (seg) {
			w.last_written = &rma_iov[r];
			w.last_written_len = seg;
			w.ranges[w.nranges++] = {rma_iov[r].addr, seg, static_cast<uint32_t>(rma_iov[r].key)};
		}
	}
	w.payload_wrs = w.nwr;
	return 0;
}

// The READ after the writes that proves them (RC executes it after them):
// `bytes` 0 for delivery, which needs no access to the target region (the
// responder checks no key of a zero-length request, IBA C9-88: a region
// registered for remote writes only is fine) and fetches nothing;
// kCommitReadLen for durability. Into the connection's scratch buffer,
// registered at first use. False (logged) when that registration fails.
inline bool rma_add_read_back(Conn *conn, RmaWrs &w, size_t bytes) noexcept
{
	if (!w.last_written)
		return true; // nothing written: nothing to wait for
	const size_t n = std::min(bytes, w.last_written_len);
	ibv_send_wr &rd = w.wrs[w.nwr];
	rd = {};
	if (n) {
		if (!conn->scratch_mr) [[unlikely]] {
			conn->scratch_mr.reset(ibv_reg_mr(conn->domain->pd.get(), conn->scratch,
							  sizeof conn->scratch, IBV_ACCESS_LOCAL_WRITE));
			if (!conn->scratch_mr) {
				VRMA_WARN(FI_LOG_EP_DATA, "cannot register the read-back buffer: %s\n",
					  strerror(errno));
				return false;
			}
		}
		w.sges[w.nsge] = {reinterpret_cast<uintptr_t>(conn->scratch), static_cast<uint32_t>(n),
				  conn->scratch_mr->lkey};
		rd.sg_list = &w.sges[w.nsge++];
		rd.num_sge = 1;
	}
	w.nwr++;
	rd.opcode = IBV_WR_RDMA_READ;
	rd.wr.rdma.remote_addr = w.last_written->addr + w.last_written_len - n;
	rd.wr.rdma.rkey = static_cast<uint32_t>(w.last_written->key);
	return true;
}

// A provider send after the operation's requests (an event message): one
// sge, which post_send_chain points at the slot's event buffer.
inline void rma_add_event_send(RmaWrs &w) noexcept
{
	ibv_send_wr &send = w.wrs[w.nwr++];
	send = {};
	send.sg_list = &w.sges[w.nsge++];
	send.num_sge = 1;
	send.opcode = IBV_WR_SEND;
}

} // namespace vrma
