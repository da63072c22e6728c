"""``parse --format jsonl`` written in C (``read/emit.py``) is byte for byte the exact path's.

The rows of the lines whose shape has a plain plan are written by the compiled row
writer, every other line by ``event_line`` of the parser's events. Here both are compared
with the exact path (every event through ``event_line``, as with ``LOGFORENSICS_PURE=1``)
on every fixture, on logs of both generators, on lines that are torn, redrawn with ``\\r``,
not ASCII, escaped or garbage, with ``--kind`` and on runs of several files; the number
conversions against ``json.dumps`` of Python's ``int``/``float``; and the share of lines the
C writer takes, so that a path that silently gave every line to the exact path would fail.
"""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from accel import accelerated
from generated import write_logs
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fastpath import FIXTURES, synthetic_log

from logforensics import native
from logforensics.export.jsonl import event_line, write_jsonl
from logforensics.pipeline import iter_events
from logforensics.read import emit
from logforensics.read.fastpath import LineClassifier
from logforensics.read.plan import Plan
from logforensics.read.values import strip_colon, to_bool, to_word

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "logforensics"]
compiled = accelerated
pytestmark = compiled

MORE = sorted(p for p in (ROOT / "fixtures").rglob("*.log") if p not in FIXTURES)


def _exact(path: Path, node: str | None = None, wanted: tuple[str, ...] = ()) -> bytes:
    rows = (event_line(ev) for ev in iter_events(str(path), node=node) if not wanted or ev.kind in wanted)
    return "".join(rows).encode("utf-8")


def _fast(path: Path, node: str | None = None, wanted: tuple[str, ...] = ()) -> tuple[bytes, object]:
    out = io.BytesIO()
    stats = write_jsonl(str(path), out, node=node, wanted=wanted)
    return out.getvalue(), stats


def _same(path: Path, node: str | None = None, wanted: tuple[str, ...] = ()) -> object:
    fast, stats = _fast(path, node, wanted)
    exact = _exact(path, node, wanted)
    if fast != exact:  # the first differing row, to read
        for i, (a, b) in enumerate(zip(fast.splitlines(), exact.splitlines(), strict=False)):
            assert a == b, f"{path.name}: row {i + 1} differs"
        assert len(fast) == len(exact), f"{path.name}: {len(fast)} bytes against {len(exact)}"
    return stats


