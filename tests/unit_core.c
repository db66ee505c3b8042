/* unit_core.c - unit tests of the core, linked with the allocator's objects directly
 * (no libc names): the size-class table and the pointer -> page/owner lookup. */
#include <alloca.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hakozuna.h"
#include "prof.h"

#define HZ_UNIT_NOINLINE __attribute__((noinline))
#define HZ_UNIT_UNUSED __attribute__((unused))

static int failures;
#define EXPECT(c, ...)                                                  \
    do {                                                                \
        if (!(c)) {                                                     \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);             \
            fprintf(stderr, __VA_ARGS__);                               \
            fputc('\n', stderr);                                        \
            failures++;                                                 \
        }                                                               \
    } while (0)

static void test_classes(void) {
    hz_sizeclass_init();
    uint32_t prev = 0;
    for (unsigned c = 1; c < HZ_CLASSES; c++) {
        uint32_t s = hz_class_size[c];
        EXPECT(s > prev, "class %u size %u not increasing", c, s);
        EXPECT(s % 16 == 0, "class %u size %u not 16-aligned", c, s);
        /* Worst request of this class is prev+1: waste below 1/8 above 256 B. */
        if (prev >= 256) EXPECT((uint64_t)(s - prev - 1) * 8 <= prev + 1,
                                "class %u wastes more than 12.5%%", c);
        /* Blocks of 4-256 KiB are a cache line longer, but powers of two. */
        uint32_t b = hz_class_block[c];
        bool padded = s > 4096 && s < (256u << 10) && (s & (s - 1)) != 0;
        EXPECT(b == s + (padded ? HZ_CACHE_LINE : 0), "class %u: blocks of %u for %u", c, b, s);
        size_t span = (size_t)hz_class_units[c] * HZ_UNIT_SIZE;
        EXPECT(hz_class_units[c] >= 1 && hz_class_units[c] < HZ_UNITS, "class %u units", c);
        EXPECT(span / b >= 1, "class %u: no block fits its span", c);
        EXPECT((span % b) * 8 <= span, "class %u: span tail wastes more than 1/8", c);
        prev = s;
    }
    EXPECT(hz_class_size[HZ_CLASSES - 1] == HZ_MEDIUM_MAX, "last class is not HZ_MEDIUM_MAX");
    /* Every size maps to the smallest class that holds it. */
    for (size_t n = 1; n <= HZ_MEDIUM_MAX; n += (n < 65536 ? 1 : 61)) {
        unsigned c = hz_size_class(n);
        EXPECT(c >= 1 && c < HZ_CLASSES, "size %zu -> class %u out of range", n, c);
        EXPECT(hz_class_size[c] >= n, "size %zu -> class %u too small", n, c);
        EXPECT(c == 1 || hz_class_size[c - 1] < n, "size %zu -> class %u not smallest", n, c);
        /* A heap-profile sample needs HZ_SAMPLE_MARK bytes past its size: where its
         * class lacks them, the next class has them (alloc.c, hz_alloc_sampled). */
        if (n <= HZ_MEDIUM_MAX - HZ_SAMPLE_MARK && hz_class_size[c] - n < HZ_SAMPLE_MARK)
            EXPECT(hz_size_class(n + HZ_SAMPLE_MARK) == c + 1,
                   "size %zu: a sample's mark does not fit class %u + 1", n, c);
    }
    for (size_t a = 32; a <= HZ_ALIGNED_CLASS_MAX; a *= 2) {
        unsigned c = hz_aligned_class(100, a);
        EXPECT(c != 0 && hz_class_block[c] % a == 0 && hz_class_size[c] >= 100,
               "aligned class for 100 B / %zu", a);
    }
}

/* The fast path's tables (alloc.h) give, for every size they serve, the current
 * page of the smallest class that holds it. */
static void test_direct_tables(void) {
    static hz_heap_t heap;
    static hz_page_t pages[HZ_CLASSES];
    for (unsigned c = 1; c < HZ_CLASSES; c++) hz_set_current(&heap, c, &pages[c]);
    for (size_t n = 0; n <= HZ_DIRECT_MID_MAX; n++) {
        hz_page_t *got = n <= HZ_DIRECT_MAX ? heap.direct[(n + 15) >> 4]
                                            : heap.direct_mid[(n + 255) >> 8];
        unsigned want = hz_size_class(n ? n : 1);
        EXPECT(got == &pages[want], "size %zu: table gives class %td, not %u", n,
               got - pages, want);
    }
}

/* The core block behind a pointer hz_malloc(n) returned, and the size asked of the
 * core: the checked variant puts a 16-byte header before the caller's bytes and at
 * least 8 bytes of canary after them (debug.c). */
#if HZ_DEBUG
#define CORE_BLOCK(p) ((char *)(p) - 16)
#define CORE_SIZE(n) ((n) + 24)
#else
#define CORE_BLOCK(p) ((char *)(p))
#define CORE_SIZE(n) (n)
#endif

