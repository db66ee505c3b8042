/* alloc.h - the allocation and free fast paths.
 *
 * Both are inlined into every entry point (malloc, hz_malloc, operator new, ...).
 * Budget: malloc is a TLS load, a table load and a list pop (about a dozen
 * instructions; the tables are indexed by the size itself up to 64 KiB, so only
 * larger requests compute their class); free is a segment-map probe, a page
 * lookup, an owner compare and a list push (about twenty).  Anything else leaves
 * through one non-inlined call.
 * malloc also pays the heap profile's countdown: a subtract and a branch (prof.c),
 * and a prefetch of the next block of the list it pops.
 * Hardening (freelist.h) adds a link check and a cleared link word to malloc, and a
 * block-start check and the link encoding to free.
 */
#ifndef HZ_ALLOC_H
#define HZ_ALLOC_H

#include "freelist.h"

/* Hand out block, the head of page's list; rel is its link (next ^ block). */
HZ_INLINE void *hz_page_take(hz_heap_t *heap, hz_page_t *page, void *block, uintptr_t rel) {
    void *next = (void *)(rel ^ (uintptr_t)block);
    page->free = next;
    /* The next malloc of this class will read next's link: with a live set larger
     * than the caches it was freed long ago and is cold, so start fetching it now. */
    __builtin_prefetch(next);
    hz_link_clear(block);
    page->used++;
    hz_stat_inc(heap->stats.mallocs[page->cls]);
    (void)heap;
    return block;
}

HZ_INLINE void *hz_page_pop(hz_heap_t *heap, hz_page_t *page, void *block) {
    uintptr_t rel = hz_link_rel(block);
#if HZ_HARDENING
    if (hz_unlikely(rel > HZ_SEGMENT_MASK)) return hz_page_pop_far(heap, page, block, rel);
#endif
    return hz_page_take(heap, page, block, rel);
}

/* The page whose list a request of size bytes takes its block from: the size itself
 * indexes the tables up to 64 KiB.  Above HZ_MEDIUM_MAX, hz_empty_page, whose list
 * is empty: such a request leaves through the slow path that an empty list takes,
 * and the fast path makes no compare for it. */
HZ_INLINE hz_page_t *hz_page_for(const hz_heap_t *heap, size_t size) {
    if (hz_likely(size <= HZ_DIRECT_MAX)) return heap->direct[(size + 15) >> 4];
    if (hz_likely(size <= HZ_DIRECT_MID_MAX)) return heap->direct_mid[(size + 255) >> 8];
    if (hz_likely(size <= HZ_MEDIUM_MAX)) return heap->current[hz_size_class(size)];
    return &hz_empty_page;
}

/* What the fast path may do with block, the head of the list a request of size
 * bytes takes from. */
enum hz_pop { HZ_POP_TAKE, HZ_POP_SAMPLE, HZ_POP_OFF_LIST };

/* HZ_POP_TAKE when block can be handed out now, *rel then its link; HZ_POP_OFF_LIST
 * when the list is empty or (with hardening) its head's link leaves the segment;
 * HZ_POP_SAMPLE when the heap profile's countdown (prof.c) runs out.  The countdown
 * is paid by the request that takes a block here, and by the slow paths for the
 * others: one subtract on memory and a branch taken only when a sample may be due
 * (profiling off: every 2^62 bytes).  malloc and calloc share it. */
HZ_INLINE enum hz_pop hz_pop_check(hz_heap_t *heap, const void *block, size_t size,
                                   uintptr_t *rel) {
#if HZ_HARDENING
    /* The end of a list reads as no link: one compare for "empty" and "broken". */
    *rel = hz_link_rel(block);
    if (hz_unlikely(*rel > HZ_SEGMENT_MASK)) return HZ_POP_OFF_LIST;
#else
    *rel = 0;
    if (hz_unlikely(hz_list_end(block))) return HZ_POP_OFF_LIST;
#endif
    if (hz_unlikely(hz_sample_due(heap, size))) return HZ_POP_SAMPLE;
    /* Read here, the take's xor cancels the one in it. */
    if (!HZ_HARDENING) *rel = hz_link_rel(block);
    return HZ_POP_TAKE;
}

HZ_INLINE void *hz_alloc_fast(size_t size) {
    hz_heap_t *heap = hz_tls_heap;
    hz_page_t *page = hz_page_for(heap, size);
    void *block = page->free;
    uintptr_t rel;
    switch (hz_pop_check(heap, block, size, &rel)) {
    case HZ_POP_TAKE: return hz_page_take(heap, page, block, rel);
    /* A sample gets the block this request would have had. */
    case HZ_POP_SAMPLE: return hz_alloc_sampled(heap, page, block, size);
    default: return hz_alloc_off_list(size, page, block, rel);
    }
}

/* The end of a free of p, a block of the caller's heap checked to start one. */
HZ_INLINE void hz_free_block(hz_heap_t *heap, hz_page_t *page, void *p) {
#if HZ_HARDENED
    hz_free_quarantine(heap, page, p, hz_free_event);
    return;
#endif
    hz_stat_inc(heap->stats.frees[page->cls]);
    hz_page_push_then(heap, page, p, hz_free_event);
}

HZ_INLINE void hz_free_fast(void *p) {
    hz_heap_t *heap = hz_tls_heap;
    /* A small segment's map entry is its owner: one compare for "this heap's block". */
    uintptr_t entry = hz_segmap_entry((uintptr_t)p);
    if (hz_unlikely(entry != (uintptr_t)heap)) {
        hz_free_other(p, entry, heap); /* another heap's, NULL, large, or not ours */
        return;
    }
    hz_page_t *page = hz_page_of(hz_segment_of(p), p);
#if HZ_HARDENING
    if (hz_unlikely(!hz_block_carved(page, p))) {
        hz_free_unaligned(p, page, heap); /* a heap-profile sample, or reported */
        return;
    }
#endif
    hz_free_block(heap, page, p);
}

#endif /* HZ_ALLOC_H */
