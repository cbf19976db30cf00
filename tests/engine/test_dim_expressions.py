"""Shape entries that are expressions of dims (issue 26 item 4): RoPE's ``head_dim = 2 * D2`` said as
``shape = ["B", "2*D2"]``. Every case keeps the relation, a rotation that pairs the wrong elements is caught
and its correct twin passes, minimize shrinks through the expression, and malformed expressions are config
errors naming file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kit.cli import gpuemu, jdoc, out
from kit.ops import op_toml, project_toml
from kit.workspace import load_op, write_ws

from gpuemu_ls.engine.cases.plan import derive_case
from gpuemu_ls.engine.config import dimexpr

OPS = """
import numpy as np


def rope(x, cos, sin):
    d2 = x.shape[-1] // 2
    a, b = x[..., :d2].astype(np.float32), x[..., d2:].astype(np.float32)
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1).astype(x.dtype)


def rope_interleaved(x, cos, sin):
    # the bug: pairs (x0, x1), (x2, x3) ... while the model was trained with halves
    a, b = x[..., 0::2].astype(np.float32), x[..., 1::2].astype(np.float32)
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1).astype(x.dtype)


def rope_ref(x, cos, sin):
    d2 = x.shape[-1] // 2
    a, b = x[..., :d2], x[..., d2:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
"""

INPUTS = {"x": ["B", "2*D2"], "cos": ["B", "D2"], "sin": ["B", "D2"]}
DIMS = {"B": (1, 8, 2), "D2": (1, 64, 32)}


def _toml(**x_shape: object) -> str:
    inputs = {**INPUTS, **x_shape}
    toml = project_toml(validation={"dtypes": ["float32", "float16"], "iterations": 16})
    for name, fn in (("rope", "rope"), ("rope_interleaved", "rope_interleaved")):
        toml += op_toml(name, module=f"ops:{fn}", reference="ops:rope_ref", inputs=inputs, dims=DIMS)
    return toml


def test_every_case_keeps_the_relation(tmp_path: Path) -> None:
    op = load_op(tmp_path, _toml(), "rope", {"ops.py": OPS})
    for seed in range(200):
        spec = derive_case(op, seed)
        assert spec.shapes["x"][-1] == 2 * spec.shapes["cos"][-1] == 2 * spec.dims["D2"], spec


def test_a_rotation_of_the_wrong_pairs_fails_and_its_twin_passes(tmp_path: Path) -> None:
    root = write_ws(tmp_path, _toml(), {"ops.py": OPS})
    proc = gpuemu("test", "--format", "json", cwd=root)
    ops = {o["name"]: o for o in jdoc(proc)["ops"]}
    assert ops["rope"]["status"] == "passed", ops["rope"]["failures"][:1]
    bug = ops["rope_interleaved"]
    assert bug["status"] == "failed", bug
    seed = str(bug["failures"][0]["seed"])
    mini = gpuemu("minimize", "--op", "rope_interleaved", "--seed", seed, "--format", "json", cwd=root)
    shapes = json.loads(mini.stdout)["minimized"]["shapes"]
    assert shapes["x"][-1] == 2 * shapes["cos"][-1], out(mini)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("2**D2", "only +, -, * and // combine dims"),
        ("D2-5", "a size must be >= 0"),
        ("2*Q", "dim 'Q' is used but not declared"),
        ("1.5*D2", "constants are integers >= 0"),
        ("D2 +", "is not a dim name or an expression"),
        ("len(D2)", "call is not allowed"),
    ],
)
def test_a_malformed_expression_is_a_config_error(tmp_path: Path, entry: str, says: str) -> None:
    root = write_ws(tmp_path, _toml(x=["B", entry]), {"ops.py": OPS})
    proc = gpuemu("ops", cwd=root)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2 and says in text and "gpuemu.toml:" in text, out(proc)


def test_expressions_evaluate_with_integer_arithmetic() -> None:
    assert dimexpr.evaluate("2*D2", {"D2": 7}) == 14
    assert dimexpr.evaluate("H*D + 1", {"H": 3, "D": 5}) == 16
    assert dimexpr.evaluate("(N+1)//2", {"N": 6}) == 3
    assert dimexpr.names("H*D + 1") == {"H", "D"} and dimexpr.names(4) == set()
