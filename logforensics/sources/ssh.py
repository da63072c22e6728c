"""Follow a log file on another machine over SSH (paramiko), surviving reconnects.

How bytes and offsets stay exact
--------------------------------
The remote side is GNU ``tail -c +N -F`` (inotify: ~ms latency, 100+ MB/s),
started by a small POSIX ``sh`` script.  The hard part is knowing *where in the
byte stream* tail restarted because of a truncation or a replaced file: tail
reports that on stderr, and stdout and stderr travel as two independent SSH
streams whose relative order sshd does not preserve.  So the script runs tail
with ``2>&1``: tail flushes stdout before every diagnostic (glibc ``error()``),
hence in the single pipe each diagnostic sits exactly between the last byte of
the old content and the first byte of the new.  To tell diagnostics from log
content, tail is executed through a per-connection *nonce path* such as
``/usr/bin/././/./…/tail``; glibc prefixes every diagnostic with ``argv[0]``,
so a diagnostic is ``"<nonce path>: …\\n"`` -- a 64-bit random marker that log
content cannot contain by accident.  The parser (:class:`_TailStream`) cuts
those lines out; everything else is file content, counted byte by byte.

* ``…: file truncated``                    -> Notice "truncated", offset 0
* ``… has been replaced / has appeared / has become accessible`` -> "rotated", 0
  (tail restarts from byte 0 of the new file in all three cases)

Before exec-ing tail the script prints one header line (also behind a random
token, so ``.bashrc`` noise is skipped): the start offset it chose and the
inode it found.  On a reconnect the client passes the inode and offset it had
reached; the script resumes at that offset if the inode is unchanged and the
file is at least that long, else starts at 0 and says "short" (-> "truncated")
or "new" (-> "rotated").  The client learns the inode of a file tail switched
to by a quick ``stat`` after each rotation diagnostic (if the file rotates
again meanwhile, tail reports that too, so the value converges).

A file that does not exist yet is waited for by the script itself (``stat``
every 0.2 s, writing a "waiting" header each time so that a dead connection
kills it by SIGPIPE): GNU tail started on a missing file falls back to 1 s
polling for its whole life.

Known limits: bytes appended to a rotated-away file after tail switched are
not delivered (tail -F semantics; the local follower does drain them); a
truncation plus regrowth past the offset between two inotify wake-ups is
undetectable by size; the remote needs ``/bin/sh``, GNU coreutils ``tail`` and
``stat``.

Liveness: a dropped connection shows up as EOF/socket error; a hung peer (the
kernel still ACKs, nothing answers) only through an application-level
``keepalive@openssh.com`` global request *with* reply, run from a thread with
a timeout.  Either way the follower emits "disconnected", reconnects with
exponential backoff ("reconnecting" per attempt, then "reconnected") and
resumes at the last delivered offset.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import logging
import os
import queue
import re
import secrets
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import paramiko

from .base import (
    DISCONNECTED,
    OPENED,
    RECONNECTED,
    RECONNECTING,
    ROTATED,
    TRUNCATED,
    WAITING,
    Chunk,
    HostKeyError,
    Item,
    Notice,
    SourceError,
)

log = logging.getLogger(__name__)

_RECV_SIZE = 1 << 16
_QUEUE_ITEMS = 256  # backpressure: a slow consumer stalls the SSH window, not memory
_HOLD_FLUSH_S = 0.25  # release a held partial marker after this much silence


class _AuthError(SourceError):
    """Authentication failed: retrying will not help."""


class _Disconnected(Exception):
    """The current connection is unusable; reason in args[0]."""


# ---------------------------------------------------------------------------
# Host resolution (~/.ssh/config) and connection
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Target:
    alias: str
    hostname: str
    port: int
    user: str
    key_filenames: tuple[str, ...]
    proxyjump: str | None

    @property
    def display(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


def _load_ssh_config(ssh_config: str | os.PathLike[str] | None) -> paramiko.SSHConfig:
    path = os.path.expanduser(os.fspath(ssh_config) if ssh_config else "~/.ssh/config")
    if not os.path.exists(path):
        if ssh_config:
            raise SourceError(f"ssh config file {path} does not exist")
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(path)
    except (OSError, paramiko.ssh_exception.ConfigParseError) as exc:
        raise SourceError(f"cannot read ssh config {path}: {exc}") from None


def _resolve(
    host: str,
    config: paramiko.SSHConfig,
    *,
    user: str | None = None,
    port: int | None = None,
    key_filename: str | None = None,
) -> _Target:
    """Apply ~/.ssh/config to HOST; explicit arguments win, as with ssh(1)."""
    if "@" in host and user is None:
        user, host = host.rsplit("@", 1)
    cfg = config.lookup(host)
    try:
        port = int(port or cfg.get("port", 22))
    except ValueError:
        raise SourceError(f"bad port for {host}: {cfg.get('port')!r}") from None
    if key_filename:
        keys: tuple[str, ...] = (os.path.expanduser(key_filename),)
        if not os.path.exists(keys[0]):
            raise SourceError(f"identity file {keys[0]} does not exist")
    else:  # as ssh(1): missing IdentityFile entries are skipped silently
        keys = tuple(p for p in map(os.path.expanduser, cfg.get("identityfile", [])) if os.path.exists(p))
    jump = cfg.get("proxyjump")
    return _Target(
        alias=host,
        hostname=cfg.get("hostname", host),
        port=port,
        user=user or cfg.get("user") or getpass.getuser(),
        key_filenames=keys,
        proxyjump=None if not jump or jump.lower() == "none" else jump,
    )


def _fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    """Like OpenSSH StrictHostKeyChecking=yes, with an actionable message."""

    def __init__(self, known_hosts: str) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise HostKeyError(
            f"host {hostname} is not in {self.known_hosts} (its {key.get_name()} key is "
            f"{_fingerprint(key)}): verify the key, then add it to known_hosts "
            f"(e.g. ssh once with OpenSSH) or pass --accept-new-host-key"
        )


class _AcceptNew(_RejectUnknown):
    """Like OpenSSH StrictHostKeyChecking=accept-new: learn unknown hosts, never changed keys."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if client.get_host_keys().lookup(hostname):
            # Known host offering a key type we have no entry for: treat as a change.
            raise HostKeyError(
                f"host {hostname} is in {self.known_hosts} with a different key type than the "
                f"{key.get_name()} key it offered ({_fingerprint(key)}); refusing"
            )
        client.get_host_keys().add(hostname, key.get_name(), key)
        directory = os.path.dirname(self.known_hosts)
        if directory:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        with open(self.known_hosts, "a", encoding="ascii") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        log.info("added %s (%s) to %s", hostname, _fingerprint(key), self.known_hosts)


