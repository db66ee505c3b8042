#!/usr/bin/env bash
# programs.sh - times real programs under each malloc library given, as a user
# would meet them: Python building and parsing JSON, SQLite filling and indexing a
# table, Perl building a hash, sort with two threads, git walking its history with
# diffs, g++ compiling C++.  Each runs ROUNDS times per library; the libraries take
# turns within a round, starting one further each round, so that a slow minute
# of a shared machine falls on all of them.  Prints, per program, the median
# wall time (with min and max) and the median peak RSS per library, and the ratio
# of the fastest peer's median to each library's (above 1.00: faster than every
# peer).  Peers are the libraries whose name does not start with "hakozuna".
#
#   bench/programs.sh [--rounds N] [--srcdir DIR] [--only LIST] NAME=PATH...
#
# NAME=PATH preloads PATH; NAME= (empty) runs without preloading (glibc's malloc).
# Needs python3, sqlite3, perl, sort, git and g++; a program that is missing, or
# that fails under any library, is reported and left out of the table.

set -u

rounds=5
srcdir=$(cd "$(dirname "$0")/.." && pwd)
only=""
usage() {
    echo "usage: $0 [--rounds N] [--srcdir DIR] [--only LIST] NAME=PATH..." >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) [ $# -ge 2 ] || usage; rounds=$2; shift 2 ;;
    --srcdir) [ $# -ge 2 ] || usage; srcdir=$2; shift 2 ;;
    --only) [ $# -ge 2 ] || usage; only=$2; shift 2 ;;
    -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --*) echo "$0: unknown option $1" >&2; usage ;;
    *) break ;;
    esac
done
case $rounds in ''|*[!0-9]*|0) echo "$0: --rounds needs a positive number" >&2; exit 2 ;; esac
[ $# -ge 1 ] || usage
names=()
libs=()
for a in "$@"; do
    case $a in
    *=*) ;;
    *) echo "$0: $a is not NAME=PATH" >&2; exit 2 ;;
    esac
    name=${a%%=*} lib=${a#*=}
    case $name in ''|*[!A-Za-z0-9_.+-]*) echo "$0: bad name in $a" >&2; exit 2 ;; esac
    if [ -n "$lib" ]; then
        if [ ! -r "$lib" ]; then
            echo "$0: $lib: no such library" >&2
            exit 2
        fi
        lib=$(readlink -f "$lib") # the programs run elsewhere (git -C)
    fi
    names+=("$name")
    libs+=("$lib")
done
if [ ! -x /usr/bin/time ]; then
    echo "$0: needs /usr/bin/time (Debian: apt-get install time)" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/hz-programs.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

# The workloads, each about one to two seconds under glibc's malloc on a 2-CPU
# machine.
cat >"$work/objects.py" <<'EOF'
import json
d = [{"k%d" % i: [i, str(i) * 3, {"x": i, "y": [i] * 4}]} for i in range(150000)]
s = json.dumps(d)
print(len(s), len(json.loads(s)))
EOF
cat >"$work/table.sql" <<'EOF'
CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v TEXT);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 400000)
INSERT INTO t SELECT i, printf('key%08d', (i * 7919) % 400000), printf('%.*c', i % 200, 'x') FROM c;
CREATE INDEX tk ON t(k);
SELECT count(*), sum(length(v)) FROM t WHERE k > 'key00100000';
SELECT substr(k, 1, 6), count(*) FROM t GROUP BY 1 ORDER BY 2 DESC LIMIT 3;
EOF
cat >"$work/hash.pl" <<'EOF'
my %h;
for my $i (1..500000) { $h{"k$i"} = [$i, "v" x ($i % 50)] }
my $n = 0;
for (keys %h) { $n += length $h{$_}[1] }
print "$n\n";
EOF

