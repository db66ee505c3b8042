/* prof.c - the sampled heap profile, live in a shared-memory segment.
 *
 * On with HAKOZUNA_STATS=1 and HAKOZUNA_PROFILE=1 (or =<bytes>: the mean sampling
 * interval) when the stats segment could be made; include/hakozuna_prof.h describes
 * the segment, docs/OBSERVABILITY.md the tool (hzstat --heap).
 *
 * Trigger: each heap counts down the bytes it allocates (heap->sample_left, paid on
 * the malloc fast path as one subtract on memory and a branch).  When the countdown
 * runs out, hz_sample_take draws the next interval, exponentially distributed with
 * mean rate bytes, so that an allocation of s bytes is sampled with probability
 * 1 - exp(-s / rate) whatever the sizes around it (as tcmalloc and jemalloc do).
 * With profiling off the countdown is reset to HZ_SAMPLE_NEVER (2^62 bytes).
 *
 * A small sample (HZ_SAMPLE_IN_PAGE, types.h) is the block that the request would
 * have had when its class has HZ_SAMPLE_MARK bytes to spare past the size asked
 * for, else a block of the next class (alloc.c), handed out past a mark that names
 * its trace (below, "samples in pages").  The pointer starts no block, so its free
 * leaves the free fast path at the block-start check that every free makes
 * (freelist.h), and the fast path pays nothing for it; realloc and
 * malloc_usable_size find the mark too.
 * Large and aligned samples, and every sample of the checked variant and of builds
 * without hardening, are served by the large path (large.c) with the trace's slot
 * in their header: a large block's free already leaves the fast path.  A small one
 * takes a 64 KiB mapping (SAMPLE_MAP), of which it touches a page or two: one size,
 * so that the large cache hands a freed sample's mapping to the next sample.
 *
 * The stack comes from unwind.c, which reads the unwind tables once per return
 * address and keeps what it learnt; each heap keeps a memo of its last walk, so that
 * a sample taken where the last one was (a loop) costs a check of the stack words
 * that walk read, and no search of the table.  For a frame it cannot step through,
 * glibc's backtrace() takes the whole stack; it loads libgcc_s (allocating) on its
 * first use, which happens at start, before sampling is on, and the heap's
 * `sampling` flag makes any allocation it makes while sampling a plain one.
 *
 * The table of traces is lock-free (a slot is claimed with one compare-and-swap,
 * its counts are plain stores by the thread that made the trace and atomic adds by
 * the others), so a fork or a signal never finds it locked.  A fork
 * child drops the mapping and does not profile: the blocks it inherited stay valid
 * and free normally.
 */
#include <errno.h>
#include <execinfo.h>
#include <sys/mman.h>
#include <unistd.h>

#include "prof.h"

struct hz_prof_state hz_prof;
/* Samples served by the large path alive, each a mapping of its own: past
 * HZ_PROF_MAX_LIVE (8 GiB of live heap at the default rate) such samples are counted
 * as lost instead, so that the profile never takes the process near
 * vm.max_map_count (65530 by default).  Samples in pages need no such bound. */
#define HZ_PROF_MAX_LIVE 16384
static _Atomic uint32_t live_samples;
#define SAMPLE_MAP ((size_t)64 << 10)

/* ------------------------------------------------------------ intervals */

/* The exponential distribution, from one 64-bit draw x and a table that stays in
 * cache: x = 2^(64-k) m with m in [1/2, 1), k its leading zeros, so that -ln(x / 2^64)
 * = k ln 2 - ln m.  k ln 2 is a multiply; -ln m comes from a table of MANTISSA_STEPS
 * bins of m, each holding the mean of -ln m over its bin (m is uniform there), so
 * that the mean interval is rate exactly and a draw is one table read.  Built once,
 * when profiling starts; the rate never changes after. */
#define MANTISSA_STEPS (1u << HZ_PROF_MANTISSA_BITS)

/* ln(x) for x > 0 to double precision, without libm: x = m 2^e with m in [1, 2),
 * ln(m) = 2 atanh(t) with t = (m - 1) / (m + 1) < 1/3, a series that converges fast. */
static double ln(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int e = (int)(bits >> 52) - 1023;
    bits = (bits & (((uint64_t)1 << 52) - 1)) | ((uint64_t)1023 << 52);
    double m;
    memcpy(&m, &bits, sizeof m);
    double t = (m - 1.0) / (m + 1.0), t2 = t * t, term = t, sum = 0.0;
    for (int k = 1; k < 60; k += 2, term *= t2) sum += term / k;
    return (double)e * 0.6931471805599453 + 2.0 * sum;
}

