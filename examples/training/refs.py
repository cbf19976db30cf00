"""float64 PyTorch references (reference_framework = "pytorch"): what the kernels compute, written the
plain way; gpuemu-ls differentiates them with autograd to judge the kernels' backward passes."""

import torch
import torch.nn.functional as F


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def cross_entropy(logits, target):
    """The loss and, under the name of the input the kernel overwrites, d loss / d logits."""
    logits = logits.detach().requires_grad_()
    loss = F.cross_entropy(logits, target, ignore_index=-100)
    (grad,) = torch.autograd.grad(loss, logits) if logits.numel() else (torch.zeros_like(logits),)
    return {"loss": loss.detach(), "logits": grad}


def rope(q, k, cos, sin):
    def rotate(x):
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = cos, sin  # (seq, half): broadcast over batch and heads
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    return rotate(q), rotate(k)


def geglu(a, b):
    return F.gelu(a, approximate="tanh") * b
