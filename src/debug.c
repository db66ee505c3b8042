/* debug.c - the checked variant: a layer between the public names and the core that
 * wraps every block so heap errors stop the program at the call that reveals them.
 *
 * Layout of a live block (the core block b is at least size + 24 bytes):
 *
 *     b                       user - 16     user                 user + size      b + bs
 *     | (aligned: padding)   | magic | size |  the caller's bytes |  canary ...    |
 *
 * user is b + 16, or b + alignment for alignments above 16.  The first header word is
 * LIVE_MAGIC ^ user; the second holds the requested size (low 32 bits) and the
 * alignment asked for (high 32 bits; 0 for malloc, calloc and realloc).  Everything
 * after the caller's bytes is canary (the first CHECK_CAP bytes of it, at least 8).
 *
 * A freed block, whatever its layout was, first waits in a quarantine (a ring of
 * QUARANTINE_SLOTS blocks, QUARANTINE_BYTES at most) with every byte the core does
 * not need checkable:
 *
 *     b                b + 8          b + 16
 *     | quarantine tag | freed mark   | poison (the first CHECK_CAP bytes) ...
 *
 * When it leaves the quarantine (pushed out by a later free, or at exit) all of that
 * is verified, so a write to any byte of a freed block, its header included, stops
 * the program however the block sat in its page.  The core then writes its link over
 * the tag; the mark and the poison stay, and are checked again when the core hands
 * the block out.  A link overwritten after that is caught when the core reads it,
 * before it could follow it (check_next).
 *
 * The freed mark names the block's address, its size and the page's lifetime, so a
 * mark left in memory that has since served another size class (or another lifetime
 * of the same page) never matches: only blocks freed through this layer in the
 * page's current lifetime have their poison checked when the core hands them out.
 * A page's lifetime is an epoch per 64 KiB unit kept in the unused tail of the
 * segment header; it moves on whenever the first block of a page is handed out
 * while no other block of the page is (always so for a new page).  That block is
 * not checked then (the quarantine has checked it on its way back).
 *
 * Errors print one line with write(2) and abort; so does every pointer given to
 * free, realloc or malloc_usable_size that is not a block hakozuna handed out,
 * another allocator's and a static buffer's alike.
 *
 * Under valgrind every block is described to memcheck: the caller's bytes are a
 * malloc-like block, header and canary are no-access while it is live, and a freed
 * block is no-access except the core's link word.  Errors are muted while the core
 * runs, since it may write link words into memory an earlier block left no-access;
 * when a page's lifetime begins, its blocks' headers are described readable again.
 */
#include <errno.h>
#include <stdlib.h>

#include "entry.h"

#if HZ_DEBUG

/* A block is handed out by the thread that owns its page, or under the lock of the
 * exit heap (the epochs and the pages' `used` counts are read and written so only;
 * see page_lock). */
#if HZ_STASH_BLOCKS
#error "the checked variant needs the default policies: no per-thread stash"
#endif

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>) && __has_include(<valgrind/valgrind.h>)
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#define DBG_VALGRIND 1
#endif
#endif
#ifndef DBG_VALGRIND
#define DBG_VALGRIND 0
#endif

/* ------------------------------------------------------------------ layout */
#define HEADER 16
#define MIN_CANARY 8
#define OVERHEAD (HEADER + MIN_CANARY)
#define CHECK_CAP ((size_t)64 << 10) /* poison and canary bytes written and checked */
#define POISON_BYTE 0xdf
#define CANARY_BYTE 0xcb
#define LIVE_MAGIC 0x687a2d6c6976652aULL        /* "hz-live*" */
#define FREED_MAGIC 0x687a2d667265652aULL       /* "hz-free*" */
#define FREED_LARGE_MAGIC 0x687a2d4c4652452aULL /* "hz-LFRE*" */
typedef uint64_t __attribute__((may_alias, aligned(1))) word_t;
#define WORD(p) (*(word_t *)(void *)(p))

/* Epochs of a segment's units (see small_mark), in the tail of its header, which the
 * segment descriptor leaves unused. */
#define EPOCH_TABLE (HZ_SEGMENT_HEADER - HZ_UNITS * sizeof(uint32_t))
_Static_assert(sizeof(hz_segment_t) <= EPOCH_TABLE, "no room for the epochs in the segment header");

