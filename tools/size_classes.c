/* size_classes.c - prints the size-class table of docs/PERFORMANCE.md as Markdown,
 * computed by the library's own sizeclass.c (`make size-classes`). */
#include <stdio.h>

#include "internal.h"

int main(void) {
    hz_sizeclass_init();
    printf("| class | block size | requests | first page | page size | blocks per page | "
           "worst waste per block | page tail |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (unsigned c = 1; c < HZ_CLASSES; c++) {
        size_t size = hz_class_block[c], largest = hz_class_size[c];
        size_t smallest = c == 1 ? 1 : (size_t)hz_class_size[c - 1] + 1;
        size_t page = (size_t)hz_class_units[c] * HZ_UNIT_SIZE;
        size_t first = (size_t)hz_class_first_units[c] * HZ_UNIT_SIZE;
        size_t blocks = page / size, tail = page - blocks * size;
        if (hz_size_class(smallest) != c || hz_size_class(largest) != c) {
            fprintf(stderr, "size_classes: class %u does not serve %zu..%zu\n", c, smallest,
                    largest);
            return 1;
        }
        printf("| %u | %zu | %zu..%zu | %zu KiB | %zu KiB | %zu | %zu B (%.1f %%) | %zu B (%.1f %%) |\n",
               c, size, smallest, largest, first >> 10, page >> 10, blocks, size - smallest,
               100.0 * (double)(size - smallest) / (double)size, tail,
               100.0 * (double)tail / (double)page);
    }
    printf("\n%u classes; requests above %zu bytes are large blocks, each mapped on its own.\n",
           HZ_CLASSES - 1, (size_t)HZ_MEDIUM_MAX);
    return 0;
}
