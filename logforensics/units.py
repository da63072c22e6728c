"""How the project writes a memory figure, and a cut text, for people: one formatter for
every layer that writes a sentence (the model's reasons, the verdict, the renderers).

Figures are carried in GiB (SGLang's "GB" is GiB: bytes / 2**30). Below 1 GiB a figure is
written in MiB, so PyTorch's ``Tried to allocate 896.00 KiB`` reads ``0.88 MiB`` rather
than ``0.00 GiB``.
"""

from __future__ import annotations

from typing import Any

MIB_PER_GIB = 1024


def gib(value: Any, *, missing: str = "?", unit: bool = True, digits: int = 2) -> str:
    """``21.7`` -> ``"21.70 GiB"``, ``896 / 2**20`` -> ``"0.88 MiB"``, None -> ``missing``.

    ``unit=False`` is for a column already headed GiB: a figure of 1 GiB or more is then
    written without its unit, one below 1 GiB still says MiB.
    """
    if value is None or isinstance(value, bool):
        return missing
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if v != 0 and abs(v) < 1:
        return f"{v * MIB_PER_GIB:.{digits}f} MiB"
    return f"{v:.{digits}f} GiB" if unit else f"{v:.{digits}f}"


def fmt(value: Any, digits: int = 2, *, key: str = "", missing: str = "-") -> str:
    """A figure for people, the one number formatter of every renderer.

    A key ending in ``_gib`` goes through :func:`gib` (its column is headed GiB). A float is
    rounded to ``digits`` places without float noise or trailing zeros, so a server
    argument reads as SGLang printed it (``0.88``, not ``0.8800``) and a rate as the log
    has it (``1700.25``); ``missing`` stands for an unknown figure.
    """
    if key.endswith("_gib"):
        return gib(value, missing=missing, unit=False)
    if value is None:
        return missing
    if isinstance(value, float):
        text = f"{value:.{digits}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return str(value)


#: What ends a text that was cut (:func:`clip`): a cut is always marked.
ELLIPSIS = "\u2026"


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a word boundary with an ellipsis when cut (never
    a number cut short without a mark: "last_heartbeat time: 1" for 11:54:35)."""
    if len(text) <= limit:
        return text
    room = max(1, limit - 1)
    head = text[:room]
    cut = head.rfind(" ")
    if cut >= room // 2:
        head = head[:cut]
    else:  # no space near the end: at least do not end inside a word or a number
        i = room
        while i > room // 2 and _in_word(text[i - 1]) and _in_word(text[i]):
            i -= 1
        if i > room // 2:
            head = text[:i]
    return head.rstrip(" ,;:") + ELLIPSIS


def _in_word(ch: str) -> bool:
    return ch.isalnum() or ch in "._"
