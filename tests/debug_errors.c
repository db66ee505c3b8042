/* debug_errors.c - commits one heap error, chosen by name, for the checked variant
 * (libhakozuna_debug.so) to catch:
 *
 *     debug_errors MODE [small]
 *
 *   double-free          free the same block twice
 *   interior-free        free a pointer into the middle of a block
 *   interior-usable      malloc_usable_size of a pointer into the middle of a block
 *   never-allocated      free a pointer into hakozuna's memory that no malloc returned
 *   overrun              write one byte past a block, then free it
 *   overrun-realloc      write past a block, then realloc it
 *   write-after-free     write into a freed block, then allocate its size again
 *   write-after-free-first  the same into the only block out of a fresh page
 *   freed-header-write   overwrite the 16 bytes before a freed block, then allocate
 *   freed-mark-write     overwrite the 8 bytes before a freed block and a byte in it
 *   freed-link-write     overwrite the first 8 of those 16 long after the free
 *   static-free          free a pointer into a static buffer
 *   free-sized-mismatch  free_sized with a size other than the one allocated
 *   aligned-mismatch     free_aligned_sized with another alignment than requested
 *   foreign-free         free a pointer into an mmap region
 *   clean                a correct workload: many sizes, large and aligned blocks,
 *                        realloc, calloc, threads freeing each other's blocks, a
 *                        span of one class reused by another; it also checks the
 *                        checked variant's rule that malloc_usable_size is the
 *                        size asked for
 *
 * Error modes never return normally under the checked variant (it aborts); if one
 * does, the program says so on stdout and exits 3.  After a write to freed memory
 * the modes allocate and free until any quarantine has given the block back.
 * "clean" exits 0 and prints nothing on stderr.  "small" shortens "clean" (for valgrind).
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef void (*free_sized_fn)(void *, size_t);
typedef void (*free_aligned_sized_fn)(void *, size_t, size_t);

/* Keeps the compiler from reasoning about where a pointer came from or went. */
static void *launder(void *p) {
    void *volatile v = p;
    return v;
}

/* Writes the compiler cannot drop, even right before a free. */
static void poke(void *p, int c, size_t n) {
    volatile unsigned char *v = p;
    for (size_t i = 0; i < n; i++) v[i] = (unsigned char)c;
}

static void *sym(const char *name) {
    void *s = dlsym(RTLD_DEFAULT, name);
    if (s == NULL) {
        printf("debug_errors: %s is not available (is the library preloaded?)\n", name);
        exit(2);
    }
    return s;
}

static int survived(const char *mode) {
    printf("debug_errors: %s was not detected\n", mode);
    return 3;
}

/* ------------------------------------------------------------------ errors */
static int double_free(void) {
    char *p = launder(malloc(40));
    char *again = launder(p);
    poke(p, 1, 40);
    free(p);
    free(again);
    return survived("double-free");
}

static int interior_free(void) {
    char *p = launder(malloc(64));
    poke(p, 1, 64);
    free(launder(p + 16));
    return survived("interior-free");
}

static int interior_usable(void) {
    char *p = launder(malloc(64));
    poke(p, 1, 64);
    size_t u = malloc_usable_size(launder(p + 16));
    printf("malloc_usable_size(p + 16) = %zu\n", u);
    return survived("interior-usable");
}

static int never_allocated(void) {
    /* Blocks of this size come four at a time from a fresh page: eight blocks on,
     * the memory is hakozuna's but was never handed out. */
    char *p = launder(malloc(5000));
    poke(p, 1, 5000);
    free(launder(p + 8 * 5120));
    return survived("never-allocated");
}

static int overrun(void) {
    char *p = launder(malloc(20));
    poke(p, 'x', 21);
    free(p);
    return survived("overrun");
}

static int overrun_realloc(void) {
    char *p = launder(malloc(100));
    poke(p, 'y', 100);
    poke(p + 103, 0, 1);
    char *q = realloc(p, 1000);
    free(q);
    return survived("overrun-realloc");
}

