"""Input tensors for a case: values from a distribution, in a value domain, laid out as the case says.

Values are drawn in float64 from :mod:`rng` streams keyed by (op, seed, input) and rounded once to
the input's dtype (IEEE round-to-nearest-even), so they are bit-exact everywhere.

**Distributions** (``x`` below is a standard normal draw, ``u`` a uniform one in (0, 1), "by octave"
means ``(1 + u) * 2**e`` with an integer ``e`` uniform over a range, the log-uniform of exact
operations; a *row* is a slice along the last axis):

* ``normal``: ``x``; ``uniform``: ``2u - 1``; ``small``: ``x * 1e-3``; ``wide``: ``x * 10``;
* ``integers``: integers uniform in [-8, 8] (exact in every dtype);
* ``positive``: ``|x|``; each row with probability 1/3 instead holds values by octave in [1, 2**k),
  ``k = min(12, top)``: same-sign sums that grow, which half-precision accumulators do not survive;
* ``mixed_magnitude``: random sign, magnitude by octave in [2**-20, 2**20), clipped to the dtype's max;
* ``large``: magnitudes by octave in [2**3, 2**top) with
  ``top = min(emax_in - 2, (emax_acc - ceil(log2 n)) // 2 - 1)`` (at least 4), where ``emax`` is the
  exponent of a format's max (``max < 2**emax``: 128 for float32 and bfloat16, 16 for float16, 1024
  for float64), ``acc`` the accumulation dtype (float32 for 16- and 32-bit inputs, else float64) and
  ``n`` the largest dim of the case. Sums of squares and dot products over any dim of the case then
  stay below ``2**(emax_acc - 2)``: a float32 accumulator never overflows on float32/bfloat16 data,
  while float16 gets magnitudes up to 2**14, whose squares overflow a float16 accumulator. Each row
  is one sign with probability 1/2 (else signs are random per element);
* ``boundary``: ``x``, half the elements replaced by one of 0, -0, +-1, +-tiny, +-smallest subnormal,
  +-near max (``max * (1 - eps)``); each of these at least once when the input has that many
  elements, at positions from the stream;
* ``subnormal``: ``k * smallest_subnormal``, ``k`` uniform in [1, 2**(p-1)), random sign, 1/8 zeros;
* ``ties``: exact midpoints between neighbours of the case's output dtype (``output_dtype``, else the
  case dtype): ``k + 0.5`` (``k`` in [-8, 8), [0, 16) for unsigned) for integer outputs and for float
  outputs at least as precise as the input; for narrower float outputs ``a + ulp_out(a) / 2`` with
  ``a`` a random output-format value (exponent uniform over the normal range both formats share,
  1/8 in the output's subnormal range where the input holds those midpoints), random sign. Every
  midpoint is exact in the input dtype, so the rounding to it leaves them unchanged;
* ``constant_rows``: each row one value ``x``;
* ``masked_rows``: ``x``; each row entirely -inf with probability 1/4, at least one;
* ``partial_inf``: ``x``; each element -inf with probability 1/4 but one per row; with two rows or
  more, one row is -inf but for a single finite value;
* ``underflow_rows``: ``x``; each row with probability 1/2 (at least one) is ``c + 4 * min(x, 3.5)``
  with ``c = -120`` (float32 accumulation: below exp's underflow at -104) or ``-770`` (float64:
  below -746), so a tile padded with 0 wins such a row's max;
* ``tail_max``: ``x``; each row's last element is ``max(rest of the row) + 1 + |x|``;
* ``peaked``: ``x``; in each row one element, at a random position, is ``max(row) + 12 + 8u``: confident
  logits, whose softmax is within ~1e-5 of one-hot (``softmax - onehot`` gradients cancel there);
* ``special``: ``x`` with 2% NaN, 1.5% +inf, 1.5% -inf, each at least once;
* ``nan_payloads``: ``x``, then NaNs of specific bit patterns written into the rounded array through
  an unsigned view (numpy's conversions may quiet a signalling NaN): the canonical NaN of CUDA
  (float32 ``0x7FFFFFFF``, float16 and bfloat16 ``0x7FFF``), quiet NaNs with a payload in the low
  bits only (``0x7FC00001``/``0xFFC00001``; ``0x7E01``/``0xFE01``; ``0x7FC1``/``0xFFC1``) and
  signalling ones (``0x7F800001``/``0xFF800001``; ``0x7C01``/``0xFC01``; ``0x7F81``/``0xFF81``);
  2% of the elements, each pattern at least once when the input has that many elements.

**Value domains** (``scale``, ``offset``, ``sign``, float ``range`` of the input, else of the op,
else of ``[validation]``, field by field) apply to every distribution, in this order: the value,
``* scale``, ``+ offset``, ``sign`` folds to ``|v|`` or ``-|v|``, ``range = [lo, hi]`` clips finite
and infinite values into it (NaN stays NaN); finite values beyond the dtype's max then become
``+-max`` (a finite draw never turns into inf), and the result is rounded once. Two distributions
are defined relative to the domain: with a range, ``boundary`` also places ``lo``, ``hi`` and 0
(when inside) as they are, and ``large`` draws in the range itself: on each side the range allows
(the sign rule above picks it), the value is ``B - (B - L) * u * 2**-e``, ``e`` uniform in 0..7,
approaching the side's bound ``B = min(|bound|, 2**top)`` from ``L = max(B / 256, |nearer bound|)``
(the distance to the bound is log-spread). Nothing else of the domain changes what is drawn.

Layouts are real memory layouts, as a kernel receiving a pointer would see them:

* ``contiguous``: a C-contiguous array;
* ``transposed``: the transpose of a C-contiguous buffer of the swapped shape (a view, last two axes);
* ``strided``: every other element of a buffer twice as wide; the gaps hold poison (NaN, or the
  dtype's max for integers), so a kernel that ignores strides reads garbage, loudly.

What the store keeps is the logical (C-contiguous) array of each input plus the layout name: the
view is rebuilt from them on replay, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..config.model import InputSpec, OpConfig
from .plan import CaseSpec
from .rng import Stream


@dataclass
class CaseInputs:
    """The logical arrays of a case and the views handed to the op."""

    logical: dict[str, np.ndarray]
    views: dict[str, np.ndarray]
    layout: str


@dataclass(frozen=True)
class Domain:
    """Where a float input's values live: ``v * scale + offset``, folded to ``sign``, clipped to ``range``."""

    scale: float = 1.0
    offset: float = 0.0
    sign: str = "any"
    range: tuple[float, float] | None = None

    def apply(self, v: np.ndarray, info: dt.FloatInfo, final: np.ndarray | None = None) -> np.ndarray:
        """The domain applied to float64 values (``final``: positions already in the domain, only folded and
        clipped); finite values beyond the dtype's max become +-max."""
        if self == Domain():
            return v  # every distribution stays inside the dtype's range by itself
        out = v
        with np.errstate(over="ignore", invalid="ignore"):
            if self.scale != 1.0:
                out = out * self.scale
            if self.offset != 0.0:
                out = out + self.offset  # only when set: -0.0 + 0.0 would lose the sign of zero
        if final is not None and out is not v:
            out = np.where(final, v, out)
        if self.sign == "positive":
            out = np.abs(out)
        elif self.sign == "negative":
            out = -np.abs(out)
        if self.range is not None:
            out = np.clip(out, self.range[0], self.range[1])  # NaN stays NaN
        out = np.array(out, dtype=np.float64)  # a fresh array: callers' draws stay untouched
        beyond = np.isfinite(v) & ~(np.abs(out) <= info.max_value) & ~np.isnan(out)
        out[beyond] = np.copysign(info.max_value, out[beyond])
        return out


