/* Apply stored line-shape plans to a block of log lines, in C, writing each taken line's
 * record as a row of output text: the hot loop of `parse --format jsonl`.
 *
 * Python registers, per digit-masked shape, a template (read/emit.py builds it from the
 * grammar's plan): literal fragments of output interleaved with spans of the line to
 * insert with a conversion, the line number and the line's text. scan() walks whole
 * lines: it looks each line's shape up, fills the template and appends the result to one
 * output buffer. It knows no log format of its own. A line it cannot take (unknown shape,
 * a value its conversion would not read exactly as the Python converter does) stops the
 * scan there, so the caller can read that line on the exact path, in order, and scan on
 * after it.
 *
 * The conversions give exactly what json.dumps(value, ensure_ascii=False) gives for the
 * value the Python converter returns: int() as a decimal, float() as float.__repr__
 * (NaN, Infinity), the grammar's bool and word converters, str, str.strip and
 * str.rstrip(":") as JSON strings. Registered shapes are ASCII (only ASCII lines are
 * memoised), so a JSON string needs only the escapes of '"', '\\' and control bytes. Lines of
 * unrecognised text (scan's `every` mode) need not be UTF-8: put_text decodes each as
 * bytes.decode("utf-8", "replace") does while it escapes it (utf8.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "native.h"

#include "shape.h"
#include "utf8.h"

#define MAX_KEY 4096
#define MAX_OPS 256
#define LIT_PAD 16 /* bytes after a template's literals that put_lit may read */

enum {
    OP_LIT = 0,   /* literal output bytes */
    OP_LINE = 1,  /* the line number */
    OP_TEXT = 2,  /* the whole line, as a JSON string */
    OP_STR = 3,   /* span as a JSON string (str) */
    OP_ISO = 4,   /* span as a JSON string, its first space made "T" (an ISO stamp) */
    OP_INT = 5,   /* int(span) */
    OP_FLOAT = 6, /* float(span) */
    OP_BOOL = 7,  /* True/true -> true, False/false -> false, else the span as a string */
    OP_WORD = 8,  /* None -> null, True -> true, False -> false, else the span as a string */
    OP_STRIP = 9, /* span.strip() as a JSON string */
    OP_RCOLON = 10, /* span.rstrip(":") as a JSON string */
    OP_LAST = 10
};

typedef struct {
    int code;
    Py_ssize_t a, b; /* the span (OP_STR..), or the literal's place in lit (OP_LIT) */
} Op;

typedef struct {
    unsigned char *p;
    size_t len, cap;
} Out;

/* Column mode: a value of a column of the row (a span converted, the line number, the
 * text, or a constant). */
enum { COL_STRING = 's', COL_INT = 'q', COL_DOUBLE = 'd', COL_BOOL = 'b' };
enum { OP_CSTR = 20, OP_CINT = 21, OP_CFLOAT = 22, OP_CBOOL = 23 };
#define MAX_COLS 1024
#define SEEN_PLANS 4096 /* plan ids below this are looked up in a bit set (column mode) */

typedef struct {
    int col, code;
    Py_ssize_t a, b; /* span, or the literal's place in lit (OP_CSTR) */
    long long iv;    /* OP_CINT, OP_CBOOL */
    double dv;       /* OP_CFLOAT */
} ColOp;

typedef struct {
    ShapeKey k;         /* first: the table stores it */
    int kind;           /* a code of the caller's, counted per taken line */
    int plan;           /* column mode: the caller's plan id */
    int skip;           /* column mode: the line is taken and makes no row */
    int nops;           /* rows of text: 0: the line is taken and writes nothing */
    Op *ops;
    int ncols;
    ColOp *cols;
    unsigned char *lit;
} Shape;

typedef struct {
    PyObject_HEAD
    ShapeTable shapes;
    char coltype[MAX_COLS]; /* column mode: each column's type (0: not declared) */
    Out out;                /* row mode: the output buffer, kept from one scan to the next (or
                             * handed to the Rows of a scan with `view`, and back on its release) */
    void *cols;             /* column mode: MAX_COLS Col buffers, kept likewise */
    Shape *recent[256];     /* the shape last found for a line of each length (mod 256): a
                             * line is compared with it first, cheaper than hashing it */
    Shape *every;           /* the template of every line of a scan with `every` (registered
                             * with the key None): lines known to be of one kind, whatever
                             * their shapes (no span: only the line number and the text) */
    /* column mode: the rows in the column buffers, which scans with `hold` add to until
     * take_columns (or a scan without it) hands them over: the columns filled, and the plan
     * ids of the rows, each once, in the order first seen */
    Py_ssize_t held;
    int nused, used[MAX_COLS];
    int *plans;
    Py_ssize_t nplans, plans_cap;
    unsigned char seen_plan[SEEN_PLANS / 8];
} Emitter;


/* Room for more bytes; -1 (no exception set: this may run without the GIL) when memory is
 * short. The buffers are the raw allocator's for that reason. */
static int out_grow(Out *o, size_t more)
{
    if (o->len + more <= o->cap)
        return 0;
    size_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->len + more)
        cap *= 2;
    unsigned char *p = PyMem_RawRealloc(o->p, cap);
    if (!p)
        return -1;
    o->p = p;
    o->cap = cap;
    return 0;
}

static int out_reserve(Out *o, size_t more)
{
    if (out_grow(o, more) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static Shape *lookup(Emitter *s, const unsigned char *p, Py_ssize_t n)
{
    Shape **last = &s->recent[n & 255], *sh;
    if (*last && (*last)->k.len == n && shape_equal(p, (*last)->k.key, n))
        return *last;
    sh = s->shapes.cap ? (Shape *)shapes_find(&s->shapes, p, n, shape_hash(p, n), NULL) : NULL;
    if (sh)
        *last = sh; /* shapes are never freed before the emitter */
    return sh;
}

static void shape_free(Shape *sh)
{
    if (!sh)
        return;
    PyMem_Free(sh->k.key);
    PyMem_Free(sh->ops);
    PyMem_Free(sh->cols);
    PyMem_Free(sh->lit);
    PyMem_Free(sh);
}

static int Emitter_init(Emitter *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "", names))
        return -1;
    return 0;
}

static void cols_free(void *cols);

