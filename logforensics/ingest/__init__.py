"""Ingest: a log (file, stream or byte ranges) through the parser into a run model."""

from .batch import read_file
from .files import InputError, blocks, open_log
from .live import LiveRun

__all__ = ["InputError", "LiveRun", "blocks", "open_log", "read_file"]
