/* hakozuna_prof.h - layout of hakozuna's live heap-profile segment.
 *
 * A process started with HAKOZUNA_STATS=1 and HAKOZUNA_PROFILE=1 (or
 * HAKOZUNA_PROFILE=<bytes>) samples about one allocation per HZ_PROF_DEFAULT_RATE
 * bytes (or <bytes>) allocated: the intervals between samples are exponentially
 * distributed over bytes, so an allocation of s bytes is sampled with probability
 * 1 - exp(-s / sample_rate).  Each sample's call stack goes into a table of traces in
 * a second POSIX shared-memory object next to the stats segment (hakozuna_shm.h),
 * named like it with HZ_PROF_SUFFIX appended:
 *   /dev/shm/hakozuna.<pid>.heap  or  /dev/shm/hakozuna.<ns>.<pid>.heap
 * It lives exactly as long as the stats segment does and by the same rules: mode
 * 0600; a process that may change its user id removes the name at once, and its
 * object is then reachable only through its mapping ("... .heap (deleted)" in
 * /proc/PID/maps).  A fork child does not profile (it drops the mapping).
 *
 * Each trace counts the sampled blocks with that call stack, and those of them
 * freed: the difference is what is still live.  It keeps these counts twice, and
 * readers add the two up: once for the thread that made the trace (writer, its
 * thread slot in the stats segment), which updates them without a locked
 * instruction, and once for every other thread, with atomic adds.  (Counts that only
 * grow, so that a sample and its free each touch two.)  An estimate of the real figures scales
 * each trace by 1 / (1 - exp(-avg / sample_rate)), avg being its average sampled
 * size (what pprof does for "heap_v2" profiles).  hzstat --heap reads it.
 *
 * Rules for readers:
 *  - magic, layout_version and header_size come first in every version; the rest is
 *    valid only if layout_version == HZ_PROF_LAYOUT_VERSION and header_size ==
 *    sizeof(struct hz_prof_segment).
 *  - traces[] starts at header_size; it has trace_capacity entries of trace_size
 *    bytes each.  A trace whose `hash` is 0 or 1 is not (yet) in use; once `hash`
 *    is larger (read it with acquire), depth and frames never change.
 *  - The counts are updated with relaxed atomics, one at a time, without a seqlock:
 *    a snapshot may catch a block between its count and its bytes, or see a free
 *    before the allocation it ends (take a negative difference as 0).
 *  - A trace's figures are counts[0] + counts[1].  Samples taken are the traces'
 *    alloc_count plus samples_lost.
 *  - Frames are return addresses in the process's address space, innermost first,
 *    starting with the allocator's entry point (malloc, calloc, operator new...)
 *    or the hakozuna function below it; map them to files with /proc/PID/maps.
 *
 * Usable from C11 and C++; it declares data only.
 */
#ifndef HAKOZUNA_PROF_H
#define HAKOZUNA_PROF_H

#include <stdint.h>

/* Bytes "hakoprof" at offset 0. */
#define HZ_PROF_MAGIC UINT64_C(0x666f72706f6b6168)
#define HZ_PROF_LAYOUT_VERSION 3u

/* Appended to the stats segment's name. */
#define HZ_PROF_SUFFIX ".heap"

/* The switch, read only when HAKOZUNA_STATS=1 is on too: "1" for the default rate,
 * or the mean number of bytes between samples (decimal), "0" or "" for off. */
#define HZ_PROF_ENV "HAKOZUNA_PROFILE"
#define HZ_PROF_DEFAULT_RATE 524288u

#define HZ_PROF_MAX_FRAMES 32
#define HZ_PROF_TRACES 4096

struct hz_prof_counts {
    uint64_t alloc_count;        /* sampled blocks with this stack, ever */
    uint64_t alloc_bytes;        /* their sizes as requested */
    uint64_t freed_count;        /* of those, the blocks freed */
    uint64_t freed_bytes;
};

struct hz_prof_trace {
    uint64_t hash;               /* 0: free slot; 1: being written; else in use */
    uint32_t depth;              /* frames[] in use */
    uint32_t writer;             /* 1 + thread slot of the trace's maker; 0: none */
    struct hz_prof_counts counts[2]; /* [0]: by the writer, [1]: by other threads */
    uint64_t frames[HZ_PROF_MAX_FRAMES]; /* return addresses, innermost first */
};

struct hz_prof_segment {
    uint64_t magic;              /* HZ_PROF_MAGIC, stored last when the segment is made */
    uint32_t layout_version;     /* HZ_PROF_LAYOUT_VERSION */
    uint32_t header_size;        /* sizeof(struct hz_prof_segment): where traces[] starts */
    uint64_t total_size;         /* bytes of the object */
    uint64_t pid;                /* process that records here */
    uint64_t sample_rate;        /* mean bytes allocated between two samples */
    uint32_t trace_capacity;     /* entries of traces[] */
    uint32_t trace_size;         /* sizeof(struct hz_prof_trace) */
    uint64_t samples_lost;       /* in no trace: the table was full, or a large or
                                    aligned sample found 16384 such samples live
                                    already, or no memory */
    uint64_t reserved[9];
};

#if defined(__cplusplus)
#define HZ_PROF_ASSERT_(c, m) static_assert(c, m)
#else
#define HZ_PROF_ASSERT_(c, m) _Static_assert(c, m)
#endif
HZ_PROF_ASSERT_(sizeof(struct hz_prof_segment) == 128, "profile header size");
HZ_PROF_ASSERT_(sizeof(struct hz_prof_trace) == 80 + 8 * HZ_PROF_MAX_FRAMES, "trace size");
#undef HZ_PROF_ASSERT_

#endif /* HAKOZUNA_PROF_H */
