"""The Lark grammar of a log record, and its interpretation as a :class:`Plan`.

``grammars/sglang.lark`` decides what a record means. Interpreting a parse tree does not
produce values directly: it produces a :class:`Plan`, which says where in the record's
text each value lies (token offsets) and how to convert it. Values are then read from
the text by :func:`build_event`. The fast path (``fastpath.py``) stores plans per line
shape and applies them to later lines of the same shape, so the grammar path and the
fast path share one function for producing values and cannot disagree on them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from operator import call, itemgetter
from typing import Any, Callable

from lark import Lark, Token, Tree
from lark.exceptions import LarkError

from .events import Event

Conv = Callable[[str], Any]


# Converters are C builtins where possible: they run once per value of every line.
_to_int = int
_to_float = float
_to_str = str
_to_strip = str.strip
_BOOLS = {"True": True, "False": False, "true": True, "false": False}


def _to_bool(s: str) -> bool | str:
    return _BOOLS.get(s, s)


def _to_word(s: str) -> Any:
    if s == "None":
        return None
    if s in ("True", "False"):
        return s == "True"
    return s


def _to_list(s: str) -> list[Any]:
    inner = s.strip()[1:-1].strip()
    if not inner:
        return []
    out: list[Any] = []
    for part in inner.split(","):
        part = part.strip()
        try:
            out.append(int(part))
        except ValueError:
            try:
                out.append(float(part))
            except ValueError:
                out.append(part.strip("'\""))
    return out


def _to_ts(s: str) -> str | None:
    """SGLang stamps ``2025-03-01 14:03:07[.123]`` or ``14:03:07`` as ISO 8601."""
    if len(s) >= 19 and s[4] == "-":
        return s[:10] + "T" + s[11:]
    if len(s) <= 12 and s[2] == ":":
        return s
    return None  # a stamp cut at the start of a paste ("026-05-28 ...")


def _to_rank(s: str) -> str:
    return s.strip()


def _to_quoted(s: str) -> str:
    return s[1:-1]


def _number_conv(text: str) -> Conv:
    return _to_int if re.fullmatch(r"-?\d+", text) else _to_float


_UNIT_SUFFIX = {
    "GB": "_gib", "GiB": "_gib", "MB": "_mib", "MiB": "_mib", "KB": "_kib", "KiB": "_kib",
    "s": "_s", "ms": "_ms", "%": "_pct",
}

#: SGLang's own key names mapped to ours (before the unit suffix is added).
_KEY_ALIASES = {
    "avail mem": "avail",
    "mem usage": "mem_usage",
    "time elapsed": "elapsed",
    "k size": "k",
    "v size": "v",
    "kv size": "kv",
    "#tokens": "tokens",
    "type": "model_type",
    "gen throughput (token/s)": "gen_throughput_tok_s",
    "input throughput (token/s)": "input_throughput_tok_s",
    "available_gpu_mem": "available_gpu_mem",
    "available_cpu_mem": "available_cpu_mem",
    "cuda graph": "cuda_graph",
    "cpu graph": "cuda_graph",
    "npu graph": "cuda_graph",
    "musa graph": "cuda_graph",
}


def field_name(key: str, unit: str | None) -> str:
    """``"avail mem"`` + ``GB`` -> ``avail_gib``; ``"#running-req"`` -> ``running_req``."""
    k = key.strip().lower()
    base = _KEY_ALIASES.get(k) or re.sub(r"[^a-z0-9]+", "_", k).strip("_") or "value"
    if unit:
        suffix = _UNIT_SUFFIX.get(unit.strip(), "")
        if suffix and not base.endswith(suffix):
            base += suffix
    return base


@dataclass(frozen=True, slots=True)
class Plan:
    """Where a record's values lie in its text, and how to convert each one.

    Spans are offsets into the record (segment) text. ``memo_ok`` is false when the
    meaning depended on digits (a key containing a digit), so the plan must not be
    reused for other lines of the same digit-masked shape. ``getter`` slices every
    value (and the rank and stamp) out of the text in one C call.
    """

    kind: str
    rank: tuple[int, int] | None
    ts: tuple[int, int] | None
    fields: tuple[tuple[str, int, int, Conv], ...]
    const: tuple[tuple[str, Any], ...] = ()
    memo_ok: bool = True
    names: tuple[str, ...] = ()
    convs: tuple[Conv, ...] = ()
    getter: Callable[[str], tuple[str, ...]] | None = None

    @classmethod
    def make(cls, kind: str, rank: tuple[int, int] | None, ts: tuple[int, int] | None,
             fields: tuple[tuple[str, int, int, Conv], ...], const: tuple[tuple[str, Any], ...] = (),
             memo_ok: bool = True) -> "Plan":
        spans = [slice(a, b) for _, a, b, _ in fields]
        spans.append(slice(*rank) if rank else slice(0, 0))
        spans.append(slice(*ts) if ts else slice(0, 0))
        return cls(kind, rank, ts, fields, const, memo_ok, tuple(f[0] for f in fields),
                   tuple(f[3] for f in fields), itemgetter(*spans))


def build_event(plan: Plan, text: str, line: int, file: str | None) -> Event:
    """Read the values a plan points at out of ``text``: the one value-producing step."""
    *values, rank, ts = plan.getter(text)  # type: ignore[misc]
    fields = dict(zip(plan.names, map(call, plan.convs, values)))
    if plan.const:
        fields.update(plan.const)
    return Event(plan.kind, line, rank.strip() if plan.rank else None,
                 _to_ts(ts) if plan.ts else None, fields, text, file)


@lru_cache(maxsize=None)
def _parsers() -> tuple[Lark, Lark]:
    kw = dict(parser="lalr", lexer="contextual", propagate_positions=False,
              maybe_placeholders=False, cache=False)
    record = Lark.open_from_package("logforensics.grammars", "sglang.lark", ("",), start="record", **kw)
    fallback = Lark.open_from_package("logforensics.grammars", "sglang.lark", ("",), start="fallback", **kw)
    return record, fallback


#: Rule names whose kind differs from the rule name.
_KIND_RENAME = {"tqdm_bar": "progress", "fh_frame": "tb_frame", "export_env": "env"}


class _Planner:
    """Turns one parse tree into a Plan (token spans, converters, constants)."""

    def __init__(self) -> None:
        self.fields: list[tuple[str, int, int, Conv]] = []
        self.const: dict[str, Any] = {}
        self.rank: tuple[int, int] | None = None
        self.ts: tuple[int, int] | None = None
        self.memo_ok = True
        self.kind = "other"

    def add(self, name: str, tok: Token, conv: Conv) -> None:
        # A repeated key keeps its first value: SGLang never repeats one on purpose.
        if any(f[0] == name for f in self.fields) or name in self.const:
            return
        self.fields.append((name, tok.start_pos, tok.end_pos, conv))

    def plan(self, tree: Tree | Token) -> Plan:
        if isinstance(tree, Token):  # a bare terminal cannot be a record
            raise LarkError("unexpected bare token")
        self.visit(tree)
        return Plan.make(self.kind, self.rank, self.ts, tuple(self.fields),
                         tuple(self.const.items()), self.memo_ok)

    def visit(self, tree: Tree) -> None:
        name = str(tree.data)  # Lark gives a Token; a plain str keeps dict lookups in C
        if name in ("record", "fallback"):
            self.kind = "other"
            for child in tree.children:
                if isinstance(child, Tree):
                    self.visit(child)
            return
        if name == "tb_fragment":
            self.kind = name
            return
        if name == "prefix":
            for child in tree.children:
                if isinstance(child, Token) and child.type in ("STAMP", "CUT_STAMP"):
                    self.ts = (child.start_pos, child.end_pos)
                elif isinstance(child, Tree) and child.children:
                    tok = child.children[0]
                    self.rank = (tok.start_pos, tok.end_pos)
            return
        if name == "gpu_tag":
            tok = tree.children[0]
            self.rank = (tok.start_pos - (len("[gpu_id=") if tok.start_pos >= 8 else 0), tok.end_pos)
            self.memo_ok = False  # rank text is built from a digit
            return
        self.kind = _KIND_RENAME.get(name, name)
        handler = getattr(self, "on_" + name, None)
        if handler is not None:
            handler(tree)
        else:
            self.generic(tree)

    # -- generic handling: items, TEXT, numbers ---------------------------------------
    def generic(self, tree: Tree) -> None:
        for child in tree.children:
            if isinstance(child, Tree):
                if child.data == "items":
                    self.items(child)
                elif child.data in ("eq_item", "colon_item", "elapsed_item"):
                    self.item(child)
                else:
                    self.generic(child)
            elif child.type == "TEXT":
                self.add("message", child, _to_strip)

    def items(self, tree: Tree) -> None:
        for child in tree.children:
            if isinstance(child, Tree):
                self.item(child)

    def item(self, tree: Tree) -> None:
        if tree.data == "elapsed_item":
            self.add("elapsed_s", tree.children[0], _to_float)
            return
        key_tok, value = tree.children[0], tree.children[1]
        if any(ch.isdigit() for ch in key_tok):
            self.memo_ok = False
        self.value(str(key_tok), value)

    def value(self, key: str, value: Tree | Token) -> None:
        if isinstance(value, Tree):  # number_value: SIGNED UNIT?
            num = value.children[0]
            unit = str(value.children[1]).strip() if len(value.children) > 1 else None
            self.add(field_name(key, unit), num, _to_float if unit else _number_conv(num))
            return
        conv: Conv = {"WORD": _to_word, "LIST": _to_list, "QUOTED": _to_quoted}.get(value.type, _to_str)
        if field_name(key, None) == "cuda_graph":
            conv = _to_bool
        self.add(field_name(key, None), value, conv)

    # -- records with their own shape ---------------------------------------------------
    def on_capture_begin(self, tree: Tree) -> None:
        head = tree.children[0]
        self.const.update(_capture_kind(str(head)))
        self.generic(tree)

    on_capture_end = on_capture_begin

    def on_capture_bs(self, tree: Tree) -> None:
        head, lst = tree.children[0], tree.children[-1]
        self.add("num_tokens" if "num tokens" in head else "bs", lst, _to_list)

    def on_kv_cache_alloc(self, tree: Tree) -> None:
        for child in tree.children:
            if isinstance(child, Token) and child.type == "KV_LABEL":
                self.add("label", child, _to_strip)
        self.generic(tree)

    def on_max_total_tokens(self, tree: Tree) -> None:
        self.value("max_total_num_tokens", tree.children[0])
        for child in tree.children[1:]:
            if isinstance(child, Tree):
                self.item(child)

    def on_max_total_tokens_cap(self, tree: Tree) -> None:
        self.add("max_total_tokens", tree.children[0], _to_int)
        self.add("profiled_tokens", tree.children[1], _to_int)

    def on_decode_batch(self, tree: Tree) -> None:
        self.generic(tree)

    def on_prefill_batch(self, tree: Tree) -> None:
        for child in tree.children:
            if isinstance(child, Token) and child.type == "INT":
                self.add("mixed_running_req", child, _to_int)
        self.generic(tree)

    def on_exc_header(self, tree: Tree) -> None:
        for child in tree.children:
            if isinstance(child, Token) and child.type in ("EXC_SOURCE", "EXC_IN"):
                self.add("source", child, _exc_source)

    def on_exc_line(self, tree: Tree) -> None:
        self.add("exception", tree.children[0], _to_str)
        if len(tree.children) > 1:
            self.add("message", tree.children[1], _to_strip)

    def on_tb_frame(self, tree: Tree) -> None:
        self.add("path", tree.children[1], _to_str)
        self.add("lineno", tree.children[2], _to_int)
        self.add("func", tree.children[3], _to_strip)

    on_fh_frame = on_tb_frame

    def on_tqdm_bar(self, tree: Tree) -> None:
        toks = [c for c in tree.children if isinstance(c, Token)]
        desc = next((t for t in toks if t.type == "TQDM_DESC"), None)
        body = next(t for t in toks if t.type == "TQDM_BODY")
        if desc is not None:
            self.add("desc", desc, _tqdm_desc)
            # "Capturing batches (bs=64 avail_mem=11.08 GB)": the capture step and free memory
            self.add("bs", desc, _desc_number("bs"))
            self.add("num_tokens", desc, _desc_number("num_tokens"))
            self.add("avail_gib", desc, _desc_avail)
        self.add("progress", body, _tqdm_progress)

    def on_http_access(self, tree: Tree) -> None:
        toks = [c for c in tree.children if isinstance(c, Token)]
        by_type = {t.type: t for t in toks}
        self.add("client", by_type["ADDR"], _to_str)
        self.add("method", by_type["METHOD"], _to_str)
        self.add("path", by_type["PATH"], _to_str)
        self.add("status", by_type["INT"], _to_int)

    def on_uvicorn_msg(self, tree: Tree) -> None:
        self.add("level", tree.children[0], lambda s: s.rstrip(":"))
        self.add("message", tree.children[-1], _to_strip)

    def on_level_message(self, tree: Tree) -> None:
        self.add("level", tree.children[0], _to_str)
        self.add("source_loc", tree.children[1], _to_str)
        if len(tree.children) > 2:
            self.add("message", tree.children[2], _to_strip)

    def on_nccl_version(self, tree: Tree) -> None:
        self.add("version", tree.children[0], _to_str)

    on_nccl_version_native = on_nccl_version

    def on_custom_ar_disabled(self, tree: Tree) -> None:
        self.add("component", tree.children[0], lambda s: s.split(" is disabled")[0])
        self.add("reason", tree.children[1], _to_strip)

    def on_c10d_log(self, tree: Tree) -> None:
        self.add("head", tree.children[0], _c10d_head)
        if len(tree.children) > 1:
            self.add("message", tree.children[1], _to_strip)

    def on_launch_command(self, tree: Tree) -> None:
        self.add("command", tree.children[0], _to_strip)

    def on_export_env(self, tree: Tree) -> None:
        self.add("name", tree.children[0], _to_str)
        if len(tree.children) > 1:
            self.add("value", tree.children[1], _to_strip)

    def on_dp_launch(self, tree: Tree) -> None:
        self.add("dp_rank", tree.children[0], _to_int)
        self.add("base_gpu_id", tree.children[1], _to_int)

    def on_weights_ready(self, tree: Tree) -> None:
        self.add("elapsed_s", tree.children[0], _to_float)

    def on_server_args(self, tree: Tree) -> None:
        self.add("raw", tree.children[0], _to_strip)

    def on_blank(self, tree: Tree) -> None:
        pass

    def on_indented(self, tree: Tree) -> None:
        pass

    def on_tb_caret(self, tree: Tree) -> None:
        pass

    def on_tb_chain(self, tree: Tree) -> None:
        self.add("chain", tree.children[0], _to_strip)


def _exc_source(s: str) -> str:
    s = s.strip().rstrip(":")
    if s.startswith("Exception in "):
        return s[len("Exception in "):]
    return s.replace(" hit an exception", "")


def _capture_kind(head: str) -> dict[str, Any]:
    """``Capture draft extend cuda graph begin`` -> role draft, graph extend."""
    words = head.split(" graph ")[0].split()[1:-1]  # between "Capture" and the device word
    role = next((w for w in words if w in ("target", "draft")), "target")
    graph = next((w for w in words if w in ("decode", "prefill", "verify", "extend", "piecewise")), "decode")
    return {"role": role, "graph": graph}


def _tqdm_desc(s: str) -> str:
    return s.strip().rstrip(":").strip()


def _desc_number(key: str) -> Conv:
    pattern = re.compile(re.escape(key) + r"=(\d+)")

    def conv(s: str) -> int | None:
        m = pattern.search(s)
        return int(m.group(1)) if m else None

    return conv


_AVAIL_RE = re.compile(r"avail_mem=([\d.]+) GB")


def _desc_avail(s: str) -> float | None:
    m = _AVAIL_RE.search(s)
    return float(m.group(1)) if m else None


_TQDM_RE = re.compile(r"(\d+)%.*?(\d+)/(\d+) \[([^\]]*)\]")


def _tqdm_progress(s: str) -> dict[str, Any]:
    m = _TQDM_RE.search(s)
    if not m:
        return {}
    return {"pct": int(m.group(1)), "n": int(m.group(2)), "total": int(m.group(3))}


_C10D_RE = re.compile(r"\[rank(\d+)\]:\[([EFWI])")


def _c10d_head(s: str) -> dict[str, Any]:
    m = _C10D_RE.match(s)
    return {"global_rank": int(m.group(1)), "level": m.group(2)} if m else {}


def plan_record(text: str) -> Plan:
    """Parse one record with the grammar; an unknown record still keeps prefix and text."""
    record, fallback = _parsers()
    if not text.strip():
        return Plan.make("blank", None, None, ())
    try:
        return _Planner().plan(record.parse(text))
    except (LarkError, IndexError, KeyError):
        pass
    try:
        return _Planner().plan(fallback.parse(text))
    except (LarkError, IndexError, KeyError):
        return Plan.make("other", None, None, ())
