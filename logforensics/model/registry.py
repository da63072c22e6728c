"""The table of record handlers: each record kind's handling is written once, in the
module of the state it feeds, and registered here by kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..events import Event
    from .run import RunModel

Handler = Callable[["RunModel", "Event"], None]
HANDLERS: dict[str, Handler] = {}


def handles(*kinds: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``kinds`` (one per kind)."""
    def register(fn: Handler) -> Handler:
        for kind in kinds:
            if kind in HANDLERS:
                raise RuntimeError(f"two handlers for {kind!r}: {HANDLERS[kind].__name__} and {fn.__name__}")
            HANDLERS[kind] = fn
        return fn
    return register
