"""Which case a seed means: shapes, dtype, layout and value distribution, from (op, seed) alone.

A case is named by its op and an integer seed, and everything about it is derived from that pair
and the op's schema, so ``gpuemu reproduce --op softmax --seed 17`` means the same case on any
machine. For each categorical axis (strategy, dtype, layout, distribution) with n options, seed s
takes option ``perm_w[s mod n]`` where ``perm_w`` is a keyed permutation of the options for the
window ``w = s // n``: every aligned window of n seeds (``w*n .. w*n+n-1``) covers every option once,
in a random order. Dims
then follow the case's shape strategy:

* ``default``: every dim at its default;
* ``regular``: powers of two in range (any candidate for candidate lists);
* ``boundary``: 1, 2, small primes and 2**k-1, 2**k, 2**k+1 across the range, plus min and max,
  where tiled kernels break (a quarter of the dims keep their default so the effect of one dim shows;
  two fifths of the others sit at their minimum or maximum, half each: the size-1 dim that empty-split
  and single-element bugs need and the largest size where accumulation error peaks, which a uniform
  pick among ~40 sizes would each reach in 2% of cases);
* ``random``: uniform or log-uniform (half each) in [min, max].

Modes pick seeds, not cases: a quick run keeps the seeds whose derived case is float32 (or the op's
first dtype) with a default or boundary shape, so a quick failure still replays from (op, seed).
A run of at least ``COVER_FROM`` cases takes every dim to its minimum at least once: where none of
its cases does, the next accepted seed that does replaces its last case (``cover_minimums``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..config.load import DimSpec, OpConfig
from .rng import Stream

STRATEGY_WINDOW = ("default", "boundary", "regular", "boundary", "random", "boundary", "regular", "random")
QUICK_STRATEGIES = ("default", "boundary")
SMALL_PRIMES = (3, 5, 7, 11, 13, 17, 31, 61, 127)
#: Runs of at least this many cases cover every dim's minimum (shorter ones are asked for exactly).
COVER_FROM = 8
#: Cap on the elements of any one input; larger draws halve their largest dims (deterministically).
DEFAULT_MAX_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class CaseSpec:
    """Everything that defines one case; what the store keeps besides the exact inputs."""

    op: str
    seed: int
    strategy: str
    dtype: str
    layout: str
    distribution: str
    dims: dict[str, int]
    shapes: dict[str, tuple[int, ...]]
    input_distributions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "seed": self.seed,
            "strategy": self.strategy,
            "dtype": self.dtype,
            "layout": self.layout,
            "distribution": self.distribution,
            "dims": dict(self.dims),
            "shapes": {k: list(v) for k, v in self.shapes.items()},
            "input_distributions": dict(self.input_distributions),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CaseSpec:
        return cls(
            op=d["op"],
            seed=int(d["seed"]),
            strategy=d["strategy"],
            dtype=d["dtype"],
            layout=d["layout"],
            distribution=d["distribution"],
            dims={k: int(v) for k, v in d["dims"].items()},
            shapes={k: tuple(int(x) for x in v) for k, v in d["shapes"].items()},
            input_distributions=dict(d.get("input_distributions", {})),
        )

    def shape_text(self) -> str:
        return " ".join(f"{k}={list(v)}" for k, v in self.shapes.items())


def _window_pick(op: str, axis: str, seed: int, options: tuple[str, ...]) -> str:
    n = len(options)
    return options[_window_perm(op, axis, seed // n, n)[seed % n]]


@functools.lru_cache(maxsize=4096)
def _window_perm(op: str, axis: str, window: int, n: int) -> tuple[int, ...]:
    """The keyed permutation of one window (shared by its n seeds, so computed once)."""
    return tuple(Stream("window", op, axis, window).permutation(n))


def boundary_values(dim: DimSpec) -> list[int]:
    """Sizes where tiled kernels break, inside the dim's range (sorted, unique)."""
    if dim.candidates is not None:
        return sorted({dim.candidates[0], dim.candidates[-1], min(dim.candidates), max(dim.candidates)})
    vals = {dim.min, dim.max, 0, 1, 2, *SMALL_PRIMES}
    k = 2
    while (1 << k) - 1 <= dim.max:
        vals.update(((1 << k) - 1, 1 << k, (1 << k) + 1))
        k += 1
    return sorted(v for v in vals if dim.min <= v <= dim.max)


def regular_values(dim: DimSpec) -> list[int]:
    if dim.candidates is not None:
        return list(dim.candidates)
    pows = [1 << k for k in range(0, 40) if dim.min <= (1 << k) <= dim.max]
    return pows or [dim.default]


def _random_value(dim: DimSpec, s: Stream) -> int:
    if dim.candidates is not None:
        return s.choice(dim.candidates)
    if dim.min == dim.max:
        return dim.min
    if s.chance(0.5):
        return s.integer(dim.min, dim.max + 1)
    lo_bits, hi_bits = max(dim.min, 1).bit_length(), dim.max.bit_length()
    bits = s.integer(lo_bits, hi_bits + 1)
    lo = max(dim.min, 1 << (bits - 1) if bits > 0 else 0)
    hi = min(dim.max, (1 << bits) - 1)
    return s.integer(lo, hi + 1) if hi >= lo else dim.min


def derive_dims(op: OpConfig, seed: int, strategy: str, max_elements: int = DEFAULT_MAX_ELEMENTS) -> dict[str, int]:
    s = Stream("dims", op.name, seed)
    out: dict[str, int] = {}
    for name in sorted(op.dims):
        dim = op.dims[name]
        if strategy == "default":
            out[name] = dim.default
        elif strategy == "regular":
            out[name] = s.choice(regular_values(dim))
        elif strategy == "boundary":
            keep, edge, low = s.chance(0.25), s.chance(0.4), s.chance(0.5)  # fixed draws: dims independent
            value = s.choice(boundary_values(dim))
            out[name] = dim.default if keep else (dim.min if low else dim.max) if edge else value
        else:
            out[name] = _random_value(dim, s)
    return _fit_budget(op, out, max_elements)


