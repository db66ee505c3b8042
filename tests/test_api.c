/* test_api.c - conformance of the libc allocation interface.
 *
 * Everything here goes through the ordinary libc names (malloc, free, ...),
 * which the preloaded library interposes.  Checks that depend on behaviour
 * only hakozuna promises (it is stricter than glibc 2.36 in places) run only
 * when hakozuna is loaded.
 *
 * mallinfo2()/mallinfo() under hakozuna: uordblks = bytes in blocks handed out
 * (size-class rounded, the same figure as hz_stats bytes_in_use); the bytes
 * mapped from the OS are reported in arena (all mapped memory) and hblkhd
 * (memory of large, directly mapped blocks).  The test requires uordblks to
 * follow allocations and arena + hblkhd >= uordblks.
 */
#include "hz_test.h"

#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* Not declared by glibc 2.36's headers; resolved with dlsym so that the test
 * builds and runs everywhere. */
typedef void (*free_sized_fn)(void *, size_t);
typedef void (*free_aligned_sized_fn)(void *, size_t, size_t);
typedef void (*cfree_fn)(void *);

static int hz_loaded;
static size_t page_size;

/* Hides a value from the optimiser, so that deliberately impossible sizes do
 * not trigger compile-time warnings and calls are not folded away. */
static size_t opaque(size_t v)
{
    volatile size_t x = v;
    return x;
}

/* The same pointer, hidden from the optimiser: lets the test keep using a
 * block after a realloc that is expected to fail without tripping gcc's
 * -Wuse-after-free. */
static void *opaque_ptr(void *p)
{
    void *volatile v = p;
    return v;
}

static int is_aligned(const void *p, size_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

/* ------------------------------------------------------------ patterns */

static uint64_t pword(size_t k, uint64_t seed)
{
    uint64_t x = ((uint64_t)k + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return x;
}

static unsigned char pbyte(size_t i, uint64_t seed)
{
    uint64_t w = pword(i >> 3, seed);
    unsigned char b[8];
    memcpy(b, &w, 8);
    return b[i & 7];
}

/* Byte i of the pattern is byte i%8 of pword(i/8): offsets, not addresses, so
 * a pattern survives a move by realloc. */
static void fill_pat(void *base, size_t from, size_t to, uint64_t seed)
{
    unsigned char *p = (unsigned char *)base;
    size_t i = from;
    while (i < to && (i & 7)) {
        p[i] = pbyte(i, seed);
        i++;
    }
    for (; i + 8 <= to; i += 8) {
        uint64_t w = pword(i >> 3, seed);
        memcpy(p + i, &w, 8);
    }
    for (; i < to; i++)
        p[i] = pbyte(i, seed);
}

/* Returns the first offset in [from, to) that does not hold the pattern, or
 * SIZE_MAX. */
static size_t check_pat(const void *base, size_t from, size_t to, uint64_t seed)
{
    const unsigned char *p = (const unsigned char *)base;
    size_t i = from;
    while (i < to && (i & 7)) {
        if (p[i] != pbyte(i, seed))
            return i;
        i++;
    }
    for (; i + 8 <= to; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w != pword(i >> 3, seed)) {
            for (size_t j = i; j < i + 8; j++)
                if (p[j] != pbyte(j, seed))
                    return j;
        }
    }
    for (; i < to; i++)
        if (p[i] != pbyte(i, seed))
            return i;
    return SIZE_MAX;
}

static int all_bytes(const void *base, size_t n, unsigned char v, size_t *bad)
{
    const unsigned char *p = (const unsigned char *)base;
    uint64_t pat;
    memset(&pat, v, sizeof pat);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w != pat)
            break;
    }
    for (; i < n; i++) {
        if (p[i] != v) {
            *bad = i;
            return 0;
        }
    }
    return 1;
}

/* A block from the malloc family: non-NULL, aligned, usable >= n, writable. */
static void check_block(const char *what, void *p, size_t n, size_t align)
{
    CHECK(p != NULL, "%s(%zu) returned NULL", what, n);
    CHECK(is_aligned(p, align), "%s(%zu) = %p is not %zu-byte aligned", what, n, p, align);
    size_t u = malloc_usable_size(p);
    CHECK(u >= n, "%s(%zu): malloc_usable_size = %zu", what, n, u);
    memset(p, 0x5A, u);
}

/* ------------------------------------------------------------- malloc */

static void test_malloc_zero(void)
{
    enum { N = 512 };
    void *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = malloc(opaque(0));
        CHECK(v[i] != NULL, "malloc(0) returned NULL");
        CHECK(is_aligned(v[i], 16), "malloc(0) = %p not 16-byte aligned", v[i]);
        memset(v[i], 0x11, malloc_usable_size(v[i]));
        for (int j = 0; j < i; j++)
            CHECK(v[j] != v[i], "malloc(0) returned %p twice", v[i]);
    }
    for (int i = 0; i < N; i++)
        free(v[i]);
    /* realloc(NULL, 0) behaves as malloc(0). */
    void *p = realloc(NULL, opaque(0));
    CHECK(p != NULL, "realloc(NULL, 0) returned NULL");
    free(p);
}

struct blk {
    unsigned char *p;
    size_t size;
    size_t usable;
    unsigned char fill;
};

static int cmp_blk(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct blk *)a)->p;
    uintptr_t y = (uintptr_t)((const struct blk *)b)->p;
    return x < y ? -1 : x > y;
}

/* Live blocks must not overlap, counting their whole usable size. */
static void check_disjoint(struct blk *b, size_t n)
{
    qsort(b, n, sizeof *b, cmp_blk);
    for (size_t i = 1; i < n; i++)
        CHECK((uintptr_t)b[i - 1].p + b[i - 1].usable <= (uintptr_t)b[i].p,
              "blocks overlap: %p+%zu (size %zu) and %p (size %zu)", (void *)b[i - 1].p,
              b[i - 1].usable, b[i - 1].size, (void *)b[i].p, b[i].size);
}

