#!/usr/bin/env python3
"""Reading speed by line length: lines of 1 KiB to 16 MiB, with and without spaces.

For each line length and each form of text, a log of ``--total`` bytes (at least one line)
is written under a temporary directory: lines of that length behind an SGLang prefix
(``[2026-03-12 16:43:01 TP1] ``), of letters (one long token), of base64 (a token that
differs on every line), or of words (spaces). It is then read in this process, the
fastest of ``--repeat`` runs, by ``summary``'s reader (the run model) and by ``parse
--format jsonl``'s writer, on the compiled path and on the pure one (``LOGFORENSICS_PURE=1``).
Each row gives MB/s (10^6 bytes per second): reading is linear in line length when the
figure stays level as lines grow (a line longer than 16 KiB is matched by the grammar on
its first 16 KiB only, and kept whole).

    python bench/bench_long_lines.py                                  # 1K .. 16M, 16 MiB a log
    python bench/bench_long_lines.py --lengths 1K,64K,1M --total 4M --paths compiled
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from logforensics.export.jsonl import write_jsonl  # noqa: E402
from logforensics.ingest.batch import read_file  # noqa: E402
from logforensics.read.grammar import warm_up  # noqa: E402

PREFIX = b"[2026-03-12 16:43:01 TP1] "
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(text: str) -> int:
    text = text.strip().upper()
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def write_log(path: Path, form: str, length: int, total: int) -> int:
    """Lines of ``length`` bytes (prefix included) up to ``total`` bytes; returns the size."""
    rng = random.Random(length)
    body = length - len(PREFIX)
    written = 0
    with open(path, "wb") as out:
        while True:
            if form == "letters":
                line = b"a" * body
            elif form == "base64":
                line = base64.b64encode(rng.randbytes(body))[:body]
            else:
                line = (b"lorem ipsum dolor sit amet " * (body // 27 + 1))[:body]
            out.write(PREFIX + line + b"\n")
            written += length + 1
            if written >= total:
                return written


def summary(path: Path) -> None:
    read_file(str(path)).summary()


def parse(path: Path) -> None:
    out = io.BytesIO()
    write_jsonl(str(path), out)


def fastest(fn: object, path: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn(path)  # type: ignore[operator]
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="1K,16K,64K,1M,4M,16M", help="line lengths (default %(default)s)")
    ap.add_argument("--total", default="16M", help="bytes of each log, at least one line (default %(default)s)")
    ap.add_argument("--forms", default="letters,base64,words", help="letters, base64, words (default %(default)s)")
    ap.add_argument("--paths", default="compiled,pure", help="compiled, pure (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each, the fastest counts (default %(default)s)")
    args = ap.parse_args()
    warm_up()
    total = size(args.total)
    print(f"{'path':9s} {'form':8s} {'line':>6s} {'MB':>6s}  {'summary MB/s':>12s}  {'parse MB/s':>10s}")
    with tempfile.TemporaryDirectory(prefix="long-lines-") as tmp:
        for path_name in args.paths.split(","):
            if path_name == "pure":
                os.environ["LOGFORENSICS_PURE"] = "1"
            else:
                os.environ.pop("LOGFORENSICS_PURE", None)
            for form in args.forms.split(","):
                for text in args.lengths.split(","):
                    length = size(text)
                    log = Path(tmp) / f"{form}-{length}.log"
                    n = write_log(log, form, length, max(total, length))
                    t_sum = fastest(summary, log, args.repeat)
                    t_parse = fastest(parse, log, args.repeat)
                    print(f"{path_name:9s} {form:8s} {text:>6s} {n / 1e6:6.1f}  {n / 1e6 / t_sum:12.1f}  "
                          f"{n / 1e6 / t_parse:10.1f}", flush=True)
                    log.unlink()


if __name__ == "__main__":
    main()
