/* test_dlopen.c - the library can be loaded after start-up with dlopen (its static
 * TLS is 8 bytes, so it fits the surplus glibc reserves) and used through the hz_*
 * names without replacing the process's malloc.  The test driver preloads the
 * variant under test; this program re-executes itself without the preload and
 * dlopens that variant (HZ_TEST_LIBDIR/libHZ_TEST_VARIANT.so) instead. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    (void)argc;
    if (getenv("LD_PRELOAD") != NULL) {
        unsetenv("LD_PRELOAD");
        execv("/proc/self/exe", argv);
        perror("execv");
        return 1;
    }
    const char *dir = getenv("HZ_TEST_LIBDIR"), *variant = getenv("HZ_TEST_VARIANT");
    if (dir == NULL || variant == NULL) {
        printf("HZ_TEST_LIBDIR/HZ_TEST_VARIANT not set: skipped\n");
        return 77;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/lib%s.so", dir, variant);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlopen(%s) failed: %s\n", path, dlerror());
        return 1;
    }
    void *(*hz_malloc)(size_t) = (void *(*)(size_t))dlsym(h, "hz_malloc");
    void (*hz_free)(void *) = (void (*)(void *))dlsym(h, "hz_free");
    size_t (*hz_usable_size)(const void *) = (size_t(*)(const void *))dlsym(h, "hz_usable_size");
    const char *(*hz_version)(void) = (const char *(*)(void))dlsym(h, "hz_version");
    if (!hz_malloc || !hz_free || !hz_usable_size || !hz_version) {
        fprintf(stderr, "hz_* symbols missing: %s\n", dlerror());
        return 1;
    }
    void *blocks[1000];
    for (int i = 0; i < 1000; i++) {
        size_t n = 1 + (size_t)i * 97 % 70000;
        blocks[i] = hz_malloc(n);
        if (blocks[i] == NULL || hz_usable_size(blocks[i]) < n) {
            fprintf(stderr, "hz_malloc(%zu) failed after dlopen\n", n);
            return 1;
        }
        memset(blocks[i], i & 0xff, n);
    }
    /* The process's own malloc is untouched: the name still resolves to glibc's, not
     * to the library's.  (Asking the library about a glibc block would not do: the
     * checked variant stops at any pointer that is not its own.) */
    if (dlsym(RTLD_DEFAULT, "malloc") == dlsym(h, "malloc")) {
        fprintf(stderr, "malloc was interposed by a RTLD_LOCAL dlopen\n");
        return 1;
    }
    void *libc_block = malloc(100);
    free(libc_block);
    for (int i = 0; i < 1000; i++) hz_free(blocks[i]);
    printf("dlopen after start-up: %s works through hz_* names\n", hz_version());
    return 0;
}