class _Connection:
    """An authenticated SSHClient plus the jump host client it tunnels through."""

    def __init__(self, client: paramiko.SSHClient, jump: paramiko.SSHClient | None) -> None:
        self.client = client
        self.jump = jump

    @property
    def transport(self) -> paramiko.Transport:
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise _Disconnected("connection closed")
        return transport

    def close(self) -> None:
        """Close both clients; closing over a dead transport may raise anything: ignored."""
        _quietly(self.client.close)
        if self.jump is not None:
            _quietly(self.jump.close)


def _quietly(close: Any) -> None:
    """Call a close/cleanup function of a transport that may be dead (paramiko then raises
    EOFError, OSError or SSHException from the write of the close message)."""
    try:
        close()
    except Exception:  # noqa: BLE001 - the connection is being dropped anyway
        log.debug("ignored an error while closing", exc_info=True)


#: Passwords or key passphrases typed at the prompt, per destination, for reconnects.
_SECRETS: dict[str, str] = {}


def _open_client(
    target: _Target,
    *,
    known_hosts: str,
    accept_new: bool,
    timeout: float,
    sock: paramiko.Channel | None = None,
) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    if os.path.exists(known_hosts):
        try:
            client.load_host_keys(known_hosts)
        except (OSError, paramiko.SSHException) as exc:
            raise SourceError(f"cannot read known_hosts {known_hosts}: {exc}") from None
    policy = _AcceptNew(known_hosts) if accept_new else _RejectUnknown(known_hosts)
    client.set_missing_host_key_policy(policy)
    dest = target.display
    secret = _SECRETS.get(dest)
    try:
        try:
            client.connect(
                target.hostname,
                port=target.port,
                username=target.user,
                key_filename=list(target.key_filenames) or None,
                password=secret,
                passphrase=secret,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                channel_timeout=timeout,
                allow_agent=True,
                look_for_keys=True,
                sock=sock,
            )
        except paramiko.AuthenticationException:
            # Keys and the agent failed: ask, as ssh does, when a person is at the terminal.
            # The answer stays in memory for reconnects; it is never a command-line option.
            if secret is not None or sock is not None or not sys.stdin.isatty():
                raise
            _SECRETS[dest] = getpass.getpass(f"{dest}: password or key passphrase: ")
            client.close()
            return _open_client(target, known_hosts=known_hosts, accept_new=accept_new, timeout=timeout)
        return client
    except HostKeyError:
        client.close()
        raise
    except paramiko.BadHostKeyException as exc:
        client.close()
        entry = target.hostname if target.port == 22 else f"[{target.hostname}]:{target.port}"
        raise HostKeyError(
            f"HOST KEY CHANGED for {exc.hostname}: it offered {exc.key.get_name()} "
            f"{_fingerprint(exc.key)}, {known_hosts} has {_fingerprint(exc.expected_key)}; "
            f"refusing (possible man-in-the-middle). If the change is expected, remove the old "
            f"entry (ssh-keygen -R {shlex.quote(entry)} -f {shlex.quote(known_hosts)}) and reconnect"
        ) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        raise _AuthError(
            f"authentication failed for {dest} ({exc}); keys tried: "
            f"{', '.join(target.key_filenames) or 'ssh agent and ~/.ssh defaults'}"
        ) from None
    except socket.gaierror as exc:
        client.close()
        raise SourceError(f"cannot resolve host {target.hostname!r}: {exc.strerror or exc}") from None
    except paramiko.ssh_exception.NoValidConnectionsError:
        client.close()
        raise SourceError(f"cannot connect to {dest}: connection refused") from None
    except TimeoutError:
        client.close()
        raise SourceError(f"timed out connecting to {dest} after {timeout:g}s") from None
    except (paramiko.SSHException, EOFError) as exc:
        client.close()
        raise SourceError(f"SSH error with {dest}: {exc or type(exc).__name__}") from None
    except OSError as exc:
        client.close()
        raise SourceError(f"cannot connect to {dest}: {exc.strerror or exc}") from None


