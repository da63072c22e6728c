"""The one pipeline over one log: incremental parser plus run model.

``watch`` feeds a ``LiveRun`` chunks as they arrive, batch commands feed it a file
(:func:`logforensics.ingest.batch.read_file`), and the workers of the parallel reader
feed it byte ranges of a file: there is no second parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .. import native
from ..events import Event
from ..model.columns import GROUP_CLASSES, GROUPS, GUARDS, ORDERED, ROW_ONLY, ROWS, SLOTS, ColumnFeed, class_of
from ..model.coverage import SAYS_AN_ERROR_NEEDS
from ..model.pd import OTHER_NEEDS, PDObserver
from ..model.run import RunModel, RunSummary
from ..read import bulk
from ..read.fastpath import note_sharing
from ..read.parser import IncrementalParser


def sharing_warnings(procs: dict[str, list[str]], nodes: dict[str, list[str]]) -> list[str]:
    """What the reader must know about rank names that more than one process or node printed:
    the run model keys a rank by its name, so each is one row."""
    out = []
    for shared, what in ((procs, "process"), (nodes, "node")):
        if shared:
            named = "; ".join(f"{rank}: {', '.join(ps)}" for rank, ps in list(shared.items())[:8])
            more = f" and {len(shared) - 8} more" if len(shared) > 8 else ""
            out.append(f"records of more than one {what} name the same rank ({named}{more}): each such rank is one "
                       "row here, its phase, last line and figures those of any of them")
    return out


class LiveRun:
    """Parser plus run model over one log: feed bytes, read events and the summary.

    Each chunk's events go to the model in one ``observe_all`` call. ``model`` and
    ``parser`` are given only by the parallel reader, which builds a run's model from
    several ranges and hands both over once. ``node`` labels every event of a log that
    is one node's part of a run (``ingest.runset``).
    """

    def __init__(self, name: str | None, *, model: RunModel | None = None,
                 parser: IncrementalParser | None = None, node: str | None = None,
                 pd: PDObserver | None = None) -> None:
        self.name = name
        self.node = node
        self.parser = parser if parser is not None else IncrementalParser(name, node=node)
        self.model = model if model is not None else RunModel(name)
        #: Ranks whose lines a wrapper labelled with a node (Ray ``ip=``, a pod prefix), and
        #: the ranks whose lines more than one node's wrapper labelled (``note_sharing``).
        self.rank_nodes: dict[str, str] = {}
        self.node_shared: dict[str, list[str]] = {}
        #: The file's prefill/decode/router role and KV-transfer records (``model.pd``).
        self.pd = pd if pd is not None else PDObserver()
        self._scanner: bulk.BulkScanner | None = None
        self._columns: ColumnFeed | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        events = self.parser.feed(chunk)
        self._observe(events)
        return events

    def settle(self) -> list[Event]:
        """``parser.settle``: the stream paused; events of bytes that waited for the verdict on text."""
        events = self.parser.settle()
        self._observe(events)
        return events

    def _observe(self, events: Sequence[Event]) -> None:
        self.model.observe_all(events)
        self.pd.observe_all(events)
        if self.parser.classifier.node_shapes:
            self._note_nodes(events)

    def feed_bulk(self, chunk: bytes) -> None:
        """``feed`` for batch reading, returning no events: where the compiled scanner is
        available, the serving records go to the model as columns (``model.columns``),
        with the same result. Both kinds of feeding can be mixed on one run."""
        if not native.available():
            self._observe(self.parser.feed(chunk))
            return
        scanner = self._scanner
        if scanner is None:
            scanner = self._scanner = bulk.BulkScanner(self.parser.classifier, class_of, SLOTS, ORDERED, ROWS,
                                                       ROW_ONLY, GROUPS, GROUP_CLASSES, GUARDS)
        if self._columns is None or self._columns.model is not self.model:
            self._columns = ColumnFeed(self.model, self._observe, self.pd.batches_without_pd_fields,
                                       OTHER_NEEDS + SAYS_AN_ERROR_NEEDS, scanner.group_class)
        self.parser.feed_bulk(chunk, scanner, self._columns)

    def close(self) -> list[Event]:
        events = self.parser.close()
        self.model.observe_all(events)
        self.pd.observe_all(events)
        if self.parser.classifier.node_shapes:
            self._note_nodes(events)
        return events

    def _note_nodes(self, events: Sequence[Event]) -> None:
        """The node a wrapper named for each rank (a Ray log that interleaves machines), and
        the ranks that records of more than one node name (two servers' schedulers)."""
        nodes = self.rank_nodes
        for ev in events:
            if ev.rank is not None and ev.node is not None:
                note_sharing(nodes, self.node_shared, ev.rank, ev.node)

    def summary(self, model: RunModel | None = None) -> RunSummary:
        """The run's summary; ``model``: a copy of the run's model that observed more (``watch``:
        a traceback the parser still holds open)."""
        stats = self.parser.stats
        stats.decode_errors = self.parser.classifier.decode_errors
        s = (model or self.model).summary(stats)
        # (what only the reader knows: the file's role, the processes behind a rank's name)
        told = self.pd.warnings() + sharing_warnings(self.parser.classifier.shared, self.node_shared)
        return replace(s, warnings=[*s.warnings, *told]) if told else s
