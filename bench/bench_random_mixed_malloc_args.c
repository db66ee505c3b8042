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
#include "bench_mixed.h"

#define PROG "bench_random_mixed_malloc_args"

static const char USAGE[] = PROG " ITERS WS MIN MAX [SEED]";

typedef struct {
    uint64_t min, span;
} uniform;

static size_t draw_uniform(const void *ctx, bench_rng *rng)
{
    const uniform *u = ctx;

    return (size_t)(u->min + bench_rng_below(rng, u->span));
}

int main(int argc, char **argv)
{
    uint64_t iters, ws, min, max, seed;
    uniform u;
    bench_mixed_result r;

    bench_check_argc(USAGE, argc, 4, 5);
    iters = bench_arg_u64(USAGE, "ITERS", argv[1], 1, UINT64_MAX);
    ws = bench_arg_u64(USAGE, "WS", argv[2], 1, BENCH_MAX_SLOTS);
    min = bench_arg_u64(USAGE, "MIN", argv[3], 1, BENCH_MAX_SIZE);
    max = bench_arg_u64(USAGE, "MAX", argv[4], 1, BENCH_MAX_SIZE);
    bench_check_min_max(USAGE, min, max);
    seed = argc > 5 ? bench_arg_seed(USAGE, "SEED", argv[5]) : BENCH_DEFAULT_SEED;

    u.min = min;
    u.span = max - min + 1;
    r = bench_mixed_run(iters, ws, seed, draw_uniform, &u);

    printf("[" PROG "] iters=%" PRIu64 " ws=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64 " seed=0x%" PRIx64
           " mallocs=%" PRIu64 " frees=%" PRIu64 " ops/s=%.1f time_s=%.6f peak_rss_kb=%ld checksum=0x%016" PRIx64
           "\n",
           iters, ws, min, max, seed, r.mallocs, r.frees, bench_rate((double)iters, r.seconds), r.seconds,
           bench_peak_rss_kb(), r.checksum);
    return 0;
}
