/* bench_common.h - helpers shared by the hakozuna benchmark programs.
 *
 * Every benchmark is a single C file that includes this header first.  The
 * programs use nothing but the standard malloc API (malloc, calloc, realloc,
 * aligned_alloc, free), so they measure whichever allocator is loaded into the
 * process, e.g. through LD_PRELOAD.
 *
 * Conventions shared by all programs:
 *   - malformed or missing arguments: a usage line on stderr, exit status 2;
 *   - an allocation that returns NULL, or a detected corruption: a message on
 *     stderr, exit status 1;
 *   - fixed seeds, so the same command performs the same sequence of
 *     operations under every allocator;
 *   - one result line containing "ops/s=<decimal>", the parameters,
 *     "peak_rss_kb=<n>" and, where the work is deterministic,
 *     "checksum=0x<hex>" computed from the sequence of operations (sizes,
 *     slots, lengths), never from addresses.
 */
#ifndef HAKOZUNA_BENCH_COMMON_H
#define HAKOZUNA_BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Seed used when a program is not given one. */
#define BENCH_DEFAULT_SEED UINT64_C(0x12345678)
/* Upper bound for thread counts. */
#define BENCH_MAX_THREADS UINT64_C(1024)
/* Upper bound for a single block size (1 GiB). */
#define BENCH_MAX_SIZE (UINT64_C(1) << 30)
/* Upper bound for working-set slot counts. */
#define BENCH_MAX_SLOTS (UINT64_C(1) << 28)

#define BENCH_NORETURN __attribute__((noreturn))
#define BENCH_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))

/* ------------------------------------------------------------ fatal exits */

/* Prints "error: <message>" (when fmt is not NULL) and "usage: <usage>" on
 * stderr, then exits with status 2. */
