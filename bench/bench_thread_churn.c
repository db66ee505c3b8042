/* bench_thread_churn - threads that live for one short task each, many at a time,
 * as in a server that starts a thread per connection or a pool that grows and
 * shrinks with its load.
 *
 *   bench_thread_churn THREADS CONCURRENT OPS [SEED]
 *
 * THREADS threads run in waves of CONCURRENT: the main thread creates a wave,
 * joins all of it, then creates the next.  Each thread performs OPS steps on 48
 * private slots: a step picks a slot at random; a full slot's block is checked and
 * freed, an empty slot gets a new block.  Sizes: 80 % 16..512 bytes, 18 % 1..64
 * KiB, 2 % 256 KiB..2 MiB; one block in eight comes from calloc (and is checked to
 * be zero where it is written), and one in sixteen is then grown to twice its size
 * plus 16 bytes by realloc.  A block's first 16 KiB are written (all of it when
 * smaller) and its last byte.  A thread frees what its slots still hold before it
 * exits, so the allocator sees every thread's memory freed and the next wave's
 * threads start from nothing.
 *
 * The timed phase covers all waves, thread creation and exit included; ops/s counts
 * mallocs, callocs, reallocs and frees.  The operations of thread i depend only on
 * the seed and i, so the checksum is reproducible.
 *
 * Constraints: 1 <= THREADS <= 10^7, 1 <= CONCURRENT <= 1024, 1 <= OPS <= 10^6.
 */
#include "bench_common.h"

#define PROG "bench_thread_churn"

static const char USAGE[] = PROG " THREADS CONCURRENT OPS [SEED]";

#define MAX_TOTAL UINT64_C(10000000)
#define MAX_OPS UINT64_C(1000000)
#define SLOTS 48
#define WRITE_MAX ((size_t)16 << 10) /* bytes written at a block's start */

typedef struct job {
    uint64_t index;
    uint64_t ops;     /* operations performed */
    uint64_t checksum;
} job;

static uint64_t g_ops, g_seed;

static size_t churn_size(bench_rng *rng)
{
    const uint64_t r = bench_rng_below(rng, 100);
    if (r < 80)
        return (size_t)bench_rng_range(rng, 16, 512);
    if (r < 98)
        return (size_t)bench_rng_range(rng, 1024, 65536);
    return (size_t)bench_rng_range(rng, 256 << 10, 2 << 20);
}

static void fill(unsigned char *p, size_t size, unsigned char tag)
{
    memset(p, tag, size < WRITE_MAX ? size : WRITE_MAX);
    p[size - 1] = tag;
}

static void check_and_free(unsigned char *p, size_t size, unsigned char tag, uint64_t index)
{
    if (p[0] != tag || p[size - 1] != tag || p[(size < WRITE_MAX ? size : WRITE_MAX) - 1] != tag)
        bench_fatal("thread %" PRIu64 ": a block of %zu bytes was corrupted", index, size);
    free(p);
}

static void *churn_main(void *arg)
{
    job *j = (job *)arg;
    unsigned char *slot[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    unsigned char tag[SLOTS] = {0};
    bench_rng rng;
    uint64_t cs = BENCH_CHECKSUM_INIT, ops = 0;

    bench_rng_seed(&rng, bench_stream_seed(g_seed, j->index));
    for (uint64_t i = 0; i < g_ops; i++) {
        const unsigned s = (unsigned)bench_rng_below(&rng, SLOTS);
        if (slot[s] != NULL) {
            check_and_free(slot[s], size[s], tag[s], j->index);
            slot[s] = NULL;
            ops++;
            cs = bench_mix(cs, s);
            continue;
        }
        size_t n = churn_size(&rng);
        const uint64_t how = bench_rng_below(&rng, 16);
        unsigned char *p;
        if (how < 2) {
            p = calloc(1, n);
            if (p == NULL)
                bench_oom("calloc", n);
            if (p[0] != 0 || p[n - 1] != 0 || p[(n < WRITE_MAX ? n : WRITE_MAX) - 1] != 0)
                bench_fatal("thread %" PRIu64 ": calloc(%zu) is not zeroed", j->index, n);
        } else {
            p = malloc(n);
            if (p == NULL)
                bench_oom("malloc", n);
        }
        ops++;
        const unsigned char t = bench_tag((j->index << 32) ^ i);
        fill(p, n, t);
        if (how == 1 || how == 2) { /* one in sixteen: grown */
            const size_t m = 2 * n + 16;
            unsigned char *q = realloc(p, m);
            if (q == NULL)
                bench_oom("realloc", m);
            if (q[0] != t || q[(n < WRITE_MAX ? n : WRITE_MAX) - 1] != t)
                bench_fatal("thread %" PRIu64 ": realloc(%zu) lost the contents", j->index, m);
            p = q;
            n = m;
            fill(p, n, t);
            ops++;
        }
        slot[s] = p;
        size[s] = n;
        tag[s] = t;
        cs = bench_mix(cs, ((uint64_t)s << 40) ^ (uint64_t)n);
    }
    for (unsigned s = 0; s < SLOTS; s++) {
        if (slot[s] != NULL) {
            check_and_free(slot[s], size[s], tag[s], j->index);
            ops++;
        }
    }
    j->ops = ops;
    j->checksum = cs;
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t cs = BENCH_CHECKSUM_INIT, ops = 0;

    bench_check_argc(USAGE, argc, 3, 4);
    const uint64_t total = bench_arg_u64(USAGE, "THREADS", argv[1], 1, MAX_TOTAL);
    const uint64_t concurrent = bench_arg_u64(USAGE, "CONCURRENT", argv[2], 1, BENCH_MAX_THREADS);
    g_ops = bench_arg_u64(USAGE, "OPS", argv[3], 1, MAX_OPS);
    g_seed = argc > 4 ? bench_arg_seed(USAGE, "SEED", argv[4]) : BENCH_DEFAULT_SEED;

    job *jobs = malloc((size_t)concurrent * sizeof *jobs);
    pthread_t *tids = malloc((size_t)concurrent * sizeof *tids);
    if (jobs == NULL || tids == NULL)
        bench_oom("malloc", (size_t)concurrent * sizeof *jobs);

    const double t0 = bench_now();
    for (uint64_t done = 0; done < total;) {
        const uint64_t wave = total - done < concurrent ? total - done : concurrent;
        for (uint64_t i = 0; i < wave; i++) {
            jobs[i].index = done + i;
            bench_thread_create(&tids[i], churn_main, &jobs[i]);
        }
        for (uint64_t i = 0; i < wave; i++) {
            bench_thread_join(tids[i]);
            ops += jobs[i].ops;
            cs = bench_mix(cs, jobs[i].checksum);
        }
        done += wave;
    }
    const double t1 = bench_now();
    free(tids);
    free(jobs);

    printf("[" PROG "] threads=%" PRIu64 " concurrent=%" PRIu64 " ops_per_thread=%" PRIu64
           " seed=0x%" PRIx64 " ops=%" PRIu64 " ops/s=%.1f time_s=%.6f peak_rss_kb=%ld"
           " checksum=0x%016" PRIx64 "\n",
           total, concurrent, g_ops, g_seed, ops, bench_rate((double)ops, t1 - t0), t1 - t0,
           bench_peak_rss_kb(), bench_checksum_final(cs));
    return 0;
}
