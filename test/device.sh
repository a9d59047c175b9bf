#!/bin/sh
# make check's device part: on a host with an RDMA device the device tests run
# directly; otherwise util/vrma-vm boots the soft-RoCE VM once and runs them
# there.
set -eu
builddir=${VRMA_BUILDDIR:-$(pwd)}
srcdir=${VRMA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
export VRMA_BUILDDIR="$builddir"
# util/vrma-test runs make distcheck with VRMA_DEVICE_TESTS=skip: make check
# has just run this suite on the same sources (77: automake's SKIP).
if [ "${VRMA_DEVICE_TESTS:-}" = skip ]; then
	echo "device.sh: skipped (VRMA_DEVICE_TESTS=skip)"
	exit 77
fi
# The guest mounts its own tmpfs on /tmp, /run and /dev/shm: a source tree
# there is invisible to it (its scripts would be "not found").
host_device=
[ -z "${VRMA_VM_FORCE:-}" ] && [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ] && host_device=1
[ -n "$host_device" ] || case $srcdir in
/tmp/* | /run/* | /dev/shm/*)
	echo "FAIL: device.sh: the source tree $srcdir is under /tmp, /run or /dev/shm, which the test VM replaces with its own tmpfs; clone it elsewhere"
	exit 1
	;;
esac
# fabtests are built on the host, once (util/vrma-fabtests caches them), and
# run in the same boot as the device tests; without the tarball the build
# step prints the one line that says it skips them.
ft=$("$srcdir/util/vrma-fabtests" build) || { echo "FAIL: building fabtests"; exit 1; }
case $ft in
"fabtests: skipped"*) export VRMA_FABTESTS_SKIPPED="$ft" ;;
*) export VRMA_FABTESTS_BIN="$ft" ;;
esac
# tests-sos (Sandia OpenSHMEM's suite) likewise: util/vrma-sos builds SOS
# once per build into its cache, the same boot runs its make check.
sos=$("$srcdir/util/vrma-sos" build --set ci) || { echo "FAIL: building SOS (util/vrma-sos build)"; exit 1; }
case $sos in
"sos: skipped"*) export VRMA_SOS_SKIPPED="$sos" ;;
*) export VRMA_SOS_DIR="$sos" ;;
esac
# Sanitizer builds of the provider (util/vrma-sanitize): the unit suite runs
# here under ASan+UBSan, and the VM boot runs the RDM suites against the
# ASan+UBSan provider and the threaded suites against the TSan one
# (run-in-vm.sh, section 1). Not inside a tree that is itself sanitized
# (VRMA_SANITIZER_PRELOAD set): its provider is already checked.
if [ -z "${VRMA_SANITIZER_PRELOAD:-}" ]; then
	for kind in address thread; do
		dir=$("$srcdir/util/vrma-sanitize" build "$kind") || { echo "FAIL: the $kind sanitizer build (util/vrma-sanitize build $kind)"; exit 1; }
		pre=$("$srcdir/util/vrma-sanitize" preload "$kind") || { echo "FAIL: no $kind sanitizer runtime"; exit 1; }
		case $kind in
		address) export VRMA_SAN_ADDRESS="$dir" VRMA_SAN_ADDRESS_PRELOAD="$pre" ;;
		thread) export VRMA_SAN_THREAD="$dir" VRMA_SAN_THREAD_PRELOAD="$pre" ;;
		esac
	done
	# One process (CK_FORK=no): 13 s instead of 55; a report ends it.
	if CK_FORK=no "$VRMA_SAN_ADDRESS/test/unit_tests" >"$builddir/test/unit-asan.log" 2>&1; then
		echo "PASS: unit suite under ASan+UBSan ($(tail -1 "$builddir/test/unit-asan.log"))"
	else
		echo "FAIL: unit suite under ASan+UBSan (log: $builddir/test/unit-asan.log)"
		tail -60 "$builddir/test/unit-asan.log"
		exit 1
	fi
fi
# The MPI test program, built with Open MPI's mpicc when it is installed.
if command -v mpicc >/dev/null 2>&1; then
	mkdir -p "$builddir/test/mpi"
	mpicc -O2 -Wall -Wextra -Werror -o "$builddir/test/mpi/vrma_mpi_test" \
		"$srcdir/test/mpi/vrma_mpi_test.c" || { echo "FAIL: building test/mpi/vrma_mpi_test"; exit 1; }
	mpicc -O2 -Wall -Wextra -Werror -o "$builddir/test/mpi/vrma_mpi_latency" \
		"$srcdir/test/mpi/vrma_mpi_latency.c" || { echo "FAIL: building test/mpi/vrma_mpi_latency"; exit 1; }
	mpicc -O2 -Wall -Wextra -Werror -o "$builddir/test/mpi/vrma_mpi_osc" \
		"$srcdir/test/mpi/vrma_mpi_osc.c" || { echo "FAIL: building test/mpi/vrma_mpi_osc"; exit 1; }
else
	echo "device.sh: no mpicc (openmpi-bin, libopenmpi-dev): the MPI test is skipped"
fi
if [ -n "$host_device" ]; then
	echo "device.sh: RDMA device present, running on the host"
	exec sh "$srcdir/test/device/run-in-vm.sh"
fi
# The guest sees the host's files read-only, but its /tmp is its own and only
# the working directory is shared writable: run a copy from the build tree.
cd "$builddir"
cp "$srcdir/test/device/run-in-vm.sh" test/run-in-vm.sh
# fabtests allocate, touch and register 2 x 64 x 8 MiB per process (their
# window of their largest size): two processes need over 2 GiB of guest
# memory. fi_rdm_atomic registers two more such buffers it barely touches,
# which vrma registers on demand (not pinned): 4 GiB hold the suite.
exec "$srcdir/util/vrma-vm" --timeout "${VRMA_VM_TIMEOUT:-3600}" --mem "${VRMA_VM_MEM:-4096}" -- sh test/run-in-vm.sh
