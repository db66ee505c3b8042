/* test_sampled.c - blocks the heap profile samples behave as every other block.
 *
 * Run with the library preloaded; it re-executes itself with HAKOZUNA_STATS=1 and
 * HAKOZUNA_PROFILE=2 (a mean of 2 bytes between samples: nearly every allocation is
 * sampled).  A small sample sits in its page past a mark that free recognises, a
 * large or aligned one is a large block; either way malloc_usable_size, realloc (in
 * place and moving), calloc's zeroes (and its one page fault per fresh page), frees
 * from another thread and from a fork child must work as for any block, the profile
 * segment (what hzstat --heap reads) must count the samples and see every one of
 * them freed, and a sample freed twice or through an interior pointer must stop the
 * program with hakozuna's diagnostic.
 * Skips (exit 77) when /dev/shm is not available.
 */
#include "hz_test.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>

#include "../include/hakozuna_prof.h"

static const struct hz_prof_segment *seg;

/* The profile segment, as this process maps it: /dev/shm/hakozuna.[NS.]PID.heap
 * (whose name a process that may change its user id, root's, removes at once). */
static void open_profile(void) {
    char line[512], suffix[32];
    snprintf(suffix, sizeof suffix, ".%ld.heap", (long)getpid());
    FILE *maps = fopen("/proc/self/maps", "r");
    CHECK(maps != NULL, "/proc/self/maps: %s", strerror(errno));
    while (seg == NULL && fgets(line, sizeof line, maps) != NULL) {
        char *path = strstr(line, "/dev/shm/hakozuna.");
        if (path == NULL) continue;
        char *end = strstr(path, suffix);
        if (end == NULL || (end[strlen(suffix)] != '\n' && end[strlen(suffix)] != ' ')) continue;
        seg = (const struct hz_prof_segment *)(uintptr_t)strtoull(line, NULL, 16);
    }
    fclose(maps);
    CHECK(seg != NULL, "no heap profile segment is mapped");
    CHECK(seg->magic == HZ_PROF_MAGIC && seg->sample_rate == 2, "not a profile at rate 2");
}

static uint64_t load(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

/* The traces' counts summed: samples taken (with those in no trace) and freed, and
 * of those, the samples counted by the thread that made their trace (without a
 * locked instruction) and the frees counted by other threads (with one). */
struct sums {
    uint64_t taken, freed, by_writer, freed_by_others;
};

static struct sums sum_traces(void) {
    const char *base = (const char *)seg + seg->header_size;
    struct sums s = {load(&seg->samples_lost), 0, 0, 0};
    for (uint32_t i = 0; i < seg->trace_capacity; i++) {
        const struct hz_prof_trace *t =
            (const struct hz_prof_trace *)(const void *)(base + (size_t)i * seg->trace_size);
        if (load(&t->hash) < 2) continue;
        for (int w = 0; w < 2; w++) {
            s.freed += load(&t->counts[w].freed_count);
            s.taken += load(&t->counts[w].alloc_count);
        }
        if (t->writer != 0) s.by_writer += load(&t->counts[0].alloc_count);
        s.freed_by_others += load(&t->counts[1].freed_count);
    }
    return s;
}

static uint64_t samples_taken(void) { return sum_traces().taken; }

/* Sampled blocks in traces, not yet freed. */
static int64_t live_samples(void) {
    struct sums s = sum_traces();
    return (int64_t)(s.taken - load(&seg->samples_lost) - s.freed);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i * 7);
}

static int same(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 7)) return 0;
    return 1;
}

