"""One line that says when an op fails and where the error sits, from the cases of a run.

The condition is the simplest predicate over case features that separates failing from passing
cases *exactly* (every failing case satisfies it, no passing case does), tried in this order:
always; a layout, dtype or value distribution; a dim equal to a value; a dim not a multiple of 2**k
(smallest such k: the weakest claim the evidence supports); a dim above or below a threshold; then
conjunctions of two. If nothing separates exactly, it says "no simple condition found" rather than
guess. The location comes from the failing outputs' mismatch counts per axis, the rows that hold
-inf, and the op/reference ratio, and each finding names the bug it usually means.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config.load import OpConfig
    from ..run.case import CaseResult
    from ..run.validate import OpOutcome


@dataclass(frozen=True)
class Predicate:
    text: str
    test: Callable[[Any], bool]
    rank: int
    dim: str | None = None
    block: int | None = None
    threshold: int | None = None
    kind: str = ""


def _candidates(cases: list[CaseResult]) -> list[Predicate]:
    preds: list[Predicate] = []
    for attr in ("layout", "dtype", "distribution"):
        values = sorted({getattr(c.spec, attr) for c in cases})
        if len(values) < 2:
            continue
        for v in values:
            preds.append(Predicate(f"{attr} == {v}", lambda c, a=attr, v=v: getattr(c.spec, a) == v, 1, kind=attr))
        if len(values) > 2:
            for v in values:
                preds.append(Predicate(f"{attr} != {v}", lambda c, a=attr, v=v: getattr(c.spec, a) != v, 1, kind=attr))
            for a_, b_ in itertools.combinations(values, 2):
                preds.append(
                    Predicate(
                        f"{attr} in {{{a_}, {b_}}}",
                        lambda c, a=attr, s=frozenset((a_, b_)): getattr(c.spec, a) in s,
                        2,
                        kind=attr,
                    )
                )
    dims = sorted({d for c in cases for d in c.spec.dims})
    for d in dims:
        values = sorted({c.spec.dims.get(d, 0) for c in cases})
        if len(values) < 2:
            continue
        for v in values[:3]:
            preds.append(Predicate(f"{d} == {v}", lambda c, d=d, v=v: c.spec.dims.get(d) == v, 2, dim=d, kind="equal"))
        for k in range(1, 13):
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
    return preds


def _nice_threshold(lo: int, hi: int) -> int:
    """A threshold between two adjacent observed values: the largest power of two in [lo, hi), else lo.

    Tiles are powers of two: with passing K <= 17 and failing K >= 33 seen, "K > 32" is the claim the
    evidence supports and the one that names the tile.
    """
    p = 1
    while p * 2 < hi:
        p *= 2
    return p if lo <= p < hi else lo


def _separates(pred: Callable[[Any], bool], bad: list[CaseResult], good: list[CaseResult]) -> bool:
    return all(pred(c) for c in bad) and not any(pred(c) for c in good)


def find_condition(bad: list[CaseResult], good: list[CaseResult]) -> Predicate | None:
    """The simplest predicate true for every bad case and no good case, or None."""
    if not bad:
        return None
    if not good:
        return Predicate("always", lambda c: True, 0, kind="always")
    cands = _candidates(bad + good)
    singles = [p for p in cands if _separates(p.test, bad, good)]
    if singles:
        best = min(singles, key=lambda p: (p.rank, p.block or 0, -(p.threshold or 0) if p.kind == "below" else 0))
        if best.kind == "modulo":
            blocks = sorted(p.block for p in singles if p.kind == "modulo" and p.dim == best.dim and p.block)
            if len(blocks) > 1:  # the evidence fits several tile sizes: say so rather than pick one
                text = (
                    f"{best.dim} % {blocks[0]} != 0 (or any block up to {blocks[-1]}: no tested "
                    f"{best.dim} tells them apart)"
                )
                return Predicate(text, best.test, best.rank, dim=best.dim, block=best.block, kind="modulo")
        return best
    useful = [p for p in cands if all(p.test(c) for c in bad)]
    for a, b in itertools.combinations(sorted(useful, key=lambda p: p.rank), 2):
        if _separates(lambda c, a=a, b=b: a.test(c) and b.test(c), bad, good):
            return Predicate(
                f"{a.text} and {b.text}",
                lambda c, a=a, b=b: a.test(c) and b.test(c),
                10 + a.rank + b.rank,
                dim=a.dim or b.dim,
                block=a.block or b.block,
                threshold=a.threshold or b.threshold,
                kind=f"{a.kind}+{b.kind}",
            )
    return None


def find_necessary(bad: list[CaseResult], good: list[CaseResult]) -> tuple[Predicate, int] | None:
    """A predicate every bad case satisfies and at most 3/4 of the good ones do (fewest first), with that count.

    Bugs hide on some inputs (a tail error multiplied by zeros, a NaN row that is NaN in both): then no
    condition separates exactly, but one is still *necessary*, and that is worth saying.
    """
    if not bad or not good:
        return None
    scored = []
    for p in _candidates(bad + good):
        if all(p.test(c) for c in bad):
            hits = sum(1 for c in good if p.test(c))
            if hits <= (3 * len(good)) // 4:
                scored.append((hits, p.rank, p.block or 0, p))
    if not scored:
        return None
    hits, _, _, pred = min(scored, key=lambda t: t[:3])
    return pred, hits


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
    kinds = {c.kind for c in bad}
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
        tails, whole = 0, 0
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
            tail = (v // cond.block) * cond.block
            if idx[0] >= tail:
                tails += 1
                starts.append((v, tail))
            elif idx[0] == 0 and idx[-1] == len(counts) - 1:
                whole += 1
        if tails and tails == len(comps):
            v, t = max(starts)
            notes.append(
                f"errors only in {cond.dim} >= the last multiple of {cond.block} (e.g. {cond.dim}={v}: "
                f"indices >= {t}, the last partial block): likely a missing tail mask"
            )
        elif whole and whole + tails == len(comps):
            notes.append(
                f"errors across the whole {cond.dim} axis whenever its last block is partial: "
                "padding read into a reduction (likely a missing tail mask, or padding that is not the "
                "reduction's identity)"
            )
    # constant ratio: a missing or wrong scale
    paired = [(c, cmp.ratio) for c, cmp in comps if cmp.ratio and cmp.ratio.get("samples", 0) >= 8]
    ratios = [r for _, r in paired]
    if ratios and "unexpected_nan" not in kinds:
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


def _hint(cond: Predicate, kinds: set[str]) -> str:
    """What a condition usually means, for wrong answers only (errors say what happened instead)."""
    if not kinds <= _NUMERIC:
        return ""
    k = cond.kind.split("+")[0]
    if k == "always":
        return "wrong on every input: a systematic error (missing scale, wrong constant or formula)"
    if k == "layout":
        return "likely the kernel assumes contiguous memory (strides ignored)"
    if k == "distribution":
        if "large" in cond.text:
            return "overflow at large magnitudes: likely no max-subtraction, or an fp16 intermediate"
        if "masked_rows" in cond.text:
            return "fully masked (-inf) rows break it: likely NaN from 0/0"
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


def diagnose_cases(cases: list[CaseResult], op: OpConfig, root: Path | None = None) -> str:
    """The diagnosis line for a set of cases ('' when everything passed)."""
    failed = [c for c in cases if c.status == "failed"]
    errors = [c for c in cases if c.status == "error"]
    passed = [c for c in cases if c.status == "passed"]
    bad = failed or errors
    if not bad:
        return ""
    verb, noun = ("fails", "failing") if failed else ("errors", "erroring")
    good = passed if failed else passed + failed
    cond = find_condition(bad, good)
    kinds = {c.kind or "" for c in bad}
    trivial = cond is not None and cond.kind == "above" and (cond.threshold or 0) <= 1
    if cond is not None and cond.kind == "always":
        line = f"{verb} on every case ({len(bad)}/{len(cases)})"
    elif trivial:
        assert cond is not None
        line = (
            f"{verb} on every case except {cond.dim} <= {cond.threshold} ({len(bad)}/{len(bad)} {noun}, "
            f"0/{len(good)} passing: at size {cond.threshold} the result is trivial)"
        )
        cond = Predicate("always", cond.test, 0, kind="always")
    elif cond is not None:
        line = f"{verb} iff {cond.text} ({len(bad)}/{len(bad)} {noun}, 0/{len(good)} passing)"
    else:
        necessary = find_necessary(bad, good)
        if necessary is not None:
            cond, hits = necessary
            line = (
                f"{verb} only if {cond.text} ({len(bad)}/{len(bad)} {noun}; {hits}/{len(good)} passing cases "
                "also satisfy it, the bug hides on some inputs)"
            )
        else:
            line = f"no simple condition found ({len(bad)}/{len(cases)} cases {noun})"
    parts = [line]
    if failed:
        parts += _location(bad, op, cond)
        hint = _hint(cond, kinds) if cond is not None else ""
        if hint and not any(hint.split(":")[0] in n for n in parts[1:]):
            parts.append(hint)
    else:
        parts.append(_error_summary(errors, root))
    return "; ".join(parts)


def diagnose(outcome: OpOutcome, op: OpConfig, root: Path | None = None) -> str:
    return diagnose_cases(outcome.cases, op, root)
