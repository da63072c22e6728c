"""The store on disk: Parquet tables in Hive-style partitions, a manifest of scanned files.

Layout (``docs/fleet.md``)::

    STORE/_meta/store.json                 schema version
    STORE/_meta/files.json                 every scanned file: size, mtime, head hash, run
    STORE/_meta/parts.json                 every part file the store wrote, per table
    STORE/_meta/lock                       the scan that holds the store (pid, host, start)
    STORE/_meta/commit-<scan>/             a scan's files until it publishes them
    STORE/<table>/scan_date=YYYY-MM-DD/part-<scan>.parquet

Directories starting with ``_`` are skipped by Spark, Hive, Trino, pandas and DuckDB's
globs over the tables, so nothing under ``_meta`` is ever read as data.

A scan is crash-consistent: it writes every new part, and every old part rewritten
without its rescanned runs, under ``_meta/commit-<scan>/``; a journal written there by
one atomic rename is its commit point. Publishing is a fixed sequence of renames
(rewritten parts, then the parts list, then the new parts, then the files manifest),
each atomic and each repeatable, so a scan killed at any moment leaves either no
journal (the next scan deletes the directory: the store is as before) or a journal
that the next scan carries out to the end. A reader between two renames sees every
file whole and no run twice (a rescanned run may be missing for that moment).

The lock is a POSIX record lock (``lockf``) on ``_meta/lock``: the kernel drops it when
its process ends however it ends, and the process's workers do not inherit it.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .schema import PARTITION, SCHEMA_VERSION, SCHEMAS, TABLES

#: Bytes of a file's head that its content hash covers.
HEAD_BYTES = 65536
#: Rows of one table held before they are written as a row group (and their bytes).
GROUP_ROWS = {"runs": 1024, "ranks": 4096, "findings": 4096, "summaries": 256, "events": 65536,
              "environments": 1024}
GROUP_BYTES = 16 << 20
#: Pieces (one per run) held before they are joined into one table: each small table has its own buffers.
_PIECES = 64
_DICT_ROWS = 128
#: How long a scan waits for another scan's lock before it gives up (seconds).
LOCK_WAIT = 600.0

_PART = re.compile(rf"^{PARTITION}=\d{{4}}-\d{{2}}-\d{{2}}/part-[0-9A-Za-z-]+\.parquet$")
_COMMIT = "commit-"
_JOURNAL = "journal.json"


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


def _fsync(path: str) -> None:
    """Make ``path`` (a file or a directory) durable, where the system allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_json(path: str, value: Any, *, durable: bool = False) -> None:
    """Write ``value`` to ``path`` by a rename (a reader sees the old file or the new one, whole)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(value, fh, indent=1, sort_keys=True)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    if durable:
        _fsync(os.path.dirname(path))


def _holder_text(holder: Mapping[str, Any]) -> str:
    host = holder.get("host")
    where = f" on {host}" if host and host != socket.gethostname() else ""
    return f"pid {holder.get('pid', '?')}{where}, started {holder.get('started', '?')}"


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
                _write_json(info, {"schema_version": SCHEMA_VERSION, "tables": list(TABLES)})
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
    def manifest(self) -> dict[str, dict[str, Any]]:
        """Every scanned file (absolute path) with its state and the run it belongs to."""
        path = os.path.join(self.meta, "files.json")
        if not os.path.exists(path):
            return {}
        try:
            with open(path, encoding="utf-8") as fh:
                return dict(json.load(fh))
        except (OSError, ValueError) as exc:
            raise StoreError(f"{path}: unreadable ({exc})") from None

    def _listed(self) -> dict[str, list[str]]:
        """The parts the store wrote, per table, as paths under the table's directory.

        A store written before ``parts.json`` existed lists none: its ``part-*.parquet``
        files are taken as its own (the next scan writes the list).
        """
        path = os.path.join(self.meta, "parts.json")
        try:
            with open(path, encoding="utf-8") as fh:
                listed = json.load(fh)
            return {t: list(listed.get(t, [])) for t in TABLES}
        except FileNotFoundError:
            return {t: self._adoptable(t) for t in TABLES}
        except (OSError, ValueError) as exc:
            raise StoreError(f"{path}: unreadable ({exc})") from None

    def _adoptable(self, table: str) -> list[str]:
        base = os.path.join(self.root, table)
        found = glob.glob(os.path.join(base, f"{PARTITION}=*", "part-*.parquet"))
        return sorted(rel for rel in (os.path.relpath(p, base) for p in found) if _PART.match(rel))

    @contextmanager
    def lock(self, wait: float = LOCK_WAIT, note: Callable[[str], None] | None = None) -> Iterator[None]:
        """Exclusive for one scan at a time.

        A second scan says who holds the store and waits up to ``wait`` seconds, then
        fails with one line. A record left by a scan that ended without releasing it
        (killed) is reported once through ``note``; the kernel has already dropped its lock.
        """
        path = os.path.join(self.meta, "lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _oserror(self.root, exc) from None
        try:
            if not _try_lock(fd):
                holder = _read_holder(fd)
                who = _holder_text(holder) if holder else "a process that left no record"
                if note:
                    note(f"{self.root}: another scan is writing this store ({who}); "
                         f"waiting for it (up to {wait:g} s)")
                deadline = time.monotonic() + wait
                while not _try_lock(fd):
                    if time.monotonic() >= deadline:
                        raise StoreError(f"{self.root}: another scan is still writing this store ({who}) "
                                         f"after {wait:g} s; try again when it has ended")
                    time.sleep(0.2)
            left = _read_holder(fd)
            if left and note:
                note(f"{self.root}: the scan that wrote this store last ({_holder_text(left)}) was stopped "
                     f"before it ended; its lock is released and its unfinished work is repaired")
            record = {"pid": os.getpid(), "host": socket.gethostname(),
                      "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(record).encode(), 0)
            except OSError as exc:
                raise _oserror(self.root, exc) from None
            try:
                yield
            finally:  # a scan that ends, even by an error or a signal it handles, leaves no record
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # the lock goes with the descriptor

    def recover(self) -> None:
        """Finish or undo what a stopped scan left (call with the lock held).

        A commit with its journal is carried out to the end; one without is deleted,
        as are the temporary files of earlier versions. A store without a parts list
        gets one of its ``part-*.parquet`` files.
        """
        try:
            for table in TABLES:  # earlier versions wrote part-*.parquet.tmp beside the parts
                for tmp in glob.glob(os.path.join(self.root, table, f"{PARTITION}=*", "part-*.parquet.tmp")):
                    os.unlink(tmp)
            for d in glob.glob(os.path.join(self.meta, "staging-*")):
                shutil.rmtree(d, ignore_errors=True)
            for tmp in glob.glob(os.path.join(self.meta, "*.tmp")):
                os.unlink(tmp)
            for d in sorted(glob.glob(os.path.join(self.meta, _COMMIT + "*"))):
                if os.path.exists(os.path.join(d, _JOURNAL)):
                    _apply(self, d)
                else:
                    shutil.rmtree(d, ignore_errors=True)
            if not os.path.exists(os.path.join(self.meta, "parts.json")):
                _write_json(os.path.join(self.meta, "parts.json"), self._listed(), durable=True)
        except OSError as exc:
            raise _oserror(self.root, exc) from None

    # ------------------------------------------------------------------ tables
    def parts(self, table: str) -> list[str]:
        """The table's part files that the store wrote, oldest partition first.

        A listed part that is not there (a scan stopped mid-publish, which the next
        scan completes) is left out.
        """
        base = os.path.join(self.root, table)
        return [p for p in (os.path.join(base, rel) for rel in sorted(self._listed()[table])) if os.path.isfile(p)]

    def foreign(self) -> list[str]:
        """Files in the tables' directories that the store did not write (readers skip them).

        Names starting with ``.`` or ``_`` are left out, as every Parquet reader leaves them.
        """
        listed = self._listed()
        out = []
        for table in TABLES:
            base = os.path.join(self.root, table)
            own = set(listed[table])
            for d, dirs, files in os.walk(base):
                dirs[:] = sorted(x for x in dirs if not x.startswith((".", "_")))
                for name in sorted(files):
                    if name.startswith((".", "_")):
                        continue
                    path = os.path.join(d, name)
                    if os.path.relpath(path, base) not in own:
                        out.append(path)
        return out

    def foreign_warnings(self) -> list[str]:
        """One line per foreign file: named, and said to be skipped."""
        return [f"{p}: not written by this store (not in _meta/parts.json); skipped" for p in self.foreign()]

    def read(self, table: str, columns: list[str] | None = None, *, without: set[str] | None = None) -> pa.Table:
        """The whole table (without the partition column), less the runs in ``without``."""
        return read_parts(self.parts(table), table, columns, without=without)

    def begin(self, scan_id: str, date: str) -> Commit:
        """A new commit: its files stay under ``_meta`` until :meth:`Commit.publish`."""
        return Commit(self, scan_id, date)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise


def _read_holder(fd: int) -> dict[str, Any] | None:
    try:
        data = os.pread(fd, 4096, 0)
        holder = json.loads(data) if data.strip() else None
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _ids_filter(without: set[str] | None) -> pa.Array | None:
    return pa.array(sorted(without), pa.string()) if without else None


def read_parts(paths: Iterable[str], table: str, columns: list[str] | None = None, *,
               without: set[str] | None = None, only: set[str] | None = None) -> pa.Table:
    """The rows of these part files of ``table``: all, or less the runs ``without``, or only the runs ``only``.

    Read a row group at a time, so a filter never holds a whole part.
    """
    schema = SCHEMAS[table]
    cols = columns or schema.names
    out_schema = pa.schema([schema.field(c) for c in cols])
    drop, keep = _ids_filter(without), _ids_filter(only)
    if only is not None and not only:
        return out_schema.empty_table()
    pieces = []
    for path in paths:
        pf = pq.ParquetFile(path)
        want = list(cols) if "run_id" in cols or (drop is None and keep is None) else [*cols, "run_id"]
        for i in range(pf.num_row_groups):
            rg = pf.read_row_group(i, columns=want)
            if drop is not None:
                rg = rg.filter(pc.invert(pc.is_in(rg.column("run_id"), value_set=drop)))
            if keep is not None:
                rg = rg.filter(pc.is_in(rg.column("run_id"), value_set=keep))
            if rg.num_rows:
                pieces.append(rg.select(cols).cast(out_schema))
    return pa.concat_tables(pieces) if pieces else out_schema.empty_table()


class _Pending:
    """One table's rows of a commit, written a row group at a time to a file under ``_meta``."""

    def __init__(self, path: str, table: str) -> None:
        self.path, self.table = path, table
        self.schema = SCHEMAS[table]
        self.rows: list[dict[str, Any]] = []
        self.tables: list[pa.Table] = []
        self.held = 0
        self.bytes = 0
        self.joined = 0
        self.written = 0
        self.writer: pq.ParquetWriter | None = None

    def add_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for r in rows:
            row = {k: r.get(k) for k in self.schema.names}
            self.rows.append(row)
            self.held += 1
            self.bytes += 64 + sum(len(v) for v in row.values() if isinstance(v, str))
            if len(self.rows) >= _DICT_ROWS:  # held as Arrow columns, not as dicts, until the group is full
                full, self.rows = self.rows, []  # (taken before add_table, whose flush writes what rows hold)
                self.add_table(pa.Table.from_pylist(full, schema=self.schema), counted=True)
        self._maybe_flush()

    def add_table(self, t: pa.Table, *, counted: bool = False) -> None:
        self.tables.append(t)
        if not counted:
            self.held += t.num_rows
            self.bytes += t.nbytes
        if len(self.tables) - self.joined >= _PIECES:  # the last pieces joined, the earlier joins kept
            self.tables[self.joined:] = [pa.concat_tables(self.tables[self.joined:]).combine_chunks()]
            self.joined += 1
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if self.held >= GROUP_ROWS[self.table] or self.bytes >= GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.tables.append(pa.Table.from_pylist(self.rows, schema=self.schema))
            self.rows = []
        if not self.tables:
            return
        t = pa.concat_tables(self.tables) if len(self.tables) > 1 else self.tables[0]
        self.tables, self.held, self.bytes, self.joined = [], 0, 0, 0
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, self.schema, compression="zstd")
        self.writer.write_table(t, row_group_size=max(1, t.num_rows))
        self.written += t.num_rows

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            _fsync(self.path)


