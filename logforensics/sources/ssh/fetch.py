"""Copy a whole file from an SSH host, for the commands that read a log to its end.

The connection is ``watch``'s (``connect``): ``~/.ssh/config`` aliases, keys from ``-i``,
the config or the agent, host keys checked against known_hosts, an unknown or changed key
refused unless a new one is to be trusted on first use. The remote side is ``cat`` of
the quoted path (no SFTP subsystem needed); the copy stops at ``most_bytes`` with an error,
so a file larger than the caller will hold never fills its disk.
"""

from __future__ import annotations

import os
import shlex
import time

import paramiko

from ..base import SourceError
from .connect import _connect, _load_ssh_config, _quietly, _resolve

_BLOCK = 1 << 20


def copy_file(host: str, path: str, dest: str, *, user: str | None = None, port: int | None = None,
              key_filename: str | None = None, known_hosts: str | None = None,
              accept_new_host_key: bool = False, ssh_config: str | None = None,
              timeout: float = 10.0, most_bytes: int = 2 << 30) -> int:
    """Copy ``host``'s ``path`` to the local file ``dest``; the bytes copied. Raises
    SourceError (HostKeyError for a host key) with a one-line message."""
    config = _load_ssh_config(ssh_config)
    target = _resolve(host, config, user=user, port=port, key_filename=key_filename)
    known = os.path.expanduser(known_hosts or "~/.ssh/known_hosts")
    conn = _connect(target, config, known_hosts=known, accept_new=accept_new_host_key, timeout=timeout)
    where = f"{host}:{path}"
    try:
        chan = conn.transport.open_session(timeout=timeout)
        chan.settimeout(timeout)
        chan.exec_command(f"exec cat -- {shlex.quote(path)}")
        copied = 0
        with open(dest, "wb") as out:
            while True:
                data = chan.recv(_BLOCK)
                if not data:
                    break
                copied += len(data)
                if copied > most_bytes:
                    raise SourceError(f"{where}: larger than {most_bytes >> 20} MiB, the most read over SSH")
                out.write(data)
        deadline = time.monotonic() + timeout
        while not chan.exit_status_ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        status = chan.recv_exit_status() if chan.exit_status_ready() else -1
        if status != 0:
            said = chan.recv_stderr(4096).decode("utf-8", "replace").strip().splitlines()
            why = said[-1].split(": ")[-1] if said else f"exit status {status}"
            raise SourceError(f"{where}: {why}")
        return copied
    except TimeoutError:
        raise SourceError(f"{where}: no data for {timeout:g} s") from None
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise SourceError(f"{where}: {exc or type(exc).__name__}") from None
    finally:
        _quietly(conn.close)
