#!/bin/sh
# The device tests, run where an RDMA device is (the soft-RoCE VM, or a host
# with real hardware): vrma's check suite, then the stock libfabric tools
# against the freshly built provider. One invocation = one VM boot.
#
# Environment: VRMA_BUILDDIR (the build tree; default: .), VRMA_TEST_ADDR
# (address of the RDMA interface; default: vrma's first source address).
set -u
builddir=${VRMA_BUILDDIR:-.}
export FI_PROVIDER_PATH="$builddir/.libs"
passed=0
failed=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }

# 1. vrma's own device suite (check prints its summary line). With the
# sanitizer builds device.sh starts (VRMA_SAN_STATUS set): here the suites
# neither sanitizer takes alone; at the end (section 9) the RDM suites (the
# wire, the hostile peer, rendezvous and atomics) against the ASan+UBSan
# provider only, the MSG suites that drive the post path, the CM handlers
# and the commit service against it too (its lock checks assert their held
# locks; they run here as well, against the optimized build users get),
# and the suites whose tests start threads of their own against the TSan
# one; of rdm and rdm_rma (all under ASan) the TSan run takes the test
# cases that start threads or run auto progress (SUITE:CASE, check's
# CK_RUN_CASE).
rdm_suites="rdm rdm_rma rdm_atomic rdm_atomic_flags rdm_on_demand hostile auth"
msg_checked_suites="msg rma errors cm dc_more pmem events"
asan_suites="$rdm_suites $msg_checked_suites"
tsan_suites="msg_auto cntr objects staged"
tsan_cases="rdm:rdm_conn rdm:rdm_threads rdm:rdm_auto rdm_rma:rdm_rma_events rdm_rma:rdm_rma_persist"
secs() { echo "$(($(date +%s) - t0)) s"; }
# Every device_tests run writes check's XML log (test/ck-NAME.xml): each
# test's duration. ck_slowest FILE prints the five slowest on one line.
ck_slowest() {
	[ -f "$1" ] || return 0
	awk -F'[<>]' '/<test / { id = "" } /<id>/ { id = $3 } /<duration>/ && id != "" { print $3, id; id = "" }' "$1" |
		sort -rn | head -5 |
		awk '{ printf "%s%s %.0f s", (NR > 1 ? ", " : "slowest: "), $2, $1 } END { print "" }'
}
t0=$(date +%s)
# A block device whose writes each take VRMA_TEST_SLOW_MS (dm-delay over a
# loop device): msync into it is slow, and a commit persisted there must not
# stall its endpoint (rdm_rma's rdm_rma_persist). No udev in the VM: dmsetup
# makes its node itself.
slow_device() {
	[ -e /dev/mapper/vrma-slow ] && return 0
	img=/tmp/vrma-slow.img
	truncate -s 16M "$img" && loop=$(losetup -f --show "$img") &&
		dmsetup create --noudevsync vrma-slow --table "0 32768 delay $loop 0 0 $loop 0 ${VRMA_TEST_SLOW_MS:-800}" &&
		dmsetup mknodes vrma-slow && [ -e /dev/mapper/vrma-slow ]
}
if slow_device; then
	export VRMA_TEST_SLOW_DEV=/dev/mapper/vrma-slow VRMA_TEST_SLOW_IMG=/tmp/vrma-slow.img
	export VRMA_TEST_SLOW_MS=${VRMA_TEST_SLOW_MS:-800}
else
	echo "run-in-vm: no slow block device (losetup, dmsetup or the loop and dm_delay modules failed): rdm_rma_persist fails"
fi
ck=$builddir/test/ck-plain.xml
if [ -n "${VRMA_SAN_STATUS:-}" ]; then
	if CK_XML_LOG_FILE_NAME=$ck VRMA_TEST_SKIP="$rdm_suites $tsan_suites" "$builddir/test/device_tests"; then
		pass "device_tests, the suites run without a sanitizer ($(secs))"
	else
		fail "device_tests, the suites run without a sanitizer"
	fi