static void test_malloc_sizes(void)
{
    /* Every size 0..4096, then geometric steps (1/4) with neighbours up to
     * 2 MiB: all live at once, each filled over its usable size with its own
     * byte, verified afterwards, so overlapping blocks would show. */
    size_t cap = 4097 + 3 * 64;
    struct blk *b = (struct blk *)calloc(cap, sizeof *b);
    CHECK(b != NULL, "calloc for bookkeeping failed");
    size_t n = 0;
    for (size_t s = 0; s <= 4096; s++)
        b[n++].size = s;
    for (size_t s = 4096; s <= ((size_t)2 << 20); s += s / 4) {
        b[n++].size = s - 1;
        b[n++].size = s + 1;
        b[n++].size = (s + 15) & ~(size_t)15;
    }
    CHECK(n <= cap, "internal: table too small");
    for (size_t i = 0; i < n; i++) {
        b[i].p = (unsigned char *)malloc(opaque(b[i].size));
        CHECK(b[i].p != NULL, "malloc(%zu) returned NULL", b[i].size);
        CHECK(is_aligned(b[i].p, 16), "malloc(%zu) = %p not 16-byte aligned", b[i].size,
              (void *)b[i].p);
        b[i].usable = malloc_usable_size(b[i].p);
        CHECK(b[i].usable >= b[i].size, "malloc(%zu): malloc_usable_size = %zu", b[i].size,
              b[i].usable);
        b[i].fill = (unsigned char)(i * 131 + 7);
        memset(b[i].p, b[i].fill, b[i].usable);
    }
    for (size_t i = 0; i < n; i++) {
        size_t bad = 0;
        CHECK(all_bytes(b[i].p, b[i].usable, b[i].fill, &bad),
              "block of size %zu corrupted at offset %zu", b[i].size, bad);
        CHECK(malloc_usable_size(b[i].p) == b[i].usable,
              "malloc_usable_size of a block changed (size %zu)", b[i].size);
    }
    check_disjoint(b, n);
    for (size_t i = 0; i < n; i++)
        free(b[i].p);
    free(b);

    /* Large blocks, one at a time: ends are writable and usable >= size. */
    for (size_t s = (size_t)4 << 20; s <= ((size_t)128 << 20); s *= 2) {
        size_t sizes[3] = {s - 1, s, s + 4096 + 1};
        for (int k = 0; k < 3; k++) {
            unsigned char *p = (unsigned char *)malloc(opaque(sizes[k]));
            CHECK(p != NULL, "malloc(%zu) returned NULL", sizes[k]);
            CHECK(is_aligned(p, 16), "malloc(%zu) not 16-byte aligned", sizes[k]);
            size_t u = malloc_usable_size(p);
            CHECK(u >= sizes[k], "malloc(%zu): usable %zu", sizes[k], u);
            for (size_t off = 0; off < u; off += page_size)
                p[off] = (unsigned char)off;
            p[u - 1] = 1;
            p[0] = 2;
            CHECK(p[0] == 2 && p[u - 1] == 1, "large block not writable");
            free(p);
        }
    }
}

static void test_errors(void)
{
    void *p;
    const size_t huge[] = {SIZE_MAX, SIZE_MAX - 15, SIZE_MAX - 4096,
                           (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX / 2 + 1};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        errno = 0;
        p = malloc(opaque(huge[i]));
        CHECK(p == NULL, "malloc(%zu) did not fail", huge[i]);
        CHECK(errno == ENOMEM, "malloc(%zu): errno %d, want ENOMEM", huge[i], errno);

        errno = 0;
        p = aligned_alloc(opaque(64), opaque(huge[i]));
        CHECK(p == NULL, "aligned_alloc(64, %zu) did not fail", huge[i]);
        CHECK(errno == ENOMEM, "aligned_alloc(64, %zu): errno %d", huge[i], errno);

        p = (void *)&p;
        int rc = posix_memalign(&p, opaque(4096), opaque(huge[i]));
        CHECK(rc == ENOMEM, "posix_memalign(4096, %zu) returned %d, want ENOMEM", huge[i], rc);
    }

    /* The largest powers of two as alignments, with sizes that fit: once made the
     * size checks of hz_aligned_alloc wrap and the allocator unmap most of the
     * address space. */
    void *(*hz_aligned)(size_t, size_t) = NULL;
    if (hz_loaded) {
        void *sym = hz_test_sym("hz_aligned_alloc");
        memcpy(&hz_aligned, &sym, sizeof hz_aligned);
    }
    for (int shift = 62; shift <= 63; shift++) {
        const size_t sizes[] = {1, 100, 8193, (size_t)1 << 20};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t a = opaque((size_t)1 << shift);
            errno = 0;
            p = aligned_alloc(a, opaque(sizes[i]));
            CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(2^%d, %zu) = %p, errno %d", shift,
                  sizes[i], p, errno);
            if (hz_aligned == NULL) continue;
            errno = 0;
            p = hz_aligned(a, opaque(sizes[i]));
            CHECK(p == NULL && errno == ENOMEM, "hz_aligned_alloc(2^%d, %zu) = %p, errno %d", shift,
                  sizes[i], p, errno);
        }
    }

    /* calloc overflow */
    const size_t pairs[][2] = {{SIZE_MAX / 2 + 1, 2},
                               {2, SIZE_MAX / 2 + 1},
                               {SIZE_MAX, SIZE_MAX},
                               {(size_t)1 << 32, (size_t)1 << 32},
                               {(SIZE_MAX / 3) + 1, 3},
                               {1, (size_t)PTRDIFF_MAX + 1},
                               {SIZE_MAX, 1}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        errno = 0;
        p = calloc(opaque(pairs[i][0]), opaque(pairs[i][1]));
        CHECK(p == NULL, "calloc(%zu, %zu) did not fail", pairs[i][0], pairs[i][1]);
        CHECK(errno == ENOMEM, "calloc(%zu, %zu): errno %d", pairs[i][0], pairs[i][1], errno);
    }

    /* reallocarray / realloc failure leaves the old block valid */
    const size_t osz = 1000;
    unsigned char *old = (unsigned char *)malloc(osz);
    CHECK(old != NULL, "malloc(1000) failed");
    fill_pat(old, 0, osz, 42);
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        errno = 0;
        p = reallocarray(opaque_ptr(old), opaque(pairs[i][0]), opaque(pairs[i][1]));
        CHECK(p == NULL, "reallocarray(p, %zu, %zu) did not fail", pairs[i][0], pairs[i][1]);
        CHECK(errno == ENOMEM, "reallocarray overflow: errno %d", errno);
        CHECK(check_pat(old, 0, osz, 42) == SIZE_MAX, "reallocarray failure damaged the block");
        errno = 0;
        p = reallocarray(NULL, opaque(pairs[i][0]), opaque(pairs[i][1]));
        CHECK(p == NULL && errno == ENOMEM, "reallocarray(NULL, overflow) did not fail");
    }
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        errno = 0;
        p = realloc(opaque_ptr(old), opaque(huge[i]));
        CHECK(p == NULL, "realloc(p, %zu) did not fail", huge[i]);
        CHECK(errno == ENOMEM, "realloc(p, %zu): errno %d", huge[i], errno);
        CHECK(check_pat(old, 0, osz, 42) == SIZE_MAX, "realloc failure damaged the block");
    }
    /* reallocarray that does not overflow works like realloc */
    p = reallocarray(old, opaque(300), opaque(10));
    CHECK(p != NULL, "reallocarray(p, 300, 10) failed");
    CHECK(malloc_usable_size(p) >= 3000, "reallocarray result too small");
    CHECK(check_pat(p, 0, osz, 42) == SIZE_MAX, "reallocarray lost the contents");
    free(p);
}