def _connect(
    target: _Target,
    config: paramiko.SSHConfig,
    *,
    known_hosts: str,
    accept_new: bool,
    timeout: float,
) -> _Connection:
    """Connect, through one ProxyJump hop (a direct-tcpip channel) if configured."""
    jump_client = None
    sock = None
    if target.proxyjump:
        if "," in target.proxyjump:
            raise SourceError(f"ProxyJump {target.proxyjump!r}: only one jump host is supported")
        spec = target.proxyjump
        jump_port = None
        m = re.fullmatch(r"(?:(?P<user>[^@]+)@)?(?P<host>\[[^\]]+\]|[^:]+)(?::(?P<port>\d+))?", spec)
        if not m:
            raise SourceError(f"cannot parse ProxyJump {spec!r}")
        if m["port"]:
            jump_port = int(m["port"])
        jump = _resolve(m["host"].strip("[]"), config, user=m["user"], port=jump_port)
        jump = _Target(jump.alias, jump.hostname, jump.port, jump.user, jump.key_filenames, None)
        jump_client = _open_client(jump, known_hosts=known_hosts, accept_new=accept_new, timeout=timeout)
        try:
            jt = jump_client.get_transport()
            assert jt is not None
            sock = jt.open_channel(
                "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=timeout
            )
        except (paramiko.SSHException, OSError, AssertionError) as exc:
            jump_client.close()
            raise SourceError(
                f"jump host {jump.display} cannot reach {target.hostname}:{target.port}: {exc}"
            ) from None
    try:
        client = _open_client(
            target, known_hosts=known_hosts, accept_new=accept_new, timeout=timeout, sock=sock
        )
    except BaseException:
        if jump_client is not None:
            jump_client.close()
        raise
    return _Connection(client, jump_client)


