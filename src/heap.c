/* heap.c - a heap's life: made or adopted for a thread; tidied (remote frees
 * collected, empty pages retired, memory purged); abandoned when its thread exits and
 * kept up while nobody owns it; and the one shared heap of threads that are past
 * their own heap's destructor.
 *
 * Heaps are never freed.  An exited thread's heap waits on the abandoned list for the
 * next new thread; meanwhile other threads still free into its inbox, so "upkeep"
 * collects those blocks and purges its emptied pages on the same time-based policy as
 * a live heap.  Upkeep has no thread of its own: whichever thread next passes a slow
 * path once it is due runs it (hz_upkeep_tick).
 */
#include "internal.h"

static hz_lock_t heaps_lock; /* registry, abandoned list and abandoned_dirty */
static hz_heap_t *all_heaps;
static hz_heap_t *abandoned;
static size_t abandoned_dirty; /* sum of listed_dirty over the abandoned list */

static hz_lock_t exit_lock; /* the shared heap of exiting threads */
static hz_heap_t *exit_heap;

static hz_lock_t upkeep_lock;
_Atomic uint64_t hz_upkeep_due;

/* Abandoned heaps keep freed memory resident for the threads that will adopt them:
 * short-lived threads then cost no madvise and page-fault round trip.  They keep up
 * to ABANDONED_DIRTY_MAX in all, with the empty segments their threads left resident
 * in the segment cache, plus what starting threads took over with the heaps
 * they adopted in the last one or two windows of HZ_PURGE_DELAY_MS (up to
 * ABANDONED_DEMAND_MAX): a program whose threads come and go many at a time keeps
 * what the next ones will use, and one whose threads stop coming is back to the base
 * allowance within two windows.  Beyond the allowance, exiting threads purge. */
#define ABANDONED_DIRTY_MAX ((size_t)HZ_DIRTY_BUDGET)
#define ABANDONED_DEMAND_MAX (4 * (size_t)HZ_DIRTY_BUDGET)
static uint64_t demand_window_ms; /* heaps_lock, with demand */
static size_t demand[2];          /* dirty bytes adopted: this window, the one before */

hz_lock_t *hz_heaps_lock(void) { return &heaps_lock; }
hz_lock_t *hz_exit_lock(void) { return &exit_lock; }
hz_lock_t *hz_upkeep_lock(void) { return &upkeep_lock; }

/* The pages the fast path sees: none, so the next allocation takes the slow path. */
static void heap_reset(hz_heap_t *heap) {
    for (unsigned i = 0; i < HZ_DIRECT_SLOTS; i++) heap->direct[i] = &hz_empty_page;
    for (unsigned i = 0; i < HZ_DIRECT_MID_SLOTS; i++) heap->direct_mid[i] = &hz_empty_page;
    for (unsigned c = 0; c < HZ_CLASSES; c++) heap->current[c] = &hz_empty_page;
    hz_stash_init(heap);
}

/* A heap's memory: its own mapping, laid out so that the counters at its start end
 * the mapping's first (kernel) page, which the slot header shares; with stats on
 * that page becomes the heap's thread slot of the segment. */
_Static_assert(offsetof(hz_heap_t, stats) == 0, "a heap starts with its counters");
_Static_assert(sizeof(hz_heap_stats_t) + offsetof(struct hz_shm_thread, mallocs) ==
                   sizeof(struct hz_shm_thread),
               "a heap's counters are a thread slot's");
_Static_assert(offsetof(hz_heap_stats_t, frees) + 64 == offsetof(struct hz_shm_thread, frees) &&
                   offsetof(hz_heap_stats_t, remote_sent) + 64 ==
                       offsetof(struct hz_shm_thread, remote_sent) &&
                   offsetof(hz_heap_stats_t, pages_retired) + 64 ==
                       offsetof(struct hz_shm_thread, pages_retired),
               "a heap's counters are a thread slot's");
_Static_assert(HZ_CLASSES == HZ_SHM_THREAD_CLASSES, "thread slots hold every class");

