/* bench_random_mixed_mt_remote_malloc - multi-threaded random malloc/free mix
 * with a controlled share of remote (cross-thread) frees.
 *
 *   bench_random_mixed_mt_remote_malloc THREADS ITERS WS MIN MAX REMOTE_PCT [RING_SLOTS [SEED]]
 *
 * Each of THREADS threads runs the random loop of
 * bench_random_mixed_malloc_args on its own working set of WS slots for ITERS
 * steps, with its own fixed seed derived from SEED (default 0x12345678) and
 * the thread index.  When the loop frees a block, with probability
 * REMOTE_PCT percent the block is instead handed to the NEXT thread,
 * (i + 1) % THREADS, which frees it.
 *
 * Hand-off: every thread owns one inbound ring of RING_SLOTS entries
 * (default 65536).  Only thread (i - 1) % THREADS writes into the ring of
 * thread i, so each ring is a single-producer single-consumer queue built on
 * C11 atomics (release/acquire on the head and tail counters).  A thread
 * drains its inbound ring every DRAIN_INTERVAL steps, freeing the received
 * blocks.  When the ring is full the block is freed locally and counted as a
 * fallback.  With THREADS = 1 there is no other thread and every free is
 * local (no remote attempts are made).
 *
 * After its loop a thread frees the rest of its working set, announces that
 * it will send no more blocks, and drains its ring until its producer has
 * made the same announcement.  All threads start together at a barrier; the
 * measured phase is the wall time from the first thread leaving the barrier
 * to the last thread finishing its final drain.  Note that when threads
 * outnumber the available cores, a descheduled receiver lets its ring fill
 * up and the fallback rate rises.
 *
 * Counts:
 *   ops           all mallocs plus all frees performed in the phase (local
 *                 frees, fallback frees, frees of received blocks and the
 *                 final release of the working sets);
 *   remote_sent   blocks successfully handed to another thread;
 *   loop_frees    frees decided by the random loop (local + remote attempts);
 *   fallbacks     remote attempts that found the ring full.
 *
 * The line "[EFFECTIVE_REMOTE] target=R% actual=A% fallback_rate=F%" reports
 * A = remote_sent / loop_frees * 100 and F = fallbacks / remote attempts * 100.
 *
 * in_flight_peak is the most blocks seen in all rings at once, sampled every
 * millisecond by the main thread: memory the program itself holds while a
 * descheduled receiver does not drain its ring, which depends on scheduling and
 * must be told apart from the allocator's own overhead in peak_rss_kb.
 *
 * The sequence of slots, sizes and remote decisions of each thread depends
 * only on the seed, so the printed checksum is reproducible.
 *
 * Constraints: 1 <= THREADS <= 1024, ITERS >= 1, 1 <= WS <= 2^28,
 * 1 <= MIN <= MAX <= 2^30, 0 <= REMOTE_PCT <= 100, 1 <= RING_SLOTS <= 2^24.
 */
#include "bench_common.h"

#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>

#define PROG "bench_random_mixed_mt_remote_malloc"

static const char USAGE[] = PROG " THREADS ITERS WS MIN MAX REMOTE_PCT [RING_SLOTS [SEED]]";

#define DEFAULT_RING_SLOTS UINT64_C(65536)
#define MAX_RING_SLOTS (UINT64_C(1) << 24)
#define DRAIN_INTERVAL 32
#define FREE_MARK (UINT64_C(1) << 63)
#define REMOTE_MARK (UINT64_C(1) << 62)
#define CACHE_LINE 64

/* Inbound ring of one thread (single producer, single consumer). */
typedef struct ring {
    alignas(CACHE_LINE) atomic_uint_fast64_t tail; /* written by the producer */
    uint64_t cached_head;                          /* producer's copy of head */
    alignas(CACHE_LINE) atomic_uint_fast64_t head; /* written by the consumer */
    alignas(CACHE_LINE) atomic_int producer_done;  /* producer sends no more */
    alignas(CACHE_LINE) void **slots;              /* read-only after setup */
    uint64_t cap;
    uint64_t mask; /* cap - 1, used when cap is a power of two */
    bool pow2;
} ring;

