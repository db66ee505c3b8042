/* shm.c - live counters in a POSIX shared-memory segment for hzstat(1).
 *
 * Off unless the environment holds exactly HAKOZUNA_STATS=1 when the library's
 * constructor runs (and never in secure-execution mode: setuid/setgid programs and
 * file capabilities).  Any other value but "0" and "" is taken for a typo: the
 * constructor says so in one line on stderr and stats stay off (in secure-execution
 * mode the environment is not even read, so nothing is said).  When on, the constructor creates the segment (its name is
 * below; include/hakozuna_shm.h describes its layout) and the counters move into it:
 * each heap's counters page becomes a thread slot of the segment, the process-wide
 * counters a block of its header (see "counters that live here" below), so readers
 * see them as they are, whether the process is busy or idle, at no cost to the fast
 * paths, which bump the same words as before.  The allocator's slow paths also
 * republish the merged counters at most every HZ_SHM_PUBLISH_MS, one thread at a
 * time, under a seqlock; the destructor publishes a last time and removes it.
 * Switching it on changes nothing in how memory is allocated, and nothing the
 * program can see besides the file: the library keeps no descriptor open (the one it
 * creates the object with is closed as soon as the object is mapped), so it never
 * closes, reads or writes a descriptor number the program may have reused.
 *
 * Like the rest of the core this never allocates, never uses stdio, getenv or dlsym:
 * the environment is read through `environ` and files through raw system calls.  Any
 * failure (no /dev/shm, no /proc, no space, a name taken by someone else) leaves the
 * process running without stats, silently; only a value of HAKOZUNA_STATS it does
 * not understand is reported.
 *
 * Names: a pid means nothing outside its PID namespace, and containers may share
 * /dev/shm while each has its own.  A process of the initial PID namespace publishes
 * /dev/shm/hakozuna.<pid>; any other process /dev/shm/hakozuna.<ns>.<pid>, where <ns>
 * is the inode of its PID namespace (/proc/self/ns/pid) and <pid> its pid there.
 * Two live processes therefore never share a name, and a reader knows from the name
 * alone which namespace a segment belongs to.  The header repeats pid, namespace and
 * start time (ticks since boot), so that a name left by a process that died can be
 * told from one of the living; /dev/shm does not outlive a boot.
 *
 * Lifetime: a process removes its name at exit, and only a killed one leaves a name
 * behind (`hzstat --gc` removes it).  But /dev/shm is sticky: only the file's owner
 * (or CAP_FOWNER) may remove a name there, and a process that made its segment as
 * root and then switched to another user (nginx's master and workers, setuid to
 * nobody) could not, and left it for root to collect.  Which user a process will end
 * up as is unknown when it makes the segment, and once switched it can neither
 * remove nor chown the file, so a process that may change its user id (root, real,
 * effective and saved ids not all equal, or CAP_SETUID) removes the name right after
 * making the segment and keeps only the mapping.  Its segment then lives exactly as
 * long as the process (and its mapping) does, killed or not; readers find it in
 * /proc/PID/maps as "/dev/shm/hakozuna.<pid> (deleted)" and open it through
 * /proc/PID/map_files, which takes CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE): root,
 * as its mode 0600 and owner root already required.  Every other process keeps the
 * name, which its own user's hzstat can open.
 *
 * fork: the child must neither write into nor remove its parent's segment.  The
 * child's fork handler (init.c), before anything else in the child counts, moves
 * every counter out of the inherited segment into private memory and drops the
 * mapping; the child's first slow path makes it a segment of its own, where its
 * counters move; a process that finds its pid differing from the segment's without
 * that handler having run (vfork, raw clone) publishes nothing.
 *
 * exec keeps the pid, and the new program image finds the name it wants taken by the
 * segment of the old one, which exec unmapped without removing.  The name is ours to
 * replace when its header names our pid and namespace and either another start time
 * (a process that died, whose pid we got) or ours while no mapping of that file
 * remains in this process (an earlier image); if this process still maps it, another
 * copy of the library publishes there and this copy runs without stats.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <linux/capability.h>
#include <unistd.h>

#include "internal.h"
#include "hakozuna.h"
#include "hakozuna_shm.h"
#include "hakozuna_prof.h"

extern char **environ;

_Static_assert(HZ_CLASSES <= HZ_SHM_MAX_CLASSES, "size classes do not fit the segment");

/* Counter stores are release stores: a reader that sees any new value also sees the
 * odd generation stored before it (a plain mov on x86-64; no fence needed, which
 * ThreadSanitizer could not follow). */
