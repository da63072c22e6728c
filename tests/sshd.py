"""A real OpenSSH server on 127.0.0.1 for the SSH source tests.

Why a real server rather than a paramiko stub: the behaviours under test (the
remote shell quoting the path, GNU ``tail -F`` inotify semantics, what a killed
or SIGSTOPped per-connection ``sshd`` looks like to the client) only exist with
the real thing.  The recipe follows docs/ssh-test-server.md of the shared notes:
privilege-separation dir, throw-away host and client ed25519 keys, a config
with ``StrictModes no``, ``sshd -D -e`` started by absolute path, stop by
SIGTERM.

tests/conftest.py imports the ``sshd_server`` fixture, so every test module can use it.
If ``/usr/sbin/sshd`` is missing the fixture *fails* with an install hint: an
SSH test that silently skips proves nothing.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"  # sshd refuses to re-exec unless started by absolute path
HOST = "127.0.0.1"
ALIAS = "lf-test"  # Host alias written into the generated ssh_config


@dataclass
class SSHServer:
    """Handle on a running test sshd and the client material to reach it."""

    host: str
    port: int
    user: str
    dir: Path
    client_key: Path
    known_hosts: Path
    ssh_config: Path
    host_public_key: str  # "ssh-ed25519 AAAA..."
    proc: subprocess.Popen
    _stopped: set[int] = field(default_factory=set)

    # -- client-side helpers -------------------------------------------------
    @property
    def known_hosts_line(self) -> str:
        return f"[{self.host}]:{self.port} {self.host_public_key}\n"

    def connect_kwargs(self) -> dict:
        """Keyword arguments for ``SSHFollower`` that reach this server."""
        return {
            "user": self.user,
            "port": self.port,
            "key_filename": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "ssh_config": str(self.ssh_config),
        }

    # -- per-connection session processes -----------------------------------
    def session_pids(self) -> list[int]:
        """PIDs of the per-connection ``sshd: USER@notty`` processes of this server."""
        pids = []
        for pid in _descendants(self.proc.pid):
            cmd = _cmdline(pid)
            if cmd.startswith("sshd: ") and "@notty" in cmd:
                pids.append(pid)
        return sorted(pids)

    def wait_sessions(self, n: int = 1, timeout: float = 5.0) -> list[int]:
        """Wait until at least ``n`` session processes exist (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.session_pids()
            if len(pids) >= n or time.monotonic() > deadline:
                return pids
            time.sleep(0.02)

    def kill_sessions(self) -> list[int]:
        """SIGKILL every session process: the client sees the connection drop."""
        pids = self.session_pids()
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        return pids

    def stop_sessions(self) -> list[int]:
        """SIGSTOP every session process: a hung peer whose kernel still ACKs."""
        pids = self.session_pids()
        for pid in pids:
            if _signal(pid, signal.SIGSTOP):
                self._stopped.add(pid)
        return pids

    def cont_sessions(self, pids: list[int] | None = None) -> None:
        """SIGCONT stopped sessions (all the ones this helper stopped by default)."""
        for pid in list(self._stopped if pids is None else pids):
            _signal(pid, signal.SIGCONT)
            self._stopped.discard(pid)

    # -- lifecycle ------------------------------------------------------------
    def close(self) -> None:
        self.cont_sessions()
        for pid in _descendants(self.proc.pid):
            _signal(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses: the ppid follows the last ")".
    return int(stat.rsplit(")", 1)[1].split()[1])


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = _ppid(int(entry))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )


def start_sshd(attempts: int = 3) -> SSHServer:
    """Start a test sshd; raises RuntimeError with a clear reason on failure."""
    if not os.path.exists(SSHD):
        raise RuntimeError(
            f"{SSHD} not found: install OpenSSH server (apt-get install -y openssh-server) "
            "to run the SSH tests"
        )
    if shutil.which("ssh-keygen") is None:
        raise RuntimeError("ssh-keygen not found: install openssh-client to run the SSH tests")
    try:  # privilege-separation dir; only root can (and needs to) create it
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    except PermissionError:
        pass

    d = Path(tempfile.mkdtemp(prefix="lf-sshd-"))
    os.chmod(d, 0o700)
    _keygen(d / "host_ed25519")
    _keygen(d / "client_ed25519")
    shutil.copy(d / "client_ed25519.pub", d / "authorized_keys")
    host_pub = " ".join((d / "host_ed25519.pub").read_text().split()[:2])
    user = getpass.getuser()

    last_err = ""
    for _ in range(attempts):
        port = _free_port()
        config = d / "sshd_config"
        config.write_text(
            f"Port {port}\n"
            f"ListenAddress {HOST}\n"
            f"HostKey {d / 'host_ed25519'}\n"
            f"PidFile {d / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\n"
            "StrictModes no\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "PermitRootLogin prohibit-password\n"
            "AllowTcpForwarding yes\n"
            "Subsystem sftp internal-sftp\n"
        )
        check = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True, text=True)
        if check.returncode != 0:
            shutil.rmtree(d, ignore_errors=True)
            raise RuntimeError(f"sshd -t rejected the test config: {check.stderr.strip()}")
        log = open(d / "sshd.log", "wb")
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        if _wait_port(port, proc, timeout=10):
            known_hosts = d / "known_hosts"
            known_hosts.write_text(f"[{HOST}]:{port} {host_pub}\n")
            ssh_config = d / "ssh_config"
            ssh_config.write_text(
                f"Host {ALIAS}\n"
                f"    HostName {HOST}\n"
                f"    Port {port}\n"
                f"    User {user}\n"
                f"    IdentityFile {d / 'client_ed25519'}\n"
            )
            return SSHServer(
                host=HOST,
                port=port,
                user=user,
                dir=d,
                client_key=d / "client_ed25519",
                known_hosts=known_hosts,
                ssh_config=ssh_config,
                host_public_key=host_pub,
                proc=proc,
            )
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
        last_err = (d / "sshd.log").read_text(errors="replace").strip()[-500:]
    shutil.rmtree(d, ignore_errors=True)
    raise RuntimeError(f"test sshd did not start: {last_err}")


@pytest.fixture(scope="session")
def sshd_server() -> Iterator[SSHServer]:
    """Session-wide real OpenSSH server on 127.0.0.1 (fails loudly if unavailable)."""
    try:
        server = start_sshd()
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"cannot start the test OpenSSH server: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.close()
