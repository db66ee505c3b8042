/* hzstat - live statistics of processes running on hakozuna.
 *
 * Reads the segments that processes started with HAKOZUNA_STATS=1 (hzrun --stats)
 * publish in /dev/shm/hakozuna.[<ns>.]<pid>; see include/hakozuna_shm.h for the layout
 * and naming, docs/OBSERVABILITY.md for the tool.  It links nothing of the allocator.
 * PIDs are those of hzstat's own PID namespace; segments of other namespaces are left
 * alone unless --gc can prove their process gone.  Segments without a name (of
 * processes that may change their user id) are found through /proc/PID/maps.
 *
 *   hzstat                      list processes that publish stats
 *   hzstat [-j] [-c] PID        one snapshot (text, or one JSON object)
 *   hzstat -i SEC [-n N] PID    per-interval rates, like vmstat
 *   hzstat -1 [-c] PID          one line per counter, with its description
 *   hzstat -f F[,F...] ...      only the named counters (-1, -j, -i, snapshot)
 *   hzstat --prometheus [-o FILE] [PID]  node_exporter textfile format
 *   hzstat --gc                 remove segments of processes that are gone
 *   hzstat --heap [-n N] [-o FILE] PID  the sampled live heap (hzstat_heap.c)
 */
#define _GNU_SOURCE 1

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hakozuna_prof.h"
#include "hakozuna_shm.h"
#include "hzstat_heap.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

/* Exit statuses (also listed by --help). */
enum {
    EXIT_OK = 0,
    EXIT_ERROR = 1,     /* anything else: I/O error, damaged segment, no stable read */
    EXIT_USAGE = 2,     /* bad arguments */
    EXIT_NOPROC = 3,    /* no such process */
    EXIT_NOSEG = 4,     /* the process publishes no stats */
    EXIT_PERM = 5,      /* permission denied */
    EXIT_VERSION = 6,   /* segment layout version not understood */
    EXIT_STALE = 7,     /* the segment's process is gone */
};

static const char *prog = "hzstat";

static void vmsg(const char *fmt, va_list ap) {
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void msg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
}

/* What standard output came to once flushed: EXIT_OK, or EXIT_ERROR, said once. */
static int stdout_status(void) {
    if (fflush(stdout) == 0 && !ferror(stdout)) return EXIT_OK;
    msg("standard output: %s", strerror(errno));
    return EXIT_ERROR;
}

static void usage(FILE *out) {
    fprintf(out,
            "Usage: %s [OPTIONS] [PID]\n"
            "Live allocator statistics of processes running on hakozuna.\n"
            "\n"
            "  (no PID)            list processes that publish stats (stale ones marked)\n"
            "  PID                 print a snapshot of process PID\n"
            "  -i, --interval SEC  print per-interval rates every SEC seconds (like vmstat)\n"
            "  -n, --count N       stop after N intervals (default: until the process ends)\n"
            "  -j, --json          JSON: one object per snapshot, list entry or interval\n"
            "  -c, --classes       add the per-size-class table (size, mallocs, frees, live)\n"
            "  -t, --threads       add the per-thread view: each thread heap's owner, state,\n"
            "                      mallocs, frees, remote frees sent and received\n"
            "  -f, --fields F[,F]  only these counters (names as -1 prints them; a trailing\n"
            "                      '*' matches a prefix; repeatable), with -1, -j, -i or\n"
            "                      a snapshot\n"
            "  -1                  one line per counter: name, value, description\n"
            "      --prometheus    node_exporter textfile format, of PID or of every live\n"
            "                      process that publishes stats\n"
            "  -o, --output FILE   with --prometheus: write FILE.tmp, then rename it to FILE;\n"
            "                      with --heap: write a heap profile pprof reads\n"
            "      --heap          the top allocation sites of PID by live bytes (sampled;\n"
            "                      -n N: how many, default 10), when it runs with\n"
            "                      HAKOZUNA_PROFILE=1 (hzrun --profile)\n"
            "      --gc            remove segments left by processes that are gone\n"
            "      --version       print the version and the segment layout it reads\n"
            "  -h, --help          this help\n"
            "\n"
            "A process publishes stats when started with `hzrun --stats CMD` or with\n"
            "HAKOZUNA_STATS=1 in its environment; they live in %s/%sPID (%s[NS.]PID\n"
            "outside the initial PID namespace).  PIDs are those of hzstat's namespace.\n"
            "\n"
            "Exit status:\n"
            "  0  success\n"
            "  1  other error (I/O error, damaged segment, no consistent read)\n"
            "  2  bad arguments\n"
            "  3  no such process\n"
            "  4  the process has no hakozuna stats segment\n"
            "  5  permission denied\n"
            "  6  segment layout version not understood by this hzstat\n"
            "  7  stale segment: its process is gone (or its pid was reused)\n",
            prog, HZ_SHM_DIR, HZ_SHM_FILE_PREFIX, HZ_SHM_FILE_PREFIX);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
    fprintf(stderr,
            "Usage: %s [-j] [-c] [-t] [-1] [-f FIELDS] [-i SEC [-n N]] [PID]\n"
            "       | --prometheus [-o FILE] [PID]\n"
            "       | --heap [-n N] [-o FILE] PID\n"
            "       | --gc | --version | --help\n"
            "Run '%s --help' for more.\n",
            prog, prog);
    return EXIT_USAGE;
}

/* ----------------------------------------------------------------- counters */

enum { K_COUNT, K_BYTES, K_GAUGE, K_BYTES_GAUGE };
struct field {
    const char *name;  /* JSON key, -1 and Prometheus name */
    const char *label; /* text label */
    size_t offset;     /* in struct hz_shm_counters */
    int kind;
    const char *rate;  /* column heading in -i mode, NULL: not shown */
    const char *desc;  /* what it counts (-1, Prometheus HELP) */
};
#define F(n, label, kind, rate, desc) \
    {#n, label, offsetof(struct hz_shm_counters, n), kind, rate, desc}
/* Not in the segment: hzstat reads it from /proc and keeps it in a spare word. */
#define process_rss reserved[0]
static const struct field fields[] = {
    F(mallocs, "mallocs", K_COUNT, "mallocs/s", "Allocations served, all sizes"),
    F(frees, "frees", K_COUNT, "frees/s", "Blocks freed, all sizes"),
    F(bytes_in_use, "bytes in use", K_BYTES_GAUGE, NULL,
      "Bytes in blocks handed out (size-class rounded)"),
    F(bytes_mapped, "bytes mapped", K_BYTES_GAUGE, NULL, "Bytes currently mapped from the OS"),
    F(bytes_purged, "bytes purged (total)", K_BYTES, "purged/s",
      "Bytes returned to the OS with madvise"),
    F(bytes_unmapped, "bytes unmapped (total)", K_BYTES, NULL,
      "Bytes returned to the OS with munmap"),
    F(bytes_committed, "bytes committed", K_BYTES_GAUGE, NULL,
      "Bytes mapped readable and writable: an upper bound of the allocator's resident bytes"),
    F(bytes_dirty, "bytes dirty", K_BYTES_GAUGE, NULL,
      "Of bytes committed, freed page memory kept resident for reuse, not yet returned to "
      "the OS"),
    F(bytes_metadata, "bytes metadata", K_BYTES_GAUGE, NULL,
      "Committed bytes of the allocator's own: heaps, segment map, segment headers"),
    F(peak_mapped, "peak bytes mapped", K_BYTES_GAUGE, NULL, "Highest bytes mapped so far"),
    F(peak_committed, "peak bytes committed", K_BYTES_GAUGE, NULL,
      "Highest bytes committed so far"),
    F(process_rss, "process resident (RSS)", K_BYTES_GAUGE, NULL,
      "Resident bytes of the whole process (VmRSS in /proc/PID/status), read by hzstat"),
    F(remote_frees_sent, "remote frees sent", K_COUNT, "remote/s",
      "Frees of blocks owned by another thread"),
    F(remote_frees_recv, "remote frees received", K_COUNT, NULL,
      "Such blocks collected by their owner"),
    F(remote_batches, "remote batches", K_COUNT, "batches/s",
      "Batches of remote frees posted to owners"),
    F(foreign_frees, "foreign frees", K_COUNT, NULL,
      "Frees of pointers hakozuna did not hand out"),
    F(large_allocs, "large allocs", K_COUNT, "large/s",
      "Allocations served directly from the OS"),
    F(large_cache_hits, "large cache hits", K_COUNT, NULL,
      "Large allocations served from the large cache"),
    F(heaps_created, "heaps created", K_COUNT, NULL, "Thread heaps created"),
    F(heaps_adopted, "heaps adopted", K_COUNT, NULL,
      "Heaps of exited threads taken over by new threads"),
    F(threads_live, "threads live", K_GAUGE, NULL, "Threads currently owning a heap"),
    F(segments_mapped, "segments mapped", K_GAUGE, NULL, "Segments currently mapped"),
    F(refills, "refills", K_COUNT, "refills/s", "Trips through the allocation slow path"),
    F(pages_made, "pages made", K_COUNT, NULL, "Size-class pages carved from segments"),
    F(pages_retired, "pages retired", K_COUNT, NULL, "Empty pages given back to their segment"),
    F(outbox_flushes, "outbox flushes", K_COUNT, NULL,
      "Remote-free outboxes posted to an owner's inbox"),
    F(heaps_unlisted, "heaps without a slot", K_GAUGE, NULL,
      "Heaps beyond the segment's thread slots: sums over heaps are then as last published"),
    F(publishes, "publishes", K_COUNT, NULL, "Times the counters were published"),
    F(last_publish_unix_ns, "last publish (unix ns)", K_GAUGE, NULL,
      "Time of the last publish, ns since the epoch"),
    F(last_publish_mono_ns, "last publish (monotonic ns)", K_GAUGE, NULL,
      "Time of the last publish, CLOCK_MONOTONIC ns"),
};
#undef F
#undef process_rss
#define process_rss_ reserved[0]
#define NFIELDS (sizeof fields / sizeof fields[0])

/* -f: the counters to show (all of them, or each view's usual ones, without -f). */
static bool field_filter;
static bool field_on[NFIELDS];

static bool shown(size_t i) { return !field_filter || field_on[i]; }

/* Select the counters named in a -f argument: names separated by commas, each
 * exact or ending in '*' (a prefix).  Returns NULL, or the name that matched none. */
static const char *select_fields(char *arg) {
    field_filter = true;
    for (char *save = NULL, *name = strtok_r(arg, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        size_t len = strlen(name);
        bool glob = len > 0 && name[len - 1] == '*';
        bool any = false;
        for (size_t i = 0; i < NFIELDS; i++) {
            if (glob ? strncmp(fields[i].name, name, len - 1) == 0
                     : strcmp(fields[i].name, name) == 0) {
                field_on[i] = true;
                any = true;
            }
        }
        if (!any) return name;
    }
    return NULL;
}

static uint64_t get(const struct hz_shm_counters *c, const struct field *f) {
    uint64_t v;
    memcpy(&v, (const char *)c + f->offset, sizeof v);
    return v;
}
static const char *human_bytes(uint64_t v, char *buf, size_t cap) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double d = (double)v;
    unsigned u = 0;
    while (d >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        d /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%" PRIu64 " B", v);
    else snprintf(buf, cap, "%.1f %s", d, units[u]);
    return buf;
}

static const char *human_duration(double s, char *buf, size_t cap) {
    if (!(s >= 0)) s = 0;
    uint64_t t = (uint64_t)s;
    if (t >= 86400) snprintf(buf, cap, "%" PRIu64 "d%02" PRIu64 "h", t / 86400, t % 86400 / 3600);
    else if (t >= 3600) snprintf(buf, cap, "%" PRIu64 "h%02" PRIu64 "m", t / 3600, t % 3600 / 60);
    else if (t >= 60) snprintf(buf, cap, "%" PRIu64 "m%02" PRIu64 "s", t / 60, t % 60);
    else snprintf(buf, cap, "%.1fs", s);
    return buf;
}

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), 0 if there is none. */
static size_t utf8_len(const unsigned char *p) {
    if (p[0] < 0x80) return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) n = 2;
    else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3;
        if (p[0] == 0xe0) lo = 0xa0;      /* overlong */
        else if (p[0] == 0xed) hi = 0x9f; /* surrogates */
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4;
        if (p[0] == 0xf0) lo = 0x90;      /* overlong */
        else if (p[0] == 0xf4) hi = 0x8f; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    return n;
}

