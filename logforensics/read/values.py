"""How a token's text becomes a value: the converters a plan attaches to a span, and field names.

A converter runs when an event's field is read (:class:`~.plan.Fields`), possibly
millions of times, so the common ones are C builtins. Every pattern here matches digits
with ``\\d`` only: the fast path reuses a plan for lines that differ only in their digits.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import itemgetter
from typing import Any, TypeVar

from ..events.types import BOOL, FLOAT, INT, NULL, STR, Type, list_of, struct

Conv = Callable[[str], Any]
C = TypeVar("C")

#: Each converter's declared type (``events.types``): the type of every value it gives,
#: None aside. The event schema (``events/schema.py``) is derived from these.
TYPES: dict[Any, Type] = {}


def typed(t: Type, conv: C) -> C:
    """Declare ``conv``'s type, once, where the converter is made."""
    TYPES[conv] = t
    return conv


def returns(t: Type) -> Callable[[C], C]:
    """Decorator form of :func:`typed`."""
    def mark(conv: C) -> C:
        return typed(t, conv)
    return mark


def type_of(conv: Any) -> Type:
    """A converter's declared type; a converter without one is an error, not a guess."""
    try:
        return TYPES[conv]
    except (KeyError, TypeError):
        raise LookupError(f"converter {conv!r} declares no type (read/values.py: typed)") from None


# Converters are C builtins where possible: they run once per value of every line.
to_int = typed(INT, int)
to_float = typed(FLOAT, float)
to_str = typed(STR, str)
to_strip = typed(STR, str.strip)
first_char = typed(STR, itemgetter(0))
_BOOLS = {"True": True, "False": False, "true": True, "false": False}


@returns(BOOL)
def to_bool(s: str) -> bool | str:
    return _BOOLS.get(s, s)


@returns(NULL)
def to_none(s: str) -> None:
    return None


def to_word(s: str) -> Any:
    """A word of any of those three meanings (the compiled writer's ``OP_WORD`` mirrors it);
    the planner picks the one meaning by :func:`word_conv` instead."""
    if s == "None":
        return None
    if s in ("True", "False"):
        return s == "True"
    return s


def word_conv(text: str) -> Conv:
    """A word's converter, chosen by its letters: ``None`` is no value, ``True``/``False`` a
    bool, any other word text (so each converter has one type)."""
    if text == "None":
        return to_none
    if text in ("True", "False"):
        return to_bool
    return to_str


@returns(list_of(INT))
def to_list(s: str) -> list[Any]:
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


@returns(STR)
def to_quoted(s: str) -> str:
    return s[1:-1]


def number_conv(text: str) -> Conv:
    """int for a number written without a point, else float (digits do not decide it)."""
    return to_int if re.fullmatch(r"-?\d+", text) else to_float


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


def list_name(name: str) -> str:
    """A list's field name: ``bs`` -> ``bs_list``. One name has one type in every kind
    (``events/schema.py``): ``bs=[1, 2, 4]`` of a capture is a list, ``bs=64`` of a
    progress bar one number."""
    return name if name.endswith("_list") else name + "_list"


# -- parts of a token's text -----------------------------------------------------------------
@returns(STR)
def strip_colon(s: str) -> str:
    return s.rstrip(":")


@returns(STR)
def first_word(s: str) -> str:
    """``CUDA`` of ``CUDA error: ``."""
    return s.split(None, 1)[0] if s.split() else s


@returns(STR)
def argparse_prog(s: str) -> str:
    """The program of argparse's error line, ``launch_server.py`` of ``launch_server.py: error: ``."""
    return s.split(": error: ", 1)[0]


@returns(STR)
def runpy_prog(s: str) -> str:
    """The interpreter of runpy's error line, ``/venv/bin/python`` of ``/venv/bin/python: ``."""
    return s.strip().removesuffix(":")


@returns(STR)
def after_colon(s: str) -> str:
    return s.strip().lstrip(":").strip()


#: The words that begin a decode server's failure to reach a prefill server's bootstrap.
_PARALLEL_INFO = "Error fetching prefill parallel info"


@returns(STR)
def kv_side(s: str) -> str:
    """The PD side of a KV transfer failure: its first word, a decode server's where it could
    not fetch the prefill server's parallel info."""
    return "Decode" if s.startswith(_PARALLEL_INFO) else s.split()[0]


@returns(STR)
def kv_stage(s: str) -> str:
    """The stage of a KV transfer failure: its second word; fetching the prefill server's
    parallel info is the bootstrap."""
    return "bootstrap" if s.startswith(_PARALLEL_INFO) else s.split()[1]


def word(index: int) -> Conv:
    """The ``index``-th whitespace-separated word."""
    def conv(s: str) -> str:
        return s.split()[index]

    return typed(STR, conv)


