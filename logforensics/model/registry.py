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
#: Kinds whose handler may read state left by records before the part of the log a model
#: holds (``RunModel.needs_context``): the model of a later part defers such records to
#: the merge, where the state of everything before is there (``RunModel(part=True)``).
READS_EARLIER: set[str] = set()


def handles(*kinds: str, reads_earlier: bool = False) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``kinds`` (one per kind);
    ``reads_earlier``: it may read state from earlier records (see ``READS_EARLIER``)."""
    def register(fn: Handler) -> Handler:
        for kind in kinds:
            if kind in HANDLERS:
                raise RuntimeError(f"two handlers for {kind!r}: {HANDLERS[kind].__name__} and {fn.__name__}")
            HANDLERS[kind] = fn
            if reads_earlier:
                READS_EARLIER.add(kind)
        return fn
    return register
