"""Decompose PyTorch's out-of-memory message into its figures, in GiB.

PyTorch's caching allocator (``c10/cuda/CUDACachingAllocator.cpp``) writes sizes with
binary units (``format_size``: bytes, KiB, MiB, GiB). Three wordings are in the wild:
the current one, an older one with the ``capacty`` typo, and the oldest
parenthesised one; ROCm builds say ``HIP`` instead of ``CUDA``.
"""

from __future__ import annotations

import re
from typing import Any

from ..events.types import BOOL, FLOAT, INT, STR, Type, list_of, struct

_SIZE = r"([\d.]+ ?(?:bytes|KiB|MiB|GiB|TiB|B|KB|MB|GB))"
_UNITS = {"bytes": 1, "B": 1, "KiB": 2**10, "KB": 2**10, "MiB": 2**20, "MB": 2**20,
          "GiB": 2**30, "GB": 2**30, "TiB": 2**40}

#: Spaces are optional between words: a terminal that hard-wrapped the message may have
#: dropped the one at the wrap (see :func:`decompose_oom`).
_PATTERNS = {
    "tried_gib": re.compile(r"[Tt]ried\s*to\s*allocate\s*" + _SIZE),
    "gpu": re.compile(r"\b(?:GPU|NPU)\s*(\d+)"),  # (the device number: torch_npu prints "NPU 0")
    "total_gib": re.compile(r"total\s*capac\w*\s*of\s*" + _SIZE + r"|" + _SIZE + r"\s*total\s*capacity"),
    "free_gib": re.compile(r"of\s*which\s*" + _SIZE + r"\s*is\s*free|" + _SIZE + r"\s*free\b"),
    "process_in_use_gib": re.compile(r"this\s*process\s*has\s*" + _SIZE + r"\s*memory\s*in\s*use"),
    "allocated_gib": re.compile(r"Of\s*the\s*allocated\s*memory\s*" + _SIZE + r"|" + _SIZE + r"\s*already\s*allocated"),
    "private_pools_gib": re.compile(r"with\s*" + _SIZE + r"\s*allocated\s*in\s*private\s*pools"),
    "reserved_unallocated_gib": re.compile(r"and\s*" + _SIZE + r"\s*is\s*reserved\s*by\s*PyTorch\s*but\s*unallocated"),
    "reserved_total_gib": re.compile(_SIZE + r"\s*reserved\s*in\s*total\s*by\s*PyTorch"),
}
#: The device the message names: PyTorch's "CUDA out of memory", ROCm's "HIP", Ascend's
#: torch_npu "NPU", "CUDA error: out of memory"; None when it names none.
_DEVICE = re.compile(r"\b(CUDA|HIP|NPU|XPU|MPS)(?: error:)?\s*out\s*of\s*memory")
_OTHER_PROCESS = re.compile(r"Process\s*(\d+)\s*has\s*" + _SIZE + r"\s*memory\s*in\s*use")
_PADDING = re.compile(r" {3,}")
_OOM_MARKERS = ("out of memory", "OutOfMemoryError", "allocation failed with OOM")
#: The allocator's warning when an allocation fails (c10's CUDACachingAllocator.cpp, a torch
#: ``[W...]`` record: the caller may free memory and go on), its sizes in bytes: "memory allocation
#: failed with OOM on device 0 while trying to allocate 113246208 bytes (free: 16187392, total: 25296044032)"
_ALLOC_WARNING = re.compile(r"allocation failed with OOM on device (\d+) while trying to allocate (\d+) bytes "
                            r"\(free: (\d+), total: (\d+)\)")


#: The type of :func:`decompose_oom`'s figures (an event's ``oom`` field).
OOM_TYPE: Type = struct(device=STR, **{name: INT if name == "gpu" else FLOAT for name in _PATTERNS},
                        other_processes=list_of(struct(pid=INT, in_use_gib=FLOAT)), in_use_gib=FLOAT,
                        expandable_segments_hint=BOOL)


def to_gib(size: str) -> float:
    """``"32.00 MiB"`` -> 0.03125."""
    number, unit = re.fullmatch(r"([\d.]+) ?(\w+)", size.strip()).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit] / 2**30


#: SGLang's KV allocator's own error (``alloc_token_slots``): its pool of token slots is full, in
#: tokens, not a device's memory ("Decode out of memory. Try to lower your batch size.\nTry to
#: allocate 148 tokens.\nAvaliable tokens: 2048 ...").
KV_ALLOC_WORDS = ("Decode out of memory.", "Prefill out of memory.", "Out of memory. Try to lower your batch size.")
_KV_POOL = re.compile("|".join(map(re.escape, KV_ALLOC_WORDS)))


def is_oom(exception: str | None, message: str | None) -> bool:
    """Whether an exception is a device's out of memory (PyTorch's allocator, or the device's),
    not SGLang's KV pool running out of token slots."""
    text = f"{exception or ''}: {message or ''}"
    if _KV_POOL.match(message or "") and not _DEVICE.search(text):
        return False
    return any(marker in text for marker in _OOM_MARKERS)


def decompose_oom(exception: str | None, message: str | None) -> dict[str, Any] | None:
    """The figures of an OOM message, or None when the exception is not an OOM."""
    if not is_oom(exception, message):
        return None
    # PyTorch writes the message on one line, so a line break in it is a terminal's hard
    # wrap, which may fall inside a number ("of which 1" / "2.19 MiB is free"): join the
    # lines as they are; the patterns allow a space lost at the wrap.
    # A terminal may also have padded the wrap with a run of spaces inside the line
    # ("allocated by P                             yTorch"): PyTorch never writes more than
    # two spaces in a row, so a longer run is removed like a line break.
    text = "".join(line.strip() for line in (message or "").splitlines())
    text = " ".join(_PADDING.sub("", text).split())
    device = _DEVICE.search(text)
    out: dict[str, Any] = {"device": device.group(1) if device else None}
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
    warned = _ALLOC_WARNING.search(text)
    if warned is not None:
        gpu, tried, free, total = (int(g) for g in warned.groups())
        out.update(gpu=gpu, tried_gib=tried / 2**30, free_gib=free / 2**30, total_gib=total / 2**30)
    if out.get("in_use_gib") is None:
        out["in_use_gib"] = out["process_in_use_gib"]
    out["expandable_segments_hint"] = "expandable_segments" in text
    return out
