"""``gpuemu store prune``: keep the store's size bounded for a workspace that runs the gate on every commit.

Kept: the last ``keep_runs`` runs of each kind (source and mode: the CLI's quick runs, the gate's thorough
runs, the editor's runs, ...), every ``gpuemu minimize`` run (a
minimized case is the user's), every pinned run (``gpuemu store pin RUN``; ``gpuemu baseline store`` pins
the runs its baseline was taken from), every run that still holds the latest result of some op or kernel (what
``failures``, ``ops``, ``report`` and the editors show: an op last run three months ago by ``--op`` keeps
that run), and every run still ``running``. Everything else goes: the
runs, their op results, their cases, and the input snapshots no kept case refers to. Then the file shrinks:
``VACUUM`` when no run is writing and the disk has room for a copy of the file, else the freed pages are
reused by later runs. A pruned seed still replays: ``gpuemu reproduce`` regenerates it from (op, seed).
"""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config.model import DEFAULT_KEEP_RUNS
from ..errors import UsageError
from .db import Store, wal_path

#: Modes whose runs are never pruned: a minimized case is something a user made (``gpuemu minimize``), and
#: ``reproduce --minimized`` and the editors' "Reproduce minimized case" read it from its run.
PROTECTED_MODES = frozenset({"minimize"})


@dataclass
class PruneReport:
    """What a prune removed (or, with ``dry_run``, would remove), and the file's size before and after."""

    path: Path
    dry_run: bool
    kept_runs: int = 0
    runs: list[str] = field(default_factory=list)
    op_results: int = 0
    cases: int = 0
    snapshots: int = 0
    size_before: int = 0
    size_after: int = 0
    vacuumed: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, wal_path(path)) if p.exists())


def prune(path: Path, *, keep_runs: int = DEFAULT_KEEP_RUNS, dry_run: bool = False) -> PruneReport:
    """Remove what the retention rule above does not keep; ``dry_run``: only count it (the store is opened
    for reading and never written)."""
    if keep_runs < 1:
        raise UsageError(f"--keep-runs must be at least 1, got {keep_runs}")
    report = PruneReport(path, dry_run, size_before=_size(path) if path.exists() else 0)
    if not path.exists():
        report.notes.append(f"no result store at {path} yet")
        return report
    store = Store(path, readonly=dry_run)
    try:
        doomed, kept = _doomed_runs(store, keep_runs)
        report.kept_runs = kept
        report.runs = doomed
        if not doomed:
            report.size_after = report.size_before
            return report
        if dry_run:
            report.op_results, report.cases, report.snapshots = _count(store, doomed)
            report.size_after = report.size_before
            return report
        report.op_results, report.cases, report.snapshots = store.write(lambda conn: _delete(conn, doomed))
        running = store.query("SELECT count(*) AS n FROM runs WHERE status = 'running'")[0]["n"]
        report.vacuumed = _vacuum(store, path, report, busy=bool(running))
    finally:
        store.close()
    report.size_after = _size(path)
    return report


#: Sources whose runs apply the rule to their own kind after each run: ``gpuemu test``/``fuzz``, the gate, and
#: the Python API and its pytest plugin (a test suite that checks ops on every commit). The editors' runs (one
#: per op and job) are left to ``gpuemu store prune``: 20 of them are one round.
RETAINING_SOURCES = frozenset({"cli", "ci", "api", "pytest"})


def retain(store: Store, keep_runs: int | None, source: str) -> list[str]:
    """The retention rule applied after a run of ``source``, on its open store, to that source's runs only:
    the runs removed (``keep_runs`` None: keep everything). Rows only: the freed pages are reused by later
    runs, so the file stops growing; ``gpuemu store prune`` also shrinks it."""
    if keep_runs is None or store.readonly or source not in RETAINING_SOURCES:
        return []
    # the count first: an API client finishes a run per check, and most of them have nothing to remove
    if store.query("SELECT count(*) AS n FROM runs WHERE source = ?", (source,))[0]["n"] <= keep_runs:
        return []
    doomed, _ = _doomed_runs(store, keep_runs, source)
    if doomed:
        store.write(lambda conn: _delete(conn, doomed))
    return doomed


