#!/bin/sh
# The two-host tests: util/vrma-vm --hosts 2 runs this on vrma-vm1
# (10.98.0.1), which reaches vrma-vm2 (10.98.0.2) by ssh; each host has its
# own kernel and rxe0 on its own NIC, one emulated link between them. The
# servers run on vrma-vm2, the clients here: every byte crosses the link.
#
# Environment: VRMA_BUILDDIR (the build tree, shared with both hosts at the
# same path; default: .).
set -u
builddir=$(cd "${VRMA_BUILDDIR:-.}" && pwd)
srcdir=${VRMA_SRCDIR:-$builddir/..}
export FI_PROVIDER_PATH="$builddir/.libs"
peer=10.98.0.2
passed=0
failed=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }
# on_peer COMMAND: runs COMMAND (one shell string) on vrma-vm2 with this
# provider.
on_peer() { ssh "$peer" "cd $builddir && FI_PROVIDER_PATH=$FI_PROVIDER_PATH $1"; }
# wait_listener PORT: until a TCP listener on vrma-vm2 has PORT (fi_pingpong's
# control socket; a server's start takes seconds under TCG); 30 s at most.
wait_listener() {
	i=0
	while [ $i -lt 100 ]; do
		if ssh "$peer" "ss -Hltn 'sport = :$1'" | grep -q LISTEN; then
			return 0
		fi
		i=$((i + 1))
		sleep 0.3
	done
	return 1
}

# link SPEC...: the same netem discipline on both hosts' eth0 egress (so
# each direction of the link sees it), e.g. `link loss 1%`; `link clear`
# takes it away. A cut is `loss 100%` (not `ip link set eth0 down`, which is
# a local failure that rxe reports by erroring every QP on the port).
link() {
	if [ "$1" = clear ]; then
		tc qdisc del dev eth0 root 2>/dev/null
		ssh "$peer" "tc qdisc del dev eth0 root 2>/dev/null"
		return 0
	fi
	tc qdisc replace dev eth0 root netem "$@" &&
		ssh "$peer" "tc qdisc replace dev eth0 root netem $*"
}

# 1. Both hosts: their own rxe0 on their own NIC, and vrma lists it.
for h in 10.98.0.1 $peer; do
	if out=$(ssh "$h" "FI_PROVIDER_PATH=$FI_PROVIDER_PATH fi_info -p vrma -t FI_EP_RDM -v" 2>&1) &&
		printf '%s\n' "$out" | grep -q "fi_sockaddr_in://$h:"; then
		pass "fi_info -p vrma on $h lists its rxe0 ($h)"
	else
		fail "fi_info -p vrma on $h lists its rxe0 ($h)"
		printf '%s\n' "$out" | head -20
	fi
done

# 2. fi_pingpong across the link, server on vrma-vm2, data checked (-c):
# MSG 4 KiB and 1 MiB; RDM eager (4 KiB) and rendezvous (64 KiB). An RDM
# 1 MiB rendezvous is one 1 MiB RDMA READ, whose burst of responses the
# emulated link drops in part (perftest's ib_read_bw loses as much): about
# 10 s a round trip, not a test's cost.
pingpong() { # endpoint type, size, iterations, port
	name="fi_pingpong -p vrma -e $1 -S $2 across the hosts"
	on_peer "timeout 120 fi_pingpong -p vrma -e $1 -B $4 -S $2 -I $3 -c" >"/tmp/pp2-server.$4" 2>&1 &
	server=$!
	if wait_listener "$4" &&
		timeout 120 fi_pingpong -p vrma -e "$1" -P "$4" -S "$2" -I "$3" -c "$peer" >"/tmp/pp2-client.$4" 2>&1 &&
		wait "$server"; then
		pass "$name"
		tail -1 "/tmp/pp2-client.$4"
	else
		fail "$name"
		kill "$server" 2>/dev/null
		cat "/tmp/pp2-server.$4" "/tmp/pp2-client.$4"
	fi
}
pingpong msg 4096 20 47600
pingpong msg 1048576 5 47601
pingpong rdm 4096 20 47602
pingpong rdm 65536 20 47603

# 3. Open MPI across the hosts (mpirun starts vrma-vm2's rank over ssh):
# the 8-byte ping-pong, data checked, over vrma's RDM endpoint.
if [ -x "$builddir/test/mpi/vrma_mpi_latency" ]; then
	if RUN_MPI_ARGS="--host 10.98.0.1,$peer --mca oob_tcp_if_include eth0" timeout 300 \
		"$srcdir/test/mpi/run-mpi.sh" "$builddir/test/mpi/vrma_mpi_latency" vrma -np 2 -- 8 \
		>/tmp/mpi2.lat 2>&1; then
		pass "Open MPI 8-byte ping-pong over vrma RDM across the hosts"
		grep bytes /tmp/mpi2.lat
	else
		fail "Open MPI 8-byte ping-pong over vrma RDM across the hosts"
		cat /tmp/mpi2.lat
	fi
else
	echo "mpi: skipped (no mpicc on the host when device.sh ran)"
fi

# 4. fabtests, Open MPI and tests-sos across the hosts, on a clean link and
# under loss and reordering (test/device/run-2hosts-suites.sh).
. "$(dirname "$0")/run-2hosts-suites.sh"

# 5. Faults: cuts of the link and a host that dies, last (vrma-vm2 boots
# again in it).
. "$srcdir/test/device/run-2hosts-faults.sh"

echo "two hosts: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
