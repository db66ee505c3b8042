/* types.h - hakozuna's data structures and build-time constants.
 *
 * Memory comes from the OS in segments: HZ_SEGMENT_SIZE bytes, aligned to their size,
 * each owned by one thread heap.  A segment is cut into HZ_UNITS units of 64 KiB; a
 * page (span) is one or more consecutive units holding blocks of a single size class.
 * The segment header (first HZ_SEGMENT_HEADER bytes) keeps the page descriptors, so
 * free memory never carries metadata that purging could destroy.  Requests above
 * HZ_MEDIUM_MAX are "large": each gets its own mapping with a header at its
 * segment-aligned base.
 *
 * Every knob below may be overridden with -D (configure does so); see hakozuna(3).
 */
#ifndef HZ_TYPES_H
#define HZ_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------- tunables */
/* Blocks a thread collects before posting them to the owning thread in one atomic push. */
#ifndef HZ_REMOTE_BATCH
#define HZ_REMOTE_BATCH 64
#endif
/* Owners a thread batches remote frees for at once (power of two). */
#ifndef HZ_OUTBOX_SLOTS
#define HZ_OUTBOX_SLOTS 8
#endif
/* Freed pages are returned to the OS (madvise) after this many milliseconds... */
#ifndef HZ_PURGE_DELAY_MS
#define HZ_PURGE_DELAY_MS 50
#endif
/* ...or at once when a heap holds more than this many bytes of freed, resident pages
 * and more than it lately needed (segment.c, hz_heap_purge). */
#ifndef HZ_DIRTY_BUDGET
#define HZ_DIRTY_BUDGET 16777216
#endif
/* Bytes of freed large blocks kept mapped for reuse (process-wide). */
#ifndef HZ_LARGE_CACHE_BYTES
#define HZ_LARGE_CACHE_BYTES 33554432
#endif
/* Empty segments kept mapped (purged) for reuse (process-wide). */
#ifndef HZ_SEGMENT_CACHE
#define HZ_SEGMENT_CACHE 8
#endif
/* The knobs that may be set to 0, as values: against a literal 0 a test reads to the
 * compiler as always true or always false (-Wtype-limits), which -Werror refuses. */
static const uint64_t hz_purge_delay_ms = HZ_PURGE_DELAY_MS;
static const unsigned hz_segment_cache_slots = HZ_SEGMENT_CACHE;
/* Ask for transparent huge pages on segments (0 = leave the system default). */
#ifndef HZ_THP
#define HZ_THP 0
#endif
/* Treat the OS page size as at least this many bytes (a power of two up to 65536;
 * 0 = the kernel's): builds for testing 16 KiB and 64 KiB page kernels on 4 KiB ones. */
#ifndef HZ_SIMULATED_PAGE_SIZE
#define HZ_SIMULATED_PAGE_SIZE 0
#endif
/* Per-thread event counters (cheap, owner-written; see stats.c). */
#ifndef HZ_STATS
#define HZ_STATS 1
#endif
/* Free-list protection (guard.c): encoded links checked when followed, frees of
 * pointers that are not block starts refused, double frees caught.  0 only with
 * --disable-hardening; see hakozuna(3) for what that gives up. */
#ifndef HZ_HARDENING
#define HZ_HARDENING 1
#endif

/* ------------------------------------------------------- variant policies
 * The variants share every line of code; they differ only here.
 *   default  one inbox per heap, 8 owners batched at once.
 *   scale    many threads freeing into the same owners: the owner's inbox is split
 *            into shards chosen by the sender, senders batch for 4x as many owners
 *            at once, and each thread keeps a small stash (below) of 64 blocks per
 *            class, so neither inboxes nor outboxes become hot spots.
 *   mt       remote-free-first: a thread keeps up to 256 blocks per class that it
 *            freed for other threads in a stash and hands them out again itself from
 *            the fast path, so blocks that travel between threads are reused where
 *            they are hot in cache; only the overflow travels back to the owners.
 *   hardened the default policies plus the defences of HZ_HARDENED (guard.c): freed
 *            blocks are checked, zeroed and held in a quarantine before reuse, pages
 *            hand out their blocks in random order, and guard pages end every
 *            segment and surround every large block.
 *   debug    the default policies plus the checking layer (HZ_DEBUG, debug.c). */