static void test_lookup(void) {
    /* Blocks of every class are found through the segment map; their page has the
     * right class and the segment is owned by this thread's heap. */
    for (unsigned c = 1; c < HZ_CLASSES; c += 3) {
        size_t n = hz_class_size[c];
        char *p = hz_malloc(n);
        EXPECT(p != NULL, "malloc %zu", n);
        if (p == NULL) continue;
        EXPECT(hz_segmap_kind((uintptr_t)p) == HZ_SEG_SMALL, "%zu: not in a small segment", n);
        /* The flat array (here with no ulimit -v it exists) and the two-level way
         * read the same word. */
        uintptr_t a = (uintptr_t)p;
        EXPECT(hz_segmap_flat_entries == HZ_SEGMAP_ENTRIES, "no flat segment map");
        if (hz_segmap_flat_entries == HZ_SEGMAP_ENTRIES)
            EXPECT(&hz_segmap_flat[a >> HZ_SEGMENT_SHIFT] ==
                       &hz_segmap_top[a >> HZ_SEGMAP_TOP_SHIFT]
                                     [(a >> HZ_SEGMENT_SHIFT) & (HZ_SEGMAP_LEAF_ENTRIES - 1)],
                   "%zu: the flat map and the top table disagree", n);
        hz_segment_t *seg = hz_segment_of(p);
        hz_page_t *page = hz_page_of(seg, p);
        char *b = CORE_BLOCK(p);
        unsigned cls = hz_size_class(CORE_SIZE(n));
        EXPECT(page != NULL && page->cls == cls, "%zu: page class %u", n, page ? page->cls : 0);
        EXPECT(seg->heap == hz_tls_heap, "%zu: owner is not this thread's heap", n);
        EXPECT(b >= page->start && b < page->start + (size_t)page->reserved * page->block_size,
               "%zu: block outside its page", n);
        EXPECT(((uintptr_t)b - (uintptr_t)page->start) % page->block_size == 0,
               "%zu: block not on a block boundary", n);
#if HZ_DEBUG
        size_t usable = n; /* the checked variant gives what was asked */
#else
        size_t usable = hz_class_block[c]; /* the class's whole block */
#endif
        EXPECT(hz_usable_size(p) == usable, "%zu: usable %zu", n, hz_usable_size(p));
        memset(p, 0xab, hz_usable_size(p));
        hz_free(p);
    }
    /* Large blocks: header found, usable size covers the request. */
    char *big = hz_malloc(HZ_MEDIUM_MAX + 1);
    EXPECT(big != NULL && hz_large_header(CORE_BLOCK(big)) != NULL, "large block header");
    EXPECT(hz_usable_size(big) >= HZ_MEDIUM_MAX + 1, "large usable");
    hz_free(big);
    /* Pointers that are not ours: not found, and freeing them does nothing. */
    static char not_ours[64];
    EXPECT(hz_segmap_kind((uintptr_t)not_ours) == HZ_SEG_NONE, "static array seen as ours");
    EXPECT(hz_segmap_kind((uintptr_t)1 << 60) == HZ_SEG_NONE, "high address seen as ours");
#if !HZ_DEBUG /* where passing one is an error (tests/test_debug.sh) */
    EXPECT(hz_usable_size(not_ours) == 0, "usable size of a foreign pointer");
    struct hz_stats before, after;
    hz_stats_get(&before, sizeof before);
    hz_free(not_ours);
    hz_stats_get(&after, sizeof after);
    EXPECT(after.foreign_frees == before.foreign_frees + 1, "foreign free not counted");
#endif
    EXPECT(hz_stats_get(NULL, 0) == -1 && errno == EINVAL, "hz_stats_get(NULL)");
}

/* fn run in a thread of its own: a heap no other test has shaped. */
static HZ_UNIT_UNUSED void in_own_thread(void *(*fn)(void *)) {
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, fn, NULL) == 0, "pthread_create");
    pthread_join(t, NULL);
}

/* Blocks of n bytes into blocks[] until one lands on a second page (at most max);
 * the first page is *first, the second *next (NULL if none was reached).  Returns
 * how many blocks it took. */
static unsigned fill_page(size_t n, char **blocks, unsigned max, hz_page_t **first,
                          hz_page_t **next) {
    unsigned count = 0;
    *first = *next = NULL;
    while (count < max) {
        char *p = blocks[count] = hz_malloc(n);
        EXPECT(p != NULL, "malloc %zu", n);
        if (p == NULL) break;
        count++;
        hz_page_t *page = hz_page_of(hz_segment_of(p), CORE_BLOCK(p));
        if (*first == NULL) *first = page;
        else if (page != *first) {
            *next = page;
            break;
        }
    }
    return count;
}

static void test_page_lengths(void) {
    /* A class's first page is short; the next, made when it is full, is long. */
    enum { MAX_BLOCKS = 64 };
    size_t n = 20000;
    unsigned cls = hz_size_class(CORE_SIZE(n));
    EXPECT(hz_class_first_units[cls] < hz_class_units[cls], "class %u: no short first page", cls);
    bool fresh = hz_tls_heap->queues[cls].pages == 0;
    char *blocks[MAX_BLOCKS];
    hz_page_t *first, *next;
    unsigned count = fill_page(n, blocks, MAX_BLOCKS, &first, &next);
    EXPECT(next != NULL, "%u blocks of %zu B on one page", count, n);
    if (fresh && first != NULL) EXPECT(first->units == hz_class_first_units[cls],
                                       "first page of class %u: %u units", cls, first->units);
    if (fresh && next != NULL) EXPECT(next->units == hz_class_units[cls],
                                      "second page of class %u: %u units", cls, next->units);
    while (count > 0) hz_free(blocks[--count]);
#if !HZ_DEBUG && !HZ_HARDENED /* their quarantines hold frees back */
    /* A class that gave its pages back is no longer new: its next page is long. */
    hz_heap_retire_empty(hz_tls_heap);
    EXPECT(hz_tls_heap->queues[cls].pages == 0, "class %u kept %u pages", cls,
           hz_tls_heap->queues[cls].pages);
    char *p = hz_malloc(n);
    hz_page_t *again = hz_page_of(hz_segment_of(p), CORE_BLOCK(p));
    EXPECT(again->units == hz_class_units[cls], "class %u after its pages went: %u units",
           cls, again->units);
    hz_free(p);
#endif
}

