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
# libfabric 2.6's core (and fabtests 2.6 against it), built once into
# util/vrma-fabtests' cache: the boot loads it in place of the system's
# core for the abi suite and fi_info (run-in-vm.sh, section 2b).
ft26=$("$srcdir/util/vrma-fabtests" build --core 2.6) || { echo "FAIL: building libfabric 2.6 (util/vrma-fabtests build --core 2.6)"; exit 1; }
case $ft26 in
"fabtests 2.6: skipped"*) export VRMA_CORE26_SKIPPED="libfabric 2.6 core: skipped${ft26#fabtests 2.6: skipped}" ;;
*) VRMA_CORE26=$(cd "$ft26/../../core" && pwd) || { echo "FAIL: no libfabric 2.6 core beside $ft26"; exit 1; }
   export VRMA_FABTESTS26_BIN="$ft26" VRMA_CORE26 ;;
esac
# tests-sos (Sandia OpenSHMEM's suite) likewise: util/vrma-sos builds SOS
# once per build into its cache, the same boot runs its make check.
sos=$("$srcdir/util/vrma-sos" build --set ci) || { echo "FAIL: building SOS (util/vrma-sos build)"; exit 1; }
case $sos in
"sos: skipped"*) export VRMA_SOS_SKIPPED="$sos" ;;
*) export VRMA_SOS_DIR="$sos" ;;
esac
# Sanitizer builds of the provider (util/vrma-sanitize): built in the
# background at the lowest priority while the VM runs the plain suites,
# fabtests and tests-sos (qemu leaves about a third of the two cores idle);
# the VM runs the RDM suites against the ASan+UBSan provider and the
# threaded suites against the TSan one once test/sanitizers.status says they
# are built (run-in-vm.sh, section 9), and the unit suite runs under
# ASan+UBSan here afterwards. Not inside a tree that is itself sanitized
# (VRMA_SANITIZER_PRELOAD set): its provider is already checked.
san_pid=
if [ -z "${VRMA_SANITIZER_PRELOAD:-}" ]; then
	for kind in address thread; do
		pre=$("$srcdir/util/vrma-sanitize" preload "$kind") || { echo "FAIL: no $kind sanitizer runtime"; exit 1; }
		case $kind in
		address) export VRMA_SAN_ADDRESS="$builddir/san-address" VRMA_SAN_ADDRESS_PRELOAD="$pre" ;;
		thread) export VRMA_SAN_THREAD="$builddir/san-thread" VRMA_SAN_THREAD_PRELOAD="$pre" ;;
		esac
	done
	export VRMA_SAN_STATUS="$builddir/test/sanitizers.status"
	rm -f "$VRMA_SAN_STATUS"
	# The status file appears whole (rename): "ok", or the line that failed.
	(
		st=ok
		for kind in address thread; do
			if ! nice -n 19 "$srcdir/util/vrma-sanitize" build "$kind" >/dev/null 2>"$VRMA_SAN_STATUS.$kind"; then
				st="the $kind sanitizer build failed (util/vrma-sanitize build $kind): $(tail -1 "$VRMA_SAN_STATUS.$kind")"
				break
			fi
		done
		echo "$st" >"$VRMA_SAN_STATUS.tmp" && mv "$VRMA_SAN_STATUS.tmp" "$VRMA_SAN_STATUS"
	) &
	san_pid=$!
fi
# san_unit: the unit suite under ASan+UBSan, after the background build (one
# process, CK_FORK=no: 13 s instead of 55; a report ends it).
san_unit() {
	[ -n "$san_pid" ] || return 0
	wait "$san_pid" || true
	st=$(cat "$VRMA_SAN_STATUS" 2>/dev/null) || st="the sanitizer builds left no $VRMA_SAN_STATUS"
	if [ "$st" != ok ]; then
		echo "FAIL: unit suite under ASan+UBSan: $st"
		return 1
	fi
	if CK_FORK=no "$VRMA_SAN_ADDRESS/test/unit_tests" >"$builddir/test/unit-asan.log" 2>&1; then
		echo "PASS: unit suite under ASan+UBSan ($(tail -1 "$builddir/test/unit-asan.log"))"
	else
		echo "FAIL: unit suite under ASan+UBSan (log: $builddir/test/unit-asan.log)"
		tail -60 "$builddir/test/unit-asan.log"
		return 1
	fi
}
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
# The device tests, then the unit suite under ASan+UBSan: the VM's status
# (124: its timeout) if it failed, else 1 if the unit suite did.
cp "$srcdir/test/device/run-in-vm.sh" "$builddir/test/run-in-vm.sh"
if [ -n "$host_device" ]; then
	echo "device.sh: RDMA device present, running on the host"
	rc=0
	sh "$builddir/test/run-in-vm.sh" || rc=$?
else
	# The guest sees the host's files read-only, but its /tmp is its own and
	# only the working directory is shared writable: run the copy in the
	# build tree.
	cd "$builddir"
	# fabtests allocate, touch and register 2 x 64 x 8 MiB per process
	# (their window of their largest size): two processes need over 2 GiB
	# of guest memory. fi_rdm_atomic registers two more such buffers it
	# barely touches, which vrma registers on demand (not pinned): 4 GiB
	# hold the suite.
	# The boot takes 40 to 55 minutes on two cores (54 on a slow host):
	# the limit leaves room for a slow one, inside CI's 90 minutes.
	rc=0
	"$srcdir/util/vrma-vm" --timeout "${VRMA_VM_TIMEOUT:-4500}" --mem "${VRMA_VM_MEM:-4096}" -- sh test/run-in-vm.sh || rc=$?
fi
# The two-host boot (util/vrma-vm --hosts 2): two guests, each with its own
# kernel and rxe0 on its own NIC, one emulated link between them; the
# servers of test/device/run-2hosts.sh run on one, the clients on the
# other. Not on a host with an RDMA device (no second host to boot).
if [ -n "$host_device" ]; then
	echo "device.sh: the two-host tests need the VM test bed (util/vrma-vm --hosts 2): skipped on this host"
elif [ "${VRMA_TWO_HOSTS:-}" = skip ]; then
	echo "device.sh: the two-host tests skipped (VRMA_TWO_HOSTS=skip)"
else
	cp "$srcdir/test/device/run-2hosts.sh" "$builddir/test/run-2hosts.sh"
	cp "$srcdir/test/device/run-2hosts-suites.sh" "$builddir/test/run-2hosts-suites.sh"
	rc2=0
	"$srcdir/util/vrma-vm" --hosts 2 --timeout "${VRMA_VM_TIMEOUT_2HOSTS:-1800}" --mem 2048 -- sh test/run-2hosts.sh || rc2=$?
	[ "$rc" -ne 0 ] || rc=$rc2
fi
san_unit || { [ "$rc" -ne 0 ] || rc=1; }
exit "$rc"
