"""The Lark grammar of a log record, and its interpretation as a :class:`~.plan.Plan`.

``grammars/sglang.lark`` decides what a record means. Interpreting a parse tree does not
produce values directly: it produces a plan, which says where in the record's text each
value lies (token offsets) and how to convert it (``plan.py`` pairs a plan with a text).
"""

from __future__ import annotations

import re
from functools import cache
from operator import itemgetter
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import LarkError

from .plan import Conv, Plan
from .plan_fatal import FatalPlanning
from .requests import FIELDS as REQUEST_FIELDS

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
    "logical #tokens": "tokens",
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


@cache
def _parsers() -> tuple[Lark, Lark]:
    kw = dict(parser="lalr", lexer="contextual", propagate_positions=False,
              maybe_placeholders=False, cache=True)
    record = Lark.open_from_package("logforensics.grammars", "sglang.lark", ("",), start="record", **kw)
    fallback = Lark.open_from_package("logforensics.grammars", "sglang.lark", ("",), start="fallback", **kw)
    return record, fallback


#: Rule names whose kind differs from the rule name.
_KIND_RENAME = {"tqdm_bar": "progress", "fh_frame": "tb_frame", "export_env": "env", "env_notice": "env"}


def _tokens(tree: Tree) -> dict[str, list[Token]]:
    """A rule's direct tokens grouped by terminal name, in order."""
    out: dict[str, list[Token]] = {}
    for child in tree.children:
        if isinstance(child, Token):
            out.setdefault(child.type, []).append(child)
    return out


def _token(node: Tree | Token) -> Token:
    """A child the grammar makes a terminal; a subtree there is a handler bug, raised, not read as ``other``."""
    if not isinstance(node, Token):
        raise TypeError(f"expected a terminal, got rule {node.data!r}")
    return node


def _tree(node: Tree | Token) -> Tree:
    """A child the grammar makes a rule; a terminal there is a handler bug, raised, not read as ``other``."""
    if not isinstance(node, Tree):
        raise TypeError(f"expected a rule, got terminal {node.type!r}")
    return node


def _span(tok: Token) -> tuple[int, int]:
    """A token's offsets in the record (the lexer always sets them; Lark types them optional)."""
    start, end = tok.start_pos, tok.end_pos
    if start is None or end is None:
        raise TypeError(f"terminal {tok.type!r} without a position")
    return start, end


