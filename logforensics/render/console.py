"""The consoles every command prints to, and log text made safe to show on them.

Log text and file names are data. rich reads ``[b]``-like brackets in plain strings as
style tags (a stray ``[/b]`` raises MarkupError, a known tag is silently eaten), so:

* every console is made here with markup off, and renderers hand rich ``Text`` objects
  (:func:`plain`), never strings that rich would parse, also for table and panel titles;
* control characters from a log (a stray ESC or bell could drive the terminal) are
  removed; newlines are kept where a block of lines is shown (a traceback) and become
  spaces in one-line places;
* a long line is cut at a word boundary with an ellipsis (:func:`clip`), never in the
  middle of a number.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ..units import ELLIPSIS, clip

__all__ = ["ELLIPSIS", "clip", "make_console", "plain", "printable"]

#: Width of the plain text written to a pipe or file (no terminal to ask).
PIPE_WIDTH = 160


def make_console(*, stderr: bool = False) -> Console:
    """rich with colours on a terminal; plain wide text (no colour codes) when piped."""
    console = Console(stderr=stderr, markup=False, highlight=False, emoji=False)
    if not console.is_terminal:
        console = Console(stderr=stderr, markup=False, highlight=False, emoji=False, width=PIPE_WIDTH,
                          no_color=True)
    return console


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` without control characters; with ``lines``, newlines (and tabs) are kept,
    otherwise each line break becomes a space."""
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ch == "\t":
            out.append(ch if lines else " ")
        elif ch == "\n":
            out.append("\n" if lines else " ")
        elif ch == "\r":
            out.append("" if lines else " ")
    return "".join(out)


def plain(text: object, style: str = "", *, lines: bool = False, limit: int | None = None) -> Text:
    """Log text (or a file name) as a rich ``Text``: shown exactly, never read as markup."""
    s = printable(str(text), lines=lines)
    if limit is not None:
        s = clip(s, limit)
    return Text(s, style=style)
