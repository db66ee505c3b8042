/* test_live_threads.c - more than a thousand threads using the allocator at once.
 *
 * 1,100 threads with 64 KiB stacks each allocate a set of blocks, then wait
 * until all of them are alive at the same time.  After that each thread frees
 * the even-numbered blocks of its own and the odd-numbered blocks of its
 * neighbour (cross-thread frees), verifying their contents first.  If the
 * system refuses to create that many threads (EAGAIN), the test is skipped.
 */
#include "hz_test.h"

#include <pthread.h>

#define NTHREADS 1100
#define NBLK 24
#define STACK_SIZE (64 * 1024)

struct tslot {
    unsigned char *blk[NBLK];
    size_t size[NBLK];
};

static struct tslot slots[NTHREADS];

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_arrived = PTHREAD_COND_INITIALIZER;
static pthread_cond_t cv_go = PTHREAD_COND_INITIALIZER;
static unsigned arrived, created;
static int go, abort_run;

static unsigned char val_of(unsigned t, unsigned k)
{
    return (unsigned char)(t * 13 + k * 101 + 5);
}

static void verify_free(unsigned t, unsigned k, const char *who)
{
    unsigned char *p = slots[t].blk[k];
    size_t n = slots[t].size[k];
    unsigned char v = val_of(t, k);
    for (size_t i = 0; i < n; i++)
        CHECK(p[i] == v, "%s: block %u of thread %u damaged at byte %zu", who, k, t, i);
    free(p);
    slots[t].blk[k] = NULL;
}

static void *worker(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    uint64_t rng = 77 + t;
    for (unsigned k = 0; k < NBLK; k++) {
        size_t n = (k % 8 == 7) ? hz_test_rand_range(&rng, 2048, 32768)
                                : hz_test_rand_range(&rng, 1, 400);
        unsigned char *p = (unsigned char *)malloc(n);
        CHECK(p != NULL, "thread %u: malloc(%zu) failed", t, n);
        memset(p, val_of(t, k), n);
        slots[t].blk[k] = p;
        slots[t].size[k] = n;
    }
    /* Churn a little while others start up. */
    for (int i = 0; i < 50; i++) {
        void *p = malloc((size_t)(16 + (i * 37) % 700));
        CHECK(p != NULL, "thread %u: malloc failed", t);
        free(p);
    }

    pthread_mutex_lock(&mu);
    arrived++;
    pthread_cond_signal(&cv_arrived);
    while (!go)
        pthread_cond_wait(&cv_go, &mu);
    int ab = abort_run;
    unsigned n = created;
    pthread_mutex_unlock(&mu);

    if (ab) {
        for (unsigned k = 0; k < NBLK; k++)
            verify_free(t, k, "own");
        return NULL;
    }
    /* Own even blocks, neighbour's odd blocks. */
    for (unsigned k = 0; k < NBLK; k += 2)
        verify_free(t, k, "own");
    unsigned nb = (t + 1) % n;
    for (unsigned k = 1; k < NBLK; k += 2)
        verify_free(nb, k, "neighbour");
    /* A few more allocations after the cross-thread frees. */
    for (int i = 0; i < 20; i++) {
        void *p = malloc((size_t)(8 + i * 24));
        CHECK(p != NULL, "thread %u: malloc failed", t);
        memset(p, 1, (size_t)(8 + i * 24));
        free(p);
    }
    return NULL;
}

int main(void)
{
    int hz = hz_test_require_loaded();
    double t0 = hz_test_now();
    static pthread_t tid[NTHREADS];
    pthread_attr_t attr;
    CHECK(pthread_attr_init(&attr) == 0, "pthread_attr_init failed");
    CHECK(pthread_attr_setstacksize(&attr, STACK_SIZE) == 0, "pthread_attr_setstacksize failed");

    unsigned n = 0;
    int err = 0;
    for (; n < NTHREADS; n++) {
        int rc = pthread_create(&tid[n], &attr, worker, (void *)(uintptr_t)n);
        if (rc != 0) {
            err = rc;
            break;
        }
    }
    pthread_mutex_lock(&mu);
    created = n;
    if (err)
        abort_run = 1;
    else
        while (arrived < n)
            pthread_cond_wait(&cv_arrived, &mu);
    unsigned all_alive = arrived;
    pthread_mutex_unlock(&mu);

    struct hz_stats st;
    int have = hz && !err && hz_test_stats(&st);

    pthread_mutex_lock(&mu);
    go = 1;
    pthread_cond_broadcast(&cv_go);
    pthread_mutex_unlock(&mu);
    for (unsigned i = 0; i < n; i++)
        CHECK(pthread_join(tid[i], NULL) == 0, "pthread_join failed");
    pthread_attr_destroy(&attr);

    if (err == EAGAIN)
        SKIP("only %u threads could be created (EAGAIN: system limit)", n);
    CHECK(err == 0, "pthread_create failed after %u threads: %s", n, strerror(err));

    for (unsigned t = 0; t < n; t++)
        for (unsigned k = 0; k < NBLK; k++)
            CHECK(slots[t].blk[k] == NULL, "block %u of thread %u was not freed", k, t);
    printf("%u threads alive at once, all joined (%.2f s)\n", all_alive, hz_test_now() - t0);
    CHECK(all_alive == NTHREADS, "only %u of %d threads were alive together", all_alive, NTHREADS);
    if (have)
        printf("hz_stats at the barrier: threads_live %llu, heaps_created %llu\n",
               (unsigned long long)st.threads_live, (unsigned long long)st.heaps_created);
    return 0;
}
