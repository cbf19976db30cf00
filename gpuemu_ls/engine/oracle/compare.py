"""The oracle: is the op's output a value its dtype could hold for an answer within tolerance?

For each element with a finite float64 reference ``ref`` the op's value ``v`` passes when

    |v - ref| <= atol + rtol * |ref| + ulp_out(ref) [+ C * sens]

where ``ulp_out`` is the output dtype's spacing at ``ref`` (the final rounding of any correct
kernel). With an ulp tolerance (``ulp = N``) the bound is measured from the correctly rounded
reference instead: ``|v - rn(ref)| <= atol + rtol * |ref| + N * ulp_out(rn(ref))``, so ``ulp = 0``
(with atol = rtol = 0) is bit-exact after the output rounding and no other slack applies. ``v =
+/-inf`` passes when ``ref`` plus or minus the bound rounds to infinity in the output dtype. A NaN
reference is matched only by NaN, an infinite one only by the same infinity.

``sens`` answers "could a correct kernel be this far off?" for ill-conditioned elements. It is
measured, not guessed: the reference is re-run on inputs perturbed by relative amounts of ``eps``
(random, and a one-directional ramp for sequential sums; see ``run.case``) and ``sens`` is each
element's own largest change, so a well-conditioned element never borrows the slack of an
ill-conditioned neighbour.

**Out of range.** Some elements cannot be produced by a correct kernel working in the case's
precision; they are counted as *out of range*, never failed and never hidden:

* the reference lies beyond the output dtype's range (and the op did not return the right infinity);
* the reference evaluated in the working precision (``working``: float32 for 16- and 32-bit cases,
  the float64 reference itself for float64 cases, judged against a wider-range evaluation) is
  non-finite where the reference is finite, or, when that evaluation overflowed, differs from the
  reference by more than the element's bound (a finite consequence: rsqrt of an overflowed sum of
  squares is 0 and a layernorm returns its bias);
* the sum of a reduction's term magnitudes reaches the range (``sens / eps * terms``, or the
  reference on the inputs' absolute values, ``magnitude``) and the op's value is not finite;
* the op's value is not finite and the working-precision reference overflows once the float inputs
  are doubled (``near``): within that margin of the range a correct kernel's intermediates (a
  product its BLAS would have fused, a larger partial sum) overflow;
* the reference is infinite although every input is finite (the float64 evaluation overflowed).

A real overflow bug is not excused: a kernel without max-subtraction, a half-precision accumulator or
``exp`` of unshifted logits overflows where the working-precision evaluation of a careful
reference does not.

**Suspect references.** A NaN the reference returns from NaN-free inputs (``-inf - -inf`` on a fully
masked row) is counted as suspect, "check the reference", and the op's answer there is not judged,
unless the op declares NaN its contract there (``nan_contract``).

The extra evaluations happen only when the plain bound already failed, so a passing case costs one
reference call. Comparison runs over blocks of at most ``chunk`` elements, so memory stays bounded.
"""

from __future__ import annotations

