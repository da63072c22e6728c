"""The remote side of following a file over SSH: the tail script and its output parser.

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

import re
import secrets
import shlex


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


