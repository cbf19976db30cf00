"""Cross-entropy forward, the per-row loss [B] of logits [B, C] and int64 targets in [0, C): one program per
row, BLOCK = next_power_of_2(C) lanes (-inf padding), float32, ``loss = log(sum(exp(x - max))) - (x_t - max)``.

cross_entropy_bug_no_max   ``log(sum(exp(x))) - x_t``, no max subtracted: exp overflows float32 above ~88.7 and
                           underflows to log(0) below ~-103.9. Shows only on large magnitudes (distributions
                           large, mixed_magnitude, boundary, positive, special, underflow_rows).
"""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(loss_ptr, x_ptr, t_ptr, c, sx_row, sx_col, st, BLOCK: tl.constexpr, NO_MAX: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=cols < c, other=-float("inf")).to(tl.float32)
    if NO_MAX:  # noqa: SIM108
        m = 0.0  # BUG: no max subtracted
    else:
        m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
    t = tl.load(t_ptr + row * st)
    x_t = tl.load(x_ptr + row * sx_row + t * sx_col).to(tl.float32)
    tl.store(loss_ptr + row, (tl.log(s) - (x_t - m)).to(loss_ptr.dtype.element_ty))


def _cross_entropy(logits, target, no_max):
    rows, c = logits.shape
    loss = torch.empty((rows,), dtype=logits.dtype, device=logits.device)
    if rows and c:
        _kernel[(rows,)](
            loss, logits, target, c, logits.stride(0), logits.stride(1), target.stride(0),
            BLOCK=triton.next_power_of_2(c), NO_MAX=no_max,
        )  # fmt: skip
    return loss


def cross_entropy(logits, target):
    return _cross_entropy(logits, target, no_max=False)


def cross_entropy_bug_no_max(logits, target):
    return _cross_entropy(logits, target, no_max=True)
