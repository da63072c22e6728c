"""Decompose PyTorch's out-of-memory message into its figures, in GiB.

PyTorch's caching allocator (``c10/cuda/CUDACachingAllocator.cpp``) writes sizes with
binary units (``format_size``: bytes, KiB, MiB, GiB). Three wordings are in the wild:
the current one, an older one with the ``capacty`` typo, and the oldest
parenthesised one; ROCm builds say ``HIP`` instead of ``CUDA``.
"""

from __future__ import annotations

import re
from typing import Any

_SIZE = r"([\d.]+ (?:bytes|KiB|MiB|GiB|TiB|B|KB|MB|GB))"
_UNITS = {"bytes": 1, "B": 1, "KiB": 2**10, "KB": 2**10, "MiB": 2**20, "MB": 2**20,
          "GiB": 2**30, "GB": 2**30, "TiB": 2**40}

_PATTERNS = {
    "tried_gib": re.compile(r"Tried to allocate " + _SIZE),
    "gpu": re.compile(r"\bGPU (\d+)"),
    "total_gib": re.compile(r"total capac\w* of " + _SIZE + r"|" + _SIZE + r" total capacity"),
    "free_gib": re.compile(r"of which " + _SIZE + r" is free|" + _SIZE + r" free\b"),
    "process_in_use_gib": re.compile(r"this process has " + _SIZE + r" memory in use"),
    "allocated_gib": re.compile(r"Of the allocated memory " + _SIZE + r"|" + _SIZE + r" already allocated"),
    "private_pools_gib": re.compile(r"with " + _SIZE + r" allocated in private pools"),
    "reserved_unallocated_gib": re.compile(r"and " + _SIZE + r" is reserved by PyTorch but unallocated"),
    "reserved_total_gib": re.compile(_SIZE + r" reserved in total by PyTorch"),
}
_OTHER_PROCESS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_OOM_MARKERS = ("out of memory", "OutOfMemoryError")


def to_gib(size: str) -> float:
    """``"32.00 MiB"`` -> 0.03125."""
    number, unit = size.split()
    return float(number) * _UNITS[unit] / 2**30


def is_oom(exception: str | None, message: str | None) -> bool:
    text = f"{exception or ''}: {message or ''}"
    return any(marker in text for marker in _OOM_MARKERS)


def decompose_oom(exception: str | None, message: str | None) -> dict[str, Any] | None:
    """The figures of an OOM message, or None when the exception is not an OOM."""
    if not is_oom(exception, message):
        return None
    text = " ".join((message or "").split())  # undo hard wraps and double spaces
    out: dict[str, Any] = {"device": "HIP" if "HIP out of memory" in text else "CUDA"}
    for name, pattern in _PATTERNS.items():
        m = pattern.search(text)
        if not m:
            out[name] = None
            continue
        value = next(g for g in m.groups() if g is not None)
        out[name] = int(value) if name == "gpu" else to_gib(value)
    out["other_processes"] = [
        {"pid": int(pid), "in_use_gib": to_gib(size)} for pid, size in _OTHER_PROCESS.findall(text)
    ]
    if out.get("in_use_gib") is None:
        out["in_use_gib"] = out["process_in_use_gib"]
    out["expandable_segments_hint"] = "expandable_segments" in text
    return out
