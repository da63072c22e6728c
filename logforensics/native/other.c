/* Runs of unrecognised lines, in C: how many, and how many of each coverage shape (built into
 * the extension _native, whose module it fills: other_module_add).
 *
 * A line that no record of the grammar can begin is an ``other`` event, and the run
 * model only counts it and groups it by shape (model/coverage.py). Python tells the
 * walker, at set-up, which lines are provably such text (logforensics/read/other.py
 * derives the conditions from the grammar's start terminals, the segmenter's wrappers and
 * splits, the cleaner and the observers that read unrecognised text): by first character,
 * never (refuse) or unless one of some texts is in the line (needles, compared with the
 * line's digits masked, so that the decision is the same for every line of one masked
 * shape). walk() takes consecutive such lines and, per distinct shape (coverage.shape:
 * stripped, hex ids and then digit runs masked, the first 160 characters), counts them;
 * it stops at the first line it cannot take, which the caller reads on the exact path.
 *
 * Lines of a stream that does not look like text and that are not valid UTF-8 are taken
 * too (the classifier makes them ``other`` without asking the grammar): they are decoded
 * here as bytes.decode("utf-8", "replace") does (one U+FFFD per maximal invalid subpart)
 * and masked with Python's own Unicode digit and space tests.
 *
 * The walker mirrors the keys of the caller's dict of shapes (insertion only: it reads
 * the entries added since its last look) so that a line of a known shape costs no Python
 * object; only shapes new to the dict are returned with their first line and example.
 * A shape is decoded, masked and written in one pass over the line's bytes; once the dict
 * holds as many shapes as it keeps, a line of a shape it lacks counts in the overflow bucket.
 * A line's end is found by libc's memchr, whether it is ASCII eight bytes at a time, and its
 * needles a byte at a time: a byte is compared with the needles only where a bit set of the
 * raw bytes that are needles of one byte, or one of the byte pairs longer needles begin with,
 * lets it through. Portable C throughout: no processor-specific instructions.
 * It knows no log format of its own.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "native.h"

#define SHAPE_MAX 160   /* characters of a shape (coverage.shape) */
#define EXAMPLE_MAX 201 /* characters of an example kept (coverage.EXAMPLE_KEPT: one more than shown) */
#define BINARY_MODE 128 /* the needle mode of an undecodable line */

typedef struct {
    uint64_t hash;
    Py_ssize_t off, len; /* the key's UTF-8 in the arena */
    long long walk;      /* the walk that last touched the entry */
    long long count;     /* lines of the shape in that walk */
    long long first;     /* new in that walk: its first line (else -1) */
    int overflow;        /* created as the bucket of shapes beyond the cap */
    PyObject *example;   /* new in that walk: the first line's text[:200] */
} Entry;

typedef struct {
    PyObject_HEAD
    unsigned char refuse[128];   /* first character -> never taken */
    uint64_t single[256][3];     /* masked byte -> modes in which it is a needle */
    signed char cls[129];        /* mode -> its class of modes with the same needles (-1: none) */
    int nclasses;
    unsigned char (*csingle)[32];  /* class -> bit set of the raw bytes that are needles */
    unsigned char (*cbigram)[8192]; /* class -> bit set of the raw byte pairs longer needles begin with */
    int32_t head[65536];         /* bigram -> first needle of its chain (-1: none) */
    int nneedles;
    unsigned char **ntext;
    Py_ssize_t *nlen;
    uint64_t (*nmodes)[3];
    int32_t *nnext;
    Py_ssize_t limit;            /* longest line taken */
    /* the mirror of the dict's keys */
    Entry *tab;
    Py_ssize_t cap, used;
    char *arena;
    Py_ssize_t arena_len, arena_cap;
    PyObject *dict;              /* the dict mirrored (a strong reference) */
    Py_ssize_t dict_pos;         /* PyDict_Next's position after the entries read */
    Py_ssize_t accounted;        /* dict entries the mirror accounts for */
    long long walk;
    unsigned char bfirst[32];    /* bit set of the bytes that can begin a binary needle, and EF */
    /* scratch */
    Py_UCS4 *cps;
    unsigned char *shape8;
    unsigned char *text;         /* texts(): the lines' text, kept from one call to the next */
    Py_ssize_t text_cap;
    Py_ssize_t *touched;
    Py_ssize_t ntouched, touched_cap;
} Walker;

static const unsigned char MASK[256] = {
#define R(i) (unsigned char)(((i) >= '1' && (i) <= '9') ? '0' : (i))
#define R4(i) R(i), R(i + 1), R(i + 2), R(i + 3)
#define R16(i) R4(i), R4(i + 4), R4(i + 8), R4(i + 12)
#define R64(i) R16(i), R16(i + 16), R16(i + 32), R16(i + 48)
    R64(0), R64(64), R64(128), R64(192)
#undef R64
#undef R16
#undef R4
#undef R
};

static uint64_t hash_bytes(const unsigned char *p, Py_ssize_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001B3ULL;
        h ^= h >> 29;
    }
    uint64_t w = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n >= 8 && i < n) { /* the last eight bytes, those read already shifted out: the same word */
        memcpy(&w, p + n - 8, 8);
        w >>= 8 * (8 - (n - i));
    } else
#endif
        memcpy(&w, p + i, (size_t)(n - i));
    h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
    h ^= h >> 32;
    return h ? h : 1;
}

/* -- the mirror of the dict's keys -------------------------------------------------------- */

static void mirror_clear(Walker *w)
{
    for (Py_ssize_t i = 0; i < w->cap; i++)
        Py_CLEAR(w->tab[i].example);
    if (w->tab)
        memset(w->tab, 0, sizeof(Entry) * (size_t)w->cap);
    w->used = 0;
    w->arena_len = 0;
    w->dict_pos = 0;
    w->accounted = 0;
}