@pytest.mark.parametrize("path", FIXTURES + MORE, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_every_fixture_byte_for_byte(path: Path) -> None:
    _same(path)


def test_a_node_and_kinds(tmp_path: Path) -> None:
    path = FIXTURES[0]
    _same(path, node="node-7")
    for wanted in (("decode_batch",), ("http_access", "prefill_batch", "exception"), ("other",)):
        _same(path, wanted=wanted)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Small logs of both generators: restarts, torn and interleaved lines, every prefix
    style, DP-attention ranks, several seeds."""
    out = tmp_path_factory.mktemp("generated")
    runs = [
        ("gen_sglang_log.py", ["--size", "2M", "--seed", "7"]),
        ("gen_sglang_log.py", ["--size", "1M", "--seed", "3", "--prefix-style", "dp-tp", "--decode-ranks", "all",
                               "--torn-rate", "0.03", "--interleave-rate", "0.03", "--crash-rate", "0.3"]),
        ("gen_sglang_log.py", ["--size", "1M", "--seed", "5", "--prefix-style", "tp-ep"]),
        ("gen_sglang_log.py", ["--size", "1M", "--seed", "9", "--prefix-style", "pp-tp", "--ranks", "4"]),
        ("gen_serving_log.py", ["--size", "2M"]),
        ("gen_serving_log.py", ["--size", "1M", "--all-ranks", "--seed", "11"]),
        ("gen_serving_log.py", ["--size", "1M", "--seed", "4", "--tp", "4", "--start", "2026-03-29 00:30:00"]),
    ]
    return write_logs(out, runs)


def test_generated_logs_byte_for_byte_and_mostly_in_c(generated: list[Path]) -> None:
    lines = taken = 0
    for path in generated:
        stats = _same(path)
        # Most lines of these logs are records of known shapes (the crash-heavy one has
        # many traceback lines, which the exact path assembles): written in C.
        assert stats.taken >= 0.5 * stats.lines, (path.name, stats)
        assert stats.by_kind.get("decode_batch", 0) > 100, (path.name, stats)
        lines += stats.lines
        taken += stats.taken
    assert taken >= 0.9 * lines


@pytest.mark.parametrize("prefix", [b"sglang-1  | ", b"\x1b[36msglang-1  |\x1b[0m "], ids=["plain", "in-colour"])
def test_lines_after_a_wrapper_byte_for_byte_and_mostly_in_c(generated: list[Path], tmp_path: Path,
                                                              prefix: bytes) -> None:
    """Every line behind ``docker compose``'s wrapper (in colour or not): the record's row is
    written in C from where it begins in its line, as the exact path writes it."""
    for path in (generated[0], generated[5]):
        wrapped = tmp_path / path.name
        wrapped.write_bytes(b"".join(prefix + line for line in path.read_bytes().splitlines(keepends=True)))
        stats = _same(wrapped)
        assert stats.taken >= 0.5 * stats.lines, (path.name, stats)  # type: ignore[attr-defined]


def _mutate(line: str, rng: random.Random) -> str:
    """A line as real logs damage it: cut, glued, redrawn, escaped, not ASCII, garbage."""
    pick = rng.randrange(9)
    if pick == 0:
        return line[: rng.randrange(len(line) + 1)]  # torn
    if pick == 1:
        return line + "\r" + line[: len(line) // 2]  # a tqdm-like redraw
    if pick == 2:
        at = rng.randrange(len(line) + 1)
        return line[:at] + rng.choice(['"', "\\", "\t", "é", "\u2028", "\x7f", "\x01"]) + line[at:]
    if pick == 3:
        return line.replace("1", "12345678901234567890123", 1)  # a number too long for C
    if pick == 4:
        return line.replace(".", "e", 1)
    if pick == 5:
        return line + " \x1b[31mred\x1b[0m"
    if pick == 6:
        return "".join(chr(rng.randrange(1, 0x250)) for _ in range(rng.randrange(1, 80)))
    if pick == 7:
        return line.replace("0", "-0", 1)
    return line


def test_damaged_lines_byte_for_byte(generated: list[Path], tmp_path: Path) -> None:
    rng = random.Random(11)
    for source in (generated[1], generated[5]):
        lines = source.read_text(encoding="utf-8").split("\n")[:6000]
        out = [(_mutate(line, rng) if rng.random() < 0.3 else line) for line in lines]
        data = "\n".join(out).encode("utf-8", "surrogatepass")
        garbage = bytes(rng.randrange(256) for _ in range(20000))
        path = tmp_path / f"damaged-{source.name}"
        path.write_bytes(data[: len(data) // 2] + garbage + b"\n" + data[len(data) // 2:] + b"no newline at the end")
        stats = _same(path)
        assert stats.taken > 0.3 * stats.lines
    path = tmp_path / "synthetic.log"
    path.write_bytes(synthetic_log())
    _same(path)
    path = tmp_path / "binary.log"
    path.write_bytes(bytes(rng.randrange(256) for _ in range(200000)))
    _same(path)


def _mixtures() -> list[tuple[str, bytes]]:
    """Serving records, fixtures' lines and every kind of unrecognised text between; and
    streams that do not look like text (random bytes first), whose undecodable lines are
    unrecognised text too."""
    from test_other_walker import _mixture, _random_bytes, _unknown_text

    rng = random.Random(8)
    out = [(f"mix{seed}.log", _mixture(seed)) for seed in range(3)]
    out.append(("words.log", _unknown_text(rng, 4000)))
    out.append(("bytes.log", _random_bytes(rng, 150000) + b"\n" + _mixture(4)))
    return out


@pytest.mark.parametrize("block", [4093])  # runs across many block ends; the other tests read 1 MiB blocks
def test_unknown_text_in_c_byte_for_byte(block: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of unrecognised lines are written in C (``JsonlEmitter.others``), with the
    exact path's rows, in blocks of any size, with a node and with kinds chosen."""
    from logforensics.export import jsonl

    monkeypatch.setattr(jsonl, "BULK_BLOCK_SIZE", block)
    rows = in_c = 0
    for name, data in _mixtures():
        path = tmp_path / name
        path.write_bytes(data)
        stats = _same(path)
        rows += _fast(path)[0].count(b'{"kind": "other", ')
        in_c += stats.by_kind.get("other", 0)
        if name in ("mix0.log", "bytes.log"):
            _same(path, node="node-3")
            _same(path, wanted=("other",))
            _same(path, wanted=("decode_batch", "exception"))
    assert in_c > 0.8 * rows, (in_c, rows)


def test_empty_lines_among_unknown_text_are_written_in_its_runs(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty line between unrecognised lines, once its shape has a row, is written in the
    run (random bytes have one every 256 lines or so, and each ended a run): the exact path's
    rows, with kinds chosen or not, and a run never ends with one."""
    from test_other_walker import _random_bytes, _unknown_text

    rng = random.Random(8)
    lines = []
    for k, line in enumerate(_unknown_text(rng, 3000).split(b"\n")[:-1]):
        lines.append(line)
        lines += [b""] * ((k % 3 == 0) + (k % 7 == 0))
    calls: list[int] = []  # lines of each run taken
    others = emit.JsonlEmitter.others

    def counted(self: emit.JsonlEmitter, *args: Any) -> tuple[int, int, int, Any]:
        got = others(self, *args)
        calls.append(got[1])
        return got

    monkeypatch.setattr(emit.JsonlEmitter, "others", counted)
    for name, data in (("words.log", b"\n".join(lines) + b"\n\n\n"),
                       ("bytes.log", _random_bytes(rng, 200000).replace(b"\n", b"\n\n", 600))):
        path = tmp_path / name
        path.write_bytes(data)
        calls.clear()
        stats = _same(path)
        assert stats.by_kind["blank"] > 0.9 * data.count(b"\n\n"), (name, stats)  # type: ignore[attr-defined]
        assert len([n for n in calls if n]) < 0.2 * data.count(b"\n\n"), (name, len(calls))
        _same(path, wanted=("other",))
        _same(path, wanted=("blank",))


def test_a_log_of_unknown_text_is_written_in_c(tmp_path: Path) -> None:
    from test_other_walker import _random_bytes, _unknown_text

    rng = random.Random(2)
    for name, data in (("words.log", _unknown_text(rng, 5000)), ("bytes.log", _random_bytes(rng, 300000))):
        path = tmp_path / name
        path.write_bytes(data)
        stats = _same(path)
        assert stats.by_kind.get("other", 0) > 0.9 * stats.lines, (name, stats)


def _written(conv: object, text: str) -> bytes | None:
    """What the C writer makes of ``text`` in a field converted by ``conv`` (None: not taken)."""
    plan = Plan.make("x", None, None, (("v", 0, len(text), conv),))
    writer = emit.JsonlEmitter(LineClassifier(None), None, None)
    ops = writer.template(plan, len(text))
    assert ops is not None
    writer.emitter.add(text.encode(), 0, ops)
    stop, lines, out, _ = writer.scan(text.encode() + b"\n", 0, 1)
    return bytes(out) if lines else None


def test_rows_are_the_writers_buffer_handed_back_or_kept() -> None:
    """``scan`` hands its rows over without a copy (a bytes-like ``Rows``): released, the next
    scan writes into the same buffer; kept, the next scan writes into another, and the rows
    kept stay as they were."""
    plan = Plan.make("x", None, None, (("v", 0, 3, int),))
    writer = emit.JsonlEmitter(LineClassifier(None), None, None)
    ops = writer.template(plan, 3)
    assert ops is not None
    writer.emitter.add(b"000", 0, ops)
    first = writer.scan(b"123\n456\n", 0, 1)[2]
    want = b'{"kind": "x", "rank": null, "ts": null, "file": null, "line": 1, "v": 123, "text": "123"}\n'
    assert bytes(first) == want + want.replace(b"1, ", b"2, ").replace(b"123", b"456") and len(first) == 2 * len(want)
    with memoryview(first) as view:
        with pytest.raises(BufferError):
            first.release()  # not while viewed
        assert view.readonly and view.tobytes() == bytes(first)
    second = writer.scan(b"789\n", 0, 3)[2]  # the first kept: a buffer of its own
    assert bytes(second) == want.replace(b"1, ", b"3, ").replace(b"123", b"789")
    assert bytes(first).count(b'"v": ') == 2 and b"789" not in bytes(first)
    address = _address(second)
    assert writer.emitter.kept == 0  # the buffer is the rows'
    second.release()
    assert bytes(second) == b"" and len(second) == 0 and writer.emitter.kept > 0
    third = writer.scan(b"321\n", 0, 4)[2]
    assert _address(third) == address  # the buffer handed back, written again
    assert bytes(third).endswith(b'"text": "321"}\n')
    third.release()
    empty = writer.scan(b"abc\n", 0, 5)  # nothing taken: no rows, the buffer kept
    assert empty[1] == 0 and bytes(empty[2]) == b"" and writer.emitter.kept > 0
    del first  # freed with its rows: the emitter keeps the one it has
    assert writer.emitter.kept > 0


def _address(rows: object) -> int:
    """Where a bytes-like object's bytes are."""
    import numpy as np

    return int(np.frombuffer(rows, dtype=np.uint8).__array_interface__["data"][0])  # type: ignore[call-overload]


def _number(rng: random.Random) -> str:
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(0, 20)))
    text = rng.choice(["", "-", "+"]) + digits
    if rng.random() < 0.7:
        text += "." + "".join(rng.choice("0123456789") for _ in range(rng.randrange(0, 20)))
    if rng.random() < 0.2:
        text += rng.choice("eE") + rng.choice(["", "-", "+"]) + str(rng.randrange(0, 400))
    return text


