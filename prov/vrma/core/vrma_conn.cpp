// What a connection does the same for both endpoint kinds.
#include "vrma_post.h"
#include "vrma_rdm_api.h"

namespace vrma {

bool conn_post_sentinel(Conn *conn) noexcept
{
	TxGuard guard(conn);
	VRMA_ASSERT_HELD(tx_lock_of(conn));
	if (conn->tx.outstanding() == 0 || conn->tx.full())
		return false;
	TxSlot &s = conn->tx.next();
	s.fill(conn->tx.head(), conn->tx.head(), nullptr, 0, 0, false, nullptr, 0, false,
	       conn->peer ? rdm_aux(RdmTx::Internal, 0) : 0); // RDM: no completion of its own
	ibv_send_wr wr{};
	wr.wr_id = reinterpret_cast<uintptr_t>(&s);
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	conn->tx.push();
	ibv_send_wr *bad;
	device_will_post(&wr);
	if (ibv_post_send(conn->qp, &wr, &bad)) {
		conn->tx.unpush();
		return false;
	}
	// A credited queue's sentinel holds the credit kept for it at fi_enable.
	if (conn->tx_credits)
		conn->tx_spare = 0;
	return true;
}

void conn_set_retry(rdma_cm_id *id, rdma_conn_param &param) noexcept
{
	param.retry_count = static_cast<uint8_t>(params.retry_count);
	if (!params.ack_timeout)
		return;
	uint8_t t = static_cast<uint8_t>(params.ack_timeout);
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof t)) {
		static std::atomic<bool> warned{false};
		if (!warned.exchange(true))
			VRMA_WARN(FI_LOG_EP_CTRL, "FI_VRMA_ACK_TIMEOUT: rdma_set_option: %s (rdma_cm's is used)\n",
				  strerror(errno));
	}
}

void report_unposted(Conn *conn, const ibv_send_wr *first, int err) noexcept
{
	if (conn->peer)
		rdm_report_unposted(conn, first, err);
	else
		msg_report_unposted(conn, first, err);
}

} // namespace vrma
