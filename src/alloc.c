/* alloc.c - the slow sides of malloc and free, calloc, realloc, usable size, trim. */
#include <errno.h>

#include "entry.h"
#include "prof.h"
#include "remote.h"

/* The allocation slow path proper, marked busy for fork (init.c): the blocks other
 * threads freed into the heap come back first, then a page with a free block is
 * found or made.  Heaps nobody owns get their upkeep from here when it is due. */
HZ_INLINE hz_page_t *page_refill(hz_heap_t *heap, unsigned cls) {
    heap->busy++;
    hz_stat_inc(heap->stats.refills);
    hz_shm_tick();
    if (hz_inbox_pending(heap)) hz_heap_collect(heap);
    hz_page_t *page = hz_page_ready(heap, cls);
    heap->busy--;
    hz_upkeep_tick();
    return page;
}

/* Give back to the OS what the process holds freed: heap (the caller's, or NULL)
 * tidied `how`, the heaps nobody owns, the caches of empty segments and large
 * blocks.  Whether anything went back. */
static bool give_back(hz_heap_t *heap, enum hz_tidy how) {
    uint64_t before = hz_gstat_load(bytes_purged) + hz_gstat_load(bytes_unmapped);
    if (heap != NULL) hz_heap_tidy(heap, how);
    if (hz_process_ready()) hz_heaps_trim();
    bool dropped = hz_segment_cache_trim();
    dropped |= hz_large_cache_trim();
    uint64_t after = hz_gstat_load(bytes_purged) + hz_gstat_load(bytes_unmapped);
    return dropped || after > before;
}

/* The OS refused memory to the calling thread: give back to it what the process
 * holds freed (as malloc_trim does: empty segments, cached large blocks, the freed
 * pages of every heap, and blocks held for their owners or in a quarantine) before
 * the caller tries once more.  False for the shared heaps of threads without one,
 * which are locked here: no second try. */
static HZ_COLD HZ_NOINLINE bool reclaim(hz_heap_t *heap) {
    if (heap != hz_tls_heap || hz_heap_shared(heap)) return false;
    (void)give_back(heap, HZ_TIDY_ROOM);
    return true;
}

