"""Family 8 - inclusive cumulative sum along the last axis, blocked and Blelloch.

cumsum_blocked: one program per row (rows vectorised here) walks the row in tiles of BLOCK = 64:
an inclusive scan of the tile (masked lanes read 0) in float32, plus the carry (the float32 total
of every earlier tile), stored; the carry then grows by the tile's total (the scan's last lane).

cumsum_blelloch: tiles of BLOCK = 128 (a power of two; masked lanes read 0, the identity), each
scanned with Blelloch's work-efficient algorithm: an up-sweep builds the partial-sum tree, the
root is replaced by the carry (0 for the first tile), and the down-sweep pushes it to the leaves,
giving the exclusive scan already offset by the carry; the inclusive scan adds x. The up-sweep's
root (the tile total) grows the carry. Float32 throughout, cast at the store.

Buggy twins (one line each):

cumsum_blocked_bug_no_carry      the carry is never added to the tiles' scans: every tile restarts
                                 from 0. Shows only if N > 64 (for rows whose earlier tiles do not sum
                                 to 0).
cumsum_blocked_bug_exclusive     stores the exclusive scan (lane i gets the sum of lanes < i) where
                                 the inclusive one is meant: always (unless x is 0).
cumsum_blelloch_bug_carry_dropped  the down-sweep starts from a root of 0 in every tile instead of
                                 the carry. Shows only if N > 128.

Reference: `reference` below (float64 np.cumsum).
"""

import numpy as np

BLOCK = 64
BLELLOCH_BLOCK = 128  # a power of two


def _load_tile(x, start, block):
    stop = min(start + block, x.shape[1])
    tile = np.zeros((x.shape[0], block), dtype=np.float32)  # masked load, other=0 (the identity)
    tile[:, : stop - start] = x[:, start:stop]
    return tile


def _blocked_kernel(x, add_carry=True, inclusive=True):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    with np.errstate(all="ignore"):
        carry = np.zeros(rows, dtype=np.float32)
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            tile = _load_tile(x, start, BLOCK)
            scan = np.cumsum(tile, axis=1, dtype=np.float32)  # tl.cumsum over the tile
            total = scan[:, -1]
            if not inclusive:  # BUG: the exclusive scan (each lane gets the sum of the lanes before it)
                scan = np.concatenate([np.zeros((rows, 1), dtype=np.float32), scan[:, :-1]], axis=1)
            if add_carry:
                scan = scan + carry[:, None]
            # (BUG add_carry=False: the carry is dropped)
            out[:, start:stop] = scan[:, : stop - start]
            carry = carry + total
    return out


def _blelloch_tile(tile, root):
    """Exclusive scan of each row of `tile` (width a power of two) seeded with `root`; and the row totals."""
    a = tile.copy()
    width = a.shape[1]
    stride = 2
    while stride <= width:  # up-sweep: a[i] += a[i - stride/2] at the right child of each pair
        a[:, stride - 1 :: stride] += a[:, stride // 2 - 1 :: stride]
        stride *= 2
    total = a[:, -1].copy()
    a[:, -1] = root
    stride = width
    while stride >= 2:  # down-sweep: left child <- parent, right child <- parent + old left child
        left = a[:, stride // 2 - 1 :: stride].copy()
        a[:, stride // 2 - 1 :: stride] = a[:, stride - 1 :: stride]
        a[:, stride - 1 :: stride] += left
        stride //= 2
    return a, total


def _blelloch_kernel(x, seed_carry):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    with np.errstate(all="ignore"):
        carry = np.zeros(rows, dtype=np.float32)
        for start in range(0, n, BLELLOCH_BLOCK):
            stop = min(start + BLELLOCH_BLOCK, n)
            tile = _load_tile(x, start, BLELLOCH_BLOCK)
            # BUG (seed_carry=False): the root is 0, the carry of the earlier tiles is dropped.
            root = carry if seed_carry else np.zeros(rows, dtype=np.float32)
            excl, total = _blelloch_tile(tile, root)
            out[:, start:stop] = (excl + tile)[:, : stop - start]
            carry = carry + total
    return out


def cumsum_blocked(x):
    return _blocked_kernel(x)


def cumsum_blocked_bug_no_carry(x):
    return _blocked_kernel(x, add_carry=False)


def cumsum_blocked_bug_exclusive(x):
    return _blocked_kernel(x, inclusive=False)


def cumsum_blelloch(x):
    return _blelloch_kernel(x, seed_carry=True)


def cumsum_blelloch_bug_carry_dropped(x):
    return _blelloch_kernel(x, seed_carry=False)


def reference(x):
    return np.cumsum(x, axis=-1)
