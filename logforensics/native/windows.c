/* The serving time series' per-window aggregates as parallel arrays, in C.
 *
 * Why: a log in which every rank prints batch statistics has dozens of windows (figure x
 * rank), each up to a few thousand cells. As Python lists of boxed numbers a cell costs
 * ~350 bytes and adding a record to it allocates objects; here a cell is one slot in each
 * of six arrays (the fixed-point sum 16 bytes; ~56 bytes, and a hash slot only for a window
 * whose keys came out of order), and adding rows to it is a loop over numbers.
 *
 * Windows has exactly the semantics of model/windows.py _PyWindows (the pure twin, used
 * where this is not built or LOGFORENSICS_PURE=1): cells kept in the order they were
 * created (a dict's order), folded in that order when widened or merged, sums in fixed
 * point (below), so that every figure is the same double.
 *
 * Also here, prune_texts(): the texts no summary can cite, dropped as the log is read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "native.h"

#define MAX_SLOTS 32

/* A window's sum in fixed point: units of 2**-64, 128-bit two's complement (lo, then hi).
 * Each value is rounded to that grid (half to even) and capped at +-2**62 (NaN counts as 0);
 * integer addition is associative, so a sum does not depend on how its values were grouped
 * (one pass, or byte ranges read apart and merged: ingest/parallel.py). windows.py's fixed()
 * and as_float() are the same arithmetic on Python ints. */
typedef struct {
    uint64_t lo;
    int64_t hi;
} Fix;

#define FIX_CAP 4611686018427387904.0  /* 2**62 */
#define FIX_ONE 18446744073709551616.0 /* 2**64 */

static inline Fix fix_of(double v)
{
    if (v != v)
        v = 0.0;
    if (v > FIX_CAP)
        v = FIX_CAP;
    else if (v < -FIX_CAP)
        v = -FIX_CAP;
    uint64_t bits;
    memcpy(&bits, &v, 8);
    int neg = (int)(bits >> 63), e = (int)((bits >> 52) & 0x7ff);
    uint64_t m = (bits & ((1ULL << 52) - 1)) | (1ULL << 52), lo = 0, hi = 0;
    int sh = e - 1075 + 64; /* |v| * 2**64 == m * 2**sh (e == 0: below 2**-1022, on the grid 0) */
    if (e == 0 || sh < -53) {
        /* below half a step of the grid: 0 */
    } else if (sh >= 64) {
        hi = m << (sh - 64); /* sh <= 74: |v| <= 2**62 */
    } else if (sh > 0) {
        hi = m >> (64 - sh);
        lo = m << sh;
    } else if (sh == 0) {
        lo = m;
    } else { /* to an integer, half to even (Python's round()) */
        int r = -sh;
        uint64_t q = m >> r, rem = m & ((1ULL << r) - 1), half = 1ULL << (r - 1);
        lo = q + (rem > half || (rem == half && (q & 1)));
    }
    if (neg) {
        lo = ~lo + 1;
        hi = ~hi + (lo == 0);
    }
    Fix f = {lo, (int64_t)hi};
    return f;
}

static inline void fix_add(Fix *s, Fix x)
{
    uint64_t lo = s->lo + x.lo;
    s->hi = (int64_t)((uint64_t)s->hi + (uint64_t)x.hi + (lo < s->lo));
    s->lo = lo;
}

/* The sum as a Python int (units of 2**-64). */
static PyObject *fix_long(Fix s)
{
    PyObject *hi = PyLong_FromLongLong(s.hi), *lo = PyLong_FromUnsignedLongLong(s.lo), *out = NULL;
    PyObject *bits = PyLong_FromLong(64), *shifted = NULL;
    if (hi && lo && bits && (shifted = PyNumber_Lshift(hi, bits)))
        out = PyNumber_Or(shifted, lo);
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(bits);
    Py_XDECREF(shifted);
    return out;
}

typedef struct {
    PyObject_HEAD
    long long width;
    Py_ssize_t most; /* cells kept before the width doubles */
    Py_ssize_t n, cap;
    int64_t *key, *count, *first;
    Fix *sum;
    double *fsec;
    PyObject **text; /* NULL: None (the array itself allocated with the first text) */
    int ordered;     /* keys rise with the cells' order (a log's clock): found by bisection */
    int32_t *hash;   /* otherwise open addressing: cell index or -1 */
    Py_ssize_t hcap; /* a power of two, > 1.5 * n; 0 while ordered */
    Py_ssize_t cur;  /* the cell last added to */
    double lo_sec, hi_sec; /* seconds that surely fall into cell cur (an empty range if unsure) */
    long long texts_made;  /* texts given to cells so far (what pruning bounds) */
} Windows;

static PyTypeObject WindowsType;

/* Python's floor division of ints. */
static inline int64_t floordiv_ll(int64_t a, int64_t b)
{
    int64_t q = a / b, r = a % b;
    if (r && ((r < 0) != (b < 0)))
        q -= 1;
    return q;
}

/* sec // width for floats, exactly as Python computes it (float floor division). */
static double py_floordiv(double vx, double wx)
{
    double mod = fmod(vx, wx);
    double div = (vx - mod) / wx;
    if (mod) {
        if ((wx < 0) != (mod < 0)) {
            mod += wx;
            div -= 1.0;
        }
    }
    double floordiv;
    if (div) {
        floordiv = floor(div);
        if (div - floordiv > 0.5)
            floordiv += 1.0;
    } else
        floordiv = copysign(0.0, vx / wx);
    return floordiv;
}

