"""Shared test fixtures. ``tests/`` is on sys.path (pytest's ``pythonpath``), so the
helper modules beside the tests import by their plain names."""

import os

# A handler bug raises in the suite (and in the CLI it runs as a subprocess) instead of
# becoming an ``unplanned`` record; test_grammar checks the user-facing behaviour too.
os.environ["LOGFORENSICS_STRICT"] = "1"

from sshd import sshd_server  # noqa: F401  (the session fixture: a real sshd on 127.0.0.1)