/* Allocate and free blocks of another size, many more than a quarantine holds. */
static void cycle_blocks(void) {
    for (int i = 0; i < 100000; i++) free(launder(malloc(64)));
}

static int write_after_free(void) {
    /* A neighbour stays allocated: the first block of a page that has nothing else
     * out is taken for the start of a new page lifetime and not checked. */
    char *pin = launder(malloc(48));
    char *p = launder(malloc(48));
    volatile char *stale = launder(p);
    poke(p, 1, 48);
    free(p);
    stale[5] = 'z';
    char *q = launder(malloc(48)); /* the same block comes back, or a quarantined one */
    free(q);
    free(pin);
    cycle_blocks();
    return survived("write-after-free");
}

/* A block of n bytes, filled and freed: the stale pointer to it. */
static char *freed_block(size_t n) {
    char *p = launder(malloc(n));
    char *stale = launder(p);
    poke(p, 1, n);
    free(p);
    return stale;
}

/* Two blocks of n bytes at once (the second follows the first one's link), freed. */
static void allocate_two(size_t n) {
    char *a = launder(malloc(n)), *b = launder(malloc(n));
    free(a);
    free(b);
}

static int write_after_free_first(void) {
    /* No other block of this size is out: the block is the first of a fresh page and
     * its page has nothing else out when it is written to and allocated again. */
    poke(freed_block(12000) + 5, 'z', 1);
    free(launder(malloc(12000)));
    cycle_blocks();
    return survived("write-after-free-first");
}

static int freed_header_write(void) {
    char *pin = launder(malloc(48));
    poke(freed_block(48) - 16, 0x41, 16);
    allocate_two(48);
    cycle_blocks();
    free(pin);
    return survived("freed-header-write");
}

static int freed_mark_write(void) {
    char *pin = launder(malloc(48));
    char *stale = freed_block(48);
    poke(stale - 8, 0, 8);
    poke(stale + 5, 'z', 1);
    free(launder(malloc(48)));
    cycle_blocks();
    free(pin);
    return survived("freed-mark-write");
}

static int freed_link_write(void) {
    /* As freed-header-write, but long after the free: any quarantine has given the
     * block back, and the allocator's own free-list link is overwritten. */
    char *pin = launder(malloc(48));
    char *stale = freed_block(48);
    cycle_blocks();
    poke(stale - 16, 0x41, 8);
    allocate_two(48);
    free(pin);
    return survived("freed-link-write");
}

static char static_buffer[256];

static int static_free(void) {
    poke(static_buffer, 1, sizeof static_buffer);
    free(launder(static_buffer + 16));
    return survived("static-free");
}

static int free_sized_mismatch(void) {
    free_sized_fn fs;
    void *s = sym("free_sized");
    memcpy(&fs, &s, sizeof fs);
    char *p = malloc(40);
    poke(p, 1, 40);
    fs(p, 41);
    return survived("free-sized-mismatch");
}

static int aligned_mismatch(void) {
    free_aligned_sized_fn fas;
    void *s = sym("free_aligned_sized");
    memcpy(&fas, &s, sizeof fas);
    char *p = aligned_alloc(64, 128);
    poke(p, 1, 128);
    fas(p, 32, 128);
    return survived("aligned-mismatch");
}

static int foreign_free(void) {
    size_t len = 65536;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        printf("debug_errors: mmap failed\n");
        return 2;
    }
    memset(m, 0x5a, len);
    free(launder(m + 4096));
    munmap(m, len);
    return survived("foreign-free");
}

/* ------------------------------------------------------------------- clean */
static int failures;

static void fail(const char *what, size_t n) {
    printf("debug_errors clean: %s (size %zu)\n", what, n);
    failures++;
}

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t pick_size(uint64_t *rng) {
    uint64_t r = next_rand(rng);
    switch (r % 16) {
    case 0: return (size_t)(r >> 8) % 3000000 + 100000; /* large */
    case 1: case 2: return (size_t)(r >> 8) % 65536;
    case 3: return 0;
    default: return (size_t)(r >> 8) % 600;
    }
}