/* class_page's page_refill found no memory: reclaim, and one more try. */
static HZ_COLD HZ_NOINLINE hz_page_t *class_page_retry(hz_heap_t *heap, unsigned cls) {
    hz_page_t *page;
    if (!reclaim(heap) || (page = page_refill(heap, cls)) == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    return page;
}

/* A page of class cls of `heap` with a free block, or NULL (ENOMEM). */
HZ_INLINE hz_page_t *class_page(hz_heap_t *heap, unsigned cls) {
    hz_page_t *page = heap->current[cls];
    if (hz_list_end(page->free)) page = hz_stash_serve(heap, cls, page);
    if (hz_list_end(page->free) && (page = page_refill(heap, cls)) == NULL)
        return class_page_retry(heap, cls);
    return page;
}

/* A block of class cls from `heap`; *zero tells whether it is known to be zero past
 * its first word. */
static void *class_block(hz_heap_t *heap, unsigned cls, bool *zero) {
    hz_page_t *page = class_page(heap, cls);
    if (page == NULL) return NULL;
    *zero = page->free_is_zero;
    return hz_page_pop(heap, page, page->free);
}

/* A thread without a heap: its first allocation makes one; a thread past its heap's
 * destructor allocates from the shared exit heap, under its lock. */
static HZ_COLD void *class_block_heapless(unsigned cls, bool *zero) {
    hz_heap_t *heap = hz_thread_init();
    if (heap != NULL) return class_block(heap, cls, zero);
    if (hz_tls_heap == &hz_exiting_heap && (heap = hz_exit_heap_lock()) != NULL) {
        hz_shm_attach(heap); /* its stats slot; nothing once it has one */
        void *p = class_block(heap, cls, zero);
        hz_exit_heap_unlock(heap);
        return p;
    }
    errno = ENOMEM;
    return NULL;
}

static void *alloc_class(unsigned cls, bool *zero) {
    hz_heap_t *heap = hz_tls_heap;
    if (hz_unlikely(hz_heap_shared(heap)))
        return class_block_heapless(cls, zero);
    return class_block(heap, cls, zero);
}

/* Whether giving back what the process holds may make room for a large request
 * that failed: when the allocator maps at least as much, or when an address-space
 * limit (ulimit -v) that the request fits under refused it, whatever the allocator
 * holds (the room left under the limit counts too).  Not otherwise: a program
 * probing for the largest block it can get would have its heaps purged at every
 * probe. */
static HZ_COLD bool reclaim_may_help(size_t size) {
    if (size <= hz_gstat_load(bytes_mapped)) return true;
    size_t limit = hz_os_address_space_limit();
    return limit != SIZE_MAX && size < limit;
}

/* Large blocks need no heap, but the process must be set up (page size, fork
 * handlers) even when one is its first allocation. */
static void *large_alloc(size_t size, size_t alignment, bool growing, bool *zero) {
    if (hz_unlikely(hz_tls_heap == &hz_empty_heap)) (void)hz_thread_init();
    hz_shm_tick(); /* a program that allocates only large blocks publishes too */
    hz_upkeep_tick();
    void *p = hz_large_alloc(size, alignment, growing, zero);
    if (hz_unlikely(p == NULL) && reclaim_may_help(size) && reclaim(hz_tls_heap))
        p = hz_large_alloc(size, alignment, growing, zero);
    if (hz_unlikely(p == NULL)) errno = ENOMEM;
    return p;
}

#if HZ_SAMPLE_IN_PAGE
/* A block of class cls for a heap-profile sample, or NULL.  The request is then
 * served normally, and may succeed: errno stays as it was (class_block sets ENOMEM
 * when it gives up). */
static void *sample_block(hz_heap_t *heap, unsigned cls, bool *zero) {
    int errno_before = errno;
    void *block = class_block(heap, cls, zero);
    if (block == NULL) errno = errno_before;
    return block;
}
#endif

/* A sample of size bytes for the heap profile (prof.c), or NULL to allocate it
 * normally: in a page where free will find its mark (HZ_SAMPLE_IN_PAGE), else a
 * large block. */
HZ_INLINE void *sampled(hz_heap_t *heap, size_t size, size_t alignment, bool *zero) {
#if HZ_SAMPLE_IN_PAGE
    if (alignment == 0 && size <= HZ_MEDIUM_MAX - HZ_SAMPLE_MARK) {
        void *block = sample_block(heap, hz_size_class(size + HZ_SAMPLE_MARK), zero);
        return block != NULL ? hz_prof_mark(heap, block, size) : NULL;
    }
#endif
    (void)heap;
    return hz_prof_alloc(size, alignment, zero);
}

/* The countdown ran out on a request outside malloc's fast path: a sample of it, or
 * NULL when this one is not sampled. */
static HZ_NOINLINE void *sample_due(hz_heap_t *heap, size_t size, size_t alignment,
                                    bool *zero) {
    return hz_sample_take(heap) ? sampled(heap, size, alignment, zero) : NULL;
}

/* calloc and the aligned allocations count down for the heap profile too, inline:
 * a sampled block of size bytes, or NULL when this one is not sampled. */
HZ_INLINE void *maybe_sampled(size_t size, size_t alignment, bool *zero) {
    hz_heap_t *heap = hz_tls_heap;
    if (hz_likely(!hz_sample_due(heap, size))) return NULL;
    return sample_due(heap, size, alignment, zero);
}

/* A malloc of size, counted down already. */
static void *alloc_counted(size_t size) {
    bool zero;
    if (size > HZ_MEDIUM_MAX) return large_alloc(size, 0, false, &zero);
    return alloc_class(hz_size_class(size), &zero);
}

/* hz_alloc_slow's request, the countdown run out.  A small one goes, with a page
 * that has a free block, to hz_alloc_sampled, by calls that all end malloc's (so
 * the compiler makes them jumps): it then starts in the frame that the fast path's
 * samples start in, and a loop whose samples come from both paths keeps one stack
 * for the memo (prof.h), where each switch between the two made a walk. */
static HZ_NOINLINE void *alloc_slow_sampled(size_t size) {
    hz_heap_t *heap = hz_tls_heap;
#if HZ_SAMPLE_IN_PAGE
    if (size <= HZ_MEDIUM_MAX && !hz_heap_shared(heap)) {
        hz_page_t *page = class_page(heap, hz_size_class(size));
        if (page != NULL) return hz_alloc_sampled(heap, page, page->free, size);
        (void)hz_sample_take(heap); /* the countdown reset; no memory, no sample */
        return NULL;
    }
#endif
    bool zero;
    void *p = sample_due(heap, size, 0, &zero);
    return p != NULL ? p : alloc_counted(size);
}

/* Behind hz_alloc_fast: first call of a thread, empty page, or a large request. */
void *hz_alloc_slow(size_t size) {
    if (hz_unlikely(hz_sample_due(hz_tls_heap, size))) return alloc_slow_sampled(size);
    return alloc_counted(size);
}

/* Behind hz_alloc_fast: the heap profile's countdown ran out on a request that
 * block, the head of page's list, would serve.  The sample is that block when its
 * class has room for the mark past size (most sizes: classes are an eighth of a
 * power of two apart), else a block of the next class, which has.  One call of
 * hz_prof_mark for both, so that a loop's samples have one stack (prof.c, the memo). */
void *hz_alloc_sampled(hz_heap_t *heap, hz_page_t *page, void *block, size_t size) {
    if (!hz_sample_take(heap)) return hz_page_pop(heap, page, block);
    bool zero;
    void *p;
    /* Where no sample can be had (no memory for it), the request is served after
     * all: what that tried may have changed page's list, so it is read again. */
#if HZ_SAMPLE_IN_PAGE
    if (size <= HZ_MEDIUM_MAX - HZ_SAMPLE_MARK) {
        p = page->block_size - size >= HZ_SAMPLE_MARK ? hz_page_pop(heap, page, block)
                                                      : sample_block(heap, page->cls + 1u, &zero);
        return p != NULL ? hz_prof_mark(heap, p, size) : alloc_counted(size);
    }
#endif
    p = hz_prof_alloc(size, 0, &zero);
    return p != NULL ? p : alloc_counted(size);
}

/* Behind hz_page_pop: a link that leaves the segment (checked by hz_link_far). */
void *hz_page_pop_far(hz_heap_t *heap, hz_page_t *page, void *block, uintptr_t rel) {
    return hz_page_take(heap, page, block, hz_link_far(page, block, rel));
}

/* Behind hz_alloc_fast: the head of page's list did not decode as a link within
 * the segment.  Either the list is empty, or it crosses segments (the stash), or it
 * is broken (hz_link_far tells the last two apart).  Without hardening, only empty. */
void *hz_alloc_off_list(size_t size, hz_page_t *page, void *block, uintptr_t rel) {
    if (!HZ_HARDENING || hz_list_end(block)) return hz_alloc_slow(size);
    hz_heap_t *heap = hz_tls_heap;
    if (hz_unlikely(hz_sample_due(heap, size))) return hz_alloc_sampled(heap, page, block, size);
    return hz_page_pop_far(heap, page, block, rel);
}

/* Pages empty and fill again often where a class holds a few blocks (2.8 % of the
 * frees of uniform 16-32768 B): with stats on, a publishing tick at each such event
 * cost 1 % of that loop, so one event in PAGE_EVENTS_PER_TICK ticks; the allocation
 * slow path ticks every time.  (A heap taking its remote frees in needs none: the
 * allocation slow path that does it ticks.) */
#define PAGE_EVENTS_PER_TICK 16

void hz_free_event(hz_heap_t *heap, hz_page_t *page) {
    hz_shm_tick_one_in(&heap->page_events, PAGE_EVENTS_PER_TICK);
    hz_page_free_event(heap, page); /* a tail call */
}

/* A thread without a heap posts its frees for other heaps one by one; once it has
 * made this many it gets a heap to batch them in.  Not at its first: glibc, tearing
 * down a detached thread after the key destructors ran, frees other threads' cached
 * TLS blocks there, and a heap made then would be released by nothing.  A thread
 * that freed before is marked (hz_thread_mark_heapless) and makes none there. */
#define HEAPLESS_FREES_BEFORE_HEAP 64
static __thread uint8_t heapless_frees __attribute__((tls_model("initial-exec")));

/* What a remote free, done, left to do: a post ticks the upkeep of heaps nobody
 * owns (the owner may be one) and the stats publisher, so that a thread that only
 * frees for others keeps both going; a thread that keeps freeing without a heap
 * gets one.  Takes nothing but `after`, so that its caller keeps no register
 * across the remote free. */
static HZ_COLD HZ_NOINLINE void free_remote_after(enum hz_remote_after after) {
    if (after == HZ_REMOTE_NEEDS_HEAP) {
        if (heapless_frees == 0) hz_thread_mark_heapless();
        if (++heapless_frees >= HEAPLESS_FREES_BEFORE_HEAP) {
            heapless_frees = 0;
            (void)hz_thread_init();
        }
    }
    hz_upkeep_tick();
    hz_shm_tick();
}

/* The large block p starts, or NULL for a pointer that is not ours; a pointer into
 * a large block that does not start it is reported, as one into a page is. */
static hz_large_t *large_block(const void *p) {
    hz_large_t *h = hz_large_holding(p);
    if (h == NULL || h->user == p) return h;
    if (HZ_HARDENING) hz_large_invalid(p);
    return NULL;
}

/* NULL, a large block, or a pointer that is not ours.  Out of line, so that the
 * remote free's common case saves no register for its calls. */
static HZ_NOINLINE void free_not_small(void *p) {
    if (p == NULL) return;
    hz_large_t *h = large_block(p);
    if (h != NULL) {
        if (h->sample != 0) hz_prof_release(h);
        hz_large_free(h);
        hz_upkeep_tick(); /* a program that frees only large blocks ages their cache */
        return;
    }
    hz_gstat_add(foreign_frees, 1); /* the dynamic loader's, or another allocator's */
}

/* Behind hz_free_fast: another heap's block, NULL, a large block, or a pointer that
 * is not ours.  entry is p's segment-map entry. */
void hz_free_other(void *p, uintptr_t entry, hz_heap_t *heap) {
    if (hz_unlikely(entry <= HZ_SEG_LARGE)) {
        free_not_small(p);
        return;
    }
    hz_heap_t *owner = (hz_heap_t *)entry; /* a small segment: entry is its owner */
    if (hz_likely(hz_free_remote_fast(heap, owner, p))) return;
    enum hz_remote_after after = hz_free_remote(p, owner, heap);
    if (hz_unlikely(after != HZ_REMOTE_DONE)) free_remote_after(after);
}

#if HZ_HARDENING
/* Behind hz_free_fast: p, in a page of the caller's heap, starts no block. */
void hz_free_unaligned(void *p, hz_page_t *page, hz_heap_t *heap) {
    hz_free_block(heap, page, hz_sample_unmark(heap, page, p));
}
#endif

/* calloc of a block from a fresh span, known zero without being written: its pages
 * past the first may not be backed yet.  A program that reads such a block before it
 * writes it (a table's empty slots, a struct's NULL fields) would take two faults per
 * page: the read maps the kernel's shared zero page, and the write then replaces it
 * and must flush the old mapping from the TLB of every CPU the process runs on (an
 * interrupt to each).  A write first takes one fault and flushes nothing, so calloc
 * writes one byte into each page of the block (4 KiB: the smallest page size).  Above
 * CALLOC_TOUCH_MAX, the size from which glibc serves calloc from fresh mappings, the
 * pages are left to be backed as the program touches them, so that a large table used
 * sparsely stays small. */
#define CALLOC_TOUCH_MAX ((size_t)128 << 10)

static void touch_pages(char *p, size_t size) {
    const size_t step = 4096;
    char *end = p + size;
    for (char *q = (char *)hz_align_up((uintptr_t)p + 1, step); q < end; q += step)
        *(volatile char *)q = 0;
}

/* The end of a calloc of total bytes at p: cleared, unless zero says its block is
 * zero past its first word. */
static void *calloc_clear(void *p, size_t total, bool zero) {
    if (p == NULL) return NULL;
    if (!zero) return memset(p, 0, total);
    *(void **)p = NULL; /* now all of it */
    if (total <= CALLOC_TOUCH_MAX) touch_pages(p, total);
    return p;
}

/* calloc past its fast path: an empty list (also what a large request meets), or
 * the heap profile's countdown run out (counted: already paid for this request). */
static HZ_NOINLINE void *calloc_slow(size_t total, bool counted) {
    bool zero = false;
    /* A heap-profile sample is fresh as often as any block: treated the same. */
    void *p = counted ? sample_due(hz_tls_heap, total, 0, &zero) : maybe_sampled(total, 0, &zero);
    if (p == NULL) {
        if (total > HZ_MEDIUM_MAX) p = large_alloc(total, 0, false, &zero);
        else p = alloc_class(hz_size_class(total), &zero);
    }
    return calloc_clear(p, total, zero);
}

/* malloc's fast path, which knows whether its page's free blocks are freshly carved
 * from untouched memory (zero but for their links): such a block is not cleared. */
void *hz_calloc_impl(size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    hz_heap_t *heap = hz_tls_heap;
    hz_page_t *page = hz_page_for(heap, total);
    void *block = page->free;
    uintptr_t rel;
    switch (hz_pop_check(heap, block, total, &rel)) {
    case HZ_POP_TAKE: {
        bool zero = page->free_is_zero;
        return calloc_clear(hz_page_take(heap, page, block, rel), total, zero);
    }
    case HZ_POP_SAMPLE: return calloc_slow(total, true);
    default: return calloc_slow(total, false);
    }
}

/* Usable size of a block glibc handed out (a library bound to it with RTLD_DEEPBIND):
 * read from glibc's chunk header, 0 when it does not look like one. */
static size_t foreign_usable(const void *p) {
    size_t field = ((const size_t *)p)[-1];
    size_t chunk = field & ~(size_t)7;
    if (chunk < 32 || (chunk & 15) != 0 || chunk > ((size_t)1 << 40)) return 0;
    return chunk - ((field & 2) ? 16 : 8);
}

/* realloc of a pointer that is not ours: counted, copied into a block from `alloc`
 * as far as glibc's header says it reaches, and left to its owner.  NULL with
 * ENOMEM when its size cannot be read. */
void *hz_realloc_foreign(void *p, size_t size, void *(*alloc)(size_t)) {
    hz_gstat_add(foreign_frees, 1);
    size_t usable = foreign_usable(p);
    if (usable == 0) {
        errno = ENOMEM;
        return NULL;
    }
    void *q = alloc(size);
    if (q != NULL) memcpy(q, p, usable < size ? usable : size);
    return q;
}

/* hz_alloc_fast as a function, for callers that take an allocator. */
static void *core_malloc(size_t size) { return hz_alloc_fast(size); }

size_t hz_usable_size_impl(const void *p) {
    unsigned kind = hz_segmap_kind((uintptr_t)p);
    if (kind == HZ_SEG_SMALL) {
        hz_page_t *page = hz_page_of(hz_segment_of(p), p);
        if (hz_likely(hz_block_carved(page, p))) return page->block_size;
        if (HZ_SAMPLE_IN_PAGE && hz_sample_block(page, p) != NULL)
            return page->block_size - HZ_SAMPLE_MARK; /* a heap-profile sample */
        return 0; /* inside a block, or past the carved ones: no block starts at p */
    }
    hz_large_t *h = hz_large_header(p);
    return h != NULL ? h->usable : 0;
}

/* A block that grows past HZ_ALONE_MIN will likely grow on: it takes a mapping,
 * with room if one is cached, and grows there in place (large.c), where in the size
 * classes it would be copied again each time it outgrew its span.  Up to
 * HZ_MEDIUM_MAX, the classes take it when the process holds many mappings already or
 * the kernel refuses one.  Out of line, so that a move within the classes saves no
 * registers. */
static HZ_NOINLINE void *realloc_mapping(size_t size) {
    if (size <= HZ_MEDIUM_MAX && hz_large_live() >= HZ_REALLOC_MAPPINGS_MAX)
        return hz_alloc_fast(size);
    int errno_before = errno;
    bool zero;
    void *q = large_alloc(size, 0, true, &zero);
    if (q != NULL || size > HZ_MEDIUM_MAX) return q;
    errno = errno_before; /* the classes may yet serve it; if not, they set ENOMEM */
    return hz_alloc_fast(size);
}

/* The block a realloc of a block of old_usable bytes moves to. */
static void *realloc_new_block(size_t size, size_t old_usable) {
    return size > HZ_ALONE_MIN && size > old_usable ? realloc_mapping(size) : hz_alloc_fast(size);
}

/* Out of line, so that a realloc that stays saves no registers. */
static HZ_NOINLINE void *move_block(void *p, size_t old_usable, size_t size) {
    void *q = realloc_new_block(size, old_usable);
    if (q == NULL) return NULL;
    memcpy(q, p, old_usable < size ? old_usable : size);
    hz_free_fast(p);
    return q;
}

/* realloc of a large block, or of a pointer that is not ours. */
static HZ_NOINLINE void *realloc_other(void *p, size_t size) {
    hz_large_t *h = large_block(p);
    if (h != NULL) {
        size_t usable = h->usable;
        void *r = hz_large_realloc(h, size);
        return r != NULL ? r : move_block(p, usable, size);
    }
    return hz_realloc_foreign(p, size, core_malloc);
}

/* The size a block of usable bytes moves to for a request of size, or 0 when it
 * stays: it still fits without wasting half of it.  A block that grows is likely to
 * grow again: a quarter more room (as tcmalloc gives) halves the moves of a string
 * built piece by piece. */
HZ_INLINE size_t realloc_target(const hz_page_t *page, size_t usable, size_t size) {
    if (size <= usable &&
        (size >= usable / 2 || size <= HZ_ALIGNMENT || hz_size_class(size) == page->cls))
        return 0;
    size_t roomy = usable + usable / 4;
    return size > usable && size < roomy && roomy <= HZ_MEDIUM_MAX ? roomy : size;
}

/* p, of page, staying where it is: it must be in use, or it would be handed out
 * twice (a freed block's link word says so: freelist.h). */
HZ_INLINE void *realloc_stays(const hz_page_t *page, void *p) {
#if HZ_HARDENING
    if (hz_unlikely(hz_block_on_list(p))) hz_report_double_free(p, page->block_size);
#else
    (void)page;
#endif
    return p;
}

/* move_block for p, a block of the caller's heap on page, checked to start one:
 * free has nothing left to look up.  A block alone on its page (above 256 KiB)
 * changes size in place instead, if it stays above 256 KiB and, to grow, the units
 * after its span are free. */
static HZ_NOINLINE void *move_own_block(hz_heap_t *heap, hz_page_t *page, void *p,
                                        size_t size) {
    if (page->reserved == 1 && size <= HZ_MEDIUM_MAX) {
        (void)realloc_stays(page, p); /* in use (not freed and then reallocated) */
        if (hz_page_resize(heap, page, hz_size_class(size))) return p;
    }
    void *q = realloc_new_block(size, page->block_size);
    if (q == NULL) return NULL;
    size_t usable = page->block_size; /* read after the allocation: no register kept */
    memcpy(q, p, usable < size ? usable : size);
    hz_free_block(heap, page, p);
    return q;
}

/* realloc past its fast path: a new block, an empty size, a block that moves, or one
 * not of the caller's heap. */
static HZ_NOINLINE void *realloc_slow(void *p, size_t size) {
    if (p == NULL) return hz_alloc_fast(size);
    if (size == 0) { /* as glibc: free and return NULL */
        hz_free_fast(p);
        return NULL;
    }
    uintptr_t entry = hz_segmap_entry((uintptr_t)p);
    if (entry > HZ_SEG_LARGE) { /* a small segment's entry is its owner */
        hz_page_t *page = hz_page_of(hz_segment_of(p), p);
        hz_heap_t *heap = hz_tls_heap;
        /* The caller's own block, the common case: free needs no second look. */
        if (hz_likely(entry == (uintptr_t)heap)) {
#if HZ_HARDENING
            if (hz_likely(hz_block_carved(page, p)))
#endif
            {
                size_t target = realloc_target(page, page->block_size, size);
                return target == 0 ? realloc_stays(page, p) : move_own_block(heap, page, p, target);
            }
        }
        /* another heap's, a heap-profile sample's, or a pointer that starts no block */
        size_t usable = hz_block_room(page, p); /* before the copy reads a block's worth */
        size_t target = realloc_target(page, usable, size);
        if (target != 0) return move_block(p, usable, target);
        /* A sample's first word is the program's (its mark is before it), and
         * hz_block_room found the mark: it is in use. */
        return hz_block_carved(page, p) ? realloc_stays(page, p) : p;
    }
    return realloc_other(p, size);
}

/* Whether p, of page, starts a block and plainly is on no free list (else
 * realloc_slow tells a heap-profile sample, a pointer that starts no block and a
 * double free apart).  Without hardening, taken on trust. */
HZ_INLINE bool starts_block_in_use(const hz_page_t *page, const void *p) {
#if HZ_HARDENING
    return hz_likely(hz_block_carved(page, p)) && hz_block_plainly_in_use(p);
#else
    (void)page;
    (void)p;
    return true;
#endif
}

/* The common realloc, a block of the caller's heap, calls nothing when it stays
 * where it is, so saves no registers: moving it is move_own_block's, the rest
 * realloc_slow's.  (NULL's map entry is never a heap.) */
void *hz_realloc_impl(void *p, size_t size) {
    uintptr_t entry = hz_segmap_entry((uintptr_t)p);
    hz_heap_t *heap = hz_tls_heap;
    if (hz_likely(entry == (uintptr_t)heap) && hz_likely(size != 0)) {
        hz_page_t *page = hz_page_of(hz_segment_of(p), p);
        if (starts_block_in_use(page, p)) {
            size_t target = realloc_target(page, page->block_size, size);
            return target == 0 ? p : move_own_block(heap, page, p, target);
        }
    }
    return realloc_slow(p, size);
}

/* alignment: a power of two. */
void *hz_aligned_impl(size_t alignment, size_t size) {
    if (alignment <= HZ_ALIGNMENT) return hz_alloc_fast(size);
    bool zero;
    void *p = maybe_sampled(size, alignment, &zero);
    if (p != NULL) return p;
    if (alignment <= HZ_ALIGNED_CLASS_MAX) {
        unsigned cls = hz_aligned_class(size, alignment);
        if (cls != 0) return alloc_class(cls, &zero);
    }
    return large_alloc(size, alignment, false, &zero);
}

int hz_trim_impl(void) {
    hz_heap_t *heap = hz_tls_heap;
    return give_back(hz_heap_shared(heap) ? NULL : heap, HZ_TIDY_ALL);
}
