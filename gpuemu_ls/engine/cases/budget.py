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

**The default budget is work, not time** (:func:`fit_work`). An op whose cost is high (declared, an op that
imports triton: cases/plan.py's small-scope shapes, or one whose probe case launched a Triton kernel in the
interpreter: run/cost_probe.py) keeps every coverage class (:func:`cover_goals`) by the cheapest cases that are
not degenerate, then the plan's cheaper cases up to :data:`CUT_CASES` in all while the cut's work stays
within a share of the full plan's (:data:`DEFAULT_WORK_SHARE`). Work is counted, not timed: interpreter
operations predicted from the op's probe cases (:class:`CountModel`), or elements times tiles
(:class:`WorkModel`) where nothing was counted (a face that plans before it runs anything). Either is a
function of the op and its plan alone, so the same cases run on every machine, loaded or quiet: a verdict
never depends on the CI runner's speed. A time budget (``--budget``, ``[ci] budget``, an op's ``budget``)
replaces it when set.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ..config.model import OpConfig
from .plan import (
    DEFAULT_TILES,
    HIDING_DISTRIBUTIONS,
    STRATEGIES,
    CaseSpec,
    Need,
    derive_case,
    entry_dims,
    minimum_needs,
    tiled_dims,
)

#: Cases run before an op is planned to its budget: enough to see a fixed and a per-element cost.
PROBE_CASES = 3
#: Seeds scanned beyond the plan for smaller stand-ins, per planned case (deriving one takes ~50 us).
EXTRA_SCAN = 8
#: The same for a work budget's coverage cases, which it runs whatever they cost: a wider scan finds each
#: class a cheap case (a boundary shape with that distribution) where the plan has only a large one. The scan
#: is paid on the supervisor's CPU, beside the workers: 32 seeds a case (4,096 at most) cost a third of a
#: small-kernel corpus's run for members a few percent cheaper (benchmark 13: 34.7 s -> 27.2 s at 16; on
#: benchmarks/triton_ws, kernels at their real sizes, the cut's counted work grew ~7 % and its time ~5 %).
COVER_SCAN = 16
#: At most this many seeds are scanned for stand-ins (deriving one takes ~0.1 ms): a plan of 100,000 cases
#: would otherwise spend minutes looking for smaller ones.
MAX_SCAN = 2048
#: No bound on a coverage stand-in's size: the cheapest case of each class wins anyway.
MAX_WORK = 1 << 62
#: The axes a coverage class lives on, with the CaseSpec field each reads, in report order.
AXES = (("dtype", "dtype"), ("layout", "layout"), ("distribution", "distribution"), ("shape", "strategy"))
_FIELD = dict(AXES)


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
#: Cases a cut fills up to with the plan's further cases, in seed order, past its pinned and coverage cases
#: (which run whatever their count), while it stays within its share of the plan's work. The share alone keeps
#: nearly every case where a case costs about the same whatever its size (small kernels in the interpreter: a
#: launch and a few programs); this bound keeps the cut a cut there, and the coverage cases keep every class.
CUT_CASES = 24
#: Value distributions a tile or layout class in one dtype is shown with: finite values of ordinary size that
#: differ from element to element, where a lost tail, a dropped carry, an overwritten accumulator or a stride
#: read wrong always changes the result (a NaN, an overflow out of range, a row of zeros or of one value, values
#: under the dtype's absolute tolerance (``small``, ``subnormal``) or a peak that swamps the rest can hide it).
#: ``wide`` (normal x 10) and ``tail_max`` (normal rows whose last element is their maximum) are such values
#: too: a case of them meets both its distribution's class and a layout's, so a cut needs fewer cases.
PLAIN_DISTRIBUTIONS = ("normal", "uniform", "integers", "positive", "wide", "tail_max")
#: The smallest tile a kernel is assumed to walk a dim in (cases/plan.py's DEFAULT_TILES start there).
WORK_TILE = 16


@dataclass(frozen=True)
class WorkModel:
    """The cost of a case under a work budget, the same on every machine: its work (:func:`work`, elements)
    times the tiles of 16 its largest tiled dim spans, plus :data:`WORK_PER_CASE`. The span factor is what an
    interpreter pays per loop trip: a kernel that walks a dim in tiles revisits the other dims once per
    tile (attention is quadratic in the sequence), so of two cases with equal elements the one with the
    longer tiled dim costs more."""

    tiled: tuple[str, ...] = ()

    def cost(self, spec: CaseSpec) -> float:
        longest = max((spec.dims.get(d, 1) for d in self.tiled), default=1)
        return WORK_PER_CASE + work(spec) * max(1.0, longest / WORK_TILE)


