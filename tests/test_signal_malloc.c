/* test_signal_malloc.c - malloc and free in a signal handler must never deadlock
 * the other threads.
 *
 * Async-signal allocation is not something POSIX promises, and a handler that
 * interrupts the allocator may get NULL; but a handler that re-enters a lock its own
 * thread holds must not spin forever, taking every thread that needs the lock with
 * it.  Four threads allocate and free large blocks (which go through a global lock)
 * and small ones; main sends SIGUSR2 to one of them every 100 us for 1.5 s, and the
 * handler allocates and frees large blocks.  Every thread must keep making progress
 * again within 10 s and finish; alarm(60) catches a hang.
 */
#include "hz_test.h"

#include <pthread.h>
#include <stdatomic.h>

#define NWORKERS 4

static atomic_int stop;
static atomic_long handled, handler_null;
static atomic_long progress[NWORKERS];

static void handler(int sig)
{
    (void)sig;
    int saved = errno;
    void *p = malloc(3u << 20), *q = calloc(1, 5u << 20);
    if (p == NULL || q == NULL)
        atomic_fetch_add(&handler_null, 1);
    free(p);
    free(q);
    atomic_fetch_add(&handled, 1);
    errno = saved;
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t rng = 31 + id;
    void *keep[4] = {0};
    for (unsigned i = 0; !atomic_load(&stop); i++) {
        /* Mostly the same large size, so blocks come from and go to the allocator's
         * cache of large mappings, under its lock, with no system call. */
        size_t n = i % 8 == 0 ? hz_test_rand_range(&rng, 16, 4096) : (3u << 20) + (i % 3) * 4096;
        void *p = malloc(n);
        CHECK(p != NULL, "malloc(%zu) failed", n);
        *(volatile char *)p = 1;
        free(keep[i % 4]);
        keep[i % 4] = p;
        atomic_fetch_add_explicit(&progress[id], 1, memory_order_relaxed);
    }
    for (unsigned k = 0; k < 4; k++)
        free(keep[k]);
    return NULL;
}

int main(void)
{
    hz_test_watchdog(60, "test_signal_malloc (malloc in a signal handler deadlocked)");
    hz_test_require_loaded();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    pthread_t w[NWORKERS];
    for (unsigned i = 0; i < NWORKERS; i++)
        CHECK(pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)i) == 0,
              "pthread_create failed");
    uint64_t rng = 3;
    double t0 = hz_test_now();
    while (hz_test_now() - t0 < 1.5) {
        pthread_kill(w[hz_test_rand(&rng) % NWORKERS], SIGUSR2);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    long before[NWORKERS];
    for (unsigned i = 0; i < NWORKERS; i++)
        before[i] = atomic_load(&progress[i]);
    /* A deadlocked thread never moves again; a busy box may stall one for a while. */
    for (unsigned i = 0; i < NWORKERS; i++) {
        for (int waited = 0; atomic_load(&progress[i]) == before[i]; waited += 10) {
            CHECK(waited < 10000, "thread %u made no progress in 10 s (deadlock)", i);
            hz_test_sleep_ms(10);
        }
    }
    atomic_store(&stop, 1);
    for (unsigned i = 0; i < NWORKERS; i++)
        pthread_join(w[i], NULL);
    printf("%ld signal handlers allocated (%ld got NULL), every thread kept going\n",
           atomic_load(&handled), atomic_load(&handler_null));
    return 0;
}
