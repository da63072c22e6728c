"""Bad input never raises: random bytes, mutated real lines, NULs, CRLF, huge lines, truncation.

Nothing is lost either: every non-blank physical line is covered by some event (its own,
or an assembled traceback that lists it), and coverage counts what was not recognised.
"""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logforensics.ingest import LiveRun
from logforensics.read.parser import IncrementalParser

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"
REAL_LINES = [line for p in sorted(REAL.glob("*.log")) for line in p.read_bytes().split(b"\n") if line.strip()]


def parse_all(data: bytes, chunk: int = 4096) -> tuple[list, LiveRun]:
    run = LiveRun("fuzz.log")
    events = []
    for i in range(0, len(data), chunk):
        events += run.feed(data[i:i + chunk])
    events += run.close()
    run.summary()
    return events, run


def covered_lines(events: list) -> set[int]:
    lines: set[int] = set()
    for e in events:
        lines.add(e.line)
        for ln, _ in e.fields.get("lines", []) if e.kind in ("exception", "oom_message") else []:
            lines.add(ln)  # a record that spans lines lists each line it holds
        if e.end_line:  # a record the reader joined across lines (a torn line's two parts) holds them all
            lines.update(range(e.line, e.end_line + 1))
    return lines


def assert_accounted(data: bytes, events: list) -> None:
    physical = data.split(b"\n")
    if physical and physical[-1] == b"":
        physical.pop()
    covered = covered_lines(events)
    for i, line in enumerate(physical, 1):
        if line.strip():
            assert i in covered, f"line {i} lost: {line[:80]!r}"


mutations = st.sampled_from(["cut", "swap", "nul", "bytes", "cr", "dup", "join"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000), st.integers(1, 64))
def test_random_bytes(data: bytes, chunk: int) -> None:
    events, run = parse_all(data, chunk)
    assert_accounted(data, events)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(REAL_LINES) - 1), mutations, st.integers(0, 10_000)), max_size=40))
def test_mutated_real_lines(picks: list[tuple[int, str, int]]) -> None:
    out = []
    for idx, how, r in picks:
        line = REAL_LINES[idx]
        rnd = random.Random(r)
        pos = rnd.randrange(len(line) + 1)
        if how == "cut":
            line = line[:pos]
        elif how == "swap":
            line = line[pos:] + line[:pos]
        elif how == "nul":
            line = line[:pos] + b"\x00" + line[pos:]
        elif how == "bytes":
            line = line[:pos] + bytes(rnd.randrange(256) for _ in range(5)) + line[pos:]
        elif how == "cr":
            line = line[:pos] + b"\r" + line[pos:]
        elif how == "dup":
            line = line + line
        elif how == "join":
            line = line + REAL_LINES[(idx + 1) % len(REAL_LINES)]
        out.append(line)
    data = b"\n".join(out)
    events, _ = parse_all(data, 97)
    assert_accounted(data, events)


def test_chunking_does_not_change_events() -> None:
    data = b"\n".join(REAL_LINES[:2000])
    ref, _ = parse_all(data, len(data) + 1)
    for chunk in (1, 7, 4093):
        got, _ = parse_all(data, chunk)
        assert got == ref


def test_crlf_nul_ansi_and_invalid_utf8() -> None:
    data = (b"[2025-03-08 12:29:13 TP3] Load weight begin. avail mem=21.63 GB\r\n"
            b"\x1b[32m[2025-03-08 12:29:14 TP2]\x1b[0m Load weight begin. avail mem=21.62 GB\r\n"
            b"[2025-03-08 12:29:15 TP1] Load weight\x00 begin. avail mem=21.61 GB\n"
            b"[2025-03-08 12:29:16 TP0] Load weight begin. avail mem=21.\xff\xfe60 GB\n")
    events, run = parse_all(data)
    kinds = [(e.kind, e.rank) for e in events]
    assert kinds[:3] == [("load_weight_begin", "TP3"), ("load_weight_begin", "TP2"), ("load_weight_begin", "TP1")]
    assert [e.fields.get("avail_gib") for e in events[:3]] == [21.63, 21.62, 21.61]
    assert events[3].kind == "other" and events[3].rank == "TP0"  # mangled number: kept, not guessed
    assert run.summary().coverage.decode_errors == 1


def test_huge_line_is_cut_with_a_warning() -> None:
    parser = IncrementalParser("big.log", max_line_bytes=1000)
    data = b"[2025-03-08 12:29:13 TP3] Load weight begin. avail mem=21.63 GB\n" + b"x" * 5000 + b"\nlast line\n"
    events = []
    for i in range(0, len(data), 333):
        events += parser.feed(data[i:i + 333])
    events += parser.close()
    assert [e.line for e in events] == [1, 2, 3]
    assert parser.stats.long_lines == 1 and "line 2" in parser.stats.warnings[0]
    assert len(events[1].text) == 1000


def test_truncated_first_and_last_lines() -> None:
    data = b"26-05-28 00:11:09 TP0] Load weight begin. avail mem=21.63 GB\n[2025-03-08 12:29:13 TP3] Load wei"
    events, run = parse_all(data)
    assert len(events) == 2 and run.summary().coverage.unterminated_last_line


def _grammar_inputs(monkeypatch) -> list[str]:  # type: ignore[no-untyped-def]
    """Record every text the classifier hands to the (real) grammar."""
    from logforensics.read import fastpath

    seen: list[str] = []
    real = fastpath.plan_record

    def counting(text: str):  # type: ignore[no-untyped-def]
        seen.append(text)
        return real(text)

    monkeypatch.setattr(fastpath, "plan_record", counting)
    return seen


def test_undecodable_lines_of_a_binary_stream_are_other_without_the_grammar(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen = _grammar_inputs(monkeypatch)
    data = random.Random(11).randbytes(200_000)
    parser = IncrementalParser("noise.bin")
    events = parser.feed(data) + parser.close()
    lines = data.split(b"\n")
    assert len(events) >= len(lines)  # nothing is lost: every line is an event
    bad = [i for i, raw in enumerate(lines, 1) if "\ufffd" in raw.decode("utf-8", "replace")]
    assert len(bad) > len(lines) // 2
    kinds = {ev.line: ev.kind for ev in events}
    assert all(kinds[i] == "other" for i in bad)
    assert not any("\ufffd" in text for text in seen)  # none of them reached the grammar
    assert parser.classifier.decode_errors == len(bad)


def test_an_undecodable_line_of_a_text_log_still_goes_to_the_grammar(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen = _grammar_inputs(monkeypatch)
    line = b"[2026-02-27 12:00:01 TP3] Load weight end. \xff\xfe"
    parser = IncrementalParser("text.log")
    events = parser.feed(b"[2026-02-27 12:00:00 TP3] Init torch distributed begin.\n" + line + b"\n")
    events += parser.close()
    assert not parser.classifier.binary
    assert any("\ufffd" in text for text in seen)
    ev = [e for e in events if e.line == 2][0]
    assert ev.rank is not None and ev.ts is not None  # the prefix the grammar reads is kept
