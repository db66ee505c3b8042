/* segment.c - where pages come from: the segment map, a heap's segments and their
 * free units, committing and purging units, and the process-wide cache of empty
 * segments.
 *
 * A segment is reserved as address space and committed from its start as pages need
 * it: units 0 .. committed_units-1 are writable, the rest PROT_NONE, so a segment is
 * two mappings and an idle heap commits only what it has used. */
#include "internal.h"

/* ------------------------------------------------------------ segment map */
/* Lets free() tell our pointers from others' without touching their memory.
 *
 * At start-up the whole map is reserved as one read-only mapping of zeros (256 MiB
 * of address space, neither charged nor resident), the top table pointing into it,
 * so that free() finds an entry with one shift and one load instead of going
 * through the top table.  A page of it is made writable when a segment first lands
 * in its range (each covers 2 GiB of address space).  Under a limit of address space
 * below 1 GiB (ulimit -v), or where the reservation is refused, leaves are mapped
 * one by one when first needed and lookups take the two-level way.  Either way nothing of the map is ever unmapped, and the
 * zero leaf is never written. */
#define LEAF_BYTES (HZ_SEGMAP_LEAF_ENTRIES * sizeof(uintptr_t))
#define FLAT_BYTES (HZ_SEGMAP_ENTRIES * sizeof(uintptr_t))
static _Atomic uintptr_t zero_leaf[HZ_SEGMAP_LEAF_ENTRIES];
_Atomic(_Atomic uintptr_t *) hz_segmap_top[HZ_SEGMAP_TOP_ENTRIES] = {
    [0 ... HZ_SEGMAP_TOP_ENTRIES - 1] = zero_leaf,
};
_Atomic uintptr_t *hz_segmap_flat;
uintptr_t hz_segmap_flat_entries;
/* Which pages of the flat map are writable (one bit per 4 KiB or larger page). */
static _Atomic uint64_t flat_writable[FLAT_BYTES / 4096 / 64];

void hz_segmap_init(void) {
    /* Only an empty map may change form: no leaf of the two-level way yet. */
    for (size_t t = 0; t < HZ_SEGMAP_TOP_ENTRIES; t++)
        if (atomic_load_explicit(&hz_segmap_top[t], memory_order_relaxed) != zero_leaf) return;
    /* Under a limit of address space (ulimit -v) the reservation would take a
     * quarter of it or more from the program: leaves one by one then. */
    if (hz_os_address_space_limit() / 4 < FLAT_BYTES) return;
    _Atomic uintptr_t *flat = hz_os_reserve_zero(FLAT_BYTES);
    if (flat == NULL) return;
    for (size_t t = 0; t < HZ_SEGMAP_TOP_ENTRIES; t++)
        atomic_store_explicit(&hz_segmap_top[t], flat + t * HZ_SEGMAP_LEAF_ENTRIES,
                              memory_order_release);
    hz_segmap_flat = flat;
    atomic_thread_fence(memory_order_release); /* the array before its length */
    hz_segmap_flat_entries = HZ_SEGMAP_ENTRIES;
}

static bool flat_on(void) { return hz_segmap_flat_entries != 0; }

/* The page of the flat map holding seg's entry: its number, and its word and bit in
 * flat_writable. */
static size_t flat_page_of(const void *seg, size_t *word, uint64_t *bit) {
    size_t page = ((uintptr_t)seg >> HZ_SEGMENT_SHIFT) * sizeof(uintptr_t) / hz_os_page_size();
    *word = page / 64;
    *bit = (uint64_t)1 << (page % 64);
    return page;
}

/* Make the page holding seg's entry writable; false if the kernel will not. */
static bool flat_prepare(const void *seg) {
    size_t w;
    uint64_t bit;
    size_t page = flat_page_of(seg, &w, &bit);
    if (atomic_load_explicit(&flat_writable[w], memory_order_acquire) & bit) return true;
    size_t ps = hz_os_page_size();
    /* Two threads may both get here: mprotect twice is harmless, counting is not. */
    if (!hz_os_unguard((char *)hz_segmap_flat + page * ps, ps)) return false;
    if ((atomic_fetch_or_explicit(&flat_writable[w], bit, memory_order_acq_rel) & bit) == 0) {
        hz_gstat_grow(bytes_mapped, peak_mapped, ps);
        hz_gstat_grow(bytes_committed, peak_committed, ps);
        hz_gstat_add(bytes_meta, ps);
    }
    return true;
}

