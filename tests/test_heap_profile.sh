#!/bin/sh
# test_heap_profile.sh - the sampled live heap profile: tests/prof_prog, started with
# `hzrun --profile`, keeps 32 MiB live from one planted function while others keep
# and churn less; `hzstat --heap PID` must name that function as the top site with
# an estimate within a factor of two, write a heap profile in the format pprof reads,
# drop the site once the program freed its blocks, and find nothing when profiling
# is off.
#
#   HZ_TOOLS_DIR    directory holding hzrun and hzstat (the build tree's tools/)
#   HZRUN_LIBDIR    directory holding libhakozuna*.so.0 (default: HZ_TEST_LIBDIR)
#   HZ_PROF_PROG    the tests/prof_prog program
#   HZ_TEST_VARIANT library name set by tests/preload.sh: the hzrun variant to test
#
# Skips (exit 77) only when /dev/shm is not available.

set -u

. "$(dirname "$0")/testlib.sh"

need_dev_shm
hz_tools
tools=$HZ_TOOLS_DIR
variant=$(hzrun_variant)
prog=${HZ_PROF_PROG:-$tools/../tests/prof_prog}
need_prog prof_prog "$prog"
echo "hzstat: $HZSTAT, library variant: $variant"
unset HAKOZUNA_STATS HAKOZUNA_PROFILE

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hz-heap.XXXXXX") || exit 1
pids=
cleanup() {
    touch "$tmp/go1" "$tmp/go2" "$tmp/u/go1" "$tmp/u/go2" 2>/dev/null
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# start NAME HZRUN-ARGS... : prof_prog under hzrun in the background, until phase 1.
start() {
    name=$1
    shift
    rm -f "$tmp/go1" "$tmp/go2"
    "$HZRUN" -v "$variant" "$@" -- "$prog" "$tmp" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    pid=$!
    pids="$pids $pid"
    wait_lines "$tmp/$name.out" '^phase1' 1 "$pid" "$tmp/$name.err" ||
        { echo "  prof_prog did not reach phase 1 (above: its stderr)"; return 1; }
}

# The profile segment of PID: its name in /dev/shm, or its mapping (a process that
# may change its user id removes the name at once).
has_profile() {
    grep -q "/dev/shm/hakozuna\.\([0-9]*\.\)\{0,1\}$1\.heap" "/proc/$1/maps" 2>/dev/null
}

# MiB of "N: X.Y UNIT (..." (the first site of hzstat --heap), as an integer.
site_mib() {
    sed -n 's/^ *1: \([0-9.]*\) \([KMG]i\{0,1\}B\) .*/\1 \2/p' "$1" |
        awk '{ m = $1; if ($2 == "KiB") m /= 1024; if ($2 == "GiB") m *= 1024;
               if ($2 == "B") m /= 1048576; printf "%d\n", m }'
}

