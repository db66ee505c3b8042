#!/usr/bin/env bash
# bench_programs.sh - checks the benchmark programs in ${BENCH_DIR:-bench}:
#   - malformed or missing arguments give exit status 2 and a usage message;
#   - a tiny configuration of every program runs and prints ops/s=<decimal>
#     and peak_rss_kb=<n>;
#   - the multi-threaded remote-free program prints a sane EFFECTIVE_REMOTE
#     line;
#   - fixed seeds make the printed checksum reproducible, and a different seed
#     changes it;
#   - bench_core_latency, the cross-core probe, prints a round trip with two
#     CPUs and says there is none to measure with one;
#   - an allocation failure gives exit status 1 (only without LD_PRELOAD,
#     because it relies on an address-space limit);
#   - bench/programs.sh times a real program under glibc's malloc and the
#     variant under test, and rejects bad arguments.
# The programs use whatever malloc is in the process, so the script can also
# be run with LD_PRELOAD set.  Prints "N passed, M failed"; exits 1 on any
# failure.

set -u

BENCH_DIR=${BENCH_DIR:-bench}

PROGRAMS="bench_random_mixed_malloc_args bench_random_mixed_malloc_dist
bench_random_mixed_mt_remote_malloc bench_larson bench_cache_scratch
bench_xmalloc bench_realloc_string bench_rss_plateau bench_core_latency
bench_thread_churn bench_realloc_grow"

passed=0
failed=0

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_programs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
OUT="$tmp/out"
ERR="$tmp/err"
RC=0

if command -v timeout >/dev/null 2>&1; then
    TIMEOUT="timeout 120"
else
    TIMEOUT=""
fi

pass() {
    passed=$((passed + 1))
    echo "PASS: $*"
}

fail() {
    failed=$((failed + 1))
    echo "FAIL: $*"
    if [ -s "$ERR" ]; then
        sed 's/^/    stderr: /' "$ERR" | head -5
    fi
}

# run PROGRAM ARGS... : stdout in $OUT, stderr in $ERR, status in $RC.
run() {
    local prog=$1
    shift
    RC=0
    $TIMEOUT "$BENCH_DIR/$prog" "$@" >"$OUT" 2>"$ERR" || RC=$?
}

# expect_usage PROGRAM ARGS... : exit status 2 and a usage message on stderr.
expect_usage() {
    local prog=$1
    shift
    run "$prog" "$@"
    if [ "$RC" -eq 2 ] && grep -qi 'usage' "$ERR"; then
        pass "$prog rejects [$*]"
    else
        fail "$prog [$*]: expected exit 2 with a usage message, got exit $RC"
    fi
}

# expect_ok PROGRAM ARGS... : exit status 0, ops/s=<decimal> and peak_rss_kb=<n>.
expect_ok() {
    local prog=$1
    shift
    run "$prog" "$@"
    if [ "$RC" -eq 0 ] &&
        grep -Eq "^\[$prog\] .*ops/s=[0-9]+(\.[0-9]+)?( |\$)" "$OUT" &&
        grep -Eq "peak_rss_kb=[0-9]+( |\$)" "$OUT"; then
        pass "$prog runs [$*]"
        return 0
    fi
    fail "$prog [$*]: expected exit 0 with ops/s= and peak_rss_kb=, got exit $RC"
    sed 's/^/    stdout: /' "$OUT" | head -5
    return 1
}

# checksum PROGRAM ARGS... : prints the checksum of a successful run, or
# nothing.
checksum() {
    run "$@"
    if [ "$RC" -eq 0 ]; then
        sed -n 's/.* checksum=\(0x[0-9a-f]\{16\}\)\( .*\)\{0,1\}$/\1/p' "$OUT" | head -1
    fi
}

