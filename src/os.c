/* os.c - every call into the operating system: mappings, purging, time, diagnostics;
 * and the spin locks, which yield to the OS when they wait.
 * Nothing here allocates through libc, so it is safe before and during init. */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "internal.h"

/* The OS page size, read on first use (a valloc may be the process's first call).
 * HZ_SIMULATED_PAGE_SIZE raises it, so that a 4 KiB kernel exercises the code paths
 * of 16 KiB and 64 KiB kernels: every madvise, mprotect and mapping the allocator
 * makes at a larger granularity is valid at a smaller one. */
_Static_assert((HZ_SIMULATED_PAGE_SIZE & (HZ_SIMULATED_PAGE_SIZE - 1)) == 0 &&
                   HZ_SIMULATED_PAGE_SIZE <= HZ_UNIT_SIZE,
               "HZ_SIMULATED_PAGE_SIZE: a power of two up to 65536");
static _Atomic size_t page_size;

static size_t larger(size_t a, size_t b) { return a > b ? a : b; }

static size_t page_size_init(void) {
    size_t ps = (size_t)getauxval(AT_PAGESZ);
    if (ps < 4096 || (ps & (ps - 1)) != 0) ps = 4096;
    ps = larger(ps, HZ_SIMULATED_PAGE_SIZE);
    if (ps > HZ_UNIT_SIZE) { /* units are committed and purged in whole pages */
        hz_os_write_err("hakozuna: pages larger than 64 KiB are not supported\n");
        abort();
    }
    atomic_store_explicit(&page_size, ps, memory_order_relaxed);
    return ps;
}

size_t hz_os_page_size(void) {
    size_t ps = atomic_load_explicit(&page_size, memory_order_relaxed);
    return ps != 0 ? ps : page_size_init();
}

bool hz_os_prefetchw;

void hz_os_init(void) {
    (void)hz_os_page_size();
#if defined(__x86_64__)
    /* CPUID 0x80000001, ECX bit 8 (Linux's "3dnowprefetch"): some older Intel
     * processors lack the instruction. */
    unsigned a, b, c, d;
    hz_os_prefetchw = __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & bit_PRFCHW) != 0;
#endif
}

size_t hz_os_kernel_page_size(void) {
    size_t ps = (size_t)getauxval(AT_PAGESZ);
    return ps >= 4096 && (ps & (ps - 1)) == 0 ? ps : 4096;
}

long hz_os_tid(void) { return (long)syscall(SYS_gettid); }

/* Whether no thread of this process has kernel id `tid` any more (errno kept). */
bool hz_os_thread_gone(long tid) {
    int saved = errno;
    bool gone = syscall(SYS_tgkill, (long)getpid(), tid, 0) != 0 && errno == ESRCH;
    errno = saved;
    return gone;
}

/* The definition of `name` that follows this library in the lookup order, if it
 * lies in the same object as the address `beside`; NULL otherwise. */
void *hz_os_symbol_next(const char *name, const void *beside) {
    void *f = dlsym(RTLD_NEXT, name);
    Dl_info fi, bi;
    if (f == NULL || !dladdr(f, &fi) || !dladdr(beside, &bi) || fi.dli_fbase != bi.dli_fbase)
        return NULL;
    return f;
}

/* *value += n, and *peak raised to at least the sum. */
void hz_gstat_raise(uint64_t *value, uint64_t *peak, uint64_t n) {
    uint64_t v = __atomic_add_fetch(value, n, __ATOMIC_RELAXED);
    uint64_t p = __atomic_load_n(peak, __ATOMIC_RELAXED);
    while (v > p && !__atomic_compare_exchange_n(peak, &p, v, true, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED)) {
    }
}

/* The kernel calls below keep the caller's errno.  Some fail as part of normal work
 * (a placement probe, an in-place resize, a hint an older kernel does not know), and
 * a malloc or free that succeeds leaves errno as it found it, as glibc's do (POSIX
 * 2024 requires it of free).  Failures to get memory are returned, not put in
 * errno either: an allocation that fails and then succeeds on a retry (after a
 * reclaim) must not leave ENOMEM behind, so only the entry that gives up sets it. */
