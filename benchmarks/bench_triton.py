"""Benchmark 11: the CI gate on real Triton kernels through the CPU interpreter (benchmarks/triton_ws).

Side by side in one run, two rows by default:

* ``today``: the gate as it planned before the small-scope planner and budgets: every op ``cost = "normal"``
  (written into the workspace copy) and ``--budget off``: the whole plan, at every size;
* ``default``: the workspace as it is, no flags: every op imports triton, so ``cost = "auto"`` makes it
  high-cost (small-scope shapes) and the default work budget cuts its plan (the same cases on every machine).

For each row: the thorough gate's wall time (``gpuemu ci``, a fresh store, ``--jobs auto``) on seeds 0, 1000
and 2000; whether every ``_bug_`` op failed and every other op passed on each seed (bugs caught over 3 seeds);
the quick gate (``--quick``) on seed 0: its time and the same verdict check. ``--gate-flags`` adds rows of
extra flags on the workspace as it is (e.g. ``--gate-flags "--budget 60s"``).

    python benchmarks/bench_triton.py [--quick] [--gate-flags "--budget 60s"]
    python benchmarks/run.py --only 11

Needs torch and triton (skipped with a reason otherwise). ``--quick`` is a smoke run (seed 0, 4 thorough
and 2 quick cases per op), not the figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import result

WORKSPACE = Path(__file__).resolve().parent / "triton_ws"
SEEDS = (0, 1000, 2000)  # far apart: a run covers its seed and the next ones, so 0, 1, 2 would overlap
QUICK_GOAL_S = 60.0
SPEEDUP_GOAL = 4.0
#: The goal benchmarks 11 and 13 state.
GOAL = (
    f">= {SPEEDUP_GOAL:g}x; every _bug_ op fails and every other op passes on each seed in both rows; "
    f"default quick <= {QUICK_GOAL_S:g} s"
)
#: The rows: a name, extra gate flags, and whether every op is written ``cost = "normal"`` (the plan before
#: the small-scope planner). benchmarks/run.py --gate-flags adds rows.
ROWS: list[tuple[str, str, bool]] = [("today", "--budget off", True), ("default", "", False)]
#: More rows of gate flags (benchmarks/run.py --gate-flags).
EXTRA_ROWS: list[str] = []


def _copy(dest: Path, normal_cost: bool = False, source: Path = WORKSPACE) -> Path:
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".gpuemu", "__pycache__", "gpuemu-baselines"))
    if normal_cost:  # every op planned as before issue 16: no small-scope shapes, no work budget
        toml = dest / "gpuemu.toml"
        text = toml.read_text(encoding="utf-8").replace("[[ops]]\n", '[[ops]]\ncost = "normal"\n')
        toml.write_text(text, encoding="utf-8")
    return dest


def _gate(ws: Path, *flags: str) -> dict[str, Any]:
    """One ``gpuemu ci`` run: wall time, exit code, which ops were right (bugs failed, twins passed), and each
    op's verdict, cases, seconds and budget cut (``per_op``)."""
    out = ws / f"run-{time.monotonic_ns()}.json"
    env = dict(os.environ)
    env.pop("GPUEMU_STORE", None)
    cmd = [sys.executable, "-m", "gpuemu_ls", "ci", *flags, "--format", "json", "--output", str(out), "--no-progress"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ws, capture_output=True, text=True, env=env, timeout=3600, check=False)
    seconds = time.perf_counter() - t0
    if not out.is_file():
        why = proc.stderr[-2000:]
        raise RuntimeError(f"gpuemu ci {' '.join(flags)} wrote no results (exit {proc.returncode}): {why}")
    doc = json.loads(out.read_text(encoding="utf-8"))
    wrong = [
        f"{e['name']}: {e['status']}"
        for e in doc["ops"]
        if ("_bug_" in e["name"]) != (e["status"] == "failed") or e["status"] not in ("passed", "failed")
    ]
    bugs = [e for e in doc["ops"] if "_bug_" in e["name"]]
    return {
        "seconds": round(seconds, 1),
        "exit_code": proc.returncode,
        "ops": len(doc["ops"]),
        "cases": sum(e["cases"] for e in doc["ops"]),
        "bugs_caught": sum(1 for e in bugs if e["status"] == "failed"),
        "bugs": len(bugs),
        "wrong": wrong,
        "budget_line": next((ln for ln in proc.stdout.splitlines() if ln.startswith("budget")), None),
        "per_op": {
            e["name"]: {
                "status": e["status"],
                "cases": e["cases"],
                "seconds": e.get("elapsed"),
                "budget": {k: e["budget"].get(k) for k in ("source", "planned", "ran", "cut_cases", "smaller_cases")}
                if e.get("budget")
                else None,
            }
            for e in doc["ops"]
        },
    }


