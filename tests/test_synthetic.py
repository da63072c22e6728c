"""Synthetic fixtures built from real text: the same run read through colours and wrappers."""

from __future__ import annotations

from pathlib import Path

from logforensics import iter_events, summarize_file

FIX = Path(__file__).resolve().parent.parent / "fixtures"
PLAIN = FIX / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
ANSI = FIX / "synthetic" / "ansi-docker-compose-tp4" / "run.log"


def _strip(d: dict) -> dict:
    return _unfiled({k: v for k, v in d.items() if k not in ("coverage", "launch_command", "notices", "memory",
                                                             "exceptions", "last_seen", "ready")})


def _unfiled(x: object) -> object:
    """``x`` without the file names its evidence carries (the two runs are two files)."""
    if isinstance(x, dict):
        return {k: _unfiled(v) for k, v in x.items() if k != "file"}
    if isinstance(x, list):
        return [_unfiled(v) for v in x]
    return x


def test_ansi_coloured_docker_log_reads_like_the_plain_one() -> None:
    plain, coloured = summarize_file(PLAIN), summarize_file(ANSI)
    assert coloured.outcome == "ready" and coloured.ranks == ["TP0", "TP1", "TP2", "TP3"]
    assert _strip(coloured.to_dict()) == _strip(plain.to_dict())
    for rank in plain.ranks:
        a = {k: plain.memory[rank].figure(k) for k in plain.memory[rank].figures()}
        b = {k: coloured.memory[rank].figure(k) for k in coloured.memory[rank].figures()}
        assert a == b
    assert coloured.coverage.lines_unrecognised == plain.coverage.lines_unrecognised


def test_ansi_events_have_no_escape_codes() -> None:
    events = list(iter_events(ANSI))
    assert events and not any("\x1b" in e.text for e in events)
    plain = list(iter_events(PLAIN))
    assert [(e.kind, e.rank, e.line, e.fields) for e in events] == [(e.kind, e.rank, e.line, e.fields) for e in plain]