# ------------------------------------------------------------- profiling on
if start on --profile; then
    check "the process maps its heap profile segment" has_profile "$pid"
    "$HZSTAT" --heap "$pid" >"$tmp/heap1" 2>"$tmp/heap1.err"
    expect_rc "hzstat --heap PID" 0 $?
    sed 's/^/    /' "$tmp/heap1" | head -n 24
    first=$(sed -n '/^ *1: /,/^$/p' "$tmp/heap1" | grep -m 1 '#0 ')
    case $first in
    *hz_planted_site*) pass "the top site is the planted function" ;;
    *) fail "the top site is not the planted function: '$first'" ;;
    esac
    mib=$(site_mib "$tmp/heap1")
    if [ -n "$mib" ] && [ "$mib" -ge 16 ] && [ "$mib" -le 64 ]; then
        pass "its estimate, $mib MiB, is within a factor of 2 of the 32 MiB live"
    else
        fail "its estimate is '${mib}' MiB; 32 MiB are live"
    fi
    check "the frame below it is main" sh -c "sed -n '/^ *1: /,/^\$/p' '$tmp/heap1' | grep -q '#1 .* main+'"
    addr=$(echo "$first" | sed -n 's/^ *#0 *0x0*\([0-9a-f]*\) .*/\1/p')

    "$HZSTAT" --heap -o "$tmp/heap1.prof" "$pid"
    expect_rc "hzstat --heap -o FILE PID" 0 $?
    check "the file starts with a heap_v2 header at the default rate" \
        grep -Eq '^heap profile: +[0-9]+: +[0-9]+ \[ *[0-9]+: +[0-9]+\] @ heap_v2/524288$' "$tmp/heap1.prof"
    bad=$(sed '/^$/,$d' "$tmp/heap1.prof" | sed 1d |
        grep -Evc '^[0-9]+: [0-9]+ \[[0-9]+: [0-9]+\] @( 0x[0-9a-f]+)+$')
    check "every site line is 'N: B [N: B] @ addr...'" [ "$bad" -eq 0 ]
    check "a live site holds the planted frame" \
        grep -Eq "^[1-9][0-9]*: [0-9]+ \[.*\] @ 0x$addr( |\$)" "$tmp/heap1.prof"
    check "MAPPED_LIBRARIES: lists the process's maps" \
        sh -c "sed -n '/^MAPPED_LIBRARIES:\$/,\$p' '$tmp/heap1.prof' | grep -q ' $prog\$'"
    "$HZSTAT" --heap -n 1 "$pid" >"$tmp/heap1n" 2>&1
    check "-n 1 shows one site" [ "$(grep -c '^ *[0-9]*: .* samples$' "$tmp/heap1n")" -eq 1 ]

    touch "$tmp/go1"
    if wait_lines "$tmp/on.out" '^phase2' 1 "$pid" "$tmp/on.err"; then
        "$HZSTAT" --heap "$pid" >"$tmp/heap2" 2>&1
        expect_rc "hzstat --heap PID after the frees" 0 $?
        check "the freed planted blocks left the profile" sh -c "! grep -q hz_planted_site '$tmp/heap2'"
        "$HZSTAT" --heap -o "$tmp/heap2.prof" "$pid"
        check "and the file holds the planted stack with no live block" \
            sh -c "grep -Eq '^0: 0 \[[1-9][0-9]*: [0-9]+\] @ 0x$addr( |\$)' '$tmp/heap2.prof' &&
                   ! grep -Eq '^[1-9][0-9]*: [0-9]+ \[.*\] @ 0x$addr( |\$)' '$tmp/heap2.prof'"
    else
        fail "prof_prog did not reach phase 2"
    fi
    touch "$tmp/go2"
    wait "$pid"
    expect_rc "prof_prog exits normally" 0 $?
    check "no profile segment is left in /dev/shm" \
        sh -c "! ls /dev/shm 2>/dev/null | grep -Eq '^hakozuna\.([0-9]+\.)?$pid\.heap\$'"
else
    fail "prof_prog with --profile"
fi

