/* remote.c - frees of blocks that another thread's heap owns.
 *
 * The freeing thread writes the addresses of such blocks into a batch (an array of
 * HZ_REMOTE_BATCH pointers) in a small outbox per owner, and posts the full batch
 * with one compare-and-swap onto the owner's inbox, a lock-free stack of batches
 * (split into shards in the scale variant).  The owner takes each entire shard with
 * one exchange when it next runs out of blocks (or at thread exit), puts the blocks
 * back on their pages, and pushes the emptied batch onto its home heap's returned
 * list, which that heap takes whole the same way: no ABA problem and no lock
 * anywhere.  Reading addresses from an array lets the owner's loads of the blocks
 * overlap, where a list linked through the blocks made it wait for each block's
 * line, last written by the other core, before it could find the next.
 *
 * A thread without a heap (past its heap's destructor, or out of memory for one)
 * has no batches: it pushes each block alone onto the owner's loose list, linked
 * through the block as every free list is (freelist.h).  At most HZ_OUTBOX_WAYS *
 * HZ_REMOTE_BATCH blocks per thread are in flight (plus, in the scale and mt
 * variants, HZ_STASH_BLOCKS per class kept for the freeing thread's own reuse:
 * stash.c).  The owner checks each block in full as it takes it in.
 */
#include "freelist.h"

/* Senders spread over the owner's inbox shards by their own heap's address. */
static void inbox_push(hz_heap_t *owner, const hz_heap_t *sender, hz_batch_t *batch) {
    /* cppcheck-suppress moduloofone ; the default variant has a single shard */
    _Atomic(hz_batch_t *) *inbox = &owner->inbox[((uintptr_t)sender >> 12) % HZ_INBOX_SHARDS].head;
    hz_batch_t *old = atomic_load_explicit(inbox, memory_order_relaxed);
    do {
        batch->next = old;
    } while (!atomic_compare_exchange_weak_explicit(inbox, &old, batch, memory_order_release,
                                                    memory_order_relaxed));
}

/* One block from a thread that has no heap. */
static void loose_push(hz_heap_t *owner, void *p) {
    if (HZ_HARDENING) hz_far_mark(p);
    void *old = atomic_load_explicit(&owner->loose, memory_order_relaxed);
    do {
        hz_link_set(p, old);
    } while (!atomic_compare_exchange_weak_explicit(&owner->loose, &old, p, memory_order_release,
                                                    memory_order_relaxed));
}

/* After a post: if nobody owns the heap (its thread exited), upkeep collects
 * (heap.c).  Ordered against the owner's abandon, which stores the state and then
 * looks at its inbox: one of the two sees the other. */
static void posted(hz_heap_t *owner) {
    int state = atomic_load_explicit(&owner->state, memory_order_seq_cst);
    if (hz_unlikely(state == HZ_HEAP_ABANDONED || state == HZ_HEAP_SHARED)) hz_upkeep_mail();
}

/* An empty batch of this heap's: a spare, one its receivers gave back, or a new one. */
static hz_batch_t *batch_get(hz_heap_t *heap) {
    hz_batch_t *b = heap->spare;
    if (b == NULL) b = atomic_exchange_explicit(&heap->returned, NULL, memory_order_acquire);
    if (b == NULL) {
        b = hz_meta_alloc(sizeof *b);
        if (b == NULL) return NULL;
        b->home = heap;
        b->next = NULL;
    }
    heap->spare = b->next;
    b->next = NULL;
    b->count = 0;
    return b;
}

static void outbox_flush(hz_heap_t *heap, hz_outbox_t *box) {
    hz_batch_t *b = box->batch;
    if (b == NULL || b->count == 0) return;
    box->batch = NULL;
    inbox_push(box->dest, heap, b);
    posted(box->dest);
    hz_stat_inc(heap->stats.remote_batches);
    hz_upkeep_tick();
    hz_shm_tick();
}

/* The rest of outbox_append: another owner's batch to post first, no batch yet, or
 * the block that fills the batch. */
static HZ_NOINLINE void outbox_append_slow(hz_heap_t *heap, hz_outbox_t *box, hz_heap_t *owner,
                                           void *p) {
    if (box->dest != owner) {
        outbox_flush(heap, box);
        box->dest = owner;
    }
    hz_batch_t *b = box->batch;
    if (hz_unlikely(b == NULL) && (b = box->batch = batch_get(heap)) == NULL) {
        loose_push(owner, p); /* no memory for a batch */
        posted(owner);
        return;
    }
    b->blocks[b->count++] = p;
    if (b->count >= HZ_REMOTE_BATCH) outbox_flush(heap, box);
}

HZ_INLINE hz_outbox_t *outbox_for(hz_heap_t *heap, const hz_heap_t *owner) {
    return &heap->outbox[((uintptr_t)owner >> 12) & (HZ_OUTBOX_WAYS - 1)];
}