def value_domain(op: OpConfig, inp: InputSpec, dims: dict[str, int]) -> Domain:
    """The domain of a float input: its own fields, else the op's (which hold [validation]'s when unset)."""
    scale = inp.scale if inp.scale is not None else op.scale
    offset = inp.offset if inp.offset is not None else op.offset
    sign = inp.sign if inp.sign is not None else op.sign
    bounds = inp.range if inp.range is not None else op.range
    rng = None
    if bounds is not None:
        lo, hi = (float(dims[b]) if isinstance(b, str) else float(b) for b in bounds)
        rng = (lo, hi)
    return Domain(1.0 if scale is None else float(scale), 0.0 if offset is None else float(offset), sign or "any", rng)


@dataclass(frozen=True)
class Draw:
    """What a distribution needs to know besides its stream."""

    name: str  # the input's float dtype
    out: str  # the case's output dtype (ties)
    shape: tuple[int, ...]
    largest_dim: int  # n of ``large``'s top
    domain: Domain

    @property
    def info(self) -> dt.FloatInfo:
        return dt.FLOAT_INFO[self.name]

    @property
    def n(self) -> int:
        return _numel(self.shape)

    @property
    def rows(self) -> int:
        return _rows(self.shape)[0]

    @property
    def width(self) -> int:
        return _rows(self.shape)[1]

    @property
    def top(self) -> int:
        """``large``'s exponent bound (see the module docstring)."""
        acc = dt.accumulation_info(self.name)
        log2n = max(self.largest_dim - 1, 0).bit_length()  # ceil(log2 n)
        return max(4, min(_emax(self.info) - 2, (_emax(acc) - log2n) // 2 - 1))


def input_dtype(inp: InputSpec, case_dtype: str) -> str:
    return inp.dtype or case_dtype


def generate_inputs(op: OpConfig, spec: CaseSpec) -> CaseInputs:
    """The inputs (op, seed) names: deterministic, in the case's dtype and layout."""
    logical: dict[str, np.ndarray] = {}
    largest = max([1, *spec.dims.values(), *(d for shape in spec.shapes.values() for d in shape)])
    out = op.output_dtype or spec.dtype
    for inp in op.inputs:
        shape = spec.shapes[inp.name]
        name = input_dtype(inp, spec.dtype)
        dist = spec.input_distributions.get(inp.name, spec.distribution)
        s = Stream("values", op.name, spec.seed, inp.name)
        if not dt.is_float(name):
            lo, hi = _range(inp, spec, name)
            logical[inp.name] = integer_values(s, shape, name, lo, hi)
            if inp.sentinels:
                logical[inp.name] = with_sentinels(logical[inp.name], inp.sentinels, op.name, spec.seed, inp.name)
        elif dist == "range":  # a float input with a range, as cases stored before ranges bounded floats
            lo, hi = _range(inp, spec, name)
            logical[inp.name] = _cast(lo + (hi - lo) * s.uniform(_numel(shape)).reshape(shape), name)
        else:
            draw = Draw(name, out, shape, largest, value_domain(op, inp, spec.dims))
            logical[inp.name] = float_input(s, dist, draw)
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


def with_sentinels(
    values: np.ndarray, sentinels: tuple[tuple[int, float], ...], op: str, seed: int, name: str
) -> np.ndarray:
    """Integer values with each sentinel (an ignore_index) put in about its share of the elements, from a
    stream of its own (the other values stay what the seed draws). A case of two or more elements holds each
    sentinel at least once; a row of sentinels only (every target ignored) happens as chance has it."""
    out = values.copy()
    flat = out.reshape(-1)
    s = Stream("sentinels", op, seed, name)
    u = s.uniform(flat.size)
    start = 0.0
    for value, share in sentinels:  # disjoint slices of one uniform draw: the shares never overlap
        hit = (u >= start) & (u < start + share)
        if flat.size >= 2 and not hit.any():
            hit[s.integer(0, flat.size)] = True
        flat[hit] = value
        start += share
    return out


def float_input(s: Stream, dist: str, draw: Draw) -> np.ndarray:
    """A float input: the distribution's float64 values, in the domain, rounded once to the dtype."""
    values, final = float_values(s, dist, draw)
    flat = _cast(draw.domain.apply(values, draw.info, final), draw.name)
    if dist == "nan_payloads":
        _write_nan_payloads(s, flat, draw.name)
    return flat.reshape(draw.shape)


def float_values(s: Stream, dist: str, draw: Draw) -> tuple[np.ndarray, np.ndarray | None]:
    """Flat float64 values of a distribution before the domain, and the positions (a mask, or None)
    that already lie in the domain (``boundary``'s range ends, ``large`` within a range)."""
    try:
        fn = _DISTRIBUTIONS[dist]
    except KeyError:
        raise ValueError(f"unknown distribution {dist!r}") from None
    out = fn(s, draw)
    return out if isinstance(out, tuple) else (out, None)


Values = np.ndarray | tuple[np.ndarray, np.ndarray | None]


def _normal(s: Stream, d: Draw) -> Values:
    return s.normal(d.n)


def _uniform(s: Stream, d: Draw) -> Values:
    return 2.0 * s.uniform(d.n) - 1.0


def _small(s: Stream, d: Draw) -> Values:
    return s.normal(d.n) * 1e-3


def _wide(s: Stream, d: Draw) -> Values:
    return s.normal(d.n) * 10.0


def _integers(s: Stream, d: Draw) -> Values:
    return s.integers(-8, 9, d.n).astype(np.float64)


def _octaves(s: Stream, n: int, lo: int, hi: int) -> np.ndarray:
    """n magnitudes ``(1 + u) * 2**e``, ``e`` uniform in [lo, hi): log-uniform by octave in [2**lo, 2**hi)."""
    exps = s.integers(lo, hi, n).astype(np.int32)
    return np.ldexp(1.0 + s.uniform(n), exps)


def _signs(s: Stream, n: int) -> np.ndarray:
    return np.where(s.uniform(n) < 0.5, -1.0, 1.0)


def _row_signs(s: Stream, d: Draw) -> np.ndarray:
    """Signs where each row is one sign with probability 1/2 (random per element otherwise)."""
    rows, width = d.rows, d.width
    same = s.uniform(rows) < 0.5
    row_sign = _signs(s, rows)
    each = _signs(s, d.n).reshape(rows, width)
    return np.where(same[:, None], row_sign[:, None], each).reshape(-1)


def _positive(s: Stream, d: Draw) -> Values:
    base = np.abs(s.normal(d.n)).reshape(d.rows, d.width)
    heavy = s.uniform(d.rows) < 1.0 / 3.0
    big = _octaves(s, d.n, 0, min(12, d.top)).reshape(d.rows, d.width)
    base[heavy] = big[heavy]
    return base.reshape(-1)


def _mixed_magnitude(s: Stream, d: Draw) -> Values:
    mag = np.minimum(_octaves(s, d.n, -20, 20), d.info.max_value)
    return _signs(s, d.n) * mag


def _large(s: Stream, d: Draw) -> Values:
    top = d.top
    sign = _row_signs(s, d)
    if d.domain.range is None:
        return sign * _octaves(s, d.n, 3, top)
    # within a range: approach the bound of the side the sign picks (the other side if it has none)
    lo, hi = d.domain.range
    cap = float(2**top)
    # per side: the magnitude of its bound (at most 2**top) and of the nearer end of the range
    pos_bound, pos_near = min(hi, cap), max(lo, 0.0)
    neg_bound, neg_near = min(-lo, cap), max(-hi, 0.0)
    up = sign > 0 if lo < 0 < hi else np.full(d.n, hi > 0)
    bound = np.where(up, pos_bound, neg_bound)
    low = np.maximum(bound / 256.0, np.where(up, pos_near, neg_near))
    shrink = np.ldexp(s.uniform(d.n), -s.integers(0, 8, d.n).astype(np.int32))  # u * 2**-e
    mag = bound - np.maximum(bound - low, 0.0) * shrink
    return np.where(up, mag, -mag), np.ones(d.n, dtype=bool)


def _boundary(s: Stream, d: Draw) -> Values:
    info, n = d.info, d.n
    near_max = info.max_value * (1 - info.eps)
    specials = [0.0, -0.0, 1.0, -1.0, info.tiny, -info.tiny, info.smallest_subnormal, -info.smallest_subnormal]
    specials += [near_max, -near_max]
    base = s.normal(n)
    pick = s.integers(0, 2 * len(specials), n)
    use = pick < len(specials)
    base[use] = np.array(specials)[pick[use]]
    ends: list[float] = []
    if d.domain.range is not None:  # the domain's own boundary: its ends, and 0 inside it
        lo, hi = d.domain.range
        ends = [lo, hi] + ([0.0] if lo <= 0.0 <= hi else [])
    every = specials + ends
    order = s.permutation(len(every))
    final = np.zeros(n, dtype=bool)
    for slot, p in zip(order, _positions(s, n, len(every)), strict=False):
        base[p] = every[slot]
        final[p] = slot >= len(specials)
    return base, final if ends else None


def _subnormal(s: Stream, d: Draw) -> Values:
    info, n = d.info, d.n
    k = s.integers(1, 1 << (info.precision - 1), n).astype(np.float64)
    zero = s.uniform(n) < 0.125
    return np.where(zero, 0.0, k * info.smallest_subnormal) * _signs(s, n)


def _ties(s: Stream, d: Draw) -> Values:
    n = d.n
    if not dt.is_float(d.out) or dt.FLOAT_INFO[d.out].precision >= d.info.precision:
        unsigned = not dt.is_float(d.out) and (d.out == "bool" or dt.numpy_dtype(d.out).kind == "u")
        k = s.integers(0, 16, n) if unsigned else s.integers(-8, 8, n)
        return k + 0.5
    o, i = dt.FLOAT_INFO[d.out], d.info
    p = o.precision
    lo_e = max(o.min_exp, i.min_exp)
    hi_e = min(_emax(o), _emax(i)) - 1
    j = s.integers(0, 1 << (p - 1), n)  # a = (1 + j 2**(1-p)) 2**e, a + ulp(a)/2 = (2**p + 2j + 1) 2**(e-p)
    e = s.integers(lo_e, hi_e + 1, n)
    mid = np.ldexp(((1 << p) + 2 * j + 1).astype(np.float64), (e - p).astype(np.int32))
    sub_exp = int(np.frexp(o.smallest_subnormal)[1]) - 2  # sub_out / 2 = 2**sub_exp
    sub = s.uniform(n) < 0.125
    if o.smallest_subnormal / 2 >= i.smallest_subnormal:  # the input holds midpoints of output subnormals
        mid = np.where(sub, np.ldexp((2 * j + 1).astype(np.float64), sub_exp), mid)
    return mid * _signs(s, n)


def _constant_rows(s: Stream, d: Draw) -> Values:
    return np.repeat(s.normal(d.rows), d.width)


def _rows_of_normals(s: Stream, d: Draw) -> np.ndarray:
    return s.normal(d.n).reshape(d.rows, d.width) if d.rows else np.zeros((0, d.width))


def _masked_rows(s: Stream, d: Draw) -> Values:
    base = _rows_of_normals(s, d)
    if d.rows:
        masked = s.uniform(d.rows) < 0.25
        masked[s.integer(0, d.rows)] = True  # at least one fully masked row
        base[masked, :] = -np.inf
    return base.reshape(-1)


def _partial_inf(s: Stream, d: Draw) -> Values:
    base = _rows_of_normals(s, d)
    rows, width = d.rows, d.width
    if rows and width:
        hole = s.uniform(rows * width).reshape(rows, width) < 0.25
        keep = s.integers(0, width, rows)
        if rows >= 2:
            hole[s.integer(0, rows), :] = True  # a row whose only finite value is its kept one
        hole[np.arange(rows), keep] = False  # every row keeps a finite element
        base[hole] = -np.inf
    return base.reshape(-1)


def _underflow_rows(s: Stream, d: Draw) -> Values:
    base = _rows_of_normals(s, d)
    if d.rows:
        under = s.uniform(d.rows) < 0.5
        under[s.integer(0, d.rows)] = True  # at least one
        c = -770.0 if dt.accumulation_info(d.name).name == "float64" else -120.0
        low = (c + 4.0 * np.minimum(s.normal(d.n), 3.5)).reshape(d.rows, d.width)
        base[under] = low[under]
    return base.reshape(-1)


def _tail_max(s: Stream, d: Draw) -> Values:
    base = _rows_of_normals(s, d)
    if d.rows and d.width >= 2:
        base[:, -1] = base[:, :-1].max(axis=1) + 1.0 + np.abs(s.normal(d.rows))
    return base.reshape(-1)


def _peaked(s: Stream, d: Draw) -> Values:
    """Confident logits: N(0, 1) rows, each with one value 12..20 above the rest at a random position, so a
    softmax over the row is within ~1e-5 of one-hot (where ``softmax - onehot`` gradients cancel)."""
    base = _rows_of_normals(s, d)
    if d.rows and d.width:
        at = s.integers(0, d.width, d.rows)
        base[np.arange(d.rows), at] = base.max(axis=1) + 12.0 + 8.0 * s.uniform(d.rows)
    return base.reshape(-1)


def _special(s: Stream, d: Draw) -> Values:
    base = _rows_of_normals(s, d)
    rows, width = d.rows, d.width
    if rows and width:
        pick = s.uniform(rows * width).reshape(rows, width)
        base[pick < 0.02] = np.nan
        base[(pick >= 0.02) & (pick < 0.035)] = np.inf
        base[(pick >= 0.035) & (pick < 0.05)] = -np.inf
        flat = base.reshape(-1)
        start, step = s.integer(0, flat.size), max(1, flat.size // 3)
        for i, value in enumerate((np.nan, np.inf, -np.inf)[: flat.size]):  # each special value at least once
            flat[(start + i * step) % flat.size] = value
    return base.reshape(-1)


def _nan_payloads(s: Stream, d: Draw) -> Values:
    return s.normal(d.n)  # the NaNs are written after the rounding (_write_nan_payloads)


#: NaN bit patterns per dtype: CUDA's canonical NaN, quiet NaNs with a low payload (both signs),
#: signalling NaNs with a low payload (both signs).
NAN_PATTERNS: dict[str, tuple[int, ...]] = {
    "float64": (
        0x7FFFFFFFFFFFFFFF,
        0x7FF8000000000001,
        0xFFF8000000000001,
        0x7FF0000000000001,
        0xFFF0000000000001,
    ),
    "float32": (0x7FFFFFFF, 0x7FC00001, 0xFFC00001, 0x7F800001, 0xFF800001),
    "float16": (0x7FFF, 0x7E01, 0xFE01, 0x7C01, 0xFC01),
    "bfloat16": (0x7FFF, 0x7FC1, 0xFFC1, 0x7F81, 0xFF81),
}


def _write_nan_payloads(s: Stream, flat: np.ndarray, name: str) -> None:
    """2% of ``flat`` (the rounded input) and, room permitting, one element per pattern become NaNs of
    ``NAN_PATTERNS[name]``, written as bits (a float conversion could quiet a signalling NaN)."""
    n = flat.size
    bits = flat.reshape(-1).view(np.dtype(f"uint{8 * flat.itemsize}"))
    patterns = np.array(NAN_PATTERNS[name], dtype=bits.dtype)
    sprinkle = s.uniform(n) < 0.02
    which = s.integers(0, len(patterns), n)
    bits[sprinkle] = patterns[which[sprinkle]]
    order = s.permutation(len(patterns))
    for slot, p in zip(order, _positions(s, n, len(patterns)), strict=False):
        bits[p] = patterns[slot]


def _positions(s: Stream, n: int, k: int) -> list[int]:
    """min(n, k) distinct positions in range(n) from the stream (k draws, collisions moved to the next free)."""
    if n == 0:
        return []
    taken: list[int] = []
    seen: set[int] = set()
    for p in s.integers(0, n, k).tolist():
        if len(taken) == n:
            break
        while p in seen:
            p = (p + 1) % n
        seen.add(p)
        taken.append(p)
    return taken


_DISTRIBUTIONS: dict[str, Callable[[Stream, Draw], Values]] = {
    "normal": _normal,
    "uniform": _uniform,
    "small": _small,
    "wide": _wide,
    "integers": _integers,
    "positive": _positive,
    "mixed_magnitude": _mixed_magnitude,
    "large": _large,
    "boundary": _boundary,
    "subnormal": _subnormal,
    "ties": _ties,
    "constant_rows": _constant_rows,
    "masked_rows": _masked_rows,
    "partial_inf": _partial_inf,
    "underflow_rows": _underflow_rows,
    "tail_max": _tail_max,
    "special": _special,
    "nan_payloads": _nan_payloads,
    "peaked": _peaked,
}


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
