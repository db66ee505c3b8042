/* hz_test.h - small helpers shared by the hakozuna test programs.
 *
 * The tests never link against the library.  They run with libhakozuna.so
 * preloaded and reach its extensions through dlsym(RTLD_DEFAULT, ...), so the
 * same binaries can also be run against the system allocator while developing:
 * set HZ_TEST_ALLOW_SYSTEM=1 and the checks that need hakozuna are skipped.
 *
 * Usable from C11 and C++17.  Include this header first.
 */
#ifndef HZ_TEST_H
#define HZ_TEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>

/* Declarations only: nothing below calls an hz_* function directly. */
#include "../include/hakozuna.h"

#if defined(__GNUC__)
#define HZ_TEST_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define HZ_TEST_NORETURN __attribute__((noreturn))
#define HZ_TEST_UNUSED __attribute__((unused))
#else
#define HZ_TEST_PRINTF(f, a)
#define HZ_TEST_NORETURN
#define HZ_TEST_UNUSED
#endif

/* ------------------------------------------------------------ reporting */

/* Writes with write(2) so that it can be used from a forked child or a thread
 * without touching stdio locks that another thread may hold. */
static inline void hz_test_vmsg(const char *prefix, const char *file, int line,
                                const char *fmt, va_list ap)
{
    char buf[1024];
    int n;
    if (file)
        n = snprintf(buf, sizeof buf, "%s%s:%d: ", prefix, file, line);
    else
        n = snprintf(buf, sizeof buf, "%s", prefix);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof buf)
        n = (int)sizeof buf - 1;
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(2, buf + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

static inline HZ_TEST_NORETURN HZ_TEST_PRINTF(3, 4) void
hz_test_fail_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hz_test_vmsg("FAIL ", file, line, fmt, ap);
    va_end(ap);
    _exit(1);
}

static inline HZ_TEST_NORETURN HZ_TEST_PRINTF(1, 2) void
hz_test_skip(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    va_start(ap, fmt);
    hz_test_vmsg("SKIP: ", NULL, 0, fmt, ap);
    va_end(ap);
    exit(77);
}

/* CHECK(cond, fmt, ...): on failure print "FAIL file:line: message" and exit 1. */
#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond))                                                            \
            hz_test_fail_at(__FILE__, __LINE__, __VA_ARGS__);                   \
    } while (0)

#define FAIL(...) hz_test_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define SKIP(...) hz_test_skip(__VA_ARGS__)

/* ------------------------------------------------------------- symbols */

static inline void *hz_test_sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

/* Nonzero when libhakozuna is in the process (it exports hz_version). */
static inline int hz_test_loaded(void)
{
    return hz_test_sym("hz_version") != NULL;
}

/* Nonzero under the checked variant, whose poisoning and quarantine make long runs
 * several times slower: such tests do a smaller run there. */
static inline int hz_test_checked_variant(void)
{
    const char *v = getenv("HZ_TEST_VARIANT");
    return v && strcmp(v, "hakozuna_debug") == 0;
}

/* Nonzero under the hardened variant. */
static inline int hz_test_hardened_variant(void)
{
    const char *v = getenv("HZ_TEST_VARIANT");
    return v && strcmp(v, "hakozuna_hardened") == 0;
}

/* Nonzero under a variant that holds freed blocks back in a quarantine on purpose
 * (checked, hardened): memory returned after a free is reported there, not bounded. */
static inline int hz_test_quarantine_variant(void)
{
    return hz_test_checked_variant() || hz_test_hardened_variant();
}

static inline int hz_test_allow_system(void)
{
    const char *e = getenv("HZ_TEST_ALLOW_SYSTEM");
    return e && strcmp(e, "1") == 0;
}

/* Returns 1 when hakozuna is loaded.  Otherwise fails the test with
 * "hakozuna is not loaded", unless HZ_TEST_ALLOW_SYSTEM=1, in which case it
 * returns 0 and the caller skips the checks that need hakozuna. */
static inline int hz_test_require_loaded(void)
{
    void *sym = hz_test_sym("hz_version");
    if (sym) {
        const char *(*ver)(void);
        memcpy(&ver, &sym, sizeof ver);
        const char *v = ver();
        printf("allocator: %s\n", v ? v : "(null)");
        fflush(stdout);
        return 1;
    }
    if (hz_test_allow_system()) {
        printf("allocator: system (HZ_TEST_ALLOW_SYSTEM=1; hakozuna checks skipped)\n");
        fflush(stdout);
        return 0;
    }
    fprintf(stderr, "FAIL: hakozuna is not loaded\n");
    exit(1);
}

/* Fills *st from hz_stats_get; returns 1 on success, 0 if unavailable. */
static inline int hz_test_stats(struct hz_stats *st)
{
    memset(st, 0, sizeof *st);
    void *sym = hz_test_sym("hz_stats_get");
    if (!sym)
        return 0;
    int (*get)(struct hz_stats *, size_t);
    memcpy(&get, &sym, sizeof get);
    return get(st, sizeof *st) == 0;
}

/* hz_usable_size through dlsym; returns (size_t)-1 if unavailable. */
static inline size_t hz_test_usable_size(const void *p)
{
    void *sym = hz_test_sym("hz_usable_size");
    if (!sym)
        return (size_t)-1;
    size_t (*fn)(const void *);
    memcpy(&fn, &sym, sizeof fn);
    return fn(p);
}

/* ------------------------------------------------------ memory numbers */

static inline ssize_t hz_test_read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    return (ssize_t)len;
}

/* The process's address space in bytes (VmSize in /proc/self/status), or 0: what
 * the tests that cap RLIMIT_AS start from. */
