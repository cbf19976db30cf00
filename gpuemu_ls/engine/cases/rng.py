"""Deterministic random streams: the same bits on every machine and every numpy version.

Why not ``numpy.random``: numpy guarantees its bit generators' raw streams but not the output of
``Generator.normal`` and friends across versions, and libm's ``log``/``cos`` differ by an ulp between
platforms. Every failure must replay from (op, seed) anywhere, so this module uses only:

* SHA-256 to turn a key such as ``(seed, op, "dims")`` into a 128-bit stream key;
* Philox4x64-10 (Salmon et al., SC 2011), a counter-based generator, keyed with it, for raw
  64-bit words: numpy's C implementation (``numpy.random.Philox(key=...).random_raw``), whose raw
  stream numpy keeps stable across versions (NEP 19; only its distribution methods may change);
* correctly rounded IEEE-754 operations (+, -, *, /, sqrt, frexp/ldexp) to make floats from them.

Uniforms are ``((w >> 12) + 0.5) * 2**-52``, strictly inside (0, 1) and exact. Normals invert the normal CDF:
a table of 2**14 quantiles computed with Wichura's AS241 (the algorithm of
``statistics.NormalDist.inv_cdf``; its tails need a logarithm, which :func:`det_log` computes from
``frexp`` and a fixed odd series) is interpolated linearly, and the outermost cells (u below
2**-14 or above 1 - 2**-14) use AS241 directly. Table index and fraction are exact (the table size
is a power of two), so this is bit-exact too, and about four times faster than AS241 everywhere.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def stream_key(*parts: object) -> int:
    """A 128-bit key from any printable parts (joined unambiguously, hashed with SHA-256)."""
    text = "\x1f".join(f"{type(p).__name__}:{p}" for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:16], "little")


_LN2_HI = 6.93147180369123816490e-01  # ln 2 split so that e * _LN2_HI is exact for |e| < 2**20
_LN2_LO = 1.90821492927058770002e-10
_SQRT_HALF = 0.70710678118654752440


def det_log(x: np.ndarray) -> np.ndarray:
    """Natural log of positive finite float64 values with only exact-rounding operations.

    x = m * 2**e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172,
    summed to s**23 (relative error below 2**-53 over the interval).
    """
    m, e = np.frexp(np.asarray(x, dtype=np.float64))
    low = m < _SQRT_HALF
    m = np.where(low, m * 2.0, m)
    e = (e - low.astype(e.dtype)).astype(np.float64)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    poly = 1.0 / 23.0
    for k in range(21, 0, -2):
        poly = poly * s2 + 1.0 / k
    return (e * _LN2_HI) + ((2.0 * s * poly) + e * _LN2_LO)


# Wichura, Algorithm AS241 (PPND16), Applied Statistics 37 (1988): the inverse normal CDF.
_A = (
    3.3871328727963666080e0,
    1.3314166789178437745e2,
    1.9715909503065514427e3,
    1.3731693765509461125e4,
    4.5921953931549871457e4,
    6.7265770927008700853e4,
    3.3430575583588128105e4,
    2.5090809287301226727e3,
)
_B = (
    1.0,
    4.2313330701600911252e1,
    6.8718700749205790830e2,
    5.3941960214247511077e3,
    2.1213794301586595867e4,
    3.9307895800092710610e4,
    2.8729085735721942674e4,
    5.2264952788528545610e3,
)
_C = (
    1.42343711074968357734e0,
    4.63033784615654529590e0,
    5.76949722146069140550e0,
    3.64784832476320460504e0,
    1.27045825245236838258e0,
    2.41780725177450611770e-1,
    2.27238449892691845833e-2,
    7.74545014278341407640e-4,
)
_D = (
    1.0,
    2.05319162663775882187e0,
    1.67638483018380384940e0,
    6.89767334985100004550e-1,
    1.48103976427480074590e-1,
    1.51986665636164571966e-2,
    5.47593808499534494600e-4,
    1.05075007164441684324e-9,
)
_E = (
    6.65790464350110377720e0,
    5.46378491116411436990e0,
    1.78482653991729133580e0,
    2.96560571828504891230e-1,
    2.65321895265761230930e-2,
    1.24266094738807843860e-3,
    2.71155556874348757815e-5,
    2.01033439929228813265e-7,
)
_F = (
    1.0,
    5.99832206555887937690e-1,
    1.36929880922735805310e-1,
    1.48753612908506148525e-2,
    7.86869131145613259100e-4,
    1.84631831751005468180e-5,
    1.42151175831644588870e-7,
    2.04426310338993978564e-15,
)


def _horner(coef: Sequence[float], r: np.ndarray) -> np.ndarray:
    acc = np.full_like(r, coef[-1])
    for c in reversed(coef[:-1]):
        acc = acc * r + c
    return acc


#: Up to this many values, :func:`inv_normal_cdf` evaluates one at a time in Python floats: the dozen values in
#: a case's outer table cells cost a hundred numpy calls on tiny arrays otherwise (the same IEEE operations in
#: the same order, so the same bits).
SCALAR_MAX = 64


def inv_normal_cdf(p: np.ndarray) -> np.ndarray:
    """Quantiles of N(0, 1) for p in (0, 1), bit-exact (AS241 with :func:`det_log`)."""
    p = np.asarray(p, dtype=np.float64)
    if p.size <= SCALAR_MAX:
        return np.array([_as241(v) for v in p.ravel().tolist()], dtype=np.float64).reshape(p.shape)
    q = p - 0.5
    out = np.empty_like(p)
    central = np.abs(q) <= 0.425
    if central.any():
        qc = q[central]
        r = 0.180625 - qc * qc
        out[central] = qc * _horner(_A, r) / _horner(_B, r)
    tail = ~central
    if tail.any():
        qt = q[tail]
        r = np.where(qt < 0.0, p[tail], 1.0 - p[tail])
        r = np.sqrt(-det_log(r))
        near = r <= 5.0
        val = np.where(near, _horner(_C, r - 1.6) / _horner(_D, r - 1.6), _horner(_E, r - 5.0) / _horner(_F, r - 5.0))
        out[tail] = np.where(qt < 0.0, -val, val)
    return out


def _log1(x: float) -> float:
    """:func:`det_log` of one positive finite value, operation for operation."""
    m, e = math.frexp(x)
    if m < _SQRT_HALF:
        m, e = m * 2.0, e - 1
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    poly = 1.0 / 23.0
    for k in range(21, 0, -2):
        poly = poly * s2 + 1.0 / k
    fe = float(e)
    return (fe * _LN2_HI) + ((2.0 * s * poly) + fe * _LN2_LO)


def _horner1(coef: Sequence[float], r: float) -> float:
    acc = coef[-1]
    for c in reversed(coef[:-1]):
        acc = acc * r + c
    return acc


def _as241(p: float) -> float:
    """:func:`inv_normal_cdf` of one value, operation for operation."""
    q = p - 0.5
    if abs(q) <= 0.425:
        r = 0.180625 - q * q
        return q * _horner1(_A, r) / _horner1(_B, r)
    r = math.sqrt(-_log1(p if q < 0.0 else 1.0 - p))
    num, den, shift = (_C, _D, 1.6) if r <= 5.0 else (_E, _F, 5.0)
    val = _horner1(num, r - shift) / _horner1(den, r - shift)
    return -val if q < 0.0 else val


_TABLE_BITS = 14
_TABLE: tuple[np.ndarray, np.ndarray] | None = None


def _normal_table() -> tuple[np.ndarray, np.ndarray]:
    """Quantiles of N(0, 1) at k / 2**14 for k = 0 .. 2**14, built once with AS241, and slopes; the two outer
    cells (k = 0 and 2**14 - 1, evaluated with AS241 itself) hold NaN, which marks them in the result."""
    global _TABLE
    if _TABLE is None:
        n = 1 << _TABLE_BITS
        k = np.arange(1, n, dtype=np.float64)
        values = np.concatenate([[0.0], inv_normal_cdf(k / n), [0.0]])
        slopes = np.append(np.diff(values), 0.0)
        values[[0, n - 1]] = slopes[[0, n - 1]] = np.nan
        _TABLE = (values, slopes)
    return _TABLE


def tabled_normal(u: np.ndarray) -> np.ndarray:
    """N(0, 1) quantiles of u: linear interpolation in a 2**14-entry AS241 table, AS241 in the outer cells."""
    return _tabled(u * float(1 << _TABLE_BITS), lambda outer: u[outer])  # exact: a power of two


def _tabled(x: np.ndarray, outer_u: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """:func:`tabled_normal` of ``x = u * 2**14`` (overwritten with the result); ``outer_u`` gives u at the
    positions that fall in an outer cell (u below 2**-14 or at least 1 - 2**-14)."""
    values, slopes = _normal_table()
    i = x.astype(np.intp)
    x -= i  # the fraction, exact
    x *= np.take(slopes, i)
    x += np.take(values, i)
    outer = np.flatnonzero(np.isnan(x))  # only the outer cells' NaN: every other term is finite
    if outer.size:
        x[outer] = inv_normal_cdf(outer_u(outer))
    return x


#: One Philox generator per thread, positioned by each :class:`Stream` read (setting its state costs a
#: quarter of constructing one, and planning a case opens a dozen streams).
_local = threading.local()
_M64 = 2**64 - 1


def _philox_at(key: np.ndarray, block: int) -> np.random.Philox:
    """This thread's Philox generator set to ``key`` with ``block`` blocks of 4 words already read."""
    gen = getattr(_local, "philox", None)
    if gen is None:
        gen = _local.philox = np.random.Philox(key=np.zeros(2, dtype=np.uint64))
    gen.state = {
        "bit_generator": "Philox",
        "state": {"counter": np.array([block, 0, 0, 0], dtype=np.uint64), "key": key},
        "buffer": np.zeros(4, dtype=np.uint64),
        "buffer_pos": 4,
        "has_uint32": 0,
        "uinteger": 0,
    }
    return gen