import math
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
    out_of_range: int = 0  # elements no correct kernel in the working precision can produce (never failed)
    out_of_range_rows: int = 0  # rows (last axis) holding them: one overflowed row max is one event
    suspect_nan: int = 0  # reference NaN from NaN-free inputs: the reference is to be checked, not the op
    suspect_inf: int = 0  # of those, where the inputs hold infinities: undefined there (softmax of a -inf row)
    widened: int = 0
    used_sensitivity: bool = False
    # this output fails only at edge-of-range inputs (it passes in the tier case) while another output of the
    # case fails there too: the case is a bug, shown by that other output (oracle/tier.py)
    edge_only: bool = False
    # a gradient judged along random directions against finite differences (run/finite_diff.py): its elements
    # are the directions, not the tensor's
    directional: bool = False
    ulp: int | None = None
    axis_counts: list[list[int]] | None = None
    ratio: dict[str, float] | None = None
    examples: dict[str, dict[str, Any]] = field(default_factory=dict)  # first element of each bad kind
    detail: str = ""
    mask: np.ndarray | None = field(default=None, repr=False, compare=False)  # bad elements; not stored
    # elements invariants must not judge: out of range, suspect, or an infinity the bound accepted
    excused: np.ndarray | None = field(default=None, repr=False, compare=False)
    bound: np.ndarray | None = field(default=None, repr=False, compare=False)  # per-element bound, when widened

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("mask", "excused", "bound")}
        for key in ("worst_index", "first_index", "shape"):
            if d[key] is not None:
                d[key] = list(d[key])
        return d

    def tolerance_text(self) -> str:
        ulp = f" ulp={self.ulp}" if self.ulp is not None else ""
        return f"atol={self.atol:g} rtol={self.rtol:g}{ulp}"

    def special_text(self) -> str:
        """NaN/inf failures as what they are: "NaN where the reference is 0.567 (first at [2, 0], 1 of 16 elements)"."""
        parts = []
        for kind, count, what in (
            ("unexpected_nan", self.unexpected_nan, "NaN where the reference is"),
            ("unexpected_inf", self.unexpected_inf, "inf where the reference is"),
            ("missing_nan", self.missing_nan, "a number where the reference is"),
        ):
            ex = self.examples.get(kind)
            if not count or not ex:
                continue
            if kind == "missing_nan":
                text = f"{_num(ex['op'])} where the reference is NaN"
            elif kind == "unexpected_inf":
                text = f"{_num(ex['op'])} where the reference is {_num(ex['ref'])}"
            else:
                text = f"{what} {_num(ex['ref'])}"
            parts.append(f"{text} (first at {ex['index']}, {count} of {self.total} elements)")
        return "; ".join(parts)

    def notes(self) -> str:
        """Counts that are not failures but must be seen: out of range, suspect reference NaN."""
        out = []
        if self.out_of_range:
            rows = f" in {self.out_of_range_rows} row(s)" if self.out_of_range_rows else ""
            out.append(f"{self.out_of_range} element(s){rows} out of range (not judged)")
        if self.suspect_inf:
            out.append(
                f"{self.suspect_inf} element(s) where the reference is undefined (NaN) at infinite inputs (not judged)"
            )
        if self.suspect_nan - self.suspect_inf:
            out.append(
                f"{self.suspect_nan - self.suspect_inf} element(s) where the reference returns NaN from finite "
                "inputs: check the reference"
            )
        return "; ".join(out)

    def summary(self) -> str:
        """One line: what went wrong and by how much."""
        notes = self.notes()
        tail = f"; {notes}" if notes else ""
        if self.passed:
            return f"{self.output}: ok (max err {self.max_abs:.3g}, {self.max_ratio:.0%} of tolerance){tail}"
        if self.kind in ("shape_mismatch", "dtype_mismatch"):
            return f"{self.output}: {self.detail}"
        if self.directional:
            return (
                f"{self.output}: {self.mismatches} of {self.total} directional derivatives off; worst along "
                f"direction {self.worst_index[0] if self.worst_index else '?'}: op {_num(self.worst_op)}, finite "
                f"difference of the reference {_num(self.worst_ref)}, allowed {_num(self.worst_allowed)} (the "
                f"tolerance {self.tolerance_text()} summed over the direction, plus the difference's own error)"
                f"{tail}"
            )
        special = self.special_text()
        if special:
            finite = self.mismatches - self.unexpected_nan - self.unexpected_inf - self.missing_nan
            more = f"; {finite} more element(s) off, max abs err {self.max_abs:.3g}" if finite > 0 else ""
            return f"{self.output}: {special}{more} ({self.tolerance_text()}){tail}"
        where = f" at {list(self.worst_index)}" if self.worst_index is not None else ""
        if not (_finite(self.worst_op) and _finite(self.worst_ref)):  # the worst element is not a number:
            return (  # shown as itself, never as the finite error of another element
                f"{self.output}: op {_num(self.worst_op)} where the reference is {_num(self.worst_ref)}{where} "
                f"({self.mismatches}/{self.total} elements off; {self.tolerance_text()}){tail}"
            )
        return (
            f"{self.output}: {self.mismatches}/{self.total} elements off; max abs err {self.max_abs:.3g}{where} "
            f"(op {_num(self.worst_op)}, ref {_num(self.worst_ref)}, allowed {_num(self.worst_allowed)}; "
            f"{self.tolerance_text()}){tail}"
        )

    def report(self) -> str:
        """The full numpy.testing-style report: where and by how much."""
        if self.kind in ("shape_mismatch", "dtype_mismatch"):
            return self.detail
        if self.directional:
            return "\n".join(
                [
                    f"Output {self.output!r}: {self.detail} ({self.total} directions; no per-element verdict)",
                    f"Directions off: {self.mismatches} / {self.total}; not judged: {self.out_of_range}",
                    f"Worst along direction {self.worst_index[0] if self.worst_index else '?'}: "
                    f"op={_num(self.worst_op)} ref={_num(self.worst_ref)} allowed=+/-{_num(self.worst_allowed)}",
                    f"Error / tolerance at worst: {self.max_ratio:.3g}",
                ]
            )
        special = self.special_text()
        lines = [
            f"Output {self.output!r} ({self.dtype}, shape {list(self.shape)}): "
            f"{'within' if self.passed else 'not equal to'} tolerance {self.tolerance_text()}",
            f"Mismatched elements: {self.mismatches} / {self.total} "
            f"({100.0 * self.mismatches / max(self.total, 1):.3g}%)",
        ]
        if special:
            lines.append(f"Not finite: {special}")
        lines += [
            f"Max absolute difference (finite elements): {self.max_abs:.6g}",
            f"Max relative difference: {self.max_rel:.6g}",
            f"Max ULP difference ({self.dtype}): {self.max_ulp:.6g}",
        ]
        if not (special and not math.isfinite(self.max_ratio)):
            lines.append(f"Error / tolerance at worst: {self.max_ratio:.3g}")
        if self.worst_index is not None and not special:
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
            (
                "out of range (no correct kernel in the working precision can produce them; not judged)",
                self.out_of_range,
            ),
            ("suspect: the reference returns NaN from NaN-free inputs (check the reference)", self.suspect_nan),
            ("within measured ill-conditioning", self.widened),
        ):
            if n:
                lines.append(f"Elements {label}: {n}")
        return "\n".join(lines)


