"""Shared helpers for the benchmarks: workspaces, timing, percentiles."""

from __future__ import annotations

import statistics
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def write_workspace(root: Path, toml: str, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "gpuemu.toml").write_text(textwrap.dedent(toml).lstrip())
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())
    return root


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def best_of(n: int, fn: Callable[[], Any]) -> float:
    """The fastest of n runs: the least disturbed by other work on a shared machine."""
    return min(timed(fn)[0] for _ in range(n))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def result(number: int, measure: str, value: float, unit: str, goal: str, met: bool, **details: Any) -> dict[str, Any]:
    return {
        "number": number,
        "measure": measure,
        "value": value,
        "unit": unit,
        "goal": goal,
        "met": bool(met),
        "details": details,
    }


SOFTMAX_KERNEL = """
import numpy as np

BLOCK = 256


def softmax(x):
    rows, n = x.shape
    xf = np.asarray(x, dtype=np.float32)
    m = np.full(rows, -np.inf, dtype=np.float32)
    s = np.zeros(rows, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, n, BLOCK):
            tile = xf[:, start:start + BLOCK]
            new = np.maximum(m, tile.max(axis=1))
            shift = np.where(np.isneginf(new), 0.0, new)
            s = s * np.exp(m - shift) + np.exp(tile - shift[:, None]).sum(axis=1)
            m = new
        shift = np.where(np.isneginf(m), 0.0, m)
        return (np.exp(xf - shift[:, None]) / s[:, None]).astype(x.dtype)


def reference(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
"""

SOFTMAX_SCRIPT_OP = """
import base64, json, sys
import numpy as np
from kernels import softmax

req = json.load(sys.stdin)
t = req["inputs"]["x"]
x = np.frombuffer(base64.b64decode(t["data"]), dtype="<f4").reshape(t["shape"])
y = softmax(x)
print(json.dumps({"outputs": {"result": {"shape": list(y.shape), "dtype": "float32",
                                          "data": base64.b64encode(y.astype("<f4").tobytes()).decode()}}}))
"""

SOFTMAX_SCRIPT_REF = """
import base64, json, sys
import numpy as np

req = json.load(sys.stdin)
t = req["inputs"]["x"]
x = np.frombuffer(base64.b64decode(t["data"]), dtype="<f8").reshape(t["shape"])
e = np.exp(x - x.max(axis=-1, keepdims=True))
y = e / e.sum(axis=-1, keepdims=True)
print(json.dumps({"outputs": {"result": {"shape": list(y.shape), "dtype": "float64",
                                          "data": base64.b64encode(y.astype("<f8").tobytes()).decode()}}}))
"""
