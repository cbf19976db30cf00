"""Standalone reproductions: a Python file plus its inputs that replay one case without gpuemu-ls.

``.gpuemu/repro/<op>_<seed>.py`` loads ``<op>_<seed>.npz`` (bfloat16 stored as its bits), rebuilds the
case's memory layout, runs the op under test (as its framework's tensors) and the float64 reference,
and checks them by gpuemu's rule for these inputs: the plain bound (``atol + rtol*|ref| + 1 ulp``, or
the ulp tolerance) and the NaN/inf rules, widened by the per-element bound gpuemu measured for the
reference's sensitivity and with the elements gpuemu found out of range unjudged (both stored in the
.npz, so the file and gpuemu count the same elements). Its header says what it imports: numpy, plus
ml_dtypes for a bfloat16 case and the framework of a framework op. Exit codes: 0 agree, 1 the bug is
there, 2 it cannot run (a missing import). It holds no absolute path: the workspace is found relative
to the file, so the folder can be zipped and sent.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..cases.plan import CaseSpec
from ..config.model import SCALE_FLOOR, SCALED_ATOL_DTYPES, Config, OpConfig, is_callable_ref, resolve_bound
from ..oracle.outcome import CaseResult
from ..private_files import check_name, write_private
from ..run.grads import Upstream, grad_names

REPRO_DIR = Path(".gpuemu") / "repro"


def inputs_bytes(arrays: dict[str, np.ndarray], skip: tuple[str, ...] = ()) -> bytes:
    """An .npz any numpy can read; bfloat16 travels as uint16 bits with its dtype in ``__dtypes__`` (which
    lists the inputs, not the ``skip`` entries)."""
    dtypes = {}
    out: dict[str, np.ndarray] = {}
    for name, arr in arrays.items():
        if name not in skip:
            dtypes[name] = arr.dtype.name
        out[name] = arr.view(np.uint16) if arr.dtype.name == "bfloat16" else arr
    buf = io.BytesIO()
    np.savez_compressed(buf, __dtypes__=np.array(json.dumps(dtypes)), **out)
    return buf.getvalue()


def save_inputs(
    root: Path, name: str, arrays: dict[str, np.ndarray], judged: dict[str, np.ndarray] | None = None
) -> Path:
    """Write ``.gpuemu/repro/<name>.npz`` under the workspace ``root`` (no symlink followed); ``judged``
    adds gpuemu's per-output bounds (``__bound__<output>``) and out-of-range masks (``__excused__<output>``)."""
    data = inputs_bytes(arrays) if not judged else inputs_bytes({**arrays, **judged}, skip=tuple(judged))
    return write_private(root, (*REPRO_DIR.parts, f"{name}.npz"), data)


def judgement(result: CaseResult | None) -> dict[str, np.ndarray]:
    """What gpuemu decided per element beyond the plain bound, so a reproduction applies the same rule."""
    out: dict[str, np.ndarray] = {}
    for c in result.comparisons if result is not None else ():
        if c.bound is not None:
            out[f"__bound__{c.output}"] = np.asarray(c.bound, dtype=np.float64)
        if c.excused is not None and c.excused.any():
            out[f"__excused__{c.output}"] = np.asarray(c.excused, dtype=bool)
    return out


def upstreams(op: OpConfig, spec: CaseSpec, result: CaseResult | None) -> dict[str, np.ndarray]:
    """The upstream gradients the case drew for each forward output (backward validation), as
    ``__upstream__<output>``: the same draw (op, seed, output) the engine made, at the output's shape."""
    if not op.grad or result is None:
        return {}
    draw = Upstream(op.name, spec.seed, op.outputs)
    grads = set(grad_names(op.grad))
    out = {}
    for c in result.comparisons:
        if c.output not in grads and c.shape is not None:
            dtype = c.dtype if c.dtype in dt.ALL_NAMES else (op.output_dtype or spec.dtype)
            out[f"__upstream__{c.output}"] = draw.for_op(c.output, tuple(c.shape), dt.numpy_dtype(dtype))
    return out


