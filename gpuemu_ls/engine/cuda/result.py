"""Lint results: findings and one `KernelLintResult` per kernel, JSON-ready via `to_dict()`.

Statuses (same words as the product's JSON report):

* ``passed``  — compiled, every check ran, no error-severity finding;
* ``failed``  — at least one error-severity finding (a violated limit, a forbidden or
  missing required instruction);
* ``error``   — the kernel could not be linted: compile failure, kernel not found,
  bad pattern, or a check whose artifact is unavailable;
* ``not_run`` — the CUDA tools are not installed. Never reported as passed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("passed", "failed", "error", "not_run")

# Stable finding codes (the diagnostics layer and CI output key on them).
CODE_MAX_REGISTERS = "max-registers"
CODE_MAX_SPILLS = "max-spills"
CODE_MAX_LOCAL = "max-local-memory"
CODE_MAX_SHARED = "max-shared-memory"
CODE_FORBIDDEN = "forbidden-instruction"
CODE_REQUIRED = "required-instruction"
CODE_NVCC_ERROR = "nvcc-error"
CODE_NVCC_WARNING = "nvcc-warning"
CODE_PTXAS_ERROR = "ptxas-error"
CODE_PTXAS_WARNING = "ptxas-warning"
CODE_NOT_FOUND = "kernel-not-found"
CODE_SOURCE_MISSING = "source-not-found"
CODE_TOOLS_MISSING = "cuda-tools-missing"
CODE_INVALID_PATTERN = "invalid-pattern"
CODE_UNAVAILABLE = "artifact-unavailable"


@dataclass
class Finding:
    """One problem, pinned to a file position (1-based line and column)."""

    severity: str  # 'error' | 'warning'
    code: str
    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    end_line: int | None = None
    end_column: int | None = None
    kernel: str | None = None
    value: float | None = None  # the measured figure, for limit findings
    limit: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]

    def location(self) -> str:
        parts = [self.file or "<unknown>"]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)


@dataclass
class KernelLintResult:
    """The lint outcome for one kernel."""

    name: str  # [[kernels]] entry name (or the kernel's name for lint_file)
    source: str
    function: str | None  # the function asked for
    status: str  # see STATUSES
    symbol: str | None = None  # mangled symbol in the cubin/PTX
    signature: str | None = None  # demangled
    arch: str = "sm_90"
    line: int | None = None  # where the __global__ declaration is (or the .entry in a .ptx)
    resources: dict[str, Any] | None = None
    ptx_instructions: dict[str, int] | None = None
    sass_histogram: dict[str, int] | None = None
    findings: list[Finding] = field(default_factory=list)
    message: str = ""  # one-line reason for error/not_run
    tool_version: str | None = None  # nvcc's (ptxas' for a .ptx source)
    tool_versions: dict[str, str] = field(default_factory=dict)
    duration_ms: float = 0.0
    cache_hit: bool = False

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["findings"] = [f.to_dict() for f in self.findings]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelLintResult:
        kw = {k: d.get(k) for k in cls.__dataclass_fields__ if k in d}
        kw["findings"] = [Finding.from_dict(f) for f in d.get("findings", [])]
        return cls(**kw)  # type: ignore[arg-type]


def status_from_findings(findings: list[Finding]) -> str:
    """passed unless an error-severity finding exists (tooling problems are decided by the caller)."""
    return "failed" if any(f.severity == "error" for f in findings) else "passed"
