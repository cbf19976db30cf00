"""The records of verdicts: one case's outcome and one op's, as the oracle judges them and the store keeps them.

They live here, below the runners and the store, so that diagnosis (which reads them), the store
(which keeps them) and the orchestrator (which makes them) import them without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..cases.plan import CaseSpec
from .compare import Comparison
from .invariants import Violation

#: The timed phases of a case (CaseResult.durations; "case" is their sum with the checks between them).
PHASES = ("generate", "op", "reference", "compare")
#: Slowest cases an op's timing lists.
SLOWEST_CASES = 5
#: Failure kinds where the op's value is not a number (or the reference's is not).
NONFINITE_KINDS = ("unexpected_nan", "unexpected_inf", "missing_nan")
#: The verdict vocabulary every face shares, for an op (a case is passed, failed, edge or error):
#: passed; failed (a bug); edge (only edge findings, see ``oracle.tier``: shown, not failing unless strict);
#: not_judged (it ran, but no element of any case could be judged: every one out of range or suspect);
#: error (the op or its reference could not answer); not_run (nothing ran); cancelled.
OP_VERDICTS = ("passed", "failed", "edge", "not_judged", "error", "not_run", "cancelled")
#: Op verdicts that pass a gate: nothing wrong was found in what was judged.
PASSING_VERDICTS = ("passed", "edge")


@dataclass
class CaseResult:
    """The outcome of one case; what the store keeps per case."""

    op: str
    seed: int
    spec: CaseSpec
    status: str  # passed | failed | edge | error
    kind: str | None = None
    message: str = ""
    comparisons: list[Comparison] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)
    file: str | None = None
    line: int | None = None
    stderr: str = ""
    snapshot: dict[str, np.ndarray] | None = None
    from_snapshot: bool = False
    features: dict[str, Any] = field(default_factory=dict)
    tolerance: tuple[float, float] | None = None
    tier: str | None = None  # a wrong answer's tier: "bug" or "edge" (an edge finding; status failed if strict)
    edge: dict[str, Any] | None = None  # an edge finding's reasons, threshold and text (oracle.tier.edge_record)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def bug(self) -> bool:
        """A wrong answer inside the op's operating range (what a diagnosis explains)."""
        return self.status == "failed" and self.tier != "edge"

    def judged(self) -> int:
        """Output elements this case judged: every element but those out of range or suspect."""
        return sum(max(0, c.total - c.out_of_range - c.suspect_nan) for c in self.comparisons)

    def worst(self) -> Comparison | None:
        """The failing output to show: the worst of those that are not edge-only, else the worst of all."""
        failing = [c for c in self.comparisons if not c.passed]
        bad = [c for c in failing if not c.edge_only] or failing or self.comparisons
        return max(bad, key=lambda c: c.max_ratio, default=None)

    def stats(self) -> dict[str, float | int | None]:
        w = self.worst()
        return {
            "max_abs": max((c.max_abs for c in self.comparisons), default=None),
            "max_rel": max((c.max_rel for c in self.comparisons), default=None),
            "max_ulp": max((c.max_ulp for c in self.comparisons), default=None),
            "max_ratio": max((c.max_ratio for c in self.comparisons), default=None),
            "mismatches": sum(c.mismatches for c in self.comparisons),
            "total": sum(c.total for c in self.comparisons),
            "worst_output": w.output if w else None,
            "out_of_range": sum(c.out_of_range for c in self.comparisons),
            "suspect_nan": sum(c.suspect_nan for c in self.comparisons),
            "suspect_inf": sum(c.suspect_inf for c in self.comparisons),
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (without the snapshot arrays)."""
        return {
            "op": self.op,
            "seed": self.seed,
            "spec": self.spec.to_dict(),
            "status": self.status,
            "kind": self.kind,
            "message": self.message,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "violations": [v.to_dict() for v in self.violations],
            "durations": self.durations,
            "file": self.file,
            "line": self.line,
            "stderr": self.stderr,
            "from_snapshot": self.from_snapshot,
            "features": self.features,
            "tolerance": list(self.tolerance) if self.tolerance else None,
            "tier": self.tier,
            "edge": self.edge,
            **{k: v for k, v in self.stats().items()},
        }


#: An op's counts of out-of-range elements, suspect NaN/inf and non-finite failures (``OpOutcome.stats``): what
#: a report shows of its tiers besides bugs and edge findings, kept with a stored verdict too.
TIER_COUNTS = (
    "out_of_range",
    "out_of_range_cases",
    "suspect_nan",
    "suspect_cases",
    "suspect_inf_cases",
    "nonfinite_cases",
)


@dataclass
class OpOutcome:
    """An op's verdict over its cases."""

    op: str
    status: str  # passed | failed | error | not_run | cancelled
    cases: list[CaseResult] = field(default_factory=list)
    planned: int = 0
    message: str = ""
    setup_error: dict[str, Any] | None = None
    elapsed: float = 0.0
    stopped: str | None = None
    diagnosis: str = ""
    condition: dict[str, Any] | None = None  # the diagnosis' condition: text, kind, exact, confirmed
    budget: dict[str, Any] | None = None  # what a time budget let run and what it cut (run/budgeted.py)

    def count(self, status: str) -> int:
        return sum(1 for c in self.cases if c.status == status)

    @property
    def failures(self) -> list[CaseResult]:
        """Every case that did not pass: bugs, edge findings and errors."""
        return [c for c in self.cases if c.status != "passed"]

    @property
    def bugs(self) -> list[CaseResult]:
        """Wrong answers inside the operating range: what the diagnosis explains."""
        return [c for c in self.cases if c.bug]

    @property
    def edges(self) -> list[CaseResult]:
        """Edge findings, failing (strict) or not."""
        return [c for c in self.cases if c.tier == "edge"]

    def stats(self) -> dict[str, Any]:
        """Largest errors over the cases, and the counts every face shows besides passes and failures."""
        out: dict[str, Any] = dict.fromkeys(("max_abs", "max_rel", "max_ulp", "max_ratio"))
        counts = dict.fromkeys((*TIER_COUNTS, "edge_cases", "judged"), 0)
        for c in self.cases:
            st = c.stats()
            for key, value in st.items():
                if c.tier == "edge":
                    break  # an edge finding's error is shown with it, not as the op's error
                if key in out and value is not None and (out[key] is None or value > out[key]):
                    out[key] = value
            counts["out_of_range"] += st["out_of_range"] or 0
            counts["out_of_range_cases"] += bool(st["out_of_range"])
            counts["suspect_nan"] += st["suspect_nan"] or 0
            counts["suspect_cases"] += bool(st["suspect_nan"]) and not st["suspect_inf"]
            counts["suspect_inf_cases"] += bool(st["suspect_inf"])
            counts["nonfinite_cases"] += c.bug and c.kind in NONFINITE_KINDS
            counts["edge_cases"] += c.tier == "edge"
            counts["judged"] += c.judged()
        return {**out, **counts}

    def timing(self, slowest: int = SLOWEST_CASES) -> dict[str, Any]:
        """Where the op's time went: seconds in each phase of its cases (generation, the op, the reference,
        comparison), the rest (workers, transfers, storing) and its slowest cases; so a slow op says whether
        it is slow itself or its reference or gpuemu is."""
        phases = dict.fromkeys(PHASES, 0.0)
        for c in self.cases:
            for p in PHASES:
                phases[p] += float(c.durations.get(p, 0.0))
        ranked = sorted(self.cases, key=lambda c: -float(c.durations.get("case", 0.0)))[:slowest]
        return {
            **{p: round(v, 4) for p, v in phases.items()},
            "other": round(max(0.0, self.elapsed - sum(phases.values())), 4),
            "total": round(self.elapsed, 4),
            "slowest": [slow_case(c) for c in ranked if c.durations.get("case") is not None],
        }

    def summary(self) -> str:
        """The op's one-line message: "38/50 passed, 12 failed (8 on NaN/inf); 212 elements out of range in 9 cases"."""
        n = len(self.cases)
        st = self.stats()
        parts = [f"{self.count('passed')}/{n} passed" if self.status != "not_judged" else f"{n} cases, none judged"]
        failed = len(self.bugs)
        if failed:
            nonfinite = st["nonfinite_cases"]
            parts.append(f"{failed} failed" + (f" ({nonfinite} on NaN/inf)" if nonfinite else ""))
        edges = st["edge_cases"]
        if edges:
            strict = any(c.status == "failed" for c in self.edges)
            noun = "edge finding" if edges == 1 else "edge findings"
            parts.append(f"{edges} {noun}" + (" (strict: failing)" if strict else ""))
        if self.count("error"):
            parts.append(f"{self.count('error')} errors")
        if self.stopped:
            parts.append(f"stopped: {self.stopped}")
        text = ", ".join(parts)
        if st["out_of_range"]:
            n = st["out_of_range"]
            text += f"; {n} element{'s' * (n != 1)} out of range in {_cases(st['out_of_range_cases'])} (not judged)"
        if st["suspect_inf_cases"]:
            where = _cases(st["suspect_inf_cases"])
            text += f"; the reference is undefined (NaN) at infinite inputs in {where} (a fully -inf row; not judged)"
        if st["suspect_cases"]:
            where = _cases(st["suspect_cases"])
            text += f"; the reference returns NaN from finite inputs in {where}: check the reference"
        if self.status == "not_judged":
            text += f"; {not_judged_reason(self.cases)}"
        return text


def op_status(cases: list[CaseResult]) -> str:
    """An op's verdict from its cases (:data:`OP_VERDICTS`): any wrong answer fails it, else any error; nothing
    run is not_run; cases that ran but judged no element are not_judged (never a pass); only edge findings
    besides passes is edge."""
    if any(c.status == "failed" for c in cases):
        return "failed"
    if any(c.status == "error" for c in cases):
        return "error"
    if not cases:
        return "not_run"
    if not any(c.judged() for c in cases):
        return "not_judged"
    return "edge" if any(c.status == "edge" for c in cases) else "passed"


def not_judged_reason(cases: list[CaseResult]) -> str:
    """Why an op's cases judged nothing, in words (the op's line, JSON's ``reason``)."""
    out_of_range = sum(sum(x.out_of_range for x in c.comparisons) for c in cases)
    suspect = sum(sum(x.suspect_nan for x in c.comparisons) for c in cases)
    if suspect and not out_of_range:
        why = "the reference returns NaN in every element"
    elif out_of_range and not suspect:
        why = "every element is out of range"
    elif cases and all(not c.comparisons or all(x.total == 0 for x in c.comparisons) for c in cases):
        why = "every output is empty"
    else:
        why = "every element is out of range or the reference's NaN"
    return f"not judged: {why}, so nothing was checked"


def slow_case(c: CaseResult) -> dict[str, Any]:
    """One case's time and what it was, for slowest-case lists."""
    return {
        "seed": c.seed,
        "seconds": round(float(c.durations.get("case", 0.0)), 4),
        **{p: round(float(c.durations.get(p, 0.0)), 4) for p in PHASES},
        "dtype": c.spec.dtype,
        "strategy": c.spec.strategy,
        "shapes": {k: list(v) for k, v in c.spec.shapes.items()},
        "status": c.status,
    }


def _cases(n: int) -> str:
    return f"{n} case" if n == 1 else f"{n} cases"