static Entry *mirror_find(Walker *w, const unsigned char *k, Py_ssize_t n, uint64_t h)
{
    if (!w->cap)
        return NULL;
    size_t m = (size_t)w->cap - 1;
    for (size_t i = (size_t)h & m;; i = (i + 1) & m) {
        Entry *e = &w->tab[i];
        if (!e->hash)
            return NULL;
        if (e->hash == h && e->len == n && memcmp(w->arena + e->off, k, (size_t)n) == 0)
            return e;
    }
}

static int mirror_grow(Walker *w)
{
    Py_ssize_t ncap = w->cap ? w->cap * 2 : 1024;
    Entry *nt = PyMem_Calloc((size_t)ncap, sizeof(Entry));
    if (!nt) {
        PyErr_NoMemory();
        return -1;
    }
    size_t m = (size_t)ncap - 1;
    for (Py_ssize_t j = 0; j < w->cap; j++) {
        Entry *e = &w->tab[j];
        if (!e->hash)
            continue;
        size_t i = (size_t)e->hash & m;
        while (nt[i].hash)
            i = (i + 1) & m;
        nt[i] = *e;
    }
    /* the touched list holds table indices: re-point it */
    for (Py_ssize_t t = 0; t < w->ntouched; t++) {
        Entry *e = &w->tab[w->touched[t]];
        size_t i = (size_t)e->hash & m;
        while (!(nt[i].hash == e->hash && nt[i].off == e->off))
            i = (i + 1) & m;
        w->touched[t] = (Py_ssize_t)i;
    }
    PyMem_Free(w->tab);
    w->tab = nt;
    w->cap = ncap;
    return 0;
}

/* Add a key (absent); returns its entry or NULL with an exception set. */
static Entry *mirror_add(Walker *w, const unsigned char *k, Py_ssize_t n, uint64_t h)
{
    if ((w->used + 1) * 2 > w->cap && mirror_grow(w) < 0)
        return NULL;
    if (w->arena_len + n > w->arena_cap) {
        Py_ssize_t ncap = w->arena_cap ? w->arena_cap : 1 << 16;
        while (w->arena_len + n > ncap)
            ncap *= 2;
        char *na = PyMem_Realloc(w->arena, (size_t)ncap);
        if (!na) {
            PyErr_NoMemory();
            return NULL;
        }
        w->arena = na;
        w->arena_cap = ncap;
    }
    memcpy(w->arena + w->arena_len, k, (size_t)n);
    size_t m = (size_t)w->cap - 1, i = (size_t)h & m;
    while (w->tab[i].hash)
        i = (i + 1) & m;
    Entry *e = &w->tab[i];
    memset(e, 0, sizeof *e);
    e->hash = h;
    e->off = w->arena_len;
    e->len = n;
    e->first = -1;
    w->arena_len += n;
    w->used++;
    return e;
}

/* Read the dict's entries added since the last look; 0, or -1 with an exception set. */
static int mirror_sync(Walker *w, PyObject *dict)
{
    if (dict != w->dict) {
        mirror_clear(w);
        Py_INCREF(dict);
        Py_XSETREF(w->dict, dict);
    }
    for (int pass = 0; pass < 2 && w->accounted != PyDict_GET_SIZE(dict); pass++) {
        if (pass) /* the dict changed otherwise than by insertion: read it all again */
            mirror_clear(w);
        PyObject *key, *value;
        while (PyDict_Next(dict, &w->dict_pos, &key, &value)) {
            Py_ssize_t n;
            const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &n) : NULL;
            if (!k) { /* no shape of ours can equal it */
                PyErr_Clear();
                w->accounted++;
                continue;
            }
            uint64_t h = hash_bytes((const unsigned char *)k, n);
            if (mirror_find(w, (const unsigned char *)k, n, h))
                continue; /* added by a walk (and then by the caller): accounted already */
            if (!mirror_add(w, (const unsigned char *)k, n, h))
                return -1;
            w->accounted++;
        }
    }
    return 0;
}

/* -- decoding and masking ------------------------------------------------------------------ */

#include "utf8.h"

/* Decode s[0:n] into out (room for n code points); returns how many, and sets *bad when a
 * replacement was made. */
static Py_ssize_t decode_utf8(const unsigned char *s, Py_ssize_t n, Py_UCS4 *out, int *bad)
{
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n;)
        out[k++] = s[i] < 0x80 ? s[i++] : utf8_next(s, n, &i, bad);
    return k;
}

/* Whether p[i:n] (beginning at a character) is valid UTF-8. */
static int utf8_valid_from(const unsigned char *p, Py_ssize_t i, Py_ssize_t n)
{
    int bad = 0;
    while (i < n && !bad) {
        uint64_t x;
        if (i + 8 <= n && (memcpy(&x, p + i, 8), !(x & 0x8080808080808080ULL))) {
            i += 8;
            continue;
        }
        if (p[i] < 0x80)
            i++;
        else
            utf8_next(p, n, &i, &bad);
    }
    return !bad;
}

static inline int is_hex(unsigned c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Whether p[0:n] is ASCII. */
static int is_ascii(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        if (x & 0x8080808080808080ULL)
            return 0;
    }
    while (i < n && p[i] < 0x80)
        i++;
    return i == n;
}

/* coverage.shape of a line, read from its bytes and written as UTF-8, one character at a
 * time and only as far as asked: stripped, "0x" + hex digits -> "0xH", then runs of decimal
 * digits -> "N", the first SHAPE_MAX characters. The tests are Python's own (str.isspace,
 * re's \d: Unicode decimal digits). A shape is decoded, masked and written in one pass, and
 * a caller that needs only its first characters stops there (shaper_run's limit). */
