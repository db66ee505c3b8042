#!/bin/bash
# real_programs.sh - real programs running on the preloaded allocator.
#
# The test harness has already put libhakozuna into LD_PRELOAD; every command
# below (and every program they start) runs on it.  Each program is checked
# through its output: python3 (allocation-heavy script, checksum compared with
# a run without the preload), git (a repository of 200 files in 40 commits,
# gc and fsck), sqlite3 (100,000 rows, aggregates against known values), perl
# (hashes, regexes and sorts, checksum against a run without the preload), two
# programs whose threads pass buffers to each other, sort --parallel=2 and
# xz -T2 (outputs compared with runs without the preload), and, when
# HZ_TEST_CXX_PROG names it, the C++ test program.  A program that is not
# installed is counted as skipped; the test fails if any check fails or if no
# program ran at all.
#
# HZ_TEST_ALLOW_SYSTEM=1 lets it run without the preload (for development).

set -u

passed=0
failed=0
skipped=0

pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }
skip() { echo "SKIP: $1"; skipped=$((skipped + 1)); }

finish() {
    echo "$skipped skipped"
    echo "$passed passed, $failed failed"
    if [ "$failed" -gt 0 ]; then exit 1; fi
    if [ "$passed" -eq 0 ]; then
        echo "FAIL: no program ran"
        exit 1
    fi
    exit 0
}

case "${LD_PRELOAD-}" in
*libhakozuna*) echo "LD_PRELOAD=$LD_PRELOAD" ;;
*)
    if [ "${HZ_TEST_ALLOW_SYSTEM-}" = 1 ]; then
        echo "note: libhakozuna is not preloaded (HZ_TEST_ALLOW_SYSTEM=1)"
    else
        echo "FAIL: LD_PRELOAD does not contain libhakozuna (LD_PRELOAD='${LD_PRELOAD-}')"
        failed=1
        finish
    fi
    ;;
esac

# Guard against hangs: every program gets a time limit if timeout(1) exists.
if command -v timeout >/dev/null 2>&1; then
    limit() { timeout 300 "$@"; }
else
    limit() { "$@"; }
fi

# A command (or function) run without the library: the reference a run under it is
# compared with.
unpreloaded() { (
    unset LD_PRELOAD
    "$@"
); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hz-real.XXXXXX") || {
    echo "FAIL: mktemp"
    exit 1
}
trap 'rm -rf "$tmp"' EXIT

# ---------------------------------------------------------------- python3
run_python() {
    if ! command -v python3 >/dev/null 2>&1; then
        skip "python3 is not installed"
        return
    fi
    cat >"$tmp/alloc_heavy.py" <<'EOF'
import hashlib
import json
import random

random.seed(20240611)
h = hashlib.sha256()

# dicts of lists
d = {}
for i in range(200000):
    d.setdefault("k%d" % random.randrange(40000), []).append(i)
for k in sorted(d):
    h.update(k.encode())
    h.update(str(sum(d[k]) * len(d[k])).encode())

# json round trip of nested records
records = [
    {
        "id": i,
        "name": "n" * (i % 50) + str(i),
        "tags": [str(j) * (j + 1) for j in range(i % 9)],
        "value": random.random(),
        "nested": {"a": [i, i * 2, {"b": "x" * (i % 17)}]},
    }
    for i in range(40000)
]
text = json.dumps(records, sort_keys=True)
back = json.loads(text)
assert back == records, "json round trip differs"
h.update(text.encode())

# strings: build, split, join, sort
words = [("%x" % random.getrandbits(64)) * (1 + i % 4) for i in range(150000)]
words.sort()
h.update("".join(words[::7]).encode())
parts = []
for i in range(100000):
    parts.append(str(i) * (i % 6))
big = "-".join(parts)
h.update(str(len(big.split("-"))).encode())
h.update(big[::101].encode())

# sets and tuples; churn of many small objects
s = set()
for i in range(200000):
    s.add((i % 1000, str(i % 777)))
    if i % 3 == 0:
        s.discard((i % 500, str(i % 333)))
h.update(str(sorted(s)[:1000]).encode())

ls = [[j] * (j % 13) for j in range(100000)]
ls.sort(key=lambda x: (len(x), x[:1]))
h.update(str(sum(len(x) for x in ls)).encode())

print(h.hexdigest())
EOF
    local got want
    # PYTHONMALLOC=malloc routes all of Python's small objects through malloc.
    got=$(PYTHONHASHSEED=0 PYTHONMALLOC=malloc limit python3 "$tmp/alloc_heavy.py" 2>"$tmp/py.err")
    local rc=$?
    want=$(
        unset PYTHONMALLOC
        PYTHONHASHSEED=0 unpreloaded limit python3 "$tmp/alloc_heavy.py" 2>>"$tmp/py.err"
    )
    if ! [[ "$want" =~ ^[0-9a-f]{64}$ ]]; then
        fail "python3 reference run without the preload failed: $(tail -3 "$tmp/py.err")"
    elif [ $rc -ne 0 ]; then
        fail "python3 exited with $rc: $(tail -3 "$tmp/py.err")"
    elif ! [[ "$got" =~ ^[0-9a-f]{64}$ ]]; then
        fail "python3 printed '$got', not a checksum"
    elif [ "$got" != "$want" ]; then
        fail "python3 checksum $got, without the preload $want"
    else
        pass "python3 (checksum $got)"
    fi
}

