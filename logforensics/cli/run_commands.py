"""Commands over one run or a pair: ``parse``, ``summary``, ``diff``, ``bundle``."""

from __future__ import annotations

import json
import os
import platform
import re
import sys
from typing import TYPE_CHECKING, Any

import click

from .. import native
from ..outputs import (
    EXIT_FINDINGS,
    open_output,
    output_path,
    writes_through,
)
from ._app import (
    _run,
    _silence_broken_pipe,
    _write_text,
    fail,
    files_of,
    guard_outputs,
    json_ascii,
    main,
    progress_bar,
    rule_files,
    stdout_console,
)

if TYPE_CHECKING:
    from ..diagnose.engine import Diagnosis
    from ..model.summary import RunSummary
    from ..pipeline import RunFiles


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
    jsonl is written a block at a time and parquet in row groups, both in bounded
    memory (the records the accelerator knows are written from C, with the same
    result as LOGFORENSICS_PURE=1; parquet reads the log once, keeping its row groups
    on disk, compressed, until the last line has fixed the columns, then writes them
    with pyarrow's ParquetWriter); csv goes through pandas and holds all events in memory.
    """
    if fmt == "parquet" and output == "-":
        raise fail("--format parquet needs -o FILE")
    wanted = set(kinds)
    if wanted:
        from ..read.kinds import event_kinds

        unknown = sorted(wanted - event_kinds())
        if unknown:
            raise fail(f"unknown event kind(s) {', '.join(unknown)}; valid kinds: {', '.join(sorted(event_kinds()))}")
    run = _run(logs)
    guard_outputs([output], run.paths)
    with progress_bar(run.paths) as advance:
        _parse_out(run, fmt, output, wanted, advance)


def _parse_out(run: RunFiles, fmt: str, output: str, wanted: set[str], advance: Any) -> None:
    events = (ev for ev in _events_or_fail(run, advance) if not wanted or ev.kind in wanted)
    try:
        if fmt == "parquet" and _parquet_fast(run, output, wanted, advance):
            return
        if fmt in ("csv", "parquet"):
            _write_frame(events, fmt, output)
            return
        if fmt == "jsonl" and _jsonl_fast(run, output, wanted, advance):
            return
        from ..export.jsonl import event_line

        ascii_only = output == "-" and json_ascii()
        with open_output(output, "w") as out:
            for ev in events:
                out.write(event_line(ev, ascii_only) if fmt == "jsonl" else _table_line(ev) + "\n")
    except BrokenPipeError:
        _silence_broken_pipe()


def _jsonl_fast(run: RunFiles, output: str, wanted: set[str], advance: Any) -> bool:
    """jsonl with the compiled row writer, when it is built and the output takes UTF-8;
    False (nothing written) otherwise."""
    import sys

    from ..export.jsonl import fast_encoding
    from ..pipeline import InputError, write_run_jsonl

    errors = "strict"
    if output == "-":
        if not fast_encoding(getattr(sys.stdout, "encoding", None)) or not hasattr(sys.stdout, "buffer"):
            return False
        errors = sys.stdout.errors or "strict"
        sys.stdout.flush()
    if not native.available():
        return False
    try:
        with open_output(output, "wb") as out:
            write_run_jsonl(run, out, wanted=wanted, progress=advance, errors=errors,
                            warn=lambda path, msg: click.echo(f"logforensics: warning: {path}: {msg}", err=True))
    except InputError as exc:
        raise fail(str(exc)) from None
    return True


def _choose_arrow_pool() -> None:
    """Arrow's allocator, where the user did not choose (ARROW_DEFAULT_MEMORY_POOL, read when
    pyarrow is first imported): pyarrow's default, mimalloc, keeps 40 MiB more of the encoders'
    freed buffers (a peak of 200 MiB against 155 on a 1 GiB log); jemalloc, in pyarrow's x86-64
    Linux wheels, is as small and 6% faster than the C library's malloc, which is the choice
    elsewhere: pyarrow's aarch64 wheels are built without jemalloc, and naming it there made Arrow
    print a warning on every run. (Asking pyarrow which pools it has means importing it, which
    is too late to choose.)"""
    jemalloc = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc" if jemalloc else "system")


def _parquet_fast(run: RunFiles, output: str, wanted: set[str], advance: Any) -> bool:
    """parquet with the compiled column writer, when it is built; False (nothing written) otherwise."""
    from ..pipeline import InputError, write_run_parquet

    if not native.available():
        return False
    # pyarrow's modules join those frozen before the read (``_app._run``): unfrozen, each
    # full collection during the read walked them again (about 0.05-0.1 s a collection)
    import gc

    _choose_arrow_pool()
    import pyarrow.parquet  # noqa: F401

    gc.freeze()
    try:
        # a path where it can (pyarrow then writes without the GIL), else a file object
        opened = open_output(output, "wb") if writes_through(output) else output_path(output)
        with opened as where:
            write_run_parquet(run, where, wanted=wanted, progress=advance,
                              warn=lambda path, msg: click.echo(f"logforensics: warning: {path}: {msg}", err=True))
    except InputError as exc:
        raise fail(str(exc)) from None
    return True


def _events_or_fail(run: RunFiles, progress: Any = None):
    from ..pipeline import InputError, iter_run_events

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
        from ..export.tables import write_parquet

        with open_output(output, "wb") as fh:
            write_parquet(events, fh)
        return
    from ..export.csv import write_csv

    with open_output(output, "w") as fh:
        write_csv(events, fh)


_REDACT = click.option("--redact", is_flag=True,
                       help="Replace home, environment and model paths, hostnames, IP and e-mail addresses, keys, tokens, passwords "
                       "and request text by placeholders (<IP-address-1>), as `bundle` does.")
_BESIDE_HELP = ("files beside the logs (check_env, nvidia-smi, pip freeze, Slurm/kernel/Ray records, kubectl describe "
                "or -o yaml, docker inspect, crash dumps): read as their content says, with the run in LOGS")
_ENV = click.option("--env", "env_files", multiple=True, type=click.Path(dir_okay=False),
                    help="An environment file (repeatable): check_env, nvidia-smi, pip freeze; one of the " + _BESIDE_HELP)
_ARTEFACTS = click.option("--artifacts", "artefacts", multiple=True, type=click.Path(),
                          help="A file or directory of " + _BESIDE_HELP + " (repeatable). A run directory's own are "
                          "found without it.")
_KEEP_PROMPTS = click.option("--keep-prompts", is_flag=True,
                             help="With redaction: keep prompts and completions (request text, input_ids).")


@main.command()
@click.argument("logs", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_REDACT
@_KEEP_PROMPTS
@_ENV
@_ARTEFACTS
def summary(logs: tuple[str, ...], as_json: bool, redact: bool, keep_prompts: bool, env_files: tuple[str, ...],
            artefacts: tuple[str, ...]) -> None:
    """Summarise one run: outcome, ranks, phase reached, memory per rank, crash.

    LOGS is one run: a file, several files (one per node or server), a directory, a
    quoted glob, or a summary saved with `summary --json` (read back, not parsed).
    Ranks and the crash name their node and file; ranks that the parallel sizes call
    for but no file shows are listed as missing. A hybrid model's KV pools (full, SWA,
    Mamba, ...) are listed one by one with their lines, and the start-up order of KV
    allocation and CUDA-graph capture is stated.
    """
    from ..pipeline import InputError, summarize_run  # the grammar and the run model: not for --help

    run = _run(logs, env_files + artefacts)
    try:
        s = _saved_summary(run)
        if s is None:
            with progress_bar(run.paths) as advance:
                s = summarize_run(run, progress=advance)
    except InputError as exc:
        raise fail(str(exc)) from None
    if redact:
        from ..render.redact import redacted

        s = redacted(s, keep_prompts)
    try:
        if as_json:
            click.echo(json.dumps(s.to_dict(), indent=2, default=str, ensure_ascii=json_ascii()))
        else:
            from ..render.terminal import render_summary

            render_summary(s, stdout_console())
    except BrokenPipeError:
        _silence_broken_pipe()


#: How ``summary --json`` begins (``{"file": ...``, indented): a saved summary under any name.
_SAVED_HEAD = re.compile(rb'\A\s*\{\s*"file"\s*:')
#: A file larger than this is no saved summary, whatever its head (it is read whole).
_SAVED_MAX_BYTES = 64 << 20


def _saved_summary(run: RunFiles) -> RunSummary | None:
    """The summary a run of one saved ``summary --json`` holds, read back as ``diff`` reads
    it (``pipeline.load_run``), else None: parsed as a log, its JSON made a run of no ranks
    and a false outcome. A ``.json`` file must be one (else one line names what is wrong);
    a file of another name is one when it begins as that output does and reads back whole.
    A ``.json`` file among several of a run is refused: a summary stands for a whole run."""
    from ..model.summary import RunSummary as Summary
    from ..pipeline import InputError, load_run

    saved = [p for p in run.paths if p.lower().endswith(".json")]
    if saved and not run.single:
        raise InputError(f"{saved[0]}: a saved summary (.json) stands for a whole run; give it alone")
    if saved:
        return load_run(saved[0])
    path = run.paths[0]
    if not run.single or path == "-":
        return None
    try:
        if os.path.getsize(path) > _SAVED_MAX_BYTES:
            return None
        with open(path, "rb") as fh:
            head = fh.read(256)
            if not _SAVED_HEAD.match(head):
                return None
            return Summary.from_dict(json.loads(head + fh.read()))
    except (OSError, ValueError, TypeError, AttributeError, KeyError):  # not a saved summary after all: a log
        return None


FAIL_ON = {"error": ("error",), "warning": ("error", "warning"), "never": ()}


@main.command()
@click.argument("logs", nargs=-1, required=True, metavar="[BASELINE] FAILING", type=click.Path(allow_dash=True))
@click.option("--store", "store_dir", type=click.Path(file_okay=False),
              help="Choose the baseline from this store (see scan): the nearest earlier ready run of the same "
              "setup (model, TP/DP/PP, GPU, SGLang version), its differing settings listed. FAILING is then a "
              "log, a run_id or a stored source.")
@click.option("-o", "--output", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Write the HTML report here.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the diagnosis as JSON to PATH ('-' for stdout: the terminal summary then goes to stderr).")
@click.option("--fail-on", type=click.Choice(["error", "warning", "never"]), default="error", show_default=True,
              help="Exit 1 when a finding of this severity (or worse) is raised.")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory of your own rule files (*.yml), in addition to the built-in rules.")
@_REDACT
@_KEEP_PROMPTS
@_ENV
@_ARTEFACTS
@click.option("--baseline-env", "base_env", multiple=True, type=click.Path(dir_okay=False),
              help="--env for BASELINE.")
@click.option("--baseline-artifacts", "base_artefacts", multiple=True, type=click.Path(),
              help="--artifacts for BASELINE.")
def diff(logs: tuple[str, ...], store_dir: str | None, html_path: str | None, json_path: str | None,
         fail_on: str, rules_dirs: tuple[str, ...], redact: bool, keep_prompts: bool, env_files: tuple[str, ...],
         artefacts: tuple[str, ...], base_env: tuple[str, ...], base_artefacts: tuple[str, ...]) -> None:
    """Compare a FAILING run's logs with a BASELINE's and explain what differs and why.

    Each run is a file, a directory of per-node (or prefill/decode/router) logs, a
    quoted glob, or a summary saved with `summary --json` (a .json file). Give BASELINE
    FAILING, or --store DIR FAILING to take the baseline from a store (the choice is
    stated first). Prints the verdict and the findings with their evidence lines
    (file:line, rank), and optionally writes an HTML report (-o) and JSON (--json);
    --redact replaces private text in all of them, as `bundle` does.
    Exit status: 0 when no finding reaches --fail-on, 1 when one does, 2 on bad usage
    or unreadable input.
    """
    from ..diagnose.rulespec import RuleError
    from ..pipeline import InputError, diagnose_runs

    if len(logs) != (1 if store_dir else 2):
        raise fail("give BASELINE FAILING, or --store DIR FAILING")
    if logs.count("-") > 1:
        raise fail("only one of BASELINE and FAILING can be '-' (stdin)")
    # before the work: a report that cannot be written, or would overwrite an input, is known now
    runs = [] if store_dir else [_run([logs[0]], base_env + base_artefacts), _run([logs[1]], env_files + artefacts)]
    guard_outputs([html_path, json_path], [p for r in runs for p in r.paths],
                  files_of(logs[0]) if store_dir else [], rule_files(rules_dirs))
    chosen = None
    if store_dir:
        d, chosen = _diagnose_in_store(store_dir, logs[0], rules_dirs)
    else:
        base_run, fail_run = runs
        try:
            with progress_bar(base_run.paths + fail_run.paths) as advance:
                d = diagnose_runs(fail_run, base_run, rules_dirs=rules_dirs, progress=advance)
        except (InputError, RuleError) as exc:
            raise fail(str(exc)) from None
    if redact:  # before any output: the terminal's, the JSON and the HTML show the same placeholders
        from ..render.redact import redacted

        d, chosen = redacted((d, chosen), keep_prompts)
    from rich.text import Text  # rich: only where a command prints with it

    from ..render.console import make_console
    from ..render.diff import render_diagnosis

    to_stdout_json = json_path == "-"
    console = make_console(stderr=True) if to_stdout_json else stdout_console()

    if chosen:
        console.print(chosen, markup=False, highlight=False, soft_wrap=True)  # whole lines, for grep and scripts

    # Files first: a closed pipe on the terminal side (| head) must not cost the report.
    written = []
    if json_path and not to_stdout_json:
        _write_text(json_path, json.dumps(d.to_dict(), indent=2, default=str, ensure_ascii=False) + "\n")
        written.append(f"JSON written to {json_path}")
    if html_path:
        from ..render.html import render_html

        _write_text(html_path, render_html(d))
        written.append(f"HTML report written to {html_path}")
    try:
        render_diagnosis(d, console)
        if to_stdout_json:
            click.echo(json.dumps(d.to_dict(), indent=2, default=str, ensure_ascii=json_ascii()))
        for line in written:
            console.print(Text(line))
    except BrokenPipeError:
        _silence_broken_pipe()
    if any(f.severity in FAIL_ON[fail_on] for f in d.findings):
        raise click.exceptions.Exit(EXIT_FINDINGS)


def _diagnose_in_store(store_dir: str, failing: str, rules_dirs: tuple[str, ...]) -> tuple[Diagnosis, str]:
    """``diff --store``: the diagnosis against the baseline the store chooses, and that choice."""
    from ..diagnose.rulespec import RuleError
    from ..fleet.diffstore import diagnose_in_store  # pyarrow: only for a store
    from ..fleet.query import QueryError
    from ..fleet.store import Store, StoreError
    from ..pipeline import InputError

    try:
        return diagnose_in_store(Store(store_dir), failing, rules_dirs)
    except (InputError, RuleError, StoreError, QueryError) as exc:
        raise fail(str(exc)) from None


@main.command()
@click.argument("logs", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-", show_default=True,
              help="Write the Markdown here ('-': stdout).")
@click.option("--baseline", type=click.Path(allow_dash=True), default=None,
              help="A run that worked, to compare with (a file, directory, glob or saved summary).")
@click.option("--no-redact", is_flag=True,
              help="Keep home, environment and model paths, hostnames, IP and e-mail addresses, keys, tokens, passwords and "
              "request text.")
@_KEEP_PROMPTS
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory of your own rule files (*.yml), in addition to the built-in rules.")
@_ENV
@_ARTEFACTS
def bundle(logs: tuple[str, ...], output: str, baseline: str | None, no_redact: bool, keep_prompts: bool,
           rules_dirs: tuple[str, ...], env_files: tuple[str, ...], artefacts: tuple[str, ...]) -> None:
    """Write one Markdown comment for an issue thread about the run in LOGS.

    Under GitHub's 65,536-character limit: the verdict, a phase table per rank, the first
    traceback of each distinct failure with the ranks that share it, the memory table, the
    server_args that differ from SGLang's defaults, versions and environment, the findings
    and what to run next. Redacted by default (home, environment and model paths, hostnames, IP and
    e-mail addresses, API keys, tokens, passwords and signed URLs, private keys, prompts
    and completions), with the list of what was replaced at the end; --keep-prompts keeps
    the request text, --no-redact keeps everything.
    """
    from ..diagnose.rulespec import RuleError
    from ..pipeline import InputError, diagnose_runs
    from ..render.bundle import render_bundle

    fail_run = _run(logs, env_files + artefacts)
    base_run = _run([baseline]) if baseline else None
    guard_outputs([output], fail_run.paths, base_run.paths if base_run else [], rule_files(rules_dirs))
    try:
        with progress_bar(fail_run.paths + (base_run.paths if base_run else [])) as advance:
            d = diagnose_runs(fail_run, base_run, rules_dirs=rules_dirs, progress=advance)
    except (InputError, RuleError) as exc:
        raise fail(str(exc)) from None
    # one log is "the run": no side of a comparison, and nothing says it failed
    runs = [("baseline", d.baseline), ("failing", d.failing)] if d.baseline else [("run", d.failing)]
    text = render_bundle(d, runs, redact=not no_redact, keep_prompts=keep_prompts)
    if output == "-":
        try:
            click.echo(text, nl=False)
        except BrokenPipeError:
            _silence_broken_pipe()
        return
    _write_text(output, text)
