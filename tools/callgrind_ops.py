#!/usr/bin/env python3
"""callgrind_ops.py - instructions per allocator call, from a callgrind profile.

Reads a callgrind output file written with --compress-strings=no and sums, over the
calls made by the benchmark's own code (functions of the main executable) to
allocation entry points (malloc, free, calloc, realloc and their aliases), the
inclusive instruction count of each call.  Prints instructions per malloc, per free
and per malloc+free pair.  Deterministic on a noisy machine, unlike time.

usage: callgrind_ops.py CALLGRIND_OUT [EXECUTABLE_NAME]
"""
import re
import sys
from collections import defaultdict

ENTRY = re.compile(r"^(?:__libc_|tc_|je_|mi_|hz_)?(malloc|free|calloc|realloc|cfree)$")


def parse(path, exe):
    """Return {callee name: [calls, inclusive Ir]} for calls made from the executable."""
    totals = defaultdict(lambda: [0, 0])
    cur_obj = cur_fn_obj = ""
    caller_is_exe = False
    pending = None  # (callee name, number of calls) waiting for its cost line
    cfn = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("ob="):
                cur_obj = line[3:]
            elif line.startswith("fl=") or line.startswith("fi=") or line.startswith("fe="):
                pass
            elif line.startswith("fn="):
                cur_fn_obj = cur_obj
                caller_is_exe = cur_fn_obj.endswith("/" + exe) or cur_fn_obj == exe
            elif line.startswith("cfn="):
                cfn = line[4:]
            elif line.startswith("calls="):
                pending = (cfn, int(line.split("=")[1].split()[0]))
            elif pending is not None and line and (line[0].isdigit() or line[0] in "+-*"):
                name, ncalls = pending
                pending = None
                if caller_is_exe and ENTRY.match(name):
                    cost = int(line.split()[1])
                    totals[name][0] += ncalls
                    totals[name][1] += cost
    return totals


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        sys.exit(2)
    exe = sys.argv[2] if len(sys.argv) > 2 else ""
    totals = parse(sys.argv[1], exe)
    alloc = [0, 0]
    free = [0, 0]
    for name, (calls, cost) in totals.items():
        kind = ENTRY.match(name).group(1)
        side = free if kind in ("free", "cfree") else alloc
        side[0] += calls
        side[1] += cost
    if alloc[0] == 0 or free[0] == 0:
        print("callgrind_ops: no malloc/free calls from %r found" % (exe or "executable"),
              file=sys.stderr)
        sys.exit(1)
    per_alloc = alloc[1] / alloc[0]
    per_free = free[1] / free[0]
    print("mallocs=%d frees=%d ir_per_malloc=%.1f ir_per_free=%.1f ir_per_pair=%.1f"
          % (alloc[0], free[0], per_alloc, per_free, per_alloc + per_free))


if __name__ == "__main__":
    main()
