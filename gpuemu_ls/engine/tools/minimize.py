"""Shrink a failing case to the smallest one that fails the same way (Hypothesis-style, greedy).

Every trial re-runs the op under test *and* the reference on the candidate inputs in a supervised
worker (so a crash or a hang minimizes too); a candidate is kept only if it fails with the same
status and kind. Dims shrink first, one at a time, largest first, within the dim's range or
candidate list: the few smallest values one by one (a bug at size 1 shows at once), then a binary
search between the largest value that passed and the current one (a bug past a threshold lands on
the threshold in log2 steps); inputs are *sliced* to the new sizes rather than regenerated, so the values that
triggered the bug stay. Shared dims shrink in every input at once. Then values simplify: finite
values become zeros, ones, integers or signs (non-finite ones such as -inf masks stay until last).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..cases.generate import generate_inputs
from ..cases.plan import CaseSpec, shape_of
from ..config import dimexpr
from ..config.model import Config, OpConfig
from ..errors import UsageError
from ..oracle.outcome import CaseResult
from ..run.supervisor import Cancelled, SetupFailed, Worker, WorkerLost
from ..run.validate import _lost_case, case_timeout, replay_spec
from ..store.db import Store


@dataclass
class MinimizeResult:
    op: str
    seed: int
    original: CaseResult
    minimized: CaseResult
    minimized_inputs: dict[str, np.ndarray]
    steps: list[str] = field(default_factory=list)
    trials: int = 0
    elapsed: float = 0.0
    source: str = ""

    @property
    def shrunk(self) -> bool:
        return bool(self.steps)


SMALL_FIRST = 6  # values tried one by one before the binary search


def _dim_candidates(op: OpConfig, name: str, current: int) -> list[int]:
    """Every smaller value the dim may take, ascending (candidate lists: their smaller members)."""
    dim = op.dims[name]
    if dim.candidates is not None:
        return sorted(c for c in dim.candidates if c < current)
    return list(range(dim.min, current))


def _slice_inputs(op: OpConfig, arrays: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray] | None:
    """Inputs cut down to ``dims``; ranged inputs bounded by a shrunk dim wrap into the new range."""
    out: dict[str, np.ndarray] = {}
    for inp in op.inputs:
        arr = arrays[inp.name]
        index = tuple(slice(0, dimexpr.evaluate(d, dims)) if isinstance(d, str) else slice(None) for d in inp.shape)
        cut = np.ascontiguousarray(arr[index]) if arr.ndim else arr.copy()
        if inp.range is not None and cut.dtype.kind in "iu":
            lo, hi = (dims[b] if isinstance(b, str) else b for b in inp.range)
            if hi <= lo:
                return None
            cut = (lo + np.mod(cut.astype(np.int64) - int(lo), int(hi - lo))).astype(cut.dtype)
        out[inp.name] = cut
    return out


def _value_variants(arr: np.ndarray) -> list[tuple[str, np.ndarray]]:
    if not (arr.dtype.kind == "f" or arr.dtype.name == "bfloat16") or arr.size == 0:
        return []
    x = arr.astype(np.float64)
    finite = np.isfinite(x)
    variants = [
        ("zeros", np.where(finite, 0.0, x)),
        ("ones", np.where(finite, 1.0, x)),
        ("integers", np.where(finite, np.round(x), x)),
        ("signs", np.where(finite, np.sign(x), x)),
        ("one decimal", np.where(finite, np.round(x, 1), x)),
    ]
    if not finite.all():
        variants.append(("no special values", np.where(finite, x, 0.0)))
    out = []
    for label, v in variants:
        with np.errstate(over="ignore"):
            cast = v.astype(arr.dtype)
        if cast.tobytes() != arr.tobytes():
            out.append((label, cast))
    return out


class _Trials:
    """Runs candidate cases in one worker, replacing it when a candidate crashes or hangs."""

    def __init__(self, config: Config, op: OpConfig, cancel: threading.Event | None) -> None:
        self.config, self.op, self.cancel = config, op, cancel
        self.timeout = case_timeout(config, op)
        self.worker: Worker | None = None
        self.count = 0

    def run(self, spec: CaseSpec, inputs: dict[str, np.ndarray]) -> CaseResult:
        self.count += 1
        try:
            if self.worker is None or not self.worker.alive():
                self.worker = Worker(memory_mb=self.config.validation.memory_limit_mb, cancel=self.cancel)
                self.worker.setup(self.config.root, self.op, self.config.validation, self.timeout)
            return self.worker.run_case(spec, inputs, self.timeout)
        except WorkerLost as exc:
            if self.worker is not None:
                self.worker.kill()
            self.worker = None
            return _lost_case(self.config.root, self.op, spec, inputs, exc)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


def _spec_with(spec: CaseSpec, op: OpConfig, dims: dict[str, int]) -> CaseSpec:
    shapes = {i.name: shape_of(i.shape, dims) for i in op.inputs}
    return CaseSpec(
        spec.op,
        spec.seed,
        spec.strategy,
        spec.dtype,
        spec.layout,
        spec.distribution,
        dict(dims),
        shapes,
        dict(spec.input_distributions),
        spec.plan,
    )


def minimize(
    config: Config,
    op: OpConfig,
    seed: int,
    store: Store | None,
    *,
    max_trials: int = 400,
    cancel: threading.Event | None = None,
    on_step: Callable[[str, int], None] | None = None,
) -> MinimizeResult:
    """Minimize the failing case (op, seed); UsageError if it does not fail."""
    t0 = time.monotonic()
    spec, snapshot, source = replay_spec(config, op, seed, store)
    inputs = snapshot if snapshot is not None else generate_inputs(op, spec).logical
    trials = _Trials(config, op, cancel)
    try:
        first = trials.run(spec, inputs)
    except SetupFailed as exc:
        trials.close()
        raise UsageError(f"op {op.name!r} cannot be loaded: {exc.info.get('message')}") from None
    if first.status == "passed":
        trials.close()
        raise UsageError(f"op {op.name!r} seed {seed} passes now ({source}): nothing to minimize")
    target = (first.status, first.kind)
    best_spec, best_inputs, best = spec, inputs, first
    steps: list[str] = []

    def keeps(candidate_spec: CaseSpec, candidate_inputs: dict[str, np.ndarray]) -> CaseResult | None:
        if trials.count >= max_trials:
            return None
        r = trials.run(candidate_spec, candidate_inputs)
        return r if (r.status, r.kind) == target else None

    def attempt(name: str, value: int) -> bool:
        """Try ``name = value``; on the same failure, make it the new best."""
        nonlocal best_spec, best_inputs, best
        dims = dict(best_spec.dims, **{name: value})
        cut = _slice_inputs(op, best_inputs, dims)
        if cut is None:
            return False
        cand = _spec_with(best_spec, op, dims)
        r = keeps(cand, cut)
        if r is None:
            return False
        steps.append(f"{name}: {best_spec.dims[name]} -> {value}")
        if on_step:
            on_step(steps[-1], trials.count)
        best_spec, best_inputs, best = cand, cut, r
        return True

    def shrink(name: str) -> bool:
        """The smallest values first, then a binary search between the largest that passed and the current one."""
        current = best_spec.dims[name]
        values = _dim_candidates(op, name, current)
        passed = -1  # index into values of the largest value known not to fail the same way
        for i, value in enumerate(values[:SMALL_FIRST]):
            if attempt(name, value):
                return True
            passed = i
        lo, hi = passed, len(values)  # values[hi] stands for the current value (fails)
        shrunk = False
        while hi - lo > 1 and trials.count < max_trials:
            mid = (lo + hi) // 2
            if attempt(name, values[mid]):
                hi, shrunk = mid, True
                values = values[: mid + 1]
            else:
                lo = mid
        return shrunk

    try:
        changed = True
        while changed and trials.count < max_trials:
            changed = False
            for name in sorted(best_spec.dims, key=lambda d: -best_spec.dims[d]):
                changed |= shrink(name)
        for inp in op.inputs:
            for label, variant in _value_variants(best_inputs[inp.name]):
                cand_inputs = dict(best_inputs, **{inp.name: variant})
                r = keeps(best_spec, cand_inputs)
                if r is not None:
                    steps.append(f"{inp.name}: values -> {label}")
                    if on_step:
                        on_step(steps[-1], trials.count)
                    best_inputs, best = cand_inputs, r
                    break
    except Cancelled:
        pass
    finally:
        trials.close()
    best.snapshot = best_inputs
    return MinimizeResult(op.name, seed, first, best, best_inputs, steps, trials.count, time.monotonic() - t0, source)


def describe(result: MinimizeResult) -> dict[str, Any]:
    o, m = result.original, result.minimized
    return {
        "op": result.op,
        "seed": result.seed,
        "source": result.source,
        "trials": result.trials,
        "elapsed": round(result.elapsed, 3),
        "steps": result.steps,
        "original": {
            "shapes": {k: list(v) for k, v in o.spec.shapes.items()},
            "kind": o.kind,
            "max_abs": o.stats()["max_abs"],
            "message": (o.message or "").splitlines()[0] if o.message else "",
        },
        "minimized": {
            "shapes": {k: list(v) for k, v in m.spec.shapes.items()},
            "dims": m.spec.dims,
            "kind": m.kind,
            "max_abs": m.stats()["max_abs"],
            "message": (m.message or "").splitlines()[0] if m.message else "",
        },
    }


def store_minimized(store: Store, config: Config, result: MinimizeResult, command: str = "") -> str:
    """Keep the minimized case (with its inputs) in a ``minimize`` run, so it replays on its own."""
    from ..run.validate import config_hash

    run_id = store.begin_run(
        source="minimize",
        mode="minimize",
        seed=result.seed,
        iterations=result.trials,
        workspace=config.root,
        config_hash=config_hash(config),
        command=command,
    )
    case = result.minimized
    case.features = dict(
        case.features,
        minimized_from={k: list(v) for k, v in result.original.spec.shapes.items()},
        minimize_steps=result.steps,
    )
    store.add_cases(run_id, [case], root=config.root)
    store.finish_run(run_id, case.status)
    return run_id
