/* bench_rss_plateau - how much memory an allocator gives back after a burst.
 *
 *   bench_rss_plateau BURST_MB MIN MAX SAMPLES INTERVAL_MS [SEED]
 *
 * Allocates blocks of random size in [MIN, MAX] (generator seeded from SEED,
 * default 0x12345678) until BURST_MB MiB have been requested, writing every
 * byte of every block so that the whole burst is resident.  Then all blocks
 * are freed in allocation order.  Afterwards the current RSS is sampled
 * SAMPLES times, INTERVAL_MS milliseconds apart; before each sample the
 * program does a few tiny malloc/free pairs so that allocators that purge
 * lazily, on later allocator calls, get the chance to do so.
 *
 * Output (all RSS values in KiB, current RSS from /proc/self/statm):
 *   the result line with the parameters, ops/s of the burst and the free
 *     phase (ops = mallocs + frees), peak_rss_kb and the checksum;
 *   rss_kb_before= (before the burst), rss_kb_peak= (all blocks live),
 *     rss_kb_after_free= (right after the last free);
 *   one line per sample: sample=<i> t_ms=<since the frees> rss_kb=<n>;
 *   a last line rss_plateau_kb=<the last sample>.
 *
 * The bookkeeping of the block pointers is a chain of fixed-size pointer
 * arrays allocated with malloc; it is small compared with the blocks.
 *
 * Constraints: 1 <= BURST_MB <= 1048576, 1 <= MIN <= MAX <= 2^30,
 * 1 <= SAMPLES <= 1000000, 0 <= INTERVAL_MS <= 3600000.
 */
#include "bench_common.h"

#define PROG "bench_rss_plateau"

static const char USAGE[] = PROG " BURST_MB MIN MAX SAMPLES INTERVAL_MS [SEED]";

#define MAX_BURST_MB UINT64_C(1048576)
#define MAX_SAMPLES UINT64_C(1000000)
#define MAX_INTERVAL_MS UINT64_C(3600000)
#define CHUNK_PTRS 4096
#define TINY_PAIRS 4
#define TINY_SIZE 32

typedef struct ptr_chunk {
    struct ptr_chunk *next;
    size_t count;
    void *ptrs[CHUNK_PTRS];
} ptr_chunk;

int main(int argc, char **argv)
{
    uint64_t burst_mb, min, max, samples, interval_ms, seed, burst_bytes, span, s;
    uint64_t requested = 0, blocks = 0, cs = BENCH_CHECKSUM_INIT;
    ptr_chunk *first = NULL, *last = NULL, *c;
    long rss_before, rss_peak, rss_after_free, rss = -1;
    bench_rng rng;
    double t0, t1, t2, t_free;

    bench_check_argc(USAGE, argc, 5, 6);
    burst_mb = bench_arg_u64(USAGE, "BURST_MB", argv[1], 1, MAX_BURST_MB);
    min = bench_arg_u64(USAGE, "MIN", argv[2], 1, BENCH_MAX_SIZE);
    max = bench_arg_u64(USAGE, "MAX", argv[3], 1, BENCH_MAX_SIZE);
    bench_check_min_max(USAGE, min, max);
    samples = bench_arg_u64(USAGE, "SAMPLES", argv[4], 1, MAX_SAMPLES);
    interval_ms = bench_arg_u64(USAGE, "INTERVAL_MS", argv[5], 0, MAX_INTERVAL_MS);
    seed = argc > 6 ? bench_arg_seed(USAGE, "SEED", argv[6]) : BENCH_DEFAULT_SEED;

    burst_bytes = burst_mb << 20;
    span = max - min + 1;
    bench_rng_seed(&rng, seed);

    rss_before = bench_current_rss_kb();
    t0 = bench_now();
    while (requested < burst_bytes) {
        const size_t size = (size_t)(min + bench_rng_below(&rng, span));
        unsigned char *p;

        if (last == NULL || last->count == CHUNK_PTRS) {
            c = malloc(sizeof *c);
            if (c == NULL)
                bench_oom("malloc", sizeof *c);
            c->next = NULL;
            c->count = 0;
            if (last == NULL)
                first = c;
            else
                last->next = c;
            last = c;
        }
        p = malloc(size);
        if (p == NULL)
            bench_oom("malloc", size);
        memset(p, (int)bench_tag(size), size);
        last->ptrs[last->count++] = p;
        requested += size;
        blocks++;
        cs = bench_mix(cs, (uint64_t)size);
    }
    t1 = bench_now();
    rss_peak = bench_current_rss_kb();

    t2 = bench_now();
    c = first;
    while (c != NULL) {
        ptr_chunk *next = c->next;
        size_t k;

        for (k = 0; k < c->count; k++)
            free(c->ptrs[k]);
        free(c);
        c = next;
    }
    t_free = bench_now();
    rss_after_free = bench_current_rss_kb();

    printf("[" PROG "] burst_mb=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64 " samples=%" PRIu64
           " interval_ms=%" PRIu64 " seed=0x%" PRIx64 " blocks=%" PRIu64 " bytes=%" PRIu64
           " ops/s=%.1f time_s=%.6f alloc_s=%.6f free_s=%.6f peak_rss_kb=%ld checksum=0x%016" PRIx64 "\n",
           burst_mb, min, max, samples, interval_ms, seed, blocks, requested,
           bench_rate((double)(2 * blocks), (t1 - t0) + (t_free - t2)), (t1 - t0) + (t_free - t2), t1 - t0,
           t_free - t2, bench_peak_rss_kb(),
           bench_checksum_final(cs));
    printf("[" PROG "] rss_kb_before=%ld rss_kb_peak=%ld rss_kb_after_free=%ld\n", rss_before, rss_peak,
           rss_after_free);
    fflush(stdout);

    for (s = 1; s <= samples; s++) {
        int k;

        bench_sleep_ms(interval_ms);
        for (k = 0; k < TINY_PAIRS; k++) {
            void *p = malloc(TINY_SIZE);

            if (p == NULL)
                bench_oom("malloc", TINY_SIZE);
            bench_touch(p, TINY_SIZE, (unsigned char)k);
            free(p);
        }
        rss = bench_current_rss_kb();
        printf("[" PROG "] sample=%" PRIu64 " t_ms=%.1f rss_kb=%ld\n", s, (bench_now() - t_free) * 1e3, rss);
        fflush(stdout);
    }
    printf("[" PROG "] rss_plateau_kb=%ld\n", rss);
    return 0;
}
