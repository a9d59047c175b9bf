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

# 1. vrma's own device suite (check prints its summary line).
if "$builddir/test/device_tests"; then pass "device_tests"; else fail "device_tests"; fi

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

# 3. fi_pingpong, server and client through the stock core.
pingpong() { # name, provider, endpoint type, port
	timeout 300 fi_pingpong -p "$2" -e "$3" -B "$4" -I 20 -S all -c >"/tmp/pp-server.$4" 2>&1 &
	server=$!
	sleep 2
	if timeout 300 fi_pingpong -p "$2" -e "$3" -P "$4" -I 20 -S all -c "$addr" >"/tmp/pp-client.$4" 2>&1 &&
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
pingpong "fi_pingpong -p 'vrma;ofi_rxm' -e rdm" "vrma;ofi_rxm" rdm 47593

echo "tools: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
