"""Terminal rendering of lint results: one summary line per kernel, then the findings.

Findings use the `file:line: severity code: message` shape that editors and CI log
viewers turn into links.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from .result import KernelLintResult

_STATUS_WORD = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "not_run": "NOT RUN"}


def _rel(path: str | None) -> str:
    if not path:
        return "<unknown>"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _figures(r: KernelLintResult) -> str:
    parts: list[str] = []
    res = r.resources
    if res:
        if res.get("registers") is not None:
            parts.append(f"regs {res['registers']}")
        parts.append(f"spill {res.get('spill_bytes', 0)} B")
        parts.append(f"local {res.get('local_total_bytes', 0)} B")
        parts.append(f"smem {res.get('shared_memory_bytes', 0)} B")
    if r.sass_histogram is not None:
        parts.append(f"sass {sum(r.sass_histogram.values())}")
    if r.ptx_instructions is not None:
        parts.append(f"ptx {sum(r.ptx_instructions.values())}")
    return "  ".join(parts)


def summary_line(r: KernelLintResult) -> str:
    where = _rel(r.source) + (f":{r.line}" if r.line else "")
    timing = f"{r.duration_ms:.0f} ms" + (", cached" if r.cache_hit else "")
    detail = _figures(r) or r.message
    return f"{_STATUS_WORD.get(r.status, r.status.upper()):<7} {r.name}  {where}  {detail}  [{timing}]"


def format_text(results: Iterable[KernelLintResult]) -> str:
    """Human-readable report for a terminal."""
    results = list(results)
    lines = [summary_line(r) for r in results]
    for r in results:
        if r.message and r.status in ("error", "not_run"):
            lines.append(f"{_rel(r.source)}: {r.status} {r.name}: {r.message}")
    seen: set[tuple[object, ...]] = set()
    for r in results:
        for f in r.findings:
            key = (f.file, f.line, f.severity, f.code, f.message)
            if key in seen:
                continue
            seen.add(key)
            loc = _rel(f.file) + (f":{f.line}" if f.line is not None else "")
            lines.append(f"{loc}: {f.severity} {f.code}: {f.message}")
    counts = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "error", "not_run")}
    tally = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n)
    lines.append(f"{len(results)} kernel(s): {tally}")
    return "\n".join(lines)
