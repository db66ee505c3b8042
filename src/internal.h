/* internal.h - helpers and cross-module interfaces of the allocator core. */
#ifndef HZ_INTERNAL_H
#define HZ_INTERNAL_H

#include <stdbool.h>
#include <string.h>

#include "types.h"

#define HZ_HIDDEN __attribute__((visibility("hidden")))
#define HZ_INLINE static inline __attribute__((always_inline))
#define HZ_NOINLINE __attribute__((noinline))
#define HZ_COLD __attribute__((cold, noinline))
#define hz_likely(x) __builtin_expect(!!(x), 1)
#define hz_unlikely(x) __builtin_expect(!!(x), 0)

/* ------------------------------------------------------------- counters */
#if HZ_STATS && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
/* Owner-only increment as one unlocked add: an aligned 8-byte read-modify-write by
 * the single writer is never torn for readers, and costs one instruction where a C11
 * relaxed load+store costs three. */
#define hz_stat_add(c, n) __asm__("addq %1, %0" : "+m"(c) : "er"((uint64_t)(n)))
#elif HZ_STATS
/* Owner-only increment: a relaxed load and store, never a locked instruction. */
#define hz_stat_add(c, n) \
    atomic_store_explicit(&(c), atomic_load_explicit(&(c), memory_order_relaxed) + (n), \
                          memory_order_relaxed)
#else
#define hz_stat_add(c, n) ((void)0)
#endif
#define hz_stat_inc(c) hz_stat_add(c, 1)

/* --*count, true when the result is <= 0.  Compilers load, subtract, store and
 * test for this; on x86-64 it is one subtract on memory and a branch. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
HZ_INLINE bool hz_dec_le0(int32_t *count) {
    __asm__ goto("subl $1, %0\n\tjle %l[hit]" : "+m"(*count) : : "cc" : hit);
    return false;
    /* cppcheck-suppress unusedLabel ; the asm jumps to it */
hit: __attribute__((unused))
    return true;
}
#else
HZ_INLINE bool hz_dec_le0(int32_t *count) { return --*count <= 0; }
#endif

/* Process-wide counters (slow paths only; atomic).  Their layout is the public
 * struct hz_shm_live: with stats on they live in the shared-memory segment, which
 * hz_gstats_at then points into (shm.c); before that, and without stats, they are
 * in the library's own memory. */
#include "hakozuna_shm.h"
typedef struct hz_shm_live hz_global_stats_t;
extern hz_global_stats_t *hz_gstats_at HZ_HIDDEN;
extern hz_global_stats_t hz_gstats_own HZ_HIDDEN;
#define hz_gstats (*__atomic_load_n(&hz_gstats_at, __ATOMIC_ACQUIRE))
/* Frees by threads that have no heap (not started or exiting), per class. */
#define hz_heapless_frees (hz_gstats.heapless_frees)
#define hz_gstat_add(f, n) __atomic_fetch_add(&hz_gstats.f, (uint64_t)(n), __ATOMIC_RELAXED)
#define hz_gstat_sub(f, n) __atomic_fetch_sub(&hz_gstats.f, (uint64_t)(n), __ATOMIC_RELAXED)
#define hz_gstat_load(f) __atomic_load_n(&hz_gstats.f, __ATOMIC_RELAXED)
/* Add n to a byte figure and raise its high-water mark (peak) to the new value. */
#define hz_gstat_grow(f, peak, n) hz_gstat_raise(&hz_gstats.f, &hz_gstats.peak, (n))
void hz_gstat_raise(uint64_t *value, uint64_t *peak, uint64_t n) HZ_HIDDEN;

/* Every counter merged over all heaps (stats.c). */
#include "hakozuna.h"
typedef struct hz_stats_snapshot {
    struct hz_stats totals;
    uint64_t mallocs[HZ_CLASSES], frees[HZ_CLASSES]; /* per size class */
    uint64_t remote_sent, remote_recv, remote_batches;
    uint64_t refills, pages_made, pages_retired;
    uint64_t bytes_dirty;
} hz_stats_snapshot_t;
void hz_stats_snapshot(hz_stats_snapshot_t *snap) HZ_HIDDEN;

/* ------------------------------------------------------------ text (line.c)
 * One line of text built without stdio or malloc; what does not fit is cut. */
typedef struct hz_line {
    char buf[320];
    size_t n;
} hz_line_t;
void hz_line_str(hz_line_t *l, const char *s) HZ_HIDDEN;
void hz_line_u64(hz_line_t *l, uint64_t v) HZ_HIDDEN;
/* v right-aligned in at least width columns. */
void hz_line_u64_width(hz_line_t *l, uint64_t v, unsigned width) HZ_HIDDEN;
void hz_line_hex(hz_line_t *l, uintptr_t v) HZ_HIDDEN; /* 0x... */
/* Adds '\n' and the NUL; returns the text. */
const char *hz_line_end(hz_line_t *l) HZ_HIDDEN;

