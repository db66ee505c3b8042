#!/bin/bash
# test_packages.sh - the packages, built and installed as users get them.
#
# On a Debian machine, as root:
#   1. copies the source tree to a temporary directory and builds the Debian
#      packages from it (dpkg-buildpackage -us -uc -b, test suite skipped with
#      DEB_BUILD_OPTIONS=nocheck: it runs separately), and runs lintian on them
#      (any error fails);
#   2. installs libhakozuna0, libhakozuna-dev and hakozuna-tools with dpkg -i and
#      checks them: every variant really loaded into a real program through
#      hzrun --check, live counters of a running process read with hzstat, the
#      libraries still use initial-exec TLS and no PLT, a program built with
#      pkg-config, the manual pages found by man, /etc/ld.so.preload untouched;
#   3. purges the packages and checks that nothing of them is left;
#   4. builds the RPM packages with rpmbuild -ba from the `make dist` tarball and
#      checks their file lists.
#
#   HZ_SRCDIR   the source tree (default: the directory above this script)
#   HZ_KEEP=1   keep the temporary directory (it is printed)
#
#   5. in a minimal root assembled from this system's packages: installs the
#      .debs with the root's dpkg, enables the system-wide preload there, upgrades
#      while programs keep starting, breaks the library (status must say so),
#      checks hzrun's reading of the file against the loader's, removes and
#      purges with the preload enabled, and runs the RPM erase scriptlet: every
#      command must keep running without a loader error at each step.
#
# Skips (exit 77) when not run as root or not on Debian (no dpkg-buildpackage).
# Prints "N passed, M failed"; exits 1 if anything failed.

# Functions run through check(); sh -c scripts are single-quoted on purpose.
# shellcheck disable=SC2317,SC2016,SC2012
set -u

passed=0
failed=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }
check() { # DESCRIPTION COMMAND...
    local d=$1
    shift
    if "$@"; then pass "$d"; else fail "$d"; fi
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}
section() { echo "== $*"; }
not_grep() { ! grep -q "$@"; }

if [ "$(id -u)" != 0 ]; then
    echo "SKIP: needs root (installs and purges packages)"
    exit 77
fi
if ! command -v dpkg-buildpackage >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
    echo "SKIP: not a Debian system (no dpkg-buildpackage)"
    exit 77
fi

src=${HZ_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
src=$(cd "$src" && pwd) || { echo "FAIL: source tree not found: ${HZ_SRCDIR-}"; exit 1; }
if [ ! -f "$src/configure.ac" ] || [ ! -d "$src/debian" ]; then
    echo "FAIL: $src is not a hakozuna source tree with debian/"
    exit 1
fi
jobs=$(nproc 2>/dev/null || echo 2)
# The installed tools, whatever else PATH holds, and nothing of a build tree.
unset HZRUN_LIBDIR LD_PRELOAD HAKOZUNA_STATS
HZRUN=/usr/bin/hzrun
HZSTAT=/usr/bin/hzstat
pkgs="libhakozuna0 libhakozuna-dev hakozuna-tools"
arch_triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=/usr/lib/$arch_triplet
variants="default scale mt debug"
libname() { if [ "$1" = default ]; then echo libhakozuna.so.0; else echo "libhakozuna_$1.so.0"; fi; }

# Tools the test needs besides dpkg-buildpackage: install what is missing.
need=""
for t in lintian:lintian rpmbuild:rpm man:man-db fakeroot:fakeroot dh:debhelper cpio:cpio \
    readelf:binutils autoreconf:autoconf automake:automake libtoolize:libtool \
    pkg-config:pkg-config cc:gcc /usr/include/jemalloc/jemalloc.h:libjemalloc-dev; do
    command -v "${t%%:*}" >/dev/null 2>&1 || [ -e "${t%%:*}" ] || need="$need ${t#*:}"
done
if [ -n "$need" ]; then
    echo "installing:$need"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null 2>&1; }
