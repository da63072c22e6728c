/* Apply stored line-shape plans to a block of log lines, in C: the bulk reader's hot loop.
 *
 * The grammar decides what a line shape means (logforensics/read/grammar.py); Python
 * registers here, per digit-masked shape, what its plan says: a class and kind code,
 * where the rank and the stamp lie, and which spans hold the numbers the run model
 * wants. scan() then walks whole lines: it masks each line's digits while hashing it,
 * looks the shape up, slices the rank, converts the numbers and appends them to
 * columns. It knows no log format of its own. A line it cannot take (unknown shape,
 * a rank or class the caller has not declared ready, a number that does not convert
 * exactly as Python's int()/float() would) stops the scan there, so the caller can
 * read that line on the exact path, in order, and scan on after it.
 *
 * Also: sketch_batch() and sketch_doubles(), the quantile sketch's loop over a batch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "native.h"

#include "shape.h"

#define MAX_RANKS 256
#define MAX_CLASSES 9
#define MAX_SLOTS 32
#define MAX_KINDS 256
#define MAX_KEY 4096
#define RECENT_WAYS 4

enum { CONV_INT = 0, CONV_FLOAT = 1, CONV_BOOL = 2 };

typedef struct {
    int slot;
    Py_ssize_t a, b;
    int conv; /* CONV_INT, CONV_FLOAT (as int(), float()) or CONV_BOOL (True/true/False/false) */
    int guarded; /* the line is taken only when the slot's number is ``equal`` (else the exact path reads it) */
    double equal;
} Slot;

typedef struct {
    ShapeKey k; /* first: the table stores it */
    int plan, cls, kind;
    Py_ssize_t ra, rb; /* rank span; ra < 0: none */
    Py_ssize_t ta, tb; /* stamp span; ta < 0: none */
    int ts_iso;        /* the stamp's first space becomes "T" */
    int nslots;
    Py_ssize_t skip;   /* where the record begins in its line (after a wrapper): its text's start */
    Slot slots[MAX_SLOTS];
} Shape;

typedef struct Rows Rows;

/* A slot's numbers of one scan, as doubles: all of them read by float() (DBL_FLOAT) or all
 * by int() (DBL_INT, each within 2**53, so that the double is the int exactly). */
enum { DBL_NONE = 0, DBL_FLOAT = 1, DBL_INT = 2 };
typedef struct {
    double *v;
    Py_ssize_t n, cap;
    int tag;
} DBuf;

/* Where an ordered value's stamp lies in the scanned buffer (at < 0: the line has none). */
typedef struct {
    Py_ssize_t at;
    int len, iso;
} StampAt;
typedef struct {
    StampAt *v;
    Py_ssize_t n, cap;
} SBuf;

typedef struct {
    Py_ssize_t line, start, end;
    int plan;
} Last;

typedef struct {
    PyObject_HEAD
    ShapeTable shapes;
    Rows *rows; /* the rows of the current scan: kept between scans, so their arrays are not
                 * grown afresh (and their pages faulted in again) each time */
    DBuf vals[MAX_SLOTS][MAX_RANKS]; /* the current scan's numbers by slot and rank (kept too) */
    DBuf ord_y[MAX_SLOTS];           /* and those of the ordered slots, in line order */
    SBuf ord_ts[MAX_SLOTS];          /* with the stamps of their lines (made str after the scan) */
    Py_ssize_t counts[MAX_KINDS];    /* the current scan's lines per kind, */
    Last lasts[MAX_CLASSES][MAX_RANKS]; /* last line per class and rank */
    unsigned char seen[MAX_CLASSES][MAX_RANKS];
    int busy; /* a scan runs (without the GIL): no other call may change the scanner */
    Shape *recent[256][RECENT_WAYS]; /* the shapes last found for lines of each length (mod 256),
                                      * latest first: a line is compared with them first, which
                                      * is cheaper than hashing it */
    PyObject *rank_names; /* list: id -> str (index 0: None) */
    unsigned char *rank_text[MAX_RANKS];
    uint64_t rank_word[MAX_RANKS]; /* a rank of at most eight bytes as shape_load8 reads it */
    Py_ssize_t rank_len[MAX_RANKS];
    int nranks; /* ids in use, 0 included */
    unsigned char ready[MAX_CLASSES][MAX_RANKS];
    int nslots;
    unsigned char ordered[MAX_SLOTS];
    unsigned char row_cls[MAX_CLASSES]; /* lines of these classes are also kept as rows */
    unsigned char row_only[MAX_SLOTS];  /* slots kept in rows only, not as value lists */
} Scanner;

static void rows_free(Rows *r);

/* -- masking and hashing: shape.h ------------------------------------------------- */

static Shape *lookup(Scanner *s, const unsigned char *p, Py_ssize_t n)
{
    if (!s->shapes.cap)
        return NULL;
    unsigned char masked[1024]; /* the masked line, for lines that fit: compared with memcmp */
    int kept = n <= (Py_ssize_t)sizeof masked - 8;
    uint64_t h = shape_hash_into(p, n, kept ? masked : NULL);
    return (Shape *)shapes_find(&s->shapes, p, n, h, kept ? masked : NULL);
}

/* -- the type ---------------------------------------------------------------------------- */

/* Set flags[v] for each v of the sequence seq (0 <= v < limit). */
static int flag_set(PyObject *seq_in, unsigned char *flags, int limit, const char *what)
{
    if (!seq_in)
        return 0;
    PyObject *seq = PySequence_Fast(seq_in, what);
    if (!seq)
        return -1;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, k));
        if (v < 0 || v >= limit) {
            Py_DECREF(seq);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, what);
            return -1;
        }
        flags[v] = 1;
    }
    Py_DECREF(seq);
    return 0;
}

/* Scanner(nslots, ordered=(), rows=(), row_only=()): ordered slots are also kept in line
 * order with their stamps; lines of the classes in rows are also kept as rows (see scan);
 * row_only slots are kept in rows only. */
static int Scanner_init(Scanner *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"nslots", "ordered", "rows", "row_only", NULL};
    int nslots = 0;
    PyObject *ordered = NULL, *rows = NULL, *row_only = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|OOO", names, &nslots, &ordered, &rows, &row_only))
        return -1;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the scanner is scanning in another thread");
        return -1;
    }
    if (nslots < 0 || nslots > MAX_SLOTS) {
        PyErr_SetString(PyExc_ValueError, "too many slots");
        return -1;
    }
    self->nslots = nslots;
    memset(self->ordered, 0, sizeof self->ordered);
    memset(self->row_cls, 0, sizeof self->row_cls);
    memset(self->row_only, 0, sizeof self->row_only);
    if (flag_set(ordered, self->ordered, nslots, "bad ordered slot") < 0 ||
        flag_set(rows, self->row_cls, MAX_CLASSES, "bad row class") < 0 ||
        flag_set(row_only, self->row_only, nslots, "bad row-only slot") < 0)
        return -1;
    for (int k = 0; k < nslots; k++) {
        if (self->ordered[k] && self->row_only[k]) {
            PyErr_SetString(PyExc_ValueError, "an ordered slot is kept as values");
            return -1;
        }
    }
    Py_XSETREF(self->rank_names, PyList_New(1));
    if (!self->rank_names)
        return -1;
    for (int k = 1; k < self->nranks; k++)
        PyMem_Free(self->rank_text[k]);
    self->nranks = 1;
    Py_INCREF(Py_None);
    PyList_SET_ITEM(self->rank_names, 0, Py_None);
    memset(self->ready, 0, sizeof self->ready);
    return 0;
}