static void Emitter_dealloc(Emitter *self)
{
    for (size_t k = 0; k < self->shapes.cap; k++)
        shape_free((Shape *)self->shapes.slots[k]);
    shape_free(self->every);
    PyMem_Free(self->shapes.slots);
    PyMem_RawFree(self->out.p);
    cols_free(self->cols);
    PyMem_RawFree(self->plans);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Store a new shape (taking it over): True, or False when the shape is already known
 * (the first one is kept), NULL on error (sh freed). With no key (`key` NULL): the template
 * of lines of any shape, in place of the last one. */
static PyObject *insert(Emitter *self, Shape *sh, const void *key)
{
    if (!key) {
        shape_free(self->every);
        self->every = sh;
        Py_RETURN_TRUE;
    }
    if (lookup(self, sh->k.key, sh->k.len)) {
        shape_free(sh);
        Py_RETURN_FALSE;
    }
    if (shapes_put(&self->shapes, &sh->k) < 0) {
        shape_free(sh);
        return NULL;
    }
    Py_RETURN_TRUE;
}

static Shape *new_shape(Py_buffer *key, int kind)
{
    if (key->len > MAX_KEY) {
        PyErr_SetString(PyExc_ValueError, "shape too long");
        return NULL;
    }
    Shape *sh = PyMem_Calloc(1, sizeof(Shape));
    if (!sh) {
        PyErr_NoMemory();
        return NULL;
    }
    sh->kind = kind;
    if (shape_key_init(&sh->k, key->buf, key->len) < 0) {
        PyMem_Free(sh);
        return NULL;
    }
    return sh;
}

/* add(key, kind, ops) -> bool: ops is a sequence of bytes (a literal), an int (OP_LINE,
 * OP_TEXT) or (code, a, b) (a span of the line and its conversion). False when the shape
 * is already known (the first template is kept). key None: the template of scan(every=True),
 * which has no span. */
static PyObject *Emitter_add(Emitter *self, PyObject *args)
{
    Py_buffer key;
    int kind;
    PyObject *ops_in;
    if (!PyArg_ParseTuple(args, "z*iO", &key, &kind, &ops_in))
        return NULL;
    Shape *sh = NULL;
    PyObject *seq = NULL;
    if (key.len > MAX_KEY) {
        PyErr_SetString(PyExc_ValueError, "shape too long");
        goto fail;
    }
    seq = PySequence_Fast(ops_in, "ops must be a sequence");
    if (!seq)
        goto fail;
    Py_ssize_t nops = PySequence_Fast_GET_SIZE(seq);
    if (nops > MAX_OPS) {
        PyErr_SetString(PyExc_ValueError, "too many ops");
        goto fail;
    }
    sh = PyMem_Calloc(1, sizeof(Shape));
    if (!sh) {
        PyErr_NoMemory();
        goto fail;
    }
    sh->kind = kind;
    sh->nops = (int)nops;
    if (shape_key_init(&sh->k, key.buf, key.len) < 0)
        goto fail;
    sh->ops = PyMem_Calloc(nops ? (size_t)nops : 1, sizeof(Op));
    if (!sh->ops) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t litlen = 0;
    for (Py_ssize_t k = 0; k < nops; k++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, k);
        if (PyBytes_Check(o))
            litlen += PyBytes_GET_SIZE(o);
    }
    sh->lit = PyMem_Malloc((size_t)litlen + LIT_PAD); /* put_lit reads sixteen bytes at a time */
    if (!sh->lit) {
        PyErr_NoMemory();
        goto fail;
    }
    memset(sh->lit + litlen, 0, LIT_PAD);
    Py_ssize_t at = 0;
    for (Py_ssize_t k = 0; k < nops; k++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, k);
        Op *op = &sh->ops[k];
        if (PyBytes_Check(o)) {
            op->code = OP_LIT;
            op->a = at;
            op->b = at + PyBytes_GET_SIZE(o);
            memcpy(sh->lit + at, PyBytes_AS_STRING(o), (size_t)PyBytes_GET_SIZE(o));
            at = op->b;
        } else if (PyLong_Check(o)) {
            op->code = (int)PyLong_AsLong(o);
            if (op->code != OP_LINE && op->code != OP_TEXT) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "bad op");
                goto fail;
            }
        } else {
            if (!PyArg_ParseTuple(o, "inn", &op->code, &op->a, &op->b))
                goto fail;
            if (op->code < OP_STR || op->code > OP_LAST || op->a < 0 || op->a > op->b || op->b > key.len) {
                PyErr_SetString(PyExc_ValueError, "bad span op");
                goto fail;
            }
        }
    }
    Py_CLEAR(seq);
    PyObject *r = insert(self, sh, key.buf);
    PyBuffer_Release(&key);
    return r;
fail:
    Py_XDECREF(seq);
    shape_free(sh);
    PyBuffer_Release(&key);
    return NULL;
}

/* -- values ---------------------------------------------------------------------------- */

/* 1: the byte is written as is inside a JSON string (json.dumps, ensure_ascii=False). */
static unsigned char plain_byte[256];
/* Each byte as written inside a JSON string (itself, or its escape: put_escaped), padded to
 * eight bytes, and how many of them it is. */
static uint64_t json_byte[256];
static unsigned char json_len[256];

static unsigned char *put_escaped(unsigned char *d, unsigned char c);

static void init_tables(void)
{
    for (int c = 0; c < 256; c++) {
        plain_byte[c] = c >= 0x20 && c != '"' && c != '\\';
        unsigned char e[8] = {0};
        json_len[c] = (unsigned char)(put_escaped(e, (unsigned char)c) - e);
        memcpy(&json_byte[c], e, 8);
    }
}

/* The byte c as written inside a JSON string. */
static unsigned char *put_escaped(unsigned char *d, unsigned char c)
{
    if (plain_byte[c]) {
        *d++ = c;
        return d;
    }
    *d++ = '\\';
    switch (c) {
    case '"': *d++ = '"'; break;
    case '\\': *d++ = '\\'; break;
    case '\n': *d++ = 'n'; break;
    case '\r': *d++ = 'r'; break;
    case '\t': *d++ = 't'; break;
    case '\b': *d++ = 'b'; break;
    case '\f': *d++ = 'f'; break;
    default:
        *d++ = 'u';
        *d++ = '0';
        *d++ = '0';
        *d++ = "0123456789abcdef"[c >> 4];
        *d++ = "0123456789abcdef"[c & 15];
    }
    return d;
}

/* p[0:n] as a JSON string, quotes included: eight bytes at a time where none needs an escape,
 * and byte by byte in the eight that hold one, from a table (no branch on the byte: text that
 * needs escapes, such as undecodable lines, has them anywhere). */
static int put_string(Out *o, const unsigned char *p, Py_ssize_t n)
{
    if (out_reserve(o, (size_t)n * 6 + 2 + 16) < 0)
        return -1;
    unsigned char *d = o->p + o->len;
    *d++ = '"';
    Py_ssize_t i = 0;
    const uint64_t L = 0x0101010101010101ULL, H = 0x8080808080808080ULL;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        uint64_t ctl = (x - L * 0x20) & ~x; /* a byte < 0x20 (bytes >= 0x80 are masked below) */
        uint64_t q = x ^ (L * '"'), bs = x ^ (L * '\\');
        uint64_t hit = (ctl | ((q - L) & ~q) | ((bs - L) & ~bs)) & H & ~(x & H);
        if (!hit) {
            memcpy(d, p + i, 8);
            d += 8;
            continue;
        }
        for (int k = 0; k < 8; k++) {
            memcpy(d, &json_byte[p[i + k]], 8);
            d += json_len[p[i + k]];
        }
    }
    for (; i < n; i++)
        d = put_escaped(d, p[i]);
    *d++ = '"';
    o->len = (size_t)(d - o->p);
    return 0;
}

/* -- texts that may not be UTF-8 ------------------------------------------------------------
 *
 * A line of unrecognised text (every=True) is the exact path's event text: its bytes as
 * bytes.decode("utf-8", "replace") reads them, then as json.dumps writes that string. put_text
 * does both in one pass (a line of random bytes would otherwise be decoded into a buffer of
 * its own and read again to be escaped): an ASCII byte is written as put_string writes it, a
 * character's bytes as they are, each maximal invalid subpart as U+FFFD (utf8.h). */

