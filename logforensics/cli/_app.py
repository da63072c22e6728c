"""The command group, its exit statuses, consoles, progress bars and one-line errors.

Shared by every command module of the package; a command registers itself on :data:`main`.
"""

from __future__ import annotations

import gc
import itertools
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from ..outputs import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    OutputError,
    check_outputs,
    silence_stdout,
    stdout_error,
    write_output,
)
from ..version import __version__

if TYPE_CHECKING:
    from rich.console import Console

    from ..pipeline import RunFiles

#: Files larger than this get a progress bar on stderr (when stderr is a terminal).
PROGRESS_MIN_BYTES = 32 << 20


def stdout_console() -> Console:
    """rich on a terminal; plain wide text (no colour codes) when piped."""
    from ..render.console import make_console  # rich: only for a command that prints with it

    return make_console()


def _stderr() -> Console:
    from ..render.console import make_console  # rich: only for a command that prints with it

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
        _tolerant_streams()
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
    err = _stderr() if total >= PROGRESS_MIN_BYTES else None  # rich only for a bar that may show
    if err is None or not err.is_terminal:
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
    # What the imports made lives as long as the process: out of the collector's sight, so
    # that its collections during a long read walk only what the read made.
    gc.freeze()
    # No command does linear algebra, but numpy (which pyarrow and pandas import) starts
    # OpenBLAS threads that spin on the cores the reader and the Parquet encoders need
    # (about 4% of the CPU time of writing Parquet on two cores).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _utf8(stream: Any) -> bool:
    import codecs

    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name == "utf-8"
    except LookupError:
        return False


def _tolerant_streams() -> None:
    """A terminal or pipe that is not UTF-8 (``PYTHONIOENCODING=ascii``, a Latin-1 locale)
    gets what it cannot show as ``\\xe9`` escapes, never a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if not _utf8(stream) and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def json_ascii() -> bool:
    """Whether JSON for standard output must be ASCII (``\\u00e9``): standard output is not
    UTF-8, and escapes of the stream would not be JSON."""
    return not _utf8(sys.stdout)


def _run(args: tuple[str, ...] | list[str], artefacts: Iterable[str] = ()) -> RunFiles:
    from ..pipeline import InputError, run_files  # the grammar and the run model: not for --help

    gc.freeze()  # the modules the command imported join those frozen in main(), before the read
    try:
        return run_files(list(args), list(artefacts))
    except InputError as exc:
        raise fail(str(exc)) from None


def guard_outputs(outputs: Iterable[str | None], *inputs: Iterable[str]) -> None:
    """Every command that writes a file calls this with its outputs and all it reads, before
    it reads anything: an output that cannot be written, or that is one of the inputs, is
    one line and exit status 2 (``outputs.check_outputs``)."""
    try:
        check_outputs(outputs, itertools.chain(*inputs))
    except OutputError as exc:
        raise fail(str(exc)) from None


def files_of(arg: str) -> list[str]:
    """The files ``arg`` names when it names a run (a file, directory or glob), else none
    (``diff --store``'s FAILING may be a run_id; a log ``watch`` waits for is not there yet)."""
    from ..pipeline import InputError, run_files  # the grammar and the run model: not for --help

    try:
        return run_files([arg]).paths
    except InputError:
        return []


def rule_files(rules_dirs: Iterable[str]) -> list[str]:
    """The files ``--rules`` directories give (as ``diagnose.rulespec.load_rules`` finds
    them, no more than it reads): inputs that an output must not overwrite."""
    from pathlib import Path

    from ..diagnose.bounds import MAX_RULE_FILES

    found: list[str] = []
    for d in rules_dirs:
        if os.path.isdir(d):
            found += [str(f) for f in itertools.islice(Path(d).rglob("*.y*ml"), MAX_RULE_FILES + 1)]
    return found


def _write_text(path: str, text: str) -> None:
    try:
        write_output(path, text)
    except OutputError as exc:
        raise fail(str(exc)) from None


def _silence_broken_pipe() -> None:
    silence_stdout()
