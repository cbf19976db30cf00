"""``gpuemu store check|repair|reset``: what to do with a store that cannot be trusted.

``check`` reads every page (SQLite's ``integrity_check``) without writing. ``repair`` copies every row that
can still be read into a new store, walking each table by rowid so that one damaged page costs only the rows
on it; ``reset`` starts empty. Both keep the old file (and its WAL) beside it as ``<name>.corrupt-<time>``
(``<name>.old-<time>`` when it was healthy), so nothing is ever thrown away. While a run writes the store
(it holds the store's lock file shared, or a live process still owns a ``running`` run) they refuse, unless
forced: a store replaced under a run would take that run's results into the file set aside.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StoreError
from .db import PINS_SQL, SCHEMA_VERSION, Store, file_problem, lock_path, owner_alive, sqlite_uri, wal_path
from .prune import RETENTION_TABLES

TABLES = ("runs", "op_results", "snapshots", "cases")
#: Tables a later gpuemu added (pins, retention's records), made on first use: a repair copies each the damaged
#: store has, so pinned runs stay pinned and pruned seeds still say "pruned" after it.
LATER_TABLES = {"pins": PINS_SQL, **RETENTION_TABLES}
#: How far past the last readable row a walk probes for rows behind a damaged stretch of unknown end.
PROBE_AHEAD = 20_000


@dataclass
class CheckReport:
    """What ``gpuemu store check`` found: problems (empty when healthy), row counts, runs by status."""

    path: Path
    exists: bool
    size: int = 0
    schema: int | None = None
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int | None] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "exists": self.exists,
            "size": self.size,
            "schema": self.schema,
            "healthy": self.healthy,
            "problems": self.problems,
            "counts": self.counts,
            "runs": self.runs,
            "notes": self.notes,
        }


def check(path: Path, *, max_problems: int = 20) -> CheckReport:
    """Read the whole store at ``path`` and say what is wrong with it; writes nothing."""
    report = CheckReport(path, path.exists())
    if not report.exists:
        return report
    report.size = path.stat().st_size
    problem = file_problem(path)
    if problem:
        report.problems.append(problem)
        return report
    try:
        store = Store(path, readonly=True)
    except StoreError as exc:
        report.problems.append(str(exc))
        return report
    try:
        report.schema = store.schema
        report.notes += store.notes
        try:
            rows = store.db.execute(f"PRAGMA integrity_check({int(max_problems)})").fetchall()
            found = [str(r[0]) for r in rows]
            if found != ["ok"]:
                report.problems += found
        except sqlite3.Error as exc:
            report.problems.append(str(exc))
        for table in TABLES:
            try:
                report.counts[table] = store.count(table)
            except StoreError:
                report.counts[table] = None
        try:
            for run in store.runs():
                report.runs[run["status"]] = report.runs.get(run["status"], 0) + 1
        except StoreError as exc:
            report.problems.append(f"runs cannot be listed: {exc}")
    finally:
        store.close()
    return report


@dataclass
class RepairReport:
    """What ``repair``/``reset`` did: where the old file went, the rows recovered and the rows lost."""

    path: Path
    kept: Path | None
    recovered: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, int] = field(default_factory=dict)
    lost_tail: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "kept": str(self.kept) if self.kept else None,
            "recovered": self.recovered,
            "unreadable": self.unreadable,
            "lost_tail": self.lost_tail,
            "problems": self.problems,
        }


def repair(path: Path, *, force: bool = False) -> RepairReport:
    """Copy every readable row of the store at ``path`` into a new store that takes its place; the old file is
    kept beside it. A healthy store is left as it is. Refuses while a run writes the store, unless ``force``."""
    _a_file(path)
    with maintenance(path, "repair", force=force):
        return _repair(path)


def _repair(path: Path) -> RepairReport:
    found = check(path)
    if not found.exists:
        raise StoreError(f"no result store at {path}: nothing to repair", path=path)
    if found.healthy:
        return RepairReport(path, None)
    _refuse_newer(path, found)
    _writable_folder(path)
    fresh = path.with_name(f".{path.name}.repair-{os.getpid()}")
    _remove(fresh)
    report = RepairReport(path, None, problems=found.problems)
    new = Store(fresh)
    try:
        old = _open_raw(path)
        try:
            later = [t for t in LATER_TABLES if _has_table(old, t)]
            for table in later:
                new.write(lambda c, sql=LATER_TABLES[table]: c.execute(sql))
            for table in (*TABLES, *later):
                got, lost, tail = _copy_table(old, new, table)
                report.recovered[table], report.unreadable[table] = got, lost
                if tail:
                    report.lost_tail.append(table)
        finally:
            old.close()
        new.mark_interrupted()
    finally:
        new.close()
    report.kept = _set_aside(path, "corrupt")
    os.replace(fresh, path)
    return report


def reset(path: Path, *, force: bool = False) -> RepairReport:
    """Set the store at ``path`` aside (kept beside it) and start an empty one. Refuses while a run writes the
    store, unless ``force``."""
    _a_file(path)
    with maintenance(path, "reset", force=force):
        found = check(path)
        if found.exists:
            _writable_folder(path)
        kept = _set_aside(path, "old" if found.healthy else "corrupt") if found.exists else None
        Store(path).close()
        return RepairReport(path, kept, problems=found.problems)


@contextlib.contextmanager
def maintenance(path: Path, what: str, *, force: bool) -> Iterator[None]:
    """Hold the store's lock exclusively while it is repaired or reset (a run that begins waits for it), or
    refuse when a run holds it or a live process owns a ``running`` run (``force``: go on, and say so)."""
    import fcntl

    fd = -1
    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        pass  # no lock file can be made (a read-only folder): the store cannot be replaced there either
    try:
        busy = []
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy.append("a run holds its lock")
        busy += [f"run {r['id'][:12]} (pid {r['pid']}) is running" for r in _live_runs(path)]
        if busy and not force:
            raise StoreError(
                f"refusing to {what} the result store {path} while a run writes it ({'; '.join(busy[:3])}): its"
                f" results would land in the file set aside. Wait for it to finish, or add --force",
                path=path,
                reason="busy",
            )
        yield
    finally:
        if fd >= 0:
            os.close(fd)


def _live_runs(path: Path) -> list[dict[str, Any]]:
    """``running`` runs whose process is alive (a damaged or unreadable store: none can be told)."""
    if not path.exists():
        return []
    try:
        store = Store(path, readonly=True)
    except (StoreError, sqlite3.Error, OSError):
        return []
    try:
        rows = store.query("SELECT id, host, pid, owner FROM runs WHERE status = 'running'")
    except (StoreError, sqlite3.Error):
        rows = []
    finally:
        store.close()
    return [r for r in rows if r.get("pid") is not None and r.get("owner") and owner_alive(r)]


# --- helpers -----------------------------------------------------------------------------------------
def _refuse_newer(path: Path, found: CheckReport) -> None:
    if found.schema is not None and found.schema > SCHEMA_VERSION:
        raise StoreError(
            f"cannot repair the result store {path}: it was written by a newer gpuemu (store schema {found.schema};"
            f" this one knows {SCHEMA_VERSION}). Repair it with that version, or `gpuemu store reset`",
            path=path,
            reason="newer",
        )


def _a_file(path: Path) -> None:
    """Never move a folder or a device that GPUEMU_STORE points at by mistake."""
    if path.exists() and not path.is_file():
        raise StoreError(f"{path} is not a store file (a folder or a device?): nothing was moved", path=path)


def _writable_folder(path: Path) -> None:
    if not os.access(path.parent, os.W_OK):
        raise StoreError(
            f"cannot replace the result store {path}: its folder is read-only. Copy the file somewhere writable and"
            " point GPUEMU_STORE at the copy",
            path=path,
            reason="read-only",
        )


def _open_raw(path: Path) -> sqlite3.Connection:
    """The damaged file, read-only (its WAL replayed where the folder allows it)."""
    conn = sqlite3.connect(f"{sqlite_uri(path)}?mode=ro", uri=True, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA writable_schema = 1")  # a truncated file: read the pages that are there, not refuse all
    return conn


def _has_table(conn: sqlite3.Connection, table: str) -> bool:
    """Whether the damaged store has ``table`` (a schema page it cannot read: as if it had not)."""
    try:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    except sqlite3.Error:
        return False
    return found is not None


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    try:
        return [str(r[1]) for r in conn.execute(f"PRAGMA table_info([{table}])").fetchall()]
    except sqlite3.Error:
        return []


def _copy_table(old: sqlite3.Connection, new: Store, table: str) -> tuple[int, int, bool]:
    """Rows of ``table`` copied from ``old`` into ``new``; rowids found unreadable between readable rows; whether
    the table's end could not be read (how many rows it held there is unknowable)."""
    have = set(_columns(new.db.conn, table))
    cols = [c for c in _columns(old, table) if c in have]
    if not cols:
        return 0, 0, True
    names = ", ".join(f"[{c}]" for c in cols)
    insert = f"INSERT OR IGNORE INTO [{table}] ({names}) VALUES ({', '.join('?' * len(cols))})"
    copied = lost = pending = 0
    batch: list[tuple[Any, ...]] = []
    for row in _walk(old, table, names):
        if row is None:
            pending += 1
            continue
        lost, pending = lost + pending, 0
        batch.append(row)
        if len(batch) >= 500:
            copied += _insert(new, insert, batch)
            batch = []
    copied += _insert(new, insert, batch)
    return copied, lost, pending > 0


