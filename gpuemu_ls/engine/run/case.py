"""One case, start to finish, in this process: inputs, op, reference, verdict.

This is the unit every face shares: worker processes call it for the CLI and the server, the Python
API calls it in the user's own process. Wrong answers (``failed``) and calls that gave no answer
(``error``) are scored apart; neither is ever ``passed``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..cases.generate import CaseInputs, generate_inputs, with_layout
from ..cases.plan import CaseSpec
from ..cases.rng import Stream
from ..config.load import OpConfig, ValidationConfig, resolve_tolerance
from ..oracle.compare import Comparison, compare_output
from ..oracle.features import output_features
from ..oracle.invariants import Violation, check_invariants
from .runners import CallError, Runner, promote

#: Failure kinds that are wrong answers; everything else that is not a pass is an error.
FAILURE_KINDS = (
    "mismatch",
    "unexpected_nan",
    "unexpected_inf",
    "missing_nan",
    "shape_mismatch",
    "dtype_mismatch",
    "output_names",
    "input_mutation",
    "invariant",
)
SENSITIVITY_RUNS = 2


@dataclass
class CaseResult:
    """The outcome of one case; what the store keeps per case."""

    op: str
    seed: int
    spec: CaseSpec
    status: str  # passed | failed | error
    kind: str | None = None
    message: str = ""
    comparisons: list[Comparison] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)
    file: str | None = None
    line: int | None = None
    stderr: str = ""
    snapshot: dict[str, np.ndarray] | None = None
    from_snapshot: bool = False
    features: dict[str, Any] = field(default_factory=dict)
    tolerance: tuple[float, float] | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def worst(self) -> Comparison | None:
        bad = [c for c in self.comparisons if not c.passed] or self.comparisons
        return max(bad, key=lambda c: c.max_ratio, default=None)

    def stats(self) -> dict[str, float | int | None]:
        w = self.worst()
        return {
            "max_abs": max((c.max_abs for c in self.comparisons), default=None),
            "max_rel": max((c.max_rel for c in self.comparisons), default=None),
            "max_ulp": max((c.max_ulp for c in self.comparisons), default=None),
            "max_ratio": max((c.max_ratio for c in self.comparisons), default=None),
            "mismatches": sum(c.mismatches for c in self.comparisons),
            "total": sum(c.total for c in self.comparisons),
            "worst_output": w.output if w else None,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (without the snapshot arrays)."""
        return {
            "op": self.op,
            "seed": self.seed,
            "spec": self.spec.to_dict(),
            "status": self.status,
            "kind": self.kind,
            "message": self.message,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "violations": [v.to_dict() for v in self.violations],
            "durations": self.durations,
            "file": self.file,
            "line": self.line,
            "stderr": self.stderr,
            "from_snapshot": self.from_snapshot,
            "features": self.features,
            "tolerance": list(self.tolerance) if self.tolerance else None,
            **{k: v for k, v in self.stats().items()},
        }


@dataclass
class CaseContext:
    """What running cases of one op needs; built once per op per worker."""

    root: Path
    op: OpConfig
    validation: ValidationConfig
    op_runner: Runner
    ref_runner: Runner
    calibration: bool = False  # also measure the error figures calibration needs (a few more passes)


def sensitivity_eps(spec: CaseSpec) -> float:
    """Relative perturbation that models a correct kernel's rounding: u_acc * sqrt(largest dim)."""
    n = max(spec.dims.values(), default=1)
    return dt.accumulation_info(spec.dtype).unit_roundoff * math.sqrt(max(n, 1))


def reduction_terms(spec: CaseSpec) -> float:
    """``sqrt(3 n)`` for the largest dim n: from the measured root-sum-square of a reduction's terms to a
    bound on the sum of their magnitudes (see compare's module docstring)."""
    return math.sqrt(3 * max(max(spec.dims.values(), default=1), 1))


def _memory(view: np.ndarray, layout: str) -> np.ndarray:
    """The memory an input view lives in: itself when contiguous, else its buffer (gaps included)."""
    return view if layout == "contiguous" or not isinstance(view.base, np.ndarray) else view.base


def _buffers(views: dict[str, np.ndarray], layout: str) -> dict[str, np.ndarray]:
    """Copies of the memory each input view lives in, to detect writes (and, when contiguous, to snapshot)."""
    return {name: np.array(_memory(v, layout), copy=True) for name, v in views.items()}


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Byte equality (NaN == NaN, -0.0 != 0.0) without copying contiguous buffers."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.flags.c_contiguous and b.flags.c_contiguous and a.ndim:
        return bool(np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))
    return a.tobytes() == b.tobytes()


