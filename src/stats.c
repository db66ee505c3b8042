/* stats.c - merging per-thread counters into process-wide figures: hz_stats_get,
 * mallinfo2, and the build configuration string.  The fast paths only bump fields of
 * their own heap; everything here runs in the reader. */
#include <errno.h>
#include <malloc.h>

#include "internal.h"
#include "hakozuna.h"
#include "posix.h"

hz_global_stats_t hz_gstats;
_Atomic uint64_t hz_heapless_frees[HZ_CLASSES];

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

typedef hz_stats_snapshot_t merged_t;

static void merge_heap(hz_heap_t *heap, void *arg) {
    merged_t *m = arg;
    for (unsigned c = 1; c < HZ_CLASSES; c++) {
        m->mallocs[c] += LOAD(heap->stats.mallocs[c]);
        m->frees[c] += LOAD(heap->stats.frees[c]);
    }
    m->remote_sent += LOAD(heap->stats.remote_sent);
    m->remote_recv += LOAD(heap->stats.remote_recv);
    m->remote_batches += LOAD(heap->stats.remote_batches);
    m->refills += LOAD(heap->stats.refills);
    m->pages_made += LOAD(heap->stats.pages_made);
    m->pages_retired += LOAD(heap->stats.pages_retired);
}

static void merge_all(merged_t *m) {
    memset(m, 0, sizeof *m);
    hz_heaps_visit(merge_heap, m);
    for (unsigned c = 1; c < HZ_CLASSES; c++) m->frees[c] += LOAD(hz_heapless_frees[c]);
}

HZ_API int hz_stats_get(struct hz_stats *out, size_t size) {
    if (out == NULL) {
        errno = EINVAL;
        return -1;
    }
    merged_t m;
    hz_stats_snapshot(&m);
    memcpy(out, &m.totals, size < sizeof m.totals ? size : sizeof m.totals);
    return 0;
}

/* Every counter of every heap, merged: totals plus per-class counts. */
void hz_stats_snapshot(hz_stats_snapshot_t *snap) {
    merged_t m;
    struct hz_stats s;
    memset(&s, 0, sizeof s);
    merge_all(&m);
    uint64_t in_use = 0;
    for (unsigned c = 1; c < HZ_CLASSES; c++) {
        s.mallocs += m.mallocs[c];
        s.frees += m.frees[c];
        if (m.mallocs[c] > m.frees[c]) in_use += (m.mallocs[c] - m.frees[c]) * hz_class_size[c];
    }
    s.mallocs += LOAD(hz_gstats.large_allocs);
    s.frees += LOAD(hz_gstats.large_frees);
    s.bytes_in_use = in_use + LOAD(hz_gstats.large_bytes);
    s.bytes_mapped = LOAD(hz_gstats.bytes_mapped);
    s.bytes_purged = LOAD(hz_gstats.bytes_purged);
    s.bytes_unmapped = LOAD(hz_gstats.bytes_unmapped);
    s.remote_frees_sent = m.remote_sent;
    s.remote_frees_recv = m.remote_recv;
    s.remote_batches = m.remote_batches;
    s.foreign_frees = LOAD(hz_gstats.foreign_frees);
    s.large_allocs = LOAD(hz_gstats.large_allocs);
    s.large_cache_hits = LOAD(hz_gstats.large_cache_hits);
    s.heaps_created = LOAD(hz_gstats.heaps_created);
    s.heaps_adopted = LOAD(hz_gstats.heaps_adopted);
    s.threads_live = LOAD(hz_gstats.threads_live);
    s.segments_mapped = LOAD(hz_gstats.segments_mapped);
    m.totals = s;
    *snap = m;
}

/* mallinfo2 from our counters: arena/hblkhd = bytes mapped, uordblks = bytes in use. */

struct mallinfo2 hz_mallinfo2_impl(void) {
    struct hz_stats s;
    struct mallinfo2 mi;
    memset(&mi, 0, sizeof mi);
    hz_stats_get(&s, sizeof s);
    mi.arena = s.bytes_mapped;
    mi.hblks = (size_t)LOAD(hz_gstats.large_allocs) - (size_t)LOAD(hz_gstats.large_frees);
    mi.hblkhd = (size_t)LOAD(hz_gstats.large_bytes);
    mi.uordblks = s.bytes_in_use;
    mi.fordblks = s.bytes_mapped > s.bytes_in_use ? s.bytes_mapped - s.bytes_in_use : 0;
    return mi;
}

#define HZ_STR_(x) #x
#define HZ_STR(x) HZ_STR_(x)

HZ_API const char *hz_version(void) {
    return "hakozuna " HZ_STR(HZ_VERSION_MAJOR) "." HZ_STR(HZ_VERSION_MINOR) "." HZ_STR(
        HZ_VERSION_PATCH) " (" HZ_VARIANT_NAME ")";
}

HZ_API const char *hz_config_string(void) {
    return "variant=" HZ_VARIANT_NAME " segment_shift=" HZ_STR(HZ_SEGMENT_SHIFT)
           " remote_batch=" HZ_STR(HZ_REMOTE_BATCH) " outbox_slots=" HZ_STR(HZ_OUTBOX_SLOTS)
           " purge_delay_ms=" HZ_STR(HZ_PURGE_DELAY_MS) " dirty_budget=" HZ_STR(HZ_DIRTY_BUDGET)
           " large_cache_bytes=" HZ_STR(HZ_LARGE_CACHE_BYTES) " segment_cache=" HZ_STR(
               HZ_SEGMENT_CACHE) " thp=" HZ_STR(HZ_THP) " stats=" HZ_STR(HZ_STATS) " inbox_shards=" HZ_STR(
               HZ_INBOX_SHARDS) " stash_blocks=" HZ_STR(HZ_STASH_BLOCKS) " debug=" HZ_STR(HZ_DEBUG) " hardening=" HZ_STR(HZ_HARDENING);
}
