"""Masking paths in a crash's text: the same matches as the plain pattern, in linear time."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from logforensics.model import fingerprint

#: The pattern as first written: every position of a run of path characters tried in turn.
_PLAIN = re.compile(r"(?:[A-Za-z]:)?(?:[\w.@+-]*/)+[\w.@+-]+")


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet="aZC:/._@+- x=é\\'(1", max_size=40))
def test_paths_are_those_of_the_plain_pattern(text: str) -> None:
    """Drive letters, URLs, paths inside words, runs without a slash: the same spans."""
    assert [m.span() for m in fingerprint._PATH.finditer(text)] == [m.span() for m in _PLAIN.finditer(text)]


def test_a_long_run_without_a_slash_is_read_once() -> None:
    """A megabyte of word characters in an exception's text: the plain pattern tried each of
    its positions in turn (about 10**12 steps: a summary that never ended)."""
    text = "RuntimeError: " + "x" * (1 << 20) + " at /usr/lib/python3/dist-packages/torch/a.py"
    masked = fingerprint.mask(text)
    assert masked == "RuntimeError: " + "x" * (1 << 20) + " at <path>"
