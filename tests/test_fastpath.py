"""The memoised fast path gives exactly the grammar's events, line for line.

``LineClassifier`` parses the first line of each digit-masked shape with the grammar and
replays the stored plan on later lines of that shape. That is only sound while the
grammar never tells one digit from another, so every check here compares the memoised
classifier with a grammar-only one (``memo_limit=0``) on the same lines: the real
fixtures, and a synthetic log built from every template sample in ``grammars/samples``
with randomised digits and the wrappers real logs carry. A second pass over the same
lines must hit the memo and still agree. The incremental parser must not depend on how
the bytes are chunked either.
"""

from __future__ import annotations

import math
import random
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from accel import accelerated
from grammar_samples import CASES, Case

from logforensics.events import Event
from logforensics.model.clock import seconds
from logforensics.read import bulk
from logforensics.read.fastpath import LineClassifier
from logforensics.read.grammar import plan_record
from logforensics.read.parser import IncrementalParser
from logforensics.read.plan import build_event
from logforensics.read.requests import FIELDS as REQUEST_FIELDS

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = (sorted((ROOT / "fixtures" / "real").glob("*.log")) + sorted((ROOT / "fixtures" / "diff").glob("*/*.log"))
            + sorted((ROOT / "fixtures" / "real-dynamo").glob("*.log"))
            + sorted((ROOT / "fixtures" / "real-unseen").glob("*.log")))

#: Text that other programs put before every line (see segments.py), and none.
WRAPPERS = ("", "sglang-1  | ", "2026-06-17T16:25:18.5969653Z ", "> ", "(SGLangWorker pid=38138) ",
            "[2025-11-06T02:09:46.230Z] ", "  ")
BAR = "Capturing batches (bs=64 avail_mem=11.08 GB):  25%|██▌       | 1/4 [00:01<00:03,  1.02it/s]"


def _randomise(text: str, rng: random.Random) -> str:
    return re.sub(r"\d", lambda _: str(rng.randrange(10)), text)


