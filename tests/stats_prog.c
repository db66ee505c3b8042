/* stats_prog - a process with known allocator activity for the hzstat tests.
 *
 *   stats_prog GOFILE [THREADS [BLOCKS [SIZE [joined]]]]   (defaults 4, 10000, 3000)
 *
 * THREADS workers each allocate BLOCKS blocks of SIZE bytes; then worker i frees the
 * blocks of worker i-1, so every one of the THREADS * BLOCKS frees is a remote free.
 * The workers stay alive (each owning a heap) while the program waits.  Once the
 * work is done the main thread waits a little and allocates a block of a size class
 * it has not used yet: that trip through the allocation slow path publishes the
 * final counts to the stats segment.  It then prints one line
 *
 *   ready pid=P threads=T blocks=B size=S mallocs=M remote_frees=R
 *
 * to stdout (flushed) and waits until GOFILE exists, then stops the workers and
 * exits normally with status 0.  With "joined", the workers are stopped and joined
 * right after that publication, before "ready": the counters the process last
 * published then still count them, the live ones in the file no longer do.  It never calls into hakozuna directly: run it with
 * the library preloaded (hzrun).
 */
#define _GNU_SOURCE 1

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long nthreads = 4, nblocks = 10000, bsize = 3000;
static void **blocks; /* nthreads * nblocks */
static pthread_barrier_t barrier;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int stop;

static void die(const char *what) {
    fprintf(stderr, "stats_prog: %s\n", what);
    exit(1);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void *worker(void *arg) {
    long i = (long)arg;
    void **mine = blocks + i * nblocks;
    for (long k = 0; k < nblocks; k++) {
        char *p = malloc((size_t)bsize);
        if (p == NULL) die("out of memory");
        p[0] = (char)k;
        p[bsize - 1] = (char)i;
        mine[k] = p;
    }
    pthread_barrier_wait(&barrier); /* every block allocated */
    void **prev = blocks + ((i + nthreads - 1) % nthreads) * nblocks;
    for (long k = 0; k < nblocks; k++) free(prev[k]);
    pthread_barrier_wait(&barrier); /* every block freed: tell main */
    pthread_mutex_lock(&lock);
    while (!stop) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void stop_workers(const pthread_t *tids) {
    pthread_mutex_lock(&lock);
    stop = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (long i = 0; i < nthreads; i++) pthread_join(tids[i], NULL);
}

static long arg(const char *s, long min, long max, const char *name) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || end == s || v < min || v > max) {
        fprintf(stderr, "stats_prog: bad %s '%s' (%ld..%ld)\n", name, s, min, max);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 6 || (argc == 6 && strcmp(argv[5], "joined") != 0)) {
        fprintf(stderr, "usage: stats_prog GOFILE [THREADS [BLOCKS [SIZE [joined]]]]\n");
        return 2;
    }
    const char *gofile = argv[1];
    bool joined = argc == 6;
    if (argc > 2) nthreads = arg(argv[2], 2, 1000, "THREADS");
    if (argc > 3) nblocks = arg(argv[3], 1, 1000000, "BLOCKS");
    if (argc > 4) bsize = arg(argv[4], 16, 1 << 20, "SIZE");

    blocks = calloc((size_t)(nthreads * nblocks), sizeof *blocks);
    if (blocks == NULL) die("out of memory");
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    if (tids == NULL) die("out of memory");
    if (pthread_barrier_init(&barrier, NULL, (unsigned)nthreads + 1) != 0) die("barrier");
    /* The barrier counts main too: the second wait below is "all frees done". */
    for (long i = 0; i < nthreads; i++)
        if (pthread_create(&tids[i], NULL, worker, (void *)i) != 0) die("pthread_create");
    pthread_barrier_wait(&barrier);
    pthread_barrier_wait(&barrier);

    /* Publish: counters go out from the allocation slow path at most every 100 ms. */
    sleep_ms(250);
    void *nudge = malloc(200000); /* a size class this thread has not used */
    if (nudge == NULL) die("out of memory");
    if (joined) stop_workers(tids);

    printf("ready pid=%ld threads=%ld blocks=%ld size=%ld mallocs=%ld remote_frees=%ld\n",
           (long)getpid(), nthreads, nblocks, bsize, nthreads * nblocks, nthreads * nblocks);
    fflush(stdout);

    while (access(gofile, F_OK) != 0) sleep_ms(20);

    if (!joined) stop_workers(tids);
    free(nudge);
    free(tids);
    free(blocks);
    return 0;
}
