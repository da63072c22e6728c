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

/* -- sixty-four bytes at a time, where the processor has AVX-512 VBMI2 ------------------------
 *
 * The same judgement with a bit a byte in mask registers: a byte taken into the sequence of
 * one of the three before it is a shift of three masks (c1, c2, c3: a lead byte's first,
 * second and third continuation bytes as they should be), and what each byte writes is
 * gathered into registers of its slots (vpermt2b) and compressed to the bytes written
 * (vpcompressb), with no loop over the bytes. */
#define UTF8_AVX512 "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,popcnt"
#define U8Z(c) _mm512_set1_epi8((char)(c))

/* Whether the processor (and the system: it keeps the registers) has what UTF8_AVX512 names. */
static inline int has_vbmi2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
           __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("popcnt");
}

/* The sixty-four bytes b0 (and b1, b2, b3: the same from one, two and three bytes on) judged:
 * which are a character's bytes, all there (*valid), of three bytes or more (*n2) and four
 * (*n3); returns those that a sequence before took. *carry: the bytes of this chunk (bits 0 to
 * 2) that sequences of the one before took; set to those of the next. */
__attribute__((target(UTF8_AVX512), always_inline)) static inline __mmask64 utf8_class64(
    __m512i b0, __m512i b1, __m512i b2, __m512i b3, uint64_t *carry, __mmask64 *valid, __mmask64 *n2, __mmask64 *n3)
{
    const __mmask64 lead = _mm512_cmpge_epu8_mask(b0, U8Z(0xC2)) & _mm512_cmple_epu8_mask(b0, U8Z(0xF4));
    *n2 = _mm512_cmpge_epu8_mask(b0, U8Z(0xE0));
    *n3 = _mm512_cmpge_epu8_mask(b0, U8Z(0xF0));
    /* the first continuation byte's range: no overlong form, no surrogate, nothing beyond U+10FFFF */
    __m512i lo = _mm512_mask_mov_epi8(U8Z(0x80), _mm512_cmpeq_epi8_mask(b0, U8Z(0xE0)), U8Z(0xA0));
    lo = _mm512_mask_mov_epi8(lo, _mm512_cmpeq_epi8_mask(b0, U8Z(0xF0)), U8Z(0x90));
    __m512i hi = _mm512_mask_mov_epi8(U8Z(0xBF), _mm512_cmpeq_epi8_mask(b0, U8Z(0xED)), U8Z(0x9F));
    hi = _mm512_mask_mov_epi8(hi, _mm512_cmpeq_epi8_mask(b0, U8Z(0xF4)), U8Z(0x8F));
    const __mmask64 c1 = lead & _mm512_cmpge_epu8_mask(b1, lo) & _mm512_cmple_epu8_mask(b1, hi);
    const __mmask64 c2 = c1 & *n2 & _mm512_cmplt_epi8_mask(b2, U8Z(0xC0)); /* 80-BF, read signed */
    const __mmask64 c3 = c2 & *n3 & _mm512_cmplt_epi8_mask(b3, U8Z(0xC0));
    *valid = c1 & (~*n2 | c2) & (~*n3 | c3);
    const __mmask64 taken = (c1 << 1) | (c2 << 2) | (c3 << 3) | *carry;
    *carry = (c1 >> 63) | (c2 >> 62) | (c3 >> 61);
    return taken;
}

/* The sixty-four bytes at p + i and the three after each (p[i:i + 67]) as b0 to b3, none read
 * at or past p[avail] (those zeros: no continuation byte); returns the mask of those read. */
__attribute__((target(UTF8_AVX512), always_inline)) static inline __mmask64 utf8_load64(
    const unsigned char *p, Py_ssize_t i, Py_ssize_t avail, __m512i *b0, __m512i *b1, __m512i *b2, __m512i *b3)
{
    const Py_ssize_t left = avail - i;
    if (left >= 67) {
        *b0 = _mm512_loadu_si512((const void *)(p + i));
        *b1 = _mm512_loadu_si512((const void *)(p + i + 1));
        *b2 = _mm512_loadu_si512((const void *)(p + i + 2));
        *b3 = _mm512_loadu_si512((const void *)(p + i + 3));
        return ~0ULL;
    }
#define UPTO(k) (left - (k) >= 64 ? ~0ULL : left - (k) <= 0 ? 0ULL : (1ULL << (left - (k))) - 1)
    *b0 = _mm512_maskz_loadu_epi8(UPTO(0), p + i);
    *b1 = _mm512_maskz_loadu_epi8(UPTO(1), p + i + 1);
    *b2 = _mm512_maskz_loadu_epi8(UPTO(2), p + i + 2);
    *b3 = _mm512_maskz_loadu_epi8(UPTO(3), p + i + 3);
    return UPTO(0);
#undef UPTO
}