/* Contents of a block: a pattern over its first 16 KiB and last 4 KiB (where
 * overruns and lost copies show), one byte in between (cheap for large blocks). */
#define HEAD ((size_t)16 << 10)
#define TAIL ((size_t)4 << 10)
static unsigned char pattern(unsigned seed, size_t i, size_t n) {
    if (i < HEAD || i >= n - TAIL) return (unsigned char)(seed + i * 13);
    return (unsigned char)seed;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    if (n <= HEAD + TAIL) {
        for (size_t i = 0; i < n; i++) p[i] = pattern(seed, i, n);
        return;
    }
    for (size_t i = 0; i < HEAD; i++) p[i] = pattern(seed, i, n);
    memset(p + HEAD, (unsigned char)seed, n - HEAD - TAIL);
    for (size_t i = n - TAIL; i < n; i++) p[i] = pattern(seed, i, n);
}

/* Checks the contents of a block of n bytes, or only its first `keep` bytes (the
 * one-byte middle is sampled). */
static int verify_prefix(const unsigned char *p, size_t keep, size_t n, unsigned seed) {
    for (size_t i = 0; i < keep; i += (i < HEAD || i >= n - TAIL) ? 1 : 61)
        if (p[i] != pattern(seed, i, n)) return 0;
    return 1;
}

static int verify(const unsigned char *p, size_t n, unsigned seed) {
    return verify_prefix(p, n, n, seed);
}

typedef struct {
    unsigned char *p;
    size_t n;
    unsigned seed;
} slot_t;

/* Allocate, check and free with every interface; blocks are written in full. */
static void churn(unsigned iters, uint64_t seed, slot_t *slots, size_t nslots) {
    uint64_t rng = seed;
    free_sized_fn fs = NULL;
    free_aligned_sized_fn fas = NULL;
    void *s1 = dlsym(RTLD_DEFAULT, "free_sized"), *s2 = dlsym(RTLD_DEFAULT, "free_aligned_sized");
    memcpy(&fs, &s1, sizeof fs);
    memcpy(&fas, &s2, sizeof fas);
    for (unsigned it = 0; it < iters; it++) {
        slot_t *s = &slots[next_rand(&rng) % nslots];
        if (s->p != NULL) {
            if (!verify(s->p, s->n, s->seed)) fail("contents changed", s->n);
            switch (next_rand(&rng) % 4) {
            case 0: free(s->p); break;
            case 1: if (fs) fs(s->p, s->n); else free(s->p); break;
            case 2: { /* realloc keeps the contents */
                size_t n = pick_size(&rng);
                unsigned char *q = realloc(s->p, n);
                if (q == NULL && n != 0) { fail("realloc failed", n); break; }
                size_t keep = s->n < n ? s->n : n;
                if (q != NULL && !verify_prefix(q, keep, s->n, s->seed))
                    fail("realloc lost contents", n);
                if (q != NULL) {
                    fill(q, n, s->seed);
                    s->p = q;
                    s->n = n;
                    continue;
                }
                break;
            }
            default: free(s->p); break;
            }
            s->p = NULL;
            continue;
        }
        size_t n = pick_size(&rng);
        unsigned seed8 = (unsigned)next_rand(&rng);
        unsigned char *p = NULL;
        switch (next_rand(&rng) % 5) {
        case 0:
            p = calloc(1, n);
            if (p != NULL)
                for (size_t i = 0; i < n; i += (i < HEAD || i >= n - TAIL) ? 1 : 61)
                    if (p[i] != 0) { fail("calloc not zero", n); break; }
            break;
        case 1: {
            size_t a = (size_t)16 << (next_rand(&rng) % 9); /* 16 .. 4096 */
            /* A third are no power of two (24 .. 6144), which glibc takes, rounded
             * up; free_aligned_sized then names them as given. */
            if (next_rand(&rng) % 3 == 0) a += a / 2;
            size_t r = a;
            while (r & (r - 1)) r += r & -r;
            size_t an = (n + a - 1) / a * a;
            p = aligned_alloc(a, an);
            if (p == NULL || ((uintptr_t)p & (r - 1))) fail("aligned_alloc", an);
            if (p != NULL) {
                fill(p, an, seed8);
                if (fas) fas(p, a, an); else free(p);
                p = NULL;
            }
            continue;
        }
        case 2: {
            void *q = NULL;
            size_t a = (size_t)8 << (next_rand(&rng) % 10);
            if (posix_memalign(&q, a, n) != 0 || ((uintptr_t)q & (a - 1))) fail("posix_memalign", n);
            p = q;
            break;
        }
        default:
            p = malloc(n);
            break;
        }
        if (p == NULL) {
            fail("allocation failed", n);
            continue;
        }
        size_t u = malloc_usable_size(p);
        if (u < n) fail("usable size too small", n);
        memset(p, 0xee, u); /* writing the full usable size is allowed */
        fill(p, n, seed8);
        s->p = p;
        s->n = n;
        s->seed = seed8;
    }
}

