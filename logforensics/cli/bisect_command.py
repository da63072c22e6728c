"""``bisect``: one commit's answer for ``git bisect run`` (``logforensics.bisect``)."""

from __future__ import annotations

import subprocess

import click

from ._app import fail, main


@main.command()
@click.argument("logs", nargs=-1, required=True)
@click.option("--finding", "wanted", required=True,
              help="The failure under search: a rule (CR01) or a finding id or its first parts (OM01:TP3).")
@click.option("--run", "command", help="A shell command to run first that writes LOGS (starts the server, sends "
                                       "it work); its own exit status is not the answer.")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory of your own rule files (*.yml), in addition to the built-in rules.")
def bisect(logs: tuple[str, ...], wanted: str, command: str | None, rules_dirs: tuple[str, ...]) -> None:
    """Answer `git bisect run` for one commit: exit 0 (good), 1 (bad) or 125 (cannot tell).

    Bad when a finding of the run in LOGS matches --finding; good when none does and the run
    reached ready; 125, which `git bisect` skips, when the run stopped early or failed another
    way. Prints one line saying why. For example:

        git bisect run logforensics bisect --finding CR01 --run ./serve_and_bench.sh server.log
    """
    from ..bisect import judge
    from ..diagnose.rulespec import RuleError, load_rules

    try:
        rules = load_rules(rules_dirs)
    except RuleError as exc:
        raise fail(str(exc)) from None
    if command:
        subprocess.run(command, shell=True, check=False)  # noqa: S602 - the user's own command line
    answer = judge(logs, wanted, rules)
    click.echo(answer.reason)
    raise SystemExit(answer.code)
