"""What ``logforensics mcp`` offers a coding agent, as plain functions over the pipeline.

Each tool returns the same typed JSON as the commands' ``--json`` (a summary's ``to_dict``, a
diagnosis's verdict, conclusion and findings), with ``text``, a short summary in words, and
pages what can be long (``offset``, ``limit``, ``total``, ``next_offset``: never cut
silently). A bad input is a :class:`ToolInputError` with a one-line message; the server
returns it to the agent as the tool's error. Nothing here knows MCP: ``server.py`` wires
these functions to the protocol, and the tests call both.
"""

from __future__ import annotations

import copy
import glob
import os
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..artefacts.environment import KEYS
from ..artefacts.sniff import read_artefacts, walk
from ..artefacts.types import Cited
from ..diagnose.environment import compare
from ..fleet.query import QueryError, run_sql
from ..fleet.store import Store, StoreError
from ..ingest import InputError, RunFiles, run_files
from ..ingest.files import open_log
from ..pipeline import diagnose_runs, summarize_run
from ..render.redact import Redactor

#: Findings per page, and the most a page may ask for.
FINDINGS_PAGE, MOST_FINDINGS = 20, 200
#: Lines a ``get_lines`` window may span, and the characters kept of each line.
MOST_LINES, LINE_CHARS = 400, 4000
#: Rows a ``query_store`` page may hold.
MOST_ROWS = 1000


class ToolInputError(ValueError):
    """A tool's input that cannot be used (a missing file, bad SQL, an unknown finding)."""


@dataclass(frozen=True)
class Remote:
    """The hosts whose files the tools may read over SSH (``--hosts``) and how to reach them:
    ``watch``'s options and host-key rules (known_hosts; an unknown or changed key refused
    unless ``accept_new_host_key`` trusts a new one on first use)."""

    hosts: tuple[str, ...] = ()
    user: str | None = None
    port: int | None = None
    identity: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    ssh_config: str | None = None


#: ``HOST:PATH`` (``gpu-a:/var/log/server.log``, ``root@gpu-a:logs/n0.log``): a host, maybe with
#: its user, with neither slash nor colon, then the path on it.
_REMOTE = re.compile(r"^(?P<host>[^/:\s]+):(?P<path>\S.*)$")
#: The most bytes of a file copied over SSH for one call.
MOST_REMOTE_BYTES = 2 << 30


