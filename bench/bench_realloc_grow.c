/* bench_realloc_grow - one buffer grown by realloc to megabytes, again and again,
 * as a program grows a buffer while it reads a file or a response.
 *
 *   bench_realloc_grow ROUNDS MAXSIZE STEP
 *
 * Each of ROUNDS rounds starts a buffer of 1 KiB with malloc and grows it with
 * realloc until it holds MAXSIZE bytes: by STEP bytes at a time, or, with STEP 0,
 * to twice its size each time.  After each realloc it writes one byte in every 4 KiB
 * of the part it gained and checks that the first byte of every 4 KiB it had
 * survived the realloc (the program exits with status 1 if not); then the round
 * frees it.  ops = reallocs; the rounds are timed.  The checksum covers the sizes.
 *
 * Constraints: ROUNDS >= 1, 4096 <= MAXSIZE <= 2^32, STEP <= MAXSIZE.
 */
#include "bench_common.h"

#define PROG "bench_realloc_grow"

static const char USAGE[] = PROG " ROUNDS MAXSIZE STEP";

#define FIRST 1024
#define STRIDE 4096

int main(int argc, char **argv)
{
    uint64_t rounds, maxsize, step, r, reallocs = 0, cs = BENCH_CHECKSUM_INIT;
    double t0, t1;

    bench_check_argc(USAGE, argc, 3, 3);
    rounds = bench_arg_u64(USAGE, "ROUNDS", argv[1], 1, UINT64_MAX);
    maxsize = bench_arg_u64(USAGE, "MAXSIZE", argv[2], STRIDE, UINT64_C(1) << 32);
    step = bench_arg_u64(USAGE, "STEP", argv[3], 0, maxsize);

    t0 = bench_now();
    for (r = 0; r < rounds; r++) {
        const unsigned char tag = bench_tag(r);
        size_t have = FIRST, off;
        unsigned char *p = malloc(have);

        if (p == NULL)
            bench_oom("malloc", have);
        p[0] = tag;
        while (have < maxsize) {
            size_t want = step == 0 ? 2 * have : have + (size_t)step;

            if (want > maxsize)
                want = (size_t)maxsize;
            p = realloc(p, want);
            if (p == NULL)
                bench_oom("realloc", want);
            for (off = 0; off < have; off += STRIDE)
                if (p[off] != tag)
                    bench_fatal("round %" PRIu64 ": byte %zu lost growing %zu to %zu bytes", r, off,
                                have, want);
            for (off = (have + STRIDE - 1) / STRIDE * STRIDE; off < want; off += STRIDE)
                p[off] = tag;
            have = want;
            reallocs++;
            cs = bench_mix(cs, have);
        }
        free(p);
    }
    t1 = bench_now();

    printf("[" PROG "] rounds=%" PRIu64 " maxsize=%" PRIu64 " step=%" PRIu64 " reallocs=%" PRIu64
           " ops/s=%.1f time_s=%.6f peak_rss_kb=%ld checksum=0x%016" PRIx64 "\n",
           rounds, maxsize, step, reallocs, bench_rate((double)reallocs, t1 - t0), t1 - t0,
           bench_peak_rss_kb(), bench_checksum_final(cs));
    return 0;
}
