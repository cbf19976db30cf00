"""Budget planning (issue 16): durations and their bounds, the cost model, coverage-first selection, what a
cut reports, the run budget shared out, and small-scope shapes for ``cost = "high"`` ops. No workers here:
the faces are tested through real subprocesses in tests/gate/test_budget_faces.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from kit.workspace import write_ws

from gpuemu_ls.engine.cases.budget import CostModel, Target, coverage, fit, select, smaller_seeds, targets, work
from gpuemu_ls.engine.cases.plan import (
    DEFAULT_TILES,
    CaseSpec,
    derive_case,
    minimum_needs,
    plan_cases,
    small_scope_values,
    structure_needs,
    tiled_dims,
)
from gpuemu_ls.engine.config.keys import check_budget, format_duration, parse_duration
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.errors import ConfigError
from gpuemu_ls.engine.run.budgeted import allocate, resolve

OPS = """
[[ops]]
name = "mm"
module = "m:f"
reference = "m:f"
{extra}
[ops.inputs.a]
shape = ["B", "M", "K"]
[ops.inputs.b]
shape = ["B", "K", "N"]
[ops.dims]
B = {{ min = 1, max = 8, default = 2 }}
M = {{ min = 1, max = 600, default = 128 }}
N = {{ min = 1, max = 600, default = 128 }}
K = {{ min = 1, max = 600, default = 128{ktile} }}
"""


def workspace(tmp_path: Path, extra: str = "", ktile: str = "", top: str = "") -> Path:
    head = '[project]\nname = "t"\n[validation]\ndtypes = ["float32", "float16"]\n'
    toml = head + top + OPS.format(extra=extra, ktile=ktile)
    return write_ws(tmp_path, toml, {"m.py": "def f(a, b):\n    return a @ b\n"})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("5m", 300), ("1m30s", 90), ("1.5h", 5400), ("90", 90), (45, 45), ("off", math.inf)],
)
def test_durations_parse(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert check_budget(seconds) is None


@pytest.mark.parametrize("text", ["", "abc", "5x", "5m3", "s", True, "1e3s"])
def test_bad_durations_are_refused(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_budget_bounds_and_reading() -> None:
    assert "between 1 s and 86400 s" in (check_budget(0.5) or "")
    assert check_budget(86_401) is not None
    assert format_duration(250) == "4m10s" and format_duration(0.2) == "1s" and format_duration(math.inf) == "off"


@pytest.mark.parametrize(
    ("where", "value", "expect"),
    [
        ("ci", '"0s"', "between 1 s"),
        ("ci", '"2 days"', "not a duration"),
        ("ci.quick", "100000", "between 1 s"),
        ("op", '"fast"', "not a duration"),
        ("cost", '"huge"', "cost"),
    ],
)
def test_checker_places_bad_budgets(tmp_path: Path, where: str, value: str, expect: str) -> None:
    extra = f"budget = {value}" if where == "op" else (f"cost = {value}" if where == "cost" else "")
    top = {"ci": f"[ci]\nbudget = {value}\n", "ci.quick": f"[ci.quick]\nbudget = {value}\n"}.get(where, "")
    ws = workspace(tmp_path, extra=extra, top=top)
    with pytest.raises(ConfigError) as err:
        load_config(ws)
    problem = next(p for p in err.value.problems if expect in p.message)
    line = (ws / "gpuemu.toml").read_text().splitlines()[problem.line - 1]
    assert value in line, (problem, line)


def test_tile_hints_are_checked(tmp_path: Path) -> None:
    ws = workspace(tmp_path, ktile=", tile = 0")
    with pytest.raises(ConfigError) as err:
        load_config(ws)
    assert any("tile size must be in 1.." in p.message for p in err.value.problems)
    ws = workspace(tmp_path, ktile=", tile = 32, block = 32")
    with pytest.raises(ConfigError, match="tile and block mean the same"):
        load_config(ws)


def test_config_budgets_resolve(tmp_path: Path) -> None:
    cfg = load_config(workspace(tmp_path, extra='budget = "30s"\ncost = "high"', top='[ci]\nbudget = "5m"\n'))
    op = cfg.op("mm")
    assert (op.budget, op.cost, cfg.ci.budget, cfg.ci.quick_budget) == (30.0, "high", 300.0, None)
    b = resolve(cfg, "thorough", [op], None)
    assert (b.run, b.run_source, b.per_op) == (300.0, "[ci] budget", {"mm": (30.0, "op budget")})
    off = resolve(cfg, "thorough", [op], math.inf)  # --budget off: nothing at all
    assert not off.active and off.off
    plain = load_config(workspace(tmp_path))
    for mode in ("quick", "thorough", "fuzz"):  # no time budget by default: which cases run never depends on
        b = resolve(plain, mode, list(plain.ops), None)  # the machine's speed (high-cost ops: a work budget)
        assert not b.active and not b.off


def test_cost_model_fit() -> None:
    obs = [(n, 0.05 + 2e-6 * n) for n in (100, 5_000, 40_000, 200_000)]
    m = fit(obs)
    assert m is not None and m.per_case == pytest.approx(0.05, rel=1e-6) and m.per_element == pytest.approx(2e-6)
    same = fit([(1000, 0.2), (1000, 0.2)])
    assert same is not None and same.per_case == pytest.approx(0.1) and same.per_element == pytest.approx(1e-4)
    assert fit([]) is None


def _plan(tmp_path: Path, n: int = 100, **kw: str):
    cfg = load_config(workspace(tmp_path, **kw))
    op = cfg.op("mm")
    specs = plan_cases(op, "thorough", 0, n)
    return op, specs, targets(specs, minimum_needs(op) + structure_needs(op))


def test_every_class_runs_when_the_budget_allows_that_many_cases(tmp_path: Path) -> None:
    op, specs, goals = _plan(tmp_path)
    model = CostModel(0.01, 1e-7)  # large cases are dear: a plain prefix of the plan would not fit
    full = sum(model.cost(s) for s in specs)
    allowance = full / 8
    extras = smaller_seeds(op, specs, lambda _s: True)
    pick = select([], specs, extras, goals, model, allowance, len(specs))
    assert pick.seconds <= allowance and len(pick.specs) < len(specs)
    cov = coverage(specs, pick.specs, goals)
    assert cov["cut_classes"] == [] and cov["covered"] == cov["classes"] == len(goals)
    for axis in ("dtype", "layout", "distribution", "shape"):
        assert cov["axes"][axis]["covered"] == cov["axes"][axis]["planned"], axis
    assert cov["axes"]["distribution"]["planned"] == sorted(op.distributions)  # each of the op's 18


def test_a_budget_below_the_classes_reports_what_it_cut(tmp_path: Path) -> None:
    op, specs, goals = _plan(tmp_path)
    model = CostModel(1.0, 0.0)  # one second a case whatever its size
    pick = select([], specs, [], goals, model, 5.0, len(specs))
    assert len(pick.specs) == 5
    cov = coverage(specs, pick.specs, goals)
    assert cov["cut_classes"] and cov["covered"] + len(cov["cut_classes"]) == cov["classes"]
    covered_dists = {s.distribution for s in pick.specs}
    cut_dists = {c.removeprefix("distribution ") for c in cov["cut_classes"] if c.startswith("distribution ")}
    assert cut_dists == set(op.distributions) - covered_dists  # every class not run is named, none silently


def test_stand_ins_replay_from_their_seed_and_stay_in_scope(tmp_path: Path) -> None:
    op, specs, _ = _plan(tmp_path, n=40)
    only16 = lambda s: s.dtype == "float16"  # noqa: E731  (a fuzz --dtype filter)
    extras = smaller_seeds(op, specs, only16)
    median = sorted(work(s) for s in specs)[len(specs) // 2]
    assert extras and all(s.dtype == "float16" and work(s) <= median for s in extras)
    assert all(s.seed > max(p.seed for p in specs) for s in extras)
    for s in extras:
        assert derive_case(op, s.seed) == s  # a budget chooses seeds; it never changes what one means


def test_run_budget_is_shared_by_water_filling() -> None:
    grants = allocate({"cheap": 1.0, "mid": 10.0, "dear": 100.0}, {}, 30.0, None)
    assert grants["cheap"] == 1.0 and grants["mid"] == 10.0 and grants["dear"] == pytest.approx(19.0)
    capped = allocate({"a": 50.0, "b": 50.0}, {"a": 5.0}, 60.0, 40.0)
    assert capped["a"] == 5.0 and capped["b"] == 40.0  # its cap, and no op beyond the wall time left
    assert allocate({"a": 9.0}, {"a": 0.0}, None, None) == {"a": 0.0}  # a spent cap is a cap, not "none"


def test_small_scope_shapes_for_high_cost_ops(tmp_path: Path) -> None:
    cfg = load_config(workspace(tmp_path, extra='cost = "high"', ktile=", tile = 32"))
    op = cfg.op("mm")
    assert tiled_dims(op) == ["K"]  # declared: only K is tiled, M, N and the batch stay small
    small, classes = small_scope_values(op.dims["K"], True)
    assert small == (1, 2, 3) and classes == (31, 32, 33, 65)
    specs = [derive_case(op, s) for s in range(400)]
    smalls = [s for s in specs if s.strategy == "small"]
    assert len(smalls) >= 150  # half the window
    assert {s.dims["K"] for s in smalls} == {1, 2, 3, 31, 32, 33, 65}  # every boundary class appears
    assert all(s.dims[d] in (1, 2, 3) for s in smalls for d in ("B", "M", "N"))
    assert {s.strategy for s in specs} == {"small", "boundary", "default", "regular", "random"}  # large remain
    for s in smalls[:20]:
        assert derive_case(op, s.seed) == s


def test_small_scope_without_hints_tiles_the_inner_dims(tmp_path: Path) -> None:
    cfg = load_config(workspace(tmp_path, extra='cost = "high"'))
    op = cfg.op("mm")
    assert tiled_dims(op) == ["K", "M", "N"]  # the last two axes of some input; B leads (program instances)
    _, classes = small_scope_values(op.dims["M"], True)
    want = {v for t in DEFAULT_TILES for v in (t - 1, t, t + 1, 2 * t + 1) if v <= 600}
    assert set(classes) == want
    smalls = [derive_case(op, s) for s in range(300)]
    smalls = [s for s in smalls if s.strategy == "small"]
    assert all(s.dims["B"] in (1, 2, 3) for s in smalls)
    assert all(sum(s.dims[d] > 3 for d in ("K", "M", "N")) <= 1 for s in smalls)  # one focus dim at a time
    (tmp_path / "n").mkdir()
    normal = load_config(workspace(tmp_path / "n")).op("mm")
    assert all(derive_case(normal, s).strategy != "small" for s in range(64))  # other ops: seeds unchanged


def _greedy_cover(done, planned, extras, goals, costs, allowance, room):  # type: ignore[no-untyped-def]
    """The cover as select() first computed it: every case looked at for every pick (the reference)."""
    planned_seeds = {s.seed for s in planned}
    pool = list(planned) + [s for s in extras if s.seed not in planned_seeds]
    uncovered = set(range(len(goals))) - {j for s in done for j, g in enumerate(goals) if g.met(s)}
    picked: list[int] = []
    spent = 0.0
    while uncovered and len(picked) < room:
        best, pick = None, -1
        for i, s in enumerate(pool):
            if s.seed in picked or spent + costs[s.seed] > allowance:
                continue
            gain = sum(1 for j in uncovered if goals[j].met(s))
            if gain:
                key = (gain / max(costs[s.seed], 1e-9), -int(s.seed not in planned_seeds), -i)
                if best is None or key > best:
                    best, pick = key, i
        if pick < 0:
            break
        picked.append(pool[pick].seed)
        spent += costs[pool[pick].seed]
        uncovered -= {j for j in uncovered if goals[j].met(pool[pick])}
    return sorted(picked)


@pytest.mark.parametrize("trial", range(6))
def test_select_picks_the_cover_a_full_greedy_scan_picks(trial: int) -> None:
    """select()'s lazy greedy (a heap of stale gains) must choose exactly the cases the plain greedy does, ties
    and allowance included: a cut is a function of the plan and the model, the same on every machine."""
    import random

    rng = random.Random(trial)
    dists = ["normal", "uniform", "large", "special", "ties"]
    layouts = ["contiguous", "transposed"]
    specs = [
        CaseSpec(
            "op",
            seed,
            "random",
            rng.choice(["float32", "float16"]),
            rng.choice(layouts),
            rng.choice(dists),
            {"N": rng.randint(1, 300)},
            {"x": (1,)},
        )
        for seed in range(rng.randint(40, 160))
    ]
    goals = targets(specs, [])
    goals += [Target("tile", f"N past {t}", test=lambda s, t=t: s.dims["N"] > t) for t in (16, 64, 128, 256)]
    costs = {s.seed: float(rng.choice([1, 2, 3, s.dims["N"]])) for s in specs}  # many ties

    class Costs:
        def cost(self, s: CaseSpec) -> float:
            return costs[s.seed]

    planned, extras = specs[: len(specs) // 2], specs[len(specs) // 2 :]
    done = planned[:2] if trial % 2 else []
    allowance = math.inf if trial < 3 else 40.0
    room = len(goals) if trial != 5 else 4
    got = select(done, planned[len(done) :], extras, goals, Costs(), allowance, room + len(done))
    want = _greedy_cover(done, planned[len(done) :], extras, goals, costs, allowance, room)
    assert [s.seed for s in got.cover] == want