def _fit_budget(op: OpConfig, dims: dict[str, int], max_elements: int) -> dict[str, int]:
    """Halve the largest shrinkable dim *of the oversized input* until every input fits."""
    while True:
        over = [i for i in op.inputs if _numel(shape_of(i.shape, dims)) > max_elements]
        if not over:
            return dims
        biggest = max(over, key=lambda i: _numel(shape_of(i.shape, dims)))
        own = {d for d in biggest.shape if isinstance(d, str)}
        shrinkable = [n for n in sorted(own) if dims[n] > op.dims[n].min and op.dims[n].candidates is None]
        if not shrinkable:
            return dims
        name = max(shrinkable, key=lambda n: (dims[n], n))
        dims[name] = max(op.dims[name].min, dims[name] // 2)


def shape_of(shape: tuple[str | int, ...], dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(dims[d] if isinstance(d, str) else int(d) for d in shape)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def derive_case(op: OpConfig, seed: int, max_elements: int = DEFAULT_MAX_ELEMENTS) -> CaseSpec:
    """The case that (op, seed) names."""
    strategy = _window_pick(op.name, "strategy", seed, STRATEGY_WINDOW)
    dtype = _window_pick(op.name, "dtype", seed, op.dtypes)
    layout = _window_pick(op.name, "layout", seed, op.layouts)
    distribution = _window_pick(op.name, "distribution", seed, op.distributions)
    dims = derive_dims(op, seed, strategy, max_elements)
    per_input: dict[str, str] = {}
    for inp in op.inputs:
        if inp.range is not None or (inp.dtype is not None and not inp.dtype.startswith(("float", "bfloat"))):
            per_input[inp.name] = "range"
        elif inp.distributions is not None and distribution not in inp.distributions:
            per_input[inp.name] = _window_pick(op.name, f"distribution:{inp.name}", seed, inp.distributions)
        else:
            per_input[inp.name] = distribution
    shapes = {i.name: shape_of(i.shape, dims) for i in op.inputs}
    return CaseSpec(op.name, seed, strategy, dtype, layout, distribution, dims, shapes, per_input)


def iter_seeds(
    op: OpConfig,
    base_seed: int,
    count: int,
    *,
    accept: Callable[[CaseSpec], bool] | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> Iterator[CaseSpec]:
    """The first ``count`` cases from ``base_seed`` up that ``accept`` keeps (all, by default).

    Pinned seeds (the op's ``seeds``) come first and are never filtered. The scan gives up after
    ``64 * count * len(dtypes)`` seeds, so a filter that nothing satisfies ends instead of spinning.
    """
    for seed in op.seeds:
        yield derive_case(op, seed, max_elements)
    seen = 0
    seed = base_seed
    limit = base_seed + max(count, 1) * 64 * max(len(op.dtypes), 1)
    while seen < count and seed < limit:
        spec = derive_case(op, seed, max_elements)
        if (accept is None or accept(spec)) and seed not in op.seeds:
            seen += 1
            yield spec
        seed += 1


def cover_minimums(
    op: OpConfig,
    specs: list[CaseSpec],
    *,
    accept: Callable[[CaseSpec], bool] | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> list[CaseSpec]:
    """``specs`` with every (non-candidate) dim at its minimum in at least one case.

    For each dim no case takes to its minimum, the first seed after the run's last one that ``accept``
    keeps and that does replaces the last case not pinned and not itself a replacement, so the count
    stays what was asked and every case still replays from (op, seed); the unpinned cases stay in seed
    order. Runs shorter than ``COVER_FROM`` are left as asked.
    """
    pinned = set(op.seeds)
    free = [i for i, sp in enumerate(specs) if sp.seed not in pinned]
    if len(free) < COVER_FROM:
        return specs
    out = list(specs)
    start = max(sp.seed for sp in specs) + 1
    for name in sorted(op.dims):
        dim = op.dims[name]
        if dim.candidates is not None or any(sp.dims.get(name) == dim.min for sp in out):
            continue
        for seed in range(start, start + 64 * COVER_FROM * max(len(op.dtypes), 1)):
            spec = derive_case(op, seed, max_elements)
            if spec.dims.get(name) == dim.min and seed not in pinned and (accept is None or accept(spec)):
                out[free.pop()] = spec
                start = seed + 1
                break
        if not free:
            break
    return [sp for sp in out if sp.seed in pinned] + sorted((sp for sp in out if sp.seed not in pinned), key=_seed)


def _seed(spec: CaseSpec) -> int:
    return spec.seed


def mode_filter(
    op: OpConfig,
    *,
    dtypes: tuple[str, ...] | None = None,
    strategies: tuple[str, ...] | None = None,
    layouts: tuple[str, ...] | None = None,
    distributions: tuple[str, ...] | None = None,
) -> Callable[[CaseSpec], bool]:
    """A case filter; dtypes the op does not list fall back to the op's first dtype."""
    allowed_dtypes = tuple(d for d in (dtypes or op.dtypes) if d in op.dtypes) or op.dtypes[:1]

    def accept(spec: CaseSpec) -> bool:
        return (
            spec.dtype in allowed_dtypes
            and (strategies is None or spec.strategy in strategies)
            and (layouts is None or spec.layout in layouts)
            and (distributions is None or spec.distribution in distributions)
        )

    return accept
