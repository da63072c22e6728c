"""The one switch of the compiled extensions: ``LOGFORENSICS_PURE=1`` turns every one off.

Each extension (``_scan``, ``_other``, ``_emit``, ``model/_windows``) is optional and has a
pure-Python reference that gives the same output; its module asks :func:`enabled` and whether
it was built. Nothing else reads the variable.
"""

from __future__ import annotations

import os

#: Values of ``LOGFORENSICS_PURE`` that turn the compiled paths off.
PURE_VALUES = ("1", "yes", "true")


def enabled() -> bool:
    """Whether compiled extensions may be used (``LOGFORENSICS_PURE`` not set to 1, yes or true)."""
    return os.environ.get("LOGFORENSICS_PURE", "").strip().lower() not in PURE_VALUES
