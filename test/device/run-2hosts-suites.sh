# shellcheck shell=sh disable=SC2154 # pass, fail, peer, builddir, srcdir: run-2hosts.sh's
# The upstream suites across the two hosts, sourced by run-2hosts.sh (its
# pass, fail, on_peer, link, peer, builddir and srcdir): fabtests 1.17
# client/server pairs (server on vrma-vm2, client here), Open MPI 4.1.4
# with ranks on both hosts (2 ranks: one a host; 4: two a host) through
# test/mpi/run-mpi.sh, tests-sos (SOS 1.5.3) with PEs on both hosts: the
# most on a clean link, then a few under each fault of the link (netem on
# both hosts' egress: loss 1 %, loss 5 %, delay with reordering), each
# test's data checked (fabtests -v where the test has it, the MPI and SOS
# programs always).
#
# Environment: VRMA_FABTESTS_BIN, VRMA_SOS_DIR (device.sh: what
# util/vrma-fabtests and util/vrma-sos built; unset, that suite is
# skipped); VRMA_TWO_HOST_SUITES=full: every test under every condition,
# with longer limits (about 30 minutes more: raise VRMA_VM_TIMEOUT_2HOSTS,
# device.sh's limit of the boot), =skip: none.
# Output: PASS:/FAIL: per test with its condition and time, the logs' ends
# of a failure, and one line per block: "two-host suites: BLOCK took N s".

s2_mode=${VRMA_TWO_HOST_SUITES:-ci}
s2_dir=/tmp/suites2
mkdir -p "$s2_dir"
s2_ft_bin=${VRMA_FABTESTS_BIN:-}
s2_sos=${VRMA_SOS_DIR:-}
s2_mpi_run=$srcdir/test/mpi/run-mpi.sh
s2_cond="clean link"
s2_port=47700
s2_t0=0
s2_total0=$(date +%s)

# ssh to vrma-vm2 through one connection (OpenSSH's multiplexing): under
# TCG a new ssh session's key exchange costs seconds, and every fabtests
# server, every mpirun and every `link` starts one. Undone at the end.
s2_ssh_on() {
	s2_sshcfg=$HOME/.ssh/config
	cp "$s2_sshcfg" "$s2_dir/ssh-config.saved" &&
		printf 'Host %s\n\tControlMaster auto\n\tControlPath %s/ssh-%%C\n\tControlPersist 1200\n' \
			"$peer" "$s2_dir" >>"$s2_sshcfg"
}
s2_ssh_off() {
	ssh -O exit "$peer" 2>/dev/null
	cp "$s2_dir/ssh-config.saved" "$s2_sshcfg"
}

s2_begin() { s2_t0=$(date +%s); }
s2_end() { echo "two-host suites: $1 took $(($(date +%s) - s2_t0)) s"; }

# s2_tail FILE...: the end of each log of a failed test.
s2_tail() {
	for f in "$@"; do
		echo "---- $f (last 25 lines)"
		tail -n 25 "$f" 2>/dev/null
	done
}

# s2_ft TIMEOUT PROGRAM ARGS...: one fabtests client/server pair as
# runfabtests.sh runs it (server -s SERVER, client -s CLIENT SERVER), the
# server on vrma-vm2 and the client here, on a port of its own (-B, -P):
# the client starts once the server's rdma_cm id listens (one ssh session
# starts the server, reports "#ready" and at the end "#exit STATUS").
s2_prov=vrma
s2_ft() {
	t=$1
	shift
	s2_port=$((s2_port + 1))
	name="fabtests $* -p $s2_prov across the hosts ($s2_cond)"
	slog=$s2_dir/ft-$s2_port.server clog=$s2_dir/ft-$s2_port.client
	prog=$s2_ft_bin/$1
	shift
	ts=$(date +%s)
	on_peer "timeout $t $prog $* -p $s2_prov -s $peer -B $s2_port 2>&1 & p=\$!; echo \"#pid \$p\"; i=0;
		while [ \$i -lt 300 ] && kill -0 \$p 2>/dev/null &&
			! rdma resource show cm_id 2>/dev/null | grep -q 'LISTEN.* src-addr $peer:$s2_port '; do
			i=\$((i + 1)); sleep 0.1; done;
		echo '#ready'; wait \$p; echo \"#exit \$?\"" >"$slog" 2>&1 &
	spid=$!
	i=0
	while [ $i -lt 600 ] && ! grep -q '^#ready' "$slog" 2>/dev/null; do
		i=$((i + 1))
		sleep 0.1
	done
	crc=0
	timeout "$t" "$prog" "$@" -p "$s2_prov" -s 10.98.0.1 -P "$s2_port" "$peer" >"$clog" 2>&1 || crc=$?
	if [ $crc -ne 0 ]; then
		# runfabtests' grace for the server, then its end.
		sleep 2
		spid_peer=$(sed -n 's/^#pid //p' "$slog")
		[ -z "$spid_peer" ] || on_peer "kill $spid_peer 2>/dev/null" >/dev/null 2>&1
	fi
	wait "$spid"
	src=$(sed -n 's/^#exit //p' "$slog")
	if [ $crc -eq 0 ] && [ "$src" = 0 ]; then
		pass "$name, $(($(date +%s) - ts)) s"
	else
		fail "$name (client exit $crc, server exit ${src:-none}), $(($(date +%s) - ts)) s"
		s2_tail "$slog" "$clog"
	fi
}