# expect_reproducible DESCRIPTION "ARGS A" "ARGS B" : the same checksum for two
# runs of A, and a different one for B (A and B differ only in the seed).
expect_reproducible() {
    local what=$1 a=$2 b=$3 c1 c2 c3
    # shellcheck disable=SC2086
    c1=$(checksum $a)
    # shellcheck disable=SC2086
    c2=$(checksum $a)
    # shellcheck disable=SC2086
    c3=$(checksum $b)
    if [ -n "$c1" ] && [ "$c1" = "$c2" ]; then
        pass "$what: checksum reproducible ($c1)"
    else
        fail "$what: checksum not reproducible ('$c1' vs '$c2')"
    fi
    if [ -n "$c3" ] && [ "$c3" != "$c1" ]; then
        pass "$what: another seed gives another checksum ($c3)"
    else
        fail "$what: checksum '$c3' for another seed should differ from '$c1'"
    fi
}

# ------------------------------------------------------------- presence
for p in $PROGRAMS; do
    if [ -x "$BENCH_DIR/$p" ]; then
        pass "$p is present"
    else
        fail "$p is missing from $BENCH_DIR"
    fi
done

# ------------------------------------------------------- malformed arguments
P=bench_random_mixed_malloc_args
expect_usage $P
expect_usage $P 1000 64 16
expect_usage $P abc 64 16 128
expect_usage $P -5 64 16 128
expect_usage $P 1000 64 256 128
expect_usage $P 0 64 16 128
expect_usage $P 1000 0 16 128
expect_usage $P 1000 64 0 128
expect_usage $P +5 64 16 128
expect_usage $P 12abc 64 16 128
expect_usage $P "" 64 16 128
expect_usage $P " 5" 64 16 128
expect_usage $P 99999999999999999999999 64 16 128
expect_usage $P 1000 64 16 128 0xZZ
expect_usage $P 1000 64 16 128 0x
expect_usage $P 1000 64 16 128 0x12345678 extra

P=bench_random_mixed_malloc_dist
expect_usage $P
expect_usage $P abc 64 16 128
expect_usage $P -5 64 16 128
expect_usage $P 1000 64 256 128
expect_usage $P 1000 64 16 128 gauss
expect_usage $P 1000 64 16 128 0x1 app extra
expect_usage $P 1000 64 16 128 uniform 1
expect_usage $P 1000 64 16 32768 0x12345678 trimix 16 256 50 257 2048 0 2049 32768 0
expect_usage $P 1000 64 16 32768 0x12345678 trimix 16 256 50 257 2048 50 2049 32768 1
expect_usage $P 1000 64 16 32768 0x12345678 trimix 16 256 100 257 2048 0 2049 32768
expect_usage $P 1000 64 16 32768 0x12345678 trimix 16 256 abc 257 2048 0 2049 32768 0
expect_usage $P 1000 64 16 32768 0x12345678 trimix 16 256 -5 257 2048 0 2049 32768 0
expect_usage $P 1000 64 16 32768 0x12345678 trimix 256 16 100 257 2048 0 2049 32768 0
expect_usage $P 1000 64 16 1024 0x12345678 trimix 16 256 50 257 2048 50 2049 32768 0
expect_usage $P 1000 64 16 32768 0x12345678 trimix 16 256 101 257 2048 0 2049 32768 0
expect_usage $P 1000 64 16 32768 0xnothex app

P=bench_random_mixed_mt_remote_malloc
expect_usage $P
expect_usage $P 2 1000 64 16 128
expect_usage $P abc 1000 64 16 128 50
expect_usage $P -5 1000 64 16 128 50
expect_usage $P 2 1000 64 256 128 50
expect_usage $P 2 1000 64 16 128 101
expect_usage $P 2 1000 64 16 128 -1
expect_usage $P 0 1000 64 16 128 50
expect_usage $P 1025 1000 64 16 128 50
expect_usage $P 2 1000 64 16 128 50 0
expect_usage $P 2 1000 64 16 128 50 1024 0xg
expect_usage $P 2 1000 64 16 128 50 1024 1 extra