#if !HZ_DEBUG && !HZ_HARDENED
static uint64_t pages_retired(void) { return hz_tls_heap->stats.pages_retired; }
#endif

/* A long page (above 256 KiB) that empties while current is retired the first time;
 * once its class has retired a page lately, the next one is kept for reuse instead of
 * being built again at every wave. */
static void test_kept_pages(void) {
#if !HZ_DEBUG && !HZ_HARDENED /* their quarantines hold frees back */
    enum { MAX_BLOCKS = 64 };
    size_t n = 24000;
    unsigned cls = hz_size_class(CORE_SIZE(n));
    EXPECT(hz_class_units[cls] > 4, "class %u: pages of %u units", cls, hz_class_units[cls]);
    char *blocks[MAX_BLOCKS];
    unsigned count = 0, on_long = 0;
    hz_page_t *first = NULL;
    /* Fill the class's first page and put blocks on a second, long one. */
    while (count < MAX_BLOCKS) {
        char *p = blocks[count++] = hz_malloc(n);
        EXPECT(p != NULL, "malloc %zu", n);
        if (p == NULL) return;
        hz_page_t *page = hz_page_of(hz_segment_of(p), CORE_BLOCK(p));
        if (first == NULL) first = page;
        if (page != first && ++on_long == 2) break;
    }
    uint64_t before = pages_retired();
    hz_free(blocks[--count]);
    hz_free(blocks[--count]);
    EXPECT(pages_retired() == before + 1, "an emptied long page: %llu retired",
           (unsigned long long)(pages_retired() - before));
    char *p = hz_malloc(n);
    hz_page_t *page = hz_page_of(hz_segment_of(p), CORE_BLOCK(p));
    EXPECT(page != first && page->units > 4, "the next block is not on a new long page");
    hz_free(p);
    /* With a purge delay of 0 (a knob's end) no retirement is recent: it goes again. */
    uint64_t retired = hz_purge_delay_ms > 0 ? before + 1 : before + 2;
    EXPECT(pages_retired() == retired, "a long page of a class that came and went was "
           "%s", hz_purge_delay_ms > 0 ? "retired again" : "kept");
    while (count > 0) hz_free(blocks[--count]);
#endif
}

/* A page that ran out of blocks rejoins its class's queue once a quarter of its
 * blocks are back, not at the first: in between its freed blocks wait, and the next
 * mallocs come from another page. */
static void test_full_page_requeue(void) {
#if !HZ_DEBUG && !HZ_HARDENED /* their quarantines hold frees back */
    enum { MAX_BLOCKS = 4200 };
    size_t n = 1000;
    static char *blocks[MAX_BLOCKS];
    hz_page_t *first, *next;
    /* Fill one page, and take one block of the next. */
    unsigned count = fill_page(n, blocks, MAX_BLOCKS, &first, &next);
    if (next == NULL && count < MAX_BLOCKS) return; /* a malloc failed (reported) */
    unsigned full = count - 1, back = first->reserved / 4;
    EXPECT(full == first->reserved && back >= 2, "a page of %u blocks took %u", first->reserved,
           full);
    for (unsigned i = 0; i < back - 1; i++) hz_free(blocks[i]);
    EXPECT(!first->in_queue, "the full page rejoined its queue after %u of %u frees", back - 1,
           back);
    char *p = hz_malloc(n);
    EXPECT(hz_page_of(hz_segment_of(p), CORE_BLOCK(p)) != first,
           "a block came from the full page before it rejoined");
    hz_free(p);
    hz_free(blocks[back - 1]);
    EXPECT(first->in_queue && first->used == (int32_t)(full - back),
           "after %u frees the page is %s with %d blocks out (want %u)", back,
           first->in_queue ? "queued" : "not queued", first->used, full - back);
    for (unsigned i = back; i < count; i++) hz_free(blocks[i]);
#endif
}