class Stream:
    """A sequential reader over one keyed Philox4x64-10 stream (docs/generation.md).

    Words are read in whole Philox blocks (4 words) from this thread's generator, set to the stream's key
    and position for each read; words read past a draw wait in a small buffer for the next. Scalar draws
    (``integer``, ``choice``, ``chance``, ``permutation``: what planning a case takes, thousands of seeds when
    a budget scans for stand-ins) read :data:`SCALAR_CHUNK` words at once and make Python floats with the
    same exact operations as the array draws: every draw is bit for bit what one long read would give.
    """

    #: Words fetched at once for scalar draws (numpy's call costs about the same for 1 or 16 words).
    SCALAR_CHUNK = 16

    def __init__(self, *key_parts: object) -> None:
        self.key = stream_key(*key_parts)
        self.pos = 0
        self._key = np.array([self.key & _M64, self.key >> 64], dtype=np.uint64)
        self._blocks = 0  # Philox blocks read from the stream so far
        self._ahead: list[int] = []  # words read from the stream and not yet drawn, in stream order
        self._next = 0

    def _read(self, n: int) -> np.ndarray:
        """The stream's next whole blocks holding at least ``n`` words."""
        blocks = -(-n // 4)
        out = _philox_at(self._key, self._blocks).random_raw(blocks * 4)
        self._blocks += blocks
        return out

    def words(self, n: int) -> np.ndarray:
        self.pos += n
        left = len(self._ahead) - self._next
        if n <= left:
            self._next += n
            return np.array(self._ahead[self._next - n : self._next], dtype=np.uint64)
        fresh = self._read(n - left)
        head, rest = fresh[: n - left], fresh[n - left :]
        out = np.concatenate([np.array(self._ahead[self._next :], dtype=np.uint64), head]) if left else head
        self._ahead, self._next = rest.tolist(), 0
        return out

    def _word(self) -> int:
        if self._next >= len(self._ahead):
            self._ahead, self._next = self._read(self.SCALAR_CHUNK).tolist(), 0
        self._next += 1
        self.pos += 1
        return self._ahead[self._next - 1]

    def _uniform1(self) -> float:
        """One uniform, as :meth:`uniform` makes it: (w >> 12) < 2**52, so + 0.5 and * 2**-52 are exact."""
        return ((self._word() >> 12) + 0.5) * 2.0**-52

    def uniform(self, n: int) -> np.ndarray:
        """n floats strictly inside (0, 1): 52 random bits plus half a step, exact in float64."""
        w = self.words(n)
        w >>= np.uint64(12)
        u = w.astype(np.float64)
        u += 0.5
        u *= 2.0**-52
        return u

    def normal(self, n: int) -> np.ndarray:
        """``tabled_normal(self.uniform(n))``, from the words in fewer passes: with k = w >> 12,
        ``u * 2**14 = (k + 0.5) * 2**-38 = k * 2**-38 + 2**-39``, each step exact (k < 2**52)."""
        w = self.words(n)
        w >>= np.uint64(12)
        x = np.multiply(w, 2.0**-38)  # the cast to float64 in the same pass
        x += 2.0**-39
        return _tabled(x, lambda outer: (w[outer].astype(np.float64) + 0.5) * 2.0**-52)

    def integers(self, lo: int, hi: int, n: int) -> np.ndarray:
        """n integers uniform in [lo, hi) (int64); hi - lo must be below 2**53."""
        span = hi - lo
        if span <= 0:
            raise ValueError(f"empty integer range [{lo}, {hi})")
        return lo + np.floor(self.uniform(n) * span).astype(np.int64)

    def integer(self, lo: int, hi: int) -> int:
        """One integer uniform in [lo, hi): :meth:`integers`' draw (the float product is the same IEEE one)."""
        span = hi - lo
        if span <= 0:
            raise ValueError(f"empty integer range [{lo}, {hi})")
        return lo + math.floor(self._uniform1() * float(span))

    def choice(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options))]

    def chance(self, p: float) -> bool:
        return self._uniform1() < p

    def permutation(self, n: int) -> list[int]:
        """Fisher-Yates over range(n)."""
        items = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.integer(0, i + 1)
            items[i], items[j] = items[j], items[i]
        return items


def log2_floor(n: int) -> int:
    return n.bit_length() - 1 if n > 0 else 0


__all__ = ["Stream", "det_log", "inv_normal_cdf", "log2_floor", "stream_key"]
