"""LayerNorm and RMSNorm over the last axis: one program per row, BLOCK = next_power_of_2(N) lanes, float32
statistics, one cast at the store, strides honoured.

layernorm                   mean, then the variance of the masked ``x - mean``; ``rstd = 1 / sqrt(var + eps)``.
layernorm_bug_eps_outside   ``rstd = 1 / (sqrt(var) + eps)``: eps added outside the root. Shows where the row's
                            variance is not far above eps (distributions small, subnormal; constant rows give
                            0 either way).
rmsnorm                     mean of squares of the float32 values.
rmsnorm_bug_col_stride      the load's column stride is dropped (``x_ptr + row * stride + cols``): right for a
                            row-major input only. Shows iff the last dim is not contiguous (layout transposed).
"""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_kernel(
    out_ptr, x_ptr, w_ptr, b_ptr, n, sx_row, sx_col, so_row, eps, BLOCK: tl.constexpr, BUG: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n
    diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / n
    if BUG:  # noqa: SIM108
        rstd = 1.0 / (tl.sqrt(var) + eps)  # BUG: eps outside the root
    else:
        rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * so_row + cols, (diff * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_kernel(out_ptr, x_ptr, w_ptr, n, sx_row, sx_col, so_row, eps, BLOCK: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    if BUG:  # noqa: SIM108
        ptrs = x_ptr + row * sx_row + cols  # BUG: the column stride is dropped
    else:
        ptrs = x_ptr + row * sx_row + cols * sx_col
    x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x / tl.sqrt(tl.sum(x * x, axis=0) / n + eps) * w
    tl.store(out_ptr + row * so_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _layernorm(x, weight, bias, eps, bug):
    rows, n = x.shape
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows and n:
        _layernorm_kernel[(rows,)](
            out, x, weight.contiguous(), bias.contiguous(), n, x.stride(0), x.stride(1), out.stride(0), eps,
            BLOCK=triton.next_power_of_2(n), BUG=bug,
        )  # fmt: skip
    return out


def _rmsnorm(x, weight, eps, bug):
    rows, n = x.shape
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows and n:
        _rmsnorm_kernel[(rows,)](
            out, x, weight.contiguous(), n, x.stride(0), x.stride(1), out.stride(0), eps,
            BLOCK=triton.next_power_of_2(n), BUG=bug,
        )  # fmt: skip
    return out


def layernorm(x, weight, bias, eps=1e-5):
    return _layernorm(x, weight, bias, eps, bug=False)


def layernorm_bug_eps_outside(x, weight, bias, eps=1e-5):
    return _layernorm(x, weight, bias, eps, bug=True)


def rmsnorm(x, weight, eps=1e-6):
    return _rmsnorm(x, weight, eps, bug=False)


def rmsnorm_bug_col_stride(x, weight, eps=1e-6):
    return _rmsnorm(x, weight, eps, bug=True)
