/* page.c - pages of one size class: the queue a heap allocates from, carving blocks
 * out of a fresh span, finding or making a page with a free block (for the
 * allocation slow path, alloc.c), and the hardened variant's quarantine. */
#include "freelist.h"

/* ----------------------------------------------------------------- queues */
static void queue_remove(hz_page_queue_t *q, hz_page_t *page) {
    if (page->prev) page->prev->next = page->next;
    else q->first = page->next;
    if (page->next) page->next->prev = page->prev;
    else q->last = page->prev;
    page->next = page->prev = NULL;
    page->in_queue = 0;
}

static void queue_push_front(hz_page_queue_t *q, hz_page_t *page) {
    page->prev = NULL;
    page->next = q->first;
    if (q->first) q->first->prev = page;
    else q->last = page;
    q->first = page;
    page->in_queue = 1;
}

static void queue_push_back(hz_page_queue_t *q, hz_page_t *page) {
    page->next = NULL;
    page->prev = q->last;
    if (q->last) q->last->next = page;
    else q->first = page;
    q->last = page;
    page->in_queue = 1;
}

/* The page the fast path pops from for class cls (and every direct slot mapping to it). */
void hz_set_current(hz_heap_t *heap, unsigned cls, hz_page_t *page) {
    if (page == NULL) page = &hz_empty_page;
    heap->current[cls] = page;
    uint32_t size = hz_class_size[cls], below = cls == 1 ? 0 : hz_class_size[cls - 1];
    if (size <= HZ_DIRECT_MAX) {
        for (unsigned s = cls == 1 ? 0 : below / 16 + 1; s <= size / 16; s++)
            heap->direct[s] = page;
    } else if (size <= HZ_DIRECT_MID_MAX) {
        for (unsigned s = below / 256 + 1; s <= size / 256; s++) heap->direct_mid[s] = page;
    }
}

/* ------------------------------------------------------------------ pages */
/* Carve the next blocks of the span into the free list, 16 KiB (at least four
 * blocks) at a time, so that memory is touched only as it is needed (carving writes
 * every block's link).  A class's only page in the heap, while the class never gave
 * a page back, is carved 4 KiB (at least one block) at a time: every thread holds a
 * page of each class it ever used, and most classes of most threads hold a few
 * blocks, so what a class touches stays within an OS page of the most it ever held.
 * A class with more pages, or whose pages come and go (blocks sent to other
 * threads), carves in full steps: one block at a time, a class filling thousands of
 * pages of blocks above 4 KiB would take the slow path for each. */
#define EXTEND_STEP (16u << 10)
#define EXTEND_FIRST (4u << 10)
static void page_extend(hz_heap_t *heap, hz_page_t *page) {
    uint32_t size = page->block_size, capacity = hz_page_capacity(page);
    uint32_t n = page->reserved - capacity;
    const hz_page_queue_t *q = &heap->queues[page->cls];
    bool only_page = q->pages == 1 && q->retired_ms == 0;
    uint32_t want = (only_page ? EXTEND_FIRST : EXTEND_STEP) / size;
    uint32_t least = only_page ? 1 : 4;
    if (want < least) want = least;
    if (n > want) n = want;
    char *first = page->start + (size_t)capacity * size;
#if HZ_HARDENED
    /* In a random order, so that neighbours in memory are not neighbours in time. */
    uint16_t order[EXTEND_STEP / HZ_ALIGNMENT];
    for (uint32_t i = 0; i < n; i++) { /* Fisher-Yates, inside out */
        uint32_t j = (uint32_t)(hz_heap_random(heap) % (i + 1));
        if (j != i) order[i] = order[j];
        order[j] = (uint16_t)i;
    }
    void *head = page->free; /* the end of the list (the page had no free block) */
    for (uint32_t i = n; i-- > 0;) {
        /* cppcheck-suppress uninitvar ; the loop above wrote order[0 .. n-1] */
        char *b = first + (size_t)order[i] * size;
        hz_link_set(b, head);
        head = b;
    }
    page->free = head;
#else
    char *b = first;
    for (uint32_t i = 0; i + 1 < n; i++, b += size) hz_link_set(b, b + size);
    hz_link_set(b, page->free); /* the end of the list (the page had no free block) */
    page->free = first;
#endif
    page->free_is_zero = page->zero_span;
    page->carved_rank += n * hz_rank_step(page);
}

