"""Workspace files named like modules the runner needs: they never replace those modules, and are named.

Workers run in the user's workspace with its folder first on ``sys.path`` (ops import their siblings,
and a workspace module should win over an unrelated installed one, as under ``python`` in that
folder). But a workspace ``random.py``, ``socket.py`` or ``numpy.py`` first on that path would be
imported by the runner itself, or by any library, in place of the real module, and the worker would
die in its setup without a word about why.

So, in a worker, :func:`protect` puts a finder before the path finder that resolves the standard
library's names and the libraries the runner needs outside the workspace. An op module that has such
a name is still loaded, from its file, under a private name (:func:`import_module`); and when an import
fails because a workspace file's name is taken, :func:`hint` names the file.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

#: Top-level names the runner (or a framework adapter) imports itself, besides the standard library's.
RUNNER_NEEDS = frozenset({"numpy", "ml_dtypes", "gpuemu_ls", "torch", "jax", "jaxlib", "tensorflow"})
#: Name under which a workspace module whose own name is taken gets loaded.
ALIAS_PREFIX = "_gpuemu_workspace_"

_STDLIB: frozenset[str] = frozenset(getattr(sys, "stdlib_module_names", ()))


def protected(name: str) -> bool:
    """Whether a top-level ``name`` must resolve outside the workspace in a worker."""
    top = name.partition(".")[0]
    return top in _STDLIB or top in RUNNER_NEEDS


class _ProtectedFinder(importlib.abc.MetaPathFinder):
    """Resolves protected top-level names on the interpreter's own path entries only."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> object:
        if path is not None or not protected(name):
            return None
        return importlib.machinery.PathFinder.find_spec(name, self.paths)


def protect() -> None:
    """In this (worker) process, from now on: protected names never come from a folder added later.

    Call before any workspace folder is on ``sys.path``: the entries there now are the interpreter's.
    """
    if any(isinstance(f, _ProtectedFinder) for f in sys.meta_path):
        return
    paths = [p for p in sys.path if p not in ("", ".")]
    at = next((i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder), len(sys.meta_path))
    sys.meta_path.insert(at, _ProtectedFinder(paths))


def _local(root: Path, top: str) -> tuple[Path, bool] | None:
    """``root/top.py`` (False) or ``root/top/__init__.py`` (True), if the workspace has one."""
    package = root / top / "__init__.py"
    if package.is_file():
        return package, True
    module = root / f"{top}.py"
    if module.is_file():
        return module, False
    return None


def _outside(module: ModuleType | None, root: Path) -> bool:
    file = getattr(module, "__file__", None)
    if module is None:
        return False
    if not file:
        return True  # built in, frozen or a namespace: not the workspace's
    try:
        return not Path(file).resolve().is_relative_to(root.resolve())
    except (OSError, ValueError):
        return True


def import_module(root: Path, mod_name: str) -> ModuleType:
    """Import the op's ``mod_name`` from the workspace ``root`` even where its top-level name is taken.

    A name that is protected, or already imported from elsewhere, would give the other module; the
    workspace's file is then loaded under ``_gpuemu_workspace_<name>`` (its own submodules and relative
    imports work below that name).
    """
    top, _, rest = mod_name.partition(".")
    found = _local(root, top)
    if found is None or not (protected(top) or _outside(sys.modules.get(top), root)):
        return importlib.import_module(mod_name)
    alias = ALIAS_PREFIX + top
    module = sys.modules.get(alias)
    if module is None:
        file, package = found
        spec = importlib.util.spec_from_file_location(
            alias, file, submodule_search_locations=[str(file.parent)] if package else None
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(alias, None)
            raise
    return importlib.import_module(f"{alias}.{rest}") if rest else module


def _shadows(folders: Iterable[Path]) -> list[tuple[str, str]]:
    """(file name, module name) of each workspace file named like a module a worker keeps for itself."""
    out: list[tuple[str, str]] = []
    for folder in dict.fromkeys(folders):
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".py"):
                name = entry[:-3]
            elif (folder / entry / "__init__.py").is_file():
                name = entry
            else:
                continue
            if protected(name) or _outside(sys.modules.get(name), folder):
                out.append((entry, name))
    return out


def hint(message: str, folders: Iterable[Path]) -> str:
    """A sentence naming the workspace files whose module name ``message`` quotes, or ``""``."""
    lines = []
    for entry, name in _shadows(folders):
        if re.search(rf"['\"]{re.escape(name)}['\".]", message):
            what = "the standard library module" if name in _STDLIB else "the installed module"
            lines.append(
                f"workspace file {entry} shadows {what} {name} (the runner keeps the real one, so "
                f"`import {name}` does not load {entry}: rename it)"
            )
    return "; ".join(lines)


__all__ = ["RUNNER_NEEDS", "hint", "import_module", "protect", "protected"]