/* p[0:n] as put_text writes it, a character at a time, from d (room for 6n + 8). */
static unsigned char *json_text(unsigned char *d, const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    int bad = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            memcpy(d, &json_byte[p[i]], 8);
            d += json_len[p[i]];
            i++;
        } else
            d += put_utf8(d, utf8_next(p, n, &i, &bad));
    }
    return d;
}

/* p[0:n] as the JSON string of its text decoded with U+FFFD replacements, quotes included
 * (json.dumps(p[:n].decode("utf-8", "replace"), ensure_ascii=False)); n < 0: the line ends at
 * the first newline of p[0:avail]. `avail`: the bytes that may be read from p (a line's, its
 * newline's and what follows in the buffer). Returns n; -1 out of memory (an exception set);
 * -2 no newline in p[0:avail]. */
static Py_ssize_t put_text(Out *o, const unsigned char *p, Py_ssize_t n, Py_ssize_t avail)
{
    if (n < 0) {
        const unsigned char *nl = memchr(p, '\n', (size_t)avail);
        if (!nl)
            return -2;
        n = nl - p;
    }
    Py_ssize_t i = 0;
    while (i < n && p[i] < 0x80)
        i++;
    if (i == n)
        return put_string(o, p, n) < 0 ? -1 : n;
    if (out_reserve(o, (size_t)n * 6 + 2 + 8) < 0)
        return -1;
    unsigned char *d = o->p + o->len;
    *d++ = '"';
    d = json_text(d, p, n);
    *d++ = '"';
    o->len = (size_t)(d - o->p);
    return n;
}

/* A template's literal (its bytes padded by LIT_PAD): sixteen bytes at a time, inline, since
 * most are short and a row has several (a call of memcpy a literal was a tenth of the rows of
 * unrecognised text). */
static inline int put_lit(Out *o, const unsigned char *p, size_t n)
{
    if (out_reserve(o, n + LIT_PAD) < 0)
        return -1;
    unsigned char *d = o->p + o->len;
    for (size_t k = 0; k < n; k += 16)
        memcpy(d + k, p + k, 16);
    o->len += n;
    return 0;
}

static int put_bytes(Out *o, const void *p, size_t n)
{
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->p + o->len, p, n);
    o->len += n;
    return 0;
}

static int put_decimal(Out *o, long long v)
{
    char buf[24];
    char *e = buf + sizeof buf, *d = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--d = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--d = '-';
    return put_bytes(o, d, (size_t)(e - d));
}

/* A line number in decimal, counted up a line at a time (cheaper than writing it anew from
 * the number: most lines change only the last digit). */
typedef struct {
    char d[24]; /* the digits, d[start:] */
    int start;
} Counter;

static void counter_set(Counter *c, long long v)
{
    unsigned long long u = v < 0 ? 0 : (unsigned long long)v;
    c->start = (int)sizeof c->d;
    do {
        c->d[--c->start] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
}

static void counter_next(Counter *c)
{
    int i = (int)sizeof c->d - 1;
    while (i >= c->start && c->d[i] == '9')
        c->d[i--] = '0';
    if (i < c->start)
        c->d[--c->start] = '1';
    else
        c->d[i]++;
}

/* json.dumps(float): float.__repr__, NaN, Infinity, -Infinity. */
static int put_float(Out *o, double d)
{
    if (isnan(d))
        return put_bytes(o, "NaN", 3);
    if (isinf(d))
        return d > 0 ? put_bytes(o, "Infinity", 8) : put_bytes(o, "-Infinity", 9);
    char *s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!s)
        return -1;
    int r = put_bytes(o, s, strlen(s));
    PyMem_Free(s);
    return r;
}

/* repr(float(text)) without the conversion, for a plain decimal (sign, digits, point) of at
 * most 15 significant digits whose repr is not in exponent form: such a decimal is the
 * shortest that round-trips, so repr writes its digits, trailing zeros of the fraction
 * dropped. 1: written; 0: not such a text (nothing written); -1: error. */
static int put_plain_decimal(Out *o, const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    int neg = 0;
    if (i < n && (p[i] == '-' || p[i] == '+')) {
        neg = p[i] == '-';
        i++;
    }
    Py_ssize_t ia = i;
    while (i < n && p[i] >= '0' && p[i] <= '9')
        i++;
    Py_ssize_t ib = i, fa = i, fb = i;
    if (i < n && p[i] == '.') {
        fa = ++i;
        while (i < n && p[i] >= '0' && p[i] <= '9')
            i++;
        fb = i;
    }
    if (i != n || (ib == ia && fb == fa))
        return 0; /* an exponent, other characters, or no digit */
    while (ia < ib && p[ia] == '0')
        ia++;
    while (fb > fa && p[fb - 1] == '0')
        fb--;
    Py_ssize_t sig;
    if (ia < ib) {
        if (ib - ia > 16)
            return 0;
        if (fb > fa)
            sig = (ib - ia) + (fb - fa);
        else {
            Py_ssize_t e = ib;
            while (e > ia && p[e - 1] == '0')
                e--;
            sig = e - ia;
        }
    } else if (fb > fa) {
        Py_ssize_t z = fa;
        while (z < fb && p[z] == '0')
            z++;
        if (z - fa > 3)
            return 0;
        sig = fb - z;
    } else
        sig = 0;
    if (sig > 15)
        return 0;
    if (out_reserve(o, (size_t)n + 4) < 0)
        return -1;
    unsigned char *d = o->p + o->len;
    if (neg)
        *d++ = '-';
    if (ia < ib) {
        memcpy(d, p + ia, (size_t)(ib - ia));
        d += ib - ia;
    } else
        *d++ = '0';
    *d++ = '.';
    if (fb > fa) {
        memcpy(d, p + fa, (size_t)(fb - fa));
        d += fb - fa;
    } else
        *d++ = '0';
    o->len = (size_t)(d - o->p);
    return 1;
}

static inline int py_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* One span op. 1: written; 0: the text is not one this conversion reads (nothing written);
 * -1: error. */
