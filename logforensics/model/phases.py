"""Which start-up phase a traceback is in, from the SGLang functions in its frames.

The mapping is data (``phases.tsv``, one row per function with the SGLang file that
defines it), so that a function of a new SGLang version is a row, not a code branch.
The innermost listed function of a traceback wins: ``load_model`` called from
``ModelRunner.__init__`` is weight loading, ``capture`` inside it is graph capture. A
request's handler (phase ``request`` in the table: ``update_weights_from_disk``) wins over
every frame: what it runs inside (a weight load) runs on a server that is serving.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from ..events import LAUNCH
from .records import Frame

# A call begins where a run of word characters begins: tried at every position of a long run, the
# expression read the run again from each one (quadratic in a long token of a frame's code line).
_CALL = re.compile(r"(?<!\w)(\w+)\(")
_WORD = re.compile(r"[A-Za-z_]\w+")


#: The table's phase of the handlers of requests that only a serving server takes (a weight
#: update, a memory release): a traceback through one is in ``serving``, whatever it runs.
REQUEST = "request"


@lru_cache(maxsize=1)
def frame_phases() -> Mapping[str, str]:
    """function name -> phase, from ``phases.tsv``."""
    from importlib import resources  # with pathlib: only for a log with a traceback

    text = resources.files(__package__).joinpath("phases.tsv").read_text(encoding="utf-8")
    rows = csv.DictReader((ln for ln in text.splitlines() if ln and not ln.startswith("#")), delimiter="\t")
    return {row["function"]: row["phase"] for row in rows}


def _placing(calls: Sequence[tuple[str, str]]) -> str | None:
    """:func:`placing_function` of a traceback's frames as (function, code line) pairs."""
    table = frame_phases()
    for func, code in calls:
        for name in [func, *_CALL.findall(code)]:
            if table.get(name) == REQUEST:
                return name
    serving: str | None = None
    for func, code in reversed(calls):
        for name in [func, *_CALL.findall(code)]:
            phase = table.get(name)
            if phase == "serving":
                serving = serving or name
            elif phase:
                return name
    return serving


def placing_function(frames: Sequence[Frame]) -> str | None:
    """The listed SGLang function that places a traceback (``phase_of_frames``): the
    innermost one with a start-up phase, else the innermost serving one, else None. Rules
    that need more than the phase read it: the KV pool and the attention backend's buffers
    are one phase, and only the first is the KV cache."""
    return _placing([(fr.func or "", fr.code or "") for fr in frames])


def phase_of_frames(frames: Sequence[Mapping[str, Any]]) -> str | None:
    """The phase of a traceback's frames (as the reader gives them: mappings): the innermost
    frame (its function, or a call in its code line) with a start-up phase; else ``serving``
    if a frame is a serving function; else None. A start-up function wins over a serving
    one because start-up runs model code that serving also runs (graph capture calls the
    forward pass)."""
    name = _placing([(fr.get("func") or "", fr.get("code") or "") for fr in frames])
    phase = frame_phases()[name] if name else None
    if phase is None and any(fr.get("func") == "__init__" and _MODEL_CLASS.search(fr.get("path") or "")
                             for fr in frames):
        return "load_weights"
    return "serving" if phase == REQUEST else phase


#: A model class's module: its constructor runs only where the loader builds the model
#: (``_initialize_model``, after "Load weight begin"), so a traceback through it whose
#: loader frames are not in the log (a paste of its innermost frame) is in weight loading.
_MODEL_CLASS = re.compile(r"(?:^|[/\\])srt[/\\]models[/\\][^/\\]+\.py$")


#: Files and functions of the model worker that ``Scheduler.__init__`` builds first.
_MODEL_WORKER = re.compile(r"managers/tp_worker|model_executor/|model_loader/|speculative/")
_WORKER_STEPS = frozenset({"init_model_worker", "init_tp_model_worker", "maybe_init_draft_worker"})


