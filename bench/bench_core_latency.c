/* bench_core_latency - how long a cache line takes to go from one CPU to another
 * and back, right now.
 *
 *   bench_core_latency [ROUND_TRIPS]
 *
 * Two threads, pinned to the first two CPUs the process may run on, pass one
 * cache line back and forth ROUND_TRIPS times (default 20000) or for 50 ms,
 * whichever ends first, after a thousand untimed ones (or 50 ms of them), and
 * the program prints the number of timed round trips and their mean in
 * nanoseconds.  It allocates nothing in the timed
 * part and measures no allocator: tools/hzbench runs it just before each run of
 * a multi-threaded cell, because on a virtual machine the same two CPUs can
 * pass lines three times faster one minute than the next (the host moves the
 * virtual CPUs between cores that share a cache and cores that do not), and
 * every allocator's cross-thread throughput follows.
 *
 * Output: "cpus=A,B round_trips=N rtt_ns=X".  With fewer than two CPUs to run
 * on, "cpus=A round_trips=0 rtt_ns=-" and exit status 0; when the other thread
 * does not answer for a second (its CPU taken away), an error and exit status 1.
 *
 * Constraints: 1 <= ROUND_TRIPS <= 10^8.
 */
#include "bench_common.h"

#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>

#define PROG "bench_core_latency"

static const char USAGE[] = PROG " [ROUND_TRIPS]";

/* The line the threads pass, alone on its cache line (the alignment rounds the
 * struct's size up to 64 bytes too). */
static struct {
    alignas(64) _Atomic uint64_t turn;
} line;

/* Round trips before the timed ones: the other thread starts and settles. */
#define WARM_UP 1000
/* The timed round trips stop after this many seconds, and the warm-up too: on a
 * loaded machine a round trip waits for the scheduler, and the probe must still
 * end at once (its mean then says the CPUs are busy). */
#define TIME_BUDGET 0.05
/* What the line holds when the other thread is to stop. */
#define STOP UINT64_MAX

static int cpu_other;

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    int err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (err != 0)
        bench_fatal("cannot run on CPU %d: %s", cpu, strerror(err));
}

/* Waits until the line holds want; false after a second without it. */
static bool wait_for(uint64_t want)
{
    unsigned spins = 0;
    double deadline = 0;
    while (atomic_load_explicit(&line.turn, memory_order_acquire) != want) {
        if (++spins % 65536 == 0) {
            double now = bench_now();
            if (deadline == 0)
                deadline = now + 1.0;
            else if (now > deadline)
                return false;
        }
    }
    return true;
}

/* Answers every odd value v with v + 1 (the line then holds an even value until
 * the next round trip), until STOP. */
static void *answer(void *arg)
{
    (void)arg;
    pin(cpu_other);
    for (;;) {
        uint64_t v = atomic_load_explicit(&line.turn, memory_order_acquire);
        if (v == STOP)
            return NULL;
        if (v & 1)
            atomic_store_explicit(&line.turn, v + 1, memory_order_release);
    }
}

int main(int argc, char **argv)
{
    bench_check_argc(USAGE, argc, 0, 1);
    uint64_t round_trips =
        argc > 1 ? bench_arg_u64(USAGE, "ROUND_TRIPS", argv[1], 1, 100000000) : 20000;

    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        bench_fatal("sched_getaffinity: %s", strerror(errno));
    int cpus[2] = {0, 0}, n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[n++] = c;
    if (n < 2) {
        printf("[" PROG "] cpus=%d round_trips=0 rtt_ns=-\n", cpus[0]);
        return 0;
    }
    cpu_other = cpus[1];
    pin(cpus[0]);

    pthread_t tid;
    bench_thread_create(&tid, answer, NULL);
    /* Round trip i sends 2i + 1 and waits for 2i + 2.  The clock is read every 64
     * round trips, so that reading it adds little to what is measured. */
    double start = bench_now(), t0 = 0;
    bool timing = false;
    uint64_t i = 0, timed = 0;
    for (;;) {
        atomic_store_explicit(&line.turn, 2 * i + 1, memory_order_release);
        if (!wait_for(2 * i + 2))
            bench_fatal("CPU %d did not answer for a second", cpu_other);
        i++;
        if (!timing) {
            if (i >= WARM_UP || (i % 64 == 0 && bench_now() - start > TIME_BUDGET)) {
                timing = true;
                t0 = bench_now();
            }
            continue;
        }
        if (++timed == round_trips || (timed % 64 == 0 && bench_now() - t0 > TIME_BUDGET))
            break;
    }
    double t1 = bench_now();
    atomic_store_explicit(&line.turn, STOP, memory_order_release);
    bench_thread_join(tid);

    printf("[" PROG "] cpus=%d,%d round_trips=%" PRIu64 " rtt_ns=%.0f\n", cpus[0], cpus[1],
           timed, (t1 - t0) * 1e9 / (double)timed);
    return 0;
}
