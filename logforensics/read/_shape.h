/* Digit-masked line shapes: masking and hashing eight bytes at a time, shared by the C
 * scanners (_scan.c, _emit.c). A line's shape is its bytes with every digit '1'..'9'
 * replaced by '0' (fastpath.py's bytes.translate); masking keeps lengths, so a shape's
 * spans apply to every line of that shape. */
#ifndef LOGFORENSICS_SHAPE_H
#define LOGFORENSICS_SHAPE_H

#include <stdint.h>
#include <string.h>

static inline uint64_t shape_load8(const unsigned char *p, Py_ssize_t n)
{
    uint64_t w = 0;
    if (n >= 8)
        memcpy(&w, p, 8);
    else
        memcpy(&w, p, (size_t)n);
    return w;
}

/* Every byte '1'..'9' becomes '0' (bytes with the high bit set are left alone). */
static inline uint64_t shape_mask8(uint64_t x)
{
    const uint64_t H = 0x8080808080808080ULL;
    uint64_t d = x & ~H;
    uint64_t ge1 = (d + 0x4f4f4f4f4f4f4f4fULL) & H;    /* d >= 0x31 */
    uint64_t le9 = ~(d + 0x4646464646464646ULL) & H;   /* d <= 0x39 */
    uint64_t dig = ge1 & le9 & ~x;
    return x & ~((dig >> 7) * 0x0f);
}

static inline uint64_t shape_mix(uint64_t h, uint64_t w)
{
    h ^= w;
    h *= 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}

static inline uint64_t shape_hash(const unsigned char *p, Py_ssize_t n)
{
    uint64_t h = (uint64_t)n * 0xff51afd7ed558ccdULL;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        h = shape_mix(h, shape_mask8(shape_load8(p + i, 8)));
    if (i < n)
        h = shape_mix(h, shape_mask8(shape_load8(p + i, n - i)));
    return h;
}

/* Whether line (n bytes) masks to key (a masked line of n bytes). */
static inline int shape_equal(const unsigned char *line, const unsigned char *key, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t k;
        memcpy(&k, key + i, 8);
        if (shape_mask8(shape_load8(line + i, 8)) != k)
            return 0;
    }
    if (i < n) {
        uint64_t k = shape_load8(key + i, n - i);
        if (shape_mask8(shape_load8(line + i, n - i)) != k)
            return 0;
    }
    return 1;
}

#endif