elif CK_XML_LOG_FILE_NAME=$ck "$builddir/test/device_tests"; then
	pass "device_tests ($(secs))"
else
	fail "device_tests"
fi
ck_slowest "$ck"

# 2. The stock fi_info lists vrma on each RDMA device.
out=$(fi_info -p vrma -v 2>&1)
for dev in /sys/class/infiniband/*; do
	name=$(basename "$dev")
	if printf '%s\n' "$out" | grep -q "name: $name\$"; then
		pass "fi_info -p vrma lists $name"
	else
		fail "fi_info -p vrma lists $name"
		printf '%s\n' "$out" | head -40
	fi
done
addr=${VRMA_TEST_ADDR:-$(printf '%s\n' "$out" | sed -n 's|.*src_addr: fi_sockaddr_in://\([0-9.]*\):.*|\1|p' | head -1)}
if [ -z "$addr" ]; then
	fail "no IPv4 address found for vrma"
	addr=127.0.0.1
fi

# 2b. libfabric 2.6's own core (device.sh built it on the host: util/
# vrma-fabtests build --core 2.6), loaded instead of the system's through
# LD_LIBRARY_PATH: its fi_info (which asks for API 2.6) lists vrma's MSG and
# RDM endpoints, and the abi suite runs again, as a 1.17 application of that
# core and as a 2.x one (its FABRIC_1.9 calls, 2.x structures).
if [ -n "${VRMA_CORE26:-}" ]; then
	out26=$(LD_LIBRARY_PATH="$VRMA_CORE26/lib" "$VRMA_CORE26/bin/fi_info" -p vrma 2>&1)
	if printf '%s\n' "$out26" | grep -q "type: *FI_EP_MSG" &&
	   printf '%s\n' "$out26" | grep -q "type: *FI_EP_RDM"; then
		pass "fi_info -p vrma under the libfabric 2.6 core lists FI_EP_MSG and FI_EP_RDM"
	else
		fail "fi_info -p vrma under the libfabric 2.6 core lists FI_EP_MSG and FI_EP_RDM"
		printf '%s\n' "$out26" | head -40
	fi
	t0=$(date +%s)
	if LD_LIBRARY_PATH="$VRMA_CORE26/lib" VRMA_TEST_SUITES=abi "$builddir/test/device_tests"; then
		pass "device_tests (abi) under the libfabric 2.6 core ($(secs))"
	else
		fail "device_tests (abi) under the libfabric 2.6 core"
	fi
elif [ -n "${VRMA_CORE26_SKIPPED:-}" ]; then
	echo "$VRMA_CORE26_SKIPPED"
fi

# 3. fi_pingpong, server and client through the stock core: every size of
# its list (up to 6 MiB), five round trips each, data checked (-c); the
# largest sizes are most of its time (20 round trips took 25 to 35 s a run).
pingpong() { # name, provider, endpoint type, port
	timeout 300 fi_pingpong -p "$2" -e "$3" -B "$4" -I 5 -S all -c >"/tmp/pp-server.$4" 2>&1 &
	server=$!
	sleep 2
	if timeout 300 fi_pingpong -p "$2" -e "$3" -P "$4" -I 5 -S all -c "$addr" >"/tmp/pp-client.$4" 2>&1 &&
	   wait "$server"; then
		pass "$1"
		tail -4 "/tmp/pp-client.$4"
	else
		fail "$1"
		kill "$server" 2>/dev/null
		cat "/tmp/pp-server.$4" "/tmp/pp-client.$4"
	fi
}
pingpong "fi_pingpong -p vrma -e msg" vrma msg 47592
pingpong "fi_pingpong -p vrma -e rdm (native)" vrma rdm 47593
# The core's layered RDM endpoint, offered only on request (it would be
# listed before vrma's own).
export FI_VRMA_UTIL_LAYERING=1
pingpong "fi_pingpong -p 'vrma;ofi_rxm' -e rdm" "vrma;ofi_rxm" rdm 47594
unset FI_VRMA_UTIL_LAYERING

# 4. vrma_bench, short runs of each mode and loop: it checks the bytes it
# moved (the last byte of each ping-pong; the first and last 8 bytes, read
# back, after bw and rate runs) and every completion's status, and exits
# non-zero on a mismatch. The verbs provider runs the inject loop that
# flushes with reads (it has no counters).
bench() { # name, vrma_bench arguments
	name=$1
	shift
	if timeout 300 "$builddir/util/vrma_bench" --timeout 30 "$@" >/tmp/bench.out 2>&1; then
		pass "vrma_bench $name"
	else
		fail "vrma_bench $name"
		cat /tmp/bench.out
	fi
}
bench "write bw" -p vrma -m bw -S 64,65536 -I 400
bench "read bw" -p vrma -o read -m bw -S 4096 -I 400
bench "write lat" -p vrma -m lat -S 8,4096 -I 200
bench "read lat" -p vrma -o read -m lat -S 8 -I 200
bench "writedata lat" -p vrma -o writedata -m lat -S 8 -I 200
bench "inject_write rate --more" -p vrma -o inject_write -m rate --more -I 1000
bench "write bw --delivery-complete" -p vrma -m bw -S 4096 -I 400 --delivery-complete
bench "inject_write rate (verbs)" -p verbs -o inject_write -m rate -I 1000
# Two-sided messages over vrma's own RDM endpoint and over FI_EP_MSG (the
# floor the RDM endpoint is held to): every message's length, tag and first
# and last byte are checked (--verify-all: every byte). About 15 s.
bench "tagged lat (rdm)" -p vrma -e rdm -m lat -S 8,65536 -I 200
bench "send bw (rdm) --verify-all" -p vrma -e rdm -o send -m bw -S 4096,1m -I 40 --verify-all
bench "send lat (msg)" -p vrma -e msg -o send -m lat -S 8,4096 -I 200
# The many-peer mode: a hub and 24 peer endpoints in two processes (8 and
# 16), 8-byte and 64 KiB rounds (every message checked by the bench); the
# hub's figures must show one queue pair per peer and no file descriptor
# per peer (one cm event channel per endpoint). About 5 s.
peers_dir=/tmp/vrma-peers
rm -rf "$peers_dir" /tmp/peers.json
mkdir -p "$peers_dir"
"$builddir/util/vrma_bench" -p vrma --peer-eps 8 --peer-base 0 --dir "$peers_dir" --timeout 60 \
	>/tmp/peers0.out 2>&1 &
p0=$!
"$builddir/util/vrma_bench" -p vrma --peer-eps 16 --peer-base 8 --dir "$peers_dir" --timeout 60 \
	>/tmp/peers1.out 2>&1 &
p1=$!
if timeout 120 "$builddir/util/vrma_bench" -p vrma --hub 24 --dir "$peers_dir" --rounds 3 --timeout 60 \
	--json /tmp/peers.json >/tmp/bench.out 2>&1 && wait $p0 && wait $p1 &&
	/usr/bin/python3 -c 'import json, sys
r = json.load(open("/tmp/peers.json"))
qps, fds = r["qps"], r["fds"]
sys.exit(0 if r["peers"] == 24 and qps[1] - qps[0] == 24 and fds[1] - fds[0] <= 2 else 1)'; then
	pass "vrma_bench --hub 24 (peers in two processes)"
else
	fail "vrma_bench --hub 24 (peers in two processes)"
	cat /tmp/bench.out /tmp/peers0.out /tmp/peers1.out /tmp/peers.json 2>/dev/null
	kill $p0 $p1 2>/dev/null || true
fi

# Upstream suites device.sh built on the host: run and judged by their
# util/ script, or the one line saying why they were skipped.
# upstream NAME BUILT SKIPPED COMMAND...
upstream() {
	name=$1 built=$2 skipped=$3
	shift 3
	if [ -n "$built" ]; then
		if "$@"; then pass "$name"; else fail "$name"; fi
	elif [ -n "$skipped" ]; then
		echo "$skipped"
	fi
}
util=${VRMA_SRCDIR:-$builddir/..}/util

# 5. fabtests (unit, functional, short) against -p vrma, judged by
# test/fabtests/vrma.list.
upstream "fabtests against -p vrma (test/fabtests/vrma.list)" "${VRMA_FABTESTS_BIN:-}" \
	"${VRMA_FABTESTS_SKIPPED:-}" "$util/vrma-fabtests" run --out "$builddir/test/fabtests-run"

# 5b. fabtests 2.6 (unit, functional, short, threaded) under libfabric 2.6's
# own core against -p vrma, judged by test/fabtests/vrma-2.6.list.
upstream "fabtests 2.6 under the 2.6 core against -p vrma (test/fabtests/vrma-2.6.list)" \
	"${VRMA_FABTESTS26_BIN:-}" "${VRMA_CORE26_SKIPPED:-}" \
	"$util/vrma-fabtests" run --core 2.6 --out "$builddir/test/fabtests26-run"

# 6. Memory: fi_rdm_atomic registers a result and a compare buffer as large
# as its message buffers (1 GiB each here) and touches a few bytes of
# them. vrma registers such mostly untouched regions on demand
# (FI_VRMA_MR_ON_DEMAND), so its peak resident memory stays within 1.25x
# that of the sockets provider, which pins nothing (before: 3x, the whole
# buffers pinned). Both in this boot, data checked by the test itself.
# Debian's python3 itself: a wrapper first in PATH (pyenv's shims) costs
# seconds per start in the guest.
py=/usr/bin/python3
[ -x "$py" ] || py=python3
peak_rss() { # output file, command...: runs it, writes its peak RSS in KiB
	"$py" -c 'import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
open(sys.argv[1], "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$@"
}
if [ -n "${VRMA_FABTESTS_BIN:-}" ]; then
	rss_ok=1
	for p in vrma sockets; do
		cmd="$VRMA_FABTESTS_BIN/fi_rdm_atomic -p $p -o sum -z int64 -I 5"
		peak_rss "/tmp/rss.s.$p" timeout 300 $cmd -B 47595 >"/tmp/rss.out.s.$p" 2>&1 &
		server=$!
		sleep 2
		if ! peak_rss "/tmp/rss.c.$p" timeout 300 $cmd -P 47595 "$addr" >"/tmp/rss.out.c.$p" 2>&1 ||
			! wait "$server"; then
			rss_ok=0
			kill "$server" 2>/dev/null
			cat "/tmp/rss.out.s.$p" "/tmp/rss.out.c.$p"
		fi
	done
	v=$(cat /tmp/rss.s.vrma /tmp/rss.c.vrma | sort -n | tail -1)
	s=$(cat /tmp/rss.s.sockets /tmp/rss.c.sockets | sort -n | tail -1)
	echo "fi_rdm_atomic peak RSS: vrma $v KiB, sockets $s KiB"
	if [ "$rss_ok" = 1 ] && [ -n "$v" ] && [ -n "$s" ] && [ $((v * 4)) -le $((s * 5)) ]; then
		pass "fi_rdm_atomic over vrma within 1.25x the sockets provider's peak RSS"
	else
		fail "fi_rdm_atomic over vrma within 1.25x the sockets provider's peak RSS"
	fi
fi

# 7. tests-sos, Sandia OpenSHMEM 1.5.3's own make check, over vrma's RDM
# endpoint (SHMEM_OFI_PROVIDER=vrma), judged by test/sos/vrma.list: the
# selection that fits CI's time (util/vrma-sos --set ci: the default and
# basic key modes; the whole suite is util/vrma-sos, about an hour).
upstream "tests-sos over vrma (test/sos/vrma.list)" "${VRMA_SOS_DIR:-}" "${VRMA_SOS_SKIPPED:-}" \
	"$util/vrma-sos" run --set ci --out "$builddir/test/sos-run"

# 8. The project's MPI program over the native RDM endpoint (Open MPI's
# pml cm / mtl ofi), 2 and 4 ranks; device.sh built it on the host.
mpi_test=$builddir/test/mpi/vrma_mpi_test
if [ -x "$mpi_test" ]; then
	for np in 2 4; do
		if timeout 600 "${VRMA_SRCDIR:-$builddir/..}/test/mpi/run-mpi.sh" "$mpi_test" vrma -np "$np" \
			>"/tmp/mpi.$np" 2>&1; then
			pass "Open MPI over vrma RDM, $np ranks"
			tail -2 "/tmp/mpi.$np"
		else
			fail "Open MPI over vrma RDM, $np ranks"
			cat "/tmp/mpi.$np"
		fi
	done
	# MPI one-sided (osc/rdma over btl/ofi on vrma's RMA and atomics), one
	# rank per node (run-mpi.sh), MPI_Compare_and_swap included (-c).
	for np in 2 4; do
		if timeout 600 "${VRMA_SRCDIR:-$builddir/..}/test/mpi/run-mpi.sh" "$builddir/test/mpi/vrma_mpi_osc" \
			vrma-osc -np "$np" -- -c >"/tmp/mpi-osc.$np" 2>&1; then
			pass "Open MPI one-sided (osc rdma, btl ofi) over vrma RDM, $np ranks"
			tail -1 "/tmp/mpi-osc.$np"
		else
			fail "Open MPI one-sided (osc rdma, btl ofi) over vrma RDM, $np ranks"
			cat "/tmp/mpi-osc.$np"
		fi
	done
	# The 8-byte MPI ping-pong: data checked, the time printed for reading
	# (comparing transports: DEVELOPERS.md, "Open MPI latency").
	if timeout 300 "${VRMA_SRCDIR:-$builddir/..}/test/mpi/run-mpi.sh" "$builddir/test/mpi/vrma_mpi_latency" \
		vrma -np 2 -- 8 >/tmp/mpi.lat 2>&1; then
		pass "Open MPI 8-byte ping-pong over vrma RDM"
		grep bytes /tmp/mpi.lat
	else
		fail "Open MPI 8-byte ping-pong over vrma RDM"
		cat /tmp/mpi.lat
	fi
else
	echo "mpi: skipped (no mpicc on the host when device.sh ran)"
fi

# 8b. Open MPI (two-sided and one-sided) and OpenSHMEM once more, under
# libfabric 2.6's core: both link libfabric.so.1, so LD_LIBRARY_PATH
# switches the core under them; vrma's start-up line (FI_LOG_LEVEL=info,
# its core subsystem only) must name that core in every run.
# core26 NAME LOG LOGS COMMAND...: LOGS, a file or directory, holds the
# processes' standard error.
core26() {
	name=$1 log=$2 logs=$3
	shift 3
	if LD_LIBRARY_PATH="$VRMA_CORE26/lib" FI_LOG_LEVEL=info FI_LOG_PROV=vrma FI_LOG_SUBSYS=core \
		timeout 900 "$@" >"$log" 2>&1 &&
		grep -rq "libfabric core 2\.6: declaring API 2\.6" "$logs"; then
		pass "$name under the libfabric 2.6 core"
	else
		fail "$name under the libfabric 2.6 core"
		grep -v "libfabric core" "$log" | tail -40
	fi
}
if [ -n "${VRMA_CORE26:-}" ] && [ -x "$mpi_test" ]; then
	mpi_run=${VRMA_SRCDIR:-$builddir/..}/test/mpi/run-mpi.sh
	core26 "Open MPI over vrma RDM, 2 ranks," /tmp/mpi26 /tmp/mpi26 "$mpi_run" "$mpi_test" vrma -np 2
	core26 "Open MPI one-sided (osc rdma, btl ofi) over vrma RDM, 2 ranks," /tmp/mpi-osc26 /tmp/mpi-osc26 \
		"$mpi_run" "$builddir/test/mpi/vrma_mpi_osc" vrma-osc -np 2 -- -c
	if [ -n "${VRMA_SOS_DIR:-}" ]; then
		# One test per kind of call: start-up, RMA, atomics, locks,
		# collectives (the whole ci set runs under the 1.17 core above).
		core26 "tests-sos (hello, rma_coverage, atomic_inc, cswap, test_lock, barrier)" /tmp/sos26 \
			"$builddir/test/sos26-run/logs" "$util/vrma-sos" run --set ci --builds default \
			--tests '^default [a-z_-]+/(hello|rma_coverage|atomic_inc|cswap|test_lock|barrier) -n 2$' \
			--out "$builddir/test/sos26-run"
	fi
fi

# 9. The device suites left from section 1, each against its sanitized
# provider (the plain test/device_tests with the sanitizer's runtime
# preloaded: the provider's accesses are checked, the harness's are not),
# once device.sh's background build says it is done (at most 40 minutes
# from here). halt_on_error: the first report ends the test that provoked
# it, and check counts it failed.
# sanitized NAME DIR PRELOAD SUITES VAR=VALUE...: SUITES is a list of
# suites, or one SUITE:CASE.
sanitized() {
	name=$1 dir=$2 preload=$3 suites=$4
	shift 4
	case $suites in
	*:*) set -- CK_RUN_CASE="${suites#*:}" "$@" ;;
	esac
	t0=$(date +%s)
	ck=$builddir/test/ck-$(echo "$name-$suites" | tr -c 'A-Za-z0-9_\n-' _).xml
	if env LD_PRELOAD="$preload" FI_PROVIDER_PATH="$dir/.libs" "$@" CK_XML_LOG_FILE_NAME="$ck" \
		VRMA_TEST_SUITES="${suites%%:*}" "$builddir/test/device_tests"; then
		pass "device_tests ($suites) against the $name provider ($(secs))"
	else
		fail "device_tests ($suites) against the $name provider"
	fi
	ck_slowest "$ck"
}
if [ -n "${VRMA_SAN_STATUS:-}" ]; then
	t0=$(date +%s)
	while [ ! -e "$VRMA_SAN_STATUS" ] && [ $(($(date +%s) - t0)) -lt 2400 ]; do
		sleep 5
	done
	st=$(cat "$VRMA_SAN_STATUS" 2>/dev/null) || st="the sanitizer builds did not end within 40 minutes"
	if [ "$st" = ok ]; then
		echo "sanitizer builds: waited $(secs) for them"
		# One device_tests per suite: each suite's time is printed (a
		# long-lived parent is suspected of slowing the forks: 684 s in
		# one process against 545 s one by one, in two boots).
		# hostile_fuzz sends 4000 mutated messages here (its default,
		# 10000, takes 200 s under ASan: nine in ten cost a connection);
		# the unit suite mutates 200,000 against the decoders alone.
		for s in $asan_suites; do
			sanitized ASan+UBSan "$VRMA_SAN_ADDRESS" "$VRMA_SAN_ADDRESS_PRELOAD" "$s" \
				ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
				VRMA_TEST_FUZZ="${VRMA_TEST_FUZZ:-4000}"
		done
		for s in "$tsan_suites" $tsan_cases; do
			sanitized TSan "$VRMA_SAN_THREAD" "$VRMA_SAN_THREAD_PRELOAD" "$s" \
				TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
		done
	else
		fail "device_tests against the sanitized providers: $st"
	fi
fi

echo "tools: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