# s2_mpi NP TIMEOUT PROGRAM MODE [ARGS...]: run-mpi.sh with ranks on both
# hosts: 2 ranks one a host, 4 two a host (mode vrma: --host; vrma-osc: its
# nodes n1..nN, those past the first half started on vrma-vm2 by
# node-agent.sh over ssh, each in its own UTS namespace there).
s2_mpi() {
	np=$1 t=$2 prog=$3 mode=$4
	shift 4
	name="Open MPI ${prog##*/} $* ($mode) $np ranks across the hosts ($s2_cond)"
	log=$s2_dir/mpi-${prog##*/}-$mode-$np.log
	half=$((np / 2))
	hosts="10.98.0.1:$half,$peer:$half"
	remote=""
	if [ "$mode" = vrma-osc ]; then
		hosts=""
		i=$((half + 1))
		while [ $i -le "$np" ]; do
			remote="$remote n$i=$peer"
			i=$((i + 1))
		done
	fi
	ts=$(date +%s)
	if VRMA_NODE_AGENT_SSH=$remote RUN_MPI_ARGS="${hosts:+--host $hosts} --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0" \
		timeout "$t" "$s2_mpi_run" "$prog" "$mode" -np "$np" -- "$@" >"$log" 2>&1; then
		pass "$name, $(($(date +%s) - ts)) s"
		grep -E 'bytes|passed' "$log" | tail -n 2
	else
		fail "$name, $(($(date +%s) - ts)) s"
		s2_tail "$log"
	fi
}

# s2_sos NP TIMEOUT BUILD TEST [ARGS...]: one tests-sos test of an SOS
# build, its PEs on both hosts (oshrun is Open MPI's mpirun here: MPI
# only starts them and exchanges addresses, over tcp).
s2_sos() {
	np=$1 t=$2 b=$3 tst=$4
	shift 4
	name="tests-sos $b unit/$tst${*:+ $*} -n $np across the hosts ($s2_cond)"
	log=$s2_dir/sos-$b-$tst-$np.log
	d=$s2_sos/$b/modules/tests-sos/test/unit
	half=$((np / 2))
	# shellcheck disable=SC2016 # the wrapper's literal $LD_LIBRARY_PATH
	lib=$(sed -n 's/^ *LD_LIBRARY_PATH="\(.*\):\$LD_LIBRARY_PATH"$/\1/p' "$d/$tst" | head -n 1)
	ts=$(date +%s)
	if (cd "$d" && LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout -k 10 "$t" \
		"$s2_sos/$b/src/oshrun" -n "$np" --host "10.98.0.1:$half,$peer:$half" \
		--mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0 \
		-x LD_LIBRARY_PATH -x FI_PROVIDER_PATH -x SHMEM_OFI_PROVIDER -x SHMEM_SYMMETRIC_SIZE -x FI_LOG_LEVEL \
		"./.libs/$tst" "$@") >"$log" 2>&1; then
		pass "$name, $(($(date +%s) - ts)) s"
	else
		fail "$name, $(($(date +%s) - ts)) s"
		s2_tail "$log"
	fi
}

# The sets, per condition of the link (KIND: clean, loss1, loss5,
# reorder, reorder25): on a clean link the most, under each fault a few, the MPI and
# SOS programs taken in turn (VRMA_TWO_HOST_SUITES=full: every test under
# every condition, with longer limits).
#
# fabtests: tests of its functional and short sets (runfabtests.sh's
# command lines, -v where the test checks its data with it), sizes bounded
# (-S r:1000,32000,65000: eager and rendezvous): the default sweeps go on to
# 1 MiB, whose READ bursts the emulated link drops in part (about 7 s a
# 1 MiB round trip, DEVELOPERS.md), past the 60 s a test gets. Under 5 %
# loss and under reordering (delay 0.5ms reorder 5 %) a lost packet at the
# end of a burst costs rxe an ACK timeout (vrma's 0.54 s), every packet
# out of order a go-back-N retransmission: those tests get 90 s (the
# slowest, MSG's ping-pong, took 58 s under loss, 60 s under reordering).
# Reordering a quarter of the packets (the full set only), sizes stop at
# 16000: MSG RMA writes of 32000 bytes did not finish 5 iterations of
# fi_rma_bw in 90 s.
s2_full() { [ "$s2_mode" = full ] || [ "$1" = clean ]; }
s2_fabtests() { # KIND
	[ -n "$s2_ft_bin" ] || return 0
	s2_begin
	sz=r:1000,32000,65000 t=60
	case $1 in
	loss5 | reorder) t=90 ;;
	reorder25) sz=r:1000,15000,16000 t=120 ;;
	esac
	if s2_full "$1"; then
		s2_ft "$t" fi_msg
		s2_ft "$t" fi_rdm_rma_event
		s2_ft "$t" fi_rdm_pingpong -I 5 -v -S "$sz"
		s2_ft "$t" fi_rma_bw -e msg -o write -I 5 -S "$sz"
		s2_ft $((t * 2)) fi_rdm_atomic -I 5 -o all -S 1024
	fi
	if [ "$s2_mode" = full ]; then
		s2_ft "$t" fi_rdm
		s2_ft "$t" fi_rdm -U
		s2_ft "$t" fi_rdm_tagged_peek
		s2_ft "$t" fi_cq_data -e rdm
		s2_ft "$t" fi_rdm_tagged_pingpong -I 5 -v -U -S "$sz"
		s2_ft "$t" fi_msg_bw -I 5 -v -S "$sz"
		s2_ft "$t" fi_rma_bw -e rdm -o writedata -I 5 -S "$sz"
		s2_ft "$t" fi_rdm_cntr_pingpong -I 5 -S "$sz"
		s2_ft "$t" fi_rdm_atomic -I 5 -o sum -S 1024
	fi
	# Under 5 % loss MSG's ping-pong is the slowest (46 s of 89).
	if [ "$1" != loss5 ] || [ "$s2_mode" = full ]; then
		s2_ft "$t" fi_msg_pingpong -I 5 -v -S "$sz"
	fi
	s2_ft "$t" fi_rdm_tagged_bw -I 5 -v -S "$sz"
	s2_ft "$t" fi_rma_bw -e rdm -o read -I 5 -S "$sz"
	s2_end "fabtests ($s2_cond)"
}

