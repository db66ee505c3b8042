/* debug_valgrind.c - a program with one planted leak and one planted overrun, for
 * memcheck to find while the program runs on the checked variant:
 *
 *     LD_PRELOAD=libhakozuna_debug.so valgrind --soname-synonyms=somalloc=NONE \
 *         --leak-check=full ./debug_valgrind
 *
 * must report the 100-byte block as "definitely lost" and the write one byte past the
 * 32-byte block as an "Invalid write".  The overrun block is kept (never freed), so
 * the program itself ends normally; around both, ordinary allocation work runs
 * that must draw no report.
 */
#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;
static void *volatile kept; /* keeps the overrun block reachable */

/* Allocated, used, and every pointer to it dropped. */
static __attribute__((noinline)) void plant_leak(void) {
    char *p = malloc(100);
    if (p == NULL) exit(2);
    memset(p, 'L', 100);
    sink = p;
    sink = NULL;
}

/* One byte written past the end of a 32-byte block. */
static __attribute__((noinline)) void plant_overrun(void) {
    volatile size_t n = 32; /* hidden from the compiler, which would refuse the overrun */
    char *p = malloc(n);
    if (p == NULL) exit(2);
    memset(p, 'O', n);
    volatile char *v = p;
    /* cppcheck-suppress arrayIndexOutOfBounds ; the planted overrun */
    v[n] = '!';
    kept = p;
}

/* Correct work that must draw no report: sizes small to large, realloc, calloc. */
static __attribute__((noinline)) unsigned long ordinary_work(void) {
    unsigned long sum = 0;
    char *list[64] = {0};
    for (unsigned i = 0; i < 2000; i++) {
        unsigned k = i % 64;
        size_t n = (i * 7919u) % (i % 50 == 0 ? 300000u : 3000u);
        free(list[k]);
        list[k] = (i & 1) ? calloc(1, n + 1) : malloc(n + 1);
        if (list[k] == NULL) exit(2);
        memset(list[k], (int)i, n + 1);
        if (i % 7 == 0) {
            char *q = realloc(list[k], n + 100);
            if (q == NULL) exit(2);
            list[k] = q;
        }
        sum += (unsigned char)list[k][n];
    }
    for (unsigned k = 0; k < 64; k++) free(list[k]);
    return sum;
}

int main(void) {
    unsigned long sum = ordinary_work();
    plant_leak();
    plant_overrun();
    sum += ordinary_work();
    printf("debug_valgrind: done (%lu)\n", sum);
    return 0;
}
