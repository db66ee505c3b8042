/* test_orphan_rss.c - memory freed into an exited thread's heap goes back to the
 * operating system without malloc_trim and without a new thread.
 *
 * A producer thread allocates 256 MiB in 4 KiB blocks, touches them and exits.  The
 * main thread (the consumer) frees 7/8 of them at once, then the rest a few at a
 * time over a second, as a consumer draining a queue does.  Within about a second of
 * the end, RSS must be back below the baseline plus 48 MiB (everything that arrived in
 * the exited thread's inbox collected, its empty pages purged).
 */
#include "hz_test.h"

#include <pthread.h>

#define BLOCK 4096
#define TOTAL ((size_t)256 << 20)
#define NBLOCKS (TOTAL / BLOCK)
#define BOUND_KIB (48L * 1024)

static void **blocks;

static void *producer(void *arg)
{
    (void)arg;
    for (size_t i = 0; i < NBLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        CHECK(blocks[i] != NULL, "producer: malloc failed after %zu blocks", i);
        memset(blocks[i], (int)(i & 0xff), BLOCK);
    }
    return NULL;
}

int main(void)
{
    hz_test_require_loaded();
    long avail = hz_test_mem_available_kib();
    if (avail >= 0 && avail < 1024L * 1024)
        SKIP("MemAvailable %ld KiB < 1 GiB", avail);
    blocks = (void **)calloc(NBLOCKS, sizeof *blocks);
    CHECK(blocks != NULL, "calloc failed");
    long base = hz_test_rss_kib();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, producer, NULL) == 0, "pthread_create failed");
    pthread_join(t, NULL);
    long peak = hz_test_rss_kib();
    CHECK(peak - base > (long)(TOTAL >> 10) / 2, "producer's memory not resident (%ld KiB)",
          peak - base);

    size_t burst = NBLOCKS / 8 * 7;
    for (size_t i = 0; i < burst; i++) {
        CHECK(*(unsigned char *)blocks[i] == (unsigned char)(i & 0xff), "block %zu damaged", i);
        free(blocks[i]);
    }
    /* The rest trickles in over about a second. */
    size_t step = (NBLOCKS - burst) / 100 + 1;
    for (size_t i = burst; i < NBLOCKS; i += step) {
        for (size_t k = i; k < i + step && k < NBLOCKS; k++)
            free(blocks[k]);
        hz_test_sleep_ms(10);
    }
    long rss = hz_test_rss_kib();
    for (int wait = 0; wait < 20 && rss - base > BOUND_KIB; wait++) {
        hz_test_sleep_ms(50);
        rss = hz_test_rss_kib();
    }
    printf("RSS: base %ld MiB, producer's peak %ld MiB, after the consumer freed it %ld MiB\n",
           base >> 10, peak >> 10, rss >> 10);
    CHECK(rss - base <= BOUND_KIB, "RSS still %ld MiB above the baseline: memory freed into the "
          "exited thread's heap was not returned", (rss - base) >> 10);
    free(blocks);
    return 0;
}
