#!/usr/bin/env bash
# test_hzbench.sh - checks tools/hzbench, the benchmark runner, on a tiny matrix:
#   - bad options, an unknown allocator, a missing build directory: non-zero exit;
#   - a 2-cell matrix with --runs 2 under hakozuna and glibc writes a log per
#     cell starting with a [BENCH-HEADER] line (commit, sha256 of every library,
#     CPU), records the alternating run order, and writes results.json (valid
#     JSON), summary.md (a table with both allocators, a ratio column and each
#     run's page faults and CPU times, never more CPU than its wall time) and,
#     when gnuplot is installed, chart.png;
#   - each run of the multi-threaded cell is preceded and followed by the
#     cross-core probe (bench_core_latency), recorded in results.json, the log
#     and a column of summary.md; a cell's runs are split by machine state
#     only when the probes span two (checked on made-up runs); --no-probe;
#   - a program whose checksum changes from run to run is reported as a
#     checksum mismatch with exit status 1;
#   - without time(1) (HZBENCH_TIME empty) a program's own peak RSS is kept and
#     one that prints none gets wait4's, labelled an upper bound;
#   - a library given with --peer NAME=PATH (a copy of libhakozuna.so) is
#     preloaded, listed with its path and version, and counted as a peer in
#     the ratios, while the same library given as an --allocators NAME=PATH
#     item is compared but not counted; every run gets
#     GLIBC_TUNABLES=glibc.pthread.rseq=0 added to the caller's tunables;
#   - tools/check_instructions.py records the callgrind figures of the
#     single-threaded cells (--update) and fails on a cell that grew more than
#     3 % over its recorded figure.
# The build directory is $HZ_BUILDDIR (default: the current directory).  Prints
# "N passed, M failed"; exits 1 on any failure, 77 when it cannot run.

set -u

