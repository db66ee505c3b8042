/* test_thread_churn.c - many short-lived threads must not leak memory.
 *
 * 10,240 threads (2,560 under the checked variant) are created and joined, 16 at
 * a time.  Each allocates and frees a mix of small, medium and (sometimes) large
 * blocks and leaves four blocks behind, which the main thread verifies and frees
 * after the join.
 *
 * Bound: RSS may grow by at most 64 MiB between the point where the first 512
 * threads have finished and the end of the run.  A per-thread leak of even a
 * few KiB (one heap, one cache) would exceed it over the ~9,700 later threads.
 * Under hakozuna, threads_live must fall back to at most 4 once all threads
 * have been joined, and bytes_in_use may grow by at most 32 MiB over the same
 * span; outside the debug variant, less than 1 MiB per thread may be purged over
 * it (3 MiB under the hardened variant), since each thread's successors reuse its
 * pages (10 MiB was).
 *
 * Then 20,000 detached threads (5,000 under the checked variant), 4 alive at a time,
 * that never call the allocator: glibc, tearing such a thread down after its key
 * destructors ran, frees other threads' cached TLS blocks, which the main thread
 * allocated.  Those frees must not leave the exiting thread a heap that nothing
 * releases: threads_live must again fall to at most 4.  The same for 5,000 detached
 * threads that each free 63 blocks the main thread allocated, one short of the
 * frees after which a thread that only frees gets a heap: glibc's frees at their
 * teardown must not be counted towards it.
 *
 * Last, 3,000 threads one after the other whose first allocation comes in the last
 * round of key destructors: threads_live must fall to at most 4 again and the
 * threads must share a few heaps, not leave one each.
 */
#include "hz_test.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define NTHREADS 10240
#define CONCURRENT 16
#define RSS_MARK 512                 /* threads done before the first RSS reading */
#define RSS_BOUND_KIB (64L * 1024)   /* 64 MiB */
#define INUSE_BOUND ((uint64_t)32 << 20)
/* Purged per thread after the mark; the hardened variant's quarantine and guard
 * pages leave it more to purge. */
#define PURGED_EACH_BOUND ((uint64_t)1 << 20)
#define PURGED_EACH_BOUND_HARDENED ((uint64_t)3 << 20)
#define SLOTS 48
#define LEFT 4
#define FILL_MAX 16384 /* bytes written per block: large blocks stay cheap to churn */

struct job {
    unsigned index;
    void *left[LEFT];
    size_t left_size[LEFT];
};

static unsigned char fill_of(unsigned index, unsigned k)
{
    return (unsigned char)(index * 31 + k * 7 + 1);
}

static void check_fill(const unsigned char *p, size_t n, unsigned char v, const char *what)
{
    for (size_t i = 0; i < n; i++)
        CHECK(p[i] == v, "%s: byte %zu of a %zu-byte block is %u, want %u", what, i, n, p[i], v);
}

