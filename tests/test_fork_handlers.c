/* test_fork_handlers.c - fork with atfork handlers that allocate, registered both
 * before and after the allocator's own, while other threads allocate.
 *
 * A library this program links against (atfork_early.c) registers handlers before the
 * allocator can (its constructor runs first); main registers more after its first
 * malloc.  Every prepare, parent and child handler allocates and frees small, medium
 * and large blocks (large ones take the allocator's global locks).  Three threads
 * allocate and free, partly across threads, while main forks 40 times and one worker
 * forks 20 times; each child allocates, runs a thread that allocates, and exits.  A
 * child alive after 10 s fails the test; alarm(240) catches a parent that hangs (the
 * checked variant, whose poisoning makes every fork copy much of the heap, forks 10
 * times from main).
 */
#include "hz_test.h"

#include <pthread.h>
#include <stdatomic.h>

#define NWORKERS 3
#define NFORKS 40
#define WORKER_FORKS 20
#define CHILD_TIMEOUT_MS 10000

extern atomic_int atfork_early_runs[3];
static atomic_int late_runs[3];
/* main and a worker fork at the same time: a global would be freed twice. */
static _Thread_local void *late_kept;
static atomic_int stop;
static _Atomic(void *) shared[16];
static void *volatile sink; /* keeps the compiler from eliding malloc/free pairs */

static void *touch(size_t n)
{
    char *p = (char *)malloc(n);
    CHECK(p != NULL, "malloc(%zu) failed", n);
    memset(p, 0x33, n < 8192 ? n : 8192);
    sink = p;
    return p;
}

static void churn(void)
{
    void *a = touch(4u << 20), *b = touch(48), *c = touch(70000);
    free(a);
    free(b);
    free(c);
}

static void late_prepare(void)
{
    late_kept = touch(3u << 20);
    churn();
    late_runs[0]++;
}
static void late_parent(void)
{
    free(late_kept);
    churn();
    late_runs[1]++;
}
static void late_child(void)
{
    free(late_kept);
    churn();
    late_runs[2]++;
}

static void *child_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < 200; i++)
        churn();
    return NULL;
}

static void child_body(void)
{
    alarm(20);
    CHECK(atfork_early_runs[2] > 0 && late_runs[2] > 0, "child handlers did not run");
    for (int i = 0; i < 50; i++)
        churn();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, child_thread, NULL) == 0, "child: pthread_create failed");
    pthread_join(t, NULL);
    _exit(0);
}

static void fork_once(const char *who, unsigned round)
{
    pid_t pid = fork();
    CHECK(pid >= 0, "%s: fork failed: %s", who, strerror(errno));
    if (pid == 0)
        child_body();
    int status = hz_test_wait_child(pid, CHILD_TIMEOUT_MS);
    CHECK(status != -1, "%s fork %u: child still alive after %d ms (deadlock after fork?)", who,
          round, CHILD_TIMEOUT_MS);
    CHECK(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "%s fork %u: child failed (status %d)", who, round, status);
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t rng = 77 + id;
    unsigned forks = 0;
    for (uint64_t i = 0; !atomic_load(&stop); i++) {
        size_t r = hz_test_rand(&rng) % 100;
        size_t n = r < 90 ? hz_test_rand_range(&rng, 16, 2048)
                          : r < 98 ? hz_test_rand_range(&rng, 4096, 300000)
                                   : hz_test_rand_range(&rng, 3u << 20, 6u << 20);
        void *p = malloc(n);
        CHECK(p != NULL, "worker: malloc(%zu) failed", n);
        memset(p, (int)id, n < 256 ? n : 256);
        void *old = atomic_exchange(&shared[hz_test_rand(&rng) % 16], p);
        free(old);
        if (id == 0 && forks < WORKER_FORKS && i % 5000 == 4999)
            fork_once("worker", forks++);
    }
    return NULL;
}

int main(void)
{
    hz_test_watchdog(240, "test_fork_handlers (fork or an atfork handler deadlocked)");
    free(touch(16));
    CHECK(pthread_atfork(late_prepare, late_parent, late_child) == 0, "pthread_atfork failed");
    hz_test_require_loaded();
    pthread_t w[NWORKERS];
    for (unsigned i = 0; i < NWORKERS; i++)
        CHECK(pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)i) == 0,
              "pthread_create failed");
    const unsigned nforks = hz_test_checked_variant() ? NFORKS / 4 : NFORKS;
    for (unsigned round = 0; round < nforks; round++) {
        fork_once("main", round);
        hz_test_sleep_ms(5);
    }
    atomic_store(&stop, 1);
    for (unsigned i = 0; i < NWORKERS; i++)
        pthread_join(w[i], NULL);
    for (unsigned i = 0; i < 16; i++)
        free(atomic_exchange(&shared[i], NULL));
    CHECK(atfork_early_runs[0] == atfork_early_runs[1] && atfork_early_runs[0] >= (int)nforks &&
              late_runs[0] == atfork_early_runs[0],
          "handlers ran %d/%d (early) and %d (late) times", atfork_early_runs[0],
          atfork_early_runs[1], late_runs[0]);
    printf("%d forks, every atfork handler allocating, both registration orders\n",
           atfork_early_runs[0]);
    return 0;
}
