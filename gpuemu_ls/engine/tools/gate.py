"""The CI gate: ``gpuemu ci`` and ``gpuemu-ls --check`` are this one function.

Quick mode: float32 plus a few half-precision cases (``[ci] quick_dtypes`` overrides), default and
boundary shapes, ``[ci.quick]`` iterations.
Thorough: every dtype, layout, shape strategy and distribution, ``[ci] fuzz_iterations`` cases, with
``[ci] thorough_timeout`` as each op's time budget. Ops run in parallel processes; ``--shard K/N``
splits ops and kernels deterministically (sorted by name, round robin) so a CI matrix covers each
exactly once and ``gpuemu report --merge`` joins the shards into the unsharded verdict.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config.load import Config
from ..errors import UsageError
from ..oracle.outcome import CaseResult
from ..report.baseline import baseline_path, load_baseline, regressions
from ..report.results import build_document
from ..run.validate import RunOptions, run_validation
from ..store.db import Store


@dataclass
class GateOptions:
    mode: str = "thorough"
    seed: int | None = None
    iterations: int | None = None
    jobs: int | None = None
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


def parse_shard(text: str) -> tuple[int, int]:
    try:
        k_s, n_s = text.split("/")
        k, n = int(k_s), int(n_s)
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected K/N, e.g. 1/4") from None
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"--shard {text!r}: K must be in 1..N")
    return k, n


def shard_items(items: list[tuple[str, str]], k: int, n: int) -> list[tuple[str, str]]:
    """Shard ``k`` of ``n`` of (kind, name) items: sorted, every n-th from the (k-1)-th."""
    return [it for i, it in enumerate(sorted(items)) if i % n == k - 1]


def default_jobs(config: Config) -> int:
    return config.ci.parallel_jobs or max(1, min(4, os.cpu_count() or 1))


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
    if options.shard is not None:
        k, n = parse_shard(options.shard)
        chosen = shard_items([("op", o) for o in ops] + [("kernel", x) for x in kernels], k, n)
        ops = [name for kind, name in chosen if kind == "op"]
        kernels = [name for kind, name in chosen if kind == "kernel"]
    thorough = options.mode == "thorough"
    iterations = options.iterations or (config.ci.fuzz_iterations if thorough else config.ci.quick_iterations)
    run_opts = RunOptions(
        mode=options.mode,
        iterations=iterations,
        seed=options.seed,
        ops=ops,
        jobs=options.jobs or default_jobs(config),
        time_budget=config.ci.thorough_timeout if thorough else None,
        source=options.source,
        command=options.command,
        store=options.store,
        cancel=options.cancel,
        on_case=options.on_case,
    )
    if options.store and store is None:
        store = Store.for_workspace(config.root)
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
        shard=options.shard,
        fail_on_regression=fail_on_regression,
        mode=options.mode,
    )
    if base is not None:
        regs = regressions(doc, base, config.ci.regression_threshold)
        doc = build_document(
            config,
            run,
            kernels=kernel_entries,
            regressions=regs,
            shard=options.shard,
            fail_on_regression=fail_on_regression,
            mode=options.mode,
            extra={"baseline": base.get("tag")},
        )
    return doc