def _run_remote(client: paramiko.SSHClient, command: str, timeout: float) -> tuple[int, bytes]:
    """Run a short command; return (exit status, stdout). Raises _Disconnected."""
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise _Disconnected("connection closed")
    try:
        chan = transport.open_session(timeout=timeout)
        chan.settimeout(timeout)
        chan.exec_command(command)
        out = bytearray()
        deadline = time.monotonic() + timeout
        while True:
            data = chan.recv(_RECV_SIZE)
            if not data:
                break
            out += data
            if time.monotonic() > deadline:
                raise TimeoutError()
        while chan.recv_stderr_ready():
            chan.recv_stderr(_RECV_SIZE)
        status = chan.recv_exit_status() if chan.exit_status_ready() else -1
        chan.close()
        return status, bytes(out)
    except TimeoutError:
        raise _Disconnected(f"remote command timed out after {timeout:g}s") from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise _Disconnected(str(exc) or type(exc).__name__) from None


def _sh(script: str) -> str:
    """Run SCRIPT under /bin/sh whatever the login shell is (bash, zsh, fish...)."""
    return "exec /bin/sh -c " + shlex.quote(script)


# ---------------------------------------------------------------------------
# Remote tail script and its output parser
# ---------------------------------------------------------------------------
def _nonce_path() -> str:
    """A random run of './' and '/' segments: a no-op in a path, 64 bits of marker."""
    bits = secrets.randbits(64)
    return "/" + "".join("./" if bits >> i & 1 else "/" for i in range(64))


def _tail_script(path: str, *, offset: int, prev_inode: str, token: str, nonce: str) -> str:
    """POSIX sh: choose the start offset, print a header, exec the nonce-named tail.

    prev_inode is "none" (first connection), "any" (inode unknown: trust the
    offset if the file is long enough) or the inode number we were following.
    """
    assert re.fullmatch(r"none|any|\d+", prev_inode) and offset >= 0
    qpath = shlex.quote(path)
    return f"""\
p={qpath}
t=$(command -v tail) || t=
case $t in /*) ;; *) echo "{token} notail"; exit 127;; esac
case $("$t" --version 2>/dev/null) in *GNU*) ;; *) echo "{token} notgnu"; exit 126;; esac
s=$(stat -L -c '%i %s' -- "$p" 2>/dev/null) || s=
if [ -z "$s" ]; then
  while [ -z "$s" ]; do
    echo "{token} waiting"
    sleep 0.2
    s=$(stat -L -c '%i %s' -- "$p" 2>/dev/null) || s=
  done
  start=0; why=new
else
  ino=${{s% *}}; size=${{s#* }}
  if [ "{prev_inode}" = none ]; then
    if [ "$size" -ge {offset} ]; then start={offset}; why=open; else start=0; why=short; fi
  elif [ "{prev_inode}" = any ] || [ "$ino" = "{prev_inode}" ]; then
    if [ "$size" -ge {offset} ]; then start={offset}; why=same; else start=0; why=short; fi
  else
    start=0; why=new
  fi
fi
[ -f "$p" ] || {{ echo "{token} notfile"; exit 125; }}
[ -r "$p" ] || {{ echo "{token} unreadable"; exit 125; }}
a="${{t%/*}}{nonce}${{t##*/}}"
echo "{token} start $start ${{s% *}} $why $a"
LC_ALL=C; export LC_ALL
exec "$a" -c "+$((start + 1))" -F -s 0.5 -- "$p" 2>&1
"""