#if !HZ_DEBUG && !HZ_HARDENED
static void *retired_span_thread(void *arg) {
    (void)arg;
    enum { MAX_BLOCKS = 200 };
    static char *a[MAX_BLOCKS], *b[MAX_BLOCKS], *more[MAX_BLOCKS];
    hz_page_t *a1, *b1, *second;
    /* Two pages of B, then two of A; B's first page is given back first, so it is
     * the first free span of the segment that is still resident, then A's. */
    unsigned nb = fill_page(2000, b, MAX_BLOCKS, &b1, &second);
    unsigned na = fill_page(1000, a, MAX_BLOCKS, &a1, &second);
    for (unsigned i = 0; i + 1 < nb; i++) hz_free(b[i]);
    for (unsigned i = 0; i + 1 < na; i++) hz_free(a[i]);
    /* A's next page, once its second is used up, goes where its first was. */
    hz_page_t *a2 = hz_page_of(hz_segment_of(a[na - 1]), CORE_BLOCK(a[na - 1])), *page = a2;
    unsigned nm = 0;
    while (page == a2 && nm < MAX_BLOCKS) {
        more[nm] = hz_malloc(1000);
        if (more[nm] == NULL) break;
        page = hz_page_of(hz_segment_of(more[nm]), CORE_BLOCK(more[nm]));
        nm++;
    }
    EXPECT(page == a1, "class of 1000 B: its new page is not the span its first page left "
                       "(%p, not %p; another class's span is %p)", (void *)page, (void *)a1,
           (void *)b1);
    while (nm > 0) hz_free(more[--nm]);
    hz_free(a[na - 1]);
    hz_free(b[nb - 1]);
    return NULL;
}
#endif

/* A class's new page takes the span its last retired page left, where its blocks were
 * and so where memory is resident at the offsets they touch, not another class's. */
static void test_retired_span_reuse(void) {
#if !HZ_DEBUG && !HZ_HARDENED /* their quarantines hold frees back */
    in_own_thread(retired_span_thread);
#endif
}

#if !HZ_DEBUG && !HZ_HARDENED
static void *resize_unaligned_thread(void *arg) {
    (void)arg;
    char *p = hz_malloc((size_t)300 << 10);
    EXPECT(p != NULL, "hz_malloc(300 KiB)");
    if (p == NULL) return NULL;
    memset(p, 7, (size_t)300 << 10);
    hz_segment_t *seg = hz_segment_of(p);
    hz_page_t *page = hz_page_of(seg, CORE_BLOCK(p));
    unsigned end = page->first_unit + page->units;
    /* A fresh heap: its first span of several units starts at unit 1, and the units
     * after it are free. */
    EXPECT(page->first_unit % 8 != 0 && end + 4 <= HZ_UNITS &&
               ((seg->free_units >> end) & 0xf) == 0xf,
           "a 300 KiB block at unit %u of a fresh heap's segment, free units %#llx",
           page->first_unit, (unsigned long long)seg->free_units);
    char *q = hz_realloc(p, (size_t)512 << 10);
    EXPECT(q == p, "a 300 KiB block at unit %u grown to 512 KiB moved: 512 KiB blocks start "
                   "at multiples of 512 KiB, but a class a little larger fits where it is",
           page->first_unit);
    EXPECT(q != NULL && q[0] == 7 && q[((size_t)300 << 10) - 1] == 7, "its bytes were lost");
    EXPECT(q == NULL || hz_usable_size(q) >= ((size_t)512 << 10), "usable size %zu",
           q == NULL ? (size_t)0 : hz_usable_size(q));
    hz_free(q);
    return NULL;
}
#endif

/* A block alone on its page that realloc grows to a class whose alignment its start
 * lacks grows in place into a class a little larger whose alignment holds there. */
static void test_resize_unaligned(void) {
#if !HZ_DEBUG && !HZ_HARDENED /* their realloc moves every block */
    in_own_thread(resize_unaligned_thread);
#endif
}

static void test_reuse_and_zero(void) {
    /* A freed block is handed out again (LIFO) and calloc memory is zero after reuse. */
    char *a = hz_malloc(48);
    hz_free(a);
    char *b = hz_malloc(48);
#if HZ_HARDENED /* which holds freed blocks back in its quarantine */
    EXPECT(a != b, "freed block reused at once despite the quarantine");
#elif !HZ_DEBUG /* which keeps freed blocks in quarantine */
    EXPECT(a == b, "freed block not reused first");
#endif
    memset(b, 0x5a, 48);
    hz_free(b);
    unsigned char *z = hz_calloc(3, 16);
    EXPECT(z != NULL, "calloc");
    for (int i = 0; z && i < 48; i++) EXPECT(z[i] == 0, "calloc byte %d = %u", i, z[i]);
    hz_free(z);
    EXPECT(hz_calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM, "calloc overflow");
    EXPECT(hz_aligned_alloc(24, 8) == NULL && errno == EINVAL, "bad alignment");
}

#if HZ_STASH_BLOCKS
/* The stash (scale, mt): blocks of another heap freed by this thread come back from
 * this thread's fast path, and the count the fast path bumps on every pop stays
 * bounded however many blocks pass through (it overflowed after 2^31 pops when the
 * stash counted in its page descriptor's `used`). */
#define STASH_KEPT 32
#define STASH_POPS ((uint64_t)1 << 22)
#define STASH_SIZE 288 /* a class no other test allocates: this heap has no page of it */

static void *alloc_foreign(void *arg) {
    void **blocks = arg;
    for (int i = 0; i < STASH_KEPT; i++) blocks[i] = hz_malloc(STASH_SIZE);
    return NULL;
}

