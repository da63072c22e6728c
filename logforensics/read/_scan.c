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
 * Also: log_buckets(), the quantile sketch's bucketing loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_RANKS 256
#define MAX_CLASSES 8
#define MAX_SLOTS 16
#define MAX_KINDS 256
#define MAX_KEY 4096

typedef struct {
    int slot;
    Py_ssize_t a, b;
    int is_float;
} Slot;

typedef struct {
    uint64_t hash;
    Py_ssize_t len;
    unsigned char *key; /* the masked line */
    int plan, cls, kind;
    Py_ssize_t ra, rb; /* rank span; ra < 0: none */
    Py_ssize_t ta, tb; /* stamp span; ta < 0: none */
    int ts_iso;        /* the stamp's first space becomes "T" */
    int nslots;
    Slot slots[MAX_SLOTS];
} Shape;

typedef struct {
    PyObject_HEAD
    Shape **table;
    size_t cap, count;
    PyObject *rank_names; /* list: id -> str (index 0: None) */
    unsigned char *rank_text[MAX_RANKS];
    Py_ssize_t rank_len[MAX_RANKS];
    int nranks; /* ids in use, 0 included */
    unsigned char ready[MAX_CLASSES][MAX_RANKS];
    int nslots;
    unsigned char ordered[MAX_SLOTS];
} Scanner;

/* -- masking and hashing, eight bytes at a time --------------------------------------- */

static inline uint64_t load8(const unsigned char *p, Py_ssize_t n)
{
    uint64_t w = 0;
    if (n >= 8)
        memcpy(&w, p, 8);
    else
        memcpy(&w, p, (size_t)n);
    return w;
}

/* Every byte '1'..'9' becomes '0' (bytes with the high bit set are left alone). */
static inline uint64_t mask8(uint64_t x)
{
    const uint64_t H = 0x8080808080808080ULL;
    uint64_t d = x & ~H;
    uint64_t ge1 = (d + 0x4f4f4f4f4f4f4f4fULL) & H;    /* d >= 0x31 */
    uint64_t le9 = ~(d + 0x4646464646464646ULL) & H;   /* d <= 0x39 */
    uint64_t dig = ge1 & le9 & ~x;
    return x & ~((dig >> 7) * 0x0f);
}

static inline uint64_t mix(uint64_t h, uint64_t w)
{
    h ^= w;
    h *= 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}

static uint64_t masked_hash(const unsigned char *p, Py_ssize_t n)
{
    uint64_t h = (uint64_t)n * 0xff51afd7ed558ccdULL;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        h = mix(h, mask8(load8(p + i, 8)));
    if (i < n)
        h = mix(h, mask8(load8(p + i, n - i)));
    return h;
}

static int masked_equal(const unsigned char *line, const unsigned char *key, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t k;
        memcpy(&k, key + i, 8);
        if (mask8(load8(line + i, 8)) != k)
            return 0;
    }
    if (i < n) {
        uint64_t k = load8(key + i, n - i);
        if (mask8(load8(line + i, n - i)) != k)
            return 0;
    }
    return 1;
}

static Shape *lookup(Scanner *s, const unsigned char *p, Py_ssize_t n)
{
    if (!s->cap)
        return NULL;
    uint64_t h = masked_hash(p, n);
    size_t i = (size_t)h & (s->cap - 1);
    for (;;) {
        Shape *sh = s->table[i];
        if (!sh)
            return NULL;
        if (sh->hash == h && sh->len == n && masked_equal(p, sh->key, n))
            return sh;
        i = (i + 1) & (s->cap - 1);
    }
}

static int grow(Scanner *s)
{
    size_t cap = s->cap ? s->cap * 2 : 1024;
    Shape **t = PyMem_Calloc(cap, sizeof(Shape *));
    if (!t) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t k = 0; k < s->cap; k++) {
        Shape *sh = s->table[k];
        if (!sh)
            continue;
        size_t i = (size_t)sh->hash & (cap - 1);
        while (t[i])
            i = (i + 1) & (cap - 1);
        t[i] = sh;
    }
    PyMem_Free(s->table);
    s->table = t;
    s->cap = cap;
    return 0;
}

