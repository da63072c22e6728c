#!/usr/bin/env python3
"""Write logforensics/events/declared.py: every event kind's fields and types, as the reader declares them.

Run after declaring a field (a terminal in ``read/terminals.py``, a converter in
``read/values.py``, a sample record in ``grammars/samples``); ``tests/test_schema.py``
fails until the file is written again.

    python tools/event_schema.py
"""

from __future__ import annotations

from pathlib import Path

import yaml

from logforensics.read.declared import derive, module_text

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "logforensics" / "events" / "declared.py"
SAMPLES = ROOT / "grammars" / "samples"


def sample_lines(directory: Path = SAMPLES) -> list[str]:
    """The record of every entry of the grammar's sample files, in the files' order."""
    return [entry["line"] for path in sorted(directory.glob("*.yml"))
            for entry in yaml.safe_load(path.read_text(encoding="utf-8"))]


def main() -> None:
    OUT.write_text(module_text(derive(sample_lines())), encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