typedef struct {
    Py_ssize_t i;           /* the next byte of the line */
    Py_ssize_t k, kb;       /* characters and bytes of shape written */
    Py_ssize_t keep, keepb; /* the same after the last character that is not a space */
    int run;                /* inside a run of digits */
    int zero;               /* the last character read was the digit 0 */
    int pend_h;             /* "0x" + hex digits read, its "H" not written yet */
    int bad;                /* a replacement was made so far */
    int ascii;              /* the line is ASCII: a byte a character (shaper_run_ascii) */
} Shaper;

/* str.isspace of one character (U+FFFD, what random bytes decode to most, answered here). */
static inline int is_space(Py_UCS4 c)
{
    return c != 0xFFFD && Py_UNICODE_ISSPACE(c);
}

static inline Py_UCS4 char_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i, int *bad)
{
    if (p[*i] < 0x80)
        return p[(*i)++];
    return utf8_next(p, n, i, bad);
}

static void shaper_start(Shaper *s, const unsigned char *p, Py_ssize_t n, int ascii)
{
    memset(s, 0, sizeof *s);
    s->ascii = ascii;
    if (ascii) {
        while (s->i < n && Py_UNICODE_ISSPACE(p[s->i]))
            s->i++;
        return;
    }
    while (s->i < n) { /* the leading spaces (never a replacement: bad stays as it was) */
        Py_ssize_t j = s->i;
        Py_UCS4 c = char_at(p, n, &j, &s->bad); /* (the macro reads its argument twice) */
        if (!is_space(c))
            break;
        s->i = j;
    }
}

/* shaper_run of a line of ASCII: the same shape, a byte a character. Where the last character
 * that is not a space was written is found once at the end, not at every character (words and
 * spaces alternate: a test each would be a branch mispredicted half the time). */
static void shaper_run_ascii(Shaper *s, const unsigned char *p, Py_ssize_t n, Py_ssize_t limit, unsigned char *out)
{
    Py_ssize_t i = s->i, k = s->k;
    int run = s->run, zero = s->zero;
    if (s->pend_h && k < limit) {
        out[k++] = 'H';
        s->pend_h = 0;
    }
    /* eight characters at a time while they hold no digit (a line of ASCII: no carry between bytes) */
    while (!zero && !s->pend_h && k + 8 <= limit && i + 8 <= n) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        if ((x + 0x5050505050505050ULL) & ~(x + 0x4646464646464646ULL) & 0x8080808080808080ULL)
            break; /* a byte of 0x30-0x39 */
        memcpy(out + k, &x, 8);
        k += 8;
        i += 8;
        run = 0;
    }
    while (k < limit && i < n) {
        unsigned c = p[i++];
        if (c - '0' < 10) {
            if (!run)
                out[k++] = 'N';
            run = 1;
            zero = c == '0';
            continue;
        }
        out[k++] = (unsigned char)c;
        if (c == 'x' && zero && i < n && is_hex(p[i])) { /* "0xH": its 0 began or went on a run */
            while (i < n && is_hex(p[i]))
                i++;
            if (k < limit)
                out[k++] = 'H';
            else
                s->pend_h = 1;
        }
        run = zero = 0;
    }
    Py_ssize_t keep = k;
    while (keep > 0 && Py_UNICODE_ISSPACE(out[keep - 1]))
        keep--;
    s->i = i;
    s->k = s->kb = k;
    s->keep = s->keepb = keep;
    s->run = run;
    s->zero = zero;
}

/* Write the shape on until `limit` characters or the line's end (the trailing spaces kept:
 * shaper_settle drops them). */
static void shaper_run(Shaper *s, const unsigned char *p, Py_ssize_t n, Py_ssize_t limit, unsigned char *out)
{
    if (s->ascii) {
        shaper_run_ascii(s, p, n, limit, out);
        return;
    }
    Py_ssize_t i = s->i, k = s->k, kb = s->kb;
    while (k < limit) {
        if (s->pend_h) {
            out[kb++] = 'H';
            k++;
            s->pend_h = 0;
            s->keep = k;
            s->keepb = kb;
            continue;
        }
        if (i >= n)
            break;
        Py_UCS4 c = char_at(p, n, &i, &s->bad);
        if (c - '0' < 10 || (c >= 128 && c != 0xFFFD && Py_UNICODE_ISDECIMAL(c))) {
            if (!s->run) {
                out[kb++] = 'N';
                k++;
                s->keep = k;
                s->keepb = kb;
            }
            s->run = 1;
            s->zero = c == '0';
            continue;
        }
        if (c == 'x' && s->zero && i < n && is_hex(p[i])) { /* "0xH": its 0 began or went on a run */
            while (i < n && is_hex(p[i]))
                i++;
            s->pend_h = 1;
        }
        kb += put_utf8(out + kb, c);
        k++;
        s->run = s->zero = 0;
        if (!is_space(c)) {
            s->keep = k;
            s->keepb = kb;
        }
    }
    s->i = i;
    s->k = k;
    s->kb = kb;
}

/* After shaper_run(limit): whether the shape is complete. Spaces written last are kept only
 * when a character that is not a space follows them in the line (the text is stripped). */
static int shaper_settle(Shaper *s, const unsigned char *p, Py_ssize_t n, Py_ssize_t limit)
{
    int trailing = s->k < limit;
    if (!trailing && s->keep < s->k) {
        int ignored = 0;
        Py_ssize_t j = s->i;
        trailing = 1; /* unless a character that is not a space follows */
        while (trailing && j < n) {
            Py_UCS4 c = char_at(p, n, &j, &ignored);
            trailing = is_space(c);
        }
    }
    if (trailing) {
        s->k = s->keep;
        s->kb = s->keepb;
        return 1;
    }
    return limit >= SHAPE_MAX;
}

/* Whether a needle of class c (of the mode word/bit) begins at p[i] (the line p[0:n]; digits
 * masked on both sides). */