#if defined(HZ_VARIANT_SCALE)
#define HZ_VARIANT_NAME "scale"
#define HZ_INBOX_SHARDS 8
#define HZ_OUTBOX_WAYS (4 * HZ_OUTBOX_SLOTS)
#define HZ_STASH_BLOCKS 64
#elif defined(HZ_VARIANT_MT)
#define HZ_VARIANT_NAME "mt"
#define HZ_INBOX_SHARDS 4
#define HZ_OUTBOX_WAYS (2 * HZ_OUTBOX_SLOTS)
#define HZ_STASH_BLOCKS 256
#elif defined(HZ_VARIANT_HARDENED)
#define HZ_VARIANT_NAME "hardened"
#define HZ_INBOX_SHARDS 1
#define HZ_OUTBOX_WAYS HZ_OUTBOX_SLOTS
#define HZ_STASH_BLOCKS 0
#define HZ_HARDENED 1
#undef HZ_HARDENING
#define HZ_HARDENING 1 /* whatever configure said */
#else
#if HZ_DEBUG
#define HZ_VARIANT_NAME "debug"
#else
#define HZ_VARIANT_NAME "default"
#endif
#define HZ_INBOX_SHARDS 1
#define HZ_OUTBOX_WAYS HZ_OUTBOX_SLOTS
#define HZ_STASH_BLOCKS 0
#endif
/* Stashed blocks are 64 B to 8 KiB: smaller ones share cache lines with the owner's
 * blocks, larger ones are few and worth returning. */
#define HZ_STASH_MAX 8192
#ifndef HZ_DEBUG
#define HZ_DEBUG 0
#endif
#ifndef HZ_HARDENED
#define HZ_HARDENED 0
#endif
/* Freed blocks a heap of the hardened variant holds back before reuse, and the bytes
 * they may hold at most (beyond them the oldest leave early: 256 blocks of 1 MiB
 * would keep 256 MiB per thread from the program). */
#define HZ_QUARANTINE 256
#define HZ_QUARANTINE_BYTES ((size_t)1 << 20)
/* A heap-profile sample of a small size is a block of its page, handed out past a
 * mark of HZ_SAMPLE_MARK bytes (prof.c), when free checks that a pointer starts a
 * block (hardening): the pointer does not, which sends its free to the slow path
 * that finds the mark, so the fast path pays nothing for it.  The checked variant's
 * layer needs the core's blocks where it put them, and without hardening nothing
 * would send the free aside: there, and for the aligned calls, a sample is a large
 * block. */
#define HZ_SAMPLE_IN_PAGE (HZ_HARDENING && !HZ_DEBUG)
#define HZ_SAMPLE_MARK 16

/* ----------------------------------------------------------- geometry */
#define HZ_SEGMENT_SHIFT 22
#define HZ_SEGMENT_SIZE ((size_t)1 << HZ_SEGMENT_SHIFT)
#define HZ_SEGMENT_MASK (HZ_SEGMENT_SIZE - 1)
#define HZ_UNIT_SHIFT 16
#define HZ_UNIT_SIZE ((size_t)1 << HZ_UNIT_SHIFT)
#define HZ_UNITS (HZ_SEGMENT_SIZE / HZ_UNIT_SIZE) /* 64: one bit each in a uint64_t */
#define HZ_SEGMENT_HEADER 16384                   /* page 0 starts here (4 KiB aligned) */
/* Segments are aligned to their size, so the unit -> page tables of all segments
 * would sit at one offset from a 4 MiB boundary and compete for the same few cache
 * sets: with a few hundred MiB live, free missed on them as often as on the block.
 * Each segment uses the slice of its header's unit_map picked by the address bits
 * above the segment's (its colour), so the slices of neighbouring segments fall in
 * different sets, and the lookup is still one shift, one mask and one load. */
#define HZ_SEGMENT_COLOURS 16

/* The cache line of the processors hakozuna is tuned for. */
#define HZ_CACHE_LINE 64

/* Address bits covered by the segment map: pointers above are never ours. */
#if defined(__x86_64__)
#define HZ_VA_BITS 47
#else
#define HZ_VA_BITS 48
#endif
/* The segment map has two levels: a static top table of leaf pointers, and leaves of
 * one word per segment (512 KiB each, covering 256 GiB of address space).  Unused
 * top entries point to a shared all-zero leaf.  The leaves are normally consecutive
 * parts of one reservation, which is then also a flat array of HZ_SEGMAP_ENTRIES
 * words (segment.c). */
