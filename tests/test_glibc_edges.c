/* test_glibc_edges.c - the edge cases of memalign, posix_memalign, aligned_alloc,
 * valloc, pvalloc and reallocarray answer exactly as glibc 2.36 answers them:
 * NULL or not, the return code, errno (set, or left alone), the alignment.
 *
 * The table is glibc's behaviour: run without hakozuna
 * (HZ_TEST_ALLOW_SYSTEM=1 tests/test_glibc_edges) the test checks glibc itself.
 * Cases whose outcome depends on how much memory the machine has are left out.
 * The functions are called through volatile pointers: gcc assumes that
 * posix_memalign leaves errno alone and would fold the reads away.
 */
#include "hz_test.h"

#include <malloc.h>
#include <stddef.h>

#define UNTOUCHED EDOM /* errno before every call; still there: not set */
#define M SIZE_MAX
#define H ((size_t)1 << 63)
#define Q ((size_t)1 << 62)
#define PD ((size_t)PTRDIFF_MAX)

enum fn { MEMALIGN, POSIX_MEMALIGN, ALIGNED_ALLOC, VALLOC, PVALLOC, REALLOCARRAY };
static const char *const fn_name[] = {"memalign", "posix_memalign", "aligned_alloc",
                                      "valloc", "pvalloc", "reallocarray"};

typedef struct {
    enum fn fn;
    size_t a, b;    /* (alignment, size), (size), or (count, size) */
    int result;     /* posix_memalign's return code; for the others 0: a block, 1: NULL */
    int err;        /* errno after the call */
    size_t align;   /* alignment of the block (0: the page size) */
} edge_t;

static const edge_t edges[] = {
    {MEMALIGN, 0, 1, 0, UNTOUCHED, 16},
    {MEMALIGN, 1, 1, 0, UNTOUCHED, 16},
    {MEMALIGN, 3, 1, 0, UNTOUCHED, 16},
    {MEMALIGN, 8, 100, 0, UNTOUCHED, 16},
    {MEMALIGN, 24, 1, 0, UNTOUCHED, 32},
    {MEMALIGN, 48, 100, 0, UNTOUCHED, 64},
    {MEMALIGN, 4097, 10, 0, UNTOUCHED, 8192},
    {MEMALIGN, 4096, 0, 0, UNTOUCHED, 4096},
    {MEMALIGN, Q + 1, 1, 1, ENOMEM, 0},
    {MEMALIGN, H - 1, 1, 1, ENOMEM, 0},
    {MEMALIGN, H, 1, 1, ENOMEM, 0},
    {MEMALIGN, H + 1, 1, 1, EINVAL, 0},
    {MEMALIGN, M, 1, 1, EINVAL, 0},
    {MEMALIGN, 8, M, 1, ENOMEM, 0},
    {MEMALIGN, 64, M, 1, ENOMEM, 0},
    {MEMALIGN, 64, PD, 1, ENOMEM, 0},
    {MEMALIGN, 64, PD + 1, 1, ENOMEM, 0},
    {POSIX_MEMALIGN, 0, 8, EINVAL, UNTOUCHED, 0},
    {POSIX_MEMALIGN, 4, 8, EINVAL, UNTOUCHED, 0},
    {POSIX_MEMALIGN, 24, 8, EINVAL, UNTOUCHED, 0},
    {POSIX_MEMALIGN, H + 8, 1, EINVAL, UNTOUCHED, 0},
    {POSIX_MEMALIGN, 8, 8, 0, UNTOUCHED, 16},
    {POSIX_MEMALIGN, 16, 0, 0, UNTOUCHED, 16},
    {POSIX_MEMALIGN, 8192, 1, 0, UNTOUCHED, 8192},
    {POSIX_MEMALIGN, 16, M, ENOMEM, ENOMEM, 0},
    {POSIX_MEMALIGN, 64, PD, ENOMEM, ENOMEM, 0},
    {POSIX_MEMALIGN, 4096, M - 4096, ENOMEM, ENOMEM, 0},
    {POSIX_MEMALIGN, Q, 1, ENOMEM, ENOMEM, 0},
    {POSIX_MEMALIGN, H, 1, ENOMEM, ENOMEM, 0},
    {ALIGNED_ALLOC, 0, 8, 0, UNTOUCHED, 16},
    {ALIGNED_ALLOC, 3, 8, 0, UNTOUCHED, 16},
    {ALIGNED_ALLOC, 24, 8, 0, UNTOUCHED, 32},
    {ALIGNED_ALLOC, 64, 13, 0, UNTOUCHED, 64},
    {ALIGNED_ALLOC, 16, 0, 0, UNTOUCHED, 16},
    {ALIGNED_ALLOC, 4096, M, 1, ENOMEM, 0},
    {ALIGNED_ALLOC, H, 1, 1, ENOMEM, 0},
    {ALIGNED_ALLOC, H + 1, 1, 1, EINVAL, 0},
    {ALIGNED_ALLOC, M, 1, 1, EINVAL, 0},
    {VALLOC, 0, 0, 0, UNTOUCHED, 0},
    {VALLOC, 0, 1, 0, UNTOUCHED, 0},
    {VALLOC, 0, M, 1, ENOMEM, 0},
    {VALLOC, 0, M - 4095, 1, ENOMEM, 0},
    {VALLOC, 0, PD, 1, ENOMEM, 0},
    {PVALLOC, 0, 0, 0, UNTOUCHED, 0},
    {PVALLOC, 0, 1, 0, UNTOUCHED, 0},
    {PVALLOC, 0, M, 1, ENOMEM, 0},
    {PVALLOC, 0, M - 4095, 1, ENOMEM, 0},
    {PVALLOC, 0, M - 4096, 1, ENOMEM, 0},
    {PVALLOC, 0, M - 8192, 1, ENOMEM, 0},
    {PVALLOC, 0, PD, 1, ENOMEM, 0},
    {REALLOCARRAY, 0, 0, 0, UNTOUCHED, 16},
    {REALLOCARRAY, 3, 5, 0, UNTOUCHED, 16},
    {REALLOCARRAY, M, 2, 1, ENOMEM, 0},
    {REALLOCARRAY, (size_t)1 << 32, (size_t)1 << 32, 1, ENOMEM, 0},
    {REALLOCARRAY, 1, M, 1, ENOMEM, 0},
    {REALLOCARRAY, 2, PD / 2 + 1, 1, ENOMEM, 0},
};