# Open MPI: vrma_mpi_test's size sweeps and big messages capped at 64 KiB
# (-s; its default 16 MiB would cross the link for minutes; under 5 % loss
# 2.4 MB of it took 170 s), vrma_mpi_osc with compare-and-swap (-c).
# vrma_mpi_latency: 2000 round trips 9 times (about 40 s of them on a
# clean link): run-2hosts.sh runs it on a clean link, here only the full
# set.
s2_mpi_set() { # KIND
	[ -x "$builddir/test/mpi/vrma_mpi_test" ] || return 0
	s2_begin
	test=$builddir/test/mpi/vrma_mpi_test osc=$builddir/test/mpi/vrma_mpi_osc
	if [ "$s2_mode" = full ]; then
		for np in 2 4; do
			s2_mpi "$np" 600 "$test" vrma -s 65536
			s2_mpi "$np" 600 "$osc" vrma-osc -c
		done
		s2_mpi 2 300 "$builddir/test/mpi/vrma_mpi_latency" vrma 8
	else
		case $1 in
		clean)
			for np in 2 4; do
				s2_mpi "$np" 240 "$test" vrma -s 65536
				s2_mpi "$np" 240 "$osc" vrma-osc -c
			done
			;;
		loss1) s2_mpi 2 240 "$test" vrma -s 65536 ;;
		loss5) s2_mpi 2 240 "$osc" vrma-osc -c ;;
		reorder) s2_mpi 4 240 "$test" vrma -s 65536 ;;
		esac
	fi
	s2_end "Open MPI ($s2_cond)"
}

