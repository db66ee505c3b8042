/* hakozuna_shm.h - layout of hakozuna's live statistics segment.
 *
 * A process started with HAKOZUNA_STATS=1 (and not in secure-execution mode) creates
 * a POSIX shared-memory object, mode 0600.  Its counters live there: every thread
 * heap's counters sit in a slot of the object (struct hz_shm_thread) and are bumped
 * in place by the owning thread, and the process-wide ones (struct hz_shm_live) are
 * updated in place by the allocator's slow paths, so a reader that sums them sees
 * the figures of the moment, busy or idle process alike.  In addition the merged
 * totals (struct hz_shm_counters, classes[]) are republished at most every
 * HZ_SHM_PUBLISH_MS milliseconds from the slow paths, a consistent but possibly
 * older snapshot.  At normal exit the process publishes a last time (setting
 * HZ_SHM_FLAG_FINAL) and removes the object.  hzstat(1) reads it; any other reader
 * may too, using only this header.
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
 *    threads_live, segments_mapped, bytes_dirty).
 *  - The live counters (`live` and the thread slots) are not under the seqlock: each
 *    is one aligned 64-bit word, read it with a single (relaxed atomic) load.  They
 *    are current but not a snapshot of one instant: summing them, a free may be seen
 *    without its malloc, so clamp differences such as mallocs - frees at 0.
 *  - Thread slot i (0 <= i < threads_used, at most thread_slots) is a struct
 *    hz_shm_thread at byte offset threads_offset + (i + 1) * thread_stride -
 *    sizeof(struct hz_shm_thread): it ends where its slot ends.  A slot is one heap,
 *    not one thread: heaps outlive their threads and are adopted by new ones, so a
 *    slot's counters are those of every thread that owned the heap; `tid` names the
 *    latest, and `state` whether it still runs.  Merged figures, as hakozuna itself
 *    computes them:
 *      class c mallocs = sum over slots of mallocs[c]
 *      class c frees   = sum over slots of frees[c] + live.heapless_frees[c]
 *      mallocs         = sum of class mallocs + live.large_allocs
 *      frees           = sum of class frees + live.large_frees
 *      bytes_in_use    = sum of (class mallocs - frees) * classes[c].size
 *                        + live.large_bytes
 *      remote frees sent/received, remote batches, refills, pages made/retired,
 *      bytes_dirty:      sums over slots
 *    They are complete only while live.heaps_unlisted is 0: heaps beyond the slots
 *    keep their counters in private memory, and only the published snapshot
 *    (counters, classes[]) includes them.
 *
 * Usable from C11 and C++; it declares data only.
 */
#ifndef HAKOZUNA_SHM_H
#define HAKOZUNA_SHM_H

#include <stddef.h>
#include <stdint.h>

/* Bytes "hakoshm\0" at offset 0. */
#define HZ_SHM_MAGIC UINT64_C(0x006d68736f6b6168)
#define HZ_SHM_LAYOUT_VERSION 3u

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

/* Size classes of the live per-thread counters (the library's exact count). */
#define HZ_SHM_THREAD_CLASSES 121

/* Thread slots a segment has (heaps beyond them are counted in live.heaps_unlisted). */
#define HZ_SHM_MAX_THREADS 256

/* hz_shm_thread.state */
#define HZ_SHM_THREAD_OWNED 1     /* a running thread owns the heap */
#define HZ_SHM_THREAD_ABANDONED 2 /* its thread exited; the next new thread adopts it */
#define HZ_SHM_THREAD_ORPHANED 3  /* its thread vanished in a fork: never used again */
#define HZ_SHM_THREAD_SHARED 4    /* the heap of threads past their own heap's exit */

/* Bytes of the preamble that never moves. */
#define HZ_SHM_PREAMBLE_SIZE 48

/* flags */
#define HZ_SHM_FLAG_FINAL 1u       /* last publish, made at exit: the process is ending */
#define HZ_SHM_FLAG_NO_COUNTERS 2u /* built without per-thread counters (--disable-stats):
                                      the per-thread event counts read 0 */
#define HZ_SHM_FLAG_DIRTY 4u       /* bytes_dirty (thread slots, counters) is kept:
                                      libraries before it leave it 0 in layout 3 */

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
    /* layout version 3 */
    uint64_t bytes_committed;    /* of bytes_mapped, readable and writable (see live) */
    uint64_t bytes_metadata;     /* of bytes_committed, the allocator's own (see live) */
    uint64_t peak_mapped;        /* highest bytes_mapped so far */
    uint64_t peak_committed;     /* highest bytes_committed so far */
    uint64_t heaps_unlisted;     /* heaps without a thread slot */
    /* with HZ_SHM_FLAG_DIRTY */
    uint64_t bytes_dirty;        /* of bytes_committed, freed page memory kept for reuse */
    uint64_t reserved[3];        /* zero; room for counters without a layout change */
};

