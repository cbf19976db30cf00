"""Kernel lint in the gate (issue 4, CI half): a [[kernels]] entry over its `max_registers` or with a
forbidden instruction fails the gate, pinned to the kernel's `__global__` line in text, JUnit and SARIF;
a twin passes; `gpuemu lint` lints files and entries through a cache; and without the CUDA tools a
kernel is `not_run` and the gate is red, never green."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gatekit import (
    NO_USER_CONFIG,
    ROOT,
    add_lint_kernels,
    copy_workspace,
    gpuemu,
    have_nvcc,
    jdoc,
    line_of,
    out,
    validate_junit,
    write_files,
)
from kit.ops import kernel_toml, project_toml

pytestmark = pytest.mark.skipif(
    not have_nvcc(), reason="nvcc not found (pip install './gpuemu-ls[cuda]' from a checkout)"
)

PRINTF = {"forbidden_instructions": ["re:vprintf"]}
#: vector_add over its register limit (it needs 12), a kernel with a leftover printf, and its clean twin
LINT_TOML = (
    project_toml("lint")
    + kernel_toml("vector_add", "kernels/vector_add.cu", {"max_registers": 8})
    + kernel_toml("uses_printf", "kernels/forbidden.cu", PRINTF)
    + kernel_toml("clean_twin", "kernels/forbidden.cu", {**PRINTF, "max_registers": 32})
)

TWIN_KERNELS = kernel_toml("vector_add", "kernels/vector_add.cu", {"max_registers": 32}) + kernel_toml(
    "clean_twin", "kernels/forbidden.cu", {**PRINTF, "max_registers": 32}
)
TWIN_TOML = project_toml("lint-twin") + TWIN_KERNELS


def _workspace(root: Path, toml: str) -> Path:
    return add_lint_kernels(write_files(root, {"gpuemu.toml": toml}))


def _global_line(ws: Path, file: str, kernel: str) -> int:
    return line_of(ws / "kernels" / file, rf"__global__ void {kernel}\(")


def _build(root: Path) -> None:
    ws = _workspace(root / "lint", LINT_TOML)
    for fmt, name in (("junit", "k.xml"), ("sarif", "k.sarif"), ("json", "k.json")):
        proc = gpuemu("ci", "--format", fmt, "--output", name, cwd=ws)
        assert proc.returncode == 1, out(proc)
        (ws / f"{fmt}.stdout").write_text(proc.stdout, encoding="utf-8")
    twin = _workspace(root / "twin", TWIN_TOML)
    proc = gpuemu("ci", "--format", "json", "--output", "k.json", cwd=twin)
    (twin / "rc").write_text(str(proc.returncode))
    (twin / "stdout").write_text(proc.stdout)


@pytest.fixture(scope="module")
def lint(shared) -> Path:
    return shared("lint-gate", _build)


def test_violations_fail_the_gate_at_the_global_line(lint: Path) -> None:
    ws = lint / "lint"
    doc = json.loads((ws / "k.json").read_text(encoding="utf-8"))
    assert doc["exit_code"] == 1 and doc["status"] == "failed"
    status = {k["name"]: k["status"] for k in doc["kernels"]}
    assert status == {"vector_add": "failed", "uses_printf": "failed", "clean_twin": "passed"}
    regs = _global_line(ws, "vector_add.cu", "vector_add")
    printf = _global_line(ws, "forbidden.cu", "uses_printf")
    # text (the CI log)
    text = (ws / "junit.stdout").read_text(encoding="utf-8")
    assert f"kernels/vector_add.cu:{regs}: error max-registers" in text
    assert f"kernels/forbidden.cu:{printf}: error forbidden-instruction" in text
    assert "PASS    clean_twin" in text and "FAIL    vector_add" in text
    # JUnit
    cases = {tc.get("name"): tc for tc in ET.parse(ws / "k.xml").getroot().iter("testcase")}
    assert {tc.get("classname") for tc in cases.values()} == {"gpuemu.kernels"}
    assert cases["clean_twin"].find("failure") is None
    fail = cases["vector_add"].find("failure")
    assert fail is not None and fail.get("type") == "max-registers"
    assert f"kernels/vector_add.cu:{regs}:" in fail.text and "12 registers" in fail.get("message")
    fail = cases["uses_printf"].find("failure")
    assert fail is not None and f"kernels/forbidden.cu:{printf}:" in fail.text
    # SARIF
    results = json.loads((ws / "k.sarif").read_text(encoding="utf-8"))["runs"][0]["results"]
    where = {}
    for r in results:
        loc = r["locations"][0]["physicalLocation"]
        where[r["ruleId"]] = (loc["artifactLocation"]["uri"], loc["region"]["startLine"], r["level"])
    assert where == {
        "gpuemu-lint/max-registers": ("kernels/vector_add.cu", regs, "error"),
        "gpuemu-lint/forbidden-instruction": ("kernels/forbidden.cu", printf, "error"),
    }


def test_lint_junit_validates(lint: Path, schemas) -> None:
    validate_junit((lint / "lint" / "k.xml").read_text(encoding="utf-8"), schemas.junit())


def test_twin_passes(lint: Path) -> None:
    twin = lint / "twin"
    assert (twin / "rc").read_text() == "0", (twin / "stdout").read_text()
    doc = json.loads((twin / "k.json").read_text(encoding="utf-8"))
    assert doc["status"] == "passed" and [k["status"] for k in doc["kernels"]] == ["passed", "passed"]


def test_gpuemu_lint_file_and_kernel_with_cache(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", LINT_TOML)
    first = gpuemu("lint", "kernels/forbidden.cu", "--format", "json", cwd=ws)
    # kernels with a [[kernels]] entry are judged by its limits; the others have none (figures only)
    assert first.returncode == 1, out(first)
    kernels = {k["name"]: k for k in jdoc(first)["kernels"]}
    assert set(kernels) == {"uses_printf", "volatile_load", "system_atomic", "clean_twin"}
    assert {n: (k["status"], k["limits"]) for n, k in kernels.items()} == {
        "uses_printf": ("failed", True),
        "clean_twin": ("passed", True),
        "volatile_load": ("passed", False),
        "system_atomic": ("passed", False),
    }
    for name, k in kernels.items():
        assert k["cache_hit"] is (name in ("uses_printf", "clean_twin"))  # the file's compile serves the entries
        assert k["source"] == {"file": "kernels/forbidden.cu", "line": _global_line(ws, "forbidden.cu", name)}
    text = gpuemu("lint", "kernels/forbidden.cu", cwd=ws).stdout
    assert "INFO    volatile_load" in text and "no limits apply to 2 kernel(s)" in text, text
    second = gpuemu("lint", "kernels/forbidden.cu", "--format", "json", cwd=ws)
    assert second.returncode == 1, out(second)
    again = {k["name"]: k for k in jdoc(second)["kernels"]}
    assert all(k["cache_hit"] is True for k in again.values())
    assert {n: k["resources"] for n, k in again.items()} == {n: k["resources"] for n, k in kernels.items()}
    slow = sum(k["elapsed"] for k in kernels.values())
    fast = sum(k["elapsed"] for k in again.values())
    assert fast * 10 < slow, (fast, slow)

    one = gpuemu("lint", "--kernel", "uses_printf", "--format", "json", cwd=ws)
    assert one.returncode == 1, out(one)
    (entry,) = jdoc(one)["kernels"]
    assert entry["name"] == "uses_printf" and entry["status"] == "failed" and entry["cache_hit"] is True
    assert entry["findings"][0]["line"] == _global_line(ws, "forbidden.cu", "uses_printf")
    twin = gpuemu("lint", "--kernel", "clean_twin", cwd=ws)
    assert twin.returncode == 0 and "PASS    clean_twin" in twin.stdout, out(twin)
    unknown = gpuemu("lint", "--kernel", "nope", cwd=ws)
    assert unknown.returncode == 2, out(unknown)


def _hidden_env(bare_python: Path) -> dict[str, str]:
    """Only the bare interpreter's bin on PATH; gpuemu from the checkout; no CUDA_HOME, no CUDA wheels."""
    e = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "GPUEMU_STORE")}
    e["PATH"] = str(bare_python.parent)
    e["PYTHONPATH"] = str(ROOT)
    e.setdefault("GPUEMU_USER_CONFIG", NO_USER_CONFIG)
    return e