/* ---------------------------------------------------------------- locks
 * Spin locks that know their holder (a thread's token, os.c; bit 0 set while held
 * across fork), so that a thread never waits for itself (fork: init.c):
 * - inside fork, between our prepare and parent/child handlers, the forking thread
 *   holds every lock, and its own acquisitions (atfork handlers that allocate) pass
 *   through;
 * - a signal handler that re-enters the allocator while its thread holds the lock
 *   gets false, and must do without what the lock protects. */
typedef struct { _Atomic uintptr_t holder; } hz_lock_t;
#define HZ_LOCK_FORK ((uintptr_t)1)
/* This thread's token in a lock's holder word (os.c, where the locks live). */
uintptr_t hz_lock_token(void) HZ_HIDDEN;
bool hz_lock_acquire(hz_lock_t *l) __attribute__((warn_unused_result)) HZ_HIDDEN;
bool hz_lock_try(hz_lock_t *l) __attribute__((warn_unused_result)) HZ_HIDDEN;
static inline void hz_lock_release(hz_lock_t *l) {
    if ((atomic_load_explicit(&l->holder, memory_order_relaxed) & HZ_LOCK_FORK) == 0)
        atomic_store_explicit(&l->holder, 0, memory_order_release);
}

/* ------------------------------------------------------------ size classes */
extern uint32_t hz_class_size[HZ_CLASSES] HZ_HIDDEN;  /* the largest request of a class */
extern uint32_t hz_class_block[HZ_CLASSES] HZ_HIDDEN; /* its blocks' size: a cache line
                                                          more between 4 and 256 KiB */
extern uint8_t hz_class_units[HZ_CLASSES] HZ_HIDDEN;       /* a page's span length */
extern uint8_t hz_class_first_units[HZ_CLASSES] HZ_HIDDEN; /* a class's first page's */
extern uint8_t hz_class_align_units[HZ_CLASSES] HZ_HIDDEN;
void hz_sizeclass_init(void) HZ_HIDDEN;
unsigned hz_aligned_class(size_t size, size_t alignment) HZ_HIDDEN;

/* Class of a request of n bytes, 0 < n <= HZ_MEDIUM_MAX: 16-byte steps up to 256, then
 * eight classes per power of two, so no block wastes more than 1/8 of its size. */
HZ_INLINE unsigned hz_size_class(size_t n) {
    if (n <= 256) return n <= 16 ? 1u : (unsigned)((n + 15) >> 4);
    size_t m = n - 1;
    unsigned k = 63u - (unsigned)__builtin_clzl(m);
    return 17u + (k - 8u) * 8u + (unsigned)((m >> (k - 3u)) & 7u);
}

/* ------------------------------------------------------------ segment map */
extern _Atomic(_Atomic uintptr_t *) hz_segmap_top[HZ_SEGMAP_TOP_ENTRIES] HZ_HIDDEN;
/* The leaves as one array, and its length: HZ_SEGMAP_ENTRIES, or 0 before
 * hz_segmap_init and where its reservation was refused.  Plain words, as the list
 * key is: written once by process initialisation, which runs before the program
 * can have a second thread (the loader's first malloc), and read on every free,
 * where an atomic load would cost an instruction (GCC does not fold it into the
 * compare). */
extern _Atomic uintptr_t *hz_segmap_flat HZ_HIDDEN;
extern uintptr_t hz_segmap_flat_entries HZ_HIDDEN;
void hz_segmap_init(void) HZ_HIDDEN;

/* Map entry of the segment holding address a (types.h): a shift and a load from
 * the flat array, or two dependent loads through the top table (absent leaves are
 * the shared zero leaf, so neither way tests for a missing leaf). */
HZ_INLINE uintptr_t hz_segmap_entry(uintptr_t a) {
    uintptr_t i = a >> HZ_SEGMENT_SHIFT;
    if (hz_likely(i < hz_segmap_flat_entries))
        return atomic_load_explicit(&hz_segmap_flat[i], memory_order_relaxed);
    uintptr_t top = a >> HZ_SEGMAP_TOP_SHIFT;
    if (hz_unlikely(top >= HZ_SEGMAP_TOP_ENTRIES)) return HZ_SEG_NONE;
    _Atomic uintptr_t *leaf = atomic_load_explicit(&hz_segmap_top[top], memory_order_relaxed);
    return atomic_load_explicit(&leaf[(a >> HZ_SEGMENT_SHIFT) & (HZ_SEGMAP_LEAF_ENTRIES - 1)],
                                memory_order_relaxed);
}
HZ_INLINE unsigned hz_segmap_kind(uintptr_t a) {
    uintptr_t e = hz_segmap_entry(a);
    return e > HZ_SEG_LARGE ? HZ_SEG_SMALL : (unsigned)e;
}
bool hz_segmap_prepare(const void *seg) HZ_HIDDEN;
/* Record seg as HZ_SEG_NONE or HZ_SEG_LARGE, or as a small segment of `owner`. */
void hz_segmap_set(const void *seg, unsigned kind) HZ_HIDDEN;
void hz_segmap_set_owner(const void *seg, const hz_heap_t *owner) HZ_HIDDEN;
HZ_INLINE hz_segment_t *hz_segment_of(const void *p) {
    return (hz_segment_t *)((uintptr_t)p & ~(uintptr_t)HZ_SEGMENT_MASK);
}
/* The bits of p above its unit's pick both the segment's slice of unit_map (its
 * colour) and the unit within it. */