static bool retire_kept(hz_heap_t *heap);

/* Empty current pages kept for the class (keep_current), in units. */
#define KEEP_ALWAYS_UNITS 4   /* whatever the class does */
#define KEEP_CYCLING_UNITS 16 /* when the class's pages come and go */

/* The low bits of the clock in ms, plus 1, so that 0 means "never". */
static uint32_t retire_stamp(void) { return (uint32_t)hz_os_now_ms() + 1; }

/* The page's blocks: class cls, the span up to `end`. */
static void page_shape(hz_page_t *page, hz_segment_t *seg, unsigned cls, const char *end) {
    page->cls = (uint8_t)cls;
    for (unsigned u = 0; u < page->units; u++) seg->unit_class[page->first_unit + u] = (uint8_t)cls;
    page->block_size = hz_class_block[cls];
    page->reserved = (uint16_t)((size_t)(end - page->start) / page->block_size);
    page->block_mul = UINT64_MAX / page->block_size + 1 +
                      ((page->block_size & (page->block_size - 1)) == 0); /* see hz_block_rank */
}

static hz_page_t *page_new(hz_heap_t *heap, unsigned cls) {
    /* A page is made only when every page the class holds is full: a class with
     * pages has filled one, and gets a long page.  Its first is short, and so is any
     * page that memory (a tight RLIMIT_AS) has no room for at full length.  A class
     * that gave its pages back is not new: its live blocks hover about zero, and a
     * short page again would fill, be followed by a long one, and leave spans of two
     * lengths to the segment at every wave. */
    hz_page_queue_t *q = &heap->queues[cls];
    bool known = q->pages > 0 || q->retired_ms != 0;
    unsigned units = known ? hz_class_units[cls] : hz_class_first_units[cls];
    hz_page_t *page = hz_span_alloc(heap, cls, units, hz_class_align_units[cls], false);
    /* Empty pages kept for reuse (keep_current) must not cost a new segment. */
    if (page == NULL && retire_kept(heap))
        page = hz_span_alloc(heap, cls, units, hz_class_align_units[cls], false);
    if (page == NULL) page = hz_span_alloc(heap, cls, units, hz_class_align_units[cls], true);
    if (page == NULL && units != hz_class_first_units[cls])
        page = hz_span_alloc(heap, cls, hz_class_first_units[cls], hz_class_align_units[cls], true);
    if (page == NULL) return NULL;
    q->pages++;
    hz_segment_t *seg = hz_segment_of(page);
    char *end = (char *)seg + (size_t)(page->first_unit + page->units) * HZ_UNIT_SIZE;
#if HZ_HARDENED
    /* The segment's last page is a guard page, unless a page of one block needs it
     * (then the segment goes without a guard until a page that can spare it). */
    if (page->first_unit + page->units == HZ_UNITS) {
        size_t ps = hz_os_page_size();
        char *guard = end - ps;
        if (guard - page->start >= (ptrdiff_t)hz_class_block[cls]) {
            hz_os_guard(guard, ps);
            end = guard;
        } else {
            (void)hz_os_unguard(guard, ps); /* was writable: cannot be refused */
        }
    }
#endif
    page_shape(page, seg, cls, end);
    page->free = seg; /* an empty list that ends within the segment */
    hz_stat_inc(heap->stats.pages_made);
    return page;
}

/* How many classes above the one asked for a block that grows in place may take
 * (each 1/8 larger than the last): a class whose blocks are aligned to a large power
 * of two (512 KiB, 1 MiB) rarely has it where the span starts, the next ones do, and
 * a block that grew is likely to grow on into the room. */
#define RESIZE_LARGER_CLASSES 2

/* realloc of p, the one block of its page and in use, to a block of class cls (also
 * of one block per page): the page's span grows into the free units after it, or
 * gives back its tail, and p becomes a block of cls, or of a class a little larger
 * when cls's alignment does not hold where the span starts, where it is, nothing
 * copied.  False when no such class's units are free. */
