"""Shared test fixtures. ``tests/`` is on sys.path (pytest's ``pythonpath``), so the
helper modules beside the tests import by their plain names."""

import fcntl
import os
from collections.abc import Iterator

import pytest

# A handler bug raises in the suite (and in the CLI it runs as a subprocess) instead of
# becoming an ``unplanned`` record; test_grammar checks the user-facing behaviour too.
os.environ["LOGFORENSICS_STRICT"] = "1"

from sshd import sshd_server  # noqa: F401  (the session fixture: a real sshd on 127.0.0.1)


@pytest.fixture
def one_fake_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Held while a test runs a fake SGLang server process and looks for the servers of this
    host: a test on another xdist worker doing the same at that moment would make it find two."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common root
    with open(shared / "fake-sglang-server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
