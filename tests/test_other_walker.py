"""Runs of unrecognised lines read in C (``read/other.py``, ``native/other.c``) give exactly
the run model of the event path.

The walker's parts against Python's own (UTF-8 decoding with replacement, the coverage
shape), every line it takes against the classifier (one ``other`` event of the whole
line, no rank, nothing an observer reads), and whole logs mixing serving records with
unknown text, random bytes, carriage returns, colour codes, bad UTF-8, over-long lines,
tracebacks and more shapes than the model keeps, read both ways.
"""

from __future__ import annotations

import functools
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from accel import accelerated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bulk import _as_json, _bulk_path, _events_path
from test_fastpath import FIXTURES, synthetic_log

from logforensics import native
from logforensics.ingest.live import LiveRun
from logforensics.model import coverage
from logforensics.model.pd import OTHER_NEEDS, PDObserver
from logforensics.read import other
from logforensics.read.fastpath import LineClassifier
from logforensics.read.segments import CLEAN_NEEDS, needs_clean

compiled = accelerated
ROOT = Path(__file__).resolve().parent.parent
WORDS = ["alpha", "beta", "gamma", "x", "0x1f", "12", "café", "naïve", "a-b", "key:", "[", "]", "(", ")",
         "|", "::", "pid=", "it/s]", "Error", "File \"x.py\", line 3", "^M", "^[[0m", "\x1b[31m", "\t",
         "\u0663\u0664", "\uff11", "\u00a0", "\r", "sglang.", "[Router (Rust)]", "failed for request"]


def _walker() -> other.OtherWalker:
    return other.OtherWalker(OTHER_NEEDS, coverage.MAX_UNKNOWN_SHAPES, coverage.OVERFLOW_KEY)


def test_the_walker_is_built_where_the_accelerator_is() -> None:
    from logforensics import native

    if native.available():
        assert _walker().walker is not None, "the grammar's free text is of the form the walker judges"


@compiled
@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_decoding_is_pythons(data: bytes) -> None:
    assert native.lib is not None
    text, bad, utf8 = native.lib.decode(data)
    assert text == data.decode("utf-8", "replace")
    assert utf8 == text.encode()
    try:
        data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert bad is not valid


@compiled
def test_decoding_is_pythons_on_every_short_sequence() -> None:
    assert native.lib is not None
    rng = random.Random(5)
    tails = [b"", b"a", b"\x80", b"\xbf", b"\xc0", b"\xe0\xa0", b"\xf0\x90\x80"]
    for a in range(0x80, 0x100):
        for b in range(0x100):
            # alone, and at every place around the decoder's words of 8 bytes
            pad = b"\xe9" * rng.randrange(72) if rng.random() < 0.5 else b"x" * rng.randrange(72)
            for data in (bytes([a, b]) + rng.choice(tails), pad + bytes([a, b]) + rng.choice(tails) + b"x" * 7):
                text = data.decode("utf-8", "replace")
                assert native.lib.decode(data)[::2] == (text, text.encode()), data
    for _ in range(20000):
        data = bytes(rng.choice(range(0x80, 0x100)) if rng.random() < 0.8 else rng.randrange(0x80)
                     for _ in range(rng.randrange(1, 160)))
        text = data.decode("utf-8", "replace")
        assert native.lib.decode(data)[::2] == (text, text.encode()), data


SHAPE_TEXT = st.text(alphabet=st.sampled_from(list("0123456789abcdefxXABF N-:.\t\x0b\x1c\x1f\x85\xa0")
                                              + ["\u0660", "\u0969", "\uff10", "\u2003", "\u3000", "\ufffd", "é"])
                     | st.characters().filter(lambda c: not "\ud800" <= c <= "\udfff"), max_size=400)  # decoded bytes: no surrogates


@compiled
@settings(max_examples=500, deadline=None)
@given(SHAPE_TEXT)
def test_shapes_are_the_coverage_shapes(text: str) -> None:
    assert native.lib is not None
    assert native.lib.shape(text) == coverage.shape(text)


