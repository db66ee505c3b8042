/* fake_segment.c - a process that publishes a stats segment it damaged itself, for
 * test_hzstat.sh: hzstat reads what the process under study wrote, and must come
 * through a broken or hostile one with a message, never a crash or a hang.
 *
 *   fake_segment SEGMENT MODE [FILE]
 *
 * copies SEGMENT (the stats segment of a live process) as its own and damages it:
 *   threads-offset  its thread slots said to start far past the end of the object
 *   short-file      the file shorter than the header's total_size
 *   shrink          whole; a line "shrink" on stdin truncates it to nothing
 *   unlist          whole; a line "unlist" makes its heaps look unlisted, and
 *                   publishes counts of mallocs and frees below the live ones
 *   elf FILE        whole; maps FILE (an ELF file the caller damaged) and publishes
 *                   a heap profile whose one trace has its frames inside FILE
 *   fifo FILE       as elf, then removes FILE and makes a FIFO named "FILE (deleted)",
 *                   the name the process's maps now show for the mapping
 * It prints its pid, then answers each line on stdin with "ok", and removes its
 * files when stdin closes.
 */
#define _GNU_SOURCE 1

#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hakozuna_prof.h"
#include "hakozuna_shm.h"

static void die(const char *what) {
    perror(what);
    exit(2);
}

static uint64_t own_start_time(void) {
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (f == NULL || fgets(buf, sizeof buf, f) == NULL) die("/proc/self/stat");
    fclose(f);
    const char *p = strrchr(buf, ')');
    unsigned long long v = 0;
    if (p == NULL || sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                                   "%*s %*s %*s %*s %*s %llu", &v) != 1)
        die("start time");
    return v;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fake_segment SEGMENT MODE [FILE]\n");
        return 2;
    }
    const char *mode = argv[2], *file = argc > 3 ? argv[3] : NULL;
    bool elf = strcmp(mode, "elf") == 0 || strcmp(mode, "fifo") == 0;
    if (elf && file == NULL) {
        fprintf(stderr, "fake_segment: %s needs a FILE\n", mode);
        return 2;
    }

    int in = open(argv[1], O_RDONLY);
    struct stat st;
    if (in < 0 || fstat(in, &st) != 0) die(argv[1]);
    size_t size = (size_t)st.st_size;
    if (size < sizeof(struct hz_shm_segment)) die("segment too small");
    char *copy = malloc(size);
    if (copy == NULL || pread(in, copy, size, 0) != (ssize_t)size) die("read");
    close(in);

    struct hz_shm_segment *s = (struct hz_shm_segment *)copy;
    struct stat ns;
    if (stat("/proc/self/ns/pid", &ns) != 0) die("/proc/self/ns/pid");
    s->pid = (uint64_t)getpid();
    s->start_time = own_start_time();
    s->pid_ns = ns.st_ino;
    if (strcmp(mode, "threads-offset") == 0) s->threads_offset = UINT64_C(0x7fff0000);
    size_t written = size;
    if (strcmp(mode, "short-file") == 0) written = sizeof *s + 1000;

    char path[256];
    if (s->pid_ns == HZ_SHM_INIT_PID_NS)
        snprintf(path, sizeof path, "%s/%s%d", HZ_SHM_DIR, HZ_SHM_FILE_PREFIX, (int)getpid());
    else
        snprintf(path, sizeof path, "%s/%s%" PRIu64 ".%d", HZ_SHM_DIR, HZ_SHM_FILE_PREFIX,
                 (uint64_t)ns.st_ino, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || pwrite(fd, copy, written, 0) != (ssize_t)written) die(path);
    struct hz_shm_segment *m = mmap(NULL, written, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) die("mmap");

    char heap[sizeof path + sizeof HZ_PROF_SUFFIX], fifo[4096 + 16];
    heap[0] = fifo[0] = '\0';
    if (elf) {
        int ef = open(file, O_RDONLY);
        struct stat es;
        if (ef < 0 || fstat(ef, &es) != 0) die(file);
        char *base = mmap(NULL, (size_t)es.st_size, PROT_READ, MAP_PRIVATE, ef, 0);
        if (base == MAP_FAILED) die("mmap FILE");
        close(ef);
        size_t hsize = sizeof(struct hz_prof_segment) + sizeof(struct hz_prof_trace);
        struct hz_prof_segment *h = calloc(1, hsize);
        if (h == NULL) die("calloc");
        struct hz_prof_trace *t = (struct hz_prof_trace *)(h + 1);
        h->magic = HZ_PROF_MAGIC;
        h->layout_version = HZ_PROF_LAYOUT_VERSION;
        h->header_size = sizeof *h;
        h->total_size = hsize;
        h->pid = (uint64_t)getpid();
        h->sample_rate = 524288;
        h->trace_capacity = 1;
        h->trace_size = sizeof *t;
        t->hash = 12345;
        t->depth = 2;
        t->writer = 1;
        t->counts[0].alloc_count = 3;
        t->counts[0].alloc_bytes = 3000;
        t->frames[0] = (uint64_t)(uintptr_t)(base + 0x1010);
        t->frames[1] = (uint64_t)(uintptr_t)(base + 0x1020);
        snprintf(heap, sizeof heap, "%s%s", path, HZ_PROF_SUFFIX);
        int hf = open(heap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (hf < 0 || write(hf, h, hsize) != (ssize_t)hsize) die(heap);
        close(hf);
        if (strcmp(mode, "fifo") == 0) {
            snprintf(fifo, sizeof fifo, "%s (deleted)", file);
            if (unlink(file) != 0 || mkfifo(fifo, 0600) != 0) die("fifo");
        }
    }

    printf("%d\n", (int)getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin) != NULL) {
        if (strncmp(line, "shrink", 6) == 0 && ftruncate(fd, 0) != 0) die("ftruncate");
        if (strncmp(line, "unlist", 6) == 0) {
            m->live.heaps_unlisted = 1;
            m->counters.mallocs = m->counters.frees = 0;
            m->counters.last_publish_mono_ns += 1000000000u;
        }
        printf("ok\n");
        fflush(stdout);
    }
    unlink(path);
    if (heap[0] != '\0') unlink(heap);
    if (fifo[0] != '\0') unlink(fifo);
    return 0;
}
