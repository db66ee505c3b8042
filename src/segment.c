/* segment.c - where pages come from: a heap's segments, their free units, purging of
 * freed units, and the process-wide cache of empty segments. */
#include "internal.h"

/* One byte per possible segment of the address space (32 MiB of BSS on x86-64, only
 * touched where segments live): lets free() tell our pointers from others' without
 * touching their memory. */
_Atomic uint8_t hz_segmap[HZ_SEGMAP_ENTRIES];

static hz_lock_t cache_lock;
static hz_segment_t *cache[HZ_SEGMENT_CACHE];
static unsigned cache_count;

hz_lock_t *hz_segment_cache_lock(void) { return &cache_lock; }

static uint64_t units_mask(unsigned first, unsigned n) {
    return (n >= 64 ? ~0ULL : ((1ULL << n) - 1)) << first;
}

static char *unit_start(hz_segment_t *seg, unsigned u) {
    return (char *)seg + (u == 0 ? HZ_SEGMENT_HEADER : (size_t)u * HZ_UNIT_SIZE);
}

/* Purge the dirty free units of one segment, a contiguous run per madvise call. */
static size_t segment_purge(hz_segment_t *seg) {
    uint64_t todo = seg->dirty_units & seg->free_units;
    size_t purged = 0;
    while (todo) {
        unsigned first = (unsigned)__builtin_ctzll(todo), n = 0;
        while (first + n < HZ_UNITS && (todo >> (first + n) & 1)) n++;
        char *start = unit_start(seg, first);
        char *end = (char *)seg + (size_t)(first + n) * HZ_UNIT_SIZE;
        hz_os_purge(start, (size_t)(end - start));
        uint64_t m = units_mask(first, n);
        /* Unit 0 shares its first OS page with the header: it stays dirty when the
         * page size leaves nothing of it to purge. */
        if (first == 0 && hz_align_up((uintptr_t)start, hz_os_page_size) >=
                              (uintptr_t)seg + HZ_UNIT_SIZE)
            m &= ~1ULL;
        seg->dirty_units &= ~m;
        todo &= ~units_mask(first, n);
        purged += (size_t)n * HZ_UNIT_SIZE;
    }
    return purged;
}

/* Purge what has been free for HZ_PURGE_DELAY_MS, or everything when forced or when
 * the heap holds more than HZ_DIRTY_BUDGET of freed memory: memory reused soon stays
 * resident, memory left alone goes back to the OS. */
void hz_heap_purge(hz_heap_t *heap, bool force) {
    if (heap->dirty_bytes == 0) return;
    force |= heap->dirty_bytes > HZ_DIRTY_BUDGET;
    uint64_t now = hz_os_now_ms();
    if (!force && now < heap->purge_at_ms) return;
    uint64_t next = UINT64_MAX;
    for (hz_segment_t *s = heap->segments; s != NULL; s = s->next) {
        if ((s->dirty_units & s->free_units) == 0) continue;
        if (force || s->purge_at_ms <= now) {
            size_t n = segment_purge(s);
            heap->dirty_bytes -= n < heap->dirty_bytes ? n : heap->dirty_bytes;
        } else if (s->purge_at_ms < next) {
            next = s->purge_at_ms;
        }
    }
    if (next == UINT64_MAX) heap->dirty_bytes = 0;
    heap->purge_at_ms = next;
}

static hz_segment_t *segment_acquire(hz_heap_t *heap) {
    hz_segment_t *seg = NULL;
    hz_lock_acquire(&cache_lock);
    if (cache_count > 0) seg = cache[--cache_count];
    hz_lock_release(&cache_lock);
    if (seg == NULL) {
        seg = hz_os_map_aligned(HZ_SEGMENT_SIZE, HZ_SEGMENT_SIZE);
        if (seg == NULL) return NULL;
        seg->dirty_units = 0;
        hz_gstat_add(segments_mapped, 1);
    }
    seg->heap = heap;
    seg->free_units = ~0ULL;
    memset(seg->unit_page, 0, sizeof seg->unit_page);
    seg->prev = NULL;
    seg->next = heap->segments;
    if (heap->segments) heap->segments->prev = seg;
    heap->segments = seg;
    hz_segmap_set(seg, HZ_SEG_SMALL);
    return seg;
}

static void segment_unlink(hz_heap_t *heap, hz_segment_t *seg) {
    if (seg->prev) seg->prev->next = seg->next;
    else heap->segments = seg->next;
    if (seg->next) seg->next->prev = seg->prev;
    seg->next = seg->prev = NULL;
}