SHAPE_MAX = 160  # coverage.shape keeps so many characters
#: Pieces of undecodable lines: every kind of invalid sequence (lone continuation bytes,
#: overlong forms, surrogates, beyond U+10FFFF, C0/C1/F5-FF, sequences cut short), valid
#: characters of every length, spaces and digits of Python's kinds, hex ids.
BYTE_PIECES = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xf0\x8f\xbf\xbf",
               b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xfe",
               b"\xc2", b"\xe1\x80", b"\xf1\x80\x80", b"\xf0\x90", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80",
               b"\xef\xbf\xbd", b"\xc2\x85", b"\xc2\xa0", b"\xe3\x80\x80", b"\xe2\x80\x83", b"\xd9\xa3", b"\xef\xbc\x91",
               b" ", b"\t", b"\x0b", b"\x1c", b"\x1f", b"\r", b"0", b"7", b"12", b"0x", b"0x1f", b"x", b"a", b"F",
               b"word", b"-", b":"]
LINE_BYTES = st.one_of(st.lists(st.sampled_from(BYTE_PIECES), max_size=80).map(b"".join),
                       st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"")))


@compiled
@settings(max_examples=800, deadline=None)
@given(LINE_BYTES, st.integers(min_value=1, max_value=SHAPE_MAX))
def test_shapes_of_bytes_are_the_coverage_shapes_of_their_text(data: bytes, limit: int) -> None:
    """Decoded and masked in one pass, stopped after any number of characters and then
    written on: the shape of the text Python decodes, and whether it had to replace bytes."""
    assert native.lib is not None and native.lib.SHAPE_MAX == SHAPE_MAX
    prefix, complete, whole, bad = native.lib.shape_prefix(data, limit)
    text = data.decode("utf-8", "replace")
    assert whole == coverage.shape(text)
    assert prefix == whole[:limit]
    assert complete if limit == SHAPE_MAX else (prefix == whole if complete else len(prefix) == limit)
    try:
        data.decode("utf-8")
        assert not bad
    except UnicodeDecodeError:
        assert bad


#: Lines of ASCII (read a byte a character, eight at a time between digits): words, runs of
#: digits, "0x" ids and near misses, every space Python strips, at any place about eight bytes.
ASCII_LINE = st.lists(st.sampled_from(["word", "abcdefgh", "x", "0x", "0x1f", "00xab", "0xg", "7", "9", "0", "5", "123456789",
                                       " ", "  ", "\t", "\x0b", "\x1c", "\x1f", "\x0c", "-", ":", "X", "zz0"]),
                      max_size=60).map("".join)


@compiled
@settings(max_examples=800, deadline=None)
@given(ASCII_LINE, st.integers(min_value=1, max_value=SHAPE_MAX))
def test_shapes_of_ascii_lines_are_the_coverage_shapes(text: str, limit: int) -> None:
    assert native.lib is not None
    prefix, complete, whole, bad = native.lib.shape_prefix(text.encode("ascii"), limit)
    assert whole == coverage.shape(text) == native.lib.shape(text)
    assert prefix == whole[:limit]
    assert complete if limit == SHAPE_MAX else (prefix == whole if complete else len(prefix) == limit)
    assert not bad


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS + ["m", "[1m", "[31;1m", "^[", "\x00", "x"]), max_size=10).map("".join))
def test_the_cleaner_needs_one_of_its_texts(text: str) -> None:
    if needs_clean(text):
        assert any(t in text for t in CLEAN_NEEDS)


@functools.cache
def _needle_walker() -> tuple[Any, list[tuple[bytes, int]]]:
    """The walker whose needle test is asked, and the needles (masked text, modes as a number) it
    is built from."""
    assert native.lib is not None
    req = other.requirements(tuple(sorted(set(OTHER_NEEDS))))
    assert req is not None
    refuse, needles = req
    return native.lib.Walker(refuse, list(needles), other.LIMIT), [(text, int.from_bytes(modes, sys.byteorder)) for text, modes in needles]


