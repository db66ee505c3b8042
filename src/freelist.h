/* freelist.h - the links that chain freed blocks, and the checks made on them.
 *
 * Every list of freed blocks (a page's free list, remote-free outboxes and inboxes,
 * the stash) links a block to the next through the block's first word.  With
 * hardening (the default) the word holds
 *
 *     next ^ block ^ hz_list_key
 *
 * where hz_list_key is a process secret with bits set above the segment offset.
 * Decoding gives next ^ block first: for two blocks of one segment it is below
 * HZ_SEGMENT_SIZE, so one compare checks a page's link before it is followed.  An
 * address written into a freed block by an overflow or a write after free decodes
 * to something else and stops the program; the key also keeps a leaked link from
 * revealing a heap address.  A block handed out gets 0 in that word, which never
 * decodes as a link, so a block freed twice is caught when the list reaches its
 * second entry.  A page's list ends at the base of its segment, whose first word is
 * always 0: the link of the last block passes the compare, and the end, read as a
 * block, does not.  So the fast path reads the head's word before knowing whether
 * the list is empty, and one compare tells "a block to hand out" from "empty or
 * broken".  Lists outside segments (an empty page's, the stash's) end at
 * hz_list_end_word, a read-only 0.  Without hardening lists end at a segment-aligned
 * value (NULL or a segment base) that the fast path tests before reading it.
 *
 * Lists that cross segments (remote frees, the stash) follow their links in slow
 * paths that check each block in full (guard.c).
 */
#ifndef HZ_FREELIST_H
#define HZ_FREELIST_H

#include "internal.h"

extern uint64_t hz_list_key HZ_HIDDEN;
extern uint64_t hz_far_key HZ_HIDDEN;

#if HZ_HARDENING
extern const uintptr_t hz_list_end_word HZ_HIDDEN;
/* The end of a list that is in no segment. */
#define HZ_LIST_EMPTY ((void *)&hz_list_end_word)
/* A list head or link that ends the list. */
HZ_INLINE bool hz_list_end(const void *p) {
    return ((uintptr_t)p & HZ_SEGMENT_MASK) == 0 || p == HZ_LIST_EMPTY;
}
#else
#define HZ_LIST_EMPTY NULL
HZ_INLINE bool hz_list_end(const void *p) { return ((uintptr_t)p & HZ_SEGMENT_MASK) == 0; }
#endif

#if HZ_HARDENING
/* Link block to next. */
HZ_INLINE void hz_link_set(void *block, const void *next) {
    *(uintptr_t *)block = (uintptr_t)next ^ (uintptr_t)block ^ hz_list_key;
}
/* next ^ block, as stored in block. */
HZ_INLINE uintptr_t hz_link_rel(const void *block) {
    return *(const uintptr_t *)block ^ hz_list_key;
}
/* Forget the link of a block being handed out. */
HZ_INLINE void hz_link_clear(void *block) { *(uintptr_t *)block = 0; }
#else
HZ_INLINE void hz_link_set(void *block, const void *next) { *(const void **)block = next; }
HZ_INLINE uintptr_t hz_link_rel(const void *block) {
    return *(const uintptr_t *)block ^ (uintptr_t)block;
}
HZ_INLINE void hz_link_clear(void *block) { (void)block; }
#endif

/* A page's links stay within its segment.  A block put on a list that crosses
 * segments (an owner's loose list, a stash) also gets a mark in its second word
 * (blocks are at least 16 bytes), so that the check of every block another thread
 * frees (hz_block_on_list) can pass a block in use with two compares and follow no
 * link.  The mark is only a filter: forged, it sends a block to the full check; a
 * block handed out keeps it until written, and the full check decides. */
HZ_INLINE void hz_far_mark(void *block) {
    ((uintptr_t *)block)[1] = (uintptr_t)block ^ hz_far_key;
}
HZ_INLINE bool hz_far_marked(const void *block) {
    return ((const uintptr_t *)block)[1] == ((uintptr_t)block ^ hz_far_key);
}

/* Next block after `block` on a list that may cross segments, unchecked. */
HZ_INLINE void *hz_link_next(const void *block) {
    return (void *)(hz_link_rel(block) ^ (uintptr_t)block);
}