void hz_prof_intervals(uint64_t rate) {
    hz_prof.ln2_rate = (uint64_t)(0.6931471805599453 * (double)rate + 0.5);
    /* The mean of -ln m over [a, b] is ((a ln a - a) - (b ln b - b)) / (b - a). */
    const double width = 0.5 / MANTISSA_STEPS;
    double f_a = 0.5 * ln(0.5) - 0.5; /* at a = 0.5, the first bin's start */
    for (unsigned j = 0; j < MANTISSA_STEPS; j++) {
        double b = 0.5 + (j + 1) * width, f_b = b * ln(b) - b;
        hz_prof.mantissa_rate[j] = (uint64_t)((f_a - f_b) / width * (double)rate + 0.5);
        f_a = f_b;
    }
}

/* A heap's first look: its generator is seeded, and its first interval drawn.  The
 * heaps that threads share are never seeded, and look again after 2^62 bytes. */
HZ_NOINLINE void hz_sample_seed(hz_heap_t *heap) {
    if (hz_heap_shared(heap)) {
        atomic_store_explicit(&heap->sample_left, HZ_SAMPLE_NEVER, memory_order_relaxed);
        return;
    }
    heap->sample_rng = (((uintptr_t)heap * 0x9E3779B97F4A7C15ULL) ^ hz_os_now_ms()) | 1;
    atomic_store_explicit(&heap->sample_left, hz_sample_interval(heap), memory_order_relaxed);
}

/* ------------------------------------------------------------ the table */

static uint64_t trace_hash(void *const *frames, int n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(uintptr_t)frames[i];
        h *= 0x100000001b3ULL;
        h ^= h >> 29;
    }
    return h < 2 ? h + 2 : h;
}

static bool same_frames(const struct hz_prof_trace *t, void *const *frames, int n) {
    if (t->depth != (uint32_t)n) return false;
    for (int i = 0; i < n; i++)
        if (t->frames[i] != (uint64_t)(uintptr_t)frames[i]) return false;
    return true;
}

/* The slot of this stack's trace, claimed if new; capacity if the table is full.  A
 * slot another thread is filling is passed over, so a stack may get two traces
 * (readers add them up). */
static uint32_t trace_slot(struct hz_prof_segment *s, void *const *frames, int n,
                           uint32_t writer) {
    uint64_t h = trace_hash(frames, n);
    for (uint32_t probe = 0; probe < HZ_PROF_TRACES; probe++) {
        uint32_t i = (uint32_t)(h + probe) & (HZ_PROF_TRACES - 1);
        struct hz_prof_trace *t = hz_prof_trace_at(s, i);
        _Atomic uint64_t *th = (_Atomic uint64_t *)&t->hash;
        uint64_t cur = atomic_load_explicit(th, memory_order_acquire);
        if (cur == 0) {
            if (!atomic_compare_exchange_strong_explicit(th, &cur, 1, memory_order_acquire,
                                                         memory_order_acquire)) {
                if (cur == h && same_frames(t, frames, n)) return i;
                continue;
            }
            t->depth = (uint32_t)n;
            t->writer = writer;
            for (int k = 0; k < n; k++) t->frames[k] = (uint64_t)(uintptr_t)frames[k];
            atomic_store_explicit(th, h, memory_order_release);
            return i;
        }
        if (cur == h && same_frames(t, frames, n)) return i;
    }
    return HZ_PROF_TRACES;
}

/* Out of line, so that the common case (the memo holds) keeps a small frame. */
_Static_assert(HZ_UNWIND_FRAMES >= HZ_PROF_MAX_FRAMES + 2, "a memo holds a walk");
HZ_NOINLINE uint32_t hz_prof_walked(struct hz_prof_segment *s, hz_heap_t *heap, int n) {
    void **frames = heap->stack_memo.frames;
    int skip = 0; /* frames[0] is where the sampling function was called */
    if (n < 0) {
        int saved_errno = errno; /* backtrace() may set it: invisible */
        heap->sampling = true;   /* and what it allocates is not sampled */
        n = backtrace(frames, HZ_PROF_MAX_FRAMES + 2);
        heap->sampling = false;
        errno = saved_errno;
        skip = 2; /* in here, then in the sampling function */
    }
    return n > skip ? trace_slot(s, frames + skip, n - skip, hz_prof_writer(heap))
                    : HZ_PROF_TRACES;
}

