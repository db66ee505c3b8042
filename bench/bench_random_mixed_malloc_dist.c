/* bench_random_mixed_malloc_dist - single-threaded random malloc/free mix with
 * a choice of size distributions.
 *
 *   bench_random_mixed_malloc_dist ITERS WS MIN MAX [SEED] [DIST ...]
 *
 * The loop is the one of bench_random_mixed_malloc_args: WS slots, initially
 * empty; each of ITERS steps picks a random slot, frees its block if it holds
 * one, otherwise allocates a block and stores it.  ops = ITERS; only the loop
 * is timed.  SEED is decimal or 0x-hex (default 0x12345678).  When the fifth
 * argument is one of the distribution names it is taken as DIST and the
 * default seed is used.
 *
 * DIST selects the size of each new block:
 *
 *   uniform            (default) uniform in [MIN, MAX].  Same sequence and
 *                      checksum as bench_random_mixed_malloc_args.
 *
 *   app                an application-like mix of four uniform bands:
 *                        70%  tiny     16 ..  128
 *                        20%  small   129 .. 1024
 *                         8%  medium 1025 .. 8192
 *                         2%  large  8193 .. MAX
 *                      Both ends of every band are clamped into [MIN, MAX]
 *                      (a band that lies entirely above MAX collapses to
 *                      MAX, one entirely below MIN to MIN).  The effective
 *                      bands are printed in the result line.
 *
 *   trimix LO1 HI1 PCT1 LO2 HI2 PCT2 LO3 HI3 PCT3
 *                      three uniform bands [LOk, HIk] chosen with
 *                      probability PCTk percent.  PCT1+PCT2+PCT3 must be
 *                      100; every band needs LO <= HI; a band with PCT > 0
 *                      must lie inside [MIN, MAX]; a band with PCT 0 is
 *                      never used.
 *
 * Constraints: ITERS >= 1, 1 <= WS <= 2^28, 1 <= MIN <= MAX <= 2^30.
 */
#include "bench_mixed.h"

#define PROG "bench_random_mixed_malloc_dist"

static const char USAGE[] = PROG " ITERS WS MIN MAX [SEED] [uniform | app | trimix LO1 HI1 PCT1 LO2 HI2 PCT2 LO3 HI3 PCT3]";

#define MAX_BANDS 4

enum dist_kind { DIST_UNIFORM, DIST_BANDS };

typedef struct band {
    uint64_t lo;
    uint64_t hi;
    uint64_t pct;
} band;

typedef struct dist {
    enum dist_kind kind;
    const char *name;
    uint64_t min, span; /* DIST_UNIFORM: [min, min + span) */
    int nbands;
    band bands[MAX_BANDS];
    /* cum[k]: sum of pct[0..k]; a draw r in [0, 100) picks the first band with r < cum[k]. */
    uint64_t cum[MAX_BANDS];
} dist;

