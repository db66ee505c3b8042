#!/bin/sh
# test_stats_pidns.sh - stats segments of processes in another PID namespace (a
# container sharing /dev/shm) are neither confused with this namespace's processes
# nor removed by `hzstat --gc` while they run; once such a process is gone, --gc
# collects its segment.
#
# stats_prog runs as pid 1 of a new PID namespace (unshare --pid --fork), where its
# pid collides with init's here, and as nobody: a root process removes the name of
# its segment at once (src/shm.c), so only a process that cannot change its user id
# leaves one behind when killed.  Needs HZ_TOOLS_DIR and HZ_STATS_PROG as
# test_hzstat.sh does.  Skips (77) without /dev/shm, or when unshare is missing or
# not permitted (not root), or setpriv cannot run the program as nobody.

set -u

. "$(dirname "$0")/testlib.sh"

if [ ! -d /dev/shm ] || [ ! -w /dev/shm ]; then
    echo "SKIP: /dev/shm is not available"
    exit 77
fi
HZSTAT=${HZ_TOOLS_DIR:-}/hzstat
prog=${HZ_STATS_PROG:-${HZ_TOOLS_DIR:-}/../tests/stats_prog}
if [ ! -x "$HZSTAT" ] || [ ! -x "$prog" ]; then
    echo "FAIL: HZ_TOOLS_DIR/hzstat or HZ_STATS_PROG missing"
    exit 1
fi
if ! command -v unshare >/dev/null 2>&1 || ! unshare --pid --fork true 2>/dev/null; then
    echo "SKIP: unshare --pid --fork is not available or not permitted here"
    exit 77
fi
if ! command -v setpriv >/dev/null 2>&1 ||
    ! setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$prog"; then
    echo "SKIP: cannot run stats_prog as nobody (setpriv missing, or the build not readable)"
    exit 77
fi
unset HAKOZUNA_STATS

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hz-pidns.XXXXXX") || exit 1
chmod 755 "$tmp"
upid=
cleanup() {
    touch "$tmp/go" 2>/dev/null
    [ -n "$upid" ] && kill -9 "$upid" 2>/dev/null
    [ -n "${hpid:-}" ] && kill -9 "$hpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# stats_prog as pid 1 of a new PID namespace, as nobody, the library preloaded
# (LD_PRELOAD passes through unshare, setpriv and env).
unshare --pid --fork setpriv --reuid=65534 --regid=65534 --clear-groups \
    env HAKOZUNA_STATS=1 "$prog" "$tmp/go" 2 200 3000 >"$tmp/out" 2>"$tmp/err" &
upid=$!
if ! wait_lines "$tmp/out" '^ready' 1 "$upid" "$tmp/err"; then
    echo "FAIL: stats_prog did not start in the new namespace"
    exit 1
fi
check "stats_prog is pid 1 of its namespace" grep -q '^ready pid=1 ' "$tmp/out"
hpid=$(cat "/proc/$upid/task/$upid/children" 2>/dev/null | awk '{ print $1 }')
check "its pid here is known ($hpid)" test -n "$hpid"
seg=$(segment_of "$hpid")
echo "  pid here: $hpid, segment: $seg"
check "it publishes a segment" test -n "$seg" -a -f "$seg"

"$HZSTAT" --gc >"$tmp/gc" 2>&1
sed 's/^/    /' "$tmp/gc"
check "hzstat --gc keeps the segment of the running process" test -n "$seg" -a -f "$seg"
check "  and does not report removing it" test -z "$(grep -F "$seg " "$tmp/gc")"
"$HZSTAT" 1 >"$tmp/one" 2>&1
rc=$?
check "hzstat 1 does not show the other namespace's pid 1 (exit $rc)" test $rc -ne 0
sed 's/^/    /' "$tmp/one"

kill -9 "$hpid"
wait "$upid" 2>/dev/null
upid=
hpid=
check "after kill -9 the segment remains" test -n "$seg" -a -f "$seg"
"$HZSTAT" --gc >"$tmp/gc" 2>&1
sed 's/^/    /' "$tmp/gc"
check "hzstat --gc collects it once its process is gone" test -n "$seg" -a ! -e "$seg"

finish