static int put_span(Out *o, int code, const unsigned char *p, Py_ssize_t n)
{
    long long v;
    double d;
    switch (code) {
    case OP_STR:
        return put_string(o, p, n) < 0 ? -1 : 1;
    case OP_ISO: {
        const unsigned char *sp = memchr(p, ' ', (size_t)n);
        if (!sp)
            return put_string(o, p, n) < 0 ? -1 : 1;
        Py_ssize_t k = sp - p;
        size_t mark = o->len;
        if (put_string(o, p, n) < 0)
            return -1;
        o->p[mark + 1 + k] = 'T'; /* no byte before the first space needed an escape? */
        for (Py_ssize_t j = 0; j < k; j++) {
            if (!plain_byte[p[j]]) { /* it did: write it again, the slow way */
                o->len = mark;
                unsigned char tmp[MAX_KEY];
                memcpy(tmp, p, (size_t)n);
                tmp[k] = 'T';
                return put_string(o, tmp, n) < 0 ? -1 : 1;
            }
        }
        return 1;
    }
    case OP_INT:
        if (!shape_read_int(p, n, &v))
            return 0;
        return put_decimal(o, v) < 0 ? -1 : 1;
    case OP_FLOAT: {
        int r = put_plain_decimal(o, p, n);
        if (r)
            return r;
    }
        if (!shape_read_float(p, n, &d))
            return 0;
        return put_float(o, d) < 0 ? -1 : 1;
    case OP_BOOL:
        if (n == 4 && (memcmp(p, "True", 4) == 0 || memcmp(p, "true", 4) == 0))
            return put_bytes(o, "true", 4) < 0 ? -1 : 1;
        if (n == 5 && (memcmp(p, "False", 5) == 0 || memcmp(p, "false", 5) == 0))
            return put_bytes(o, "false", 5) < 0 ? -1 : 1;
        return put_string(o, p, n) < 0 ? -1 : 1;
    case OP_WORD:
        if (n == 4 && memcmp(p, "None", 4) == 0)
            return put_bytes(o, "null", 4) < 0 ? -1 : 1;
        if (n == 4 && memcmp(p, "True", 4) == 0)
            return put_bytes(o, "true", 4) < 0 ? -1 : 1;
        if (n == 5 && memcmp(p, "False", 5) == 0)
            return put_bytes(o, "false", 5) < 0 ? -1 : 1;
        return put_string(o, p, n) < 0 ? -1 : 1;
    case OP_STRIP:
        while (n && py_space(*p)) {
            p++;
            n--;
        }
        while (n && py_space(p[n - 1]))
            n--;
        return put_string(o, p, n) < 0 ? -1 : 1;
    case OP_RCOLON:
        while (n && p[n - 1] == ':')
            n--;
        return put_string(o, p, n) < 0 ? -1 : 1;
    }
    return 0;
}

/* -- the rows of a scan, without a copy ------------------------------------------------------
 *
 * Rows holds the output buffer of one scan (the rows of a block are several times its size, and
 * a copy of them into bytes cost a tenth of `parse --format jsonl`). It is a bytes-like object,
 * read-only; release() hands the buffer back to its emitter for the next scan (else the next
 * scan takes a buffer of its own, and this one is freed with the Rows). */
typedef struct {
    PyObject_HEAD
    Emitter *owner; /* a strong reference */
    Out o;
    Py_ssize_t views; /* buffer views not released */
} Rows;

static PyTypeObject RowsType;

/* A Rows taking over *o (left empty), or NULL (*o as it was). */
static PyObject *rows_new(Emitter *owner, Out *o)
{
    Rows *r = PyObject_New(Rows, &RowsType);
    if (!r)
        return NULL;
    r->owner = (Emitter *)Py_NewRef(owner);
    r->o = *o;
    r->views = 0;
    *o = (Out){NULL, 0, 0};
    return (PyObject *)r;
}

/* The buffer back to the emitter, if it has none (else freed). */
static void rows_give_back(Rows *r)
{
    if (!r->o.p)
        return;
    if (!r->owner->out.p && r->o.cap <= ((size_t)64 << 20)) { /* an unusually large one is not kept */
        r->owner->out = r->o;
        r->owner->out.len = 0;
    } else
        PyMem_RawFree(r->o.p);
    r->o = (Out){NULL, 0, 0};
}

static void Rows_dealloc(Rows *r)
{
    rows_give_back(r);
    Py_DECREF(r->owner);
    PyObject_Free(r);
}

static int Rows_getbuffer(Rows *r, Py_buffer *v, int flags)
{
    static char empty[1];
    if (PyBuffer_FillInfo(v, (PyObject *)r, r->o.p ? (void *)r->o.p : (void *)empty, (Py_ssize_t)r->o.len, 1,
                          flags) < 0)
        return -1;
    r->views++;
    return 0;
}

static void Rows_releasebuffer(Rows *r, Py_buffer *v)
{
    (void)v;
    r->views--;
}

/* release(): the buffer back to the emitter (the rows are then empty). */
static PyObject *Rows_release(Rows *r, PyObject *noargs)
{
    (void)noargs;
    if (r->views) {
        PyErr_SetString(PyExc_BufferError, "the rows are still viewed");
        return NULL;
    }
    rows_give_back(r);
    Py_RETURN_NONE;
}

static Py_ssize_t Rows_len(Rows *r)
{
    return (Py_ssize_t)r->o.len;
}