static void release_all(slot_t *slots, size_t nslots) {
    for (size_t i = 0; i < nslots; i++) {
        if (slots[i].p && !verify(slots[i].p, slots[i].n, slots[i].seed))
            fail("contents changed", slots[i].n);
        free(slots[i].p);
        slots[i].p = NULL;
    }
}

/* Cross-thread frees: producers hand blocks to consumers through a shared ring. */
#define RING 256
static struct {
    pthread_mutex_t lock;
    slot_t items[RING];
    unsigned head, tail, producers_done;
} ring = {.lock = PTHREAD_MUTEX_INITIALIZER};

typedef struct {
    unsigned iters;
    uint64_t seed;
} job_t;

static void *producer(void *arg) {
    job_t *j = arg;
    uint64_t rng = j->seed;
    slot_t mine[64] = {{0}};
    churn(j->iters, j->seed, mine, 64);
    release_all(mine, 64);
    for (unsigned i = 0; i < j->iters; i++) {
        size_t n = pick_size(&rng) % 5000;
        unsigned char *p = malloc(n);
        if (p == NULL) { fail("malloc failed", n); continue; }
        fill(p, n, i);
        for (;;) {
            pthread_mutex_lock(&ring.lock);
            if (ring.head - ring.tail < RING) {
                ring.items[ring.head++ % RING] = (slot_t){p, n, i};
                pthread_mutex_unlock(&ring.lock);
                break;
            }
            pthread_mutex_unlock(&ring.lock);
            sched_yield();
        }
    }
    pthread_mutex_lock(&ring.lock);
    ring.producers_done++;
    pthread_mutex_unlock(&ring.lock);
    return NULL;
}

static unsigned n_producers;

static void *consumer(void *arg) {
    (void)arg;
    for (;;) {
        slot_t s = {0};
        int done = 0;
        pthread_mutex_lock(&ring.lock);
        if (ring.head != ring.tail) s = ring.items[ring.tail++ % RING];
        else done = ring.producers_done == n_producers;
        pthread_mutex_unlock(&ring.lock);
        if (done) return NULL;
        if (s.p == NULL) { sched_yield(); continue; }
        if (!verify(s.p, s.n, s.seed)) fail("cross-thread contents changed", s.n);
        free(s.p);
    }
}

/* A thread's blocks of one class, all freed, give their spans back; blocks of a
 * smaller class then take one of those spans, and a few of them are freed too.  At
 * the thread's exit its empty pages are retired, which reads every carved block's
 * link: under valgrind, links the core wrote where the first class's freed bodies
 * lay must read as defined memory (the checked variant once left them no-access
 * and memcheck reported the reads).  cycle_blocks after each phase pushes its
 * blocks out of any quarantine. */
