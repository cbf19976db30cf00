"""What the Python API returns: verdicts over cases, failures that say how to replay them, test cases."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..engine.cases.plan import CaseSpec
from ..engine.errors import GpuemuError
from ..engine.oracle.outcome import PASSING_VERDICTS, CaseResult
from ..engine.report.lines import KIND_TEXT, case_line, replay_command

#: Seeds at or above this name cases whose inputs the user supplied (``validate_op``), not generated ones.
USER_SEED_BASE = 1 << 40


def api_replay(op: str, seed: int, root: Path | None = None) -> str:
    """The Python line that replays (op, seed) in the process that has the kernel."""
    where = f"{str(root)!r}" if root is not None else ""
    return f"Client({where}).reproduce({op!r}, {seed}, run_op)"


@dataclass
class Failure:
    """One case that did not pass: what it was, how far off, and how to replay it."""

    op: str
    seed: int
    status: str  # failed | edge | error
    kind: str | None
    dtype: str
    shapes: dict[str, list[int]]
    dims: dict[str, int]
    layout: str
    distribution: str
    strategy: str
    max_abs: float | None
    max_rel: float | None
    max_ratio: float | None
    tolerance: tuple[float, float] | None
    message: str
    replay: str
    api_replay: str
    client_side: bool = False
    tier: str | None = None  # a wrong answer's tier: "bug" or "edge" (an edge finding, failing only under strict)
    edge: dict[str, Any] | None = None  # an edge finding's reasons, threshold and text
    case: CaseResult | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_case(cls, c: CaseResult, root: Path | None, *, client_side: bool, cwd: Path | None = None) -> Failure:
        st = c.stats()
        return cls(
            op=c.op,
            seed=c.seed,
            status=c.status,
            kind=c.kind,
            dtype=c.spec.dtype,
            shapes={k: list(v) for k, v in c.spec.shapes.items()},
            dims=dict(c.spec.dims),
            layout=c.spec.layout,
            distribution=c.spec.distribution,
            strategy=c.spec.strategy,
            max_abs=st["max_abs"],
            max_rel=st["max_rel"],
            max_ratio=st["max_ratio"],
            tolerance=c.tolerance,
            message=(c.message or "").strip().splitlines()[0] if (c.message or "").strip() else "",
            replay=replay_command(c.op, c.seed, root, cwd or Path.cwd(), plan=c.spec.plan),
            api_replay=api_replay(c.op, c.seed, root),
            client_side=client_side,
            tier=c.tier,
            edge=c.edge,
            case=c,
        )

    @property
    def what(self) -> str:
        return KIND_TEXT.get(self.kind or "", self.kind or self.status)

    def __str__(self) -> str:
        if self.case is not None:
            line = case_line(self.case).rsplit("\n", 1)[0]  # without its replay line: ours may need -C
        else:  # pragma: no cover - Failures are built from cases
            line = f"{self.status.upper()} {self.op} seed={self.seed}: {self.message}"
        line += f"\n    replay: {self.replay}"
        if self.client_side:
            line += f"\n    replay in the process that has the kernel: {self.api_replay}"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "seed": self.seed,
            "status": self.status,
            "kind": self.kind,
            "tier": self.tier,
            "edge": self.edge,
            "dtype": self.dtype,
            "shapes": self.shapes,
            "dims": self.dims,
            "layout": self.layout,
            "distribution": self.distribution,
            "strategy": self.strategy,
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "max_ratio": self.max_ratio,
            "tolerance": list(self.tolerance) if self.tolerance else None,
            "message": self.message,
            "replay": self.replay,
            "api_replay": self.api_replay,
        }


def _max(cases: list[CaseResult], key: str) -> float | None:
    vals = [c.stats()[key] for c in cases]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None  # type: ignore[type-var]


@dataclass
class _Verdict:
    op: str
    status: str
    cases: list[CaseResult]
    run_id: str | None = None
    diagnosis: str = ""
    root: Path | None = field(default=None, repr=False)
    client_side: bool = field(default=False, repr=False)

    @property
    def max_diff(self) -> float | None:
        """Largest absolute difference between the op and the float64 reference over every output and case."""
        return _max(self.cases, "max_abs")

    @property
    def max_rel(self) -> float | None:
        return _max(self.cases, "max_rel")

    @property
    def max_ratio(self) -> float | None:
        """Largest error as a multiple of the allowed error (1.0 is the tolerance)."""
        return _max(self.cases, "max_ratio")

    @property
    def failures(self) -> list[Failure]:
        return [
            Failure.from_case(c, self.root, client_side=self.client_side) for c in self.cases if c.status != "passed"
        ]

    def report(self) -> str:
        """The verdict, the diagnosis and one line per failure (with its replay), as the CLI prints them."""
        lines = [self.summary()]
        if self.diagnosis:
            lines.append(f"    diagnosis: {self.diagnosis}")
        lines += ["    " + str(f).replace("\n", "\n    ") for f in self.failures[:20]]
        if len(self.failures) > 20:
            lines.append(f"    ... and {len(self.failures) - 20} more failing cases (gpuemu failures --op {self.op})")
        return "\n".join(lines)

    def summary(self) -> str:  # pragma: no cover - overridden
        return f"{self.status.upper()} {self.op}"


@dataclass
class ValidationResult(_Verdict):
    """The verdict on one case (or a few): ``passed`` is a bool, ``max_diff`` the largest |op - ref|."""

    source: str = ""

    @property
    def passed(self) -> bool:
        """Nothing wrong in what was judged: passed, or edge findings only (they fail only under strict)."""
        return self.status in PASSING_VERDICTS

    @property
    def case(self) -> CaseResult | None:
        return self.cases[0] if self.cases else None

    @property
    def seed(self) -> int | None:
        return self.cases[0].seed if self.cases else None

    def __bool__(self) -> bool:
        return self.passed

    def summary(self) -> str:
        n = len(self.cases)
        ok = sum(1 for c in self.cases if c.passed)
        err = f", max abs err {self.max_diff:.3g}" if self.max_diff is not None else ""
        return f"{self.status.upper()} {self.op}: {ok}/{n} cases passed{err}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "status": self.status,
            "passed": self.passed,
            "max_diff": self.max_diff,
            "run_id": self.run_id,
            "diagnosis": self.diagnosis,
            "cases": [c.to_dict() for c in self.cases],
            "failures": [f.to_dict() for f in self.failures],
        }


@dataclass
class FuzzResult(_Verdict):
    """The verdict over many cases: ``passed``/``total`` are counts, ``ok`` is the verdict."""

    planned: int = 0
    stopped: str | None = None
    elapsed: float = 0.0
    message: str = ""

    @property
    def passed(self) -> int:
        return sum(1 for c in self.cases if c.status == "passed")

    @property
    def total(self) -> int:
        return len(self.cases)

    @property
    def failed(self) -> int:
        return sum(1 for c in self.cases if c.status == "failed")

    @property
    def errors(self) -> int:
        return sum(1 for c in self.cases if c.status == "error")

    @property
    def edges(self) -> int:
        """Edge findings (shown; failing only under strict)."""
        return sum(1 for c in self.cases if c.tier == "edge")

    @property
    def ok(self) -> bool:
        """Every planned case ran and passed or was an edge finding (an op with no case is never ok)."""
        return self.status in PASSING_VERDICTS

    def __bool__(self) -> bool:
        return self.ok

    def summary(self) -> str:
        parts = [f"{self.passed}/{self.total} passed"]
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.errors:
            parts.append(f"{self.errors} errors")
        if self.edges:
            parts.append(f"{self.edges} edge findings")
        if self.stopped:
            parts.append(f"stopped: {self.stopped}")
        err = f"   max abs err {self.max_diff:.3g}" if self.max_diff is not None else ""
        head = "PASS" if self.ok else ("NOT RUN" if self.status == "not_run" else self.status.upper())
        return f"{head} {self.op}: {', '.join(parts)}{err}" + (f" ({self.message})" if self.message else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "status": self.status,
            "ok": self.ok,
            "passed": self.passed,
            "total": self.total,
            "failed": self.failed,
            "errors": self.errors,
            "planned": self.planned,
            "stopped": self.stopped,
            "max_diff": self.max_diff,
            "run_id": self.run_id,
            "diagnosis": self.diagnosis,
            "failures": [f.to_dict() for f in self.failures],
        }


class ValidationError(GpuemuError, AssertionError):
    """Raised by the ``validate_op`` context manager (and the pytest helpers) when a check does not pass.

    ``result`` is the :class:`ValidationResult` or :class:`FuzzResult`; the message lists every
    failure with its seed, dtype, shapes and replay command.
    """

    def __init__(self, result: ValidationResult | FuzzResult) -> None:
        self.result = result
        super().__init__(result.report())


@dataclass
class TestCase:
    """One generated case, named by (op, seed): inputs as the op's framework tensors, plus their numpy views.

    Run the kernel on ``inputs`` (or ``args``) and hand the output to ``Client.submit_output``.
    """

    __test__ = False  # not a pytest test class

    op: str
    seed: int
    spec: CaseSpec
    inputs: dict[str, Any]
    arrays: dict[str, np.ndarray]
    kwargs: dict[str, Any]
    framework: str
    device: str
    logical: dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    _pristine: dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    _write_backs: list[Callable[[], None]] = field(repr=False, default_factory=list)

    @property
    def args(self) -> tuple[Any, ...]:
        """The inputs in the op's argument order (``input_names``)."""
        return tuple(self.inputs.values())

    @property
    def dtype(self) -> str:
        return self.spec.dtype

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self.spec.shapes)

    @property
    def layout(self) -> str:
        return self.spec.layout

    @property
    def distribution(self) -> str:
        return self.spec.distribution

    @property
    def dims(self) -> dict[str, int]:
        return dict(self.spec.dims)

    def describe(self) -> str:
        return (
            f"{self.op} seed={self.seed} dtype={self.dtype} {self.spec.shape_text()} layout={self.layout} "
            f"dist={self.distribution}"
        )

    def replay(self) -> str:
        return shlex.join(["gpuemu", "reproduce", "--op", self.op, "--seed", str(self.seed)])


__all__ = [
    "USER_SEED_BASE",
    "Failure",
    "FuzzResult",
    "TestCase",
    "ValidationError",
    "ValidationResult",
    "api_replay",
]
