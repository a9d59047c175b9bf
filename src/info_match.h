// Provider-neutral matching of fi_getinfo hints against what a provider can do,
// following the rules libfabric's (uninstalled) util layer applies.
//
// The "capability" fi_info passed in describes the most a provider can offer on
// one device: sizes and limits are maxima, op_flags is the set of supported
// operation flags, mode is the set of modes the provider *requires*.
#pragma once

#include <cstdint>
#include <string>

#include <rdma/fabric.h>

namespace vrma {

// Returns true when `hints` can be satisfied by `cap`. On false, `why` names the
// first field that did not match (for an FI_INFO log line).
bool hints_match(uint32_t api_version, const fi_info &cap, const fi_info *hints,
		 std::string &why);

// Narrows `out` (a fi_dupinfo() of `cap`) to what the hints asked for:
// requested caps (with implied direction bits), requested sizes, requested
// op_flags, legacy mr_mode spelling, the hints' auth keys (copied; throws
// std::bad_alloc). Precondition: hints_match() returned true.
// `default_tx_size`/`default_rx_size` are used when the hints ask for none;
// `optional_modes` are modes the provider can use but does not require.
void apply_hints(uint32_t api_version, fi_info &out, const fi_info *hints,
		 size_t default_tx_size, size_t default_rx_size,
		 size_t default_iov_limit, uint64_t optional_modes);

// Primary capabilities with no direction bit imply all their directions.
uint64_t expand_caps(uint64_t caps) noexcept;
// The direction bits of each side: a transmit context holds only the
// first, a receive context only the second (fi_getinfo(3)).
inline constexpr uint64_t kTxDirections = FI_SEND | FI_READ | FI_WRITE;
inline constexpr uint64_t kRxDirections = FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE;
// expand_caps for a transmit or a receive context, which hold only their
// own side's directions: a tx_attr->caps of FI_MSG asks for FI_SEND, not
// FI_RECV.
uint64_t expand_tx_caps(uint64_t caps) noexcept;
uint64_t expand_rx_caps(uint64_t caps) noexcept;

// threading: does the provider level `have` satisfy the requested `want`?
bool threading_satisfies(int have, int want) noexcept;
// progress: does `have` satisfy `want`?
bool progress_satisfies(int have, int want) noexcept;
// mr_mode: does a provider that needs `prov_mode` work for an application
// that supports `user_mode` (and legacy FI_LOCAL_MR in `user_info_mode`)?
bool mr_mode_satisfies(uint32_t api_version, int prov_mode, int user_mode,
		       uint64_t user_info_mode) noexcept;

} // namespace vrma