class Session:
    """The server's memory between calls: the findings of the diagnoses made so far, by id
    (``explain_finding`` reads them), at most ``keep`` of them, the oldest forgotten first;
    and the live follows (``watch_*``), at most MOST_WATCHES."""

    def __init__(self, roots: Sequence[str] = (), keep: int = 2000, *, timeout: float | None = None,
                 remote: Remote | None = None) -> None:
        #: the directories whose files the tools may read (all, when empty: for library use)
        self.roots = tuple(os.path.realpath(r) for r in roots)
        self.keep = keep
        #: seconds a call's work may take (None: no bound, the work runs in this process)
        self.timeout = timeout
        self.remote = remote or Remote()
        self.findings: dict[str, dict[str, Any]] = {}
        self.watches: dict[str, LiveWatch] = {}
        self.watch_count = 0
        self._runner: Any = None
        #: a call's own folder, where files read over SSH are copied (removed after the call)
        self.scratch: str | None = None
        #: copied file -> ``HOST:PATH`` it came from, for the call's answer
        self.labels: dict[str, str] = {}

    def __getstate__(self) -> dict[str, Any]:
        """What a call's child process needs: the roots, the hosts, its folder; not the memory."""
        return {"roots": self.roots, "keep": self.keep, "remote": self.remote, "scratch": self.scratch}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(keep=state["keep"], remote=state["remote"])  # type: ignore[misc]
        self.roots, self.scratch = state["roots"], state["scratch"]

    def work(self, fn: Any, *args: Any) -> Any:
        """``fn(session, *args)`` for one call, with its own folder for copies over SSH: under
        the time bound in a child process when there is one (``runner``), else here. A bound
        crossed or a child that dies is a ToolInputError."""
        with tempfile.TemporaryDirectory(prefix="logforensics-call-") as scratch:
            call = copy.copy(self)
            call.scratch, call.labels = scratch, {}
            if self.timeout is None:
                return _answer(fn, call, *args)
            from .runner import ChildFailed, Overrun, Runner

            if self._runner is None:
                self._runner = Runner(self.timeout)
            try:
                status, value = self._runner.call(_answer, fn, call, *args)
            except Overrun:
                raise ToolInputError(f"stopped after {self.timeout:g} s, the time bound of a call (--timeout): "
                                     "give fewer or smaller files, or start the server with a longer --timeout") \
                    from None
            except ChildFailed as e:
                raise ToolInputError(f"the call's process ended without an answer ({e})") from None
            if status == "error":
                raise ToolInputError(value)
            return value

    def local(self, arg: str) -> str:
        """``arg`` itself, or for ``HOST:PATH`` (not a local file) on a host of ``--hosts`` the
        file copied over SSH into the call's folder; a host not allowed is a ToolInputError."""
        m = _REMOTE.match(arg)
        if m is None or os.path.lexists(arg):
            return arg
        host, path = m.group("host"), m.group("path")
        if host.rsplit("@", 1)[-1] not in self.remote.hosts:
            allowed = " --hosts ".join(self.remote.hosts)
            raise ToolInputError(f"{arg}: host {host} is not one this server may read over SSH ("
                                 + (f"--hosts {allowed})" if allowed else "no --hosts given)"))
        if self.scratch is None:
            raise ToolInputError(f"{arg}: this tool reads local files only")
        from ..sources import SourceError, copy_file

        folder = os.path.join(self.scratch, str(len(self.labels)))
        os.makedirs(folder)
        dest = os.path.join(folder, os.path.basename(path.rstrip("/")) or "log")
        r = self.remote
        try:
            copy_file(host, path, dest, user=r.user, port=r.port, key_filename=r.identity,
                      known_hosts=r.known_hosts, accept_new_host_key=r.accept_new_host_key,
                      ssh_config=r.ssh_config, most_bytes=MOST_REMOTE_BYTES)
        except SourceError as e:
            raise ToolInputError(str(e)) from None
        self.labels[dest] = arg
        return dest

    def relabel(self, value: Any) -> Any:
        """``value`` with each copied file's name replaced by the ``HOST:PATH`` it came from."""
        if not self.labels:
            return value
        if isinstance(value, str):
            for local, label in self.labels.items():
                value = value.replace(local, label)
            return value
        if isinstance(value, dict):
            return {k: self.relabel(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.relabel(v) for v in value)
        return value

    def allow(self, path: str) -> str:
        """``path`` when it lies under one of the roots (links resolved), else a ToolInputError."""
        if path == "-":
            raise ToolInputError("standard input is the protocol's: give a file")
        real = os.path.realpath(path)
        if self.scratch and real.startswith(os.path.realpath(self.scratch) + os.sep):
            return path  # copied over SSH for this call
        if self.roots and not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots):
            raise ToolInputError(f"{path}: outside the directories this server may read (--root "
                                 + " --root ".join(self.roots) + ")")
        return path

    def run(self, paths: Sequence[str], what: str) -> RunFiles:
        """The run ``paths`` name (files, directories, globs, ``HOST:PATH`` files), every file of it allowed."""
        try:
            files = run_files([self.local(p) for p in _paths(paths, what)])
        except InputError as e:
            raise ToolInputError(str(e)) from None
        for path in (*files.paths, *files.artefacts):
            self.allow(path)
        return files

    def beside(self, paths: Sequence[str], what: str) -> list[str]:
        """The artefact files ``paths`` name (a run directory: every artefact under it; a
        file: itself when its content is one; globs), each allowed; logs are passed over."""
        from ..ingest.runset import is_artefact

        out: list[str] = []
        for arg in _paths(paths, what):
            self.allow(arg)
            if os.path.isdir(arg):
                found = walk(arg)
            elif os.path.isfile(arg):
                found = [arg]
            elif any(c in arg for c in "*?["):
                found = sorted(p for p in glob.glob(arg) if os.path.isfile(p))
            else:
                raise ToolInputError(f"{arg}: no such file or directory")
            for p in found:
                self.allow(p)
                if p not in out and is_artefact(p):
                    out.append(p)
        return out

    def remember(self, findings: Sequence[dict[str, Any]]) -> None:
        for f in findings:
            self.findings.pop(f["id"], None)
            self.findings[f["id"]] = f
        while len(self.findings) > self.keep:
            self.findings.pop(next(iter(self.findings)))


