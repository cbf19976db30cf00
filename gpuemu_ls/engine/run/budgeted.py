"""Time-budgeted runs: measure each op's cost from its first cases, then run what fits.

Which budget applies (:func:`resolve`), most specific first:

* ``--budget off``: none at all (what a run cost before budgets);
* an op's ``budget`` caps that op (``"off"``: the op is never cut);
* the run's budget, ``--budget`` or ``[ci] budget`` (``[ci.quick] budget`` for ``--quick``): the wall time
  for all ops, shared out after every op's first cases ran (:func:`allocate`: ops that need less than an
  equal share get what they need, the rest share what is left);
* with none of these, no time budget: an op whose cost is high gets the default *work* budget instead
  (:func:`work_cut`, cases/budget.py), in thorough and quick runs (not ``gpuemu fuzz``, whose count is the
  ask). A work budget picks its cases before anything runs, the same on every machine.

An op runs in up to three batches on its worker (:class:`BudgetedOp`): its first cases
(:data:`~gpuemu_ls.engine.cases.budget.PROBE_CASES`), which fit the cost model; the coverage cases
:func:`~gpuemu_ls.engine.cases.budget.select` picks; then, with the model refit on everything so far,
whatever else fits. A batch that overruns its share (a model that guessed wrong) stops, and what did not
run is reported as cut like the rest.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..cases.budget import (
    DEFAULT_WORK_SHARE,
    PROBE_CASES,
    CostModel,
    CountModel,
    CutPool,
    Target,
    WorkCut,
    budget_entry,
    cover_goals,
    cut_pool,
    fit,
    fit_total,
    fit_work,
    plan_filter,
    select,
    smaller_seeds,
    targets,
    work,
)
from ..cases.plan import CaseSpec, Need, also_needs, minimum_needs, quick_needs, run_filter, structure_needs
from ..config.model import Config, OpConfig
from ..oracle.outcome import CaseResult, OpOutcome, op_status
from .cost_probe import LAUNCHED

#: Seconds per case the supervisor adds to a case's own time (planning, transfers, storing): README #7.
SUPERVISOR_S = 0.001
#: How far past its share a batch may run before it is stopped: cost models are fitted on a few cases.
OVERRUN = 1.25


@dataclass(frozen=True)
class Budgets:
    """The budgets of one run: the run's own (seconds, where it came from) and each op's cap."""

    run: float | None = None
    run_source: str = ""
    per_op: dict[str, tuple[float, str]] = field(default_factory=dict)
    off: bool = False  # the run's budget is "off" (--budget off, [ci] budget = "off"): no default cut either

    @property
    def active(self) -> bool:
        return self.run is not None or bool(self.per_op)


def resolve(config: Config, mode: str, ops: list[OpConfig], given: float | None) -> Budgets:
    """The time budgets a run of ``ops`` in ``mode`` works to (see the module docstring); ``given`` is
    ``--budget`` (``math.inf`` for off)."""
    if given == math.inf:
        return Budgets(off=True)
    configured = config.ci.quick_budget if mode == "quick" else config.ci.budget
    run, source = (given, "--budget") if given is not None else (None, "")
    if run is None and configured is not None:
        run, source = configured, "[ci.quick] budget" if mode == "quick" else "[ci] budget"
    off = run == math.inf
    if off:
        run = None
    per_op: dict[str, tuple[float, str]] = {}
    for op in ops:
        if op.budget is not None and op.budget != math.inf:
            per_op[op.name] = (op.budget, "op budget")
    return Budgets(run, source, per_op, off)


def allocate(
    demands: dict[str, float], caps: dict[str, float | None], pool: float | None, wall: float | None
) -> dict[str, float | None]:
    """Seconds each op may still spend: its cap (None: unlimited) without a run budget; with one (``pool``
    worker-seconds left, ``wall`` seconds per op at most), water-filling: an op needing less than an equal
    share of what is left gets what it needs, and the others split the rest."""
    grants: dict[str, float | None] = {}
    if pool is None:
        return {name: caps.get(name) for name in demands}
    want = {n: min(d, _or_inf(caps.get(n)), _or_inf(wall)) for n, d in demands.items()}
    left, waiting = max(pool, 0.0), sorted(want, key=lambda n: (want[n], n))
    while waiting:
        share = left / len(waiting)
        name = waiting.pop(0)
        grants[name] = min(want[name], share)
        left -= grants[name]
    return grants


def _or_inf(x: float | None) -> float:
    return math.inf if x is None else x


def needs_of(op: OpConfig, mode: str) -> list[Need]:
    """The coverage needs the planner gives a run of ``mode`` (cases/plan.py), which a budget keeps too: ``also``
    sizes first (in every dtype; one a plan does not hold is no target), never cut away."""
    return also_needs(op, op.dtypes) + minimum_needs(op) + (quick_needs(op) if mode == "quick" else structure_needs(op))


def default_cut_applies(config: Config, op: OpConfig, mode: str, given: float | None) -> bool:
    """Whether the default work budget may cut ``op`` in a run of ``mode`` whose ``--budget`` is ``given``
    (``math.inf``: off), its cost aside: not where a run's time budget or "off" (given or ``[ci] budget``), the
    op's own ``budget`` (time or "off") or a fuzz run decides."""
    if mode not in DEFAULT_WORK_SHARE or op.budget is not None:
        return False
    budgets = resolve(config, mode, [op], given)
    return not (budgets.off or budgets.run is not None)