BUILDDIR=${HZ_BUILDDIR:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
HZBENCH="$HERE/../tools/hzbench"

if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 not found"
    exit 77
fi
if [ ! -x "$BUILDDIR/bench/bench_random_mixed_malloc_args" ] ||
    [ ! -e "$BUILDDIR/.libs/libhakozuna.so" ]; then
    echo "SKIP: $BUILDDIR has no built benchmarks or libhakozuna.so (set HZ_BUILDDIR)"
    exit 77
fi

. "$(dirname "$0")/testlib.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_hzbench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# expect_usage_error DESCRIPTION ARGS... : exit status 2 and an error message.
expect_usage_error() {
    local what=$1 rc=0
    shift
    python3 "$HZBENCH" "$@" >"$tmp/usage.out" 2>&1 || rc=$?
    if [ "$rc" -eq 2 ] && grep -qi 'error' "$tmp/usage.out"; then
        pass "$what gives exit status 2"
    else
        fail "$what: expected exit status 2 with an error, got $rc"
        sed 's/^/    /' "$tmp/usage.out" | head -5
    fi
}

expect_usage_error "an unknown option" --builddir "$BUILDDIR" --no-such-option
expect_usage_error "--runs 0" --builddir "$BUILDDIR" --runs 0
expect_usage_error "--quick with --full" --builddir "$BUILDDIR" --quick --full
expect_usage_error "an unknown allocator" --builddir "$BUILDDIR" --allocators hakozuna,nosuchmalloc \
    --out "$tmp/unknown"
expect_usage_error "a missing build directory" --builddir "$tmp/no-such-dir"
expect_usage_error "an unknown cell" --builddir "$BUILDDIR" --cell no_such_cell --list
mkdir -p "$tmp/emptybuild"
expect_usage_error "a build directory without benchmarks" --builddir "$tmp/emptybuild" --list

cat >"$tmp/matrix" <<'EOF'
# name       program                          arguments
st_tiny      bench_random_mixed_malloc_args   20000 64 16 1024
mt_tiny      bench_random_mixed_mt_remote_malloc 2 20000 64 16 1024 50 20000
EOF

OUT="$tmp/out"
rc=0
python3 "$HZBENCH" --builddir "$BUILDDIR" --matrix "$tmp/matrix" --runs 2 \
    --allocators hakozuna,glibc --out "$OUT" >"$tmp/run.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ]; then
    pass "hzbench runs a 2-cell matrix"
else
    fail "hzbench on a 2-cell matrix: exit status $rc"
    sed 's/^/    /' "$tmp/run.out" | tail -10
fi

# ------------------------------------------------------------- cell logs
for cell in st_tiny mt_tiny; do
    log="$OUT/$cell.log"
    if [ ! -f "$log" ]; then
        fail "$cell.log missing"
        continue
    fi
    first=$(head -n 1 "$log")
    if [[ $first == "[BENCH-HEADER] "* ]] &&
        grep -Eq ' commit=[0-9a-f]{4,}(-dirty)?( |$)| commit=unknown( |$)' <<<"$first" &&
        grep -Eq ' sha256\.hakozuna=[0-9a-f]{64}( |$)' <<<"$first" &&
        grep -Eq ' sha256\.glibc=[0-9a-f]{64}( |$)' <<<"$first" &&
        grep -Eq ' cpu=[^ ]' <<<"$first" &&
        grep -Eq ' cores=[0-9]+' <<<"$first" &&
        grep -Eq ' kernel=[^ ]' <<<"$first" &&
        grep -Eq ' loadavg=' <<<"$first" &&
        grep -Eq ' configure=' <<<"$first" &&
        grep -Eq '^\[BENCH-HEADER\] date=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z ' <<<"$first"; then
        pass "$cell.log starts with a [BENCH-HEADER] line (commit, sha256, CPU, ...)"
    else
        fail "$cell.log: bad or missing [BENCH-HEADER] line: $first"
    fi
    order=$(sed -n 's/^\[RUN\] .* alloc=\([^ ]*\) run=\([0-9]*\)\/2 .*/\1#\2/p' "$log" | tr '\n' ' ')
    if [ "$order" = "hakozuna#1 glibc#1 hakozuna#2 glibc#2 " ]; then
        pass "$cell.log records the alternating order ($order)"
    else
        fail "$cell.log: run order '$order', expected hakozuna#1 glibc#1 hakozuna#2 glibc#2"
    fi
    if grep -Eq '^hakozuna#2 \| .*ops/s=[0-9]' "$log" && grep -Eq '^glibc#1 \| .*ops/s=[0-9]' "$log"; then
        pass "$cell.log holds the raw output prefixed with allocator and run"
    else
        fail "$cell.log lacks the prefixed raw output of the runs"
    fi
done
if grep -q '^hakozuna#1 | \[EFFECTIVE_REMOTE\] target=50% ' "$OUT/mt_tiny.log"; then
    pass "mt_tiny.log keeps the [EFFECTIVE_REMOTE] line"
else
    fail "mt_tiny.log lacks the [EFFECTIVE_REMOTE] line"
fi

# ------------------------------------------------------------ results.json
if python3 - "$OUT/results.json" "$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
ncpu = int(sys.argv[2])
assert [c["name"] for c in r["cells"]] == ["st_tiny", "mt_tiny"], "cells"
for c in r["cells"]:
    assert len(c["runs"]) == 4, "4 runs per cell"
    assert [x["alloc"] for x in c["runs"]] == ["hakozuna", "glibc", "hakozuna", "glibc"], "order"
    assert all(x["ok"] and x["ops_per_s"] > 0 and x["peak_rss_kb"] > 0 for x in c["runs"]), "runs"
    assert c["checksum_ok"] and len(c["checksums"]) == 1, "checksum"
    # Each run's own page faults and CPU time (wait4 of that run), never more CPU
    # than its wall time allows: not the runner's, nor a sum over earlier runs.
    for x in c["runs"]:
        assert isinstance(x["minor_faults"], int) and x["minor_faults"] > 0, "minor faults"
        assert x["user_s"] >= 0 and x["sys_s"] >= 0, "CPU times"
        assert x["user_s"] + x["sys_s"] <= x["wall_s"] * ncpu + 0.05, "CPU time over wall time"
    s = c["stats"]
    for a in ("hakozuna", "glibc"):
        assert s[a]["median_minor_faults"] > 0 and s[a]["median_user_s"] >= 0 \
            and s[a]["median_sys_s"] >= 0, "medians of faults and CPU times"
    assert abs(s["glibc"]["ratio_to_best_peer"] - 1.0) < 1e-9, "glibc is the only peer"
    assert s["hakozuna"]["ratio_to_best_peer"] > 0, "ratio"
    assert s["hakozuna"]["min_ops_per_s"] <= s["hakozuna"]["median_ops_per_s"] \
        <= s["hakozuna"]["max_ops_per_s"], "median between min and max"
mt = r["cells"][1]["runs"][0]
assert mt["fallback_rate_pct"] == 0.0 and not mt["invalid_fallback"], "ring of ITERS slots"
assert len(r["header"]["libs"]["hakozuna"]["sha256"]) == 64, "sha256"
assert r["problems"] == [], r["problems"]
EOF
then
    pass "results.json parses and holds the runs, statistics and ratios"
else
    fail "results.json is missing, does not parse or lacks expected content"
fi

# -------------------------------------------------------------- summary.md
S="$OUT/summary.md"
if [ -f "$S" ] && grep -q '^| allocator | median Mops/s | min | max | ratio to best peer |' "$S" &&
    grep -q ' | RSS ratio to lowest peer | minor faults | user s | system s |' "$S" &&
    grep -Eq '^\| hakozuna \| .* \| [0-9]+ \| [0-9]+\.[0-9]{2} \| [0-9]+\.[0-9]{2} \| ' "$S" &&
    grep -Eq '^\| hakozuna \| [0-9]+\.[0-9]{2} \| .* \| [0-9]+\.[0-9]{2} \|' "$S" &&
    grep -Eq '^\| glibc \(best peer\) \| [0-9]+\.[0-9]{2} \| .* \| 1\.00 \|' "$S" &&
    [ "$(grep -c '^### ' "$S")" -eq 2 ]; then
    pass "summary.md has a table per cell with both allocators, the ratio column and the faults and CPU times"
else
    fail "summary.md lacks the per-cell tables with hakozuna, glibc, ratios, faults and CPU times"
fi

# ------------------------------------------------------- cross-core probe
# Every run of the multi-threaded cell has the round trips measured just before
# and after it (bench_core_latency); the single-threaded cell's runs have none.
# With one CPU to run on there is nothing to measure, and no run has them.
ncpu=$(nproc 2>/dev/null || echo 1)
if python3 - "$OUT/results.json" "$ncpu" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
st, mt = r["cells"]
assert all("core_rtt_ns" not in x for x in st["runs"]), "no probe around a single thread"
if int(sys.argv[2]) >= 2:
    # None where a probe failed (its other thread kept off its CPU for a second)
    for x in mt["runs"]:
        v = x["core_rtt_ns"]
        assert len(v) == 2 and all(n is None or (isinstance(n, int) and n > 0) for n in v), v
    assert any(n for x in mt["runs"] for n in x["core_rtt_ns"]), "some probe measured"
else:
    assert all("core_rtt_ns" not in x for x in mt["runs"]), "one CPU: no probe"
EOF
then
    pass "the multi-threaded cell's runs have the cross-core round trip before and after them"
else
    fail "results.json lacks the cross-core probes of the multi-threaded runs"
fi
if [ "$ncpu" -lt 2 ] || { grep -q 'cross-core round trip ns' "$S" &&
    [ "$(grep -c '^\[PROBE\] core_rtt_ns=' "$OUT/mt_tiny.log")" -eq 8 ] &&
    ! grep -q '^\[PROBE\]' "$OUT/st_tiny.log"; }; then
    pass "summary.md has the round-trip column; mt_tiny.log has two probes per run"
else
    fail "the round-trip column or the [PROBE] lines of mt_tiny.log are missing"
fi

# How a cell's runs are split by machine state (machine_states), on made-up runs:
# two runs near, two far per allocator, one whose state changed during it; and
# probes within a factor of two are one state.
if python3 - "$HZBENCH" <<'EOF'
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("hzbench", sys.argv[1])
spec = importlib.util.spec_from_loader("hzbench", loader)
hz = importlib.util.module_from_spec(spec)
loader.exec_module(hz)
allocs = [{"name": "hakozuna", "kind": "hakozuna"}, {"name": "peer", "kind": "peer"}]
def run(alloc, before, after, mops):
    return {"alloc": alloc, "ok": True, "core_rtt_ns": [before, after], "ops_per_s": mops * 1e6}
runs = [run("hakozuna", 100, 110, 40), run("hakozuna", 500, 520, 20),
        run("peer", 120, 100, 30), run("peer", 480, 510, 25), run("peer", 100, 500, 99)]
ms = hz.machine_states(runs, allocs)
assert ms["cut_ns"] == 228 and ms["min_ns"] == 100 and ms["max_ns"] == 520, ms
assert ms["changed_runs"] == 1, ms
near, far = ms["states"]
assert near["best_peer"] == "peer"
assert abs(near["stats"]["hakozuna"]["ratio_to_best_peer"] - 40 / 30) < 1e-9
assert far["stats"]["peer"]["runs"] == 1
assert abs(far["stats"]["hakozuna"]["ratio_to_best_peer"] - 0.8) < 1e-9
one = [run("hakozuna", 100, 150, 40), run("peer", 190, 120, 30)]
assert hz.machine_states(one, allocs) is None
assert hz.machine_states([dict(x, core_rtt_ns=[None, None]) for x in runs], allocs) is None
EOF
then
    pass "runs are split by machine state only when the probes span two states"
else
    fail "machine_states splits made-up runs wrongly"
fi

rc=0
python3 "$HZBENCH" --builddir "$BUILDDIR" --matrix "$tmp/matrix" --cell mt_tiny --runs 1 \
    --allocators hakozuna --no-probe --no-chart --out "$tmp/noprobe" >"$tmp/noprobe.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && ! grep -q PROBE "$tmp/noprobe/mt_tiny.log" &&
    ! grep -q 'cross-core' "$tmp/noprobe/summary.md"; then
    pass "--no-probe runs the multi-threaded cell without the probe"
else
    fail "--no-probe: exit status $rc, or probes still taken"
fi

# ------------------------------------------------------------------ chart
if command -v gnuplot >/dev/null 2>&1; then
    if [ -s "$OUT/chart.png" ] && [ "$(head -c 4 "$OUT/chart.png" | od -An -c | tr -d ' ')" = "211PNG" ]; then
        pass "chart.png produced (gnuplot)"
    else
        fail "gnuplot is installed but chart.png is missing or not a PNG"
    fi
else
    echo "SKIP: chart.png check (gnuplot not installed)"
fi

# ----------------------------------------------------- existing results dir
rc=0
python3 "$HZBENCH" --builddir "$BUILDDIR" --matrix "$tmp/matrix" --runs 1 \
    --allocators glibc --out "$OUT" >"$tmp/again.out" 2>&1 || rc=$?
if [ "$rc" -eq 2 ]; then
    pass "an --out directory that already holds results is refused"
else
    fail "reusing an --out directory with results: exit status $rc, expected 2"
fi

# ------------------------------------------------------- checksum mismatch
# A "benchmark" whose checksum differs on every run must be reported.
cat >"$tmp/fake_bench" <<'EOF'
#!/bin/sh
echo "[fake_bench] ops/s=1000.0 checksum=0x$$"
EOF
chmod +x "$tmp/fake_bench"
echo "fake $tmp/fake_bench" >"$tmp/matrix2"
rc=0
python3 "$HZBENCH" --builddir "$BUILDDIR" --matrix "$tmp/matrix2" --runs 2 \
    --allocators hakozuna,glibc --out "$tmp/out2" --no-chart >"$tmp/run2.out" 2>&1 || rc=$?
if [ "$rc" -eq 1 ] && grep -q 'CHECKSUM MISMATCH' "$tmp/run2.out" &&
    grep -q 'CHECKSUM MISMATCH' "$tmp/out2/summary.md" && [ ! -e "$tmp/out2/chart.png" ]; then
    pass "a checksum mismatch is reported with exit status 1"
else
    fail "checksum mismatch: exit status $rc, expected 1 with CHECKSUM MISMATCH in output and summary"
fi

# ----------------------------------------------------------- without time(1)
# As on a system without time(1) (HZBENCH_TIME empty): a program that prints its
# own peak RSS keeps it; for one that does not, the peak comes from wait4 and is
# labelled an upper bound.  With time(1), that program's peak is time's %M.
cat >"$tmp/quiet_bench" <<'EOF'
#!/bin/sh
echo "[quiet_bench] ops/s=1000.0 checksum=0x1"
EOF
chmod +x "$tmp/quiet_bench"
printf 'quiet %s\nst_tiny bench_random_mixed_malloc_args 20000 64 16 1024\n' \
    "$tmp/quiet_bench" >"$tmp/matrix5"
rc=0
HZBENCH_TIME= python3 "$HZBENCH" --builddir "$BUILDDIR" --matrix "$tmp/matrix5" --runs 1 \
    --allocators hakozuna,glibc --out "$tmp/out5" --no-chart >"$tmp/run5.out" 2>&1 || rc=$?
expect_rc "hzbench without time(1)" 0 "$rc"
with_time=
if [ -x /usr/bin/time ]; then
    python3 "$HZBENCH" --builddir "$BUILDDIR" --matrix "$tmp/matrix5" --cell quiet --runs 1 \
        --allocators glibc --out "$tmp/out6" --no-chart >"$tmp/run6.out" 2>&1 &&
        with_time="$tmp/out6/results.json"
fi
if python3 - "$tmp/out5/results.json" "$with_time" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
quiet, real = r["cells"]
for x in quiet["runs"]:
    assert x["rss_source"] == "wait4 (upper bound)" and x["peak_rss_kb"] > 0, x["rss_source"]
for x in real["runs"]:
    assert x["rss_source"] == "program" and x["peak_rss_kb"] > 0, x["rss_source"]
if sys.argv[2]:
    for x in json.load(open(sys.argv[2]))["cells"][0]["runs"]:
        assert x["rss_source"] == "time" and x["peak_rss_kb"] > 0, x["rss_source"]
EOF
then
    pass "without time(1) the peak RSS comes from the program or, labelled, from wait4"
else
    fail "the peak RSS sources without time(1) are not as documented"
fi

# ------------------------------------------------------------------ --peer
cp "$BUILDDIR/.libs/libhakozuna.so" "$tmp/libpeercopy.so"
expect_usage_error "--peer with a Debian peer's name" --builddir "$BUILDDIR" --list \
    --peer "jemalloc=$tmp/libpeercopy.so"
expect_usage_error "--peer with a hakozuna variant's name" --builddir "$BUILDDIR" --list \
    --peer "hakozuna=$tmp/libpeercopy.so"
expect_usage_error "--peer without NAME=" --builddir "$BUILDDIR" --peer "$tmp/libpeercopy.so" \
    --out "$tmp/nopath"
expect_usage_error "--peer with a missing library" --builddir "$BUILDDIR" \
    --peer "x=$tmp/no-such-lib.so" --out "$tmp/missing"
expect_usage_error "a --peer name used twice" --builddir "$BUILDDIR" --out "$tmp/twice" \
    --allocators "glibc,pc=$tmp/libpeercopy.so" --peer "pc=$tmp/libpeercopy.so"

# A "benchmark" that is twice as fast when the copy is preloaded into it, and
# prints the tunables it was given, next to a real cell.
cat >"$tmp/peer_bench" <<'EOF'
#!/bin/sh
case "${LD_PRELOAD:-}" in
*libpeercopy.so) ops=2000.0 ;;
*) ops=1000.0 ;;
esac
echo "[peer_bench] ops/s=$ops checksum=0x1 tunables=${GLIBC_TUNABLES:-}"
EOF
chmod +x "$tmp/peer_bench"
printf 'fast_when_preloaded %s\nst_tiny bench_random_mixed_malloc_args 20000 64 16 1024\n' \
    "$tmp/peer_bench" >"$tmp/matrix3"
