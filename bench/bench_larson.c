/* bench_larson - server-style allocation with short-lived threads that pass
 * their live blocks on to successor threads, modelled on the benchmark
 * described by Larson and Krishnan ("Memory allocation for long-running
 * server applications", ISMM 1998).
 *
 *   bench_larson THREADS ROUNDS CHUNKS MIN MAX OPS_PER_ROUND [SEED]
 *
 * There are THREADS independent lineages.  Each lineage owns an array of
 * CHUNKS blocks and its own random generator (seeded from SEED, default
 * 0x12345678, and the lineage index).  Before the timed phase the main thread
 * fills every array with blocks of random size in [MIN, MAX].
 *
 * A lineage then lives through ROUNDS threads, one after the other.  The
 * thread of a round performs OPS_PER_ROUND steps; a step frees a randomly
 * chosen chunk and replaces it with a new block of random size in
 * [MIN, MAX].  At the end of its round the thread creates the thread of the
 * next round, hands it the array (with the live blocks) and exits; the new
 * thread first joins its predecessor.  Blocks are therefore usually freed by
 * a different thread than the one that allocated them, including blocks of
 * the main thread, and the allocator sees threads come and go.  All
 * lineages run concurrently and independently, so the program ends after
 * THREADS * ROUNDS threads and 2 * THREADS * ROUNDS * OPS_PER_ROUND
 * operations.
 *
 * The timed phase starts before the first threads are created and ends when
 * the last lineage has finished; ops/s counts mallocs and frees.  The
 * initial fill and the final release are not timed.  The operations of each
 * lineage depend only on the seed, so the checksum is reproducible.
 *
 * Constraints: 1 <= THREADS <= 1024, 1 <= ROUNDS <= 1000000,
 * 1 <= CHUNKS <= 2^24, 1 <= MIN <= MAX <= 2^30, OPS_PER_ROUND >= 1.
 */
#include "bench_common.h"

#define PROG "bench_larson"

static const char USAGE[] = PROG " THREADS ROUNDS CHUNKS MIN MAX OPS_PER_ROUND [SEED]";

#define MAX_ROUNDS UINT64_C(1000000)
#define MAX_CHUNKS (UINT64_C(1) << 24)

typedef struct lineage {
    unsigned index;
    void **blocks;
    bench_rng rng;
    uint64_t round;     /* rounds completed */
    uint64_t checksum;
    pthread_t prev;     /* thread of the previous round, to be joined */
    bool has_prev;
    pthread_t last;     /* thread of the last round, joined by main */
} lineage;

static uint64_t g_threads, g_rounds, g_chunks, g_min, g_max, g_ops, g_seed;
static lineage *g_lineages;

static pthread_mutex_t g_done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_done_cond = PTHREAD_COND_INITIALIZER;
static uint64_t g_done;

static inline unsigned char chunk_tag(const lineage *l, uint64_t idx)
{
    return bench_tag(((uint64_t)l->index << 32) ^ idx);
}

