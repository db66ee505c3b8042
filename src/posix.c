/* posix.c - the rules of the POSIX and GNU allocation functions (alignment checks,
 * overflow, errno), kept apart from the fast paths they call.  Every edge case
 * answers as glibc 2.36 does (tests/test_glibc_edges.c holds the table), since
 * programs written against glibc read its results and errno. */
#include <errno.h>

#include "entry.h"
#include "posix.h"

static bool is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* memalign's rules, which aligned_alloc, valloc and posix_memalign share in glibc:
 * above SIZE_MAX / 2 + 1 no power of two is left, so EINVAL; any other alignment is
 * rounded up to a power of two (16 at least).  A request that cannot fit in the
 * address space together with its alignment is ENOMEM. */
void *hz_memalign_impl(size_t alignment, size_t size) {
    if (alignment > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    alignment = hz_alignment_rounded(alignment);
    if (alignment > PTRDIFF_MAX || size > PTRDIFF_MAX - alignment) {
        errno = ENOMEM;
        return NULL;
    }
    return hz_entry_aligned(alignment, size);
}

/* Failures are reported through the result, and errno is ENOMEM after one that ran
 * out of memory (glibc's is; EINVAL leaves errno alone). */
int hz_posix_memalign_impl(void **out, size_t alignment, size_t size) {
    if (alignment % sizeof(void *) != 0 || !is_pow2(alignment)) return EINVAL;
    void *p = hz_memalign_impl(alignment, size);
    if (p == NULL) {
        errno = ENOMEM;
        return ENOMEM;
    }
    *out = p;
    return 0;
}

/* glibc 2.36's aligned_alloc is memalign: a non-power-of-two alignment is rounded up. */
void *hz_aligned_alloc_impl(size_t alignment, size_t size) {
    return hz_memalign_impl(alignment, size);
}

void *hz_valloc_impl(size_t size) { return hz_memalign_impl(hz_os_page_size(), size); }

void *hz_pvalloc_impl(size_t size) {
    size_t ps = hz_os_page_size();
    if (size > SIZE_MAX - (ps - 1)) {
        errno = ENOMEM;
        return NULL;
    }
    return hz_memalign_impl(ps, hz_align_up(size ? size : 1, ps));
}

void *hz_reallocarray_impl(void *p, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return hz_entry_realloc(p, total);
}

/* mallopt: glibc's parameters are accepted (1) and ignored, since hakozuna's tuning
 * is fixed when it is built; M_MXFAST keeps glibc's range check (at most
 * 80 * sizeof(size_t) / 4 bytes).  A parameter glibc does not document is refused
 * with 0, as mallopt(3) describes (glibc 2.36 itself answers 1 to any number). */
int hz_mallopt_impl(int param, int value) {
    switch (param) {
    case M_MXFAST: return value >= 0 && (size_t)value <= 80 * sizeof(size_t) / 4;
    case M_TRIM_THRESHOLD:
    case M_TOP_PAD:
    case M_MMAP_THRESHOLD:
    case M_MMAP_MAX:
    case M_CHECK_ACTION:
    case M_PERTURB:
    case M_ARENA_TEST:
    case M_ARENA_MAX: return 1;
    default: return 0;
    }
}
