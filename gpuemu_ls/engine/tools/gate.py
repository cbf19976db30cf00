"""The CI gate: ``gpuemu ci`` and ``gpuemu-ls --check`` are this one function.

Quick mode: float32 plus a few half-precision cases (``[ci] quick_dtypes`` overrides), default and
boundary shapes, ``[ci.quick]`` iterations.
Thorough: every dtype, layout, shape strategy and distribution, ``[ci] fuzz_iterations`` cases, with
``[ci] thorough_timeout`` as each op's time budget. Ops run in parallel processes (``--jobs auto`` by
default: :mod:`..run.cpus`); ``--shard K/N`` (or ``auto``, from the CI's matrix variables) splits ops and
kernels deterministically, balanced by measured cost (:mod:`.shard`), so a CI matrix covers each
exactly once and ``gpuemu report --merge`` joins the shards into the unsharded verdict.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config.model import Config
from ..errors import UsageError
from ..oracle.outcome import CaseResult
from ..report.baseline import baseline_path, load_baseline, regressions
from ..report.results import build_document
from ..run.cpus import resolve_jobs
from ..run.validate import RunOptions, run_validation
from ..store.db import Store
from .settle import settle_ops
from .shard import parse_shard, plan_shard

__all__ = ["GateOptions", "default_jobs", "parse_shard", "run_gate"]


@dataclass
class GateOptions:
    mode: str = "thorough"
    seed: int | None = None
    iterations: int | None = None
    budget: float | None = None  # --budget in seconds (math.inf: off); None: [ci] budget, else the default
    jobs: int | str | None = None  # a count, "auto", or None: [ci] parallel_jobs, else auto
    baseline: str | None = None
    fail_on_regression: bool | None = None
    shard: str | None = None
    ops: list[str] | None = None
    kernels: bool = True
    source: str = "ci"
    command: str = ""
    store: bool = True
    cancel: threading.Event | None = None
    on_case: Callable[[str, CaseResult, int, int], None] | None = None


def default_jobs(config: Config, jobs: int | str | None = None) -> int:
    """``jobs``, else ``[ci] parallel_jobs``, else auto: a worker per core cgroup and affinity leave us."""
    return resolve_jobs(jobs, config.ci.parallel_jobs, memory_limit_mb=config.validation.memory_limit_mb)


def run_gate(config: Config, options: GateOptions, store: Store | None = None) -> dict[str, Any]:
    """Run the gate and return the results document (see :mod:`results`)."""
    ops = options.ops or [o.name for o in config.ops]
    for name in ops:
        try:
            config.op(name)
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None
    kernels = [k.name for k in config.kernels] if options.kernels and not options.ops else []
    base = load_baseline(baseline_path(config, options.baseline)) if options.baseline else None  # fail early
    shard = None
    if options.shard is not None:  # balanced by cost: the baseline's, else the store's last run

        def opened() -> Store | None:
            nonlocal store
            if options.store and store is None:
                store = Store.for_workspace(config.root)
            return store

        shard = plan_shard(
            [("op", o) for o in ops] + [("kernel", x) for x in kernels],
            options.shard,
            os.environ,
            mode=options.mode,
            baseline=base,
            store=opened,
        )
        ops = [name for kind, name in shard.items if kind == "op"]
        kernels = [name for kind, name in shard.items if kind == "kernel"]
        if "--shard" not in options.command:  # the store tells shard runs apart by it (shard.store_costs)
            options = dataclasses.replace(options, command=f"{options.command} --shard {shard.k}/{shard.n}".strip())
    thorough = options.mode == "thorough"
    iterations = options.iterations or (config.ci.fuzz_iterations if thorough else config.ci.quick_iterations)
    run_opts = RunOptions(
        mode=options.mode,
        iterations=iterations,
        seed=options.seed,
        ops=ops,
        jobs=default_jobs(config, options.jobs),
        time_budget=config.ci.thorough_timeout if thorough else None,
        budget=options.budget,
        source=options.source,
        command=options.command,
        store=options.store,
        cancel=options.cancel,
        on_case=options.on_case,
    )
    if options.store and store is None:
        store = Store.for_workspace(config.root)
    entries = settle_ops(config, run_opts)
    run = run_validation(config, run_opts, store=store) if ops else None
    kernel_entries: list[dict[str, Any]] = []
    if kernels:
        from ..run.kernels import lint_entries

        kernel_entries = lint_entries(config, kernels)
        if store is not None:
            run_id = run.run_id if run is not None else None
            if run_id is None:  # a workspace of kernels only: a run to hold their results
                run_id = store.begin_run(
                    source=options.source,
                    mode=options.mode,
                    seed=None,
                    iterations=None,
                    workspace=config.root,
                    config_hash="",
                    command=options.command,
                )
            for e in kernel_entries:
                store.add_op_result(
                    run_id, e["name"], "kernel", e["status"], duration=e["elapsed"], message=e["message"], detail=e
                )
            if run is None:
                ok = all(e["status"] == "passed" for e in kernel_entries)
                store.finish_run(run_id, "passed" if ok else "failed")
    fail_on_regression = (
        options.fail_on_regression if options.fail_on_regression is not None else config.policies.fail_on_regression
    )
    doc = build_document(
        config,
        run,
        kernels=kernel_entries,
        shard=f"{shard.k}/{shard.n}" if shard else None,
        fail_on_regression=fail_on_regression,
        mode=options.mode,
        entries=entries,
    )
    if base is not None:
        regs = regressions(doc, base, config.ci.regression_threshold)
        doc = {}  # its op entries go before the document with regressions is built, not after
        doc = build_document(
            config,
            run,
            kernels=kernel_entries,
            regressions=regs,
            shard=f"{shard.k}/{shard.n}" if shard else None,
            fail_on_regression=fail_on_regression,
            mode=options.mode,
            extra={"baseline": base.get("tag")},
            entries=entries,
        )
    if shard is not None:  # what --merge checks: every shard planned the same partition
        doc["shard_plan"] = shard.describe()
    return doc