static PyBufferProcs Rows_as_buffer = {(getbufferproc)Rows_getbuffer, (releasebufferproc)Rows_releasebuffer};
static PySequenceMethods Rows_as_sequence = {.sq_length = (lenfunc)Rows_len};
static PyMethodDef Rows_methods[] = {
    {"release", (PyCFunction)Rows_release, METH_NOARGS, "release(): hand the buffer back to the emitter"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logforensics.native._native.Rows",
    .tp_basicsize = sizeof(Rows),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The rows of a scan: a read-only bytes-like object",
    .tp_dealloc = (destructor)Rows_dealloc,
    .tp_as_buffer = &Rows_as_buffer,
    .tp_as_sequence = &Rows_as_sequence,
    .tp_methods = Rows_methods,
};

/* scan(buf, pos, first_line, every=False, view=False) -> (stop, lines, out, counts)
 *
 * buf holds whole lines, each ending in "\n". From pos (a line start, numbered
 * first_line), every line whose shape is registered and whose values convert is taken
 * and its template written to out (bytes); the scan stops at the first line that is not
 * (stop: its offset; len(buf) when all were taken). counts: {kind: lines taken}.
 * every: every line is taken with the template registered with the key None, its text as
 * the exact path's event has it (put_text: the line need not be UTF-8), but for an empty
 * line, taken with the template of its shape (the key b""), if there is one.
 * view: out is a Rows holding the buffer written, not a copy of it (release() it for the next
 * scan to write into the same pages).
 */
static PyObject *Emitter_scan(Emitter *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t pos;
    long long line;
    int every = 0, view = 0;
    if (!PyArg_ParseTuple(args, "y*nL|pp", &b, &pos, &line, &every, &view))
        return NULL;
    const unsigned char *buf = b.buf;
    Py_ssize_t n = b.len;
    PyObject *result = NULL;
    Out o = self->out; /* reused: no fresh pages for every block */
    o.len = 0;
    Py_ssize_t lines = 0;
    Py_ssize_t counts[256];
    memset(counts, 0, sizeof counts);
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer");
        goto done;
    }
    if (every && (!self->every || self->every->cols)) {
        PyErr_SetString(PyExc_ValueError, "no template for every line");
        goto done;
    }
    if (out_reserve(&o, (size_t)(n - pos) * 3 + 1024) < 0)
        goto done;
    Counter number; /* of the line, when not negative */
    counter_set(&number, line);
    int found = 0; /* every line's end found by put_text as it writes the line (no search before) */
    for (int k = 0; every && k < self->every->nops; k++)
        found |= self->every->ops[k].code == OP_TEXT;
    while (pos < n) {
        const unsigned char *p = buf + pos;
        Py_ssize_t len = -1;
        if (!found) {
            const unsigned char *nl = memchr(p, '\n', (size_t)(n - pos));
            if (!nl)
                break; /* not a whole line */
            len = nl - p;
        }
        Shape *sh;
        if (every && *p == '\n') { /* an empty line among unrecognised ones: its own shape's row */
            len = 0;
            sh = lookup(self, p, 0);
        } else
            sh = every ? self->every : len <= MAX_KEY ? lookup(self, p, len) : NULL;
        if (!sh || sh->cols)
            break; /* unknown, or registered for columns */
        size_t mark = o.len;
        int ok = 1;
        for (int k = 0; k < sh->nops && ok; k++) {
            Op *op = &sh->ops[k];
            int r;
            switch (op->code) {
            case OP_LIT:
                r = put_lit(&o, sh->lit + op->a, (size_t)(op->b - op->a)) < 0 ? -1 : 1;
                break;
            case OP_LINE:
                r = (line < 0 ? put_decimal(&o, line + lines)
                              : put_bytes(&o, number.d + number.start, sizeof number.d - (size_t)number.start)) < 0
                        ? -1 : 1;
                break;
            case OP_TEXT:
                if (sh == self->every) { /* a line of unrecognised text: maybe not UTF-8; its end found here */
                    Py_ssize_t got = put_text(&o, p, len, n - pos);
                    r = got == -1 ? -1 : got == -2 ? 0 : 1; /* -2: not a whole line */
                    len = got;
                } else
                    r = put_string(&o, p, len) < 0 ? -1 : 1;
                break;
            default:
                r = put_span(&o, op->code, p + op->a, op->b - op->a);
            }
            if (r < 0)
                goto done;
            ok = r;
        }
        if (!ok) {
            o.len = mark; /* the exact path writes this line */
            break;
        }
        counts[sh->kind & 255]++;
        lines++;
        counter_next(&number);
        pos += len + 1;
    }
    {
        PyObject *c = PyDict_New();
        if (!c)
            goto done;
        for (int k = 0; k < 256; k++) {
            if (!counts[k])
                continue;
            PyObject *key = PyLong_FromLong(k), *val = PyLong_FromSsize_t(counts[k]);
            int bad = !key || !val || PyDict_SetItem(c, key, val) < 0;
            Py_XDECREF(key);
            Py_XDECREF(val);
            if (bad) {
                Py_DECREF(c);
                goto done;
            }
        }
        PyObject *rows = NULL;
        Out none = {NULL, 0, 0}; /* no rows: the buffer stays */
        if (view && (rows = rows_new(self, o.len ? &o : &none)) == NULL) {
            Py_DECREF(c);
            goto done;
        }
        if (view)
            result = Py_BuildValue("(nnNN)", pos, lines, rows, c);
        else
            result = Py_BuildValue("(nny#N)", pos, lines, (const char *)o.p, (Py_ssize_t)o.len, c);
    }
done:
    if (o.cap > ((size_t)64 << 20)) { /* an unusually large block: do not keep its buffer */
        PyMem_RawFree(o.p);
        o = (Out){NULL, 0, 0};
    }
    o.len = 0;
    self->out = o;
    PyBuffer_Release(&b);
    return result;
}

/* -- column mode: the taken lines' rows as Arrow column buffers ---------------------------
 *
 * For `parse --format parquet`: per registered shape, the columns its row fills (a column
 * id of the caller's and how: a span converted as in row mode, the line number, the text,
 * or a constant). scan_columns() returns, per column a segment touched, Arrow's buffers:
 * the validity bitmap, the values (int64, double or a bitmap of bools) or the int32
 * offsets and the bytes of strings. A row leaves the columns its shape does not fill null.
 */

/* set_column(col, type): declare a column's type ('s' string, 'q' int64, 'd' double, 'b' bool). */
static PyObject *Emitter_set_column(Emitter *self, PyObject *args)
{
    int col, type;
    if (!PyArg_ParseTuple(args, "iC", &col, &type))
        return NULL;
    if (col < 0 || col >= MAX_COLS || (type != COL_STRING && type != COL_INT && type != COL_DOUBLE && type != COL_BOOL)) {
        PyErr_SetString(PyExc_ValueError, "bad column");
        return NULL;
    }
    self->coltype[col] = (char)type;
    Py_RETURN_NONE;
}

static int op_type(int code)
{
    switch (code) {
    case OP_STR: case OP_ISO: case OP_STRIP: case OP_RCOLON: case OP_TEXT: case OP_CSTR: return COL_STRING;
    case OP_INT: case OP_LINE: case OP_CINT: return COL_INT;
    case OP_FLOAT: case OP_CFLOAT: return COL_DOUBLE;
    case OP_BOOL: case OP_CBOOL: return COL_BOOL;
    }
    return 0;
}

/* add_columns(key, kind, plan, skip, ops) -> bool: ops is a sequence of (col, code, a, b)
 * (a span; OP_LINE and OP_TEXT with a, b unused), (col, OP_CSTR, bytes), (col, OP_CINT,
 * int), (col, OP_CFLOAT, float), (col, OP_CBOOL, bool). OP_BOOL here takes only the four
 * bool words (another text stops the scan). key None: the columns of scan_columns(every=True),
 * which have no span. */
static PyObject *Emitter_add_columns(Emitter *self, PyObject *args)
{
    Py_buffer key;
    int kind, plan, skip;
    PyObject *ops_in;
    if (!PyArg_ParseTuple(args, "z*iipO", &key, &kind, &plan, &skip, &ops_in))
        return NULL;
    PyObject *seq = PySequence_Fast(ops_in, "ops must be a sequence");
    Shape *sh = seq ? new_shape(&key, kind) : NULL;
    if (!sh)
        goto fail;
    sh->plan = plan;
    sh->skip = skip;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), litlen = 0;
    if (n > MAX_OPS) {
        PyErr_SetString(PyExc_ValueError, "too many ops");
        goto fail;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, k);
        if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 3 && PyBytes_Check(PyTuple_GET_ITEM(o, 2)))
            litlen += PyBytes_GET_SIZE(PyTuple_GET_ITEM(o, 2));
    }
    sh->ncols = (int)n;
    sh->cols = PyMem_Calloc(n ? (size_t)n : 1, sizeof(ColOp));
    sh->lit = PyMem_Malloc(litlen ? (size_t)litlen : 1);
    if (!sh->cols || !sh->lit) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, k);
        ColOp *op = &sh->cols[k];
        PyObject *value = NULL;
        if (!PyTuple_Check(o))
            goto bad;
        if (PyTuple_GET_SIZE(o) == 4 ? !PyArg_ParseTuple(o, "iinn", &op->col, &op->code, &op->a, &op->b)
                                     : !PyArg_ParseTuple(o, "ii|O", &op->col, &op->code, &value))
            goto fail;
        if (op->col < 0 || op->col >= MAX_COLS || !op_type(op->code) || self->coltype[op->col] != op_type(op->code)) {
            PyErr_SetString(PyExc_ValueError, "bad column op");
            goto fail;
        }
        if (op->code == OP_CSTR) {
            if (!value || !PyBytes_Check(value))
                goto bad;
            op->a = at;
            op->b = at + PyBytes_GET_SIZE(value);
            memcpy(sh->lit + at, PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value));
            at = op->b;
        } else if (op->code == OP_CINT || op->code == OP_CBOOL) {
            if (!value || !PyLong_Check(value))
                goto bad;
            op->iv = PyLong_AsLongLong(value);
            if (op->iv == -1 && PyErr_Occurred())
                goto fail;
        } else if (op->code == OP_CFLOAT) {
            if (!value || !PyFloat_Check(value))
                goto bad;
            op->dv = PyFloat_AS_DOUBLE(value);
        } else if (op->code != OP_LINE && op->code != OP_TEXT) {
            if (PyTuple_GET_SIZE(o) != 4 || op->a < 0 || op->a > op->b || op->b > key.len)
                goto bad;
        }
    }
    Py_DECREF(seq);
    PyObject *r = insert(self, sh, key.buf);
    PyBuffer_Release(&key);
    return r;