/* sec // width, as Python computes it; where width is a power of two and sec / width cannot
 * underflow, that division is exact and its floor is the same (and much cheaper than fmod). */
static inline double window_of(double sec, long long width)
{
    if ((width & (width - 1)) == 0 && fabs(sec) >= 1.0)
        return floor(sec / (double)width);
    return py_floordiv(sec, (double)width);
}

/* Cell c becomes the current one. Where the width is a power of two and the window's
 * seconds are at least 1 and small enough for exact products, a second s falls into it
 * exactly when lo <= s < hi (window_of's floor(s / width) == key), which is cheaper. */
static inline void set_cur(Windows *w, Py_ssize_t c)
{
    w->cur = c;
    w->lo_sec = INFINITY;
    w->hi_sec = -INFINITY;
    if (c < w->n && (w->width & (w->width - 1)) == 0) {
        double lo = (double)w->key[c] * (double)w->width, hi = ((double)w->key[c] + 1.0) * (double)w->width;
        if (lo >= 1.0 && hi < 4e15) {
            w->lo_sec = lo;
            w->hi_sec = hi;
        }
    }
}

static inline size_t hash_of(int64_t k) { return (size_t)((uint64_t)k * 0x9E3779B97F4A7C15ULL >> 17); }

static int rehash(Windows *w, Py_ssize_t want)
{
    Py_ssize_t hcap = 16;
    while (hcap < want + want / 2 + 2)
        hcap *= 2;
    if (hcap != w->hcap) {
        int32_t *h = PyMem_Realloc(w->hash, hcap * sizeof(int32_t));
        if (!h) {
            PyErr_NoMemory();
            return -1;
        }
        w->hash = h;
        w->hcap = hcap;
    }
    memset(w->hash, 0xff, w->hcap * sizeof(int32_t));
    size_t mask = (size_t)w->hcap - 1;
    for (Py_ssize_t i = 0; i < w->n; i++) {
        size_t h = hash_of(w->key[i]) & mask;
        while (w->hash[h] >= 0)
            h = (h + 1) & mask;
        w->hash[h] = (int32_t)i;
    }
    return 0;
}

static inline Py_ssize_t find(const Windows *w, int64_t k)
{
    if (w->ordered) {
        if (!w->n || k > w->key[w->n - 1])
            return -1; /* the common case: a later window */
        Py_ssize_t lo = 0, hi = w->n;
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (w->key[mid] < k)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo < w->n && w->key[lo] == k ? lo : -1;
    }
    if (!w->hcap)
        return -1;
    size_t mask = (size_t)w->hcap - 1, h = hash_of(k) & mask;
    for (;;) {
        int32_t i = w->hash[h];
        if (i < 0)
            return -1;
        if (w->key[i] == k)
            return i;
        h = (h + 1) & mask;
    }
}

#define GROW(p, T)                                                                                                   \
    do {                                                                                                             \
        T *q_ = PyMem_Realloc(w->p, cap * sizeof(T));                                                                \
        if (!q_) {                                                                                                   \
            PyErr_NoMemory();                                                                                        \
            return -1;                                                                                               \
        }                                                                                                            \
        w->p = q_;                                                                                                   \
    } while (0)

static int reserve(Windows *w, Py_ssize_t need)
{
    if (need <= w->cap)
        return 0;
    Py_ssize_t cap = w->cap < 16 ? 16 : w->cap + w->cap / 2;
    if (cap > w->most + 1 && need <= w->most + 1)
        cap = w->most + 1; /* never more cells than most + 1 */
    if (cap < need)
        cap = need;
    if (cap > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many windows");
        return -1;
    }
    GROW(key, int64_t);
    GROW(count, int64_t);
    GROW(first, int64_t);
    GROW(sum, Fix);
    GROW(fsec, double);
    if (w->text) {
        GROW(text, PyObject *);
        memset(w->text + w->cap, 0, (cap - w->cap) * sizeof(PyObject *));
    }
    w->cap = cap;
    if (!w->ordered && w->hcap < cap + cap / 2 + 2)
        return rehash(w, cap);
    return 0;
}

#define TEXT(w, i) ((w)->text ? (w)->text[i] : NULL)

/* Cell i's text becomes t (a new reference taken; NULL: None). */
static int set_text(Windows *w, Py_ssize_t i, PyObject *t)
{
    if (!w->text) {
        if (!t)
            return 0;
        w->text = PyMem_Calloc(w->cap, sizeof(PyObject *));
        if (!w->text) {
            PyErr_NoMemory();
            return -1;
        }
    }
    Py_XINCREF(t);
    Py_XSETREF(w->text[i], t);
    return 0;
}

/* Append a cell (reserve room first); its text gets a new reference. -1 on error. */
static Py_ssize_t append(Windows *w, int64_t k, int64_t count, Fix sum, int64_t first, double fsec, PyObject *text)
{
    if (w->ordered && w->n && k <= w->key[w->n - 1]) { /* out of order: index by hash from now on */
        w->ordered = 0;
        if (rehash(w, w->cap) < 0) {
            w->ordered = 1;
            return -1;
        }
    }
    Py_ssize_t i = w->n++;
    w->key[i] = k;
    w->count[i] = count;
    w->sum[i] = sum;
    w->first[i] = first;
    w->fsec[i] = fsec;
    if (w->text)
        w->text[i] = NULL;
    if (set_text(w, i, text) < 0) {
        w->n--;
        return -1;
    }
    if (!w->ordered) {
        size_t mask = (size_t)w->hcap - 1, h = hash_of(k) & mask;
        while (w->hash[h] >= 0)
            h = (h + 1) & mask;
        w->hash[h] = (int32_t)i;
    }
    return i;
}

