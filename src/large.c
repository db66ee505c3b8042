/* large.c - blocks above HZ_MEDIUM_MAX, and those realloc grew past HZ_ALONE_MIN:
 * one mapping each, with a header at its segment-aligned base, and a bounded
 * process-wide cache of freed mappings.
 *
 * A cached mapping stays resident for HZ_PURGE_DELAY_MS to one more, the time-based
 * policy of freed pages (segment.c); then upkeep purges it and it stays cached,
 * mapped but not resident, until it is reused or evicted.  While the kernel drops its
 * pages it stays listed, marked, so that nothing takes, evicts or trims it meanwhile
 * and a fork then loses none.
 *
 * A block may take a cached mapping larger than it needs: the rest is room to grow
 * into by realloc, in place and without page faults.  Such room is listed until
 * the block grows into it, goes, or upkeep purges it on the same policy, so that a
 * block that stopped growing holds no more than it uses. */

#include "internal.h"

#define LARGE_CACHE_SLOTS 16

typedef struct {
    char *base;
    size_t map_size;
    uint64_t freed_ms; /* when it was cached; 0 once purged (hz_stamp_orphan) */
} cached_t;
static hz_lock_t large_lock;
static cached_t cache[LARGE_CACHE_SLOTS];
static unsigned cache_count;
static size_t cache_bytes;

/* Room: the resident end of a mapping past its block's usable bytes. */
#define LARGE_ROOM_SLOTS 16
typedef struct {
    const hz_large_t *owner;
    char *start; /* to the end of owner's mapping, which stays while the entry does */
    size_t size;
    uint64_t since_ms; /* taken or last grown into; HZ_STAMP_PURGING while purged */
} room_t;
static room_t rooms[LARGE_ROOM_SLOTS];
static unsigned room_count;

hz_lock_t *hz_large_lock(void) { return &large_lock; }
void hz_large_cache_forget(void) { cache_count = 0; cache_bytes = 0; room_count = 0; }

/* The header of the large block p, or NULL if p is not one. The header sits at the
 * segment boundary at or below p - 1 (one segment below p for alignments of a
 * segment or more), which the segment map marks HZ_SEG_LARGE. */
hz_large_t *hz_large_holding(const void *p) {
    uintptr_t h = ((uintptr_t)p - 1) & ~(uintptr_t)HZ_SEGMENT_MASK;
    if (p == NULL || hz_segmap_kind(h) != HZ_SEG_LARGE) return NULL;
    hz_large_t *hdr = (hz_large_t *)h;
    return hdr->magic == HZ_LARGE_MAGIC ? hdr : NULL;
}

hz_large_t *hz_large_header(const void *p) {
    hz_large_t *hdr = hz_large_holding(p);
    return hdr != NULL && hdr->user == p ? hdr : NULL;
}

/* If the kernel refuses, the mapping stays (counted in os_errors and bytes_mapped). */
static void large_unmap(char *base, size_t map_size) { hz_os_unmap(base, map_size, map_size); }

/* A cached mapping of need bytes or more to reuse, the smallest, at most need + most
 * bytes; and whether it reads as zero (purged). */
static char *cache_take(size_t need, size_t most, size_t *map_size, bool *purged) {
    char *base = NULL;
    if (!hz_lock_acquire(&large_lock)) return NULL;
    unsigned best = LARGE_CACHE_SLOTS;
    for (unsigned i = 0; i < cache_count; i++) {
        size_t s = cache[i].map_size;
        if (cache[i].freed_ms != HZ_STAMP_PURGING && s >= need && s - need <= most &&
            (best == LARGE_CACHE_SLOTS || s < cache[best].map_size))
            best = i;
    }
    if (best < LARGE_CACHE_SLOTS) {
        base = cache[best].base;
        *map_size = cache[best].map_size;
        *purged = cache[best].freed_ms == 0;
        cache_bytes -= *map_size;
        cache[best] = cache[--cache_count];
    }
    hz_lock_release(&large_lock);
    return base;
}

/* Off the cache, entry i (the order of the others kept: oldest first). */
static cached_t cache_remove(unsigned i) {
    cached_t c = cache[i];
    cache_bytes -= c.map_size;
    memmove(&cache[i], &cache[i + 1], (--cache_count - i) * sizeof cache[0]);
    return c;
}

/* The oldest entry not being purged, or cache_count. */
static unsigned cache_oldest(void) {
    unsigned i = 0;
    while (i < cache_count && cache[i].freed_ms == HZ_STAMP_PURGING) i++;
    return i;
}

/* Keep a freed mapping for reuse, evicting the oldest entries to stay in budget
 * (false: no room, those being purged taking it). */
