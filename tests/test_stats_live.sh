#!/bin/sh
# test_stats_live.sh - hzstat shows a process's counters as they are now, also when
# the process sits idle (no allocator call since well before the read); the
# per-thread view (hzstat -t, --prometheus), the byte figures (committed, metadata,
# peaks, dirty), a fork child's own segment, and a process with more heaps than slots.
#
#   HZ_TOOLS_DIR        directory holding hzrun and hzstat (the build tree's tools/)
#   HZRUN_LIBDIR        directory holding libhakozuna*.so.0 (default: HZ_TEST_LIBDIR)
#   HZ_STATS_IDLE_PROG  the tests/stats_idle program
#   HZ_TEST_VARIANT     library name set by tests/preload.sh: the hzrun variant to test
#
# Skips (exit 77) only when /dev/shm is not available.

set -u

. "$(dirname "$0")/testlib.sh"

need_dev_shm
hz_tools
prog=${HZ_STATS_IDLE_PROG:-}
if [ -z "$prog" ] || [ ! -x "$prog" ]; then
    echo "FAIL: HZ_STATS_IDLE_PROG must name tests/stats_idle (got '$prog')"
    exit 1
fi
variant=$(hzrun_variant)
unset HAKOZUNA_STATS LD_PRELOAD # hzrun preloads the variant itself

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hz-live.XXXXXX") || exit 1
pids=
cleanup() {
    touch "$tmp/go"
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

THREADS=3
BLOCKS=1000
SIZE=3000 # 3000- and 3001-byte blocks share the 3072-byte class
KEEP=777
CHILDKEEP=111

# The entry of the 3072-byte class in hzstat -j -c output: "mallocs frees live".
# The debug variant holds freed blocks in its quarantine (thousands of them) before
# the core frees and counts them: there only the mallocs are exact.
class3072() {
    sed -n 's/.*{"class":[0-9]*,"size":3072,"mallocs":\([0-9]*\),"frees":\([0-9]*\),"live":\([0-9]*\)}.*/\1 \2 \3/p' "$1" |
        if [ "$variant" = debug ]; then cut -d' ' -f1; else cat; fi
}
exact() { # WANT : WANT, or for the debug variant its first word
    if [ "$variant" = debug ]; then echo "${1%% *}"; else echo "$1"; fi
}
jnum() { # KEY FILE : value of the first "KEY":NUMBER
    sed -n "s/.*\"$1\":\([0-9][0-9]*\).*/\1/p" "$2" | head -n 1
}
# The thread entry of tid T in hzstat -j -t output, one line.
thread_of() { # TID FILE
    tr '{' '\n' <"$2" | grep "\"tid\":$1,"
}

"$HZRUN" -v "$variant" --stats -- "$prog" "$tmp/go" $THREADS $BLOCKS $SIZE $KEEP $CHILDKEEP \
    >"$tmp/out" 2>"$tmp/err" &
pid=$!
pids=$pid
if ! wait_lines "$tmp/out" '^ready' 1 "$pid" "$tmp/err" ||
    ! wait_lines "$tmp/out" '^child' 1 "$pid" "$tmp/err"; then
    fail "stats_idle did not start"
    finish
    exit
fi
child=$(sed -n 's/^child pid=\([0-9]*\)$/\1/p' "$tmp/out")
main=$(sed -n 's/^ready .* main=\([0-9]*\) .*/\1/p' "$tmp/out")
workers=$(sed -n 's/^ready .* workers=\([0-9,]*\)$/\1/p' "$tmp/out" | tr , ' ')
pids="$pid $child"
sleep 0.5 # well past any publishing interval: only live counters can be exact

# read_exact WHAT PID FILE WANT : hzstat -j -c PID into FILE, read live, with WANT as
# the 3072-byte class's "mallocs frees live"
read_exact() {
    "$HZSTAT" -j -c "$2" >"$3" 2>"$tmp/e"
    expect_rc "hzstat -j -c of $1" 0 $?
    check "  reads its own segment, live" grep -q "^{\"pid\":$2,.*\"live\":true" "$3"
    got=$(class3072 "$3")
    check "  3072-byte class: mallocs, frees, live = $4 (got '$got')" test "$got" = "$4"
}

# ------------------------------------------------ an idle process, exactly
want=$(exact "$((THREADS * BLOCKS + KEEP)) $((THREADS * BLOCKS)) $KEEP")
read_exact "the idle process" "$pid" "$tmp/j" "$want"
check "  remote frees sent = received = $((THREADS * BLOCKS))" \
    test "$(jnum remote_frees_sent "$tmp/j") $(jnum remote_frees_recv "$tmp/j")" = \
    "$((THREADS * BLOCKS)) $((THREADS * BLOCKS))"
check "  threads live = $((THREADS + 1))" test "$(jnum threads_live "$tmp/j")" = $((THREADS + 1))
sleep 0.3
"$HZSTAT" -j -c "$pid" >"$tmp/j2" 2>"$tmp/e"
check "  the same figures a moment later" test "$(class3072 "$tmp/j2")" = "$want"
"$HZSTAT" -i 0.2 -n 2 -f mallocs,bytes_in_use "$pid" >"$tmp/i" 2>"$tmp/e"
expect_rc "hzstat -i 0.2 -n 2 of the idle process" 0 $?
check "  rates of 0, not '-' (nothing published)" \
    test "$(awk 'NR > 1 { print $2 }' "$tmp/i" | tr '\n' ' ')" = "0 0 "
"$HZSTAT" -1 -f bytes_in_use "$pid" >"$tmp/one" 2>"$tmp/e"
expect_rc "hzstat -1 -f bytes_in_use" 0 $?
inuse=$(awk '$1 == "bytes_in_use" { print $2 }' "$tmp/one")
check "  at least the kept blocks' $((KEEP * 3072)) bytes (got $inuse)" \
    test "${inuse:-0}" -ge $((KEEP * 3072))

# ------------------------------------------------ the child of fork
# Its counts start from the parent's at the fork.
want_child=$(exact "$((THREADS * BLOCKS + KEEP + CHILDKEEP)) $((THREADS * BLOCKS)) $((KEEP + CHILDKEEP))")
read_exact "the fork child" "$child" "$tmp/c" "$want_child"
"$HZSTAT" -j -c "$pid" >"$tmp/j3" 2>"$tmp/e"
check "  the parent's figures untouched by the child" test "$(class3072 "$tmp/j3")" = "$want"

# ------------------------------------------------ per-thread view
"$HZSTAT" -j -t "$pid" >"$tmp/t" 2>"$tmp/e"
expect_rc "hzstat -j -t" 0 $?
# (The debug variant's quarantine holds the main thread's frees until its
# malloc_trim, which empties it.)
sent=$((THREADS * BLOCKS)) recv=$BLOCKS
line=$(thread_of "$main" "$tmp/t")
check "  main thread $main: running, sent $sent remote frees, received none" \
    test -n "$line" -a "$(echo "$line" | grep -c "\"state\":\"running\".*\"remote_frees_sent\":$sent,\"remote_frees_recv\":0,")" -eq 1
