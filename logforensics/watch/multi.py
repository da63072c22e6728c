"""``watch`` over several files or hosts at once: one live view with a node column.

A launch over several nodes (or a prefill/decode pair and its router) writes one log per
machine. Each source (a local file, or a host over SSH with its own ``--path`` or
discovery) is followed in its own thread and fed to its own :class:`WatchState` (the
same ``LiveRun`` as ``parse``), labelled with its node; the main loop takes items from
all of them in arrival order. A crash on any node ends the watch with the diagnosis of
the whole run (``model.nodes.combine`` over every node's summary so far), as ``diff``
of the finished files would give it.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..diagnose.engine import Diagnosis, evaluate
from ..diagnose.rulespec import RuleError, load_rules
from ..ingest import InputError, LiveRun
from ..model.nodes import NodeSummary, combine
from ..model.run import rank_sort_key
from ..outputs import EXIT_FINDINGS as EXIT_CRASH
from ..outputs import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, OutputError, check_writable
from ..render.console import make_console
from ..render.terminal import table_box
from ..sources import Chunk, Notice, SourceError
from ..units import fmt
from .state import SETTLE_AFTER, WatchState
from .view import crash_line, print_crash

_STOP_MARKERS = ("Application shutdown complete", "Finished server process", "Shutting down")


@dataclass(frozen=True)
class Target:
    """One source to follow: a local file (``host`` None) or a host with a path (None: discover)."""

    node: str
    path: str | None
    host: str | None = None
    user: str | None = None
    port: int | None = None


def read_inventory(path: str) -> list[Target]:
    """Hosts from an inventory file: one per line, ``HOST [PATH] [node=NAME] [user=NAME] [port=N]``;
    ``#`` starts a comment. Without a path the host's server log is discovered."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    out: list[Target] = []
    for n, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        host, rest = words[0], words[1:]
        opts = dict(w.split("=", 1) for w in rest if "=" in w)
        paths = [w for w in rest if "=" not in w]
        if len(paths) > 1 or set(opts) - {"node", "user", "port"}:
            raise InputError(f"{path}:{n}: expected 'HOST [PATH] [node=NAME] [user=NAME] [port=N]'")
        try:
            port = int(opts["port"]) if "port" in opts else None
        except ValueError:
            raise InputError(f"{path}:{n}: port must be a number") from None
        out.append(Target(opts.get("node") or host, paths[0] if paths else None, host, opts.get("user"), port))
    if not out:
        raise InputError(f"{path}: no hosts in the inventory")
    return _unique_nodes(out)


def host_targets(hosts: Sequence[str], paths: Sequence[str]) -> list[Target]:
    """``--host a --path A --host b --path B``: paired in order; no ``--path`` at all means
    discovery on every host."""
    if paths and len(paths) != len(hosts):
        raise InputError(f"give one --path per --host ({len(hosts)} hosts, {len(paths)} paths), or none to discover")
    return _unique_nodes([Target(h, paths[i] if paths else None, h) for i, h in enumerate(hosts)])


def _unique_nodes(targets: list[Target]) -> list[Target]:
    """Two sources on one host are told apart by their file: ``host:server``."""
    from ..ingest.runset import file_stem

    count: dict[str, int] = {}
    for t in targets:
        count[t.node] = count.get(t.node, 0) + 1
    return [Target(f"{t.node}:{file_stem(t.path)}" if count[t.node] > 1 and t.path else t.node, t.path, t.host,
                   t.user, t.port) for t in targets]


def _open(t: Target, ssh: dict[str, Any]) -> tuple[Any, str]:
    if t.host is None:
        from ..sources import LocalFollower

        return LocalFollower(t.path or "-", follow=True), str(t.path)
    from ..sources import SSHFollower

    follower = SSHFollower(t.host, t.path, user=t.user or ssh.get("user"), port=t.port or ssh.get("port"),
                           key_filename=ssh.get("identity"), known_hosts=ssh.get("known_hosts"),
                           accept_new_host_key=bool(ssh.get("accept_new_host_key")))
    return follower, follower.label


def follow_many(sources: Sequence[Any], *, tick: float = 0.05) -> Iterator[tuple[int, Any]]:
    """``(index, item)`` from every source as items come, ``(-1, "tick")`` when none came
    for ``tick`` seconds; a source's end is ``(index, None)``."""
    q: queue.Queue[tuple[int, Any]] = queue.Queue()
    stop = threading.Event()

    def pump(i: int, src: Any) -> None:
        try:
            for item in src:
                q.put((i, item))
                if stop.is_set():
                    break
        except Exception as exc:  # noqa: BLE001 - handed to the main loop, which reports it
            q.put((i, exc))
        finally:
            q.put((i, None))

    threads = [threading.Thread(target=pump, args=(i, s), daemon=True) for i, s in enumerate(sources)]
    for t in threads:
        t.start()
    try:
        while True:
            try:
                yield q.get(timeout=tick)
            except queue.Empty:
                yield -1, "tick"
    finally:
        stop.set()
        for s in sources:
            try:
                s.stop()
            except Exception:  # noqa: BLE001
                pass