HZ_INLINE hz_page_t *hz_page_of(const hz_segment_t *seg, const void *p) {
    return seg->unit_map[((uintptr_t)p >> HZ_UNIT_SHIFT) & (HZ_SEGMENT_COLOURS * HZ_UNITS - 1)];
}
/* The unit of its segment that p is in. */
HZ_INLINE unsigned hz_unit_of(const void *p) {
    return (unsigned)((uintptr_t)p >> HZ_UNIT_SHIFT) & (HZ_UNITS - 1);
}
/* seg's own unit -> page table, HZ_UNITS entries. */
HZ_INLINE hz_page_t **hz_unit_pages(hz_segment_t *seg) {
    size_t colour = ((uintptr_t)seg >> HZ_SEGMENT_SHIFT) & (HZ_SEGMENT_COLOURS - 1);
    return &seg->unit_map[colour * HZ_UNITS];
}

/* Rank of p in its page: k * step when p starts block k, else at least 2^43 (so
 * never below a page's carved_rank or reserved * step, both under 2^23).  With
 * m = block_mul = floor(2^64 / bs) + 1, bs * m = 2^64 + step where 0 < step <= bs;
 * an offset k * bs + r (0 < r < bs, below 2^32) gives k * step + r * m mod 2^64,
 * which is r * m >= 2^64 / bs without wrapping.  Offsets below start (the header)
 * wrap to 32-bit numbers above 2^32 - 2^16, whose quotients are past any page. */
HZ_INLINE uint64_t hz_block_rank(const hz_page_t *page, const void *p) {
    return (uint64_t)(uint32_t)((uintptr_t)p - (uintptr_t)page->start) * page->block_mul;
}
/* The rank distance of two neighbouring blocks. */
HZ_INLINE uint64_t hz_rank_step(const hz_page_t *page) {
    return (uint64_t)page->block_size * page->block_mul;
}
/* p is the start of a block carved from page (handed out or free). */
HZ_INLINE bool hz_block_carved(const hz_page_t *page, const void *p) {
    return hz_block_rank(page, p) < page->carved_rank;
}
/* The rank just past the last block the page's span can hold. */
HZ_INLINE uint64_t hz_page_end_rank(const hz_page_t *page) {
    return page->reserved * hz_rank_step(page);
}
/* Blocks carved from the span so far. */
HZ_INLINE uint32_t hz_page_capacity(const hz_page_t *page) {
    return page->carved_rank == 0 ? 0 : (uint32_t)(page->carved_rank / hz_rank_step(page));
}

/* ------------------------------------------------------------- thread heap */
extern hz_heap_t hz_empty_heap HZ_HIDDEN;   /* threads that have not allocated yet */
extern hz_heap_t hz_exiting_heap HZ_HIDDEN; /* threads past their heap's destructor */
/* One of the two heaps above, which threads share: no thread's own. */
HZ_INLINE bool hz_heap_shared(const hz_heap_t *heap) {
    return heap == &hz_empty_heap || heap == &hz_exiting_heap;
}
extern hz_page_t hz_empty_page HZ_HIDDEN;   /* no blocks: also every free unit's page */
extern __thread hz_heap_t *hz_tls_heap HZ_HIDDEN __attribute__((tls_model("initial-exec")));