static inline _Atomic uint32_t *unit_epoch(hz_segment_t *seg, unsigned unit) {
    return (_Atomic uint32_t *)(void *)((char *)seg + EPOCH_TABLE) + unit;
}

/* ---------------------------------------------------------------- valgrind */
#if DBG_VALGRIND
static _Atomic int vg_state; /* 0: not asked yet, 1: native, 2: under valgrind */

static bool vg_slow(void) {
    int s = RUNNING_ON_VALGRIND ? 2 : 1;
    atomic_store_explicit(&vg_state, s, memory_order_relaxed);
    return s == 2;
}
HZ_INLINE bool vg_on(void) {
    int s = atomic_load_explicit(&vg_state, memory_order_relaxed);
    return hz_unlikely(s != 1) && (s == 2 || vg_slow());
}
#define VG(stmt) \
    do { \
        if (vg_on()) { stmt; } \
    } while (0)
#define VG_DEFINED(p, n) VG((void)VALGRIND_MAKE_MEM_DEFINED((p), (n)))
#define VG_NOACCESS(p, n) VG((void)VALGRIND_MAKE_MEM_NOACCESS((p), (n)))
#define VG_MALLOCLIKE(p, n, z) VG(VALGRIND_MALLOCLIKE_BLOCK((p), (n), 0, (z)))
#define VG_FREELIKE(p) VG(VALGRIND_FREELIKE_BLOCK((p), 0))
#define VG_QUIET() VG(VALGRIND_DISABLE_ERROR_REPORTING)
#define VG_LOUD() VG(VALGRIND_ENABLE_ERROR_REPORTING)
#else
#define VG_DEFINED(p, n) ((void)0)
#define VG_NOACCESS(p, n) ((void)0)
#define VG_MALLOCLIKE(p, n, z) ((void)0)
#define VG_FREELIKE(p) ((void)0)
#define VG_QUIET() ((void)0)
#define VG_LOUD() ((void)0)
#endif

/* ----------------------------------------------------------------- reports */
/* " (size class N B)", or "none" when the pointer is in no block at all. */
static void put_class(hz_line_t *l, size_t bs) {
    hz_line_str(l, " (size class ");
    if (bs == 0) {
        hz_line_str(l, "none)");
        return;
    }
    hz_line_u64(l, bs);
    hz_line_str(l, " B)");
}

static void emit(hz_line_t *l) { hz_os_write_err(hz_line_end(l)); }

static HZ_COLD __attribute__((noreturn)) void die(hz_line_t *l) {
    emit(l);
    abort();
}

enum { OP_FREE, OP_REALLOC, OP_USABLE };
static const char *const op_name[] = {"free", "realloc", "malloc_usable_size"};

static HZ_COLD __attribute__((noreturn)) void report_invalid(int op, const void *p, size_t bs,
                                                             const char *why) {
    hz_line_t l = {.n = 0};
    hz_line_str(&l, "hakozuna: ");
    hz_line_str(&l, op_name[op]);
    hz_line_str(&l, " of invalid pointer ");
    hz_line_hex(&l, (uintptr_t)p);
    hz_line_str(&l, ": ");
    hz_line_str(&l, why);
    put_class(&l, bs);
    die(&l);
}

static HZ_COLD __attribute__((noreturn)) void report_freed(int op, const void *p, size_t bs) {
    hz_line_t l = {.n = 0};
    hz_line_str(&l, "hakozuna: ");
    if (op == OP_FREE) {
        hz_line_str(&l, "double free of ");
    } else {
        hz_line_str(&l, op_name[op]);
        hz_line_str(&l, " of freed pointer (use after free) ");
    }
    hz_line_hex(&l, (uintptr_t)p);
    put_class(&l, bs);
    die(&l);
}

static HZ_COLD __attribute__((noreturn)) void report_overrun(const char *user, size_t size,
                                                             size_t at, size_t bs, int op) {
    hz_line_t l = {.n = 0};
    hz_line_str(&l, "hakozuna: buffer overrun past the ");
    hz_line_u64(&l, size);
    hz_line_str(&l, " B of ");
    hz_line_hex(&l, (uintptr_t)user);
    hz_line_str(&l, ": byte +");
    hz_line_u64(&l, at);
    hz_line_str(&l, " changed, found at ");
    hz_line_str(&l, op_name[op]);
    put_class(&l, bs);
    die(&l);
}

