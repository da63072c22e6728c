"""SGLang's own errors along its start-up path, by the words they begin with, and the step that
raises each (the format reference's "Errors raised along this path").

An exception line's message names its step even when the traceback's frames are cut above the
window: ``Exception: Capture cuda graph failed: ...`` is raised in graph capture whatever rank or
frame the log kept. The words are SGLang's source strings; a message is matched by its start.
"""

from __future__ import annotations

#: (the message's first words, the phase whose step raises it, where SGLang raises it)
RAISES = (
    ("The memory capacity is unbalanced.", "init_distributed",
     "ModelRunner.init_torch_distributed; v0.5.16+ distributed/bootstrap.py _check_tp_memory_balance"),
    ("Not enough memory. Please try to increase --mem-fraction-static", "kv_cache_alloc",
     "init_memory_pool (<= v0.5.8), MemoryPoolConfig.__post_init__ (v0.5.10+)"),
    ("Loaded weights leave no GPU memory for the KV cache", "kv_cache_alloc",
     "mem_cache/kv_cache_configurator.py _profile_available_bytes (v0.5.16+)"),
    ("Not enough GPU memory for hybrid (mamba/linear-attention) state cache", "kv_cache_alloc",
     "the memory pools' sizing of a hybrid model's recurrent-state pool (max_mamba_cache_size <= 0)"),
    ("Capture cuda graph failed:", "cuda_graph_capture",
     "cuda_graph_runner.py capture (an Exception that wraps the RuntimeError of the capture)"),
)


def raised_in(message: object) -> str | None:
    """The phase whose step raises an exception with this message, or None for words SGLang's
    start-up path does not raise."""
    text = str(message or "").lstrip()
    return next((phase for words, phase, _ in RAISES if text.startswith(words)), None)
