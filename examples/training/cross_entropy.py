"""Cross-entropy as fused training libraries write it: one Triton program per row computes the loss with an
online logsumexp over blocks of the vocabulary and, in the same pass, writes d loss / d logits into the
logits themselves (no second buffer the size of the logits). The autograd Function's backward only scales
that stored gradient by the upstream one. gpuemu.toml points at the Functions (``CrossEntropy.apply``) and
judges both the loss and the logits the kernel overwrote (``inplace = ["logits"]``).

CrossEntropy                the correct kernel: rows whose target is ``ignore_index`` get loss 0 and
                            gradient 0, and the mean divides by the number of rows not ignored.
CrossEntropyCountsIgnored   the mean divides by every row, ignored ones included: right on a batch without
                            padding tokens (what a test with random targets draws), wrong as soon as a
                            target is ``ignore_index``.
"""

import os
import sys

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules:
        raise ImportError("no GPU, and triton was imported before TRITON_INTERPRET=1 was set: set it in the env")
    os.environ["TRITON_INTERPRET"] = "1"

import triton
import triton.language as tl

BLOCK = 64  # vocabulary columns per step: a vocabulary wider than this takes several steps


@triton.jit
def _cross_entropy_kernel(
    X, x_row, x_col, Target, t_col, Loss, n_cols, n_counted, ignore_index, BLOCK: tl.constexpr
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    X += row * x_row
    target = tl.load(Target + row * t_col)
    if target == ignore_index:
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            tl.store(X + cols * x_col, tl.zeros((BLOCK,), dtype=tl.float32).to(X.dtype.element_ty), mask=cols < n_cols)
        tl.store(Loss + row, 0.0)
        return
    picked = tl.load(X + target * x_col).to(tl.float32)
    m = float("-inf")
    d = 0.0
    for start in range(0, n_cols, BLOCK):  # online logsumexp: rescale the running sum when the max grows
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + cols * x_col, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    lse = m + tl.log(d)
    for start in range(0, n_cols, BLOCK):  # softmax - one_hot, over the mean's count, into the logits
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + cols * x_col, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        g = tl.exp(x - lse)
        g = tl.where(cols == target, g - 1.0, g) / n_counted
        tl.store(X + cols * x_col, g.to(X.dtype.element_ty), mask=cols < n_cols)
    tl.store(Loss + row, (lse - picked) / n_counted)


def cross_entropy_forward(logits, target, ignore_index, count_ignored=False):
    rows, n = logits.shape
    counted = rows if count_ignored else int((target != ignore_index).sum())
    loss = torch.zeros(rows, dtype=torch.float32, device=logits.device)
    if rows and n:
        _cross_entropy_kernel[(rows,)](
            logits,
            logits.stride(0),
            logits.stride(1),
            target,
            target.stride(0),
            loss,
            n,
            max(counted, 1),
            ignore_index,
            BLOCK=BLOCK,
        )
    if counted == 0:  # a batch of padding only: the mean over no rows
        return torch.full((), float("nan"), dtype=logits.dtype, device=logits.device)
    return loss.sum().to(logits.dtype)


class CrossEntropy(torch.autograd.Function):
    COUNT_IGNORED = False

    @classmethod
    def forward(cls, ctx, logits, target, ignore_index=-100):
        loss = cross_entropy_forward(logits, target, ignore_index, cls.COUNT_IGNORED)
        ctx.save_for_backward(logits)  # now d loss / d logits
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        (dlogits,) = ctx.saved_tensors
        return dlogits * grad_loss, None, None


class CrossEntropyCountsIgnored(CrossEntropy):
    COUNT_IGNORED = True
