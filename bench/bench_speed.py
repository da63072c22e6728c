#!/usr/bin/env python3
"""Time logforensics against lnav on the same serving logs, in the same run.

For each generator (``gen_sglang_log.py``, "restarts": crashes and restarts, torn lines, every rank
decoding; ``gen_serving_log.py``: a long healthy serving run) and each size, the log is
generated under ``--dir`` (a temporary directory by default; never commit these), read
once so the page cache holds it, then these commands run in turn, ``--repeat`` times:

    lnav -n -c ';SELECT count(*) FROM all_logs' LOG       (lnav's headless load)
    logforensics summary --json LOG > /dev/null
    logforensics parse --format jsonl LOG > /dev/null     (with --parse)
    logforensics parse --format parquet -o OUT LOG        (with --parse)

Each line gives the median wall time, MB/s (10^6 bytes per second), the ratio to lnav's
median of the same round (lnav seconds / ours: 1.0 or more is as fast as lnav or
faster), the same ratio of CPU seconds (on a busy machine wall time includes waiting for
a core; CPU time does not) and the peak memory of all processes of the command together: the sum of the
resident sets of the child and its descendants, sampled every 10 ms, and the child's
own ``ru_maxrss`` (largest single process) for comparison. The header says which
reading path logforensics used (compiled or pure Python).

Sizes of 2G and more are whole copies of the 1G log (``5G``: five launches in a row).

    python bench/bench_speed.py                      # 100M, 1G and 5G, both generators
    python bench/bench_speed.py --sizes 100M,1G --repeat 3
    python bench/bench_speed.py --sizes 5G --repeat 1 --generators serving
    python bench/bench_speed.py --sizes 10M,100M --generators words,stamped,bytes   # input that is no log
    python bench/bench_speed.py --sizes 1G --generators restarts,serving,words,bytes   # and per MB against the logs
    python bench/bench_speed.py --sizes 1G --generators second --generator-script second=OTHER/gen_sglang_log.py

When input that is no log (words, stamped, bytes) runs beside a log of the same size, each command's MB/s
on it is also given over the same command's on the log, wall and CPU (1.0 or more: no slower per
MB than the log).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GENERATORS = {"restarts": [HERE / "gen_sglang_log.py"], "serving": [HERE / "gen_serving_log.py"],
              # input that is no log: reading it should cost no more per MB than a log
              "words": [HERE / "gen_unknown.py", "--kind", "words"],
              "stamped": [HERE / "gen_unknown.py", "--kind", "stamped"],
              "bytes": [HERE / "gen_unknown.py", "--kind", "bytes"]}
LNAV = ["lnav", "-n", "-c", ";SELECT count(*) FROM all_logs"]


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", encoding="ascii") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run(cmd: list[str]) -> dict:
    """Wall seconds, summed-tree peak MiB, largest-process peak MiB, CPU s, return code."""
    peak = [0]
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], sum(_rss_kib(p) for p in _tree(proc.pid)))
                done.wait(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode("utf-8", "replace").strip().splitlines()[-1:]
    return {"wall": wall, "sum_mib": peak[0] / 1024, "max_mib": ru.ru_maxrss / 1024,
            "cpu": ru.ru_utime + ru.ru_stime, "rc": proc.returncode, "err": " ".join(tail)}


def settle(out: Path) -> None:
    """Before each timed command: the last run's output removed and every written page on
    disk, so that no command pays for freeing the blocks of an earlier one's file (a
    Parquet file of random input is over 1 GB) or for the writing back of its pages."""
    out.unlink(missing_ok=True)
    os.sync()


def warm(path: Path) -> None:
    buf = bytearray(16 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def copies(size: str) -> int:
    """How many copies of the 1G log make a log of ``size`` (0: generate it directly).

    Sizes of 2G and more are whole copies of the 1G log, one after another (a log of
    several launches in a row): generating gigabytes directly takes far longer than
    the benchmark itself."""
    if size.upper().endswith("G") and size[:-1].isdigit() and int(size[:-1]) >= 2:
        return int(size[:-1])
    return 0


def generate(kind: str, size: str, directory: Path) -> Path:
    path = directory / f"{kind}-{size}.log"
    if not path.is_file():
        part = path.with_suffix(".part")
        t0 = time.perf_counter()
        n = copies(size)
        if n:
            one = generate(kind, "1G", directory)
            with open(part, "wb") as out:
                for _ in range(n):
                    with open(one, "rb") as src:
                        shutil.copyfileobj(src, out, 16 << 20)
        else:
            subprocess.run([sys.executable, *map(str, GENERATORS[kind]), "--size", size, "-o", str(part)], check=True)
        part.replace(path)
        print(f"# generated {path.name}: {path.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.0f} s",
              flush=True)
    return path


def program() -> list[str]:
    local = Path(sys.executable).parent / "logforensics"
    if local.is_file():
        return [str(local)]
    found = shutil.which("logforensics")
    if not found:
        sys.exit("bench_speed: install the project first (pip install .)")
    return [found]


def reading_path(exe: list[str]) -> str:
    """Which reader the installed program uses (its interpreter is the script's)."""
    with open(exe[0], encoding="utf-8", errors="replace") as f:
        first = f.readline()
    python = first[2:].strip() if first.startswith("#!") else sys.executable
    code = ("from logforensics import native\n"
            "print('compiled accelerator' if native.available() else 'pure Python', end='')")
    # run from the program's own directory: a source tree in the current directory would
    # otherwise be imported instead of the installed package (and say "pure Python")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=os.environ,
                         cwd=os.path.dirname(os.path.abspath(exe[0])))
    return out.stdout.strip() or "unknown"


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return f"{model}, {len(os.sched_getaffinity(0))} cores, {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"