# -------------------------------------------------------------------- git
run_git() {
    if ! command -v git >/dev/null 2>&1; then
        skip "git is not installed"
        return
    fi
    (
        set -e
        export HOME="$tmp/home" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
        export GIT_AUTHOR_NAME=Test GIT_AUTHOR_EMAIL=test@example.invalid
        export GIT_COMMITTER_NAME=Test GIT_COMMITTER_EMAIL=test@example.invalid
        export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
        mkdir -p "$HOME" "$tmp/repo"
        cd "$tmp/repo"
        limit git init -q .
        n=0
        for c in $(seq 1 40); do
            for _ in 1 2 3 4 5; do
                n=$((n + 1))
                mkdir -p "dir$((n % 10))"
                {
                    echo "file $n of commit $c"
                    seq 1 $((n * 7))
                } >"dir$((n % 10))/file$n.txt"
            done
            limit git add -A
            limit git commit -q -m "commit $c"
        done
        commits=$(limit git log --oneline | wc -l)
        files=$(limit git ls-files | wc -l)
        limit git -c gc.autoDetach=false gc -q
        limit git repack -q -a -d -f --window=50 --depth=20
        limit git fsck --full --strict --no-progress >"$tmp/fsck.out" 2>&1
        content=$(limit git show HEAD~20:dir7/file97.txt | head -1)
        [ "$commits" -eq 40 ] || {
            echo "git log: $commits commits, want 40"
            exit 1
        }
        [ "$files" -eq 200 ] || {
            echo "git ls-files: $files files, want 200"
            exit 1
        }
        [ "$content" = "file 97 of commit 20" ] || {
            echo "git show: '$content'"
            exit 1
        }
    ) >"$tmp/git.out" 2>&1
    local rc=$?
    if [ $rc -eq 0 ]; then
        pass "git (40 commits, 200 files, gc, repack, fsck)"
    else
        fail "git (exit $rc): $(tail -3 "$tmp/git.out")"
    fi
}

# ---------------------------------------------------------------- sqlite3
run_sqlite() {
    if ! command -v sqlite3 >/dev/null 2>&1; then
        skip "sqlite3 is not installed"
        return
    fi
    local out want
    out=$(limit sqlite3 "$tmp/test.db" <<'EOF' 2>&1
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)
INSERT INTO t SELECT x, x % 7, 'name-' || x, x * 0.5 FROM c;
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(id), sum(grp), sum(length(name)), total(val) FROM t;
SELECT grp, count(*) FROM t GROUP BY grp ORDER BY grp;
SELECT count(*) FROM t WHERE name LIKE 'name-9%';
SELECT name FROM t ORDER BY name DESC LIMIT 1;
SELECT count(DISTINCT substr(name, 1, 8)) FROM t;
UPDATE t SET name = name || '-x' WHERE grp = 3;
DELETE FROM t WHERE grp = 6;
VACUUM;
SELECT count(*), sum(length(name)) FROM t;
SELECT count(*) FROM t WHERE name LIKE '%-x';
PRAGMA integrity_check;
EOF
    )
    local rc=$?
    want='100000|5000050000|300000|988895|2500025000.0
0|14285
1|14286
2|14286
3|14286
4|14286
5|14286
6|14285
11111
name-99999
999
85715|876202
14286
ok'
    if [ $rc -ne 0 ]; then
        fail "sqlite3 exited with $rc: $(echo "$out" | tail -3)"
    elif [ "$out" != "$want" ]; then
        fail "sqlite3 output differs: got [$(echo "$out" | tr '\n' ' ')], want [$(echo "$want" | tr '\n' ' ')]"
    else
        pass "sqlite3 (100,000 rows)"
    fi
}

