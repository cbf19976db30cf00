"""Confirmation cases for a diagnosis: the representative failing case with one feature changed.

Diagnosis (``oracle.diagnose``) chooses which features to change; this module turns a change into a
case spec and runs it in the op's worker like any other case. A confirmation case is evidence for
the diagnosis line only: it is not stored as one of the run's cases and does not change the verdict.
Its inputs come from the same (op, seed) streams as the case it varies, so it is deterministic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..cases.plan import CaseSpec, shape_of
from ..config.model import Config, OpConfig
from ..oracle.outcome import CaseResult


def variant_spec(op: OpConfig, spec: CaseSpec, changes: dict[str, Any]) -> CaseSpec:
    """``spec`` with some dims, its layout, dtype or distribution changed; shapes follow the dims."""
    dims = dict(spec.dims, **changes.get("dims", {}))
    distribution = changes.get("distribution", spec.distribution)
    per_input: dict[str, str] = {}
    for inp in op.inputs:
        cur = spec.input_distributions.get(inp.name, spec.distribution)
        keeps_own = cur == "range" or (inp.distributions is not None and distribution not in inp.distributions)
        per_input[inp.name] = cur if keeps_own else distribution
    return dataclasses.replace(
        spec,
        dims=dims,
        shapes={i.name: shape_of(i.shape, dims) for i in op.inputs},
        layout=changes.get("layout", spec.layout),
        dtype=changes.get("dtype", spec.dtype),
        distribution=distribution,
        input_distributions=per_input,
    )


def make_probe(
    config: Config, op: OpConfig, run_one: Callable[[CaseSpec], CaseResult | None]
) -> Callable[[CaseSpec, dict[str, Any]], CaseResult | None]:
    """The diagnosis' probe: a change to a failing case -> the result of running it (None if it could not run)."""

    def probe(base: CaseSpec, changes: dict[str, Any]) -> CaseResult | None:
        return run_one(variant_spec(op, base, changes))

    return probe
