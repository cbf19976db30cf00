"""cross_entropy, loss[b] = logsumexp(logits[b, :]) - logits[b, target[b]], a PyTorch op.

logits are [B, C] (float), target [B] int64 in [0, C); the output is the per-row loss [B] in the
logits' dtype (reduction = "none"). The kernel, written with torch tensor ops, is one program per
row (rows vectorised here) walking the classes in tiles of BLOCK = 128 with masked loads (-inf
padding): pass 1 takes the row max, pass 2 sums exp(x - max) in float32, and the target logit is one
gathered load. The loss is log(sum) - (x_target - max), which stays exact when x_target is the max
of a row of huge logits.

Buggy twin (one line):

cross_entropy_bug_no_max   log(sum(exp(x))) - x_target, the max not subtracted: exp overflows
                           float32 for logits above ~88.7 (inf - x = inf), and a row entirely below
                           ~-103.9 gives log(0) = -inf. Shows on values of such magnitudes: the
                           `large` distribution (magnitudes 8 to 2^top), and boundary,
                           mixed_magnitude, positive, underflow_rows.

Reference: `reference` below, torch in float64 (`.double()`): torch.nn.functional.cross_entropy
with reduction="none".
"""

import torch

# Tiles this small cost more in thread hand-offs than they gain from a second intra-op thread, and the
# workers already run side by side: one thread per worker.
torch.set_num_threads(1)

BLOCK = 128


def _load_tile(x, start):
    stop = min(start + BLOCK, x.shape[1])
    tile = torch.full((x.shape[0], BLOCK), float("-inf"), dtype=torch.float32)  # masked load, other=-inf
    tile[:, : stop - start] = x[:, start:stop]
    return tile


def _cross_entropy_kernel(logits, target, subtract_max):
    rows, c = logits.shape
    m = torch.full((rows,), float("-inf"), dtype=torch.float32)
    for start in range(0, c, BLOCK):
        m = torch.maximum(m, _load_tile(logits, start).amax(dim=1))
    shift = m if subtract_max else torch.zeros_like(m)  # BUG when 0: exp(x) of unshifted logits
    s = torch.zeros(rows, dtype=torch.float32)
    for start in range(0, c, BLOCK):
        s += torch.exp(_load_tile(logits, start) - shift[:, None]).sum(dim=1)
    x_t = logits[torch.arange(rows), target].float()  # the gathered load of the target logit
    return (torch.log(s) - (x_t - shift)).to(logits.dtype)


def cross_entropy(logits, target):
    return _cross_entropy_kernel(logits, target, subtract_max=True)


def cross_entropy_bug_no_max(logits, target):
    return _cross_entropy_kernel(logits, target, subtract_max=False)


def reference(logits, target):
    """The way a PyTorch user writes it: the logits to float64, then the library's cross_entropy."""
    x = torch.from_numpy(logits).double()
    return torch.nn.functional.cross_entropy(x, torch.from_numpy(target), reduction="none").numpy()
