"""logforensics: a forensic analyzer for SGLang inference-server logs.

The pipeline: bytes -> physical lines -> records (grammar) -> events -> run model ->
findings -> reports. ``summarize_file`` and ``iter_events`` are the small public API.
"""

__version__ = "0.1.0"

from .events import Event, PHASES  # noqa: E402
from .pipeline import iter_events, summarize_file  # noqa: E402

__all__ = ["Event", "PHASES", "iter_events", "summarize_file", "__version__"]