def word_int(index: int) -> Conv:
    """The digits of the ``index``-th word (``"Process 231587:"`` -> 231587 for index 1)."""
    def conv(s: str) -> int | None:
        digits = re.sub(r"\D", "", s.split()[index]) if len(s.split()) > index else ""
        return int(digits) if digits else None
    return typed(INT, conv)


def before(sep: str) -> Conv:
    """The text before ``sep``, stripped."""
    def conv(s: str) -> str:
        return s.split(sep)[0].strip()

    return typed(STR, conv)


def _param_name(s: str) -> str:
    """A model parameter's name in a loader's "not found in params_dict" warning, without the
    word "Parameter" before it or the "(mapped to ...)" after it."""
    name = s.split(" not found in params_dict", 1)[0].strip()
    return name.removeprefix("Parameter ").split(" (mapped to ", 1)[0]


param_name = typed(STR, _param_name)


def int_after(prefix: str) -> Conv:
    """The integer right after ``prefix``."""
    pattern = re.compile(re.escape(prefix) + r"(-?\d+)")

    def conv(s: str) -> int | None:
        m = pattern.search(s)
        return int(m.group(1)) if m else None
    return typed(INT, conv)


def group(pattern: re.Pattern[str], index: int = 1) -> Conv:
    """A group of ``pattern``'s first match."""
    def conv(s: str) -> str | None:
        m = pattern.search(s)
        return m.group(index) if m else None
    return typed(STR, conv)


@returns(INT)
def paren_int(s: str) -> int:
    """``" (step 2)"`` -> 2."""
    return int(s.strip()[1:-1].split()[-1])


@returns(INT)
def bracket_int(s: str) -> int:
    """``" [1234]"`` -> 1234 (the forward-iteration counter)."""
    return int(s.strip()[1:-1])


@returns(STR)
def strip_brackets(s: str) -> str:
    return s.strip("[]")


@returns(STR)
def strip_quotes(s: str) -> str:
    return s.strip().strip('"')


# -- record-specific texts -------------------------------------------------------------------
@returns(STR)
def exc_source(s: str) -> str:
    """``"Scheduler hit an exception:"`` / ``"Exception in ModelTpServer:"`` -> the component."""
    s = s.strip().rstrip(":")
    if s.startswith("Exception in "):
        return s[len("Exception in "):]
    return s.replace(" hit an exception", "")


@returns(STR)
def init_state_source(s: str) -> str:
    """``"router init state:"`` -> ``Router``; ``"detoken init state:"`` -> ``DetokenizerManager``;
    ``"Initialization failed. controller_init_state:"`` -> ``Controller``, its
    ``router_init_state`` -> ``Router`` (v0.1.x's launcher printing a child's failed start-up)."""
    name = s.removeprefix("Initialization failed. ")
    return "Router" if name.startswith("router") else "DetokenizerManager" if "detoken" in name else "Controller"


@returns(FLOAT)
def shell_seconds(s: str) -> float:
    """``"real\t1m49.402s"`` -> 109.402; ``"real 49.40"`` (``time -p``) -> 49.4."""
    t = s.split()[1]
    if t.endswith("s"):
        minutes, _, secs = t[:-1].partition("m")
        return int(minutes) * 60 + float(secs)
    return float(t)


@returns(STR)
def ray_task_source(s: str) -> str:
    """``"ray::SGLangEngine.init()"`` -> ``Ray task SGLangEngine.init`` (the task or actor method
    whose remote traceback follows)."""
    return f"Ray task {s[5:-2]}"


_CAPTURE_GRAPHS = ("decode", "prefill", "verify", "extend", "piecewise")


def _capture_words(head: str) -> list[str]:
    """``Capture draft extend cuda graph begin`` -> ``["draft", "extend", "cuda"]``."""
    return head.split(" graph ")[0].split()[1:]


@returns(STR)
def capture_role(head: str) -> str:
    return "draft" if "draft" in _capture_words(head) else "target"


@returns(STR)
def capture_graph(head: str) -> str:
    return next((w for w in _capture_words(head) if w in _CAPTURE_GRAPHS), "decode")


@returns(STR)
def capture_device(head: str) -> str:
    return _capture_words(head)[-1].lower()


_POOL_CAP = re.compile(r"\((\d+) tokens, ([\d.]+) Gi?B\)")


def pool_cap(index: int) -> Conv:
    """``"... cap (724224 tokens, 16.15 GB) ..."``: the tokens (1) or the GiB (2)."""
    def conv(s: str) -> int | float | None:
        m = _POOL_CAP.search(s)
        if not m:
            return None
        return int(m.group(1)) if index == 1 else float(m.group(2))
    return typed(INT if index == 1 else FLOAT, conv)


