// Capacity math (src/capacity.h): attributes fall back to the defaults and
// stop at the device's maximum (1 when it reports none); a send queue holds
// the longest operation (82 requests) unless the device cannot; a work
// request carries the port's max_msg_sz, narrowed by FI_VRMA_MAX_WR_SIZE to
// no less than 4096 bytes; a MSG endpoint's largest operation and inject;
// the signal period is half a shallow queue; and the staging, RDM buffer
// and RDM CQ sizes.
#include "unit.h"
#include "capacity.h"

#include <climits>
#include <cstdint>

using namespace vrma;

namespace {

START_TEST(test_constants)
{
	// The numbers the wire, the arrays on the stack and fi_info depend on.
	ck_assert_uint_eq(kMaxOpWr, 82);
	ck_assert_uint_eq(kMaxInjectOpWr, 18);
	ck_assert_uint_eq(kMaxSge, 32);
	ck_assert_uint_eq(kMaxRmaIov, 16);
	ck_assert_uint_eq(kMaxSplitWr, 64);
	ck_assert_uint_eq(kMinWrBytes, 4096);
	ck_assert_uint_eq(kSignalPeriod, 16);
	ck_assert_uint_eq(kStageBuffers, 65);
}
END_TEST

START_TEST(test_clamp_to_device)
{
	// Asked 0: the default.
	ck_assert_uint_eq(clamp_to_device(0, 384, 16384), 384);
	ck_assert_uint_eq(clamp_to_device(100, 384, 16384), 100);
	// Asked (or the default) beyond the device: the device's maximum.
	ck_assert_uint_eq(clamp_to_device(20000, 384, 16384), 16384);
	ck_assert_uint_eq(clamp_to_device(0, 384, 200), 200);
	ck_assert_uint_eq(clamp_to_device(16384, 384, 16384), 16384);
	// A device that reports 0, 1 or a negative maximum: 1.
	ck_assert_uint_eq(clamp_to_device(100, 384, 0), 1);
	ck_assert_uint_eq(clamp_to_device(0, 384, 1), 1);
	ck_assert_uint_eq(clamp_to_device(100, 384, -5), 1);
	// Both 0: 0 (the caller's default was 0).
	ck_assert_uint_eq(clamp_to_device(0, 0, 16384), 0);
	ck_assert_uint_eq(clamp_to_device(SIZE_MAX, 1, INT_MAX), size_t(INT_MAX));
}
END_TEST

START_TEST(test_tx_capacity)
{
	const struct {
		size_t asked;
		int max_qp_wr;
		size_t capacity;
	} cases[] = {
		// Shallower than the longest operation: raised to 82 requests.
		{0, 16384, 82}, {1, 16384, 82}, {81, 16384, 82}, {82, 16384, 82}, {384, 16384, 384},
		// Never lowered, even beyond the device (the caller clamped it).
		{20000, 16384, 20000},
		// A device too small for 82: as far as it allows (max_qp_wr - 1),
		// never below what was asked.
		{10, 50, 49}, {60, 50, 60}, {10, 83, 82}, {10, 84, 82},
		// max_qp_wr 0, 1, 2 or negative: what was asked, at least 1.
		{0, 0, 1}, {0, 1, 1}, {5, 1, 5}, {5, -1, 5}, {0, 2, 1},
	};
	for (const auto &c : cases)
		if (tx_capacity_for(c.asked, c.max_qp_wr) != c.capacity)
			ck_abort_msg("tx_capacity_for(%zu, %d) = %zu, not %zu", c.asked, c.max_qp_wr,
				     tx_capacity_for(c.asked, c.max_qp_wr), c.capacity);
}
END_TEST

START_TEST(test_wr_bytes)
{
	constexpr uint32_t kPort = 1u << 30; // rxe, mlx5: 1 GiB
	// No FI_VRMA_MAX_WR_SIZE: the port's.
	ck_assert_uint_eq(wr_bytes_limit(kPort, 0), kPort);
	// A port max_msg_sz of 0: 4096.
	ck_assert_uint_eq(wr_bytes_limit(0, 0), 4096);
	ck_assert_uint_eq(wr_bytes_limit(0, 1000), 4096);
	ck_assert_uint_eq(wr_bytes_limit(0, 65536), 4096);
	// Narrowed, down to 4096 and no further.
	ck_assert_uint_eq(wr_bytes_limit(kPort, 65536), 65536);
	ck_assert_uint_eq(wr_bytes_limit(kPort, 4097), 4097);
	ck_assert_uint_eq(wr_bytes_limit(kPort, 4096), 4096);
	ck_assert_uint_eq(wr_bytes_limit(kPort, 4095), 4096);
	ck_assert_uint_eq(wr_bytes_limit(kPort, 1), 4096);
	// Not widened past the port.
	ck_assert_uint_eq(wr_bytes_limit(kPort, size_t(kPort)), kPort);
	ck_assert_uint_eq(wr_bytes_limit(kPort, SIZE_MAX), kPort);
	// A port smaller than 4096: the port's, whatever was set below it.
	ck_assert_uint_eq(wr_bytes_limit(2048, 1000), 2048);
	ck_assert_uint_eq(wr_bytes_limit(2048, 100000), 2048);
	ck_assert_uint_eq(wr_bytes_limit(1, 0), 1);
	ck_assert_uint_eq(wr_bytes_limit(UINT32_MAX, 0), UINT32_MAX);
}
END_TEST

START_TEST(test_msg_sizes)
{
	constexpr size_t kGiB = size_t(1) << 30;
	// With messages: one work request's bytes; RMA alone: 64 of them.
	ck_assert_uint_eq(msg_max_msg_size(kGiB, true, false), kGiB);
	ck_assert_uint_eq(msg_max_msg_size(kGiB, false, false), 64 * kGiB);
	ck_assert_uint_eq(msg_max_msg_size(4096, false, false), 262144);
	// Staged receives: 64 pieces of 64 KiB.
	ck_assert_uint_eq(msg_max_msg_size(kGiB, true, true), 4194304);
	ck_assert_uint_eq(msg_max_msg_size(4096, true, true), 4096);
	ck_assert_uint_eq(msg_max_msg_size(65536, false, true), 4194304);
	ck_assert_uint_eq(msg_max_msg_size(0, false, false), 0);

	// Inject: the larger of the inline size and FI_VRMA_INJECT_SIZE ...
	ck_assert_uint_eq(msg_inject_size(220, 4096, 0, kGiB), 4096);
	ck_assert_uint_eq(msg_inject_size(8192, 4096, 0, kGiB), 8192);
	// ... narrowed to what was asked, never widened by it ...
	ck_assert_uint_eq(msg_inject_size(220, 4096, 64, kGiB), 64);
	ck_assert_uint_eq(msg_inject_size(220, 4096, 100000, kGiB), 4096);
	// ... at most one work request ...
	ck_assert_uint_eq(msg_inject_size(220, 4096, 0, 2048), 2048);
	// ... and a 64 KiB staged piece less its 16-byte header.
	ck_assert_uint_eq(msg_inject_size(220, 1 << 20, 0, kGiB), 65520);
	ck_assert_uint_eq(msg_inject_size(0, 0, 0, kGiB), 0);
}
END_TEST

START_TEST(test_signal_period)
{
	ck_assert_uint_eq(signal_period_for(0), 0);
	ck_assert_uint_eq(signal_period_for(1), 0);
	ck_assert_uint_eq(signal_period_for(2), 1);
	ck_assert_uint_eq(signal_period_for(3), 1);
	ck_assert_uint_eq(signal_period_for(31), 15);
	ck_assert_uint_eq(signal_period_for(32), 16);
	ck_assert_uint_eq(signal_period_for(384), 16);
	ck_assert_uint_eq(signal_period_for(SIZE_MAX), 16);
}
END_TEST

START_TEST(test_staging_and_rdm_sizes)
{
	// Staging buffers: the receive depth, at most FI_VRMA_STAGE_BUFFERS.
	ck_assert_uint_eq(staging_buffers_for(384, 65), 65);
	ck_assert_uint_eq(staging_buffers_for(10, 65), 10);
	ck_assert_uint_eq(staging_buffers_for(65, 65), 65);
	ck_assert_uint_eq(staging_buffers_for(0, 65), 0);
	ck_assert_uint_eq(staging_buffers_for(384, 1), 1);

	// RDM send buffers: an index below kAuxHeldBuffer (0xffffff).
	ck_assert_uint_eq(rdm_tx_buffer_count(256), 256);
	ck_assert_uint_eq(rdm_tx_buffer_count(0xfffffe), 0xfffffe);
	ck_assert_uint_eq(rdm_tx_buffer_count(0xffffff), 0xfffffe);
	ck_assert_uint_eq(rdm_tx_buffer_count(SIZE_MAX), 0xfffffe);

	// RDM CQ: 4 per receive buffer, at least 16384, at most max_cqe.
	ck_assert_uint_eq(rdm_cq_entries(256, 4194303), 16384);
	ck_assert_uint_eq(rdm_cq_entries(4096, 4194303), 16384);
	ck_assert_uint_eq(rdm_cq_entries(4097, 4194303), 16388);
	ck_assert_uint_eq(rdm_cq_entries(256, 8192), 8192);
	ck_assert_uint_eq(rdm_cq_entries(0, 0), 0);
	// It serves the buffers and one peer's queue plus its sentinel.
	ck_assert(rdm_cq_serves(16384, 256, 128));
	ck_assert(rdm_cq_serves(386, 256, 128));
	ck_assert(!rdm_cq_serves(385, 256, 128));
	ck_assert(!rdm_cq_serves(0, 0, 0));
	ck_assert(rdm_cq_serves(2, 0, 0));

	// RDM connections' send queues: the configured depth below max_qp_wr,
	// raised to 82.
	ck_assert_uint_eq(rdm_peer_tx_depth(128, 16384), 128);
	ck_assert_uint_eq(rdm_peer_tx_depth(16, 16384), 82);
	ck_assert_uint_eq(rdm_peer_tx_depth(20000, 16384), 16383);
	ck_assert_uint_eq(rdm_peer_tx_depth(128, 64), 63);
	ck_assert_uint_eq(rdm_peer_tx_depth(128, 1), 1);
	// max_qp_wr 0 wraps the bound: the configured depth (see capacity.h).
	ck_assert_uint_eq(rdm_peer_tx_depth(128, 0), 128);
}
END_TEST

// The functions are constant expressions: usable in static_asserts.
static_assert(tx_capacity_for(0, 16384) == kMaxOpWr);
static_assert(wr_bytes_limit(0, 0) == kMinWrBytes);

} // namespace

Suite *capacity_suite()
{
	Suite *s = suite_create("capacity");
	TCase *tc = tcase_create("capacity");
	tcase_add_test(tc, test_constants);
	tcase_add_test(tc, test_clamp_to_device);
	tcase_add_test(tc, test_tx_capacity);
	tcase_add_test(tc, test_wr_bytes);
	tcase_add_test(tc, test_msg_sizes);
	tcase_add_test(tc, test_signal_period);
	tcase_add_test(tc, test_staging_and_rdm_sizes);
	suite_add_tcase(s, tc);
	return s;
}
