/* test_malloc_info.c - glibc's introspection calls answer about hakozuna:
 * malloc_stats prints hakozuna's figures to stderr, malloc_info writes glibc's XML
 * shape with hakozuna's size classes, and mallopt accepts glibc's parameters.
 *
 * 10 MiB allocated in 1 KiB blocks must show in both reports: under glibc's own
 * implementation they would describe glibc's (empty) arena instead.
 */
#include "hz_test.h"

#include <malloc.h>

#define BLOCK 1024
#define NBLOCKS (10 * 1024 * 1024 / BLOCK)

/* The malloc_info report, in a buffer of its own. */
static char *info_report(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    CHECK(fp != NULL, "open_memstream: %s", strerror(errno));
    int rc = malloc_info(0, fp);
    CHECK(rc == 0, "malloc_info(0, fp) returned %d", rc);
    CHECK(fclose(fp) == 0, "fclose");
    CHECK(text != NULL && len > 0, "malloc_info wrote nothing");
    return text;
}

/* The number after `key="` in the first line of text containing `line_has`. */
static uint64_t xml_number(const char *text, const char *line_has, const char *key) {
    const char *line = strstr(text, line_has);
    CHECK(line != NULL, "malloc_info: no line with %s in\n%s", line_has, text);
    const char *eol = strchr(line, '\n');
    char pat[64];
    snprintf(pat, sizeof pat, " %s=\"", key);
    /* back to the start of the line, then the attribute */
    while (line > text && line[-1] != '\n') line--;
    const char *at = strstr(line, pat);
    CHECK(at != NULL && (eol == NULL || at < eol), "malloc_info: no %s in the %s line", key,
          line_has);
    return strtoull(at + strlen(pat), NULL, 10);
}

/* Blocks and bytes over all <size> lines; *fullest: the class line with most blocks. */
typedef struct { uint64_t blocks, bytes, fullest_count, fullest_to; } sizes_t;
static sizes_t sizes_of(const char *text) {
    sizes_t s = {0, 0, 0, 0};
    const char *start = strstr(text, "<sizes>"), *end = strstr(text, "</sizes>");
    CHECK(start != NULL && end != NULL, "malloc_info: no <sizes>");
    for (const char *p = strstr(start, "<size "); p != NULL && p < end; p = strstr(p + 1, "<size ")) {
        unsigned long long from, to, total, cnt;
        CHECK(sscanf(p, "<size from=\"%llu\" to=\"%llu\" total=\"%llu\" count=\"%llu\"/>", &from,
                     &to, &total, &cnt) == 4, "malloc_info: bad <size> line: %.80s", p);
        CHECK(from <= to && total == cnt * to, "malloc_info: <size> line %.80s", p);
        s.blocks += cnt;
        s.bytes += total;
        if (cnt > s.fullest_count) s.fullest_count = cnt, s.fullest_to = to;
    }
    return s;
}

static size_t count(const char *text, const char *what) {
    size_t n = 0;
    for (const char *p = strstr(text, what); p != NULL; p = strstr(p + 1, what)) n++;
    return n;
}

static void check_info_shape(const char *text) {
    static const char head[] = "<malloc version=\"1\">\n";
    static const char tail[] = "</malloc>\n";
    size_t len = strlen(text);
    CHECK(strncmp(text, head, sizeof head - 1) == 0, "malloc_info does not start with %s:\n%s",
          head, text);
    CHECK(len > sizeof tail && strcmp(text + len - (sizeof tail - 1), tail) == 0,
          "malloc_info does not end with </malloc>:\n%s", text);
    CHECK(count(text, "<heap ") == count(text, "</heap>") && count(text, "<heap ") >= 1,
          "malloc_info: <heap> elements unbalanced");
    CHECK(count(text, "<sizes>") == count(text, "</sizes>"), "malloc_info: <sizes> unbalanced");
    CHECK(count(text, "<") == count(text, ">"), "malloc_info: unbalanced angle brackets");
    CHECK(strstr(text, "<system type=\"current\" size=\"") != NULL,
          "malloc_info: no <system type=\"current\">");
    CHECK(strstr(text, "<total type=\"mmap\" count=\"") != NULL,
          "malloc_info: no <total type=\"mmap\">");
}

/* malloc_stats' output, from stderr sent to a file for the call. */
static char *stats_report(void) {
    char path[] = "/tmp/hz_malloc_stats_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
    unlink(path);
    int saved = dup(2);
    CHECK(saved >= 0, "dup");
    fflush(stderr);
    CHECK(dup2(fd, 2) == 2, "dup2");
    malloc_stats();
    fflush(stderr);
    CHECK(dup2(saved, 2) == 2, "dup2 back");
    close(saved);
    static char buf[8192];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    CHECK(n > 0, "malloc_stats printed nothing");
    buf[n] = '\0';
    return buf;
}

