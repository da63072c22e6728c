"""Shared vocabulary of the byte sources behind ``logforensics watch``.

A *follower* is an iterator of :class:`Chunk` and :class:`Notice` items.  The
parser downstream only sees raw bytes plus these notices, so the one contract
that matters is about bytes: concatenating the ``Chunk.data`` received since
the last ``"truncated"`` or ``"rotated"`` notice reproduces the followed file
exactly, with nothing lost and nothing repeated, whatever happened to the
transport in between.  ``Chunk.offset`` makes that checkable at every step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, Union, runtime_checkable

#: Notice kinds, in rough lifecycle order.
WAITING = "waiting"  # the file does not exist yet
OPENED = "opened"  # the file was opened; chunks follow
TRUNCATED = "truncated"  # size shrank: bytes restart from offset 0
ROTATED = "rotated"  # another file now lives at the path: restart from 0 of it
DISCONNECTED = "disconnected"  # the transport broke (remote sources only)
RECONNECTING = "reconnecting"
RECONNECTED = "reconnected"
EOF = "eof"  # end of file reached and follow=False

NOTICE_KINDS = frozenset(
    {WAITING, OPENED, TRUNCATED, ROTATED, DISCONNECTED, RECONNECTING, RECONNECTED, EOF}
)
#: Kinds after which offsets restart at 0 of a (possibly new) file.
RESTART_KINDS = frozenset({TRUNCATED, ROTATED})


@dataclass(frozen=True, slots=True)
class Chunk:
    """Raw bytes of the followed file; ``offset`` is the file offset of ``data[0]``."""

    data: bytes
    offset: int

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


@dataclass(frozen=True, slots=True)
class Notice:
    """Something happened to the source that is not file content."""

    kind: str
    message: str


Item = Union[Chunk, Notice]  # noqa: UP007 - a runtime alias, kept as it was


@runtime_checkable
class Follower(Protocol):
    """What ``watch`` needs from a source: iterate, stop from any thread, know the offset."""

    def __iter__(self) -> Iterator[Item]: ...

    def stop(self) -> None: ...

    @property
    def offset(self) -> int: ...


class SourceError(Exception):
    """An expected failure of a source, with a one-line message fit for the CLI."""


class HostKeyError(SourceError):
    """The SSH server's host key is unknown or differs from known_hosts."""
