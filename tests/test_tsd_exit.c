/* test_tsd_exit.c - thread-specific-data destructors that allocate in every
 * destructor round must not make a thread leave its heap behind.
 *
 * 4,000 threads, 8 at a time.  Each allocates and frees a little, and sets a key
 * (created after the allocator's own) whose destructor frees its block, allocates a
 * new one and sets the key again, for more rounds than the C library runs, so the
 * threads allocate after the allocator's heap destructor in every round, the last
 * included.  Afterwards the mapped bytes and segments must be bounded (a heap and a
 * 4 MiB segment per thread would be 16 GB), and only the main thread may count as
 * live.
 */
#include "hz_test.h"

#include <pthread.h>
#include <stdatomic.h>

#define NTHREADS 4000
#define CONCURRENT 8
#define MAPPED_BOUND ((uint64_t)256 << 20)

struct tsd_block {
    unsigned round;
    unsigned char fill[200];
};

static pthread_key_t key;
static atomic_long destructor_allocs;

static void destructor(void *arg)
{
    struct tsd_block *b = (struct tsd_block *)arg;
    unsigned round = b->round;
    for (unsigned i = 0; i < sizeof b->fill; i++)
        CHECK(b->fill[i] == (unsigned char)round, "destructor block damaged in round %u", round);
    free(b);
    struct tsd_block *n = (struct tsd_block *)malloc(sizeof *n);
    CHECK(n != NULL, "malloc in a destructor failed");
    void *scratch = malloc(3000);
    CHECK(scratch != NULL, "malloc in a destructor failed");
    memset(scratch, 1, 3000);
    free(scratch);
    n->round = round + 1;
    memset(n->fill, (int)(unsigned char)n->round, sizeof n->fill);
    atomic_fetch_add(&destructor_allocs, 1);
    if (n->round < 16)
        pthread_setspecific(key, n);
    else
        free(n);
}

static void *thread_main(void *arg)
{
    (void)arg;
    void *v[32];
    for (unsigned i = 0; i < 32; i++) {
        v[i] = malloc(16 + i * 97);
        CHECK(v[i] != NULL, "malloc failed");
    }
    for (unsigned i = 0; i < 32; i++)
        free(v[i]);
    struct tsd_block *b = (struct tsd_block *)malloc(sizeof *b);
    CHECK(b != NULL, "malloc failed");
    b->round = 0;
    memset(b->fill, 0, sizeof b->fill);
    pthread_setspecific(key, b);
    return NULL;
}

int main(void)
{
    int loaded = hz_test_require_loaded();
    CHECK(pthread_key_create(&key, destructor) == 0, "pthread_key_create failed");
    for (unsigned done = 0; done < NTHREADS; done += CONCURRENT) {
        pthread_t t[CONCURRENT];
        for (unsigned i = 0; i < CONCURRENT; i++)
            CHECK(pthread_create(&t[i], NULL, thread_main, NULL) == 0, "pthread_create failed");
        for (unsigned i = 0; i < CONCURRENT; i++)
            pthread_join(t[i], NULL);
    }
    long allocs = atomic_load(&destructor_allocs);
    CHECK(allocs >= (long)NTHREADS * 2, "destructors allocated only %ld times", allocs);
    if (loaded) {
        struct hz_stats st;
        CHECK(hz_test_stats(&st), "hz_stats_get failed");
        printf("%d threads, %ld destructor allocations: %llu MiB mapped, %llu segments, "
               "%llu heaps made, %llu threads live\n",
               NTHREADS, allocs, (unsigned long long)(st.bytes_mapped >> 20),
               (unsigned long long)st.segments_mapped, (unsigned long long)st.heaps_created,
               (unsigned long long)st.threads_live);
        CHECK(st.bytes_mapped < MAPPED_BOUND, "%llu MiB mapped after %d threads: heaps leak",
              (unsigned long long)(st.bytes_mapped >> 20), NTHREADS);
        CHECK(st.segments_mapped < 64, "%llu segments mapped after %d threads: heaps leak",
              (unsigned long long)st.segments_mapped, NTHREADS);
        CHECK(st.threads_live == 1, "%llu threads live after all joined",
              (unsigned long long)st.threads_live);
    }
    return 0;
}
