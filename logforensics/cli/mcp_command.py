"""``mcp``: the Model Context Protocol server for coding agents (``logforensics.agent``)."""

from __future__ import annotations

import os

import click

from ._app import fail, main


@main.command()
@click.option("--root", "roots", multiple=True, type=click.Path(file_okay=False, exists=True),
              help="A directory whose logs and stores the tools may read (repeat for more; "
                   "default: the current directory). Paths outside are refused.")
def mcp(roots: tuple[str, ...]) -> None:
    """Serve logforensics to a coding agent over the Model Context Protocol (stdio).

    Tools: summarize_run, diff_runs, explain_finding (by a finding's stable id), get_lines
    (a redacted window of a log), query_store (read-only SQL over a fleet store) and
    watch_start/watch_poll/watch_stop (a live follow). They read only under --root. Needs
    the optional extra: pip install 'logforensics[mcp]'. Register it with an agent as the
    command `logforensics mcp`.
    """
    try:
        import mcp.server.mcpserver  # noqa: F401  (the SDK, from the extra)

        from ..agent.server import serve
    except ImportError:
        raise fail("the MCP server needs the optional extra: pip install 'logforensics[mcp]'") from None
    serve(list(roots) or [os.getcwd()])