static inline int needle_at(const Walker *w, int c, int word, uint64_t bit, const unsigned char *p, Py_ssize_t n,
                            Py_ssize_t i)
{
    unsigned x = p[i];
    if ((w->csingle[c][x >> 3] >> (x & 7)) & 1)
        return 1;
    if (i + 1 >= n)
        return 0;
    unsigned b = (x << 8) | p[i + 1];
    if (!((w->cbigram[c][b >> 3] >> (b & 7)) & 1))
        return 0;
    unsigned mb = ((unsigned)MASK[x] << 8) | MASK[p[i + 1]];
    for (int32_t j = w->head[mb]; j >= 0; j = w->nnext[j]) {
        Py_ssize_t len = w->nlen[j];
        if (!(w->nmodes[j][word] & bit) || i + len > n)
            continue;
        const unsigned char *t = w->ntext[j];
        Py_ssize_t q = 2;
        while (q < len && MASK[p[i + q]] == t[q])
            q++;
        if (q == len)
            return 1;
    }
    return 0;
}

/* Whether the bytes of a U+FFFD (EF BF BD) are at p[i] (the line p[0:n]). */
static inline int is_fffd(const unsigned char *p, Py_ssize_t n, Py_ssize_t i)
{
    return p[i] == 0xEF && i + 2 < n && p[i + 1] == 0xBF && p[i + 2] == 0xBD;
}

/* Whether a needle of mode `mode` is in the line p[0:n] (digits masked on both sides), a byte at
 * a time (two lookups in bit sets each; needle_at compares only where a needle's first two
 * bytes are). */
static int has_needle(const Walker *w, const unsigned char *p, Py_ssize_t n, int mode)
{
    const int c = w->cls[mode];
    if (c < 0)
        return 1;
    const int word = mode >> 6;
    const uint64_t bit = 1ULL << (mode & 63);
    for (Py_ssize_t i = 0; i < n; i++)
        if (needle_at(w, c, word, bit, p, n, i))
            return 1;
    return 0;
}

/* Whether an undecodable line holds what the exact path reads otherwise: a needle of the
 * binary mode, or the bytes of a U+FFFD (EF BF BD: the classifier then does not call the
 * line undecodable): compared only at the few bytes that can begin either. */
static int binary_refused(const Walker *w, const unsigned char *p, Py_ssize_t n)
{
    const int c = w->cls[BINARY_MODE];
    if (c < 0)
        return 1;
    const int word = BINARY_MODE >> 6;
    const uint64_t bit = 1ULL << (BINARY_MODE & 63);
    const unsigned char *first = w->bfirst;
    for (Py_ssize_t i = 0; i < n; i++)
        if (((first[p[i] >> 3] >> (p[i] & 7)) & 1) && (is_fffd(p, n, i) || needle_at(w, c, word, bit, p, n, i)))
            return 1;
    return 0;
}

/* Group the modes by their needles: per class, the raw bytes and byte pairs to look at. */
static int build_classes(Walker *w)
{
    unsigned char single[32], bigram[8192];
    for (int mode = 0; mode < 129; mode++) {
        if (mode < 128 && w->refuse[mode]) {
            w->cls[mode] = -1;
            continue;
        }
        const int word = mode >> 6;
        const uint64_t bit = 1ULL << (mode & 63);
        memset(single, 0, sizeof single);
        memset(bigram, 0, sizeof bigram);
        for (unsigned x = 0; x < 256; x++)
            if (w->single[MASK[x]][word] & bit)
                single[x >> 3] |= (unsigned char)(1u << (x & 7));
        for (int j = 0; j < w->nneedles; j++) {
            if (!(w->nmodes[j][word] & bit))
                continue;
            for (unsigned x = 0; x < 256; x++) {
                if (MASK[x] != w->ntext[j][0])
                    continue;
                for (unsigned y = 0; y < 256; y++)
                    if (MASK[y] == w->ntext[j][1]) {
                        unsigned b = (x << 8) | y;
                        bigram[b >> 3] |= (unsigned char)(1u << (b & 7));
                    }
            }
        }
        int c = 0;
        while (c < w->nclasses && (memcmp(w->csingle[c], single, 32) || memcmp(w->cbigram[c], bigram, 8192)))
            c++;
        if (c == w->nclasses) {
            void *ns = PyMem_Realloc(w->csingle, 32 * (size_t)(c + 1));
            if (ns)
                w->csingle = ns;
            void *nb = PyMem_Realloc(w->cbigram, 8192 * (size_t)(c + 1));
            if (nb)
                w->cbigram = nb;
            if (!ns || !nb) {
                PyErr_NoMemory();
                return -1;
            }
            memcpy(w->csingle[c], single, 32);
            memcpy(w->cbigram[c], bigram, 8192);
            w->nclasses++;
        }
        w->cls[mode] = (signed char)c;
    }
    /* the bytes that can begin a needle of an undecodable line, and EF (a U+FFFD written) */
    const int c = w->cls[BINARY_MODE];
    memset(w->bfirst, 0, sizeof w->bfirst);
    for (unsigned x = 0; x < 256; x++) {
        int begins = x == 0xEF;
        for (unsigned y = 0; c >= 0 && !begins && y < 256; y++) {
            unsigned b = (x << 8) | y;
            begins = ((w->csingle[c][x >> 3] >> (x & 7)) & 1) || ((w->cbigram[c][b >> 3] >> (b & 7)) & 1);
        }
        if (!begins)
            continue;
        w->bfirst[x >> 3] |= (unsigned char)(1u << (x & 7));
    }
    return 0;
}

/* -- the type ---------------------------------------------------------------------------------- */

