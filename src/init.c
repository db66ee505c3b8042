/* init.c - process start, thread heaps (create, adopt, abandon) and fork.
 *
 * malloc may run before any constructor and re-entrantly while we initialise (a
 * preloaded library's dlsym calling calloc, libc registering our handlers), so:
 * a thread's heap pointer starts at a static empty heap whose pages have no blocks,
 * which sends the first call into the slow path; the core state is complete before
 * any libc function is called; and the thread that is initialising may recurse.
 */
#include <pthread.h>

#include "internal.h"

hz_page_t hz_empty_page;
hz_heap_t hz_empty_heap = {
    .direct = {[0 ... HZ_DIRECT_SLOTS - 1] = &hz_empty_page},
    .current = {[0 ... HZ_CLASSES - 1] = &hz_empty_page},
};
hz_heap_t hz_exiting_heap = {
    .direct = {[0 ... HZ_DIRECT_SLOTS - 1] = &hz_empty_page},
    .current = {[0 ... HZ_CLASSES - 1] = &hz_empty_page},
};
__thread hz_heap_t *hz_tls_heap __attribute__((tls_model("initial-exec"))) = &hz_empty_heap;

enum { PROC_UNINIT, PROC_INITIALIZING, PROC_READY };
static _Atomic int proc_state;
static _Atomic int hooks_state; /* pthread key and atfork handlers */
static pthread_key_t heap_key;
static bool heap_key_ok;

static hz_lock_t heaps_lock; /* registry and abandoned list */
static hz_heap_t *all_heaps;
static hz_heap_t *abandoned;
static size_t abandoned_dirty; /* freed resident bytes in abandoned heaps */

static void thread_done(void *arg);
static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

static void process_init_core(void) {
    int expect = PROC_UNINIT;
    if (atomic_compare_exchange_strong(&proc_state, &expect, PROC_INITIALIZING)) {
        hz_os_init();
        hz_sizeclass_init();
        atomic_store_explicit(&proc_state, PROC_READY, memory_order_release);
        return;
    }
    while (atomic_load_explicit(&proc_state, memory_order_acquire) != PROC_READY) hz_os_yield();
}

/* Registration calls into libc, which may allocate: done once the core is ready. */
static void process_init_hooks(void) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&hooks_state, &expect, 1)) return;
    heap_key_ok = pthread_key_create(&heap_key, thread_done) == 0;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atomic_store(&hooks_state, 2);
}

bool hz_process_ready(void) {
    return atomic_load_explicit(&proc_state, memory_order_acquire) == PROC_READY;
}

static void heap_reset(hz_heap_t *heap) {
    for (unsigned i = 0; i < HZ_DIRECT_SLOTS; i++) heap->direct[i] = &hz_empty_page;
    for (unsigned c = 0; c < HZ_CLASSES; c++) heap->current[c] = &hz_empty_page;
    hz_stash_init(heap);
}

static hz_heap_t *heap_create(void) {
    hz_heap_t *heap = hz_meta_alloc(sizeof(hz_heap_t));
    if (heap == NULL) return NULL;
    memset(heap, 0, sizeof *heap);
    heap_reset(heap);
    heap->state = HZ_HEAP_OWNED;
    hz_lock_acquire(&heaps_lock);
    heap->next_all = all_heaps;
    all_heaps = heap;
    hz_lock_release(&heaps_lock);
    hz_gstat_add(heaps_created, 1);
    return heap;
}

static hz_heap_t *heap_adopt(void) {
    hz_lock_acquire(&heaps_lock);
    hz_heap_t *heap = abandoned;
    if (heap != NULL) {
        abandoned = heap->next_abandoned;
        heap->next_abandoned = NULL;
        heap->state = HZ_HEAP_OWNED;
        abandoned_dirty -= heap->dirty_bytes < abandoned_dirty ? heap->dirty_bytes : abandoned_dirty;
    }
    hz_lock_release(&heaps_lock);
    if (heap != NULL) hz_gstat_add(heaps_adopted, 1);
    return heap;
}

/* The calling thread's heap, made on its first allocation. */
hz_heap_t *hz_thread_init(void) {
    if (hz_tls_heap != &hz_empty_heap && hz_tls_heap != &hz_exiting_heap) return hz_tls_heap;
    process_init_core();
    hz_heap_t *heap = heap_adopt();
    if (heap == NULL) heap = heap_create();
    if (heap == NULL) return NULL;
    hz_tls_heap = heap; /* before anything that may allocate */
    hz_gstat_add(threads_live, 1);
    process_init_hooks();
    if (heap_key_ok) pthread_setspecific(heap_key, heap);
    hz_heap_collect(heap);
    return heap;
}