/* ------------------------------------------------------ aligned forms */

static void test_aligned(void)
{
    /* posix_memalign: invalid alignments give EINVAL as the return value. */
    const size_t bad[] = {0, 1, 3, 24, sizeof(void *) / 2, 48, 100, 4097, ((size_t)1 << 20) + 8};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *p = NULL;
        int rc = posix_memalign(&p, opaque(bad[i]), 16);
        CHECK(rc == EINVAL, "posix_memalign(alignment %zu) returned %d, want EINVAL", bad[i], rc);
    }

    for (size_t a = 8; a <= ((size_t)1 << 20); a *= 2) {
        const size_t sizes[] = {0, 1, a - 1, a, 3 * a + 5};
        void *keep[5];
        for (int k = 0; k < 5; k++) {
            void *p = NULL;
            int rc = posix_memalign(&p, opaque(a), opaque(sizes[k]));
            CHECK(rc == 0, "posix_memalign(%zu, %zu) returned %d", a, sizes[k], rc);
            CHECK(p != NULL, "posix_memalign(%zu, %zu) gave NULL", a, sizes[k]);
            CHECK(is_aligned(p, a), "posix_memalign(%zu, %zu) = %p misaligned", a, sizes[k], p);
            size_t u = malloc_usable_size(p);
            CHECK(u >= sizes[k], "posix_memalign(%zu, %zu): usable %zu", a, sizes[k], u);
            memset(p, 0x3C, u);
            keep[k] = p;
        }
        for (int k = 0; k < 5; k++)
            free(keep[k]);
    }

    /* aligned_alloc: every power of two from 1 to 1 MiB. */
    for (size_t a = 1; a <= ((size_t)1 << 20); a *= 2) {
        const size_t sizes[] = {a, 2 * a, 1, a + 1, 5 * a};
        for (int k = 0; k < 5; k++) {
            errno = 0;
            void *p = aligned_alloc(opaque(a), opaque(sizes[k]));
            check_block("aligned_alloc", p, sizes[k], a < 16 ? 16 : a);
            free(p);
        }
    }
    /* aligned_alloc with an alignment that is not a power of two: as glibc 2.36,
     * whose aligned_alloc is memalign, the alignment is rounded up. */
    const size_t npow[] = {3, 24, 48, 100, 4097, 65535};
    for (size_t i = 0; i < sizeof npow / sizeof npow[0]; i++) {
        size_t a = 16;
        while (a < npow[i]) a *= 2;
        void *p = aligned_alloc(opaque(npow[i]), opaque(npow[i] * 4));
        check_block("aligned_alloc", p, npow[i] * 4, a);
        free(p);
    }

    /* memalign */
    for (size_t a = 1; a <= ((size_t)1 << 20); a *= 2) {
        const size_t sizes[] = {0, 1, a - 1, a, 3 * a + 5};
        for (int k = 0; k < 5; k++) {
            void *p = memalign(opaque(a), opaque(sizes[k]));
            check_block("memalign", p, sizes[k], a < 16 ? 16 : a);
            free(p);
        }
    }

    /* valloc / pvalloc */
    const size_t vs[] = {0, 1, 100, page_size - 1, page_size, page_size + 1, 3 * page_size + 17,
                         (size_t)1 << 20, ((size_t)5 << 20) + 3};
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        void *p = valloc(opaque(vs[i]));
        check_block("valloc", p, vs[i], page_size);
        free(p);

        size_t rounded = (vs[i] + page_size - 1) / page_size * page_size;
        p = pvalloc(opaque(vs[i]));
        check_block("pvalloc", p, rounded, page_size);
        if (hz_loaded) {
            size_t u = malloc_usable_size(p);
            CHECK(u % page_size == 0, "pvalloc(%zu): usable size %zu is not a multiple of %zu",
                  vs[i], u, page_size);
        }
        free(p);
    }
}

/* ------------------------------------------------------------ realloc */

static size_t *walk_sizes(size_t *count)
{
    size_t cap = 4096, n = 0;
    size_t *v = (size_t *)malloc(cap * sizeof *v);
    CHECK(v != NULL, "malloc for size list failed");
    for (size_t s = 16; s <= 1024; s += 16)
        v[n++] = s;
    for (size_t s = 1024; s < ((size_t)64 << 20); s += s / 8)
        v[n++] = s;
    v[n++] = (size_t)64 << 20;
    /* Neighbours of every power of two, where size classes tend to change. */
    for (size_t s = 16; s <= ((size_t)64 << 20); s *= 2) {
        v[n++] = s - 1;
        if (s < ((size_t)64 << 20))
            v[n++] = s + 1;
    }
    CHECK(n <= cap, "internal: size list too long");
    /* sort, unique */
    for (size_t i = 1; i < n; i++) {
        size_t x = v[i], j = i;
        while (j > 0 && v[j - 1] > x) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || v[m - 1] != v[i])
            v[m++] = v[i];
    *count = m;
    return v;
}

/* Grow through every size, then shrink back, checking the common prefix after
 * each step.  With `interleave`, a small block is allocated between the steps
 * so that the block cannot always grow in place. */