class Commit:
    """A scan's writes: invisible to every reader until :meth:`publish`, undone by :meth:`abort`.

    Rows are written as they come, a row group at a time, so a scan holds no more than
    a row group of each table, however many runs it parses.
    """

    def __init__(self, store: Store, scan_id: str, date: str) -> None:
        self.store, self.scan_id, self.date = store, scan_id, date
        self.dir = os.path.join(store.meta, _COMMIT + scan_id)
        self.staging = os.path.join(self.dir, "staging")
        try:
            os.makedirs(self.staging)
        except OSError as exc:
            raise _oserror(store.root, exc) from None
        self._pending = {t: _Pending(os.path.join(self.dir, f"{t}.parquet"), t) for t in TABLES}

    def add_rows(self, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Rows of ``table`` (dicts by column name; missing columns are null)."""
        try:
            self._pending[table].add_rows(rows)
        except OSError as exc:
            raise _oserror(self.store.root, exc) from None

    def add_events(self, path: str) -> None:
        """A worker's event file of one run: its rows are taken, the file deleted."""
        try:
            if not os.path.exists(path):
                return
            pf = pq.ParquetFile(path)
            for i in range(pf.num_row_groups):
                self._pending["events"].add_table(pf.read_row_group(i))
            pf.close()
            os.unlink(path)
        except OSError as exc:
            raise _oserror(self.store.root, exc) from None

    def finish(self, table: str) -> str | None:
        """Close ``table``'s file (no more rows) and return it, or None when it got no rows."""
        p = self._pending[table]
        try:
            p.close()
        except OSError as exc:
            raise _oserror(self.store.root, exc) from None
        return p.path if p.written else None

    def publish(self, remove: set[str], files: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace the runs ``remove`` by this commit's rows and save the files manifest, atomically."""
        store = self.store
        try:
            listed = store._listed()
            replace: list[tuple[str, str]] = []
            delete: list[str] = []
            wanted = _ids_filter(remove)
            for table in TABLES:
                for part in store.parts(table) if wanted is not None else []:
                    ids = pq.read_table(part, columns=["run_id"]).column("run_id")
                    if not pc.any(pc.is_in(ids, value_set=wanted)).as_py():
                        continue
                    rel = os.path.relpath(part, store.root)
                    tmp = os.path.join(self.dir, f"rewrite-{len(replace) + len(delete)}.parquet")
                    if _rewrite_without(part, tmp, wanted):
                        replace.append((os.path.relpath(tmp, store.root), rel))
                    else:
                        delete.append(rel)
                        listed[table].remove(os.path.relpath(part, os.path.join(store.root, table)))
            add: list[tuple[str, str]] = []
            for table in TABLES:
                path = self.finish(table)
                if path is None:
                    continue
                rel = f"{PARTITION}={self.date}/part-{self.scan_id}.parquet"
                add.append((os.path.relpath(path, store.root), os.path.join(table, rel)))
                listed[table].append(rel)
            _write_json(os.path.join(self.dir, "parts.json"), listed, durable=True)
            _write_json(os.path.join(self.dir, "files.json"), dict(files), durable=True)
            _write_json(os.path.join(self.dir, _JOURNAL), {"replace": replace, "delete": delete, "add": add},
                        durable=True)  # the commit point
        except OSError as exc:
            raise _oserror(store.root, exc) from None
        _apply(store, self.dir)

    def abort(self) -> None:
        """Undo the commit, or finish it when its journal is written (it is then the store's state)."""
        for p in self._pending.values():
            try:
                if p.writer is not None:
                    p.writer.close()
            except (OSError, pa.ArrowException):
                pass
        if os.path.exists(os.path.join(self.dir, _JOURNAL)):
            _apply(self.store, self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def _rewrite_without(part: str, dest: str, wanted: pa.Array) -> bool:
    """``part`` without the runs ``wanted``, written to ``dest``; False (nothing written) when no row is left."""
    pf = pq.ParquetFile(part)
    kept = 0
    writer: pq.ParquetWriter | None = None
    try:
        for i in range(pf.num_row_groups):
            rg = pf.read_row_group(i)
            rg = rg.filter(pc.invert(pc.is_in(rg.column("run_id"), value_set=wanted)))
            if rg.num_rows:
                if writer is None:
                    writer = pq.ParquetWriter(dest, pf.schema_arrow, compression="zstd")
                writer.write_table(rg)
                kept += rg.num_rows
    finally:
        if writer is not None:
            writer.close()
    if kept:
        _fsync(dest)
    return kept > 0


def _apply(store: Store, directory: str) -> None:
    """Carry out a commit's journal; every step can be repeated, so a stopped one is finished by the next."""
    root = store.root
    try:
        with open(os.path.join(directory, _JOURNAL), encoding="utf-8") as fh:
            journal = json.load(fh)
        for src, dst in journal["replace"]:  # old parts without the rescanned runs
            if os.path.exists(os.path.join(root, src)):
                os.replace(os.path.join(root, src), os.path.join(root, dst))
        for dst in journal["delete"]:
            if os.path.exists(os.path.join(root, dst)):
                os.unlink(os.path.join(root, dst))
        for name in ("parts.json",):  # before the new parts appear: a listed part not yet there is skipped
            if os.path.exists(os.path.join(directory, name)):
                os.replace(os.path.join(directory, name), os.path.join(store.meta, name))
        for src, dst in journal["add"]:
            if os.path.exists(os.path.join(root, src)):
                os.makedirs(os.path.dirname(os.path.join(root, dst)), exist_ok=True)
                os.replace(os.path.join(root, src), os.path.join(root, dst))
        if os.path.exists(os.path.join(directory, "files.json")):
            os.replace(os.path.join(directory, "files.json"), os.path.join(store.meta, "files.json"))
        _fsync(store.meta)
        os.unlink(os.path.join(directory, _JOURNAL))
        shutil.rmtree(directory, ignore_errors=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"{directory}: cannot complete the commit ({exc})") from None