def _insert(new: Store, sql: str, rows: list[tuple[Any, ...]]) -> int:
    if rows:
        new.write(lambda c: c.executemany(sql, rows))
    return len(rows)


def _walk(conn: sqlite3.Connection, table: str, names: str) -> Iterator[tuple[Any, ...] | None]:
    """Every readable row of ``table`` in rowid order; None for each rowid lost in a damaged stretch.

    Ranges are read a batch at a time; where a range fails, rowids are probed one by one (each a fresh
    descent of the b-tree, which a damaged leaf elsewhere does not stop) until a range reads again."""
    try:
        top = conn.execute(f"SELECT max(rowid) FROM [{table}]").fetchone()[0]
    except sqlite3.Error:
        top = None
    cursor, last_good = 0, 0
    while True:
        try:
            rows = conn.execute(
                f"SELECT rowid, {names} FROM [{table}] WHERE rowid > ? ORDER BY rowid LIMIT 200", (cursor,)
            ).fetchall()
        except sqlite3.Error:
            rows = None
        if rows is not None:
            if not rows:
                return
            for r in rows:
                yield tuple(r[1:])
            cursor = last_good = int(rows[-1][0])
            continue
        cursor += 1  # a damaged stretch: one rowid at a time
        if cursor > (top if top is not None else last_good + PROBE_AHEAD):
            return
        try:
            one = conn.execute(f"SELECT {names} FROM [{table}] WHERE rowid = ?", (cursor,)).fetchone()
        except sqlite3.Error:
            yield None
            continue
        if one is not None:
            last_good = cursor
            yield tuple(one)


def _set_aside(path: Path, label: str) -> Path:
    """Move the store (with its WAL, which holds committed rows) to ``<name>.<label>-<time>``; drop its -shm."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = path.with_name(f"{path.name}.{label}-{stamp}")
    n = 1
    while kept.exists():
        n += 1
        kept = path.with_name(f"{path.name}.{label}-{stamp}-{n}")
    os.replace(path, kept)
    if wal_path(path).exists():
        os.replace(wal_path(path), wal_path(kept))
    _remove(path.with_name(path.name + "-shm"))
    return kept


def _remove(path: Path) -> None:
    for p in (path, wal_path(path), path.with_name(path.name + "-shm")):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
