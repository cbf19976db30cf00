"""``[[kernels]]`` entries through the CUDA lint: config in, results-document entries out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config.model import ArtifactChecksConfig, Config, KernelConfig


def _checks(c: ArtifactChecksConfig) -> Any:
    from ..cuda.spec import ArtifactChecks

    return ArtifactChecks(
        max_registers=c.max_registers,
        max_spills=c.max_spills,
        max_local_memory_bytes=c.max_local_memory_bytes,
        max_shared_memory_bytes=c.max_shared_memory_bytes,
        forbidden_instructions=tuple(c.forbidden_instructions or ()),
        required_instructions=tuple(c.required_instructions or ()),
    )


def kernel_spec(config: Config, k: KernelConfig) -> Any:
    """The lint spec of a kernel: its own settings over the ``[cuda]`` defaults."""
    from ..cuda.spec import KernelSpec

    cu = config.cuda
    return KernelSpec(
        name=k.name,
        source=config.resolve(k.source),
        function=k.function,
        arch=k.arch or cu.arch,
        flags=(*cu.flags, *k.flags),
        include_dirs=tuple(config.resolve(d) for d in (*cu.include_dirs, *k.include_dirs)),
        defines=(*cu.defines, *k.defines),
        checks=_checks(k.artifact_checks).merged_over(_checks(cu.artifact_checks)),
        warn_threshold=config.policies.warn_threshold,
    )


def toolchain(config: Config | None) -> Any:
    """The CUDA tools: ``[cuda] nvcc`` when set (its folder first), then PATH and NVIDIA's wheels."""
    from ..cuda.toolchain import find_toolchain

    explicit = config.cuda.nvcc if config is not None else None
    return find_toolchain(config.resolve(explicit) if explicit and not Path(explicit).is_absolute() else explicit)


def cache_dir(config: Config) -> Path:
    return config.root / ".gpuemu" / "cache" / "lint"


def _rel(root: Path, file: str | None) -> str | None:
    if not file:
        return None
    try:
        return Path(file).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return file


def _summary(res: dict[str, Any] | None) -> str:
    if not res:
        return ""
    parts = []
    for key, label, unit in (
        ("registers", "regs", ""),
        ("spill_bytes", "spills", " B"),
        ("local_total_bytes", "local", " B"),
        ("shared_memory_bytes", "smem", " B"),
        ("barriers", "barriers", ""),
    ):
        if res.get(key) is not None:
            parts.append(f"{label} {res[key]}{unit}")
    return ", ".join(parts)


def entry(root: Path, r: Any, source: Path, name: str | None = None, *, limits: bool = True) -> dict[str, Any]:
    """A results-document entry for one lint result (paths relative to ``root``)."""
    d = r.to_dict()
    findings = []
    for f in d.get("findings", []):
        f = dict(f)
        f["file"] = _rel(root, f.get("file"))
        findings.append(f)
    return {
        "name": name or r.name,
        "kind": "kernel",
        "status": r.status,
        "message": r.message,
        "summary": _summary(r.resources) or r.message,
        "elapsed": round(r.duration_ms / 1000, 4),
        "source": {"file": _rel(root, str(source)), "line": r.line or 1},
        "findings": findings,
        "resources": r.resources or {},
        "ptx_instructions": r.ptx_instructions or {},
        "sass_instructions": r.sass_histogram or {},
        "cache_hit": r.cache_hit,
        "tool_version": r.tool_version,
        "limits": limits,  # False: no artifact check applied, the figures are information only
    }


def lint_entries(config: Config, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Lint the selected kernels; each becomes a results-document entry (never 'passed' without tools)."""
    from ..cuda.lint import lint_kernel

    out = []
    for k in config.kernels:
        if names is not None and k.name not in names:
            continue
        spec = kernel_spec(config, k)
        r = lint_kernel(spec, cache_dir(config), toolchain(config))
        out.append(entry(config.root, r, config.resolve(k.source), k.name, limits=spec.checks.any()))
    return out


def lint_path(path: Path, config: Config | None, cache: Path) -> list[dict[str, Any]]:
    """Every kernel of a .cu or .ptx file, with the workspace's ``[cuda]`` settings; a kernel the workspace
    has a ``[[kernels]]`` entry for is judged by that entry (its own limits, flags and defines)."""
    from ..cuda.lint import lint_file

    kw: dict[str, Any] = {}
    if config is not None:
        cu = config.cuda
        kw = {
            "checks": _checks(cu.artifact_checks),
            "arch": cu.arch,
            "flags": cu.flags,
            "include_dirs": tuple(config.resolve(d) for d in cu.include_dirs),
            "defines": cu.defines,
            "warn_threshold": config.policies.warn_threshold,
        }
    root = config.root if config is not None else path.resolve().parent
    limits = bool(kw) and kw["checks"].any()
    results = lint_file(path.resolve(), cache, tools=toolchain(config), **kw)
    entries = [entry(root, r, path.resolve(), limits=limits) for r in results]
    if config is None:
        return entries
    own = {
        (k.function or k.name): k.name for k in config.kernels if config.resolve(k.source).resolve() == path.resolve()
    }
    judged = {e["name"]: e for e in lint_entries(config, sorted(set(own.values())))} if own else {}
    return [judged.get(own.get(e["name"], ""), e) for e in entries]
