"""``SSHFollower``: a file on an SSH host as an iterator of chunks and notices, reconnecting
after a dropped or hung connection and resuming at the last delivered byte (the method is
described in ``tail``)."""

from __future__ import annotations

import logging
import os
import queue
import secrets
import shlex
import threading
import time
from collections.abc import Iterator

import paramiko

from ..base import (
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
from .connect import (
    _RECV_SIZE,
    _AuthError,
    _connect,
    _Connection,
    _Disconnected,
    _load_ssh_config,
    _quietly,
    _resolve,
    _run_remote,
)
from .discover import ServerProcess, discover_server_logs
from .tail import _nonce_path, _sh, _tail_script, _TailStream

log = logging.getLogger(__name__)

_QUEUE_ITEMS = 256  # backpressure: a slow consumer stalls the SSH window, not memory
_HOLD_FLUSH_S = 0.25  # release a held partial marker after this much silence

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
        self.host = host
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

    @property
    def label(self) -> str:
        """``host:/path``, the host as given: what events, reports and messages call this
        file (never the resolved connection, whose key paths stay on this machine)."""
        return f"{self.host}:{self.path}"

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