def _has_needle(line: bytes, mode: int, needles: list[tuple[bytes, int]]) -> bool:
    """What the needle test means: a needle of the mode in the line, digits masked on both sides
    (the mode of undecodable lines, 128: or the bytes of a U+FFFD, which the classifier reads)."""
    masked = line.translate(other._MASK)
    if mode == 128 and "\ufffd".encode() in line:
        return True
    return any(modes >> mode & 1 and text in masked for text, modes in needles)


@compiled
def test_the_needle_filter_misses_no_needle() -> None:
    """Every needle, its digits any digits, at every place in lines of many lengths, also where
    the buffer ends with the line: the walker's answer is the definition's."""
    walker, needles = _needle_walker()
    rng = random.Random(7)
    letters = b"abcdefghijklmnopqrstuvwxyz      ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:-_/=|[]()"
    for text, modes in needles:
        mode_list = [m for m in range(129) if modes >> m & 1]
        for length in (len(text), len(text) + 1, 15, 16, 17, 29, 30, 31, 32, 33, 47, 63, 64, 65, 70):
            if length < len(text):
                continue
            for at in sorted({0, 1, 2, 13, 14, 15, 16, 17, 29, 30, 31, 32, 33, length - len(text)}):
                if at > length - len(text):
                    continue
                real = bytes(rng.choice(b"123456789") if c == ord("0") else c for c in text)
                body = bytes(rng.choice(letters) for _ in range(length))
                line = body[:at] + real + body[at + len(text):]
                for mode in rng.sample(mode_list, min(3, len(mode_list))):
                    want = _has_needle(line, mode, needles)
                    assert want, (text, line)
                    for tail in (b"", b"\n", b"\nmore text after the line"):
                        assert walker.needle(line + tail, mode) is True, (text, line, mode, tail)


@compiled
def test_needles_of_one_byte_are_found() -> None:
    """Needles of one byte go through a table of their bytes: each is found at every place, in a
    mode it is a needle of, and so is one beyond ASCII (which text in UTF-8 never gives)."""
    assert native.lib is not None
    refuse, needles = other.requirements(tuple(sorted(set(OTHER_NEEDS))))
    extra = [*needles, (b"\xe9", bytes([0xFF] * 24))]  # the last: a needle of every mode
    walker = native.lib.Walker(refuse, extra, other.LIMIT)
    listed = [(text, int.from_bytes(modes, sys.byteorder)) for text, modes in extra]
    singles = [(text, modes) for text, modes in listed if len(text) == 1]
    assert b":" in dict(singles) and b"\xe9" in dict(singles)
    body = b"qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"
    for byte, modes in singles:
        mode = next(m for m in range(129) if modes >> m & 1 and not (m < 128 and refuse[m]))
        assert not _has_needle(body, mode, listed)
        for at in (0, 1, 15, 16, 17, 30, 31, 32, 33, 47, 48, len(body) - 1):
            line = body[:at] + byte + body[at + 1:]
            for tail in (b"", b"\n", b"\n" + b"q" * 64):
                assert walker.needle(line + tail, mode) is True, (byte, mode, at, tail)
                assert walker.needle(body + tail, mode) is False, (mode, tail)


@compiled
@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"s", b"i", b"t", b" ", b"/", b"]", b"0", b"7", b"x", b"g", b"l", b"E",
                                 b"r", b".", b"p", b"d", b"=", b"[", b"-", b":", b"^", b"M", b"|", b"f",
                                 b"sglang", b"it/s", b"pid", b"Err", b"File", b" is ", b"failed"]),
                max_size=40).map(b"".join),
       st.integers(0, 127), st.sampled_from([b"", b"\n", b"\n" + b"z" * 40, b"\n" + b"z" * 70]))
def test_the_needle_filter_answers_as_the_search(line: bytes, mode: int, tail: bytes) -> None:
    walker, needles = _needle_walker()
    refused = other.requirements(tuple(sorted(set(OTHER_NEEDS))))[0][mode]  # a mode of no needles: always
    want = True if refused else _has_needle(line, mode, needles)
    assert walker.needle(line + tail, mode) is want