static void realloc_walk(const size_t *sz, size_t n, size_t delta, int interleave, uint64_t seed)
{
    void **extra = NULL;
    if (interleave) {
        extra = (void **)calloc(2 * n + 2, sizeof *extra);
        CHECK(extra != NULL, "calloc failed");
    }
    size_t ne = 0;
    size_t cur = sz[0] + delta;
    unsigned char *p = (unsigned char *)realloc(NULL, cur);
    check_block("realloc(NULL, n)", p, cur, 16);
    fill_pat(p, 0, cur, seed);
    for (size_t i = 1; i < n; i++) {
        size_t next = sz[i] + delta;
        unsigned char *q = (unsigned char *)realloc(p, next);
        CHECK(q != NULL, "realloc growing %zu -> %zu returned NULL", cur, next);
        CHECK(is_aligned(q, 16), "realloc(%zu) result not 16-byte aligned", next);
        CHECK(malloc_usable_size(q) >= next, "realloc to %zu: usable size %zu", next,
              malloc_usable_size(q));
        size_t bad = check_pat(q, 0, cur, seed);
        CHECK(bad == SIZE_MAX, "realloc growing %zu -> %zu lost byte %zu", cur, next, bad);
        fill_pat(q, cur, next, seed);
        p = q;
        cur = next;
        if (interleave)
            extra[ne++] = malloc(24 + (i % 7) * 40);
    }
    for (size_t i = n - 1; i-- > 0;) {
        size_t next = sz[i] + delta;
        unsigned char *q = (unsigned char *)realloc(p, next);
        CHECK(q != NULL, "realloc shrinking %zu -> %zu returned NULL", cur, next);
        CHECK(is_aligned(q, 16), "realloc(%zu) result not 16-byte aligned", next);
        CHECK(malloc_usable_size(q) >= next, "realloc to %zu: usable size %zu", next,
              malloc_usable_size(q));
        size_t bad = check_pat(q, 0, next, seed);
        CHECK(bad == SIZE_MAX, "realloc shrinking %zu -> %zu lost byte %zu", cur, next, bad);
        p = q;
        cur = next;
        if (interleave)
            extra[ne++] = malloc(40 + (i % 5) * 200);
    }
    /* Same size: a no-op for the contents. */
    unsigned char *q = (unsigned char *)realloc(p, cur);
    CHECK(q != NULL && check_pat(q, 0, cur, seed) == SIZE_MAX, "realloc to the same size");
    free(q);
    if (interleave) {
        for (size_t i = 0; i < ne; i++)
            free(extra[i]);
        free(extra);
    }
}

static void test_realloc(void)
{
    size_t n;
    size_t *sz = walk_sizes(&n);
    realloc_walk(sz, n, 0, 0, 1);
    realloc_walk(sz, n, 7, 1, 2);

    /* Jumps between distant sizes, both ways. */
    const size_t jumps[] = {16, (size_t)8 << 20, 100, 70000, 24, (size_t)2 << 20, 3000, 1,
                            (size_t)33 << 20, 512};
    size_t cur = 1;
    unsigned char *p = (unsigned char *)malloc(cur);
    CHECK(p != NULL, "malloc(1) failed");
    fill_pat(p, 0, cur, 3);
    for (size_t i = 0; i < sizeof jumps / sizeof jumps[0]; i++) {
        unsigned char *q = (unsigned char *)realloc(p, jumps[i]);
        CHECK(q != NULL, "realloc %zu -> %zu failed", cur, jumps[i]);
        size_t common = cur < jumps[i] ? cur : jumps[i];
        size_t bad = check_pat(q, 0, common, 3);
        CHECK(bad == SIZE_MAX, "realloc %zu -> %zu lost byte %zu", cur, jumps[i], bad);
        if (jumps[i] > cur)
            fill_pat(q, cur, jumps[i], 3);
        p = q;
        cur = jumps[i];
    }
    free(p);
    free(sz);
}

/* A block above 256 KiB, alone on its page, grown 64 KiB at a time to 2 MiB: where
 * the space after it is free, hakozuna grows it in place instead of copying it.  A
 * block that moved at every other step (9 moves in 27 steps) now moves where the
 * space after it is taken, or its new size class needs an alignment its start does
 * not have.  Then it shrinks to 900 and 400 KiB, in place.  Contents are checked at
 * every step, whoever the allocator is. */
#define GROW_FROM ((size_t)300 << 10)
#define GROW_STEP ((size_t)64 << 10)
#define GROW_MOVES_MAX 5

/* *p, holding the pattern over *cur bytes, realloc'd to next: checked to keep its
 * bytes and have room for next, the pattern extended over what it grew by.  Returns
 * whether it moved. */
static int realloc_kept(unsigned char **p, size_t *cur, size_t next)
{
    unsigned char *q = (unsigned char *)realloc(*p, next);
    CHECK(q != NULL, "realloc %zu -> %zu failed", *cur, next);
    size_t kept = *cur < next ? *cur : next;
    size_t bad = check_pat(q, 0, kept, 9);
    CHECK(bad == SIZE_MAX, "realloc %zu -> %zu lost byte %zu", *cur, next, bad);
    CHECK(malloc_usable_size(q) >= next, "realloc %zu -> %zu: usable size %zu", *cur, next,
          malloc_usable_size(q));
    if (next > *cur)
        fill_pat(q, *cur, next, 9);
    int moved = q != *p;
    *p = q;
    *cur = next;
    return moved;
}

static void test_realloc_grow(void)
{
    size_t cur = GROW_FROM;
    unsigned char *p = (unsigned char *)malloc(cur);
    CHECK(p != NULL, "malloc(%zu) failed", cur);
    fill_pat(p, 0, cur, 9);
    int moves = 0, steps = 0;
    for (size_t next = cur + GROW_STEP; next <= ((size_t)2 << 20); next += GROW_STEP, steps++)
        moves += realloc_kept(&p, &cur, next);
    printf("realloc from %zu KiB to 2 MiB in %d steps: %d moves\n", GROW_FROM >> 10, steps, moves);
    if (hz_loaded && !hz_test_quarantine_variant())
        CHECK(moves <= GROW_MOVES_MAX, "a growing block moved %d times in %d steps (bound %d)",
              moves, steps, GROW_MOVES_MAX);
    /* Shrunk below half, and still above 256 KiB: it gives back its span's tail. */
    const size_t shrink[] = {(size_t)900 << 10, (size_t)400 << 10};
    int shrink_moves = 0;
    for (size_t i = 0; i < sizeof shrink / sizeof shrink[0]; i++) {
        size_t was = cur;
        shrink_moves += realloc_kept(&p, &cur, shrink[i]);
        CHECK(malloc_usable_size(p) < was, "realloc %zu -> %zu: usable size %zu", was, shrink[i],
              malloc_usable_size(p));
    }
    if (hz_loaded && !hz_test_quarantine_variant())
        CHECK(shrink_moves == 0, "a block shrunk from 2 MiB to 900 and 400 KiB moved %d times",
              shrink_moves);
    free(p);
}

