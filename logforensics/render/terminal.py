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
from ..model.beside import END_RECORD, SOURCES, stops_unexplained
from ..model.failures import ARGPARSE_SOURCE, CPP_RAISED_SOURCE, headerless_dump, native_exception_words
from ..model.pools import POST_CAPTURE_ENV
from ..model.records import NO_MEMORY, NOT_SEEN, Cite, ClockAnchor, ClockMove, LoggedError, MemoryPools
from ..model.run import RunSummary
from ..model.stops import stop_place
from ..model.summary import Crash, DistinctException, Hang
from ..units import fmt, gib
from .beside import beside_lines
from .console import clip, plain, printable
from .hangview import hang_view

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


def _print_moved(moved: list[ClockMove] | None, what: str, console: Console) -> None:
    """The stamps an order across files put on the others' clock (``model.nodes.on_one_clock``)."""
    for m in moved or []:
        anchor = m.anchor or ClockAnchor("?", "?")
        console.print(printable(
            f"  compared in {'local time' if m.clock == 'local' else 'UTC'}: {m.node}'s {what} "
            f"({m.file}:{m.line}) stamped {m.stamp}{' UTC' if m.clock == 'local' else ''} "
            f"is {m.on}, local time {m.local_offset_h:+g} h from UTC as derived from "
            f"{anchor.utc} (UTC) and {anchor.local} (local), residual {m.residual_s} s"),
            markup=False, highlight=False)


def render_summary(s: RunSummary, console: Console) -> None:
    style = OUTCOME_STYLE.get(s.outcome, "bold")
    place = stop_place(s) if s.outcome == "incomplete" else None  # where the log leaves its ranks
    head = Text.assemble((s.outcome.upper(), style), "  ", plain(s.outcome_reason + (f", {place}" if place else "")))
    console.print(Panel(head, title=plain(s.file or "log"), expand=False))
    if stops_unexplained(s):  # who ended it is recorded outside the log, if anywhere
        console.print(plain(f"To tell why it stops, collect {END_RECORD}"))

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
            mem = s.memory.get(rank, NO_MEMORY)
            label = plain(rank, "red" if rank in crashed else "")
            t.add_row(*([plain(s.rank_nodes.get(rank) or "-")] if by_node else []), label,
                      plain(s.phase_reached.get(rank, "-")),
                      *(Text(fmt(mem.figure(key), key=key)) for _, key in MEMORY_COLUMNS),
                      Text(fmt(s.last_seen.get(rank, NOT_SEEN).line)))
        console.print(t)
    if s.pools:
        render_pools(s.pools, console)
    if s.missing_ranks:
        console.print(f"Ranks missing (the parallel sizes call for them; not in this log): {', '.join(s.missing_ranks)}",
                      markup=False, highlight=False)
    if len(s.nodes) == 1:
        only = next(iter(s.nodes.values()))
        if only.role:
            why = only.pd.role_evidence.why if only.pd and only.pd.role_evidence else None
            console.print(plain("Role: router" if only.role == "router" else "Role: prefill and decode servers' records"
                                if only.role == "prefill+decode" else f"Role: {only.role} server")
                          + plain(f" ({why})" if why else ""))
    if len(s.nodes) > 1:
        for node, info in s.nodes.items():
            role = f" [{info.role}]" if info.role else ""
            console.print(f"  {node}{role}: {info.outcome} ({info.file}, {info.lines} lines)",
                          markup=False, highlight=False)
    if s.crash and s.crash.node:
        console.print(f"First failure on {s.crash.node} ({s.crash.file})"
                      + (f"; {s.crash.order_uncertain}" if s.crash.order_uncertain else ""),
                      markup=False, highlight=False)
        _print_moved(s.crash.clock, "failure", console)
    if s.hang and s.hang.node and len(s.hang.nodes) > 1:
        console.print(printable(f"First hang on {s.hang.node}"
                                + (f"; {s.hang.order_uncertain}" if s.hang.order_uncertain else "")),
                      markup=False, highlight=False)
        _print_moved(s.hang.clock, "hang", console)

    if s.crash:
        console.print(render_crash(s.crash))
    print_tracebacks(s.exceptions, console)
    print_errors(s.errors, console)
    if s.hang:
        evidence = [clip(printable(f"line {h.line}: {h.text}"), 160) for h in s.hang.evidence[:5]]
        if s.hang.silent_ranks:
            evidence.insert(0, printable("behind the others: " + ", ".join(s.hang.silent_ranks)))
        console.print(Panel(Text("\n".join(evidence)), title=Text("Hang evidence"), border_style="yellow", expand=False))
        render_hang(s.hang, console, s.file)

    dec = s.throughput.decode_gen_tok_s
    if dec.count:
        console.print(Text(
            f"Decode gen throughput (token/s): median {fmt(dec.median)}, "
            f"p10 {fmt(dec.p10)}, p90 {fmt(dec.p90)} over {dec.count} records"
        ))
    acc = s.throughput.accept_len
    if acc.count:
        console.print(Text(f"Speculative accept length: median {fmt(acc.median)} over {acc.count} records"))
    if s.env:
        console.print(plain("Environment: " + " ".join(f"{k}={v}" for k, v in s.env.items())))
    if s.versions:
        console.print(plain("Versions: " + ", ".join(f"{k} {v}" for k, v in s.versions.items())))
    cov = s.coverage
    console.print(Text(
        f"Coverage: {cov.lines_recognised}/{cov.lines_read} lines recognised "
        f"({cov.recognised_pct}%), {cov.events} events"
        + (f"; {cov.partial_lines} long lines read on their first part only" if cov.partial_lines else "")
    ))
    if cov.requests and cov.requests.answers:
        answers = cov.requests.answers
        console.print(plain(f"Requests answered: {sum(answers.values())}: " + ", ".join(
            f"{status} x{n}" + (f" (first at line {first.line})" if (first := cov.requests.first.get(status)) else "")
            for status, n in answers.items())))
    for item in cov.top_unrecognised[:5]:
        console.print(plain(f"  unrecognised x{item.count} (first at line {item.first_line}): "
                            f"{printable(item.example or '')}", limit=160))
    if s.artefacts:
        render_artefacts(s.artefacts, console)
    for warning in s.warnings:
        console.print(plain(f"warning: {warning}", "yellow"))


