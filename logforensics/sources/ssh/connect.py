"""SSH connections: ~/.ssh/config resolution, host-key policy, authentication, one
ProxyJump hop, and running a short remote command."""

from __future__ import annotations

import base64
import getpass
import hashlib
import logging
import os
import re
import shlex
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import paramiko

from ..base import (
    HostKeyError,
    SourceError,
)

log = logging.getLogger(__name__)

_RECV_SIZE = 1 << 16


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
    key_filenames: tuple[str, ...] = field(repr=False)  # local paths: never in a message
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
        port = int(port or cfg.get("port") or 22)
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
                key_filename=list(target.key_filenames) or None,  # type: ignore[arg-type]  # paramiko takes a list; its stubs say str
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