# ------------------------------------------------------------------- perl
run_perl() {
    if ! command -v perl >/dev/null 2>&1; then
        skip "perl is not installed"
        return
    fi
    cat >"$tmp/churn.pl" <<'EOF'
use strict;
use warnings;
my (%h, @keep);
my $sum = 0;
for my $i (1 .. 300000) {
    my $k = "k" . ($i * 7919 % 100003);
    $h{$k} .= chr(65 + $i % 26);
    delete $h{"k" . ($i * 31 % 100003)} if $i % 5 == 0;
    push @keep, [$i, "v" x ($i % 300)] if $i % 7 == 0;
    splice(@keep, 0, 1000) if @keep > 20000;
}
for my $k (sort keys %h) {
    $sum = ($sum * 31 + length($h{$k}) + ord(substr($h{$k}, 0, 1))) % 1000000007;
}
my $t = join(",", map { $_ x ($_ % 50) } 1 .. 3000);
$t =~ s/(\d)\1+/$1/g;
my @w = sort { length($a) <=> length($b) || $a cmp $b } split /,/, $t;
$sum = ($sum + length($t) + scalar(@w) + length($w[-1]) + scalar(@keep)) % 1000000007;
print "$sum\n";
EOF
    local got want rc
    got=$(limit perl "$tmp/churn.pl" 2>"$tmp/perl.err")
    rc=$?
    want=$(unpreloaded limit perl "$tmp/churn.pl" 2>>"$tmp/perl.err")
    if ! [[ "$want" =~ ^[0-9]+$ ]]; then
        fail "perl reference run without the preload failed: $(tail -3 "$tmp/perl.err")"
    elif [ $rc -ne 0 ]; then
        fail "perl exited with $rc: $(tail -3 "$tmp/perl.err")"
    elif [ "$got" != "$want" ]; then
        fail "perl printed '$got', without the preload '$want'"
    else
        pass "perl (checksum $got)"
    fi
}

# ------------------------------------------ sort and xz: threads pass buffers
# Input for both: 1,500,000 lines of numbers, about 20 MB, the same every run.
make_lines() {
    [ -s "$tmp/lines.txt" ] && return 0
    unpreloaded seq 1 1500000 | unpreloaded awk '{ print ($1 * 2654435761) % 1000003, $1, $1 % 97 }' >"$tmp/lines.txt"
}

need_lines() {
    make_lines && return 0
    fail "$1: could not make its input"
    return 1
}

# md5 of a command's standard output, run with or without the preload (first argument).
digest() {
    local how=$1
    shift
    if [ "$how" = without ]; then
        unpreloaded limit "$@" | md5sum
    else
        limit "$@" | md5sum
    fi
}

run_sort() {
    if ! command -v sort >/dev/null 2>&1 || ! sort --parallel=2 </dev/null >/dev/null 2>&1; then
        skip "sort --parallel is not available"
        return
    fi
    need_lines sort || return
    # --parallel=2 sorts and merges in two threads; -S keeps the input in one buffer.
    local got want
    got=$(digest with sort --parallel=2 -S 64M -k1,1n -k2,2n "$tmp/lines.txt" 2>"$tmp/sort.err")
    want=$(digest without sort -k1,1n -k2,2n "$tmp/lines.txt" 2>>"$tmp/sort.err")
    if [ -s "$tmp/sort.err" ]; then
        fail "sort: $(tail -3 "$tmp/sort.err")"
    elif [ "$got" != "$want" ]; then
        fail "sort --parallel=2 output differs from a run without the preload"
    else
        pass "sort --parallel=2 (1,500,000 lines)"
    fi
}

run_xz() {
    if ! command -v xz >/dev/null 2>&1; then
        skip "xz is not installed"
        return
    fi
    need_lines xz || return
    # -T2 compresses blocks of 3 MiB in two threads (the output depends on the block
    # size, not on the allocator) and decompresses them in two threads.
    local packed want orig back
    packed=$(digest with xz -T2 -1 -c "$tmp/lines.txt" 2>"$tmp/xz.err")
    want=$(digest without xz -T2 -1 -c "$tmp/lines.txt" 2>>"$tmp/xz.err")
    limit xz -T2 -1 -c "$tmp/lines.txt" >"$tmp/lines.xz" 2>>"$tmp/xz.err"
    back=$(digest with xz -T2 -d -c "$tmp/lines.xz" 2>>"$tmp/xz.err")
    orig=$(md5sum <"$tmp/lines.txt")
    if [ -s "$tmp/xz.err" ]; then
        fail "xz: $(tail -3 "$tmp/xz.err")"
    elif [ "$packed" != "$want" ]; then
        fail "xz -T2 compressed output differs from a run without the preload"
    elif [ "$back" != "$orig" ]; then
        fail "xz -T2 -d did not give back its input"
    else
        pass "xz -T2 (20 MB compressed and decompressed)"
    fi
}

# ------------------------------------------------------------ C++ program
run_cxx() {
    local prog="${HZ_TEST_CXX_PROG-}"
    if [ -z "$prog" ]; then
        skip "C++ test program (HZ_TEST_CXX_PROG is not set)"
        return
    fi
    if [ ! -x "$prog" ]; then
        fail "HZ_TEST_CXX_PROG=$prog is not an executable"
        return
    fi
    local out
    out=$(limit "$prog" 2>&1)
    local rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q 'checksum'; then
        pass "C++ test program ($(echo "$out" | grep checksum | tail -1))"
    else
        fail "C++ test program exited with $rc: $(echo "$out" | tail -3)"
    fi
}

run_python
run_git
run_sqlite
run_perl
run_sort
run_xz
run_cxx
finish