static bool flat_is_writable(const void *seg) {
    size_t w;
    uint64_t bit;
    (void)flat_page_of(seg, &w, &bit);
    return (atomic_load_explicit(&flat_writable[w], memory_order_acquire) & bit) != 0;
}

static _Atomic uintptr_t *leaf_of(const void *seg) {
    return atomic_load_explicit(&hz_segmap_top[(uintptr_t)seg >> HZ_SEGMAP_TOP_SHIFT],
                                memory_order_acquire);
}

/* Make sure seg's entry is writable, so that hz_segmap_set cannot fail. */
bool hz_segmap_prepare(const void *seg) {
    if (flat_on()) return flat_prepare(seg);
    if (leaf_of(seg) != zero_leaf) return true;
    _Atomic uintptr_t *fresh = hz_os_map_aligned(LEAF_BYTES, 0);
    if (fresh == NULL) return false;
    _Atomic uintptr_t *expect = zero_leaf;
    if (atomic_compare_exchange_strong(&hz_segmap_top[(uintptr_t)seg >> HZ_SEGMAP_TOP_SHIFT],
                                       &expect, fresh)) {
        hz_gstat_add(bytes_meta, LEAF_BYTES);
    } else { /* another thread won */
        hz_os_unmap(fresh, LEAF_BYTES, LEAF_BYTES);
    }
    return true;
}

/* Store seg's entry (its leaf prepared, unless the entry is HZ_SEG_NONE). */
static void segmap_store(const void *seg, uintptr_t entry) {
    _Atomic uintptr_t *leaf = leaf_of(seg);
    /* Never set: reads as HZ_SEG_NONE already. */
    if (leaf == zero_leaf || (flat_on() && !flat_is_writable(seg))) return;
    atomic_store_explicit(&leaf[((uintptr_t)seg >> HZ_SEGMENT_SHIFT) & (HZ_SEGMAP_LEAF_ENTRIES - 1)],
                          entry, memory_order_release);
}

void hz_segmap_set(const void *seg, unsigned kind) { segmap_store(seg, kind); }
void hz_segmap_set_owner(const void *seg, const hz_heap_t *owner) {
    segmap_store(seg, (uintptr_t)owner);
}

/* --------------------------------------------------------------- segments */
/* Empty segments wait in the cache for any heap: purged and decommitted (given back
 * by a heap's purge), or resident (given up by the heap of an exiting thread, whose
 * next thread may need less: a heap that needs a segment now takes it with its
 * pages still backed, instead of faulting in fresh ones while the idle heap's are
 * purged).  Resident ones hold at most HZ_DIRTY_BUDGET in all, and are purged once
 * HZ_PURGE_DELAY_MS old (hz_segment_cache_age), staying listed meanwhile, marked, so
 * that a fork then loses none (hz_stamp_orphan). */
static hz_lock_t cache_lock;
static hz_segment_t *cache[HZ_SEGMENT_CACHE + 1]; /* + 1: a cache of none still compiles */
static unsigned cache_count;
static size_t cache_resident; /* dirty bytes of the cached segments */

/* cache_resident changes (under cache_lock; stored atomically for
 * hz_segment_cache_resident, which reads it unlocked), mirrored in the counters
 * that readers see. */
static void resident_add(size_t n) {
    __atomic_store_n(&cache_resident, cache_resident + n, __ATOMIC_RELAXED);
    hz_gstat_add(cached_dirty, n);
}

static void resident_sub(size_t n) {
    __atomic_store_n(&cache_resident, cache_resident - n, __ATOMIC_RELAXED);
    hz_gstat_sub(cached_dirty, n);
}

hz_lock_t *hz_segment_cache_lock(void) { return &cache_lock; }
void hz_segment_cache_forget(void) {
    cache_count = 0;
    resident_sub(cache_resident);
}

static void segment_release(hz_heap_t *heap, hz_segment_t *seg);
static void retired_drop(hz_heap_t *heap, hz_segment_t *seg, unsigned first, unsigned units);

static uint64_t units_mask(unsigned first, unsigned n) {
    return (n >= 64 ? ~0ULL : ((1ULL << n) - 1)) << first;
}

static char *unit_start(hz_segment_t *seg, unsigned u) {
    return (char *)seg + (u == 0 ? HZ_SEGMENT_HEADER : (size_t)u * HZ_UNIT_SIZE);
}

/* Purge the dirty free units of one segment selected by `which`, a contiguous run
 * per madvise call; returns the bytes of units now clean.  Unit 0 shares its first
 * OS page with the header, which stays resident: that part is zeroed by hand (none
 * with 4 KiB pages, up to 56 KiB with 64 KiB pages).  A unit whose madvise failed
 * stays dirty: it must never be taken for zero memory. */
