"""logforensics: a forensic analyzer for SGLang inference-server logs.

The pipeline: bytes -> physical lines -> records (grammar) -> events -> run model ->
findings -> reports. ``summarize_file`` and ``iter_events`` are the small public API.
"""

from ._data import use_source_tree_data as _use_source_tree_data
from .version import __version__

_use_source_tree_data()

from .events import PHASES, Event  # noqa: E402
from .pipeline import iter_events, summarize_file  # noqa: E402

__all__ = ["Event", "PHASES", "iter_events", "summarize_file", "__version__"]