/* -- the type ---------------------------------------------------------------------------- */

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"nslots", "ordered", NULL};
    int nslots = 0;
    PyObject *ordered = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|O", names, &nslots, &ordered))
        return -1;
    if (nslots < 0 || nslots > MAX_SLOTS) {
        PyErr_SetString(PyExc_ValueError, "too many slots");
        return -1;
    }
    self->nslots = nslots;
    memset(self->ordered, 0, sizeof self->ordered);
    if (ordered) {
        PyObject *seq = PySequence_Fast(ordered, "ordered must be a sequence");
        if (!seq)
            return -1;
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, k));
            if (v < 0 || v >= nslots) {
                Py_DECREF(seq);
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "bad ordered slot");
                return -1;
            }
            self->ordered[v] = 1;
        }
        Py_DECREF(seq);
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
    for (size_t k = 0; k < self->cap; k++) {
        if (self->table[k]) {
            PyMem_Free(self->table[k]->key);
            PyMem_Free(self->table[k]);
        }
    }
    PyMem_Free(self->table);
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

/* add(key, plan, cls, kind, rank, ts, ts_iso, slots): slots is ((slot, a, b, is_float), ...) */
static PyObject *Scanner_add(Scanner *self, PyObject *args)
{
    Py_buffer key;
    int plan, cls, kind, ts_iso;
    PyObject *rank, *ts, *slots;
    if (!PyArg_ParseTuple(args, "y*iiiOOpO", &key, &plan, &cls, &kind, &rank, &ts, &ts_iso, &slots))
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
    sh->len = key.len;
    sh->key = PyMem_Malloc(key.len ? (size_t)key.len : 1);
    if (!sh->key) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < key.len; i++) { /* stored masked, whatever was given */
        unsigned char c = ((unsigned char *)key.buf)[i];
        sh->key[i] = (c >= '1' && c <= '9') ? '0' : c;
    }
    sh->hash = masked_hash(sh->key, key.len);
    sh->plan = plan;
    sh->cls = cls;
    sh->kind = kind;
    sh->ts_iso = ts_iso;
    if (span_arg(rank, &sh->ra, &sh->rb) < 0 || span_arg(ts, &sh->ta, &sh->tb) < 0)
        goto fail;
    if (sh->rb > key.len || sh->tb > key.len || sh->ra > sh->rb || sh->ta > sh->tb) {
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
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "inni", &sl->slot, &sl->a, &sl->b, &sl->is_float))
            goto fail;
        if (sl->slot < 0 || sl->slot >= self->nslots || sl->a < 0 || sl->a > sl->b || sl->b > key.len) {
            PyErr_SetString(PyExc_ValueError, "bad slot");
            goto fail;
        }
    }
    Py_CLEAR(seq);
    if (lookup(self, sh->key, sh->len)) { /* already known: keep the first */
        PyMem_Free(sh->key);
        PyMem_Free(sh);
        PyBuffer_Release(&key);
        Py_RETURN_FALSE;
    }
    if ((self->count + 1) * 2 > self->cap && grow(self) < 0)
        goto fail;
    size_t i = (size_t)sh->hash & (self->cap - 1);
    while (self->table[i])
        i = (i + 1) & (self->cap - 1);
    self->table[i] = sh;
    self->count++;
    PyBuffer_Release(&key);
    Py_RETURN_TRUE;
fail:
    Py_XDECREF(seq);
    if (sh) {
        PyMem_Free(sh->key);
        PyMem_Free(sh);
    }
    PyBuffer_Release(&key);
    return NULL;
}

/* set_ready(table): table[cls * 256 + rank_id] != 0 when lines of that class and rank
 * may be taken in bulk; others stop the scan. */