rc=0
GLIBC_TUNABLES=glibc.malloc.tcache_count=7 python3 "$HZBENCH" --builddir "$BUILDDIR" \
    --matrix "$tmp/matrix3" --runs 1 --peer "peercopy=$tmp/libpeercopy.so" \
    --allocators hakozuna,glibc --out "$tmp/out3" --no-chart >"$tmp/run3.out" 2>&1 || rc=$?
expect_rc "hzbench with --peer" 0 "$rc"
rc=0
python3 "$HZBENCH" --builddir "$BUILDDIR" --matrix "$tmp/matrix3" --runs 1 \
    --allocators "glibc,other=$tmp/libpeercopy.so" --out "$tmp/out4" --no-chart \
    >"$tmp/run4.out" 2>&1 || rc=$?
expect_rc "hzbench with an --allocators NAME=PATH item" 0 "$rc"
if python3 - "$tmp/out3/results.json" "$tmp/out4/results.json" "$tmp/libpeercopy.so" <<'EOF'
import json, sys
peer, other = (json.load(open(f)) for f in sys.argv[1:3])
lib = sys.argv[3]
assert [a["kind"] for a in peer["allocators"]] == ["hakozuna", "peer", "peer"], "kinds"
assert [a["kind"] for a in other["allocators"]] == ["peer", "custom"], "kinds without"
assert peer["header"]["libs"]["peercopy"]["path"] == lib, "path"
assert peer["header"]["libs"]["peercopy"]["version"], "version"
assert peer["header"]["libs"]["glibc"]["version"].startswith("glibc "), "glibc version"
assert peer["header"]["libs"]["hakozuna"]["version"].startswith("hakozuna "), "our version"
fake = peer["cells"][0]
assert fake["best_peer"] == "peercopy", fake["best_peer"]
assert abs(fake["stats"]["glibc"]["ratio_to_best_peer"] - 0.5) < 1e-9, "glibc at 0.5"
real = peer["cells"][1]
assert real["best_peer"] in ("glibc", "peercopy") and real["failed_runs"] == 0, "real cell"
assert real["stats"]["peercopy"]["ratio_to_best_peer"] <= 1.0, "peercopy's ratio"
assert all(r["ops_per_s"] > 0 for r in real["runs"]), "real runs"
fake = other["cells"][0]
assert fake["best_peer"] == "glibc", "a NAME=PATH item of --allocators is not a peer"
assert abs(fake["stats"]["other"]["ratio_to_best_peer"] - 2.0) < 1e-9, "other at 2.0"
for r in peer["cells"][0]["runs"]:
    assert "tunables=glibc.malloc.tcache_count=7:glibc.pthread.rseq=0" in r["stdout"], r["stdout"]
