/* stats.c - merging per-thread counters into process-wide figures: hz_stats_get,
 * mallinfo2, malloc_stats, malloc_info, and the build configuration string.  The
 * fast paths only bump fields of their own heap; everything here runs in the reader. */
#include <errno.h>
#include <malloc.h>
#include <unistd.h>

#include "internal.h"
#include "hakozuna.h"
#include "posix.h"

/* The process-wide counters: here until the stats segment takes them (shm.c). */
hz_global_stats_t hz_gstats_own;
hz_global_stats_t *hz_gstats_at = &hz_gstats_own;

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed) /* heap counters */
#define HZ_STR_(x) #x
#define HZ_STR(x) HZ_STR_(x)
#define HZ_VERSION_TEXT                                                                 \
    "hakozuna " HZ_STR(HZ_VERSION_MAJOR) "." HZ_STR(HZ_VERSION_MINOR) "." HZ_STR(        \
        HZ_VERSION_PATCH) " (" HZ_VARIANT_NAME ")"

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
    m->bytes_dirty += __atomic_load_n(&hz_heap_slot(heap)->bytes_dirty, __ATOMIC_RELAXED);
}

static void merge_all(merged_t *m) {
    memset(m, 0, sizeof *m);
    hz_heaps_visit(merge_heap, m);
    /* Frees by threads without a heap: remote frees their owners count received. */
    for (unsigned c = 1; c < HZ_CLASSES; c++) {
        uint64_t n = __atomic_load_n(&hz_heapless_frees[c], __ATOMIC_RELAXED);
        m->frees[c] += n;
        m->remote_sent += n;
    }
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
        if (m.mallocs[c] > m.frees[c]) in_use += (m.mallocs[c] - m.frees[c]) * hz_class_block[c];
    }
    s.mallocs += hz_gstat_load(large_allocs);
    s.frees += hz_gstat_load(large_frees);
    s.bytes_in_use = in_use + hz_gstat_load(large_bytes);
    s.bytes_mapped = hz_gstat_load(bytes_mapped);
    s.bytes_purged = hz_gstat_load(bytes_purged);
    s.bytes_unmapped = hz_gstat_load(bytes_unmapped);
    s.remote_frees_sent = m.remote_sent;
    s.remote_frees_recv = m.remote_recv;
    s.remote_batches = m.remote_batches;
    s.foreign_frees = hz_gstat_load(foreign_frees);
    s.large_allocs = hz_gstat_load(large_allocs);
    s.large_cache_hits = hz_gstat_load(large_cache_hits);
    s.heaps_created = hz_gstat_load(heaps_created);
    s.heaps_adopted = hz_gstat_load(heaps_adopted);
    s.threads_live = hz_gstat_load(threads_live);
    s.segments_mapped = hz_gstat_load(segments_mapped);
    s.bytes_dirty = m.bytes_dirty + hz_gstat_load(cached_dirty);
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
    mi.hblks = (size_t)hz_large_live();
    mi.hblkhd = (size_t)hz_gstat_load(large_bytes);
    mi.uordblks = s.bytes_in_use;
    mi.fordblks = s.bytes_mapped > s.bytes_in_use ? s.bytes_mapped - s.bytes_in_use : 0;
    return mi;
}

/* ------------------------------------------------ malloc_stats, malloc_info */
/* One figure of malloc_stats, in glibc's "system bytes     = %10u" columns. */
static void stats_line(int fd, const char *name, uint64_t v) {
    hz_line_t l = {.n = 0};
    hz_line_str(&l, name);
    for (size_t i = strlen(name); i < 17; i++) hz_line_str(&l, " ");
    hz_line_str(&l, "= ");
    hz_line_u64_width(&l, v, 10);
    hz_os_write_fd(fd, hz_line_end(&l));
}

/* glibc prints one section per arena, then the totals.  hakozuna's per-thread heaps
 * are not arenas a caller could act on, so only the totals are printed: glibc's
 * "system bytes" and "in use bytes" under its "Total (incl. mmap):" heading, then
 * hakozuna's own counters.  Written to fd (malloc_stats: stderr, as glibc's) with
 * write(2), without stdio or malloc: formatted in a buffer on the stack. */
void hz_stats_report(int fd) {
    hz_stats_snapshot_t m;
    hz_stats_snapshot(&m);
    const struct hz_stats *s = &m.totals;
    hz_os_write_fd(fd, HZ_VERSION_TEXT ":\nTotal (incl. mmap):\n");
    stats_line(fd, "system bytes", s->bytes_mapped);
    stats_line(fd, "in use bytes", s->bytes_in_use);
    stats_line(fd, "committed bytes", hz_gstat_load(bytes_committed));
    stats_line(fd, "mallocs", s->mallocs);
    stats_line(fd, "frees", s->frees);
    stats_line(fd, "large blocks", hz_large_live());
    stats_line(fd, "large bytes", hz_gstat_load(large_bytes));
    stats_line(fd, "dirty bytes", s->bytes_dirty);
    stats_line(fd, "purged bytes", s->bytes_purged);
    stats_line(fd, "unmapped bytes", s->bytes_unmapped);
    stats_line(fd, "segments", s->segments_mapped);
    stats_line(fd, "threads live", s->threads_live);
    stats_line(fd, "heaps created", s->heaps_created);
    stats_line(fd, "remote frees", s->remote_frees_sent);
    stats_line(fd, "foreign frees", s->foreign_frees);
}