#: What a case costs in the interpreter besides its kernels' operations, in operations (~50 us each): a launch
#: (arguments copied to the host and back, ~1 ms), a program instance (its grid index and arguments), and
#: gpuemu's own work per case outside the kernel (inputs, the reference, the checks: a few ms).
LAUNCH_OPS = 20
PROGRAM_OPS = 1
CASE_OPS = 100
#: Elements of the case per operation's worth of numpy work (generating, the reference, comparing).
ELEMENTS_PER_OP = 2048
#: How fast one dim's cost may grow with it, as a power: a kernel cubic in a dim is already rare.
MAX_EXPONENT = 4.0


def kernel_cost(counts: tuple[int, int, int]) -> float:
    """Interpreter operations of a case's kernels from its counts (launches, programs, operations)."""
    launches, programs, ops = counts
    return launches * LAUNCH_OPS + programs * PROGRAM_OPS + ops


@dataclass(frozen=True)
class Growth:
    """How a case's kernel cost grows with one dim, from two probe sizes ``lo`` < ``hi`` costing ``k_lo`` and
    ``k_hi``: the larger of the power law and the straight line through both (a quadratic attention and a tile
    loop whose programs have a fixed part are each met by one of them; both are exact at the two sizes)."""

    lo: int
    hi: int
    k_lo: float
    k_hi: float

    @functools.cached_property
    def power(self) -> float:  # cached: a cut asks thousands of cases' costs
        ratio = max(self.k_hi / self.k_lo, 1.0)
        return min(MAX_EXPONENT, math.log(ratio) / math.log(self.hi / self.lo))

    def at(self, n: int) -> float:
        n = max(n, 1)
        slope = max(self.k_hi - self.k_lo, 0.0) / (self.hi - self.lo)
        line = self.k_lo + slope * (n - self.lo)
        return max(self.k_lo * (n / self.lo) ** self.power, line, 1e-9)


@dataclass(frozen=True)
class CountModel:
    """The cost of a case in the interpreter, in operations counted on the op's probe cases
    (:func:`count_model`), the same on every machine: the probe case's kernel cost times each dim's
    :class:`Growth` from its probe size to the case's (none for a row length one program covers, linear for
    the rows of a one-program-per-row kernel, up to cubic for a matmul's tiles), never below one launch, plus
    :data:`CASE_OPS` and the case's elements (:data:`ELEMENTS_PER_OP`).

    Where a kernel launches a few programs on a few thousand elements, every case costs about the same: then
    the share of the plan's work keeps nearly every case, and the cut's count bound
    (:data:`CUT_CASES`) is what trims it."""

    base: tuple[tuple[str, int], ...]  # the probe case's dims
    kernel: float  # its kernel_cost
    growth: tuple[tuple[str, Growth], ...]
    floor: float  # what one launch of a program costs: a case's kernels at the least

    @functools.cached_property
    def _terms(self) -> tuple[tuple[str, int, Growth, float], ...]:
        """Each growing dim, its probe size and the growth there: a cut asks thousands of cases' costs."""
        base = dict(self.base)
        return tuple((d, base[d], g, g.at(base[d])) for d, g in self.growth)

    def kernel_of(self, spec: CaseSpec) -> float:
        k = self.kernel
        for d, b, g, at_base in self._terms:
            k *= g.at(spec.dims.get(d, b)) / at_base
        return max(k, self.floor)

    def cost(self, spec: CaseSpec) -> float:
        return CASE_OPS + self.kernel_of(spec) + work(spec) / ELEMENTS_PER_OP

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": dict(self.base),
            "kernel": round(self.kernel, 1),
            "growth": {d: {"sizes": [g.lo, g.hi], "ratio": round(g.k_hi / g.k_lo, 3)} for d, g in self.growth},
        }


def count_model(
    base: CaseSpec, counts: tuple[int, int, int], variants: Iterable[tuple[CaseSpec, tuple[int, int, int]]]
) -> CountModel:
    """A :class:`CountModel` from the probe case's counts and variants that each change one dim of it (a
    variant that changes more, or none, is left out; a dim no variant changed does not grow the cost)."""
    k0 = max(kernel_cost(counts), 1.0)
    growth: dict[str, Growth] = {}
    for spec, got in variants:
        changed = [d for d, v in spec.dims.items() if v != base.dims.get(d)]
        if len(changed) != 1 or min(spec.dims[changed[0]], base.dims[changed[0]]) < 1:
            continue
        d, k1 = changed[0], max(kernel_cost(got), 1.0)
        (lo, k_lo), (hi, k_hi) = sorted([(base.dims[d], k0), (spec.dims[d], k1)])
        growth[d] = Growth(lo, hi, k_lo, k_hi)
    floor = LAUNCH_OPS + PROGRAM_OPS + 1.0
    return CountModel(tuple(sorted(base.dims.items())), k0, tuple(sorted(growth.items())), floor)