static size_t segment_purge(hz_segment_t *seg, uint64_t which) {
    uint64_t todo = seg->dirty_units & seg->free_units & which;
    size_t purged = 0;
    while (todo) {
        unsigned first = (unsigned)__builtin_ctzll(todo), n = 0;
        while (first + n < HZ_UNITS && (todo >> (first + n) & 1)) n++;
        uint64_t m = units_mask(first, n);
        todo &= ~m;
        char *start = unit_start(seg, first);
        char *end = (char *)seg + (size_t)(first + n) * HZ_UNIT_SIZE;
        if (first == 0) {
            size_t shared = hz_align_up(HZ_SEGMENT_HEADER, hz_os_page_size()) - HZ_SEGMENT_HEADER;
            if (shared > HZ_UNIT_SIZE - HZ_SEGMENT_HEADER) shared = HZ_UNIT_SIZE - HZ_SEGMENT_HEADER;
            memset(start, 0, shared);
            start += shared;
        }
        if (start < end && hz_os_purge(start, (size_t)(end - start)) == 0) continue;
        seg->dirty_units &= ~m;
        purged += (size_t)n * HZ_UNIT_SIZE;
    }
    return purged;
}

/* seg is its heap's only segment. */
static bool segment_alone(const hz_segment_t *seg) { return seg->next == NULL && seg->prev == NULL; }

/* Commit units up to `end` (exclusive), in steps of 4 units (256 KiB), so that a
 * small program commits little; in a heap that has outgrown one segment, at least
 * doubling what is committed, so that a growing heap makes a handful of mprotect
 * calls per segment (each stops the other threads' page faults while it holds the
 * address-space lock).  False when the kernel refuses. */
static bool segment_commit(hz_segment_t *seg, unsigned end) {
    unsigned have = seg->committed_units;
    if (end <= have) return true;
    unsigned want = (end + 3u) & ~3u;
    if (!segment_alone(seg) && want < 2 * have) want = 2 * have;
    if (want > HZ_UNITS) want = HZ_UNITS;
    char *from = (char *)seg + (size_t)have * HZ_UNIT_SIZE;
    if (!hz_os_commit(from, (size_t)(want - have) * HZ_UNIT_SIZE)) {
        if (want == end || !hz_os_commit(from, (size_t)(end - have) * HZ_UNIT_SIZE)) return false;
        want = end;
    }
    seg->committed_units = want;
    return true;
}

/* Give back all of an empty segment but its first unit (header and unit 0), pages
 * and commit charge; returns the bytes of dirty units dropped.  If the kernel
 * refuses, the units stay committed and dirty (purging still applies). */
static size_t segment_decommit(hz_segment_t *seg) {
    unsigned have = seg->committed_units;
    if (have <= 1 || !hz_os_decommit((char *)seg + HZ_UNIT_SIZE, (size_t)(have - 1) * HZ_UNIT_SIZE))
        return 0;
    seg->committed_units = 1;
    size_t dropped = (size_t)__builtin_popcountll(seg->dirty_units & ~1ULL) * HZ_UNIT_SIZE;
    seg->dirty_units &= 1ULL;
    return dropped;
}

static size_t segment_committed_bytes(const hz_segment_t *seg) {
    return (size_t)seg->committed_units * HZ_UNIT_SIZE;
}

/* A heap's freed, unpurged page memory, copied to its slot header for readers
 * (hz_stats_get, hzstat), who add the heaps' figures up: a word only its owner
 * writes, where a process-wide sum would be a line that every thread's span
 * changes write. */
static void dirty_set(hz_heap_t *heap, size_t n) {
    heap->dirty_bytes = n;
    __atomic_store_n(&hz_heap_slot(heap)->bytes_dirty, (uint64_t)n, __ATOMIC_RELAXED);
}

static void dirty_add(hz_heap_t *heap, size_t n) { dirty_set(heap, heap->dirty_bytes + n); }

/* Estimates (a purge counts what it finds dirty, not what this heap added): never
 * below zero. */
static void dirty_sub(hz_heap_t *heap, size_t n) {
    dirty_set(heap, n < heap->dirty_bytes ? heap->dirty_bytes - n : 0);
}

/* Start a new window of what the heap needs (hz_heap_purge) once the current one is
 * HZ_PURGE_DELAY_MS old; after a longer gap, the previous one counts as empty. */