static HZ_COLD __attribute__((noreturn)) void report_uaf(const char *b, size_t at, size_t bs) {
    hz_line_t l = {.n = 0};
    hz_line_str(&l, "hakozuna: write to freed memory at ");
    hz_line_hex(&l, (uintptr_t)(b + at));
    hz_line_str(&l, at >= HEADER ? " (byte +" : " (header byte -");
    hz_line_u64(&l, at >= HEADER ? at - HEADER : HEADER - at);
    hz_line_str(&l, " of the block freed at ");
    hz_line_hex(&l, (uintptr_t)(b + HEADER));
    hz_line_str(&l, ")");
    put_class(&l, bs);
    die(&l);
}

/* A sized or aligned free whose size or alignment is not the block's. */
static HZ_COLD __attribute__((noreturn)) void report_mismatch(bool align, const void *p,
                                                              size_t given, size_t recorded,
                                                              size_t bs) {
    hz_line_t l = {.n = 0};
    hz_line_str(&l, align ? "hakozuna: aligned free alignment mismatch: "
                    : "hakozuna: sized free size mismatch: ");
    hz_line_hex(&l, (uintptr_t)p);
    hz_line_str(&l, align ? " freed with alignment " : " freed with size ");
    hz_line_u64(&l, given);
    if (align && recorded == 0) {
        hz_line_str(&l, ", allocated without alignment (malloc)");
    } else {
        hz_line_str(&l, align ? ", allocated with alignment " : ", allocated with size ");
        hz_line_u64(&l, recorded);
    }
    put_class(&l, bs);
    die(&l);
}

/* ------------------------------------------------------------------ blocks */
/* Alignment in the header's 32 bits: the value itself, or 2^31 | log2 for the
 * alignments of 2^32 and above (which are never powers of two in that form). */
static uint32_t align_encode(size_t a) {
    if (a <= ((size_t)1 << 31)) return (uint32_t)a;
    return 0x80000000u | (uint32_t)__builtin_ctzll(a);
}
static size_t align_decode(uint32_t v) {
    if ((v & (v - 1)) == 0) return v;
    return (size_t)1 << (v & 63);
}

static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Offset of the first byte in p[0..n) differing from `byte`, or n. */
static size_t first_diff(const unsigned char *p, size_t n, unsigned char byte) {
    size_t i = 0;
    const uint64_t pat = 0x0101010101010101ULL * byte;
    for (; i < n && ((uintptr_t)(p + i) & 7) != 0; i++)
        if (p[i] != byte) return i;
    for (; i + 64 <= n; i += 64) { /* one branch per 64 bytes */
        const word_t *w = (const word_t *)(const void *)(p + i);
        uint64_t acc = 0;
        for (int k = 0; k < 8; k++) acc |= w[k] ^ pat;
        if (acc != 0) break;
    }
    for (; i + 8 <= n; i += 8)
        if (*(const word_t *)(const void *)(p + i) != pat) break;
    for (; i < n; i++)
        if (p[i] != byte) return i;
    return n;
}

/* The freed mark of block b of a small page: b, the block size, and the page's
 * lifetime, which is its first unit with that unit's epoch (block sizes are below
 * 2^24, units below 2^8). */
static uint64_t small_mark(hz_segment_t *seg, const hz_page_t *page, const char *b) {
    uint32_t epoch = atomic_load_explicit(unit_epoch(seg, page->first_unit), memory_order_relaxed);
    return FREED_MAGIC ^ (uint64_t)(uintptr_t)b ^
           ((uint64_t)epoch << 32 | (uint64_t)page->first_unit << 24 | page->block_size);
}
_Static_assert(HZ_MEDIUM_MAX < ((size_t)1 << 24) && HZ_UNITS <= 256, "freed mark fields overlap");
static uint64_t large_mark(const char *b, size_t bs) {
    return FREED_LARGE_MAGIC ^ (uint64_t)(uintptr_t)b ^ (uint64_t)bs;
}

/* A live block, as found from its user pointer. */
typedef struct {
    char *b;        /* core block */
    char *user;
    size_t bs;      /* core block size */
    size_t size;    /* requested */
    size_t align;   /* requested alignment, 0 for malloc */
    uint64_t mark;  /* freed mark it gets when freed */
    bool large;
} blk_t;

/* Recently freed large blocks: their mappings are gone or cached, so a second free
 * finds no header and would read as foreign. */
