/* posix.h - POSIX/GNU entry semantics implemented in posix.c. */
#ifndef HZ_POSIX_H
#define HZ_POSIX_H

#include <malloc.h>
#include <stddef.h>
#include <stdio.h>

#include "internal.h"

int hz_posix_memalign_impl(void **out, size_t alignment, size_t size) HZ_HIDDEN;
void *hz_aligned_alloc_impl(size_t alignment, size_t size) HZ_HIDDEN;
void *hz_memalign_impl(size_t alignment, size_t size) HZ_HIDDEN;
void *hz_valloc_impl(size_t size) HZ_HIDDEN;
void *hz_pvalloc_impl(size_t size) HZ_HIDDEN;
void *hz_reallocarray_impl(void *p, size_t count, size_t size) HZ_HIDDEN;
struct mallinfo2 hz_mallinfo2_impl(void) HZ_HIDDEN;
void hz_malloc_stats_impl(void) HZ_HIDDEN;
int hz_malloc_info_impl(int options, FILE *fp) HZ_HIDDEN;
int hz_mallopt_impl(int param, int value) HZ_HIDDEN;

#endif
