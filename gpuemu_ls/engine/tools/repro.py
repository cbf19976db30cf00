"""Standalone reproductions: a Python file plus its inputs that replay one case without gpuemu-ls.

``.gpuemu/repro/<op>_<seed>.py`` loads ``<op>_<seed>.npz`` (bfloat16 stored as its bits, rebuilt with
ml_dtypes), rebuilds the case's memory layout, runs the op under test and the float64 reference, and
asserts that they agree within the op's tolerance (the plain bound, ``atol + rtol*|ref| + 1 ulp``, and
the NaN/inf rules). It needs numpy (and ml_dtypes for bfloat16), nothing else, and holds no absolute
path: the workspace is found relative to the file, so the folder can be zipped and sent.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..cases.plan import CaseSpec
from ..config.load import Config, OpConfig, is_callable_ref, resolve_tolerance
from ..oracle.outcome import CaseResult
from ..private_files import check_name, write_private

REPRO_DIR = Path(".gpuemu") / "repro"


def inputs_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz any numpy can read; bfloat16 travels as uint16 bits with its dtype in ``__dtypes__``."""
    dtypes = {}
    out: dict[str, np.ndarray] = {}
    for name, arr in arrays.items():
        dtypes[name] = arr.dtype.name
        out[name] = arr.view(np.uint16) if arr.dtype.name == "bfloat16" else arr
    buf = io.BytesIO()
    np.savez_compressed(buf, __dtypes__=np.array(json.dumps(dtypes)), **out)
    return buf.getvalue()