class _TailStream:
    """Splits the merged output of the remote script into headers, data and diagnostics.

    feed() returns a list of ("header", [words]), ("data", bytes) and
    ("diag", str) events in stream order.  Data that might be the start of a
    diagnostic marker is held back until the next bytes decide (or flush()).
    """

    _MAX_DIAG = 1 << 16

    def __init__(self, token: str) -> None:
        self._token = token.encode()
        self._marker: bytes | None = None  # b"<nonce argv0>: " once the header named it
        self._buf = b""

    @property
    def held(self) -> int:
        return len(self._buf) if self._marker is not None else 0

    def feed(self, data: bytes) -> list[tuple[str, object]]:
        self._buf += data
        events: list[tuple[str, object]] = []
        while self._marker is None:
            nl = self._buf.find(b"\n")
            if nl < 0:
                return events
            line, self._buf = self._buf[:nl], self._buf[nl + 1 :]
            words = line.split(b" ", 5)
            if words[0] != self._token:
                continue  # login noise (e.g. a chatty .bashrc)
            fields = [w.decode(errors="replace") for w in words[1:]]
            events.append(("header", fields))
            if fields and fields[0] == "start" and len(fields) == 5:
                self._marker = words[5] + b": "
        self._scan(events)
        return events

    def _scan(self, events: list[tuple[str, object]]) -> None:
        marker = self._marker
        assert marker is not None
        buf = self._buf
        while buf:
            idx = buf.find(marker)
            if idx < 0:
                keep = self._partial_marker_start(buf, marker)
                if keep > 0:
                    events.append(("data", buf[:keep]))
                buf = buf[keep:]
                break
            if idx > 0:
                events.append(("data", buf[:idx]))
            nl = buf.find(b"\n", idx + len(marker))
            if nl < 0:
                if len(buf) - idx > self._MAX_DIAG:  # not a diagnostic after all
                    events.append(("data", buf[idx : idx + len(marker)]))
                    buf = buf[idx + len(marker) :]
                    continue
                buf = buf[idx:]
                break
            events.append(("diag", buf[idx + len(marker) : nl].decode(errors="replace")))
            buf = buf[nl + 1 :]
        self._buf = buf

    @staticmethod
    def _partial_marker_start(buf: bytes, marker: bytes) -> int:
        """Index from which buf's tail could begin the marker (len(buf) if none)."""
        j = buf.find(marker[:1], max(0, len(buf) - len(marker) + 1))
        while j >= 0:
            if marker.startswith(buf[j:]):
                return j
            j = buf.find(marker[:1], j + 1)
        return len(buf)

    def flush(self) -> bytes:
        """Release held bytes that turned out not to start a diagnostic."""
        if self._marker is not None and self._buf and self._marker.startswith(self._buf):
            data, self._buf = self._buf, b""
            return data
        return b""


# ---------------------------------------------------------------------------
# Keepalive with reply: the only way to notice a hung peer
# ---------------------------------------------------------------------------
class _Keepalive(threading.Thread):
    def __init__(self, transport: paramiko.Transport, interval: float, timeout: float) -> None:
        super().__init__(name="ssh-keepalive", daemon=True)
        self._transport = transport
        self._interval = interval
        self._timeout = timeout
        self._halt = threading.Event()
        self.dead = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self._interval):
            if not self._transport.is_active():
                return
            answered = threading.Event()

            def ping() -> None:
                try:
                    self._transport.global_request("keepalive@openssh.com", wait=True)
                except Exception:  # noqa: BLE001 - a failing ping is judged by the timeout
                    pass
                finally:
                    answered.set()  # noqa: B023 - set and awaited in this same iteration

            threading.Thread(target=ping, name="ssh-keepalive-ping", daemon=True).start()
            if not answered.wait(self._timeout) and not self._halt.is_set():
                self.dead.set()
                _quietly(self._transport.close)  # unblocks the reader and the ping thread
                return

    def halt(self) -> None:
        self._halt.set()


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
    if isinstance(follower_or_client, SSHFollower):
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


# ---------------------------------------------------------------------------
# The follower
# ---------------------------------------------------------------------------
class _Fatal:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


