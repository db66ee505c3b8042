/* foreign_lib.c - a tiny shared library for test_foreign.
 *
 * test_foreign loads it with dlopen(RTLD_NOW | RTLD_DEEPBIND).  With DEEPBIND
 * the library's own dependencies are searched before the global scope, so the
 * malloc and free called here bind to the C library's allocator, not to the
 * preloaded one: the blocks it returns are "foreign" to hakozuna.
 */
#include <stddef.h>
#include <stdlib.h>

__attribute__((visibility("default"))) void *foreign_alloc(size_t size);
__attribute__((visibility("default"))) void foreign_free(void *ptr);

void *foreign_alloc(size_t size)
{
    return malloc(size);
}

void foreign_free(void *ptr)
{
    free(ptr);
}
