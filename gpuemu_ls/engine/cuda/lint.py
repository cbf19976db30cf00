"""Entry points of the CUDA artifact lint: `lint_kernel`, `lint_file`, `format_text`.

Flow: find the tools -> look the compiled unit up in the cache (re-hashing the
source and its includes, no CUDA tool runs) -> on a miss, compile with nvcc (or
assemble a .ptx with ptxas), read PTX/SASS/resources and store the unit -> pick the
kernel -> pin findings to its `__global__` declaration -> apply the checks.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .artifacts import CompiledUnit, KernelArtifacts, build_unit
from .cache import LintCache, cache_key, dep_records
from .compile import DEFAULT_TIMEOUT_S, assemble_ptx, compile_cuda, disassemble
from .messages import CompilerMessage
from .names import symbol_names
from .policy import TOOLING_CODES, Anchor, check_instructions, check_limits
from .ptx import parse_ptx
from .report import format_text
from .result import (
    CODE_NOT_FOUND,
    CODE_NVCC_ERROR,
    CODE_NVCC_WARNING,
    CODE_PTXAS_ERROR,
    CODE_PTXAS_WARNING,
    CODE_SOURCE_MISSING,
    CODE_TOOLS_MISSING,
    Finding,
    KernelLintResult,
    status_from_findings,
)
from .source import KernelDeclaration, find_kernel_declarations, locate_kernel
from .spec import ArtifactChecks, KernelSpec
from .toolchain import Toolchain, find_toolchain

__all__ = ["format_text", "lint_file", "lint_kernel"]

TextsLoader = Callable[[], "dict[str, dict[str, list[str]]] | None"]


@dataclass
class _Build:
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
class _UnitLookup:
    unit: CompiledUnit
    cache_hit: bool
    load_texts: TextsLoader


def _relevant_versions(tools: Toolchain, kind: str, memo: Path | None) -> dict[str, str]:
    all_versions = tools.versions(memo)
    keep = ["ptxas"] if kind == "ptx" else ["nvcc", "ptxas"]
    keep.append("cuobjdump" if tools.cuobjdump is not None else "nvdisasm")
    return {k: v for k, v in all_versions.items() if k in keep}


def _system_roots(tools: Toolchain) -> list[Path]:
    roots = {Path("/usr/include"), Path("/usr/lib"), Path(sys.prefix), Path(sys.base_prefix)}
    for name in ("nvcc", "ptxas"):
        p = tools.path_of(name)
        if p is not None:
            roots.add(p.parent.parent)
            roots.add(p.resolve().parent.parent)
    return sorted(roots)


def _compile_unit(build: _Build, tools: Toolchain, cache: LintCache | None, timeout: float) -> _UnitLookup:
    """The compiled unit for `build`, from the cache when its files are unchanged."""
    versions = _relevant_versions(tools, build.kind, cache.version_memo if cache else None)
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
        unit = cache.load(key, build.source)
        if unit is not None:
            return _UnitLookup(unit, True, lambda: cache.load_texts(key))

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
            ptx_text = build.source.read_text(errors="replace")
            compiled = (
                assemble_ptx(tools, build.source, work, arch=build.arch, flags=build.flags, timeout=timeout)
                if tools.ptxas is not None
                else None
            )
        disasm = disassemble(tools, compiled.cubin, timeout) if compiled and compiled.cubin else None
        unit = build_unit(str(build.source), build.kind, compiled, parse_ptx(ptx_text), disasm, versions)
        deps = compiled.deps if compiled is not None else [build.source]

    user_roots = [build.source.parent, *build.include_dirs]
    records = dep_records(deps, _system_roots(tools), user_roots)
    if records is not None:
        unit.deps = records
        if cache is not None and unit.ok:
            cache.store(key, unit)
    texts = unit.texts
    return _UnitLookup(unit, False, lambda: texts)


# ---------------------------------------------------------------- positions


@dataclass
class _Located:
    decl: KernelDeclaration | None
    file: str

    def anchor(self, fallback_line: int | None = 1) -> Anchor:
        d = self.decl
        if d is None:
            return Anchor(self.file, fallback_line)
        return Anchor(self.file, d.line, d.column, d.name_line, d.name_end_column)

    def contains(self, msg: CompilerMessage) -> bool:
        d = self.decl
        if d is None or msg.file != self.file or msg.line is None:
            return False
        end = d.body_end_line if d.body_end_line is not None else d.name_line
        return d.line <= msg.line <= end


class _SourceIndex:
    """`__global__` declarations of the source and, if needed, of its user headers."""

    def __init__(self, source: Path, unit: CompiledUnit) -> None:
        self.source = source
        self._decls: dict[str, list[KernelDeclaration]] = {}
        self._headers = [Path(d.path) for d in unit.deps if not d.system and Path(d.path) != source]

    def _declarations(self, path: Path) -> list[KernelDeclaration]:
        key = str(path)
        if key not in self._decls:
            try:
                self._decls[key] = find_kernel_declarations(path.read_text(errors="replace"))
            except OSError:
                self._decls[key] = []
        return self._decls[key]

    def locate(self, name: str) -> _Located:
        for path in [self.source, *self._headers]:
            decl = locate_kernel(self._declarations(path), name)
            if decl is not None:
                return _Located(decl, str(path))
        return _Located(None, str(self.source))

    def source_declarations(self) -> list[KernelDeclaration]:
        return self._declarations(self.source)


# ---------------------------------------------------------------- findings


def _message_finding(msg: CompilerMessage, located: _Located | None, source: str, kernel: str | None) -> Finding:
    if msg.tool == "ptxas":
        code = CODE_PTXAS_ERROR if msg.severity == "error" else CODE_PTXAS_WARNING
    else:
        code = CODE_NVCC_ERROR if msg.severity == "error" else CODE_NVCC_WARNING
    if msg.file is not None:
        return Finding(msg.severity, code, msg.message, msg.file, msg.line or 1, msg.column, kernel=kernel)
    if located is not None:
        a = located.anchor()
        return Finding(msg.severity, code, msg.message, a.file, a.line, a.column, a.end_line, a.end_column, kernel)
    return Finding(msg.severity, code, msg.message, source, 1, kernel=kernel)


def _owner(msg: CompilerMessage, located: dict[str, _Located]) -> str | None:
    """The kernel symbol a message belongs to (it names it, or sits in its body), if any."""
    if msg.function is not None and msg.function in located:
        return msg.function
    for sym, loc in located.items():
        if loc.contains(msg):
            return sym
    return None


def _not_run(
    name: str, function: str | None, source: str, arch: str, tools: Toolchain, needed: Sequence[str], t0: float
) -> KernelLintResult:
    message = tools.missing_message(needed)
    return KernelLintResult(
        name=name,
        source=source,
        function=function,
        status="not_run",
        arch=arch,
        message=message,
        findings=[Finding("warning", CODE_TOOLS_MISSING, f"not linted: {message}", source, 1, kernel=name)],
        duration_ms=(time.perf_counter() - t0) * 1000,
    )


def _finish(
    result: KernelLintResult,
    art: KernelArtifacts,
    unit: CompiledUnit,
    lookup: _UnitLookup,
    anchor: Anchor,
    checks: ArtifactChecks,
    warn_threshold: float | None,
    compiler_findings: list[Finding],
) -> KernelLintResult:
    """Fill figures, run the checks, decide the status."""
    result.resources = art.resources.to_dict() if art.resources is not None else None
    result.ptx_instructions = art.ptx_counts
    result.sass_histogram = art.sass_counts
    if unit.sass_tool is None:
        sass_reason = unit.sass_error or (
            "neither cuobjdump nor nvdisasm found: pip install 'gpuemu-ls[cuda]'"
            if unit.assembled
            else "nothing was assembled (ptxas not found)"
        )
    else:
        sass_reason = None
    res_reason = (
        "ptxas did not report it for this kernel"
        if unit.assembled
        else f"nothing was assembled: {Toolchain().missing_message(('ptxas',))}"
    )
    lint = check_limits(art, checks, warn_threshold, anchor, result.name, res_reason)
    lint += check_instructions(art, checks, anchor, result.name, lookup.load_texts, sass_reason)
    result.findings = compiler_findings + lint
    if not unit.ok:
        result.status = "error"
        result.message = "compilation failed"
        if not any(f.severity == "error" for f in compiler_findings):
            first = next((m for m in unit.messages if m.severity == "error"), None)
            if first is not None:
                result.message += f" (elsewhere in the file: {first.message})"
    elif any(f.code in TOOLING_CODES for f in lint):
        result.status = "error"
        result.message = "some checks could not be evaluated"
    else:
        result.status = status_from_findings(result.findings)
    return result


def _base_result(
    name: str, function: str | None, build: _Build, unit: CompiledUnit | None, hit: bool
) -> KernelLintResult:
    versions = unit.tool_versions if unit is not None else {}
    return KernelLintResult(
        name=name,
        source=str(build.source),
        function=function,
        status="error",
        arch=build.arch,
        tool_version=versions.get("nvcc") or versions.get("ptxas"),
        tool_versions=dict(versions),
        cache_hit=hit,
    )


def _resolve_source(source: Path) -> Path:
    return Path(source).expanduser().resolve()


def _missing_source(name: str, function: str | None, build: _Build, t0: float) -> KernelLintResult:
    msg = f"source file not found: {build.source}"
    r = _base_result(name, function, build, None, False)
    r.message = msg
    r.findings = [Finding("error", CODE_SOURCE_MISSING, msg, str(build.source), None, kernel=name)]
    r.duration_ms = (time.perf_counter() - t0) * 1000
    return r


def lint_kernel(
    spec: KernelSpec,
    cache_dir: Path | None,
    tools: Toolchain | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> KernelLintResult:
    """Compile (or fetch from the cache) `spec.source` and lint the kernel `spec.function`."""
    t0 = time.perf_counter()
    build = _Build(
        _resolve_source(spec.source),
        spec.arch,
        tuple(spec.flags),
        tuple(_resolve_source(d) for d in spec.include_dirs),
        tuple(spec.defines),
    )
    target = spec.target_function
    if not build.source.is_file():
        return _missing_source(spec.name, target, build, t0)
    tools = tools if tools is not None else find_toolchain()
    if build.kind == "cu" and tools.nvcc is None:  # a .ptx is still read without any tool
        return _not_run(spec.name, target, str(build.source), build.arch, tools, ("nvcc",), t0)

    cache = LintCache(cache_dir) if cache_dir is not None else None
    lookup = _compile_unit(build, tools, cache, timeout)
    unit = lookup.unit
    result = _base_result(spec.name, target, build, unit, lookup.cache_hit)
    index = _SourceIndex(build.source, unit)

    matches = [s for s in unit.kernels if symbol_names(s).matches(target)]
    located = {s: _locate(index, build, unit.kernels[s]) for s in unit.kernels}
    if len(matches) != 1:
        result.findings = [
            _message_finding(m, located.get(_owner(m, located) or ""), str(build.source), spec.name)
            for m in unit.messages
        ]
        result.status = "error"
        if not unit.ok and not matches:
            result.message = "compilation failed"
        else:
            loc = index.locate(target) if build.kind == "cu" else _Located(None, str(build.source))
            result.message = _selection_error(target, matches, list(unit.kernels), build, loc)
            a = loc.anchor()
            result.findings.append(
                Finding(
                    "error",
                    CODE_NOT_FOUND,
                    result.message,
                    a.file,
                    a.line,
                    a.column,
                    a.end_line,
                    a.end_column,
                    spec.name,
                )
            )
        result.duration_ms = (time.perf_counter() - t0) * 1000
        return result

    sym = matches[0]
    names = symbol_names(sym)
    result.symbol, result.signature = sym, names.signature
    loc = located[sym]
    result.line = loc.decl.line if loc.decl else unit.kernels[sym].ptx_line
    compiler = [
        _message_finding(m, loc if _owner(m, located) == sym else None, str(build.source), spec.name)
        for m in unit.messages
        if _owner(m, located) in (sym, None)
    ]
    anchor = _anchor_for(loc, unit.kernels[sym], build)
    _finish(result, unit.kernels[sym], unit, lookup, anchor, spec.checks, spec.warn_threshold, compiler)
    result.duration_ms = (time.perf_counter() - t0) * 1000
    return result


def _locate(index: _SourceIndex, build: _Build, art: KernelArtifacts) -> _Located:
    if build.kind == "ptx":
        return _Located(None, str(build.source))
    names = symbol_names(art.symbol)
    return index.locate(names.qualified)


def _source_order(loc: _Located, art: KernelArtifacts, source: Path) -> tuple[bool, str, int, int]:
    """Kernels of a file in the order they are written (ptxas reports them in reverse)."""
    ptx_line = art.ptx_line or 1 << 30
    line = loc.decl.line if loc.decl else ptx_line
    return (loc.file != str(source), loc.file, line, ptx_line)


def _anchor_for(loc: _Located, art: KernelArtifacts, build: _Build) -> Anchor:
    if build.kind == "ptx":
        return Anchor(str(build.source), art.ptx_line)
    return loc.anchor()


def _selection_error(target: str, matches: list[str], symbols: list[str], build: _Build, loc: _Located) -> str:
    def show(s: str) -> str:
        n = symbol_names(s)
        return n.name if n.name == s else f"{n.name} ({s})"

    if matches:
        return (
            f"kernel {target!r} is ambiguous in {build.source.name}: it matches "
            + ", ".join(show(s) for s in matches)
            + "; set `function` to the mangled symbol or the full signature"
        )
    found = ", ".join(show(s) for s in symbols) or "none"
    hint = ""
    if loc.decl is not None:
        hint = (
            f"; it is declared at {Path(loc.file).name}:{loc.decl.line} but nothing was compiled for it "
            "(a template kernel needs an instantiation)"
        )
    return (
        f"no kernel named {target!r} in {build.source.name} (compiled for {build.arch}); kernels found: {found}{hint}"
    )


def _display_names(symbols: list[str]) -> dict[str, str]:
    """Short unique names for the kernels of one file: base name, else with template args."""
    out: dict[str, str] = {}
    bases = [symbol_names(s).base for s in symbols]
    names = [symbol_names(s).name for s in symbols]
    for s, b, n in zip(symbols, bases, names):
        if bases.count(b) == 1:
            out[s] = b
        elif names.count(n) == 1:
            out[s] = n
        else:
            out[s] = symbol_names(s).signature
    return out


def lint_file(
    path: Path,
    cache_dir: Path | None = None,
    checks: ArtifactChecks | None = None,
    *,
    arch: str = "sm_90",
    flags: Sequence[str] = (),
    include_dirs: Sequence[Path] = (),
    defines: Sequence[str] = (),
    warn_threshold: float | None = None,
    tools: Toolchain | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> list[KernelLintResult]:
    """Lint every kernel of a .cu file (or every .entry of a .ptx file), one result each.

    A file that fails to compile yields one `error` result per `__global__` declared in
    it (or one for the file). A file with no kernel yields one `not_run` result, so that
    nothing is ever silently reported as passed.
    """
    t0 = time.perf_counter()
    checks = checks or ArtifactChecks()
    build = _Build(
        _resolve_source(path),
        arch,
        tuple(flags),
        tuple(_resolve_source(d) for d in include_dirs),
        tuple(defines),
    )
    stem = build.source.stem
    if not build.source.is_file():
        return [_missing_source(stem, None, build, t0)]
    tools = tools if tools is not None else find_toolchain()
    if build.kind == "cu" and tools.nvcc is None:
        return [_not_run(stem, None, str(build.source), arch, tools, ("nvcc",), t0)]

    cache = LintCache(cache_dir) if cache_dir is not None else None
    lookup = _compile_unit(build, tools, cache, timeout)
    unit = lookup.unit
    index = _SourceIndex(build.source, unit)
    located = {s: _locate(index, build, unit.kernels[s]) for s in unit.kernels}
    symbols = sorted(unit.kernels, key=lambda s: _source_order(located[s], unit.kernels[s], build.source))

    if not symbols:
        decls = index.source_declarations() if build.kind == "cu" else []
        defs = [d for d in decls if d.is_definition] or decls
        targets = [(d.name, _Located(d, str(build.source))) for d in defs] or [(stem, None)]
        results = []
        for i, (name, loc) in enumerate(targets):
            r = _base_result(name, name, build, unit, lookup.cache_hit)
            r.line = loc.decl.line if loc is not None and loc.decl else None
            r.findings = [
                _message_finding(m, None, str(build.source), name)
                for m in unit.messages
                if (loc is not None and loc.contains(m))
                or (i == 0 and not any(t[1] is not None and t[1].contains(m) for t in targets))
            ]
            if unit.ok:
                r.status, r.message = "not_run", f"no __global__ kernel compiled from {build.source.name}"
            else:
                r.message = "compilation failed"
            r.duration_ms = (time.perf_counter() - t0) * 1000
            results.append(r)
        return results

    display = _display_names(symbols)
    owners = {id(m): _owner(m, located) for m in unit.messages}
    results: list[KernelLintResult] = []
    for i, sym in enumerate(symbols):
        name = display[sym]
        r = _base_result(name, name, build, unit, lookup.cache_hit)
        r.symbol, r.signature = sym, symbol_names(sym).signature
        loc = located[sym]
        r.line = loc.decl.line if loc.decl else unit.kernels[sym].ptx_line
        compiler = [
            _message_finding(m, loc if owners[id(m)] == sym else None, str(build.source), name)
            for m in unit.messages
            if owners[id(m)] == sym or (owners[id(m)] is None and i == 0)
        ]
        _finish(
            r,
            unit.kernels[sym],
            unit,
            lookup,
            _anchor_for(loc, unit.kernels[sym], build),
            checks,
            warn_threshold,
            compiler,
        )
        r.duration_ms = (time.perf_counter() - t0) * 1000
        results.append(r)
    return results
