/* unit_threads.c - threads through the hz_* interface, linked with the allocator's
 * objects directly so it can also be built with ThreadSanitizer or UBSan (which must
 * keep their own malloc): cross-thread frees with checksums, thread exit and heap
 * adoption, concurrent stats readers, and large blocks that grow into freed
 * mappings' room while other threads' upkeep purges it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hakozuna.h"

#define PAIRS 2
#define PER_PRODUCER 60000
#define QCAP 1024

typedef struct {
    void *slot[QCAP];
    size_t head, tail;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} queue_t;

static queue_t queues[PAIRS];
static atomic_int failed;

static uint64_t mix(uint64_t x) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ULL;
    return x ^ (x >> 27);
}

static void fill(unsigned char *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(mix(seed + i / 8) >> (8 * (i % 8)));
}

static int check(const unsigned char *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(mix(seed + i / 8) >> (8 * (i % 8)))) return 0;
    return 1;
}

static void *producer(void *arg) {
    queue_t *q = arg;
    uint64_t r = (uint64_t)(uintptr_t)arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        r = mix(r + 1);
        size_t n = 16 + r % (i % 50 == 0 ? 100000 : 2000);
        uint64_t *p = hz_malloc(n + 16);
        if (p == NULL) {
            atomic_store(&failed, 1);
            break;
        }
        p[0] = n;
        p[1] = r;
        fill((unsigned char *)(p + 2), n, r);
        pthread_mutex_lock(&q->mu);
        while (q->tail - q->head == QCAP) pthread_cond_wait(&q->cv, &q->mu);
        q->slot[q->tail++ % QCAP] = p;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
    pthread_mutex_lock(&q->mu);
    q->done = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void *consumer(void *arg) {
    queue_t *q = arg;
    for (;;) {
        pthread_mutex_lock(&q->mu);
        while (q->tail == q->head && !q->done) pthread_cond_wait(&q->cv, &q->mu);
        if (q->tail == q->head) {
            pthread_mutex_unlock(&q->mu);
            return NULL;
        }
        uint64_t *p = q->slot[q->head++ % QCAP];
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        if (!check((unsigned char *)(p + 2), p[0], p[1])) atomic_store(&failed, 2);
        hz_free(p); /* a remote free: the producer owns it */
    }
}

/* Short-lived threads leave blocks behind for the main thread to free after they
 * exit, so exited heaps receive remote frees and are adopted by later threads. */
static void *short_lived(void *arg) {
    void **keep = arg;
    for (int i = 0; i < 200; i++) {
        void *p = hz_malloc(16 + (size_t)i * 24);
        if (i % 50 == 0) keep[i / 50] = p;
        else hz_free(p);
    }
    return NULL;
}

/* Large blocks grown by realloc, each in a freed mapping larger than it (large.c:
 * room), and freed; every fourth first waits past the purge delay, so that the other
 * thread's upkeep purges its room while it may grow into it.  What it held must
 * survive every step. */
#define GROW_ROUNDS 24
static void *grower(void *arg) {
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    for (int i = 0; i < GROW_ROUNDS && !atomic_load(&failed); i++) {
        size_t n = (size_t)7 << 20; /* within twice the size of the last one freed */
        unsigned char *p = hz_malloc(n);
        if (p == NULL) {
            atomic_store(&failed, 1);
            break;
        }
        fill(p, 4096, seed + (uint64_t)i);
        if (i % 4 == 0) {
            struct timespec ts = {0, 120 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        while (n < (size_t)13 << 20) {
            size_t m = n + n / 4;
            unsigned char *q = hz_realloc(p, m);
            if (q == NULL) {
                atomic_store(&failed, 1);
                break;
            }
            if (!check(q, 4096, seed + (uint64_t)i)) atomic_store(&failed, 2);
            q[m - 1] = 1;
            p = q;
            n = m;
        }
        hz_free(p);
    }
    return NULL;
}

static void *stats_reader(void *arg) {
    (void)arg;
    struct hz_stats s;
    for (int i = 0; i < 200; i++) hz_stats_get(&s, sizeof s);
    return NULL;
}

int main(void) {
    pthread_t prod[PAIRS], cons[PAIRS], reader;
    pthread_create(&reader, NULL, stats_reader, NULL);
    for (int i = 0; i < PAIRS; i++) {
        pthread_mutex_init(&queues[i].mu, NULL);
        pthread_cond_init(&queues[i].cv, NULL);
        pthread_create(&prod[i], NULL, producer, &queues[i]);
        pthread_create(&cons[i], NULL, consumer, &queues[i]);
    }
    for (int i = 0; i < PAIRS; i++) {
        pthread_join(prod[i], NULL);
        pthread_join(cons[i], NULL);
    }
    pthread_join(reader, NULL);

    pthread_t growers[2];
    for (int i = 0; i < 2; i++) pthread_create(&growers[i], NULL, grower, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 2; i++) pthread_join(growers[i], NULL);

    for (int round = 0; round < 50; round++) {
        void *keep[4][4];
        pthread_t t[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, short_lived, keep[i]);
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) hz_free(keep[i][j]);
    }

    struct hz_stats s;
    hz_stats_get(&s, sizeof s);
    if (atomic_load(&failed)) {
        fprintf(stderr, "unit_threads: %s\n",
                atomic_load(&failed) == 1 ? "allocation failed" : "checksum mismatch");
        return 1;
    }
#if HZ_DEBUG
    /* The checked build's frees reach the core when a block leaves its process-wide
     * quarantine, from whichever thread pushes it out, the producer included. */
    uint64_t expect_remote = (uint64_t)PAIRS * PER_PRODUCER * 3 / 4;
#else
    uint64_t expect_remote = (uint64_t)PAIRS * PER_PRODUCER;
#endif
    if (s.remote_frees_sent < expect_remote) {
        fprintf(stderr, "unit_threads: remote_frees_sent=%llu, expected >= %llu\n",
                (unsigned long long)s.remote_frees_sent, (unsigned long long)expect_remote);
        return 1;
    }
    if (s.heaps_created > 16 || s.heaps_adopted < 100) {
        fprintf(stderr, "unit_threads: heaps created=%llu adopted=%llu: exited heaps not reused\n",
                (unsigned long long)s.heaps_created, (unsigned long long)s.heaps_adopted);
        return 1;
    }
    printf("unit_threads: remote sent=%llu recv=%llu heaps created=%llu adopted=%llu: ok\n",
           (unsigned long long)s.remote_frees_sent, (unsigned long long)s.remote_frees_recv,
           (unsigned long long)s.heaps_created, (unsigned long long)s.heaps_adopted);
    return 0;
}
