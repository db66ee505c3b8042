/* remote.h - the fast path of a free for another thread's heap: the block's address
 * added to this heap's open batch for its owner.
 *
 * Inline into the free path (alloc.c), as alloc.h's are: most remote frees end here
 * without a call.  The others (a batch to open, post or fill, a heapless thread, the
 * heap profile on) go to hz_free_remote (remote.c), which tells its caller what it
 * leaves it to do (internal.h, enum hz_remote_after).
 */
#ifndef HZ_REMOTE_H
#define HZ_REMOTE_H

#include "freelist.h"

/* Whether the sender of a remote free reads the block's page descriptor.  That line
 * is the one the owner writes at every malloc from the page (its list head and
 * count), so reading it costs a transfer from the owner's core and back at nearly
 * every remote free.  The default and debug policies leave the checks to the owner,
 * which takes every block in through take_in, and count the free under the class
 * the segment's unit_class gives.  A stash (scale, mt) reuses blocks without the
 * owner seeing them, and the hardened variant zeroes the block here, so those keep
 * the checks at the sender. */
#define HZ_SENDER_READS_PAGE (HZ_STASH_BLOCKS > 0 || HZ_HARDENED)

HZ_INLINE hz_outbox_t *hz_outbox_for(hz_heap_t *heap, const hz_heap_t *owner) {
    return &heap->outbox[((uintptr_t)owner >> 12) & (HZ_OUTBOX_WAYS - 1)];
}

/* Add p to batch b, marked as travelling (freelist.h, hz_transit_mark). */
HZ_INLINE void hz_batch_put(hz_batch_t *b, void *p) {
    hz_transit_mark(p);
    b->blocks[b->count++] = p;
}

/* Add p, owner's block, to box's open batch if that takes it without being posted;
 * false otherwise (no batch, another owner's, or p would fill it).  A box names an
 * owner only while it holds a batch (remote.c), so one compare covers the first two. */
HZ_INLINE bool hz_outbox_add(hz_outbox_t *box, const hz_heap_t *owner, void *p) {
    hz_batch_t *b = box->batch;
    if (box->dest != owner || b->count + 1 >= HZ_REMOTE_BATCH) return false;
    hz_batch_put(b, p);
    return true;
}

/* A remote free, counted by the sender. */
HZ_INLINE void hz_count_sent(hz_heap_t *heap, const void *p, const hz_page_t *page) {
    hz_stat_inc(heap->stats.remote_sent);
#if HZ_SENDER_READS_PAGE
    hz_stat_inc(heap->stats.frees[page->cls]);
#else
    (void)page;
    hz_stat_inc(heap->stats.frees[hz_segment_of(p)->unit_class[hz_unit_of(p)]]);
#endif
}

/* p, owner's block, freed by heap's thread: true when an open batch took it.  Where
 * the sender reads the page, while the heap profile samples (a sample leaves it when
 * it is freed, so the sender looks for one), and for the heaps that threads without
 * one of their own share (they never have a batch open), it is false at once. */
HZ_INLINE bool hz_free_remote_fast(hz_heap_t *heap, hz_heap_t *owner, void *p) {
#if HZ_SENDER_READS_PAGE
    (void)heap, (void)owner, (void)p;
    return false;
#else
    if (HZ_SAMPLE_IN_PAGE &&
        hz_unlikely(atomic_load_explicit(&hz_prof.rate, memory_order_relaxed) != 0))
        return false;
    if (!hz_outbox_add(hz_outbox_for(heap, owner), owner, p)) return false;
    hz_count_sent(heap, p, NULL);
    return true;
#endif
}

#endif /* HZ_REMOTE_H */