/* Alignments of a segment and more with sizes 0 and 1: each block is its own, fully
 * writable and freeable.  (Size 0 at 4 MiB alignment once pointed one past the end
 * of its mapping, into the header of whatever segment came next.) */
static void test_aligned_big(void)
{
    void *small[64];
    for (int i = 0; i < 64; i++) { /* a small segment for a stray pointer to hit */
        small[i] = malloc(64);
        CHECK(small[i] != NULL, "malloc(64) failed");
        memset(small[i], 0x5A, 64);
    }
    for (size_t a = (size_t)1 << 21; a <= ((size_t)1 << 24); a *= 2) {
        for (size_t size = 0; size <= 1; size++) {
            void *p[3] = {aligned_alloc(opaque(a), opaque(size)), memalign(opaque(a), opaque(size)), NULL};
            int rc = posix_memalign(&p[2], opaque(a), opaque(size));
            CHECK(rc == 0, "posix_memalign(%zu, %zu) returned %d", a, size, rc);
            for (int k = 0; k < 3; k++) {
                CHECK(p[k] != NULL && is_aligned(p[k], a), "alignment %zu, size %zu, call %d: %p", a,
                      size, k, p[k]);
                /* At least one byte even for size 0: a block of nothing at the end of
                 * its mapping would be another mapping's first byte, or none.  (The
                 * checked variant gives exactly the size asked for, to catch overruns.) */
                size_t u = malloc_usable_size(p[k]);
                size_t least = size > 0 || hz_test_checked_variant() ? size : 1;
                CHECK(u >= least, "alignment %zu, size %zu: usable %zu", a, size, u);
                memset(p[k], 0xA5, u);
            }
            CHECK(p[0] != p[1] && p[1] != p[2] && p[0] != p[2], "alignment %zu, size %zu: one block twice", a,
                  size);
            for (int k = 0; k < 3; k++)
                free(p[k]);
        }
    }
    for (int i = 0; i < 64; i++) {
        for (int j = 0; j < 64; j++)
            CHECK(((unsigned char *)small[i])[j] == 0x5A, "small block %d overwritten at byte %d", i, j);
        free(small[i]);
    }
}

/* A call that succeeds leaves errno as it found it, as glibc's do (and POSIX 2024
 * requires of free): probes of the kernel that fail on the way (a placement, an
 * in-place resize) must not show.  Large blocks take those paths. */
enum { ERRNO_MARK = 4242 }; /* what errno holds before a call that must keep it */

static void *first_malloc_keeps_errno(void *arg)
{
    (void)arg;
    errno = ERRNO_MARK;
    void *p = malloc(opaque(100));
    if (p == NULL || errno != ERRNO_MARK)
        return (void *)"a thread's first malloc set errno";
    free(p);
    return errno != ERRNO_MARK ? (void *)"a thread's first free set errno" : NULL;
}

static void test_errno_kept(void)
{
    enum { N = 32 };
    void *b[N];
    for (int i = 0; i < N; i++) {
        size_t n = ((size_t)3 << 20) + (size_t)i * 37 * 4096;
        errno = ERRNO_MARK;
        b[i] = malloc(opaque(n));
        CHECK(b[i] != NULL, "malloc(%zu) failed", n);
        CHECK(errno == ERRNO_MARK, "malloc(%zu) succeeded and set errno to %d", n, errno);
    }
    for (int i = 0; i < N; i++) {
        size_t n = ((size_t)3 << 20) * (size_t)(i % 5 + 1) + (size_t)i * 4096;
        errno = ERRNO_MARK;
        void *q = realloc(b[i], opaque(n));
        CHECK(q != NULL, "realloc to %zu failed", n);
        CHECK(errno == ERRNO_MARK, "realloc to %zu succeeded and set errno to %d", n, errno);
        b[i] = q;
    }
    for (int i = 0; i < N; i++) {
        errno = ERRNO_MARK;
        free(b[i]);
        CHECK(errno == ERRNO_MARK, "free of a large block set errno to %d", errno);
    }
    for (size_t i = 0; i < 8; i++) {
        errno = ERRNO_MARK;
        void *p = memalign((size_t)1 << 22, (i + 1) << 20);
        CHECK(p != NULL, "memalign(4 MiB, %zu MiB) failed", i + 1);
        CHECK(errno == ERRNO_MARK, "memalign(4 MiB, %zu MiB) succeeded and set errno to %d", i + 1, errno);
        free(p);
        CHECK(errno == ERRNO_MARK, "free of an aligned large block set errno to %d", errno);
    }
    errno = ERRNO_MARK;
    malloc_trim(0);
    CHECK(errno == ERRNO_MARK, "malloc_trim set errno to %d", errno);

    /* A thread's first allocation makes its heap (and, with stats on, its slot). */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, first_malloc_keeps_errno, NULL) == 0, "pthread_create failed");
    void *res = NULL;
    CHECK(pthread_join(t, &res) == 0, "pthread_join failed");
    CHECK(res == NULL, "%s", (const char *)res);
}

/* ------------------------------------------------------- exhaustion */
/* In a child whose address space is capped 64 MiB above what it maps now: malloc
 * until it fails, free every fifth block, and get as many back (the pages they are
 * in had left their queues full); then free everything and get one 40 MiB block,
 * from memory the small blocks held, and 32 KiB blocks until the cap bites again,
 * errno untouched by every one that succeeds.  Exit status: which step failed. */