#define STORE(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELEASE)

_Atomic int hz_shm_on;           /* 1: publishing (or about to, after a fork) */
static _Atomic int shm_started;  /* hz_shm_start ran */
static _Atomic int publish_busy; /* try-lock: one publisher at a time */
static _Atomic uint64_t next_publish_ms;
static struct hz_shm_segment *shm; /* our mapping, NULL when none */
static size_t shm_size;
static pid_t shm_pid;              /* the process shm belongs to */
static bool shm_unnamed;           /* its name was removed when it was made */
static char shm_path[sizeof HZ_SHM_DIR "/" HZ_SHM_FILE_PREFIX + 48];

/* --------------------------------------------------------------- helpers */

/* src into dst[cap], cut if need be, NUL-padded. */
static void copy_str(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; i + 1 < cap && src[i] != '\0'; i++) dst[i] = src[i];
    for (; i < cap; i++) dst[i] = '\0';
}

static uint64_t clock_ns(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The value of environment variable `name` as getenv would see it (the first entry
 * decides), or NULL when it is unset. */
static const char *env_value(const char *name) {
    size_t len = strlen(name);
    char **env = environ;
    if (env == NULL) return NULL;
    for (; *env != NULL; env++) {
        if (strncmp(*env, name, len) == 0 && (*env)[len] == '=') return *env + len + 1;
    }
    return NULL;
}

/* A value we do not understand is a typo ("yes", "true", "on"): say so once on
 * stderr rather than leave the operator guessing why nothing happens.  The value is
 * the environment's, so it is cut and its control bytes shown as '?'. */
static void env_warn(const char *name, const char *v, const char *what) {
    enum { SHOWN = 40 };
    char shown[SHOWN + 4];
    size_t n = 0;
    for (; n < SHOWN && v[n] != '\0'; n++) {
        shown[n] = v[n];
        if ((unsigned char)v[n] < 0x20 || v[n] == 0x7f) shown[n] = '?';
    }
    if (v[n] != '\0') {
        shown[n++] = '.';
        shown[n++] = '.';
        shown[n++] = '.';
    }
    shown[n] = '\0';
    hz_line_t l = {.n = 0};
    hz_line_str(&l, "hakozuna: ");
    hz_line_str(&l, name);
    hz_line_str(&l, "=");
    hz_line_str(&l, shown);
    hz_line_str(&l, " not understood ");
    hz_line_str(&l, what);
    hz_os_write_err(hz_line_end(&l));
}

/* ------------------------------------------------------------ exit report
 * HAKOZUNA_STATS_EXIT=stderr, or an absolute path: every process of the program
 * writes malloc_stats's report there when it exits (through exit(), not _exit),
 * after a line that names it; a file is appended to, so the reports of a program
 * and its children follow one another. */
static char exit_report_to[256]; /* "": no report; "-": stderr; else a path */

static void exit_report_setup(void) {
    const char *v = env_value(HZ_SHM_ENV_EXIT);
    if (v == NULL || v[0] == '\0') return;
    if (strcmp(v, "stderr") == 0) {
        exit_report_to[0] = '-';
    } else if (v[0] == '/' && strlen(v) < sizeof exit_report_to) {
        memcpy(exit_report_to, v, strlen(v) + 1);
    } else {
        env_warn(HZ_SHM_ENV_EXIT, v, "(use stderr or an absolute path); no report at exit");
    }
}

static void exit_report(void) {
    if (exit_report_to[0] == '\0') return;
    int fd = STDERR_FILENO;
    if (exit_report_to[0] != '-') {
        fd = open(exit_report_to, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
        if (fd < 0) return;
    }
    hz_line_t l = {.n = 0};
    hz_line_str(&l, "hakozuna: report at exit of pid ");
    hz_line_u64(&l, (uint64_t)getpid());
    hz_os_write_fd(fd, hz_line_end(&l));
    hz_stats_report(fd);
    if (fd != STDERR_FILENO) close(fd);
}

/* Field 22 of /proc/self/stat: start time in clock ticks since boot (0 if unknown). */
static uint64_t self_start_time(void) {
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n;
    do n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = NULL;
    for (char *q = buf; *q; q++)
        if (*q == ')') p = q; /* the command name may itself hold ')' */
    if (p == NULL) return 0;
    p++;
    for (int field = 2; field < 22; p++) { /* p is at the space before field+1 */
        if (*p == '\0') return 0;
        if (*p == ' ') field++;
        if (field == 22) {
            p++;
            break;
        }
    }
    uint64_t v = 0;
    while (*p >= '0' && *p <= '9') v = v * 10 + (uint64_t)(*p++ - '0');
    return v;
}

/* Inode of this process's PID namespace: readlink /proc/self/ns/pid, "pid:[N]"; 0 if
 * unknown. */
static uint64_t self_pid_ns(void) {
    char buf[64];
    ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char *p = buf;
    while (*p != '\0' && *p != '[') p++;
    if (*p != '[') return 0;
    uint64_t v = 0;
    for (p++; *p >= '0' && *p <= '9'; p++) v = v * 10 + (uint64_t)(*p - '0');
    return *p == ']' ? v : 0;
}

/* Does this process map the file with inode ino from /dev/shm?  1 yes, 0 no, -1
 * cannot tell.  /proc/self/maps is read in pieces; a line is "range perms offset
 * dev inode path". */
static int self_maps_inode(uint64_t ino) {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[4096];
    size_t have = 0;
    int found = 0;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof buf - have);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            found = -1;
            break;
        }
        have += (size_t)n;
        size_t start = 0;
        for (size_t i = 0; i < have; i++) {
            if (buf[i] != '\n' && !(n == 0 && i + 1 == have)) continue;
            /* line buf[start..i]: skip four fields, read the inode */
            size_t k = start;
            for (int field = 0; field < 4 && k < i; field++) {
                while (k < i && buf[k] != ' ') k++;
                while (k < i && buf[k] == ' ') k++;
            }
            uint64_t v = 0;
            while (k < i && buf[k] >= '0' && buf[k] <= '9') v = v * 10 + (uint64_t)(buf[k++] - '0');
            static const char dir[] = HZ_SHM_DIR "/";
            if (v == ino) {
                while (k < i && buf[k] == ' ') k++;
                if (i - k >= sizeof dir - 1 && memcmp(buf + k, dir, sizeof dir - 1) == 0) found = 1;
            }
            start = i + 1;
        }
        if (found != 0 || n == 0) break;
        if (start == 0 && have == sizeof buf) start = have; /* a line too long: skip it */
        memmove(buf, buf + start, have - start);
        have -= start;
    }
    close(fd);
    return found;
}

