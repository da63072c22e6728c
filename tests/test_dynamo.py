"""Logs that NVIDIA Dynamo rewrote: its text format, its JSONL records, torn records, probes, two clocks.

Dynamo (``python -m dynamo.sglang``) writes SGLang's records behind its own head (a UTC
stamp, the level, a target) and without SGLang's rank prefix, or as JSONL records with
``DYN_LOGGING_JSONL``. The real lines are in ``fixtures/real-dynamo`` (``SOURCES.tsv``
labels each file from its own text); the forms built here (colour, JSONL of an SGLang
record, a tear) are built from those lines as Dynamo's formatter writes them
(``lib/runtime/src/logging.rs``: tracing-subscriber's compact format, ``JsonLog``).
Every reading must be the same on the pure path and with the compiled reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from logforensics import native
from logforensics.cli import main
from logforensics.events import Event
from logforensics.ingest.batch import read_file
from logforensics.ingest.live import LiveRun
from logforensics.model.summary import RunSummary
from logforensics.read.parser import IncrementalParser

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real-dynamo"
GLM = REAL / "glm52-worker-startup-grep-max-total-tokens.log"
QWEN = REAL / "qwen3-coder-worker-registration-request-prefill.log"
DSV4 = REAL / "sglang-30242-dsv4-disagg-decode-utc-and-local.log"
DOCS = REAL / "dynamo-docs-logging-readable-and-jsonl.log"
RANKS_WARNING = ("ranks not printed: Dynamo drops SGLang's rank prefix unless DYN_SKIP_SGLANG_LOG_FORMATTING=1 "
                 "(records without a rank are rank '-')")
PROBES = Path(__file__).resolve().parent.parent / "fixtures" / "real" / (
    "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log")


def events(data: bytes, chunk: int | None = None) -> list[Event]:
    parser = IncrementalParser("t.log")
    step = chunk or len(data) or 1
    out: list[Event] = []
    for i in range(0, len(data), step):
        out.extend(parser.feed(data[i:i + step]))
    return out + parser.close()


def summary(path: Path, pure: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The summary of ``path`` as ``summary --json`` gives it, on the pure path or the default one."""
    if pure:
        monkeypatch.setenv("LOGFORENSICS_PURE", "1")
    else:
        monkeypatch.delenv("LOGFORENSICS_PURE", raising=False)
    return read_file(path).summary().to_dict()


