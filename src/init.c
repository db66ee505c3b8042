/* init.c - process start, thread start and exit, the allocator's locks, and fork.
 *
 * malloc may run before any constructor and re-entrantly while we initialise (a
 * preloaded library's dlsym calling calloc, libc registering our handlers), so:
 * a thread's heap pointer starts at a static empty heap whose pages have no blocks,
 * which sends the first call into the slow path; the core state is complete before
 * any libc function is called; and the thread that is initialising may recurse.
 */
#include <errno.h>
#include <pthread.h>

#include "freelist.h"

hz_page_t hz_empty_page = {.free = HZ_LIST_EMPTY};
hz_heap_t hz_empty_heap = {
    .direct = {[0 ... HZ_DIRECT_SLOTS - 1] = &hz_empty_page},
    .direct_mid = {[0 ... HZ_DIRECT_MID_SLOTS - 1] = &hz_empty_page},
    .current = {[0 ... HZ_CLASSES - 1] = &hz_empty_page},
};
hz_heap_t hz_exiting_heap = {
    .direct = {[0 ... HZ_DIRECT_SLOTS - 1] = &hz_empty_page},
    .direct_mid = {[0 ... HZ_DIRECT_MID_SLOTS - 1] = &hz_empty_page},
    .current = {[0 ... HZ_CLASSES - 1] = &hz_empty_page},
};
__thread hz_heap_t *hz_tls_heap __attribute__((tls_model("initial-exec"))) = &hz_empty_heap;

enum { PROC_UNINIT, PROC_INITIALIZING, PROC_READY };
static _Atomic int proc_state;
enum { KEY_NONE, KEY_MAKING, KEY_READY, KEY_FAILED };
static _Atomic int key_state;
static pthread_key_t heap_key;
static _Atomic int atfork_registered;

static void thread_done(void *arg);
static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

static void process_init_core(void) {
    int expect = PROC_UNINIT;
    if (atomic_compare_exchange_strong(&proc_state, &expect, PROC_INITIALIZING)) {
        hz_os_init();
        hz_segmap_init(); /* before the first segment */
        hz_sizeclass_init();
        hz_guard_init(); /* before the first free list is built */
        atomic_store_explicit(&proc_state, PROC_READY, memory_order_release);
        return;
    }
    while (atomic_load_explicit(&proc_state, memory_order_acquire) != PROC_READY) hz_os_yield();
}

bool hz_process_ready(void) {
    return atomic_load_explicit(&proc_state, memory_order_acquire) == PROC_READY;
}

/* The heap key, made once.  Threads that arrive while it is being made wait for it:
 * without it their heaps would never be released.  pthread_key_create neither
 * allocates nor takes a lock, so the thread making it never waits for them. */
static bool key_ready(void) {
    int expect = KEY_NONE;
    if (atomic_compare_exchange_strong(&key_state, &expect, KEY_MAKING)) {
        bool ok = pthread_key_create(&heap_key, thread_done) == 0;
        atomic_store_explicit(&key_state, ok ? KEY_READY : KEY_FAILED, memory_order_release);
        return ok;
    }
    int s;
    while ((s = atomic_load_explicit(&key_state, memory_order_acquire)) == KEY_MAKING)
        hz_os_yield();
    return s == KEY_READY;
}

/* The calling thread's heap, made on its first allocation: NULL when there is no
 * memory for one, or for a thread past its heap's destructor. */
hz_heap_t *hz_thread_init(void) {
    if (hz_tls_heap != &hz_empty_heap)
        return hz_tls_heap == &hz_exiting_heap ? NULL : hz_tls_heap;
    /* The calls below into libc and the kernel may fail on the way (getrandom, a
     * stats slot's madvise); an allocation that succeeds leaves errno alone (os.c). */
    int saved_errno = errno;
    process_init_core();
    hz_heap_t *heap = hz_heap_acquire();
    if (heap == NULL) return NULL;
    hz_shm_attach(heap); /* a new heap, with stats on: its counters page becomes a slot */
    hz_tls_heap = heap; /* before anything that may allocate */
    hz_gstat_add(threads_live, 1);
    if (key_ready()) pthread_setspecific(heap_key, heap);
    /* Registration may allocate (it does not wait for other threads). */
    int expect = 0;
    if (atomic_compare_exchange_strong(&atfork_registered, &expect, 1))
        pthread_atfork(fork_prepare, fork_parent, fork_child);
    heap->busy++;
    hz_heap_collect(heap);
    heap->busy--;
    errno = saved_errno;
    return heap;
}

/* The heap key of a thread that has no heap and frees for others holds
 * &hz_empty_heap, so that its destructor marks the thread as exiting: the frees
 * glibc makes later, tearing the thread down, then make it no heap (one would
 * never be released).  Only where setting the key cannot allocate: glibc keeps its
 * first 32 keys in the thread descriptor. */
void hz_thread_mark_heapless(void) {
    if (hz_tls_heap == &hz_empty_heap && key_ready() && heap_key < 32)
        pthread_setspecific(heap_key, &hz_empty_heap);
}

/* Key destructor at thread exit.  Later destructors that free still work: the thread
 * is heapless and its frees go straight to the owners' inboxes; those that allocate
 * use the shared exit heap (heap.c), so no destructor round can leave a heap behind. */