def needs(op: OpConfig, spec: CaseSpec) -> str:
    """What the reproduction imports, for its header."""
    what = ["numpy"]
    if "bfloat16" in (spec.dtype, op.output_dtype) or any(i.dtype == "bfloat16" for i in op.inputs):
        what.append("ml_dtypes (bfloat16)")
    lib = {"pytorch": "torch", "jax": "jax", "tensorflow": "tensorflow"}.get(op.framework)
    if lib and op.execution_mode != "script_based":
        what.append(lib)
    code = [op.module if op.execution_mode != "script_based" else op.op_script, op.reference]
    return ", ".join(what) + " and the workspace's " + " and ".join(str(c) for c in code if c)


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
    save_inputs(config.root, stem, inputs, {**judgement(result), **upstreams(op, spec, result)})
    float_out = op.output_dtype or spec.dtype
    bound = resolve_bound(op, config.validation, float_out)
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
        "CALL": op.call,
        "REFERENCE_CALL": op.reference_call,
        "INPLACE": list(op.inplace),
        "GRAD": list(op.grad),
        "REQUIRES_GRAD": list(op.requires_grad),
        "OUTPUTS": list(op.outputs),
        "REFERENCE_FRAMEWORK": op.reference_framework,
        "REFERENCE_GRAD": op.reference_grad,
        "KWARGS": op.kwargs,
        "LAYOUT": spec.layout,
        "OUTPUT_DTYPE": op.output_dtype,
        "CASE_DTYPE": spec.dtype,
        "FRAMEWORK": op.framework if op.execution_mode != "script_based" else "numpy",
        "ATOL": bound.atol,
        # the built-in half-precision atol follows the output's magnitude (config.model.scaled_atol)
        "ATOL_SCALE_FLOOR": SCALE_FLOOR if bound.builtin_atol and float_out in SCALED_ATOL_DTYPES else None,
        "RTOL": bound.rtol,
        "ULP": bound.ulp,
        "CHECK_NAN": config.validation.check_nan,
        "CHECK_INF": config.validation.check_inf,
        "SCRIPT_STRIDES": any(lay != "contiguous" for lay in op.layouts),
    }
    header = "\n".join(f"{k} = {v!r}" for k, v in values.items())
    text = _TEMPLATE.replace("@@HEADER@@", header).replace("@@DEPTH@@", str(depth)).replace("@@STEM@@", stem)
    title = f"op {op.name!r}, seed {spec.seed}{' (minimized)' if label else ''}"
    text = text.replace("@@NEEDS@@", _in_docstring(needs(op, spec))).replace("@@TITLE@@", _in_docstring(title))
    return write_private(config.root, (*REPRO_DIR.parts, f"{stem}.py"), text.encode("utf-8"))


def _in_docstring(text: str) -> str:
    """``text`` as it must be written inside the reproduction's docstring to read back as itself: names from
    the user's world (a script called ``x\"\"\"...``, a Windows path with ``\\U``) are data, never source."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


_TEMPLATE = """#!/usr/bin/env python3
\"\"\"Standalone reproduction written by gpuemu-ls: @@TITLE@@.

Runs the op under test and its float64 reference on the stored inputs (@@STEM@@.npz) and checks that
they agree by gpuemu's rule for these inputs. Needs @@NEEDS@@; not gpuemu-ls.

    python @@STEM@@.py      # exit 1 while the bug is there, 0 once it is fixed, 2 if it cannot run

The rule is gpuemu's plain bound (atol + rtol*|ref| + one ulp of the output dtype, or the ulp tolerance),
widened where gpuemu measured the reference's own sensitivity on these inputs and with the elements
gpuemu found out of range left unjudged (both stored in the .npz, see docs/verdicts.md), so this file
and gpuemu count the same elements off.
\"\"\"

import base64
import contextlib
import importlib
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKSPACE = HERE.parents[@@DEPTH@@ - 1]
@@HEADER@@


def need(module, hint):
    \"\"\"Import a dependency, or say which one is missing and exit 2 (cannot run: not a verdict).\"\"\"
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        sys.exit(print(f"cannot run this reproduction: {exc} ({hint})", file=sys.stderr) or 2)


np = need("numpy", "pip install numpy")


def numpy_dtype(name):
    if name == "bfloat16":
        return np.dtype(need("ml_dtypes", "pip install ml_dtypes: the case is bfloat16").bfloat16)
    return np.dtype(name)


def is_float(arr):
    return arr.dtype.kind == "f" or arr.dtype.name == "bfloat16"


