"""The planner's handlers for fatal, timeout and launcher records, and for line prefixes.

Split from :mod:`.grammar` to keep modules small; ``grammar._Planner`` mixes these in.
Each handler only says where a value lies (a token's span, or the record's text from a
token to its end) and which converter reads it, like every other handler, so plans stay
reusable by the fast path. Kinds are chosen from the text's letters, never its digits.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

from lark import Token, Tree

from . import fatal

Conv = Callable[[str], Any]

_FMT_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?")
_FMT_RANK = re.compile(r"(?:(?:DP|PP|TP|EP|ATTN_CP|MOE_DP|CP)-?\d+ ?)+")
#: "sglang::scheduler_TP0", "sglang::scheduler_DP1_TP0": SGLang's process title names the rank
_PROCTITLE = re.compile(r"sglang::scheduler_((?:(?:DP|PP|TP|EP|ATTN_CP|MOE_DP|CP)-?\d+_?)+)")
_IMAGE = re.compile(r"With image: (\S+?),? ")
_VERSION_IN_IMAGE = re.compile(r"sglang[-_:v]?(\d+\.\d+(?:\.\d+)*(?:\.post\d+|rc\d+)?)", re.IGNORECASE)
_ARGUMENTS = re.compile(r"arguments: \[(.*)\]")


def _tok(tree: Tree, index: int = 0) -> Token:
    """A rule's child that the grammar makes a terminal."""
    return cast(Token, tree.children[index])


def _at(tok: Token) -> int:
    return tok.start_pos or 0


def _end(tok: Token) -> int:
    return tok.end_pos or 0


def _strip(s: str) -> str:
    return s.strip()


def _int_after(prefix: str) -> Conv:
    pattern = re.compile(re.escape(prefix) + r"(-?\d+)")

    def conv(s: str) -> int | None:
        m = pattern.search(s)
        return int(m.group(1)) if m else None
    return conv


def _group(pattern: re.Pattern[str], index: int = 1) -> Conv:
    def conv(s: str) -> str | None:
        m = pattern.search(s)
        return m.group(index) if m else None
    return conv


def _image_version(s: str) -> str | None:
    m = _IMAGE.search(s)
    v = _VERSION_IN_IMAGE.search(m.group(1)) if m else None
    return v.group(1) if v else None


def _dedup_count(s: str) -> int:
    return int(s.split("repeated ")[1].split("x")[0])


def _env_name(s: str) -> str:
    return s.split("=", 1)[0]


def _env_value(s: str) -> str:
    return s.split("=", 1)[1]


def _after_colon(s: str) -> str:
    return s.strip().lstrip(":").strip()


def _oom_what(s: str) -> str | None:
    """``"Failed to initialize lk_moe: CUDA out of memory."`` -> ``"Failed to initialize lk_moe"``."""
    head = re.split(r": (?:CUDA|HIP) out of memory\.", s, maxsplit=1)[0]
    return head.strip() or None


#: Kinds whose text continues another record (see ``body``).
_BODY_KINDS = frozenset({"indented", "other", "tb_caret", "tb_fragment"})