/* s between double quotes, as a JSON string (json) or a Prometheus label value:
 * valid for any bytes.  Both escape backslash, double quote and newline; JSON also
 * escapes the other control characters.  A byte that does not begin a well-formed
 * UTF-8 sequence (process names are bytes, and /proc/PID/comm may cut a character
 * in two) becomes U+FFFD: both formats must be UTF-8. */
static void quoted_string(FILE *out, const char *s, bool json) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n = utf8_len(p);
        if (n == 0) {
            fputs(json ? "\\ufffd" : "\xef\xbf\xbd", out);
            p++;
            continue;
        }
        if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", out);
        else if (json && *p == '\t') fputs("\\t", out);
        else if (json && (*p < 0x20 || *p == 0x7f)) fprintf(out, "\\u%04x", *p);
        else fwrite(p, 1, n, out);
        p += n;
    }
    fputc('"', out);
}

static void json_string(FILE *out, const char *s) { quoted_string(out, s, true); }

/* Copy a fixed-size string field that the writer NUL-terminates, defensively. */
static void field_str(char *dst, size_t cap, const char *src, size_t srccap) {
    size_t n = strnlen(src, srccap);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)dst[i] < 0x20) dst[i] = '?';
}

/* For the text views: control bytes of a process name (a tab, a terminal escape)
 * shown as '?'. */
static char *text_safe(char *s) {
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return s;
}

/* Entries of classes[] to look at. */
static unsigned class_limit(const struct hz_shm_segment *s) {
    uint32_t n = s->class_count;
    return n < HZ_SHM_MAX_CLASSES ? (unsigned)n : HZ_SHM_MAX_CLASSES;
}

/* ------------------------------------------------------------------ process */

/* Inode of the PID namespace of /proc/PID/ns/pid ("self" for ours); 0 if unreadable
 * (errno tells why). */
static uint64_t pid_ns_of(const char *pid) {
    char path[64], buf[64];
    snprintf(path, sizeof path, "/proc/%s/ns/pid", pid);
    ssize_t n = readlink(path, buf, sizeof buf - 1);
    if (n <= 0) return 0;
    buf[n] = '\0';
    unsigned long long v;
    if (sscanf(buf, "pid:[%llu]", &v) != 1) {
        errno = EINVAL;
        return 0;
    }
    return v;
}

/* Our PID namespace: the pids we take and print are counted there. */
static uint64_t own_ns = HZ_SHM_INIT_PID_NS;

static uint64_t now_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* State letter and start time (field 22) of /proc/PID/stat; false if unreadable. */
static bool proc_stat(long pid, char *state, uint64_t *start) {
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ') return false;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL) return false;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return true;
}

/* A process with that pid exists and has not exited (zombies do not count). */
static bool proc_exists(long pid) {
    if (kill((pid_t)pid, 0) != 0 && errno != EPERM) return false;
    char state;
    uint64_t start;
    if (proc_stat(pid, &state, &start) && (state == 'Z' || state == 'X')) return false;
    return true;
}

static void proc_comm(long pid, char *buf, size_t cap) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    snprintf(buf, cap, "-");
    FILE *f = fopen(path, "re");
    if (f == NULL) return;
    /* The kernel ends the name with a newline; the name itself may hold one. */
    size_t n = fread(buf, 1, cap - 1, f);
    if (n > 0 && buf[n - 1] == '\n') n--;
    buf[n] = '\0';
    if (n == 0) snprintf(buf, cap, "-");
    fclose(f);
}

/* Does PID map the file with inode ino?  1 yes, 0 no, -1 cannot tell. */
static int proc_maps_inode(long pid, ino_t ino) {
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%ld/maps", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL) return -1;
    int found = 0, lines = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        lines++;
        unsigned long long inode;
        int pos = 0;
        if (sscanf(line, "%*s %*s %*s %*s %llu %n", &inode, &pos) < 1) continue;
        if (inode == (unsigned long long)ino && strstr(line + pos, HZ_SHM_DIR "/") != NULL) {
            found = 1;
            break;
        }
    }
    bool err = ferror(f);
    fclose(f);
    if (err || (lines == 0 && !found)) return lines == 0 ? 0 : -1; /* empty: no memory */
    return found;
}

static double uptime_of(const struct hz_shm_segment *s) {
    if (s->start_time != 0 && s->clock_ticks != 0) {
        FILE *f = fopen("/proc/uptime", "re");
        double up = 0;
        if (f != NULL) {
            bool ok = fscanf(f, "%lf", &up) == 1;
            fclose(f);
            if (ok) return up - (double)s->start_time / (double)s->clock_ticks;
        }
    }
    return (double)(now_ns(CLOCK_REALTIME) - s->created_unix_ns) / 1e9;
}

/* ------------------------------------------------------------------ segments */

enum seg_status {
    SEG_OK,
    SEG_NOENT,    /* no such file */
    SEG_PERM,     /* cannot open it */
    SEG_IOERR,
    SEG_BAD,      /* not a hakozuna segment, or truncated */
    SEG_INIT,     /* being created (no magic yet) */
    SEG_VERSION,  /* another layout version */
};
enum liveness {
    ALIVE,
    GONE,         /* no such process */
    ZOMBIE,       /* exited, not yet reaped */
    REUSED,       /* pid belongs to a process started at another time */
    UNMAPPED,     /* the process does not map this segment (exec'd, stopped publishing) */
};
static const char *liveness_text[] = {
    "live", "process gone", "process exited", "pid reused", "not mapped by the process",
};

struct seg {
    long pid;
    uint64_t ns;            /* PID namespace of pid */
    bool unnamed;           /* its name is gone: opened through /proc/PID/map_files */
    char path[sizeof HZ_SHM_DIR + sizeof HZ_SHM_FILE_PREFIX + 48];
    int fd;
    int err;                /* errno of the failing step */
    struct stat st;
    struct hz_shm_segment pre; /* the preamble (always) */
    const struct hz_shm_segment *map;
    size_t map_size;
    struct hz_shm_segment snap; /* consistent copy, with the live counters merged in */
    bool live;              /* snap.counters and classes are the live figures */
    bool shrunk;            /* the file shrank under a read (SIGBUS): its process damaged it */
    bool slots_outside;     /* the header puts the thread slots outside the file */
    uint32_t threads;       /* thread slots in use, copied to slots */
    struct hz_shm_thread *slots;
};

static void seg_close(struct seg *g) {
    if (g->map != NULL) munmap((void *)g->map, g->map_size);
    if (g->fd >= 0) close(g->fd);
    free(g->slots);
    g->map = NULL;
    g->fd = -1;
    g->slots = NULL;
}

/* The process owns the file and may shrink it while we read its mapping: the read
 * then faults with SIGBUS.  Reads of a mapping run under bus_guard, where the fault
 * returns to the reader instead; elsewhere (the heap profile, ELF files) it ends
 * hzstat with a message. */
static sigjmp_buf *bus_guard;

static void on_bus(int sig) {
    if (bus_guard != NULL) siglongjmp(*bus_guard, 1);
    static const char m[] = "hzstat: a file being read shrank under it (damaged by its process)\n";
    ssize_t r = write(STDERR_FILENO, m, sizeof m - 1);
    (void)r;
    (void)sig;
    _exit(EXIT_ERROR);
}

/* The segment of a process that may change its user id has no name (src/shm.c): open
 * it through its mapping, the line of /proc/PID/maps that names it "(deleted)", as
 * /proc/PID/map_files/START-END (which needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE).
 * A descriptor, or -1 with errno (ENOENT: PID maps no such segment; EACCES: its maps
 * is not readable; EPERM: it is, but the mapping cannot be opened). */
