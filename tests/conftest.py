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


@pytest.fixture(autouse=True)
def _fresh_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's ranges share one memo of line shapes (``ingest.parallel``), as one
    command's do: the memo of a worker that had read every fixture before made every
    range's scanner register thousands of shapes no command ever learns (test_parallel
    took twice the CPU)."""
    from logforensics.ingest import parallel

    monkeypatch.setattr(parallel, "_SHARED", None)


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


@pytest.fixture(params=["compiled", "pure"])
def reading_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each reading path in turn: the accelerator (where built and on) and the pure path
    (``LOGFORENSICS_PURE=1``), the grammar warmed up first so that no timing pays for it."""
    from accel import ON

    from logforensics.read.grammar import warm_up

    if request.param == "pure":
        monkeypatch.setenv("LOGFORENSICS_PURE", "1")
    elif not ON:
        pytest.skip("the accelerator is not built here, or LOGFORENSICS_PURE=1")
    warm_up()
    return str(request.param)