static void *worker(void *arg)
{
    struct job *j = (struct job *)arg;
    uint64_t rng = 0xC0FFEEull + j->index * 0x9E3779B97F4A7C15ull;
    unsigned char *slot[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    unsigned char val[SLOTS] = {0};

    for (int op = 0; op < 240; op++) {
        unsigned s = (unsigned)(hz_test_rand(&rng) % SLOTS);
        if (slot[s]) {
            size_t chk = size[s] < 512 ? size[s] : 512;
            check_fill(slot[s], chk, val[s], "thread block");
            free(slot[s]);
            slot[s] = NULL;
            continue;
        }
        uint64_t r = hz_test_rand(&rng);
        size_t n;
        if (r % 100 < 80)
            n = hz_test_rand_range(&rng, 1, 512);
        else if (r % 100 < 98)
            n = hz_test_rand_range(&rng, 1024, 65536);
        else
            n = hz_test_rand_range(&rng, 256 << 10, 2 << 20);
        unsigned char *p;
        if ((r >> 32) % 8 == 0) {
            p = (unsigned char *)calloc(1, n);
            CHECK(p != NULL, "calloc(%zu) failed", n);
            CHECK(p[0] == 0 && p[n - 1] == 0, "calloc(%zu) not zeroed", n);
        } else {
            p = (unsigned char *)malloc(n);
            CHECK(p != NULL, "malloc(%zu) failed", n);
        }
        if ((r >> 40) % 16 == 0) {
            size_t m = n * 2 + 16;
            memset(p, 0x77, n < FILL_MAX ? n : FILL_MAX);
            unsigned char *q = (unsigned char *)realloc(p, m);
            CHECK(q != NULL, "realloc(%zu) failed", m);
            check_fill(q, n < 512 ? n : 512, 0x77, "realloc");
            p = q;
            n = m;
        }
        slot[s] = p;
        size[s] = n;
        val[s] = (unsigned char)r;
        memset(p, val[s], n < FILL_MAX ? n : FILL_MAX);
    }
    for (unsigned s = 0; s < SLOTS; s++) {
        if (slot[s]) {
            check_fill(slot[s], size[s] < 512 ? size[s] : 512, val[s], "thread block");
            free(slot[s]);
        }
    }
    /* Blocks left for the main thread to free. */
    for (unsigned k = 0; k < LEFT; k++) {
        size_t n = k == 0 ? 24 : k == 1 ? 200 : k == 2 ? 3000 : (j->index % 64 == 0 ? 300000 : 40);
        unsigned char *p = (unsigned char *)malloc(n);
        CHECK(p != NULL, "malloc(%zu) failed", n);
        memset(p, fill_of(j->index, k), n);
        j->left[k] = p;
        j->left_size[k] = n;
    }
    return NULL;
}

#define DETACHED 20000
static _Atomic int detached_running;

#define FREEING 5000
#define FREES_EACH 63

static void *idle(void *arg)
{
    void **blocks = arg;
    for (unsigned k = 0; blocks != NULL && k < FREES_EACH - 1; k++)
        free(blocks[k]);
    free(blocks); /* the array itself, which the main thread allocated too */
    atomic_fetch_sub(&detached_running, 1);
    return NULL;
}

/* threads_live, once thread exits have been seen (they are seen at join, or when a
 * detached thread's teardown is over): at most a second's wait. */
static struct hz_stats settled_stats(void)
{
    struct hz_stats st;
    for (int i = 0; i < 20; i++) {
        CHECK(hz_test_stats(&st), "hz_stats_get failed");
        if (st.threads_live <= 4)
            break;
        hz_test_sleep_ms(50);
    }
    return st;
}

/* n detached threads, 4 alive at a time; with `freeing`, each frees FREES_EACH
 * blocks (FREES_EACH - 1 and their array), all allocated here. */
static void detached_threads(int hz, unsigned n, int freeing)
{
    pthread_attr_t attr;
    CHECK(pthread_attr_init(&attr) == 0 && pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0,
          "pthread_attr");
    double t0 = hz_test_now();
    for (unsigned i = 0; i < n; i++) {
        void **blocks = NULL;
        if (freeing) {
            blocks = malloc((FREES_EACH - 1) * sizeof *blocks);
            CHECK(blocks != NULL, "malloc failed");
            for (unsigned k = 0; k < FREES_EACH - 1; k++) {
                blocks[k] = malloc(16 + k * 8);
                CHECK(blocks[k] != NULL, "malloc failed");
            }
        }
        while (atomic_load(&detached_running) >= 4)
            sched_yield();
        atomic_fetch_add(&detached_running, 1);
        pthread_t t;
        int rc = pthread_create(&t, &attr, idle, blocks);
        CHECK(rc == 0, "pthread_create (detached) failed after %u threads: %s", i, strerror(rc));
    }
    while (atomic_load(&detached_running) > 0)
        sched_yield();
    pthread_attr_destroy(&attr);
    if (!hz)
        return;
    struct hz_stats st = settled_stats();
    printf("%u detached%s threads in %.2f s: threads_live %llu, heaps_created %llu\n", n,
           freeing ? " freeing" : "", hz_test_now() - t0, (unsigned long long)st.threads_live,
           (unsigned long long)st.heaps_created);
    CHECK(st.threads_live <= 4, "threads_live is %llu after %u detached%s threads ended",
          (unsigned long long)st.threads_live, n, freeing ? " freeing" : "");
}

/* Threads whose first allocation comes in the last round of key destructors, after
 * which glibc runs no more: the heap such a thread gets is released by no destructor,
 * and must not stay owned by a thread that is gone. */
#define LAST_ROUND 3000
static pthread_key_t round_key;

static void round_destructor(void *arg)
{
    long round = (long)arg;
    if (round < PTHREAD_DESTRUCTOR_ITERATIONS) { /* set again: another round */
        pthread_setspecific(round_key, (void *)(round + 1));
        return;
    }
    char *volatile p = malloc(64); /* this thread's first allocation */
    CHECK(p != NULL, "malloc in the last destructor round failed");
    memset(p, 0x5A, 64);
    free(p);
}

static void *worker_small(void *arg)
{
    char *volatile p = malloc(100);
    CHECK(p != NULL, "malloc failed");
    free(p);
    return arg;
}

static void *set_round_key(void *arg)
{
    (void)arg;
    pthread_setspecific(round_key, (void *)1L);
    return NULL;
}

static void last_round_threads(int hz)
{
    CHECK(pthread_key_create(&round_key, round_destructor) == 0, "pthread_key_create");
    struct hz_stats before;
    if (hz)
        CHECK(hz_test_stats(&before), "hz_stats_get failed");
    long rss0 = hz_test_rss_kib();
    for (unsigned i = 0; i < LAST_ROUND; i++) {
        pthread_t t;
        int rc = pthread_create(&t, NULL, set_round_key, NULL);
        CHECK(rc == 0, "pthread_create failed after %u threads: %s", i, strerror(rc));
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    }
    long rss1 = hz_test_rss_kib();
    printf("%u threads allocating first in the last destructor round: RSS grew %ld KiB\n",
           LAST_ROUND, rss1 - rss0);
    if (!hz)
        return;
    /* A heap left so is taken over by a thread that starts later, once the kernel has
     * let go of its thread: a few ordinary threads, a moment later. */
    hz_test_sleep_ms(100);
    for (unsigned i = 0; i < 16; i++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, worker_small, NULL) == 0, "pthread_create");
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    }
    struct hz_stats st = settled_stats();
    printf("  threads_live %llu, heaps_created %llu (before: %llu)\n",
           (unsigned long long)st.threads_live, (unsigned long long)st.heaps_created,
           (unsigned long long)before.heaps_created);
    CHECK(st.threads_live <= 4, "threads_live is %llu after %u threads that allocated first in "
          "the last destructor round ended", (unsigned long long)st.threads_live, LAST_ROUND);
    CHECK(st.heaps_created - before.heaps_created < 64,
          "%llu heaps made for %u threads, one after the other",
          (unsigned long long)(st.heaps_created - before.heaps_created), LAST_ROUND);
}