@pytest.mark.parametrize("conv", [int, float], ids=["int", "float"])
def test_numbers_as_json_dumps_writes_them(conv: type) -> None:
    rng = random.Random(5)
    taken = 0
    for _ in range(20000):
        text = _number(rng)
        got = _written(conv, text)
        if got is None:
            continue  # left to the exact path
        taken += 1
        row = json.loads(got)
        assert got == (json.dumps({**row, "v": conv(text)}, ensure_ascii=False) + "\n").encode(), text
    assert taken > 2000


def test_words_and_strings() -> None:
    texts = ["True", "true", "False", "false", "None", "x", "", "  pad  ", 'q"u\\o\tte', "a::", ":"]
    for conv in (str, str.strip, to_bool, to_word, strip_colon):
        for text in texts:
            got = _written(conv, text)
            assert got is not None
            row = json.loads(got)
            assert got == (json.dumps({**row, "v": conv(text)}, ensure_ascii=False) + "\n").encode(), (conv, text)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab \"\\\t\r\x00\x01\x1f\x7f")), max_size=120))
def test_strings_with_escapes_anywhere(text: str) -> None:
    """JSON escapes at every place around the writer's chunks of 8 and 16 bytes (the line is
    the field; text that is not ASCII, in lines of unrecognised text: ``test_unknown_text_*``)."""
    got = _written(str, text)
    assert got is not None
    assert got == (json.dumps({**json.loads(got), "v": text}, ensure_ascii=False) + "\n").encode()


