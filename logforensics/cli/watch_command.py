"""``watch``: follow a server log live, locally or over SSH, with its duration options."""

from __future__ import annotations

import math
import os
from typing import Any

import click

from ._app import (
    fail,
    files_of,
    guard_outputs,
    main,
    rule_files,
)


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
@click.option("--redact", is_flag=True, help="Replace private text (hosts, addresses, keys, tokens, home "
              "paths, prompts) in the --report HTML, as bundle does.")
@click.option("--keep-prompts", is_flag=True, help="With --redact: keep prompts and completions.")
def watch(logs: tuple[str, ...], hosts: tuple[str, ...], remote_paths: tuple[str, ...], inventory: str | None,
          user: str | None, port: int | None,
          identity: str | None, known_hosts: str | None, accept_new_host_key: bool, baseline: str | None,
          report_path: str | None, until: str, jsonl: bool, grace: float, idle_exit: float,
          wait_timeout: float | None, silent_after: float, rules_dirs: tuple[str, ...], redact: bool,
          keep_prompts: bool) -> None:
    """Follow a server log live (LOGS locally, or --host over SSH) and explain a crash the moment it happens.

    Shows per rank the phase, its progress, free memory, time in phase and seconds
    since the rank last spoke. While it serves: each decode stall, prefill/decode
    seesaw, KV pressure and attention-DP imbalance once, when it begins, with its lines
    (the summary's serving.health). On a crash: the full traceback (once per distinct
    traceback, with the ranks that share it), the diagnosis from the same rules as
    diff, a bell, the HTML report with --report, and exit status 1. A single LOG may be '-'
    (standard input, read until it ends; then judged as summary judges the whole log, so
    a traceback cut by the end is a crash). A LOG that does not exist yet is waited for.

    Several LOGS (one per node, or prefill/decode/router), several --host (each with its
    own --path, or discovery) or an --inventory are followed at once as one run: one view
    with a node column (the first is node 0, whose readiness counts), --jsonl events carry
    node and file, and a crash on any node ends the watch with the diagnosis of the run.
    """
    from ..pipeline import InputError  # the grammar and the run model: not for --help
    from ..watch.loop import run_watch

    if bool(logs) == bool(hosts or inventory):
        raise fail("give either LOGS (local files) or --host HOST / --inventory FILE (over SSH)")
    if logs and remote_paths:
        raise fail("--path goes with --host; for a local file give LOGS")
    ssh_files = [identity, known_hosts or "~/.ssh/known_hosts", "~/.ssh/config"] if hosts or inventory else []
    read = [*logs, *(os.path.expanduser(p) for p in (inventory, *ssh_files) if p)]
    guard_outputs([report_path], read, files_of(baseline) if baseline else [], rule_files(rules_dirs))
    if len(logs) > 1 or len(hosts) > 1 or inventory:
        from ..watch.multi import Target, host_targets, read_inventory, run_watch_multi

        try:
            if logs:
                from ..ingest.runset import labelled

                targets = [Target(f.node or f"node{i}", f.path) for i, f in enumerate(labelled(logs))]
            else:
                targets = host_targets(hosts, remote_paths) + (read_inventory(inventory) if inventory else [])
        except InputError as exc:
            raise fail(str(exc)) from None
        code = run_watch_multi(targets, ssh={"user": user, "port": port, "identity": identity,
                                             "known_hosts": known_hosts, "accept_new_host_key": accept_new_host_key},
                               baseline=[baseline] if baseline else None, report_path=report_path, until=until,
                               jsonl=jsonl, grace=grace, idle_exit=idle_exit, rules_dirs=rules_dirs,
                               silent_after=silent_after, redact=redact, keep_prompts=keep_prompts)
        raise click.exceptions.Exit(code)
    if len(remote_paths) > 1:
        raise fail("give one --path per --host")
    log, host = (logs[0] if logs else None), (hosts[0] if hosts else None)
    remote_path = remote_paths[0] if remote_paths else None
    code = run_watch(log=log, host=host, remote_path=remote_path, user=user, port=port, identity=identity,
                     known_hosts=known_hosts, accept_new_host_key=accept_new_host_key, baseline=baseline,
                     report_path=report_path, until=until, jsonl=jsonl, grace=grace, idle_exit=idle_exit,
                     rules_dirs=rules_dirs, silent_after=silent_after, wait_timeout=wait_timeout, redact=redact,
                     keep_prompts=keep_prompts)
    raise click.exceptions.Exit(code)
