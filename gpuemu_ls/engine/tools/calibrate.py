"""Propose tolerances from the errors a known-good implementation actually makes.

The op runs over many cases per dtype. For each case the largest absolute error where |ref| <= 1
(what atol must cover) and the largest relative error where |ref| > 1 (what rtol must cover) are
taken; the proposal is a percentile of each over the cases (p95 by default) times a safety factor
(1.5), rounded up to two significant digits. ``--write`` puts the proposal into the op's
``[ops.tolerances]`` with tomlkit, keeping the file's comments and layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..cases.plan import mode_filter
from ..config.edits import set_tolerances
from ..config.load import Config, OpConfig, resolve_tolerance
from ..errors import UsageError
from ..run.validate import RunOptions, plan_op, run_validation

METHODS = ("p50", "p90", "p95", "p99", "max")
DEFAULT_METHOD, DEFAULT_FACTOR = "p95", 1.5


@dataclass
class Proposal:
    dtype: str
    cases: int
    atol: float
    rtol: float
    current: tuple[float, float]
    observed: dict[str, dict[str, float]] = field(default_factory=dict)
    failing_now: int = 0
    failing_proposed: int = 0
    excluded: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "cases": self.cases,
            "atol": self.atol,
            "rtol": self.rtol,
            "current": list(self.current),
            "observed": self.observed,
            "failing_now": self.failing_now,
            "failing_proposed": self.failing_proposed,
            "excluded": self.excluded,
        }


def round_up(x: float, digits: int = 2) -> float:
    """Round up to ``digits`` significant digits (1.234e-6 -> 1.3e-6)."""
    if x <= 0 or not math.isfinite(x):
        return 0.0 if x <= 0 else x
    exp = math.floor(math.log10(x)) - digits + 1
    mantissa = math.ceil(x / 10.0**exp - 1e-9)
    return float(f"{mantissa}e{exp}")  # via text, so 6e-08 stays 6e-08 and not 6.000000000000001e-08


def _stat(values: list[float], method: str) -> float:
    if not values:
        return 0.0
    if method == "max":
        return float(max(values))
    return float(np.percentile(values, float(method[1:])))


def calibrate(
    config: Config,
    op: OpConfig,
    *,
    dtypes: list[str] | None = None,
    iterations: int = 200,
    method: str = DEFAULT_METHOD,
    factor: float = DEFAULT_FACTOR,
    seed: int | None = None,
    jobs: int = 1,
) -> list[Proposal]:
    """Run the op over ``iterations`` cases per dtype and propose (atol, rtol) per dtype."""
    if method not in METHODS:
        raise UsageError(f"--method {method!r}: use one of {', '.join(METHODS)}")
    if factor <= 0:
        raise UsageError("--factor must be > 0")
    chosen = dtypes or list(op.dtypes)
    for d in chosen:
        if d not in op.dtypes:
            raise UsageError(f"--dtype {d}: op {op.name!r} runs {', '.join(op.dtypes)}")
    proposals = []
    for d in chosen:
        specs = plan_op(config, op, "thorough", iterations, seed, mode_filter(op, dtypes=(d,)))
        result = run_validation(
            config,
            RunOptions(mode="calibrate", ops=[op.name], jobs=jobs, source="calibrate", store=False),
            specs_by_op={op.name: specs},
        )
        cases = result.outcomes[0].cases
        small, large, excluded = [], [], 0
        for c in cases:
            numeric = [cmp for cmp in c.comparisons if cmp.kind in (None, "mismatch")]
            if (
                c.status == "error"
                or not numeric
                or c.kind in ("unexpected_nan", "unexpected_inf", "missing_nan", "shape_mismatch", "dtype_mismatch")
            ):
                excluded += 1
                continue
            small.append(max(cmp.max_abs_small for cmp in numeric))
            large.append(max(cmp.max_rel_large for cmp in numeric))
        out_dtype = op.output_dtype or d
        atol = round_up(_stat(small, method) * factor)
        rtol = round_up(
            max(
                _stat(large, method) * factor,
                dt.FLOAT_INFO[out_dtype].unit_roundoff if out_dtype in dt.FLOAT_INFO else 0.0,
            )
        )
        current = resolve_tolerance(op, config.validation, out_dtype)
        p = Proposal(d, len(cases), atol, rtol, current, excluded=excluded)
        for label, vals in (("abs_err_small_ref", small), ("rel_err_large_ref", large)):
            p.observed[label] = {m: _stat(vals, m) for m in ("p50", "p95", "max")}
        p.failing_now = sum(1 for c in cases if c.status == "failed")
        p.failing_proposed = sum(1 for s_, l_ in zip(small, large) if s_ > atol or l_ > rtol)
        proposals.append(p)
    return proposals


def write_tolerances(config: Config, op: OpConfig, proposals: list[Proposal]) -> None:
    """Set ``[ops.tolerances]`` of the op in gpuemu.toml, keeping everything else byte for byte."""
    text = config.path.read_text(encoding="utf-8")
    new = set_tolerances(text, op.index, op.name, {p.dtype: (p.atol, p.rtol) for p in proposals})
    config.path.write_text(new, encoding="utf-8")