static void *os_mmap(void *addr, size_t size, int prot, int flags) {
    int e = errno;
    void *p = mmap(addr, size, prot, flags, -1, 0);
    errno = e;
    return p;
}
static int os_munmap(void *p, size_t size) {
    int e = errno, r = munmap(p, size);
    errno = e;
    return r;
}
static int os_mprotect(void *p, size_t size, int prot) {
    int e = errno, r = mprotect(p, size, prot);
    errno = e;
    return r;
}
static int os_madvise(void *p, size_t size, int advice) {
    int e = errno, r = madvise(p, size, advice);
    errno = e;
    return r;
}
static void *os_mremap(void *p, size_t old_size, size_t new_size, int flags, void *target) {
    int e = errno;
    void *q = mremap(p, old_size, new_size, flags, target);
    errno = e;
    return q;
}

/* A failed OS call: counted, so that memory the allocator could not give back (or
 * get) shows in the statistics instead of silently skewing them. */
static void os_failed(void) { hz_gstat_add(os_errors, 1); }

static bool unmap_range(void *p, size_t size) {
    if (os_munmap(p, size) != 0) {
        os_failed();
        return false;
    }
    hz_gstat_sub(bytes_mapped, size);
    return true;
}

/* An aligned reservation of exactly `size` bytes, without ever holding more address
 * space (which counts against ulimit -v): where the kernel puts the mapping, or,
 * if that is misaligned, at the aligned address just below it, which top-down
 * placement leaves free.  NULL when neither works. */
static char *reserve_exact(size_t size, size_t alignment) {
    char *p = os_mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS);
    if (p == MAP_FAILED) return NULL;
    hz_gstat_grow(bytes_mapped, peak_mapped, size);
    if (((uintptr_t)p & (alignment - 1)) == 0) return p;
    unmap_range(p, size);
    char *hint = (char *)((uintptr_t)p & ~(uintptr_t)(alignment - 1));
    p = os_mmap(hint, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE);
    if (p == MAP_FAILED) return NULL;
    hz_gstat_grow(bytes_mapped, peak_mapped, size);
    if (p == hint) return p;
    unmap_range(p, size); /* kernels before 4.17 take the flag as a mere hint */
    return NULL;
}

/* Address space without memory: PROT_NONE private mappings are not charged against
 * the kernel's overcommit limit until made writable (no MAP_NORESERVE: that would
 * exempt them from the charge for good). */
void *hz_os_reserve(size_t size, size_t alignment) {
    size_t ps = hz_os_page_size();
    if (alignment < ps) alignment = ps;
    /* Alignment bounded first: PTRDIFF_MAX - 2^63 would wrap. */
    if (size == 0 || alignment > PTRDIFF_MAX / 2 || size > PTRDIFF_MAX - alignment) return NULL;
    size = hz_align_up(size, ps);
    char *aligned = reserve_exact(size, alignment);
    if (aligned == NULL) {
        /* Over-reserve, then cut off the misaligned head and tail. */
        size_t over = size + alignment - ps;
        char *p = os_mmap(NULL, over, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS);
        if (p == MAP_FAILED) {
            os_failed();
            return NULL;
        }
        hz_gstat_grow(bytes_mapped, peak_mapped, over);
        aligned = (char *)hz_align_up((uintptr_t)p, alignment);
        if (aligned > p) unmap_range(p, (size_t)(aligned - p));
        char *end = p + over, *want = aligned + size;
        if (end > want) unmap_range(want, (size_t)(end - want));
    }
    if (((uintptr_t)aligned + size - 1) >> HZ_VA_BITS) { /* beyond the segment map */
        unmap_range(aligned, size);
        return NULL;
    }
    return aligned;
}

/* Make reserved pages usable: the kernel charges them now, so under
 * vm.overcommit_memory=2 (or an impossible size in the heuristic mode) this is
 * where a request fails, cleanly. */
