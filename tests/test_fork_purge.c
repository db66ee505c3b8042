/* test_fork_purge.c - a fork that interrupts the purge of a cached large mapping.
 *
 * A freed large block's mapping waits in the large cache; after a purge delay, upkeep
 * marks it (so that nothing takes or trims it while the kernel drops its pages),
 * purges it outside the cache's lock, and unmarks it.  A fork from a signal handler
 * that interrupts that purge copies the mark into a child where no thread will ever
 * clear it: unrepaired, the mapping would stay mapped and unusable there for good.
 *
 * The program defines madvise(), which the preloaded library calls by its dynamic
 * symbol (exported with -rdynamic): when the call purges the freed block, it raises
 * SIGUSR1, whose handler forks.  The child, still inside the interrupted purge,
 * must find the mapping given back to it: malloc_trim unmaps it.  Deterministic:
 * the fork always lands mid-purge.  (The hardened variant unmaps a freed large
 * block at once: there it checks that.)
 */
#include "hz_test.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define BIG ((size_t)8 << 20) /* above the medium classes: a mapping of its own */
#define TICK ((size_t)3 << 20) /* another large size: its malloc runs upkeep */

static char *volatile target;
static volatile sig_atomic_t armed, fired, child_status = -1;

/* Whether the page at p is mapped (msync fails with ENOMEM on an unmapped page). */
static int mapped(const void *p)
{
    uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;
    int saved = errno, r = msync((void *)page, 4096, MS_ASYNC);
    errno = saved;
    return r == 0;
}

/* In the child, inside the interrupted purge: with the mark repaired, the mapping
 * is the cache's again and malloc_trim unmaps it; otherwise it stays.  Exit codes:
 * 0 good, 2 not mapped before the trim, 3 left mapped, 4 no memory. */
static int child_checks(void)
{
    if (!mapped(target))
        return 2;
    malloc_trim(0);
    if (mapped(target))
        return 3;
    char *p = (char *)malloc(BIG);
    if (p == NULL)
        return 4;
    memset(p, 7, BIG);
    free(p);
    return 0;
}

static void on_usr1(int sig)
{
    (void)sig;
    pid_t pid = fork();
    if (pid == 0)
        _exit(child_checks());
    int st = 0;
    if (pid > 0 && waitpid(pid, &st, 0) == pid)
        child_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int madvise(void *addr, size_t len, int advice)
{
    char *a = (char *)addr, *t = target;
    if (armed && advice == MADV_DONTNEED && t != NULL && a <= t && t < a + len) {
        armed = 0;
        fired = 1;
        raise(SIGUSR1);
    }
    long r = syscall(SYS_madvise, addr, len, advice);
    return (int)r;
}

int main(void)
{
    if (!hz_test_require_loaded())
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");

    char *p = (char *)malloc(BIG);
    CHECK(p != NULL, "malloc(%zu) failed", BIG);
    memset(p, 1, BIG);
    target = p;
    free(p); /* its mapping goes to the large cache, resident */
    const char *v = getenv("HZ_TEST_VARIANT");
    if (v != NULL && strcmp(v, "hakozuna_hardened") == 0) {
        /* Its large blocks sit between guard pages and are unmapped when freed. */
        CHECK(!mapped(target), "hardened: a freed large block stayed mapped");
        printf("test_fork_purge: hardened keeps no freed mapping to purge: ok\n");
        return 0;
    }
    armed = 1;
    /* Upkeep runs on large-block slow paths once the purge delay has passed. */
    for (int i = 0; i < 250 && !fired; i++) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        void *volatile q = malloc(TICK);
        CHECK(q != NULL, "malloc(%zu) failed", TICK);
        free(q);
    }
    armed = 0;
    CHECK(fired, "the cached mapping of a freed %zu-byte block was not purged within 5 s", BIG);
    CHECK(child_status == 0,
          "fork child mid-purge: %s (status %d)",
          child_status == 3   ? "the mapping being purged stayed marked: malloc_trim left it"
          : child_status == 2 ? "the cached mapping was not mapped"
                              : "failed",
          (int)child_status);
    printf("test_fork_purge: a fork mid-purge gives the child its mapping back: ok\n");
    return 0;
}