class _Planner(FatalPlanning):
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
        self.add_span(name, *_span(tok), conv)

    def add_span(self, name: str, start: int, end: int, conv: Conv) -> None:
        if any(f[0] == name for f in self.fields) or name in self.const:
            return
        self.fields.append((name, start, end, conv))

    def plan(self, tree: Tree | Token) -> Plan:
        if isinstance(tree, Token):  # a bare terminal cannot be a record
            raise LarkError("unexpected bare token")
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
                    self.ts = _span(child)
                elif isinstance(child, Token) and child.type == "CUT_RANK":
                    self.rank = _span(child)
                elif isinstance(child, Tree) and child.children:
                    tok = _token(child.children[0])
                    self.rank = _span(tok)
            return
        if name == "gpu_tag":  # "[gpu_id=0]": the label is the text inside the brackets
            start, end = _span(_token(tree.children[0]))
            self.rank = (start + 1, end - 1)
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
            self.add("elapsed_s", _token(tree.children[0]), _to_float)
            return
        key_tok = _token(tree.children[0])
        if any(ch.isdigit() for ch in key_tok):
            self.memo_ok = False
        if len(tree.children) == 3:  # "key: before -> after"
            self.value(str(key_tok), tree.children[1], "_before")
            self.value(str(key_tok), tree.children[2], "_after")
        else:
            self.value(str(key_tok), tree.children[1])

    def value(self, key: str, value: Tree | Token, suffix: str = "") -> None:
        if isinstance(value, Tree):  # number_value: SIGNED UNIT?
            num = _token(value.children[0])
            unit = str(value.children[1]).strip() if len(value.children) > 1 else None
            self.add(field_name(key, unit) + suffix, num, _to_float if unit else _number_conv(num))
            return
        conv: Conv = {"WORD": _to_word, "LIST": _to_list, "QUOTED": _to_quoted}.get(value.type, _to_str)
        if field_name(key, None) == "cuda_graph":
            conv = _to_bool
        self.add(field_name(key, None) + suffix, value, conv)

    def numbers(self, toks: list[Token], names: tuple[str, ...]) -> None:
        """Name a rule's numeric tokens in order of appearance."""
        for name, tok in zip(names, toks):
            self.add(name, tok, _number_conv(tok))

    def to_end(self, name: str, tok: Token) -> None:
        """A field from ``tok`` to the end of the record."""
        self.add_span(name, _span(tok)[0], self.length, _to_strip)

    # -- records with their own shape ---------------------------------------------------
    def on_capture_begin(self, tree: Tree) -> None:
        toks = _tokens(tree)
        head = (toks.get("CAPTURE_BEGIN") or toks["CAPTURE_END"])[0]
        self.add("role", head, _capture_role)
        self.add("graph", head, _capture_graph)
        self.add("device", head, _capture_device)
        for tok in toks.get("CAPTURE_STEP", ()):
            self.add("step", tok, _paren_int)
        self.generic(tree)

    on_capture_end = on_capture_begin

    def on_capture_bs(self, tree: Tree) -> None:
        head, lst = _token(tree.children[0]), _token(tree.children[-1])
        self.add("num_tokens" if "num tokens" in head else "bs", lst, _to_list)

    def on_kv_cache_alloc(self, tree: Tree) -> None:
        toks = _tokens(tree)
        for tok in toks.get("KV_LABEL", ()):
            self.add("label", tok, _to_strip)
        for tok in toks.get("KV_ALLOC", ()):
            if "VA upper bound" in tok:
                self.const["va_upper_bound"] = True
        for tok in toks.get("POST_CAPTURE_KV", ()):
            self.const["post_capture"] = True
            if "draft" in tok:
                self.const["role"] = "draft"
        self.generic(tree)

    def on_swa_pool(self, tree: Tree) -> None:
        toks = _tokens(tree)
        if any("all SWA" in t for t in toks.get("SWA_POOL", ())):
            self.const["all_swa"] = True
        if "POST_CAPTURE" in toks:
            self.const["post_capture"] = True
        self.generic(tree)

    def on_post_capture_kv(self, tree: Tree) -> None:
        toks = _tokens(tree)
        if "PC_MAX_BS" in toks:
            self.numbers(toks["INT"], ("max_bs", "max_running_requests"))
        else:
            self.numbers(toks["INT"], ("max_running_requests_before", "max_running_requests_after"))
        self.generic(tree)

    def on_unbalanced_memory(self, tree: Tree) -> None:
        toks = _tokens(tree)
        signed = toks.get("SIGNED", [])
        for name, tok in zip(("min_avail_gib", "local_avail_gib", "threshold_gib"), signed):
            self.add(name, tok, _to_float)
        for tok in toks.get("NUMBER", ()):
            self.add("factor", tok, _to_float)

    def on_not_enough_memory(self, tree: Tree) -> None:
        for tok in _tokens(tree).get("NUMBER", ()):
            self.add("mem_fraction_static", tok, _to_float)

    def on_weights_no_room(self, tree: Tree) -> None:
        self.numbers(_tokens(tree)["NUMBER"], ("mem_fraction_static", "min_mem_fraction_static", "minimum_viable"))
        self.generic(tree)

    def on_pool_no_room(self, tree: Tree) -> None:
        toks = _tokens(tree)
        self.add("pool", toks["POOL_NO_ROOM"][0], _before(" leaves no room"))
        self.add("cap_tokens", toks["POOL_NO_ROOM"][0], _pool_cap(1))  # "... cap (724224 tokens, 16.15 GB)"
        self.add("cap_gib", toks["POOL_NO_ROOM"][0], _pool_cap(2))
        self.add(field_name("available", str(toks["UNIT"][0])), toks["NUMBER"][0], _to_float)

    def on_nccl_warmup(self, tree: Tree) -> None:
        toks = _tokens(tree)
        self.add("group", toks["NCCL_WARMUP"][0], _to_str)
        self.add("elapsed_s", toks["NUMBER"][0], _to_float)
        self.generic(tree)

    def on_nccl_library(self, tree: Tree) -> None:
        self.add("path", _tokens(tree)["NONSPACE"][0], _to_str)
        self.generic(tree)

    on_nccl_load_failed = on_nccl_library

    def on_load_weight_end(self, tree: Tree) -> None:
        numbers = _tokens(tree).get("NUMBER")
        if numbers:  # v0.5.23: weights committed after the CUDA-graph capture
            self.numbers(numbers, ("elapsed_s", "capture_overlap_s", "startup_overlap_s"))
            self.const["committed_after_capture"] = True
        self.generic(tree)

    def on_graph_disabled(self, tree: Tree) -> None:
        head, reason = _token(tree.children[0]), _token(tree.children[1])
        self.add("graph", head, _word(1))
        self.add("reason", reason, _to_strip)

    def on_torch_compile(self, tree: Tree) -> None:
        toks = _tokens(tree)
        for tok in toks.get("SHAPE", ()):
            self.add("shape", tok, _to_str)
        for tok in toks.get("NUMBER", ()):
            self.add("elapsed_s", tok, _to_float)
        for tok in toks.get("INT", ()):
            self.add("graph_index", tok, _to_int)
        self.generic(tree)

    def on_max_total_tokens(self, tree: Tree) -> None:
        self.value("max_total_num_tokens", tree.children[0])
        for child in tree.children[1:]:
            if isinstance(child, Tree):
                self.item(child)

    def on_max_total_tokens_cap(self, tree: Tree) -> None:
        self.add("max_total_tokens", _token(tree.children[0]), _to_int)
        self.add("profiled_tokens", _token(tree.children[1]), _to_int)

    def on_decode_batch(self, tree: Tree) -> None:
        for tok in _tokens(tree).get("ITER", ()):
            self.add("iter", tok, _bracket_int)
        self.generic(tree)

    def on_prefill_batch(self, tree: Tree) -> None:
        toks = _tokens(tree)
        for tok in toks.get("ITER", ()):
            self.add("iter", tok, _bracket_int)
        for tok in toks.get("INT", ()):
            self.add("mixed_running_req", tok, _to_int)
        self.generic(tree)

    def on_retract(self, tree: Tree) -> None:
        if _token(tree.children[0]).startswith("Testing"):
            self.const["testing"] = True
        self.generic(tree)

    def on_pool_leak(self, tree: Tree) -> None:
        for child in map(_tree, tree.children):
            if child.data == "warning_head":
                self.warning_head(child)
            else:  # leak_message
                for tok in _tokens(child).get("LEAK_POOL", ()):
                    self.add("pool", tok, _before(" memory leak"))
                self.generic(child)

    def on_py_warning(self, tree: Tree) -> None:
        self.warning_head(_tree(tree.children[0]))
        self.generic(tree)

    def warning_head(self, tree: Tree) -> None:
        path, lineno, category = map(_token, tree.children)
        self.add("path", path, _to_str)
        self.add("lineno", lineno, _to_int)
        self.add("category", category, _to_str)

    def on_exc_header(self, tree: Tree) -> None:
        for child in tree.children:
            if isinstance(child, Token) and child.type in ("EXC_SOURCE", "EXC_IN"):
                self.add("source", child, _exc_source)
            elif isinstance(child, Token) and child.type == "TB_CUT":
                self.const["header_cut"] = True  # the paste ends inside "Traceback (most recent call last):"

    def on_exc_line(self, tree: Tree) -> None:
        self.add("exception", _token(tree.children[0]), _to_str)
        if len(tree.children) > 1:
            self.add("message", _token(tree.children[1]), _to_strip)

    def on_tb_frame(self, tree: Tree) -> None:
        self.add("path", _token(tree.children[1]), _to_str)
        self.add("lineno", _token(tree.children[2]), _to_int)
        self.add("func", _token(tree.children[3]), _to_strip)

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
        by_type = {k: v[0] for k, v in _tokens(tree).items()}
        self.add("level", by_type["LEVEL_COLON"], _strip_colon)
        self.add("client", by_type["ADDR"], _to_str)
        self.add("method", by_type["METHOD"], _to_str)
        self.add("path", by_type["PATH"], _to_str)
        self.add("status", by_type["INT"], _to_int)
        if "TEXT" in by_type:
            self.add("reason", by_type["TEXT"], _to_strip)

    def on_uvicorn_msg(self, tree: Tree) -> None:
        toks = _tokens(tree)
        self.add("level", toks["LEVEL_COLON"][0], _strip_colon)
        first = next(c for c in tree.children[1:] if isinstance(c, Token))
        self.to_end("message", first)
        for tok in toks.get("INT", ()):
            self.add("pid", tok, _to_int)
        for tok in toks.get("NONSPACE", ()):
            self.add("url", tok, _to_str)

    def on_device_mismatch(self, tree: Tree) -> None:
        toks = _tokens(tree)
        for tok in toks.get("LEVEL_COLON", ()):
            self.add("level", tok, _strip_colon)
        self.numbers(toks["INT"], ("expected_gpu", "current_gpu"))
        self.to_end("message", toks["CURRENT_DEVICE"][0])

    def on_level_message(self, tree: Tree) -> None:
        self.add("level", _token(tree.children[0]), _to_str)
        self.add("source_loc", _token(tree.children[1]), _to_str)
        if len(tree.children) > 2:
            self.add("message", _token(tree.children[2]), _to_strip)

    def on_nccl_version(self, tree: Tree) -> None:
        self.add("version", _token(tree.children[0]), _to_str)

    on_nccl_version_native = on_nccl_version

    def on_custom_ar_disabled(self, tree: Tree) -> None:
        self.add("component", _token(tree.children[0]), _before(" is disabled"))
        self.add("reason", _token(tree.children[1]), _to_strip)

    def on_c10d_log(self, tree: Tree) -> None:
        self.add("head", _token(tree.children[0]), _c10d_head)  # "[rank1]:" is head["global_rank"], not the record's rank
        if len(tree.children) > 1:
            self._collective_or("c10d_log", _token(tree.children[1]))

    def on_pd_timeout(self, tree: Tree) -> None:
        first = tree.children[0]
        if isinstance(first, Token) and first.type == "PD_BOOTSTRAP_TIMEOUT":
            self.const["stage"] = "bootstrap"
        elif isinstance(first, Token) and first.type == "PD_WAITING_TIMEOUT":
            self.const["stage"] = "waiting"
        else:
            self.const["stage"] = "waiting"
            self.add("bootstrap_room", _token(first), _to_int)
        self.generic(tree)

    def _payload(self, kind: str, tok: Token, start: int | None = None) -> None:
        a = _span(tok)[0] if start is None else start
        for name, conv in REQUEST_FIELDS[kind].items():
            self.add_span(name, a, self.length, conv)
        self.memo_ok = False  # the payload's figures sit at offsets that depend on its text

    def on_request_receive(self, tree: Tree) -> None:
        self._payload("request_receive", _token(tree.children[1]))

    def on_request_finish(self, tree: Tree) -> None:
        self._payload("request_finish", _token(tree.children[1]))

    def on_req_time_stats(self, tree: Tree) -> None:
        self._payload("req_time_stats", _token(tree.children[1]), _span(_token(tree.children[0]))[1])

    def on_request_json(self, tree: Tree) -> None:
        tok = _token(tree.children[0])
        self._payload("request_json", tok)
        m = _JSON_STAMP.match(tok)
        if m:
            start = _span(tok)[0]
            self.ts = (start + m.start(1), start + m.end(1))

    def on_pyspy_process(self, tree: Tree) -> None:
        self.add("pid", _token(tree.children[0]), _word_int(1))
        self.add("title", _token(tree.children[1]), _to_strip)

    def on_pyspy_python(self, tree: Tree) -> None:
        self.add("python", _token(tree.children[0]), _word(1))

    def on_nccl_debug(self, tree: Tree) -> None:
        toks = _tokens(tree)
        self.add("host", toks["NCCL_HOST"][0], _to_str)
        self.numbers(toks["INT"], ("pid", "tid", "device"))
        self.add("level", toks["NCCL_LEVEL"][0], _to_str)
        self.generic(tree)

    def on_vllm_log(self, tree: Tree) -> None:
        self.add("level", _token(tree.children[0]), _word(0))
        self.add("source_loc", _token(tree.children[1]), _to_str)
        self.generic(tree)

    def on_glog(self, tree: Tree) -> None:
        self.add("level", _token(tree.children[0]), itemgetter(0))
        self.add("source_loc", _token(tree.children[1]), _to_str)
        self.generic(tree)

    def on_std_log(self, tree: Tree) -> None:
        toks = _tokens(tree)
        stamp = toks["STD_STAMP"][0]
        self.ts = _span(stamp)
        for tok in toks.get("STD_LEVEL", ()):
            self.add("level", tok, _word(0))
        self.generic(tree)

    def on_launch_command(self, tree: Tree) -> None:
        self.add("command", _token(tree.children[0]), _to_strip)

    def on_export_env(self, tree: Tree) -> None:
        self.add("name", _token(tree.children[0]), _to_str)
        if len(tree.children) > 1:
            self.add("value", _token(tree.children[1]), _to_strip)

    def on_dp_launch(self, tree: Tree) -> None:
        self.add("dp_rank", _token(tree.children[0]), _to_int)
        self.add("base_gpu_id", _token(tree.children[1]), _to_int)

    def on_warmup_skipped(self, tree: Tree) -> None:
        self.to_end("reason", _token(tree.children[0]))

    def on_subprocess_crashed(self, tree: Tree) -> None:
        toks = _tokens(tree)
        self.add("name", toks["PROC_NAME"][0], _to_str)
        self.add("pid", toks["INT"][0], _to_int)
        self.add("exit_code", toks["SIGNED"][0], _to_int)
        self.generic(tree)

    def on_crash_dump(self, tree: Tree) -> None:
        for tok in _tokens(tree).get("TEXT", ()):
            self.add("folder", tok, _to_strip)

    def on_watchdog_timeout(self, tree: Tree) -> None:
        toks = _tokens(tree)
        self.const["family"] = "sglang_watchdog"
        self.add("component", toks["WATCHDOG"][0], _watchdog_component)
        self.add("watchdog_timeout_s", toks["NUMBER"][0], _number_conv(toks["NUMBER"][0]))
        for tok in toks.get("WORD", ()):
            self.add("soft", tok, _to_bool)
        self.generic(tree)

    def on_watchdog_debug(self, tree: Tree) -> None:
        self.add("component", _token(tree.children[0]), _word(0))
        self.generic(tree)

    def on_watchdog_detail(self, tree: Tree) -> None:
        self.to_end("message", _token(tree.children[0]))

    def on_pyspy_dump(self, tree: Tree) -> None:
        self.add("pid", _token(tree.children[0]), _to_int)

    def on_health_check_failed(self, tree: Tree) -> None:
        toks = _tokens(tree)
        for tok in toks.get("NUMBER", ()):
            self.add("timeout_s", tok, _number_conv(tok))
        for name, tok in zip(("tic_start", "last_heartbeat"), toks.get("CLOCK", ())):
            self.add(name, tok, _to_str)
        self.generic(tree)

    def on_weights_ready(self, tree: Tree) -> None:
        self.add("elapsed_s", _token(tree.children[0]), _to_float)

    def on_weights_not_ready(self, tree: Tree) -> None:
        self.add("timeout_s", _token(tree.children[0]), _number_conv(_token(tree.children[0])))
        self.add("initial_weights_loaded", _token(tree.children[1]), _to_bool)

    def on_server_args(self, tree: Tree) -> None:
        self.add("raw", _token(tree.children[0]), _to_strip)

    def on_blank(self, tree: Tree) -> None:
        pass

    def on_indented(self, tree: Tree) -> None:
        pass

    def on_tb_caret(self, tree: Tree) -> None:
        pass

    def on_tb_chain(self, tree: Tree) -> None:
        self.add("chain", _token(tree.children[0]), _to_strip)


