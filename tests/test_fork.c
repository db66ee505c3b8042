/* test_fork.c - fork() from a process whose threads are busy allocating.
 *
 * Two threads allocate and free continuously, exchanging blocks through a
 * shared table so that many frees are cross-thread.  Meanwhile the main thread
 * forks 24 times (12 under the checked variant).  Each child verifies and frees
 * blocks the parent allocated before the fork (including blocks owned by threads
 * that do not exist in the child), allocates and frees many blocks of all sizes, runs a thread that
 * allocates, and exits.  A child that is still alive after 10 s is killed and
 * the test fails: an allocator lock left held across fork must show up as a
 * failure, not a hang.  alarm(300) guards the whole test: on two cores the busy
 * workers leave each child little CPU, so the rounds can take a minute with no lock held.
 */
#include "hz_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define NWORKERS 2
#define NFORKS 24
#define XSLOTS 64
#define NPRE 160
#define CHILD_TIMEOUT_MS 10000

/* Block layout: header then the byte (seq & 0xff) ^ 0x5c repeated. */
struct hdr {
    uint64_t seq;
    uint32_t size;
    uint32_t check;
};

static _Atomic(void *) xs[XSLOTS];
static atomic_int stop;
static atomic_uint_fast64_t worker_ops;

static uint32_t check_of(uint64_t seq, uint32_t size)
{
    return (uint32_t)((seq * 0x9E3779B97F4A7C15ull) >> 32) ^ size;
}

static void *new_block(size_t size, uint64_t seq)
{
    if (size < sizeof(struct hdr))
        size = sizeof(struct hdr);
    unsigned char *p = (unsigned char *)malloc(size);
    if (!p)
        return NULL;
    struct hdr h = {seq, (uint32_t)size, check_of(seq, (uint32_t)size)};
    memcpy(p, &h, sizeof h);
    memset(p + sizeof h, (int)((seq & 0xff) ^ 0x5c), size - sizeof h);
    return p;
}

/* Verifies (the first and last 256 bytes of) a block and frees it. */
static void check_free(void *blk, const char *who)
{
    unsigned char *p = (unsigned char *)blk;
    struct hdr h;
    memcpy(&h, p, sizeof h);
    CHECK(h.size >= sizeof h && h.size <= (64u << 20) && h.check == check_of(h.seq, h.size),
          "%s: damaged block header at %p", who, blk);
    unsigned char v = (unsigned char)((h.seq & 0xff) ^ 0x5c);
    size_t body = h.size - sizeof h;
    size_t head = body < 256 ? body : 256;
    for (size_t i = 0; i < head; i++)
        CHECK(p[sizeof h + i] == v, "%s: block seq %llu size %u damaged at %zu", who,
              (unsigned long long)h.seq, (unsigned)h.size, sizeof h + i);
    for (size_t i = body > 256 ? body - 256 : head; i < body; i++)
        CHECK(p[sizeof h + i] == v, "%s: block seq %llu size %u damaged at %zu", who,
              (unsigned long long)h.seq, (unsigned)h.size, sizeof h + i);
    free(p);
}

static size_t pick_size(uint64_t *rng)
{
    uint64_t r = hz_test_rand(rng) % 1000;
    if (r < 850)
        return hz_test_rand_range(rng, 16, 512);
    if (r < 995)
        return hz_test_rand_range(rng, 1024, 65536);
    return hz_test_rand_range(rng, 256 << 10, 2 << 20);
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t rng = 1000 + id;
    uint64_t seq = (uint64_t)(id + 1) << 48;
    void *own[32] = {0};
    uint64_t ops = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        void *p = new_block(pick_size(&rng), ++seq);
        CHECK(p != NULL, "worker %u: malloc failed", id);
        if (hz_test_rand(&rng) & 1) {
            /* Publish; free whatever was there (usually another thread's). */
            void *old = atomic_exchange(&xs[hz_test_rand(&rng) % XSLOTS], p);
            if (old)
                check_free(old, "worker");
        } else {
            unsigned k = (unsigned)(hz_test_rand(&rng) % 32);
            if (own[k])
                check_free(own[k], "worker");
            own[k] = p;
        }
        ops++;
    }
    for (unsigned k = 0; k < 32; k++)
        if (own[k])
            check_free(own[k], "worker");
    atomic_fetch_add(&worker_ops, ops);
    return NULL;
}

static void *child_thread(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg;
    void *v[64] = {0};
    for (int i = 0; i < 3000; i++) {
        unsigned k = (unsigned)(hz_test_rand(&rng) % 64);
        if (v[k])
            check_free(v[k], "child thread");
        v[k] = new_block(pick_size(&rng), (uint64_t)i);
        CHECK(v[k] != NULL, "child thread: malloc failed");
    }
    for (unsigned k = 0; k < 64; k++)
        if (v[k])
            check_free(v[k], "child thread");
    return NULL;
}