P=bench_larson
expect_usage $P
expect_usage $P 2 3 64 16 256
expect_usage $P abc 3 64 16 256 100
expect_usage $P -5 3 64 16 256 100
expect_usage $P 2 3 64 256 16 100
expect_usage $P 0 3 64 16 256 100
expect_usage $P 2 0 64 16 256 100
expect_usage $P 2 3 0 16 256 100
expect_usage $P 2 3 64 16 256 0

P=bench_thread_churn
expect_usage $P
expect_usage $P 64 16
expect_usage $P abc 16 240
expect_usage $P -5 16 240
expect_usage $P 0 16 240
expect_usage $P 64 0 240
expect_usage $P 64 2000 240
expect_usage $P 64 16 0
expect_usage $P 64 16 240 0xg
expect_usage $P 64 16 240 1 extra

P=bench_cache_scratch
expect_usage $P
expect_usage $P 2 100 8
expect_usage $P abc 100 8 10
expect_usage $P -5 100 8 10
expect_usage $P 2 100 0 10
expect_usage $P 2 100 8 0
expect_usage $P 2 100 8 10 extra

P=bench_xmalloc
expect_usage $P
expect_usage $P 2 10 16 16
expect_usage $P abc 10 16 16 256
expect_usage $P -5 10 16 16 256
expect_usage $P 2 10 16 256 16
expect_usage $P 1 10 16 16 256
expect_usage $P 2 10 0 16 256

P=bench_realloc_string
expect_usage $P
expect_usage $P abc 512
expect_usage $P -5 512
expect_usage $P 1000 0
expect_usage $P 1000 512 0x12345678 extra

P=bench_realloc_grow
expect_usage $P
expect_usage $P 10 1048576
expect_usage $P abc 1048576 0
expect_usage $P 0 1048576 0
expect_usage $P 10 4095 0
expect_usage $P 10 1048576 1048577
expect_usage $P 10 1048576 0 extra

P=bench_rss_plateau
expect_usage $P
expect_usage $P 1 16 256 2
expect_usage $P abc 16 256 2 5
expect_usage $P -5 16 256 2 5
expect_usage $P 1 256 16 2 5
expect_usage $P 1 16 256 0 5
expect_usage $P 0 16 256 2 5

# -------------------------------------------------------- tiny configurations
expect_ok bench_random_mixed_malloc_args 20000 64 16 1024
expect_ok bench_random_mixed_malloc_args 1000 1 1 1 42
expect_ok bench_random_mixed_malloc_dist 20000 64 16 1024
expect_ok bench_random_mixed_malloc_dist 20000 64 16 32768 0x12345678 app
expect_ok bench_random_mixed_malloc_dist 20000 64 16 32768 app
expect_ok bench_random_mixed_malloc_dist 20000 64 16 32768 0x12345678 trimix 16 256 100 257 2048 0 2049 32768 0
expect_ok bench_random_mixed_malloc_dist 20000 64 16 32768 7 trimix 16 256 60 257 2048 30 2049 32768 10
expect_ok bench_random_mixed_mt_remote_malloc 2 20000 64 16 1024 50
expect_ok bench_random_mixed_mt_remote_malloc 3 5000 32 16 256 30 1
expect_ok bench_larson 2 3 64 16 256 500
expect_ok bench_thread_churn 40 16 240
expect_ok bench_thread_churn 5 2 1 9
expect_ok bench_cache_scratch 2 1000 8 10
expect_ok bench_xmalloc 2 100 16 16 256
expect_ok bench_xmalloc 3 100 16 16 256
expect_ok bench_realloc_string 20000 512
expect_ok bench_realloc_grow 20 4194304 0
expect_ok bench_realloc_grow 5 3000000 65536
if expect_ok bench_rss_plateau 2 16 1024 2 5; then
    if grep -Eq 'rss_kb_before=[0-9]+ rss_kb_peak=[0-9]+ rss_kb_after_free=[0-9]+' "$OUT" &&
        [ "$(grep -c ' sample=[0-9]* t_ms=[0-9.]* rss_kb=[0-9]*$' "$OUT")" -eq 2 ] &&
        tail -n 1 "$OUT" | grep -Eq 'rss_plateau_kb=[0-9]+$'; then
        pass "bench_rss_plateau prints the RSS fields, 2 samples and rss_plateau_kb"
    else
        fail "bench_rss_plateau output lacks RSS fields, samples or rss_plateau_kb"
    fi