static void test_stash(void) {
    void *blocks[STASH_KEPT];
    pthread_t t;
    hz_free(hz_malloc(16)); /* this thread's heap exists before the other's */
    EXPECT(pthread_create(&t, NULL, alloc_foreign, blocks) == 0 && pthread_join(t, NULL) == 0,
           "thread");
    for (int i = 0; i < STASH_KEPT; i++)
        EXPECT(blocks[i] != NULL && hz_segment_of(blocks[i])->heap != hz_tls_heap,
               "block %d is not another heap's", i);
    unsigned cls = hz_size_class(STASH_SIZE);
    EXPECT(hz_tls_heap->current[cls] == &hz_empty_page, "this heap has a page of %d B blocks",
           STASH_SIZE);
    int32_t max_used = 0;
    for (uint64_t pops = 0; pops < STASH_POPS && failures == 0; pops += STASH_KEPT) {
        for (int i = 0; i < STASH_KEPT; i++) hz_free(blocks[i]);
        for (int i = STASH_KEPT - 1; i >= 0; i--) {
            void *p = hz_malloc(STASH_SIZE);
            EXPECT(p == blocks[i], "the stash did not hand out the block freed last");
        }
        hz_page_t *served = hz_tls_heap->current[cls];
        if (served->used > max_used) max_used = served->used;
    }
    EXPECT(max_used <= HZ_STASH_BLOCKS,
           "the stash's pop count reached %d after %llu pops (bound %d)", max_used,
           (unsigned long long)STASH_POPS, HZ_STASH_BLOCKS);
    for (int i = 0; i < STASH_KEPT; i++) hz_free(blocks[i]);
    hz_trim(); /* sends the stash home */
    EXPECT(hz_tls_heap->current[cls] != &hz_tls_heap->stash[cls].list, "trim left the stash served");
    void *p = hz_malloc(STASH_SIZE);
    EXPECT(p != NULL && hz_segment_of(p)->heap == hz_tls_heap, "after trim: not an own block");
    hz_free(p);
}
#else
static void test_stash(void) {}
#endif

/* A fork from a signal handler can interrupt malloc after it took a block off its
 * page's list and before it counted it.  The child's heap then holds a page whose
 * list comes up one short when the page empties: that page must stay out of use,
 * not be reported as a double free (which stopped such children). */
static void test_forked_heap(void) {
#if HZ_HARDENING && !HZ_DEBUG && !HZ_HARDENED
    size_t size = 3000; /* a class no other test allocates */
    void *a = hz_malloc(size), *b = hz_malloc(size), *spare = hz_malloc(size);
    hz_free(spare); /* a block on the page's list, however little of it is carved */
    hz_page_t *page = hz_page_of(hz_segment_of(a), a);
    EXPECT(a != NULL && b != NULL && !hz_list_end(page->free), "no block left on the page");
    if (failures) return;
    void *taken = page->free; /* what the interrupted malloc took ... */
    page->free = hz_link_next(taken);
    hz_tls_heap->forked = true; /* ... and the child kept this heap */
    hz_free(a);
    hz_free(b);
    hz_trim(); /* the page is empty by its count: retiring it checks its list */
    hz_tls_heap->forked = false;
    void *c = hz_malloc(size);
    EXPECT(c != NULL && c != taken, "the page short of a block was used again");
    hz_free(c);
#endif
}

/* fork from a signal handler that interrupted the allocator holding a lock: the
 * prepare handler waits only so long for the locks below it, whose holders may be
 * waiting for this thread.  "So long" must be time, not a number of yields: with the
 * CPUs busy, every yield can give the processor away for a whole time slice, and
 * such a fork took minutes (a crash handler that seemed to hang). */
static atomic_int hogs_stop;
static atomic_int holder_state;

static void *cpu_hog(void *arg) {
    (void)arg;
    volatile uint64_t x = 0;
    while (!atomic_load_explicit(&hogs_stop, memory_order_relaxed)) x = x + 1;
    return NULL;
}

static void *exit_lock_holder(void *arg) {
    (void)arg;
    if (!hz_lock_acquire(hz_exit_lock())) return NULL;
    atomic_store(&holder_state, 1);
    while (atomic_load(&holder_state) == 1) usleep(1000);
    hz_lock_release(hz_exit_lock());
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_fork_waits_bounded(void) {
    enum { HOGS = 6 };
    pthread_t hog[HOGS], holder;
    hz_free(hz_malloc(16)); /* the fork handlers are registered */
    pthread_create(&holder, NULL, exit_lock_holder, NULL);
    while (atomic_load(&holder_state) == 0) usleep(1000);
    for (int i = 0; i < HOGS; i++) pthread_create(&hog[i], NULL, cpu_hog, NULL);
    EXPECT(hz_lock_acquire(hz_meta_lock()), "meta lock");
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    double took = now_s() - t0;
    hz_lock_release(hz_meta_lock());
    atomic_store(&hogs_stop, 1);
    atomic_store(&holder_state, 2);
    for (int i = 0; i < HOGS; i++) pthread_join(hog[i], NULL);
    pthread_join(holder, NULL);
    int status = 0;
    EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
               WEXITSTATUS(status) == 0,
           "fork child");
    EXPECT(took < 2.0, "fork waited too long for a lock whose holder cannot go on");
    if (took >= 2.0) fprintf(stderr, "unit_core: fork took %.2f s\n", took);
}