static void child(void **pre, unsigned round)
{
    alarm(30); /* in case the parent is gone */
    /* Blocks the parent's main thread allocated before the fork. */
    for (unsigned i = 0; i < NPRE; i++)
        check_free(pre[i], "child (pre-fork block)");
    /* Blocks owned by threads that do not exist in this process. */
    for (unsigned i = 0; i < XSLOTS; i++) {
        void *p = atomic_exchange(&xs[i], NULL);
        if (p)
            check_free(p, "child (worker block)");
    }
    uint64_t rng = 5000 + round;
    enum { N = 512 };
    void *v[N] = {0};
    for (int i = 0; i < 4000; i++) {
        unsigned k = (unsigned)(hz_test_rand(&rng) % N);
        if (v[k])
            check_free(v[k], "child");
        v[k] = new_block(pick_size(&rng), (uint64_t)i);
        CHECK(v[k] != NULL, "child: malloc failed");
    }
    /* realloc and calloc too */
    for (unsigned k = 0; k < N; k += 7) {
        if (!v[k])
            continue;
        struct hdr h;
        memcpy(&h, v[k], sizeof h);
        unsigned char *q = (unsigned char *)realloc(v[k], h.size + 5000);
        CHECK(q != NULL, "child: realloc failed");
        memset(q + h.size, (int)((h.seq & 0xff) ^ 0x5c), 5000);
        h.size += 5000;
        h.check = check_of(h.seq, h.size);
        memcpy(q, &h, sizeof h);
        v[k] = q;
    }
    for (unsigned k = 0; k < N; k++)
        if (v[k])
            check_free(v[k], "child");
    unsigned char *z = (unsigned char *)calloc(3 << 20, 1);
    CHECK(z != NULL && z[0] == 0 && z[(3 << 20) - 1] == 0, "child: calloc failed");
    free(z);

    pthread_t t;
    CHECK(pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)(round + 1)) == 0,
          "child: pthread_create failed");
    CHECK(pthread_join(t, NULL) == 0, "child: pthread_join failed");
    _exit(0);
}

int main(void)
{
    alarm(300);
    hz_test_require_loaded();
    double t0 = hz_test_now();

    pthread_t w[NWORKERS];
    for (unsigned i = 0; i < NWORKERS; i++)
        CHECK(pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)i) == 0,
              "pthread_create failed");

    uint64_t rng = 42;
    static void *pre[NPRE];
    double slowest = 0;
    const unsigned nforks = hz_test_checked_variant() ? NFORKS / 2 : NFORKS;
    for (unsigned round = 0; round < nforks; round++) {
        for (unsigned i = 0; i < NPRE; i++) {
            pre[i] = new_block(pick_size(&rng), ((uint64_t)round << 32) | i);
            CHECK(pre[i] != NULL, "malloc failed");
        }
        fflush(stdout);
        fflush(stderr);
        double tf = hz_test_now();
        pid_t pid = fork();
        CHECK(pid >= 0, "fork failed: %s", strerror(errno));
        if (pid == 0)
            child(pre, round);

        int status = 0;
        pid_t r = 0;
        for (int waited = 0;; waited++) {
            r = waitpid(pid, &status, WNOHANG);
            if (r != 0)
                break;
            if (waited >= CHILD_TIMEOUT_MS) {
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                FAIL("fork %u: child %d still alive after %d ms (deadlock after fork?)", round,
                     (int)pid, CHILD_TIMEOUT_MS);
            }
            hz_test_sleep_ms(1);
        }
        CHECK(r == pid, "waitpid failed: %s", strerror(errno));
        if (WIFSIGNALED(status))
            FAIL("fork %u: child killed by signal %d", round, WTERMSIG(status));
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork %u: child exited with %d",
              round, WEXITSTATUS(status));
        double dt = hz_test_now() - tf;
        if (dt > slowest)
            slowest = dt;
        /* The parent's copies are untouched by the child. */
        for (unsigned i = 0; i < NPRE; i++)
            check_free(pre[i], "parent (pre-fork block)");
    }

    atomic_store(&stop, 1);
    for (unsigned i = 0; i < NWORKERS; i++)
        pthread_join(w[i], NULL);
    for (unsigned i = 0; i < XSLOTS; i++) {
        void *p = atomic_exchange(&xs[i], NULL);
        if (p)
            check_free(p, "parent");
    }
    printf("%u forks with %d busy threads (%llu worker allocations), slowest child %.3f s, "
           "total %.2f s\n",
           nforks, NWORKERS, (unsigned long long)atomic_load(&worker_ops), slowest,
           hz_test_now() - t0);
    return 0;
}