static bool cache_put(char *base, size_t map_size) {
    if (map_size > HZ_LARGE_CACHE_BYTES) return false;
    cached_t evict[LARGE_CACHE_SLOTS];
    unsigned n_evict = 0, i;
    if (!hz_lock_acquire(&large_lock)) return false;
    while ((cache_count == LARGE_CACHE_SLOTS || cache_bytes + map_size > HZ_LARGE_CACHE_BYTES) &&
           (i = cache_oldest()) < cache_count)
        evict[n_evict++] = cache_remove(i);
    bool room = cache_count < LARGE_CACHE_SLOTS && cache_bytes + map_size <= HZ_LARGE_CACHE_BYTES;
    uint64_t now = hz_os_now_ms();
    if (room) {
        cache[cache_count++] = (cached_t){base, map_size, now};
        cache_bytes += map_size;
    }
    hz_lock_release(&large_lock);
    for (unsigned k = 0; k < n_evict; k++) large_unmap(evict[k].base, evict[k].map_size);
    if (room) hz_upkeep_at(now + HZ_PURGE_DELAY_MS);
    return room;
}

/* List [start, start + size), the end of h's mapping, as room; purged at once when
 * the list is full. */
static void room_add(hz_large_t *h, char *start, size_t size) {
    uint64_t now = hz_os_now_ms();
    bool listed = false;
    if (hz_lock_acquire(&large_lock)) {
        if (room_count < LARGE_ROOM_SLOTS) {
            rooms[room_count++] = (room_t){h, start, size, now};
            listed = true;
        }
        hz_lock_release(&large_lock);
    }
    if (!listed) {
        hz_os_purge(start, size);
        return;
    }
    h->has_room = 1;
    hz_upkeep_at(now + HZ_PURGE_DELAY_MS);
}

/* h's room entry, or NULL; the lock held. */
static room_t *room_find(const hz_large_t *h) {
    for (unsigned i = 0; i < room_count; i++)
        if (rooms[i].owner == h) return &rooms[i];
    return NULL;
}

/* h's block now ends at end (NULL: h goes, moves or is cut to its block): its room
 * starts there, and is in use; or none is left.  A purge of it under way is waited
 * out (a madvise), so that the block never grows into pages being dropped. */
static void room_update(hz_large_t *h, char *end) {
    if (!h->has_room) return;
    for (;;) {
        if (!hz_lock_acquire(&large_lock)) return; /* re-entered: leave it listed */
        room_t *r = room_find(h);
        bool purging = r != NULL && r->since_ms == HZ_STAMP_PURGING;
        if (r != NULL && !purging) {
            char *stop = r->start + r->size;
            if (end == NULL || end >= stop) {
                *r = rooms[--room_count];
            } else { /* end is past the room's start: the block only grows into it */
                r->size = (size_t)(stop - end);
                r->start = end;
                r->since_ms = hz_os_now_ms();
            }
        }
        hz_lock_release(&large_lock);
        if (!purging) break;
        hz_os_yield();
    }
    if (end == NULL) h->has_room = 0;
}

/* Purge the rooms taken or grown into HZ_PURGE_DELAY_MS ago or more (every one with
 * `all`) and unlist them.  Returns when the next is due (0: none). */
static uint64_t rooms_age(uint64_t now, bool all) {
    room_t old[LARGE_ROOM_SLOTS];
    unsigned n = 0;
    uint64_t next = 0;
    if (!hz_lock_acquire(&large_lock)) return 0;
    for (unsigned i = 0; i < room_count; i++) {
        room_t *r = &rooms[i];
        if (r->since_ms == HZ_STAMP_PURGING) continue;
        uint64_t due = r->since_ms + HZ_PURGE_DELAY_MS;
        if (all || now >= due) {
            old[n++] = *r;
            r->since_ms = HZ_STAMP_PURGING; /* its owner waits: the mapping stays */
        } else {
            next = hz_earliest(next, due);
        }
    }
    hz_lock_release(&large_lock);
    if (n == 0) return next;
    for (unsigned i = 0; i < n; i++) hz_os_purge(old[i].start, old[i].size);
    if (!hz_lock_acquire(&large_lock)) return next;
    for (unsigned i = 0; i < n; i++) {
        room_t *r = room_find(old[i].owner);
        if (r != NULL) *r = rooms[--room_count];
    }
    hz_lock_release(&large_lock);
    return next;
}

/* Purge the cached mappings freed HZ_PURGE_DELAY_MS ago or more, marked meanwhile.
 * Returns when the next is due (0: none). */