#define FREED_LARGE_SLOTS 256
static _Atomic uintptr_t freed_large_ptr[FREED_LARGE_SLOTS];
static _Atomic size_t freed_large_bs[FREED_LARGE_SLOTS];
static _Atomic unsigned freed_large_next;

static void freed_large_note(const void *user, size_t bs) {
    unsigned i = atomic_fetch_add_explicit(&freed_large_next, 1, memory_order_relaxed);
    i %= FREED_LARGE_SLOTS;
    atomic_store_explicit(&freed_large_bs[i], bs, memory_order_relaxed);
    atomic_store_explicit(&freed_large_ptr[i], (uintptr_t)user, memory_order_release);
}

static size_t freed_large_find(const void *user) {
    for (unsigned i = 0; i < FREED_LARGE_SLOTS; i++)
        if (atomic_load_explicit(&freed_large_ptr[i], memory_order_acquire) == (uintptr_t)user)
            return atomic_load_explicit(&freed_large_bs[i], memory_order_relaxed);
    return 0;
}

/* The large block whose mapping holds p (its header is at the segment boundary at or
 * below p, at most this many segments down), or NULL. */
#define LARGE_SCAN_SEGMENTS 1024
static hz_large_t *large_containing(const void *p) {
    uintptr_t s = (uintptr_t)p & ~(uintptr_t)HZ_SEGMENT_MASK;
    for (unsigned i = 0; i < LARGE_SCAN_SEGMENTS; i++, s -= HZ_SEGMENT_SIZE) {
        unsigned kind = hz_segmap_kind(s);
        if (kind == HZ_SEG_SMALL) return NULL;
        if (kind == HZ_SEG_LARGE) {
            hz_large_t *h = (hz_large_t *)s;
            if (h->magic == HZ_LARGE_MAGIC && (const char *)p >= h->base &&
                (const char *)p < h->base + h->map_size)
                return h;
            return NULL;
        }
        if (s < HZ_SEGMENT_SIZE) break;
    }
    return NULL;
}

/* Read and check the header at user - 16 of a block at core block b of bs bytes.
 * Fills d and returns true when it is a live block handed out at user. */
static bool header_ok(char *b, char *user, size_t bs, bool large, blk_t *d) {
    uint64_t *h = (uint64_t *)(void *)(user - HEADER);
    VG_DEFINED(h, HEADER);
    uint64_t w0 = h[0], w1 = h[1];
    if (w0 != (LIVE_MAGIC ^ (uint64_t)(uintptr_t)user)) return false;
    size_t align = align_decode((uint32_t)(w1 >> 32));
    size_t off = align > HEADER ? align : HEADER;
    if ((size_t)(user - b) != off || bs < off + MIN_CANARY) return false;
    size_t size = (uint32_t)w1;
    if (size > bs - off - MIN_CANARY) return false;
    /* A large block's size may exceed 32 bits: its slack is below 2^32, so the high
     * bits are those that leave less than 2^32 bytes of canary. */
    if (large) size += (bs - off - MIN_CANARY - size) & ~(size_t)0xffffffffu;
    d->b = b;
    d->user = user;
    d->bs = bs;
    d->size = size;
    d->align = align;
    d->large = large;
    return true;
}

static void header_hide(const blk_t *d) { VG_NOACCESS(d->user - HEADER, HEADER); }

