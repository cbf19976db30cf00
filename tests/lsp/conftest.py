"""Fixtures for the language server's end-to-end tests (the machinery lives in lspkit.py).

* ``editor``: a :class:`lspkit.Launcher` parametrised over the recorded VS Code and Neovim client
  capabilities; ``await editor.start(root, options)`` runs the real server on ``root`` and returns an
  initialized :class:`lspkit.GpuemuClient`. Narrow it with
  ``@pytest.mark.parametrize("editor", ["neovim"], indirect=True)``.
* ``buggy_ws``: copies of examples/buggy holding only the ops a test needs.
* ``slow_ws``: a workspace with one passing op that sleeps per case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lspkit import CAPABILITIES, SLOW_PY, TINY_HEADER, Launcher, buggy_blocks, make_buggy_workspace, tiny_op


@pytest_asyncio.fixture(params=list(CAPABILITIES))
async def editor(request: pytest.FixtureRequest, tmp_path: Path):
    """Parametrised over the VS Code and Neovim capability sets; narrow it with
    ``@pytest.mark.parametrize("editor", ["neovim"], indirect=True)``."""
    launcher = Launcher(request.param, tmp_path)
    try:
        yield launcher
    finally:
        await launcher.close()


@pytest.fixture
def buggy_ws(tmp_path: Path) -> Callable[..., Path]:
    """buggy_ws(["softmax_tail_mask", ...], name="ws", extra=toml, replace={old: new}) -> root."""

    def make(ops: Iterable[str] | None = None, name: str = "buggy", **kw: Any) -> Path:
        if ops is None:
            ops = list(buggy_blocks()[1])
        return make_buggy_workspace(tmp_path / name, ops, **kw)

    return make


@pytest.fixture
def slow_ws(workspace: Callable[..., Path]) -> Callable[..., Path]:
    """slow_ws(delay=0.5, name="slow") -> a workspace with one passing op ``slow_double`` taking ``delay`` s/case."""

    def make(delay: float = 0.5, name: str = "slow", extra_toml: str = "") -> Path:
        toml = TINY_HEADER + extra_toml + tiny_op("slow_double", "slow:slow_double", "slow:reference")
        return workspace(toml, {"slow.py": SLOW_PY.format(delay=delay)}, name=name)

    return make


# --- reporting measured latencies (see lspkit.record_latency) ---
def pytest_terminal_summary(terminalreporter: Any) -> None:
    rows = []
    for reports in terminalreporter.stats.values():
        for rep in reports:
            if getattr(rep, "when", None) != "call":
                continue
            for key, value in getattr(rep, "user_properties", []):
                if str(key).startswith("latency:"):
                    rows.append((rep.nodeid.split("::")[-1], key[8:], value))
    if rows:
        terminalreporter.section("gpuemu-ls latencies")
        for test, name, value in sorted(rows):
            terminalreporter.write_line(f"{name:<45} {value * 1000:8.0f} ms   ({test})")