static void need_roll(hz_heap_t *heap, uint64_t now) {
    enum hz_window w = hz_window_roll(&heap->window_ms, now);
    if (w == HZ_WINDOW_SAME) return;
    bool gap = w == HZ_WINDOW_GAP;
    heap->used_peak[1] = gap ? heap->used_bytes : heap->used_peak[0];
    heap->reused[1] = gap ? 0 : heap->reused[0];
    heap->used_peak[0] = heap->used_bytes;
    heap->reused[0] = 0;
}

/* The freed bytes the heap shows a need for: what it took again in the last two
 * windows, up to the most it had in use then, and at least what it has in use. */
static size_t dirty_keep(const hz_heap_t *heap) {
    size_t peak = heap->used_peak[0] > heap->used_peak[1] ? heap->used_peak[0] : heap->used_peak[1];
    size_t reused = heap->reused[0] + heap->reused[1];
    size_t keep = reused < peak ? reused : peak;
    return keep > heap->used_bytes ? keep : heap->used_bytes;
}

/* Purging runs in epochs of HZ_PURGE_DELAY_MS: at each epoch, units that were
 * already free and unpurged at the previous epoch (the candidates) go back to the
 * OS, so memory idle for one to two epochs is returned and memory reused sooner is
 * never purged.  Freed memory beyond HZ_DIRTY_BUDGET that the heap shows no sign of
 * needing goes at once, candidates first, down to half the budget: a burst of frees
 * is returned without waiting for an epoch, which an idle thread never reaches.  The
 * sign of need is memory taken again, in the last 50 to 100 ms, after a page had
 * left it (resident or purged): a heap whose blocks come back in waves (handed to
 * other threads and freed back) keeps as much as it has lately reused, up to the most
 * it has lately had in use, instead of purging each wave only to fault it back in;
 * a program that frees what it built once and goes idle gets no such allowance.
 * `all` (trim, thread exit) purges everything. */
void hz_heap_purge(hz_heap_t *heap, bool all) {
    if (heap->dirty_bytes == 0) return;
    uint64_t now = hz_os_now_ms();
    need_roll(heap, now);
    bool over = heap->dirty_bytes > HZ_DIRTY_BUDGET && heap->dirty_bytes > dirty_keep(heap);
    bool epoch = all || now >= heap->purge_at_ms;
    if (!epoch && !over) return;
    hz_segment_t *s, *s_next;
    for (s = heap->segments; s != NULL; s = s->next) {
        size_t n = segment_purge(s, all ? ~0ULL : s->purge_candidates);
        dirty_sub(heap, n);
    }
    for (s = heap->segments; over && !all && s != NULL && heap->dirty_bytes > HZ_DIRTY_BUDGET / 2;
         s = s->next) {
        size_t n = segment_purge(s, ~0ULL);
        dirty_sub(heap, n);
    }
    bool pending = false;
    for (s = heap->segments; s != NULL; s = s_next) {
        s_next = s->next;
        uint64_t dirty_free = s->dirty_units & s->free_units;
        if (epoch) s->purge_candidates = dirty_free;
        pending |= dirty_free != 0;
        /* Empty and purged: give the whole segment back (a heap keeps its last). */
        if (s->free_units == ~0ULL && dirty_free == 0 && !segment_alone(s))
            segment_release(heap, s);
    }
    if (!pending) dirty_set(heap, 0);
    if (epoch) heap->purge_at_ms = pending ? now + HZ_PURGE_DELAY_MS : 0;
}

/* Length of the longest run of set bits. */
static unsigned longest_run(uint64_t x) {
    unsigned n = 0;
    for (; x != 0; n++) x &= x >> 1;
    return n;
}

static void update_max_run(hz_segment_t *seg) { seg->max_run = longest_run(seg->free_units & ~1ULL); }



/* A fresh segment: reserved, its header and unit 0 committed, its leaf of the
 * segment map ready. */
static hz_segment_t *segment_map_new(void) {
    hz_segment_t *seg = hz_os_reserve(HZ_SEGMENT_SIZE, HZ_SEGMENT_SIZE);
    if (seg == NULL) return NULL;
    if (!hz_segmap_prepare(seg) || !hz_os_commit(seg, HZ_UNIT_SIZE)) {
        hz_os_unmap(seg, HZ_SEGMENT_SIZE, 0);
        return NULL;
    }
    seg->dirty_units = 0;
    seg->committed_units = 1;
    hz_gstat_add(segments_mapped, 1);
    return seg;
}

static size_t segment_dirty_bytes(const hz_segment_t *seg) {
    return (size_t)__builtin_popcountll(seg->dirty_units) * HZ_UNIT_SIZE;
}