def _usage(u: Any, at: Cite | None) -> str:
    return "-" if u is None else f"{fmt(u)} (line {at.line})" if at else fmt(u)


def render_pools(p: MemoryPools, console: Console) -> None:
    """A hybrid model's pools one by one (``model/pools.py``), the pool that bound each
    retraction, and the order of KV allocation and graph capture, each with its line."""
    if p.pools:
        t = Table(title=Text("KV pools (a hybrid model's pools fill apart)"), box=table_box(console))
        for title in ("pool", "size", "GiB", "sized at", "peak usage", "last usage", "evictable"):
            t.add_column(title, justify="left" if title == "pool" else "right")
        for name, rec in p.pools.items():
            state = rec.state
            evictable = (f"{state.evictable}{'' if state.total is None else f' of {state.total}'}, "
                         f"{state.available} free (line {state.at.line})" if state and state.at else "-")
            t.add_row(plain(name), Text("-" if rec.size is None else f"{rec.size} {rec.unit}"),
                      Text(gib(rec.gib, missing="-", unit=False)),
                      Text(f"line {rec.size_at.line}" if rec.size_at else "-"),
                      Text(_usage(rec.peak_usage, rec.peak_at)),
                      Text(_usage(rec.last_usage, rec.last_at)), plain(evictable))
        console.print(t)
    for pool, n in p.bound_by.items():
        first = next((r for r in p.retractions if r.pool == pool), None)
        others = ", ".join(f"{k} at {fmt(v)}" for k, v in first.others.items()) if first else ""
        console.print(plain(f"Retractions with the {pool} pool fullest: {n} (first at line {first.at.line}, "
                            f"{pool} at {fmt(first.usage)}" + (f"; {others}" if others else "") + ")"
                            if first and first.at else f"Retractions with the {pool} pool fullest: {n}"))
    o = p.order
    kv, cap = (o.kv_at, o.capture_at) if o else (None, None)
    if o and o.order == "kv_before_graphs" and kv and cap:
        # the capture's begin line: whether the graphs were then captured is the phase's to say
        line = f"Start-up order: KV pool allocated (line {kv.line}) before CUDA graph capture began (line {cap.line})"
    elif o and o.order == "graphs_before_kv":
        after = o.post_capture_at[0] if o.post_capture_at else kv
        line = ("Start-up order: CUDA graph capture began" + (f" (line {cap.line})" if cap else "")
                + " before the KV pool was sized (post-capture KV sizing"
                + (f", line {after.line})" if after else ")"))
    else:
        line = ""
    if line:
        console.print(plain(line))
    if o and o.fell_back:
        console.print(plain(f"warning: {POST_CAPTURE_ENV} was set but SGLang used the old order "
                            "(KV pool before graph capture, no post-capture sizing line)", "yellow"))


def render_hang(h: Hang, console: Console, file: str | None = None) -> None:
    """The hang's per-rank progress (last sequence numbers, last phase, the lines), the rank
    that differs, what the ranks are stuck on, and why stack dumps are missing."""
    v = hang_view(h, file)
    if v.rows:
        table = Table(title=Text("Hang: per-rank progress"), box=table_box(console), title_justify="left")
        for col in ("rank", "last completed", "last enqueued", "waiting on", "last phase", "evidence"):
            table.add_column(col, overflow="fold")
        for r in v.rows:
            table.add_row(*(printable(x) for x in (r.rank, r.last_completed, r.last_enqueued, r.waiting_on,
                                                   r.last_phase, r.evidence)))
        console.print(table)
    if v.initiator:
        console.print(plain(f"Rank that differs: {v.initiator}"))
    for item in v.stuck_on:
        console.print(plain(f"Stuck on: {item}"))
    for item in v.pools:
        console.print(plain(f"Pools at the watchdog: {item}"))
    if v.stacks:
        console.print(plain(v.stacks[:1].upper() + v.stacks[1:]))
    if v.next_time:
        console.print(plain("To see more next time:"))
        for item in v.next_time:
            console.print(plain(f"  {item}", limit=400))


