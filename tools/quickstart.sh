#!/bin/sh
# quickstart.sh - set-up and entry point for a fresh Debian 12 machine (run as root).
#   quickstart.sh demo   install build dependencies, build, and run a server-like
#                        program through a burst of traffic under glibc, hakozuna
#                        (watched live by hzstat) and every peer allocator installed:
#                        throughput and resident memory side by side
#   quickstart.sh test   install what the tests need, build with warnings as errors,
#                        and run the whole test suite (what CI runs)
set -eu
mode="${1:-}"
case "$mode" in
    demo|test) ;;
    *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
jobs=$(nproc 2>/dev/null || echo 2)

build_deps="build-essential autoconf automake libtool pkg-config python3"
test_deps="$build_deps g++ libjemalloc-dev git sqlite3 valgrind procps cppcheck clang-tidy debhelper lintian rpm man-db fakeroot mandoc"

install() {
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "== installing: $*"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    fi
}

build() {
    echo "== building"
    autoreconf -fi >/dev/null 2>&1 || autoreconf -fi
    mkdir -p build
    cd build
    ../configure --enable-werror "$@" >/dev/null
    make -j"$jobs" >/dev/null
    cd "$top"
}

if [ "$mode" = demo ]; then
    install $build_deps
    build
    # The tools from the build tree: HZRUN_LIBDIR points hzrun at the new libraries.
    hzrun() { HZRUN_LIBDIR="$top/build/.libs" "$top/build/tools/hzrun" "$@"; }
    hzstat() { "$top/build/tools/hzstat" "$@"; }
    prog="$top/build/bench/bench_server_burst"
    args="2 1024 1000 3000"
    out="$top/build/demo"
    rm -rf "$out"
    mkdir -p "$out"
    echo "== the program: a server whose workers fall behind during a burst of traffic"
    echo "   2 request handlers malloc messages, 2 workers free them (every free crosses"
    echo "   threads); 1 s steady traffic, then 1 GiB of messages queue up and are worked"
    echo "   off (1 in 1024 kept as cache entries), then 3 s of steady traffic again."
    echo "   bench/bench_server_burst.c; command: bench_server_burst $args"
    hzrun --check -- "$prog" 1 1 1 1 >/dev/null
    # The peers found on this machine (Debian's packages), under the names they install.
    peers=""
    for p in tcmalloc:libtcmalloc_minimal.so.4 mimalloc:libmimalloc.so.2 jemalloc:libjemalloc.so.2; do
        f=$(ldconfig -p 2>/dev/null | awk -v n="${p#*:}" '$1 == n { print $NF; exit }')
        [ -n "$f" ] && peers="$peers ${p%%:*}=$f"
    done
    for entry in glibc= hakozuna= $peers; do
        who=${entry%%=*}
        lib=${entry#*=}
        echo "== $who"
        if [ "$who" = hakozuna ]; then
            # Under hzrun --stats, watched live by hzstat from outside the process.
            hzrun --stats -- "$prog" $args >"$out/$who.txt" &
            pid=$!
            i=0
            while [ ! -e "/dev/shm/hakozuna.$pid" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
            hzstat -i 1 "$pid" 2>/dev/null | sed 's/^/   hzstat| /' &
            watcher=$!
            wait "$pid" || { echo "demo: the program failed under $who" >&2; exit 1; }
            wait "$watcher" 2>/dev/null || :
        else
            env ${lib:+LD_PRELOAD=$lib} "$prog" $args >"$out/$who.txt" ||
                { echo "demo: the program failed under $who" >&2; exit 1; }
        fi
        grep '^phase=' "$out/$who.txt" | sed 's/^/   /'
    done
    echo "== results, measured now on this machine ($(nproc) cores)"
    for entry in glibc= hakozuna= $peers; do
        who=${entry%%=*}
        awk -v who="$who" '
            /^phase=steady/ { for (i = 1; i <= NF; i++) if ($i ~ /^ops\/s=/) steady = substr($i, 7) }
            /^phase=burst/ { for (i = 1; i <= NF; i++) if ($i ~ /^rss_kb=/) after = substr($i, 8) }
            /^bench_server_burst/ { for (i = 1; i <= NF; i++) {
                split($i, kv, "=")
                if (kv[1] == "ops/s") ops = kv[2]
                if (kv[1] == "peak_rss_kb") peak = kv[2]
                if (kv[1] == "rss_end_kb") end = kv[2] } }
            END { printf "%s %.2f %.0f %.0f %.0f\n", who, ops / 1e6, peak / 1024, after / 1024, end / 1024 }
        ' "$out/$who.txt"
    done >"$out/table.txt"
    awk 'BEGIN { printf "%-10s %14s %14s %18s %18s\n", "allocator", "Mops/s", "peak RSS MiB", "RSS after burst", "RSS 3 s later" }
        { printf "%-10s %14.2f %14.0f %18.0f %18.0f\n", $1, $2, $3, $4, $5 } ' "$out/table.txt" | tee "$out/table.fmt"
    awk '$1 == "glibc" { g = $0; split(g, G) } $1 == "hakozuna" { split($0, H) }
        END { if (G[5] > 0 && H[5] > 0 && G[2] > 0)
            printf "hakozuna vs glibc: %.1fx the throughput; %.0f MiB resident 3 s after the burst where glibc keeps %.0f MiB\n",
                H[2] / G[2], H[5], G[5] }' "$out/table.txt"
    if command -v gnuplot >/dev/null 2>&1; then
        plot=""
        for entry in glibc= hakozuna= $peers; do
            who=${entry%%=*}
            awk '/^sample/ { split($2, t, "="); split($3, r, "="); print t[2] / 1000, r[2] / 1024 }' \
                "$out/$who.txt" >"$out/$who.rss"
            plot="$plot${plot:+, }'$out/$who.rss' using 1:2 with lines linewidth 2 title '$who'"
        done
        gnuplot -e "set terminal png size 800,450; set output '$out/rss.png';
            set title 'resident memory after a 1 GiB burst (this machine, this run)';
            set xlabel 'seconds after the burst'; set ylabel 'RSS (MiB)'; set key top right;
            plot $plot" && echo "chart: $out/rss.png"
    fi
    exit 0
fi

install $test_deps
build
cd build
echo "== make check"
if ! make -j"$jobs" check; then
    for f in tests/*.log; do
        grep -q '^FAIL\|^ERROR' "${f%.log}.trs" 2>/dev/null && { echo "== $f"; tail -40 "$f"; }
    done
    exit 1
fi
echo "== instructions per malloc+free pair against bench/instructions.ref (callgrind)"
make check-instructions
echo "== sanitizer builds (ThreadSanitizer, UBSan)"
make check-sanitizers
echo "== static analysis (cppcheck, clang-tidy)"
make lint
echo "== make distcheck"
make -j"$jobs" distcheck >/dev/null
echo "== packages: build, lintian, install, use, purge (.deb); build and list (RPM)"
make check-packages
echo "== all tests passed"
