"""One case, start to finish, in this process: inputs, op, reference, verdict.

This is the unit every face shares: worker processes call it for the CLI and the server, the Python
API calls it in the user's own process. Wrong answers (``failed``) and calls that gave no answer
(``error``) are scored apart; neither is ever ``passed``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..cases.generate import CaseInputs, generate_inputs, value_domain, with_layout
from ..cases.plan import CaseSpec
from ..cases.rng import Stream
from ..config.model import OpConfig, ValidationConfig, resolve_bound
from ..oracle.compare import CaseFacts, Comparison, Working, compare_output
from ..oracle.features import input_features, neighbourhood, output_features
from ..oracle.invariants import check_invariants
from ..oracle.outcome import CaseResult
from ..oracle.tier import TIERABLE_KINDS, edge_record, explained, overflow_threshold, tame
from . import finite_diff, triton_interp
from .grads import Upstream
from .runners import CallableRunner, CallError, Runner, promote

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
#: Working-precision evaluations at nearby points (beyond the plain one), each judged against the float64
#: reference at its own point: far enough (relative 2**-12) that every intermediate rounds differently.
WORKING_RUNS = 3
WORKING_EPS = 2.0**-12
#: How far an element's measured sensitivity may be raised towards its row's typical one (a factor of its own).
ROW_POOL_FACTOR = 4.0


@dataclass
class CaseContext:
    """What running cases of one op needs; built once per op per worker."""

    root: Path
    op: OpConfig
    validation: ValidationConfig
    op_runner: Runner
    ref_runner: Runner
    calibration: bool = False  # also measure the error figures calibration needs (a few more passes)
    range_checks: bool = True  # the extra reference evaluations that decide out of range (off: benchmark #10)
    # patch Triton's CPU interpreter for bf16 and libdevice (run/triton_interp.py): gpuemu's own workers only
    triton_patch: bool = False


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
    *,
    tiering: bool = True,
) -> CaseResult:
    """Run one case: the op on the case's inputs, the reference on the same values in float64, compare.

    A wrong answer is then tiered (``oracle.tier``): an edge finding is status ``edge`` (``failed`` with tier
    ``edge`` when the op is strict), anything else a bug. ``tiering`` is off for the tier case itself."""
    op = ctx.op
    started = time.perf_counter()
    inputs: CaseInputs = with_layout(snapshot, spec.layout) if snapshot is not None else generate_inputs(op, spec)
    result = CaseResult(op.name, spec.seed, spec, "passed", from_snapshot=snapshot is not None)
    pristine = _buffers(inputs.views, spec.layout)
    result.durations["generate"] = time.perf_counter() - started  # inputs, layout and the pristine copy

    def fail(status: str, kind: str, message: str, **extra: Any) -> CaseResult:
        result.status, result.kind, result.message = status, kind, message
        result.durations.setdefault("case", time.perf_counter() - started)  # a failed case costs time too
        for k, v in extra.items():
            setattr(result, k, v)
        # contiguous inputs are the logical arrays themselves, which the op may have written: keep the copy
        result.snapshot = pristine if spec.layout == "contiguous" else inputs.logical
        return result

    def call_failed(who: str, exc: CallError) -> CaseResult:  # "op_timeout", "reference_error", ...
        kind = f"{who}_{exc.kind}" if exc.kind != "raised" else f"{who}_error"
        return fail("error", kind, exc.message, file=exc.file, line=exc.line, stderr=exc.stderr)

    upstream: Upstream | None = None
    if op.grad:  # backward validation: one draw of upstream gradients per case, shared by op and reference
        upstream = Upstream(op.name, spec.seed, op.outputs)
        for runner in (ctx.op_runner, ctx.ref_runner):
            if hasattr(runner, "upstream"):
                runner.upstream = upstream
    # an in-place input (``inplace``): the reference reads its values from before the op wrote them
    unwritten = {n: np.array(inputs.logical[n], copy=True) for n in op.inplace if n in inputs.logical}
    phase("op")
    before = _interp_counts(ctx)
    t0 = time.perf_counter()
    try:
        op_out = ctx.op_runner.call(inputs.views, dict(op.kwargs))
    except CallError as exc:
        return call_failed("op", exc)
    result.durations["op"] = time.perf_counter() - t0
    if before is not None and (ran := _interp_ran(before)) is not None:
        # Triton kernels the op ran in the interpreter, their programs and operations: what the case cost there
        result.features["launches"], result.features["programs"], result.features["interp_ops"] = ran
        why = triton_interp.bf16_ready() if _bf16_case(op, spec) else None
        if why is not None:
            return fail(
                "error",
                "bf16_not_judged",
                f"not judged: Triton's CPU interpreter cannot compute bfloat16 here ({why}); the op's other dtypes "
                "are judged as usual",
            )
    if op.grad:
        result.features["upstream"] = dict(upstream.kinds)  # what each output's upstream gradient was drawn from
    # a numpy reference without reference_grad: the op's gradients are judged along directions (finite_diff)
    op_grads = finite_diff.grad_outputs(op_out, op.grad) if op.grad_by_differences else {}

    mutated = [
        n
        for n, v in inputs.views.items()
        if n not in unwritten and not _same_bytes(_memory(v, spec.layout), pristine[n])
    ]
    if mutated:
        return fail(
            "failed", "input_mutation", f"the op wrote into its input(s) {', '.join(mutated)}: inputs must be read-only"
        )
    clash = sorted(set(unwritten) & set(op_out))
    if clash:
        return fail(
            "failed",
            "output_names",
            f"the op returns an output named {clash[0]!r}, the name of the input it writes in place (inplace)",
        )
    for n in unwritten:  # the written input is an output of its name
        op_out[n] = np.array(inputs.views[n], copy=True)

    phase("reference")
    ref_inputs = {n: promote(unwritten.get(n, a)) for n, a in inputs.logical.items()}
    t0 = time.perf_counter()
    try:
        ref_out, ref_overflowed = call_flagged(ctx.ref_runner, ref_inputs, dict(op.kwargs))
    except CallError as exc:
        return call_failed("reference", exc)
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
    workings = functools.cache(
        lambda: _working(ctx, spec, inputs.logical, ref_inputs, ref_out, ref_overflowed, upstream)
    )
    nears = functools.cache(lambda: _near_range(ctx, spec, inputs.logical, ref_inputs))
    facts, result.features["input_max"], finite = case_facts(inputs.logical, op)
    result.features.update(input_features(inputs.logical, op.output_dtype or spec.dtype, finite))
    # Inputs so large that a product of two overflows the accumulation precision: what a correct kernel does
    # there is decided by the tier case (oracle.tier), the same whatever the reference is written in, not by
    # the reference's own working-precision evaluations (rules 2 and 4 of docs/verdicts.md), which only a
    # dtype-generic reference makes possible.
    edge_inputs = tiering and result.features["input_max"] >= overflow_threshold(
        spec.dtype, max(spec.dims.values(), default=1)
    )
    range_checks = ctx.range_checks and not edge_inputs

    for name in sorted(ref_out):
        ref = ref_out[name]
        out = op_out[name]
        ref_float = ref.dtype.kind == "f" or ref.dtype.name == "bfloat16"
        expected = op.output_dtype or (spec.dtype if ref_float else dt.dtype_name(ref.dtype))
        got = _dtype_name(out.dtype)
        bound = resolve_bound(op, ctx.validation, expected)
        if ref_float:
            bound = bound.scaled(expected, ref)
        atol, rtol = bound.atol, bound.rtol
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
                detail=f"output {name!r} is {got}, expected {expected}" + _expected_why(op, spec, expected, ref_float),
            )
        else:
            cmp = compare_output(
                name,
                out,
                np.asarray(ref, dtype=np.float64) if ref_float else ref,
                expected,
                atol,
                rtol,
                ulp=bound.ulp,
                check_nan=ctx.validation.check_nan,
                check_inf=ctx.validation.check_inf,
                sensitivity=lambda n=name: sensitivities().get(n),
                eps=eps,
                terms=reduction_terms(spec),
                magnitude=lambda n=name: magnitudes().get(n),
                working=(lambda n=name: workings().get(n)) if range_checks else None,
                near=(lambda n=name: nears().get(n)) if range_checks else None,
                facts=facts,
                keep_mask=True,
                calibration=ctx.calibration,
            )
            if not cmp.passed:
                feats = output_features(cmp, inputs.logical, op)
                window = neighbourhood(cmp, out, ref)
                if window is not None:
                    feats["window"] = window
                result.features.setdefault("outputs", {})[name] = feats
        result.comparisons.append(cmp)
    if op_grads:
        assert upstream is not None
        kwargs = dict(op.kwargs)
        result.comparisons += finite_diff.judge(
            op.name,
            spec.seed,
            op.grad,
            ref_inputs,
            ref_out,
            op_grads,
            upstream,
            lambda moved: ctx.ref_runner.call(moved, kwargs),
            lambda name: _grad_bound(ctx, op, spec, name),
        )
    if op.invariants:
        first = op.inputs[0].name if op.inputs else None
        excused = {c.output: c.excused for c in result.comparisons}
        bounds = {c.output: c.bound for c in result.comparisons}
        for name in sorted(ref_out):
            atol, rtol = result.tolerance or (0.0, 0.0)
            result.violations += check_invariants(
                op.invariants,
                op_out[name],
                ref_out[name],
                inputs.logical[first].shape if first else None,
                atol,
                rtol,
                out_dtype=_dtype_name(op_out[name].dtype),
                excused=excused.get(name),
                bound=bounds.get(name),
            )
    result.durations["compare"] = time.perf_counter() - t0
    result.durations["case"] = time.perf_counter() - started
    bad = [c for c in result.comparisons if not c.passed]
    if bad:
        fail("failed", *_failure_of(bad))
        refs = [ref_out[c.output][c.mask] if c.mask is not None else None for c in bad]
        return _tiered(ctx, spec, result, None if any(r is None for r in refs) else refs, tiering)
    if result.violations:
        v = result.violations[0]
        fail("failed", "invariant", f"invariant {v.invariant} violated: {v.message}")
        return _tiered(ctx, spec, result, None, tiering)
    return result


def _grad_bound(ctx: CaseContext, op: OpConfig, spec: CaseSpec, name: str) -> tuple[float, float, str]:
    """The tolerance of input ``name``'s gradient (atol, rtol, dtype): its input's dtype's."""
    dtype = next((i.dtype for i in op.inputs if i.name == name and i.dtype), None) or spec.dtype
    bound = resolve_bound(op, ctx.validation, dtype)
    return bound.atol, bound.rtol, dtype


