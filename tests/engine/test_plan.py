"""Which case a seed means: golden derivations, window coverage, boundary sizes, budgets and filters."""

from __future__ import annotations

import dataclasses

import pytest
from kit.ops import identity_py, op_toml, project_toml
from kit.workspace import load_op, write_ws

from gpuemu_ls.engine.cases.plan import (
    QUICK_STRATEGIES,
    STRATEGY_WINDOW,
    STRUCTURE_DISTRIBUTIONS,
    CaseSpec,
    boundary_values,
    cover_minimums,
    derive_case,
    derive_dims,
    iter_seeds,
    mode_filter,
    plan_thorough,
    regular_values,
)
from gpuemu_ls.engine.config.keys import DEFAULT_DISTRIBUTIONS
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.config.model import DimSpec, OpConfig
from gpuemu_ls.engine.run.validate import plan_op


def golden_toml(d: list[int] | None = None, **keys: object) -> str:
    """The golden op (x: B x N, w: N x D) with ``keys`` added to its entry and D's candidates ``d``."""
    return project_toml(validation={"dtypes": ["float32", "float16", "bfloat16"]}) + op_toml(
        "golden",
        module="ops:op",
        reference="ops:ref",
        **keys,
        inputs={"x": ["B", "N"], "w": ["N", "D"]},
        dims={"B": (1, 64, 8), "N": (1, 4096, 1024), "D": d or [16, 32, 64]},
    )


OPS_PY = identity_py("x", "w")

# derive_case(golden, seed) for seeds 0..15 under plan 1 (the plan before ``peaked``), computed once and pasted:
# a change breaks every replay by seed.
GOLDEN = [
    (0, "regular", "bfloat16", "contiguous", "underflow_rows", {"B": 4, "D": 16, "N": 128}),
    (1, "default", "float32", "transposed", "large", {"B": 8, "D": 16, "N": 1024}),
    (2, "random", "float16", "strided", "boundary", {"B": 2, "D": 32, "N": 201}),
    (3, "boundary", "float16", "strided", "masked_rows", {"B": 1, "D": 16, "N": 4096}),
    (4, "regular", "float32", "contiguous", "small", {"B": 16, "D": 64, "N": 4096}),
    (5, "boundary", "bfloat16", "transposed", "positive", {"B": 8, "D": 16, "N": 1}),
    (6, "boundary", "float16", "transposed", "ties", {"B": 64, "D": 16, "N": 129}),
    (7, "random", "bfloat16", "contiguous", "subnormal", {"B": 62, "D": 64, "N": 4096}),
    (8, "random", "float32", "strided", "wide", {"B": 35, "D": 32, "N": 1617}),
    (9, "default", "bfloat16", "contiguous", "tail_max", {"B": 8, "D": 16, "N": 1024}),
    (10, "boundary", "float32", "transposed", "integers", {"B": 1, "D": 16, "N": 1}),
    (11, "boundary", "float16", "strided", "normal", {"B": 11, "D": 16, "N": 4096}),
    (12, "boundary", "float32", "strided", "nan_payloads", {"B": 32, "D": 16, "N": 1024}),
    (13, "random", "bfloat16", "transposed", "constant_rows", {"B": 22, "D": 32, "N": 4071}),
    (14, "regular", "float16", "contiguous", "partial_inf", {"B": 1, "D": 64, "N": 64}),
    (15, "regular", "float16", "strided", "uniform", {"B": 32, "D": 16, "N": 1}),
]


@pytest.fixture(scope="module")
def golden_op(tmp_path_factory: pytest.TempPathFactory) -> OpConfig:
    root = tmp_path_factory.mktemp("plan-golden")
    return load_op(root, golden_toml(), "golden", {"ops.py": OPS_PY}, user_config=root / "none.toml")


@pytest.mark.parametrize(("seed", "strategy", "dtype", "layout", "dist", "dims"), GOLDEN)
def test_golden_derive_case(golden_op: OpConfig, seed, strategy, dtype, layout, dist, dims) -> None:
    spec = derive_case(golden_op, seed, plan=1)
    assert (spec.op, spec.seed, spec.strategy, spec.dtype, spec.layout, spec.distribution) == (
        "golden",
        seed,
        strategy,
        dtype,
        layout,
        dist,
    )
    assert spec.dims == dims
    assert spec.shapes == {"x": (dims["B"], dims["N"]), "w": (dims["N"], dims["D"])}
    assert spec.input_distributions == {"x": dist, "w": dist}


