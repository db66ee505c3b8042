/* override.c - the libc and C++ names, as thin forwarders onto the core.
 *
 * Exported without a version node: a versioned malloc would not interpose. */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "posix.h"

#define HZ_EXPORT __attribute__((visibility("default")))

/* ----------------------------------------------------------- C and POSIX */
HZ_EXPORT void *malloc(size_t size) { return hz_entry_malloc(size); }
HZ_EXPORT void free(void *p) { hz_entry_free(p); }
HZ_EXPORT void *calloc(size_t n, size_t size) { return hz_entry_calloc(n, size); }
HZ_EXPORT void *realloc(void *p, size_t size) { return hz_entry_realloc(p, size); }
HZ_EXPORT void *reallocarray(void *p, size_t n, size_t size) {
    return hz_reallocarray_impl(p, n, size);
}
HZ_EXPORT int posix_memalign(void **out, size_t alignment, size_t size) {
    return hz_posix_memalign_impl(out, alignment, size);
}
HZ_EXPORT void *aligned_alloc(size_t alignment, size_t size) {
    return hz_aligned_alloc_impl(alignment, size);
}
HZ_EXPORT void *memalign(size_t alignment, size_t size) { return hz_memalign_impl(alignment, size); }
HZ_EXPORT void *valloc(size_t size) { return hz_valloc_impl(size); }
HZ_EXPORT void *pvalloc(size_t size) { return hz_pvalloc_impl(size); }
HZ_EXPORT size_t malloc_usable_size(void *p) { return hz_entry_usable(p); }
HZ_EXPORT int malloc_trim(size_t pad) {
    (void)pad;
    return hz_entry_trim();
}
HZ_EXPORT struct mallinfo2 mallinfo2(void) { return hz_mallinfo2_impl(); }
HZ_EXPORT void malloc_stats(void) { hz_malloc_stats_impl(); }
HZ_EXPORT int malloc_info(int options, FILE *fp) { return hz_malloc_info_impl(options, fp); }
HZ_EXPORT int mallopt(int param, int value) { return hz_mallopt_impl(param, value); }

#define CLAMP_INT(x) ((x) > (size_t)INT32_MAX ? INT32_MAX : (int)(x))
HZ_EXPORT struct mallinfo mallinfo(void) {
    struct mallinfo2 m2 = hz_mallinfo2_impl();
    struct mallinfo m = {0};
    m.arena = CLAMP_INT(m2.arena);
    m.hblks = CLAMP_INT(m2.hblks);
    m.hblkhd = CLAMP_INT(m2.hblkhd);
    m.uordblks = CLAMP_INT(m2.uordblks);
    m.fordblks = CLAMP_INT(m2.fordblks);
    return m;
}

/* C23 and old names; not all are declared by every libc. */
HZ_EXPORT void free_sized(void *p, size_t size);
HZ_EXPORT void free_aligned_sized(void *p, size_t alignment, size_t size);
HZ_EXPORT void cfree(void *p);
void free_sized(void *p, size_t size) { hz_entry_free_sized(p, size, 0); }
void free_aligned_sized(void *p, size_t alignment, size_t size) {
    hz_entry_free_sized(p, size, alignment);
}
void cfree(void *p) { hz_entry_free(p); }

/* glibc's internal names, which some programs and libraries call directly. */
HZ_EXPORT void *__libc_malloc(size_t size);
HZ_EXPORT void __libc_free(void *p);
HZ_EXPORT void *__libc_calloc(size_t n, size_t size);
HZ_EXPORT void *__libc_realloc(void *p, size_t size);
HZ_EXPORT void *__libc_memalign(size_t alignment, size_t size);
HZ_EXPORT void *__libc_valloc(size_t size);
HZ_EXPORT void *__libc_pvalloc(size_t size);
void *__libc_malloc(size_t size) { return hz_entry_malloc(size); }
void __libc_free(void *p) { hz_entry_free(p); }
void *__libc_calloc(size_t n, size_t size) { return hz_entry_calloc(n, size); }
void *__libc_realloc(void *p, size_t size) { return hz_entry_realloc(p, size); }
void *__libc_memalign(size_t alignment, size_t size) { return hz_memalign_impl(alignment, size); }
void *__libc_valloc(size_t size) { return hz_valloc_impl(size); }
void *__libc_pvalloc(size_t size) { return hz_pvalloc_impl(size); }

/* ---------------------------------------------------------------- C++
 * Defined here by their mangled names so that C programs do not pull in libstdc++.
 * On failure operator new must call the new-handler or throw std::bad_alloc: both
 * live in libstdc++, which is loaded whenever a C++ program is, so weak references
 * find them exactly when they can be needed. */
typedef void (*new_handler_t)(void);
extern new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

/* A nothrow new must return NULL where the plain one would throw, a new-handler's
 * std::bad_alloc included, and catching an exception takes C++.  The C++ runtime's
 * own nothrow new does it: it calls operator new (ours, the plain one) in a try
 * block.  Taken only from the runtime whose new-handler this is (a library linked
 * into the program may define the same names); NULL without one. */