static void Walker_dealloc(Walker *w)
{
    mirror_clear(w);
    PyMem_Free(w->tab);
    PyMem_Free(w->arena);
    for (int i = 0; i < w->nneedles; i++)
        PyMem_Free(w->ntext[i]);
    PyMem_Free(w->ntext);
    PyMem_Free(w->nlen);
    PyMem_Free(w->nmodes);
    PyMem_Free(w->nnext);
    PyMem_Free(w->csingle);
    PyMem_Free(w->cbigram);
    PyMem_Free(w->cps);
    PyMem_Free(w->shape8);
    PyMem_RawFree(w->text);
    PyMem_Free(w->touched);
    Py_XDECREF(w->dict);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* Walker(refuse: bytes[128], needles: [(masked needle: bytes, modes: bytes[24])], limit: int) */
static int Walker_init(Walker *w, PyObject *args, PyObject *kw)
{
    static char *names[] = {"refuse", "needles", "limit", NULL};
    Py_buffer refuse;
    PyObject *needles;
    Py_ssize_t limit;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*On", names, &refuse, &needles, &limit))
        return -1;
    if (refuse.len != 128 || limit < 1) {
        PyBuffer_Release(&refuse);
        PyErr_SetString(PyExc_ValueError, "refuse: 128 bytes; limit: positive");
        return -1;
    }
    memcpy(w->refuse, refuse.buf, 128);
    PyBuffer_Release(&refuse);
    PyObject *seq = PySequence_Fast(needles, "needles: a sequence");
    if (!seq)
        return -1;
    Py_ssize_t nn = PySequence_Fast_GET_SIZE(seq);
    w->ntext = PyMem_Calloc((size_t)nn + 1, sizeof *w->ntext);
    w->nlen = PyMem_Calloc((size_t)nn + 1, sizeof *w->nlen);
    w->nmodes = PyMem_Calloc((size_t)nn + 1, sizeof *w->nmodes);
    w->nnext = PyMem_Calloc((size_t)nn + 1, sizeof *w->nnext);
    w->limit = limit;
    w->cps = PyMem_Malloc(sizeof(Py_UCS4) * ((size_t)limit + 2));
    w->shape8 = PyMem_Malloc(4 * (SHAPE_MAX + 4));
    memset(w->head, 0xff, sizeof w->head);
    if (!w->ntext || !w->nlen || !w->nmodes || !w->nnext || !w->cps || !w->shape8) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < nn; i++) {
        const char *text, *modes;
        Py_ssize_t tlen, mlen;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "y#y#", &text, &tlen, &modes, &mlen)) {
            Py_DECREF(seq);
            return -1;
        }
        if (tlen < 1 || mlen != 24) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "a needle: at least one byte, and 24 bytes of modes");
            return -1;
        }
        uint64_t m[3];
        memcpy(m, modes, 24);
        if (tlen == 1) {
            for (int q = 0; q < 3; q++)
                w->single[(unsigned char)text[0]][q] |= m[q];
            continue;
        }
        int j = w->nneedles++;
        w->ntext[j] = PyMem_Malloc((size_t)tlen);
        if (!w->ntext[j]) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        memcpy(w->ntext[j], text, (size_t)tlen);
        w->nlen[j] = tlen;
        memcpy(w->nmodes[j], m, 24);
        unsigned bg = ((unsigned)(unsigned char)text[0] << 8) | (unsigned char)text[1];
        w->nnext[j] = w->head[bg];
        w->head[bg] = j;
    }
    Py_DECREF(seq);
    return build_classes(w);
}

/* The length of the line at p (to its newline, which lies before p + lim; -1: none; libc's memchr)
 * and whether it is ASCII. */
static Py_ssize_t line_end(const unsigned char *p, Py_ssize_t lim, int *ascii)
{
    const unsigned char *q = memchr(p, '\n', (size_t)lim);
    if (!q)
        return -1;
    *ascii = is_ascii(p, q - p);
    return q - p;
}

/* Whether the line p[0:len] (ASCII or not, as line_end found) holds what the exact path reads
 * otherwise: an ASCII line by its first character and needles; any other line is refused unless
 * the stream is binary, and then by the binary mode's needles. (A line that is valid UTF-8 is
 * also the exact path's: the caller checks that, where it decodes the line.) */
static inline int refused(const Walker *w, const unsigned char *p, Py_ssize_t len, int ascii,
                          int binary)
{
    return ascii ? w->refuse[p[0]] || has_needle(w, p, len, p[0])
                 /* a U+FFFD written in the text: the exact path reads it */
                 : !binary || binary_refused(w, p, len);
}

/* line_end, and whether the line is refused (where its length is more than 0 and at most the
 * limit: the caller's next question). */
static inline Py_ssize_t line_judged(const Walker *w, const unsigned char *p, Py_ssize_t lim, int binary, int *ascii,
                                     int *ref)
{
    Py_ssize_t len = line_end(p, lim, ascii);
    *ref = len > 0 && len <= w->limit && refused(w, p, len, *ascii, binary);
    return len;
}

static int touch(Walker *w, Entry *e)
{
    if (e->walk == w->walk)
        return 0;
    if (w->ntouched == w->touched_cap) {
        Py_ssize_t ncap = w->touched_cap ? w->touched_cap * 2 : 256;
        Py_ssize_t *nt = PyMem_Realloc(w->touched, sizeof(Py_ssize_t) * (size_t)ncap);
        if (!nt) {
            PyErr_NoMemory();
            return -1;
        }
        w->touched = nt;
        w->touched_cap = ncap;
    }
    w->touched[w->ntouched++] = e - w->tab;
    e->walk = w->walk;
    e->count = 0;
    return 0;
}

/* The GIL, let go while a walk reads lines and taken back to make or grow what Python
 * allocates (an entry of the mirror, the touched list, an example): a thread reading the next
 * block then runs beside the walk instead of waiting for it. It is let go only once a walk has
 * taken LET_GO_AFTER lines: a walk of a line or two between records would pay more in handing
 * the GIL over than it frees. ts: NULL while it is held. */
#define LET_GO_AFTER 64
#define GIL_TAKE(ts)                 \
    do {                             \
        if (ts) {                    \
            PyEval_RestoreThread(ts); \
            (ts) = NULL;             \
        }                            \
    } while (0)
