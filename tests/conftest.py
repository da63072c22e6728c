"""Shared test fixtures. ``tests/`` is on sys.path (pytest's ``pythonpath``), so the
helper modules beside the tests import by their plain names."""

from sshd import sshd_server  # noqa: F401  (the session fixture: a real sshd on 127.0.0.1)