def test_without_cuda_tools_kernels_are_not_run_and_the_gate_is_red(
    lint: Path, bare_python: Path, tmp_path: Path
) -> None:
    e = _hidden_env(bare_python)
    probe = subprocess.run(
        [
            str(bare_python),
            "-c",
            "from gpuemu_ls.engine.cuda.toolchain import find_toolchain as f;"
            "t = f(); print(t.nvcc, t.ptxas, t.cuobjdump, t.nvdisasm)",
        ],
        capture_output=True,
        text=True,
        env=e,
        check=False,
    )
    assert probe.stdout.split() == ["None"] * 4, out(probe)
    for name in ("lint", "twin"):  # the twin is green with the tools; its warm lint cache must not count
        ws = copy_workspace(lint / name, tmp_path / name)
        assert list((ws / ".gpuemu" / "cache").rglob("*")), "expected a warm lint cache"
        proc = gpuemu("ci", "--format", "json", cwd=ws, timeout=300, environ=e, python=bare_python)
        assert proc.returncode == 1, out(proc)
        doc = jdoc(proc)
        assert doc["status"] == "not_run" and doc["exit_code"] == 1
        for k in doc["kernels"]:
            assert k["status"] == "not_run" and "nvcc" in k["message"], k
    file_lint = gpuemu("lint", "kernels/vector_add.cu", cwd=ws, timeout=300, environ=e, python=bare_python)
    assert file_lint.returncode == 1 and "NOT RUN" in file_lint.stdout, out(file_lint)


def test_kernel_only_gate_results_reach_the_store(lint: Path, tmp_path: Path) -> None:
    ws = copy_workspace(lint / "lint", tmp_path / "lint")
    proc = gpuemu("report", "--include-lint", "--format", "json", cwd=ws)
    names = {k["name"] for k in jdoc(proc)["kernels"]}
    assert names == {"vector_add", "uses_printf", "clean_twin"}, out(proc)


def test_cuda_nvcc_setting_is_used_when_nvcc_is_not_on_path(bare_python: Path, tmp_path: Path) -> None:
    from gpuemu_ls.engine.cuda.toolchain import find_toolchain

    nvcc = find_toolchain().nvcc
    e = _hidden_env(bare_python)
    e["PATH"] = os.pathsep.join([str(bare_python.parent), "/usr/bin", "/bin"])  # the host compiler, no CUDA
    assert find_toolchain(search_path=e["PATH"], site_dirs=()).nvcc is None
    toml = project_toml("own-nvcc", cuda={"nvcc": str(nvcc)}) + TWIN_KERNELS
    ws = _workspace(tmp_path / "twin", toml.replace('forbidden_instructions = ["re:vprintf"]\n', ""))
    proc = gpuemu("ci", "--format", "json", cwd=ws, timeout=300, environ=e, python=bare_python)
    doc = jdoc(proc)
    assert [k["status"] for k in doc["kernels"]] == ["passed", "passed"], [k["message"] for k in doc["kernels"]]
    assert proc.returncode == 0, out(proc)