def load_inputs():
    data = np.load(HERE / "@@STEM@@.npz")
    dtypes = json.loads(str(data["__dtypes__"]))
    out = {}
    for name, dtype in dtypes.items():
        arr = data[name]
        out[name] = arr.view(numpy_dtype("bfloat16")) if dtype == "bfloat16" else arr
    judged = {k[len("__bound__"):]: data[k] for k in data.files if k.startswith("__bound__")}
    excused = {k[len("__excused__"):]: data[k] for k in data.files if k.startswith("__excused__")}
    upstream = {}
    for k in data.files:
        if k.startswith("__upstream__"):
            arr = data[k]
            upstream[k[len("__upstream__"):]] = arr.view(numpy_dtype("bfloat16")) if arr.dtype == np.uint16 else arr
    return out, judged, excused, upstream


def with_layout(arr, layout):
    \"\"\"The memory layout the case used: a transposed view, or every other element of a poisoned buffer.\"\"\"
    if layout == "transposed" and arr.ndim >= 2:
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(arr, -1, -2)), -1, -2)
    if layout == "strided" and arr.ndim >= 1:
        buf = np.empty((*arr.shape[:-1], arr.shape[-1] * 2), dtype=arr.dtype)
        buf[...] = np.nan if is_float(arr) else (True if arr.dtype.kind == "b" else np.iinfo(arr.dtype).max)
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


class Framework:
    \"\"\"What the op receives: numpy arrays, or its framework's tensors (on its accelerator when there is one).\"\"\"

    def __init__(self, name, device=None):
        self.name = name
        if name == "pytorch":
            self.torch = need("torch", "the op is a PyTorch op: pip install torch")
            self.device = device or ("cuda" if self.torch.cuda.is_available() else "cpu")
        elif name == "jax":
            self.jnp = need("jax.numpy", "the op is a JAX op: pip install jax")
        elif name == "tensorflow":
            self.tf = need("tensorflow", "the op is a TensorFlow op: pip install tensorflow")

    def tensor(self, arr):
        if self.name == "pytorch":
            if arr.dtype.name == "bfloat16":
                t = self.torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).view(self.torch.bfloat16)
            else:
                t = self.torch.from_numpy(arr) if arr.flags.writeable else self.torch.tensor(arr)
            return t.to(self.device)
        if self.name == "jax":
            return self.jnp.asarray(arr)
        if self.name == "tensorflow":
            return self.tf.convert_to_tensor(arr)
        return arr

    def array(self, value):
        if self.name == "pytorch" and isinstance(value, self.torch.Tensor):
            value = value.detach().cpu()
            if value.dtype == self.torch.bfloat16:
                return value.view(self.torch.int16).numpy().view(numpy_dtype("bfloat16"))
            return value.numpy()
        if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
            return np.asarray(value.numpy())
        return np.asarray(value)


def is_tensor(value):
    return hasattr(value, "shape") or hasattr(value, "__array__") or hasattr(value, "__dlpack__")


def load(ref):
    module, func = ref.split(":")
    sys.path.insert(0, str(WORKSPACE))
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        sys.exit(print(f"cannot run this reproduction: importing {module!r}: {exc}", file=sys.stderr) or 2)
    for part in func.split("."):  # "Class.apply": an autograd Function
        mod = getattr(mod, part)
    return mod


def named_outputs(value):
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, tuple) or (isinstance(value, list) and value and all(map(is_tensor, value))):
        return {f"result{i}": v for i, v in enumerate(value)}
    return {"result": value}