def _answer(fn: Any, session: Session, *args: Any) -> Any:
    """``fn``'s answer (or error) for one call, in the words of the paths it was given (``HOST:PATH``)."""
    try:
        return session.relabel(fn(session, *args))
    except ToolInputError as e:
        raise ToolInputError(session.relabel(str(e))) from None


def _paths(paths: Sequence[str], what: str) -> list[str]:
    if not paths or not all(isinstance(p, str) and p for p in paths):
        raise ToolInputError(f"{what}: give one or more paths (files, directories or globs)")
    return list(paths)


def summarize_run_tool(session: Session, paths: Sequence[str], full: bool = False) -> dict[str, Any]:
    """One run's summary (``summary --json``); without ``full`` the parts an agent reads first."""
    return session.work(_summary_doc, list(paths), full)


def _summary_doc(session: Session, paths: Sequence[str], full: bool) -> dict[str, Any]:
    try:
        s = summarize_run(session.run(paths, "paths"))
    except InputError as e:
        raise ToolInputError(str(e)) from None
    doc = s.to_dict()
    if not full:
        keep = ("file", "outcome", "outcome_reason", "ranks", "phase_reached", "crash", "hang", "stopped",
                "errors", "ready", "versions", "coverage", "warnings", "missing_ranks", "nodes")
        doc = {k: doc[k] for k in keep if k in doc}
    return {"summary": doc, "text": f"{s.outcome}: {s.outcome_reason}"}


def diff_runs_tool(session: Session, baseline: Sequence[str], failing: Sequence[str], offset: int = 0,
                   limit: int = FINDINGS_PAGE) -> dict[str, Any]:
    """A failing run against a baseline: the verdict, its conclusion and a page of findings."""
    _page([], offset, limit, MOST_FINDINGS)  # a bad page is said before the work
    verdict, conclusion, findings = session.work(_diagnosis, list(baseline), list(failing))
    session.remember(findings)
    page, more = _page(findings, offset, limit, MOST_FINDINGS)
    return {"verdict": verdict, "conclusion": conclusion, "findings": page, **more, "text": verdict}


def _diagnosis(session: Session, baseline: Sequence[str], failing: Sequence[str]) -> tuple[str, dict[str, Any],
                                                                                          list[dict[str, Any]]]:
    try:
        d = diagnose_runs(session.run(failing, "failing"), session.run(baseline, "baseline"))
    except InputError as e:
        raise ToolInputError(str(e)) from None
    findings = [f.to_dict() for f in d.findings]
    for f in findings:
        f.pop("facts", None)  # the rule's inputs: explain_finding has the explanation
    return d.verdict, d.conclusion.to_dict(), findings


def check_env_diff_tool(session: Session, baseline: Sequence[str], failing: Sequence[str]) -> dict[str, Any]:
    """Two runs' environments, from the files beside their logs (``check_env``,
    ``nvidia-smi``, topology, ``pip``): each fact that differs with both values and their
    file:line, the facts equal on both sides, and the facts one side lacks."""
    return session.work(_env_diff, list(baseline), list(failing))


