#!/usr/bin/env bash
# test_size_classes.sh - the size-class table in docs/PERFORMANCE.md is the one the
# library computes: tools/size_classes (built from src/sizeclass.c) prints it, and
# the document holds exactly that output between its size-classes markers.  After a
# change to the classes, `make update-size-classes` rewrites the document's table.
# Prints "N passed, M failed"; exits 1 on any failure, 77 when it cannot run.

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PROG="${HZ_TOOLS_DIR:-tools}/size_classes"
DOC="$HERE/../docs/PERFORMANCE.md"
if [ ! -x "$PROG" ]; then
    echo "SKIP: $PROG is not built (set HZ_TOOLS_DIR)"
    exit 77
fi
. "$HERE/testlib.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_size_classes.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

rc=0
"$PROG" >"$tmp/table" || rc=$?
expect_rc "size_classes prints the table" 0 "$rc"
rows=$(grep -c '^| [0-9]' "$tmp/table")
check "one row per class ($rows)" test "$rows" -ge 100
check "the 16-byte class serves requests of 1..16 bytes in 64 KiB pages" \
    grep -q '^| 1 | 16 | 1\.\.16 | 64 KiB | 64 KiB | 4096 | ' "$tmp/table"

sed -n '/^<!-- size-classes begin/,/^<!-- size-classes end/p' "$DOC" | sed '1d;$d' >"$tmp/doc"
if cmp -s "$tmp/table" "$tmp/doc"; then
    pass "docs/PERFORMANCE.md holds the table size_classes prints"
else
    fail "docs/PERFORMANCE.md's size-class table differs from size_classes' (make update-size-classes):"
    diff "$tmp/doc" "$tmp/table" | head -10 | sed 's/^/    /'
fi
finish
