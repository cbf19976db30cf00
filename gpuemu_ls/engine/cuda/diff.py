"""Compare two lint results (as stored dicts) for artifact baselines.

Growth in registers, spill bytes or per-thread local memory is a regression at
any size (each costs occupancy or memory traffic). Instruction counts (PTX total,
SASS total) are a regression only beyond a relative threshold (default 10%), since
small code-size changes are routine. Per-mnemonic changes are reported as
information, never as regressions: they are noisy and explain the totals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ArtifactChange:
    """One figure that differs between the baseline and the new result."""

    metric: str  # 'registers', 'spill_bytes', 'local_memory_bytes', 'ptx_instructions', ...
    old: float
    new: float
    regression: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _resource(d: Mapping[str, Any], key: str) -> float | None:
    res = d.get("resources") or {}
    value = res.get(key)
    if value is None and key == "spill_bytes" and "spill_stores" in res:
        value = int(res.get("spill_stores") or 0) + int(res.get("spill_loads") or 0)
    if value is None and key == "local_total_bytes" and "stack_frame_bytes" in res:
        stack = max(int(res.get("stack_frame_bytes") or 0), int(res.get("cumulative_stack_bytes") or 0))
        value = stack + int(res.get("local_memory_bytes") or 0)
    return None if value is None else float(value)


def _total(counts: Mapping[str, int] | None) -> float | None:
    return None if counts is None else float(sum(counts.values()))


def diff_results(old: Mapping[str, Any], new: Mapping[str, Any], threshold: float = 0.1) -> list[ArtifactChange]:
    """Changes from `old` to `new` (KernelLintResult.to_dict() shapes); see `regressions`."""
    changes: list[ArtifactChange] = []
    for metric, key, label in (
        ("registers", "registers", "registers"),
        ("spill_bytes", "spill_bytes", "spill bytes"),
        ("local_memory_bytes", "local_total_bytes", "local memory bytes per thread"),
        ("shared_memory_bytes", "shared_memory_bytes", "shared memory bytes"),
    ):
        a, b = _resource(old, key), _resource(new, key)
        if a is None or b is None or a == b:
            continue
        grew = b > a
        regression = grew and metric != "shared_memory_bytes"
        changes.append(ArtifactChange(metric, a, b, regression, f"{label}: {a:g} -> {b:g} ({b - a:+g})"))
    for metric, key in (("ptx_instructions", "ptx_instructions"), ("sass_instructions", "sass_histogram")):
        a_counts, b_counts = old.get(key), new.get(key)
        a, b = _total(a_counts), _total(b_counts)
        if a is None or b is None:
            continue
        if a != b:
            rel = (b - a) / a if a else float("inf")
            regression = rel > threshold
            changes.append(
                ArtifactChange(
                    metric,
                    a,
                    b,
                    regression,
                    f"{metric.replace('_', ' ')}: {a:g} -> {b:g} ({rel:+.1%}, threshold {threshold:.0%})",
                )
            )
        for mnemonic in sorted(set(a_counts) | set(b_counts)):
            x, y = float(a_counts.get(mnemonic, 0)), float(b_counts.get(mnemonic, 0))
            if x != y:
                changes.append(ArtifactChange(f"{metric}:{mnemonic}", x, y, False, f"{mnemonic}: {x:g} -> {y:g}"))
    return changes


def regressions(changes: list[ArtifactChange]) -> list[ArtifactChange]:
    return [c for c in changes if c.regression]