bool hz_page_resize(hz_heap_t *heap, hz_page_t *page, unsigned cls) {
#if HZ_HARDENED
    (void)heap, (void)page, (void)cls;
    return false; /* the span may end at its segment's guard page */
#else
    unsigned old = page->cls;
    if ((size_t)hz_class_units[cls] * HZ_UNIT_SIZE >= 2 * (size_t)hz_class_block[cls])
        return false; /* cls has pages of several blocks */
    heap->busy++; /* queues change: a fork from a signal handler must not trust them */
    bool resized = false;
    for (unsigned last = cls + RESIZE_LARGER_CLASSES; cls <= last && cls < HZ_CLASSES; cls++)
        if ((resized = hz_span_resize(heap, page, hz_class_units[cls], hz_class_align_units[cls])))
            break;
    if (resized) {
        if (page->in_queue) { /* its block is out: it is full, as if a refill had seen it */
            bool was_current = heap->current[old] == page;
            queue_remove(&heap->queues[old], page);
            if (was_current) hz_set_current(heap, old, heap->queues[old].first);
        }
        heap->queues[old].pages--;
        heap->queues[cls].pages++;
        hz_segment_t *seg = hz_segment_of(page);
        page_shape(page, seg, cls,
                   (char *)seg + (size_t)(page->first_unit + page->units) * HZ_UNIT_SIZE);
        page->carved_rank = hz_rank_step(page);
        hz_stat_inc(heap->stats.frees[old]); /* counted as a move between classes */
        hz_stat_inc(heap->stats.mallocs[cls]);
    }
    heap->busy--;
    return resized;
#endif
}

/* A page that ran out of free blocks leaves its queue, and comes back when a quarter
 * of its blocks were freed, not at the first: with a large live set and scattered
 * frees, pages that came back with one block each made a refill (and a cold first
 * block) of every other malloc, and at an eighth a refill still came every few
 * (docs/PERFORMANCE.md).  Its `used` is lowered by this offset meanwhile, so that
 * the free fast path's one test for zero finds that moment; up to a quarter of a
 * full page's blocks wait for it. */
static int32_t full_offset(const hz_page_t *page) {
    uint32_t back = page->reserved / 4u;
    return (int32_t)page->reserved - (int32_t)(back > 0 ? back : 1);
}

static void page_retire(hz_heap_t *heap, hz_page_t *page) {
    unsigned cls = page->cls;
    if (page->in_queue) {
        bool was_current = heap->current[cls] == page;
        queue_remove(&heap->queues[cls], page);
        if (was_current) hz_set_current(heap, cls, heap->queues[cls].first);
    }
    heap->queues[cls].pages--;
#if HZ_HARDENING
    /* A double free may have made it look empty; in a fork child, so may a malloc
     * that fork interrupted (heap.c): such a page stays out of use, unretired. */
    if (heap->forked) {
        if (!hz_page_list_whole(page)) return;
    } else {
        hz_page_verify_empty(page);
    }
#endif
    hz_stat_inc(heap->stats.pages_retired);
    heap->queues[cls].retired_ms = retire_stamp();
    hz_span_free(heap, page);
}

/* Keep the page being allocated from when it empties: retiring it would only make
 * the next malloc of its class build and touch a page again.  Always up to
 * KEEP_ALWAYS_UNITS (256 KiB) of it; up to KEEP_CYCLING_UNITS (1 MiB, every class up
 * to 64 KiB) when the class retired a page within the purge delay, i.e. when its
 * pages come and go over and over.  Such pages are retired before the heap would
 * take a new segment (retire_kept). */
static bool keep_current(const hz_heap_t *heap, const hz_page_t *page) {
    if (heap->current[page->cls] != page || page->units > KEEP_CYCLING_UNITS) return false;
    if (page->units <= KEEP_ALWAYS_UNITS) return true;
    uint32_t at = heap->queues[page->cls].retired_ms;
    return at != 0 && retire_stamp() - at < hz_purge_delay_ms;
}

/* Retire the empty current pages that keep_current kept beyond KEEP_ALWAYS_UNITS;
 * true if any. */
static bool retire_kept(hz_heap_t *heap) {
    bool any = false;
    heap->busy++; /* queues change: a fork from a signal handler must not trust them */
    for (unsigned c = 1; c < HZ_CLASSES; c++) {
        hz_page_t *page = heap->current[c];
        if (page->units > KEEP_ALWAYS_UNITS && page->used == 0) { /* not hz_empty_page */
            page_retire(heap, page);
            any = true;
        }
    }
    heap->busy--;
    return any;
}

