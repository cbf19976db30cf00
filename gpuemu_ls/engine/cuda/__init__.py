"""Compile CUDA kernels with the real NVIDIA tools and lint their PTX/SASS artifacts.

Public API::

    from gpuemu_ls.engine.cuda import ArtifactChecks, KernelSpec, lint_kernel, lint_file, format_text

    result = lint_kernel(KernelSpec("softmax", Path("softmax.cu"),
                                    checks=ArtifactChecks(max_registers=64, max_spills=0)),
                         cache_dir=Path(".gpuemu/cache/lint"))
    result.status  # 'passed' | 'failed' | 'error' | 'not_run'

Pure Python (standard library only); the tools run as subprocesses.
"""

from __future__ import annotations

from .diff import ArtifactChange, diff_results, regressions
from .lint import lint_file, lint_kernel
from .patterns import InstructionPattern, PatternError, parse_pattern
from .report import format_text
from .result import Finding, KernelLintResult
from .spec import ArtifactChecks, KernelSpec
from .toolchain import INSTALL_HINT, Toolchain, empty_toolchain, find_toolchain

__all__ = [
    "INSTALL_HINT",
    "ArtifactChange",
    "ArtifactChecks",
    "Finding",
    "InstructionPattern",
    "KernelLintResult",
    "KernelSpec",
    "PatternError",
    "Toolchain",
    "diff_results",
    "empty_toolchain",
    "find_toolchain",
    "format_text",
    "lint_file",
    "lint_kernel",
    "parse_pattern",
    "regressions",
]
