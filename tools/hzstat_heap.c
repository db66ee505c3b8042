/* hzstat_heap.c - hzstat --heap: the sampled live heap of a running process.
 *
 * Reads the profile segment (include/hakozuna_prof.h) of a process started with
 * HAKOZUNA_STATS=1 HAKOZUNA_PROFILE=1, merges its traces by call stack, scales each
 * up by the sampling rate, and prints the top allocation sites by estimated live
 * bytes with their frames symbolised here: /proc/PID/maps gives each address's file
 * and offset, and the nearest function symbol of that file's .symtab or .dynsym
 * names it (no external program).  With -o FILE it writes the gperftools legacy
 * heap-profile text format instead, which pprof reads (it scales the samples itself:
 * "heap_v2/RATE").
 */
#define _GNU_SOURCE 1

#include "hzstat_heap.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hakozuna_prof.h"

enum { HEAP_OK = 0, HEAP_ERROR = 1, HEAP_VERSION = 6 }; /* hzstat's exit statuses */

static int fail(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "hzstat: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return HEAP_ERROR;
}

/* ------------------------------------------------------------ symbols */

struct sym {
    uint64_t addr, size;
    const char *name;
};

struct elf_file {
    char path[PATH_MAX];
    const unsigned char *map; /* the whole file, or NULL when unreadable */
    size_t size;
    const Elf64_Phdr *phdr;
    unsigned phnum;
    struct sym *syms; /* function symbols sorted by address */
    size_t nsyms;
};

struct mapping {
    uint64_t lo, hi, off;
    char path[PATH_MAX]; /* "" for anonymous memory */
    struct elf_file *elf;
};

struct proc_maps {
    long pid;
    struct mapping *v;
    size_t n;
    struct elf_file **files;
    size_t nfiles;
};

static int sym_cmp(const void *a, const void *b) {
    const struct sym *x = a, *y = b;
    return (x->addr > y->addr) - (x->addr < y->addr);
}

/* Whether n entries of `size` bytes at off lie within f.  The file belongs to the
 * process under study, which may have crafted it: no sum may wrap. */
static bool in_file(const struct elf_file *f, uint64_t off, uint64_t n, uint64_t size) {
    return off <= f->size && n <= (f->size - off) / size && (size == 1 || off % 8 == 0);
}

/* The function symbols of one symbol table section. */
static void add_symbols(struct elf_file *f, const Elf64_Shdr *sh, const Elf64_Shdr *shdrs,
                        unsigned shnum) {
    if (sh->sh_link >= shnum || sh->sh_entsize != sizeof(Elf64_Sym)) return;
    const Elf64_Shdr *strs = &shdrs[sh->sh_link];
    if (!in_file(f, sh->sh_offset, sh->sh_size, 1) || !in_file(f, strs->sh_offset, strs->sh_size, 1))
        return;
    const char *names = (const char *)f->map + strs->sh_offset;
    const Elf64_Sym *s = (const Elf64_Sym *)(f->map + sh->sh_offset);
    size_t n = sh->sh_size / sizeof *s;
    struct sym *v = realloc(f->syms, (f->nsyms + n) * sizeof *v);
    if (v == NULL) return;
    f->syms = v;
    for (size_t i = 0; i < n; i++) {
        if (ELF64_ST_TYPE(s[i].st_info) != STT_FUNC || s[i].st_shndx == SHN_UNDEF ||
            s[i].st_value == 0 || s[i].st_name >= strs->sh_size ||
            memchr(names + s[i].st_name, '\0', strs->sh_size - s[i].st_name) == NULL)
            continue;
        v[f->nsyms++] = (struct sym){s[i].st_value, s[i].st_size, names + s[i].st_name};
    }
}

/* A descriptor of the regular file behind mapping m, or -1.  The process chose what
 * it maps and what its maps line names (a FIFO or a device with a mapped file's
 * name would block or act on open): /proc/PID/map_files gives the very file mapped
 * (as root: it takes CAP_SYS_ADMIN), else the name, if it still names one; only a
 * regular file is opened, and without blocking. */
