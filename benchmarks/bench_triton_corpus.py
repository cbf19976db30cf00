"""Benchmark 13: the CI gate on a corpus of small Triton kernels (benchmarks/triton_corpus), as public kernel
corpora have them: no ``tile`` hints on the dims, and most ops loaded through a shim module that imports no
triton (so ``cost = "auto"`` cannot see that their kernels run in Triton's CPU interpreter).

Side by side in one run, two rows, both on the workspace as it is:

* ``off``: ``--budget off``: every op's whole plan, at every size;
* ``default``: no flags: what a user gets.

For each row: the thorough gate's wall time (``gpuemu ci``, a fresh store) on seeds 0, 1000 and 2000 (the
median is the figure); whether every ``_bug_`` op failed and every other op passed on each seed (a correct
op's edge findings, overflow at the dtype's top that the tool says is no bug of the kernel, count as passed);
the quick gate (``--quick``) on seed 0: its time and the same check. Each run's per-op verdicts, cases,
seconds and budget cut are in the details.

    python benchmarks/bench_triton_corpus.py [--quick] [--jobs N] [--output FILE]
    python benchmarks/run.py --only 13

Needs torch and triton (skipped with a reason otherwise). ``--quick`` is a smoke run (seed 0, 4 thorough
and 2 quick cases per op), not the figures. ``--jobs`` passes ``--jobs N`` to every gate (default: the
gate's own, a worker per usable core).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_triton import GOAL, QUICK_GOAL_S, SEEDS, SPEEDUP_GOAL, _copy, _gate, _jobs, emit
from common import result

WORKSPACE = Path(__file__).resolve().parent / "triton_corpus"
#: The rows: a name and its gate flags. The first is the one the others are measured against.
ROWS: list[tuple[str, str]] = [("off", "--budget off"), ("default", "")]
#: A correct op's verdicts that count as right: passed, or edge findings only (overflow at the dtype's top, NaN
#: conventions: what the tool itself says is not a bug of the kernel).
CORRECT = ("passed", "edge")


def _wrong(run: dict[str, Any]) -> list[str]:
    """Ops whose verdict is not the expected one: a ``_bug_`` op that did not fail, another op that failed."""
    return [
        f"{name}: {op['status']}"
        for name, op in run["per_op"].items()
        if (op["status"] != "failed" if "_bug_" in name else op["status"] not in CORRECT)
    ]


def _run(ws: Path, *flags: str) -> dict[str, Any]:
    run = _gate(ws, *flags)
    run["wrong"] = _wrong(run)
    run["edge"] = sorted(n for n, op in run["per_op"].items() if op["status"] == "edge")
    run["missed"] = sorted(n for n, op in run["per_op"].items() if "_bug_" in n and op["status"] != "failed")
    return run


def corpus_gate(quick: bool, jobs: int | None = None) -> dict[str, Any]:
    """#13: thorough and quick gate time on benchmarks/triton_corpus, --budget off vs the default, and bugs
    caught over 3 seeds."""
    missing = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
    if missing:
        raise RuntimeError(f"needs {' and '.join(missing)} (pip install '.[triton]')")
    seeds = SEEDS[:1] if quick else SEEDS
    limits = ["--iterations", "4"] if quick else []
    job_flags = ["--jobs", str(jobs)] if jobs else []
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpuemu-bench-corpus-") as tmp:
        for i, (name, text) in enumerate(ROWS):
            flags = [*text.split(), *job_flags]
            runs = []
            for seed in seeds:  # a fresh store per run: no run reuses another's measurements
                ws = _copy(Path(tmp) / f"row{i}-seed{seed}", source=WORKSPACE)
                runs.append({"seed": seed, **_run(ws, *flags, *limits, "--seed", str(seed))})
            ws = _copy(Path(tmp) / f"row{i}-quick", source=WORKSPACE)
            quick_run = _run(ws, "--quick", *flags, *(["--iterations", "2"] if quick else []), "--seed", "0")
            rows.append(
                {
                    "row": name,
                    "gate_flags": text,
                    "thorough_s": statistics.median(r["seconds"] for r in runs),
                    "thorough_runs": runs,
                    "quick_s": quick_run["seconds"],
                    "quick": quick_run,
                    "all_verdicts_right": all(not r["wrong"] for r in runs),
                    "quick_verdicts_right": not quick_run["wrong"],
                }
            )
    off, default = rows
    speedup = round(off["thorough_s"] / default["thorough_s"], 2) if default["thorough_s"] else None
    details: dict[str, Any] = {
        "jobs": jobs or _jobs(),
        "seeds": list(seeds),
        "rows": rows,
        "thorough_speedup_off_vs_default": speedup,
    }
    met = (
        all(r["all_verdicts_right"] for r in rows)
        and default["quick_s"] <= QUICK_GOAL_S
        and (quick or (speedup or 0) >= SPEEDUP_GOAL)
    )
    ops = off["quick"]["ops"]
    bugs = off["quick"]["bugs"]
    return result(
        13,
        f"benchmarks/triton_corpus ({ops} small Triton ops as public corpora have them, {bugs} one-line bugs; no "
        "tile hints, most ops loaded through a shim): thorough gate time, --budget off over the default (median "
        f"of seeds {', '.join(map(str, seeds))}); quick time and bugs caught per seed in the details",
        speedup,
        "x",
        GOAL,
        met,
        **details,
    )


BENCHMARKS = {13: corpus_gate}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run (seed 0, few cases), not the figures")
    parser.add_argument("--jobs", type=int, help="--jobs N for every gate (default: the gate's own)")
    parser.add_argument("--output", help="write the result as JSON here too")
    args = parser.parse_args()
    return emit(corpus_gate(args.quick, args.jobs), args.output, _missed)


def _missed(row: dict[str, Any]) -> str:
    return f"missed {[x['missed'] for x in row['thorough_runs']]}, quick missed {row['quick']['missed']}; "


if __name__ == "__main__":
    sys.exit(main())