static int exhaustion_child(void)
{
    size_t base = hz_test_vm_size();
    if (base == 0)
        return 2;
    enum { MAX = 1 << 21 };
    void **p = mmap(NULL, MAX * sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
    if (p == MAP_FAILED)
        return 2;
    struct rlimit rl = {base + ((size_t)64 << 20), base + ((size_t)64 << 20)};
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        return 2;
    size_t n = 0;
    errno = 0;
    while (n < MAX && (p[n] = malloc(opaque(100))) != NULL)
        memset(p[n++], 1, 100);
    if (n == MAX || n < 1000 || errno != ENOMEM)
        return 3; /* the cap did not bite, or failed another way */
    size_t freed = 0;
    for (size_t i = 0; i < n; i += 5, freed++) {
        free(p[i]);
        p[i] = NULL;
    }
    for (size_t i = 0; i < n; i += 5)
        if ((p[i] = malloc(opaque(100))) == NULL)
            return 4; /* blocks of the size just freed, refused */
    for (size_t i = 0; i < n; i++)
        free(p[i]);
    /* The first try of this one fails; the allocator gives back what it holds and
     * tries again.  A malloc that succeeds leaves errno alone. */
    errno = 0;
    void *big = malloc(opaque((size_t)40 << 20));
    if (big == NULL)
        return 5; /* freed small blocks' memory kept from a large one */
    if (errno != 0)
        return 6;
    free(big);
    /* Blocks of a class the heap has no page of, until the cap bites: every malloc
     * that succeeds, those whose page came after a retry too, leaves errno alone. */
    n = 0;
    for (;;) {
        errno = 0;
        if (n == MAX || (p[n] = malloc(opaque(32 << 10))) == NULL)
            break;
        if (errno != 0)
            return 6;
        memset(p[n++], 2, 32 << 10);
    }
    for (size_t i = 0; i < n; i++)
        free(p[i]);
    return freed > 0 ? 0 : 3;
}

/* Runs child() in a child process (whose limits die with it), which must exit 0;
 * `what` says what its other exits mean. */
static void expect_child_ok(int (*child)(void), const char *what)
{
    pid_t pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0)
        _exit(child());
    int st = hz_test_wait_child(pid, 120000);
    CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %#x", what, (unsigned)st);
}

static void test_exhaustion(void)
{
    expect_child_ok(exhaustion_child,
                    "exhaustion child (exit 3: the cap did not bite; 4: malloc(100) refused "
                    "after blocks of that size were freed; 5: 40 MiB refused after everything "
                    "was freed; 6: a malloc that succeeded set errno; a signal: crashed)");
}

/* In a child: hakozuna keeps memory mapped after frees (empty segments, pages held
 * for reuse).  Under an address-space cap that leaves less room than a large
 * request needs, but enough once the allocator gives back what it keeps, the request
 * must succeed, also when it is larger than all the allocator maps (it once gave
 * nothing back then, reasoning that it could not make room).  Exit status: 2 setup,
 * 3 the request failed. */
static int reclaim_child(void)
{
    enum { N = 64 };
    void *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = malloc(opaque((size_t)1 << 20)); /* 64 MiB in 1 MiB blocks */
        if (v[i] == NULL)
            return 2;
        memset(v[i], 1, (size_t)1 << 20);
    }
    for (int i = 0; i < N; i++)
        free(v[i]);
    struct hz_stats st;
    size_t vmsize = hz_test_vm_size();
    if (!hz_test_stats(&st) || vmsize == 0)
        return 2;
    size_t mapped = (size_t)st.bytes_mapped;
    size_t request = mapped + ((size_t)1 << 20);
    /* Room for the request less 2 MiB: it fits only if at least 6 MiB go back (4 of
     * them for an aligned reservation's slack). */
    struct rlimit rl = {vmsize + request - ((size_t)2 << 20), RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        return 2;
    char *volatile big = malloc(opaque(request));
    if (big == NULL)
        return 3;
    memset(big, 2, request);
    free(big);
    return 0;
}

static void test_reclaim_for_large(void)
{
    if (!hz_loaded)
        return;
    expect_child_ok(reclaim_child, "reclaim child (exit 2: setup failed; 3: a large block "
                                   "that fits once the allocator gives back what it keeps "
                                   "was refused)");
}

/* In a child with no address space left to map: a block that realloc grows past
 * 256 KiB, which would move to a mapping of its own, goes to the size classes,
 * whose segment has the room, instead of failing, and leaves errno alone.  Exit
 * status: 2 setup, 3 the realloc failed, 4 its bytes were lost, 5 errno set. */
static int realloc_unmappable_child(void)
{
    const size_t kib = 1024;
    char *p = malloc(opaque(200 * kib));
    if (p == NULL)
        return 2;
    memset(p, 3, 200 * kib);
    size_t vmsize = hz_test_vm_size();
    if (vmsize == 0)
        return 2;
    struct rlimit rl = {vmsize, RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        return 2;
    errno = 0;
    char *q = realloc(p, opaque(300 * kib));
    if (q == NULL)
        return 3;
    if (q[0] != 3 || q[200 * kib - 1] != 3)
        return 4;
    if (errno != 0)
        return 5;
    memset(q, 4, 300 * kib);
    free(q);
    return 0;
}

static void test_realloc_unmappable(void)
{
    if (!hz_loaded)
        return;
    expect_child_ok(realloc_unmappable_child,
                    "realloc-unmappable child (exit 2: setup failed; 3: a block grown past "
                    "256 KiB was refused although its segment had room; 4: its bytes were lost; "
                    "5: the realloc that succeeded set errno)");
}

/* The quarantines of the checked and hardened variants hold freed blocks up to a
 * number and a number of bytes: 1 MiB blocks freed one after the other must not stay
 * resident by the hundred (they did: 511 MiB in the checked variant, whose budget
 * is 32 MiB, and 256 MiB in the hardened one, 256 blocks per thread). */
static void test_quarantine_bytes(void)
{
    if (!hz_loaded)
        return;
    const size_t block = (size_t)1 << 20;
    long before = hz_test_rss_kib();
    for (int i = 0; i < 1000; i++) {
        char *volatile p = malloc(opaque(block));
        CHECK(p != NULL, "malloc(1 MiB) failed");
        memset(p, 0x77, block);
        free(p);
    }
    long after = hz_test_rss_kib();
    printf("1000 blocks of 1 MiB freed one after the other: RSS grew %ld KiB\n", after - before);
    CHECK(after - before < 48L * 1024, "RSS grew %ld KiB (bound 48 MiB)", after - before);
}

/* ------------------------------------------------------------- calloc */

static void test_calloc_dirty(void)
{
    enum { NSMALL = 3000, NMED = 300, NLARGE = 12 };
    enum { N = NSMALL + NMED + NLARGE };
    static size_t sizes[N];
    static void *ptrs[N];
    uint64_t rng = 12345;
    for (int i = 0; i < NSMALL; i++)
        sizes[i] = hz_test_rand_range(&rng, 1, 1024);
    for (int i = NSMALL; i < NSMALL + NMED; i++)
        sizes[i] = hz_test_rand_range(&rng, 1024, 65536);
    for (int i = NSMALL + NMED; i < N; i++)
        sizes[i] = hz_test_rand_range(&rng, (size_t)1 << 20, (size_t)8 << 20);

    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            ptrs[i] = malloc(sizes[i]);
            CHECK(ptrs[i] != NULL, "malloc(%zu) failed", sizes[i]);
            memset(ptrs[i], 0xA5, malloc_usable_size(ptrs[i]));
        }
        /* Free in an order that differs from round to round. */
        for (int i = 0; i < N; i++) {
            int j = round == 1 ? N - 1 - i : (round == 2 ? (i * 7919) % N : i);
            free(ptrs[j]);
        }
        for (int i = 0; i < N; i++) {
            int j = round == 0 ? N - 1 - i : i;
            size_t s = sizes[j];
            /* Mix the two argument orders and count > 1. */
            if ((j & 3) == 0 && s % 8 == 0)
                ptrs[j] = calloc(s / 8, 8);
            else if ((j & 3) == 1)
                ptrs[j] = calloc(s, 1);
            else
                ptrs[j] = calloc(1, s);
            CHECK(ptrs[j] != NULL, "calloc(%zu) failed", s);
            CHECK(is_aligned(ptrs[j], 16), "calloc(%zu) not 16-byte aligned", s);
            size_t bad = 0;
            CHECK(all_bytes(ptrs[j], s, 0, &bad),
                  "calloc(%zu) after dirty reuse: byte %zu is not zero (round %d)", s, bad, round);
            memset(ptrs[j], 0xA5, s);
        }
        for (int i = 0; i < N; i++)
            free(ptrs[i]);
    }
    /* calloc(0, n) and calloc(n, 0) give freeable blocks. */
    void *a = calloc(opaque(0), 16), *b = calloc(16, opaque(0));
    CHECK(a != NULL && b != NULL, "calloc with a zero argument returned NULL");
    free(a);
    free(b);
}