def _interp_counts(ctx: CaseContext) -> tuple[int, int, int] | None:
    """The interpreter's counts before the op runs (:func:`~.triton_interp.counts`; 0s while triton is not
    imported: :func:`~.triton_interp.watch` counts from its import on, mid-case too); None: not patching."""
    if not ctx.triton_patch:
        return None
    if "triton" in sys.modules and triton_interp.interpreting():
        triton_interp.install()  # counts launches even where it cannot patch bf16 (bf16_ready then says why)
    return triton_interp.counts()


def _interp_ran(before: tuple[int, int, int]) -> tuple[int, int, int] | None:
    """What the op ran in the interpreter since ``before``: launches, programs, operations (None: no launch)."""
    if not triton_interp.interpreting():
        return None
    ran = tuple(after - was for after, was in zip(triton_interp.counts(), before, strict=True))
    return ran if ran[0] else None  # type: ignore[return-value]


def _bf16_case(op: OpConfig, spec: CaseSpec) -> bool:
    """Whether the case hands the op bfloat16 values (its dtype, or an input declared bf16)."""
    return spec.dtype == "bfloat16" or any(i.dtype == "bfloat16" for i in op.inputs)


def _failure_of(bad: list[Comparison]) -> tuple[str, str]:
    """The kind and message of a case whose outputs ``bad`` failed: the gravest kind, the worst output."""
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
    return kind, worst.summary()


