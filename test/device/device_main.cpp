// Device tests: need an RDMA device (the soft-RoCE VM provides rxe0) and
// FI_PROVIDER_PATH pointing at the freshly built provider.
#include "harness.h"

#include <cstdio>
#include <cstdlib>

int main()
{
	if (!getenv("FI_PROVIDER_PATH"))
		std::fprintf(stderr, "device_tests: FI_PROVIDER_PATH is not set; using the installed vrma\n");
	SRunner *sr = srunner_create(objects_suite());
	srunner_add_suite(sr, cm_suite());
	srunner_add_suite(sr, msg_suite());
	srunner_add_suite(sr, rma_suite());
	srunner_add_suite(sr, dc_more_suite());
	srunner_add_suite(sr, errors_suite());
	srunner_add_suite(sr, cntr_suite());
	srunner_add_suite(sr, pmem_suite());
	srunner_add_suite(sr, split_suite());
	srunner_add_suite(sr, cq_scale_suite());
	srunner_add_suite(sr, events_suite());
	srunner_add_suite(sr, staged_suite());
	srunner_add_suite(sr, msg_flags_suite());
	srunner_add_suite(sr, msg_auto_suite());
	srunner_add_suite(sr, av_suite());
	srunner_add_suite(sr, rdm_suite());
	srunner_add_suite(sr, rdm_rma_suite());
	srunner_add_suite(sr, rdm_atomic_suite());
	srunner_add_suite(sr, rdm_on_demand_suite());
	srunner_add_suite(sr, rdm_atomic_flags_suite());
	srunner_add_suite(sr, hostile_suite());
	srunner_add_suite(sr, auth_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
