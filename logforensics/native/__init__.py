"""The accelerator: one optional compiled module (``_native``, built from this folder's C) and
its one switch, ``LOGFORENSICS_PURE=1``, which turns it off.

Each part of the module has a pure-Python reference that gives the same results: the bulk
reader (``scan.c``) and the walker of unrecognised lines (``other.c``) the exact path of
``read.parser``, the writers' rows and columns (``emit.c``) ``export`` of every event.
Callers ask :func:`available`; nothing
else reads the variable or imports the module.
"""

from __future__ import annotations

import os
from types import ModuleType

#: Values of ``LOGFORENSICS_PURE`` that turn the compiled paths off.
PURE_VALUES = ("1", "yes", "true")

lib: ModuleType | None
try:  # built by pip where a C compiler and Python's headers are available (setup.py)
    from . import _native as lib
except ImportError:  # pragma: no cover - platforms without it
    lib = None


def available() -> bool:
    """Whether the compiled module is built and not turned off (``LOGFORENSICS_PURE`` not 1, yes
    or true; read at each call, so that a test or a caller may turn it off for one reading)."""
    return lib is not None and os.environ.get("LOGFORENSICS_PURE", "").strip().lower() not in PURE_VALUES
