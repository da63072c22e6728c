"""Fleet: many runs in one Parquet store, scanned incrementally, queried with DuckDB.

The same parser and run model as ``summary`` and ``diff``, over every log under some
paths: ``discover`` finds the runs (a file, or the per-node files of one directory),
``scan`` parses each run once and writes its rows, ``store`` owns the on-disk layout
(Hive-style partitions any Parquet reader understands), ``query`` answers SQL over it.
"""
