"""``[[kernels]]`` entries through the CUDA lint: config in, results-document entries out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import ArtifactChecksConfig, Config, KernelConfig


def _checks(c: ArtifactChecksConfig) -> Any:
    from .cuda.spec import ArtifactChecks

    return ArtifactChecks(
        max_registers=c.max_registers, max_spills=c.max_spills, max_local_memory_bytes=c.max_local_memory_bytes,
        max_shared_memory_bytes=c.max_shared_memory_bytes,
        forbidden_instructions=tuple(c.forbidden_instructions or ()),
        required_instructions=tuple(c.required_instructions or ()))


def kernel_spec(config: Config, k: KernelConfig) -> Any:
    """The lint spec of a kernel: its own settings over the ``[cuda]`` defaults."""
    from .cuda.spec import KernelSpec

    cu = config.cuda
    return KernelSpec(
        name=k.name, source=config.resolve(k.source), function=k.function, arch=k.arch or cu.arch,
        flags=(*cu.flags, *k.flags), include_dirs=tuple(config.resolve(d) for d in (*cu.include_dirs, *k.include_dirs)),
        defines=(*cu.defines, *k.defines), checks=_checks(k.artifact_checks).merged_over(_checks(cu.artifact_checks)),
        warn_threshold=config.policies.warn_threshold)


def cache_dir(config: Config) -> Path:
    return config.root / ".gpuemu" / "cache" / "lint"


def _rel(config: Config, file: str | None) -> str | None:
    if not file:
        return None
    try:
        return Path(file).resolve().relative_to(config.root).as_posix()
    except ValueError:
        return file


def _summary(res: dict[str, Any] | None) -> str:
    if not res:
        return ""
    parts = []
    for key, label, unit in (("registers", "regs", ""), ("spill_stores", "spill st", " B"),
                             ("spill_loads", "spill ld", " B"), ("stack_frame", "stack", " B"),
                             ("shared_memory", "smem", " B")):
        if res.get(key) is not None:
            parts.append(f"{label} {res[key]}{unit}")
    return ", ".join(parts)


def lint_entries(config: Config, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Lint the selected kernels; each becomes a results-document entry (never 'passed' without tools)."""
    from .cuda.lint import lint_kernel

    entries = []
    for k in config.kernels:
        if names is not None and k.name not in names:
            continue
        r = lint_kernel(kernel_spec(config, k), cache_dir(config))
        d = r.to_dict()
        findings = []
        for f in d.get("findings", []):
            f = dict(f)
            f["file"] = _rel(config, f.get("file"))
            findings.append(f)
        entries.append({
            "name": k.name, "kind": "kernel", "status": r.status, "message": r.message,
            "summary": _summary(r.resources) or r.message, "elapsed": round(r.duration_ms / 1000, 4),
            "source": {"file": _rel(config, str(config.resolve(k.source))), "line": r.line or 1},
            "findings": findings, "resources": r.resources or {}, "ptx_instructions": r.ptx_instructions or {},
            "sass_instructions": r.sass_histogram or {}, "cache_hit": r.cache_hit, "tool_version": r.tool_version,
        })
    return entries
