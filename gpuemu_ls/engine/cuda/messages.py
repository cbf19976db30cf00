"""Parse what nvcc and the tools it drives print on failure or warning.

Formats met in practice (CUDA 13):

* front end (EDG)::

      kern.cu(4): error: identifier "y" is undefined
          x[0] = y + 1.0f
                 ^
      kern.cu(3): warning #177-D: variable "unused" was declared but never referenced

  No column is printed, but the caret under the echoed source line gives it; it is
  kept only when the echoed line is the file's line verbatim (macro expansion
  rewrites the echo, e.g. `__device__` -> `__attribute__((device))`).
* host preprocessor (gcc): ``kern.cu:1:10: fatal error: x.h: No such file or directory``
* ptxas: ``ptxas error   : Entry function '_Z3bigPf' uses too much shared data (...)`` and
  ``ptxas /tmp/k.ptx, line 12; error   : ...``
* nvcc itself: ``nvcc fatal   : Unsupported gpu architecture 'sm_999'``
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..safe_read import MAX_LINT_SOURCE_BYTES, read_text

_EDG_RE = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<sev>catastrophic error|internal error|error|warning|remark)"
    r"(?: #(?P<code>[\w-]+))?: (?P<msg>.*)$"
)
_GCC_RE = re.compile(
    r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? "
    r"(?P<sev>fatal error|error|warning): (?P<msg>.*)$"
)
_PTXAS_LINE_RE = re.compile(r"^ptxas (?P<file>.+?), line (?P<line>\d+); (?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")
_PTXAS_RE = re.compile(r"^ptxas (?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")
_NVCC_RE = re.compile(r"^nvcc (?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")
_QUOTED_RE = re.compile(r"'([A-Za-z_$][\w$]*)'")


@dataclass
class CompilerMessage:
    """One error or warning from nvcc, its front end, the host preprocessor or ptxas."""

    severity: str  # 'error' | 'warning'
    tool: str  # 'nvcc' | 'ptxas'
    message: str
    file: str | None = None  # absolute when the tool printed a path
    line: int | None = None
    column: int | None = None
    code: str | None = None  # e.g. '177-D'
    function: str | None = None  # symbol a ptxas message names, if any

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompilerMessage:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


def _severity(word: str) -> str:
    return "warning" if word == "warning" else "error"


def _resolve(file: str, cwd: Path | None) -> str:
    p = Path(file)
    if not p.is_absolute() and cwd is not None:
        p = cwd / p
    try:
        return str(p.resolve())
    except OSError:
        return str(p)


def _caret_column(file: str, line: int, echo: str, caret: str, cache: dict[str, list[str]]) -> int | None:
    """Column from EDG's caret line, if the echoed line is the file's line unchanged."""
    if file not in cache:
        try:
            cache[file] = read_text(file, limit=MAX_LINT_SOURCE_BYTES, errors="replace").splitlines()
        except OSError:
            cache[file] = []
    lines = cache[file]
    if not (0 < line <= len(lines)) or caret.strip() != "^":
        return None
    actual = lines[line - 1]
    if echo.startswith("  ") and echo[2:] == actual:
        return caret.index("^") - 2 + 1
    return None


def parse_compiler_output(text: str, cwd: Path | None = None) -> list[CompilerMessage]:
    """Every error/warning in nvcc's combined output; notes, remarks and summaries are skipped."""
    out: list[CompilerMessage] = []
    lines = text.splitlines()
    file_cache: dict[str, list[str]] = {}
    for idx, line in enumerate(lines):
        if m := _EDG_RE.match(line):
            if m.group("sev") == "remark":
                continue
            file = _resolve(m.group("file"), cwd)
            lineno = int(m.group("line"))
            col = None
            if idx + 2 < len(lines):
                col = _caret_column(file, lineno, lines[idx + 1], lines[idx + 2], file_cache)
            out.append(
                CompilerMessage(
                    _severity(m.group("sev")),
                    "nvcc",
                    m.group("msg").strip(),
                    file,
                    lineno,
                    col,
                    m.group("code"),
                )
            )
        elif m := _GCC_RE.match(line):
            out.append(
                CompilerMessage(
                    _severity(m.group("sev")),
                    "nvcc",
                    m.group("msg").strip(),
                    _resolve(m.group("file"), cwd),
                    int(m.group("line")),
                    int(m.group("col")) if m.group("col") else None,
                )
            )
        elif m := _PTXAS_LINE_RE.match(line):
            out.append(
                CompilerMessage(
                    _severity(m.group("sev")),
                    "ptxas",
                    m.group("msg").strip(),
                    _resolve(m.group("file"), cwd),
                    int(m.group("line")),
                )
            )
        elif m := _PTXAS_RE.match(line):
            msg = m.group("msg").strip()
            fn = _QUOTED_RE.search(msg)
            out.append(CompilerMessage(_severity(m.group("sev")), "ptxas", msg, function=fn.group(1) if fn else None))
        elif m := _NVCC_RE.match(line):
            out.append(CompilerMessage(_severity(m.group("sev")), "nvcc", m.group("msg").strip()))
    return out
