#!/usr/bin/env bash
# run-mpi.sh: runs the MPI test program (test/mpi/vrma_mpi_test.c, or any
# MPI program) under Open MPI's mpirun over one transport.
#
# Usage: run-mpi.sh PROGRAM MODE [-np N] [-- PROGRAM-ARGS...]
#   MODE  shm        pml ob1, btl self,vader: one host, no libfabric (checks
#                    the test program itself)
#         vrma       pml cm, mtl ofi, provider vrma (its native FI_EP_RDM)
#         rxm        pml cm, mtl ofi, provider "vrma;ofi_rxm"
#         verbs-rxm  pml cm, mtl ofi, provider "verbs;ofi_rxm" (reference)
#         vrma-osc   osc rdma over btl ofi on vrma's RDM endpoint (pml ob1,
#                    btl self,tcp,ofi): MPI one-sided on vrma RMA/atomics;
#                    each rank is its own node (node-agent.sh; root only)
#   -np N  number of ranks (default 2); ranks may outnumber cores
# Environment: FI_PROVIDER_PATH and every other FI_*, VRMA_*, RDMAV_* and
# IBV_* variable are passed to the ranks (mpirun -x); RUN_MPI_ARGS adds
# mpirun arguments (split on blanks), e.g. "--mca mtl_base_verbose 100".
# Exit status: mpirun's. When mpirun fails, the last line on stderr says
# what failed (the program's first "not ok" line when there is one).
# Standalone: needs bash, coreutils and mpirun (vrma-osc: unshare too).
set -Eeuo pipefail

prog_name=run-mpi
_cmd="" _line="" _said=0 log=""
die() {
	printf '%s: error: %s\n' "$prog_name" "$1" >&2
	_said=1
	exit "${2:-1}"
}
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
# One line for any failure the script did not explain itself.
trap '_cmd=$BASH_COMMAND _line=$LINENO' ERR
on_exit() {
	local rc=$1
	trap - ERR
	set +e
	[[ -n $log ]] && rm -f "$log"
	if ((rc != 0 && !_said)) && [[ $BASHPID == "$$" ]]; then
		# shellcheck disable=SC2016 # the backquotes are literal
		printf '%s: error: line %s: `%s` failed (exit %s)\n' "$prog_name" "$_line" "$_cmd" "$rc" >&2
	fi
	exit "$rc"
}
trap 'on_exit $?' EXIT

if (($# >= 1)) && [[ $1 == -h || $1 == --help ]]; then
	usage
	_said=1
	exit 0
fi
(($# >= 2)) || {
	usage >&2
	die "need PROGRAM and MODE" 2
}
prog=$1 mode=$2
shift 2
np=2
prog_args=()
while (($#)); do
	case $1 in
	-np | -n | --np)
		(($# >= 2)) || die "$1 needs a number" 2
		np=$2
		shift 2
		;;
	--)
		shift
		prog_args=("$@")
		break
		;;
	*) die "unknown argument: $1 (program arguments go after --)" 2 ;;
	esac
done
[[ $np =~ ^[1-9][0-9]*$ ]] || die "-np needs a positive number, not '$np'" 2
[[ -f $prog && -x $prog ]] || die "$prog: not an executable file (build it: mpicc -O2 -Wall -Wextra -Werror -o vrma_mpi_test test/mpi/vrma_mpi_test.c)" 2
[[ $prog == */* ]] || prog=./$prog
command -v mpirun >/dev/null || die "mpirun not found (util/install-deps openmpi-bin libopenmpi-dev)" 2

case $mode in
shm) transport=(--mca pml ob1 --mca btl "self,vader") ;;
vrma | rxm | verbs-rxm)
	case $mode in
	vrma) provider=vrma ;;
	rxm) provider="vrma;ofi_rxm" ;;
	verbs-rxm) provider="verbs;ofi_rxm" ;;
	esac
	transport=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "$provider"
		--mca btl ^openib)
	;;
vrma-osc)
	# Open MPI 4.1.4's osc/rdma puts the windows of all ranks on one node
	# in one shared memory segment and never calls the BTL for them (it
	# ignores the alloc_shm info key); its MPI_Compare_and_swap then hands
	# btl/ofi a NULL handle and crashes. So every rank gets a node of its
	# own: mpirun "logs in" to hosts n1..nN through node-agent.sh, which
	# starts the orted in a UTS namespace of that name. Two-sided messages
	# go over tcp (btl/ofi 4.1 carries RMA and atomics only), osc/rdma is
	# held to btl/ofi, and acc_use_amo=false makes accumulates a get and a
	# compare-and-swap loop: btl/ofi 4.1.4 aborts on any atomic but add
	# and swap (MPI_MAX, MPI_BXOR). DEVELOPERS.md, "MPI one-sided".
	((EUID == 0)) || die "mode vrma-osc needs root (node-agent.sh runs unshare --uts); run it in util/vrma-vm" 2
	command -v unshare >/dev/null || die "unshare not found (util-linux)" 2
	agent=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/node-agent.sh
	[[ -x $agent && $agent != *[[:space:]]* ]] || die "$agent: not an executable file or its path has blanks" 2
	hosts=n1
	for ((i = 2; i <= np; i++)); do hosts+=,n$i; done
	transport=(--host "$hosts" --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1
		--mca pml ob1 --mca btl "self,tcp,ofi" --mca btl_ofi_provider_include vrma
		--mca osc rdma --mca osc_rdma_btls ofi --mca osc_rdma_acc_use_amo false)
	;;
*) die "unknown mode '$mode' (shm, vrma, rxm, verbs-rxm or vrma-osc)" 2 ;;
esac

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# mpirun needs a host name; the test bed's minimal guest has none.
host=$(hostname 2>/dev/null) || host=""
if [[ -z $host || $host == "(none)" ]]; then
	hostname vrma-guest 2>/dev/null || die "this host has no name (mpirun needs one) and cannot be given one"
fi
pass=()
while IFS= read -r v; do
	case $v in FI_* | VRMA_* | RDMAV_* | IBV_*) pass+=(-x "$v") ;; esac
done < <(compgen -e)
# shellcheck disable=SC2206 # word splitting is the point
extra=(${RUN_MPI_ARGS:-})

cmd=(mpirun -np "$np" --oversubscribe "${transport[@]}" "${pass[@]}" "${extra[@]}"
	"$prog" "${prog_args[@]}")
printf '%s: %s\n' "$prog_name" "${cmd[*]}" >&2
log=$(mktemp "${TMPDIR:-/tmp}/run-mpi.XXXXXX")
set +e
"${cmd[@]}" 2>&1 | tee "$log"
st=("${PIPESTATUS[@]}")
set -e
((st[1] == 0)) || die "tee $log failed (exit ${st[1]})"
if ((st[0] != 0)); then
	what=$(grep -m1 '^not ok ' "$log") ||
		what=$(grep -m1 -E '^vrma_mpi_(test|osc): ' "$log") ||
		what=$(grep -m1 -iE 'error|fail|abort|timeout|not found|no components|unable' "$log") ||
		what="see its output above"
	die "mpirun -np $np ($mode) of ${prog##*/} failed (exit ${st[0]}): $what" "${st[0]}"
fi
