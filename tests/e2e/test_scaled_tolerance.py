"""The built-in half-precision tolerance follows the output's magnitude (config.model.scaled_atol).

A cross-entropy backward whose true-class gradient is 100 % wrong (``p`` instead of ``p - 1``, over a batch
of 128-512 rows: values around 2e-3 to 8e-3) passed float16 and bfloat16 under the fixed ``atol = 1e-2``. With
the default rule it fails in both dtypes and its correct twin passes; an ``atol`` the user writes keeps
meaning exactly what it says (the same bug passes an explicit 1e-2, as it should: the user asked for it).
"""

from __future__ import annotations

from pathlib import Path

from kit.cli import gpuemu, jdoc, out
from kit.ops import op_toml, project_toml
from kit.workspace import write_ws

CE_PY = """import numpy as np


def _grad(logits, target, true_class_bug):
    x = np.asarray(logits, dtype=np.float32)
    b = x.shape[0]
    with np.errstate(all="ignore"):
        m = x.max(axis=-1, keepdims=True)
        e = np.exp(x - m)
        p = e / e.sum(axis=-1, keepdims=True)
        rows = np.arange(b)
        g = p.copy()
        if not true_class_bug:
            g[rows, target] -= np.float32(1.0)  # BUG when skipped: the true class keeps p, not p - 1
        return (g / np.float32(b)).astype(logits.dtype)


def ce_backward(logits, target):
    return _grad(logits, target, False)


def ce_backward_bug_true_class(logits, target):
    return _grad(logits, target, True)


def reference(logits, target):
    x = logits.astype(np.float64)
    with np.errstate(all="ignore"):
        p = np.exp(x - x.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
    p[np.arange(x.shape[0]), target] -= 1.0
    return p / x.shape[0]
"""


def _op(name: str) -> str:
    return op_toml(
        name,
        module=f"ce:{name}",
        reference="ce:reference",
        inputs={"logits": ["B", "V"], "target": {"shape": ["B"], "dtype": "int64", "range": [0, "V"]}},
        dims={"B": (128, 512, 256), "V": (2, 64, 16)},
    )


TOML = (
    project_toml("ce", validation={"dtypes": ["float16", "bfloat16"]})
    + _op("ce_backward")
    + _op("ce_backward_bug_true_class")
)


def _run(root: Path, *args: str) -> dict:
    proc = gpuemu("test", "--format", "json", "--jobs", "1", *args, cwd=root, timeout=600)
    doc = jdoc(proc)
    return {e["name"]: e for e in doc["ops"]} | {"__rc__": proc.returncode, "__out__": out(proc)}


def test_a_gradient_bug_below_a_fixed_atol_is_caught_in_float16_and_bfloat16(tmp_path: Path) -> None:
    ops = _run(write_ws(tmp_path / "ws", TOML, {"ce.py": CE_PY}))
    good, bad = ops["ce_backward"], ops["ce_backward_bug_true_class"]
    assert good["status"] == "passed", good["message"]
    assert bad["status"] == "failed" and ops["__rc__"] == 1, ops["__out__"]
    assert {f["dtype"] for f in bad["failures"]} == {"float16", "bfloat16"}
    assert all(f["tier"] == "bug" for f in bad["failures"])
    # the bound it failed: atol scaled to a hundredth of the output's own size, far below 1e-2
    assert all(f["tolerance"][0] < 1e-3 for f in bad["failures"]), [f["tolerance"] for f in bad["failures"]]


def test_an_explicit_atol_means_exactly_what_it_says(tmp_path: Path) -> None:
    loose = TOML.replace(
        'dtypes = ["float16", "bfloat16"]',
        'dtypes = ["float16", "bfloat16"]\n\n[validation.tolerances]\n'
        "float16 = { atol = 1e-2, rtol = 1e-2 }\nbfloat16 = { atol = 1e-2, rtol = 1e-2 }",
    )
    ops = _run(write_ws(tmp_path / "ws", loose, {"ce.py": CE_PY}), "--iterations", "16")
    assert ops["ce_backward_bug_true_class"]["status"] == "passed", ops["__out__"]
    assert all(
        f["tolerance"][0] == 1e-2 for f in ops["ce_backward_bug_true_class"]["failures"]
    )  # none, and none scaled