def run_case(
    ctx: CaseContext,
    spec: CaseSpec,
    snapshot: dict[str, np.ndarray] | None = None,
    phase: Callable[[str], None] = lambda _p: None,
) -> CaseResult:
    """Run one case: the op on the case's inputs, the reference on the same values in float64, compare."""
    op = ctx.op
    started = time.perf_counter()
    inputs: CaseInputs = with_layout(snapshot, spec.layout) if snapshot is not None else generate_inputs(op, spec)
    result = CaseResult(op.name, spec.seed, spec, "passed", from_snapshot=snapshot is not None)
    pristine = _buffers(inputs.views, spec.layout)

    def fail(status: str, kind: str, message: str, **extra: Any) -> CaseResult:
        result.status, result.kind, result.message = status, kind, message
        for k, v in extra.items():
            setattr(result, k, v)
        # contiguous inputs are the logical arrays themselves, which the op may have written: keep the copy
        result.snapshot = pristine if spec.layout == "contiguous" else inputs.logical
        return result

    phase("op")
    t0 = time.perf_counter()
    try:
        op_out = ctx.op_runner.call(inputs.views, dict(op.kwargs))
    except CallError as exc:
        return fail(
            "error",
            f"op_{exc.kind}" if exc.kind != "raised" else "op_error",
            exc.message,
            file=exc.file,
            line=exc.line,
            stderr=exc.stderr,
        )
    result.durations["op"] = time.perf_counter() - t0

    mutated = [n for n, v in inputs.views.items() if not _same_bytes(_memory(v, spec.layout), pristine[n])]
    if mutated:
        return fail(
            "failed", "input_mutation", f"the op wrote into its input(s) {', '.join(mutated)}: inputs must be read-only"
        )

    phase("reference")
    ref_inputs = {n: promote(a) for n, a in inputs.logical.items()}
    t0 = time.perf_counter()
    try:
        ref_out = ctx.ref_runner.call(ref_inputs, dict(op.kwargs))
    except CallError as exc:
        return fail(
            "error",
            f"reference_{exc.kind}" if exc.kind != "raised" else "reference_error",
            exc.message,
            file=exc.file,
            line=exc.line,
            stderr=exc.stderr,
        )
    result.durations["reference"] = time.perf_counter() - t0

    phase("compare")
    t0 = time.perf_counter()
    if set(op_out) != set(ref_out):
        return fail(
            "failed", "output_names", f"the op returned outputs {sorted(op_out)}, the reference {sorted(ref_out)}"
        )
    eps = sensitivity_eps(spec)
    # each extra reference run happens at most once per case, and only if some output needs it
    sensitivities = functools.cache(lambda: _sensitivity(ctx, spec, ref_inputs, ref_out, eps))
    magnitudes = functools.cache(lambda: _magnitude(ctx, ref_inputs))

    for name in sorted(ref_out):
        ref = ref_out[name]
        out = op_out[name]
        ref_float = ref.dtype.kind == "f" or ref.dtype.name == "bfloat16"
        expected = op.output_dtype or (spec.dtype if ref_float else dt.dtype_name(ref.dtype))
        got = _dtype_name(out.dtype)
        atol, rtol = resolve_tolerance(op, ctx.validation, expected)
        result.tolerance = (atol, rtol)
        if got != expected:
            cmp = Comparison(
                name,
                False,
                "dtype_mismatch",
                got,
                tuple(out.shape),
                atol,
                rtol,
                detail=f"output {name!r} is {got}, expected {expected}"
                + (" (the case dtype)" if not op.output_dtype else " (output_dtype)"),
            )
        else:
            cmp = compare_output(
                name,
                out,
                np.asarray(ref, dtype=np.float64) if ref_float else ref,
                expected,
                atol,
                rtol,
                check_nan=ctx.validation.check_nan,
                check_inf=ctx.validation.check_inf,
                sensitivity=lambda n=name: sensitivities().get(n),
                eps=eps,
                terms=reduction_terms(spec),
                magnitude=lambda n=name: magnitudes().get(n),
                keep_mask=True,
                calibration=ctx.calibration,
            )
            if not cmp.passed:
                result.features.setdefault("outputs", {})[name] = output_features(cmp, inputs.logical, op)
        result.comparisons.append(cmp)
    if op.invariants:
        first = op.inputs[0].name if op.inputs else None
        for name in sorted(ref_out):
            atol, rtol = result.tolerance or (0.0, 0.0)
            result.violations += check_invariants(
                op.invariants, op_out[name], ref_out[name], inputs.logical[first].shape if first else None, atol, rtol
            )
    result.durations["compare"] = time.perf_counter() - t0
    result.durations["case"] = time.perf_counter() - started
    bad = [c for c in result.comparisons if not c.passed]
    if bad:
        worst = max(bad, key=lambda c: (c.kind in ("shape_mismatch", "dtype_mismatch"), c.max_ratio))
        kinds = [c.kind for c in bad]
        kind = next(
            (
                k
                for k in ("shape_mismatch", "dtype_mismatch", "unexpected_nan", "unexpected_inf", "missing_nan")
                if k in kinds
            ),
            "mismatch",
        )
        return fail("failed", kind, worst.summary())
    if result.violations:
        v = result.violations[0]
        return fail("failed", "invariant", f"invariant {v.invariant} violated: {v.message}")
    return result


