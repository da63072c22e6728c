"""``mcp``: the Model Context Protocol server for coding agents (``logforensics.agent``)."""

from __future__ import annotations

import os

import click

from ._app import fail, main


@main.command()
@click.option("--root", "roots", multiple=True, type=click.Path(file_okay=False, exists=True),
              help="A directory whose logs and stores the tools may read (repeat for more; "
                   "default: the current directory). Paths outside are refused.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True,
              help="Seconds a tool call may work; a call over it is stopped (its error says so) and the "
                   "server goes on.")
@click.option("--max-output", type=click.IntRange(min=1024), default=512 << 10, show_default=True,
              help="Characters of JSON a tool's result may take; a larger one is cut, each cut named in "
                   "its 'truncated' (a cut page moves its next_offset back).")
@click.option("--hosts", "hosts", multiple=True, help="A host whose files summarize_run, diff_runs and get_lines "
              "may read over SSH as HOST:PATH (an alias from ~/.ssh/config works; repeat for more). Other "
              "hosts are refused.")
@click.option("--user", help="SSH user (default: from ~/.ssh/config, else the local user).")
@click.option("--port", type=click.IntRange(1, 65535), help="SSH port (default: from ~/.ssh/config, else 22).")
@click.option("-i", "identity", type=click.Path(dir_okay=False), help="SSH private key (else ~/.ssh/config or "
              "the agent).")
@click.option("--known-hosts", type=click.Path(dir_okay=False), help="known_hosts file (default "
              "~/.ssh/known_hosts); an unknown or changed host key is refused.")
@click.option("--accept-new-host-key", is_flag=True, help="Trust an unknown host key on first use and save it "
              "(like OpenSSH's accept-new); a changed key is still refused.")
def mcp(roots: tuple[str, ...], timeout: float, max_output: int, hosts: tuple[str, ...], user: str | None,
        port: int | None, identity: str | None, known_hosts: str | None, accept_new_host_key: bool) -> None:
    """Serve logforensics to a coding agent over the Model Context Protocol (stdio).

    Tools: summarize_run, diff_runs, explain_finding (by a finding's stable id), get_lines
    (a redacted window of a log), query_store (read-only SQL over a fleet store),
    check_env_diff (two runs' environments from the files beside their logs) and
    watch_start/watch_poll/watch_stop (a live follow). They read only under --root; each
    call works at most --timeout seconds and returns at most --max-output characters.
    HOST:PATH reads a file over SSH from a host of --hosts, with watch's host-key rules. Needs
    the optional extra: pip install 'logforensics[mcp]'. Register it with an agent as the
    command `logforensics mcp`.
    """
    try:
        import mcp.server.mcpserver  # noqa: F401  (the SDK, from the extra)

        from ..agent.server import serve
        from ..agent.tools import Remote
    except ImportError:
        raise fail("the MCP server needs the optional extra: pip install 'logforensics[mcp]'") from None
    hosts = tuple(h for given in hosts for h in given.replace(",", " ").split())
    remote = Remote(hosts, user, port, identity, known_hosts, accept_new_host_key)
    serve(list(roots) or [os.getcwd()], timeout=timeout, max_output=max_output, remote=remote)
