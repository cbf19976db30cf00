"""Input tensors for a case: values from a distribution, laid out as the case says.

Values are drawn in float64 from :mod:`rng` streams keyed by (op, seed, input) and rounded once to
the input's dtype (IEEE round-to-nearest-even), so they are bit-exact everywhere. Layouts are real
memory layouts, as a kernel receiving a pointer would see them:

* ``contiguous``: a C-contiguous array;
* ``transposed``: the transpose of a C-contiguous buffer of the swapped shape (a view, last two axes);
* ``strided``: every other element of a buffer twice as wide; the gaps hold poison (NaN, or the
  dtype's max for integers), so a kernel that ignores strides reads garbage, loudly.

What the store keeps is the logical (C-contiguous) array of each input plus the layout name: the
view is rebuilt from them on replay, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..config.load import InputSpec, OpConfig
from .plan import CaseSpec
from .rng import Stream


@dataclass
class CaseInputs:
    """The logical arrays of a case and the views handed to the op."""

    logical: dict[str, np.ndarray]
    views: dict[str, np.ndarray]
    layout: str


def input_dtype(inp: InputSpec, case_dtype: str) -> str:
    return inp.dtype or case_dtype


def generate_inputs(op: OpConfig, spec: CaseSpec) -> CaseInputs:
    """The inputs (op, seed) names: deterministic, in the case's dtype and layout."""
    logical: dict[str, np.ndarray] = {}
    for inp in op.inputs:
        shape = spec.shapes[inp.name]
        name = input_dtype(inp, spec.dtype)
        dist = spec.input_distributions.get(inp.name, spec.distribution)
        s = Stream("values", op.name, spec.seed, inp.name)
        if dist == "range" or not dt.is_float(name):
            lo, hi = _range(inp, spec, name)
            logical[inp.name] = (
                integer_values(s, shape, name, lo, hi)
                if not dt.is_float(name)
                else _cast(lo + (hi - lo) * s.uniform(_numel(shape)).reshape(shape), name)
            )
        else:
            logical[inp.name] = _cast(float_values(s, shape, dist, name), name)
    return with_layout(logical, spec.layout)


def with_layout(logical: dict[str, np.ndarray], layout: str) -> CaseInputs:
    """Views of the logical arrays in ``layout`` (also used to rebuild a stored snapshot)."""
    views = {name: make_layout(arr, layout) for name, arr in logical.items()}
    return CaseInputs(logical, views, layout)


def _range(inp: InputSpec, spec: CaseSpec, dtype_name: str) -> tuple[float, float]:
    if inp.range is not None:
        lo, hi = (spec.dims[b] if isinstance(b, str) else b for b in inp.range)
        return float(lo), float(hi)
    if dtype_name == "bool":
        return 0.0, 2.0
    if dt.is_float(dtype_name):
        return -1.0, 1.0
    info = np.iinfo(dt.numpy_dtype(dtype_name))
    return float(max(info.min, -128)), float(min(info.max, 127) + 1)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _cast(values: np.ndarray, name: str) -> np.ndarray:
    """Round once to the input dtype; keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d)."""
    out = dt.round_to(values, name) if dt.is_float(name) else np.asarray(values).astype(dt.numpy_dtype(name))
    return np.asarray(out, order="C")  # astype made a fresh C-ordered array already


def integer_values(s: Stream, shape: tuple[int, ...], name: str, lo: float, hi: float) -> np.ndarray:
    lo_i, hi_i = int(np.ceil(lo)), int(np.ceil(hi))
    if hi_i <= lo_i:
        hi_i = lo_i + 1
    vals = s.integers(lo_i, hi_i, _numel(shape)).reshape(shape)
    return vals.astype(dt.numpy_dtype(name))


