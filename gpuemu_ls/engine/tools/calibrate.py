"""Propose tolerances from the errors a known-good implementation actually makes.

The op runs over many cases per dtype. For each case the largest absolute error where |ref| <= 1
(what atol must cover) and the largest relative error where |ref| > 1 (what rtol must cover) are
taken; the proposal is a percentile of each over the cases (p95 by default) times a safety factor
(1.5), rounded up to two significant digits. ``--write`` puts the proposal into the op's
``[ops.tolerances]`` with tomlkit, keeping the file's comments and layout, after checking the new
file with the same checker that reads it.

Calibration cannot blind the check: it **refuses** (exit 1, no edit offered) when the op's failures
look like a bug rather than rounding, namely when

* cases fail with NaN or inf where the reference is finite (no tolerance covers a non-number);
* the proposal is far beyond any rounding: ``atol`` or ``rtol`` of ``FAR`` (2**-5, about 3 %) or more;
* the failures are confined to a condition that the confirmation cases confirmed (a layout, a size
  that is not a multiple of a block, an edge size, a distribution, an input magnitude): rounding
  error grows with length (``N > t`` is allowed) but does not pick one tile or one layout.

``force`` overrides the refusal with a warning.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..cases.plan import CaseSpec, mode_filter
from ..config.edits import set_tolerances
from ..config.load import load_config
from ..config.model import Config, OpConfig, resolve_tolerance
from ..errors import ConfigError, UsageError
from ..oracle.outcome import CaseResult, OpOutcome
from ..replace_file import replace_file
from ..run.validate import RunOptions, plan_op, run_validation
from ..safe_read import read_text

METHODS = ("p50", "p90", "p95", "p99", "max")
DEFAULT_METHOD, DEFAULT_FACTOR = "p95", 1.5
#: A tolerance at or above this (relative, or absolute where |ref| <= 1) is no rounding of any dtype.
FAR = 2.0**-5
#: Kinds of confirmed conditions that rounding never explains (``above``, growth with length, it can).
BUG_CONDITIONS = ("layout", "modulo", "equal", "distribution", "below", "magnitude")
NONFINITE = ("unexpected_nan", "unexpected_inf", "missing_nan")


class CalibrationRefused(UsageError):
    """The op's failures look like a bug: a wider tolerance would hide it (``force`` overrides)."""

    #: What to do instead, after the reasons.
    ADVICE = "Fix the kernel (gpuemu failures, reproduce, minimize), or pass --force if you are sure it is correct."

    def __init__(self, op: str, reasons: list[str]) -> None:
        self.op = op
        self.reasons = reasons
        super().__init__(f"{self.heading}: " + "; ".join(reasons) + ". " + self.ADVICE)

    @property
    def heading(self) -> str:
        return f"refusing to calibrate {self.op!r}: its failures look like a bug, not rounding"


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
    refusal: list[str] = field(default_factory=list)  # why this proposal looks like it would hide a bug

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
            "refusal": self.refusal,
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


def check_factor(method: str, factor: float) -> None:
    if method not in METHODS:
        raise UsageError(f"--method {method!r}: use one of {', '.join(METHODS)}")
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
        raise UsageError(f"--factor must be a finite number > 0, got {factor!r}")


def propose(
    config: Config,
    op: OpConfig,
    dtype: str,
    cases: list[CaseResult],
    method: str,
    factor: float,
    condition: dict[str, Any] | None = None,
) -> Proposal:
    """The proposal for one dtype from its cases, with the reasons it would hide a bug (``refusal``).

    ``condition`` is the run's diagnosis condition (``OpOutcome.condition``), if any.
    """
    small, large, excluded = [], [], 0
    for c in cases:
        numeric = [cmp for cmp in c.comparisons if cmp.kind in (None, "mismatch")]
        edge = c.tier == "edge"  # an edge finding is no rounding a tolerance should absorb
        if c.status == "error" or edge or not numeric or c.kind in (*NONFINITE, "shape_mismatch", "dtype_mismatch"):
            excluded += 1
            continue
        small.append(max(cmp.max_abs_small for cmp in numeric))
        large.append(max(cmp.max_rel_large for cmp in numeric))
    out_dtype = op.output_dtype or dtype
    atol = round_up(_stat(small, method) * factor)
    rtol = round_up(
        max(
            _stat(large, method) * factor,
            dt.FLOAT_INFO[out_dtype].unit_roundoff if out_dtype in dt.FLOAT_INFO else 0.0,
        )
    )
    current = resolve_tolerance(op, config.validation, out_dtype)
    p = Proposal(dtype, len(cases), atol, rtol, current, excluded=excluded)
    for label, vals in (("abs_err_small_ref", small), ("rel_err_large_ref", large)):
        p.observed[label] = {m: _stat(vals, m) for m in ("p50", "p95", "max")}
    p.failing_now = sum(1 for c in cases if c.bug)
    p.failing_proposed = sum(1 for s_, l_ in zip(small, large) if s_ > atol or l_ > rtol)
    p.refusal = refusal_reasons(p, cases, condition)
    return p