static int open_mapped(const struct proc_maps *pm, const struct mapping *m) {
    char mapped[96];
    snprintf(mapped, sizeof mapped, "/proc/%ld/map_files/%" PRIx64 "-%" PRIx64, pm->pid, m->lo,
             m->hi);
    static const char deleted[] = " (deleted)";
    size_t len = strlen(m->path);
    bool renamed =
        len >= sizeof deleted - 1 && strcmp(m->path + len - (sizeof deleted - 1), deleted) == 0;
    const char *try[2] = {mapped, renamed ? NULL : m->path};
    for (int i = 0; i < 2 && try[i] != NULL; i++) {
        struct stat st;
        if (stat(try[i], &st) != 0) continue;
        if (!S_ISREG(st.st_mode)) return -1;
        int fd = open(try[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd >= 0) return fd;
    }
    return -1;
}

static struct elf_file *elf_open(struct proc_maps *pm, const struct mapping *m) {
    const char *path = m->path;
    for (size_t i = 0; i < pm->nfiles; i++)
        if (strcmp(pm->files[i]->path, path) == 0) return pm->files[i];
    struct elf_file **nf = realloc(pm->files, (pm->nfiles + 1) * sizeof *nf);
    struct elf_file *f = calloc(1, sizeof *f);
    if (nf == NULL || f == NULL) {
        free(f);
        if (nf != NULL) pm->files = nf;
        return NULL;
    }
    pm->files = nf;
    pm->files[pm->nfiles++] = f;
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd = open_mapped(pm, m);
    struct stat st;
    if (fd < 0) return f;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size >= sizeof(Elf64_Ehdr)) {
        void *whole = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (whole != MAP_FAILED) {
            f->map = whole;
            f->size = (size_t)st.st_size;
        }
    }
    close(fd);
    if (f->map == NULL) return f;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f->map;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64) return f;
    if (in_file(f, eh->e_phoff, eh->e_phnum, sizeof(Elf64_Phdr))) {
        f->phdr = (const Elf64_Phdr *)(f->map + eh->e_phoff);
        f->phnum = eh->e_phnum;
    }
    if (eh->e_shoff == 0 || !in_file(f, eh->e_shoff, eh->e_shnum, sizeof(Elf64_Shdr))) return f;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(f->map + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_type == SHT_SYMTAB || sh[i].sh_type == SHT_DYNSYM)
            add_symbols(f, &sh[i], sh, eh->e_shnum);
    if (f->nsyms) qsort(f->syms, f->nsyms, sizeof *f->syms, sym_cmp);
    return f;
}

static bool load_maps(struct proc_maps *pm, long pid) {
    pm->pid = pid;
    char path[64], line[PATH_MAX + 256];
    snprintf(path, sizeof path, "/proc/%ld/maps", pid);
    FILE *in = fopen(path, "re");
    if (in == NULL) return false;
    while (fgets(line, sizeof line, in) != NULL) {
        struct mapping m = {0};
        int name_at = 0;
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %" SCNx64 " %*s %*s %n", &m.lo, &m.hi, &m.off,
                   &name_at) < 3)
            continue;
        if (name_at > 0 && line[name_at] == '/') {
            snprintf(m.path, sizeof m.path, "%s", line + name_at);
            m.path[strcspn(m.path, "\n")] = '\0';
        }
        struct mapping *v = realloc(pm->v, (pm->n + 1) * sizeof *v);
        if (v == NULL) break;
        pm->v = v;
        pm->v[pm->n++] = m;
    }
    fclose(in);
    return true;
}

static void free_maps(struct proc_maps *pm) {
    for (size_t i = 0; i < pm->nfiles; i++) {
        if (pm->files[i]->map != NULL) munmap((void *)pm->files[i]->map, pm->files[i]->size);
        free(pm->files[i]->syms);
        free(pm->files[i]);
    }
    free(pm->files);
    free(pm->v);
}