static int open_unnamed(long pid, const char *name) {
    char path[64], line[4096], want[256];
    snprintf(path, sizeof path, "/proc/%ld/maps", pid);
    snprintf(want, sizeof want, " %s (deleted)\n", name);
    FILE *f = fopen(path, "re");
    if (f == NULL) return errno == ESRCH ? (errno = ENOENT, -1) : -1;
    unsigned long lo = 0, hi = 0;
    bool found = false;
    size_t wl = strlen(want);
    while (!found && fgets(line, sizeof line, f) != NULL) {
        size_t len = strlen(line);
        if (len >= wl && strcmp(line + len - wl, want) == 0 &&
            sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            found = true;
    }
    fclose(f);
    if (!found) {
        errno = ENOENT;
        return -1;
    }
    snprintf(path, sizeof path, "/proc/%ld/map_files/%lx-%lx", pid, lo, hi);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == EACCES) errno = EPERM; /* EACCES: its maps were unreadable */
    return fd;
}

/* Open and check the segment of PID in namespace ns (include/hakozuna_shm.h names
 * it); on SEG_OK it is mapped. */
static enum seg_status seg_open_ns(struct seg *g, long pid, uint64_t ns) {
    memset(g, 0, sizeof *g);
    g->fd = -1;
    g->pid = pid;
    g->ns = ns;
    if (ns == HZ_SHM_INIT_PID_NS)
        snprintf(g->path, sizeof g->path, "%s/%s%ld", HZ_SHM_DIR, HZ_SHM_FILE_PREFIX, pid);
    else
        snprintf(g->path, sizeof g->path, "%s/%s%" PRIu64 ".%ld", HZ_SHM_DIR, HZ_SHM_FILE_PREFIX,
                 ns, pid);
    g->fd = open(g->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (g->fd < 0 && errno == ENOENT && ns == own_ns) {
        g->fd = open_unnamed(pid, g->path);
        if (g->fd >= 0 || errno != ENOENT) g->unnamed = true;
    }
    if (g->fd < 0) {
        g->err = errno;
        if (errno == ENOENT) return SEG_NOENT;
        if (errno == EACCES || errno == EPERM) return SEG_PERM;
        if (errno == ELOOP) return SEG_BAD;
        return SEG_IOERR;
    }
    if (fstat(g->fd, &g->st) != 0) {
        g->err = errno;
        return SEG_IOERR;
    }
    if (!S_ISREG(g->st.st_mode)) return SEG_BAD;
    /* A segment being made is empty or has no magic for a moment: wait briefly. */
    for (int tries = 0;; tries++) {
        ssize_t n = pread(g->fd, &g->pre, HZ_SHM_PREAMBLE_SIZE, 0);
        if (n < 0) {
            g->err = errno;
            return SEG_IOERR;
        }
        if (n == HZ_SHM_PREAMBLE_SIZE && g->pre.magic == HZ_SHM_MAGIC) break;
        if (n == HZ_SHM_PREAMBLE_SIZE && g->pre.magic != 0) return SEG_BAD;
        if (tries >= 20) return n == 0 || g->pre.magic == 0 ? SEG_INIT : SEG_BAD;
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    if (fstat(g->fd, &g->st) != 0) {
        g->err = errno;
        return SEG_IOERR;
    }
    if (g->pre.layout_version != HZ_SHM_LAYOUT_VERSION ||
        g->pre.header_size != sizeof(struct hz_shm_segment))
        return SEG_VERSION;
    if (g->pre.pid != (uint64_t)pid || g->pre.total_size < sizeof(struct hz_shm_segment) ||
        (uint64_t)g->st.st_size < sizeof(struct hz_shm_segment))
        return SEG_BAD;
    /* The header and, when the file has them, the thread slots. */
    g->map_size = sizeof(struct hz_shm_segment);
    if (g->pre.total_size <= (uint64_t)g->st.st_size && g->pre.total_size < ((uint64_t)1 << 32))
        g->map_size = (size_t)g->pre.total_size;
    void *m = mmap(NULL, g->map_size, PROT_READ, MAP_SHARED, g->fd, 0);
    if (m == MAP_FAILED) {
        g->err = errno;
        return SEG_IOERR;
    }
    g->map = m;
    sigjmp_buf env;
    if (sigsetjmp(env, 1) != 0) {
        bus_guard = NULL;
        g->shrunk = true;
        return SEG_BAD;
    }
    bus_guard = &env;
    bool ours = __atomic_load_n(&g->map->pid_ns, __ATOMIC_RELAXED) == ns;
    bus_guard = NULL;
    return ours ? SEG_OK : SEG_BAD;
}

/* The segment of PID of our own namespace. */
static enum seg_status seg_open(struct seg *g, long pid) { return seg_open_ns(g, pid, own_ns); }

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* Slot i's counters, as the last seg_read found them. */
static void thread_read(const struct seg *g, uint32_t i, struct hz_shm_thread *t) {
    *t = g->slots[i];
}

/* VmRSS of pid in bytes, 0 if unknown. */
static uint64_t proc_rss(long pid) {
    char path[64], line[256];
    uint64_t kb = 0;
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL) return 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %" SCNu64, &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

/* Replace the published counters of snap by the live ones: the sums over the thread
 * slots and the process-wide counters (include/hakozuna_shm.h says how).  Left as
 * published when some heaps have no slot, whose counters only publishing sees.
 * False if the header puts the slots outside the file, which the library never
 * does: the process damaged its segment. */
static bool seg_live(struct seg *g) {
    struct hz_shm_segment *s = &g->snap;
    const struct hz_shm_live *l = &g->map->live;
    struct hz_shm_counters *c = &s->counters;
    c->process_rss_ = proc_rss(g->pid);
    g->live = false;
    g->threads = 0;
    /* The process wrote these: slots must lie within what was mapped. */
    if (s->thread_stride < sizeof(struct hz_shm_thread) || s->threads_offset < sizeof *s ||
        s->threads_offset > g->map_size)
        return false;
    uint64_t slots = (g->map_size - s->threads_offset) / s->thread_stride;
    uint32_t threads = LD(g->map->threads_used);
    if (threads > s->thread_slots) threads = s->thread_slots;
    if (threads > slots) threads = (uint32_t)slots;
    struct hz_shm_thread *copy = realloc(g->slots, (threads ? threads : 1) * sizeof *copy);
    if (copy == NULL) return true; /* the published figures, then */
    g->slots = copy;
    for (uint32_t i = 0; i < threads; i++)
        memcpy(&copy[i], (const char *)g->map + s->threads_offset +
                             (size_t)(i + 1) * s->thread_stride - sizeof *copy, sizeof *copy);
    g->threads = threads;
    /* The process-wide counters are in the file, current, whatever the heaps. */
    c->bytes_mapped = LD(l->bytes_mapped);
    c->bytes_purged = LD(l->bytes_purged);
    c->bytes_unmapped = LD(l->bytes_unmapped);
    c->bytes_committed = LD(l->bytes_committed);
    c->bytes_metadata = LD(l->bytes_meta) + LD(l->segments_mapped) * s->segment_header_size;
    c->peak_mapped = LD(l->peak_mapped);
    c->peak_committed = LD(l->peak_committed);
    c->foreign_frees = LD(l->foreign_frees);
    c->large_allocs = LD(l->large_allocs);
    c->large_cache_hits = LD(l->large_cache_hits);
    c->heaps_created = LD(l->heaps_created);
    c->heaps_adopted = LD(l->heaps_adopted);
    c->threads_live = LD(l->threads_live);
    c->segments_mapped = LD(l->segments_mapped);
    /* The sums over heaps need every heap in a slot; else the published ones stay. */
    if ((c->heaps_unlisted = LD(l->heaps_unlisted)) != 0) return true;
    uint64_t m[HZ_SHM_THREAD_CLASSES] = {0}, f[HZ_SHM_THREAD_CLASSES] = {0};
    uint64_t sent = 0, recv = 0, batches = 0, refills = 0, made = 0, retired = 0, dirty = 0;
    for (uint32_t i = 0; i < g->threads; i++) {
        struct hz_shm_thread t;
        thread_read(g, i, &t);
        for (unsigned k = 0; k < HZ_SHM_THREAD_CLASSES; k++) m[k] += t.mallocs[k], f[k] += t.frees[k];
        sent += t.remote_sent, recv += t.remote_recv, batches += t.remote_batches;
        refills += t.refills, made += t.pages_made, retired += t.pages_retired;
        dirty += t.bytes_dirty;
    }
    uint64_t mallocs = 0, frees = 0, in_use = 0;
    unsigned n = class_limit(s) < HZ_SHM_THREAD_CLASSES ? class_limit(s) : HZ_SHM_THREAD_CLASSES;
    for (unsigned k = 1; k < n; k++) {
        uint64_t heapless = LD(l->heapless_frees[k]); /* remote frees, received as such */
        f[k] += heapless;
        sent += heapless;
        s->classes[k].mallocs = m[k];
        s->classes[k].frees = f[k];
        mallocs += m[k], frees += f[k];
        if (m[k] > f[k]) in_use += (m[k] - f[k]) * s->classes[k].size;
    }
    c->mallocs = mallocs + LD(l->large_allocs);
    c->frees = frees + LD(l->large_frees);
    c->bytes_in_use = in_use + LD(l->large_bytes);
    c->bytes_dirty = dirty + LD(l->cached_dirty);
    c->remote_frees_sent = sent;
    c->remote_frees_recv = recv;
    c->remote_batches = batches;
    c->outbox_flushes = batches; /* one batch per outbox flush */
    c->refills = refills;
    c->pages_made = made;
    c->pages_retired = retired;
    g->live = true;
    return true;
}

/* A copy of the mapped segment: the header under the seqlock, then the live
 * counters (seg_live); false if no consistent header came. */
static bool seg_read(struct seg *g) {
    const struct hz_shm_segment *m = g->map;
    sigjmp_buf env;
    if (sigsetjmp(env, 1) != 0) {
        bus_guard = NULL;
        g->shrunk = true;
        g->threads = 0;
        return false;
    }
    bus_guard = &env;
    for (int tries = 0; tries < 2000; tries++) {
        uint64_t g1 = __atomic_load_n(&m->generation, __ATOMIC_ACQUIRE);
        if ((g1 & 1) == 0) {
            memcpy(&g->snap, (const void *)m, sizeof g->snap);
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            uint64_t g2 = __atomic_load_n(&m->generation, __ATOMIC_RELAXED);
            if (g1 == g2) {
                g->slots_outside = !seg_live(g);
                bus_guard = NULL;
                return !g->slots_outside;
            }
        }
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    bus_guard = NULL;
    return false;
}

/* Why seg_read failed, said once. */
static void report_read_failure(const struct seg *g) {
    if (g->shrunk) msg("%s: the file shrank while being read (damaged by its process)", g->path);
    else if (g->slots_outside) msg("%s: damaged segment (its thread slots lie outside the file)", g->path);
    else msg("%s: no consistent snapshot (the writer seems stuck mid-update)", g->path);
}

/* Is the segment's process still there and publishing into it?  Uses the preamble
 * (pid, start time), so it works for any layout version; the mapping check needs
 * the file's inode (st) and permission to read /proc/PID/maps. */
static enum liveness seg_liveness(const struct seg *g, bool have_header, bool check_maps) {
    char state = 0;
    uint64_t start = 0;
    if (!proc_stat(g->pid, &state, &start)) return proc_exists(g->pid) ? ALIVE : GONE;
    if (state == 'Z' || state == 'X') return ZOMBIE;
    if (have_header && g->pre.start_time != 0 && start != g->pre.start_time) return REUSED;
    if (check_maps && have_header && g->fd >= 0 && proc_maps_inode(g->pid, g->st.st_ino) == 0)
        return UNMAPPED;
    return ALIVE;
}

static int report_stale(const struct seg *g, enum liveness lv) {
    msg("stale segment %s: %s (remove it with `hzstat --gc`)", g->path,
        lv == GONE     ? "the process is gone"
        : lv == ZOMBIE ? "the process has exited"
        : lv == REUSED ? "its pid now belongs to another process"
                       : "the process no longer maps it (it exec'd another program)");
    return EXIT_STALE;
}

/* Explain a failed seg_open for PID on stderr; returns the exit status. */
static int report_open_failure(struct seg *g, enum seg_status st) {
    enum liveness lv;
    switch (st) {
    case SEG_NOENT:
        if (proc_exists(g->pid)) {
            msg("process %ld has no hakozuna stats segment (%s)", g->pid, g->path);
            fprintf(stderr,
                    "hint: start it with `hzrun --stats CMD` or with HAKOZUNA_STATS=1 in its "
                    "environment (and hakozuna preloaded)\n");
            return EXIT_NOSEG;
        }
        msg("no such process: %ld", g->pid);
        return EXIT_NOPROC;
    case SEG_PERM:
        if (g->unnamed && g->err == EPERM)
            msg("permission denied: %s of process %ld has no name (the process may change "
                "its user id) and is reachable only through /proc/%ld/map_files: run hzstat "
                "as root (with CAP_SYS_ADMIN)",
                g->path, g->pid, g->pid);
        else if (g->unnamed)
            msg("permission denied: there is no %s, and process %ld's memory map, where a "
                "segment without a name would show, is not readable: run hzstat as root",
                g->path, g->pid);
        else
            msg("permission denied: %s (it belongs to the user the process runs as; run "
                "hzstat as that user or as root)",
                g->path);
        return EXIT_PERM;
    case SEG_VERSION:
        if ((lv = seg_liveness(g, true, false)) != ALIVE) return report_stale(g, lv);
        if (g->pre.layout_version != HZ_SHM_LAYOUT_VERSION)
            msg("%s has segment layout version %" PRIu32 "; this hzstat (hakozuna %s) "
                "reads layout version %u: use the hzstat of the library the process runs",
                g->path, g->pre.layout_version, PACKAGE_VERSION, HZ_SHM_LAYOUT_VERSION);
        else
            msg("%s: layout version %u but header size %" PRIu32 " (expected %zu): use the "
                "hzstat of the library the process runs",
                g->path, HZ_SHM_LAYOUT_VERSION, g->pre.header_size,
                sizeof(struct hz_shm_segment));
        return EXIT_VERSION;
    case SEG_INIT:
        if ((lv = seg_liveness(g, false, false)) != ALIVE) return report_stale(g, lv);
        msg("%s is still being set up, or its creator failed: try again", g->path);
        return EXIT_ERROR;
    case SEG_BAD:
        if ((lv = seg_liveness(g, false, false)) != ALIVE) return report_stale(g, lv);
        msg("%s is not a valid hakozuna stats segment", g->path);
        return EXIT_ERROR;
    case SEG_IOERR:
        msg("%s: %s", g->path, strerror(g->err));
        return EXIT_ERROR;
    case SEG_OK:
        break;
    }
    return EXIT_OK;
}

/* --------------------------------------------------------------- snapshots */

/* -t: the per-thread view, one thread heap (slot) each. */
static bool show_threads;
static const char *const thread_state[] = {"unset", "running", "exited", "orphaned", "shared"};

static const char *state_name(uint32_t st) { return st < 5 ? thread_state[st] : "unknown"; }

static uint64_t thread_mallocs(const struct hz_shm_thread *t) {
    uint64_t n = 0;
    for (unsigned k = 0; k < HZ_SHM_THREAD_CLASSES; k++) n += t->mallocs[k];
    return n;
}
static uint64_t thread_frees(const struct hz_shm_thread *t) {
    uint64_t n = 0;
    for (unsigned k = 0; k < HZ_SHM_THREAD_CLASSES; k++) n += t->frees[k];
    return n;
}

static void print_threads_text(const struct seg *g) {
    printf("\n  %4s %8s %-8s %6s %14s %14s %14s %14s\n", "slot", "tid", "state", "owners",
           "mallocs", "frees", "remote sent", "remote recv");
    for (uint32_t i = 0; i < g->threads; i++) {
        struct hz_shm_thread t;
        thread_read(g, i, &t);
        if (t.state == 0) continue;
        printf("  %4u %8" PRIu64 " %-8s %6" PRIu64 " %14" PRIu64 " %14" PRIu64 " %14" PRIu64
               " %14" PRIu64 "\n",
               i, t.tid, state_name(t.state), t.owners, thread_mallocs(&t), thread_frees(&t),
               t.remote_sent, t.remote_recv);
    }
    if (g->snap.counters.heaps_unlisted != 0)
        printf("  (%" PRIu64 " more heaps have no slot and are not listed)\n",
               g->snap.counters.heaps_unlisted);
}

static void json_threads(const struct seg *g) {
    printf(",\"threads\":[");
    bool first = true;
    for (uint32_t i = 0; i < g->threads; i++) {
        struct hz_shm_thread t;
        thread_read(g, i, &t);
        if (t.state == 0) continue;
        printf("%s{\"slot\":%u,\"tid\":%" PRIu64 ",\"state\":\"%s\",\"owners\":%" PRIu64
               ",\"mallocs\":%" PRIu64 ",\"frees\":%" PRIu64 ",\"remote_frees_sent\":%" PRIu64
               ",\"remote_frees_recv\":%" PRIu64 ",\"remote_batches\":%" PRIu64
               ",\"refills\":%" PRIu64 "}",
               first ? "" : ",", i, t.tid, state_name(t.state), t.owners, thread_mallocs(&t),
               thread_frees(&t), t.remote_sent, t.remote_recv, t.remote_batches, t.refills);
        first = false;
    }
    printf("]");
}

static void oneshot_threads(const struct seg *g) {
    for (uint32_t i = 0; i < g->threads; i++) {
        struct hz_shm_thread t;
        thread_read(g, i, &t);
        if (t.state == 0) continue;
        static const char *const what[] = {"tid", "mallocs", "frees", "remote_frees_sent",
                                           "remote_frees_recv"};
        static const char *const desc[] = {"Kernel thread id of the latest owner",
                                           "Allocations", "Frees", "Frees of other heaps' blocks",
                                           "Own blocks freed elsewhere, taken back"};
        const uint64_t v[] = {t.tid, thread_mallocs(&t), thread_frees(&t), t.remote_sent,
                              t.remote_recv};
        char name[48];
        for (unsigned j = 0; j < 5; j++) {
            snprintf(name, sizeof name, "thread.%u.%s", i, what[j]);
            printf("%-28s %20" PRIu64 "  %s, heap %u (thread %" PRIu64 ", %s)\n", name, v[j],
                   desc[j], i, t.tid, state_name(t.state));
        }
    }
}

static void print_text(const struct seg *g, bool classes) {
    const struct hz_shm_segment *s = &g->snap;
    char comm[64], version[sizeof s->version + 1], config[sizeof s->config + 1];
    char b1[32], b2[32];
    proc_comm(g->pid, comm, sizeof comm);
    field_str(version, sizeof version, s->version, sizeof s->version);
    field_str(config, sizeof config, s->config, sizeof s->config);
    double age = s->counters.last_publish_mono_ns
                     ? (double)(now_ns(CLOCK_MONOTONIC) - s->counters.last_publish_mono_ns) / 1e9
                     : 0;
    printf("process %ld (%s): %s\n", g->pid, text_safe(comm), version);
    printf("  %-24s %s\n", "uptime", human_duration(uptime_of(s), b1, sizeof b1));
    printf("  %-24s %s ago (%" PRIu64 " updates)%s\n", "last published",
           human_duration(age, b2, sizeof b2), s->counters.publishes,
           (s->flags & HZ_SHM_FLAG_FINAL) ? ", final: process exiting" : "");
    printf("  %-24s %s\n", "config", config);
    printf("  %-24s %s\n", "counters",
           g->live ? "live (read from the process's counters now)"
                   : "sums over heaps as last published (some heaps have no thread slot); "
                     "process-wide ones live");
    if (s->flags & HZ_SHM_FLAG_NO_COUNTERS)
        printf("  note: built without per-thread counters; event counts read 0\n");
    if (!(s->flags & HZ_SHM_FLAG_DIRTY))
        printf("  note: a library without the dirty-bytes gauge; bytes dirty reads 0\n");
    printf("\n");
    for (size_t i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        /* The publication counters are in the header above, unless asked for. */
        if (field_filter ? !field_on[i]
                         : f->offset >= offsetof(struct hz_shm_counters, publishes) &&
                               f->offset <= offsetof(struct hz_shm_counters, last_publish_mono_ns))
            continue;
        uint64_t v = get(&s->counters, f);
        if (f->kind == K_BYTES || f->kind == K_BYTES_GAUGE)
            printf("  %-24s %18" PRIu64 "  %s\n", f->label, v, human_bytes(v, b1, sizeof b1));
        else
            printf("  %-24s %18" PRIu64 "\n", f->label, v);
    }
    if (show_threads) print_threads_text(g);
    if (!classes) return;
    printf("\n  %5s %10s %16s %16s %14s %12s\n", "class", "size", "mallocs", "frees", "live",
           "live bytes");
    unsigned n = class_limit(s);
    for (unsigned c = 0; c < n; c++) {
        const struct hz_shm_class *k = &s->classes[c];
        if (k->size == 0 || (k->mallocs == 0 && k->frees == 0)) continue;
        int64_t live = k->mallocs >= k->frees ? (int64_t)(k->mallocs - k->frees) : 0;
        printf("  %5u %10" PRIu64 " %16" PRIu64 " %16" PRIu64 " %14" PRId64 " %12s\n", c,
               k->size, k->mallocs, k->frees, live,
               human_bytes((uint64_t)live * k->size, b1, sizeof b1));
    }
}

static void json_header(const struct seg *g, const char *state) {
    const struct hz_shm_segment *s = &g->snap;
    char comm[64], version[sizeof s->version + 1], variant[sizeof s->variant + 1];
    char config[sizeof s->config + 1];
    proc_comm(g->pid, comm, sizeof comm);
    field_str(version, sizeof version, s->version, sizeof s->version);
    field_str(variant, sizeof variant, s->variant, sizeof s->variant);
    field_str(config, sizeof config, s->config, sizeof s->config);
    double age = s->counters.last_publish_mono_ns
                     ? (double)(now_ns(CLOCK_MONOTONIC) - s->counters.last_publish_mono_ns) / 1e9
                     : 0;
    printf("{\"pid\":%ld,\"comm\":", g->pid);
    json_string(stdout, comm);
    printf(",\"state\":\"%s\",\"version\":", state);
    json_string(stdout, version);
    printf(",\"variant\":");
    json_string(stdout, variant);
    printf(",\"config\":");
    json_string(stdout, config);
    printf(",\"layout_version\":%" PRIu32 ",\"creation_id\":\"%016" PRIx64 "\""
           ",\"start_time\":%" PRIu64 ",\"uptime_s\":%.3f,\"publish_age_s\":%.3f"
           ",\"final\":%s,\"counters_built\":%s",
           s->layout_version, s->creation_id, s->start_time, uptime_of(s), age,
           (s->flags & HZ_SHM_FLAG_FINAL) ? "true" : "false",
           (s->flags & HZ_SHM_FLAG_NO_COUNTERS) ? "false" : "true");
    printf(",\"live\":%s", g->live ? "true" : "false");
}

static void json_counters(const struct hz_shm_counters *c) {
    printf(",\"counters\":{");
    bool first = true;
    for (size_t i = 0; i < NFIELDS; i++) {
        if (!shown(i)) continue;
        printf("%s\"%s\":%" PRIu64, first ? "" : ",", fields[i].name, get(c, &fields[i]));
        first = false;
    }
    printf("}");
}

static void json_classes(const struct hz_shm_segment *s) {
    printf(",\"classes\":[");
    bool first = true;
    unsigned n = class_limit(s);
    for (unsigned c = 0; c < n; c++) {
        const struct hz_shm_class *k = &s->classes[c];
        if (k->size == 0 || (k->mallocs == 0 && k->frees == 0)) continue;
        uint64_t live = k->mallocs >= k->frees ? k->mallocs - k->frees : 0;
        printf("%s{\"class\":%u,\"size\":%" PRIu64 ",\"mallocs\":%" PRIu64 ",\"frees\":%" PRIu64
               ",\"live\":%" PRIu64 "}",
               first ? "" : ",", c, k->size, k->mallocs, k->frees, live);
        first = false;
    }
    printf("]");
}

static void print_json(const struct seg *g, bool classes) {
    json_header(g, "live");
    json_counters(&g->snap.counters);
    if (classes) json_classes(&g->snap);
    if (show_threads) json_threads(g);
    printf("}\n");
}

/* Open PID's segment, check it, and take a consistent snapshot. */
static int open_live(struct seg *g, long pid) {
    enum seg_status st = seg_open(g, pid);
    if (st != SEG_OK) {
        int rc = report_open_failure(g, st);
        seg_close(g);
        return rc;
    }
    enum liveness lv = seg_liveness(g, true, true);
    if (lv != ALIVE) {
        seg_close(g);
        return report_stale(g, lv);
    }
    if (!seg_read(g)) {
        report_read_failure(g);
        seg_close(g);
        return EXIT_ERROR;
    }
    return EXIT_OK;
}

/* --heap: the profile segment goes with the stats segment, named like it (or, when
 * that has no name, found the same way through the process's maps). */
static int cmd_heap(long pid, long top, const char *output) {
    struct seg g;
    int rc = open_live(&g, pid);
    if (rc != EXIT_OK) return rc;
    char path[sizeof g.path + sizeof HZ_PROF_SUFFIX];
    snprintf(path, sizeof path, "%s%s", g.path, HZ_PROF_SUFFIX);
    int fd = g.unnamed ? open_unnamed(pid, path)
                       : open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    seg_close(&g);
    if (fd < 0 && errno == ENOENT) {
        msg("process %ld records no heap profile (%s)", pid, path);
        fprintf(stderr, "hint: start it with `hzrun --profile CMD` or with HAKOZUNA_STATS=1 "
                        "HAKOZUNA_PROFILE=1 in its environment\n");
        return EXIT_NOSEG;
    }
    if (fd < 0) {
        msg("%s: %s", path, strerror(errno));
        return errno == EACCES || errno == EPERM ? EXIT_PERM : EXIT_ERROR;
    }
    rc = hzstat_heap(fd, path, pid, top, output);
    close(fd);
    return rc;
}

static int cmd_snapshot(long pid, bool json, bool classes) {
    struct seg g;
    int rc = open_live(&g, pid);
    if (rc != EXIT_OK) return rc;
    if (json) print_json(&g, classes);
    else print_text(&g, classes);
    seg_close(&g);
    return stdout_status();
}

/* -1: one line per counter, "name value description", like varnishstat -1. */
static void print_oneshot(const struct seg *g, bool classes) {
    const struct hz_shm_segment *s = &g->snap;
    for (size_t i = 0; i < NFIELDS; i++)
        if (shown(i))
            printf("%-28s %20" PRIu64 "  %s\n", fields[i].name, get(&s->counters, &fields[i]),
                   fields[i].desc);
    if (show_threads) oneshot_threads(g);
    if (!classes) return;
    unsigned n = class_limit(s);
    for (unsigned c = 0; c < n; c++) {
        const struct hz_shm_class *k = &s->classes[c];
        if (k->size == 0 || (k->mallocs == 0 && k->frees == 0)) continue;
        uint64_t live = k->mallocs >= k->frees ? k->mallocs - k->frees : 0;
        char name[48];
        static const char *const what[] = {"mallocs", "frees", "live"};
        const uint64_t v[] = {k->mallocs, k->frees, live};
        static const char *const desc[] = {"Allocations", "Frees", "Blocks in use"};
        for (unsigned j = 0; j < 3; j++) {
            snprintf(name, sizeof name, "class.%u.%s", c, what[j]);
            printf("%-28s %20" PRIu64 "  %s of class %u (%" PRIu64 "-byte blocks)\n", name, v[j],
                   desc[j], c, k->size);
        }
    }
}

static int cmd_oneshot(long pid, bool classes) {
    struct seg g;
    int rc = open_live(&g, pid);
    if (rc != EXIT_OK) return rc;
    print_oneshot(&g, classes);
    seg_close(&g);
    return stdout_status();
}

/* --------------------------------------------------------------- Prometheus
 * The text exposition format of node_exporter's textfile collector: per metric one
 * HELP and one TYPE line, then its samples for every process, labelled with pid and
 * comm (and class and size for the per-class counters). */

/* A thread heap's figures for Prometheus: mallocs, frees, remote sent, received. */
struct prom_thread {
    uint32_t slot, state;
    uint64_t tid, v[4];
};

struct prom_proc {
    long pid;
    char comm[64];
    struct hz_shm_segment snap;
    struct prom_thread *threads; /* malloc'd, nthreads of them */
    uint32_t nthreads;
};

static void prom_label_value(FILE *out, const char *v) { quoted_string(out, v, false); }

static void prom_labels(FILE *out, const struct prom_proc *p) {
    fprintf(out, "{pid=\"%ld\",comm=", p->pid);
    prom_label_value(out, p->comm);
}

static void prom_head(FILE *out, const char *name, const char *type, const char *help) {
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_write(FILE *out, const struct prom_proc *procs, size_t n) {
    char name[96];
    if (n == 0) return;
    prom_head(out, "hakozuna_info", "gauge", "Library version and variant of the process");
    for (size_t i = 0; i < n; i++) {
        char version[sizeof procs[i].snap.version + 1], variant[sizeof procs[i].snap.variant + 1];
        field_str(version, sizeof version, procs[i].snap.version, sizeof procs[i].snap.version);
        field_str(variant, sizeof variant, procs[i].snap.variant, sizeof procs[i].snap.variant);
        fputs("hakozuna_info", out);
        prom_labels(out, &procs[i]);
        fputs(",version=", out);
        prom_label_value(out, version);
        fputs(",variant=", out);
        prom_label_value(out, variant);
        fputs("} 1\n", out);
    }
    prom_head(out, "hakozuna_uptime_seconds", "gauge", "Seconds since the process started");
    for (size_t i = 0; i < n; i++) {
        fputs("hakozuna_uptime_seconds", out);
        prom_labels(out, &procs[i]);
        fprintf(out, "} %.3f\n", uptime_of(&procs[i].snap));
    }
    for (size_t f = 0; f < NFIELDS; f++) {
        const struct field *fd = &fields[f];
        if (fd->offset == offsetof(struct hz_shm_counters, last_publish_mono_ns)) continue;
        bool unix_time = fd->offset == offsetof(struct hz_shm_counters, last_publish_unix_ns);
        bool counter = fd->kind == K_COUNT || fd->kind == K_BYTES;
        if (unix_time)
            snprintf(name, sizeof name, "hakozuna_last_publish_timestamp_seconds");
        else
            snprintf(name, sizeof name, "hakozuna_%s%s", fd->name, counter ? "_total" : "");
        prom_head(out, name, counter ? "counter" : "gauge",
                  unix_time ? "Time of the last publish, seconds since the epoch" : fd->desc);
        for (size_t i = 0; i < n; i++) {
            uint64_t v = get(&procs[i].snap.counters, fd);
            fputs(name, out);
            prom_labels(out, &procs[i]);
            if (unix_time) fprintf(out, "} %.3f\n", (double)v / 1e9);
            else fprintf(out, "} %" PRIu64 "\n", v);
        }
    }
    static const struct {
        const char *name, *type, *help;
    } cls[] = {
        {"hakozuna_class_mallocs_total", "counter", "Allocations per size class"},
        {"hakozuna_class_frees_total", "counter", "Frees per size class"},
        {"hakozuna_class_live_blocks", "gauge", "Blocks in use per size class"},
    };
    static const struct {
        const char *name, *help;
    } thr[] = {
        {"hakozuna_thread_mallocs_total", "Allocations per thread heap"},
        {"hakozuna_thread_frees_total", "Frees by the threads of a thread heap"},
        {"hakozuna_thread_remote_frees_sent_total", "Frees of other heaps' blocks, per heap"},
        {"hakozuna_thread_remote_frees_recv_total",
         "A heap's own blocks freed by other threads and taken back"},
    };
    for (unsigned j = 0; j < 4; j++) {
        prom_head(out, thr[j].name, "counter", thr[j].help);
        for (size_t i = 0; i < n; i++) {
            for (uint32_t k = 0; k < procs[i].nthreads; k++) {
                const struct prom_thread *t = &procs[i].threads[k];
                fputs(thr[j].name, out);
                prom_labels(out, &procs[i]);
                fprintf(out, ",slot=\"%u\",tid=\"%" PRIu64 "\",state=\"%s\"} %" PRIu64 "\n",
                        t->slot, t->tid, state_name(t->state), t->v[j]);
            }
        }
    }
    for (unsigned j = 0; j < 3; j++) {
        prom_head(out, cls[j].name, cls[j].type, cls[j].help);
        for (size_t i = 0; i < n; i++) {
            const struct hz_shm_segment *s = &procs[i].snap;
            unsigned lim = class_limit(s);
            for (unsigned c = 0; c < lim; c++) {
                const struct hz_shm_class *k = &s->classes[c];
                if (k->size == 0 || (k->mallocs == 0 && k->frees == 0)) continue;
                uint64_t v = j == 0 ? k->mallocs
                             : j == 1 ? k->frees
                             : k->mallocs >= k->frees ? k->mallocs - k->frees : 0;
                fputs(cls[j].name, out);
                prom_labels(out, &procs[i]);
                fprintf(out, ",class=\"%u\",size=\"%" PRIu64 "\"} %" PRIu64 "\n", c, k->size, v);
            }
        }
    }
}

/* Take a snapshot of pid into p; with quiet, a process without a readable live
 * segment is left out without a word (the all-processes form). */
static int prom_take(struct prom_proc *p, long pid, bool quiet) {
    struct seg g;
    int rc;
    if (quiet) {
        if (seg_open(&g, pid) != SEG_OK || seg_liveness(&g, true, true) != ALIVE || !seg_read(&g)) {
            seg_close(&g);
            return EXIT_NOSEG;
        }
    } else if ((rc = open_live(&g, pid)) != EXIT_OK) {
        return rc;
    }
    p->pid = pid;
    proc_comm(pid, p->comm, sizeof p->comm);
    memcpy(&p->snap, &g.snap, sizeof p->snap);
    p->nthreads = 0;
    p->threads = calloc(g.threads > 0 ? g.threads : 1, sizeof *p->threads);
    for (uint32_t i = 0; p->threads != NULL && i < g.threads; i++) {
        struct hz_shm_thread t;
        thread_read(&g, i, &t);
        if (t.state == 0) continue;
        p->threads[p->nthreads++] = (struct prom_thread){
            i, t.state, t.tid, {thread_mallocs(&t), thread_frees(&t), t.remote_sent, t.remote_recv}};
    }
    seg_close(&g);
    return EXIT_OK;
}

static long list_pids(long **out);

/* A new file at path, for writing: whatever was there (a file left by an earlier
 * run, or a symlink planted in a shared directory) is removed, never followed. */
static FILE *create_new(const char *path) {
    if (unlink(path) != 0 && errno != ENOENT) return NULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "w");
    if (f == NULL) close(fd);
    return f;
}

/* --prometheus [PID] [-o FILE]: every live publishing process, or PID.  With FILE the
 * text goes to FILE.tmp, then is renamed over FILE, so that the collector never reads
 * half a file. */
static int cmd_prometheus(long pid, const char *path) {
    /* FILE is replaced by renaming a new file onto it: only a regular file (or none)
     * can be, not a device, a directory or a symlink, which the rename would drop. */
    struct stat st;
    if (path != NULL && strcmp(path, "-") != 0 && lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return usage_error("-o %s: not a regular file (hzstat renames a new file onto it)", path);
    struct prom_proc *procs = NULL;
    size_t n = 0;
    if (pid != 0) {
        procs = malloc(sizeof *procs);
        if (procs == NULL) {
            msg("out of memory");
            return EXIT_ERROR;
        }
        int rc = prom_take(procs, pid, false);
        if (rc != EXIT_OK) {
            free(procs);
            return rc;
        }
        n = 1;
    } else {
        long *pids = NULL;
        long np = list_pids(&pids);
        if (np < 0) {
            msg("cannot read %s: %s", HZ_SHM_DIR, strerror(errno));
            return EXIT_ERROR;
        }
        procs = calloc(np > 0 ? (size_t)np : 1, sizeof *procs);
        if (procs == NULL) {
            free(pids);
            msg("out of memory");
            return EXIT_ERROR;
        }
        for (long i = 0; i < np; i++)
            if (prom_take(&procs[n], pids[i], true) == EXIT_OK) n++;
        free(pids);
    }
    int rc = EXIT_OK;
    if (path == NULL || strcmp(path, "-") == 0) {
        prom_write(stdout, procs, n);
        rc = stdout_status();
    } else {
        char *tmp = NULL;
        FILE *out = NULL;
        if (asprintf(&tmp, "%s.tmp", path) < 0) tmp = NULL;
        if (tmp == NULL || (out = create_new(tmp)) == NULL) {
            msg("%s: %s", tmp ? tmp : path, strerror(errno));
            rc = EXIT_ERROR;
        } else {
            prom_write(out, procs, n);
            bool bad = ferror(out) != 0;
            if (fclose(out) != 0) bad = true;
            if (bad || rename(tmp, path) != 0) {
                msg("%s: %s", bad ? tmp : path, strerror(errno));
                unlink(tmp);
                rc = EXIT_ERROR;
            }
        }
        free(tmp);
    }
    for (size_t i = 0; i < n; i++) free(procs[i].threads);
    free(procs);
    return rc;
}

/* ---------------------------------------------------------------- intervals */

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) {
    (void)sig;
    interrupted = 1;
}

static void sleep_seconds(double s) {
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (!interrupted && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The columns of the -i table: first the rates of the counters (the usual ones:
 * those with a rate heading), then the current values of the gauges (the usual
 * ones: bytes in use and mapped, threads). */
static bool rate_column(size_t i) {
    const struct field *f = &fields[i];
    if (f->kind != K_COUNT && f->kind != K_BYTES) return false;
    return field_filter ? field_on[i] : f->rate != NULL;
}
static bool value_column(size_t i) {
    const struct field *f = &fields[i];
    if (f->kind != K_GAUGE && f->kind != K_BYTES_GAUGE) return false;
    if (field_filter) return field_on[i];
    return f->offset == offsetof(struct hz_shm_counters, bytes_in_use) ||
           f->offset == offsetof(struct hz_shm_counters, bytes_mapped) ||
           f->offset == offsetof(struct hz_shm_counters, threads_live);
}
/* Heading and width of column i. */
static int column(size_t i, char *head, size_t cap) {
    const struct field *f = &fields[i];
    int width = 11;
    if (rate_column(i)) {
        if (f->rate) snprintf(head, cap, "%s", f->rate);
        else snprintf(head, cap, "%s/s", f->name);
    } else if (f->offset == offsetof(struct hz_shm_counters, bytes_in_use)) {
        snprintf(head, cap, "in-use");
        width = 10;
    } else if (f->offset == offsetof(struct hz_shm_counters, bytes_mapped)) {
        snprintf(head, cap, "mapped");
        width = 10;
    } else if (f->offset == offsetof(struct hz_shm_counters, threads_live)) {
        snprintf(head, cap, "threads");
        width = 7;
    } else {
        snprintf(head, cap, "%s", f->name);
    }
    int len = (int)strlen(head);
    return len > width ? len : width;
}

static void print_rate_header(void) {
    char head[64];
    printf("%8s", "time");
    for (size_t i = 0; i < NFIELDS; i++)
        if (rate_column(i)) printf(" %*s", column(i, head, sizeof head), head);
    for (size_t i = 0; i < NFIELDS; i++)
        if (value_column(i)) printf(" %*s", column(i, head, sizeof head), head);
    printf("\n");
}

/* A byte count or rate in the -i table: B, KiB, MiB... with one decimal (whole
 * bytes below 1 KiB), no space, so that the columns stay whitespace-separated. */
static const char *short_bytes(double v, char *buf, size_t cap) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    unsigned u = 0;
    if (!(v >= 0)) v = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%.0fB", v);
    else snprintf(buf, cap, "%.1f%s", v, units[u]);
    return buf;
}

/* Per second over dt of counter f, from p to c; a counter that went back (a reused
 * slot, a damaged segment) has no rate, not one of 2^64 / dt. */
static double rate(const struct hz_shm_counters *c, const struct hz_shm_counters *p,
                   const struct field *f, double dt) {
    uint64_t now = get(c, f), before = get(p, f);
    return now >= before ? (double)(now - before) / dt : 0;
}

static int cmd_interval(long pid, double interval, long count, bool json, bool classes) {
    struct seg g;
    int rc = open_live(&g, pid);
    if (rc != EXIT_OK) return rc;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    struct hz_shm_segment prev = g.snap;
    bool prev_live = g.live;
    uint64_t prev_wall = now_ns(CLOCK_MONOTONIC);
    if (!json) print_rate_header();
    int lines = 0;
    bool ended = false;
    for (long k = 0; (count <= 0 || k < count) && !interrupted && !ended; k++) {
        sleep_seconds(interval);
        if (interrupted) break;
        if (!seg_read(&g)) {
            report_read_failure(&g);
            rc = EXIT_ERROR;
            break;
        }
        uint64_t wall = now_ns(CLOCK_MONOTONIC);
        const struct hz_shm_counters *c = &g.snap.counters, *p = &prev.counters;
        double wall_dt = (double)(wall - prev_wall) / 1e9;
        /* Live counters: rates over the time between the two reads.  Otherwise (some
         * heaps without a slot) over the time between the two publishes the counters
         * came from, and an interval without a publish has no rates. */
        double dt = g.live && prev_live ? wall_dt
                    : g.live != prev_live ? 0 /* live and published figures do not subtract */
                    : c->last_publish_mono_ns > p->last_publish_mono_ns
                        ? (double)(c->last_publish_mono_ns - p->last_publish_mono_ns) / 1e9
                        : 0;
        ended = (g.snap.flags & HZ_SHM_FLAG_FINAL) || seg_liveness(&g, true, false) != ALIVE;
        if (json) {
            json_header(&g, ended ? "exited" : "live");
            printf(",\"interval_s\":%.3f,\"published\":%s,\"rates\":", wall_dt,
                   dt > 0 ? "true" : "false");
            if (dt > 0) {
                bool first = true;
                printf("{");
                for (size_t i = 0; i < NFIELDS; i++) {
                    const struct field *f = &fields[i];
                    if (f->kind != K_COUNT && f->kind != K_BYTES) continue;
                    if (f->offset >= offsetof(struct hz_shm_counters, publishes)) continue;
                    if (!shown(i)) continue;
                    double r = rate(c, p, f, dt);
                    printf("%s\"%s_per_s\":%.1f", first ? "" : ",", f->name, r);
                    first = false;
                }
                printf("}");
            } else {
                printf("null"); /* nothing published in this interval */
            }
            json_counters(c);
            if (classes) json_classes(&g.snap);
            printf("}\n");
        } else {
            char tbuf[16], b1[24], head[64];
            time_t t = time(NULL);
            struct tm tm;
            localtime_r(&t, &tm);
            strftime(tbuf, sizeof tbuf, "%H:%M:%S", &tm);
            if (lines > 0 && lines % 20 == 0) print_rate_header();
            printf("%8s", tbuf);
            for (size_t i = 0; i < NFIELDS; i++) {
                const struct field *f = &fields[i];
                if (!rate_column(i)) continue;
                int w = column(i, head, sizeof head);
                double r = dt > 0 ? rate(c, p, f, dt) : 0;
                if (dt <= 0) printf(" %*s", w, "-"); /* nothing published in this interval */
                else if (f->kind == K_BYTES) printf(" %*s", w, short_bytes(r, b1, sizeof b1));
                else printf(" %*.0f", w, r);
            }
            for (size_t i = 0; i < NFIELDS; i++) {
                const struct field *f = &fields[i];
                if (!value_column(i)) continue;
                int w = column(i, head, sizeof head);
                if (f->kind == K_BYTES_GAUGE)
                    printf(" %*s", w, short_bytes((double)get(c, f), b1, sizeof b1));
                else
                    printf(" %*" PRIu64, w, get(c, f));
            }
            printf("\n");
            lines++;
        }
        if ((rc = stdout_status()) != EXIT_OK) break;
        prev = g.snap;
        prev_live = g.live;
        prev_wall = wall;
    }
    if (ended) fprintf(stderr, "%s: process %ld has exited\n", prog, pid);
    seg_close(&g);
    return rc;
}

/* --------------------------------------------------------------- list / gc */

static int pid_cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

struct named {
    uint64_t ns; /* PID namespace named by the file */
    long pid;
};

static int named_cmp(const void *a, const void *b) {
    const struct named *x = a, *y = b;
    if (x->ns != y->ns) return (x->ns > y->ns) - (x->ns < y->ns);
    return (x->pid > y->pid) - (x->pid < y->pid);
}

/* A decimal number without sign or leading zero, at most digits long. */
static bool parse_dec(const char *s, size_t len, size_t digits, uint64_t *out) {
    if (len == 0 || len > digits || *s == '0') return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

/* The segment files in /dev/shm by namespace and pid, sorted; -1 on error. */
static long list_segments(struct named **out) {
    DIR *d = opendir(HZ_SHM_DIR);
    if (d == NULL) return -1;
    struct named *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    const size_t plen = strlen(HZ_SHM_FILE_PREFIX);
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, HZ_SHM_FILE_PREFIX, plen) != 0) continue;
        const char *num = e->d_name + plen;
        const char *dot = strchr(num, '.');
        uint64_t ns = HZ_SHM_INIT_PID_NS, pid;
        if (dot != NULL && !parse_dec(num, (size_t)(dot - num), 20, &ns)) continue;
        if (dot != NULL) num = dot + 1;
        if (!parse_dec(num, strlen(num), 10, &pid) || pid > INT_MAX) continue;
        if (dot != NULL && ns == HZ_SHM_INIT_PID_NS) continue; /* not a name we make */
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            struct named *nv = realloc(v, cap * sizeof *v);
            if (nv == NULL) {
                free(v);
                closedir(d);
                return -1;
            }
            v = nv;
        }
        v[n].ns = ns;
        v[n++].pid = (long)pid;
    }
    closedir(d);
    if (n) qsort(v, n, sizeof *v, named_cmp);
    *out = v;
    return (long)n;
}

/* PIDs of our namespace's segments, sorted; -1 on error. */
static long list_pids(long **out) {
    struct named *v = NULL;
    long n = list_segments(&v);
    if (n < 0) return -1;
    long *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    long k = 0;
    if (p == NULL) {
        free(v);
        return -1;
    }
    for (long i = 0; i < n; i++)
        if (v[i].ns == own_ns) p[k++] = v[i].pid;
    free(v);
    /* Segments without a name (src/shm.c): in the maps of the processes we may read. */
    DIR *d = opendir("/proc");
    struct dirent *e;
    char prefix[64];
    if (own_ns == HZ_SHM_INIT_PID_NS) snprintf(prefix, sizeof prefix, " %s/%s", HZ_SHM_DIR, HZ_SHM_FILE_PREFIX);
    else snprintf(prefix, sizeof prefix, " %s/%s%" PRIu64 ".", HZ_SHM_DIR, HZ_SHM_FILE_PREFIX, own_ns);
    while (d != NULL && (e = readdir(d)) != NULL) {
        uint64_t pid;
        if (!parse_dec(e->d_name, strlen(e->d_name), 10, &pid)) continue;
        char path[64], line[4096], want[128];
        snprintf(path, sizeof path, "/proc/%s/maps", e->d_name);
        snprintf(want, sizeof want, "%s%s (deleted)\n", prefix, e->d_name);
        FILE *f = fopen(path, "re");
        if (f == NULL) continue;
        bool found = false;
        size_t wl = strlen(want);
        while (!found && fgets(line, sizeof line, f) != NULL) {
            size_t len = strlen(line);
            found = len >= wl && strcmp(line + len - wl, want) == 0;
        }
        fclose(f);
        if (!found) continue;
        bool dup = false;
        for (long i = 0; i < k && !dup; i++) dup = p[i] == (long)pid;
        if (dup) continue;
        long *np = realloc(p, (size_t)(k + 1) * sizeof *p);
        if (np == NULL) break;
        p = np;
        p[k++] = (long)pid;
    }
    if (d != NULL) closedir(d);
    if (k) qsort(p, (size_t)k, sizeof *p, pid_cmp);
    *out = p;
    return k;
}

/* The pid of PID in its own namespace (the last field of NSpid in /proc/PID/status),
 * and in how many namespaces it has one (*levels: 0 if unreadable, errno set). */
static long ns_pid(long pid, int *levels) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    *levels = 0;
    FILE *f = fopen(path, "re");
    if (f == NULL) return -1;
    long last = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "NSpid:", 6) != 0) continue;
        char *p = line + 6, *end;
        for (;;) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            last = v;
            ++*levels;
            p = end;
        }
        break;
    }
    fclose(f);
    if (*levels == 0) errno = EINVAL;
    return last;
}