@compiled
@settings(max_examples=1500, deadline=None)
@given(st.lists(st.one_of(st.binary(min_size=1, max_size=20).map(lambda b: b.replace(b"\n", b"")),
                          st.sampled_from([b"\xef\xbf\xbd", b"\xef\xbf", b"\xef", b".rs:", b".rs", b"[Router (",
                                           b"[Router", b"failed for request", b"failed for", b"Some requests",
                                           b"Some requests timed out when bootstrapping"])), max_size=30).map(b"".join),
       st.sampled_from([b"", b"\n", b"\n" + b"\xff" * 40, b"\n" + b"\xff" * 70]))
def test_the_undecodable_lines_filter_answers_as_the_search(line: bytes, tail: bytes) -> None:
    walker, needles = _needle_walker()
    want = _has_needle(line, 128, needles)
    assert walker.needle(line + tail, 128) is want


def _maybe(*texts: str) -> st.SearchStrategy[str]:
    return st.sampled_from(("",) + texts)


#: Router lines (and near misses): each part of _ROUTER_RS's and _ROUTER_PY's forms, or not.
ROUTER_LINES = st.tuples(
    _maybe("[Router (Rust)] ", "[Router ("), _maybe("2025-01-01T00:00:00Z "), _maybe("ERROR ", " - ERROR - "),
    _maybe("smg", "sglang_router_rs"), _maybe("::worker", "::"), _maybe(": "), _maybe("src/a.rs", "a.r"),
    _maybe(":12: "), _maybe("msg", "failed for request"),
).map("".join)


@settings(max_examples=1000, deadline=None)
@given(ROUTER_LINES)
def test_the_pd_observer_reads_no_line_without_its_texts(text: str) -> None:
    """What a reader may count unseen: the PD observer changes nothing for an unrecognised
    line that holds none of ``OTHER_NEEDS``."""
    seen = PDObserver()
    seen.observe_all(LineClassifier("x.log").classify(text.encode(), 1))
    if not any(t in text for t in OTHER_NEEDS):
        assert vars(seen) == vars(PDObserver())


LINES = st.one_of(
    st.lists(st.sampled_from(WORDS + ["foo", "bar", "7", "-", ":"]), min_size=1, max_size=12).map(" ".join).map(
        lambda t: t.encode("utf-8")),
    st.binary(min_size=1, max_size=200).map(lambda b: b.replace(b"\n", b"")),
    st.text(min_size=1, max_size=80).map(lambda t: t.replace("\n", "").encode("utf-8", "surrogatepass")),
    # every kind of invalid sequence, also last in a line (and, fed in small blocks, cut by a block's end)
    st.lists(st.sampled_from(BYTE_PIECES), min_size=1, max_size=40).map(b"".join),
)


@compiled
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LINES, st.booleans())
def test_a_taken_line_is_one_other_event_of_the_whole_line(raw: bytes, binary: bool) -> None:
    raw = raw.replace(b"\n", b"")
    walker = _walker()
    shapes: dict[str, list[object]] = {}
    pos, n, bad, _, entries, _ = walker.walk(raw + b"\n", 0, len(raw) + 1, 1, shapes, binary)
    if not n:
        assert pos == 0
        return
    classifier = LineClassifier("x.log")
    classifier.binary = binary
    events = classifier.classify(raw, 1)
    assert len(events) == 1
    ev = events[0]
    assert (ev.kind, ev.rank, ev.ts, ev.line) == ("other", None, None, 1)
    assert ev.text == raw.decode("utf-8", "replace")
    assert not any(t in ev.text for t in OTHER_NEEDS)
    assert bad == classifier.decode_errors
    assert entries == [(coverage.shape(ev.text), 1, 1, ev.text[:200], False)]