for r in other["cells"][0]["runs"]:
    assert "tunables=glibc.pthread.rseq=0" in r["stdout"], r["stdout"]
assert peer["header"]["env"]["GLIBC_TUNABLES"] == \
    "glibc.malloc.tcache_count=7:glibc.pthread.rseq=0", "tunables in the header"
EOF
then
    pass "--peer libraries count as peers, NAME=PATH items do not; rseq tunable in every run"
else
    fail "--peer: results.json lacks the expected peers, ratios or tunables"
fi
S="$tmp/out3/summary.md"
if grep -Fq "| peercopy | peer | \`$tmp/libpeercopy.so\` |" "$S" &&
    grep -q '(peers: glibc, peercopy)' "$S" &&
    grep -Eq '^\| peercopy \(best peer\) \| 0\.00 \| .* \| 1\.00 \|' "$S" &&
    grep -Eq '^\| glibc \| 0\.00 \| .* \| 0\.50 \|' "$S" &&
    grep -q 'GLIBC_TUNABLES=glibc.malloc.tcache_count=7:glibc.pthread.rseq=0' "$S" &&
    head -n 1 "$tmp/out3/st_tiny.log" | grep -Fq " lib.peercopy=$tmp/libpeercopy.so version.peercopy="; then
    pass "summary.md and the log header list the --peer library as a peer with path and version"
