"""The ``watch`` main loop: source -> LiveRun -> live view, crash diagnosis, exit code."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.live import Live

from ..diagnose.rulespec import RuleError, load_rules
from ..ingest import InputError, LiveRun
from ..sources import Chunk, Notice, SourceError
from .state import WatchState, follow
from .view import PlainStatus, live_renderable, print_crash

EXIT_OK, EXIT_CRASH, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_STOP_MARKERS = ("Application shutdown complete", "Finished server process", "Shutting down")


def _source(log: str | None, host: str | None, **ssh: Any) -> tuple[Any, str]:
    if log:
        from ..sources import LocalFollower

        return LocalFollower(log, follow=True), log
    from ..sources import SSHFollower

    follower = SSHFollower(host, ssh["remote_path"], user=ssh["user"], port=ssh["port"],
                           key_filename=ssh["identity"], known_hosts=ssh["known_hosts"],
                           accept_new_host_key=ssh["accept_new_host_key"])
    return follower, f"{host}:{getattr(follower, 'target', None) or ssh['remote_path'] or 'server log'}"


def run_watch(*, log: str | None, host: str | None, remote_path: str | None, user: str | None,
              port: int | None, identity: str | None, known_hosts: str | None, accept_new_host_key: bool,
              baseline: str | None, report_path: str | None, until: str, jsonl: bool, grace: float,
              idle_exit: float, rules_dirs: tuple[str, ...], silent_after: float = 60.0) -> int:
    err = Console(stderr=True, highlight=False)
    if not err.is_terminal:
        err = Console(stderr=True, highlight=False, width=160, no_color=True)
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=160, no_color=True)
    status_console = err if jsonl or not out.is_terminal else out
    try:
        from ..read.grammar import warm_up

        warm_up()  # build the parser now, not when the first (maybe crashing) line arrives
        rules = load_rules(rules_dirs)
        base = None
        if baseline:
            from ..pipeline import summarize_file as summarize

            base = summarize(baseline)
        source, name = _source(log, host, remote_path=remote_path, user=user, port=port, identity=identity,
                               known_hosts=known_hosts, accept_new_host_key=accept_new_host_key)
    except (InputError, RuleError, SourceError) as exc:
        err.print(f"logforensics: error: {exc}", markup=False)
        return EXIT_USAGE
    state = WatchState(LiveRun(name), base, rules, silent_after=silent_after)
    live_view = out.is_terminal and not jsonl
    plain = PlainStatus(status_console)
    stdout = sys.stdout
    stopped_at: float | None = None
    last_data = time.monotonic()
    code: int | None = None

    def emit(events: list[Any]) -> None:
        if jsonl and events:
            stdout.write("".join(json.dumps(e.to_dict(), ensure_ascii=False, default=str) + "\n" for e in events))
            stdout.flush()

    live = Live(console=out, refresh_per_second=4, transient=False) if live_view else None
    crash_printed = False
    try:
        if live is not None:
            live.start()
        for item in follow(source):
            now = time.monotonic()
            if isinstance(item, Chunk):
                last_data = now
                events = state.feed(item.data, now)
                emit(events)
                if stopped_at is None and any(e.kind == "uvicorn_msg" and any(m in e.text for m in _STOP_MARKERS)
                                              for e in events):
                    stopped_at = now
            elif isinstance(item, Notice):
                note = f"[watch] {item.kind}: {item.message}"
                state.notices.append(note)
                if live is None:
                    status_console.print(note, markup=False, highlight=False)
                if item.kind in ("truncated", "rotated"):
                    emit(state.run.close())  # the old file's last records
                    state = WatchState(LiveRun(name), base, rules, silent_after=silent_after)
            elif isinstance(item, Exception):
                if live is not None:
                    live.stop()
                err.print(f"logforensics: error: {item}", markup=False)
                return EXIT_USAGE
            elif item is None:
                break
            if live is not None:
                live.update(live_renderable(state, now, out))
            else:
                plain.update(state, now)
            # -- decisions after every item and every tick
            if state.crash_at is not None and not crash_printed:
                crash_printed = True
                if live is not None:
                    live.stop()
                    live = None
                d = state.diagnosis
                assert d is not None
                print_crash(d, status_console)
                crash = d.failing.crash or {}
                cause = next((c.get("exception") for c in crash.get("chain") or [] if c.get("exception")), None)
                what = (crash.get("exception") or "fatal error") + (f" (while handling {cause})" if cause else "")
                plain.seen = {label: (r.phase,) for label, r in state.ranks.items()}  # no replay after the live view
                status_console.print(
                    f"[watch] crash diagnosed: {what} on "
                    f"{crash.get('first_rank') or 'unknown rank'} in {crash.get('phase') or 'unknown phase'} "
                    f"(line {crash.get('line')})\a", markup=False, highlight=False)
                status_console.file.flush()
            if state.crash_at is not None and until in ("crash", "ready") and now - state.crash_at >= grace:
                code = EXIT_CRASH
                break
            if until == "ready" and state.ready_at is not None and state.crash_at is None:
                code = EXIT_OK
                break
            if until == "exit" and (state.crash_at is not None or stopped_at is not None) \
                    and now - last_data >= idle_exit:
                code = EXIT_CRASH if state.crash_at is not None else EXIT_OK
                break
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        if live is not None:
            live.stop()
        try:
            source.stop()
        except Exception:  # noqa: BLE001
            pass
    if code is None:
        code = EXIT_CRASH if state.crash_at is not None else EXIT_OK
    if state.crash_at is not None:
        final = state.diagnose()
        others = final.failing.exceptions
        if len(others) > 1 or (others and len(others[0]["ranks"]) > 1):
            status_console.print("[watch] tracebacks by rank:", markup=False)
            for exc in others:
                status_console.print(f"  {exc.get('exception')}: {', '.join(r or '?' for r in exc['ranks'])} "
                                     f"(first at line {exc['first_line']})", markup=False, highlight=False)
        if report_path:
            from ..render.html import write_html

            write_html(final, report_path)
            status_console.print(f"[watch] HTML report written to {report_path}", markup=False)
    return code
