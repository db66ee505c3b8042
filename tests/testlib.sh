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
wait_lines() { # FILE PATTERN COUNT PID ERRFILE : until FILE has COUNT lines matching
    # PATTERN (grep's), while process PID runs, for at most 30 s; else show ERRFILE, false
    local i=0
    while [ "$(cat "$1" 2>/dev/null | grep -c "$2")" -lt "$3" ]; do
        i=$((i + 1))
        if [ $i -gt 300 ] || ! kill -0 "$4" 2>/dev/null; then
            sed 's/^/    /' "$5"
            return 1
        fi
        sleep 0.1
    done
}
segment_of() { # PID : the /dev/shm/hakozuna.* file the process maps, if any
    sed -n 's|.* \(/dev/shm/hakozuna\.[^ ]*\).*|\1|p' "/proc/$1/maps" 2>/dev/null | head -n 1
}
need_dev_shm() { # skip the test (77) unless /dev/shm is there and writable
    if [ ! -d /dev/shm ] || [ ! -w /dev/shm ]; then
        echo "SKIP: /dev/shm is not available"
        exit 77
    fi
}
hz_tools() { # sets HZSTAT and HZRUN from HZ_TOOLS_DIR and exports HZRUN_LIBDIR
    # (default: HZ_TEST_LIBDIR); fails the test when they are missing
    HZSTAT=${HZ_TOOLS_DIR:-}/hzstat
    HZRUN=${HZ_TOOLS_DIR:-}/hzrun
    if [ -z "${HZ_TOOLS_DIR:-}" ] || [ ! -x "$HZSTAT" ] || [ ! -f "$HZRUN" ]; then
        echo "FAIL: HZ_TOOLS_DIR must name the directory of hzstat and hzrun (got '${HZ_TOOLS_DIR:-}')"
        exit 1
    fi
    HZRUN_LIBDIR=${HZRUN_LIBDIR:-${HZ_TEST_LIBDIR:-}}
    export HZRUN_LIBDIR
}
hzrun_variant() { # the hzrun -v name of the library tests/preload.sh set (HZ_TEST_VARIANT)
    case ${HZ_TEST_VARIANT:-hakozuna} in
    hakozuna_*) echo "${HZ_TEST_VARIANT#hakozuna_}" ;;
    *) echo default ;;
    esac
}
need_prog() { # NAME PATH : fails the test unless PATH is an executable program
    if [ ! -x "$2" ]; then
        echo "FAIL: $1 not found ('$2')"
        exit 1
    fi
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