void hz_malloc_stats_impl(void) { hz_stats_report(STDERR_FILENO); }

/* One XML element of n attributes: <name a0="v0" a1="v1" .../>, each value the
 * string texts[i] when there is one, else the number values[i]. */
static void xml_element(FILE *fp, const char *name, const char *const *attrs,
                        const char *const *texts, const uint64_t *values, unsigned n) {
    hz_line_t l = {.n = 0};
    hz_line_str(&l, name);
    for (unsigned i = 0; i < n; i++) {
        hz_line_str(&l, " ");
        hz_line_str(&l, attrs[i]);
        hz_line_str(&l, "=\"");
        if (texts != NULL && texts[i] != NULL)
            hz_line_str(&l, texts[i]);
        else
            hz_line_u64(&l, values[i]);
        hz_line_str(&l, "\"");
    }
    hz_line_str(&l, "/>");
    fputs(hz_line_end(&l), fp);
}

static void xml_total(FILE *fp, const char *type, uint64_t count, uint64_t size) {
    static const char *const attrs[] = {"type", "count", "size"};
    const char *const texts[] = {type, NULL, NULL};
    const uint64_t values[] = {0, count, size};
    xml_element(fp, "<total", attrs, texts, values, 3);
}

static void xml_system(FILE *fp, const char *tag, const char *type, uint64_t size) {
    static const char *const attrs[] = {"type", "size"};
    const char *const texts[] = {type, NULL};
    const uint64_t values[] = {0, size};
    xml_element(fp, tag, attrs, texts, values, 2);
}

/* malloc_info in glibc's XML shape, with hakozuna's figures: the heaps of all threads
 * merged as one <heap nr="0">, whose <sizes> lists each size class with blocks in use
 * (glibc lists its free chunks there; hakozuna's free blocks are not counted), then
 * <total type="small"> for those blocks, <total type="mmap"> for the large ones
 * mapped one by one, and the address space mapped.
 *
 * fp is written with stdio, which may call malloc for its buffer: that is safe, since
 * the counters are read into m first and no allocator lock is held while writing -
 * the program calls malloc_info from outside the allocator, and the malloc stdio
 * makes is an ordinary one.  Only options 0 exists; other values are EINVAL, as
 * malloc_info(3) documents (glibc 2.36 returns EINVAL instead of -1). */
int hz_malloc_info_impl(int options, FILE *fp) {
    if (options != 0 || fp == NULL) {
        errno = EINVAL;
        return -1;
    }
    hz_stats_snapshot_t m;
    hz_stats_snapshot(&m);
    uint64_t small_count = 0, small_bytes = 0;
    fputs("<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n", fp);
    for (unsigned c = 1; c < HZ_CLASSES; c++) {
        if (m.mallocs[c] <= m.frees[c]) continue;
        static const char *const attrs[] = {"from", "to", "total", "count"};
        uint64_t n = m.mallocs[c] - m.frees[c];
        const uint64_t values[] = {c == 1 ? 1 : (uint64_t)hz_class_size[c - 1] + 1,
                                   hz_class_size[c], n * hz_class_size[c], n};
        xml_element(fp, "  <size", attrs, NULL, values, 4);
        small_count += n;
        small_bytes += n * hz_class_size[c];
    }
    fputs("</sizes>\n", fp);
    uint64_t mapped = m.totals.bytes_mapped;
    xml_total(fp, "small", small_count, small_bytes);
    xml_system(fp, "<system", "current", mapped);
    xml_system(fp, "<aspace", "total", mapped);
    fputs("</heap>\n", fp);
    xml_total(fp, "small", small_count, small_bytes);
    xml_total(fp, "mmap", hz_large_live(), hz_gstat_load(large_bytes));
    xml_system(fp, "<system", "current", mapped);
    xml_system(fp, "<system", "committed", hz_gstat_load(bytes_committed));
    xml_system(fp, "<aspace", "total", mapped);
    fputs("</malloc>\n", fp);
    return 0;
}

HZ_API const char *hz_version(void) { return HZ_VERSION_TEXT; }

HZ_API const char *hz_config_string(void) {
    return "variant=" HZ_VARIANT_NAME " segment_shift=" HZ_STR(HZ_SEGMENT_SHIFT)
           " remote_batch=" HZ_STR(HZ_REMOTE_BATCH) " outbox_slots=" HZ_STR(HZ_OUTBOX_SLOTS)
           " purge_delay_ms=" HZ_STR(HZ_PURGE_DELAY_MS) " dirty_budget=" HZ_STR(HZ_DIRTY_BUDGET)
           " large_cache_bytes=" HZ_STR(HZ_LARGE_CACHE_BYTES) " segment_cache=" HZ_STR(
               HZ_SEGMENT_CACHE) " thp=" HZ_STR(HZ_THP) " stats=" HZ_STR(HZ_STATS) " inbox_shards=" HZ_STR(
               HZ_INBOX_SHARDS) " stash_blocks=" HZ_STR(HZ_STASH_BLOCKS) " debug=" HZ_STR(HZ_DEBUG) " hardening=" HZ_STR(HZ_HARDENING);
}