/* Find the live block handed out at p; aborts for every pointer that is not one. */
static void blk_find(void *p, blk_t *d, int op) {
    uintptr_t a = (uintptr_t)p;
    if (hz_segmap_kind(a) == HZ_SEG_SMALL) {
        hz_segment_t *seg = hz_segment_of(p);
        hz_page_t *page = hz_page_of(seg, p);
        if (page == &hz_empty_page) report_invalid(op, p, 0, "in a free span");
        size_t bs = page->block_size;
        char *start = page->start;
        if ((a & (HZ_ALIGNMENT - 1)) != 0 || (char *)p < start + HEADER)
            report_invalid(op, p, bs, "not a block hakozuna handed out");
        size_t idx = (size_t)((char *)p - start) / bs;
        if (idx >= page->reserved) report_invalid(op, p, bs, "not a block hakozuna handed out");
        char *b = start + idx * bs;
        size_t off = (size_t)((char *)p - b);
        if (off >= HEADER && header_ok(b, p, bs, false, d)) {
            d->mark = small_mark(seg, page, b);
            return;
        }
        if (off >= HEADER && (off & (off - 1)) == 0) {
            VG_DEFINED(b + 8, 8);
            if (WORD(b + 8) == small_mark(seg, page, b)) report_freed(op, p, bs);
        }
        report_invalid(op, p, bs, "not a block hakozuna handed out");
    }
    /* Large: the core block starts 16 bytes below p, or `alignment` bytes below. */
    if ((a & (HZ_ALIGNMENT - 1)) == 0 && a > HEADER) {
        hz_large_t *h = hz_large_header((char *)p - HEADER);
        size_t off = HEADER;
        for (size_t al = (size_t)2 * HZ_ALIGNMENT; h == NULL && al != 0 && al < a && (a & (al - 1)) == 0;
             al <<= 1) {
            h = hz_large_header((char *)p - al);
            off = al;
        }
        if (h != NULL) {
            char *b = (char *)p - off;
            if (header_ok(b, p, h->usable, true, d)) {
                d->mark = large_mark(b, h->usable);
                return;
            }
            report_invalid(op, p, h->usable, "not a block hakozuna handed out");
        }
    }
    hz_large_t *h = large_containing(p);
    if (h != NULL) report_invalid(op, p, h->usable, "inside a large block");
    size_t bs = freed_large_find(p);
    if (bs != 0) report_freed(op, p, bs);
    report_invalid(op, p, 0, "not hakozuna memory");
}

/* ---------------------------------------------------------------- quarantine */
/* Freed blocks wait here before the core may hand them out again: a ring of slots
 * that a free swaps its block into, taking out the one put there a ring ago; and
 * while the bytes held exceed QUARANTINE_BYTES, the oldest blocks leave too, from
 * quarantine_oldest on (a count of puts, like quarantine_next; the slots between
 * the two hold the blocks of the last puts, or 0 where one left early).  Large
 * blocks go back at once (their mappings are cached or unmapped). */
#define QUARANTINE_SLOTS 4096
#define QUARANTINE_BYTES ((size_t)32 << 20)
#define QUARANTINE_TAG 0x687a2d7175617274ULL /* "hz-quart" */
static _Atomic uintptr_t quarantine[QUARANTINE_SLOTS];
static _Atomic unsigned quarantine_next;
static _Atomic unsigned quarantine_oldest;
static _Atomic size_t quarantine_bytes;

static uint64_t quarantine_tag(const char *b) { return QUARANTINE_TAG ^ (uint64_t)(uintptr_t)b; }

/* The first byte of the 8 at p that differs from the word w (little-endian). */
static size_t word_diff(const char *p, uint64_t w) {
    uint64_t x = WORD(p) ^ w;
    return x == 0 ? 8 : (size_t)__builtin_ctzll(x) / 8;
}

/* Block b of a small page leaves the quarantine: every byte its free wrote must be
 * there still; then the core has it back. */
static void quarantine_release(char *b) {
    hz_segment_t *seg = hz_segment_of(b);
    hz_page_t *page = hz_page_of(seg, b);
    size_t bs = page->block_size;
    size_t checked = min_sz(bs - HEADER, CHECK_CAP);
    VG_DEFINED(b, HEADER + checked);
    size_t at = word_diff(b, quarantine_tag(b));
    if (at == 8) at = 8 + word_diff(b + 8, small_mark(seg, page, b));
    if (at == HEADER) at = HEADER + first_diff((unsigned char *)b + HEADER, checked, POISON_BYTE);
    if (at != HEADER + checked) report_uaf(b, at, bs);
    atomic_fetch_sub_explicit(&quarantine_bytes, bs, memory_order_relaxed);
    /* The header's two words stay readable: the block's link, and the word that the
     * owner of a block freed by another thread reads for a mark (freelist.h). */
    VG_NOACCESS(b + HEADER, bs - HEADER);
    VG_QUIET();
    hz_free_fast(b);
    VG_LOUD();
}

static char *quarantine_swap(uintptr_t b) {
    unsigned i = atomic_fetch_add_explicit(&quarantine_next, 1, memory_order_relaxed);
    return (char *)atomic_exchange_explicit(&quarantine[i % QUARANTINE_SLOTS], b,
                                            memory_order_acq_rel);
}

/* The oldest block still held leaves (false when none is left).  The put counts
 * wrap around; their differences do not. */
