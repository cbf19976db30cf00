"""Family 6 - cross-entropy, loss[b] = logsumexp(logits[b, :]) - logits[b, target[b]].

logits are [B, C] (float), target is [B] int64 in [0, C); the output is the per-row loss [B] in
the logits' dtype (reduction = "none"). One program per row (rows vectorised here) walks the
classes in tiles of BLOCK = 128 with masked loads (-inf padding): pass 1 takes the row max, pass 2
sums exp(x - max) in float32, and the target logit is one gathered load. The loss is written as
log(sum) - (x_target - max), which stays exact when x_target is the max of a row of huge values
(max + log(sum) - x_target would lose log(sum) to the spacing of max).

Buggy twin (one line):

cross_entropy_bug_no_max   the log-sum-exp without max-subtraction: log(sum(exp(x))) - x_target.
                           exp overflows float32 for logits above ~88.7 (inf - x = inf), a row of
                           logits entirely below ~-103.9 gives log(0) = -inf, and a +inf logit
                           gives inf - inf. Shows only on values of such magnitudes: distribution in
                           {boundary, large, mixed_magnitude, positive, special, underflow_rows}.

Reference: `reference` below (float64, max-subtracted, the same careful final subtraction).
"""

import numpy as np

BLOCK = 128


def _load_tile(x, start):
    stop = min(start + BLOCK, x.shape[1])
    tile = np.full((x.shape[0], BLOCK), -np.inf, dtype=np.float32)  # masked load, other=-inf
    tile[:, : stop - start] = x[:, start:stop]
    return tile


def _cross_entropy_kernel(logits, target, subtract_max):
    rows, c = logits.shape
    with np.errstate(all="ignore"):
        m = np.full(rows, -np.inf, dtype=np.float32)
        for start in range(0, c, BLOCK):
            m = np.maximum(m, _load_tile(logits, start).max(axis=1))
        # BUG: no max-subtraction, the shift is 0.
        shift = m if subtract_max else np.zeros(rows, dtype=np.float32)
        s = np.zeros(rows, dtype=np.float32)
        for start in range(0, c, BLOCK):
            s += np.exp(_load_tile(logits, start) - shift[:, None]).sum(axis=1)
        x_t = logits[np.arange(rows), target].astype(np.float32)  # gathered load of the target logit
        loss = np.log(s) - (x_t - shift)
    return loss.astype(logits.dtype)


def cross_entropy(logits, target):
    return _cross_entropy_kernel(logits, target, subtract_max=True)


def cross_entropy_bug_no_max(logits, target):
    return _cross_entropy_kernel(logits, target, subtract_max=False)


def reference(logits, target):
    with np.errstate(all="ignore"):
        m = logits.max(axis=-1)
        s = np.exp(logits - m[:, None]).sum(axis=-1)
        x_t = logits[np.arange(logits.shape[0]), target.astype(np.int64)]
        return np.log(s) - (x_t - m)
