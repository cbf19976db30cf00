"""The Triton corpus workspace (issue 27) stays what benchmark 13 measures, checked without running a gate (the
timed gates over 3 seeds are benchmarks/bench_triton_corpus.py): its gpuemu.toml loads without a problem or a
warning; every `_bug_` op has its correct twin; no dim has a `tile` hint; the ops loaded through the shim name a
module that imports no triton (read with `ast`, as `cost = "auto"` reads it), and the registry resolves every
one of them to a kernel file that does; the README's table names every op."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from gpuemu_ls.engine.config.load import load_config

ROOT = Path(__file__).resolve().parents[2]
WS = ROOT / "benchmarks" / "triton_corpus"


def _imports(file: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _registry() -> dict[str, str]:
    tree = ast.parse((WS / "corpus.py").read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "REGISTRY")
    return ast.literal_eval(node.value)


def test_the_workspace_loads_and_every_bug_has_its_twin() -> None:
    config = load_config(WS, user_config=WS / "no-user-config.toml")
    assert not config.warnings
    names = [op.name for op in config.ops]
    assert len(names) >= 22 and len(set(names)) == len(names)
    bugs = [n for n in names if "_bug_" in n]
    assert 3 * len(bugs) >= len(names) - 3, bugs  # about a third of the ops are bugs
    assert all(n.split("_bug_")[0] in names for n in bugs)  # every bug has its correct twin
    assert all(not d.tiles for op in config.ops for d in op.dims.values())  # no tile hints


def test_shim_loaded_ops_import_no_triton_and_their_kernel_files_do() -> None:
    config = load_config(WS, user_config=WS / "no-user-config.toml")
    registry = _registry()
    shim = [op for op in config.ops if op.module and op.module.split(":")[0] == "corpus"]
    assert len(shim) >= 2 * len(config.ops) // 3  # most ops go through the shim
    assert "triton" not in _imports(WS / "corpus.py") | _imports(WS / "interp.py")
    for op in shim:
        assert op.name in registry, op.name
        module, func = registry[op.name].split(":")
        file = WS.joinpath(*module.split(".")).with_suffix(".py")
        assert "triton" in _imports(file), file
        defined = {n.name for n in ast.parse(file.read_text(encoding="utf-8")).body if isinstance(n, ast.FunctionDef)}
        assert func in defined, (file, func)
    for op in config.ops:  # the others import their kernel file directly
        if op not in shim and op.module:
            assert "triton" in _imports(WS.joinpath(*op.module.split(":")[0].split(".")).with_suffix(".py")), op.name


def test_the_readme_table_names_every_op() -> None:
    readme = (WS / "README.md").read_text(encoding="utf-8")
    for op in load_config(WS, user_config=WS / "no-user-config.toml").ops:
        assert f"`{op.name}`" in readme, op.name


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_the_shim_resolves_an_op_at_call_time() -> None:
    """corpus.<op> is a wrapper made without importing the kernel file; the registry's load() imports it."""
    import subprocess
    import sys

    code = (
        "import sys, corpus; f = corpus.relu; assert 'kernels.elementwise' not in sys.modules; "
        "assert callable(corpus.load('relu')); assert 'kernels.elementwise' in sys.modules"
    )
    proc = subprocess.run([sys.executable, "-B", "-c", code], cwd=WS, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
