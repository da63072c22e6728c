/* UTF-8 read as bytes.decode("utf-8", "replace") reads it, shared by the walker of
 * unrecognised lines (_other.c) and the row writer (_emit.c): the character at a place
 * (utf8_next), and whole texts decoded (decode_to_utf8), eight bytes at a time where they are
 * ASCII. Portable C: no processor-specific instructions. utf8_tables() fills the tables once, at
 * module set-up. */
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

/* Per first byte of a character: the continuation bytes it needs (0: ASCII; 4, never met: a
 * byte that begins no character) and the range its first continuation byte must be in (no
 * overlong form, no surrogate, nothing beyond U+10FFFF; none: 1 to 0). */
static unsigned char U8_NEED[256], U8_LO[256], U8_HI[256];
static uint32_t U8_FFFD; /* the bytes of U+FFFD, EF BF BD, as a word */

static inline void utf8_tables(void)
{
    for (int b = 0; b < 256; b++) {
        U8_NEED[b] = b < 0x80 ? 0 : b >= 0xC2 && b <= 0xDF ? 1 : b >= 0xE0 && b <= 0xEF ? 2
                   : b >= 0xF0 && b <= 0xF4 ? 3 : 4;
        int lead = U8_NEED[b] >= 1 && U8_NEED[b] <= 3;
        U8_LO[b] = !lead ? 1 : b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
        U8_HI[b] = !lead ? 0 : b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
    }
    const unsigned char fffd[4] = {0xEF, 0xBF, 0xBD, 0};
    memcpy(&U8_FFFD, fffd, 4);
}

/* The first place from i on (at most n) that no sequence before took: m1, m2, m3 are m of the
 * three bytes before p[i] (a byte d places on is taken when m of that byte is d or more). */
static inline Py_ssize_t utf8_past_taken(Py_ssize_t i, Py_ssize_t n, unsigned m1, unsigned m2, unsigned m3)
{
    for (; i < n && ((m1 >= 1) | (m2 >= 2) | (m3 >= 3)); i++) {
        m3 = m2;
        m2 = m1;
        m1 = 0;
    }
    return i;
}

/* p[0:n] as bytes.decode("utf-8", "replace") reads it, written as UTF-8 to o (room for 3n + 4;
 * p[n] readable): valid sequences as they are, each maximal invalid subpart as the bytes of
 * U+FFFD. Eight bytes at a time where they are ASCII. Elsewhere every byte is judged on its
 * own and its three successors, so that no step waits for the one before (undecodable input
 * is random: a walk from character to character, or a branch per byte, would): m, how many
 * continuation bytes follow it as they should (for a byte that begins no sequence: none).
 * Since only continuation bytes are taken into a sequence, a byte begins a character unless
 * one of the three before it took it (m of the byte d before >= d); a character is its
 * bytes (m equals what its first byte needs) or else a U+FFFD. The last bytes go through
 * utf8_next. */
static inline Py_ssize_t decode_from(const unsigned char *p, Py_ssize_t n, unsigned char *o, Py_ssize_t i, Py_ssize_t k,
                              unsigned m1, unsigned m2, unsigned m3) /* from p[i] and o[k]; m of the bytes before */
{
    while (i + 3 <= n) { /* p[i + 3] is the line's or its newline, never a continuation byte */
        uint64_t x;
        if (i + 8 <= n && (memcpy(&x, p + i, 8), !(x & 0x8080808080808080ULL))) {
            memcpy(o + k, &x, 8); /* ASCII is no continuation byte: nothing before took it */
            i += 8;
            k += 8;
            m1 = m2 = m3 = 0;
            continue;
        }
        const unsigned b = p[i], need = U8_NEED[b], p1 = p[i + 1];
        const unsigned c1 = (p1 >= U8_LO[b]) & (p1 <= U8_HI[b]);
        const unsigned c2 = c1 & (need >= 2) & ((p[i + 2] & 0xC0) == 0x80);
        const unsigned c3 = c2 & (need >= 3) & ((p[i + 3] & 0xC0) == 0x80);
        const unsigned m = c1 + c2 + c3;
        const uint32_t valid = 0u - (uint32_t)(m == need);                     /* all ones, or none */
        const Py_ssize_t begins = -(Py_ssize_t)((m1 < 1) & (m2 < 2) & (m3 < 3)); /* likewise */
        uint32_t w4;
        memcpy(&w4, p + i, 4);
        w4 = (w4 & valid) | (U8_FFFD & ~valid);
        memcpy(o + k, &w4, 4); /* a byte taken writes nothing: the next character writes over it */
        k += (3 + (((Py_ssize_t)m - 2) & (Py_ssize_t)(int32_t)valid)) & begins; /* m + 1, or 3 */
        m3 = m2;
        m2 = m1;
        m1 = m;
        i++;
    }
    i = utf8_past_taken(i, n, m1, m2, m3);
    int bad = 0;
    while (i < n) {
        if (p[i] < 0x80)
            o[k++] = p[i++];
        else
            k += put_utf8(o + k, utf8_next(p, n, &i, &bad));
    }
    return k;
}

/* p[0:n] decoded (decode_from), written to o (room for 3n + 4). */
static inline Py_ssize_t decode_to_utf8(const unsigned char *p, Py_ssize_t n, unsigned char *o)
{
    return decode_from(p, n, o, 0, 0, 0, 0, 0);
}

#endif
