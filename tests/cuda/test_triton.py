"""Triton kernels compiled to PTX without a GPU, then linted like any .ptx (needs `triton`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuemu_ls.engine.cuda import ArtifactChecks, format_text, lint_file
from gpuemu_ls.engine.cuda.triton_ptx import compile_triton_to_ptx, ptx_version_for

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

pytestmark = pytest.mark.cuda


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def test_ptx_version_table() -> None:
    assert ptx_version_for("13.0.88") == 90
    assert ptx_version_for("12.9") == 88


def test_triton_kernel_is_compiled_and_linted_without_a_gpu(tools, tmp_path: Path) -> None:
    ptxas_version = tools.versions()["ptxas"]
    out = compile_triton_to_ptx(
        add_kernel,
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        tmp_path,
        constexprs={"BLOCK": 1024},
        ptx_version=ptx_version_for(ptxas_version),
    )
    assert out.name == "add_kernel" and ".entry add_kernel" in out.ptx_path.read_text()
    (r,) = lint_file(
        out.ptx_path, None, ArtifactChecks(max_registers=64, max_spills=0, forbidden_instructions=("LDL",)), tools=tools
    )
    assert r.status == "passed", format_text([r])
    assert r.resources is not None and 0 < r.resources["registers"] <= 64
    assert any(m.startswith("ld.global") for m in r.ptx_instructions)
    if tools.can_disassemble:
        assert any(m.startswith("LDG") for m in r.sass_histogram)