int main(void)
{
    int hz = hz_test_require_loaded();
    double t0 = hz_test_now();
    static struct job jobs[CONCURRENT];
    pthread_t tid[CONCURRENT];
    long rss_mark = -1;
    struct hz_stats st_mark;
    int have_stats = 0;

    /* The main thread uses the allocator too. */
    void *mine = malloc(100);
    CHECK(mine != NULL, "malloc failed");

    const unsigned nthreads = hz_test_checked_variant() ? NTHREADS / 4 : NTHREADS;
    for (unsigned done = 0; done < nthreads; done += CONCURRENT) {
        for (unsigned i = 0; i < CONCURRENT; i++) {
            memset(&jobs[i], 0, sizeof jobs[i]);
            jobs[i].index = done + i;
            int rc = pthread_create(&tid[i], NULL, worker, &jobs[i]);
            CHECK(rc == 0, "pthread_create failed after %u threads: %s", done + i, strerror(rc));
        }
        for (unsigned i = 0; i < CONCURRENT; i++) {
            int rc = pthread_join(tid[i], NULL);
            CHECK(rc == 0, "pthread_join: %s", strerror(rc));
        }
        for (unsigned i = 0; i < CONCURRENT; i++) {
            for (unsigned k = 0; k < LEFT; k++) {
                size_t n = jobs[i].left_size[k];
                check_fill((const unsigned char *)jobs[i].left[k], n,
                           fill_of(jobs[i].index, k), "left-over block");
                free(jobs[i].left[k]);
            }
        }
        if (done + CONCURRENT == RSS_MARK) {
            rss_mark = hz_test_rss_kib();
            if (hz)
                have_stats = hz_test_stats(&st_mark);
        }
    }
    free(mine);
    long rss_end = hz_test_rss_kib();
    CHECK(rss_mark > 0 && rss_end > 0, "cannot read RSS");
    printf("%u threads in %.2f s; RSS after %d threads %ld KiB, at the end %ld KiB (growth %ld KiB, "
           "bound %ld KiB)\n",
           nthreads, hz_test_now() - t0, RSS_MARK, rss_mark, rss_end, rss_end - rss_mark,
           RSS_BOUND_KIB);
    CHECK(rss_end - rss_mark < RSS_BOUND_KIB,
          "RSS grew by %ld KiB over %u thread lifetimes (bound %ld KiB): per-thread leak?",
          rss_end - rss_mark, nthreads - RSS_MARK, RSS_BOUND_KIB);

    if (hz) {
        CHECK(have_stats, "hz_stats_get is not available");
        struct hz_stats st = settled_stats();
        uint64_t purged_each = (st.bytes_purged - st_mark.bytes_purged) / (nthreads - RSS_MARK);
        printf("hz_stats: threads_live %llu, heaps_created %llu, heaps_adopted %llu, "
               "bytes_in_use %llu (at mark %llu), live blocks %lld (at mark %lld), "
               "purged %llu KiB per thread\n",
               (unsigned long long)st.threads_live, (unsigned long long)st.heaps_created,
               (unsigned long long)st.heaps_adopted, (unsigned long long)st.bytes_in_use,
               (unsigned long long)st_mark.bytes_in_use, (long long)(st.mallocs - st.frees),
               (long long)(st_mark.mallocs - st_mark.frees), (unsigned long long)purged_each >> 10);
        CHECK(st.threads_live <= 4, "threads_live is %llu after all threads were joined",
              (unsigned long long)st.threads_live);
        /* Threads come 16 at a time, so their heaps' freed pages are wanted again at
         * once: exiting threads must not purge them all (10 MiB per thread did), and a
         * thread must not get pages sized for its heap's last owner (1.3-1.9 MiB). */
        const uint64_t purged_bound =
            hz_test_quarantine_variant() ? PURGED_EACH_BOUND_HARDENED : PURGED_EACH_BOUND;
        if (!hz_test_checked_variant())
            CHECK(purged_each < purged_bound,
                  "%llu KiB purged per thread (bound %llu KiB): exited threads' pages are "
                  "given back and faulted in again by the next threads",
                  (unsigned long long)purged_each >> 10, (unsigned long long)purged_bound >> 10);
        CHECK(st.bytes_in_use < st_mark.bytes_in_use + INUSE_BOUND,
              "bytes_in_use grew from %llu to %llu (bound +%llu)",
              (unsigned long long)st_mark.bytes_in_use, (unsigned long long)st.bytes_in_use,
              (unsigned long long)INUSE_BOUND);
    }
    const unsigned share = hz_test_checked_variant() ? 4 : 1;
    detached_threads(hz, DETACHED / share, 0);
    detached_threads(hz, FREEING / share, 1);
    last_round_threads(hz);
    return 0;
}
