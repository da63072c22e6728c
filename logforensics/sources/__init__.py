"""Byte sources for ``logforensics watch``: follow a log file locally or over SSH.

Every source is an iterator of :class:`Chunk` (raw bytes with their file
offset) and :class:`Notice` (what happened to the file or the transport), with
a thread-safe ``stop()`` and an ``offset`` property.  Parsing is someone
else's job; the sources only promise that the bytes are exact.
"""

from .base import (
    NOTICE_KINDS,
    RESTART_KINDS,
    Chunk,
    Follower,
    HostKeyError,
    Item,
    Notice,
    SourceError,
)
from .local import LocalFollower, StdinFollower
from .ssh import ServerProcess, SSHFollower, copy_file, discover_server_logs

__all__ = [
    "NOTICE_KINDS",
    "RESTART_KINDS",
    "Chunk",
    "Follower",
    "HostKeyError",
    "Item",
    "LocalFollower",
    "Notice",
    "SSHFollower",
    "ServerProcess",
    "SourceError",
    "StdinFollower",
    "copy_file",
    "discover_server_logs",
]
