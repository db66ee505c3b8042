/* stash.c - the stash of the scale and mt variants: blocks of other threads' heaps
 * that this thread freed, kept (up to HZ_STASH_BLOCKS per class) and handed out
 * again by this thread, where they are hot in cache.
 *
 * A class's stash is a page descriptor that owns no memory, so the fast path pops
 * from it as from any page, and bumps its `used`.  The stash's own count, `held`,
 * takes those pops in at every push: `used` never exceeds HZ_STASH_BLOCKS, however
 * many blocks pass through.
 */
#include "freelist.h"

#if HZ_STASH_BLOCKS

void hz_stash_init(hz_heap_t *heap) {
    for (unsigned c = 1; c < HZ_CLASSES; c++) {
        heap->stash[c].list.cls = (uint8_t)c;
        heap->stash[c].list.block_size = hz_class_block[c];
        heap->stash[c].list.free = HZ_LIST_EMPTY;
    }
}

/* Blocks on the stash's list now. */
static uint32_t stash_count(hz_stash_t *st) {
    st->held -= (uint32_t)st->list.used; /* popped by the fast path since the last call */
    st->list.used = 0;
    return st->held;
}

/* Keep p, a block of page (another heap's), for this heap's reuse; false when it
 * must travel home.  Blocks smaller than a cache line go home: handing them out here
 * would put this thread's data on lines the owner's other blocks share (passive
 * false sharing). */
bool hz_stash_keep(hz_heap_t *heap, const hz_page_t *page, void *p) {
    if (page->block_size < 64 || page->block_size > HZ_STASH_MAX) return false;
    hz_stash_t *st = &heap->stash[page->cls];
    if (stash_count(st) >= HZ_STASH_BLOCKS) return false;
    hz_link_set(p, st->list.free);
    if (HZ_HARDENING) hz_far_mark(p);
    st->list.free = p;
    st->held++;
    return true;
}

/* The heap's pages of class cls are dry (page, the current one, has no free block):
 * serve the stash from the fast path until it is empty too, then the pages again. */
hz_page_t *hz_stash_serve(hz_heap_t *heap, unsigned cls, hz_page_t *page) {
    hz_page_t *list = &heap->stash[cls].list;
    if (page == list || hz_list_end(list->free)) return page;
    hz_set_current(heap, cls, list);
    return list;
}

/* Take one block out of the stash of class cls to send it home (thread exit, trim);
 * NULL when it is empty.  The fast path no longer serves it. */
void *hz_stash_pop(hz_heap_t *heap, unsigned cls) {
    hz_stash_t *st = &heap->stash[cls];
    if (heap->current[cls] == &st->list) hz_set_current(heap, cls, heap->queues[cls].first);
    void *p = st->list.free;
    if (hz_list_end(p)) return NULL;
    void *next = hz_link_next(p); /* the list crosses segments: check the block in full */
    if (HZ_HARDENING && !hz_far_next_valid(next)) hz_report_corrupt(p, 0);
    st->list.free = next;
    stash_count(st);
    st->held--;
    return p;
}

#else
typedef int hz_stash_not_built; /* the scale and mt variants only */
#endif /* HZ_STASH_BLOCKS */