/* Blocks freed by a thread other than their owner wait in a batch, or on the owner's
 * loose list, until the owner takes them in; meanwhile the owner may free the block
 * again and hand it out, or another thread free it again.  So such a block carries a
 * link no other state gives it, which the owner requires as it takes the block in
 * (remote.c): a block in a batch links to HZ_TRANSIT, and a loose list's links carry
 * HZ_LOOSE_TAG in their top byte.  Neither is an address (user space is below 2^56),
 * so a page's list never follows them, and a block in use reads so only if its
 * writer knew the key. */
#define HZ_TRANSIT ((void *)((uintptr_t)0xa5 << 56))
#define HZ_LOOSE_TAG ((uintptr_t)0x5a << 56)
#define HZ_TAG_MASK ((uintptr_t)0xff << 56)
#if HZ_HARDENING
HZ_INLINE void hz_transit_mark(void *block) { hz_link_set(block, HZ_TRANSIT); }
HZ_INLINE bool hz_in_transit(const void *block) { return hz_link_next(block) == HZ_TRANSIT; }
HZ_INLINE void hz_loose_link(void *block, const void *next) {
    hz_link_set(block, (const void *)((uintptr_t)next | HZ_LOOSE_TAG));
}
/* The next block of block's loose list, or HZ_TRANSIT (no block) when block's link is
 * not a loose list's. */
HZ_INLINE void *hz_loose_next(const void *block) {
    uintptr_t next = (uintptr_t)hz_link_next(block);
    return (next & HZ_TAG_MASK) == HZ_LOOSE_TAG ? (void *)(next & ~HZ_TAG_MASK) : HZ_TRANSIT;
}
#else
HZ_INLINE void hz_transit_mark(void *block) { (void)block; }
HZ_INLINE bool hz_in_transit(const void *block) { (void)block; return true; }
HZ_INLINE void hz_loose_link(void *block, const void *next) { hz_link_set(block, next); }
HZ_INLINE void *hz_loose_next(const void *block) { return hz_link_next(block); }
#endif

/* Put p, a block of page already checked to start one, back on page's list: LIFO,
 * so the next malloc gets a cache-hot block.  The free fast path, the owner taking
 * remote frees in and the quarantine's release all end here.  When that empties the
 * page or brings a full one back, `event` takes the page: hz_page_free_event, or the
 * free path's hz_free_event, which also ticks the stats publisher (a layer above
 * pages).  Inline with a constant `event`, the call is direct. */
HZ_INLINE void hz_page_push_then(hz_heap_t *heap, hz_page_t *page, void *p,
                                 hz_page_event_fn event) {
    hz_link_set(p, page->free);
    page->free = p;
    page->free_is_zero = 0;
    if (hz_unlikely(hz_dec_le0(&page->used))) event(heap, page); /* empty or full */
}

HZ_INLINE void hz_page_push(hz_heap_t *heap, hz_page_t *page, void *p) {
    hz_page_push_then(heap, page, p, hz_page_free_event);
}

/* ------------------------------------------------- slow sides (guard.c) */
void hz_guard_init(void) HZ_HIDDEN;
/* The page whose carved block starts at p, or NULL. */
HZ_INLINE hz_page_t *hz_block_page(const void *p) {
    if (hz_segmap_kind((uintptr_t)p) != HZ_SEG_SMALL) return NULL;
    hz_page_t *page = hz_page_of(hz_segment_of(p), p);
    return hz_block_rank(page, p) < hz_page_end_rank(page) ? page : NULL;
}
/* Whether next, the link of a block on a list that crosses segments (the stash, a
 * loose list), is that list's end or the start of a carved block: a link that leaves
 * the segment is followed only after this. */
bool hz_far_next_valid(const void *next) HZ_HIDDEN;
/* A link of a page's list that is not within the segment: the stash's next block
 * (checked) or a corrupted list (reported).  Returns next ^ block. */
