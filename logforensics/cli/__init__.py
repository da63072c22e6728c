"""Command line: ``logforensics parse | summary | diff | bundle | watch | check | scan | query | runs | crashes``.

Exit codes are named constants (``outputs``). Errors a user can cause (a missing file, a
wrong option, a place that cannot be written, a full disk) print one line on stderr and
exit with ``EXIT_USAGE``; they never show a Python traceback. Files are written by
``outputs.open_output``; consoles come from ``render.console``.
"""

from __future__ import annotations

from ..outputs import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from . import (  # noqa: F401  (each registers its commands)
    bisect_command,
    check_command,
    fleet_commands,
    mcp_command,
    run_commands,
    watch_command,
)
from ._app import main

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USAGE", "main"]
