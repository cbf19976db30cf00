"""Triton's CPU interpreter (``TRITON_INTERPRET=1``), made to compute bfloat16 as a GPU does and to run libdevice.

Upstream's interpreter keeps bfloat16 values as their raw 16-bit patterns (``uint16``) and then does
arithmetic on the patterns: ``x * 3.0`` of a bf16 ``x`` gives -3.7e19 with triton 3.9, and ``tl.sum``,
``tl.dot``, ``tl.maximum`` of negative values, casts to and from integers are wrong likewise. A kernel that
computes in bf16 then fails every bf16 case, correct or not: a false verdict. And
``triton.language.extra.libdevice`` is a stub module whose functions return None there (the real ones are
resolved when a kernel is compiled), so ``libdevice.rsqrt(x)`` crashes with "cannot convert None".

:func:`install` patches the interpreter in memory (site-packages is never edited), in gpuemu's own workers
(and in a Python API user's process only when they call it), with the GPU's semantics:

* bf16 operands are widened to float32 and every result is rounded back to bf16, to nearest even: each
  elementwise op, comparison, ``fma``, cast (from and to integers, float16, float32) and math function;
* ``tl.dot`` of bf16 inputs multiplies exactly and returns its float32 accumulator (bf16 only if the
  accumulator is);
* a bf16 ``tl.sum`` rounds to bf16 at every combine step (a pairwise tree), as the GPU's reduction does, so
  a kernel that accumulates in bf16 keeps its real error; ``tl.max``/``tl.min``/``argmax`` compare values,
  not bit patterns; ``tl.cumsum``/``tl.cumprod`` round at every step;
* libdevice functions (``triton.language.extra.libdevice`` and its CUDA module) are computed with numpy in
  float64 and rounded once to their result type; a function without an implementation here raises an
  error that names it.

:func:`self_test` checks exactly these on small kernels, once per process (its verdict is cached per triton
version). Where triton is outside :data:`SUPPORTED` or the self-test fails, :func:`bf16_ready` is false and
the bf16 cases of ops that launch a Triton kernel under the interpreter are not judged (never FAIL, never
PASS): see ``run/case.py``.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import math
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

#: Triton versions whose interpreter this patch was written against and checked on (first, last-exclusive).
SUPPORTED = ((3, 2), (3, 10))
#: Environment variable that turns the patch off (``0``): bf16 cases of interpreted kernels are then not judged.
ENV = "GPUEMU_TRITON_BF16"

_LOCK = threading.RLock()  # re-entered when install() itself imports triton under watch()
_STATE: dict[str, Any] = {"installed": False, "why": None, "launches": 0, "programs": 0, "ops": 0}


def triton_version() -> tuple[int, int] | None:
    """The installed triton's (major, minor), or None when triton cannot be imported."""
    try:
        import triton
    except Exception:
        return None
    parts = ([*triton.__version__.split("."), "0"])[:2]
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except ValueError:
        return None


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 (or wider) values rounded to bf16 to nearest even, as bit patterns (uint16); NaN stays NaN."""
    import ml_dtypes

    return np.asarray(values, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def install() -> str | None:
    """Patch the interpreter (idempotent); None when it is patched, else why not (in words). Kernel launches
    are counted whenever triton's interpreter can be imported, patched or not."""
    with _LOCK:
        if _STATE["installed"] or _STATE["why"] is not None:
            return _STATE["why"]
        version = triton_version()
        try:
            from triton.runtime import interpreter
        except Exception as exc:  # no triton, or a broken install: say so, never crash the worker
            _STATE["why"] = f"triton's interpreter cannot be imported ({exc})"
            return _STATE["why"]
        if _STATE["installed"] or _STATE["why"] is not None:  # that import ran watch()'s install already
            return _STATE["why"]
        if os.environ.get(ENV, "1").strip() == "0":
            _STATE["why"] = f"{ENV}=0 turns gpuemu's bf16 interpreter patch off"
        elif version is None or not SUPPORTED[0] <= version < SUPPORTED[1]:
            low, high = SUPPORTED
            _STATE["why"] = (
                f"triton {'.'.join(map(str, version or ()))} is outside the versions gpuemu's bf16 interpreter patch "
                f"supports ({low[0]}.{low[1]} to before {high[0]}.{high[1]})"
            )
        else:
            _patch(interpreter)
            _STATE["installed"] = True
        _count(interpreter)  # after the patch: its builder methods are the ones counted
        return _STATE["why"]