def render_artefacts(a: Artefacts, console: Console) -> None:
    """What the files beside the logs say (``render.beside``), each with where it was read."""
    # the statement is cut, never where it was read
    rows = [plain(f"{clip(printable(line.text), 300)}  ({line.where})", {"bad": "red", "warn": "yellow"}.get(line.level, ""))
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
        lines = ", ".join(str(o.line) for o in exc.occurrences[:8])
        console.print(plain(f"  {exc.exception or '(no exception line)'} on {ranks} (lines {lines})"))


def print_errors(errors: Sequence[LoggedError], console: Console, most: int = 5) -> None:
    """The errors the run logged that it did not end with (an out-of-memory message a
    component caught, a traceback its rank went on after), each with its line."""
    if not errors:
        return
    console.print(plain(f"Errors logged, not read as the run's end ({len(errors)}):"))
    for e in errors[:most]:
        rank = f" {e.rank}" if e.rank else ""
        lines = f"lines {e.line}-{e.end_line}" if e.end_line and e.end_line > e.line else f"line {e.line}"
        if e.exception:
            what = f"{e.exception}: {(e.message or '').splitlines()[0] if e.message else ''}".rstrip(": ")
        elif e.kind == "exception":
            what = "a traceback whose exception line is not in this log"
        else:  # a record's own words: what failed, then the error (an out-of-memory message a component logged)
            what = (f"{e.what}: {e.message}" if e.what and e.message and not e.message.startswith(e.what)
                    else e.message or e.text)
        console.print(plain(clip(printable(f"  {lines}{rank}: {what}"), 160)))


def render_crash(crash: Crash) -> Panel:
    rows: list[Any] = []
    exc = crash.exception or (native_exception_words(crash.source) if crash.native else
                              f"none: ended from outside ({SOURCES[crash.source]})" if crash.source in SOURCES
                              else "none in a faulthandler stack dump (its header is not in this log)"
                              if headerless_dump(crash.source, crash.exception)
                              else "none in this log (a C++ exception; its stack and message below)"
                              if crash.source == CPP_RAISED_SOURCE
                              else "none: argparse refused the command line and exited (status 2)"
                              if crash.source == ARGPARSE_SOURCE else "(exception line not in log)")
    first = crash.first_rank or "unknown"
    if crash.rank_named_at and crash.first_rank:  # the first fatal line names none: the rank is a later record's
        first = f"{crash.first_rank} (named at line {crash.rank_named_at}; line {crash.line} names no rank)"
    rows.append(Text.assemble(("first rank: ", "bold"), plain(first),
                              ("  phase: ", "bold"), plain(crash.phase or "unknown"),
                              ("  ranks: ", "bold"), plain(", ".join(r for r in crash.ranks or [] if r) or "-")))
    rows.append(Text.assemble(("exception: ", "bold"), plain(exc)))
    if crash.first_message:  # a native failure came first (the exception, if any, is a later record's)
        rows.append(Text.assemble(("first: ", "bold"), plain(clip(crash.first_message, 300))))
    if crash.message:
        rows.append(plain(crash.message, lines=True, limit=600))
    oom = crash.oom
    if oom:
        rows.append(Text(
            f"OOM: tried {gib(oom.tried_gib)}; total {gib(oom.total_gib)}; free {gib(oom.free_gib)}; in use {gib(oom.in_use_gib)}; allocated by PyTorch {gib(oom.allocated_gib)}; "
            f"reserved but unallocated {gib(oom.reserved_unallocated_gib)}"))
    frames = crash.frames or []
    chain = crash.chain or []
    # In a chained traceback Python prints the cause first: the innermost frames of the
    # cause are where the failure happened, not those of the exception raised while handling it.
    cause = chain[0] if chain and chain[0].frames else None
    if cause is not None:
        frames = frames[:cause.frames]
    if frames:
        inner = frames[-4:]
        head = f"innermost frames of the cause ({cause.exception or 'unknown'})" if cause else "innermost frames"
        head += " (in call order: the innermost last)"
        rows.append(Text(printable(head) + ":\n" + "\n".join(
            printable(f"  {f.path}:{f.line} in {f.func}") for f in inner)))
    rows.append(plain(f"evidence: {crash.file}:{crash.line}"
                      + (f"-{crash.end_line}" if crash.end_line not in (None, crash.line) else "")))
    return Panel(Group(*rows), title=Text("Crash"), border_style="red", expand=False)
