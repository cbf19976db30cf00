"""Run the benchmark suite: ``python benchmarks/run.py [--quick] [--only 1,3] [--output FILE]``.

Each figure is a ratio or a latency measured side by side in one run on this machine; results go
to a JSON file (default benchmarks/results/results.json) and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine
import bench_lsp
import bench_ops_scale
import bench_report
import bench_scale
import bench_tools
import bench_triton
import bench_triton_corpus
import bench_verdicts

ALL = {
    **bench_engine.BENCHMARKS,
    **bench_lsp.BENCHMARKS,
    **bench_ops_scale.BENCHMARKS,
    **bench_report.BENCHMARKS,
    **bench_scale.BENCHMARKS,
    **bench_tools.BENCHMARKS,
    **bench_verdicts.BENCHMARKS,
    **bench_triton.BENCHMARKS,
    **bench_triton_corpus.BENCHMARKS,
}


def table(results: list[dict]) -> str:
    lines = ["| # | measure | goal | measured | met |", "|---|---|---|---|---|"]
    for r in results:
        value = r["value"]
        shown = f"{value:.3g} {r['unit']}" if isinstance(value, (int, float)) else str(value)
        lines.append(f"| {r['number']} | {r['measure']} | {r['goal']} | {shown} | {'yes' if r['met'] else 'NO'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run, not the figures)")
    parser.add_argument("--only", help="comma-separated benchmark numbers")
    parser.add_argument("--output", default=str(Path(__file__).resolve().parent / "results" / "results.json"))
    parser.add_argument(
        "--gate-flags",
        action="append",
        metavar="FLAGS",
        help='#11: one more row of gate flags beside today and default (e.g. --gate-flags "--budget 60s")',
    )
    args = parser.parse_args()
    if args.gate_flags:
        bench_triton.EXTRA_ROWS[:] = args.gate_flags
    chosen = [int(x) for x in args.only.split(",")] if args.only else sorted(ALL)
    results = []
    for number in chosen:
        t0 = time.perf_counter()
        try:
            r = ALL[number](args.quick)
        except Exception as exc:  # a broken benchmark is a finding, not a crash of the suite
            r = {
                "number": number,
                "measure": ALL[number].__doc__ or "",
                "value": float("nan"),
                "unit": "",
                "goal": "",
                "met": False,
                "details": {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()},
            }
        r["seconds"] = round(time.perf_counter() - t0, 1)
        results.append(r)
        print(f"[{number}] {r['value']!r} {r.get('unit', '')} met={r['met']} ({r['seconds']} s)", file=sys.stderr)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": {
                    "python": platform.python_version(),
                    "cpus": __import__("os").cpu_count(),
                    "platform": platform.platform(),
                },
                "quick": args.quick,
                "results": results,
            },
            indent=2,
            default=str,
        )
    )
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