def _doomed_runs(store: Store, keep_runs: int, source: str | None = None) -> tuple[list[str], int]:
    """(the runs the rule removes, oldest first; how many it keeps): counted per kind of run, its source and
    mode (the CLI's quick runs, the gate's thorough runs, the editor's runs, ...); only ``source``'s if given."""
    runs = store.query("SELECT id, source, mode, status FROM runs ORDER BY started_at DESC, rowid DESC")
    latest = {r["run_id"] for r in store.latest_op_results().values()} | set(store.pinned_runs())
    per_kind: dict[tuple[str, str], int] = {}
    doomed: list[str] = []
    for r in runs:
        if source is not None and r["source"] != source:
            continue
        mode = r["mode"] or ""
        kind = (r["source"] or "", mode)
        per_kind[kind] = per_kind.get(kind, 0) + 1
        if per_kind[kind] <= keep_runs or r["id"] in latest or r["status"] == "running" or mode in PROTECTED_MODES:
            continue
        doomed.append(r["id"])
    return doomed[::-1], len(runs) - len(doomed)


_SCHEMA = "CREATE TEMP TABLE IF NOT EXISTS prune_runs (id TEXT PRIMARY KEY)"
#: snapshots that only the pruned runs' cases refer to
_ORPHANS = (
    "SELECT DISTINCT snapshot_id FROM cases WHERE run_id IN (SELECT id FROM prune_runs) AND snapshot_id IS NOT NULL"
    " AND snapshot_id NOT IN (SELECT snapshot_id FROM cases WHERE snapshot_id IS NOT NULL"
    " AND run_id NOT IN (SELECT id FROM prune_runs))"
)


def _mark(conn: sqlite3.Connection, doomed: list[str]) -> None:
    conn.execute(_SCHEMA)
    conn.execute("DELETE FROM prune_runs")
    conn.executemany("INSERT INTO prune_runs (id) VALUES (?)", [(r,) for r in doomed])


def _count(store: Store, doomed: list[str]) -> tuple[int, int, int]:
    """What :func:`_delete` would remove, read without writing (the store is opened read-only)."""
    results = cases = 0
    gone: set[str] = set()
    for i in range(0, len(doomed), 500):
        chunk = doomed[i : i + 500]
        marks = ",".join("?" * len(chunk))
        results += store.query(f"SELECT count(*) AS n FROM op_results WHERE run_id IN ({marks})", tuple(chunk))[0]["n"]
        rows = store.query(f"SELECT snapshot_id FROM cases WHERE run_id IN ({marks})", tuple(chunk))
        cases += len(rows)
        gone |= {r["snapshot_id"] for r in rows if r["snapshot_id"]}
    if gone:
        doomed_set = set(doomed)
        kept = store.query("SELECT DISTINCT run_id, snapshot_id FROM cases WHERE snapshot_id IS NOT NULL")
        gone -= {r["snapshot_id"] for r in kept if r["run_id"] not in doomed_set}
    return results, cases, len(gone)


def _delete(conn: sqlite3.Connection, doomed: list[str]) -> tuple[int, int, int]:
    _mark(conn, doomed)
    snapshots = conn.execute(f"DELETE FROM snapshots WHERE id IN ({_ORPHANS})").rowcount
    cases = conn.execute("DELETE FROM cases WHERE run_id IN (SELECT id FROM prune_runs)").rowcount
    results = conn.execute("DELETE FROM op_results WHERE run_id IN (SELECT id FROM prune_runs)").rowcount
    conn.execute("DELETE FROM runs WHERE id IN (SELECT id FROM prune_runs)")
    conn.execute("DELETE FROM prune_runs")
    return results, cases, snapshots


def _vacuum(store: Store, path: Path, report: PruneReport, *, busy: bool) -> bool:
    """Give the freed pages back to the file system when that is safe: no run writing, room for the copy
    VACUUM makes."""
    if busy:
        report.notes.append("a run is writing the store: freed space is reused by later runs, the file not shrunk")
        return False
    free = shutil.disk_usage(path.parent).free
    if free < 2 * _size(path):
        report.notes.append(f"not shrinking the file: {free} bytes free, VACUUM needs about {_size(path)} more")
        return False
    try:
        store.db.execute("VACUUM")
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error as exc:
        report.notes.append(f"not shrunk ({exc}): freed space is reused by later runs")
        return False
    return True
