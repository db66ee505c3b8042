/* bench_mixed.h - the loop of the single-threaded random malloc/free mix, shared by
 * bench_random_mixed_malloc_args and bench_random_mixed_malloc_dist, which differ only
 * in how the size of a new block is drawn.
 *
 * A working set of WS slots starts empty.  Each of ITERS steps picks a slot uniformly
 * at random: an occupied slot is freed, an empty one receives a new block of the size
 * `draw` returns.  Only the loop is timed, not the final release of what is left.
 */
#ifndef BENCH_MIXED_H
#define BENCH_MIXED_H

#include "bench_common.h"

#define BENCH_FREE_MARK (UINT64_C(1) << 63)

typedef struct {
    uint64_t mallocs, frees, checksum;
    double seconds;
} bench_mixed_result;

/* Inlined into each program's main with its own `draw`, so the call is direct. */
static inline bench_mixed_result bench_mixed_run(uint64_t iters, uint64_t ws, uint64_t seed,
                                                 size_t (*draw)(const void *ctx, bench_rng *rng),
                                                 const void *ctx)
{
    bench_mixed_result r = {0, 0, BENCH_CHECKSUM_INIT, 0};
    void **slots;
    bench_rng rng;
    uint64_t i;
    double t0, t1;

    slots = malloc((size_t)ws * sizeof *slots);
    if (slots == NULL)
        bench_oom("malloc", (size_t)ws * sizeof *slots);
    memset(slots, 0, (size_t)ws * sizeof *slots);

    bench_rng_seed(&rng, seed);

    t0 = bench_now();
    for (i = 0; i < iters; i++) {
        const size_t slot = (size_t)bench_rng_below(&rng, ws);
        void *p = slots[slot];

        if (p != NULL) {
            if (bench_first_byte(p) != bench_tag(slot))
                bench_fatal("block in slot %zu was corrupted", slot);
            free(p);
            slots[slot] = NULL;
            r.frees++;
            r.checksum = bench_mix(r.checksum, (uint64_t)slot | BENCH_FREE_MARK);
        } else {
            const size_t size = draw(ctx, &rng);

            p = malloc(size);
            if (p == NULL)
                bench_oom("malloc", size);
            bench_touch(p, size, bench_tag(slot));
            slots[slot] = p;
            r.mallocs++;
            r.checksum = bench_mix(r.checksum, ((uint64_t)slot << 32) ^ (uint64_t)size);
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
    r.checksum = bench_checksum_final(r.checksum);
    r.seconds = t1 - t0;
    return r;
}

#endif /* BENCH_MIXED_H */
