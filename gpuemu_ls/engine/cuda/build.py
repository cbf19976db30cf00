"""Compile one source, or fetch its compiled unit from the cache: the expensive step, done once.

A `BuildRequest` is what affects the artifacts (source, arch, flags, includes,
defines); checks are applied later, so linting the same file with other limits is
a cache hit. On a miss: nvcc (or ptxas for a .ptx), the PTX reader, the
disassembler, then the dependency hashes are recorded and the unit is stored.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..safe_read import MAX_LINT_SOURCE_BYTES, read_text
from .artifacts import CompiledUnit, build_unit
from .cache import LintCache, cache_key, dep_records
from .compile import assemble_ptx, compile_cuda, disassemble
from .ptx import parse_ptx, ptx_targets
from .toolchain import Toolchain

TextsLoader = Callable[[], "dict[str, dict[str, list[str]]] | None"]


@dataclass
class BuildRequest:
    """How to compile one source (the parts of a KernelSpec that affect artifacts)."""

    source: Path
    arch: str
    flags: tuple[str, ...]
    include_dirs: tuple[Path, ...]
    defines: tuple[str, ...]

    @property
    def kind(self) -> str:
        return "ptx" if self.source.suffix.lower() == ".ptx" else "cu"


@dataclass
class UnitLookup:
    """A compiled unit, whether it came from the cache, and how to get its instruction texts."""

    unit: CompiledUnit
    cache_hit: bool
    load_texts: TextsLoader


def relevant_versions(tools: Toolchain, kind: str, memo: Path | None) -> dict[str, str]:
    """Versions of the tools whose output the unit depends on (part of the cache key)."""
    all_versions = tools.versions(memo)
    keep = ["ptxas"] if kind == "ptx" else ["nvcc", "ptxas"]
    keep.append("cuobjdump" if tools.cuobjdump is not None else "nvdisasm")
    return {k: v for k, v in all_versions.items() if k in keep}


def system_roots(tools: Toolchain) -> list[Path]:
    """Folders of toolkit/system headers, whose unchanged size+mtime is trusted by the cache."""
    roots = {Path("/usr/include"), Path("/usr/lib"), Path(sys.prefix), Path(sys.base_prefix)}
    for name in ("nvcc", "ptxas"):
        p = tools.path_of(name)
        if p is not None:
            roots.add(p.parent.parent)
            roots.add(p.resolve().parent.parent)
    return sorted(roots)


def compile_or_load(build: BuildRequest, tools: Toolchain, cache: LintCache | None, timeout: float) -> UnitLookup:
    """The compiled unit for `build`, from the cache when its files are unchanged."""
    versions = relevant_versions(tools, build.kind, cache.version_memo if cache else None)
    key = cache_key(
        {
            "kind": build.kind,
            "source": str(build.source),
            "arch": build.arch,
            "flags": list(build.flags),
            "include_dirs": [str(d) for d in build.include_dirs],
            "defines": list(build.defines),
            "tools": versions,
        }
    )
    if cache is not None:
        cached = cache.load(key, build.source)
        if cached is not None:

            def texts_or_rebuild() -> dict[str, dict[str, list[str]]] | None:
                # A lost/corrupt side file costs a recompile, never a check that cannot run.
                return cache.load_texts(key) or _compile(build, tools, cache, key, versions, timeout).texts

            return UnitLookup(cached, True, texts_or_rebuild)
    unit = _compile(build, tools, cache, key, versions, timeout)
    texts = unit.texts
    return UnitLookup(unit, False, lambda: texts)


def _compile(
    build: BuildRequest,
    tools: Toolchain,
    cache: LintCache | None,
    key: str,
    versions: dict[str, str],
    timeout: float,
) -> CompiledUnit:
    """Run the tools in a temporary folder, summarise, record dependency hashes, store if it built."""
    with tempfile.TemporaryDirectory(prefix="gpuemu-cuda-") as tmp:
        work = Path(tmp)
        if build.kind == "cu":
            compiled = compile_cuda(
                tools,
                build.source,
                work,
                arch=build.arch,
                flags=build.flags,
                include_dirs=build.include_dirs,
                defines=build.defines,
                timeout=timeout,
            )
            ptx_text = compiled.ptx_text or ""
        else:
            ptx_text = read_text(build.source, limit=MAX_LINT_SOURCE_BYTES, errors="replace")
            arch = ptx_arch(build.arch, ptx_text)
            compiled = (
                assemble_ptx(tools, build.source, work, arch=arch, flags=build.flags, timeout=timeout)
                if tools.ptxas is not None
                else None
            )
        disasm = disassemble(tools, compiled.cubin, timeout) if compiled and compiled.cubin else None
        unit = build_unit(str(build.source), build.kind, compiled, parse_ptx(ptx_text), disasm, versions)
        deps = compiled.deps if compiled is not None else [build.source]

    user_roots = [build.source.parent, *build.include_dirs]
    records = dep_records(deps, system_roots(tools), user_roots)
    if records is not None:
        unit.deps = records
        if cache is not None and unit.ok:
            cache.store(key, unit)
    return unit


def ptx_arch(arch: str, ptx_text: str) -> str:
    """The arch to assemble a .ptx for: its own `.target` when that is `arch` plus a feature suffix.

    PTX written for `sm_90a` (Triton emits that for Hopper) cannot be assembled for
    plain `sm_90`, and the suffix is what the author meant.
    """
    for target in ptx_targets(ptx_text):
        if target != arch and target.startswith(arch) and target[len(arch) :] in ("a", "f"):
            return target
    return arch
