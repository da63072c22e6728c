"""A crash fingerprint that stays the same across runs, hosts and SGLang versions.

Exception type (the class name, without the module that PyTorch moved it between:
``torch.cuda.OutOfMemoryError`` and ``torch.OutOfMemoryError`` are one class) +
innermost SGLang function, named with its module (``tp_worker.__init__``, not a bare
``__init__`` that every class has) + phase. Line numbers, paths, addresses and numbers
are masked, so the same failure on another machine, at another batch size or after a
file moved to another folder inside the package gets the same id. A traceback cut
before its exception line says so (``exception not in log``) instead of naming a class.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

_ADDR = re.compile(r"0x[0-9a-fA-F]+")
# A path begins where a run of path characters begins, or at a drive letter: the leftmost
# match of the plain pattern, without trying every later position of a long run in turn
# (which made a megabyte of word characters take minutes).
_PATH = re.compile(r"(?:(?<![\w.@+-])|(?=[A-Za-z]:))(?:[A-Za-z]:)?(?:[\w.@+-]*/)+[\w.@+-]+")
_NUM = re.compile(r"\d+(?:\.\d+)?")
_SPACE = re.compile(r"\s+")


def mask(text: str) -> str:
    """Text with addresses, paths and numbers replaced by ``<addr>``, ``<path>``, ``<n>``."""
    text = _ADDR.sub("<addr>", text)
    text = _PATH.sub("<path>", text)
    text = _NUM.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()


def _is_sglang(path: str | None) -> bool:
    p = (path or "").replace("\\", "/")
    return "/sglang/" in p or p.startswith("sglang/")


def _stem(path: str) -> str:
    """The module of a frame's file: ``tp_worker`` for ``.../managers/tp_worker.py``."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name[:-3] if name.endswith(".py") else name


def _exception_type(crash: Mapping[str, Any]) -> str:
    exc = crash.get("exception")
    if exc:
        return mask(str(exc).rsplit(".", 1)[-1])
    if crash.get("garbled"):
        return "garbled traceback"
    if crash.get("native"):
        head = " ".join(mask(str(crash.get("message") or crash.get("text") or "")).split()[:8])
        return f"native abort: {head}" if head else "native abort"
    if not crash.get("frames") and crash.get("sigquit_lines") is not None and not crash.get("text"):
        return "sigquit"
    return "exception not in log"


def fingerprint(crash: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{id, exception, function, phase}`` for a summary's ``crash``, or None without one.

    ``id`` is 12 hex digits of SHA-1 over the other three. ``function`` is the innermost
    frame whose file is inside the ``sglang`` package, as ``module.function`` (the file's
    stem), None when no such frame shows.
    """
    if not crash:
        return None
    function = None
    for frame in reversed(crash.get("frames") or []):
        if _is_sglang(frame.get("path")) and frame.get("func"):
            module = _stem(str(frame["path"]))
            function = mask(f"{module}.{frame['func']}" if module else str(frame["func"]))
            break
    exception = _exception_type(crash)
    phase = crash.get("phase") or "unknown"
    key = f"{exception}|{function or '-'}|{phase}"
    return {"id": hashlib.sha1(key.encode()).hexdigest()[:12], "exception": exception,
            "function": function, "phase": phase}
