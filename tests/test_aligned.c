/* test_aligned.c - aligned blocks come from ordinary pages, not a mapping each.
 *
 * 100,000 live posix_memalign(8192, 64) blocks, then a sweep of alignments from
 * 16 B to 1 MiB against sizes around each alignment, through posix_memalign,
 * aligned_alloc and memalign.  Every block must be aligned, have at least the size
 * asked for as usable size, hold what was written to it, and free cleanly; and the
 * number of mappings in /proc/self/maps must stay bounded (one mapping per block
 * would exhaust vm.max_map_count, 65,530 by default, long before 100,000).
 */
#include "hz_test.h"

#include <malloc.h>

#define MANY 100000
#define MAPS_BOUND 2000 /* new lines of /proc/self/maps allowed over the whole test */

static long maps_lines(void) {
    static char buf[4 << 20];
    ssize_t n = hz_test_read_file("/proc/self/maps", buf, sizeof buf);
    CHECK(n > 0, "cannot read /proc/self/maps");
    long lines = 0;
    for (ssize_t i = 0; i < n; i++) lines += buf[i] == '\n';
    return lines;
}

static void check_block(const char *how, void *p, size_t align, size_t size, unsigned char fill) {
    CHECK(p != NULL, "%s(%zu, %zu) failed: %s", how, align, size, strerror(errno));
    CHECK(((uintptr_t)p & (align - 1)) == 0, "%s(%zu, %zu) = %p is misaligned", how, align, size, p);
    size_t usable = malloc_usable_size(p);
    CHECK(usable >= size, "%s(%zu, %zu): usable size %zu", how, align, size, usable);
    memset(p, fill, size);
}

static void check_fill(const void *p, size_t size, unsigned char fill) {
    const unsigned char *b = p;
    for (size_t i = 0; i < size; i += 61)
        CHECK(b[i] == fill, "block %p byte %zu overwritten", p, i);
    if (size > 0) CHECK(b[size - 1] == fill, "block %p last byte overwritten", p);
}

/* 100,000 live posix_memalign(8192, 64). */
static void many_live(void) {
    void **blocks = calloc(MANY, sizeof *blocks);
    CHECK(blocks != NULL, "calloc");
    long before = maps_lines();
    for (size_t i = 0; i < MANY; i++) {
        int rc = posix_memalign(&blocks[i], 8192, 64);
        CHECK(rc == 0, "posix_memalign(8192, 64) #%zu: %s", i, strerror(rc));
        check_block("posix_memalign", blocks[i], 8192, 64, (unsigned char)i);
    }
    long during = maps_lines();
    printf("100000 x posix_memalign(8192, 64): /proc/self/maps %ld -> %ld lines\n", before, during);
    CHECK(during - before < MAPS_BOUND, "%ld new mappings for 100000 aligned blocks",
          during - before);
    for (size_t i = 0; i < MANY; i++) check_fill(blocks[i], 64, (unsigned char)i);
    for (size_t i = 0; i < MANY; i++) free(blocks[i]);
    free(blocks);
}

/* Alignments 16 B .. 1 MiB, sizes around each, 8 live blocks per case. */
static void sweep(void) {
    long before = maps_lines();
    enum { LIVE = 8 };
    for (size_t align = 16; align <= ((size_t)1 << 20); align *= 2) {
        const size_t sizes[] = {1, 64, align / 2 + 1, align - 1, align, align + 1, 3 * align - 5,
                                100000};
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t size = sizes[s];
            void *live[3][LIVE];
            for (int k = 0; k < LIVE; k++) {
                unsigned char fill = (unsigned char)(k * 3 + 1);
                int rc = posix_memalign(&live[0][k], align < sizeof(void *) ? sizeof(void *) : align,
                                        size);
                CHECK(rc == 0, "posix_memalign(%zu, %zu): %s", align, size, strerror(rc));
                check_block("posix_memalign", live[0][k], align, size, fill);
                live[1][k] = aligned_alloc(align, (size + align - 1) / align * align);
                check_block("aligned_alloc", live[1][k], align, size, (unsigned char)(fill + 1));
                live[2][k] = memalign(align, size);
                check_block("memalign", live[2][k], align, size, (unsigned char)(fill + 2));
            }
            for (int k = 0; k < LIVE; k++) {
                unsigned char fill = (unsigned char)(k * 3 + 1);
                for (int f = 0; f < 3; f++) check_fill(live[f][k], size, (unsigned char)(fill + f));
            }
            for (int k = 0; k < LIVE; k++)
                for (int f = 0; f < 3; f++) free(live[f][k]);
        }
    }
    long after = maps_lines();
    printf("alignment sweep 16 B .. 1 MiB: /proc/self/maps %ld -> %ld lines\n", before, after);
    CHECK(after - before < MAPS_BOUND / 4, "%ld new mappings after the sweep", after - before);
}

int main(void) {
    hz_test_require_loaded();
    many_live();
    sweep();
    malloc_trim(0);
    printf("PASS\n");
    return 0;
}
