/* stress.c - the long stress run behind `make stress` (not part of `make check`):
 * every phase through the libc names, with the library under test preloaded.
 *
 *   stress [SECONDS] [CHURN_THREADS]
 *
 *   cross     64 threads pass blocks to each other through shared slots; every block
 *             carries a checksum of its contents, verified by the thread that frees it
 *   fork      while those threads run, the main thread forks again and again; each
 *             child allocates, verifies and frees before it exits
 *   tsd/atfork  thread-specific-data destructors and atfork handlers that allocate
 *   churn     CHURN_THREADS threads (100,000 by default), 16 alive at a time, each
 *             allocating, freeing its own and a neighbour's blocks, and exiting
 *   oom       in a child under a squeezed RLIMIT_AS, allocate until malloc fails:
 *             the failures are real mmap failures; the child must get NULL/ENOMEM,
 *             never crash, and allocate again once it has freed
 *
 * Fails (exit 1) on any corruption, on RSS above RSS_LIMIT_MIB after a phase, and on
 * a hang (a watchdog alarm ends the run).  Prints one line per phase.
 */
#include "hz_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define THREADS 64
#define SLOTS 4096
#define RSS_LIMIT_MIB 1024
#define CHURN_ALIVE 16

/* ------------------------------------------------------------ checksums */
/* A block: the length of its pattern and a seed, then the pattern: words derived
 * from both. */
typedef struct {
    size_t size;
    uint64_t seed;
} tag_t;

static uint64_t word_at(uint64_t seed, size_t i) { return (seed + i) * 0x9E3779B97F4A7C15ull; }

/* fill: how many bytes after the tag carry the pattern (the OOM phase only tags). */
static void *make_block_filled(size_t size, uint64_t seed, size_t fill) {
    if (size < sizeof(tag_t)) size = sizeof(tag_t);
    unsigned char *p = malloc(size);
    if (p == NULL) return NULL;
    size_t end = sizeof(tag_t) + fill < size ? sizeof(tag_t) + fill : size;
    tag_t t = {end, seed};
    memcpy(p, &t, sizeof t);
    for (size_t i = sizeof t; i + 8 <= end; i += 8) {
        uint64_t w = word_at(seed, i);
        memcpy(p + i, &w, 8);
    }
    return p;
}

static void *make_block(size_t size, uint64_t seed) { return make_block_filled(size, seed, SIZE_MAX); }

static atomic_ulong corrupted;

static void check_block(const unsigned char *p) {
    tag_t t;
    memcpy(&t, p, sizeof t);
    for (size_t i = sizeof t; i + 8 <= t.size; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w != word_at(t.seed, i)) {
            char m[128];
            int n = snprintf(m, sizeof m, "CORRUPT: block %p of %zu B, byte %zu\n", (void *)p,
                             t.size, i);
            if (write(2, m, (size_t)n) < 0) {
            }
            atomic_fetch_add(&corrupted, 1);
            return;
        }
    }
}

static size_t pick_size(uint64_t *rng) {
    uint64_t r = hz_test_rand(rng);
    switch (r % 16) {
    case 0: return 100000 + (size_t)(r >> 8) % 1000000; /* large */
    case 1: case 2: return (size_t)(r >> 8) % 65536;
    default: return 16 + (size_t)(r >> 8) % 2048;
    }
}

static void free_checked(void *p) {
    if (p == NULL) return;
    check_block(p);
    free(p);
}

/* ---------------------------------------------------------------- cross */
static _Atomic(void *) slots[SLOTS];
static atomic_int stop;
static atomic_ulong ops;

static void *cross_worker(void *arg) {
    uint64_t rng = (uint64_t)(uintptr_t)arg * 7919 + 1;
    unsigned long n = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        void *p = make_block(pick_size(&rng), hz_test_rand(&rng));
        if (p == NULL) {
            atomic_fetch_add(&corrupted, 1);
            break;
        }
        size_t i = (size_t)(hz_test_rand(&rng) % SLOTS);
        free_checked(atomic_exchange(&slots[i], p)); /* mostly another thread's block */
        n++;
    }
    atomic_fetch_add(&ops, n);
    return NULL;
}

/* ----------------------------------------------------------- tsd, atfork */
static pthread_key_t key;
static atomic_ulong tsd_rounds;

/* Allocates in every destructor round it is given, and asks for another. */
static void tsd_destructor(void *v) {
    uintptr_t round = (uintptr_t)v;
    free(make_block(1000 + round, round));
    atomic_fetch_add(&tsd_rounds, 1);
    if (round < 3) pthread_setspecific(key, (void *)(round + 1));
}

static void *atfork_block;
static void atfork_prepare(void) { atfork_block = make_block(333, 1); }
static void atfork_parent(void) { free_checked(atfork_block); }
static void atfork_child(void) { free_checked(atfork_block); }

/* ----------------------------------------------------------------- fork */
static int forks_done;

