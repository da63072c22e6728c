"""Ingest: a log (file, stream or byte ranges) through the parser into a run model."""

from .batch import read_file
from .files import InputError, blocks, open_log
from .live import LiveRun
from .runset import LogFile, RunFiles, read_run, run_files

__all__ = ["InputError", "LiveRun", "LogFile", "RunFiles", "blocks", "open_log", "read_file", "read_run", "run_files"]
