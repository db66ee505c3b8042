/* test_foreign.c - pointers hakozuna did not hand out.
 *
 * (a) Under hakozuna only (the C library would abort): pointers into a private
 *     mmap region and into a static array are passed to free() and
 *     malloc_usable_size().  Both must return normally and leave the memory
 *     untouched; hz_usable_size() must report 0 for them.
 * (b) A library loaded with dlopen(RTLD_NOW | RTLD_DEEPBIND) binds its malloc
 *     to the C library's allocator.  Blocks it hands out are freed with our
 *     free(), resized with our realloc() (contents kept up to the smaller of
 *     the two sizes) and measured with malloc_usable_size().  The library is
 *     found through HZ_TEST_FOREIGN_LIB (path to the built shared object); if
 *     that is not set, part (b) is skipped and the test exits 77.
 * Under hakozuna, hz_stats foreign_frees must grow by at least the number of
 * foreign pointers passed to free().  The checked variant (libhakozuna_debug.so)
 * treats every such pointer as an error: there, part (a) must end in abort.
 */
#include "hz_test.h"

#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

static unsigned char static_area[16384];

/* Hides where a pointer came from, so the compiler does not reject the
 * deliberate free() of non-heap memory. */
static void *launder(void *p)
{
    void *volatile v = p;
    return v;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + seed + (i >> 9));
}

static size_t first_diff(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 7 + seed + (i >> 9)))
            return i;
    return SIZE_MAX;
}

static uint64_t part_a(void)
{
    uint64_t frees = 0;
    size_t len = 64 * 1024;
    unsigned char *m = (unsigned char *)mmap(NULL, len, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED, "mmap failed: %s", strerror(errno));
    /* First half zero, second half a pattern (so one pointer has a zero
     * "header" before it and another has garbage before it). */
    memset(m, 0, len / 2);
    fill(m + len / 2, len / 2, 3);
    unsigned char *const targets[] = {m + 4096, m + 256, m + len / 2 + 4096, m + len / 2 + 1040,
                                      m + len - 4096};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        void *p = launder(targets[i]);
        size_t u = hz_test_usable_size(p);
        CHECK(u == 0, "hz_usable_size(mmap pointer) = %zu, want 0", u);
        (void)malloc_usable_size(p);
        free(p);
        frees++;
    }
    for (size_t i = 0; i < len / 2; i++)
        CHECK(m[i] == 0, "free() of a foreign pointer wrote into mmap memory (offset %zu)", i);
    size_t d = first_diff(m + len / 2, len / 2, 3);
    CHECK(d == SIZE_MAX, "free() of a foreign pointer wrote into mmap memory (offset %zu)",
          len / 2 + d);
    CHECK(munmap(m, len) == 0, "munmap failed");

    fill(static_area + 8192, 8192, 9);
    unsigned char *const st[] = {static_area + 64, static_area + 4096, static_area + 8192 + 512};
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        void *p = launder(st[i]);
        size_t u = hz_test_usable_size(p);
        CHECK(u == 0, "hz_usable_size(static pointer) = %zu, want 0", u);
        (void)malloc_usable_size(p);
        free(p);
        frees++;
    }
    for (size_t i = 0; i < 8192; i++)
        CHECK(static_area[i] == 0, "free() of a static pointer wrote into it (offset %zu)", i);
    d = first_diff(static_area + 8192, 8192, 9);
    CHECK(d == SIZE_MAX, "free() of a static pointer wrote into it (offset %zu)", 8192 + d);

    /* Our own allocations still work. */
    for (int i = 0; i < 1000; i++) {
        void *p = malloc((size_t)(1 + i * 13));
        CHECK(p != NULL, "malloc failed after foreign frees");
        memset(p, 1, (size_t)(1 + i * 13));
        free(p);
    }
    printf("part (a): %llu foreign pointers freed without harm\n", (unsigned long long)frees);
    return frees;
}