def both(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The summary, after checking that both paths give it."""
    pure = summary(path, True, monkeypatch)
    default = summary(path, False, monkeypatch)
    assert json.dumps(pure, sort_keys=True, default=str) == json.dumps(default, sort_keys=True, default=str)
    return default


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def view(ev: Event) -> tuple[Any, ...]:
    """What a record means, whatever form its text had."""
    return ev.kind, ev.line, ev.rank, ev.ts, dict(ev.fields)


# ---------------------------------------------------------------- the text format
def test_rewritten_start_up_records_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    evs = events(GLM.read_bytes())
    cap = [e for e in evs if e.kind == "max_total_tokens"]
    assert [(e.line, e.rank, e.ts) for e in cap] == [(6, None, "2026-08-10T16:29:42.731228")]
    assert cap[0].fields["max_total_num_tokens"] == 540800
    assert all(e.ts is not None and e.ts.startswith("2026-08-10T") for e in evs if e.text)
    s = both(GLM, monkeypatch)
    assert s["ranks"] == ["-"]
    assert s["memory"]["-"]["max_total_num_tokens"] == 540800
    assert s["memory"]["-"]["max_running_requests"] == 128
    assert s["warnings"].count(RANKS_WARNING) == 1


def test_dynamo_registration_is_readiness_and_batches_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    s = both(QWEN, monkeypatch)
    assert s["outcome"] == "ready"
    assert (s["ready"]["line"], s["ready"]["ts"]) == (8, "2026-07-08T22:28:35.504473")
    assert s["coverage"]["kinds"]["prefill_batch"] == 1
    assert s["warnings"].count(RANKS_WARNING) == 1


def test_ranks_printed_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """With DYN_SKIP_SGLANG_LOG_FORMATTING=1 SGLang's own lines keep their ranks: only Dynamo's are UTC."""
    s = both(DSV4, monkeypatch)
    assert s["ranks"] == ["DP1 TP1 EP1"]
    assert RANKS_WARNING not in s["warnings"]
    assert s["outcome"] == "crashed"
    assert (s["clock"]["utc_records"], s["clock"]["local_records"]) == (3, 3)


def coloured(line: str) -> str:
    """A Dynamo text line as its formatter writes it to a terminal: stamp dimmed, level in
    colour, target dimmed with its colon (tracing-subscriber's compact format with ANSI)."""
    stamp, rest = line.split(" ", 1)
    level, rest = rest.lstrip().split(" ", 1)
    target, message = rest.split(": ", 1)
    return (f"\x1b[2m{stamp}\x1b[0m \x1b[32m{level:>5}\x1b[0m \x1b[2m{target}\x1b[0m\x1b[2m:\x1b[0m {message}")


@pytest.mark.parametrize(("path", "kind"), [(GLM, "max_total_tokens"), (QWEN, "server_ready")], ids=["glm", "qwen"])
def test_colour_changes_nothing(path: Path, kind: str) -> None:
    plain = [view(e) for e in events(path.read_bytes())]
    text = "\n".join(coloured(t) if t else t for t in lines(path))
    got = [view(e) for e in events(text.encode())]
    assert got == plain
    assert kind in [v[0] for v in got]


def test_a_docker_stamp_before_dynamo_is_a_wrapper() -> None:
    text = "\n".join(f"2026-08-10T16:29:43.000000001Z {t}" for t in lines(GLM) if t)
    got = [view(e) for e in events(text.encode())]
    assert got == [view(e) for e in events(GLM.read_bytes()) if e.text]
    assert got[5][:4] == ("max_total_tokens", 6, None, "2026-08-10T16:29:42.731228")


# ---------------------------------------------------------------- JSONL
def as_jsonl(line: str, file: str = "/opt/dynamo/venv/lib/python3.12/site-packages/sglang/srt/managers/x.py") -> str:
    """A Python record of Dynamo's text form as its JSONL form (``DYN_LOGGING_JSONL``): the
    ``log`` crate's target, the record's own as ``log.target`` (docs/guides/logging.md)."""
    stamp, rest = line.split(" ", 1)
    level, rest = rest.lstrip().split(" ", 1)
    target, message = rest.split(": ", 1)
    return json.dumps({"time": stamp, "level": level, "target": "log", "message": message, "log.file": file,
                       "log.line": 1, "log.target": target}, separators=(",", ":"))


def test_real_jsonl_records_are_read_as_the_text_form() -> None:
    evs = events(DOCS.read_bytes())
    assert [e.ts for e in evs] == [
        "2025-09-02T15:50:01.770028", "2025-09-02T15:50:01.770195", "2025-09-02T15:50:01.770265",
        "2025-09-02T15:50:01.770316", "2025-09-02T15:50:01.770358", "2025-09-02T15:53:31.943377",
        "2025-09-02T15:53:31.943550", "2025-09-02T15:53:31.943636", "2025-09-02T15:53:31.943701",
        "2025-09-02T15:53:31.943747", "2025-10-31T20:52:07.707164", "2025-10-31T20:52:10.707164"]
    records = [json.loads(t) for t in lines(DOCS) if t.startswith("{")]
    assert [e.fields["body"] for e in evs[5:]] == [r["message"] for r in records]
    assert evs[0].fields["body"] == evs[5].fields["body"]  # one message in both forms
    assert [e.kind for e in evs] == ["other"] * 12  # vLLM's messages: none is SGLang's


@pytest.mark.parametrize("path", [GLM, QWEN], ids=["glm", "qwen"])
def test_sglang_records_as_jsonl_mean_what_their_text_does(path: Path) -> None:
    plain = [view(e) for e in events(path.read_bytes())]
    jsonl = "\n".join(as_jsonl(t) if t else t for t in lines(path))
    assert [view(e) for e in events(jsonl.encode())] == plain


def test_a_jsonl_traceback_is_assembled() -> None:
    """A message of several lines (a traceback logged through Dynamo) is one record per line."""
    tb = lines(DSV4)[5:43]
    head = tb[0].split("] ", 1)[1]  # "Scheduler hit an exception: Traceback ..."
    message = "\n".join([head, *tb[1:]])
    record = json.dumps({"time": "2026-07-06T02:49:44.257000Z", "level": "ERROR", "target": "log", "message": message,
                         "log.target": "scheduler.run_scheduler_process"})
    got = [e for e in events((record + "\n").encode()) if e.kind == "exception"]
    assert len(got) == 1
    assert got[0].fields["exception"] == "torch.AcceleratorError"
    assert len(got[0].fields["frames"]) == 12
    assert got[0].ts == "2026-07-06T02:49:44.257000"


# ---------------------------------------------------------------- torn records
def torn(path: Path, n: int, at: str) -> bytes:
    """The JSONL form of ``path`` with record ``n`` (0-based) torn before ``at``, as two
    concurrent writers leave it: its first part, a newline, then the rest."""
    out = []
    for i, t in enumerate(lines(path)):
        rec = as_jsonl(t) if t else t
        if i == n:
            cut = rec.index(at)
            rec = rec[:cut] + "\n" + rec[cut:]
        out.append(rec)
    return "\n".join(out).encode()


def test_a_torn_record_is_read_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = torn(GLM, 5, "max_running_requests")
    whole = [e for e in events(data) if e.kind == "max_total_tokens"]
    assert [(e.line, e.end_line) for e in whole] == [(6, 7)]
    assert whole[0].fields["max_running_requests"] == 128
    assert whole[0].fields["context_len"] == 524288
    # the line after the tear keeps its number: the record after it is line 8
    assert [e.line for e in events(data) if e.text][5:] == [6, 8, 9, 10, 11]
    # fed in two chunks, the tear in the second: read alike
    at = sum(len(t) + 1 for t in data.split(b"\n")[:5])  # where line 6, the torn record, begins
    parser = IncrementalParser("t.log")
    fed = parser.feed(data[:at]) + parser.feed(data[at:]) + parser.close()
    assert [view(e) for e in fed if e.kind == "max_total_tokens"] == [view(whole[0])]
    path = tmp_path / "torn.log"
    path.write_bytes(data)
    s = both(path, monkeypatch)
    assert s["memory"]["-"]["max_total_num_tokens"] == 540800
    assert s["memory"]["-"]["context_len"] == 524288


def _summary_in_blocks(data: bytes, cuts: list[int], bulk: bool) -> dict[str, Any]:
    """The summary of ``data`` read in blocks that end at ``cuts``, as ``feed`` (the pure
    path, ``watch``) or ``feed_bulk`` (the compiled path) gets them."""
    run = LiveRun("t.log")
    for a, b in zip([0] + cuts, cuts + [len(data)]):
        run.feed_bulk(data[a:b]) if bulk else run.feed(data[a:b])
    run.close()
    return run.summary().to_dict()


@pytest.mark.parametrize("bulk", [False, True], ids=["feed", "feed_bulk"])
def test_a_record_torn_at_the_end_of_a_block_is_read_as_one(bulk: bool) -> None:
    """The tear falls where one block ends: the record's first part waits for the next
    block, as an unfinished line does, and is read with the line that completes it."""
    if bulk and not native.available():
        pytest.skip("the accelerator is not built here, or LOGFORENSICS_PURE=1")
    data = torn(GLM, 5, "max_running_requests")
    at = sum(len(t) + 1 for t in data.split(b"\n")[:6])  # line 7, the record's rest, begins here
    whole = _summary_in_blocks(data, [], bulk)
    assert whole["memory"]["-"]["context_len"] == 524288  # read as one record
    for cuts in ([at], [at - 1], [at - 5, at], [at, at + 3]):
        got = _summary_in_blocks(data, cuts, bulk)
        assert got == whole, cuts
    # the log ends after the first part (with its newline, or with the rest unterminated)
    head = data[:at]
    cut = _summary_in_blocks(head, [], bulk)
    assert cut["coverage"]["lines_read"] == 6 and "context_len" not in cut["memory"].get("-", {})
    rest_end = data.index(b"\n", at)
    ends = _summary_in_blocks(data[:rest_end], [at], bulk)
    assert ends["memory"]["-"]["context_len"] == 524288 and ends["coverage"]["lines_read"] == 7


@pytest.mark.parametrize("at", ["max_running_requests", "00, chunked"])
def test_a_torn_text_record_is_read_as_one(at: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamo's text form torn mid-record: a known record (before a key, or inside a number:
    ``max_total_num_tokens=5408`` alone), then a line that begins mid-record."""
    text = lines(GLM)
    cut = text[5].index(at)
    data = "\n".join(text[:5] + [text[5][:cut], text[5][cut:]] + text[6:]).encode()
    got = [e for e in events(data) if e.kind == "max_total_tokens"]
    assert [(e.line, e.end_line) for e in got] == [(6, 7)]
    assert got[0].fields["context_len"] == 524288
    path = tmp_path / "torn.log"
    path.write_bytes(data)
    s = both(path, monkeypatch)
    assert (s["memory"]["-"]["max_total_num_tokens"], s["memory"]["-"]["available_gpu_mem_gib"]) == (540800, 8.69)
    assert s["coverage"]["lines_unrecognised"] == 9  # the tree-cache lines; the rest of the torn one is no line of its own


def test_a_known_record_then_an_unknown_line_stays_two() -> None:
    """Not torn: the next line, joined, adds no field to the record before it."""
    text = lines(QWEN)
    data = "\n".join([text[11], "Dynamo decode handler markers: ok", text[5]]).encode()
    got = events(data)
    assert [(e.line, e.end_line, e.kind) for e in got] == [(1, None, "prefill_batch"), (2, None, "other"),
                                                          (3, None, "other")]


def test_a_torn_record_not_completed_stays_two_lines() -> None:
    """A torn record followed by a whole one (the writer began again) is not joined to it."""
    whole = as_jsonl(lines(GLM)[5])
    data = (whole[:whole.index("max_running")] + "\n" + whole + "\n").encode()
    got = events(data)
    assert [(e.line, e.end_line, e.kind) for e in got] == [(1, None, "other"), (2, None, "max_total_tokens")]


def tear(data: bytes, line: int, at: bytes) -> tuple[bytes, int]:
    """``data`` with its line ``line`` (1-based) torn before ``at``, as a concurrent writer
    leaves it (the first part, a newline, the rest), and where the rest begins."""
    start = sum(len(t) + 1 for t in data.split(b"\n")[:line - 1])
    cut = data.index(at, start)
    return data[:cut] + b"\n" + data[cut:], cut + 1


def _unplaced(value: Any) -> Any:
    """``value`` without where its evidence is: the file's name, and line numbers (those
    after a tear are one more than without it)."""
    if isinstance(value, dict):
        return {k: _unplaced(v) for k, v in value.items() if k not in ("file", "line", "end_line")}
    if isinstance(value, list):
        return [_unplaced(v) for v in value]
    return value


def _settings(s: dict[str, Any]) -> Any:
    """What a torn start-up record loses when it is read as two lines."""
    return _unplaced([s["server_args"], s["memory"], s["coverage"]["lines_unrecognised"], s["coverage"]["kinds"]])


@pytest.mark.parametrize("at", [b"tp_size=", b"Qwen/QwQ-32B', tokenizer_mode", b"chunked_prefill_size"],
                         ids=["before-a-key", "inside-a-string", "later"])
def test_a_torn_server_args_dump_is_read_as_one(at: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's ``server_args=ServerArgs(...)`` torn: its first part leaves the dump's
    brackets open, the line after it (no stamp, no rank) closes them."""
    data, _ = tear(PROBES.read_bytes(), 3, at)
    got = [e for e in events(data) if e.kind == "server_args"]
    assert [(e.line, e.end_line) for e in got] == [(3, 4)]
    path = tmp_path / "torn.log"
    path.write_bytes(data)
    s = both(path, monkeypatch)
    whole = both(PROBES, monkeypatch)
    assert s["server_args"]["tp_size"] == 4
    assert _settings(s) == _settings(whole)  # every setting, and no line of its own for the rest


TORN_START_UP = [
    pytest.param(PROBES.read_bytes(), 3, b"tp_size=", id="server-args"),
    pytest.param(GLM.read_bytes(), 6, b"max_running_requests", id="max-total-tokens"),
    pytest.param(GLM.read_bytes(), 6, b"00, chunked", id="max-total-tokens-mid-number"),
]


@pytest.mark.parametrize("bulk", [False, True], ids=["feed", "feed_bulk"])
@pytest.mark.parametrize(("untorn", "line", "at"), TORN_START_UP)
def test_a_start_up_record_torn_where_a_block_ends_is_read_as_one(untorn: bytes, line: int, at: bytes,
                                                                   bulk: bool) -> None:
    """Wherever a block ends around the tear (in the first part, at its newline, in the
    rest, after it), the torn record is read as one: the summary is that of the log read
    in one block, whose settings are those of the log not torn."""
    if bulk and not native.available():
        pytest.skip("the accelerator is not built here, or LOGFORENSICS_PURE=1")
    data, rest = tear(untorn, line, at)
    whole = _summary_in_blocks(data, [], bulk)
    assert _settings(whole) == _settings(_summary_in_blocks(untorn, [], bulk))
    head = data.rindex(b"\n", 0, rest - 1) + 1
    end = data.index(b"\n", rest)
    for cut in sorted({*range(head - 2, head + 3), *range(rest - 6, rest + 6), *range(end - 2, end + 3)}):
        assert _summary_in_blocks(data, [cut], bulk) == whole, cut
    assert _summary_in_blocks(data, [rest - 1, rest], bulk) == whole  # the newline alone, a block of its own


def test_a_first_part_that_waits_is_bounded() -> None:
    """A start-up record's first part waits for the next line; a next line that never ends
    is cut at ``max_line_bytes`` (counted, its own line number in the warning), so what
    waits stays bounded, and the first part is read when the log ends."""
    parser = IncrementalParser("t.log", max_line_bytes=1000)
    first = b"[2026-08-10 16:29:42] max_total_num_tokens=540800, chunked_prefill_size=8192\n"
    out = parser.feed(first)
    assert out == []  # it waits: the next line may be its rest
    for _ in range(200):
        out += parser.feed(b"x" * 500)
        assert len(parser._tail) + parser._pieces_len <= len(first) + 1000 + 500
    out += parser.feed(b"\nlast\n") + parser.close()
    assert [(e.kind, e.line) for e in out] == [("max_total_tokens", 1), ("other", 2), ("other", 3)]
    assert parser.stats.long_lines == 1 and parser.stats.warnings[0].startswith("line 2:")


def test_a_first_part_is_read_when_a_live_stream_pauses() -> None:
    """``watch``: a stream that pauses after a start-up record does not keep it waiting
    (``settle``); its rest would have followed at once."""
    run = LiveRun("t.log")
    assert run.feed(b"[2026-08-10 16:29:42] max_total_num_tokens=540800, chunked_prefill_size=8192\n") == []
    assert [e.kind for e in run.settle()] == ["max_total_tokens"]
    assert [e.line for e in run.feed(b"[2026-08-10 16:29:43] next\n") + run.close()] == [2]


# ---------------------------------------------------------------- probes
def test_probes_are_counted_apart_from_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    s = both(PROBES, monkeypatch)
    assert s["coverage"]["probe_requests"] == 8  # the launcher's GET /get_model_info among them
    assert s["coverage"]["kinds"]["http_probe"] == 8
    assert s["coverage"]["kinds"]["http_access"] == 1  # POST /generate


def test_probes_are_counted_apart_and_an_answer_shows_the_http_server_up(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Probes are no requests served (counted apart), but one answered 2xx shows SGLang's HTTP
    server up, which it starts once every scheduler is ready (real-unseen 422); one answered
    503 (a server still starting, or draining) does not."""
    probes = [t for t in lines(PROBES) if "/health " in t]
    assert len(probes) == 7
    path = tmp_path / "probes.log"
    path.write_text("\n".join(probes + [p.replace("/health", "/metrics") for p in probes]) + "\n")
    s = both(path, monkeypatch)
    assert s["coverage"]["probe_requests"] == 14
    assert "http_access" not in s["coverage"]["kinds"]
    assert s["phase_reached"] == {"-": "serving"}
    assert s["outcome"] == "ready" and s["outcome_reason"].startswith("its HTTP server answered a probe at line 1 (")
    path.write_text("\n".join(p.replace("200 OK", "503 Service Unavailable") for p in probes) + "\n")
    s = both(path, monkeypatch)
    assert s["phase_reached"] == {} and s["outcome"] == "incomplete"


# ---------------------------------------------------------------- two clocks
def test_offset_from_adjacent_records_of_one_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = both(DSV4, monkeypatch)["clock"]
    assert clock["local_offset_h"] == -7.0
    assert clock["pairs"] == 1
    assert clock["anchor"] == {"utc_line": 3, "utc": "2026-07-06T02:45:29.923854Z",
                               "local_line": 4, "local": "2026-07-05T19:45:29.924"}
    assert clock["residual_s"] == pytest.approx(0.000146)
    assert clock["disagreeing"] == {}


def test_records_apart_give_no_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never guessed: a local record two lines after a UTC one is no pair."""
    text = lines(DSV4)
    path = tmp_path / "apart.log"
    path.write_text("\n".join(text[:3] + ["  (a line between)"] + text[3:]))
    clock = both(path, monkeypatch)["clock"]
    assert (clock["local_offset_h"], clock["pairs"], clock["anchor"]) == (None, 0, None)


def test_pairs_that_disagree_give_no_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = lines(DSV4)
    other = text[3].replace("19:45:29.924", "18:45:29.924")  # one hour off: another zone
    path = tmp_path / "disagree.log"
    path.write_text("\n".join(text[:4] + [text[2], other] + text[4:]))
    clock = both(path, monkeypatch)["clock"]
    assert clock["local_offset_h"] is None
    assert clock["disagreeing"] in ({"-8": 1}, {"-7": 1})


def test_one_record_with_both_stamps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's prefix behind Dynamo's head: one record, one moment on both clocks."""
    line = "2026-07-06T02:45:29.924100Z  INFO log: " + lines(DSV4)[4]
    path = tmp_path / "one.log"
    path.write_text(line + "\n")
    s = both(path, monkeypatch)
    assert s["ready"]["line"] == 1
    assert s["clock"]["local_offset_h"] == -7.0
    assert s["clock"]["anchor"]["utc_line"] == s["clock"]["anchor"]["local_line"] == 1


def test_no_clock_without_dynamo(monkeypatch: pytest.MonkeyPatch) -> None:
    assert both(PROBES, monkeypatch)["clock"] is None


def test_live_feeding_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """``watch`` feeds small chunks: the torn record, the clock and the warning come out alike."""
    data = DSV4.read_bytes()
    run = LiveRun("t.log")
    for i in range(0, len(data), 50):
        run.feed(data[i:i + 50])
    run.close()
    assert run.summary().to_dict()["clock"]["local_offset_h"] == -7.0


def _two_files(tmp_path: Path, *, anchored: bool) -> dict[str, Any]:
    """A run of two files as ``summary --json`` reads it: node1 the decode worker of DSV4,
    whose scheduler's exception Dynamo wrote (its head, UTC: 02:49:44), after the records
    of one moment on both clocks (lines 3 and 4: local time is UTC-7) unless ``anchored``
    is False; node0 a server whose own exception is stamped in local time, 19:49:50 (02:49:50
    UTC): six seconds after node1's, beyond the clock skew of two machines."""
    text = lines(DSV4)
    head = text[5].split("] ", 1)[1]
    dynamo = [*text[:5], "2026-07-06T02:49:44.257000Z ERROR scheduler.run_scheduler_process: " + head, *text[6:43]]
    if not anchored:
        dynamo = dynamo[:3] + dynamo[5:]
    (tmp_path / "node1.log").write_text("\n".join(dynamo) + "\n")
    local = [text[5].replace("19:49:44.257 DP1 TP1 EP1", "19:49:50.257 DP0 TP0 EP0"), *text[6:43]]
    (tmp_path / "node0.log").write_text("\n".join(local) + "\n")
    res = CliRunner().invoke(main, ["summary", "--json", str(tmp_path / "node0.log"), str(tmp_path / "node1.log")])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


def test_the_first_failure_across_files_is_found_on_one_clock(tmp_path: Path) -> None:
    """Read as printed, node1's 02:49:44 (UTC) is before node0's 19:49:50 (local) of the day
    before; on one clock, with the offset node1's log derived, node1 failed first, and the
    summary says which stamp it moved, by how much, from which anchor, with what residual."""
    s = _two_files(tmp_path, anchored=True)
    crash = s["crash"]
    assert (crash["node"], crash["line"], crash["nodes"], crash["order_uncertain"]) == (
        "node1", 6, ["node1", "node0"], None)
    assert s["outcome_reason"].startswith("node1 ")
    node1 = str(tmp_path / "node1.log")
    assert crash["clock"] == [{"node": "node1", "file": node1, "line": 6, "stamp": "2026-07-06T02:49:44.257000",
                               "as": "2026-07-05T19:49:44.257000", "clock": "local", "local_offset_h": -7.0,
                               "anchor": {"utc": f"{node1}:3", "local": f"{node1}:4"}, "residual_s": 0.000146}]
    text = CliRunner().invoke(main, ["summary", str(tmp_path / "node0.log"), node1]).stdout
    assert "compared in local time: node1's failure" in text and "-7 h from UTC" in text


def test_a_moved_stamp_reads_back_as_it_was_saved(tmp_path: Path) -> None:
    """'as' is no Python name: the record holds it in ``on`` and writes the key 'as', in its
    place, so a saved summary reads back and prints as it was saved."""
    s = _two_files(tmp_path, anchored=True)
    back = RunSummary.from_dict(s)
    assert back.crash is not None and back.crash.clock is not None
    [moved] = back.crash.clock
    assert moved.on == "2026-07-05T19:49:44.257000" and moved.clock == "local" and moved.local_offset_h == -7.0
    assert moved.anchor is not None and moved.anchor.local == f"{tmp_path / 'node1.log'}:4"
    again = back.to_dict()
    assert again == s and list(again["crash"]["clock"][0]) == list(s["crash"]["clock"][0])
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(s))
    assert json.loads(CliRunner().invoke(main, ["summary", "--json", str(saved)]).stdout) == s


def test_no_offset_is_applied_without_an_anchor(tmp_path: Path) -> None:
    """node1's log shows no moment on both clocks: nothing is moved, and a UTC stamp is not
    compared with a local one as if of one clock: the order is uncertain."""
    crash = _two_files(tmp_path, anchored=False)["crash"]
    note = crash["order_uncertain"] or ""
    assert "clock" not in crash
    assert "uncertain" in note and "stamped in UTC" in note


# ---------------------------------------------------------------- every real file against its label
def _sources() -> list[Any]:
    rows = [t.split("\t") for t in (REAL / "SOURCES.tsv").read_text(encoding="utf-8").splitlines()[1:] if t]
    return [pytest.param(REAL / name, label, id=name[:24]) for name, _url, _kind, label in rows]


@pytest.mark.parametrize(("path", "label"), _sources())
def test_real_files_read_as_labelled(path: Path, label: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``SOURCES.tsv`` says what each file shows, from its own text: the reading must agree."""
    s = both(path, monkeypatch)
    facts = dict(f.split("=", 1) for f in label.split("; ") if "=" in f)
    if "max_total_num_tokens" in facts:
        assert s["memory"]["-"]["max_total_num_tokens"] == int(facts["max_total_num_tokens"])
    ranks = facts.get("ranks", "")
    if ranks.startswith("not printed"):
        assert s["warnings"].count(RANKS_WARNING) == 1 and s["ranks"] == ["-"]
    elif ranks.startswith("printed"):
        assert RANKS_WARNING not in s["warnings"] and "-" not in s["ranks"]
    ready = facts.get("ready", "")
    if ready.startswith("Dynamo's"):
        assert "Model registration succeeded" in s["ready"]["text"]
    elif ready.startswith("no") or ready.startswith("not in excerpt"):
        assert s["ready"] is None
    offset = facts.get("utc_and_local", "")
    if "offset -7 h" in offset:
        assert s["clock"]["local_offset_h"] == -7.0
    elif offset.startswith("yes"):  # not adjacent records of one moment: no offset
        assert s["clock"]["local_offset_h"] is None
    assert s["clock"]["utc_records"] > 0


# ---------------------------------------------------------------- hangs and each file's times on one clock
GLM_RECORD = lines(GLM)[5].split("Z ", 1)[1]  # SGLang's record behind Dynamo's head: rank not printed
WATCHDOG = "Watchdog timeout (self.watchdog_timeout=300)"  # SGLang's scheduler watchdog, as in fixtures/real/149-*


def _two_hung_files(tmp_path: Path, *, anchored: bool) -> tuple[dict[str, Any], str]:
    """A run of two files that both hung, as ``summary --json`` reads it: node1 the records
    of DSV4's worker (lines 3 and 4 one moment on both clocks: local time is UTC-7, unless
    ``anchored`` is False), an SGLang record Dynamo rewrote (GLM's ``max_total_num_tokens``
    line) and SGLang's scheduler watchdog firing behind Dynamo's head at 02:49:44 UTC;
    node0 a server whose watchdog fired at 19:49:50 local time (02:49:50 UTC), six seconds
    later. Read as printed, node0's stamp is seven hours before node1's."""
    text = lines(DSV4)
    dynamo = [*text[:5], "2026-07-06T02:46:10.731228Z " + GLM_RECORD,
              f"2026-07-06T02:49:44.257000Z ERROR scheduler.watchdog_thread: {WATCHDOG}"]
    if not anchored:
        dynamo = dynamo[:3] + dynamo[5:]
    (tmp_path / "node1.log").write_text("\n".join(dynamo) + "\n")
    (tmp_path / "node0.log").write_text(f"[2026-07-05 19:45:00 TP0] Load weight begin. avail mem=78.50 GB\n"
                                        f"[2026-07-05 19:49:50 TP0] {WATCHDOG}\n")
    args = [str(tmp_path / "node0.log"), str(tmp_path / "node1.log")]
    res = CliRunner().invoke(main, ["summary", "--json", *args])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout), CliRunner().invoke(main, ["summary", *args]).stdout


def _moved(node1: str, line: int, stamp: str, local: str) -> dict[str, Any]:
    return {"node": "node1", "file": node1, "line": line, "stamp": stamp, "as": local, "clock": "local",
            "local_offset_h": -7.0, "anchor": {"utc": f"{node1}:3", "local": f"{node1}:4"}, "residual_s": 0.000146}


def test_the_first_hang_across_files_is_found_on_one_clock(tmp_path: Path) -> None:
    """On one clock node1's watchdog (02:49:44 UTC, 19:49:44 local) fired six seconds before
    node0's: node1's hang is the run's, and the summary says which stamp it moved, by how
    much, from which anchor, as it does for a crash."""
    s, text = _two_hung_files(tmp_path, anchored=True)
    node1 = str(tmp_path / "node1.log")
    hang = s["hang"]
    assert (s["outcome"], hang["node"], hang["first_line"], hang.get("order_uncertain")) == ("hung", "node1", 7, None)
    assert hang["clock"] == [_moved(node1, 7, "2026-07-06T02:49:44.257000", "2026-07-05T19:49:44.257000")]
    assert s["outcome_reason"].startswith("node1 ") and "also failed: node0" in s["outcome_reason"]
    assert "First hang on node1" in text and "compared in local time: node1's hang" in text


def test_each_files_times_are_put_on_one_clock(tmp_path: Path) -> None:
    """node1's first and last stamps are chosen on local time, the UTC ones moved with the
    offset its file derived; a rank's last stamp in UTC says the same; node0's, all local
    time, are as printed and nothing of it is moved."""
    s, _ = _two_hung_files(tmp_path, anchored=True)
    node1 = str(tmp_path / "node1.log")
    n0, n1 = s["nodes"]["node0"], s["nodes"]["node1"]
    assert (n0["first_ts"], n0["last_ts"]) == ("2026-07-05T19:45:00", "2026-07-05T19:49:50")
    assert "clock" not in n0 and "order_uncertain" not in n0
    assert (n1["first_ts"], n1["last_ts"]) == ("2026-07-05T19:45:29.924", "2026-07-06T02:49:44.257000")
    assert n1["clock"] == [_moved(node1, 7, "2026-07-06T02:49:44.257000", "2026-07-05T19:49:44.257000")]
    seen = s["last_seen"]["-"]
    assert seen["clock"] == _moved(node1, seen["line"], seen["ts"], seen["clock"]["as"])
    assert seen["clock"]["as"] == "2026-07-05T19:" + seen["ts"][14:]


def test_a_hang_order_across_unrelated_clocks_is_uncertain(tmp_path: Path) -> None:
    """node1's log shows no moment on both clocks: nothing is moved, and the hang order and
    node1's times are marked uncertain rather than compared as if of one clock."""
    s, _ = _two_hung_files(tmp_path, anchored=False)
    hang = s["hang"]
    assert "clock" not in hang and "stamped in UTC" in (hang["order_uncertain"] or "")
    assert hang["order_uncertain"] in s["outcome_reason"]
    n1 = s["nodes"]["node1"]
    assert "clock" not in n1 and "no file shows a moment on both clocks" in n1["order_uncertain"]
    assert "clock" not in s["last_seen"]["-"]


def test_files_of_one_clock_keep_their_times_as_printed(tmp_path: Path) -> None:
    """No file with Dynamo's stamps: nothing is moved and nothing added, as before."""
    (tmp_path / "node1.log").write_text(f"[2026-07-05 19:49:44 TP1] {WATCHDOG}\n")
    (tmp_path / "node0.log").write_text(f"[2026-07-05 19:49:50 TP0] {WATCHDOG}\n")
    s = json.loads(CliRunner().invoke(main, ["summary", "--json", str(tmp_path / "node0.log"),
                                             str(tmp_path / "node1.log")]).stdout)
    assert s["hang"]["node"] == "node1" and "clock" not in s["hang"] and "order_uncertain" not in s["hang"]
    assert all("clock" not in n and "order_uncertain" not in n for n in s["nodes"].values())


def _summary_json(*paths: Path) -> dict[str, Any]:
    res = CliRunner().invoke(main, ["summary", "--json", *map(str, paths)])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("form", ["text", "jsonl"])
@pytest.mark.parametrize(("name", "rank"), [
    ("glm52-worker-tp_rank1.log", "TP1"),
    ("decode-dp_rank0-tp-rank-1.log", "DP0 TP1"),
    ("worker_rank3.out", "rank3"),
    ("glm52-worker.log", None),          # the name states no rank
    ("glm52-tp8.log", None),             # a TP size, as names carry it: no rank
    ("glm52-node_rank1.log", None),      # a node, not a rank
])
def test_the_rank_dynamo_dropped_is_the_one_the_file_name_states(tmp_path: Path, form: str, name: str,
                                                                   rank: str | None) -> None:
    """Dynamo's head drops SGLang's rank prefix, and neither its text fields (``component``,
    ``endpoint``, ``namespace``, ``instance_id``) nor its JSONL ones name a rank: the file's
    name can, and the rank is taken from it only then, with a warning that says so."""
    text = GLM.read_text(encoding="utf-8")
    if form == "jsonl":
        text = "\n".join(as_jsonl(t) if t else t for t in text.split("\n"))
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    s = _summary_json(path)
    if rank is None:
        assert s["ranks"] == ["-"] and s["warnings"].count(RANKS_WARNING) == 1
        return
    assert s["ranks"] == [rank] and s["phase_reached"] == {rank: "warmup"}
    assert s["memory"][rank]["max_total_num_tokens"] == 540800
    assert RANKS_WARNING not in s["warnings"]
    assert f"records without a rank are {rank}, the rank the file name {name} states" in s["warnings"][0]


def test_a_file_rank_is_not_taken_when_the_log_names_ranks_or_the_sizes_forbid_it(tmp_path: Path) -> None:
    """A file whose own records name ranks keeps its ``-`` records apart (they may be any
    rank's), and a name's rank the log's TP size cannot have is not one."""
    dsv4 = tmp_path / "decode-tp_rank0.log"
    dsv4.write_bytes(DSV4.read_bytes())
    assert _summary_json(dsv4)["ranks"] == ["DP1 TP1 EP1"]
    glm = GLM.read_text(encoding="utf-8").split("\n")
    glm.insert(0, glm[0].split(" INFO ")[0] + " INFO server_args.__post_init__: server_args=ServerArgs(tp_size=2)")
    too_high = tmp_path / "worker-tp_rank2.log"
    too_high.write_text("\n".join(glm), encoding="utf-8")
    s = _summary_json(too_high)
    assert s["ranks"] == ["-"] and s["warnings"].count(RANKS_WARNING) == 1


def test_a_crash_on_the_rank_a_file_name_states_is_said_on_that_rank(tmp_path: Path) -> None:
    text = lines(DSV4)
    head = text[5].split("] ", 1)[1]
    crash = [*lines(GLM)[:6], "2026-07-06T02:49:44.257000Z ERROR scheduler.run_scheduler_process: " + head, *text[6:43]]
    path = tmp_path / "decode-dp_rank1.log"
    path.write_text("\n".join(crash) + "\n", encoding="utf-8")
    s = _summary_json(path)
    assert s["outcome"] == "crashed" and s["outcome_reason"].endswith(" on DP1 at line 7")
    assert (s["crash"]["first_rank"], s["crash"]["ranks"], s["crash"]["rank_inferred_from"]) == \
        ("DP1", ["DP1"], "file_name")


def test_one_file_per_rank_gives_each_file_its_rank(tmp_path: Path) -> None:
    """A worker's ranks written to one file each, every file without a rank prefix: the run
    has the ranks the names state, not one ``-`` per file."""
    for name in ("worker-tp_rank0.log", "worker-tp_rank1.log"):
        (tmp_path / name).write_bytes(GLM.read_bytes())
    s = _summary_json(tmp_path / "worker-tp_rank0.log", tmp_path / "worker-tp_rank1.log")
    assert s["ranks"] == ["TP0", "TP1"]
    assert s["memory"]["TP1"]["max_total_num_tokens"] == 540800