def watch() -> None:
    """Patch and count the interpreter from the moment triton is imported in this process, whenever that is:
    now if it already is, else as soon as an ``import triton`` finishes (a shim that loads its kernels through
    ``importlib`` on its first call imports triton mid-case, and that case must be counted and computed right
    too). Idempotent; gpuemu's workers call it when they load an op."""
    if "triton" in sys.modules:
        install()
        return
    with _LOCK:
        if not any(isinstance(f, _AfterTritonImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterTritonImport())


class _AfterTritonImport(importlib.abc.MetaPathFinder):
    """Runs :func:`install` once the ``triton`` package has been imported (its ``__init__`` finished, so the
    interpreter and ``triton.language`` are whole), then steps out of ``sys.meta_path``."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "triton":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _InstallAfter(spec.loader)
                return spec
        return None


class _InstallAfter(importlib.abc.Loader):
    """A loader that runs triton's own and then :func:`install`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        with _LOCK:
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterTritonImport)]
        install()


def interpreting() -> bool:
    """Whether Triton kernels of this process run in the interpreter (``TRITON_INTERPRET`` set and not 0)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() not in ("", "0", "false", "no", "off")


def bf16_ready() -> str | None:
    """None when bfloat16 kernels compute right under this process's interpreter (patched and self-tested),
    else why not: then their bf16 cases are not judged."""
    why = install()
    if why is not None:
        return why
    if "self_test" not in _STATE:
        _STATE["self_test"] = self_test()
    return _STATE["self_test"]


def self_test() -> str | None:
    """Run small bf16 kernels under the (patched) interpreter and compare with the GPU's semantics computed
    here: elementwise ``x * 3.0 + y`` (one rounding per op), ``tl.sum`` (pairwise, bf16 at every step), ``tl.max``
    of negative values, ``tl.fma``, a cast to int32, ``tl.dot`` (float32 accumulator) and libdevice ``rsqrt``.
    None when every one agrees, else which ones do not."""
    if not interpreting():
        return None  # kernels are compiled for a GPU: nothing here computes them
    try:
        return _self_test()
    except Exception as exc:  # a triton whose interpreter cannot even run these: say so, never crash
        return f"the bf16 self-test could not run ({type(exc).__name__}: {str(exc)[:200]})"


def _self_test() -> str | None:
    import ml_dtypes
    import torch

    from . import triton_selftest as k

    n = k.N
    bf = ml_dtypes.bfloat16
    values = np.array([(-1) ** i * (0.3 + 0.37 * i) for i in range(n)], dtype=np.float32).astype(bf)
    other = np.array([0.11 * i - 0.9 for i in range(n)], dtype=np.float32).astype(bf)

    def t(a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)

    def back(x: Any) -> np.ndarray:
        return x.view(torch.int16).numpy().view(bf).astype(np.float64)

    def r(v: Any) -> np.ndarray:  # round float32 values to bf16 (nearest even), as float64
        return np.asarray(v, dtype=np.float32).astype(bf).astype(np.float64)

    xs, ys = values.astype(np.float32), other.astype(np.float32)
    o, f, rs = (torch.empty(n, dtype=torch.bfloat16) for _ in range(3))
    i = torch.empty(n, dtype=torch.int32)
    s, m = torch.empty(1, dtype=torch.bfloat16), torch.empty(1, dtype=torch.bfloat16)
    k.elementwise[(1,)](t(values), t(other), o, f, i, rs, s, m, n=n)
    tree = xs.astype(np.float64)
    while tree.size > 1:
        tree = r(tree[0::2] + tree[1::2])
    expected = {
        "x * 3.0 + y": (back(o), r(r(xs * np.float32(3.0)) + ys)),
        "fma": (back(f), r(xs.astype(np.float64) * ys + xs)),
        "cast to int32": (i.numpy().astype(np.float64), np.trunc(r(xs * np.float32(4.0)))),
        "libdevice rsqrt": (back(rs), r(1.0 / np.sqrt(r(np.abs(xs) + 1.0)))),
        "tl.sum": (back(s), tree[:1]),
        "tl.max": (back(m), np.array([-np.abs(xs).min()], dtype=np.float64)),
    }
    a = np.array([[((p * 7 + j * 3) % 11 - 5) * 0.25 for j in range(n)] for p in range(n)], np.float32).astype(bf)
    c = torch.empty(n, n, dtype=torch.float32)
    k.dot[(1,)](t(a), t(a.T.copy()), c, n=n)
    af = a.astype(np.float64)
    expected["tl.dot"] = (c.numpy().astype(np.float64), af @ af.T)
    wrong = [name for name, (got, want) in expected.items() if not np.allclose(got, want, rtol=1e-6, atol=1e-6)]
    return f"the bf16 self-test disagrees with the GPU's semantics on {', '.join(wrong)}" if wrong else None


def launches() -> int:
    """Kernel launches the interpreter ran in this process since it was patched (a case reads the difference)."""
    return int(_STATE["launches"])


def counts() -> tuple[int, int, int]:
    """Launches, program instances and interpreter operations (the builder's ``create_*`` calls) run in this
    process since counting began (0s before): a case reads the difference. The interpreter's time is close to
    proportional to its operations (~50 us each, whatever the block size at the sizes kernels are tested at),
    plus about a millisecond per launch: a cost that is counted, so the same on every machine."""
    return int(_STATE["launches"]), int(_STATE["programs"]), int(_STATE["ops"])


def _patch(interp: Any) -> None:
    import triton.language as tl

    builder_cls = interp.InterpreterBuilder
    handle = interp.TensorHandle
    bf16 = tl.bfloat16

    def is_bf16(h: Any) -> bool:
        return getattr(getattr(h, "dtype", None), "scalar", None) == bf16 and np.asarray(h.data).dtype == np.uint16

    def widen(h: Any) -> np.ndarray:
        return _bf16_to_f32(h.data) if is_bf16(h) else h.data

    def result(values: np.ndarray, like: Any) -> Any:
        if values.dtype == np.bool_:
            return handle(values, like.dtype.scalar)
        return handle(_f32_to_bf16(values), bf16)

    original_binary = builder_cls.binary_op

    def binary_op(self: Any, lhs: Any, rhs: Any, op: Callable[..., Any]) -> Any:
        if is_bf16(lhs) or is_bf16(rhs):
            with np.errstate(all="ignore"):
                return result(np.asarray(op(widen(lhs), widen(rhs))), lhs if is_bf16(lhs) else rhs)
        return original_binary(self, lhs, rhs, op)

    original_unary = builder_cls.unary_op

    def unary_op(self: Any, arg: Any, op: Callable[..., Any]) -> Any:
        if is_bf16(arg):
            with np.errstate(all="ignore"):
                return result(np.asarray(op(widen(arg))), arg)
        return original_unary(self, arg, op)

    original_ternary = builder_cls.ternary_op

    def ternary_op(self: Any, lhs: Any, rhs: Any, other: Any, op: Callable[..., Any]) -> Any:
        if op is not np.where and any(is_bf16(h) for h in (lhs, rhs, other)):
            with np.errstate(all="ignore"):
                return result(np.asarray(op(widen(lhs), widen(rhs), widen(other))), other)
        return original_ternary(self, lhs, rhs, other, op)

    original_fma = builder_cls.create_fma

    def create_fma(self: Any, x: Any, y: Any, z: Any) -> Any:
        if is_bf16(z):  # one rounding: the float64 product of two bf16 values is exact
            with np.errstate(all="ignore"):
                product = np.multiply(widen(x), widen(y), dtype=np.float64)
                return result(np.add(product, widen(z), dtype=np.float64), z)
        return original_fma(self, x, y, z)

    original_rsqrt = builder_cls.create_rsqrt
    original_erf = builder_cls.create_erf

    def create_rsqrt(self: Any, arg: Any) -> Any:
        if is_bf16(arg):
            with np.errstate(all="ignore"):
                return result(1.0 / np.sqrt(widen(arg).astype(np.float64)), arg)
        return original_rsqrt(self, arg)

    def create_erf(self: Any, arg: Any) -> Any:
        if is_bf16(arg):
            return result(_ERF(widen(arg).astype(np.float64)), arg)
        return original_erf(self, arg)

    original_cast = builder_cls.cast_impl

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        src_el, dst_el = src.dtype.scalar, dst_type.scalar
        if src_el == bf16 and dst_el != bf16 and np.asarray(src.data).dtype == np.uint16:
            wide = handle(_bf16_to_f32(src.data), tl.float32)
            return wide if dst_el == tl.float32 else original_cast(self, wide, dst_type)
        if dst_el == bf16 and src_el != bf16:
            with np.errstate(all="ignore"):
                return handle(_f32_to_bf16(np.asarray(src.data).astype(np.float64)), bf16)
        return original_cast(self, src, dst_type)

    original_dot = builder_cls.create_dot

    def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        if is_bf16(a) or is_bf16(b):
            with np.errstate(all="ignore"):
                acc = np.matmul(widen(a).astype(np.float32), widen(b).astype(np.float32), dtype=np.float32)
                if is_bf16(d):
                    return result(acc + widen(d), d)
                return handle((acc + d.data).astype(d.data.dtype), d.dtype.scalar)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def create_extern_elementwise(
        self: Any, lib_name: str, lib_path: str, symbol: str, args: list[Any], ret_type: Any, is_pure: bool
    ) -> Any:
        return _extern(symbol, args, ret_type, handle, interp)

    for name, fn in (
        ("binary_op", binary_op),
        ("unary_op", unary_op),
        ("ternary_op", ternary_op),
        ("create_fma", create_fma),
        ("create_rsqrt", create_rsqrt),
        ("create_erf", create_erf),
        ("cast_impl", cast_impl),
        ("create_dot", create_dot),
        ("create_extern_elementwise", create_extern_elementwise),
    ):
        setattr(builder_cls, name, fn)
    # the casts are lambdas bound to cast_impl at class creation: rebind them to the patched one
    for name in (
        "create_si_to_fp",
        "create_ui_to_fp",
        "create_fp_to_si",
        "create_fp_to_ui",
        "create_fp_ext",
        "create_fp_trunc",
    ):
        setattr(builder_cls, name, lambda self, src, dst_type: self.cast_impl(src, dst_type))
    _patch_reductions(interp, tl)
    if interpreting():  # compiled kernels resolve the stub module themselves: leave it alone on a GPU
        _patch_libdevice(interp)


def _patch_reductions(interp: Any, tl: Any) -> None:
    reduce_cls, scan_cls = interp.ReduceOps, interp.ScanOps
    bf16 = tl.bfloat16

    def is_bf16_tensor(t: Any) -> bool:
        return getattr(t, "dtype", None) == bf16 and np.asarray(t.handle.data).dtype == np.uint16

    original_sum = reduce_cls.sum

    def reduce_sum(self: Any, input: Any) -> Any:
        if not is_bf16_tensor(input):
            return original_sum(self, input)
        values = _bf16_to_f32(input.handle.data)
        axis = self.axis
        flat = values.reshape(-1) if axis is None else np.moveaxis(values, axis, -1)
        total = _pairwise_bf16(flat)
        if self.keep_dims:
            total = np.expand_dims(total, -1 if axis is not None else 0)
            total = np.moveaxis(total, -1, axis) if axis is not None else total.reshape([1] * values.ndim)
        return self.to_tensor(_f32_to_bf16(total) if np.ndim(total) else _f32_to_bf16(np.asarray(total))[()], bf16)

    original_min_max = reduce_cls.min_max

    def min_max(self: Any, input: Any, val_reduce_op: Any, idx_reduce_op: Any = None) -> Any:
        inner = input[0] if isinstance(input, tuple) else input
        if not is_bf16_tensor(inner):
            return original_min_max(self, input, val_reduce_op, idx_reduce_op)
        wide = _bf16_to_f32(inner.handle.data)
        val = idx = None
        if val_reduce_op:
            val = self.to_tensor(
                _f32_to_bf16(np.asarray(val_reduce_op(wide, axis=self.axis, keepdims=self.keep_dims))), bf16
            )
        if idx_reduce_op:
            idx = self.to_tensor(idx_reduce_op(wide, axis=self.axis, keepdims=self.keep_dims), tl.int32)
        if val is not None and idx is not None:
            return val, idx
        return val if val is not None else idx

    def scanned(step: Callable[[np.ndarray, np.ndarray], np.ndarray], original: Callable[..., Any]) -> Any:
        def scan(self: Any, input: Any) -> Any:
            if not is_bf16_tensor(input):
                return original(self, input)
            values = np.moveaxis(_bf16_to_f32(input.handle.data), self.axis, 0)
            out = np.empty_like(values)
            acc = values[0]
            out[0] = acc
            for i in range(1, values.shape[0]):  # one rounding to bf16 per step, as the GPU's scan
                acc = _bf16_to_f32(_f32_to_bf16(step(acc, values[i])))
                out[i] = acc
            return [self.to_tensor(_f32_to_bf16(np.moveaxis(out, 0, self.axis)), bf16)]

        return scan

    reduce_cls.sum = reduce_sum
    reduce_cls.min_max = min_max
    scan_cls.cumsum = scanned(np.add, scan_cls.cumsum)
    scan_cls.cumprod = scanned(np.multiply, scan_cls.cumprod)


def _pairwise_bf16(values: np.ndarray) -> np.ndarray:
    """Sum over the last axis of float32-held bf16 values by a pairwise tree, rounding to bf16 after every
    add (a GPU reduction's combine steps), as float32 holding bf16 values."""
    x = values
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = np.concatenate([x, np.zeros((*x.shape[:-1], 1), dtype=x.dtype)], axis=-1)
        with np.errstate(all="ignore"):
            x = _bf16_to_f32(_f32_to_bf16(x[..., 0::2] + x[..., 1::2]))
    return x[..., 0] if x.shape[-1] else np.zeros(x.shape[:-1], dtype=np.float32)


def _count(interp: Any) -> None:
    """Count the interpreter's kernel launches (one per grid run), the program instances of their grids and
    the operations they execute: which ops run a Triton kernel here, and what a case costs there."""
    if _STATE.get("counting"):
        return
    _STATE["counting"] = True
    executor = interp.GridExecutor
    original_call = executor.__call__

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        _STATE["launches"] += 1
        return original_call(self, *args, **kwargs)

    executor.__call__ = call
    builder_cls = interp.InterpreterBuilder
    original_grid = builder_cls.set_grid_dim

    def set_grid_dim(self: Any, x: int, y: int, z: int) -> Any:
        _STATE["programs"] += int(x) * int(y) * int(z)
        return original_grid(self, x, y, z)

    builder_cls.set_grid_dim = set_grid_dim
    for name in [n for n in vars(builder_cls) if n.startswith("create_")]:
        setattr(builder_cls, name, _counted(getattr(builder_cls, name)))


def _counted(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def op(*args: Any, **kwargs: Any) -> Any:
        _STATE["ops"] += 1
        return method(*args, **kwargs)

    return op


# --- libdevice --------------------------------------------------------------------------------------------
_ERF = np.vectorize(math.erf, otypes=[np.float64])
_ERFC = np.vectorize(math.erfc, otypes=[np.float64])
_LGAMMA = np.vectorize(math.lgamma, otypes=[np.float64])
_TGAMMA = np.vectorize(math.gamma, otypes=[np.float64])


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


#: libdevice names (``__nv_`` stripped, the float32 ``f`` suffix and rounding-mode suffixes removed) -> numpy.
_LIBDEVICE: dict[str, Callable[..., np.ndarray]] = {
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sqrt": np.sqrt,
    "cbrt": np.cbrt,
    "rcbrt": lambda x: 1.0 / np.cbrt(x),
    "rcp": lambda x: 1.0 / x,
    "exp": np.exp,
    "exp2": np.exp2,
    "exp10": lambda x: np.power(10.0, x),
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "sinpi": lambda x: np.sin(np.pi * x),
    "cospi": lambda x: np.cos(np.pi * x),
    "erf": _ERF,
    "erfc": _ERFC,
    "lgamma": _LGAMMA,
    "tgamma": _TGAMMA,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "rint": np.rint,
    "nearbyint": np.rint,
    "round": _round_half_away,
    "abs": np.abs,
    "fabs": np.abs,
    "saturate": lambda x: np.clip(x, 0.0, 1.0),
    "pow": np.power,
    "powi": np.power,
    "atan2": np.arctan2,
    "hypot": np.hypot,
    "fmod": np.fmod,
    "remainder": np.remainder,
    "fmin": np.fmin,
    "fmax": np.fmax,
    "fdim": lambda x, y: np.maximum(x - y, 0.0),
    "copysign": np.copysign,
    "nextafter": np.nextafter,
    "div": np.divide,
    "fast_divide": np.divide,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "fma": lambda x, y, z: x * y + z,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "finite": np.isfinite,
    "isfinited": np.isfinite,
    "signbit": np.signbit,
    "normcdf": lambda x: 0.5 * _ERFC(-x / math.sqrt(2.0)),
}
_ROUNDING = ("_rn", "_rz", "_rd", "_ru")


def _libdevice_name(symbol: str) -> str:
    name = symbol.removeprefix("__nv_")
    for suffix in _ROUNDING:
        name = name.removesuffix(suffix)
    if name.startswith("fast_"):
        name = name.removeprefix("fast_")
    if name not in _LIBDEVICE and name.endswith("f"):
        name = name[:-1]
    return {"dividef": "div", "divide": "div", "isinff": "isinf", "isnanf": "isnan"}.get(name, name)


def _extern(symbol: str, args: list[Any], ret_type: Any, handle: Any, interp: Any) -> Any:
    name = _libdevice_name(symbol)
    fn = _LIBDEVICE.get(name)
    if fn is None:
        raise NotImplementedError(
            f"libdevice function {symbol} has no implementation under Triton's CPU interpreter (gpuemu-ls computes "
            f"{len(_LIBDEVICE)} of them there); run this op on a GPU, or write it with triton.language math"
        )
    import triton.language as tl

    def is_bf16(a: Any) -> bool:
        return getattr(a.dtype, "scalar", a.dtype) == tl.bfloat16 and np.asarray(a.data).dtype == np.uint16

    wide = [_bf16_to_f32(a.data) if is_bf16(a) else np.asarray(a.data) for a in args]
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*(np.asarray(w, dtype=np.float64) for w in wide)))
    scalar = getattr(ret_type, "scalar", ret_type)
    if scalar == tl.bfloat16 and out.dtype != np.bool_:
        return handle(_f32_to_bf16(out), scalar)
    return handle(out.astype(interp._get_np_dtype(ret_type)), scalar)


def _patch_libdevice(interp: Any) -> None:
    """Point the libdevice stub module (and the CUDA one) at implementations the interpreter can run."""
    import importlib

    import triton.language as tl

    try:
        cuda = importlib.import_module("triton.language.extra.cuda.libdevice")
    except Exception:
        return
    modules = [cuda]
    try:
        modules.append(importlib.import_module("triton.language.extra.libdevice"))
    except Exception:
        pass
    for module in modules:
        for name in dir(cuda):
            member = getattr(cuda, name)
            if name.startswith("_") or not tl.core.is_builtin(member):
                continue
            setattr(module, name, _interpreted(member, interp))


def _interpreted(member: Any, interp: Any) -> Callable[..., Any]:
    """A libdevice builtin called the way the interpreter calls language builtins (its semantic supplied)."""

    @functools.wraps(member)
    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("_semantic", None)
        return member(*args, **kwargs, _semantic=interp.interpreter_semantic)

    return call


__all__ = ["ENV", "SUPPORTED", "bf16_ready", "install", "interpreting", "launches", "self_test", "triton_version"]