# tests-sos: RMA (rma_coverage: every put, get, nbi, strided and iput/iget
# call), atomics (atomic_inc: fetch-add on one word from every PE), locks
# (set_lock: compare-and-swap and fetch-add), collectives (barrier),
# signals (put_signal), and the basic build's provider keys.
s2_sos_set() { # KIND
	[ -n "$s2_sos" ] || return 0
	# 5 % loss: 54 s for atomic_inc -n 4, rma_coverage -n 2 past 60 s; the
	# one-sided MPI test has RMA and atomics there. The full set only.
	[ "$1" != loss5 ] || [ "$s2_mode" = full ] || return 0
	s2_begin
	export SHMEM_OFI_PROVIDER=vrma SHMEM_SYMMETRIC_SIZE=64M FI_LOG_LEVEL=warn
	# vrma_mpi_launcher's settings (util/vrma-lib.sh), tcp added: MPI
	# starts the PEs and exchanges their addresses.
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 \
		OMPI_MCA_btl=self,vader,tcp OMPI_MCA_mtl=^ofi OMPI_MCA_coll=basic,libnbc,self OMPI_MCA_osc=pt2pt \
		HWLOC_PLUGINS_BLACKLIST=hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_xml_libxml,hwloc_cuda,hwloc_nvml,hwloc_rsmi,hwloc_levelzero
	# Under 1 % loss rma_coverage took 50 s (21 on a clean link).
	t=120
	[ "$1" != loss5 ] || t=180
	if s2_full "$1"; then
		s2_sos 2 "$t" default rma_coverage
		s2_sos 4 "$t" default atomic_inc
		s2_sos 4 "$t" basic cswap
		if [ "$s2_mode" = full ]; then
			s2_sos 4 "$t" default barrier
			s2_sos 4 "$t" default set_lock
			s2_sos 2 "$t" default put_signal
			s2_sos 2 "$t" basic rma_coverage
		fi
	else
		case $1 in
		loss1) s2_sos 2 "$t" default rma_coverage ;;
		reorder) s2_sos 4 "$t" default set_lock ;;
		esac
	fi
	unset SHMEM_OFI_PROVIDER SHMEM_SYMMETRIC_SIZE FI_LOG_LEVEL OMPI_MCA_pml OMPI_MCA_btl OMPI_MCA_mtl \
		OMPI_MCA_coll OMPI_MCA_osc HWLOC_PLUGINS_BLACKLIST
	s2_end "tests-sos ($s2_cond)"
}

# s2_block CONDITION KIND [NETEM...]: the sets under one condition of the
# link (netem on both hosts' egress), then the link cleared.
s2_block() {
	s2_cond=$1 kind=$2
	shift 2
	if [ $# -gt 0 ] && ! link "$@"; then
		fail "netem $* on both hosts"
		link clear
		return
	fi
	s2_fabtests "$kind"
	s2_mpi_set "$kind"
	s2_sos_set "$kind"
	[ $# -eq 0 ] || link clear
}

if [ "$s2_mode" = skip ]; then
	echo "two-host suites: skipped (VRMA_TWO_HOST_SUITES=skip)"
else
	[ -n "$s2_ft_bin" ] || echo "two-host suites: fabtests skipped (no VRMA_FABTESTS_BIN${VRMA_FABTESTS_SKIPPED:+: $VRMA_FABTESTS_SKIPPED})"
	[ -n "$s2_sos" ] || echo "two-host suites: tests-sos skipped (no VRMA_SOS_DIR${VRMA_SOS_SKIPPED:+: $VRMA_SOS_SKIPPED})"
	s2_ssh_on
	s2_block "clean link" clean
	s2_block "loss 1%" loss1 loss 1%
	s2_block "loss 5%" loss5 loss 5%
	s2_block "delay 0.5ms reorder 5%" reorder delay 0.5ms reorder 5%
	# Reordering a quarter of the packets: go-back-N retransmissions
	# (see REORDER below); the full set only.
	[ "$s2_mode" != full ] || s2_block "delay 0.5ms 0.2ms reorder 25%" reorder25 delay 0.5ms 0.2ms reorder 25%
	s2_ssh_off
	echo "two-host suites: all took $(($(date +%s) - s2_total0)) s"
fi
