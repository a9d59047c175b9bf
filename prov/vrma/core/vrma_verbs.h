// Owning wrappers for ibverbs and rdma_cm objects. Destruction order between
// objects is the owners' responsibility (QP before CQ before PD before device).
#pragma once

#include <memory>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace vrma {

struct PdDeleter {
	void operator()(ibv_pd *p) const noexcept { ibv_dealloc_pd(p); }
};
struct CqDeleter {
	void operator()(ibv_cq *p) const noexcept { ibv_destroy_cq(p); }
};
struct CompChannelDeleter {
	void operator()(ibv_comp_channel *p) const noexcept { ibv_destroy_comp_channel(p); }
};
struct MrDeleter {
	void operator()(ibv_mr *p) const noexcept { ibv_dereg_mr(p); }
};
// The queue pair rdma_create_qp made on an rdma_cm id (the id itself is
// another owner's).
struct CmQpDeleter {
	void operator()(rdma_cm_id *id) const noexcept { rdma_destroy_qp(id); }
};
struct CmIdDeleter {
	void operator()(rdma_cm_id *p) const noexcept { rdma_destroy_id(p); }
};
struct EventChannelDeleter {
	void operator()(rdma_event_channel *p) const noexcept { rdma_destroy_event_channel(p); }
};
struct SrqDeleter {
	void operator()(ibv_srq *p) const noexcept { ibv_destroy_srq(p); }
};
struct DeviceListDeleter {
	void operator()(ibv_context **p) const noexcept { rdma_free_devices(p); }
};

using PdPtr = std::unique_ptr<ibv_pd, PdDeleter>;
using CqPtr = std::unique_ptr<ibv_cq, CqDeleter>;
using CompChannelPtr = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;
using CmIdPtr = std::unique_ptr<rdma_cm_id, CmIdDeleter>;
using CmQpPtr = std::unique_ptr<rdma_cm_id, CmQpDeleter>;
using EventChannelPtr = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;
using SrqPtr = std::unique_ptr<ibv_srq, SrqDeleter>;
using DeviceListPtr = std::unique_ptr<ibv_context *, DeviceListDeleter>;

// A file descriptor closed on destruction.
class Fd {
public:
	Fd() = default;
	explicit Fd(int fd) : fd_(fd) {}
	Fd(const Fd &) = delete;
	Fd &operator=(const Fd &) = delete;
	Fd(Fd &&o) noexcept : fd_(o.release()) {}
	Fd &operator=(Fd &&o) noexcept
	{
		reset(o.release());
		return *this;
	}
	~Fd() { reset(); }
	int get() const noexcept { return fd_; }
	int release() noexcept
	{
		int f = fd_;
		fd_ = -1;
		return f;
	}
	void reset(int fd = -1) noexcept
	{
		if (fd_ >= 0)
			::close(fd_);
		fd_ = fd;
	}

private:
	int fd_ = -1;
};

} // namespace vrma