/* An empty segment goes, purged, to the cache or back to the OS. */
static void segment_release(hz_heap_t *heap, hz_segment_t *seg) {
    segment_unlink(heap, seg);
    hz_segmap_set(seg, HZ_SEG_NONE); /* stale pointers into it now read as foreign */
    size_t purged = segment_purge(seg);
    heap->dirty_bytes -= purged < heap->dirty_bytes ? purged : heap->dirty_bytes;
    seg->heap = NULL;
    hz_lock_acquire(&cache_lock);
    if (cache_count < HZ_SEGMENT_CACHE) {
        cache[cache_count++] = seg;
        seg = NULL;
    }
    hz_lock_release(&cache_lock);
    if (seg != NULL) {
        hz_os_unmap(seg, HZ_SEGMENT_SIZE);
        hz_gstat_sub(segments_mapped, 1);
    }
}

bool hz_segment_cache_trim(void) {
    hz_segment_t *drop[HZ_SEGMENT_CACHE];
    hz_lock_acquire(&cache_lock);
    unsigned n = cache_count;
    memcpy(drop, cache, n * sizeof drop[0]);
    cache_count = 0;
    hz_lock_release(&cache_lock);
    for (unsigned i = 0; i < n; i++) {
        hz_os_unmap(drop[i], HZ_SEGMENT_SIZE);
        hz_gstat_sub(segments_mapped, 1);
    }
    return n > 0;
}

/* Lowest run of n free units, or -1. */
static int find_run(uint64_t free_units, unsigned n) {
    uint64_t want = units_mask(0, n);
    for (unsigned i = 0; i + n <= HZ_UNITS; i++) {
        if (((free_units >> i) & want) == want) return (int)i;
        if (!(free_units >> i)) break;
    }
    return -1;
}

/* A page of `units` units for the heap, from its segments or a new one. */
hz_page_t *hz_span_alloc(hz_heap_t *heap, unsigned units) {
    hz_segment_t *seg;
    int first = -1;
    for (seg = heap->segments; seg != NULL && seg->free_units != 0; seg = seg->next)
        if ((first = find_run(seg->free_units, units)) >= 0) break;
    if (seg == NULL || first < 0) {
        seg = segment_acquire(heap);
        if (seg == NULL) return NULL;
        first = 0;
    }
    uint64_t m = units_mask((unsigned)first, units);
    seg->free_units &= ~m;
    if (seg->free_units == 0 && seg->next != NULL) { /* full segments go to the back */
        segment_unlink(heap, seg);
        hz_segment_t *last = heap->segments;
        while (last->next) last = last->next;
        last->next = seg;
        seg->prev = last;
    }
    hz_page_t *page = &seg->pages[first];
    memset(page, 0, sizeof *page);
    page->first_unit = (uint8_t)first;
    page->units = (uint8_t)units;
    page->zero_span = (seg->dirty_units & m) == 0;
    size_t reused = (size_t)__builtin_popcountll(seg->dirty_units & m) * HZ_UNIT_SIZE;
    heap->dirty_bytes -= reused < heap->dirty_bytes ? reused : heap->dirty_bytes;
    seg->dirty_units |= m;
    page->start = unit_start(seg, (unsigned)first);
    for (unsigned u = 0; u < units; u++) seg->unit_page[first + (int)u] = page;
    return page;
}

void hz_span_free(hz_heap_t *heap, hz_page_t *page) {
    hz_segment_t *seg = hz_segment_of(page);
    unsigned first = page->first_unit, units = page->units;
    uint64_t m = units_mask(first, units);
    bool was_full = seg->free_units == 0;
    for (unsigned u = 0; u < units; u++) seg->unit_page[first + u] = NULL;
    if ((seg->dirty_units & seg->free_units) == 0) {
        seg->purge_at_ms = hz_os_now_ms() + HZ_PURGE_DELAY_MS;
        if (heap->dirty_bytes == 0 || seg->purge_at_ms < heap->purge_at_ms)
            heap->purge_at_ms = seg->purge_at_ms;
    }
    seg->free_units |= m;
    heap->dirty_bytes += (size_t)units * HZ_UNIT_SIZE;
    if (was_full && heap->segments != seg) { /* it has room again: to the front */
        segment_unlink(heap, seg);
        seg->next = heap->segments;
        heap->segments->prev = seg;
        heap->segments = seg;
    }
    if (seg->free_units == ~0ULL && (seg->next != NULL || seg->prev != NULL)) {
        segment_release(heap, seg); /* keep a heap's last segment for reuse */
        return;
    }
    hz_heap_purge(heap, false);
}

/* Release every empty segment (all of them, or all but one). */
void hz_heap_release_segments(hz_heap_t *heap, bool keep_one) {
    hz_segment_t *s = heap->segments, *next;
    for (; s != NULL; s = next) {
        next = s->next;
        if (s->free_units != ~0ULL) continue;
        if (keep_one && heap->segments == s && s->next == NULL) break;
        segment_release(heap, s);
    }
}
