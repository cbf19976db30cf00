"""Row softmax walking the row in fixed tiles of BLOCK = 32: a max pass, a sum pass, a store pass.

softmax_looped                 masked lanes read -inf (the identity of max and of sum(exp(.))) in every pass.
softmax_looped_bug_tail_zero   the sum pass loads its tile with ``other=0.0``: each lane past the end of
                               the row adds exp(0 - max) to the denominator. Shows only if N % 32 != 0 (and
                               hides where the row max is far above 0, where exp(0 - max) underflows).
"""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl

BLOCK = 32


@triton.jit
def _kernel(out_ptr, x_ptr, n_cols, sx_row, sx_col, so_row, BLOCK: tl.constexpr, TAIL_ZERO: tl.constexpr):
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    m_vec = tl.full([BLOCK], -float("inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=cols < n_cols, other=-float("inf"))
        m_vec = tl.maximum(m_vec, x.to(tl.float32))
    m = tl.max(m_vec, axis=0)
    s_vec = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        if TAIL_ZERO:
            x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=cols < n_cols, other=0.0)  # BUG
        else:
            x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=cols < n_cols, other=-float("inf"))
        s_vec += tl.exp(x.to(tl.float32) - m)
    s = tl.sum(s_vec, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=cols < n_cols, other=-float("inf"))
        y = tl.exp(x.to(tl.float32) - m) / s
        tl.store(out_ptr + row * so_row + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def _softmax(x: torch.Tensor, tail_zero: bool) -> torch.Tensor:
    rows, n = x.shape
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows and n:
        _kernel[(rows,)](out, x, n, x.stride(0), x.stride(1), out.stride(0), BLOCK=BLOCK, TAIL_ZERO=tail_zero)
    return out


def softmax_looped(x: torch.Tensor) -> torch.Tensor:
    return _softmax(x, tail_zero=False)


def softmax_looped_bug_tail_zero(x: torch.Tensor) -> torch.Tensor:
    return _softmax(x, tail_zero=True)
