"""Issue 29 item 3, end to end: the diagnosis of a tail that reads ``bias[:w]`` (fails iff N % 128 != 0 and
N > 128) from `gpuemu test`'s own planned cases, with and without --fail-fast. A passing N that is a
multiple of 128 but not a power of two refutes "N is not a power of two"; a run stopped at its first failure
still tells the conditions apart by confirmation cases."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kit.cli import gpuemu, out
from kit.ops import op_toml, project_toml
from kit.workspace import write_files

OPS = """
import numpy as np


def add_bias(x, bias):
    n = x.shape[-1]
    y = np.empty_like(x)
    for start in range(0, n, 128):
        w = min(128, n - start)
        b = bias[start:start + w] if w == 128 else bias[:w]  # the partial last tile reads the first tile's bias
        y[..., start:start + w] = x[..., start:start + w] + b
    return y


def ref(x, bias):
    return x + bias
"""

TOML = project_toml("bias") + op_toml(
    "add_bias",
    module="ops:add_bias",
    reference="ops:ref",
    inputs={"x": ["B", "N"], "bias": ["N"]},
    dims={"B": (1, 64, 8), "N": (1, 4096, 1024)},
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return write_files(tmp_path, {"ops.py": OPS, "gpuemu.toml": TOML})


def diagnosis(root: Path, *args: str) -> str:
    proc = gpuemu("test", *args, cwd=root, timeout=300)
    assert proc.returncode == 1, out(proc)
    line = next((ln for ln in proc.stdout.splitlines() if "diagnosis:" in ln), "")
    return line.split("diagnosis:", 1)[1].strip()


@pytest.mark.parametrize("args", [(), ("--fail-fast",)], ids=["thorough", "fail-fast"])
def test_the_condition_stated_survives_the_cases_run(workspace: Path, args: tuple[str, ...]) -> None:
    text = diagnosis(workspace, *args)
    assert "power of two" not in text, text
    assert re.match(r"fails (iff|only if) N % 128 != 0 and N > 12[78] ", text), text
    assert "N % 2 != 0" not in text and "on every case" not in text, text
