"""Entry points of the CUDA artifact lint: `lint_kernel`, `lint_file`, `format_text`.

Flow: find the tools -> look the compiled unit up in the cache (re-hashing the
source and its includes, no CUDA tool runs) -> on a miss, compile with nvcc (or
assemble a .ptx with ptxas), read PTX/SASS/resources and store the unit -> pick the
kernel -> pin findings to its `__global__` declaration -> apply the checks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from .artifacts import CompiledUnit, KernelArtifacts
from .attribution import (
    Located,
    SourceIndex,
    anchor_for,
    locate_symbol,
    message_finding,
    owner_of,
    source_order,
)
from .build import BuildRequest, UnitLookup, compile_or_load
from .cache import LintCache
from .compile import DEFAULT_TIMEOUT_S
from .names import symbol_names
from .policy import TOOLING_CODES, Anchor, check_instructions, check_limits
from .report import format_text
from .result import (
    CODE_NOT_FOUND,
    CODE_SOURCE_MISSING,
    CODE_TOOLS_MISSING,
    Finding,
    KernelLintResult,
    status_from_findings,
)
from .spec import ArtifactChecks, KernelSpec
from .toolchain import Toolchain, find_toolchain

__all__ = ["format_text", "lint_file", "lint_kernel"]


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
    lookup: UnitLookup,
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
            "neither cuobjdump nor nvdisasm found: install gpuemu-ls[cuda]"
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
        # a definite violation fails the kernel whatever else could not be checked (a found `membar.sys` is a
        # FAIL without cuobjdump too); without one, a check that could not run never passes
        definite = any(f.severity == "error" and f.code not in TOOLING_CODES for f in result.findings)
        result.status = "failed" if definite else "error"
        result.message = "some checks could not be evaluated"
    else:
        result.status = status_from_findings(result.findings)
    return result


def _base_result(
    name: str, function: str | None, build: BuildRequest, unit: CompiledUnit | None, hit: bool
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


def _missing_source(name: str, function: str | None, build: BuildRequest, t0: float) -> KernelLintResult:
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
    build = BuildRequest(
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
    lookup = compile_or_load(build, tools, cache, timeout)
    unit = lookup.unit
    result = _base_result(spec.name, target, build, unit, lookup.cache_hit)
    index = SourceIndex(build.source, unit)

    matches = [s for s in unit.kernels if symbol_names(s).matches(target)]
    located = {s: locate_symbol(index, build, unit.kernels[s]) for s in unit.kernels}
    if len(matches) != 1:
        result.findings = [
            message_finding(m, located.get(owner_of(m, located) or ""), str(build.source), spec.name)
            for m in unit.messages
        ]
        result.status = "error"
        if not unit.ok and not matches:
            result.message = "compilation failed"
        else:
            loc = index.locate(target) if build.kind == "cu" else Located(None, str(build.source))
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
        message_finding(m, loc if owner_of(m, located) == sym else None, str(build.source), spec.name)
        for m in unit.messages
        if owner_of(m, located) in (sym, None)
    ]
    anchor = anchor_for(loc, unit.kernels[sym], build)
    _finish(result, unit.kernels[sym], unit, lookup, anchor, spec.checks, spec.warn_threshold, compiler)
    result.duration_ms = (time.perf_counter() - t0) * 1000
    return result


def _selection_error(target: str, matches: list[str], symbols: list[str], build: BuildRequest, loc: Located) -> str:
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
    build = BuildRequest(
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
    lookup = compile_or_load(build, tools, cache, timeout)
    unit = lookup.unit
    index = SourceIndex(build.source, unit)
    located = {s: locate_symbol(index, build, unit.kernels[s]) for s in unit.kernels}
    symbols = sorted(unit.kernels, key=lambda s: source_order(located[s], unit.kernels[s], build.source))

    if not symbols:
        decls = index.source_declarations() if build.kind == "cu" else []
        defs = [d for d in decls if d.is_definition] or decls
        targets = [(d.name, Located(d, str(build.source))) for d in defs] or [(stem, None)]
        results = []
        for i, (name, loc) in enumerate(targets):
            r = _base_result(name, name, build, unit, lookup.cache_hit)
            r.line = loc.decl.line if loc is not None and loc.decl else None
            r.findings = [
                message_finding(m, None, str(build.source), name)
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
    owners = {id(m): owner_of(m, located) for m in unit.messages}
    results: list[KernelLintResult] = []
    for i, sym in enumerate(symbols):
        name = display[sym]
        r = _base_result(name, name, build, unit, lookup.cache_hit)
        r.symbol, r.signature = sym, symbol_names(sym).signature
        loc = located[sym]
        r.line = loc.decl.line if loc.decl else unit.kernels[sym].ptx_line
        compiler = [
            message_finding(m, loc if owners[id(m)] == sym else None, str(build.source), name)
            for m in unit.messages
            if owners[id(m)] == sym or (owners[id(m)] is None and i == 0)
        ]
        _finish(
            r,
            unit.kernels[sym],
            unit,
            lookup,
            anchor_for(loc, unit.kernels[sym], build),
            checks,
            warn_threshold,
            compiler,
        )
        r.duration_ms = (time.perf_counter() - t0) * 1000
        results.append(r)
    return results
