"""Row softmax as a real Triton kernel: one program per row, the whole row in one block.

softmax             the correct kernel: out-of-range lanes of the block load ``-inf`` (the identity
                    of both ``max`` and ``sum(exp(.))``), the row is upcast to float32, and strides
                    are honoured (transposed and strided inputs work).
softmax_tail_leak   the classic tail-mask leak: the masked load has no ``other=-inf``, so the lanes
                    past the end of the row read 0 and add ``exp(0 - max)`` to the denominator.
                    BLOCK is the next power of two of N, so the bug shows only when N is not a
                    power of two; the default shape (N = 128) hides it.

Without a GPU the kernels run on Triton's CPU interpreter (``TRITON_INTERPRET=1``, set below when
CUDA is absent) on CPU torch tensors; on a GPU the same code compiles and runs there.
"""

import os
import sys

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    # Triton reads TRITON_INTERPRET when it decorates a function, its own library included: it must be
    # set before triton is first imported anywhere in the process.
    if "triton" in sys.modules:
        raise ImportError("no GPU, and triton was imported before TRITON_INTERPRET=1 was set: set it in the env")
    os.environ["TRITON_INTERPRET"] = "1"

import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(
    out_ptr,
    x_ptr,
    n_cols,
    x_row_stride,
    x_col_stride,
    out_row_stride,
    BLOCK: tl.constexpr,
    LEAK_TAIL: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    ptrs = x_ptr + row * x_row_stride + cols * x_col_stride
    if LEAK_TAIL:  # noqa: SIM108 (one branch per variant reads better in a kernel)
        x = tl.load(ptrs, mask=mask, other=0.0)  # BUG: padding lanes read 0, not -inf
    else:
        x = tl.load(ptrs, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, (num / den).to(out_ptr.dtype.element_ty), mask=mask)


def _softmax(x: torch.Tensor, leak_tail: bool) -> torch.Tensor:
    rows, n = x.shape
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows == 0 or n == 0:
        return out
    block = triton.next_power_of_2(n)
    _softmax_kernel[(rows,)](out, x, n, x.stride(0), x.stride(1), out.stride(0), BLOCK=block, LEAK_TAIL=leak_tail)
    return out


def softmax(x: torch.Tensor) -> torch.Tensor:
    return _softmax(x, leak_tail=False)


def softmax_tail_leak(x: torch.Tensor) -> torch.Tensor:
    return _softmax(x, leak_tail=True)
