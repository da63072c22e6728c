"""One tool call's work in a child process, stopped at a time bound.

A tool reads what an agent names: a log of many gigabytes, a query that joins without end.
Python cannot stop a thread, so the work runs in a child process (forked from a warm
``forkserver`` that has the pipeline imported: a call costs a fork, not an import), in its
own process group; past the bound the group is killed, readers it started included, and
the call is an error while the server goes on. The child's standard input and output are
the null device: those of the server are the protocol's.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
from collections.abc import Callable
from typing import Any

#: What the child sends back: ("ok", value) or ("error", one line).
Reply = tuple[str, Any]


class Overrun(Exception):
    """The work did not end within the bound (args: the bound in seconds)."""


class ChildFailed(Exception):
    """The child ended without an answer (args: why, in words)."""


class Runner:
    """Runs functions in child processes, each given ``timeout`` seconds at most."""

    def __init__(self, timeout: float, preload: tuple[str, ...] = ("logforensics.agent.tools",)) -> None:
        self.timeout = timeout
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(list(preload))

    def call(self, fn: Callable[..., Any], *args: Any) -> Reply:
        """``fn(*args)`` in a child: ("ok", its value) or ("error", the one line of an
        anticipated failure, from ``expected``); Overrun past the bound, ChildFailed when it died."""
        receive, send = self.ctx.Pipe(duplex=False)
        child = self.ctx.Process(target=_child, args=(send, fn, args), name="logforensics-tool")
        child.start()
        send.close()
        try:
            if not receive.poll(self.timeout):
                raise Overrun(self.timeout)
            try:
                reply: Reply = receive.recv()
            except EOFError:
                child.join(5)
                raise ChildFailed(_how(child.exitcode)) from None
            return reply
        finally:
            _end(child)
            receive.close()


#: Exceptions whose message is the call's error (the tools' own, set by ``tools``).
EXPECTED: tuple[type[BaseException], ...] = (ValueError,)


def _child(send: multiprocessing.connection.Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    os.setpgrp()  # readers this call starts are in its group, and end with it
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    try:
        reply: Reply = ("ok", fn(*args))
    except EXPECTED as e:
        reply = ("error", str(e))
    except MemoryError:
        reply = ("error", "out of memory")
    except Exception as e:  # noqa: BLE001 - the server answers one line, never a traceback
        reply = ("error", f"{type(e).__name__}: {e}")
    send.send(reply)
    send.close()


def _end(child: Any) -> None:
    """Kill the child's process group (the child and readers it started), then reap it."""
    if child.pid is not None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # gone, or not yet its own group
            if child.is_alive():
                child.kill()
    child.join()


def _how(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}"