def synthetic_log(seed: int = 20250301, copies: int = 4) -> bytes:
    """Every template sample, several times with other digits and wrappers, shuffled;
    plus the layouts that put several records on one line (redraws, glued records)."""
    rng = random.Random(seed)
    lines: list[str] = []
    for i, case in enumerate(CASES):
        wrapper = WRAPPERS[i % len(WRAPPERS)]
        for k in range(copies):  # half bare, half behind this case's wrapper
            lines.append((wrapper if k % 2 else "") + _randomise(case.text, rng))
        lines.append(case.text)  # the exact sample again: same shape, same digits
    prefixed = [c.text for c in CASES if c.text.startswith("[20")]
    for _ in range(len(CASES) // 4):
        record = _randomise(rng.choice(prefixed), rng)
        bar = _randomise(BAR, rng)
        lines.append(bar + "\r" + _randomise(BAR, rng) + "\r" + record)  # tqdm redraws, then a record
        lines.append(bar + record)  # a record glued to a bar
        lines.append(record + _randomise(rng.choice(prefixed), rng))  # a second rank's write torn into a line
    rng.shuffle(lines)
    return "\n".join(lines).encode("utf-8") + b"\n"


#: Digits masked as the classifier masks them (a line's shape).
_MASK = bytes.maketrans(b"123456789", b"000000000")

SOURCES = [pytest.param(p.read_bytes(), str(p.relative_to(ROOT)), id=p.name[:3] if p.parent.name == "real" else p.name)
           for p in FIXTURES]
SOURCES.append(pytest.param(synthetic_log(), "synthetic.log", id="synthetic"))


def _classify_all(classifier: LineClassifier, lines: list[bytes]) -> list[list[Event]]:
    return [classifier.classify(raw, i) for i, raw in enumerate(lines, 1)]


@pytest.mark.parametrize("data,name", SOURCES)
def test_fast_path_equals_grammar(data: bytes, name: str) -> None:
    lines = data.split(b"\n")
    grammar = LineClassifier(name, memo_limit=0)
    memo = LineClassifier(name)
    want = _classify_all(grammar, lines)
    first = _classify_all(memo, lines)
    calls = memo.grammar_calls
    # the ranks that processes behind a wrapper named are the reading of one file, not the
    # memo: a second file read with the memo (``share_memo``) starts without them
    memo.proc_ranks.clear()
    second = _classify_all(memo, lines)
    assert not grammar.memo
    for i, (w, a, b) in enumerate(zip(want, first, second), 1):
        assert a == w, f"line {i}, first pass: {lines[i - 1][:200]!r}"
        assert b == w, f"line {i}, memoised pass: {lines[i - 1][:200]!r}"
    if memo.memo:  # the second pass really replayed stored plans
        assert memo.grammar_calls - calls < calls


def test_lines_in_colour_are_planned_once_per_shape_of_their_clean_text() -> None:
    """Lines in colour (``docker compose`` on a terminal) ask the grammar no more often than
    the same lines without colour (once per shape of the clean text, not once per line), and
    give the grammar's events."""
    lines = _generated("gen_serving_log.py").split(b"\n")[:3000]
    plain = [b"sglang-1  | " + raw for raw in lines]
    colour = [b"\x1b[36msglang-1  |\x1b[0m " + raw for raw in lines]
    grammar = LineClassifier("c.log", memo_limit=0)
    memo, without = LineClassifier("c.log"), LineClassifier("c.log")
    want = _classify_all(grammar, colour)
    assert _classify_all(memo, colour) == want
    _classify_all(without, plain)
    assert memo.grammar_calls == without.grammar_calls < len(lines) // 10
    assert [ev.text for evs in want for ev in evs][:50] == [ev.text for evs in _classify_all(without, plain)
                                                           for ev in evs][:50]


def test_only_colour_before_the_record_gives_the_scanner_a_shape() -> None:
    """A line whose colour is all in a wrapper before its record gives the bulk scanner its
    raw shape, with the record's offset; colour inside the record gives none (the record's
    bytes are not its clean text's). Both give the grammar's events."""
    record = (b"[2026-03-02 15:41:25 TP0] Decode batch, #running-req: 16, #token: 8192, token usage: 0.06, "
              b"cuda graph: True, gen throughput (token/s): 1000.0, #queue-req: 0")
    before = b"\x1b[36msglang-1  |\x1b[0m " + record
    inside = b"sglang-1  | " + record.replace(b"Decode batch", b"\x1b[31mDecode batch\x1b[0m")
    for raw, wrapped in ((before, [(len(before) - len(record), "decode_batch")]), (inside, [])):
        memo, grammar = LineClassifier("c.log"), LineClassifier("c.log", memo_limit=0)
        assert memo.classify(raw, 1) == grammar.classify(raw, 1)
        shape = raw.translate(_MASK)
        assert [(offset, plan.kind) for key, plan, offset in memo.plans_since((0, 0))[0] if key == shape] == wrapped


def test_synthetic_log_exercises_the_memo() -> None:
    """Most synthetic lines repeat a shape with other digits: the memo must serve them."""
    lines = synthetic_log().split(b"\n")
    grammar = LineClassifier("synthetic.log", memo_limit=0)
    memo = LineClassifier("synthetic.log")
    _classify_all(grammar, lines)
    _classify_all(memo, lines)
    assert len(memo.memo) > len(CASES) // 2
    assert memo.grammar_calls < grammar.grammar_calls * 2 // 3


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c.kind}" for i, c in enumerate(CASES)])
def test_grammar_is_digit_blind(case: Case) -> None:
    """Other digits, same meaning: kind, rank/stamp presence and field names."""
    text = case.text
    plan = plan_record(text)
    want = build_event(plan, text, 1, None)
    if not plan.memo_ok:  # a key with digits in its name ("c4_size"), or a request record's payload
        # (its figures at offsets its text decides): never memoised, so exempt
        assert any(ch.isdigit() for name in want.fields for ch in name) or want.kind in REQUEST_FIELDS
        return
    rng = random.Random(text)
    for _ in range(3):
        other = _randomise(text, rng)
        got = build_event(plan_record(other), other, 1, None)
        assert (got.kind, got.rank is None, got.ts is None) == (want.kind, want.rank is None, want.ts is None), other
        assert list(got.fields) == list(want.fields), other


def _parse_in_chunks(data: bytes, name: str, size: int) -> list[Event]:
    parser = IncrementalParser(name)
    out: list[Event] = []
    for start in range(0, len(data), size):
        out.extend(parser.feed(data[start:start + size]))
    out.extend(parser.close())
    return out


@pytest.mark.parametrize("data,name", SOURCES)
def test_chunking_does_not_change_events(data: bytes, name: str) -> None:
    whole = _parse_in_chunks(data, name, max(len(data), 1))
    assert whole
    for size in (1, 7, 4096):
        assert _parse_in_chunks(data, name, size) == whole, f"chunks of {size} bytes"


def test_unterminated_last_line_is_parsed_whatever_the_chunking() -> None:
    data = synthetic_log(copies=1).rstrip(b"\n")
    whole = _parse_in_chunks(data, "tail.log", len(data))
    last = data.count(b"\n") + 1
    assert any(e.line <= last <= (e.end_line or e.line) for e in whole)
    for size in (1, 7, 4096):
        assert _parse_in_chunks(data, "tail.log", size) == whole


# -- the compiled bulk path: the scanner's columns equal the grammar's values, line by line --
_ALL_SLOTS = {
    "decode_batch": {"gen_throughput_tok_s": 0, "accept_len": 1, "running_req": 2, "token_usage": 3,
                     "queue_req": 4, "cuda_graph": 9, "full_token_usage": 10},
    "prefill_batch": {"input_throughput_tok_s": 5, "new_token": 6, "cached_token": 7, "queue_req": 11},
    "http_access": {"status": 8},
}
#: Slots kept in rows only (the bool converter's among them) and their converters.
_ROW_ONLY = (9, 10, 11)
_FIELD_OF_SLOT = {slot: name for fields in _ALL_SLOTS.values() for name, slot in fields.items()}