#define GIL_LET_GO(ts)                  \
    do {                                \
        if (!(ts))                      \
            (ts) = PyEval_SaveThread(); \
    } while (0)

/* walk(buf, pos, end, line, shapes: dict, binary: bool, cap: int, overflow: str, blanks=False)
 *   -> (pos, lines, decode_errors, overflowed, entries, blank_lines)
 * entries: [(key, count, first line or None, example or None, made as the overflow bucket)],
 * in the order the walk first met them (new keys: in the order to add them to `shapes`).
 * blanks: empty lines between lines it takes are taken too (each a `blank` event on the exact
 * path), and counted apart (blank_lines, among the lines); the walk never ends with one. */
static PyObject *Walker_walk(Walker *w, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end, cap;
    long long line;
    PyObject *dict, *overflow_key;
    int binary, take_blanks = 0;
    if (!PyArg_ParseTuple(args, "y*nnLO!pnU|p", &view, &pos, &end, &line, &PyDict_Type, &dict, &binary, &cap,
                          &overflow_key, &take_blanks))
        return NULL;
    PyObject *out = NULL, *entries = NULL;
    PyThreadState *ts = NULL;
    if (pos < 0 || end > view.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie in the buffer");
        goto done;
    }
    if (mirror_sync(w, dict) < 0)
        goto done;
    Py_ssize_t olen;
    const char *okey = PyUnicode_AsUTF8AndSize(overflow_key, &olen);
    if (!okey)
        goto done;
    uint64_t ohash = hash_bytes((const unsigned char *)okey, olen);
    w->walk++;
    w->ntouched = 0;
    const unsigned char *buf = view.buf;
    long long n = 0, bad_lines = 0, blanks = 0, pending = 0; /* pending: empty lines not yet followed by one taken */
    Py_ssize_t before_blanks = pos;
    int overflowed = 0;
    Entry *bucket = NULL, *bucket_tab = NULL; /* the overflow bucket's entry, while the table stays */
    while (pos < end) {
        if (n >= LET_GO_AFTER)
            GIL_LET_GO(ts);
        const unsigned char *p = buf + pos;
        int ascii;
        if (take_blanks && *p == '\n') {
            if (!pending)
                before_blanks = pos;
            pending++;
            pos++;
            continue;
        }
        int ref;
        Py_ssize_t len = line_judged(w, p, end - pos, binary, &ascii, &ref);
        if (len <= 0 || len > w->limit || ref) /* no newline before `end`, a blank line, a line too long */
            break;
        Shaper sh;
        shaper_start(&sh, p, len, ascii);
        shaper_run(&sh, p, len, SHAPE_MAX, w->shape8);
        shaper_settle(&sh, p, len, SHAPE_MAX);
        /* valid UTF-8: the exact path reads it */
        if (!ascii && !sh.bad && utf8_valid_from(p, sh.i, len))
            break;
        if (!ascii)
            bad_lines++;
        n += pending; /* the empty lines before this one: taken with it */
        blanks += pending;
        pending = 0;
        const unsigned char *key = w->shape8;
        Py_ssize_t klen = sh.kb;
        uint64_t h = hash_bytes(key, klen);
        Entry *e = mirror_find(w, key, klen, h);
        int made = 0;
        if (!e && w->accounted >= cap) {
            overflowed = 1;
            if (!bucket || bucket_tab != w->tab) {
                GIL_TAKE(ts);
                e = mirror_find(w, (const unsigned char *)okey, olen, ohash);
                if (!e) {
                    e = mirror_add(w, (const unsigned char *)okey, olen, ohash);
                    if (!e)
                        goto done;
                    e->overflow = 1;
                    made = 1;
                }
                bucket = e;
                bucket_tab = w->tab;
            }
            e = bucket;
        } else if (!e) {
            GIL_TAKE(ts);
            e = mirror_add(w, key, klen, h);
            if (!e)
                goto done;
            made = 1;
        }
        if (e->walk != w->walk && w->ntouched == w->touched_cap)
            GIL_TAKE(ts); /* the touched list grows */
        if (touch(w, e) < 0)
            goto done;
        if (made) {
            w->accounted++;
            e->first = line + n;
            if (ascii) {
                e->example = PyUnicode_FromStringAndSize((const char *)p, len < EXAMPLE_MAX ? len : EXAMPLE_MAX);
            } else {
                int ignored = 0;
                Py_ssize_t ncp = decode_utf8(p, len, w->cps, &ignored);
                e->example = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, w->cps,
                                                       ncp < EXAMPLE_MAX ? ncp : EXAMPLE_MAX);
            }
            if (!e->example)
                goto done;
        }
        e->count++;
        n++;
        pos += len + 1;
    }
    if (pending)
        pos = before_blanks; /* empty lines last: left to the caller's scan */
    GIL_TAKE(ts);
    entries = PyList_New(w->ntouched);
    if (!entries)
        goto done;
    for (Py_ssize_t t = 0; t < w->ntouched; t++) {
        Entry *e = &w->tab[w->touched[t]];
        PyObject *item = PyTuple_New(5);
        if (!item)
            goto done;
        PyList_SET_ITEM(entries, t, item);
        PyObject *k = PyUnicode_DecodeUTF8(w->arena + e->off, e->len, NULL);
        PyObject *c = PyLong_FromLongLong(e->count);
        PyObject *f = e->first >= 0 ? PyLong_FromLongLong(e->first) : Py_NewRef(Py_None);
        PyObject *x = e->example ? e->example : Py_NewRef(Py_None);
        e->example = NULL;
        e->first = -1;
        PyTuple_SET_ITEM(item, 0, k);
        PyTuple_SET_ITEM(item, 1, c);
        PyTuple_SET_ITEM(item, 2, f);
        PyTuple_SET_ITEM(item, 3, x);
        PyTuple_SET_ITEM(item, 4, Py_NewRef(e->overflow ? Py_True : Py_False));
        e->overflow = 0;
        if (!k || !c || !f)
            goto done;
    }
    out = Py_BuildValue("(nLLOOL)", pos, n, bad_lines, overflowed ? Py_True : Py_False, entries, blanks);