@compiled
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINES | st.just(b""), min_size=1, max_size=12), st.booleans(), st.binary(max_size=40), st.booleans())
def test_texts_are_the_lines_walk_takes_as_their_events_hold_them(lines: list[bytes], binary: bool,
                                                                 tail: bytes, blanks: bool) -> None:
    """``texts`` (the writers of ``parse``) stops where ``walk`` stops, and gives each line
    taken as the exact path's event text, whatever follows the range walked (or, not asked
    to decode them, only where it stopped and how many lines it took); with ``blanks``, empty
    lines between lines taken too, and never an empty line last."""
    lines = [line.replace(b"\n", b"") for line in lines]
    data = b"".join(line + b"\n" for line in lines)
    walker = _walker()
    pos, n, bad, _, _, _ = walker.walk(data + tail, 0, len(data), 1, {}, binary, blanks)
    assert walker.texts(data + tail, 0, len(data), binary, True, blanks) == (
        pos, n, bad, b"".join(line.decode("utf-8", "replace").encode() + b"\n" for line in lines[:n]))
    assert walker.texts(data + tail, 0, len(data), binary, False, blanks) == (pos, n, bad, None)  # lines the caller decodes
    assert not n or lines[n - 1]
    events = LineClassifier("x.log")
    events.binary = binary
    for k, line in enumerate(lines[:n]):
        want = [("other", line.decode("utf-8", "replace"))] if line else [("blank", "")]
        assert [(e.kind, e.text) for e in events.classify(line, k + 1)] == want


def _unknown_text(rng: random.Random, lines: int) -> bytes:
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for _ in range(lines):
        words = ["".join(rng.choice(letters) for _ in range(rng.randrange(1, 10))) for _ in range(rng.randrange(1, 15))]
        if rng.random() < 0.1:
            words.append(str(rng.randrange(10 ** rng.randrange(1, 8))))
        if rng.random() < 0.05:
            words.append(rng.choice(WORDS))
        out.append(" ".join(words))
    return ("\n".join(out) + "\n").encode("utf-8")


def _random_bytes(rng: random.Random, size: int) -> bytes:
    return bytes(rng.randrange(256) for _ in range(size))


@compiled
def test_a_long_walk_lets_other_threads_run() -> None:
    """``walk`` and ``texts`` let the GIL go once a run is long (the reading thread fills the
    next block meanwhile), and take it back for what Python allocates: the shapes and
    examples of new lines are those of a walk that held it (``test_more_shapes_than_kept``).
    A thread that wakes every millisecond counts only while the walk lets the GIL go."""
    import threading

    rng = random.Random(4)
    lines = [" ".join("".join(rng.choice("abcdefghij") for _ in range(6)) for _ in range(6)) for _ in range(1000)]
    data = ("\n".join(lines * 1000) + "\n").encode()  # 42 MB, a million lines
    ticks = [0]
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.001):
            ticks[0] += 1

    walker = _walker()
    thread = threading.Thread(target=tick)
    thread.start()
    try:
        ran = []
        for call in (lambda: walker.walk(data, 0, len(data), 1, {}, False),
                     lambda: walker.texts(data, 0, len(data), False)):
            before = ticks[0]
            got = call()
            ran.append(ticks[0] - before)
            assert got[1] == 1000000
    finally:
        stop.set()
        thread.join()
    assert min(ran) >= 5, ran  # a walk that held the GIL: 0 or 1


def _mixture(seed: int) -> bytes:
    """Serving records and fixtures' lines, with every kind of unrecognised text between."""
    rng = random.Random(seed)
    logs = sorted((ROOT / "fixtures" / "real").glob("*.log"))
    parts = [synthetic_log(seed, copies=1)]
    for _ in range(8):
        text = rng.choice(logs).read_bytes()
        a = rng.randrange(len(text))
        parts.append(text[a:a + rng.randrange(20000)])
        kind = rng.randrange(8)
        if kind == 0:
            parts.append(_unknown_text(rng, rng.randrange(1, 400)))
        elif kind == 1:
            parts.append(_random_bytes(rng, rng.randrange(1, 20000)))
        elif kind == 2:
            parts.append(b"some text\r more text\rand a redraw\n" * rng.randrange(1, 5))
        elif kind == 3:
            parts.append(b"\x1b[31mred words\x1b[0m here\nplain words [32m here\n^[[1mbold^[[0m\n")
        elif kind == 4:
            parts.append("caf\u00e9 na\u00efve words\n".encode() + b"bad \xff\xfe bytes here\n\xef\xbf\xbd literal\n")
        elif kind == 5:
            parts.append(b"over-long " * 110000 + b"\n" + b"long " * 20000 + b"\n")
        elif kind == 6:
            parts.append(b'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\n'
                         b"ValueError: boom\n" + _unknown_text(rng, 30))
        else:
            parts.append(b"\n\n   \n\t\n" + _unknown_text(rng, 5))
    return b"".join(parts)


