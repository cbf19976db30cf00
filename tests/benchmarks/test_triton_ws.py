"""The Triton benchmark workspace (issue 16) stays right: a quick gate run through the CPU interpreter fails
every `_bug_` op and passes every correct twin, each family has both, and the two families copied from
examples/triton stay the same code. The timed thorough runs over 3 seeds are benchmark 11
(benchmarks/bench_triton.py), not a test: they take minutes."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kit.cli import gpuemu

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("the Triton benchmark workspace needs torch and triton", allow_module_level=True)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
WS = ROOT / "benchmarks" / "triton_ws"
FAMILIES = ("softmax_looped", "layernorm", "rmsnorm", "matmul_ktiles", "flash_attention", "cumsum")


def _gpuemu(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return gpuemu(*args, cwd=cwd, timeout=900)


def test_every_family_has_a_correct_op_and_a_buggy_twin() -> None:
    ops = [o["name"] for o in tomllib.loads((WS / "gpuemu.toml").read_text(encoding="utf-8"))["ops"]]
    for family in (*FAMILIES, "softmax", "matmul"):
        assert family in ops, family
        assert any(o.startswith(f"{family}_bug_") for o in ops), family
    assert all(o.split("_bug_")[0] in ops for o in ops)  # every bug has its twin
    for name in ("softmax.py", "matmul.py"):  # the examples/triton kernels, unchanged
        assert (WS / name).read_bytes() == (ROOT / "examples" / "triton" / name).read_bytes(), name


@pytest.mark.parametrize("mode", ["--quick", "--thorough"])
def test_the_default_gate_catches_every_bug_and_passes_every_twin(tmp_path: Path, mode: str) -> None:
    """Default settings: every op imports triton, so each gets small-scope shapes and the default work
    budget, counted on its probe cases (the same cases on every machine); the cut still fails every bug and
    passes every twin."""
    ws = tmp_path / "triton_ws"
    shutil.copytree(WS, ws, ignore=shutil.ignore_patterns(".gpuemu", "__pycache__"))
    proc = _gpuemu("ci", mode, "--seed", "0", "--format", "json", "--no-progress", cwd=ws)
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    verdicts = {e["name"]: e["status"] for e in doc["ops"]}
    assert len(verdicts) == 16
    # a correct kernel passes, or has edge findings only (overflow at the dtype's top): never failed
    wrong = {n: s for n, s in verdicts.items() if s not in (("failed",) if "_bug_" in n else ("passed", "edge"))}
    assert not wrong, wrong
    cut = [e for e in doc["ops"] if e["budget"]]
    for e in cut:  # each op cut by work kept every coverage class, and says so
        budget = e["budget"]
        # the source says triton and the probe case confirms it: the cut is in counted interpreter operations
        assert budget["source"] == "default, cost high: imports triton; launched a Triton kernel in its probe case"
        assert budget["work"]["unit"].startswith("interpreter operations"), e["name"]
        assert budget["cut_classes"] == [], e["name"]
        # thorough saves work; a quick plan of 8 cases may cost less than the cut that covers its classes
        assert mode == "--quick" or budget["work"]["ran"] < budget["work"]["full"], e["name"]
    if mode == "--thorough":  # a quick plan may have nothing to save; a thorough one always has here
        assert len(cut) == 16 and doc["budget"]["line"].startswith("budget cut 16 of 16 ops to ")
        assert doc["budget"]["line"].endswith("--budget off")
