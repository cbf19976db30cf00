"""Benchmarks 16-17 (issue 31): the store's size after 1,000 simulated CI runs with default retention; the
gate's peak memory at 100 and 1,000 ops."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import result

#: the simulated workspace: ops, cases per op per run, failing ops (5 %), failing cases of a failing op
OPS, CASES, FAILING_OPS, FAILING_CASES = 100, 10, 5, 5
#: commits a day: 1,000 runs are 100 days, so the 90-day age rule for failing cases is reached
RUNS_PER_DAY = 10


def _case(op: str, seed: int, failed: bool, snapshot: dict[str, np.ndarray] | None) -> Any:
    """A case result shaped like a real one (one compared output, its worst element and tolerance)."""
    from gpuemu_ls.engine.cases.plan import CaseSpec
    from gpuemu_ls.engine.oracle.compare import Comparison
    from gpuemu_ls.engine.oracle.outcome import CaseResult

    spec = CaseSpec(op, seed, "random", "float32", "contiguous", "normal", {"B": 4, "N": 64}, {"x": (4, 64)})
    comp = Comparison("out", not failed, "wrong" if failed else None, "float32", (4, 64), 1e-5, 1.3e-6, total=256)
    comp.max_abs, comp.max_rel, comp.max_ratio = (0.01, 0.01, 870.0) if failed else (1e-7, 1e-7, 0.1)
    comp.worst_index, comp.worst_op, comp.worst_ref, comp.worst_allowed = (3, 63), 1.01, 1.0, 1.2e-5
    status = "failed" if failed else "passed"
    return CaseResult(
        op, seed, spec, status, message="out: 12 of 256 elements differ" if failed else "", comparisons=[comp],
        durations={"op": 0.001, "ref": 0.001}, snapshot=snapshot, tolerance=(1e-5, 1.3e-6),
        tier="bug" if failed else None,
    )  # fmt: skip


def simulate_ci(path: Path, runs: int, ops: int = OPS, keep_runs: int = 20, days: float = 90.0) -> dict[str, Any]:
    """``runs`` gate runs through the real store API, each followed by the real retention rule, as the gate
    applies it (simulated clock: ``RUNS_PER_DAY`` a day). Half the failing cases draw new inputs each run (a
    fuzzed seed), so their snapshots never dedupe; the others fail on the same inputs every run."""
    from gpuemu_ls.engine.store.db import Store
    from gpuemu_ls.engine.store.prune import retain

    rng = np.random.default_rng(0)
    t0 = 1_700_000_000.0
    store = Store(path)
    sizes: list[int] = []
    fixed = {f"op{i:04d}": rng.standard_normal((4, 64)).astype(np.float32) for i in range(FAILING_OPS)}
    try:
        for r in range(runs):
            now = t0 + r * 86400.0 / RUNS_PER_DAY
            run_id = store.begin_run(
                source="ci", mode="thorough", seed=0, iterations=CASES, workspace=path.parent, config_hash="h"
            )
            moved = (now, run_id)  # the simulated clock's start
            store.write(lambda c, moved=moved: c.execute("UPDATE runs SET started_at = ? WHERE id = ?", moved))
            for i in range(ops):
                op = f"op{i:04d}"
                bad = i < FAILING_OPS * ops // OPS
                cases = []
                for k in range(CASES):
                    failed = bad and k < FAILING_CASES
                    snap = None
                    if failed:
                        x = fixed.get(op, fixed["op0000"]) if k % 2 else rng.standard_normal((4, 64)).astype(np.float32)
                        snap = {"x": x}
                    cases.append(_case(op, k + (1000 * r if failed and not k % 2 else 0), failed, snap))
                store.add_cases(run_id, cases, max_snapshots=20)
                store.add_op_result(
                    run_id, op, "op", "failed" if bad else "passed", cases=CASES, passed=CASES - FAILING_CASES * bad,
                    failed=FAILING_CASES * bad, duration=0.02,
                )  # fmt: skip
            store.finish_run(run_id, "failed")
            retain(store, keep_runs, "ci", days, now=now)
            sizes.append(path.stat().st_size + _wal(path))
        counts = {t: store.count(t) for t in ("runs", "cases", "snapshots")}
    finally:
        store.close()
    return {"sizes": sizes, "counts": counts}


def _wal(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def store_size(quick: bool) -> dict[str, Any]:
    """#16: the store after 1,000 simulated CI runs with default retention (20 runs, failing cases 90 days)."""
    from gpuemu_ls.engine.store.prune import prune

    runs, ops = (200, 20) if quick else (1000, OPS)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gpuemu.db"
        t = time.perf_counter()
        sim = simulate_ci(path, runs, ops)
        elapsed = time.perf_counter() - t
        sizes = sim["sizes"]
        done = prune(path, now=1_700_000_000.0 + runs * 86400.0 / RUNS_PER_DAY)
    mib = 2**20
    peak, final, vacuumed = max(sizes) / mib, sizes[-1] / mib, done.size_after / mib
    ceiling = 128.0 * ops / OPS  # the last 20 runs and 90 days of failing cases (see README, "The store")
    return result(
        16,
        f"result store after {runs} simulated CI runs of {ops} ops ({CASES} cases each, 5 % of ops failing),"
        f" {RUNS_PER_DAY} runs a day, default retention (20 runs, failing cases 90 days)",
        final,
        "MiB",
        f"< {ceiling:g} MiB",
        peak < ceiling,
        peak_mib=round(peak, 1),
        # the size as the runs went: it grows with the failing cases of the first 90 days, then stays
        mib_at={f"{q}%": round(sizes[max(0, len(sizes) * q // 100 - 1)] / mib, 1) for q in (25, 50, 75, 90, 100)},
        after_store_prune_mib=round(vacuumed, 1),
        rows=sim["counts"],
        seconds=round(elapsed, 1),
    )


#: runs the gate in this process and writes its own peak RSS (not its workers') to the file in argv[1]
RSS_GATE = """
import atexit, json, resource, runpy, sys
out = sys.argv[1]
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
atexit.register(lambda: open(out, "w").write(json.dumps({"maxrss_kb": peak()})))
sys.argv = ["gpuemu", *sys.argv[2:]]
runpy.run_module("gpuemu_ls", run_name="__main__")
"""


def gate_rss(root: Path, iterations: int | None, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The gate's own peak RSS (KiB) and wall time over the workspace ``root``, thorough, JSON to a file."""
    import json
    import subprocess

    from common import PYTHON

    mark = root / "rss.json"
    argv = ["ci", "--thorough", "--no-progress", "--format", "json", "--output", str(root / "doc.json"), *extra]
    if iterations:
        argv += ["--iterations", str(iterations)]
    t = time.perf_counter()
    proc = subprocess.run([PYTHON, "-c", RSS_GATE, str(mark), *argv], cwd=root, capture_output=True, text=True, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads((root / "doc.json").read_text())
    return {
        "maxrss_kb": json.loads(mark.read_text())["maxrss_kb"],
        "seconds": round(time.perf_counter() - t, 1),
        "cases": sum(o["cases"] for o in doc["ops"]),
    }


def gate_memory(quick: bool) -> dict[str, Any]:
    """#17: the gate's own peak RSS, thorough, on generated workspaces of 100 and 1,000 cheap numpy ops (5 % with
    a planted bug); ``GPUEMU_BENCH_OPS=100,1000,3000`` sets the sizes, ``GPUEMU_BENCH_ITERATIONS`` the cases."""
    import os

    from bench_tools import _bugged_workspace

    sizes = [int(n) for n in os.environ.get("GPUEMU_BENCH_OPS", "30,300" if quick else "100,1000").split(",")]
    iterations = int(os.environ.get("GPUEMU_BENCH_ITERATIONS", "10" if quick else "0")) or None
    runs: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            runs[n] = gate_rss(_bugged_workspace(Path(tmp) / f"ws{n}", n), iterations)
    small, big = min(sizes), max(sizes)
    ratio = runs[big]["maxrss_kb"] / runs[small]["maxrss_kb"]
    return result(
        17,
        f"gate peak RSS (its own process), thorough{f' --iterations {iterations}' if iterations else ''}:"
        f" {big} ops vs {small} ops",
        ratio,
        "x",
        "<= 2x (to 3,000 ops)",
        ratio <= 2.0,
        rss_mib={str(n): round(r["maxrss_kb"] / 1024, 1) for n, r in runs.items()},
        cases={str(n): r["cases"] for n, r in runs.items()},
        seconds={str(n): r["seconds"] for n, r in runs.items()},
    )


BENCHMARKS = {16: store_size, 17: gate_memory}