def _num(x: float | None) -> str:
    return "?" if x is None else f"{x:.6g}"


def _finite(x: float | None) -> bool:
    return x is None or math.isfinite(x)


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
    examples: dict[str, dict[str, Any]] = field(default_factory=dict)
    excused: np.ndarray | None = None
    bound: np.ndarray | None = None
    oor_rows: np.ndarray | None = None  # rows (all axes but the last) holding out-of-range elements
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


@dataclass(frozen=True)
class Working:
    """The reference evaluated in the working precision, for one output (see the module docstring)."""

    values: np.ndarray | None  # that evaluation's output (float64 view), or None when it gave none
    overflowed: bool  # the evaluation raised numpy's overflow flag
    wider: np.ndarray | None = None  # float64 cases: the reference in a wider range (long double), to compare with
    # 16/32-bit cases: each element's largest distance from the float64 reference over that evaluation and a few
    # more on inputs moved by an ulp of float32 (run.case): the rounding of a correct float32 computation, which
    # one evaluation samples only once (a shared row statistic whose error lands on one element or another)
    spread: np.ndarray | None = None


@dataclass(frozen=True)
class CaseFacts:
    """What the comparison needs to know about the case's inputs (the defaults assume nothing: strictest)."""

    inputs_nan: bool = True  # some float input holds a NaN (then a reference NaN must be matched)
    inputs_finite: bool = False  # every float input is finite (then an infinite reference means overflow)
    nan_contract: bool = False  # the op declares that a reference NaN from NaN-free inputs is its answer


