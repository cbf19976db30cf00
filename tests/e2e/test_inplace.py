"""In-place ops (issue 26 item 3): ``inplace = ["logits"]`` hands the op a private copy, judges the written
input as the output of that name against the reference (which reads the values from before the write), and
a write into that input is not an input mutation. A correct in-place cross-entropy passes, its twin with a
wrong gradient fails on ``logits``, and the same correct op without the key still fails as an input
mutation; a pure in-place op (returns None) and a torch ``mul_`` work; the standalone repro agrees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kit.cli import gpuemu, jdoc, out
from kit.ops import op_toml, project_toml
from kit.workspace import write_ws

OPS = """
import numpy as np


def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def xent(logits, target, mean=True):
    # like fused cross-entropy kernels: the loss is returned, the gradient overwrites the logits
    z = np.asarray(logits, dtype=np.float32)
    n = z.shape[0]
    p = _softmax(z)
    loss = -np.log(np.maximum(p[np.arange(n), target], 1e-30)).mean()
    p[np.arange(n), target] -= 1.0
    logits[...] = (p / n if mean else p).astype(logits.dtype)
    return {"loss": np.asarray(loss, dtype=logits.dtype)}


def xent_bug(logits, target):
    return xent(logits, target, mean=False)  # forgot the 1/n of the mean


def xent_ref(logits, target):
    z = np.asarray(logits, dtype=np.float64)
    n = z.shape[0]
    p = _softmax(z)
    loss = -np.log(p[np.arange(n), target]).mean()
    g = p.copy()
    g[np.arange(n), target] -= 1.0
    return {"loss": np.asarray(loss), "logits": g / n}


def double_(x):
    x *= 2  # pure in-place: returns nothing
    return None


def double_ref(x):
    return {"x": np.asarray(x, dtype=np.float64) * 2}


def double_t(x):
    x.mul_(2)
"""

XENT_INPUTS = {
    "logits": {"shape": ["N", "V"], "distributions": ["normal", "uniform", "wide", "small"]},
    "target": {"shape": ["N"], "dtype": "int64", "range": [0, "V"]},
}
DIMS = {"N": (1, 16, 4), "V": (2, 64, 8)}
DIMS2 = {"B": (1, 8, 4), "N": (1, 64, 16)}


def _workspace(tmp_path: Path) -> Path:
    toml = project_toml(validation={"dtypes": ["float32", "float16"], "iterations": 12})
    for name, fn, keys in (
        ("xent", "xent", {"inplace": ["logits"]}),
        ("xent_bug", "xent_bug", {"inplace": ["logits"]}),
        ("xent_undeclared", "xent", {}),
    ):
        toml += op_toml(name, module=f"ops:{fn}", reference="ops:xent_ref", inputs=XENT_INPUTS, dims=DIMS, **keys)
    toml += op_toml(
        "double",
        module="ops:double_",
        reference="ops:double_ref",
        inplace=["x"],
        dims={"B": (1, 8, 4), "N": (1, 64, 16)},
    )
    return write_ws(tmp_path, toml, {"ops.py": OPS})


def test_inplace_ops_are_judged_on_what_they_write(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    proc = gpuemu("test", "--format", "json", cwd=root)
    doc = jdoc(proc)
    ops = {o["name"]: o for o in doc["ops"]}
    assert ops["xent"]["status"] == "passed", out(proc)
    assert ops["double"]["status"] == "passed", out(proc)
    bug = ops["xent_bug"]
    assert bug["status"] == "failed", out(proc)
    on_logits = ["'logits'" in f["message"] or "logits" in str(f.get("worst")) for f in bug["failures"]]
    assert all(on_logits), bug["failures"][0]
    undeclared = ops["xent_undeclared"]
    assert undeclared["status"] == "failed" and undeclared["failures"][0]["kind"] == "input_mutation", undeclared
    assert proc.returncode == 1

    # the standalone repro judges the written logits too: it fails on the bug and passes once the op is fixed
    seed = bug["failures"][0]["seed"]
    rep = gpuemu("reproduce", "--op", "xent_bug", "--seed", str(seed), cwd=root)
    assert rep.returncode == 1, out(rep)
    script = root / ".gpuemu" / "repro" / f"xent_bug_{seed}.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1 and "logits" in run.stdout + run.stderr, run.stdout + run.stderr
    (root / "ops.py").write_text(OPS.replace("mean=False)", "mean=True)"))
    fixed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_a_torch_op_that_writes_its_input_in_place(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    toml = project_toml(project={"name": "t", "framework": "pytorch"}, validation={"iterations": 8}) + op_toml(
        "double_t",
        module="ops:double_t",
        reference="ops:double_ref",
        inplace=["x"],
        dims={"B": (1, 8, 4), "N": (1, 64, 16)},
    )
    root = write_ws(tmp_path, toml, {"ops.py": OPS})
    proc = gpuemu("test", "--format", "json", cwd=root)
    assert jdoc(proc)["ops"][0]["status"] == "passed", out(proc)


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ({"inplace": ["y"]}, "names 'y', which is not an input of the op"),
        ({"inplace": "x"}, "must be an array"),
        ({"inplace": [1]}, "must be a string"),
    ],
)
def test_a_wrong_inplace_is_a_config_error(tmp_path: Path, keys: dict, says: str) -> None:
    toml = project_toml() + op_toml("o", module="ops:double_", reference="ops:double_ref", dims=DIMS2, **keys)
    root = write_ws(tmp_path, toml, {"ops.py": OPS})
    proc = gpuemu("ops", cwd=root)
    assert proc.returncode != 0 and says in proc.stdout + proc.stderr, out(proc)


def test_inplace_needs_an_in_process_op(tmp_path: Path) -> None:
    toml = project_toml() + op_toml("o", reference="ops:double_ref", op_script="op.py", inplace=["x"], dims=DIMS2)
    root = write_ws(tmp_path, toml, {"ops.py": OPS, "op.py": "print('{}')\n"})
    proc = gpuemu("ops", cwd=root)
    assert proc.returncode != 0 and "needs an op gpuemu calls in-process" in proc.stdout + proc.stderr, out(proc)
