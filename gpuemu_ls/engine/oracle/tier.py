"""Tiers of a failing case: a *bug* (a failure inside the op's operating range) or an *edge finding*.

An edge finding is a failure that shows only

* **overflow**: where inputs are so large that a product or square of two of them overflows the
  accumulation precision (float32 for 16- and 32-bit cases, float64 for float64 cases):
  ``|x| >= T = sqrt(max_acc / n)``, ``n`` the case's largest dim. Any kernel that forms ``q kᵀ``, a
  variance or a sum of squares in that precision overflows there, however its reference is written;
* **propagation**: at output elements whose reference is itself NaN or infinite because the inputs hold
  NaN or +inf (the ``special`` and ``nan_payloads`` values), where the op propagates differently (inf
  for NaN, NaN -> 0 as relu does): a convention, not a wrong value. Never for an op whose tolerance is
  exact (``ulp = 0``): a cast or a copy is defined bit for bit, NaN included.

The tier is decided by evidence, never by the distribution's name: the case is run again with each
``|x| >= T`` (and, when the inputs hold NaN or +inf, each non-finite input) replaced deterministically by a
value of the same sign well inside the range, ``+-1`` (clipped into the input's declared range), every other
input byte unchanged. If that *tamed* case passes, and every failing element of the original is one the
replacement explains (a finite reference needs an overflow trigger: a NaN input that leaks into an element
whose reference is finite is a bug), the failure is an edge finding. Anything else, including a failure
that could not be tiered, is a bug. ``-inf`` alone (``masked_rows``, ``partial_inf``: masks are in every
attention kernel's contract) never triggers a tier case, so those failures are always bugs.

This module decides what to replace and what the evidence says; ``run.case`` runs the tamed case.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import dtypes as dt

#: Failure kinds a tier case may explain (wrong values and broken invariants; never a wrong shape or dtype,
#: a write into an input or an output that is missing).
TIERABLE_KINDS = ("mismatch", "unexpected_nan", "unexpected_inf", "missing_nan", "invariant")
#: The value (with the input's sign) an edge input is replaced by in the tamed case.
TAME_VALUE = 1.0


def overflow_threshold(dtype: str, n: int) -> float:
    """``T = sqrt(max_acc / n)``: from here a product or square of two inputs, summed over ``n``, overflows."""
    return math.sqrt(dt.accumulation_info(dtype).max_value / max(int(n), 1))


@dataclass
class Tamed:
    """The case's inputs with the edge values replaced, and what was replaced."""

    inputs: dict[str, np.ndarray]
    threshold: float
    big: int = 0  # finite inputs with |x| >= threshold
    nonfinite: int = 0  # NaN and +-inf inputs (replaced only when some input holds NaN or +inf)
    reasons: list[str] = field(default_factory=list)


def tame(
    logical: dict[str, np.ndarray],
    dtype: str,
    n: int,
    fit: Callable[[str, np.ndarray], np.ndarray],
    *,
    propagation: bool = True,
) -> Tamed | None:
    """The tamed inputs of a case, or None when nothing in them could make a failure an edge finding.

    ``fit(name, values)``: the replacement values moved into the input's value domain (sign, range).
    ``propagation``: whether NaN/inf inputs may make one. Not for an op whose tolerance is exact (``ulp = 0``:
    casts, copies, quantisation): its result is defined bit for bit, NaN in -> NaN out included, so a cast that
    turns NaN into inf or -0 has no convention to appeal to.
    """
    threshold = overflow_threshold(dtype, n)
    floats = {k: a for k, a in logical.items() if a.dtype.kind == "f" or a.dtype.name == "bfloat16"}
    wide = {k: dt.widened(a) for k, a in floats.items()}
    nan_or_posinf = propagation and any(bool((np.isnan(w) | (w == np.inf)).any()) for w in wide.values() if w.size)
    out = dict(logical)
    big_total = nonfinite_total = 0
    for name, w in wide.items():
        if not w.size:
            continue
        big = np.isfinite(w) & (np.abs(w) >= threshold)
        odd = ~np.isfinite(w) if nan_or_posinf else np.zeros(w.shape, dtype=bool)
        hit = big | odd
        if not hit.any():
            continue
        big_total += int(big.sum())
        nonfinite_total += int(odd.sum())
        sign = np.where(np.signbit(w) & ~np.isnan(w), -1.0, 1.0)
        value = fit(name, sign * TAME_VALUE)
        out[name] = np.where(hit, value, w).astype(floats[name].dtype)
    if not (big_total or nonfinite_total):
        return None
    reasons = (["overflow"] if big_total else []) + (["propagation"] if nonfinite_total else [])
    return Tamed(out, threshold, big_total, nonfinite_total, reasons)


def explained(tamed: Tamed, failing_refs: list[np.ndarray] | None) -> bool:
    """Whether the replacement explains every failing element of the original case.

    ``failing_refs``: the reference values at the failing elements (None: not known, e.g. an output too large
    to keep its mismatch mask, or a failed invariant). An overflow trigger explains any element (a finite
    consequence of an overflow is finite: rsqrt of an overflowed sum is 0); without one, only elements whose
    reference is NaN or infinite are explained.
    """
    if tamed.big:
        return True
    if failing_refs is None:
        return False
    return all(not bool(np.isfinite(r).any()) for r in failing_refs)


def edge_record(tamed: Tamed, dtype: str, op_text: str) -> dict[str, Any]:
    """What an edge finding says, for the store, the reports and the editors."""
    acc = dt.accumulation_info(dtype).name
    parts = []
    if tamed.big:
        parts.append(f"fails only where |x| >= {tamed.threshold:.3g}: a product of two inputs exceeds {acc}")
    if tamed.nonfinite:
        parts.append(f"NaN/inf inputs propagate differently from the reference ({op_text})")
    return {
        "reasons": list(tamed.reasons),
        "threshold": tamed.threshold,
        "accumulation": acc,
        "replaced": tamed.big + tamed.nonfinite,
        "text": "; ".join(parts),
    }


def edge_summary(records: list[dict[str, Any]], *, strict: bool) -> str:
    """An op's edge findings in one line: "overflows only where |x| >= 2.4e+18: a product of two inputs exceeds
    float32; not a bug of this kernel (strict = true fails it)"."""
    parts: list[str] = []
    for acc in sorted({r.get("accumulation", "float32") for r in records if "overflow" in r.get("reasons", ())}):
        low = min(float(r["threshold"]) for r in records if r.get("accumulation", "float32") == acc)
        parts.append(f"overflows only where |x| >= {low:.3g}: a product of two inputs exceeds {acc}")
    if any("propagation" in r.get("reasons", ()) for r in records):
        parts.append("NaN/inf inputs propagate differently from the reference (a convention, not a wrong value)")
    verdict = "failing: strict = true" if strict else "not a bug of this kernel (strict = true fails it)"
    n = len(records)
    return f"{n} edge finding{'s' * (n != 1)}: " + "; ".join(parts) + f"; {verdict}"