static void Scanner_dealloc(Scanner *self)
{
    for (size_t k = 0; k < self->shapes.cap; k++) {
        if (self->shapes.slots[k]) {
            PyMem_Free(self->shapes.slots[k]->key);
            PyMem_Free(self->shapes.slots[k]);
        }
    }
    PyMem_Free(self->shapes.slots);
    if (self->rows) {
        rows_free(self->rows);
        PyMem_Free(self->rows);
    }
    for (int k = 0; k < MAX_SLOTS; k++) {
        for (int r = 0; r < MAX_RANKS; r++)
            PyMem_RawFree(self->vals[k][r].v);
        PyMem_RawFree(self->ord_y[k].v);
        PyMem_RawFree(self->ord_ts[k].v);
    }
    for (int k = 1; k < self->nranks; k++)
        PyMem_Free(self->rank_text[k]);
    Py_XDECREF(self->rank_names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int span_arg(PyObject *o, Py_ssize_t *a, Py_ssize_t *b)
{
    if (o == Py_None) {
        *a = *b = -1;
        return 0;
    }
    return PyArg_ParseTuple(o, "nn", a, b) ? 0 : -1;
}

/* add(key, plan, cls, kind, rank, ts, ts_iso, slots): slots is ((slot, a, b, conv[, equal]), ...),
 * conv 0 int, 1 float, 2 bool (row-only slots alone); with ``equal``, a line whose number
 * there is another is not taken (the exact path reads it) */
static PyObject *Scanner_add(Scanner *self, PyObject *args)
{
    Py_buffer key;
    int plan, cls, kind, ts_iso;
    PyObject *rank, *ts, *slots;
    Py_ssize_t skip = 0;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the scanner is scanning in another thread");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*iiiOOpO|n", &key, &plan, &cls, &kind, &rank, &ts, &ts_iso, &slots, &skip))
        return NULL;
    Shape *sh = NULL;
    PyObject *seq = NULL;
    if (key.len > MAX_KEY || cls < 0 || cls >= MAX_CLASSES || kind < 0 || kind >= MAX_KINDS) {
        PyErr_SetString(PyExc_ValueError, "shape out of range");
        goto fail;
    }
    sh = PyMem_Calloc(1, sizeof(Shape));
    if (!sh) {
        PyErr_NoMemory();
        goto fail;
    }
    if (shape_key_init(&sh->k, key.buf, key.len) < 0)
        goto fail;
    sh->plan = plan;
    sh->cls = cls;
    sh->kind = kind;
    sh->ts_iso = ts_iso;
    sh->skip = skip;
    if (span_arg(rank, &sh->ra, &sh->rb) < 0 || span_arg(ts, &sh->ta, &sh->tb) < 0)
        goto fail;
    if (sh->rb > key.len || sh->tb > key.len || sh->ra > sh->rb || sh->ta > sh->tb || skip < 0 || skip > key.len) {
        PyErr_SetString(PyExc_ValueError, "span outside the line");
        goto fail;
    }
    seq = PySequence_Fast(slots, "slots must be a sequence");
    if (!seq)
        goto fail;
    sh->nslots = (int)PySequence_Fast_GET_SIZE(seq);
    if (sh->nslots > MAX_SLOTS) {
        PyErr_SetString(PyExc_ValueError, "too many slots");
        goto fail;
    }
    for (int k = 0; k < sh->nslots; k++) {
        Slot *sl = &sh->slots[k];
        PyObject *equal = NULL;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "inni|O", &sl->slot, &sl->a, &sl->b, &sl->conv,
                              &equal))
            goto fail;
        sl->guarded = equal != NULL;
        if (equal && (sl->equal = PyFloat_AsDouble(equal)) == -1.0 && PyErr_Occurred())
            goto fail;
        for (int j = 0; j < k; j++) {
            if (sh->slots[j].slot == sl->slot) {
                PyErr_SetString(PyExc_ValueError, "a slot twice in one shape");
                goto fail;
            }
        }
        if (sl->slot < 0 || sl->slot >= self->nslots || sl->a < 0 || sl->a > sl->b || sl->b > key.len ||
            sl->conv < CONV_INT || sl->conv > CONV_BOOL || (sl->conv == CONV_BOOL && !self->row_only[sl->slot])) {
            PyErr_SetString(PyExc_ValueError, "bad slot");
            goto fail;
        }
    }
    Py_CLEAR(seq);
    if (lookup(self, sh->k.key, sh->k.len)) { /* already known: keep the first */
        PyMem_Free(sh->k.key);
        PyMem_Free(sh);
        PyBuffer_Release(&key);
        Py_RETURN_FALSE;
    }
    if (shapes_put(&self->shapes, &sh->k) < 0)
        goto fail;
    PyBuffer_Release(&key);
    Py_RETURN_TRUE;
fail:
    Py_XDECREF(seq);
    if (sh) {
        PyMem_Free(sh->k.key);
        PyMem_Free(sh);
    }
    PyBuffer_Release(&key);
    return NULL;
}

/* set_ready(table): table[cls * 256 + rank_id] != 0 when lines of that class and rank
 * may be taken in bulk; others stop the scan. */
static PyObject *Scanner_set_ready(Scanner *self, PyObject *arg)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the scanner is scanning in another thread");
        return NULL;
    }
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    memset(self->ready, 0, sizeof self->ready);
    Py_ssize_t n = b.len < (Py_ssize_t)sizeof self->ready ? b.len : (Py_ssize_t)sizeof self->ready;
    memcpy(self->ready, b.buf, (size_t)n);
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
}

/* -- numbers, exactly as int() and float() read them ------------------------------------ */

static inline int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

/* Python's int() and float() strip this whitespace (of what a log line can hold) first. */
static inline void strip_ws(const unsigned char **p, Py_ssize_t *n)
{
    while (*n && is_ws(**p)) { (*p)++; (*n)--; }
    while (*n && is_ws((*p)[*n - 1])) (*n)--;
}

/* A value slot's number as a double, with what read it: float(text) (DBL_FLOAT), or int(text)
 * (DBL_INT) within 2**53 either way, so that float() of the int is the same number and the
 * int is float's exactly. 0 (the line then goes the exact way): a text the Python converter
 * reads otherwise or not at all, or an int beyond 2**53. */
static int value_double(const unsigned char *p, Py_ssize_t n, int conv, double *out, int *tag, Gil *g)
{
    strip_ws(&p, &n);
    if (conv == CONV_FLOAT) {
        *tag = DBL_FLOAT;
        return read_float_g(p, n, out, g);
    }
    long long v;
    if (!shape_read_int(p, n, &v) || v > (1LL << 53) || v < -(1LL << 53))
        return 0;
    *tag = DBL_INT;
    *out = (double)v;
    return 1;
}

