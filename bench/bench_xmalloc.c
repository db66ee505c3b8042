/* bench_xmalloc - producer/consumer allocation: every block is freed by a
 * different thread than the one that allocated it.
 *
 *   bench_xmalloc THREADS ITERS BATCH MIN MAX [SEED]
 *
 * P = max(1, THREADS / 2) threads are producers and C = THREADS - P threads
 * are consumers (so THREADS >= 2).  Each producer ITERS times takes an empty
 * batch descriptor, fills it with BATCH blocks of random size in [MIN, MAX]
 * (its own generator, seeded from SEED, default 0x12345678, and its index),
 * writes a tag byte into each, and appends the batch to a shared FIFO queue.
 * Consumers take batches from the queue, read each block's tag and free the
 * blocks, then return the empty descriptor.  A fixed pool of 2 * THREADS
 * descriptors bounds the amount of memory in flight and makes producers wait
 * when consumers fall behind.  The queues are protected by a mutex and
 * condition variables; the blocks themselves are only touched by malloc,
 * the producer's writes, the consumer's read and free.
 *
 * ops = mallocs + frees = 2 * P * ITERS * BATCH; time_s is the wall time from
 * the barrier that starts all threads to the last thread finishing.  The
 * checksum covers the producers' sequences of sizes.  A consumer that reads
 * a tag different from the one written reports corruption (exit 1).
 *
 * Constraints: 2 <= THREADS <= 1024, ITERS >= 1, 1 <= BATCH <= 65536,
 * 1 <= MIN <= MAX <= 2^30.
 */
#include "bench_common.h"

#include <stdalign.h>

#define PROG "bench_xmalloc"

static const char USAGE[] = PROG " THREADS ITERS BATCH MIN MAX [SEED]";

#define MAX_BATCH UINT64_C(65536)
#define CACHE_LINE 64

typedef struct batch {
    uint64_t count;
    void *blocks[];
} batch;

/* Bounded FIFO of batch pointers; capacity = number of descriptors, so a
 * push never finds it full. */
typedef struct queue {
    pthread_mutex_t lock;
    pthread_cond_t nonempty;
    batch **items;
    uint64_t cap;
    uint64_t head; /* next to pop */
    uint64_t count;
    bool closed; /* no more pushes will come */
} queue;

typedef struct worker {
    alignas(CACHE_LINE) unsigned index; /* producer or consumer index */
    uint64_t checksum;
    uint64_t tags_written;
    uint64_t tags_read;
    uint64_t frees;
    double start;
    double end;
} worker;

static uint64_t g_threads, g_producers, g_consumers, g_iters, g_batch, g_min, g_max, g_seed;
static queue g_full;  /* filled batches, producers -> consumers */
static queue g_empty; /* empty descriptors, consumers -> producers */
static pthread_barrier_t g_barrier;
static pthread_mutex_t g_prod_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_producers_left;

static void queue_init(queue *q, uint64_t cap)
{
    if (pthread_mutex_init(&q->lock, NULL) != 0 || pthread_cond_init(&q->nonempty, NULL) != 0)
        bench_fatal("pthread mutex/condition initialisation failed");
    q->items = malloc((size_t)cap * sizeof *q->items);
    if (q->items == NULL)
        bench_oom("malloc", (size_t)cap * sizeof *q->items);
    q->cap = cap;
    q->head = 0;
    q->count = 0;
    q->closed = false;
}

static void queue_destroy(queue *q)
{
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->nonempty);
    free(q->items);
}

static void queue_push(queue *q, batch *b)
{
    pthread_mutex_lock(&q->lock);
    if (q->count == q->cap)
        bench_fatal("internal error: queue overflow");
    q->items[(q->head + q->count) % q->cap] = b;
    q->count++;
    pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->lock);
}

/* Waits for an item; NULL once the queue is closed and empty. */
static batch *queue_pop(queue *q)
{
    batch *b = NULL;

    pthread_mutex_lock(&q->lock);
    while (q->count == 0 && !q->closed)
        pthread_cond_wait(&q->nonempty, &q->lock);
    if (q->count > 0) {
        b = q->items[q->head];
        q->head = (q->head + 1) % q->cap;
        q->count--;
    }
    pthread_mutex_unlock(&q->lock);
    return b;
}

static void queue_close(queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->closed = true;
    pthread_cond_broadcast(&q->nonempty);
    pthread_mutex_unlock(&q->lock);
}

static void *producer_main(void *arg)
{
    worker *w = (worker *)arg;
    const uint64_t span = g_max - g_min + 1;
    uint64_t cs = BENCH_CHECKSUM_INIT, tags = 0;
    bench_rng rng;
    uint64_t i, j;
    bool last;

    bench_rng_seed(&rng, bench_stream_seed(g_seed, w->index));
    pthread_barrier_wait(&g_barrier);
    w->start = bench_now();

    for (i = 0; i < g_iters; i++) {
        batch *b = queue_pop(&g_empty);

        if (b == NULL)
            bench_fatal("internal error: descriptor pool closed");
        for (j = 0; j < g_batch; j++) {
            const size_t size = (size_t)(g_min + bench_rng_below(&rng, span));
            const unsigned char tag = bench_tag(size);
            void *p = malloc(size);

            if (p == NULL)
                bench_oom("malloc", size);
            bench_touch(p, size, tag);
            tags += tag;
            b->blocks[j] = p;
            cs = bench_mix(cs, (uint64_t)size);
        }
        b->count = g_batch;
        queue_push(&g_full, b);
    }

    pthread_mutex_lock(&g_prod_lock);
    last = --g_producers_left == 0;
    pthread_mutex_unlock(&g_prod_lock);
    if (last)
        queue_close(&g_full);

    w->end = bench_now();
    w->checksum = cs;
    w->tags_written = tags;
    return NULL;
}

