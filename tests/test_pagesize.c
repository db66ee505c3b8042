/* test_pagesize.c - the page size is a run-time fact.
 *
 * The page size is the kernel's (AT_PAGESZ), or, in a build that simulates larger
 * pages (make check-pagesize sets HZ_TEST_PAGE_SIZE to the simulated size), that.
 *   1. valloc as the program's first allocation returns a page-aligned block.
 *   2. calloc returns zeroed memory after freed pages were purged: blocks of every
 *      small class are filled with a pattern, freed, the heap trimmed (purged), and
 *      the same sizes calloc'ed again.  The first unit of a segment shares its first
 *      OS page with the segment header, which is never purged; with 16 KiB pages
 *      that page holds 8 KiB of blocks that must not be taken for zero.
 */
#include "hz_test.h"

#include <malloc.h>
#include <sys/auxv.h>

#define PER_CLASS 64

static size_t expected_page_size(void) {
    size_t ps = (size_t)getauxval(AT_PAGESZ);
    const char *sim = getenv("HZ_TEST_PAGE_SIZE");
    if (sim != NULL && (size_t)atol(sim) > ps) ps = (size_t)atol(sim);
    return ps;
}

int main(void) {
    /* 1. Before anything else allocates. */
    void *first = valloc(1);
    size_t ps = expected_page_size();
    CHECK(first != NULL, "valloc(1)");
    CHECK(((uintptr_t)first & (ps - 1)) == 0, "first valloc(1) = %p is not aligned to the %zu-byte page",
          first, ps);
    void *pv = pvalloc(ps + 1);
    CHECK(pv != NULL && ((uintptr_t)pv & (ps - 1)) == 0, "pvalloc(%zu) = %p misaligned", ps + 1, pv);
    CHECK(malloc_usable_size(pv) >= 2 * ps, "pvalloc(%zu): usable %zu, not rounded to pages",
          ps + 1, malloc_usable_size(pv));
    free(pv);
    free(first);

    /* 2. Dirty every small class, free, purge, calloc. */
    static void *blocks[64][PER_CLASS];
    for (int round = 0; round < 3; round++) {
        for (size_t c = 0; c < 64; c++) {
            size_t size = 16 * (c + 1);
            for (int i = 0; i < PER_CLASS; i++) {
                blocks[c][i] = malloc(size);
                CHECK(blocks[c][i] != NULL, "malloc(%zu)", size);
                memset(blocks[c][i], 0xa5, size);
            }
        }
        for (size_t c = 0; c < 64; c++)
            for (int i = 0; i < PER_CLASS; i++) free(blocks[c][i]);
        malloc_trim(0);
        for (size_t c = 0; c < 64; c++) {
            size_t size = 16 * (c + 1);
            for (int i = 0; i < PER_CLASS; i++) {
                unsigned char *p = calloc(1, size);
                CHECK(p != NULL, "calloc(1, %zu)", size);
                for (size_t k = 0; k < size; k++)
                    CHECK(p[k] == 0, "round %d: calloc(1, %zu) = %p: byte %zu is 0x%02x", round, size,
                          (void *)p, k, p[k]);
                blocks[c][i] = p;
                memset(p, 0x5a, size);
            }
        }
        for (size_t c = 0; c < 64; c++)
            for (int i = 0; i < PER_CLASS; i++) free(blocks[c][i]);
        malloc_trim(0);
    }
    hz_test_require_loaded();
    printf("page size %zu: first valloc aligned, calloc zero after purge\n", ps);
    printf("PASS\n");
    return 0;
}