/* Could this process change the user id it acts as (root, differing real, effective
 * and saved ids, or CAP_SETUID)?  Then it may not be allowed to remove a name it made
 * once it exits. */
static bool may_change_uid(void) {
    uid_t r, e, s;
    if (getresuid(&r, &e, &s) != 0) return true;
    if (r == 0 || e == 0 || s == 0 || r != e || e != s) return true;
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) != 0) return true;
    uint32_t bit = 1u << CAP_SETUID; /* CAP_SETUID < 32: in data[0] */
    return ((data[0].effective | data[0].permitted) & bit) != 0;
}

static uint64_t creation_id(void) {
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id || id == 0)
        id = clock_ns(CLOCK_REALTIME) ^ ((uint64_t)getpid() << 40) ^ (uintptr_t)&id;
    return id;
}

/* ------------------------------------------------------------- publishing */

/* Metadata bytes: heaps and segment map, plus every segment's header. */
static uint64_t metadata_bytes(void) {
    return hz_gstat_load(bytes_meta) + hz_gstat_load(segments_mapped) * HZ_SEGMENT_HEADER;
}

/* Write the current counters under the seqlock.  Caller holds publish_busy. */
static void publish(struct hz_shm_segment *s, bool final) {
    hz_stats_snapshot_t snap;
    hz_stats_snapshot(&snap);
    const struct hz_stats *t = &snap.totals;
    struct hz_shm_counters *c = &s->counters;

    uint64_t gen = __atomic_load_n(&s->generation, __ATOMIC_RELAXED);
    __atomic_store_n(&s->generation, gen + 1, __ATOMIC_RELAXED); /* odd: writing */

    STORE(c->mallocs, t->mallocs);
    STORE(c->frees, t->frees);
    STORE(c->bytes_in_use, t->bytes_in_use);
    STORE(c->bytes_mapped, t->bytes_mapped);
    STORE(c->bytes_purged, t->bytes_purged);
    STORE(c->bytes_unmapped, t->bytes_unmapped);
    STORE(c->remote_frees_sent, t->remote_frees_sent);
    STORE(c->remote_frees_recv, t->remote_frees_recv);
    STORE(c->remote_batches, t->remote_batches);
    STORE(c->foreign_frees, t->foreign_frees);
    STORE(c->large_allocs, t->large_allocs);
    STORE(c->large_cache_hits, t->large_cache_hits);
    STORE(c->heaps_created, t->heaps_created);
    STORE(c->heaps_adopted, t->heaps_adopted);
    STORE(c->threads_live, t->threads_live);
    STORE(c->segments_mapped, t->segments_mapped);
    STORE(c->refills, snap.refills);
    STORE(c->pages_made, snap.pages_made);
    STORE(c->pages_retired, snap.pages_retired);
    STORE(c->outbox_flushes, snap.remote_batches); /* one batch per outbox flush */
    STORE(c->bytes_committed, hz_gstat_load(bytes_committed));
    STORE(c->bytes_metadata, metadata_bytes());
    STORE(c->peak_mapped, hz_gstat_load(peak_mapped));
    STORE(c->peak_committed, hz_gstat_load(peak_committed));
    STORE(c->heaps_unlisted, hz_gstat_load(heaps_unlisted));
    STORE(c->bytes_dirty, t->bytes_dirty);
    STORE(c->publishes, c->publishes + 1);
    STORE(c->last_publish_unix_ns, clock_ns(CLOCK_REALTIME));
    STORE(c->last_publish_mono_ns, clock_ns(CLOCK_MONOTONIC));
    for (unsigned k = 1; k < HZ_CLASSES; k++) {
        STORE(s->classes[k].size, (uint64_t)hz_class_block[k]);
        STORE(s->classes[k].mallocs, snap.mallocs[k]);
        STORE(s->classes[k].frees, snap.frees[k]);
    }
    if (final) STORE(s->flags, s->flags | HZ_SHM_FLAG_FINAL);

    __atomic_store_n(&s->generation, gen + 2, __ATOMIC_RELEASE); /* data before even */
}