static inline size_t hz_test_vm_size(void)
{
    char buf[8192];
    const char *vm;
    if (hz_test_read_file("/proc/self/status", buf, sizeof buf) <= 0 ||
        (vm = strstr(buf, "VmSize:")) == NULL)
        return 0;
    return (size_t)strtoul(vm + 7, NULL, 10) << 10;
}

/* Current resident set size in KiB (from /proc/self/statm), or -1. */
static inline long hz_test_rss_kib(void)
{
    char buf[256];
    if (hz_test_read_file("/proc/self/statm", buf, sizeof buf) <= 0)
        return -1;
    char *end;
    (void)strtoul(buf, &end, 10); /* total program size */
    unsigned long resident = strtoul(end, NULL, 10);
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        page = 4096;
    return (long)(resident * (unsigned long)(page / 1024));
}

/* MemAvailable from /proc/meminfo in KiB, or -1. */
static inline long hz_test_mem_available_kib(void)
{
    char buf[8192];
    if (hz_test_read_file("/proc/meminfo", buf, sizeof buf) <= 0)
        return -1;
    const char *p = strstr(buf, "MemAvailable:");
    if (!p)
        return -1;
    return strtol(p + strlen("MemAvailable:"), NULL, 10);
}

/* calloc of memory the kernel has not backed yet, read before it is written (a
 * table's empty slots checked before they are filled) must take one page fault per
 * page.  Left to the kernel's zero page, the reads map it and each write then faults
 * a second time and flushes the TLB of every CPU the process runs on.  Fails the
 * test (as `what`) otherwise; run it while the heap's memory is fresh. */
static inline void hz_test_calloc_fresh_faults(const char *what)
{
    enum { BLOCKS = 32, SIZE = 48 << 10 };
    static volatile uint64_t *blocks[BLOCKS];
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    uint64_t sum = 0;
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = (volatile uint64_t *)calloc(1, SIZE);
        CHECK(blocks[i] != NULL, "calloc(%d) failed", SIZE);
        for (size_t w = 0; w < SIZE / 8; w += 512)
            sum += blocks[i][w];
        for (size_t w = 0; w < SIZE / 8; w += 512)
            blocks[i][w] = w + 1;
    }
    getrusage(RUSAGE_SELF, &after);
    long faults = after.ru_minflt - before.ru_minflt;
    long pages = (long)BLOCKS * (SIZE / 4096);
    CHECK(sum == 0, "calloc'd memory was not zero");
    CHECK(faults < pages + pages / 2,
          "%d fresh %s blocks of %d B read, then written: %ld page faults for %ld pages",
          BLOCKS, what, SIZE, faults, pages);
    for (int i = 0; i < BLOCKS; i++)
        free((void *)blocks[i]);
}

/* ------------------------------------------------------- library switches */

/* The library reads its environment switches at start: unless `name` already holds
 * `value`, this runs the program again with it set and HAKOZUNA_STATS=1 (which every
 * other switch needs).  Fails unless hakozuna is preloaded (skips with
 * HZ_TEST_ALLOW_SYSTEM=1), and skips when /dev/shm, where the stats go, is not
 * available. */
static inline void hz_test_rerun_with(char **argv, const char *name, const char *value)
{
    if (!hz_test_loaded()) {
        if (hz_test_allow_system())
            SKIP("hakozuna is not preloaded");
        FAIL("hakozuna is not preloaded (run through tests/preload.sh)");
    }
    const char *e = getenv(name);
    if (e != NULL && strcmp(e, value) == 0)
        return;
    if (access("/dev/shm", W_OK) != 0)
        SKIP("/dev/shm is not available");
    setenv("HAKOZUNA_STATS", "1", 1);
    setenv(name, value, 1);
    execv("/proc/self/exe", argv);
    FAIL("exec /proc/self/exe: %s", strerror(errno));
}

/* ------------------------------------------------------------- random */

/* splitmix64: small, fast, good enough for picking sizes. */
static inline uint64_t hz_test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static inline size_t hz_test_rand_range(uint64_t *state, size_t lo, size_t hi)
{
    return lo + (size_t)(hz_test_rand(state) % (uint64_t)(hi - lo + 1));
}

/* Monotonic time in seconds. */
static inline double hz_test_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void hz_test_sleep_ms(long ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---------------------------------------------------------- processes */

/* Waits up to timeout_ms for child pid; on timeout kills it and returns -1, else its
 * wait status.  Only async-signal-safe calls: usable in a signal handler. */
static inline int hz_test_wait_child(pid_t pid, long timeout_ms)
{
    for (long waited = 0;; waited++) {
        int status = 0;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r < 0 && errno != EINTR)
            return -2;
        if (waited >= timeout_ms) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return -1;
        }
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* A string to stderr with write(2) alone (signal handlers, forked children). */
static inline void hz_test_say(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* A hang is a failure, not a stuck test: after `seconds` the whole process prints
 * "FAIL <what>: hung" and exits 1.  One watchdog per process (SIGALRM). */
static const char *hz_test_watchdog_what HZ_TEST_UNUSED;

static HZ_TEST_UNUSED void hz_test_watchdog_fire(int sig)
{
    (void)sig;
    hz_test_say("FAIL ");
    hz_test_say(hz_test_watchdog_what);
    hz_test_say(": hung\n");
    _exit(1);
}

static inline void hz_test_watchdog(unsigned seconds, const char *what)
{
    hz_test_watchdog_what = what;
    signal(SIGALRM, hz_test_watchdog_fire);
    alarm(seconds);
}

#endif /* HZ_TEST_H */
