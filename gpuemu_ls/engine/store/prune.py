"""``gpuemu store prune``: keep the store's size bounded for a workspace that runs the gate on every commit.

Kept: the last ``keep_runs`` runs of each kind (source and mode: the CLI's quick runs, the gate's thorough
runs, the editor's runs, ...), every ``gpuemu minimize`` run (a
minimized case is the user's), every pinned run (``gpuemu store pin RUN``; ``gpuemu baseline store`` pins
the runs its baseline was taken from), every run that still holds the latest result of some op or kernel (what
``failures``, ``ops``, ``report`` and the editors show: an op last run three months ago by ``--op`` keeps
that run), and every run still ``running``. Everything else goes: the
runs, their op results, their cases, and the input snapshots no kept case refers to, except the failing cases of
a run younger than ``keep_failures_days`` (default 90): those stay with their snapshots, so ``reproduce`` replays
them byte for byte, until they are that old (the ``kept_failures`` table holds which runs left them). A failing
seed whose snapshot went is remembered (``pruned_seeds``), so ``reproduce`` says it was pruned rather than
quietly replaying a regenerated case. Then the file shrinks:
``VACUUM`` when no run is writing and the disk has room for a copy of the file, else the freed pages are
reused by later runs. A pruned seed still replays with ``gpuemu reproduce --regenerate``, from (op, seed).
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config.model import DEFAULT_KEEP_FAILURES_DAYS, DEFAULT_KEEP_RUNS
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
    kept_failures: int = 0  # failing cases of removed runs kept (with their snapshots) by the age rule
    aged_out_runs: list[str] = field(default_factory=list)  # removed runs whose kept failing cases now go
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


def pin_held(path: Path, run_ids: list[str], reason: str) -> int:
    """Pin those of ``run_ids`` the store at ``path`` holds (``gpuemu baseline store``: the runs a baseline was
    taken from, so retention keeps the cases behind its figures; a run of another machine's store is skipped).
    How many were pinned; 0 without a store."""
    if not run_ids or not path.exists():
        return 0
    store = Store(path)
    try:
        held = [r for r in run_ids if store.run(r) is not None]
        for run_id in held:
            store.pin(run_id, reason)
        return len(held)
    finally:
        store.close()


def prune(
    path: Path,
    *,
    keep_runs: int | None = DEFAULT_KEEP_RUNS,
    keep_failures_days: float | None = DEFAULT_KEEP_FAILURES_DAYS,
    dry_run: bool = False,
    now: float | None = None,
) -> PruneReport:
    """Remove what the retention rule above does not keep; ``dry_run``: only count it (the store is opened
    for reading and never written). ``keep_runs`` None: every run stays (``[store] keep_runs = "all"``; kept
    failing cases still age out); ``keep_failures_days`` None: failing cases of removed runs stay forever."""
    if keep_runs is not None and keep_runs < 1:
        raise UsageError(f"--keep-runs must be at least 1, got {keep_runs}")
    if keep_failures_days is not None and keep_failures_days < 0:
        raise UsageError(f"--keep-failures-days must be at least 0, got {keep_failures_days:g}")
    report = PruneReport(path, dry_run, size_before=_size(path) if path.exists() else 0)
    if not path.exists():
        report.notes.append(f"no result store at {path} yet")
        return report
    store = Store(path, readonly=dry_run)
    try:
        plan = _plan(store, keep_runs, _cutoff(keep_failures_days, now))
        report.kept_runs = plan.kept
        report.runs = plan.doomed
        report.aged_out_runs = plan.expired
        if not plan.doomed and not plan.expired:
            report.size_after = report.size_before
            return report
        counted = _count(store, plan) if dry_run else store.write(lambda conn: _delete(conn, plan, time.time()))
        report.op_results, report.cases, report.snapshots, report.kept_failures = counted
        if dry_run:
            report.size_after = report.size_before
            return report
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


def retain(
    store: Store,
    keep_runs: int | None,
    source: str,
    keep_failures_days: float | None = DEFAULT_KEEP_FAILURES_DAYS,
    *,
    now: float | None = None,
) -> list[str]:
    """The retention rule applied after a run of ``source``, on its open store, to that source's runs only:
    the runs removed (``keep_runs`` None: keep every run; failing cases kept by the age rule still age out).
    Rows only: the freed pages are reused by later runs, so the file stops growing; ``gpuemu store prune``
    also shrinks it."""
    if store.readonly or source not in RETAINING_SOURCES:
        return []
    cutoff = _cutoff(keep_failures_days, now)
    expired = _expired(store, cutoff, source)
    # the count first: an API client finishes a run per check, and most of them have nothing to remove
    if not expired and (
        keep_runs is None
        or store.query("SELECT count(*) AS n FROM runs WHERE source = ?", (source,))[0]["n"] <= keep_runs
    ):
        return []
    plan = _plan(store, keep_runs, cutoff, source, expired)
    if plan.doomed or plan.expired:
        store.write(lambda conn: _delete(conn, plan, time.time()))
    return plan.doomed


def pruned_seed(store: Store, op: str, seed: int) -> float | None:
    """When a failing case of (op, seed) lost its input snapshot to retention (None: never), for ``reproduce``
    to say so instead of replaying a regenerated case as if it were the stored one."""
    if not store.has_table("pruned_seeds"):
        return None
    rows = store.query("SELECT pruned_at FROM pruned_seeds WHERE op = ? AND seed = ?", (op, seed))
    return float(rows[0]["pruned_at"]) if rows else None


DAY = 86400.0


@dataclass
class _Plan:
    """What one prune removes: ``whole`` runs go with every case (older than the age rule's cutoff, or runs
    whose kept failing cases aged out: ``expired``); ``young`` runs keep their failing cases."""

    doomed: list[str]
    whole: list[str]
    young: list[str]
    expired: list[str]
    kept: int


def _cutoff(days: float | None, now: float | None) -> float | None:
    """The start time before which a pruned run's failing cases go (None: they never do)."""
    return None if days is None else (time.time() if now is None else now) - days * DAY


def _expired(store: Store, cutoff: float | None, source: str | None = None) -> list[str]:
    """Removed runs whose failing cases the age rule kept and no longer keeps (a small table: one row a run)."""
    if cutoff is None or not store.has_table("kept_failures"):
        return []
    sql = "SELECT run_id FROM kept_failures WHERE started_at < ?" + (" AND source = ?" if source is not None else "")
    return [r["run_id"] for r in store.query(sql, (cutoff, source) if source is not None else (cutoff,))]


def _plan(
    store: Store,
    keep_runs: int | None,
    cutoff: float | None,
    source: str | None = None,
    expired: list[str] | None = None,
) -> _Plan:
    """Which runs go, counted per kind of run, its source and mode (the CLI's quick runs, the gate's thorough
    runs, the editor's runs, ...); only ``source``'s if given. ``keep_runs`` None: none. ``expired``: what
    :func:`_expired` gave for this cutoff and source, when the caller already read it."""
    runs = store.query("SELECT id, source, mode, status, started_at FROM runs ORDER BY started_at DESC, rowid DESC")
    latest = {r["run_id"] for r in store.latest_op_results().values()} | set(store.pinned_runs())
    per_kind: dict[tuple[str, str], int] = {}
    doomed: list[dict[str, Any]] = []
    for r in runs if keep_runs is not None else ():
        if source is not None and r["source"] != source:
            continue
        mode = r["mode"] or ""
        kind = (r["source"] or "", mode)
        per_kind[kind] = per_kind.get(kind, 0) + 1
        if per_kind[kind] <= keep_runs or r["id"] in latest or r["status"] == "running" or mode in PROTECTED_MODES:
            continue
        doomed.append(r)
    doomed.reverse()  # oldest first
    young = [r["id"] for r in doomed if cutoff is None or (r["started_at"] or 0) >= cutoff]
    if expired is None:
        expired = _expired(store, cutoff, source)
    old = [r["id"] for r in doomed if cutoff is not None and (r["started_at"] or 0) < cutoff]
    return _Plan([r["id"] for r in doomed], old + expired, young, expired, len(runs) - len(doomed))


#: Removed runs that left failing cases behind, and failing seeds whose snapshot retention removed: made on a
#: store's first prune (a store without them reads as having neither).
RETENTION_TABLES = {
    "kept_failures": "CREATE TABLE IF NOT EXISTS kept_failures"
    " (run_id TEXT PRIMARY KEY, source TEXT, mode TEXT, started_at REAL)",
    "pruned_seeds": "CREATE TABLE IF NOT EXISTS pruned_seeds"
    " (op TEXT, seed INTEGER, pruned_at REAL, PRIMARY KEY (op, seed))",
}
_SCHEMA = "CREATE TEMP TABLE IF NOT EXISTS prune_runs (id TEXT PRIMARY KEY, whole INTEGER)"
_WHOLE = "(SELECT id FROM prune_runs WHERE whole)"
_YOUNG = "(SELECT id FROM prune_runs WHERE NOT whole)"
#: snapshots that only the cases of runs removed whole refer to
_ORPHANS = (
    f"SELECT DISTINCT snapshot_id FROM cases WHERE run_id IN {_WHOLE} AND snapshot_id IS NOT NULL"
    " AND snapshot_id NOT IN (SELECT snapshot_id FROM cases WHERE snapshot_id IS NOT NULL"
    f" AND run_id NOT IN {_WHOLE})"
)


def _mark(conn: sqlite3.Connection, plan: _Plan) -> None:
    conn.execute(_SCHEMA)
    conn.execute("DELETE FROM prune_runs")
    conn.executemany(
        "INSERT INTO prune_runs (id, whole) VALUES (?, ?)", [(r, 1) for r in plan.whole] + [(r, 0) for r in plan.young]
    )


def _in_chunks(store: Store, sql: str, ids: list[str]) -> Iterator[dict[str, Any]]:
    """The rows of ``sql`` for every one of ``ids``, asked 500 at a time (``{marks}``: their placeholders)."""
    for i in range(0, len(ids), 500):
        chunk = tuple(ids[i : i + 500])
        yield from store.query(sql.format(marks=",".join("?" * len(chunk))), chunk)


def _count(store: Store, plan: _Plan) -> tuple[int, int, int, int]:
    """What :func:`_delete` would remove, read without writing (the store is opened read-only)."""
    sql = "SELECT count(*) AS n FROM op_results WHERE run_id IN ({marks})"
    results = sum(r["n"] for r in _in_chunks(store, sql, plan.doomed))
    cases = kept = 0
    gone: set[str] = set()
    for r in _in_chunks(store, "SELECT snapshot_id FROM cases WHERE run_id IN ({marks})", plan.whole):
        cases += 1
        if r["snapshot_id"]:
            gone.add(r["snapshot_id"])
    for r in _in_chunks(store, "SELECT status FROM cases WHERE run_id IN ({marks})", plan.young):
        if r["status"] == "passed":
            cases += 1
        else:
            kept += 1
    if gone:
        whole_set = set(plan.whole)
        kept_rows = store.query("SELECT DISTINCT run_id, snapshot_id FROM cases WHERE snapshot_id IS NOT NULL")
        gone -= {r["snapshot_id"] for r in kept_rows if r["run_id"] not in whole_set}
    return results, cases, len(gone), kept


def _delete(conn: sqlite3.Connection, plan: _Plan, now: float) -> tuple[int, int, int, int]:
    for sql in RETENTION_TABLES.values():
        conn.execute(sql)
    _mark(conn, plan)
    snapshots = conn.execute(f"DELETE FROM snapshots WHERE id IN ({_ORPHANS})").rowcount
    conn.execute(
        "INSERT OR REPLACE INTO pruned_seeds (op, seed, pruned_at) SELECT DISTINCT op, seed, ? FROM cases"
        f" WHERE run_id IN {_WHOLE} AND snapshot_id IS NOT NULL AND status != 'passed'",
        (now,),
    )
    kept = conn.execute(f"SELECT count(*) FROM cases WHERE run_id IN {_YOUNG} AND status != 'passed'").fetchone()[0]
    conn.execute(
        "INSERT OR REPLACE INTO kept_failures (run_id, source, mode, started_at) SELECT id, source, mode, started_at"
        f" FROM runs WHERE id IN {_YOUNG} AND EXISTS"
        " (SELECT 1 FROM cases WHERE cases.run_id = runs.id AND cases.status != 'passed')"
    )
    cases = conn.execute(
        f"DELETE FROM cases WHERE run_id IN {_WHOLE} OR (run_id IN {_YOUNG} AND status = 'passed')"
    ).rowcount
    results = conn.execute("DELETE FROM op_results WHERE run_id IN (SELECT id FROM prune_runs)").rowcount
    conn.execute("DELETE FROM runs WHERE id IN (SELECT id FROM prune_runs)")
    conn.execute(f"DELETE FROM kept_failures WHERE run_id IN {_WHOLE}")
    conn.execute("DELETE FROM prune_runs")
    return results, cases, snapshots, kept


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
