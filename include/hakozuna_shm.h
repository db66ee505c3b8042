/* hakozuna_shm.h - layout of hakozuna's live statistics segment.
 *
 * A process started with HAKOZUNA_STATS=1 (and not in secure-execution mode) creates
 * a POSIX shared-memory object, mode 0600, and republishes its counters there at most
 * every HZ_SHM_PUBLISH_MS milliseconds from the allocator's slow paths.  At normal
 * exit it publishes a last time (setting HZ_SHM_FLAG_FINAL) and removes the object.
 * hzstat(1) reads it; any other reader may too, using only this header.
 *
 * The object's name holds the pid, and for a process outside the initial PID
 * namespace also that namespace (pids are per namespace, /dev/shm may be shared):
 *   /dev/shm/hakozuna.<pid>          PID namespace inode == HZ_SHM_INIT_PID_NS
 *   /dev/shm/hakozuna.<ns>.<pid>     any other: <ns> is the inode of the process's
 *                                    PID namespace (/proc/PID/ns/pid), <pid> its pid
 *                                    in that namespace (both decimal)
 * A reader looks for the pid of its own namespace under its own namespace's name.
 * A process that may change its user id (root, real/effective/saved uids not all
 * equal, or CAP_SETUID) removes the name right after creating the object, since it
 * might not be allowed to once it has switched users; its object is then reachable
 * only through its mapping, "/dev/shm/hakozuna.<...> (deleted)" in /proc/PID/maps,
 * opened as /proc/PID/map_files/START-END (CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE).
 *
 * Rules for readers:
 *  - The preamble (magic, layout_version, header_size, total_size, pid, start_time,
 *    creation_id: the first 48 bytes) keeps its offsets in every layout version, so a
 *    reader can always tell which version a segment has and whom it belongs to.
 *  - Everything after the preamble is valid only if layout_version equals the
 *    version the reader was built for (HZ_SHM_LAYOUT_VERSION) and header_size equals
 *    sizeof(struct hz_shm_segment).
 *  - The writer brackets every update with `generation`: odd while it writes, even
 *    when the data is stable.  Read `generation` (acquire), copy what you need, fence
 *    (acquire), read `generation` again; the copy is consistent if both reads are
 *    equal and even, otherwise retry.
 *  - All integers are in the machine's native byte order; all counters are 64-bit
 *    and only ever grow, except the "current" gauges (bytes_in_use, bytes_mapped,
 *    threads_live, segments_mapped).
 *
 * Usable from C11 and C++; it declares data only.
 */
#ifndef HAKOZUNA_SHM_H
#define HAKOZUNA_SHM_H

#include <stddef.h>
#include <stdint.h>

/* Bytes "hakoshm\0" at offset 0. */
#define HZ_SHM_MAGIC UINT64_C(0x006d68736f6b6168)
#define HZ_SHM_LAYOUT_VERSION 2u

/* shm_open(3) name prefix and where Linux keeps those objects. */
#define HZ_SHM_NAME_PREFIX "/hakozuna."      /* + decimal pid */
#define HZ_SHM_DIR "/dev/shm"
#define HZ_SHM_FILE_PREFIX "hakozuna."       /* file name in HZ_SHM_DIR: + [ns.]pid */

/* Inode of the initial PID namespace (the kernel's PROC_PID_INIT_INO). */
#define HZ_SHM_INIT_PID_NS UINT64_C(0xEFFFFFFC)

/* The only environment switch: exactly this string in the environment. */
#define HZ_SHM_ENV "HAKOZUNA_STATS"
#define HZ_SHM_ENV_ON "HAKOZUNA_STATS=1"
/* stderr or an absolute path: a report of the counters at exit (observability only). */
#define HZ_SHM_ENV_EXIT "HAKOZUNA_STATS_EXIT"

/* Counters are republished at most this often (milliseconds). */
#define HZ_SHM_PUBLISH_MS 100

/* Size classes the layout has room for (the library uses fewer). */
#define HZ_SHM_MAX_CLASSES 128

/* Bytes of the preamble that never moves. */
#define HZ_SHM_PREAMBLE_SIZE 48

/* flags */
#define HZ_SHM_FLAG_FINAL 1u       /* last publish, made at exit: the process is ending */
#define HZ_SHM_FLAG_NO_COUNTERS 2u /* built without per-thread counters (--disable-stats):
                                      the per-thread event counts read 0 */

