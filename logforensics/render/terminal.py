"""The terminal view of one run (``logforensics summary``), drawn with rich.

Only presentation lives here: every figure comes from :class:`~logforensics.model.run.RunSummary`.
Memory figures are GiB (SGLang's "GB" is GiB).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..artefacts.types import Artefacts
from ..model.beside import SOURCES
from ..model.run import RunSummary
from ..model.summary import Crash, DistinctException
from ..units import fmt, gib
from .beside import beside_lines
from .console import clip, plain, printable

__all__ = ["OUTCOME_STYLE", "fmt", "plain", "printable", "render_crash", "render_summary", "table_box"]

OUTCOME_STYLE = {"ready": "bold green", "crashed": "bold red", "hung": "bold yellow",
                 "incomplete": "bold magenta"}

#: (column title, memory key) for the per-rank memory table.
MEMORY_COLUMNS = (
    ("avail@load", "load_begin_avail_gib"),
    ("weights", "weights_gib"),
    ("avail@loaded", "load_end_avail_gib"),
    ("KV tokens", "kv_tokens"),
    ("KV", "kv_gib"),
    ("avail@pool", "pool_end_avail_gib"),
    ("graphs", "capture_mem_gib"),
    ("avail@graphs", "capture_end_avail_gib"),
    ("graph s", "capture_elapsed_s"),
)


def table_box(console: Console) -> box.Box:
    return box.SIMPLE_HEAD if console.is_terminal else box.ASCII2


def render_summary(s: RunSummary, console: Console) -> None:
    style = OUTCOME_STYLE.get(s.outcome, "bold")
    head = Text.assemble((s.outcome.upper(), style), "  ", plain(s.outcome_reason))
    console.print(Panel(head, title=plain(s.file or "log"), expand=False))

    if s.ranks:
        t = Table(title=Text("Ranks (memory in GiB; SGLang's GB is GiB)"), box=table_box(console))
        by_node = bool(s.rank_nodes)
        if by_node:
            t.add_column("node")
        t.add_column("rank")
        t.add_column("phase reached")
        for title, _ in MEMORY_COLUMNS:
            t.add_column(title, justify="right")
        t.add_column("last line", justify="right")
        crashed = set(s.crash.ranks if s.crash else [])
        for rank in s.ranks:
            mem = s.memory.get(rank, {})
            label = plain(rank, "red" if rank in crashed else "")
            t.add_row(*([plain(s.rank_nodes.get(rank) or "-")] if by_node else []), label,
                      plain(s.phase_reached.get(rank, "-")),
                      *(Text(fmt(mem.get(key), key=key)) for _, key in MEMORY_COLUMNS),
                      Text(fmt(s.last_seen.get(rank, {}).get("line"))))
        console.print(t)
    if s.missing_ranks:
        console.print(f"Ranks missing (server_args call for them; not in this log): {', '.join(s.missing_ranks)}",
                      markup=False, highlight=False)
    if len(s.nodes) == 1:
        only = next(iter(s.nodes.values()))
        if only.get("role"):
            why = ((only.get("pd") or {}).get("role_evidence") or {}).get("why")
            console.print(plain(f"Role: {only['role']} server" if only["role"] != "router" else "Role: router")
                          + plain(f" ({why})" if why else ""))
    if len(s.nodes) > 1:
        for node, info in s.nodes.items():
            role = f" [{info['role']}]" if info.get("role") else ""
            console.print(f"  {node}{role}: {info['outcome']} ({info['file']}, {info.get('lines')} lines)",
                          markup=False, highlight=False)
    if s.crash and s.crash.node:
        console.print(f"First failure on {s.crash.node} ({s.crash.file})"
                      + (f"; {s.crash.order_uncertain}" if s.crash.order_uncertain else ""),
                      markup=False, highlight=False)

    if s.crash:
        console.print(render_crash(s.crash))
    print_tracebacks(s.exceptions, console)
    if s.hang:
        evidence = [clip(printable(f"line {h['line']}: {h['text']}"), 160) for h in s.hang.evidence[:5]]
        if s.hang.silent_ranks:
            evidence.insert(0, printable("behind the others: " + ", ".join(s.hang.silent_ranks)))
        console.print(Panel(Text("\n".join(evidence)), title=Text("Hang evidence"), border_style="yellow", expand=False))

    dec = s.throughput.get("decode_gen_tok_s", {})
    if dec.get("count"):
        console.print(Text(
            f"Decode gen throughput (token/s): median {fmt(dec['median'])}, "
            f"p10 {fmt(dec['p10'])}, p90 {fmt(dec['p90'])} over {dec['count']} records"
        ))
    acc = s.throughput.get("accept_len", {})
    if acc.get("count"):
        console.print(Text(f"Speculative accept length: median {fmt(acc['median'])} over {acc['count']} records"))
    if s.env:
        console.print(plain("Environment: " + " ".join(f"{k}={v}" for k, v in s.env.items())))
    if s.versions:
        console.print(plain("Versions: " + ", ".join(f"{k} {v}" for k, v in s.versions.items())))
    cov = s.coverage
    console.print(Text(
        f"Coverage: {cov['lines_recognised']}/{cov['lines_read']} lines recognised "
        f"({cov['recognised_pct']}%), {cov['events']} events"
        + (f"; {cov['partial_lines']} long lines read on their first part only" if cov.get("partial_lines") else "")
    ))
    for item in cov["top_unrecognised"][:5]:
        console.print(plain(f"  unrecognised x{item['count']} (first at line {item['first_line']}): "
                            f"{printable(item['example'])}", limit=160))
    if s.artefacts:
        render_artefacts(s.artefacts, console)
    for warning in s.warnings:
        console.print(plain(f"warning: {warning}", "yellow"))


def render_artefacts(a: Artefacts, console: Console) -> None:
    """What the files beside the logs say (``render.beside``), each with where it was read."""
    rows = [plain(f"{line.text}  ({line.where})", {"bad": "red", "warn": "yellow"}.get(line.level, ""), limit=300)
            for line in beside_lines(a)]
    if rows:
        console.print(Panel(Group(*rows), title=Text("Beside the logs"), expand=False))


def print_tracebacks(exceptions: Sequence[DistinctException], console: Console, prefix: str = "") -> None:
    """The distinct tracebacks and the ranks that raised each, when there is more than one
    traceback or more than one rank (one traceback of one rank is the crash panel's)."""
    if not (len(exceptions) > 1 or (exceptions and len(exceptions[0].ranks) > 1)):
        return
    console.print(plain(prefix + "Tracebacks (distinct, with the ranks that raised each):"))
    for exc in exceptions:
        ranks = ", ".join(r or "?" for r in exc.ranks)
        lines = ", ".join(str(o["line"]) for o in exc.occurrences[:8])
        console.print(plain(f"  {exc.exception or '(no exception line)'} on {ranks} (lines {lines})"))


def render_crash(crash: Crash) -> Panel:
    rows: list[Any] = []
    exc = crash.exception or ("native abort" if crash.native else
                              f"none: ended from outside ({SOURCES[crash.source]})" if crash.source in SOURCES
                              else "(exception line not in log)")
    rows.append(Text.assemble(("first rank: ", "bold"), plain(crash.first_rank or "unknown"),
                              ("  phase: ", "bold"), plain(crash.phase or "unknown"),
                              ("  ranks: ", "bold"), plain(", ".join(r for r in crash.ranks or [] if r) or "-")))
    rows.append(Text.assemble(("exception: ", "bold"), plain(exc)))
    if crash.message:
        rows.append(plain(crash.message, lines=True, limit=600))
    oom = crash.oom
    if oom:
        rows.append(Text(
            "OOM: tried {t}; total {T}; free {F}; in use {U}; allocated by PyTorch {A}; "
            "reserved but unallocated {R}".format(
                t=gib(oom.get("tried_gib")), T=gib(oom.get("total_gib")), F=gib(oom.get("free_gib")),
                U=gib(oom.get("in_use_gib")), A=gib(oom.get("allocated_gib")),
                R=gib(oom.get("reserved_unallocated_gib")))))
    frames = crash.frames or []
    chain = crash.chain or []
    # In a chained traceback Python prints the cause first: the innermost frames of the
    # cause are where the failure happened, not those of the exception raised while handling it.
    cause = chain[0] if chain and chain[0].get("frames") else None
    if cause is not None:
        frames = frames[:cause["frames"]]
    if frames:
        inner = frames[-4:]
        head = f"innermost frames of the cause ({cause.get('exception') or 'unknown'})" if cause else "innermost frames"
        rows.append(Text(printable(head) + ":\n" + "\n".join(
            printable(f"  {f.get('path')}:{f.get('line')} in {f.get('func')}") for f in inner)))
    rows.append(plain(f"evidence: {crash.file}:{crash.line}"
                      + (f"-{crash.end_line}" if crash.end_line not in (None, crash.line) else "")))
    return Panel(Group(*rows), title=Text("Crash"), border_style="red", expand=False)