static void fork_once(void) {
    pid_t pid = fork();
    if (pid < 0) {
        hz_test_sleep_ms(1);
        return;
    }
    if (pid == 0) {
        alarm(30);
        uint64_t rng = (uint64_t)getpid();
        void *keep[64];
        for (int i = 0; i < 64; i++) keep[i] = make_block(pick_size(&rng) % 5000, (uint64_t)i);
        for (int i = 0; i < 64; i++) free_checked(keep[i]);
        _exit(atomic_load(&corrupted) ? 3 : 0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL: fork child: status %#x\n", status);
        atomic_fetch_add(&corrupted, 1);
    }
    forks_done++;
}

/* ---------------------------------------------------------------- churn */
static void *churn_worker(void *arg) {
    _Atomic(void *) *mine = arg;
    uint64_t rng = (uint64_t)(uintptr_t)arg;
    pthread_setspecific(key, (void *)1);
    void *local[8];
    for (int i = 0; i < 8; i++) local[i] = make_block(16 + hz_test_rand(&rng) % 600, (uint64_t)i);
    for (int i = 0; i < 8; i++) free_checked(local[i]);
    /* Leave a block for the next thread in this place, free the previous one's. */
    free_checked(atomic_exchange(mine, make_block(64 + hz_test_rand(&rng) % 4000, rng)));
    return NULL;
}

static void churn(unsigned long total) {
    static _Atomic(void *) places[CHURN_ALIVE];
    pthread_t t[CHURN_ALIVE];
    for (unsigned long done = 0; done < total; done += CHURN_ALIVE) {
        for (int i = 0; i < CHURN_ALIVE; i++)
            CHECK(pthread_create(&t[i], NULL, churn_worker, (void *)&places[i]) == 0,
                  "pthread_create (thread %lu)", done + (unsigned long)i);
        for (int i = 0; i < CHURN_ALIVE; i++) pthread_join(t[i], NULL);
    }
    for (int i = 0; i < CHURN_ALIVE; i++) free_checked(atomic_exchange(&places[i], NULL));
}

/* ------------------------------------------------------------------ oom */
/* In a child: cap the address space a little above what is mapped now, allocate
 * until malloc fails, free, allocate again. */
static void oom_child(void) {
    alarm(60);
    size_t vm = hz_test_vm_size();
    if (vm == 0) _exit(2);
    rlim_t cap = (rlim_t)vm + ((rlim_t)256 << 20);
    struct rlimit rl = {cap, cap};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(2);
    enum { MAX = 1 << 16 };
    static void *held[MAX];
    uint64_t rng = 5;
    int n = 0, failures = 0;
    for (int round = 0; round < 3; round++) {
        while (n < MAX) {
            size_t size = hz_test_rand(&rng) % 4 == 0 ? 3000000 : pick_size(&rng);
            errno = 0;
            void *p = make_block_filled(size, (uint64_t)n, 64);
            if (p == NULL) {
                if (errno != ENOMEM) _exit(4);
                failures++;
                break;
            }
            held[n++] = p;
        }
        if (n == MAX) _exit(5); /* the squeeze did not bite */
        while (n > 0) free_checked(held[--n]);
        void *again = make_block(100000, 1);
        if (again == NULL) _exit(6);
        free_checked(again);
    }
    _exit(failures == 3 && atomic_load(&corrupted) == 0 ? 0 : 7);
}

static void oom(void) {
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) oom_child();
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "oom child: status %#x (exit 4: errno not ENOMEM, 5: never failed, 6: no "
          "recovery, 7: corruption; a signal: crashed)", status);
}

/* ----------------------------------------------------------------- main */
static double t0;

static void phase(const char *name, const char *detail) {
    long rss = hz_test_rss_kib();
    printf("%-6s %7.1f s  rss %6ld MiB  %s\n", name, hz_test_now() - t0, rss / 1024, detail);
    fflush(stdout);
    CHECK(atomic_load(&corrupted) == 0, "%s: %lu corrupted blocks", name, atomic_load(&corrupted));
    CHECK(rss / 1024 < RSS_LIMIT_MIB, "%s: RSS %ld MiB above %d MiB", name, rss / 1024,
          RSS_LIMIT_MIB);
}

int main(int argc, char **argv) {
    int seconds = argc > 1 ? atoi(argv[1]) : 30;
    unsigned long churn_threads = argc > 2 ? strtoul(argv[2], NULL, 10) : 100000;
    hz_test_require_loaded();
    alarm((unsigned)seconds * 4 + 600); /* a hang ends the run (SIGALRM) */
    t0 = hz_test_now();
    CHECK(pthread_key_create(&key, tsd_destructor) == 0, "pthread_key_create");
    CHECK(pthread_atfork(atfork_prepare, atfork_parent, atfork_child) == 0, "pthread_atfork");

    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, cross_worker, (void *)(uintptr_t)(i + 1)) == 0,
              "pthread_create");
    double end = hz_test_now() + seconds;
    while (hz_test_now() < end) fork_once();
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < SLOTS; i++) free_checked(atomic_exchange(&slots[i], NULL));
    char d[160];
    snprintf(d, sizeof d, "%d threads, %lu checked blocks, %d forks from the threaded parent",
             THREADS, atomic_load(&ops), forks_done);
    phase("cross", d);

    churn(churn_threads);
    snprintf(d, sizeof d, "%lu threads, 16 alive at a time; %lu allocating TSD destructor rounds",
             churn_threads, atomic_load(&tsd_rounds));
    phase("churn", d);
    CHECK(atomic_load(&tsd_rounds) >= churn_threads * 3, "TSD destructors did not all run");

    oom();
    phase("oom", "RLIMIT_AS squeeze: malloc failed with ENOMEM, recovered, 3 rounds");
    printf("stress: no corruption, RSS below %d MiB, no hang (%.1f s)\n", RSS_LIMIT_MIB,
           hz_test_now() - t0);
    return 0;
}
