/* posix.c - the rules of the POSIX and GNU allocation functions (alignment checks,
 * overflow, errno), kept apart from the fast paths they call. */
#include <errno.h>

#include "entry.h"
#include "posix.h"

static bool is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

int hz_posix_memalign_impl(void **out, size_t alignment, size_t size) {
    if (!is_pow2(alignment) || alignment % sizeof(void *) != 0) return EINVAL;
    int saved = errno;
    void *p = hz_entry_aligned(alignment, size);
    errno = saved; /* posix_memalign reports through its result only */
    if (p == NULL) return ENOMEM;
    *out = p;
    return 0;
}

void *hz_aligned_alloc_impl(size_t alignment, size_t size) {
    if (!is_pow2(alignment)) {
        errno = EINVAL;
        return NULL;
    }
    return hz_entry_aligned(alignment, size);
}

/* As glibc: a non-power-of-two alignment is rounded up to the next power of two. */
void *hz_memalign_impl(size_t alignment, size_t size) {
    if (alignment > ((size_t)1 << (sizeof(size_t) * 8 - 2))) {
        errno = EINVAL;
        return NULL;
    }
    if (!is_pow2(alignment)) {
        size_t a = HZ_ALIGNMENT;
        while (a < alignment) a <<= 1;
        alignment = a;
    }
    return hz_entry_aligned(alignment, size);
}

void *hz_valloc_impl(size_t size) { return hz_entry_aligned(hz_os_page_size, size); }

void *hz_pvalloc_impl(size_t size) {
    size_t ps = hz_os_page_size;
    if (size > SIZE_MAX - ps) {
        errno = ENOMEM;
        return NULL;
    }
    return hz_entry_aligned(ps, hz_align_up(size ? size : 1, ps));
}

void *hz_reallocarray_impl(void *p, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return hz_entry_realloc(p, total);
}