def _env_diff(session: Session, baseline: Sequence[str], failing: Sequence[str]) -> dict[str, Any]:
    envs = {}
    for what, paths in (("baseline", baseline), ("failing", failing)):
        files = session.beside(paths, what)
        arts = read_artefacts(files)
        if arts.environment is None:
            raise ToolInputError(f"{what}: no environment among {len(files)} file(s) of a known form beside the logs "
                                 "(give check_env, nvidia-smi, nvidia-smi topo -m or pip freeze/list/show output, "
                                 "or a run directory holding them)")
        envs[what] = arts.environment
    b, f = envs["baseline"].facts, envs["failing"].facts
    found = compare(b, f)
    labels = {v: k for k, v in KEYS.items()}

    def entry(key: str) -> dict[str, Any]:
        return {"key": key, "label": KEYS[key], "baseline": _cited(b.get(key)), "failing": _cited(f.get(key))}

    differs = [entry(d.key) for d in found.differs]
    same = [entry(labels[x]) for x in found.same]
    one_side = [entry(labels[x]) for x in found.one_side]
    text = (f"{len(differs)} fact(s) differ" + (f": {found.words(6)}" if differs else "")
            + f"; {len(same)} equal; {len(one_side)} shown by one side only")
    return {"differs": differs, "same": same, "one_side": one_side,
            "baseline_files": dict(envs["baseline"].sources), "failing_files": dict(envs["failing"].sources),
            "text": text}


def _cited(c: Cited | None) -> dict[str, Any] | None:
    return None if c is None else {"value": c.value, "file": c.file, "line": c.line, "where": c.where}


def explain_finding_tool(session: Session, finding_id: str) -> dict[str, Any]:
    """A finding of an earlier ``diff_runs`` of this session, by its id: the rule's
    explanation (its formula and figures) and every evidence line, with file:line and rank."""
    f = session.findings.get(finding_id)
    if f is None:
        raise ToolInputError(f"no finding {finding_id!r} in this session: call diff_runs first (ids are "
                             "RULE:RANK:PHASE:HASH)")
    lines = "; ".join(f"{e.get('file')}:{e.get('line')}" + (f" {e['rank']}" if e.get("rank") else "")
                      for e in f["evidence"][:8])
    return {"finding": f, "text": f"{f['rule']} ({f['severity']}, {f['confidence']} confidence): {f['title']}"
            + (f"; evidence {lines}" if lines else "")}


def get_lines_tool(session: Session, path: str, line: int, before: int = 10, after: int = 10,
                   redact: bool = True) -> dict[str, Any]:
    """Lines ``line - before`` to ``line + after`` of a log (compressed or not), each cut to
    LINE_CHARS characters, redacted as ``bundle`` does unless ``redact`` is false."""
    if line < 1 or before < 0 or after < 0:
        raise ToolInputError("line starts at 1; before and after are not negative")
    if before + after + 1 > MOST_LINES:
        raise ToolInputError(f"a window spans at most {MOST_LINES} lines; ask for several")
    return session.work(_window, path, line, before, after, redact)


def _window(session: Session, given: str, line: int, before: int, after: int, redact: bool) -> dict[str, Any]:
    path = session.allow(session.local(given))
    first, last = max(1, line - before), line + after
    out: list[dict[str, Any]] = []
    try:
        with open_log(path) as fh:
            for n, raw in enumerate(_bounded_lines(fh, LINE_CHARS * 4), 1):
                if n > last:
                    break
                if n >= first:
                    out.append({"line": n, "text": raw.decode("utf-8", "replace").rstrip("\r\n")[:LINE_CHARS]})
    except InputError as e:
        raise ToolInputError(str(e)) from None
    except OSError as e:
        raise ToolInputError(f"{path}: {e.strerror or e}") from None
    if redact:
        r = Redactor()
        r.learn([x["text"] for x in out])
        for x in out:
            x["text"] = r.text(x["text"])
    name = os.path.basename(path)
    text = f"{name}: lines {out[0]['line']}-{out[-1]['line']}" if out else f"{name} has no line {line}"
    return {"file": path, "lines": out, "redacted": redact, "text": text}