static void *consumer_main(void *arg)
{
    worker *w = (worker *)arg;
    uint64_t tags = 0, frees = 0;
    batch *b;

    pthread_barrier_wait(&g_barrier);
    w->start = bench_now();

    while ((b = queue_pop(&g_full)) != NULL) {
        uint64_t j;

        for (j = 0; j < b->count; j++) {
            tags += bench_first_byte(b->blocks[j]);
            free(b->blocks[j]);
        }
        frees += b->count;
        b->count = 0;
        queue_push(&g_empty, b);
    }

    w->end = bench_now();
    w->tags_read = tags;
    w->frees = frees;
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t cs = BENCH_CHECKSUM_INIT, tags_written = 0, tags_read = 0, frees = 0;
    uint64_t ndesc, i, ops;
    pthread_t *tids;
    worker *workers;
    batch **descs;
    size_t workers_bytes, batch_bytes;
    double t0, t1;

    bench_check_argc(USAGE, argc, 5, 6);
    g_threads = bench_arg_u64(USAGE, "THREADS", argv[1], 2, BENCH_MAX_THREADS);
    g_iters = bench_arg_u64(USAGE, "ITERS", argv[2], 1, UINT64_MAX / 2 / BENCH_MAX_THREADS / MAX_BATCH);
    g_batch = bench_arg_u64(USAGE, "BATCH", argv[3], 1, MAX_BATCH);
    g_min = bench_arg_u64(USAGE, "MIN", argv[4], 1, BENCH_MAX_SIZE);
    g_max = bench_arg_u64(USAGE, "MAX", argv[5], 1, BENCH_MAX_SIZE);
    bench_check_min_max(USAGE, g_min, g_max);
    g_seed = argc > 6 ? bench_arg_seed(USAGE, "SEED", argv[6]) : BENCH_DEFAULT_SEED;

    g_producers = g_threads / 2;
    g_consumers = g_threads - g_producers;
    g_producers_left = g_producers;

    /* Harness structures, allocated before the timed phase. */
    ndesc = 2 * g_threads;
    queue_init(&g_full, ndesc);
    queue_init(&g_empty, ndesc);
    batch_bytes = sizeof(batch) + (size_t)g_batch * sizeof(void *);
    descs = malloc((size_t)ndesc * sizeof *descs);
    if (descs == NULL)
        bench_oom("malloc", (size_t)ndesc * sizeof *descs);
    for (i = 0; i < ndesc; i++) {
        descs[i] = malloc(batch_bytes);
        if (descs[i] == NULL)
            bench_oom("malloc", batch_bytes);
        memset(descs[i], 0, batch_bytes);
        queue_push(&g_empty, descs[i]);
    }
    workers_bytes = (size_t)g_threads * sizeof *workers;
    workers = aligned_alloc(CACHE_LINE, workers_bytes);
    tids = malloc((size_t)g_threads * sizeof *tids);
    if (workers == NULL || tids == NULL)
        bench_oom("malloc", workers_bytes);
    memset(workers, 0, workers_bytes);

    if (pthread_barrier_init(&g_barrier, NULL, (unsigned)g_threads) != 0)
        bench_fatal("pthread_barrier_init failed");
    for (i = 0; i < g_threads; i++) {
        const bool producer = i < g_producers;

        workers[i].index = (unsigned)(producer ? i : i - g_producers);
        bench_thread_create(&tids[i], producer ? producer_main : consumer_main, &workers[i]);
    }
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
        if (i < g_producers)
            cs = bench_mix(cs, workers[i].checksum);
        tags_written += workers[i].tags_written;
        tags_read += workers[i].tags_read;
        frees += workers[i].frees;
    }

    ops = 2 * g_producers * g_iters * g_batch;
    if (frees != g_producers * g_iters * g_batch)
        bench_fatal("%" PRIu64 " blocks allocated but %" PRIu64 " freed", g_producers * g_iters * g_batch, frees);
    if (tags_read != tags_written)
        bench_fatal("block contents changed between producer and consumer (tag sums %" PRIu64 " != %" PRIu64 ")",
                    tags_read, tags_written);

    for (i = 0; i < ndesc; i++)
        free(descs[i]);
    free(descs);
    queue_destroy(&g_full);
    queue_destroy(&g_empty);
    free(tids);
    free(workers);

    printf("[" PROG "] threads=%" PRIu64 " producers=%" PRIu64 " consumers=%" PRIu64 " iters=%" PRIu64
           " batch=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64 " seed=0x%" PRIx64 " ops=%" PRIu64
           " ops/s=%.1f time_s=%.6f peak_rss_kb=%ld checksum=0x%016" PRIx64 "\n",
           g_threads, g_producers, g_consumers, g_iters, g_batch, g_min, g_max, g_seed, ops,
           bench_rate((double)ops, t1 - t0), t1 - t0, bench_peak_rss_kb(), bench_checksum_final(cs));
    return 0;
}
