/* test_fork_purge.c - a fork that interrupts the purge of a cached mapping.
 *
 * Freed memory that no heap holds waits in a process-wide cache: large blocks'
 * mappings, and the empty segments an exiting thread's heap gives up.  After a
 * purge delay, upkeep marks an entry (so that nothing takes or trims it while the
 * kernel drops its pages), purges it outside the cache's lock, and unmarks it.  A
 * fork from a signal handler that interrupts that purge copies the mark into a child
 * where no thread will ever clear it: unrepaired, the entry would stay mapped and
 * unusable there for good.
 *
 * The program defines madvise() and mmap(), which the preloaded library calls by
 * their dynamic symbols (exported with -rdynamic): when the purge reaches the
 * watched memory, the call raises SIGUSR1, whose handler forks.  The child, still
 * inside the interrupted purge, must find the entry given back to the cache:
 * malloc_trim unmaps it.  Deterministic: the fork always lands mid-purge.  Two
 * rounds: a freed large block's mapping (purged with madvise), then the segments of
 * an exited thread's heap (given back with mmap, then madvise).  (The hardened
 * variant unmaps a freed large block at once: there the first round checks that.
 * The checked variant's quarantine leaves no segment of the thread empty: it runs
 * the first round only.)
 */
#include "hz_test.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define BIG ((size_t)8 << 20)  /* above the medium classes: a mapping of its own */
#define TICK ((size_t)3 << 20) /* another large size: its malloc runs upkeep */
#define BLOCK 60000            /* the exiting thread's blocks, */
#define THREAD_BYTES ((size_t)12 << 20) /* spread over several segments */
#define MAX_WATCH (THREAD_BYTES / BLOCK + 1)

#include "types.h" /* the knobs, as the library was built: the caches, the delay */
#define WAIT_MS (5000 + 4 * HZ_PURGE_DELAY_MS)

/* The memory whose purge is interrupted: any of these addresses. */
static char *volatile watch[MAX_WATCH];
static volatile size_t n_watch;
static char *volatile hit; /* the watched address the purge reached */
static volatile sig_atomic_t armed, fired, child_status = -1;

/* Whether the page at p is mapped (msync fails with ENOMEM on an unmapped page). */
static int mapped(const void *p)
{
    uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;
    int saved = errno, r = msync((void *)page, 4096, MS_ASYNC);
    errno = saved;
    return r == 0;
}

/* In the child, inside the interrupted purge: with the mark repaired, the entry is
 * the cache's again and malloc_trim unmaps it; otherwise it stays.  Exit codes:
 * 0 good, 2 not mapped before the trim, 3 left mapped, 4 no memory. */
static int child_checks(void)
{
    if (!mapped(hit))
        return 2;
    malloc_trim(0);
    if (mapped(hit))
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

/* The purge of [addr, addr + len) is about to start: fork there if it is watched. */
static void purging(void *addr, size_t len)
{
    if (!armed)
        return;
    char *a = (char *)addr;
    for (size_t i = 0; i < n_watch; i++) {
        char *w = watch[i];
        if (a <= w && w < a + len) {
            armed = 0;
            fired = 1;
            hit = w;
            raise(SIGUSR1);
            return;
        }
    }
}

int madvise(void *addr, size_t len, int advice)
{
    if (advice == MADV_DONTNEED)
        purging(addr, len);
    return (int)syscall(SYS_madvise, addr, len, advice);
}

/* A segment's units are given back by mapping them anew, inaccessible, in place. */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (prot == PROT_NONE && (flags & MAP_FIXED))
        purging(addr, len);
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/* Runs slow paths until the watched memory's purge has been interrupted; the
 * child's verdict then. */
static void interrupt_purge(const char *what)
{
    fired = 0;
    child_status = -1;
    armed = 1;
    /* Upkeep runs on large-block slow paths once the purge delay has passed. */
    for (int i = 0; i < WAIT_MS / 20 && !fired; i++) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        void *volatile q = malloc(TICK);
        CHECK(q != NULL, "malloc(%zu) failed", TICK);
        free(q);
    }
    armed = 0;
    CHECK(fired, "%s: not purged within %d ms", what, WAIT_MS);
    CHECK(child_status == 0, "%s: fork child mid-purge: %s (status %d)", what,
          child_status == 3   ? "the entry being purged stayed marked: malloc_trim left it"
          : child_status == 2 ? "the cached memory was not mapped"
                              : "failed",
          (int)child_status);
}