static uint64_t clamp_u64(uint64_t v, uint64_t lo, uint64_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

static void finish_bands(dist *d)
{
    uint64_t sum = 0;
    int k;

    for (k = 0; k < d->nbands; k++) {
        sum += d->bands[k].pct;
        d->cum[k] = sum;
    }
}

static void setup_app(dist *d, uint64_t min, uint64_t max)
{
    static const band app[MAX_BANDS] = {
        {16, 128, 70},
        {129, 1024, 20},
        {1025, 8192, 8},
        {8193, 0, 2}, /* hi: MAX */
    };
    int k;

    d->kind = DIST_BANDS;
    d->name = "app";
    d->nbands = MAX_BANDS;
    for (k = 0; k < MAX_BANDS; k++) {
        uint64_t hi = k == MAX_BANDS - 1 ? max : app[k].hi;

        d->bands[k].lo = clamp_u64(app[k].lo, min, max);
        d->bands[k].hi = clamp_u64(hi, min, max);
        if (d->bands[k].lo > d->bands[k].hi)
            d->bands[k].lo = d->bands[k].hi;
        d->bands[k].pct = app[k].pct;
    }
    finish_bands(d);
}

static void setup_trimix(dist *d, char **args, uint64_t min, uint64_t max)
{
    static const char *const names[3][3] = {
        {"LO1", "HI1", "PCT1"},
        {"LO2", "HI2", "PCT2"},
        {"LO3", "HI3", "PCT3"},
    };
    uint64_t sum = 0;
    int k;

    d->kind = DIST_BANDS;
    d->name = "trimix";
    d->nbands = 3;
    for (k = 0; k < 3; k++) {
        band *b = &d->bands[k];

        b->lo = bench_arg_u64(USAGE, names[k][0], args[3 * k], 0, BENCH_MAX_SIZE);
        b->hi = bench_arg_u64(USAGE, names[k][1], args[3 * k + 1], 0, BENCH_MAX_SIZE);
        b->pct = bench_arg_u64(USAGE, names[k][2], args[3 * k + 2], 0, 100);
        if (b->lo > b->hi)
            bench_usage_exit(USAGE, "trimix band %d: LO=%" PRIu64 " must not exceed HI=%" PRIu64, k + 1, b->lo,
                             b->hi);
        if (b->pct > 0 && (b->lo < min || b->hi > max))
            bench_usage_exit(USAGE,
                             "trimix band %d: [%" PRIu64 ", %" PRIu64 "] has PCT %" PRIu64
                             " but lies outside [MIN, MAX] = [%" PRIu64 ", %" PRIu64 "]",
                             k + 1, b->lo, b->hi, b->pct, min, max);
        sum += b->pct;
    }
    if (sum != 100)
        bench_usage_exit(USAGE, "trimix percentages sum to %" PRIu64 ", not 100", sum);
    finish_bands(d);
}

static inline size_t draw_size(const void *ctx, bench_rng *rng)
{
    const dist *d = ctx;
    uint64_t r;
    int k;

    if (d->kind == DIST_UNIFORM)
        return (size_t)(d->min + bench_rng_below(rng, d->span));
    r = bench_rng_below(rng, 100);
    for (k = 0; k < d->nbands - 1; k++) {
        if (r < d->cum[k])
            break;
    }
    return (size_t)bench_rng_range(rng, d->bands[k].lo, d->bands[k].hi);
}

static bool is_dist_name(const char *s)
{
    return strcmp(s, "uniform") == 0 || strcmp(s, "app") == 0 || strcmp(s, "trimix") == 0;
}

/* Describes the distribution into buf for the result line. */
static void describe(const dist *d, char *buf, size_t len)
{
    size_t used;
    int k;

    if (d->kind == DIST_UNIFORM) {
        snprintf(buf, len, "uniform");
        return;
    }
    used = (size_t)snprintf(buf, len, "%s(", d->name);
    for (k = 0; k < d->nbands && used < len; k++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64 "%%:%" PRIu64 "-%" PRIu64, k ? "," : "",
                                 d->bands[k].pct, d->bands[k].lo, d->bands[k].hi);
    if (used < len)
        snprintf(buf + used, len - used, ")");
}

int main(int argc, char **argv)
{
    uint64_t iters, ws, min, max;
    uint64_t seed = BENCH_DEFAULT_SEED;
    dist d;
    int next = 5;
    char desc[256];
    bench_mixed_result r;

    bench_check_argc(USAGE, argc, 4, 15);
    iters = bench_arg_u64(USAGE, "ITERS", argv[1], 1, UINT64_MAX);
    ws = bench_arg_u64(USAGE, "WS", argv[2], 1, BENCH_MAX_SLOTS);
    min = bench_arg_u64(USAGE, "MIN", argv[3], 1, BENCH_MAX_SIZE);
    max = bench_arg_u64(USAGE, "MAX", argv[4], 1, BENCH_MAX_SIZE);
    bench_check_min_max(USAGE, min, max);

    if (argc > next && !is_dist_name(argv[next])) {
        seed = bench_arg_seed(USAGE, "SEED", argv[next]);
        next++;
    }

    memset(&d, 0, sizeof d);
    d.kind = DIST_UNIFORM;
    d.name = "uniform";
    if (argc > next) {
        const char *name = argv[next++];
        const int rest = argc - next;

        if (strcmp(name, "uniform") == 0) {
            if (rest != 0)
                bench_usage_exit(USAGE, "'uniform' takes no parameters");
        } else if (strcmp(name, "app") == 0) {
            if (rest != 0)
                bench_usage_exit(USAGE, "'app' takes no parameters");
            setup_app(&d, min, max);
        } else if (strcmp(name, "trimix") == 0) {
            if (rest != 9)
                bench_usage_exit(USAGE, "'trimix' takes 9 parameters, got %d", rest);
            setup_trimix(&d, argv + next, min, max);
        } else {
            bench_usage_exit(USAGE, "unknown distribution '%s'", name);
        }
    }
    describe(&d, desc, sizeof desc);

    d.min = min;
    d.span = max - min + 1;
    r = bench_mixed_run(iters, ws, seed, draw_size, &d);

    printf("[" PROG "] iters=%" PRIu64 " ws=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64 " seed=0x%" PRIx64
           " dist=%s mallocs=%" PRIu64 " frees=%" PRIu64
           " ops/s=%.1f time_s=%.6f peak_rss_kb=%ld checksum=0x%016" PRIx64 "\n",
           iters, ws, min, max, seed, desc, r.mallocs, r.frees, bench_rate((double)iters, r.seconds),
           r.seconds, bench_peak_rss_kb(), r.checksum);
    return 0;
}
