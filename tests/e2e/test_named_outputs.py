"""Named outputs (issue 26 item 4): ``outputs = ["loss", "dlogits"]`` names a function's tuple outputs in every
face instead of ``result0``/``result1``. A cross-entropy that returns (loss, dlogits) with a wrong gradient
fails on ``dlogits`` (failure line, JSON, reproduce, the standalone file) while its correct twin passes; the
reference may return the tuple or a dict of those names; a count that does not match reads as the outputs
each side returned; wrong declarations are config errors."""

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


def xent(logits, target, scale=1.0):
    z = np.asarray(logits, dtype=np.float32)
    n = z.shape[0]
    p = _softmax(z)
    loss = -np.log(np.maximum(p[np.arange(n), target], 1e-30)).mean()
    p[np.arange(n), target] -= 1.0
    return np.asarray(loss, dtype=logits.dtype), (p * scale / n).astype(logits.dtype)


def xent_bug(logits, target):
    return xent(logits, target, scale=2.0)


def xent_three(logits, target):
    return (*xent(logits, target), np.zeros(1, dtype=logits.dtype))


def xent_ref(logits, target):
    n = logits.shape[0]
    p = _softmax(logits)
    loss = -np.log(p[np.arange(n), target]).mean()
    p[np.arange(n), target] -= 1.0
    return {"loss": np.asarray(loss), "dlogits": p / n}


def xent_ref_tuple(logits, target):
    d = xent_ref(logits, target)
    return d["loss"], d["dlogits"]
"""

INPUTS = {
    "logits": {"shape": ["N", "V"], "distributions": ["normal", "uniform", "wide", "small"]},
    "target": {"shape": ["N"], "dtype": "int64", "range": [0, "V"]},
}
DIMS = {"N": (1, 16, 4), "V": (2, 64, 8)}
NAMES = ["loss", "dlogits"]


def _workspace(tmp_path: Path) -> Path:
    toml = project_toml(validation={"dtypes": ["float32", "float16"], "iterations": 12})
    for name, fn, ref in (
        ("xent", "xent", "xent_ref"),
        ("xent_tuple_ref", "xent", "xent_ref_tuple"),
        ("xent_bug", "xent_bug", "xent_ref"),
        ("xent_three", "xent_three", "xent_ref"),
    ):
        toml += op_toml(name, module=f"ops:{fn}", reference=f"ops:{ref}", inputs=INPUTS, dims=DIMS, outputs=NAMES)
    return write_ws(tmp_path, toml, {"ops.py": OPS})


def test_tuple_outputs_carry_their_names_everywhere(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    proc = gpuemu("test", "--format", "json", cwd=root)
    ops = {o["name"]: o for o in jdoc(proc)["ops"]}
    assert ops["xent"]["status"] == "passed" and ops["xent_tuple_ref"]["status"] == "passed", out(proc)
    bug = ops["xent_bug"]
    assert bug["status"] == "failed" and {f.get("output") for f in bug["failures"]} == {"dlogits"}, bug["failures"]
    assert all(f["message"].startswith("dlogits: ") for f in bug["failures"]), bug["failures"][0]
    three = ops["xent_three"]["failures"][0]
    assert three["kind"] == "output_names" and "result2" in three["message"], three

    text = gpuemu("test", "--op", "xent_bug", cwd=root)
    assert "(worst output dlogits)" in text.stdout and "result1" not in text.stdout, out(text)
    seed = str(bug["failures"][0]["seed"])
    rep = gpuemu("reproduce", "--op", "xent_bug", "--seed", seed, cwd=root)
    assert rep.returncode == 1 and "Output 'dlogits'" in rep.stdout and "Output 'loss'" in rep.stdout, out(rep)
    script = root / ".gpuemu" / "repro" / f"xent_bug_{seed}.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1 and "dlogits:" in run.stdout, run.stdout + run.stderr
    (root / "ops.py").write_text(OPS.replace("scale=2.0", "scale=1.0"))
    fixed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


@pytest.mark.parametrize(
    ("names", "says"),
    [
        (["loss", "loss"], "output name 'loss' is given twice"),
        (["loss", "d logits"], "must be an identifier"),
        ([], "is empty"),
        ("loss", "must be an array"),
    ],
)
def test_wrong_output_names_are_config_errors(tmp_path: Path, names: object, says: str) -> None:
    toml = project_toml() + op_toml(
        "o", module="ops:xent", reference="ops:xent_ref", inputs=INPUTS, dims=DIMS, outputs=names
    )
    root = write_ws(tmp_path, toml, {"ops.py": OPS})
    proc = gpuemu("ops", cwd=root)
    assert proc.returncode == 2 and says in proc.stdout + proc.stderr, out(proc)
