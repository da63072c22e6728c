"""Success that did no work (``diagnose/validity.py``, VAL01): a run that reached ready and
looks fine, whose log shows it generated nothing.

The benchmark block is ``sglang.bench_serving``'s own "{:<40} {:<10}" lines; decode batches are
SGLang's ``Decode batch, #running-req: ...`` lines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logforensics.pipeline import diagnose_files

ROOT = Path(__file__).resolve().parent.parent
READY = "[2026-01-01 10:00:00] The server is fired up and ready to roll!\n"


def _bench(requests: int, tokens: int) -> str:
    return ("{:<40} {:<10}\n".format("Successful requests:", requests)
            + "{:<40} {:<10}\n".format("Benchmark duration (s):", "50.24")
            + "{:<40} {:<10}\n".format("Total generated tokens:", tokens))


def _val01(tmp_path: Path, text: str) -> list[str]:
    log = tmp_path / "run.log"
    log.write_text(text)
    d = diagnose_files(str(log), None)
    return [f.title for f in d.findings if f.rule == "VAL01"]


@pytest.mark.parametrize("requests,tokens,said", [
    (1000, 0, "1000 successful requests and 0 generated tokens"),
    (0, 0, "completed no request"),
])
def test_a_benchmark_that_generated_nothing_did_no_work(tmp_path: Path, requests: int, tokens: int,
                                                         said: str) -> None:
    titles = _val01(tmp_path, READY + _bench(requests, tokens))
    assert len(titles) == 1 and said in titles[0]


def test_a_benchmark_that_generated_tokens_is_not_flagged(tmp_path: Path) -> None:
    assert _val01(tmp_path, READY + _bench(1000, 256000)) == []


def _decode(second: int, running: int, tput: float) -> str:
    return (f"[2026-01-01 10:{second // 60:02d}:{second % 60:02d} TP0] Decode batch, #running-req: {running}, "
            f"#token: 4096, token usage: 0.02, cuda graph: True, gen throughput (token/s): {tput:.2f}, "
            "#queue-req: 0\n")


def test_requests_that_run_without_generating_a_token_are_a_stall(tmp_path: Path) -> None:
    text = READY + "".join(_decode(s, 8, 900.0) for s in range(0, 20, 4))
    text += "".join(_decode(s, 8, 0.0) for s in range(20, 80, 4))
    titles = _val01(tmp_path, text)
    assert len(titles) == 1 and "no token was generated" in titles[0]


@pytest.mark.parametrize("tput,until", [(0.0, 36), (900.0, 80)])
def test_a_short_pause_or_a_working_server_is_not_a_stall(tmp_path: Path, tput: float, until: int) -> None:
    text = READY + "".join(_decode(s, 8, 900.0) for s in range(0, 20, 4))
    text += "".join(_decode(s, 8, tput) for s in range(20, until, 4))
    assert _val01(tmp_path, text) == []


def test_the_check_case_fails_without_its_expectation() -> None:
    """The fixture case fixtures/synthetic/benchmark-no-tokens expects VAL01 as an error."""
    case = ROOT / "fixtures" / "synthetic" / "benchmark-no-tokens"
    d = diagnose_files(str(case / "run.log"), None)
    assert d.failing.outcome == "ready"
    assert [(f.rule, f.severity) for f in d.findings if f.rule == "VAL01"] == [("VAL01", "error")]
    assert "VAL01" in (case / "expected.yml").read_text()
