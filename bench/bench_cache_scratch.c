/* bench_cache_scratch - passive false sharing of allocator-handed objects,
 * after the cache-scratch test described in the Hoard paper (Berger et al.,
 * ASPLOS 2000).
 *
 *   bench_cache_scratch THREADS ITERS OBJSIZE REPETITIONS
 *
 * The main thread allocates one object of OBJSIZE bytes per thread, one
 * right after the other (so with small objects several of them usually share
 * a cache line), and passes object i to thread i.  Each thread frees the
 * object it was given and then ITERS times allocates an object of OBJSIZE
 * bytes, writes every byte of it REPETITIONS times and frees it.  An
 * allocator that hands the freed object (or its neighbours) back to the
 * thread makes the threads write to shared cache lines and the run slows
 * down; an allocator that keeps threads' objects on separate lines does not.
 *
 * Threads start together at a barrier.  ops counts every malloc and free in
 * the timed phase (THREADS * (1 + 2 * ITERS)); time_s is the wall time from
 * the first thread leaving the barrier to the last thread finishing.  The
 * checksum covers the values written, which depend only on the parameters.
 *
 * Constraints: 1 <= THREADS <= 1024, ITERS >= 1, 1 <= OBJSIZE <= 2^20,
 * 1 <= REPETITIONS <= 2^32.
 */
#include "bench_common.h"

#include <stdalign.h>

#define PROG "bench_cache_scratch"

static const char USAGE[] = PROG " THREADS ITERS OBJSIZE REPETITIONS";

#define MAX_OBJSIZE (UINT64_C(1) << 20)
#define MAX_REPETITIONS (UINT64_C(1) << 32)
#define CACHE_LINE 64

typedef struct worker {
    alignas(CACHE_LINE) unsigned index;
    void *given; /* object allocated by the main thread */
    uint64_t checksum;
    double start;
    double end;
} worker;

static uint64_t g_threads, g_iters, g_objsize, g_reps;
static pthread_barrier_t g_barrier;

static void *worker_main(void *arg)
{
    worker *w = (worker *)arg;
    const size_t size = (size_t)g_objsize;
    uint64_t cs = BENCH_CHECKSUM_INIT;
    uint64_t i, r;

    pthread_barrier_wait(&g_barrier);
    w->start = bench_now();

    if (bench_first_byte(w->given) != bench_tag(w->index))
        bench_fatal("object passed to thread %u was corrupted", w->index);
    free(w->given);
    w->given = NULL;

    for (i = 0; i < g_iters; i++) {
        volatile unsigned char *v;
        unsigned char *p = malloc(size);
        size_t k;

        if (p == NULL)
            bench_oom("malloc", size);
        v = p;
        /* First pass stores a known pattern, later passes read-modify-write
         * every byte through a volatile pointer so no store is elided. */
        for (k = 0; k < size; k++)
            v[k] = (unsigned char)k;
        for (r = 1; r < g_reps; r++) {
            for (k = 0; k < size; k++)
                v[k] = (unsigned char)(v[k] + 1);
        }
        cs = bench_mix(cs, (uint64_t)v[0] | ((uint64_t)v[size - 1] << 8));
        free(p);
    }

    w->end = bench_now();
    w->checksum = cs;
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t cs = BENCH_CHECKSUM_INIT;
    uint64_t i, ops;
    pthread_t *tids;
    worker *workers;
    size_t workers_bytes;
    double t0, t1;

    bench_check_argc(USAGE, argc, 4, 4);
    g_threads = bench_arg_u64(USAGE, "THREADS", argv[1], 1, BENCH_MAX_THREADS);
    g_iters = bench_arg_u64(USAGE, "ITERS", argv[2], 1, UINT64_MAX / 2 / BENCH_MAX_THREADS);
    g_objsize = bench_arg_u64(USAGE, "OBJSIZE", argv[3], 1, MAX_OBJSIZE);
    g_reps = bench_arg_u64(USAGE, "REPETITIONS", argv[4], 1, MAX_REPETITIONS);

    workers_bytes = (size_t)g_threads * sizeof *workers;
    workers = aligned_alloc(CACHE_LINE, workers_bytes);
    tids = malloc((size_t)g_threads * sizeof *tids);
    if (workers == NULL || tids == NULL)
        bench_oom("malloc", workers_bytes);
    memset(workers, 0, workers_bytes);

    /* The objects that are passed to the threads, allocated back to back. */
    for (i = 0; i < g_threads; i++) {
        void *p = malloc((size_t)g_objsize);

        if (p == NULL)
            bench_oom("malloc", (size_t)g_objsize);
        bench_touch(p, (size_t)g_objsize, bench_tag(i));
        workers[i].index = (unsigned)i;
        workers[i].given = p;
    }

    if (pthread_barrier_init(&g_barrier, NULL, (unsigned)g_threads) != 0)
        bench_fatal("pthread_barrier_init failed");
    for (i = 0; i < g_threads; i++)
        bench_thread_create(&tids[i], worker_main, &workers[i]);
    for (i = 0; i < g_threads; i++)
        bench_thread_join(tids[i]);
    pthread_barrier_destroy(&g_barrier);

    t0 = workers[0].start;
    t1 = workers[0].end;
    for (i = 0; i < g_threads; i++) {
        if (workers[i].start < t0)
            t0 = workers[i].start;
        if (workers[i].end > t1)
            t1 = workers[i].end;
        cs = bench_mix(cs, workers[i].checksum);
    }
    free(tids);
    free(workers);

    ops = g_threads * (1 + 2 * g_iters);
    printf("[" PROG "] threads=%" PRIu64 " iters=%" PRIu64 " objsize=%" PRIu64 " repetitions=%" PRIu64
           " ops=%" PRIu64 " ops/s=%.1f time_s=%.6f peak_rss_kb=%ld checksum=0x%016" PRIx64 "\n",
           g_threads, g_iters, g_objsize, g_reps, ops, bench_rate((double)ops, t1 - t0), t1 - t0,
           bench_peak_rss_kb(), bench_checksum_final(cs));
    return 0;
}