/* A large sample that could not be served as one: counted as lost, allocated
 * normally. */
static void *large_sample_lost(struct hz_prof_segment *s) {
    atomic_fetch_sub_explicit(&live_samples, 1, memory_order_relaxed);
    hz_prof_add(&s->samples_lost, 1);
    return NULL;
}

void *hz_prof_alloc(size_t size, size_t alignment, bool *zero) {
    struct hz_prof_segment *s = atomic_load_explicit(&hz_prof.seg, memory_order_acquire);
    if (s == NULL) return NULL;
    if (atomic_fetch_add_explicit(&live_samples, 1, memory_order_relaxed) >= HZ_PROF_MAX_LIVE)
        return large_sample_lost(s);
    /* One mapping size for all small samples (see above); the profile counts the
     * size asked for. */
    size_t serve = size < SAMPLE_MAP - HZ_LARGE_HEADER ? SAMPLE_MAP - HZ_LARGE_HEADER : size;
    hz_tls_heap->sampling = true;
    void *p = hz_large_alloc(serve, alignment, false, zero);
    hz_tls_heap->sampling = false;
    if (p == NULL) return large_sample_lost(s);
    hz_large_t *h = hz_large_header(p);
    h->sample = hz_prof_take_trace(s, hz_tls_heap, size) + 1; /* capacity + 1: in no trace */
    h->sample_size = size;
    return p;
}

void hz_prof_release(hz_large_t *h) {
    uint32_t slot = h->sample - 1;
    h->sample = 0;
    if (atomic_load_explicit(&hz_prof.seg, memory_order_relaxed) != NULL)
        atomic_fetch_sub_explicit(&live_samples, 1, memory_order_relaxed);
    hz_prof_forget(hz_tls_heap, slot, h->sample_size);
}

/* ------------------------------------------------------------ samples in pages
 * (prof.h), for the files below it */

void *hz_prof_block(const hz_page_t *page, const void *p) { return hz_sample_block(page, p); }

void *hz_prof_unmark(const hz_heap_t *heap, const hz_page_t *page, void *p) {
    return hz_sample_unmark(heap, page, p);
}

/* ------------------------------------------------------------ start, fork, stop */

/* The segment's bytes: of this process's constants, as hz_prof_trace_at places them. */
size_t hz_prof_segment_size(void) {
    return hz_align_up(sizeof(struct hz_prof_segment) +
                           (size_t)HZ_PROF_TRACES * sizeof(struct hz_prof_trace),
                       hz_os_page_size());
}

/* In a fork child (init.c's handler): no profiling, and the parent's table is not
 * ours to update. */
void hz_prof_fork_child(void) {
    atomic_store_explicit(&hz_prof.rate, 0, memory_order_relaxed);
    struct hz_prof_segment *s = atomic_exchange(&hz_prof.seg, NULL);
    if (s != NULL) munmap(s, hz_prof_segment_size());
}

void hz_prof_start(struct hz_prof_segment *s, size_t size, uint64_t rate) {
    s->layout_version = HZ_PROF_LAYOUT_VERSION;
    s->header_size = (uint32_t)sizeof(struct hz_prof_segment);
    s->total_size = size;
    s->pid = (uint64_t)getpid();
    s->sample_rate = rate;
    s->trace_capacity = HZ_PROF_TRACES;
    s->trace_size = (uint32_t)sizeof(struct hz_prof_trace);
    __atomic_store_n(&s->magic, HZ_PROF_MAGIC, __ATOMIC_RELEASE);
    /* backtrace's first call loads libgcc_s, which allocates: now, not mid-sample. */
    void *warm[2];
    (void)backtrace(warm, 2);
    hz_prof_intervals(rate);
    atomic_store_explicit(&hz_prof.seg, s, memory_order_release);
    atomic_store_explicit(&hz_prof.rate, rate, memory_order_release);
    /* This thread may have allocated before: its countdown reads "never".  (A
     * shared heap's first look sets it back: sample_seed.) */
    atomic_store_explicit(&hz_tls_heap->sample_left, 0, memory_order_relaxed);
}

/* At exit: sampling stops, the mapping stays (threads may still free). */
bool hz_prof_stop(void) {
    atomic_store_explicit(&hz_prof.rate, 0, memory_order_relaxed);
    return atomic_load_explicit(&hz_prof.seg, memory_order_relaxed) != NULL;
}