/* The heap profile's unwinder gives the stack backtrace() gives, through frames
 * whose CFA is rsp-based and frames that keep rbp as a frame pointer (alloca makes
 * one), from a cold table and from a warm one, in the main thread and in others,
 * while objects are loaded and unloaded. */
enum { UNWIND_MAX = 40 };
struct unwind_pair {
    void *ours[UNWIND_MAX], *theirs[UNWIND_MAX];
    int n_ours, n_theirs;
};

static HZ_UNIT_NOINLINE void unwind_leaf(struct unwind_pair *u) {
    hz_unwind_memo_t memo = {0}; /* empty: a full walk */
    u->n_ours = hz_unwind(u->ours, UNWIND_MAX, &memo);
    u->n_theirs = backtrace(u->theirs, UNWIND_MAX);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}

static HZ_UNIT_NOINLINE int unwind_chain(struct unwind_pair *u, int depth) {
    volatile char *pad = depth % 2 ? alloca(32 + (size_t)depth) : NULL;
    if (pad != NULL) pad[0] = (char)depth;
    int r = 0;
    if (depth > 0) r = unwind_chain(u, depth - 1);
    else unwind_leaf(u);
    __asm__ volatile("" ::: "memory");
    return r + (pad != NULL ? pad[0] : 1);
}

/* fallback: hz_unwind may answer -1 (a frame it leaves to backtrace()). */
static void unwind_compare(const char *where, bool fallback) {
    for (int round = 0; round < 2; round++) {
        struct unwind_pair u;
        memset(&u, 0, sizeof u);
        unwind_chain(&u, 7);
        if (fallback && u.n_ours < 0) continue;
        EXPECT(u.n_ours > 9, "%s: only %d frames", where, u.n_ours);
        if (u.n_ours <= 9) return;
        /* hz_unwind, inline, begins at unwind_leaf's caller: backtrace()'s [0] is in
         * unwind_leaf.  A sanitizer that intercepts backtrace() adds its own frame
         * before it. */
        int skew = 1;
        while (skew < 3 && u.theirs[skew] != u.ours[0]) skew++;
        EXPECT(u.n_ours + skew == u.n_theirs, "%s, round %d: %d frames, backtrace %d", where,
               round, u.n_ours, u.n_theirs);
        for (int i = 0; i < u.n_ours && i + skew < u.n_theirs; i++)
            EXPECT(u.ours[i] == u.theirs[i + skew], "%s, round %d: frame %d is %p, backtrace %p",
                   where, round, i, u.ours[i], u.theirs[i + skew]);
    }
}

static void unwind_check(const char *where) { unwind_compare(where, false); }

/* Through libc's frames: qsort calls the comparator. */
static int unwind_in_compare(const void *a, const void *b) {
    static bool done;
    if (!done) {
        done = true;
        unwind_check("inside qsort");
    }
    return *(const int *)a - *(const int *)b;
}

/* Through a signal frame, which the unwinder leaves to backtrace(). */
static void unwind_in_handler(int sig) {
    (void)sig;
    unwind_compare("in a signal handler", true);
}

static void *unwind_thread(void *arg) {
    int rounds = *(const int *)arg;
    for (int i = 0; i < rounds; i++) unwind_check("another thread");
    return NULL;
}

/* The memo of a walk answers for the next walk only when that one would find the
 * same stack: the same call site reached through the same callers.  The two callers
 * of site a have frames of one size, so walks through either begin at the same sp
 * and only the return addresses on the stack tell them apart. */
static hz_unwind_memo_t memo_shared;
static volatile int memo_tag;

static HZ_UNIT_NOINLINE int memo_site_a(void **frames) {
    int n = hz_unwind(frames, UNWIND_MAX, &memo_shared);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
    return n;
}

static HZ_UNIT_NOINLINE int memo_site_b(void **frames) {
    memo_tag = 3;
    int n = hz_unwind(frames, UNWIND_MAX, &memo_shared);
    __asm__ volatile("" ::: "memory");
    return n;
}

static HZ_UNIT_NOINLINE int memo_caller_x(void **frames) {
    memo_tag = 1;
    int n = memo_site_a(frames);
    __asm__ volatile("" ::: "memory");
    return n;
}

static HZ_UNIT_NOINLINE int memo_caller_y(void **frames) {
    memo_tag = 2;
    int n = memo_site_a(frames);
    __asm__ volatile("" ::: "memory");
    return n;
}

static HZ_UNIT_NOINLINE int memo_walk(char which, void **frames) {
    int n = which == 'x' ? memo_caller_x(frames)
            : which == 'y' ? memo_caller_y(frames)
                           : memo_site_b(frames);
    __asm__ volatile("" ::: "memory");
    return n;
}