/* A page that left its queue full, with blocks free again, back at its end (and
 * current, if its class has none). */
static void page_requeue(hz_heap_t *heap, hz_page_t *page) {
    queue_push_back(&heap->queues[page->cls], page);
    if (heap->current[page->cls] == &hz_empty_page) hz_set_current(heap, page->cls, page);
}

/* After a free dropped a page to zero used blocks, or a full page got enough back. */
void hz_page_free_event(hz_heap_t *heap, hz_page_t *page) {
    bool was_full = !page->in_queue;
    if (was_full) page->used += full_offset(page);
    /* Below zero: more frees than blocks handed out. */
    if (hz_unlikely(page->used < 0)) hz_report_double_free(NULL, page->block_size);
    if (page->used == 0) {
        if (keep_current(heap, page)) return; /* trim and thread exit retire it */
        heap->busy++; /* queues change: a fork from a signal handler must not trust them */
        page_retire(heap, page);
        heap->busy--;
    } else if (was_full) {
        heap->busy++;
        page_requeue(heap, page);
        heap->busy--;
    }
}

#if HZ_HARDENED
/* ------------------------------------------------------------- quarantine
 * The hardened variant's free: a block is zeroed and held in its heap's quarantine
 * (a ring of HZ_QUARANTINE blocks) before it goes back to its page, and checked for
 * writes after free when it leaves. */
/* Bytes of a freed block checked for writes when it leaves the quarantine. */
#define QUARANTINE_CHECK 256

/* Whether a freed block p of page, zeroed at its free, was written since: any of its
 * first QUARANTINE_CHECK bytes from word `from` on that is not zero. */
static bool written_after_free(const hz_page_t *page, const void *p, size_t from) {
    const uint64_t *w = p;
    size_t n = page->block_size < QUARANTINE_CHECK ? page->block_size : QUARANTINE_CHECK;
    uint64_t acc = 0;
    for (size_t i = from; i < n / 8; i++) acc |= w[i];
    return acc != 0;
}

/* A quarantined block links to the end of a list (so a second free of it is seen)
 * and is zero after that word; anything else was written after free. */
static void quarantine_release(hz_heap_t *heap, void *p, hz_page_event_fn event) {
    hz_page_t *page = hz_page_of(hz_segment_of(p), p);
    if (hz_link_rel(p) != ((uintptr_t)p & HZ_SEGMENT_MASK) || written_after_free(page, p, 1))
        hz_report_corrupt(p, page->block_size);
    heap->quarantine_bytes -= page->block_size;
    hz_page_push_then(heap, page, p, event);
}

/* Over budget: the oldest blocks held leave until it is kept. */
static HZ_COLD HZ_NOINLINE void quarantine_trim(hz_heap_t *heap, hz_page_event_fn event) {
    while (heap->quarantine_bytes > HZ_QUARANTINE_BYTES) {
        uint32_t next = heap->quarantine_next;
        if (next - heap->quarantine_oldest > HZ_QUARANTINE)
            heap->quarantine_oldest = next - HZ_QUARANTINE; /* the ring went past it */
        if (heap->quarantine_oldest == next) return;
        uint32_t at = heap->quarantine_oldest++ % HZ_QUARANTINE;
        void *old = heap->quarantine[at];
        if (old == NULL) continue;
        heap->quarantine[at] = NULL;
        quarantine_release(heap, old, event);
    }
}

/* Into the quarantine, p (of page) zero after its first word; out goes the block put
 * a ring ago, and the oldest ones while the bytes held are over budget. */
HZ_INLINE void quarantine_put(hz_heap_t *heap, hz_page_t *page, void *p, hz_page_event_fn event) {
    hz_link_set(p, hz_segment_of(p));
    uint32_t i = heap->quarantine_next++ % HZ_QUARANTINE;
    void *old = heap->quarantine[i];
    heap->quarantine[i] = p;
    heap->quarantine_bytes += page->block_size;
    if (old != NULL) quarantine_release(heap, old, event);
    if (hz_unlikely(heap->quarantine_bytes > HZ_QUARANTINE_BYTES)) quarantine_trim(heap, event);
}

