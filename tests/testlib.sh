# testlib.sh - counters and checks shared by the shell tests (sourced, not run).
# Each test ends with `finish`, which prints "N passed, M failed" and sets the status.
passed=0
failed=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }
skip() { echo "SKIP: $1"; }
check() { # DESCRIPTION COMMAND... : pass if COMMAND succeeds
    d=$1
    shift
    if "$@"; then pass "$d"; else fail "$d"; fi
}
expect_rc() { # DESCRIPTION EXPECTED ACTUAL
    if [ "$3" -eq "$2" ]; then pass "$1 (exit $3)"; else fail "$1: exit $3, expected $2"; fi
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