def _tiered(
    ctx: CaseContext, spec: CaseSpec, result: CaseResult, failing_refs: list[np.ndarray] | None, tiering: bool
) -> CaseResult:
    """Tier a wrong answer (see ``oracle.tier``): run the tamed case, and mark an edge finding as such."""
    result.tier = "bug"
    if not tiering or result.kind not in TIERABLE_KINDS or result.snapshot is None:
        return result
    domains = {i.name: value_domain(ctx.op, i, spec.dims) for i in ctx.op.inputs}

    def fit(name: str, values: np.ndarray) -> np.ndarray:
        d = domains.get(name)
        if d is None:
            return values
        if d.sign == "positive":
            values = np.abs(values)
        elif d.sign == "negative":
            values = -np.abs(values)
        return np.clip(values, *d.range) if d.range is not None else values

    exact = any(c.ulp == 0 and c.atol == 0 and c.rtol == 0 for c in result.comparisons)
    tamed = tame(result.snapshot, spec.dtype, max(spec.dims.values(), default=1), fit, propagation=not exact)
    if tamed is None:
        return result
    started = time.perf_counter()
    again = run_case(ctx, spec, tamed.inputs, tiering=False)
    result.durations["tier"] = time.perf_counter() - started
    result.features["tier_case"] = {"status": again.status, "kind": again.kind, "replaced": tamed.big + tamed.nonfinite}
    if again.status == "failed":
        _mark_edge_only(result, again)
    if again.status != "passed" or not explained(tamed, failing_refs) or not _judged_where_failed(result, again):
        return result
    worst = result.worst()
    result.tier = "edge"
    result.edge = edge_record(tamed, spec.dtype, worst.special_text() if worst is not None else "")
    if not ctx.op.strict:
        result.status = "edge"
    return result