/* Liveness of a segment of another PID namespace, for --gc, which must not remove a
 * segment unless its process is provably gone.  Processes of every namespace below
 * ours are visible here under pids of our own: find the one in namespace g->ns
 * whose pid there (the last NSpid of /proc/X/status) is g->pid.  Gone needs proof:
 * we are in the initial namespace (which sees every process) and could read the
 * namespace of every process; otherwise the answer is ALIVE. */
static enum liveness foreign_liveness(const struct seg *g, bool have_header) {
    if (own_ns != HZ_SHM_INIT_PID_NS) return ALIVE;
    DIR *d = opendir("/proc");
    if (d == NULL) return ALIVE;
    bool unsure = false, found = false;
    enum liveness lv = GONE;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        uint64_t x;
        if (!parse_dec(e->d_name, strlen(e->d_name), 10, &x)) continue;
        int levels;
        long nspid = ns_pid((long)x, &levels);
        if (levels == 1) continue; /* a process of our own namespace */
        uint64_t ns = pid_ns_of(e->d_name);
        if (ns == 0 || levels < 1) {
            if (errno != ENOENT && errno != ESRCH) unsure = true; /* not a race with exit */
            continue;
        }
        if (ns != g->ns || nspid != g->pid) continue;
        found = true;
        char state;
        uint64_t start;
        if (!proc_stat((long)x, &state, &start)) lv = ALIVE; /* cannot tell */
        else if (state == 'Z' || state == 'X') lv = ZOMBIE;
        else if (have_header && g->pre.start_time != 0 && start != g->pre.start_time) lv = REUSED;
        else lv = ALIVE;
    }
    closedir(d);
    if (!found && unsure) return ALIVE;
    return lv;
}

