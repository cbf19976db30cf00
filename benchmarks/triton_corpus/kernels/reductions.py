"""Row reductions over the last axis: one program per row, the whole row in one block of
BLOCK = next_power_of_2(N) lanes, float32 accumulation. The kernel reads a row-major input;
the wrapper makes it contiguous. Output [B].

row_sum, row_max, row_mean.

row_sum_bug_noncontig    the kernel indexes ``row * N + col`` (a contiguous row-major input) and the wrapper's
                         ``x = x.contiguous()`` is missing: a transposed or strided input is read in storage
                         order. Shows iff the input is not contiguous (layouts transposed, strided).
row_mean_bug_block_div   the row sum divided by BLOCK (the padded length), not N. Shows iff N is not a power of two
                         (and the row's sum is not 0).
"""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl


@triton.jit
def _row_kernel(out_ptr, x_ptr, n, BLOCK: tl.constexpr, OP: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    ptrs = x_ptr + row * n + cols  # a row-major input: the wrapper makes it contiguous
    if OP == 1:  # max
        x = tl.load(ptrs, mask=mask, other=-float("inf")).to(tl.float32)
        r = tl.max(x, axis=0)
        r = tl.where(tl.sum((x != x).to(tl.int32), axis=0) > 0, float("nan"), r)  # a NaN row's max is NaN
    else:  # sum, mean
        x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
        r = tl.sum(x, axis=0)
        if OP == 2:
            if BUG:  # noqa: SIM108
                r = r / BLOCK  # BUG: the padded length, not N
            else:
                r = r / n
    tl.store(out_ptr + row, r.to(out_ptr.dtype.element_ty))


def _reduce(x, op, bug=False, noncontig=False):
    if not noncontig:
        x = x.contiguous()  # (the line row_sum_bug_noncontig lacks)
    rows, n = x.shape
    out = torch.empty((rows,), dtype=x.dtype, device=x.device)
    if rows and n:
        _row_kernel[(rows,)](out, x, n, BLOCK=triton.next_power_of_2(n), OP=op, BUG=bug)
    return out


def row_sum(x):
    return _reduce(x, 0)


def row_sum_bug_noncontig(x):
    return _reduce(x, 0, noncontig=True)  # BUG: no x.contiguous() before a row-major kernel


def row_max(x):
    return _reduce(x, 1)


def row_mean(x):
    return _reduce(x, 2)


def row_mean_bug_block_div(x):
    return _reduce(x, 2, bug=True)
