/* guard.c - the slow sides of free-list protection (freelist.h): the process secret,
 * full checks of blocks met on lists that cross segments, the check of a page's list
 * before its memory is given up, and the one-line reports that end the program when
 * a check fails.  An attacker gets no second chance: every failure aborts. */
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "freelist.h"

/* Until hz_guard_init draws the secret (no list exists before), a key that makes a
 * zero word decode as no link, as every key must. */
uint64_t hz_list_key = ~(uint64_t)HZ_SEGMENT_MASK;
/* The mark of blocks on lists that cross segments (freelist.h): drawn apart from the
 * list key, so that a mark read from a block does not give the key. */
uint64_t hz_far_key = 0x9e3779b97f4a7c15ULL;
#if HZ_HARDENING
const uintptr_t hz_list_end_word = 0;
#endif

static uint64_t mix64(uint64_t x) { /* a bijective mixer (splitmix64's finaliser) */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The key comes from the kernel (a raw syscall: nothing here may allocate), or from
 * the random bytes the kernel gives every process at exec when getrandom is
 * refused (old kernels, seccomp). */
void hz_guard_init(void) {
    uint64_t k[2] = {0, 0};
    if (syscall(SYS_getrandom, k, sizeof k, 1 /* GRND_NONBLOCK */) != (long)sizeof k) {
        const uint64_t *r = (const uint64_t *)getauxval(AT_RANDOM);
        uint64_t r0 = r != NULL ? r[0] : 0, r1 = r != NULL ? r[1] : 0;
        uint64_t salt = (uintptr_t)k ^ hz_os_now_ms();
        /* each key mixes both halves its own way: one does not give the other */
        k[0] = mix64(r0 ^ mix64(r1) ^ salt);
        k[1] = mix64(r1 ^ mix64(r0 + 0x5851f42d4c957f2dULL) ^ ~salt);
    }
    /* A cleared link word (0) must never decode as a link within a segment, nor as
     * a loose list's (its top byte is the key's). */
    while ((k[0] >> HZ_SEGMENT_SHIFT) == 0 || (k[0] & HZ_TAG_MASK) == HZ_LOOSE_TAG)
        k[0] = mix64(k[0] + 0x9e3779b97f4a7c15ULL);
    hz_list_key = k[0];
    hz_far_key = k[1];
}

/* ---------------------------------------------------------------- checks */
bool hz_far_next_valid(const void *next) {
    return next == HZ_LIST_EMPTY || hz_block_page(next) != NULL;
}

bool hz_block_linked(const void *p) {
    const void *next = hz_link_next(p);
    if (next == HZ_TRANSIT) return true; /* a batch */
    /* A loose list's link: its tag is one byte, which a program's data matches once
     * in 256, so the link it carries must be the list's end or a block too. */
    if (((uintptr_t)next & HZ_TAG_MASK) == HZ_LOOSE_TAG) {
        const void *untagged = (const void *)((uintptr_t)next & ~HZ_TAG_MASK);
        return untagged == NULL || hz_block_page(untagged) != NULL;
    }
    if (hz_far_next_valid(next)) return true; /* a stash */
    return hz_list_end(next) && hz_segment_of(next) == hz_segment_of(p); /* a page's end */
}

uintptr_t hz_link_far(const hz_page_t *page, const void *block, uintptr_t rel) {
#if HZ_STASH_BLOCKS
    /* The stash (a descriptor of no span) holds blocks of many segments. */
    if (page->units == 0 && hz_far_next_valid((const void *)(rel ^ (uintptr_t)block))) return rel;
#endif
    hz_report_corrupt(block, page->block_size);
}

/* The first carved block of page that does not read as free, or NULL.  A free block's
 * first word is a link within the segment (freelist.h); a block in use has the 0
 * malloc left there, or what the program wrote since, which decodes to something else
 * unless the writer knew the secret.  So a page whose count fell to zero through a
 * double free, while one of its blocks is still in use, shows that block; so does a
 * free block an overflow wrote into.  Read in address order, not by following the
 * list: the loads do not wait for one another, and every block is seen whatever its
 * place on the list. */
static const char *first_not_free(const hz_page_t *page) {
    size_t size = page->block_size;
    const char *b = page->start, *end = b + (size_t)hz_page_capacity(page) * size;
    for (; b < end; b += size)
        if (hz_link_rel(b) > HZ_SEGMENT_MASK) return b;
    return NULL;
}

void hz_page_verify_empty(const hz_page_t *page) {
    const char *b = first_not_free(page);
    if (b != NULL) hz_report_corrupt(b, page->block_size);
}

/* Every carved block once on the list, then its end.  Stricter than first_not_free
 * where a block is in use but still reads as free: in a fork child, a malloc that the
 * fork's signal handler interrupted may have taken a block off the list before it
 * cleared the block's link. */
bool hz_page_list_whole(const hz_page_t *page) {
    const char *b = page->free;
    for (uint32_t i = 0, n = hz_page_capacity(page); i < n; i++) {
        if (hz_list_end(b) || !hz_block_carved(page, b)) return false;
        uintptr_t rel = hz_link_rel(b);
        if (rel > HZ_SEGMENT_MASK) return false;
        b = (const char *)(rel ^ (uintptr_t)b);
    }
    return hz_list_end(b);
}

/* ------------------------------------------------------ hardened variant */
#if HZ_HARDENED
uint64_t hz_heap_random(hz_heap_t *heap) {
    if (heap->rng == 0) heap->rng = hz_list_key ^ (uintptr_t)heap;
    heap->rng += 0x9e3779b97f4a7c15ULL;
    return mix64(heap->rng);
}
#endif

/* --------------------------------------------------------------- reports
 * The shape of the checked variant's reports (debug.c): "hakozuna: what 0xADDR
 * (size class N B)", written with write(2), then abort(). */
typedef struct {
    char buf[256];
    size_t n;
} line_t;

static void put_s(line_t *l, const char *s) {
    while (*s && l->n < sizeof l->buf - 2) l->buf[l->n++] = *s++;
}

static void put_num(line_t *l, uint64_t v, unsigned base) {
    char tmp[24];
    int i = 0;
    do {
        tmp[i++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    if (base == 16) put_s(l, "0x");
    while (i > 0 && l->n < sizeof l->buf - 2) l->buf[l->n++] = tmp[--i];
}

static __attribute__((noreturn)) void die(line_t *l, size_t bs) {
    put_s(l, " (size class ");
    if (bs == 0) {
        put_s(l, "none)");
    } else {
        put_num(l, bs, 10);
        put_s(l, " B)");
    }
    l->buf[l->n++] = '\n';
    l->buf[l->n] = '\0';
    hz_os_write_err(l->buf);
    abort();
}

static __attribute__((noreturn)) void invalid(const void *p, const char *why, size_t bs) {
    line_t l = {.n = 0};
    put_s(&l, "hakozuna: free of invalid pointer ");
    put_num(&l, (uintptr_t)p, 16);
    put_s(&l, why);
    die(&l, bs);
}

void hz_free_invalid(const hz_page_t *page, const void *p) {
    invalid(p, page == &hz_empty_page ? ": in a free span" : ": not a block hakozuna handed out",
            page->block_size);
}

void hz_large_invalid(const void *p) { invalid(p, ": inside a large block", 0); }

void hz_report_double_free(const void *p, size_t bs) {
    line_t l = {.n = 0};
    put_s(&l, "hakozuna: double free");
    if (p != NULL) {
        put_s(&l, " of ");
        put_num(&l, (uintptr_t)p, 16);
    } else {
        put_s(&l, ": more blocks freed than handed out");
    }
    die(&l, bs);
}

void hz_report_corrupt(const void *p, size_t bs) {
    line_t l = {.n = 0};
    put_s(&l, "hakozuna: corrupted free list at ");
    put_num(&l, (uintptr_t)p, 16);
    put_s(&l, ": a freed block was overwritten or freed twice");
    die(&l, bs);
}
