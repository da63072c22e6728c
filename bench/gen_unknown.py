#!/usr/bin/env python3
"""Write input that is no SGLang log: lines of random words, another program's log, or random bytes.

``--kind words``: lines of 1-14 random lowercase words of 1-9 letters (about 90 bytes a line),
text that no record of the grammar begins; ``--kind stamped``: another program's log beside
SGLang's, each line a stamp, a host, a process and 3-12 words with numbers (about 110 bytes a
line; every line a new shape, and its stamp and punctuation are what SGLang's records begin
with, so each line is told apart from them on its own); ``--kind bytes``: random bytes (a
stream that does not look like text, whose lines are mostly not valid UTF-8). Deterministic for a ``--seed``.
Standard library only. For ``bench_speed.py --generators words,bytes``: reading such input
should cost no more per MB than reading a serving log.
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import BinaryIO

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_of(text: str) -> int:
    """``100M`` -> 100 MiB, ``1G`` -> 1 GiB (as the other generators read sizes)."""
    unit = _UNITS.get(text[-1:].upper())
    return int(float(text[:-1]) * unit) if unit else int(text)


def write(kind: str, size: int, seed: int, out: BinaryIO) -> None:
    rng = random.Random(seed)
    if kind == "bytes":
        left = size
        while left > 0:
            n = min(left, 1 << 20)
            out.write(rng.randbytes(n))
            left -= n
        return
    if kind == "stamped":
        words = ["alpha", "beta", "gamma", "request", "user", "session", "error", "value", "GET", "/api/v1/x"]
        written = 0
        while written < size:
            lines = [f"2026-01-0{rng.randrange(1, 10)} 12:{rng.randrange(10, 60)}:{rng.randrange(10, 60)},"
                     f"{rng.randrange(100, 1000)} host{rng.randrange(1, 10)} app[{rng.randrange(100, 10000)}]: "
                     + " ".join(rng.choice(words) + str(rng.randrange(10 ** rng.randrange(1, 7)))
                                for _ in range(rng.randrange(3, 13)))
                     for _ in range(4096)]
            block = ("\n".join(lines) + "\n").encode()[: size - written]
            out.write(block)
            written += len(block)
        return
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choice(letters) for _ in range(rng.randrange(1, 10))) for _ in range(50000)]
    written = 0
    while written < size:
        lines = [" ".join(rng.choices(vocabulary, k=rng.randrange(1, 15))) for _ in range(4096)]
        block = ("\n".join(lines) + "\n").encode()[: size - written]
        out.write(block)
        written += len(block)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", choices=("words", "stamped", "bytes"), default="words")
    p.add_argument("--size", default="10M", help="e.g. 10M, 100M, 1G (default 10M)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("-o", "--output", required=True)
    args = p.parse_args(argv)
    with open(args.output, "wb") as out:
        write(args.kind, size_of(args.size), args.seed, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