class SSHFollower:
    """Iterator of :class:`Chunk` / :class:`Notice` for a file on an SSH host.

    Connects (and, without ``path``, discovers the SGLang log) in the
    constructor so configuration errors surface at once as SourceError /
    HostKeyError; streaming starts on the first ``next()``.
    """

    def __init__(
        self,
        host: str,
        path: str | None = None,
        *,
        user: str | None = None,
        port: int | None = None,
        key_filename: str | None = None,
        known_hosts: str | os.PathLike[str] | None = None,
        accept_new_host_key: bool = False,
        ssh_config: str | os.PathLike[str] | None = None,
        connect_timeout: float = 10,
        keepalive_interval: float = 2.0,
        keepalive_timeout: float = 3.0,
        max_backoff: float = 10.0,
        start_offset: int = 0,
    ) -> None:
        if start_offset < 0:
            raise ValueError("start_offset must be >= 0")
        self._config = _load_ssh_config(ssh_config)
        self.target = _resolve(host, self._config, user=user, port=port, key_filename=key_filename)
        self.known_hosts = os.path.expanduser(os.fspath(known_hosts or "~/.ssh/known_hosts"))
        self.accept_new_host_key = accept_new_host_key
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self.keepalive_timeout = keepalive_timeout
        self.max_backoff = max_backoff
        self.start_offset = start_offset

        self._stopping = threading.Event()
        self._queue: queue.Queue[object] = queue.Queue(maxsize=_QUEUE_ITEMS)
        self._thread: threading.Thread | None = None
        self._done = False
        self._offset = start_offset  # consumer side: delivered
        self._pos = start_offset  # producer side: enqueued (resume point)
        self._inode = "none"  # what the remote script compares against on reconnect
        self._generation = 0  # bumps at each rotation, so a late stat cannot overwrite
        self._had_file = False
        self._waiting_emitted = False
        self._conn_lock = threading.Lock()
        self._conn: _Connection | None = self._new_connection()
        self.server_process: ServerProcess | None = None
        if path is None:
            try:
                path = self._discover_path()
            except BaseException:
                self._conn.close()
                raise
        self.path = path

    # -- public API -----------------------------------------------------------
    @property
    def offset(self) -> int:
        return self._offset

    def __iter__(self) -> Iterator[Item]:
        return self

    def __next__(self) -> Item:
        if self._done:
            raise StopIteration
        if self._thread is None and not self._stopping.is_set():
            self._thread = threading.Thread(target=self._produce, name="ssh-follower", daemon=True)
            self._thread.start()
        while True:
            if self._stopping.is_set():
                self._finish(join=False)
                raise StopIteration
            try:
                item = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if item is _END:
                self._finish(join=False)
                raise StopIteration
            if isinstance(item, _Fatal):
                self._finish(join=False)
                raise item.error
            if isinstance(item, Chunk):
                self._offset = item.offset + len(item.data)
            elif isinstance(item, Notice) and item.kind in (TRUNCATED, ROTATED):
                self._offset = 0
            return item  # type: ignore[return-value]

    def stop(self) -> None:
        """End the iteration promptly; safe from any thread, idempotent."""
        self._stopping.set()
        with self._conn_lock:
            conn = self._conn
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self.stop()
        self._finish()

    def __enter__(self) -> SSHFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connection management ------------------------------------------------
    def _new_connection(self) -> _Connection:
        return _connect(
            self.target,
            self._config,
            known_hosts=self.known_hosts,
            accept_new=self.accept_new_host_key,
            timeout=self.connect_timeout,
        )

    def _client(self) -> paramiko.SSHClient:
        with self._conn_lock:
            if self._conn is None:
                raise SourceError(f"not connected to {self.target.display}")
            return self._conn.client

    def _discover_path(self) -> str:
        procs = discover_server_logs(self, timeout=self.connect_timeout)
        found = [p for p in procs if p.log_path]
        where = self.target.display
        if len(found) == 1:
            self.server_process = found[0]
            return found[0].log_path  # type: ignore[return-value]
        if not found:
            if procs:
                pids = ", ".join(str(p.pid) for p in procs)
                raise SourceError(
                    f"SGLang server(s) on {where} (pid {pids}) do not write to a regular file; "
                    f"pass --path"
                )
            raise SourceError(f"no SGLang server process found on {where}; pass --path")
        listing = "; ".join(f"pid {p.pid}: {p.log_path}" for p in found)
        raise SourceError(f"{len(found)} SGLang servers on {where} ({listing}); choose one with --path")

    def _finish(self, join: bool = True) -> None:
        """Release the connection; join the (daemon) producer only when asked, so
        that ``next()`` after ``stop()`` never waits on a connect in progress."""
        self._done = True
        self._stopping.set()
        with self._conn_lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        t = self._thread
        if join and t is not None and t is not threading.current_thread():
            t.join(timeout=2)

    # -- producer thread ------------------------------------------------------
    def _put(self, item: object) -> bool:
        while not self._stopping.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        try:
            while not self._stopping.is_set():
                with self._conn_lock:
                    conn = self._conn
                if conn is None:
                    conn = self._reconnect()
                    if conn is None:
                        return
                try:
                    self._stream(conn)
                    return  # only returns normally when stopping
                except SourceError:
                    raise
                except Exception as exc:  # noqa: BLE001 - whatever a dead transport raises: reconnect
                    if self._stopping.is_set():
                        return
                    reason = exc.args[0] if isinstance(exc, _Disconnected) else f"{type(exc).__name__}: {exc}"
                    with self._conn_lock:
                        if self._conn is conn:
                            self._conn = None
                    conn.close()
                    self._put(Notice(DISCONNECTED, f"{self.target.display}: {reason}"))
        except SourceError as exc:
            self._put(_Fatal(exc))
        except Exception as exc:  # noqa: BLE001 - surface as one line, not a thread traceback
            log.debug("ssh follower crashed", exc_info=True)
            self._put(_Fatal(SourceError(f"SSH follower failed: {type(exc).__name__}: {exc}")))
        finally:
            self._put(_END)

    def _reconnect(self) -> _Connection | None:
        delay = 0.2
        attempt = 0
        while not self._stopping.wait(delay):
            attempt += 1
            self._put(
                Notice(RECONNECTING, f"attempt {attempt}: connecting to {self.target.display}")
            )
            try:
                conn = self._new_connection()
            except (HostKeyError, _AuthError):
                raise
            except Exception as exc:  # noqa: BLE001 - a server going down mid-handshake raises anything
                log.debug("reconnect attempt %d failed: %s", attempt, exc)
                delay = min(delay * 2, self.max_backoff)
                continue
            with self._conn_lock:
                if self._stopping.is_set():
                    conn.close()
                    return None
                self._conn = conn
            self._put(Notice(RECONNECTED, f"{self.target.display} after {attempt} attempt(s)"))
            return conn
        return None

    def _refresh_inode(self, conn: _Connection, generation: int) -> None:
        """Learn the inode tail switched to (see module docstring); runs in a thread."""
        try:
            status, out = _run_remote(
                conn.client, _sh(f"stat -L -c %i -- {shlex.quote(self.path)}"), self.connect_timeout
            )
        except _Disconnected:
            return
        value = out.decode(errors="replace").strip()
        with self._conn_lock:
            if generation == self._generation and status == 0 and value.isdigit():
                self._inode = value

    def _stream(self, conn: _Connection) -> None:
        token = "LFHDR-" + secrets.token_hex(8)
        script = _tail_script(
            self.path, offset=self._pos, prev_inode=self._inode, token=token, nonce=_nonce_path()
        )
        transport = conn.transport
        try:
            chan = transport.open_session(timeout=self.connect_timeout)
            chan.settimeout(0.1)
            chan.exec_command(_sh(script))
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise _Disconnected(f"cannot start remote tail: {exc}") from None
        keepalive = _Keepalive(transport, self.keepalive_interval, self.keepalive_timeout)
        if self.keepalive_interval > 0:  # 0 disables hung-peer detection
            keepalive.start()
        parser = _TailStream(token)
        last_data = time.monotonic()
        try:
            while not self._stopping.is_set():
                try:
                    data = chan.recv(_RECV_SIZE)
                except TimeoutError:
                    if keepalive.dead.is_set():
                        raise _Disconnected(
                            f"no keepalive reply within {self.keepalive_timeout:g}s (peer hung)"
                        ) from None
                    while chan.recv_stderr_ready():
                        chan.recv_stderr(_RECV_SIZE)
                    if parser.held and time.monotonic() - last_data > _HOLD_FLUSH_S:
                        self._deliver(parser.flush())
                    continue
                except (OSError, EOFError, paramiko.SSHException) as exc:
                    raise _Disconnected(str(exc) or type(exc).__name__) from None
                if not data:
                    if self._stopping.is_set():
                        return
                    if keepalive.dead.is_set():
                        raise _Disconnected(
                            f"no keepalive reply within {self.keepalive_timeout:g}s (peer hung)"
                        )
                    if transport.is_active() and chan.exit_status_ready():
                        status = chan.recv_exit_status()
                        if status in (126, 127):
                            raise SourceError(
                                f"{self.target.display} has no GNU coreutils tail; cannot follow"
                            )
                        raise _Disconnected(f"remote tail exited with status {status}")
                    raise _Disconnected("connection closed by remote host")
                last_data = time.monotonic()
                for kind, value in parser.feed(data):
                    if kind == "data":
                        self._deliver(value)  # type: ignore[arg-type]
                    elif kind == "header":
                        self._on_header(value)  # type: ignore[arg-type]
                    else:
                        self._on_diag(value, conn)  # type: ignore[arg-type]
        finally:
            keepalive.halt()
            _quietly(chan.close)  # raises EOFError on a transport whose socket died

    def _deliver(self, data: bytes) -> None:
        if data and self._put(Chunk(data, self._pos)):
            self._pos += len(data)

    def _on_header(self, fields: list[str]) -> None:
        if fields[0] == "waiting":
            if not self._waiting_emitted:
                self._waiting_emitted = True
                self._put(Notice(WAITING, f"waiting for {self.path} to appear on {self.target.display}"))
            return
        if fields[0] in ("notail", "notgnu"):
            raise SourceError(f"{self.target.display} has no GNU coreutils tail; cannot follow")
        if fields[0] == "notfile":
            raise SourceError(f"{self.path} on {self.target.display} is not a regular file")
        if fields[0] == "unreadable":
            raise SourceError(f"{self.path} on {self.target.display} is not readable (permission denied)")
        if fields[0] != "start":
            return
        start, inode, why = int(fields[1]), fields[2], fields[3]
        self._waiting_emitted = False
        where = f"{self.path} on {self.target.display}"
        if not self._had_file:
            note = " (file shorter than the start offset)" if why == "short" else ""
            self._put(Notice(OPENED, f"{where} from offset {start}{note}"))
        elif why == "short":
            self._put(Notice(TRUNCATED, f"{where} was truncated while disconnected; reading from 0"))
        elif why == "new":
            self._put(Notice(ROTATED, f"{where} was replaced while disconnected; reading from 0"))
        self._had_file = True
        with self._conn_lock:
            self._generation += 1
            self._inode = inode if inode.isdigit() else "any"
        self._pos = start

    def _on_diag(self, text: str, conn: _Connection) -> None:
        where = f"{self.path} on {self.target.display}"
        if text.endswith(": file truncated"):
            self._pos = 0
            self._put(Notice(TRUNCATED, f"{where} was truncated; reading from 0"))
        elif "following new file" in text or "has become accessible" in text:
            self._pos = 0
            self._put(Notice(ROTATED, f"{where} was replaced; reading the new file from 0"))
            with self._conn_lock:
                self._generation += 1
                self._inode = "any"  # until the refresh below answers
                generation = self._generation
            threading.Thread(
                target=self._refresh_inode, args=(conn, generation), name="ssh-stat", daemon=True
            ).start()
        else:
            log.debug("remote tail: %s", text)