/* The cached segment a heap takes: the one that came resident last (its pages the
 * likeliest to be backed still), else a purged one; never one being purged. */
static hz_segment_t *cache_take(void) {
    hz_segment_t *seg = NULL;
    if (!hz_lock_acquire(&cache_lock)) return NULL;
    unsigned best = cache_count;
    for (unsigned i = 0; i < cache_count; i++)
        if (cache[i]->cached_ms != HZ_STAMP_PURGING &&
            (best == cache_count || cache[i]->cached_ms > cache[best]->cached_ms))
            best = i;
    if (best < cache_count) {
        seg = cache[best];
        cache[best] = cache[--cache_count];
        resident_sub(segment_dirty_bytes(seg));
    }
    hz_lock_release(&cache_lock);
    return seg;
}

static hz_segment_t *segment_acquire(hz_heap_t *heap) {
    hz_segment_t *seg = cache_take();
    if (seg == NULL && (seg = segment_map_new()) == NULL) return NULL;
    /* Resident units the heap now holds, free: its purge policy's from here on. */
    size_t resident = segment_dirty_bytes(seg);
    if (resident != 0) {
        dirty_add(heap, resident);
        if (heap->purge_at_ms == 0) heap->purge_at_ms = hz_os_now_ms() + HZ_PURGE_DELAY_MS;
    }
    seg->cached_ms = 0;
    seg->heap = heap;
    seg->free_units = ~0ULL;
    seg->used_units = 0;
    seg->purge_candidates = 0;
    seg->retired_starts = 0;
    update_max_run(seg);
    hz_page_t **unit_page = hz_unit_pages(seg);
    for (unsigned u = 0; u < HZ_UNITS; u++) unit_page[u] = &hz_empty_page;
    seg->prev = NULL;
    seg->next = heap->segments;
    if (heap->segments) heap->segments->prev = seg;
    heap->segments = seg;
    hz_segmap_set_owner(seg, heap);
    return seg;
}

/* Unmap an empty segment; if the kernel refuses, it stays mapped (and counted). */
static void segment_unmap(hz_segment_t *seg) {
    if (hz_os_unmap(seg, HZ_SEGMENT_SIZE, segment_committed_bytes(seg)))
        hz_gstat_sub(segments_mapped, 1);
}

static void segment_unlink(hz_heap_t *heap, hz_segment_t *seg) {
    if (seg->prev) seg->prev->next = seg->next;
    else heap->segments = seg->next;
    if (seg->next) seg->next->prev = seg->prev;
    seg->next = seg->prev = NULL;
}

/* An empty segment leaves its heap: off its lists, and what it kept resident off the
 * heap's account. */
static void segment_detach(hz_heap_t *heap, hz_segment_t *seg) {
    segment_unlink(heap, seg);
    retired_drop(heap, seg, 0, HZ_UNITS);
    hz_segmap_set(seg, HZ_SEG_NONE); /* stale pointers into it now read as foreign */
    dirty_sub(heap, segment_dirty_bytes(seg));
    seg->heap = NULL;
}

/* An empty segment's pages given back, all but its header's unit decommitted; its
 * stamp for the cache once that is done at `now`: 0, or now if a unit the kernel
 * would not purge stays dirty, so that aging tries again. */
static uint64_t segment_empty_out(hz_segment_t *seg, uint64_t now) {
    (void)segment_decommit(seg);
    (void)segment_purge(seg, ~0ULL);
    return segment_dirty_bytes(seg) != 0 ? now : 0;
}

/* Purged and decommitted, to the cache or back to the OS. */
static void cache_put_purged(hz_segment_t *seg) {
    seg->cached_ms = segment_empty_out(seg, hz_os_now_ms());
    uint64_t retry = seg->cached_ms;
    if (hz_lock_acquire(&cache_lock)) {
        if (cache_count < hz_segment_cache_slots) {
            cache[cache_count++] = seg;
            resident_add(segment_dirty_bytes(seg));
            seg = NULL;
        }
        hz_lock_release(&cache_lock);
    }
    if (seg != NULL) segment_unmap(seg);
    else if (retry != 0) hz_upkeep_at(retry + HZ_PURGE_DELAY_MS);
}

/* An empty segment goes, purged, to the cache or back to the OS. */
static void segment_release(hz_heap_t *heap, hz_segment_t *seg) {
    segment_detach(heap, seg);
    cache_put_purged(seg);
}

/* Bytes the cached segments keep resident (unlocked: an estimate). */
size_t hz_segment_cache_resident(void) {
    return __atomic_load_n(&cache_resident, __ATOMIC_RELAXED);
}

