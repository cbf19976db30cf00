"""The summary of one compilation unit that the lint needs, and that the cache stores.

A `CompiledUnit` holds per-kernel figures (resources, PTX counts, SASS histogram)
for every kernel of one source compiled one way, plus the compiler's messages and
the dependency hashes that decide whether the cache entry is still valid. The
instruction texts (only needed by `re:` patterns) travel separately so that a cache
hit does not have to load them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .compile import CompileOutput, Disassembly
from .messages import CompilerMessage
from .ptx import PtxEntry
from .resources import KernelResources, merge_res_usage


@dataclass
class KernelArtifacts:
    """Figures of one kernel (entry function) of a compiled unit."""

    symbol: str
    resources: KernelResources | None = None  # None when nothing was assembled
    ptx_counts: dict[str, int] | None = None
    sass_counts: dict[str, int] | None = None  # None when no disassembler ran
    ptx_line: int | None = None  # line of `.entry` in the PTX (pins findings for .ptx sources)

    def to_dict(self) -> dict[str, Any]:
        return {
            "symbol": self.symbol,
            "resources": self.resources.to_dict() if self.resources else None,
            "ptx_counts": self.ptx_counts,
            "sass_counts": self.sass_counts,
            "ptx_line": self.ptx_line,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelArtifacts:
        res = d.get("resources")
        return cls(
            symbol=d["symbol"],
            resources=KernelResources.from_dict(res) if res else None,
            ptx_counts=d.get("ptx_counts"),
            sass_counts=d.get("sass_counts"),
            ptx_line=d.get("ptx_line"),
        )


@dataclass
class DepRecord:
    """One file the unit depends on, with what is needed to tell whether it changed."""

    path: str
    sha256: str
    size: int
    mtime_ns: int
    system: bool  # toolkit/system header: a matching (size, mtime) is trusted without re-hashing


@dataclass
class CompiledUnit:
    """Everything linting needs from compiling one source one way."""

    source: str
    kind: str  # 'cu' | 'ptx'
    ok: bool
    kernels: dict[str, KernelArtifacts] = field(default_factory=dict)  # by symbol, in file order
    messages: list[CompilerMessage] = field(default_factory=list)
    global_memory_bytes: int = 0
    module_constant_bytes: dict[str, int] = field(default_factory=dict)  # bank -> bytes
    deps: list[DepRecord] = field(default_factory=list)
    tool_versions: dict[str, str] = field(default_factory=dict)
    sass_tool: str | None = None  # 'cuobjdump' | 'nvdisasm' | None (no SASS)
    sass_error: str | None = None
    assembled: bool = False  # ptxas ran (resources available)
    compile_seconds: float = 0.0
    texts: dict[str, dict[str, list[str]]] | None = None  # {'ptx'|'sass': {symbol: [text]}}

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "kind": self.kind,
            "ok": self.ok,
            "kernels": [k.to_dict() for k in self.kernels.values()],
            "messages": [m.to_dict() for m in self.messages],
            "global_memory_bytes": self.global_memory_bytes,
            "module_constant_bytes": self.module_constant_bytes,
            "deps": [asdict(d) for d in self.deps],
            "tool_versions": self.tool_versions,
            "sass_tool": self.sass_tool,
            "sass_error": self.sass_error,
            "assembled": self.assembled,
            "compile_seconds": self.compile_seconds,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompiledUnit:
        kernels = [KernelArtifacts.from_dict(k) for k in d["kernels"]]
        return cls(
            source=d["source"],
            kind=d["kind"],
            ok=bool(d["ok"]),
            kernels={k.symbol: k for k in kernels},
            messages=[CompilerMessage.from_dict(m) for m in d.get("messages", [])],
            global_memory_bytes=int(d.get("global_memory_bytes", 0)),
            module_constant_bytes={str(k): int(v) for k, v in d.get("module_constant_bytes", {}).items()},
            deps=[DepRecord(**x) for x in d.get("deps", [])],
            tool_versions=dict(d.get("tool_versions", {})),
            sass_tool=d.get("sass_tool"),
            sass_error=d.get("sass_error"),
            assembled=bool(d.get("assembled", False)),
            compile_seconds=float(d.get("compile_seconds", 0.0)),
        )


def build_unit(
    source: str,
    kind: str,
    compiled: CompileOutput | None,
    ptx_entries: list[PtxEntry],
    disassembly: Disassembly | None,
    tool_versions: dict[str, str],
) -> CompiledUnit:
    """Join ptxas -v figures, PTX entries and SASS functions by kernel symbol."""
    unit = CompiledUnit(
        source=source,
        kind=kind,
        ok=compiled.ok if compiled is not None else True,
        messages=list(compiled.messages) if compiled is not None else [],
        tool_versions=dict(tool_versions),
        assembled=compiled is not None and compiled.cubin is not None,
        compile_seconds=compiled.seconds if compiled is not None else 0.0,
    )
    texts: dict[str, dict[str, list[str]]] = {"ptx": {}, "sass": {}}
    symbols: list[str] = list(compiled.ptxas.entries) if compiled is not None else []
    for e in ptx_entries:
        if e.name not in symbols:
            symbols.append(e.name)
    ptx_by_name = {e.name: e for e in ptx_entries}
    for sym in symbols:
        art = KernelArtifacts(sym)
        if compiled is not None and sym in compiled.ptxas.functions:
            art.resources = compiled.ptxas.functions[sym]
            if disassembly is not None and sym in disassembly.res_usage:
                merge_res_usage(art.resources, disassembly.res_usage[sym])
        if sym in ptx_by_name:
            art.ptx_counts = ptx_by_name[sym].counts
            art.ptx_line = ptx_by_name[sym].line
            texts["ptx"][sym] = [i.text for i in ptx_by_name[sym].instructions]
        if disassembly is not None and sym in disassembly.functions:
            fn = disassembly.functions[sym]
            art.sass_counts = fn.counts
            texts["sass"][sym] = [i.text for i in fn.instructions]
        unit.kernels[sym] = art
    if compiled is not None:
        unit.global_memory_bytes = compiled.ptxas.module.global_memory_bytes
        unit.module_constant_bytes = {str(k): v for k, v in compiled.ptxas.module.constant_memory_bytes.items()}
    if disassembly is not None:
        unit.sass_tool = disassembly.tool if disassembly.error is None else None
        unit.sass_error = disassembly.error
    unit.texts = texts
    return unit
