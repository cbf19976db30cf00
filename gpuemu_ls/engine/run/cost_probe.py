"""What an op costs in Triton's CPU interpreter, counted on fixed probe cases before its plan is cut.

``cost = "auto"`` reads the op's source for an ``import triton`` (config/checker.py): a first guess. An op
whose kernels come through ``importlib``, ``exec``, a plugin registry or a shim module reads as normal there,
and one that imports triton may never launch a kernel. So a run first runs each op's *probe case* (the plan's
first default-shape case with every dim at most :data:`PROBE_SIZE`), and the interpreter's own counts decide
(:func:`~.triton_interp.counts`): an op that launched a Triton kernel there is high-cost whatever its source
says, and its plan is cut by the default work budget in the units the interpreter pays, operations, programs
and launches (:class:`~gpuemu_ls.engine.cases.budget.CountModel`), measured on the probe case and on variants
of it that each halve one dim. Probe cases are measurements, like a diagnosis' confirmation cases: neither
stored nor part of the verdict (the plan's own cases are). Counts, not times: a fresh CI store and a laptop
cut the same cases.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from ..cases.budget import CountModel, count_model
from ..cases.plan import CaseSpec
from ..config.model import DimSpec, OpConfig
from ..oracle.outcome import CaseResult, OpOutcome
from .confirm import variant_spec

#: Why an op whose source does not say so is high-cost (the op's budget line names the rule that decided).
LAUNCHED = "launched a Triton kernel in its probe case"
#: The largest size a probe case gives a dim: past the small tiles (16, 32), where a tiled kernel's cost already
#: grows with the dim as it does at the plan's sizes, and cheap (a 32x32x32 matmul: ~2,000 operations, 0.1 s).
PROBE_SIZE = 32


@dataclass
class CostProbe:
    """What the interpreter counted on an op's probe cases."""

    base: CaseSpec
    outcome: OpOutcome  # the probe case's run: a setup error there is the op's
    model: CountModel | None  # None: no Triton kernel ran in the interpreter (or the probe case did not run)

    @property
    def launched(self) -> bool:
        return self.model is not None


def probes(op: OpConfig) -> bool:
    """Whether a run measures ``op``'s cost on a probe case first: its cases run in gpuemu's workers, in this
    process's language (a script op's kernels run in the script's own process), on torch tensors (what a
    Triton kernel takes: a numpy or JAX op is never probed, and a crash there is one of its own cases) and
    triton is installed."""
    if not op.runnable or op.execution_mode == "script_based" or op.framework != "pytorch":
        return False
    if op.cost == "normal" and op.cost_reason == "declared":
        return False
    return importlib.util.find_spec("triton") is not None


def probe_specs(op: OpConfig, plan: list[CaseSpec]) -> tuple[CaseSpec, list[CaseSpec]]:
    """The probe case (the plan's first default-shape case, else its first, with every dim at its default or
    :data:`PROBE_SIZE`, whichever is smaller) and one variant per dim that can change: that dim doubled
    (halved where it cannot double; the next candidate of a list)."""
    first = next((s for s in plan if s.strategy == "default"), plan[0])
    base = variant_spec(op, first, {"dims": {n: _capped(d) for n, d in op.dims.items()}})
    variants = []
    for name, dim in op.dims.items():
        other = _other_size(dim, base.dims[name])
        if other is not None:
            variants.append(variant_spec(op, base, {"dims": {name: other}}))
    return base, variants


def _capped(dim: DimSpec) -> int:
    if dim.candidates is not None:
        return dim.default if dim.default <= PROBE_SIZE else min(dim.candidates)
    return max(dim.min, min(dim.default, PROBE_SIZE))


def _other_size(dim: DimSpec, size: int) -> int | None:
    """A second size of ``dim`` to see how the cost grows with it: twice ``size`` where allowed (above the
    base's tiles, where the plan's larger sizes are), else half."""
    if dim.candidates is not None:
        larger = [c for c in dim.candidates if c > size]
        smaller = [c for c in dim.candidates if 0 < c < size]
        return min(larger) if larger else (max(smaller) if smaller else None)
    if size >= 1 and size * 2 <= dim.max:
        return size * 2
    return size // 2 if size >= 2 and size // 2 >= max(dim.min, 1) else None


def _counts(case: CaseResult) -> tuple[int, int, int] | None:
    features = case.features or {}
    if not features.get("launches"):
        return None
    return int(features["launches"]), int(features.get("programs", 0)), int(features.get("interp_ops", 0))


def probe_cost(op: OpConfig, plan: list[CaseSpec], run: Callable[[list[CaseSpec]], OpOutcome]) -> CostProbe:
    """Run ``op``'s probe case through ``run`` and, when it launched a Triton kernel in the interpreter, its
    variants: the counts' :class:`CountModel`."""
    base, variants = probe_specs(op, plan)
    first = run([base])
    counts = _counts(first.cases[0]) if first.cases and first.setup_error is None else None
    if counts is None:
        return CostProbe(base, first, None)
    measured = run(variants).cases if variants else []
    pairs = [(c.spec, k) for c in measured if (k := _counts(c)) is not None]
    return CostProbe(base, first, count_model(base, counts, pairs))


__all__ = ["LAUNCHED", "CostProbe", "probe_cost", "probe_specs", "probes"]
