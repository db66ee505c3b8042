/* line.c - a line of text formatted without stdio or malloc: the checked variant's
 * error reports, malloc_stats and malloc_info build their output with these. */
#include "internal.h"

/* Room for one more character, and for the '\n' and NUL hz_line_end adds. */
HZ_INLINE bool has_room(const hz_line_t *l) { return l->n < sizeof l->buf - 2; }

void hz_line_str(hz_line_t *l, const char *s) {
    while (*s && has_room(l)) l->buf[l->n++] = *s++;
}

void hz_line_u64_width(hz_line_t *l, uint64_t v, unsigned width) {
    char tmp[24];
    unsigned i = 0;
    do {
        tmp[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (unsigned pad = i; pad < width && has_room(l); pad++) l->buf[l->n++] = ' ';
    while (i > 0 && has_room(l)) l->buf[l->n++] = tmp[--i];
}

void hz_line_u64(hz_line_t *l, uint64_t v) { hz_line_u64_width(l, v, 0); }

void hz_line_hex(hz_line_t *l, uintptr_t v) {
    char tmp[20];
    int i = 0;
    do {
        tmp[i++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    hz_line_str(l, "0x");
    while (i > 0 && has_room(l)) l->buf[l->n++] = tmp[--i];
}

const char *hz_line_end(hz_line_t *l) {
    l->buf[l->n++] = '\n';
    l->buf[l->n] = '\0';
    return l->buf;
}
