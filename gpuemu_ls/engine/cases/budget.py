"""Fitting a run into a time budget: which of the planned cases run, and what the budget cut.

A budget never changes what a seed means; it only chooses which seeds run. The orchestrator
(:mod:`gpuemu_ls.engine.run.budgeted`) runs an op's first cases, fits a :class:`CostModel` (seconds per
case and per element) to them, and asks :func:`select` for the rest:

1. **Coverage first.** Every *class* the full plan covers (each dtype, layout, distribution and shape
   strategy it contains, and each of its coverage needs: dims at their minimum, structures at a boundary
   shape) is a :class:`Target`. Cases are picked greedily by targets gained per predicted second, from the
   planned cases and from *smaller* seeds beyond the plan that the run's filter keeps (the small-scope
   hypothesis: a class is exercised as well by its cheapest case).
2. **Then the plan**, in seed order, each case that still fits (large sizes stay, sampled within the
   budget); then smaller seeds beyond the plan, up to the planned count.

What does not fit is reported: :func:`coverage` lists each axis' classes planned and run, and the cut.

**The default budget is work, not time** (:func:`fit_work`). An op whose cost is high (declared, or an op that
imports triton: cases/plan.py's small-scope shapes) runs every coverage class by its cheapest case, then the
planned cases in seed order while their work (:func:`work`, elements) stays within a share of the full plan's
(:data:`DEFAULT_WORK_SHARE`), then smaller seeds beyond the plan up to the planned count. Work is a function of
the plan alone, so the same cases run on every machine, loaded or quiet: a verdict never depends on the CI
runner's speed. A time budget (``--budget``, ``[ci] budget``, an op's ``budget``) replaces it when set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..config.model import OpConfig
from .plan import STRATEGIES, CaseSpec, Need, derive_case

#: Cases run before an op is planned to its budget: enough to see a fixed and a per-element cost.
PROBE_CASES = 3
#: Seeds scanned beyond the plan for smaller stand-ins, per planned case (deriving one takes ~50 us).
EXTRA_SCAN = 8
#: The same for a work budget's coverage cases, which it runs whatever they cost: a wider scan finds each
#: class a cheap case (a boundary shape with that distribution) where the plan has only a large one.
COVER_SCAN = 64
#: No bound on a coverage stand-in's size: the cheapest case of each class wins anyway.
MAX_WORK = 1 << 62
#: The axes a coverage class lives on, with the CaseSpec field each reads, in report order.
AXES = (("dtype", "dtype"), ("layout", "layout"), ("distribution", "distribution"), ("shape", "strategy"))


def work(spec: CaseSpec) -> int:
    """A case's size for the cost model: the product of its dims (a contraction's iteration space), or its
    input elements when those are more (inputs that do not share dims)."""
    prod = 1
    for v in spec.dims.values():
        prod *= max(int(v), 1)
    elements = sum(math.prod(s) for s in spec.shapes.values())
    return max(prod, elements, 1)


@dataclass(frozen=True)
class CostModel:
    """Predicted seconds of a case: ``per_case + per_element * work(spec)``."""

    per_case: float
    per_element: float

    def cost(self, spec: CaseSpec) -> float:
        return self.cost_of(work(spec))

    def cost_of(self, n: int) -> float:
        """Predicted seconds of a case of work ``n``."""
        return self.per_case + self.per_element * n

    def to_dict(self) -> dict[str, float]:
        return {"per_case": self.per_case, "per_element": self.per_element}


def fit(observations: Iterable[tuple[int, float]]) -> CostModel | None:
    """A cost model from (work, seconds) of cases that ran; None without any.

    With sizes at least 2x apart, the least-squares line (slope and intercept clipped at 0). With one size
    only, half the time is taken as fixed and half as per element: a guess that neither makes larger cases
    free nor smaller ones as dear as the probe.
    """
    obs = [(max(int(n), 1), max(float(t), 0.0)) for n, t in observations]
    if not obs:
        return None
    ns = [n for n, _ in obs]
    mean_t = sum(t for _, t in obs) / len(obs)
    if max(ns) < 2 * min(ns):
        mean_n = sum(ns) / len(ns)
        return CostModel(mean_t / 2, mean_t / (2 * mean_n))
    mean_n = sum(ns) / len(ns)
    var = sum((n - mean_n) ** 2 for n in ns)
    slope = max(0.0, sum((n - mean_n) * (t - mean_t) for n, t in obs) / var) if var else 0.0
    return CostModel(max(0.0, mean_t - slope * mean_n), slope)


#: A high-cost op's default budget by mode: the share of its full plan's work its cases may take once every
#: coverage class ran. Thorough: a quarter (the large planned cases are sampled, the small ones all run);
#: quick: half (its plan is already small). benchmarks/bench_triton.py (README row 11) measures what it saves.
DEFAULT_WORK_SHARE = {"thorough": 0.25, "quick": 0.5}
#: What every case costs in work whatever its size (a launch, the reference, the comparison), in elements:
#: without it a thousand one-element cases would look free.
WORK_PER_CASE = 1024
#: The cost model of a work budget: elements, the same on every machine.
WORK_MODEL = CostModel(WORK_PER_CASE, 1.0)
#: Cases first, work on ties: what a cover that must fit in a count minimises.
COUNT_MODEL = CostModel(1.0, 1e-12)


def fit_total(observations: Iterable[tuple[int, float]]) -> CostModel | None:
    """A cost model that predicts the *sum* over many cases well from mostly small ones: the fixed cost is the
    median time of the smallest third, the per-element cost whatever time is left per element. A least-squares
    line through a dozen tiny cases and one large one can be off tenfold at the plan's large sizes (one slow
    failing case steepens it); this one is exact on the total of the cases it saw."""
    obs = sorted((max(int(n), 1), max(float(t), 0.0)) for n, t in observations)
    if not obs:
        return None
    small = sorted(t for _, t in obs[: max(1, len(obs) // 3)])
    fixed = small[len(small) // 2]
    total_n = sum(n for n, _ in obs)
    per_element = max(0.0, sum(t for _, t in obs) - fixed * len(obs)) / total_n
    return CostModel(fixed, per_element)


@dataclass(frozen=True)
class Target:
    """A coverage class a run should contain: a value on one axis, or a coverage need."""

    axis: str  # dtype | layout | distribution | shape | need
    value: str
    need: Need | None = None

    @property
    def label(self) -> str:
        return f"{self.axis} {self.value}" if self.axis != "need" else self.value

    def met(self, spec: CaseSpec) -> bool:
        if self.need is not None:
            return self.need.met(spec)
        field = dict(AXES)[self.axis]
        return getattr(spec, field) == self.value


def targets(specs: list[CaseSpec], needs: list[Need]) -> list[Target]:
    """The classes a planned run covers: each axis value its cases take, and each need one of them meets."""
    out: list[Target] = []
    for axis, field in AXES:
        seen = {getattr(s, field) for s in specs}
        order = STRATEGIES if axis == "shape" else sorted(seen)
        out += [Target(axis, v) for v in order if v in seen]
    out += [Target("need", n.label, n) for n in needs if any(n.met(s) for s in specs)]
    return out


def plan_filter(specs: list[CaseSpec], base: Callable[[CaseSpec], bool]) -> Callable[[CaseSpec], bool]:
    """``base`` narrowed to the dtypes, layouts and distributions the planned cases take (a fuzz run's
    ``--dtype``/``--layout``/``--distribution`` included), so a stand-in never leaves the run's scope."""
    allowed = {field: {getattr(s, field) for s in specs} for _axis, field in AXES if field != "strategy"}

    def keep(spec: CaseSpec) -> bool:
        return base(spec) and all(getattr(spec, f) in vals for f, vals in allowed.items())

    return keep


