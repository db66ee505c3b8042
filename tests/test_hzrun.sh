#!/bin/sh
# test_hzrun.sh - hzrun: variants, --print-env, --check, exit status and signal
# pass-through, LD_PRELOAD handling, and --system against a temporary root
# directory (never the real /etc).
#
#   HZ_TOOLS_DIR    directory holding hzrun (the build tree's tools/)
#   HZRUN_LIBDIR    directory holding libhakozuna*.so.0 (default: HZ_TEST_LIBDIR)
#   HZ_TEST_VARIANT library name set by tests/preload.sh: the hzrun variant to test
#
# Skips (exit 77) only when /dev/shm is not available, like test_hzstat.sh.
# (Single-quoted $ below is expanded by the shell that hzrun starts.)
# shellcheck disable=SC2016

set -u

. "$(dirname "$0")/testlib.sh"

need_dev_shm

tools=${HZ_TOOLS_DIR:-}
if [ -z "$tools" ] || [ ! -f "$tools/hzrun" ]; then
    echo "FAIL: HZ_TOOLS_DIR must name the directory of hzrun (got '${tools}')"
    exit 1
fi
HZRUN="$tools/hzrun"
HZRUN_LIBDIR=${HZRUN_LIBDIR:-${HZ_TEST_LIBDIR:-}}
if [ -z "$HZRUN_LIBDIR" ] || [ ! -d "$HZRUN_LIBDIR" ]; then
    echo "FAIL: HZRUN_LIBDIR (or HZ_TEST_LIBDIR) must name the built library directory"
    exit 1
fi
HZRUN_LIBDIR=$(cd "$HZRUN_LIBDIR" && pwd)
export HZRUN_LIBDIR
case ${HZ_TEST_VARIANT:-hakozuna} in
hakozuna) variant=default lib=$HZRUN_LIBDIR/libhakozuna.so.0 ;;
hakozuna_*)
    variant=${HZ_TEST_VARIANT#hakozuna_}
    lib=$HZRUN_LIBDIR/libhakozuna_$variant.so.0
    ;;
*) variant=default lib=$HZRUN_LIBDIR/libhakozuna.so.0 ;;
esac
if [ ! -e "$lib" ]; then
    echo "FAIL: $lib not built"
    exit 1
fi
echo "hzrun: $HZRUN, variant $variant: $lib"
unset HAKOZUNA_STATS

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hz-run.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

run() { # run hzrun, stdout -> $tmp/o, stderr -> $tmp/e; sets rc
    "$HZRUN" "$@" >"$tmp/o" 2>"$tmp/e"
    rc=$?
}
run_libdir() { # DIR ARGS... : run with HZRUN_LIBDIR=DIR
    d=$1
    shift
    env HZRUN_LIBDIR="$d" "$HZRUN" "$@" >"$tmp/o" 2>"$tmp/e"
    rc=$?
}

# ---------------------------------------------------------- information
run --version
expect_rc "--version" 0 $rc
check "  prints a version" grep -q '^hzrun (hakozuna) [0-9]' "$tmp/o"
run --help
expect_rc "--help" 0 $rc
check "  documents the exit statuses" grep -q 'Exit status' "$tmp/o"

run --list
expect_rc "--list" 0 $rc
check "  shows the $variant variant with its library and version" \
    grep -Eq "^$variant +$lib +hakozuna [0-9.]+ \(" "$tmp/o"
check "  shows the build configuration" grep -q 'config: variant=' "$tmp/o"
sed 's/^/    /' "$tmp/o"
mkdir -p "$tmp/empty-libdir"
run_libdir "$tmp/empty-libdir" --list
expect_rc "--list with no library installed" 3 $rc

run --print-env "$variant"
expect_rc "--print-env $variant" 0 $rc
check "  prints LD_PRELOAD=$lib only" test "$(cat "$tmp/o")" = "LD_PRELOAD=$lib"
run --print-env "$variant" --stats
check "--print-env --stats adds HAKOZUNA_STATS=1" \
    test "$(cat "$tmp/o")" = "LD_PRELOAD=$lib
HAKOZUNA_STATS=1"
run --print-env bogus
expect_rc "--print-env with an unknown variant" 2 $rc
run --print-env "default scale"
expect_rc "--print-env with two variant names in one word" 2 $rc
run -v "mt debug" /bin/true
expect_rc "-v with two variant names in one word" 2 $rc
check "  says unknown variant" grep -q 'unknown variant' "$tmp/e"
run --print-env "$variant" --profile=12345678901234
expect_rc "--profile= with 14 digits (the library reads at most 13)" 2 $rc
run --print-env "$variant" --profile=1234567890123
expect_rc "--profile= with 13 digits" 0 $rc
# Output that cannot be written is an error: an environment file half written
# must not look like success.
if [ -c /dev/full ]; then
    for args in "--print-env $variant --stats" "--list" "--version"; do
        # shellcheck disable=SC2086
        "$HZRUN" $args >/dev/full 2>/dev/null
        expect_rc "hzrun $args >/dev/full" 1 $?
    done