fi
for t in lintian rpmbuild man dh readelf autoreconf pkg-config cc; do
    command -v "$t" >/dev/null 2>&1 || { fail "tool $t is not installed"; finish; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/hz-packages.XXXXXX")
installed_by_us=0
preload_state() { if [ -e /etc/ld.so.preload ]; then sha256sum </etc/ld.so.preload; else echo absent; fi; }
preload_before=$(preload_state)
stop_file="$work/stop"
cleanup() {
    touch "$stop_file" 2>/dev/null
    if [ "$installed_by_us" = 1 ]; then
        # shellcheck disable=SC2086
        dpkg --purge $pkgs >/dev/null 2>&1
    fi
    if [ "${HZ_KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
start=$(date +%s)

# A copy of the source tree without build products: what git tracks plus new files
# it does not ignore, or everything but .git and build directories elsewhere.
copy_tree() { # DEST
    mkdir -p "$1"
    if command -v git >/dev/null 2>&1 && git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$src" && git ls-files -z -c -o --exclude-standard |
            while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
            tar --null -T - -cf -) | tar -C "$1" -xf -
    else
        tar -C "$src" --exclude=.git --exclude=./build --exclude=autom4te.cache -cf - . |
            tar -C "$1" -xf -
    fi
}

version=$(sed -n 's/^AC_INIT(\[hakozuna\], *\[\([^]]*\)\].*/\1/p' "$src/configure.ac")
deb_version=$(cd "$src" && dpkg-parsechangelog -S Version 2>/dev/null)
spec_version=$(sed -n 's/^Version: *//p' "$src/rpm/hakozuna.spec" 2>/dev/null)
check "debian/changelog version ($deb_version) is the configure version ($version)" \
    test "${deb_version%%-*}" = "$version"
check "rpm/hakozuna.spec version ($spec_version) is the configure version ($version)" \
    test "$spec_version" = "$version"
for page in "$src"/man/*.[0-9]; do
    check "${page##*/} is titled for hakozuna $version" grep -q "^\.TH .*\"hakozuna $version\"" "$page"
done

# ------------------------------------------------------------ Debian packages
section "dpkg-buildpackage"
copy_tree "$work/deb/hakozuna"
cd "$work/deb/hakozuna" || exit 1
if ! dpkg-checkbuilddeps >/dev/null 2>&1; then
    echo "installing build dependencies"
    DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -qq "$work/deb/hakozuna" >/dev/null 2>&1
fi
check "build dependencies are installed" dpkg-checkbuilddeps
t0=$(date +%s)
if DEB_BUILD_OPTIONS="nocheck parallel=$jobs" dpkg-buildpackage -us -uc -b >"$work/deb/build.log" 2>&1; then
    pass "dpkg-buildpackage -us -uc -b ($(($(date +%s) - t0)) s)"
else
    tail -n 60 "$work/deb/build.log"
    fail "dpkg-buildpackage -us -uc -b (log above)"
    finish
fi
cd "$work/deb" || exit 1
grep -E '^dpkg-gensymbols: warning' -A30 "$work/deb/build.log" | head -40
check "the symbols file matches the libraries (no dpkg-gensymbols warning)" \
    not_grep 'dpkg-gensymbols: warning' "$work/deb/build.log"
changes=$(ls "$work"/deb/hakozuna_*.changes 2>/dev/null | head -n 1)
debs=""
for p in $pkgs; do
    d=$(ls "$work"/deb/"${p}"_*.deb 2>/dev/null | head -n 1)
    if [ -n "$d" ]; then debs="$debs $d"; else fail "package $p was not built"; fi
done
[ -n "$changes" ] || { fail "no .changes file"; finish; }

section "lintian"
lintian --display-info --pedantic --color never "$changes" >"$work/deb/lintian.log" 2>&1
cat "$work/deb/lintian.log"
check "lintian: no errors" not_grep '^E: ' "$work/deb/lintian.log"
if grep -q '^W: ' "$work/deb/lintian.log"; then
    echo "note: lintian warnings above (errors fail the test, warnings do not)"
fi

# What the .debs hold, before installing them.
for d in $debs; do
    dpkg-deb -c "$d" | awk '{print $6}' | sed 's|^\./|/|' >>"$work/deb/contents"
done
check "no libtool archive (.la) in the packages" not_grep '\.la$' "$work/deb/contents"
for v in $variants; do
    check "libhakozuna0 ships $(libname "$v")" grep -qx "$libdir/$(libname "$v")" "$work/deb/contents"
done

section "install"
for p in $pkgs; do
    if dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
        echo "note: $p was installed before the test; it will be purged"
    fi
done
installed_by_us=1
# shellcheck disable=SC2086
if ! dpkg -i $debs >"$work/deb/install.log" 2>&1; then
    echo "dpkg -i left dependencies open; apt-get install -f"
    DEBIAN_FRONTEND=noninteractive apt-get install -f -y -qq >>"$work/deb/install.log" 2>&1
fi
for p in $pkgs; do
    check "$p is installed" sh -c "dpkg-query -W -f '\${Status}' $p 2>/dev/null | grep -q 'install ok installed'"
done
check "installing did not touch /etc/ld.so.preload" test "$(preload_state)" = "$preload_before"

section "installed libraries"
tls_ok() { # LIB: initial-exec TLS, no lazy binding, no PLT call but glibc's atfork stub
    local l=$1 rel
    rel=$(readelf -rW "$l") || return 1
    readelf -dW "$l" | grep -q 'STATIC_TLS' || { echo "$l: no STATIC_TLS flag"; return 1; }
    readelf -dW "$l" | grep -q 'BIND_NOW' || { echo "$l: not linked with -z now"; return 1; }
    if echo "$rel" | grep -q 'DTPMOD64\|DTPOFF64\|TLSDESC'; then
        echo "$l: dynamic TLS model"
        return 1
    fi
    if readelf -sW --dyn-syms "$l" | grep -q '__tls_get_addr'; then
        echo "$l: calls __tls_get_addr"
        return 1
    fi
    if echo "$rel" | grep 'JUMP_SLOT' | grep -v '__register_atfork'; then
        echo "$l: calls through the PLT (above): -fno-plt lost"
        return 1
    fi
    return 0
}
for v in $variants; do
    l="$libdir/$(libname "$v")"
    if [ -e "$l" ]; then
        check "$(libname "$v"): initial-exec TLS, BIND_NOW, no PLT calls" tls_ok "$l"
        check "$(libname "$v"): SONAME $(libname "$v")" \
            sh -c "readelf -dW '$l' | grep -q 'SONAME.*\\[$(libname "$v")\\]'"
    else
        fail "$l is not installed"
    fi
done

section "hzrun"
check "hzrun is installed" test -x "$HZRUN"
"$HZRUN" --list >"$work/list.out" 2>&1
cat "$work/list.out"
check "hzrun --list finds every variant" not_grep 'not installed' "$work/list.out"

# A real program with threads and many allocations, and its output on glibc.
if command -v python3 >/dev/null 2>&1; then
    prog=(python3 -c '
import hashlib, threading
def work(seed, out):
    d = {}
    for i in range(40000):
        d[i] = (str(i * seed) * (1 + i % 7)).encode()
        if i % 3 == 0:
            d.pop(i - i % 5, None)
    out.append(hashlib.sha256(b"".join(sorted(d.values()))).hexdigest())
res = []
ts = [threading.Thread(target=work, args=(s, res)) for s in range(1, 5)]
for t in ts: t.start()
for t in ts: t.join()
print(sorted(res))
')
else
    prog=(sh -c 'i=0; s=; while [ $i -lt 3000 ]; do s="$s$i"; i=$((i + 1)); done; echo ${#s}')
fi
expected=$("${prog[@]}")
for v in $variants; do
    got=$("$HZRUN" -v "$v" --check -- "${prog[@]}" 2>"$work/check.err")
    rc=$?
    cat "$work/check.err"
    check "hzrun -v $v --check ${prog[0]}: exit 0 and library loaded" \
        sh -c "[ $rc -eq 0 ] && grep -q 'hzrun: ok: .*$(libname "$v") is loaded into' '$work/check.err'"
    check "hzrun -v $v ${prog[0]}: same output as on glibc" test "$got" = "$expected"
done
check "hzrun fails (exit 3) when the library is missing" \
    sh -c 'HZRUN_LIBDIR=/nonexistent-dir "$1" true 2>/dev/null; [ $? -eq 3 ]' sh "$HZRUN"
check "hzrun --print-env fails (exit 3) when the library is missing" \
    sh -c 'HZRUN_LIBDIR=/nonexistent-dir "$1" --print-env >/dev/null 2>&1; [ $? -eq 3 ]' sh "$HZRUN"
# A program linked with Debian's jemalloc (libjemalloc-dev), as Debian's redis is.
printf '#include <stdlib.h>\n#include <stdio.h>\nint main(void) { char *p = malloc(64); puts(p ? "ok" : "no"); free(p); return 0; }\n' >"$work/je.c"
if cc -o "$work/je" "$work/je.c" -ljemalloc 2>"$work/cc.err"; then
    "$HZRUN" --check "$work/je" >/dev/null 2>"$work/je.err"
    rc=$?
    cat "$work/je.err"
    check "hzrun --check on a program linked with jemalloc: exit 3, names jemalloc and the split heap" \
        sh -c "[ $rc -eq 3 ] && grep -q 'libjemalloc.*split heap' '$work/je.err'"
else
    cat "$work/cc.err"
    fail "a program links with -ljemalloc (libjemalloc-dev)"
fi

section "hzstat"
if [ -x "$HZSTAT" ]; then
    # The program writes $ready_file once it runs: a python3 that is a shim (pyenv)
    # execs through other images first, each publishing a segment of its own under
    # the same pid, and only the last one stays.
    ready_file="$work/ready"
    if command -v python3 >/dev/null 2>&1; then
        "$HZRUN" --stats -- python3 -c '
import os, sys, time
keep = [bytearray(1000) for _ in range(20000)]
open(sys.argv[2], "w").close()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
' "$stop_file" "$ready_file" &
    else
        "$HZRUN" --stats -- sh -c ': >"$2"; while [ ! -e "$1" ]; do sleep 0.1; done' \
            sh "$stop_file" "$ready_file" &
    fi
    pid=$!
    i=0
    while [ ! -e "$ready_file" ] && [ $i -lt 300 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    # Its segment: /dev/shm/hakozuna.PID, or (a root process, which removes the name
    # at once) a mapping of that name "(deleted)".
    published() {
        [ -e "/dev/shm/hakozuna.$pid" ] ||
            grep -q " /dev/shm/hakozuna\.$pid (deleted)\$" "/proc/$pid/maps" 2>/dev/null
    }
    check "hzrun --stats: the process publishes its segment (hakozuna.$pid)" published
    "$HZSTAT" "$pid" >"$work/hzstat.out" 2>&1
    rc=$?
    cat "$work/hzstat.out"
    check "hzstat PID: exit 0" test "$rc" -eq 0
    check "hzstat PID: names the library version" grep -q "hakozuna $version" "$work/hzstat.out"
    check "hzstat lists the process as live" sh -c "'$HZSTAT' | grep -q '^$pid .*live'"
    check "hzstat -j PID: JSON with counters" sh -c "'$HZSTAT' -j $pid | grep -q '\"counters\"'"
    touch "$stop_file"
    wait "$pid"
    check "the process exited normally and removed its segment" \
        sh -c "[ $? -eq 0 ] && [ ! -e /dev/shm/hakozuna.$pid ]"
else
    fail "hzstat is not installed"
fi

section "libhakozuna-dev"
cat >"$work/prog.c" <<'C'
#include <hakozuna.h>
#include <hakozuna_shm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    struct hz_stats st;
    char *p = malloc(100);
    if (p == NULL || hz_usable_size(p) < 100 || hz_stats_get(&st, sizeof st) != 0)
        return 1;
    strcpy(p, "linked");
    printf("%s %s %u\n", hz_version(), p, HZ_SHM_LAYOUT_VERSION);
    free(p);
    return 0;
}
C
# shellcheck disable=SC2046
if cc -Wall -o "$work/prog" "$work/prog.c" $(pkg-config --cflags --libs hakozuna) 2>"$work/cc.err"; then
    pass "a program builds with pkg-config --cflags --libs hakozuna"
    check "the program runs on the installed library" \
        sh -c "'$work/prog' | grep -q '^hakozuna $version (default) linked'"
    check "the program is linked with libhakozuna.so.0" \
        sh -c "readelf -dW '$work/prog' | grep -q 'NEEDED.*libhakozuna.so.0'"
else
    cat "$work/cc.err"
    fail "a program builds with pkg-config --cflags --libs hakozuna"
fi

section "manual pages"
for page in "hakozuna 3" "hzrun 1" "hzstat 1" "hakozuna-preload 7" "hakozuna 7"; do
    # shellcheck disable=SC2086
    check "man -w $page" sh -c "man -w ${page#* } ${page% *} >/dev/null 2>&1"
done
check "man -w hzrun (any section)" sh -c 'man -w hzrun >/dev/null 2>&1'
check "man -w hzstat (any section)" sh -c 'man -w hzstat >/dev/null 2>&1'
check "examples installed" test -f /usr/share/doc/hakozuna-tools/examples/hakozuna.conf
for doc in README.md DESIGN.md VARIANTS.md BENCHMARKS.md benchmarks.png PERFORMANCE.md OBSERVABILITY.md; do
    check "documentation installed: $doc" sh -c "ls /usr/share/doc/hakozuna-tools/$doc* >/dev/null 2>&1"
done

# ------------------------------------------ system-wide preload in a root
# A minimal Debian root assembled from this system's own packages (dpkg, the
# shell and the tools hzrun and dpkg use, with their dependencies): the .debs
# are installed into it with its own dpkg, hakozuna is preloaded into every
# program there through its /etc/ld.so.preload, and it must keep every program
# working through upgrade, removal and purge.
section "system-wide preload in a root (chroot)"
root_pkgs="dpkg libc-bin dash coreutils sed grep mawk diffutils findutils tar debianutils"
closure() { # PACKAGE...: the packages and everything they depend on, installed here
    local todo="$*" seen=" " p deps d alt
    while [ -n "$todo" ]; do
        set -- $todo
        p=$1
        shift
        todo="$*"
        case $seen in *" $p "*) continue ;; esac
        seen="$seen$p "
        echo "$p"
        deps=$(dpkg-query -W -f '${Pre-Depends}, ${Depends}' "$p" 2>/dev/null)
        for d in $(printf '%s\n' "$deps" | tr ',' '\n' | sed 's/([^)]*)//g; s/:any//g; s/ //g'); do
            for alt in $(printf '%s\n' "$d" | tr '|' ' '); do
                if dpkg-query -W -f '${Status}' "$alt" 2>/dev/null | grep -q 'ok installed'; then
                    todo="$todo $alt"
                    break
                fi
            done
        done
    done
}
assemble_root() { # DIR
    local r=$1 p
    mkdir -p "$r/usr/bin" "$r/usr/sbin" "$r/usr/lib" "$r/usr/lib64" "$r/etc" "$r/dev" "$r/debs" \
        "$r/var/lib/dpkg/info" "$r/var/lib/dpkg/updates" "$r/var/lib/dpkg/triggers" "$r/var/log"
    for d in bin sbin lib lib64; do [ -L "/$d" ] && ln -s "usr/$d" "$r/$d"; done
    mkdir -m 1777 "$r/tmp"
    mknod "$r/dev/null" c 1 3 && chmod 666 "$r/dev/null"
    grep '^root:' /etc/passwd >"$r/etc/passwd"
    grep '^root:' /etc/group >"$r/etc/group"
    : >"$r/var/lib/dpkg/available"
    cp /var/lib/dpkg/info/format "$r/var/lib/dpkg/info/"
    closure $root_pkgs >"$work/root.pkgs"
    while read -r p; do
        dpkg -L "$p" 2>/dev/null | while IFS= read -r f; do
            [ -e "$f" ] || [ -L "$f" ] || continue
            [ -d "$f" ] && [ ! -L "$f" ] && continue
            printf '%s\n' "${f#/}"
        done
        dpkg-query -s "$p" >>"$r/var/lib/dpkg/status"
        echo >>"$r/var/lib/dpkg/status"
        cp -a /var/lib/dpkg/info/"$p".* /var/lib/dpkg/info/"$p":*.* "$r/var/lib/dpkg/info/" 2>/dev/null
    done <"$work/root.pkgs" | sort -u >"$work/root.files"
    tar -C / -cf - -T "$work/root.files" 2>/dev/null | tar -C "$r" --keep-directory-symlink -xf -
    ln -sf mawk "$r/usr/bin/awk" # an alternative, which dpkg -L does not list
    [ -e /var/lib/dpkg/triggers/ldconfig ] && cp /var/lib/dpkg/triggers/ldconfig "$r/var/lib/dpkg/triggers/"
    : >"$r/var/lib/dpkg/triggers/File"
    chroot "$r" /sbin/ldconfig
}
root=$work/root
in_root() { chroot "$root" "$@"; }
runs_clean() { # every command of a sample runs, without a word from the loader
    in_root /bin/sh -c 'ls / >/dev/null && echo x | sed s/x/y/ | grep -q y &&
        awk "BEGIN { exit 0 }" && sort /etc/passwd >/dev/null && dpkg -l >/dev/null &&
        find /usr/bin -name sh >/dev/null && tar --version >/dev/null && date >/dev/null' \
        >"$work/root.out" 2>"$work/root.err"
    local rc=$?
    if [ $rc -ne 0 ] || [ -s "$work/root.err" ]; then
        echo "exit $rc"
        cat "$work/root.err"
        return 1
    fi
}
preloaded_in_root() { # a program of the root really has hakozuna loaded
    in_root /bin/sh -c 'LD_DEBUG=libs /bin/true' 2>&1 | grep -q "calling init: $libdir/libhakozuna.so.0"
}
t0=$(date +%s)
assemble_root "$root"
check "a root with dpkg assembled from this system's packages ($(wc -l <"$work/root.pkgs") packages, $(($(date +%s) - t0)) s)" \
    runs_clean
for p in libhakozuna0 hakozuna-tools; do cp "$work"/deb/"${p}"_*.deb "$root/debs/"; done
# The next version, for the upgrade: the same packages, version and dependencies raised.
mkdir -p "$work/up"
for d in "$root"/debs/*.deb; do
    x="$work/up/x"
    rm -rf "$x"
    dpkg-deb -R "$d" "$x"
    sed -i "s/^Version: .*/Version: ${deb_version}+up1/; s/(= ${deb_version})/(= ${deb_version}+up1)/g" "$x/DEBIAN/control"
    dpkg-deb -b "$x" "$work/up/" >/dev/null
done
lib0=$libdir/libhakozuna.so.0

printf '# site preloads\n' >"$root/etc/ld.so.preload"
printf '%s/libm.so.6\n' "$libdir" >>"$root/etc/ld.so.preload"
cp "$root/etc/ld.so.preload" "$work/site-preload"
check "dpkg -i in the root" sh -c "chroot '$root' sh -c 'dpkg -i /debs/*.deb' >'$work/root-install.log' 2>&1"
check "  installing did not touch the root's /etc/ld.so.preload" cmp -s "$root/etc/ld.so.preload" "$work/site-preload"
in_root hzrun --system enable >"$work/enable.out" 2>&1
check "hzrun --system enable in the root" test $? -eq 0
cat "$work/enable.out" | head -3
check "  the root's programs load hakozuna" preloaded_in_root
check "  every command still runs, silently" runs_clean
check "  the site's entry and comment are kept" \
    test "$(cat "$root/etc/ld.so.preload")" = "# site preloads
$lib0
$libdir/libm.so.6"

# Upgrade while programs keep starting.
rm -f "$root/tmp/stop"
in_root /bin/sh -c 'n=0; while [ ! -e /tmp/stop ]; do /bin/true || echo "FAILED: exit $?"; n=$((n + 1)); done; echo "$n runs"' \
    >"$work/during.out" 2>&1 &
loop=$!
cp "$work"/up/*.deb "$root/debs/"
rm -f "$root"/debs/*_"${deb_version}"_*.deb
check "upgrade to ${deb_version}+up1 with dpkg -i" \
    sh -c "chroot '$root' sh -c 'dpkg -i /debs/*.deb' >'$work/root-upgrade.log' 2>&1"
touch "$root/tmp/stop"
wait "$loop"
cat "$work/during.out" | tail -n 1
check "  no program failed or printed a loader error during the upgrade" \
    sh -c "! grep -q 'FAILED\|ERROR\|cannot be preloaded' '$work/during.out' '$work/root-upgrade.log'"
check "  still enabled after the upgrade" sh -c "chroot '$root' hzrun --system status >/dev/null"
check "  every command still runs" runs_clean

# status on a broken library, from outside with --root (the root's programs
# would all die: status proves it in a child inside the root).
cp "$root$lib0" "$work/lib.good"
head -c 4096 "$work/lib.good" >"$root$lib0"
"$HZRUN" --system status --root "$root" >"$work/status.out" 2>&1
rc=$?
cat "$work/status.out"
check "hzrun --system status --root: a library truncated to 4 KiB is BROKEN (exit 3)" \
    sh -c "[ $rc -eq 3 ] && grep -q 'BROKEN.*SIGBUS' '$work/status.out'"
cat "$work/lib.good" >"$root$lib0"
check "  and fine again once repaired" sh -c "'$HZRUN' --system status --root '$root' >/dev/null"

# The loader's comment quirk, against the real loader of the root.
printf '# a\n%s\n# keep these two words\n' "$lib0" >"$root/etc/ld.so.preload"
loader_says=$(in_root /bin/true 2>&1 | sed -n "s/.*object '\\([^']*\\)' from .*/\\1/p" | sort | tr '\n' ' ')
hzrun_says=$("$HZRUN" --system status --root "$root" 2>&1 >/dev/null |
    sed -n 's/.*the loader reads "\([^"]*\)" as a library.*/\1/p' | sort | tr '\n' ' ')
echo "loader: ${loader_says:-nothing}; hzrun: ${hzrun_says:-nothing}"
check "hzrun warns about exactly the words the root's loader misreads" \
    sh -c "[ -n '$loader_says' ] && [ '$loader_says' = '$hzrun_says' ]"
in_root hzrun --system enable >/dev/null 2>&1
check "  enable rewrites the file so that the loader reads it as written" runs_clean

# Removal and purge take hakozuna out of the preload first.
check "dpkg -r hakozuna-tools libhakozuna0 with the preload enabled" \
    sh -c "chroot '$root' dpkg -r hakozuna-tools libhakozuna0 >'$work/root-remove.log' 2>&1"
cat "$work/root-remove.log" | grep -i 'preload' | head -3
check "  the root's /etc/ld.so.preload names no hakozuna library" \
    sh -c "! grep -q libhakozuna '$root/etc/ld.so.preload' 2>/dev/null"
check "  every command still runs, silently" runs_clean
check "reinstall and enable" sh -c "chroot '$root' sh -c 'dpkg -i /debs/*.deb && hzrun --system enable' >/dev/null 2>&1"
check "  every command still runs" runs_clean
check "dpkg --purge hakozuna-tools libhakozuna0 with the preload enabled" \
    sh -c "chroot '$root' dpkg --purge hakozuna-tools libhakozuna0 >'$work/root-purge.log' 2>&1"
check "  /etc/ld.so.preload names no hakozuna library" \
    sh -c "! grep -q libhakozuna '$root/etc/ld.so.preload' 2>/dev/null"
check "  the libraries are gone" sh -c "! ls '$root$libdir'/libhakozuna* >/dev/null 2>&1"
check "  every command still runs, silently" runs_clean

section "purge"
for p in $pkgs; do dpkg -L "$p" 2>/dev/null; done | sort -u >"$work/deb/files"
# shellcheck disable=SC2086
check "dpkg --purge $pkgs" sh -c "dpkg --purge $pkgs >'$work/deb/purge.log' 2>&1"
installed_by_us=0
for p in $pkgs; do
    check "$p is gone (dpkg -L lists nothing)" sh -c "[ -z \"\$(dpkg -L $p 2>/dev/null)\" ]"
done
left=""
while IFS= read -r f; do
    [ -n "$f" ] || continue
    if [ -L "$f" ] || [ -f "$f" ]; then left="$left $f"; fi
    case $f in /usr/share/doc/hakozuna-tools | /usr/share/doc/libhakozuna*) [ -e "$f" ] && left="$left $f" ;; esac
