#!/bin/sh
# The provider library exports exactly one symbol: fi_prov_ini.
set -eu
lib="${VRMA_BUILDDIR:-.}/.libs/libvrma-fi.so"
[ -f "$lib" ] || { echo "FAIL: $lib not built"; exit 1; }
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
if [ "$syms" = "fi_prov_ini" ]; then
	echo "PASS: $lib exports only fi_prov_ini"
	echo "1 passed, 0 failed"
	exit 0
fi
echo "FAIL: $lib exports:"
echo "$syms"
echo "0 passed, 1 failed"
exit 1
