"""Read ``server_args=...`` dumps and the environment a log shows.

SGLang up to v0.5.16 prints ``server_args=ServerArgs(model_path='...', tp_size=8, ...)``
(a dataclass repr); v0.5.20+ prints ``server_args={...}`` (a dict). Values are Python
literals, read with ``ast.literal_eval`` (never ``eval``); anything that is not a
literal (an enum repr, a truncated tail) is kept as its text.
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import Any

from ..read.values import literal_structure


def parse_server_args(raw: str) -> tuple[dict[str, Any], str]:
    """``(args, form)`` where form is ``repr``, ``dict`` or ``unknown``."""
    raw = raw.strip()
    if raw.startswith("ServerArgs(") or re.match(r"\w+\(", raw):
        body = raw[raw.index("(") + 1:]
        if body.endswith(")"):
            body = body[:-1]
        return _pairs(body, sep="="), "repr"
    if raw.startswith("{"):
        value = _literal(raw)
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}, "dict"
        body = raw[1:-1] if raw.endswith("}") else raw[1:]
        return {k.strip("'\""): v for k, v in _pairs(body, sep=":").items()}, "dict"
    return {}, "unknown"


def _split_top(body: str) -> list[str]:
    """Split on commas that are not inside brackets or quotes."""
    cuts = [-1, *literal_structure(body)[0], len(body)]
    parts = (body[a + 1:b].strip() for a, b in zip(cuts, cuts[1:]))
    return [p for p in parts if p]


def _pairs(body: str, sep: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in _split_top(body):
        if sep not in part:
            continue
        key, _, value = part.partition(sep)
        key = key.strip()
        if not re.fullmatch(r"['\"]?[A-Za-z_][\w.\-]*['\"]?", key):
            continue
        out[key.strip("'\"")] = _literal(value.strip())
    return out


def _literal(text: str) -> Any:
    """``text`` as the Python literal it is, else the text itself. CPython 3.11.7's AST
    converter may raise ``SystemError`` ("AST constructor recursion depth mismatch") when other
    Python code ran while it built the tree (a collector's callback): the same text is read
    again once, and kept as text should it fail again."""
    for _ in range(2):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return text
        except SystemError:  # pragma: no cover - CPython 3.11.7's AST converter (the docstring)
            continue
    return text


_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def env_from_command(command: str) -> dict[str, str]:
    """Environment assignments in front of a launch command (``FOO=1 python -m ...``)."""
    cmd = re.sub(r"^.*?[#$]\s+", "", command) if re.match(r"^\(?[\w.\-]*\)?\s*\S*@\S*[#$]", command) else command
    try:
        words = shlex.split(cmd)
    except ValueError:
        words = cmd.split()
    env: dict[str, str] = {}
    for word in words:
        if word in ("env", "sudo", "-E"):
            continue
        key, _, value = word.partition("=")
        if not _ENV_ASSIGN.match(word) or _INTERPRETER.fullmatch(value):
            break  # (a label before the command: SGLang's test harness prints "command=python3 -m ...")
        env[key] = value
    return env


#: Python, the program of a launch command: never an environment variable's value before it
_INTERPRETER = re.compile(r"\S*python[\d.]*")


def args_from_command(command: str) -> list[str]:
    """The words of a launch command after its environment assignments."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return [w for w in words if not _ENV_ASSIGN.match(w)]
