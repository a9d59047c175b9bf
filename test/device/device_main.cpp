// Device tests: need an RDMA device (the soft-RoCE VM provides rxe0) and
// FI_PROVIDER_PATH pointing at the freshly built provider.
//
// VRMA_TEST_SUITES="a b ..." runs only the named suites, VRMA_TEST_SKIP="a
// b ..." all but the named ones (names separated by spaces or commas; check's
// CK_RUN_SUITE takes one name). test/device/run-in-vm.sh runs the RDM suites
// once, against the sanitizer build of the provider, and the rest against
// the plain one. An unknown name is an error, so a renamed suite cannot
// silently drop out of a run.
#include "harness.h"

#include <cstdio>
#include <dlfcn.h>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct SuiteEntry {
	const char *name;
	Suite *(*make)();
};

constexpr SuiteEntry kSuites[] = {
	{"objects", objects_suite},
	{"cm", cm_suite},
	{"msg", msg_suite},
	{"rma", rma_suite},
	{"dc_more", dc_more_suite},
	{"errors", errors_suite},
	{"cntr", cntr_suite},
	{"pmem", pmem_suite},
	{"split", split_suite},
	{"cq_scale", cq_scale_suite},
	{"events", events_suite},
	{"staged", staged_suite},
	{"msg_flags", msg_flags_suite},
	{"msg_auto", msg_auto_suite},
	{"av", av_suite},
	{"rdm", rdm_suite},
	{"rdm_rma", rdm_rma_suite},
	{"rdm_atomic", rdm_atomic_suite},
	{"rdm_on_demand", rdm_on_demand_suite},
	{"rdm_atomic_flags", rdm_atomic_flags_suite},
	{"hostile", hostile_suite},
	{"auth", auth_suite},
	{"abi", abi_suite},
};

// The names in an environment variable's list; false on an unknown one.
bool names_from_env(const char *var, std::vector<std::string> &out)
{
	const char *v = getenv(var);
	if (!v)
		return true;
	std::string s(v);
	for (char &c : s)
		if (c == ',')
			c = ' ';
	size_t pos = 0;
	while ((pos = s.find_first_not_of(' ', pos)) != std::string::npos) {
		const size_t end = s.find(' ', pos);
		std::string name = s.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
		bool known = false;
		for (const SuiteEntry &e : kSuites)
			known = known || name == e.name;
		if (!known) {
			std::fprintf(stderr, "device_tests: %s names no suite: '%s'\n", var, name.c_str());
			return false;
		}
		out.push_back(std::move(name));
		pos = end;
	}
	return true;
}

bool listed(const std::vector<std::string> &names, const char *name)
{
	for (const std::string &n : names)
		if (n == name)
			return true;
	return false;
}

// Check runs each test in a fresh child (fork mode), which initializes
// libfabric and the provider anew: a test's FI_VRMA_* settings take effect,
// and no state leaks between tests. Loading the provider's library here
// once (not initializing it: fi_prov_ini still runs in each child) spares
// every child its relocation and, in sanitizer builds, the registration of
// its instrumented globals: about half a second a test under ASan in the
// TCG test bed. The core's dlopen in the child finds it loaded.
void preload_provider()
{
	const char *dir = getenv("FI_PROVIDER_PATH");
	if (!dir || strchr(dir, ':') || getenv("VRMA_TEST_NO_PRELOAD"))
		return;
	const std::string path = std::string(dir) + "/libvrma-fi.so";
	if (!dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
		std::fprintf(stderr, "device_tests: cannot preload %s: %s\n", path.c_str(), dlerror());
}

} // namespace

int main()
{
	if (!getenv("FI_PROVIDER_PATH"))
		std::fprintf(stderr, "device_tests: FI_PROVIDER_PATH is not set; using the installed vrma\n");
	std::vector<std::string> only, skip;
	if (!names_from_env("VRMA_TEST_SUITES", only) || !names_from_env("VRMA_TEST_SKIP", skip))
		return EXIT_FAILURE;
	SRunner *sr = nullptr;
	for (const SuiteEntry &e : kSuites) {
		if ((getenv("VRMA_TEST_SUITES") && !listed(only, e.name)) || listed(skip, e.name))
			continue;
		if (sr)
			srunner_add_suite(sr, e.make());
		else
			sr = srunner_create(e.make());
	}
	if (!sr) {
		std::fprintf(stderr, "device_tests: VRMA_TEST_SUITES and VRMA_TEST_SKIP leave no suite\n");
		return EXIT_FAILURE;
	}
	preload_provider();
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