/* Run first, while the heap's memory is fresh. */
static void test_calloc_fresh_faults(void)
{
    if (hz_loaded)
        hz_test_calloc_fresh_faults("calloc'd");
}

/* hz_usable_size is 0 for a pointer hakozuna did not hand out, a pointer into a
 * block too (it once gave the block's size for one into a small block, which invites
 * writing that many bytes past the block's end).  The checked variant stops the
 * program instead (test_debug.sh). */
static void test_usable_interior(void)
{
    if (!hz_loaded || hz_test_checked_variant())
        return;
    size_t (*usable)(const void *) = NULL;
    void *sym = hz_test_sym("hz_usable_size");
    memcpy(&usable, &sym, sizeof usable);
    CHECK(usable != NULL, "hz_usable_size is not exported");
    const size_t sizes[] = {1, 16, 24, 100, 1000, 5000, 40000, 300000, (size_t)3 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *p = malloc(opaque(sizes[i]));
        CHECK(p != NULL, "malloc(%zu) failed", sizes[i]);
        size_t u = usable(p);
        CHECK(u >= sizes[i], "hz_usable_size(malloc(%zu)) = %zu", sizes[i], u);
        const size_t offs[] = {1, 8, u / 2, u - 1};
        for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++) {
            if (offs[k] == 0)
                continue;
            size_t got = usable(p + offs[k]);
            CHECK(got == 0, "hz_usable_size(malloc(%zu) + %zu) = %zu, want 0", sizes[i], offs[k],
                  got);
        }
        free(p);
    }
}

/* ------------------------------------------------- sized free & friends */

static void test_sized_free(void)
{
    void *s1 = hz_test_sym("free_sized");
    void *s2 = hz_test_sym("free_aligned_sized");
    void *s3 = hz_test_sym("cfree");
    if (hz_loaded) {
        CHECK(s1 != NULL, "free_sized is not exported");
        CHECK(s2 != NULL, "free_aligned_sized is not exported");
        CHECK(s3 != NULL, "cfree is not exported");
    }
    free_sized_fn fs = NULL;
    free_aligned_sized_fn fas = NULL;
    cfree_fn cf = NULL;
    memcpy(&fs, &s1, sizeof fs);
    memcpy(&fas, &s2, sizeof fas);
    memcpy(&cf, &s3, sizeof cf);

    uint64_t rng = 99;
    for (int i = 0; i < 20000; i++) {
        size_t s = (i % 50 == 0) ? hz_test_rand_range(&rng, 100000, 3000000)
                                 : hz_test_rand_range(&rng, 0, 4000);
        void *p = malloc(s);
        CHECK(p != NULL, "malloc(%zu) failed", s);
        memset(p, 1, s);
        switch (i % 4) {
        case 0:
            if (fs) {
                fs(p, s);
                break;
            }
            free(p);
            break;
        case 1: {
            void *q = calloc(1, s);
            CHECK(q != NULL, "calloc failed");
            if (fs)
                fs(q, s);
            else
                free(q);
            if (cf)
                cf(p);
            else
                free(p);
            break;
        }
        case 2: {
            size_t a = (size_t)16 << (i % 9);
            size_t as = (s + a - 1) / a * a;
            void *q = aligned_alloc(a, as);
            CHECK(q != NULL && is_aligned(q, a), "aligned_alloc(%zu, %zu)", a, as);
            memset(q, 2, as);
            if (fas)
                fas(q, a, as);
            else
                free(q);
            free(p);
            break;
        }
        default:
            free(p);
            break;
        }
    }
    if (fs)
        fs(NULL, 0);
    if (fas)
        fas(NULL, 64, 0);
    if (cf)
        cf(NULL);
}

/* ---------------------------------------------------- random churn */