static int cmd_list(bool json) {
    long *pids = NULL;
    long n = list_pids(&pids);
    if (n < 0) {
        msg("cannot read %s: %s", HZ_SHM_DIR, strerror(errno));
        return EXIT_ERROR;
    }
    if (!json)
        printf("%-8s %-16s %-10s %9s %12s %12s %7s  %s\n", "PID", "COMMAND", "VARIANT",
               "UPTIME", "IN USE", "MAPPED", "THREADS", "STATE");
    for (long i = 0; i < n; i++) {
        struct seg g;
        char comm[64], variant[40] = "-", state[64], b1[32], b2[32], b3[32];
        enum seg_status st = seg_open(&g, pids[i]);
        enum liveness lv = seg_liveness(&g, st == SEG_OK || st == SEG_VERSION, true);
        bool have = false;
        if (lv != ALIVE) snprintf(state, sizeof state, "stale (%s)", liveness_text[lv]);
        else if (st == SEG_PERM) snprintf(state, sizeof state, "no access");
        else if (st == SEG_VERSION)
            snprintf(state, sizeof state, "layout v%" PRIu32 " (not v%u)", g.pre.layout_version,
                     HZ_SHM_LAYOUT_VERSION);
        else if (st == SEG_INIT) snprintf(state, sizeof state, "starting");
        else if (st != SEG_OK) snprintf(state, sizeof state, "invalid segment");
        else if (!seg_read(&g)) snprintf(state, sizeof state, "unreadable");
        else {
            have = true;
            snprintf(state, sizeof state, "%s",
                     (g.snap.flags & HZ_SHM_FLAG_FINAL) ? "exiting" : "live");
        }
        if (lv == ALIVE || lv == REUSED) proc_comm(pids[i], comm, sizeof comm);
        else snprintf(comm, sizeof comm, "-");
        if (have) field_str(variant, sizeof variant, g.snap.variant, sizeof g.snap.variant);
        if (json) {
            printf("{\"pid\":%ld,\"comm\":", pids[i]);
            json_string(stdout, comm);
            printf(",\"state\":");
            json_string(stdout, state);
            printf(",\"stale\":%s", lv != ALIVE ? "true" : "false");
            if (have) {
                printf(",\"variant\":");
                json_string(stdout, variant);
                printf(",\"uptime_s\":%.3f,\"bytes_in_use\":%" PRIu64 ",\"bytes_mapped\":%" PRIu64
                       ",\"threads_live\":%" PRIu64,
                       uptime_of(&g.snap), g.snap.counters.bytes_in_use,
                       g.snap.counters.bytes_mapped, g.snap.counters.threads_live);
            }
            printf("}\n");
        } else if (have) {
            printf("%-8ld %-16s %-10s %9s %12s %12s %7" PRIu64 "  %s\n", pids[i], text_safe(comm), variant,
                   human_duration(uptime_of(&g.snap), b1, sizeof b1),
                   human_bytes(g.snap.counters.bytes_in_use, b2, sizeof b2),
                   human_bytes(g.snap.counters.bytes_mapped, b3, sizeof b3),
                   g.snap.counters.threads_live, state);
        } else {
            printf("%-8ld %-16s %-10s %9s %12s %12s %7s  %s\n", pids[i], text_safe(comm), variant, "-", "-",
                   "-", "-", state);
        }
        seg_close(&g);
    }
    if (n == 0 && !json) printf("(no hakozuna stats segments in %s)\n", HZ_SHM_DIR);
    free(pids);
    return stdout_status();
}