done <"$work/deb/files"
check "no file of the packages is left${left:+:$left}" test -z "$left"
check "no libhakozuna library is left in $libdir" \
    sh -c "! ls '$libdir'/libhakozuna* >/dev/null 2>&1"
check "hzrun and hzstat are gone" sh -c "[ ! -e '$HZRUN' ] && [ ! -e '$HZSTAT' ]"
check "purging did not touch /etc/ld.so.preload" test "$(preload_state)" = "$preload_before"

# --------------------------------------------------------------- RPM packages
section "make dist"
copy_tree "$work/rpmsrc/hakozuna"
cd "$work/rpmsrc/hakozuna" || exit 1
t0=$(date +%s)
if (autoreconf -fi && mkdir -p _dist && cd _dist && ../configure --quiet &&
    make dist) >"$work/rpmsrc/dist.log" 2>&1; then
    pass "make dist ($(($(date +%s) - t0)) s)"
else
    tail -n 40 "$work/rpmsrc/dist.log"
    fail "make dist"
    finish
fi
tarball="$work/rpmsrc/hakozuna/_dist/hakozuna-$version.tar.gz"
check "make dist made hakozuna-$version.tar.gz" test -f "$tarball"
for f in man/hakozuna.3 man/hzrun.1 man/hzstat.1 man/hakozuna-preload.7 tools/hzstat.c \
    man/hakozuna.7 tools/systemd/hakozuna.conf rpm/hakozuna.spec debian/control; do
    check "the tarball holds $f" sh -c "tar -tzf '$tarball' | grep -qx 'hakozuna-$version/$f'"