def work_model(op: OpConfig) -> WorkModel:
    """The work model of ``op``: its tiled dims (cases/plan.py's :func:`tiled_dims`)."""
    return WorkModel(tuple(tiled_dims(op)))


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
    """A coverage class a run should contain: a value on one axis, a coverage need, or a tile class
    (``test``); ``guard``, when set, is what a case must also be to stand for the class (not degenerate)."""

    axis: str  # dtype | layout | distribution | shape | need | tile
    value: str
    need: Need | None = None
    test: Callable[[CaseSpec], bool] | None = dataclasses.field(default=None, compare=False)
    guard: Callable[[CaseSpec], bool] | None = dataclasses.field(default=None, compare=False)
    #: (CaseSpec field, value) a member must have besides ``test`` (``("dtype", "float16")``): what lets
    #: :func:`goals_met` look at a case's few candidate classes rather than every class
    where: tuple[str, str] | None = None

    @property
    def label(self) -> str:
        return f"{self.axis} {self.value}" if self.axis not in ("need", "tile") else self.value

    def key(self) -> tuple[str, str] | None:
        """The (field, value) every member has, where one is known: the axis value, ``where``, or a need's."""
        if self.where is not None:
            return self.where
        if self.need is not None:
            n = self.need
            for field, value in (("strategy", n.strategy), ("dtype", n.dtype), ("layout", n.layout)):
                if value is not None:
                    return field, value
            return ("distribution", n.distribution) if n.distribution is not None else None
        return (_FIELD[self.axis], self.value) if self.test is None and self.axis in _FIELD else None

    def met(self, spec: CaseSpec) -> bool:
        if self.guard is not None and not self.guard(spec):
            return False
        return self.met_unguarded(spec)

    def met_unguarded(self, spec: CaseSpec) -> bool:
        """:meth:`met` but for ``guard`` (which :func:`goals_met` asks once per case for the classes sharing it)."""
        if self.where is not None and getattr(spec, self.where[0]) != self.where[1]:
            return False
        if self.need is not None:
            return self.need.met(spec)
        if self.test is not None:
            return self.test(spec)
        return getattr(spec, _FIELD[self.axis]) == self.value


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
    ``scan`` seeds per planned case (at most :data:`MAX_SCAN` in all)."""
    if not specs:
        return []
    sizes = sorted(work(s) for s in specs)
    bound = sizes[len(sizes) // 2] if largest is None else largest
    taken = {s.seed for s in specs} | set(op.seeds)
    limit = len(specs) if limit is None else limit
    out: list[CaseSpec] = []
    start = max(s.seed for s in specs) + 1
    for seed in range(start, start + min(scan * max(len(specs), 1), MAX_SCAN)):
        if len(out) >= limit:
            break
        if seed in taken:
            continue
        spec = derive_case(op, seed)
        if accept(spec) and work(spec) <= bound:
            out.append(spec)
    return out


def goals_met(goals: list[Target], specs: Iterable[CaseSpec]) -> dict[int, frozenset[int]]:
    """The indexes of the goals each case meets, by seed. A goal with a :meth:`Target.key` is tested only on
    the cases that have it (a cut asks this of ~3,000 cases and ~70 classes per op: most classes of one axis
    value or one dtype cannot be met by a case of another)."""
    by_key: dict[tuple[str, str], list[int]] = {}
    always: list[int] = []
    for j, t in enumerate(goals):
        k = t.key()
        if k is None:
            always.append(j)
        else:
            by_key.setdefault(k, []).append(j)
    fields = sorted({k[0] for k in by_key})
    out: dict[int, frozenset[int]] = {}
    for s in specs:
        maybe = always + [j for f in fields for j in by_key.get((f, getattr(s, f)), ())]
        guarded: dict[int, bool] = {}  # by id: most classes share one guard (not degenerate)
        met: list[int] = []
        for j in maybe:
            t = goals[j]
            if t.guard is not None:
                ok = guarded.get(id(t.guard))
                if ok is None:
                    ok = guarded[id(t.guard)] = t.guard(s)
                if not ok:
                    continue
            if t.met_unguarded(s):
                met.append(j)
        out[s.seed] = frozenset(met)
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
    model: CostModel | WorkModel | CountModel | _SeedCosts,
    allowance: float,
    max_count: int,
    met_by: dict[int, frozenset[int]] | None = None,
) -> Selection:
    """Cases to run next within ``allowance`` seconds and ``max_count - len(done)`` cases.

    Coverage first: greedily the case that gains the most targets not yet met (by ``done`` or the cases
    chosen) per predicted second, planned cases before stand-ins on ties; then the planned cases in their
    order, then the stand-ins, each that still fits. ``met_by`` (:func:`goals_met`), when given, says which
    goals each case meets, by seed: a caller that selects from one pool several times tests each goal once.
    """
    room = max(0, max_count - len(done))
    planned_seeds = {s.seed for s in planned}
    pool: list[CaseSpec] = list(planned) + [s for s in extras if s.seed not in planned_seeds]
    if met_by is None:
        met_by = goals_met(goals, [*done, *pool])
    uncovered = set(range(len(goals))).difference(*(met_by[s.seed] for s in done))
    costs = {s.seed: model.cost(s) for s in pool}
    # which goals each case meets, once: the greedy below looks at every case once per pick
    meets = [met_by[s.seed] & uncovered for s in pool] if uncovered else []
    chosen: set[int] = set()
    cover: list[CaseSpec] = []
    spent = 0.0

    def key(i: int) -> tuple[float, int, int]:
        """What the greedy maximises: goals gained per predicted second, then planned first, then plan order."""
        s = pool[i]
        gain = len(meets[i] & uncovered)
        return (gain / max(costs[s.seed], 1e-9), -int(s.seed not in planned_seeds), -i)

    # Lazy greedy (Minoux): a case's gain only falls as goals are met, so a key computed earlier bounds its key
    # now; the heap's top, recomputed and still above the next bound, is the case the full scan would pick
    # (keys are unique: they end in the case's index). A pool of thousands costs a few recomputations a pick.
    heap = [(tuple(-x for x in key(i)), i) for i, m in enumerate(meets) if m]
    heapq.heapify(heap)
    while uncovered and len(cover) < room and heap:
        _, i = heapq.heappop(heap)
        s = pool[i]
        if s.seed in chosen or spent + costs[s.seed] > allowance:
            continue  # spent only grows: a case that does not fit now never will
        fresh = key(i)
        if fresh[0] <= 0:
            continue  # gains nothing any more
        if heap and tuple(-x for x in heap[0][0]) > fresh:
            heapq.heappush(heap, (tuple(-x for x in fresh), i))
            continue
        chosen.add(s.seed)
        cover.append(s)
        spent += costs[s.seed]
        uncovered -= meets[i]
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
    allowed: float  # work the fill could spend (the share of the full plan's work)
    source: str
    model: WorkModel | CountModel
    #: what the cut chose from (a counted cut of the same plan, after the op's probe cases, starts from it)
    pool: CutPool | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def unit(self) -> str:
        if isinstance(self.model, CountModel):
            return "interpreter operations, counted on the op's probe cases"
        return "elements x tiles of the longest tiled dim"

    @property
    def full_work(self) -> float:
        return sum(self.model.cost(s) for s in self.planned)

    @property
    def work(self) -> float:
        return sum(self.model.cost(s) for s in self.specs)

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
                "ran": int(sum(self.model.cost(s) for s in ran)),
                "full": int(self.full_work),
                "unit": self.unit,
                **({"model": self.model.to_dict()} if isinstance(self.model, CountModel) else {}),
            },
        )


def non_degenerate(op: OpConfig, dims: list[str] | None = None) -> Callable[[CaseSpec], bool]:
    """Whether a case has every dim of ``dims`` (default: the last two axes of the inputs, the ones a layout
    permutes and a row or a tile lives on) at 2 or more where its range allows: what a case must be to stand
    for a class under a work budget. The cheapest case of a class is often one row of
    one element, where the class cannot show: a transposed vector is the vector, a stride never steps, a row
    mask has nothing to mask."""
    inner = {d for i in op.inputs for d in entry_dims(i.shape[-2:]) if d in op.dims}
    names = (inner or set(op.dims)) if dims is None else set(dims)
    floor = {
        n: min(2, max(d.candidates) if d.candidates is not None else d.max) for n, d in op.dims.items() if n in names
    }
    seen: dict[int, bool] = {}  # by seed: a seed means one case of this op, and the cover asks many times

    def check(spec: CaseSpec) -> bool:
        if spec.seed not in seen:
            seen[spec.seed] = all(spec.dims.get(n, 2) >= f for n, f in floor.items())
        return seen[spec.seed]

    return check


def tile_targets(op: OpConfig, dtypes: list[str], distributions: Iterable[str] | None = None) -> list[Target]:
    """The boundary classes of each tiled dim (cases/plan.py's small-scope sizes, by what they exercise), with
    the other tiled dims at 2 or more (batch and heads may stay at 1: they only repeat programs). In every
    dtype of ``dtypes`` (a verdict per dtype, as the pytest plugin gives, needs each there): a partial tile
    (3 or more, neither a power of two nor a multiple of the smallest tile: a tail mask) and past the
    smallest tile (a second tile: an accumulator carried, overwritten or not rescaled). In any dtype: an
    exact tile (an off-by-one mask) and past the largest tile below the dim's maximum (where a kernel with
    a large tile first needs a second one; dear for a kernel quadratic in the dim, so once). The classes of
    one dtype are shown with :data:`PLAIN_DISTRIBUTIONS` where the run has them (``distributions``: the
    plan's, default the op's), else with any that cannot hide a wrong answer (not
    :data:`~gpuemu_ls.engine.cases.plan.HIDING_DISTRIBUTIONS`): a small plan may draw no plain values at all,
    and a class no case can meet is left out of a cut."""
    guard = non_degenerate(op, tiled_dims(op))
    plain = plain_values(op.distributions if distributions is None else distributions)

    out: list[Target] = []
    for name in tiled_dims(op):
        dim = op.dims[name]
        if dim.candidates is not None:
            continue  # a list of supported sizes (head dims): each is planned, none is a tail
        top = dim.max
        tiles = [t for t in (dim.tiles or DEFAULT_TILES) if t < top] or [min(dim.tiles or DEFAULT_TILES)]
        small, big = min(tiles), max(tiles)

        def partial(spec: CaseSpec, n: str = name, t: int = small) -> bool:
            v = spec.dims.get(n, 0)
            return v >= 3 and v & (v - 1) != 0 and v % t != 0

        def exact(spec: CaseSpec, n: str = name, ts: frozenset[int] = frozenset(tiles)) -> bool:
            return spec.dims.get(n, 0) in ts

        def past(spec: CaseSpec, n: str = name, t: int = small) -> bool:
            return spec.dims.get(n, 0) > t

        def shown(test: Callable[[CaseSpec], bool]) -> Callable[[CaseSpec], bool]:
            return lambda spec: plain(spec) and test(spec)

        for dtype in dtypes:  # ``where`` holds each to its dtype
            where = ("dtype", dtype)
            out += [
                Target("tile", f"{name} in a partial tile, {dtype}", test=shown(partial), guard=guard, where=where),
                Target("tile", f"{name} past {small}, {dtype}", test=shown(past), guard=guard, where=where),
            ]
        out.append(Target("tile", f"{name} at a tile ({', '.join(map(str, tiles))})", test=exact, guard=guard))
        if big > small:
            out.append(Target("tile", f"{name} past {big}", test=functools.partial(past, t=big), guard=guard))
    return out


def plain_values(distributions: Iterable[str]) -> Callable[[CaseSpec], bool]:
    """Whether a case's values cannot hide a wrong answer (no NaN, no overflow, not constant): one of
    :data:`PLAIN_DISTRIBUTIONS` where ``distributions`` (the plan's) has them, else any but
    :data:`~gpuemu_ls.engine.cases.plan.HIDING_DISTRIBUTIONS`."""
    ordinary = set(PLAIN_DISTRIBUTIONS) & set(distributions)

    def plain(spec: CaseSpec) -> bool:
        return spec.distribution in ordinary if ordinary else spec.distribution not in HIDING_DISTRIBUTIONS

    return plain


def layout_targets(guard: Callable[[CaseSpec], bool], specs: list[CaseSpec]) -> list[Target]:
    """Each layout the plan has in each dtype it has, not degenerate and with values that cannot hide it
    (:func:`plain_values`: constant rows read the same transposed): a stride bug shows in every dtype."""
    pairs = sorted({(s.dtype, s.layout) for s in specs})
    plain = plain_values({s.distribution for s in specs})
    return [
        Target(
            "layout",
            f"{layout} in {dtype}",
            test=lambda s, d=dtype: s.dtype == d and plain(s),  # ``where`` holds it to its layout
            guard=guard,
            where=("layout", layout),
        )
        for dtype, layout in pairs
    ]


def cover_goals(op: OpConfig, specs: list[CaseSpec], needs: list[Need], pool: list[CaseSpec]) -> list[Target]:
    """The classes a cut must keep: :func:`targets` of the plan, each tiled dim's :func:`tile_targets` and each
    (dtype, layout) of the plan (:func:`layout_targets`), each to be met by a case that is not degenerate
    (:func:`non_degenerate`) where ``pool`` (the plan and the stand-ins) has one; a dim at its minimum is
    degenerate by definition, and met with every *other* dim at 2 or more where ``pool`` has such a case (a
    size-1 dim among real ones is where a stride goes unchecked: ``.contiguous()`` leaves a size-1 dim's
    stride as it was, and a kernel that assumes it is wrong for every batch but the first); a combined class
    nothing in ``pool`` meets is left out, not reported cut."""
    guard = non_degenerate(op)
    minimums = {n.label: n.dim for n in minimum_needs(op)}
    goals: list[Target] = []
    for t in targets(specs, needs):
        if t.label in minimums:
            others = [d for d in op.dims if d != minimums[t.label]]
            strict = replace(t, guard=non_degenerate(op, others))
        else:
            strict = replace(t, guard=guard)
        goals.append(strict if any(strict.met(s) for s in pool) else t)
    dtypes = sorted({s.dtype for s in specs})
    extra = tile_targets(op, dtypes, {s.distribution for s in specs}) + layout_targets(guard, specs)
    return goals + [t for t in extra if any(t.met(s) for s in pool)]


class _SeedCosts:
    """A cost model's answers by seed (a seed is one case of an op): a cut asks each case's cost many times."""

    def __init__(self, model: WorkModel | CountModel) -> None:
        self.model = model
        self.by_seed: dict[int, float] = {}

    def cost(self, spec: CaseSpec) -> float:
        found = self.by_seed.get(spec.seed)
        if found is None:
            found = self.by_seed[spec.seed] = self.model.cost(spec)
        return found


class _Scan:
    """The cases ``accept`` keeps of a range of seeds (``skip`` left out), derived once each and kept, in seed
    order, as far as any reader has asked: a cut's searches past its wide scan (the first members of classes
    it missed, cheaper members of dear ones) walk the same seeds, and the static and the counted cut of one
    plan share them (deriving a case takes ~0.1 ms; a cut may look at 4,000)."""

    def __init__(self, op: OpConfig, accept: Callable[[CaseSpec], bool], seeds: range, skip: frozenset[int]) -> None:
        self._op, self._accept, self._skip = op, accept, skip
        self._seeds = iter(seeds)
        self._got: list[CaseSpec] = []
        self._lock = threading.Lock()  # a pool made on the planner thread is read on the op's

    def _more(self) -> bool:
        for seed in self._seeds:
            if seed in self._skip:
                continue
            spec = derive_case(self._op, seed)
            if self._accept(spec):
                self._got.append(spec)
                return True
        return False

    def derive_all(self) -> None:
        """Derive every seed of the range now: a run's planner thread does, for a pool its op's counted cut will
        read on the op's own thread, where the op's worker would wait for it."""
        with self._lock:
            while self._more():
                pass

    def __iter__(self) -> Iterator[CaseSpec]:
        i = 0
        while True:
            with self._lock:
                if i >= len(self._got) and not self._more():
                    return
                spec = self._got[i]
            yield spec
            i += 1


@dataclass
class CutPool:
    """What a work cut of one plan chooses from and must keep, whatever its cost model (:func:`cut_pool`): made
    once per plan (ahead, on the planner thread, where the op's probe cases will bring a model) and shared by
    its static and counted cuts. Read only: a cut copies what it adds to."""

    specs: list[CaseSpec]  # the plan
    kept: list[CaseSpec]  # its pinned seeds
    rest: list[CaseSpec]  # the others
    wide: list[CaseSpec]  # stand-ins of the wide scan, and the first members of tile/layout classes it missed
    extras: list[CaseSpec]  # the fill's stand-ins (no larger than the plan's median)
    goals: list[Target]
    met_by: dict[int, frozenset[int]]  # goals_met of kept, rest and wide
    beyond: _Scan  # seeds past the wide scan, up to MAX_SCAN past the plan's last

    def serves(self, specs: list[CaseSpec]) -> bool:
        return [s.seed for s in self.specs] == [s.seed for s in specs]


def cut_pool(op: OpConfig, specs: list[CaseSpec], accept: Callable[[CaseSpec], bool], needs: list[Need]) -> CutPool:
    """The model-free part of :func:`fit_work`: the plan split into pinned and other cases, the wide scan's
    stand-ins (:data:`COVER_SCAN` seeds per planned case) and the fill's, the first members of classes those
    miss (:func:`_first_members`), the classes a cut must keep (:func:`cover_goals`) and which case meets which."""
    sizes = sorted(work(s) for s in specs)
    median = sizes[len(sizes) // 2] if sizes else 0
    pinned = set(op.seeds)
    kept = [s for s in specs if s.seed in pinned]
    rest = [s for s in specs if s.seed not in pinned]
    start = max(s.seed for s in specs) + 1  # where smaller_seeds' scans begin
    wide = smaller_seeds(op, specs, accept, limit=COVER_SCAN * len(specs), scan=COVER_SCAN, largest=MAX_WORK)
    # the fill's stand-ins are smaller_seeds' default (the first EXTRA_SCAN seeds per case, no larger than the
    # median), all of them inside the wide scan: taken from it rather than derived again
    near = start + min(EXTRA_SCAN * len(specs), MAX_SCAN)
    extras = [s for s in wide if s.seed < near and work(s) <= median][: len(specs)]
    past_wide = start + min(COVER_SCAN * len(specs), MAX_SCAN)
    beyond = _Scan(op, accept, range(past_wide, start + MAX_SCAN), frozenset({s.seed for s in specs} | pinned))
    wide += _first_members(op, specs + wide, beyond)
    goals = cover_goals(op, specs, needs, specs + wide)
    met_by = goals_met(goals, [*kept, *rest, *wide])  # once: the search for dearer classes and the cover read it
    return CutPool(specs, kept, rest, wide, extras, goals, met_by, beyond)


def fit_work(
    op: OpConfig,
    specs: list[CaseSpec],
    accept: Callable[[CaseSpec], bool],
    needs: list[Need],
    share: float,
    source: str,
    *,
    model: WorkModel | CountModel | None = None,
    pool: CutPool | None = None,
) -> WorkCut | None:
    """The cases a work budget of ``share`` of ``specs``' work keeps, deterministically (a function of the
    plan and ``model`` only: :func:`work_model` of the op's dims by default, or the :class:`CountModel` its
    probe cases counted), in this order:

    1. the op's pinned seeds;
    2. every coverage class those miss (:func:`cover_goals`: no class shown only by a degenerate case), by the
       cover with the most classes per unit of work (:func:`select`), whatever its count (capped at the plan's,
       as it once was first, it picked the few cases that meet many classes at once: the largest, several
       times the work of a cover of small ones), from the plan and seeds beyond it that ``accept`` keeps
       (:data:`COVER_SCAN` per planned case, and further, up to :data:`MAX_SCAN`, for a class whose cheapest
       member so far is dearer than every kept case: :func:`_dearer_members`), whatever it costs;
    3. planned cases no dearer than the plan's median, in seed order, up to :data:`CUT_CASES` in all (the
       plan's own mix of dtype, layout, distribution and shape: a tail leak needs a partial tile *and* values
       it is not lost in), while the cut's work stays within the share; then seeds beyond the plan no larger
       than its median. The plan's dearer cases run where a class needs them: a cut's large sizes are the
       cover's (past each tiled dim's largest tile, ``also`` sizes).

    ``pool``: :func:`cut_pool` of this plan, ``accept`` and ``needs``, made ahead (else made here). None when
    the cut would not save work and the plan meets every class itself: the whole plan runs. (A quick plan of 8
    cases that misses classes runs the cut, even where it costs more: every class by a small case.)"""
    if pool is None or not pool.serves(specs):
        pool = cut_pool(op, specs, accept, needs)
    kept, rest, goals = pool.kept, pool.rest, pool.goals
    pinned = set(op.seeds)
    model = model or work_model(op)
    costs = _SeedCosts(model)  # the cover and the search for dearer classes ask each case's cost many times
    met_by = dict(pool.met_by)
    middle = sorted(costs.cost(s) for s in specs)[len(specs) // 2]
    dearer = _dearer_members(op, kept, rest + pool.wide, goals, met_by, costs, pool.beyond, middle)
    met_by.update(goals_met(goals, dearer))
    wide = pool.wide + dearer
    cover = select(kept, rest, wide, goals, costs, math.inf, len(kept) + len(goals), met_by).cover
    taken = {s.seed for s in kept + cover}
    full = sum(costs.cost(s) for s in specs)
    allowed = share * full
    spent = sum(costs.cost(s) for s in kept + cover)
    # the plan's cheaper half (cases at most its median cost), in seed order: they keep its own mix of dtype,
    # layout, distribution and shape; its dearer cases run where a class needs them (the cover)
    further = [s for s in rest if s.seed not in taken and costs.cost(s) <= middle]
    fill = select(
        kept + cover,
        further,
        [s for s in pool.extras if s.seed not in taken],
        [],
        costs,
        max(0.0, allowed - spent),
        max(CUT_CASES, len(kept) + len(cover)),
    ).fill
    chosen = sorted(kept + cover + fill, key=lambda s: (s.seed not in pinned, s.seed))
    if sum(costs.cost(s) for s in chosen) >= full and all(any(g.met(s) for s in specs) for g in goals):
        return None  # no saving and nothing the plan misses: the whole plan runs, and no budget is reported
    return WorkCut(specs, chosen, goals, share, allowed, source, model, pool)


def _first_members(op: OpConfig, pool: list[CaseSpec], beyond: Iterable[CaseSpec]) -> list[CaseSpec]:
    """For each tile and layout class (:func:`tile_targets`, :func:`layout_targets`) nothing in ``pool`` meets,
    the first case of ``beyond`` that meets it. A small plan's scan (32 seeds a case) may hold no float32 case
    past a dim's first tile at all, and a class no case meets is left out of the cut: the bug that shows there
    (an accumulator overwritten once K spans two tiles) with it."""
    dtypes = sorted({s.dtype for s in pool})
    unmet = [
        t
        for t in tile_targets(op, dtypes, {s.distribution for s in pool}) + layout_targets(non_degenerate(op), pool)
        if not any(t.met(s) for s in pool)
    ]
    found: list[CaseSpec] = []
    taken = {s.seed for s in pool}
    for spec in beyond:
        if not unmet:
            break
        if spec.seed in taken or not any(t.met(spec) for t in unmet):
            continue
        found.append(spec)
        unmet = [t for t in unmet if not t.met(spec)]
    return found


def _dearer_members(
    op: OpConfig,
    kept: list[CaseSpec],
    pool: list[CaseSpec],
    goals: list[Target],
    met_by: dict[int, frozenset[int]],
    model: WorkModel | CountModel | _SeedCosts,
    beyond: Iterable[CaseSpec],
    bound: float = 0.0,
) -> list[CaseSpec]:
    """Cheaper members of the classes whose cheapest case in ``pool`` costs more than ``bound`` (the plan's
    median case, or a kept case if dearer): of ``beyond`` (the seeds past the wide scan, to :data:`MAX_SCAN`
    past the plan's last), each that is the cheapest yet of such a class, until each has a member no dearer
    than that. ``met_by``: :func:`goals_met` of ``kept`` and ``pool``.

    A rare class (a structured distribution at a boundary shape, a dim past the largest tile in one dtype)
    may have one member among the seeds the wide scan saw, as likely the plan's largest size as its smallest:
    for a kernel quadratic in a dim, that one case can cost more than all the rest of the cut (benchmark 11's
    attention: 6 s of a 12 s op). The default shape is one size: nothing cheaper to look for."""
    bound = max((model.cost(s) for s in kept), default=bound)
    shown = frozenset().union(*(met_by[s.seed] for s in kept))
    skip = shown | {j for j, t in enumerate(goals) if (t.axis, t.value) == ("shape", "default")}
    cheapest: dict[int, float] = {}  # each class's cheapest member in the pool, in one pass over it
    for s in pool:
        wanted = met_by[s.seed] - skip
        if wanted:
            cost = model.cost(s)
            for j in wanted:
                if cost < cheapest.get(j, math.inf):
                    cheapest[j] = cost
    best = {j: c for j, c in cheapest.items() if c > bound}
    found: list[CaseSpec] = []
    taken = {s.seed for s in pool} | set(op.seeds)
    for spec in beyond:
        if not best:
            break
        if spec.seed in taken:
            continue
        cost = model.cost(spec)
        better = [j for j, c in best.items() if cost < c and goals[j].met(spec)]
        if better:
            found.append(spec)
            best.update((j, cost) for j in better)
            best = {j: c for j, c in best.items() if c > bound}
    return found


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
    "CUT_CASES",
    "DEFAULT_WORK_SHARE",
    "PROBE_CASES",
    "WORK_PER_CASE",
    "CostModel",
    "CountModel",
    "CutPool",
    "Growth",
    "Selection",
    "Target",
    "WorkCut",
    "WorkModel",
    "budget_entry",
    "count_model",
    "cover_goals",
    "coverage",
    "cut_pool",
    "fit",
    "fit_total",
    "fit_work",
    "kernel_cost",
    "layout_targets",
    "non_degenerate",
    "plain_values",
    "plan_filter",
    "select",
    "smaller_seeds",
    "targets",
    "tile_targets",
    "work",
    "work_model",
]