/* -------------------------------------------------------------- OS layer */
size_t hz_os_page_size(void) HZ_HIDDEN;
void hz_os_init(void) HZ_HIDDEN;
void *hz_os_reserve(size_t size, size_t alignment) HZ_HIDDEN;
bool hz_os_commit(void *p, size_t size) HZ_HIDDEN;
bool hz_os_decommit(void *p, size_t size) HZ_HIDDEN;
void *hz_os_map_aligned(size_t size, size_t alignment) HZ_HIDDEN;
bool hz_os_unmap(void *p, size_t size, size_t committed) HZ_HIDDEN;
size_t hz_os_purge(void *p, size_t size) HZ_HIDDEN;
void hz_os_guard(void *p, size_t size) HZ_HIDDEN;
bool hz_os_unguard(void *p, size_t size) HZ_HIDDEN;
void *hz_os_reserve_zero(size_t size) HZ_HIDDEN;
/* The process's limit of address space (RLIMIT_AS), SIZE_MAX if none. */
size_t hz_os_address_space_limit(void) HZ_HIDDEN;
void *hz_os_move(void *p, size_t old_size, size_t new_size, void *target) HZ_HIDDEN;
bool hz_os_resize_in_place(void *p, size_t old_size, size_t new_size) HZ_HIDDEN;
uint64_t hz_os_now_ms(void) HZ_HIDDEN;
void hz_os_write_err(const char *msg) HZ_HIDDEN;
void hz_os_write_fd(int fd, const char *msg) HZ_HIDDEN;
/* malloc_stats's report, written to fd. */
void hz_stats_report(int fd) HZ_HIDDEN;
void hz_os_yield(void) HZ_HIDDEN;
void *hz_meta_alloc(size_t size) HZ_HIDDEN;
size_t hz_os_kernel_page_size(void) HZ_HIDDEN; /* the kernel's, never simulated */
long hz_os_tid(void) HZ_HIDDEN;
bool hz_os_thread_gone(long tid) HZ_HIDDEN;
void *hz_os_symbol_next(const char *name, const void *beside) HZ_HIDDEN;
/* Whether the CPU has PREFETCHW (x86-64; set by hz_os_init). */
extern bool hz_os_prefetchw HZ_HIDDEN;
/* Ask ahead for the line of p, which this thread is about to write.  Where that line
 * sits in another core's cache, PREFETCHW fetches it already owned, where a plain
 * prefetch (what GCC makes of __builtin_prefetch(p, 1) for a generic x86-64) fetches
 * it shared, and the write then waits for the other copies to be invalidated. */
HZ_INLINE void hz_prefetch_write(const void *p) {
#if defined(__x86_64__)
    if (hz_likely(hz_os_prefetchw)) {
        __asm__("prefetchw %0" : : "m"(*(const char *)p));
        return;
    }
#endif
    __builtin_prefetch(p, 1);
}
/* Each global lock, and what a fork child does when the forking thread was
 * interrupted inside it: forget the structure it guards. */
hz_lock_t *hz_meta_lock(void) HZ_HIDDEN;
void hz_meta_forget(void) HZ_HIDDEN;
hz_lock_t *hz_segment_cache_lock(void) HZ_HIDDEN;
void hz_segment_cache_forget(void) HZ_HIDDEN;
hz_lock_t *hz_large_lock(void) HZ_HIDDEN;
void hz_large_cache_forget(void) HZ_HIDDEN;

static inline size_t hz_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }
/* An alignment as memalign takes it (glibc's rule): one that is no power of two is
 * rounded up to the next, HZ_ALIGNMENT at least.  Above SIZE_MAX / 2 + 1 there is
 * none; such an alignment is returned as it is. */
static inline size_t hz_alignment_rounded(size_t a) {
    if ((a & (a - 1)) == 0 && a != 0) return a;
    if (a < HZ_ALIGNMENT) return HZ_ALIGNMENT;
    if (a > SIZE_MAX / 2 + 1) return a;
    return (size_t)1 << (sizeof(size_t) * 8 - (size_t)__builtin_clzl(a));
}

/* ------------------------------------------------------- segments & spans */
/* The purge policy counts the memory a heap, and the threads adopting heaps, took
 * again in windows of HZ_PURGE_DELAY_MS.  Whether `now` is still in the window that
 * started at *start, in the next one, or later, the window between them gone by
 * empty; the last two start a window at now. */
enum hz_window { HZ_WINDOW_SAME, HZ_WINDOW_NEXT, HZ_WINDOW_GAP };
HZ_INLINE enum hz_window hz_window_roll(uint64_t *start, uint64_t now) {
    if (now < *start + hz_purge_delay_ms) return HZ_WINDOW_SAME;
    enum hz_window w = now - *start >= 2 * hz_purge_delay_ms ? HZ_WINDOW_GAP : HZ_WINDOW_NEXT;
    *start = now;
    return w;
}
/* A page of class cls, `units` units long: a span the class gave back, one from the
 * heap's segments, or (grow) one from a new segment. */
hz_page_t *hz_span_alloc(hz_heap_t *heap, unsigned cls, unsigned units, unsigned align_units,
                         bool grow) HZ_HIDDEN;
