// Conversion of ibverbs / rdma_cm / work-completion errors into libfabric codes.
// Contract: every conversion in the provider goes through these two functions, so
// that a transient condition (a full work queue) is the only thing ever reported
// as -FI_EAGAIN and every permanent failure keeps a distinct code.
#pragma once

#include <cstdint>

namespace vrma {

// Where an errno comes from. ENOMEM, ENOBUFS and EBUSY mean different things:
//  - Post: ibv_post_send/recv/srq_recv, whose queue is full for now: retrying
//    after progress helps, so they are -FI_EAGAIN;
//  - Control: everything else (creating, registering, connecting,
//    destroying): ENOMEM and ENOBUFS are memory (-FI_ENOMEM: a pinned-memory
//    limit, say), EBUSY an object still in use (-FI_EBUSY); no retry helps,
//    and -FI_EAGAIN would have an application retry forever. EAGAIN stays
//    -FI_EAGAIN on both paths.
enum class ErrPath { Control, Post };

// errno (positive, as set by ibverbs/rdma_cm or returned by ibv_post_*) ->
// negative FI_E* code. 0 maps to 0.
int errno_to_fi(int err, ErrPath path = ErrPath::Control) noexcept;

// ibv_wc_status value -> positive FI_E* code for fi_cq_err_entry::err.
int wc_status_to_fi(int status) noexcept;

} // namespace vrma
