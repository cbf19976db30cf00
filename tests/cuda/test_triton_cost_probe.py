"""Cost measured as the interpreter pays it (issue 27 items 1 and 2), with real workers and Triton's interpreter.

An op whose kernels a shim loads through ``importlib`` on its first call (no ``import triton`` for
``cost = "auto"`` to read) is found high-cost by its probe case, which launches a Triton kernel, and its plan
is cut in counted interpreter operations: fewer cases than planned, the correct kernel passing and its
one-line twin failing. The kernels compute in bfloat16 and every case is bf16: triton is imported mid-case,
and the interpreter must be patched from that moment (before, the first cases of such an op computed on bf16
bit patterns and a correct kernel failed). A torch op beside them is measured too and never cut.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kit.cli import gpuemu, out
from kit.ops import op_toml, project_toml
from kit.workspace import write_ws

from gpuemu_ls.engine.run.cost_probe import LAUNCHED

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = """
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton
import triton.language as tl


@triton.jit
def _scale_shift(x_ptr, o_ptr, n, BLOCK: tl.constexpr, DROP_TAIL: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if DROP_TAIL:
        mask = offs < (n // BLOCK) * BLOCK  # the bug: the last partial block is never written
    else:
        mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(o_ptr + offs, x * 3.0 + 1.0, mask=mask)  # in the input dtype: bf16 arithmetic for bf16


def scale_shift(x, drop_tail=False):
    x = x.contiguous()
    out = torch.zeros_like(x)
    n = x.numel()
    _scale_shift[(triton.cdiv(n, 64),)](x, out, n, BLOCK=64, DROP_TAIL=drop_tail)
    return out
"""

SHIM = """
'''Loads its kernels by name on first call, as plugin registries do: no triton import here.'''
import importlib


def _kernels():
    return importlib.import_module("kern")


def scale_shift(x):
    return _kernels().scale_shift(x)


def scale_shift_drop_tail(x):
    return _kernels().scale_shift(x, drop_tail=True)


def torch_scale_shift(x):
    return x * 3.0 + 1.0
"""

REFS = "def scale_shift(x):\n    return x * 3.0 + 1.0\n"
DIMS = {"B": (1, 16, 4), "N": (1, 300, 100)}
PLANNED = 60


def _workspace(tmp_path: Path) -> Path:
    toml = project_toml(
        project={"name": "shim", "framework": "pytorch"},
        validation={"dtypes": ["bfloat16"], "iterations": PLANNED},
    )
    for name, fn in (
        ("scale_shift", "scale_shift"),
        ("scale_shift_bug_drop_tail", "scale_shift_drop_tail"),
        ("torch_scale_shift", "torch_scale_shift"),
    ):
        toml += op_toml(name, module=f"shim:{fn}", reference="refs:scale_shift", dims=DIMS)
    return write_ws(tmp_path, toml, {"kern.py": KERNELS, "shim.py": SHIM, "refs.py": REFS})


def test_a_shim_loaded_kernel_is_found_by_its_probe_case_and_cut_in_counted_operations(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    proc = gpuemu("test", "--format", "json", cwd=root, timeout=900)
    ops = {o["name"]: o for o in json.loads(proc.stdout)["ops"]}
    assert proc.returncode == 1, out(proc)
    assert ops["scale_shift"]["status"] == "passed", ops["scale_shift"]  # bf16 computed right from case 1
    assert ops["scale_shift_bug_drop_tail"]["status"] == "failed", ops["scale_shift_bug_drop_tail"]
    for name in ("scale_shift", "scale_shift_bug_drop_tail"):
        budget = ops[name]["budget"]
        assert budget["source"] == f"default, cost high: {LAUNCHED}", budget
        assert budget["planned"] == PLANNED and budget["ran"] < PLANNED and not budget["cut_classes"], budget
        assert budget["work"]["unit"].startswith("interpreter operations"), budget
        assert budget["work"]["model"]["kernel"] > 0, budget
    assert ops["torch_scale_shift"]["status"] == "passed" and not ops["torch_scale_shift"].get("budget")
    assert ops["torch_scale_shift"]["cases"] == PLANNED, ops["torch_scale_shift"]["message"]
