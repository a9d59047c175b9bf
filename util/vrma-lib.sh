# shellcheck shell=bash
# Sourced by the scripts under util/ (bash): strict mode that never exits
# silently. Any command that fails under `set -e` -- including one whose
# failure surfaces only through a command substitution or a pipeline
# (pipefail) -- ends the script with exactly one line on stderr naming the
# command and its line:
#   PROG: error: line N: `COMMAND` failed (exit S)
# Failures the script explains itself go through vrma_die, which prints its
# own one line instead.
#
# Hazards this closes: `x=$(a | b)` under pipefail exits when `a` fails even
# though `b` succeeded, and a command substitution's failure carries no
# message of its own; both used to end scripts with nothing printed.
#
# Contract for the sourcing script:
# - set VRMA_PROG before sourcing to name itself (default: basename of $0);
# - set VRMA_FAIL_STATUS to replace the status of unexplained failures
#   (vrma-vm uses 125, "the VM failed");
# - register cleanup with vrma_at_exit instead of `trap ... EXIT`;
# - commands whose failure is expected go in `if`, `||` or `&&` (`|| true`),
#   where neither set -e nor the ERR trap acts.
set -Eeuo pipefail

VRMA_PROG=${VRMA_PROG:-${0##*/}}
_vrma_cmd=""
_vrma_line=""
_vrma_said=0
_vrma_exit_hooks=()

vrma_log() { printf '%s: %s\n' "$VRMA_PROG" "$*" >&2; }

# vrma_die MESSAGE [STATUS]: one line, then exit (default status 1, or
# VRMA_FAIL_STATUS).
vrma_die() {
	printf '%s: error: %s\n' "$VRMA_PROG" "$1" >&2
	_vrma_said=1
	exit "${2:-${VRMA_FAIL_STATUS:-1}}"
}

# vrma_exit STATUS: exit with STATUS, already explained (or the status of
# a command run on the caller's behalf): no line is added.
vrma_exit() {
	_vrma_said=1
	exit "$1"
}

# vrma_usage: prints the calling script's header comment (line 2 up to its
# first line that is not a comment), which is its help. A hard-coded line
# range goes stale when the header grows.
vrma_usage() { sed -n '2,/^[^#]/{/^#/p}' "$0"; }

# vrma_at_exit COMMAND...: run at exit, last registered first.
vrma_at_exit() { _vrma_exit_hooks=("$*" "${_vrma_exit_hooks[@]}"); }

# The ERR trap is inherited by functions and subshells (-E); it only
# records. The EXIT trap reports, once, in the main shell.
trap '_vrma_cmd=$BASH_COMMAND _vrma_line=$LINENO' ERR
_vrma_on_exit() {
	local rc=$1 hook
	trap - ERR
	set +e
	for hook in "${_vrma_exit_hooks[@]}"; do eval "$hook"; done
	if ((rc != 0 && !_vrma_said)) && [[ $BASHPID == "$$" ]]; then
		if [[ -n $_vrma_cmd ]]; then
			printf '%s: error: line %s: `%s` failed (exit %s)\n' \
				"$VRMA_PROG" "$_vrma_line" "$_vrma_cmd" "$rc" >&2
		else
			printf '%s: error: exit %s\n' "$VRMA_PROG" "$rc" >&2
		fi
		if [[ -n ${VRMA_FAIL_STATUS:-} ]]; then rc=$VRMA_FAIL_STATUS; fi
	fi
	exit "$rc"
}
trap '_vrma_on_exit $?' EXIT

# vrma_apt_lock: holds, until the script exits, the lock that serializes
# package installs of vrma's scripts (make -j2 check runs several at once:
# apt-get update does not wait for another one's lists lock, it fails).
vrma_apt_lock() {
	local lock=/var/lock/vrma-apt.lock
	[[ -n ${_vrma_apt_locked:-} ]] && return 0
	exec {_vrma_apt_fd}>"$lock" || vrma_die "cannot open $lock"
	flock -w 900 "$_vrma_apt_fd" || vrma_die "waited 900 s for $lock (another install running?)"
	_vrma_apt_locked=1
}
# vrma_apt_unlock: releases it early. Hazard: a script that goes on to start
# long-lived children (qemu) must call this first, or they inherit the
# descriptor and hold the lock for their whole life.
vrma_apt_unlock() {
	[[ -n ${_vrma_apt_locked:-} ]] || return 0
	exec {_vrma_apt_fd}>&-
	_vrma_apt_locked=""
}

# vrma_mpi_launcher: sets up Open MPI for programs that use it only to
# start their processes and exchange addresses (SOS's PMI): root may run it
# (the test bed's guest runs everything as root), MPI's own traffic goes
# over shared memory (pml ob1, btl self,vader), never over libfabric; and a
# guest without a host name gets one, which mpirun needs (the minimal guest
# has none). Every process start costs seconds under TCG: MPI loads only
# the collectives and one-sided components it can use here, and hwloc
# leaves out its PCI, GPU and XML plugins (X11, OpenCL and libxml2 with
# them).
vrma_mpi_launcher() {
	local h
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 \
		OMPI_MCA_btl=self,vader OMPI_MCA_mtl=^ofi OMPI_MCA_coll=basic,libnbc,self OMPI_MCA_osc=pt2pt \
		HWLOC_PLUGINS_BLACKLIST=hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_xml_libxml,hwloc_cuda,hwloc_nvml,hwloc_rsmi,hwloc_levelzero
	h=$(hostname 2>/dev/null) || h=
	[[ -n $h && $h != "(none)" ]] || hostname vrma-guest || vrma_die "this host has no name and cannot be given one (mpirun needs it)"
}

# _vrma_first_matches FILE ERE N: FILE's first N lines matching ERE,
# joined on one line.
_vrma_first_matches() {
	local e
	e=$(grep -E -m "$3" "$2" "$1" 2>/dev/null | tr '\n' ' ') || true
	printf '%s' "${e% }"
}

# apt_errors FILE: apt's own error lines from FILE, joined on one line.
apt_errors() { _vrma_first_matches "$1" '^(E|Err):' 3; }

# vrma_build_errors LOG: what a failed build says, on one line: the
# compiler's and make's first error lines (a parallel make's last line is
# another job's), else the log's last line.
vrma_build_errors() {
	local e
	e=$(_vrma_first_matches "$1" 'error:|\*\*\*|No such file|cannot' 4)
	[[ -n $e ]] || e=$(tail -n 1 "$1" 2>/dev/null) || true
	printf '%s' "$e"
}

# vrma_build TOP: installs what building vrma needs, then configures (once)
# and builds in TOP/build. Each failing step says so in one line.
vrma_build() {
	local top=$1 jobs
	"$top/util/install-deps" || vrma_exit 1
	# ccache's compiler links first in PATH, for this build and every one
	# the tests start (the sanitizer builds, distcheck's): a clean clone
	# then recompiles only what changed since the last run (its cache:
	# ccache's default, ~/.cache/ccache). Paths under the clone are hashed
	# relative to it and the working directory not at all, so a clone
	# elsewhere hits the same entries (debug information then names the
	# directory of the build that filled the cache). VRMA_CCACHE=no builds
	# without it.
	if [[ ${VRMA_CCACHE:-} != no && -d /usr/lib/ccache ]]; then
		[[ :$PATH: == *:/usr/lib/ccache:* ]] || export PATH=/usr/lib/ccache:$PATH
		export CCACHE_BASEDIR=$top CCACHE_NOHASHDIR=1
	fi
	if [[ ! -x $top/configure ]]; then (cd "$top" && ./autogen.sh) || vrma_die "./autogen.sh failed"; fi
	mkdir -p "$top/build"
	if [[ ! -f $top/build/Makefile ]]; then
		(cd "$top/build" && ../configure) || vrma_die "configure failed (see build/config.log)"
	fi
	jobs=$(nproc 2>/dev/null) || jobs=2
	make -C "$top/build" -j"$jobs" || vrma_die "make failed"
}