def _exc_source(s: str) -> str:
    s = s.strip().rstrip(":")
    if s.startswith("Exception in "):
        return s[len("Exception in "):]
    return s.replace(" hit an exception", "")


_CAPTURE_GRAPHS = ("decode", "prefill", "verify", "extend", "piecewise")


def _capture_words(head: str) -> list[str]:
    """``Capture draft extend cuda graph begin`` -> ``["draft", "extend", "cuda"]``."""
    return head.split(" graph ")[0].split()[1:]


def _capture_role(head: str) -> str:
    return "draft" if "draft" in _capture_words(head) else "target"


def _capture_graph(head: str) -> str:
    return next((w for w in _capture_words(head) if w in _CAPTURE_GRAPHS), "decode")


def _capture_device(head: str) -> str:
    return _capture_words(head)[-1].lower()


def _paren_int(s: str) -> int:
    """``" (step 2)"`` -> 2."""
    return int(s.strip()[1:-1].split()[-1])


def _bracket_int(s: str) -> int:
    """``" [1234]"`` -> 1234 (the forward-iteration counter)."""
    return int(s.strip()[1:-1])


def _strip_colon(s: str) -> str:
    return s.rstrip(":")


def _word(index: int) -> Conv:
    def conv(s: str) -> str:
        return s.split()[index]

    return conv