def _dumped(data: bytes) -> bytes:
    return json.dumps(data.decode("utf-8", "replace"), ensure_ascii=False).encode()


@settings(max_examples=600, deadline=None)
@given(st.binary(max_size=300) | st.text(alphabet=st.sampled_from(list("ab \"\\\t\r\x00\x1f\x7fé€\ufffd")
                                                                 + ["\U0001d11e"]), max_size=120).map(str.encode))
def test_a_line_of_any_bytes_is_written_as_its_decoded_text(data: bytes) -> None:
    """A line of unrecognised text (bytes that may not be UTF-8) is written as the JSON string
    of its text decoded with U+FFFD replacements, in one pass (``put_text``)."""
    assert native.lib is not None
    data = data.replace(b"\n", b" ")
    for find in (False, True):  # the line's end given, or found as it is written
        assert native.lib.text(data, find) == _dumped(data), find


def test_a_line_of_any_bytes_is_written_as_its_decoded_text_at_every_place() -> None:
    """Every pair of a byte beyond ASCII and a byte after it, and escapes, at every place about
    the words of 8 bytes: a sequence or an escape across a word's end, a line's last bytes."""
    assert native.lib is not None
    rng = random.Random(6)
    tails = [b"", b"a", b"\x80", b"\xbf", b"\xc0", b"\xe0\xa0", b"\xf0\x90\x80", b'"', b"\x1b", b"\t"]
    for a in range(0x80, 0x100):
        for b in range(0x100):
            pad = rng.choice([b"\xe9", b"x", b"\x01", b"\xf0\x9d\x84\x9e"]) * rng.randrange(72)
            for data in (bytes([a, b]) + rng.choice(tails), pad + bytes([a, b]) + rng.choice(tails) + b"x" * 7):
                data = data.replace(b"\n", b" ")
                assert native.lib.text(data, b & 1) == _dumped(data), data
    for _ in range(5000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b" ")
        for find in (False, True):
            assert native.lib.text(data, find) == _dumped(data), (data, find)


