"""The files beside a server log: the environment, the orchestrator's records, dumps.

Each is recognised by its content (:mod:`.sniff`), never by its name, and read into the
typed records of :mod:`.types` with file:line provenance. A run's records go on its
summary (``RunSummary.artefacts``), so ``summary``, ``diff``, the reports, ``bundle`` and
the fleet store see them beside what the log says.
"""

from .types import Artefacts, Cited, Dump, Environment, Termination

__all__ = ["Artefacts", "Cited", "Dump", "Environment", "Termination"]
