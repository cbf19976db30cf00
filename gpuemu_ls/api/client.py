"""The Python API: validate an op in the process that has the kernel, with the engine and store of the CLI.

On a machine with a GPU the op under test runs in the user's own process (the client-side and
daemon-orchestrated modes): a :class:`Client` generates the same seeded inputs as the CLI, hands them
to the user's ``run_op`` as the op's framework tensors on its device, runs the float64 reference in
process, and compares with :func:`~gpuemu_ls.engine.run.case.run_case`, the very function the CLI's
workers call. Every case lands in the workspace's store as a run like any other (op, seed, input
snapshot of each failure), so ``gpuemu failures``, ``gpuemu reproduce`` and the editor show it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..engine import dtypes as dt
from ..engine.cases.generate import generate_inputs
from ..engine.cases.plan import CaseSpec, derive_case, iter_seeds, mode_filter
from ..engine.config.keys import CONFIG_NAME
from ..engine.config.load import find_workspace, load_config
from ..engine.config.model import Config, OpConfig
from ..engine.errors import ConfigError, Problem, UsageError
from ..engine.oracle.outcome import OpOutcome
from ..engine.replace_file import replace_file
from ..engine.run import pick
from ..engine.run.case import CaseContext, CaseResult, run_case_guarded
from ..engine.run.confirm import make_probe, variant_spec
from ..engine.run.frameworks import Adapter, get_adapter, to_numpy_any
from ..engine.run.runners import CallError, Runner
from ..engine.run.validate import config_hash, op_status, plan_op, store_verdict
from ..engine.store.db import Store
from ..engine.store.prune import retain
from .results import USER_SEED_BASE, FuzzResult, TestCase, ValidationError, ValidationResult
from .runners import ClientRunner, PrecomputedRunner

RunOp = Callable[..., Any]


def _argv() -> str:
    return " ".join([Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]])[:2000]


@dataclass
class _RunState:
    """A store run this client writes into, with the cases of each op so far (their verdict is cumulative)."""

    id: str
    mode: str
    verdicts: bool
    cases: dict[str, list[CaseResult]] = field(default_factory=dict)
    planned: dict[str, int] = field(default_factory=dict)
    stopped: dict[str, str | None] = field(default_factory=dict)
    elapsed: dict[str, float] = field(default_factory=dict)
    snapshots: dict[str, int] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    probes: dict[str, list[CaseResult]] = field(default_factory=dict)  # diagnosis' confirmation cases
    shared: bool = False  # other processes write into this run too: verdicts come from the store


class Client:
    """Validate ops of a workspace in this process; results go to the workspace's store.

    ``workspace``: the folder holding ``gpuemu.toml`` (or the file itself, or any folder below it);
    default: the nearest one at or above the current folder. ``store``: True for the workspace's
    store (``.gpuemu/gpuemu.db``, or ``GPUEMU_STORE``), a path for another file, False to keep
    nothing. ``framework`` and ``device`` override what ``run_op`` receives (default: the op's
    ``framework`` and its accelerator when present). ``one_run``: every call records into one run
    of mode ``mode`` (the pytest plugin's choice); by default each fuzz or test call is a run of its
    own and single checks (``validate_op``, ``submit_output``) share one run per client. ``run_id``:
    record everything into the run of that id, created if absent and shared with other processes
    that name it (pytest-xdist workers): op verdicts are then recomputed from every stored case of
    the run, whoever wrote it.
    """

    def __init__(
        self,
        workspace: str | Path | None = None,
        *,
        store: bool | str | Path = True,
        framework: str | None = None,
        device: str | None = None,
        source: str = "api",
        one_run: bool = False,
        mode: str = "client",
        command: str | None = None,
        run_id: str | None = None,
    ) -> None:
        start = Path(workspace) if workspace is not None else Path.cwd()
        if start.name == CONFIG_NAME and start.is_file():
            start = start.parent
        root = find_workspace(start)
        if root is None:
            raise ConfigError(
                [Problem(f"no {CONFIG_NAME} in {start.resolve()} or above", start, hint="run `gpuemu init`")]
            )
        self.config: Config = load_config(root)
        self.root: Path = self.config.root
        self.framework = framework
        self.device = device
        self.source = source
        self.one_run = one_run or run_id is not None
        self.shared_run_id = run_id
        self.mode = mode
        self.command = command if command is not None else _argv()
        self._lock = threading.RLock()
        self._runners: dict[tuple[str, str], Runner] = {}
        self._session: _RunState | None = None
        self.store: Store | None
        if store is True:
            self.store = Store.for_workspace(self.root)
        elif store is False or store is None:
            self.store = None
        else:
            self.store = Store(Path(store).expanduser().resolve())

    # --- basics ------------------------------------------------------------------------------
    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Finish the client's run in the store and close the store."""
        with self._lock:
            if self._session is not None and self.store is not None:
                self._finish(self._session)
            self._session = None
            if self.store is not None:
                self.store.close()
                self.store = None

    @property
    def store_path(self) -> Path | None:
        return self.store.path if self.store is not None else None

    def ops(self) -> list[str]:
        return [o.name for o in self.config.ops]

    def op(self, op: str | OpConfig) -> OpConfig:
        if isinstance(op, OpConfig):
            return op
        try:
            return self.config.op(op)
        except KeyError as exc:
            raise UsageError(str(exc.args[0]) if exc.args else f"no op {op!r}") from None

    def adapter(self, op: str | OpConfig, framework: str | None = None) -> Adapter:
        """What ``run_op`` receives for ``op``: the adapter of its framework on its device."""
        o = self.op(op)
        return get_adapter(framework or self.framework or o.framework, self.device)

    # --- cases ---------------------------------------------------------------------------------
    def get_test_case(self, op: str | OpConfig, seed: int | None = None, *, framework: str | None = None) -> TestCase:
        """The case (op, seed) names, with inputs as the op's framework tensors on its device.

        The same seed means the same case as ``gpuemu reproduce --op OP --seed SEED``; default seed:
        ``[validation] seed``.
        """
        o = self.op(op)
        s = self.config.validation.seed if seed is None else int(seed)
        return self._test_case(o, derive_case(o, s), framework)

    def get_test_batch(
        self,
        op: str | OpConfig,
        count: int,
        seed: int | None = None,
        *,
        dtypes: Iterable[str] | str | None = None,
        layouts: Iterable[str] | str | None = None,
        value_distribution: Iterable[str] | str | None = None,
        framework: str | None = None,
    ) -> list[TestCase]:
        """``count`` cases from ``seed`` upward (pinned seeds first), optionally narrowed like ``gpuemu fuzz``."""
        o = self.op(op)
        accept = self._filter(o, dtypes, layouts, value_distribution)
        base = self.config.validation.seed if seed is None else int(seed)
        return [self._test_case(o, spec, framework) for spec in iter_seeds(o, base, int(count), accept=accept)]

    def _test_case(self, op: OpConfig, spec: CaseSpec, framework: str | None) -> TestCase:
        adapter = self.adapter(op, framework)
        inputs = generate_inputs(op, spec)
        pristine = {n: np.array(_buffer(v), copy=True) for n, v in inputs.views.items()}
        tensors: dict[str, Any] = {}
        backs = []
        for name in op.input_names:
            t, back = adapter.place(inputs.views[name])
            tensors[name] = t
            if back is not None:
                backs.append(back)
        return TestCase(
            op=op.name,
            seed=spec.seed,
            spec=spec,
            inputs=tensors,
            arrays=inputs.views,
            kwargs=dict(op.kwargs),
            framework=adapter.name,
            device=adapter.device,
            # the engine may hand a contiguous case its logical arrays themselves: keep our own copy, so a
            # kernel that writes into its inputs cannot change what is compared and snapshotted
            logical={n: np.array(a, copy=True) for n, a in inputs.logical.items()},
            _pristine=pristine,
            _write_backs=backs,
        )

    def submit_output(self, case: TestCase, output: Any) -> ValidationResult:
        """Compare the output the kernel produced for a :class:`TestCase` with the reference; record it."""
        op = self.op(case.op)
        for back in case._write_backs:
            back()
        mutated = [n for n, v in case.arrays.items() if not _same(_buffer(v), case._pristine[n])]
        if mutated:
            result = CaseResult(
                op.name,
                case.seed,
                case.spec,
                "failed",
                "input_mutation",
                f"the op wrote into its input(s) {', '.join(mutated)}: inputs must be read-only",
                snapshot=case.logical,
            )
        else:
            ctx = self._context(op, PrecomputedRunner(output, self.adapter(op, case.framework)))
            result = self._run_one(ctx, case.spec, case.logical)
        return self._single(op, result)

    def validate_op(self, op: str | OpConfig, inputs: Any, output: Any) -> ValidationResult:
        """Validate an output the op produced for ``inputs`` against the float64 reference; record it.

        ``inputs``: a :class:`TestCase` (then this is :meth:`submit_output`), a dict of tensors by
        input name, a sequence in ``input_names`` order, or one tensor for a one-input op; numpy,
        PyTorch, JAX or TensorFlow. Inputs you supply get a seed of their own (at or above 2**40,
        derived from their bytes) and are kept as a snapshot when the case fails, so ``gpuemu
        reproduce`` and :meth:`reproduce` find them.
        """
        if isinstance(inputs, TestCase):
            return self.submit_output(inputs, output)
        o = self.op(op)
        arrays = self._named_inputs(o, inputs)
        layout = _layout_of(arrays.values())
        logical = {n: np.array(a, order="C", copy=True) for n, a in arrays.items()}
        spec = _user_spec(o, logical, layout)
        ctx = self._context(o, PrecomputedRunner(output, self.adapter(o)))
        result = self._run_one(ctx, spec, logical)
        return self._single(o, result)

    def _named_inputs(self, op: OpConfig, inputs: Any) -> dict[str, np.ndarray]:
        names = op.input_names
        if isinstance(inputs, Mapping):
            missing = [n for n in names if n not in inputs]
            extra = [n for n in inputs if n not in names]
            if missing or extra:
                raise UsageError(
                    f"op {op.name!r} takes inputs {list(names)}"
                    + (f"; missing {missing}" if missing else "")
                    + (f"; unknown {extra}" if extra else "")
                )
            values = [inputs[n] for n in names]
        elif isinstance(inputs, (list, tuple)):
            if len(inputs) != len(names):
                raise UsageError(f"op {op.name!r} takes {len(names)} inputs {list(names)}, got {len(inputs)}")
            values = list(inputs)
        else:
            if len(names) != 1:
                raise UsageError(f"op {op.name!r} takes inputs {list(names)}: pass a dict or a sequence")
            values = [inputs]
        out = {}
        for n, v in zip(names, values):
            arr = to_numpy_any(v)
            if arr.dtype == object or (arr.dtype.kind in "USOV" and arr.dtype != dt.numpy_dtype("bfloat16")):
                raise UsageError(f"input {n!r} is {type(v).__name__} of {arr.dtype}, not a tensor of numbers")
            out[n] = arr
        return out

    # --- many cases ------------------------------------------------------------------------------
    def fuzz_op_client_side(
        self,
        op: str | OpConfig,
        run_op: RunOp | None = None,
        iterations: int | None = None,
        seed: int | None = None,
        value_distribution: Iterable[str] | str | None = None,
        dtypes: Iterable[str] | str | None = None,
        layouts: Iterable[str] | str | None = None,
        fail_fast: bool = False,
        *,
        framework: str | None = None,
        on_case: Callable[[CaseResult, int, int], None] | None = None,
    ) -> FuzzResult:
        """Run ``iterations`` cases of ``op`` through ``run_op(inputs, **kwargs)`` in this process.

        The cases are those of ``gpuemu fuzz`` with the same flags (seed, dtypes, layouts, value
        distributions): ``iterations`` defaults to ``[ci] fuzz_iterations`` and is at most
        ``MAX_ITERATIONS`` (1,000,000, as everywhere; UsageError otherwise), ``seed`` defaults to ``[validation]
        seed``. Without ``run_op``, the op's ``module`` (or ``op_script``) runs in process. Returns a
        :class:`FuzzResult` (``passed``/``total`` counts, ``failures``, ``ok``); records one run of mode
        ``fuzz``.
        """
        o = self.op(op)
        accept = self._filter(o, dtypes, layouts, value_distribution)
        n = int(iterations) if iterations is not None else self.config.ci.fuzz_iterations
        specs = plan_op(self.config, o, "thorough", n, seed, accept, whole=True)
        ctx = self._context(o, self._op_runner(o, run_op, framework))
        return self._run_specs(o, ctx, specs, mode="fuzz", fail_fast=fail_fast, on_case=on_case)

    def test_op(
        self,
        op: str | OpConfig,
        run_op: RunOp | None = None,
        *,
        quick: bool = False,
        iterations: int | None = None,
        seed: int | None = None,
        dtypes: Iterable[str] | str | None = None,
        specs: list[CaseSpec] | None = None,
        fail_fast: bool = False,
        isolate: bool = False,
        framework: str | None = None,
        on_case: Callable[[CaseResult, int, int], None] | None = None,
    ) -> FuzzResult:
        """The cases ``gpuemu test [--quick]`` runs for ``op`` (optionally only some dtypes), in this process.

        ``isolate=True`` runs a ``module``/``op_script`` op in gpuemu's worker processes instead (a
        crash or hang costs a case, not this process); it cannot apply to a ``run_op`` callable.
        """
        o = self.op(op)
        mode = "quick" if quick else "thorough"
        if specs is None:
            specs = plan_op(self.config, o, mode, iterations, seed)
            if dtypes is not None:
                wanted = _names(dtypes)
                specs = [s for s in specs if s.dtype in wanted]
        if isolate and run_op is None and o.runnable:
            return self._run_isolated(o, specs, mode=mode, fail_fast=fail_fast)
        ctx = self._context(o, self._op_runner(o, run_op, framework))
        return self._run_specs(o, ctx, specs, mode=mode, fail_fast=fail_fast, on_case=on_case)

    def reproduce(
        self,
        op: str | OpConfig,
        seed: int,
        run_op: RunOp | None = None,
        *,
        regenerate: bool = False,
        framework: str | None = None,
    ) -> ValidationResult:
        """Replay (op, seed): the stored input snapshot byte for byte when there is one, else regenerated.

        Records a ``reproduce`` run (no verdict), like ``gpuemu reproduce``. ``result.source`` says
        where the inputs came from.
        """
        from ..engine.run.validate import replay_spec

        o = self.op(op)
        spec, snapshot, source = replay_spec(self.config, o, int(seed), self.store, regenerate=regenerate)
        if snapshot is None and int(seed) >= USER_SEED_BASE:
            raise UsageError(
                f"seed {seed} of op {o.name!r} names inputs a caller supplied, and no snapshot of them is stored "
                "(only failing cases keep their inputs)"
            )
        ctx = self._context(o, self._op_runner(o, run_op, framework))
        result = self._run_one(ctx, spec, snapshot, replayed=snapshot is not None)
        run = self._begin("reproduce", verdicts=False)
        if run is not None:
            self._record(run, o, [result], planned=1)
            self._finish(run)
        out = ValidationResult(
            o.name,
            result.status,
            [result],
            run_id=run.id if run else None,
            root=self.root,
            client_side=not o.runnable,
            source=source,
        )
        return out

    def calibrate_tolerance(
        self,
        op: str | OpConfig,
        run_op: RunOp | None = None,
        *,
        dtypes: Iterable[str] | str | None = None,
        iterations: int = 200,
        method: str = "p95",
        factor: float = 1.5,
        seed: int | None = None,
        write: bool = False,
        framework: str | None = None,
        force: bool = False,
    ) -> list[Any]:
        """Propose (atol, rtol) per dtype from the errors a known-good ``run_op`` makes, as ``gpuemu calibrate``.

        Returns :class:`~gpuemu_ls.engine.tools.calibrate.Proposal` objects; ``write=True`` puts them into
        the op's ``[ops.tolerances]`` in gpuemu.toml (comments kept) and reloads the configuration.
        Raises :class:`~gpuemu_ls.engine.tools.calibrate.CalibrationRefused` when the failures look like a
        bug rather than rounding (the same rule as the CLI; ``force=True`` overrides it). Nothing is
        stored: a calibration is not a verdict.
        """
        from ..engine.oracle.diagnose import diagnose
        from ..engine.tools import calibrate as cal

        o = self.op(op)
        made: list[CaseContext] = []  # the op loads once the engine has checked the arguments

        def in_process(specs: list[CaseSpec]) -> OpOutcome:
            """One dtype's cases through run_op here, diagnosed like a worker's run (its condition set)."""
            if not made:
                made.append(self._context(o, self._op_runner(o, run_op, framework)))
                made[0].calibration = True  # the error figures a proposal reads, as in gpuemu's workers
            ctx = made[0]
            cases = [self._run_one(ctx, s, None) for s in specs]
            outcome = OpOutcome(o.name, op_status(cases), cases)
            diagnose(outcome, o, self.root, make_probe(self.config, o, lambda s: self._run_one(ctx, s, None)))
            return outcome

        proposals = cal.calibrate(
            self.config,
            o,
            dtypes=_names(dtypes) if dtypes is not None else None,
            iterations=iterations,
            method=method,
            factor=factor,
            seed=seed,
            force=force,
            run=in_process,
            dtype_flag="dtype",
        )
        if write and proposals:
            cal.write_tolerances(self.config, o, proposals)
            self.reload()
        return proposals

    def reload(self) -> None:
        """Re-read gpuemu.toml (after an edit)."""
        with self._lock:
            self.config = load_config(self.root)
            self._runners.clear()

    def export_results(self, path: str | Path | None = None, *, format: str = "json") -> str:
        """The stored verdict of every op as a results document (``gpuemu report``), written to ``path`` if given."""
        from ..engine.report.formats import render
        from ..engine.report.results import document_from_store

        if self.store is None:
            raise UsageError("this client keeps no store (store=False)")
        doc = document_from_store(self.config, self.store)
        text = render(doc, format)
        if path is not None:
            replace_file(path, text + ("\n" if not text.endswith("\n") else ""))
        return text

    # --- internals -------------------------------------------------------------------------------
    def _filter(
        self,
        op: OpConfig,
        dtypes: Iterable[str] | str | None,
        layouts: Iterable[str] | str | None,
        distributions: Iterable[str] | str | None,
    ) -> Callable[[CaseSpec], bool] | None:
        picks = {}
        for label, values, valid in (
            ("dtypes", dtypes, op.dtypes),
            ("layouts", layouts, op.layouts),
            ("value_distribution", distributions, op.distributions),
        ):
            if values is None:
                picks[label] = None
                continue
            names = tuple(_names(values))
            for v in names:
                if v not in valid:
                    raise UsageError(f"{label} {v!r}: op {op.name!r} uses {', '.join(valid)}")
            picks[label] = names
        if all(v is None for v in picks.values()):
            return None
        return mode_filter(
            op, dtypes=picks["dtypes"], layouts=picks["layouts"], distributions=picks["value_distribution"]
        )

    def _op_runner(self, op: OpConfig, run_op: RunOp | None, framework: str | None) -> Runner:
        if run_op is not None:
            return pick.named(ClientRunner(run_op, op.input_names, self.adapter(op, framework)), op.outputs)
        fw = framework or self.framework
        runner = self._loaded(
            op,
            f"op:{fw or op.framework}",
            lambda: pick.op_runner(
                self.root, op, isolated=False, framework=fw, device=self.device, module=self._own_module
            ),
        )
        if runner is None:
            raise UsageError(
                f"op {op.name!r} runs in your process (execution_mode = {op.execution_mode!r}, no module): "
                "pass run_op, a callable run_op(inputs, **kwargs) -> output"
            )
        return runner

    def _reference(self, op: OpConfig) -> Runner:
        if op.reference is None:
            raise UsageError(f"op {op.name!r} has no reference")
        ref = self._loaded(
            op, "reference", lambda: pick.reference_runner(self.root, op, isolated=False, module=self._own_module)
        )
        assert ref is not None
        return ref

    def _loaded(self, op: OpConfig, key: str, load: Callable[[], Runner | None]) -> Runner | None:
        """The engine's runner for the op (or its reference), loaded once in this process and kept."""
        runner = self._runners.get((op.name, key))
        if runner is None:
            try:
                runner = load()
            except CallError as exc:
                raise UsageError(f"op {op.name!r}: {exc.message}") from None
            if runner is not None:
                self._runners[(op.name, key)] = runner
        return runner

    def _own_module(self, ref: str) -> str:
        return _own_module(self.root, ref)

    def _context(self, op: OpConfig, op_runner: Runner) -> CaseContext:
        return CaseContext(self.root, op, self.config.validation, op_runner, self._reference(op))

    def _run_one(
        self, ctx: CaseContext, spec: CaseSpec, snapshot: dict[str, np.ndarray] | None, *, replayed: bool = False
    ) -> CaseResult:
        """run_case, as a worker runs it; ``replayed``: the inputs are a stored snapshot (not the case's own)."""
        result = run_case_guarded(ctx, spec, snapshot, keep_inputs=True)
        result.from_snapshot = replayed
        return result

    def _run_specs(
        self,
        op: OpConfig,
        ctx: CaseContext,
        specs: list[CaseSpec],
        *,
        mode: str,
        fail_fast: bool,
        on_case: Callable[[CaseResult, int, int], None] | None,
    ) -> FuzzResult:
        run = self._open_run(mode)
        start = time.monotonic()
        cases: list[CaseResult] = []
        stopped = None
        for i, spec in enumerate(specs):
            # cases generated from (op, seed) are not snapshots: from_snapshot stays False
            result = self._run_one(ctx, spec, None)
            cases.append(result)
            if on_case is not None:
                on_case(result, i + 1, len(specs))
            if fail_fast and result.status not in ("passed", "edge"):
                stopped = "fail-fast"
                break
        probe = lambda base, changes: self._run_one(ctx, variant_spec(op, base, changes), None)  # noqa: E731
        return self._conclude(run, op, cases, len(specs), stopped, time.monotonic() - start, probe=probe)

    def _run_isolated(self, op: OpConfig, specs: list[CaseSpec], *, mode: str, fail_fast: bool) -> FuzzResult:
        from ..engine.run.validate import RunOptions, run_validation

        run = self._open_run(mode)
        result = run_validation(
            self.config,
            RunOptions(mode=mode, ops=[op.name], fail_fast=fail_fast, source=self.source, store=False),
            specs_by_op={op.name: specs},
        )
        outcome = result.outcomes[0]
        return self._conclude(run, op, outcome.cases, len(specs), outcome.stopped, outcome.elapsed, outcome)

    def _open_run(self, mode: str) -> _RunState | None:
        """The run a batch of cases records into: the shared one (``one_run``), else a new run of ``mode``."""
        with self._lock:
            return self._session_run() if self.one_run else self._begin(mode, verdicts=True)

    def _conclude(
        self,
        run: _RunState | None,
        op: OpConfig,
        cases: list[CaseResult],
        planned: int,
        stopped: str | None,
        elapsed: float,
        outcome: OpOutcome | None = None,
        probe: Any = None,
    ) -> FuzzResult:
        """The op's result over ``cases``; ``probe`` runs the diagnosis' confirmation cases in this process
        (an isolated run's outcome was diagnosed, confirmation included, in its worker)."""
        from ..engine.oracle.diagnose import diagnose_confirmed

        status = op_status(cases)
        message = ""
        if outcome is not None and outcome.setup_error:  # an isolated run could not load the op
            status = "failed" if status == "failed" else "error"
            message = outcome.message
        if outcome is not None and outcome.diagnosis:  # an isolated run's, made in its worker (no probe here)
            diagnosis, probes = outcome.diagnosis, None
        else:
            diagnosis, probes = diagnose_confirmed(cases, status, op, self.root, probe)
        if run is not None and probes:
            run.probes.setdefault(op.name, []).extend(probes)
        with self._lock:
            if run is not None:
                self._record(
                    run,
                    op,
                    cases,
                    planned=planned,
                    stopped=stopped,
                    elapsed=elapsed,
                    status=status if message else None,
                    message=message,
                )
                if not self.one_run:
                    self._finish(run)
        for c in cases:
            _slim(c)
        return FuzzResult(
            op.name,
            status,
            cases,
            run_id=run.id if run else None,
            diagnosis=diagnosis,
            root=self.root,
            client_side=not op.runnable,
            planned=planned,
            stopped=stopped,
            elapsed=elapsed,
            message=message,
        )

    def _single(self, op: OpConfig, result: CaseResult) -> ValidationResult:
        from ..engine.oracle.diagnose import diagnose_cases

        with self._lock:
            run = self._session_run()
            if run is not None:
                self._record(run, op, [result], planned=1)
            diagnosis = diagnose_cases([result], op, self.root)
            _slim(result)
        return ValidationResult(
            op.name,
            result.status,
            [result],
            run_id=run.id if run else None,
            diagnosis=diagnosis,
            root=self.root,
            client_side=not op.runnable,
        )

    # --- the store ---------------------------------------------------------------------------------
    def _begin(self, mode: str, *, verdicts: bool) -> _RunState | None:
        if self.store is None:
            return None
        run_id = self.store.begin_run(
            source=self.source,
            mode=mode,
            seed=self.config.validation.seed,
            iterations=None,
            workspace=self.root,
            config_hash=config_hash(self.config),
            command=self.command,
        )
        return _RunState(run_id, mode, verdicts)

    def _session_run(self) -> _RunState | None:
        if self._session is None:
            if self.shared_run_id is not None and self.store is not None:
                from .storeview import ensure_run

                ensure_run(
                    self.store,
                    self.shared_run_id,
                    source=self.source,
                    mode=self.mode,
                    seed=self.config.validation.seed,
                    workspace=self.root,
                    config_hash=config_hash(self.config),
                    command=self.command,
                )
                self._session = _RunState(self.shared_run_id, self.mode, verdicts=True, shared=True)
            else:
                self._session = self._begin(self.mode, verdicts=True)
        return self._session

    def new_run(self) -> None:
        """Finish the current shared run; the next single check starts a new one."""
        with self._lock:
            if self._session is not None:
                self._finish(self._session)
            self._session = None

    @property
    def run_id(self) -> str | None:
        """The id of the run that single checks (and, with ``one_run``, everything) record into."""
        return self._session.id if self._session is not None else None

    def _record(
        self,
        run: _RunState,
        op: OpConfig,
        cases: list[CaseResult],
        *,
        planned: int,
        stopped: str | None = None,
        elapsed: float | None = None,
        status: str | None = None,
        message: str = "",
    ) -> None:
        """Store cases (failures with their snapshot) and the op's verdict over all its cases in this run."""
        assert self.store is not None
        limit = self.config.validation.max_failure_snapshots
        kept = run.snapshots.get(op.name, 0)
        bad = sum(1 for c in cases if c.status != "passed" and c.snapshot is not None)
        self.store.add_cases(run.id, cases, max_snapshots=max(0, limit - kept), root=self.root)
        run.snapshots[op.name] = kept + min(bad, max(0, limit - kept))
        for c in cases:
            _slim(c)
        all_cases = run.cases.setdefault(op.name, [])
        all_cases += [dataclasses.replace(c, snapshot=None) for c in cases]  # the store keeps the inputs
        run.planned[op.name] = run.planned.get(op.name, 0) + planned
        if stopped:
            run.stopped[op.name] = stopped
        run.elapsed[op.name] = run.elapsed.get(op.name, 0.0) + (
            elapsed if elapsed is not None else sum(sum(c.durations.values()) for c in cases)
        )
        if run.shared and status is None:
            from . import storeview

            run.status[op.name] = storeview.store_verdict(
                self.store, self.config, run.id, op.name, mode=run.mode, source=self.source
            )
            self._finish(run)
            return
        status = status or op_status(all_cases)
        if status == "not_run" and run.status.get(op.name) not in (None, "not_run"):
            status = run.status[op.name]
        run.status[op.name] = status
        if run.verdicts:
            from ..engine.oracle.diagnose import diagnose_cases

            outcome = OpOutcome(
                op.name,
                status,
                all_cases,
                planned=run.planned[op.name],
                elapsed=run.elapsed[op.name],
                stopped=run.stopped.get(op.name),
            )
            outcome.message = message or outcome.summary()
            outcome.diagnosis = diagnose_cases(all_cases, op, self.root, run.probes.get(op.name))
            store_verdict(self.store, run.id, outcome, run.mode, source=self.source, client_side=not op.runnable)
            self._finish(run)

    def _finish(self, run: _RunState) -> None:
        if self.store is None:
            return
        if run.shared:
            from .storeview import run_status

            self.store.finish_run(run.id, run_status(self.store, run.id))
            return
        statuses = set(run.status.values())
        status = next((s for s in ("failed", "error", "not_run") if s in statuses), "passed" if statuses else "not_run")
        self.store.finish_run(run.id, status)
        retain(self.store, self.config.store.keep_runs, self.source, self.config.store.keep_failures_days)


def _own_module(root: Path, ref: str) -> str:
    """Make ``module:function`` import from this workspace in this long-lived process.

    The CLI loads a workspace's modules in fresh worker processes; a user's process may hold a
    same-named module of another workspace (two workspaces with an ``ops.py``) or from elsewhere.
    The workspace root goes first on sys.path, and a cached module whose file lies outside the
    workspace is dropped (with its submodules) so the workspace's own file is imported.
    """
    top = ref.split(":", 1)[0].split(".", 1)[0]
    root_s = str(root)
    if root_s in sys.path:
        sys.path.remove(root_s)
    sys.path.insert(0, root_s)
    cached = sys.modules.get(top)
    file = getattr(cached, "__file__", None) if cached is not None else None
    foreign = cached is not None and (file is None or not Path(file).resolve().is_relative_to(root))
    if foreign and ((root / f"{top}.py").exists() or (root / top / "__init__.py").exists()):
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
    return ref


def _slim(c: CaseResult) -> None:
    """Drop what a stored case no longer needs in memory: mismatch masks (diagnosis features are taken)."""
    for cmp in c.comparisons:
        cmp.mask = None


def _names(values: Iterable[str] | str) -> list[str]:
    return [values] if isinstance(values, str) else [str(v) for v in values]


def _buffer(v: np.ndarray) -> np.ndarray:
    return v.base if isinstance(v.base, np.ndarray) else v


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _layout_of(arrays: Iterable[np.ndarray]) -> str:
    """The case layout that describes user-supplied inputs best (informational; replay rebuilds it)."""
    found = "contiguous"
    for a in arrays:
        if a.ndim == 0 or a.flags.c_contiguous:
            continue
        if a.ndim >= 2 and np.swapaxes(a, -1, -2).flags.c_contiguous:
            found = "transposed" if found == "contiguous" else found
        else:
            found = "strided"
    return found


def _user_spec(op: OpConfig, logical: dict[str, np.ndarray], layout: str) -> CaseSpec:
    """A case spec for inputs the caller supplied: dims read off the shapes, a seed from the bytes."""
    dims: dict[str, int] = {}
    for inp in op.inputs:
        arr = logical.get(inp.name)
        if arr is None or arr.ndim != len(inp.shape):
            continue
        for sym, n in zip(inp.shape, arr.shape):
            if isinstance(sym, str):
                dims.setdefault(sym, int(n))
    floats = [a for a in logical.values() if a.dtype.kind == "f" or a.dtype.name == "bfloat16"]
    dtype = dt.dtype_name(floats[0].dtype) if floats else op.dtypes[0]
    h = hashlib.sha256(op.name.encode())
    for name, arr in logical.items():
        h.update(f"{name}:{arr.dtype.name}:{arr.shape}".encode())
        h.update(arr.tobytes())
    seed = USER_SEED_BASE + int.from_bytes(h.digest()[:5], "little")
    shapes = {n: tuple(int(x) for x in a.shape) for n, a in logical.items()}
    return CaseSpec(op.name, seed, "user", dtype, layout, "user", dims, shapes, {n: "user" for n in logical})


class Check:
    """What the ``validate_op`` context manager yields: the inputs to run on, and a slot for the output."""

    def __init__(self, client: Client, op: OpConfig, inputs: Any, case: TestCase | None) -> None:
        self.client = client
        self.op = op.name
        self.case = case
        self.inputs = case.inputs if case is not None else inputs
        self.kwargs = dict(op.kwargs)
        self.output: Any = None
        self.result: ValidationResult | None = None

    @property
    def args(self) -> tuple[Any, ...]:
        if self.case is not None:
            return self.case.args
        if isinstance(self.inputs, Mapping):
            return tuple(self.inputs.values())
        return tuple(self.inputs) if isinstance(self.inputs, (list, tuple)) else (self.inputs,)

    def set_output(self, output: Any) -> Any:
        self.output = output
        return output


@contextmanager
def validate_op(
    client: Client, op: str | OpConfig, inputs: Any = None, *, seed: int | None = None, framework: str | None = None
) -> Iterator[Check]:
    """Check one run of the op: ``with validate_op(client, "softmax", inputs={"x": x}) as check: check.output = f(x)``.

    Without ``inputs``, the case (op, seed) is generated and its tensors are ``check.inputs``. On
    leaving the block the output is compared with the float64 reference and recorded; a failing
    check raises :class:`ValidationError` (an exception inside the block propagates unchecked).
    """
    o = client.op(op)
    case = client.get_test_case(o, seed, framework=framework) if inputs is None else None
    check = Check(client, o, inputs, case)
    yield check
    if check.output is None:
        raise UsageError("validate_op: set check.output (or call check.set_output) inside the with block")
    result = (
        client.submit_output(case, check.output) if case is not None else client.validate_op(o, inputs, check.output)
    )
    check.result = result
    if not result.passed:
        raise ValidationError(result)


__all__ = ["Check", "Client", "validate_op"]
