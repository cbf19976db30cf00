"""What the HTML report's plots need beyond the results document, read from the workspace's store: every
case of a plotted op (where it lies in the case space, its error against the tolerance), the worst case's
error map, and the verdicts of earlier runs. Nothing is re-run; a store that is missing, unreadable or holds
other runs leaves the page with the document's own figures and a line saying so."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import StoreError
from ...store.db import Store, store_path

#: Runs shown in the history plot, newest last.
HISTORY_RUNS = 20
#: Runs that are not a verdict of the workspace: an editor's per-op runs, replays and minimizations.
_NOT_HISTORY = ("server", "reproduce", "minimize")


@dataclass
class Case:
    """One stored case, as the plots place it."""

    seed: int
    status: str
    dtype: str
    layout: str
    distribution: str
    dims: dict[str, int]
    ratio: float | None  # the case's largest error over its tolerance (1 is the tolerance)


@dataclass
class CaseBook:
    """The store's view of a results document (empty where there is no store to read)."""

    note: str = ""  # why the store could not be read, shown on the page
    store: Store | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    def cases(self, run_id: str | None, op: str) -> list[Case]:
        if self.store is None or not run_id:
            return []
        rows = self._query(
            "SELECT seed, status, dtype, layout, distribution, dims, max_ratio FROM cases"
            " WHERE run_id = ? AND op = ? ORDER BY id",
            (run_id, op),
        )
        return [
            Case(
                seed=r["seed"],
                status=r["status"],
                dtype=r["dtype"] or "?",
                layout=r["layout"] or "?",
                distribution=r["distribution"] or "?",
                dims=_json(r["dims"]) or {},
                ratio=float(r["max_ratio"]) if r["max_ratio"] is not None else None,
            )
            for r in rows
        ]

    def error_map(self, run_id: str | None, op: str, seed: int, output: str | None) -> list[list[float]] | None:
        """The mismatch heatmap of a case's ``output`` (else of its first output that has one): the share of
        elements off per cell of an at most 8 x 32 grid over the last two axes."""
        if self.store is None or not run_id:
            return None
        rows = self._query(
            "SELECT detail FROM cases WHERE run_id = ? AND op = ? AND seed = ? ORDER BY id DESC LIMIT 1",
            (run_id, op, seed),
        )
        feats = (_json(rows[0]["detail"]) or {}).get("features") if rows else None
        outputs = feats.get("outputs") if isinstance(feats, dict) else None
        if not isinstance(outputs, dict):
            return None
        for name in [output, *outputs] if output in outputs else list(outputs):
            grid = (outputs.get(name) or {}).get("heatmap")
            if isinstance(grid, list) and grid and all(isinstance(r, list) for r in grid):
                return grid
        return None

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        try:
            return self.store.query(sql, params) if self.store else []
        except StoreError as exc:
            self.note = f"the store could not be read: {exc}"
            self.store = None
            return []

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def open_casebook(doc: dict[str, Any]) -> CaseBook:
    """The store of the document's workspace, if it holds the document's runs."""
    workspace = doc.get("workspace")
    run_ids = {r for r in [doc.get("run_id"), *(e.get("run_id") for e in doc.get("ops", []))] if r}
    if not workspace or not run_ids:
        return CaseBook(note="the document names no stored run: plots of cases and history need the store")
    path = store_path(Path(workspace))
    if not path.is_file():
        return CaseBook(note="no store beside the workspace: plots of cases and history need it")
    try:
        store = Store(path, readonly=True)
        marks = ",".join("?" * len(run_ids))
        if not store.query(f"SELECT id FROM runs WHERE id IN ({marks}) LIMIT 1", tuple(run_ids)):
            store.close()
            return CaseBook(note="the store holds none of this document's runs: no case plots, no history")
        book = CaseBook(store=store)
        book.history = _history(store)
    except StoreError as exc:
        return CaseBook(note=f"the store could not be read: {exc}")
    return book


def _history(store: Store) -> list[dict[str, Any]]:
    """Each of the last runs' op verdicts counted: ``{"run_id", "started_at", "mode", "counts": {status: n}}``."""
    marks = ",".join("?" * len(_NOT_HISTORY))
    runs = store.query(
        f"SELECT id, started_at, mode FROM runs WHERE source NOT IN ({marks}) ORDER BY started_at DESC LIMIT ?",
        (*_NOT_HISTORY, HISTORY_RUNS),
    )
    if not runs:
        return []
    ids = [r["id"] for r in runs]
    counts: dict[str, dict[str, int]] = {i: {} for i in ids}
    marks = ",".join("?" * len(ids))
    for row in store.query(
        f"SELECT run_id, status, count(*) AS n FROM op_results WHERE kind = 'op' AND run_id IN ({marks})"
        " GROUP BY run_id, status",
        tuple(ids),
    ):
        counts[row["run_id"]][row["status"]] = row["n"]
    return [
        {"run_id": r["id"], "started_at": r["started_at"], "mode": r["mode"], "counts": counts[r["id"]]}
        for r in reversed(runs)
        if counts[r["id"]]
    ]
