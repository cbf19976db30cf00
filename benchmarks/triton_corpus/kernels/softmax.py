"""Row softmax and log-softmax: one program per row, the whole row in one block of BLOCK = next_power_of_2(N)
lanes, masked lanes loaded as -inf, float32 arithmetic, strides honoured.

softmax, log_softmax (``(x - max) - log(sum(exp(x - max)))``).

log_softmax_bug_tail_leak   the masked load has no ``other=-inf``: padding lanes read 0 and add exp(0 - max)
                            to the sum. Shows iff N is not a power of two (and the row's max is not far above 0).
"""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(
    out_ptr, x_ptr, n, sx_row, sx_col, so_row, BLOCK: tl.constexpr, LOG: tl.constexpr, BUG: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    ptrs = x_ptr + row * sx_row + cols * sx_col
    if BUG:
        x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)  # BUG: padding lanes read 0, not -inf
    else:
        x = tl.load(ptrs, mask=mask, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    if LOG:  # noqa: SIM108
        y = z - tl.log(den)
    else:
        y = num / den
    tl.store(out_ptr + row * so_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _softmax(x, log, bug=False):
    rows, n = x.shape
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows and n:
        block = triton.next_power_of_2(n)
        _softmax_kernel[(rows,)](out, x, n, x.stride(0), x.stride(1), out.stride(0), BLOCK=block, LOG=log, BUG=bug)
    return out


def softmax(x):
    return _softmax(x, log=False)


def log_softmax(x):
    return _softmax(x, log=True)


def log_softmax_bug_tail_leak(x):
    return _softmax(x, log=True, bug=True)
