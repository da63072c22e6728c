/* UTF-8 read as bytes.decode("utf-8", "replace") reads it, shared by the walker of
 * unrecognised lines (other.c) and the row writer (emit.c): the character at a place
 * (utf8_next), and whole texts decoded (decode_to_utf8), eight bytes at a time where they are
 * ASCII. Portable C: no processor-specific instructions. */
#ifndef LOGFORENSICS_UTF8_H
#define LOGFORENSICS_UTF8_H

#include <stdint.h>
#include <string.h>

/* The character at p[*i] (the line p[0:n]), as bytes.decode("utf-8", "replace") reads
 * it: one U+FFFD for each maximal subpart of an invalid sequence (what CPython does), the
 * byte that ends such a subpart read again as a character's start. Moves *i past it and
 * sets *bad on a replacement. */
static inline Py_UCS4 utf8_next(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i, int *bad)
{
    Py_ssize_t j = *i;
    unsigned b = p[j++], lo = 0x80, hi = 0xBF, need;
    Py_UCS4 cp;
    if (b < 0x80) {
        *i = j;
        return b;
    }
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
        cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        cp = b & 0x0F;
        lo = b == 0xE0 ? 0xA0 : 0x80; /* no overlong form */
        hi = b == 0xED ? 0x9F : 0xBF; /* no surrogate */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        cp = b & 0x07;
        lo = b == 0xF0 ? 0x90 : 0x80; /* no overlong form */
        hi = b == 0xF4 ? 0x8F : 0xBF; /* nothing beyond U+10FFFF */
    } else { /* a continuation byte, C0, C1, F5-FF */
        *i = j;
        *bad = 1;
        return 0xFFFD;
    }
    for (; need; need--, lo = 0x80, hi = 0xBF) {
        if (j >= n || p[j] < lo || p[j] > hi) {
            *i = j;
            *bad = 1;
            return 0xFFFD;
        }
        cp = (cp << 6) | (p[j++] & 0x3F);
    }
    *i = j;
    return cp;
}

static inline Py_ssize_t put_utf8(unsigned char *o, Py_UCS4 c)
{
    if (c < 0x80) {
        o[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (unsigned char)(0xC0 | (c >> 6));
        o[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (c >> 12));
        o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (c >> 18));
    o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* p[0:n] as bytes.decode("utf-8", "replace") reads it, written as UTF-8 to o (room for 3n):
 * valid sequences as they are, each maximal invalid subpart as the bytes of U+FFFD; eight bytes
 * at a time where they are ASCII. */
static inline Py_ssize_t decode_to_utf8(const unsigned char *p, Py_ssize_t n, unsigned char *o)
{
    Py_ssize_t i = 0, k = 0;
    int bad = 0;
    while (i < n) {
        uint64_t x;
        if (i + 8 <= n && (memcpy(&x, p + i, 8), !(x & 0x8080808080808080ULL))) {
            memcpy(o + k, &x, 8);
            i += 8;
            k += 8;
        } else if (p[i] < 0x80) {
            o[k++] = p[i++];
        } else {
            k += put_utf8(o + k, utf8_next(p, n, &i, &bad));
        }
    }
    return k;
}

#endif