/* The figure of `name = N` in the section after `section` of malloc_stats. */
static uint64_t stats_number(const char *text, const char *section, const char *name) {
    const char *s = strstr(text, section);
    CHECK(s != NULL, "malloc_stats: no \"%s\" in\n%s", section, text);
    const char *at = strstr(s, name);
    CHECK(at != NULL, "malloc_stats: no \"%s\" after \"%s\" in\n%s", name, section, text);
    const char *eq = strchr(at, '=');
    CHECK(eq != NULL, "malloc_stats: no '=' after %s", name);
    return strtoull(eq + 1, NULL, 10);
}

static void check_mallopt(void) {
    static const struct { int param, value, result; } cases[] = {
        {M_MXFAST, 64, 1},         {M_MXFAST, 0, 1},          {M_MXFAST, 100000, 0},
        {M_TRIM_THRESHOLD, 0, 1},  {M_TOP_PAD, 4096, 1},      {M_MMAP_THRESHOLD, 65536, 1},
        {M_MMAP_MAX, 0, 1},        {M_ARENA_MAX, 1, 1},       {M_ARENA_TEST, 2, 1},
        {M_PERTURB, 0xa5, 1},      {M_CHECK_ACTION, 3, 1},    {12345, 1, 0},
        {-100, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = mallopt(cases[i].param, cases[i].value);
        CHECK(r == cases[i].result, "mallopt(%d, %d) returned %d, not %d", cases[i].param,
              cases[i].value, r, cases[i].result);
    }
    /* Accepted and ignored: M_PERTURB does not fill blocks. */
    CHECK(mallopt(M_PERTURB, 0) == 1, "mallopt(M_PERTURB, 0)");
}

int main(void) {
    hz_test_require_loaded();

    char *before = info_report();
    check_info_shape(before);
    sizes_t sz_before = sizes_of(before);
    uint64_t sys_before = xml_number(before, "<system type=\"current\"", "size");
    free(before);

    void **blocks = malloc(NBLOCKS * sizeof *blocks);
    CHECK(blocks != NULL, "malloc");
    for (size_t i = 0; i < NBLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        CHECK(blocks[i] != NULL, "malloc(%d)", BLOCK);
        memset(blocks[i], 1, BLOCK);
    }

    char *after = info_report();
    check_info_shape(after);
    sizes_t sz = sizes_of(after);
    uint64_t sys_after = xml_number(after, "<system type=\"current\"", "size");
    /* The checked variant adds a header: its blocks land in a bigger class. */
    CHECK(sz.blocks >= sz_before.blocks + NBLOCKS && sz.bytes >= sz_before.bytes + NBLOCKS * BLOCK,
          "malloc_info: blocks in use %llu -> %llu after %d more", (unsigned long long)sz_before.blocks,
          (unsigned long long)sz.blocks, NBLOCKS);
    CHECK(sz.fullest_count >= NBLOCKS && sz.fullest_to >= BLOCK && sz.fullest_to < 2 * BLOCK,
          "malloc_info: no class of 1 KiB blocks with %d blocks:\n%s", NBLOCKS, after);
    CHECK(sys_after > sys_before && sys_after >= sz.bytes,
          "malloc_info: system bytes %llu -> %llu", (unsigned long long)sys_before,
          (unsigned long long)sys_after);
    free(after);

    /* Only options 0 exists; anything else fails and writes nothing. */
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    CHECK(fp != NULL, "open_memstream");
    errno = 0;
    int rc = malloc_info(1, fp);
    CHECK(rc == -1 && errno == EINVAL, "malloc_info(1, fp): %d, errno %d", rc, errno);
    fclose(fp);
    CHECK(len == 0, "malloc_info(1, fp) wrote %zu bytes", len);
    free(text);

    char *stats = stats_report();
    CHECK(strstr(stats, "hakozuna") != NULL, "malloc_stats does not describe hakozuna:\n%s",
          stats);
    uint64_t sys = stats_number(stats, "Total (incl. mmap):", "system bytes");
    uint64_t in_use = stats_number(stats, "Total (incl. mmap):", "in use bytes");
    CHECK(in_use >= (uint64_t)NBLOCKS * BLOCK && sys >= in_use,
          "malloc_stats: system bytes %llu, in use bytes %llu after 10 MiB:\n%s",
          (unsigned long long)sys, (unsigned long long)in_use, stats);
    stats_number(stats, "Total (incl. mmap):", "mallocs");

    for (size_t i = 0; i < NBLOCKS; i++) free(blocks[i]);
    free(blocks);
    stats = stats_report();
    uint64_t in_use_freed = stats_number(stats, "Total (incl. mmap):", "in use bytes");
    /* The checked variant's quarantine holds on to the last blocks freed. */
    uint64_t held = hz_test_quarantine_variant() ? (uint64_t)NBLOCKS * BLOCK / 2 : 0;
    CHECK(in_use_freed + (uint64_t)NBLOCKS * BLOCK <= in_use + held,
          "malloc_stats: in use bytes %llu -> %llu after freeing 10 MiB",
          (unsigned long long)in_use, (unsigned long long)in_use_freed);

    check_mallopt();
    printf("malloc_info, malloc_stats and mallopt answer for hakozuna\n");
    return 0;
}
