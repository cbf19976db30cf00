"""Embedding gather, out[T, D] = weight[idx[T], :] with int64 indices in [0, V): one program per token,
BLOCK = next_power_of_2(D) lanes, a straight copy (no arithmetic), strides honoured."""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(out_ptr, w_ptr, idx_ptr, d, sw_row, sw_col, s_idx, so_row, BLOCK: tl.constexpr):
    tok = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < d
    row = tl.load(idx_ptr + tok * s_idx)
    vals = tl.load(w_ptr + row * sw_row + cols * sw_col, mask=mask, other=0.0)
    tl.store(out_ptr + tok * so_row + cols, vals, mask=mask)


def embedding(weight, idx):
    t = idx.shape[0]
    d = weight.shape[1]
    out = torch.empty((t, d), dtype=weight.dtype, device=weight.device)
    if t and d:
        _kernel[(t,)](
            out, weight, idx, d, weight.stride(0), weight.stride(1), idx.stride(0), out.stride(0),
            BLOCK=triton.next_power_of_2(d),
        )  # fmt: skip
    return out