def _cli(args: list[str], pure: bool) -> subprocess.CompletedProcess:
    env = {"LOGFORENSICS_PURE": "1"} if pure else {"LOGFORENSICS_PURE": "0"}
    import os

    return subprocess.run(CLI + args, capture_output=True, timeout=300, env={**os.environ, **env})


def test_cli_multi_file_and_kind_as_the_pure_path(tmp_path: Path) -> None:
    run = ROOT / "fixtures" / "multinode" / "tp8_two_nodes" / "failing"
    for extra in ([], ["--kind", "decode_batch", "--kind", "exception"]):
        fast = _cli(["parse", "--format", "jsonl", *extra, str(run)], pure=False)
        exact = _cli(["parse", "--format", "jsonl", *extra, str(run)], pure=True)
        assert fast.returncode == exact.returncode == 0, fast.stderr
        assert fast.stdout == exact.stdout and fast.stdout
        assert b'"node": ' in fast.stdout
        out = tmp_path / "out.jsonl"
        assert _cli(["parse", "--format", "jsonl", *extra, "-o", str(out), str(run)], pure=False).returncode == 0
        assert out.read_bytes() == exact.stdout


def test_garbage_early_in_the_file(generated: list[Path], tmp_path: Path) -> None:
    """Text, then random bytes within the first 64 KiB: whether the stream is text is
    judged on the same first bytes by both paths, whatever their block sizes."""
    rng = random.Random(3)
    data = generated[1].read_bytes()[:200000]
    path = tmp_path / "early-garbage.log"
    path.write_bytes(data[:20000] + bytes(rng.randrange(256) for _ in range(5000)) + b"\n" + data[20000:])
    _same(path)