static void test_unwind_memo(void) {
#if defined(__x86_64__)
    static const char order[] = "xxyyxb";
    enum { WALKS = sizeof order - 1 };
    void *f[WALKS][UNWIND_MAX];
    int n[WALKS];
    memset(&memo_shared, 0, sizeof memo_shared);
    memset(f, 0, sizeof f);
    for (int i = 0; i < WALKS; i++) n[i] = memo_walk(order[i], f[i]); /* one call site */
    EXPECT(n[0] > 3, "memo: a first walk found %d frames", n[0]);
    EXPECT(n[1] == HZ_UNWIND_SAME, "memo: the same stack again was walked (%d)", n[1]);
    EXPECT(n[2] == n[0] && f[2][0] != f[0][0] && f[2][2] == f[0][2],
           "memo: another caller taken for the first (%d frames, [0] %p then %p)", n[2],
           f[0][0], f[2][0]);
    EXPECT(n[3] == HZ_UNWIND_SAME, "memo: the second caller's stack again was walked");
    EXPECT(n[4] == n[0] && memcmp(f[4], f[0], sizeof f[0]) == 0,
           "memo: the first caller's stack, walked again, differs");
    EXPECT(n[5] > 0 && f[5][0] != f[0][0] && n[5] == n[0] - 1,
           "memo: two call sites not told apart (%d frames)", n[5]);
#endif
}

/* The heap profile's intervals: exponential with the mean asked for, so that a block
 * of s bytes is sampled with probability 1 - exp(-s / rate), tail included. */
static void test_sample_intervals(void) {
    static hz_heap_t heap; /* a heap of its own: nothing else counts down on it */
    enum { DRAWS = 2000000, RATE = 1000 };
    hz_prof_intervals(RATE);
    heap.sample_rng = 0x2545F4914F6CDD1DULL;
    atomic_store(&hz_prof.rate, RATE);
    double sum = 0;
    unsigned below_half = 0, above_5 = 0, above_9 = 0, taken = 0;
    for (int i = 0; i < DRAWS; i++) {
        taken += hz_sample_take(&heap);
        uint64_t v = atomic_load(&heap.sample_left);
        sum += (double)v;
        below_half += v <= RATE / 2;
        above_5 += v > 5 * RATE;
        above_9 += v > 9 * RATE;
    }
    atomic_store(&hz_prof.rate, 0);
    double mean = sum / DRAWS, p_half = (double)below_half / DRAWS;
    double p5 = (double)above_5 / DRAWS, p9 = (double)above_9 / DRAWS;
    EXPECT(taken == DRAWS, "intervals: %u of %d draws were samples", taken, DRAWS);
    EXPECT(mean > 0.997 * RATE && mean < 1.003 * RATE, "intervals: mean %.1f, not %d", mean,
           RATE);
    EXPECT(p_half > 0.3885 && p_half < 0.3985, "intervals: P(<= rate/2) %.4f, not 0.3935",
           p_half);
    EXPECT(p5 > 0.0060 && p5 < 0.0075, "intervals: P(> 5 rate) %.5f, not 0.00674", p5);
    /* The far tail: draws with 12 leading zeros and more. */
    EXPECT(p9 > 0.00008 && p9 < 0.00017, "intervals: P(> 9 rate) %.6f, not 0.000123", p9);
}

static void test_unwind(void) {
#if defined(__x86_64__)
    void *warm[2];
    (void)backtrace(warm, 2); /* libgcc is loaded */
    unwind_check("main thread");
    int keys[64];
    for (int i = 0; i < 64; i++) keys[i] = (i * 37) % 64;
    qsort(keys, 64, sizeof keys[0], unwind_in_compare);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = unwind_in_handler;
    sigaction(SIGUSR1, &sa, &old);
    raise(SIGUSR1);
    sigaction(SIGUSR1, &old, NULL);
    /* An object unloaded: the table starts a new generation, and still agrees. */
    const char *lib = getenv("HZ_TEST_FOREIGN_LIB");
    void *h = lib != NULL ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (h != NULL) {
        dlclose(h);
        unwind_check("after a dlclose");
    }
    /* Threads walk at once while objects come and go: the table is filled, read
     * and cleared for a new generation concurrently. */
    enum { WALKERS = 3 };
    int rounds = 40;
    pthread_t t[WALKERS];
    for (int i = 0; i < WALKERS; i++) pthread_create(&t[i], NULL, unwind_thread, &rounds);
    for (int i = 0; lib != NULL && i < 20; i++) {
        void *again = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (again != NULL) dlclose(again);
    }
    for (int i = 0; i < WALKERS; i++) pthread_join(t[i], NULL);
#endif
}

#if !HZ_DEBUG && !HZ_HARDENED /* their realloc moves every block */
/* A block that has to move to grow past 256 KiB goes to a mapping and stays one as
 * it grows on: it is not copied from span to span through the classes up to 2 MiB. */
