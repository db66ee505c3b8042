/* test_cross_thread.c - producer/consumer traffic with cross-thread frees.
 *
 * Producers allocate blocks of random sizes, stamp each with a header and a
 * pattern derived from its sequence number, and hand them over in batches
 * through a bounded queue.  Consumers verify every block and free most of them
 * (frees of another thread's blocks).  Some batches go back to the producer
 * that allocated them, which verifies and frees those blocks itself.  At the
 * end the number of blocks and the sum of their sequence numbers must match
 * on both sides.  Any damaged block fails the test at once.
 */
#include "hz_test.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#define NPROD 3
#define NCONS 3
#define BATCH 64
#define BATCHES_PER_PROD 12000 /* 3 * 12000 * 64 = 2.3 million blocks */
#define QCAP 32                /* bounded work queue, in batches */

struct hdr {
    uint64_t seq;
    uint32_t size;
    uint16_t producer;
    uint16_t tag;
};

struct batch {
    struct batch *next; /* return queue link */
    uint64_t id;
    uint32_t producer;
    uint32_t n;
    void *blk[BATCH];
};

/* bounded work queue */
static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t q_not_full = PTHREAD_COND_INITIALIZER;
static struct batch *q_ring[QCAP];
static unsigned q_head, q_count;
static int producers_done;

/* per-producer return queues (unbounded, so consumers never block on them) */
struct retq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct batch *list;
};
static struct retq retq[NPROD];
static atomic_int consumers_done;

static atomic_uint_fast64_t produced_count, produced_sum;
static atomic_uint_fast64_t freed_count, freed_sum;
static atomic_uint_fast64_t returned_batches;

static uint16_t tag_of(uint64_t seq, uint32_t size)
{
    uint64_t x = (seq ^ ((uint64_t)size << 17)) * 0x9E3779B97F4A7C15ull;
    return (uint16_t)(x >> 48);
}

/* Words of the body: base + k*step.  Blocks up to 1 KiB are stamped
 * completely; larger ones on their first 512 and last 64 bytes and one word
 * in every 256 bytes between, which keeps the run short. */
static void stamp(unsigned char *p, uint64_t seq, uint32_t size, uint16_t prod)
{
    struct hdr h = {seq, size, prod, tag_of(seq, size)};
    memcpy(p, &h, sizeof h);
    uint64_t base = seq * 0xD6E8FEB86659FD93ull, step = (seq << 1) | 1;
    size_t nw = (size - sizeof h) / 8;
    unsigned char *body = p + sizeof h;
    if (size <= 1024) {
        for (size_t k = 0; k < nw; k++) {
            uint64_t w = base + k * step;
            memcpy(body + 8 * k, &w, 8);
        }
    } else {
        for (size_t k = 0; k < 64; k++) {
            uint64_t w = base + k * step;
            memcpy(body + 8 * k, &w, 8);
        }
        for (size_t k = 64; k + 8 < nw; k += 32) {
            uint64_t w = base + k * step;
            memcpy(body + 8 * k, &w, 8);
        }
        for (size_t k = nw - 8; k < nw; k++) {
            uint64_t w = base + k * step;
            memcpy(body + 8 * k, &w, 8);
        }
    }
    for (size_t i = sizeof h + nw * 8; i < size; i++)
        p[i] = (unsigned char)(seq + i);
}

static int word_ok(const unsigned char *body, size_t k, uint64_t base, uint64_t step)
{
    uint64_t w;
    memcpy(&w, body + 8 * k, 8);
    return w == base + k * step;
}