def compare_output(
    name: str,
    op_out: np.ndarray,
    ref_out: np.ndarray,
    out_dtype: str,
    atol: float,
    rtol: float,
    *,
    ulp: int | None = None,
    check_nan: bool = True,
    check_inf: bool = True,
    sensitivity: Callable[[], np.ndarray | None] | None = None,
    eps: float = 0.0,
    terms: float = 1.0,
    magnitude: Callable[[], np.ndarray | None] | None = None,
    working: Callable[[], Working | None] | None = None,
    near: Callable[[], np.ndarray | None] | None = None,
    facts: CaseFacts = CaseFacts(),
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
            ulp=ulp,
            detail=f"output {name!r} has shape {list(np.shape(op_out))}, the reference {list(shape)}",
        )
    keep = keep_mask and int(np.prod(shape, dtype=np.int64)) <= MASK_LIMIT
    rule = _Rule(out_dtype, atol, rtol, ulp, check_nan, check_inf, facts)
    cmp = _pass(name, op_out, ref_out, rule, _Evidence(), chunk, keep, calibration)
    if cmp.passed:
        return cmp
    exact = ulp == 0 and atol == 0 and rtol == 0
    ev = _Evidence(eps=eps / terms)  # eps / terms: sens / eps bounds the terms' magnitudes
    if not exact and sensitivity is not None:
        sens = sensitivity()
        if sens is not None and np.shape(sens) == shape:
            ev.sens = sens
    if working is not None:
        w = working()
        if w is not None and w.values is not None and np.shape(w.values) == shape:
            ev.working = w
    if ev.sens is None and ev.working is None:
        return cmp
    widened = _pass(name, op_out, ref_out, rule, ev, chunk, keep, calibration)
    if widened.unexpected_inf or widened.unexpected_nan:  # last: is a non-finite value at the range's edge?
        more = False
        if magnitude is not None and ev.sens is not None:
            mag = magnitude()
            if mag is not None and np.shape(mag) == shape:
                ev.mag, more = mag, True
        if near is not None:
            edge = near()
            if edge is not None and np.shape(edge) == shape:
                ev.near, more = edge, True
        if more:
            widened = _pass(name, op_out, ref_out, rule, ev, chunk, keep, calibration)
    widened.used_sensitivity = ev.sens is not None
    widened.widened = max(0, cmp.mismatches - widened.mismatches - widened.out_of_range - widened.suspect_nan)
    return widened


@dataclass(frozen=True)
class _Rule:
    out_dtype: str
    atol: float
    rtol: float
    ulp: int | None
    check_nan: bool
    check_inf: bool
    facts: CaseFacts


@dataclass
class _Evidence:
    """The extra measurements of a case that failed the plain bound."""

    eps: float = 0.0
    sens: np.ndarray | None = None
    mag: np.ndarray | None = None
    near: np.ndarray | None = None  # the working-precision reference on doubled inputs
    working: Working | None = None