static struct mapping *mapping_of(struct proc_maps *pm, uint64_t a) {
    for (size_t i = 0; i < pm->n; i++)
        if (a >= pm->v[i].lo && a < pm->v[i].hi) return &pm->v[i];
    return NULL;
}

/* "name+0xoff" of the function holding a (a return address: a - 1 is looked up),
 * into buf; false when no symbol covers it. */
static bool symbolise(struct proc_maps *pm, uint64_t a, char *buf, size_t cap) {
    struct mapping *m = mapping_of(pm, a);
    if (m == NULL || m->path[0] == '\0') return false;
    if (m->elf == NULL) m->elf = elf_open(pm, m);
    struct elf_file *f = m->elf;
    if (f == NULL || f->nsyms == 0) return false;
    uint64_t off = a - 1 - m->lo + m->off, vaddr = 0;
    bool found = false;
    for (unsigned i = 0; i < f->phnum && !found; i++) {
        const Elf64_Phdr *p = &f->phdr[i];
        if (p->p_type == PT_LOAD && off >= p->p_offset && off < p->p_offset + p->p_filesz) {
            vaddr = off - p->p_offset + p->p_vaddr;
            found = true;
        }
    }
    if (!found) return false;
    size_t lo = 0, hi = f->nsyms; /* the last symbol at or below vaddr */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (f->syms[mid].addr <= vaddr) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return false;
    const struct sym *s = &f->syms[lo - 1];
    if (s->size != 0 && vaddr >= s->addr + s->size) return false;
    snprintf(buf, cap, "%s+0x%" PRIx64, s->name, vaddr + 1 - s->addr);
    return true;
}

/* Frames inside hakozuna itself (the allocator's entry points) are not the site. */
static bool in_allocator(struct proc_maps *pm, uint64_t a) {
    struct mapping *m = mapping_of(pm, a);
    if (m == NULL) return false;
    const char *base = strrchr(m->path, '/');
    return base != NULL && strncmp(base + 1, "libhakozuna", 11) == 0;
}

/* ------------------------------------------------------------ sites */

struct site {
    uint64_t live_count, live_bytes, alloc_count, alloc_bytes;
    double est_bytes, est_count;
    unsigned depth;
    uint64_t frames[HZ_PROF_MAX_FRAMES];
};

static int site_cmp(const void *a, const void *b) {
    const struct site *x = a, *y = b;
    return (x->est_bytes < y->est_bytes) - (x->est_bytes > y->est_bytes);
}

/* pprof's scaling of a heap_v2 sample: each sampled block of average size avg stands
 * for 1 / (1 - exp(-avg / rate)) blocks. */
static double scale_of(uint64_t count, uint64_t bytes, uint64_t rate) {
    if (count == 0 || rate == 0) return 1.0;
    double avg = (double)bytes / (double)count;
    double p = 1.0 - exp(-avg / (double)rate);
    return p > 0 ? 1.0 / p : 1.0;
}