/* Fold cell c of src into cell d of dst, as serving._fold does. */
static inline int fold_cell(Windows *dst, Py_ssize_t d, const Windows *src, Py_ssize_t c)
{
    dst->count[d] += src->count[c];
    fix_add(&dst->sum[d], src->sum[c]);
    if (src->fsec[c] < dst->fsec[d])
        dst->fsec[d] = src->fsec[c];
    if (src->first[c] < dst->first[d]) {
        dst->first[d] = src->first[c];
        return set_text(dst, d, TEXT(src, c));
    }
    return 0;
}

/* Widen in place to `width` (_PyWindows.coarsen): cells folded in their order, each wider
 * window placed where its first cell was. */
static int coarsen(Windows *w, long long width)
{
    if (width <= w->width)
        return 0;
    int64_t factor = width / w->width;
    Py_ssize_t n = w->n;
    w->n = 0;
    if (w->hcap) /* an ordered window stays ordered: floor division keeps the keys' order */
        memset(w->hash, 0xff, w->hcap * sizeof(int32_t));
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t k = floordiv_ll(w->key[i], factor);
        Py_ssize_t d = find(w, k);
        if (d < 0) {
            PyObject *t = TEXT(w, i);
            if (t)
                w->text[i] = NULL;
            append(w, k, w->count[i], w->sum[i], w->first[i], w->fsec[i], t);
            Py_XDECREF(t); /* append took its own reference (no allocation: the text array is there) */
            continue;
        }
        fold_cell(w, d, w, i); /* no allocation either */
        if (w->text)
            Py_CLEAR(w->text[i]);
    }
    w->width = width;
    set_cur(w, w->n ? w->n - 1 : 0);
    return 0;
}

static Windows *new_windows(long long width, Py_ssize_t most)
{
    Windows *w = PyObject_New(Windows, &WindowsType);
    if (!w)
        return NULL;
    w->width = width;
    w->most = most;
    w->n = w->cap = w->hcap = 0;
    w->ordered = 1;
    w->texts_made = 0;
    set_cur(w, 0);
    w->key = w->count = w->first = NULL;
    w->sum = NULL;
    w->fsec = NULL;
    w->text = NULL;
    w->hash = NULL;
    return w;
}

static void Windows_dealloc(Windows *w)
{
    for (Py_ssize_t i = 0; w->text && i < w->n; i++)
        Py_XDECREF(w->text[i]);
    PyMem_Free(w->key);
    PyMem_Free(w->count);
    PyMem_Free(w->first);
    PyMem_Free(w->sum);
    PyMem_Free(w->fsec);
    PyMem_Free(w->text);
    PyMem_Free(w->hash);
    PyObject_Free(w);
}

static PyObject *Windows_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"width", "most", NULL};
    long long width = 1;
    Py_ssize_t most = 4096;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Ln", names, &width, &most))
        return NULL;
    if (width < 1 || most < 1) {
        PyErr_SetString(PyExc_ValueError, "width and most must be positive");
        return NULL;
    }
    return (PyObject *)new_windows(width, most);
}

/* Add one value as _PyWindows.add does: to the cell of its window, created when new (and
 * the windows then widened once if they hold more than `most` cells). -1 on error. */
static int add_value(Windows *w, double sec, double x, int64_t line, PyObject *text)
{
    double q = window_of(sec, w->width);
    if (!(q > -9e18 && q < 9e18)) {
        PyErr_SetString(PyExc_OverflowError, "stamp out of range");
        return -1;
    }
    int64_t k = (int64_t)q;
    Py_ssize_t c = (w->n && w->key[w->cur] == k) ? w->cur : find(w, k);
    if (c < 0) {
        if (reserve(w, w->n + 1) < 0)
            return -1;
        c = append(w, k, 1, fix_of(x), line, sec, text);
        if (c < 0)
            return -1;
        w->texts_made += text != NULL;
        set_cur(w, c);
        if (w->n > w->most)
            return coarsen(w, w->width * 2);
        return 0;
    }
    if (c != w->cur)
        set_cur(w, c);
    w->count[c]++;
    fix_add(&w->sum[c], fix_of(x));
    if (sec < w->fsec[c])
        w->fsec[c] = sec;
    if (line < w->first[c]) {
        w->first[c] = line;
        w->texts_made += text != NULL;
        return set_text(w, c, text);
    }
    return 0;
}

