"""Inclusive cumsum along the last axis: one program per row, the whole row in one block of
BLOCK = next_power_of_2(N) lanes, ``tl.cumsum`` in float32, strides honoured."""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(out_ptr, x_ptr, n, sx_row, sx_col, so_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * so_row + cols, tl.cumsum(x, axis=0).to(out_ptr.dtype.element_ty), mask=mask)


def cumsum(x):
    rows, n = x.shape
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows and n:
        _kernel[(rows,)](out, x, n, x.stride(0), x.stride(1), out.stride(0), BLOCK=triton.next_power_of_2(n))
    return out
