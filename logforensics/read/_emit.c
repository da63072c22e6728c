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
 * memoised), so a JSON string needs only the escapes of '"', '\\' and control bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_shape.h"

#define MAX_KEY 4096
#define MAX_OPS 256

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
    uint64_t hash;
    Py_ssize_t len;
    unsigned char *key; /* the masked line */
    int kind;           /* a code of the caller's, counted per taken line */
    int nops;           /* 0: the line is taken and writes nothing */
    Op *ops;
    unsigned char *lit;
} Shape;

typedef struct {
    PyObject_HEAD
    Shape **table;
    size_t cap, count;
} Emitter;

typedef struct {
    unsigned char *p;
    size_t len, cap;
} Out;

static int out_reserve(Out *o, size_t more)
{
    if (o->len + more <= o->cap)
        return 0;
    size_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->len + more)
        cap *= 2;
    unsigned char *p = PyMem_Realloc(o->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    o->p = p;
    o->cap = cap;
    return 0;
}

static Shape *lookup(Emitter *s, const unsigned char *p, Py_ssize_t n)
{
    if (!s->cap)
        return NULL;
    uint64_t h = shape_hash(p, n);
    size_t i = (size_t)h & (s->cap - 1);
    for (;;) {
        Shape *sh = s->table[i];
        if (!sh)
            return NULL;
        if (sh->hash == h && sh->len == n && shape_equal(p, sh->key, n))
            return sh;
        i = (i + 1) & (s->cap - 1);
    }
}

static int grow(Emitter *s)
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

