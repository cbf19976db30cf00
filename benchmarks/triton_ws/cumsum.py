"""Inclusive cumulative sum along the last axis: one program per row walks it in tiles of BLOCK = 32, an
inclusive scan of each tile (``tl.cumsum``, masked lanes read 0) plus the carry, the float32 total of every
earlier tile.

cumsum                  the carry is added to each tile's scan, then grows by the tile's total.
cumsum_bug_no_carry     the carry is never added: every tile restarts from 0. Shows only if N > 32.
"""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl

BLOCK = 32


@triton.jit
def _kernel(out_ptr, x_ptr, n, sx_row, sx_col, so_row, BLOCK: tl.constexpr, NO_CARRY: tl.constexpr):
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    carry = tl.zeros([1], tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + lanes
        x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=cols < n, other=0.0).to(tl.float32)
        scan = tl.cumsum(x, axis=0)
        if NO_CARRY:  # noqa: SIM108
            y = scan  # BUG: the earlier tiles' total is dropped
        else:
            y = scan + carry
        tl.store(out_ptr + row * so_row + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n)
        carry += tl.sum(x, axis=0)


def _cumsum(x: torch.Tensor, no_carry: bool) -> torch.Tensor:
    rows, n = x.shape
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows and n:
        _kernel[(rows,)](out, x, n, x.stride(0), x.stride(1), out.stride(0), BLOCK=BLOCK, NO_CARRY=no_carry)
    return out


def cumsum(x: torch.Tensor) -> torch.Tensor:
    return _cumsum(x, no_carry=False)


def cumsum_bug_no_carry(x: torch.Tensor) -> torch.Tensor:
    return _cumsum(x, no_carry=True)
