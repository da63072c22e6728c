"""Success that did no work (``diagnose/validity.py``, VAL01): a run that reached ready and
looks fine, whose log shows it generated nothing.

The benchmark block is ``sglang.bench_serving``'s own "{:<40} {:<10}" lines; decode batches are
SGLang's ``Decode batch, #running-req: ...`` lines.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from logforensics import native
from logforensics.pipeline import diagnose_files, summarize_file

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


def _decode(second: int, running: int, tput: float, tokens: int | None = None) -> str:
    """A decode batch line; its ``#token`` grows by ``running`` a decode step (10 steps a second)
    while tokens are generated, unless given."""
    if tokens is None:
        tokens = 4096 + (10 * running * second if tput else 0)
    return (f"[2026-01-01 10:{second // 60:02d}:{second % 60:02d} TP0] Decode batch, #running-req: {running}, "
            f"#token: {tokens}, token usage: 0.02, cuda graph: True, gen throughput (token/s): {tput:.2f}, "
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


@pytest.mark.parametrize("name", ["benchmark-no-tokens", "health-generate-fails", "decode-frozen",
                                  "decode-counters-fixed"])
def test_the_check_case_fails_without_its_expectation(name: str) -> None:
    """The fixture cases fixtures/synthetic/NAME expect VAL01 as an error: ``check`` fails
    when it is no longer raised."""
    case = ROOT / "fixtures" / "synthetic" / name
    d = diagnose_files(str(case / "run.log"), None)
    assert d.failing.outcome == "ready"
    assert [(f.rule, f.severity) for f in d.findings if f.rule == "VAL01"] == [("VAL01", "error")]
    assert "VAL01" in (case / "expected.yml").read_text()


# ---------------------------------------------------------------- the log's own probe lines
def _probe(second: int, path: str, status: str, port: int = 55496) -> str:
    """uvicorn's access line behind SGLang's prefix, as a real log has it
    ('[2026-05-25 17:27:09] INFO:     127.0.0.1:55496 - "GET /v1/models HTTP/1.1" 200 OK')."""
    return (f"[2026-01-01 10:{second // 60:02d}:{second % 60:02d}] INFO:     127.0.0.1:{port} - "
            f'"GET {path} HTTP/1.1" {status}\n')


def _probes(generate: str, n: int = 40) -> str:
    """/health every 5 s, /health_generate every 15 s answering ``generate``."""
    out = READY
    for s in range(1, n * 5, 5):
        out += _probe(s, "/health", "200 OK", 40000 + s)
        if s % 15 == 1:
            out += _probe(s + 1, "/health_generate", generate, 50000 + s)
    return out


def _diagnose(tmp_path: Path, text: str, pure: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    log = tmp_path / "run.log"
    log.write_text(text)
    if pure:
        monkeypatch.setenv("LOGFORENSICS_PURE", "1")
    else:
        monkeypatch.delenv("LOGFORENSICS_PURE", raising=False)
    return [f for f in diagnose_files(str(log), None).findings if f.rule == "VAL01"]


@pytest.mark.parametrize("pure", [False, True])
def test_health_answering_while_health_generate_fails_is_no_work(tmp_path: Path, pure: bool,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    text = _probes("503 Service Unavailable")
    found = _diagnose(tmp_path, text, pure, monkeypatch)
    assert len(found) == 1
    f = found[0]
    assert "/health answered 40 times with 200" in f.title and "14 answered 503" in f.title
    lines = text.splitlines()
    cited = [(e["line"], e["text"]) for e in f.evidence]
    # the first failing /health_generate and the first /health that answered
    assert cited == [(3, lines[2]), (2, lines[1])]
    assert '"GET /health_generate HTTP/1.1" 503' in cited[0][1] and '"GET /health HTTP/1.1" 200' in cited[1][1]


def test_a_health_check_timing_out_alone_names_no_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's health_generate timeout (http_server.py), no access line of /health_generate: the
    builds that print it answer /health with the same handler, a real generation, so the line does
    not say /health_generate failed while /health answered (real-pairs 053): not flagged. With a
    failed /health_generate answer it is said beside it."""
    text = READY + "".join(_probe(s, "/health", "200 OK", 40000 + s) for s in range(1, 60, 5))
    text += ("[2026-01-01 10:01:05] Health check failed. Server couldn't get a response from detokenizer for "
             "last 20 seconds. tic start time: 10:00:45. last_heartbeat time: 10:00:01\n")
    assert _diagnose(tmp_path, text, False, monkeypatch) == []
    found = _diagnose(tmp_path, text + _probe(66, "/health_generate", "503 Service Unavailable"), False, monkeypatch)
    assert len(found) == 1 and "1 answered 503, timed out (Health check failed)" in found[0].title