/* Verifies a block; returns its sequence number.  `who` names the checker. */
static uint64_t verify(const void *blk, const char *who)
{
    const unsigned char *p = (const unsigned char *)blk;
    struct hdr h;
    memcpy(&h, p, sizeof h);
    CHECK(h.size >= 16 && h.size <= 65536 && h.producer < NPROD &&
              (h.seq >> 40) == h.producer && h.tag == tag_of(h.seq, h.size),
          "%s: damaged block header at %p (seq %llu size %u producer %u)", who, blk,
          (unsigned long long)h.seq, (unsigned)h.size, (unsigned)h.producer);
    uint64_t base = h.seq * 0xD6E8FEB86659FD93ull, step = (h.seq << 1) | 1;
    size_t nw = (h.size - sizeof h) / 8;
    const unsigned char *body = p + sizeof h;
    size_t bad = SIZE_MAX;
    if (h.size <= 1024) {
        for (size_t k = 0; k < nw && bad == SIZE_MAX; k++)
            if (!word_ok(body, k, base, step))
                bad = k;
    } else {
        for (size_t k = 0; k < 64 && bad == SIZE_MAX; k++)
            if (!word_ok(body, k, base, step))
                bad = k;
        for (size_t k = 64; k + 8 < nw && bad == SIZE_MAX; k += 32)
            if (!word_ok(body, k, base, step))
                bad = k;
        for (size_t k = nw - 8; k < nw && bad == SIZE_MAX; k++)
            if (!word_ok(body, k, base, step))
                bad = k;
    }
    CHECK(bad == SIZE_MAX, "%s: block seq %llu size %u: pattern damaged at byte %zu", who,
          (unsigned long long)h.seq, (unsigned)h.size, sizeof h + bad * 8);
    for (size_t i = sizeof h + nw * 8; i < h.size; i++)
        CHECK(p[i] == (unsigned char)(h.seq + i), "%s: block seq %llu size %u: tail byte %zu", who,
              (unsigned long long)h.seq, (unsigned)h.size, i);
    return h.seq;
}

static void drain_returns(unsigned id, int wait, uint64_t *cnt, uint64_t *sum)
{
    struct retq *r = &retq[id];
    pthread_mutex_lock(&r->mu);
    if (wait)
        while (!r->list && atomic_load(&consumers_done) < NCONS)
            pthread_cond_wait(&r->cv, &r->mu);
    struct batch *l = r->list;
    r->list = NULL;
    pthread_mutex_unlock(&r->mu);
    while (l) {
        struct batch *next = l->next;
        CHECK(l->producer == id, "batch of producer %u returned to producer %u", l->producer, id);
        for (unsigned i = 0; i < l->n; i++) {
            if (!l->blk[i])
                continue;
            *sum += verify(l->blk[i], "producer");
            (*cnt)++;
            free(l->blk[i]); /* freed by the thread that allocated it */
        }
        free(l);
        l = next;
    }
}

static void *producer(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t rng = 0x1234567ull * (id + 1);
    uint64_t seq = (uint64_t)id << 40;
    uint64_t psum = 0, pcnt = 0, fsum = 0, fcnt = 0;
    for (uint64_t b = 0; b < BATCHES_PER_PROD; b++) {
        struct batch *bt = (struct batch *)malloc(sizeof *bt);
        CHECK(bt != NULL, "malloc(batch) failed");
        bt->next = NULL;
        bt->id = b;
        bt->producer = id;
        bt->n = BATCH;
        for (unsigned i = 0; i < BATCH; i++) {
            uint64_t r = hz_test_rand(&rng);
            size_t size = (r % 5 < 3) ? hz_test_rand_range(&rng, 16, 256)
                                      : hz_test_rand_range(&rng, 16, 65536);
            unsigned char *p = (unsigned char *)malloc(size);
            CHECK(p != NULL, "malloc(%zu) failed", size);
            stamp(p, ++seq, (uint32_t)size, (uint16_t)id);
            psum += seq;
            pcnt++;
            bt->blk[i] = p;
        }
        pthread_mutex_lock(&q_mu);
        while (q_count == QCAP)
            pthread_cond_wait(&q_not_full, &q_mu);
        q_ring[(q_head + q_count) % QCAP] = bt;
        q_count++;
        pthread_cond_signal(&q_not_empty);
        pthread_mutex_unlock(&q_mu);
        if ((b & 7) == 0)
            drain_returns(id, 0, &fcnt, &fsum);
    }
    atomic_fetch_add(&produced_count, pcnt);
    atomic_fetch_add(&produced_sum, psum);
    pthread_mutex_lock(&q_mu);
    producers_done++;
    pthread_cond_broadcast(&q_not_empty);
    pthread_mutex_unlock(&q_mu);
    /* Keep freeing returned blocks until every consumer has finished. */
    for (;;) {
        drain_returns(id, 1, &fcnt, &fsum);
        pthread_mutex_lock(&retq[id].mu);
        int done = atomic_load(&consumers_done) == NCONS && retq[id].list == NULL;
        pthread_mutex_unlock(&retq[id].mu);
        if (done)
            break;
    }
    atomic_fetch_add(&freed_count, fcnt);
    atomic_fetch_add(&freed_sum, fsum);
    return NULL;
}