bad:
    PyErr_SetString(PyExc_ValueError, "bad column op");
fail:
    Py_XDECREF(seq);
    shape_free(sh);
    PyBuffer_Release(&key);
    return NULL;
}

typedef struct {
    int used;
    char type;
    Py_ssize_t n, cap, nonnull; /* rows filled, rows allocated */
    unsigned char *valid, *data; /* data: int64/double values, or a bitmap of bools */
    int32_t *off;
    Out s; /* string bytes */
} Col;

/* Column buffers are the raw allocator's: a column scan fills them without the GIL. */
static void col_free(Col *c)
{
    PyMem_RawFree(c->valid);
    PyMem_RawFree(c->data);
    PyMem_RawFree(c->off);
    PyMem_RawFree(c->s.p);
    memset(c, 0, sizeof *c);
}

static void cols_free(void *cols)
{
    if (!cols)
        return;
    for (int k = 0; k < MAX_COLS; k++)
        col_free(&((Col *)cols)[k]);
    PyMem_RawFree(cols);
}

/* Room for rows; -1 (no exception set) when memory is short. */
static int col_reserve(Col *c, Py_ssize_t rows)
{
    if (rows <= c->cap)
        return 0;
    Py_ssize_t cap = c->cap ? c->cap : 1024;
    while (cap < rows)
        cap *= 2;
    size_t bits = (size_t)(cap + 7) / 8, oldbits = (size_t)(c->cap + 7) / 8;
    unsigned char *v = PyMem_RawRealloc(c->valid, bits);
    if (!v)
        goto nomem;
    memset(v + oldbits, 0, bits - oldbits);
    c->valid = v;
    if (c->type == COL_STRING) {
        int32_t *o = PyMem_RawRealloc(c->off, (size_t)(cap + 1) * sizeof(int32_t));
        if (!o)
            goto nomem;
        if (!c->cap)
            o[0] = 0;
        c->off = o;
    } else if (c->type == COL_BOOL) {
        unsigned char *d = PyMem_RawRealloc(c->data, bits);
        if (!d)
            goto nomem;
        memset(d + oldbits, 0, bits - oldbits);
        c->data = d;
    } else {
        unsigned char *d = PyMem_RawRealloc(c->data, (size_t)cap * 8);
        if (!d)
            goto nomem;
        c->data = d;
    }
    c->cap = cap;
    return 0;
nomem:
    return -1;
}

/* Null rows up to row r (exclusive). */
static int col_pad(Col *c, Py_ssize_t r)
{
    if (c->n >= r)
        return 0;
    if (col_reserve(c, r) < 0)
        return -1;
    if (c->type == COL_STRING) {
        int32_t end = c->off[c->n];
        for (Py_ssize_t i = c->n; i < r; i++)
            c->off[i + 1] = end;
    } else if (c->type == COL_INT || c->type == COL_DOUBLE) {
        memset(c->data + (size_t)c->n * 8, 0, (size_t)(r - c->n) * 8);
    }
    c->n = r;
    return 0;
}

typedef struct {
    long long iv;
    double dv;
    const unsigned char *p;
    Py_ssize_t n;
    int iso;
} Val;

/* The column buffers emptied for the next rows (their memory kept, unless unusually large). */
static void columns_reset(Emitter *self)
{
    Col *cols = self->cols;
    for (int k = 0; cols && k < self->nused; k++) {
        Col *c = &cols[self->used[k]];
        if (c->cap > ((Py_ssize_t)1 << 20)) {
            col_free(c);
            continue;
        }
        size_t bits = (size_t)(c->cap + 7) / 8;
        memset(c->valid, 0, bits);
        if (c->type == COL_BOOL)
            memset(c->data, 0, bits);
        c->n = c->nonnull = 0;
        c->s.len = 0;
        c->used = 0;
    }
    self->nused = 0;
    self->held = 0;
    self->nplans = 0;
    memset(self->seen_plan, 0, sizeof self->seen_plan);
}

/* The rows held, as (rows, plans, cols) (scan_columns' values), the buffers emptied; NULL on
 * error (emptied too). */
static PyObject *columns_taken(Emitter *self)
{
    Col *cols = self->cols;
    const Py_ssize_t rows = self->held;
    PyObject *pl = PyList_New(self->nplans), *cl = PyList_New(0), *result = NULL;
    int bad = !pl || !cl;
    for (Py_ssize_t k = 0; k < self->nplans && !bad; k++) {
        PyObject *pid = PyLong_FromLong(self->plans[k]);
        bad = !pid;
        if (pid)
            PyList_SET_ITEM(pl, k, pid);
    }
    for (int k = 0; k < self->nused && !bad; k++) {
        Col *col = &cols[self->used[k]];
        PyObject *t;
        if (col_pad(col, rows) < 0) {
            PyErr_NoMemory();
            bad = 1;
            break;
        }
        size_t bits = (size_t)(rows + 7) / 8;
        if (col->type == COL_STRING)
            t = Py_BuildValue("(iCny#y#y#)", self->used[k], col->type, col->nonnull, (const char *)col->valid,
                              (Py_ssize_t)bits, (const char *)(col->s.p ? col->s.p : (unsigned char *)""),
                              (Py_ssize_t)col->s.len, (const char *)col->off,
                              (Py_ssize_t)((rows + 1) * (Py_ssize_t)sizeof(int32_t)));
        else
            t = Py_BuildValue("(iCny#y#O)", self->used[k], col->type, col->nonnull, (const char *)col->valid,
                              (Py_ssize_t)bits, (const char *)col->data,
                              (Py_ssize_t)(col->type == COL_BOOL ? bits : (size_t)rows * 8), Py_None);
        bad = !t || PyList_Append(cl, t) < 0;
        Py_XDECREF(t);
    }
    if (!bad)
        result = Py_BuildValue("(nOO)", rows, pl, cl);
    Py_XDECREF(pl);
    Py_XDECREF(cl);
    columns_reset(self);
    return result;
}

/* scan_columns(buf, pos, first_line, every=False, hold=False) -> (stop, lines, rows, plans, cols, counts)
 *
 * As scan(), for shapes registered by add_columns (every: the columns registered with the
 * key None, for every line but an empty one, as in scan()): rows is the number of rows made (lines
 * of skipped shapes make none), plans the plan ids of the rows in the order each first
 * appears, cols ((col, type, nonnull, validity, data, offsets or None), ...) for every
 * column a row filled, each rows long. The rows held from scans with `hold` come first.
 * hold: the rows stay in the buffers, after those held (take_columns hands them over: one
 * piece of many scans, where unrecognised lines and records alternate), and plans and cols
 * are None, rows those of this scan. */