def save_inputs(root: Path, name: str, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``.gpuemu/repro/<name>.npz`` under the workspace ``root`` (no symlink followed)."""
    return write_private(root, (*REPRO_DIR.parts, f"{name}.npz"), inputs_bytes(arrays))


def write_repro(
    config: Config,
    op: OpConfig,
    spec: CaseSpec,
    inputs: dict[str, np.ndarray],
    result: CaseResult | None,
    *,
    label: str = "",
) -> Path:
    """Write the reproduction of a case; returns the script's path."""
    stem = f"{check_name('op name', op.name)}_{spec.seed}{label}"
    save_inputs(config.root, stem, inputs)
    float_out = op.output_dtype or spec.dtype
    atol, rtol = resolve_tolerance(op, config.validation, float_out)
    expected: dict[str, Any] = {}
    if result is not None:
        st = result.stats()
        expected = {
            "status": result.status,
            "kind": result.kind,
            "max_abs": st["max_abs"],
            "message": (result.message or "").strip().splitlines()[0][:300] if result.message else "",
        }
    depth = len(REPRO_DIR.parts)
    values = {
        "OP": op.name,
        "SEED": spec.seed,
        "CASE": spec.to_dict(),
        "EXPECTED": expected,
        "OP_CALL": op.module if op.execution_mode != "script_based" else None,
        "OP_SCRIPT": op.op_script if op.execution_mode == "script_based" else None,
        "REFERENCE": op.reference,
        "REFERENCE_IS_SCRIPT": not is_callable_ref(op.reference or ""),
        "INPUT_ORDER": list(op.input_names),
        "KWARGS": op.kwargs,
        "LAYOUT": spec.layout,
        "OUTPUT_DTYPE": op.output_dtype,
        "CASE_DTYPE": spec.dtype,
        "ATOL": atol,
        "RTOL": rtol,
        "CHECK_NAN": config.validation.check_nan,
        "CHECK_INF": config.validation.check_inf,
        "SCRIPT_STRIDES": any(lay != "contiguous" for lay in op.layouts),
    }
    header = "\n".join(f"{k} = {v!r}" for k, v in values.items())
    text = _TEMPLATE.replace("@@HEADER@@", header).replace("@@DEPTH@@", str(depth)).replace("@@STEM@@", stem)
    text = text.replace("@@TITLE@@", f"op {op.name!r}, seed {spec.seed}{' (minimized)' if label else ''}")
    return write_private(config.root, (*REPRO_DIR.parts, f"{stem}.py"), text.encode("utf-8"))


_TEMPLATE = '''#!/usr/bin/env python3
"""Standalone reproduction written by gpuemu-ls: @@TITLE@@.

Runs the op under test and its float64 reference on the stored inputs (@@STEM@@.npz) and asserts
that they agree within tolerance. Needs numpy (and ml_dtypes for bfloat16), not gpuemu-ls:

    python @@STEM@@.py      # exit 1 while the bug is there, 0 once it is fixed
"""

import base64
import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORKSPACE = HERE.parents[@@DEPTH@@ - 1]
@@HEADER@@


def numpy_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def load_inputs():
    data = np.load(HERE / "@@STEM@@.npz")
    dtypes = json.loads(str(data["__dtypes__"]))
    out = {}
    for name, dtype in dtypes.items():
        arr = data[name]
        out[name] = arr.view(numpy_dtype("bfloat16")) if dtype == "bfloat16" else arr
    return out


def with_layout(arr, layout):
    """The memory layout the case used: a transposed view, or every other element of a poisoned buffer."""
    if layout == "transposed" and arr.ndim >= 2:
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(arr, -1, -2)), -1, -2)
    if layout == "strided" and arr.ndim >= 1:
        buf = np.empty((*arr.shape[:-1], arr.shape[-1] * 2), dtype=arr.dtype)
        buf[...] = np.nan if (arr.dtype.kind == "f" or arr.dtype.name == "bfloat16") else (
            True if arr.dtype.kind == "b" else np.iinfo(arr.dtype).max)
        view = buf[..., ::2]
        view[...] = arr
        return view
    return arr.copy()


def encode(arr, strides=False):
    arr = np.asarray(arr)
    name = arr.dtype.name
    if strides and not arr.flags.c_contiguous and arr.size and all(s >= 0 for s in arr.strides):
        item = arr.itemsize
        span = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides)) // item + 1
        flat = np.lib.stride_tricks.as_strided(arr, shape=(span,), strides=(item,))
        return {"shape": list(arr.shape), "dtype": name, "strides": [s // item for s in arr.strides],
                "data": base64.b64encode(flat.tobytes()).decode()}
    return {"shape": list(arr.shape), "dtype": name,
            "data": base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode()}


def decode(t):
    raw = base64.b64decode(t["data"])
    return np.frombuffer(raw, dtype=numpy_dtype(t["dtype"])).reshape(t["shape"]).copy()


def run_script(rel, inputs, strides=False):
    request = json.dumps({"inputs": {k: encode(v, strides) for k, v in inputs.items()}, "kwargs": KWARGS})
    proc = subprocess.run([sys.executable, str(WORKSPACE / rel)], input=request, capture_output=True,
                          text=True, cwd=WORKSPACE, check=False)
    if proc.returncode != 0:
        sys.exit(f"{rel} exited with {proc.returncode}:\\n{proc.stderr[-2000:]}")
    obj = json.loads(proc.stdout)
    outs = obj["outputs"] if "outputs" in obj else {"result": obj}
    if set(outs) >= {"shape", "dtype", "data"}:
        outs = {"result": outs}
    return {k: decode(v) for k, v in outs.items()}


def call(ref, args):
    module, func = ref.split(":")
    sys.path.insert(0, str(WORKSPACE))
    value = getattr(importlib.import_module(module), func)(*args, **KWARGS)
    if isinstance(value, dict):
        return {k: np.asarray(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return {f"result{i}": np.asarray(v) for i, v in enumerate(value)}
    return {"result": np.asarray(value)}


def ulp(ref, dtype):
    """Spacing of the output dtype at each |ref| (float64)."""
    if dtype.kind not in "f" and dtype.name != "bfloat16":
        return np.zeros_like(ref)
    if dtype.name == "bfloat16":
        precision, tiny, sub, big = 8, 2.0 ** -126, 2.0 ** -133, float(np.finfo(np.float32).max)
    else:
        fi = np.finfo(dtype)
        precision, tiny, sub, big = fi.nmant + 1, float(fi.tiny), float(fi.smallest_subnormal), float(fi.max)
    mag = np.where(np.isfinite(ref), np.minimum(np.abs(ref), big), big)
    _, exp = np.frexp(mag)
    return np.where(mag < tiny, sub, np.ldexp(1.0, (exp - precision).astype(np.int32)))


def compare(name, out, ref):
    """The plain gpuemu rule: |out - ref| <= atol + rtol*|ref| + ulp; NaN matches NaN; inf as the dtype rounds."""
    if out.shape != ref.shape:
        return [f"{name}: shape {list(out.shape)} != reference {list(ref.shape)}"]
    dtype = out.dtype
    o = out.astype(np.float64)
    r = ref.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        allowed = ATOL + RTOL * np.abs(r) + ulp(r, dtype)
        ok = np.isfinite(r) & (np.abs(o - r) <= allowed)
        if dtype.kind == "f" or dtype.name == "bfloat16":
            top = float(np.finfo(np.float32).max) if dtype.name == "bfloat16" else float(np.finfo(dtype).max)
            ok |= np.isfinite(r) & (o == np.inf) & (r + allowed >= top)
            ok |= np.isfinite(r) & (o == -np.inf) & (r - allowed <= -top)
        ok |= np.isnan(r) & np.isnan(o)
        ok |= np.isinf(r) & (o == r)
        if not CHECK_NAN:
            ok |= np.isfinite(r) & np.isnan(o)
        if not CHECK_INF:
            ok |= np.isfinite(r) & np.isinf(o)
    bad = ~ok
    if not bad.any():
        return []
    idx = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
    err = np.abs(o - r)
    finite = np.isfinite(err)
    worst = float(err[finite].max()) if finite.any() else float("nan")
    return [f"{name}: {int(bad.sum())}/{bad.size} elements off tolerance atol={ATOL:g} rtol={RTOL:g} "
            f"({dtype.name}); max abs err {worst:.6g}; first at {list(map(int, idx))}: "
            f"op={float(o[idx])!r} ref={float(r[idx])!r} allowed={float(allowed[idx])!r}"]


def main():
    logical = load_inputs()
    views = {k: with_layout(v, LAYOUT) for k, v in logical.items()}
    before = {k: np.array(v.base if isinstance(v.base, np.ndarray) else v) for k, v in views.items()}
    if OP_SCRIPT:
        out = run_script(OP_SCRIPT, views, SCRIPT_STRIDES)
    else:
        out = call(OP_CALL, [views[n] for n in INPUT_ORDER])
    problems = []
    for k, v in views.items():
        now = v.base if isinstance(v.base, np.ndarray) else v
        if now.tobytes() != before[k].tobytes():
            problems.append(f"the op wrote into its input {k!r}")
    promoted = {k: (v.astype(np.float64) if (v.dtype.kind == "f" or v.dtype.name == "bfloat16") else v)
                for k, v in logical.items()}
    if REFERENCE_IS_SCRIPT:
        ref = run_script(REFERENCE, promoted)
    else:
        ref = call(REFERENCE, [promoted[n] for n in INPUT_ORDER])
    if set(out) != set(ref):
        problems.append(f"outputs {sorted(out)} != reference outputs {sorted(ref)}")
    for name in sorted(set(out) & set(ref)):
        expected = OUTPUT_DTYPE or (CASE_DTYPE if ref[name].dtype.kind == "f" else ref[name].dtype.name)
        if out[name].dtype != numpy_dtype(expected):
            problems.append(f"{name}: dtype {out[name].dtype.name}, expected {expected}")
            continue
        problems += compare(name, out[name], ref[name])
    print(f"{OP} seed {SEED}: case {CASE['dtype']} {CASE['shapes']} layout={LAYOUT} dist={CASE['distribution']}")
    if EXPECTED:
        print(f"gpuemu saw: {EXPECTED.get('kind')}: {EXPECTED.get('message')}")
    assert not problems, "\\n".join(problems)
    print("PASSED: op and reference agree")


if __name__ == "__main__":
    main()
'''
