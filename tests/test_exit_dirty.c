/* test_exit_dirty.c - the allowance of freed memory that exited threads' heaps keep
 * resident must come back once that memory is purged.
 *
 * Six threads each free 12 MiB and exit together, filling the allowance (16 MiB
 * by default); malloc_trim then purges all of it.  One more thread frees 12 MiB and
 * exits: with the allowance restored its heap keeps that memory for the next thread
 * (no purge at exit); with the allowance still counted as full, it purges at exit.
 * The process-wide gauge of freed, unpurged page memory (hz_stats.bytes_dirty, which
 * hzstat shows) follows: most of a kept 12 MiB, then 0 after malloc_trim.
 *
 * Then one more thread frees 12 MiB, spread over several segments, and exits: its
 * heap keeps one segment and offers the others, still resident, to any heap.  The
 * main thread, whose own heap has no room, then allocates 8 MiB: it must take those
 * segments and map no new one.  Left alone instead, they are purged once they have
 * waited a purge delay or two, with the heap's own, by whichever thread passes a
 * slow path then.
 */
#include "hz_test.h"

#include <malloc.h>
#include <pthread.h>

#define NTHREADS 6
#define BLOCK 60000
#define PER_THREAD ((size_t)12 << 20)
/* Of a heap's freed 12 MiB, all but its current page (at most 1 MiB) retire. */
#define MIN_KEPT ((uint64_t)10 << 20)

static pthread_barrier_t all_freed, go_exit;

/* bytes in blocks of BLOCK, written; *n of them. */
static void **take(size_t bytes, size_t *n)
{
    *n = bytes / BLOCK;
    void **v = (void **)malloc(*n * sizeof *v);
    CHECK(v != NULL, "malloc failed");
    for (size_t i = 0; i < *n; i++) {
        v[i] = malloc(BLOCK);
        CHECK(v[i] != NULL, "malloc failed");
        memset(v[i], 3, BLOCK);
    }
    return v;
}

static void give_back(void **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void free_12mib(void)
{
    size_t n;
    void **v = take(PER_THREAD, &n);
    give_back(v, n);
}

static void *exiter(void *arg)
{
    (void)arg;
    free_12mib();
    return NULL;
}

static void *filler(void *arg)
{
    (void)arg;
    free_12mib();
    pthread_barrier_wait(&all_freed);
    return NULL;
}

static void *last(void *arg)
{
    (void)arg;
    free_12mib();
    pthread_barrier_wait(&all_freed);
    pthread_barrier_wait(&go_exit);
    return NULL;
}

int main(void)
{
    if (!hz_test_require_loaded())
        return 0;
    pthread_barrier_init(&all_freed, NULL, NTHREADS + 1);
    pthread_t t[NTHREADS];
    for (unsigned i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&t[i], NULL, filler, NULL) == 0, "pthread_create failed");
    pthread_barrier_wait(&all_freed);
    for (unsigned i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    struct hz_stats kept, trimmed;
    CHECK(hz_test_stats(&kept), "hz_stats_get failed");
    malloc_trim(0);
    CHECK(hz_test_stats(&trimmed), "hz_stats_get failed");
    printf("dirty bytes: %llu KiB kept by the exited threads' heaps, %llu KiB after "
           "malloc_trim\n", (unsigned long long)(kept.bytes_dirty >> 10),
           (unsigned long long)(trimmed.bytes_dirty >> 10));
    /* The checked variant's quarantine is the process's: blocks that leave it later
     * reach their pages as other threads' frees, whenever those come. */
    CHECK(hz_test_checked_variant() || kept.bytes_dirty >= MIN_KEPT, "the heaps kept %llu "
          "KiB, the gauge says: an abandoned heap keeps up to 16 MiB",
          (unsigned long long)(kept.bytes_dirty >> 10));
    CHECK(trimmed.bytes_dirty == 0, "%llu KiB still dirty after malloc_trim",
          (unsigned long long)(trimmed.bytes_dirty >> 10));

    pthread_barrier_init(&all_freed, NULL, 2);
    pthread_barrier_init(&go_exit, NULL, 2);
    pthread_t l;
    CHECK(pthread_create(&l, NULL, last, NULL) == 0, "pthread_create failed");
    pthread_barrier_wait(&all_freed);
    struct hz_stats before, after;
    CHECK(hz_test_stats(&before), "hz_stats_get failed");
    /* A quarantine holds the blocks back until the thread exits. */
    CHECK(hz_test_quarantine_variant() || before.bytes_dirty >= MIN_KEPT,
          "a thread freed 12 MiB, yet %llu KiB are dirty",
          (unsigned long long)(before.bytes_dirty >> 10));
    pthread_barrier_wait(&go_exit);
    pthread_join(l, NULL);
    CHECK(hz_test_stats(&after), "hz_stats_get failed");
    uint64_t purged = after.bytes_purged - before.bytes_purged;
    printf("purged at the last thread's exit: %llu KiB\n", (unsigned long long)(purged >> 10));
    CHECK(purged < (4u << 20), "the exiting thread purged %llu KiB: the abandoned heaps' "
          "allowance was not restored by the purge", (unsigned long long)(purged >> 10));

    malloc_trim(0);
    CHECK(pthread_create(&l, NULL, exiter, NULL) == 0, "pthread_create failed");
    pthread_join(l, NULL);
    struct hz_stats exited, reused;
    CHECK(hz_test_stats(&exited), "hz_stats_get failed");
    size_t n;
    void **v = take((size_t)8 << 20, &n);
    CHECK(hz_test_stats(&reused), "hz_stats_get failed");
    give_back(v, n);
    printf("segments mapped: %llu after the thread's exit, %llu after 8 MiB more in the "
           "main thread\n", (unsigned long long)exited.segments_mapped,
           (unsigned long long)reused.segments_mapped);
    CHECK(hz_test_checked_variant() || reused.segments_mapped <= exited.segments_mapped,
          "the main thread mapped %llu new segments while an exited thread's empty ones "
          "sat idle", (unsigned long long)(reused.segments_mapped - exited.segments_mapped));

    malloc_trim(0);
    CHECK(pthread_create(&l, NULL, exiter, NULL) == 0, "pthread_create failed");
    pthread_join(l, NULL);
    struct hz_stats left, aged;
    CHECK(hz_test_stats(&left), "hz_stats_get failed");
    /* Two purge epochs (50 ms each by default), each ended by a slow path: a large
     * block, which leaves no freed page memory of its own.  The cached segments go at
     * the first, the heap's own units (candidates at the first) at the second. */
    for (int round = 0; round < 2; round++) {
        hz_test_sleep_ms(120);
        void *volatile big = malloc((size_t)3 << 20); /* volatile: not optimised away */
        free(big);
    }
    CHECK(hz_test_stats(&aged), "hz_stats_get failed");
    printf("dirty bytes: %llu KiB after the thread's exit, %llu KiB 240 ms later\n",
           (unsigned long long)(left.bytes_dirty >> 10), (unsigned long long)(aged.bytes_dirty >> 10));
    CHECK(hz_test_checked_variant() || left.bytes_dirty >= MIN_KEPT,
          "the exited thread's heap and segments kept %llu KiB",
          (unsigned long long)(left.bytes_dirty >> 10));
    CHECK(aged.bytes_dirty < (1u << 20), "%llu KiB of an exited thread's memory still "
          "resident two purge delays later", (unsigned long long)(aged.bytes_dirty >> 10));
    return 0;
}
