"""logforensics: a forensic analyzer for SGLang inference-server logs.

The pipeline: bytes -> physical lines -> records (grammar) -> events -> run model ->
findings -> reports. ``summarize_file`` and ``iter_events`` are the small public API.
"""

from typing import TYPE_CHECKING, Any

from ._data import use_source_tree_data as _use_source_tree_data
from .version import __version__

_use_source_tree_data()

if TYPE_CHECKING:
    from .events import PHASES, Event
    from .pipeline import iter_events, summarize_file

__all__ = ["Event", "PHASES", "iter_events", "summarize_file", "__version__"]

#: Where each public name lives: imported on first use, so that ``logforensics --help``
#: and the modules that do not read a log do not load the grammar and the run model.
_LAZY = {"Event": "events", "PHASES": "events", "iter_events": "pipeline", "summarize_file": "pipeline"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
