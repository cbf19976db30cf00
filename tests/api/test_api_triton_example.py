"""examples/triton: real Triton kernels on CPU torch tensors (TRITON_INTERPRET=1), through the CLI and the
pytest plugin. Each buggy kernel is caught where its bug lives; each correct kernel passes.

Everything runs in subprocesses: Triton fixes its interpreter mode when it is first imported, and this
test process must not decide that for other tests.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kit.frameworks import needs_triton, plugin_args
from kit.workspace import REPO

pytestmark = needs_triton

EXAMPLE = REPO / "examples" / "triton"


@pytest.fixture
def triton_ws(tmp_path: Path) -> Path:
    dest = tmp_path / "triton"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(".gpuemu", "__pycache__", ".pytest_cache"))
    return dest


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def test_cli_catches_both_buggy_kernels_and_passes_the_correct_ones(triton_ws: Path, gpuemu_cli) -> None:
    env = {"TRITON_INTERPRET": "1"}
    out = gpuemu_cli(triton_ws, "test", "-j", "2", "--format", "json", "--no-progress", env=env)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    ops = {e["name"]: e for e in json.loads(out.stdout)["ops"]}
    for good in ("softmax", "matmul"):
        assert ops[good]["status"] == "passed", ops[good]["message"]
        # an op that imports triton is high-cost: the default work budget cut its 24 planned cases
        budget = ops[good]["budget"]
        assert budget["planned"] == 24 and ops[good]["cases"] == budget["ran"] and budget["cut_classes"] == []
    leak, acc = ops["softmax_tail_leak"], ops["matmul_acc_overwrite"]
    assert leak["status"] == "failed" and acc["status"] == "failed"
    # the tail leak needs padding: N not a power of two
    assert all(not is_pow2(f["dims"]["N"]) for f in leak["failures"]) and leak["failures"]
    # and the diagnosis says so (it said "N > 2 ... state carried across blocks is lost" before this reading)
    assert re.match(r"fails (iff|only if) N is not a power of two ", leak["diagnosis"]), leak["diagnosis"]
    assert "next power of two" in leak["diagnosis"] and "confirmation case(s) agree" in leak["diagnosis"]
    # the overwritten accumulator needs two K tiles: K > BLOCK_K = 16; and the diagnosis says so
    assert all(f["dims"]["K"] > 16 for f in acc["failures"]) and acc["failures"]
    # "fails iff K > 16, except where distribution == partial_inf, whose values hide it" where NaN rows drawn
    assert re.match(r"fails (iff|only if) K > 16[ ,]", acc["diagnosis"]), acc["diagnosis"]
    assert {f["dtype"] for f in acc["failures"]} == {"float32", "float16", "bfloat16"}
    seed = acc["failures"][0]["seed"]
    again = gpuemu_cli(triton_ws, "reproduce", "--op", "matmul_acc_overwrite", "--seed", str(seed), env=env)
    assert again.returncode == 1 and "inputs stored snapshot" in again.stdout and "FAILED [mismatch" in again.stdout
    failures = gpuemu_cli(triton_ws, "failures")
    assert "FAIL matmul_acc_overwrite [mismatch" in failures.stdout
    assert "FAIL softmax_tail_leak [mismatch" in failures.stdout and "FAIL softmax " not in failures.stdout


def test_pytest_plugin_runs_the_triton_workspace_with_xdist(triton_ws: Path, clean_env) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-v",
         "--gpuemu", "--gpuemu-iterations", "12", "-n", "2", "-W", "ignore::RuntimeWarning"],
        cwd=str(triton_ws), capture_output=True, text=True, timeout=600, env={**clean_env, "TRITON_INTERPRET": "1"},
        check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    outcomes = {m.group(2): m.group(1) for m in re.finditer(r"^\[gw\d+\] \[\s*\d+%\] (\w+) (\S+)", out, re.M)}
    assert proc.returncode == 1, out[-4000:]
    for dtype in ("float32", "float16", "bfloat16"):
        assert outcomes[f"gpuemu.toml::softmax[{dtype}]"] == "PASSED", out[-4000:]
        assert outcomes[f"gpuemu.toml::matmul[{dtype}]"] == "PASSED", out[-4000:]
    assert outcomes["gpuemu.toml::softmax_tail_leak[float32]"] == "FAILED"
    assert outcomes["gpuemu.toml::matmul_acc_overwrite[float32]"] == "FAILED"
    tests = ("test_softmax_kernel", "test_matmul_kernel", "test_tail_leak_is_caught", "test_acc_overwrite_is_caught")
    for test in tests:
        assert outcomes[f"test_kernels.py::{test}"] == "PASSED", out[-4000:]
    assert re.search(r"replay: gpuemu reproduce --op matmul_acc_overwrite --seed \d+", out)