typedef struct worker {
    alignas(CACHE_LINE) unsigned index;
    /* results */
    uint64_t mallocs;
    uint64_t frees;
    uint64_t loop_frees;
    uint64_t remote_attempts;
    uint64_t remote_sent;
    uint64_t fallbacks;
    uint64_t tags_written;
    uint64_t tags_read;
    uint64_t checksum;
    double start; /* after the barrier */
    double end;   /* after the final drain */
} worker;

static uint64_t g_threads, g_iters, g_ws, g_min, g_max, g_remote_pct, g_seed;
static ring *g_rings;
static worker *g_workers;
static pthread_barrier_t g_barrier;
static atomic_uint g_finished; /* workers past their final drain */

/* Blocks in all rings now (each count read without stopping the threads). */
static uint64_t rings_occupancy(void)
{
    uint64_t n = 0, i;

    for (i = 0; i < g_threads; i++) {
        const uint64_t head = atomic_load_explicit(&g_rings[i].head, memory_order_relaxed);
        const uint64_t tail = atomic_load_explicit(&g_rings[i].tail, memory_order_relaxed);

        n += tail > head ? tail - head : 0;
    }
    return n;
}

static inline uint64_t ring_index(const ring *r, uint64_t n)
{
    return r->pow2 ? (n & r->mask) : n % r->cap;
}

/* Producer side: false when the ring is full. */
static inline bool ring_push(ring *r, void *p)
{
    const uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);

    if (t - r->cached_head >= r->cap) {
        r->cached_head = atomic_load_explicit(&r->head, memory_order_acquire);
        if (t - r->cached_head >= r->cap)
            return false;
    }
    r->slots[ring_index(r, t)] = p;
    atomic_store_explicit(&r->tail, t + 1, memory_order_release);
    return true;
}

/* Consumer side: frees every block currently in the ring; returns the count. */
static inline uint64_t ring_drain(ring *r, uint64_t *tags_read)
{
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    const uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
    uint64_t n = t - h;

    if (n == 0)
        return 0;
    for (; h != t; h++) {
        void *p = r->slots[ring_index(r, h)];

        *tags_read += bench_first_byte(p);
        free(p);
    }
    atomic_store_explicit(&r->head, h, memory_order_release);
    return n;
}