else
    skip "write errors: no /dev/full"
fi
run_libdir "$tmp/nolib" --print-env "$variant"
expect_rc "--print-env with the library directory missing" 3 $rc
check "  says why, prints no environment" sh -c "grep -q 'no such library' '$tmp/e' && [ ! -s '$tmp/o' ]"

# ------------------------------------------------------------- --check
run -v "$variant" --check /bin/true
expect_rc "--check /bin/true" 0 $rc
check "  reports ok: the library is loaded" grep -q "^hzrun: ok: $lib is loaded into /bin/true" "$tmp/e"
run -v "$variant" --check sh -c 'exit 5'
expect_rc "--check passes the command's exit status through" 5 $rc
run_libdir "$tmp/nolib" -v "$variant" --check /bin/true
expect_rc "--check with a missing library path" 3 $rc
check "  says the loader would fall back to glibc" grep -q 'glibc malloc' "$tmp/e"
mkdir -p "$tmp/badlib"
echo 'not an ELF file' >"$tmp/badlib/${lib##*/}"
run_libdir "$tmp/badlib" -v "$variant" --check /bin/true
expect_rc "--check with a library the loader rejects" 3 $rc
check "  says it is NOT loaded" grep -q 'NOT loaded' "$tmp/e"
static=
for p in /sbin/ldconfig /usr/sbin/ldconfig; do
    if [ -x "$p" ] && ldd "$p" 2>&1 | grep -Eq 'statically linked|not a dynamic executable'; then
        static=$p
        break
    fi
done
if [ -n "$static" ]; then
    run -v "$variant" --check "$static" --version
    expect_rc "--check on a static program ($static)" 3 $rc
    check "  says LD_PRELOAD does not apply" grep -q 'LD_PRELOAD does not apply' "$tmp/e"
else
    skip "--check on a static program: none found"
fi
suid=
for p in /usr/bin/passwd /usr/bin/su /bin/su /usr/bin/mount /usr/bin/chsh; do
    if [ -u "$p" ]; then suid=$p; break; fi
done
if [ -n "$suid" ]; then
    run -v "$variant" --check "$suid" --help
    expect_rc "--check on a setuid program ($suid)" 3 $rc
    check "  says LD_PRELOAD does not apply" grep -q 'LD_PRELOAD does not apply' "$tmp/e"
else
    skip "--check on a setuid program: none found"
fi

# --check: another allocator in the program
own=${HZ_OWN_MALLOC_PROG:-}
if [ -n "$own" ] && [ -x "$own" ]; then
    run -v "$variant" --check "$own"
    expect_rc "--check on a program with a malloc of its own" 3 $rc
    check "  says malloc comes from the program, not hakozuna" \
        grep -q "malloc.* come from $own, not from hakozuna" "$tmp/e"
    check "  names the built-in allocator (mi_malloc)" grep -q 'another allocator built in (it names mi_malloc)' "$tmp/e"
else
    fail "HZ_OWN_MALLOC_PROG is not set to the built tests/own_malloc"
fi
if printf '#include <stdlib.h>\nint main(void){void*p=malloc(64);free(p);return p==NULL;}\n' |
    cc -x c -o "$tmp/with_jemalloc" - -ljemalloc 2>/dev/null; then
    run -v "$variant" --check "$tmp/with_jemalloc"
    expect_rc "--check on a program linked with jemalloc" 3 $rc
    check "  says it loads jemalloc and what that means" grep -q 'loads .*libjemalloc.*split heap' "$tmp/e"
else
    skip "--check on a program linked with jemalloc: no libjemalloc-dev"
fi

# A program built without PIE that takes malloc's address: the loader binds the C
# library's malloc to the program's own entry, which leads on to hakozuna.
if printf '#include <stdlib.h>\nvoid *(*volatile m)(size_t);\nint main(void){m=malloc;void*p=m(64);free(p);return p==NULL;}\n' |
    cc -x c -no-pie -fno-pic -o "$tmp/nopie" - 2>/dev/null; then
    run -v "$variant" --check "$tmp/nopie"
    expect_rc "--check on a program built without PIE that takes malloc's address" 0 $rc
    check "  warns of nothing" sh -c "! grep -q warning '$tmp/e'"
