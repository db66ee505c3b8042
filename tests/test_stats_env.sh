#!/bin/sh
# test_stats_env.sh - a value of HAKOZUNA_STATS the library does not understand is
# reported once, in one line on stderr, by the constructor; stats stay off and the
# program runs as usual.  "1", "0", empty and unset print nothing.
# HAKOZUNA_STATS_EXIT=stderr or an absolute path: each process writes the counters'
# report (malloc_stats's) there when it exits; anything else is reported likewise.
#
# Runs under tests/preload.sh, which preloads the library variant under test
# (LD_PRELOAD); each program below inherits it.

set -u

. "$(dirname "$0")/testlib.sh"

case ${LD_PRELOAD:-} in
*libhakozuna*) ;;
*)
    echo "FAIL: run me through tests/preload.sh (no hakozuna in LD_PRELOAD)"
    exit 1
    ;;
esac
unset HAKOZUNA_STATS HAKOZUNA_STATS_EXIT

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hz-env.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

want='hakozuna: HAKOZUNA_STATS=yes not understood (use 1 or 0); stats stay off'

HAKOZUNA_STATS=yes /bin/true >"$tmp/out" 2>"$tmp/err"
expect_rc "HAKOZUNA_STATS=yes /bin/true" 0 $?
check "  one line on stderr" test "$(wc -l <"$tmp/err")" -eq 1
check "  naming the value and what to use" test "$(cat "$tmp/err")" = "$want"
sed 's/^/    /' "$tmp/err"
check "  nothing on stdout" test ! -s "$tmp/out"

# The value comes from the environment: its control bytes are shown as '?' and a
# long one is cut.
HAKOZUNA_STATS="$(printf 'on\t\033[31m')" /bin/true 2>"$tmp/err"
expect_rc "HAKOZUNA_STATS with control bytes" 0 $?
check "  shown as '?'" grep -qx 'hakozuna: HAKOZUNA_STATS=on??\[31m not understood (use 1 or 0); stats stay off' "$tmp/err"
long=$(printf '%0200d' 0)
HAKOZUNA_STATS=$long /bin/true 2>"$tmp/err"
expect_rc "HAKOZUNA_STATS of 200 characters" 0 $?
check "  cut, in one line" test "$(wc -l <"$tmp/err")" -eq 1 -a "$(wc -c <"$tmp/err")" -lt 140

# A program that allocates and forks (sh running a pipeline) says it once per
# program image, not once per fork.
HAKOZUNA_STATS=true sh -c 'echo x | cat >/dev/null; echo y | cat >/dev/null' 2>"$tmp/err"
expect_rc "HAKOZUNA_STATS=true sh with forks" 0 $?
check "  one line per exec'd program (sh, cat, cat: 3)" test "$(grep -c 'HAKOZUNA_STATS=true not understood' "$tmp/err")" -eq 3

for v in 1 0 ""; do
    HAKOZUNA_STATS=$v /bin/true >"$tmp/out" 2>"$tmp/err"
    expect_rc "HAKOZUNA_STATS='$v' /bin/true" 0 $?
    check "  prints nothing" test ! -s "$tmp/err" -a ! -s "$tmp/out"
done
/bin/true >"$tmp/out" 2>"$tmp/err"
expect_rc "HAKOZUNA_STATS unset" 0 $?
check "  prints nothing" test ! -s "$tmp/err" -a ! -s "$tmp/out"

# The report at exit.
HAKOZUNA_STATS_EXIT=stderr /bin/true >"$tmp/out" 2>"$tmp/err"
expect_rc "HAKOZUNA_STATS_EXIT=stderr /bin/true" 0 $?
check "  names the process" grep -q "^hakozuna: report at exit of pid [0-9][0-9]*\$" "$tmp/err"
check "  then the counters, as malloc_stats prints them" \
    sh -c "grep -q '^Total (incl. mmap):' '$tmp/err' && grep -q '^system bytes *= *[0-9]' '$tmp/err' && grep -q '^mallocs *= *[0-9]' '$tmp/err'"
check "  nothing on stdout" test ! -s "$tmp/out"
sed 's/^/    /' "$tmp/err" | head -4

# To a file, appended: bash and the cat it forks and execs each add their report
# (dash leaves through _exit, which runs no destructor, so it writes none).
HAKOZUNA_STATS_EXIT=$tmp/report bash -c 'cat /dev/null; true' 2>"$tmp/err"
expect_rc "HAKOZUNA_STATS_EXIT=FILE bash with a child" 0 $?
check "  nothing on stderr" test ! -s "$tmp/err"
check "  two reports or more, of different pids" \
    test "$(grep '^hakozuna: report at exit of pid' "$tmp/report" | sort -u | wc -l)" -ge 2
check "  each with its counters" \
    test "$(grep -c '^Total (incl. mmap):' "$tmp/report")" -eq "$(grep -c '^hakozuna: report at exit' "$tmp/report")"

# A relative path (or any other value) is not used: one line says so.
HAKOZUNA_STATS_EXIT=report.txt /bin/true >"$tmp/out" 2>"$tmp/err"
expect_rc "HAKOZUNA_STATS_EXIT=report.txt /bin/true" 0 $?
check "  one line naming what to use" test "$(cat "$tmp/err")" = \
    'hakozuna: HAKOZUNA_STATS_EXIT=report.txt not understood (use stderr or an absolute path); no report at exit'
check "  and no file" test ! -e report.txt

finish
