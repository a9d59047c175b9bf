#!/bin/sh
# node-agent.sh: Open MPI's rsh launch agent (plm_rsh_agent) for run-mpi.sh's
# vrma-osc mode. It makes one machine look like several nodes: where mpirun
# would run `ssh HOST COMMAND`, this runs COMMAND (an orted) here, in a new
# UTS namespace whose host name is HOST. Ranks then sit on different Open
# MPI nodes and osc/rdma reaches every window but its own through the BTL
# (on one node it maps them all in shared memory and never calls it; see
# DEVELOPERS.md, "MPI one-sided"). The network namespace is not changed.
#
# Usage: node-agent.sh [-OPTION...] HOST COMMAND...   (as root: unshare)
# Environment: VRMA_NODE_AGENT_SSH="HOST=MACHINE ...": the nodes named
# there start on MACHINE instead (ssh, then this script there, at the same
# path), so nodes spread over several machines (the two-host tests).
# Needs sh and unshare (util-linux), ssh for VRMA_NODE_AGENT_SSH.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
	shift
done
if [ $# -lt 2 ]; then
	echo "node-agent.sh: need HOST and COMMAND" >&2
	exit 2
fi
host=$1
shift
for m in ${VRMA_NODE_AGENT_SSH:-}; do
	if [ "${m%%=*}" = "$host" ]; then
		# One word for the remote shell: the command, single-quoted.
		q=$(printf '%s' "$*" | sed "s/'/'\\\\''/g")
		exec ssh -o BatchMode=yes "${m#*=}" "$0 $host '$q'"
	fi
done
# The orted command line comes as ssh would pass it: words for a shell.
# shellcheck disable=SC2016 # expanded by the inner shells
exec unshare --uts /bin/sh -c 'printf %s "$0" >/proc/sys/kernel/hostname && exec /bin/sh -c "$1"' "$host" "$*"
