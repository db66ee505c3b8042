/* sizeclass.c - the size-class table: block size and page (span) length per class. */
#include "internal.h"

uint32_t hz_class_size[HZ_CLASSES];
uint32_t hz_class_block[HZ_CLASSES];
uint8_t hz_class_units[HZ_CLASSES];
uint8_t hz_class_first_units[HZ_CLASSES];
uint8_t hz_class_align_units[HZ_CLASSES];

static uint32_t class_size_formula(unsigned c) {
    if (c <= 16) return 16u * c;
    unsigned k = 8 + (c - 17) / 8, sub = (c - 17) % 8;
    return (1u << k) + ((sub + 1u) << (k - 3));
}

/* Span length: enough units for at least `min_blocks` blocks, grown until the tail left
 * after the last block is at most 1/8 of the span. */
static uint8_t span_units(uint32_t size, size_t min_blocks) {
    size_t units = (min_blocks * size + HZ_UNIT_SIZE - 1) / HZ_UNIT_SIZE;
    for (; units < HZ_UNITS - 1; units++) {
        size_t bytes = units * HZ_UNIT_SIZE;
        if ((bytes % size) * 8 <= bytes) break;
    }
    return (uint8_t)units;
}

/* A class's first page holds at least 8 blocks (4 above 32 KiB, 1 above 256 KiB), so
 * a program that uses a class a little maps and touches little for it.  Once a page
 * of the class has filled, its next pages hold 32 (8 above 32 KiB, 4 above 128 KiB):
 * with 8, a page ran dry while its class's free blocks sat on other pages, and one
 * 2-32 KiB malloc in fourteen took the slow path. */
static uint8_t first_page_units(uint32_t size) {
    return span_units(size, size > HZ_ALONE_MIN ? 1 : size > (32u << 10) ? 4 : 8);
}

static uint8_t page_units(uint32_t size) {
    return span_units(size, size > HZ_ALONE_MIN   ? 1
                            : size > (128u << 10) ? 4
                            : size > (32u << 10)  ? 8
                                                  : 32);
}

static size_t pow2_divisor(size_t x) { return x & (~x + 1); }

/* Blocks of 4-256 KiB whose size is a multiple of 512 bytes or more start on a few
 * of the caches' sets (a multiple of 4 KiB: on one), and a program touching their
 * first bytes evicts its own lines; 64 bytes more between blocks spreads them over
 * every set.  Powers of two keep their size, and with it the alignment that
 * aligned_alloc takes them for.  The 64 bytes are the block's: usable, not lost. */
static uint32_t block_size(uint32_t size) {
    bool padded = size > 4096 && size <= HZ_ALONE_MIN && (size & (size - 1)) != 0;
    return padded ? size + HZ_CACHE_LINE : size;
}

void hz_sizeclass_init(void) {
    for (unsigned c = 1; c < HZ_CLASSES; c++) {
        uint32_t largest = class_size_formula(c), size = block_size(largest);
        hz_class_size[c] = largest;
        hz_class_block[c] = size;
        hz_class_units[c] = page_units(size);
        hz_class_first_units[c] = first_page_units(size);
        /* Spans start at a multiple of the largest power of two dividing the block
         * size (in units), so every block is aligned to it: 1 MiB blocks to 1 MiB. */
        size_t align = pow2_divisor(size);
        hz_class_align_units[c] = (uint8_t)(align > HZ_UNIT_SIZE ? align / HZ_UNIT_SIZE : 1);
    }
}

/* The alignment every block of class c has: its size's largest power-of-two divisor,
 * at most that of its spans' starts (single-unit spans may start right after the
 * segment header; a first page is the shorter one). */
static size_t class_block_alignment(unsigned c) {
    size_t start = hz_class_first_units[c] == 1 ? pow2_divisor(HZ_SEGMENT_HEADER)
                                          : (size_t)hz_class_align_units[c] * HZ_UNIT_SIZE;
    size_t block = pow2_divisor(hz_class_block[c]);
    return block < start ? block : start;
}

/* Smallest class of at least `size` bytes whose blocks are all aligned to
 * `alignment` (<= HZ_ALIGNED_CLASS_MAX): ordinary blocks, no mapping of their own.
 * Returns 0 when no medium class fits. */
unsigned hz_aligned_class(size_t size, size_t alignment) {
    if (size > HZ_MEDIUM_MAX) return 0;
    for (unsigned c = hz_size_class(size ? size : 1); c < HZ_CLASSES; c++)
        if (class_block_alignment(c) >= alignment) return c;
    return 0;
}
