"""Benchmarks 9-10: what trustworthy verdicts cost, side by side in one run, in process (no workers).

#9  extra cases of a verdict: the whole thorough run of ``examples/buggy`` (every case of every op) with the
    tier cases of its failing cases (oracle/tier.py) and the diagnosis' confirmation cases of its failing
    ops, against the same run with neither.
#10 out-of-range checks: every case of the correct kernels of ``examples/families``, with the extra
    reference evaluations that decide out of range (working precision, doubled inputs, magnitudes)
    against the same cases with those evaluations off.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from common import result

from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.oracle.diagnose import confirm
from gpuemu_ls.engine.run.case import run_case
from gpuemu_ls.engine.run.confirm import variant_spec
from gpuemu_ls.engine.run.validate import plan_op
from gpuemu_ls.engine.run.worker import build_context

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _context(root: Path, name: str, range_checks: bool = True) -> Any:
    cfg = load_config(root)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    ctx = build_context(cfg.root, cfg.op(name), cfg.validation)
    ctx.range_checks = range_checks
    return cfg, ctx


def confirmation_cost(quick: bool) -> dict[str, Any]:
    """#9: confirmation cases of the diagnosis, against the same run without them (examples/buggy)."""
    root = EXAMPLES / "buggy"
    cfg = load_config(root)
    iterations = 12 if quick else None
    run_t = probe_t = bare_t = tier_t = 0.0
    probes = cases = failing = tiers = 0
    for op in cfg.ops:
        _, ctx = _context(root, op.name)
        specs = plan_op(cfg, op, "thorough", iterations, None)
        t0 = time.perf_counter()
        for s in specs:
            run_case(ctx, s, tiering=False)
        bare_t += time.perf_counter() - t0
        t0 = time.perf_counter()
        results = [run_case(ctx, s) for s in specs]
        run_t += time.perf_counter() - t0
        tiers += sum(1 for r in results if "tier_case" in r.features)
        tier_t += sum(float(r.durations.get("tier", 0.0)) for r in results)
        cases += len(results)
        if any(r.bug or r.status == "error" for r in results):
            failing += 1
            t0 = time.perf_counter()
            ran = confirm(
                results, op, lambda base, changes, ctx=ctx, op=op: run_case(ctx, variant_spec(op, base, changes))
            )
            probe_t += time.perf_counter() - t0
            probes += len(ran)
    ratio = (run_t + probe_t) / bare_t
    share = (probes + tiers) / cases
    return result(
        9,
        "thorough run of examples/buggy with the tier cases and the diagnosis' confirmation cases vs the same "
        "run with neither (time; the bound is on cases and input elements, which keeps verdicts machine-independent)",
        ratio,
        "x",
        "<= 16 confirmation cases per failing op and <= 20 % of the run's cases with the tier cases",
        probes <= 16 * failing and share <= 0.2,
        cases=cases,
        failing_ops=failing,
        confirmation_cases=probes,
        tier_cases=tiers,
        extra_share_of_cases=round(share, 3),
        bare_s=round(bare_t, 2),
        run_s=round(run_t, 2),
        tier_s=round(tier_t, 2),
        confirmation_s=round(probe_t, 2),
    )


def range_check_cost(quick: bool) -> dict[str, Any]:
    """#10: out-of-range evaluations on the correct kernels of examples/families, vs the same cases without."""
    root = EXAMPLES / "families"
    cfg = load_config(root)
    iterations = 10 if quick else None
    on_t = off_t = 0.0
    cases = out_of_range = tiers = edges = 0
    for op in cfg.ops:
        if "_bug_" in op.name:
            continue
        specs = plan_op(cfg, op, "thorough", iterations, None)
        _, with_checks = _context(root, op.name, True)
        _, without = _context(root, op.name, False)
        t0 = time.perf_counter()
        checked = [run_case(with_checks, s) for s in specs]
        on_t += time.perf_counter() - t0
        t0 = time.perf_counter()
        for s in specs:
            run_case(without, s)
        off_t += time.perf_counter() - t0
        cases += len(specs)
        out_of_range += sum(1 for r in checked if any(c.out_of_range for c in r.comparisons))
        tiers += sum(1 for r in checked if "tier_case" in r.features)
        edges += sum(1 for r in checked if r.tier == "edge")
    ratio = on_t / off_t
    return result(
        10,
        "correct kernels of examples/families, thorough: with the out-of-range evaluations vs without",
        ratio,
        "x",
        "<= 1.25x",
        ratio <= 1.25,
        cases=cases,
        cases_with_out_of_range=out_of_range,
        tier_cases=tiers,
        edge_findings=edges,
        with_s=round(on_t, 2),
        without_s=round(off_t, 2),
    )


BENCHMARKS = {9: confirmation_cost, 10: range_check_cost}