for w in $workers; do
    line=$(thread_of "$w" "$tmp/t")
    m=$(echo "$line" | sed -n 's/.*"mallocs":\([0-9]*\).*/\1/p')
    check "  worker $w: running, >= $BLOCKS mallocs, sent none, received $recv" \
        test -n "$line" -a "${m:-0}" -ge $BLOCKS -a \
        "$(echo "$line" | grep -c "\"state\":\"running\".*\"remote_frees_sent\":0,\"remote_frees_recv\":$recv,")" -eq 1
done
"$HZSTAT" -t "$pid" >"$tmp/tt" 2>"$tmp/e"
expect_rc "hzstat -t (text)" 0 $?
check "  a row per running thread" test "$(grep -c ' running ' "$tmp/tt")" -eq $((THREADS + 1))
"$HZSTAT" -1 -t -f mallocs "$pid" >"$tmp/t1" 2>"$tmp/e"
expect_rc "hzstat -1 -t" 0 $?
check "  thread.N.remote_frees_sent lines, one per heap" \
    test "$(grep -c '^thread\.[0-9]*\.remote_frees_sent ' "$tmp/t1")" -eq $((THREADS + 1))
"$HZSTAT" -t -i 1 "$pid" >/dev/null 2>&1
expect_rc "hzstat -t -i: not together" 2 $?

