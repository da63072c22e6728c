/* What the parts of the accelerator share: each adds its types and functions to the one module
 * (module.c), through native_add. */
#ifndef LOGFORENSICS_NATIVE_H
#define LOGFORENSICS_NATIVE_H

#include <Python.h>

/* type made ready and added to m under name, with functions (a NULL-ended table); 0, or -1 with
 * an exception set. */
int native_add(PyObject *m, PyTypeObject *type, const char *name, PyMethodDef *functions);

int scan_module_add(PyObject *m);
int other_module_add(PyObject *m);
int emit_module_add(PyObject *m);

#endif