static void *consumer(void *arg)
{
    /* Odd consumers also allocate (so they own a heap of their own), even ones
     * only ever free: both kinds of remote free get exercised. */
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t fsum = 0, fcnt = 0, nret = 0;
    for (;;) {
        pthread_mutex_lock(&q_mu);
        while (q_count == 0 && producers_done < NPROD)
            pthread_cond_wait(&q_not_empty, &q_mu);
        if (q_count == 0) {
            pthread_mutex_unlock(&q_mu);
            break;
        }
        struct batch *bt = q_ring[q_head];
        q_head = (q_head + 1) % QCAP;
        q_count--;
        pthread_cond_signal(&q_not_full);
        pthread_mutex_unlock(&q_mu);

        CHECK(bt->n == BATCH && bt->producer < NPROD, "damaged batch %p", (void *)bt);
        uint64_t *seqs = NULL;
        if (id & 1) {
            seqs = (uint64_t *)malloc(bt->n * sizeof *seqs);
            CHECK(seqs != NULL, "consumer: malloc failed");
        }
        for (unsigned i = 0; i < bt->n; i++) {
            uint64_t s = verify(bt->blk[i], "consumer");
            if (seqs)
                seqs[i] = s;
        }
        if (seqs) {
            for (unsigned i = 1; i < bt->n; i++)
                CHECK(seqs[i] == seqs[i - 1] + 1, "batch out of sequence");
            free(seqs);
        }
        if (bt->id % 4 == 1) {
            /* Free half here, send the other half back to its allocator. */
            for (unsigned i = 0; i < bt->n; i += 2) {
                fsum += verify(bt->blk[i], "consumer");
                fcnt++;
                free(bt->blk[i]);
                bt->blk[i] = NULL;
            }
            struct retq *r = &retq[bt->producer];
            pthread_mutex_lock(&r->mu);
            bt->next = r->list;
            r->list = bt;
            pthread_cond_signal(&r->cv);
            pthread_mutex_unlock(&r->mu);
            nret++;
        } else {
            for (unsigned i = 0; i < bt->n; i++) {
                fsum += verify(bt->blk[i], "consumer");
                fcnt++;
                free(bt->blk[i]);
            }
            free(bt);
        }
    }
    atomic_fetch_add(&freed_count, fcnt);
    atomic_fetch_add(&freed_sum, fsum);
    atomic_fetch_add(&returned_batches, nret);
    atomic_fetch_add(&consumers_done, 1);
    for (int i = 0; i < NPROD; i++) {
        pthread_mutex_lock(&retq[i].mu);
        pthread_cond_broadcast(&retq[i].cv);
        pthread_mutex_unlock(&retq[i].mu);
    }
    return NULL;
}

/* Threads that never allocate free 60 blocks each of `blocks` (posted alone, on the
 * owner's loose list); this thread gets them back and stores in each a word whose
 * top byte runs through all 256 values, then reallocs each in place and has them
 * freed the same way again.  A loose list's tag is one byte of the link word: data
 * that matches it is still the program's, and must not read as freed. */
enum { TAGGED = 4096, PER_THREAD = 60 };
static void *tagged[TAGGED];
static void *free_sixty(void *arg)
{
    void **b = arg;
    for (int i = 0; i < PER_THREAD; i++)
        free(b[i]);
    return NULL;
}
static void free_by_heapless_threads(void)
{
    for (int i = 0; i + PER_THREAD <= TAGGED; i += PER_THREAD) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, free_sixty, &tagged[i]) == 0, "pthread_create failed");
        pthread_join(t, NULL);
    }
    for (int i = TAGGED / PER_THREAD * PER_THREAD; i < TAGGED; i++)
        free(tagged[i]);
}
static void loose_tag_is_data(void)
{
    for (int i = 0; i < TAGGED; i++)
        CHECK((tagged[i] = malloc(8)) != NULL, "malloc failed");
    free_by_heapless_threads(); /* taken back when this thread's pages run dry */
    for (int i = 0; i < TAGGED; i++) {
        CHECK((tagged[i] = malloc(8)) != NULL, "malloc failed");
        uint64_t v = (uint64_t)(i & 255) << 56 | 0x123456789abcULL;
        memcpy(tagged[i], &v, sizeof v);
    }
    for (int i = 0; i < TAGGED; i++)
        CHECK((tagged[i] = realloc(tagged[i], 8)) != NULL, "realloc failed");
    free_by_heapless_threads();
    malloc_trim(0);
}

