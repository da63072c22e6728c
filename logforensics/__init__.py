"""logforensics: a forensic analyzer for SGLang inference-server logs.

The pipeline: bytes -> physical lines -> records (grammar) -> events -> run model ->
findings -> reports. ``summarize_file`` and ``iter_events`` are the small public API.
"""

__version__ = "0.1.0"

# The grammars/, rules/ and reports/ folders sit at the top of the source tree and are
# installed as the subpackages logforensics.grammars, .rules and .reports (pyproject's
# package-dir). Imported straight from a source checkout (``python -m logforensics`` in
# the repository), they are found beside this package instead.
import os as _os  # noqa: E402

_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "grammars")) and _os.path.isfile(
        _os.path.join(_here, _os.pardir, "grammars", "sglang.lark")):
    __path__.append(_os.path.dirname(_here))  # type: ignore[name-defined]  # noqa: F821

from .events import Event, PHASES  # noqa: E402
from .pipeline import iter_events, summarize_file  # noqa: E402

__all__ = ["Event", "PHASES", "iter_events", "summarize_file", "__version__"]
