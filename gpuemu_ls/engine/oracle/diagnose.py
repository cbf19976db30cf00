"""One line that says when an op fails and where the error sits, confirmed by targeted cases.

A condition is a predicate over case features: a layout, dtype or value distribution (or a set of
them); a dim equal to a value, not a multiple of 2**k, not a power of two (a block of next_power_of_2(N),
once passing cases tell it from every block that fits), above or below a threshold; the largest input
magnitude above 2**k; and conjunctions of two (not with the power of two, a reading of its own). After an
op fails, every such condition that all its failing cases meet is a *candidate*. Candidates are then told
apart by **confirmation cases**: the simplest failing case with one feature changed (a dim set to a size
that separates tile sizes 32, 64, 128 and 256, another layout, dtype or distribution), each chosen to split
the candidates that still fit, at most ``PROBE_BUDGET`` per op. A candidate that a confirmation case
refutes (the op fails where it says it should not) is dropped. The last ``CHALLENGES`` of them test the
condition about to be stated where it says the op passes (and, for "iff", where it says it fails), so no
condition is stated that no case could have refuted; a run of few cases (--fail-fast) also proposes
conditions from the planned cases' values and tries the op's default dims first.

A condition is stated ("fails iff ...") only when confirmation cases ran and it is the one candidate
left that every case fits; sizes that no case told apart are named as such. Failing that, two triggers
("fails iff N > 2048 or max |input| >= 16") when a confirmation case shows each side alone decides
(``find_disjunction``). Otherwise the line says what is known: a necessary condition with the passing
cases that meet it too (the bug hides on some inputs; narrowed by a size exception such as "and N > 1"
when a confirmation case shows it), the candidates still open, or "not explained by shape, layout,
dtype or distribution". The location comes from the failing outputs' mismatch counts per axis, the rows
that hold -inf, and the op/reference ratio, and each finding names the bug it usually means.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..cases.plan import CaseSpec
    from ..config.model import DimSpec, OpConfig
    from .outcome import CaseResult, OpOutcome

#: Confirmation cases per failing op, at most.
PROBE_BUDGET = 16
#: Share of the run's input elements the confirmation cases may add (at least the budget's worth of cases the
#: size of the one varied).
COST_SHARE = 0.2
#: Confirmation cases of the budget kept to test the condition to be stated where it says the op passes.
CHALLENGES = 3
#: Runs of fewer cases than this propose conditions from the confirmation cases' planned values too.
SPARSE_RUN = 8
#: Further confirmation cases such a run may spend: it ran few cases of its own.
SPARSE_EXTRA = 8
#: Candidates (best first) a probe is chosen to split.
TOP_CANDIDATES = 40
#: Sizes worth a confirmation case: edges, small primes, and 3 * 2**k, which is a multiple of 2**k but
#: not of 2**(k+1), so one case tells a block of 2**k from the next (96: 32 from 64; 384: 128 from 256).
PROBE_SIZES = (1, 2, 3, 5, 7, 13, 31, 32, 33, 48, 63, 64, 65, 96, 127, 128, 129, 192, 255, 256, 257, 384, 511, 512)
PROBE_SIZES += (513, 768, 1023, 1024, 1025, 1536, 2048, 2049, 3072, 4096)

#: What a confirmation case runs: (the representative failing case's spec, feature changes) -> its result.
Probe = Callable[["CaseSpec", dict[str, Any]], "CaseResult | None"]


@dataclass(frozen=True)
class Predicate:
    text: str
    test: Callable[[Any], bool | None]  # None: cannot tell before the case has run (input magnitudes)
    rank: int
    dim: str | None = None
    block: int | None = None
    threshold: int | None = None
    kind: str = ""
    narrowed: bool = False  # "A and N > 1": the second part only excepts sizes that hide the bug
    parts: tuple[Predicate, ...] = ()  # the two sides of "A and B"


@dataclass(frozen=True)
class _Point:
    """A planned confirmation case, for predicting outcomes before it runs."""

    spec: CaseSpec
    features: dict[str, Any]


def _verdict(c: Any) -> str:
    """A case's status as the diagnosis reads it: an edge finding (failing under strict or not) is neither a
    failure nor a pass, so a diagnosis explains bug-tier failures only (edge findings get their own line)."""
    return "edge" if getattr(c, "tier", None) == "edge" else str(c.status)


def _unjudged(c: Any) -> bool:
    """A passing case that judged no element (every one out of range or the reference's NaN): it passed
    because nothing could be checked, so it is no evidence that the bug is absent there ("fails iff N % 64
    != 0 and distribution != boundary" from a boundary case whose every row sum overflowed)."""
    comparisons = getattr(c, "comparisons", None)
    return bool(comparisons) and c.judged() == 0


def _attr(attr: str, v: str) -> Callable[[Any], bool]:
    return lambda c: getattr(c.spec, attr) == v


def _input_max(c: Any) -> float | None:
    v = (c.features or {}).get("input_max")
    return float(v) if isinstance(v, (int, float)) else None


def _atoms(cases: list[Any], bad: list[Any], planned: Sequence[Any] = ()) -> list[Predicate]:
    """Single conditions over the values the features take in ``cases`` and in the ``planned`` confirmation
    cases (not yet run), so a condition the cases run so far cannot state can still be put to the test."""
    preds: list[Predicate] = []
    seen = [*cases, *planned]
    for attr in ("layout", "dtype", "distribution"):
        values = sorted({getattr(c.spec, attr) for c in seen})
        if len(values) < 2:
            continue
        for v in values:
            preds.append(Predicate(f"{attr} == {v}", _attr(attr, v), 1, kind=attr))
            if len(values) > 2:
                # "distribution != subnormal" is the weakest claim: values that hide a bug, not where it shows
                rank = 5 if attr == "distribution" else 1
                preds.append(
                    Predicate(f"{attr} != {v}", lambda c, a=attr, v=v: getattr(c.spec, a) != v, rank, kind=attr)
                )
        bad_values = sorted({getattr(c.spec, attr) for c in bad})
        if 2 <= len(bad_values) <= 6 and len(bad_values) < len(values):
            s = frozenset(bad_values)
            preds.append(
                Predicate(
                    f"{attr} in {{{', '.join(bad_values)}}}",
                    lambda c, a=attr, s=s: getattr(c.spec, a) in s,
                    1 + len(bad_values) // 2,
                    kind=attr,
                )
            )
    dims = sorted({d for c in seen for d in c.spec.dims})
    for d in dims:
        values = sorted({c.spec.dims.get(d, 0) for c in seen})
        if len(values) < 2:
            continue
        for v in sorted({c.spec.dims.get(d, 0) for c in bad})[:3]:
            preds.append(Predicate(f"{d} == {v}", lambda c, d=d, v=v: c.spec.dims.get(d) == v, 2, dim=d, kind="equal"))
        top = max(values)
        k = 1
        while (1 << k) <= max(top, 2) and k <= 13:
            b = 1 << k
            preds.append(
                Predicate(
                    f"{d} % {b} != 0",
                    lambda c, d=d, b=b: c.spec.dims.get(d, 0) % b != 0,
                    3,
                    dim=d,
                    block=b,
                    kind="modulo",
                )
            )
            k += 1
        if _pow2_told_apart(d, cases, bad):
            preds.append(
                Predicate(
                    f"{d} is not a power of two", lambda c, d=d: _not_pow2(c.spec.dims.get(d, 0)), 4, dim=d, kind="pow2"
                )
            )
        for i, t in enumerate(values[:-1]):
            t = _nice_threshold(t, values[i + 1])
            preds.append(
                Predicate(
                    f"{d} > {t}", lambda c, d=d, t=t: c.spec.dims.get(d, 0) > t, 4, dim=d, threshold=t, kind="above"
                )
            )
        for t in values[1:]:
            preds.append(
                Predicate(
                    f"{d} < {t}", lambda c, d=d, t=t: c.spec.dims.get(d, 0) < t, 4, dim=d, threshold=t, kind="below"
                )
            )
    maxes = sorted({m for m in (_input_max(c) for c in cases) if m is not None})
    if len(maxes) >= 2:
        for k in sorted({int(m).bit_length() for m in maxes if m >= 1}):
            t = 1 << k
            if t <= 4 or not _magnitude_gap(maxes, t):
                continue

            def big(c: Any, t: int = t) -> bool | None:
                m = _input_max(c)
                return None if m is None else m >= t

            preds.append(Predicate(f"max |input| >= {t}", big, 3, threshold=t, kind="magnitude"))
    return preds + _value_atoms(cases)


def _not_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) != 0


def _pow2_told_apart(d: str, cases: list[Any], bad: list[Any]) -> bool:
    """Whether the cases support "d is not a power of two" (a block of next_power_of_2(d) whose padding
    leaks) apart from every block reading "d % b != 0" that also fits the failing cases: every failing size
    is off a power of two, a power of two of 4 or more passes, and for each such b a power of two in
    [2, b) passes (where the block reading says it fails). A passing d = 1 is no evidence: a one-element
    row hides most bugs. Until then the block reading stands, as it always has."""
    failing = {id(c) for c in bad}
    fail = [c.spec.dims.get(d, 0) for c in bad]
    ok = [c.spec.dims.get(d, 0) for c in cases if id(c) not in failing]
    if not fail or not all(_not_pow2(v) for v in fail) or not any(v >= 4 and not _not_pow2(v) for v in ok):
        return False
    b = 2
    while b <= max(fail + ok):  # every block reading the atoms hold
        if all(v % b for v in fail) and not any(2 <= v < b and not _not_pow2(v) for v in ok):
            return False
        b *= 2
    return True


def _feature_of(c: Any, key: str) -> float | None:
    v = (c.features or {}).get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _count_above_zero(key: str) -> Callable[[Any], bool | None]:
    """A test that a case's count feature ``key`` is positive (None where the case has no such count)."""

    def test(c: Any) -> bool | None:
        n = _feature_of(c, key)
        return None if n is None else n > 0

    return test


def _splits(cases: list[Any], key: str) -> bool:
    """Whether the count feature ``key`` is positive in some cases and zero in others."""
    counts = [n for c in cases if (n := _feature_of(c, key)) is not None]
    return any(n > 0 for n in counts) and any(n == 0 for n in counts)


def _value_atoms(cases: list[Any]) -> list[Predicate]:
    """Conditions on what the inputs held, for bugs that random values trigger only now and then: exact
    ties of a narrower output dtype (a rounding bug), a row wholly below -t (a max started at 0), a row
    wholly -inf (a fully masked row)."""
    preds: list[Predicate] = []
    for key, way in (("input_ties_down", "toward"), ("input_ties_up", "away from")):
        if _splits(cases, key):
            dtype = next(str(c.features.get("ties_dtype")) for c in cases if (_feature_of(c, key) or 0) > 0)
            text = f"the input holds {dtype} ties that nearest-even rounds {way} zero"
            threshold = 0 if way == "toward" else 1
            preds.append(Predicate(text, _count_above_zero(key), 3, kind="ties", threshold=threshold))
    if _splits(cases, "masked_input_rows"):
        preds.append(
            Predicate("an input row is wholly -inf", _count_above_zero("masked_input_rows"), 3, kind="masked_row")
        )
    # how far below 0 each case's lowest row lies (0 for a case whose every row reaches 0)
    depth = sorted({max(-m, 0.0) for c in cases if (m := _feature_of(c, "row_max_min")) is not None})
    seen = sum(1 for c in cases if _feature_of(c, "row_max_min") is not None)
    if seen >= 2:
        for k in sorted({int(d).bit_length() for d in depth if d >= 1}):
            t = 1 << k
            if t <= 4 or not _magnitude_gap(depth, t):
                continue

            def sunk(c: Any, t: int = t) -> bool | None:
                m = _feature_of(c, "row_max_min")
                return None if m is None else m <= -t

            preds.append(Predicate(f"an input row lies wholly below -{t}", sunk, 3, threshold=t, kind="low_row"))
    return preds


def _magnitude_gap(maxes: list[float], t: int) -> bool:
    """Whether the magnitudes seen leave a factor of 2 free around ``t``.

    A threshold inside one cluster of magnitudes (3632 passing, 4096 failing, both `positive` values) splits
    samples of the same values: what it separates is something else (the row length), not the magnitude.
    """
    below = max((m for m in maxes if m < t), default=0.0)
    above = min((m for m in maxes if m >= t), default=float("inf"))
    return above >= 2 * below


def _nice_threshold(lo: int, hi: int) -> int:
    """A threshold between two adjacent observed values: the largest power of two in [lo, hi), else lo.

    Tiles are powers of two: with passing K <= 17 and failing K >= 33 seen, "K > 32" is the claim the
    evidence supports and the one that names the tile.
    """
    p = 1
    while p * 2 < hi:
        p *= 2
    return p if lo <= p < hi else lo


def _holds(pred: Predicate, c: Any) -> bool:
    return pred.test(c) is True


def _necessary(pred: Predicate, bad: list[Any]) -> bool:
    return all(_holds(pred, c) for c in bad)


def _hits(pred: Predicate, good: list[Any]) -> int:
    return sum(1 for c in good if _holds(pred, c))


def _joined(a: Predicate, b: Predicate, word: str, decides: bool, rank: int, sep: str, block: bool) -> Predicate:
    """``a and b`` (``decides`` False: either side false makes it false) or ``a or b`` (``decides`` True), in
    three-valued logic: undecided (None) when no side decides and a side cannot tell yet."""

    def test(c: Any) -> bool | None:
        x, y = a.test(c), b.test(c)
        if x is decides or y is decides:
            return decides
        return None if x is None or y is None else not decides

    return Predicate(
        f"{a.text} {word} {b.text}",
        test,
        rank + a.rank + b.rank,
        dim=a.dim or b.dim,
        block=(a.block or b.block) if block else None,
        threshold=a.threshold or b.threshold,
        kind=f"{a.kind}{sep}{b.kind}",
        parts=() if decides else (a, b),
    )


def _conj(a: Predicate, b: Predicate) -> Predicate:
    return _joined(a, b, "and", False, 10, "+", block=True)


def candidates(bad: list[Any], good: list[Any], planned: Sequence[Any] = ()) -> list[Predicate]:
    """Every condition all failing cases meet (atoms, then pairs of them), best first: fewest passing
    cases meeting it, then the simplest. ``planned``: confirmation cases not yet run, whose features count
    as values a condition may split on (with no passing case, the failing ones alone offer none)."""
    atoms = [p for p in _atoms(bad + good, bad, planned) if _necessary(p, bad)]
    hits = {id(p): _hits(p, good) for p in atoms}
    out = list(atoms)
    for a, b in itertools.combinations(sorted(atoms, key=lambda p: p.rank), 2):
        if a.kind == b.kind and a.dim == b.dim:
            continue  # two claims on one feature: never the simplest reading
        if "pow2" in (a.kind, b.kind):
            continue  # a padded power-of-two block is a reading of its own, never a part of one
        pair = _conj(a, b)
        h = _hits(pair, good)
        if h < min(hits[id(a)], hits[id(b)]):
            hits[id(pair)] = h
            out.append(pair)
    return sorted(
        out, key=lambda p: (hits[id(p)], p.rank, p.block or 0, -(p.threshold or 0) if p.kind == "below" else 0)
    )


def find_condition(bad: list[Any], good: list[Any]) -> Predicate | None:
    """The simplest predicate true for every bad case and no good case, or None."""
    if not bad:
        return None
    if not good:
        return Predicate("always", lambda c: True, 0, kind="always")
    exact = [p for p in candidates(bad, good) if _hits(p, good) == 0]
    if not exact:
        return None
    best = exact[0]
    if best.kind == "modulo":
        blocks = sorted(p.block for p in exact if p.kind == "modulo" and p.dim == best.dim and p.block)
        if len(blocks) > 1:  # the evidence fits several tile sizes: say so rather than pick one
            d = best.dim
            text = f"{d} % {blocks[0]} != 0 (or any block up to {blocks[-1]}: no tested {d} tells them apart)"
            return Predicate(text, best.test, best.rank, dim=best.dim, block=best.block, kind="modulo")
    return best


def find_necessary(bad: list[Any], good: list[Any]) -> tuple[Predicate, int] | None:
    """A predicate every bad case satisfies and at most 3/4 of the good ones do (fewest first), with that count.

    Bugs hide on some inputs (a tail error multiplied by zeros, a NaN row that is NaN in both): then no
    condition separates exactly, but one is still *necessary*, and that is worth saying. When few cases
    fail, "distribution != large" (values that hide the bug) says less than a condition on where it shows,
    so it comes last; an atom is narrowed by a size exception a confirmation case showed (``_narrow``).
    """
    if not bad or not good:
        return None
    limit = (3 * len(good)) // 4
    fits = [(p, h) for p in candidates(bad, good) if (h := _hits(p, good)) <= limit]
    # one feature before two: a pair that only explains where the bug hides says less than the atom it narrows
    atoms = [ph for ph in fits if "+" not in ph[0].kind]
    minority = len(bad) <= len(good)
    if atoms:
        # each atom as narrowed, then compared by the passing cases with ordinary values that still meet it:
        # such a case is evidence against a reading, not values that hide the bug, so "N is not a power of two
        # and N > 127" with N = 1664 (normal values) passing loses to "N % 128 != 0 and N > 127", which only
        # constant rows meet, though its atom alone meets more passing cases
        rivals = [p for p in _atoms(bad + good, bad) if _necessary(p, bad) and p.kind != "pow2"]
        fits = [(_narrow(p, h, bad, good, rivals) or (p, h), p, h) for p, h in atoms]
        best = min(
            fits,
            key=lambda f: (minority and _hiding_values(f[1]), _plain_hits(f[0][0], good), f[2], f[1].rank),
        )
        return best[0]
    return min(fits, key=lambda ph: (minority and _hiding_values(ph[0]), ph[1], ph[0].rank), default=None)


#: Value distributions that hide no bug a condition on shapes, layouts or dtypes names.
PLAIN_VALUES = ("normal", "uniform")


def _plain_hits(pred: Predicate, good: list[Any]) -> int:
    """Passing cases with ordinary values (normal, uniform) that meet ``pred``: evidence against it."""
    return sum(1 for c in good if c.spec.distribution in PLAIN_VALUES and _holds(pred, c))


def _narrow(
    atom: Predicate, hits: int, bad: list[Any], good: list[Any], necessary: list[Predicate]
) -> tuple[Predicate, int] | None:
    """``atom and N > 1`` (or ``and N % 64 != 0``) when a condition on a size is necessary too and shown
    to matter.

    "N % 64 != 0" with N == 1 passing: the one-element row hides the bug. The size is added only when it
    excepts at least two passing cases and a confirmation case that meets the atom differs from a failing
    case in that dim alone (it moved the size across the bound), so it is never a coincidence of the
    sizes drawn.
    """
    best: tuple[tuple[int, int, int], Predicate] | None = None
    inside = [c for c in good if _holds(atom, c)]
    # ``necessary``: the rivals a size exception is told apart from, block and bound readings ("N is not a
    # power of two" is stated alone, never narrowed)
    for e in necessary:
        if e.kind not in ("above", "below", "modulo") or (e.kind, e.dim) == (atom.kind, atom.dim):
            continue
        # a block before a bound in the text: "N % 128 != 0 and N > 128" is a tail read wrong past the first
        # block, named by its block
        first, second = (e, atom) if e.kind == "modulo" and atom.kind in ("above", "below") else (atom, e)
        pair = dataclasses.replace(_conj(first, second), narrowed=True)
        h = _hits(pair, good)
        # a block before a bound (the simpler reading); of sizes the cases do not tell apart, the weakest
        # claim: N % 64 before N % 8, N > 1 before N > 32
        weakest = {"modulo": -(e.block or 0), "above": e.threshold or 0, "below": -(e.threshold or 0)}[e.kind]
        key = (h, e.rank, weakest)
        # two passing cases excepted at least: one is what a single case that hides the bug would give
        if h <= hits - 2 and (best is None or key < best[0]) and _flips(e, bad, inside, necessary):
            best = (key, pair)
    return (best[1], best[0][0]) if best else None


#: Conditions on the input values rather than the case's parameters: a confirmation case changes the distribution.
VALUE_KINDS = ("magnitude", "ties", "low_row", "masked_row")
#: Kinds a side of "A or B" may have: a size bound, an input magnitude, a layout, dtype or value kind.
DISJUNCT_KINDS = ("above", "below", "magnitude", "layout", "dtype", "distribution")


def _feature(pred: Predicate) -> str | None:
    """The one case feature a single condition reads (``dims.N``, ``layout``, ...); magnitudes are values."""
    if pred.kind in ("layout", "dtype", "distribution"):
        return pred.kind
    if pred.kind in VALUE_KINDS:
        return "distribution"
    if pred.kind in ("equal", "modulo", "pow2", "above", "below") and pred.dim:
        return f"dims.{pred.dim}"
    return None


def _differences(x: Any, y: Any) -> set[str]:
    a, b = x.spec, y.spec
    out = {attr for attr in ("layout", "dtype", "distribution") if getattr(a, attr) != getattr(b, attr)}
    out |= {f"dims.{d}" for d in set(a.dims) | set(b.dims) if a.dims.get(d) != b.dims.get(d)}
    return out


def _flips(pred: Predicate, bad: list[Any], good: list[Any], rivals: list[Predicate] | None = None) -> bool:
    """Whether a failing case meeting ``pred`` and a passing confirmation case not meeting it differ in
    ``pred``'s feature alone: the evidence that this feature, and not another, decides the outcome.

    The passing case must not also break a rival reading of that feature that every failing case meets:
    N = 384 passing after N = 381 failing refutes "N % 64 != 0" as much as it supports "N < 384".
    """
    feat = _feature(pred)
    if feat is None:
        return False
    # no rival: one size ("N == 4096", what any one failing size fits) or values that hide the bug
    # ("distribution != normal", what any change of values to ordinary ones fits); neither is ever a side
    others = [
        r
        for r in rivals or []
        if r.kind not in (pred.kind, "equal")  # another bound of the same kind is the same reading
        and not _hiding_values(r)
        and _feature(r) == feat
        and _necessary(r, bad)
    ]
    # the passing one a confirmation case: run cases that differ in one feature only are chance pairs
    ys = [
        y
        for y in good
        if (y.features or {}).get("probe") and pred.test(y) is False and not any(r.test(y) is False for r in others)
    ]
    return any(_differences(x, y) == {feat} for x in bad if _holds(pred, x) for y in ys)


def _disjoin(a: Predicate, b: Predicate) -> Predicate:
    return _joined(a, b, "or", True, 20, "|", block=False)


def disjunctions(bad: list[Any], good: list[Any]) -> list[tuple[Predicate, Predicate, Predicate]]:
    """``(A or B, A, B)`` for two single conditions on different features that no passing case meets and
    that together cover every failing case, each alone on at least two of them; simplest first.

    "Long rows or large values" (a half-precision sum that stalls or overflows) is one bug with two
    triggers: no single condition or pair of conditions joined by "and" states it.
    """
    atoms = [
        p
        for p in _atoms(bad + good, bad)
        if p.kind in DISJUNCT_KINDS and not _hiding_values(p) and _hits(p, good) == 0 and any(_holds(p, c) for c in bad)
    ]
    out = []
    for a, b in itertools.combinations(sorted(atoms, key=lambda p: p.rank), 2):
        if _feature(a) == _feature(b):
            continue
        only_a = sum(1 for c in bad if _holds(a, c) and not _holds(b, c))
        only_b = sum(1 for c in bad if _holds(b, c) and not _holds(a, c))
        if only_a >= 2 and only_b >= 2 and all(_holds(a, c) or _holds(b, c) for c in bad):
            out.append((_disjoin(a, b), a, b))
    return sorted(out, key=lambda t: t[0].rank)


def find_disjunction(bad: list[Any], good: list[Any]) -> Predicate | None:
    """The simplest "A or B" (see :func:`disjunctions`) whose sides are each shown to matter alone: a
    failing case that meets one side only, and a passing case that differs from it in that side's feature
    alone. Without both such pairs two conditions fit the cases by chance, and none is stated."""
    rivals = _atoms(bad + good, bad)
    for d, a, b in disjunctions(bad, good):
        only_a = [c for c in bad if _holds(a, c) and not _holds(b, c)]
        only_b = [c for c in bad if _holds(b, c) and not _holds(a, c)]
        if _flips(a, only_a, good, rivals) and _flips(b, only_b, good, rivals):
            return d
    return None


def _representative(bad: list[CaseResult]) -> CaseResult:
    """The failing case to vary: the plainest (float32, contiguous, ordinary values), then the smallest."""
    # ordinary values first: wide rows hide a leak of exp(0 - max), small ones an absolute error
    plain_dist = ("normal", "uniform", "integers", "wide", "small")

    def key(c: CaseResult) -> tuple[Any, ...]:
        size = sum(_numel(s) for s in c.spec.shapes.values())
        dist = plain_dist.index(c.spec.distribution) if c.spec.distribution in plain_dist else len(plain_dist)
        return (dist, c.spec.dtype != "float32", c.spec.layout != "contiguous", size)

    return min(bad, key=key)


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _cost(op: OpConfig, dims: dict[str, int]) -> int:
    """Input elements of a case with these dims: what running it costs, roughly."""
    from ..cases.plan import shape_of

    return sum(_numel(shape_of(i.shape, dims)) for i in op.inputs) or 1


def _size(point: _Point) -> int:
    """How big a planned case is (the product of its dims): the cheaper of two equally useful cases runs."""
    return _numel(point.spec.dims.values())


def _probe_values(dim: DimSpec) -> list[int]:
    if dim.candidates is not None:
        return sorted(set(dim.candidates))
    vals = {dim.min, dim.max, dim.default, *PROBE_SIZES}
    return sorted(v for v in vals if dim.min <= v <= dim.max)


def _aligned_near(dim: DimSpec, v: int | None) -> list[int]:
    """For each block b, the size nearest ``v`` that is a multiple of b but not of 2b: one case tells a block
    of b from the next at the failing size's own scale ("N % 2 != 0" from "N % 128 != 0" where only N > 512
    fails, which 3 * 2**k sizes below 512 cannot)."""
    if v is None or dim.candidates is not None:
        return []
    out = []
    b = 1
    while 2 * b <= dim.max:
        near = round((v - b) / (2 * b)) * 2 * b + b
        if dim.min <= near <= dim.max:
            out.append(near)
        b *= 2
    return out


def _probe_points(base: CaseResult, op: OpConfig) -> list[tuple[dict[str, Any], _Point]]:
    """Single-feature changes of the representative failing case, with the spec each would run."""
    out: list[tuple[dict[str, Any], _Point]] = []
    spec = base.spec
    for name in sorted(op.dims):
        for v in sorted({*_probe_values(op.dims[name]), *_aligned_near(op.dims[name], spec.dims.get(name))}):
            if v == spec.dims.get(name):
                continue
            dims = dict(spec.dims, **{name: v})
            out.append(({"dims": {name: v}}, _Point(dataclasses.replace(spec, dims=dims), {})))
    for attr, options in (("layout", op.layouts), ("dtype", op.dtypes), ("distribution", op.distributions)):
        for v in options:
            if v != getattr(spec, attr):
                out.append(({attr: v}, _Point(dataclasses.replace(spec, **{attr: v}), {})))
    return out


def _choose(
    live: list[Predicate], points: list[tuple[dict[str, Any], _Point]], tested: set[bool]
) -> tuple[dict[str, Any], _Point] | None:
    """The confirmation case that splits the open candidates most against the best one; when none
    splits them, one that tests the best candidate where it has not been tested yet (``tested``: the
    outcomes it predicted for the confirmation cases so far): first a case it says passes (the
    condition made false, which refutes it if the op still fails), then one it says fails."""
    best = live[0]
    scored = []
    for changes, point in points:
        pb = best.test(point)
        if pb is None:
            continue
        # candidates near the top count most; a case the best says passes can refute it outright (the op
        # failing there), while one it says fails and that passes is weak evidence (bugs hide), so it
        # weighs more
        disagree = sum(1.0 / (i + 1) for i, p in enumerate(live[1:]) if (q := p.test(point)) is not None and q != pb)
        if disagree:
            scored.append((disagree * (1.5 if pb is False else 1.0), -_size(point), changes, point))
    if not scored:
        for want in (False, True):
            if want in tested:
                continue
            side = [(c, p) for c, p in points if best.test(p) is want]
            if side:
                return min(side, key=lambda cp: _size(cp[1]))
        return None
    top = max(scored, key=lambda t: (t[0], t[1]))
    return top[2], top[3]


def confirm(cases: list[CaseResult], op: OpConfig, probe: Probe, budget: int = PROBE_BUDGET) -> list[CaseResult]:
    """Run up to ``budget`` confirmation cases that split the candidate conditions; their results.

    Their inputs add up to at most ``COST_SHARE`` of the run's input elements (or ``budget`` cases the
    size of the failing case they vary or of the op's default dims, for short runs): a bound on the extra
    work that does not depend on the machine, so the same run gives the same diagnosis everywhere.
    """
    failing = [c for c in cases if _verdict(c) == "failed"] or [c for c in cases if _verdict(c) == "error"]
    if not failing:
        return []
    want = _verdict(failing[0])
    base = _representative(failing)
    # a share of the run, or the budget's worth of cases the size of the one varied or of the op's default
    # dims (short runs of small cases: a --fail-fast run that stops at N = 1 must still afford N = 128)
    defaults = {name: d.default for name, d in op.dims.items()}
    allowance = max(
        COST_SHARE * sum(_cost(op, c.spec.dims) for c in cases),
        budget * max(_cost(op, base.spec.dims), _cost(op, defaults)),
    )
    ran: list[CaseResult] = []
    canon: dict[str, Any] = {}
    for attr, options, prefer in (
        ("distribution", op.distributions, ("normal", "uniform")),
        ("dtype", op.dtypes, ("float32",)),
        ("layout", op.layouts, ("contiguous",)),
    ):
        plain = next((v for v in prefer if v in options), None)
        if plain is not None and getattr(base.spec, attr) != plain:
            canon[attr] = plain
    if canon and budget > 0 and _cost(op, base.spec.dims) <= allowance:
        # vary a plain failing case when there is one (ordinary values, float32, contiguous): odd values and
        # half precision hide many bugs (wide rows hide a leak of exp(0 - max), long float16 rows a small
        # one), and a confirmation case must be able to show the bug
        first = _run_probe(probe, base.spec, canon)
        allowance -= _cost(op, base.spec.dims)
        if first is not None:
            ran.append(first)
            if _verdict(first) == want:
                base = first
    moved = {name: v for name, v in defaults.items() if base.spec.dims.get(name) != v}
    if moved and len(ran) < budget and not any(_verdict(c) == "passed" for c in cases + ran):
        # nothing passed yet (a --fail-fast run, or a bug almost everywhere): the op's default dims, the "nice
        # shape" most kernels are right at, is the case likeliest to pass, and one passing case is what lets
        # the candidates be told apart (else each size probed near N = 1 only refutes "N < t" one t at a time)
        plain = _run_probe(probe, base.spec, {"dims": moved})
        allowance -= _cost(op, defaults)
        if plain is not None:
            ran.append(plain)
    points = _probe_points(base, op)
    # a run this short (a --fail-fast run stopped at its first failure) samples no feature's values well enough
    # to propose the conditions from them: those the planned cases could refute count too ("N > 32" with only
    # N = 3789 and the default N = 1024 run)
    sparse = len(cases) < SPARSE_RUN
    if sparse:
        budget += SPARSE_EXTRA
    for _ in range(budget - len(ran) - CHALLENGES):
        evidence = cases + ran
        bad = [c for c in evidence if _verdict(c) == want]
        good = [c for c in evidence if _verdict(c) == "passed"]
        pool = candidates(bad, good, [p for _, p in points] if sparse else [])
        if not pool:
            break
        floor = _hits(pool[0], good)
        # the candidates that fit best, then the next ones and the best single conditions: a bug that
        # hides on some inputs makes a narrow pair fit best where the true condition is one atom
        live = [p for p in pool if _hits(p, good) <= floor][:TOP_CANDIDATES]
        atoms = [p for p in pool if "+" not in p.kind][:8]
        live += [p for p in pool[:TOP_CANDIDATES] + atoms if p not in live][: max(0, TOP_CANDIDATES - len(live))]
        tested = {p for r in ran if (p := live[0].test(r)) is not None}
        points = [p for p in points if _cost(op, p[1].spec.dims) <= allowance]
        choice = _choose(live, points, tested)
        if choice is None:
            break
        changes, point = choice
        points = [p for p in points if p[0] != changes]
        allowance -= _cost(op, point.spec.dims)
        if (result := _run_probe(probe, base.spec, changes)) is not None:
            ran.append(result)
    if want == "failed":
        ran += _confirm_sides(cases, ran, op, probe, budget - len(ran) - CHALLENGES, allowance)
    ran += _challenge(cases, ran, base, op, probe, budget - len(ran), allowance, want)
    for other in _other_bases(cases, base, want):
        # a bug may hide at the representative case's values in a side's other value (a float16 tolerance
        # swallows the error of uniform values, not of large ones): each side is challenged there too
        if budget - len(ran) <= 0:
            break
        ran += _challenge(cases, ran, other, op, probe, budget - len(ran), allowance, want, own=True)
    return ran


def _other_bases(cases: list[CaseResult], base: CaseResult, want: str, most: int = 2) -> list[CaseResult]:
    """Failing cases whose dtype or distribution differs from ``base``'s, one per (dtype, distribution)."""
    seen = {(base.spec.dtype, base.spec.distribution)}
    out = []
    for c in cases:
        key = (c.spec.dtype, c.spec.distribution)
        if _verdict(c) == want and key not in seen and len(out) < most:
            seen.add(key)
            out.append(c)
    return out


def _run_probe(probe: Probe, spec: CaseSpec, changes: dict[str, Any]) -> CaseResult | None:
    """A confirmation case's result (None: it could not run), marked as one (``_flips`` reads the mark)."""
    result = probe(spec, changes)
    if result is not None:
        result.features = dict(result.features or {}, probe=True)
    return result


def _challenge(
    cases: list[CaseResult],
    ran: list[CaseResult],
    base: CaseResult,
    op: OpConfig,
    probe: Probe,
    budget: int,
    allowance: float,
    want: str,
    own: bool = False,
) -> list[CaseResult]:
    """Confirmation cases that try to refute the condition the line would state: the representative failing
    case with one feature changed so the condition is false (where it says the op passes), each side of "A
    and B" on its own; and for "fails iff", once, changed as far as it goes while the condition still holds
    (where it says the op fails: "N % 128 != 0" at N = 3). A condition no confirmation case could have refuted
    is only a pattern in the cases drawn ("fails only if layout != strided" because the one strided case drawn
    held subnormals); one refuted gives way to the next. Stops once the stated condition has stood both.
    ``own``: only this call's cases count as a side's challenge (``base`` is another failing case than the
    one the confirmation cases varied)."""
    out: list[CaseResult] = []
    tried: set[str] = set()
    far_tested: set[str] = set()
    every = _probe_points(base, op)
    for _ in range(max(budget, 0)):
        evidence = cases + ran + out
        bad = [c for c in evidence if _verdict(c) == want]
        good = [
            c
            for c in evidence
            if (_verdict(c) == "passed" and not _unjudged(c)) or (want == "error" and _verdict(c) == "failed")
        ]
        stated, exact = _stated(bad, good, want == "failed")
        if stated is None or stated.kind == "always":
            break
        passing = {id(c) for c in good}
        probes = [c for c in (out if own else good) if id(c) in passing and (c.features or {}).get("probe")]
        parts = stated.parts or (stated,)
        side = next((p for p in parts if not any(_refutes(c, p, parts) for c in probes)), None)
        points = [
            (changes, point)
            for changes, point in every
            if repr(changes) not in tried and _cost(op, point.spec.dims) <= allowance
        ]
        if side is not None:
            options = [(c, p) for c, p in points if _refutes(p, side, parts)]
            pick = min(options, key=lambda cp: _nearness(cp[0], base), default=None)
        elif exact and stated.text not in far_tested:
            far_tested.add(stated.text)
            read = {f for p in stated.parts or (stated,) if (f := _feature(p))}
            options = [(c, p) for c, p in points if stated.test(p) is True and _changed(c) in read]
            pick = max(options, key=lambda cp: _nearness(cp[0], base), default=None)
        else:
            break  # it passed where it says the op passes, and failed where it says it fails
        if pick is None:
            if side is not None:
                break
            continue
        changes, point = pick
        tried.add(repr(changes))
        allowance -= _cost(op, point.spec.dims)
        if (result := _run_probe(probe, base.spec, changes)) is not None:
            out.append(result)
    return out


def _refutes(case: Any, side: Predicate, parts: tuple[Predicate, ...]) -> bool:
    """Whether ``case`` is where a condition of ``parts`` says the op passes because of ``side`` alone: false
    there, every other side true (a float16 case at N = 16 challenges neither side of "dtype != float16 and
    N % 32 != 0": it passes whatever the dtype)."""
    return side.test(case) is False and all(q.test(case) is not False for q in parts if q is not side)


def _changed(changes: dict[str, Any]) -> str:
    """The feature a one-feature change sets, as :func:`_feature` names it (``dims.N``, ``layout``, ...)."""
    dims = changes.get("dims")
    return f"dims.{next(iter(dims))}" if dims else next(iter(changes))


def _nearness(changes: dict[str, Any], base: CaseResult) -> float:
    """How far a one-feature change moves a case: a size by its ratio to the current one (K = 96 is nearer
    K = 122 than K = 1 is), any other feature by one step."""
    dims = changes.get("dims")
    if not dims:
        return 1.0
    ((name, v),) = dims.items()
    cur = max(int(base.spec.dims.get(name, 1) or 1), 1)
    return abs(math.log(max(v, 1) / cur))


def _confirm_sides(
    cases: list[CaseResult], ran: list[CaseResult], op: OpConfig, probe: Probe, budget: int, allowance: float
) -> list[CaseResult]:
    """When no one condition fits but "A or B" does, the cases that show each side matters alone: a failing
    case that meets one side only, with that side's feature changed so it no longer holds (it must pass).

    Several rounds, since a case that fails there refutes the pair and another may take its place.
    """
    out: list[CaseResult] = []
    tried: set[tuple[Any, ...]] = set()
    for _ in range(3):
        evidence = cases + ran + out
        bad = [c for c in evidence if _verdict(c) == "failed"]
        good = [c for c in evidence if _verdict(c) == "passed"]
        if find_condition(bad, good) is not None or find_disjunction(bad, good) is not None:
            break
        pool = disjunctions(bad, good)
        if not pool:
            break
        _, a, b = pool[0]
        progressed = False
        for side, other in ((a, b), (b, a)):
            only = [c for c in bad if _holds(side, c) and not _holds(other, c)]
            if _flips(side, only, good, _atoms(bad + good, bad)):
                continue
            x = _representative(only)
            changes = _side_change(side, x, op)
            key = (x.seed, repr(changes))
            if changes is None or key in tried or budget - len(out) <= 0:
                continue
            tried.add(key)
            dims = dict(x.spec.dims, **changes.get("dims", {}))
            if _cost(op, dims) > allowance:
                continue
            allowance -= _cost(op, dims)
            if (result := _run_probe(probe, x.spec, changes)) is None:
                continue
            out.append(result)
            progressed = True
        if not progressed:
            break
    return out


def _side_change(pred: Predicate, x: CaseResult, op: OpConfig) -> dict[str, Any] | None:
    """The one-feature change of case ``x`` that makes ``pred`` false, nearest the boundary where one exists
    (N > 2048 -> N = 2048), so the case that passes differs from the failing one as little as it can."""
    if pred.kind in ("above", "below") and pred.dim in op.dims:
        values = _probe_values(op.dims[pred.dim])
        t = pred.threshold or 0
        if pred.kind == "above":
            options = [v for v in values if v <= t]
            return {"dims": {pred.dim: max(options)}} if options else None
        options = [v for v in values if v >= t]
        return {"dims": {pred.dim: min(options)}} if options else None
    if pred.kind == "pow2" and pred.dim in op.dims:
        v = x.spec.dims.get(pred.dim, 0)
        options = [p for p in _probe_values(op.dims[pred.dim]) if not _not_pow2(p)]
        return {"dims": {pred.dim: min(options, key=lambda p: (abs(p - v), p))}} if options else None
    attr = "distribution" if pred.kind in VALUE_KINDS else pred.kind
    choices = {"layout": op.layouts, "dtype": op.dtypes, "distribution": op.distributions}.get(attr)
    if not choices:
        return None
    prefer = {"layout": ("contiguous",), "dtype": ("float32",), "distribution": ("normal", "uniform")}[attr]
    ordered = [v for v in prefer if v in choices] + [v for v in choices if v not in prefer]
    for v in ordered:
        if v == getattr(x.spec, attr):
            continue
        probe_spec = _Point(dataclasses.replace(x.spec, **{attr: v}), {})
        if pred.kind in VALUE_KINDS or pred.test(probe_spec) is False:
            return {attr: v}
    return None


def _axis_of(case: CaseResult, op: OpConfig, dim: str, shape: tuple[int, ...]) -> int | None:
    """Which output axis is ``dim`` in this case (by the first input's symbols, else by a unique size)."""
    if op.inputs:
        first = op.inputs[0]
        if tuple(case.spec.shapes.get(first.name, ())) == tuple(shape) and dim in first.shape:
            return first.shape.index(dim)
    size = case.spec.dims.get(dim)
    hits = [i for i, n in enumerate(shape) if n == size]
    return hits[0] if len(hits) == 1 else None


def _failing_comparisons(case: CaseResult) -> list[Any]:
    return [c for c in case.comparisons if not c.passed and c.axis_counts is not None]


def _location(bad: list[CaseResult], op: OpConfig, cond: Predicate | None) -> list[str]:
    notes: list[str] = []
    comps = [(c, cmp) for c in bad for cmp in _failing_comparisons(c)]
    # rows that hold -inf
    feats = [c.features.get("outputs", {}).get(cmp.output, {}) for c, cmp in comps]
    masked_info = [f for f in feats if "bad_rows_masked" in f and f.get("bad_rows")]
    if masked_info and all(f["bad_rows_masked"] == f["bad_rows"] for f in masked_info):
        n = sum(f["bad_rows"] for f in masked_info)
        notes.append(
            f"errors only in rows that are entirely -inf ({n}/{n} bad rows): likely NaN from 0/0 on fully masked rows"
        )
        return notes
    if (
        masked_info
        and all(f["bad_rows_with_inf"] == f["bad_rows"] for f in masked_info)
        and not all(f.get("bad_rows_with_inf") == 0 for f in masked_info)
    ):
        notes.append("errors only in rows that hold -inf: likely -inf not handled (inf - inf, or exp of -inf rows)")
        return notes
    # tail tile
    if cond is not None and cond.dim and cond.block and comps:
        tails, whole, judged = 0, 0, 0
        starts = []
        for c, cmp in comps:
            axis = _axis_of(c, op, cond.dim, cmp.shape)
            if axis is None:
                continue
            counts = cmp.axis_counts[axis]
            idx = [i for i, n in enumerate(counts) if n]
            if not idx:
                continue
            v = c.spec.dims[cond.dim]
            if v < cond.block:
                continue  # one partial block is the whole axis: it cannot tell a tail from a row
            judged += 1
            tail = (v // cond.block) * cond.block
            if idx[0] >= tail:
                tails += 1
                starts.append((v, tail))
            elif idx[-1] >= tail:  # errors before the last block and in it: spread over the axis
                whole += 1
        most = max(1, (4 * judged + 4) // 5)  # 80 %: a half-precision case may show only part of the tail
        if tails and tails >= most:
            v, t = max(starts)
            notes.append(
                f"errors only in {cond.dim} >= the last multiple of {cond.block} (e.g. {cond.dim}={v}: "
                f"indices >= {t}, the last partial block): likely a missing tail mask"
            )
        elif whole and whole + tails >= most:
            notes.append(
                f"errors across the whole {cond.dim} axis whenever its last block is partial: "
                "padding read into a reduction (likely a missing tail mask, or padding that is not the "
                "reduction's identity)"
            )
    # constant ratio: a missing or wrong scale
    paired = [
        (c, cmp.ratio)
        for c, cmp in comps
        if cmp.ratio and cmp.ratio.get("samples", 0) >= 8 and c.kind == "mismatch" and not cmp.unexpected_nan
    ]
    ratios = [r for _, r in paired]
    if ratios and len(paired) * 2 >= len([c for c in bad if c.kind == "mismatch"]):
        med = [r["median"] for r in ratios]
        tight = all(abs(r["p90"] - r["p10"]) <= 1e-2 * abs(r["median"]) for r in ratios)
        if tight and all(abs(m - 1.0) > 1e-2 for m in med):
            m = med[0]
            same = all(abs(x - m) <= 1e-2 * abs(m) for x in med)
            factor = f"{m:.4g}" if same else "a constant per case"
            hint = _scale_hint([c for c, _ in paired], med) if not same else ""
            notes.append(f"op/ref is {factor} everywhere: a constant factor, likely a missing or wrong scale{hint}")
    if not notes and comps:
        fracs = [cmp.mismatches / max(cmp.total, 1) for _, cmp in comps]
        if all(f > 0.9 for f in fracs):
            notes.append("errors in nearly every element")
    return notes


def _scale_hint(bad: list[CaseResult], medians: list[float]) -> str:
    """If op/ref tracks sqrt(dim) or 1/sqrt(dim) across cases, name the dim."""
    dims = sorted({d for c in bad for d in c.spec.dims})
    for d in dims:
        for power, label in ((0.5, "sqrt"), (-0.5, "1/sqrt"), (1.0, ""), (-1.0, "1/")):
            ok = True
            for c, m in zip(bad, medians):
                v = c.spec.dims.get(d)
                if not v or abs(m - v**power) > 2e-2 * abs(v**power):
                    ok = False
                    break
            if ok:
                return (
                    f" (op/ref = {label}({d}) in every case: the 1/sqrt({d}) or {d} factor)"
                    if label
                    else f" (op/ref = {d} in every case)"
                )
    return ""


_NUMERIC = {"mismatch", "unexpected_nan", "unexpected_inf", "missing_nan"}


_OVERFLOW = "overflow at large magnitudes: likely no max-subtraction, or an fp16 intermediate"
_MASKED = "fully masked (-inf) rows break it: likely NaN from 0/0"


def _hint(cond: Predicate, kinds: set[str]) -> str:
    """What a condition usually means, for wrong answers only (errors say what happened instead)."""
    if not kinds <= _NUMERIC:
        return ""
    if "|" in cond.kind:
        sides = set(cond.kind.split("|"))
        if sides == {"above", "magnitude"}:
            return (
                f"long {cond.dim} or large values: likely a low-precision accumulator (a sum that stops "
                "growing once its spacing passes the terms, or overflows)"
            )
        return ""
    parts = cond.kind.split("+")
    if cond.narrowed or (len(parts) > 1 and parts[-1] == "above" and (cond.threshold or 0) <= 1):
        parts = parts[:1]  # "A and N > 5" only excepts sizes that hide the bug: A says what it is
    # of two conditions, the one on a shape or layout says more about the bug than a set of value kinds
    k = next((p for p in parts if p not in ("distribution", "dtype")), parts[0])
    if k == "magnitude":
        return _OVERFLOW
    if k == "ties" and (cond.threshold or 0) == 0:
        return "exact ties rounded away from zero instead of to nearest even (round-half-up on the bits)"
    if k == "ties":
        return "exact ties rounded toward zero instead of to nearest even (the discarded half truncated)"
    if k == "masked_row":
        return _MASKED
    if k == "low_row":
        return (
            f"rows whose values all lie below -{cond.threshold} break it: likely a running max started at 0, or a "
            "tail padded with 0 instead of -inf"
        )
    if k == "always":
        return "wrong on every input: a systematic error (missing scale, wrong constant or formula)"
    if k == "layout":
        return "likely the kernel assumes contiguous memory (strides ignored)"
    if k == "distribution":
        if " != " in cond.text:
            return ""
        if "large" in cond.text:
            return _OVERFLOW
        if "masked_rows" in cond.text:
            return _MASKED
        if "special" in cond.text:
            return "NaN/inf inputs are handled differently from the reference"
        if "constant_rows" in cond.text:
            return "constant rows break it: a division by a zero variance or range"
        return ""
    if k == "dtype":
        return "only this dtype: likely accumulation or intermediates kept in the input dtype"
    if k == "equal":
        return "an edge size: likely an empty partition, a division by (n - 1), or a size-1 special case"
    if k == "modulo":
        return f"sizes that are not a multiple of {cond.block} break it: the partial last block"
    if k == "pow2":
        return (
            f"every {cond.dim} but a power of two breaks it: likely a block padded to the next power of two "
            "(triton.next_power_of_2) whose padding lanes leak into the result (a mask, or the masked load's "
            "`other=` value, missing or wrong)"
        )
    if k == "above" and (cond.threshold or 0) <= 1:
        # every size but one: no block boundary is involved, only the element that hides the error
        return (
            f"{cond.dim} = 1 hides it: a single element often makes the result exact whatever the error (a softmax "
            "or normalisation over one element)"
        )
    if k == "above":
        return (
            f"fails once {cond.dim} exceeds {cond.threshold}: state carried across blocks of {cond.dim} is lost "
            "(accumulator overwritten, running max/sum not rescaled) or error grows with length "
            "(low-precision accumulation)"
        )
    if k == "below":
        return f"fails only for small {cond.dim}: an edge size"
    return ""


def _error_summary(errors: list[CaseResult], root: Path | None) -> str:
    """The most common error, as what happened (crash, timeout, exception) rather than a guess at why."""
    counts: dict[str, int] = {}
    first: dict[str, CaseResult] = {}
    for c in errors:
        counts[c.kind or "error"] = counts.get(c.kind or "error", 0) + 1
        first.setdefault(c.kind or "error", c)
    kind = max(counts, key=lambda k: counts[k])
    c = first[kind]
    msg = (c.message or "").strip().splitlines()[0] if (c.message or "").strip() else kind
    file = c.file
    if file and root is not None:
        try:
            file = Path(file).resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            pass
    where = f" at {file}" + (f":{c.line}" if c.line else "") if file else ""
    return f"{kind} ({counts[kind]}/{len(errors)}): {msg[:160]}{where}"


def diagnose_cases(
    cases: list[CaseResult], op: OpConfig, root: Path | None = None, probes: list[CaseResult] | None = None
) -> str:
    """The diagnosis line for a set of cases ('' when everything passed); ``probes`` are the confirmation
    cases run for it (None: none could run, and no condition is stated as confirmed)."""
    failed = [c for c in cases if _verdict(c) == "failed"]
    errors = [c for c in cases if _verdict(c) == "error"]
    passed = [c for c in cases if _verdict(c) == "passed" and not _unjudged(c)]
    bad = failed or errors
    if not bad:
        return ""
    want = _verdict(bad[0])
    verb, noun = ("fails", "failing") if failed else ("errors", "erroring")
    good = passed if failed else passed + failed
    extra = probes or []
    e_bad = bad + [c for c in extra if _verdict(c) == want]
    e_good = good + [
        c
        for c in extra
        if (_verdict(c) == "passed" and not _unjudged(c)) or (want == "error" and _verdict(c) == "failed")
    ]
    confirmed = bool(extra)
    agree = f"; {len(extra)} confirmation case(s) agree" if confirmed else ""
    unconfirmed = "" if confirmed else "; not confirmed by targeted cases"
    kinds = {c.kind or "" for c in bad}
    cond = find_condition(e_bad, e_good)
    trivial = cond is not None and cond.kind == "above" and (cond.threshold or 0) <= 1
    if cond is not None and cond.kind == "always":
        line = f"{verb} on every case ({len(bad)}/{len(cases)}{agree})"
    elif trivial:
        assert cond is not None
        line = (
            f"{verb} on every case except {cond.dim} <= {cond.threshold} ({len(bad)}/{len(bad)} {noun}, "
            f"0/{len(good)} passing: at size {cond.threshold} the result is trivial{agree})"
        )
        cond = Predicate("always", cond.test, 0, kind="always")
    elif cond is not None and confirmed and _hiding_values(cond) and len(bad) > len(good):
        # "fails iff distribution != large" on a bug wrong everywhere: it is those values that hide it
        line = (
            f"{verb} on every case except where {cond.text.replace(' != ', ' == ')} ({len(bad)}/{len(bad)} {noun}, "
            f"0/{len(good)} passing{agree}): those values hide it"
        )
        cond = Predicate("always", cond.test, 0, kind="always")
    elif cond is not None and confirmed:
        others = _also_fits(cond, e_bad, e_good)
        also = f"; also fits {others}: no case told them apart" if others else ""
        line = f"{verb} iff {_shown(cond)} ({len(bad)}/{len(bad)} {noun}, 0/{len(good)} passing{agree}{also})"
    elif cond is not None:
        line = (
            f"{verb} in these cases iff {cond.text} ({len(bad)}/{len(bad)} {noun}, 0/{len(good)} passing{unconfirmed})"
        )
    elif (disj := find_disjunction(e_bad, e_good) if confirmed and failed else None) is not None:
        cond = disj
        line = (
            f"{verb} iff {cond.text} ({len(bad)}/{len(bad)} {noun}, 0/{len(good)} passing{agree}; each side "
            "alone fails, and passes once that side is made false)"
        )
    else:
        necessary = find_necessary(e_bad, e_good)
        if necessary is not None and _hiding_values(necessary[0]) and len(bad) > len(good):
            # "fails only if distribution != subnormal" says the bug is everywhere but where those values hide it
            cond, hits = necessary
            line = (
                f"{verb} on most cases ({len(bad)}/{len(cases)} {noun}; none where "
                f"{cond.text.replace(' != ', ' == ')}, whose values hide it{agree or unconfirmed})"
            )
            cond = Predicate("always", cond.test, 0, kind="always")
        elif necessary is not None:
            cond, hits = necessary
            line = (
                f"{verb} only if {_shown(cond)} ({len(bad)}/{len(bad)} {noun}; {hits}/{len(e_good)} passing cases "
                f"also satisfy it, the bug hides on some inputs{agree or unconfirmed})"
            )
        elif 4 * len(bad) >= 3 * len(cases):
            line = (
                f"{verb} on nearly every case ({len(bad)}/{len(cases)} cases {noun}; the passing ones are not "
                f"explained by shape, layout, dtype or distribution{agree or unconfirmed})"
            )
            cond = Predicate("always", lambda c: True, 0, kind="always")
        else:
            # values that hide the bug ("distribution != integers") are not where it shows: not worth listing
            open_ = [p.text for p in candidates(e_bad, e_good) if not _hiding_values(p)][:3]
            tail = f"; open candidates: {'; '.join(open_)}" if open_ else ""
            line = (
                f"no simple condition found ({len(bad)}/{len(cases)} cases {noun}; not explained by shape, layout, "
                f"dtype or distribution{agree}){tail}"
            )
    parts = [_outputs_named(failed) + line]
    if failed:
        # where the error sits, from the run's failures and the confirmation cases' (plain float32 ones, where
        # a half-precision case shows only part of a row)
        parts += _location(failed + [c for c in extra if _verdict(c) == "failed"], op, cond)
        hint = _hint(cond, kinds) if cond is not None else ""
        # the location may already say it ("... entirely -inf: likely NaN from 0/0 ..."): once is enough
        if hint and not any(hint.split(":")[0] in n or hint.split(": ")[-1] in n for n in parts[1:]):
            parts.append(hint)
    else:
        parts.append(_error_summary(errors, root))
    return "; ".join(parts)


def _outputs_named(failed: list[CaseResult]) -> str:
    """The prefix "grad of w: " when the failing cases fail on only some of the op's outputs (a backward bug in
    one input's gradient, the loss right): which outputs the condition is about. Empty when every output fails
    somewhere."""
    judged: set[str] = set()
    wrong: set[str] = set()
    for case in failed:
        for cmp in getattr(case, "comparisons", None) or []:
            judged.add(cmp.output)
            if not cmp.passed and not cmp.edge_only:  # edge_only: wrong only at the range's edge (oracle/tier)
                wrong.add(cmp.output)
    if not wrong or len(judged) < 2 or wrong == judged:
        return ""
    names = [f"grad of {n[5:]}" if n.startswith("grad_") else f"output {n}" for n in sorted(wrong)]
    return f"{' and '.join(names)}: "


def _shown(cond: Predicate) -> str:
    """A condition as the line states it. "A and distribution != D" says where the bug shows (A) and which values
    hide it there (D's: huge values that swamp the error, NaN rows that are NaN in both): "A, except where
    distribution == D, whose values hide it", never D's absence as part of the bug's cause."""
    if "+" not in cond.kind:
        return cond.text
    left, right = cond.text.split(" and ", 1)
    for where, hidden in ((left, right), (right, left)):
        if hidden.startswith("distribution != ") and not where.startswith("distribution"):
            return f"{where}, except where {hidden.replace(' != ', ' == ')}, whose values hide it"
    return cond.text


def _hiding_values(cond: Predicate) -> bool:
    """A condition that only excludes some value distribution: the bug is everywhere else."""
    return cond.kind == "distribution" and " != " in cond.text


def _also_fits(cond: Predicate, bad: list[Any], good: list[Any]) -> str:
    """Other exact conditions of the same simplicity on other features: an ambiguity worth naming."""
    if cond.kind == "modulo":
        return ""  # the block range is already in the text
    same = [
        p.text
        for p in candidates(bad, good)
        if p.text != cond.text
        and p.rank <= cond.rank
        and _hits(p, good) == 0
        and (p.kind, p.dim) != (cond.kind, cond.dim)
    ]
    return " or ".join(same[:2])


def diagnose(outcome: OpOutcome, op: OpConfig, root: Path | None = None, probe: Probe | None = None) -> str:
    """The op's diagnosis line; with ``probe``, candidate conditions are confirmed by targeted cases first.

    Also sets ``outcome.condition`` (what calibration's refusal rule reads).
    """
    line, probes = diagnose_confirmed(outcome.cases, outcome.status, op, root, probe)
    outcome.condition = condition_of(outcome.cases, probes)
    return line


def diagnose_confirmed(
    cases: list[CaseResult], status: str, op: OpConfig, root: Path | None = None, probe: Probe | None = None
) -> tuple[str, list[CaseResult] | None]:
    """The diagnosis line of cases whose op has ``status``, and the confirmation cases run for it: with
    ``probe``, and only for a failed or erroring op (None: none ran)."""
    probes = confirm(cases, op, probe) if probe is not None and status in ("failed", "error") else None
    return diagnose_cases(cases, op, root, probes), probes


def condition_of(cases: list[CaseResult], probes: list[CaseResult] | None) -> dict[str, Any] | None:
    """The condition the diagnosis states, as data: text, kind, exact (iff) and confirmed."""
    bad = [c for c in cases if _verdict(c) == "failed"] or [c for c in cases if _verdict(c) == "error"]
    if not bad:
        return None
    want = _verdict(bad[0])
    good = [c for c in cases if _verdict(c) == "passed" or (want == "error" and _verdict(c) == "failed")]
    extra = probes or []
    e_bad = bad + [c for c in extra if _verdict(c) == want]
    e_good = good + [
        c
        for c in extra
        if (_verdict(c) == "passed" and not _unjudged(c)) or (want == "error" and _verdict(c) == "failed")
    ]
    cond, exact = _stated(e_bad, e_good, bool(extra) and want == "failed")
    if cond is None:
        return None
    return {"text": cond.text, "kind": cond.kind, "exact": exact, "confirmed": bool(extra)}


def _stated(bad: list[Any], good: list[Any], disjunctions: bool) -> tuple[Predicate | None, bool]:
    """The condition a diagnosis states of these cases, and whether it is exact ("iff"): the one condition
    every case fits, else (``disjunctions``: confirmation cases ran for failures) "A or B", else a necessary
    one."""
    cond = find_condition(bad, good)
    if cond is None and disjunctions:
        cond = find_disjunction(bad, good)
    if cond is not None:
        return cond, True
    found = find_necessary(bad, good)
    return (found[0] if found else None), False