/* Add p, owner's block, to box's open batch if that takes it without being posted;
 * false otherwise (no batch, another owner's, or p would fill it). */
HZ_INLINE bool outbox_add(hz_outbox_t *box, const hz_heap_t *owner, void *p) {
    hz_batch_t *b = box->batch;
    if (box->dest != owner || b == NULL || b->count + 1 >= HZ_REMOTE_BATCH) return false;
    b->blocks[b->count++] = p;
    return true;
}

/* Most remote frees only add an address to a batch: kept free of calls, so that
 * hz_free_remote saves no registers for them. */
static inline void outbox_append(hz_heap_t *heap, hz_heap_t *owner, void *p) {
    hz_outbox_t *box = outbox_for(heap, owner);
    if (hz_likely(outbox_add(box, owner, p))) return;
    outbox_append_slow(heap, box, owner, p);
}

/* Send everything this heap holds for other heaps on its way (thread exit, trim). */
void hz_outbox_flush_all(hz_heap_t *heap) {
#if HZ_HARDENED
    hz_quarantine_flush(heap);
#endif
    for (unsigned c = 1; c < HZ_CLASSES; c++)
        for (void *p; (p = hz_stash_pop(heap, c)) != NULL;) {
            hz_link_clear(p); /* a batched block must not read as linked (take_in) */
            outbox_append(heap, hz_segment_of(p)->heap, p);
        }
    for (unsigned i = 0; i < HZ_OUTBOX_WAYS; i++) outbox_flush(heap, &heap->outbox[i]);
}

/* Whether the sender of a remote free reads the block's page descriptor.  That line
 * is the one the owner writes at every malloc from the page (its list head and
 * count), so reading it costs a transfer from the owner's core and back at nearly
 * every remote free.  The default and debug policies leave the checks to the owner,
 * which takes every block in through take_in, and count the free under the class
 * the segment's unit_class gives.  A stash (scale, mt) reuses blocks without the
 * owner seeing them, and the hardened variant zeroes the block here, so those keep
 * the checks at the sender. */
#define SENDER_READS_PAGE (HZ_STASH_BLOCKS > 0 || HZ_HARDENED)

/* The sender's checks of a block *p it frees for another heap (a heap-profile
 * sample's pointer becomes its block, as in hz_freed_block_page). */
HZ_INLINE hz_page_t *sender_check(void **pp) {
    void *p = *pp;
    hz_page_t *page = hz_page_of(hz_segment_of(p), p);
#if HZ_HARDENING
    /* Against `reserved`, which only the page's creation writes: the owner checks
     * against the blocks carved so far when it takes the block in. */
    if (hz_unlikely(hz_block_rank(page, p) >= hz_page_end_rank(page)))
        *pp = p = hz_prof_unmark(hz_tls_heap, page, p);
    if (hz_unlikely(hz_block_on_list(p))) hz_report_double_free(p, page->block_size);
#endif
#if HZ_HARDENED
    memset(p, 0, page->block_size); /* nothing of it survives its free */
#endif
    return page;
}

/* A remote free, counted by the sender. */
HZ_INLINE void count_sent(hz_heap_t *heap, const void *p, const hz_page_t *page) {
    hz_stat_inc(heap->stats.remote_sent);
#if SENDER_READS_PAGE
    hz_stat_inc(heap->stats.frees[page->cls]);
#else
    (void)page;
    hz_stat_inc(heap->stats.frees[hz_segment_of(p)->unit_class[hz_unit_of(p)]]);
#endif
}

/* Into the outbox (or, with a stash, kept); page is p's, read by the sender only
 * where SENDER_READS_PAGE. */
static inline void remote_batch(hz_heap_t *heap, hz_heap_t *owner, void *p, hz_page_t *page) {
    count_sent(heap, p, page);
#if SENDER_READS_PAGE
    if (hz_stash_keep(heap, page, p)) return;
#endif
    outbox_append(heap, owner, p);
}

/* A thread with no heap to batch in: at its first free it makes one; past its
 * heap's destructor (or without memory for one) it posts the block alone, linked
 * through it, so checked here whatever the policy (a block pushed twice would make
 * the list a loop).  Out of line, so that hz_free_remote makes no call itself. */
static HZ_COLD void free_remote_unbatched(hz_heap_t *heap, hz_heap_t *owner, void *p,
                                          hz_page_t *page) {
    if (heap == &hz_empty_heap) heap = hz_thread_init(); /* batch from now on */
    if (heap != NULL && heap != &hz_exiting_heap) {
        remote_batch(heap, owner, p, page);
        return;
    }
    if (page == NULL) page = sender_check(&p);
    __atomic_fetch_add(&hz_heapless_frees[page->cls], 1, __ATOMIC_RELAXED);
    loose_push(owner, p);
    posted(owner);
}

