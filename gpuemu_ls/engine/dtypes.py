"""The dtypes gpuemu-ls speaks, with the numeric facts the oracle and the generators need.

bfloat16 is ``ml_dtypes.bfloat16``: real bf16 bits, not float32 in disguise.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

FLOAT_NAMES = ("float64", "float32", "float16", "bfloat16")
INT_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
ALL_NAMES = (*FLOAT_NAMES, *INT_NAMES, "bool")

_NUMPY: dict[str, np.dtype] = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    **{name: np.dtype(name) for name in INT_NAMES},
    "bool": np.dtype(np.bool_),
}

#: Built-in tolerances: (atol, rtol) per output dtype. Project and op tolerances override them.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-10),
    "float32": (1e-5, 1e-5),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}


@dataclass(frozen=True)
class FloatInfo:
    """The facts of a float format: precision p (significand bits incl. the hidden one), exponent range."""

    name: str
    precision: int
    min_exp: int  # exponent of the smallest normal: tiny = 2**min_exp
    max_value: float
    tiny: float  # smallest positive normal
    smallest_subnormal: float

    @property
    def eps(self) -> float:
        """Spacing of 1.0: 2**(1-p)."""
        return 2.0 ** (1 - self.precision)

    @property
    def unit_roundoff(self) -> float:
        """Largest relative error of round-to-nearest: 2**-p."""
        return 2.0**-self.precision

    @property
    def overflow_threshold(self) -> float:
        """Smallest magnitude that rounds to infinity under round-to-nearest-even: max + ulp(max)/2."""
        return self.max_value + 2.0 ** (np.log2(self.max_value).__floor__() - self.precision)


def _info(name: str, dtype: np.dtype) -> FloatInfo:
    fi = ml_dtypes.finfo(dtype)
    return FloatInfo(
        name=name,
        precision=int(fi.nmant) + 1,
        min_exp=int(fi.minexp),
        max_value=float(fi.max),
        tiny=float(fi.tiny),
        smallest_subnormal=float(fi.smallest_subnormal),
    )


FLOAT_INFO: dict[str, FloatInfo] = {name: _info(name, _NUMPY[name]) for name in FLOAT_NAMES}


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype for a gpuemu dtype name; KeyError names the valid ones."""
    try:
        return _NUMPY[name]
    except KeyError:
        raise KeyError(f"unknown dtype {name!r}; valid: {', '.join(ALL_NAMES)}") from None


def dtype_name(dtype: np.dtype | type) -> str:
    """The gpuemu name of a numpy dtype (inverse of :func:`numpy_dtype`); byte order does not matter."""
    dt = np.dtype(dtype)
    if dt.byteorder not in ("=", "|"):
        dt = dt.newbyteorder("=")
    for name, candidate in _NUMPY.items():
        if candidate == dt:
            return name
    raise KeyError(f"dtype {dt} is not supported by gpuemu-ls")


def round_to(values: np.ndarray, name: str) -> np.ndarray:
    """float64 values rounded once, to nearest-even, to the float dtype ``name`` (returned in that dtype).

    numpy rounds float64 to float32 and float16 correctly; ml_dtypes' bfloat16 goes through float32
    and so rounds twice. For bfloat16 the float64 value is first rounded exactly to 8 significant bits
    (or to the subnormal quantum) with rint, which is then exact in float32 and in bfloat16.
    """
    target = numpy_dtype(name)
    x = np.asarray(values, dtype=np.float64)
    if name != "bfloat16":
        with np.errstate(over="ignore"):
            return x.astype(target)
    info = FLOAT_INFO["bfloat16"]
    with np.errstate(over="ignore", invalid="ignore"):
        m, e = np.frexp(x)
        normal = np.abs(x) >= info.tiny
        rounded = np.where(
            normal,
            np.ldexp(np.rint(np.ldexp(m, info.precision)), (e - info.precision).astype(np.int32)),
            np.rint(x / info.smallest_subnormal) * info.smallest_subnormal,
        )
        rounded = np.where(np.isfinite(x), rounded, x)
        return rounded.astype(np.float32).astype(target)


def widened(values: np.ndarray, dtype: type = np.float64, *, copy: bool | None = None, order: str = "K") -> np.ndarray:
    """``values`` as float64 (or ``dtype``) without numpy's "invalid value encountered in cast", which a NaN
    or infinity of bfloat16 raises on the way: a warning of the engine's bookkeeping, not of the user's op.
    ``copy``/``order`` as ``np.array``'s (None: a copy only where needed)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.array(values, dtype=dtype, copy=copy, order=order)  # type: ignore[call-overload]


def is_float(name: str) -> bool:
    return name in FLOAT_NAMES


def accumulation_info(name: str) -> FloatInfo:
    """The precision kernels accumulate in for inputs of this dtype: float32 for 16- and 32-bit, else float64.

    The oracle models rounding in intermediate sums with this precision, since real kernels reduce
    fp16/bf16 data in fp32 registers.
    """
    return FLOAT_INFO["float64" if name == "float64" else "float32"]


def ulp(values: np.ndarray, info: FloatInfo) -> np.ndarray:
    """Spacing of the float format at each |value| (float64 array), exact: built from frexp, no log.

    Values beyond the format's range get the spacing at its max; subnormal ones the subnormal step.
    """
    mag = np.abs(values)
    mag = np.where(np.isfinite(mag), np.minimum(mag, info.max_value), info.max_value)
    _, exp = np.frexp(mag)  # mag = m * 2**exp, m in [0.5, 1)
    spacing = np.ldexp(1.0, (exp - info.precision).astype(np.int32))
    return np.where(mag < info.tiny, info.smallest_subnormal, spacing)