@returns(STR)
def watchdog_component(s: str) -> str:
    """``"Scheduler watchdog timeout"`` -> Scheduler; v0.3.6 - v0.5.5 only the scheduler had one."""
    return "Scheduler" if s.startswith("Watchdog") else s.split()[0]


@returns(STR)
def tqdm_desc(s: str) -> str:
    return s.strip().rstrip(":").strip()


def desc_number(key: str) -> Conv:
    """``"Capturing batches (bs=64 avail_mem=11.08 GB)"``: the integer after ``key=``."""
    pattern = re.compile(re.escape(key) + r"=(\d+)")

    def conv(s: str) -> int | None:
        m = pattern.search(s)
        return int(m.group(1)) if m else None

    return typed(INT, conv)


_AVAIL_RE = re.compile(r"avail_mem=([\d.]+) GB")


@returns(FLOAT)
def desc_avail(s: str) -> float | None:
    m = _AVAIL_RE.search(s)
    return float(m.group(1)) if m else None


_TQDM_RE = re.compile(r"(\d+)%.*?(\d+)/(\d+) \[([^\]]*)(?:\]|$)")
_TQDM_RATE = re.compile(r"([\d.]+)(s/it|it/s)")


@returns(struct(pct=INT, n=INT, total=INT, s_per_it=FLOAT, it_per_s=FLOAT))
def tqdm_progress(s: str) -> dict[str, Any]:
    m = _TQDM_RE.search(s)
    if not m:
        return {}
    out: dict[str, Any] = {"pct": int(m.group(1)), "n": int(m.group(2)), "total": int(m.group(3))}
    rate = _TQDM_RATE.search(m.group(4))  # "00:03<00:04,  1.74it/s" or "1:54:01<6:51:05, 71.08s/it"
    if rate:
        out["s_per_it" if rate.group(2) == "s/it" else "it_per_s"] = float(rate.group(1))
    return out


_C10D_RE = re.compile(r"(?:\[[Rr]ank(\d+)\]:)?\[([EFWIT])")


@returns(struct(level=STR, global_rank=INT))
def c10d_head(s: str) -> dict[str, Any]:
    """``[rank1]:[W924 ...]`` -> global rank 1, level W (the rank part is optional)."""
    m = _C10D_RE.match(s)
    if not m:
        return {}
    head: dict[str, Any] = {"level": m.group(2)}
    if m.group(1) is not None:
        head["global_rank"] = int(m.group(1))
    return head


#: ``{"timestamp": "2025-03-07T21:49:34.123456", ...``: a JSON request record's own stamp
JSON_STAMP = re.compile(r'\{"timestamp": ?"([^"]*)"')

_IMAGE = re.compile(r"With image: (\S+?),? ")
_VERSION_IN_IMAGE = re.compile(r"sglang[-_:v]?(\d+\.\d+(?:\.\d+)*(?:\.post\d+|rc\d+)?)", re.IGNORECASE)
_ARGUMENTS = re.compile(r"arguments: \[(.*)\]")
image = group(_IMAGE)
arguments = group(_ARGUMENTS)


def names_image(s: str) -> bool:
    """A launcher's message that names the container image it runs."""
    return _IMAGE.search(s) is not None


def names_arguments(s: str) -> bool:
    """A launcher's message that gives the command line it runs."""
    return _ARGUMENTS.search(s) is not None


@returns(STR)
def image_version(s: str) -> str | None:
    """SGLang's version in the image name: ``quay.io/gpustack/runner:cann8.2-910b-sglang0.5.2`` -> 0.5.2."""
    m = _IMAGE.search(s)
    v = _VERSION_IN_IMAGE.search(m.group(1)) if m else None
    return v.group(1) if v else None


@returns(STR)
def gpustack_level(s: str) -> str:
    """``"2025-11-23 ... - gpustack.worker.backends.sglang - INFO - "`` -> INFO."""
    return s.rstrip(" -").rsplit(" - ", 1)[1]


@returns(INT)
def dedup_count(s: str) -> int:
    """``[repeated 3x across cluster]`` -> 3."""
    return int(s.split("repeated ")[1].split("x")[0])


#: The leads of SGLang's logger.exception calls whose except clause goes on, and the
#: source each names (``model.failures.CAUGHT_SOURCES``).
CAUGHT_LEADS = {"Unexpected transfer worker error for room": "transfer_worker"}


#: The source of a traceback Python's threading reports for a thread ("Exception in thread X:").
THREAD_SOURCE = "thread"


@returns(STR)
def thread_source(s: str) -> str:
    """``Exception in thread Thread-4 (watchdog_thread):`` -> ``thread``."""
    return THREAD_SOURCE