def call(ref, args, fw, style="positional", inplace=(), upstream=None, requires_grad=()):
    \"\"\"Call ``ref``; with ``upstream`` (backward validation) also backward through torch's autograd, the
    gradients of the inputs of GRAD being outputs grad_<input>.\"\"\"
    tensors = [fw.tensor(a) for a in args]
    if upstream is not None and fw.name == "jax":
        return jax_backward(load(ref), tensors, fw, upstream)
    for i, n in enumerate(INPUT_ORDER):
        if n in requires_grad:  # the op reads requires_grad (a kernel that computes its gradient for training)
            tensors[i] = tensors[i].detach().requires_grad_(True)
    leaves = []
    if upstream is not None:
        for i, n in enumerate(INPUT_ORDER):
            if n in GRAD:
                tensors[i] = tensors[i].detach().requires_grad_(True)
                leaves.append(tensors[i])
    named = dict(zip(INPUT_ORDER, tensors))
    fn = load(ref)
    if style == "kwargs":
        value = fn(**named, **KWARGS)
    elif style == "dict":
        value = fn(named, **KWARGS)
    else:
        value = fn(*tensors, **KWARGS)
    written = {n: fw.array(named[n]) for n in inplace}
    if value is None and written:  # an in-place op: its results are the inputs it wrote
        return written
    outs = named_outputs(value)
    if OUTPUTS:  # the op's declared names for its positional outputs
        positional = ["result"] if len(OUTPUTS) == 1 else [f"result{i}" for i in range(len(OUTPUTS))]
        if list(outs) == positional:
            outs = dict(zip(OUTPUTS, outs.values()))
    got = {**{k: fw.array(v) for k, v in outs.items()}, **written}
    if upstream is not None:
        torch = fw.torch
        pairs = [(t, n) for n, t in outs.items() if isinstance(t, torch.Tensor) and t.requires_grad]
        if not pairs:
            sys.exit("FAILED: the outputs carry no gradient (none requires grad)") if not leaves else None
        ups = []
        for t, n in pairs:
            up = upstream[n]
            up = as_float64(up).astype(got[n].dtype) if got[n].dtype == np.float64 else up
            ups.append(fw.tensor(np.ascontiguousarray(up)))
        grads = torch.autograd.grad([t for t, _ in pairs], leaves, grad_outputs=ups, allow_unused=True)
        for n, leaf, g in zip([n for n in INPUT_ORDER if n in GRAD], leaves, grads):
            got["grad_" + n] = fw.array(g) if g is not None else np.zeros(leaf.shape, fw.array(leaf).dtype)
    return got


def float64_scope(framework):
    \"\"\"JAX computes in float32 unless 64-bit types are on: on for the reference's call only, as in gpuemu.\"\"\"
    if framework != "jax":
        return contextlib.nullcontext()
    jax = need("jax", "the reference is a JAX function: pip install jax")
    return jax.enable_x64(True)


def jax_backward(fn, tensors, fw, upstream):
    \"\"\"A JAX op forward and, through jax.vjp with the recorded upstream gradients, backward.\"\"\"
    jax = need("jax", "the op is a JAX op: pip install jax")
    at = [i for i, n in enumerate(INPUT_ORDER) if n in GRAD]

    def forward(*diff):
        full = list(tensors)
        for i, d in zip(at, diff):
            full[i] = d
        return fn(*full, **KWARGS)

    value, vjp = jax.vjp(forward, *(tensors[i] for i in at))
    got = {k: fw.array(v) for k, v in named_outputs(value).items()}
    raw = dict(got)
    final = dict(zip(got, got))  # each output's name as recorded: the op's OUTPUTS for positional ones
    if OUTPUTS:
        positional = ["result"] if len(OUTPUTS) == 1 else [f"result{i}" for i in range(len(OUTPUTS))]
        if list(got) == positional:
            final = dict(zip(positional, OUTPUTS))
            got = dict(zip(OUTPUTS, got.values()))

    def up(name):  # a float64 reference's cotangent is float64, as its output
        u = upstream[final[name]]
        return fw.tensor(as_float64(u) if raw[name].dtype == np.float64 else u)

    if isinstance(value, dict):
        cotangent = {k: up(str(k)) for k in value}
    elif isinstance(value, (tuple, list)):
        cotangent = type(value)(up(f"result{i}") for i in range(len(value)))
    else:
        cotangent = up("result")
    for n, g in zip([n for n in INPUT_ORDER if n in GRAD], vjp(cotangent)):
        got["grad_" + n] = fw.array(g)
    return got


def reference_grads(args, out, upstream):
    \"\"\"A numpy reference's input gradients from REFERENCE_GRAD(*inputs, *upstreams), as grad_<input>.\"\"\"
    ups = [as_float64(upstream[n]) for n in sorted(out) if n in upstream]
    value = load(REFERENCE_GRAD)(*args, *ups, **KWARGS)
    names = [n for n in INPUT_ORDER if n in GRAD]
    if isinstance(value, dict):
        got = {k[5:] if k.startswith("grad_") else k: v for k, v in value.items()}
    elif isinstance(value, (tuple, list)) and len(names) > 1:
        got = dict(zip(names, value))
    else:
        got = {names[0]: value}
    return {"grad_" + n: np.asarray(got[n], dtype=np.float64) for n in names}


