"""An allocation-heavy Python workload: builds and drops dicts, lists, strings and
small objects, round-trips JSON, and sorts.  Prints its own run time, peak RSS and a
checksum of the work (identical under every allocator)."""
import json
import resource
import sys
import time


def work(rounds):
    check = 0
    for r in range(rounds):
        rows = [{"id": i, "name": "item-%d" % i, "tags": [str(i % 7), str(i % 11)],
                 "score": (i * 2654435761) % 1000003} for i in range(20000)]
        text = json.dumps(rows)
        back = json.loads(text)
        back.sort(key=lambda d: (d["score"], d["name"]))
        words = {}
        for d in back:
            words.setdefault(d["tags"][0], []).append(d["name"] * 2)
        check = (check * 31 + len(text) + sum(len(v) for v in words.values())
                 + back[r % len(back)]["score"]) % (1 << 61)
    return check


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    t0 = time.perf_counter()
    check = work(rounds)
    elapsed = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("checksum=%d time_s=%.3f peak_rss_kb=%d" % (check, elapsed, peak_kb))


if __name__ == "__main__":
    main()