uint64_t hz_large_cache_age(uint64_t now) {
    cached_t old[LARGE_CACHE_SLOTS];
    unsigned n = 0;
    uint64_t next = rooms_age(now, false);
    if (!hz_lock_acquire(&large_lock)) return next;
    for (unsigned i = 0; i < cache_count; i++) {
        cached_t *c = &cache[i];
        if (c->freed_ms == 0 || c->freed_ms == HZ_STAMP_PURGING) continue;
        uint64_t due = c->freed_ms + HZ_PURGE_DELAY_MS;
        if (now >= due) {
            old[n++] = *c;
            c->freed_ms = HZ_STAMP_PURGING;
        } else {
            next = hz_earliest(next, due);
        }
    }
    hz_lock_release(&large_lock);
    for (unsigned i = 0; i < n; i++)
        /* Failed, it is not zero: the next upkeep tries again. */
        old[i].freed_ms = hz_os_purge(old[i].base, old[i].map_size) == old[i].map_size ? 0 : now;
    if (n == 0 || !hz_lock_acquire(&large_lock)) return next;
    for (unsigned i = 0; i < n; i++) {
        for (unsigned k = 0; k < cache_count; k++) {
            if (cache[k].base != old[i].base) continue;
            cache[k].freed_ms = old[i].freed_ms;
            break;
        }
        if (old[i].freed_ms != 0) next = hz_earliest(next, now + HZ_PURGE_DELAY_MS);
    }
    hz_lock_release(&large_lock);
    return next;
}

/* Unmap every cached mapping but those being purged (their purger still holds them),
 * and purge every room. */
bool hz_large_cache_trim(void) {
    cached_t drop[LARGE_CACHE_SLOTS];
    unsigned n = 0;
    (void)rooms_age(0, true);
    if (!hz_lock_acquire(&large_lock)) return false;
    for (unsigned i = 0; i < cache_count;) {
        if (cache[i].freed_ms == HZ_STAMP_PURGING) i++;
        else drop[n++] = cache_remove(i);
    }
    hz_lock_release(&large_lock);
    for (unsigned i = 0; i < n; i++) large_unmap(drop[i].base, drop[i].map_size);
    return n > 0;
}

/* In a fork child: the mappings the parent was purging, to purge again. */
void hz_large_cache_fork_child(void) {
    bool due = false;
    for (unsigned i = 0; i < cache_count; i++) due |= hz_stamp_orphan(&cache[i].freed_ms);
    for (unsigned i = 0; i < room_count; i++) due |= hz_stamp_orphan(&rooms[i].since_ms);
    if (due) hz_upkeep_at(1);
}

void *hz_large_alloc(size_t size, size_t alignment, bool growing, bool *zeroed) {
    if (alignment < HZ_ALIGNMENT) alignment = HZ_ALIGNMENT;
    /* At least a byte: with size 0 the block would start where its mapping ends, in
     * whatever is mapped next (an aligned request of size 0 comes here). */
    if (size == 0) size = 1;
    /* Alignment bounded first, or the difference below wraps (C++'s align_val_t
     * and hz_aligned_alloc take any power of two, 2^63 too). */
    if (alignment > PTRDIFF_MAX / 4 || size > (size_t)PTRDIFF_MAX - 2 * HZ_SEGMENT_SIZE - alignment)
        return NULL;
    /* Offset of the user pointer from the mapping's base.  Hardened: the header has
     * its page to itself, and a guard page on each side of the block stops an
     * overrun or underrun at the first byte outside it. */
    bool big_align = alignment >= HZ_SEGMENT_SIZE;
#if HZ_HARDENED
    size_t guard = hz_os_page_size();
    size_t offset = big_align ? alignment : hz_align_up(2 * guard, alignment);
#else
    size_t guard = 0;
    size_t offset = big_align ? alignment : hz_align_up(HZ_LARGE_HEADER, alignment);
#endif
    size_t need = hz_align_up(offset + size, hz_os_page_size()) + guard;
    size_t map_size = need;
    bool purged = false;
    /* The smallest cached mapping that holds need bytes, up to twice as many: the
     * rest is room for realloc to grow the block into in place, without a new
     * mapping's page faults, purged on the policy of freed pages where it does not
     * (room_add).  A block that realloc moves here because it grew takes any: it
     * will likely grow on. */
    size_t most = growing ? SIZE_MAX : need;
    char *base = big_align ? NULL : cache_take(need, most, &map_size, &purged); /* none when hardened */
    *zeroed = base == NULL || purged;
    if (base != NULL) {
        hz_gstat_add(large_cache_hits, 1);
    } else {
        base = hz_os_map_aligned(need, big_align ? alignment : HZ_SEGMENT_SIZE);
        if (base == NULL) return NULL;
    }
    char *user = base + offset;
    hz_large_t *h = (hz_large_t *)(((uintptr_t)user - 1) & ~(uintptr_t)HZ_SEGMENT_MASK);
    if (!hz_segmap_prepare(h)) {
        large_unmap(base, map_size);
        return NULL;
    }
    h->magic = HZ_LARGE_MAGIC;
    h->base = base;
    h->map_size = map_size;
    h->user = user;
    h->usable = need - offset - guard;
    h->sample = 0;
    h->has_room = 0;
    /* A resident cached mapping larger than need: the rest is room to grow into. */
    if (map_size > need && !*zeroed) room_add(h, base + need, map_size - need);
#if HZ_HARDENED
    hz_os_guard(user - guard, guard);
    hz_os_guard(base + map_size - guard, guard);
#endif
    hz_segmap_set(h, HZ_SEG_LARGE);
    hz_gstat_add(large_allocs, 1);
    hz_gstat_add(large_bytes, h->usable);
    return user;
}

