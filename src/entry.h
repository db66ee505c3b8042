/* entry.h - what the public names (override.c, posix.c, the hz_* API) call: the core
 * directly, or, in the checked variant (HZ_DEBUG), the checking layer in debug.c that
 * wraps every block with a header, a canary and poison. */
#ifndef HZ_ENTRY_H
#define HZ_ENTRY_H

#include "alloc.h"

/* Size argument of a free that gives none to check (e.g. aligned delete). */
#define HZ_SIZE_UNKNOWN ((size_t)-1)

#if HZ_DEBUG
void *hz_debug_malloc(size_t size) HZ_HIDDEN;
void hz_debug_free(void *p, size_t size, size_t alignment) HZ_HIDDEN;
void *hz_debug_calloc(size_t count, size_t size) HZ_HIDDEN;
void *hz_debug_realloc(void *p, size_t size) HZ_HIDDEN;
size_t hz_debug_usable_size(const void *p) HZ_HIDDEN;
void *hz_debug_aligned(size_t alignment, size_t size) HZ_HIDDEN;
int hz_debug_trim(void) HZ_HIDDEN;
#define hz_entry_malloc(n) hz_debug_malloc(n)
#define hz_entry_free(p) hz_debug_free(p, HZ_SIZE_UNKNOWN, 0)
#define hz_entry_free_sized(p, n, a) hz_debug_free(p, n, a)
#define hz_entry_calloc(c, n) hz_debug_calloc(c, n)
#define hz_entry_realloc(p, n) hz_debug_realloc(p, n)
#define hz_entry_usable(p) hz_debug_usable_size(p)
#define hz_entry_aligned(a, n) hz_debug_aligned(a, n)
#define hz_entry_trim() hz_debug_trim()
#else
#define hz_entry_malloc(n) hz_alloc_fast(n)
#define hz_entry_free(p) hz_free_fast(p)
#define hz_entry_free_sized(p, n, a) hz_free_fast(p)
#define hz_entry_calloc(c, n) hz_calloc_impl(c, n)
#define hz_entry_realloc(p, n) hz_realloc_impl(p, n)
#define hz_entry_usable(p) hz_usable_size_impl(p)
#define hz_entry_aligned(a, n) hz_aligned_impl(a, n)
#define hz_entry_trim() hz_trim_impl()
#endif

#endif /* HZ_ENTRY_H */