/* Process-wide counters, each written whole (64-bit) by the publisher. */
struct hz_shm_counters {
    /* struct hz_stats (hakozuna.h), field for field */
    uint64_t mallocs;            /* allocations served (all sizes) */
    uint64_t frees;              /* blocks freed (all sizes) */
    uint64_t bytes_in_use;       /* bytes in blocks handed out (size-class rounded) */
    uint64_t bytes_mapped;       /* bytes currently mapped from the OS */
    uint64_t bytes_purged;       /* bytes returned with madvise, cumulative */
    uint64_t bytes_unmapped;     /* bytes returned with munmap, cumulative */
    uint64_t remote_frees_sent;  /* frees of another thread's blocks */
    uint64_t remote_frees_recv;  /* such blocks collected by their owner */
    uint64_t remote_batches;     /* batches posted to owners */
    uint64_t foreign_frees;      /* free/realloc of pointers hakozuna did not hand out */
    uint64_t large_allocs;       /* allocations served directly from the OS */
    uint64_t large_cache_hits;   /* large allocations served from the large cache */
    uint64_t heaps_created;      /* thread heaps created */
    uint64_t heaps_adopted;      /* heaps of exited threads taken over by new threads */
    uint64_t threads_live;       /* threads currently owning a heap */
    uint64_t segments_mapped;    /* segments currently mapped */
    /* slow-path events */
    uint64_t refills;            /* trips through the allocation slow path */
    uint64_t pages_made;         /* size-class pages carved from segments */
    uint64_t pages_retired;      /* empty pages given back to their segment */
    uint64_t outbox_flushes;     /* remote-free outboxes posted to an owner's inbox */
    /* the publisher */
    uint64_t publishes;          /* updates of this segment so far */
    uint64_t last_publish_unix_ns;  /* CLOCK_REALTIME of the latest update */
    uint64_t last_publish_mono_ns;  /* CLOCK_MONOTONIC of the latest update */
    uint64_t reserved[9];        /* zero; room for counters without a layout change */
};

struct hz_shm_class {
    uint64_t size;               /* block size in bytes; 0 for an unused slot */
    uint64_t mallocs;            /* blocks of this class handed out */
    uint64_t frees;              /* blocks of this class freed */
};

struct hz_shm_segment {
    /* --- preamble: the same offsets in every layout version --- */
    uint64_t magic;              /* HZ_SHM_MAGIC, stored last when the segment is made */
    uint32_t layout_version;     /* HZ_SHM_LAYOUT_VERSION */
    uint32_t header_size;        /* sizeof(struct hz_shm_segment) of the writer */
    uint64_t total_size;         /* bytes of the object (header_size rounded to pages) */
    uint64_t pid;                /* process that publishes here */
    uint64_t start_time;         /* its start time: clock ticks since boot, field 22 of
                                    /proc/PID/stat (0 if unknown) */
    uint64_t creation_id;        /* random 64-bit id of this segment */
    /* --- layout version 2 --- */
    uint64_t generation;         /* seqlock: odd while the counters are being written */
    uint64_t clock_ticks;        /* ticks per second of start_time (AT_CLKTCK) */
    uint64_t created_unix_ns;    /* CLOCK_REALTIME when the segment was made */
    uint64_t pid_ns;             /* inode of the PID namespace `pid` is counted in (2) */
    uint32_t flags;              /* HZ_SHM_FLAG_* */
    uint32_t class_count;        /* entries of classes[] in use (class 0 is unused) */
    char variant[32];            /* "default", ...: NUL-terminated */
    char version[64];            /* hz_version(): "hakozuna 0.1.0 (default)" */
    char config[512];            /* hz_config_string() */
    struct hz_shm_counters counters;
    struct hz_shm_class classes[HZ_SHM_MAX_CLASSES];
};

#if defined(__cplusplus)
#define HZ_SHM_ASSERT_(c, m) static_assert(c, m)
#else
#define HZ_SHM_ASSERT_(c, m) _Static_assert(c, m)
#endif
HZ_SHM_ASSERT_(offsetof(struct hz_shm_segment, layout_version) == 8, "preamble moved");
HZ_SHM_ASSERT_(offsetof(struct hz_shm_segment, header_size) == 12, "preamble moved");
HZ_SHM_ASSERT_(offsetof(struct hz_shm_segment, total_size) == 16, "preamble moved");
HZ_SHM_ASSERT_(offsetof(struct hz_shm_segment, pid) == 24, "preamble moved");
HZ_SHM_ASSERT_(offsetof(struct hz_shm_segment, start_time) == 32, "preamble moved");
HZ_SHM_ASSERT_(offsetof(struct hz_shm_segment, creation_id) == 40, "preamble moved");
HZ_SHM_ASSERT_(offsetof(struct hz_shm_segment, generation) == HZ_SHM_PREAMBLE_SIZE,
               "preamble size");
HZ_SHM_ASSERT_(sizeof(struct hz_shm_counters) == 32 * 8, "counter block size");
#undef HZ_SHM_ASSERT_

#endif /* HAKOZUNA_SHM_H */
