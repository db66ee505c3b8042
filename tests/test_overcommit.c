/* test_overcommit.c - impossible requests fail as the kernel's overcommit policy says.
 *
 * Heuristic mode (vm.overcommit_memory=0): a single request larger than RAM + swap
 * is refused by the kernel, so malloc, calloc, realloc, posix_memalign and
 * aligned_alloc of 64 GiB .. 16 TiB (each size above RAM + swap) return NULL with
 * ENOMEM, as glibc's do: memory handed out must be charged, never mapped with
 * MAP_NORESERVE to fail later in the OOM killer.
 *
 * Strict mode (vm.overcommit_memory=2): run when this process may switch the
 * system to it for a moment (root, writable /proc/sys/vm/overcommit_memory); the
 * previous mode is restored before exit.  A request above what is left of the
 * commit limit fails with ENOMEM, and normal allocation keeps working.
 * Exit 77 when neither mode can be tested.
 */
#include "hz_test.h"

#include <malloc.h>
#include <signal.h>

#define GIB ((size_t)1 << 30)

static long meminfo_kib(const char *key) {
    char buf[8192];
    if (hz_test_read_file("/proc/meminfo", buf, sizeof buf) <= 0) return -1;
    const char *p = strstr(buf, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static int overcommit_mode(void) {
    char buf[16];
    if (hz_test_read_file("/proc/sys/vm/overcommit_memory", buf, sizeof buf) <= 0) return -1;
    return atoi(buf);
}

static void expect_enomem(const char *what, void *p, int err) {
    CHECK(p == NULL, "%s succeeded (%p): the request cannot be backed", what, p);
    CHECK(err == ENOMEM, "%s: errno %d, expected ENOMEM", what, err);
}

/* Every allocation function refuses `size`. */
static void refuse_all(size_t size) {
    char what[64];
    void *p;
    snprintf(what, sizeof what, "malloc(%zu GiB)", size / GIB);
    errno = 0;
    p = malloc(size);
    expect_enomem(what, p, errno);
    snprintf(what, sizeof what, "calloc(1, %zu GiB)", size / GIB);
    errno = 0;
    p = calloc(1, size);
    expect_enomem(what, p, errno);
    snprintf(what, sizeof what, "aligned_alloc(4096, %zu GiB)", size / GIB);
    errno = 0;
    p = aligned_alloc(4096, size);
    expect_enomem(what, p, errno);
    void *q = NULL;
    int rc = posix_memalign(&q, 1 << 16, size);
    CHECK(rc == ENOMEM && q == NULL, "posix_memalign(65536, %zu GiB) = %d", size / GIB, rc);
    char *small = malloc(100);
    CHECK(small != NULL, "malloc(100)");
    memset(small, 7, 100);
    snprintf(what, sizeof what, "realloc(p, %zu GiB)", size / GIB);
    errno = 0;
    p = realloc(small, size);
    expect_enomem(what, p, errno);
    CHECK(small[99] == 7, "realloc failure lost the block");
    free(small);
}

static void heuristic(void) {
    long ram = meminfo_kib("MemTotal:"), swap = meminfo_kib("SwapTotal:");
    CHECK(ram > 0 && swap >= 0, "cannot read /proc/meminfo");
    size_t have = ((size_t)ram + (size_t)swap) * 1024;
    int tested = 0;
    for (size_t size = 64 * GIB; size <= 16384 * GIB; size *= 4) {
        if (size <= have) continue;
        refuse_all(size);
        tested++;
    }
    printf("heuristic overcommit: %d sizes of 64 GiB .. 16 TiB above RAM + swap refused\n",
           tested);
}

static char saved_mode[16];
static void restore_mode(void) {
    int fd = open("/proc/sys/vm/overcommit_memory", O_WRONLY);
    if (fd >= 0) {
        ssize_t w = write(fd, saved_mode, strlen(saved_mode));
        (void)w;
        close(fd);
    }
}
static void on_signal(int sig) {
    restore_mode();
    signal(sig, SIG_DFL);
    raise(sig);
}

static int set_mode(const char *mode) {
    int fd = open("/proc/sys/vm/overcommit_memory", O_WRONLY);
    if (fd < 0) return 0;
    ssize_t w = write(fd, mode, strlen(mode));
    close(fd);
    return w == (ssize_t)strlen(mode);
}

/* Strict accounting for the shortest time: the checks, then the old mode back. */
static int strict(void) {
    if (geteuid() != 0) return 0;
    if (hz_test_read_file("/proc/sys/vm/overcommit_memory", saved_mode, sizeof saved_mode) <= 0)
        return 0;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGABRT, on_signal);
    if (!set_mode("2\n")) return 0;
    atexit(restore_mode);
    long limit = meminfo_kib("CommitLimit:"), used = meminfo_kib("Committed_AS:");
    CHECK(limit > 0 && used >= 0, "cannot read the commit limit");
    size_t left = limit > used ? (size_t)(limit - used) * 1024 : 0;
    /* More than is left, but far less than RAM + swap: only the strict policy refuses. */
    size_t size = left + 2 * GIB;
    char what[64];
    snprintf(what, sizeof what, "strict: malloc(%zu MiB)", size >> 20);
    errno = 0;
    void *p = malloc(size);
    int err = errno;
    if (p != NULL) free(p);
    /* Medium blocks too: their segments are committed as they are used. */
    void *blocks[64];
    for (int i = 0; i < 64; i++) {
        blocks[i] = malloc(100000);
        CHECK(blocks[i] != NULL, "strict: malloc(100000) failed");
        memset(blocks[i], i, 100000);
    }
    for (int i = 0; i < 64; i++) free(blocks[i]);
    restore_mode();
    expect_enomem(what, p, err);
    printf("strict overcommit: a request %zu MiB above the commit limit refused\n",
           (size - left) >> 20);
    return 1;
}

int main(void) {
    hz_test_require_loaded();
    int tested = 0;
    if (overcommit_mode() == 0) {
        heuristic();
        tested++;
    }
    tested += strict();
    if (!tested) SKIP("neither heuristic nor strict overcommit can be tested here");
    printf("PASS\n");
    return 0;
}
