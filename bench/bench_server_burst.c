/* bench_server_burst - a server's memory through a burst of traffic.
 *
 *   bench_server_burst PAIRS BURST_MB STEADY_MS CALM_MS [SEED]
 *
 * PAIRS pairs of threads pass messages through a ring each: the producer (a
 * request handler) mallocs a message of random size (32 B to 4 KiB, one in
 * 16 up to 32 KiB) and writes all of it; the consumer (a worker) checks and
 * frees it, so every free is of a block another thread allocated.  Phases:
 *   steady  STEADY_MS milliseconds of that traffic;
 *   burst   the workers fall behind: they hold on to the messages until
 *           BURST_MB MiB are queued in all, then work the backlog off, keeping
 *           one message in 1024 as a cache entry that outlives the burst (as
 *           sessions and cached responses do);
 *   calm    CALM_MS milliseconds of steady traffic again, the resident size
 *           sampled every 100 ms.
 * A server on an allocator that keeps what a burst made it map stays at its
 * peak for the rest of its life; one that returns memory falls back.
 *
 * Output (RSS in KiB, from /proc/self/statm):
 *   phase=steady ms=<n> ops/s=<rate> rss_kb=<n>
 *   phase=burst ms=<n> queued_mb=<n> peak_rss_kb=<n> rss_kb=<after the backlog is freed>
 *   sample t_ms=<since the calm phase began> rss_kb=<n>      (one per 100 ms)
 *   phase=calm ms=<n> ops/s=<rate> rss_kb=<n>
 *   the result line: ops/s=<rate of the steady and calm traffic> (ops = mallocs
 *   + frees), the parameters, peak_rss_kb=, rss_end_kb= (the last sample) and
 *   kept_blocks= (cache entries alive at the end).
 * The traffic runs for fixed times, so the number of operations, and hence no
 * checksum, is deterministic; every message is checked when it is freed.
 *
 * Constraints: 1 <= PAIRS <= 64, 1 <= BURST_MB <= 1048576,
 * 1 <= STEADY_MS, CALM_MS <= 3600000.
 */
#include "bench_common.h"

#include <sched.h>
#include <stdatomic.h>

#define PROG "bench_server_burst"

static const char USAGE[] = PROG " PAIRS BURST_MB STEADY_MS CALM_MS [SEED]";

#define MAX_PAIRS UINT64_C(64)
#define MAX_BURST_MB UINT64_C(1048576)
#define MAX_MS UINT64_C(3600000)
#define RING_SLOTS 1024 /* a power of two */
#define CHUNK_PTRS 4096
#define KEEP_ONE_IN 1024
#define SAMPLE_MS 100

enum phase { PHASE_STEADY, PHASE_BURST, PHASE_CALM, PHASE_STOP };

typedef struct ptr_chunk {
    struct ptr_chunk *next;
    size_t count;
    void *ptrs[CHUNK_PTRS];
} ptr_chunk;

typedef struct pair {
    _Alignas(64) _Atomic size_t head; /* next slot the consumer takes */
    _Alignas(64) _Atomic size_t tail; /* next slot the producer fills */
    _Alignas(64) void *slots[RING_SLOTS];
    uint64_t seed;
    uint64_t quota;        /* bytes this consumer holds during the burst */
    _Atomic uint64_t done; /* messages consumed */
    _Atomic int burst_over;
    ptr_chunk *kept; /* cache entries kept from the burst */
    uint64_t kept_blocks;
    pthread_t producer, consumer;
} pair;

static _Atomic int phase = PHASE_STEADY;

static int current_phase(void)
{
    return atomic_load_explicit(&phase, memory_order_acquire);
}

/* A message: its size in the first 8 bytes, then bytes derived from it. */
static void *message_new(bench_rng *rng)
{
    uint64_t size = bench_rng_below(rng, 16) == 0 ? bench_rng_range(rng, 4096, 32768)
                                                   : bench_rng_range(rng, 32, 4096);
    unsigned char *m = malloc(size);

    if (m == NULL)
        bench_oom("malloc", size);
    memset(m, bench_tag(size), size);
    memcpy(m, &size, sizeof size);
    return m;
}

