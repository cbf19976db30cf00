"""Finding the CUDA tools: explicit path, PATH, NVIDIA wheel layouts, versions, and `not_run`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuemu_ls.engine.cuda import ArtifactChecks, KernelSpec, find_toolchain, format_text, lint_file, lint_kernel
from gpuemu_ls.engine.cuda import toolchain as tc

DATA = Path(__file__).resolve().parent.parent / "data" / "cuda"


@pytest.fixture
def nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tc.Toolchain:
    """The toolchain of a machine without CUDA: empty PATH, no CUDA_HOME, no wheels."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    return find_toolchain(site_dirs=())


def test_nothing_found_names_what_and_how(nothing: tc.Toolchain) -> None:
    assert (nothing.nvcc, nothing.ptxas, nothing.cuobjdump, nothing.nvdisasm) == (None, None, None, None)
    msg = nothing.missing_message(("nvcc", "cuobjdump"))
    assert "nvcc" in msg and "cuobjdump" in msg and "PATH" in msg
    assert "pip install './gpuemu-ls[cuda]'" in msg and "pip install 'nvidia-cuda-nvcc>=13.0'" in msg


def test_no_tools_is_not_run_never_passed(nothing: tc.Toolchain, tmp_path: Path) -> None:
    spec = KernelSpec("vector_add", DATA / "vector_add.cu", checks=ArtifactChecks(max_registers=1))
    r = lint_kernel(spec, tmp_path / "cache", nothing)
    assert r.status == "not_run"
    assert "nvcc" in r.message and "pip install './gpuemu-ls[cuda]'" in r.message
    assert r.findings and r.findings[0].code == "cuda-tools-missing"
    (f,) = lint_file(DATA / "forbidden.cu", None, tools=nothing)
    assert f.status == "not_run"
    assert format_text([f]).startswith("NOT RUN")


def test_missing_source_is_an_error(tmp_path: Path) -> None:
    r = lint_kernel(KernelSpec("k", tmp_path / "nope.cu"), None, tc.empty_toolchain())
    assert r.status == "error" and r.findings[0].code == "source-not-found"


@pytest.mark.cuda
def test_wheel_layout_and_explicit_path(tmp_path: Path, tools: tc.Toolchain) -> None:
    # The nvidia-cuda-nvcc wheel layout (site-packages/nvidia/cu13/bin), holding the real binaries.
    site = tmp_path / "site-packages"
    bin_dir = site / "nvidia" / "cu13" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("nvcc", "ptxas"):
        os.symlink(tools.path_of(name), bin_dir / name)
    found = tc.find_toolchain(search_path="", site_dirs=[site], use_env_cuda_home=False)
    assert found.nvcc == bin_dir / "nvcc" and found.ptxas == bin_dir / "ptxas"
    assert found.origins["nvcc"] == "wheel"
    assert found.versions()["nvcc"] == tools.versions()["nvcc"]

    explicit = tc.find_toolchain(tools.nvcc, search_path="", site_dirs=(), use_env_cuda_home=False)
    assert explicit.nvcc == tools.nvcc and explicit.origins["nvcc"] == "explicit"


def test_real_wheels_in_this_environment_are_found() -> None:
    dirs = tc.wheel_bin_dirs(tc.default_site_dirs())
    found = tc.find_toolchain(search_path="", use_env_cuda_home=False)
    for name in ("cuobjdump", "nvdisasm", "nvcc"):
        path = found.path_of(name)
        if path is not None:
            assert path.parent in dirs and found.origins[name] == "wheel"


@pytest.mark.cuda
def test_version_is_memoised_without_running_the_tool(tmp_path: Path, tools: tc.Toolchain, monkeypatch) -> None:
    memo = tmp_path / "tool-versions.json"
    version = tc.tool_version(tools.nvcc, memo)
    assert version.count(".") == 2 and memo.is_file()

    class NoSubprocess:
        def __init__(self, *a: object, **k: object) -> None:
            raise AssertionError("tool_version started a subprocess")

    monkeypatch.setattr(tc, "_version_memo", {})  # a fresh process: only the memo file remains
    monkeypatch.setattr(tc, "_persisted", set())
    monkeypatch.setattr(subprocess, "Popen", NoSubprocess)
    assert tc.tool_version(tools.nvcc, memo) == version


def test_parse_version() -> None:
    assert tc.parse_version("Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0") == "13.0.88"
    assert tc.parse_version("garbage") is None