static int sbuf_push(SBuf *d, Py_ssize_t at, int len, int iso)
{
    if (d->n == d->cap) {
        Py_ssize_t cap = d->cap ? d->cap * 2 : 256;
        StampAt *v = PyMem_RawRealloc(d->v, (size_t)cap * sizeof(StampAt));
        if (!v)
            return -1;
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n].at = at;
    d->v[d->n].len = len;
    d->v[d->n].iso = iso;
    d->n++;
    return 0;
}

static int dbuf_push(DBuf *d, double x, int tag)
{
    if (d->n == d->cap) {
        Py_ssize_t cap = d->cap ? d->cap * 2 : 256;
        double *v = PyMem_RawRealloc(d->v, (size_t)cap * sizeof(double));
        if (!v)
            return -1; /* the caller raises MemoryError, holding the GIL */
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n++] = x;
    d->tag = tag;
    return 0;
}

/* The same numbers as doubles, for rows: float(int(text)) and float(text). 0 when the
 * text is not one the Python converter reads (the line then goes the exact way), and for
 * int texts of more than 18 digits. */
static int int_double(const unsigned char *p, Py_ssize_t n, double *out)
{
    strip_ws(&p, &n);
    long long v;
    if (!shape_read_int(p, n, &v))
        return 0;
    *out = (double)v; /* correctly rounded, as float(int) */
    return 1;
}

static int float_double(const unsigned char *p, Py_ssize_t n, double *out, Gil *g)
{
    strip_ws(&p, &n);
    return read_float_g(p, n, out, g);
}

static int bool_double(const unsigned char *p, Py_ssize_t n, double *out)
{
    if ((n == 4 && (memcmp(p, "True", 4) == 0 || memcmp(p, "true", 4) == 0))) {
        *out = 1.0;
        return 1;
    }
    if ((n == 5 && (memcmp(p, "False", 5) == 0 || memcmp(p, "false", 5) == 0))) {
        *out = 0.0;
        return 1;
    }
    return 0;
}

/* -- stamps as seconds ---------------------------------------------------------------------
 * ISO 8601 local times, read as the log's own clock (UTC, whatever the machine's time zone),
 * as model/serving.py seconds() reads them:
 *   YYYY-MM-DD[ T]HH:MM:SS[.fff|.ffffff]  -> seconds since 1970-01-01 (dated)
 *   HH:MM:SS[.f...]                        -> seconds of the day
 * Any other text (an offset, another number of fraction digits, a date that does not
 * exist) is not read here: its line goes the exact way. */
static int digits(const unsigned char *p, int n, long *out)
{
    long v = 0;
    for (int k = 0; k < n; k++) {
        unsigned c = p[k] - '0';
        if (c > 9)
            return 0;
        v = v * 10 + (long)c;
    }
    *out = v;
    return 1;
}

static long long days_from_civil(long y, long m, long d)
{
    y -= m <= 2;
    long era = (y >= 0 ? y : y - 399) / 400;
    long yoe = y - era * 400;
    long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return (long long)era * 146097 + doe - 719468;
}

static int stamp_seconds(const unsigned char *p, Py_ssize_t n, double *out, int *dated, Gil *g)
{
    long y, mo, d, h, mi, sec, frac = 0;
    if (n >= 19 && p[4] == '-') {
        if (!(n == 19 || n == 23 || n == 26))
            return 0;
        if (p[7] != '-' || (p[10] != ' ' && p[10] != 'T') || p[13] != ':' || p[16] != ':')
            return 0;
        if (!digits(p, 4, &y) || !digits(p + 5, 2, &mo) || !digits(p + 8, 2, &d) || !digits(p + 11, 2, &h) ||
            !digits(p + 14, 2, &mi) || !digits(p + 17, 2, &sec))
            return 0;
        if (n > 19) {
            if ((p[19] != '.' && p[19] != ',') || !digits(p + 20, (int)(n - 20), &frac))
                return 0;
            if (n == 23)
                frac *= 1000;
        }
        static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap) || h > 23 || mi > 59 ||
            sec > 59)
            return 0;
        long long us = (days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec) * 1000000 + frac;
        if (us >= (1LL << 53) || us <= -(1LL << 53))
            return 0; /* beyond 2255: Python's int division rounds once, a double's twice */
        *out = (double)us / 1000000.0; /* timedelta.total_seconds(): both exact as doubles */
        *dated = 1;
        return 1;
    }
    if (n >= 8 && p[2] == ':') {
        if (p[5] != ':' || !digits(p, 2, &h) || !digits(p + 3, 2, &mi))
            return 0;
        if (n > 8 && (n == 9 || n > 15 || p[8] != '.' || !digits(p + 9, (int)(n - 9), &frac)))
            return 0;
        double s;
        if (!float_double(p + 6, n - 6, &s, g))
            return 0;
        *out = (double)(h * 3600 + mi * 60) + s; /* int(h) * 3600 + int(m) * 60 + float(s) */
        *dated = 0;
        return 1;
    }
    return 0;
}

/* -- rows: the taken lines of row classes, one entry each --------------------------------- */

struct Rows {
    Py_ssize_t n, cap;
    int nslots;
    int64_t *line, *start, *end;
    int32_t *plan;
    unsigned char *rid, *cls, *dated;
    double *sec, *val; /* val: slot after slot (val[slot * cap + row]), NaN where the record has no such field */
};

static void rows_free(Rows *r)
{
    PyMem_RawFree(r->line);
    PyMem_RawFree(r->start);
    PyMem_RawFree(r->end);
    PyMem_RawFree(r->plan);
    PyMem_RawFree(r->rid);
    PyMem_RawFree(r->cls);
    PyMem_RawFree(r->dated);
    PyMem_RawFree(r->sec);
    PyMem_RawFree(r->val);
    memset(r, 0, sizeof *r);
}

#define GROW(field, type)                                                              \
    do {                                                                               \
        type *t_ = PyMem_RawRealloc(r->field, (size_t)cap * sizeof(type) * (size_t)mult); \
        if (!t_)                                                                       \
            return -1;                                                                 \
        r->field = t_;                                                                 \
    } while (0)

static int rows_reserve(Rows *r)
{
    if (r->n < r->cap)
        return 0;
    Py_ssize_t cap = r->cap ? r->cap * 2 : 1024;
    int mult = 1;
    GROW(line, int64_t);
    GROW(start, int64_t);
    GROW(end, int64_t);
    GROW(plan, int32_t);
    GROW(rid, unsigned char);
    GROW(cls, unsigned char);
    GROW(dated, unsigned char);
    GROW(sec, double);
    /* val holds slot after slot, each with room for cap rows (val[slot * cap + row]): grown
     * into a new array, each slot's rows moved to its new place */
    int m = r->nslots ? r->nslots : 1;
    double *val = PyMem_RawMalloc((size_t)cap * sizeof(double) * (size_t)m);
    if (!val)
        return -1;
    for (int k = 0; k < m && r->val; k++)
        memcpy(val + (Py_ssize_t)k * cap, r->val + (Py_ssize_t)k * r->cap, (size_t)r->n * sizeof(double));
    PyMem_RawFree(r->val);
    r->val = val;
    r->cap = cap;
    return 0;
}

