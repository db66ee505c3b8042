/* bench_realloc_string - realloc-heavy string building.
 *
 *   bench_realloc_string ITERS MAXLEN [SEED]
 *
 * NSTRINGS strings are built at the same time.  Each of ITERS steps picks one
 * of them at random (generator seeded from SEED, default 0x12345678) and does
 * exactly one realloc or free on it:
 *
 *   - an empty slot starts a new string with realloc(NULL, n) holding a first
 *     piece of 1..PIECE_MAX bytes;
 *   - a string is finished (its whole content is compared with the expected
 *     bytes, then it is freed) with probability FINISH_PCT percent, or when it
 *     has reached MAXLEN bytes;
 *   - it is shrunk with probability SHRINK_PCT percent: realloc to a random
 *     shorter length, after which the kept prefix is checked;
 *   - otherwise a piece of 1..PIECE_MAX bytes (never beyond MAXLEN) is
 *     appended: realloc to the new length + 1, check that the old first and
 *     last bytes survived the realloc, copy the piece, NUL-terminate.
 *
 * The bytes of a string are a window of a random text generated from the
 * seed, starting at an offset chosen when the string is started, so any
 * realloc that loses, moves or truncates data is detected; the program then
 * exits with status 1.  ops = ITERS (each step is one realloc or free); only
 * the loop is timed.  The checksum covers the sequence of slots, operations
 * and lengths.
 *
 * Constraints: ITERS >= 1, 1 <= MAXLEN <= 2^28.
 */
#include "bench_common.h"

#define PROG "bench_realloc_string"

static const char USAGE[] = PROG " ITERS MAXLEN [SEED]";

#define MAX_MAXLEN (UINT64_C(1) << 28)
#define NSTRINGS 32
#define PIECE_MAX 32
#define FINISH_PCT 1
#define SHRINK_PCT 8
#define OFFSETS 256

enum { OP_START = 1, OP_FINISH, OP_SHRINK, OP_APPEND };

typedef struct str {
    char *s;
    size_t len;
    size_t off; /* the content is text[off .. off + len) */
} str;

static const char *g_text;

static void check_prefix(const str *st, size_t slot, size_t n)
{
    if (n > 0 && (st->s[0] != g_text[st->off] || st->s[n - 1] != g_text[st->off + n - 1]))
        bench_fatal("string %zu: content lost in realloc (length %zu)", slot, n);
}

static void check_all(const str *st, size_t slot)
{
    if (memcmp(st->s, g_text + st->off, st->len) != 0 || st->s[st->len] != '\0')
        bench_fatal("string %zu: content corrupted (length %zu)", slot, st->len);
}

static inline size_t piece_len(bench_rng *rng, size_t room)
{
    const size_t limit = room < PIECE_MAX ? room : PIECE_MAX;

    return 1 + (size_t)bench_rng_below(rng, limit);
}

int main(int argc, char **argv)
{
    uint64_t iters, maxlen, seed, i;
    uint64_t reallocs = 0, frees = 0, finished = 0, cs = BENCH_CHECKSUM_INIT;
    str strs[NSTRINGS];
    char *text;
    size_t text_len, k;
    bench_rng rng;
    double t0, t1;

    bench_check_argc(USAGE, argc, 2, 3);
    iters = bench_arg_u64(USAGE, "ITERS", argv[1], 1, UINT64_MAX);
    maxlen = bench_arg_u64(USAGE, "MAXLEN", argv[2], 1, MAX_MAXLEN);
    seed = argc > 3 ? bench_arg_seed(USAGE, "SEED", argv[3]) : BENCH_DEFAULT_SEED;

    bench_rng_seed(&rng, seed);

    /* Random lowercase text that every string is a window of. */
    text_len = (size_t)maxlen + OFFSETS;
    text = malloc(text_len);
    if (text == NULL)
        bench_oom("malloc", text_len);
    for (k = 0; k < text_len; k++)
        text[k] = (char)('a' + bench_rng_below(&rng, 26));
    g_text = text;
    memset(strs, 0, sizeof strs);

    t0 = bench_now();
    for (i = 0; i < iters; i++) {
        const size_t slot = (size_t)bench_rng_below(&rng, NSTRINGS);
        str *st = &strs[slot];
        char *p;
        size_t n;
        int op;

        if (st->s == NULL) {
            op = OP_START;
            st->off = (size_t)bench_rng_below(&rng, OFFSETS);
            n = piece_len(&rng, (size_t)maxlen);
            p = realloc(NULL, n + 1);
            if (p == NULL)
                bench_oom("realloc", n + 1);
            memcpy(p, g_text + st->off, n);
            p[n] = '\0';
            st->s = p;
            st->len = n;
            reallocs++;
        } else {
            const uint64_t r = bench_rng_below(&rng, 100);

            if (st->len >= maxlen || r < FINISH_PCT) {
                op = OP_FINISH;
                n = st->len;
                check_all(st, slot);
                free(st->s);
                st->s = NULL;
                st->len = 0;
                frees++;
                finished++;
            } else if (r < FINISH_PCT + SHRINK_PCT) {
                op = OP_SHRINK;
                n = (size_t)bench_rng_below(&rng, st->len); /* 0 .. len-1 */
                p = realloc(st->s, n + 1);
                if (p == NULL)
                    bench_oom("realloc", n + 1);
                st->s = p;
                check_prefix(st, slot, n);
                p[n] = '\0';
                st->len = n;
                reallocs++;
            } else {
                const size_t add = piece_len(&rng, (size_t)maxlen - st->len);

                op = OP_APPEND;
                n = st->len + add;
                p = realloc(st->s, n + 1);
                if (p == NULL)
                    bench_oom("realloc", n + 1);
                st->s = p;
                check_prefix(st, slot, st->len);
                memcpy(p + st->len, g_text + st->off + st->len, add);
                p[n] = '\0';
                st->len = n;
                reallocs++;
            }
        }
        cs = bench_mix(cs, ((uint64_t)slot << 48) ^ ((uint64_t)op << 40) ^ (uint64_t)n);
    }
    t1 = bench_now();

    for (k = 0; k < NSTRINGS; k++) {
        if (strs[k].s != NULL) {
            check_all(&strs[k], k);
            free(strs[k].s);
        }
    }
    free(text);

    printf("[" PROG "] iters=%" PRIu64 " maxlen=%" PRIu64 " seed=0x%" PRIx64 " strings=%d reallocs=%" PRIu64
           " frees=%" PRIu64 " finished=%" PRIu64 " ops/s=%.1f time_s=%.6f peak_rss_kb=%ld checksum=0x%016" PRIx64
           "\n",
           iters, maxlen, seed, NSTRINGS, reallocs, frees, finished, bench_rate((double)iters, t1 - t0), t1 - t0,
           bench_peak_rss_kb(), bench_checksum_final(cs));
    return 0;
}