static uint64_t part_b(const char *path, int hz)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_DEEPBIND);
    CHECK(h != NULL, "dlopen(%s): %s", path, dlerror());
    void *s1 = dlsym(h, "foreign_alloc"), *s2 = dlsym(h, "foreign_free");
    CHECK(s1 && s2, "%s lacks foreign_alloc/foreign_free", path);
    void *(*falloc)(size_t);
    void (*ffree)(void *);
    memcpy(&falloc, &s1, sizeof falloc);
    memcpy(&ffree, &s2, sizeof ffree);

    uint64_t frees = 0;
    const size_t sizes[] = {1, 24, 100, 1000, 4000, 20000, 100000, 200000, 1 << 20, 5 << 20};
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i] + (size_t)round;
            unsigned seed = (unsigned)(i + 17 * round);

            /* free() */
            unsigned char *p = (unsigned char *)falloc(n);
            CHECK(p != NULL, "foreign_alloc(%zu) failed", n);
            fill(p, n, seed);
            if (hz)
                CHECK(hz_test_usable_size(p) == 0,
                      "a block from the DEEPBIND library belongs to hakozuna (size %zu)", n);
            size_t u = malloc_usable_size(p);
            CHECK(u == 0 || u >= n, "malloc_usable_size(foreign block of %zu) = %zu", n, u);
            free(p);
            frees++;

            /* realloc() larger */
            p = (unsigned char *)falloc(n);
            CHECK(p != NULL, "foreign_alloc(%zu) failed", n);
            fill(p, n, seed);
            size_t big = n * 2 + 10;
            unsigned char *q = (unsigned char *)realloc(p, big);
            CHECK(q != NULL, "realloc(foreign block of %zu, %zu) failed", n, big);
            size_t d = first_diff(q, n, seed);
            CHECK(d == SIZE_MAX, "realloc(foreign block of %zu, %zu) lost byte %zu", n, big, d);
            memset(q + n, 0x42, big - n);
            CHECK(malloc_usable_size(q) >= big, "realloc result too small");
            free(q);

            /* realloc() smaller */
            p = (unsigned char *)falloc(n);
            CHECK(p != NULL, "foreign_alloc(%zu) failed", n);
            fill(p, n, seed);
            size_t small = n / 2 + 1;
            q = (unsigned char *)realloc(p, small);
            CHECK(q != NULL, "realloc(foreign block of %zu, %zu) failed", n, small);
            d = first_diff(q, small, seed);
            CHECK(d == SIZE_MAX, "realloc(foreign block of %zu, %zu) lost byte %zu", n, small, d);
            free(q);

            /* The library's own free still works. */
            p = (unsigned char *)falloc(n);
            CHECK(p != NULL, "foreign_alloc(%zu) failed", n);
            fill(p, n, seed);
            ffree(p);
        }
    }
    /* Many foreign blocks live at once, freed alternately by us and by them. */
    enum { N = 2000 };
    static unsigned char *v[N];
    static size_t vs[N];
    uint64_t rng = 11;
    for (int i = 0; i < N; i++) {
        vs[i] = hz_test_rand_range(&rng, 1, 3000);
        v[i] = (unsigned char *)falloc(vs[i]);
        CHECK(v[i] != NULL, "foreign_alloc failed");
        fill(v[i], vs[i], (unsigned)i);
    }
    for (int i = 0; i < N; i++) {
        size_t d = first_diff(v[i], vs[i], (unsigned)i);
        CHECK(d == SIZE_MAX, "foreign block %d damaged at %zu", i, d);
        if (i % 2) {
            free(v[i]);
            frees++;
        } else {
            ffree(v[i]);
        }
    }
    dlclose(h);
    printf("part (b): %llu C-library blocks freed through free(), more resized with realloc()\n",
           (unsigned long long)frees);
    return frees;
}

/* The checked variant stops the program at the first pointer that is not its own
 * (tests/test_debug.sh tests its report): part (a), in a child, must end in abort. */
static int checked_variant_stops(void)
{
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        part_a();
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid failed");
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
          "the checked variant did not stop at a foreign pointer (status %#x)", status);
    printf("checked variant: a foreign pointer stops the program (SIGABRT)\n");
    return 0;
}

int main(void)
{
    int hz = hz_test_require_loaded();
    if (hz && hz_test_checked_variant())
        return checked_variant_stops();
    struct hz_stats st0, st1;
    int have = hz && hz_test_stats(&st0);
    if (hz)
        CHECK(have, "hz_stats_get is not available");

    uint64_t frees = 0;
    if (hz)
        frees += part_a();
    else
        printf("part (a) skipped: the system allocator aborts on such pointers\n");

    const char *lib = getenv("HZ_TEST_FOREIGN_LIB");
    if (lib && *lib)
        frees += part_b(lib, hz);

    if (have) {
        CHECK(hz_test_stats(&st1), "hz_stats_get failed");
        printf("hz_stats: foreign_frees %llu -> %llu (at least %llu expected)\n",
               (unsigned long long)st0.foreign_frees, (unsigned long long)st1.foreign_frees,
               (unsigned long long)frees);
        CHECK(st1.foreign_frees >= st0.foreign_frees + frees,
              "hz_stats foreign_frees grew by %llu, want at least %llu",
              (unsigned long long)(st1.foreign_frees - st0.foreign_frees),
              (unsigned long long)frees);
    }
    if (!lib || !*lib)
        SKIP("HZ_TEST_FOREIGN_LIB is not set; part (b) not run");
    return 0;
}
