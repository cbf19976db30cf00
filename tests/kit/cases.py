"""Cases by hand: the case a seed means (``derive_case``) with some of its fields replaced."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuemu_ls.engine.cases.plan import CaseSpec, derive_case, shape_of


def spec_with(op: Any, seed: int = 0, **changes: object) -> CaseSpec:
    """derive_case(op, seed) with some fields replaced; dims changes also update the shapes, and a changed
    distribution is every input's but a ranged int input's (which stays ``range``)."""
    spec = derive_case(op, seed)
    dims = dict(spec.dims, **changes.pop("dims", {}))  # type: ignore[arg-type]
    shapes = {i.name: shape_of(i.shape, dims) for i in op.inputs}
    dist = changes.get("distribution", spec.distribution)
    per_input = {k: (v if v == "range" else dist) for k, v in spec.input_distributions.items()}
    return dataclasses.replace(spec, dims=dims, shapes=shapes, input_distributions=per_input, **changes)