static void *span_reuse(void *arg) {
    (void)arg;
    enum { FIRST = 2000, SECOND = 10 };
    static unsigned char *b[FIRST];
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (unsigned i = 0; i < FIRST; i++) {
        b[i] = malloc(100);
        if (b[i] == NULL) { fail("malloc failed", 100); return NULL; }
        memset(b[i], 0x5a, 100);
        if ((uintptr_t)b[i] < lo) lo = (uintptr_t)b[i];
        if ((uintptr_t)b[i] > hi) hi = (uintptr_t)b[i];
    }
    for (unsigned i = 0; i < FIRST; i++) free(b[i]);
    cycle_blocks();
    unsigned reused = 0;
    for (unsigned i = 0; i < SECOND; i++) {
        b[i] = malloc(60);
        if (b[i] == NULL) { fail("malloc failed", 60); return NULL; }
        memset(b[i], 0xa5, 60);
        reused += (uintptr_t)b[i] >= lo && (uintptr_t)b[i] <= hi;
    }
    /* Otherwise this step tests nothing: the spans are not reused as it expects. */
    if (reused == 0) fail("no block of the second class in the first class's spans", 60);
    for (unsigned i = 0; i < SECOND; i++) free(b[i]);
    cycle_blocks();
    return NULL;
}

static int clean(int small) {
    unsigned iters = small ? 3000 : 200000;
    static slot_t slots[512];
    pthread_t reuse;
    pthread_create(&reuse, NULL, span_reuse, NULL);
    pthread_join(reuse, NULL);
    churn(iters, 88172645463325252ULL, slots, 512);
    release_all(slots, 512);

    /* Every size up to 70 KiB once, every byte written, then freed. */
    for (size_t n = 0; n < 70000; n += small ? 997 : 61) {
        unsigned char *p = malloc(n);
        if (p == NULL) { fail("malloc failed", n); continue; }
        memset(p, 0x77, n);
        if (malloc_usable_size(p) != n) fail("usable size is not the requested size", n);
        free(p);
    }

    pthread_t t[6];
    job_t jobs[4];
    n_producers = 4;
    for (unsigned i = 0; i < 4; i++) {
        jobs[i] = (job_t){small ? 500 : 20000, 0x9e3779b97f4a7c15ULL * (i + 1)};
        pthread_create(&t[i], NULL, producer, &jobs[i]);
    }
    for (unsigned i = 4; i < 6; i++) pthread_create(&t[i], NULL, consumer, NULL);
    for (unsigned i = 0; i < 6; i++) pthread_join(t[i], NULL);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: debug_errors MODE [small]\n");
        return 2;
    }
    const char *m = argv[1];
    int small = argc > 2 && strcmp(argv[2], "small") == 0;
    if (!strcmp(m, "double-free")) return double_free();
    if (!strcmp(m, "interior-free")) return interior_free();
    if (!strcmp(m, "interior-usable")) return interior_usable();
    if (!strcmp(m, "never-allocated")) return never_allocated();
    if (!strcmp(m, "overrun")) return overrun();
    if (!strcmp(m, "overrun-realloc")) return overrun_realloc();
    if (!strcmp(m, "write-after-free")) return write_after_free();
    if (!strcmp(m, "write-after-free-first")) return write_after_free_first();
    if (!strcmp(m, "freed-header-write")) return freed_header_write();
    if (!strcmp(m, "freed-mark-write")) return freed_mark_write();
    if (!strcmp(m, "freed-link-write")) return freed_link_write();
    if (!strcmp(m, "static-free")) return static_free();
    if (!strcmp(m, "free-sized-mismatch")) return free_sized_mismatch();
    if (!strcmp(m, "aligned-mismatch")) return aligned_mismatch();
    if (!strcmp(m, "foreign-free")) return foreign_free();
    if (!strcmp(m, "clean")) return clean(small);
    printf("debug_errors: unknown mode %s\n", m);
    return 2;
}