/* The traces of the table, merged by their frames past the allocator's. */
static size_t collect_sites(const struct hz_prof_segment *h, struct proc_maps *pm,
                            struct site **out) {
    struct site *v = calloc(h->trace_capacity ? h->trace_capacity : 1, sizeof *v);
    size_t n = 0;
    if (v == NULL) return 0;
    const char *base = (const char *)h + h->header_size;
    for (uint32_t i = 0; i < h->trace_capacity; i++) {
        const struct hz_prof_trace *t =
            (const struct hz_prof_trace *)(base + (size_t)i * h->trace_size);
        if (__atomic_load_n(&t->hash, __ATOMIC_ACQUIRE) < 2) continue;
        struct site s = {0};
        unsigned d = t->depth < HZ_PROF_MAX_FRAMES ? t->depth : HZ_PROF_MAX_FRAMES, k = 0;
        while (k + 1 < d && in_allocator(pm, t->frames[k])) k++;
        for (; k < d; k++) s.frames[s.depth++] = t->frames[k];
        uint64_t freed_count = 0, freed_bytes = 0;
        for (int w = 0; w < 2; w++) { /* the writer's counts and the other threads' */
            const struct hz_prof_counts *c = &t->counts[w];
            freed_count += __atomic_load_n(&c->freed_count, __ATOMIC_RELAXED);
            freed_bytes += __atomic_load_n(&c->freed_bytes, __ATOMIC_RELAXED);
            s.alloc_count += __atomic_load_n(&c->alloc_count, __ATOMIC_RELAXED);
            s.alloc_bytes += __atomic_load_n(&c->alloc_bytes, __ATOMIC_RELAXED);
        }
        /* A free may be seen before its allocation: no live count below 0. */
        s.live_count = s.alloc_count > freed_count ? s.alloc_count - freed_count : 0;
        s.live_bytes = s.alloc_bytes > freed_bytes ? s.alloc_bytes - freed_bytes : 0;
        size_t j = 0;
        while (j < n && (v[j].depth != s.depth ||
                         memcmp(v[j].frames, s.frames, s.depth * sizeof s.frames[0]) != 0))
            j++;
        if (j == n) {
            v[n++] = s;
            continue;
        }
        v[j].live_count += s.live_count;
        v[j].live_bytes += s.live_bytes;
        v[j].alloc_count += s.alloc_count;
        v[j].alloc_bytes += s.alloc_bytes;
    }
    for (size_t j = 0; j < n; j++) {
        double k = scale_of(v[j].live_count, v[j].live_bytes, h->sample_rate);
        v[j].est_bytes = (double)v[j].live_bytes * k;
        v[j].est_count = (double)v[j].live_count * k;
    }
    if (n) qsort(v, n, sizeof *v, site_cmp);
    *out = v;
    return n;
}

static const char *bytes_text(double v, char *buf, size_t cap) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0) snprintf(buf, cap, "%.0f B", v);
    else snprintf(buf, cap, "%.1f %s", v, unit[u]);
    return buf;
}

static void print_sites(const struct hz_prof_segment *h, struct proc_maps *pm, long pid,
                        const struct site *v, size_t n, long top) {
    double total = 0, blocks = 0;
    uint64_t live = 0, taken = h->samples_lost;
    for (size_t j = 0; j < n; j++) total += v[j].est_bytes, blocks += v[j].est_count,
                                       live += v[j].live_count, taken += v[j].alloc_count;
    char b1[32], b2[32];
    printf("heap profile of process %ld: one sample per %s allocated on average\n", pid,
           bytes_text((double)h->sample_rate, b1, sizeof b1));
    printf("samples: %" PRIu64 " live, %" PRIu64 " taken, %" PRIu64
           " not recorded\n",
           live, taken, h->samples_lost);
    printf("estimated live: %s in %.0f blocks\n", bytes_text(total, b2, sizeof b2), blocks);
    long shown = 0;
    for (size_t j = 0; j < n && shown < top; j++) {
        if (v[j].live_count == 0) continue;
        shown++;
        printf("\n%2ld: %s (%.1f%%) in ~%.0f blocks, %" PRIu64 " samples\n", shown,
               bytes_text(v[j].est_bytes, b1, sizeof b1),
               total > 0 ? 100.0 * v[j].est_bytes / total : 0.0, v[j].est_count, v[j].live_count);
        for (unsigned k = 0; k < v[j].depth; k++) {
            char name[512];
            struct mapping *m = mapping_of(pm, v[j].frames[k]);
            if (!symbolise(pm, v[j].frames[k], name, sizeof name)) snprintf(name, sizeof name, "?");
            printf("    #%-2u 0x%016" PRIx64 " %s (%s)\n", k, v[j].frames[k], name,
                   m != NULL && m->path[0] ? m->path : "?");
        }
    }
    if (shown == 0) printf("\n(no sampled block is live)\n");
}