programs=()
commands=()
wanted() { [ -z "$only" ] || echo ",$only," | grep -q ",$1,"; }
add() { # NAME TOOL COMMAND
    wanted "$1" || return
    if ! command -v "$2" >/dev/null 2>&1; then
        echo "# $1: $2 not found, left out" >&2
        return
    fi
    programs+=("$1")
    commands+=("$3")
}
add python3 python3 "python3 $work/objects.py"
add sqlite3 sqlite3 "sqlite3 :memory: -init $work/table.sql .quit"
add perl perl "perl $work/hash.pl"
if wanted sort; then
    awk 'BEGIN { x = 12345; for (i = 1; i <= 1500000; i++) {
        x = (x * 1103515245 + 12345) % 2147483648
        printf "%010d %s\n", x, substr("abcdefghijklmnopqrstuvwxyz", 1 + i % 20) } }' >"$work/lines"
fi
add sort sort "sort --parallel=2 -S 64M $work/lines -o /dev/null"
if git -C "$srcdir" rev-parse --git-dir >/dev/null 2>&1; then
    add git git "git -C $srcdir log -p --stat"
else
    echo "# git: $srcdir is not a git checkout, left out" >&2
fi
if [ -r "$srcdir/tests/test_cxx.cc" ]; then
    add g++ g++ "g++ -O2 -std=c++17 -c $srcdir/tests/test_cxx.cc -o /dev/null"
else
    echo "# g++: $srcdir/tests/test_cxx.cc not found, left out" >&2
fi
[ ${#programs[@]} -gt 0 ] || { echo "$0: no program to run" >&2; exit 1; }

# One line per run in $work/runs: program name seconds peak-RSS-KiB.  Every run
# gets GLIBC_TUNABLES=glibc.pthread.rseq=0, which Google's tcmalloc needs for its
# per-CPU caches (as hzbench does); it changes nothing for the others.
n=${#names[@]}
failed=""
for r in $(seq "$rounds"); do
    for k in $(seq 0 $((n - 1))); do
        j=$(((k + r) % n))
        for i in "${!programs[@]}"; do
            if ! env GLIBC_TUNABLES=glibc.pthread.rseq=0 LD_PRELOAD="${libs[$j]}" \
                /usr/bin/time -f "%e %M" -o "$work/time" sh -c "${commands[$i]}" \
                >/dev/null 2>"$work/err"; then
                echo "# ${programs[$i]} failed under ${names[$j]}:" >&2
                head -3 "$work/err" | sed 's/^/#   /' >&2
                failed="$failed ${programs[$i]}"
                continue
            fi
            echo "${programs[$i]} ${names[$j]} $(tail -1 "$work/time")" >>"$work/runs"
        done
    done
done

echo "| program | library | median s | min s | max s | median peak RSS KiB | fastest peer / this |"
echo "|---|---|--:|--:|--:|--:|--:|"
for p in "${programs[@]}"; do
    case " $failed " in *" $p "*) continue ;; esac
    for name in "${names[@]}"; do
        awk -v p="$p" -v n="$name" '$1 == p && $2 == n { print $3 }' "$work/runs" | sort -g >"$work/t"
        awk -v p="$p" -v n="$name" '$1 == p && $2 == n { print $4 }' "$work/runs" | sort -g >"$work/m"
        [ -s "$work/t" ] || continue
        c=$(wc -l <"$work/t")
        mid=$(((c + 1) / 2))
        echo "$name $(sed -n "${mid}p" "$work/t") $(head -1 "$work/t") $(tail -1 "$work/t")" \
            "$(sed -n "${mid}p" "$work/m")"
    done >"$work/rows"
    best=$(awk '$1 !~ /^hakozuna/ { if (b == "" || $2 < b) b = $2 } END { print b }' "$work/rows")
    awk -v p="$p" -v best="$best" '{
        r = (best == "" || $2 == 0) ? "-" : sprintf("%.2f", best / $2)
        printf "| %s | %s | %.2f | %.2f | %.2f | %d | %s |\n", p, $1, $2, $3, $4, $5, r }' "$work/rows"
done
[ -z "$failed" ]