/* An empty segment of heap to the cache as it is, if there is room for its resident
 * bytes (false: it stays with the heap); upkeep purges it later. */
static bool cache_put_resident(hz_heap_t *heap, hz_segment_t *seg, uint64_t now) {
    size_t resident = segment_dirty_bytes(seg);
    if (!hz_lock_acquire(&cache_lock)) return false;
    bool room = cache_count < hz_segment_cache_slots &&
                cache_resident + resident <= (size_t)HZ_DIRTY_BUDGET;
    if (room) {
        segment_detach(heap, seg);
        seg->cached_ms = now;
        cache[cache_count++] = seg;
        resident_add(resident);
    }
    hz_lock_release(&cache_lock);
    if (room) hz_upkeep_at(now + HZ_PURGE_DELAY_MS);
    return room;
}

/* A heap whose thread exits keeps its first segment for the next thread and offers
 * its other empty ones, resident, to any heap, as far as the cache has room; what
 * does not fit stays with the heap, for its purge. */
void hz_heap_share_segments(hz_heap_t *heap) {
    if (heap->segments == NULL) return;
    uint64_t now = 0;
    hz_segment_t *s = heap->segments->next, *next;
    for (; s != NULL; s = next) {
        next = s->next;
        if (s->free_units != ~0ULL || segment_dirty_bytes(s) == 0) continue;
        if (now == 0) now = hz_os_now_ms();
        (void)cache_put_resident(heap, s, now);
    }
}

/* Purge the resident cached segments that came HZ_PURGE_DELAY_MS ago or more.  They
 * stay listed, marked, while the kernel drops their pages: neither taken nor trimmed
 * meanwhile.  Returns when the next is due (0: none). */
uint64_t hz_segment_cache_age(uint64_t now) {
    hz_segment_t *old[HZ_SEGMENT_CACHE + 1];
    size_t before[HZ_SEGMENT_CACHE + 1];
    unsigned n = 0;
    uint64_t next = 0;
    if (!hz_lock_acquire(&cache_lock)) return 0;
    for (unsigned i = 0; i < cache_count; i++) {
        hz_segment_t *c = cache[i];
        if (c->cached_ms == 0 || c->cached_ms == HZ_STAMP_PURGING) continue;
        uint64_t due = c->cached_ms + HZ_PURGE_DELAY_MS;
        if (now < due) {
            next = hz_earliest(next, due);
            continue;
        }
        c->cached_ms = HZ_STAMP_PURGING;
        before[n] = segment_dirty_bytes(c);
        old[n++] = c;
    }
    hz_lock_release(&cache_lock);
    uint64_t stamp[HZ_SEGMENT_CACHE + 1];
    for (unsigned i = 0; i < n; i++) stamp[i] = segment_empty_out(old[i], now);
    if (n == 0 || !hz_lock_acquire(&cache_lock)) return next;
    for (unsigned i = 0; i < n; i++) {
        resident_sub(before[i] - segment_dirty_bytes(old[i]));
        old[i]->cached_ms = stamp[i];
        if (stamp[i] != 0) next = hz_earliest(next, now + HZ_PURGE_DELAY_MS);
    }
    hz_lock_release(&cache_lock);
    return next;
}

/* Unmap every cached segment but those being purged (their purger still holds them). */
bool hz_segment_cache_trim(void) {
    hz_segment_t *drop[HZ_SEGMENT_CACHE + 1] = {0}; /* {0}: GCC warns with a cache of none */
    unsigned n = 0;
    if (!hz_lock_acquire(&cache_lock)) return false;
    for (unsigned i = 0; i < cache_count;) {
        hz_segment_t *c = cache[i];
        if (c->cached_ms == HZ_STAMP_PURGING) {
            i++;
            continue;
        }
        resident_sub(segment_dirty_bytes(c));
        drop[n++] = c;
        cache[i] = cache[--cache_count];
    }
    hz_lock_release(&cache_lock);
    for (unsigned i = 0; i < n; i++) segment_unmap(drop[i]);
    return n > 0;
}

/* In a fork child: the segments the parent was purging, to purge again. */
void hz_segment_cache_fork_child(void) {
    bool due = false;
    for (unsigned i = 0; i < cache_count; i++) due |= hz_stamp_orphan(&cache[i]->cached_ms);
    if (due) hz_upkeep_at(1);
}

/* Starts of runs of n set bits in f: after the loop, bit i of x is set exactly when
 * bits i .. i+n-1 of f are. */
