"""Turn a kernel's figures and the configured checks into findings.

Errors: a figure above its limit, a forbidden pattern present, a required pattern
absent. Warnings: a figure above `warn_threshold` x limit but within the limit.
A check that cannot be evaluated (no SASS because no disassembler, no resources
because nothing was assembled, a malformed pattern) is an error finding with code
`artifact-unavailable` / `invalid-pattern`, so it can never pass silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .artifacts import KernelArtifacts
from .patterns import InstructionPattern, PatternError, parse_pattern
from .resources import KernelResources
from .result import (
    CODE_FORBIDDEN,
    CODE_INVALID_PATTERN,
    CODE_MAX_LOCAL,
    CODE_MAX_REGISTERS,
    CODE_MAX_SHARED,
    CODE_MAX_SPILLS,
    CODE_REQUIRED,
    CODE_UNAVAILABLE,
    Finding,
)
from .spec import ArtifactChecks

TOOLING_CODES = frozenset({CODE_INVALID_PATTERN, CODE_UNAVAILABLE})

TextsLoader = Callable[[], "dict[str, dict[str, list[str]]] | None"]


@dataclass(frozen=True)
class Anchor:
    """Where lint findings of a kernel are pinned: its `__global__` declaration."""

    file: str
    line: int | None = None
    column: int | None = None
    end_line: int | None = None
    end_column: int | None = None

    def finding(self, severity: str, code: str, message: str, kernel: str, **kw: float | None) -> Finding:
        return Finding(
            severity,
            code,
            message,
            self.file,
            self.line,
            self.column,
            self.end_line,
            self.end_column,
            kernel,
            **kw,
        )


_LIMITS: tuple[tuple[str, str, Callable[[KernelResources], int | None], str], ...] = (
    ("max_registers", CODE_MAX_REGISTERS, lambda r: r.registers, "registers per thread"),
    ("max_spills", CODE_MAX_SPILLS, lambda r: r.spill_bytes, "spill bytes (stores + loads)"),
    (
        "max_local_memory_bytes",
        CODE_MAX_LOCAL,
        lambda r: r.local_total_bytes,
        "bytes of local memory per thread (stack frame + lmem)",
    ),
    (
        "max_shared_memory_bytes",
        CODE_MAX_SHARED,
        lambda r: r.shared_memory_bytes,
        "bytes of static shared memory per block",
    ),
)


def check_limits(
    art: KernelArtifacts,
    checks: ArtifactChecks,
    warn_threshold: float | None,
    anchor: Anchor,
    kernel: str,
    unavailable_reason: str = "ptxas did not report it",
) -> list[Finding]:
    """Resource limits -> error above the limit, warning above warn_threshold x limit."""
    out: list[Finding] = []
    for attr, code, getter, label in _LIMITS:
        limit = getattr(checks, attr)
        if limit is None:
            continue
        value = getter(art.resources) if art.resources is not None else None
        if value is None:
            out.append(
                anchor.finding(
                    "error",
                    CODE_UNAVAILABLE,
                    f"cannot check {attr} = {limit} ({label}): {unavailable_reason}",
                    kernel,
                    limit=limit,
                )
            )
            continue
        if value > limit:
            out.append(
                anchor.finding(
                    "error",
                    code,
                    f"{kernel} uses {value} {label}, above the limit of {limit}",
                    kernel,
                    value=value,
                    limit=limit,
                )
            )
        elif warn_threshold is not None and value > warn_threshold * limit:
            out.append(
                anchor.finding(
                    "warning",
                    code,
                    f"{kernel} uses {value} {label}, above {warn_threshold:.0%} of the limit of {limit}",
                    kernel,
                    value=value,
                    limit=limit,
                )
            )
    return out


def _matches(pattern: InstructionPattern, counts: dict[str, int], texts: list[str] | None) -> dict[str, int]:
    """What the pattern matched: {mnemonic or instruction text: count}."""
    if not pattern.needs_text:
        return pattern.count_in_histogram(counts)
    found: dict[str, int] = {}
    assert pattern.regex is not None
    for t in texts or []:
        if pattern.regex.search(t):
            found[t] = found.get(t, 0) + 1
    return found


def _summary(found: dict[str, int], limit: int = 4) -> str:
    items = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{k} x{n}" for k, n in items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def check_instructions(
    art: KernelArtifacts,
    checks: ArtifactChecks,
    anchor: Anchor,
    kernel: str,
    load_texts: TextsLoader,
    sass_unavailable_reason: str | None,
) -> list[Finding]:
    """Forbidden patterns must not match; required ones must match at least once."""
    out: list[Finding] = []
    # the patterns no artifact could be read for, by why: one "not checked" finding per reason, not one per
    # pattern each repeating the install hint
    unchecked: dict[str, list[str]] = {}
    texts_cache: list[dict[str, dict[str, list[str]]] | None] = []

    def texts_for(artifact: str) -> list[str] | None:
        if not texts_cache:
            texts_cache.append(load_texts())
        t = texts_cache[0]
        return None if t is None else t.get(artifact, {}).get(art.symbol)

    for raw, required in [(p, False) for p in checks.forbidden_instructions] + [
        (p, True) for p in checks.required_instructions
    ]:
        kind = "required" if required else "forbidden"
        try:
            pattern = parse_pattern(raw)
        except PatternError as exc:
            out.append(anchor.finding("error", CODE_INVALID_PATTERN, f"{kind} instruction {exc}", kernel))
            continue
        counts = art.ptx_counts if pattern.artifact == "ptx" else art.sass_counts
        label = pattern.artifact.upper()
        if counts is None:
            why = sass_unavailable_reason if pattern.artifact == "sass" else "no PTX was produced"
            unchecked.setdefault(str(why), []).append(f"{kind} {label} pattern `{raw}`")
            continue
        texts = texts_for(pattern.artifact) if pattern.needs_text else None
        if pattern.needs_text and texts is None:
            unchecked.setdefault(f"{label} instruction texts unavailable", []).append(f"{kind} pattern `{raw}`")
            continue
        found = _matches(pattern, counts, texts)
        total = sum(found.values())
        if not required and total:
            out.append(
                anchor.finding(
                    "error",
                    CODE_FORBIDDEN,
                    f"{kernel}: forbidden instruction pattern `{raw}` matches {total} {label} "
                    f"instruction(s): {_summary(found)}",
                    kernel,
                    value=total,
                    limit=0,
                )
            )
        elif required and not total:
            out.append(
                anchor.finding(
                    "error",
                    CODE_REQUIRED,
                    f"{kernel}: required instruction pattern `{raw}` not found in {label}",
                    kernel,
                    value=0,
                )
            )
    for why, patterns in unchecked.items():
        out.append(anchor.finding("error", CODE_UNAVAILABLE, f"not checked: {', '.join(patterns)} ({why})", kernel))
    return out