def test_case_spec_round_trips_through_a_dict(golden_op: OpConfig) -> None:
    spec = derive_case(golden_op, 5)
    assert CaseSpec.from_dict(spec.to_dict()) == spec
    n, d, b = spec.dims["N"], spec.dims["D"], spec.dims["B"]
    assert spec.shape_text() == f"x=[{b}, {n}] w=[{n}, {d}]"


@pytest.mark.parametrize(
    ("axis", "options"),
    [
        ("strategy", tuple(sorted(set(STRATEGY_WINDOW)))),
        ("dtype", ("float32", "float16", "bfloat16")),
        ("layout", ("contiguous", "transposed", "strided")),
        ("distribution", DEFAULT_DISTRIBUTIONS),  # the current plan's default set
    ],
)
def test_every_window_of_n_seeds_covers_each_option_once(golden_op: OpConfig, axis: str, options) -> None:
    field = "distribution" if axis == "distribution" else axis
    n = len(STRATEGY_WINDOW) if axis == "strategy" else len(options)
    for window in range(12):
        seeds = range(window * n, (window + 1) * n)
        got = [getattr(derive_case(golden_op, s), field) for s in seeds]
        if axis == "strategy":  # the strategy window repeats boundary, regular and random by design
            assert sorted(got) == sorted(STRATEGY_WINDOW)
        else:
            assert sorted(got) == sorted(options), (window, got)


def test_windows_are_shuffled_not_repeated(golden_op: OpConfig) -> None:
    orders = {tuple(derive_case(golden_op, s).distribution for s in range(w * 8, w * 8 + 8)) for w in range(6)}
    assert len(orders) > 1


def test_boundary_values_of_a_range() -> None:
    vals = boundary_values(DimSpec("N", 1, 300, 64))
    assert list(vals) == sorted(set(vals))
    for v in (1, 2, 3, 5, 7, 11, 13, 17, 31, 61, 127, 300):
        assert v in vals
    for k in range(2, 9):  # 2**k - 1, 2**k, 2**k + 1 inside [1, 300]
        assert {(1 << k) - 1, 1 << k, (1 << k) + 1} <= set(vals)
    assert 511 not in vals and 512 not in vals and all(1 <= v <= 300 for v in vals)


def test_boundary_values_respect_min() -> None:
    vals = boundary_values(DimSpec("K", 20, 70, 32))
    assert vals == (20, 31, 32, 33, 61, 63, 64, 65, 70)
    assert boundary_values(DimSpec("Z", 0, 3, 1)) == (0, 1, 2, 3)


def test_boundary_and_regular_values_of_candidates() -> None:
    d = DimSpec("D", 16, 128, 64, (64, 16, 128, 32))
    assert boundary_values(d) == (16, 32, 64, 128)  # first, last, min and max of the list
    assert regular_values(d) == (64, 16, 128, 32)
    assert regular_values(DimSpec("N", 3, 40, 5)) == (4, 8, 16, 32)
    assert regular_values(DimSpec("N", 5, 7, 6)) == (6,)  # no power of two in range: the default


def test_candidate_dims_only_take_listed_values(golden_op: OpConfig) -> None:
    seen = {derive_case(golden_op, s).dims["D"] for s in range(200)}
    assert seen == {16, 32, 64}


def test_range_dims_stay_in_range_and_strategies_differ(golden_op: OpConfig) -> None:
    by_strategy: dict[str, set[int]] = {}
    for s in range(200):
        spec = derive_case(golden_op, s)
        assert 1 <= spec.dims["B"] <= 64 and 1 <= spec.dims["N"] <= 4096
        by_strategy.setdefault(spec.strategy, set()).add(spec.dims["N"])
    assert by_strategy["default"] == {1024}
    assert all(v & (v - 1) == 0 for v in by_strategy["regular"])  # powers of two
    assert by_strategy["boundary"] <= set(boundary_values(golden_op.dims["N"])) | {1024}
    assert len(by_strategy["random"]) > 10


