#!/usr/bin/env python3
"""Time ``logforensics scan`` into a fresh store: throughput, runs per second, store size per GiB of log.

Two inputs, each scanned into a new store as a child process (reaped with ``os.wait4``
for its peak RSS and CPU time; with ``--jobs`` workers the RSS is the largest single
process, as Linux reports it):

- ``--big LOG``: one generated serving log (``gen_serving_log.py``; ``--generate`` writes
  it if missing, the size from the name, e.g. ``serving-1G.log``): MB/s.
- ``--small DIR --copies N``: the real excerpts in DIR (``fixtures/real`` by default), copied
  N times into a temporary tree (each copy its own directory, so each file is its own run):
  runs per second.

Each scan is followed by a rescan of the same tree (everything unchanged, every file
skipped), timed too. The store size is the bytes of its Parquet files plus ``_meta``.

    python bench/bench_scan.py --generate --big bench/serving-1G.log --small fixtures/real --copies 20
    python bench/bench_scan.py --small fixtures/real --copies 20 --engine ray --jobs 2
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_speed import machine  # noqa: E402

GENERATOR = HERE / "gen_serving_log.py"
#: The size in a log's name (``serving-1G.log``), for ``--generate``.
SIZE_IN_NAME = re.compile(r"(\d+(?:\.\d+)?[KMGT])(?:i?B)?\.log$", re.IGNORECASE)


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run(cmd: list[str]) -> tuple[float, float, float, str]:
    """Wall seconds, peak RSS MiB, CPU seconds and stdout of one child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-500:]}")
    return wall, ru.ru_maxrss / 1024, ru.ru_utime + ru.ru_stime, out.strip()


def scan(logs: Path, n_runs: int, args: argparse.Namespace, label: str) -> list[str]:
    store = Path(tempfile.mkdtemp(prefix="lf-bench-store-", dir=args.tmp))
    cmd = [sys.executable, "-m", "logforensics", "scan", str(logs), "--store", str(store),
           "--engine", args.engine] + (["--jobs", str(args.jobs)] if args.jobs else []) + \
          (["--no-events"] if args.no_events else [])
    size = tree_bytes(logs)
    wall, rss, cpu, out = run(cmd)
    stored = tree_bytes(store)
    wall2, _, _, out2 = run(cmd)
    shutil.rmtree(store, ignore_errors=True)
    mib_per_gib = stored / 2**20 / (size / 2**30)
    rows = [f"| {label} | {args.engine} | {args.jobs or os.cpu_count()} | {'no' if args.no_events else 'yes'} | "
            f"{n_runs} | {size / 1e6:.1f} | {wall:.2f} | {size / 1e6 / wall:.1f} | {n_runs / wall:.1f} | "
            f"{rss:.0f} | {cpu:.2f} | {stored / 2**20:.1f} | {mib_per_gib:.0f} | {wall2:.2f} |"]
    print(f"# {label}: {out}", file=sys.stderr)
    print(f"# {label} rescan: {out2}", file=sys.stderr)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--big", type=Path, help="a generated serving log (e.g. bench/serving-1G.log)")
    ap.add_argument("--generate", action="store_true", help="write --big with gen_serving_log.py if missing")
    ap.add_argument("--small", type=Path, help="a directory of small real logs (e.g. fixtures/real)")
    ap.add_argument("--copies", type=int, default=20, help="copies of --small's logs (default 20)")
    ap.add_argument("--engine", choices=["local", "ray"], default="local")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--no-events", action="store_true")
    ap.add_argument("--tmp", default=None, help="where the copies and stores go (default: the system temp dir)")
    args = ap.parse_args()
    print(f"# {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; {machine()}; Python {sys.version.split()[0]}",
          file=sys.stderr)
    rows = ["| input | engine | jobs | events | runs | size (MB) | seconds | MB/s | runs/s | peak RSS (MiB) "
            "| CPU s | store (MiB) | store MiB per GiB of log | rescan s |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    if args.big:
        if not args.big.exists():
            m = SIZE_IN_NAME.search(args.big.name)
            if not (args.generate and m):
                sys.exit(f"{args.big}: missing (give --generate, with the size in the name)")
            subprocess.run([sys.executable, str(GENERATOR), "--size", m.group(1), "-o", str(args.big)], check=True)
        d = Path(tempfile.mkdtemp(prefix="lf-bench-big-", dir=args.tmp))
        os.symlink(args.big.resolve(), d / args.big.name)
        with open(args.big, "rb") as fh:  # into the page cache: parsing is measured, not the disk
            while fh.read(1 << 24):
                pass
        rows += scan(d, 1, args, args.big.name)
        shutil.rmtree(d, ignore_errors=True)
    if args.small:
        logs = sorted(args.small.glob("*.log"))
        d = Path(tempfile.mkdtemp(prefix="lf-bench-small-", dir=args.tmp))
        for i in range(args.copies):
            sub = d / f"copy{i:03d}"
            sub.mkdir()
            for f in logs:
                shutil.copy(f, sub / f.name)
        rows += scan(d, len(logs) * args.copies, args, f"{args.small.name} x{args.copies}")
        shutil.rmtree(d, ignore_errors=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