def _events_in_blocks(data: bytes, name: str, size: int) -> str:
    """The event path fed in blocks of ``size`` (whether the stream looks like text is judged
    from its first ``SNIFF_BYTES`` whatever the blocks: ``test_sniff_chunks``)."""
    run = LiveRun(name)
    for start in range(0, len(data), size):
        run.feed(data[start:start + size])
    run.close()
    return _as_json(run.summary(), run)


def _summaries(data: bytes, name: str, sizes: tuple[int, ...]) -> None:
    for size in sizes:
        want = _events_path(data, name) if size == 32 << 10 else _events_in_blocks(data, name, size)
        got, _ = _bulk_path(data, name, size)
        assert got == want, f"{name}: blocks of {size} bytes"


@compiled
@pytest.mark.parametrize("seed", range(6))
def test_mixtures_read_alike(seed: int) -> None:
    _summaries(_mixture(seed), f"mix{seed}.log", (1 << 20, 32 << 10, 4093))


@compiled
def test_empty_lines_between_unrecognised_lines_do_not_end_a_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty line between lines the walker takes is taken with them (random bytes have
    one every 256 lines or so, and each ended a walk), counted as the ``blank`` event it is on
    the exact path; a walk never ends with one. The summary is the exact path's."""
    rng = random.Random(8)
    lines = []
    for k, line in enumerate(_unknown_text(rng, 3000).split(b"\n")[:-1]):
        lines.append(line)
        lines += [b""] * ((k % 3 == 0) + (k % 7 == 0))
    data = b"\n".join(lines) + b"\n\n\n"
    _summaries(data, "blanks.log", (1 << 20, 32 << 10, 4093))
    walks: list[tuple[int, int]] = []
    walk = other.OtherWalker.walk

    def counted(self: other.OtherWalker, *args: Any) -> Any:
        got = walk(self, *args)
        walks.append((got[1], got[5]))
        return got

    monkeypatch.setattr(other.OtherWalker, "walk", counted)
    _bulk_path(data, "blanks.log", 1 << 20)
    assert sum(b for _, b in walks) > 1000  # of 1,429
    assert len(walks) < 600  # one a needle's line; without the empty lines, 1,400 more


@compiled
def test_more_shapes_than_kept() -> None:
    """Beyond the cap, with shapes added on the exact path between runs: the same shapes,
    counts, overflow bucket and context flag."""
    rng = random.Random(3)
    lines = []
    for i in range(coverage.MAX_UNKNOWN_SHAPES + 3000):
        word = "".join(rng.choice("abcdefghij") for _ in range(8))
        if i % 7 == 0:
            lines.append(f"key: {word}")  # a needle: read on the exact path
        elif i % 11 == 0:
            lines.append("the same words again")
        else:
            lines.append(f"{word} and {word[::-1]} {i}")
    data = ("\n".join(lines) + "\n").encode()
    _summaries(data, "shapes.log", (1 << 20, 8192))
    run = LiveRun("shapes.log")
    run.feed_bulk(data)
    run.close()
    ev = LiveRun("shapes.log")
    ev.feed(data)
    ev.close()
    assert run.model.context_read == ev.model.context_read is not None
    assert coverage.OVERFLOW_KEY in run.model.coverage.unknown_shapes


