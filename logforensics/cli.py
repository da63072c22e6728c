"""Command line: ``logforensics parse | summary | diff | bundle | watch | check | scan | query | runs | crashes``.

Exit codes are named constants (``outputs``). Errors a user can cause (a missing file, a
wrong option, a place that cannot be written, a full disk) print one line on stderr and
exit with ``EXIT_USAGE``; they never show a Python traceback. Files are written by
``outputs.open_output``; consoles come from ``render.console``.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from .outputs import (
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    OutputError,
    check_writable,
    open_output,
    silence_stdout,
    stdout_error,
    write_output,
)
from .pipeline import InputError, RunFiles, iter_run_events, run_files, summarize_run
from .render.console import make_console
from .version import __version__

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USAGE", "main"]

#: Files larger than this get a progress bar on stderr (when stderr is a terminal).
PROGRESS_MIN_BYTES = 32 << 20


def stdout_console() -> Console:
    """rich on a terminal; plain wide text (no colour codes) when piped."""
    return make_console()


def _stderr() -> Console:
    return make_console(stderr=True)


def _error(message: str) -> None:
    try:
        click.echo(f"logforensics: error: {message}", err=True)
    except OSError:
        pass


def fail(message: str, code: int = EXIT_USAGE) -> click.exceptions.Exit:
    _error(message)
    return click.exceptions.Exit(code)


class _Main(click.Group):
    """The command group, with the one place where a command's end becomes an exit status.

    A full disk or a vanished directory under an output, a closed pipe on stdout, an
    interrupt: each ends here in one line and a named exit status, never a traceback.
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        code: Any = EXIT_OK
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            sys.stdout.flush()
        except click.ClickException as exc:
            exc.show()
            code = exc.exit_code
        except (click.Abort, KeyboardInterrupt):
            _error("interrupted")
            code = EXIT_INTERRUPTED
        except OutputError as exc:
            _error(str(exc))
            code = EXIT_USAGE
        except OSError as exc:
            message = stdout_error(exc) if exc.filename is None else f"{exc.filename}: {exc.strerror or exc}"
            silence_stdout()
            if message is not None:
                _error(message)
                code = EXIT_USAGE
        sys.exit(code if isinstance(code, int) else EXIT_OK)


@contextmanager
def progress_bar(paths: list[str]) -> Iterator[Any]:
    """A rich progress bar over the bytes of ``paths``, or a no-op when not useful."""
    total = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
    err = _stderr()
    if not err.is_terminal or total < PROGRESS_MIN_BYTES:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), console=err, transient=True) as prog:
        task = prog.add_task("reading", total=total)
        yield lambda n: prog.advance(task, n)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="logforensics")
def main() -> None:
    """Forensic analyzer for SGLang inference-server logs.

    Reads multi-rank SGLang logs of any version (interleaved ranks, tqdm bars,
    tracebacks without prefixes) into typed events and explains what happened.
    Memory figures are GiB: SGLang's "GB" is GiB.

    Wherever a command takes a run (LOGS, BASELINE, FAILING) it takes a file, a
    directory (its *.log, *.out, *.err, compressed or not), a quoted glob, or (LOGS)
    several files: one per node of a multi-node launch, or the prefill, decode and
    router logs of a disaggregated one. They are read as one run.
    """


def _run(args: tuple[str, ...] | list[str]) -> RunFiles:
    try:
        return run_files(list(args))
    except InputError as exc:
        raise fail(str(exc)) from None


@main.command()
@click.argument("logs", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl", "csv", "parquet"]), default="table",
              show_default=True, help="Output format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Write here instead of stdout (required for parquet).")
