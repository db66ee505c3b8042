/* test_fork_signal.c - fork() from a signal handler that interrupted malloc or free,
 * in the same thread or while other threads were inside the allocator, as a crash
 * handler does: the child allocates a little and exits.
 *
 * Phase 1, one thread whose first allocation is a large one (no small allocation
 * before it) and that only allocates large blocks: a profiling timer interrupts it
 * every millisecond of CPU time and the handler forks, 60 times.
 * Phase 2, four threads allocating and freeing blocks of every size, partly across
 * threads: main sends SIGUSR1 to one of them every 3 ms and the handler forks, 120
 * times.
 * Each child allocates small and large blocks and _exits; the handler waits for it.
 * A child alive after 10 s fails the test, and alarm(90) a parent that hangs.
 */
#include "hz_test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/time.h>

#define CHILD_TIMEOUT_MS 10000
#define PHASE1_FORKS 60
#define PHASE2_FORKS 120
#define NWORKERS 4

static atomic_int forks, failures, stop;
static _Atomic(void *) shared[16];

/* The crash handler: fork, let the child allocate a little, wait for it. */
static void fork_from_handler(int sig)
{
    (void)sig;
    int saved = errno;
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20); /* a child that hangs must not outlive the test */
        void *a = malloc(100), *b = malloc(3u << 20), *c = calloc(1, 70000);
        if (a == NULL || b == NULL || c == NULL)
            _exit(3);
        memset(b, 1, 4096);
        free(a);
        free(b);
        free(c);
        _exit(0);
    }
    if (pid > 0) {
        int status = hz_test_wait_child(pid, CHILD_TIMEOUT_MS);
        if (status == -1)
            hz_test_say("FAIL test_fork_signal: child still alive after 10 s (deadlock?)\n");
        if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            atomic_fetch_add(&failures, 1);
        atomic_fetch_add(&forks, 1);
    }
    errno = saved;
}

static void phase1(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fork_from_handler;
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_PROF, &it, NULL);
    void *keep[4] = {0};
    for (unsigned i = 0; atomic_load(&forks) < PHASE1_FORKS; i++) {
        size_t n = (3u << 20) + (i % 5) * (1u << 20);
        void *p = malloc(n);
        if (p == NULL) {
            hz_test_say("FAIL test_fork_signal: large malloc failed\n");
            _exit(1);
        }
        *(volatile char *)p = 1;
        free(keep[i % 4]);
        keep[i % 4] = p;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    for (unsigned i = 0; i < 4; i++)
        free(keep[i]);
}

static void *worker(void *arg)
{
    uint64_t rng = 99 + (uintptr_t)arg;
    while (!atomic_load(&stop)) {
        size_t r = hz_test_rand(&rng) % 100;
        size_t n = r < 85 ? hz_test_rand_range(&rng, 16, 1024)
                          : r < 97 ? hz_test_rand_range(&rng, 2048, 200000)
                                   : hz_test_rand_range(&rng, 3u << 20, 5u << 20);
        void *p = malloc(n);
        CHECK(p != NULL, "malloc(%zu) failed", n);
        memset(p, 7, n < 64 ? n : 64);
        free(atomic_exchange(&shared[hz_test_rand(&rng) % 16], p));
    }
    return NULL;
}

int main(void)
{
    hz_test_watchdog(90, "test_fork_signal (a fork from a signal handler deadlocked)");
    phase1();
    int phase1_forks = atomic_load(&forks);
    CHECK(atomic_load(&failures) == 0, "phase 1: %d of %d children failed", atomic_load(&failures),
          phase1_forks);
    hz_test_require_loaded();

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fork_from_handler;
    sigaction(SIGUSR1, &sa, NULL);
    pthread_t w[NWORKERS];
    for (unsigned i = 0; i < NWORKERS; i++)
        CHECK(pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)i) == 0,
              "pthread_create failed");
    uint64_t rng = 5;
    while (atomic_load(&forks) < phase1_forks + PHASE2_FORKS) {
        pthread_kill(w[hz_test_rand(&rng) % NWORKERS], SIGUSR1);
        hz_test_sleep_ms(3);
    }
    atomic_store(&stop, 1);
    for (unsigned i = 0; i < NWORKERS; i++)
        pthread_join(w[i], NULL);
    for (unsigned i = 0; i < 16; i++)
        free(atomic_exchange(&shared[i], NULL));
    CHECK(atomic_load(&failures) == 0, "%d of %d children failed", atomic_load(&failures),
          atomic_load(&forks));
    printf("%d forks from signal handlers (%d single-threaded, large blocks only), no hang\n",
           atomic_load(&forks), phase1_forks);
    return 0;
}
