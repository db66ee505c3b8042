/* test_orphan_rss.c - memory freed into exited threads' heaps goes back to the
 * operating system without malloc_trim and without a new thread.
 *
 * trickle: a producer thread allocates 256 MiB in 4 KiB blocks, touches them and
 * exits.  The main thread (the consumer) frees 7/8 of them at once, then the rest a
 * few at a time over a second, as a consumer draining a queue does.  Within about a
 * second of the end, RSS must be back below the baseline plus 48 MiB (everything
 * that arrived in the exited thread's inbox collected, its empty pages purged).
 *
 * burst: eight producers allocate 24 MiB each and exit; the main thread frees all
 * of it at once and then, once, allocates a block of a size it never used (a slow
 * path, which collects what was freed into heaps nobody owns).  The heaps of exited
 * threads keep at most the abandoned budget (16 MiB by default) of freed memory
 * resident between them, however their pages emptied: that one pass purges the rest.
 * Nothing else runs in the allocator before RSS is read a quarter of a second later,
 * so memory left for a later timed purge is still counted.
 */
#include "hz_test.h"

#include <pthread.h>

#define BLOCK 4096
#define BOUND_KIB (48L * 1024)

struct batch {
    void **blocks;
    size_t n;
};

static void *producer(void *arg)
{
    struct batch *b = arg;
    for (size_t i = 0; i < b->n; i++) {
        b->blocks[i] = malloc(BLOCK);
        CHECK(b->blocks[i] != NULL, "producer: malloc failed after %zu blocks", i);
        memset(b->blocks[i], (int)(i & 0xff), BLOCK);
    }
    return NULL;
}

/* Each batch filled by a thread of its own, which has exited on return. */
static void produce(struct batch *b, int threads)
{
    pthread_t t[threads];
    for (int i = 0; i < threads; i++)
        CHECK(pthread_create(&t[i], NULL, producer, &b[i]) == 0, "pthread_create failed");
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
}

static void free_checked(struct batch *b, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        CHECK(*(unsigned char *)b->blocks[i] == (unsigned char)(i & 0xff), "block %zu damaged", i);
        free(b->blocks[i]);
    }
}

static void trickle(void)
{
    struct batch b = {.n = ((size_t)256 << 20) / BLOCK};
    b.blocks = (void **)calloc(b.n, sizeof *b.blocks);
    CHECK(b.blocks != NULL, "calloc failed");
    long base = hz_test_rss_kib();
    produce(&b, 1);
    long peak = hz_test_rss_kib();
    CHECK(peak - base > (long)(b.n * BLOCK >> 10) / 2, "producer's memory not resident (%ld KiB)",
          peak - base);

    size_t burst = b.n / 8 * 7;
    free_checked(&b, 0, burst);
    /* The rest trickles in over about a second. */
    size_t step = (b.n - burst) / 100 + 1;
    for (size_t i = burst; i < b.n; i += step) {
        free_checked(&b, i, i + step < b.n ? i + step : b.n);
        hz_test_sleep_ms(10);
    }
    long rss = hz_test_rss_kib();
    for (int wait = 0; wait < 20 && rss - base > BOUND_KIB; wait++) {
        hz_test_sleep_ms(50);
        rss = hz_test_rss_kib();
    }
    printf("trickle: RSS base %ld MiB, producer's peak %ld MiB, after the consumer freed it "
           "%ld MiB\n", base >> 10, peak >> 10, rss >> 10);
    CHECK(rss - base <= BOUND_KIB, "RSS still %ld MiB above the baseline: memory freed into the "
          "exited thread's heap was not returned", (rss - base) >> 10);
    free(b.blocks);
}

#define PRODUCERS 8

static void burst(void)
{
    struct batch b[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        b[i].n = ((size_t)24 << 20) / BLOCK;
        b[i].blocks = (void **)calloc(b[i].n, sizeof *b[i].blocks);
        CHECK(b[i].blocks != NULL, "calloc failed");
    }
    long base = hz_test_rss_kib();
    produce(b, PRODUCERS);
    long peak = hz_test_rss_kib();
    for (int i = 0; i < PRODUCERS; i++) free_checked(&b[i], 0, b[i].n);
    /* Long enough for any upkeep the frees asked for to be due (the purge delay is
     * 50 ms by default, the collection of such frees a quarter of it). */
    hz_test_sleep_ms(100);
    void *p = malloc(3000);
    CHECK(p != NULL, "malloc(3000) failed");
    free(p);
    hz_test_sleep_ms(250);
    long rss = hz_test_rss_kib();
    printf("burst: RSS base %ld MiB, %d producers' peak %ld MiB, after the frees and one slow "
           "path %ld MiB\n", base >> 10, PRODUCERS, peak >> 10, rss >> 10);
    CHECK(peak - base > (long)(PRODUCERS * b[0].n * BLOCK >> 10) / 2,
          "producers' memory not resident (%ld KiB)", peak - base);
    CHECK(rss - base <= BOUND_KIB, "RSS still %ld MiB above the baseline: the heaps of exited "
          "threads kept more freed memory than their budget", (rss - base) >> 10);
    for (int i = 0; i < PRODUCERS; i++) free(b[i].blocks);
}

int main(void)
{
    hz_test_require_loaded();
    long avail = hz_test_mem_available_kib();
    if (avail >= 0 && avail < 1024L * 1024)
        SKIP("MemAvailable %ld KiB < 1 GiB", avail);
    printf("RSS of the process before the cases: %ld MiB\n", hz_test_rss_kib() >> 10);
    burst();
    trickle();
    return 0;
}
