// Host-side unit tests for the provider-neutral building blocks in src/:
// no RDMA device is needed.
#pragma once

#include <check.h>

// check.h's deprecated fail() macro breaks the C++ standard library headers
// (std::basic_ios::fail) included after it.
#undef fail

Suite *info_match_suite();
Suite *abi_compat_suite();
Suite *errno_suite();
Suite *slot_ring_suite();
Suite *persist_suite();
Suite *wire_suite();
Suite *tag_match_suite();
Suite *reg_cache_suite();
Suite *rdm_wire_suite();
Suite *av_table_suite();
Suite *mem_monitor_suite();
Suite *ring_queue_suite();
Suite *fast_mutex_suite();
Suite *key_table_suite();
Suite *atomic_ops_suite();
Suite *intrusive_fifo_suite();
Suite *wait_gate_suite();
Suite *conn_auth_suite();
Suite *rx_budget_suite();
Suite *tx_share_suite();
Suite *peer_limit_suite();
Suite *free_list_suite();
Suite *capacity_suite();
Suite *cq_credits_suite();
Suite *dc_chain_suite();