static PyObject *Scanner_set_ready(Scanner *self, PyObject *arg)
{
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

static PyObject *to_int(const unsigned char *p, Py_ssize_t n)
{
    while (n && is_ws(*p)) { p++; n--; }
    while (n && is_ws(p[n - 1])) n--;
    Py_ssize_t i = 0;
    int neg = 0;
    if (i < n && (p[i] == '-' || p[i] == '+')) { neg = p[i] == '-'; i++; }
    if (i == n || n - i > 18) {
        if (i == n || n > 200)
            return NULL;
        char buf[256];
        memcpy(buf, p, (size_t)n);
        buf[n] = 0;
        for (Py_ssize_t k = i; k < n; k++)
            if (buf[k] < '0' || buf[k] > '9')
                return NULL;
        PyObject *r = PyLong_FromString(buf, NULL, 10);
        if (!r) PyErr_Clear();
        return r;
    }
    long long v = 0;
    for (; i < n; i++) {
        unsigned c = p[i] - '0';
        if (c > 9)
            return NULL;
        v = v * 10 + c;
    }
    return PyLong_FromLongLong(neg ? -v : v);
}

static PyObject *to_float(const unsigned char *p, Py_ssize_t n)
{
    while (n && is_ws(*p)) { p++; n--; }
    while (n && is_ws(p[n - 1])) n--;
    if (n == 0 || n > 60)
        return NULL;
    char buf[64];
    for (Py_ssize_t k = 0; k < n; k++) { /* digits, sign, point, exponent only */
        unsigned char c = p[k];
        if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E'))
            return NULL;
        buf[k] = (char)c;
    }
    buf[n] = 0;
    char *end = NULL;
    double d = PyOS_string_to_double(buf, &end, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    if (end != buf + n)
        return NULL;
    return PyFloat_FromDouble(d);
}

/* -- scan ------------------------------------------------------------------------------ */

typedef struct {
    Py_ssize_t line, start, end;
    int plan;
} Last;

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

/* scan(buf, pos) -> (stop, lines, counts, lasts, values, ordered)
 *
 * buf holds whole lines, each ending in "\n". From pos (a line start), every line
 * whose shape is registered and whose class and rank are ready is taken; the scan
 * stops at the first line that is not (stop: its offset; len(buf) when all were taken).
 *   counts:  ((kind, n), ...) lines taken per kind code
 *   lasts:   ((cls, rank_id, line, start, end, plan), ...) the last line taken of each
 *            class and rank: line index from pos, its byte span in buf, its plan
 *   values:  ((slot, rank_id, [value, ...]), ...) converted numbers by slot and rank
 *   ordered: ((slot, [stamp, ...], [value, ...]), ...) for ordered slots, in line order
 *            with the line's stamp (one str object for neighbouring equal stamps)
 * New rank texts get ids (rank_names); a line with a new rank stops the scan, since no
 * rank is ready before the caller says so.
 */
static PyObject *Scanner_scan(Scanner *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "y*n", &b, &pos))
        return NULL;
    const unsigned char *buf = b.buf;
    Py_ssize_t n = b.len;
    PyObject *result = NULL;
    PyObject *vals[MAX_SLOTS][MAX_RANKS];
    PyObject *oxs[MAX_SLOTS], *oys[MAX_SLOTS];
    int used_vals = 0;
    static Py_ssize_t counts[MAX_KINDS];
    static Last lasts[MAX_CLASSES][MAX_RANKS];
    static unsigned char seen[MAX_CLASSES][MAX_RANKS];
    memset(counts, 0, sizeof counts);
    memset(seen, 0, sizeof seen);
    memset(oxs, 0, sizeof oxs);
    memset(oys, 0, sizeof oys);
    for (int k = 0; k < self->nslots; k++)
        memset(vals[k], 0, sizeof vals[k]);
    used_vals = 1;
    const unsigned char *stamp_p = NULL;
    Py_ssize_t stamp_n = -1;
    int stamp_iso = -1;
    PyObject *stamp = NULL;
    Py_ssize_t lines = 0;
    int top = 0; /* rank ids below this were taken */
    PyObject *conv[MAX_SLOTS];
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer");
        goto done;
    }
    while (pos < n) {
        const unsigned char *p = buf + pos;
        const unsigned char *nl = memchr(p, '\n', (size_t)(n - pos));
        if (!nl)
            break; /* not a whole line */
        Py_ssize_t len = nl - p;
        Shape *sh = len <= MAX_KEY ? lookup(self, p, len) : NULL;
        if (!sh)
            break;
        int rid = 0;
        if (sh->ra >= 0) {
            const unsigned char *rp = p + sh->ra;
            Py_ssize_t rn = sh->rb - sh->ra;
            rid = -1;
            for (int k = 1; k < self->nranks; k++) {
                if (self->rank_len[k] == rn && memcmp(self->rank_text[k], rp, (size_t)rn) == 0) {
                    rid = k;
                    break;
                }
            }
            if (rid < 0) {
                if (self->nranks >= MAX_RANKS)
                    break; /* too many ranks: the exact path reads the line */
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
                self->nranks++;
                break; /* a new rank is never ready */
            }
        }
        if (!self->ready[sh->cls][rid])
            break;
        int ok = 1;
        for (int k = 0; k < sh->nslots; k++) {
            Slot *sl = &sh->slots[k];
            conv[k] = sl->is_float ? to_float(p + sl->a, sl->b - sl->a) : to_int(p + sl->a, sl->b - sl->a);
            if (!conv[k]) {
                for (int j = 0; j < k; j++)
                    Py_DECREF(conv[j]);
                ok = 0;
                break;
            }
        }
        if (!ok)
            break;
        /* taken: append */
        for (int k = 0; k < sh->nslots; k++) {
            int slot = sh->slots[k].slot;
            PyObject **list = &vals[slot][rid];
            if (!*list && !(*list = PyList_New(0))) {
                for (int j = k; j < sh->nslots; j++)
                    Py_DECREF(conv[j]);
                goto done;
            }
            if (PyList_Append(*list, conv[k]) < 0) {
                for (int j = k; j < sh->nslots; j++)
                    Py_DECREF(conv[j]);
                goto done;
            }
            if (self->ordered[slot]) {
                if (!oxs[slot] && (!(oxs[slot] = PyList_New(0)) || !(oys[slot] = PyList_New(0)))) {
                    for (int j = k; j < sh->nslots; j++)
                        Py_DECREF(conv[j]);
                    goto done;
                }
                PyObject *x;
                if (sh->ta < 0) {
                    x = Py_None; /* no stamp (the caller registers none such) */
                    Py_INCREF(x);
                } else {
                    Py_ssize_t tn = sh->tb - sh->ta;
                    const unsigned char *tp = p + sh->ta;
                    if (!(stamp && tn == stamp_n && stamp_iso == sh->ts_iso && memcmp(tp, stamp_p, (size_t)tn) == 0)) {
                        Py_XDECREF(stamp);
                        stamp = stamp_str(tp, tn, sh->ts_iso);
                        stamp_p = tp;
                        stamp_n = tn;
                        stamp_iso = sh->ts_iso;
                        if (!stamp) {
                            for (int j = k; j < sh->nslots; j++)
                                Py_DECREF(conv[j]);
                            goto done;
                        }
                    }
                    x = stamp;
                    Py_INCREF(x);
                }
                int bad = !x || PyList_Append(oxs[slot], x) < 0 || PyList_Append(oys[slot], conv[k]) < 0;
                Py_XDECREF(x);
                if (bad) {
                    for (int j = k; j < sh->nslots; j++)
                        Py_DECREF(conv[j]);
                    goto done;
                }
            }
            Py_DECREF(conv[k]);
        }
        counts[sh->kind]++;
        Last *l = &lasts[sh->cls][rid];
        l->line = lines;
        l->start = pos;
        l->end = len + pos;
        l->plan = sh->plan;
        seen[sh->cls][rid] = 1;
        if (rid >= top)
            top = rid + 1;
        lines++;
        pos += len + 1;
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
                if (!seen[cl][r])
                    continue;
                Last *l = &lasts[cl][r];
                PyObject *t = Py_BuildValue("(iinnni)", cl, r, l->line, l->start, l->end, l->plan);
                bad = !t || PyList_Append(ls, t) < 0;
                Py_XDECREF(t);
            }
        }
        for (int k = 0; k < self->nslots && !bad; k++) {
            for (int r = 0; r < top && !bad; r++) {
                if (!vals[k][r])
                    continue;
                PyObject *t = Py_BuildValue("(iiO)", k, r, vals[k][r]);
                bad = !t || PyList_Append(vs, t) < 0;
                Py_XDECREF(t);
            }
            if (!bad && oxs[k]) {
                PyObject *t = Py_BuildValue("(iOO)", k, oxs[k], oys[k]);
                bad = !t || PyList_Append(os, t) < 0;
                Py_XDECREF(t);
            }
        }
        if (!bad)
            result = Py_BuildValue("(nnNNNN)", pos, lines, c, ls, vs, os);
        else {
            Py_DECREF(c); Py_DECREF(ls); Py_DECREF(vs); Py_DECREF(os);
        }
    }