/* A thread that never allocates frees 40 blocks of this one: 40 remote frees sent,
 * whatever the sender had, and never more received than sent.  (The checked
 * variant's frees wait in its quarantine: it sends later.) */
static void *free_forty(void *arg)
{
    void **blocks = arg;
    for (int i = 0; i < 40; i++)
        free(blocks[i]);
    return NULL;
}
static void heapless_frees_counted(void)
{
    struct hz_stats before, after;
    void *blocks[40];
    for (int i = 0; i < 40; i++)
        CHECK((blocks[i] = malloc(64)) != NULL, "malloc failed");
    CHECK(hz_test_stats(&before), "hz_stats_get is not available");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_forty, blocks) == 0, "pthread_create failed");
    pthread_join(t, NULL);
    malloc_trim(0); /* take them in */
    CHECK(hz_test_stats(&after), "hz_stats_get is not available");
    uint64_t sent = after.remote_frees_sent - before.remote_frees_sent;
    printf("a thread without a heap freed 40 blocks: remote_frees_sent +%llu, recv +%llu\n",
           (unsigned long long)sent,
           (unsigned long long)(after.remote_frees_recv - before.remote_frees_recv));
    if (!hz_test_checked_variant())
        CHECK(sent >= 40, "remote_frees_sent grew by %llu, not 40", (unsigned long long)sent);
    CHECK(after.remote_frees_recv <= after.remote_frees_sent,
          "remote_frees_recv %llu above remote_frees_sent %llu",
          (unsigned long long)after.remote_frees_recv, (unsigned long long)after.remote_frees_sent);
}

int main(void)
{
    int hz = hz_test_require_loaded();
    double t0 = hz_test_now();
    for (int i = 0; i < NPROD; i++) {
        pthread_mutex_init(&retq[i].mu, NULL);
        pthread_cond_init(&retq[i].cv, NULL);
        retq[i].list = NULL;
    }
    pthread_t pt[NPROD], ct[NCONS];
    for (int i = 0; i < NCONS; i++)
        CHECK(pthread_create(&ct[i], NULL, consumer, (void *)(uintptr_t)i) == 0,
              "pthread_create failed");
    for (int i = 0; i < NPROD; i++)
        CHECK(pthread_create(&pt[i], NULL, producer, (void *)(uintptr_t)i) == 0,
              "pthread_create failed");
    for (int i = 0; i < NPROD; i++)
        pthread_join(pt[i], NULL);
    for (int i = 0; i < NCONS; i++)
        pthread_join(ct[i], NULL);

    uint64_t pc = atomic_load(&produced_count), ps = atomic_load(&produced_sum);
    uint64_t fc = atomic_load(&freed_count), fs = atomic_load(&freed_sum);
    printf("blocks produced %llu, freed %llu, batches returned %llu, checksum %016llx (%.2f s)\n",
           (unsigned long long)pc, (unsigned long long)fc,
           (unsigned long long)atomic_load(&returned_batches), (unsigned long long)ps,
           hz_test_now() - t0);
    CHECK(pc == (uint64_t)NPROD * BATCHES_PER_PROD * BATCH, "produced %llu blocks",
          (unsigned long long)pc);
    CHECK(fc == pc, "freed %llu blocks, produced %llu", (unsigned long long)fc,
          (unsigned long long)pc);
    CHECK(fs == ps, "checksum mismatch: produced %016llx, freed %016llx", (unsigned long long)ps,
          (unsigned long long)fs);
    CHECK(atomic_load(&returned_batches) > 0, "no batch went back to its producer");

    if (hz) {
        struct hz_stats st;
        CHECK(hz_test_stats(&st), "hz_stats_get is not available");
        printf("hz_stats: remote_frees_sent %llu, remote_frees_recv %llu, remote_batches %llu\n",
               (unsigned long long)st.remote_frees_sent, (unsigned long long)st.remote_frees_recv,
               (unsigned long long)st.remote_batches);
        CHECK(st.remote_frees_sent > 0, "hz_stats: remote_frees_sent is 0 after cross-thread frees");
        heapless_frees_counted();
    }
    loose_tag_is_data();
    return 0;
}