def _pass(
    name: str,
    op_out: np.ndarray,
    ref_out: np.ndarray,
    rule: _Rule,
    ev: _Evidence,
    chunk: int,
    keep_mask: bool,
    calibration: bool = False,
) -> Comparison:
    shape = tuple(np.shape(ref_out))
    info = dt.FLOAT_INFO.get(rule.out_dtype)
    acc = _Acc(shape)
    acc.keep_mask = keep_mask
    total = int(np.prod(shape, dtype=np.int64)) if shape else 1
    ratio_step = max(1, total // RATIO_SAMPLES)
    plain = ev.sens is None and ev.working is None
    screenable = plain and (rule.ulp is None or rule.ulp >= 1)  # the screen's bound is not ulp-0's
    screened = screenable and all(
        _screen(acc, idx, op_out[idx], ref_out[idx], rule.atol, rule.rtol, calibration)
        for idx in iter_blocks(shape, chunk)
    )
    if screened:
        _worst_element_stats(acc, info)
    else:  # some block is off the plain bound: every block through the exact rule, from scratch
        acc = _Acc(shape)
        acc.keep_mask = keep_mask
        w = ev.working
        for idx in iter_blocks(shape, chunk):
            _block(acc, idx, op_out, ref_out, ev, w, info, rule, ratio_step)
    c = Comparison(name, acc.bad == 0, None, rule.out_dtype, shape, rule.atol, rule.rtol, ulp=rule.ulp)
    c.total = acc.total
    c.mismatches = acc.bad
    c.max_abs, c.max_rel, c.max_ulp = acc.max_abs, acc.max_rel, acc.max_ulp
    c.max_abs_small, c.max_rel_large = acc.max_abs_small, acc.max_rel_large
    c.max_ratio = max(acc.best_ratio, 0.0)
    worst = acc.worst_bad if acc.bad else acc.worst
    if worst is not None:
        c.worst_index, c.worst_op, c.worst_ref, c.worst_allowed = worst
    c.first_index = acc.first
    c.examples = acc.examples
    c.mask = acc.mask if acc.bad else None
    c.excused = acc.excused
    c.bound = acc.bound
    for key in ("unexpected_nan", "unexpected_inf", "missing_nan", "nan_ignored", "inf_ignored"):
        setattr(c, key, acc.counts.get(key, 0))
    c.out_of_range = acc.counts.get("out_of_range", 0)
    c.suspect_nan = acc.counts.get("suspect_nan", 0)
    c.suspect_inf = c.suspect_nan if not rule.facts.inputs_finite else 0
    if acc.oor_rows is not None:
        c.out_of_range_rows = int(acc.oor_rows.sum())
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
    # numpy's own float dtypes are widened inside the subtraction (no widened copy of the output first)
    o = o_raw.reshape(-1) if o_raw.dtype.kind == "f" else np.asarray(o_raw, dtype=wd).reshape(-1)
    r = np.asarray(r_raw, dtype=wd).reshape(-1)
    if atol <= 0:
        return False  # the ratio below needs a positive bound everywhere
    margin = SCREEN_MARGIN if narrow else 1.0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.subtract(o, r, dtype=wd)
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
    op_out: np.ndarray,
    ref_out: np.ndarray,
    ev: _Evidence,
    w: Working | None,
    info: dt.FloatInfo | None,
    rule: _Rule,
    ratio_step: int,
) -> None:
    o = np.asarray(op_out[idx], dtype=np.float64).ravel()
    r = np.asarray(ref_out[idx], dtype=np.float64).ravel()
    n = o.size
    if n == 0:
        return
    s = None if ev.sens is None else np.asarray(ev.sens[idx], dtype=np.float64).ravel()
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        abs_r = np.abs(r)
        finite_r = np.isfinite(r)
        nan_r = np.isnan(r)
        nan_o = np.isnan(o)
        inf_o = np.isinf(o)
        if rule.ulp is not None and info is not None:  # measured from the correctly rounded reference
            target = dt.round_to(r, rule.out_dtype).astype(np.float64)
            spacing = rule.ulp * dt.ulp(target, info)
        else:
            target = r
            spacing = dt.ulp(r, info) if info is not None else 0.0
        diff = np.abs(o - target)
        allowed = rule.atol + rule.rtol * abs_r + spacing
        unstable = None
        if s is not None:
            unstable = ~np.isfinite(s)
            allowed = allowed + SENSITIVITY_FACTOR * np.where(unstable, 0.0, s)
        exact = rule.ulp == 0 and rule.atol == 0 and rule.rtol == 0
        if w is not None and w.values is not None and w.wider is None and not w.overflowed and not exact:
            # the working-precision evaluation is itself a rounding-sized perturbation of every intermediate (a
            # near-tie of huge softmax scores that random perturbations happen not to flip): what it moves counts
            if w.spread is not None:
                dev = np.asarray(w.spread[idx], dtype=np.float64).ravel()
            else:
                dev = np.abs(np.asarray(w.values[idx], dtype=np.float64).ravel() - r)
            allowed = allowed + SENSITIVITY_FACTOR * np.where(np.isfinite(dev), dev, 0.0)
        ok = finite_r & (diff <= allowed)
        if info is not None:
            ot = info.overflow_threshold
            if rule.ulp is not None:
                ok |= finite_r & np.isinf(target) & (o == target)
            else:
                ok |= finite_r & (o == np.inf) & (r + allowed >= ot)
                ok |= finite_r & (o == -np.inf) & (r - allowed <= -ot)
        ok |= nan_r & nan_o
        ok |= ~finite_r & ~nan_r & (o == r)
        excused = _out_of_range(ev, w, idx, o, r, ok, finite_r, nan_o, inf_o, unstable, allowed, info, rule)
        judge_nan = rule.facts.inputs_nan or rule.facts.nan_contract  # else a reference NaN is suspect
        suspect = ~ok & nan_r & (not judge_nan)
        excused &= ~suspect
        bad = ~ok & ~excused & ~suspect
        if not rule.check_nan:
            nan_ignored = bad & finite_r & nan_o
            bad &= ~nan_ignored
            _count(acc, "nan_ignored", nan_ignored)
        if not rule.check_inf:
            inf_ignored = bad & finite_r & inf_o
            bad &= ~inf_ignored
            _count(acc, "inf_ignored", inf_ignored)
        _count(acc, "out_of_range", excused)
        _count(acc, "suspect_nan", suspect)
        nb = int(bad.sum())
        both = finite_r & np.isfinite(o)
        judged = both & ~excused & ~suspect
        d = np.where(judged, diff, 0.0)
        acc.total += n
        if d.size:
            acc.max_abs = max(acc.max_abs, float(d.max()))
            rel = np.where(judged & (abs_r > 0), d / np.where(abs_r > 0, abs_r, 1.0), 0.0)
            acc.max_rel = max(acc.max_rel, float(rel.max()))
            if info is not None:
                acc.max_ulp = max(acc.max_ulp, float((d / dt.ulp(target, info)).max()))
            small = judged & (abs_r <= 1.0)
            if small.any():
                acc.max_abs_small = max(acc.max_abs_small, float(d[small].max()))
            large = judged & (abs_r > 1.0)
            if large.any():
                acc.max_rel_large = max(acc.max_rel_large, float(rel[large].max()))
        ratio = np.where(judged, d / np.where(allowed > 0, allowed, np.inf), 0.0)
        ratio = np.where(judged & (d > 0) & ~(allowed > 0), np.inf, ratio)
        ratio = np.where(bad & ~both, np.inf, ratio)
        block_shape = _block_shape(acc.shape, idx)
        origin = _block_origin(idx)
        if acc.keep_mask and (s is not None or w is not None) and np.ndim(allowed):
            if acc.bound is None:
                acc.bound = np.zeros(acc.shape, dtype=np.float64)
            acc.bound[idx] = np.reshape(allowed, block_shape)
        if excused.any():
            _mark_rows(acc, idx, origin, block_shape, np.flatnonzero(excused))
        # what invariants must not judge either: out of range, suspect, and an infinity the bound accepted
        spared = excused | suspect | (ok & finite_r & inf_o)
        if spared.any():
            if acc.excused is None and acc.keep_mask:
                acc.excused = np.zeros(acc.shape, dtype=bool)
            if acc.excused is not None:
                acc.excused[idx] = spared.reshape(block_shape)
        if nb:
            for kind, sel in (
                ("unexpected_nan", bad & finite_r & nan_o),
                ("unexpected_inf", bad & finite_r & inf_o),
                ("missing_nan", bad & nan_r),
            ):
                k = int(sel.sum())
                acc.counts[kind] = acc.counts.get(kind, 0) + k
                if k and kind not in acc.examples:
                    j = int(np.argmax(sel))
                    where = list(_global_index(acc.shape, idx, origin, j, block_shape))
                    acc.examples[kind] = {"index": where, "op": float(o[j]), "ref": float(r[j])}
            if acc.first is None:
                acc.first = _global_index(acc.shape, idx, origin, int(np.argmax(bad)), block_shape)
            bad_nd = bad.reshape(block_shape)
            _add_axis_counts(acc, idx, bad_nd)
            if acc.keep_mask:
                if acc.mask is None:  # first mismatch: a passing output never pays for the mask
                    acc.mask = np.zeros(acc.shape, dtype=bool)
                acc.mask[idx] = bad_nd
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
        sel = judged & (abs_r > (info.tiny if info else 0.0))
        if sel.any():
            sample = (o[sel] / r[sel])[::ratio_step]
            acc.ratios.append(sample[:RATIO_SAMPLES])


