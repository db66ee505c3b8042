/* test_key_race.c - a thread that starts while the allocator is still creating its
 * thread key must still have its heap released when it exits.
 *
 * This program defines pthread_key_create, which the allocator's own call binds to:
 * the first call (the allocator's, made while it initialises) starts a thread that
 * allocates at once, and then sleeps 100 ms before creating the key.  The thread
 * exits; once it is joined only the main thread may count as live, and the next
 * thread must adopt the released heap rather than make a new one.
 */
#include "hz_test.h"

#include <pthread.h>
#include <stdatomic.h>

static pthread_t racer;
static atomic_int racer_started;

static void *racer_main(void *arg)
{
    (void)arg;
    void *p = malloc(100);
    CHECK(p != NULL, "racer: malloc failed");
    memset(p, 1, 100);
    free(p);
    return NULL;
}

int pthread_key_create(pthread_key_t *key, void (*destructor)(void *))
{
    static int (*real)(pthread_key_t *, void (*)(void *));
    if (real == NULL) {
        void *sym = dlsym(RTLD_NEXT, "pthread_key_create");
        if (sym == NULL)
            abort();
        memcpy(&real, &sym, sizeof real);
    }
    if (!atomic_exchange(&racer_started, 1) && pthread_create(&racer, NULL, racer_main, NULL) == 0)
        hz_test_sleep_ms(100);
    return real(key, destructor);
}

static void *next_main(void *arg)
{
    (void)arg;
    void *p = malloc(100);
    CHECK(p != NULL, "malloc failed");
    memset(p, 2, 100);
    free(p);
    return NULL;
}

int main(void)
{
    int loaded = hz_test_require_loaded();
    CHECK(atomic_load(&racer_started), "the allocator never created its thread key");
    pthread_join(racer, NULL);
    if (!loaded)
        return 0;
    struct hz_stats st, st2;
    CHECK(hz_test_stats(&st), "hz_stats_get failed");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, next_main, NULL) == 0, "pthread_create failed");
    pthread_join(t, NULL);
    CHECK(hz_test_stats(&st2), "hz_stats_get failed");
    printf("after the racing thread: %llu threads live; next thread: %llu heaps made, "
           "%llu adopted\n",
           (unsigned long long)st.threads_live,
           (unsigned long long)(st2.heaps_created - st.heaps_created),
           (unsigned long long)(st2.heaps_adopted - st.heaps_adopted));
    CHECK(st.threads_live == 1, "%llu threads live after the racing thread exited: its heap "
          "was never released", (unsigned long long)st.threads_live);
    CHECK(st2.heaps_adopted > st.heaps_adopted, "the next thread did not adopt a heap (%llu made, %llu adopted before)", (unsigned long long)st.heaps_created, (unsigned long long)st.heaps_adopted);
    return 0;
}
