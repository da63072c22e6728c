"""The peak memory of a command, measured without the test process's own.

Linux records in a child's ``ru_maxrss`` the high-water mark of the memory it had before
``exec``, and a child of a test process starts as a copy of (or, with vfork, inside) that
process: after a long suite, a worker of some hundred MiB makes every child it starts
"peak" at that size. So the command is started by a small launcher process and the
launcher reports what ``wait4`` gives for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

_LAUNCHER = """\
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


class Measured:
    """A running command (``proc``, its pipes as asked) whose ``wait()`` gives (exit code, peak KiB)."""

    def __init__(self, cmd: Sequence[str], **popen: Any) -> None:
        fd, self._report = tempfile.mkstemp(prefix="peak-")
        os.close(fd)
        self.proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, self._report, *cmd], **popen)

    def wait(self) -> tuple[int, int]:
        code = self.proc.wait()
        try:
            with open(self._report) as fh:
                text = fh.read().strip()
        finally:
            os.unlink(self._report)
        return code, int(text) if text else 0