def _mark_rows(
    acc: _Acc, idx: tuple[slice | int, ...], origin: tuple[int, ...], block_shape: tuple[int, ...], flat: np.ndarray
) -> None:
    """Mark the rows (every axis but the last) that the block's elements at ``flat`` lie in."""
    shape = acc.shape
    if acc.oor_rows is None:
        acc.oor_rows = np.zeros(int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1, dtype=bool)
    if len(shape) <= 1:
        acc.oor_rows[0] = True
        return
    local = np.unravel_index(flat, block_shape) if block_shape else ()
    coords, li = [], iter(local)
    for k in range(len(shape) - 1):
        if k < len(idx) and not isinstance(idx[k], slice):
            coords.append(np.full(flat.size, idx[k], dtype=np.int64))
        else:
            coords.append(next(li) + (origin[k] if k < len(idx) else 0))
    acc.oor_rows[np.ravel_multi_index(tuple(coords), shape[:-1])] = True


def _count(acc: _Acc, key: str, mask: np.ndarray) -> None:
    k = int(mask.sum())
    if k:
        acc.counts[key] = acc.counts.get(key, 0) + k


def _out_of_range(
    ev: _Evidence,
    w: Working | None,
    idx: tuple[slice | int, ...],
    o: np.ndarray,
    r: np.ndarray,
    ok: np.ndarray,
    finite_r: np.ndarray,
    nan_o: np.ndarray,
    inf_o: np.ndarray,
    unstable: np.ndarray | None,
    allowed: np.ndarray,
    info: dt.FloatInfo | None,
    rule: _Rule,
) -> np.ndarray:
    """Elements off the bound that no correct kernel working in the case's precision could get right."""
    bad = ~ok
    out = np.zeros(o.size, dtype=bool)
    if not bad.any():
        return out
    if info is not None:  # the answer is beyond what the output dtype holds
        out |= bad & finite_r & (np.abs(r) >= info.overflow_threshold)
    if w is not None and w.values is not None:
        wv = np.asarray(w.values[idx], dtype=np.float64).ravel()
        if w.wider is not None:  # float64 case: the reference is the working evaluation; truth has a wider range
            truth = np.asarray(w.wider[idx]).ravel()
            t_num = np.isfinite(truth)
            out |= bad & t_num & ~np.isfinite(wv)
            if w.overflowed:
                dev = np.abs(wv.astype(truth.dtype) - truth)
                out |= bad & t_num & np.isfinite(wv) & (dev > allowed)
        else:
            out |= bad & finite_r & ~np.isfinite(wv)
            if w.overflowed:
                out |= bad & finite_r & np.isfinite(wv) & (np.abs(wv - r) > allowed)
    elif w is not None and w.overflowed:  # no wider evaluation: a non-finite reference from finite inputs
        out |= bad & ~finite_r & ~np.isnan(r)
    if rule.facts.inputs_finite:  # an infinite reference from finite inputs: float64 itself overflowed
        out |= bad & ~finite_r & ~np.isnan(r)
    if info is not None and ev.sens is not None:
        s = np.asarray(ev.sens[idx], dtype=np.float64).ravel()
        nonfinite_o = nan_o | inf_o
        # partial sums live in the accumulator (float32 for 16- and 32-bit outputs): a float16 output whose
        # terms sum past 65504 in magnitude is no excuse for a kernel that overflows a float16 accumulator
        top = dt.accumulation_info(info.name).overflow_threshold
        if ev.eps > 0:  # the terms' magnitudes reach the range: some order of summation overflows
            reach = np.where(np.isfinite(s), s, np.inf) / ev.eps
            out |= bad & finite_r & nonfinite_o & (reach >= top)
        if ev.mag is not None:  # the reference on |inputs|: for sums of products, the largest partial sum
            m = np.asarray(ev.mag[idx], dtype=np.float64).ravel()
            out |= bad & finite_r & nonfinite_o & np.isfinite(m) & (np.abs(m) >= top)
    if ev.near is not None:  # the reference overflows once the inputs are doubled: the range's edge
        edge = np.asarray(ev.near[idx], dtype=np.float64).ravel()
        out |= bad & finite_r & (nan_o | inf_o) & ~np.isfinite(edge)
    if unstable is not None:
        out |= bad & finite_r & unstable  # the reference itself swings to inf/NaN under rounding-sized changes
    return out


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