static hz_heap_t *heap_memory(void) {
    size_t kp = hz_os_kernel_page_size();
    size_t size = hz_align_up(kp - sizeof(hz_heap_stats_t) + sizeof(hz_heap_t), hz_os_page_size());
    char *chunk = hz_os_map_aligned(size, kp);
    if (chunk == NULL) return NULL;
    hz_gstat_add(bytes_meta, size);
    return (hz_heap_t *)(chunk + kp - sizeof(hz_heap_stats_t));
}

/* The slot header: who owns the heap now (tid, for HZ_HEAP_OWNED), for readers of
 * the segment. */
static void heap_note(hz_heap_t *heap, int state, long tid) {
    struct hz_shm_thread *t = hz_heap_slot(heap);
    if (state == HZ_HEAP_OWNED) {
        /* Kept in the heap too: the slot's page moves when stats start (shm.c), and
         * a write racing the move would be lost, the owner then taken for gone. */
        heap->owner_tid = tid;
        __atomic_store_n(&t->tid, (uint64_t)heap->owner_tid, __ATOMIC_RELAXED);
        __atomic_store_n(&t->owners, t->owners + 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&t->state, (uint32_t)state, __ATOMIC_RELEASE);
}

static hz_heap_t *heap_create(int state, long tid) {
    hz_heap_t *heap = heap_memory();
    if (heap == NULL) return NULL;
    heap_reset(heap);
    heap_note(heap, state, tid);
    atomic_store_explicit(&heap->state, state, memory_order_relaxed);
    if (!hz_lock_acquire(&heaps_lock)) return NULL; /* re-entered from a signal handler */
    heap->next_all = all_heaps;
    all_heaps = heap;
    hz_lock_release(&heaps_lock);
    hz_gstat_add(heaps_created, 1);
    return heap;
}

/* ------------------------------------------------- the abandoned list (heaps_lock) */
static void list_push(hz_heap_t *heap) {
    heap->listed_dirty = heap->dirty_bytes;
    abandoned_dirty += heap->listed_dirty;
    heap->next_abandoned = abandoned;
    abandoned = heap;
}

/* Start a new window of adoptions once the current one is HZ_PURGE_DELAY_MS old. */
static void demand_roll(uint64_t now) {
    enum hz_window w = hz_window_roll(&demand_window_ms, now);
    if (w == HZ_WINDOW_SAME) return;
    demand[1] = w == HZ_WINDOW_NEXT ? demand[0] : 0;
    demand[0] = 0;
}

static size_t abandoned_allowance(uint64_t now) {
    demand_roll(now);
    size_t recent = demand[0] + demand[1];
    return ABANDONED_DIRTY_MAX + (recent > ABANDONED_DEMAND_MAX ? ABANDONED_DEMAND_MAX : recent);
}

static hz_heap_t *list_unlink(hz_heap_t **link) {
    hz_heap_t *heap = *link;
    *link = heap->next_abandoned;
    heap->next_abandoned = NULL;
    abandoned_dirty -= heap->listed_dirty;
    heap->listed_dirty = 0;
    return heap;
}

/* A heap whose thread ended without releasing it: glibc runs the key destructors
 * four rounds at most, so a thread whose first allocation comes in the last round
 * gets a heap no destructor gives up.  Each starting thread looks at a few heaps,
 * round the registry, and takes over an owned one whose thread is gone (its kernel
 * id no longer names a thread of the process; a reused id only delays this).  The
 * kernel is asked outside heaps_lock, which thread starts and exits share. */
static hz_heap_t *sweep_next; /* heaps_lock */
#define SWEEP_VISITS 32 /* heaps looked at per starting thread */
#define SWEEP_CHECKS 4  /* of which owned ones asked about (a system call each) */

static hz_heap_t *take_ownerless(long tid) {
    hz_heap_t *seen[SWEEP_CHECKS];
    long owner[SWEEP_CHECKS];
    int n = 0;
    if (!hz_lock_acquire(&heaps_lock)) return NULL;
    hz_heap_t *first = NULL; /* one lap at most: a few heaps are not asked about twice */
    for (int visits = 0; visits < SWEEP_VISITS && n < SWEEP_CHECKS; visits++) {
        hz_heap_t *h = sweep_next != NULL ? sweep_next : all_heaps;
        if (h == NULL || h == first) break;
        if (first == NULL) first = h;
        sweep_next = h->next_all;
        if (atomic_load_explicit(&h->state, memory_order_relaxed) != HZ_HEAP_OWNED) continue;
        seen[n] = h;
        owner[n++] = h->owner_tid;
    }
    hz_lock_release(&heaps_lock);
    for (int i = 0; i < n; i++) {
        if (!hz_os_thread_gone(owner[i]) || !hz_lock_acquire(&heaps_lock)) continue;
        hz_heap_t *h = seen[i];
        /* Still that thread's (no other starting thread took it meanwhile), and not
         * left mid-update by a thread that ended inside the allocator (cancelled in a
         * signal handler): that one stays where it is. */
        bool take = atomic_load_explicit(&h->state, memory_order_relaxed) == HZ_HEAP_OWNED &&
                    h->owner_tid == owner[i] && h->busy == 0;
        if (take) heap_note(h, HZ_HEAP_OWNED, tid);
        hz_lock_release(&heaps_lock);
        if (take) {
            hz_gstat_sub(threads_live, 1); /* its thread never counted itself out */
            return h;
        }
    }
    return NULL;
}

/* A heap taken over sizes its classes' pages as a new heap does:
 * how its last thread used a class (a page retired, so the class cycles and gets long
 * pages) says nothing of the next.  Carried over, a thread that makes one 32 KiB
 * block got a 1 MiB page for it, and threads 16 at a time faulted in six times the
 * pages (docs/PERFORMANCE.md, thread churn). */
static void forget_classes(hz_heap_t *heap) {
    for (unsigned c = 0; c < HZ_CLASSES; c++) heap->queues[c].retired_ms = 0;
}

/* A heap for a starting thread: one whose thread ended without giving it up, else an
 * abandoned one, else a new one. */
hz_heap_t *hz_heap_acquire(void) {
    long tid = hz_os_tid();
    hz_heap_t *heap = take_ownerless(tid);
    uint64_t now = heap == NULL ? hz_os_now_ms() : 0; /* read before the lock */
    if (heap == NULL && hz_lock_acquire(&heaps_lock)) {
        if (abandoned != NULL) {
            demand_roll(now);
            demand[0] += abandoned->listed_dirty;
            heap = list_unlink(&abandoned);
            atomic_store_explicit(&heap->state, HZ_HEAP_OWNED, memory_order_relaxed);
            heap_note(heap, HZ_HEAP_OWNED, tid);
        }
        hz_lock_release(&heaps_lock);
    }
    if (heap == NULL) return heap_create(HZ_HEAP_OWNED, tid);
    forget_classes(heap);
    heap->stack_memo.pc = 0; /* its words are in the last thread's stack */
    hz_gstat_add(heaps_adopted, 1);
    return heap;
}

/* --------------------------------------------------------------------- tidying */
/* The one sequence that brings a heap up to date: post what it holds for others,
 * take back what others freed into it, retire its empty pages, purge (on the time
 * policy, or everything), and for a full tidy give back its empty segments. */
void hz_heap_tidy(hz_heap_t *heap, enum hz_tidy how) {
    heap->busy++;
    hz_outbox_flush_all(heap);
    hz_heap_collect(heap);
    if (how != HZ_TIDY_ROOM) hz_heap_retire_empty(heap);
    hz_heap_purge(heap, how != HZ_TIDY_TIMED);
    if (how != HZ_TIDY_TIMED) hz_heap_release_segments(heap, how == HZ_TIDY_ALL);
    heap->busy--;
}

/* A heap about to join the abandoned list keeps its freed memory resident only while
 * the list's total, and the cache's resident segments, stay within the allowance;
 * past it, the heap is purged and
 * its empty segments are released.  Both ways onto the list pass here: a thread's
 * exit, and upkeep, whose collections of late remote frees empty pages too. */
static void keep_within_budget(hz_heap_t *heap) {
    bool keep = false;
    uint64_t now = hz_os_now_ms();
    if (hz_lock_acquire(&heaps_lock)) {
        keep = abandoned_dirty + hz_segment_cache_resident() + heap->dirty_bytes <=
               abandoned_allowance(now);
        hz_lock_release(&heaps_lock);
    }
    if (!keep) hz_heap_tidy(heap, HZ_TIDY_ALL);
}

/* Give up a heap at thread exit: it goes, tidied, to the abandoned list. */
void hz_heap_abandon(hz_heap_t *heap) {
    hz_heap_tidy(heap, HZ_TIDY_TIMED);
    hz_heap_share_segments(heap);
    keep_within_budget(heap);
    heap_reset(heap);
    uint64_t purge_at = heap->purge_at_ms; /* once listed, the heap is upkeep's */
    if (!hz_lock_acquire(&heaps_lock)) return;
    /* Ordered against a sender's inbox push and state check: one of the two sees the
     * other, so a batch posted meanwhile is either collected or mailed. */
    atomic_store_explicit(&heap->state, HZ_HEAP_ABANDONED, memory_order_seq_cst);
    heap_note(heap, HZ_HEAP_ABANDONED, 0);
    list_push(heap);
    hz_lock_release(&heaps_lock);
    hz_upkeep_at(purge_at);
    if (hz_inbox_pending(heap)) hz_upkeep_mail();
}

/* Take the abandoned heaps that have work (all of them for a full tidy) off the
 * list, tidy them, and put them back.  Returns when the earliest of their purge
 * epochs is next due (0: none). */
static uint64_t tidy_abandoned(enum hz_tidy how) {
    hz_heap_t *work = NULL;
    if (!hz_lock_acquire(&heaps_lock)) return 0;
    for (hz_heap_t **link = &abandoned; *link != NULL;) {
        hz_heap_t *h = *link;
        if (how == HZ_TIDY_TIMED && h->purge_at_ms == 0 && !hz_inbox_pending(h)) {
            link = &h->next_abandoned;
            continue;
        }
        list_unlink(link);
        h->next_abandoned = work;
        work = h;
    }
    hz_lock_release(&heaps_lock);
    uint64_t next = 0;
    while (work != NULL) {
        hz_heap_t *h = work;
        work = h->next_abandoned;
        hz_heap_tidy(h, how);
        if (how == HZ_TIDY_TIMED) keep_within_budget(h);
        heap_reset(h);
        next = hz_earliest(next, h->purge_at_ms);
        if (!hz_lock_acquire(&heaps_lock)) continue; /* only from a signal handler: lost */
        list_push(h);
        hz_lock_release(&heaps_lock);
    }
    return next;
}

static uint64_t tidy_exit_heap(enum hz_tidy how) {
    uint64_t next = 0;
    if (!hz_lock_acquire(&exit_lock)) return 0;
    if (exit_heap != NULL) {
        hz_heap_tidy(exit_heap, how);
        next = exit_heap->purge_at_ms;
    }
    hz_lock_release(&exit_lock);
    return next;
}

/* Upkeep of the heaps nobody owns and of the large cache, once it is due; one thread
 * at a time. */
void hz_upkeep_run(void) {
    uint64_t due = atomic_load_explicit(&hz_upkeep_due, memory_order_relaxed);
    if (due == 0) return;
    uint64_t now = hz_os_now_ms();
    if (now < due || !hz_lock_try(&upkeep_lock)) return;
    atomic_store_explicit(&hz_upkeep_due, 0, memory_order_relaxed);
    uint64_t next = hz_earliest(tidy_abandoned(HZ_TIDY_TIMED), tidy_exit_heap(HZ_TIDY_TIMED));
    next = hz_earliest(next, hz_large_cache_age(now));
    next = hz_earliest(next, hz_segment_cache_age(now));
    hz_lock_release(&upkeep_lock);
    hz_upkeep_at(next);
}

/* malloc_trim: everything nobody owns, purged and its empty segments released. */
void hz_heaps_trim(void) {
    if (!hz_lock_acquire(&upkeep_lock)) return;
    (void)tidy_abandoned(HZ_TIDY_ALL_SEGMENTS);
    (void)tidy_exit_heap(HZ_TIDY_ALL_SEGMENTS);
    hz_lock_release(&upkeep_lock);
}

/* ------------------------------------------------------------ the exit heap */
/* Threads past their heap's destructor (later thread-specific-data destructors that
 * allocate) share one heap under a lock instead of getting a heap of their own again,
 * which nothing would release: there is no destructor round after the last. */
hz_heap_t *hz_exit_heap_lock(void) {
    if (!hz_lock_acquire(&exit_lock)) return NULL;
    if (exit_heap == NULL) exit_heap = heap_create(HZ_HEAP_SHARED, 0);
    if (exit_heap == NULL) hz_lock_release(&exit_lock);
    return exit_heap;
}

void hz_exit_heap_unlock(hz_heap_t *heap) {
    (void)heap;
    hz_lock_release(&exit_lock);
}

/* --------------------------------------------------------------------- fork */
/* The forking thread was interrupted while changing the exit heap: the child makes a
 * new one (the old one is orphaned by hz_heaps_fork_child). */
void hz_exit_heap_forget(void) {
    if (exit_heap != NULL) atomic_store_explicit(&exit_heap->state, HZ_HEAP_ORPHANED,
                                                 memory_order_relaxed);
    exit_heap = NULL;
}

/* ...or while changing the abandoned list: the child starts without one. */
void hz_heaps_forget(void) {
    abandoned = NULL;
    abandoned_dirty = 0;
    demand[0] = demand[1] = 0;
}

/* In the child, only the forking thread is left.  The heaps of the others may have
 * been mid-update: they are orphaned, never adopted nor tidied, and their blocks stay
 * valid and freeable.  So is the forking thread's own heap if fork interrupted it
 * inside a slow path (fork from a signal handler): the thread starts a new one.  A
 * fork from a signal handler may also have interrupted one of its fast paths, which
 * mark nothing: a block taken off a list but not yet counted.  So the heap the child
 * keeps is marked: a page of it whose list comes up short when it empties is left
 * alone (one page lost) instead of being reported as a double free (page.c). */
void hz_heaps_fork_child(void) {
    hz_heap_t *self = hz_tls_heap;
    bool own = !hz_heap_shared(self);
    if (own && self->busy != 0) {
        own = false;
        hz_tls_heap = &hz_empty_heap;
    }
    if (own) {
        self->forked = true;
        self->owner_tid = hz_os_tid();
        __atomic_store_n(&hz_heap_slot(self)->tid, (uint64_t)self->owner_tid, __ATOMIC_RELAXED);
    }
    for (hz_heap_t *h = all_heaps; h != NULL; h = h->next_all) {
        if ((h != self || !own) && atomic_load_explicit(&h->state, memory_order_relaxed) ==
                                       HZ_HEAP_OWNED) {
            atomic_store_explicit(&h->state, HZ_HEAP_ORPHANED, memory_order_relaxed);
            heap_note(h, HZ_HEAP_ORPHANED, 0);
        }
    }
    __atomic_store_n(&hz_gstats.threads_live, own ? 1 : 0, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- statistics */
void hz_heaps_visit(hz_heap_visit_fn fn, void *arg) {
    if (!hz_lock_acquire(&heaps_lock)) return;
    hz_heap_t *first = all_heaps;
    hz_lock_release(&heaps_lock);
    /* Heaps are never freed and only pushed at the head: walking without the lock
     * is safe. */
    for (hz_heap_t *h = first; h != NULL; h = h->next_all) fn(h, arg);
}