@click.option("--kind", "kinds", multiple=True, help="Only events of this kind (repeatable).")
def parse(logs: tuple[str, ...], fmt: str, output: str, kinds: tuple[str, ...]) -> None:
    """Print every event of the run LOGS, file after file, each in order.

    jsonl gives one JSON object per event with kind, rank, ts, file, line (as grep -n
    counts), node (in a run of several files, or when a wrapper names it) and the
    event's own fields, units in their names (avail_gib, elapsed_s).
    parquet is written in row groups, in bounded memory; csv goes through pandas and
    holds all events in memory.
    """
    if fmt == "parquet" and output == "-":
        raise fail("--format parquet needs -o FILE")
    wanted = set(kinds)
    if wanted:
        from .read.kinds import event_kinds

        unknown = sorted(wanted - event_kinds())
        if unknown:
            raise fail(f"unknown event kind(s) {', '.join(unknown)}; valid kinds: {', '.join(sorted(event_kinds()))}")
    try:
        check_writable(output)
    except OutputError as exc:
        raise fail(str(exc)) from None
    run = _run(logs)
    with progress_bar(run.paths) as advance:
        _parse_out(run, fmt, output, wanted, advance)


def _parse_out(run: RunFiles, fmt: str, output: str, wanted: set[str], advance: Any) -> None:
    events = (ev for ev in _events_or_fail(run, advance) if not wanted or ev.kind in wanted)
    try:
        if fmt in ("csv", "parquet"):
            _write_frame(events, fmt, output)
            return
        with open_output(output, "w") as out:
            for ev in events:
                if fmt == "jsonl":
                    out.write(json.dumps(ev.to_dict(), ensure_ascii=False, default=str) + "\n")
                else:
                    out.write(_table_line(ev) + "\n")
    except BrokenPipeError:
        _silence_broken_pipe()


def _events_or_fail(run: RunFiles, progress: Any = None):
    try:
        yield from iter_run_events(run, progress=progress,
                                   warn=lambda path, msg: click.echo(f"logforensics: warning: {path}: {msg}", err=True))
    except InputError as exc:
        raise fail(str(exc)) from None


def _table_line(ev: Any) -> str:
    fields = " ".join(f"{k}={_short(v)}" for k, v in ev.fields.items() if k not in ("lines", "frames"))
    if ev.kind == "exception":
        fields = f"{ev.fields.get('exception')}: {(ev.fields.get('message') or '')[:120]!r} frames={len(ev.fields.get('frames') or [])}"
    elif ev.kind == "other":
        fields = ev.text[:160]
    where = f"{ev.node}  " if ev.node else ""
    return f"{where}{ev.file}:{ev.line:<7} {ev.rank or '-':<12} {ev.kind:<18} {fields}"


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _write_frame(events: Any, fmt: str, output: str) -> None:
    if fmt == "parquet":
        from .render.tables import write_parquet

        with open_output(output, "wb") as fh:
            write_parquet(events, fh)
        return
    import pandas as pd

    rows = []
    for ev in events:
        row = ev.to_dict()
        rows.append({k: (json.dumps(v, default=str) if isinstance(v, (dict, list)) else v) for k, v in row.items()})
    frame = pd.DataFrame(rows)
    with open_output(output, "w") as fh:
        frame.to_csv(fh, index=False)


