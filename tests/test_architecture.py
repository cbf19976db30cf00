"""The layout shows the design (docs/architecture.md): the engine's stages import only the stages before
them, the engine never imports a face (pygls, the CLI, the server, the API), and no module of the package
imports itself back through another, lazy imports inside functions included."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpuemu_ls"
#: the engine's stages, in the order data flows through them (and imports may only go backwards)
STAGES = ("config", "cases", "oracle", "store", "run", "report", "tools")
FOUNDATIONS = ("errors", "dtypes", "private_files", "replace_file", "safe_read", "cuda")
FACES = ("gpuemu_ls.cli", "gpuemu_ls.gate", "gpuemu_ls.args", "gpuemu_ls.server", "gpuemu_ls.features")
FACES += ("gpuemu_ls.diagnostics",)
FACES += ("gpuemu_ls.session", "gpuemu_ls.api", "gpuemu_ls.pytest_plugin", "pygls", "lsprotocol")


def _module(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


MODULES = {_module(p)[0]: p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every module this file imports (relative ones resolved), with its line: top-level and lazy alike."""
    name, is_pkg = _module(path)
    base = name if is_pkg else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                parts = base.split(".")
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                target = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((sub if sub in MODULES else target, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
    return out


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["gpuemu_ls", "engine"] and len(parts) > 2 else None


def test_the_stages_and_foundations_exist() -> None:
    engine = PACKAGE / "engine"
    for stage in STAGES:
        assert (engine / stage / "__init__.py").is_file(), stage
        assert ast.get_docstring(ast.parse((engine / stage / "__init__.py").read_text())), f"{stage}: no docstring"
    assert all((engine / f).exists() or (engine / f"{f}.py").exists() for f in FOUNDATIONS)


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("gpuemu_ls.engine")))
def test_engine_imports_follow_the_flow(name: str) -> None:
    path = MODULES[name]
    stage = _stage(name)
    wrong = []
    for target, line in _imports(path):
        if target.startswith(FACES):
            wrong.append(f"{path.name}:{line} the engine imports a face: {target}")
        other = _stage(target)
        if stage in STAGES and other in STAGES and STAGES.index(other) > STAGES.index(stage):
            wrong.append(f"{path.name}:{line} stage {stage} imports the later stage {other} ({target})")
        if stage in FOUNDATIONS and other in STAGES:
            wrong.append(f"{path.name}:{line} foundation {stage} imports the stage {other} ({target})")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    graph = {m: {t for t, _ in _imports(p) if t in MODULES and t != m} for m, p in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_architecture_page_names_every_module_and_nothing_that_is_gone() -> None:
    """docs/architecture.md matches the tree: each module of the package is named in its table of rooms
    (as `name.py` in its room's row), and each `name.py` the page names exists (in the package, or in the tests,
    benchmarks and examples it points to)."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(?:[\w/]+/)?(\w+)\.py`", page))
    files = {p.stem for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" and "templates" not in p.parts}
    files -= {"__main__", "_version"}
    assert not files - named, f"modules the architecture page does not name: {sorted(files - named)}"
    repo = PACKAGE.parent
    elsewhere = {p.stem for d in ("tests", "benchmarks", "examples") for p in (repo / d).rglob("*.py")}
    gone = named - files - elsewhere - {"__init__"}
    assert not gone, f"modules the architecture page names that do not exist: {sorted(gone)}"
