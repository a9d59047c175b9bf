// Event queues (vrma_eq.cpp).
#pragma once

#include "vrma_base.h"

namespace vrma {

struct EqEntry {
	uint32_t event = 0;
	bool is_error = false;
	std::vector<uint8_t> data; // the event's buffer, or the error's err_data
	fi_eq_err_entry err{};
	fid *source = nullptr; // for purging entries of a closed endpoint
	fi_info *info = nullptr; // FI_CONNREQ: owned until delivered
};

struct Eq final : fid_eq {
	using FidType = fid_eq;
	Fabric *fabric = nullptr;
	fi_wait_obj wait_obj = FI_WAIT_NONE;
	EventChannelPtr channel; // rdma_cm events of bound endpoints
	Fd epoll_fd;
	Fd event_fd; // written by fi_eq_write
	CheckedMutex lock;
	std::deque<EqEntry> queue;
	std::vector<uint8_t> last_err_data; // backs err_data returned by readerr
	std::atomic<int> refs{0};
	// Connection management makes progress without the application: the
	// active side must answer the peer's accept (RTU) even while the
	// application waits on another object.
	std::thread progress_thread;
	Fd stop_fd;
	// MSG endpoints whose peer ended the connection while their sends were
	// in flight (eq_linger_*, vrma_msg_cm.cpp): each keeps its QP up and
	// the peer's request unanswered until those sends completed or its
	// deadline passed. Under lock; the thread ticks while it is not empty,
	// kick_fd wakes it to start.
	std::vector<Ep *> lingering;
	Fd kick_fd;
};

// vrma_eq.cpp
int eq_open(fid_fabric *fabric, fi_eq_attr *attr, fid_eq **eq, void *context) noexcept;
int eq_trywait(Eq *eq) noexcept;
// Queues an event for the application and wakes its waiters.
void eq_post(Eq *eq, EqEntry &&entry);
void eq_purge(Eq *eq, fid *source) noexcept;

} // namespace vrma