def _scheduler_step(calls: Sequence[tuple[str, str]]) -> str | None:
    """:func:`scheduler_step` of a traceback's frames as (function, path) pairs."""
    at = next((i for i, (func, path) in enumerate(calls)
               if func == "__init__" and path.replace("\\", "/").endswith("managers/scheduler.py")), None)
    below = calls[at + 1:] if at is not None else []
    if not below or any(_MODEL_WORKER.search(path) or func in _WORKER_STEPS for func, path in below):
        return None
    return below[0][0]


def scheduler_step(frames: Sequence[Mapping[str, Any]] | Sequence[Frame]) -> str | None:
    """The scheduler's own start-up step that a traceback failed in, past its model worker:
    ``Scheduler.__init__`` builds the worker first (weights, KV pool, graphs), then its own
    parts (caches, PD disaggregation's KV manager, the overlap schedule), all before it
    serves. The function the constructor called (``init_disaggregation``), or None where the
    frames go into the worker or none are below the constructor."""
    return _scheduler_step([(fr.get("func") or "", str(fr.get("path") or "")) if isinstance(fr, Mapping)
                            else (fr.func or "", str(fr.path or "")) for fr in frames])


#: Python's runpy, as a frame names it: its file, or "<frozen runpy>" (3.11 and later).
_RUNPY = re.compile(r"runpy(\.py|>)$")


def importing(frames: Sequence[Frame]) -> bool:
    """Whether a traceback failed while its process imported its code: its first frame past
    Python's runpy is a module's top level (``<module>``) on an import statement (``python -m
    sglang.launch_server`` importing the server), so nothing of the server had run or printed."""
    first = next((fr for fr in frames if not _RUNPY.search(str(fr.path or ""))), None)
    return first is not None and first.func == "<module>" and (first.code or "").lstrip().startswith(("from ", "import "))


def where_failed(phase: str | None, frames: Sequence[Frame]) -> str:
    """How prose says where a traceback failed: ``during <phase>``; past the model worker, the
    scheduler's own step after the phase its rank reached; for the launcher's own phase, what it
    was doing before any rank started (``launch_step``: parsing the server arguments), with the
    frame of the table that places it (``server_args.py:7299 in prepare_server_args``)."""
    step = scheduler_step(frames)
    if step is not None:
        return f"in the scheduler's own start-up ({step}), after {phase}" if phase \
            else f"in the scheduler's own start-up ({step})"
    if phase != LAUNCH:
        return f"during {phase}" if phase else "during an unknown phase"
    name = placing_function(frames)
    frame = next((fr for fr in reversed(frames) if fr.func == name
                  or name in _CALL.findall(fr.code or "")), None) if name else None
    at = ""
    if frame is not None:
        path = str(frame.path or "").replace("\\", "/").rsplit("/", 1)[-1]
        at = f": {path}:{frame.line} in {frame.func}"
    return f"before init_distributed ({launch_step(frames)}{at})"


#: What the launcher was doing, by the function of the table that places a launch-phase traceback;
#: parsing the server arguments otherwise.
_LAUNCH_STEPS = {"wait_port_available": "while waiting for the ports it takes to be free"}


def launch_step(frames: Sequence[Frame]) -> str:
    """What the launcher was doing when a traceback of its own phase failed, in words."""
    return _LAUNCH_STEPS.get(placing_function(frames) or "", "while parsing the server arguments")


def phase_of_words(texts: Iterable[str]) -> str | None:
    """The phase torn traceback text points to, by the same rule as whole frames: a
    listed start-up function named anywhere in it (the first row of the table), else a
    serving function."""
    table = frame_phases()
    words = {w for text in texts for w in _WORD.findall(text)}
    named = [table[w] for w in table if w in words]
    if REQUEST in named:
        return "serving"
    startup = [p for p in named if p != "serving"]
    return startup[0] if startup else ("serving" if named else None)


#: phase -> (the record that ends it, as SGLang words it): a rank whose last record of its
#: phase is this one had left the phase (``stops.stop_place``, ``failures.phase_for``).
PHASE_END = {
    "init_distributed": ("init_dist_end", "Init torch distributed ends"),
    "load_weights": ("load_weight_end", "Load weight end"),
    "kv_cache_alloc": ("memory_pool_end", "Memory pool end"),
    "cuda_graph_capture": ("capture_end", "Capture cuda graph end"),
}