else
    skip "--check on a program built without PIE: cc -no-pie failed"
fi

# ------------------------------------------------ running a command
"$HZRUN" -v "$variant" -- sh -c 'exit 7'
expect_rc "exit status passes through (sh -c 'exit 7')" 7 $?
("$HZRUN" -v "$variant" sh -c 'kill -TERM $$'; exit $?) 2>/dev/null
expect_rc "death by a signal passes through (SIGTERM)" 143 $?
"$HZRUN" -v "$variant" sh -c 'test "$PPID" = "$1"' sh $$
expect_rc "the command replaces hzrun (exec: its parent is the caller)" 0 $?
run -v "$variant" printf '%s|' a 'b c' ''
check "arguments pass through unchanged" test "$(cat "$tmp/o")" = "a|b c||"
run -v "$variant" hz-no-such-command-here
expect_rc "command not found" 127 $rc
check "  says so" grep -q 'command not found' "$tmp/e"
printf 'echo hi\n' >"$tmp/notexec"
chmod 644 "$tmp/notexec"
run -v "$variant" "$tmp/notexec"
expect_rc "command not executable" 126 $rc
run_libdir "$tmp/nolib" -v "$variant" /bin/true
expect_rc "missing library: refuses to run silently on glibc" 3 $rc
# LD_PRELOAD splits at spaces and colons: such a library path cannot be preloaded.
for odd in "lib dir" "lib:dir"; do
    mkdir "$tmp/$odd"
    ln -s "$lib" "$tmp/$odd/${lib##*/}"
    run_libdir "$tmp/$odd" -v "$variant" /bin/true
    expect_rc "library under '$odd': refuses to run silently on glibc" 3 $rc
    run_libdir "$tmp/$odd" --print-env "$variant"
    expect_rc "library under '$odd': --print-env refuses it" 3 $rc
done
# An environment file (systemd's EnvironmentFile=) reads quotes, backslashes and
# newlines as syntax: --print-env refuses such a path; running with it works.
for odd in 'lib\b' "lib'q" 'lib
nl'; do
    mkdir "$tmp/$odd"
    ln -s "$lib" "$tmp/$odd/${lib##*/}"
    run_libdir "$tmp/$odd" --print-env "$variant"
    expect_rc "library under '$odd': --print-env refuses it" 3 $rc
    run_libdir "$tmp/$odd" -v "$variant" /bin/true
    expect_rc "library under '$odd': runs" 0 $rc
done
if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode != -15)' \
        "$HZRUN" --check -v "$variant" sh -c 'kill -TERM $$' 2>/dev/null
    expect_rc "--check: death by a signal passes through as that signal (SIGTERM)" 0 $?
else
    skip "--check and a signal: no python3 to see how hzrun ended"
fi

# LD_PRELOAD: ours first, others kept in order, no duplicates, no other hakozuna.
libc=$(ldd /bin/sh 2>/dev/null | awk '/libc\.so/ { print $3; exit }')
[ -n "$libc" ] || libc=$lib
other_hz=$HZRUN_LIBDIR/libhakozuna_other.so.0
env LD_PRELOAD="$libc" "$HZRUN" -v "$variant" sh -c 'printf %s "$LD_PRELOAD"' >"$tmp/o" 2>"$tmp/e"
check "LD_PRELOAD: library first, existing entry kept ($(cat "$tmp/o"))" \
    test "$(cat "$tmp/o")" = "$lib:$libc"
env LD_PRELOAD="$lib $libc:$lib:$libc" "$HZRUN" -v "$variant" sh -c 'printf %s "$LD_PRELOAD"' >"$tmp/o" 2>/dev/null
check "LD_PRELOAD: no duplicates ($(cat "$tmp/o"))" test "$(cat "$tmp/o")" = "$lib:$libc"
env LD_PRELOAD="$other_hz:$libc" "$HZRUN" -v "$variant" sh -c 'printf %s "$LD_PRELOAD"' >"$tmp/o" 2>/dev/null
check "LD_PRELOAD: another hakozuna build is replaced ($(cat "$tmp/o"))" test "$(cat "$tmp/o")" = "$lib:$libc"
# (printenv exits through exit(), so the stats segment of --stats is removed again.)
run -v "$variant" printenv HAKOZUNA_STATS
check "no --stats: HAKOZUNA_STATS left unset" test "$rc" -eq 1 -a ! -s "$tmp/o"
run -v "$variant" --stats printenv HAKOZUNA_STATS
check "--stats: HAKOZUNA_STATS=1" test "$rc" -eq 0 -a "$(cat "$tmp/o")" = 1