def test_boundary_cases_often_take_a_dims_minimum_and_maximum(golden_op: OpConfig) -> None:
    # size 1 (empty splits) and the largest size (accumulation error) are each ~15% of boundary dims,
    # not the 1-in-40 a uniform pick among the boundary sizes would give
    ns = [s.dims["N"] for s in map(lambda i: derive_case(golden_op, i), range(800)) if s.strategy == "boundary"]
    assert len(ns) == 300
    assert 0.10 < ns.count(1) / len(ns) < 0.22 and 0.10 < ns.count(4096) / len(ns) < 0.22
    others = {n for n in ns if n not in (1, 4096, 1024)}
    assert len(others) > 20  # the other boundary sizes are still drawn


def test_cover_minimums_takes_every_dim_to_its_minimum_keeping_the_count(golden_op: OpConfig) -> None:
    defaults = list(iter_seeds(golden_op, 100, 10, accept=mode_filter(golden_op, strategies=("default",))))
    assert all(s.dims["N"] == 1024 and s.dims["B"] == 8 for s in defaults)
    covered = cover_minimums(golden_op, defaults)
    assert len(covered) == 10 and covered[:8] == defaults[:8]  # the last cases are replaced, one per dim
    by_dim = {d: [s for s in covered if s.dims[d] == golden_op.dims[d].min] for d in ("B", "N")}
    assert by_dim["B"] and by_dim["N"]
    for s in covered[8:]:
        assert s.seed > defaults[-1].seed and s == derive_case(golden_op, s.seed)  # replays from (op, seed)
    # a filter is kept (float32 only), and a run shorter than COVER_FROM is left as asked
    f32 = mode_filter(golden_op, dtypes=("float32",), strategies=("default",))
    kept = cover_minimums(golden_op, list(iter_seeds(golden_op, 100, 10, accept=f32)), accept=f32)
    assert all(s.dtype == "float32" and s.strategy == "default" for s in kept)  # only what the filter keeps
    short = defaults[:5]
    assert cover_minimums(golden_op, short) == short
    assert cover_minimums(golden_op, covered) == covered  # already covered: unchanged


def _budget_op(tmp_path) -> OpConfig:
    text = op_toml(
        "big",
        module="ops:op",
        reference="ops:ref",
        inputs={"x": ["M", "K"], "w": ["K", "D"]},
        dims={"M": (1, 1048576, 1048576), "K": (3, 1048576, 65536), "D": [1024, 2048]},
    )
    return load_op(tmp_path, text, "big", {"ops.py": OPS_PY})


def test_element_budget_halves_the_largest_dims(tmp_path) -> None:
    op = _budget_op(tmp_path)
    dims = derive_dims(op, 0, "default", max_elements=10_000)
    assert dims["D"] == 1024  # candidate dims are never shrunk
    assert dims["M"] * dims["K"] <= 10_000 and dims["K"] * dims["D"] <= 10_000
    assert dims["K"] >= 3 and dims["M"] >= 1
    assert dims == derive_dims(op, 0, "default", max_elements=10_000)  # deterministic
    spec = derive_case(op, 0, max_elements=10_000)
    case_dims = derive_dims(op, 0, spec.strategy, max_elements=10_000)
    assert spec.shapes == {"x": (case_dims["M"], case_dims["K"]), "w": (case_dims["K"], 1024)}
    roomy = derive_dims(op, 0, "default", max_elements=1 << 62)
    assert roomy == {"D": 1024, "K": 65536, "M": 1048576}


def test_element_budget_stops_at_a_dims_minimum(tmp_path) -> None:
    op = _budget_op(tmp_path)
    dims = derive_dims(op, 0, "default", max_elements=100)
    assert dims["K"] == 3 and dims["D"] == 1024  # w = K x D cannot fit: it stops instead of spinning


def test_element_budget_only_shrinks_dims_of_the_oversized_input(tmp_path) -> None:
    op = _budget_op(tmp_path)
    dims = derive_dims(op, 0, "default", max_elements=10_000)
    # w = K x 1024 forces K <= 9; x = M x K then fits with M >= 1024, so M need not fall to K's size
    assert dims["M"] >= 512