static bool quarantine_evict_oldest(void) {
    for (;;) {
        unsigned next = atomic_load_explicit(&quarantine_next, memory_order_relaxed);
        unsigned seen = atomic_load_explicit(&quarantine_oldest, memory_order_relaxed);
        unsigned at = next - seen > QUARANTINE_SLOTS ? next - QUARANTINE_SLOTS : seen;
        if (at == next) return false;
        if (!atomic_compare_exchange_weak_explicit(&quarantine_oldest, &seen, at + 1,
                                                   memory_order_relaxed, memory_order_relaxed))
            continue;
        char *old = (char *)atomic_exchange_explicit(&quarantine[at % QUARANTINE_SLOTS], 0,
                                                     memory_order_acq_rel);
        if (old != NULL) {
            quarantine_release(old);
            return true;
        }
    }
}

static void quarantine_put(char *b, size_t bs) {
    WORD(b) = quarantine_tag(b);
    VG_NOACCESS(b, bs);
    atomic_fetch_add_explicit(&quarantine_bytes, bs, memory_order_relaxed);
    char *old = quarantine_swap((uintptr_t)b);
    if (old != NULL) quarantine_release(old);
    while (atomic_load_explicit(&quarantine_bytes, memory_order_relaxed) > QUARANTINE_BYTES &&
           quarantine_evict_oldest()) {
    }
}

/* Every block in the quarantine leaves it, checked; true if there was any. */
static bool quarantine_empty_out(void) {
    bool any = false;
    for (unsigned i = 0; i < QUARANTINE_SLOTS; i++) {
        char *b = (char *)atomic_exchange_explicit(&quarantine[i], 0, memory_order_acq_rel);
        if (b != NULL) {
            quarantine_release(b);
            any = true;
        }
    }
    return any;
}

/* malloc_trim: the quarantine's blocks go back to the core (checked) before it gives
 * back what it holds freed: a program that trims wants its freed memory back. */
int hz_debug_trim(void) {
    bool any = quarantine_empty_out();
    return hz_trim_impl() || any;
}

/* At exit, the blocks still in quarantine are checked too. */
static __attribute__((destructor)) void quarantine_drain(void) { (void)quarantine_empty_out(); }

/* ---------------------------------------------------------------- handing out */
/* The core just took b off its page's free list and read b's first word as the
 * next free block: a write over that link shows here, before the core follows it. */
static void check_next(const hz_page_t *page, const char *b) {
    uintptr_t next = (uintptr_t)page->free, start = (uintptr_t)page->start;
    if (hz_list_end(page->free)) return;
    if (next < start || (next - start) % page->block_size != 0 ||
        (next - start) / page->block_size >= hz_page_capacity(page))
        report_uaf(b, 0, page->block_size);
}

/* b = call, a core allocation.  When the core is out of memory, the quarantine's
 * blocks go back to it (checked) before one more try, which is worth making if there
 * were any; a try that then succeeds leaves errno as the caller had it. */
#define CORE_CALL(b, call)                                                                         \
    do {                                                                                           \
        int errno_before = errno;                                                                  \
        (b) = (call);                                                                              \
        if (hz_unlikely((b) == NULL) && quarantine_empty_out() && ((b) = (call)) != NULL)          \
            errno = errno_before;                                                                  \
    } while (0)

HZ_INLINE void *core_alloc(size_t n) {
    VG_QUIET();
    void *b;
    CORE_CALL(b, hz_alloc_fast(n));
    VG_LOUD();
    return b;
}

/* A page's lifetime begins: memcheck is told that every block's header is readable,
 * as a freed block's is.  The span may have been another class's, whose freed bodies
 * were left no-access at other offsets; the core's carve wrote link words there
 * while muted, which leaves them no-access, and it reads them again where nothing
 * mutes it (a thread's exit retires its empty pages, checking every link). */
static void page_describe(const hz_page_t *page) {
#if DBG_VALGRIND
    if (!vg_on()) return;
    size_t bs = page->block_size, n = bs < HEADER ? bs : HEADER;
    for (uint32_t i = 0; i < page->reserved; i++)
        (void)VALGRIND_MAKE_MEM_DEFINED(page->start + (size_t)i * bs, n);
#else
    (void)page;
#endif
}

