"""Invariants: properties the output must have, checked only where the reference has them too.

An invariant is a claim about the op (softmax rows sum to one, a gram matrix is symmetric). A
correct kernel inherits the reference's exceptions (a fully masked row is NaN in both), so each
check flags an element only when the op breaks the property and the reference keeps it. The
reference is taken as the output dtype holds it (a value beyond float16's range is inf there, so
``finite`` does not fail an inf the comparison accepted), and elements the comparison found out of
range or whose reference is suspect are not judged, by an invariant either: one rule for every check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes as dt


@dataclass
class Violation:
    invariant: str
    count: int
    index: tuple[int, ...] | None
    message: str

    def to_dict(self) -> dict[str, object]:
        return {
            "invariant": self.invariant,
            "count": self.count,
            "index": list(self.index) if self.index is not None else None,
            "message": self.message,
        }


def _first(mask: np.ndarray) -> tuple[int, ...] | None:
    if not mask.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))


def _flag(found: list[Violation], name: str, bad: np.ndarray, text: Callable[[int, Any], str]) -> None:
    """A violation of ``name`` where ``bad`` holds anywhere: its count, first index and ``text(count, index)``
    (called at once, so it may read the caller's loop variables)."""
    if bad.any():
        i, n = _first(bad), int(bad.sum())
        found.append(Violation(name, n, i, text(n, i)))


def check_invariants(
    names: tuple[str, ...],
    out: np.ndarray,
    ref: np.ndarray,
    first_input_shape: tuple[int, ...] | None,
    atol: float,
    rtol: float,
    *,
    out_dtype: str | None = None,
    excused: np.ndarray | None = None,
    bound: np.ndarray | None = None,
) -> list[Violation]:
    """Violations of the named invariants by ``out`` (op output) that ``ref`` does not share.

    ``excused`` marks elements the comparison did not judge (out of range, suspect reference); ``bound``
    is its per-element bound where it widened one.
    """
    found: list[Violation] = []
    o = np.asarray(out).astype(np.float64)
    r = np.asarray(ref).astype(np.float64)
    if out_dtype is not None and dt.is_float(out_dtype) and out_dtype != "float64":
        with np.errstate(over="ignore", invalid="ignore"):
            r = dt.round_to(r, out_dtype).astype(np.float64)  # the reference as the output dtype holds it
    skip = excused if excused is not None and excused.shape == o.shape else np.zeros(o.shape, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):
        for name in names:
            if name == "shape_preserved":
                if first_input_shape is not None and tuple(o.shape) != tuple(first_input_shape):
                    found.append(
                        Violation(
                            name, 1, None, f"output shape {list(o.shape)} != input shape {list(first_input_shape)}"
                        )
                    )
                continue
            if o.shape != r.shape:
                continue  # the comparison reports the shape mismatch
            if name == "finite":
                bad = ~np.isfinite(o) & np.isfinite(r) & ~skip
                _flag(found, name, bad, lambda n, i: f"{n} non-finite outputs where the reference is finite")
            elif name == "non_negative":
                bad = (o < 0) & (r >= 0) & ~skip
                _flag(
                    found,
                    name,
                    bad,
                    lambda n, i: f"{n} negative outputs (first {o[i]:.6g} at {list(i)})" if i else "negative outputs",
                )
            elif name == "normalized" and o.ndim >= 1 and o.shape[-1] > 0:
                n = o.shape[-1]
                bound = n * atol + rtol + 4 * n * np.finfo(np.float32).eps
                so, sr = o.sum(axis=-1), r.sum(axis=-1)
                bad = ~(np.abs(so - 1.0) <= bound) & (np.abs(sr - 1.0) <= bound) & ~skip.any(axis=-1)
                _flag(
                    found,
                    name,
                    bad,
                    lambda count, i: (
                        f"{count} rows do not sum to 1 "
                        f"(row {list(i) if i else '?'} sums to {so[i]:.6g}, bound {bound:.3g})"  # noqa: B023
                    ),
                )
            elif name == "symmetric" and o.ndim >= 2 and o.shape[-1] == o.shape[-2]:
                # the comparison's own per-element bound where it measured ill-conditioning (the rounding of
                # huge, cancelling terms differs between [i, j] and [j, i]), else the plain tolerance
                own = bound if bound is not None and bound.shape == o.shape else atol + rtol * np.abs(r)
                allowed = np.maximum(own, np.swapaxes(own, -1, -2))
                ot = np.swapaxes(o, -1, -2)
                bad = (
                    ~(np.abs(o - ot) <= allowed)
                    & ~(o == ot)  # the same infinity is symmetric too
                    & (np.abs(r - np.swapaxes(r, -1, -2)) <= allowed)
                    & ~(skip | np.swapaxes(skip, -1, -2))
                )
                _flag(found, name, bad, lambda n, i: f"{n} elements differ from their transpose")
    return found
