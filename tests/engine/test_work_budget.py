"""The default budget of a high-cost op is work, not time (issue 16): ``cost = "auto"`` finds ops that import
triton (their kernels run in Triton's CPU interpreter), and :func:`fit_work` keeps every coverage class by its
cheapest case plus planned cases up to a share of the plan's work. The same cases on every machine: nothing
here is timed. Real workers run the cut plans in tests/gate/test_budget_faces.py and tests/benchmarks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from kit.workspace import write_ws

from gpuemu_ls.engine.cases.budget import DEFAULT_WORK_SHARE, coverage, work
from gpuemu_ls.engine.cases.plan import derive_case, run_filter
from gpuemu_ls.engine.config.checker import TRITON_REASON
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.errors import ConfigError
from gpuemu_ls.engine.run.budgeted import needs_of, work_cut
from gpuemu_ls.engine.run.validate import plan_op

OP = """
[[ops]]
name = "{name}"
{source}
reference = "refs:ref"
{extra}
[ops.inputs.x]
shape = ["B", "N"]
[ops.dims]
B = {{ min = 1, max = 64, default = 8 }}
N = {{ min = 1, max = 4096, default = 1024 }}
"""

FILES = {
    "refs.py": "import numpy as np\n\ndef ref(x):\n    return np.asarray(x, dtype=np.float64)\n",
    "plain.py": "import numpy as np\n\ndef f(x):\n    return np.asarray(x)\n",
    # statically read, never imported: triton need not be installed for the cost to be found
    "direct.py": "import numpy as np\nimport triton\n\ndef f(x):\n    return np.asarray(x)\n",
    "kernels/__init__.py": "",
    "kernels/softmax.py": "import triton.language as tl\n\ndef launch(x):\n    return x\n",
    "wrapper.py": "from kernels.softmax import launch\n\ndef f(x):\n    return launch(x)\n",
    "lazy.py": "def f(x):\n    from triton import jit  # imported when called\n    return x\n",
    "run_op.py": "import sys\nimport triton\n",
}


def _ws(tmp_path: Path, *ops: tuple[str, str, str], top: str = "") -> Path:
    head = '[project]\nname = "w"\n[validation]\ndtypes = ["float32", "float16"]\niterations = 40\n' + top
    body = "".join(OP.format(name=n, source=src, extra=extra) for n, src, extra in ops)
    return write_ws(tmp_path, head + body, FILES)


def test_cost_auto_finds_ops_that_import_triton(tmp_path: Path) -> None:
    cfg = load_config(
        _ws(
            tmp_path,
            ("plain", 'module = "plain:f"', ""),
            ("direct", 'module = "direct:f"', ""),
            ("through_a_wrapper", 'module = "wrapper:f"', ""),
            ("inside_a_function", 'module = "lazy:f"', ""),
            ("declared_normal", 'module = "direct:f"', 'cost = "normal"'),
            ("declared_high", 'module = "plain:f"', 'cost = "high"'),
            ("explicit_auto", 'module = "wrapper:f"', 'cost = "auto"'),
        )
    )
    got = {o.name: (o.cost, o.cost_reason) for o in cfg.ops}
    assert got == {
        "plain": ("normal", ""),
        "direct": ("high", TRITON_REASON),
        "through_a_wrapper": ("high", TRITON_REASON),
        "inside_a_function": ("high", TRITON_REASON),
        "declared_normal": ("normal", "declared"),
        "declared_high": ("high", "declared"),
        "explicit_auto": ("high", TRITON_REASON),
    }


def test_a_script_op_that_imports_triton_is_high_cost(tmp_path: Path) -> None:
    toml = (
        '[project]\nname = "s"\n[[ops]]\nname = "s"\nop_script = "run_op.py"\nreference = "refs:ref"\n'
        '[[ops]]\nname = "p"\nop_script = "refs.py"\nreference = "refs:ref"\n'
    )
    cfg = load_config(write_ws(tmp_path, toml, FILES))
    assert (cfg.op("s").cost, cfg.op("p").cost) == ("high", "normal")


def test_a_bad_cost_is_refused_with_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_ws(tmp_path, ("x", 'module = "plain:f"', 'cost = "expensive"')))
    assert any("expensive" in p.message and p.hint == "valid: auto, normal, high" for p in err.value.problems)


def _cut(tmp_path: Path, mode: str = "thorough", extra: str = "", seed: int = 0):
    cfg = load_config(_ws(tmp_path, ("k", 'module = "direct:f"', extra)))
    op = cfg.op("k")
    specs = plan_op(cfg, op, mode, None, seed, whole=True)
    plan = plan_op(cfg, op, mode, None, seed)  # what every face runs: the same cut
    cut = work_cut(cfg, op, mode, specs, None)
    assert plan.cut == cut and list(plan) == (cut.specs if cut else specs)
    return cfg, op, specs, cut


@pytest.mark.parametrize("mode", ["thorough", "quick"])
@pytest.mark.parametrize("seed", [0, 1000, 77777])
def test_a_work_cut_keeps_every_class_and_stays_within_its_share(tmp_path: Path, mode: str, seed: int) -> None:
    cfg, op, specs, cut = _cut(tmp_path, mode, seed=seed)
    if cut is None:  # a quick plan of 8 small-scope cases may have nothing to save: it runs whole
        assert mode == "quick"
        return
    assert cut.planned == specs and cut.share == DEFAULT_WORK_SHARE[mode]
    cov = coverage(specs, cut.specs, cut.goals)
    assert cov["cut_classes"] == [] and cov["covered"] == cov["classes"] > 10
    # coverage cases run whatever they cost; everything else stays within the share
    full = sum(cut.model.cost(s) for s in specs)
    plan_misses = any(not any(g.met(s) for s in specs) for g in cut.goals)
    # a quick plan of 8 cases that misses a class runs the cut even where it costs more: a small case a class
    assert cut.work < full / 2 if mode == "thorough" else (cut.work < full or plan_misses)
    # more cases than planned only to cover classes, each by a small case
    assert len(cut.specs) <= len(specs) + len(cut.goals) and len({s.seed for s in cut.specs}) == len(cut.specs)
    accept = run_filter(op, mode, quick_dtypes=cfg.ci.quick_dtypes)
    for s in cut.specs:  # every case kept replays from (op, seed) and belongs to the run's mode
        assert derive_case(op, s.seed) == s and accept(s)
    # the same plan is cut the same way: nothing about this machine went into it
    assert [s.seed for s in _cut(tmp_path / "again", mode, seed=seed)[3].specs] == [s.seed for s in cut.specs]


def test_a_work_cut_prefers_small_cases_but_keeps_large_ones(tmp_path: Path) -> None:
    _, _op, specs, cut = _cut(tmp_path)
    assert cut is not None
    kept = sorted(work(s) for s in cut.specs)
    planned = sorted(work(s) for s in specs)
    assert kept[len(kept) // 2] < planned[len(planned) // 2]  # the small-scope hypothesis
    assert max(kept) >= planned[len(planned) // 2]  # large sizes still appear, sampled
    assert {d for s in cut.specs for d in [s.dims["N"]]} >= {1, 2, 3}


def test_pinned_seeds_always_run(tmp_path: Path) -> None:
    _, _op, _specs, cut = _cut(tmp_path, extra="seeds = [123456, 5]")
    assert cut is not None and {123456, 5} <= {s.seed for s in cut.specs}


def test_a_work_cut_reports_like_a_time_budget(tmp_path: Path) -> None:
    _, _op, specs, cut = _cut(tmp_path)
    assert cut is not None
    rep = cut.report(cut.specs, 12.5)
    assert rep["seconds"] is None and rep["work"]["share"] == DEFAULT_WORK_SHARE["thorough"]
    assert rep["planned"] == len(specs) and rep["ran"] == len(cut.specs)
    assert rep["cut_cases"] == len(specs) - sum(1 for s in cut.specs if s.seed in {p.seed for p in specs})
    assert rep["smaller_cases"] == rep["ran"] - (rep["planned"] - rep["cut_cases"])
    assert rep["cut_classes"] == [] and rep["full_estimate"] == 12.5
    assert rep["work"]["full"] > rep["work"]["ran"] and rep["source"] == "default, cost high: imports triton"


@pytest.mark.parametrize(
    ("extra", "top", "given", "mode"),
    [
        ("", "", math.inf, "thorough"),  # --budget off: the whole plan
        ("", '[ci]\nbudget = "off"\n', None, "thorough"),
        ("", '[ci]\nbudget = "5m"\n', None, "thorough"),  # a time budget replaces it
        ("", "", 120.0, "thorough"),  # --budget 2m
        ('budget = "off"', "", None, "thorough"),  # this op is never cut
        ('budget = "30s"', "", None, "thorough"),
        ("", "", None, "fuzz"),  # a fuzz run's count is the ask
        ('cost = "normal"', "", None, "thorough"),
    ],
)
def test_no_work_cut_where_something_else_decides(
    tmp_path: Path, extra: str, top: str, given: float | None, mode: str
) -> None:
    cfg = load_config(_ws(tmp_path, ("k", 'module = "direct:f"', extra), top=top))
    op = cfg.op("k")
    specs = plan_op(cfg, op, "thorough", None, 0, whole=True)
    assert work_cut(cfg, op, mode, specs, given) is None
    assert plan_op(cfg, op, mode if mode != "fuzz" else "thorough", None, 0, budget=given, whole=mode == "fuzz") == (
        plan_op(cfg, op, mode if mode != "fuzz" else "thorough", None, 0, whole=True)
    )


def test_needs_of_the_mode_are_what_the_cut_keeps(tmp_path: Path) -> None:
    _, op, specs, cut = _cut(tmp_path)
    assert cut is not None
    for need in needs_of(op, "thorough"):
        if any(need.met(s) for s in specs):
            assert any(need.met(s) for s in cut.specs), need.label


def test_the_full_plan_estimate_is_exact_on_what_ran_and_recovers_a_linear_cost() -> None:
    from gpuemu_ls.engine.cases.budget import fit_total

    truth = lambda n: 0.02 + 1e-6 * n  # noqa: E731  (a fixed cost and a per-element one, as an interpreter has)
    sizes = [3, 10, 17, 33, 64, 100, 250, 1000, 4096, 65536, 1 << 20]
    model = fit_total((n, truth(n)) for n in sizes)
    assert model is not None
    assert sum(model.cost_of(n) for n in sizes) == pytest.approx(sum(truth(n) for n in sizes))
    plan = [1 << 22] * 6 + sizes  # the plan's large cases were never run
    assert sum(model.cost_of(n) for n in plan) == pytest.approx(sum(truth(n) for n in plan), rel=0.05)
    assert fit_total([]) is None


ATTENTION = """
[project]
name = "a"
[[ops]]
name = "attention"
module = "direct:f"
reference = "refs:ref"
[ops.inputs.q]
shape = ["B", "H", "S", "D"]
[ops.inputs.k]
shape = ["B", "H", "S", "D"]
[ops.dims]
B = { min = 1, max = 2, default = 1 }
H = { min = 1, max = 4, default = 2 }
S = { min = 1, max = 256, default = 128 }
D = [16, 32, 64]
"""


@pytest.mark.parametrize("which", ["attention", "rows"])
@pytest.mark.parametrize("seed", [0, 5, 1000, 2000])
def test_each_class_is_shown_by_a_small_case_where_the_seeds_hold_one(tmp_path: Path, which: str, seed: int) -> None:
    """A rare class (a structure at a boundary shape, a dim past the largest tile in one dtype) may have one
    member among the first seeds past the plan, as likely its largest size as its smallest: the cut looks
    further for a cheaper one, and covers by classes per unit of work, not by fewest cases (which picks the
    largest). For an attention kernel, quadratic in S, one such case cost more than the rest of the cut."""
    from gpuemu_ls.engine.cases.budget import MAX_SCAN, plan_filter

    if which == "attention":
        cfg = load_config(write_ws(tmp_path, ATTENTION, FILES))
        op = cfg.op("attention")
    else:
        cfg = load_config(_ws(tmp_path, ("k", 'module = "direct:f"', "")))
        op = cfg.op("k")
    specs = plan_op(cfg, op, "thorough", None, seed, whole=True)
    cut = work_cut(cfg, op, "thorough", specs, None)
    assert cut is not None
    accept = plan_filter(specs, run_filter(op, "thorough", quick_dtypes=cfg.ci.quick_dtypes))
    start = max(s.seed for s in specs) + 1
    seen = specs + [c for c in (derive_case(op, k) for k in range(start, start + MAX_SCAN)) if accept(c)]
    sizes = sorted(work(s) for s in specs)
    small = max(cut.model.cost(s) for s in specs if work(s) <= sizes[len(sizes) // 2])
    for goal in cut.goals:
        if (goal.axis, goal.value) == ("shape", "default"):
            continue  # one size
        cheapest_seen = min((cut.model.cost(s) for s in seen if goal.met(s)), default=None)
        if cheapest_seen is None:
            continue
        in_cut = min(cut.model.cost(s) for s in cut.specs if goal.met(s))
        assert in_cut <= 2 * max(small, cheapest_seen), (goal.label, in_cut, cheapest_seen, small)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_quick_cut_covers_half_precision_classes_by_small_cases(tmp_path: Path, seed: int) -> None:
    """A quick run's half-precision cases are planned at a boundary shape (accumulation stress), but its cut may
    meet their coverage classes (a partial tile in bfloat16) with small-scope cases: with boundary members only,
    covering them cost more than the quick plan itself (benchmarks/triton_ws: 2.4x the counted work)."""
    top = "[ci.quick]\niterations = 8\n"
    cfg = load_config(
        _ws(tmp_path, ("k", 'module = "direct:f"', 'dtypes = ["float32", "float16", "bfloat16"]'), top=top)
    )
    op = cfg.op("k")
    specs = plan_op(cfg, op, "quick", None, seed, whole=True)
    assert {s.strategy for s in specs if s.dtype != "float32"} == {"boundary"}  # the plan's own stay at a boundary
    cut = work_cut(cfg, op, "quick", specs, None)
    assert cut is not None
    assert coverage(specs, cut.specs, cut.goals)["cut_classes"] == []
    halves = [s for s in cut.specs if s.dtype != "float32"]
    assert any(s.strategy == "small" for s in halves), [(s.dtype, s.strategy, s.dims) for s in halves]
    assert cut.work <= sum(cut.model.cost(s) for s in specs)  # no dearer than the plan it cuts
