"""Finding the SGLang server processes on a host and the regular file their output goes to."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

import paramiko

from ..base import SourceError
from .connect import _Disconnected, _run_remote
from .tail import _sh

if TYPE_CHECKING:
    from .follower import SSHFollower


# ---------------------------------------------------------------------------
# Discovery of SGLang servers and their log files
# ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ServerProcess:
    pid: int
    cmdline: str
    log_path: str | None  # regular file behind stdout/stderr; None if neither is one


# "sglan[g]" matches "sglang" but not the grep's own command line.
_DISCOVER_SCRIPT = r"""
for f in $(grep -l -a -e 'sglan[g]' /proc/[0-9]*/cmdline 2>/dev/null); do
  d=${f%/cmdline}
  [ -r "$f" ] || continue
  echo "PID ${d#/proc/}"
  echo "PPID $(sed -n 's/^PPid:[[:space:]]*//p' "$d/status" 2>/dev/null)"
  for n in 1 2; do
    if [ -f "$d/fd/$n" ]; then echo "FD$n $(readlink "$d/fd/$n" 2>/dev/null)"; fi
  done
  printf 'CMD '; tr '\000\n' '  ' < "$f" 2>/dev/null; echo
done
"""

_SGLANG_CMD = re.compile(r"sglang\.launch_server\b|\bsglang\s+serve\b")


def _parse_discovery(out: str) -> list[ServerProcess]:
    records: list[dict[str, str]] = []
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key == "PID":
            records.append({"PID": value})
        elif records:
            records[-1][key] = value
    procs: dict[int, tuple[int | None, ServerProcess]] = {}
    for rec in records:
        cmd = rec.get("CMD", "").strip()
        if not rec.get("PID", "").isdigit() or not _SGLANG_CMD.search(cmd):
            continue
        logs = [
            rec[k]
            for k in ("FD1", "FD2")
            if rec.get(k, "").startswith("/") and not rec[k].endswith(" (deleted)")
        ]
        ppid = int(rec["PPID"]) if rec.get("PPID", "").isdigit() else None
        pid = int(rec["PID"])
        procs[pid] = (ppid, ServerProcess(pid, cmd, logs[0] if logs else None))
    # Forked workers inherit the launcher's command line and log: report the launcher only.
    return sorted(
        (p for ppid, p in procs.values() if ppid not in procs), key=lambda p: p.pid
    )


def discover_server_logs(
    follower_or_client: SSHFollower | paramiko.SSHClient | None = None, *, timeout: float = 10.0
) -> list[ServerProcess]:
    """Find SGLang server processes and the regular file their stdout/stderr goes to.

    A process matches when its command line contains ``sglang.launch_server``
    or ``sglang serve``.  Pass an SSHFollower or a connected paramiko
    SSHClient to look on that host, or None to look on this machine.
    """
    if follower_or_client is None:
        try:
            res = subprocess.run(
                ["/bin/sh", "-c", _DISCOVER_SCRIPT], capture_output=True, timeout=timeout
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SourceError(f"process discovery failed: {exc}") from None
        return _parse_discovery(res.stdout.decode(errors="replace"))
    if not isinstance(follower_or_client, paramiko.SSHClient):  # an SSHFollower: its connection
        client = follower_or_client._client()
        where = follower_or_client.target.display
    else:
        client = follower_or_client
        where = "remote host"
    try:
        _status, out = _run_remote(client, _sh(_DISCOVER_SCRIPT), timeout)
    except _Disconnected as exc:
        raise SourceError(f"process discovery on {where} failed: {exc.args[0]}") from None
    return _parse_discovery(out.decode(errors="replace"))


