/* Digit-masked line shapes: masking and hashing eight bytes at a time, shared by the C
 * scanners (scan.c, emit.c). A line's shape is its bytes with every digit '1'..'9'
 * replaced by '0' (fastpath.py's bytes.translate); masking keeps lengths, so a shape's
 * spans apply to every line of that shape. */
#ifndef LOGFORENSICS_SHAPE_H
#define LOGFORENSICS_SHAPE_H

#include <float.h>
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

/* The bytes p[i..n) (fewer than eight, n >= i + 1), zero-extended as shape_load8 gives them:
 * for a text of at least eight bytes, its last eight loaded at once and shifted (a copy of a
 * variable length is a library call, and reading the word back stalls). */
static inline uint64_t shape_tail8(const unsigned char *p, Py_ssize_t i, Py_ssize_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n >= 8) {
        uint64_t w;
        memcpy(&w, p + n - 8, 8);
        return w >> (8 * (8 - (n - i)));
    }
#endif
    return shape_load8(p + i, n - i);
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

/* Two lanes of eight bytes each, so that the multiplications of consecutive words overlap.
 * With `out`, the masked bytes are also written there (n rounded up to 8 bytes of room). */
static inline uint64_t shape_hash_into(const unsigned char *p, Py_ssize_t n, unsigned char *out)
{
    uint64_t h1 = (uint64_t)n * 0xff51afd7ed558ccdULL, h2 = (uint64_t)n ^ 0xc4ceb9fe1a85ec53ULL;
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint64_t a = shape_mask8(shape_load8(p + i, 8)), b = shape_mask8(shape_load8(p + i + 8, 8));
        if (out) {
            memcpy(out + i, &a, 8);
            memcpy(out + i + 8, &b, 8);
        }
        h1 = shape_mix(h1, a);
        h2 = shape_mix(h2, b);
    }
    for (; i < n; i += 8) {
        uint64_t a = shape_mask8(n - i >= 8 ? shape_load8(p + i, 8) : shape_tail8(p, i, n));
        if (out)
            memcpy(out + i, &a, 8);
        h1 = shape_mix(h1, a);
    }
    return shape_mix(h1, h2);
}

static inline uint64_t shape_hash(const unsigned char *p, Py_ssize_t n) { return shape_hash_into(p, n, NULL); }

/* Whether line (n bytes) masks to key (a masked line of n bytes), eight bytes at a time. */
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
        uint64_t k = shape_tail8(key, i, n);
        if (shape_mask8(shape_tail8(line, i, n)) != k)
            return 0;
    }
    return 1;
}

/* -- a table of shapes by masked line ------------------------------------------------- */

/* What every stored shape begins with. Each scanner's own shape struct has it as its first
 * member, so a pointer to one is a pointer to the other. */
typedef struct {
    uint64_t hash;
    Py_ssize_t len;
    unsigned char *key; /* the masked line */
} ShapeKey;

/* Open addressing, linear probing, kept at most half full. */
typedef struct {
    ShapeKey **slots;
    size_t cap, count;
} ShapeTable;

/* The key of a line (n bytes): masked, whatever was given, with its hash. 0, or -1 with
 * MemoryError set. */
static inline int shape_key_init(ShapeKey *k, const unsigned char *p, Py_ssize_t n)
{
    k->len = n;
    k->key = PyMem_Malloc(n ? (size_t)n : 1);
    if (!k->key) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        k->key[i] = (p[i] >= '1' && p[i] <= '9') ? '0' : p[i];
    k->hash = shape_hash(k->key, n);
    return 0;
}

/* The stored shape that `line` (n bytes, hashed to h) masks to, or NULL. With `masked` (the
 * line masked, as shape_hash_into writes it) keys are compared with memcmp. */
static inline ShapeKey *shapes_find(const ShapeTable *t, const unsigned char *line, Py_ssize_t n, uint64_t h,
                                    const unsigned char *masked)
{
    if (!t->cap)
        return NULL;
    size_t i = (size_t)h & (t->cap - 1);
    for (;;) {
        ShapeKey *sh = t->slots[i];
        if (!sh)
            return NULL;
        if (sh->hash == h && sh->len == n &&
            (masked ? !memcmp(masked, sh->key, (size_t)n) : shape_equal(line, sh->key, n)))
            return sh;
        i = (i + 1) & (t->cap - 1);
    }
}

/* Store sh, whose key is not in the table yet: 0, or -1 with MemoryError set. */
static inline int shapes_put(ShapeTable *t, ShapeKey *sh)
{
    if ((t->count + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        ShapeKey **slots = PyMem_Calloc(cap, sizeof(ShapeKey *));
        if (!slots) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t k = 0; k < t->cap; k++) {
            ShapeKey *old = t->slots[k];
            if (!old)
                continue;
            size_t i = (size_t)old->hash & (cap - 1);
            while (slots[i])
                i = (i + 1) & (cap - 1);
            slots[i] = old;
        }
        PyMem_Free(t->slots);
        t->slots = slots;
        t->cap = cap;
    }
    size_t i = (size_t)sh->hash & (t->cap - 1);
    while (t->slots[i])
        i = (i + 1) & (t->cap - 1);
    t->slots[i] = sh;
    t->count++;
    return 0;
}