@compiled
def test_more_undecodable_shapes_than_kept() -> None:
    """Beyond the cap, a line's shape is looked up only when its first characters are those
    of a kept shape: lines of kept shapes (of every length around that prefix, spaces or a
    hex id at its end) still count as theirs, new ones in the overflow bucket."""
    rng = random.Random(7)
    letters = "abcdefghij"

    def word(n: int) -> bytes:
        return "".join(rng.choice(letters) for _ in range(n)).encode()

    kept = [b"\xff" + word(rng.randrange(1, 30)) for _ in range(coverage.MAX_UNKNOWN_SHAPES)]
    edges = [b"\xfe" + b"a" * 10, b"\xfe" + b"b" * 11, b"\xfe" + b"c" * 12, b"\xfe" + b"d" * 10 + b"  x",
             b"\xfe" + b"e" * 9 + b"0x1f", b"\xfe" + b"f" * 9 + b"12 0xab tail", b"\xfe\xc2\xa0" + b"g" * 9 + b"\xe3\x80\x80h"]
    later = []
    for i in range(6000):
        pick = i % 6
        if pick == 0:
            later.append(rng.choice(kept + edges))  # a kept shape
        elif pick == 1:  # a kept shape's first characters, then others: new
            later.append(rng.choice(kept) + b"z" + word(5))
        elif pick == 2:  # an edge with trailing spaces (the same shape) or more after them (new)
            later.append(rng.choice(edges) + rng.choice([b" ", b"   ", b"\t\xc2\x85", b"  y", b" \xe3\x80\x80z"]))
        elif pick == 3:
            later.append(rng.choice(edges).replace(b"1", b"7"))  # digits masked: the same shape
        else:
            later.append(b"\xfd" + word(rng.randrange(1, 40)))  # new from the first characters
    data = _random_bytes(rng, 70000).replace(b"\n", b"") + b"\n" + b"\n".join(edges + kept + later) + b"\n"
    _summaries(data, "bytes.log", (1 << 20, 8192, 997))
    run = LiveRun("bytes.log")
    run.feed_bulk(data)
    run.close()
    shapes = run.model.coverage.unknown_shapes
    assert coverage.OVERFLOW_KEY in shapes
    assert all(shapes[coverage.shape(e.decode("utf-8", "replace"))][0] > 1 for e in edges)


@compiled
def test_a_log_of_unknown_text_is_read_by_the_walker() -> None:
    rng = random.Random(1)
    data = _unknown_text(rng, 3000)
    run = LiveRun("words.log")
    calls = []
    columns_walk = other.OtherWalker.walk

    def counting(self: other.OtherWalker, *args: object) -> object:
        got = columns_walk(self, *args)  # type: ignore[arg-type]
        calls.append(got[1])
        return got

    other.OtherWalker.walk = counting  # type: ignore[method-assign]
    try:
        run.feed_bulk(data)
    finally:
        other.OtherWalker.walk = columns_walk  # type: ignore[method-assign]
    run.close()
    kinds = json.loads(_as_json(run.summary()))["coverage"]["kinds"]
    assert sum(calls) > 0.8 * kinds["other"], (sum(calls), kinds)


@compiled
@pytest.mark.parametrize("path", [p for p in FIXTURES if p.parent.name == "real"][:40], ids=lambda p: p.name[:3])
def test_fixtures_with_random_bytes_inside(path: Path) -> None:
    rng = random.Random(path.name)
    text = path.read_bytes()
    a = rng.randrange(len(text) + 1)
    data = text[:a] + _random_bytes(rng, 5000) + text[a:]
    _summaries(data, path.name, (1 << 20, 997))
    # a stream that does not look like text from its first bytes
    _summaries(_random_bytes(rng, 70000) + text, path.name, (1 << 20,))


@compiled
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(LINES, st.sampled_from([
    b"[2025-01-01 00:00:00 TP0] Decode batch. #running-req: 1, #token: 5, token usage: 0.01, gen throughput (token/s): 1.0, #queue-req: 0",
    b"Traceback (most recent call last):", b'  File "x.py", line 1, in f', b"RuntimeError: x", b"", b"   ",
    b"[2025-01-01 00:00:01] INFO:     127.0.0.1:1 - \"POST /generate HTTP/1.1\" 200 OK"])), max_size=60),
    st.integers(min_value=1, max_value=400), st.booleans())
def test_generated_mixtures_read_alike(lines: list[bytes], size: int, binary_head: bool) -> None:
    data = b"\n".join(line.replace(b"\n", b"") for line in lines) + b"\n"
    if binary_head:
        data = bytes(range(256)) * 8 + b"\n" + data
    assert _bulk_path(data, "gen.log", size)[0] == _events_in_blocks(data, "gen.log", size)