def float_values(s: Stream, shape: tuple[int, ...], dist: str, name: str) -> np.ndarray:
    """float64 values of a distribution, scaled for the float format ``name`` where it matters."""
    n = _numel(shape)
    info = dt.FLOAT_INFO[name]
    if dist == "normal":
        return s.normal(n).reshape(shape)
    if dist == "uniform":
        return (2.0 * s.uniform(n) - 1.0).reshape(shape)
    if dist == "boundary":
        specials = np.array(
            [
                0.0,
                -0.0,
                1.0,
                -1.0,
                info.tiny,
                -info.tiny,
                info.smallest_subnormal,
                -info.smallest_subnormal,
                info.max_value * (1 - info.eps),
                -info.max_value * (1 - info.eps),
            ]
        )
        base = s.normal(n)
        pick = s.integers(0, 2 * len(specials), n)
        use = pick < len(specials)
        base[use] = specials[pick[use]]
        return base.reshape(shape)
    if dist == "large":
        top = max(4, _emax(info) // 2 - 2)
        exps = s.integers(3, top + 1, n)
        sign = np.where(s.uniform(n) < 0.5, -1.0, 1.0)
        return (sign * np.ldexp(1.0 + s.uniform(n), exps.astype(np.int32))).reshape(shape)
    rows, width = _rows(shape)
    if dist == "constant_rows":
        per_row = s.normal(rows)
        return np.repeat(per_row, width).reshape(shape)
    base = s.normal(n).reshape(rows, width) if rows else np.zeros((0, width))
    if dist == "masked_rows" and rows:
        masked = s.uniform(rows) < 0.25
        masked[s.integer(0, rows)] = True  # at least one fully masked row
        base[masked, :] = -np.inf
    elif dist == "partial_inf" and rows and width:
        hole = s.uniform(rows * width).reshape(rows, width) < 0.25
        keep = s.integers(0, width, rows)
        hole[np.arange(rows), keep] = False  # every row keeps a finite element
        base[hole] = -np.inf
    elif dist == "special" and rows and width:
        pick = s.uniform(rows * width).reshape(rows, width)
        base[pick < 0.02] = np.nan
        base[(pick >= 0.02) & (pick < 0.035)] = np.inf
        base[(pick >= 0.035) & (pick < 0.05)] = -np.inf
        flat = base.reshape(-1)
        start, step = s.integer(0, flat.size), max(1, flat.size // 3)
        for i, value in enumerate((np.nan, np.inf, -np.inf)[: flat.size]):  # each special value at least once
            flat[(start + i * step) % flat.size] = value
    elif dist not in ("masked_rows", "partial_inf", "special"):
        raise ValueError(f"unknown distribution {dist!r}")
    return base.reshape(shape)


def _emax(info: dt.FloatInfo) -> int:
    return int(np.frexp(info.max_value)[1])


def _rows(shape: tuple[int, ...]) -> tuple[int, int]:
    if not shape:
        return 1, 1  # a scalar is one row of one
    width = shape[-1]
    return _numel(shape[:-1]), width


def poison(dtype: np.dtype) -> object:
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return np.nan
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


def make_layout(arr: np.ndarray, layout: str) -> np.ndarray:
    """A view of ``arr`` (C-contiguous, logical) with the given memory layout.

    Contiguous is ``arr`` itself: the case keeps a pristine copy to detect writes (and snapshots that
    copy), and a case whose op writes into its inputs fails before the reference would read them.
    """
    if layout == "contiguous" or arr.ndim == 0:
        return arr
    if layout == "transposed":
        if arr.ndim < 2:
            return arr.copy()
        buf = np.ascontiguousarray(np.swapaxes(arr, -1, -2))
        return np.swapaxes(buf, -1, -2)
    if layout == "strided":
        shape = arr.shape
        buf = np.empty((*shape[:-1], shape[-1] * 2), dtype=arr.dtype)
        buf[...] = poison(arr.dtype)
        view = buf[..., ::2]
        view[...] = arr
        return view
    raise ValueError(f"unknown layout {layout!r}")
