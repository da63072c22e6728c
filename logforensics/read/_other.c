/* Runs of unrecognised lines, in C: how many, and how many of each coverage shape.
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
 * It knows no log format of its own.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SHAPE_MAX 160   /* characters of a shape (coverage.shape) */
#define EXAMPLE_MAX 200 /* characters of an example (coverage.on_other) */
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
    /* scratch */
    Py_UCS4 *cps;
    Py_UCS4 *shape4;
    unsigned char *shape8;
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

/* bytes.decode("utf-8", "replace"): one U+FFFD per maximal subpart of an invalid
 * sequence (what CPython does). A table-driven automaton: random bytes make a decoder's
 * branches unpredictable, so each byte is one lookup and a few selects. States: 0 at a
 * character's start; 1-7 inside a sequence, by the bytes still needed and the range the
 * next one must lie in (after E0, ED, F0, F4 narrower than 80-BF). */
enum { D_NEXT = 7, D_N = 3, D_V1 = 5, D_V2 = 7, D_LEAD = 1 << 9, D_BAD = 1 << 10 };
enum { V_FFFD = 0, V_BYTE = 1, V_CP = 2 };
static uint16_t DECODE[8][256];
static unsigned char LEADMASK[256];

static unsigned lead_state(unsigned b)
{
    if (b >= 0xC2 && b <= 0xDF)
        return 1;
    if (b == 0xE0)
        return 3;
    if (b == 0xED)
        return 4;
    if (b >= 0xE1 && b <= 0xEF)
        return 2;
    if (b == 0xF0)
        return 6;
    if (b == 0xF4)
        return 7;
    if (b >= 0xF1 && b <= 0xF3)
        return 5;
    return 0;
}

static uint16_t entry(unsigned next, unsigned n, unsigned v1, unsigned v2, int lead, int bad)
{
    return (uint16_t)(next | n << D_N | v1 << D_V1 | v2 << D_V2 | (lead ? D_LEAD : 0) | (bad ? D_BAD : 0));
}

static void build_decoder(void)
{
    static const unsigned lo[8] = {0, 0x80, 0x80, 0xA0, 0x80, 0x80, 0x90, 0x80};
    static const unsigned hi[8] = {0, 0xBF, 0xBF, 0xBF, 0x9F, 0xBF, 0xBF, 0x8F};
    static const unsigned after[8] = {0, 0, 1, 1, 1, 2, 2, 2};
    for (unsigned b = 0; b < 256; b++) {
        unsigned ls = lead_state(b);
        LEADMASK[b] = (unsigned char)(!ls ? 0 : b < 0xE0 ? 0x1F : b < 0xF0 ? 0x0F : 0x07);
        /* from a character's start: the byte itself, a lead, or an invalid byte */
        uint16_t start = b < 0x80 ? entry(0, 1, V_BYTE, 0, 0, 0)
                         : ls ? entry(ls, 0, 0, 0, 1, 0)
                              : entry(0, 1, V_FFFD, 0, 0, 1);
        DECODE[0][b] = start;
        for (unsigned s = 1; s < 8; s++) {
            if (b >= lo[s] && b <= hi[s]) { /* the sequence goes on, or ends here */
                DECODE[s][b] = after[s] ? entry(after[s], 0, 0, 0, 0, 0) : entry(0, 1, V_CP, 0, 0, 0);
                continue;
            }
            /* U+FFFD for the bytes so far, then this byte from a character's start */
            if (b < 0x80)
                DECODE[s][b] = entry(0, 2, V_FFFD, V_BYTE, 0, 1);
            else if (ls)
                DECODE[s][b] = entry(ls, 1, V_FFFD, 0, 1, 1);
            else
                DECODE[s][b] = entry(0, 2, V_FFFD, V_FFFD, 0, 1);
        }
    }
}

/* Decode s[0:n] into out (room for n + 1 code points); returns how many, and sets *bad
 * when a replacement was made. */
