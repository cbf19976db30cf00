"""Which kernel, file and line a finding belongs to.

Lint findings are pinned to the kernel's `__global__` declaration (found in the
source, or in a user header it includes). Compiler messages keep their own
position and are attributed to the kernel whose body contains them, or that a
ptxas message names; the rest belong to the file as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..safe_read import MAX_LINT_SOURCE_BYTES, read_text
from .artifacts import CompiledUnit, KernelArtifacts
from .build import BuildRequest
from .messages import CompilerMessage
from .names import symbol_names
from .policy import Anchor
from .result import CODE_NVCC_ERROR, CODE_NVCC_WARNING, CODE_PTXAS_ERROR, CODE_PTXAS_WARNING, Finding
from .source import KernelDeclaration, find_kernel_declarations, locate_kernel


@dataclass
class Located:
    """A kernel's declaration (None when not found) and the file it is in."""

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


class SourceIndex:
    """`__global__` declarations of the source and, if needed, of its user headers."""

    def __init__(self, source: Path, unit: CompiledUnit) -> None:
        self.source = source
        self._decls: dict[str, list[KernelDeclaration]] = {}
        self._headers = [Path(d.path) for d in unit.deps if not d.system and Path(d.path) != source]

    def _declarations(self, path: Path) -> list[KernelDeclaration]:
        """Declarations of one file, scanned once."""
        key = str(path)
        if key not in self._decls:
            try:
                text = read_text(path, limit=MAX_LINT_SOURCE_BYTES, errors="replace")
                self._decls[key] = find_kernel_declarations(text)
            except OSError:
                self._decls[key] = []
        return self._decls[key]

    def locate(self, name: str) -> Located:
        """The kernel's declaration: in the source first, then in the user headers it includes."""
        for path in [self.source, *self._headers]:
            decl = locate_kernel(self._declarations(path), name)
            if decl is not None:
                return Located(decl, str(path))
        return Located(None, str(self.source))

    def source_declarations(self) -> list[KernelDeclaration]:
        return self._declarations(self.source)


def message_finding(msg: CompilerMessage, located: Located | None, source: str, kernel: str | None) -> Finding:
    """A compiler message as a finding: at its own position, else at its kernel, else at line 1."""
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


def owner_of(msg: CompilerMessage, located: dict[str, Located]) -> str | None:
    """The kernel symbol a message belongs to (it names it, or sits in its body), if any."""
    if msg.function is not None and msg.function in located:
        return msg.function
    for sym, loc in located.items():
        if loc.contains(msg):
            return sym
    return None


def locate_symbol(index: SourceIndex, build: BuildRequest, art: KernelArtifacts) -> Located:
    """The source declaration of a compiled kernel (none for a .ptx source: it has `.entry` lines)."""
    if build.kind == "ptx":
        return Located(None, str(build.source))
    names = symbol_names(art.symbol)
    return index.locate(names.qualified)


def source_order(loc: Located, art: KernelArtifacts, source: Path) -> tuple[bool, str, int, int]:
    """Kernels of a file in the order they are written (ptxas reports them in reverse)."""
    ptx_line = art.ptx_line or 1 << 30
    line = loc.decl.line if loc.decl else ptx_line
    return (loc.file != str(source), loc.file, line, ptx_line)


def anchor_for(loc: Located, art: KernelArtifacts, build: BuildRequest) -> Anchor:
    """Where a kernel's lint findings go: its `__global__` line, or its `.entry` line in a .ptx."""
    if build.kind == "ptx":
        return Anchor(str(build.source), art.ptx_line)
    return loc.anchor()