static int cmd_gc(void) {
    struct named *v = NULL;
    long n = list_segments(&v);
    if (n < 0) {
        msg("cannot read %s: %s", HZ_SHM_DIR, strerror(errno));
        return EXIT_ERROR;
    }
    int rc = EXIT_OK, removed = 0;
    for (long i = 0; i < n; i++) {
        struct seg g;
        enum seg_status st = seg_open_ns(&g, v[i].pid, v[i].ns);
        bool have = st == SEG_OK || st == SEG_VERSION;
        /* Our namespace: the pid is ours to look up.  Another: only with proof. */
        enum liveness lv = v[i].ns == own_ns ? seg_liveness(&g, have, true)
                                             : foreign_liveness(&g, have);
        seg_close(&g);
        if (lv == ALIVE) continue;
        char heap_path[sizeof g.path + sizeof HZ_PROF_SUFFIX]; /* its heap profile, if any */
        snprintf(heap_path, sizeof heap_path, "%s%s", g.path, HZ_PROF_SUFFIX);
        unlink(heap_path);
        if (unlink(g.path) == 0) {
            printf("removed %s (%s)\n", g.path, liveness_text[lv]);
            removed++;
        } else if (errno != ENOENT) {
            msg("cannot remove %s (%s): %s", g.path, liveness_text[lv], strerror(errno));
            rc = (errno == EACCES || errno == EPERM) ? EXIT_PERM : EXIT_ERROR;
        }
    }
    if (removed == 0 && rc == EXIT_OK) printf("no stale segments\n");
    free(v);
    if (stdout_status() != EXIT_OK) rc = EXIT_ERROR;
    return rc;
}