static void *grow_to_mapping_thread(void *arg) {
    (void)arg;
    const size_t kib = 1024;
    hz_trim(); /* no cached mapping: the moves map what they need, with no room */
    char *c = hz_malloc(200 * kib); /* a block of a class with pages of several */
    EXPECT(c != NULL, "hz_malloc(200 KiB)");
    if (c == NULL) return NULL;
    memset(c, 6, 200 * kib);
    char *m = hz_realloc(c, 300 * kib);
    EXPECT(m != NULL && hz_segmap_kind((uintptr_t)m) == HZ_SEG_LARGE,
           "a 200 KiB block grown to 300 KiB is not a mapping");
    EXPECT(m == NULL || (m[0] == 6 && m[200 * kib - 1] == 6), "its bytes were lost");
    hz_free(m != NULL ? m : c);
    /* ...unless the process holds many mappings already: the kernel's limit on them
     * is the program's too. */
    hz_gstat_add(large_allocs, HZ_REALLOC_MAPPINGS_MAX);
    c = hz_malloc(200 * kib);
    m = c != NULL ? hz_realloc(c, 300 * kib) : NULL;
    hz_gstat_sub(large_allocs, HZ_REALLOC_MAPPINGS_MAX);
    EXPECT(m != NULL && hz_segmap_kind((uintptr_t)m) != HZ_SEG_LARGE,
           "with %d large blocks live, a 200 KiB block grown to 300 KiB took a mapping",
           HZ_REALLOC_MAPPINGS_MAX);
    hz_free(m != NULL ? m : c);
    hz_trim();
    char *a = hz_malloc(300 * kib), *b = hz_malloc(300 * kib); /* b right after a */
    EXPECT(a != NULL && b != NULL, "hz_malloc(300 KiB)");
    if (a == NULL || b == NULL) return NULL;
    memset(a, 5, 300 * kib);
    char *q = hz_realloc(a, 1200 * kib);
    EXPECT(q != NULL && hz_segmap_kind((uintptr_t)q) == HZ_SEG_LARGE,
           "a 300 KiB block that moved to grow to 1200 KiB is not a mapping");
    if (q == NULL) return NULL;
    char *r = hz_realloc(q, 1900 * kib);
    EXPECT(r != NULL && hz_segmap_kind((uintptr_t)r) == HZ_SEG_LARGE,
           "a mapped block grown from 1200 to 1900 KiB went back to the size classes");
    EXPECT(r == NULL || (r[0] == 5 && r[300 * kib - 1] == 5), "its bytes were lost");
    /* Grown past its mapping, the mapping took address space ahead: the next step
     * grows into it, in place and without a call. */
    hz_large_t *h = r != NULL ? hz_large_header(CORE_BLOCK(r)) : NULL;
    size_t mapped = h != NULL ? h->map_size : 0;
    EXPECT(mapped >= 1900 * kib + 1900 * kib / 4,
           "a mapping grown to 1900 KiB maps %zu KiB, no room ahead", mapped / kib);
    char *s = r != NULL ? hz_realloc(r, 2100 * kib) : NULL;
    EXPECT(s == NULL || (s == r && hz_large_header(CORE_BLOCK(s))->map_size == mapped),
           "grown from 1900 to 2100 KiB, the block moved or its mapping changed");
    if (s != NULL) r = s;
    hz_free(r != NULL ? r : q);
    hz_free(b);
    return NULL;
}
#endif

static void test_grow_to_mapping(void) {
#if !HZ_DEBUG && !HZ_HARDENED
    in_own_thread(grow_to_mapping_thread);
#endif
}

/* A class's only page is carved 4 KiB (or one block) at a time: a class that never
 * held more than n blocks touches at most one step beyond them, and a class of blocks
 * above 4 KiB touches no block it never handed out. */
static void *carve_steps_thread(void *arg) {
    (void)arg;
    static const size_t bigs[] = {5000, 30000};
    for (size_t i = 0; i < sizeof bigs / sizeof bigs[0]; i++) {
        size_t big = bigs[i];
        char *b = hz_malloc(big);
        EXPECT(b != NULL, "hz_malloc(%zu)", big);
        if (b == NULL) return NULL;
        hz_page_t *page = hz_page_of(hz_segment_of(b), CORE_BLOCK(b));
        EXPECT(hz_page_capacity(page) == 1,
               "one block of %zu bytes held: %u blocks carved from its class's only page",
               big, (unsigned)hz_page_capacity(page));
        hz_free(b);
    }
    enum { HELD = 17 };
    char *blocks[HELD];
    for (int i = 0; i < HELD; i++) {
        blocks[i] = hz_malloc(1000);
        EXPECT(blocks[i] != NULL, "hz_malloc(1000)");
        if (blocks[i] == NULL) return NULL;
    }
    hz_page_t *page = hz_page_of(hz_segment_of(blocks[0]), CORE_BLOCK(blocks[0]));
    size_t size = page->block_size, step = 4 * size > 4096 ? 4 * size : 4096;
    size_t carved = (size_t)hz_page_capacity(page) * size;
    EXPECT(carved <= HELD * size + step,
           "%d blocks of %zu bytes held: %zu bytes carved from their page, more than a "
           "step beyond them", (int)HELD, size, carved);
    for (int i = 0; i < HELD; i++) hz_free(blocks[i]);
    return NULL;
}

static void test_carve_steps(void) { in_own_thread(carve_steps_thread); }

int main(void) {
    test_classes();
    test_direct_tables();
    test_lookup();
    test_page_lengths();
    test_kept_pages();
    test_full_page_requeue();
    test_retired_span_reuse();
    test_resize_unaligned();
    test_carve_steps();
    test_grow_to_mapping();
    test_reuse_and_zero();
    test_stash();
    test_forked_heap();
    test_fork_waits_bounded();
    test_unwind_memo();
    test_sample_intervals();
    test_unwind();
    if (failures) {
        fprintf(stderr, "unit_core: %d failure(s)\n", failures);
        return 1;
    }
    printf("unit_core (%s): size classes, direct tables, lookup, page lengths, kept pages, full page requeue, retired span reuse, unaligned resize, reuse, stash, forked heap, bounded fork, sample intervals, unwind: ok\n",
           HZ_VARIANT_NAME);
    return 0;
}