#define HZ_SEGMAP_ENTRIES ((size_t)1 << (HZ_VA_BITS - HZ_SEGMENT_SHIFT))
#define HZ_SEGMAP_LEAF_BITS 16
#define HZ_SEGMAP_LEAF_ENTRIES ((size_t)1 << HZ_SEGMAP_LEAF_BITS)
#define HZ_SEGMAP_TOP_SHIFT (HZ_SEGMENT_SHIFT + HZ_SEGMAP_LEAF_BITS)
#define HZ_SEGMAP_TOP_ENTRIES ((size_t)1 << (HZ_VA_BITS - HZ_SEGMAP_TOP_SHIFT))

/* ---------------------------------------------------------- size classes */
#define HZ_ALIGNMENT 16
#define HZ_DIRECT_MAX 2048                     /* sizes served by heap->direct[] */
#define HZ_DIRECT_SLOTS (HZ_DIRECT_MAX / 16 + 1)
/* ...and by heap->direct_mid[], in steps of 256 B, which every class between them
 * is a multiple of. */
#define HZ_DIRECT_MID_MAX 65536
#define HZ_DIRECT_MID_SLOTS (HZ_DIRECT_MID_MAX / 256 + 1)
#define HZ_MEDIUM_MAX ((size_t)2 << 20)        /* larger requests are "large" */
#define HZ_ALONE_MIN (256u << 10)              /* a block above it has a page to itself */
/* Live large blocks beyond which a block realloc grows past HZ_ALONE_MIN stays in the
 * size classes instead of taking a mapping: the kernel's limit on mappings per
 * process (vm.max_map_count, 65,530 by default) is the program's too. */
#define HZ_REALLOC_MAPPINGS_MAX 4096
#define HZ_CLASSES 121                         /* class 0 unused; 1..120 */
#define HZ_ALIGNED_CLASS_MAX HZ_MEDIUM_MAX     /* larger alignments go to the large path */

/* Segment kinds.  A small segment's map entry is its owner heap's address, so that
 * free tells "a block of this thread's heap" from everything else with one compare;
 * other entries are HZ_SEG_NONE or HZ_SEG_LARGE (never a heap address). */
enum { HZ_SEG_NONE = 0, HZ_SEG_SMALL = 1, HZ_SEG_LARGE = 2 };

/* ----------------------------------------------------------------- pages */
typedef struct hz_page {
    void *free;          /* blocks ready to hand out, most recently freed first */
    int32_t used;        /* blocks handed out and not yet back on a list, less an
                            offset while unlinked from its queue because no free
                            block was left (page.c, full_offset): one test in free
                            catches both "now empty" and "full page, enough back" */
    uint32_t block_size;
    uint64_t carved_rank;/* capacity (blocks carved from the span so far) times the
                            rank step: below it exactly the ranks of carved blocks */
    uint8_t cls;
    uint8_t free_is_zero;/* blocks on free are zero past their link word */
    uint8_t zero_span;   /* span memory was untouched when the page was made */
    uint8_t units;       /* span length in units */
    uint8_t first_unit;
    uint8_t in_queue;
    uint16_t reserved;   /* blocks the span can hold (at most 4096) */
    char *start;         /* first block */
    struct hz_page *next, *prev; /* class queue */
    uint64_t block_mul;  /* 2^64 / block_size, rounded up: see hz_block_rank */
} hz_page_t;

struct hz_heap;

/* Other threads' blocks this thread freed, kept for its own reuse (stash.c). */
typedef struct hz_stash {
    hz_page_t list;  /* owns no memory: the fast path pops its `free` and bumps `used` */
    uint32_t held;   /* blocks kept, less those popped since `used` was taken in */
} hz_stash_t;

typedef struct hz_segment {
    uintptr_t list_end;          /* always 0: where the segment's free lists end (freelist.h) */
    struct hz_heap *heap;        /* owner; stable while any block in it is live */
    uint64_t free_units;         /* bit i: unit i holds no page */
    uint64_t dirty_units;        /* bit i: unit i may hold non-zero data */
    uint64_t used_units;         /* bit i: unit i held a page since the segment was taken */
    uint64_t purge_candidates;   /* free, unpurged units seen at the last purge epoch */
    uint64_t retired_starts;     /* bit i: pages[i] is a span its class gave back, on
                                    the class's `retired` list (segment.c) */
    unsigned max_run;            /* longest run of free units (usable for multi-unit pages) */
    unsigned committed_units;    /* units 0 .. committed_units-1 are readable and writable;
                                    the rest of the segment is reserved address space */
    struct hz_segment *next, *prev; /* heap's segment list (with free units first) */
    uint64_t cached_ms;          /* in the cache of empty segments: when it came there
                                    resident (0: purged), HZ_STAMP_PURGING while purged */
    /* unit -> size class of the page covering it, for threads freeing its blocks: in
     * a line of its own, since the page descriptor's is the owner's busiest. */
    uint8_t unit_class[HZ_UNITS];
    /* Indexed by a page's first unit; a line each, so that free, which reads a
     * descriptor's last word (block_mul), touches one line and not two. */
    _Alignas(HZ_CACHE_LINE) hz_page_t pages[HZ_UNITS];
    /* unit -> page covering it (hz_empty_page if none), in the slice of the
     * segment's colour (hz_unit_pages); the other slices stay untouched. */
    hz_page_t *unit_map[HZ_SEGMENT_COLOURS * HZ_UNITS];
} hz_segment_t;

