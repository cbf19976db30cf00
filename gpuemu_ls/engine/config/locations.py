"""Where things are in the user's files: the op's entry in gpuemu.toml, its function, its scripts.

Reports (SARIF, JUnit), the language server's diagnostics and hovers all point at the same places,
found without importing workspace code (modules are read with ``ast``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .model import Config, OpConfig, is_callable_ref
from .modules import module_file, top_level_names


@dataclass(frozen=True)
class Location:
    """A 1-based position; ``file`` is absolute."""

    file: Path
    line: int
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None

    def relative(self, root: Path) -> str:
        try:
            return self.file.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            return self.file.as_posix()

    def to_dict(self, root: Path) -> dict[str, object]:
        return {
            "file": self.relative(root),
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
        }


def config_location(config: Config, path: tuple[str | int, ...]) -> Location:
    span = config.positions.key(path) if config.positions else None
    if span is None:
        return Location(config.path, 1)
    return Location(config.path, span.line, span.column, span.end_line, span.end_column)


def op_entry(config: Config, op: OpConfig) -> Location:
    """The op's ``[[ops]]`` header in gpuemu.toml (its whole table as the range)."""
    span = config.positions.table_span(("ops", op.index)) if config.positions else None
    if span is None:
        return config_location(config, ("ops", op.index))
    return Location(config.path, span.line, span.column, span.end_line, span.end_column)


def callable_location(root: Path, ref: str) -> Location | None:
    """The ``def`` line of ``module:function`` inside the workspace, or None."""
    mod, _, func = ref.partition(":")
    file = module_file(root, mod)
    if file is None:
        return None
    names = top_level_names(file) or {}
    return Location(file, names.get(func.split(".", 1)[0], 1))  # "Class.apply": the class


def op_source(config: Config, op: OpConfig) -> Location | None:
    """The op under test: its function, or its script."""
    if op.execution_mode == "script_based" and op.op_script:
        return Location(config.resolve(op.op_script), 1)
    if op.module:
        return callable_location(config.root, op.module)
    return None


def reference_source(config: Config, op: OpConfig) -> Location | None:
    if op.reference is None:
        return None
    if is_callable_ref(op.reference):
        return callable_location(config.root, op.reference)
    return Location(config.resolve(op.reference), 1)


def op_files(config: Config, op: OpConfig) -> set[Path]:
    """Files whose change affects the op (to know what to re-validate on save)."""
    out = {config.path.resolve()}
    for loc in (op_source(config, op), reference_source(config, op)):
        if loc is not None:
            out.add(loc.file.resolve())
    return out
