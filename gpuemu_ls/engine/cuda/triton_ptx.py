"""Compile a Triton kernel to PTX for a CUDA target on a machine without a GPU.

`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))` runs Triton's
whole pipeline (TTIR -> TTGIR -> LLVM IR -> PTX, and a cubin with Triton's bundled
ptxas) with no driver and no device: the target is given instead of queried. The
PTX then goes through `lint_file` like any other .ptx.

Triton stamps the PTX with the ISA version of its *own* newest ptxas (Triton 3.9:
`.version 9.4`, from a bundled CUDA 13.4 ptxas), which an older system ptxas
refuses ("Unsupported .version 9.4"). Pass `ptx_version` (e.g. 90 for CUDA 13.0,
see `ptx_version_for`) to match the ptxas that will lint it. Triton targets
`sm_90a` for capability 90; `lint_file` assembles such PTX for `sm_90a`.

Triton is optional: it is imported only here, on use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class TritonUnavailable(RuntimeError):
    """Triton is not installed (or too old to compile for an explicit target)."""


@dataclass
class TritonPtx:
    """The PTX (and, when Triton produced one, the cubin) of one compiled Triton kernel."""

    name: str
    ptx_path: Path
    cubin_path: Path | None
    metadata: dict[str, Any] = field(default_factory=dict)


def ptx_version_for(cuda_version: str) -> int:
    """PTX ISA version (x10) a ptxas of this CUDA release accepts, e.g. '13.0.88' -> 90.

    Uses Triton's own table when it is importable; otherwise the public CUDA mapping
    (12.0-12.4 -> 8.0-8.4, 12.5/12.6 -> 8.5, 12.8 -> 8.7, 12.9 -> 8.8, 13.x -> 9.x).
    """
    m = re.match(r"(\d+)\.(\d+)", cuda_version)
    if not m:
        raise ValueError(f"not a CUDA version: {cuda_version!r}")
    major, minor = int(m.group(1)), int(m.group(2))
    try:
        from triton.backends.nvidia.compiler import ptx_get_version  # type: ignore[import-not-found]

        return int(ptx_get_version(f"{major}.{minor}"))
    except Exception:  # Triton absent or its internals moved: use the table below
        pass
    if major >= 13:
        return 90 + minor
    if major == 12:
        return {5: 85, 6: 85, 7: 86, 8: 87, 9: 88}.get(minor, 80 + minor)
    return 70 + minor


def _capability(arch: str) -> int:
    m = re.fullmatch(r"sm_(\d+)[af]?", arch)
    if not m:
        raise ValueError(f"not a CUDA real architecture: {arch!r} (expected e.g. 'sm_90')")
    return int(m.group(1))


def compile_triton_to_ptx(
    kernel: Callable[..., Any],
    signature: Mapping[str, str],
    out_dir: Path,
    *,
    constexprs: Mapping[str, Any] | None = None,
    arch: str = "sm_90",
    num_warps: int = 4,
    num_stages: int = 3,
    ptx_version: int | None = None,
) -> TritonPtx:
    """Compile a `@triton.jit` function for `arch` without a GPU and write `<name>.ptx` to out_dir.

    `signature` maps every parameter to a Triton type ('*fp32', 'i32', 'constexpr');
    `constexprs` gives the constexpr values, e.g. {'BLOCK': 1024}.
    """
    try:
        import triton  # type: ignore[import-not-found]
        from triton.backends.compiler import GPUTarget  # type: ignore[import-not-found]
        from triton.compiler import ASTSource  # type: ignore[import-not-found]
    except ImportError as exc:
        raise TritonUnavailable(f"Triton is not installed ({exc}): pip install triton") from exc

    options: dict[str, Any] = {"num_warps": num_warps, "num_stages": num_stages}
    if ptx_version is not None:
        options["ptx_version"] = ptx_version
    src = ASTSource(fn=kernel, signature=dict(signature), constexprs=dict(constexprs or {}))
    compiled = triton.compile(src, target=GPUTarget("cuda", _capability(arch), 32), options=options)
    name = str(compiled.metadata.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    ptx_path = out_dir / f"{name}.ptx"
    ptx_path.write_text(compiled.asm["ptx"])
    cubin_path: Path | None = None
    if "cubin" in compiled.asm:
        cubin_path = out_dir / f"{name}.cubin"
        cubin_path.write_bytes(compiled.asm["cubin"])
    meta = compiled.metadata
    metadata = meta._asdict() if hasattr(meta, "_asdict") else dict(vars(meta))
    return TritonPtx(name, ptx_path, cubin_path, {k: v for k, v in metadata.items() if _jsonable(v)})


def _jsonable(value: object) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, list, tuple))
