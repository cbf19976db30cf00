"""Validate ops: plan their cases, run them in worker processes, score them, store them.

This is the one entry point the CLI, the CI gate, the language server and the Python API call. Ops
run in parallel (one worker process per job); within an op, cases run in order so a replay sees the
same sequence. A worker that crashes or hangs costs one case, never the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..cases.budget import CutPool, WorkCut
from ..cases.generate import generate_inputs
from ..cases.plan import CaseSpec, derive_case, plan_cases
from ..config.keys import MAX_ITERATIONS, PLAN
from ..config.model import Config, OpConfig
from ..errors import StoreError, UsageError
from ..oracle.diagnose import diagnose
from ..oracle.outcome import TIER_COUNTS, CaseResult, OpOutcome, not_judged_reason, op_status
from ..store.db import Store
from ..store.prune import retain
from .budgeted import BudgetedOp, allocate, cut_pool_of, default_cut_applies, full_estimate, resolve, work_cut
from .confirm import make_probe
from .cost_probe import probe_cost, probes
from .cpus import available_cpus
from .runners import is_library
from .supervisor import Cancelled, SetupFailed, Worker, WorkerLost
from .worker import CASE_MARK

MODES = ("quick", "thorough")
#: Runs whose per-op result is the op's verdict; a one-case replay or a calibration is not.
VERDICT_MODES = ("quick", "thorough", "fuzz")
#: After this many crashes or timeouts in a row an op stops: its verdict (error) cannot change, and
#: each further hang would cost a whole timeout.
MAX_CONSECUTIVE_LOST = 3
#: Cases queued to a worker at once: it runs the next while the supervisor reads the last result.
PIPELINE = 2
#: Ops planned ahead of those running, per job: enough to keep every worker fed, few enough that a run of
#: thousands of ops does not hold them all planned at once.
LOOKAHEAD_PER_JOB = 2


@dataclass
class RunOptions:
    mode: str = "thorough"
    iterations: int | None = None
    seed: int | None = None
    ops: list[str] | None = None
    jobs: int = 1
    fail_fast: bool = False
    time_budget: float | None = None  # seconds per op (thorough_timeout)
    budget: float | None = None  # the run's budget in seconds (--budget); math.inf: no budget at all (run/budgeted.py)
    source: str = "cli"
    command: str = ""
    store: bool = True
    cancel: threading.Event | None = None
    on_case: Callable[[str, CaseResult, int, int], None] | None = None
    on_op_start: Callable[[str, int], None] | None = None
    on_op: Callable[[OpOutcome], None] | None = None


@dataclass
class RunResult:
    run_id: str | None
    mode: str
    seed: int
    outcomes: list[OpOutcome]
    elapsed: float = 0.0
    cancelled: bool = False
    budget: dict[str, Any] | None = None  # the run's budget: seconds and where it came from (None: no budget)
    store_replaced: bool = False  # the store file was replaced during the run (a forced reset): not stored there

    @property
    def status(self) -> str:
        statuses = {o.status for o in self.outcomes}
        for s in ("failed", "error", "not_judged", "not_run", "cancelled"):
            if s in statuses:
                return s
        return "passed"

    @property
    def exit_code(self) -> int:
        return 0 if self.status == "passed" and self.outcomes else 1


def config_hash(config: Config) -> str:
    try:
        return hashlib.sha256(config.path.read_bytes()).hexdigest()[:16]
    except OSError:
        return ""


def check_iterations(iterations: int | None) -> None:
    """UsageError unless ``iterations`` is None (the default) or an integer in 1..``MAX_ITERATIONS``."""
    if iterations is not None and (
        isinstance(iterations, bool) or not isinstance(iterations, int) or not 1 <= iterations <= MAX_ITERATIONS
    ):
        raise UsageError(f"iterations must be an integer in 1..{MAX_ITERATIONS}, got {iterations!r}")


class Plan(list[CaseSpec]):
    """The cases a run of one op covers, and the default work budget's cut that chose them (None: the whole
    plan). A list, so a caller that narrows it (a dtype filter) gets a plain one: no longer that cut."""

    cut: WorkCut | None = None
    #: what a counted cut of the whole plan chooses from, made on the planner thread ahead of the op's probe
    #: cases (None: not made; the cut makes it)
    pool: CutPool | None = None

    @classmethod
    def of(cls, specs: list[CaseSpec], cut: WorkCut | None) -> Plan:
        plan = cls(cut.specs if cut is not None else specs)
        plan.cut = cut
        return plan


def plan_op(
    config: Config,
    op: OpConfig,
    mode: str,
    iterations: int | None,
    seed: int | None,
    accept: Callable[[CaseSpec], bool] | None = None,
    *,
    cancel: threading.Event | None = None,
    budget: float | None = None,
    whole: bool = False,
) -> Plan:
    """The cases a run of ``op`` in ``mode`` covers (pinned seeds first); ``accept`` narrows thorough runs.

    Quick: ``[ci.quick]`` iterations in ``[ci] quick_dtypes`` (unset: float32 plus a few float16/bfloat16
    cases, see :func:`~gpuemu_ls.engine.cases.plan.plan_quick`). Thorough: the op's iterations, every dim's
    minimum and each structure distribution at a boundary shape covered (``plan_thorough``).
    A high-cost op's plan is cut by the default work budget (:func:`~gpuemu_ls.engine.run.budgeted.work_cut`)
    unless ``whole`` (a fuzz run's count is the ask, a calibration's sample) or a time budget applies
    (``budget``: the run's ``--budget``, ``math.inf`` for off; else ``[ci] budget``). Every face plans
    through here, so ``gpuemu test``, the gate, the editor and the Python API run the same cases.
    ``iterations``, when given, must be in 1..``MAX_ITERATIONS`` (UsageError: 0 is not "the default");
    a set ``cancel`` stops planning with :class:`~gpuemu_ls.engine.cases.plan.PlanCancelled`.
    """
    check_iterations(iterations)
    base = config.validation.seed if seed is None else seed
    n = case_count(config, op, mode, iterations)
    specs = plan_cases(op, mode, base, n, quick_dtypes=config.ci.quick_dtypes, accept=accept, cancel=cancel)
    return Plan.of(specs, None if whole else work_cut(config, op, mode, specs, budget))


def case_count(config: Config, op: OpConfig, mode: str, iterations: int | None) -> int:
    """The cases :func:`plan_op` asks for, before any cut: what a progress count expects before an op is
    planned (``gpuemu test`` plans each op as it comes, not all of them before the first runs)."""
    if mode == "quick":
        return iterations or config.ci.quick_iterations
    return iterations or op.iterations or config.validation.iterations


def case_timeout(config: Config, op: OpConfig) -> float:
    return op.timeout or config.validation.timeout


class _Workers:
    """One reusable worker per job thread, replaced when it dies."""

    def __init__(self, config: Config, cancel: threading.Event | None) -> None:
        self.config = config
        self.cancel = cancel
        self.local = threading.local()
        self.all: list[Worker] = []
        self.lock = threading.Lock()
        #: intra-op threads each worker's framework may use: the machine's cores shared by the workers at once
        #: (torch's default, every core per worker, oversubscribes them: spin-waiting threads, many times slower)
        self.threads: int | None = None
        self.stopped = False

    def stop(self) -> None:
        """Kill every worker at once (an interrupt): op threads waiting on a case return now, and start no more."""
        with self.lock:
            self.stopped = True
            for w in self.all:
                w.kill()

    def get(self) -> Worker:
        if self.stopped:
            raise KeyboardInterrupt("the run was stopped")  # no new worker for a thread still finishing its op
        w: Worker | None = getattr(self.local, "worker", None)
        if w is None or not w.alive():
            w = Worker(memory_mb=self.config.validation.memory_limit_mb, cancel=self.cancel)
            self.local.worker = w
            with self.lock:
                self.all.append(w)
        return w

    def drop(self) -> None:
        w = getattr(self.local, "worker", None)
        if w is not None:
            w.kill()
        self.local.worker = None

    def close(self) -> None:
        with self.lock:
            for w in self.all:
                w.close()
            self.all.clear()


def run_op(
    config: Config,
    op: OpConfig,
    specs: list[CaseSpec],
    workers: _Workers,
    options: RunOptions,
    snapshots: dict[int, dict[str, np.ndarray]] | None = None,
) -> OpOutcome:
    """Run ``specs`` of one op in a worker; crashes and timeouts become error cases and a new worker."""
    start = time.monotonic()
    outcome = OpOutcome(op.name, "not_run", planned=len(specs))
    if not op.runnable:
        outcome.message = (
            f"execution_mode = {op.execution_mode!r} and no module: the op runs in the client's "
            "process (Python API); nothing runnable here"
        )
        return outcome
    timeout = case_timeout(config, op)
    worker: Worker | None = None
    lost_in_a_row = 0

    def ready_worker() -> Worker:
        w = workers.get()
        if w.op_name != op.name:
            w.setup(
                config.root,
                op,
                config.validation,
                timeout,
                calibration=options.mode == "calibrate",
                threads=workers.threads,
            )
        return w

    window = 1 if options.fail_fast else PIPELINE
    pending: deque[CaseSpec] = deque()  # sent to the worker, in order, not answered yet
    sent = 0  # specs[:sent] have been sent (or answered)

    def snapshot_of(spec: CaseSpec) -> dict[str, np.ndarray] | None:
        return (snapshots or {}).get(spec.seed)

    i = -1
    while pending or sent < len(specs):
        i += 1
        spec = pending[0] if pending else specs[sent]
        try:
            worker = ready_worker()
            while sent < len(specs) and len(pending) < window:  # keep the worker busy while we read
                worker.submit(specs[sent], snapshot_of(specs[sent]))
                pending.append(specs[sent])
                sent += 1
            spec = pending[0]
            result = worker.result(timeout)
            pending.popleft()
        except SetupFailed as exc:
            outcome.status = "error"
            outcome.setup_error = exc.info
            first = (exc.info.get("message") or "setup failed").strip().splitlines()
            outcome.message = first[0] if first else "setup failed"
            workers.drop()
            break
        except WorkerLost as exc:  # the oldest case in flight was running: it is the one that crashed or hung
            workers.drop()
            lost_in_a_row += 1
            if pending and pending[0] is spec:
                pending.popleft()
            elif not pending and sent < len(specs) and specs[sent] is spec:
                sent += 1
            sent -= len(pending)  # the others never ran: send them again to the next worker
            pending.clear()
            result = _lost_case(config.root, op, spec, snapshot_of(spec), exc)
            if exc.phase == "setup":
                outcome.status = "error"
                outcome.setup_error = {"kind": f"import_{exc.kind}", "message": exc.message, "stderr": exc.stderr}
                outcome.message = f"loading the op or its reference: {exc.message}"
                break
        except Cancelled:
            workers.drop()
            outcome.status = "cancelled"
            outcome.stopped = "cancelled"
            break
        else:
            lost_in_a_row = 0
        outcome.cases.append(result)
        i = len(outcome.cases) - 1
        if options.on_case:
            options.on_case(op.name, result, i + 1, len(specs))
        if options.fail_fast and result.status not in ("passed", "edge"):  # an edge finding fails nothing
            outcome.stopped = "fail-fast"
            break
        if lost_in_a_row >= MAX_CONSECUTIVE_LOST and i + 1 < len(specs):
            outcome.stopped = f"{lost_in_a_row} crashes/timeouts in a row; {len(specs) - i - 1} cases skipped"
            break
        if options.time_budget and time.monotonic() - start > options.time_budget and i + 1 < len(specs):
            outcome.stopped = f"time budget of {options.time_budget:g} s spent after {i + 1}/{len(specs)} cases"
            break
    if pending:  # stopped early with cases still queued: drop their worker rather than wait for them
        workers.drop()
    outcome.elapsed = time.monotonic() - start
    if outcome.status not in ("error", "cancelled"):
        outcome.status = op_status(outcome.cases)
    elif outcome.status == "error" and any(c.status == "failed" for c in outcome.cases):
        outcome.status = "failed"
    if not outcome.message:
        outcome.message = outcome.summary()
    return outcome


def _run_op_sharded(
    config: Config,
    op: OpConfig,
    specs: list[CaseSpec],
    workers: _Workers,
    options: RunOptions,
    snapshots: dict[int, dict[str, np.ndarray]] | None,
    pool: ThreadPoolExecutor,
    shards: int,
) -> OpOutcome:
    """One op's cases dealt round-robin to ``shards`` workers at once; one outcome, cases in plan order.

    Each case is still decided alone, so the verdicts are those of an unsharded run (a test pins it).
    """
    if not op.runnable:
        return run_op(config, op, specs, workers, options, snapshots)
    start = time.monotonic()
    order = {spec.seed: i for i, spec in enumerate(specs)}
    done = 0
    lock = threading.Lock()

    def counted(name: str, result: CaseResult, _i: int, _n: int) -> None:
        nonlocal done
        with lock:
            done += 1
            if options.on_case:
                options.on_case(name, result, done, len(specs))

    shard_options = dataclasses.replace(options, on_case=counted)
    parts = list(
        pool.map(lambda k: run_op(config, op, specs[k::shards], workers, shard_options, snapshots), range(shards))
    )
    outcome = OpOutcome(op.name, "not_run", planned=len(specs))
    outcome.cases = sorted((c for p in parts for c in p.cases), key=lambda c: order.get(c.seed, len(order)))
    outcome.setup_error = next((p.setup_error for p in parts if p.setup_error), None)
    outcome.stopped = "; ".join(dict.fromkeys(p.stopped for p in parts if p.stopped)) or None
    outcome.elapsed = time.monotonic() - start
    if any(p.status == "cancelled" for p in parts):
        outcome.status = "cancelled"
    elif outcome.setup_error is not None:
        outcome.status = "failed" if any(c.status == "failed" for c in outcome.cases) else "error"
        outcome.message = next(p.message for p in parts if p.setup_error)
    else:
        outcome.status = op_status(outcome.cases)
    if not outcome.message:
        outcome.message = outcome.summary()
    return outcome


def _lost_case(
    root: Path, op: OpConfig, spec: CaseSpec, snapshot: dict[str, np.ndarray] | None, exc: WorkerLost
) -> CaseResult:
    who = "reference" if exc.phase == "reference" else "op"
    kind = f"{who}_{exc.kind}"
    if snapshot is None:
        try:
            snapshot = generate_inputs(op, spec).logical
        except Exception:
            snapshot = None
    what = "crashed" if exc.kind == "crash" else "timed out"
    stderr = this_case_stderr(exc.stderr)
    file, line = crash_site(stderr, root)
    return CaseResult(
        op.name,
        spec.seed,
        spec,
        "error",
        kind,
        f"the {who} {what}: {exc.message}",
        stderr=stderr[-2000:],
        snapshot=snapshot,
        from_snapshot=False,
        file=file,
        line=line,
    )


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})")


def this_case_stderr(stderr: str) -> str:
    """What the worker wrote since the last case began (it marks each start), without the marker."""
    text = stderr or ""
    at = text.rfind(CASE_MARK)
    if at < 0:
        return text
    end = text.find("\n", at)
    return text[end + 1 :] if end >= 0 else ""


def _unescape(name: str) -> str:
    """faulthandler writes non-ASCII characters of file names as \\xNN, \\uNNNN or \\UNNNNNNNN."""
    return _ESCAPE.sub(lambda m: chr(int(next(g for g in m.groups() if g), 16)), name)


def crash_site(stderr: str, root: Path | None) -> tuple[str | None, int | None]:
    """The innermost workspace frame of the faulthandler dump a crashed (or hung) worker left in its stderr."""
    text = stderr or ""
    marker = max(text.rfind("Fatal Python error"), text.rfind("most recent call first"))
    if marker >= 0:  # only the dump of the crash itself, not tracebacks the op logged earlier
        text = text[marker:]
    for raw, line in _FRAME.findall(text):  # faulthandler prints the innermost frame first
        file = _unescape(raw)
        if file.startswith("<") or "gpuemu_ls" in file or is_library(file):
            continue  # "<frozen runpy>", "<string>": no file, and they would resolve inside the cwd
        if root is None or Path(file).resolve().is_relative_to(root.resolve()):
            return file, int(line)
    return None, None


def run_validation(
    config: Config,
    options: RunOptions,
    *,
    store: Store | None = None,
    specs_by_op: dict[str, list[CaseSpec]] | None = None,
    snapshots: dict[str, dict[int, dict[str, np.ndarray]]] | None = None,
) -> RunResult:
    """Validate the selected ops of a workspace; write every case to the store as it finishes an op."""

    t0 = time.monotonic()
    names = options.ops or [o.name for o in config.ops]
    ops = [config.op(n) for n in names]
    seed = config.validation.seed if options.seed is None else options.seed
    check_iterations(options.iterations)  # before the run is stored: plans are made as the run goes
    plans: dict[str, list[CaseSpec]] = dict(specs_by_op or {})

    def plan_of(op: OpConfig) -> list[CaseSpec]:
        if op.name not in plans:
            plan_more(op)
            made = ahead.pop(op.name, None)
            if made is not None:
                plans[op.name] = made.result()
                plan_more()
        return plans.get(op.name, [])

    run_id = None
    if options.store and store is None:
        store = Store.for_workspace(config.root)
    if options.store and store is not None:
        run_id = store.begin_run(
            source=options.source,
            mode=options.mode,
            seed=seed,
            iterations=options.iterations,
            workspace=config.root,
            config_hash=config_hash(config),
            command=options.command,
        )
    workers = _Workers(config, options.cancel)
    workers.threads = max(1, available_cpus() // max(1, options.jobs))
    store_lock = threading.Lock()

    jobs = max(1, options.jobs)
    # fewer ops than jobs (one op fuzzed for thousands of cases): split each op's cases over the workers
    shards = jobs if len(ops) < jobs and not options.fail_fast else 1
    shard_pool = ThreadPoolExecutor(max_workers=shards, thread_name_prefix="gpuemu-shard") if shards > 1 else None

    budgets = resolve(config, options.mode, ops, options.budget)

    def execute(op: OpConfig, specs: list[CaseSpec], opts: RunOptions) -> OpOutcome:
        op_snapshots = (snapshots or {}).get(op.name)
        if shard_pool is not None and len(specs) >= 2 * shards:
            return _run_op_sharded(config, op, specs, workers, opts, op_snapshots, shard_pool, shards)
        return run_op(config, op, specs, workers, opts, op_snapshots)

    def probed(op: OpConfig) -> BudgetedOp:
        """A budgeted op after its first cases: its batches share one progress count."""
        specs = plan_of(op)
        if options.on_op_start:
            options.on_op_start(op.name, len(specs))
        done = [0]

        def on_case(name: str, result: CaseResult, _i: int, _n: int) -> None:
            done[0] += 1
            if options.on_case:
                options.on_case(name, result, done[0], len(specs))

        def batch(part: list[CaseSpec], limit: float | None) -> OpOutcome:
            return execute(op, part, dataclasses.replace(options, on_case=on_case, time_budget=limit))

        split = shards if shard_pool is not None and len(specs) >= 2 * shards else 1
        b = BudgetedOp(
            config,
            op,
            specs,
            options.mode,
            batch,
            cap=budgets.per_op.get(op.name),
            hard_stop=options.time_budget,
            parallel=split,
            run_source=budgets.run_source,
        )
        b.probe()
        return b

    cuts: dict[str, WorkCut | None] = {}  # the default work budget's cut each op ran (None: its whole plan)

    def planned(op: OpConfig) -> OpOutcome:
        """Run ``op``'s plan, cut by what its probe cases counted where its cost is measured first
        (run/cost_probe.py)."""
        plan = plan_of(op)
        cuts[op.name] = cut = getattr(plan, "cut", None)
        specs: list[CaseSpec] = plan
        mode = options.mode
        # a Plan is what plan_op made (given or not); a plain list is what the caller chose (a replay, a filter)
        if isinstance(plan, Plan) and plan and probes(op) and default_cut_applies(config, op, mode, options.budget):
            quiet = dataclasses.replace(options, on_case=None, on_op=None, on_op_start=None, fail_fast=False)
            measured = probe_cost(op, plan, lambda part: execute(op, part, quiet))
            if measured.launched:
                full = cut.planned if cut is not None else plan
                cut = work_cut(config, op, mode, full, options.budget, model=measured.model, pool=plan.pool)
                cuts[op.name], specs = cut, (cut.specs if cut is not None else full)
        if options.on_op_start:
            options.on_op_start(op.name, len(specs))
        return execute(op, specs, options)

    def one(op: OpConfig, outcome: OpOutcome | None = None) -> OpOutcome:
        if outcome is None:
            outcome = planned(op)
        probe = None
        if options.mode in (*VERDICT_MODES, "calibrate") and outcome.status in ("failed", "error"):
            quiet = dataclasses.replace(
                options, on_case=None, on_op=None, on_op_start=None, fail_fast=False, time_budget=None
            )

            def run_one(spec: CaseSpec) -> CaseResult | None:
                found = run_op(config, op, [spec], workers, quiet, None).cases
                return found[0] if found else None

            probe = make_probe(config, op, run_one)
        outcome.diagnosis = diagnose(outcome, op, config.root, probe)
        cut = cuts.pop(op.name, None)
        if cut is not None:
            outcome.budget = cut.report([c.spec for c in outcome.cases], full_estimate(cut, outcome))
        plans.pop(op.name, None)  # a finished op's plan goes: a run holds the plans of the ops under way only
        if store is not None and run_id is not None and outcome.status != "cancelled":
            with store_lock:
                store.add_cases(
                    run_id, outcome.cases, max_snapshots=config.validation.max_failure_snapshots, root=config.root
                )
                if options.mode in VERDICT_MODES:
                    store_verdict(store, run_id, outcome, options.mode)
        if options.on_op:
            options.on_op(outcome)
        return outcome

    # Plans are made ahead, in run order, on a thread of their own: planning an op (a work cut scans thousands
    # of seeds: ~0.25 s) overlaps the ops before it running, instead of keeping its worker waiting.
    planner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuemu-plan") if specs_by_op is None else None

    def plan_ahead(op: OpConfig) -> Plan:
        """``op``'s plan and, where its probe cases will bring a cost model, what its counted cut chooses from:
        the model-free part of a cut (a wide scan of seeds and which case meets which class, ~0.5 s) is made
        here, while earlier ops run, and only the part that needs the model waits for the probe."""
        plan = plan_op(config, op, options.mode, options.iterations, options.seed, budget=options.budget)
        if plan and probes(op) and default_cut_applies(config, op, options.mode, options.budget):
            cut = plan.cut
            if cut is not None and cut.pool is not None:
                plan.pool = cut.pool  # the static cut's: the same plan
            else:
                plan.pool = cut_pool_of(config, op, options.mode, cut.planned if cut is not None else plan)
            plan.pool.beyond.derive_all()  # the counted cut's search for dearer classes may read them all
        return plan

    # ... but only a few ops ahead: a run of thousands of ops never holds every op's planned cases (issue 31)
    ahead: dict[str, Future[Plan]] = {}
    unplanned = deque(ops if planner is not None else ())
    waiting = {op.name for op in unplanned}
    ahead_lock = threading.Lock()

    def plan_more(need: OpConfig | None = None) -> None:
        """Keep ``LOOKAHEAD_PER_JOB`` plans a job made ahead (and ``need``'s, when an op asks out of turn)."""
        with ahead_lock:
            while planner is not None and unplanned:
                if len(ahead) >= LOOKAHEAD_PER_JOB * jobs and (need is None or need.name not in waiting):
                    break
                nxt = unplanned.popleft()
                waiting.discard(nxt.name)
                ahead[nxt.name] = planner.submit(plan_ahead, nxt)

    plan_more()

    side_by_side = not (shards > 1 or jobs == 1 or len(ops) <= 1)
    pool = ThreadPoolExecutor(max_workers=min(jobs, len(ops)) if side_by_side else 1, thread_name_prefix="gpuemu-op")
    try:
        each: Callable[..., list[Any]] = (
            (lambda f, xs: list(pool.map(f, xs))) if side_by_side else (lambda f, xs: [f(x) for x in xs])
        )
        if not budgets.active:
            outcomes = each(one, ops)
        else:  # every op's first cases, then the budget shared out by what they cost, then the rest
            runs = each(probed, ops)
            grants = _grants(runs, budgets.run, budgets.per_op, t0, 1 if shards > 1 else min(jobs, len(ops)))
            outcomes = each(lambda b: one(b.op, b.finish(grants[b.op.name])), runs)
    except BaseException:
        # Ctrl-C (or anything else): the op threads are waiting on their workers' cases, and joining them would
        # wait for those cases (a slow op: minutes); killed workers answer at once
        workers.stop()
        raise
    finally:
        if planner is not None:
            planner.shutdown(wait=False, cancel_futures=True)
        pool.shutdown(wait=True, cancel_futures=True)
        if shard_pool is not None:
            shard_pool.shutdown(wait=True, cancel_futures=True)
        workers.close()
    result = RunResult(
        run_id,
        options.mode,
        seed,
        outcomes,
        time.monotonic() - t0,
        cancelled=any(o.status == "cancelled" for o in outcomes),
        budget={
            "seconds": budgets.run,
            "source": budgets.run_source,
            "side_by_side": 1 if shards > 1 else min(jobs, len(ops)),
        }
        if budgets.active or any(o.budget for o in outcomes)
        else None,
    )
    if store is not None and run_id is not None:
        store.finish_run(run_id, "cancelled" if result.cancelled else result.status)
        result.store_replaced = store.replaced()
        if not result.store_replaced:
            # housekeeping (the [store] keep_runs rule): a store that cannot be pruned now (locked past the
            # retries) is pruned after the next run, and the run's own verdict never depends on it
            with contextlib.suppress(StoreError):
                retain(store, config.store.keep_runs, options.source, config.store.keep_failures_days)
    return result


def _grants(
    runs: list[BudgetedOp],
    run_budget: float | None,
    caps: dict[str, tuple[float, str]],
    t0: float,
    side_by_side: int,
) -> dict[str, float | None]:
    """Seconds each probed op may still spend: its own cap less what its probe took, shared out of what is
    left of the run's budget (``side_by_side`` ops at once) when there is one."""
    left_of_cap = {b.op.name: max(0.0, caps[b.op.name][0] - b.charged) if b.op.name in caps else None for b in runs}
    demands = {b.op.name: b.demand() for b in runs}
    if run_budget is None:
        return allocate(demands, left_of_cap, None, None)
    left = max(0.0, run_budget - (time.monotonic() - t0))
    return allocate(demands, left_of_cap, left * side_by_side, left)


def store_verdict(store: Store, run_id: str, outcome: OpOutcome, mode: str, **detail: Any) -> None:
    """Record ``outcome`` as the op's verdict in run ``run_id``: counts, stats, message, diagnosis, and in its
    detail what stopped it, its condition, budget and timing (``detail``: more keys, e.g. the API's source)."""
    stats = outcome.stats()
    store.add_op_result(
        run_id,
        outcome.op,
        "op",
        outcome.status,
        cases=len(outcome.cases),
        passed=outcome.count("passed"),
        failed=outcome.count("failed"),
        errors=outcome.count("error"),
        stats=stats,
        duration=outcome.elapsed,
        message=outcome.message,
        diagnosis=outcome.diagnosis,
        detail={
            "setup_error": outcome.setup_error,
            "stopped": outcome.stopped,
            "planned": outcome.planned,
            "mode": mode,
            "condition": outcome.condition,
            "budget": outcome.budget,
            "timing": outcome.timing(),
            "edge_cases": len(outcome.edges),
            "counts": {k: stats[k] for k in TIER_COUNTS},  # a stored report's tiers
            "plan": max((c.spec.plan for c in outcome.cases), default=0),  # the plan version its seeds name
            "reason": not_judged_reason(outcome.cases) if outcome.status == "not_judged" else None,
            **detail,
        },
    )


def replay_spec(
    config: Config,
    op: OpConfig,
    seed: int,
    store: Store | None,
    *,
    regenerate: bool = False,
    plan: int | None = None,
) -> tuple[CaseSpec, dict[str, np.ndarray] | None, str]:
    """The case (op, seed) names: from the store's snapshot when there is one (unless ``regenerate``), else
    regenerated under the plan version it was stored with (``plan`` when given; the current one for a
    seed the store does not hold), so a case recorded by an earlier version replays as that case."""
    import json

    row = store.find_case(op.name, seed) if store is not None and plan is None else None
    stored_plan: int | None = None
    if row is not None:
        detail = json.loads(row["detail"] or "{}")
        if detail.get("spec"):
            stored = CaseSpec.from_dict(detail["spec"])
            stored_plan = stored.plan or None
            if row.get("snapshot_id") and not regenerate and store is not None:
                snap = store.load_snapshot(row["snapshot_id"])
                if snap is not None:
                    return stored, snap, f"stored snapshot {row['snapshot_id'][:12]}"
    chosen = plan if plan is not None else stored_plan
    spec = derive_case(op, seed, plan=chosen)
    where = "regenerated from (op, seed)" + (f" under plan {spec.plan}" if spec.plan and spec.plan != PLAN else "")
    return spec, None, where


__all__ = [
    "MODES",
    "OpOutcome",
    "Plan",
    "RunOptions",
    "RunResult",
    "plan_op",
    "replay_spec",
    "run_op",
    "run_validation",
    "store_verdict",
]