@main.command()
@click.argument("logs", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def summary(logs: tuple[str, ...], as_json: bool) -> None:
    """Summarise one run: outcome, ranks, phase reached, memory per rank, crash.

    LOGS is one run: a file, several files (one per node or server), a directory or a
    quoted glob. Ranks and the crash name their node and file; ranks that the parallel
    sizes call for but no file shows are listed as missing.
    """
    run = _run(logs)
    try:
        with progress_bar(run.paths) as advance:
            s = summarize_run(run, progress=advance)
    except InputError as exc:
        raise fail(str(exc)) from None
    try:
        if as_json:
            click.echo(json.dumps(s.to_dict(), indent=2, default=str, ensure_ascii=False))
        else:
            from .render.terminal import render_summary

            render_summary(s, stdout_console())
    except BrokenPipeError:
        _silence_broken_pipe()


FAIL_ON = {"error": ("error",), "warning": ("error", "warning"), "never": ()}


@main.command()
@click.argument("logs", nargs=-1, required=True, metavar="[BASELINE] FAILING", type=click.Path(allow_dash=True))
@click.option("--store", "store_dir", type=click.Path(file_okay=False),
              help="Choose the baseline from this store (see scan): the latest ready run with the same "
              "model, parallel sizes and settings hash. FAILING is then a log, a run_id or a stored source.")
@click.option("-o", "--output", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Write the HTML report here.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the diagnosis as JSON to PATH ('-' for stdout: the terminal summary then goes to stderr).")
@click.option("--fail-on", type=click.Choice(["error", "warning", "never"]), default="error", show_default=True,
              help="Exit 1 when a finding of this severity (or worse) is raised.")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory of your own rule files (*.yml), in addition to the built-in rules.")
def diff(logs: tuple[str, ...], store_dir: str | None, html_path: str | None, json_path: str | None,
         fail_on: str, rules_dirs: tuple[str, ...]) -> None:
    """Compare a FAILING run's logs with a BASELINE's and explain what differs and why.

    Each run is a file, a directory of per-node (or prefill/decode/router) logs, a
    quoted glob, or a summary saved with `summary --json` (a .json file). Give BASELINE
    FAILING, or --store DIR FAILING to take the baseline from a store (the choice is
    stated first). Prints the verdict and the findings with their evidence lines
    (file:line, rank), and optionally writes an HTML report (-o) and JSON (--json).
    Exit status: 0 when no finding reaches --fail-on, 1 when one does, 2 on bad usage
    or unreadable input.
    """
    from .diagnose.rulespec import RuleError
    from .fleet.store import StoreError
    from .pipeline import diagnose_runs

    if len(logs) != (1 if store_dir else 2):
        raise fail("give BASELINE FAILING, or --store DIR FAILING")
    if logs.count("-") > 1:
        raise fail("only one of BASELINE and FAILING can be '-' (stdin)")
    try:  # before the work: a report that cannot be written is known now
        for path in (html_path, json_path):
            if path:
                check_writable(path)
    except OutputError as exc:
        raise fail(str(exc)) from None
    chosen = None
    try:
        if store_dir:
            from .fleet.diffstore import diagnose_in_store
            from .fleet.store import Store

            d, chosen = diagnose_in_store(Store(store_dir), logs[0], rules_dirs)
        else:
            base_run, fail_run = _run([logs[0]]), _run([logs[1]])
            with progress_bar(base_run.paths + fail_run.paths) as advance:
                d = diagnose_runs(fail_run, base_run, rules_dirs=rules_dirs, progress=advance)
    except (InputError, RuleError, StoreError) as exc:
        raise fail(str(exc)) from None
    to_stdout_json = json_path == "-"
    console = make_console(stderr=True) if to_stdout_json else stdout_console()
    from .render.diff import render_diagnosis

    if chosen:
        console.print(chosen, markup=False, highlight=False)

    # Files first: a closed pipe on the terminal side (| head) must not cost the report.
    written = []
    if json_path and not to_stdout_json:
        _write_text(json_path, json.dumps(d.to_dict(), indent=2, default=str, ensure_ascii=False) + "\n")
        written.append(f"JSON written to {json_path}")
    if html_path:
        from .render.html import render_html

        _write_text(html_path, render_html(d))
        written.append(f"HTML report written to {html_path}")
    try:
        render_diagnosis(d, console)
        if to_stdout_json:
            click.echo(json.dumps(d.to_dict(), indent=2, default=str, ensure_ascii=False))
        for line in written:
            console.print(Text(line))
    except BrokenPipeError:
        _silence_broken_pipe()
    if any(f.severity in FAIL_ON[fail_on] for f in d.findings):
        raise click.exceptions.Exit(EXIT_FINDINGS)


@main.command()
@click.argument("logs", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-", show_default=True,
              help="Write the Markdown here ('-': stdout).")
@click.option("--baseline", type=click.Path(allow_dash=True), default=None,
              help="A run that worked, to compare with (a file, directory, glob or saved summary).")
@click.option("--no-redact", is_flag=True,
              help="Keep home and model paths, hostnames, IP addresses, API keys, tokens and request text.")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory of your own rule files (*.yml), in addition to the built-in rules.")
def bundle(logs: tuple[str, ...], output: str, baseline: str | None, no_redact: bool,
           rules_dirs: tuple[str, ...]) -> None:
    """Write one Markdown comment for an issue thread about the run in LOGS.

    Under GitHub's 65,536-character limit: the verdict, a phase table per rank, the first
    traceback of each distinct failure with the ranks that share it, the memory table, the
    server_args that differ from SGLang's defaults, versions and environment, the findings
    and what to run next. Redacted by default (home and model paths, hostnames, IP
    addresses, API keys and tokens, request text), with the list of what was replaced at
    the end; --no-redact keeps everything.
    """
    from .diagnose.rulespec import RuleError
    from .pipeline import diagnose_runs
    from .render.bundle import render_bundle

    try:
        if output != "-":
            check_writable(output)
    except OutputError as exc:
        raise fail(str(exc)) from None
    fail_run = _run(logs)
    base_run = _run([baseline]) if baseline else None
    try:
        with progress_bar(fail_run.paths + (base_run.paths if base_run else [])) as advance:
            d = diagnose_runs(fail_run, base_run, rules_dirs=rules_dirs, progress=advance)
    except (InputError, RuleError) as exc:
        raise fail(str(exc)) from None
    runs = ([("baseline", d.baseline)] if d.baseline else []) + [("failing", d.failing)]
    text = render_bundle(d, runs, redact=not no_redact)
    if output == "-":
        try:
            click.echo(text, nl=False)
        except BrokenPipeError:
            _silence_broken_pipe()
        return
    _write_text(output, text)


class _Seconds(click.ParamType):
    """A finite, non-negative number of seconds (``nan``, ``inf`` and ``-1`` are refused)."""

    name = "seconds"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or seconds < 0:
            self.fail(f"{value!r} is not a finite, non-negative number of seconds", param, ctx)
        return seconds


SECONDS = _Seconds()


@main.command()
@click.argument("logs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--host", "hosts", multiple=True, help="Follow a log on this host over SSH (an alias from "
              "~/.ssh/config works). Repeat for several nodes: one live view with a node column.")
@click.option("--path", "remote_paths", multiple=True, help="The log's path on --host (one per --host, in "
              "order). Without it, the SGLang server processes on the host are found and the file their "
              "output goes to is followed.")
@click.option("--inventory", type=click.Path(dir_okay=False), help="A file of hosts to follow, one per line: "
              "HOST [PATH] [node=NAME] [user=NAME] [port=N] ('#' starts a comment).")
@click.option("--user", help="SSH user (default: from ~/.ssh/config, else the local user).")
@click.option("--port", type=click.IntRange(1, 65535), help="SSH port (default: from ~/.ssh/config, else 22).")
@click.option("-i", "identity", type=click.Path(dir_okay=False), help="SSH private key (else ~/.ssh/config or the agent).")
@click.option("--known-hosts", type=click.Path(dir_okay=False), help="known_hosts file (default ~/.ssh/known_hosts).")
@click.option("--accept-new-host-key", is_flag=True, help="Trust an unknown host key on first use and save it "
              "(like OpenSSH's accept-new); a changed key is still refused.")
@click.option("--baseline", type=click.Path(dir_okay=False), help="A baseline log: phase times are compared "
              "with it, silent ranks flagged, and the crash diagnosed against it.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="On a crash, write the HTML report here.")
@click.option("--until", type=click.Choice(["crash", "ready", "exit"]), default="crash", show_default=True,
              help="When to stop: crash = exit 1 on a crash (else follow until interrupted); ready = exit 0 "
              "once the server is ready (1 if it crashes first); exit = follow until the log goes quiet after "
              "the server stopped or crashed.")
@click.option("--jsonl", is_flag=True, help="Write events to stdout as JSON lines (as parse --format jsonl); "
              "status and diagnosis go to stderr.")
@click.option("--grace", type=SECONDS, default=2.0, show_default=True,
              help="Seconds to collect other ranks' tracebacks after the first crash before exiting.")
@click.option("--idle-exit", type=SECONDS, default=10.0, show_default=True,
              help="With --until exit: seconds of silence after the server stopped before exiting.")
@click.option("--wait-timeout", type=SECONDS, default=None,
              help="Give up (exit 2) when the log has not appeared after this many seconds (default: wait).")
@click.option("--silent-after", type=SECONDS, default=60.0, show_default=True,
              help="With --baseline: flag a rank silent for longer than this and 3x the baseline's time "
              "for its phase (a hang).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory of your own rule files (*.yml).")
def watch(logs: tuple[str, ...], hosts: tuple[str, ...], remote_paths: tuple[str, ...], inventory: str | None,
          user: str | None, port: int | None,
          identity: str | None, known_hosts: str | None, accept_new_host_key: bool, baseline: str | None,
          report_path: str | None, until: str, jsonl: bool, grace: float, idle_exit: float,
          wait_timeout: float | None, silent_after: float, rules_dirs: tuple[str, ...]) -> None:
    """Follow a server log live (LOGS locally, or --host over SSH) and explain a crash the moment it happens.

    Shows per rank the phase, its progress, free memory, time in phase and seconds
    since the rank last spoke. On a crash: the full traceback (once per distinct
    traceback, with the ranks that share it), the diagnosis from the same rules as
    diff, a bell, the HTML report with --report, and exit status 1. A single LOG may be '-'
    (standard input, read until it ends). A LOG that does not exist yet is waited for.

    Several LOGS (one per node, or prefill/decode/router), several --host (each with its
    own --path, or discovery) or an --inventory are followed at once as one run: one view
    with a node column (the first is node 0, whose readiness counts), --jsonl events carry
    node and file, and a crash on any node ends the watch with the diagnosis of the run.
    """
    from .watch.loop import run_watch

    if bool(logs) == bool(hosts or inventory):
        raise fail("give either LOGS (local files) or --host HOST / --inventory FILE (over SSH)")
    if logs and remote_paths:
        raise fail("--path goes with --host; for a local file give LOGS")
    if len(logs) > 1 or len(hosts) > 1 or inventory:
        from .watch.multi import Target, host_targets, read_inventory, run_watch_multi

        try:
            if logs:
                from .ingest.runset import labelled

                targets = [Target(f.node or f"node{i}", f.path) for i, f in enumerate(labelled(logs))]
            else:
                targets = host_targets(hosts, remote_paths) + (read_inventory(inventory) if inventory else [])
        except InputError as exc:
            raise fail(str(exc)) from None
        code = run_watch_multi(targets, ssh={"user": user, "port": port, "identity": identity,
                                             "known_hosts": known_hosts, "accept_new_host_key": accept_new_host_key},
                               baseline=[baseline] if baseline else None, report_path=report_path, until=until,
                               jsonl=jsonl, grace=grace, idle_exit=idle_exit, rules_dirs=rules_dirs,
                               silent_after=silent_after)
        raise click.exceptions.Exit(code)
    if len(remote_paths) > 1:
        raise fail("give one --path per --host")
    log, host = (logs[0] if logs else None), (hosts[0] if hosts else None)
    remote_path = remote_paths[0] if remote_paths else None
    code = run_watch(log=log, host=host, remote_path=remote_path, user=user, port=port, identity=identity,
                     known_hosts=known_hosts, accept_new_host_key=accept_new_host_key, baseline=baseline,
                     report_path=report_path, until=until, jsonl=jsonl, grace=grace, idle_exit=idle_exit,
                     rules_dirs=rules_dirs, silent_after=silent_after, wait_timeout=wait_timeout)
    raise click.exceptions.Exit(code)


@main.command()
@click.argument("directory", required=False, default="fixtures", type=click.Path(file_okay=False))
@click.option("--update", is_flag=True, help="(Re)write the expectations from the current results; review the diff.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Also write a JUnit XML report here.")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory of your own rule files (*.yml).")
def check(directory: str, update: bool, junit_path: str | None, rules_dirs: tuple[str, ...]) -> None:
    """Run every fixture case under DIRECTORY (default: fixtures/) against its expectations.

    A case is a directory with baseline.log and failing.log (a diff case) or run.log,
    or any other NAME.log (a single-run case); runs of several files (one per node, or
    prefill/decode/router) are baseline/ and failing/ directories, or a run/ directory.
    Expectations (expected.yml or
    NAME.expected.yml) are written by --update and carry a hash, so hand edits show.
    Exits 1 when any case differs, naming what changed.
    """
    from rich.table import Table

    from .check import discover, junit_xml, run_all
    from .diagnose.rulespec import RuleError, load_rules
    from .render.console import plain
    from .render.terminal import table_box

    if not os.path.isdir(directory):
        raise fail(f"{directory}: no such directory")
    if junit_path:
        try:
            check_writable(junit_path)
        except OutputError as exc:
            raise fail(str(exc)) from None
    try:
        rules = load_rules(rules_dirs)
    except RuleError as exc:
        raise fail(str(exc)) from None
    cases = discover(directory)
    if not cases:
        raise fail(f"{directory}: no cases (directories with baseline.log + failing.log, run.log, or *.log)")
    outcomes = run_all(cases, rules, update=update)
    if junit_path:  # before the terminal output, which a closed pipe can cut short
        _write_text(junit_path, junit_xml(outcomes))
    console = stdout_console()
    table = Table(title=plain(f"logforensics check {directory}"), box=table_box(console))
    for col in ("case", "status", "what changed"):
        table.add_column(col)
    style = {"ok": "green", "updated": "cyan", "changed": "red", "missing": "yellow", "edited": "red", "error": "red"}
    for o in outcomes:
        shown = o.changes[:4] + ([f"... {len(o.changes) - 4} more"] if len(o.changes) > 4 else [])
        table.add_row(plain(o.case.name), Text(o.status, style=style[o.status]), plain("\n".join(shown), lines=True))
    console.print(table)
    bad = [o for o in outcomes if o.status not in ("ok", "updated")]
    console.print(Text(f"{len(outcomes) - len(bad)} passed, {len(bad)} failed"))
    if bad:
        raise click.exceptions.Exit(EXIT_FINDINGS)


_STORE = click.option("--store", "store_dir", required=True, type=click.Path(file_okay=False),
                      help="The store directory (written by scan).")
_FORMAT = click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
                       show_default=True, help="Output format (json: a list of objects).")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--store", "store_dir", required=True, type=click.Path(file_okay=False),
              help="The store directory (created if missing; scanned again, only new and changed files are read).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: worker processes on this machine; ray: Ray Data tasks on a Ray cluster "
              "(pip install 'logforensics[ray]').")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Parallel workers (default: the number of CPUs; with --engine ray, the CPUs of a local cluster).")
@click.option("--ray-address", default=None, help="With --engine ray: the cluster to join (ray.init address, "
              "e.g. 10.0.0.5:6379 or auto); default: start a local cluster for this scan.")
@click.option("--group-by", type=click.Choice(["file", "dir"]), default="file", show_default=True,
              help="file: each log is a run, except per-node files of one directory (node0.log, "
              "job_nodeN.out), which form one; dir: every directory is one run.")
@click.option("--no-events", is_flag=True, help="Do not write the events table (smaller store, faster scan).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory of your own rule files (*.yml), for the findings table.")
def scan(paths: tuple[str, ...], store_dir: str, engine: str, jobs: int | None, ray_address: str | None,
         group_by: str, no_events: bool, rules_dirs: tuple[str, ...]) -> None:
    """Parse every run under PATHS (files or directories of *.log, *.out, *.err) into a Parquet store.

    Tables runs, ranks, findings, events and summaries, in Hive-style partitions that
    DuckDB, Spark, Trino or pandas read directly (schema: docs/fleet.md). A second scan
    reads only files that are new or changed (size, mtime, hash of the first 64 KiB) and
    says how many it skipped. Unreadable files are warned about and skipped.
    """
    from .diagnose.rulespec import RuleError
    from .fleet.engines import EngineError
    from .fleet.scan import scan as run_scan
    from .fleet.store import StoreError

    if ray_address and engine != "ray":
        raise fail("--ray-address goes with --engine ray")
    with _scan_progress() as (on_plan, on_run):
        try:
            r = run_scan(paths, store_dir, engine=engine, jobs=jobs, group_by=group_by, events=not no_events,
                         ray_address=ray_address, rules_dirs=rules_dirs, on_plan=on_plan, on_run=on_run)
        except (StoreError, EngineError, RuleError, InputError) as exc:
            raise fail(str(exc)) from None
    for line in r.warnings + r.errors:
        click.echo(f"logforensics: warning: {line}", err=True)
    click.echo(f"{store_dir}: {r.runs_found} runs in {r.files_found} files; parsed {r.runs_parsed}, "
               f"skipped {r.runs_skipped} unchanged ({r.files_skipped} files), {len(r.errors)} unreadable; "
               f"{r.findings} findings")
    if r.runs_found == 0 or (r.errors and r.runs_parsed == 0 and r.runs_skipped == 0):
        raise click.exceptions.Exit(EXIT_USAGE)


@contextmanager
def _scan_progress() -> Iterator[tuple[Any, Any]]:
    """A progress bar over the runs to parse, on stderr when it is a terminal."""
    err = _stderr()
    if not err.is_terminal:
        yield None, None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as prog:
        task = prog.add_task("scanning", total=None)
        yield (lambda n: prog.update(task, total=n)), (lambda _run: prog.advance(task))


def _rows_out(store_dir: str, sql: str, params: list[Any], fmt: str, title: str | None = None) -> None:
    from .fleet.query import QueryError, run_sql
    from .fleet.store import Store, StoreError
    from .render.rows import write_rows

    try:
        columns, rows = run_sql(Store(store_dir), sql, params)
    except (StoreError, QueryError) as exc:
        raise fail(str(exc)) from None
    try:
        write_rows(columns, rows, fmt, sys.stdout, stdout_console() if fmt == "table" else None, title)
    except BrokenPipeError:
        _silence_broken_pipe()


@main.command()
@_STORE
@click.argument("sql")
@_FORMAT
def query(store_dir: str, sql: str, fmt: str) -> None:
    """Run SQL (DuckDB's dialect) over the store's tables: runs, ranks, findings, events, summaries.

    Example: logforensics query --store fleet "SELECT outcome, count(*) FROM runs GROUP BY 1"
    """
    _rows_out(store_dir, sql, [], fmt)


@main.command()
@_STORE
@click.option("--outcome", type=click.Choice(["ready", "crashed", "hung", "incomplete"]), help="Only runs with this outcome.")
@click.option("--model", help="Only runs whose model contains this text (case-insensitive).")
@click.option("--version", "version", help="Only runs whose log shows this SGLang version.")
@_FORMAT
def runs(store_dir: str, outcome: str | None, model: str | None, version: str | None, fmt: str) -> None:
    """The runs of a store, latest first: outcome, first rank, crash phase, fingerprint, model, sizes."""
    from .fleet.query import runs_sql

    sql, params = runs_sql(outcome, model, version)
    _rows_out(store_dir, sql, params, fmt, "runs")


@main.command()
@_STORE
@_FORMAT
def crashes(store_dir: str, fmt: str) -> None:
    """Crash groups by fingerprint (exception type, innermost SGLang function, phase), most runs first.

    With the number of runs, first and last seen, the SGLang versions and nodes, and
    the latest run's source.
    """
    from .fleet.query import CRASHES_SQL

    _rows_out(store_dir, CRASHES_SQL, [], fmt, "crashes")


def _write_text(path: str, text: str) -> None:
    try:
        write_output(path, text)
    except OutputError as exc:
        raise fail(str(exc)) from None


def _silence_broken_pipe() -> None:
    silence_stdout()


if __name__ == "__main__":  # pragma: no cover
    main()
