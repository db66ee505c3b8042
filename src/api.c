/* api.c - the hz_* interface of hakozuna.h, for programs that call hakozuna by
 * name: each is the entry the libc names of override.c take too (the checked
 * variant's, in libhakozuna_debug.so). */
#include <errno.h>

#include "entry.h"
#include "hakozuna.h"

HZ_API void *hz_malloc(size_t size) { return hz_entry_malloc(size); }
HZ_API void hz_free(void *p) { hz_entry_free(p); }
HZ_API void *hz_calloc(size_t count, size_t size) { return hz_entry_calloc(count, size); }
HZ_API void *hz_realloc(void *p, size_t size) { return hz_entry_realloc(p, size); }
HZ_API size_t hz_usable_size(const void *p) { return hz_entry_usable(p); }
HZ_API int hz_trim(void) { return hz_entry_trim(); }

HZ_API void *hz_aligned_alloc(size_t alignment, size_t size) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        errno = EINVAL;
        return NULL;
    }
    return hz_entry_aligned(alignment, size);
}
