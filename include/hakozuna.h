/* hakozuna.h - public interface of the hakozuna memory allocator.
 *
 * The standard allocation functions (malloc, free, ... and the C++ operators) are
 * provided under their usual names when the library is linked or preloaded.  This
 * header declares the hakozuna-specific extensions; they work whether or not the
 * libc names are interposed.
 */
#ifndef HAKOZUNA_H
#define HAKOZUNA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HZ_API __attribute__((visibility("default")))
#else
#define HZ_API
#endif

/* ---------------------------------------------------------------- version */
#define HZ_VERSION_MAJOR 0
#define HZ_VERSION_MINOR 1
#define HZ_VERSION_PATCH 0

/* "hakozuna 0.1.0 (default)": library version and variant name. */
HZ_API const char *hz_version(void);
/* Build-time configuration of this library, as "key=value" pairs separated by spaces. */
HZ_API const char *hz_config_string(void);

/* ------------------------------------------------- allocation (no libc names) */
HZ_API void *hz_malloc(size_t size);
HZ_API void *hz_calloc(size_t count, size_t size);
HZ_API void *hz_realloc(void *ptr, size_t size);
HZ_API void *hz_aligned_alloc(size_t alignment, size_t size);
HZ_API void hz_free(void *ptr);
/* Bytes usable at ptr (>= the size asked for); 0 for NULL or a pointer hakozuna
 * did not hand out. */
HZ_API size_t hz_usable_size(const void *ptr);
/* Return free memory to the operating system now; returns 1 if any was released. */
HZ_API int hz_trim(void);

/* ------------------------------------------------------------------ stats */
/* A snapshot of process-wide counters, merged over all threads.  Fields are only ever
 * added at the end; callers pass sizeof(struct hz_stats) so old binaries keep working. */
struct hz_stats {
    uint64_t mallocs;            /* allocations served (all sizes) */
    uint64_t frees;              /* blocks freed (all sizes) */
    uint64_t bytes_in_use;       /* bytes in blocks handed out (size-class rounded) */
    uint64_t bytes_mapped;       /* bytes currently mapped from the OS */
    uint64_t bytes_purged;       /* bytes returned with madvise, cumulative */
    uint64_t bytes_unmapped;     /* bytes returned with munmap, cumulative */
    uint64_t remote_frees_sent;  /* frees of another thread's blocks */
    uint64_t remote_frees_recv;  /* such blocks collected by their owner */
    uint64_t remote_batches;     /* batches posted to owners */
    uint64_t foreign_frees;      /* free/realloc of pointers hakozuna did not hand out */
    uint64_t large_allocs;       /* allocations served directly from the OS */
    uint64_t large_cache_hits;   /* large allocations served from the large cache */
    uint64_t heaps_created;      /* thread heaps created */
    uint64_t heaps_adopted;      /* heaps of exited threads taken over by new threads */
    uint64_t threads_live;       /* threads currently owning a heap */
    uint64_t segments_mapped;    /* segments currently mapped */
    uint64_t bytes_dirty;        /* freed page memory kept resident for reuse, not yet
                                    returned to the OS */
};

/* Fill *out (size bytes, normally sizeof(struct hz_stats)); returns 0, or -1 with
 * errno = EINVAL if out is NULL. */
HZ_API int hz_stats_get(struct hz_stats *out, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* HAKOZUNA_H */
