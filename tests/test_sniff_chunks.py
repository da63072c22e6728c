"""Whether a stream is text at all is judged from its first ``SNIFF_BYTES``, however the
bytes are cut into chunks: ``watch``'s small chunks, a batch's large blocks, the event path
and the bulk path read undecodable lines alike (one pipeline)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from test_bulk import _as_json
from test_fastpath import FIXTURES, ROOT

from logforensics.ingest.live import LiveRun
from logforensics.ingest.runset import probe_node
from logforensics.read.segments import SNIFF_BYTES, looks_binary

RECORD = (b"[2025-01-01 00:00:00 TP0] Decode batch. #running-req: 1, #token: 5, token usage: 0.01, "
          b"gen throughput (token/s): 1.0, #queue-req: 0")


def _text(rng: random.Random, size: int) -> bytes:
    """Lines of real logs, with records that hold a byte that is not UTF-8 among them: read as
    records in a text stream, as unrecognised noise in one that is not."""
    logs = [p.read_bytes() for p in FIXTURES if p.parent.name == "real"][:20]
    out = bytearray()
    while len(out) < size:
        text = rng.choice(logs)
        a = text.find(b"\n", rng.randrange(len(text))) + 1
        out += text[a:a + rng.randrange(2000)]
        out += RECORD + b" \xff\xfe\n"
    return bytes(out)


def _cases() -> dict[str, bytes]:
    rng = random.Random(4)
    half = SNIFF_BYTES // 2
    noise = rng.randbytes(SNIFF_BYTES // 2 + 2000).replace(b"\n", b"\n\n")
    return {
        # text in the first half of the sniff, random bytes in the second: text by 32 KiB, not by 64
        "text-then-bytes": _text(rng, half - 1000)[: half - 1000] + b"\n" + noise + _text(rng, 200000),
        # NUL bytes (1.5% of half the sniff, 0.75% of all of it), then text with bad bytes: the reverse
        "nul-then-text": b"\x00" * (half * 3 // 200) + b"\n" + _text(rng, 200000),
        # a stream shorter than the sniff: judged on all of it, at its end
        "short": rng.randbytes(3000) + b"\n" + _text(rng, 20000)[:20000],
    }


CASES = _cases()
SIZES = (997, 4096, 32 << 10, 40000, SNIFF_BYTES - 1, SNIFF_BYTES, SNIFF_BYTES + 1, 1 << 20)


def _read(data: bytes, size: int, bulk: bool) -> str:
    run = LiveRun("sniff.log")
    for start in range(0, len(data), size):
        chunk = data[start:start + size]
        if bulk:
            run.feed_bulk(chunk)
        else:
            run.feed(chunk)
    run.close()
    return _as_json(run.summary(), run)


def test_the_cases_are_judged_apart_by_a_half_and_the_whole_sniff() -> None:
    for name in ("text-then-bytes", "nul-then-text"):
        data = CASES[name]
        assert looks_binary(data[: SNIFF_BYTES // 2]) != looks_binary(data[:SNIFF_BYTES]), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_verdict_on_text_does_not_depend_on_the_chunks(name: str) -> None:
    data = CASES[name]
    want = _read(data, 1 << 20, bulk=False)
    for size in SIZES:
        assert _read(data, size, bulk=False) == want, f"fed in chunks of {size} bytes"
        assert _read(data, size, bulk=True) == want, f"fed in bulk, in blocks of {size} bytes"


def test_random_bytes_are_read_before_the_whole_sniff_has_come() -> None:
    """Counts that decide the verdict end the wait: a live stream of random bytes is read as
    it comes, with the result of reading it at once."""
    data = random.Random(9).randbytes(SNIFF_BYTES)
    run = LiveRun("sniff.log")
    fed = 0
    first_events_at = None
    for start in range(0, len(data), 997):
        fed += len(data[start:start + 997])
        if run.feed(data[start:start + 997]) and first_events_at is None:
            first_events_at = fed
    run.close()
    assert first_events_at is not None and first_events_at < SNIFF_BYTES // 4
    assert _as_json(run.summary(), run) == _read(data, 1 << 20, bulk=False)


def test_the_head_of_a_short_file_is_probed_to_its_end(tmp_path: Path) -> None:
    """A file shorter than the sniff with a byte that is not UTF-8 early: its node is still
    read from its server arguments (the parser holds those lines until the file ends)."""
    head = (ROOT / "fixtures" / "multinode" / "tp8_two_nodes" / "baseline" / "node1.log").read_bytes()[:20000]
    plain = tmp_path / "plain.log"
    plain.write_bytes(head)
    stray = tmp_path / "stray.log"
    stray.write_bytes(b"caf\xe9 a stray byte\n" + head)
    assert probe_node(str(plain)) is not None
    assert probe_node(str(stray)) == probe_node(str(plain))


@pytest.mark.parametrize("bulk", [False, True])
def test_a_pause_reads_the_bytes_that_wait_judged_on_what_came(bulk: bool) -> None:
    """A stream that pauses before its first SNIFF_BYTES while bytes wait for the verdict
    (``settle``, as ``watch`` asks) is read on; when nothing more comes, the run is the one
    of reading it whole."""
    data = _text(random.Random(7), 20000)[:20000]
    assert b"\xff" in data[:SNIFF_BYTES]
    run = LiveRun("sniff.log")
    events = []
    for start in range(0, len(data), 4096):
        if bulk:
            run.feed_bulk(data[start:start + 4096])
        else:
            events += run.feed(data[start:start + 4096])
    before = len(events)
    events += run.settle()
    assert bulk or len(events) > before, "the bytes from the first undecodable one waited, then were read"
    assert run.settle() == []  # judged once
    run.close()
    assert _as_json(run.summary(), run) == _read(data, 1 << 20, bulk=False)
