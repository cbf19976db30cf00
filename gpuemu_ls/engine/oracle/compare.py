"""The oracle: is the op's output a value its dtype could hold for an answer within tolerance?

For each element with a finite float64 reference ``ref`` the op's value ``v`` passes when

    |v - ref| <= atol + rtol * |ref| + ulp_out(ref) [+ C * sens]

where ``ulp_out`` is the output dtype's spacing at ``ref`` (the final rounding of any correct
kernel), and ``v = +/-inf`` passes when ``ref`` plus or minus that bound rounds to infinity in the
output dtype: a reference beyond fp16's range is compared as fp16 would hold it. A NaN reference is
matched only by NaN; an infinite one only by the same infinity.

``sens`` answers the question "could a correct kernel be this far off?" for ill-conditioned
elements (cancellation in sums, constant rows under a normalisation). It is measured, not guessed:
the reference is re-run on inputs perturbed by relative amounts of ``eps`` (the accumulation
precision's unit roundoff times sqrt of the largest dim, the typical backward error of a reduction
of that length) and ``sens`` is the largest change seen. Well-conditioned elements barely move and
keep the plain bound; elements whose reference swings under rounding-sized perturbations get that
much slack. ``sens / eps`` measures the terms being combined (their root-sum-square, times about
``1/sqrt(3)``, the RMS of the uniform perturbation); ``terms`` (``sqrt(3 n)`` for a reduction of
length ``n``) turns it into a bound on the sum of their magnitudes. Where that bound exceeds the
output range, some summation order of a correct kernel overflows, the intermediate overflow is
inherent and a non-finite op value is counted as inconclusive (reported with the case), not
failed. That estimate is noisy for short reductions (two random perturbations can nearly cancel), so
where an inf or NaN still stands, the reference is also run on the inputs' absolute values
(``magnitude``): for sums of products that is exactly the sum of the terms' magnitudes, and an
element whose sum reaches the output range is inconclusive too. The perturbed runs happen only when
the plain bound already failed, so a passing case costs one reference call.

Comparison runs over blocks of at most ``chunk`` elements, so memory stays bounded for huge outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from .. import dtypes as dt

#: Slack in units of measured sensitivity.
SENSITIVITY_FACTOR = 2.0
#: Ratio samples kept per output for the "constant ratio" (missing scale) diagnosis.
RATIO_SAMPLES = 65536
#: Largest output whose mismatch mask is kept for diagnosis (one byte per element).
MASK_LIMIT = 1 << 24
#: Elements per block: small enough for a block's temporaries to stay in cache.
CHUNK = 1 << 16
#: Relative margin the single-precision screen keeps below the bound, for its own rounding.
SCREEN_MARGIN = 1.0 - 2.0**-20


@dataclass
class Comparison:
    """The verdict on one output, with numpy.testing-style statistics."""

    output: str
    passed: bool
    kind: str | None
    dtype: str
    shape: tuple[int, ...]
    atol: float
    rtol: float
    total: int = 0
    mismatches: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    max_ratio: float = 0.0  # largest |v - ref| / allowed: 1.0 is the tolerance
    max_abs_small: float = 0.0  # largest |v - ref| where |ref| <= 1 (what atol must cover; calibration)
    max_rel_large: float = 0.0  # largest |v - ref| / |ref| where |ref| > 1 (what rtol must cover)
    worst_index: tuple[int, ...] | None = None
    worst_op: float | None = None
    worst_ref: float | None = None
    worst_allowed: float | None = None
    first_index: tuple[int, ...] | None = None
    unexpected_nan: int = 0
    unexpected_inf: int = 0
    missing_nan: int = 0
    nan_ignored: int = 0
    inf_ignored: int = 0
    inconclusive: int = 0
    widened: int = 0
    used_sensitivity: bool = False
    axis_counts: list[list[int]] | None = None
    ratio: dict[str, float] | None = None
    detail: str = ""
    mask: np.ndarray | None = field(default=None, repr=False, compare=False)  # bad elements; not stored

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "mask"}
        for key in ("worst_index", "first_index", "shape"):
            if d[key] is not None:
                d[key] = list(d[key])
        return d

    def summary(self) -> str:
        """One line: what went wrong and by how much."""
        if self.passed:
            return f"{self.output}: ok (max err {self.max_abs:.3g}, {self.max_ratio:.0%} of tolerance)"
        if self.kind in ("shape_mismatch", "dtype_mismatch"):
            return f"{self.output}: {self.detail}"
        where = f" at {list(self.worst_index)}" if self.worst_index is not None else ""
        return (
            f"{self.output}: {self.mismatches}/{self.total} elements off; max abs err {self.max_abs:.3g}{where} "
            f"(op {_num(self.worst_op)}, ref {_num(self.worst_ref)}, allowed {_num(self.worst_allowed)}; "
            f"atol={self.atol:g} rtol={self.rtol:g})"
        )

    def report(self) -> str:
        """The full numpy.testing-style report: where and by how much."""
        if self.kind in ("shape_mismatch", "dtype_mismatch"):
            return self.detail
        lines = [
            f"Output {self.output!r} ({self.dtype}, shape {list(self.shape)}): "
            f"{'within' if self.passed else 'not equal to'} tolerance atol={self.atol:g}, rtol={self.rtol:g}",
            f"Mismatched elements: {self.mismatches} / {self.total} "
            f"({100.0 * self.mismatches / max(self.total, 1):.3g}%)",
            f"Max absolute difference: {self.max_abs:.6g}",
            f"Max relative difference: {self.max_rel:.6g}",
            f"Max ULP difference ({self.dtype}): {self.max_ulp:.6g}",
            f"Error / tolerance at worst: {self.max_ratio:.3g}",
        ]
        if self.worst_index is not None:
            lines.append(
                f"Worst at {list(self.worst_index)}: op={_num(self.worst_op)} ref={_num(self.worst_ref)} "
                f"allowed=+/-{_num(self.worst_allowed)}"
            )
        if self.first_index is not None:
            lines.append(f"First mismatch at {list(self.first_index)}")
        for label, n in (
            ("unexpected NaN", self.unexpected_nan),
            ("unexpected inf", self.unexpected_inf),
            ("missing NaN (reference is NaN)", self.missing_nan),
            ("NaN ignored (check_nan = false)", self.nan_ignored),
            ("inf ignored (check_inf = false)", self.inf_ignored),
            ("inconclusive (intermediate overflow is inherent)", self.inconclusive),
            ("within measured ill-conditioning", self.widened),
        ):
            if n:
                lines.append(f"Elements {label}: {n}")
        return "\n".join(lines)


def _num(x: float | None) -> str:
    return "?" if x is None else f"{x:.6g}"


@dataclass
class _Acc:
    """Running statistics over blocks."""

    shape: tuple[int, ...]
    total: int = 0
    bad: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    max_abs_small: float = 0.0
    max_rel_large: float = 0.0
    best_ratio: float = -1.0
    worst: tuple[tuple[int, ...], float, float, float] | None = None
    worst_bad_ratio: float = -1.0
    worst_bad: tuple[tuple[int, ...], float, float, float] | None = None
    first: tuple[int, ...] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    axis_counts: list[np.ndarray] = field(default_factory=list)
    ratios: list[np.ndarray] = field(default_factory=list)
    mask: np.ndarray | None = None
    keep_mask: bool = False


def iter_blocks(shape: tuple[int, ...], chunk: int) -> Iterator[tuple[slice | int, ...]]:
    """Index tuples that cover an array of ``shape`` in C order, each with at most ~``chunk`` elements."""
    if not shape:
        yield ()
        return
    inner = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    if inner <= chunk or len(shape) == 1:
        step = max(1, chunk // max(inner, 1))
        for start in range(0, shape[0], step):
            yield (slice(start, min(start + step, shape[0])),)
        return
    for i in range(shape[0]):
        for sub in iter_blocks(shape[1:], chunk):
            yield (i, *sub)


def _block_origin(idx: tuple[slice | int, ...]) -> tuple[int, ...]:
    return tuple(s.start if isinstance(s, slice) else s for s in idx)


def compare_output(
    name: str,
    op_out: np.ndarray,
    ref_out: np.ndarray,
    out_dtype: str,
    atol: float,
    rtol: float,
    *,
    check_nan: bool = True,
    check_inf: bool = True,
    sensitivity: Callable[[], np.ndarray | None] | None = None,
    eps: float = 0.0,
    terms: float = 1.0,
    magnitude: Callable[[], np.ndarray | None] | None = None,
    chunk: int = CHUNK,
    keep_mask: bool = False,
    calibration: bool = False,
) -> Comparison:
    """Compare one output with its reference; see the module docstring for the rule."""
    shape = tuple(np.shape(ref_out))
    if tuple(np.shape(op_out)) != shape:
        return Comparison(
            name,
            False,
            "shape_mismatch",
            out_dtype,
            tuple(np.shape(op_out)),
            atol,
            rtol,
            detail=f"output {name!r} has shape {list(np.shape(op_out))}, the reference {list(shape)}",
        )
    keep = keep_mask and int(np.prod(shape, dtype=np.int64)) <= MASK_LIMIT
    cmp = _pass(name, op_out, ref_out, out_dtype, atol, rtol, check_nan, check_inf, None, eps, chunk, keep, calibration)
    if not cmp.passed and sensitivity is not None and cmp.kind not in ("missing_nan",):
        sens = sensitivity()
        if sens is not None and np.shape(sens) == shape:
            args = (name, op_out, ref_out, out_dtype, atol, rtol, check_nan, check_inf, sens, eps / terms)
            widened = _pass(*args, chunk, keep, calibration)  # eps / terms: sens / eps bounds the magnitudes
            if (widened.unexpected_inf or widened.unexpected_nan) and magnitude is not None:
                mag = magnitude()
                if mag is not None and np.shape(mag) == shape:
                    widened = _pass(*args, chunk, keep, calibration, mag)
            widened.used_sensitivity = True
            widened.widened = cmp.mismatches - widened.mismatches - widened.inconclusive
            return widened
    return cmp


def _pass(
    name: str,
    op_out: np.ndarray,
    ref_out: np.ndarray,
    out_dtype: str,
    atol: float,
    rtol: float,
    check_nan: bool,
    check_inf: bool,
    sens: np.ndarray | None,
    eps: float,
    chunk: int,
    keep_mask: bool,
    calibration: bool = False,
    mag: np.ndarray | None = None,
) -> Comparison:
    shape = tuple(np.shape(ref_out))
    info = dt.FLOAT_INFO.get(out_dtype)
    acc = _Acc(shape)
    acc.keep_mask = keep_mask
    total = int(np.prod(shape, dtype=np.int64)) if shape else 1
    ratio_step = max(1, total // RATIO_SAMPLES)
    screened = sens is None and all(
        _screen(acc, idx, op_out[idx], ref_out[idx], atol, rtol, calibration) for idx in iter_blocks(shape, chunk)
    )
    if screened:
        _worst_element_stats(acc, info)
    else:  # some block is off the plain bound: every block through the exact rule, from scratch
        acc = _Acc(shape)
        acc.keep_mask = keep_mask
        for idx in iter_blocks(shape, chunk):
            o = np.asarray(op_out[idx], dtype=np.float64).ravel()
            r = np.asarray(ref_out[idx], dtype=np.float64).ravel()
            s = None if sens is None else np.asarray(sens[idx], dtype=np.float64).ravel()
            m = None if mag is None else np.asarray(mag[idx], dtype=np.float64).ravel()
            _block(acc, idx, o, r, s, info, atol, rtol, check_nan, check_inf, eps, ratio_step, m)
    c = Comparison(name, acc.bad == 0, None, out_dtype, shape, atol, rtol)
    c.total = acc.total
    c.mismatches = acc.bad
    c.max_abs, c.max_rel, c.max_ulp = acc.max_abs, acc.max_rel, acc.max_ulp
    c.max_abs_small, c.max_rel_large = acc.max_abs_small, acc.max_rel_large
    c.max_ratio = max(acc.best_ratio, 0.0)
    worst = acc.worst_bad if acc.bad else acc.worst
    if worst is not None:
        c.worst_index, c.worst_op, c.worst_ref, c.worst_allowed = worst
    c.first_index = acc.first
    c.mask = acc.mask if acc.bad else None
    c.unexpected_nan = acc.counts.get("unexpected_nan", 0)
    c.unexpected_inf = acc.counts.get("unexpected_inf", 0)
    c.missing_nan = acc.counts.get("missing_nan", 0)
    c.nan_ignored = acc.counts.get("nan_ignored", 0)
    c.inf_ignored = acc.counts.get("inf_ignored", 0)
    c.inconclusive = acc.counts.get("inconclusive", 0)
    if not c.passed:
        c.kind = (
            "unexpected_nan"
            if c.unexpected_nan
            else "unexpected_inf"
            if c.unexpected_inf
            else "missing_nan"
            if c.missing_nan and c.missing_nan == c.mismatches
            else "mismatch"
        )
        c.axis_counts = [a.tolist() for a in acc.axis_counts] or [[0] * n for n in shape]
        if acc.ratios:
            rs = np.concatenate(acc.ratios)
            if rs.size:
                p10, p50, p90 = np.percentile(rs, [10, 50, 90])
                c.ratio = {"median": float(p50), "p10": float(p10), "p90": float(p90), "samples": int(rs.size)}
    return c


def _screen(
    acc: _Acc,
    idx: tuple[slice | int, ...],
    o_blk: Any,
    r_blk: Any,
    atol: float,
    rtol: float,
    calibration: bool,
) -> bool:
    """Settle a block in a few passes when every element is within ``atol + rtol*|ref|``.

    The ulp, NaN, inf and sensitivity rules only ever *widen* that bound or concern non-finite
    values (which fail this test), so a block that passes here passes the exact rule too; a block
    that does not goes to the exact path. Works in float32 when both sides are at most 32-bit (the
    bound then keeps a 2**-20 relative margin for its own rounding), else in float64.
    """
    o_raw, r_raw = np.asarray(o_blk), np.asarray(r_blk)
    if not (o_raw.dtype.kind == "f" or o_raw.dtype.name == "bfloat16") or r_raw.dtype.kind != "f":
        return False
    narrow = o_raw.dtype.itemsize <= 4 and r_raw.dtype.itemsize <= 4
    wd = np.float32 if narrow else np.float64
    o = np.asarray(o_raw, dtype=wd).reshape(-1)
    r = np.asarray(r_raw, dtype=wd).reshape(-1)
    if atol <= 0:
        return False  # the ratio below needs a positive bound everywhere
    margin = SCREEN_MARGIN if narrow else 1.0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.subtract(o, r)
        np.abs(diff, out=diff)
        allowed = np.abs(r)
        np.multiply(allowed, rtol * margin, out=allowed)
        np.add(allowed, atol * margin, out=allowed)
        n = diff.size
        if n == 0:
            return True
        biggest = float(diff.max())
        if calibration:
            small = np.abs(r) <= 1.0
            if small.any():
                acc.max_abs_small = max(acc.max_abs_small, float(diff[small].max()))
            if not small.all():
                acc.max_rel_large = max(acc.max_rel_large, float((diff[~small] / np.abs(r[~small])).max()))
        ratio = np.divide(diff, allowed, out=diff)
        k = int(np.argmax(ratio))  # NaN counts as the largest: a NaN anywhere fails the screen
        value = float(ratio[k])
        if not value <= 1.0:
            return False
    acc.total += n
    acc.max_abs = max(acc.max_abs, biggest)
    o_k, r_k = float(o[k]), float(r[k])
    if value > acc.best_ratio:
        acc.best_ratio = value
        shape = _block_shape(acc.shape, idx)
        acc.worst = (_global_index(acc.shape, idx, _block_origin(idx), k, shape), o_k, r_k, atol + rtol * abs(r_k))
    return True


def _worst_element_stats(acc: _Acc, info: dt.FloatInfo | None) -> None:
    """Relative and ulp error of a passing output, at its worst element (exact path: every element)."""
    if acc.worst is None:
        return
    _, o_k, r_k, _ = acc.worst
    err = abs(o_k - r_k)
    acc.max_rel = err / abs(r_k) if r_k else 0.0
    if info is not None:
        acc.max_ulp = err / float(dt.ulp(np.array([r_k]), info)[0])


def _block(
    acc: _Acc,
    idx: tuple[slice | int, ...],
    o: np.ndarray,
    r: np.ndarray,
    s: np.ndarray | None,
    info: dt.FloatInfo | None,
    atol: float,
    rtol: float,
    check_nan: bool,
    check_inf: bool,
    eps: float,
    ratio_step: int,
    mag: np.ndarray | None = None,
) -> None:
    n = o.size
    if n == 0:
        return
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        abs_r = np.abs(r)
        finite_r = np.isfinite(r)
        nan_r = np.isnan(r)
        nan_o = np.isnan(o)
        inf_o = np.isinf(o)
        diff = np.abs(o - r)
        spacing = dt.ulp(r, info) if info is not None else 0.0
        allowed = atol + rtol * abs_r + spacing
        unstable = None
        if s is not None:
            unstable = ~np.isfinite(s)
            allowed = allowed + SENSITIVITY_FACTOR * np.where(unstable, 0.0, s)
        ok = finite_r & (diff <= allowed)
        inconclusive = np.zeros(n, dtype=bool)
        if info is not None:
            ot = info.overflow_threshold
            ok |= finite_r & (o == np.inf) & (r + allowed >= ot)
            ok |= finite_r & (o == -np.inf) & (r - allowed <= -ot)
            if s is not None and eps > 0:
                inconclusive = finite_r & (nan_o | inf_o) & ~ok & (np.where(unstable, np.inf, s) / eps >= ot)
            if mag is not None:  # the reference on |inputs|: for sums of products, the largest partial sum
                inconclusive |= finite_r & (nan_o | inf_o) & ~ok & np.isfinite(mag) & (np.abs(mag) >= ot)
        if unstable is not None:
            inconclusive |= finite_r & ~ok & unstable  # the reference itself is unstable here
        ok |= nan_r & nan_o
        ok |= ~finite_r & ~nan_r & (o == r)
        bad = ~ok & ~inconclusive
        nan_ignored = bad & finite_r & nan_o if not check_nan else None
        inf_ignored = bad & finite_r & inf_o if not check_inf else None
        if nan_ignored is not None:
            bad &= ~nan_ignored
            acc.counts["nan_ignored"] = acc.counts.get("nan_ignored", 0) + int(nan_ignored.sum())
        if inf_ignored is not None:
            bad &= ~inf_ignored
            acc.counts["inf_ignored"] = acc.counts.get("inf_ignored", 0) + int(inf_ignored.sum())
        acc.counts["inconclusive"] = acc.counts.get("inconclusive", 0) + int(inconclusive.sum())
        nb = int(bad.sum())
        both = finite_r & np.isfinite(o)
        d = np.where(both, diff, 0.0)
        acc.total += n
        if d.size:
            acc.max_abs = max(acc.max_abs, float(d.max()))
            rel = np.where(both & (abs_r > 0), d / np.where(abs_r > 0, abs_r, 1.0), 0.0)
            acc.max_rel = max(acc.max_rel, float(rel.max()))
            if info is not None:
                acc.max_ulp = max(acc.max_ulp, float((d / spacing).max()))
            small = both & (abs_r <= 1.0)
            if small.any():
                acc.max_abs_small = max(acc.max_abs_small, float(d[small].max()))
            large = both & (abs_r > 1.0)
            if large.any():
                acc.max_rel_large = max(acc.max_rel_large, float(rel[large].max()))
        ratio = np.where(both, d / np.where(allowed > 0, allowed, np.inf), 0.0)
        ratio = np.where(bad & ~both, np.inf, ratio)
        block_shape = _block_shape(acc.shape, idx)
        origin = _block_origin(idx)
        if nb:
            acc.counts["unexpected_nan"] = acc.counts.get("unexpected_nan", 0) + int((bad & finite_r & nan_o).sum())
            acc.counts["unexpected_inf"] = acc.counts.get("unexpected_inf", 0) + int((bad & finite_r & inf_o).sum())
            acc.counts["missing_nan"] = acc.counts.get("missing_nan", 0) + int((bad & nan_r).sum())
            if acc.first is None:
                acc.first = _global_index(acc.shape, idx, origin, int(np.argmax(bad)), block_shape)
            bad_nd = bad.reshape(block_shape)
            _add_axis_counts(acc, idx, bad_nd)
            if acc.keep_mask:
                if acc.mask is None:  # first mismatch: a passing output never pays for the mask
                    acc.mask = np.zeros(acc.shape, dtype=bool)
                acc.mask[idx] = bad_nd
        if nb:
            masked = np.where(bad, ratio, -1.0)
            k = int(np.argmax(masked))
            if masked[k] > acc.worst_bad_ratio:
                acc.worst_bad_ratio = float(masked[k])
                acc.worst_bad = _worst(acc, idx, origin, block_shape, k, o, r, allowed)
        k = int(np.argmax(ratio))
        if ratio[k] > acc.best_ratio:
            acc.best_ratio = float(ratio[k])
            acc.worst = _worst(acc, idx, origin, block_shape, k, o, r, allowed)
        acc.bad += nb
        sel = both & (abs_r > (info.tiny if info else 0.0))
        if sel.any():
            sample = (o[sel] / r[sel])[::ratio_step]
            acc.ratios.append(sample[:RATIO_SAMPLES])


def _worst(
    acc: _Acc,
    idx: tuple[slice | int, ...],
    origin: tuple[int, ...],
    block_shape: tuple[int, ...],
    k: int,
    o: np.ndarray,
    r: np.ndarray,
    allowed: np.ndarray | float,
) -> tuple[tuple[int, ...], float, float, float]:
    a = float(allowed[k]) if isinstance(allowed, np.ndarray) and allowed.ndim else float(allowed)  # type: ignore[arg-type]
    return _global_index(acc.shape, idx, origin, k, block_shape), float(o[k]), float(r[k]), a


def _block_shape(shape: tuple[int, ...], idx: tuple[slice | int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    for k, n in enumerate(shape):
        if k < len(idx):
            s = idx[k]
            if isinstance(s, slice):
                out.append(len(range(*s.indices(n))))
        else:
            out.append(n)
    return tuple(out)


def _global_index(
    shape: tuple[int, ...],
    idx: tuple[slice | int, ...],
    origin: tuple[int, ...],
    flat: int,
    block_shape: tuple[int, ...],
) -> tuple[int, ...]:
    local = np.unravel_index(flat, block_shape) if block_shape else ()
    out: list[int] = []
    li = iter(int(x) for x in local)
    for k in range(len(shape)):
        if k < len(idx) and not isinstance(idx[k], slice):
            out.append(int(idx[k]))  # type: ignore[arg-type]
        else:
            off = origin[k] if k < len(idx) else 0
            out.append(off + next(li))
    return tuple(out)


def _add_axis_counts(acc: _Acc, idx: tuple[slice | int, ...], bad_nd: np.ndarray) -> None:
    if not acc.axis_counts:  # first mismatch: a passing output never pays for these (8 bytes per index)
        acc.axis_counts = [np.zeros(n, dtype=np.int64) for n in acc.shape]
    sliced_axes = [k for k in range(len(acc.shape)) if not (k < len(idx) and not isinstance(idx[k], slice))]
    for k in range(len(acc.shape)):
        if k < len(idx) and not isinstance(idx[k], slice):
            acc.axis_counts[k][idx[k]] += int(bad_nd.sum())
            continue
        local_axis = sliced_axes.index(k)
        others = tuple(a for a in range(bad_nd.ndim) if a != local_axis)
        counts = bad_nd.sum(axis=others) if others else bad_nd.astype(np.int64)
        start = idx[k].start if k < len(idx) else 0  # type: ignore[union-attr]
        acc.axis_counts[k][start : start + counts.size] += counts