done

section "rpmbuild"
mkdir -p "$work/rpm/SOURCES" "$work/rpm/SPECS"
cp "$tarball" "$work/rpm/SOURCES/"
cp "$src/rpm/hakozuna.spec" "$work/rpm/SPECS/"
t0=$(date +%s)
if rpmbuild -ba --nodeps --without check --define "_topdir $work/rpm" \
    --define "_smp_mflags -j$jobs" "$work/rpm/SPECS/hakozuna.spec" >"$work/rpm/build.log" 2>&1; then
    pass "rpmbuild -ba ($(($(date +%s) - t0)) s)"
else
    tail -n 60 "$work/rpm/build.log"
    fail "rpmbuild -ba (log above)"
    finish
fi
check "source RPM built" sh -c "ls '$work'/rpm/SRPMS/hakozuna-$version-*.src.rpm >/dev/null 2>&1"
rpm_of() { ls "$work"/rpm/RPMS/*/"$1"-"$version"-*.rpm 2>/dev/null | head -n 1; }
rpm_has() { # PACKAGE PATTERN (a grep -E regular expression for one whole line)
    local r
    r=$(rpm_of "$1")
    [ -n "$r" ] && rpm -qlp "$r" 2>/dev/null | grep -Eqx "$2"
}
for p in hakozuna hakozuna-devel hakozuna-tools; do
    r=$(rpm_of "$p")
    if [ -n "$r" ]; then
        pass "RPM $p built"
        echo "--- rpm -qlp ${r##*/}"
        rpm -qlp "$r"
        check "RPM $p holds no libtool archive" sh -c "! rpm -qlp '$r' | grep -q '\\.la\$'"
    else
        fail "RPM $p built"
    fi
