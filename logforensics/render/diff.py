"""The terminal view of a diagnosis (``logforensics diff``): verdict first, then findings.

Presentation only; every sentence comes from the rules and every figure from the facts.
"""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..diagnose.engine import Diagnosis
from ..model.records import NO_MEMORY
from ..units import fmt
from .console import plain
from .terminal import OUTCOME_STYLE, table_box

#: Characters of an evidence line shown on the terminal (all of it is in the JSON and HTML).
EVIDENCE_CHARS = 140

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}

SIDE_BY_SIDE = (
    ("avail@load", "load_begin_avail_gib"),
    ("avail@loaded", "load_end_avail_gib"),
    ("KV", "kv_gib"),
    ("KV tokens", "kv_tokens"),
    ("avail@pool", "pool_end_avail_gib"),
    ("graphs", "capture_mem_gib"),
)


def render_diagnosis(d: Diagnosis, console: Console, *, max_evidence: int = 4) -> None:
    worst = d.worst()
    style = SEVERITY_STYLE.get(worst or "", "bold green")
    console.print(Panel(plain(d.verdict, style), title=Text("verdict"), expand=False))
    for line in d.conclusion.lines()[1:]:  # the outcomes are the runs' lines below
        console.print(plain("  " + line))
    if d.baseline is not None:
        runs = Text.assemble(
            ("baseline ", "bold"), (d.baseline.outcome, OUTCOME_STYLE.get(d.baseline.outcome, "")),
            plain(f"  {d.baseline.file}"), "\n", ("failing  ", "bold"),
            (d.failing.outcome, OUTCOME_STYLE.get(d.failing.outcome, "")), plain(f"  {d.failing.file}"))
        console.print(runs)
    for f in d.findings:
        head = Text.assemble((f"[{f.severity}] ", SEVERITY_STYLE[f.severity]), (f"{f.rule} ", "bold"), plain(f.title),
                             (f"  ({f.confidence} confidence; {f.id})", "dim"))
        console.print(head)
        for line in f.explanation.splitlines():
            if line.strip():
                console.print(plain("    " + line))
        for e in f.evidence[:max_evidence]:
            where = (f"{e['node']} " if e.get("node") else "") + f"{e['file']}:{e['line']}"
            rank = f" {e['rank']}" if e.get("rank") else ""
            head = plain(f"      > {where}{rank}: ", "dim")
            room = max(40, min(EVIDENCE_CHARS, console.width - len(head) - 1))  # one row, cut at a word
            console.print(Text.assemble(head, plain(e["text"], "dim", limit=room)))
        if len(f.evidence) > max_evidence:
            console.print(Text(f"      > ... {len(f.evidence) - max_evidence} more evidence lines in the JSON/HTML", style="dim"))
    if d.baseline is not None and (d.baseline.memory or d.failing.memory):
        console.print(memory_table(d, console))
    if d.baseline is not None and any(x.size_baseline is not None or x.size_failing is not None
                                      or x.peak_baseline is not None or x.peak_failing is not None
                                      for x in d.facts.pools.deltas):
        console.print(pools_table(d, console))


def memory_table(d: Diagnosis, console: Console) -> Table:
    """Both runs' memory side by side, rank by rank (GiB)."""
    t = Table(title=Text("Memory per rank, baseline -> failing (GiB; SGLang's GB is GiB)"), box=table_box(console))
    t.add_column("rank")
    for title, _ in SIDE_BY_SIDE:
        t.add_column(title, justify="right")
    assert d.baseline is not None
    ranks = list(dict.fromkeys(d.baseline.ranks + d.failing.ranks))
    crashed = set(d.failing.crash.ranks if d.failing.crash else [])
    for rank in ranks:
        b = d.baseline.memory.get(rank, NO_MEMORY)
        f = d.failing.memory.get(rank, NO_MEMORY)
        cells = []
        for _, key in SIDE_BY_SIDE:
            bv, fv = b.figure(key), f.figure(key)
            changed = bv is not None and fv is not None and bv != fv
            cells.append(Text(f"{fmt(bv, key=key)} -> {fmt(fv, key=key)}", style="yellow" if changed else ""))
        t.add_row(plain(rank, "red" if rank in crashed else ""), *cells)
    return t


def pools_table(d: Diagnosis, console: Console) -> Table:
    """A hybrid model's pools side by side, pool by pool (``diagnose/pools.py``)."""
    t = Table(title=Text("KV pools, baseline -> failing"), box=table_box(console))
    for title in ("pool", "size", "GiB", "peak usage"):
        t.add_column(title, justify="left" if title == "pool" else "right")
    for x in d.facts.pools.deltas:
        cells = [(x.size_baseline, x.size_failing, ""), (x.gib_baseline, x.gib_failing, "kv_gib"),
                 (x.peak_baseline, x.peak_failing, "")]
        t.add_row(plain(x.pool, "yellow" if x.changed else ""),
                  *(Text(f"{fmt(b, key=k)} -> {fmt(f, key=k)}", style="yellow" if b is not None and f is not None
                         and b != f else "") for b, f, k in cells))
    return t