done:
    Py_XDECREF(stamp);
    if (used_vals) {
        for (int k = 0; k < self->nslots; k++) {
            for (int r = 0; r < MAX_RANKS; r++)
                Py_XDECREF(vals[k][r]);
            Py_XDECREF(oxs[k]);
            Py_XDECREF(oys[k]);
        }
    }
    PyBuffer_Release(&b);
    return result;
}

static PyObject *Scanner_len(Scanner *self, void *closure)
{
    return PyLong_FromSize_t(self->count);
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
    .tp_name = "logforensics.read._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Stored line-shape plans, applied to whole blocks of lines.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

/* log_buckets(values, factor, counter): counter[int(log(x) * factor)] += 1 for each
 * value x > 0 (ints or floats), as Counter.update(map(int, map(mul, map(log, ...)))) does. */
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

static PyObject *log_buckets(PyObject *module, PyObject *args)
{
    PyObject *values, *counter;
    double factor;
    if (!PyArg_ParseTuple(args, "OdO!", &values, &factor, &PyDict_Type, &counter))
        return NULL;
    PyObject *seq = PySequence_Fast(values, "values must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t *near = PyMem_Calloc(2 * NEAR, sizeof(Py_ssize_t));
    if (!near) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    int lo = 2 * NEAR, hi = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = items[i];
        double x;
        if (PyFloat_CheckExact(o))
            x = PyFloat_AS_DOUBLE(o);
        else {
            x = PyFloat_AsDouble(o);
            if (x == -1.0 && PyErr_Occurred())
                goto fail;
        }
        if (!(x > 0))
            continue;
        double y = log(x) * factor;
        if (!isfinite(y) || y > 9e18 || y < -9e18) {
            PyErr_SetString(PyExc_OverflowError, "value out of range");
            goto fail;
        }
        long long key = (long long)y; /* truncation, as int() */
        if (key >= -NEAR && key < NEAR) {
            int at = (int)(key + NEAR);
            near[at]++;
            if (at < lo) lo = at;
            if (at > hi) hi = at;
        } else if (bump(counter, key, 1) < 0)
            goto fail;
    }
    for (int at = lo; at <= hi; at++)
        if (near[at] && bump(counter, (long long)at - NEAR, near[at]) < 0)
            goto fail;
    PyMem_Free(near);
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    PyMem_Free(near);
    Py_DECREF(seq);
    return NULL;
}

/* sketch_batch(values, factor, counter) -> (lo, hi, zeros, partials) or None
 *
 * One pass over a sketch's batch: lo and hi are the objects min() and max() return,
 * zeros counts the values not > 0, partials is Shewchuk's exact expansion of the sum
 * (the partials math.fsum keeps: their exact sum is the values' exact sum), and the
 * positive values are bucketed into counter as log_buckets does. None, with nothing
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
    Py_ssize_t lo = 0, hi = 0, zeros = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(values, i);
        double x;
        if (PyFloat_CheckExact(o))
            x = PyFloat_AS_DOUBLE(o);
        else if (PyLong_CheckExact(o)) {
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
            if (overflow || v > (1LL << 53) || v < -(1LL << 53))
                goto pure;
            x = (double)v;
        } else
            goto pure;
        if (!isfinite(x))
            goto pure;
        xs[i] = x;
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
            goto pure;
        if (x != 0.0)
            part[j++] = x;
        np = j;
    }
    {
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
        if (bad) {
            PyMem_Free(xs);
            return NULL;
        }
    }
    PyMem_Free(xs);
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
    return Py_BuildValue("(OOnN)", PyList_GET_ITEM(values, lo), PyList_GET_ITEM(values, hi), zeros, plist);
pure:
    PyMem_Free(xs);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"log_buckets", log_buckets, METH_VARARGS, "Bucket positive values by the log of their size."},
    {"sketch_batch", sketch_batch, METH_VARARGS, "Extremes, zeros, exact partial sums and buckets of a batch."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "Line-shape plans applied in C (optional speed-up).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    if (PyType_Ready(&ScannerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "MAX_RANKS", MAX_RANKS);
    PyModule_AddIntConstant(m, "MAX_CLASSES", MAX_CLASSES);
    PyModule_AddIntConstant(m, "MAX_SLOTS", MAX_SLOTS);
    return m;
}