/* decode32, sixty-four bytes at a time: each byte's up to four bytes (itself, the rest of its
 * character or U+FFFD) gathered sixteen bytes to a register and compressed to those written.
 * Reads nothing at or past p[avail]; writes up to 64 bytes past the text (o has room for
 * 3n + 64). */
__attribute__((target(UTF8_AVX512))) static Py_ssize_t decode64(const unsigned char *p, Py_ssize_t n, Py_ssize_t avail,
                                                               unsigned char *o)
{
    uint64_t carry = 0;
    Py_ssize_t i = 0, k = 0;
    /* byte 4j + t of group g: byte 16g + j's slot t (index bit 6: the second table, for odd t) */
    const __m512i at = _mm512_set_epi32(0x4F0F4F0F, 0x4E0E4E0E, 0x4D0D4D0D, 0x4C0C4C0C, 0x4B0B4B0B, 0x4A0A4A0A,
                                        0x49094909, 0x48084808, 0x47074707, 0x46064606, 0x45054505, 0x44044404,
                                        0x43034303, 0x42024202, 0x41014101, 0x40004000);
    const __m512i slot = _mm512_set1_epi32(0x03020100); /* t of each byte */
    const __mmask64 t23 = 0xCCCCCCCCCCCCCCCCULL;
    for (; i < n; i += 64) {
        __m512i b0, b1, b2, b3;
        utf8_load64(p, i, avail, &b0, &b1, &b2, &b3);
        const int lim = n - i < 64 ? (int)(n - i) : 64; /* the bytes of the line */
        const __mmask64 in = lim < 64 ? (1ULL << lim) - 1 : ~0ULL;
        const __mmask64 high = _mm512_movepi8_mask(b0);
        if (!(high & in)) { /* ASCII: as it is */
            _mm512_storeu_si512((void *)(o + k), b0);
            k += lim;
            carry = 0;
            continue;
        }
        __mmask64 valid, n2, n3;
        const __mmask64 taken = utf8_class64(b0, b1, b2, b3, &carry, &valid, &n2, &n3);
        const __mmask64 fffd = high & ~valid;
        __m512i len = _mm512_mask_mov_epi8(U8Z(1), high, U8Z(3)); /* a U+FFFD, or a character of three bytes */
        len = _mm512_mask_mov_epi8(len, valid & ~n2, U8Z(2));
        len = _mm512_mask_mov_epi8(len, valid & n3, U8Z(4));
        len = _mm512_maskz_mov_epi8(in & ~taken, len);
        const __m512i s0 = _mm512_mask_mov_epi8(b0, fffd, U8Z(0xEF)), s1 = _mm512_mask_mov_epi8(b1, fffd, U8Z(0xBF));
        const __m512i s2 = _mm512_mask_mov_epi8(b2, fffd, U8Z(0xBD));
        for (int g = 0; g < (lim + 15) >> 4; g++) {
            const __m512i idx = _mm512_add_epi8(at, U8Z(16 * g));
            const __m512i v = _mm512_mask_mov_epi8(_mm512_permutex2var_epi8(s0, idx, s1), t23,
                                                   _mm512_permutex2var_epi8(s2, idx, b3));
            const __mmask64 used = _mm512_cmplt_epu8_mask(slot, _mm512_permutexvar_epi8(idx, len));
            _mm512_storeu_si512((void *)(o + k), _mm512_maskz_compress_epi8(used, v));
            k += __builtin_popcountll(used);
        }
    }
    return k;
}
#endif

/* p[0:n] decoded (decode_from), thirty-two bytes at a time where `vector` is 2 (AVX2; `avail`
 * bytes may be read from p, and o has room for 3n + 36), sixty-four where it is 3 (AVX-512
 * VBMI2; room for 3n + 64). */
static inline Py_ssize_t decode_to_utf8(const unsigned char *p, Py_ssize_t n, Py_ssize_t avail, unsigned char *o, int vector)
{
#ifdef UTF8_AVX2
    if (vector > 2)
        return decode64(p, n, avail, o);
    if (vector > 1)
        return decode32(p, n, avail, o);
#else
    (void)vector;
    (void)avail;
#endif
    return decode_from(p, n, o, 0, 0, 0, 0, 0);
}

#endif