# ------------------------------------------------------- bad arguments
for args in "" "--bogus" "-v" "-v bogus true" "--system" "--system bogus" \
    "--root /tmp true" "--system status extra" "--list extra" "--version extra" \
    "--system enable --stats" "--list --print-env" "--print-env --list" "--list --stats" \
    "--version --check" "--print-env --check" "--list --system status"; do
    # shellcheck disable=SC2086
    run $args
    expect_rc "bad arguments: hzrun $args" 2 $rc
done
check "bad arguments point to --help" grep -q -- '--help' "$tmp/e"

# ------------------------------------------------------------ --system
root=$tmp/root
mkdir -p "$root/etc"
pf=$root/etc/ld.so.preload
run --system status --root "$root"
expect_rc "--system status: no preload file" 1 $rc

# enable checks the library under the root, not the one of this system
run --system enable --root "$root" -v "$variant"
expect_rc "--system enable --root: library missing under the root" 3 $rc
check "  says it does not exist under the root" grep -q "does not exist under $root" "$tmp/e"
check "  no file written" test ! -e "$pf"
mkdir -p "$root$(dirname "$lib")"
cp "$lib" "$root$lib"

printf '# site preloads\n/usr/lib/libkeep.so /usr/lib/libkeep2.so\n' >"$pf"
cp "$pf" "$tmp/orig"
ino_before=$(stat -c %i "$pf")
run --system enable --root "$root" -v "$variant"
expect_rc "--system enable" 0 $rc
check "  the library is listed once" test "$(grep -c -F "$lib" "$pf")" -eq 1
check "  ... after the comment, before the other entries" \
    test "$(cat "$pf")" = "# site preloads
$lib
/usr/lib/libkeep.so /usr/lib/libkeep2.so"
check "  written by rename (new inode)" test "$(stat -c %i "$pf")" != "$ino_before"
check "  mode 0644" test "$(stat -c %a "$pf")" = 644
check "  no temporary file left" test "$(ls -A "$root/etc")" = ld.so.preload
check "  prints how to recover" grep -q 'init=/bin/sh' "$tmp/o"
check "  notes that a broken entry only warns" grep -q 'only prints' "$tmp/o"
cp "$pf" "$tmp/enabled"
run --system enable --root "$root" -v "$variant"
expect_rc "--system enable again" 0 $rc
check "  idempotent: file unchanged" cmp -s "$pf" "$tmp/enabled"
check "  says already enabled" grep -q 'already enabled' "$tmp/o"

# status proves that the entry under the root loads, and says why not
broken_status() { # DESCRIPTION REASON-PATTERN
    run --system status --root "$root"
    expect_rc "--system status: $1" 3 $rc
    check "  says BROKEN: $2" grep -q "BROKEN: $lib .*$2" "$tmp/o"
    run --system enable --root "$root" -v "$variant"
    expect_rc "  --system enable refuses it" 3 $rc
    check "  file unchanged" cmp -s "$pf" "$tmp/enabled"
    cp "$lib" "$root$lib"
    chmod 644 "$root$lib"
}
# (The proof does not depend on the variant: these run under the default one.)
if [ "$variant" = default ]; then
mv "$root$lib" "$root$lib.away"
broken_status "library missing under the root" 'does not exist'
rm -f "$root$lib.away"
head -c 4096 "$lib" >"$root$lib"
broken_status "library truncated to 4 KiB" 'kills every program.*SIGBUS'
chmod 600 "$root$lib"
broken_status "library readable by root only" 'not readable by every user'
# The same library, marked as built for another machine (e_machine = 0xb7, aarch64).
cp "$lib" "$root$lib"
printf '\267\000' | dd of="$root$lib" bs=1 seek=18 conv=notrunc 2>/dev/null
broken_status "library of another architecture" 'built for aarch64'
fi
run --system status --root "$root"
expect_rc "--system status: enabled" 0 $rc
check "  names the library and other entries" grep -q "enabled: $lib" "$tmp/o"
check "  lists the other entries" grep -q 'libkeep2.so' "$tmp/o"

# a library that does not load is never enabled
mkdir -p "$root$tmp/badlib"
cp "$tmp/badlib/${lib##*/}" "$root$tmp/badlib/"
run_libdir "$tmp/badlib" --system enable --root "$root" -v "$variant"
expect_rc "--system enable with a library that does not load" 3 $rc
check "  file unchanged" cmp -s "$pf" "$tmp/enabled"
run_libdir "$tmp/nolib" --system enable --root "$root"
expect_rc "--system enable with a missing library" 3 $rc
check "  file unchanged" cmp -s "$pf" "$tmp/enabled"