bool hz_os_commit(void *p, size_t size) {
    size = hz_align_up(size, hz_os_page_size());
    if (os_mprotect(p, size, PROT_READ | PROT_WRITE) != 0) {
        os_failed();
        return false;
    }
    hz_gstat_grow(bytes_committed, peak_committed, size);
#if HZ_THP
    os_madvise(p, size, MADV_HUGEPAGE);
#endif
    return true;
}

/* Back to reserved: the pages and the charge are returned (a fresh PROT_NONE
 * mapping over the range; mprotect alone would keep the charge). */
bool hz_os_decommit(void *p, size_t size) {
    size = hz_align_up(size, hz_os_page_size());
    if (os_mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED) == MAP_FAILED) {
        os_failed();
        return false;
    }
    hz_gstat_sub(bytes_committed, size);
    hz_gstat_add(bytes_purged, size);
    return true;
}

/* A committed mapping of `size` bytes starting at a multiple of `alignment`. */
void *hz_os_map_aligned(size_t size, size_t alignment) {
    void *p = hz_os_reserve(size, alignment);
    if (p != NULL && !hz_os_commit(p, size)) {
        unmap_range(p, hz_align_up(size, hz_os_page_size()));
        return NULL;
    }
    return p;
}

/* Unmap `size` bytes of which `committed` were committed; false (counted) when the
 * kernel refuses, e.g. because splitting a mapping would exceed vm.max_map_count:
 * the range then stays mapped and counted as such. */
bool hz_os_unmap(void *p, size_t size, size_t committed) {
    size = hz_align_up(size, hz_os_page_size());
    if (!unmap_range(p, size)) return false;
    hz_gstat_sub(bytes_committed, committed);
    hz_gstat_add(bytes_unmapped, committed);
    return true;
}

/* Give the physical pages back; the range stays mapped and reads back as zero.
 * Returns the bytes purged: the whole pages inside [p, p + size). */
size_t hz_os_purge(void *p, size_t size) {
    size_t ps = hz_os_page_size();
    uintptr_t start = hz_align_up((uintptr_t)p, ps);
    uintptr_t end = ((uintptr_t)p + size) & ~(uintptr_t)(ps - 1);
    if (end <= start) return 0;
    if (os_madvise((void *)start, end - start, MADV_DONTNEED) != 0) {
        os_failed();
        return 0;
    }
    hz_gstat_add(bytes_purged, end - start);
    return end - start;
}

/* Make a page-aligned, committed range inaccessible: a stray access faults. */
void hz_os_guard(void *p, size_t size) { os_mprotect(p, size, PROT_NONE); }
/* ...or writable again; false when the kernel will not charge it. */
bool hz_os_unguard(void *p, size_t size) {
    if (os_mprotect(p, size, PROT_READ | PROT_WRITE) == 0) return true;
    os_failed();
    return false;
}

size_t hz_os_address_space_limit(void) {
    struct rlimit r;
    int saved = errno;
    if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur > SIZE_MAX) {
        errno = saved;
        return SIZE_MAX;
    }
    return (size_t)r.rlim_cur;
}

/* Address space that reads as zero: a private read-only mapping, neither charged
 * against the overcommit limit nor resident until pages of it are made writable
 * (hz_os_unguard).  Not counted as mapped: the caller counts what it makes writable. */
void *hz_os_reserve_zero(size_t size) {
    void *p = os_mmap(NULL, hz_align_up(size, hz_os_page_size()), PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS);
    return p == MAP_FAILED ? NULL : p;
}

/* Grow or shrink a committed mapping without moving it. */
bool hz_os_resize_in_place(void *p, size_t old_size, size_t new_size) {
    size_t ps = hz_os_page_size();
    old_size = hz_align_up(old_size, ps);
    new_size = hz_align_up(new_size, ps);
    if (os_mremap(p, old_size, new_size, 0, NULL) == MAP_FAILED) return false;
    if (new_size > old_size) {
        hz_gstat_grow(bytes_mapped, peak_mapped, new_size - old_size);
        hz_gstat_grow(bytes_committed, peak_committed, new_size - old_size);
    } else {
        hz_gstat_sub(bytes_mapped, old_size - new_size);
        hz_gstat_sub(bytes_committed, old_size - new_size);
        hz_gstat_add(bytes_unmapped, old_size - new_size);
    }
    return true;
}