static PyObject *col_bytes(const void *p, Py_ssize_t n, size_t size)
{
    return PyBytes_FromStringAndSize(p ? (const char *)p : "", (Py_ssize_t)((size_t)n * size));
}

/* (n, nslots, line, rid, cls, dated, plan, sec, start, end, val): each column a bytes
 * object of native int64 / uint8 / int32 / double values; val holds slot after slot
 * (val[slot * n + row]), so a loop over one figure reads one compact column. */
static PyObject *rows_tuple(Rows *r)
{
    PyObject *val = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((size_t)r->n * (size_t)r->nslots * 8));
    if (!val)
        return NULL;
    double *out = (double *)PyBytes_AS_STRING(val);
    for (int k = 0; k < r->nslots; k++)
        memcpy(out + (Py_ssize_t)k * r->n, r->val + (Py_ssize_t)k * r->cap, (size_t)r->n * sizeof(double));
    return Py_BuildValue("(niNNNNNNNNN)", r->n, r->nslots, col_bytes(r->line, r->n, 8), col_bytes(r->rid, r->n, 1),
                         col_bytes(r->cls, r->n, 1), col_bytes(r->dated, r->n, 1), col_bytes(r->plan, r->n, 4),
                         col_bytes(r->sec, r->n, 8), col_bytes(r->start, r->n, 8), col_bytes(r->end, r->n, 8), val);
}

/* -- scan ------------------------------------------------------------------------------ */

static PyObject *stamp_str(const unsigned char *p, Py_ssize_t n, int iso)
{
    PyObject *s = PyUnicode_New(n, 127);
    if (!s)
        return NULL;
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(s);
    memcpy(d, p, (size_t)n);
    if (iso) {
        for (Py_ssize_t k = 0; k < n; k++)
            if (d[k] == ' ') { d[k] = 'T'; break; }
    }
    return s;
}

/* scan(buf, pos) -> (stop, lines, counts, lasts, values, ordered, rows)
 *
 * buf holds whole lines, each ending in "\n". From pos (a line start), every line
 * whose shape is registered and whose class and rank are ready is taken; the scan
 * stops at the first line that is not (stop: its offset; len(buf) when all were taken).
 *   counts:  ((kind, n), ...) lines taken per kind code
 *   lasts:   ((cls, rank_id, line, start, end, plan), ...) the last line taken of each
 *            class and rank: line index from pos, its byte span in buf, its plan
 *   values:  ((slot, rank_id, ints, doubles), ...) converted numbers by slot and rank:
 *            doubles a bytes object of native doubles, all read by int() (ints: True; each
 *            within 2**53, so the int is the double's value) or all by float(); a line
 *            that would mix the two in a slot, or holds a larger int, stops the scan
 *   ordered: ((slot, [stamp, ...], ints, doubles), ...) for ordered slots, in line order
 *            with the line's stamp (one str object for neighbouring equal stamps)
 *   rows:    None, or every taken line of a row class as columns (rows_tuple): its line
 *            index, rank id, class, plan, byte span, stamp in seconds (stamp_seconds;
 *            a stamp not read there stops the scan) and a double per slot (NaN where
 *            its record has no such field); row-only slots are kept here alone
 * New rank texts get ids (rank_names); a line with a new rank stops the scan, since no
 * rank is ready before the caller says so. The lines are walked without the GIL (scan_lines),
 * so that another thread (reading the next block) runs meanwhile; the scanner itself must not
 * be used by two threads at once (a second call raises RuntimeError).
 */
/* The lines of buf from *pos on, taken until one cannot be (see Scanner_scan); runs without
 * the GIL (g), touching no Python object. 0; -1: out of memory. A line with a rank not seen
 * before stops the scan with *new_rank (its offset in buf) set. */
static int scan_lines(Scanner *self, const unsigned char *buf, Py_ssize_t n, Py_ssize_t *pos_io,
                      Py_ssize_t *lines_io, int *top_io, Py_ssize_t *new_rank, Gil *g)
{
    Py_ssize_t pos = *pos_io, lines = 0;
    int top = 0; /* rank ids below this were taken */
    int status = 0;
    double cv[MAX_SLOTS]; /* the line's value slots' numbers, and what read them */
    int ctag[MAX_SLOTS];
    Rows *rows = self->rows;
    const unsigned char *sec_p = NULL; /* the stamp last read as seconds */
    Py_ssize_t sec_n = 0;
    double sec_v = 0.0;
    int sec_dated = 0;
    while (pos < n) {
        const unsigned char *p = buf + pos;
        const unsigned char *nl = memchr(p, '\n', (size_t)(n - pos));
        if (!nl)
            break; /* not a whole line */
        Py_ssize_t len = nl - p;
        Shape *sh = NULL;
        if (len <= MAX_KEY) {
            Shape **way = self->recent[len & 255];
            for (int w = 0; w < RECENT_WAYS && way[w]; w++) {
                if (way[w]->k.len == len && shape_equal(p, way[w]->k.key, len)) {
                    sh = way[w];
                    for (; w > 0; w--) /* latest first */
                        way[w] = way[w - 1];
                    way[0] = sh;
                    break;
                }
            }
            if (!sh && (sh = lookup(self, p, len))) {
                for (int w = RECENT_WAYS - 1; w > 0; w--)
                    way[w] = way[w - 1];
                way[0] = sh;
            }
        }
        if (!sh)
            break;
        int rid = 0;
        if (sh->ra >= 0) {
            const unsigned char *rp = p + sh->ra;
            Py_ssize_t rn = sh->rb - sh->ra;
            rid = -1;
            if (rn >= 1 && rn <= 8) { /* one word compared, not a call of memcmp per rank */
                uint64_t w = shape_tail8(p, sh->ra, sh->rb);
                for (int k = 1; k < self->nranks; k++) {
                    if (self->rank_word[k] == w && self->rank_len[k] == rn) {
                        rid = k;
                        break;
                    }
                }
            } else {
                for (int k = 1; k < self->nranks; k++) {
                    if (self->rank_len[k] == rn && memcmp(self->rank_text[k], rp, (size_t)rn) == 0) {
                        rid = k;
                        break;
                    }
                }
            }
            if (rid < 0) {
                if (self->nranks < MAX_RANKS)
                    *new_rank = pos; /* registered by the caller: a new rank is never ready */
                break;               /* (too many ranks: the exact path reads the line) */
            }
        }
        if (!self->ready[sh->cls][rid])
            break;
        int ok = 1;
        int as_row = self->row_cls[sh->cls];
        double *rv = NULL; /* the row's first slot; slot k at rv[k * rows->cap] */
        if (as_row) {
            if (sh->ta < 0)
                break; /* a row needs a stamp (the caller registers none without) */
            if (rows_reserve(rows) < 0) {
                status = -1;
                break;
            }
            const unsigned char *tp = p + sh->ta;
            Py_ssize_t tn = sh->tb - sh->ta;
            if (!(sec_p && tn == sec_n && memcmp(tp, sec_p, (size_t)tn) == 0)) {
                if (!stamp_seconds(tp, tn, &sec_v, &sec_dated, g))
                    break; /* not a stamp read here: the exact path reads the line */
                sec_p = tp;
                sec_n = tn;
            }
            rv = rows->val + rows->n;
            for (int k = 0; k < rows->nslots; k++)
                rv[k * rows->cap] = Py_NAN;
        }
        for (int k = 0; k < sh->nslots; k++) {
            Slot *sl = &sh->slots[k];
            const unsigned char *vp = p + sl->a;
            Py_ssize_t vn = sl->b - sl->a;
            if (self->row_only[sl->slot]) {
                ctag[k] = DBL_NONE;
                double d = 0.0;
                int got = sl->conv == CONV_BOOL ? bool_double(vp, vn, &d)
                          : sl->conv == CONV_FLOAT ? float_double(vp, vn, &d, g) : int_double(vp, vn, &d);
                if (got && sl->guarded && d != sl->equal)
                    got = 0;
                if (got && rv)
                    rv[sl->slot * rows->cap] = d;
                if (got)
                    continue;
            } else {
                /* a slot's numbers of one scan are all ints or all floats: a line that would
                 * mix them stops the scan (the exact path reads it, the next scan goes on) */
                int t0 = self->vals[sl->slot][rid].tag, t1 = self->ord_y[sl->slot].tag;
                if (value_double(vp, vn, sl->conv, &cv[k], &ctag[k], g) && (!sl->guarded || cv[k] == sl->equal) &&
                    (!t0 || t0 == ctag[k]) &&
                    (!self->ordered[sl->slot] || !t1 || t1 == ctag[k])) {
                    if (rv)
                        rv[sl->slot * rows->cap] = cv[k];
                    continue;
                }
            }
            ok = 0;
            break;
        }
        if (!ok)
            break;
        /* taken: append (space first, so that a failure leaves no half-taken line) */
        for (int k = 0; k < sh->nslots && ok; k++) {
            int slot = sh->slots[k].slot;
            if (!ctag[k])
                continue; /* a row-only slot */
            ok = dbuf_push(&self->vals[slot][rid], cv[k], ctag[k]) == 0;
            if (ok && self->ordered[slot])
                ok = sbuf_push(&self->ord_ts[slot], sh->ta < 0 ? -1 : pos + sh->ta, (int)(sh->tb - sh->ta),
                               sh->ts_iso) == 0 &&
                     dbuf_push(&self->ord_y[slot], cv[k], ctag[k]) == 0;
        }
        if (!ok) {
            status = -1; /* out of memory: the scan's result is not used */
            break;
        }
        if (as_row) {
            Py_ssize_t r = rows->n++;
            rows->line[r] = lines;
            rows->start[r] = pos + sh->skip;
            rows->end[r] = pos + len;
            rows->plan[r] = sh->plan;
            rows->rid[r] = (unsigned char)rid;
            rows->cls[r] = (unsigned char)sh->cls;
            rows->dated[r] = (unsigned char)sec_dated;
            rows->sec[r] = sec_v;
        }
        self->counts[sh->kind]++;
        Last *l = &self->lasts[sh->cls][rid];
        l->line = lines;
        l->start = pos + sh->skip;
        l->end = len + pos;
        l->plan = sh->plan;
        self->seen[sh->cls][rid] = 1;
        if (rid >= top)
            top = rid + 1;
        lines++;
        pos += len + 1;
    }
    *pos_io = pos;
    *lines_io = lines;
    *top_io = top;
    return status;
}