static PyObject *Windows_add(Windows *w, PyObject *args)
{
    double sec, value;
    long long line;
    PyObject *text = Py_None;
    if (!PyArg_ParseTuple(args, "ddL|O", &sec, &value, &line, &text))
        return NULL;
    if (add_value(w, sec, value, line, text == Py_None ? NULL : text) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Windows_coarsen(Windows *w, PyObject *arg)
{
    long long width = PyLong_AsLongLong(arg);
    if (width == -1 && PyErr_Occurred())
        return NULL;
    if (coarsen(w, width) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static Windows *copy_of(const Windows *w)
{
    Windows *c = new_windows(w->width, w->most);
    if (!c || reserve(c, w->n) < 0) {
        Py_XDECREF(c);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < w->n; i++)
        if (append(c, w->key[i], w->count[i], w->sum[i], w->first[i], w->fsec[i], TEXT(w, i)) < 0) {
            Py_DECREF(c);
            return NULL;
        }
    set_cur(c, w->cur);
    return c;
}

/* The windows at `width` (a multiple of this width), this one unchanged: itself when not wider. */
static PyObject *Windows_coarsened(Windows *w, PyObject *arg)
{
    long long width = PyLong_AsLongLong(arg);
    if (width == -1 && PyErr_Occurred())
        return NULL;
    if (width <= w->width) {
        Py_INCREF(w);
        return (PyObject *)w;
    }
    Windows *c = copy_of(w);
    if (!c || coarsen(c, width) < 0) {
        Py_XDECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

/* Fold in the windows of the part of the log that followed (_PyWindows.merge). */
static PyObject *Windows_merge(Windows *w, PyObject *arg)
{
    if (!PyObject_TypeCheck(arg, &WindowsType)) {
        PyErr_SetString(PyExc_TypeError, "merge takes Windows");
        return NULL;
    }
    Windows *o = (Windows *)arg;
    long long width = w->width > o->width ? w->width : o->width;
    if (coarsen(w, width) < 0)
        return NULL;
    int64_t factor = width / o->width;
    for (Py_ssize_t i = 0; i < o->n; i++) {
        int64_t k = floordiv_ll(o->key[i], factor);
        Py_ssize_t d = find(w, k);
        if (d < 0) {
            if (reserve(w, w->n + 1) < 0 || append(w, k, o->count[i], o->sum[i], o->first[i], o->fsec[i], TEXT(o, i)) < 0)
                return NULL;
        } else if (fold_cell(w, d, o, i) < 0)
            return NULL;
    }
    while (w->n > w->most)
        if (coarsen(w, w->width * 2) < 0)
            return NULL;
    Py_RETURN_NONE;
}

static Py_ssize_t Windows_len(Windows *w) { return w->n; }

static PyObject *Windows_keys(Windows *w, PyObject *unused)
{
    PyObject *out = PyList_New(w->n);
    for (Py_ssize_t i = 0; out && i < w->n; i++) {
        PyObject *k = PyLong_FromLongLong(w->key[i]);
        if (!k) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, k);
    }
    return out;
}

static PyObject *cell_list(const Windows *w, Py_ssize_t i)
{
    PyObject *t = TEXT(w, i) ? TEXT(w, i) : Py_None;
    return Py_BuildValue("[LNLdO]", (long long)w->count[i], fix_long(w->sum[i]), (long long)w->first[i], w->fsec[i], t);
}

/* [(key, [count, sum, first_line, first_second, text])] in order. */
static PyObject *Windows_items(Windows *w, PyObject *unused)
{
    PyObject *out = PyList_New(w->n);
    for (Py_ssize_t i = 0; out && i < w->n; i++) {
        PyObject *c = cell_list(w, i);
        PyObject *item = c ? Py_BuildValue("(LN)", (long long)w->key[i], c) : NULL;
        if (!item) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

/* [(first_line, text)] of the cells that keep a text, in order. */
static PyObject *Windows_texts(Windows *w, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && w->text && i < w->n; i++) {
        if (!w->text[i])
            continue;
        PyObject *item = Py_BuildValue("(LO)", (long long)w->first[i], w->text[i]);
        if (!item || PyList_Append(out, item) < 0)
            Py_CLEAR(out);
        Py_XDECREF(item);
    }
    return out;
}

static PyObject *Windows_first_line(Windows *w, PyObject *unused)
{
    if (!w->n)
        Py_RETURN_NONE;
    int64_t m = w->first[0];
    for (Py_ssize_t i = 1; i < w->n; i++)
        if (w->first[i] < m)
            m = w->first[i];
    return PyLong_FromLongLong(m);
}

static PyObject *bytes_of(const void *p, Py_ssize_t n) { return PyBytes_FromStringAndSize(p, n); }

/* Pickling (the parallel reader's results) and deepcopy (watch): the arrays as bytes. */
static PyObject *Windows_reduce(Windows *w, PyObject *unused)
{
    PyObject *texts = PyList_New(w->n);
    if (!texts)
        return NULL;
    for (Py_ssize_t i = 0; i < w->n; i++) {
        PyObject *t = TEXT(w, i) ? TEXT(w, i) : Py_None;
        Py_INCREF(t);
        PyList_SET_ITEM(texts, i, t);
    }
    Py_ssize_t n8 = w->n * 8;
    return Py_BuildValue("(O(Ln)(NNNNNN))", (PyObject *)Py_TYPE(w), w->width, w->most, bytes_of(w->key, n8),
                         bytes_of(w->count, n8), bytes_of(w->sum, n8 * 2), bytes_of(w->first, n8), bytes_of(w->fsec, n8),
                         texts);
}

static PyObject *Windows_setstate(Windows *w, PyObject *state)
{
    PyObject *b[5], *texts;
    if (!PyArg_ParseTuple(state, "SSSSSO!", &b[0], &b[1], &b[2], &b[3], &b[4], &PyList_Type, &texts))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(texts);
    for (int k = 0; k < 5; k++)
        if (PyBytes_GET_SIZE(b[k]) != n * (k == 2 ? 16 : 8)) {
            PyErr_SetString(PyExc_ValueError, "bad Windows state");
            return NULL;
        }
    if (w->n) {
        PyErr_SetString(PyExc_ValueError, "Windows state set twice");
        return NULL;
    }
    if (reserve(w, n) < 0)
        return NULL;
    const char *key = PyBytes_AS_STRING(b[0]), *count = PyBytes_AS_STRING(b[1]), *sum = PyBytes_AS_STRING(b[2]),
               *first = PyBytes_AS_STRING(b[3]), *fsec = PyBytes_AS_STRING(b[4]);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(texts, i);
        int64_t k, c, f;
        Fix s;
        double q;
        memcpy(&k, key + 8 * i, 8);
        memcpy(&c, count + 8 * i, 8);
        memcpy(&s, sum + 16 * i, 16);
        memcpy(&f, first + 8 * i, 8);
        memcpy(&q, fsec + 8 * i, 8);
        if (append(w, k, c, s, f, q, t == Py_None ? NULL : t) < 0)
            return NULL;
    }
    set_cur(w, n ? n - 1 : 0);
    Py_RETURN_NONE;
}

static PyObject *Windows_get_width(Windows *w, void *closure) { return PyLong_FromLongLong(w->width); }
static PyObject *Windows_get_most(Windows *w, void *closure) { return PyLong_FromSsize_t(w->most); }
static PyObject *Windows_get_made(Windows *w, void *closure) { return PyLong_FromLongLong(w->texts_made); }

static PyMethodDef Windows_methods[] = {
    {"add", (PyCFunction)Windows_add, METH_VARARGS, "Add one value at (second, line), with the record's text."},
    {"coarsen", (PyCFunction)Windows_coarsen, METH_O, "Widen the windows in place to a multiple of their width."},
    {"coarsened", (PyCFunction)Windows_coarsened, METH_O, "The windows at a wider width (these unchanged)."},
    {"merge", (PyCFunction)Windows_merge, METH_O, "Fold in the windows of a later part of the log."},
    {"keys", (PyCFunction)Windows_keys, METH_NOARGS, "Window keys, in the order their cells were created."},
    {"items", (PyCFunction)Windows_items, METH_NOARGS, "(key, cell) in order, a cell as the pure twin's list."},
    {"texts", (PyCFunction)Windows_texts, METH_NOARGS, "(first line, text) of the cells that keep a text."},
    {"first_line", (PyCFunction)Windows_first_line, METH_NOARGS, "The smallest first line, or None."},
    {"__reduce__", (PyCFunction)Windows_reduce, METH_NOARGS, NULL},
    {"__setstate__", (PyCFunction)Windows_setstate, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Windows_getset[] = {
    {"width", (getter)Windows_get_width, NULL, "seconds per window", NULL},
    {"most", (getter)Windows_get_most, NULL, "cells kept before the width doubles", NULL},
    {"texts_made", (getter)Windows_get_made, NULL, "texts given to cells so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Windows_seq = {.sq_length = (lenfunc)Windows_len};

static PyTypeObject WindowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logforensics.native._native.Windows",
    .tp_basicsize = sizeof(Windows),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Per-window count, sum, first line, first second and first text of one figure.",
    .tp_new = Windows_new,
    .tp_dealloc = (destructor)Windows_dealloc,
    .tp_methods = Windows_methods,
    .tp_getset = Windows_getset,
    .tp_as_sequence = &Windows_seq,
};

/* -- rows into windows ---------------------------------------------------------------------- */

typedef struct {
    Py_ssize_t n;
    int nslots;
    const int64_t *line, *start, *end;
    const double *sec, *val;
    const unsigned char *rid, *cls;
} RowView;

/* The scanner's rows (read/bulk.py Rows.raw): the columns this needs. */
static int row_view(PyObject *t, RowView *v)
{
    PyObject *line, *rid, *cls, *dated, *plan, *sec, *start, *end, *val;
    if (!PyArg_ParseTuple(t, "niSSSSSSSSS", &v->n, &v->nslots, &line, &rid, &cls, &dated, &plan, &sec, &start, &end,
                          &val))
        return -1;
    if (v->nslots < 1 || v->nslots > MAX_SLOTS || PyBytes_GET_SIZE(line) != v->n * 8 ||
        PyBytes_GET_SIZE(sec) != v->n * 8 || PyBytes_GET_SIZE(start) != v->n * 8 ||
        PyBytes_GET_SIZE(end) != v->n * 8 || PyBytes_GET_SIZE(val) != v->n * v->nslots * 8) {
        PyErr_SetString(PyExc_ValueError, "not rows of a scan");
        return -1;
    }
    v->line = (const int64_t *)PyBytes_AS_STRING(line);
    v->start = (const int64_t *)PyBytes_AS_STRING(start);
    v->end = (const int64_t *)PyBytes_AS_STRING(end);
    v->sec = (const double *)PyBytes_AS_STRING(sec);
    v->val = (const double *)PyBytes_AS_STRING(val);
    v->rid = (const unsigned char *)PyBytes_AS_STRING(rid);
    v->cls = (const unsigned char *)PyBytes_AS_STRING(cls);
    if (PyBytes_GET_SIZE(rid) != v->n || PyBytes_GET_SIZE(cls) != v->n) {
        PyErr_SetString(PyExc_ValueError, "not rows of a scan");
        return -1;
    }
    return 0;
}

static PyObject *row_text(const RowView *v, const Py_buffer *buf, Py_ssize_t i, Py_ssize_t most)
{
    int64_t a = v->start[i], b = v->end[i];
    if (a < 0 || b < a || b > buf->len) {
        PyErr_SetString(PyExc_ValueError, "row outside the buffer");
        return NULL;
    }
    if (b - a > most)
        b = a + most;
    return PyUnicode_DecodeASCII((const char *)buf->buf + a, (Py_ssize_t)(b - a), NULL);
}

/* The scanner's classes (scan.c MAX_CLASSES); rank ids are bytes. */
#define ROW_CLASSES 8

/* The rows by class and rank id: rows key[k]..key[k + 1] of `sorted` (row numbers, in row
 * order) are those of class k / 256 and rank id k % 256 (a counting sort, one pass). */
typedef struct {
    int32_t *sorted;
    Py_ssize_t key[ROW_CLASSES * 256 + 1];
} RowGroups;

static int row_groups(const RowView *v, RowGroups *g)
{
    g->sorted = PyMem_Malloc(((size_t)v->n + 1) * sizeof(int32_t));
    if (!g->sorted) {
        PyErr_NoMemory();
        return -1;
    }
    memset(g->key, 0, sizeof g->key);
    for (Py_ssize_t i = 0; i < v->n; i++) {
        if (v->cls[i] >= ROW_CLASSES) {
            PyErr_SetString(PyExc_ValueError, "a row's class out of range");
            return -1;
        }
        g->key[(v->cls[i] << 8 | v->rid[i]) + 1]++;
    }
    for (int k = 0; k < ROW_CLASSES * 256; k++)
        g->key[k + 1] += g->key[k];
    Py_ssize_t at[ROW_CLASSES * 256];
    memcpy(at, g->key, sizeof at);
    for (Py_ssize_t i = 0; i < v->n; i++)
        g->sorted[at[v->cls[i] << 8 | v->rid[i]]++] = (int32_t)i;
    return 0;
}

/* A target's value columns and required column, checked. */
static int window_cols(const RowView *v, PyObject *cols_t, int require, int *cols, Py_ssize_t *ncols)
{
    if (!PyTuple_Check(cols_t)) {
        PyErr_SetString(PyExc_TypeError, "cols must be a tuple");
        return -1;
    }
    *ncols = PyTuple_GET_SIZE(cols_t);
    if (*ncols < 1 || *ncols > MAX_SLOTS || require >= v->nslots) {
        PyErr_SetString(PyExc_ValueError, "bad window arguments");
        return -1;
    }
    for (Py_ssize_t k = 0; k < *ncols; k++) {
        long c = PyLong_AsLong(PyTuple_GET_ITEM(cols_t, k));
        if (c < 0 || c >= v->nslots) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "bad column");
            return -1;
        }
        cols[k] = (int)c;
    }
    return 0;
}

/* A target's rows: bytes of int32 row numbers (checked), or (class, rank id): the rows of that
 * class and rank (from `g`, made on first use). */
static int window_index(const RowView *v, PyObject *index_o, RowGroups *g, const int32_t **index,
                        Py_ssize_t *nindex)
{
    if (PyTuple_Check(index_o) && PyTuple_GET_SIZE(index_o) == 2) {
        long cls = PyLong_AsLong(PyTuple_GET_ITEM(index_o, 0)), rid = PyLong_AsLong(PyTuple_GET_ITEM(index_o, 1));
        if ((cls == -1 || rid == -1) && PyErr_Occurred())
            return -1;
        if (cls < 0 || cls >= ROW_CLASSES || rid < 0 || rid > 255) {
            PyErr_SetString(PyExc_ValueError, "a class or rank id out of range");
            return -1;
        }
        if (!g->sorted && row_groups(v, g) < 0)
            return -1;
        int k = (int)(cls << 8 | rid);
        *index = g->sorted + g->key[k];
        *nindex = g->key[k + 1] - g->key[k];
        return 0;
    }
    if (!PyBytes_Check(index_o)) {
        PyErr_SetString(PyExc_TypeError, "index must be bytes or (class, rank id)");
        return -1;
    }
    *index = (const int32_t *)PyBytes_AS_STRING(index_o);
    *nindex = PyBytes_GET_SIZE(index_o) / 4;
    for (Py_ssize_t j = 0; j < *nindex; j++) {
        if ((*index)[j] < 0 || (*index)[j] >= v->n) {
            PyErr_SetString(PyExc_ValueError, "row index out of range");
            return -1;
        }
    }
    return 0;
}

typedef struct {
    Windows *w;
    PyObject *index_o;
    const int32_t *index;
    Py_ssize_t nindex, ncols, text_most;
    int cols[MAX_SLOTS];
    int require;
} Target;

/* The rows of one index (int32 row numbers) into the windows of its targets, row by row:
 * each row's value for a target is the first of its columns the row has (rows with none
 * skipped, and rows without its required column), added at the row's second and line as
 * Windows.add adds it, with the line's text cut to text_most characters (none when 0). A
 * text is made only for a cell the row becomes the first record of. Each window sees its
 * rows in row order, so its sums are those of adding one by one. */
static int add_group(const Target *ts, Py_ssize_t m, const RowView *v, const Py_buffer *buf, long long first_line)
{
    const int32_t *index = ts[0].index;
    const double *val = v->val;
    Py_ssize_t n = v->n;
    for (Py_ssize_t j = 0; j < ts[0].nindex; j++) {
        Py_ssize_t i = index[j];
        double sec = v->sec[i];
        int64_t line = first_line + v->line[i];
        for (Py_ssize_t t = 0; t < m; t++) {
            const Target *T = &ts[t];
            if (T->require >= 0 && isnan(val[T->require * n + i]))
                continue;
            double x = val[T->cols[0] * n + i];
            for (Py_ssize_t k = 1; k < T->ncols && isnan(x); k++)
                x = val[T->cols[k] * n + i];
            if (isnan(x))
                continue;
            Windows *w = T->w;
            Py_ssize_t c = w->cur;
            /* the common case, inline: a later record of the current cell */
            if (sec >= w->lo_sec && sec < w->hi_sec && line >= w->first[c]) {
                w->count[c]++;
                fix_add(&w->sum[c], fix_of(x));
                if (sec < w->fsec[c])
                    w->fsec[c] = sec;
                continue;
            }
            PyObject *text = NULL;
            if (T->text_most > 0) {
                text = row_text(v, buf, i, T->text_most);
                if (!text)
                    return -1;
            }
            int bad = add_value(w, sec, x, line, text) < 0;
            Py_XDECREF(text);
            if (bad)
                return -1;
        }
    }
    return 0;
}

/* windows_add(targets, rows, buf, first_line): each target (windows, index, cols, require,
 * text) takes its rows (one call per segment); consecutive targets of one index (the same
 * object) are filled in one pass over their rows. An index is bytes of int32 row numbers,
 * or (class, rank id): the rows of that class and rank (found here, for all of them in one
 * pass), so that a caller can keep its targets from one segment to the next. */
static PyObject *windows_add(PyObject *module, PyObject *args)
{
    PyObject *targets, *rows_t;
    long long first_line;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "O!Oy*L", &PyList_Type, &targets, &rows_t, &buf, &first_line))
        return NULL;
    RowView v;
    PyObject *result = NULL;
    Py_ssize_t nt = PyList_GET_SIZE(targets);
    Target *ts = PyMem_Malloc((nt + 1) * sizeof(Target));
    RowGroups g;
    g.sorted = NULL; /* its keys are counted when first needed (row_groups), not zeroed here */
    if (!ts) {
        PyErr_NoMemory();
        goto out;
    }
    if (row_view(rows_t, &v) < 0)
        goto out;
    for (Py_ssize_t t = 0; t < nt; t++) {
        PyObject *w, *cols_t;
        Target *T = &ts[t];
        if (!PyArg_ParseTuple(PyList_GET_ITEM(targets, t), "O!OOin", &WindowsType, &w, &T->index_o, &cols_t,
                              &T->require, &T->text_most))
            goto out;
        if (window_cols(&v, cols_t, T->require, T->cols, &T->ncols) < 0)
            goto out;
        if (t > 0 && T->index_o == ts[t - 1].index_o) { /* the run's rows, found already */
            T->index = ts[t - 1].index;
            T->nindex = ts[t - 1].nindex;
        } else if (window_index(&v, T->index_o, &g, &T->index, &T->nindex) < 0) {
            goto out;
        }
        T->w = (Windows *)w;
    }
    for (Py_ssize_t a = 0, b; a < nt; a = b) {
        for (b = a + 1; b < nt && ts[b].index_o == ts[a].index_o; b++)
            ;
        if (add_group(ts + a, b - a, &v, &buf, first_line) < 0)
            goto out;
    }
    result = Py_None;
    Py_INCREF(result);
out:
    PyMem_Free(g.sorted);
    PyMem_Free(ts);
    PyBuffer_Release(&buf);
    return result;
}

/* -- texts no change point can cite ---------------------------------------------------------- */

typedef struct {
    int64_t *key, *min;
    Py_ssize_t cap, used;
} MinMap; /* window key -> smallest first line */

static int minmap_init(MinMap *m, Py_ssize_t n)
{
    m->cap = 16;
    while (m->cap < 2 * n + 2)
        m->cap *= 2;
    m->used = 0;
    m->key = PyMem_Malloc(m->cap * sizeof(int64_t));
    m->min = PyMem_Malloc(m->cap * sizeof(int64_t));
    if (!m->key || !m->min) {
        PyMem_Free(m->key);
        PyMem_Free(m->min);
        m->key = m->min = NULL;
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < m->cap; i++)
        m->min[i] = INT64_MAX; /* empty */
    return 0;
}

static inline const int64_t *minmap_find(const MinMap *m, int64_t k)
{
    size_t mask = (size_t)m->cap - 1, h = hash_of(k) & mask;
    for (;;) {
        if (m->min[h] == INT64_MAX)
            return NULL;
        if (m->key[h] == k)
            return &m->min[h];
        h = (h + 1) & mask;
    }
}

/* Take first line `first` at key k (the smaller one kept); grows the map past half full. */
static int minmap_take(MinMap *m, int64_t k, int64_t first)
{
    size_t mask = (size_t)m->cap - 1, h = hash_of(k) & mask;
    for (;;) {
        if (m->min[h] == INT64_MAX)
            break;
        if (m->key[h] == k) {
            if (first < m->min[h])
                m->min[h] = first;
            return 0;
        }
        h = (h + 1) & mask;
    }
    m->key[h] = k;
    m->min[h] = first;
    if (++m->used * 2 <= m->cap)
        return 0;
    MinMap big;
    if (minmap_init(&big, m->cap) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < m->cap; i++)
        if (m->min[i] != INT64_MAX && minmap_take(&big, m->key[i], m->min[i]) < 0) {
            PyMem_Free(big.key);
            PyMem_Free(big.min);
            return -1;
        }
    PyMem_Free(m->key);
    PyMem_Free(m->min);
    *m = big;
    return 0;
}

/* prune_texts(texts, series) -> texts kept: drops the texts that no summary can cite.
 *
 * The summary cites a text by line: that of a series point (a change point, the first full
 * KV window), which is the smallest first line, at the summary's window, of the cells of
 * one series (series[j]: its windows, all ranks). A text whose line L is, at the widest
 * width here (whose windows nest in the summary's), not the smallest first line of its
 * window in any series, never will be: later records and later parts of the log only add
 * other lines, and widening only takes smaller minima. Such texts are dropped; every text
 * a summary looks up stays. Widths must all divide the widest (else nothing is dropped). */
static PyObject *prune_texts(PyObject *module, PyObject *args)
{
    PyObject *texts, *series;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &texts, &PyList_Type, &series))
        return NULL;
    Py_ssize_t ns = PyList_GET_SIZE(series), nt = PyList_GET_SIZE(texts);
    long long widest = 1;
    for (Py_ssize_t j = -1; j < ns; j++) {
        PyObject *list = j < 0 ? texts : PyList_GET_ITEM(series, j);
        if (!PyList_Check(list)) {
            PyErr_SetString(PyExc_TypeError, "series must be lists of Windows");
            return NULL;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list); k++) {
            PyObject *o = PyList_GET_ITEM(list, k);
            if (!PyObject_TypeCheck(o, &WindowsType)) {
                PyErr_SetString(PyExc_TypeError, "series must be lists of Windows");
                return NULL;
            }
            if (((Windows *)o)->width > widest)
                widest = ((Windows *)o)->width;
        }
    }
    Py_ssize_t kept = 0;
    for (Py_ssize_t j = -1; j < ns; j++) {
        PyObject *list = j < 0 ? texts : PyList_GET_ITEM(series, j);
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list); k++)
            if (widest % ((Windows *)PyList_GET_ITEM(list, k))->width)
                goto count; /* windows that do not nest: keep everything */
    }
    MinMap *maps = PyMem_Calloc(ns + 1, sizeof(MinMap));
    if (!maps)
        return PyErr_NoMemory();
    int bad = 0;
    for (Py_ssize_t j = 0; j < ns && !bad; j++) {
        PyObject *list = PyList_GET_ITEM(series, j);
        Py_ssize_t n = 0; /* the ranks' windows mostly share their keys: size for the largest */
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list); k++)
            if (((Windows *)PyList_GET_ITEM(list, k))->n > n)
                n = ((Windows *)PyList_GET_ITEM(list, k))->n;
        if (minmap_init(&maps[j], n) < 0) {
            bad = 1;
            break;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list) && !bad; k++) {
            Windows *w = (Windows *)PyList_GET_ITEM(list, k);
            int64_t f = widest / w->width;
            for (Py_ssize_t i = 0; i < w->n && !bad; i++)
                bad = minmap_take(&maps[j], floordiv_ll(w->key[i], f), w->first[i]) < 0;
        }
    }
    for (Py_ssize_t t = 0; t < nt && !bad; t++) {
        Windows *w = (Windows *)PyList_GET_ITEM(texts, t);
        int64_t f = widest / w->width;
        for (Py_ssize_t i = 0; w->text && i < w->n; i++) {
            if (!w->text[i])
                continue;
            int64_t k = floordiv_ll(w->key[i], f);
            int cited = 0;
            for (Py_ssize_t j = 0; j < ns && !cited; j++) {
                const int64_t *m = maps[j].key ? minmap_find(&maps[j], k) : NULL;
                cited = m && *m == w->first[i];
            }
            if (!cited)
                Py_CLEAR(w->text[i]);
        }
    }
    for (Py_ssize_t j = 0; j < ns; j++) {
        PyMem_Free(maps[j].key);
        PyMem_Free(maps[j].min);
    }
    PyMem_Free(maps);
    if (bad)
        return NULL;
count:
    for (Py_ssize_t t = 0; t < nt; t++) {
        Windows *w = (Windows *)PyList_GET_ITEM(texts, t);
        for (Py_ssize_t i = 0; w->text && i < w->n; i++)
            kept += w->text[i] != NULL;
    }
    return PyLong_FromSsize_t(kept);
}

static PyMethodDef module_methods[] = {
    {"windows_add", windows_add, METH_VARARGS, "Add a segment's rows to windows, in row order."},
    {"prune_texts", prune_texts, METH_VARARGS, "Drop the texts no summary can cite; the number kept."},
    {NULL, NULL, 0, NULL},
};

/* Windows and the windows' functions added to the module m (``_native``); 0, or -1 with an
 * exception set. */
int windows_module_add(PyObject *m)
{
    if (native_add(m, &WindowsType, "Windows", module_methods) < 0)
        return -1;
    return 0;
}
