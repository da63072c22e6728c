"""Logs written by the two bench generators, for the equality tests of the bulk paths."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_logs(out: Path, runs: Sequence[tuple[str, Sequence[str]]]) -> list[Path]:
    """Run each ``(script, args)`` of ``bench/`` into ``out``; the paths, in order."""
    paths = []
    for i, (script, args) in enumerate(runs):
        path = out / f"{i}-{script[:-3]}.log"
        subprocess.run([sys.executable, str(ROOT / "bench" / script), *args, "-o", str(path)], check=True,
                       timeout=120)
        paths.append(path)
    return paths