static void *exiting_thread(void *arg)
{
    (void)arg;
    size_t n = 0;
    while (n + 1 < MAX_WATCH) {
        char *b = (char *)malloc(BLOCK);
        CHECK(b != NULL, "malloc(%d) failed", BLOCK);
        memset(b, 3, BLOCK);
        watch[n++] = b;
    }
    for (size_t i = 0; i < n; i++)
        free(watch[i]);
    n_watch = n;
    return NULL; /* its heap keeps one segment and caches the others */
}

static pthread_mutex_t hold = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t adopted;

/* Takes the exited thread's heap and keeps it, idle, so that no heap's own upkeep
 * purges in its segments: only the cache's does. */
static void *adopting_thread(void *arg)
{
    (void)arg;
    void *volatile p = malloc(64);
    pthread_barrier_wait(&adopted);
    pthread_mutex_lock(&hold);
    pthread_mutex_unlock(&hold);
    free(p);
    return NULL;
}

int main(void)
{
    if (!hz_test_require_loaded())
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");

    /* A large block's mapping. */
    char *p = (char *)malloc(BIG);
    CHECK(p != NULL, "malloc(%zu) failed", BIG);
    memset(p, 1, BIG);
    static volatile uintptr_t freed_at; /* an address to watch, never dereferenced */
    freed_at = (uintptr_t)p;
    free(p); /* its mapping goes to the large cache, resident */
    char *at = (char *)freed_at;
    if (HZ_PURGE_DELAY_MS == 0 || HZ_LARGE_CACHE_BYTES < ((size_t)16 << 20)) {
        printf("test_fork_purge: this build keeps no %zu-byte mapping for a later purge\n", BIG);
    } else if (hz_test_hardened_variant()) {
        /* Its large blocks sit between guard pages and are unmapped when freed. */
        CHECK(!mapped(at), "hardened: a freed large block stayed mapped");
        printf("test_fork_purge: hardened keeps no freed large mapping: ok\n");
    } else {
        watch[0] = at;
        n_watch = 1;
        interrupt_purge("a large block's cached mapping");
        printf("test_fork_purge: large mapping: ok\n");
    }

    /* An exited thread's segments. */
    if (HZ_PURGE_DELAY_MS == 0 || HZ_SEGMENT_CACHE == 0 || HZ_DIRTY_BUDGET < ((size_t)8 << 20)) {
        printf("test_fork_purge: this build caches no resident segment\n");
        return 0;
    }
    if (hz_test_checked_variant()) {
        /* Its quarantine holds freed blocks back: no segment of the thread is empty. */
        printf("test_fork_purge: the checked variant caches no segment of an exiting thread\n");
        return 0;
    }
    n_watch = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, exiting_thread, NULL) == 0, "pthread_create");
    pthread_join(t, NULL);
    pthread_barrier_init(&adopted, NULL, 2);
    pthread_mutex_lock(&hold);
    CHECK(pthread_create(&t, NULL, adopting_thread, NULL) == 0, "pthread_create");
    pthread_barrier_wait(&adopted);
    interrupt_purge("an exited thread's cached segment");
    pthread_mutex_unlock(&hold);
    pthread_join(t, NULL);
    printf("test_fork_purge: a fork mid-purge gives the child the cached memory back: ok\n");
    return 0;
}