static uint64_t message_check(const void *m)
{
    uint64_t size;

    memcpy(&size, m, sizeof size);
    if (size < 32 || size > 32768 || ((const unsigned char *)m)[size - 1] != bench_tag(size))
        bench_fatal("message %p is corrupted", m);
    return size;
}

static void *producer_main(void *arg)
{
    pair *p = arg;
    bench_rng rng;

    bench_rng_seed(&rng, p->seed);
    while (current_phase() != PHASE_STOP) {
        size_t tail = atomic_load_explicit(&p->tail, memory_order_relaxed);

        if (tail - atomic_load_explicit(&p->head, memory_order_acquire) == RING_SLOTS) {
            sched_yield();
            continue;
        }
        p->slots[tail & (RING_SLOTS - 1)] = message_new(&rng);
        atomic_store_explicit(&p->tail, tail + 1, memory_order_release);
    }
    return NULL;
}

static void chunk_push(ptr_chunk **list, void *m)
{
    ptr_chunk *c = *list;

    if (c == NULL || c->count == CHUNK_PTRS) {
        c = malloc(sizeof *c);
        if (c == NULL)
            bench_oom("malloc", sizeof *c);
        c->next = *list;
        c->count = 0;
        *list = c;
    }
    c->ptrs[c->count++] = m;
}

/* Frees the backlog but one message in KEEP_ONE_IN, which goes to the cache. */
static void backlog_work_off(pair *p, ptr_chunk *backlog)
{
    uint64_t n = 0;

    while (backlog != NULL) {
        ptr_chunk *next = backlog->next;

        for (size_t i = 0; i < backlog->count; i++, n++) {
            message_check(backlog->ptrs[i]);
            if (n % KEEP_ONE_IN == 0) {
                chunk_push(&p->kept, backlog->ptrs[i]);
                p->kept_blocks++;
            } else {
                free(backlog->ptrs[i]);
            }
        }
        free(backlog);
        backlog = next;
    }
}

static void *consumer_main(void *arg)
{
    pair *p = arg;
    ptr_chunk *backlog = NULL;
    uint64_t held = 0;
    int ph;

    while ((ph = current_phase()) != PHASE_STOP) {
        size_t head = atomic_load_explicit(&p->head, memory_order_relaxed);
        void *m;

        if (head == atomic_load_explicit(&p->tail, memory_order_acquire)) {
            sched_yield();
            continue;
        }
        m = p->slots[head & (RING_SLOTS - 1)];
        atomic_store_explicit(&p->head, head + 1, memory_order_release);
        if (ph == PHASE_BURST && !atomic_load_explicit(&p->burst_over, memory_order_relaxed)) {
            chunk_push(&backlog, m);
            held += message_check(m);
            if (held >= p->quota) {
                backlog_work_off(p, backlog);
                backlog = NULL;
                atomic_store_explicit(&p->burst_over, 1, memory_order_release);
            }
        } else {
            message_check(m);
            free(m);
        }
        atomic_fetch_add_explicit(&p->done, 1, memory_order_relaxed);
    }
    backlog_work_off(p, backlog);
    return NULL;
}

static uint64_t messages_done(pair *pairs, uint64_t n)
{
    uint64_t sum = 0;

    for (uint64_t i = 0; i < n; i++)
        sum += atomic_load_explicit(&pairs[i].done, memory_order_relaxed);
    return sum;
}

static void free_list(ptr_chunk *c, bool with_blocks)
{
    while (c != NULL) {
        ptr_chunk *next = c->next;

        for (size_t i = 0; with_blocks && i < c->count; i++)
            free(c->ptrs[i]);
        free(c);
        c = next;
    }
}

