#!/usr/bin/env python3
"""check_instructions.py - fails when libhakozuna.so executes more instructions per
malloc+free pair than recorded.

usage: check_instructions.py [--builddir DIR] [--update] REFERENCE

Counts, with `hzbench --callgrind-only` (valgrind's callgrind, deterministic), the
instructions per malloc+free pair of the default library on the single-threaded
cells of hzbench's matrix, with the ITERS recorded in REFERENCE, and compares them
with REFERENCE's figures.  Prints old, new and their ratio per cell; exits 1 when a
cell grew by more than the tolerance, or a cell has no recorded figure.  --update
writes the new figures to REFERENCE instead (after a reviewed change to the hot
path: `make update-instructions`).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

PROG = "check_instructions"
TOLERANCE_PCT = 3.0
CELLS = "st_*"
DEFAULT_ITERS = 200000
HEADER = """\
# Instructions per malloc+free pair of libhakozuna.so on hzbench's single-threaded
# cells under callgrind (tools/callgrind_ops.py), compared by `make check-instructions`,
# which fails when a cell grows by more than {tol:g} %.  After a reviewed change to the
# hot path, `make update-instructions` rewrites the figures.  The counts depend on the
# compiler and its flags; recorded with:
#   {cc}
#   configure {conf}
iters {iters}
# cell  instructions per pair
"""


def fail(msg, status=2):
    print("%s: %s" % (PROG, msg), file=sys.stderr)
    sys.exit(status)


def read_reference(path):
    """(iters, {cell: per pair}); a missing file is empty."""
    iters, figures = DEFAULT_ITERS, {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return iters, figures
    except OSError as e:
        fail("cannot read %s: %s" % (path, e.strerror))
    for no, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            if len(words) == 2 and words[0] == "iters":
                iters = int(words[1])
            elif len(words) == 2:
                figures[words[0]] = float(words[1])
            else:
                raise ValueError
        except ValueError:
            fail("%s:%d: expected 'iters N' or 'CELL INSTRUCTIONS'" % (path, no))
    return iters, figures


def measure(builddir, iters):
    """{cell: instructions per pair} of the default library."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = tempfile.mkdtemp(prefix="check_instructions.")
    try:
        argv = [sys.executable, os.path.join(here, "hzbench"), "--builddir", builddir,
                "--allocators", "hakozuna", "--cell", CELLS, "--callgrind-only",
                "--callgrind-iters", str(iters), "--out", os.path.join(out, "run")]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            with open(os.path.join(out, "run", "results.json"), encoding="utf-8") as f:
                res = json.load(f)
        except (OSError, ValueError):
            res = None
        if r.returncode != 0 or res is None:
            fail("hzbench failed (exit %d):\n%s" % (r.returncode, r.stdout.strip()))
        if res.get("callgrind_note"):
            fail(res["callgrind_note"])
        figures = {}
        for e in res["callgrind"]:
            if "error" in e:
                fail("callgrind %s: %s" % (e["cell"], e["error"]))
            figures[e["cell"]] = e["ir_per_pair"]
        return figures, res["header"]["configure"]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def compiler():
    try:
        r = subprocess.run([os.environ.get("CC", "cc"), "--version"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        return r.stdout.splitlines()[0].strip() if r.returncode == 0 else "unknown"
    except (OSError, IndexError):
        return "unknown"


def main(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.strip().splitlines()[0])
    p.add_argument("--builddir", default=".", metavar="DIR",
                   help="build directory holding bench/ and .libs/ (default: .)")
    p.add_argument("--update", action="store_true",
                   help="write the measured figures to REFERENCE instead of comparing")
    p.add_argument("reference", metavar="REFERENCE")
    opts = p.parse_args(argv)
    if not shutil.which("valgrind"):
        fail("valgrind not found (apt-get install valgrind)")
    iters, old = read_reference(opts.reference)
    new, configure = measure(opts.builddir, iters)

    if opts.update:
        with open(opts.reference, "w", encoding="utf-8") as f:
            f.write(HEADER.format(tol=TOLERANCE_PCT, cc=compiler(), conf=configure or "(none)",
                                  iters=iters))
            for cell, v in new.items():
                f.write("%-20s %.1f\n" % (cell, v))
        print("%s: wrote %s (ITERS %d)" % (PROG, opts.reference, iters))
        for cell, v in new.items():
            print("  %-20s %8.1f" % (cell, v))
        return 0

    bad = 0
    print("%-20s %8s %8s %7s  (instructions per malloc+free pair, ITERS %d)"
          % ("cell", "old", "new", "ratio", iters))
    for cell, v in new.items():
        if cell not in old:
            print("%-20s %8s %8.1f %7s  NOT RECORDED" % (cell, "-", v, "-"))
            bad += 1
            continue
        ratio = v / old[cell]
        verdict = ""
        if ratio > 1 + TOLERANCE_PCT / 100:
            verdict = "  GREW MORE THAN %g %%" % TOLERANCE_PCT
            bad += 1
        elif ratio < 1 - TOLERANCE_PCT / 100:
            verdict = "  fewer: record them with make update-instructions"
        print("%-20s %8.1f %8.1f %7.3f%s" % (cell, old[cell], v, ratio, verdict))
    for cell in old:
        if cell not in new:
            print("%-20s %8.1f %8s %7s  NOT MEASURED (no such cell)" % (cell, old[cell], "-", "-"))
            bad += 1
    if bad:
        print("%s: FAILED: %d cell(s) over the recorded figures of %s; if the growth is "
              "intended, `make update-instructions` records the new figures"
              % (PROG, bad, opts.reference))
        return 1
    print("%s: every cell within %g %% of %s" % (PROG, TOLERANCE_PCT, opts.reference))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