static void *worker_main(void *arg)
{
    worker *w = (worker *)arg;
    const unsigned self = w->index;
    const bool can_send = g_threads > 1;
    ring *inbound = &g_rings[self];
    ring *outbound = &g_rings[(self + 1) % g_threads];
    const uint64_t span = g_max - g_min + 1;
    uint64_t mallocs = 0, frees = 0, loop_frees = 0, attempts = 0, sent = 0, fallbacks = 0;
    uint64_t tags_written = 0, tags_read = 0, cs = BENCH_CHECKSUM_INIT;
    void **slots;
    bench_rng rng;
    uint64_t i;

    slots = malloc((size_t)g_ws * sizeof *slots);
    if (slots == NULL)
        bench_oom("malloc", (size_t)g_ws * sizeof *slots);
    memset(slots, 0, (size_t)g_ws * sizeof *slots);
    bench_rng_seed(&rng, bench_stream_seed(g_seed, self));

    pthread_barrier_wait(&g_barrier);
    w->start = bench_now();

    for (i = 0; i < g_iters; i++) {
        const size_t slot = (size_t)bench_rng_below(&rng, g_ws);
        void *p = slots[slot];

        if (p != NULL) {
            /* The remote decision is always drawn, so the random sequence
             * does not depend on the thread count or on ring occupancy. */
            const bool remote = bench_rng_below(&rng, 100) < g_remote_pct;

            slots[slot] = NULL;
            loop_frees++;
            if (remote && can_send) {
                attempts++;
                if (ring_push(outbound, p)) {
                    sent++;
                } else {
                    fallbacks++;
                    tags_read += bench_first_byte(p);
                    free(p);
                    frees++;
                }
            } else {
                tags_read += bench_first_byte(p);
                free(p);
                frees++;
            }
            cs = bench_mix(cs, (uint64_t)slot | FREE_MARK | (remote ? REMOTE_MARK : 0));
        } else {
            const size_t size = (size_t)(g_min + bench_rng_below(&rng, span));
            const unsigned char tag = bench_tag(slot);

            p = malloc(size);
            if (p == NULL)
                bench_oom("malloc", size);
            bench_touch(p, size, tag);
            tags_written += tag;
            slots[slot] = p;
            mallocs++;
            cs = bench_mix(cs, ((uint64_t)slot << 32) ^ (uint64_t)size);
        }
        if (can_send && (i % DRAIN_INTERVAL) == DRAIN_INTERVAL - 1)
            frees += ring_drain(inbound, &tags_read);
    }

    for (i = 0; i < g_ws; i++) {
        if (slots[i] != NULL) {
            tags_read += bench_first_byte(slots[i]);
            free(slots[i]);
            frees++;
        }
    }

    if (can_send) {
        atomic_store_explicit(&outbound->producer_done, 1, memory_order_release);
        while (!atomic_load_explicit(&inbound->producer_done, memory_order_acquire)) {
            frees += ring_drain(inbound, &tags_read);
            sched_yield();
        }
        frees += ring_drain(inbound, &tags_read);
    }
    w->end = bench_now();
    atomic_fetch_add_explicit(&g_finished, 1, memory_order_release);
    free(slots);

    w->mallocs = mallocs;
    w->frees = frees;
    w->loop_frees = loop_frees;
    w->remote_attempts = attempts;
    w->remote_sent = sent;
    w->fallbacks = fallbacks;
    w->tags_written = tags_written;
    w->tags_read = tags_read;
    w->checksum = cs;
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t ring_slots = DEFAULT_RING_SLOTS;
    uint64_t mallocs = 0, frees = 0, loop_frees = 0, attempts = 0, sent = 0, fallbacks = 0;
    uint64_t tags_written = 0, tags_read = 0, cs = BENCH_CHECKSUM_INIT;
    pthread_t *tids;
    size_t rings_bytes, workers_bytes;
    uint64_t i;
    uint64_t in_flight_peak = 0;
    double t0, t1, actual, fallback_rate;

    bench_check_argc(USAGE, argc, 6, 8);
    g_threads = bench_arg_u64(USAGE, "THREADS", argv[1], 1, BENCH_MAX_THREADS);
    g_iters = bench_arg_u64(USAGE, "ITERS", argv[2], 1, UINT64_MAX);
    g_ws = bench_arg_u64(USAGE, "WS", argv[3], 1, BENCH_MAX_SLOTS);
    g_min = bench_arg_u64(USAGE, "MIN", argv[4], 1, BENCH_MAX_SIZE);
    g_max = bench_arg_u64(USAGE, "MAX", argv[5], 1, BENCH_MAX_SIZE);
    bench_check_min_max(USAGE, g_min, g_max);
    g_remote_pct = bench_arg_u64(USAGE, "REMOTE_PCT", argv[6], 0, 100);
    if (argc > 7)
        ring_slots = bench_arg_u64(USAGE, "RING_SLOTS", argv[7], 1, MAX_RING_SLOTS);
    g_seed = argc > 8 ? bench_arg_seed(USAGE, "SEED", argv[8]) : BENCH_DEFAULT_SEED;

    /* Harness structures (allocated before the measured phase). */
    rings_bytes = (size_t)g_threads * sizeof(ring);
    workers_bytes = (size_t)g_threads * sizeof(worker);
    g_rings = aligned_alloc(CACHE_LINE, rings_bytes);
    g_workers = aligned_alloc(CACHE_LINE, workers_bytes);
    tids = malloc((size_t)g_threads * sizeof *tids);
    if (g_rings == NULL || g_workers == NULL || tids == NULL)
        bench_oom("malloc", rings_bytes + workers_bytes);
    memset(g_workers, 0, workers_bytes);
    for (i = 0; i < g_threads; i++) {
        ring *r = &g_rings[i];

        memset(r, 0, sizeof *r);
        atomic_init(&r->tail, 0);
        atomic_init(&r->head, 0);
        atomic_init(&r->producer_done, 0);
        r->cached_head = 0;
        r->cap = ring_slots;
        r->mask = ring_slots - 1;
        r->pow2 = (ring_slots & (ring_slots - 1)) == 0;
        r->slots = NULL;
        if (g_threads > 1) {
            r->slots = malloc((size_t)ring_slots * sizeof *r->slots);
            if (r->slots == NULL)
                bench_oom("malloc", (size_t)ring_slots * sizeof *r->slots);
        }
        g_workers[i].index = (unsigned)i;
    }

    if (pthread_barrier_init(&g_barrier, NULL, (unsigned)g_threads + 1) != 0)
        bench_fatal("pthread_barrier_init failed");
    for (i = 0; i < g_threads; i++)
        bench_thread_create(&tids[i], worker_main, &g_workers[i]);
    pthread_barrier_wait(&g_barrier);
    while (atomic_load_explicit(&g_finished, memory_order_acquire) < g_threads) {
        const uint64_t n = rings_occupancy();

        if (n > in_flight_peak)
            in_flight_peak = n;
        bench_sleep_ms(1);
    }
    for (i = 0; i < g_threads; i++)
        bench_thread_join(tids[i]);
    pthread_barrier_destroy(&g_barrier);

    /* Phase: from the first thread leaving the barrier to the last thread
     * finishing (measured by the workers, so that a late wake-up of the main
     * thread does not shorten it). */
    t0 = g_workers[0].start;
    t1 = g_workers[0].end;
    for (i = 1; i < g_threads; i++) {
        if (g_workers[i].start < t0)
            t0 = g_workers[i].start;
        if (g_workers[i].end > t1)
            t1 = g_workers[i].end;
    }

    for (i = 0; i < g_threads; i++) {
        const worker *w = &g_workers[i];

        mallocs += w->mallocs;
        frees += w->frees;
        loop_frees += w->loop_frees;
        attempts += w->remote_attempts;
        sent += w->remote_sent;
        fallbacks += w->fallbacks;
        tags_written += w->tags_written;
        tags_read += w->tags_read;
        cs = bench_mix(cs, w->checksum);
        free(g_rings[i].slots);
    }
    free(tids);
    free(g_workers);
    free(g_rings);

    if (frees != mallocs)
        bench_fatal("%" PRIu64 " blocks allocated but %" PRIu64 " freed", mallocs, frees);
    if (tags_read != tags_written)
        bench_fatal("block contents changed between malloc and free (tag sums %" PRIu64 " != %" PRIu64 ")",
                    tags_read, tags_written);

    actual = loop_frees ? (double)sent * 100.0 / (double)loop_frees : 0.0;
    fallback_rate = attempts ? (double)fallbacks * 100.0 / (double)attempts : 0.0;

    printf("[" PROG "] threads=%" PRIu64 " iters=%" PRIu64 " ws=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64
           " remote_pct=%" PRIu64 " ring_slots=%" PRIu64 " remote_target=next seed=0x%" PRIx64
           " ops=%" PRIu64 " remote_sent=%" PRIu64 " loop_frees=%" PRIu64 " fallbacks=%" PRIu64
           " ops/s=%.1f time_s=%.6f peak_rss_kb=%ld in_flight_peak=%" PRIu64 " checksum=0x%016" PRIx64 "\n",
           g_threads, g_iters, g_ws, g_min, g_max, g_remote_pct, ring_slots, g_seed, mallocs + frees, sent,
           loop_frees, fallbacks, bench_rate((double)(mallocs + frees), t1 - t0), t1 - t0, bench_peak_rss_kb(),
           in_flight_peak, bench_checksum_final(cs));
    printf("[EFFECTIVE_REMOTE] target=%" PRIu64 "%% actual=%.2f%% fallback_rate=%.3f%%\n", g_remote_pct, actual,
           fallback_rate);
    return 0;
}
