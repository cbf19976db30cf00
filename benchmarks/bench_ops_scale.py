"""Benchmark 18: a team with thousands of ops (issue 31) -- the gate and the store's reads at 100, 1,000 and
3,000 generated ops, side by side in one run.

Each size is a workspace of cheap numpy ops, one module each, 5 % with a planted bug
(``bench_tools._bugged_workspace``), gated thorough at 10 cases an op with a fresh store. Measured per size:
the gate's wall time per op and its own peak RSS (``bench_scale.gate_rss``: the supervisor's, not its
workers'), then `gpuemu failures`, `ops` and `report` on the stored run (fastest of 2), per op. The goals
compare the largest size with the smallest: gate time per op within 1.25x, peak RSS within 2x, each read
within 1.5x per op. The server's latencies under load are benchmark 15 and the store's size after a year of
CI benchmark 16; benchmark 17 is the peak RSS alone, thorough at 100 cases an op.

    python benchmarks/run.py --only 18 [--quick]

``--quick`` runs 30, 100 and 300 ops: a smoke run, not the figures.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench_scale import gate_rss
from bench_tools import _bugged_workspace
from common import PYTHON, best_of, result

#: cases an op: what makes a 3,000-op thorough gate take minutes, not an hour, on 2 cores
ITERATIONS = 10
READS = ("failures", "ops", "report")
GOALS = {"gate_s_per_op": 1.25, "peak_rss": 2.0, **{r: 1.5 for r in READS}}


def _read(root: Path, command: str) -> None:
    done = subprocess.run([PYTHON, "-m", "gpuemu_ls", command], cwd=root, capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), f"gpuemu {command}: {done.stderr[-2000:]}"


def ops_scale(quick: bool) -> dict[str, Any]:
    """#18: gate time per op, gate peak RSS and store reads per op, at 100, 1,000 and 3,000 ops."""
    sizes = (30, 100, 300) if quick else (100, 1000, 3000)
    rows: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="gpuemu-bench-scale-") as tmp:
        for n in sizes:
            root = _bugged_workspace(Path(tmp) / f"ws{n}", n)
            gate = gate_rss(root, ITERATIONS)
            row = {
                "gate_s_per_op": gate["seconds"] / n,
                "peak_rss": gate["maxrss_kb"] / 1024,
                "cases": gate["cases"],
            }
            for command in READS:
                row[command] = best_of(2, lambda c=command, r=root: _read(r, c)) / n
            rows[n] = row
    lo, hi = rows[sizes[0]], rows[sizes[-1]]
    growth = {k: round(hi[k] / lo[k], 2) for k in GOALS}
    met = all(growth[k] <= goal for k, goal in GOALS.items())
    worst = max(growth[k] / goal for k, goal in GOALS.items())
    return result(
        18,
        f"{sizes[0]} / {sizes[1]} / {sizes[2]} generated numpy ops (5 % failing, thorough, {ITERATIONS} cases an "
        f"op): gate time per op, gate peak RSS, failures/ops/report per op, at {sizes[-1]} ops over {sizes[0]}",
        round(worst, 2),
        "of its goal (worst)",
        "gate/op <= 1.25x, RSS <= 2x, reads/op <= 1.5x",
        met,
        growth=growth,
        per_size={
            str(n): {
                "gate_ms_per_op": round(r["gate_s_per_op"] * 1000, 1),
                "peak_rss_mib": round(r["peak_rss"], 1),
                "cases": r["cases"],
                **{f"{c}_ms_per_op": round(r[c] * 1000, 2) for c in READS},
            }
            for n, r in rows.items()
        },
    )


BENCHMARKS = {18: ops_scale}
