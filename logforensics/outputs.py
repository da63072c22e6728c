"""Where results go, and the exit statuses that say how a command ended.

Every file a command writes (``parse -o``, ``diff -o/--json``, ``check --junit``,
``watch --report``) goes through :func:`open_output` (or :func:`output_path`, for a writer
that opens the path itself), so that one set of rules holds:

* a regular file, or a path that does not exist yet, is written to a temporary file beside
  it and renamed over it on success: a failed or interrupted write leaves the previous
  file as it was, never half a report;
* a FIFO, a character device (``/dev/stdout``, ``/dev/full``), a socket, and ``-``
  (standard output) are written through: renaming over them would replace the device
  node or the pipe with a regular file;
* a symlink stays a symlink: its target is written by the rules above, as a shell's
  ``>`` would (the link is followed, never replaced);
* an output that is one of the command's inputs (the same file, through a symlink or a
  hard link) is refused by :func:`check_outputs` before anything is read or written:
  writing it would destroy the log it was meant to describe;
* anything that goes wrong is an :class:`OutputError` whose message is one line naming
  the path and the reason.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any

#: Exit statuses, for every command.
EXIT_OK = 0
EXIT_FINDINGS = 1  # diff: a finding reached --fail-on; watch: the server crashed; check: a case changed
EXIT_USAGE = 2  # bad usage, unreadable input, a place that cannot be written, a rule that cannot be used
EXIT_INTERRUPTED = 130


class OutputError(Exception):
    """An output that cannot be written; the message is one line naming the path."""


def reason(exc: OSError) -> str:
    """The short reason of an OSError (``No such file or directory``): the system's words
    for its errno (pyarrow's errors wrap them in a sentence of their own), else its text."""
    if exc.errno:
        return os.strerror(exc.errno)
    return exc.strerror or str(exc) or exc.__class__.__name__


def check_writable(path: str) -> None:
    """Fail now, not after the work, when ``path`` cannot be created (its directory is missing)."""
    if path == "-":
        return
    target = os.path.realpath(path)
    if os.path.exists(target):
        if os.path.isdir(target):
            raise OutputError(f"{path}: is a directory")
        return
    parent = os.path.dirname(target) or "."
    if not os.path.isdir(parent):
        raise OutputError(f"{path}: cannot write (directory {os.path.dirname(path) or '.'} does not exist)")


def check_outputs(outputs: Iterable[str | None], inputs: Iterable[str | os.PathLike[str]]) -> None:
    """Fail now, before anything is read or written, when an output cannot be created
    (:func:`check_writable`) or is one of ``inputs``, the files the command reads (a run's
    files as resolved from its directories and globs, a baseline, rule files): a regular
    file is the same file when its ``(st_dev, st_ino)`` is, whatever path, symlink or hard
    link names it; a path that does not exist yet (a log ``watch`` waits for) is compared
    by its resolved path. ``-``, devices and FIFOs are written through, never replaced,
    and are not compared (``/dev/stdin`` and ``/dev/stdout`` are one terminal)."""
    wanted = [o for o in outputs if o and o != "-"]
    for out in wanted:
        check_writable(out)
    if not wanted:
        return
    read: dict[tuple[Any, ...], str] = {}
    for path in inputs:
        key = _file_key(os.fspath(path))
        if key is not None:
            read.setdefault(key, os.fspath(path))
    for out in wanted:
        key = _file_key(out)
        if key is not None and key in read:
            same = "" if read[key] == out else f" (the same file as the input {read[key]})"
            raise OutputError(f"{out}: is an input of this command{same}; writing it would destroy it, "
                              "choose another output path")


def _file_key(path: str) -> tuple[Any, ...] | None:
    """What makes two paths one file: device and inode of an existing regular file, the
    resolved path of one that does not exist; None for ``-`` and what is written through."""
    if path == "-":
        return None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return ("path", os.path.realpath(path))
    except (OSError, ValueError):
        return None
    return ("inode", st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def writes_through(path: str) -> bool:
    """Whether ``path`` is written through (``-``, a FIFO, a device, a socket), not renamed
    over: a writer that seeks (pyarrow's, opening a path) needs a file object there."""
    return path == "-" or _writes_through(os.path.realpath(path))


def _writes_through(target: str) -> bool:
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(mode)


@contextmanager
def open_output(path: str, mode: str = "w", *, encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """A file object for ``path`` (``-`` is standard output), written by the rules above.

    ``mode`` is ``"w"`` (text) or ``"wb"``. The body's own exceptions pass through; the
    temporary file, if any, is removed.
    """
    binary = "b" in mode
    enc = None if binary else encoding
    if path == "-":
        stream = sys.stdout.buffer if binary else sys.stdout
        try:
            yield stream
            stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(f"standard output: write failed ({reason(exc)})") from None
        return
    with output_path(path) as where:
        try:
            fh = open(where, mode, encoding=enc)  # noqa: SIM115 - closed below
        except OSError as exc:
            raise OutputError(f"{path}: cannot write ({reason(exc)})") from None
        with fh:
            yield fh


@contextmanager
def output_path(path: str) -> Iterator[str]:
    """The path a writer should open to write ``path`` (not ``-``) by the rules above: a
    temporary file beside it, renamed over it when the body ends well, or the path itself
    where it is written through.

    For writers that open a path themselves: pyarrow's Parquet writer, given a Python file
    object, takes the GIL for every write, and its encoding thread then waits on the
    reading one (a 1 GiB log took half as long again); where ``path`` :func:`writes_through`,
    such a writer needs a file object instead. An OSError of the body is an
    :class:`OutputError`; other exceptions pass through; the temporary file is removed.
    """
    check_writable(path)
    target = os.path.realpath(path)
    if _writes_through(target):
        try:
            yield target
        except OSError as exc:
            raise OutputError(f"{path}: write failed ({reason(exc)})") from None
        return
    directory = os.path.dirname(target) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
        os.close(fd)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({reason(exc)})") from None
    try:
        try:
            yield tmp
            _keep_mode(target, tmp)
            os.replace(tmp, target)
        except OSError as exc:
            raise OutputError(f"{path}: write failed ({reason(exc)})") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _keep_mode(target: str, tmp: str) -> None:
    """The replaced file keeps its permissions; a new one gets the usual ones (umask)."""
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    os.chmod(tmp, mode)


def write_output(path: str, data: str | bytes) -> None:
    """Write all of ``data`` to ``path`` by the rules of :func:`open_output`."""
    with open_output(path, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)


def stdout_error(exc: OSError) -> str | None:
    """The one-line message for a failed write to standard output; None for a closed pipe
    (``| head``), which is no error: the reader has what it wanted."""
    if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
        return None
    return f"standard output: write failed ({reason(exc)})"


def silence_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of a closed
    pipe or a full device does not print a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
