"""Runs of unrecognised text read in C: counts by coverage shape, not one event a line.

A line that no record of the grammar can begin becomes an ``other`` event, and all the
run model does with it is count it and group it by shape (``model.coverage``). Read one
at a time, such a line costs some 13 µs of Python (decoding, the segmenter, the
prefilter, an event, the model's handlers), so a log of unknown text or random bytes read
twenty times slower per megabyte than a serving log. The accelerator (``native/other.c``)
takes runs of them instead and returns how many lines, and how many of each shape.

It takes a line only when the exact path provably makes it one ``other`` event of the
whole line and nothing else reacts to it (the writers of ``parse --format jsonl`` and
``parquet`` take such lines too: :meth:`OtherWalker.texts` gives their texts, for the
row of each). :func:`requirements` derives that condition, by first character, from what
the exact path itself consults:

* the grammar's start terminals of ``record`` and of ``fallback`` (``prefilter.py``): a
  line none of them can begin parses as ``fallback: FREE_TEXT`` alone, and ``FREE_TEXT``'s
  negative lookahead refuses its first characters;
* the segmenter: no carriage return, no wrapper that can begin the line, no text a split
  needs (``segments.py``); the cleaner: no text it would remove (``CLEAN_NEEDS``);
* the texts that observers of ``other`` events react to (given by the caller: the PD
  observer's router and KV-transfer wordings);
* pure ASCII, at most ``LIMIT`` bytes (``fastpath.LINE_LIMIT``), not blank.

Its needles are compared with the line's digits masked (``1``-``9`` read as ``0``), and a
line beginning with a digit is judged by every digit's requirements, so every line of one
masked shape gets the same answer: a shape the classifier's memo holds (whose first line
was not such text) is never taken. In a stream that does not look like text, a line that
is not valid UTF-8 is ``other`` without the grammar (``LineClassifier``): those are taken
too, decoded as Python decodes them, with only the observers' texts refused.

Most of a run's time is the search for the needles in every line: the extension finds a
line's end with libc's ``memchr`` and compares a position with the needles only where a bit set
of the needles' first bytes (and first byte pairs) lets it through, in portable C; its answer is
the definition's (``tests/test_other_walker.py``).

``LOGFORENSICS_PURE=1``, or a missing accelerator, turns this off (``native.available()``); the
exact path is the reference, and the tests compare both on generated mixtures.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from functools import cache
from typing import Any

from .. import native
from .fastpath import LINE_LIMIT
from .grammar import parsers
from .prefilter import begin_table, filters, lookahead_only
from .segments import CLEAN_NEEDS, SPLIT_NEEDS, WRAPPER_PATTERN

_MASK = bytes.maketrans(b"123456789", b"000000000")
#: Longest line taken: a longer one is read on its first part by the classifier (counted, and
#: its coverage shape is that of its first part).
LIMIT = LINE_LIMIT
#: The needle mode of a line that is not valid UTF-8 (modes 0-127: the first character).
_BINARY = 128
_DIGITS = range(ord("0"), ord("9") + 1)




@cache
def requirements(extra: tuple[str, ...]) -> tuple[bytes, tuple[tuple[bytes, bytes], ...]] | None:
    """(first characters never taken, as 128 flags; needles: (masked text, modes)), or
    None when the grammar's free text is not of a form this can judge.

    ``extra``: texts of which a line must contain none (what observers of unrecognised
    lines react to), in text and in undecodable lines alike.
    """
    record, fallback = parsers()
    rec, fb, free = filters(record, fallback)
    blocked = lookahead_only(free.pattern, free.flags)
    if blocked is None:
        return None
    wrappers = begin_table(WRAPPER_PATTERN)
    refuse = bytearray(128)
    per_char: list[set[str]] = [set() for _ in range(128)]
    for i in range(128):
        ch = chr(i)
        if ch in blocked or ch.isspace():  # a line that strips to nothing is blank, not free text
            refuse[i] = 1
            continue
        for table in (rec.by_char, fb.by_char, wrappers):
            if ch in table:
                need = table[ch]
                if need is None:
                    refuse[i] = 1
                    break
                per_char[i].update(need)
    # the same answer for every line of one masked shape: a digit stands for all digits
    union = set().union(*(per_char[d] for d in _DIGITS))
    deny = any(refuse[d] for d in _DIGITS)
    for d in _DIGITS:
        refuse[d] = int(deny)
        per_char[d] = set(union)
    text_needs = set(SPLIT_NEEDS if SPLIT_NEEDS is not None else ("",)) | set(CLEAN_NEEDS) | {"\r"} | set(extra)
    if "" in extra:
        return None
    modes: dict[bytes, int] = {}
    for i in range(128):
        if refuse[i]:
            continue
        texts = per_char[i] | text_needs
        if "" in texts:
            refuse[i] = 1
            continue
        for t in texts:
            key = t.encode("utf-8").translate(_MASK)
            modes[key] = modes.get(key, 0) | 1 << i
    for t in extra:
        key = t.encode("utf-8").translate(_MASK)
        modes[key] = modes.get(key, 0) | 1 << _BINARY
    return bytes(refuse), tuple((key, _words(m)) for key, m in sorted(modes.items()))


def _words(modes: int) -> bytes:
    """A 192-bit set as the extension reads it: three native 64-bit words."""
    return b"".join(((modes >> (64 * q)) & (1 << 64) - 1).to_bytes(8, sys.byteorder) for q in range(3))


class OtherWalker:
    """Takes runs of unrecognised lines for one run model's coverage; see the module.

    ``cap`` and ``overflow``: how many shapes the model keeps, and the key of the lines
    of the shapes beyond (``model.coverage``); :meth:`texts` needs neither.
    """

    def __init__(self, extra: Iterable[str], cap: int = 0, overflow: str = "") -> None:
        assert native.lib is not None
        req = requirements(tuple(sorted(set(extra))))
        self.walker = None if req is None else native.lib.Walker(req[0], list(req[1]), LIMIT)
        self.cap = cap
        self.overflow = overflow

    def walk(self, buf: bytes, pos: int, end: int, line: int, shapes: dict[str, Any], binary: bool,
             blanks: bool = False) -> tuple[int, int, int, bool, list[tuple[str, int, int | None, str | None, bool]], int]:
        """Take the lines of ``buf[pos:end]`` (whole lines) from ``pos`` on, the first
        numbered ``line``, while they are unrecognised text: (where it stopped, lines
        taken, undecodable lines among them, whether a shape went beyond ``cap``, per
        shape met: key, lines, first line and example when new to ``shapes``, whether
        it is the overflow bucket made now; and the empty lines among the lines). New shapes
        come in the order to add them. ``blanks``: empty lines between lines taken are taken
        too (each a ``blank`` event on the exact path; random bytes have one every 256 lines,
        and each ended a walk); the walk never ends with one."""
        if self.walker is None:
            return pos, 0, 0, False, [], 0
        return self.walker.walk(buf, pos, end, line, shapes, binary, self.cap, self.overflow, blanks)

    def texts(self, buf: bytes, pos: int, end: int, binary: bool, decode: bool = True,
              blanks: bool = False) -> tuple[int, int, int, bytes | None]:
        """The lines :meth:`walk` would take, for writers of every event (``read.emit``):
        (where it stopped, lines taken, undecodable lines among them, their texts as the
        exact path's events hold them, in UTF-8, each followed by a newline; None unless
        ``decode``, for a writer that decodes ``buf[pos:stop]`` itself). ``blanks``: as
        :meth:`walk`'s (an empty line taken is an empty line of the texts)."""
        if self.walker is None:
            return pos, 0, 0, b"" if decode else None
        return self.walker.texts(buf, pos, end, binary, decode, blanks)
