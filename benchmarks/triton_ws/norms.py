"""LayerNorm and RMSNorm over the last axis: one program per row, the whole row in one block of
BLOCK = next_power_of_2(N) lanes, float32 statistics, one cast at the store.

layernorm                  mean over the N real lanes (masked lanes load 0), then the centred values
                           with the masked lanes forced back to 0 (``tl.where(mask, x - mean, 0)``).
layernorm_bug_pad_centred  ``diff = x - mean`` without the mask: each padding lane adds mean^2 to the
                           variance. Shows only if N is not a power of two (and the row's mean is not 0).
rmsnorm                    mean of squares over the N real lanes.
rmsnorm_bug_pad_count      the sum of squares divided by BLOCK (the padded length) instead of N. Shows only
                           if N is not a power of two.
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
    if BUG:  # noqa: SIM108
        diff = x - mean  # BUG: padding lanes become -mean and add mean^2 to the variance
    else:
        diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / n
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = diff * rstd * w + b
    tl.store(out_ptr + row * so_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_kernel(out_ptr, x_ptr, w_ptr, n, sx_row, sx_col, so_row, eps, BLOCK: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=mask, other=0.0).to(tl.float32)
    if BUG:  # noqa: SIM108
        ms = tl.sum(x * x, axis=0) / BLOCK  # BUG: the padded length, not N
    else:
        ms = tl.sum(x * x, axis=0) / n
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x / tl.sqrt(ms + eps) * w
    tl.store(out_ptr + row * so_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _prepare(x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    w = x.new_empty(x.shape, dtype=x.dtype)
    return w, x.shape[0], x.shape[1]


def _layernorm(x, weight, bias, eps, bug):
    out, rows, n = _prepare(x)
    if rows and n:
        weight, bias = weight.contiguous(), bias.contiguous()
        block = triton.next_power_of_2(n)
        _layernorm_kernel[(rows,)](
            out, x, weight, bias, n, x.stride(0), x.stride(1), out.stride(0), eps, BLOCK=block, BUG=bug
        )
    return out


def _rmsnorm(x, weight, eps, bug):
    out, rows, n = _prepare(x)
    if rows and n:
        weight = weight.contiguous()
        block = triton.next_power_of_2(n)
        _rmsnorm_kernel[(rows,)](out, x, weight, n, x.stride(0), x.stride(1), out.stride(0), eps, BLOCK=block, BUG=bug)
    return out


def layernorm(x, weight, bias, eps=1e-5):
    return _layernorm(x, weight, bias, eps, bug=False)


def layernorm_bug_pad_centred(x, weight, bias, eps=1e-5):
    return _layernorm(x, weight, bias, eps, bug=True)


def rmsnorm(x, weight, eps=1e-6):
    return _rmsnorm(x, weight, eps, bug=False)


def rmsnorm_bug_pad_count(x, weight, eps=1e-6):
    return _rmsnorm(x, weight, eps, bug=True)