def _dtype_name(dtype: np.dtype) -> str:
    try:
        return dt.dtype_name(dtype)
    except KeyError:
        return str(dtype)


def _sensitivity(
    ctx: CaseContext, spec: CaseSpec, ref_inputs: dict[str, np.ndarray], ref_out: dict[str, np.ndarray], eps: float
) -> dict[str, np.ndarray | None]:
    """Largest change of each reference output when float inputs move by relative amounts up to eps,
    or when their subnormal values are flushed to zero (FTZ/DAZ, which GPU fast paths and tensor cores
    may do: a correct kernel can differ that much where a subnormal meets a huge factor)."""
    worst: dict[str, np.ndarray | None] = {}
    variants = [_perturbed(spec, ref_inputs, eps, j) for j in range(SENSITIVITY_RUNS)]
    flushed = _flushed(ctx.op, spec, ref_inputs)
    if flushed is not None:
        variants.append(flushed)
    for perturbed in variants:
        try:
            out = ctx.ref_runner.call(perturbed, dict(ctx.op.kwargs))
        except CallError:
            return {}
        for name, ref in ref_out.items():
            got = out.get(name)
            if got is None or got.shape != ref.shape:
                worst[name] = None
                continue
            with np.errstate(invalid="ignore", over="ignore"):
                delta = np.abs(got.astype(np.float64) - ref.astype(np.float64))
            delta = np.where(np.isnan(delta), np.where(np.isnan(got) == np.isnan(ref), 0.0, np.inf), delta)
            prev = worst.get(name)
            worst[name] = delta if prev is None else np.maximum(prev, delta)
    return {name: _row_floor(v) if v is not None else None for name, v in worst.items()}


def _magnitude(ctx: CaseContext, ref_inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference on the float inputs' absolute values: for a sum of products, the sum of the terms'
    magnitudes, which bounds every partial sum a correct kernel can form in any order."""
    absolute = {k: np.abs(v) if v.dtype == np.float64 else v for k, v in ref_inputs.items()}
    try:
        with np.errstate(all="ignore"):
            return ctx.ref_runner.call(absolute, dict(ctx.op.kwargs))
    except CallError:
        return {}


def _perturbed(spec: CaseSpec, ref_inputs: dict[str, np.ndarray], eps: float, run: int) -> dict[str, np.ndarray]:
    out = {}
    for name, arr in ref_inputs.items():
        if arr.dtype == np.float64 and arr.size:
            u = 2.0 * Stream("sensitivity", spec.op, spec.seed, name, run).uniform(arr.size) - 1.0
            with np.errstate(invalid="ignore", over="ignore"):
                out[name] = arr * (1.0 + eps * u.reshape(arr.shape))
        else:
            out[name] = arr
    return out


def _flushed(op: OpConfig, spec: CaseSpec, ref_inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The reference inputs with values subnormal in their own dtype set to zero; None if there are none."""
    dtypes = {i.name: i.dtype or spec.dtype for i in op.inputs}
    out, any_flushed = {}, False
    for name, arr in ref_inputs.items():
        info = dt.FLOAT_INFO.get(dtypes.get(name, spec.dtype))
        if arr.dtype == np.float64 and arr.size and info is not None:
            sub = (arr != 0) & (np.abs(arr) < info.tiny)
            if sub.any():
                any_flushed = True
                out[name] = np.where(sub, 0.0, arr)
                continue
        out[name] = arr
    return out if any_flushed else None


def _row_floor(sens: np.ndarray) -> np.ndarray:
    """Raise each element's sensitivity to the 90th percentile of its row (last axis).

    A random perturbation can leave one element of a row almost untouched by chance while a correct
    kernel's error there is common to the whole row (the rounding of a row's mean or max). The row's
    typical sensitivity is the better estimate; the percentile keeps one unstable element from
    widening its neighbours.
    """
    if sens.ndim == 0 or sens.size == 0:
        return sens
    finite = np.where(np.isfinite(sens), sens, np.nan)
    rows = finite.reshape(-1, sens.shape[-1])
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            floor = np.nanpercentile(rows, 90, axis=1)
    floor = np.where(np.isnan(floor), 0.0, floor)
    return np.maximum(sens, np.broadcast_to(floor[:, None], rows.shape).reshape(sens.shape))