def lnav_version() -> str:
    out = subprocess.run(["lnav", "-V"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.stdout else "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100M,1G,5G",
                   help="comma-separated sizes (default 100M,1G,5G; 2G and more: copies of the 1G log)")
    p.add_argument("--generators", default="restarts,serving",
                   help="restarts, serving (default: both), words, stamped or bytes (unknown text, another "
                        "program's stamped log, random bytes)")
    p.add_argument("--generator-script", action="append", default=[], metavar="NAME=SCRIPT",
                   help="one more generator under NAME, any script taking --size and -o (a second, independent "
                        "generator of multi-rank logs, say); name it in --generators too")
    p.add_argument("--repeat", type=int, default=3, help="rounds per log (default 3); medians are printed")
    p.add_argument("--parse", action="store_true", help="also time parse --format jsonl and parquet")
    p.add_argument("--no-summary", action="store_true", help="leave out summary (with --parse: parse alone)")
    p.add_argument("--dir", type=Path, default=None, help="where to generate the logs (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the generated logs")
    args = p.parse_args(argv)
    for spec in args.generator_script:
        name, sep, script = spec.partition("=")
        if not sep or not name or not Path(script).is_file():
            sys.exit(f"bench_speed: --generator-script wants NAME=SCRIPT with an existing script, not {spec!r}")
        GENERATORS[name] = [Path(script).resolve()]
    if shutil.which("lnav") is None:
        sys.exit("bench_speed: lnav is not installed (apt-get install lnav)")
    exe = program()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="lf-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"# date     {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"# machine  {machine()}")
    print(f"# python   {platform.python_version()}; {lnav_version()}")
    print(f"# program  {exe[0]}; reading path: {reading_path(exe)}")
    print(f"# {'log':<16} {'command':<8} {'MB':>6} {'median s':>9} {'MB/s':>7} {'x lnav':>7} "
          f"{'peak MiB (all)':>14} {'largest':>8} {'cpu s':>6} {'cpu x lnav':>10}")
    status = 0
    rates: dict[tuple[str, str, str], tuple[float, float]] = {}  # (kind, size, command) -> MB/s, MB per CPU s
    try:
        for kind in args.generators.split(","):
            for size in args.sizes.split(","):
                log = generate(kind, size, directory)
                mb = log.stat().st_size / 1e6
                out = directory / "out.parquet"
                commands = {"lnav": LNAV + [str(log)]}
                if not args.no_summary:
                    commands["summary"] = exe + ["summary", "--json", str(log)]
                if args.parse:
                    commands["jsonl"] = exe + ["parse", "--format", "jsonl", str(log)]
                    commands["parquet"] = exe + ["parse", "--format", "parquet", "-o", str(out), str(log)]
                results: dict[str, list[dict]] = {name: [] for name in commands}
                warm(log)
                for _ in range(max(1, args.repeat)):
                    for name, cmd in commands.items():
                        settle(out)
                        results[name].append(run(cmd))
                lnav_s = statistics.median(r["wall"] for r in results["lnav"])
                lnav_cpu = statistics.median(r["cpu"] for r in results["lnav"])
                for name, rs in results.items():
                    bad = [r for r in rs if r["rc"] != 0]
                    if bad:
                        status = 1
                        print(f"  {log.name:<16} {name:<8} FAILED rc={bad[0]['rc']}: {bad[0]['err']}", flush=True)
                        continue
                    wall = statistics.median(r["wall"] for r in rs)
                    cpu = statistics.median(r["cpu"] for r in rs)
                    if name != "lnav":
                        rates[kind, size, name] = (mb / wall, mb / max(cpu, 1e-9))
                    print(f"  {log.name:<16} {name:<8} {mb:6.0f} {wall:9.2f} {mb / wall:7.1f} {lnav_s / wall:7.2f} "
                          f"{max(r['sum_mib'] for r in rs):14.1f} {max(r['max_mib'] for r in rs):8.1f} "
                          f"{cpu:6.1f} {lnav_cpu / max(cpu, 1e-9):10.2f}", flush=True)
                out.unlink(missing_ok=True)
            if not args.keep and args.dir is None:  # a later size may be copies of this kind's 1G log
                for made in directory.glob(f"{kind}-*.log"):
                    made.unlink()
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    compare_per_mb(rates)
    return status


#: The generators of input that is no log (``gen_unknown.py``).
UNKNOWN = ("words", "stamped", "bytes")


def compare_per_mb(rates: dict[tuple[str, str, str], tuple[float, float]]) -> None:
    """Input that is no log against the logs of the same size, per MB: each command's MB/s (and
    MB per CPU second) on words or bytes over the same command's on a log. 1.0 or more: no
    slower per MB."""
    lines = []
    for (kind, size, name), (mbs, mbcpu) in rates.items():
        if kind not in UNKNOWN:
            continue
        for log in ("restarts", "serving"):
            if (log, size, name) in rates:
                lmbs, lmbcpu = rates[log, size, name]
                lines.append(f"  {kind + '-' + size:<16} {name:<8} per MB against {log + '-' + size:<16} "
                             f"wall {mbs / lmbs:5.2f}   cpu {mbcpu / lmbcpu:5.2f}")
    if lines:
        print("# input that is no log, per MB, against a log of the same size and command (1.0 or more: no slower)")
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