def _mark_edge_only(result: CaseResult, again: CaseResult) -> None:
    """The case stays a bug (its tier case fails too); outputs that pass in the tier case fail only at the edge
    of the range (a forward output whose sum of squares overflows, beside a wrong gradient): the case is
    shown, kind and message, by the outputs that fail inside the range."""
    still = {c.output for c in again.comparisons if not c.passed}
    bad = [c for c in result.comparisons if not c.passed]
    inside = [c for c in bad if c.output in still]
    if not inside or len(inside) == len(bad):
        return
    for c in bad:
        c.edge_only = c.output not in still
    result.kind, result.message = _failure_of(inside)


def run_case_guarded(
    ctx: CaseContext,
    spec: CaseSpec,
    snapshot: dict[str, np.ndarray] | None = None,
    phase: Callable[[str], None] = lambda _p: None,
    *,
    memory_note: Callable[[], str] | None = None,
    keep_inputs: bool = False,
) -> CaseResult:
    """:func:`run_case`, with what goes wrong in gpuemu itself scored as an error case instead of raised:
    running out of memory (``memory_note()`` says which limit) and an internal error (with its traceback).
    ``keep_inputs``: such a case keeps ``snapshot`` as its inputs, as every other case that did not pass does."""
    kept = snapshot if keep_inputs else None
    try:
        return run_case(ctx, spec, snapshot, phase)
    except MemoryError:
        why = "the case ran out of memory" + (f" ({memory_note()})" if memory_note is not None else "")
        return CaseResult(spec.op, spec.seed, spec, "error", "out_of_memory", why, snapshot=kept)
    except Exception as exc:  # a bug in the engine itself: report it, keep serving
        message = f"gpuemu internal error: {exc}\n{traceback.format_exc()}"
        return CaseResult(spec.op, spec.seed, spec, "error", "internal_error", message, snapshot=kept)