/* The str list of an ordered slot's stamps (one object for neighbouring equal stamps). */
static PyObject *stamp_list(const SBuf *ts, const unsigned char *buf)
{
    PyObject *out = PyList_New(ts->n);
    PyObject *last = NULL;
    const StampAt *prev = NULL;
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < ts->n; i++) {
        const StampAt *t = &ts->v[i];
        PyObject *x;
        if (t->at < 0)
            x = Py_None; /* no stamp (the caller registers none such) */
        else if (last && prev && prev->at >= 0 && prev->len == t->len && prev->iso == t->iso &&
                 memcmp(buf + prev->at, buf + t->at, (size_t)t->len) == 0)
            x = last;
        else {
            x = stamp_str(buf + t->at, t->len, t->iso);
            if (!x) {
                Py_DECREF(out);
                return NULL;
            }
            last = x;
            prev = t;
            PyList_SET_ITEM(out, i, x);
            continue;
        }
        Py_INCREF(x);
        PyList_SET_ITEM(out, i, x);
    }
    return out;
}

static PyObject *Scanner_scan(Scanner *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t pos;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the scanner is scanning in another thread");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*n", &b, &pos))
        return NULL;
    const unsigned char *buf = b.buf;
    Py_ssize_t n = b.len;
    PyObject *result = NULL;
    PyObject *oxs[MAX_SLOTS]; /* the ordered slots' stamps */
    memset(self->counts, 0, sizeof self->counts);
    memset(self->seen, 0, sizeof self->seen);
    memset(oxs, 0, sizeof oxs);
    for (int k = 0; k < self->nslots; k++) {
        for (int r = 0; r < self->nranks; r++) /* ids beyond were never given: untouched */
            self->vals[k][r].n = 0, self->vals[k][r].tag = DBL_NONE;
        self->ord_y[k].n = 0;
        self->ord_y[k].tag = DBL_NONE;
        self->ord_ts[k].n = 0;
    }
    Py_ssize_t *counts = self->counts;
    Py_ssize_t lines = 0;
    int top = 0; /* rank ids below this were taken */
    Rows *rows = self->rows;
    if (!rows && !(rows = self->rows = PyMem_Calloc(1, sizeof(Rows)))) {
        PyErr_NoMemory();
        goto done;
    }
    if (rows->nslots != self->nslots) { /* arrays sized for other slots (init called again) */
        rows_free(rows);
        rows->nslots = self->nslots;
    }
    rows->n = 0;
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer");
        goto done;
    }
    Py_ssize_t new_rank = -1;
    self->busy = 1;
    Gil g = {PyEval_SaveThread()};
    int status = scan_lines(self, buf, n, &pos, &lines, &top, &new_rank, &g);
    PyEval_RestoreThread(g.ts);
    self->busy = 0;
    if (status < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (new_rank >= 0) { /* the line it stopped at names a rank not seen before: give it an id */
        Shape *sh = lookup(self, buf + new_rank, (const unsigned char *)memchr(buf + new_rank, '\n', (size_t)(n - new_rank)) - (buf + new_rank));
        const unsigned char *rp = buf + new_rank + sh->ra;
        Py_ssize_t rn = sh->rb - sh->ra;
        PyObject *name = PyUnicode_DecodeASCII((const char *)rp, rn, NULL);
        unsigned char *copy = PyMem_Malloc(rn ? (size_t)rn : 1);
        if (!name || !copy || PyList_Append(self->rank_names, name) < 0) {
            Py_XDECREF(name);
            PyMem_Free(copy);
            if (!PyErr_Occurred())
                PyErr_NoMemory();
            goto done;
        }
        Py_DECREF(name);
        memcpy(copy, rp, (size_t)rn);
        self->rank_text[self->nranks] = copy;
        self->rank_len[self->nranks] = rn;
        self->rank_word[self->nranks] = rn <= 8 ? shape_load8(copy, rn) : 0;
        self->nranks++;
    }
    for (int k = 0; k < self->nslots; k++) {
        if (self->ordered[k] && self->ord_ts[k].n && !(oxs[k] = stamp_list(&self->ord_ts[k], buf)))
            goto done;
    }
    {
        PyObject *c = PyList_New(0), *ls = PyList_New(0), *vs = PyList_New(0), *os = PyList_New(0);
        if (!c || !ls || !vs || !os) {
            Py_XDECREF(c); Py_XDECREF(ls); Py_XDECREF(vs); Py_XDECREF(os);
            goto done;
        }
        int bad = 0;
        for (int k = 0; k < MAX_KINDS && !bad; k++) {
            if (!counts[k])
                continue;
            PyObject *t = Py_BuildValue("(in)", k, counts[k]);
            bad = !t || PyList_Append(c, t) < 0;
            Py_XDECREF(t);
        }
        for (int cl = 0; cl < MAX_CLASSES && !bad; cl++) {
            for (int r = 0; r < top && !bad; r++) {
                if (!self->seen[cl][r])
                    continue;
                Last *l = &self->lasts[cl][r];
                PyObject *t = Py_BuildValue("(iinnni)", cl, r, l->line, l->start, l->end, l->plan);
                bad = !t || PyList_Append(ls, t) < 0;
                Py_XDECREF(t);
            }
        }
        for (int k = 0; k < self->nslots && !bad; k++) {
            for (int r = 0; r < top && !bad; r++) {
                DBuf *d = &self->vals[k][r];
                if (!d->n)
                    continue;
                PyObject *t = Py_BuildValue("(iiNN)", k, r, PyBool_FromLong(d->tag == DBL_INT),
                                            col_bytes(d->v, d->n, sizeof(double)));
                bad = !t || PyList_Append(vs, t) < 0;
                Py_XDECREF(t);
            }
            DBuf *d = &self->ord_y[k];
            if (!bad && oxs[k]) {
                PyObject *t = Py_BuildValue("(iONN)", k, oxs[k], PyBool_FromLong(d->tag == DBL_INT),
                                            col_bytes(d->v, d->n, sizeof(double)));
                bad = !t || PyList_Append(os, t) < 0;
                Py_XDECREF(t);
            }
        }
        PyObject *rs = NULL;
        if (!bad) {
            if (rows->n) {
                rs = rows_tuple(rows);
                bad = !rs;
            } else {
                rs = Py_None;
                Py_INCREF(rs);
            }
        }
        if (!bad)
            result = Py_BuildValue("(nnNNNNN)", pos, lines, c, ls, vs, os, rs);
        else {
            Py_DECREF(c); Py_DECREF(ls); Py_DECREF(vs); Py_DECREF(os);
        }
    }
done:
    for (int k = 0; k < self->nslots; k++)
        Py_XDECREF(oxs[k]);
    PyBuffer_Release(&b);
    return result;
}