typedef void *(*nothrow_new_t)(size_t, const void *);
typedef void *(*nothrow_new_aligned_t)(size_t, size_t, const void *);

static void *runtime_nothrow_new(const char *name) {
    union {
        new_handler_t (*fn)(void);
        const void *addr;
    } getter = {.fn = _ZSt15get_new_handlerv};
    return getter.fn != NULL ? hz_os_symbol_next(name, getter.addr) : NULL;
}

/* The nothrow forms' way with a new-handler: through the runtime's nothrow new, or,
 * without one, the handler called here (an exception it throws then goes on up). */
static HZ_COLD bool nothrow_via_runtime(size_t size, size_t alignment, void **out) {
    static const char tag; /* std::nothrow's type is empty: any address will do */
    void *f = runtime_nothrow_new(alignment ? "_ZnwmSt11align_val_tRKSt9nothrow_t"
                                            : "_ZnwmRKSt9nothrow_t");
    if (f == NULL) return false;
    if (alignment) {
        nothrow_new_aligned_t fn;
        memcpy(&fn, &f, sizeof fn);
        *out = fn(size, alignment, &tag);
    } else {
        nothrow_new_t fn;
        memcpy(&fn, &f, sizeof fn);
        *out = fn(size, &tag);
    }
    return true;
}

static new_handler_t current_new_handler(void) {
    return _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
}

/* Returns NULL only for nothrow; otherwise loops on the handler or throws. */
static HZ_COLD void *new_failed(size_t size, size_t alignment, bool nothrow) {
    void *p;
    if (nothrow && current_new_handler() != NULL && nothrow_via_runtime(size, alignment, &p))
        return p;
    for (;;) {
        new_handler_t h = current_new_handler();
        if (h == NULL) {
            if (nothrow) return NULL;
            if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
            hz_os_write_err("hakozuna: operator new: out of memory\n");
            abort();
        }
        h(); /* may free memory, throw, or terminate */
        p = alignment ? hz_entry_aligned(alignment, size) : hz_entry_malloc(size);
        if (p != NULL) return p;
    }
}

HZ_INLINE void *cxx_new(size_t size) {
    void *p = hz_entry_malloc(size);
    return hz_likely(p != NULL) ? p : new_failed(size, 0, false);
}
HZ_INLINE void *cxx_new_nothrow(size_t size) {
    void *p = hz_entry_malloc(size);
    return hz_likely(p != NULL) ? p : new_failed(size, 0, true);
}
static void *cxx_new_aligned(size_t size, size_t alignment, bool nothrow) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        if (nothrow) return NULL;
        return new_failed((size_t)-1, 0, false);
    }
    void *p = hz_entry_aligned(alignment, size);
    return hz_likely(p != NULL) ? p : new_failed(size, alignment, nothrow);
}

#define NOTHROW const void *nt
/* new */
HZ_EXPORT void *_Znwm(size_t n) { return cxx_new(n); }
HZ_EXPORT void *_Znam(size_t n) { return cxx_new(n); }
HZ_EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, NOTHROW) { (void)nt; return cxx_new_nothrow(n); }
HZ_EXPORT void *_ZnamRKSt9nothrow_t(size_t n, NOTHROW) { (void)nt; return cxx_new_nothrow(n); }
HZ_EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t al) { return cxx_new_aligned(n, al, false); }
HZ_EXPORT void *_ZnamSt11align_val_t(size_t n, size_t al) { return cxx_new_aligned(n, al, false); }
HZ_EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, NOTHROW) {
    (void)nt;
    return cxx_new_aligned(n, al, true);
}
HZ_EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, NOTHROW) {
    (void)nt;
    return cxx_new_aligned(n, al, true);
}
/* delete */
HZ_EXPORT void _ZdlPv(void *p) { hz_entry_free(p); }
HZ_EXPORT void _ZdaPv(void *p) { hz_entry_free(p); }
HZ_EXPORT void _ZdlPvm(void *p, size_t n) { hz_entry_free_sized(p, n, 0); }
HZ_EXPORT void _ZdaPvm(void *p, size_t n) { hz_entry_free_sized(p, n, 0); }
HZ_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, NOTHROW) { (void)nt; hz_entry_free(p); }
HZ_EXPORT void _ZdaPvRKSt9nothrow_t(void *p, NOTHROW) { (void)nt; hz_entry_free(p); }
HZ_EXPORT void _ZdlPvSt11align_val_t(void *p, size_t al) { hz_entry_free_sized(p, HZ_SIZE_UNKNOWN, al); }
HZ_EXPORT void _ZdaPvSt11align_val_t(void *p, size_t al) { hz_entry_free_sized(p, HZ_SIZE_UNKNOWN, al); }
HZ_EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) {
    hz_entry_free_sized(p, n, al);
}
HZ_EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) {
    hz_entry_free_sized(p, n, al);
}
HZ_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, NOTHROW) {
    (void)nt;
    hz_entry_free_sized(p, HZ_SIZE_UNKNOWN, al);
}
HZ_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, NOTHROW) {
    (void)nt;
    hz_entry_free_sized(p, HZ_SIZE_UNKNOWN, al);
}
