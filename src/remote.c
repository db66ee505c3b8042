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
 * The common free only adds an address to an open batch, inline in the free path
 * (remote.h); what is posted here is ticked by that caller (alloc.c).  A thread
 * without a heap (at its first frees, before its caller makes it one; past its heap's
 * destructor; out of memory for one) has no batches: it pushes each block alone
 * onto the owner's loose list, linked through the block as every free list is
 * (freelist.h).  At most HZ_OUTBOX_WAYS * HZ_REMOTE_BATCH blocks per thread are in
 * flight (plus, in the scale and mt variants, HZ_STASH_BLOCKS per class kept for the
 * freeing thread's own reuse: stash.c).  The owner checks each block in full as it
 * takes it in.
 */
#include "remote.h"

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
        hz_loose_link(p, old);
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

/* Post box's batch, if it holds any block: true if it did. */
static bool outbox_flush(hz_heap_t *heap, hz_outbox_t *box) {
    hz_batch_t *b = box->batch;
    if (b == NULL || b->count == 0) return false;
    hz_heap_t *dest = box->dest;
    box->dest = NULL; /* a box names an owner only while it holds a batch */
    box->batch = NULL;
    inbox_push(dest, heap, b);
    posted(dest);
    hz_stat_inc(heap->stats.remote_batches);
    return true;
}

/* The rest of outbox_append: another owner's batch to post first, no batch yet, or
 * the block that fills the batch.  HZ_REMOTE_POSTED if it posted anything. */
HZ_INLINE enum hz_remote_after outbox_refill(hz_heap_t *heap, hz_outbox_t *box,
                                             hz_heap_t *owner, void *p) {
    enum hz_remote_after after = HZ_REMOTE_DONE;
    if (box->dest != owner && outbox_flush(heap, box)) after = HZ_REMOTE_POSTED;
    /* No owner without a batch: a box without one names none (outbox_flush), and
     * a box whose batch is empty may take a new owner. */
    hz_batch_t *b = box->batch;
    if (hz_unlikely(b == NULL) && (b = box->batch = batch_get(heap)) == NULL) {
        loose_push(owner, p); /* no memory for a batch */
        posted(owner);
        return HZ_REMOTE_POSTED;
    }
    box->dest = owner; /* after its batch */
    hz_batch_put(b, p);
    if (b->count < HZ_REMOTE_BATCH) return after;
    (void)outbox_flush(heap, box);
    return HZ_REMOTE_POSTED;
}

/* outbox_refill, marked busy for fork (heap.c): a child that fork left inside it
 * from a signal handler, between two of outbox_flush's stores, could find a box
 * holding a batch for no owner; it does not keep the heap. */
static HZ_NOINLINE enum hz_remote_after outbox_append_slow(hz_heap_t *heap, hz_outbox_t *box,
                                                           hz_heap_t *owner, void *p) {
    heap->busy++;
    atomic_signal_fence(memory_order_seq_cst);
    enum hz_remote_after after = outbox_refill(heap, box, owner, p);
    atomic_signal_fence(memory_order_seq_cst);
    heap->busy--;
    return after;
}

/* Into the open batch, or through outbox_append_slow. */
static inline enum hz_remote_after outbox_append(hz_heap_t *heap, hz_heap_t *owner, void *p) {
    hz_outbox_t *box = hz_outbox_for(heap, owner);
    if (hz_likely(hz_outbox_add(box, owner, p))) return HZ_REMOTE_DONE;
    return outbox_append_slow(heap, box, owner, p);
}

/* Send everything this heap holds for other heaps on its way (thread exit, trim). */
void hz_outbox_flush_all(hz_heap_t *heap) {
#if HZ_HARDENED
    hz_quarantine_flush(heap);
#endif
    for (unsigned c = 1; c < HZ_CLASSES; c++)
        for (void *p; (p = hz_stash_pop(heap, c)) != NULL;)
            (void)outbox_append(heap, hz_segment_of(p)->heap, p);
    for (unsigned i = 0; i < HZ_OUTBOX_WAYS; i++) (void)outbox_flush(heap, &heap->outbox[i]);
}

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

/* Into the outbox (or, with a stash, kept); page is p's, read by the sender only
 * where HZ_SENDER_READS_PAGE. */
static inline enum hz_remote_after remote_batch(hz_heap_t *heap, hz_heap_t *owner, void *p,
                                                hz_page_t *page) {
    hz_count_sent(heap, p, page);
#if HZ_SENDER_READS_PAGE
    if (hz_stash_keep(heap, page, p)) return HZ_REMOTE_DONE;
#endif
    return outbox_append(heap, owner, p);
}

/* A thread with no heap to batch in posts the block alone, linked through it, so
 * checked here whatever the policy (a block pushed twice would make the list a loop):
 * past its heap's destructor, without memory for one, and at its first frees, after
 * which its caller makes it a heap to batch in.  Out of line, so that hz_free_remote
 * makes no call itself. */
static HZ_COLD enum hz_remote_after free_remote_unbatched(const hz_heap_t *heap,
                                                          hz_heap_t *owner, void *p,
                                                          hz_page_t *page) {
    if (page == NULL) page = sender_check(&p);
    __atomic_fetch_add(&hz_heapless_frees[page->cls], 1, __ATOMIC_RELAXED);
    loose_push(owner, p);
    posted(owner);
    return heap == &hz_empty_heap ? HZ_REMOTE_NEEDS_HEAP : HZ_REMOTE_POSTED;
}

/* A free for another heap once the sender did its checks (page: p's, or NULL); the
 * open batch is tried in remote_batch (and before, by hz_free_remote_fast). */
HZ_INLINE enum hz_remote_after free_remote_send(hz_heap_t *heap, hz_heap_t *owner, void *p,
                                                hz_page_t *page) {
    if (hz_unlikely(hz_heap_shared(heap))) return free_remote_unbatched(heap, owner, p, page);
    return remote_batch(heap, owner, p, page);
}

#if !HZ_SENDER_READS_PAGE
/* While the heap profile samples, a sample leaves it when it is freed, not when its
 * owner (idle, maybe) takes it in: the sender reads the page to find it. */
static HZ_COLD HZ_NOINLINE enum hz_remote_after free_remote_profiled(hz_heap_t *heap,
                                                                     hz_heap_t *owner, void *p) {
    hz_page_t *page = sender_check(&p);
    return free_remote_send(heap, owner, p, page);
}
#endif

enum hz_remote_after hz_free_remote(void *p, hz_heap_t *owner, hz_heap_t *heap) {
#if HZ_SENDER_READS_PAGE
    hz_page_t *page = sender_check(&p);
    return free_remote_send(heap, owner, p, page);
#else
    if (HZ_SAMPLE_IN_PAGE &&
        hz_unlikely(atomic_load_explicit(&hz_prof.rate, memory_order_relaxed) != 0))
        return free_remote_profiled(heap, owner, p);
    return free_remote_send(heap, owner, p, NULL);
#endif
}

bool hz_inbox_pending(hz_heap_t *heap) {
    for (unsigned s = 0; s < HZ_INBOX_SHARDS; s++)
        if (atomic_load_explicit(&heap->inbox[s].head, memory_order_relaxed) != NULL) return true;
    return atomic_load_explicit(&heap->loose, memory_order_relaxed) != NULL;
}

/* A block another thread freed, coming home: checked in full, since its address
 * came from another thread's memory.  Returns its page; *p becomes its block (a
 * heap-profile sample's pointer leaves the profile). */
HZ_INLINE hz_page_t *intake_check(const hz_heap_t *heap, void **p) {
    /* A small segment's map entry is its owner: one compare puts p in one of this
     * heap's segments, whose unit map then gives its page. */
    if (HZ_HARDENING && hz_segmap_entry((uintptr_t)*p) != (uintptr_t)heap) hz_report_corrupt(*p, 0);
    return hz_freed_block_page(p); /* e.g. an interior pointer: reported */
}

/* Block p of page, checked, back where its owner hands it out again. */
HZ_INLINE void intake_home(hz_heap_t *heap, hz_page_t *page, void *p) {
#if HZ_HARDENED
    hz_quarantine_remote(heap, page, p);
#else
    hz_page_push(heap, page, p);
#endif
}

/* p, from a batch: it must still read as travelling (freelist.h).  If not, it was
 * freed again since its sender's free (by its owner, which may have handed it out
 * again, or by a third thread whose batch came first), or written after free. */
HZ_INLINE void take_in(hz_heap_t *heap, void *p) {
    void *block = p;
    hz_page_t *page = intake_check(heap, &block);
    if (HZ_HARDENING && hz_unlikely(!hz_in_transit(p))) hz_report_double_free(block, page->block_size);
    intake_home(heap, page, block);
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

/* How many blocks ahead the owner asks for the lines of the blocks it takes in.  A
 * line another core last held takes a few hundred cycles to come, and a block's
 * intake is a few dozen: 8 ahead left the loop waiting on most of them (a third of
 * a two-thread run's time in hz_heap_collect), 16 ran the two-thread cells 4-28 %
 * faster (docs/PERFORMANCE.md, *Asking for the blocks further ahead*). */
#define HZ_COLLECT_AHEAD 16

/* Take every block posted to this heap and put it back on its page. */
void hz_heap_collect(hz_heap_t *heap) {
    uint64_t n = 0;
    for (unsigned s = 0; s < HZ_INBOX_SHARDS; s++) {
        hz_batch_t *b = atomic_exchange_explicit(&heap->inbox[s].head, NULL, memory_order_acquire);
        while (b != NULL) {
            hz_batch_t *next = b->next;
            uint32_t count = b->count;
            if (hz_unlikely(count > HZ_REMOTE_BATCH)) hz_report_corrupt(b, 0);
            /* The batch's lines are far too: ask for all of them at once, and for the
             * next batch's first. */
            for (const char *l = (const char *)b + HZ_CACHE_LINE; l < (const char *)&b->blocks[count];
                 l += HZ_CACHE_LINE)
                __builtin_prefetch(l);
            if (next != NULL) __builtin_prefetch(next);
            /* The blocks' lines are far (the sender's cache or memory): ask for
             * them a few blocks ahead, so their misses overlap. */
            for (uint32_t i = 0; i < count && i < HZ_COLLECT_AHEAD; i++)
                hz_prefetch_write(b->blocks[i]);
            for (uint32_t i = 0; i < count; i++) {
                if (i + HZ_COLLECT_AHEAD < count)
                    hz_prefetch_write(b->blocks[i + HZ_COLLECT_AHEAD]);
                take_in(heap, b->blocks[i]);
            }
            n += count;
            batch_return(b);
            b = next;
        }
    }
    /* A loose list's link is followed only once its block passed the checks and
     * still reads as on a loose list. */
    void *list = atomic_exchange_explicit(&heap->loose, NULL, memory_order_acquire);
    while (list != NULL) {
        void *block = list;
        hz_page_t *page = intake_check(heap, &block);
        void *next = hz_loose_next(list);
        if (HZ_HARDENING && hz_unlikely(next == HZ_TRANSIT)) hz_report_double_free(block, page->block_size);
        if (HZ_HARDENING) ((uintptr_t *)list)[1] = 0; /* its mark: no longer on that list */
        intake_home(heap, page, block);
        list = next;
        n++;
    }
    hz_stat_add(heap->stats.remote_recv, n);
}