done
for v in $variants; do
    check "RPM hakozuna holds $(libname "$v")" rpm_has hakozuna "/usr/lib[0-9]*/$(libname "$v")"
    check "RPM hakozuna-devel holds the ${v} development link" \
        rpm_has hakozuna-devel "/usr/lib[0-9]*/$(libname "$v" | sed 's/\.0$//')"
done
check "RPM hakozuna-devel holds hakozuna.h" rpm_has hakozuna-devel /usr/include/hakozuna.h
check "RPM hakozuna-devel holds hakozuna_shm.h" rpm_has hakozuna-devel /usr/include/hakozuna_shm.h
check "RPM hakozuna-devel holds hakozuna.pc" rpm_has hakozuna-devel '/usr/lib[0-9]*/pkgconfig/hakozuna.pc'
check "RPM hakozuna-devel holds hakozuna(3)" rpm_has hakozuna-devel '/usr/share/man/man3/hakozuna\.3(\.gz|\.bz2|\.xz|\.zst)?'
check "RPM hakozuna-tools holds hzrun" rpm_has hakozuna-tools /usr/bin/hzrun
check "RPM hakozuna-tools holds hzstat" rpm_has hakozuna-tools /usr/bin/hzstat
for page in man1/hzrun.1 man1/hzstat.1 man7/hakozuna-preload.7 man7/hakozuna.7; do
    check "RPM hakozuna-tools holds ${page#*/}" \
        rpm_has hakozuna-tools "/usr/share/man/${page//./\\.}(\\.gz|\\.bz2|\\.xz|\\.zst)?"
