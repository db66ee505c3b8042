#!/bin/sh
# Test driver: runs one test program or script once per library variant, with that
# variant preloaded exactly as users run it.  HZ_TEST_VARIANTS lists the variants
# (library names without ".so"); the test fails if it fails under any of them.
set -u
status=0
for variant in ${HZ_TEST_VARIANTS:-hakozuna}; do
    lib="$HZ_TEST_LIBDIR/lib$variant.so"
    if [ ! -e "$lib" ]; then
        echo "preload.sh: $lib not built" >&2
        exit 99
    fi
    echo "--- under lib$variant.so"
    start=$(date +%s)
    LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" HZ_TEST_VARIANT="$variant" "$@"
    rc=$?
    echo "--- lib$variant.so: exit $rc after $(($(date +%s) - start)) s"
    case $rc in
        0) ;;
        77) [ $status -eq 0 ] && status=77 ;;
        *) echo "--- FAILED under lib$variant.so (exit $rc)"; status=$rc ;;
    esac
done
exit $status