class MultiWatch:
    """Every node's live state, and the diagnosis of the run they make together."""

    def __init__(self, targets: Sequence[Target], names: Sequence[str], base: Any, rules: Any,
                 silent_after: float) -> None:
        self.targets = list(targets)
        self.names = list(names)
        self.base, self.rules, self.silent_after = base, rules, silent_after
        self.states = [self._state(i) for i in range(len(targets))]
        self.crash_at: float | None = None
        self.crash_node: str | None = None
        self.diagnosis: Diagnosis | None = None

    def _state(self, i: int) -> WatchState:
        return WatchState(LiveRun(self.names[i], node=self.targets[i].node), self.base, self.rules,
                          silent_after=self.silent_after)

    def restart(self, i: int) -> list[Any]:
        """The file at source ``i`` was truncated or rotated: its old records end here."""
        events = self.states[i].run.close()
        self.states[i] = self._state(i)
        return events

    def feed(self, i: int, data: bytes, now: float) -> list[Any]:
        return self._took(i, self.states[i].feed(data, now), now)

    def settle(self, i: int, now: float) -> list[Any]:
        """Source ``i`` paused: the events of its bytes that waited for the verdict on text."""
        return self._took(i, self.states[i].settle(now), now)

    def _took(self, i: int, events: list[Any], now: float) -> list[Any]:
        if self.crash_at is None and self.states[i].crash_at is not None:
            self.crash_at, self.crash_node = now, self.targets[i].node
            self.diagnosis = self.diagnose()
        return events

    def diagnose(self) -> Diagnosis:
        parts = [NodeSummary(t.node, name, st.snapshot(), role=st.run.pd.role, rank_nodes=dict(st.run.rank_nodes),
                             pd=st.run.pd.to_dict())
                 for t, name, st in zip(self.targets, self.names, self.states)]
        return evaluate(self.rules, combine(parts, source=" ".join(self.names)), self.base)

    @property
    def ready(self) -> bool:
        """Node 0 (the first source: the one with the HTTP server) is ready."""
        return self.states[0].ready_at is not None

    def table(self, now: float, console: Console) -> Table:
        read = sum(s.bytes_read for s in self.states)
        t = Table(title=f"{len(self.states)} nodes  ({read / 1e6:.1f} MB read)", box=table_box(console))
        for col in ("node", "rank", "phase", "progress", "avail GiB", "in phase", "silent"):
            t.add_column(col, justify="left" if col in ("node", "rank", "phase", "progress") else "right")
        for target, st in zip(self.targets, self.states):
            if not st.ranks:
                t.add_row(target.node, "-", "ready" if st.ready_at else "-", "", "", "", "")
            for label in sorted(st.ranks, key=rank_sort_key):
                r = st.ranks[label]
                progress = r.progress[1] if r.progress and r.progress[0] == r.phase else ""
                t.add_row(target.node, label, r.phase or "-", progress, fmt(r.avail_gib, key="avail_gib"),
                          f"{now - r.phase_since_wall:.0f}s", f"{now - r.last_wall:.0f}s")
        return t


