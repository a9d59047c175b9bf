// Conversion of ibverbs / rdma_cm / work-completion errors into libfabric codes.
// Contract: every conversion in the provider goes through these two functions, so
// that a transient condition (queue full, out of memory) is the only thing ever
// reported as -FI_EAGAIN and every permanent failure keeps a distinct code.
#pragma once

#include <cstdint>

namespace vrma {

// errno (positive, as set by ibverbs/rdma_cm or returned by ibv_post_*) ->
// negative FI_E* code. 0 maps to 0.
int errno_to_fi(int err) noexcept;

// ibv_wc_status value -> positive FI_E* code for fi_cq_err_entry::err.
int wc_status_to_fi(int status) noexcept;

} // namespace vrma
