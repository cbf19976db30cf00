"""Helpers for the Python API, framework adapter, pytest plugin and Triton example tests.

Frameworks are detected without importing them (importing triton here would fix its interpreter
mode for the whole test process); tests that need one are skipped with the install command.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest


def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


HAS_TORCH = _have("torch")
HAS_JAX = _have("jax") and _have("jaxlib")
HAS_TF = _have("tensorflow")
HAS_TRITON = _have("triton")

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch: pip install torch==2.13.0 (CPU wheel)")
needs_jax = pytest.mark.skipif(not HAS_JAX, reason="needs jax: pip install jax jaxlib (CPU)")
needs_tf = pytest.mark.skipif(not HAS_TF, reason="needs tensorflow: pip install tensorflow-cpu")
needs_triton = pytest.mark.skipif(
    not (HAS_TORCH and HAS_TRITON), reason="needs torch and triton: pip install torch==2.13.0 triton"
)

REPO = Path(__file__).resolve().parents[2]

SOFTMAX_REF = """
import numpy as np


def softmax(x, axis=-1):
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        e = np.exp(x - m)
        return e / e.sum(axis=axis, keepdims=True)


def scaled_add(x, y, alpha=1.0):
    return x + alpha * y
"""

NUMPY_OPS = """
import numpy as np


def softmax(x, axis=-1):
    with np.errstate(invalid="ignore", over="ignore"):
        xf = x.astype(np.float32)
        e = np.exp(xf - xf.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def softmax_no_max(x, axis=-1):
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x.astype(np.float32))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)
"""

#: One client-side op (no module: only reachable through run_op), one module op, one two-input op with kwargs.
CLIENT_TOML = """
[project]
name = "api-test"

[validation]
dtypes = ["float32", "float16", "bfloat16"]
iterations = 12

[ci]
fuzz_iterations = 12

[[ops]]
name = "softmax"
execution_mode = "client_side"
reference = "refs:softmax"
invariants = ["shape_preserved"]

[ops.inputs.x]
shape = ["B", "N"]

[ops.dims]
B = { min = 1, max = 8, default = 4 }
N = { min = 1, max = 200, default = 64 }

[ops.kwargs]
axis = -1

[[ops]]
name = "softmax_mod"
module = "ops:softmax"
reference = "refs:softmax"

[ops.inputs.x]
shape = ["B", "N"]

[ops.dims]
B = { min = 1, max = 8, default = 4 }
N = { min = 1, max = 200, default = 64 }

[[ops]]
name = "add"
execution_mode = "client_side"
reference = "refs:scaled_add"
dtypes = ["float32"]

[ops.inputs.x]
shape = ["B", "N"]

[ops.inputs.y]
shape = ["B", "N"]

[ops.dims]
B = { min = 1, max = 4, default = 2 }
N = { min = 1, max = 32, default = 8 }

[ops.kwargs]
alpha = 0.5
"""


def np_softmax(inputs: dict[str, Any], axis: int = -1) -> Any:
    """A correct softmax for run_op (numpy): float32 math, rounded once to the input dtype."""
    import numpy as np

    x = inputs["x"]
    with np.errstate(invalid="ignore", over="ignore"):
        xf = x.astype(np.float32)
        e = np.exp(xf - xf.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def np_softmax_no_max(inputs: dict[str, Any], axis: int = -1) -> Any:
    """The classic bug: exp without subtracting the row max overflows on large values."""
    import numpy as np

    x = inputs["x"]
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x.astype(np.float32))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def rows(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Rows of the store file, read with plain sqlite3 (what any other reader of the store sees)."""
    conn = sqlite3.connect(str(db))
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def detail(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(row.get("detail") or "{}")


def plugin_args() -> list[str]:
    """``-p gpuemu_ls.pytest_plugin`` unless an installed pytest11 entry point already loads it under
    another name (pytest refuses to register one module under two names)."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="pytest11"):
        if ep.value == "gpuemu_ls.pytest_plugin" and ep.name != "gpuemu_ls.pytest_plugin":
            return []
    return ["-p", "gpuemu_ls.pytest_plugin"]