/* ------------------------------------------------------- making the segment */

/* The segment name of pid in PID namespace ns (see the top of this file). */
static void make_path(pid_t pid, uint64_t ns) {
    hz_line_t l = {.n = 0};
    hz_line_str(&l, HZ_SHM_DIR "/" HZ_SHM_FILE_PREFIX);
    if (ns != HZ_SHM_INIT_PID_NS) {
        hz_line_u64(&l, ns);
        hz_line_str(&l, ".");
    }
    hz_line_u64(&l, (uint64_t)pid);
    size_t n = l.n < sizeof shm_path - 1 ? l.n : sizeof shm_path - 1; /* never cut */
    memcpy(shm_path, l.buf, n);
    shm_path[n] = '\0';
}

/* The name is taken.  Remove it if it is a leftover we may replace (see the top of
 * this file): a segment of our pid and namespace, of our user, whose process is gone
 * or is this one under an earlier program image. */
static bool remove_leftover(pid_t pid, uint64_t ns, uint64_t start) {
    int fd = open(shm_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno == ENOENT; /* gone meanwhile: try again */
    struct stat st;
    struct hz_shm_segment pre;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid();
    if (ok && st.st_size != 0) { /* an empty file: its maker died before sizing it */
        ok = pread(fd, &pre, HZ_SHM_PREAMBLE_SIZE, 0) == HZ_SHM_PREAMBLE_SIZE &&
             pre.pid == (uint64_t)pid;
        /* Only layout 2 on records the namespace; a name without one is the initial
         * namespace's, which is ours when we got here. */
        if (ok && pre.layout_version >= 2 &&
            pread(fd, &pre.pid_ns, sizeof pre.pid_ns, offsetof(struct hz_shm_segment, pid_ns)) ==
                (ssize_t)sizeof pre.pid_ns)
            ok = pre.pid_ns == ns;
        if (ok && pre.start_time == start && start != 0) ok = self_maps_inode(st.st_ino) == 0;
    }
    close(fd);
    if (ok) ok = unlink(shm_path) == 0 || errno == ENOENT;
    return ok;
}

/* Size the new object behind fd, its first `reserve` bytes allocated now (a full
 * tmpfs must fail here, not as SIGBUS later; the rest stays sparse), and map it
 * shared; MAP_FAILED on failure. */
static void *map_new(int fd, size_t reserve, size_t size) {
    if (fallocate(fd, 0, 0, (off_t)reserve) != 0 && errno != EOPNOTSUPP && errno != ENOSYS)
        return MAP_FAILED;
    if (ftruncate(fd, (off_t)size) != 0) return MAP_FAILED;
    return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}

/* Make and map the segment of the calling process (shm); false (and no file) on failure. */
static bool shm_create(void) {
    pid_t pid = getpid();
    uint64_t ns = self_pid_ns();
    if (ns == 0) return false; /* no /proc: no name that is safe to share */
    uint64_t start = self_start_time();
    make_path(pid, ns);
    int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
    int fd = open(shm_path, flags, 0600);
    if (fd < 0 && errno == EEXIST && remove_leftover(pid, ns, start))
        fd = open(shm_path, flags, 0600);
    if (fd < 0) return false;

    size_t stride = hz_os_kernel_page_size();
    size_t head = hz_align_up(sizeof(struct hz_shm_segment), hz_os_page_size());
    size_t size = head + HZ_SHM_MAX_THREADS * stride;
    /* The thread slots stay sparse until taken (claim_slot). */
    struct hz_shm_segment *s = map_new(fd, head, size);
    if (s == MAP_FAILED) goto fail;
    close(fd); /* the mapping is all we keep; no failure below */

    /* A fresh object reads as zero: fill in everything but the magic. */
    s->layout_version = HZ_SHM_LAYOUT_VERSION;
    s->header_size = (uint32_t)sizeof(struct hz_shm_segment);
    s->total_size = size;
    s->pid = (uint64_t)pid;
    s->start_time = start;
    s->pid_ns = ns;
    s->creation_id = creation_id();
    s->clock_ticks = getauxval(AT_CLKTCK);
    if (s->clock_ticks == 0) s->clock_ticks = 100;
    s->created_unix_ns = clock_ns(CLOCK_REALTIME);
    s->flags = HZ_STATS ? HZ_SHM_FLAG_DIRTY : HZ_SHM_FLAG_DIRTY | HZ_SHM_FLAG_NO_COUNTERS;
    s->class_count = HZ_CLASSES;
    s->threads_offset = head;
    s->thread_stride = (uint32_t)stride;
    s->thread_slots = HZ_SHM_MAX_THREADS;
    s->segment_header_size = HZ_SEGMENT_HEADER;
    copy_str(s->variant, sizeof s->variant, HZ_VARIANT_NAME);
    copy_str(s->version, sizeof s->version, hz_version());
    copy_str(s->config, sizeof s->config, hz_config_string());
    publish(s, false);
    __atomic_store_n(&s->magic, HZ_SHM_MAGIC, __ATOMIC_RELEASE); /* now readable */

    /* A process that may change its user id removes the name at once (see the top of
     * this file); the mapping stays. */
    shm_unnamed = may_change_uid();
    if (shm_unnamed) unlink(shm_path);
    __atomic_store_n(&shm, s, __ATOMIC_RELEASE); /* heaps made from now on attach */
    shm_size = size;
    shm_pid = pid;
    return true;
fail:
    unlink(shm_path);
    if (fd >= 0) close(fd);
    return false;
}

/* ------------------------------------------------------ counters that live here
 * A heap's counters end the first (kernel) page of its mapping (heap.c).  To make
 * them live in the segment, the page is copied into a free thread slot and the slot
 * is mapped over it: mremap of a shared mapping with old size 0 maps the same pages
 * a second time, so neither a descriptor nor a copy is kept.  The process-wide
 * counters move by pointer (hz_gstats_at).  Counts made by another thread between
 * the copy and the switch would be lost: heaps are moved when they are new (nobody
 * counts in them yet), in the constructor (before the program runs threads), and at
 * a fork child's first slow path (usually before it starts threads). */

static char *page_of_slot(struct hz_shm_segment *s, uint32_t i) {
    return (char *)s + s->threads_offset + (size_t)i * s->thread_stride;
}

/* A slot's header and counters end its page. */
static struct hz_shm_thread *slot_at(struct hz_shm_segment *s, uint32_t i) {
    return (struct hz_shm_thread *)(page_of_slot(s, i + 1) - sizeof(struct hz_shm_thread));
}

/* The page of heap's counters (and slot header). */
static char *counters_page(hz_heap_t *heap) {
    return (char *)heap + sizeof(hz_heap_stats_t) - hz_os_kernel_page_size();
}

/* A slot of s that can be written without SIGBUS; false (counted) when none. */
static bool claim_slot(struct hz_shm_segment *s, uint32_t *slot) {
    uint32_t i = __atomic_load_n(&s->threads_used, __ATOMIC_RELAXED);
    do {
        if (i >= s->thread_slots) {
            hz_gstat_add(heaps_unlisted, 1);
            return false;
        }
    } while (!__atomic_compare_exchange_n(&s->threads_used, &i, i + 1, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    char *page = page_of_slot(s, i);
    /* Get the slot's tmpfs page now, so that a full /dev/shm fails here and not as
     * SIGBUS on a counter (kernels before 5.14 do not know it: EINVAL). */
    if (madvise(page, s->thread_stride, MADV_POPULATE_WRITE) != 0 && errno != EINVAL) {
        hz_gstat_add(heaps_unlisted, 1);
        return false;
    }
    *slot = i;
    return true;
}

/* Move heap's counters into a slot of s; false (counted, nothing changed) if none.
 * A heap is moved once: by its creator or by move_in, whichever comes first. */
static bool attach_to(struct hz_shm_segment *s, hz_heap_t *heap) {
    uint32_t i, none = 0;
    if (!__atomic_compare_exchange_n(&heap->shm_slot, &none, UINT32_MAX, false,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return false;
    if (!claim_slot(s, &i)) {
        __atomic_store_n(&heap->shm_slot, 0, __ATOMIC_RELEASE);
        return false;
    }
    struct hz_shm_thread *t = slot_at(s, i);
    memcpy(t, hz_heap_slot(heap), sizeof *t);
    t->slot = i;
    if (mremap(page_of_slot(s, i), 0, s->thread_stride, MREMAP_MAYMOVE | MREMAP_FIXED,
               counters_page(heap)) == MAP_FAILED) {
        memset(t, 0, sizeof *t);
        hz_gstat_add(heaps_unlisted, 1);
        __atomic_store_n(&heap->shm_slot, 0, __ATOMIC_RELEASE);
        return false;
    }
    __atomic_store_n(&heap->shm_slot, i + 1, __ATOMIC_RELEASE);
    return true;
}

/* In a fork child: heap's counters page is the parent's slot; make it private. */
static void detach(hz_heap_t *heap) {
    struct hz_shm_thread keep;
    memcpy(&keep, hz_heap_slot(heap), sizeof keep);
    size_t kp = hz_os_kernel_page_size();
    if (mmap(counters_page(heap), kp, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
        return;
    memcpy(hz_heap_slot(heap), &keep, sizeof keep);
    heap->shm_slot = 0;
}

void hz_shm_attach(hz_heap_t *heap) {
    struct hz_shm_segment *s = __atomic_load_n(&shm, __ATOMIC_ACQUIRE);
    if (atomic_load_explicit(&hz_shm_on, memory_order_relaxed) && s != NULL) attach_to(s, heap);
}

static void attach_existing(hz_heap_t *heap, void *arg) { attach_to(arg, heap); }

static void detach_existing(hz_heap_t *heap, void *arg) {
    (void)arg;
    if (heap->shm_slot != 0) detach(heap);
}

/* Move the process-wide counters to `to`. */
static void gstats_move(hz_global_stats_t *to) {
    if (to == hz_gstats_at) return;
    memcpy(to, hz_gstats_at, sizeof *to);
    __atomic_store_n(&hz_gstats_at, to, __ATOMIC_RELEASE);
}

/* The segment shm was just made: its counters move in. */
static void move_in(void) {
    gstats_move(&shm->live);
    hz_heaps_visit(attach_existing, shm);
}

/* In a child of fork (init.c's handler, before anything else writes a counter): the
 * parent's segment is not ours to write.  Its counters move back into private
 * memory; the child's first slow path makes it a segment of its own (tick_slow), so
 * that a child that execs or leaves with _exit at once leaves none behind. */
void hz_shm_fork_child(void) {
    atomic_store_explicit(&publish_busy, 0, memory_order_relaxed);
    atomic_store_explicit(&next_publish_ms, 0, memory_order_relaxed);
    if (shm == NULL) return;
    gstats_move(&hz_gstats_own);
    hz_heaps_visit(detach_existing, NULL);
    munmap(shm, shm_size);
    shm = NULL;
}

/* ------------------------------------------------------ companion segments
 * What goes with the stats segment in a segment of its own (the heap profile,
 * prof.c) is named like it plus a suffix and follows its rules: made only once the
 * stats segment holds the name (so the name is ours), mode 0600, blocks reserved up
 * front, no descriptor kept, the name removed at once by a process that may change
 * its user id and at exit by the others; a fork child makes none. */
static bool companion_path(char *path, size_t cap, const char *suffix) {
    size_t n = strlen(shm_path), k = strlen(suffix);
    if (shm == NULL || n + k + 1 > cap) return false;
    memcpy(path, shm_path, n + 1);
    memcpy(path + n, suffix, k + 1);
    return true;
}

/* Remove the companion name if it is a file of our user (ours, or one an earlier
 * holder of our name left). */
static void companion_remove(const char *suffix) {
    char path[sizeof shm_path + 16];
    struct stat st;
    if (companion_path(path, sizeof path, suffix) && lstat(path, &st) == 0 &&
        S_ISREG(st.st_mode) && st.st_uid == geteuid())
        unlink(path);
}

static void *companion_create(const char *suffix, size_t size) {
    char path[sizeof shm_path + 16];
    if (!companion_path(path, sizeof path, suffix)) return NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return NULL;
    void *m = map_new(fd, size, size);
    close(fd);
    if (m == MAP_FAILED || shm_unnamed) unlink(path);
    return m == MAP_FAILED ? NULL : m;
}

/* The rate HAKOZUNA_PROFILE asks for: 0 for off (unset, "", "0", or not understood,
 * which is said once on stderr). */
static uint64_t profile_rate(void) {
    const char *v = env_value(HZ_PROF_ENV);
    if (v == NULL || v[0] == '\0' || strcmp(v, "0") == 0) return 0;
    if (strcmp(v, "1") == 0) return HZ_PROF_DEFAULT_RATE;
    uint64_t r = 0;
    size_t i = 0;
    for (; v[i] >= '0' && v[i] <= '9' && i < 13; i++) r = r * 10 + (uint64_t)(v[i] - '0');
    if (v[i] == '\0' && r >= 1) return r;
    env_warn(HZ_PROF_ENV, v, "(use 1 or a sampling interval in bytes); no heap profile");
    return 0;
}

/* Once the stats segment holds our name: the heap profile's segment, if asked for. */
static void profile_start(void) {
    /* A profile left under our name by an earlier holder goes, whether or not this
     * process profiles. */
    companion_remove(HZ_PROF_SUFFIX);
    uint64_t rate = profile_rate();
    if (rate == 0) return;
    size_t size = hz_prof_segment_size();
    struct hz_prof_segment *s = companion_create(HZ_PROF_SUFFIX, size);
    if (s != NULL) hz_prof_start(s, size, rate);
}

/* ---------------------------------------------------------------- interface */

void hz_shm_start(void) {
    if (atomic_exchange(&shm_started, 1)) return;
    if (getauxval(AT_SECURE) != 0) return; /* setuid & co.: not even the environment */
    exit_report_setup();
    const char *v = env_value(HZ_SHM_ENV);
    if (v == NULL || strcmp(v, "1") != 0) {
        if (v != NULL && v[0] != '\0' && strcmp(v, "0") != 0)
            env_warn(HZ_SHM_ENV, v, "(use 1 or 0); stats stay off");
        return;
    }
    if (!shm_create()) return;
    move_in(); /* heaps made before the segment */
    profile_start();
    atomic_store_explicit(&next_publish_ms, hz_os_now_ms() + HZ_SHM_PUBLISH_MS,
                          memory_order_relaxed);
    atomic_store_explicit(&hz_shm_on, 1, memory_order_release);
}

static HZ_NOINLINE void tick_slow(void) {
    uint64_t now = hz_os_now_ms();
    if (now < atomic_load_explicit(&next_publish_ms, memory_order_relaxed)) return;
    if (atomic_exchange_explicit(&publish_busy, 1, memory_order_acquire)) return;
    if (atomic_load_explicit(&hz_shm_on, memory_order_relaxed) &&
        now >= atomic_load_explicit(&next_publish_ms, memory_order_relaxed)) {
        atomic_store_explicit(&next_publish_ms, now + HZ_SHM_PUBLISH_MS, memory_order_relaxed);
        if (shm == NULL) {
            /* A child of fork: a segment of its own, and its counters move in.  This
             * is the one move that may race with other threads (a child that started
             * threads before its first slow path): counts they make during it can be
             * lost. */
            if (shm_create()) move_in();
            else atomic_store_explicit(&hz_shm_on, 0, memory_order_relaxed);
        } else if (getpid() == shm_pid) {
            publish(shm, false);
        }
        /* Otherwise another pid sees our mapping without the atfork handler having
         * run: a vfork child or a raw clone, possibly sharing this memory with the
         * parent.  Leave everything alone. */
    }
    atomic_store_explicit(&publish_busy, 0, memory_order_release);
}

/* From the allocator's slow paths: one load when stats are off.  A fork child's
 * segment is made here, and a malloc or free that succeeds leaves errno alone. */
void hz_shm_tick_publish(void) {
    int e = errno;
    tick_slow();
    errno = e;
}

void hz_shm_stop(void) {
    exit_report();
    if (hz_prof_stop()) companion_remove(HZ_PROF_SUFFIX);
    if (atomic_load_explicit(&hz_shm_on, memory_order_acquire) == 0) return;
    while (atomic_exchange_explicit(&publish_busy, 1, memory_order_acquire)) hz_os_yield();
    if (atomic_load_explicit(&hz_shm_on, memory_order_relaxed) && shm != NULL &&
        getpid() == shm_pid) {
        publish(shm, true);
        if (!shm_unnamed) unlink(shm_path);
    }
    /* The mapping stays: a thread still running past exit may look at shm_on only. */
    atomic_store_explicit(&hz_shm_on, 0, memory_order_relaxed);
    atomic_store_explicit(&publish_busy, 0, memory_order_release);
}