def test_quick_filter_only_yields_allowed_cases_and_pinned_seeds_come_first(tmp_path) -> None:
    op = load_op(tmp_path, golden_toml(seeds=[2, 7]), "golden", {"ops.py": OPS_PY})
    accept = mode_filter(op, dtypes=("float32",), strategies=QUICK_STRATEGIES)
    specs = list(iter_seeds(op, 0, 10, accept=accept))
    assert [s.seed for s in specs[:2]] == [2, 7]  # pinned first, never filtered (seed 2 is bfloat16)
    rest = specs[2:]
    assert len(rest) == 10
    assert all(s.dtype == "float32" and s.strategy in QUICK_STRATEGIES for s in rest)
    assert [s.seed for s in rest] == sorted(s.seed for s in rest) and not {2, 7} & {s.seed for s in rest}
    # a dtype the op does not list falls back to its first dtype
    fallback = mode_filter(op, dtypes=("float64",))
    assert all(s.dtype == "float32" for s in iter_seeds(op, 0, 5, accept=fallback) if s.seed not in (2, 7))


def test_a_filter_nothing_satisfies_ends(golden_op: OpConfig) -> None:
    never = list(iter_seeds(golden_op, 0, 3, accept=lambda s: False))
    assert never == []


def test_iter_seeds_from_a_base_seed(golden_op: OpConfig) -> None:
    assert [s.seed for s in iter_seeds(golden_op, 100, 4)] == [100, 101, 102, 103]
    assert list(iter_seeds(golden_op, 3, 2)) == [derive_case(golden_op, 3), derive_case(golden_op, 4)]


def test_fixed_and_range_input_distribution(tmp_path) -> None:
    text = op_toml(
        "xent",
        module="ops:op",
        reference="ops:ref",
        inputs={
            "x": {"shape": ["B", "C"], "distributions": ["normal", "uniform"]},
            "t": {"shape": ["B"], "dtype": "int64", "range": [0, "C"]},
        },
        dims={"B": (1, 8, 4), "C": (2, 16, 10)},
    )
    op = load_op(tmp_path, text, "xent", {"ops.py": identity_py("x", "t")})
    for s in range(24):
        spec = derive_case(op, s)
        assert spec.input_distributions["t"] == "range"
        assert spec.input_distributions["x"] in ("normal", "uniform")
        if spec.distribution in ("normal", "uniform"):
            assert spec.input_distributions["x"] == spec.distribution


# --- coverage of rare structures, candidate minimums and quick half precision --------------------


def test_thorough_plans_cover_each_structure_distribution_at_a_boundary_shape(golden_op: OpConfig) -> None:
    assert set(STRUCTURE_DISTRIBUTIONS) <= set(golden_op.distributions)
    for base in (0, 100, 1000, 12345, 987654):
        specs = plan_thorough(golden_op, base, 50)
        assert len(specs) == 50 and len({s.seed for s in specs}) == 50
        assert [s.seed for s in specs] == sorted(s.seed for s in specs)
        for d in STRUCTURE_DISTRIBUTIONS:
            assert any(s.distribution == d and s.strategy == "boundary" for s in specs), (base, d)
        for name, dim in golden_op.dims.items():
            low = min(dim.candidates) if dim.candidates else dim.min
            assert any(s.dims[name] == low for s in specs), (base, name)
        assert all(s == derive_case(golden_op, s.seed) for s in specs)  # every case replays from (op, seed)
        assert sum(base <= s.seed < base + 50 for s in specs) >= 40  # only the tail is replaced


def test_structure_coverage_keeps_pinned_seeds_and_the_filter(tmp_path) -> None:
    op = load_op(tmp_path, golden_toml(seeds=[2, 7]), "golden", {"ops.py": OPS_PY})
    f32 = mode_filter(op, dtypes=("float32",))
    specs = plan_thorough(op, 0, 30, accept=f32)
    assert [s.seed for s in specs[:2]] == [2, 7] and len(specs) == 32
    assert all(s.dtype == "float32" for s in specs[2:])
    for d in STRUCTURE_DISTRIBUTIONS:
        assert any(s.distribution == d and s.strategy == "boundary" for s in specs[2:]), d
    # an op that lists no structure distribution (and one dtype: no (dtype, layout) pairs) gets the plain seeds
    plain = dataclasses.replace(op, distributions=("normal", "uniform"), seeds=(), dtypes=("float32",))
    assert [s.seed for s in plan_thorough(plain, 0, 20)] == list(range(20))


def test_candidate_dims_are_covered_at_their_smallest_candidate(tmp_path) -> None:
    op = load_op(tmp_path, golden_toml(d=[64, 32, 128]), "golden", {"ops.py": OPS_PY})
    defaults = list(iter_seeds(op, 0, 12, accept=mode_filter(op, strategies=("default",))))
    assert all(s.dims["D"] == 64 for s in defaults)
    covered = cover_minimums(op, defaults)
    assert len(covered) == 12 and any(s.dims["D"] == 32 for s in covered)