static void shape_free(Shape *sh)
{
    if (!sh)
        return;
    PyMem_Free(sh->key);
    PyMem_Free(sh->ops);
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

static void Emitter_dealloc(Emitter *self)
{
    for (size_t k = 0; k < self->cap; k++)
        shape_free(self->table[k]);
    PyMem_Free(self->table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* add(key, kind, ops) -> bool: ops is a sequence of bytes (a literal), an int (OP_LINE,
 * OP_TEXT) or (code, a, b) (a span of the line and its conversion). False when the shape
 * is already known (the first template is kept). */
static PyObject *Emitter_add(Emitter *self, PyObject *args)
{
    Py_buffer key;
    int kind;
    PyObject *ops_in;
    if (!PyArg_ParseTuple(args, "y*iO", &key, &kind, &ops_in))
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
    sh->len = key.len;
    sh->kind = kind;
    sh->nops = (int)nops;
    sh->key = PyMem_Malloc(key.len ? (size_t)key.len : 1);
    sh->ops = PyMem_Calloc(nops ? (size_t)nops : 1, sizeof(Op));
    if (!sh->key || !sh->ops) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < key.len; i++) { /* stored masked, whatever was given */
        unsigned char c = ((unsigned char *)key.buf)[i];
        sh->key[i] = (c >= '1' && c <= '9') ? '0' : c;
    }
    sh->hash = shape_hash(sh->key, key.len);
    Py_ssize_t litlen = 0;
    for (Py_ssize_t k = 0; k < nops; k++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, k);
        if (PyBytes_Check(o))
            litlen += PyBytes_GET_SIZE(o);
    }
    sh->lit = PyMem_Malloc(litlen ? (size_t)litlen : 1);
    if (!sh->lit) {
        PyErr_NoMemory();
        goto fail;
    }
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
    if (lookup(self, sh->key, sh->len)) {
        shape_free(sh);
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
    shape_free(sh);
    PyBuffer_Release(&key);
    return NULL;
}

/* -- values ---------------------------------------------------------------------------- */

/* 1: the byte is written as is inside a JSON string (json.dumps, ensure_ascii=False). */
static unsigned char plain_byte[256];

static void init_tables(void)
{
    for (int c = 0; c < 256; c++)
        plain_byte[c] = c >= 0x20 && c != '"' && c != '\\';
}

/* p[0:n] as a JSON string, quotes included. */
static int put_string(Out *o, const unsigned char *p, Py_ssize_t n)
{
    if (out_reserve(o, (size_t)n * 6 + 2) < 0)
        return -1;
    unsigned char *d = o->p + o->len;
    *d++ = '"';
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) { /* eight bytes at a time while none needs an escape */
        uint64_t x;
        memcpy(&x, p + i, 8);
        const uint64_t L = 0x0101010101010101ULL, H = 0x8080808080808080ULL;
        uint64_t ctl = (x - L * 0x20) & ~x;                 /* a byte < 0x20 (or >= 0x80: ignored below) */
        uint64_t q = x ^ (L * '"'), bs = x ^ (L * '\\');
        uint64_t hit = (ctl | ((q - L) & ~q) | ((bs - L) & ~bs)) & H & ~(x & H);
        if (hit)
            break;
        memcpy(d, p + i, 8);
        d += 8;
    }
    for (; i < n; i++) {
        unsigned char c = p[i];
        if (plain_byte[c]) {
            *d++ = c;
            continue;
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
    }
    *d++ = '"';
    o->len = (size_t)(d - o->p);
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

/* int(text) for [+-]digits (at most 18 of them); 0: not read here. */
static int read_int(const unsigned char *p, Py_ssize_t n, long long *out)
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

/* float(text) for digits, signs, points and exponents only; 0: not read here. */
static int read_float(const unsigned char *p, Py_ssize_t n, double *out)
{
    if (n == 0 || n > 60)
        return 0;
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
        if (!read_int(p, n, &v))
            return 0;
        return put_decimal(o, v) < 0 ? -1 : 1;
    case OP_FLOAT: {
        int r = put_plain_decimal(o, p, n);
        if (r)
            return r;
    }
        if (!read_float(p, n, &d))
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

/* scan(buf, pos, first_line) -> (stop, lines, out, counts)
 *
 * buf holds whole lines, each ending in "\n". From pos (a line start, numbered
 * first_line), every line whose shape is registered and whose values convert is taken
 * and its template written to out (bytes); the scan stops at the first line that is not
 * (stop: its offset; len(buf) when all were taken). counts: {kind: lines taken}.
 */
static PyObject *Emitter_scan(Emitter *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t pos;
    long long line;
    if (!PyArg_ParseTuple(args, "y*nL", &b, &pos, &line))
        return NULL;
    const unsigned char *buf = b.buf;
    Py_ssize_t n = b.len;
    PyObject *result = NULL;
    Out o = {NULL, 0, 0};
    Py_ssize_t lines = 0;
    Py_ssize_t counts[256];
    memset(counts, 0, sizeof counts);
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer");
        goto done;
    }
    if (out_reserve(&o, (size_t)(n - pos) * 3 + 1024) < 0)
        goto done;
    while (pos < n) {
        const unsigned char *p = buf + pos;
        const unsigned char *nl = memchr(p, '\n', (size_t)(n - pos));
        if (!nl)
            break; /* not a whole line */
        Py_ssize_t len = nl - p;
        Shape *sh = len <= MAX_KEY ? lookup(self, p, len) : NULL;
        if (!sh)
            break;
        size_t mark = o.len;
        int ok = 1;
        for (int k = 0; k < sh->nops && ok; k++) {
            Op *op = &sh->ops[k];
            int r;
            switch (op->code) {
            case OP_LIT:
                r = put_bytes(&o, sh->lit + op->a, (size_t)(op->b - op->a)) < 0 ? -1 : 1;
                break;
            case OP_LINE:
                r = put_decimal(&o, line + lines) < 0 ? -1 : 1;
                break;
            case OP_TEXT:
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
        result = Py_BuildValue("(nny#N)", pos, lines, (const char *)o.p, (Py_ssize_t)o.len, c);
    }
done:
    PyMem_Free(o.p);
    PyBuffer_Release(&b);
    return result;
}

static PyObject *Emitter_len(Emitter *self, void *closure)
{
    return PyLong_FromSize_t(self->count);
}

static PyMethodDef Emitter_methods[] = {
    {"add", (PyCFunction)Emitter_add, METH_VARARGS, "add(key, kind, ops) -> bool: register a shape's template"},
    {"scan", (PyCFunction)Emitter_scan, METH_VARARGS,
     "scan(buf, pos, first_line) -> (stop, lines, out, counts): write the taken lines' rows"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Emitter_getset[] = {
    {"shapes", (getter)Emitter_len, NULL, "registered shapes", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject EmitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logforensics.read._emit.Emitter",
    .tp_basicsize = sizeof(Emitter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Templates per line shape, applied to blocks of lines",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Emitter_init,
    .tp_dealloc = (destructor)Emitter_dealloc,
    .tp_methods = Emitter_methods,
    .tp_getset = Emitter_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_emit", "Line-shape templates applied in C: rows of output text per line", -1, NULL,
};

PyMODINIT_FUNC PyInit__emit(void)
{
    init_tables();
    if (PyType_Ready(&EmitterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&EmitterType);
    if (PyModule_AddObject(m, "Emitter", (PyObject *)&EmitterType) < 0) {
        Py_DECREF(&EmitterType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "OP_LINE", OP_LINE) < 0 || PyModule_AddIntConstant(m, "OP_TEXT", OP_TEXT) < 0 ||
        PyModule_AddIntConstant(m, "OP_STR", OP_STR) < 0 || PyModule_AddIntConstant(m, "OP_ISO", OP_ISO) < 0 ||
        PyModule_AddIntConstant(m, "OP_INT", OP_INT) < 0 || PyModule_AddIntConstant(m, "OP_FLOAT", OP_FLOAT) < 0 ||
        PyModule_AddIntConstant(m, "OP_BOOL", OP_BOOL) < 0 || PyModule_AddIntConstant(m, "OP_WORD", OP_WORD) < 0 ||
        PyModule_AddIntConstant(m, "OP_STRIP", OP_STRIP) < 0 || PyModule_AddIntConstant(m, "OP_RCOLON", OP_RCOLON) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