static uint64_t run_starts(uint64_t f, unsigned n) {
    uint64_t x = f;
    for (unsigned have = 1; have < n && x != 0;) {
        unsigned s = have < n - have ? have : n - have;
        x &= x >> s;
        have += s;
    }
    return x;
}

/* Units a span may start at: every multiple of align_units, and unit 0 (shortened
 * by the header) only for single-unit pages. */
static uint64_t span_starts(unsigned units, unsigned align_units) {
    uint64_t m = ~0ULL;
    if (align_units > 1) {
        m = 0;
        for (unsigned u = 0; u < HZ_UNITS; u += align_units) m |= 1ULL << u;
    }
    return units > 1 ? m & ~1ULL : m;
}

/* First run of n units at an allowed start whose memory is still resident (no page
 * faults to refill it), else the first free run at all. */
static hz_segment_t *find_span(hz_heap_t *heap, unsigned units, uint64_t starts, int *first) {
    for (int pass = 0; pass < 2; pass++) {
        for (hz_segment_t *s = heap->segments; s != NULL && s->free_units != 0; s = s->next) {
            if (units > 1 && s->max_run < units) continue;
            uint64_t f = s->free_units & (pass == 0 ? s->dirty_units : ~0ULL);
            uint64_t x = run_starts(f, units) & starts;
            if (x != 0) {
                *first = __builtin_ctzll(x);
                return s;
            }
        }
    }
    return NULL;
}

/* Spans a class gave back.  A page of the class made again in the same span finds
 * its blocks where they were, on memory that is still resident where they were
 * touched; in another class's span, its blocks would start at other offsets and
 * touch other OS pages, until pages that come and go had made every page of the
 * units resident (a 4-thread run with blocks of 16 B to 64 KiB freed by other
 * threads peaked at 2.2x the resident memory of its best peer).  Each class keeps
 * its spans on a list through their free descriptors, last first, and anything
 * that takes a unit of one (hz_span_alloc) or releases its segment takes it off. */
static void retired_push(hz_heap_t *heap, hz_page_t *page) {
    hz_page_queue_t *q = &heap->queues[page->cls];
    page->prev = NULL;
    page->next = q->retired;
    if (q->retired) q->retired->prev = page;
    q->retired = page;
    hz_segment_of(page)->retired_starts |= 1ULL << page->first_unit;
}

static void retired_unlink(hz_heap_t *heap, hz_segment_t *seg, unsigned first) {
    hz_page_t *page = &seg->pages[first];
    if (page->prev) page->prev->next = page->next;
    else heap->queues[page->cls].retired = page->next;
    if (page->next) page->next->prev = page->prev;
    page->next = page->prev = NULL;
    seg->retired_starts &= ~(1ULL << first);
}

/* Off their lists: every listed span with a unit in [first, first + units). */
static void retired_drop(hz_heap_t *heap, hz_segment_t *seg, unsigned first, unsigned units) {
    unsigned end = first + units;
    uint64_t r = seg->retired_starts & (end >= HZ_UNITS ? ~0ULL : (1ULL << end) - 1);
    for (; r != 0; r &= r - 1) {
        unsigned f = (unsigned)__builtin_ctzll(r);
        if (f + seg->pages[f].units > first) retired_unlink(heap, seg, f);
    }
}

/* The most recent span class cls gave back, if it is `units` long and still
 * resident.  Spans purged since lose their claim (any span is as good once purged,
 * and a resident one elsewhere is better: no faults) and leave the list. */
static hz_segment_t *retired_span(hz_heap_t *heap, unsigned cls, unsigned units, int *first) {
    hz_page_t *page;
    while ((page = heap->queues[cls].retired) != NULL) {
        hz_segment_t *seg = hz_segment_of(page);
        uint64_t m = units_mask(page->first_unit, page->units);
        if ((seg->dirty_units & m) == m) break;
        retired_unlink(heap, seg, page->first_unit);
    }
    if (page == NULL || page->units != units) return NULL;
    *first = page->first_unit;
    return hz_segment_of(page);
}

/* Units [first, first + units) of seg, free, now the span of `page`: off the free and
 * retired lists, counted in use, and mapped to the page.  Returns whether they were
 * untouched (zero). */