static PyObject *Scanner_len(Scanner *self, void *closure)
{
    return PyLong_FromSize_t(self->shapes.count);
}

static PyObject *Scanner_ranks(Scanner *self, void *closure)
{
    Py_INCREF(self->rank_names);
    return self->rank_names;
}

static PyMethodDef Scanner_methods[] = {
    {"add", (PyCFunction)Scanner_add, METH_VARARGS, "Register a line shape's plan."},
    {"set_ready", (PyCFunction)Scanner_set_ready, METH_O, "Declare which classes and ranks are taken in bulk."},
    {"scan", (PyCFunction)Scanner_scan, METH_VARARGS, "Take lines from pos until one cannot be taken."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"shapes", (getter)Scanner_len, NULL, "registered shapes", NULL},
    {"rank_names", (getter)Scanner_ranks, NULL, "rank text by id (0: no rank)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logforensics.native._native.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Stored line-shape plans, applied to whole blocks of lines.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

/* -- rows: the taken lines of the row classes, as columns ------------------------------------ */

typedef struct {
    Py_ssize_t n;
    int nslots;
    const int64_t *line, *start, *end;
    const unsigned char *rid, *cls;
    const double *sec, *val;
    PyObject *owner;
} RowView;

static int row_view(PyObject *t, RowView *v)
{
    PyObject *line, *rid, *cls, *dated, *plan, *sec, *start, *end, *val;
    if (!PyArg_ParseTuple(t, "niSSSSSSSSS", &v->n, &v->nslots, &line, &rid, &cls, &dated, &plan, &sec, &start, &end,
                          &val))
        return -1;
    if (v->nslots < 1 || v->nslots > MAX_SLOTS || PyBytes_GET_SIZE(line) != v->n * 8 ||
        PyBytes_GET_SIZE(rid) != v->n || PyBytes_GET_SIZE(cls) != v->n || PyBytes_GET_SIZE(sec) != v->n * 8 ||
        PyBytes_GET_SIZE(start) != v->n * 8 || PyBytes_GET_SIZE(end) != v->n * 8 ||
        PyBytes_GET_SIZE(val) != v->n * v->nslots * 8) {
        PyErr_SetString(PyExc_ValueError, "not rows of a scan");
        return -1;
    }
    v->line = (const int64_t *)PyBytes_AS_STRING(line);
    v->start = (const int64_t *)PyBytes_AS_STRING(start);
    v->end = (const int64_t *)PyBytes_AS_STRING(end);
    v->rid = (const unsigned char *)PyBytes_AS_STRING(rid);
    v->cls = (const unsigned char *)PyBytes_AS_STRING(cls);
    v->sec = (const double *)PyBytes_AS_STRING(sec);
    v->val = (const double *)PyBytes_AS_STRING(val);
    return 0;
}

/* stamp_seconds(text) -> (seconds, dated) as the scanner reads a row's stamp, or None
 * when it leaves the stamp to the exact path. */
static PyObject *py_stamp_seconds(PyObject *module, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    double sec;
    int dated;
    int ok = stamp_seconds(b.buf, b.len, &sec, &dated, NULL);
    PyBuffer_Release(&b);
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(dO)", sec, dated ? Py_True : Py_False);
}

/* read_float(text) -> float(text) as the scanners read it (surrounding whitespace stripped
 * first), or None when they leave the text to Python's float(). */
static PyObject *py_read_float(PyObject *module, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    double d;
    int ok = float_double(b.buf, b.len, &d, NULL);
    PyBuffer_Release(&b);
    if (!ok)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(d);
}

/* first_row(rows, cls, col, value, start) -> the first row from start on of class cls
 * whose column col holds value, or -1. */
static PyObject *first_row(PyObject *module, PyObject *args)
{
    PyObject *rows_t;
    int cls, col;
    double value;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "Oiidn", &rows_t, &cls, &col, &value, &start))
        return NULL;
    RowView v;
    if (row_view(rows_t, &v) < 0)
        return NULL;
    if (col < 0 || col >= v.nslots) {
        PyErr_SetString(PyExc_ValueError, "bad column");
        return NULL;
    }
    for (Py_ssize_t i = start < 0 ? 0 : start; i < v.n; i++)
        if (v.cls[i] == cls && v.val[col * v.n + i] == value)
            return PyLong_FromSsize_t(i);
    return PyLong_FromLong(-1);
}

