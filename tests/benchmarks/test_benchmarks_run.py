"""The benchmark suite itself keeps working: a quick run of every figure produces a number, not an error.

Timings are not asserted here (they live in benchmarks/ and the README); this only guards against a
benchmark that silently broke and would report NaN the next time someone measures.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_run_measures_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    only = "1,2,3,6,8"  # 4, 5 and 7 start language servers and CLI runs: covered by their own suites
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--only", only, "--output", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["quick"] is True
    results = {r["number"]: r for r in doc["results"]}
    assert sorted(results) == [int(x) for x in only.split(",")]
    for number, r in results.items():
        assert "error" not in r["details"], (number, r["details"])
        assert math.isfinite(r["value"]) and r["value"] > 0, (number, r)
    assert results[8]["details"]["status"] == "passed"
    assert "| 3 |" in proc.stdout  # the markdown table