void hz_large_free(hz_large_t *h) {
    char *base = h->base;
    size_t map_size = h->map_size;
    hz_gstat_add(large_frees, 1);
    hz_gstat_sub(large_bytes, h->usable);
    room_update(h, NULL);
    hz_segmap_set(h, HZ_SEG_NONE); /* a second free of it now reads as foreign */
    h->magic = 0;
    bool plain = h->user == base + HZ_LARGE_HEADER;
    if (!plain || !cache_put(base, map_size)) large_unmap(base, map_size);
}

#if !HZ_HARDENED
/* The bytes h's block may use are now usable. */
static void large_set_usable(hz_large_t *h, size_t usable) {
    hz_gstat_sub(large_bytes, h->usable);
    h->usable = usable;
    hz_gstat_add(large_bytes, usable);
}
#endif

#if !HZ_HARDENED
/* h's mapping made size bytes long, where it is or moved onto a new reservation
 * (page tables, no copy): its new base, or NULL with h as it was. */
static char *resize_mapping(hz_large_t *h, size_t size) {
    if (hz_os_resize_in_place(h->base, h->map_size, size)) return h->base;
    char *target = hz_os_reserve(size, HZ_SEGMENT_SIZE);
    if (target == NULL) return NULL;
    if (!hz_segmap_prepare(target)) {
        hz_os_unmap(target, size, 0);
        return NULL;
    }
    size_t offset = (size_t)((char *)h->user - h->base);
    hz_segmap_set(h, HZ_SEG_NONE);
    char *base = hz_os_move(h->base, h->map_size, size, target);
    if (base == NULL) {
        hz_os_unmap(target, size, 0);
        hz_segmap_set(h, HZ_SEG_LARGE);
        return NULL;
    }
    h = (hz_large_t *)base;
    h->base = base;
    h->user = base + offset;
    return base;
}
#endif

/* Resize a large block in place when the mapping allows, else move its pages. */
void *hz_large_realloc(hz_large_t *h, size_t size) {
#if HZ_HARDENED
    /* The guard pages stay where they are: move (the caller copies). */
    return size <= h->usable && size >= h->usable / 2 ? h->user : NULL;
#else
    size_t offset = (size_t)((char *)h->user - h->base);
    if (size > (size_t)PTRDIFF_MAX - 2 * HZ_SEGMENT_SIZE) return NULL;
    size_t need = hz_align_up(offset + size, hz_os_page_size());
    /* Where the block ends; a mapping from the cache may reach further. */
    size_t held = offset + h->usable;
    if (need <= h->map_size) {
        if (need > held) { /* grows into its mapping's room */
            room_update(h, h->base + need);
            large_set_usable(h, need - offset);
            return h->user;
        }
        if (need >= held / 2) return h->user;
    }
    /* A block that grows stays a mapping, whatever its size, and so does one that
     * shrinks while it would have a page to itself in the size classes; below that
     * it goes back to them (the caller copies). */
    bool to_classes = size < h->usable && size <= HZ_ALONE_MIN;
    if (offset != HZ_LARGE_HEADER || to_classes) return NULL;
    room_update(h, NULL); /* cut or moved with the block */
    /* One that grows past its mapping will likely grow on: the mapping takes a
     * quarter more address space than it needs, which the block grows into without
     * a call (untouched, it is not resident), where it is or moved; exactly what it
     * needs only if the kernel will not give more (vm.overcommit_memory=2). */
    size_t ahead = size > h->usable ? hz_align_up(need + need / 4, hz_os_page_size()) : need;
    char *base = resize_mapping(h, ahead);
    size_t map = ahead;
    if (base == NULL && ahead != need) base = resize_mapping(h, map = need);
    if (base == NULL) return NULL;
    h = (hz_large_t *)base;
    h->map_size = map;
    large_set_usable(h, need - offset);
    hz_segmap_set(h, HZ_SEG_LARGE);
    return h->user;
#endif
}
