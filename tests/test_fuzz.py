"""Mutated real log excerpts: ``summary --json`` and ``parse --format jsonl`` give a valid
output, never a traceback, in bounded time.

Each example takes lines of the real excerpts (``fixtures/real``) and mutates them as logs
are mangled in the wild: lines cut short or merged, long tokens inserted (base64, digits,
JSON), ANSI colour codes, NUL bytes, random prefixes, carriage returns, random bytes. The
commands run in this process (click's runner), on both reading paths. Derandomized, with
a modest number of examples, so the run is the same in CI every time.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logforensics.cli import main

REAL = sorted((Path(__file__).resolve().parent.parent / "fixtures" / "real").glob("*.log"))
LINES = [line for p in REAL for line in p.read_bytes().split(b"\n")]
#: Seconds an example may take (a few KiB to a few hundred KiB of text, on a loaded machine).
TIME_BOUND = 60.0

SUMMARY_KEYS = {"outcome", "outcome_reason", "coverage", "warnings", "crash"}
COVERAGE_KEYS = {"lines_read", "lines_recognised", "events", "kinds", "long_lines", "partial_lines"}
ROW_KEYS = {"kind", "rank", "ts", "file", "line", "text"}


def _long_token(draw: st.DrawFn) -> bytes:
    n = draw(st.sampled_from([100, 5000, 20000, 70000]))
    form = draw(st.sampled_from(["letters", "digits", "base64", "json", "spaces"]))
    seed = draw(st.binary(min_size=3, max_size=3))
    if form == "letters":
        return b"x" * n
    if form == "digits":
        return b"1234567890" * (n // 10)
    if form == "base64":
        return base64.b64encode(seed * (n // 4))[:n]
    if form == "json":
        return json.dumps([{"id": i, "s": seed.hex()} for i in range(n // 20)]).encode()[:n]
    return b"word " * (n // 5)


_PIECES = [b"\x1b[36m", b"\x1b[0m", b"^[[32m", b"[1;31m", b"\x00", b"\r", b"^M", b"\xff\xfe", b"\t",
           b"[2026-03-12 16:43:01 TP1] ", b"sglang-1  | ", b"(Worker pid=12, ip=10.0.0.2) ", b"> ",
           b"2026-03-12T16:43:01.123456789Z ", b"Traceback (most recent call last):", b'  File "x.py", line 3, in f',
           b"[repeated 3x across cluster]", b"100%|##########| 52/52 [00:10<00:00,  5.00it/s]"]


@st.composite
def mutated_log(draw: st.DrawFn) -> bytes:
    start = draw(st.integers(0, len(LINES) - 1))
    lines = list(LINES[start:start + draw(st.integers(1, 60))])
    for _ in range(draw(st.integers(0, 8))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["cut", "merge", "token", "piece", "prefix", "bytes", "drop"]))
        line = lines[i]
        at = draw(st.integers(0, len(line)))
        if op == "cut":
            lines[i] = line[:at]
        elif op == "merge" and i + 1 < len(lines):
            lines[i:i + 2] = [line + lines[i + 1]]
        elif op == "token":
            lines[i] = line[:at] + _long_token(draw) + line[at:]
        elif op == "piece":
            lines[i] = line[:at] + draw(st.sampled_from(_PIECES)) + line[at:]
        elif op == "prefix":
            lines[i] = draw(st.binary(max_size=12)) + line
        elif op == "bytes":
            lines[i] = line[:at] + draw(st.binary(min_size=1, max_size=40)) + line[at:]
        elif op == "drop":
            del lines[i]
    end = draw(st.sampled_from([b"\n", b"", b"\r\n"]))
    return b"\n".join(lines) + end


def _run(args: list[str]) -> tuple[int, bytes]:
    res = CliRunner().invoke(main, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"{args[0]} raised {res.exception!r}") from res.exception
    assert b"Traceback" not in res.stderr_bytes
    return res.exit_code, res.stdout_bytes


@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=mutated_log())
def test_mutated_real_excerpts_give_valid_output(tmp_path: Path, reading_path: str, data: bytes) -> None:
    log = tmp_path / "fuzz.log"
    log.write_bytes(data)
    t = time.perf_counter()
    code, out = _run(["summary", "--json", str(log)])
    assert code == 0, out[-400:]
    summary = json.loads(out)
    assert SUMMARY_KEYS <= summary.keys() and COVERAGE_KEYS <= summary["coverage"].keys()
    assert summary["coverage"]["lines_read"] == data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))
    code, out = _run(["parse", "--format", "jsonl", str(log)])
    assert code == 0, out[-400:]
    rows = [json.loads(line) for line in out.splitlines()]
    assert all(ROW_KEYS <= row.keys() for row in rows)
    assert {row["line"] for row in rows} <= set(range(1, summary["coverage"]["lines_read"] + 1))
    assert time.perf_counter() - t < TIME_BOUND
