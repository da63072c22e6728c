"""The store on disk: Parquet tables in Hive-style partitions, a manifest of scanned files.

Layout (``docs/fleet.md``)::

    STORE/_meta/store.json                 schema version
    STORE/_meta/files.json                 every scanned file: size, mtime, head hash, run
    STORE/<table>/scan_date=YYYY-MM-DD/part-<scan>.parquet

Directories starting with ``_`` are skipped by Spark, Hive and Trino, so ``_meta`` never
looks like data. A rescanned run's old rows are removed from the part files that hold
them (rewritten without them), then its new rows are written: one row per run, always.
A scan holds an exclusive lock on ``_meta/lock`` for its whole commit.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .schema import PARTITION, SCHEMA_VERSION, SCHEMAS, TABLES

#: Bytes of a file's head that its content hash covers.
HEAD_BYTES = 65536


class StoreError(Exception):
    """A store that cannot be created, read or written (one line, for the user)."""


def file_state(path: str) -> dict[str, Any]:
    """``{size, mtime_ns, head_sha256}`` of a file: what tells a changed file from an unchanged one."""
    st = os.stat(path)
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "head_sha256": hashlib.sha256(head).hexdigest()}


def _oserror(path: str, exc: OSError) -> StoreError:
    return StoreError(f"{path}: {exc.strerror or exc}")


class Store:
    """A store directory (created on first use)."""

    def __init__(self, root: str, *, create: bool = False) -> None:
        self.root = os.path.abspath(root)
        self.meta = os.path.join(self.root, "_meta")
        info = os.path.join(self.meta, "store.json")
        if not os.path.exists(info):
            if not create:
                raise StoreError(f"{root}: not a logforensics store (no _meta/store.json); run scan first")
            try:
                os.makedirs(self.meta, exist_ok=True)
                self._write_json(info, {"schema_version": SCHEMA_VERSION, "tables": list(TABLES)})
            except OSError as exc:
                raise _oserror(root, exc) from None
        try:
            with open(info, encoding="utf-8") as fh:
                version = json.load(fh).get("schema_version")
        except (OSError, ValueError) as exc:
            raise StoreError(f"{info}: unreadable ({exc})") from None
        if version != SCHEMA_VERSION:
            raise StoreError(f"{root}: store schema version {version}; this logforensics reads version "
                             f"{SCHEMA_VERSION} (scan into a new store)")
        if create and not os.access(self.root, os.W_OK):
            raise StoreError(f"{root}: not writable")

    # ------------------------------------------------------------------ metadata
    def _write_json(self, path: str, value: Any) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(value, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)

    def manifest(self) -> dict[str, dict[str, Any]]:
        """Every scanned file (absolute path) with its state and the run it belongs to."""
        path = os.path.join(self.meta, "files.json")
        if not os.path.exists(path):
            return {}
        with open(path, encoding="utf-8") as fh:
            return dict(json.load(fh))

    def save_manifest(self, files: Mapping[str, Mapping[str, Any]]) -> None:
        try:
            self._write_json(os.path.join(self.meta, "files.json"), dict(files))
        except OSError as exc:
            raise _oserror(self.root, exc) from None

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive for one scan at a time (a second scan waits)."""
        try:
            fh = open(os.path.join(self.meta, "lock"), "a")
        except OSError as exc:
            raise _oserror(self.root, exc) from None
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def staging(self, scan_id: str) -> str:
        """A directory inside the store for a scan's event files before they are committed."""
        path = os.path.join(self.meta, f"staging-{scan_id}")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise _oserror(self.root, exc) from None
        return path

    # ------------------------------------------------------------------ tables
    def parts(self, table: str) -> list[str]:
        """The table's part files, oldest partition first."""
        return sorted(glob.glob(os.path.join(self.root, table, f"{PARTITION}=*", "*.parquet")))

    def _part_path(self, table: str, date: str, scan_id: str) -> str:
        d = os.path.join(self.root, table, f"{PARTITION}={date}")
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, f"part-{scan_id}.parquet")

    def write_rows(self, table: str, rows: list[dict[str, Any]], date: str, scan_id: str) -> None:
        """Write ``rows`` as one part file of ``table`` (nothing when there are none)."""
        if not rows:
            return
        schema = SCHEMAS[table]
        data = pa.Table.from_pylist([{k: r.get(k) for k in schema.names} for r in rows], schema=schema)
        self._write(table, data, date, scan_id)

    def _write(self, table: str, data: pa.Table, date: str, scan_id: str) -> None:
        try:
            path = self._part_path(table, date, scan_id)
            pq.write_table(data, path + ".tmp", compression="zstd")
            os.replace(path + ".tmp", path)
        except OSError as exc:
            raise _oserror(self.root, exc) from None

    def write_events(self, staged: Iterable[str], date: str, scan_id: str) -> None:
        """Merge the scan's staged event files into one part, a row group at a time."""
        files = [f for f in staged if os.path.exists(f)]
        if not files:
            return
        try:
            path = self._part_path("events", date, scan_id)
            with pq.ParquetWriter(path + ".tmp", SCHEMAS["events"], compression="zstd") as writer:
                for f in files:
                    pf = pq.ParquetFile(f)
                    for i in range(pf.num_row_groups):
                        writer.write_table(pf.read_row_group(i))
            os.replace(path + ".tmp", path)
        except OSError as exc:
            raise _oserror(self.root, exc) from None

    def remove_runs(self, run_ids: set[str]) -> None:
        """Drop every row of these runs from every table (rewriting only the parts that hold one)."""
        if not run_ids:
            return
        wanted = pa.array(sorted(run_ids), pa.string())
        for table in TABLES:
            for part in self.parts(table):
                ids = pq.read_table(part, columns=["run_id"]).column("run_id")
                if not pc.any(pc.is_in(ids, value_set=wanted)).as_py():
                    continue
                self._rewrite_without(part, wanted)

    def _rewrite_without(self, part: str, wanted: pa.Array) -> None:
        pf = pq.ParquetFile(part)
        kept = 0
        with pq.ParquetWriter(part + ".tmp", pf.schema_arrow, compression="zstd") as writer:
            for i in range(pf.num_row_groups):
                rg = pf.read_row_group(i)
                rg = rg.filter(pc.invert(pc.is_in(rg.column("run_id"), value_set=wanted)))
                if rg.num_rows:
                    writer.write_table(rg)
                    kept += rg.num_rows
        if kept:
            os.replace(part + ".tmp", part)
        else:
            os.unlink(part + ".tmp")
            os.unlink(part)

    def read(self, table: str, columns: list[str] | None = None) -> pa.Table:
        """The whole table (without the partition column); empty with its schema when it has no parts."""
        schema = SCHEMAS[table]
        parts = [pq.read_table(p, columns=columns, schema=schema) for p in self.parts(table)]
        if not parts:
            return schema.empty_table() if columns is None else pa.schema(
                [schema.field(c) for c in columns]).empty_table()
        return pa.concat_tables(parts)