static void thread_done(void *arg) {
    hz_heap_t *heap = arg;
    if (heap == &hz_empty_heap) { /* a thread that only freed: hz_thread_mark_heapless */
        if (hz_tls_heap == &hz_empty_heap) hz_tls_heap = &hz_exiting_heap;
        return;
    }
    if (heap == NULL || heap != hz_tls_heap) return;
    hz_tls_heap = &hz_exiting_heap;
    hz_heap_abandon(heap);
    hz_gstat_sub(threads_live, 1);
    hz_upkeep_tick();
    hz_shm_tick();
}

/* ----------------------------------------------------------------- fork
 * Our prepare handler takes every global lock, in the order code nests them, marked
 * as held across fork; parent and child handlers give them back.  Whichever order the
 * program's atfork handlers were registered in relative to ours, and whatever they
 * allocate, the forking thread's own acquisitions pass through while it holds them
 * (no other thread can be inside one), so fork never waits for itself.
 *
 * fork from a signal handler that interrupted the allocator in the same thread: the
 * locks that thread holds are left alone (it cannot wait for itself), the child
 * forgets what they guard, and the child's thread starts a new heap if its own was
 * mid-update.  Below such a lock in the order, another holder may be waiting for it:
 * prepare waits for those only so long, then the child forgets them too.
 *
 * Several threads may fork at once (each from its own signal handler): a lock that
 * another fork holds is waited for only so long too, and which locks a fork took is
 * read from the locks themselves (holder = this thread's token with HZ_LOCK_FORK),
 * never from a shared variable another fork could overwrite. */
static const struct {
    hz_lock_t *(*lock)(void);
    void (*forget)(void); /* NULL: nothing to forget */
} fork_locks[] = {
    {hz_upkeep_lock, NULL}, /* heaps mid-upkeep are off every list: the child skips them */
    {hz_exit_lock, hz_exit_heap_forget},
    {hz_heaps_lock, hz_heaps_forget},
    {hz_segment_cache_lock, hz_segment_cache_forget},
    {hz_large_lock, hz_large_cache_forget},
    {hz_meta_lock, hz_meta_forget},
};
#define FORK_LOCKS (sizeof fork_locks / sizeof fork_locks[0])
/* How long "only so long" is.  Time, not a count of yields: with the CPUs busy each
 * yield may give the processor away for a whole time slice, and 5000 of them made a
 * fork from a crash handler take minutes. */
#define FORK_WAIT_MS 20u

static void fork_take(hz_lock_t *l, bool bounded) {
    uintptr_t mine = hz_lock_token() | HZ_LOCK_FORK;
    uint64_t give_up_ms = 0;
    for (unsigned spins = 0;; spins++) {
        uintptr_t expect = 0;
        if (atomic_compare_exchange_weak_explicit(&l->holder, &expect, mine,
                                                  memory_order_acquire, memory_order_relaxed))
            return;
        if (spins <= 64) continue;
        if (bounded || (expect & HZ_LOCK_FORK)) {
            uint64_t now = hz_os_now_ms(); /* clock_gettime: async-signal-safe */
            if (give_up_ms == 0) give_up_ms = now + FORK_WAIT_MS;
            else if (now >= give_up_ms) return;
        }
        hz_os_yield();
    }
}

static bool fork_took(unsigned i) {
    return atomic_load_explicit(&fork_locks[i].lock()->holder, memory_order_relaxed) ==
           (hz_lock_token() | HZ_LOCK_FORK);
}

static void fork_prepare(void) {
    uintptr_t me = hz_lock_token();
    unsigned below = 0; /* locks before the last one this thread holds */
    for (unsigned i = 0; i < FORK_LOCKS; i++)
        if (atomic_load_explicit(&fork_locks[i].lock()->holder, memory_order_relaxed) == me)
            below = i;
    for (unsigned i = 0; i < FORK_LOCKS; i++) {
        hz_lock_t *l = fork_locks[i].lock();
        if (atomic_load_explicit(&l->holder, memory_order_relaxed) == me) continue;
        fork_take(l, i < below);
    }
}

static void fork_parent(void) {
    for (unsigned i = 0; i < FORK_LOCKS; i++)
        if (fork_took(i))
            atomic_store_explicit(&fork_locks[i].lock()->holder, 0, memory_order_release);
}

static void fork_child(void) {
    for (unsigned i = FORK_LOCKS; i-- > 0;) {
        if (!fork_took(i) && fork_locks[i].forget != NULL) fork_locks[i].forget();
        atomic_store_explicit(&fork_locks[i].lock()->holder, 0, memory_order_release);
    }
    hz_shm_fork_child(); /* first: counters still write into the parent's segment */
    hz_prof_fork_child();
    hz_segment_cache_fork_child();
    hz_large_cache_fork_child();
    hz_heaps_fork_child();
}

/* Registered as early as we run: the handlers work whenever they were registered,
 * but malloc locks are best taken after the program's prepare handlers, which
 * registering before the program does gives.  Stats export (HAKOZUNA_STATS=1) starts
 * once libc is initialised and ends at exit. */
__attribute__((constructor(101))) static void process_start(void) { (void)hz_thread_init(); }
__attribute__((constructor)) static void process_stats_start(void) { hz_shm_start(); }
__attribute__((destructor)) static void process_end(void) { hz_shm_stop(); }