/* Move a committed mapping onto `target`, a reservation of new_size bytes: the
 * kernel moves the page tables, nothing is copied, and only the growth is charged. */
void *hz_os_move(void *p, size_t old_size, size_t new_size, void *target) {
    size_t ps = hz_os_page_size();
    old_size = hz_align_up(old_size, ps);
    new_size = hz_align_up(new_size, ps);
    void *q = os_mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    if (q == MAP_FAILED) {
        os_failed();
        return NULL;
    }
    /* The old range is gone; the target reservation now holds the committed pages. */
    hz_gstat_sub(bytes_mapped, old_size);
    hz_gstat_grow(bytes_committed, peak_committed, new_size - old_size);
    return q;
}

uint64_t hz_os_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void hz_os_write_err(const char *msg) { hz_os_write_fd(STDERR_FILENO, msg); }

void hz_os_write_fd(int fd, const char *msg) {
    int e = errno;
    size_t n = strlen(msg);
    while (n > 0) {
        ssize_t w = write(fd, msg, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            break;
        }
        msg += w;
        n -= (size_t)w;
    }
    errno = e;
}

void hz_os_yield(void) { sched_yield(); }

/* Metadata (heaps) comes from its own mappings, 64 KiB at a time (a small process
 * has one or two heaps), and is never freed: heaps are recycled. */
static hz_lock_t meta_lock;
static char *meta_cur, *meta_end;

void *hz_meta_alloc(size_t size) {
    size = hz_align_up(size, 64);
    if (!hz_lock_acquire(&meta_lock)) return NULL; /* re-entered from a signal handler */
    if (meta_cur == NULL || (size_t)(meta_end - meta_cur) < size) {
        size_t chunk = hz_align_up(size > HZ_UNIT_SIZE ? size : HZ_UNIT_SIZE, hz_os_page_size());
        char *p = hz_os_map_aligned(chunk, 0);
        if (p == NULL) {
            hz_lock_release(&meta_lock);
            return NULL;
        }
        hz_gstat_add(bytes_meta, chunk);
        meta_cur = p;
        meta_end = p + chunk;
    }
    void *r = meta_cur;
    meta_cur += size;
    hz_lock_release(&meta_lock);
    return r;
}

/* ---------------------------------------------------------------- locks
 * A thread's token is the address of its own word here: unique among live threads,
 * the same in a fork child, readable in a signal handler, and 8-byte aligned, which
 * leaves bit 0 for HZ_LOCK_FORK.  Spinning yields after a while: a 2-core box must
 * let the holder run. */
static _Thread_local uint64_t lock_token;

uintptr_t hz_lock_token(void) { return (uintptr_t)&lock_token; }

bool hz_lock_acquire(hz_lock_t *l) {
    uintptr_t me = hz_lock_token();
    uintptr_t h = atomic_load_explicit(&l->holder, memory_order_relaxed);
    if ((h & ~HZ_LOCK_FORK) == me) return (h & HZ_LOCK_FORK) != 0;
    for (unsigned spins = 0;; spins++) {
        uintptr_t expect = 0;
        if (atomic_compare_exchange_weak_explicit(&l->holder, &expect, me, memory_order_acquire,
                                                  memory_order_relaxed))
            return true;
        while (atomic_load_explicit(&l->holder, memory_order_relaxed) != 0) {
            if (++spins > 64) hz_os_yield();
        }
    }
}

/* Never waits, and fails for a lock this thread holds in any way. */
bool hz_lock_try(hz_lock_t *l) {
    uintptr_t expect = 0;
    return atomic_compare_exchange_strong_explicit(&l->holder, &expect, hz_lock_token(),
                                                   memory_order_acquire, memory_order_relaxed);
}

hz_lock_t *hz_meta_lock(void) { return &meta_lock; }
void hz_meta_forget(void) { meta_cur = meta_end = NULL; }
