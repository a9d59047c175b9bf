// What vrma puts on the wire of its own: the header in front of the
// application's connection-management data.
//
// rdma_cm pads private data to the transport's maximum and reports that
// maximum as its length, so the header carries the application's real length.
// Every field is one byte: no byte-order concerns.
#pragma once

#include <cstddef>
#include <cstdint>

#include <rdma/fi_ext_vrma.h>

namespace vrma::wire {

inline constexpr uint8_t kCmMagic = 0xA7;
inline constexpr uint8_t kCmVersion = 1;

struct CmHeader {
	uint8_t magic;    // kCmMagic: tells vrma peers from foreign rdma_cm users
	uint8_t version;  // kCmVersion
	uint8_t user_len; // bytes of application data following the header
	uint8_t flags;    // reserved for per-connection capabilities; 0 today
};
static_assert(sizeof(CmHeader) == 4, "CmHeader is a wire format");

// Smallest private-data limit of the rdma_cm messages vrma carries data in:
// an IB/RoCE REQ holds 56 bytes (REP 196, REJ 148). iWARP allows more.
inline constexpr size_t kCmPrivateDataMax = 56;
inline constexpr size_t kCmUserDataMax = kCmPrivateDataMax - sizeof(CmHeader);
static_assert(kCmUserDataMax <= UINT8_MAX, "user_len is one byte");
static_assert(kCmUserDataMax == FI_VRMA_CM_DATA_SIZE, "public header promises this size");

} // namespace vrma::wire
