"""Inputs handed over with ``requires_grad`` (issue 26 item 4). Fused training kernels often compute their
gradient only when the input requires grad: a cross-entropy that writes d loss / d logits into the logits
(in place) when ``logits.requires_grad`` and otherwise leaves them as they are. Without ``requires_grad`` the
written input silently stays the logits and fails as wrong values; with it the op is judged on the gradient
it computes, and a twin with a wrong gradient fails. Misdeclarations are config errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kit.cli import gpuemu, jdoc, out
from kit.ops import op_toml, project_toml
from kit.workspace import write_ws

pytest.importorskip("torch")

OPS = """
import numpy as np
import torch


def xent(logits, target, scale=1.0):
    z = logits.float()
    n = z.shape[0]
    p = torch.softmax(z, -1)
    loss = -torch.log(p[torch.arange(n), target].clamp_min(1e-30)).mean()
    if logits.requires_grad:  # the library computes the gradient only for training
        g = p.clone()
        g[torch.arange(n), target] -= 1.0
        with torch.no_grad():
            logits.copy_((g * scale / n).to(logits.dtype))
    return {"loss": loss.to(logits.dtype).detach()}


def xent_bug(logits, target):
    return xent(logits, target, scale=2.0)


def xent_ref(logits, target):
    n = logits.shape[0]
    z = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    loss = -np.log(p[np.arange(n), target]).mean()
    p[np.arange(n), target] -= 1.0
    return {"loss": np.asarray(loss), "logits": p / n}
"""

INPUTS = {
    "logits": {"shape": ["N", "V"], "distributions": ["normal", "uniform", "wide", "small"]},
    "target": {"shape": ["N"], "dtype": "int64", "range": [0, "V"]},
}
DIMS = {"N": (1, 16, 4), "V": (2, 64, 8)}


def test_a_kernel_that_computes_its_gradient_only_for_training(tmp_path: Path) -> None:
    toml = project_toml(
        project={"name": "rg", "framework": "pytorch"}, validation={"dtypes": ["float32"], "iterations": 12}
    )
    for name, fn, keys in (
        ("xent", "xent", {"requires_grad": ["logits"]}),
        ("xent_bug", "xent_bug", {"requires_grad": ["logits"]}),
        ("xent_eval", "xent", {}),
    ):
        toml += op_toml(
            name, module=f"ops:{fn}", reference="ops:xent_ref", inputs=INPUTS, dims=DIMS, inplace=["logits"], **keys
        )
    root = write_ws(tmp_path, toml, {"ops.py": OPS})
    proc = gpuemu("test", "--format", "json", cwd=root)
    ops = {o["name"]: o for o in jdoc(proc)["ops"]}
    assert ops["xent"]["status"] == "passed", ops["xent"]["failures"][:1]
    for name in ("xent_bug", "xent_eval"):  # a wrong gradient; the logits returned unchanged
        assert ops[name]["status"] == "failed", (name, ops[name])
        assert {f.get("output") for f in ops[name]["failures"]} == {"logits"}, ops[name]["failures"][:1]
    # the standalone reproduction hands the logits over with requires_grad too: it fails on the bug only
    seed = str(ops["xent_bug"]["failures"][0]["seed"])
    assert gpuemu("reproduce", "--op", "xent_bug", "--seed", seed, cwd=root).returncode == 1
    script = root / ".gpuemu" / "repro" / f"xent_bug_{seed}.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1 and "logits" in run.stdout, run.stdout + run.stderr
    (root / "ops.py").write_text(OPS.replace("scale=2.0", "scale=1.0"))
    fixed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


@pytest.mark.parametrize(
    ("framework", "names", "says"),
    [
        ("pytorch", ["y"], "names 'y', which is not an input of the op"),
        ("pytorch", ["target"], "only float tensors can require grad"),
        ("numpy", ["logits"], 'needs framework = "pytorch"'),
    ],
)
def test_wrong_requires_grad_is_a_config_error(tmp_path: Path, framework: str, names: list, says: str) -> None:
    toml = project_toml(project={"name": "rg", "framework": framework}) + op_toml(
        "o", module="ops:xent", reference="ops:xent_ref", inputs=INPUTS, dims=DIMS, requires_grad=names
    )
    root = write_ws(tmp_path, toml, {"ops.py": OPS})
    proc = gpuemu("ops", cwd=root)
    assert proc.returncode == 2 and says in proc.stdout + proc.stderr, out(proc)