class FatalPlanning:
    """Mixin of ``grammar._Planner``: see the module docstring."""

    length: int
    kind: str
    #: where the text after a prefix of every line starts (0 without one)
    body_start: int = 0
    rank: tuple[int, int] | None
    ts: tuple[int, int] | None
    const: dict[str, Any]

    def add(self, name: str, tok: Token, conv: Conv) -> None:  # pragma: no cover - see _Planner
        raise NotImplementedError

    def add_span(self, name: str, start: int, end: int, conv: Conv) -> None:  # pragma: no cover
        raise NotImplementedError

    def generic(self, tree: Tree) -> None:  # pragma: no cover - see _Planner
        raise NotImplementedError

    def body(self) -> None:
        """The text after a prefix of every line, for the kinds whose meaning is their text
        (a traceback's source line, a message continued on the next line)."""
        if self.body_start and self.kind in _BODY_KINDS:
            self.add_span("body", self.body_start, self.length, str)

    def to_end(self, name: str, tok: Token) -> None:
        self.add_span(name, _at(tok), self.length, _strip)

    def _from(self, name: str, tok: Token, conv: Conv) -> None:
        """A field read by ``conv`` from ``tok`` to the end of the record."""
        self.add_span(name, _at(tok), self.length, conv)

    # -- prefixes of every line ---------------------------------------------------------
    def line_prefix(self, tree: Tree) -> None:
        tok = _tok(tree, 0)
        text, at = str(tok), _at(tok)
        self.body_start = _end(tok)
        if tok.type == "TORCH_RANK":  # "[rank3]: " -> rank3
            self.rank = (at + 1, at + text.index("]"))
            return
        m = _FMT_STAMP.match(text)  # "2025-06-18 13:43:34 ERROR 31423 [ TP6 PP0 scheduler.py:2547] "
        if m:
            self.ts = (at + m.start(), at + m.end())
        inside = text.rindex("[")
        r = _FMT_RANK.match(text, inside + 1 + len(text[inside + 1:]) - len(text[inside + 1:].lstrip()))
        if r:
            self.rank = (at + r.start(), at + r.end())

    # -- fatal records ------------------------------------------------------------------
    def on_child_failed(self, tree: Tree) -> None:
        toks = [c for c in tree.children if isinstance(c, Token)]
        self.add("exit_code", next(t for t in toks if t.type == "SIGNED"), int)
        for t in toks:
            if t.type == "INT":
                self.add("pid", t, int)

    def on_cpp_frame(self, tree: Tree) -> None:
        self.generic(tree)
        self.proctitle_rank(_tok(tree, -1))

    def on_scheduler_died(self, tree: Tree) -> None:
        toks = [c for c in tree.children if isinstance(c, Token)]
        self.add("died_rank", next(t for t in toks if t.type == "INT"), int)
        self.add("exit_code", next(t for t in toks if t.type == "SIGNED"), int)

    def on_oom_message(self, tree: Tree) -> None:
        lead = _tok(tree, 0)
        self._from("what", lead, _oom_what)
        self.to_end("message", lead)  # the figures are decomposed once the record is whole (assemble.py)

    def on_cpp_what(self, tree: Tree) -> None:
        self._collective_or("cpp_what", _tok(tree, 1))

    def on_device_assert(self, tree: Tree) -> None:
        head = _tok(tree, 0)
        for name in ("source_loc", "kernel", "block", "thread", "assertion"):
            self._from(name, head, fatal.device_assert(name))

    def on_hsa_fault(self, tree: Tree) -> None:
        head = _tok(tree, 0)
        for name in ("hsa_node", "agent_handle", "address", "reason"):
            self._from(name, head, fatal.hsa(name))

    def on_cann_error(self, tree: Tree) -> None:
        self.add("code", _tok(tree, 0), str)
        if len(tree.children) > 1:
            self.add("message", _tok(tree, 1), _after_colon)

    def on_lib_log(self, tree: Tree) -> None:
        self.add("lib", _tok(tree), lambda s: s.strip("[]"))
        if len(tree.children) > 1:
            self.add("message", _tok(tree, 1), _strip)

    def on_ray_dedup(self, tree: Tree) -> None:
        self.add("count", _tok(tree, 0), _dedup_count)

    def on_pyspy_thread(self, tree: Tree) -> None:
        head = _tok(tree, 0)
        self.add("thread_id", head, _int_after("Thread "))
        self.add("state", head, _group(re.compile(r"\((\w[^)]*)\)")))
        if len(tree.children) > 1:
            self.add("name", _tok(tree, 1), lambda s: s.strip().strip('"'))

    def on_pyspy_frame(self, tree: Tree) -> None:
        tok = _tok(tree, 0)
        self.add("func", tok, lambda s: s.split()[0])
        self.add("path", tok, lambda s: s.rsplit("(", 1)[1].rsplit(":", 1)[0])
        self.add("lineno", tok, lambda s: int(s.rsplit(":", 1)[1].rstrip().rstrip(")")))

    # -- timeouts -----------------------------------------------------------------------
    def _collective_or(self, kind: str, tok: Token) -> bool:
        """Make this a collective timeout/failure record when ``tok``'s text is one."""
        found = fatal.collective_kind(str(tok))
        self.add("message", tok, _strip)
        if found is None:
            self.kind = kind
            return False
        self.kind = found
        for name in fatal.COLLECTIVE_FIELDS:
            self.add(name, tok, fatal.field(name))
        return True

    def proctitle_rank(self, tok: Token) -> None:
        """A C++ frame ``(... in sglang::scheduler_TP0)``: the process title names the rank."""
        m = _PROCTITLE.search(str(tok))
        if m:
            self.rank = (_at(tok) + m.start(1), _at(tok) + m.end(1))

    # -- memory pools -----------------------------------------------------------------------
    def on_kv_pool_init(self, tree: Tree) -> None:
        self.add("pool", _tok(tree), lambda s: s.split()[1])
        self.generic(tree)

    # -- launchers and settings -----------------------------------------------------------
    def on_gpustack_log(self, tree: Tree) -> None:
        head = _tok(tree, 0)
        self.add("level", head, lambda s: s.rstrip(" -").rsplit(" - ", 1)[1])
        if len(tree.children) < 2:
            return
        text = _tok(tree, 1)
        self.add("message", text, _strip)
        if _IMAGE.search(str(text)):
            self.add("image", text, _group(_IMAGE))
            self.add("sglang_version", text, _image_version)
        if _ARGUMENTS.search(str(text)):  # the command gpustack runs
            self.kind = "launch_command"
            self.const["launcher"] = "gpustack"
            self.add("command", text, _group(_ARGUMENTS))

    def on_env_notice(self, tree: Tree) -> None:
        head = _tok(tree, 0)
        self.kind = "env"
        self.add("name", head, _env_name)
        self.add("value", head, _env_value)
        if len(tree.children) > 1:
            self.add("message", _tok(tree, 1), _after_colon)
