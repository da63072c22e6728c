"""The C scanners read numbers exactly as Python's float() does, or leave them to it.

``native/shape.h`` reads a float text without the general converter where one IEEE operation
gives the correctly rounded double (a significand of at most 2**53, a decimal exponent of
at most 22 either way); every other text goes to CPython's own converter or, when that
refuses it, to the exact path. Each case is checked against ``float()`` itself, bit for
bit (the sign of zero included).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from accel import accelerated
from hypothesis import given, settings
from hypothesis import strategies as st

from logforensics import native
from logforensics.model.stats import Sketch

_scan = native.lib
compiled = accelerated


def _same(text: str) -> None:
    assert _scan is not None
    got = _scan.read_float(text.encode())
    try:
        want: float | None = float(text)
    except ValueError:
        want = None
    if got is None:
        # left to Python: only texts with other characters than the scanners read, or over 60
        core = text.strip(" \t\x0b\x0c")
        assert want is None or not set(core) <= set("0123456789.+-eE") or len(core) > 60, text
        return
    assert want is not None, text
    assert struct.pack("<d", got) == struct.pack("<d", want), (text, got, want)


_DIGITS = st.text(alphabet="0123456789", min_size=0, max_size=20)


@st.composite
def _decimal(draw: st.DrawFn) -> str:
    """[sign]digits[.digits][e[sign]digits], each part possibly empty or odd."""
    sign = draw(st.sampled_from(["", "-", "+", "--", "+-"]))
    whole, frac = draw(_DIGITS), draw(_DIGITS)
    point = draw(st.sampled_from(["", ".", "."]))
    exp = draw(st.sampled_from(["", "e", "E", "e-", "e+", "E-"]))
    expd = draw(st.text(alphabet="0123456789", min_size=0, max_size=4)) if exp else ""
    return sign + whole + point + (frac if point else "") + exp + expd


@compiled
@settings(max_examples=3000, deadline=None)
@given(_decimal())
def test_decimal_texts_read_as_float_reads_them(text: str) -> None:
    _same(text)


@compiled
@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["{!r}", "{:.2f}", "{:.6g}", "{:.15e}",
                                                                          "{:.17g}", "{:.1f}", "{:.3e}"]))
def test_formatted_floats_read_as_float_reads_them(x: float, fmt: str) -> None:
    _same(fmt.format(x))


@compiled
@settings(max_examples=2000, deadline=None)
@given(st.integers(0, 2**60), st.integers(-30, 30))
def test_significand_and_exponent_near_the_limits(w: int, e: int) -> None:
    """Around 2**53 and 10**22, where the fast reading stops and the general one takes over."""
    _same(f"{w}e{e}")
    _same(f"-{w}E{e:+d}")
    s = str(w)
    if len(s) > 1:
        _same(s[:-1] + "." + s[-1:] + f"e{e}")


@compiled
@pytest.mark.parametrize("text", [
    "0", "-0", "+0", "0.0", "-0.0", "-.0", ".5", "5.", "-5.", ".", "-", "+", "", "e5", ".e5", "1e", "1e+", "1e-",
    "1.5e3", "1.5E-3", "9007199254740993", "9007199254740992", "9007199254740993.0", "0.1", "0.3", "1e22", "1e23",
    "1e-22", "1e-23", "123456789012345678901234567890", "0.000000000000000000000000001", "1e0000000000000022",
    "1_000.5", " 1.5 ", "\t2.5", "1.5\x0b", "inf", "-nan", "1e5.5", "1..5", "1.5.", "--1", "0x10", "1e99999999",
    "0e99999999", "4.9406564584124654e-324", "1.7976931348623157e308", "1.8e308",
])
def test_corners(text: str) -> None:
    _same(text)


@compiled
def test_every_short_text_of_the_alphabet() -> None:
    """All texts of up to four characters of digits, signs, points and exponents."""
    alphabet = "05.-+e"
    texts = [""]
    for _ in range(4):
        texts = [t + c for t in texts for c in alphabet] + texts
    for text in set(texts):
        _same(text)
    assert math.isnan(float("nan"))  # the alphabet leaves nan and inf to Python


def _state(sk: Sketch) -> tuple[object, ...]:
    sk._flush()
    return (sk.count, sk.min, type(sk.min), sk.max, type(sk.max), sk.zeros, dict(sk.buckets), sk._terms,
            sk.to_dict())


_FLOATS = st.lists(st.floats(-1e300, 1e300, allow_nan=False) | st.sampled_from([0.0, -0.0, 5.0, 1e-300]),
                   max_size=3000)
_INTS = st.lists(st.integers(-(2**53), 2**53) | st.sampled_from([0, 5, 2**53]), max_size=3000)


@compiled
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), _FLOATS, _INTS), min_size=1, max_size=4))
def test_a_sketch_from_doubles_equals_one_from_numbers(parts: list[tuple[bool, list[float], list[int]]]) -> None:
    """``Sketch.extend_doubles`` (a scan's numbers as doubles) leaves a sketch exactly as
    ``extend`` of the same numbers does: count, extremes and their types, zeros, buckets,
    the exact sum, with values added one by one (the exact path) before and between."""
    a, b = Sketch(), Sketch()
    for ints, floats, whole in parts:
        values: list[Any] = list(whole) if ints else list(floats)
        a.extend(values)
        b.extend_doubles(ints, struct.pack(f"{len(values)}d", *values))
        a.add(3)  # a line read on the exact path between two scans
        b.add(3)
    assert _state(a) == _state(b)