#: SGLang's optional parts a user can switch, by the package directory their code is in
#: (``python/sglang/srt/<dir>/``): the innermost SGLang frame of a traceback in one of them names
#: where it failed (``component_of``), and so which setting to try without it.
COMPONENTS = (
    ("/srt/speculative/", "speculative decoding"),
    ("/srt/constrained/", "constrained decoding (the grammar backend)"),
    ("/srt/lora/", "LoRA"),
    ("/srt/disaggregation/", "PD disaggregation"),
    ("/srt/layers/attention/", "the attention backend"),
)


def component_of(frames: Sequence[Frame]) -> str | None:
    """The optional part of SGLang that the innermost of a traceback's frames in one is in, with
    that frame (``speculative decoding (eagle_worker.py:456 in verify)``), or None: the failing
    call ran inside that part (a model's kernel that speculative decoding's verify called). A
    scheduler's event loop kept in a part's module (PD's ``event_loop_overlap_disagg_decode``)
    only calls the batch that failed: it runs every batch, so it names no part."""
    parts = components_of(frames)
    return parts[0] if parts else None


def failed_outside_part(frames: Sequence[Frame], links: Sequence[int] = ()) -> str | None:
    """The innermost SGLang frame of the traceback that holds :func:`component_of`'s frame (a
    chain's links end where ``links`` say, each its first frames counted from the record's first
    (``ChainLink.frames``); the last link the rest), worded
    ``memory_pool.py:1534 in set_kv_buffer``, where it is in none of the optional parts: the part
    only called the code that failed (the attention backend writing the KV pool, whose check
    raised); else None."""
    def in_part(fr: Frame) -> bool:
        return any(part in _path(fr) for part, _ in COMPONENTS)

    at = next((i for i in range(len(frames) - 1, -1, -1) if _sglang_frame(frames[i]) and in_part(frames[i])), None)
    if at is None:
        return None
    end = next((n for n in links if at < n), len(frames))
    inner = next(fr for fr in reversed(frames[at:end]) if _sglang_frame(fr))
    return None if in_part(inner) else _frame_words(inner)


def _path(fr: Frame) -> str:
    return str(fr.path or "").replace("\\", "/")


def _sglang_frame(fr: Frame) -> bool:
    """A frame of SGLang's code, not its event loop (which runs every batch, so names no part)."""
    return "sglang/" in _path(fr) and not str(fr.func or "").startswith("event_loop")


def _frame_words(fr: Frame) -> str:
    """``memory_pool.py:1534 in set_kv_buffer``."""
    return f"{_path(fr).rsplit('/', 1)[-1]}:{fr.line} in {fr.func}"


def components_of(frames: Sequence[Frame]) -> list[str]:
    """Every optional part of SGLang the traceback's call ran through, innermost first, each once
    with its innermost frame there (the attention backend's kernel, then the speculative
    decoding worker that called the draft model it ran in), as :func:`component_of` words
    them; torch.compile's own frames last, where they are."""
    out: dict[str, str] = {}
    for fr in reversed(frames):
        if not _sglang_frame(fr):
            continue
        for part, words in COMPONENTS:
            if part in _path(fr) and words not in out:
                out[words] = f"{words} ({_frame_words(fr)})"
    for fr in frames:  # none of SGLang's parts: torch.compile's own frames (dynamo's, inductor's)
        if TORCH_COMPILE_FRAMES.search(_path(fr)):
            out.setdefault(TORCH_COMPILE, f"{TORCH_COMPILE} ({_frame_words(fr)})")
            break
    return list(out.values())


#: torch.compile, which SGLang runs where it is asked to (--enable-torch-compile, piecewise CUDA
#: graphs): its frames are torch's dynamo and inductor, entered only for a compiled function.
TORCH_COMPILE = "torch.compile"
TORCH_COMPILE_FRAMES = re.compile(r"/torch/_(?:dynamo|inductor)/")