static void test_random_churn(void)
{
    enum { SLOTS = 4096, OPS = 400000 };
    static struct blk b[SLOTS];
    uint64_t rng = 7;
    for (int op = 0; op < OPS; op++) {
        size_t i = (size_t)(hz_test_rand(&rng) % SLOTS);
        uint64_t r = hz_test_rand(&rng);
        /* Mostly small, sometimes medium, rarely large. */
        size_t s;
        if ((r & 255) == 0)
            s = hz_test_rand_range(&rng, 65536, (size_t)1 << 20);
        else if ((r & 15) == 0)
            s = hz_test_rand_range(&rng, 1024, 65536);
        else
            s = hz_test_rand_range(&rng, 0, 1024);
        if (b[i].p) {
            /* Verify head and tail (and all of it for small blocks). */
            size_t chk = b[i].size <= 2048 ? b[i].size : 256;
            size_t bad = 0;
            CHECK(all_bytes(b[i].p, chk, b[i].fill, &bad),
                  "block %zu (size %zu) corrupted at %zu", i, b[i].size, bad);
            if (b[i].size > 2048)
                CHECK(all_bytes(b[i].p + b[i].size - 256, 256, b[i].fill, &bad),
                      "block %zu (size %zu) tail corrupted", i, b[i].size);
            /* realloc(p, 0) is implementation-defined: not used here. */
            if ((r >> 8) % 3 == 0 && s > 0) {
                unsigned char *q = (unsigned char *)realloc(b[i].p, s);
                CHECK(q != NULL, "realloc(%zu) failed", s);
                size_t common = s < b[i].size ? s : b[i].size;
                size_t c1 = common <= 2048 ? common : 256;
                CHECK(all_bytes(q, c1, b[i].fill, &bad), "realloc %zu -> %zu lost contents",
                      b[i].size, s);
                if (common > 2048)
                    CHECK(all_bytes(q + common - 256, 256, b[i].fill, &bad),
                          "realloc %zu -> %zu lost the end of the contents", b[i].size, s);
                b[i].p = q;
            } else {
                free(b[i].p);
                b[i].p = NULL;
                continue;
            }
        } else {
            b[i].p = (unsigned char *)malloc(s);
            CHECK(b[i].p != NULL, "malloc(%zu) failed", s);
        }
        CHECK(is_aligned(b[i].p, 16), "block not 16-byte aligned");
        b[i].size = s;
        b[i].usable = malloc_usable_size(b[i].p);
        CHECK(b[i].usable >= s, "usable %zu < %zu", b[i].usable, s);
        b[i].fill = (unsigned char)(r >> 40);
        memset(b[i].p, b[i].fill, s);
    }
    struct blk *live = (struct blk *)malloc(SLOTS * sizeof *live);
    CHECK(live != NULL, "malloc failed");
    size_t nl = 0;
    for (size_t i = 0; i < SLOTS; i++)
        if (b[i].p)
            live[nl++] = b[i];
    check_disjoint(live, nl);
    free(live);
    for (size_t i = 0; i < SLOTS; i++) {
        free(b[i].p);
        b[i].p = NULL;
    }
}

/* ------------------------------------------------ trim / mallinfo */

static void test_info(void)
{
    free(NULL);
    free(NULL);
    for (int i = 0; i < 3; i++) {
        int r = malloc_trim(0);
        CHECK(r == 0 || r == 1, "malloc_trim(0) returned %d", r);
    }
    int r = malloc_trim(1 << 20);
    CHECK(r == 0 || r == 1, "malloc_trim(1 MiB) returned %d", r);

    enum { N = 65536, SZ = 64 }; /* 4 MiB in small blocks */
    void **v = (void **)malloc(N * sizeof *v);
    CHECK(v != NULL, "malloc failed");
    struct mallinfo2 a = mallinfo2();
    for (int i = 0; i < N; i++) {
        v[i] = malloc(SZ);
        CHECK(v[i] != NULL, "malloc(%d) failed", SZ);
        memset(v[i], i & 0xff, SZ);
    }
    struct mallinfo2 b = mallinfo2();
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    struct mallinfo old = mallinfo();
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    for (int i = 0; i < N; i++)
        free(v[i]);
    struct mallinfo2 c = mallinfo2();
    printf("mallinfo2 uordblks: before %zu, with 4 MiB live %zu, after free %zu; "
           "arena %zu, hblkhd %zu; mallinfo uordblks %d\n",
           a.uordblks, b.uordblks, c.uordblks, b.arena, b.hblkhd, old.uordblks);
    if (hz_loaded) {
        CHECK(b.uordblks >= a.uordblks + ((size_t)1 << 20),
              "mallinfo2().uordblks grew from %zu to only %zu after allocating 4 MiB", a.uordblks,
              b.uordblks);
        CHECK(c.uordblks + ((size_t)1 << 20) <= b.uordblks,
              "mallinfo2().uordblks did not shrink after freeing 4 MiB (%zu -> %zu)", b.uordblks,
              c.uordblks);
        CHECK(b.arena + b.hblkhd >= b.uordblks,
              "mallinfo2(): arena + hblkhd (mapped) %zu + %zu < uordblks (in use) %zu", b.arena,
              b.hblkhd, b.uordblks);
        struct hz_stats st;
        CHECK(hz_test_stats(&st), "hz_stats_get is not available");
        struct mallinfo2 d = mallinfo2();
        size_t diff = d.uordblks > st.bytes_in_use ? d.uordblks - st.bytes_in_use
                                                   : (size_t)st.bytes_in_use - d.uordblks;
        CHECK(diff < ((size_t)1 << 20), "mallinfo2().uordblks %zu but hz_stats bytes_in_use %llu",
              d.uordblks, (unsigned long long)st.bytes_in_use);
        CHECK(old.uordblks != 0, "mallinfo().uordblks is 0 with 4 MiB in use");
    }
    free(v);
    r = malloc_trim(0);
    CHECK(r == 0 || r == 1, "malloc_trim(0) returned %d", r);
}

int main(void)
{
    hz_loaded = hz_test_require_loaded();
    long ps = sysconf(_SC_PAGESIZE);
    page_size = ps > 0 ? (size_t)ps : 4096;

    double t0 = hz_test_now();
    test_calloc_fresh_faults();
    test_exhaustion(); /* early: memory freed by earlier tests would soften the cap */
    test_reclaim_for_large();
    test_realloc_unmappable();
    test_malloc_zero();
    test_malloc_sizes();
    test_errors();
    test_aligned();
    test_aligned_big();
    test_realloc();
    test_realloc_grow();
    test_errno_kept();
    test_calloc_dirty();
    test_quarantine_bytes();
    test_sized_free();
    test_usable_interior();
    test_random_churn();
    test_info();
    printf("test_api: all checks passed (%.2f s)\n", hz_test_now() - t0);
    return 0;
}
