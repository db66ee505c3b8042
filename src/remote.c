/* remote.c - frees of blocks that another thread's heap owns.
 *
 * The freeing thread links such blocks into a small outbox per owner and posts a
 * whole batch with one compare-and-swap onto the owner's inbox, a lock-free stack.
 * The owner takes the entire inbox with one exchange when it next runs out of blocks
 * (or at thread exit), so there is no ABA problem and no lock anywhere.  At most
 * HZ_OUTBOX_SLOTS * HZ_REMOTE_BATCH blocks per thread are in flight.
 */
#include "internal.h"

static void inbox_push(hz_heap_t *owner, void *head, void *tail) {
    void *old = atomic_load_explicit(&owner->inbox, memory_order_relaxed);
    do {
        *(void **)tail = old;
    } while (!atomic_compare_exchange_weak_explicit(&owner->inbox, &old, head,
                                                    memory_order_release,
                                                    memory_order_relaxed));
}

static void outbox_flush(hz_heap_t *heap, hz_outbox_t *box) {
    if (box->count == 0) return;
    inbox_push(box->dest, box->head, box->tail);
    hz_stat_inc(heap->stats.remote_batches);
    box->head = box->tail = NULL;
    box->count = 0;
}

void hz_outbox_flush_all(hz_heap_t *heap) {
    for (unsigned i = 0; i < HZ_OUTBOX_SLOTS; i++) outbox_flush(heap, &heap->outbox[i]);
}

void hz_free_remote(hz_heap_t *heap, hz_segment_t *seg, hz_page_t *page, void *p) {
    hz_heap_t *owner = seg->heap;
    if (hz_unlikely(heap == &hz_empty_heap)) heap = hz_thread_init(); /* batch from now on */
    if (hz_unlikely(heap == NULL || heap == &hz_exiting_heap)) {
        /* An exiting thread (or no memory for a heap): post the block alone. */
        atomic_fetch_add_explicit(&hz_heapless_frees[page->cls], 1, memory_order_relaxed);
        inbox_push(owner, p, p);
        return;
    }
    hz_stat_inc(heap->stats.frees[page->cls]);
    hz_stat_inc(heap->stats.remote_sent);
    hz_outbox_t *box = &heap->outbox[((uintptr_t)owner >> 6) & (HZ_OUTBOX_SLOTS - 1)];
    if (box->dest != owner) {
        outbox_flush(heap, box);
        box->dest = owner;
    }
    *(void **)p = box->head;
    if (box->head == NULL) box->tail = p;
    box->head = p;
    if (++box->count >= HZ_REMOTE_BATCH) outbox_flush(heap, box);
}

/* Take every block posted to this heap and put it back on its page. */
void hz_heap_collect(hz_heap_t *heap) {
    void *list = atomic_exchange_explicit(&heap->inbox, NULL, memory_order_acquire);
    uint64_t n = 0;
    while (list != NULL) {
        void *next = *(void **)list;
        hz_segment_t *seg = hz_segment_of(list);
        hz_free_local(heap, hz_page_of(seg, list), list);
        list = next;
        n++;
    }
    hz_stat_add(heap->stats.remote_recv, n);
}