done:
    GIL_TAKE(ts);
    if (!out) { /* keep the mirror exact: what this walk added is not in the dict */
        mirror_clear(w);
    }
    Py_XDECREF(entries);
    PyBuffer_Release(&view);
    return out;
}

/* Room for `need` bytes in the walker's text buffer; -1 when memory is short (the buffer is then
 * as it was). Runs without the GIL. */
static int text_room(Walker *w, Py_ssize_t need)
{
    if (need <= w->text_cap)
        return 0;
    Py_ssize_t ncap = w->text_cap ? w->text_cap : 1 << 16;
    while (ncap < need)
        ncap *= 2;
    unsigned char *nt = PyMem_RawRealloc(w->text, (size_t)ncap);
    if (!nt)
        return -1;
    w->text = nt;
    w->text_cap = ncap;
    return 0;
}

/* texts(buf, pos, end, binary, decode=True, blanks=False) -> (pos, lines, decode_errors, text)
 * The lines walk() would take, from pos on, without their shapes: text holds each as the
 * exact path's event has it (an undecodable line decoded with U+FFFD replacements), in
 * UTF-8, followed by a newline; None unless `decode` (for a caller that decodes the lines
 * itself). blanks: as walk's (empty lines between lines taken are taken too, each an empty
 * line of text; the run never ends with one). The walk touches no Python object: once a run
 * is long (LET_GO_AFTER lines) other threads run beside it. */
static PyObject *Walker_texts(Walker *w, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end;
    int binary, decode = 1, take_blanks = 0;
    if (!PyArg_ParseTuple(args, "y*nnp|pp", &view, &pos, &end, &binary, &decode, &take_blanks))
        return NULL;
    PyObject *out = NULL;
    if (pos < 0 || end > view.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie in the buffer");
        goto done;
    }
    const unsigned char *buf = view.buf;
    const Py_ssize_t start = pos;
    Py_ssize_t tlen = 0;
    long long n = 0, bad_lines = 0, pending = 0; /* pending: empty lines not yet followed by one taken */
    Py_ssize_t before_blanks = pos;
    int nomem = 0;
    PyThreadState *ts = NULL; /* the GIL, let go once the run is long (GIL_LET_GO) */
    Py_ssize_t run = pos; /* ASCII lines from here to pos are their text as they are: copied at once */
    while (pos < end) {
        if (n >= LET_GO_AFTER)
            GIL_LET_GO(ts);
        const unsigned char *p = buf + pos;
        if (take_blanks && *p == '\n') {
            if (!pending)
                before_blanks = pos;
            pending++;
            pos++;
            continue;
        }
        int ascii, ref;
        Py_ssize_t len = line_judged(w, p, end - pos, binary, &ascii, &ref);
        if (len <= 0 || len > w->limit || ref || (!ascii && utf8_valid_from(p, 0, len)))
            break;
        n += pending; /* the empty lines before this one: taken with it */
        pending = 0;
        if (!ascii && !decode)
            bad_lines++;
        else if (!ascii) {
            if (text_room(w, tlen + (pos - run) + 3 * len + 5) < 0) {
                nomem = 1;
                break;
            }
            memcpy(w->text + tlen, buf + run, (size_t)(pos - run));
            tlen += pos - run;
            tlen += decode_to_utf8(p, len, w->text + tlen);
            w->text[tlen++] = '\n';
            run = pos + len + 1;
            bad_lines++;
        }
        n++;
        pos += len + 1;
    }
    if (pending) /* empty lines last: left to the caller's scan */
        pos = before_blanks;
    if (decode && !nomem && bad_lines && pos > run) {
        if (text_room(w, tlen + (pos - run)) < 0)
            nomem = 1;
        else {
            memcpy(w->text + tlen, buf + run, (size_t)(pos - run));
            tlen += pos - run;
        }
    }
    GIL_TAKE(ts);
    if (nomem)
        PyErr_NoMemory();
    else if (!decode)
        out = Py_BuildValue("(nLLO)", pos, n, bad_lines, Py_None);
    else if (!bad_lines) /* ASCII only: the text is the range itself */
        out = Py_BuildValue("(nLLy#)", pos, n, bad_lines, (const char *)buf + start, pos - start);
    else
        out = Py_BuildValue("(nLLy#)", pos, n, bad_lines, (const char *)w->text, tlen);
    if (w->text_cap > ((Py_ssize_t)64 << 20)) { /* an unusually large range: do not keep its buffer */
        PyMem_RawFree(w->text);
        w->text = NULL;
        w->text_cap = 0;
    }
done:
    PyBuffer_Release(&view);
    return out;
}

/* needle(line, mode) -> whether the walker finds a needle of `mode` in the line (for tests; the
 * binary mode, 128: or the bytes of a U+FFFD) */
static PyObject *Walker_needle(Walker *w, PyObject *args)
{
    Py_buffer v;
    int mode;
    if (!PyArg_ParseTuple(args, "y*i", &v, &mode))
        return NULL;
    if (mode < 0 || mode > BINARY_MODE) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_ValueError, "mode: 0 to 128");
        return NULL;
    }
    const unsigned char *p = v.buf;
    const unsigned char *nl = memchr(p, '\n', (size_t)v.len);
    Py_ssize_t n = nl ? nl - p : v.len;
    int r = mode == BINARY_MODE ? binary_refused(w, p, n) : has_needle(w, p, n, mode);
    PyBuffer_Release(&v);
    return PyBool_FromLong(r);
}