def _bounded_lines(fh: Any, most: int) -> Any:
    """The stream's lines, each its first ``most`` bytes (the rest of a longer line is read and
    dropped a block at a time: memory stays bounded whatever the line)."""
    while True:
        head = fh.readline(most)
        if not head:
            return
        if not head.endswith(b"\n"):
            while (rest := fh.readline(most)) and not rest.endswith(b"\n"):
                pass
        yield head


def query_store_tool(session: Session, store: str, sql: str, offset: int = 0, limit: int = 100) -> dict[str, Any]:
    """One read-only SQL statement over a fleet store (``query``'s views and dialect), a page of rows."""
    if limit < 1 or limit > MOST_ROWS or offset < 0:
        raise ToolInputError(f"limit is 1 to {MOST_ROWS}, offset not negative")
    return session.work(_rows, store, sql, offset, limit)


def _rows(session: Session, store: str, sql: str, offset: int, limit: int) -> dict[str, Any]:
    session.allow(store)
    try:
        columns, rows = run_sql(Store(store), sql, max_rows=offset + limit + 1)
    except (QueryError, StoreError) as e:
        raise ToolInputError(str(e)) from None
    page = [dict(zip(columns, (_plain(v) for v in row))) for row in rows[offset:offset + limit]]
    more = {"offset": offset, "next_offset": offset + limit if len(rows) > offset + limit else None}
    return {"columns": list(columns), "rows": page, **more, "text": f"{len(page)} row(s)"
            + (", more after" if more["next_offset"] is not None else "")}


#: Live follows a session may hold, and the bytes one poll reads at most (the rest waits).
MOST_WATCHES, POLL_BYTES = 16, 64 << 20
#: Bytes fed to a follow at once between looks at the clock.
FEED_BYTES = 1 << 20


class LiveWatch:
    """One followed log: ``watch``'s live state (the same parser and run model), the bytes read
    so far, and what the last poll reported (so that a poll says only what is new)."""

    def __init__(self, path: str, baseline: Any, timeout: float | None = None) -> None:
        self.path = path
        #: a poll stops reading at half the call's time bound (the judging takes the rest)
        self.budget = None if timeout is None else timeout / 2
        self._reset(baseline)

    def _reset(self, baseline: Any) -> None:
        from ..diagnose.rulespec import load_rules
        from ..ingest import LiveRun
        from ..watch.state import WatchState

        self.offset = 0
        self.state = WatchState(LiveRun(self.path), baseline, list(load_rules(())))
        self.phases: dict[str, str] = {}
        self.outcome: str | None = None
        self.reported: set[str] = set()

    def _feed(self, data: bytes) -> int:
        """Feed ``data`` a block at a time until the poll's time budget is spent; the bytes fed
        (whole lines only when it stops early, so that the next poll goes on from a line start)."""
        start, fed = time.monotonic(), 0
        while fed < len(data):
            block = data[fed:fed + FEED_BYTES]
            if fed + len(block) < len(data):
                cut = block.rfind(b"\n") + 1
                block = block[:cut] if cut else block
            self.state.feed(block, time.time())
            fed += len(block)
            self.offset += len(block)
            if self.budget is not None and time.monotonic() - start > self.budget:
                break
        return fed

    def poll(self) -> dict[str, Any]:
        notes = []
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < self.offset:  # rotated or truncated: a new log from its start
                    notes.append(f"{self.path} shrank from {self.offset} to {size} bytes: read again as a new run")
                    self._reset(self.state.baseline)
                fh.seek(self.offset)
                data = fh.read(POLL_BYTES)
        except OSError as e:
            raise ToolInputError(f"{self.path}: {e.strerror or e}") from None
        fed = self._feed(data)
        if fed < len(data):
            notes.append(f"stopped reading after {self.budget:g} s (half the call's --timeout) at byte "
                         f"{self.offset}: the rest waits for the next poll")
        now = time.time()
        self.state.settle(now)
        summary = self.state.snapshot()
        changes = [{"rank": r, "from": self.phases.get(r), "to": p} for r, p in summary.phase_reached.items()
                   if self.phases.get(r) != p]
        self.phases = dict(summary.phase_reached)
        findings = [f.to_dict() for f in self.state.diagnose().findings]
        new = [f for f in findings if f["id"] not in self.reported]
        self.reported.update(f["id"] for f in new)
        for f in new:
            f.pop("facts", None)
        outcome_changed = summary.outcome != self.outcome
        self.outcome = summary.outcome
        more = " (more to read)" if len(data) == POLL_BYTES or fed < len(data) else ""
        text = (f"{summary.outcome}: {summary.outcome_reason}; {fed} new bytes{more}, "
                f"{len(changes)} phase change(s), {len(new)} new finding(s)")
        return {"outcome": summary.outcome, "outcome_reason": summary.outcome_reason,
                "outcome_changed": outcome_changed, "phase_changes": changes, "new_findings": new,
                "bytes_read": self.offset, "more_to_read": bool(more), "notes": notes, "text": text}


