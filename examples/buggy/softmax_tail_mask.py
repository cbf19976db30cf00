"""Bug class 1 - tail-mask leak.

A row softmax written like a "looped" Triton kernel: one program per row (the row axis is
vectorised here), three passes over column tiles of BLOCK = 128 (max, sum of exponentials,
normalise and store). The last tile of a row is partial when N % BLOCK != 0; its out-of-range
lanes must be padded with -inf, the identity of both max and sum(exp(.)).

softmax_tail_mask     pads with 0.0 (the classic `tl.load(ptrs, mask=mask)` without
                      `other=-float("inf")`): every padded lane adds exp(0 - max) to the
                      denominator, so all outputs of the row are too small.
softmax_tail_mask_ok  pads with -inf. This is the only difference.

Shows only when N % 128 != 0. Reference: refs/softmax_ref.py (float64 softmax).
"""

import numpy as np

BLOCK = 128


def _cdiv(a, b):
    return -(-a // b)


def _load_tile(x, start, other):
    """Masked load of columns [start, start + BLOCK) of every row, upcast to float32.

    Lanes past the end of the row (mask = cols < N is False) read `other`."""
    n = x.shape[1]
    stop = min(start + BLOCK, n)
    tile = np.full((x.shape[0], BLOCK), other, dtype=np.float32)
    tile[:, : stop - start] = x[:, start:stop]
    return tile


def _store_tile(out, start, tile):
    stop = min(start + BLOCK, out.shape[1])
    out[:, start:stop] = tile[:, : stop - start]  # masked store, cast to the output dtype


def _softmax_kernel(x, pad_value):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    n_tiles = _cdiv(n, BLOCK)
    with np.errstate(all="ignore"):  # IEEE semantics, as on the GPU: no traps
        # pass 1: running row max
        row_max = np.full(rows, -np.inf, dtype=np.float32)
        for t in range(n_tiles):
            tile = _load_tile(x, t * BLOCK, pad_value)
            row_max = np.maximum(row_max, tile.max(axis=1))
        # pass 2: denominator, accumulated in float32
        denom = np.zeros(rows, dtype=np.float32)
        for t in range(n_tiles):
            tile = _load_tile(x, t * BLOCK, pad_value)
            denom += np.exp(tile - row_max[:, None]).sum(axis=1)
        # pass 3: normalise and store
        for t in range(n_tiles):
            tile = _load_tile(x, t * BLOCK, pad_value)
            _store_tile(out, t * BLOCK, np.exp(tile - row_max[:, None]) / denom[:, None])
    return out


def softmax_tail_mask(x):
    # BUG: padding lanes read 0.0 and leak exp(0 - max) into the denominator.
    return _softmax_kernel(x, pad_value=0.0)


def softmax_tail_mask_ok(x):
    # FIX: padding lanes read -inf, which contributes exp(-inf) = 0.
    return _softmax_kernel(x, pad_value=-np.inf)