class _PlainMulti:
    """Status lines for pipes: one per change, prefixed with the node."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.seen: dict[tuple[str, str], Any] = {}
        self.ready = False
        self.alerts: dict[str, int] = {}  # serving-health alerts printed, per node

    def update(self, mw: MultiWatch) -> None:
        for target, st in zip(mw.targets, mw.states):
            for label in sorted(st.ranks, key=rank_sort_key):
                r = st.ranks[label]
                if self.seen.get((target.node, label)) != r.phase:
                    self.seen[(target.node, label)] = r.phase
                    self.console.print(f"[watch] {target.node} {label}: {r.phase or '-'} (line {r.last_line})",
                                       markup=False, highlight=False)
        if mw.ready and not self.ready:
            self.ready = True
            self.console.print(f"[watch] server ready ({mw.targets[0].node})", markup=False, highlight=False)
        for target, st in zip(mw.targets, mw.states):
            for alert in st.alerts[self.alerts.get(target.node, 0):]:
                self.console.print(f"[watch] {target.node} serving: {alert}", markup=False, highlight=False)
            self.alerts[target.node] = len(st.alerts)


def run_watch_multi(targets: Sequence[Target], *, ssh: dict[str, Any], baseline: Sequence[str] | None,
                    report_path: str | None, until: str, jsonl: bool, grace: float, idle_exit: float,
                    rules_dirs: tuple[str, ...], silent_after: float = 60.0, redact: bool = False,
                    keep_prompts: bool = False) -> int:
    """Follow every target; see the module docstring. Returns the exit status."""
    err = make_console(stderr=True)
    out = make_console()
    status = err if jsonl or not out.is_terminal else out
    sources: list[Any] = []
    try:
        if report_path:  # known now, not after the crash it was meant to record
            check_writable(report_path)
        from ..read.grammar import warm_up

        warm_up()
        rules = load_rules(rules_dirs)
        base = None
        if baseline:
            from ..pipeline import summarize_run

            base = summarize_run(list(baseline))
        names = []
        for t in targets:
            src, name = _open(t, ssh)
            sources.append(src)
            names.append(name)
    except (InputError, RuleError, SourceError, OutputError) as exc:
        for s in sources:
            s.stop()
        err.print(f"logforensics: error: {exc}", markup=False)
        return EXIT_USAGE
    mw = MultiWatch(targets, names, base, rules, silent_after)
    plain = _PlainMulti(status)
    live = Live(console=out, refresh_per_second=4, transient=False) if out.is_terminal and not jsonl else None
    stdout = sys.stdout
    done = [False] * len(sources)
    stopped_at: float | None = None
    last_data = time.monotonic()
    data_at = [last_data] * len(sources)  # when each source last gave bytes
    code: int | None = None
    printed = False

    def emit(events: list[Any]) -> None:
        if jsonl and events:
            stdout.write("".join(json.dumps(e.to_dict(), ensure_ascii=False, default=str) + "\n" for e in events))
            stdout.flush()

    try:
        if live is not None:
            live.start()
        for i, item in follow_many(sources):
            now = time.monotonic()
            if isinstance(item, Chunk):
                last_data = data_at[i] = now
                events = mw.feed(i, item.data, now)
                emit(events)
                if i == 0 and stopped_at is None and any(
                        e.kind == "uvicorn_msg" and any(m in e.text for m in _STOP_MARKERS) for e in events):
                    stopped_at = now
            elif isinstance(item, Notice):
                note = f"[watch] {targets[i].node}: {item.kind}: {item.message}"
                if live is None:
                    status.print(note, markup=False, highlight=False)
                if item.kind in ("truncated", "rotated"):
                    emit(mw.restart(i))
            elif isinstance(item, Exception):
                if live is not None:
                    live.stop()
                err.print(f"logforensics: error: {targets[i].node}: {item}", markup=False)
                return EXIT_USAGE
            elif item is None and i >= 0:
                done[i] = True
                if all(done):
                    break
            else:  # a tick: the sources that paused
                for k, at in enumerate(data_at):
                    if now - at >= SETTLE_AFTER:
                        emit(mw.settle(k, now))
            for k, st in enumerate(mw.states):
                st.serving_health(now, force=done[k])
            if live is not None:
                extra = [Text("server ready", style="bold green")] if mw.ready else []
                extra += [Text(f"serving: {t.node}: {a}", style="yellow")
                          for t, st in zip(mw.targets, mw.states) for a in st.alerts[-3:]]
                live.update(Group(mw.table(now, out), *extra))
            else:
                plain.update(mw)
            if mw.crash_at is not None and not printed:
                printed = True
                if live is not None:
                    live.stop()
                    live = None
                d = mw.diagnosis
                assert d is not None
                print_crash(d, status)
                status.print(crash_line(d.failing.crash, mw.crash_node) + "\a", markup=False, highlight=False)
                status.file.flush()
            if mw.crash_at is not None and until in ("crash", "ready") and now - mw.crash_at >= grace:
                code = EXIT_CRASH
                break
            if until == "ready" and mw.ready and mw.crash_at is None:
                code = EXIT_OK
                break
            if until == "exit" and (mw.crash_at is not None or stopped_at is not None) and now - last_data >= idle_exit:
                code = EXIT_CRASH if mw.crash_at is not None else EXIT_OK
                break
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        if live is not None:
            live.stop()
        for s in sources:
            try:
                s.stop()
            except Exception:  # noqa: BLE001
                pass
    if code is None:
        code = EXIT_CRASH if mw.crash_at is not None else EXIT_OK
    if mw.crash_at is not None and report_path:
        from ..render.html import write_html
        from ..render.redact import redacted_if

        write_html(redacted_if(mw.diagnose(), redact, keep_prompts), report_path)
        status.print(f"[watch] HTML report written to {report_path}", markup=False)
    return code