def _before(sep: str) -> Conv:
    def conv(s: str) -> str:
        return s.split(sep)[0].strip()

    return conv


_POOL_CAP = re.compile(r"\((\d+) tokens, ([\d.]+) Gi?B\)")


def _pool_cap(group: int) -> Conv:
    def conv(s: str) -> int | float | None:
        m = _POOL_CAP.search(s)
        if not m:
            return None
        return int(m.group(1)) if group == 1 else float(m.group(2))
    return conv


def _watchdog_component(s: str) -> str:
    """``"Scheduler watchdog timeout"`` -> Scheduler; v0.3.6 - v0.5.5 only the scheduler had one."""
    return "Scheduler" if s.startswith("Watchdog") else s.split()[0]


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
    out: dict[str, Any] = {"pct": int(m.group(1)), "n": int(m.group(2)), "total": int(m.group(3))}
    rate = _TQDM_RATE.search(m.group(4))  # "00:03<00:04,  1.74it/s" or "1:54:01<6:51:05, 71.08s/it"
    if rate:
        out["s_per_it" if rate.group(2) == "s/it" else "it_per_s"] = float(rate.group(1))
    return out


_TQDM_RATE = re.compile(r"([\d.]+)(s/it|it/s)")


_C10D_RE = re.compile(r"(?:\[rank(\d+)\]:)?\[([EFWI])")


