#!/bin/bash
# test_debug.sh - the checked variant (libhakozuna_debug.so) stops heap errors.
#
#   HZ_TEST_DEBUG_LIB    the checked library (libhakozuna_debug.so)
#   HZ_TEST_DEBUG_PROGS  directory holding the built debug_errors and debug_valgrind
#   HZ_TEST_DEFAULT_LIB  optional: the default library, to measure the slowdown
#
# Each error mode of debug_errors runs with the checked library preloaded and must
# end by SIGABRT (status 134) with exactly one "hakozuna:" line on stderr, naming
# the error, the address (0x...) and the size class.  "clean" must exit 0 with
# nothing on stderr.
#
# If valgrind is installed, memcheck runs debug_valgrind on the checked library and
# must report its planted leak ("definitely lost") and overrun ("Invalid write")
# against hakozuna's blocks, and a smaller clean run must show "ERROR SUMMARY: 0
# errors".  Without valgrind that part is skipped.
#
# With HZ_TEST_DEFAULT_LIB, a python3 workload (debug_errors clean without python3)
# is timed on both libraries; the slowdown is printed, and fails the test only
# above 10x.  Sub-programs run with exactly the library chosen here: any LD_PRELOAD
# the test driver set is dropped.  The driver runs this script once per variant
# (HZ_TEST_VARIANT); the valgrind and timing parts, the slow ones, run only in the
# hakozuna_debug pass (or when HZ_TEST_VARIANT is unset).
#
# Prints "N passed, M failed"; exits 0 when nothing failed, 77 when the checked
# variant is not configured (the variables are unset).

set -u
unset LD_PRELOAD

passed=0
failed=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ] && exit 0
    exit 1
}

if [ -z "${HZ_TEST_DEBUG_LIB-}" ] || [ -z "${HZ_TEST_DEBUG_PROGS-}" ]; then
    echo "SKIP: HZ_TEST_DEBUG_LIB and HZ_TEST_DEBUG_PROGS are not set (checked variant not built)"
    exit 77
fi
lib=$HZ_TEST_DEBUG_LIB
errors=$HZ_TEST_DEBUG_PROGS/debug_errors
vgprog=$HZ_TEST_DEBUG_PROGS/debug_valgrind
for f in "$lib" "$errors" "$vgprog"; do
    if [ ! -e "$f" ]; then
        fail "$f does not exist"
        finish
    fi
done

ulimit -c 0 2>/dev/null # aborts are expected: no core files
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hz-debug.XXXXXX") || {
    echo "FAIL: mktemp"
    exit 1
}
trap 'rm -rf "$tmp"' EXIT

if command -v timeout >/dev/null 2>&1; then
    limit() { timeout "$@"; }
else
    limit() { shift; "$@"; }
fi

# run LIB PROG ARGS...: stdout to $tmp/out, stderr to $tmp/err, status in $rc.  The
# shell's own "Aborted" notice is kept out of the log.
run() {
    local with=$1
    shift
    { limit 300 env LD_PRELOAD="$with" "$@" >"$tmp/out" 2>"$tmp/err"; } 2>/dev/null
    rc=$?
}

show() {
    sed 's/^/    stderr: /' "$tmp/err" | head -20
    sed 's/^/    stdout: /' "$tmp/out" | head -20
}

# ------------------------------------------------------------ error modes
# error MODE WORDS...: must abort with one report line holding every WORDS; a WORDS
# of the form "A|B" is met by either.
error() {
    local mode=$1 why="" line n w alt found
    shift
    run "$lib" "$errors" "$mode"
    n=$(grep -c '^hakozuna:' "$tmp/err")
    line=$(grep -m1 '^hakozuna:' "$tmp/err")
    [ "$rc" -eq 134 ] || why="$why; exit status $rc, want 134 (SIGABRT)"
    [ "$n" -eq 1 ] || why="$why; $n hakozuna: lines on stderr, want 1"
    for w in "$@" "size class"; do
        found=no
        alt=$w
        while :; do
            case $line in
            *"${alt%%|*}"*) found=yes ;;
            esac
            [ "$alt" = "${alt#*|}" ] && break
            alt=${alt#*|}
        done
        [ $found = yes ] || why="$why; no \"$w\" in the report"
    done
    echo "$line" | grep -Eq '0x[0-9a-f]{4,}' || why="$why; no address in the report"
    if [ -z "$why" ]; then
        pass "$mode: $line"
    else
        fail "$mode: ${why#; }"
        show
    fi
}

error double-free "double free"
error interior-free "invalid pointer"
error interior-usable "invalid pointer" "malloc_usable_size"
error never-allocated "invalid pointer"
error overrun "buffer overrun" "free"
error overrun-realloc "buffer overrun" "realloc"
error write-after-free "write to freed memory"
error write-after-free-first "write to freed memory" "byte +5"
error freed-header-write "write to freed memory" "header byte -16"
error freed-mark-write "write to freed memory" "header byte -8"
# The link word is also the core's encoded free-list link: once the quarantine has
# given the block back, the core's list check may be the one that sees the write.
error freed-link-write "write to freed memory|corrupted free list"
error free-sized-mismatch "size mismatch"
error aligned-mismatch "alignment mismatch"
error static-free "invalid pointer" "not hakozuna memory"
error foreign-free "invalid pointer" "not hakozuna memory"