#: The source of a traceback that multiprocessing printed for a child whose target raised
#: ("Process Process-1:3:" above it): the child's end, in a process its name does not place.
PROCESS_SOURCE = "process"


@returns(STR)
def process_source(s: str) -> str:
    """``Process Process-1:3:`` -> ``process``."""
    return PROCESS_SOURCE


#: The source of a traceback that another program's logger logged (Python's default
#: ``LEVEL:logger:message`` line right above it: ``logger.exception``, whose code goes on).
LOGGED_SOURCE = "logged"


@returns(STR)
def basic_log_level(s: str) -> str:
    """``ERROR:xoscar.api:`` -> ``ERROR``."""
    return s.split(":", 1)[0]


@returns(STR)
def basic_log_name(s: str) -> str:
    """``ERROR:xoscar.api:`` -> ``xoscar.api``."""
    return s.split(":")[1]


@returns(STR)
def py_log_level(s: str) -> str:
    """``2025-05-03 23:03:33,244 xinference.core.worker 141 ERROR    `` -> ``ERROR``."""
    return s.split()[-1]


@returns(STR)
def py_log_name(s: str) -> str:
    """``2025-05-03 23:03:33,244 xinference.core.worker 141 ERROR    `` -> ``xinference.core.worker``."""
    return s.split()[2]


@returns(STR)
def caught_source(s: str) -> str:
    """``Unexpected transfer worker error for room 17`` -> ``transfer_worker``."""
    return next(src for lead, src in CAUGHT_LEADS.items() if s.startswith(lead))


@returns(STR)
def pool_check_name(s: str) -> str:
    """``[swa] total=`` -> ``swa``."""
    return s[1:s.index("]")]


@returns(STR)
def env_name(s: str) -> str:
    return s.split("=", 1)[0]


@returns(STR)
def env_value(s: str) -> str:
    return s.split("=", 1)[1]


@returns(STR)
def oom_what(s: str) -> str | None:
    """``"Failed to initialize lk_moe: CUDA out of memory."`` -> ``"Failed to initialize lk_moe"``
    (``"Worker encountered error CUDA out of memory."`` -> ``"Worker encountered error"``,
    ``"torch_npu.memory: [ERROR] [383554] NPU out of memory."`` -> ``"torch_npu.memory: [ERROR] [383554]"``)."""
    head = re.split(r"(?::|(?<=\berror)|(?<=\])) (?:CUDA|HIP|NPU) out of memory\.", s, maxsplit=1)[0]
    return head.strip() or None


pyspy_state = group(re.compile(r"\((\w[^)]*)\)"))


_PYSPY_AT = re.compile(r"\(([^()\s]+?)(?::(\d+))?\)\s*$")


@returns(STR)
def pyspy_path(s: str) -> str | None:
    """The file (or native library) of a py-spy frame: ``select (selectors.py:415)`` -> ``selectors.py``,
    ``poll (libc.so.6)`` -> ``libc.so.6``."""
    m = _PYSPY_AT.search(s)
    return m.group(1) if m else None


@returns(INT)
def pyspy_lineno(s: str) -> int | None:
    """Its line; none for a native frame without debug information."""
    m = _PYSPY_AT.search(s)
    return int(m.group(2)) if m and m.group(2) else None


@returns(INT)
def pyspy_thread_id(s: str) -> int | None:
    """``Thread 88693 (idle)`` -> 88693; ``Thread 0x7F3A (active)`` (the Python thread's id) -> 0x7F3A."""
    m = re.match(r"\s*Thread (?:(\d+)(?![xX])|\d[xX]([0-9A-Fa-f]+))", s)
    if m is None:
        return None
    return int(m.group(1)) if m.group(1) is not None else int(m.group(2), 16)


def literal_structure(text: str) -> tuple[list[int], int]:
    """Of a Python literal's text (a ``ServerArgs(...)`` or ``{...}`` dump): the offsets of
    its commas outside brackets and quoted strings (backslash escapes in quotes), and how many
    brackets it leaves open, plus one for an open quote (more than 0: a dump cut short)."""
    commas: list[int] = []
    depth, quote, escaped = 0, "", False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            commas.append(i)
    return commas, depth + (1 if quote else 0)


_ROUTER_LEVEL = re.compile(r" ?(TRACE|DEBUG|INFO|WARN|ERROR) ")
_ROUTER_MODULE = re.compile(r"((?:sglang_router_rs|smg)(?:::\w+)*): $")
#: sgl-router's head: its level (None where the line has none) and its module.
router_level = group(_ROUTER_LEVEL)
router_module = group(_ROUTER_MODULE)
