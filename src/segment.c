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

static void segment_release(hz_heap_t *heap, hz_segment_t *seg);

static uint64_t units_mask(unsigned first, unsigned n) {
    return (n >= 64 ? ~0ULL : ((1ULL << n) - 1)) << first;
}

static char *unit_start(hz_segment_t *seg, unsigned u) {
    return (char *)seg + (u == 0 ? HZ_SEGMENT_HEADER : (size_t)u * HZ_UNIT_SIZE);
}

/* Purge the dirty free units of one segment selected by `which`, a contiguous run
 * per madvise call. */
static size_t segment_purge(hz_segment_t *seg, uint64_t which) {
    uint64_t todo = seg->dirty_units & seg->free_units & which;
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

/* Purging runs in epochs of HZ_PURGE_DELAY_MS: at each epoch, units that were
 * already free and unpurged at the previous epoch (the candidates) go back to the
 * OS, so memory idle for one to two epochs is returned and memory reused sooner is
 * never purged.  When freed memory exceeds both HZ_DIRTY_BUDGET and what the heap has
 * in use, the candidates go at once and then more, down to half the budget: a burst
 * of frees is returned without throwing away the pages about to be reused.  `all`
 * (trim, thread exit) purges everything. */
void hz_heap_purge(hz_heap_t *heap, bool all) {
    if (heap->dirty_bytes == 0) return;
    bool over = heap->dirty_bytes > HZ_DIRTY_BUDGET && heap->dirty_bytes > heap->used_bytes;
    uint64_t now = hz_os_now_ms();
    bool epoch = all || now >= heap->purge_at_ms;
    if (!epoch && !over) return;
    hz_segment_t *s, *s_next;
    for (s = heap->segments; s != NULL; s = s->next) {
        size_t n = segment_purge(s, all ? ~0ULL : s->purge_candidates);
        heap->dirty_bytes -= n < heap->dirty_bytes ? n : heap->dirty_bytes;
    }
    for (s = heap->segments; over && !all && s != NULL && heap->dirty_bytes > HZ_DIRTY_BUDGET / 2;
         s = s->next) {
        size_t n = segment_purge(s, ~0ULL);
        heap->dirty_bytes -= n < heap->dirty_bytes ? n : heap->dirty_bytes;
    }
    bool pending = false;
    for (s = heap->segments; s != NULL; s = s_next) {
        s_next = s->next;
        uint64_t dirty_free = s->dirty_units & s->free_units;
        if (epoch) s->purge_candidates = dirty_free;
        pending |= dirty_free != 0;
        /* Empty and purged: give the whole segment back (a heap keeps its last). */
        if (s->free_units == ~0ULL && dirty_free == 0 && (s->next != NULL || s->prev != NULL))
            segment_release(heap, s);
    }
    if (!pending) heap->dirty_bytes = 0;
    if (epoch) heap->purge_at_ms = pending ? now + HZ_PURGE_DELAY_MS : 0;
}

/* Length of the longest run of set bits. */
static unsigned longest_run(uint64_t x) {
    unsigned n = 0;
    for (; x != 0; n++) x &= x >> 1;
    return n;
}

static void update_max_run(hz_segment_t *seg) { seg->max_run = longest_run(seg->free_units & ~1ULL); }

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
    seg->purge_candidates = 0;
    update_max_run(seg);
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
    size_t purged = segment_purge(seg, ~0ULL);
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
    for (unsigned i = 0; i < n; i++) drop[i] = cache[i];
    cache_count = 0;
    hz_lock_release(&cache_lock);
    for (unsigned i = 0; i < n; i++) {
        hz_os_unmap(drop[i], HZ_SEGMENT_SIZE);
        hz_gstat_sub(segments_mapped, 1);
    }
    return n > 0;
}

/* Lowest run of n set bits in f, or -1: after the loop, bit i of x is set exactly
 * when bits i .. i+n-1 of f are. */
static int find_run(uint64_t f, unsigned n) {
    uint64_t x = f;
    for (unsigned have = 1; have < n && x != 0;) {
        unsigned s = have < n - have ? have : n - have;
        x &= x >> s;
        have += s;
    }
    return x ? __builtin_ctzll(x) : -1;
}

/* First run of n units whose memory is still resident (no page faults to refill
 * it), else the first free run at all. */
static hz_segment_t *find_span(hz_heap_t *heap, unsigned units, int *first) {
    uint64_t usable = units > 1 ? ~1ULL : ~0ULL;
    for (int pass = 0; pass < 2; pass++) {
        for (hz_segment_t *s = heap->segments; s != NULL && s->free_units != 0; s = s->next) {
            if (units > 1 && s->max_run < units) continue;
            uint64_t f = s->free_units & usable & (pass == 0 ? s->dirty_units : ~0ULL);
            if ((*first = find_run(f, units)) >= 0) return s;
        }
    }
    return NULL;
}

/* A page of `units` units for the heap, from its segments or a new one. */
hz_page_t *hz_span_alloc(hz_heap_t *heap, unsigned units) {
    int first = -1;
    /* Unit 0 is shortened by the header: it only takes single-unit pages. */
    hz_segment_t *seg = find_span(heap, units, &first);
    if (seg == NULL) {
        seg = segment_acquire(heap);
        if (seg == NULL) return NULL;
        first = units > 1 ? 1 : 0;
    }
    uint64_t m = units_mask((unsigned)first, units);
    seg->free_units &= ~m;
    seg->purge_candidates &= ~m;
    update_max_run(seg);
    heap->used_bytes += (size_t)units * HZ_UNIT_SIZE;
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
    if (heap->purge_at_ms == 0) heap->purge_at_ms = hz_os_now_ms() + HZ_PURGE_DELAY_MS;
    seg->free_units |= m;
    update_max_run(seg);
    heap->used_bytes -= (size_t)units * HZ_UNIT_SIZE;
    heap->dirty_bytes += (size_t)units * HZ_UNIT_SIZE;
    if (was_full && heap->segments != seg) { /* it has room again: to the front */
        segment_unlink(heap, seg);
        seg->next = heap->segments;
        heap->segments->prev = seg;
        heap->segments = seg;
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