uintptr_t hz_link_far(const hz_page_t *page, const void *block, uintptr_t rel) HZ_HIDDEN;
/* p is not a block start of `page`: report and abort. */
HZ_COLD __attribute__((noreturn)) void hz_free_invalid(const hz_page_t *page, const void *p) HZ_HIDDEN;
/* p is inside a large block but does not start it: report and abort. */
HZ_COLD __attribute__((noreturn)) void hz_large_invalid(const void *p) HZ_HIDDEN;
/* The page of *p, an address in a small segment, once *p is known to start one of
 * its carved blocks: free and the remote-free intake check this before they trust
 * *p (with hardening; without, unchecked).  A pointer that starts no block leaves
 * for the slow path: a heap-profile sample's (types.h, HZ_SAMPLE_IN_PAGE) leaves the
 * profile and *p becomes its block; anything else is reported. */
HZ_INLINE hz_page_t *hz_freed_block_page(void **p) {
    hz_page_t *page = hz_page_of(hz_segment_of(*p), *p);
#if HZ_HARDENING
    if (hz_unlikely(!hz_block_carved(page, *p))) *p = hz_prof_unmark(hz_tls_heap, page, *p);
#endif
    return page;
}
/* The bytes from p, of page, to the end of its block, checked as free checks p:
 * realloc's copy must not read past the block. */
HZ_INLINE size_t hz_block_room(const hz_page_t *page, const void *p) {
#if HZ_HARDENING
    if (hz_unlikely(!hz_block_carved(page, p))) {
        if (hz_prof_block(page, p) == NULL) hz_free_invalid(page, p);
        return page->block_size - HZ_SAMPLE_MARK;
    }
#endif
    return page->block_size;
}
/* A block freed twice or a list found broken: report and abort. */
HZ_COLD __attribute__((noreturn)) void hz_report_double_free(const void *p, size_t bs) HZ_HIDDEN;
HZ_COLD __attribute__((noreturn)) void hz_report_corrupt(const void *p, size_t bs) HZ_HIDDEN;
/* Whether p's first word reads as a link of some list, followed (guard.c). */
bool hz_block_linked(const void *p) HZ_HIDDEN;
/* True when p's first words show that it is on no list.  A block on a page's list
 * links within its segment, one in a batch to HZ_TRANSIT, one on another list is
 * marked (hz_far_mark): a block in use is none of these, and passes three compares.
 * False is only a suspicion, which hz_block_linked settles. */
HZ_INLINE bool hz_block_plainly_in_use(const void *p) {
    uintptr_t rel = hz_link_rel(p);
    return hz_likely(rel > HZ_SEGMENT_MASK) && hz_likely(!hz_far_marked(p)) &&
           hz_likely((rel ^ (uintptr_t)p) != (uintptr_t)HZ_TRANSIT);
}
/* True when p's first word reads as a link of some list: p is already free.  Inline:
 * the senders of remote frees ask it where they read the page (remote.c). */
HZ_INLINE bool hz_block_on_list(const void *p) {
    return !hz_block_plainly_in_use(p) && hz_block_linked(p);
}
/* A page about to be retired: every carved block must read as free, else reported. */
void hz_page_verify_empty(const hz_page_t *page) HZ_HIDDEN;
/* Whether the page's list holds every carved block once (a fork child's check). */
bool hz_page_list_whole(const hz_page_t *page) HZ_HIDDEN;
#if HZ_HARDENED
/* The next number of the heap's generator for allocation order. */
uint64_t hz_heap_random(hz_heap_t *heap) HZ_HIDDEN;
/* The hardened variant's free of a block of the caller's heap (page.c). */
void hz_free_quarantine(hz_heap_t *heap, hz_page_t *page, void *p, hz_page_event_fn event) HZ_HIDDEN;
/* A block another thread freed, taken in by its owner (remote.c): into the
 * quarantine, if it was not written after its free. */
void hz_quarantine_remote(hz_heap_t *heap, hz_page_t *page, void *p) HZ_HIDDEN;
/* Give every quarantined block back to its page (thread exit, trim; page.c). */
void hz_quarantine_flush(hz_heap_t *heap) HZ_HIDDEN;
#endif

#endif /* HZ_FREELIST_H */