_JSON_STAMP = re.compile(r'\{"timestamp": ?"([^"]*)"')


def _word_int(index: int) -> Conv:
    def conv(s: str) -> int | None:
        digits = re.sub(r"\D", "", s.split()[index]) if len(s.split()) > index else ""
        return int(digits) if digits else None
    return conv


def _c10d_head(s: str) -> dict[str, Any]:
    """``[rank1]:[W924 ...]`` -> global rank 1, level W (the rank part is optional)."""
    m = _C10D_RE.match(s)
    if not m:
        return {}
    head: dict[str, Any] = {"level": m.group(2)}
    if m.group(1) is not None:
        head["global_rank"] = int(m.group(1))
    return head


def warm_up() -> None:
    """Build the parsers ahead of time (a live follower must not pay for it on a crash)."""
    _parsers()


def plan_record(text: str) -> Plan:
    """Parse one record with the grammar; an unknown record still keeps prefix and text."""
    record, fallback = _parsers()
    if not text.strip():
        return Plan.make("blank", None, None, ())
    try:
        return _Planner(len(text)).plan(record.parse(text)).fitted(text)
    except (LarkError, IndexError, KeyError):
        pass
    try:
        return _Planner(len(text)).plan(fallback.parse(text)).fitted(text)
    except (LarkError, IndexError, KeyError):
        return Plan.make("other", None, None, ())
