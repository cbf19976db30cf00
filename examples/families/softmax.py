"""Family 5 - softmax, log-softmax and logsumexp over the last axis, looped tiles.

Each is a "looped" Triton kernel: one program per row (rows vectorised here) walks the row in
column tiles with masked loads, computes in float32 and casts once at the store.

softmax      (BLOCK = 128) three passes: row max (masked lanes read -inf), sum of exp(x - max)
             (masked lanes read -inf: exp(-inf) = 0), then exp(x - max) / sum stored.
log_softmax  (BLOCK = 64) two passes: max and sum as above, then (x - max) - log(sum) stored.
logsumexp    (BLOCK = 64) max, then sum of exp(x - max), out[row] = max + log(sum). As in
             torch.logsumexp, an infinite max is replaced by 0 before the subtraction, so a row of
             -inf gives -inf and a row holding +inf gives +inf (not NaN).

A fully -inf row has no softmax or log-softmax: NaN, as in torch and the reference.

Buggy twins (one line each):

softmax_bug_tail_pad_zero     the masked loads read 0 instead of -inf (`tl.load(ptrs, mask=mask)`
                              without `other=-float("inf")`): every padded lane adds exp(0 - max) to
                              the denominator, and a row whose values are all negative gets max 0.
                              Shows only if N % 128 != 0; it hides when the row max is far above 0
                              (exp(0 - max) underflows), and in float16/bfloat16 on long rows.
log_softmax_bug_no_max        no max-subtraction: (x - 0) - log(sum(exp(x))). exp overflows float32
                              for x > ~88.7 (log(inf) = inf) and a row entirely below ~-103.9
                              underflows to log(0) = -inf; a +inf input gives inf - inf. Shows only
                              on values of such magnitudes: distribution in {boundary, large,
                              mixed_magnitude, positive, special, underflow_rows}.
logsumexp_bug_max_pad_zero    the max pass reads its tile with `other=0.0` (the sum pass masks
                              properly): a row whose values are all negative gets max 0, which is
                              harmless unless exp(x - 0) underflows float32, i.e. the whole row lies
                              below ~-87 (then the sum loses its digits or is 0, log(0) = -inf).
                              Shows only if N % 64 != 0 and distribution in {boundary, large,
                              mixed_magnitude, underflow_rows} (`underflow_rows`, or a short row of
                              huge negative values).

Reference: `softmax_reference`, `log_softmax_reference`, `logsumexp_reference` below (float64,
max-subtracted; logsumexp with torch's infinite-max rule).
"""

import numpy as np

SOFTMAX_BLOCK = 128
LOG_SOFTMAX_BLOCK = 64
LSE_BLOCK = 64


def _load_tile(x, start, block, other):
    """Masked load of columns [start, start + block) of every row, float32; masked lanes read `other`."""
    stop = min(start + block, x.shape[1])
    tile = np.full((x.shape[0], block), other, dtype=np.float32)
    tile[:, : stop - start] = x[:, start:stop]
    return tile


def _row_max(x, block, other):
    m = np.full(x.shape[0], -np.inf, dtype=np.float32)
    for start in range(0, x.shape[1], block):
        m = np.maximum(m, _load_tile(x, start, block, other).max(axis=1))
    return m


def _row_sum_exp(x, block, shift, other):
    s = np.zeros(x.shape[0], dtype=np.float32)
    for start in range(0, x.shape[1], block):
        s += np.exp(_load_tile(x, start, block, other) - shift[:, None]).sum(axis=1)
    return s


def _softmax_kernel(x, pad):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    with np.errstate(all="ignore"):
        m = _row_max(x, SOFTMAX_BLOCK, pad)
        s = _row_sum_exp(x, SOFTMAX_BLOCK, m, pad)
        for start in range(0, n, SOFTMAX_BLOCK):
            stop = min(start + SOFTMAX_BLOCK, n)
            y = np.exp(_load_tile(x, start, SOFTMAX_BLOCK, pad) - m[:, None]) / s[:, None]
            out[:, start:stop] = y[:, : stop - start]
    return out


def _log_softmax_kernel(x, subtract_max):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    with np.errstate(all="ignore"):
        m = _row_max(x, LOG_SOFTMAX_BLOCK, -np.inf)
        # BUG: no max-subtraction, the shift is 0.
        shift = m if subtract_max else np.zeros(rows, dtype=np.float32)
        log_s = np.log(_row_sum_exp(x, LOG_SOFTMAX_BLOCK, shift, -np.inf))
        for start in range(0, n, LOG_SOFTMAX_BLOCK):
            stop = min(start + LOG_SOFTMAX_BLOCK, n)
            y = (_load_tile(x, start, LOG_SOFTMAX_BLOCK, -np.inf) - shift[:, None]) - log_s[:, None]
            out[:, start:stop] = y[:, : stop - start]
    return out


def _logsumexp_kernel(x, max_pad):
    with np.errstate(all="ignore"):
        m = _row_max(x, LSE_BLOCK, max_pad)
        m = np.where(np.isinf(m), np.float32(0), m)  # torch: an infinite max shifts by 0
        s = _row_sum_exp(x, LSE_BLOCK, m, -np.inf)
        return (m + np.log(s)).astype(x.dtype)


def softmax(x):
    return _softmax_kernel(x, pad=-np.inf)


def softmax_bug_tail_pad_zero(x):
    return _softmax_kernel(x, pad=0.0)  # BUG: padding lanes read 0


def log_softmax(x):
    return _log_softmax_kernel(x, subtract_max=True)


def log_softmax_bug_no_max(x):
    return _log_softmax_kernel(x, subtract_max=False)


def logsumexp(x):
    return _logsumexp_kernel(x, max_pad=-np.inf)


def logsumexp_bug_max_pad_zero(x):
    return _logsumexp_kernel(x, max_pad=0.0)  # BUG: the max pass pads with 0


def softmax_reference(x):
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def log_softmax_reference(x):
    with np.errstate(all="ignore"):
        z = x - x.max(axis=-1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def logsumexp_reference(x):
    with np.errstate(all="ignore"):
        m = x.max(axis=-1)
        m = np.where(np.isinf(m), 0.0, m)
        return m + np.log(np.exp(x - m[..., None]).sum(axis=-1))