/* gperftools' legacy heap profile, which pprof reads. */
static bool write_pprof(FILE *out, const struct hz_prof_segment *h, const struct site *v,
                        size_t n, long pid) {
    uint64_t lc = 0, lb = 0, ac = 0, ab = 0;
    for (size_t j = 0; j < n; j++)
        lc += v[j].live_count, lb += v[j].live_bytes, ac += v[j].alloc_count, ab += v[j].alloc_bytes;
    fprintf(out, "heap profile: %" PRIu64 ": %" PRIu64 " [%" PRIu64 ": %" PRIu64 "] @ heap_v2/%" PRIu64
                 "\n",
            lc, lb, ac, ab, h->sample_rate);
    for (size_t j = 0; j < n; j++) {
        fprintf(out, "%" PRIu64 ": %" PRIu64 " [%" PRIu64 ": %" PRIu64 "] @", v[j].live_count,
                v[j].live_bytes, v[j].alloc_count, v[j].alloc_bytes);
        for (unsigned k = 0; k < v[j].depth; k++) fprintf(out, " 0x%" PRIx64, v[j].frames[k]);
        fputc('\n', out);
    }
    fprintf(out, "\nMAPPED_LIBRARIES:\n");
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%ld/maps", pid);
    FILE *in = fopen(path, "re");
    if (in == NULL) return false;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, got, out);
    fclose(in);
    return true;
}

int hzstat_heap(int fd, const char *path, long pid, long top, const char *output) {
    struct stat st;
    if (fstat(fd, &st) != 0) return fail("%s: %s", path, strerror(errno));
    if ((size_t)st.st_size < sizeof(struct hz_prof_segment))
        return fail("%s: %s", path, "too small for a heap profile");
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return fail("%s: %s", path, strerror(errno));
    const struct hz_prof_segment *h = m;
    int rc = HEAP_OK;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != HZ_PROF_MAGIC) {
        rc = fail("%s: %s", path, "not a hakozuna heap profile (or not ready yet)");
    } else if (h->layout_version != HZ_PROF_LAYOUT_VERSION ||
               h->header_size != sizeof(struct hz_prof_segment) ||
               h->trace_size != sizeof(struct hz_prof_trace)) {
        fprintf(stderr, "hzstat: %s: heap profile layout %u, this hzstat reads %u\n", path,
                h->layout_version, HZ_PROF_LAYOUT_VERSION);
        rc = HEAP_VERSION;
    } else if ((uint64_t)h->header_size + (uint64_t)h->trace_capacity * h->trace_size >
               (uint64_t)st.st_size) {
        rc = fail("%s: %s", path, "damaged heap profile (traces past its end)");
    }
    if (rc != HEAP_OK) {
        munmap(m, (size_t)st.st_size);
        return rc;
    }
    struct proc_maps pm = {0};
    if (!load_maps(&pm, pid)) {
        munmap(m, (size_t)st.st_size);
        char p[32];
        snprintf(p, sizeof p, "/proc/%ld/maps", pid);
        return fail("%s: %s", p, strerror(errno));
    }
    struct site *v = NULL;
    size_t n = collect_sites(h, &pm, &v);
    if (output == NULL) {
        print_sites(h, &pm, pid, v, n, top);
        if (fflush(stdout) != 0) rc = HEAP_ERROR;
    } else {
        bool to_stdout = strcmp(output, "-") == 0;
        FILE *out = to_stdout ? stdout : fopen(output, "we");
        if (out == NULL) {
            rc = fail("%s: %s", output, strerror(errno));
        } else {
            if (!write_pprof(out, h, v, n, pid)) rc = fail("%s: %s", "maps", strerror(errno));
            if ((to_stdout ? fflush(out) : fclose(out)) != 0)
                rc = fail("%s: %s", output, strerror(errno));
        }
    }
    free(v);
    free_maps(&pm);
    munmap(m, (size_t)st.st_size);
    return rc;
}
