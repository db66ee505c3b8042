/* prof_prog - a process with a known heap for the heap-profile tests (hzstat --heap).
 *
 *   prof_prog DIR [MIB]       (default 32)
 *
 * Phase 1: hz_planted_site keeps MIB MiB live in 4 KiB blocks (allocated in turns
 * with the others, so no site owns a stretch of the address space), while
 * keep_small_site keeps 2 MiB live in 256-byte blocks, calloc_site 1 MiB in
 * 1 KiB blocks, and churn_site allocates and frees 64 MiB in blocks of 16 to 2048
 * bytes, keeping nothing.  It prints "phase1 pid=P" and waits until DIR/go1 exists.
 * Phase 2: frees every planted block (half of them from another thread), prints
 * "phase2" and waits for DIR/go2, then frees the rest and exits with status 0.  Each line is flushed.  It
 * never calls hakozuna directly: run it with the library preloaded.
 */
#define _GNU_SOURCE 1

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PLANT_SIZE 4096
#define SMALL_SIZE 256
#define CALLOC_SIZE 1024

static void **planted, **small, **zeroed;
static long n_planted, n_small, n_zeroed;

static void die(const char *what) {
    fprintf(stderr, "prof_prog: %s\n", what);
    exit(1);
}

/* The site the test must find on top.  noinline and external: it keeps its own
 * frame and its name in the symbol table. */
__attribute__((noinline)) void *hz_planted_site(size_t size) {
    void *p = malloc(size);
    if (p == NULL) die("out of memory");
    memset(p, 0x5a, 64);
    __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays */
    return p;
}

__attribute__((noinline)) void *keep_small_site(size_t size) {
    void *p = malloc(size);
    if (p == NULL) die("out of memory");
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) void *calloc_site(size_t size) {
    void *p = calloc(1, size);
    if (p == NULL) die("out of memory");
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) void churn_site(long bytes) {
    unsigned x = 12345;
    void *ring[64] = {0};
    for (long done = 0; done < bytes;) {
        x = x * 1103515245u + 12345u;
        size_t size = 16 + (x >> 8) % 2033;
        unsigned k = (x >> 20) & 63;
        free(ring[k]);
        ring[k] = malloc(size);
        if (ring[k] == NULL) die("out of memory");
        done += (long)size;
    }
    for (int k = 0; k < 64; k++) free(ring[k]);
}

static void wait_for(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct timespec ts = {0, 20000000L};
    while (access(path, F_OK) != 0) nanosleep(&ts, NULL);
}

static void *free_half(void *arg) {
    (void)arg;
    for (long i = 0; i < n_planted; i += 2) free(planted[i]);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) die("usage: prof_prog DIR [MIB]");
    long mib = argc > 2 ? atol(argv[2]) : 32;
    n_planted = mib * 1024 * 1024 / PLANT_SIZE;
    n_small = 2L * 1024 * 1024 / SMALL_SIZE;
    n_zeroed = 1L * 1024 * 1024 / CALLOC_SIZE;
    planted = calloc((size_t)n_planted, sizeof *planted);
    small = calloc((size_t)n_small, sizeof *small);
    zeroed = calloc((size_t)n_zeroed, sizeof *zeroed);
    if (planted == NULL || small == NULL || zeroed == NULL) die("out of memory");
    long ip = 0, is = 0, iz = 0;
    while (ip < n_planted || is < n_small || iz < n_zeroed) {
        for (int k = 0; k < 16 && is < n_small; k++) small[is++] = keep_small_site(SMALL_SIZE);
        if (ip < n_planted) planted[ip++] = hz_planted_site(PLANT_SIZE);
        if (iz < n_zeroed) zeroed[iz++] = calloc_site(CALLOC_SIZE);
        if ((ip & 255) == 0) churn_site(256 * 1024);
    }
    printf("phase1 pid=%ld planted=%ld bytes=%ld\n", (long)getpid(), n_planted,
           n_planted * (long)PLANT_SIZE);
    fflush(stdout);
    wait_for(argv[1], "go1");

    pthread_t t;
    if (pthread_create(&t, NULL, free_half, NULL) != 0) die("pthread_create");
    pthread_join(t, NULL);
    for (long i = 1; i < n_planted; i += 2) free(planted[i]);
    printf("phase2\n");
    fflush(stdout);
    wait_for(argv[1], "go2");
    for (long i = 0; i < n_small; i++) free(small[i]);
    for (long i = 0; i < n_zeroed; i++) free(zeroed[i]);
    free(planted);
    free(small);
    free(zeroed);
    return 0;
}
