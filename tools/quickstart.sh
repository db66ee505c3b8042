#!/bin/sh
# quickstart.sh - set-up and entry point for a fresh Debian 12 machine (run as root).
#   quickstart.sh demo   install build dependencies, build, and run python3 on an
#                        allocation-heavy workload under hakozuna and under glibc
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
    # hzrun from the build tree: HZRUN_LIBDIR points it at the freshly built libraries.
    hzrun() { HZRUN_LIBDIR="$top/build/.libs" "$top/build/tools/hzrun" "$@"; }
    hzrun --check -- python3 -c 'pass'
    echo "== python3 bench/python_alloc.py, 3 runs each (median)"
    for who in glibc hakozuna; do
        for i in 1 2 3; do
            if [ $who = glibc ]; then python3 bench/python_alloc.py
            else hzrun -- python3 bench/python_alloc.py; fi
        done | sort -t= -k3 -n | sed -n 2p | sed "s/^/$who: /"
    done | tee build/demo.txt
    awk -F'[ =]' '{t[$1]=$5; r[$1]=$7}
        END {printf "hakozuna vs glibc: time x%.2f, peak RSS x%.2f (below 1 is better)\n",
             t["hakozuna:"]/t["glibc:"], r["hakozuna:"]/r["glibc:"]}' build/demo.txt
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
