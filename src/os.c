/* os.c - every call into the operating system: mappings, purging, time, diagnostics.
 * Nothing here allocates through libc, so it is safe before and during init. */
#include <errno.h>
#include <sched.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

size_t hz_os_page_size = 4096;

void hz_os_init(void) {
    unsigned long ps = getauxval(AT_PAGESZ);
    if (ps >= 4096 && (ps & (ps - 1)) == 0) hz_os_page_size = ps;
}

static void *map_anon(void *hint, size_t size, int prot) {
    void *p = mmap(hint, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* A mapping of `size` bytes starting at a multiple of `alignment` (a power of two that
 * is at least the page size): over-map, then cut off the misaligned head and tail. */
void *hz_os_map_aligned(size_t size, size_t alignment) {
    size = hz_align_up(size, hz_os_page_size);
    if (size == 0 || size > PTRDIFF_MAX - alignment) {
        errno = ENOMEM;
        return NULL;
    }
    char *p = map_anon(NULL, size, PROT_READ | PROT_WRITE);
    if (p == NULL) return NULL;
    if (((uintptr_t)p & (alignment - 1)) != 0) {
        munmap(p, size);
        size_t over = size + alignment - hz_os_page_size;
        p = map_anon(NULL, over, PROT_READ | PROT_WRITE);
        if (p == NULL) return NULL;
        char *aligned = (char *)hz_align_up((uintptr_t)p, alignment);
        if (aligned > p) munmap(p, (size_t)(aligned - p));
        char *end = p + over, *want = aligned + size;
        if (end > want) munmap(want, (size_t)(end - want));
        p = aligned;
    }
    if (((uintptr_t)p + size - 1) >> HZ_VA_BITS) { /* beyond the segment map */
        munmap(p, size);
        errno = ENOMEM;
        return NULL;
    }
#if HZ_THP
    madvise(p, size, MADV_HUGEPAGE);
#endif
    hz_gstat_add(bytes_mapped, size);
    return p;
}

void hz_os_unmap(void *p, size_t size) {
    size = hz_align_up(size, hz_os_page_size);
    munmap(p, size);
    hz_gstat_sub(bytes_mapped, size);
    hz_gstat_add(bytes_unmapped, size);
}

/* Give the physical pages back; the range stays mapped and reads back as zero. */
void hz_os_purge(void *p, size_t size) {
    uintptr_t start = hz_align_up((uintptr_t)p, hz_os_page_size);
    uintptr_t end = ((uintptr_t)p + size) & ~(uintptr_t)(hz_os_page_size - 1);
    if (end <= start) return;
    if (madvise((void *)start, end - start, MADV_DONTNEED) == 0)
        hz_gstat_add(bytes_purged, end - start);
}

/* Grow or shrink a mapping without moving it. */
bool hz_os_resize_in_place(void *p, size_t old_size, size_t new_size) {
    old_size = hz_align_up(old_size, hz_os_page_size);
    new_size = hz_align_up(new_size, hz_os_page_size);
    if (mremap(p, old_size, new_size, 0) == MAP_FAILED) return false;
    if (new_size > old_size) hz_gstat_add(bytes_mapped, new_size - old_size);
    else {
        hz_gstat_sub(bytes_mapped, old_size - new_size);
        hz_gstat_add(bytes_unmapped, old_size - new_size);
    }
    return true;
}

/* Move a mapping to a new aligned place of new_size bytes: the kernel moves the page
 * tables, nothing is copied. */
void *hz_os_remap(void *p, size_t old_size, size_t new_size, size_t alignment) {
    old_size = hz_align_up(old_size, hz_os_page_size);
    new_size = hz_align_up(new_size, hz_os_page_size);
    void *target = hz_os_map_aligned(new_size, alignment);
    if (target == NULL) return NULL;
    void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    if (q == MAP_FAILED) {
        hz_os_unmap(target, new_size);
        return NULL;
    }
    hz_gstat_sub(bytes_mapped, old_size); /* the old range is gone, target now holds it */
    return q;
}

uint64_t hz_os_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void hz_os_write_err(const char *msg) {
    size_t n = strlen(msg);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, msg, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            return;
        }
        msg += w;
        n -= (size_t)w;
    }
}

void hz_os_yield(void) { sched_yield(); }

void hz_lock_acquire(hz_lock_t *l) {
    for (unsigned spins = 0;; spins++) {
        if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire)) return;
        while (atomic_load_explicit(&l->held, memory_order_relaxed)) {
            if (++spins > 64) hz_os_yield(); /* a 2-core box must let the holder run */
        }
    }
}

/* Metadata (heaps) comes from its own mappings and is never freed: heaps are recycled. */
static hz_lock_t meta_lock;
static char *meta_cur, *meta_end;

void *hz_meta_alloc(size_t size) {
    size = hz_align_up(size, 64);
    hz_lock_acquire(&meta_lock);
    if (meta_cur == NULL || (size_t)(meta_end - meta_cur) < size) {
        size_t chunk = hz_align_up(size > (1u << 20) ? size : (1u << 20), hz_os_page_size);
        char *p = map_anon(NULL, chunk, PROT_READ | PROT_WRITE);
        if (p == NULL) {
            hz_lock_release(&meta_lock);
            return NULL;
        }
        hz_gstat_add(bytes_mapped, chunk);
        meta_cur = p;
        meta_end = p + chunk;
    }
    void *r = meta_cur;
    meta_cur += size;
    hz_lock_release(&meta_lock);
    return r;
}

hz_lock_t *hz_meta_lock(void) { return &meta_lock; }