def _generated(script: str, *args: str) -> bytes:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--size", "400K", *args, "-o", "-"],
                         check=True, capture_output=True, timeout=120)
    return out.stdout


def _wrapped_serving() -> bytes:
    """The serving generator's log, each line behind ``docker compose``'s wrapper."""
    return b"".join(b"sglang-1  | " + line for line in _generated("gen_serving_log.py", "--all-ranks").splitlines(True))


BULK_SOURCES = [*SOURCES,
                pytest.param(("gen_sglang_log.py", "--seed", "5", "--torn-rate", "0.02"), "gen1.log", id="gen-shared"),
                pytest.param(("gen_serving_log.py", "--all-ranks"), "gen2.log", id="gen-serving"),
                pytest.param(_wrapped_serving, "gen3.log", id="gen-serving-wrapped")]


@accelerated
@pytest.mark.parametrize("data,name", BULK_SOURCES)
def test_bulk_columns_equal_grammar(data: bytes | tuple[str, ...] | Callable[[], bytes], name: str) -> None:
    """Every line the scanner takes gives the grammar's kind, rank, stamp, text and values.

    Every kind is declared bulk here (class 1) and every rank ready, so the scanner takes
    every line whose plan it can apply; each taken line is compared with a grammar-only
    classifier's event, value types included. Class 1 is also a row class: each taken
    line's row holds its line, rank, the stamp as ``serving.seconds`` reads it and each
    value as a float (the bool converter's as 1.0 / 0.0), NaN where the record lacks it.
    """
    if isinstance(data, tuple):
        data = _generated(*data)
    elif callable(data):
        data = data()
    lines = data.split(b"\n")
    grammar = LineClassifier(name, memo_limit=0)
    memo = LineClassifier(name)
    _classify_all(memo, lines)  # learn the shapes
    scanner = bulk.BulkScanner(memo, lambda plan: 1, _ALL_SLOTS, ordered=(0,), rows=(1,), row_only=_ROW_ONLY)
    scanner.learn()
    scanner.set_ready(b"\x01" * 2048)
    taken = 0
    nslots = 1 + max(_FIELD_OF_SLOT)
    for i, raw in enumerate(lines, 1):
        buf = raw + b"\n"
        seg = scanner.scan(buf, 0)
        if not seg[1]:
            seg = scanner.scan(buf, 0)  # a rank seen for the first time stops the scan once
        if not seg[1]:
            continue
        taken += 1
        (want,) = grammar.classify(raw, i)
        stop, n, counts, lasts, values, ordered, _ = seg
        assert (stop, n) == (len(buf), 1)
        ((code, count),) = counts
        ((cls, rid, idx, start, end, plan),) = lasts
        text, ts = scanner.stamp(buf, start, end, plan)
        got = (scanner.kinds[code], scanner.rank_names[rid], ts, text)
        assert got == (want.kind, want.rank, want.ts, want.text), f"line {i}: {raw[:200]!r}"
        got_values = {_FIELD_OF_SLOT[slot]: list(bulk.numbers(ints, doubles)) for slot, _, ints, doubles in values}
        want_values = {name: [want.fields[name]] for name, slot in _ALL_SLOTS.get(want.kind, {}).items()
                       if want.fields.get(name) is not None and slot not in _ROW_ONLY}
        assert got_values == want_values, f"line {i}: {raw[:200]!r}"
        assert [type(v) for (v,) in got_values.values()] == [type(v) for (v,) in want_values.values()]
        for slot, xs, ints, doubles in ordered:
            ys = list(bulk.numbers(ints, doubles))
            assert (xs, ys) == ([want.ts], [want.fields[_FIELD_OF_SLOT[slot]]])
            assert type(ys[0]) is type(want.fields[_FIELD_OF_SLOT[slot]])
        rows = scanner.rows(seg, buf, i)
        assert rows is not None and rows.n == 1
        assert (rows.line(0), rows.rank(0), rows.stamp(0)) == (i, want.rank, (want.text, want.ts))
        assert rows.raw[7] == struct.pack("d", seconds(want.ts)), f"line {i}: {want.ts!r}"
        assert rows.dated(0) == (want.ts[4:5] == "-")
        row = struct.unpack(f"{nslots}d", rows.raw[10])
        fields = {slot: field for field, slot in _ALL_SLOTS.get(want.kind, {}).items()}
        for slot in range(nslots):
            field = fields.get(slot)
            value = None if field is None else want.fields.get(field)
            if value is None:
                assert math.isnan(row[slot]), f"line {i}: {field}"
            else:
                assert row[slot] == float(value), f"line {i}: {field}"
    # a plan the scanner learned is used, where a line of its own shape is there (a line in
    # colour also teaches the shape of its clean text, which no line has as it is)
    learned = set(map(id, scanner.plans))
    shapes = {key for key, plan, _ in memo.plans_since((0, 0))[0] if id(plan) in learned}
    if any(raw.translate(_MASK) in shapes for raw in lines):
        assert taken > 0
    if name.startswith("gen"):
        assert taken > len(lines) * 0.5