/* -------------------------------------------------------------------- main */

static bool parse_long(const char *s, long min, long max, long *out) {
    if (s == NULL || *s == '\0' || strspn(s, "0123456789") != strlen(s) || strlen(s) > 10)
        return false;
    errno = 0;
    long v = strtol(s, NULL, 10);
    if (errno != 0 || v < min || v > max) return false;
    *out = v;
    return true;
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        {"interval", required_argument, NULL, 'i'},
        {"count", required_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},
        {"classes", no_argument, NULL, 'c'},
        {"threads", no_argument, NULL, 't'},
        {"fields", required_argument, NULL, 'f'},
        {"gc", no_argument, NULL, 'G'},
        {"prometheus", no_argument, NULL, 'P'},
        {"output", required_argument, NULL, 'o'},
        {"heap", no_argument, NULL, 'H'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    double interval = 0;
    long count = 0, pid = 0;
    bool json = false, classes = false, gc = false, have_interval = false, have_count = false;
    bool oneshot = false, prometheus = false, heap = false;
    const char *output = NULL;
    int c;
    signal(SIGBUS, on_bus);
    opterr = 0;
    /* GNU getopt permutes: options may also follow the PID. */
    while ((c = getopt_long(argc, argv, ":i:n:jctf:h1o:", longopts, NULL)) != -1) {
        switch (c) {
        case 'i': {
            char *end;
            errno = 0;
            interval = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !isfinite(interval) ||
                interval <= 0 || interval > 86400)
                return usage_error("-i needs a number of seconds > 0, got '%s'", optarg);
            have_interval = true;
            break;
        }
        case 'n':
            if (!parse_long(optarg, 1, 1000000000L, &count))
                return usage_error("-n needs a positive count, got '%s'", optarg);
            have_count = true;
            break;
        case 'j': json = true; break;
        case 'c': classes = true; break;
        case 't': show_threads = true; break;
        case 'f': {
            if (strspn(optarg, ",") == strlen(optarg))
                return usage_error("-f needs counter names, got '%s'", optarg);
            const char *bad = select_fields(optarg);
            if (bad != NULL) {
                usage_error("unknown field '%s' (-f takes counter names as -1 prints them, "
                            "or a prefix ending in '*')", bad);
                fprintf(stderr, "Fields:");
                for (size_t i = 0; i < NFIELDS; i++) fprintf(stderr, " %s", fields[i].name);
                fprintf(stderr, "\n");
                return EXIT_USAGE;
            }
            break;
        }
        case 'G': gc = true; break;
        case '1': oneshot = true; break;
        case 'P': prometheus = true; break;
        case 'H': heap = true; break;
        case 'o': output = optarg; break;
        case 'V':
            printf("hzstat (hakozuna) %s, stats segment layout %u, heap profile layout %u\n",
                   PACKAGE_VERSION, HZ_SHM_LAYOUT_VERSION, HZ_PROF_LAYOUT_VERSION);
            return stdout_status();
        case 'h': usage(stdout); return stdout_status();
        case ':': return usage_error("option %s needs an argument", argv[optind - 1]);
        default:
            if (optopt) return usage_error("unknown option -%c", optopt);
            return usage_error("unknown option %s", argv[optind - 1]);
        }
    }
    const char *pid_arg = NULL;
    if (optind < argc) pid_arg = argv[optind++];
    uint64_t ns = pid_ns_of("self");
    if (ns != 0) own_ns = ns;
    if (optind < argc) return usage_error("unexpected argument: %s", argv[optind]);

    if (gc) {
        if (pid_arg || have_interval || have_count || classes || json || oneshot || show_threads ||
            prometheus || output || field_filter || heap)
            return usage_error("--gc takes no other argument");
        return cmd_gc();
    }
    if (heap) {
        if (have_interval || classes || json || oneshot || prometheus || field_filter ||
            show_threads)
            return usage_error("--heap takes only -n N, -o FILE and a PID");
        if (pid_arg == NULL) return usage_error("--heap needs a PID");
        if (!parse_long(pid_arg, 1, INT_MAX, &pid))
            return usage_error("not a process id: '%s'", pid_arg);
        return cmd_heap(pid, have_count ? count : 10, output);
    }
    if (output && !prometheus) return usage_error("-o goes with --prometheus or --heap");
    if (prometheus) {
        if (have_interval || have_count || classes || json || oneshot || field_filter ||
            show_threads)
            return usage_error("--prometheus takes only -o FILE and a PID");
        if (pid_arg && !parse_long(pid_arg, 1, INT_MAX, &pid))
            return usage_error("not a process id: '%s'", pid_arg);
        return cmd_prometheus(pid_arg ? pid : 0, output);
    }
    if (oneshot && (have_interval || have_count || json))
        return usage_error("-1 does not go with -i, -n or -j");
    if (show_threads && (have_interval || have_count))
        return usage_error("-t does not go with -i or -n");
    if (pid_arg == NULL) {
        if (have_interval || have_count || classes || oneshot || field_filter || show_threads)
            return usage_error("-i, -n, -c, -t, -f and -1 need a PID");
        return cmd_list(json);
    }
    if (!parse_long(pid_arg, 1, INT_MAX, &pid))
        return usage_error("not a process id: '%s'", pid_arg);
    if (have_count && !have_interval) interval = 1, have_interval = true;
    if (oneshot) return cmd_oneshot(pid, classes);
    if (have_interval) return cmd_interval(pid, interval, count, json, classes);
    return cmd_snapshot(pid, json, classes);
}
