"""bfloat16 and libdevice under Triton's CPU interpreter (issue 26 item 2).

Upstream's interpreter does arithmetic on bf16 bit patterns and its libdevice functions return None, so a
kernel that computes in bf16 fails every bf16 case, correct or not. gpuemu's workers patch the interpreter
in memory (run/triton_interp.py). Shown here: the patched interpreter computes a bf16 kernel right where the
unpatched one gives garbage (both run, in fresh processes); the self-test passes on this triton and fails
without the patch; through the CLI, a correct bf16-arithmetic kernel and a libdevice kernel pass every dtype
while a twin that sums in bf16 (the GPU rounds each step) fails in bf16 only; with the patch turned
off, the bf16 cases of a Triton op are not judged (an error that says so), never passed or failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kit.cli import env, gpuemu, out
from kit.ops import op_toml, project_toml
from kit.workspace import write_ws

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = """
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _scale_shift(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(o_ptr + offs, x * 3.0 + 1.0, mask=mask)  # computed in the input dtype: bf16 math for bf16


def scale_shift(x):
    out = torch.empty_like(x)
    n = x.numel()
    _scale_shift[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)
    return out


@triton.jit
def _center(x_ptr, o_ptr, n_cols, stride, BLOCK: tl.constexpr, MEAN_IN_INPUT_DTYPE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    if MEAN_IN_INPUT_DTYPE:
        mean = tl.sum(x, axis=0).to(tl.float32) / n_cols  # the bug: a bf16 sum rounds at every step
    else:
        mean = tl.sum(x.to(tl.float32), axis=0) / n_cols
    tl.store(o_ptr + row * stride + cols, x.to(tl.float32) - mean, mask=mask)


def _centered(x, bf16_sum):
    x = x.contiguous()
    out = torch.empty_like(x)
    block = triton.next_power_of_2(max(x.shape[1], 1))
    _center[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=block, MEAN_IN_INPUT_DTYPE=bf16_sum)
    return out


def center(x):
    return _centered(x, False)


def center_bf16_sum(x):
    return _centered(x, x.dtype == torch.bfloat16)  # only the bf16 path sums in the input dtype


@triton.jit
def _rms(x_ptr, o_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    r = libdevice.rsqrt(tl.sum(x * x, axis=0) / n_cols + 1e-6)
    tl.store(o_ptr + row * n_cols + cols, libdevice.tanh(x * r), mask=cols < n_cols)


def tanh_rms(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    _rms[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(max(x.shape[1], 1)))
    return out
"""

REFS = """
import numpy as np


def scale_shift(x):
    return x * 3.0 + 1.0


def center(x):
    return x - x.mean(axis=1, keepdims=True)


def tanh_rms(x):
    return np.tanh(x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6))
"""

DIMS = {"B": (1, 8, 4), "N": (1, 200, 96)}
VALUES = ["normal", "uniform", "wide", "small", "integers", "positive", "mixed_magnitude", "tail_max"]


def _workspace(tmp_path: Path) -> Path:
    toml = project_toml(
        project={"name": "bf16", "framework": "pytorch"},
        validation={"dtypes": ["float32", "float16", "bfloat16"], "iterations": 12, "distributions": VALUES},
    )
    for name, fn, ref in (
        ("scale_shift", "scale_shift", "scale_shift"),
        ("center", "center", "center"),
        ("center_bf16_sum", "center_bf16_sum", "center"),
        ("tanh_rms", "tanh_rms", "tanh_rms"),
    ):
        # rows around 64: a mean whose bf16 sum loses units shifts every centred value
        domain = {"offset": 64} if name.startswith("center") else {}
        toml += op_toml(
            name, module=f"kernels:{fn}", reference=f"refs:{ref}", dims=DIMS, layouts=["contiguous"], **domain
        )
    return write_ws(tmp_path, toml, {"kernels.py": KERNELS, "refs.py": REFS})


PROBE = """
import os, sys, json
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "patched":
    from gpuemu_ls.engine.run import triton_interp
    assert triton_interp.install() is None
import torch, kernels
x = torch.tensor([0.5, -1.25, 2.0, 3.5], dtype=torch.bfloat16)
print(json.dumps({"out": kernels.scale_shift(x).float().tolist(), "want": (x.float() * 3 + 1).tolist()}))
"""


def _probe(root: Path, mode: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(root), mode], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_patched_interpreter_computes_bf16_where_the_unpatched_one_gives_garbage(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    raw, patched = _probe(root, "raw"), _probe(root, "patched")
    assert patched["out"] == patched["want"] == [2.5, -2.75, 7.0, 11.5]
    assert raw["out"] != raw["want"]  # upstream's interpreter multiplies the bit patterns


def _self_test(environ: dict[str, str]) -> str:
    code = "from gpuemu_ls.engine.run import triton_interp as t; print(t.bf16_ready())"
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300, env=environ
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def test_the_self_test_passes_patched_and_fails_unpatched() -> None:
    base = {**os.environ, "TRITON_INTERPRET": "1"}
    assert _self_test(base) == "None"
    off = _self_test({**base, "GPUEMU_TRITON_BF16": "0"})
    assert "GPUEMU_TRITON_BF16=0" in off


def test_bf16_kernels_are_judged_right_through_the_cli(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    proc = gpuemu("test", "--format", "json", cwd=root, timeout=1200)
    ops = {o["name"]: o for o in json.loads(proc.stdout)["ops"]}
    for name in ("scale_shift", "center", "tanh_rms"):
        assert ops[name]["status"] in ("passed", "edge"), (name, ops[name]["failures"][:2])
    bug = ops["center_bf16_sum"]
    assert bug["status"] == "failed", bug
    assert {f["dtype"] for f in bug["failures"] if f["status"] == "failed"} == {"bfloat16"}, bug["failures"]
    assert proc.returncode == 1, out(proc)


def test_without_the_patch_bf16_cases_of_a_triton_op_are_not_judged(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    proc = gpuemu(
        "test", "--op", "scale_shift", "--format", "json", cwd=root, timeout=600, environ=env(GPUEMU_TRITON_BF16="0")
    )
    (op,) = json.loads(proc.stdout)["ops"]
    bf16 = [f for f in op["failures"] if f["dtype"] == "bfloat16"]
    assert bf16 and all(f["kind"] == "bf16_not_judged" and f["status"] == "error" for f in bf16), op["failures"]
    assert all("not judged" in f["message"] and "GPUEMU_TRITON_BF16=0" in f["message"] for f in bf16)
    assert not [f for f in op["failures"] if f["dtype"] != "bfloat16"], op["failures"]
    assert op["status"] != "passed" and proc.returncode != 0