fi

# ------------------------------------------------------ EFFECTIVE_REMOTE line
# effective_remote THREADS ITERS REMOTE_PCT : prints "actual fallback_rate" of
# a run with a 65536-slot ring (large enough that it never fills: at most
# ITERS / 2 + WS blocks can be sent), or nothing.
effective_remote() {
    run bench_random_mixed_mt_remote_malloc "$1" "$2" 64 16 1024 "$3" 65536
    [ "$RC" -eq 0 ] || return 0
    sed -n "s/^\[EFFECTIVE_REMOTE\] target=$3% actual=\([0-9]*\.[0-9][0-9]\)% fallback_rate=\([0-9]*\.[0-9][0-9][0-9]\)%\$/\1 \2/p" "$OUT"
}

# in_range VALUE LO HI (decimals)
in_range() {
    awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v + 0 >= lo + 0 && v + 0 <= hi + 0) }'
}

check_remote() {
    local threads=$1 pct=$2 lo=$3 hi=$4 r actual fb
    r=$(effective_remote "$threads" 40000 "$pct")
    actual=${r% *}
    fb=${r#* }
    if [ -n "$r" ] && in_range "$actual" "$lo" "$hi" && in_range "$fb" 0 0; then
        pass "EFFECTIVE_REMOTE T=$threads R=$pct: actual=$actual% fallback_rate=$fb%"
    else
        fail "EFFECTIVE_REMOTE T=$threads R=$pct: expected actual in [$lo, $hi] and no fallback, got '$r'"
    fi
}

check_remote 2 50 45 55
check_remote 2 0 0 0
check_remote 2 100 100 100
check_remote 1 50 0 0
check_remote 4 25 20 30

run bench_random_mixed_mt_remote_malloc 3 5000 32 16 256 30 1
if [ "$RC" -eq 0 ] &&
    grep -Eq '^\[EFFECTIVE_REMOTE\] target=30% actual=[0-9]+\.[0-9]{2}% fallback_rate=[0-9]+\.[0-9]{3}%$' "$OUT"; then
    pass "EFFECTIVE_REMOTE line with a 1-slot ring"
else
    fail "EFFECTIVE_REMOTE line missing or malformed with a 1-slot ring"
fi

# ------------------------------------------------------------ in_flight_peak
# The most blocks seen in the rings at once: never more than the rings hold (one
# slot each here), none without a second thread.
in_flight() {
    run bench_random_mixed_mt_remote_malloc "$@"
    [ "$RC" -eq 0 ] || return 0
    sed -n 's/.* in_flight_peak=\([0-9][0-9]*\) checksum=.*/\1/p' "$OUT"
}
f=$(in_flight 3 20000 32 16 256 90 1)
if [ -n "$f" ] && [ "$f" -le 3 ]; then
    pass "in_flight_peak=$f with three 1-slot rings"
else
    fail "in_flight_peak with three 1-slot rings: expected 0..3, got '$f'"
fi
f=$(in_flight 1 20000 32 16 256 90)
if [ "$f" = 0 ]; then
    pass "in_flight_peak=0 with one thread"
else
    fail "in_flight_peak with one thread: expected 0, got '$f'"
fi

# -------------------------------------------------------- reproducibility
expect_reproducible "random_mixed_args" \
    "bench_random_mixed_malloc_args 50000 128 16 4096" \
    "bench_random_mixed_malloc_args 50000 128 16 4096 0x1"
expect_reproducible "random_mixed_dist uniform" \
    "bench_random_mixed_malloc_dist 50000 128 16 4096 0x12345678 uniform" \
    "bench_random_mixed_malloc_dist 50000 128 16 4096 0x2 uniform"
expect_reproducible "random_mixed_dist app" \
    "bench_random_mixed_malloc_dist 50000 128 16 32768 0x12345678 app" \
    "bench_random_mixed_malloc_dist 50000 128 16 32768 0x3 app"
expect_reproducible "random_mixed_dist trimix" \
    "bench_random_mixed_malloc_dist 50000 128 16 32768 0x12345678 trimix 16 256 70 257 2048 20 2049 32768 10" \
    "bench_random_mixed_malloc_dist 50000 128 16 32768 12345 trimix 16 256 70 257 2048 20 2049 32768 10"
expect_reproducible "realloc_string" \
    "bench_realloc_string 50000 1024" \
    "bench_realloc_string 50000 1024 0x4"
expect_reproducible "rss_plateau" \
    "bench_rss_plateau 2 16 1024 1 0" \
    "bench_rss_plateau 2 16 1024 1 0 0x5"
expect_reproducible "mt_remote" \
    "bench_random_mixed_mt_remote_malloc 2 20000 64 16 1024 50 65536 0x12345678" \
    "bench_random_mixed_mt_remote_malloc 2 20000 64 16 1024 50 65536 0x6"
expect_reproducible "larson" \
    "bench_larson 2 3 64 16 256 500" \
    "bench_larson 2 3 64 16 256 500 0x7"
expect_reproducible "thread_churn" \
    "bench_thread_churn 64 8 240" \
    "bench_thread_churn 64 8 240 0x9"
expect_reproducible "xmalloc" \
    "bench_xmalloc 4 50 16 16 256" \
    "bench_xmalloc 4 50 16 16 256 0x8"

# The uniform distribution is the loop of the _args program.
c1=$(checksum bench_random_mixed_malloc_args 50000 128 16 4096 0x9)
c2=$(checksum bench_random_mixed_malloc_dist 50000 128 16 4096 0x9)
if [ -n "$c1" ] && [ "$c1" = "$c2" ]; then
    pass "args and dist uniform perform the same sequence"
else
    fail "args ($c1) and dist uniform ($c2) should perform the same sequence"
fi

# The remote hand-off must not change which operations the threads perform.
c1=$(checksum bench_random_mixed_mt_remote_malloc 2 20000 64 16 1024 50 65536)
c2=$(checksum bench_random_mixed_mt_remote_malloc 2 20000 64 16 1024 50 1)
if [ -n "$c1" ] && [ "$c1" = "$c2" ]; then
    pass "mt_remote checksum independent of ring size"
else
    fail "mt_remote checksum depends on ring size ($c1 vs $c2)"
fi

# --------------------------------------------------------- core latency
# The cross-core probe hzbench runs around multi-threaded cells: a round trip
# in ns with two CPUs (at most 2000 of them here; fewer when the machine is so
# busy that 50 ms pass first), "-" with one (taskset), exit 2 on bad arguments.
expect_usage bench_core_latency 0
expect_usage bench_core_latency 1 2
expect_usage bench_core_latency x
run bench_core_latency 2000
if [ "$(nproc 2>/dev/null || echo 1)" -lt 2 ]; then
    echo "SKIP: bench_core_latency round trip (one CPU)"
elif [ "$RC" -eq 0 ] && grep -Eq '^\[bench_core_latency\] cpus=[0-9]+,[0-9]+ round_trips=[1-9][0-9]* rtt_ns=[1-9][0-9]*$' "$OUT"; then
    pass "bench_core_latency prints the round trip between two CPUs"
else
    fail "bench_core_latency 2000: exit $RC, output '$(head -1 "$OUT")'"
fi
first_cpu=$(taskset -pc $$ 2>/dev/null | sed -n 's/.*: *\([0-9]*\).*/\1/p')
if [ -n "$first_cpu" ]; then
    RC=0
    taskset -c "$first_cpu" "$BENCH_DIR/bench_core_latency" >"$OUT" 2>"$ERR" || RC=$?
    if [ "$RC" -eq 0 ] &&
        grep -Eq "^\[bench_core_latency\] cpus=$first_cpu round_trips=0 rtt_ns=-\$" "$OUT"; then
        pass "bench_core_latency on one CPU says there is nothing to measure"
    else
        fail "bench_core_latency on one CPU: exit $RC, output '$(head -1 "$OUT")'"
    fi
fi

# -------------------------------------------------------- allocation failure
# Under an address-space limit a 1 GiB malloc must fail; the program has to
# report it and exit with status 1.  Skipped with LD_PRELOAD, and when the
# program cannot even run a trivial configuration under the limit (e.g. a
# sanitizer build that reserves a large shadow region).
# limited ARGS... : runs bench_random_mixed_malloc_args under the limit.
limited() {
    RC=0
    {
        (
            ulimit -v 262144
            exec $TIMEOUT "$BENCH_DIR/bench_random_mixed_malloc_args" "$@"
        ) >"$OUT" 2>"$ERR"
    } 2>/dev/null || RC=$?
}

if [ -n "${LD_PRELOAD:-}" ]; then
    echo "SKIP: allocation failure check (LD_PRELOAD is set)"
else
    limited 1 1 1 1
    if [ "$RC" -ne 0 ]; then
        echo "SKIP: allocation failure check (cannot run under a 256 MiB address-space limit)"
    else
        limited 4 4 1073741824 1073741824
        if [ "$RC" -eq 1 ] && grep -qi 'error' "$ERR"; then
            pass "allocation failure gives exit status 1"
        else
            fail "allocation failure: expected exit 1 with an error message, got exit $RC"
        fi
    fi
fi

# ------------------------------------------- real programs (bench/programs.sh)
# One round of one program under glibc's malloc and the variant under test: a
# table row for each, with times and a ratio; bad arguments give exit status 2.
PROGRAMS_SH="$(dirname "$0")/../bench/programs.sh"
if [ ! -x /usr/bin/time ] || ! command -v perl >/dev/null 2>&1; then
    echo "SKIP: bench/programs.sh (needs /usr/bin/time and perl)"
else
    variant=${HZ_TEST_VARIANT:-hakozuna}
    lib=${HZ_TEST_LIBDIR:-$BENCH_DIR/../.libs}/lib$variant.so
    RC=0
    env -u LD_PRELOAD bash "$PROGRAMS_SH" --rounds 1 --only perl glibc= "$variant=$lib" \
        >"$OUT" 2>"$ERR" || RC=$?
    row='^\| perl \| %s \| [0-9]+\.[0-9]{2} \| [0-9]+\.[0-9]{2} \| [0-9]+\.[0-9]{2} \| [1-9][0-9]* \| [0-9]+\.[0-9]{2} \|$'
    # shellcheck disable=SC2059
    if [ "$RC" -eq 0 ] && grep -Eq "$(printf "$row" glibc)" "$OUT" &&
        grep -Eq "$(printf "$row" "$variant")" "$OUT" &&
        [ "$(grep -c '^| perl |' "$OUT")" -eq 2 ]; then
        pass "programs.sh times perl under glibc and $variant"
    else
        fail "programs.sh: expected exit 0 and a row per library, got exit $RC"
        sed 's/^/    stdout: /' "$OUT" | head -5
    fi
    for bad in "--rounds 0 glibc=" "--rounds x glibc=" "glibc" "x=/nonexistent/lib.so" "--frobnicate glibc=" ""; do
        RC=0
        # shellcheck disable=SC2086
        bash "$PROGRAMS_SH" $bad >"$OUT" 2>"$ERR" || RC=$?
        if [ "$RC" -eq 2 ] && [ -s "$ERR" ]; then
            pass "programs.sh rejects [$bad]"
        else
            fail "programs.sh [$bad]: expected exit 2 with a message, got exit $RC"
        fi
    done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
