"""layernorm, two-pass, a PyTorch op: y = (x - mean) / sqrt(var + eps) * weight + bias over the last axis.

x is [B, N], weight and bias [N]; var is the biased variance (divided by N), as in torch. The kernel
is the Triton tutorial's two-pass kernel written with torch tensor ops: one program per row (rows
vectorised here) walks the row in tiles of BLOCK = 64 lanes. Pass 1 accumulates the row sum in
float32 (masked lanes read 0) and divides by N; pass 2 accumulates (x - mean)^2 over the real lanes
only and divides by N; pass 3 normalises, applies weight and bias and stores (the one cast to the
input dtype).

Buggy twin (one line):

layernorm_bug_acc_overwrite   pass 1 writes `total = tile.sum()` instead of `total += tile.sum()`:
                              only the last tile's sum survives, so the mean is wrong as soon as
                              the row spans two tiles. Shows only if N > 64 (the default N = 256
                              shows it, in float32 too).

Reference: `reference` below, torch in float64 (`.double()`): torch.nn.functional.layer_norm.
"""

import torch

# Tiles this small cost more in thread hand-offs than they gain from a second intra-op thread, and the
# workers already run side by side: one thread per worker.
torch.set_num_threads(1)

BLOCK = 64


def _load_tile(x, start):
    """Masked load of columns [start, start + BLOCK), float32, padding 0; and the lane mask."""
    stop = min(start + BLOCK, x.shape[1])
    tile = torch.zeros((x.shape[0], BLOCK), dtype=torch.float32)
    tile[:, : stop - start] = x[:, start:stop]
    return tile, torch.arange(BLOCK) < stop - start


def _layernorm_kernel(x, weight, bias, eps, overwrite):
    rows, n = x.shape
    out = torch.empty((rows, n), dtype=x.dtype)
    total = torch.zeros(rows, dtype=torch.float32)
    for start in range(0, n, BLOCK):
        tile, _ = _load_tile(x, start)
        if overwrite:
            total = tile.sum(dim=1)  # BUG: `=` instead of `+=`, the earlier tiles are lost
        else:
            total += tile.sum(dim=1)
    mean = total / n
    m2 = torch.zeros(rows, dtype=torch.float32)
    for start in range(0, n, BLOCK):
        tile, mask = _load_tile(x, start)
        d = torch.where(mask, tile - mean[:, None], torch.zeros(()))
        m2 += (d * d).sum(dim=1)
    rstd = 1.0 / torch.sqrt(m2 / n + eps)
    w, b = weight.float(), bias.float()
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        xt = x[:, start:stop].float()
        out[:, start:stop] = ((xt - mean[:, None]) * rstd[:, None] * w[start:stop] + b[start:stop]).to(x.dtype)
    return out


def layernorm(x, weight, bias, eps=1e-5):
    return _layernorm_kernel(x, weight, bias, eps, overwrite=False)


def layernorm_bug_acc_overwrite(x, weight, bias, eps=1e-5):
    return _layernorm_kernel(x, weight, bias, eps, overwrite=True)


def reference(x, weight, bias, eps=1e-5):
    """The way a PyTorch user writes it: the inputs to float64, then the library's layer_norm."""
    x, weight, bias = (torch.from_numpy(t).double() for t in (x, weight, bias))
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps).numpy()
