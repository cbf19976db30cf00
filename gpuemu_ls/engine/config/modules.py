"""Workspace modules read without running them: where a ``module:function`` reference's module lies on disk,
and which names its top level binds (read with ``ast``, cached by file and modification time).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from ..safe_read import read_text


def module_candidates(root: Path, module: str) -> tuple[Path, Path]:
    """Where a workspace module ``a.b`` may lie, in the order Python looks: ``a/b.py``, ``a/b/__init__.py``."""
    base = root.joinpath(*module.split("."))
    return base.with_suffix(".py"), base / "__init__.py"


def module_file(root: Path, module: str) -> Path | None:
    """The file of a workspace module ``a.b`` (:func:`module_candidates`), found without importing."""
    for candidate in module_candidates(root, module):
        if candidate.is_file():
            return candidate
    return None


def _syntax_error_at(file: Path) -> str:
    try:
        ast.parse(read_text(file), filename=str(file))
    except SyntaxError as exc:
        return f"{file.name}:{exc.lineno}" + (f":{exc.offset}" if exc.offset else "") + f" ({exc.msg})"
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return f"{file.name} ({exc})"
    return file.name


def top_level_names(file: Path) -> dict[str, int] | None:
    """Names bound at a module's top level with their 1-based line ("*" for a star import); None if unparsable.

    Cached by file and modification time: a workspace with thousands of ops in one module parses it once.
    """
    try:
        st = file.stat()
    except OSError:
        return None
    return _read(str(file), st.st_mtime_ns, st.st_size)[0]


@functools.lru_cache(maxsize=4096)
def _read(filename: str, _mtime_ns: int, _size: int) -> tuple[dict[str, int] | None, tuple[str, ...]]:
    """One parse of a file, both things the checker reads of it: its top-level names (None: unparsable) and the
    modules it imports (:func:`_imports`). A workspace of 3,000 ops with a module each parsed each file twice,
    and a cache of 512 entries forgot them between the check and the build."""
    file = Path(filename)
    try:
        tree = ast.parse(read_text(file), filename=str(file))
    except (SyntaxError, OSError, UnicodeDecodeError, ValueError):
        return None, ()
    return _names(tree), _imported(tree)


def _names(tree: ast.Module) -> dict[str, int]:
    names: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.setdefault(node.name, node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.setdefault(n.id, node.lineno)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.setdefault(alias.asname or alias.name.split(".")[0], node.lineno)
        elif isinstance(node, (ast.If, ast.Try, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.setdefault(sub.name, sub.lineno)
                elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.setdefault(sub.id, sub.lineno)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # a call inside a function runs when it is called, not at import
        for sub in ast.walk(node):  # names made at import time: globals()[k] = ..., setattr(module, ...), exec
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in _DYNAMIC_CALLS:
                names.setdefault("?", sub.lineno)
    return names


#: Calls at a module's top level that may bind names a static read cannot see.
_DYNAMIC_CALLS = {"globals", "setattr", "exec", "vars", "locals"}


#: Workspace modules followed from an op's module when looking for what it imports: enough for a kernel file
#: imported by a wrapper imported by the op's module, bounded so a large workspace costs a few parses.
MAX_FOLLOWED = 16


def imported_packages(root: Path, start: str | Path) -> frozenset[str]:
    """Top-level packages a workspace module (``a.b``) or script file imports, directly or through workspace
    modules it imports (at most :data:`MAX_FOLLOWED` files), read without importing anything:
    ``{"torch", "triton", "refs"}``."""
    first = start if isinstance(start, Path) else module_file(root, start)
    seen: set[Path] = set()
    found: set[str] = set()
    queue = [first] if first is not None else []
    while queue and len(seen) < MAX_FOLLOWED:
        file = queue.pop(0)
        if file in seen:
            continue
        seen.add(file)
        try:
            st = file.stat()
        except OSError:
            continue
        for imported in _imports(str(file), st.st_mtime_ns, st.st_size):
            found.add(imported.split(".")[0])
            local = module_file(root, imported)
            if local is not None:
                queue.append(local)
    return frozenset(found)


def _imports(filename: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    """Absolute module names a file imports anywhere in it (a kernel imported inside a function counts)."""
    return _read(filename, mtime_ns, size)[1]


def _imported(tree: ast.Module) -> tuple[str, ...]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return tuple(dict.fromkeys(names))
