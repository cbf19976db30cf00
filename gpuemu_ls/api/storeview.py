"""Verdicts rebuilt from the store: for runs that several processes write at once.

A pytest session spread over xdist workers records into one run (see the pytest plugin): every
worker adds its cases, and the op verdicts are recomputed from all stored cases of the run, with the
same diagnosis the engine gives live results (cases are rebuilt from their stored rows: spec,
comparisons, features).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from .._version import __version__
from ..engine.cases.plan import CaseSpec
from ..engine.config.model import Config
from ..engine.oracle.outcome import CaseResult
from ..engine.store.db import Store
from ..engine.store.prune import retain
from .replay import stored_comparisons

#: Op verdicts that decide a run's status, worst first (edge findings alone leave it passed).
_WORST_FIRST = ("failed", "error", "not_judged", "not_run")


def case_from_row(row: dict[str, Any]) -> CaseResult | None:
    """A stored case as a :class:`CaseResult` (without its snapshot), or None if its spec was not kept."""
    detail = json.loads(row.get("detail") or "{}")
    if not detail.get("spec"):
        return None
    tol = json.loads(row["tolerance"]) if row.get("tolerance") else None
    return CaseResult(
        op=row["op"],
        seed=int(row["seed"]),
        spec=CaseSpec.from_dict(detail["spec"]),
        status=row["status"],
        kind=row.get("kind"),
        message=row.get("message") or "",
        comparisons=stored_comparisons(detail),
        durations=detail.get("durations") or {},
        file=detail.get("file"),
        line=detail.get("line"),
        stderr=detail.get("stderr") or "",
        from_snapshot=bool(row.get("from_snapshot")),
        features=detail.get("features") or {},
        tolerance=tuple(tol) if tol else None,
        tier=detail.get("tier"),
        edge=detail.get("edge"),
    )


def ensure_run(
    store: Store,
    run_id: str,
    *,
    source: str,
    mode: str,
    seed: int | None,
    workspace: Path,
    config_hash: str,
    command: str,
) -> None:
    """Create the run ``run_id`` unless a process sharing it already did (INSERT OR IGNORE)."""
    row = (run_id, time.time(), source, mode, seed, str(workspace), config_hash, "running", platform.node(),
           __version__, command, os.getpid())  # fmt: skip
    store.write(
        lambda c: c.execute(
            "INSERT OR IGNORE INTO runs (id, started_at, source, mode, seed, workspace, config_hash, status, host,"
            " version, command, pid) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            row,
        )
    )


def store_verdict(
    store: Store, config: Config, run_id: str, op_name: str, *, mode: str, source: str, planned: int | None = None
) -> str:
    """Recompute ``op_name``'s verdict over every case of ``run_id`` in the store and write it; returns the status."""
    from ..engine.oracle.diagnose import diagnose_cases
    from ..engine.oracle.outcome import OpOutcome, op_status
    from ..engine.run.validate import store_verdict as record

    rows = store.cases(run_id=run_id, op=op_name)
    cases = [c for c in (case_from_row(r) for r in rows) if c is not None]
    status = op_status(cases)
    outcome = OpOutcome(op_name, status, cases, planned=planned if planned is not None else len(cases))
    outcome.elapsed = sum(sum(c.durations.values()) for c in cases)
    outcome.message = outcome.summary()
    try:
        op = config.op(op_name)
        outcome.diagnosis = diagnose_cases(cases, op, config.root)
        client_side = not op.runnable
    except KeyError:
        client_side = False
    record(store, run_id, outcome, mode, source=source, client_side=client_side)
    return status


def finish_shared_run(store: Store, config: Config, run_id: str, *, mode: str, source: str) -> str:
    """Final verdicts of every op with cases in the run, then the run's status; returns it."""
    ops = sorted({r["op"] for r in store.query("SELECT DISTINCT op FROM cases WHERE run_id = ?", (run_id,))})
    statuses = {store_verdict(store, config, run_id, op, mode=mode, source=source) for op in ops}
    status = next((s for s in _WORST_FIRST if s in statuses), "passed" if statuses else "not_run")
    store.finish_run(run_id, status)
    retain(store, config.store.keep_runs, source, config.store.keep_failures_days)  # as after a CLI run
    return status


def run_status(store: Store, run_id: str) -> str:
    statuses = {r["status"] for r in store.query("SELECT status FROM op_results WHERE run_id = ?", (run_id,))}
    return next((s for s in _WORST_FIRST if s in statuses), "passed" if statuses else "not_run")


__all__ = ["case_from_row", "ensure_run", "finish_shared_run", "run_status", "store_verdict"]