static const size_t sizes[] = {1, 8, 16, 24, 100, 256, 1000, 2032, 2048, 4000, 8192,
                               20000, 65536, 100000, 1 << 20, (2 << 20) - 16, 3 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* Every call of the malloc family on samples of every size. */
static void use_blocks(void) {
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        unsigned char *p = malloc(n);
        CHECK(p != NULL && ((uintptr_t)p & 15) == 0, "malloc(%zu): %p", n, (void *)p);
        CHECK(malloc_usable_size(p) >= n, "malloc_usable_size of %zu B: %zu", n,
              malloc_usable_size(p));
        memset(p, 0xa5, malloc_usable_size(p)); /* all of it is the caller's */
        fill(p, n, (unsigned)k);
        size_t small = n / 2 + 1;
        unsigned char *q = realloc(p, small);
        CHECK(q != NULL && same(q, small, (unsigned)k), "realloc of %zu B to %zu B", n, small);
        size_t big = 2 * n + 100;
        unsigned char *r = realloc(q, big);
        CHECK(r != NULL && same(r, small, (unsigned)k), "realloc of %zu B to %zu B", small, big);
        CHECK(malloc_usable_size(r) >= big, "usable size after realloc to %zu B", big);
        free(r);

        unsigned char *c = calloc(1, n);
        CHECK(c != NULL, "calloc(1, %zu)", n);
        for (size_t i = 0; i < n; i++) CHECK(c[i] == 0, "calloc(1, %zu): byte %zu is %d", n, i, c[i]);
        free(c);

        void *a = aligned_alloc(64, n);
        CHECK(a != NULL && ((uintptr_t)a & 63) == 0, "aligned_alloc(64, %zu): %p", n, a);
        memset(a, 1, n);
        free(a);
    }
}

/* realloc that keeps a sample in place, where the program never wrote its first
 * bytes and the memory was a free 16-byte block before: what is left there is the
 * program's, however much it looks like a freed block's link. */
static void realloc_unwritten(void) {
    enum { N = 2000 };
    static void *b[N];
    for (int r = 0; r < 8; r++) {
        for (int i = 0; i < N; i++) {
            b[i] = malloc(16);
            CHECK(b[i] != NULL, "malloc(16)");
            memset(b[i], 0x11, 16);
        }
        for (int i = 0; i < N; i++) free(b[i]);
        size_t n = 24 + 16 * (size_t)r;
        for (int i = 0; i < N; i++) {
            b[i] = malloc(n);
            CHECK(b[i] != NULL, "malloc(%zu)", n);
            memset((char *)b[i] + 16, 0x33, n - 16);
        }
        for (int i = 0; i < N; i++) {
            void *q = realloc(b[i], n - 8);
            CHECK(q != NULL, "realloc to %zu", n - 8);
            b[i] = q;
        }
        for (int i = 0; i < N; i++) free(b[i]);
    }
}

enum { CROSS = 2000 };
static void *cross[CROSS];

static int go;

static void *free_all(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE)) usleep(1000);
    for (int i = 0; i < CROSS; i++) free(cross[i]);
    return NULL;
}

/* A forked child that frees must die of abort() with hakozuna's one line. */
static void expect_abort(const char *what, void (*fn)(void)) {
    int pipefd[2];
    CHECK(pipe(pipefd) == 0, "pipe");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dup2(pipefd[1], 2);
        fn();
        _exit(0);
    }
    close(pipefd[1]);
    char buf[512];
    ssize_t got = read(pipefd[0], buf, sizeof buf - 1);
    buf[got > 0 ? got : 0] = '\0';
    close(pipefd[0]);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
          "%s: the child was not stopped by abort() (status %#x)", what, status);
    CHECK(strstr(buf, "hakozuna") != NULL, "%s: no diagnostic on stderr (got \"%s\")", what, buf);
}

static void *volatile keep;

static void double_free(void) {
    void *p = malloc(100);
    keep = p;
    free(p);
    free(keep);
}

static void interior_free(void) {
    keep = malloc(100);
    volatile uintptr_t inside = (uintptr_t)keep + 16;
    free((void *)inside);
}

/* In a child under an address-space cap: requests of 56 B, whose samples come from
 * the next class (no room for the mark in their own), while their own class has
 * free blocks.  Once the next class can get no memory, a sample cannot be had and
 * the request is served from its own class: it succeeds, and must leave errno alone
 * (it once left ENOMEM).  Exit status: 2 setup, 3 errno set by a malloc that
 * succeeded, 4 the cap never bit. */