def work_cut(
    config: Config,
    op: OpConfig,
    mode: str,
    specs: list[CaseSpec],
    given: float | None,
    *,
    model: CountModel | None = None,
    pool: CutPool | None = None,
) -> WorkCut | None:
    """The default work budget's cut of ``op``'s plan (:func:`default_cut_applies`); None for a normal-cost op.
    ``model``, when given, is what the op's probe cases counted (run/cost_probe.py): they launched a Triton
    kernel, so the op is high-cost whatever its source says, and the cut is made in counted operations; else
    the op's cost as configured (declared, or what ``cost = "auto"`` read in its source) decides, in the work
    model of its dims. ``pool``: :func:`cut_pool_of` the same plan, made ahead."""
    if not specs or not default_cut_applies(config, op, mode, given):
        return None
    static = op.cost_reason.split(":")[0] or "declared"
    if model is None:
        if op.cost != "high":
            return None
        reason = static
    else:
        reason = LAUNCHED if op.cost != "high" else f"{static}; {LAUNCHED}"
    share = DEFAULT_WORK_SHARE[mode]
    accept, needs = _accept(config, op, mode, specs), needs_of(op, mode)
    return fit_work(op, specs, accept, needs, share, f"default, cost high: {reason}", model=model, pool=pool)


def cut_pool_of(config: Config, op: OpConfig, mode: str, specs: list[CaseSpec]) -> CutPool:
    """What a work cut of ``op``'s plan chooses from, whatever its cost model (cases/budget.py:cut_pool): made
    on the planner thread for an op whose probe cases will bring the model, so that only the cheap, model-bound
    part of the cut waits for them."""
    return cut_pool(op, specs, _accept(config, op, mode, specs), needs_of(op, mode))


def _accept(config: Config, op: OpConfig, mode: str, specs: list[CaseSpec]) -> Callable[[CaseSpec], bool]:
    return plan_filter(specs, run_filter(op, mode, quick_dtypes=config.ci.quick_dtypes))


def full_estimate(cut: WorkCut, outcome: OpOutcome) -> float:
    """Seconds the op's whole plan would take, from the cost model its timed cases fit (:func:`fit_total`, the
    first case left out, as it pays one-off costs); 0 when none was timed. A report figure: it chooses nothing."""
    timed = [c for c in outcome.cases if c.durations.get("case") is not None]
    model = fit_total((work(c.spec), c.durations["case"]) for c in (timed[1:] if len(timed) > 1 else timed))
    return sum(model.cost(s) + SUPERVISOR_S for s in cut.planned) if model else 0.0


