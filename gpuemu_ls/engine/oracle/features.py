"""Where a failing output's errors lie, and what the case's inputs held, in a form small enough to store
with every failure.

Diagnosis (is it the tail tile? rows that hold -inf? inputs exactly halfway between two output values?)
and the editor's heatmap read these features instead of the full mismatch mask or the inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..config.model import OpConfig
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
        a = dt.widened(arr).reshape(rows_bad.size, -1)
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


#: The neighbourhood of a case's worst element an editor shows: rows x columns of the last two axes.
WINDOW_ROWS, WINDOW_COLS = 5, 7


def _value(x: float) -> float | str:
    """A value for JSON (stored, sent to editors): NaN and infinities as "nan", "inf", "-inf"."""
    return x if np.isfinite(x) else ("nan" if np.isnan(x) else ("inf" if x > 0 else "-inf"))


def _span(center: int, size: int, width: int) -> tuple[int, int]:
    """``[start, stop)`` of at most ``width`` indices of ``0..size`` with ``center`` as near the middle as fits."""
    start = min(max(0, center - width // 2), max(0, size - width))
    return start, min(size, start + width)


def neighbourhood(cmp: Comparison, op_out: Any, ref_out: Any) -> dict[str, Any] | None:
    """Op and reference values around a failing output's worst element: up to 5 rows x 7 columns of its last two
    axes (its leading indices fixed), with which of them are off tolerance. One element says little; the
    elements around it show the pattern (a row, a tail, a column), so an editor's diff shows these."""
    idx, mask = cmp.worst_index, cmp.mask
    op_a, ref_a = np.asarray(op_out), np.asarray(ref_out)
    if idx is None or op_a.ndim == 0 or op_a.shape != ref_a.shape or len(idx) != op_a.ndim:
        return None
    if op_a.dtype.kind not in "fiub" and op_a.dtype.name != "bfloat16":
        return None
    lead = tuple(int(i) for i in idx[:-2])
    rows = _span(int(idx[-2]), op_a.shape[-2], WINDOW_ROWS) if op_a.ndim >= 2 else None
    cols = _span(int(idx[-1]), op_a.shape[-1], WINDOW_COLS)
    where = (*lead, *((slice(*rows),) if rows else ()), slice(*cols))
    pick = (lambda a: a[where].reshape(-1, cols[1] - cols[0])) if rows else (lambda a: a[where].reshape(1, -1))
    op_w = np.asarray(pick(op_a), dtype=np.float64)
    ref_w = np.asarray(pick(ref_a), dtype=np.float64)
    bad = pick(mask) if mask is not None and mask.shape == op_a.shape else np.zeros(op_w.shape, dtype=bool)
    return {
        "lead": list(lead),
        "rows": list(rows) if rows else None,
        "cols": list(cols),
        "op": [[_value(float(v)) for v in row] for row in op_w],
        "ref": [[_value(float(v)) for v in row] for row in ref_w],
        "bad": [[int(v) for v in row] for row in np.asarray(bad, dtype=bool)],
    }


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


def input_features(
    inputs: dict[str, np.ndarray], output_dtype: str, finite: Mapping[str, np.ndarray | None] | None = None
) -> dict[str, Any]:
    """Value facts about a case's inputs that decide bugs random values trigger only now and then.

    ``input_ties_down``/``input_ties_up`` (with ``ties_dtype``): how many input elements lie exactly halfway
    between two neighbours of a narrower output dtype, where a rounding bug (half away from zero instead of
    to nearest even) shows, by the way nearest-even rounds them; only for inputs wider than the output.
    ``row_max_min``: the lowest row maximum over the finite values of the float inputs (last axis): a row
    wholly below some -t is what a running max started at 0, or a tail padded with 0 instead of -inf, gets
    wrong. ``masked_input_rows``: rows wholly -inf (fully masked), where a softmax divides 0 by 0.
    ``finite`` maps inputs known to hold finite values only to their row maxima (``run.case.case_facts``
    took them on its way): neither test for infinities nor a pass of its own is needed there.
    """
    finite = finite or {}
    feats: dict[str, Any] = {}
    out_info = dt.FLOAT_INFO.get(output_dtype)
    lowest: float | None = None
    for name, arr in inputs.items():
        if not (arr.dtype.kind == "f" or arr.dtype.name == "bfloat16") or arr.size == 0:
            continue
        wider = dt.FLOAT_INFO.get(dt.dtype_name(arr.dtype))
        if out_info is not None and wider is not None and wider.precision > out_info.precision:
            down, up = count_ties(arr, output_dtype)
            feats["input_ties_down"] = feats.get("input_ties_down", 0) + down
            feats["input_ties_up"] = feats.get("input_ties_up", 0) + up
            feats["ties_dtype"] = output_dtype
        if arr.ndim >= 1 and arr.shape[-1] > 0:
            known = finite.get(name)
            if known is not None:
                feats["masked_input_rows"] = feats.get("masked_input_rows", 0)
                rows = known
            else:
                # float32 holds every 16-bit value exactly, and numpy reduces it far faster than bfloat16
                a = arr if arr.dtype.itemsize >= 4 else np.asarray(arr, dtype=np.float32)
                flat = a.reshape(-1, a.shape[-1])
                masked = int(np.all(flat == -np.inf, axis=1).sum())
                feats["masked_input_rows"] = feats.get("masked_input_rows", 0) + masked
                rows = np.where(np.isfinite(flat), flat, -np.inf).max(axis=1)
                rows = rows[np.isfinite(rows)]
            if rows.size:
                low = float(rows.min())
                lowest = low if lowest is None else min(lowest, low)
    if lowest is not None:
        feats["row_max_min"] = lowest
    return feats


_BITS = {4: (np.uint32, 24), 8: (np.uint64, 53)}


def count_ties(values: np.ndarray, dtype: str) -> tuple[int, int]:
    """Finite values exactly halfway between two finite neighbours in ``dtype``: how many of them
    round-to-nearest-even takes toward zero, and how many away from it.

    A wrong rounding rule differs from nearest-even on one of the two kinds only (half away from zero on
    the first, ties truncated on the second), so the kind a bug fails on names the rule. With r the nearest
    value in ``dtype`` and d = x - r, x is a tie iff d != 0 and r + 2d is in ``dtype`` too: otherwise r + 2d
    falls strictly between r and r's other neighbour (also across a binade edge, since |d| is under half the
    spacing on x's side). Every step is exact in float64. For float32 and float64 inputs only the values
    whose low bits are 100...0 or 0...0 (a tie in the normal range, or in the subnormal range) are tried.
    """
    x = np.asarray(values).ravel()
    info = dt.FLOAT_INFO[dtype]
    if x.dtype.kind == "f" and x.dtype.itemsize in _BITS:
        uint, precision = _BITS[x.dtype.itemsize]
        low = precision - info.precision  # significand bits the target drops in its normal range
        if low > 0:
            bits = np.ascontiguousarray(x).view(uint) & uint((1 << low) - 1)
            x = x[(bits == 0) | (bits == uint(1 << (low - 1)))]
    with np.errstate(invalid="ignore"):
        x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return 0, 0
    with np.errstate(over="ignore", invalid="ignore"):
        r = dt.round_to(x, dtype).astype(np.float64)
        d = x - r
        other = r + 2 * d
        back = dt.round_to(other, dtype).astype(np.float64)
    tie = (d != 0) & np.isfinite(r) & np.isfinite(other) & (back == other)
    down = tie & (np.abs(r) < np.abs(x))
    return int(down.sum()), int((tie & ~down).sum())
