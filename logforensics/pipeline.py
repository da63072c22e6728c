"""The small public facade: a run's logs to events, to a run summary, to a diagnosis.

Each call goes through the one pipeline (``ingest.LiveRun``): the same parser and run
model that ``watch`` feeds chunk by chunk. A run is one file or several (one per node or
server, ``ingest.runset``); their summaries are combined by ``model.nodes.combine``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import IO, TYPE_CHECKING, Any

from .events import Event
from .ingest import InputError, LiveRun, RunFiles, blocks, read_file, read_run, run_files
from .model.nodes import combine
from .model.run import RunSummary
from .model.summary import SummaryFormatError
from .read.fastpath import LineClassifier
from .read.parser import IncrementalParser

__all__ = ["InputError", "LiveRun", "RunFiles", "diagnose_files", "diagnose_runs", "iter_events", "with_beside",
           "iter_run_events", "load_run", "run_files", "summarize_file", "summarize_run", "write_run_jsonl",
           "write_run_parquet"]

if TYPE_CHECKING:
    from .diagnose.engine import Diagnosis
    from .export.jsonl import JsonlStats
    from .export.parquet import ParquetStats

RunArgs = str | Sequence[str] | RunFiles


def _files(run: RunArgs) -> RunFiles:
    if isinstance(run, RunFiles):
        return run
    return run_files([run] if isinstance(run, str) else list(run))


def summarize_run(run: RunArgs, *, progress: Callable[[int], None] | None = None,
                  memo: LineClassifier | None = None) -> RunSummary:
    """One run's summary from its files (a path, a directory, a glob, several of them, or
    a ``RunFiles``): each file read alone, then combined across nodes and servers
    (``memo``: a classifier whose learned line shapes the reads share)."""
    files = _files(run)
    return with_beside(combine(read_run(files, progress=progress, memo=memo), source=files.source), files)


def with_beside(summary: RunSummary, files: RunFiles) -> RunSummary:
    """A run's summary with what the files beside its logs say (``files.artefacts``):
    ``model.beside.with_artefacts``; files of no known form, and what could only be read
    in part, are the summary's warnings."""
    if not files.artefacts:
        return summary
    from .artefacts.sniff import read_artefacts
    from .model.beside import with_artefacts

    said: list[str] = []
    arts = read_artefacts(files.artefacts, warn=said.append)
    summary = with_artefacts(summary, arts)
    said += [f"{p}: {why}" for p, why in arts.unknown.items()]
    return replace(summary, warnings=summary.warnings + said) if said else summary


def iter_run_events(run: RunArgs, *, progress: Callable[[int], None] | None = None,
                    warn: Callable[[str, str], None] | None = None) -> Iterator[Event]:
    """Every event of a run's files, file after file, each labelled with its file's node;
    ``warn(path, message)`` hears what the opener warns of (input that is not text)."""
    from .ingest.runset import resolve_node

    for f in _files(run).files:
        yield from iter_events(f.path, node=resolve_node(f), progress=progress,
                               warn=None if warn is None else partial(warn, f.path))


def write_run_jsonl(run: RunArgs, out: IO[bytes], *, wanted: Collection[str] = (),
                    progress: Callable[[int], None] | None = None,
                    warn: Callable[[str, str], None] | None = None, errors: str = "strict") -> list[JsonlStats]:
    """The jsonl rows of ``iter_run_events`` (kinds ``wanted``, or all) written to ``out``
    (binary, UTF-8) by the compiled row writer (``native.available()`` must be true)."""
    from .export.jsonl import write_jsonl
    from .ingest.runset import resolve_node

    return [write_jsonl(f.path, out, node=resolve_node(f), wanted=wanted, progress=progress, errors=errors,
                        warn=None if warn is None else partial(warn, f.path))
            for f in _files(run).files]


def write_run_parquet(run: RunArgs, where: str | IO[bytes], *, wanted: Collection[str] = (),
                      progress: Callable[[int], None] | None = None,
                      warn: Callable[[str, str], None] | None = None) -> list[ParquetStats]:
    """The events of ``iter_run_events`` (kinds ``wanted``, or all) as one Parquet file,
    by the compiled column writer (``native.available()`` must be true)."""
    from .export.parquet import write_run_parquet as write
    from .ingest.runset import resolve_node

    return write([(f.path, resolve_node(f)) for f in _files(run).files], where, wanted=wanted, progress=progress,
                 warn=warn)


def summarize_file(path: str | os.PathLike[str], *, name: str | None = None,
                   progress: Callable[[int], None] | None = None) -> RunSummary:
    """Parse a whole log and return its run summary."""
    return read_file(path, name=name, progress=progress).summary()


def load_run(path: str | os.PathLike[str], *, progress: Callable[[int], None] | None = None) -> RunSummary:
    """A run summary from a log, or from a summary saved by ``summary --json`` (a
    ``.json`` file), which is read back as it was saved, without the log."""
    p = os.fspath(path)
    if not p.endswith(".json"):
        return summarize_file(p, progress=progress)
    try:
        with open(p, encoding="utf-8") as fh:
            return RunSummary.from_dict(json.load(fh))
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except (ValueError, SummaryFormatError) as exc:  # json.JSONDecodeError is a ValueError
        raise InputError(f"{p}: {exc}") from None


def iter_events(path: str | os.PathLike[str], *, name: str | None = None,
                progress: Callable[[int], None] | None = None, node: str | None = None,
                warn: Callable[[str], None] | None = None) -> Iterator[Event]:
    """Every event of a log, in order (a generator: constant memory)."""
    parser = IncrementalParser(name or os.fspath(path), node=node)
    for block in blocks(path, progress, warn=warn):
        yield from parser.feed(block)
    yield from parser.close()


def diagnose_files(failing: str, baseline: str | None, *, rules_dirs: Iterable[str] = (),
                   progress: Any = None) -> Diagnosis:
    """Summarise both logs and evaluate the rules: the findings ``diff`` reports."""
    from .diagnose.engine import evaluate  # the rules engine (jinja2, yaml): only for a diagnosis
    from .diagnose.rulespec import load_rules

    rules = load_rules(rules_dirs, eager=False)  # first: a bad rule file fails before any parsing
    base = summarize_file(baseline, progress=progress) if baseline else None
    return evaluate(rules, summarize_file(failing, progress=progress), base)


def diagnose_runs(failing: RunArgs, baseline: RunArgs | None, *, rules_dirs: Iterable[str] = (),
                  progress: Any = None) -> Diagnosis:
    """``diagnose_files`` for runs of one or several files each."""
    from .diagnose.engine import evaluate  # the rules engine (jinja2, yaml): only for a diagnosis
    from .diagnose.rulespec import load_rules

    rules = load_rules(rules_dirs, eager=False)
    memo = LineClassifier(None)  # both runs learn each line shape once
    base = _run_or_saved(baseline, progress, memo) if baseline else None
    return evaluate(rules, _run_or_saved(failing, progress, memo), base)


def _run_or_saved(run: RunArgs, progress: Any, memo: LineClassifier | None = None) -> RunSummary:
    """A run's summary, or the saved summary when the run is one ``.json`` file."""
    if isinstance(run, RunFiles):
        one = run.paths[0] if run.single else None
    else:
        one = run if isinstance(run, str) else (run[0] if len(run) == 1 else None)
    if isinstance(one, str) and one.endswith(".json"):
        return load_run(one)
    return summarize_run(run, progress=progress, memo=memo)