def _judged_where_failed(result: CaseResult, again: CaseResult) -> bool:
    """Whether the tier case judged every element that failed: a tier case "passes" vacuously where its own
    elements are out of range or the reference's NaN (a reference that returns NaN everywhere), which is no
    evidence that the failure was the edge's doing."""
    for c in result.comparisons:
        if c.passed:
            continue
        t = next((x for x in again.comparisons if x.output == c.output), None)
        if t is None:
            return False
        if t.excused is None:
            continue  # nothing excused there: every element judged
        if c.mask is None or c.mask.shape != t.excused.shape:
            if t.out_of_range or t.suspect_nan:
                return False
            continue
        if bool((t.excused & c.mask).any()):
            return False
    return True


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
    variants += [_ramped(spec, ref_inputs, parity) for parity in (0, 1)]
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


def _ramped(spec: CaseSpec, ref_inputs: dict[str, np.ndarray], parity: int) -> dict[str, np.ndarray]:
    """Inputs moved in one direction by a ramp, ``2 u_acc * (i + j + ...)`` (relative), on every other element.

    A sequential sum of n terms in working precision (one thread walking a row, or numpy reducing a
    strided axis) is the exact sum of its terms perturbed by up to ``(n - 1) u``, all in one direction
    when the terms are alike (constant rows): the result drifts by up to ``n u / 2``, not the
    ``sqrt(n) u`` of random rounding, and the drift is shared by every output that uses that sum (x -
    mean). An input perturbation moves an element's own term as well as the sum, so a plain ramp would
    leave the elements at the middle of the ramp unmoved; ramping only the elements of one parity (of
    the index sum, so along every axis at once) moves the others by the whole drift of the shared sum,
    and the run of the other parity covers the rest.
    """
    u = dt.accumulation_info(spec.dtype).unit_roundoff
    out = {}
    for name, arr in ref_inputs.items():
        if arr.dtype == np.float64 and arr.size and arr.ndim:
            pos = sum(
                np.arange(n, dtype=np.float64).reshape([-1 if k == ax else 1 for k in range(arr.ndim)])
                for ax, n in enumerate(arr.shape)
            )
            ramp = np.where(pos % 2 == parity, 2.0 * u * pos, 0.0)
            with np.errstate(invalid="ignore", over="ignore"):
                out[name] = arr * (1.0 + ramp)
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
    """Raise each element's sensitivity towards the 90th percentile of its row (last axis), by at most
    ``ROW_POOL_FACTOR`` times its own.

    A random perturbation can leave one element of a row less moved than the rounding a correct kernel
    shares across the row (a row's mean or max), so a little pooling removes noise; the bound keeps a
    small, well-conditioned element from borrowing the slack of a huge, ill-conditioned neighbour
    (an element whose own sensitivity is 0 borrows nothing).
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
    pooled = np.broadcast_to(floor[:, None], rows.shape).reshape(sens.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        capped = np.minimum(pooled, ROW_POOL_FACTOR * np.where(np.isfinite(sens), sens, 0.0))
    return np.where(np.isfinite(sens), np.maximum(sens, capped), sens)


def call_flagged(
    runner: Runner, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]
) -> tuple[dict[str, np.ndarray], bool]:
    """Call ``runner`` and tell whether its evaluation overflowed (numpy's overflow flag was raised).

    The flag tells an overflow apart from an honest infinity (log of 0). References often silence
    floating-point warnings (``np.errstate(all="ignore")``, ``np.seterr``); while this call runs, those
    keep every other setting but leave the overflow flag reported to us.
    """
    with overflow_watch() as flagged:
        out = runner.call(inputs, kwargs)
    return out, bool(flagged)


_WATCH = threading.local()


@contextlib.contextmanager
def overflow_watch() -> Iterator[list[str]]:
    """Record numpy overflows in this thread, even inside ``np.errstate``/``np.seterr`` calls that ignore them."""
    flagged: list[str] = []

    def note(kind: str, _flag: int) -> None:
        flagged.append(kind)

    outer = getattr(_WATCH, "note", None)
    _WATCH.note = note
    saved = np.errstate, np.seterr
    np.errstate, np.seterr = _WatchedErrstate, _watched_seterr  # type: ignore[misc,assignment]
    try:
        with _ORIGINAL_ERRSTATE(over="call", call=note):
            yield flagged
    finally:
        np.errstate, np.seterr = saved  # type: ignore[misc]
        _WATCH.note = outer


_ORIGINAL_ERRSTATE = np.errstate
_ORIGINAL_SETERR = np.seterr


class _WatchedErrstate(_ORIGINAL_ERRSTATE):  # type: ignore[misc,valid-type]
    """``np.errstate`` while an overflow watch runs: any setting, but overflows still reach the watch."""

    def __init__(self, **kwargs: Any) -> None:
        note = getattr(_WATCH, "note", None)
        if note is not None:
            kwargs.update(over="call", call=note)
        super().__init__(**kwargs)


def _watched_seterr(**kwargs: Any) -> dict[str, str]:
    note = getattr(_WATCH, "note", None)
    if note is not None:
        kwargs["over"] = "call"
    return _ORIGINAL_SETERR(**kwargs)


def case_facts(logical: dict[str, np.ndarray], op: OpConfig) -> tuple[CaseFacts, float, dict[str, np.ndarray | None]]:
    """Whether the case's float inputs hold NaN and whether they are all finite, their largest finite
    magnitude (a feature diagnosis reads: overflow bugs show above some magnitude, whatever the distribution),
    and, for each float input that is wholly finite, its row maxima (last axis; ``input_features`` reads them
    instead of a pass of its own)."""
    has_nan, finite, biggest = False, True, 0.0
    whole: dict[str, np.ndarray | None] = {}
    for name, arr in logical.items():
        if (arr.dtype.kind == "f" or arr.dtype.name == "bfloat16") and arr.size:
            extremes = _finite_extremes(arr)
            if extremes is not None:  # the common case: two reductions, no temporaries
                lo, hi, rows = extremes
                biggest = max(biggest, lo, hi)
                whole[name] = rows
                continue
            a = np.abs(dt.widened(arr))
            fin = np.isfinite(a)
            has_nan = has_nan or bool(np.isnan(a).any())
            finite = finite and bool(fin.all())
            if fin.any():
                biggest = max(biggest, float(a[fin].max()))
    return CaseFacts(inputs_nan=has_nan, inputs_finite=finite, nan_contract=op.nan_contract), biggest, whole


def _finite_extremes(arr: np.ndarray) -> tuple[float, float, np.ndarray | None] | None:
    """``|min|`` and ``|max|`` of a float array of at most 64 bits when every element is finite (else None),
    and its row maxima (None for a 0-d array).

    A NaN propagates through both reductions and an infinity is one of them, so two finite extremes mean a
    finite array, and the larger of their magnitudes is its largest (exact: widening to float64 is). The
    maximum is taken over the row maxima, which diagnosis reads too: one pass serves both."""
    if arr.dtype.itemsize > 8:
        return None
    a = arr if arr.dtype.itemsize >= 4 else np.asarray(arr, dtype=np.float32)  # exact, and numpy reduces it faster
    rows = a.reshape(-1, a.shape[-1]).max(axis=1) if a.ndim else None
    lo, hi = abs(float(a.min())), abs(float(rows.max() if rows is not None else a.max()))
    return (lo, hi, rows) if math.isfinite(lo) and math.isfinite(hi) else None


def _working(
    ctx: CaseContext,
    spec: CaseSpec,
    logical: dict[str, np.ndarray],
    ref_inputs: dict[str, np.ndarray],
    ref_out: dict[str, np.ndarray],
    ref_overflowed: bool,
    upstream: Upstream | None = None,
) -> dict[str, Working]:
    """The reference evaluated in the working precision, per output (empty when it cannot be).

    For 16- and 32-bit cases the reference runs on the inputs in float32, the precision a correct
    kernel computes in: where that evaluation overflows, so must a straightforward correct kernel. It
    also runs at ``WORKING_RUNS`` nearby points (float inputs and upstream gradients moved by relative
    ``WORKING_EPS``), in float32 and in float64, and each element's largest rounding error over all of
    them (float32 against float64 at the same point) is its ``spread``: one evaluation rounds a shared
    intermediate (a row's mean, a gradient's row sums) one way, and its error lands on the element where
    that way happens to cancel, not where another correct ordering would put it. Where the row shares
    intermediates (``_row_coupled``), each element gets its row's largest.

    For float64 cases the reference is itself the working evaluation; where it overflowed, it is
    compared with an evaluation in long double (wider exponent range) when the reference runs in process.
    """
    if spec.dtype != "float64":
        narrow = {
            n
            for n, a in logical.items()
            if (a.dtype.kind == "f" and a.dtype.itemsize <= 4) or a.dtype.name == "bfloat16"
        }
        # from the reference's inputs (exact in float64): an in-place op has written over its logical arrays
        work_inputs = {n: dt.widened(a, np.float32) if n in narrow else a for n, a in ref_inputs.items()}
        try:
            with np.errstate(invalid="ignore", divide="ignore", under="ignore"):
                out, overflowed = call_flagged(ctx.ref_runner, work_inputs, dict(ctx.op.kwargs))
        except CallError:
            return {}
        found = {n: Working(_as_float64(v), overflowed) for n, v in out.items() if n in ref_out}
        spread = {n: _distance(w.values, ref_out[n]) for n, w in found.items()}
        for run in range(WORKING_RUNS):
            # a nearby point, exact in float32: the reference there in float32 and in float64, whose difference is
            # the rounding alone (the distance between the points is sensitivity, which the kernel is not owed)
            moved = _perturbed(spec, {n: ref_inputs[n] for n in narrow}, WORKING_EPS, run)
            moved32 = {n: dt.widened(a, np.float32) for n, a in moved.items()}
            moved64 = {**ref_inputs, **{n: a.astype(np.float64) for n, a in moved32.items()}}
            jitter = upstream.jittered(WORKING_EPS, run) if upstream is not None else contextlib.nullcontext()
            try:
                with jitter, np.errstate(all="ignore"):
                    low = ctx.ref_runner.call({**work_inputs, **moved32}, dict(ctx.op.kwargs))
                    high = ctx.ref_runner.call(moved64, dict(ctx.op.kwargs))
            except CallError:
                break
            for n, d in spread.items():
                if d is not None and n in high:
                    spread[n] = np.fmax(d, _distance(low.get(n), high[n]))
        for n in _row_coupled(ctx, ref_inputs, {n: ref_out[n] for n, d in spread.items() if d is not None}):
            d = spread[n]
            assert d is not None
            with np.errstate(invalid="ignore"):  # a row's shared intermediates round onto any of its elements
                spread[n] = np.fmax(d, np.nanmax(np.where(np.isnan(d), -np.inf, d), axis=-1, keepdims=True))
        return {n: Working(w.values, w.overflowed, spread=spread[n]) for n, w in found.items()}
    if not ref_overflowed:
        return {}
    wider: dict[str, np.ndarray] = {}
    if (
        type(ctx.ref_runner) is CallableRunner
        and ctx.op.reference_framework == "numpy"
        and np.finfo(np.longdouble).maxexp > np.finfo(np.float64).maxexp
    ):
        long_inputs = {n: a.astype(np.longdouble) if a.dtype == np.float64 else a for n, a in ref_inputs.items()}
        try:
            with np.errstate(all="ignore"):
                wider = ctx.ref_runner.call(long_inputs, dict(ctx.op.kwargs))
        except CallError:
            wider = {}
    return {
        n: Working(np.asarray(v, dtype=np.float64), True, wider.get(n) if _float_like(wider.get(n)) else None)
        for n, v in ref_out.items()
    }


def _row_coupled(ctx: CaseContext, ref_inputs: dict[str, np.ndarray], ref_out: dict[str, np.ndarray]) -> set[str]:
    """The outputs whose rows (last axis) share intermediates: moving one input element (the last of each
    float input) moves two or more elements of one row (a norm's mean, a softmax's sum, a gradient's row
    sums), not one (an elementwise op; a row reduction whose outputs each read their own row). Bitwise: the
    float64 reference of an element that does not read the moved values is the same computation on the
    same values."""
    wide = {n: o for n, o in ref_out.items() if o.ndim and o.shape[-1] > 1 and _float_like(o)}
    if not wide:
        return set()
    moved = {}
    for name, arr in ref_inputs.items():
        if arr.dtype == np.float64 and arr.size:
            arr = arr.copy()
            flat = arr.reshape(-1)
            with np.errstate(all="ignore"):
                flat[-1] = flat[-1] * (1.0 + 2.0**-10) if flat[-1] != 0 else 2.0**-10
        moved[name] = arr
    try:
        with np.errstate(all="ignore"):
            out = ctx.ref_runner.call(moved, dict(ctx.op.kwargs))
    except CallError:
        return set()
    coupled = set()
    for n, ref in wide.items():
        got = out.get(n)
        if got is None or got.shape != ref.shape:
            continue
        a, b = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        changed = (a != b) & ~(np.isnan(a) & np.isnan(b))
        if changed.reshape(-1, ref.shape[-1]).sum(axis=1).max() >= 2:
            coupled.add(n)
    return coupled


def _distance(values: np.ndarray | None, ref: np.ndarray) -> np.ndarray | None:
    """|values - ref| per element in float64, NaN where either is not finite; None when the shapes differ."""
    if values is None or np.shape(values) != np.shape(ref):
        return None
    v, r = _as_float64(np.asarray(values)), _as_float64(np.asarray(ref))
    if v.dtype.kind != "f" or r.dtype.kind != "f":
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(v - r)
    return np.where(np.isfinite(d), d, np.nan)


def _near_range(
    ctx: CaseContext, spec: CaseSpec, logical: dict[str, np.ndarray], ref_inputs: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The reference in the working precision on the float inputs doubled (those that stay finite doubled).

    A correct kernel's intermediates differ from the reference's by small factors: a fused multiply-add
    in the reference's BLAS keeps ``a * b + c`` finite where a kernel's separate product ``a * b``
    overflows, a different summation order reaches a larger partial sum. Where the reference overflows
    once every input is doubled, the element is within that margin of the range. An input already at
    the top of its dtype stays as it is: it is no intermediate, and a correct kernel handles it.
    """
    work = np.float64 if spec.dtype == "float64" else np.float32
    doubled = {}
    for n, a in logical.items():
        if (a.dtype.kind == "f" and a.dtype.itemsize <= 8) or a.dtype.name == "bfloat16":
            x = np.asarray(a, dtype=work)
            with np.errstate(over="ignore", invalid="ignore"):
                x2 = x * work(2)
            doubled[n] = np.where(np.isfinite(x2) | ~np.isfinite(x), x2, x)
        else:
            doubled[n] = ref_inputs[n]
    try:
        with np.errstate(all="ignore"):
            return ctx.ref_runner.call(doubled, dict(ctx.op.kwargs))
    except CallError:
        return {}


def _float_like(a: np.ndarray | None) -> bool:
    return a is not None and a.dtype.kind == "f"


def _as_float64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64) if (a.dtype.kind == "f" or a.dtype.name == "bfloat16") else a


def _expected_why(op: OpConfig, spec: CaseSpec, expected: str, ref_float: bool) -> str:
    """Why ``expected`` is the expected dtype, so a dtype mismatch names the setting to change."""
    if op.output_dtype:
        return " (output_dtype)"
    if ref_float:
        return " (the case dtype; set output_dtype if the op returns another)"
    return (
        f' (the reference returned {expected} for a {spec.dtype} case: set output_dtype = "{spec.dtype}" if the'
        " output is floating point, or make the reference return floats)"
    )
