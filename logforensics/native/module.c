/* The one compiled module of logforensics, ``logforensics.native._native``: the accelerator.
 *
 * Each part fills the module with its types and functions, and each has a pure-Python
 * reference that gives the same results (``logforensics/native/__init__.py`` says which):
 *   scan.c     the bulk reader: stored line-shape plans applied to blocks of lines
 *   other.c    runs of unrecognised lines, counted by coverage shape
 *   emit.c     the rows and columns of ``parse --format jsonl/parquet`` from the same plans
 * Portable C: no processor-specific instructions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "native.h"

int native_add(PyObject *m, PyTypeObject *type, const char *name, PyMethodDef *functions)
{
    if (PyType_Ready(type) < 0 || PyModule_AddFunctions(m, functions) < 0)
        return -1;
    Py_INCREF(type);
    if (PyModule_AddObject(m, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The accelerator of logforensics (optional: the pure-Python path gives the same results).",
    -1, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (scan_module_add(m) < 0 || other_module_add(m) < 0 || emit_module_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