static PyObject *Emitter_scan_columns(Emitter *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t pos;
    long long line;
    int every = 0, hold = 0;
    if (!PyArg_ParseTuple(args, "y*nL|pp", &b, &pos, &line, &every, &hold))
        return NULL;
    const unsigned char *buf = b.buf;
    Py_ssize_t n = b.len;
    PyObject *result = NULL;
    if (every && (!self->every || !self->every->cols)) {
        PyErr_SetString(PyExc_ValueError, "no columns for every line");
        PyBuffer_Release(&b);
        return NULL;
    }
    if (!self->cols)
        self->cols = PyMem_RawCalloc(MAX_COLS, sizeof(Col));
    Col *cols = self->cols; /* reused: no fresh pages for every block */
    int *used = self->used, nused = self->nused;
    const Py_ssize_t first = self->held;
    Py_ssize_t lines = 0, rows = first;
    Py_ssize_t counts[256];
    memset(counts, 0, sizeof counts);
    Val vals[MAX_OPS];
    unsigned char *seen_plan = self->seen_plan; /* plans already in the list */
    int *plans = self->plans;
    Py_ssize_t nplans = self->nplans, plans_cap = self->plans_cap;
    enum { OK = 0, NOMEM, TOO_LARGE } err = OK;
    if (!cols) {
        PyErr_NoMemory();
        goto done;
    }
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer");
        goto done;
    }
    /* The walk touches no Python object: another thread (reading the next block, encoding
     * the last row group) runs meanwhile. Only a float the fast reading leaves takes the GIL
     * back, for that conversion. */
    Gil g = {PyEval_SaveThread()};
    while (pos < n) {
        const unsigned char *p = buf + pos;
        const unsigned char *nl = memchr(p, '\n', (size_t)(n - pos));
        if (!nl)
            break;
        Py_ssize_t len = nl - p;
        Shape *sh = every ? (len ? self->every : lookup(self, p, 0)) /* an empty line: its own shape's */
                          : len <= MAX_KEY ? lookup(self, p, len) : NULL;
        if (!sh || !sh->cols)
            break;
        int ok = 1;
        if (!sh->skip) {
            for (int k = 0; k < sh->ncols && ok; k++) { /* convert first: all or nothing */
                ColOp *op = &sh->cols[k];
                Val *v = &vals[k];
                const unsigned char *vp = p + op->a;
                Py_ssize_t vn = op->b - op->a;
                v->iso = 0;
                switch (op->code) {
                case OP_INT: ok = shape_read_int(vp, vn, &v->iv); break;
                case OP_FLOAT: ok = read_float_g(vp, vn, &v->dv, &g); break;
                case OP_BOOL:
                    if (vn == 4 && (memcmp(vp, "True", 4) == 0 || memcmp(vp, "true", 4) == 0))
                        v->iv = 1;
                    else if (vn == 5 && (memcmp(vp, "False", 5) == 0 || memcmp(vp, "false", 5) == 0))
                        v->iv = 0;
                    else
                        ok = 0;
                    break;
                case OP_LINE: v->iv = line + lines; break;
                case OP_TEXT: v->p = p; v->n = len; break;
                case OP_CSTR: v->p = sh->lit + op->a; v->n = op->b - op->a; break;
                case OP_CINT: case OP_CBOOL: v->iv = op->iv; break;
                case OP_CFLOAT: v->dv = op->dv; break;
                case OP_ISO: v->iso = 1; v->p = vp; v->n = vn; break;
                case OP_STR: v->p = vp; v->n = vn; break;
                case OP_STRIP:
                    while (vn && py_space(*vp)) { vp++; vn--; }
                    while (vn && py_space(vp[vn - 1])) vn--;
                    v->p = vp; v->n = vn;
                    break;
                case OP_RCOLON:
                    while (vn && vp[vn - 1] == ':') vn--;
                    v->p = vp; v->n = vn;
                    break;
                default: ok = 0;
                }
            }
            if (!ok)
                break;
            for (int k = 0; k < sh->ncols; k++) {
                ColOp *op = &sh->cols[k];
                Col *c = &cols[op->col];
                Val *v = &vals[k];
                if (!c->used) {
                    c->used = 1;
                    c->type = self->coltype[op->col];
                    used[nused++] = op->col;
                }
                /* the checks inline: most values go to a column filled up to the row before */
                if ((c->n < rows && col_pad(c, rows) < 0) || (rows >= c->cap && col_reserve(c, rows + 1) < 0)) {
                    err = NOMEM;
                    goto walked;
                }
                c->valid[rows >> 3] |= (unsigned char)(1u << (rows & 7));
                c->nonnull++;
                switch (c->type) {
                case COL_STRING: {
                    if (c->s.len + (size_t)v->n > INT32_MAX) {
                        err = TOO_LARGE;
                        goto walked;
                    }
                    size_t at = c->s.len;
                    if (out_grow(&c->s, (size_t)v->n) < 0) {
                        err = NOMEM;
                        goto walked;
                    }
                    memcpy(c->s.p + at, v->p, (size_t)v->n);
                    c->s.len += (size_t)v->n;
                    if (v->iso) {
                        unsigned char *sp = memchr(c->s.p + at, ' ', (size_t)v->n);
                        if (sp)
                            *sp = 'T';
                    }
                    c->off[rows + 1] = (int32_t)c->s.len;
                    break;
                }
                case COL_INT:
                    memcpy(c->data + (size_t)rows * 8, &v->iv, 8);
                    break;
                case COL_DOUBLE:
                    memcpy(c->data + (size_t)rows * 8, &v->dv, 8);
                    break;
                case COL_BOOL:
                    if (v->iv)
                        c->data[rows >> 3] |= (unsigned char)(1u << (rows & 7));
                    break;
                }
                c->n = rows + 1;
            }
            int pl = sh->plan, known = pl >= 0 && pl < SEEN_PLANS && (seen_plan[pl >> 3] & (1u << (pl & 7)));
            for (Py_ssize_t k = 0; !known && (pl < 0 || pl >= SEEN_PLANS) && k < nplans; k++)
                known = plans[k] == pl; /* plan ids beyond the bit set: rare */
            if (!known) {
                if (nplans == plans_cap) {
                    Py_ssize_t cap = plans_cap ? plans_cap * 2 : 16;
                    int *np = PyMem_RawRealloc(plans, (size_t)cap * sizeof(int));
                    if (!np) {
                        err = NOMEM;
                        goto walked;
                    }
                    plans = np;
                    plans_cap = cap;
                }
                plans[nplans++] = pl;
                if (pl >= 0 && pl < SEEN_PLANS)
                    seen_plan[pl >> 3] |= (unsigned char)(1u << (pl & 7));
            }
            rows++;
        }
        counts[sh->kind & 255]++;
        lines++;
        pos += len + 1;
    }