static PyMethodDef Walker_methods[] = {
    {"needle", (PyCFunction)Walker_needle, METH_VARARGS,
     "needle(line, mode) -> whether a needle of the mode is in the line (up to its first newline)"},
    {"texts", (PyCFunction)Walker_texts, METH_VARARGS,
     "texts(buf, pos, end, binary, decode=True, blanks=False) -> (pos, lines, decode_errors, text): the lines walk() takes, as text "
     "(None unless decode)"},
    {"walk", (PyCFunction)Walker_walk, METH_VARARGS,
     "walk(buf, pos, end, line, shapes, binary, cap, overflow, blanks=False) -> (pos, lines, decode_errors, overflowed, "
     "entries, blank_lines)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "logforensics.native._native.Walker",
    .tp_basicsize = sizeof(Walker),
    .tp_dealloc = (destructor)Walker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Takes runs of lines that can only be unrecognised text; see the module.",
    .tp_methods = Walker_methods,
    .tp_init = (initproc)Walker_init,
    .tp_new = PyType_GenericNew,
};

/* The shape of a line's bytes (n <= 4 * SHAPE_MAX + 16 written at most). */
static PyObject *shape_str(const unsigned char *k, Py_ssize_t n)
{
    return PyUnicode_DecodeUTF8((const char *)k, n, NULL);
}

static PyObject *py_shape(PyObject *self, PyObject *arg)
{
    /* coverage.shape of a str, as the walker computes it from its UTF-8 (for tests) */
    (void)self;
    Py_ssize_t n;
    const char *text = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, &n) : NULL;
    if (!text) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a str");
        return NULL;
    }
    unsigned char out[4 * (SHAPE_MAX + 4)];
    Shaper sh;
    shaper_start(&sh, (const unsigned char *)text, n, is_ascii((const unsigned char *)text, n));
    shaper_run(&sh, (const unsigned char *)text, n, SHAPE_MAX, out);
    shaper_settle(&sh, (const unsigned char *)text, n, SHAPE_MAX);
    return shape_str(out, sh.kb);
}

static PyObject *py_shape_prefix(PyObject *self, PyObject *args)
{
    /* (the first `limit` characters of the shape of the bytes decoded with replacement,
     * whether that is the whole shape, the whole shape written on from there, whether a
     * byte was replaced), as the walker computes them (for tests) */
    (void)self;
    Py_buffer v;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "y*n", &v, &limit))
        return NULL;
    if (limit < 1 || limit > SHAPE_MAX) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_ValueError, "limit: 1 to SHAPE_MAX");
        return NULL;
    }
    const unsigned char *p = v.buf;
    unsigned char out[4 * (SHAPE_MAX + 4)];
    Shaper sh;
    shaper_start(&sh, p, v.len, is_ascii(p, v.len));
    shaper_run(&sh, p, v.len, limit, out);
    int complete = shaper_settle(&sh, p, v.len, limit);
    PyObject *prefix = shape_str(out, sh.kb);
    if (!complete) {
        shaper_run(&sh, p, v.len, SHAPE_MAX, out);
        shaper_settle(&sh, p, v.len, SHAPE_MAX);
    }
    int bad = sh.bad || !utf8_valid_from(p, sh.i, v.len);
    PyBuffer_Release(&v);
    PyObject *whole = shape_str(out, sh.kb);
    PyObject *r = prefix && whole ? Py_BuildValue("(OOOO)", prefix, complete ? Py_True : Py_False, whole,
                                                  bad ? Py_True : Py_False) : NULL;
    Py_XDECREF(prefix);
    Py_XDECREF(whole);
    return r;
}

static PyObject *py_decode(PyObject *self, PyObject *args)
{
    /* decode(data) -> (bytes.decode("utf-8", "replace") as the walker computes it,
     * whether a byte was replaced, the same as texts() writes it in UTF-8) (for tests) */
    (void)self;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "y*", &v))
        return NULL;
    Py_UCS4 *cps = PyMem_Malloc(sizeof(Py_UCS4) * ((size_t)v.len + 2));
    unsigned char *line = PyMem_Malloc((size_t)v.len + 40), *u8 = PyMem_Malloc(3 * (size_t)v.len + 72);
    PyObject *r = NULL;
    if (!cps || !line || !u8) {
        PyErr_NoMemory();
        goto done;
    }
    int bad = 0;
    Py_ssize_t k = decode_utf8(v.buf, v.len, cps, &bad);
    memcpy(line, v.buf, (size_t)v.len);
    line[v.len] = '\n'; /* as a line of a buffer ends, then what would continue a sequence */
    memset(line + v.len + 1, 0x80, 39);
    Py_ssize_t nb = decode_to_utf8(line, v.len, u8);
    PyObject *s = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, cps, k);
    r = s ? Py_BuildValue("(NOy#)", s, bad ? Py_True : Py_False, (const char *)u8, nb) : NULL;
done:
    PyMem_Free(cps);
    PyMem_Free(line);
    PyMem_Free(u8);
    PyBuffer_Release(&v);
    return r;
}

static PyMethodDef module_methods[] = {
    {"shape", py_shape, METH_O, "coverage.shape(text), in C."},
    {"shape_prefix", py_shape_prefix, METH_VARARGS,
     "shape_prefix(data, limit) -> (prefix, complete, shape, undecodable): the walker's shape of a line's bytes."},
    {"decode", py_decode, METH_VARARGS,
     "decode(data) -> (bytes.decode('utf-8', 'replace'), whether a byte was replaced, the text in UTF-8 "
     "as texts() writes it), in C."},
    {NULL, NULL, 0, NULL},
};

/* Walker, shape, shape_prefix, decode, SHAPE_MAX and EXAMPLE_MAX added to the module m (``_native``); 0, or -1 with an
 * exception set. */
int other_module_add(PyObject *m)
{
    if (native_add(m, &WalkerType, "Walker", module_methods) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "SHAPE_MAX", SHAPE_MAX) < 0 || PyModule_AddIntConstant(m, "EXAMPLE_MAX", EXAMPLE_MAX) < 0)
        return -1;
    return 0;
}