void hz_span_free(hz_heap_t *heap, hz_page_t *page) HZ_HIDDEN;
bool hz_span_resize(hz_heap_t *heap, hz_page_t *page, unsigned units, unsigned align_units) HZ_HIDDEN;
void hz_heap_purge(hz_heap_t *heap, bool force) HZ_HIDDEN;
void hz_heap_release_segments(hz_heap_t *heap, bool keep_one) HZ_HIDDEN;
void hz_heap_share_segments(hz_heap_t *heap) HZ_HIDDEN;
bool hz_segment_cache_trim(void) HZ_HIDDEN;
uint64_t hz_segment_cache_age(uint64_t now) HZ_HIDDEN;
size_t hz_segment_cache_resident(void) HZ_HIDDEN;
void hz_segment_cache_fork_child(void) HZ_HIDDEN;

/* ------------------------------------------------------------------ pages */
/* A page of class cls with a free block, made current (NULL: no memory).  The caller
 * (alloc.c) collects the heap's remote frees first. */
hz_page_t *hz_page_ready(hz_heap_t *heap, unsigned cls) HZ_HIDDEN;
bool hz_page_resize(hz_heap_t *heap, hz_page_t *page, unsigned cls) HZ_HIDDEN;
typedef void (*hz_page_event_fn)(hz_heap_t *heap, hz_page_t *page);
void hz_page_free_event(hz_heap_t *heap, hz_page_t *page) HZ_HIDDEN;
void hz_heap_retire_empty(hz_heap_t *heap) HZ_HIDDEN;

/* ---------------------------------------------------------------- remote */
/* What a remote free leaves its caller (alloc.c) to do: nothing; the ticks that
 * posting blocks to their owners is due (the upkeep of heaps nobody owns, stats
 * publishing: layers above this one); or those and, for a thread that had no heap
 * yet (its block went alone), to make it one. */
enum hz_remote_after { HZ_REMOTE_DONE, HZ_REMOTE_POSTED, HZ_REMOTE_NEEDS_HEAP };
/* A free of owner's block p by heap's thread: what hz_free_remote_fast (remote.h)
 * did not take. */
enum hz_remote_after hz_free_remote(void *p, hz_heap_t *owner, hz_heap_t *heap) HZ_HIDDEN;
void hz_heap_collect(hz_heap_t *heap) HZ_HIDDEN;
void hz_outbox_flush_all(hz_heap_t *heap) HZ_HIDDEN;
bool hz_inbox_pending(hz_heap_t *heap) HZ_HIDDEN;
void hz_set_current(hz_heap_t *heap, unsigned cls, hz_page_t *page) HZ_HIDDEN;

/* ------------------------------------------------------------------ stash */
#if HZ_STASH_BLOCKS
void hz_stash_init(hz_heap_t *heap) HZ_HIDDEN;
bool hz_stash_keep(hz_heap_t *heap, const hz_page_t *page, void *p) HZ_HIDDEN;
hz_page_t *hz_stash_serve(hz_heap_t *heap, unsigned cls, hz_page_t *page) HZ_HIDDEN;
void *hz_stash_pop(hz_heap_t *heap, unsigned cls) HZ_HIDDEN;
#else /* no stash: every remote free travels home */
static inline void hz_stash_init(hz_heap_t *heap) { (void)heap; }
static inline bool hz_stash_keep(hz_heap_t *heap, const hz_page_t *page, void *p) {
    (void)heap, (void)page, (void)p;
    return false;
}
static inline hz_page_t *hz_stash_serve(hz_heap_t *heap, unsigned cls, hz_page_t *page) {
    (void)heap, (void)cls;
    return page;
}
static inline void *hz_stash_pop(hz_heap_t *heap, unsigned cls) {
    (void)heap, (void)cls;
    return NULL;
}
#endif

/* ----------------------------------------------------------------- large */
/* NULL, errno untouched, when there is no memory (the caller sets ENOMEM if it gives
 * up: it may retry). */
void *hz_large_alloc(size_t size, size_t alignment, bool growing, bool *zeroed) HZ_HIDDEN;
hz_large_t *hz_large_header(const void *p) HZ_HIDDEN;
/* Large blocks the process holds now (the counters' difference). */
HZ_INLINE uint64_t hz_large_live(void) {
    return hz_gstat_load(large_allocs) - hz_gstat_load(large_frees);
}
/* The large block whose first segment holds p, at its start or not, or NULL. */
hz_large_t *hz_large_holding(const void *p) HZ_HIDDEN;
/* A sampled block's leaving the heap profile is its caller's (alloc.c): the profile
 * is a layer above this one. */
void hz_large_free(hz_large_t *h) HZ_HIDDEN;
void *hz_large_realloc(hz_large_t *h, size_t size) HZ_HIDDEN;
bool hz_large_cache_trim(void) HZ_HIDDEN;
/* Purge the large cache's mappings idle for a purge delay; when the next one is due. */
uint64_t hz_large_cache_age(uint64_t now) HZ_HIDDEN;
void hz_large_cache_fork_child(void) HZ_HIDDEN;