_Static_assert(sizeof(hz_segment_t) <= HZ_SEGMENT_HEADER, "segment header too big");
_Static_assert(sizeof(hz_page_t) <= HZ_CACHE_LINE, "page descriptor should fit a cache line");

typedef struct hz_page_queue {
    hz_page_t *first, *last; /* pages with free blocks, or not yet known to be full */
    uint32_t pages;          /* every page of the class the heap holds, full ones too */
    uint32_t retired_ms;     /* 1 + when the class last retired a page (ms, low bits) */
    hz_page_t *retired;      /* spans the class gave back and nothing took since, last
                                first: where its next page goes (segment.c) */
} hz_page_queue_t;

/* Remote frees travel as arrays of pointers, not as lists linked through the blocks:
 * the owner then reads the addresses from one buffer and never waits for one freed
 * block's line to learn where the next one is.  Batches are metadata, kept by the
 * heap that fills them and handed back to it once their owner took the blocks in. */
typedef struct hz_batch {
    struct hz_batch *next;  /* on an inbox, or on its home's spare or returned list */
    struct hz_heap *home;   /* the heap that fills it */
    uint32_t count;
    void *blocks[HZ_REMOTE_BATCH];
} hz_batch_t;

/* Remote frees waiting to be posted to one owner. */
typedef struct hz_outbox {
    struct hz_heap *dest; /* the owner of the open batch; NULL while there is none */
    hz_batch_t *batch;    /* NULL until the first block, and after a post */
} hz_outbox_t;


/* Counters written only by the owning thread (relaxed atomics so readers may race). */
typedef _Atomic uint64_t hz_counter_t;
typedef struct hz_heap_stats {
    hz_counter_t mallocs[HZ_CLASSES];
    hz_counter_t frees[HZ_CLASSES];
    hz_counter_t remote_sent;
    hz_counter_t remote_recv;
    hz_counter_t remote_batches;
    hz_counter_t refills;        /* trips through the allocation slow path */
    hz_counter_t pages_made;
    hz_counter_t pages_retired;
} hz_heap_stats_t;

/* OWNED: a thread's.  ABANDONED: its thread exited; consistent, kept up by heap.c and
 * adopted by the next new thread.  ORPHANED: its thread vanished in a fork (it may
 * have been mid-update): never touched again.  SHARED: the locked heap of threads
 * past their own heap's destructor. */
enum { HZ_HEAP_OWNED = 1, HZ_HEAP_ABANDONED = 2, HZ_HEAP_ORPHANED = 3, HZ_HEAP_SHARED = 4 };

/* The stack words a walk of the unwinder (unwind.c) read, so that the next walk from
 * the same place can check them instead of walking: each word's address and value.
 * A memo serves one thread: a heap that passes to another thread forgets its memo
 * (hz_heap_acquire), whose words may lie in a stack that is gone. */
#define HZ_UNWIND_READS 72
#define HZ_UNWIND_FRAMES 34 /* a profile's frames (hakozuna_prof.h) and two of its own */
typedef struct hz_unwind_memo {
    uint64_t pc, sp, fp;     /* where the walk began (pc 0: none); fp counts if fp_read */
    uint32_t reads;
    bool fp_read;
    uint32_t trace;          /* the heap profile's slot for that stack (prof.c) */
    struct {
        uint64_t at, val;
    } read[HZ_UNWIND_READS];
    void *frames[HZ_UNWIND_FRAMES]; /* room for a walk that does not match (prof.c) */
} hz_unwind_memo_t;

/* A heap starts with its counters, which end a page of their own (heap.c): with stats
 * on, that page is a thread slot of the shared-memory segment (shm.c), where readers
 * see the counters as the owner bumps them.  The 64 bytes before the heap are the
 * slot's header (struct hz_shm_thread). */
