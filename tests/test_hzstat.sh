#!/bin/sh
# test_hzstat.sh - live statistics: a process started with `hzrun --stats` is read
# with hzstat while it runs, and every error hzstat reports is provoked once.
#
#   HZ_TOOLS_DIR    directory holding hzrun and hzstat (the build tree's tools/)
#   HZRUN_LIBDIR    directory holding libhakozuna*.so.0 (default: HZ_TEST_LIBDIR)
#   HZ_STATS_PROG   the tests/stats_prog program (default: HZ_TOOLS_DIR/../tests/)
#   HZ_TEST_VARIANT library name set by tests/preload.sh (hakozuna, hakozuna_mt...):
#                   the hzrun variant to test
#
# Skips (exit 77) only when /dev/shm is not available.

set -u

. "$(dirname "$0")/testlib.sh"

need_dev_shm

hz_tools
tools=$HZ_TOOLS_DIR
prog=${HZ_STATS_PROG:-$tools/../tests/stats_prog}
need_prog stats_prog "$prog"
variant=$(hzrun_variant)
echo "hzstat: $HZSTAT, library variant: $variant, HZRUN_LIBDIR=$HZRUN_LIBDIR"

# Only the processes started below publish stats.
unset HAKOZUNA_STATS

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hz-stat.XXXXXX") || exit 1
pids=
fakes=
cleanup() {
    touch "$tmp/go" 2>/dev/null
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    for p in $pids; do rm -f "/dev/shm/hakozuna.$p"; done
    for f in $fakes; do rm -f "$f"; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

THREADS=4
BLOCKS=5000
SIZE=3000
N=$((THREADS * BLOCKS))

# start_prog NAME HZRUN-ARGS... : run stats_prog under hzrun in the background; sets
# prog_pid once it printed "ready" (returns 1 if it never did).
start_prog() {
    name=$1
    shift
    rm -f "$tmp/go"
    # shellcheck disable=SC2086
    env ${prog_env:-} "$HZRUN" -v "$variant" "$@" -- "$prog" "$tmp/go" $THREADS $BLOCKS $SIZE >"$tmp/$name.out" 2>"$tmp/$name.err" &
    prog_pid=$!
    pids="$pids $prog_pid"
    wait_lines "$tmp/$name.out" '^ready' 1 "$prog_pid" "$tmp/$name.err" ||
        { echo "  stats_prog did not start (above: its stderr)"; return 1; }
}

stop_prog() { # PID : let it exit normally; returns its exit status
    touch "$tmp/go"
    wait "$1"
}

# The segment of PID: /dev/shm/hakozuna.PID, or for a process that may change its
# user id (root), which removes that name at once, its mapping in
# /proc/PID/map_files.
seg_path() {
    if [ -e "/dev/shm/hakozuna.$1" ]; then
        echo "/dev/shm/hakozuna.$1"
        return
    fi
    r=$(sed -n "s|^\([0-9a-f]*\)-\([0-9a-f]*\) .* /dev/shm/hakozuna\.$1 (deleted)\$|\1 \2|p" "/proc/$1/maps" 2>/dev/null | head -n 1)
    [ -n "$r" ] && printf '/proc/%s/map_files/%x-%x\n' "$1" "0x${r% *}" "0x${r#* }"
}
root=false
[ "$(id -u)" -eq 0 ] && root=true

# --gc exits 0, or 5 when stale segments of other users (not ours) cannot be removed.
gc_rc() { # DESCRIPTION STATUS
    if [ "$2" -eq 0 ]; then
        pass "$1 (exit 0)"
    elif [ "$2" -eq 5 ] && ! grep -q "hakozuna\.\($$\|$p\) " "$tmp/e"; then
        pass "$1 (exit 5: other users' stale segments left alone)"
    else
        fail "$1: exit $2"
        sed 's/^/    /' "$tmp/e"
    fi
}

# Value of "key":NUMBER in a JSON line.
jnum() { # KEY FILE
    sed -n "s/.*\"$1\":\([0-9][0-9]*\).*/\1/p" "$2" | head -n 1
}
ge() { [ -n "$1" ] && [ "$1" -ge "$2" ]; }

# Bytes of an unsigned 64-bit little-endian number as printf escapes.
le64() {
    n=$1
    out=
    for _ in 1 2 3 4 5 6 7 8; do
        out="$out\\$(printf '%03o' $((n % 256)))"
        n=$((n / 256))
    done
    printf '%s' "$out"
}
patch_bytes() { # FILE OFFSET PRINTF-ESCAPES
    # shellcheck disable=SC2059
    printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
patch64() { patch_bytes "$1" "$2" "$(le64 "$3")"; }              # FILE OFFSET VALUE
patch32() { patch_bytes "$1" "$2" "$(le64 "$3" | cut -c 1-16)"; } # FILE OFFSET VALUE (< 2^32)

# ------------------------------------------ segments a process damaged itself
# hzstat reads what the process under study wrote: a broken or hostile one must get
# a message and an exit status from it, never a signal or a hang
# (tests/fake_segment.c makes them from a copy of a live segment, $tmp/seg.live).
fake_prog=${HZ_FAKE_SEGMENT_PROG:-$tools/../tests/fake_segment}
fake_start() { # MODE [FILE] : sets fake_pid; the process reads commands from fd 7
    rm -f "$tmp/ctl"
    mkfifo "$tmp/ctl" || return 1
    "$fake_prog" "$tmp/seg.live" "$@" <"$tmp/ctl" >"$tmp/fake.out" 2>"$tmp/fake.err" &
    fake_pid=$!
    pids="$pids $fake_pid"
    exec 7>"$tmp/ctl"
    wait_lines "$tmp/fake.out" '^[0-9]' 1 "$fake_pid" "$tmp/fake.err" ||
        { fail "fake_segment $1 did not start"; exec 7>&-; return 1; }
}
fake_stop() {
    exec 7>&-
    wait "$fake_pid"
}
no_signal() { # DESCRIPTION STATUS : an exit status, not a signal nor timeout's 124
    if [ "$2" -lt 124 ]; then
        pass "$1 (exit $2)"
    else
        fail "$1: exit $2"
        sed 's/^/    /' "$tmp/e"
    fi
}
# hzstat -i INTERVAL -n N on the fake process, which gets COMMAND once hzstat has
# printed two lines; sets rc to hzstat's exit status.
interval_then() { # INTERVAL N COMMAND
    timeout 20 "$HZSTAT" -i "$1" -n "$2" "$fake_pid" >"$tmp/o" 2>"$tmp/e" &
    hz_job=$!
    wait_lines "$tmp/o" ':' 2 "$hz_job" "$tmp/e"
    echo "$3" >&7
    wait "$hz_job"
    rc=$?
}
damaged_segments() {
    need_prog fake_segment "$fake_prog"
    if fake_start threads-offset; then
        for a in "" -j "-1 -t" --prometheus; do
            # shellcheck disable=SC2086
            timeout 20 "$HZSTAT" $a "$fake_pid" >/dev/null 2>"$tmp/e"
            expect_rc "thread slots said to start past the object: hzstat $a PID" 1 $?
        done
        check "  says the segment is damaged" grep -q 'damaged segment' "$tmp/e"
        timeout 20 "$HZSTAT" >"$tmp/o" 2>"$tmp/e"
        no_signal "  and the list of processes" $?
        check "  which shows it unreadable" grep -q "^$fake_pid .*unreadable" "$tmp/o"
        fake_stop
    fi
    if fake_start short-file; then
        timeout 20 "$HZSTAT" -t "$fake_pid" >/dev/null 2>"$tmp/e"
        expect_rc "a file shorter than its header says: hzstat -t PID" 1 $?
        check "  says the segment is damaged" grep -q 'damaged segment' "$tmp/e"
        fake_stop
    fi
    if fake_start shrink; then
        interval_then 0.2 50 shrink
        expect_rc "the file shrinks while hzstat -i reads it" 1 $rc
        check "  says so" grep -q 'shrank while being read' "$tmp/e"
        fake_stop
    fi
    if fake_start unlist; then
        interval_then 0.3 5 unlist
        expect_rc "hzstat -i across heaps becoming unlisted" 0 $rc
        check "  shows no rate of a counter that went back" sh -c "! grep -Eq '[0-9]{13,}' '$tmp/o'"
        fake_stop
    fi
    # ELF headers whose offset plus size wraps around 2^64 (symbols of a heap profile).
    lib=$HZRUN_LIBDIR/libhakozuna.so.0
    cp "$lib" "$tmp/shoff.so" && cp "$lib" "$tmp/phoff.so" || return
    patch_bytes "$tmp/shoff.so" 40 '\300\377\377\377\377\377\377\377' # e_shoff
    patch_bytes "$tmp/shoff.so" 60 '\001\000'                         # e_shnum
    patch_bytes "$tmp/phoff.so" 32 '\310\377\377\377\377\377\377\377' # e_phoff
    for f in shoff phoff; do
        if fake_start elf "$tmp/$f.so"; then
            timeout 20 "$HZSTAT" --heap "$fake_pid" >/dev/null 2>"$tmp/e"
            expect_rc "hzstat --heap, a mapped ELF file with a wrapping e_$f" 0 $?
            fake_stop
        fi
    done
    cp "$lib" "$tmp/gone.so"
    if fake_start fifo "$tmp/gone.so"; then
        timeout 20 "$HZSTAT" --heap "$fake_pid" >/dev/null 2>"$tmp/e"
        expect_rc "hzstat --heap, a FIFO under a deleted mapping's name" 0 $?
        fake_stop
    fi
}

# ------------------------------------------------------------ arguments
"$HZSTAT" --version >"$tmp/v" 2>&1
rc=$?
expect_rc "hzstat --version" 0 $rc
hdr=$(dirname "$0")/../include
shm_layout=$(sed -n 's/^#define HZ_SHM_LAYOUT_VERSION \([0-9]*\)u*$/\1/p' "$hdr/hakozuna_shm.h")
prof_layout=$(sed -n 's/^#define HZ_PROF_LAYOUT_VERSION \([0-9]*\)u*$/\1/p' "$hdr/hakozuna_prof.h")
check "--version names the layouts of the headers ($shm_layout, $prof_layout)" \
    grep -q "segment layout ${shm_layout:-?}, heap profile layout ${prof_layout:-?}\$" "$tmp/v"
"$HZSTAT" --help >"$tmp/h" 2>&1
expect_rc "hzstat --help" 0 $?
check "--help documents the exit statuses" grep -q 'Exit status' "$tmp/h"

for args in "-x" "abc" "-i 0 1" "-i x 1" "-n" "-n 0 1" "1 2" "--gc 1" "-c" "-i 1" "--bogus" "0" \
    "-1" "-1 -j 1" "-1 -i 1 1" "-o f 1" "--prometheus -j" "--prometheus -1 1" \
    "--prometheus abc" "--prometheus -o" "--gc --prometheus" "-f bogus 1" "-f mallocs,bogus 1" \
    "-f , 1" "-f mallocs" "-f" "--prometheus -f mallocs 1" "--gc -f mallocs"; do
    # shellcheck disable=SC2086
    "$HZSTAT" $args >/dev/null 2>"$tmp/e"
    rc=$?
    expect_rc "bad arguments: hzstat $args" 2 $rc
done
check "bad arguments print a usage line" grep -q '^Usage' "$tmp/e"
"$HZSTAT" -f mallocs -f 'no_such*' 1 >/dev/null 2>"$tmp/e"
expect_rc "hzstat -f with a glob that matches nothing" 2 $?
check "  names it" grep -q "unknown field 'no_such\*'" "$tmp/e"
check "  and lists the fields" grep -q '^Fields: mallocs frees ' "$tmp/e"

# ------------------------------------------------ no process, no segment
pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 4194304)
"$HZSTAT" "$pid_max" >/dev/null 2>"$tmp/e"
expect_rc "no such process" 3 $?
check "  says so" grep -q 'no such process' "$tmp/e"

"$HZSTAT" $$ >/dev/null 2>"$tmp/e"
expect_rc "process without a stats segment" 4 $?
check "  hints at hzrun --stats / HAKOZUNA_STATS=1" grep -q 'hzrun --stats' "$tmp/e"

# --------------------------------- no segment unless HAKOZUNA_STATS=1
if start_prog nostats; then
    p=$prog_pid
    check "no segment without HAKOZUNA_STATS" test ! -e "/dev/shm/hakozuna.$p"
    stop_prog "$p"
    expect_rc "  stats_prog exits normally" 0 $?
else
    fail "stats_prog (no stats) did not start"
fi
prog_env=HAKOZUNA_STATS=0
if start_prog stats0; then
    p=$prog_pid
    check "no segment with HAKOZUNA_STATS=0" test ! -e "/dev/shm/hakozuna.$p"
    stop_prog "$p"
else
    fail "stats_prog (HAKOZUNA_STATS=0) did not start"
fi
prog_env=

# ------------------------------------------------------------ live read
if start_prog live --stats; then
    p=$prog_pid
    reported=$(sed -n 's/^ready pid=\([0-9]*\).*/\1/p' "$tmp/live.out")
    check "hzrun execs the command (same pid)" test "$reported" = "$p"
    seg=$(seg_path "$p")
    check "segment $seg exists" test -n "$seg" -a -f "$seg"
    check "segment is mode 0600" test "$(stat -L -c %a "$seg" 2>/dev/null)" = 600
    if $root; then
        check "  a root process's segment has no name in /dev/shm" test ! -e "/dev/shm/hakozuna.$p"
    fi

    "$HZSTAT" -j "$p" >"$tmp/j" 2>"$tmp/e"
    expect_rc "hzstat -j PID" 0 $?
    check "  one JSON object" test "$(wc -l <"$tmp/j")" -eq 1
    m=$(jnum mallocs "$tmp/j")
    f=$(jnum frees "$tmp/j")
    r=$(jnum remote_frees_sent "$tmp/j")
    t=$(jnum threads_live "$tmp/j")
    h=$(jnum heaps_created "$tmp/j")
    echo "  mallocs=$m frees=$f remote_frees_sent=$r threads_live=$t heaps_created=$h (program: $N blocks, $THREADS threads)"
    check "  mallocs >= $N" ge "$m" $N
    # The checked variant's quarantine holds up to 4096 freed blocks before the core
    # (and so the counters) sees them, and whichever thread pushes a block out of it
    # frees it: some of those frees are local.
    freed=$N remote=$N
    [ "$variant" = debug ] && freed=$((N - 4096)) remote=1
    check "  frees >= $freed" ge "$f" $freed
    check "  remote_frees_sent >= $remote (every free was remote)" ge "$r" $remote
    check "  threads_live >= $THREADS" ge "$t" $THREADS
    check "  heaps_created >= $THREADS" ge "$h" $THREADS
    check "  pid and layout" grep -q "\"pid\":$p,.*\"layout_version\":3" "$tmp/j"

    "$HZSTAT" -j -c "$p" >"$tmp/jc" 2>"$tmp/e"
    expect_rc "hzstat -j -c PID" 0 $?
    # The class of SIZE-byte blocks: size >= SIZE, mallocs and frees >= N.
    cls=$(tr '{' '\n' <"$tmp/jc" | sed -n 's/^"class":\([0-9]*\),"size":\([0-9]*\),"mallocs":\([0-9]*\),"frees":\([0-9]*\),"live":\([0-9]*\)}.*/\1 \2 \3 \4 \5/p' |
        awk -v s=$SIZE -v n=$N -v f=$freed '$2 >= s && $2 < s + s / 4 && $3 >= n && $4 >= f { print; exit }')
    check "  per-class: a class of >= $SIZE-byte blocks with >= $N mallocs and >= $freed frees ($cls)" test -n "$cls"

    "$HZSTAT" -c "$p" >"$tmp/t" 2>"$tmp/e"
    expect_rc "hzstat -c PID (text)" 0 $?
    check "  text snapshot shows remote frees" grep -q 'remote frees sent' "$tmp/t"
    check "  text snapshot has the class table" grep -q 'live bytes' "$tmp/t"
    sed 's/^/    /' "$tmp/t" | head -n 30

    "$HZSTAT" >"$tmp/l" 2>"$tmp/e"
    expect_rc "hzstat (list)" 0 $?
    check "  list shows the process as live" grep -Eq "^$p +stats_prog .* live\$" "$tmp/l"
    "$HZSTAT" -j >"$tmp/lj" 2>"$tmp/e"
    check "  JSON list shows it, not stale" grep -q "{\"pid\":$p,.*\"stale\":false" "$tmp/lj"

    start=$(date +%s)
    "$HZSTAT" -i 1 -n 2 "$p" >"$tmp/i" 2>"$tmp/e"
    expect_rc "hzstat -i 1 -n 2 PID" 0 $?
    end=$(date +%s)
    check "  prints a header and 2 lines" test "$(wc -l <"$tmp/i")" -eq 3
    check "  has rate columns" grep -q 'mallocs/s' "$tmp/i"
    check "  takes about 2 seconds" test $((end - start)) -ge 1 -a $((end - start)) -le 5
    "$HZSTAT" -j -i 0.2 -n 3 "$p" >"$tmp/ij" 2>"$tmp/e"
    expect_rc "hzstat -j -i 0.2 -n 3 PID" 0 $?
    check "  3 JSON lines with rates" test "$(grep -c '^{"pid".*"published":[a-z]*,"rates":' "$tmp/ij")" -eq 3

    "$HZSTAT" -1 "$p" >"$tmp/one" 2>"$tmp/e"
    expect_rc "hzstat -1 PID" 0 $?
    check "  one line per counter: name, value, description" \
        grep -Eq '^mallocs +[0-9]+  Allocations served' "$tmp/one"
    m1=$(awk '$1 == "remote_frees_sent" { print $2 }' "$tmp/one")
    check "  remote_frees_sent >= $remote ($m1)" ge "$m1" $remote
    check "  every line has a description" test "$(awk 'NF < 3' "$tmp/one" | wc -l)" -eq 0
    "$HZSTAT" -1 -c "$p" >"$tmp/onec" 2>"$tmp/e"
    expect_rc "hzstat -1 -c PID" 0 $?
    check "  per-class lines" grep -Eq '^class\.[0-9]+\.mallocs +[0-9]+  Allocations of class' "$tmp/onec"

    # -f: only the named counters, in every view.
    "$HZSTAT" -1 -f remote_frees_sent,mallocs "$p" >"$tmp/f1" 2>"$tmp/e"
    expect_rc "hzstat -1 -f remote_frees_sent,mallocs PID" 0 $?
    check "  exactly those two lines, in the usual order" test \
        "$(awk '{ print $1 }' "$tmp/f1" | tr '\n' ' ')" = "mallocs remote_frees_sent "
    "$HZSTAT" -1 -f 'bytes_*' -f threads_live "$p" >"$tmp/f2" 2>"$tmp/e"
    expect_rc "hzstat -1 -f 'bytes_*' -f threads_live PID (glob, repeated)" 0 $?
    check "  the seven bytes_ counters and threads_live" test \
        "$(awk '{ print $1 }' "$tmp/f2" | tr '\n' ' ')" = "bytes_in_use bytes_mapped bytes_purged bytes_unmapped bytes_committed bytes_dirty bytes_metadata threads_live "
    "$HZSTAT" -1 -f '*' "$p" >"$tmp/f3" 2>"$tmp/e"
    check "  -f '*': every counter, as -1 alone" test "$(wc -l <"$tmp/f3")" -eq "$(wc -l <"$tmp/one")"
    "$HZSTAT" -j -f mallocs,threads_live "$p" >"$tmp/fj" 2>"$tmp/e"
    expect_rc "hzstat -j -f mallocs,threads_live PID" 0 $?
    check "  counters holds just those two" grep -Eq '"counters":\{"mallocs":[0-9]+,"threads_live":[0-9]+\}' "$tmp/fj"
    "$HZSTAT" -f remote_frees_sent "$p" >"$tmp/ft" 2>"$tmp/e"
    expect_rc "hzstat -f remote_frees_sent PID (text)" 0 $?
    check "  shows remote frees sent" grep -Eq '^  remote frees sent +[0-9]+$' "$tmp/ft"
    check "  and no other counter" test "$(grep -Ec '^  [a-z][a-z ()]+ +[0-9]+( |$)' "$tmp/ft")" -eq 1
    "$HZSTAT" -f mallocs,bytes_purged,bytes_in_use,foreign_frees -i 0.2 -n 2 "$p" >"$tmp/fi" 2>"$tmp/e"
    expect_rc "hzstat -f ... -i 0.2 -n 2 PID" 0 $?
    check "  columns: rates of the counters, then the gauge" test \
        "$(head -n 1 "$tmp/fi" | tr -s ' ' | sed 's/^ //')" = "time mallocs/s purged/s foreign_frees/s in-use"
    check "  every line has 5 columns" test "$(awk 'NF != 5' "$tmp/fi" | wc -l)" -eq 0
    "$HZSTAT" -j -f mallocs -i 0.2 -n 1 "$p" >"$tmp/fij" 2>"$tmp/e"
    expect_rc "hzstat -j -f mallocs -i 0.2 -n 1 PID" 0 $?
    check "  rates and counters of mallocs only" grep -Eq '"rates":(null|\{"mallocs_per_s":[0-9.]+\}),"counters":\{"mallocs":[0-9]+\}\}$' "$tmp/fij"

    "$HZSTAT" --prometheus "$p" >"$tmp/prom" 2>"$tmp/e"
    expect_rc "hzstat --prometheus PID" 0 $?
    check "  HELP and TYPE lines" grep -q '^# TYPE hakozuna_mallocs_total counter$' "$tmp/prom"
    check "  one HELP and one TYPE per metric" test \
        "$(grep -c '^# HELP ' "$tmp/prom")" -eq "$(grep -c '^# TYPE ' "$tmp/prom")"
    check "  no metric described twice" test \
        "$(grep '^# TYPE ' "$tmp/prom" | sort | uniq -d | wc -l)" -eq 0
    pm=$(sed -n "s/^hakozuna_remote_frees_sent_total{pid=\"$p\",comm=\"stats_prog\"} \([0-9]*\)\$/\1/p" "$tmp/prom")
    check "  remote frees labelled with pid and comm ($pm)" ge "$pm" $remote
    check "  bytes in use is a gauge" grep -q '^# TYPE hakozuna_bytes_in_use gauge$' "$tmp/prom"
    pc=$(sed -n "s/^hakozuna_class_mallocs_total{pid=\"$p\",comm=\"stats_prog\",class=\"[0-9]*\",size=\"\([0-9]*\)\"} \([0-9]*\)\$/\1 \2/p" "$tmp/prom" |
        awk -v s=$SIZE -v n=$N '$1 >= s && $1 < s + s / 4 && $2 >= n { print; exit }')
    check "  per-class counter with class and size labels ($pc)" test -n "$pc"
    check "  every sample line is NAME{LABELS} NUMBER" test \
        "$(grep -v '^#' "$tmp/prom" | grep -Ecv '^hakozuna_[a-z_]+\{[^}]*\} [0-9.]+$')" -eq 0
    # Segments already stale stay stale; processes of other tests may end meanwhile,
    # so the export is compared with a list made before it, not after.
    "$HZSTAT" | awk '$1 ~ /^[0-9]+$/ && / stale \(/ { print $1 }' >"$tmp/stale_before"
    "$HZSTAT" --prometheus >"$tmp/promall" 2>"$tmp/e"
    expect_rc "hzstat --prometheus (every live process)" 0 $?
    check "  includes the process" grep -q "^hakozuna_mallocs_total{pid=\"$p\"," "$tmp/promall"
    check "  leaves out the $(wc -l <"$tmp/stale_before") segments listed as stale before it" \
        test -z "$(sed 's/.*/{pid="&",/' "$tmp/stale_before" | grep -F -f - "$tmp/promall")"
    echo stale >"$tmp/hakozuna.prom"
    "$HZSTAT" --prometheus -o "$tmp/hakozuna.prom" "$p" >"$tmp/o" 2>"$tmp/e"
    expect_rc "hzstat --prometheus -o FILE PID" 0 $?
    check "  writes nothing to stdout" test ! -s "$tmp/o"
    check "  replaces FILE" grep -q "^hakozuna_mallocs_total{pid=\"$p\"," "$tmp/hakozuna.prom"
    check "  leaves no FILE.tmp" test ! -e "$tmp/hakozuna.prom.tmp"
    "$HZSTAT" --prometheus -o "$tmp/no/such/dir/x.prom" "$p" >/dev/null 2>"$tmp/e"
    expect_rc "hzstat --prometheus -o into a missing directory" 1 $?
    # The rename would replace what FILE is: only a regular file may be replaced.
    ln -s "$tmp/hakozuna.prom" "$tmp/link.prom"
    mkdir "$tmp/dir.prom"
    for f in link.prom dir.prom; do
        "$HZSTAT" --prometheus -o "$tmp/$f" "$p" >/dev/null 2>"$tmp/e"
        expect_rc "hzstat --prometheus -o $f (not a regular file)" 2 $?
        check "  says so" grep -q 'not a regular file' "$tmp/e"
    done
    check "  leaves the link a link" test -L "$tmp/link.prom"
    check "  and the directory a directory" test -d "$tmp/dir.prom"
    # FILE.tmp is made anew: a symbolic link planted there is not written through.
    ln -s "$tmp/planted" "$tmp/hakozuna.prom.tmp"
    "$HZSTAT" --prometheus -o "$tmp/hakozuna.prom" "$p" >/dev/null 2>"$tmp/e"
    expect_rc "hzstat --prometheus -o FILE with a symbolic link at FILE.tmp" 0 $?
    check "  does not write through it" test ! -e "$tmp/planted"
    check "  writes FILE" grep -q "^hakozuna_mallocs_total{pid=\"$p\"," "$tmp/hakozuna.prom"
    (cd "$tmp" && "$HZSTAT" --prometheus -o - "$p" >"$tmp/o" 2>"$tmp/e")
    expect_rc "hzstat --prometheus -o - PID" 0 $?
    check "  writes to standard output" grep -q "^hakozuna_mallocs_total{pid=\"$p\"," "$tmp/o"
    check "  and makes no file named -" test ! -e "$tmp/-"
    # Output that cannot be written is an I/O error (exit 1), in every mode.
    if [ -c /dev/full ]; then
        for a in "" "-1" "-j" "-i 0.1 -n 2" "-j -i 0.1 -n 2" "--prometheus"; do
            # shellcheck disable=SC2086
            "$HZSTAT" $a "$p" >/dev/full 2>"$tmp/e"
            expect_rc "hzstat $a PID >/dev/full" 1 $?
        done
        for a in --version --help; do
            "$HZSTAT" $a >/dev/full 2>"$tmp/e"
            expect_rc "hzstat $a >/dev/full" 1 $?
        done
    else
        skip "write errors: no /dev/full"
    fi

    # Permission denied: the segment is 0600 and belongs to the process's user.
    if [ "$(id -u)" -eq 0 ]; then
        if command -v setpriv >/dev/null 2>&1 &&
            setpriv --reuid=65534 --regid=65534 --clear-groups "$HZSTAT" --version >/dev/null 2>&1; then
            setpriv --reuid=65534 --regid=65534 --clear-groups "$HZSTAT" "$p" >/dev/null 2>"$tmp/e"
            expect_rc "permission denied (hzstat as nobody on root's segment)" 5 $?
            check "  says so" grep -q 'permission denied' "$tmp/e"
        else
            skip "permission denied: cannot run hzstat as another user (setpriv missing, or hzstat not reachable by nobody)"
        fi
    else
        chmod 000 "$seg"
        "$HZSTAT" "$p" >/dev/null 2>"$tmp/e"
        rc=$?
        chmod 600 "$seg"
        expect_rc "permission denied (segment mode 000)" 5 $rc
        check "  says so" grep -q 'permission denied' "$tmp/e"
    fi

    # Fake segments for this shell's own pid, made from the live one.
    header_size=$(od -A n -t u4 -j 12 -N 4 "$seg" | tr -d ' ')
    fake=/dev/shm/hakozuna.$$
    fakes="$fakes $fake"
    cp "$seg" "$tmp/seg"
    patch64 "$tmp/seg" 24 $$           # pid
    patch64 "$tmp/seg" 32 1            # a start time that is not this shell's
    cp "$tmp/seg" "$fake"
    "$HZSTAT" $$ >/dev/null 2>"$tmp/e"
    expect_rc "stale: pid reused (start time differs)" 7 $?
    check "  says so" grep -q 'stale' "$tmp/e"
    patch32 "$tmp/seg" 8 99            # layout version 99
    patch64 "$tmp/seg" 32 "$(sed 's/.*) //' /proc/$$/stat | awk '{ print $20 }')" # start time
    cp "$tmp/seg" "$fake"
    "$HZSTAT" $$ >/dev/null 2>"$tmp/e"
    expect_rc "layout version mismatch" 6 $?
    check "  names both versions (99 and 3)" grep -q 'version 99.*version 3' "$tmp/e"
    sed 's/^/    /' "$tmp/e"
    check "  header size read back ($header_size)" test -n "$header_size"
    "$HZSTAT" --gc >"$tmp/gc" 2>"$tmp/e"
    gc_rc "hzstat --gc with a segment this shell does not map" $?
    check "  removes it (not mapped by the process)" test ! -e "$fake"
    check "  keeps the live one" test -e "$seg"
    rm -f "$fake"
    cp "$seg" "$tmp/seg.live"
    damaged_segments

    stop_prog "$p"
    expect_rc "stats_prog exits normally" 0 $?
    check "segment removed at exit" test ! -e "$seg" -a ! -e "/dev/shm/hakozuna.$p"
else
    fail "stats_prog (--stats) did not start"
fi

# ------------------------------------------- units of byte columns in -i
# A process that keeps allocating (and so publishing): the purged/s rate and the
# in-use and mapped columns are in B/KiB/MiB/... with one decimal and no space, so
# that the columns stay whitespace-separated; JSON keeps raw numbers.
if command -v python3 >/dev/null 2>&1; then
    "$HZRUN" -v "$variant" --stats -- python3 -c '
import time
while True:
    b = [bytearray(100000) for _ in range(300)]
    del b
    c = bytearray(40 << 20)
    del c
    time.sleep(0.1)' >/dev/null 2>"$tmp/churn.err" &
    p=$!
    pids="$pids $p"
    i=0
    while [ ! -e "/dev/shm/hakozuna.$p" ] && [ -z "$(seg_path "$p")" ] && [ $i -lt 100 ]; do
        i=$((i + 1))
        sleep 0.1
    done
    sleep 0.5
    "$HZSTAT" -i 0.4 -n 4 "$p" >"$tmp/ci" 2>"$tmp/e"
    expect_rc "hzstat -i 0.4 -n 4 on a busy process" 0 $?
    sed 's/^/    /' "$tmp/ci"
    unit='([0-9]+B|[0-9]+\.[0-9][KMGTPE]iB)'
    check "  every line has 11 columns" test "$(awk 'NF != 11' "$tmp/ci" | wc -l)" -eq 0
    check "  purged/s, in-use and mapped carry units" test \
        "$(awk 'NR > 1' "$tmp/ci" | grep -Ecv "^[0-9:]+ +[-0-9]+ +[-0-9]+ +(-|$unit) +[-0-9]+ +[-0-9]+ +[-0-9]+ +[-0-9]+ +$unit +$unit +[0-9]+\$")" -eq 0
    check "  some interval has a purged/s value" test \
        "$(awk 'NR > 1 && $4 != "-"' "$tmp/ci" | wc -l)" -gt 0
    "$HZSTAT" -j -i 0.4 -n 2 "$p" >"$tmp/cij" 2>"$tmp/e"
    check "  JSON: raw numbers (\"bytes_purged_per_s\":N.N, \"bytes_in_use\":N)" \
        grep -Eq '"bytes_purged_per_s":[0-9]+\.[0-9],.*"bytes_in_use":[0-9]+,' "$tmp/cij"
    kill "$p" 2>/dev/null
    wait "$p" 2>/dev/null
    rm -f "/dev/shm/hakozuna.$p" # killed: its segment stays behind
else
    skip "units of byte columns: no python3 for a busy process"
fi

# ------------------------------------------ a name that is not UTF-8
# Process names are bytes: a byte 0xff and a tab must still give valid JSON
# (U+FFFD and \t) and valid Prometheus label values, and no raw tab in the text.
if command -v python3 >/dev/null 2>&1; then
    odd=$tmp/$(printf 'st\377a\tb')
    cp "$prog" "$odd"
    saved_prog=$prog
    prog=$odd
    if start_prog oddname --stats; then
        p=$prog_pid
        "$HZSTAT" -j "$p" >"$tmp/oj" 2>"$tmp/e"
        expect_rc "hzstat -j PID (name with 0xff and a tab)" 0 $?
        check "  python3 -m json.tool accepts it" python3 -m json.tool "$tmp/oj" >/dev/null
        check "  comm reads st\ufffda\tb" python3 -c '
import json, sys
sys.exit(json.load(open(sys.argv[1]))["comm"] != "st\ufffda\tb")' "$tmp/oj"
        "$HZSTAT" -j >"$tmp/olj" 2>"$tmp/e"
        check "  JSON list: every line is valid JSON" python3 -c '
import json, sys
for line in open(sys.argv[1], "rb"):
    json.loads(line.decode("utf-8"))' "$tmp/olj"
        "$HZSTAT" -j -i 0.2 -n 1 "$p" >"$tmp/oij" 2>"$tmp/e"
        check "  -j -i: valid JSON" python3 -m json.tool "$tmp/oij" >/dev/null
        "$HZSTAT" --prometheus "$p" >"$tmp/oprom" 2>"$tmp/e"
        check "  --prometheus: valid UTF-8, U+FFFD in the label" python3 -c '
import sys
t = open(sys.argv[1], "rb").read().decode("utf-8")
sys.exit("comm=\"st\ufffda\tb\"" not in t)' "$tmp/oprom"
        "$HZSTAT" "$p" >"$tmp/ot" 2>"$tmp/e"
        check "  text snapshot: no raw tab in the name" env LC_ALL=C grep -q "^process $p (st.a?b)" "$tmp/ot"
        stop_prog "$p"
    else
        fail "stats_prog under an odd name did not start"
    fi
    # A newline inside the name: the kernel ends /proc/PID/comm with one more.
    odd=$tmp/$(printf 'nl\nx')
    cp "$saved_prog" "$odd"
    prog=$odd
    if start_prog nlname --stats; then
        p=$prog_pid
        "$HZSTAT" -j "$p" >"$tmp/oj" 2>"$tmp/e"
        check "  a name with a newline: JSON comm reads nl\nx" python3 -c '
import json, sys
sys.exit(json.load(open(sys.argv[1]))["comm"] != "nl\nx")' "$tmp/oj"
        stop_prog "$p"
    else
        fail "stats_prog under a name with a newline did not start"
    fi
    prog=$saved_prog
else
    skip "name with 0xff and a tab: no python3 to check the JSON"
fi

# ------------------------------------------ more heaps than thread slots
# Past 256 heaps the sums over heaps are as last published, but the process-wide
# counters in the file stay live: once the 300 workers are joined, threads_live
# is 1, although the last publication counted 301.
rm -f "$tmp/go"
"$HZRUN" -v "$variant" --stats -- "$prog" "$tmp/go" 300 10 64 joined >"$tmp/many.out" 2>"$tmp/many.err" &
p=$!
pids="$pids $p"
if wait_lines "$tmp/many.out" '^ready' 1 "$p" "$tmp/many.err"; then
    "$HZSTAT" -1 -f threads_live,heaps_unlisted "$p" >"$tmp/many" 2>"$tmp/e"
    expect_rc "hzstat -1 PID of a process that made 300 heaps" 0 $?
    check "  counts heaps beyond the slots" awk '$1 == "heaps_unlisted" && $2 > 0 { ok = 1 } END { exit !ok }' "$tmp/many"
    check "  threads_live is live: 1 once the workers are joined" \
        awk '$1 == "threads_live" && $2 == 1 { ok = 1 } END { exit !ok }' "$tmp/many"
    stop_prog "$p"
else
    fail "stats_prog with 300 threads did not start"
fi

# -------------------------------------------------------------- stale
if $root && start_prog killed --stats; then
    # A root process's segment has no name: nothing remains, even after kill -9.
    p=$prog_pid
    kill -9 "$p"
    wait "$p" 2>/dev/null
    check "root: after kill -9 nothing remains" test ! -e "/dev/shm/hakozuna.$p"
    "$HZSTAT" "$p" >/dev/null 2>"$tmp/e"
    expect_rc "root: hzstat on the killed process" 3 $?
elif ! $root && start_prog killed --stats; then
    p=$prog_pid
    seg=/dev/shm/hakozuna.$p
    kill -9 "$p"
    wait "$p" 2>/dev/null
    check "after kill -9 the segment remains" test -e "$seg"
    "$HZSTAT" "$p" >/dev/null 2>"$tmp/e"
    expect_rc "hzstat on a killed process's segment" 7 $?
    check "  says stale" grep -q 'stale' "$tmp/e"
    "$HZSTAT" >"$tmp/l" 2>"$tmp/e"
    check "  list marks it stale" grep -Eq "^$p .*stale" "$tmp/l"
    "$HZSTAT" --prometheus >"$tmp/promall" 2>"$tmp/e"
    check "  hzstat --prometheus leaves it out" sh -c "! grep -q '{pid=\"$p\",' '$tmp/promall'"
    "$HZSTAT" --gc >"$tmp/gc" 2>"$tmp/e"
    gc_rc "hzstat --gc" $?
    check "  reports the removal" grep -q "removed $seg" "$tmp/gc"
    check "  segment gone" test ! -e "$seg"
    "$HZSTAT" "$p" >/dev/null 2>"$tmp/e"
    expect_rc "after --gc: no such process" 3 $?
    "$HZSTAT" --gc >"$tmp/gc" 2>"$tmp/e"
    check "  a second --gc does not find it again" test -z "$(grep "hakozuna.$p " "$tmp/gc")"
else
    fail "stats_prog (to be killed) did not start"
fi

finish
