/* stats_idle - a process that allocates a known set of blocks, then sits idle, for
 * the live-counter tests (tests/test_stats_live.sh).
 *
 *   stats_idle GOFILE THREADS BLOCKS SIZE KEEP [CHILDKEEP]
 *
 * THREADS workers each allocate BLOCKS blocks of SIZE bytes and hand them to the
 * main thread, which frees all of them (THREADS * BLOCKS remote frees, sent by the
 * main thread's heap) and trims (posting what it holds for the owners).  Then each
 * worker, in turn, trims too (taking back its BLOCKS blocks).  Last, the main thread
 * allocates KEEP blocks of SIZE + 1 bytes and keeps them.  It prints
 *
 *   ready pid=P main=TID workers=TID,TID,...
 *
 * (flushed) and makes no allocator call at all until GOFILE exists: it sleeps.  The
 * workers stay alive, blocked, meanwhile.  Then it frees everything and exits 0.
 * With CHILDKEEP, it first forks a child that allocates a block of a size class not
 * used so far (a trip through the allocation slow path, where a child of fork makes
 * its own stats segment), then CHILDKEEP blocks of SIZE + 1 bytes, prints
 * "child pid=P" and idles likewise until GOFILE exists.
 */
#define _GNU_SOURCE 1

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 512

static long nblocks, bsize;
static void **blocks;
static long tids[MAX_THREADS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int phase; /* 1: blocks freed, trim in turn; 2: stop */
static int trimmed;

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void *worker(void *arg) {
    long i = (long)arg;
    tids[i] = (long)syscall(SYS_gettid);
    for (long k = 0; k < nblocks; k++) {
        char *p = malloc((size_t)bsize);
        if (p == NULL) abort();
        p[0] = (char)k;
        blocks[i * nblocks + k] = p;
    }
    pthread_mutex_lock(&lock);
    while (phase < 1 || trimmed != i) pthread_cond_wait(&cond, &lock);
    malloc_trim(0); /* take back the blocks the main thread freed */
    trimmed++;
    pthread_cond_broadcast(&cond);
    while (phase < 2) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static long arg(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0) {
        fprintf(stderr, "stats_idle: bad argument '%s'\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: stats_idle GOFILE THREADS BLOCKS SIZE KEEP [CHILDKEEP]\n");
        return 2;
    }
    long nthreads = arg(argv[2]), keep = arg(argv[5]);
    nblocks = arg(argv[3]);
    bsize = arg(argv[4]);
    if (nthreads > MAX_THREADS || bsize < 1) return 2;
    blocks = malloc(sizeof(void *) * (size_t)(nthreads * nblocks + 1));
    void **kept = malloc(sizeof(void *) * (size_t)(keep + 1));
    pthread_t th[MAX_THREADS];
    for (long i = 0; i < nthreads; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)i) != 0) return 1;
    for (;;) { /* every worker allocated its blocks */
        long done = 0;
        for (long i = 0; i < nthreads; i++) done += __atomic_load_n(&tids[i], __ATOMIC_ACQUIRE) != 0;
        if (done == nthreads) break;
        sleep_ms(5);
    }
    sleep_ms(50);
    for (long k = 0; k < nthreads * nblocks; k++) free(blocks[k]);
    malloc_trim(0);
    pthread_mutex_lock(&lock);
    phase = 1;
    pthread_cond_broadcast(&cond);
    while (trimmed < nthreads) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    for (long k = 0; k < keep; k++) kept[k] = malloc((size_t)bsize + 1);
    if (argc == 7) {
        long child_keep = arg(argv[6]);
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            /* a large block and back: the child's first slow path (volatile, or
             * the compiler drops the pair) */
            void *volatile big = malloc(100000);
            free(big);
            for (long k = 0; k < child_keep; k++)
                if (malloc((size_t)bsize + 1) == NULL) return 1;
            printf("child pid=%ld\n", (long)getpid());
            fflush(stdout);
            while (access(argv[1], F_OK) != 0) sleep_ms(20);
            return 0;
        }
    }
    printf("ready pid=%ld main=%ld workers=", (long)getpid(), (long)syscall(SYS_gettid));
    for (long i = 0; i < nthreads; i++) printf("%s%ld", i ? "," : "", tids[i]);
    printf("\n");
    fflush(stdout);
    while (access(argv[1], F_OK) != 0) sleep_ms(20); /* idle: no allocator calls */
    pthread_mutex_lock(&lock);
    phase = 2;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (long i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    for (long k = 0; k < keep; k++) free(kept[k]);
    free(kept);
    free(blocks);
    return 0;
}
