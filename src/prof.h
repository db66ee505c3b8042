/* prof.h - the heap profile's part on the allocation path (prof.c has the rest).
 *
 * A sample is drawn, its stack found and counted, and its block marked inline in the
 * allocator's entry that takes it (alloc.c), so that the stack's walk begins in that
 * entry's frame, which malloc's fast path jumps to: the memo of a loop's last walk
 * then holds only the program's return addresses, and a sample costs no call until
 * its stack is new. */
#ifndef HZ_PROF_H
#define HZ_PROF_H

#include "freelist.h"
#include "hakozuna_prof.h"

/* ------------------------------------------------------------ intervals */

/* A heap's first look (prof.c): its generator seeded, its first interval drawn. */
void hz_sample_seed(hz_heap_t *heap) HZ_HIDDEN;

HZ_INLINE uint64_t hz_sample_rng_next(hz_heap_t *heap) { /* xorshift64* */
    uint64_t x = heap->sample_rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    heap->sample_rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* An interval exponentially distributed with mean hz_prof.rate, from one 64-bit draw
 * x = 2^(64-k) m with m in [1/2, 1): -ln(x / 2^64) = k ln 2 - ln m, k ln 2 a multiply,
 * -ln m a table read (prof.c, hz_prof_intervals). */
HZ_INLINE uint64_t hz_sample_interval(hz_heap_t *heap) {
    uint64_t x = hz_sample_rng_next(heap); /* never 0: the state is not, the multiplier is odd */
    unsigned k = (unsigned)__builtin_clzll(x);
    unsigned bin = (unsigned)((x << k) >> (63 - HZ_PROF_MANTISSA_BITS)) &
                   ((1u << HZ_PROF_MANTISSA_BITS) - 1);
    return k * hz_prof.ln2_rate + hz_prof.mantissa_rate[bin];
}

/* After hz_sample_due: resets the countdown, true when this allocation is a sample.
 * Profiling off, the countdown reads "never" again; a new heap starts at 0, and its
 * first interval is drawn, not taken as a sample. */
HZ_INLINE bool hz_sample_take(hz_heap_t *heap) {
    /* acquire: the intervals were built before the rate was published */
    if (hz_likely(atomic_load_explicit(&hz_prof.rate, memory_order_acquire) == 0)) {
        atomic_store_explicit(&heap->sample_left, HZ_SAMPLE_NEVER, memory_order_relaxed);
        return false;
    }
    if (hz_unlikely(heap->sample_rng == 0)) {
        hz_sample_seed(heap);
        return false;
    }
    atomic_store_explicit(&heap->sample_left, hz_sample_interval(heap), memory_order_relaxed);
    return !heap->sampling;
}

/* ------------------------------------------------------------ counts */

/* Trace i of s.  The header's sizes are for readers: this process places and bounds
 * its traces by its own constants, which no other process that opens the segment
 * can change. */
HZ_INLINE struct hz_prof_trace *hz_prof_trace_at(struct hz_prof_segment *s, uint32_t i) {
    return (struct hz_prof_trace *)(s + 1) + i;
}

/* A count only its writer updates: no locked instruction, and readers still see
 * whole words.  (A signal handler that samples between the load and the store on the
 * same thread loses one count; readers clamp a live count at 0.) */
HZ_INLINE void hz_prof_bump(uint64_t *field, uint64_t v) {
    _Atomic uint64_t *a = (_Atomic uint64_t *)field;
    atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

HZ_INLINE void hz_prof_add(uint64_t *field, uint64_t v) {
    atomic_fetch_add_explicit((_Atomic uint64_t *)field, v, memory_order_relaxed);
}

/* The heap's name in the traces it makes: 1 + its thread slot in the stats segment,
 * which a heap keeps for its life and shares with no other heap, and a heap serves
 * one thread at a time.  0 (no slot, or one being given) makes no trace its own. */
HZ_INLINE uint32_t hz_prof_writer(const hz_heap_t *heap) {
    uint32_t slot = __atomic_load_n(&heap->shm_slot, __ATOMIC_RELAXED);
    return slot == UINT32_MAX ? 0 : slot;
}

/* A sample of size bytes, counted in t by heap (alloc) or freed (!alloc). */
HZ_INLINE void hz_prof_count(struct hz_prof_trace *t, const hz_heap_t *heap, size_t size,
                             bool alloc) {
    uint32_t writer = hz_prof_writer(heap);
    if (writer != 0 && t->writer == writer) {
        struct hz_prof_counts *c = &t->counts[0];
        hz_prof_bump(alloc ? &c->alloc_count : &c->freed_count, 1);
        hz_prof_bump(alloc ? &c->alloc_bytes : &c->freed_bytes, size);
    } else {
        struct hz_prof_counts *c = &t->counts[1];
        hz_prof_add(alloc ? &c->alloc_count : &c->freed_count, 1);
        hz_prof_add(alloc ? &c->alloc_bytes : &c->freed_bytes, size);
    }
}

/* ------------------------------------------------------------ stacks */

/* The slot, in s's table, of the stack hz_unwind could not match with the heap's
 * memo (prof.c): n is what it returned, the memo's frames what it found. */
uint32_t hz_prof_walked(struct hz_prof_segment *s, hz_heap_t *heap, int n) HZ_HIDDEN;

/* The slot of the stack of the function this expands in, in s's table
 * (HZ_PROF_TRACES: in none), the sample counted.  The heap's memo of its last walk
 * spares a stack that repeats its walk and its search of the table. */
HZ_INLINE uint32_t hz_prof_take_trace(struct hz_prof_segment *s, hz_heap_t *heap, size_t size) {
    hz_unwind_memo_t *memo = &heap->stack_memo;
    int n = hz_unwind(memo->frames, HZ_PROF_MAX_FRAMES, memo);
    if (n != HZ_UNWIND_SAME) memo->trace = hz_prof_walked(s, heap, n);
    uint32_t slot = memo->trace;
    if (hz_unlikely(slot >= HZ_PROF_TRACES)) {
        hz_prof_add(&s->samples_lost, 1);
        return HZ_PROF_TRACES;
    }
    hz_prof_count(hz_prof_trace_at(s, slot), heap, size, true);
    return slot;
}

/* ------------------------------------------------------------ samples in pages
 * A small sample is a block of its page with the caller's bytes HZ_SAMPLE_MARK bytes
 * in.  Free finds that the pointer starts no block, and the mark tells a sample from
 * a bad pointer: its first word is the block's free-list word (freelist.h) holding
 * key ^ block ^ tag, where tag, made from the second word (the trace's slot and the
 * sampled size), is odd, so the word never decodes as a link (a block with it reads
 * as handed out) and cannot be forged without the process's secret key.  A block
 * handed out again after its sample was freed has 0 there, a freed one a link: a
 * second free of the sample's pointer is reported as a bad pointer. */
HZ_INLINE uint64_t hz_prof_mark_tag(uint64_t info) { return (info * 0x9E3779B97F4A7C15ULL) | 1; }

/* block, just allocated from a page with room for size + HZ_SAMPLE_MARK bytes,
 * becomes a sample of size bytes: its stack is recorded (that of the function this
 * expands in), its mark written; returns the pointer to hand out, past the mark. */
HZ_INLINE void *hz_prof_mark(hz_heap_t *heap, void *block, size_t size) {
    struct hz_prof_segment *s = atomic_load_explicit(&hz_prof.seg, memory_order_acquire);
    uint64_t *w = block;
    uint32_t slot = s != NULL ? hz_prof_take_trace(s, heap, size) : HZ_PROF_TRACES;
    uint64_t info = (uint64_t)slot << 32 | (uint32_t)size;
    w[1] = info;
    w[0] = hz_list_key ^ (uint64_t)(uintptr_t)block ^ hz_prof_mark_tag(info);
    return (char *)block + HZ_SAMPLE_MARK;
}

/* The block of page whose sample p is (p handed out past its mark), or NULL. */
HZ_INLINE void *hz_sample_block(const hz_page_t *page, const void *p) {
#if HZ_SAMPLE_IN_PAGE
    uint64_t *w = (uint64_t *)(uintptr_t)((const char *)p - HZ_SAMPLE_MARK);
    if (!hz_block_carved(page, w)) return NULL;
    if ((w[0] ^ hz_list_key ^ (uint64_t)(uintptr_t)w) != hz_prof_mark_tag(w[1])) return NULL;
    return w;
#else
    (void)page, (void)p;
    return NULL;
#endif
}

/* A sample of size bytes in trace slot leaves the profile; heap is the freeing
 * thread's. */
HZ_INLINE void hz_prof_forget(const hz_heap_t *heap, uint32_t slot, size_t size) {
    struct hz_prof_segment *s = atomic_load_explicit(&hz_prof.seg, memory_order_acquire);
    if (s == NULL) return;              /* a fork child's */
    if (slot >= HZ_PROF_TRACES) return; /* in no trace */
    hz_prof_count(hz_prof_trace_at(s, slot), heap, size, false);
}

/* p, of page, is not a block start: if it is a sample's, that sample leaves the
 * profile (heap: the freeing thread's) and its block is returned, to be freed;
 * anything else is reported.  (hz_prof_unmark, prof.c, for the files below.) */
HZ_INLINE void *hz_sample_unmark(const hz_heap_t *heap, const hz_page_t *page, void *p) {
    uint64_t *w = hz_sample_block(page, p);
    if (w == NULL) hz_free_invalid(page, p);
    hz_prof_forget(heap, (uint32_t)(w[1] >> 32), (uint32_t)w[1]);
    return w;
}

#endif /* HZ_PROF_H */
