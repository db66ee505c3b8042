#!/bin/sh
# test_stats_setuid.sh - a process that publishes stats as root and then drops its
# privileges leaves no segment behind when it exits (nginx: root master, workers
# that setuid to nobody), and hzstat reads it while it runs.
#
# tests/stats_setuid makes its segment as root, forks a worker that makes its own,
# and both setuid() to nobody (65534) before they exit normally.  Afterwards no
# segment of either may remain.  Needs HZ_TOOLS_DIR and HZ_STATS_SETUID_PROG.  Skips
# (77) unless run as root with /dev/shm available.

set -u

. "$(dirname "$0")/testlib.sh"

if [ ! -d /dev/shm ] || [ ! -w /dev/shm ]; then
    echo "SKIP: /dev/shm is not available"
    exit 77
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: needs root (the program drops privileges)"
    exit 77
fi
HZSTAT=${HZ_TOOLS_DIR:-}/hzstat
prog=${HZ_STATS_SETUID_PROG:-${HZ_TOOLS_DIR:-}/../tests/stats_setuid}
if [ ! -x "$HZSTAT" ] || [ ! -x "$prog" ]; then
    echo "FAIL: HZ_TOOLS_DIR/hzstat or HZ_STATS_SETUID_PROG missing"
    exit 1
fi
unset HAKOZUNA_STATS

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hz-setuid.XXXXXX") || exit 1
chmod 755 "$tmp"
ppid_=
cleanup() {
    touch "$tmp/go" 2>/dev/null
    [ -n "$ppid_" ] && kill -9 "$ppid_" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

HAKOZUNA_STATS=1 "$prog" "$tmp/go" >"$tmp/out" 2>"$tmp/err" &
ppid_=$!
if ! wait_lines "$tmp/out" '^\(parent\|worker\) ' 2 "$ppid_" "$tmp/err"; then
    echo "FAIL: stats_setuid did not start"
    exit 1
fi
wpid=$(sed -n 's/^worker //p' "$tmp/out")
pseg=$(segment_of "$ppid_")
wseg=$(segment_of "$wpid")
echo "  parent $ppid_: $pseg; worker $wpid: $wseg"
check "the parent publishes a segment" test -n "$pseg"
check "the worker publishes one of its own" test -n "$wseg" -a "$wseg" != "$pseg"
for p in "$ppid_" "$wpid"; do
    "$HZSTAT" -j "$p" >"$tmp/j" 2>"$tmp/e"
    rc=$?
    expect_rc "hzstat -j $p reads it" 0 $rc
    [ $rc -eq 0 ] || sed 's/^/    /' "$tmp/e"
    check "  and finds its pid" grep -q "^{\"pid\":$p," "$tmp/j"
done
"$HZSTAT" >"$tmp/l" 2>"$tmp/e"
check "hzstat lists the parent as live" grep -Eq "^$ppid_ .* live\$" "$tmp/l"
check "hzstat lists the worker as live" grep -Eq "^$wpid .* live\$" "$tmp/l"

touch "$tmp/go"
wait "$ppid_"
expect_rc "both drop privileges and exit normally" 0 $?
p=$ppid_
ppid_=
left=$(ls /dev/shm 2>/dev/null | grep -E "^hakozuna\.([0-9]+\.)?($p|$wpid)\$")
check "no segment of either remains in /dev/shm ($left)" test -z "$left"
# Leave nothing for the next run if this one failed.
for f in $left; do rm -f "/dev/shm/$f"; done

finish