def as_float64(arr):
    if arr.dtype.name == "bfloat16":  # the bits, widened with numpy alone
        bits = np.ascontiguousarray(arr).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    return arr.astype(np.float64)


def spacing(ref, dtype_name):
    \"\"\"Spacing of the output dtype at each |ref| (float64).\"\"\"
    if dtype_name == "bfloat16":
        precision, tiny, sub, big = 8, 2.0 ** -126, 2.0 ** -133, float(np.finfo(np.float32).max)
    elif np.dtype(dtype_name).kind == "f":
        fi = np.finfo(np.dtype(dtype_name))
        precision, tiny, sub, big = fi.nmant + 1, float(fi.tiny), float(fi.smallest_subnormal), float(fi.max)
    else:
        return np.zeros_like(ref)
    mag = np.where(np.isfinite(ref), np.minimum(np.abs(ref), big), big)
    _, exp = np.frexp(mag)
    return np.where(mag < tiny, sub, np.ldexp(1.0, (exp - precision).astype(np.int32)))


def rounded(ref, dtype_name):
    \"\"\"float64 values rounded once, to nearest-even, to the output dtype (as float64).\"\"\"
    if dtype_name != "bfloat16":
        with np.errstate(over="ignore"):
            return ref.astype(np.dtype(dtype_name)).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        m, e = np.frexp(ref)
        out = np.where(np.abs(ref) >= 2.0 ** -126, np.ldexp(np.rint(np.ldexp(m, 8)), (e - 8).astype(np.int32)),
                       np.rint(ref / 2.0 ** -133) * 2.0 ** -133)
        out = np.where(np.isfinite(ref), out, ref)
        return np.where(np.abs(out) > float(np.finfo(np.float32).max) * (1 - 2.0 ** -9), np.sign(out) * np.inf, out)


def compare(name, out, ref, bound, excused):
    \"\"\"gpuemu's rule for these inputs: the plain (or ulp) bound, widened by the stored per-element bound,
    out-of-range elements unjudged; NaN matches NaN; inf where the bound reaches the dtype's range.\"\"\"
    if out.shape != ref.shape:
        return [f"{name}: shape {list(out.shape)} != reference {list(ref.shape)}"], 0, 0
    dtype_name = out.dtype.name
    o = as_float64(out)
    r = as_float64(ref) if is_float(ref) else ref.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        target = rounded(r, dtype_name) if ULP is not None and is_float(out) else r
        unit = spacing(target, dtype_name)
        atol = ATOL
        if ATOL_SCALE_FLOOR is not None:  # atol * min(1, max(largest finite |ref|, floor))
            top = float(np.abs(r[np.isfinite(r)]).max()) if np.isfinite(r).any() else 0.0
            atol = ATOL * min(1.0, max(top, ATOL_SCALE_FLOOR))
        allowed = atol + RTOL * np.abs(r) + (ULP * unit if ULP is not None else unit)
        widened = 0
        if bound is not None and bound.shape == allowed.shape:
            widened = int((bound > allowed).sum())
            allowed = np.maximum(allowed, bound)
        ok = np.isfinite(r) & (np.abs(o - target) <= allowed)
        if is_float(out):
            top = float(np.finfo(np.float32).max) if dtype_name == "bfloat16" else float(np.finfo(out.dtype).max)
            ok |= np.isfinite(r) & (o == np.inf) & (r + allowed >= top)
            ok |= np.isfinite(r) & (o == -np.inf) & (r - allowed <= -top)
        ok |= np.isnan(r) & np.isnan(o)
        ok |= np.isinf(r) & (o == r)
        if not CHECK_NAN:
            ok |= np.isfinite(r) & np.isnan(o)
        if not CHECK_INF:
            ok |= np.isfinite(r) & np.isinf(o)
    spared = excused if excused is not None and excused.shape == ok.shape else np.zeros_like(ok)
    bad = ~ok & ~spared
    if not bad.any():
        return [], int((~ok & spared).sum()), widened
    idx = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
    err = np.where(bad, np.abs(o - target), 0.0)
    finite = np.isfinite(err)
    worst = float(err[finite].max()) if finite.any() else float("nan")
    tol = f"atol={atol:g} rtol={RTOL:g}" + (f" ulp={ULP}" if ULP is not None else "")
    text = (f"{name}: {int(bad.sum())}/{bad.size} elements off tolerance {tol} "
            f"({dtype_name}); max abs err {worst:.6g}; first at {list(map(int, idx))}: "
            f"op={float(o[idx])!r} ref={float(r[idx])!r} allowed={float(allowed[idx])!r}")
    return [text], int((~ok & spared).sum()), widened