def refusal_reasons(p: Proposal, cases: list[CaseResult], condition: dict[str, Any] | None) -> list[str]:
    """Why widening the tolerance to ``p`` would hide a bug (empty: it looks like rounding)."""
    reasons = []
    nonfinite = [c for c in cases if c.bug and c.kind in NONFINITE]
    if nonfinite:
        c = nonfinite[0]
        reasons.append(
            f"{len(nonfinite)} case(s) fail with {c.kind.replace('_', ' ')} (e.g. seed {c.seed}): "
            "no tolerance covers that"
        )
    far = [(k, v) for k, v in (("atol", p.atol), ("rtol", p.rtol)) if v >= FAR and p.failing_now]
    if far:
        what = ", ".join(f"{k} = {v:.2g}" for k, v in far)
        reasons.append(f"the proposal ({what}) is far beyond any rounding (>= {FAR:g})")
    if condition and condition.get("confirmed") and p.failing_now:
        kinds = set(str(condition.get("kind", "")).split("+"))
        if kinds & set(BUG_CONDITIONS):
            reasons.append(f"the failures are confined to a confirmed condition: {condition.get('text')}")
    return reasons


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
    force: bool = False,
    run: Callable[[list[CaseSpec]], OpOutcome] | None = None,
    dtype_flag: str = "--dtype",
    on_progress: Callable[[str, int, int], None] | None = None,
    first_refusal: bool = False,
    cancel: threading.Event | None = None,
) -> list[Proposal]:
    """Run the op over ``iterations`` cases per dtype and propose (atol, rtol) per dtype.

    ``run`` runs one dtype's cases and returns their outcome, diagnosed (its ``condition`` set): by default
    in ``jobs`` of gpuemu's workers; the Python API runs them in the caller's process. ``dtype_flag`` names
    ``dtypes`` in the message about one the op does not run; ``on_progress(dtype, done, total)`` is called as
    each case of the default runner ends. Raises :class:`CalibrationRefused` when a proposal would hide a bug,
    unless ``force``; with ``first_refusal`` as soon as one dtype's proposal is refused (the answer is then
    known: an editor waiting on it need not run the other dtypes' cases), else with every dtype's reasons.
    ``cancel`` stops the default runner's cases once set (the caller then discards the proposals).
    """
    check_factor(method, factor)
    chosen = dtypes or list(op.dtypes)
    for d in chosen:
        if d not in op.dtypes:
            raise UsageError(f"{dtype_flag} {d}: op {op.name!r} runs {', '.join(op.dtypes)}")

    def in_workers(specs: list[CaseSpec], dtype: str) -> OpOutcome:
        def on_case(_op: str, _result: object, done: int, total: int) -> None:
            if on_progress is not None:
                on_progress(dtype, done, total)

        options = RunOptions(
            mode="calibrate", ops=[op.name], jobs=jobs, source="calibrate", store=False, on_case=on_case, cancel=cancel
        )
        return run_validation(config, options, specs_by_op={op.name: specs}).outcomes[0]

    proposals = []
    for d in chosen:
        specs = plan_op(config, op, "thorough", iterations, seed, mode_filter(op, dtypes=(d,)), whole=True)
        outcome = run(specs) if run is not None else in_workers(specs, d)
        proposals.append(propose(config, op, d, outcome.cases, method, factor, outcome.condition))
        if first_refusal and proposals[-1].refusal and not force:
            break
    reasons = [f"{p.dtype}: {r}" for p in proposals for r in p.refusal]
    if reasons and not force:
        raise CalibrationRefused(op.name, reasons)
    return proposals


def write_tolerances(config: Config, op: OpConfig, proposals: list[Proposal]) -> None:
    """Set ``[ops.tolerances]`` of the op in gpuemu.toml, keeping everything else byte for byte; the new
    file is checked by the same checker that reads it first, and not written if it fails."""
    text = read_text(config.path)
    new = tolerance_text(config, op, proposals, text)
    try:  # all or nothing: a write that fails (full disk, quota, kill) leaves gpuemu.toml as it was
        replace_file(config.path, new)
    except OSError as exc:
        raise UsageError(f"cannot write {config.path}: {exc.strerror or exc}") from None


def tolerance_text(config: Config, op: OpConfig, proposals: list[Proposal], text: str) -> str:
    """The gpuemu.toml text with the proposals set, checked like any configuration (UsageError if invalid)."""
    for p in proposals:
        if not all(math.isfinite(v) and v >= 0 for v in (p.atol, p.rtol)):
            bad = f"{p.dtype} atol={p.atol} rtol={p.rtol}"
            raise UsageError(f"not writing {config.path.name}: {bad} is not a tolerance")
    new = set_tolerances(text, op.index, op.name, {p.dtype: (p.atol, p.rtol) for p in proposals})
    try:
        load_config(config.root, text=new)
    except ConfigError as exc:
        raise UsageError(f"not writing {config.path.name}: the result would not load: {exc}") from None
    return new
