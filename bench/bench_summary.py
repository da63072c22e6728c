#!/usr/bin/env python3
"""Time ``logforensics summary --json LOG`` and record the child's peak memory.

For each LOG the file is read once first (so the page cache holds it and the figure
measures parsing, not the disk), then ``logforensics summary --json LOG`` runs as a
subprocess: the installed console script by default, ``python -m logforensics`` with
``--module``. The child is reaped with ``os.wait4``, which returns that child's own
``rusage``: ``ru_maxrss`` is its peak resident set size (the same figure as
``getrusage(RUSAGE_CHILDREN)`` after ``wait``, but per run rather than the maximum over
every child this process ever had).

One line per run: file, size in MB (10^6 bytes), wall seconds, MB/s, peak MiB, CPU
seconds, and the share of lines the summary recognised (from its JSON ``coverage``).
Give several sizes (for example 100M and 1G) to see whether memory grows with the file.
``--generate`` first writes any missing LOG with ``gen_serving_log.py``; the size is
taken from the name (``serving-100M.log`` -> ``--size 100M``).

    python bench/bench_summary.py --generate bench/serving-100M.log bench/serving-1G.log
    python bench/bench_summary.py --module --repeat 3 bench/serving-100M.log
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GENERATOR = HERE / "gen_serving_log.py"
SIZE_IN_NAME = re.compile(r"(\d+(?:\.\d+)?[KMGT])(?:i?B)?\.log$", re.IGNORECASE)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def mem_kib(key: str) -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def cores() -> str:
    total = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = total
    return f"{usable}" if usable == total else f"{usable} usable of {total}"


def command(args: argparse.Namespace) -> list[str]:
    if args.module:
        return [sys.executable, "-m", "logforensics"]
    if args.exe:
        return [args.exe]
    # Prefer the script installed next to this interpreter: version-manager shims (pyenv,
    # asdf) in PATH add a shell start-up to every run.
    local = Path(sys.executable).parent / "logforensics"
    if local.is_file() and os.access(local, os.X_OK):
        return [str(local)]
    found = shutil.which("logforensics")
    if not found:
        sys.exit("bench_summary: no 'logforensics' console script found; install the project "
                 "(pip install -e .) or use --module")
    return [found]


def child_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd + ["--version"], capture_output=True, text=True, timeout=60)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def git_head() -> str:
    try:
        out = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "-"
    except (OSError, subprocess.SubprocessError):
        return "-"


def generate(path: Path, gen_args: list[str]) -> None:
    m = SIZE_IN_NAME.search(path.name)
    if not m:
        sys.exit(f"bench_summary: cannot tell the size to generate from {path.name!r}; "
                 "name it like serving-100M.log or generate it by hand")
    path.parent.mkdir(parents=True, exist_ok=True)
    # renamed when complete, so no half-written LOG; *.part.log is still git-ignored
    tmp = path.with_name(path.stem + ".part" + path.suffix)
    cmd = [sys.executable, str(GENERATOR), "--size", m.group(1), "-o", str(tmp), *gen_args]
    print(f"# generating {path} ({m.group(1)}) ...", flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    tmp.replace(path)
    print(f"# generated {path.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s", flush=True)


def warm(path: Path) -> float:
    """Read the whole file once (constant memory); return the read rate in MB/s."""
    buf = bytearray(16 << 20)
    view = memoryview(buf)
    n = 0
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while True:
            k = f.readinto(view)
            if not k:
                break
            n += k
    return n / 1e6 / max(time.perf_counter() - t0, 1e-9)


def run_once(cmd: list[str], log: Path) -> dict:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd + ["summary", "--json", str(log)], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    result = {
        "wall_s": wall,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        # Linux reports ru_maxrss in KiB, macOS in bytes
        "peak_mib": ru.ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10),
        "rc": proc.returncode,
        "error": None,
    }
    if proc.returncode != 0:
        result["error"] = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["(no stderr)"]
    else:
        try:
            summary = json.loads(stdout)
            coverage = summary.get("coverage") or {}
            result["recognised_pct"] = coverage.get("recognised_pct")
        except ValueError:
            result["error"] = ["stdout is not JSON"]
    return result


def pct(r: dict) -> str:
    v = r.get("recognised_pct")
    return "-" if v is None else f"{v:.1f}%"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("logs", nargs="+", type=Path, metavar="LOG")
    p.add_argument("--module", action="store_true", help="run 'python -m logforensics' (this interpreter)")
    p.add_argument("--exe", help="path of the logforensics console script to run")
    p.add_argument("--generate", action="store_true",
                   help="create missing LOGs with gen_serving_log.py, size from the name (serving-1G.log)")
    p.add_argument("--gen-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the generator, repeatable (e.g. --gen-arg=--all-ranks)")
    p.add_argument("--repeat", type=int, default=1, help="runs per LOG (default 1)")
    p.add_argument("--markdown", action="store_true", help="also print the results as a Markdown table")
    args = p.parse_args(argv)

    for log in args.logs:
        if not log.is_file():
            if not args.generate:
                p.error(f"{log} does not exist (use --generate)")
            generate(log, args.gen_arg)

    cmd = command(args)
    total_kib = mem_kib("MemTotal")
    print(f"# date     {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    print(f"# machine  {cpu_model()}, {cores()} cores, "
          f"{total_kib / (1 << 20):.1f} GiB RAM" if total_kib else f"# machine  {cpu_model()}, {cores()} cores")
    print(f"# os       {platform.system()} {platform.release()}")
    print(f"# python   {platform.python_implementation()} {platform.python_version()}")
    print(f"# program  {child_version(cmd)} (git {git_head()}), run as: "
          f"{'python -m logforensics' if args.module else Path(cmd[0]).name} summary --json LOG")
    print(f"# {'file':<28} {'MB':>9} {'seconds':>9} {'MB/s':>8} {'peak MiB':>9} {'cpu s':>8} "
          f"{'recog%':>7}  warm-read MB/s")

    rows = []
    failed = False
    for log in args.logs:
        size = log.stat().st_size
        avail = mem_kib("MemAvailable")
        if avail is not None and size > avail * 1024:
            print(f"# warning: {log.name} is larger than the available memory; "
                  "the page cache cannot hold it and the run will include disk reads")
        for _ in range(max(1, args.repeat)):
            rate = warm(log)
            r = run_once(cmd, log)
            mb = size / 1e6
            if r["error"]:
                failed = True
                print(f"  {log.name:<28} {mb:9.1f} FAILED rc={r['rc']}: {' '.join(r['error'])}", flush=True)
                continue
            print(f"  {log.name:<28} {mb:9.1f} {r['wall_s']:9.2f} {mb / r['wall_s']:8.1f} "
                  f"{r['peak_mib']:9.1f} {r['cpu_s']:8.2f} {pct(r):>7}  {rate:.0f}", flush=True)
            rows.append((log.name, mb, r))

    if len({name for name, _, _ in rows}) > 1:
        small = min(rows, key=lambda x: x[1])
        big = max(rows, key=lambda x: x[1])
        print(f"# memory: peak {big[2]['peak_mib']:.1f} MiB at {big[1]:.0f} MB vs "
              f"{small[2]['peak_mib']:.1f} MiB at {small[1]:.0f} MB "
              f"(x{big[2]['peak_mib'] / small[2]['peak_mib']:.2f} for x{big[1] / small[1]:.1f} the input)")
    if args.markdown and rows:
        print()
        print("| file | size (MB) | seconds | MB/s | peak RSS (MiB) | CPU s | lines recognised |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, mb, r in rows:
            print(f"| {name} | {mb:.1f} | {r['wall_s']:.2f} | {mb / r['wall_s']:.1f} | "
                  f"{r['peak_mib']:.1f} | {r['cpu_s']:.2f} | {pct(r)} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