def main():
    fw = Framework(FRAMEWORK)
    logical, bounds, excused, upstream = load_inputs()
    grads = upstream if GRAD else None
    differenced = []
    # the reference reads an in-place input's values from before the op wrote them
    unwritten = {k: (np.array(v, copy=True) if k in INPLACE else v) for k, v in logical.items()}
    views = {k: with_layout(v, LAYOUT) for k, v in logical.items()}
    before = {k: np.array(v.base if isinstance(v.base, np.ndarray) else v) for k, v in views.items()}
    if OP_SCRIPT:
        out = run_script(OP_SCRIPT, views, SCRIPT_STRIDES)
    else:
        out = call(OP_CALL, [views[n] for n in INPUT_ORDER], fw, CALL, INPLACE, grads, REQUIRES_GRAD)
    problems = []
    for k, v in views.items():
        now = v.base if isinstance(v.base, np.ndarray) else v
        if k not in INPLACE and now.tobytes() != before[k].tobytes():
            problems.append(f"the op wrote into its input {k!r}")
    promoted = {k: (as_float64(v) if is_float(v) else v) for k, v in unwritten.items()}
    if REFERENCE_IS_SCRIPT:
        ref = run_script(REFERENCE, promoted)
    elif REFERENCE_GRAD:
        ref = call(REFERENCE, [promoted[n] for n in INPUT_ORDER], Framework("numpy"), REFERENCE_CALL)
        ref.update(reference_grads([promoted[n] for n in INPUT_ORDER], ref, upstream))
    elif GRAD and REFERENCE_FRAMEWORK == "numpy":  # gradients judged by finite differences: in gpuemu only
        ref = call(REFERENCE, [promoted[n] for n in INPUT_ORDER], Framework("numpy"), REFERENCE_CALL)
        differenced = [n for n in out if n.startswith("grad_") and n[5:] in GRAD]
        for n in differenced:
            del out[n]
    else:
        ref_fw = Framework(REFERENCE_FRAMEWORK, "cpu")
        with float64_scope(REFERENCE_FRAMEWORK):
            ref = call(REFERENCE, [promoted[n] for n in INPUT_ORDER], ref_fw, REFERENCE_CALL, (), grads)
    if set(out) != set(ref):
        problems.append(f"outputs {sorted(out)} != reference outputs {sorted(ref)}")
    unjudged = widened = 0
    for name in sorted(set(out) & set(ref)):
        expected = OUTPUT_DTYPE or (CASE_DTYPE if is_float(ref[name]) else ref[name].dtype.name)
        if out[name].dtype.name != expected:
            problems.append(f"{name}: dtype {out[name].dtype.name}, expected {expected}")
            continue
        found, spared, wider = compare(name, out[name], ref[name], bounds.get(name), excused.get(name))
        problems += found
        unjudged += spared
        widened += wider
    print(f"{OP} seed {SEED}: case {CASE['dtype']} {CASE['shapes']} layout={LAYOUT} dist={CASE['distribution']}")
    if EXPECTED:
        print(f"gpuemu saw: {EXPECTED.get('kind') or EXPECTED.get('status')}: {EXPECTED.get('message')}")
    if widened:
        print(f"{widened} element(s) judged with the wider bound gpuemu measured for the reference's sensitivity")
    if unjudged:
        print(f"{unjudged} element(s) not judged, as by gpuemu (out of range, or a suspect reference)")
    if problems:
        print("FAILED: " + "\\n".join(problems))
        sys.exit(1)
    if differenced:
        print(f"NOT JUDGED here: {', '.join(differenced)} (a numpy reference without reference_grad: gpuemu judges "
              f"the gradients along random directions by finite differences; run gpuemu reproduce --op {OP} "
              f"--seed {SEED}); the forward outputs agree")
        sys.exit(2)
    print("PASSED: op and reference agree")


if __name__ == "__main__":
    main()
"""
