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
* ``random``: uniform or log-uniform (half each) in [min, max];
* ``small`` (only ops declared ``cost = "high"``, half of whose window it takes): the small-scope
  shapes of :func:`small_scope_values`: one tiled dim (the *focus*) at 1, 2, 3, tile-1, tile, tile+1 or
  2*tile+1 for a tile that matters (its declared ``tile``/``block`` sizes, else 16..256), every other dim
  at 1, 2 or 3, so the interpreter runs few program instances on each boundary class.

Modes pick seeds, not cases, so every case of every mode replays from (op, seed):

* **thorough** (:func:`plan_thorough`): the first ``n`` seeds from the base seed that the run's
  filter keeps;
* **quick** (:func:`plan_quick`): seeds whose case is float32 (``[ci] quick_dtypes`` when set; the
  op's first dtype when it lists no float32) with a default or boundary shape. When quick dtypes
  are not set, an op that lists float16 and/or bfloat16 also gets ``max(1, n // 8)`` cases of each
  (at most half the run in all) with a boundary shape and an accumulator-stressing distribution
  (``large`` or ``positive``; any of the op's if it lists neither), taken out of the ``n``.

**Coverage** (:func:`cover`). A run of at least ``COVER_FROM`` unpinned cases must contain some
cases that chance would often leave out, its *needs*: every dim at its minimum (the smallest
candidate of a candidate list), drawn from values that cannot hide a wrong answer there (not
``HIDING_DISTRIBUTIONS``: a NaN row of one element hides an empty-partition bug); in thorough runs,
each structure distribution the op lists (``STRUCTURE_DISTRIBUTIONS``: rare row structures that only
bite where the last tile is partial) at a ``boundary`` shape, and each (dtype, layout) pair at dims
of 2 or more; in quick runs, each of ``QUICK_DISTRIBUTIONS`` the op lists (``nan_payloads`` among
them: NaN bit patterns that a cast or a NaN guard mishandles). For each need no case meets, the next
seed after the run's last that the run's filter keeps and that meets it replaces the last free case
(not pinned, not itself a replacement) whose loss leaves every need met so far met. The count stays
what was asked and pinned seeds are untouched.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import dtypes as dt
from ..config import dimexpr
from ..config.keys import MAX_ITERATIONS, PLAN, PLAN_DISTRIBUTIONS, PLAN_DTYPES
from ..config.model import DimSpec, OpConfig
from ..errors import UsageError
from .rng import Stream

STRATEGY_WINDOW = ("default", "boundary", "regular", "boundary", "random", "boundary", "regular", "random")
#: The window of an op declared ``cost = "high"``: half its cases small-scope, the other shapes kept (large
#: sizes still appear, a budget samples them).
HIGH_COST_WINDOW = ("small", "boundary", "small", "default", "small", "regular", "small", "random")
#: Every shape strategy (shape class), in the order reports list them.
STRATEGIES = ("default", "boundary", "small", "regular", "random")
QUICK_STRATEGIES = ("default", "boundary")
#: Tile sizes a small-scope dim probes when the op declares none: where Triton and CUDA blocks usually are.
DEFAULT_TILES = (16, 32, 64, 128, 256)
#: Sizes every small-scope dim may take: 1 (empty splits), 2 (the smallest split), 3 (a small prime).
SMALL_SIZES = (1, 2, 3)
#: Row structures that only bite where a tile is partial: a thorough run has each (that the op lists)
#: at a ``boundary`` shape.
STRUCTURE_DISTRIBUTIONS = (
    "masked_rows",
    "partial_inf",
    "underflow_rows",
    "tail_max",
    "constant_rows",
    "nan_payloads",
    "boundary",
)
#: Distributions whose NaN or -inf values can make a wrong answer coincide with the reference's NaN (a size-1
#: row that is NaN hides an empty-partition bug): a dim's minimum is covered by a case drawn from another one.
HIDING_DISTRIBUTIONS = ("special", "nan_payloads", "masked_rows", "partial_inf")
#: Distributions a quick run covers within its count (those the op lists).
QUICK_DISTRIBUTIONS = ("masked_rows", "tail_max", "large", "boundary", "nan_payloads")
#: Dtypes a quick run adds a few cases of when ``[ci] quick_dtypes`` is not set...
HALF_DTYPES = ("float16", "bfloat16")
#: ...with one of these distributions (those the op lists), which stress half-precision accumulators.
ACCUMULATOR_STRESS = ("large", "positive")
SMALL_PRIMES = (3, 5, 7, 11, 13, 17, 31, 61, 127)
#: Runs of at least this many unpinned cases are covered (:func:`cover`); shorter ones run as asked.
COVER_FROM = 8
#: Cap on the elements of any one input; larger draws halve their largest dims (deterministically).
DEFAULT_MAX_ELEMENTS = 1 << 22
#: Seeds derived between two looks at a cancel event (planning a million cases takes minutes).
CANCEL_EVERY = 256


class PlanCancelled(Exception):
    """Planning stopped because its cancel event was set (a superseded run, a server that exits)."""


def check_count(count: int) -> None:
    """Refuse a case count past ``MAX_ITERATIONS``: planning it would take longer than anyone waits."""
    if count > MAX_ITERATIONS:
        raise UsageError(f"iterations must be in 1..{MAX_ITERATIONS}, got {count}")


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
    #: the plan version the case was drawn under (config.keys.PLAN); 0: any plan draws it (the op lists
    #: its distributions), so a bare (op, seed) names it under every version
    plan: int = 0

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
            "plan": self.plan,
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
            plan=int(d.get("plan", 1)),  # stored before plan versions: plan 1
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


def strategy_window(op: OpConfig) -> tuple[str, ...]:
    """The shape strategies one window of seeds takes: :data:`HIGH_COST_WINDOW` for ``cost = "high"``."""
    return HIGH_COST_WINDOW if op.cost == "high" else STRATEGY_WINDOW


def quick_strategies(op: OpConfig) -> tuple[str, ...]:
    """Shape strategies of a quick run: default and boundary, plus small-scope for ``cost = "high"`` ops."""
    return (*QUICK_STRATEGIES, "small") if op.cost == "high" else QUICK_STRATEGIES


def tiled_dims(op: OpConfig) -> list[str]:
    """Dims a kernel tiles: those with a declared ``tile``/``block`` when any dim declares one; else every dim
    that is one of the last two axes of some input (leading axes, batch and heads, index program instances)."""
    declared = sorted(n for n, d in op.dims.items() if d.tiles)
    if declared:
        return declared
    inner = {d for i in op.inputs for d in entry_dims(i.shape[-2:])}
    return sorted(n for n in op.dims if n in inner) or sorted(op.dims)


@functools.lru_cache(maxsize=4096)
def small_scope_values(dim: DimSpec, tiled: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(small, tile classes) of a dim for small-scope shapes, inside its range.

    Small: 1, 2 and 3 (an empty split, the smallest split, a small prime), or the dim's minimum when none
    fits. Tile classes (tiled dims only): tile-1, tile and tile+1 (a partial last tile, an exact fit, one
    element past it) and 2*tile+1 (a second full tile, where accumulators carry across tiles), for each
    declared tile, else each of 16..256. A candidate list keeps its own values (smallest = small).
    """
    if dim.candidates is not None:
        cands = tuple(sorted(set(dim.candidates)))
        return cands[:1], (cands[1:] if tiled else ())
    small = tuple(v for v in SMALL_SIZES if dim.min <= v <= dim.max) or (dim.min,)
    if not tiled:
        return small, ()
    classes = {v for t in (dim.tiles or DEFAULT_TILES) for v in (t - 1, t, t + 1, 2 * t + 1)}
    return small, tuple(sorted(v for v in classes if dim.min <= v <= dim.max and v not in small))


def _small_dims(op: OpConfig, s: Stream) -> dict[str, int]:
    """One small-scope shape: a focus dim among the tiled ones at a tile class or a small size, the rest small."""
    tiled = tiled_dims(op)
    focus = s.choice(tiled) if tiled else None
    out: dict[str, int] = {}
    for name in sorted(op.dims):
        small, classes = small_scope_values(op.dims[name], name in tiled)
        pick = s.integer(0, len(small) + 2 * len(classes))  # a fixed draw per dim: dims stay independent
        if name == focus and classes and pick >= len(small):
            out[name] = classes[(pick - len(small)) % len(classes)]
        else:
            out[name] = small[pick % len(small)]
    return out


@functools.lru_cache(maxsize=4096)
def boundary_values(dim: DimSpec) -> tuple[int, ...]:
    """Sizes where tiled kernels break, inside the dim's range, and the dim's ``also`` sizes (sorted, unique).
    Cached, as :func:`regular_values` and :func:`small_scope_values`: a function of the dim alone, asked for
    each dim of every seed a work cut scans (~3,000 an op)."""
    if dim.also:
        return tuple(sorted({*boundary_values(dataclasses.replace(dim, also=())), *dim.also}))
    if dim.candidates is not None:
        return tuple(sorted({dim.default, dim.candidates[-1], min(dim.candidates), max(dim.candidates)}))
    vals = {dim.min, dim.max, 0, 1, 2, *SMALL_PRIMES}
    k = 2
    while (1 << k) - 1 <= dim.max:
        vals.update(((1 << k) - 1, 1 << k, (1 << k) + 1))
        k += 1
    return tuple(sorted(v for v in vals if dim.min <= v <= dim.max))


@functools.lru_cache(maxsize=4096)
def regular_values(dim: DimSpec) -> tuple[int, ...]:
    if dim.candidates is not None:
        return tuple(dim.candidates)
    pows = tuple(1 << k for k in range(0, 40) if dim.min <= (1 << k) <= dim.max)
    return pows or (dim.default,)


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
        elif strategy == "small":
            return _fit_budget(op, _small_dims(op, s), max_elements)
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
        own = entry_dims(biggest.shape)
        shrinkable = [
            n
            for n in sorted(own)
            if dims[n] > op.dims[n].min and op.dims[n].candidates is None and dims[n] not in op.dims[n].also
        ]
        if not shrinkable:
            return dims
        name = max(shrinkable, key=lambda n: (dims[n], n))
        dims[name] = max(op.dims[name].min, dims[name] // 2)


def shape_of(shape: tuple[str | int, ...], dims: dict[str, int]) -> tuple[int, ...]:
    """An input's shape for drawn ``dims``: integers, dim names and dim expressions (``"2*D2"``)."""
    return tuple(dims[d] if type(d) is str and d in dims else dimexpr.evaluate(d, dims) for d in shape)


def entry_dims(shape: tuple[str | int, ...]) -> set[str]:
    """The dims a shape's entries name (an expression names each of its dims)."""
    return {n for d in shape for n in dimexpr.names(d)}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def plan_distributions(op: OpConfig, plan: int = PLAN) -> tuple[str, ...]:
    """The distributions seeds of ``plan`` draw from: the op's (for the current plan, or an op that lists
    its own), else the earlier plan's default set."""
    return PLAN_DISTRIBUTIONS[plan] if op.default_distributions and plan != PLAN else op.distributions


def plan_dtypes(op: OpConfig, plan: int = PLAN) -> tuple[str, ...]:
    """The dtypes seeds of ``plan`` draw from: the op's (for the current plan, or an op that lists its own),
    else the earlier plan's default set."""
    return PLAN_DTYPES[plan] if op.default_dtypes and plan != PLAN else op.dtypes


def derive_case(
    op: OpConfig, seed: int, max_elements: int = DEFAULT_MAX_ELEMENTS, *, plan: int | None = None
) -> CaseSpec:
    """The case that (op, seed) names under ``plan`` (default: the current :data:`PLAN`)."""
    plan = PLAN if plan is None else plan
    if plan not in PLAN_DISTRIBUTIONS:
        raise UsageError(f"unknown plan version {plan}: this gpuemu knows {sorted(PLAN_DISTRIBUTIONS)}")
    strategy = _window_pick(op.name, "strategy", seed, strategy_window(op))
    dtype = _window_pick(op.name, "dtype", seed, plan_dtypes(op, plan))
    layout = _window_pick(op.name, "layout", seed, op.layouts)
    distribution = _window_pick(op.name, "distribution", seed, plan_distributions(op, plan))
    dims = derive_dims(op, seed, strategy, max_elements)
    per_input: dict[str, str] = {}
    for inp in op.inputs:
        if inp.dtype is not None and not dt.is_float(inp.dtype):
            per_input[inp.name] = "range"  # integers: uniform in their range (a float range bounds values instead)
        elif inp.distributions is not None and distribution not in inp.distributions:
            per_input[inp.name] = _window_pick(op.name, f"distribution:{inp.name}", seed, inp.distributions)
        else:
            per_input[inp.name] = distribution
    shapes = {i.name: shape_of(i.shape, dims) for i in op.inputs}
    spec_plan = plan if op.plan_bound else 0  # an op's own lists: the same case under every plan
    return CaseSpec(op.name, seed, strategy, dtype, layout, distribution, dims, shapes, per_input, spec_plan)


def iter_seeds(
    op: OpConfig,
    base_seed: int,
    count: int,
    *,
    accept: Callable[[CaseSpec], bool] | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    pinned: bool = True,
    scan: int | None = None,
    cancel: threading.Event | None = None,
) -> Iterator[CaseSpec]:
    """The first ``count`` cases from ``base_seed`` up that ``accept`` keeps (all, by default).

    Pinned seeds (the op's ``seeds``) come first (unless ``pinned`` is false) and are never filtered.
    The scan gives up after ``scan`` seeds (default ``64 * count * len(dtypes)``), so a filter that
    nothing satisfies ends instead of spinning. A set ``cancel`` raises :class:`PlanCancelled`.
    """
    check_count(count)
    if pinned:
        for seed in op.seeds:
            yield derive_case(op, seed, max_elements, plan=op.pin_plans.get(seed, 1))
    seen = 0
    seed = base_seed
    limit = base_seed + (scan if scan is not None else max(count, 1) * 64 * max(len(op.dtypes), 1))
    while seen < count and seed < limit:
        if cancel is not None and (seed - base_seed) % CANCEL_EVERY == 0 and cancel.is_set():
            raise PlanCancelled(op.name)
        spec = derive_case(op, seed, max_elements)
        if (accept is None or accept(spec)) and seed not in op.seeds:
            seen += 1
            yield spec
        seed += 1


@dataclass(frozen=True)
class Need:
    """A case a run must contain: a dim at a value, and/or a distribution at a shape strategy."""

    label: str
    dim: str | None = None
    value: int | None = None
    distribution: str | None = None
    strategy: str | None = None
    dtype: str | None = None
    layout: str | None = None
    wide: tuple[str, ...] = ()  # dims that must be 2 or more (a layout cannot show in a dim of 1)
    plain: bool = False  # met only by a case whose values cannot hide a wrong answer (HIDING_DISTRIBUTIONS)

    def met(self, spec: CaseSpec) -> bool:
        return (
            (self.dim is None or spec.dims.get(self.dim) == self.value)
            and (self.dtype is None or spec.dtype == self.dtype)
            and (self.layout is None or spec.layout == self.layout)
            and all(spec.dims.get(d, 0) >= 2 for d in self.wide)
            and not (self.plain and spec.distribution in HIDING_DISTRIBUTIONS)
            and (self.strategy is None or spec.strategy == self.strategy)
            and (
                self.distribution is None
                or (spec.distribution == self.distribution and self.distribution in spec.input_distributions.values())
            )
        )

    def may_meet(self, op: OpConfig, seed: int) -> bool:
        """A cheap necessary condition (the window picks), checked before deriving the whole case."""
        if self.strategy is not None and _window_pick(op.name, "strategy", seed, strategy_window(op)) != self.strategy:
            return False
        if self.dtype is not None and _window_pick(op.name, "dtype", seed, op.dtypes) != self.dtype:
            return False
        if self.layout is not None and _window_pick(op.name, "layout", seed, op.layouts) != self.layout:
            return False
        return (
            self.distribution is None
            or _window_pick(op.name, "distribution", seed, op.distributions) == self.distribution
        )


def also_needs(op: OpConfig, dtypes: tuple[str, ...]) -> list[Need]:
    """Each ``also`` size of each dim, in each of ``dtypes`` (the run's), with values that can show a bug:
    a code path a library takes only from 32768 rows up is reached by every run."""
    return [
        Need(f"{name}={v} {d}", dim=name, value=v, dtype=d, plain=True)
        for name in sorted(op.dims)
        for v in op.dims[name].also
        for d in dtypes
    ]


def minimum_needs(op: OpConfig) -> list[Need]:
    """Every dim at its minimum (the smallest candidate of a candidate list), with values that can show a bug."""
    out = []
    for name in sorted(op.dims):
        dim = op.dims[name]
        low = min(dim.candidates) if dim.candidates is not None else dim.min
        out.append(Need(f"{name}={low}", dim=name, value=low, plain=True))
    return out


def pair_needs(op: OpConfig) -> list[Need]:
    """Each (dtype, layout) pair of the op, at a shape whose dims are 2 or more (thorough runs): a kernel that
    ignores strides in one dtype only (a dtype-specific code path) is otherwise caught by chance, in about 9
    of 10 runs of 24 cases over 3 dtypes and 3 layouts."""
    if len(op.dtypes) < 2 or len(op.layouts) < 2:
        return []
    wide = tuple(sorted(n for n, d in op.dims.items() if _reaches_two(d)))
    return [Need(f"{d} {lay}", dtype=d, layout=lay, wide=wide) for d in op.dtypes for lay in op.layouts]


def _reaches_two(dim: DimSpec) -> bool:
    return (max(dim.candidates) if dim.candidates is not None else dim.max) >= 2


def _takes(op: OpConfig, dist: str) -> bool:
    """Whether some float input of the op can draw from ``dist`` (the op lists it, an input allows it)."""
    return dist in op.distributions and any(
        (i.dtype is None or dt.is_float(i.dtype)) and (i.distributions is None or dist in i.distributions)
        for i in op.inputs
    )


def structure_needs(op: OpConfig) -> list[Need]:
    """Each structure distribution the op lists, at a boundary shape (thorough runs)."""
    return [
        Need(f"{d} at a boundary shape", distribution=d, strategy="boundary")
        for d in STRUCTURE_DISTRIBUTIONS
        if _takes(op, d)
    ]


def quick_needs(op: OpConfig) -> list[Need]:
    """Each of ``QUICK_DISTRIBUTIONS`` the op lists (quick runs)."""
    return [Need(d, distribution=d) for d in QUICK_DISTRIBUTIONS if _takes(op, d)]


def cover(
    op: OpConfig,
    specs: list[CaseSpec],
    needs: list[Need],
    *,
    accept: Callable[[CaseSpec], bool] | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> list[CaseSpec]:
    """``specs`` with each need met by at least one case, as far as the count allows.

    For each need no case meets, in order, the first seed after the run's last one that ``accept``
    keeps and that meets it replaces the last case that is not pinned, not itself a replacement and
    not the only case meeting a need met so far; so the count stays what was asked and every case
    still replays from (op, seed). At most half of the unpinned cases are replaced (needs are met in
    order, so a short run covers the first ones). Pinned cases come first, the others in seed order.
    Runs with fewer than ``COVER_FROM`` unpinned cases are left as asked.
    """
    pinned = set(op.seeds)
    free = [i for i, sp in enumerate(specs) if sp.seed not in pinned]
    if len(free) < COVER_FROM:
        return specs
    out = list(specs)
    start = max(sp.seed for sp in specs) + 1
    met: list[Need] = []
    budget = len(free) // 2  # at most half the run stands in for needs: ordinary cases find ordinary bugs
    for need in needs:
        if not free or budget <= 0:
            break
        if any(need.met(sp) for sp in out):
            met.append(need)
            continue
        found = _find(op, need, start, accept, max_elements)
        if found is None:
            continue
        victim = next((i for i in reversed(free) if _spare(out, i, found, met)), None)
        if victim is None:
            continue
        out[victim] = found
        free.remove(victim)
        budget -= 1
        start = found.seed + 1
        met.append(need)
    return [sp for sp in out if sp.seed in pinned] + sorted((sp for sp in out if sp.seed not in pinned), key=_seed)


def _find(
    op: OpConfig,
    need: Need,
    start: int,
    accept: Callable[[CaseSpec], bool] | None,
    max_elements: int,
) -> CaseSpec | None:
    """The first seed from ``start`` whose case meets ``need`` and passes ``accept`` (bounded scan)."""
    span = 64 * COVER_FROM * max(len(op.dtypes), 1)
    if need.distribution is not None:
        span *= len(op.distributions) // 4 + 1
    if need.dim is not None and need.dtype is not None:  # an also size: one boundary value of one dtype
        span *= 4
    for seed in range(start, start + span):
        if seed in op.seeds or not need.may_meet(op, seed):
            continue
        spec = derive_case(op, seed, max_elements)
        if need.met(spec) and (accept is None or accept(spec)):
            return spec
    return None


def _spare(out: list[CaseSpec], i: int, new: CaseSpec, met: list[Need]) -> bool:
    """Whether ``out[i]`` may give way to ``new``: every need met so far stays met."""
    rest = out[:i] + out[i + 1 :] + [new]
    return all(any(n.met(sp) for sp in rest) for n in met)


def cover_minimums(
    op: OpConfig,
    specs: list[CaseSpec],
    *,
    accept: Callable[[CaseSpec], bool] | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> list[CaseSpec]:
    """``specs`` with every dim at its minimum in at least one case (:func:`cover` with :func:`minimum_needs`)."""
    return cover(op, specs, minimum_needs(op), accept=accept, max_elements=max_elements)


def _seed(spec: CaseSpec) -> int:
    return spec.seed


def plan_thorough(
    op: OpConfig,
    base_seed: int,
    count: int,
    *,
    accept: Callable[[CaseSpec], bool] | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    cancel: threading.Event | None = None,
) -> list[CaseSpec]:
    """``count`` cases from ``base_seed`` (pinned first) covering dim minimums and structure distributions."""
    specs = list(iter_seeds(op, base_seed, count, accept=accept, max_elements=max_elements, cancel=cancel))
    needs = also_needs(op, op.dtypes) + minimum_needs(op) + structure_needs(op) + pair_needs(op)
    return cover(op, specs, needs, accept=accept, max_elements=max_elements)


def half_precision_quota(op: OpConfig, count: int, main: tuple[str, ...]) -> list[tuple[str, int]]:
    """(dtype, cases) of the half-precision cases a quick run of ``count`` adds when quick dtypes are unset:
    ``max(1, count // 8)`` per half dtype the op lists beyond ``main``, at most ``count // 2`` in all."""
    budget, each = count // 2, max(1, count // 8)
    out = []
    for h in HALF_DTYPES:
        if h in op.dtypes and h not in main and budget > 0:
            take = min(each, budget)
            out.append((h, take))
            budget -= take
    return out


def plan_quick(
    op: OpConfig,
    base_seed: int,
    count: int,
    dtypes: tuple[str, ...] | None = None,
    *,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    cancel: threading.Event | None = None,
) -> list[CaseSpec]:
    """The cases of a quick run: ``dtypes`` (``[ci] quick_dtypes``; None: not set) at quick shapes.

    Not set means float32 plus a few float16/bfloat16 cases at a boundary shape with an
    accumulator-stressing distribution (:func:`half_precision_quota`); set means only those dtypes.
    Dtypes the op does not list fall back to its first dtype. Pinned seeds come first.
    """
    main = tuple(d for d in (dtypes or ("float32",)) if d in op.dtypes) or op.dtypes[:1]
    accept = mode_filter(op, dtypes=main, strategies=quick_strategies(op))
    extras = half_precision_quota(op, count, main) if dtypes is None else []
    main_count = count - sum(m for _, m in extras)
    specs = list(iter_seeds(op, base_seed, main_count, accept=accept, max_elements=max_elements, cancel=cancel))
    needs = also_needs(op, main) + minimum_needs(op) + quick_needs(op)
    specs = cover(op, specs, needs, accept=accept, max_elements=max_elements)
    stress = tuple(d for d in ACCUMULATOR_STRESS if d in op.distributions) or op.distributions
    for half, m in extras:

        def keep(spec: CaseSpec, half: str = half) -> bool:
            return spec.dtype == half and spec.strategy == "boundary" and spec.distribution in stress

        scan = m * 64 * max(len(op.dtypes), 1) * max(len(op.distributions), 1)
        specs += iter_seeds(
            op, base_seed, m, accept=keep, max_elements=max_elements, pinned=False, scan=scan, cancel=cancel
        )
    halves = tuple(h for h, _ in extras)
    if halves and any(d.also for d in op.dims.values()):  # the also sizes in the half-precision dtypes too
        quick_halves = mode_filter(op, dtypes=halves, strategies=quick_strategies(op))
        specs = cover(op, specs, also_needs(op, halves), accept=quick_halves, max_elements=max_elements)
    pinned = set(op.seeds)
    return [sp for sp in specs if sp.seed in pinned] + sorted((sp for sp in specs if sp.seed not in pinned), key=_seed)


def plan_cases(
    op: OpConfig,
    mode: str,
    base_seed: int,
    count: int,
    *,
    quick_dtypes: tuple[str, ...] | None = None,
    accept: Callable[[CaseSpec], bool] | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    cancel: threading.Event | None = None,
) -> list[CaseSpec]:
    """The cases of a run in ``mode`` ("quick": :func:`plan_quick`, ignoring ``accept``; else :func:`plan_thorough`).

    ``count`` is at most ``MAX_ITERATIONS`` (UsageError); a set ``cancel`` stops planning with
    :class:`PlanCancelled`.
    """
    check_count(count)
    if mode == "quick":
        return plan_quick(op, base_seed, count, quick_dtypes, max_elements=max_elements, cancel=cancel)
    return plan_thorough(op, base_seed, count, accept=accept, max_elements=max_elements, cancel=cancel)


def run_filter(
    op: OpConfig,
    mode: str,
    *,
    quick_dtypes: tuple[str, ...] | None = None,
    accept: Callable[[CaseSpec], bool] | None = None,
) -> Callable[[CaseSpec], bool]:
    """Whether a case belongs to a run of ``mode`` (what :func:`plan_cases` draws from): a budget that trades
    planned cases for smaller ones picks only among these, so a quick run stays quick and a fuzz filter holds."""
    if mode != "quick":
        return accept or (lambda _spec: True)
    main = tuple(d for d in (quick_dtypes or ("float32",)) if d in op.dtypes) or op.dtypes[:1]
    plain = mode_filter(op, dtypes=main, strategies=quick_strategies(op))
    halves = {h for h, _ in half_precision_quota(op, 16, main)} if quick_dtypes is None else set()
    stress = tuple(d for d in ACCUMULATOR_STRESS if d in op.distributions) or op.distributions

    # a cut's stand-ins for the half-precision classes (a tile class in bfloat16) may be small-scope where the
    # plan's own are (cost = "high"): the planned half-precision cases stay at a boundary shape
    shapes = ("boundary", "small") if op.cost == "high" else ("boundary",)

    def keep(spec: CaseSpec) -> bool:
        return plain(spec) or (spec.dtype in halves and spec.strategy in shapes and spec.distribution in stress)

    return keep


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
