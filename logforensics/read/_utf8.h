/* UTF-8 read as bytes.decode("utf-8", "replace") reads it, shared by the walker of
 * unrecognised lines (_other.c) and the row writer (_emit.c): the character at a place
 * (utf8_next), and whole texts decoded (decode_to_utf8), eight bytes at a time where they are
 * ASCII and thirty-two at a time with AVX2 (chosen by the caller at run time). utf8_tables()
 * fills the tables once, at module set-up. */
#ifndef LOGFORENSICS_UTF8_H
#define LOGFORENSICS_UTF8_H

#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define UTF8_AVX2 1
#endif

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

#ifdef UTF8_AVX2
#define U8V(c) _mm256_set1_epi8((char)(c))
/* decode_from's judgement of the thirty-two bytes at p (reads p[0:35]), all at once: their m
 * (returned), what each writes (*len: m + 1 for a character, 3 for a U+FFFD, 0 for a byte a
 * sequence before took; ASCII 1) and whether it is a character's bytes (*valid, all ones).
 * prev: m of the thirty-two bytes before. */
__attribute__((target("avx2"), always_inline)) static inline __m256i utf8_class32(const unsigned char *p, __m256i prev,
                                                                                __m256i *len, __m256i *valid)
{
    const __m256i zero = _mm256_setzero_si256(), one = U8V(1), two = U8V(2), three = U8V(3), four = U8V(4);
    const __m256i need_of_high = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 1, 1, 2, 3,
                                                  0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 1, 1, 2, 3);
    const __m256i b0 = _mm256_loadu_si256((const __m256i *)p);
    const __m256i b1 = _mm256_loadu_si256((const __m256i *)(p + 1));
    const __m256i b2 = _mm256_loadu_si256((const __m256i *)(p + 2));
    const __m256i b3 = _mm256_loadu_si256((const __m256i *)(p + 3));
    __m256i need = _mm256_shuffle_epi8(need_of_high, _mm256_and_si256(_mm256_srli_epi16(b0, 4), U8V(0x0F)));
    const __m256i bad = _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(b0, U8V(0xC0)), _mm256_cmpeq_epi8(b0, U8V(0xC1))),
                                        _mm256_cmpeq_epi8(_mm256_max_epu8(b0, U8V(0xF5)), b0));
    need = _mm256_blendv_epi8(need, four, bad);
    const __m256i lead = _mm256_and_si256(_mm256_cmpgt_epi8(need, zero), _mm256_cmpgt_epi8(four, need));
    __m256i lo = _mm256_blendv_epi8(U8V(0x80), U8V(0xA0), _mm256_cmpeq_epi8(b0, U8V(0xE0)));
    lo = _mm256_blendv_epi8(lo, U8V(0x90), _mm256_cmpeq_epi8(b0, U8V(0xF0)));
    __m256i hi = _mm256_blendv_epi8(U8V(0xBF), U8V(0x9F), _mm256_cmpeq_epi8(b0, U8V(0xED)));
    hi = _mm256_blendv_epi8(hi, U8V(0x8F), _mm256_cmpeq_epi8(b0, U8V(0xF4)));
    const __m256i in1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_max_epu8(b1, lo), b1),
                                         _mm256_cmpeq_epi8(_mm256_min_epu8(b1, hi), b1));
    const __m256i c1 = _mm256_and_si256(lead, in1);
    const __m256i c2 = _mm256_and_si256(_mm256_and_si256(c1, _mm256_cmpgt_epi8(need, one)),
                                        _mm256_cmpeq_epi8(_mm256_and_si256(b2, U8V(0xC0)), U8V(0x80)));
    const __m256i c3 = _mm256_and_si256(_mm256_and_si256(c2, _mm256_cmpgt_epi8(need, two)),
                                        _mm256_cmpeq_epi8(_mm256_and_si256(b3, U8V(0xC0)), U8V(0x80)));
    const __m256i m = _mm256_sub_epi8(_mm256_sub_epi8(_mm256_sub_epi8(zero, c1), c2), c3);
    *valid = _mm256_cmpeq_epi8(m, need);
    const __m256i carry = _mm256_permute2x128_si256(prev, m, 0x21); /* m of the bytes before each */
    const __m256i taken = _mm256_or_si256(
        _mm256_or_si256(_mm256_cmpgt_epi8(_mm256_alignr_epi8(m, carry, 15), zero),
                        _mm256_cmpgt_epi8(_mm256_alignr_epi8(m, carry, 14), one)),
        _mm256_cmpgt_epi8(_mm256_alignr_epi8(m, carry, 13), two));
    *len = _mm256_andnot_si256(taken, _mm256_blendv_epi8(three, _mm256_add_epi8(m, one), *valid));
    return m;
}

/* decode_from, thirty-two bytes at a time: m, whether each byte begins a character and the bytes
 * it writes are found for all at once (utf8_class32), and only the writing is a byte at a time.
 * `avail`: the bytes that may be read from p; the last chunk reads past the line's newline,
 * where every sequence has ended, and writes up to 32 bytes past the text (o has room for
 * 3n + 36). */
__attribute__((target("avx2"))) static inline Py_ssize_t decode32(const unsigned char *p, Py_ssize_t n,
                                                                 Py_ssize_t avail, unsigned char *o)
{
    __m256i prev = _mm256_setzero_si256(); /* m of the thirty-two bytes before */
    unsigned char len[32], val[32];
    Py_ssize_t i = 0, k = 0;
    for (; i < n && i + 35 <= avail; i += 32) { /* reads up to p[i + 34] */
        const int lim = n - i < 32 ? (int)(n - i) : 32; /* the bytes of the line */
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)(p + i));
        if (!((uint32_t)_mm256_movemask_epi8(b0) & (lim < 32 ? (1u << lim) - 1 : ~0u))) {
            _mm256_storeu_si256((__m256i *)(o + k), b0);
            k += lim;
            prev = _mm256_setzero_si256();
            continue;
        }
        __m256i vlen, valid;
        prev = utf8_class32(p + i, prev, &vlen, &valid);
        _mm256_storeu_si256((__m256i *)len, vlen);
        _mm256_storeu_si256((__m256i *)val, valid);
        for (int j = 0; j < lim; j++) {
            uint32_t w4, vm = 0u - (uint32_t)(val[j] & 1);
            memcpy(&w4, p + i + j, 4);
            w4 = (w4 & vm) | (U8_FFFD & ~vm);
            memcpy(o + k, &w4, 4);
            k += len[j];
        }
    }
    if (i >= n)
        return k;
    unsigned char last[32];
    _mm256_storeu_si256((__m256i *)last, prev);
    return decode_from(p, n, o, i, k, last[31], last[30], last[29]);
}
#endif

/* p[0:n] decoded (decode_from), thirty-two bytes at a time where `vector` > 1 (AVX2; `avail`
 * bytes may be read from p, and o has room for 3n + 36). */
static inline Py_ssize_t decode_to_utf8(const unsigned char *p, Py_ssize_t n, Py_ssize_t avail, unsigned char *o, int vector)
{
#ifdef UTF8_AVX2
    if (vector > 1)
        return decode32(p, n, avail, o);
#else
    (void)vector;
    (void)avail;
#endif
    return decode_from(p, n, o, 0, 0, 0, 0, 0);
}

#endif
