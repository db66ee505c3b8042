/* test_remote_waves.c - memory that comes back in waves is kept, not purged and
 * faulted in again each time.
 *
 * One thread allocates a wave of WAVE_MIB MiB in blocks of 16..64 KiB, touching a
 * byte of every page, and hands all of it to a second thread, which frees it; then
 * the next wave.  Every wave after the first is the same amount of memory the heap
 * needed a moment before.  Bound: over the waves after the first two, the allocator
 * purges less than two waves' worth (an allocator that gives each freed wave back
 * at once purges one wave per wave) and the process takes fewer page faults than
 * the pages of two waves.  The waves follow each other within a few milliseconds,
 * well inside the purge delay, so time-based purging has nothing to return; a wave
 * that the machine stalled for longer than the purge delay may rightly see its
 * memory returned, so each such wave adds one wave to both bounds.
 *
 * The quarantine variants (checked, hardened) hold freed blocks back on purpose and
 * are reported only.
 */
#include "hz_test.h"

#include <pthread.h>
#include <sys/resource.h>

#include "types.h" /* HZ_PURGE_DELAY_MS, as the library was built */

#define WAVE_MIB 48
#define WAVES 12
#define MEASURED_FROM 2 /* waves 0 and 1 build the heap up */

static void **blocks;
static size_t nblocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int wave_ready = -1, wave_freed = -1, quit;

static void *freer(void *arg) {
    (void)arg;
    for (int w = 0;; w++) {
        pthread_mutex_lock(&lock);
        while (wave_ready < w && !quit) pthread_cond_wait(&cond, &lock);
        int stop = wave_ready < w;
        pthread_mutex_unlock(&lock);
        if (stop) return NULL;
        for (size_t i = 0; i < nblocks; i++) free(blocks[i]);
        pthread_mutex_lock(&lock);
        wave_freed = w;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
    }
}

static long minor_faults(void) {
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0, "getrusage: %s", strerror(errno));
    return ru.ru_minflt;
}

int main(void) {
    int hz = hz_test_require_loaded();
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096;
    size_t cap = ((size_t)WAVE_MIB << 20) / 16384 + 1;
    blocks = calloc(cap, sizeof *blocks);
    CHECK(blocks != NULL, "calloc of the block table failed");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, freer, NULL) == 0, "pthread_create failed");

    struct hz_stats st;
    unsigned long long purged0 = 0;
    long faults0 = 0;
    double t0 = 0;
    int stalled = 0; /* measured waves that took longer than the purge delay */
    for (int w = 0; w < WAVES; w++) {
        double wave_t0 = hz_test_now();
        if (w == MEASURED_FROM) {
            if (hz) CHECK(hz_test_stats(&st), "hz_stats_get failed");
            purged0 = st.bytes_purged;
            faults0 = minor_faults();
            t0 = hz_test_now();
        }
        uint64_t rng = 7; /* the same sizes every wave */
        size_t total = 0;
        nblocks = 0;
        while (total < ((size_t)WAVE_MIB << 20) && nblocks < cap) {
            size_t s = hz_test_rand_range(&rng, 16384, 65536);
            unsigned char *p = malloc(s);
            CHECK(p != NULL, "wave %d: malloc(%zu) failed", w, s);
            for (size_t off = 0; off < s; off += page) p[off] = (unsigned char)w;
            p[s - 1] = (unsigned char)w;
            blocks[nblocks++] = p;
            total += s;
        }
        pthread_mutex_lock(&lock);
        wave_ready = w;
        pthread_cond_broadcast(&cond);
        while (wave_freed < w) pthread_cond_wait(&cond, &lock);
        pthread_mutex_unlock(&lock);
        if (w >= MEASURED_FROM && hz_test_now() - wave_t0 > HZ_PURGE_DELAY_MS / 1000.0)
            stalled++;
    }
    double took = hz_test_now() - t0;
    long faults = minor_faults() - faults0;
    pthread_mutex_lock(&lock);
    quit = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    pthread_join(t, NULL);
    free(blocks);

    int measured = WAVES - MEASURED_FROM;
    long wave_pages = (long)(((size_t)WAVE_MIB << 20) / page);
    printf("%d waves of %d MiB in %.2f s (%d longer than the purge delay): %ld page faults (a "
           "wave is %ld pages)\n", measured, WAVE_MIB, took, stalled, faults, wave_pages);
    if (!hz) return 0;
    CHECK(hz_test_stats(&st), "hz_stats_get failed");
    unsigned long long purged = st.bytes_purged - purged0;
    printf("purged meanwhile: %llu MiB\n", purged >> 20);
    if (hz_test_quarantine_variant()) {
        printf("(variant with a quarantine: reported, not bounded)\n");
        return 0;
    }
    /* Time-based purging may rightly return memory if the machine stalled us for
     * longer than the purge delay: only a run fast enough to tell is judged. */
    if (took > measured * 0.05) SKIP("the waves took %.2f s: too slow to tell waves from idling", took);
    unsigned long long allowed = 2ULL + (unsigned long long)stalled;
    CHECK(purged < allowed * ((unsigned long long)WAVE_MIB << 20),
          "%llu MiB purged over %d waves of %d MiB: freed waves are given back and faulted in "
          "again", purged >> 20, measured, WAVE_MIB);
    CHECK(faults < (long)allowed * wave_pages, "%ld page faults over %d waves of %ld pages",
          faults, measured, wave_pages);
    return 0;
}
