"""The ``watch`` main loop: source -> LiveRun -> live view, crash diagnosis, exit code."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.live import Live

from ..diagnose.rulespec import RuleError, load_rules
from ..ingest import InputError, LiveRun
from ..outputs import EXIT_FINDINGS as EXIT_CRASH
from ..outputs import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, OutputError, check_writable
from ..render.console import make_console, plain
from ..render.terminal import print_tracebacks
from ..sources import Chunk, Follower, Notice, SourceError
from ..sources.base import OPENED
from .state import SETTLE_AFTER, WatchState, follow
from .view import PlainStatus, crash_line, live_renderable, print_crash

__all__ = ["EXIT_CRASH", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "run_watch"]
_STOP_MARKERS = ("Application shutdown complete", "Finished server process", "Shutting down")


def _source(log: str | None, host: str | None, **ssh: Any) -> tuple[Follower, str]:
    if log == "-":
        from ..sources import StdinFollower

        return StdinFollower(), "<stdin>"
    if log:
        from ..sources import LocalFollower

        return LocalFollower(log, follow=True), log
    from ..sources import SSHFollower

    if host is None:
        raise SourceError("nothing to watch: give a log file or a host")
    follower = SSHFollower(host, ssh["remote_path"], user=ssh["user"], port=ssh["port"],
                           key_filename=ssh["identity"], known_hosts=ssh["known_hosts"],
                           accept_new_host_key=ssh["accept_new_host_key"])
    return follower, follower.label


def run_watch(*, log: str | None, host: str | None, remote_path: str | None, user: str | None,
              port: int | None, identity: str | None, known_hosts: str | None, accept_new_host_key: bool,
              baseline: str | None, report_path: str | None, until: str, jsonl: bool, grace: float,
              idle_exit: float, rules_dirs: tuple[str, ...], silent_after: float = 60.0,
              wait_timeout: float | None = None, redact: bool = False, keep_prompts: bool = False) -> int:
    err = make_console(stderr=True)
    out = make_console()
    status_console = err if jsonl or not out.is_terminal else out
    try:
        if report_path:  # known now, not after the crash it was meant to record
            check_writable(report_path)
        from ..read.grammar import warm_up

        warm_up()  # build the parser now, not when the first (maybe crashing) line arrives
        rules = load_rules(rules_dirs)
        base = None
        if baseline:
            from ..pipeline import summarize_file as summarize

            base = summarize(baseline)
        source, name = _source(log, host, remote_path=remote_path, user=user, port=port, identity=identity,
                               known_hosts=known_hosts, accept_new_host_key=accept_new_host_key)
    except (InputError, RuleError, SourceError, OutputError) as exc:
        err.print(plain(f"logforensics: error: {exc}"))
        return EXIT_USAGE
    state = WatchState(LiveRun(name), base, rules, silent_after=silent_after)
    live_view = out.is_terminal and not jsonl
    status = PlainStatus(status_console)
    started = time.monotonic()
    opened = False
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
                opened = opened or item.kind == OPENED
                note = f"[watch] {item.kind}: {item.message}"
                state.notices.append(note)
                if live is None:
                    status_console.print(plain(note))
                if item.kind in ("truncated", "rotated"):
                    emit(state.run.close())  # the old file's last records
                    state = WatchState(LiveRun(name), base, rules, silent_after=silent_after)
            elif isinstance(item, Exception):
                if live is not None:
                    live.stop()
                err.print(plain(f"logforensics: error: {item}"))
                return EXIT_USAGE
            elif item is None:  # the source ended: what the parser held, then the decisions below
                emit(state.close(now))
            elif now - last_data >= SETTLE_AFTER:  # a tick, the source paused
                emit(state.settle(now))
            if wait_timeout is not None and not opened and now - started >= wait_timeout:
                if live is not None:
                    live.stop()
                    live = None
                err.print(plain(f"logforensics: error: {name}: did not appear within {wait_timeout:g} s "
                                "(--wait-timeout)"))
                return EXIT_USAGE
            state.serving_health(now, force=item is None)
            if live is not None:
                live.update(live_renderable(state, now, out))
            else:
                status.update(state, now)
            # -- decisions after every item and every tick
            if state.crash_at is not None and not crash_printed:
                crash_printed = True
                if live is not None:
                    live.stop()
                    live = None
                d = state.diagnosis
                assert d is not None
                print_crash(d, status_console)
                status.seen = {label: (r.phase,) for label, r in state.ranks.items()}  # no replay after the live view
                status.alerts = len(state.alerts)
                status_console.print(plain(crash_line(d.failing.crash)), end="\a\n")
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
            if item is None:
                break
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except RuleError as exc:  # a rule whose template cannot be used, found at its first rendering
        if live is not None:
            live.stop()
            live = None
        err.print(plain(f"logforensics: error: {exc}"))
        return EXIT_USAGE
    finally:
        if live is not None:
            live.stop()
        try:
            source.stop()
        except Exception:  # noqa: BLE001
            pass
    if code != EXIT_INTERRUPTED:  # the records the parser still holds: the crash's own traceback
        emit(state.close(time.monotonic()))
    if code is None:
        code = EXIT_CRASH if state.crash_at is not None else EXIT_OK
    if state.crash_at is not None:
        final = state.diagnose()
        print_tracebacks(final.failing.exceptions, status_console, "[watch] ")
        if report_path:
            from ..render.html import write_html
            from ..render.redact import redacted_if

            try:
                write_html(redacted_if(final, redact, keep_prompts), report_path)
            except OutputError as exc:
                err.print(plain(f"logforensics: error: {exc}"))
                return EXIT_USAGE
            status_console.print(plain(f"[watch] HTML report written to {report_path}"))
    return code