static int sample_enomem_child(void) {
    enum { N = 40000, MAX = 1 << 20 };
    void **v = mmap(NULL, (N + MAX) * sizeof *v, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED) return 2;
    for (int i = 0; i < N; i++) { /* 40 B: sampled from the class of 56 B */
        if ((v[i] = malloc(40)) == NULL) return 2;
        memset(v[i], 1, 40);
    }
    for (int i = 0; i < N; i++)
        if (i % 4 != 0) free(v[i]);
    size_t vm = hz_test_vm_size();
    if (vm == 0) return 2;
    struct rlimit rl = {vm + ((size_t)2 << 20), RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 2;
    for (int i = N; i < N + MAX; i++) {
        errno = 0;
        if ((v[i] = malloc(56)) == NULL) return 0;
        if (errno != 0) return 3;
        memset(v[i], 2, 56);
    }
    return 4;
}

int main(int argc, char **argv) {
    (void)argc;
    hz_test_rerun_with(argv, "HAKOZUNA_PROFILE", "2");
    open_profile();
    hz_test_calloc_fresh_faults("sampled calloc'd"); /* while the heap is fresh */
    int64_t live0 = live_samples();
    uint64_t samples0 = samples_taken();

    use_blocks();
    realloc_unwritten();
    uint64_t taken = samples_taken() - samples0;
    CHECK(taken >= 4 * NSIZES, "only %llu of at least %zu allocations were sampled",
          (unsigned long long)taken, 4 * NSIZES);
    /* The checked variant's quarantine holds freed blocks back from the core. */
    int exact = !hz_test_checked_variant();
    CHECK(!exact || live_samples() == live0,
          "samples still live after every block was freed: %lld, was %lld",
          (long long)live_samples(), (long long)live0);

    /* Blocks of this thread freed by another: the profile sees them go when they
     * are freed, although this thread, their owner, has not taken them back yet.
     * The thread is made first: what libc allocates for it stays. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_all, NULL) == 0, "pthread_create");
    live0 = live_samples();
    for (int i = 0; i < CROSS; i++) {
        cross[i] = malloc(16 + (size_t)(i % 64) * 40);
        CHECK(cross[i] != NULL, "malloc");
        memset(cross[i], 3, 16);
    }
    CHECK(live_samples() >= live0 + CROSS * 9 / 10, "the blocks for another thread were not sampled");
    struct sums before = sum_traces();
    CHECK(before.by_writer >= CROSS * 9 / 10,
          "this thread's samples were not counted as its traces' writer's (%llu)",
          (unsigned long long)before.by_writer);
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    uint64_t by_others = sum_traces().freed_by_others - before.freed_by_others;
    CHECK(by_others >= CROSS * 9 / 10, "frees by another thread counted as the writer's: %llu",
          (unsigned long long)by_others);
    CHECK(!exact || live_samples() == live0,
          "samples freed by another thread still live: %lld, was %lld",
          (long long)live_samples(), (long long)live0);

    /* A fork child frees samples it inherited; it does not profile. */
    void *inherited[16];
    for (int i = 0; i < 16; i++) inherited[i] = malloc(200 + (size_t)i * 300);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        for (int i = 0; i < 16; i++) free(inherited[i]);
        use_blocks();
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a fork child freeing samples failed (status %#x)", status);
    for (int i = 0; i < 16; i++) free(inherited[i]);

    pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) _exit(sample_enomem_child());
    status = hz_test_wait_child(pid, 120000);
    CHECK(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "sampled requests under an address-space cap: status %#x (exit 3: a malloc that "
          "succeeded set errno; 4: the cap never bit)", (unsigned)status);

    /* What free checks; a library built with --disable-hardening checks none of it
     * (the checked variant all of it, whatever the build). */
    const char *(*config)(void) = (const char *(*)(void))hz_test_sym("hz_config_string");
    if (hz_test_checked_variant() || config == NULL || strstr(config(), "hardening=0") == NULL) {
        expect_abort("a sample freed twice", double_free);
        expect_abort("a sample freed through an interior pointer", interior_free);
    }
    printf("test_sampled: %llu samples taken\n", (unsigned long long)taken);
    return 0;
}
