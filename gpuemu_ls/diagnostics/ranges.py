"""LSP ranges (0-based) for the places results point at: TOML entries, op functions, error lines, .cu lines."""

from __future__ import annotations

import ast
import weakref
from functools import lru_cache
from pathlib import Path

from lsprotocol import types as lsp

from ..engine.config.model import Config, OpConfig, is_callable_ref
from ..engine.config.modules import module_file
from ..engine.config.tomlpos import Span
from ..engine.errors import Problem
from ..engine.safe_read import read_text


def span_range(span: Span) -> lsp.Range:
    return lsp.Range(
        lsp.Position(span.line - 1, max(0, span.column - 1)),
        lsp.Position(span.end_line - 1, max(0, span.end_column - 1)),
    )


def problem_range(p: Problem) -> lsp.Range:
    line = max(0, (p.line or 1) - 1)
    col = max(0, (p.column or 1) - 1)
    if p.end_line is not None and p.end_column is not None and (p.end_line, p.end_column) > (p.line, p.column):
        return lsp.Range(lsp.Position(line, col), lsp.Position(p.end_line - 1, max(0, p.end_column - 1)))
    return lsp.Range(lsp.Position(line, col), lsp.Position(line, col + 1))


def line_range(file: Path, line: int) -> lsp.Range:
    """The text of a 1-based line, without its indentation."""
    text = _lines(str(file), _mtime(file))
    idx = max(0, line - 1)
    body = text[idx] if idx < len(text) else ""
    start = len(body) - len(body.lstrip())
    return lsp.Range(lsp.Position(idx, start), lsp.Position(idx, max(start + 1, len(body.rstrip()))))


def op_header_range(config: Config, op: OpConfig) -> lsp.Range:
    """The ``[[ops]]`` header of the op plus its name line (where the eye looks for it): made once per config
    and op, as code lenses ask for all 1,000 of them at every lens refresh (shared: callers never change it).
    Kept while the config lives, never keeping it alive (a 1,000-op config is tens of megabytes)."""
    kept = _HEADERS.get(id(config))
    if kept is None or kept[0]() is not config:
        key = id(config)
        kept = _HEADERS[key] = (weakref.ref(config, lambda _ref: _HEADERS.pop(key, None)), {})
    rng = kept[1].get(op.index)
    if rng is None:
        rng = kept[1][op.index] = _header_range(config, op)
    return rng


#: id(config) -> (the config, weakly; op index -> its header range)
_HEADERS: dict[int, tuple[weakref.ref[Config], dict[int, lsp.Range]]] = {}


def _header_range(config: Config, op: OpConfig) -> lsp.Range:
    if config.positions is None:
        return lsp.Range(lsp.Position(0, 0), lsp.Position(0, 1))
    head = config.positions.key(("ops", op.index))
    name = config.positions.value(("ops", op.index, "name"))
    if head is None:
        return lsp.Range(lsp.Position(0, 0), lsp.Position(0, 1))
    end = name if name is not None else head
    return lsp.Range(lsp.Position(head.line - 1, head.column - 1), lsp.Position(end.end_line - 1, end.end_column - 1))


def op_at_line(config: Config, line: int) -> OpConfig | None:
    """The op whose ``[[ops]]`` header or name line holds 0-based ``line``: from an index made once per config
    (a hover on a 1,000-op gpuemu.toml computed every op's range before it)."""
    global _op_lines
    if _op_lines is None or _op_lines[0] is not config:
        index: dict[int, OpConfig] = {}
        if config.positions is not None:
            for op in config.ops:
                rng = op_header_range(config, op)
                for i in range(rng.start.line, rng.end.line + 1):
                    index.setdefault(i, op)
        _op_lines = (config, index)
    return _op_lines[1].get(line)


_op_lines: tuple[Config, dict[int, OpConfig]] | None = None


def kernel_header_range(config: Config, index: int) -> lsp.Range:
    head = config.positions.key(("kernels", index)) if config.positions else None
    if head is None:
        return lsp.Range(lsp.Position(0, 0), lsp.Position(0, 1))
    return span_range(head)


def function_range(file: Path, name: str) -> lsp.Range | None:
    """The name in ``def name`` or ``class name`` (top level), found with ast."""
    found = _defs(str(file), _mtime(file)).get(name)
    if found is None:
        return None
    line, col, end, _ = found
    return lsp.Range(lsp.Position(line, col), lsp.Position(line, end))


def top_level_functions(file: Path) -> list[str]:
    """The names of a file's top-level functions (what ``module = "file:function"`` can name)."""
    return [n for n, (*_, is_class) in _defs(str(file), _mtime(file)).items() if not is_class]


def callable_target(root: Path, ref: str) -> tuple[Path, lsp.Range] | None:
    mod, _, func = ref.partition(":")
    file = module_file(root, mod)
    if file is None:
        return None
    rng = function_range(file, func.split(".", 1)[0]) or lsp.Range(lsp.Position(0, 0), lsp.Position(0, 1))
    return file, rng


def op_target(config: Config, op: OpConfig) -> tuple[Path, lsp.Range] | None:
    """The op under test in its source: the function, or line 1 of its script."""
    if op.execution_mode == "script_based" and op.op_script:
        f = config.resolve(op.op_script)
        return f, line_range(f, 1)
    if op.module:
        return callable_target(config.root, op.module)
    return None


def reference_target(config: Config, op: OpConfig) -> tuple[Path, lsp.Range] | None:
    if op.reference is None:
        return None
    if is_callable_ref(op.reference):
        return callable_target(config.root, op.reference)
    f = config.resolve(op.reference)
    return f, line_range(f, 1)


def _mtime(file: Path) -> float:
    try:
        return file.stat().st_mtime
    except OSError:
        return 0.0


@lru_cache(maxsize=256)
def _lines(file: str, _mtime: float) -> list[str]:
    try:
        return read_text(file, errors="replace").splitlines()
    except OSError:
        return []


@lru_cache(maxsize=4096)  # completion of `module = "` asks every .py file: 1,000 ops' modules stay parsed
def _defs(file: str, _mtime: float) -> dict[str, tuple[int, int, int, bool]]:
    """Top-level functions and classes (``module = "file:Class.apply"``): line, columns, is a class."""
    lines = _lines(file, _mtime)
    try:
        tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError):
        return {}
    out: dict[str, tuple[int, int, int, bool]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            line = node.lineno - 1
            text = lines[line] if line < len(lines) else ""
            col = text.find(node.name, node.col_offset)
            col = col if col >= 0 else node.col_offset
            out[node.name] = (line, col, col + len(node.name), isinstance(node, ast.ClassDef))
    return out
