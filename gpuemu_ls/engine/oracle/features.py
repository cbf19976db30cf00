"""Where a failing output's errors lie, in a form small enough to store with every failure.

Diagnosis (is it the tail tile? rows that hold -inf?) and the editor's heatmap read these features
instead of the full mismatch mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config.load import OpConfig
from .compare import Comparison

HEAT_ROWS, HEAT_COLS = 8, 32


def output_features(cmp: Comparison, inputs: dict[str, np.ndarray], op: OpConfig) -> dict[str, Any]:
    """Row-level facts about a failing output and a coarse heatmap of its mismatches."""
    mask = cmp.mask
    feats: dict[str, Any] = {}
    if mask is None or mask.ndim == 0:
        return feats
    width = mask.shape[-1] if mask.ndim else 1
    rows_bad = mask.reshape(-1, width).any(axis=1) if mask.size else np.zeros(0, dtype=bool)
    feats["bad_rows"] = int(rows_bad.sum())
    feats["rows"] = int(rows_bad.size)
    masked = np.zeros(rows_bad.size, dtype=bool)
    any_inf = np.zeros(rows_bad.size, dtype=bool)
    found = False
    for arr in inputs.values():
        if arr.dtype.kind not in "f" and arr.dtype.name != "bfloat16":
            continue
        if arr.ndim != mask.ndim or arr.shape[:-1] != mask.shape[:-1] or arr.size == 0:
            continue
        a = np.asarray(arr, dtype=np.float64).reshape(rows_bad.size, -1)
        masked |= np.all(a == -np.inf, axis=1)
        any_inf |= np.any(a == -np.inf, axis=1)
        found = True
    if found:
        feats["masked_rows"] = int(masked.sum())
        feats["bad_rows_masked"] = int((rows_bad & masked).sum())
        feats["bad_rows_with_inf"] = int((rows_bad & any_inf).sum())
    cols_bad = mask.reshape(-1, width).any(axis=0) if mask.size else np.zeros(0, dtype=bool)
    feats["cols"] = int(cols_bad.size)
    feats["bad_cols"] = int(cols_bad.sum())
    feats["bad_row_runs"] = runs(rows_bad)
    feats["bad_col_runs"] = runs(cols_bad)
    feats["heatmap"] = heatmap(mask)
    return feats


MAX_RUNS = 8


def runs(bad: np.ndarray) -> list[list[int]]:
    """The first ``MAX_RUNS`` runs of True as ``[start, stop)``, so a reader can say "the last 37 columns"
    exactly, which the coarse heatmap cannot."""
    if bad.size == 0 or not bad.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], bad.astype(np.int8), [0]))))
    return [[int(a), int(b)] for a, b in zip(edges[0::2], edges[1::2])][:MAX_RUNS]


def heatmap(mask: np.ndarray) -> list[list[float]]:
    """Fraction of mismatches per cell of an at most 8 x 32 grid over the last two axes."""
    m = mask.reshape(-1, mask.shape[-1]) if mask.ndim >= 2 else mask.reshape(1, -1)
    if m.ndim == 2 and mask.ndim > 2:
        m = mask.reshape(-1, mask.shape[-2], mask.shape[-1]).mean(axis=0)
    m = np.asarray(m, dtype=np.float64)
    rows, cols = m.shape
    r_edges = np.linspace(0, rows, min(HEAT_ROWS, rows) + 1).astype(int)
    c_edges = np.linspace(0, cols, min(HEAT_COLS, cols) + 1).astype(int)
    grid = []
    for i in range(len(r_edges) - 1):
        row = []
        for j in range(len(c_edges) - 1):
            cell = m[r_edges[i] : r_edges[i + 1], c_edges[j] : c_edges[j + 1]]
            row.append(round(float(cell.mean()), 3) if cell.size else 0.0)
        grid.append(row)
    return grid
