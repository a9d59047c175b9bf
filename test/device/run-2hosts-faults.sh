# The two-host faults, sourced by run-2hosts.sh (its pass, fail, on_peer,
# peer, builddir): test/fault_traffic keeps checked tagged sends (4 KiB
# eager, 64 KiB rendezvous) in flight over vrma's RDM endpoint while
#   1. the link is cut for 2 s: RC's retries cover it, nothing fails, every
#      message arrives once;
#   2. the link is cut for longer than the budget (FI_VRMA_RDM_DRAIN_TIMEOUT,
#      here 4 s): every send to that peer ends with one error completion,
#      the sender goes on with its peer on its own host, and once the link
#      is back it connects again to the same (still running) server;
#   3. vrma-vm2 is killed (its qemu): the same with the retry budget
#      alone (FI_VRMA_RETRY_COUNT=3: 4 x 0.54 s; the drain watch off, the
#      probe still on), and after it boots again
#      a restarted server on the same address takes new messages; while it
#      is down, a new process's first send to it (a new connection, which
#      rdma_cm alone would try for about 100 s) is refused with
#      -FI_ETIMEDOUT within FI_VRMA_RDM_CONNECT_TIMEOUT (here 3 s);
#   4. (before 3) the last word: a process on vrma-vm2 closes its endpoint
#      as soon as a message arrived while its host's acknowledgments are
#      dropped: the sender's send still completes successfully (the
#      closing side's Close counted the message).
# Each prints when the first error came and when the last send to the lost
# peer ended, counted from the fault.
# Environment: VRMA_FAULT_DRAIN_MS (the budget, default 4000),
# VRMA_FAULT_CASES (which of "flap cut lastword dead" to run; default all).

ft=$builddir/test/fault_traffic
fdir=$builddir/test/faults
rm -rf "$fdir"
mkdir -p "$fdir"
budget=${VRMA_FAULT_DRAIN_MS:-4000}
etimedout=110 # FI_ETIMEDOUT, as fault_traffic prints a refused send's code
here=10.98.0.1

