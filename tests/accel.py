"""The mark of the tests that exercise the accelerator (the compiled extensions) itself.

They are skipped where it is not built, and with ``LOGFORENSICS_PURE=1``: the suite's run on
the pure path alone (``.ci/run``), where every other test runs the reference path.
"""

from __future__ import annotations

import pytest

from logforensics import native

#: Whether the accelerator is built and on.
ON = native.available()

accelerated = pytest.mark.skipif(not ON, reason="the accelerator is not built here, or LOGFORENSICS_PURE=1")