/* ------------------------------------------------------- a heap's life (heap.c) */
hz_heap_t *hz_heap_acquire(void) HZ_HIDDEN;
void hz_heap_abandon(hz_heap_t *heap) HZ_HIDDEN;
/* TIMED: purge on the time policy; ALL: everything, keeping one empty segment;
 * ALL_SEGMENTS: everything; ROOM: everything, but the empty pages each class keeps
 * stay (retired, a class's next pages would be full-sized: page.c, page_new). */
enum hz_tidy { HZ_TIDY_TIMED, HZ_TIDY_ALL, HZ_TIDY_ALL_SEGMENTS, HZ_TIDY_ROOM };
void hz_heap_tidy(hz_heap_t *heap, enum hz_tidy how) HZ_HIDDEN;
hz_heap_t *hz_exit_heap_lock(void) HZ_HIDDEN;
void hz_exit_heap_unlock(hz_heap_t *heap) HZ_HIDDEN;
void hz_heaps_trim(void) HZ_HIDDEN;
void hz_heaps_fork_child(void) HZ_HIDDEN;
/* Their locks, and what a fork child forgets when the forking thread was
 * interrupted inside one (see hz_meta_forget). */
hz_lock_t *hz_upkeep_lock(void) HZ_HIDDEN;
hz_lock_t *hz_exit_lock(void) HZ_HIDDEN;
void hz_exit_heap_forget(void) HZ_HIDDEN;
hz_lock_t *hz_heaps_lock(void) HZ_HIDDEN;
void hz_heaps_forget(void) HZ_HIDDEN;
typedef void (*hz_heap_visit_fn)(hz_heap_t *heap, void *arg);
void hz_heaps_visit(hz_heap_visit_fn fn, void *arg) HZ_HIDDEN;
/* Heaps nobody owns get their remote frees collected and their memory purged by
 * whichever thread passes through a slow path once it is due (ms; 0: nothing due). */
extern _Atomic uint64_t hz_upkeep_due HZ_HIDDEN;
void hz_upkeep_run(void) HZ_HIDDEN;
/* Ask for upkeep at `when` (ms) unless it is due earlier already.  Inline, with
 * hz_upkeep_mail, so that posting to a heap nobody owns (remote.c, a layer below
 * heap.c) only writes the word that upkeep reads. */