/* The first block of a page has just been handed out: unless another block of the
 * page is out (in use, or freed and waiting in the quarantine), a new lifetime of the
 * page begins, and its epoch moves on (every lifetime begins so; a page merely
 * emptied only loses the marks of its free blocks).  Nothing of a new lifetime can
 * have been freed yet.  The caller makes this one step with the core's changes to
 * the page (see page_lock). */
static bool lifetime_begins(hz_segment_t *seg, const hz_page_t *page) {
    if (page->used != 1) return false;
    _Atomic uint32_t *e = unit_epoch(seg, page->first_unit);
    atomic_store_explicit(e, atomic_load_explicit(e, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    return true;
}

/* The page's count, list and epoch are changed by whatever hands out its blocks: a
 * heap's own thread, or for the exit heap, which threads past their heap's
 * destructor share, whoever holds its lock.  core_alloc let go of that lock; it is
 * taken again while hand_out reads the page, or else another thread could hand out
 * and free a block of the page between lifetime_begins' test and its move, leaving
 * that block marked with the old epoch and reported when it leaves the quarantine.
 * *shared is the exit heap, locked, or NULL; false when the lock cannot be had. */
static bool page_lock(hz_segment_t *seg, hz_heap_t **shared) {
    *shared = NULL;
    if (atomic_load_explicit(&seg->heap->state, memory_order_relaxed) != HZ_HEAP_SHARED)
        return true;
    *shared = hz_exit_heap_lock();
    return *shared != NULL;
}

/* Turn the core block b into a block of `size` bytes handed out with `align`
 * (0 for malloc).  zero: the caller's bytes must be zero; core_zeroed: the core
 * block was zeroed (nothing to verify). */
static void *hand_out(char *b, size_t size, size_t align, bool zero, bool core_zeroed) {
    size_t off = align > HEADER ? align : HEADER;
    size_t bs;
    uint64_t mark;
    bool check = !core_zeroed;
    if (hz_segmap_kind((uintptr_t)b) == HZ_SEG_SMALL) {
        hz_segment_t *seg = hz_segment_of(b);
        hz_page_t *page = hz_page_of(seg, b);
        bs = page->block_size;
        hz_heap_t *shared;
        if (page_lock(seg, &shared)) {
            if (b == page->start && lifetime_begins(seg, page)) {
                check = false;
                page_describe(page);
            }
            check_next(page, b);
            if (shared != NULL) hz_exit_heap_unlock(shared);
        } else {
            check = false; /* the page cannot be read safely: no check of the block */
        }
        mark = small_mark(seg, page, b);
    } else {
        bs = hz_large_header(b)->usable;
        mark = large_mark(b, bs);
    }
    size_t checked = min_sz(bs - HEADER, CHECK_CAP);
    VG_DEFINED(b, HEADER + checked);
    /* Freed through this layer in this lifetime of its page: the poison must be intact. */
    if (check && WORD(b + 8) == mark) {
        size_t at = first_diff((unsigned char *)b + HEADER, checked, POISON_BYTE);
        if (at != checked) report_uaf(b, HEADER + at, bs);
    }
    char *user = b + off;
    WORD(b + 8) = 0; /* no freed mark while live (aligned layouts keep b + 8 as padding) */
    uint64_t *h = (uint64_t *)(void *)(user - HEADER);
    VG_DEFINED(h, HEADER);
    h[0] = LIVE_MAGIC ^ (uint64_t)(uintptr_t)user;
    h[1] = (uint64_t)(uint32_t)size | (uint64_t)align_encode(align) << 32;
    size_t canary = min_sz(bs - off - size, CHECK_CAP);
    VG_DEFINED(user + size, canary);
    memset(user + size, CANARY_BYTE, canary);
    VG_NOACCESS(b, off);
    VG_NOACCESS(user + size, bs - off - size);
    VG_MALLOCLIKE(user, size, zero);
    if (zero && !core_zeroed) memset(user, 0, size);
    return user;
}

/* The caller's bytes end where the canary starts: check it. */
static void canary_check(const blk_t *d, int op) {
    size_t canary = min_sz(d->bs - (size_t)(d->user - d->b) - d->size, CHECK_CAP);
    VG_DEFINED(d->user + d->size, canary);
    size_t at = first_diff((unsigned char *)d->user + d->size, canary, CANARY_BYTE);
    if (at != canary) report_overrun(d->user, d->size, d->size + at, d->bs, op);
}

/* Check the canary, poison the block, mark it freed and put it in quarantine (a
 * large block goes back to the core at once). */
static void give_back(const blk_t *d, int op) {
    char *b = d->b;
    canary_check(d, op);
    size_t checked = min_sz(d->bs - HEADER, CHECK_CAP);
    VG_DEFINED(b, HEADER + checked);
    memset(b + HEADER, POISON_BYTE, checked);
    WORD(b + 8) = d->mark;
    VG_FREELIKE(d->user);
    if (!d->large) {
        quarantine_put(b, d->bs);
        return;
    }
    freed_large_note(d->user, d->bs);
    VG_NOACCESS(b + 8, d->bs - 8);
    VG_QUIET();
    hz_free_fast(b);
    VG_LOUD();
}

/* ---------------------------------------------------------------- entries */
void *hz_debug_malloc(size_t size) {
    if (hz_unlikely(size > SIZE_MAX - OVERHEAD)) {
        errno = ENOMEM;
        return NULL;
    }
    char *b = core_alloc(size + OVERHEAD);
    if (hz_unlikely(b == NULL)) return NULL;
    return hand_out(b, size, 0, false, false);
}

void *hz_debug_calloc(size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total) || total > SIZE_MAX - OVERHEAD) {
        errno = ENOMEM;
        return NULL;
    }
    if (total + OVERHEAD <= HZ_MEDIUM_MAX) {
        char *b = core_alloc(total + OVERHEAD);
        return b != NULL ? hand_out(b, total, 0, true, false) : NULL;
    }
    /* Large: the core knows when a fresh mapping is zero already. */
    VG_QUIET();
    char *b;
    CORE_CALL(b, hz_calloc_impl(1, total + OVERHEAD));
    VG_LOUD();
    return b != NULL ? hand_out(b, total, 0, true, true) : NULL;
}