static Py_ssize_t decode_utf8(const unsigned char *s, Py_ssize_t n, Py_UCS4 *out, int *bad)
{
    Py_ssize_t k = 0;
    unsigned state = 0, badbits = 0;
    Py_UCS4 cp = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned b = s[i];
        unsigned e = DECODE[state][b];
        Py_UCS4 ncp = (e & D_LEAD) ? (b & LEADMASK[b]) : ((cp << 6) | (b & 0x3F));
        Py_UCS4 vals[3] = {0xFFFD, b, ncp};
        out[k] = vals[(e >> D_V1) & 3];
        out[k + 1] = vals[(e >> D_V2) & 3];
        k += (e >> D_N) & 3;
        badbits |= e;
        cp = ncp;
        state = e & D_NEXT;
    }
    if (state) { /* the input ends inside a sequence */
        out[k++] = 0xFFFD;
        badbits |= D_BAD;
    }
    if (badbits & D_BAD)
        *bad = 1;
    return k;
}

static int is_hex(Py_UCS4 c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* coverage.shape of the text s[0:n]: stripped, "0x" + hex digits -> "0xH", then runs of
 * decimal digits -> "N", the first SHAPE_MAX characters. Returns the shape's length. The
 * tests are Python's own (str.isspace, re's \\d: Unicode decimal digits). */
#define SHAPE_OF(NAME, IN, OUT)                                                                    \
    static Py_ssize_t NAME(const IN *s, Py_ssize_t n, OUT *out)                                   \
    {                                                                                              \
        Py_ssize_t a = 0, b = n, k = 0;                                                            \
        while (a < b && Py_UNICODE_ISSPACE(s[a]))                                                  \
            a++;                                                                                   \
        while (b > a && Py_UNICODE_ISSPACE(s[b - 1]))                                              \
            b--;                                                                                   \
        int run = 0;                                                                               \
        for (Py_ssize_t i = a; i < b;) {                                                           \
            Py_UCS4 c = s[i];                                                                      \
            int hex = c == '0' && i + 2 < b && s[i + 1] == 'x' && is_hex(s[i + 2]);                \
            if (hex) { /* "0xH": its 0 begins or goes on a run of digits */                        \
                if (!run)                                                                          \
                    out[k++] = 'N';                                                                \
                if (k >= SHAPE_MAX)                                                                \
                    return k;                                                                      \
                out[k++] = 'x';                                                                    \
                if (k >= SHAPE_MAX)                                                                \
                    return k;                                                                      \
                out[k++] = 'H';                                                                    \
                run = 0;                                                                           \
                i += 2;                                                                            \
                while (i < b && is_hex(s[i]))                                                      \
                    i++;                                                                           \
            } else if (c < 128 ? c - '0' < 10 : c != 0xFFFD && Py_UNICODE_ISDECIMAL(c)) {                         \
                if (!run)                                                                          \
                    out[k++] = 'N';                                                                \
                run = 1;                                                                           \
                i++;                                                                               \
            } else {                                                                               \
                out[k++] = (OUT)c;                                                                 \
                run = 0;                                                                           \
                i++;                                                                               \
            }                                                                                      \
            if (k >= SHAPE_MAX)                                                                    \
                return k;                                                                          \
        }                                                                                          \
        return k;                                                                                  \
    }
SHAPE_OF(shape_of, Py_UCS4, Py_UCS4)
SHAPE_OF(shape_of_ascii, unsigned char, unsigned char)

