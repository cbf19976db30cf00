"""A case's cost counted as Triton's interpreter pays it (issue 27 item 1): :func:`count_model` turns the counts
of an op's probe cases (launches, programs, operations) into each dim's power, and a work cut in those units
keeps every coverage class and fills up to :data:`CUT_CASES` cases in all where every case costs about the same
(a launch and a few programs: the small kernels where a share of the plan's work kept nearly every case).
Counts, not times: nothing here is timed. Real workers and the interpreter: tests/cuda/test_triton_cost_probe.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from kit.ops import op_toml, project_toml
from kit.workspace import write_ws

from gpuemu_ls.engine.cases.budget import (
    CASE_OPS,
    CUT_CASES,
    CountModel,
    Growth,
    count_model,
    coverage,
    kernel_cost,
)
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.run.budgeted import cut_pool_of, work_cut
from gpuemu_ls.engine.run.confirm import variant_spec
from gpuemu_ls.engine.run.cost_probe import LAUNCHED, PROBE_SIZE, probe_specs
from gpuemu_ls.engine.run.validate import plan_op


def _op(tmp_path: Path, dims: dict, iterations: int = 100):
    toml = project_toml(validation={"dtypes": ["float32", "float16"], "iterations": iterations})
    toml += op_toml("k", module="k:f", reference="k:f", dims=dims, inputs={"x": list(dims)})
    cfg = load_config(write_ws(tmp_path, toml, {"k.py": "def f(x):\n    return x\n"}))
    return cfg, cfg.op("k")


def _per_row(spec) -> tuple[int, int, int]:
    """A one-program-per-row kernel whose block covers the row: 42 operations a program, whatever N."""
    rows = spec.dims["B"]
    return 1, rows, 42 * rows


def _tiled(spec) -> tuple[int, int, int]:
    """A kernel that walks N in tiles of 16 in each of B programs: operations grow with B x N."""
    b, n = spec.dims["B"], spec.dims["N"]
    return 1, b, b * (10 + 8 * -(-n // 16))


def _attention(spec) -> tuple[int, int, int]:
    """Blocks of 16 queries, each walking every block of 16 keys: quadratic in N, linear in B."""
    b, n = spec.dims["B"], spec.dims["N"]
    blocks = -(-n // 16)
    return 1, b * blocks, b * blocks * (12 + 30 * blocks)


@pytest.mark.parametrize("kernel", [_per_row, _tiled, _attention])
def test_how_each_dim_grows_the_cost_is_read_from_the_probe_counts(tmp_path: Path, kernel) -> None:
    cfg, op = _op(tmp_path, {"B": (1, 64, 8), "N": (1, 4096, 1024)})
    plan = plan_op(cfg, op, "thorough", None, 0, whole=True)
    base, variants = probe_specs(op, plan)
    model = count_model(base, kernel(base), [(v, kernel(v)) for v in variants])
    for dims in ({"B": 64, "N": 4096}, {"B": 33, "N": 700}, {"B": 8, "N": 2000}):
        # at the plan's large sizes, far past the probe's, the prediction follows the kernel (within 2x)
        case = variant_spec(op, base, {"dims": dims})
        assert abs(math.log(model.kernel_of(case) / kernel_cost(kernel(case)))) < math.log(2), dims
    for dims in ({"B": 1, "N": 3}, {"B": 8, "N": 1}):
        # below them it may read low (a tile costs the same whatever it holds), never below one launch and
        # never above the probe case: the small cases a cut prefers anyway
        case = variant_spec(op, base, {"dims": dims})
        assert model.floor <= model.kernel_of(case) <= model.kernel, dims


def test_the_probe_case_is_small_and_each_variant_changes_one_dim(tmp_path: Path) -> None:
    cfg, op = _op(tmp_path, {"B": (1, 64, 8), "N": (1, 4096, 1024), "D": [64, 16, 32]})
    base, variants = probe_specs(op, plan_op(cfg, op, "thorough", None, 0, whole=True))
    assert base.dims == {"B": 8, "N": PROBE_SIZE, "D": 16}  # defaults capped; a list's smallest past the cap
    changed = sorted((d, v.dims[d]) for v in variants for d in v.dims if v.dims[d] != base.dims[d])
    assert changed == [("B", 16), ("D", 32), ("N", 2 * PROBE_SIZE)]
    assert all(v.shapes["x"] == (v.dims["B"], v.dims["N"], v.dims["D"]) for v in variants)


def test_a_case_never_costs_less_than_a_launch() -> None:
    model = CountModel((("N", 32),), 400.0, (("N", Growth(32, 64, 400.0, 1600.0)),), 22.0)
    spec = type("S", (), {"dims": {"N": 1}, "shapes": {"x": (1,)}})()
    assert model.kernel_of(spec) == 22.0 and model.cost(spec) > CASE_OPS


def test_where_every_case_costs_the_same_the_cut_is_its_classes_and_a_bounded_few(tmp_path: Path) -> None:
    cfg, op = _op(tmp_path, {"B": (1, 64, 8), "N": (1, 4096, 1024)})
    specs = plan_op(cfg, op, "thorough", None, 0, whole=True)
    base, variants = probe_specs(op, specs)
    flat = count_model(base, (1, 1, 40), [(v, (1, 1, 40)) for v in variants])  # one program, whatever the size
    cut = work_cut(cfg, op, "thorough", specs, None, model=flat)
    assert cut is not None and cut.source == f"default, cost high: {LAUNCHED}"
    cov = coverage(specs, cut.specs, cut.goals)
    assert cov["cut_classes"] == []
    covering = len(cut.goals)  # at most one case a class
    assert len(cut.specs) <= max(covering, CUT_CASES) < len(specs)
    # a plan's further cases are its own, in seed order: the same cut every time
    again = work_cut(cfg, op, "thorough", specs, None, model=flat)
    assert again is not None and [s.seed for s in again.specs] == [s.seed for s in cut.specs]


def test_a_pool_made_ahead_gives_the_very_cut_made_at_once(tmp_path: Path) -> None:
    """validate.py makes the model-free part of a counted cut on the planner thread, before the op's probe
    cases: the cut it then makes is the one a cut made from nothing chooses."""
    cfg, op = _op(tmp_path, {"B": (1, 64, 8), "N": (1, 4096, 1024)})
    specs = plan_op(cfg, op, "thorough", None, 0, whole=True)
    base, variants = probe_specs(op, specs)
    model = count_model(base, (1, 8, 400), [(v, (1, 8 * 2, 800)) for v in variants])
    pool = cut_pool_of(cfg, op, "thorough", specs)
    ahead = work_cut(cfg, op, "thorough", specs, None, model=model, pool=pool)
    fresh = work_cut(cfg, op, "thorough", specs, None, model=model)
    assert ahead is not None and fresh is not None and ahead.pool is pool
    assert [s.seed for s in ahead.specs] == [s.seed for s in fresh.specs]
    assert ahead.goals == fresh.goals
    # a pool of another plan is not used: the cut makes its own
    other = plan_op(cfg, op, "thorough", None, 1000, whole=True)
    cut = work_cut(cfg, op, "thorough", other, None, model=model, pool=pool)
    assert cut is not None and cut.pool is not pool and cut.pool.serves(other)