static inline BENCH_NORETURN BENCH_PRINTF(2, 3) void bench_usage_exit(const char *usage, const char *fmt,
                                                                      ...)
{
    if (fmt != NULL) {
        va_list ap;
        fputs("error: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    fprintf(stderr, "usage: %s\n", usage);
    exit(2);
}

/* Prints "error: <message>" on stderr and exits with status 1. */
static inline BENCH_NORETURN BENCH_PRINTF(1, 2) void bench_fatal(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* Reports an allocation function that returned NULL and exits with status 1. */
static inline BENCH_NORETURN void bench_oom(const char *what, size_t size)
{
    bench_fatal("%s(%zu) returned NULL", what, size);
}

/* ------------------------------------------------------ argument parsing */

/* Strict unsigned decimal: one or more digits and nothing else (no sign, no
 * blanks, no suffix); false on overflow. */
static inline bool bench_parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    const char *p;

    if (s == NULL || *s == '\0')
        return false;
    for (p = s; *p != '\0'; p++) {
        unsigned d;
        if (*p < '0' || *p > '9')
            return false;
        d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* A seed: strict decimal, or "0x"/"0X" followed by 1 to 16 hex digits. */
static inline bool bench_parse_seed(const char *s, uint64_t *out)
{
    if (s != NULL && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        uint64_t v = 0;
        const char *p = s + 2;

        if (*p == '\0')
            return false;
        for (; *p != '\0'; p++) {
            unsigned d;
            if (*p >= '0' && *p <= '9')
                d = (unsigned)(*p - '0');
            else if (*p >= 'a' && *p <= 'f')
                d = (unsigned)(*p - 'a') + 10;
            else if (*p >= 'A' && *p <= 'F')
                d = (unsigned)(*p - 'A') + 10;
            else
                return false;
            if ((v >> 60) != 0)
                return false;
            v = (v << 4) | d;
        }
        *out = v;
        return true;
    }
    return bench_parse_u64(s, out);
}

/* Exits through bench_usage_exit unless lo <= argc - 1 <= hi (argument count
 * without the program name). */
static inline void bench_check_argc(const char *usage, int argc, int lo, int hi)
{
    if (argc - 1 < lo || argc - 1 > hi) {
        if (argc <= 1)
            bench_usage_exit(usage, "missing arguments");
        bench_usage_exit(usage, "wrong number of arguments (%d)", argc - 1);
    }
}

/* Parses an unsigned decimal argument in [lo, hi] or exits with status 2. */
static inline uint64_t bench_arg_u64(const char *usage, const char *name, const char *s, uint64_t lo,
                                     uint64_t hi)
{
    uint64_t v;

    if (!bench_parse_u64(s, &v))
        bench_usage_exit(usage, "%s: '%s' is not an unsigned decimal integer", name, s ? s : "");
    if (v < lo || v > hi)
        bench_usage_exit(usage, "%s=%" PRIu64 " is out of range [%" PRIu64 ", %" PRIu64 "]", name, v, lo,
                         hi);
    return v;
}

/* Parses a seed argument (decimal or 0x-hex) or exits with status 2. */
static inline uint64_t bench_arg_seed(const char *usage, const char *name, const char *s)
{
    uint64_t v;

    if (!bench_parse_seed(s, &v))
        bench_usage_exit(usage, "%s: '%s' is not a decimal or 0x-hex unsigned integer", name, s ? s : "");
    return v;
}

/* Exits with status 2 unless min <= max. */
static inline void bench_check_min_max(const char *usage, uint64_t min, uint64_t max)
{
    if (min > max)
        bench_usage_exit(usage, "MIN=%" PRIu64 " must not exceed MAX=%" PRIu64, min, max);
}

/* ------------------------------------------------------------------ PRNG */

/* splitmix64: used to expand seeds and to derive independent streams. */
static inline uint64_t bench_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static inline uint64_t bench_rotl64(uint64_t x, unsigned k)
{
    return (x << k) | (x >> (64u - k));
}

/* xoshiro256** generator state. */
typedef struct bench_rng {
    uint64_t s[4];
} bench_rng;

static inline void bench_rng_seed(bench_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    int i;

    for (i = 0; i < 4; i++)
        r->s[i] = bench_splitmix64(&x);
}

/* Seed of stream number `stream` (e.g. a thread index) derived from `seed`. */
static inline uint64_t bench_stream_seed(uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * UINT64_C(0xD1B54A32D192ED03));
    return bench_splitmix64(&x);
}

static inline uint64_t bench_rng_next(bench_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t result = bench_rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = bench_rotl64(s[3], 45);
    return result;
}

__extension__ typedef unsigned __int128 bench_u128;

/* Unbiased uniform integer in [0, n), n >= 1 (multiply-shift with rejection). */
static inline uint64_t bench_rng_below(bench_rng *r, uint64_t n)
{
    bench_u128 m = (bench_u128)bench_rng_next(r) * n;
    uint64_t low = (uint64_t)m;

    if (low < n) {
        const uint64_t threshold = (0 - n) % n;
        while (low < threshold) {
            m = (bench_u128)bench_rng_next(r) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* Uniform integer in [lo, hi], lo <= hi. */
static inline uint64_t bench_rng_range(bench_rng *r, uint64_t lo, uint64_t hi)
{
    if (hi - lo == UINT64_MAX)
        return bench_rng_next(r);
    return lo + bench_rng_below(r, hi - lo + 1);
}

/* -------------------------------------------------------------- checksum */

#define BENCH_CHECKSUM_INIT UINT64_C(0xCBF29CE484222325)

/* Folds one value into an order-dependent running checksum. */
static inline uint64_t bench_mix(uint64_t h, uint64_t v)
{
    return bench_rotl64(h ^ v, 27) * UINT64_C(0x9E3779B97F4A7C15) + UINT64_C(0x632BE59BD9B4E019);
}

/* Final avalanche of a checksum before printing. */
static inline uint64_t bench_checksum_final(uint64_t h)
{
    h ^= h >> 33;
    h *= UINT64_C(0xFF51AFD7ED558CCD);
    h ^= h >> 33;
    h *= UINT64_C(0xC4CEB9FE1A85EC53);
    h ^= h >> 33;
    return h;
}

/* ------------------------------------------------------- touching memory */

/* An 8-bit tag derived from a value (slot number, size, ...). */
static inline unsigned char bench_tag(uint64_t x)
{
    return (unsigned char)((x * UINT64_C(0x9E3779B97F4A7C15)) >> 56);
}

/* Writes the last byte (~tag) and then the first byte (tag) of a block, so
 * that lazily committed memory is really faulted in and the first byte can be
 * checked when the block is released. */
static inline void bench_touch(void *p, size_t size, unsigned char tag)
{
    unsigned char *c = (unsigned char *)p;

    c[size - 1] = (unsigned char)~tag;
    c[0] = tag;
}

/* First byte of a block written by bench_touch. */
static inline unsigned char bench_first_byte(const void *p)
{
    return *(const unsigned char *)p;
}

/* ---------------------------------------------------------------- timing */

/* Monotonic clock in seconds. */
static inline double bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Operations per second; never divides by zero. */
static inline double bench_rate(double ops, double seconds)
{
    if (seconds < 1e-9)
        seconds = 1e-9;
    return ops / seconds;
}

/* Sleeps for `ms` milliseconds, resuming after signals. */
static inline void bench_sleep_ms(uint64_t ms)
{
    struct timespec req;
    struct timespec rem;

    req.tv_sec = (time_t)(ms / 1000);
    req.tv_nsec = (long)((ms % 1000) * 1000000);
    while (nanosleep(&req, &rem) != 0 && errno == EINTR)
        req = rem;
}

/* ------------------------------------------------------------------- RSS */

/* Peak resident set size of the process in KiB (getrusage). */
static inline long bench_peak_rss_kb(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return ru.ru_maxrss;
}

/* Current resident set size in KiB from /proc/self/statm, or -1.  Uses plain
 * system calls and a stack buffer so that it does not allocate. */
static inline long bench_current_rss_kb(void)
{
    char buf[256];
    ssize_t n;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    const char *p;
    unsigned long long resident = 0;
    long page;

    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* Fields: size resident shared text lib data dt (in pages). */
    p = buf;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p != ' ')
        return -1;
    p++;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9') {
        resident = resident * 10 + (unsigned long long)(*p - '0');
        p++;
    }
    page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        page = 4096;
    return (long)(resident * (unsigned long long)page / 1024);
}

/* --------------------------------------------------------------- threads */

/* pthread_create that exits with status 1 on failure. */
static inline void bench_thread_create(pthread_t *tid, void *(*fn)(void *), void *arg)
{
    int rc = pthread_create(tid, NULL, fn, arg);

    if (rc != 0)
        bench_fatal("pthread_create failed (error %d)", rc);
}

/* pthread_join that exits with status 1 on failure. */
static inline void bench_thread_join(pthread_t tid)
{
    int rc = pthread_join(tid, NULL);

    if (rc != 0)
        bench_fatal("pthread_join failed (error %d)", rc);
}

#endif /* HAKOZUNA_BENCH_COMMON_H */