HZ_INLINE void hz_upkeep_at(uint64_t when) {
    uint64_t cur = atomic_load_explicit(&hz_upkeep_due, memory_order_relaxed);
    while (when != 0 && (cur == 0 || when < cur) &&
           !atomic_compare_exchange_weak_explicit(&hz_upkeep_due, &cur, when,
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}
/* Blocks freed into a heap nobody owns are collected this soon. */
#define HZ_UPKEEP_MAIL_DELAY_MS (HZ_PURGE_DELAY_MS / 4 + 1)
/* A thread posted blocks to a heap that nobody owns. */
HZ_INLINE void hz_upkeep_mail(void) {
    if (atomic_load_explicit(&hz_upkeep_due, memory_order_relaxed) == 0)
        hz_upkeep_at(hz_os_now_ms() + HZ_UPKEEP_MAIL_DELAY_MS);
}
/* The earlier of two due times, 0 meaning none. */
HZ_INLINE uint64_t hz_earliest(uint64_t a, uint64_t b) {
    if (a == 0) return b;
    return b != 0 && b < a ? b : a;
}
/* The caches of empty segments and of large mappings stamp an entry with when it
 * came (0: purged); while upkeep purges it in place, with HZ_STAMP_PURGING, so that
 * nothing takes, evicts or trims it meanwhile.  In a fork child nobody purges it
 * any more: hz_stamp_orphan makes it resident and old, for upkeep to purge again
 * (its dirty state still covers every page the purge had not dropped), and says
 * whether it did. */
#define HZ_STAMP_PURGING UINT64_MAX
HZ_INLINE bool hz_stamp_orphan(uint64_t *stamp) {
    if (*stamp != HZ_STAMP_PURGING) return false;
    *stamp = 1;
    return true;
}
HZ_INLINE void hz_upkeep_tick(void) {
    if (hz_unlikely(atomic_load_explicit(&hz_upkeep_due, memory_order_relaxed) != 0))
        hz_upkeep_run();
}

/* -------------------------------------------------- process/thread lifecycle */
hz_heap_t *hz_thread_init(void) HZ_HIDDEN;
/* A thread without a heap that frees for others: its exit is then seen (init.c). */
void hz_thread_mark_heapless(void) HZ_HIDDEN;
bool hz_process_ready(void) HZ_HIDDEN;

/* ------------------------------------------------------------- entry points */
void *hz_alloc_slow(size_t size) HZ_HIDDEN;
void *hz_page_pop_far(hz_heap_t *heap, hz_page_t *page, void *block, uintptr_t rel) HZ_HIDDEN;
void *hz_alloc_off_list(size_t size, hz_page_t *page, void *block, uintptr_t rel) HZ_HIDDEN;
/* free's callees take p first, in the register it arrives in, and the heap last:
 * the fast path then makes no register copy to call them. */
void hz_free_other(void *p, uintptr_t entry, hz_heap_t *heap) HZ_HIDDEN;
/* The free path's page event: a tick of the stats publisher, then hz_page_free_event. */
void hz_free_event(hz_heap_t *heap, hz_page_t *page) HZ_HIDDEN;
/* Behind hz_free_fast: p, in a page of the caller's heap, starts no block: a
 * heap-profile sample's pointer (prof.c), or reported. */
void hz_free_unaligned(void *p, hz_page_t *page, hz_heap_t *heap) HZ_HIDDEN;
void *hz_calloc_impl(size_t count, size_t size) HZ_HIDDEN;
void *hz_realloc_impl(void *p, size_t size) HZ_HIDDEN;
void *hz_realloc_foreign(void *p, size_t size, void *(*alloc)(size_t)) HZ_HIDDEN;
size_t hz_usable_size_impl(const void *p) HZ_HIDDEN;
void *hz_aligned_impl(size_t alignment, size_t size) HZ_HIDDEN;
int hz_trim_impl(void) HZ_HIDDEN;

/* ------------------------------------------------------ heap profile (prof.c)
 * Every malloc subtracts its size from its heap's sample_left; the one that would take
 * it below zero leaves the fast path for hz_alloc_sampled, which either samples it
 * (serves it so that its free leaves the free fast path, see HZ_SAMPLE_IN_PAGE, with
 * its call stack recorded) or, with profiling off, resets the countdown to
 * HZ_SAMPLE_NEVER and allocates normally. */
#define HZ_SAMPLE_NEVER ((uint64_t)1 << 62)
/* heap->sample_left -= size; true when that would go below zero (then the
 * countdown holds garbage until hz_sample_take resets it). */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
HZ_INLINE bool hz_sample_due(hz_heap_t *heap, size_t size) {
    bool borrow; /* the carry flag of the subtract: the compiler branches on it */
    __asm__("subq %2, %0" : "+m"(heap->sample_left), "=@ccb"(borrow) : "r"(size));
    return borrow;
}
#else
HZ_INLINE bool hz_sample_due(hz_heap_t *heap, size_t size) {
    uint64_t left = atomic_load_explicit(&heap->sample_left, memory_order_relaxed);
    if (hz_unlikely(size > left)) return true;
    atomic_store_explicit(&heap->sample_left, left - size, memory_order_relaxed);
    return false;
}
#endif
/* The heap profile's switch and what every sample reads first, on one cache line
 * (prof.c): a sample reads one line for them, where it read three. */
#define HZ_PROF_MANTISSA_BITS 6
struct hz_prof_state {
    _Alignas(HZ_CACHE_LINE) _Atomic uint64_t rate; /* mean bytes between samples; 0: off */
    uint64_t ln2_rate;                   /* rate ln 2: the intervals' scale */
    struct hz_prof_segment *_Atomic seg; /* NULL: nothing to update */
    /* rate times the mean of -ln m over each of the bins of m in [1/2, 1) (prof.c) */
    uint64_t mantissa_rate[1u << HZ_PROF_MANTISSA_BITS];
};
extern struct hz_prof_state hz_prof HZ_HIDDEN;
/* Builds the table hz_sample_take (prof.h) draws intervals of mean rate from (before
 * hz_prof.rate is published). */
void hz_prof_intervals(uint64_t rate) HZ_HIDDEN;
/* A sampled large block (NULL: allocate it normally); *zero as hz_large_alloc's. */
void *hz_prof_alloc(size_t size, size_t alignment, bool *zero) HZ_HIDDEN;
/* A sampled large block is freed: take it out of the live profile. */
void hz_prof_release(hz_large_t *h) HZ_HIDDEN;
/* prof.h's hz_sample_block and hz_sample_unmark, out of line for the files that
 * prof.h is above (freelist.h, remote.c): the block of page whose sample p is, or
 * NULL; and p's sample leaving the profile, its block returned, or p reported. */
void *hz_prof_block(const hz_page_t *page, const void *p) HZ_HIDDEN;
void *hz_prof_unmark(const hz_heap_t *heap, const hz_page_t *page, void *p) HZ_HIDDEN;
void *hz_alloc_sampled(hz_heap_t *heap, hz_page_t *page, void *block, size_t size) HZ_HIDDEN;
/* The return addresses of the stack of the function that expands hz_unwind, from
 * its caller's call site outwards, read from the unwind tables (unwind.c); -1 when a
 * frame needs libgcc's unwinder; HZ_UNWIND_SAME when the stack is the one memo's last
 * walk found (frames are not written).  Inline, so that the walk begins in the frame
 * of the allocator's entry, which malloc's fast path jumps to: a sample's memo then
 * holds no return address of the allocator's own to check. */
#define HZ_UNWIND_SAME (-2)
int hz_unwind_walk(void **frames, int max, hz_unwind_memo_t *memo, uint64_t pc, uint64_t sp,
                   uint64_t fp) HZ_HIDDEN;
#if defined(__x86_64__)
/* Whether the stack words memo's walk read still hold what it read, from the same
 * place (pc, sp, and fp if a rule used it before a frame restored it): the walk is a
 * function of those, and would find the same stack.  The memo is this thread's
 * (types.h), and its words lie between sp and the outermost frame its walk reached
 * in this thread's stack, so they can be read.  One pass without early exits: a
 * loop's samples match, and a mismatch then walks anyway. */
HZ_INLINE bool hz_unwind_memo_holds(const hz_unwind_memo_t *m, uint64_t pc, uint64_t sp,
                                    uint64_t fp) {
    if (m->pc != pc) return false; /* 0: no walk to go by */
    uint64_t diff = (m->sp ^ sp) | (m->fp_read ? m->fp ^ fp : 0);
#pragma GCC unroll 4
    for (uint32_t i = 0; i < m->reads; i++)
        diff |= *(const uint64_t *)(uintptr_t)m->read[i].at ^ m->read[i].val;
    return diff == 0;
}

HZ_INLINE int hz_unwind(void **frames, int max, hz_unwind_memo_t *memo) {
    uint64_t pc, sp, fp;
    __asm__ volatile("leaq 0(%%rip), %0\n\tmovq %%rsp, %1\n\tmovq %%rbp, %2"
                     : "=r"(pc), "=r"(sp), "=r"(fp));
    if (hz_unwind_memo_holds(memo, pc, sp, fp)) return HZ_UNWIND_SAME;
    return hz_unwind_walk(frames, max, memo, pc, sp, fp);
}
#else
HZ_INLINE int hz_unwind(void **frames, int max, hz_unwind_memo_t *memo) {
    (void)frames, (void)max, (void)memo;
    return -1; /* backtrace() it is */
}
#endif
/* The profile's segment is made and named by the stats export (shm.c), which reads
 * HAKOZUNA_PROFILE: its size, and profiling started at `rate` bytes in it. */
struct hz_prof_segment;
size_t hz_prof_segment_size(void) HZ_HIDDEN;
void hz_prof_start(struct hz_prof_segment *s, size_t size, uint64_t rate) HZ_HIDDEN;
/* Sampling stops; true if the profile has a segment (whose name the caller removes). */
bool hz_prof_stop(void) HZ_HIDDEN;
void hz_prof_fork_child(void) HZ_HIDDEN;

/* ------------------------------------------------- shared-memory export (shm.c) */
void hz_shm_start(void) HZ_HIDDEN;
void hz_shm_stop(void) HZ_HIDDEN;
void hz_shm_tick_publish(void) HZ_HIDDEN;
void hz_shm_fork_child(void) HZ_HIDDEN;
extern _Atomic int hz_shm_on HZ_HIDDEN;
/* Stats on: make a heap's counters page a thread slot of the segment, once (a heap
 * that has a slot, or that move_in gave one, keeps it). */
void hz_shm_attach(hz_heap_t *heap) HZ_HIDDEN;
/* The slot header just before a heap (types.h). */
HZ_INLINE struct hz_shm_thread *hz_heap_slot(hz_heap_t *heap) {
    return (struct hz_shm_thread *)((char *)heap - offsetof(struct hz_shm_thread, mallocs));
}
/* From slow paths (never under heaps_lock): publish if due.  Inline, so that with
 * stats off it is one load and a branch. */
HZ_INLINE void hz_shm_tick(void) {
    if (hz_unlikely(atomic_load_explicit(&hz_shm_on, memory_order_relaxed) != 0))
        hz_shm_tick_publish();
}
/* The same from a slow path so frequent that only one call in n looks (*calls counts
 * them): publishing reads the clock, about 10 ns even for the coarse one. */
HZ_INLINE void hz_shm_tick_one_in(uint8_t *calls, unsigned n) {
    if (hz_unlikely(atomic_load_explicit(&hz_shm_on, memory_order_relaxed) != 0) &&
        ++*calls % n == 0)
        hz_shm_tick_publish();
}

#endif /* HZ_INTERNAL_H */
