#!/bin/sh
# The provider registers with the stock libfabric core on the host: the core
# loads libvrma-fi.so from FI_PROVIDER_PATH, lists it with its version and its
# FI_VRMA_* parameters (a bad one warned about), and without an RDMA device
# fi_getinfo finds nothing.
set -u
export FI_PROVIDER_PATH="${VRMA_BUILDDIR:-.}/.libs"
# A sanitizer build's provider (configure --enable-sanitizers) loads only into
# a program whose sanitizer runtime came first; the stock fi_info has none.
if [ -n "${VRMA_SANITIZER_PRELOAD:-}" ]; then
	fi_info() { LD_PRELOAD="$VRMA_SANITIZER_PRELOAD${LD_PRELOAD:+ $LD_PRELOAD}" command fi_info "$@"; }
fi
passed=0
failed=0
check() { # name, command...
	name=$1
	shift
	if "$@"; then
		echo "PASS: $name"
		passed=$((passed + 1))
	else
		echo "FAIL: $name"
		failed=$((failed + 1))
	fi
}
listed() { fi_info -l 2>/dev/null | grep -A1 '^vrma:$' | grep -q 'version: 0.1'; }
check "fi_info -l lists vrma 0.1" listed
params() {
	out=$(fi_info -e 2>/dev/null)
	for p in TX_SIZE RX_SIZE IOV_LIMIT CQ_SIZE INLINE_SIZE CM_TIMEOUT LISTEN_BACKLOG STAGE_BUFFERS; do
		printf '%s\n' "$out" | grep -q "^# FI_VRMA_$p:" || { echo "missing FI_VRMA_$p"; return 1; }
	done
}
check "fi_info -e lists the FI_VRMA_* parameters" params
clamped() {
	FI_VRMA_STAGE_BUFFERS=100 FI_LOG_LEVEL=warn fi_info -l 2>&1 |
		grep -q 'FI_VRMA_STAGE_BUFFERS=100: at most 65 are used'
}
check "FI_VRMA_STAGE_BUFFERS above 65 is clamped with a warning" clamped
if [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
	nodata() {
		out=$(fi_info -p vrma 2>&1)
		rc=$?
		[ "$rc" -ne 0 ] && printf '%s\n' "$out" | grep -q -- '-61'
	}
	check "without a device fi_info -p vrma finds nothing (-FI_ENODATA)" nodata
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
