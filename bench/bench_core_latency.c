/* bench_core_latency - how long a cache line takes to go from one CPU to another
 * and back, right now.
 *
 *   bench_core_latency [ROUND_TRIPS]
 *
 * Two threads, pinned to the first two CPUs the process may run on, pass one
 * cache line back and forth ROUND_TRIPS times (default 20000), after a thousand
 * untimed ones, and the program prints the mean round trip in nanoseconds.  It allocates nothing in the timed
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

static uint64_t round_trips;
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

static void *answer(void *arg)
{
    (void)arg;
    pin(cpu_other);
    for (uint64_t i = 0; i < WARM_UP + round_trips; i++) {
        if (!wait_for(2 * i + 1))
            return NULL;
        atomic_store_explicit(&line.turn, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    bench_check_argc(USAGE, argc, 0, 1);
    round_trips = argc > 1 ? bench_arg_u64(USAGE, "ROUND_TRIPS", argv[1], 1, 100000000) : 20000;

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
    double t0 = 0;
    for (uint64_t i = 0; i < WARM_UP + round_trips; i++) {
        if (i == WARM_UP)
            t0 = bench_now();
        atomic_store_explicit(&line.turn, 2 * i + 1, memory_order_release);
        if (!wait_for(2 * i + 2))
            bench_fatal("CPU %d did not answer for a second", cpu_other);
    }
    double t1 = bench_now();
    bench_thread_join(tid);

    printf("[" PROG "] cpus=%d,%d round_trips=%" PRIu64 " rtt_ns=%.0f\n", cpus[0], cpus[1],
           round_trips, (t1 - t0) * 1e9 / (double)round_trips);
    return 0;
}
