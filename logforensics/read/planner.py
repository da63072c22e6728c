"""A parse tree interpreted as a :class:`~.plan.Plan`: which kind, and where each value lies.

The planner walks one record's tree: the prefix gives the stamp and the rank, the
record's rule gives the kind. Each rule's fields come from its declaration in
``terminals.py`` (terminal -> field), then from its handler here or in ``plan_fatal.py``
(what cannot be declared), then from the generic walk over its key/value items. A
handler that fails raises: a known record is never turned into ``other`` by a bug.
"""

from __future__ import annotations

from typing import Any

from lark import Token, Tree

from . import values as v
from .plan import Conv, Plan
from .plan_fatal import FatalPlanning
from .requests import FIELDS as REQUEST_FIELDS
from .terminals import RULES, Take, Tokens, span, tokens

#: The rules of one key/value item.
_ITEMS = frozenset({"eq_item", "colon_item", "elapsed_item"})

#: Rule names whose kind differs from the rule name.
KIND_RENAME = {"tqdm_bar": "progress", "fh_frame": "tb_frame", "export_env": "env", "env_notice": "env"}

class Planner(FatalPlanning):
    """Turns one parse tree into a Plan (token spans, converters, constants).

    ``length`` is the record's length: a field may run from a token to the end of the
    record (a message whose punctuation the grammar does not keep as tokens).
    """

    def __init__(self, length: int) -> None:
        self.length = length
        self.fields: list[tuple[str, int, int, Conv]] = []
        self.const: dict[str, Any] = {}
        self.rank: tuple[int, int] | None = None
        self.ts: tuple[int, int] | None = None
        self.memo_ok = True
        self.kind = "other"

    def add(self, name: str, tok: Token, conv: Conv) -> None:
        # A repeated key keeps its first value: SGLang never repeats one on purpose.
        self.add_span(name, *span(tok), conv)

    def add_span(self, name: str, start: int, end: int, conv: Conv) -> None:
        if any(f[0] == name for f in self.fields) or name in self.const:
            return
        self.fields.append((name, start, end, conv))

    def plan(self, tree: Tree) -> Plan:
        self.visit(tree)
        if tree.data == "line_prefix":  # a prefix of every line, with nothing after it
            self.kind = "blank"
        self.body()
        return Plan.make(self.kind, self.rank, self.ts, tuple(self.fields),
                         tuple(self.const.items()), self.memo_ok)

    def visit(self, tree: Tree) -> None:
        name = str(tree.data)  # Lark gives a Token; a plain str keeps dict lookups in C
        if name in ("record", "fallback", "message"):
            self.kind = "other"
            for child in tree.children:
                if isinstance(child, Tree):
                    self.visit(child)
            return
        if name == "tb_fragment":
            self.kind = name
            return
        if name == "line_prefix":
            self.line_prefix(tree)
            return
        if name == "prefix":
            for child in tree.children:
                if isinstance(child, Token) and child.type in ("STAMP", "CUT_STAMP"):
                    self.ts = span(child)
                elif isinstance(child, Token) and child.type == "CUT_RANK":
                    self.rank = span(child)
                elif isinstance(child, Tree):  # rank: RANK_PARTS, rank_only: RANK_HEAD
                    toks = tokens(child)
                    self.rank = span((toks.get("RANK_PARTS") or toks["RANK_HEAD"])[0])
            return
        if name == "gpu_tag":  # "[gpu_id=0]": the label is the text inside the brackets
            start, end = span(tokens(tree)["GPU_TAG"][0])
            self.rank = (start + 1, end - 1)
            return
        if name == "level_tag":  # "INFO engine.py:123: ": another format's level and source, no field
            return
        if name == "rank_tag":  # "Rank 0: load weight begin.": the label is "Rank 0"
            start, end = span(tokens(tree)["RANK_TAG"][0])
            self.rank = (start, end - 1)
            return
        self.kind = KIND_RENAME.get(name, name)
        self.fields_of(tree)

    def fields_of(self, tree: Tree) -> None:
        """A rule's fields: declared (``terminals.RULES``), its handler's, then the generic walk."""
        name = str(tree.data)
        rule = RULES.get(name)
        handler = getattr(self, "on_" + name, None)
        toks = tokens(tree)
        if rule is not None:
            self.const.update(rule.const)
            self.take(rule.takes, toks)
        if handler is not None:
            handler(tree, toks)
        if rule.generic if rule is not None else handler is None:
            self.generic(tree)

    def take(self, takes: tuple[Take, ...], toks: Tokens) -> None:
        for t in takes:
            got = toks.get(t.terminal)
            if got is None or len(got) <= t.nth:
                continue  # an optional part of the rule that this record lacks
            tok = got[t.nth]
            conv = v.number_conv(tok) if t.conv is None else t.conv
            if t.to_end:
                self.add_span(t.name, span(tok)[0], self.length, conv)
            else:
                self.add(t.name, tok, conv)

    # -- generic handling: items, TEXT, numbers ---------------------------------------
    def generic(self, tree: Tree) -> None:
        for child in tree.children:
            if isinstance(child, Tree):
                if child.data == "items":
                    self.items(child)
                elif child.data in _ITEMS:
                    self.item(child)
                else:
                    self.generic(child)
            elif child.type == "TEXT":
                self.add("message", child, v.to_strip)

    def items(self, tree: Tree) -> None:
        for child in tree.children:
            if isinstance(child, Tree):
                self.item(child)

    def item(self, tree: Tree) -> None:
        """``key=value``, ``key: value``, ``key: before -> after`` or ``Time elapsed: 1.2 s``."""
        if tree.data == "elapsed_item":
            self.add("elapsed_s", tokens(tree)["NUMBER"][0], v.to_float)
            return
        toks = tokens(tree)
        key_tok = (toks.get("EQ_KEY") or toks["COLON_KEY"])[0]
        key = str(key_tok)
        vals = [c for c in tree.children if c is not key_tok]  # the value, or the values before and after
        if any(ch.isdigit() for ch in key):
            self.memo_ok = False
        if len(vals) == 2:  # "key: before -> after"
            self.value(key, vals[0], "_before")
            self.value(key, vals[1], "_after")
        else:
            (value,) = vals
            self.value(key, value)

    def value(self, key: str, value: Tree | Token, suffix: str = "") -> None:
        if isinstance(value, Tree):  # number_value: SIGNED UNIT?
            toks = tokens(value)
            num = toks["SIGNED"][0]
            unit = str(toks["UNIT"][0]).strip() if "UNIT" in toks else None
            self.add(v.field_name(key, unit) + suffix, num, v.to_float if unit else v.number_conv(num))
            return
        conv: Conv = {"LIST": v.to_list, "QUOTED": v.to_quoted}.get(value.type, v.to_str)
        if value.type == "WORD":
            conv = v.word_conv(value)
        name = v.field_name(key, None)
        if name == "cuda_graph":
            conv = v.to_bool
        elif value.type == "LIST":
            name = v.list_name(name)  # "bs=[1, 2, 4]": bs_list; a bar's "bs=64" is the one bs
        self.add(name + suffix, value, conv)

    # -- what the declarations cannot say: names and constants chosen by the text ----------
    def on_capture_bs(self, tree: Tree, toks: Tokens) -> None:
        name = "num_tokens" if "num tokens" in toks["CAPTURE_BS"][0] else "bs"
        self.add(v.list_name(name), toks["LIST"][0], v.to_list)

    def on_kv_cache_alloc(self, tree: Tree, toks: Tokens) -> None:
        if any("VA upper bound" in tok for tok in toks.get("KV_ALLOC", ())):
            self.const["va_upper_bound"] = True
        for tok in toks.get("POST_CAPTURE_KV", ()):
            self.const["post_capture"] = True
            if "draft" in tok:
                self.const["role"] = "draft"

    def on_swa_pool(self, tree: Tree, toks: Tokens) -> None:
        if any("all SWA" in t for t in toks.get("SWA_POOL", ())):
            self.const["all_swa"] = True
        if "POST_CAPTURE" in toks:
            self.const["post_capture"] = True

    def on_post_capture_kv(self, tree: Tree, toks: Tokens) -> None:
        # "decode CUDA graph max_bs=N < max_running_requests=M" or "max_running_requests N -> M"
        names = (("max_bs", "max_running_requests") if "PC_MAX_BS" in toks
                 else ("max_running_requests_before", "max_running_requests_after"))
        self.take(tuple(Take("INT", name, None, nth) for nth, name in enumerate(names)), toks)

    def on_pool_no_room(self, tree: Tree, toks: Tokens) -> None:
        unit = str(toks["UNIT"][0])  # "... within the available 10.07 GB."
        self.add(v.field_name("available", unit), toks["NUMBER"][0], v.to_float)

    def on_load_weight_end(self, tree: Tree, toks: Tokens) -> None:
        if "NUMBER" in toks:  # v0.5.23: weights committed after the CUDA-graph capture
            self.const["committed_after_capture"] = True

    def on_max_total_tokens(self, tree: Tree, toks: Tokens) -> None:
        # "max_total_num_tokens=" value (", " item)*: the value, then the items
        items = [c for c in tree.children if isinstance(c, Tree) and c.data in _ITEMS]
        (value,) = [c for c in tree.children if not (isinstance(c, Tree) and c.data in _ITEMS)]
        self.value("max_total_num_tokens", value)
        for child in items:
            self.item(child)

    def on_retract(self, tree: Tree, toks: Tokens) -> None:
        if toks["RETRACT"][0].startswith("Testing"):
            self.const["testing"] = True

    def on_cache_flush(self, tree: Tree, toks: Tokens) -> None:
        self.const["flushed"] = "CACHE_FLUSHED" in toks

    def on_pool_leak(self, tree: Tree, toks: Tokens) -> None:
        for child in tree.children:  # warning_head? leak_message
            if isinstance(child, Tree):
                self.fields_of(child)

    def on_py_warning(self, tree: Tree, toks: Tokens) -> None:
        for child in tree.children:
            if isinstance(child, Tree):  # warning_head
                self.fields_of(child)

    def on_exc_header(self, tree: Tree, toks: Tokens) -> None:
        if "TB_CUT" in toks:
            self.const["header_cut"] = True  # the paste ends inside "Traceback (most recent call last):"

    def on_c10d_log(self, tree: Tree, toks: Tokens) -> None:
        if "TEXT" in toks:
            self._collective_or("c10d_log", toks["TEXT"][0])

    def on_pd_timeout(self, tree: Tree, toks: Tokens) -> None:
        self.const["stage"] = "bootstrap" if "PD_BOOTSTRAP_TIMEOUT" in toks else "waiting"

    def _payload(self, kind: str, start: int) -> None:
        for name, conv in REQUEST_FIELDS[kind].items():
            self.add_span(name, start, self.length, conv)
        self.memo_ok = False  # the payload's figures sit at offsets that depend on its text

    def on_request_receive(self, tree: Tree, toks: Tokens) -> None:
        self._payload("request_receive", span(toks["TEXT"][0])[0])

    def on_request_finish(self, tree: Tree, toks: Tokens) -> None:
        self._payload("request_finish", span(toks["TEXT"][0])[0])

    def on_req_time_stats(self, tree: Tree, toks: Tokens) -> None:
        self._payload("req_time_stats", span(toks["REQ_TIME_STATS"][0])[1])

    def on_request_json(self, tree: Tree, toks: Tokens) -> None:
        tok = toks["REQUEST_JSON"][0]
        start = span(tok)[0]
        self._payload("request_json", start)
        m = v.JSON_STAMP.match(tok)
        if m:
            self.ts = (start + m.start(1), start + m.end(1))

    def on_std_log(self, tree: Tree, toks: Tokens) -> None:
        self.ts = span(toks["STD_STAMP"][0])
