/* footprint_prog.c - prints what this process has committed, in KiB: the sum of its
 * private writable mappings (the ones the kernel charges against the overcommit
 * limit), after a small program's worth of allocation.  Run by test_footprint.sh
 * with and without the allocator preloaded. */
#include "hz_test.h"

static long committed_kib(void) {
    static char buf[1 << 20];
    ssize_t n = hz_test_read_file("/proc/self/maps", buf, sizeof buf);
    if (n <= 0) return -1;
    long kib = 0;
    for (char *line = buf; line != NULL && *line != '\0';) {
        char *next = strchr(line, '\n');
        if (next != NULL) *next++ = '\0';
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && perms[1] == 'w' && perms[3] == 'p')
            kib += (long)((hi - lo) >> 10);
        line = next;
    }
    return kib;
}

int main(void) {
    /* A small program: a few hundred blocks of mixed sizes, half of them freed. */
    void *blocks[400];
    for (int i = 0; i < 400; i++) {
        size_t size = 16 + (size_t)(i * 37) % 3000;
        blocks[i] = malloc(size);
        if (blocks[i] == NULL) return 1;
        memset(blocks[i], i, size);
    }
    for (int i = 0; i < 400; i += 2) free(blocks[i]);
    printf("%ld\n", committed_kib());
    return 0;
}