/* p was checked to start a block (hz_freed_block_page). */
void hz_free_quarantine(hz_heap_t *heap, hz_page_t *page, void *p, hz_page_event_fn event) {
    if (hz_block_on_list(p)) hz_report_double_free(p, page->block_size);
    hz_stat_inc(heap->stats.frees[page->cls]);
    memset(p, 0, page->block_size);
    quarantine_put(heap, page, p, event);
}

/* Its sender zeroed p and then wrote the marks of its list in its first two words
 * (remote.c, freelist.h): anything else was written after free. */
void hz_quarantine_remote(hz_heap_t *heap, hz_page_t *page, void *p) {
    if (written_after_free(page, p, 2)) hz_report_corrupt(p, page->block_size);
    ((uint64_t *)p)[1] = 0;
    quarantine_put(heap, page, p, hz_page_free_event);
}

void hz_quarantine_flush(hz_heap_t *heap) {
    for (uint32_t i = 0; i < HZ_QUARANTINE; i++) {
        void *p = heap->quarantine[i];
        heap->quarantine[i] = NULL;
        if (p != NULL) quarantine_release(heap, p, hz_page_free_event);
    }
}
#endif

/* Retire every empty page, the current ones too (thread exit, trim). */
void hz_heap_retire_empty(hz_heap_t *heap) {
    for (unsigned c = 1; c < HZ_CLASSES; c++) {
        hz_page_t *page = heap->queues[c].first, *next;
        for (; page != NULL; page = next) {
            next = page->next;
            if (page->used == 0) page_retire(heap, page);
        }
    }
}

/* The next refills of a class take the pages queued behind its new current page,
 * each with a few free blocks when the live set is large and the frees scattered:
 * start fetching the first block of the next one (whose descriptor the previous
 * refill fetched) and the descriptor of the one after, so that neither is a cache
 * miss when its turn comes. */
static void prefetch_queue(const hz_page_t *next) {
    if (next == NULL) return;
    __builtin_prefetch(next->free, 1);
    __builtin_prefetch(next->next);
}

/* The OS has no memory for a page of class cls: put the heap's pages of that class
 * that left their queue full, and have free blocks again (fewer than a quarter of
 * theirs, full_offset), back in the queue.  A page that waits so has `used` above
 * zero; one a fork child keeps out of use (page_retire) has 0.  True if any. */
static HZ_COLD HZ_NOINLINE bool requeue_full(hz_heap_t *heap, unsigned cls) {
    bool any = false;
    for (hz_segment_t *seg = heap->segments; seg != NULL; seg = seg->next) {
        for (unsigned u = 0; u < HZ_UNITS;) {
            hz_page_t *page = &seg->pages[u];
            if (seg->free_units & (1ULL << u)) {
                u++;
                continue;
            }
            u += page->units > 0 ? page->units : 1u;
            if (page->cls != cls || page->in_queue || page->used <= 0 || hz_list_end(page->free))
                continue;
            page->used += full_offset(page);
            page_requeue(heap, page);
            any = true;
        }
    }
    return any;
}

/* A page of class cls with a block on its free list, found or made, and made current
 * (NULL when the OS has no memory). */
hz_page_t *hz_page_ready(hz_heap_t *heap, unsigned cls) {
    hz_page_queue_t *q = &heap->queues[cls];
again:;
    hz_page_t *page = q->first, *next;
    for (; page != NULL; page = next) {
        next = page->next;
        if (!hz_list_end(page->free)) break;
        if (page->carved_rank < hz_page_end_rank(page)) { /* room to carve */
            page_extend(heap, page);
            break;
        }
        queue_remove(q, page); /* full: back in the queue once a few blocks are freed */
        page->used -= full_offset(page);
    }
    if (page == NULL) {
        page = page_new(heap, cls);
        if (page == NULL) {
            if (requeue_full(heap, cls)) goto again;
            hz_set_current(heap, cls, q->first);
            return NULL;
        }
        page_extend(heap, page);
        queue_push_front(q, page);
    } else if (q->first != page) {
        queue_remove(q, page);
        queue_push_front(q, page);
    }
    prefetch_queue(page->next);
    hz_set_current(heap, cls, page);
    return page;
}

