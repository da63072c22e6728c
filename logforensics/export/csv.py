"""``parse --format csv``: every event a row of a pandas frame, written as CSV.

The columns are ``Event.to_dict``'s keys in the order pandas first sees them; lists and
objects (a traceback's frames) are JSON text. The frame holds every event in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO

from ..events import Event


def write_csv(events: Iterable[Event], out: IO[str]) -> None:
    """Write ``events`` as CSV to the text stream ``out``."""
    import pandas as pd

    rows = []
    for ev in events:
        row = ev.to_dict()
        rows.append({k: (json.dumps(v, default=str) if isinstance(v, (dict, list)) else v) for k, v in row.items()})
    pd.DataFrame(rows).to_csv(out, index=False)