# ------------------------------------------------ byte figures
for k in bytes_mapped bytes_committed bytes_metadata bytes_dirty peak_mapped peak_committed process_rss \
    bytes_in_use; do
    eval "$k=\$(jnum $k \"\$tmp/j\")"
done
# shellcheck disable=SC2154
{
    check "byte figures: metadata > 0 ($bytes_metadata)" test "${bytes_metadata:-0}" -gt 0
    check "  in use <= committed <= mapped ($bytes_in_use, $bytes_committed, $bytes_mapped)" \
        test "$bytes_in_use" -le "$bytes_committed" -a "$bytes_committed" -le "$bytes_mapped"
    check "  metadata <= committed" test "$bytes_metadata" -le "$bytes_committed"
    # Freed page memory is in no block and in no page: apart from what is in use.
    check "  in use + dirty <= committed (dirty $bytes_dirty)" \
        test -n "$bytes_dirty" -a $((bytes_in_use + ${bytes_dirty:-0})) -le "$bytes_committed"
    check "  peak mapped >= mapped ($peak_mapped)" test "$peak_mapped" -ge "$bytes_mapped"
    check "  peak committed >= committed ($peak_committed)" test "$peak_committed" -ge "$bytes_committed"
    check "  process RSS > 0 ($process_rss)" test "${process_rss:-0}" -gt 0
}
"$HZSTAT" --prometheus "$pid" >"$tmp/p" 2>"$tmp/e"
expect_rc "hzstat --prometheus" 0 $?
check "  has peak mapped and metadata bytes" \
    grep -q "^hakozuna_peak_mapped{.*} $peak_mapped\$" "$tmp/p"
check "  and metadata bytes" grep -q '^hakozuna_bytes_metadata{' "$tmp/p"
check "  a remote-frees-sent sample per thread heap, the main thread's $sent" \
    test "$(grep -c '^hakozuna_thread_remote_frees_sent_total{.*,slot="[0-9]*",tid="[0-9]*",state="running"} ' "$tmp/p")" -eq $((THREADS + 1)) -a \
    "$(grep -c "^hakozuna_thread_remote_frees_sent_total{.*,tid=\"$main\",state=\"running\"} $sent\$" "$tmp/p")" -eq 1

touch "$tmp/go"
wait "$pid"
expect_rc "stats_idle exits normally" 0 $?

# ------------------------------------------------ more heaps than slots
# 300 workers and the main thread: 301 heaps, 256 slots.  The 45 others keep their
# counters private; hzstat says so and shows the published figures.
rm -f "$tmp/go"
"$HZRUN" -v "$variant" --stats -- "$prog" "$tmp/go" 300 1 $SIZE 1 >"$tmp/out2" 2>"$tmp/err2" &
pid=$!
pids=$pid
if wait_lines "$tmp/out2" '^ready' 1 "$pid" "$tmp/err2"; then
    "$HZSTAT" -j -t "$pid" >"$tmp/u" 2>"$tmp/e"
    expect_rc "hzstat -j -t of a process with 301 heaps" 0 $?
    check "  not live: published figures" grep -q '"live":false' "$tmp/u"
    check "  heaps_unlisted = 45" test "$(jnum heaps_unlisted "$tmp/u")" = 45
    check "  256 thread heaps listed" test "$(tr '{' '\n' <"$tmp/u" | grep -c '"slot":')" -eq 256
    "$HZSTAT" -t "$pid" >"$tmp/ut" 2>"$tmp/e"
    check "  the text view says so" grep -q 'as last published (some heaps have no thread slot)' "$tmp/ut"
    check "  and how many heaps are not listed" grep -q '(45 more heaps have no slot and are not listed)' "$tmp/ut"
    touch "$tmp/go"
    wait "$pid"
    expect_rc "  stats_idle exits normally" 0 $?
else
    fail "stats_idle with 300 threads did not start"
fi
finish
