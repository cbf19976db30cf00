"""Backward validation against a numpy reference that has no gradients of its own: directional derivatives.

With ``grad`` and a numpy reference without ``reference_grad``, no per-element float64 gradient exists. What
can be checked exactly enough is the gradient along a few random directions: for each differentiated input
``x`` and direction ``w`` (normal values scaled by each element's own magnitude, drawn from (op, seed, x, k)),
the op's ``<grad_x, w>`` against the central finite difference of the reference's loss
``L(x) = sum_o <upstream_o, f_o(x)>`` in float64,

    D(h) = (L(x + h w) - L(x - h w)) / 2h,   taken at h and h/2 and extrapolated (Richardson).

The finite difference's own error is bounded by ``|D(h) - D(h/2)|`` (its truncation error, measured) plus
float64 rounding of L over 2h; the op's by its tolerance summed over the direction,
``sum_i |w_i| (atol + rtol |g_i| + ulp(g_i))``. A direction passes within the sum of the two. A wrong
gradient is caught when its error along some direction exceeds that; where a gradient is only wrong in a
few elements the directions still see it (each weights every element), but no element is named: per-element
judging needs a PyTorch reference or ``reference_grad``. Cases with non-finite inputs, a non-finite
reference or a loss the finite difference cannot resolve are counted as not judged, never passed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..cases.rng import Stream
from ..oracle.compare import Comparison
from .grads import GRAD_PREFIX, Upstream

#: Directions per differentiated input.
DIRECTIONS = 3
#: The first step, relative to each element's magnitude (the second is half of it).
STEP = 2.0**-10


def directions(op: str, seed: int, name: str, x: np.ndarray) -> list[np.ndarray]:
    """Random directions for input ``name``: normal values times each element's magnitude (at least 1e-3 of the
    input's largest), so a step moves every element by the same relative amount."""
    finite = np.abs(x[np.isfinite(x)]) if x.size else np.zeros(0)
    top = float(finite.max()) if finite.size else 0.0
    scale = np.maximum(np.abs(np.where(np.isfinite(x), x, 0.0)), max(top * 1e-3, 1e-300))
    out = []
    for k in range(DIRECTIONS):
        v = Stream("finite-difference", op, seed, name, k).normal(x.size).reshape(x.shape)
        out.append(v * scale)
    return out


def judge(
    op_name: str,
    seed: int,
    grad: tuple[str, ...],
    ref_inputs: dict[str, np.ndarray],
    ref_out: dict[str, np.ndarray],
    op_grads: dict[str, np.ndarray],
    upstream: Upstream,
    reference: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    bound_of: Callable[[str], tuple[float, float, str]],
) -> list[Comparison]:
    """One comparison per differentiated input (``grad_<x>``, its elements the directions)."""
    ups = {n: upstream.for_reference(n, v.shape) for n, v in ref_out.items()}

    def loss(inputs: dict[str, np.ndarray]) -> tuple[float, float]:
        out = reference(inputs)
        total = magnitude = 0.0
        for n, u in ups.items():
            v = np.asarray(out.get(n), dtype=np.float64)
            if v.shape != u.shape:
                raise ValueError(f"the reference's output {n!r} changed shape under a small step")
            total += float(np.sum(u * v))
            magnitude += float(np.sum(np.abs(u * v)))
        return total, magnitude

    finite_inputs = all(np.isfinite(a).all() for a in ref_inputs.values() if a.dtype.kind == "f")
    finite_ref = all(np.isfinite(np.asarray(v, dtype=np.float64)).all() for v in ref_out.values())
    comparisons = []
    for name in grad:
        atol, rtol, dtype = bound_of(name)
        g = np.asarray(op_grads[name], dtype=np.float64)
        x = ref_inputs[name]
        cmp = Comparison(GRAD_PREFIX + name, True, None, "float64", (DIRECTIONS,), atol, rtol, total=DIRECTIONS)
        cmp.detail = "directional derivatives against central finite differences of the reference"
        cmp.directional = True
        if not (finite_inputs and finite_ref) or x.size == 0:
            cmp.out_of_range = DIRECTIONS if x.size else 0  # not judged: a finite difference needs finite values
            comparisons.append(cmp)
            continue
        info = dt.FLOAT_INFO.get(dtype)
        spacing = dt.ulp(g, info) if info is not None else np.zeros_like(g)
        worst = -1.0
        for k, w in enumerate(directions(op_name, seed, name, x)):
            try:
                estimate, fd_error = _finite_difference(loss, ref_inputs, name, x, w)
            except (ValueError, FloatingPointError, OverflowError):
                estimate, fd_error = float("nan"), float("nan")
            with np.errstate(all="ignore"):
                got = float(np.sum(g * w))
                allowed = float(np.sum(np.abs(w) * (atol + rtol * np.abs(g) + spacing))) + fd_error
            if not (np.isfinite(estimate) and np.isfinite(fd_error)):
                cmp.out_of_range += 1  # the reference cannot be differenced here (overflow, a kink at the step)
                continue
            err = abs(got - estimate) if np.isfinite(got) else float("inf")
            ratio = err / allowed if allowed > 0 else (0.0 if err == 0 else float("inf"))
            if not np.isfinite(got):
                cmp.unexpected_nan += int(np.isnan(got))
                cmp.unexpected_inf += int(np.isinf(got))
            if ratio > 1.0:
                cmp.mismatches += 1
                cmp.first_index = cmp.first_index or (k,)
            if ratio > worst:
                worst = ratio
                cmp.max_ratio, cmp.max_abs = ratio, err if np.isfinite(err) else cmp.max_abs
                cmp.max_rel = err / abs(estimate) if estimate else float("inf")
                cmp.worst_index, cmp.worst_op, cmp.worst_ref, cmp.worst_allowed = (k,), got, estimate, allowed
        if cmp.mismatches:
            cmp.passed = False
            cmp.kind = (
                "unexpected_nan" if cmp.unexpected_nan else "unexpected_inf" if cmp.unexpected_inf else "mismatch"
            )
        comparisons.append(cmp)
    return comparisons


def _finite_difference(
    loss: Callable[[dict[str, np.ndarray]], tuple[float, float]],
    inputs: dict[str, np.ndarray],
    name: str,
    x: np.ndarray,
    w: np.ndarray,
) -> tuple[float, float]:
    """Richardson-extrapolated central difference of ``loss`` along ``w`` at ``x``, and a bound on its error."""

    def central(h: float) -> tuple[float, float]:
        with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
            up, mag_up = loss({**inputs, name: x + h * w})
            down, mag_down = loss({**inputs, name: x - h * w})
        return (up - down) / (2 * h), max(mag_up, mag_down) * np.finfo(np.float64).eps * 8 / h

    d1, r1 = central(STEP)
    d2, r2 = central(STEP / 2)
    estimate = (4 * d2 - d1) / 3
    return estimate, abs(d2 - d1) + r1 + r2


def grad_outputs(op_out: dict[str, Any], grad: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The op's gradients taken out of its outputs (judged here, not by the element-wise comparison)."""
    return {n: op_out.pop(GRAD_PREFIX + n) for n in grad if GRAD_PREFIX + n in op_out}


__all__ = ["DIRECTIONS", "STEP", "directions", "grad_outputs", "judge"]
