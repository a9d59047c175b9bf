#!/usr/bin/env bash
# The scripts a user runs under util/ on a machine that lacks packages,
# proven without uninstalling anything: a package that is not installed is
# reported ("would install") and the script goes on; a step that fails
# (an unknown package, an unreachable kernel package, a failing command in
# a pipeline) ends the script with one line naming it and a non-zero status.
set -u
srcdir=${VRMA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
util=$srcdir/util
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vrma-scripts.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
fake=vrma-test-no-such-package
check() { # name, command...
	local name=$1
	shift
	if "$@"; then
		echo "PASS: $name"
		passed=$((passed + 1))
	else
		echo "FAIL: $name"
		failed=$((failed + 1))
	fi
}
# run OUT_PREFIX COMMAND...: stdout and stderr into files, status into $rc.
run() {
	local p=$1
	shift
	rc=0
	"$@" >"$p.out" 2>"$p.err" </dev/null || rc=$?
}
show() { # on failure, what the command said
	echo "  exit $rc; stdout:"
	sed 's/^/    /' "$1.out"
	echo "  stderr:"
	sed 's/^/    /' "$1.err"
	return 1
}
# errors FILE: the number of lines reporting an error.
errors() { grep -c ': error: ' "$1"; }

# Every script is valid bash/sh and sources the strict-mode library.
syntax() {
	local f ok=0
	for f in "$util"/vrma-vm "$util"/vrma-test "$util"/vrma-quickstart "$util"/install-deps \
		"$util"/vrma-fabtests "$util"/vrma-sos "$util"/vrma-list "$util"/vrma-compare "$util"/vrma-fresh-check "$util"/vrma-sanitize; do
		bash -n "$f" || ok=1
		grep -q 'vrma-lib.sh' "$f" || { echo "  $f does not source vrma-lib.sh"; ok=1; }
	done
	return $ok
}
check "util scripts parse and use the strict-mode library" syntax

# install-deps --dry-run: the missing package is reported, nothing changes.
deps_dry() {
	run "$tmp/d" env VRMA_EXTRA_PACKAGES="$fake" "$util/install-deps" --dry-run
	[[ $rc -eq 0 ]] && grep -q "^install-deps: would install:.* $fake\$" "$tmp/d.err" || show "$tmp/d"
}
check "install-deps --dry-run reports a package that is not installed" deps_dry

# vrma-vm --dry-run: the extra package is reported as "would install" and
# the script goes on to the kernel and the boot, where it stops.
vm_dry() {
	run "$tmp/v" env VRMA_VM_CACHE="$tmp/cache" VRMA_VM_EXTRA_PACKAGES="$fake" \
		"$util/vrma-vm" --dry-run true
	[[ $rc -eq 0 ]] &&
		grep -q "^install-deps: would install:.* $fake\$" "$tmp/v.err" &&
		grep -q '^vrma-vm: would \(fetch kernel\|run apt-get update\)' "$tmp/v.err" &&
		grep -q '^vrma-vm: dry run: stopping before the boot' "$tmp/v.err" &&
		[[ $(errors "$tmp/v.err") -eq 0 ]] || show "$tmp/v"
}
check "vrma-vm --dry-run reports the missing package and goes on to the boot" vm_dry

# vrma-vm boots one host or two, nothing else: one line, before any install.
vm_hosts() {
	run "$tmp/h" env VRMA_VM_CACHE="$tmp/cache" "$util/vrma-vm" --hosts 3 true
	[[ $rc -eq 125 ]] && [[ $(errors "$tmp/h.err") -eq 1 ]] &&
		grep -q '^vrma-vm: error: bad --hosts: 3 (1 or 2)$' "$tmp/h.err" || show "$tmp/h"
}
check "vrma-vm --hosts takes 1 or 2, and says so in one line" vm_hosts

# vrma-compare's two hosts are for the many-peer part alone: one line each,
# before anything is installed or built.
compare_hosts() {
	run "$tmp/c3" "$util/vrma-compare" --hosts 3 --only peers
	[[ $rc -eq 2 ]] && [[ $(errors "$tmp/c3.err") -eq 1 ]] &&
		grep -q "^vrma-compare: error: --hosts: '3' is not 1 or 2$" "$tmp/c3.err" || { show "$tmp/c3"; return 1; }
	run "$tmp/c2" "$util/vrma-compare" --hosts 2 --only rdm
	[[ $rc -eq 2 ]] && [[ $(errors "$tmp/c2.err") -eq 1 ]] &&
		grep -q '^vrma-compare: error: --hosts 2: only with --only peers' "$tmp/c2.err" || show "$tmp/c2"
}
check "vrma-compare --hosts takes 1, or 2 for the many-peer part, and says so in one line" compare_hosts

# A package apt cannot install: one line that names it, non-zero status.
deps_fail() {
	run "$tmp/f" env VRMA_EXTRA_PACKAGES="$fake" "$util/install-deps"
	[[ $rc -ne 0 ]] && [[ $(errors "$tmp/f.err") -eq 1 ]] &&
		grep -q "^install-deps: error: apt-get install failed for .*$fake.*Unable to locate package $fake" "$tmp/f.err" ||
		show "$tmp/f"
}
check "install-deps names the package it cannot install, in one line" deps_fail

# Two installs at once (make -j2 check runs scripts concurrently): apt-get
# update does not wait for another's lists lock, so install-deps serializes
# them; both must reach the real failure, not an apt lock error.
deps_concurrent() {
	local ok=0
	env VRMA_EXTRA_PACKAGES="$fake" "$util/install-deps" >"$tmp/c1.out" 2>"$tmp/c1.err" </dev/null &
	env VRMA_EXTRA_PACKAGES="$fake" "$util/install-deps" >"$tmp/c2.out" 2>"$tmp/c2.err" </dev/null || true
	wait || true
	for c in c1 c2; do
		grep -q "^install-deps: error: apt-get install failed for .*Unable to locate package $fake" "$tmp/$c.err" ||
			{ show "$tmp/$c"; ok=1; }
	done
	return $ok
}
check "two install-deps at once both get to apt's answer (no lock error)" deps_concurrent

# An unreachable kernel package: vrma-vm stops with one line naming it.
kernel_fail() {
	local k=linux-image-vrma-test-missing
	run "$tmp/k" env VRMA_VM_CACHE="$tmp/cache" VRMA_VM_KERNEL_PKG=$k VRMA_VM_FORCE=1 \
		"$util/vrma-vm" true
	[[ $rc -eq 125 ]] && [[ $(errors "$tmp/k.err") -eq 1 ]] &&
		grep -q "^vrma-vm: error: apt-get download $k failed: .*$k" "$tmp/k.err" || show "$tmp/k"
}
check "vrma-vm names an unreachable kernel package in one line (exit 125)" kernel_fail

# The library itself: a failure inside a command substitution's pipeline
# (the trap of issue 10) ends the script with a line naming the command;
# vrma_die says its own line once; vrma_exit passes a status silently.
lib_trap() {
	cat >"$tmp/t.sh" <<EOF
VRMA_PROG=t
. "$util/vrma-lib.sh"
x=\$(false | cat)
echo "not reached"
EOF
	run "$tmp/t" bash "$tmp/t.sh"
	[[ $rc -ne 0 ]] && [[ ! -s $tmp/t.out ]] && [[ $(wc -l <"$tmp/t.err") -eq 1 ]] &&
		grep -q '^t: error: line 3: `x=$(false | cat)` failed' "$tmp/t.err" || show "$tmp/t"
}
check "a failing pipeline in a command substitution ends with one line naming it" lib_trap
lib_die() {
	printf 'VRMA_PROG=t\n. "%s/vrma-lib.sh"\nvrma_die "cannot frob" 7\n' "$util" >"$tmp/u.sh"
	run "$tmp/u" bash "$tmp/u.sh"
	[[ $rc -eq 7 ]] && [[ $(cat "$tmp/u.err") == "t: error: cannot frob" ]] || show "$tmp/u"
}
check "vrma_die prints exactly its own line" lib_die
lib_exit() {
	printf 'VRMA_PROG=t\n. "%s/vrma-lib.sh"\nvrma_exit 3\n' "$util" >"$tmp/e.sh"
	run "$tmp/e" bash "$tmp/e.sh"
	[[ $rc -eq 3 ]] && [[ ! -s $tmp/e.err ]] || show "$tmp/e"
}
check "vrma_exit passes a status without a line" lib_exit

# The lists parse: every pattern has a reason above it, whose first line
# says its kind (a header without a blank line after it would become the
# first entry's reason, and its n/a: or slow: would go unread).
list_ok() {
	awk 'FNR == 1 {r = ""; inc = 0}
		/^#/ {if (!inc) r = $0; inc = 1; next}
		{inc = 0}
		NF {if (r !~ /^# (n\/a|slow|fails):/) {print "  no reason (n/a:, slow: or fails:) for: " FILENAME ": " $0; bad = 1} r = ""; next}
		{r = ""}
		END {exit bad}' "$srcdir/test/fabtests/vrma.list" "$srcdir/test/fabtests/vrma-2.6.list" \
		"$srcdir/test/sos/vrma.list"
}
check "test/fabtests/vrma.list, vrma-2.6.list and test/sos/vrma.list give every pattern a reason of a known kind" list_ok

# A reason is the whole comment block above a pattern, read from its first
# line: "n/a:" there excludes the test however many lines follow.
list_na() {
	printf '# header\n\n# n/a: first line\n# second line\n^skipped\n\n# fails: one\n# n/a: not first\n^runs\n\n# slow: too long\n^long\n' \
		>"$tmp/l.list"
	run "$tmp/l" "$util/vrma-list" excluded "$tmp/l.list"
	[[ $rc -eq 0 ]] && [[ $(cat "$tmp/l.out") == $'^skipped\n^long' ]] || show "$tmp/l"
}
check "a multi-line list reason starting with n/a: or slow: excludes its test" list_na

# The judge: a known failure, an unlisted failure, a listed test that
# passes, an entry that matches nothing; one summary line per group.
list_check() {
	printf '# n/a: does not apply\n^g1 skipped\n\n# fails: known\n^g1 known\n\n# fails: fixed\n^g2 fixed\n\n# stale\n^nothing\n\n# fails: not run here\n^g2 left out\n' \
		>"$tmp/j.list"
	printf 'g1\tg1 ok\tpass\t3\ng1\tg1 known\tfail\t7\ng1\tg1 skipped\texcluded\ng2\tg2 new\tfail\ng2\tg2 fixed\tpass\ng2\tg2 other\tskip\ng2\tg2 left out\tunselected\n' \
		>"$tmp/j.tsv"
	run "$tmp/j" "$util/vrma-list" check "$tmp/j.list" "$tmp/j.tsv" "pass fail skip excluded unselected"
	[[ $rc -eq 1 ]] && ! grep -q 'left out' "$tmp/j.out" &&
		grep -qx 'known failure: g1 g1 known (fails: known)' "$tmp/j.out" &&
		grep -qx 'FAIL: g2 g2 new: failed, and it is not listed' "$tmp/j.out" &&
		grep -q '^FAIL: g2 g2 fixed: listed as failing (fails: fixed) but pass: take it off' "$tmp/j.out" &&
		grep -q "^FAIL: $tmp/j.list: entry '^nothing' (stale) matches no test" "$tmp/j.out" &&
		grep -qx 'g1 slowest: g1 known 7 s, g1 ok 3 s' "$tmp/j.out" &&
		grep -qx 'g1: 1 pass, 1 fail, 0 skip, 1 excluded, 0 unselected; 0 unexpected' "$tmp/j.out" &&
		grep -qx 'g2: 1 pass, 1 fail, 1 skip, 0 excluded, 1 unselected; 2 unexpected' "$tmp/j.out" || show "$tmp/j"
}
check "vrma-list check judges results against a list (one summary per group; unselected tests counted, not judged)" list_check

# Without the tarball, fabtests are skipped with one line.
ft_skip() {
	run "$tmp/s" env -u VRMA_FABTESTS VRMA_FABTESTS_TARBALL="$tmp/none.tar.gz" "$util/vrma-fabtests" build
	[[ $rc -eq 0 ]] && [[ $(cat "$tmp/s.out") == "fabtests: skipped: $tmp/none.tar.gz not found"* ]] || show "$tmp/s"
}
check "vrma-fabtests without the tarball says it skips, in one line" ft_skip
ft26_skip() {
	run "$tmp/s26" env -u VRMA_FABTESTS VRMA_LIBFABRIC26_TARBALL="$tmp/none.tar.gz" "$util/vrma-fabtests" build --core 2.6
	[[ $rc -eq 0 ]] && [[ $(cat "$tmp/s26.out") == "fabtests 2.6: skipped: $tmp/none.tar.gz not found"* ]] || show "$tmp/s26"
}
check "vrma-fabtests --core 2.6 without the libfabric 2.6 tarball says it skips, in one line" ft26_skip

# Without the tarball, tests-sos are skipped with one line.
sos_skip() {
	run "$tmp/o" env -u VRMA_SOS VRMA_SOS_TARBALL="$tmp/none.tar.gz" "$util/vrma-sos" build
	[[ $rc -eq 0 ]] && [[ $(cat "$tmp/o.out") == "sos: skipped: $tmp/none.tar.gz not found"* ]] || show "$tmp/o"
}
check "vrma-sos without the tarball says it skips, in one line" sos_skip

# A source tree where the test VM mounts its own tmpfs: one line, before
# anything is built or booted (on a host without an RDMA device).
tmp_src() {
	[[ -n $(ls /sys/class/infiniband 2>/dev/null) ]] && return 0
	run "$tmp/t" env -u VRMA_DEVICE_TESTS VRMA_SRCDIR=/tmp/vrma-src VRMA_BUILDDIR="$tmp" sh "$srcdir/test/device.sh"
	[[ $rc -eq 1 ]] && [[ $(wc -l <"$tmp/t.out") -eq 1 ]] &&
		grep -q '^FAIL: device.sh: the source tree /tmp/vrma-src is under /tmp' "$tmp/t.out" || show "$tmp/t"
}
check "device.sh refuses a source tree under /tmp, in one line" tmp_src

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