done
for doc in VARIANTS.md BENCHMARKS.md; do
    check "RPM hakozuna-tools holds $doc" rpm_has hakozuna-tools "/usr/share/doc/hakozuna/$doc"
done
check "RPM hakozuna-tools holds the systemd example" \
    rpm_has hakozuna-tools '/usr/share/doc/hakozuna/examples/hakozuna\.conf'
command -v cpio >/dev/null 2>&1 && check "RPM hzrun points at the RPM library directory" \
    sh -c "rpm2cpio '$(rpm_of hakozuna-tools)' | cpio -i --to-stdout ./usr/bin/hzrun 2>/dev/null |
        grep -q \"^default_libdir='/usr/lib[0-9]*'\""

# The erase scriptlet, run as rpm runs it, in the root with the RPM's files.
if command -v cpio >/dev/null 2>&1 && [ -d "$root/usr" ]; then
    rpm2cpio "$(rpm_of hakozuna)" | (cd "$root" && cpio -idm --quiet 2>/dev/null)
    rpm -qp --scripts "$(rpm_of hakozuna)" 2>/dev/null |
        awk '/^preuninstall scriptlet/ { on = 1; next } /^[a-z]+ scriptlet/ { on = 0 } on' >"$root/tmp/preun"
    rpmlib=$(rpm -qlp "$(rpm_of hakozuna)" | grep -m 1 '/libhakozuna\.so\.0$')
    check "RPM: the erase scriptlet is in the package" grep -q 'hzrun --system disable' "$root/tmp/preun"
    check "RPM: the package's hzrun enables its library in the root" \
        sh -c "chroot '$root' ${rpmlib%/*}/hakozuna/hzrun --system enable >/dev/null 2>&1 && grep -q '$rpmlib' '$root/etc/ld.so.preload'"
    check "RPM: the scriptlet on upgrade (\$1 = 1) keeps the preload" \
        sh -c "chroot '$root' sh /tmp/preun 1 && grep -q '$rpmlib' '$root/etc/ld.so.preload'"
    check "RPM: the scriptlet on erase (\$1 = 0) takes hakozuna out of it" \
        sh -c "chroot '$root' sh /tmp/preun 0 >/dev/null && ! grep -q libhakozuna '$root/etc/ld.so.preload' 2>/dev/null"
    check "  every command still runs" runs_clean
fi

echo "== $(($(date +%s) - start)) s"
finish