def quick_plan(tmp_path, ci: str = "", op: str = "", iterations: int | None = None, seed: int | None = None):
    """Plan op q (x: B x N) in quick mode; ``ci`` is raw TOML before the op, ``op`` raw keys of its entry."""
    text = (
        project_toml(validation={"dtypes": ["float32", "float16", "bfloat16"]})
        + ci
        + op_toml("q", module="ops:op", reference="ops:ref", extra=op, dims={"B": (1, 64, 8), "N": (1, 4096, 1024)})
    )
    write_ws(tmp_path, text, {"ops.py": identity_py("x")})
    cfg = load_config(tmp_path, user_config=tmp_path / "none.toml")
    return cfg, plan_op(cfg, cfg.op("q"), "quick", iterations, seed)


@pytest.mark.parametrize("seed", [0, 50, 1234])
def test_quick_plans_see_half_precision_when_quick_dtypes_are_not_set(tmp_path, seed: int) -> None:
    cfg, specs = quick_plan(tmp_path, seed=seed)
    assert cfg.ci.quick_dtypes is None and len(specs) == 16
    by_dtype = {d: [s for s in specs if s.dtype == d] for d in ("float32", "float16", "bfloat16")}
    assert (len(by_dtype["float16"]), len(by_dtype["bfloat16"]), len(by_dtype["float32"])) == (2, 2, 12)
    for s in by_dtype["float16"] + by_dtype["bfloat16"]:
        assert s.strategy == "boundary" and s.distribution in ("large", "positive")
    assert all(s.strategy in QUICK_STRATEGIES for s in by_dtype["float32"])
    dists = {s.distribution for s in by_dtype["float32"]}
    assert {"masked_rows", "tail_max", "large", "boundary"} <= dists  # quick covers these within its count
    assert all(s == derive_case(cfg.op("q"), s.seed) for s in specs)
    assert [s.seed for s in specs] == sorted(s.seed for s in specs)


def test_quick_half_precision_cases_scale_with_the_count(tmp_path) -> None:
    _, specs = quick_plan(tmp_path, iterations=100)
    assert len(specs) == 100 and sum(s.dtype == "float16" for s in specs) == 12
    _, specs = quick_plan(tmp_path, iterations=4)
    assert [s.dtype for s in specs].count("float16") == 1 and [s.dtype for s in specs].count("bfloat16") == 1
    _, specs = quick_plan(tmp_path, iterations=1)
    assert [s.dtype for s in specs] == ["float32"]


@pytest.mark.parametrize("ci", ['[ci]\nquick_dtypes = ["float32"]', '[ci.quick]\ndtypes = ["float32"]'])
def test_explicit_quick_dtypes_are_the_only_ones(tmp_path, ci: str) -> None:
    cfg, specs = quick_plan(tmp_path, ci=ci)
    assert cfg.ci.quick_dtypes == ("float32",)
    assert len(specs) == 16 and all(s.dtype == "float32" and s.strategy in QUICK_STRATEGIES for s in specs)


def test_quick_without_float32_falls_back_to_the_first_dtype_plus_the_other_half(tmp_path) -> None:
    _, specs = quick_plan(tmp_path, op='dtypes = ["float16", "bfloat16"]')
    assert len(specs) == 16
    assert [s.dtype for s in specs].count("bfloat16") == 2 and [s.dtype for s in specs].count("float16") == 14
    _, specs = quick_plan(tmp_path, op='dtypes = ["float32"]\ndistributions = ["normal"]')
    assert len(specs) == 16 and {s.dtype for s in specs} == {"float32"}


def test_quick_half_cases_take_any_distribution_when_the_op_lists_no_stress_one(tmp_path) -> None:
    _, specs = quick_plan(tmp_path, op='distributions = ["normal", "uniform"]')
    halves = [s for s in specs if s.dtype != "float32"]
    assert len(halves) == 4 and all(s.strategy == "boundary" for s in halves)


def test_plans_are_deterministic(golden_op: OpConfig, tmp_path) -> None:
    assert plan_thorough(golden_op, 7, 40) == plan_thorough(golden_op, 7, 40)
    _, a = quick_plan(tmp_path)
    _, b = quick_plan(tmp_path)
    assert a == b