else
    fail "summary.md or the log header lacks the --peer library, its ratios or the tunables"
fi

# ------------------------------------------------- check_instructions.py
# It measures libhakozuna.so whatever the variant preloaded, so once is enough.
if [ "${HZ_TEST_VARIANT:-hakozuna}" != hakozuna ]; then
    skip "check_instructions.py (run under libhakozuna.so only)"
elif ! command -v valgrind >/dev/null 2>&1; then
    skip "check_instructions.py (valgrind not installed)"
else
    CHECK="$HERE/../tools/check_instructions.py"
    ref="$tmp/instructions.ref"
    printf 'iters 20000\n' >"$ref"
    rc=0
    python3 "$CHECK" --builddir "$BUILDDIR" --update "$ref" >"$tmp/update.out" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ] && [ "$(grep -c '^st_[a-z0-9_]* *[0-9][0-9.]*$' "$ref")" -eq 6 ] &&
        grep -q '^iters 20000$' "$ref"; then
        pass "check_instructions.py --update records the 6 single-threaded cells"
    else
        fail "check_instructions.py --update: exit $rc, reference:"
        sed 's/^/    /' "$ref" "$tmp/update.out" | head -20
    fi
    # The same code against a reference 10 % below its count on one cell.
    awk '$1 == "st_args_16_2048" { printf "%s %.1f\n", $1, $2 * 0.9; next } { print }' \
        "$ref" >"$tmp/lower.ref"
    rc=0
    python3 "$CHECK" --builddir "$BUILDDIR" "$tmp/lower.ref" >"$tmp/check.out" 2>&1 || rc=$?
    if [ "$rc" -eq 1 ] &&
        grep -Eq '^st_args_16_2048 +[0-9.]+ +[0-9.]+ +1\.1[0-9]{2}  GREW MORE THAN 3 %' "$tmp/check.out" &&
        [ "$(grep -Ec '^st_[a-z0-9_]+ +[0-9.]+ +[0-9.]+ +(0\.9[7-9]|1\.0[0-3])[0-9]*$' "$tmp/check.out")" -eq 5 ]; then
        pass "check_instructions.py fails on the cell that grew, prints old/new/ratio per cell"
    else
        fail "check_instructions.py against a lowered reference: exit $rc (expected 1):"
        sed 's/^/    /' "$tmp/check.out" | head -10
    fi
fi

finish
