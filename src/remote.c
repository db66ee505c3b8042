/* remote.c - frees of blocks that another thread's heap owns.
 *
 * The freeing thread links such blocks into a small outbox per owner and posts a
 * whole batch with one compare-and-swap onto the owner's inbox, a lock-free stack
 * (split into shards in the scale variant).  The owner takes each entire shard with
 * one exchange when it next runs out of blocks (or at thread exit), so there is no
 * ABA problem and no lock anywhere.  At most HZ_OUTBOX_WAYS * HZ_REMOTE_BATCH blocks
 * per thread are in flight (plus, in the scale and mt variants, HZ_STASH_BLOCKS per
 * class kept for the freeing thread's own reuse: stash.c).  Links are encoded as
 * every free list's (freelist.h); since these lists cross segments, each block is
 * checked in full as it is taken off one.
 */
#include "freelist.h"

/* Senders spread over the owner's inbox shards by their own heap's address. */
static void inbox_push(hz_heap_t *owner, const hz_heap_t *sender, void *head, void *tail) {
    /* cppcheck-suppress moduloofone ; the default variant has a single shard */
    _Atomic(void *) *inbox = &owner->inbox[((uintptr_t)sender >> 12) % HZ_INBOX_SHARDS].head;
    void *old = atomic_load_explicit(inbox, memory_order_relaxed);
    do {
        hz_link_set(tail, old);
    } while (!atomic_compare_exchange_weak_explicit(inbox, &old, head, memory_order_release,
                                                    memory_order_relaxed));
    /* Nobody owns the heap (its thread exited): upkeep collects (heap.c). */
    int state = atomic_load_explicit(&owner->state, memory_order_seq_cst);
    if (hz_unlikely(state == HZ_HEAP_ABANDONED || state == HZ_HEAP_SHARED)) hz_upkeep_mail();
}

static void outbox_flush(hz_heap_t *heap, hz_outbox_t *box) {
    if (box->count == 0) return;
    inbox_push(box->dest, heap, box->head, box->tail);
    hz_stat_inc(heap->stats.remote_batches);
    hz_upkeep_tick();
    hz_shm_tick();
    box->head = box->tail = NULL;
    box->count = 0;
}

static void outbox_append(hz_heap_t *heap, hz_heap_t *owner, void *p) {
    hz_outbox_t *box = &heap->outbox[((uintptr_t)owner >> 12) & (HZ_OUTBOX_WAYS - 1)];
    if (box->dest != owner) {
        outbox_flush(heap, box);
        box->dest = owner;
    }
    hz_link_set(p, box->head);
    if (box->head == NULL) box->tail = p;
    box->head = p;
    if (++box->count >= HZ_REMOTE_BATCH) outbox_flush(heap, box);
}

/* Send everything this heap holds for other heaps on its way (thread exit, trim). */
void hz_outbox_flush_all(hz_heap_t *heap) {
#if HZ_HARDENED
    hz_quarantine_flush(heap);
#endif
    for (unsigned c = 1; c < HZ_CLASSES; c++)
        for (void *p; (p = hz_stash_pop(heap, c)) != NULL;)
            outbox_append(heap, hz_segment_of(p)->heap, p);
    for (unsigned i = 0; i < HZ_OUTBOX_WAYS; i++) outbox_flush(heap, &heap->outbox[i]);
}



void hz_free_remote(hz_heap_t *heap, hz_segment_t *seg, hz_page_t *page, void *p) {
    hz_heap_t *owner = seg->heap;
#if HZ_HARDENING
    /* Against `reserved`, which only the page's creation writes: the owner checks
     * against the blocks carved so far when it takes the block in. */
    if (hz_unlikely(hz_block_rank(page, p) >= hz_page_end_rank(page)))
        hz_free_invalid(page, p);
    if (hz_unlikely(hz_block_on_list(p))) hz_report_double_free(p, page->block_size);
#endif
#if HZ_HARDENED
    memset(p, 0, page->block_size); /* nothing of it survives its free */
#endif
    if (hz_unlikely(heap == &hz_empty_heap)) heap = hz_thread_init(); /* batch from now on */
    if (hz_unlikely(heap == NULL || heap == &hz_exiting_heap)) {
        /* An exiting thread (or no memory for a heap): post the block alone. */
        atomic_fetch_add_explicit(&hz_heapless_frees[page->cls], 1, memory_order_relaxed);
        inbox_push(owner, NULL, p, p);
        return;
    }
    hz_stat_inc(heap->stats.frees[page->cls]);
    hz_stat_inc(heap->stats.remote_sent);
    if (hz_stash_keep(heap, page, p)) return;
    outbox_append(heap, owner, p);
}

bool hz_inbox_pending(hz_heap_t *heap) {
    for (unsigned s = 0; s < HZ_INBOX_SHARDS; s++)
        if (atomic_load_explicit(&heap->inbox[s].head, memory_order_relaxed) != NULL) return true;
    return false;
}

/* Take every block posted to this heap and put it back on its page. */
void hz_heap_collect(hz_heap_t *heap) {
    uint64_t n = 0;
    for (unsigned s = 0; s < HZ_INBOX_SHARDS; s++) {
        void *list = atomic_exchange_explicit(&heap->inbox[s].head, NULL, memory_order_acquire);
        while (list != NULL) {
            void *next = hz_link_next(list);
#if HZ_HARDENING
            hz_page_t *page = hz_block_page(list);
            if (page == NULL || hz_segment_of(list)->heap != heap ||
                !hz_block_carved(page, list))
                hz_report_corrupt(list, 0);
#else
            hz_page_t *page = hz_page_of(hz_segment_of(list), list);
#endif
            hz_free_local(heap, page, list);
            list = next;
            n++;
        }
    }
    hz_stat_add(heap->stats.remote_recv, n);
}