typedef struct hz_heap {
    hz_heap_stats_t stats;
    /* Bytes to allocate before the next look at the heap profile (prof.c): the fast
     * path subtracts every request's size and leaves when it would go below zero. */
    _Atomic uint64_t sample_left;
    hz_page_t *direct[HZ_DIRECT_SLOTS]; /* (size+15)/16 -> page to allocate from */
    hz_page_t *direct_mid[HZ_DIRECT_MID_SLOTS]; /* (size+255)/256, above HZ_DIRECT_MAX */
    hz_page_t *current[HZ_CLASSES];     /* class -> page to allocate from */
    hz_page_queue_t queues[HZ_CLASSES]; /* pages with free blocks, current first */
    hz_outbox_t outbox[HZ_OUTBOX_WAYS];
#if HZ_STASH_BLOCKS
    hz_stash_t stash[HZ_CLASSES];
#endif
#if HZ_HARDENED
    void *quarantine[HZ_QUARANTINE];    /* freed, zeroed, not yet reusable (FIFO) */
    uint32_t quarantine_next;           /* puts so far (wraps) */
    uint32_t quarantine_oldest;         /* the put whose block leaves next, if held */
    size_t quarantine_bytes;            /* the blocks' sizes */
    uint64_t rng;                       /* allocation order within new blocks */
#endif
    hz_segment_t *segments;             /* segments with free units come first */
    size_t dirty_bytes;                 /* freed page memory not yet purged */
    size_t used_bytes;                  /* memory in pages */
    /* What the heap lately needed, over two windows of HZ_PURGE_DELAY_MS (the one
     * that began at window_ms, and the one before): see hz_heap_purge. */
    size_t used_peak[2];                /* most used_bytes */
    size_t reused[2];                   /* bytes of units taken again after a page left them */
    uint64_t window_ms;
    uint64_t purge_at_ms;               /* next purge epoch, 0 when none is due */
    _Atomic int state;                  /* read by threads that free into this heap */
    int busy;                           /* owner inside a slow path (fork checks it) */
    bool forked;                        /* kept by a fork child's thread (heap.c) */
    size_t listed_dirty;                /* dirty_bytes counted while on the abandoned list */
    long owner_tid;                     /* the owning thread's kernel id (heap.c) */
    struct hz_heap *next_all;           /* registry of every heap */
    struct hz_heap *next_abandoned;
    hz_batch_t *spare;                  /* empty batches for the outboxes */
    /* Written by other threads, so on lines of their own: batches of blocks they
     * freed; blocks freed one at a time by threads without a heap (linked through
     * the blocks); and this heap's batches that their owners have emptied. */
    struct {
        _Alignas(HZ_CACHE_LINE) _Atomic(hz_batch_t *) head;
    } inbox[HZ_INBOX_SHARDS];
    _Alignas(HZ_CACHE_LINE) _Atomic(void *) loose;
    _Alignas(HZ_CACHE_LINE) _Atomic(hz_batch_t *) returned;
    /* Last, on a line of their own: what every heap-profile sample reads, its
     * generator, the heap's name in the traces and the memo's first words (and in
     * the padding, a slow path's count). */
    _Alignas(HZ_CACHE_LINE) uint64_t sample_rng; /* the sampler's xorshift state, 0 until seeded */
    uint32_t shm_slot;                  /* 1 + its thread slot in the segment, 0: none */
    bool sampling;                      /* taking a heap-profile sample (prof.c) */
    uint8_t page_events;                /* hz_page_free_event's calls with stats on (page.c) */
    hz_unwind_memo_t stack_memo;
} hz_heap_t;

/* Header of a large block, at (ptr - 1) rounded down to a segment boundary. */
typedef struct hz_large {
    uint64_t magic;
    char *base;          /* start of the mapping */
    size_t map_size;     /* bytes mapped */
    void *user;          /* the pointer handed out */
    size_t usable;       /* bytes from user to the block's end (the mapping may go on) */
    uint32_t sample;     /* heap profile (prof.c): its trace's slot + 1, 0 if not sampled */
    uint32_t has_room;   /* large.c: listed with room past usable (its owner's to clear) */
    size_t sample_size;  /* the size requested when it was sampled */
} hz_large_t;
#define HZ_LARGE_MAGIC 0x687a6c617267650aULL
#define HZ_LARGE_HEADER 64
_Static_assert(sizeof(hz_large_t) <= HZ_LARGE_HEADER, "large header too big");

#endif /* HZ_TYPES_H */