static void *(*volatile memalign_fn)(size_t, size_t) = memalign;
static int (*volatile posix_memalign_fn)(void **, size_t, size_t) = posix_memalign;
static void *(*volatile aligned_alloc_fn)(size_t, size_t) = aligned_alloc;
static void *(*volatile valloc_fn)(size_t) = valloc;
static void *(*volatile pvalloc_fn)(size_t) = pvalloc;
static void *(*volatile reallocarray_fn)(void *, size_t, size_t) = reallocarray;

static void *call(const edge_t *e, int *result) {
    void *p = NULL;
    switch (e->fn) {
    case MEMALIGN: p = memalign_fn(e->a, e->b); break;
    case POSIX_MEMALIGN: {
        void *out = &p; /* must stay untouched when it fails */
        *result = posix_memalign_fn(&out, e->a, e->b);
        if (*result != 0) CHECK(out == &p, "posix_memalign(%zu, %zu) wrote its output", e->a, e->b);
        return *result == 0 ? out : NULL;
    }
    case ALIGNED_ALLOC: p = aligned_alloc_fn(e->a, e->b); break;
    case VALLOC: p = valloc_fn(e->b); break;
    case PVALLOC: p = pvalloc_fn(e->b); break;
    case REALLOCARRAY: p = reallocarray_fn(NULL, e->a, e->b); break;
    }
    *result = p == NULL;
    return p;
}

/* reallocarray of a live block: an overflow leaves it alone and sets ENOMEM;
 * a zero count frees it and returns NULL, errno untouched (glibc's realloc(p, 0)). */
static void reallocarray_of_block(void) {
    char *p = malloc(100);
    CHECK(p != NULL, "malloc(100) failed");
    memset(p, 0x5a, 100);
    errno = UNTOUCHED;
    CHECK(reallocarray_fn(p, M, 2) == NULL && errno == ENOMEM, "reallocarray(p, SIZE_MAX, 2)");
    for (int i = 0; i < 100; i++) CHECK(p[i] == 0x5a, "a failed reallocarray changed the block");
    errno = UNTOUCHED;
    CHECK(reallocarray_fn(p, 0, 8) == NULL, "reallocarray(p, 0, 8) returned a block");
    CHECK(errno == UNTOUCHED, "reallocarray(p, 0, 8) set errno %d", errno);
}

int main(void) {
    hz_test_require_loaded();
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int bad = 0;
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        const edge_t *e = &edges[i];
        int result;
        errno = UNTOUCHED;
        void *p = call(e, &result);
        int err = errno;
        size_t align = e->align ? e->align : page;
        if (result != e->result || err != e->err || (p != NULL && ((uintptr_t)p & (align - 1)))) {
            printf("FAIL: %s(%#zx, %#zx): result %d errno %d (%p), glibc 2.36: result %d errno %d"
                   " (alignment %zu)\n", fn_name[e->fn], e->a, e->b, result, err, p, e->result,
                   e->err, align);
            bad++;
        }
        if (p != NULL && e->fn == PVALLOC && e->b != 0) /* glibc's pvalloc(0) is tiny */
            CHECK(malloc_usable_size(p) >= page,
                  "pvalloc(%zu): less than a page", e->b);
        free(p);
    }
    reallocarray_of_block();
    printf("%zu edge cases, %d differ from glibc 2.36\n", sizeof edges / sizeof edges[0], bad);
    return bad != 0;
}