static bool units_claim(hz_heap_t *heap, hz_segment_t *seg, unsigned first, unsigned units,
                        hz_page_t *page) {
    retired_drop(heap, seg, first, units);
    uint64_t m = units_mask(first, units);
    seg->free_units &= ~m;
    seg->purge_candidates &= ~m;
    update_max_run(seg);
    heap->used_bytes += (size_t)units * HZ_UNIT_SIZE;
    if (heap->used_bytes > heap->used_peak[0]) heap->used_peak[0] = heap->used_bytes;
    if (seg->free_units == 0 && seg->next != NULL) { /* full segments go to the back */
        segment_unlink(heap, seg);
        hz_segment_t *last = heap->segments;
        while (last->next) last = last->next;
        last->next = seg;
        seg->prev = last;
    }
    bool zero = (seg->dirty_units & m) == 0;
    size_t resident = (size_t)__builtin_popcountll(seg->dirty_units & m) * HZ_UNIT_SIZE;
    dirty_sub(heap, resident);
    heap->reused[0] += (size_t)__builtin_popcountll(seg->used_units & m) * HZ_UNIT_SIZE;
    seg->dirty_units |= m;
    seg->used_units |= m;
    hz_page_t **unit_page = hz_unit_pages(seg);
    for (unsigned u = 0; u < units; u++) unit_page[first + u] = page;
    return zero;
}

/* Units [first, first + units) of seg back to free, resident until purged: the
 * reverse of units_claim. */
static void units_release(hz_heap_t *heap, hz_segment_t *seg, unsigned first, unsigned units) {
    uint64_t m = units_mask(first, units);
    bool was_full = seg->free_units == 0;
    hz_page_t **unit_page = hz_unit_pages(seg);
    for (unsigned u = 0; u < units; u++) unit_page[first + u] = &hz_empty_page;
    if (heap->purge_at_ms == 0) heap->purge_at_ms = hz_os_now_ms() + HZ_PURGE_DELAY_MS;
    seg->free_units |= m;
    update_max_run(seg);
    heap->used_bytes -= (size_t)units * HZ_UNIT_SIZE;
    dirty_add(heap, (size_t)units * HZ_UNIT_SIZE);
    if (was_full && heap->segments != seg) { /* it has room again: to the front */
        segment_unlink(heap, seg);
        seg->next = heap->segments;
        heap->segments->prev = seg;
        heap->segments = seg;
    }
}

/* A page of class cls, `units` units long, starting at a multiple of `align_units`
 * (so that blocks of the class are aligned to it): a span the class gave back, else
 * one from the heap's segments or a new one. */
hz_page_t *hz_span_alloc(hz_heap_t *heap, unsigned cls, unsigned units, unsigned align_units,
                         bool grow) {
    int first = -1;
    uint64_t starts = span_starts(units, align_units);
    hz_segment_t *seg = retired_span(heap, cls, units, &first);
    if (seg == NULL) seg = find_span(heap, units, starts, &first);
    if (seg == NULL) {
        if (!grow) return NULL;
        seg = segment_acquire(heap);
        if (seg == NULL) return NULL;
        first = __builtin_ctzll(starts);
    }
    if (!segment_commit(seg, (unsigned)first + units)) return NULL;
    hz_page_t *page = &seg->pages[first];
    bool zero = units_claim(heap, seg, (unsigned)first, units, page);
    memset(page, 0, sizeof *page);
    page->first_unit = (uint8_t)first;
    page->units = (uint8_t)units;
    page->zero_span = zero;
    page->start = unit_start(seg, (unsigned)first);
    return page;
}

/* Make page's span `units` units long where it starts: longer with the free units
 * that follow it in its segment, or shorter, its tail freed.  False if the start is
 * not a multiple of `align_units`, or the units are not free or the kernel will not
 * commit them.  The page's blocks are the caller's to reshape (page.c). */
bool hz_span_resize(hz_heap_t *heap, hz_page_t *page, unsigned units, unsigned align_units) {
    hz_segment_t *seg = hz_segment_of(page);
    unsigned first = page->first_unit, end = page->first_unit + page->units;
    if (units == 0 || first + units > HZ_UNITS || first % align_units != 0) return false;
    if (first + units == end) return true;
    if (first + units < end) {
        units_release(heap, seg, first + units, end - (first + units));
        page->units = (uint8_t)units;
        hz_heap_purge(heap, false);
        return true;
    }
    uint64_t m = units_mask(end, first + units - end);
    if ((seg->free_units & m) != m || !segment_commit(seg, first + units)) return false;
    (void)units_claim(heap, seg, end, first + units - end, page);
    page->units = (uint8_t)units;
    return true;
}

void hz_span_free(hz_heap_t *heap, hz_page_t *page) {
    units_release(heap, hz_segment_of(page), page->first_unit, page->units);
    retired_push(heap, page);
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