/* A free for another heap once the sender did its checks (page: p's, or NULL). */
HZ_INLINE void free_remote_send(hz_heap_t *heap, hz_heap_t *owner, void *p, hz_page_t *page) {
#if !SENDER_READS_PAGE
    /* The heaps that threads without one of their own share never get a batch, so
     * none of their outboxes takes a block: the common free needs no other test. */
    if (hz_likely(outbox_add(outbox_for(heap, owner), owner, p))) {
        count_sent(heap, p, page);
        return;
    }
#endif
    if (hz_unlikely(hz_heap_shared(heap))) {
        free_remote_unbatched(heap, owner, p, page);
        return;
    }
    remote_batch(heap, owner, p, page);
}

#if !SENDER_READS_PAGE
/* While the heap profile samples, a sample leaves it when it is freed, not when its
 * owner (idle, maybe) takes it in: the sender reads the page to find it. */
static HZ_COLD HZ_NOINLINE void free_remote_profiled(hz_heap_t *heap, hz_heap_t *owner, void *p) {
    hz_page_t *page = sender_check(&p);
    free_remote_send(heap, owner, p, page);
}
#endif

void hz_free_remote(hz_heap_t *heap, hz_heap_t *owner, void *p) {
#if SENDER_READS_PAGE
    hz_page_t *page = sender_check(&p);
    free_remote_send(heap, owner, p, page);
#else
    if (HZ_SAMPLE_IN_PAGE &&
        hz_unlikely(atomic_load_explicit(&hz_prof.rate, memory_order_relaxed) != 0)) {
        free_remote_profiled(heap, owner, p);
        return;
    }
    free_remote_send(heap, owner, p, NULL);
#endif
}

bool hz_inbox_pending(hz_heap_t *heap) {
    for (unsigned s = 0; s < HZ_INBOX_SHARDS; s++)
        if (atomic_load_explicit(&heap->inbox[s].head, memory_order_relaxed) != NULL) return true;
    return atomic_load_explicit(&heap->loose, memory_order_relaxed) != NULL;
}

/* A block another thread freed, coming home: checked in full, since its address
 * came from another thread's memory.  A block of a batch was not written by its
 * sender, so one that reads as linked is already on a list: freed twice (by two
 * threads, or by one before and one after its owner took it in). */
HZ_INLINE void take_in(hz_heap_t *heap, void *p, bool batched) {
    /* A small segment's map entry is its owner: one compare puts p in one of this
     * heap's segments, whose unit map then gives its page. */
    if (HZ_HARDENING && hz_segmap_entry((uintptr_t)p) != (uintptr_t)heap) hz_report_corrupt(p, 0);
    hz_page_t *page = hz_freed_block_page(&p); /* e.g. an interior pointer: reported */
    if (HZ_HARDENING && batched && hz_unlikely(hz_block_on_list(p)))
        hz_report_double_free(p, page->block_size);
    hz_page_push(heap, page, p);
}

/* An emptied batch goes back to the heap that fills it. */
static void batch_return(hz_batch_t *b) {
    hz_heap_t *home = b->home;
    hz_batch_t *old = atomic_load_explicit(&home->returned, memory_order_relaxed);
    do {
        b->next = old;
    } while (!atomic_compare_exchange_weak_explicit(&home->returned, &old, b,
                                                    memory_order_release, memory_order_relaxed));
}

#define HZ_COLLECT_AHEAD 8

/* Take every block posted to this heap and put it back on its page. */
void hz_heap_collect(hz_heap_t *heap) {
    uint64_t n = 0;
    for (unsigned s = 0; s < HZ_INBOX_SHARDS; s++) {
        hz_batch_t *b = atomic_exchange_explicit(&heap->inbox[s].head, NULL, memory_order_acquire);
        while (b != NULL) {
            hz_batch_t *next = b->next;
            uint32_t count = b->count;
            if (hz_unlikely(count > HZ_REMOTE_BATCH)) hz_report_corrupt(b, 0);
            /* The blocks' lines are far (the sender's cache or memory): ask for
             * them a few blocks ahead, so their misses overlap. */
            for (uint32_t i = 0; i < count && i < HZ_COLLECT_AHEAD; i++)
                __builtin_prefetch(b->blocks[i], 1);
            for (uint32_t i = 0; i < count; i++) {
                if (i + HZ_COLLECT_AHEAD < count)
                    __builtin_prefetch(b->blocks[i + HZ_COLLECT_AHEAD], 1);
                take_in(heap, b->blocks[i], true);
            }
            n += count;
            batch_return(b);
            b = next;
        }
    }
    void *list = atomic_exchange_explicit(&heap->loose, NULL, memory_order_acquire);
    while (list != NULL) {
        void *next = hz_link_next(list);
        take_in(heap, list, false);
        list = next;
        n++;
    }
    hz_stat_add(heap->stats.remote_recv, n);
}