def _jobs() -> int:
    from gpuemu_ls.engine.run.cpus import available_cpus

    return available_cpus()


def triton_gate(quick: bool, gate_flags: list[str] | None = None) -> dict[str, Any]:
    """#11: thorough and quick gate time on benchmarks/triton_ws, today's plan vs the default, and bugs
    caught over 3 seeds."""
    missing = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
    if missing:
        raise RuntimeError(f"needs {' and '.join(missing)} (pip install '.[triton]')")
    seeds = SEEDS[:1] if quick else SEEDS
    limits = ["--iterations", "4"] if quick else []
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpuemu-bench-triton-") as tmp:
        for i, (name, text, normal) in enumerate([*ROWS, *((f, f, False) for f in (gate_flags or EXTRA_ROWS))]):
            flags = shlex.split(text)
            runs = []
            for seed in seeds:  # a fresh store per run: no run reuses another's measurements
                ws = _copy(Path(tmp) / f"row{i}-seed{seed}", normal)
                runs.append({"seed": seed, **_gate(ws, *flags, *limits, "--seed", str(seed))})
            ws = _copy(Path(tmp) / f"row{i}-quick", normal)
            quick_run = _gate(ws, "--quick", *flags, *(["--iterations", "2"] if quick else []), "--seed", "0")
            rows.append(
                {
                    "row": name,
                    "gate_flags": text,
                    "cost_normal": normal,
                    "thorough_s": statistics.median(r["seconds"] for r in runs),
                    "thorough_runs": runs,
                    "quick_s": quick_run["seconds"],
                    "quick": quick_run,
                    "all_verdicts_right": all(not r["wrong"] for r in runs),
                    "quick_verdicts_right": not quick_run["wrong"],
                }
            )
    first = rows[0]
    details: dict[str, Any] = {"jobs": _jobs(), "seeds": list(seeds), "rows": rows}
    speedups = [round(first["thorough_s"] / r["thorough_s"], 2) if r["thorough_s"] else None for r in rows[1:]]
    details["thorough_speedup_today_vs_others"] = speedups
    default = rows[1]
    met = (
        all(r["all_verdicts_right"] for r in rows)
        and default["quick_verdicts_right"]
        and default["quick_s"] <= QUICK_GOAL_S
        and (quick or (speedups[0] or 0) >= SPEEDUP_GOAL)
    )
    return result(
        11,
        "benchmarks/triton_ws (16 Triton ops through the interpreter, 8 one-line bugs): thorough gate time, "
        f"today's plan (cost normal, --budget off) over the default (median of seeds {', '.join(map(str, seeds))});"
        " quick time and bugs caught per seed in the details",
        speedups[0],
        "x",
        GOAL,
        met,
        **details,
    )


BENCHMARKS = {11: triton_gate}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run (seed 0, few cases), not the figures")
    parser.add_argument(
        "--gate-flags",
        action="append",
        metavar="FLAGS",
        help='one more row: these gate flags on the workspace as it is, e.g. "--budget 60s" (repeatable)',
    )
    parser.add_argument("--output", help="write the result as JSON here too")
    args = parser.parse_args()
    return emit(triton_gate(args.quick, args.gate_flags), args.output)


def emit(r: dict[str, Any], output: str | None, more: Callable[[dict[str, Any]], str] = lambda row: "") -> int:
    """Print a gate benchmark's result (JSON on stdout, written to ``output`` too) and a line per row on stderr
    (``more`` adds to each); the exit code: 0 if its goal is met."""
    text = json.dumps(r, indent=2)
    if output:
        Path(output).write_text(text + "\n", encoding="utf-8")
    print(text)
    for row in r["details"]["rows"]:
        print(
            f"{row['row']} (gate flags {row['gate_flags']!r}): thorough {row['thorough_s']} s (median), "
            f"quick {row['quick_s']} s; "
            f"bugs caught {[x['bugs_caught'] for x in row['thorough_runs']]} of {row['quick']['bugs']}, "
            f"{more(row)}verdicts right: thorough {row['all_verdicts_right']}, quick {row['quick_verdicts_right']}",
            file=sys.stderr,
        )
    return 0 if r["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