static void *round_main(void *arg)
{
    lineage *l = (lineage *)arg;
    const uint64_t span = g_max - g_min + 1;
    void **blocks = l->blocks;
    uint64_t cs = l->checksum;
    bench_rng rng = l->rng; /* local copy: no false sharing between lineages */
    uint64_t i;

    if (l->has_prev)
        bench_thread_join(l->prev);

    for (i = 0; i < g_ops; i++) {
        const uint64_t idx = bench_rng_below(&rng, g_chunks);
        const size_t size = (size_t)(g_min + bench_rng_below(&rng, span));
        void *p = blocks[idx];

        if (bench_first_byte(p) != chunk_tag(l, idx))
            bench_fatal("lineage %u: block %" PRIu64 " was corrupted", l->index, idx);
        free(p);
        p = malloc(size);
        if (p == NULL)
            bench_oom("malloc", size);
        bench_touch(p, size, chunk_tag(l, idx));
        blocks[idx] = p;
        cs = bench_mix(cs, (idx << 32) ^ (uint64_t)size);
    }
    l->rng = rng;
    l->checksum = cs;
    l->round++;

    if (l->round < g_rounds) {
        pthread_t next;

        /* Everything written to *l so far is visible to the successor
         * (pthread_create synchronizes); this thread touches *l no more. */
        l->prev = pthread_self();
        l->has_prev = true;
        bench_thread_create(&next, round_main, l);
    } else {
        l->last = pthread_self();
        pthread_mutex_lock(&g_done_lock);
        g_done++;
        pthread_cond_signal(&g_done_cond);
        pthread_mutex_unlock(&g_done_lock);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t cs = BENCH_CHECKSUM_INIT;
    uint64_t i, j, ops;
    size_t lineages_bytes;
    double t0, t1;

    bench_check_argc(USAGE, argc, 6, 7);
    g_threads = bench_arg_u64(USAGE, "THREADS", argv[1], 1, BENCH_MAX_THREADS);
    g_rounds = bench_arg_u64(USAGE, "ROUNDS", argv[2], 1, MAX_ROUNDS);
    g_chunks = bench_arg_u64(USAGE, "CHUNKS", argv[3], 1, MAX_CHUNKS);
    g_min = bench_arg_u64(USAGE, "MIN", argv[4], 1, BENCH_MAX_SIZE);
    g_max = bench_arg_u64(USAGE, "MAX", argv[5], 1, BENCH_MAX_SIZE);
    bench_check_min_max(USAGE, g_min, g_max);
    g_ops = bench_arg_u64(USAGE, "OPS_PER_ROUND", argv[6], 1, UINT64_MAX / 2 / BENCH_MAX_THREADS / MAX_ROUNDS);
    g_seed = argc > 7 ? bench_arg_seed(USAGE, "SEED", argv[7]) : BENCH_DEFAULT_SEED;

    lineages_bytes = (size_t)g_threads * sizeof(lineage);
    g_lineages = malloc(lineages_bytes);
    if (g_lineages == NULL)
        bench_oom("malloc", lineages_bytes);
    memset(g_lineages, 0, lineages_bytes);

    /* Initial fill by the main thread (not timed). */
    for (i = 0; i < g_threads; i++) {
        lineage *l = &g_lineages[i];
        const uint64_t span = g_max - g_min + 1;

        l->index = (unsigned)i;
        l->checksum = BENCH_CHECKSUM_INIT;
        bench_rng_seed(&l->rng, bench_stream_seed(g_seed, i));
        l->blocks = malloc((size_t)g_chunks * sizeof *l->blocks);
        if (l->blocks == NULL)
            bench_oom("malloc", (size_t)g_chunks * sizeof *l->blocks);
        for (j = 0; j < g_chunks; j++) {
            const size_t size = (size_t)(g_min + bench_rng_below(&l->rng, span));
            void *p = malloc(size);

            if (p == NULL)
                bench_oom("malloc", size);
            bench_touch(p, size, chunk_tag(l, j));
            l->blocks[j] = p;
            l->checksum = bench_mix(l->checksum, (j << 32) ^ (uint64_t)size);
        }
    }

    t0 = bench_now();
    for (i = 0; i < g_threads; i++) {
        pthread_t tid;

        bench_thread_create(&tid, round_main, &g_lineages[i]);
    }
    pthread_mutex_lock(&g_done_lock);
    while (g_done < g_threads)
        pthread_cond_wait(&g_done_cond, &g_done_lock);
    pthread_mutex_unlock(&g_done_lock);
    t1 = bench_now();

    for (i = 0; i < g_threads; i++) {
        lineage *l = &g_lineages[i];

        bench_thread_join(l->last);
        for (j = 0; j < g_chunks; j++) {
            if (bench_first_byte(l->blocks[j]) != chunk_tag(l, j))
                bench_fatal("lineage %u: block %" PRIu64 " was corrupted", l->index, j);
            free(l->blocks[j]);
        }
        free(l->blocks);
        cs = bench_mix(cs, l->checksum);
    }
    free(g_lineages);

    ops = 2 * g_threads * g_rounds * g_ops;
    printf("[" PROG "] threads=%" PRIu64 " rounds=%" PRIu64 " chunks=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64
           " ops_per_round=%" PRIu64 " seed=0x%" PRIx64 " threads_created=%" PRIu64 " ops=%" PRIu64
           " ops/s=%.1f time_s=%.6f peak_rss_kb=%ld checksum=0x%016" PRIx64 "\n",
           g_threads, g_rounds, g_chunks, g_min, g_max, g_ops, g_seed, g_threads * g_rounds, ops,
           bench_rate((double)ops, t1 - t0), t1 - t0, bench_peak_rss_kb(), bench_checksum_final(cs));
    return 0;
}