# ----------------------------------------------- a process that keeps its names
# Root's processes remove their segments' names at once (they may change user);
# an ordinary user's keep /dev/shm/hakozuna.PID and hakozuna.PID.heap, which its
# own hzstat reads, and which hzstat --gc removes together once it is killed.
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1 &&
    as_nobody test -x "$prog" && as_nobody "$HZSTAT" --version >/dev/null 2>&1; then
    mkdir -p "$tmp/u" && chmod 755 "$tmp" "$tmp/u"
    # The default 32 MiB planted: with 8, about 16 samples against the 2 MiB site's
    # 4 left that site on top in about one run in 300 (Poisson counts).
    setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$HZRUN" -v "$variant" --profile -- "$prog" "$tmp/u" >"$tmp/u.out" 2>"$tmp/u.err" &
    pid=$!
    pids="$pids $pid"
    if wait_lines "$tmp/u.out" '^phase1' 1 "$pid" "$tmp/u.err"; then
        pid=$(sed -n 's/^phase1 pid=\([0-9]*\) .*/\1/p' "$tmp/u.out") # setpriv and hzrun exec it
        named=$(ls /dev/shm | grep -E "^hakozuna\.([0-9]+\.)?$pid\.heap\$")
        check "an ordinary user's profile keeps its name" [ -n "$named" ]
        as_nobody "$HZSTAT" --heap -n 1 "$pid" >"$tmp/u.heap" 2>&1
        expect_rc "hzstat --heap as that user" 0 $?
        check "it names the planted site" grep -q 'hz_planted_site+' "$tmp/u.heap"
        kill -9 "$pid"
        wait "$pid" 2>/dev/null
        "$HZSTAT" --gc >/dev/null 2>&1
        check "hzstat --gc removes the killed process's profile with its counters" \
            sh -c "! ls /dev/shm | grep -Eq '^hakozuna\.([0-9]+\.)?$pid(\.heap)?\$'"
    else
        fail "prof_prog as nobody"
    fi
else
    skip "named segments: not root, no setpriv, or the build not reachable by nobody"
fi

# ------------------------------------------------------- another sampling rate
if start rate --profile=65536; then
    "$HZSTAT" --heap -o - "$pid" >"$tmp/rate.prof"
    expect_rc "hzstat --heap -o - PID" 0 $?
    check "--profile=65536 samples every 64 KiB" grep -q '@ heap_v2/65536$' "$tmp/rate.prof"
    "$HZSTAT" --heap "$pid" >"$tmp/rate" 2>&1
    check "calloc is sampled too" grep -q 'calloc_site+' "$tmp/rate"
    touch "$tmp/go1" "$tmp/go2"
    wait "$pid"
    expect_rc "prof_prog exits normally" 0 $?
else
    fail "prof_prog with --profile=65536"
fi

# ------------------------------------------------------------- profiling off
if start off --stats; then
    check "with --stats alone there is no profile segment" sh -c "! grep -q '\.heap' /proc/$pid/maps"
    "$HZSTAT" --heap "$pid" >/dev/null 2>"$tmp/off.err"
    expect_rc "hzstat --heap of a process that does not profile" 4 $?
    check "which it says" grep -q 'records no heap profile' "$tmp/off.err"
    touch "$tmp/go1" "$tmp/go2"
    wait "$pid"
    expect_rc "prof_prog exits normally" 0 $?
else
    fail "prof_prog with --stats"
fi

# A value HAKOZUNA_PROFILE does not understand is said, and nothing is recorded.
rm -f "$tmp/go1" "$tmp/go2"
HAKOZUNA_PROFILE=yes "$HZRUN" -v "$variant" --stats -- "$prog" "$tmp" >"$tmp/typo.out" 2>"$tmp/typo.err" &
pid=$!
pids="$pids $pid"
if wait_lines "$tmp/typo.out" '^phase1' 1 "$pid" "$tmp/typo.err"; then
    check "HAKOZUNA_PROFILE=yes is reported" grep -q 'HAKOZUNA_PROFILE=yes not understood' "$tmp/typo.err"
    check "and records no profile" sh -c "! grep -q '\.heap' /proc/$pid/maps"
fi
touch "$tmp/go1" "$tmp/go2"
wait "$pid"

# ------------------------------------------------------------- bad arguments
"$HZSTAT" --heap >/dev/null 2>&1
expect_rc "--heap without a PID" 2 $?
"$HZSTAT" --heap -j 1 >/dev/null 2>&1
expect_rc "--heap with -j" 2 $?
"$HZSTAT" --heap nope >/dev/null 2>&1
expect_rc "--heap with a PID that is not a number" 2 $?
"$HZSTAT" --heap $$ >/dev/null 2>&1
expect_rc "--heap of a process without hakozuna stats" 4 $?
"$HZRUN" --profile=12k -- true >/dev/null 2>&1
expect_rc "hzrun --profile=12k" 2 $?

finish
