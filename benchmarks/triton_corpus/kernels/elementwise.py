"""Elementwise kernels over the flattened tensor: a 1-D grid of cdiv(numel, BLOCK) programs, BLOCK = 1024,
masked loads and stores, float32 arithmetic, one cast at the store, NaN propagated through max and
min (``propagate_nan``: tl.maximum drops NaN by default, torch does not). The wrappers make their inputs contiguous.

add, axpy (alpha * x + y), relu, gelu (tanh approximation, written as x * sigmoid(2 z)), silu, sigmoid,
leaky_relu, add_relu (relu(x + y)), clamp.

axpy_bug_grid_floor        the grid is numel // BLOCK, not cdiv(numel, BLOCK): the last partial block is
                           never written (torch.empty_like leaves it as it was). Shows iff numel % 1024 != 0.
sigmoid_bug_exp_overflow   exp(x) / (1 + exp(x)): inf / inf = NaN once exp(x) overflows float32 (x > ~88.7).
                           Shows only on large magnitudes (distributions large, mixed_magnitude, boundary,
                           positive, special).
"""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl

BLOCK = 1024
GELU_K = tl.constexpr(0.7978845608028654)  # sqrt(2 / pi)


@triton.jit
def _binary_kernel(out_ptr, x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr, OP: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if OP == 0:
        z = x + y
    elif OP == 1:
        z = alpha * x + y
    else:
        z = tl.maximum(x + y, 0.0, propagate_nan=tl.PropagateNan.ALL)
    tl.store(out_ptr + offs, z.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _unary_kernel(out_ptr, x_ptr, n, a, b, BLOCK: tl.constexpr, OP: tl.constexpr, BUG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if OP == 0:  # relu
        y = tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)
    elif OP == 1:  # gelu, tanh approximation: 0.5 x (1 + tanh(z)) = x * sigmoid(2 z)
        z = GELU_K * (x + 0.044715 * x * x * x)
        y = x / (1.0 + tl.exp(-2.0 * z))
    elif OP == 2:  # silu
        y = x / (1.0 + tl.exp(-x))
    elif OP == 3:  # sigmoid
        if BUG:  # noqa: SIM108
            y = tl.exp(x) / (1.0 + tl.exp(x))  # BUG: inf / inf once exp(x) overflows
        else:
            y = 1.0 / (1.0 + tl.exp(-x))
    elif OP == 4:  # leaky relu, slope a
        y = tl.where(x >= 0.0, x, x * a)
    else:  # clamp to [a, b]
        y = tl.maximum(x, a, propagate_nan=tl.PropagateNan.ALL)
        y = tl.minimum(y, b, propagate_nan=tl.PropagateNan.ALL)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _binary(x, y, op, alpha=1.0, grid_floor=False):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if grid_floor:  # noqa: SIM108
        grid = (n // BLOCK,)  # BUG: the last partial block gets no program
    else:
        grid = (triton.cdiv(n, BLOCK),)
    if n:
        _binary_kernel[grid](out, x, y, n, alpha, BLOCK=BLOCK, OP=op)
    return out


def _unary(x, op, a=0.0, b=0.0, bug=False):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        _unary_kernel[(triton.cdiv(n, BLOCK),)](out, x, n, a, b, BLOCK=BLOCK, OP=op, BUG=bug)
    return out


def add(x, y):
    return _binary(x, y, 0)


def axpy(x, y, alpha=0.5):
    return _binary(x, y, 1, alpha)


def axpy_bug_grid_floor(x, y, alpha=0.5):
    return _binary(x, y, 1, alpha, grid_floor=True)


def add_relu(x, y):
    return _binary(x, y, 2)


def relu(x):
    return _unary(x, 0)


def gelu(x):
    return _unary(x, 1)


def silu(x):
    return _unary(x, 2)


def sigmoid(x):
    return _unary(x, 3)


def sigmoid_bug_exp_overflow(x):
    return _unary(x, 3, bug=True)


def leaky_relu(x, negative_slope=0.01):
    return _unary(x, 4, a=negative_slope)


def clamp(x, lo=-1.0, hi=1.0):
    return _unary(x, 5, a=lo, b=hi)