if [ "$variant" = default ]; then
# The loader (glibc 2.36) skips the first comment of the file, and later ones
# only inside a window that shrinks with each comment before them: the words of
# a comment after a library line are loaded as libraries.
long='# a comment line at the top, longer than the library lines below it, as they often are'
printf '# a\n%s\n# keep these two words\n' "$lib" >"$pf"
run --system status --root "$root"
expect_rc "--system status with a comment after the library" 0 $rc
check "  warns that the loader reads the end of that comment as a library" \
    grep -q 'the loader reads "ds" as a library' "$tmp/e"
run --system enable --root "$root" -v "$variant"
expect_rc "--system enable rewrites it" 0 $rc
check "  with the comments first, read as written" test "$(cat "$pf")" = "# a
# keep these two words
$lib"
run --system status --root "$root"
check "  status no longer warns" test ! -s "$tmp/e"
printf '%s\n/usr/lib/libkeep.so # two words\n' "$long" >"$pf"
cp "$pf" "$tmp/two-comments"
run --system enable --root "$root" -v "$variant"
expect_rc "--system enable refuses a file the loader would misread" 4 $rc
check "  says which words" grep -q 'the loader reads "words" as a library' "$tmp/e"
check "  file unchanged" cmp -s "$pf" "$tmp/two-comments"
printf '/usr/lib/libkeep.so\r\n' >"$pf"
run --system status --root "$root"
check "--system status warns about a carriage return" grep -q 'carriage return' "$tmp/e"
printf '%s\n/usr/lib/libkeep.so\n# %s\n' "$long" "$lib" >"$pf"
run --system status --root "$root"
expect_rc "--system status: a hakozuna library the loader reads out of a comment" 0 $rc
check "  counts as enabled" grep -q "enabled: $lib" "$tmp/o"
run --system disable --root "$root"
check "  disable takes that comment out too" test "$(cat "$pf")" = "$long
/usr/lib/libkeep.so"
# disable leaves a file the loader reads as written
printf '# a\n%s\n# keep these two words\n' "$lib" >"$pf"
run --system disable --root "$root"
check "disable: a file left with comments only is removed" test ! -e "$pf"
printf '%s\n# c\n/usr/lib/libkeep.so\n# keep these two words\n' "$lib" >"$pf"
run --system disable --root "$root"
check "disable: comments go first when that makes the loader read them right" \
    test "$(cat "$pf")" = "# c
# keep these two words
/usr/lib/libkeep.so"
printf '%s\n%s\n/usr/lib/libkeep.so # two words\n' "$long" "$lib" >"$pf"
run --system disable --root "$root"
check "disable: comments the loader would still misread are removed, with a note" \
    sh -c "[ \"\$(cat '$pf')\" = /usr/lib/libkeep.so ] && grep -q 'comments removed' '$tmp/e'"
cp "$tmp/enabled" "$pf"
fi

run --system disable --root "$root"
expect_rc "--system disable" 0 $rc
check "  only our entries removed" cmp -s "$pf" "$tmp/orig"
run --system disable --root "$root"
expect_rc "--system disable again" 0 $rc
check "  nothing to do" grep -q 'nothing to do' "$tmp/o"
check "  file unchanged" cmp -s "$pf" "$tmp/orig"
run --system status --root "$root"
expect_rc "--system status: disabled" 1 $rc

printf '%s:/usr/lib/libmid.so %s\n' "$HZRUN_LIBDIR/libhakozuna_mt.so.0" "$HZRUN_LIBDIR/libhakozuna.so" >"$pf"
run --system disable --root "$root"
check "disable removes every hakozuna entry on a shared line" test "$(cat "$pf")" = /usr/lib/libmid.so
rm -f "$pf"
run --system enable --root "$root" -v "$variant"
run --system disable --root "$root"
expect_rc "--system disable of a file holding only hakozuna" 0 $rc
check "  removes the file" test ! -e "$pf"
check "  leaves nothing behind in etc" test -z "$(ls -A "$root/etc")"

if [ "$(id -u)" -ne 0 ]; then
    chmod 555 "$root/etc"
    run --system enable --root "$root" -v "$variant"
    chmod 755 "$root/etc"
    expect_rc "--system enable without write permission" 4 $rc
else
    skip "--system enable without write permission: running as root"
fi
run --system status --root "$tmp/no-such-root"
expect_rc "--system with a missing root directory" 4 $rc

finish
