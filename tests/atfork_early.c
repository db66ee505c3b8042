/* atfork_early.c - a library that test_fork_handlers links against.  The dynamic
 * loader runs its constructor before those of preloaded libraries, so the atfork
 * handlers it registers come before the allocator's, whenever the allocator registers
 * its own; its first allocation is a large one.  Every handler allocates, small and
 * large (large requests go through the allocator's global locks). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Two threads may fork at once: each keeps its own block between prepare and
 * parent/child, or both would free the one the later prepare kept. */
static _Thread_local void *kept;
atomic_int atfork_early_runs[3]; /* prepare, parent, child */
void *volatile atfork_early_sink; /* keeps the compiler from eliding malloc/free pairs */

static void *touch(size_t n)
{
    char *p = malloc(n);
    if (p)
        memset(p, 0x5a, n < 8192 ? n : 8192);
    atfork_early_sink = p;
    return p;
}

static void churn(void)
{
    void *big = touch(5u << 20), *small = touch(200), *mid = calloc(1, 300000);
    free(big);
    free(small);
    free(mid);
}

static void prepare(void)
{
    kept = touch(3u << 20);
    churn();
    atfork_early_runs[0]++;
}

static void parent(void)
{
    free(kept);
    churn();
    atfork_early_runs[1]++;
}

static void child(void)
{
    free(kept);
    churn();
    atfork_early_runs[2]++;
}

__attribute__((constructor)) static void register_early(void)
{
    pthread_atfork(prepare, parent, child);
    free(touch(3u << 20));
}