/* counters_repeat(rows, cls, tok, alt, run, tput, buf) -> (row, spans). A row of class cls is
 * keyed when its column run (#running-req) is above 0 and it has a value in column tok (else
 * alt) and in column tput; its key is (tokens, running, throughput). row is the first keyed
 * row whose key is that of the row of its rank id before it, or -1; spans lists (rank id,
 * first row, its key, last row, its key, its copy) of the class's rows of each rank id, in
 * the order of their first rows: a key None where the row is not keyed, and the last row's
 * copy (line index, its bytes of buf, the block the rows are of, plan) where it is. */
static int keyed(const RowView *v, Py_ssize_t i, int tok, int alt, int run, int tput, double *key)
{
    double t = v->val[tok * v->n + i];
    if (isnan(t))
        t = v->val[alt * v->n + i];
    key[0] = t;
    key[1] = v->val[run * v->n + i];
    key[2] = v->val[tput * v->n + i];
    return key[1] > 0 && !isnan(t) && !isnan(key[2]);
}

static PyObject *key_tuple(const RowView *v, Py_ssize_t i, int tok, int alt, int run, int tput)
{
    double k[3];
    if (!keyed(v, i, tok, alt, run, tput, k))
        Py_RETURN_NONE;
    return Py_BuildValue("(ddd)", k[0], k[1], k[2]);
}

static PyObject *counters_scan(const RowView *vp, int cls, int tok, int alt, int run, int tput, const Py_buffer *buf,
                               PyObject *plans);

static PyObject *counters_repeat(PyObject *module, PyObject *args)
{
    PyObject *rows_t;
    int cls, tok, alt, run, tput;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "Oiiiiiy*", &rows_t, &cls, &tok, &alt, &run, &tput, &buf))
        return NULL;
    PyObject *out = NULL;
    RowView v;
    if (row_view(rows_t, &v) < 0)
        goto done;
    if (tok < 0 || tok >= v.nslots || alt < 0 || alt >= v.nslots || run < 0 || run >= v.nslots || tput < 0 ||
        tput >= v.nslots) {
        PyErr_SetString(PyExc_ValueError, "bad column");
        goto done;
    }
    out = counters_scan(&v, cls, tok, alt, run, tput, &buf, PyTuple_GET_ITEM(rows_t, 6));
done:
    PyBuffer_Release(&buf);
    return out;
}

static PyObject *row_copy(const RowView *v, Py_ssize_t i, const Py_buffer *buf, const int32_t *plan)
{
    int64_t a = v->start[i], b = v->end[i];
    if (a < 0 || b < a || b > buf->len) {
        PyErr_SetString(PyExc_ValueError, "a row outside its block");
        return NULL;
    }
    return Py_BuildValue("(Ly#i)", (long long)v->line[i], (const char *)buf->buf + a, (Py_ssize_t)(b - a), (int)plan[i]);
}

static PyObject *counters_scan(const RowView *vp, int cls, int tok, int alt, int run, int tput, const Py_buffer *buf,
                               PyObject *plans)
{
    RowView v = *vp;
    if (!PyBytes_Check(plans) || PyBytes_GET_SIZE(plans) != v.n * 4) {
        PyErr_SetString(PyExc_ValueError, "not rows of a scan");
        return NULL;
    }
    const int32_t *plan = (const int32_t *)PyBytes_AS_STRING(plans);
    Py_ssize_t first[MAX_RANKS], last[MAX_RANKS], found = -1;
    unsigned char order[MAX_RANKS];
    int ranks = 0;
    for (int r = 0; r < MAX_RANKS; r++)
        first[r] = last[r] = -1;
    for (Py_ssize_t i = 0; i < v.n; i++) {
        if (v.cls[i] != cls)
            continue;
        unsigned char r = v.rid[i];
        if (found < 0 && last[r] >= 0) {
            double a[3], b[3];
            if (keyed(&v, i, tok, alt, run, tput, a) && keyed(&v, last[r], tok, alt, run, tput, b) && a[0] == b[0] &&
                a[1] == b[1] && a[2] == b[2])
                found = i;
        }
        if (first[r] < 0) {
            first[r] = i;
            order[ranks++] = r;
        }
        last[r] = i;
    }
    PyObject *spans = PyList_New(ranks);
    if (!spans)
        return NULL;
    for (int k = 0; k < ranks; k++) {
        Py_ssize_t a = first[order[k]], b = last[order[k]];
        PyObject *ka = key_tuple(&v, a, tok, alt, run, tput), *kb = ka ? key_tuple(&v, b, tok, alt, run, tput) : NULL;
        PyObject *copy = !kb ? NULL : kb == Py_None ? (Py_INCREF(Py_None), Py_None) : row_copy(&v, b, buf, plan);
        PyObject *span = copy ? Py_BuildValue("(inNnNN)", (int)order[k], a, ka, b, kb, copy) : NULL;
        if (!span) {
            if (!copy) {
                Py_XDECREF(ka);
                Py_XDECREF(kb);
            }
            Py_DECREF(spans);
            return NULL;
        }
        PyList_SET_ITEM(spans, k, span);
    }
    return Py_BuildValue("(nN)", found, spans);
}

/* counter[key] += by (the sketches' buckets, as Counter.update does). */
static int bump(PyObject *counter, long long key, Py_ssize_t by)
{
    PyObject *k = PyLong_FromLongLong(key);
    if (!k)
        return -1;
    PyObject *old = PyDict_GetItemWithError(counter, k);
    if (!old && PyErr_Occurred()) {
        Py_DECREF(k);
        return -1;
    }
    PyObject *add = PyLong_FromSsize_t(by);
    PyObject *sum = add ? (old ? PyNumber_Add(old, add) : (Py_INCREF(add), add)) : NULL;
    Py_XDECREF(add);
    int bad = !sum || PyDict_SetItem(counter, k, sum) < 0;
    Py_XDECREF(sum);
    Py_DECREF(k);
    return bad ? -1 : 0;
}

#define NEAR 4096 /* bucket keys in [-NEAR, NEAR) are counted in an array first */

/* sketch_batch(values, factor, counter) -> (lo, hi, zeros, partials) or None
 *
 * One pass over a sketch's batch: lo and hi are the objects min() and max() return,
 * zeros counts the values not > 0, partials is Shewchuk's exact expansion of the sum
 * (the partials math.fsum keeps: their exact sum is the values' exact sum), and the
 * positive values are bucketed into counter: counter[int(log(x) * factor)] += 1, as
 * Counter.update(map(int, map(mul, map(log, ...)))) does. None, with nothing
 * changed, when a value is not a float or an int below 2**53 in size, or is not
 * finite, or the sum overflows: the caller then takes the Python path. */
/* The core of sketch_batch and sketch_doubles over n finite doubles: the indices of the first
 * minimum and maximum, the count of values not > 0, the exact partial sums, and the positive
 * values bucketed into counter. 1: done; 0: the sum overflows or needs more partials than
 * kept here (nothing changed; the caller takes the Python path); -1: an error. */
