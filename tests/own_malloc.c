/* own_malloc.c - a program with an allocator of its own, as programs that
 * statically link jemalloc, tcmalloc or mimalloc have: it defines malloc, free,
 * calloc and realloc (a bump allocator over a static arena) and exports them
 * with -rdynamic, and exports the same allocator under the name a statically
 * linked mimalloc has (mi_malloc).  The C library's own calls then bind to
 * this malloc, whatever is preloaded: `hzrun --check` must say so.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static _Alignas(16) unsigned char arena[1 << 20];
static size_t arena_used;

void *mi_malloc(size_t size);
void *malloc(size_t size);
void free(void *p);
void *calloc(size_t n, size_t size);
void *realloc(void *p, size_t size);

void *mi_malloc(size_t size)
{
    size_t need = (size + sizeof(size_t) + 15) & ~(size_t)15;

    if (size > sizeof arena || need > sizeof arena - arena_used) {
        errno = ENOMEM;
        return NULL;
    }
    unsigned char *p = arena + arena_used;
    arena_used += need;
    memcpy(p, &size, sizeof size);
    return p + 16;
}

void *malloc(size_t size)
{
    return mi_malloc(size + 16 - sizeof(size_t));
}

void free(void *p)
{
    (void)p; /* a bump allocator never reuses memory */
}

void *calloc(size_t n, size_t size)
{
    if (size != 0 && n > (size_t)-1 / size) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = malloc(n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

void *realloc(void *p, size_t size)
{
    void *q = malloc(size);
    size_t old;

    if (q == NULL || p == NULL)
        return q;
    memcpy(&old, (unsigned char *)p - 16, sizeof old);
    memcpy(q, p, old < size ? old : size);
    return q;
}

int main(void)
{
    char *s = strdup("own allocator");

    if (s == NULL)
        return 1;
    printf("%s: %zu bytes of the arena used\n", s, arena_used);
    free(s);
    return 0;
}