def smaller_seeds(
    op: OpConfig,
    specs: list[CaseSpec],
    accept: Callable[[CaseSpec], bool],
    *,
    limit: int | None = None,
    scan: int = EXTRA_SCAN,
    largest: int | None = None,
) -> list[CaseSpec]:
    """Seeds after the plan's last whose case ``accept`` keeps and whose work is at most ``largest`` (default:
    the plan's median case), in seed order, at most ``limit`` (default: the planned count), looking at
    ``scan`` seeds per planned case."""
    if not specs:
        return []
    sizes = sorted(work(s) for s in specs)
    bound = sizes[len(sizes) // 2] if largest is None else largest
    taken = {s.seed for s in specs} | set(op.seeds)
    limit = len(specs) if limit is None else limit
    out: list[CaseSpec] = []
    start = max(s.seed for s in specs) + 1
    for seed in range(start, start + scan * max(len(specs), 1)):
        if len(out) >= limit:
            break
        if seed in taken:
            continue
        spec = derive_case(op, seed)
        if accept(spec) and work(spec) <= bound:
            out.append(spec)
    return out


@dataclass
class Selection:
    """What :func:`select` chose: coverage cases first, then the rest, with their predicted seconds."""

    cover: list[CaseSpec]
    fill: list[CaseSpec]
    seconds: float

    @property
    def specs(self) -> list[CaseSpec]:
        return self.cover + self.fill


def select(
    done: list[CaseSpec],
    planned: list[CaseSpec],
    extras: list[CaseSpec],
    goals: list[Target],
    model: CostModel,
    allowance: float,
    max_count: int,
) -> Selection:
    """Cases to run next within ``allowance`` seconds and ``max_count - len(done)`` cases.

    Coverage first: greedily the case that gains the most targets not yet met (by ``done`` or the cases
    chosen) per predicted second, planned cases before stand-ins on ties; then the planned cases in their
    order, then the stand-ins, each that still fits.
    """
    room = max(0, max_count - len(done))
    uncovered = [t for t in goals if not any(t.met(s) for s in done)]
    planned_seeds = {s.seed for s in planned}
    pool: list[CaseSpec] = list(planned) + [s for s in extras if s.seed not in planned_seeds]
    costs = {s.seed: model.cost(s) for s in pool}
    chosen: set[int] = set()
    cover: list[CaseSpec] = []
    spent = 0.0
    while uncovered and len(cover) < room:
        best: tuple[float, int, int] | None = None
        pick: CaseSpec | None = None
        for i, s in enumerate(pool):
            if s.seed in chosen or spent + costs[s.seed] > allowance:
                continue
            gain = sum(1 for t in uncovered if t.met(s))
            if gain:
                key = (gain / max(costs[s.seed], 1e-9), -int(s.seed not in planned_seeds), -i)
                if best is None or key > best:
                    best, pick = key, s
        if pick is None:
            break
        chosen.add(pick.seed)
        cover.append(pick)
        spent += costs[pick.seed]
        uncovered = [t for t in uncovered if not t.met(pick)]
    fill: list[CaseSpec] = []
    for s in pool:  # planned first, in plan order; then the stand-ins in seed order
        if len(cover) + len(fill) >= room:
            break
        if s.seed not in chosen and spent + costs[s.seed] <= allowance:
            chosen.add(s.seed)
            fill.append(s)
            spent += costs[s.seed]
    by_seed = sorted(fill, key=lambda s: (s.seed not in planned_seeds, s.seed))
    return Selection(sorted(cover, key=lambda s: s.seed), by_seed, spent)


def budget_entry(
    planned: list[CaseSpec],
    ran: list[CaseSpec],
    goals: list[Target],
    *,
    seconds: float | None,
    source: str,
    full_estimate: float,
    model: dict[str, float] | None,
    **more: Any,
) -> dict[str, Any]:
    """An op's ``budget`` entry, time or work: cases planned, run, cut and smaller, the classes by axis."""
    planned_seeds = {s.seed for s in planned}
    ran_planned = sum(1 for s in ran if s.seed in planned_seeds)
    cov = coverage(planned, ran, goals)
    return {
        "seconds": round(seconds, 3) if seconds is not None else None,
        "source": source,
        "planned": len(planned),
        "ran": len(ran),
        "cut_cases": len(planned) - ran_planned,
        "smaller_cases": len(ran) - ran_planned,
        "classes": cov["classes"],
        "covered": cov["covered"],
        "cut_classes": cov["cut_classes"],
        "axes": cov["axes"],
        "full_estimate": round(full_estimate, 3),
        "model": model,
        **more,
    }


@dataclass
class WorkCut:
    """What a work budget kept of an op's plan: the cases to run (pinned, coverage, fill) and the figures."""

    planned: list[CaseSpec]
    specs: list[CaseSpec]
    goals: list[Target]
    share: float
    allowed: float  # elements the fill could spend (the share of the full plan's work)
    source: str

    @property
    def full_work(self) -> float:
        return sum(WORK_MODEL.cost(s) for s in self.planned)

    @property
    def work(self) -> float:
        return sum(WORK_MODEL.cost(s) for s in self.specs)

    def report(self, ran: list[CaseSpec], full_estimate: float) -> dict[str, Any]:
        """The op's ``budget`` entry, shaped like a time budget's (results.budget_summary reads both), with
        ``work`` in elements instead of ``seconds``; ``full_estimate``: seconds the whole plan would take."""
        return budget_entry(
            self.planned,
            ran,
            self.goals,
            seconds=None,
            source=self.source,
            full_estimate=full_estimate,
            model=None,
            work={
                "share": self.share,
                "ran": int(sum(WORK_MODEL.cost(s) for s in ran)),
                "full": int(self.full_work),
                "unit": "elements",
            },
        )


def fit_work(
    op: OpConfig,
    specs: list[CaseSpec],
    accept: Callable[[CaseSpec], bool],
    needs: list[Need],
    share: float,
    source: str,
) -> WorkCut:
    """The cases a work budget of ``share`` of ``specs``' work keeps: the op's pinned seeds, then every
    coverage class by its cheapest case (planned, or a smaller seed beyond the plan that ``accept`` keeps),
    whatever it costs, then the planned cases in seed order and the smaller seeds while the share lasts.
    Deterministic: a function of the plan only."""
    goals = targets(specs, needs)
    pinned = [s for s in specs if s.seed in set(op.seeds)]
    rest = [s for s in specs if s.seed not in set(op.seeds)]
    extras = smaller_seeds(op, specs, accept)
    wide = smaller_seeds(op, specs, accept, limit=COVER_SCAN * len(specs), scan=COVER_SCAN, largest=MAX_WORK)
    cover = _cover(pinned, rest, wide, goals, len(specs))
    taken = {s.seed for s in pinned + cover}
    allowed = share * sum(WORK_MODEL.cost(s) for s in specs)
    spent = sum(WORK_MODEL.cost(s) for s in pinned + cover)
    fill = select(
        pinned + cover,
        [s for s in rest if s.seed not in taken],
        [s for s in extras if s.seed not in taken],
        [],
        WORK_MODEL,
        max(0.0, allowed - spent),
        len(specs),
    ).fill
    return WorkCut(specs, pinned + cover + fill, goals, share, allowed, source)


def _cover(
    pinned: list[CaseSpec], rest: list[CaseSpec], wide: list[CaseSpec], goals: list[Target], count: int
) -> list[CaseSpec]:
    """Cases that cover every class in ``goals`` the pinned ones do not: the cheapest cover (classes gained per
    element) when it fits in the planned ``count``; else the one with the fewest cases (most classes per case,
    the cheaper on ties), as a quick run of 8 cases may have to; else the cheapest without a count: a class
    is never dropped for a count (its cases are the smallest there are)."""
    for model, limit in ((WORK_MODEL, count), (COUNT_MODEL, count), (WORK_MODEL, count + len(goals))):
        cover = select(pinned, rest, wide, goals, model, math.inf, limit).cover
        if all(any(t.met(s) for s in pinned + cover) for t in goals):
            return cover
    return cover


def coverage(planned: list[CaseSpec], ran: list[CaseSpec], goals: list[Target]) -> dict[str, Any]:
    """Per axis, the classes the plan had and those the cases that ran cover; the needs likewise; and
    the cut classes as labels (``"distribution ties"``, ``"masked_rows at a boundary shape"``)."""
    axes: dict[str, dict[str, list[str]]] = {}
    cut: list[str] = []
    for t in goals:
        key = t.axis if t.axis != "need" else "needs"
        entry = axes.setdefault(key, {"planned": [], "covered": []})
        entry["planned"].append(t.value)
        if any(t.met(s) for s in ran):
            entry["covered"].append(t.value)
        else:
            cut.append(t.label)
    return {
        "axes": axes,
        "classes": len(goals),
        "covered": len(goals) - len(cut),
        "cut_classes": cut,
        "planned_cases": len(planned),
    }


__all__ = [
    "AXES",
    "DEFAULT_WORK_SHARE",
    "PROBE_CASES",
    "WORK_MODEL",
    "WORK_PER_CASE",
    "CostModel",
    "Selection",
    "Target",
    "WorkCut",
    "budget_entry",
    "coverage",
    "fit",
    "fit_total",
    "fit_work",
    "plan_filter",
    "select",
    "smaller_seeds",
    "targets",
    "work",
]
