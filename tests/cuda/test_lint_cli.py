"""`gpuemu lint` from the command line (issue 15, item 5): the bundled examples/kernels workspace (one
kernel within its limits, one in local memory, one with a leftover printf), a bare `.cu` file outside any
workspace that reports figures without pretending to pass, and summary timings that are the real ones.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from kit.cli import env, gpuemu
from kit.workspace import copy_example

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cuda


def _lint(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    environ = env(GPUEMU_USER_CONFIG=os.devnull + "/none.toml", HOME=str(cwd / "home"))
    return gpuemu("lint", *args, cwd=cwd, environ=environ)


@pytest.fixture(scope="module")
def kernels_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("kernels") / "ws"
    return copy_example("kernels", dest)


def test_the_kernels_example_passes_one_and_fails_two_for_their_reasons(kernels_ws: Path) -> None:
    proc = _lint(kernels_ws, "--format", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    got = {k["name"]: k for k in doc["kernels"]}
    assert {n: k["status"] for n, k in got.items()} == {
        "tiled_matmul": "passed",
        "gather_local": "failed",
        "debug_print": "failed",
    }
    codes = {n: {f["code"] for f in k["findings"] if f["severity"] == "error"} for n, k in got.items()}
    assert codes["gather_local"] >= {"max-local-memory", "forbidden-instruction"}, codes
    assert "forbidden-instruction" in codes["debug_print"], codes
    assert all(k["limits"] for k in got.values())
    vprintf = [f for f in got["debug_print"]["findings"] if f["code"] == "forbidden-instruction"]
    assert vprintf and "vprintf" in vprintf[0]["message"] and vprintf[0]["file"] == "debug_print.cu"
    # one file of the workspace: its entry's limits apply
    one = _lint(kernels_ws, "tiled_matmul.cu")
    assert one.returncode == 0 and one.stdout.startswith("PASS    tiled_matmul"), one.stdout + one.stderr


def test_a_bare_file_reports_figures_without_pretending_to_pass(tmp_path: Path) -> None:
    for name in ("gather_local.cu", "tiled_matmul.cu"):
        shutil.copy(ROOT / "examples" / "kernels" / name, tmp_path / name)
        proc = _lint(tmp_path, name)
        text = proc.stdout
        assert proc.returncode == 0, text + proc.stderr
        assert "PASS" not in text and text.startswith("INFO    "), text
        assert "no limits apply to 1 kernel(s)" in text and "[[kernels]]" in text, text
        assert "0 passed" in text and "1 without limits" in text, text


def test_the_summary_time_is_the_wall_time_of_the_compile(tmp_path: Path, kernels_ws: Path) -> None:
    """A cold compile takes nvcc seconds: the summary says so (it once said 0.0 s), in and out of a workspace."""
    shutil.copy(ROOT / "examples" / "kernels" / "debug_print.cu", tmp_path / "cold.cu")
    for cwd, args in ((tmp_path, ("cold.cu",)), (kernels_ws, ("--kernel", "debug_print", "--format", "json"))):
        if cwd == kernels_ws:
            shutil.rmtree(kernels_ws / ".gpuemu", ignore_errors=True)
        proc = _lint(cwd, *args)
        if args[-1] == "json":
            elapsed = json.loads(proc.stdout)["elapsed"]
        else:
            elapsed = float(proc.stdout.strip().splitlines()[-1].rsplit(", ", 1)[1].split(" s)")[0])
        assert elapsed >= 0.3, (elapsed, proc.stdout)
