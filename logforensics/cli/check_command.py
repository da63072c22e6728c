"""``check``: run the fixture cases and compare them with their expectations."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from ..outputs import (
    EXIT_FINDINGS,
)
from ._app import (
    _write_text,
    fail,
    guard_outputs,
    main,
    rule_files,
    stdout_console,
)

if TYPE_CHECKING:
    from ..check import Case


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
    from rich.table import Table  # rich: only where a command prints with it
    from rich.text import Text

    from ..check import discover, junit_xml, run_all
    from ..diagnose.rulespec import RuleError, load_rules
    from ..render.console import plain
    from ..render.terminal import table_box

    if not os.path.isdir(directory):
        raise fail(f"{directory}: no such directory")
    cases = discover(directory)
    guard_outputs([junit_path], _case_files(cases), rule_files(rules_dirs))
    try:
        rules = load_rules(rules_dirs)
    except RuleError as exc:
        raise fail(str(exc)) from None
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


def _case_files(cases: list[Case]) -> list[str]:
    """What the cases read and ``--update`` writes: their logs (a run directory's files) and
    their expectations."""
    from ..pipeline import InputError, run_files

    found: list[str] = []
    for case in cases:
        found.append(str(case.expected))
        for log in case.logs.values():
            try:
                found += run_files([str(log)]).paths
            except InputError:  # a run directory without log files: the case reports it
                found.append(str(log))
    return found
