/* bench_random_mixed_malloc_args - single-threaded random malloc/free mix.
 *
 *   bench_random_mixed_malloc_args ITERS WS MIN MAX [SEED]
 *
 * A working set of WS slots starts empty.  Each of ITERS steps picks a slot
 * uniformly at random: an occupied slot is freed, an empty one receives a
 * new block whose size is uniform in [MIN, MAX].  Every step is one malloc or
 * one free, so ops = ITERS; the timed region is the loop only (the final
 * release of the remaining blocks is not timed).
 *
 * SEED (decimal or 0x-hex, default 0x12345678) fixes the sequence.  The same
 * loop with the "uniform" distribution of bench_random_mixed_malloc_dist and
 * the same seed performs the identical sequence and prints the same checksum.
 *
 * Constraints: ITERS >= 1, 1 <= WS <= 2^28, 1 <= MIN <= MAX <= 2^30.
 */
#include "bench_common.h"

#define PROG "bench_random_mixed_malloc_args"

static const char USAGE[] = PROG " ITERS WS MIN MAX [SEED]";

#define FREE_MARK (UINT64_C(1) << 63)

int main(int argc, char **argv)
{
    uint64_t iters, ws, min, max, seed, span, i;
    uint64_t mallocs = 0, frees = 0, cs = BENCH_CHECKSUM_INIT;
    void **slots;
    bench_rng rng;
    double t0, t1;

    bench_check_argc(USAGE, argc, 4, 5);
    iters = bench_arg_u64(USAGE, "ITERS", argv[1], 1, UINT64_MAX);
    ws = bench_arg_u64(USAGE, "WS", argv[2], 1, BENCH_MAX_SLOTS);
    min = bench_arg_u64(USAGE, "MIN", argv[3], 1, BENCH_MAX_SIZE);
    max = bench_arg_u64(USAGE, "MAX", argv[4], 1, BENCH_MAX_SIZE);
    bench_check_min_max(USAGE, min, max);
    seed = argc > 5 ? bench_arg_seed(USAGE, "SEED", argv[5]) : BENCH_DEFAULT_SEED;

    slots = malloc((size_t)ws * sizeof *slots);
    if (slots == NULL)
        bench_oom("malloc", (size_t)ws * sizeof *slots);
    memset(slots, 0, (size_t)ws * sizeof *slots);

    bench_rng_seed(&rng, seed);
    span = max - min + 1;

    t0 = bench_now();
    for (i = 0; i < iters; i++) {
        const size_t slot = (size_t)bench_rng_below(&rng, ws);
        void *p = slots[slot];

        if (p != NULL) {
            if (bench_first_byte(p) != bench_tag(slot))
                bench_fatal("block in slot %zu was corrupted", slot);
            free(p);
            slots[slot] = NULL;
            frees++;
            cs = bench_mix(cs, (uint64_t)slot | FREE_MARK);
        } else {
            const size_t size = (size_t)(min + bench_rng_below(&rng, span));

            p = malloc(size);
            if (p == NULL)
                bench_oom("malloc", size);
            bench_touch(p, size, bench_tag(slot));
            slots[slot] = p;
            mallocs++;
            cs = bench_mix(cs, ((uint64_t)slot << 32) ^ (uint64_t)size);
        }
    }
    t1 = bench_now();

    for (i = 0; i < ws; i++) {
        if (slots[i] != NULL) {
            if (bench_first_byte(slots[i]) != bench_tag(i))
                bench_fatal("block in slot %" PRIu64 " was corrupted", i);
            free(slots[i]);
        }
    }
    free(slots);

    printf("[" PROG "] iters=%" PRIu64 " ws=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64 " seed=0x%" PRIx64
           " mallocs=%" PRIu64 " frees=%" PRIu64 " ops/s=%.1f time_s=%.6f peak_rss_kb=%ld checksum=0x%016" PRIx64
           "\n",
           iters, ws, min, max, seed, mallocs, frees, bench_rate((double)iters, t1 - t0), t1 - t0,
           bench_peak_rss_kb(), bench_checksum_final(cs));
    return 0;
}