Execute = Callable[[list[CaseSpec], float | None], OpOutcome]


class BudgetedOp:
    """One op of a budgeted run: probe, then coverage, then the rest, each a batch through ``execute``."""

    def __init__(
        self,
        config: Config,
        op: OpConfig,
        specs: list[CaseSpec],
        mode: str,
        execute: Execute,
        *,
        cap: tuple[float, str] | None,
        hard_stop: float | None = None,
        parallel: int = 1,
        run_source: str = "",
    ) -> None:
        self.config, self.op, self.specs, self.mode = config, op, specs, mode
        self.execute = execute
        self.cap = cap
        self.hard_stop = hard_stop  # [ci] thorough_timeout: the op's limit whatever its budget
        self.parallel = max(1, parallel)  # workers one op's batches are split over (wall = work / parallel)
        self.batches: list[OpOutcome] = []
        self.spent = 0.0  # wall seconds so far
        self.charged = 0.0  # what counts against the budget: the cases' own time (not starting a worker)
        self.model: CostModel | None = None
        self.grant: float | None = None
        self.source = cap[1] if cap else run_source  # where the op's budget came from
        self.goals: list[Target] | None = None  # the classes the cut kept (set when the plan did not fit)

    # --- measuring ------------------------------------------------------------------------------------
    def _run(self, specs: list[CaseSpec], limit: float | None) -> OpOutcome:
        if self.hard_stop is not None:
            left = self.hard_stop - self.spent
            limit = left if limit is None else min(limit, left)
        t0 = time.monotonic()
        out = self.execute(specs, None if limit is None else max(limit, 0.001))
        wall = time.monotonic() - t0
        self.spent += wall
        timed = [c.durations.get("case") for c in out.cases]
        # a batch that started a worker and imported the op (seconds for torch and triton) is charged only
        # its cases' time: the import is paid once per worker, whatever the budget
        own = sum(timed) + SUPERVISOR_S * len(timed) if timed and None not in timed else wall  # type: ignore[arg-type]
        self.charged += min(wall, own)
        self.batches.append(out)
        return out

    def _refit(self) -> None:
        timed = [c for c in self.cases if c.durations.get("case") is not None]
        # the op's first case pays one-off costs (a JIT, a lazy import, warm caches): the model leaves it out
        # once others were timed
        obs = [(work(c.spec), c.durations["case"]) for c in (timed[1:] if len(timed) > 1 else timed)]
        self.model = fit(obs) or self.model
        if self.model is None and self.cases:  # nothing timed (every case errored): the wall time per case
            self.model = CostModel(self.spent / len(self.cases), 0.0)

    @property
    def cases(self) -> list[CaseResult]:
        return [c for b in self.batches for c in b.cases]

    def stopped(self) -> bool:
        """Whether nothing more should run: a setup error, a cancel, fail-fast, a crash streak, the hard stop."""
        last = self.batches[-1] if self.batches else None
        if last is None:
            return False
        if last.status in ("cancelled", "not_run") or last.setup_error is not None:
            return True  # cancelled, nothing runnable here, or the op cannot be loaded
        if last.stopped and ("in a row" in last.stopped or "fail-fast" in last.stopped):
            return True
        return self.hard_stop is not None and self.spent >= self.hard_stop

    def probe(self) -> None:
        """Run the first cases (pinned first) and fit the cost model to them."""
        first = self.specs[: min(PROBE_CASES, len(self.specs))]
        limit = self.cap[0] * OVERRUN if self.cap else None
        self._run(first, limit)
        self._refit()

    def demand(self) -> float:
        """Predicted seconds of the planned cases not run yet (0 when stopped or all ran)."""
        if self.stopped() or self.model is None:
            return 0.0
        done = {c.seed for c in self.cases}
        return sum(self.model.cost(s) for s in self.specs if s.seed not in done) / self.parallel

    def full_estimate(self) -> float:
        """Predicted wall seconds of the whole plan: what a budget that cuts nothing must allow."""
        if self.model is None:
            return self.spent
        probe_specs = {c.seed for c in self.batches[0].cases} if self.batches else set()
        rest = sum(self.model.cost(s) for s in self.specs if s.seed not in probe_specs) / self.parallel
        return (self.batches[0].elapsed if self.batches else 0.0) + rest

    # --- the rest of the run --------------------------------------------------------------------------
    def finish(self, grant: float | None) -> OpOutcome:
        """Run what ``grant`` seconds allow (None: everything left) and return the op's one outcome."""
        self.grant = grant
        done = {c.seed for c in self.cases}
        left = [s for s in self.specs if s.seed not in done]
        budgeted = grant is not None and self.model is not None
        if left and not self.stopped():
            if not budgeted or self.demand() <= grant:  # type: ignore[operator]
                self._run(left, grant * OVERRUN + 1.0 if budgeted else None)  # type: ignore[operator]
            else:
                self._fit_rest(grant)  # type: ignore[arg-type]
        return self._outcome()

    def _fit_rest(self, grant: float) -> None:
        accept = _accept(self.config, self.op, self.mode, self.specs)
        extras = smaller_seeds(self.op, self.specs, accept)
        goals = self.goals = cover_goals(self.op, self.specs, needs_of(self.op, self.mode), self.specs + extras)
        start = self.charged
        for step in ("cover", "rest"):
            if self.stopped() or self.model is None:
                return
            done_specs = [c.spec for c in self.cases]
            done = {s.seed for s in done_specs}
            allowance = (grant - (self.charged - start)) * self.parallel
            pick = select(
                done_specs,
                [s for s in self.specs if s.seed not in done],
                [s for s in extras if s.seed not in done],
                goals,
                self.model,
                allowance,
                len(self.specs),
            )
            batch = pick.cover if step == "cover" else pick.specs
            if not batch:
                continue
            self._run(batch, max(0.0, grant - (self.charged - start)) * OVERRUN + 1.0)
            self._refit()

    def _outcome(self) -> OpOutcome:
        """The batches joined into the op's one outcome, with what the budget let run and what it cut."""
        out = OpOutcome(self.op.name, "not_run", planned=len(self.specs))
        out.cases = self.cases
        out.elapsed = self.spent
        out.setup_error = next((b.setup_error for b in self.batches if b.setup_error), None)
        out.stopped = "; ".join(dict.fromkeys(b.stopped for b in self.batches if b.stopped)) or None
        statuses = {b.status for b in self.batches}
        if "cancelled" in statuses:
            out.status = "cancelled"
        elif out.setup_error is not None:
            out.status = "failed" if any(c.status == "failed" for c in out.cases) else "error"
            out.message = next(b.message for b in self.batches if b.setup_error)
        elif not out.cases and self.batches:  # nothing ran: the first batch says why (not runnable, an error)
            out.status, out.message = self.batches[0].status, self.batches[0].message
        else:
            out.status = op_status(out.cases)
        if self.grant is not None or self.cap is not None:
            out.budget = self.report()
        if not out.message:
            out.message = out.summary()
        return out

    def report(self) -> dict[str, Any]:
        """What the budget let run and what it cut: counts, classes per axis, the time everything needs."""
        allowance = self.cap[0] if self.cap else None  # an op's own budget, as set
        if allowance is None and self.grant is not None:  # its share of the run's budget
            allowance = (self.batches[0].elapsed if self.batches else 0.0) + self.grant
        return budget_entry(
            self.specs,
            [c.spec for c in self.cases],
            self.goals or targets(self.specs, needs_of(self.op, self.mode)),
            seconds=allowance,
            source=self.source,
            full_estimate=self.full_estimate(),
            model=self.model.to_dict() if self.model else None,
        )


__all__ = [
    "BudgetedOp",
    "Budgets",
    "allocate",
    "cut_pool_of",
    "default_cut_applies",
    "full_estimate",
    "needs_of",
    "resolve",
    "work_cut",
]