def test_health_generate_that_answers_or_is_not_probed_is_not_flagged(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The same probes flagged when /health_generate fails, not when it also answers (one
    failure among successes is no server doing no work) or is not probed."""
    assert _diagnose(tmp_path, _probes("503 Service Unavailable"), False, monkeypatch)
    mixed = _probes("200 OK") + _probe(250, "/health_generate", "503 Service Unavailable")
    assert _diagnose(tmp_path, mixed, False, monkeypatch) == []
    unprobed = _probes("503 Service Unavailable").replace("/health_generate", "/metrics")
    assert _diagnose(tmp_path, unprobed, False, monkeypatch) == []


# ---------------------------------------------------------------- frozen token counters
@pytest.mark.parametrize("pure", [False, True])
def test_decode_batches_in_a_row_generating_nothing_are_frozen(tmp_path: Path, pure: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Five decode batches of TP0 in a row with 8 requests running and gen throughput 0.00,
    a second apart (too short for the 30 s stall), between working ones."""
    text = READY + "".join(_decode(s, 8, 900.0) for s in range(0, 400, 1))
    text += "".join(_decode(s, 8, 0.0) for s in range(400, 405))
    text += "".join(_decode(s, 8, 900.0) for s in range(405, 600))
    found = _diagnose(tmp_path, text, pure, monkeypatch)
    assert len(found) == 1 and "5 consecutive decode batches of TP0" in found[0].title
    assert [(e["line"], e["rank"]) for e in found[0].evidence] == [(402, "TP0"), (406, "TP0")]
    assert "gen throughput (token/s): 0.00" in found[0].evidence[0]["text"]


def test_four_frozen_batches_or_an_idle_server_are_not_frozen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = READY + "".join(_decode(s, 8, 0.0) for s in range(0, 5))
    assert _diagnose(tmp_path, text, False, monkeypatch)
    four = READY + "".join(_decode(s, 8, 0.0 if s % 5 else 900.0) for s in range(0, 25))
    idle = READY + "".join(_decode(s, 0, 0.0) for s in range(0, 25))
    assert _diagnose(tmp_path, four, False, monkeypatch) == []
    assert _diagnose(tmp_path, idle, False, monkeypatch) == []


@pytest.mark.parametrize("pure", [False, True])
def test_decode_batches_whose_counters_do_not_move_are_frozen(tmp_path: Path, pure: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Six decode batches of TP0 in a row with the same #running-req, #token and gen throughput
    (above 0), between ones whose figures move: the server prints batches that do no work."""
    text = READY + "".join(_decode(s, 8, 900.0 + s % 7) for s in range(0, 400))
    text += "".join(_decode(s, 8, 905.0, tokens=36096) for s in range(400, 406))
    text += "".join(_decode(s, 8, 900.0 + s % 7) for s in range(406, 600))
    found = _diagnose(tmp_path, text, pure, monkeypatch)
    assert len(found) == 1 and "6 consecutive decode batches of TP0" in found[0].title
    assert "the same #running-req, #token and gen throughput" in found[0].title
    assert [(e["line"], e["rank"]) for e in found[0].evidence] == [(402, "TP0"), (407, "TP0")]
    assert [e["text"] for e in found[0].evidence] == [text.splitlines()[401], text.splitlines()[406]]
    frozen = summarize_file(tmp_path / "run.log").serving.frozen
    assert (frozen.kind, frozen.rank, frozen.lines) == ("counters_fixed", "TP0", 6)


def test_four_unmoving_batches_or_an_idle_server_are_not_frozen(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Four lines of the same figures are too few, and an idle server's (no request running)
    never move; five of a server with requests running are frozen."""
    def log(running: int, n: int) -> str:
        moving = "".join(_decode(s, 8, 900.0 + s % 7) for s in range(0, 100))
        return READY + moving + "".join(_decode(s, running, 905.0, tokens=5000) for s in range(100, 100 + n))
    assert _diagnose(tmp_path, log(8, 4), False, monkeypatch) == []
    assert _diagnose(tmp_path, log(0, 30), False, monkeypatch) == []
    assert len(_diagnose(tmp_path, log(8, 5), False, monkeypatch)) == 1


@pytest.mark.parametrize("name,lines", [("208-sglang-jax-no-rank-decode-batch-cache-miss-field", 9),
                                        ("209-2026-tp0-decode-batch-comma-cuda-graph-field-steady", 8)])
def test_a_token_count_that_holds_while_throughput_moves_is_not_frozen(tmp_path: Path, name: str,
                                                                       lines: int) -> None:
    """Real decode batches whose #token holds line after line while the server decodes (its
    gen throughput moves): no frozen counter. The same lines with their throughput held too are."""
    real = (ROOT / "fixtures" / "real-unseen" / f"{name}.log").read_text()
    assert summarize_file(ROOT / "fixtures" / "real-unseen" / f"{name}.log").serving.frozen is None
    held = "gen throughput (token/s): 84.39" if name.startswith("208") else "gen throughput (token/s): 144.95"
    log = tmp_path / "held.log"
    log.write_text(re.sub(r"gen throughput \(token/s\): [0-9.]+", lambda m: held, real))
    frozen = summarize_file(log).serving.frozen
    assert (frozen.kind, frozen.lines, frozen.first.line) == ("counters_fixed", lines, 1)


@pytest.mark.parametrize("generator,flags", [("gen_serving_log.py", []), ("gen_serving_log.py", ["--all-ranks"]),
                                             ("gen_sglang_log.py", ["--prefix-style", "dp-tp", "--decode-ranks", "all"])])
def test_generated_serving_logs_are_frozen_only_where_a_line_repeats(tmp_path: Path, generator: str,
                                                                     flags: list[str]) -> None:
    """The benchmark generators' serving logs are not frozen; the same log with one of its
    decode batch lines printed five times over is, there."""
    out = tmp_path / "bench.log"
    subprocess.run([sys.executable, str(ROOT / "bench" / generator), "--size", "1M", "-o", str(out), *flags],
                   check=True, timeout=120)
    assert summarize_file(out).serving.frozen is None
    lines = out.read_text().splitlines(keepends=True)
    at = next(i for i in range(len(lines) // 2, len(lines))
              if lines[i].startswith("[") and lines[i].count("Decode batch") == 1 and "#running-req: 0," not in lines[i])
    repeated = tmp_path / "repeated.log"
    repeated.write_text("".join(lines[:at + 1] + [lines[at]] * 4 + lines[at + 1:]))
    frozen = summarize_file(repeated).serving.frozen
    assert frozen is not None and frozen.kind == "counters_fixed"
    assert (frozen.lines, frozen.first.line, frozen.last.line) == (5, at + 1, at + 5)
    assert frozen.first.text == lines[at].rstrip("\n")


def test_a_frozen_run_across_reused_blocks_cites_its_own_lines() -> None:
    """The bulk reader is handed blocks of a buffer read into again and again: a run that
    begins in one block and ends in the next cites the text of its own first and last lines,
    not what the buffer holds by then."""
    from logforensics.ingest.live import LiveRun

    if not native.available():
        pytest.skip("the compiled bulk path is not built")
    moving = READY + "".join(_decode(s, 8, 900.0 + s % 7) for s in range(0, 200))
    run = [_decode(s, 8, 905.0, tokens=20000) for s in range(200, 206)]  # one key, each its own stamp
    blocks = [moving + "".join(run[:3]), "".join(run[3:]) + _decode(206, 8, 900.0)]
    live = LiveRun("run.log")
    buf = bytearray(blocks[0].encode())
    live.feed_bulk(buf)  # type: ignore[arg-type]  # a bytearray, as ingest.files.blocks hands over
    buf[:] = b"x" * (len(buf) - 1) + b"\n"  # read into again: the first block is gone
    live.feed_bulk(blocks[1].encode())
    live.close()
    frozen = live.summary().serving.frozen
    lines = "".join(blocks).splitlines()
    assert (frozen.kind, frozen.lines) == ("counters_fixed", 6)
    assert [(r.line, r.text) for r in (frozen.first, frozen.last)] == [(202, lines[201]), (207, lines[206])]


def test_frozen_runs_of_parts_join_as_read_in_one() -> None:
    """The parallel reader merges parts in order: every cut of a sequence gives the runs that
    reading it whole gives."""
    from logforensics.model.frozen import FrozenStreaks

    seq = [("TP0", f) for f in "1100000111000001100"] + [("TP1", f) for f in "0011111"]
    seq = [x for pair in zip(seq, seq[::-1]) for x in pair]  # the two ranks interleaved

    def read(items: list[tuple[int, tuple[str, str]]]) -> FrozenStreaks:
        fr = FrozenStreaks()
        for line, (rank, f) in items:
            fr.step(rank, f == "0", lambda line=line: {"line": line})
        return fr

    numbered = list(enumerate(seq, 1))
    whole = read(numbered).first()
    assert whole is not None and whole["lines"] == 5
    for cut in range(len(numbered) + 1):
        for cut2 in (cut, min(cut + 7, len(numbered))):
            a, b, c = read(numbered[:cut]), read(numbered[cut:cut2]), read(numbered[cut2:])
            a.merge(b)
            a.merge(c)
            assert a.first() == whole, (cut, cut2)


def test_runs_of_one_key_of_parts_join_as_read_in_one() -> None:
    """Runs of lines whose figures do not move are runs of one key: two runs side by side of
    different keys stay two, in one reading and in every cut into parts."""
    from logforensics.model.frozen import FrozenStreaks

    seq = [("TP0", k) for k in "aabbbbcccc-ddddeeeee"] + [("TP1", k) for k in "ffffgggg-hhhhh"]
    seq = [x for pair in zip(seq, seq[::-1]) for x in pair]

    def read(items: list[tuple[int, tuple[str, str]]]) -> FrozenStreaks:
        fr = FrozenStreaks()
        for line, (rank, k) in items:
            fr.step(rank, None if k == "-" else k, lambda line=line: {"line": line})
        return fr

    numbered = list(enumerate(seq, 1))
    whole = read(numbered).first()
    assert whole is not None and (whole["rank"], whole["lines"]) == ("TP1", 5)  # the first run of 5: h
    assert [seq[whole[k]["line"] - 1][1] for k in ("first", "last")] == ["h", "h"]
    for cut in range(len(numbered) + 1):
        for cut2 in (cut, min(cut + 5, len(numbered))):
            a, b, c = read(numbered[:cut]), read(numbered[cut:cut2]), read(numbered[cut2:])
            a.merge(b)
            a.merge(c)
            assert a.first() == whole, (cut, cut2)


# ---------------------------------------------------------------- serving that stops with no error
def _prefill(second: int, queue: int) -> str:
    """SGLang v0.4.5's prefill line (scheduler.py log_prefill_stats, trailing ', ')."""
    return (f"[2026-01-01 10:{second // 60:02d}:{second % 60:02d} TP0] Prefill batch. #new-seq: 1, #new-token: 512, "
            f"#cached-token: 0, token usage: 0.02, #running-req: 7, #queue-req: {queue}, \n")


@pytest.mark.parametrize("pure", [False, True])
def test_requests_left_waiting_then_only_probes_is_a_stop(tmp_path: Path, pure: bool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    served = READY + "".join(_decode(s, 8, 900.0) for s in range(0, 200))
    probes = "".join(_probe(s, "/health", "200 OK", 40000 + s) for s in range(200, 260))
    text = served + _prefill(200, 3) + probes
    found = _diagnose(tmp_path, text, pure, monkeypatch)
    assert len(found) == 1 and "serving stopped with no error" in found[0].title and "3 requests waiting" in found[0].title
    assert [(e["line"], e["rank"]) for e in found[0].evidence] == [(202, "TP0")]
    # the same with no request waiting (an idle server), or the log ending soon after: no stop
    assert _diagnose(tmp_path, served + _prefill(200, 0) + probes, pure, monkeypatch) == []
    assert _diagnose(tmp_path, served + _prefill(200, 3) + probes[:probes.index("10:03:40")], pure, monkeypatch) == []