/* Process-wide counters, updated in place (atomically) by the allocator's slow paths.
 * The byte figures cover what the allocator maps for itself (segments, large blocks,
 * metadata): bytes_committed is what it made readable and writable, and so an upper
 * bound of what of it is resident (purged pages stay committed but are not resident
 * until touched again); metadata = bytes_meta + segments_mapped * segment_header_size
 * (the header of every segment, which holds its page descriptors). */
struct hz_shm_live {
    uint64_t bytes_mapped;       /* address space mapped, reserved or committed */
    uint64_t bytes_committed;    /* of which readable and writable (charged) */
    uint64_t bytes_meta;         /* of which metadata mappings: heaps, segment map */
    uint64_t bytes_purged;       /* returned with madvise (or decommitted), cumulative */
    uint64_t bytes_unmapped;     /* returned with munmap, cumulative */
    uint64_t os_errors;          /* mmap/munmap/mprotect/madvise calls that failed */
    uint64_t segments_mapped;    /* segments currently mapped */
    uint64_t foreign_frees;      /* free/realloc of pointers hakozuna did not hand out */
    uint64_t large_allocs;       /* large blocks allocated */
    uint64_t large_frees;        /* large blocks freed */
    uint64_t large_bytes;        /* bytes of large blocks in use */
    uint64_t large_cache_hits;   /* large allocations served from the large cache */
    uint64_t heaps_created;      /* thread heaps created */
    uint64_t heaps_adopted;      /* heaps of exited threads taken over by new threads */
    uint64_t threads_live;       /* threads currently owning a heap */
    uint64_t peak_mapped;        /* highest bytes_mapped so far */
    uint64_t peak_committed;     /* highest bytes_committed so far */
    uint64_t heaps_unlisted;     /* heaps that got no thread slot (all were taken) */
    uint64_t cached_dirty;       /* part of bytes_dirty: empty segments kept resident
                                    between heaps (0 in libraries before it) */
    uint64_t reserved[5];
    uint64_t heapless_frees[HZ_SHM_THREAD_CLASSES]; /* frees by threads without a heap */
};

/* One thread heap's counters (see the reader rules above for where slots are).
 * tid, state and owners are written when a thread takes or leaves the heap; the
 * counters below them by the owning thread, in place, on its fast paths. */
struct hz_shm_thread {
    uint64_t tid;                /* kernel thread id of the latest owner (gettid) */
    uint32_t state;              /* HZ_SHM_THREAD_*; 0: not yet set */
    uint32_t slot;               /* this slot's index */
    uint64_t owners;             /* threads that have owned this heap */
    uint64_t bytes_dirty;        /* the heap's freed page memory not yet purged, written
                                    by its owner when it changes (HZ_SHM_FLAG_DIRTY) */
    uint64_t reserved[4];
    uint64_t mallocs[HZ_SHM_THREAD_CLASSES]; /* blocks of class c handed out */
    uint64_t frees[HZ_SHM_THREAD_CLASSES];   /* blocks of class c freed by this heap's
                                                threads (its own blocks or others') */
    uint64_t remote_sent;        /* frees of other heaps' blocks */
    uint64_t remote_recv;        /* this heap's blocks freed elsewhere, taken back */
    uint64_t remote_batches;     /* batches of remote frees posted to owners */
    uint64_t refills;            /* trips through the allocation slow path */
    uint64_t pages_made;         /* size-class pages carved from segments */
    uint64_t pages_retired;      /* empty pages given back to their segment */
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
    uint64_t total_size;         /* bytes of the object: the header rounded to pages,
                                    then the thread slots (layout 3) */
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
    /* --- layout version 3 --- */
    uint64_t threads_offset;     /* byte offset of thread slot 0 (a page boundary) */
    uint32_t thread_stride;      /* bytes per thread slot (the kernel's page size) */
    uint32_t thread_slots;       /* slots the object has room for */
    uint32_t threads_used;       /* slots taken so far (they are never given back) */
    uint32_t segment_header_size;/* bytes of each segment's header (metadata) */
    struct hz_shm_live live;
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
HZ_SHM_ASSERT_(offsetof(struct hz_shm_thread, mallocs) == 64, "thread slot header");
HZ_SHM_ASSERT_(sizeof(struct hz_shm_thread) % 64 == 0, "thread slot size");
#undef HZ_SHM_ASSERT_

#endif /* HAKOZUNA_SHM_H */