run "$lib" "$errors" clean
if [ "$rc" -eq 0 ] && [ ! -s "$tmp/err" ] && [ ! -s "$tmp/out" ]; then
    pass "clean workload runs clean"
else
    fail "clean workload: exit status $rc, output not empty"
    show
fi

case ${HZ_TEST_VARIANT:-hakozuna_debug} in
hakozuna_debug) slow=1 ;;
*)
    slow=0
    echo "note: valgrind and timing checks run in the hakozuna_debug pass only"
    ;;
esac

# ---------------------------------------------------------------- valgrind
if [ "$slow" -eq 0 ]; then
    :
elif command -v valgrind >/dev/null 2>&1; then
    # --fair-sched: threads take turns often, so blocks freed by one thread reach their
    # owner's hands while valgrind watches both (without it, a read of a freed block's
    # header by its owner went unseen in most runs).
    vg() {
        { limit 600 env LD_PRELOAD="$lib" valgrind --fair-sched=yes --soname-synonyms=somalloc=NONE \
            --leak-check=full "$@" >"$tmp/out" 2>"$tmp/err"; } 2>/dev/null
        rc=$?
    }
    vg "$vgprog"
    why=""
    grep -q 'Invalid write' "$tmp/err" || why="$why; no \"Invalid write\""
    grep -Eq 'bytes after a (.* )?block of size 32' "$tmp/err" || why="$why; the overrun is not placed after the 32-byte block"
    grep -q '100 bytes in 1 blocks are definitely lost' "$tmp/err" || why="$why; no \"definitely lost\" 100-byte block"
    # The blocks must be hakozuna's, described to memcheck, not memcheck's own malloc.
    grep -A3 'definitely lost in loss record' "$tmp/err" | grep -q 'vgpreload_memcheck' &&
        why="$why; memcheck replaced hakozuna's malloc (no soname on the library?)"
    grep -A3 'definitely lost in loss record' "$tmp/err" | grep -Eq 'libhakozuna|hz_debug' ||
        why="$why; the lost block was not allocated by hakozuna"
    [ "$rc" -eq 0 ] || why="$why; exit status $rc"
    if [ -z "$why" ]; then
        pass "valgrind finds the planted leak and overrun on hakozuna's blocks"
    else
        fail "valgrind on debug_valgrind: ${why#; }"
        grep -E 'Invalid|lost|ERROR SUMMARY|hakozuna' "$tmp/err" | head -20 | sed 's/^/    /'
    fi

    vg "$errors" clean small
    if [ "$rc" -eq 0 ] && grep -q 'ERROR SUMMARY: 0 errors' "$tmp/err" &&
        ! grep -q '^hakozuna:' "$tmp/err"; then
        pass "valgrind: a clean run reports no errors"
    else
        fail "valgrind on a clean run: exit status $rc, $(grep 'ERROR SUMMARY' "$tmp/err")"
        grep -B2 -A12 -E 'Invalid|uninitialised|Mismatched|hakozuna:' "$tmp/err" | head -40 | sed 's/^/    /'
    fi
else
    echo "SKIP: valgrind is not installed (memcheck checks not run)"
fi

# ---------------------------------------------------------------- slowdown
now_ns() { date +%s%N; }
# best_ms LIB CMD...: the fastest of three runs, in milliseconds ("" on failure).
best_ms() {
    local with=$1 best="" t0 t1 ms
    shift
    for _ in 1 2 3; do
        t0=$(now_ns)
        limit 300 env LD_PRELOAD="$with" "$@" >/dev/null 2>&1 || return 1
        t1=$(now_ns)
        ms=$(((t1 - t0) / 1000000))
        if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
    done
    echo "$best"
}

if [ "$slow" -eq 0 ]; then
    :
elif [ -n "${HZ_TEST_DEFAULT_LIB-}" ] && [ -e "$HZ_TEST_DEFAULT_LIB" ]; then
    if command -v python3 >/dev/null 2>&1; then
        what="python3 workload"
        work=(python3 -c '
import json, random
random.seed(7)
d = {}
for i in range(200000):
    d[random.randrange(5000)] = "x" * random.randrange(3000)
blobs = [bytes(random.randrange(100000)) for _ in range(200)]
s = json.dumps({str(i): [i] * (i % 50) for i in range(20000)})
assert len(json.loads(s)) == 20000 and len(d) > 0 and blobs
')
    else
        what="debug_errors clean"
        work=("$errors" clean)
    fi
    base=$(best_ms "$HZ_TEST_DEFAULT_LIB" "${work[@]}")
    checked=$(best_ms "$lib" "${work[@]}")
    if [ -z "$base" ] || [ -z "$checked" ]; then
        fail "slowdown: the $what failed"
    else
        ratio=$(awk -v a="$checked" -v b="$base" 'BEGIN { printf "%.2f", a / (b > 0 ? b : 1) }')
        msg="slowdown on a $what: ${ratio}x (default $base ms, checked $checked ms)"
        if awk -v r="$ratio" 'BEGIN { exit !(r <= 10) }'; then
            pass "$msg"
        else
            fail "$msg: above 10x"
        fi
    fi
else
    echo "note: HZ_TEST_DEFAULT_LIB not set: slowdown not measured"
fi

finish
