"""The planner's handlers for fatal, timeout and launcher records, and for line prefixes.

Split from :mod:`.planner` to keep modules small; ``planner.Planner`` mixes these in.
Most of these records' fields are declared in ``terminals.py``; a handler here only says
what a declaration cannot (a kind chosen by the text, a rank named inside a message),
by a token's span and a converter like every other field, so plans stay reusable by
the fast path. Kinds are chosen from the text's letters, never its digits.
"""

from __future__ import annotations

import re
from typing import Any

from lark import Token, Tree

from . import fatal
from . import values as v
from .terminals import Tokens, span
from .values import Conv

_FMT_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?")
#: Dynamo's stamp as far as the planner keeps it: to microseconds or milliseconds (the lengths
#: the scanner reads), without the zone
_DYN_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{6}|\.\d{3})?(?=\d*(?:Z|[+-]\d\d:\d\d) )")
_FMT_RANK = re.compile(r"(?:(?:DP|PP|TP|EP|ATTN_CP|MOE_DP|CP|NP)-?\d+ ?)+")
#: "sglang::scheduler_TP0", "sglang::scheduler_DP1_TP0": SGLang's process title names the rank
_PROCTITLE = re.compile(r"sglang::scheduler_((?:(?:DP|PP|TP|EP|ATTN_CP|MOE_DP|CP|NP)-?\d+_?)+)")

#: Kinds whose text continues another record (see ``body``).
_BODY_KINDS = frozenset({"indented", "other", "tb_caret", "tb_fragment"})


class FatalPlanning:
    """Mixin of ``planner.Planner``: see the module docstring."""

    length: int
    kind: str
    #: where the text after a prefix of every line starts (0 without one)
    body_start: int = 0
    rank: tuple[int, int] | None
    ts: tuple[int, int] | None
    const: dict[str, Any]

    def add(self, name: str, tok: Token, conv: Conv) -> None:  # pragma: no cover - see Planner
        raise NotImplementedError

    def add_span(self, name: str, start: int, end: int, conv: Conv) -> None:  # pragma: no cover
        raise NotImplementedError

    def body(self) -> None:
        """The text after a prefix of every line, for the kinds whose meaning is their text
        (a traceback's source line, a message continued on the next line)."""
        if self.body_start and self.kind in _BODY_KINDS:
            self.add_span("body", self.body_start, self.length, str)

    # -- prefixes of every line ---------------------------------------------------------
    def line_prefix(self, tree: Tree) -> None:
        (tok,) = (c for c in tree.children if isinstance(c, Token))  # TORCH_RANK, FMT_HEAD, DYN_HEAD or LOG_HEAD
        text = str(tok)
        at, self.body_start = span(tok)
        if tok.type == "TORCH_RANK":  # "[rank3]: " -> rank3
            self.rank = (at + 1, at + text.index("]"))
            return
        if tok.type == "DYN_HEAD":  # "2026-04-27T23:03:15.250907Z  INFO target: ": a stamp, no rank
            m = _DYN_STAMP.match(text)
            if m:  # the zone ("Z", "+08:00") is not part of the stamp: as SGLang's, it is wall time
                self.ts = (at + m.start(), at + m.end())
            return
        m = _FMT_STAMP.match(text)  # "2025-06-18 13:43:34 ERROR 31423 [ TP6 PP0 scheduler.py:2547] "
        if m:
            self.ts = (at + m.start(), at + m.end())
        if tok.type == "LOG_HEAD":  # "2025-07-15 17:47:33 - ERROR - ": a stamp, no rank
            return
        inside = text.rindex("[")
        r = _FMT_RANK.match(text, inside + 1 + len(text[inside + 1:]) - len(text[inside + 1:].lstrip()))
        if r:
            self.rank = (at + r.start(), at + r.end())

    # -- fatal records ------------------------------------------------------------------
    def on_cpp_frame(self, tree: Tree, toks: Tokens) -> None:
        self.proctitle_rank(toks["TEXT"][0])

    def on_cpp_what(self, tree: Tree, toks: Tokens) -> None:
        self._collective_or("cpp_what", toks["TEXT"][0])

    def on_torch_watchdog(self, tree: Tree, toks: Tokens) -> None:
        self._collective_or("cpp_what", toks["TEXT"][0])  # the watchdog thread's exception ends the process

    # -- timeouts -----------------------------------------------------------------------
    def _collective_or(self, kind: str, tok: Token) -> bool:
        """Make this a collective timeout/failure record when ``tok``'s text is one."""
        found = fatal.collective_kind(str(tok))
        self.add("message", tok, v.to_strip)
        if found is None:
            self.kind = kind
            return False
        self.kind = found
        for name in fatal.COLLECTIVE_FIELDS:
            self.add(name, tok, fatal.field(name))
        return True

    def proctitle_rank(self, tok: Token) -> None:
        """A C++ frame ``(... in sglang::scheduler_TP0)``: the process title names the rank. A
        title of several parts (``scheduler_PP1_ATTN_CP4_TP4``) is not the rank's text as the
        prefix writes it (``PP1 ATTN_CP4 TP4``), which a span of the line cannot give: the run
        model reads it from the record's text (``model.hang.title_rank``)."""
        m = _PROCTITLE.search(str(tok))
        if m and "_" not in m.group(1):
            at = span(tok)[0]
            self.rank = (at + m.start(1), at + m.end(1))

    # -- launchers ------------------------------------------------------------------------
    def on_gpustack_log(self, tree: Tree, toks: Tokens) -> None:
        if "TEXT" not in toks:
            return
        text = toks["TEXT"][0]
        if v.names_image(text):
            self.add("image", text, v.image)
            self.add("sglang_version", text, v.image_version)
        if v.names_arguments(text):  # the command gpustack runs
            self.kind = "launch_command"
            self.const["launcher"] = "gpustack"
            self.add("command", text, v.arguments)
