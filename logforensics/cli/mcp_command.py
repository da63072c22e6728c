"""``mcp``: the Model Context Protocol server for coding agents (``logforensics.agent``)."""

from __future__ import annotations

from ._app import fail, main


@main.command()
def mcp() -> None:
    """Serve logforensics to a coding agent over the Model Context Protocol (stdio).

    Tools: summarize_run, diff_runs, explain_finding (by a finding's stable id), get_lines
    (a redacted window of a log) and query_store (read-only SQL over a fleet store). Needs
    the optional extra: pip install 'logforensics[mcp]'. Register it with an agent as the
    command `logforensics mcp`.
    """
    try:
        import mcp.server.mcpserver  # noqa: F401  (the SDK, from the extra)

        from ..agent.server import serve
    except ImportError:
        raise fail("the MCP server needs the optional extra: pip install 'logforensics[mcp]'") from None
    serve()