# serve_remote NAME PORT [VAR=VALUE...]: a server on vrma-vm2 at PORT
# (with those variables set, and $srv_opts); its address is
# fetched over ssh (both hosts share the build tree over 9p, whose caching
# does not promise that one guest sees the other's new file at once).
serve_remote() {
	name=$1
	port=$2
	shift 2
	on_peer "$* sh -c 'rm -f /tmp/ft-$name.addr; exec timeout 150 $ft serve --seconds 120 --addr-file /tmp/ft-$name.addr --node $peer --port $port $srv_opts'" \
		>"$fdir/$name.log" 2>&1 &
	eval "srv_$name=\$!"
}
# fetch NAME: copies vrma-vm2's /tmp/ft-NAME.addr to $fdir/NAME.addr (60 s,
# while the server runs).
fetch() {
	i=0
	eval "pid=\$srv_$1"
	while [ $i -lt 120 ] && kill -0 "$pid" 2>/dev/null; do
		if ssh -o ConnectTimeout=2 "$peer" "cat /tmp/ft-$1.addr" >"$fdir/$1.tmp" 2>/dev/null && [ -s "$fdir/$1.tmp" ]; then
			mv "$fdir/$1.tmp" "$fdir/$1.addr"
			return 0
		fi
		i=$((i + 1))
		sleep 0.5
	done
	return 1
}
serve_local() {
	timeout 150 "$ft" serve --seconds 120 --addr-file "$fdir/$1.addr" --node $here --port "$2" $srv_opts >"$fdir/$1.log" 2>&1 &
	eval "srv_$1=\$!"
}
# arm_cut SECONDS, then cut SECONDS: no packet crosses the link, either
# way, for SECONDS (netem loss 100% on both egresses). vrma-vm2 cuts and
# restores its own side by itself, armed before the traffic (ssh cannot
# reach it during the cut, and a session's start costs a 1-vCPU guest
# seconds of CPU): it waits for $fdir/cut-go, which both hosts see at once
# (the build tree is shared uncached). The fault's time goes to
# $fdir/fault.
arm_cut() {
	rm -f "$fdir/cut-go"
	ssh "$peer" "nohup sh -c 'while [ ! -e $fdir/cut-go ]; do sleep 0.1; done; tc qdisc replace dev eth0 root netem loss 100%; sleep $1; tc qdisc del dev eth0 root' >/dev/null 2>&1 </dev/null &"
}
cut() {
	touch "$fdir/cut-go"
	tc qdisc replace dev eth0 root netem loss 100%
	date +%s.%N >"$fdir/fault"
	echo "faults: cut at $(cat "$fdir/fault") for $1 s"
	(
		sleep "$1"
		tc qdisc del dev eth0 root
	) &
}
# started: waits (60 s at most) until the sender has completed a send to
# each of its targets, then 2 s more: the fault comes during traffic.
started() {
	i=0
	while [ ! -s "$fdir/ready" ] && [ $i -lt 120 ] && kill -0 "$sender" 2>/dev/null; do
		i=$((i + 1))
		sleep 0.5
	done
	sleep 2
}
# verdict NAME: the send's and the named servers' exit statuses.
verdict() {
	name=$1
	shift
	ok=1
	wait "$sender" || ok=0
	for s in "$@"; do
		eval "pid=\$srv_$s"
		wait "$pid" || ok=0
	done
	if [ $ok = 1 ]; then
		pass "$name"
		grep -h "^send: target" "$fdir/send.log"
		for s in "$@"; do grep -h "^serve:" "$fdir/$s.log"; done
	else
		fail "$name"
		for f in "$fdir"/*.log; do
			echo "--- $f"
			tail -20 "$f"
		done
	fi
}

# A server whose connection fails while it reads a message's data ends that
# receive with an error (the sender's send fails too): tolerated (counted)
# where a connection is meant to fail (cut and dead), not in flap.
srv_opts=""
# The servers' ports, after run-2hosts-suites.sh's fabtests ports.
base_port=47900

# 1. A 2 s cut during traffic.
case_flap() {
	serve_remote A $base_port
	if ! fetch A; then
		fail "faults: a 2 s link cut (the server on $peer did not start)"
		cat "$fdir/A.log"
		return
	fi
	arm_cut 2
	"$ft" send --to "$fdir/A.addr" --seconds 10 --ready-file "$fdir/ready" --trace 1 >"$fdir/send.log" 2>&1 &
	sender=$!
	started
	cut 2
	verdict "faults: a 2 s link cut during traffic: no error, every message once" A
}

# 2. A cut longer than the budget; the same server afterwards. The server
# has the same budget (a job's processes share their settings): until its
# own watch has failed its end of the old connection (its probe of it
# unanswered), it turns the sender's new connection away as an impostor's.
case_cut() {
	serve_remote B $((base_port + 1)) FI_VRMA_RDM_DRAIN_TIMEOUT=$budget
	serve_local L1 $((base_port + 2))
	if ! fetch B; then
		fail "faults: a 10 s cut (the server on $peer did not start)"
		cat "$fdir/B.log"
		return
	fi
	arm_cut 10
	FI_VRMA_RDM_DRAIN_TIMEOUT=$budget "$ft" send --to "$fdir/B.addr,$fdir/L1.addr" --seconds 16 --ready-file "$fdir/ready" --trace 1 \
		--must-fail 0 --fault-file "$fdir/fault" --fail-within $((budget + 4000)) \
		--reconnect "0=$fdir/B.addr" >"$fdir/send.log" 2>&1 &
	sender=$!
	started
	cut 10
	verdict "faults: a 10 s cut (budget $budget ms): errors to that peer only, in time; the same server again afterwards" B L1
}

# 4. The last word: the asker on vrma-vm2 closes its endpoint as soon as
# the answer arrived, while vrma-vm2's egress drops its device's
# acknowledgments (RoCE's opcode 0x11, the byte after the UDP header, sent
# to a band of its own with netem loss 100%): the answerer's device never
# hears that the answer arrived, and the disconnect flushes its send; the
# asker's Close, counting the answer, makes that flush a success. Without
# the Close the send ends FI_ECANCELED.
case_lastword() {
	name="faults: a peer that closes at once, its acknowledgment lost: the sender's send completes successfully"
	rm -f "$fdir/W.addr"
	timeout 90 "$ft" answer --addr-file "$fdir/W.addr" --seconds 60 >"$fdir/answer.log" 2>&1 &
	answerer=$!
	if ! ssh "$peer" "tc qdisc replace dev eth0 root handle 1: prio bands 4 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 &&
		tc qdisc add dev eth0 parent 1:4 handle 40: netem loss 100% &&
		tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff \
			match ip dport 4791 0xffff match u8 0x11 0xff at 28 flowid 1:4" >"$fdir/ask.log" 2>&1; then
		fail "$name (tc on $peer)"
		cat "$fdir/ask.log"
		kill "$answerer" 2>/dev/null
		ssh "$peer" "tc qdisc del dev eth0 root 2>/dev/null"
		return
	fi
	ask_rc=0
	on_peer "timeout 90 $ft ask --to $fdir/W.addr" >>"$fdir/ask.log" 2>&1 || ask_rc=$?
	answer_rc=0
	wait "$answerer" || answer_rc=$?
	dropped=$(ssh "$peer" "tc -s qdisc show dev eth0 parent 1:4" | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | head -1)
	ssh "$peer" "tc qdisc del dev eth0 root"
	if [ "$ask_rc" = 0 ] && [ "$answer_rc" = 0 ] && [ "${dropped:-0}" -gt 0 ]; then
		pass "$name"
		echo "faults: acknowledgments dropped on $peer: $dropped"
		cat "$fdir/answer.log"
	else
		fail "$name (ask exit $ask_rc, answer exit $answer_rc, acknowledgments dropped: ${dropped:-none})"
		cat "$fdir/ask.log" "$fdir/answer.log"
	fi
}

# 3. vrma-vm2 dies; it boots again and a restarted server takes new
# messages at the same address.
case_dead() {
	serve_remote C $((base_port + 3))
	serve_local L2 $((base_port + 4))
	if ! fetch C; then
		fail "faults: vrma-vm2 killed (the server on $peer did not start)"
		cat "$fdir/C.log"
		return
	fi
	rm -f "$fdir/C.addr.2"
	FI_VRMA_RDM_DRAIN_TIMEOUT=0 FI_VRMA_RETRY_COUNT=3 "$ft" send --to "$fdir/C.addr,$fdir/L2.addr" --seconds 10 --ready-file "$fdir/ready" --trace 1 \
		--must-fail 0 --fault-file "$fdir/fault" --fail-within 6000 \
		--reconnect "0=$fdir/C.addr.2" >"$fdir/send.log" 2>&1 &
	sender=$!
	started
	vrma-vm-peer kill
	date +%s.%N >"$fdir/fault"
	kill "$srv_C" 2>/dev/null # its ssh would wait for the dead host's TCP
	FI_VRMA_RDM_CONNECT_TIMEOUT=3000 "$ft" send --to "$fdir/C.addr" --seconds 6 --drain-seconds 1 \
		--must-fail 0 --fault-file "$fdir/fault" --fail-within 6000 >"$fdir/connect.log" 2>&1 &
	connector=$!
	sleep 8
	if wait "$connector" && grep -q "^send: fi_tsend to target 0: .*(-$etimedout)" "$fdir/connect.log"; then
		pass "faults: a new connection to the killed vrma-vm2 is given up (-FI_ETIMEDOUT) within FI_VRMA_RDM_CONNECT_TIMEOUT"
		grep -h "^send: target" "$fdir/connect.log"
	else
		fail "faults: a new connection to the killed vrma-vm2 is given up (-FI_ETIMEDOUT) within FI_VRMA_RDM_CONNECT_TIMEOUT"
		cat "$fdir/connect.log"
	fi
	vrma-vm-peer boot
	booted=$(date +%s)
	i=0
	until ssh -o ConnectTimeout=2 "$peer" true 2>/dev/null || [ $i -ge 90 ]; do
		i=$((i + 1))
		sleep 1
	done
	serve_remote C2 $((base_port + 3))
	if fetch C2; then
		mv "$fdir/C2.addr" "$fdir/C.addr.2"
		echo "faults: vrma-vm2 serving again $(($(date +%s) - booted)) s after its boot began"
	fi
	verdict "faults: vrma-vm2 killed (retry budget 4 x 0.54 s): errors to it only, in time; after its reboot a restarted server at the same address" C2 L2
}

for c in ${VRMA_FAULT_CASES:-flap cut lastword dead}; do
	case $c in
	flap | lastword) srv_opts="" ;;
	cut | dead) srv_opts="--tolerate-errors 1" ;;
	*)
		fail "faults: no case $c (VRMA_FAULT_CASES: flap cut lastword dead)"
		continue
		;;
	esac
	"case_$c"
	rm -f "$fdir"/*.log "$fdir/ready"
done