void *hz_debug_aligned(size_t alignment, size_t size) {
    if (alignment <= HEADER) {
        if (hz_unlikely(size > SIZE_MAX - OVERHEAD)) {
            errno = ENOMEM;
            return NULL;
        }
        char *b = core_alloc(size + OVERHEAD);
        return b != NULL ? hand_out(b, size, alignment, false, false) : NULL;
    }
    if (hz_unlikely(size > SIZE_MAX - MIN_CANARY - alignment)) {
        errno = ENOMEM;
        return NULL;
    }
    VG_QUIET();
    char *b;
    CORE_CALL(b, hz_aligned_impl(alignment, size + alignment + MIN_CANARY));
    VG_LOUD();
    return b != NULL ? hand_out(b, size, alignment, false, false) : NULL;
}

void hz_debug_free(void *p, size_t size, size_t alignment) {
    if (p == NULL) return;
    blk_t d;
    blk_find(p, &d, OP_FREE);
    if (size != HZ_SIZE_UNKNOWN && size != d.size)
        report_mismatch(false, p, size, d.size, d.bs);
    /* Compared as aligned_alloc took it: aligned_alloc(24, n) made a block aligned to
     * 32, and free_aligned_sized(p, 24, n) names the same alignment. */
    if (alignment != 0 && hz_alignment_rounded(alignment) != d.align)
        report_mismatch(true, p, alignment, d.align, d.bs);
    give_back(&d, OP_FREE);
}

/* Always moves, so that every stale pointer to the old block is caught. */
void *hz_debug_realloc(void *p, size_t size) {
    if (p == NULL) return hz_debug_malloc(size);
    blk_t d;
    blk_find(p, &d, OP_REALLOC);
    if (size == 0) { /* as glibc: free and return NULL */
        give_back(&d, OP_REALLOC);
        return NULL;
    }
    canary_check(&d, OP_REALLOC);
    void *q = hz_debug_malloc(size);
    if (q == NULL) {
        VG_NOACCESS(d.user + d.size, d.bs - (size_t)(d.user - d.b) - d.size);
        header_hide(&d);
        return NULL;
    }
    memcpy(q, p, min_sz(d.size, size));
    give_back(&d, OP_REALLOC);
    return q;
}

size_t hz_debug_usable_size(const void *p) {
    if (p == NULL) return 0;
    blk_t d;
    blk_find((void *)p, &d, OP_USABLE);
    header_hide(&d);
    return d.size;
}

#else
typedef int hz_debug_not_built; /* the checked variant only */
#endif /* HZ_DEBUG */
