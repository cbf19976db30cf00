"""Benchmark 11: the CI gate on real Triton kernels through the CPU interpreter (benchmarks/triton_ws).

Side by side in one run, for each row of extra gate flags (``--gate-flags``, repeatable; default one row
with none, e.g. ``--gate-flags "--budget off" --gate-flags ""`` for a time budget's before and after):

* the thorough gate's wall time (``gpuemu ci``, a fresh store, ``--jobs auto``) on seeds 0, 1000 and 2000;
* whether every ``_bug_`` op failed and every other op passed on each seed (bugs caught over 3 seeds);
* the quick gate (``--quick``) on seed 0: its time and the same verdict check.

    python benchmarks/bench_triton.py [--quick] [--gate-flags "--budget off"] [--gate-flags ""]
    python benchmarks/run.py --only 11 [--gate-flags ...]

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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import result

WORKSPACE = Path(__file__).resolve().parent / "triton_ws"
SEEDS = (0, 1000, 2000)  # far apart: a run covers its seed and the next ones, so 0, 1, 2 would overlap
QUICK_GOAL_S = 60.0
#: Rows of extra gate flags; benchmarks/run.py --gate-flags sets it.
GATE_FLAGS: list[str] = [""]


def _copy(dest: Path) -> Path:
    shutil.copytree(WORKSPACE, dest, ignore=shutil.ignore_patterns(".gpuemu", "__pycache__", "gpuemu-baselines"))
    return dest


def _gate(ws: Path, *flags: str) -> dict[str, Any]:
    """One ``gpuemu ci`` run: wall time, exit code, and which ops were right (bugs failed, twins passed)."""
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
    }


def _jobs() -> int:
    from gpuemu_ls.engine.run.cpus import available_cpus

    return available_cpus()


def triton_gate(quick: bool, gate_flags: list[str] | None = None) -> dict[str, Any]:
    """#11: thorough and quick gate time on benchmarks/triton_ws, and bugs caught over 3 seeds."""
    missing = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
    if missing:
        raise RuntimeError(f"needs {' and '.join(missing)} (pip install '.[triton]')")
    seeds = SEEDS[:1] if quick else SEEDS
    limits = ["--iterations", "4"] if quick else []
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpuemu-bench-triton-") as tmp:
        for i, text in enumerate(gate_flags or GATE_FLAGS):
            flags = shlex.split(text)
            runs = []
            for seed in seeds:  # a fresh store per run: no run reuses another's measurements
                ws = _copy(Path(tmp) / f"row{i}-seed{seed}")
                runs.append({"seed": seed, **_gate(ws, *flags, *limits, "--seed", str(seed))})
            ws = _copy(Path(tmp) / f"row{i}-quick")
            quick_run = _gate(ws, "--quick", *flags, *(["--iterations", "2"] if quick else []), "--seed", "0")
            rows.append(
                {
                    "gate_flags": text,
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
    if len(rows) > 1:
        details["thorough_speedup_first_vs_others"] = [
            round(first["thorough_s"] / r["thorough_s"], 2) if r["thorough_s"] else None for r in rows[1:]
        ]
    met = all(r["all_verdicts_right"] for r in rows) and all(
        r["quick_verdicts_right"] and r["quick_s"] <= QUICK_GOAL_S for r in rows
    )
    return result(
        11,
        "benchmarks/triton_ws (16 Triton ops through the interpreter, 8 one-line bugs): thorough gate time "
        f"(median of seeds {', '.join(map(str, seeds))}; gate flags {first['gate_flags']!r}), with quick time and "
        "bugs caught per seed in the details",
        first["thorough_s"],
        "s",
        f"every _bug_ op fails and every other op passes on each seed; quick <= {QUICK_GOAL_S:g} s",
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
        help='extra flags for every gate run of a row, e.g. "--budget off" (repeat for more rows)',
    )
    parser.add_argument("--output", help="write the result as JSON here too")
    args = parser.parse_args()
    r = triton_gate(args.quick, args.gate_flags)
    text = json.dumps(r, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    print(text)
    for row in r["details"]["rows"]:
        print(
            f"gate flags {row['gate_flags']!r}: thorough {row['thorough_s']} s (median), quick {row['quick_s']} s; "
            f"bugs caught {[x['bugs_caught'] for x in row['thorough_runs']]} of {row['quick']['bugs']}, "
            f"verdicts right: thorough {row['all_verdicts_right']}, quick {row['quick_verdicts_right']}",
            file=sys.stderr,
        )
    return 0 if r["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
