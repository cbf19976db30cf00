"""Go to definition from gpuemu.toml: ``module = "mod:fn"`` and ``reference`` to the function (or the
script), ``op_script`` to the script, a kernel's ``source`` to its ``.cu`` file."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types as lsp

from ..diagnostics.ranges import callable_target
from ..engine.config.model import is_callable_ref
from .toml_context import analyze, string_at

#: (table, key) whose string value names code.
CODE_KEYS = {(("ops",), "module"), (("ops",), "reference"), (("ops",), "op_script")}
FILE_KEYS = {(("kernels",), "source"), (("kernels",), "reference")}


def toml_definition(text: str, line: int, character: int, root: Path) -> lsp.Location | None:
    """Where the value under the cursor points (anywhere on the ``key = "value"`` line); None when it names
    nothing that exists."""
    lines = text.split("\n")
    if line >= len(lines):
        return None
    found = string_at(lines[line], character)
    if found is None:
        return None
    value, start, _ = found
    spot = analyze(text, line, start)
    if spot.kind != "value" or not spot.in_string or spot.schema is None:
        return None
    where = (spot.schema, spot.key)
    if where not in CODE_KEYS and where not in FILE_KEYS:
        return None
    if where in CODE_KEYS and spot.key != "op_script" and is_callable_ref(value):
        target = callable_target(root, value)
        return lsp.Location(target[0].resolve().as_uri(), target[1]) if target else None
    path = Path(value) if Path(value).is_absolute() else root / value
    if not path.is_file():
        return None
    zero = lsp.Position(0, 0)
    return lsp.Location(path.resolve().as_uri(), lsp.Range(zero, zero))
