"""Fixtures for the CUDA artifact lint tests.

Tests marked `cuda` run the real nvcc/ptxas (and cuobjdump or nvdisasm for SASS);
they are skipped, with the reason, where those are not installed. Every test kernel
is compiled once per session: all tests share one lint cache, and checks are applied
after the (cached) compile, so a second lint of the same file with other checks is a
cache hit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuemu_ls.engine.cuda import ArtifactChecks, KernelLintResult, KernelSpec, Toolchain, lint_kernel
from gpuemu_ls.engine.cuda.toolchain import find_toolchain

DATA = Path(__file__).resolve().parent.parent / "data" / "cuda"

_TOOLS = find_toolchain()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `cuda` tests without nvcc, and `sass` tests without a disassembler."""
    here = Path(__file__).resolve().parent
    no_nvcc = pytest.mark.skip(reason=_TOOLS.missing_message(("nvcc",)))
    no_sass = pytest.mark.skip(reason=_TOOLS.missing_message(("cuobjdump",)) + " (or nvdisasm)")
    for item in items:
        if here not in Path(str(item.fspath)).resolve().parents:
            continue
        if item.get_closest_marker("cuda") and _TOOLS.nvcc is None:
            item.add_marker(no_nvcc)
        elif item.get_closest_marker("sass") and not _TOOLS.can_disassemble:
            item.add_marker(no_sass)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sass: needs cuobjdump or nvdisasm (SASS checks)")


@pytest.fixture(scope="session")
def tools() -> Toolchain:
    return _TOOLS


@pytest.fixture(scope="session")
def lint_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lint-cache")


@pytest.fixture(scope="session")
def lint(tools: Toolchain, lint_cache: Path):
    """lint(file, function=None, flags=(), **checks) -> KernelLintResult, via the session cache."""

    def run(
        file: str,
        function: str | None = None,
        *,
        flags: tuple[str, ...] = (),
        warn_threshold: float | None = None,
        **checks: object,
    ) -> KernelLintResult:
        name = function or Path(file).stem
        spec = KernelSpec(
            name=name,
            source=DATA / file,
            function=function,
            flags=flags,
            checks=ArtifactChecks(**checks),  # type: ignore[arg-type]
            warn_threshold=warn_threshold,
        )
        return lint_kernel(spec, lint_cache, tools)

    return run
