/* footprint_prog.c - prints what this process has committed, in KiB: the sum of its
 * private writable mappings (the ones the kernel charges against the overcommit
 * limit), after a small program's worth of allocation.  Run by test_footprint.sh
 * with and without the allocator preloaded.
 *
 * `footprint_prog thread` prints instead the KiB a new thread makes resident when
 * it allocates one block of every size from 16 to 2048 bytes in steps of 16 and
 * writes its first byte: what a worker thread that touches many sizes but keeps
 * few blocks of each costs (a page of every size class it used). */
#include "hz_test.h"

#include <pthread.h>

#define THREAD_SIZES 128

static void *few_of_each(void *arg) {
    long *grown = arg;
    static void *blocks[THREAD_SIZES];
    long before = hz_test_rss_kib();
    for (int i = 0; i < THREAD_SIZES; i++) {
        blocks[i] = malloc((size_t)(i + 1) * 16);
        if (blocks[i] == NULL) return NULL;
        *(volatile char *)blocks[i] = 1;
    }
    long after = hz_test_rss_kib();
    for (int i = 0; i < THREAD_SIZES; i++) free(blocks[i]);
    *grown = before < 0 || after < 0 ? -1 : after - before;
    return NULL;
}

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

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "thread") == 0) {
        long grown = -1;
        pthread_t t;
        if (pthread_create(&t, NULL, few_of_each, &grown) != 0 || pthread_join(t, NULL) != 0)
            return 1;
        printf("%ld\n", grown);
        return grown < 0;
    }
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
