#!/usr/bin/env python3
"""check_layers.py - every file of the allocator calls only the files below it.

The allocator's files form layers (LAYERS, lowest first): the OS layer, segments,
pages, the heap, then the API.  A file may call functions of the files listed
before it, never of a file listed after it, so that the calls form no circle and
each layer can be read, and tested, with only what is below it in mind.  An upward
call would have to be listed in UPWARD with the reason it is there (none is): one
not listed fails the check, and so does a listed one that is gone (the list must
stay true).

The calls are read from the compiled objects of every variant (`nm`: a function
one object uses and another defines), so inline functions count where they are
expanded.  Data (counters, the thread's heap pointer) is not a call and is not
checked.

usage: check_layers.py --builddir DIR
"""
import argparse
import glob
import os
import subprocess
import sys

LAYERS = [
    "line",       # text for reports, no allocation
    "sizeclass",  # the size-class tables
    "unwind",     # call stacks from the unwind tables
    "os",         # every call into the OS; locks
    "guard",      # free-list checks and the reports that end the program
    "segment",    # segments, spans, the segment map, purging
    "page",       # pages and their free lists
    "stash",      # the scale and mt variants' stash
    "large",      # blocks above the medium classes, one mapping each
    "prof",       # the sampled heap profile
    "remote",     # frees for another thread's heap: outboxes, inboxes, collection
    "heap",       # a heap's life: creation, upkeep, abandonment, adoption
    "stats",      # counters and the reports made of them
    "shm",        # the shared-memory export
    "init",       # process and thread start, fork
    "alloc",      # the slow paths and the hz_* interface
    "debug",      # the checked variant's layer over alloc
    "api",        # the hz_* interface
    "posix",      # the POSIX and glibc extras
    "override",   # the exported malloc API
]

# (caller, callee): why the call still goes up.  None does: where a lower layer's
# work needs an upper one (a page event ticking the stats publisher, a remote post
# asking for upkeep), the lower layer reports it to its caller or writes a word the
# upper layer reads.
UPWARD = {}


def objects(builddir):
    """{variant library: {file: object path}} for every variant built."""
    found = {}
    for path in glob.glob(os.path.join(builddir, "src", ".libs", "libhakozuna*_la-*.o")):
        lib, name = os.path.basename(path)[:-2].split("_la-", 1)
        found.setdefault(lib, {})[name] = path
    return found


def symbols(path):
    """(functions defined, symbols used) by one object."""
    out = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "T":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
    return defined, used


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--builddir", required=True)
    args = ap.parse_args()
    libs = objects(args.builddir)
    if not libs:
        sys.exit("check_layers: no objects under %s/src/.libs: build first" % args.builddir)
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad, seen = [], set()
    for lib, files in sorted(libs.items()):
        unknown = sorted(set(files) - set(rank))
        if unknown:
            sys.exit("check_layers: %s: files in no layer: %s (add them to LAYERS)"
                     % (lib, ", ".join(unknown)))
        table = {name: symbols(path) for name, path in files.items()}
        owner = {sym: name for name, (defined, _) in table.items() for sym in defined}
        for name, (_, used) in sorted(table.items()):
            up = {}
            for sym in used:
                callee = owner.get(sym)
                if callee is not None and callee != name and rank[callee] > rank[name]:
                    up.setdefault(callee, set()).add(sym)
            for callee, syms in sorted(up.items()):
                seen.add((name, callee))
                if (name, callee) not in UPWARD:
                    bad.append("%s: %s.c calls up into %s.c: %s"
                               % (lib, name, callee, ", ".join(sorted(syms))))
    for edge in sorted(set(UPWARD) - seen):
        bad.append("%s.c no longer calls %s.c: take it out of UPWARD" % edge)
    for line in bad:
        print("check_layers: " + line)
    if bad:
        return 1
    up = "%d upward calls, each listed" % len(seen) if seen else "no call goes up"
    print("check_layers: %d variants, %d files in %d layers; %s"
          % (len(libs), len(rank), len(LAYERS), up))
    return 0


if __name__ == "__main__":
    sys.exit(main())