walked:
    PyEval_RestoreThread(g.ts);
    self->plans = plans;
    self->nplans = nplans;
    self->plans_cap = plans_cap;
    self->nused = nused;
    self->held = rows;
    if (err != OK) {
        if (err == NOMEM)
            PyErr_NoMemory();
        else
            PyErr_SetString(PyExc_OverflowError, "segment too large");
        goto done;
    }
    {
        PyObject *c = PyDict_New(), *taken = NULL;
        int bad = !c;
        for (int k = 0; k < 256 && !bad; k++) {
            if (!counts[k])
                continue;
            PyObject *key = PyLong_FromLong(k), *val = PyLong_FromSsize_t(counts[k]);
            bad = !key || !val || PyDict_SetItem(c, key, val) < 0;
            Py_XDECREF(key);
            Py_XDECREF(val);
        }
        if (!bad && hold)
            result = Py_BuildValue("(nnnOON)", pos, lines, rows - first, Py_None, Py_None, c);
        else if (!bad && (taken = columns_taken(self)) != NULL)
            result = Py_BuildValue("(nnOOOO)", pos, lines, PyTuple_GET_ITEM(taken, 0), PyTuple_GET_ITEM(taken, 1),
                                   PyTuple_GET_ITEM(taken, 2), c);
        if (!hold || bad)
            Py_XDECREF(c);
        Py_XDECREF(taken);
    }
done:
    if (!result)
        columns_reset(self); /* nothing half held */
    PyBuffer_Release(&b);
    return result;
}

/* take_columns() -> (rows, plans, cols): the rows held by scans with `hold`, as a scan without
 * it gives them (no rows: 0, [], []), the buffers emptied. */
static PyObject *Emitter_take_columns(Emitter *self, PyObject *noargs)
{
    (void)noargs;
    if (!self->cols || !self->held) {
        columns_reset(self);
        return Py_BuildValue("(n[][])", (Py_ssize_t)0);
    }
    return columns_taken(self);
}

static PyObject *Emitter_len(Emitter *self, void *closure)
{
    return PyLong_FromSize_t(self->shapes.count);
}

/* known(key) -> bool: whether a shape is registered (for rows or for columns) */
static PyObject *Emitter_known(Emitter *self, PyObject *arg)
{
    Py_buffer key;
    if (PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0)
        return NULL;
    int found = key.len <= MAX_KEY && lookup(self, key.buf, key.len) != NULL;
    PyBuffer_Release(&key);
    return PyBool_FromLong(found);
}

static PyMethodDef Emitter_methods[] = {
    {"known", (PyCFunction)Emitter_known, METH_O, "known(key) -> bool: whether a shape is registered"},
    {"add", (PyCFunction)Emitter_add, METH_VARARGS, "add(key, kind, ops) -> bool: register a shape's template"},
    {"scan", (PyCFunction)Emitter_scan, METH_VARARGS,
     "scan(buf, pos, first_line, every=False, view=False) -> (stop, lines, out, counts): write the taken lines' rows"},
    {"set_column", (PyCFunction)Emitter_set_column, METH_VARARGS, "set_column(col, type): declare a column"},
    {"add_columns", (PyCFunction)Emitter_add_columns, METH_VARARGS,
     "add_columns(key, kind, plan, skip, ops) -> bool: register a shape's columns"},
    {"scan_columns", (PyCFunction)Emitter_scan_columns, METH_VARARGS,
     "scan_columns(buf, pos, first_line, every=False, hold=False) -> (stop, lines, rows, plans, cols, counts)"},
    {"take_columns", (PyCFunction)Emitter_take_columns, METH_NOARGS,
     "take_columns() -> (rows, plans, cols): the rows held by scans with hold"},
    {NULL, NULL, 0, NULL}};

static PyObject *Emitter_kept(Emitter *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->out.cap);
}

static PyGetSetDef Emitter_getset[] = {
    {"shapes", (getter)Emitter_len, NULL, "registered shapes", NULL},
    {"kept", (getter)Emitter_kept, NULL, "bytes of the row buffer kept for the next scan (0: none)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject EmitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logforensics.native._native.Emitter",
    .tp_basicsize = sizeof(Emitter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Templates per line shape, applied to blocks of lines",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Emitter_init,
    .tp_dealloc = (destructor)Emitter_dealloc,
    .tp_methods = Emitter_methods,
    .tp_getset = Emitter_getset,
};

/* text(data, find=False) -> bytes: put_text of data as one line of a buffer (no newline in data);
 * `find`: its end found by put_text (for tests). */
static PyObject *py_text(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer v;
    int find = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &v, &find))
        return NULL;
    PyObject *r = NULL;
    unsigned char *line = PyMem_Malloc((size_t)v.len + 40);
    Out o = {NULL, 0, 0};
    if (!line) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(line, v.buf, (size_t)v.len);
    line[v.len] = '\n'; /* as a line of a buffer ends, then what would continue a sequence */
    memset(line + v.len + 1, 0x80, 39);
    Py_ssize_t got = put_text(&o, line, find ? -1 : v.len, v.len + 40);
    if (got == v.len)
        r = PyBytes_FromStringAndSize((const char *)o.p, (Py_ssize_t)o.len);
    else if (got != -1)
        PyErr_SetString(PyExc_ValueError, "data holds a newline");
done:
    PyMem_Free(line);
    PyMem_RawFree(o.p);
    PyBuffer_Release(&v);
    return r;
}

static PyMethodDef module_methods[] = {
    {"text", py_text, METH_VARARGS,
     "text(data, find=False) -> json.dumps(data.decode('utf-8', 'replace'), ensure_ascii=False) as a row writes it "
     "(encoded)."},
    {NULL, NULL, 0, NULL},
};

/* Emitter, Rows, text() and the op codes added to the module m (``_native``); 0, or -1 with an
 * exception set. */
int emit_module_add(PyObject *m)
{
    init_tables();
    if (PyType_Ready(&RowsType) < 0 || native_add(m, &EmitterType, "Emitter", module_methods) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "OP_LINE", OP_LINE) < 0 || PyModule_AddIntConstant(m, "OP_TEXT", OP_TEXT) < 0 ||
        PyModule_AddIntConstant(m, "OP_STR", OP_STR) < 0 || PyModule_AddIntConstant(m, "OP_ISO", OP_ISO) < 0 ||
        PyModule_AddIntConstant(m, "OP_INT", OP_INT) < 0 || PyModule_AddIntConstant(m, "OP_FLOAT", OP_FLOAT) < 0 ||
        PyModule_AddIntConstant(m, "OP_BOOL", OP_BOOL) < 0 || PyModule_AddIntConstant(m, "OP_WORD", OP_WORD) < 0 ||
        PyModule_AddIntConstant(m, "OP_STRIP", OP_STRIP) < 0 || PyModule_AddIntConstant(m, "OP_RCOLON", OP_RCOLON) < 0 ||
        PyModule_AddIntConstant(m, "OP_CSTR", OP_CSTR) < 0 || PyModule_AddIntConstant(m, "OP_CINT", OP_CINT) < 0 ||
        PyModule_AddIntConstant(m, "OP_CFLOAT", OP_CFLOAT) < 0 || PyModule_AddIntConstant(m, "OP_CBOOL", OP_CBOOL) < 0)
        return -1;
    return 0;
}
