// Runs every unit test suite; the exit status is non-zero on any failure.
#include "unit.h"

#include <cstdlib>

int main()
{
	SRunner *sr = srunner_create(info_match_suite());
	srunner_add_suite(sr, abi_compat_suite());
	srunner_add_suite(sr, errno_suite());
	srunner_add_suite(sr, slot_ring_suite());
	srunner_add_suite(sr, persist_suite());
	srunner_add_suite(sr, wire_suite());
	srunner_add_suite(sr, tag_match_suite());
	srunner_add_suite(sr, reg_cache_suite());
	srunner_add_suite(sr, rdm_wire_suite());
	srunner_add_suite(sr, av_table_suite());
	srunner_add_suite(sr, mem_monitor_suite());
	srunner_add_suite(sr, ring_queue_suite());
	srunner_add_suite(sr, intrusive_fifo_suite());
	srunner_add_suite(sr, fast_mutex_suite());
	srunner_add_suite(sr, wait_gate_suite());
	srunner_add_suite(sr, key_table_suite());
	srunner_add_suite(sr, atomic_ops_suite());
	srunner_add_suite(sr, conn_auth_suite());
	srunner_add_suite(sr, rx_budget_suite());
	srunner_add_suite(sr, tx_share_suite());
	srunner_add_suite(sr, peer_limit_suite());
	srunner_add_suite(sr, free_list_suite());
	srunner_add_suite(sr, capacity_suite());
	srunner_add_suite(sr, cq_credits_suite());
	srunner_add_suite(sr, dc_chain_suite());
	srunner_run_all(sr, CK_NORMAL);
	const int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