int main(int argc, char **argv)
{
    uint64_t npairs, burst_mb, steady_ms, calm_ms, seed, m0, m2, m3, kept = 0;
    long rss, rss_burst, peak;
    double t0, t1, t2, t3, calm_start;
    pair *pairs;

    bench_check_argc(USAGE, argc, 4, 5);
    npairs = bench_arg_u64(USAGE, "PAIRS", argv[1], 1, MAX_PAIRS);
    burst_mb = bench_arg_u64(USAGE, "BURST_MB", argv[2], 1, MAX_BURST_MB);
    steady_ms = bench_arg_u64(USAGE, "STEADY_MS", argv[3], 1, MAX_MS);
    calm_ms = bench_arg_u64(USAGE, "CALM_MS", argv[4], 1, MAX_MS);
    seed = argc > 5 ? bench_arg_seed(USAGE, "SEED", argv[5]) : BENCH_DEFAULT_SEED;

    pairs = aligned_alloc(64, sizeof *pairs * npairs);
    if (pairs == NULL)
        bench_oom("aligned_alloc", sizeof *pairs * npairs);
    memset(pairs, 0, sizeof *pairs * npairs);
    for (uint64_t i = 0; i < npairs; i++) {
        pairs[i].seed = bench_stream_seed(seed, i);
        pairs[i].quota = (burst_mb << 20) / npairs;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    t0 = bench_now();
    for (uint64_t i = 0; i < npairs; i++) {
        bench_thread_create(&pairs[i].consumer, consumer_main, &pairs[i]);
        bench_thread_create(&pairs[i].producer, producer_main, &pairs[i]);
    }
    bench_sleep_ms(steady_ms);
    m0 = messages_done(pairs, npairs);
    t1 = bench_now();
    printf("phase=steady ms=%.0f ops/s=%.0f rss_kb=%ld\n", (t1 - t0) * 1e3,
           bench_rate(2.0 * (double)m0, t1 - t0), bench_current_rss_kb());

    atomic_store_explicit(&phase, PHASE_BURST, memory_order_release);
    for (uint64_t i = 0; i < npairs; i++)
        while (!atomic_load_explicit(&pairs[i].burst_over, memory_order_acquire))
            bench_sleep_ms(1);
    t2 = bench_now();
    peak = bench_peak_rss_kb();
    rss_burst = bench_current_rss_kb();
    printf("phase=burst ms=%.0f queued_mb=%" PRIu64 " peak_rss_kb=%ld rss_kb=%ld\n", (t2 - t1) * 1e3,
           burst_mb, peak, rss_burst);

    atomic_store_explicit(&phase, PHASE_CALM, memory_order_release);
    calm_start = bench_now();
    m2 = messages_done(pairs, npairs);
    rss = rss_burst;
    for (uint64_t t = SAMPLE_MS; t <= calm_ms; t += SAMPLE_MS) {
        double wake = calm_start + (double)t * 1e-3 - bench_now();

        if (wake > 0)
            bench_sleep_ms((uint64_t)(wake * 1e3));
        rss = bench_current_rss_kb();
        printf("sample t_ms=%" PRIu64 " rss_kb=%ld\n", t, rss);
    }
    m3 = messages_done(pairs, npairs);
    t3 = bench_now();
    printf("phase=calm ms=%.0f ops/s=%.0f rss_kb=%ld\n", (t3 - calm_start) * 1e3,
           bench_rate(2.0 * (double)(m3 - m2), t3 - calm_start), rss);
    atomic_store_explicit(&phase, PHASE_STOP, memory_order_release);
    for (uint64_t i = 0; i < npairs; i++) {
        bench_thread_join(pairs[i].producer);
        bench_thread_join(pairs[i].consumer);
    }
    /* Messages left in the rings when the traffic stopped. */
    for (uint64_t i = 0; i < npairs; i++) {
        pair *p = &pairs[i];
        for (size_t h = atomic_load(&p->head); h != atomic_load(&p->tail); h++)
            free(p->slots[h & (RING_SLOTS - 1)]);
        kept += p->kept_blocks;
        free_list(p->kept, true);
    }
    printf(PROG " pairs=%" PRIu64 " burst_mb=%" PRIu64 " steady_ms=%" PRIu64 " calm_ms=%" PRIu64
                " seed=0x%" PRIx64 " ops/s=%.0f peak_rss_kb=%ld rss_end_kb=%ld kept_blocks=%" PRIu64 "\n",
           npairs, burst_mb, steady_ms, calm_ms, seed,
           bench_rate(2.0 * (double)(m0 + (m3 - m2)), (t1 - t0) + (t3 - calm_start)), peak, rss, kept);
    free(pairs);
    return 0;
}