/* Abandoned heaps keep their freed memory resident for the next thread to adopt
 * them, up to this much in all: short-lived threads then cost no madvise and
 * page-fault round trip.  Beyond it, exiting threads purge. */
#define ABANDONED_DIRTY_MAX ((size_t)4 * HZ_DIRTY_BUDGET)

/* Give up a heap: return what can be returned, keep the rest for a future owner. */
static void heap_abandon(hz_heap_t *heap) {
    hz_outbox_flush_all(heap);
    hz_heap_collect(heap);
    hz_heap_retire_empty(heap);
    hz_lock_acquire(&heaps_lock);
    bool keep = abandoned_dirty + heap->dirty_bytes <= ABANDONED_DIRTY_MAX;
    if (keep) abandoned_dirty += heap->dirty_bytes;
    hz_lock_release(&heaps_lock);
    if (!keep) {
        hz_heap_purge(heap, true);
        hz_heap_release_segments(heap, true);
    }
    heap_reset(heap);
    hz_lock_acquire(&heaps_lock);
    heap->state = HZ_HEAP_ABANDONED;
    heap->next_abandoned = abandoned;
    abandoned = heap;
    hz_lock_release(&heaps_lock);
}

/* Key destructor at thread exit.  Later destructors that free still work: the thread
 * is heapless and its frees go straight to the owners' inboxes; one that allocates
 * gets a heap again (and this destructor runs again in the next round). */
static void thread_done(void *arg) {
    hz_heap_t *heap = arg;
    if (heap == NULL || heap != hz_tls_heap) return;
    hz_tls_heap = &hz_exiting_heap;
    heap_abandon(heap);
    hz_gstat_sub(threads_live, 1);
    hz_shm_tick();
}

/* Blocks freed into abandoned heaps wait in their inboxes; put them back on their
 * pages so empty pages and segments can be returned. */
void hz_drain_abandoned(void) {
    hz_heap_t *list;
    hz_lock_acquire(&heaps_lock);
    list = abandoned;
    abandoned = NULL;
    hz_lock_release(&heaps_lock);
    while (list != NULL) {
        hz_heap_t *heap = list;
        list = heap->next_abandoned;
        hz_heap_collect(heap);
        hz_heap_retire_empty(heap);
        hz_heap_purge(heap, true);
        hz_heap_release_segments(heap, false);
        heap_reset(heap);
        hz_lock_acquire(&heaps_lock);
        heap->next_abandoned = abandoned;
        abandoned = heap;
        hz_lock_release(&heaps_lock);
    }
}

void hz_heaps_visit(hz_heap_visit_fn fn, void *arg) {
    hz_lock_acquire(&heaps_lock);
    hz_heap_t *first = all_heaps;
    hz_lock_release(&heaps_lock);
    /* Heaps are never freed and only pushed at the head: walking without the lock
     * is safe. */
    for (hz_heap_t *h = first; h != NULL; h = h->next_all) fn(h, arg);
}

/* fork: take every global lock in a fixed order so the child inherits them free and
 * consistent.  Heaps of the parent's other threads may be mid-update in the child:
 * they are orphaned (never adopted), their blocks stay valid and freeable. */
static void fork_prepare(void) {
    hz_lock_acquire(&heaps_lock);
    hz_lock_acquire(hz_segment_cache_lock());
    hz_lock_acquire(hz_large_lock());
    hz_lock_acquire(hz_meta_lock());
}

static void fork_parent(void) {
    hz_lock_release(hz_meta_lock());
    hz_lock_release(hz_large_lock());
    hz_lock_release(hz_segment_cache_lock());
    hz_lock_release(&heaps_lock);
}

static void fork_child(void) {
    fork_parent();
    uint64_t live = 0;
    for (hz_heap_t *h = all_heaps; h != NULL; h = h->next_all) {
        if (h == hz_tls_heap) {
            live = 1;
        } else if (h->state == HZ_HEAP_OWNED) {
            h->state = HZ_HEAP_ORPHANED;
        }
    }
    /* Abandoned heaps were consistent when their threads exited: still adoptable. */
    atomic_store(&hz_gstats.threads_live, live);
}

/* Stats export (HAKOZUNA_STATS=1) starts once libc is initialised and ends at exit. */
__attribute__((constructor)) static void process_start(void) { hz_shm_start(); }
__attribute__((destructor)) static void process_end(void) { hz_shm_stop(); }
