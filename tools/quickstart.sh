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
test_deps="$build_deps g++ libjemalloc-dev git sqlite3 xz-utils time valgrind procps cppcheck clang-tidy debhelper lintian rpm man-db fakeroot mandoc"

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
            # Until hzstat can read it (a process that may change its user id, as
            # root, keeps no name in /dev/shm: hzstat finds it through /proc).
            until hzstat -1 -f mallocs "$pid" >/dev/null 2>&1 || ! kill -0 "$pid" 2>/dev/null; do
                sleep 0.1
            done
            hzstat -i 1 "$pid" 2>&1 | sed 's/^/   hzstat| /' &
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
            { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
            /^phase=steady/ { before = v["ops/s"] }
            /^phase=burst/ { peak = v["peak_rss_kb"]; after = v["rss_kb"] }
            /^phase=calm/ { calm = v["ops/s"]; end = v["rss_kb"] }
            END { printf "%s %.3f %.3f %.0f %.0f %.0f\n", who, before / 1e6, calm / 1e6,
                  peak / 1024, after / 1024, end / 1024 }
        ' "$out/$who.txt"
    done >"$out/table.txt"
    awk 'BEGIN { printf "%-9s %14s %14s %9s %12s %12s\n", "", "Mops/s before", "Mops/s after",
                 "peak RSS", "RSS at end", "RSS 3 s"
                 printf "%-9s %14s %14s %9s %12s %12s\n", "allocator", "the burst", "the burst",
                 "MiB", "of burst MiB", "later MiB" }
        { printf "%-9s %14.3f %14.3f %9.0f %12.0f %12.0f\n", $1, $2, $3, $4, $5, $6 }' \
        "$out/table.txt" | tee "$out/table.fmt"
    awk '$1 == "glibc" { split($0, G) } $1 == "hakozuna" { split($0, H) }
        END { if (G[2] > 0 && G[3] > 0 && G[6] > 0)
            printf "hakozuna vs glibc: %.2fx and %.2fx the throughput before and after the burst; %.0f MiB resident 3 s after it, glibc %.0f MiB\n",
                H[2] / G[2], H[3] / G[3], H[6], G[6] }' "$out/table.txt"
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
echo "== layers: no file calls into a layer above its own, but for the listed calls"
make check-layers
echo "== every ./configure knob at both ends of its range builds warning-free"
make check-knobs
echo "== sanitizer builds (ThreadSanitizer, UBSan)"
make check-sanitizers
echo "== static analysis (cppcheck, clang-tidy)"
make lint
echo "== make distcheck (the tarball builds, installs and passes every test under the default variant)"
make -j"$jobs" distcheck TEST_VARIANTS=hakozuna >/dev/null
echo "== packages: build, lintian, install, use, purge (.deb); build and list (RPM)"
make check-packages
echo "== all tests passed"