static int sketch_core(const double *xs, Py_ssize_t n, double factor, PyObject *counter, Py_ssize_t *lo_i,
                       Py_ssize_t *hi_i, Py_ssize_t *zeros_n, double *part, int *np_out)
{
    Py_ssize_t lo = 0, hi = 0, zeros = 0;
    int np = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double x = xs[i];
        if (!isfinite(x))
            return 0;
        if (x < xs[lo])
            lo = i;
        if (x > xs[hi])
            hi = i;
        if (!(x > 0))
            zeros++;
        /* msum, as math.fsum */
        int j = 0;
        for (int k = 0; k < np; k++) {
            double y = part[k];
            if (fabs(x) < fabs(y)) {
                double t = x;
                x = y;
                y = t;
            }
            double h = x + y;
            double l = y - (h - x);
            if (l != 0.0)
                part[j++] = l;
            x = h;
        }
        if (!isfinite(x) || j >= 63)
            return 0;
        if (x != 0.0)
            part[j++] = x;
        np = j;
    }
    static Py_ssize_t near[2 * NEAR]; /* zero between calls */
    int first = 2 * NEAR, last = -1, bad = 0;
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        double x = xs[i];
        if (!(x > 0))
            continue;
        long long key = (long long)(log(x) * factor);
        if (key >= -NEAR && key < NEAR) {
            int at = (int)(key + NEAR);
            near[at]++;
            if (at < first) first = at;
            if (at > last) last = at;
        } else
            bad = bump(counter, key, 1) < 0;
    }
    for (int at = first; at <= last; at++) {
        if (near[at]) {
            if (!bad)
                bad = bump(counter, (long long)at - NEAR, near[at]) < 0;
            near[at] = 0;
        }
    }
    if (bad)
        return -1;
    *lo_i = lo;
    *hi_i = hi;
    *zeros_n = zeros;
    *np_out = np;
    return 1;
}

static PyObject *partials_list(const double *part, int np)
{
    PyObject *plist = PyList_New(np);
    if (!plist)
        return NULL;
    for (int k = 0; k < np; k++) {
        PyObject *f = PyFloat_FromDouble(part[k]);
        if (!f) {
            Py_DECREF(plist);
            return NULL;
        }
        PyList_SET_ITEM(plist, k, f);
    }
    return plist;
}

/* sketch_batch(values, factor, counter) -> (lo, hi, zeros, partials) or None
 *
 * One pass over a sketch's batch: lo and hi are the objects min() and max() return,
 * zeros counts the values not > 0, partials is Shewchuk's exact expansion of the sum
 * (the partials math.fsum keeps: their exact sum is the values' exact sum), and the
 * positive values are bucketed into counter as sketch_batch does. None, with nothing
 * changed, when a value is not a float or an int below 2**53 in size, or is not
 * finite, or the sum overflows: the caller then takes the Python path. */
static PyObject *sketch_batch(PyObject *module, PyObject *args)
{
    PyObject *values, *counter;
    double factor;
    if (!PyArg_ParseTuple(args, "O!dO!", &PyList_Type, &values, &factor, &PyDict_Type, &counter))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (n == 0)
        Py_RETURN_NONE;
    double *xs = PyMem_Malloc((size_t)n * sizeof(double));
    double part[64];
    int np = 0;
    if (!xs)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(values, i);
        if (PyFloat_CheckExact(o))
            xs[i] = PyFloat_AS_DOUBLE(o);
        else if (PyLong_CheckExact(o)) {
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
            if (overflow || v > (1LL << 53) || v < -(1LL << 53))
                goto pure;
            xs[i] = (double)v;
        } else
            goto pure;
    }
    Py_ssize_t lo, hi, zeros;
    int got = sketch_core(xs, n, factor, counter, &lo, &hi, &zeros, part, &np);
    PyMem_Free(xs);
    if (got < 0)
        return NULL;
    if (got == 0)
        Py_RETURN_NONE;
    PyObject *plist = partials_list(part, np);
    if (!plist)
        return NULL;
    return Py_BuildValue("(OOnN)", PyList_GET_ITEM(values, lo), PyList_GET_ITEM(values, hi), zeros, plist);
pure:
    PyMem_Free(xs);
    Py_RETURN_NONE;
}

/* sketch_doubles(doubles, ints, factor, counter) -> (lo, hi, zeros, partials) or None
 *
 * sketch_batch over a scan's numbers (a bytes object of native doubles): lo and hi as
 * the int()s (ints: True) or the floats the values were read as. */
static PyObject *sketch_doubles(PyObject *module, PyObject *args)
{
    Py_buffer b;
    int ints;
    PyObject *counter;
    double factor;
    if (!PyArg_ParseTuple(args, "y*pdO!", &b, &ints, &factor, &PyDict_Type, &counter))
        return NULL;
    Py_ssize_t n = b.len / (Py_ssize_t)sizeof(double);
    const double *xs = b.buf;
    double part[64];
    int np = 0;
    Py_ssize_t lo, hi, zeros;
    if (n == 0 || b.len % (Py_ssize_t)sizeof(double) || ((uintptr_t)xs % sizeof(double))) {
        PyBuffer_Release(&b);
        Py_RETURN_NONE;
    }
    int got = sketch_core(xs, n, factor, counter, &lo, &hi, &zeros, part, &np);
    double dlo = got > 0 ? xs[lo] : 0.0, dhi = got > 0 ? xs[hi] : 0.0;
    PyBuffer_Release(&b);
    if (got < 0)
        return NULL;
    if (got == 0)
        Py_RETURN_NONE;
    PyObject *plist = partials_list(part, np);
    if (!plist)
        return NULL;
    if (ints)
        return Py_BuildValue("(NNnN)", PyLong_FromDouble(dlo), PyLong_FromDouble(dhi), zeros, plist);
    return Py_BuildValue("(ddnN)", dlo, dhi, zeros, plist);
}

static PyMethodDef module_methods[] = {
    {"sketch_batch", sketch_batch, METH_VARARGS, "Extremes, zeros, exact partial sums and buckets of a batch."},
    {"sketch_doubles", sketch_doubles, METH_VARARGS, "sketch_batch over a scan's numbers as doubles."},
    {"first_row", first_row, METH_VARARGS, "The first row of a class whose column holds a value."},
    {"counters_repeat", counters_repeat, METH_VARARGS, "The first row whose batch figures repeat its rank's last."},
    {"stamp_seconds", py_stamp_seconds, METH_O, "A stamp as seconds, as rows hold it, or None."},
    {"read_float", py_read_float, METH_O, "float(text) as the scanners read it, or None."},
    {NULL, NULL, 0, NULL},
};

/* Scanner, the scanner's functions and constants added to the module m (``_native``); 0, or -1
 * with an exception set. */
int scan_module_add(PyObject *m)
{
    if (native_add(m, &ScannerType, "Scanner", module_methods) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "MAX_RANKS", MAX_RANKS) < 0 || PyModule_AddIntConstant(m, "MAX_CLASSES", MAX_CLASSES) < 0 ||
        PyModule_AddIntConstant(m, "MAX_SLOTS", MAX_SLOTS) < 0)
        return -1;
    return 0;
}