static Py_ssize_t utf8_of(const Py_UCS4 *cps, Py_ssize_t n, unsigned char *out)
{
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = cps[i];
        if (c < 0x80) {
            out[k++] = (unsigned char)c;
        } else if (c < 0x800) {
            out[k++] = (unsigned char)(0xC0 | (c >> 6));
            out[k++] = (unsigned char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            out[k++] = (unsigned char)(0xE0 | (c >> 12));
            out[k++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            out[k++] = (unsigned char)(0x80 | (c & 0x3F));
        } else {
            out[k++] = (unsigned char)(0xF0 | (c >> 18));
            out[k++] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
            out[k++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            out[k++] = (unsigned char)(0x80 | (c & 0x3F));
        }
    }
    return k;
}

/* Whether a needle of mode `mode` is in the line p[0:n] (digits masked on both sides). */
static int has_needle(const Walker *w, const unsigned char *p, Py_ssize_t n, int mode)
{
    const int c = w->cls[mode];
    if (c < 0)
        return 1;
    const int word = mode >> 6;
    const uint64_t bit = 1ULL << (mode & 63);
    const unsigned char *single = w->csingle[c], *bigram = w->cbigram[c];
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned x = p[i];
        if ((single[x >> 3] >> (x & 7)) & 1)
            return 1;
        if (i + 1 >= n)
            break;
        unsigned b = (x << 8) | p[i + 1];
        if (!((bigram[b >> 3] >> (b & 7)) & 1))
            continue;
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
    }
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
    PyMem_Free(w->shape4);
    PyMem_Free(w->shape8);
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
    w->shape4 = PyMem_Malloc(sizeof(Py_UCS4) * (SHAPE_MAX + 4));
    w->shape8 = PyMem_Malloc(4 * (SHAPE_MAX + 4));
    memset(w->head, 0xff, sizeof w->head);
    if (!w->ntext || !w->nlen || !w->nmodes || !w->nnext || !w->cps || !w->shape4 || !w->shape8) {
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

/* walk(buf, pos, end, line, shapes: dict, binary: bool, cap: int, overflow: str)
 *   -> (pos, lines, decode_errors, overflowed, entries)
 * entries: [(key, count, first line or None, example or None, made as the overflow bucket)],
 * in the order the walk first met them (new keys: in the order to add them to `shapes`). */
static PyObject *Walker_walk(Walker *w, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end, cap;
    long long line;
    PyObject *dict, *overflow_key;
    int binary;
    if (!PyArg_ParseTuple(args, "y*nnLO!pnU", &view, &pos, &end, &line, &PyDict_Type, &dict, &binary, &cap,
                          &overflow_key))
        return NULL;
    PyObject *out = NULL, *entries = NULL;
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
    long long n = 0, bad_lines = 0;
    int overflowed = 0;
    while (pos < end) {
        const unsigned char *p = buf + pos;
        const unsigned char *nl = memchr(p, '\n', (size_t)(end - pos));
        if (!nl)
            break;
        Py_ssize_t len = nl - p;
        if (len == 0 || len > w->limit)
            break;
        int ascii = 1;
        {
            Py_ssize_t i = 0;
            for (; i + 8 <= len; i += 8) {
                uint64_t x;
                memcpy(&x, p + i, 8);
                if (x & 0x8080808080808080ULL)
                    break;
            }
            for (; i < len; i++)
                if (p[i] & 0x80) {
                    ascii = 0;
                    break;
                }
        }
        const unsigned char *key;
        Py_ssize_t klen, ncp = 0;
        if (ascii) {
            if (w->refuse[p[0]] || has_needle(w, p, len, p[0]))
                break;
            klen = shape_of_ascii(p, len, w->shape8);
        } else {
            if (!binary)
                break;
            int bad = 0;
            ncp = decode_utf8(p, len, w->cps, &bad);
            /* valid UTF-8, or a U+FFFD written in the text: the exact path reads it */
            if (!bad || has_needle(w, p, len, BINARY_MODE))
                break;
            int literal = 0;
            for (const unsigned char *q = p; !literal && (q = memchr(q, 0xEF, (size_t)(p + len - q))) != NULL; q++)
                literal = q + 2 < p + len && q[1] == 0xBF && q[2] == 0xBD;
            if (literal)
                break;
            bad_lines++;
            Py_ssize_t ns = shape_of(w->cps, ncp, w->shape4);
            klen = utf8_of(w->shape4, ns, w->shape8);
        }
        key = w->shape8;
        uint64_t h = hash_bytes(key, klen);
        Entry *e = mirror_find(w, key, klen, h);
        int made = 0;
        if (!e && w->accounted >= cap) {
            overflowed = 1;
            e = mirror_find(w, (const unsigned char *)okey, olen, ohash);
            if (!e) {
                e = mirror_add(w, (const unsigned char *)okey, olen, ohash);
                if (!e)
                    goto done;
                e->overflow = 1;
                made = 1;
            }
        } else if (!e) {
            e = mirror_add(w, key, klen, h);
            if (!e)
                goto done;
            made = 1;
        }
        if (touch(w, e) < 0)
            goto done;
        if (made) {
            w->accounted++;
            e->first = line + n;
            if (ascii)
                e->example = PyUnicode_FromStringAndSize((const char *)p, len < EXAMPLE_MAX ? len : EXAMPLE_MAX);
            else
                e->example = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, w->cps,
                                                       ncp < EXAMPLE_MAX ? ncp : EXAMPLE_MAX);
            if (!e->example)
                goto done;
        }
        e->count++;
        n++;
        pos = nl + 1 - buf;
    }
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
    out = Py_BuildValue("(nLLOO)", pos, n, bad_lines, overflowed ? Py_True : Py_False, entries);
done:
    if (!out) { /* keep the mirror exact: what this walk added is not in the dict */
        mirror_clear(w);
    }
    Py_XDECREF(entries);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef Walker_methods[] = {
    {"walk", (PyCFunction)Walker_walk, METH_VARARGS,
     "walk(buf, pos, end, line, shapes, binary, cap, overflow) -> (pos, lines, decode_errors, overflowed, entries)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "logforensics.read._other.Walker",
    .tp_basicsize = sizeof(Walker),
    .tp_dealloc = (destructor)Walker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Takes runs of lines that can only be unrecognised text; see the module.",
    .tp_methods = Walker_methods,
    .tp_init = (initproc)Walker_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *py_shape(PyObject *self, PyObject *arg)
{
    /* coverage.shape of a str, as the walker computes it (for tests) */
    (void)self;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "a str");
        return NULL;
    }
    Py_UCS4 *cps = PyUnicode_AsUCS4Copy(arg);
    if (!cps)
        return NULL;
    Py_UCS4 out[SHAPE_MAX + 4];
    Py_ssize_t k = shape_of(cps, PyUnicode_GET_LENGTH(arg), out);
    PyMem_Free(cps);
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, out, k);
}

static PyObject *py_decode(PyObject *self, PyObject *arg)
{
    /* bytes.decode("utf-8", "replace"), as the walker computes it (for tests) */
    (void)self;
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_UCS4 *cps = PyMem_Malloc(sizeof(Py_UCS4) * ((size_t)v.len + 2));
    if (!cps) {
        PyBuffer_Release(&v);
        return PyErr_NoMemory();
    }
    int bad = 0;
    Py_ssize_t k = decode_utf8(v.buf, v.len, cps, &bad);
    PyObject *s = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, cps, k);
    PyMem_Free(cps);
    PyBuffer_Release(&v);
    return s ? Py_BuildValue("(NO)", s, bad ? Py_True : Py_False) : NULL;
}

static PyMethodDef module_methods[] = {
    {"shape", py_shape, METH_O, "coverage.shape(text), in C."},
    {"decode", py_decode, METH_O, "(bytes.decode('utf-8', 'replace'), whether a byte was replaced), in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_other", "Runs of unrecognised lines counted in C (optional speed-up).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__other(void)
{
    build_decoder();
    if (PyType_Ready(&WalkerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&WalkerType);
    if (PyModule_AddObject(m, "Walker", (PyObject *)&WalkerType) < 0) {
        Py_DECREF(&WalkerType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "SHAPE_MAX", SHAPE_MAX) < 0 || PyModule_AddIntConstant(m, "EXAMPLE_MAX", EXAMPLE_MAX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