/* -- numbers, as Python reads them ------------------------------------------------- */

/* int(text) for [+-]digits (at most 18 of them), no whitespace; 0: not read here (the line
 * then goes the exact way). */
static inline int shape_read_int(const unsigned char *p, Py_ssize_t n, long long *out)
{
    Py_ssize_t i = 0;
    int neg = 0;
    if (i < n && (p[i] == '-' || p[i] == '+')) {
        neg = p[i] == '-';
        i++;
    }
    if (i == n || n - i > 18)
        return 0;
    long long v = 0;
    for (; i < n; i++) {
        unsigned c = p[i] - '0';
        if (c > 9)
            return 0;
        v = v * 10 + c;
    }
    *out = neg ? -v : v;
    return 1;
}

/* float(text) without the general converter, for the texts where that is exact (Clinger's
 * fast path): [+-]digits[.digits][(e|E)[+-]digits] with a significand of at most 2**53
 * once its point is dropped and a decimal exponent e, |e| <= 22. Both the significand and
 * 10**|e| are then exact doubles, so the one multiplication or division IEEE arithmetic
 * does is correctly rounded: the double float() returns. 1: read; 0: not read here. */
static inline int shape_fast_float(const unsigned char *p, Py_ssize_t n, double *out)
{
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                   1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    Py_ssize_t i = 0;
    int neg = 0;
    if (i < n && (p[i] == '-' || p[i] == '+')) {
        neg = p[i] == '-';
        i++;
    }
    uint64_t w = 0;
    int ndig = 0, nsig = 0; /* digits of the significand; those after its leading zeros */
    long e = 0;
    for (; i < n && (unsigned)(p[i] - '0') <= 9; i++, ndig++) {
        if (nsig || p[i] != '0') {
            if (++nsig > 19)
                return 0;
            w = w * 10 + (p[i] - '0');
        }
    }
    if (i < n && p[i] == '.') {
        for (i++; i < n && (unsigned)(p[i] - '0') <= 9; i++, ndig++, e--) {
            if (nsig || p[i] != '0') {
                if (++nsig > 19)
                    return 0;
                w = w * 10 + (p[i] - '0');
            }
        }
    }
    if (!ndig)
        return 0; /* no digit: "", ".", "-", "e5" */
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        int eneg = 0;
        long x = 0;
        i++;
        if (i < n && (p[i] == '-' || p[i] == '+')) {
            eneg = p[i] == '-';
            i++;
        }
        if (i == n)
            return 0; /* "1e", "1e+" */
        for (; i < n && (unsigned)(p[i] - '0') <= 9; i++) {
            x = x * 10 + (p[i] - '0');
            if (x > 100000)
                return 0;
        }
        e += eneg ? -x : x;
    }
    if (i != n || w > (1ULL << 53))
        return 0;
    double d = (double)w;
    if (w == 0)
        ;
    else if (e >= 0 && e <= 22)
        d *= pow10[e];
    else if (e < 0 && e >= -22)
        d /= pow10[-e];
    else
        return 0;
    *out = neg ? -d : d;
    return 1;
}

/* float(text) for digits, signs, points and exponents only, no whitespace; 0: not read here. */
static inline int shape_read_float(const unsigned char *p, Py_ssize_t n, double *out)
{
    if (n == 0 || n > 60)
        return 0;
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0 /* doubles rounded as doubles (not x87's extended) */
    if (shape_fast_float(p, n, out))
        return 1;
#endif
    char buf[64];
    for (Py_ssize_t k = 0; k < n; k++) {
        unsigned char c = p[k];
        if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E'))
            return 0;
        buf[k] = (char)c;
    }
    buf[n] = 0;
    char *end = NULL;
    double d = PyOS_string_to_double(buf, &end, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (end != buf + n)
        return 0;
    *out = d;
    return 1;
}

/* A scan may run without the GIL (so that another thread, reading the next block or
 * encoding the last, is not held up). CPython's float converter needs it (its dtoa keeps
 * shared state): a text the fast reading leaves takes the GIL back for that one
 * conversion. g: NULL when the GIL is held. */
typedef struct {
    PyThreadState *ts;
} Gil;

static inline int read_float_g(const unsigned char *p, Py_ssize_t n, double *out, Gil *g)
{
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    if (n > 0 && n <= 60 && shape_fast_float(p, n, out))
        return 1;
#endif
    if (g)
        PyEval_RestoreThread(g->ts);
    int r = shape_read_float(p, n, out);
    if (g)
        g->ts = PyEval_SaveThread();
    return r;
}

#endif