def watch_start_tool(session: Session, path: str, baseline: Sequence[str] | None = None) -> dict[str, Any]:
    """Start following a local log (its whole text so far is read by the first poll)."""
    if len(session.watches) >= MOST_WATCHES:
        raise ToolInputError(f"at most {MOST_WATCHES} follows at once: stop one first (watch_stop)")
    session.allow(path)
    if not os.path.isfile(path):
        raise ToolInputError(f"{path}: no such file")
    base = session.work(_baseline_summary, list(baseline)) if baseline else None
    session.watch_count += 1
    watch_id = f"w{session.watch_count}"
    session.watches[watch_id] = LiveWatch(path, base, session.timeout)
    return {"watch_id": watch_id, "text": f"following {path} as {watch_id}: call watch_poll"}


def _baseline_summary(session: Session, baseline: Sequence[str]) -> Any:
    session.scratch = None  # the summary outlives the call: local files only
    try:
        return summarize_run(session.run(baseline, "baseline"))
    except InputError as e:
        raise ToolInputError(str(e)) from None


def watch_poll_tool(session: Session, watch_id: str) -> dict[str, Any]:
    """What is new in a followed log since the last poll: phase changes, the outcome, new findings."""
    w = session.watches.get(watch_id)
    if w is None:
        raise ToolInputError(f"no follow {watch_id!r}: start one with watch_start")
    out = w.poll()
    session.remember(out["new_findings"])
    return {"watch_id": watch_id, **out}


def watch_stop_tool(session: Session, watch_id: str) -> dict[str, Any]:
    """Stop a follow: the log as read so far, judged as ``summary`` judges a whole log."""
    w = session.watches.pop(watch_id, None)
    if w is None:
        raise ToolInputError(f"no follow {watch_id!r}")
    w.state.close(time.time())
    s = w.state.run.summary()
    return {"watch_id": watch_id, "outcome": s.outcome, "outcome_reason": s.outcome_reason,
            "bytes_read": w.offset, "text": f"stopped {watch_id}: {s.outcome}: {s.outcome_reason}"}


def _page(items: list[dict[str, Any]], offset: int, limit: int, most: int) -> tuple[list[dict[str, Any]],
                                                                               dict[str, Any]]:
    if offset < 0 or limit < 1 or limit > most:
        raise ToolInputError(f"limit is 1 to {most}, offset not negative")
    page = items[offset:offset + limit]
    nxt = offset + limit if offset + limit < len(items) else None
    return page, {"total": len(items), "offset": offset, "next_offset": nxt}


def _plain(v: Any) -> Any:
    """A value as JSON holds it (DuckDB gives dates, decimals, ...)."""
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)
