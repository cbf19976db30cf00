"""Find the real NVIDIA tools (nvcc, ptxas, cuobjdump, nvdisasm) and their versions.

Search order, per tool: an explicit path (a binary, a `bin/` folder or a CUDA root),
then `PATH`, then `$CUDA_HOME`/`$CUDA_PATH`, then NVIDIA's PyPI wheels installed in
the current Python environment. The CUDA 13 wheels (`nvidia-cuda-nvcc`,
`nvidia-cuda-cuobjdump`, `nvidia-cuda-nvdisasm`, `nvidia-cuda-cccl`) all unpack into
`site-packages/nvidia/cu13/{bin,include,nvvm}`; the CUDA 12 ones (`*-cu12`) into
`site-packages/nvidia/cuda_<component>/bin`. Both layouts are searched, and last
the tools the `triton` wheel bundles (`triton/backends/nvidia/bin`).

Versions are part of the lint cache key, so they are read once per binary and
memoised by (path, mtime, size): a cache hit never has to start `nvcc --version`.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

TOOL_NAMES: tuple[str, ...] = ("nvcc", "ptxas", "cuobjdump", "nvdisasm")
#: gpuemu-ls is not on PyPI yet: the [cuda] extra installs from a checkout or a built wheel, or its wheels directly.
INSTALL_HINT = (
    "pip install './gpuemu-ls[cuda]'` from a checkout (or a built wheel's `[cuda]` extra), or "
    "`pip install 'nvidia-cuda-nvcc>=13.0' nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm nvidia-cuda-cccl"
)
WHEEL_FOR_TOOL = {
    "nvcc": "nvidia-cuda-nvcc",
    "ptxas": "nvidia-cuda-nvcc",
    "cuobjdump": "nvidia-cuda-cuobjdump",
    "nvdisasm": "nvidia-cuda-nvdisasm",
}
# Sub-folders of a site-packages dir where NVIDIA wheels put their binaries; Triton's
# wheel bundles ptxas/cuobjdump/nvdisasm too and is searched last.
_WHEEL_BIN_GLOBS: tuple[str, ...] = (
    "nvidia/cu13/bin",
    "nvidia/cu1*/bin",
    "nvidia/cuda_*/bin",
    "triton/backends/nvidia/bin",
)

_VERSION_RE = re.compile(r"release\s+[\d.]+,\s*V([\d.]+)|V(\d+\.\d+\.\d+)")
_version_memo: dict[tuple[str, int, int], str] = {}
_persisted: set[tuple[str, tuple[str, int, int]]] = set()  # (memo file, tool key) already written


@dataclass(frozen=True)
class Toolchain:
    """Paths of the CUDA tools found (None = not found) and where each came from."""

    nvcc: Path | None = None
    ptxas: Path | None = None
    cuobjdump: Path | None = None
    nvdisasm: Path | None = None
    origins: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    searched: tuple[str, ...] = field(default=(), compare=False, hash=False)

    def path_of(self, tool: str) -> Path | None:
        return getattr(self, tool)

    @property
    def can_compile(self) -> bool:
        return self.nvcc is not None

    @property
    def can_assemble(self) -> bool:
        return self.ptxas is not None

    @property
    def can_disassemble(self) -> bool:
        return self.cuobjdump is not None or self.nvdisasm is not None

    def versions(self, memo_file: Path | None = None) -> dict[str, str]:
        """Version of every tool found, e.g. {"nvcc": "13.0.88", ...} (memoised, see module doc)."""
        out: dict[str, str] = {}
        for name in TOOL_NAMES:
            path = self.path_of(name)
            if path is not None:
                out[name] = tool_version(path, memo_file)
        return out

    def missing_message(self, needed: Sequence[str] = ("nvcc",)) -> str:
        """A message naming what was looked for, where, and how to install it."""
        missing = [t for t in needed if self.path_of(t) is None]
        wheels = sorted({WHEEL_FOR_TOOL[t] for t in missing})
        where = "; ".join(self.searched) if self.searched else "PATH and the Python environment"
        return (
            f"CUDA tool(s) not found: {', '.join(missing)} (searched: {where}). "
            f"Install them with `{INSTALL_HINT}` (wheels: {', '.join(wheels)}), "
            "or put a CUDA toolkit's bin/ on PATH."
        )


def _candidate_dirs(explicit: Path) -> list[Path]:
    """An explicit location may be a binary, a bin/ folder or a CUDA root."""
    if explicit.is_file():
        return [explicit.parent]
    return [explicit, explicit / "bin"]


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def default_site_dirs() -> list[Path]:
    """site-packages folders of the running interpreter (venv first), without duplicates."""
    dirs: list[str] = []
    for key in ("purelib", "platlib"):
        try:
            dirs.append(sysconfig.get_paths()[key])
        except KeyError:
            pass
    try:
        dirs.extend(site.getsitepackages())
    except AttributeError:  # some embedded interpreters
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    dirs.extend(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    seen: dict[str, Path] = {}
    for d in dirs:
        p = Path(d)
        key = str(p.resolve()) if p.exists() else str(p)
        if key not in seen and p.is_dir():
            seen[key] = p
    return list(seen.values())


def wheel_bin_dirs(site_dirs: Iterable[Path]) -> list[Path]:
    """bin/ folders of NVIDIA CUDA wheels under the given site-packages folders."""
    found: list[Path] = []
    for sd in site_dirs:
        for pattern in _WHEEL_BIN_GLOBS:
            for d in sorted(sd.glob(pattern), reverse=True):  # cu13 before cu12
                if d.is_dir() and d not in found:
                    found.append(d)
    return found


def find_toolchain(
    explicit: Path | str | None = None,
    *,
    search_path: str | None = None,
    site_dirs: Sequence[Path] | None = None,
    use_env_cuda_home: bool = True,
) -> Toolchain:
    """Locate each tool: explicit path, PATH, $CUDA_HOME/$CUDA_PATH, then NVIDIA wheels.

    `search_path` replaces $PATH and `site_dirs` replaces the interpreter's
    site-packages (pass `""` and `()` to find nothing but the explicit path).
    """
    stages: list[tuple[str, str, list[Path]]] = []  # (origin, description, dirs)
    if explicit is not None:
        stages.append(("explicit", f"{explicit}", _candidate_dirs(Path(explicit))))
    path_value = os.environ.get("PATH", "") if search_path is None else search_path
    stages.append(("PATH", "PATH", [Path(p) for p in path_value.split(os.pathsep) if p]))
    if use_env_cuda_home:
        homes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
        home_dirs = [Path(h) / "bin" for h in homes if h]
        if home_dirs:
            stages.append(("CUDA_HOME", "$CUDA_HOME/$CUDA_PATH", home_dirs))
    sdirs = default_site_dirs() if site_dirs is None else list(site_dirs)
    wheel_desc = "NVIDIA wheels in " + (", ".join(map(str, sdirs)) or "no site-packages")
    stages.append(("wheel", wheel_desc, wheel_bin_dirs(sdirs)))

    found: dict[str, Path] = {}
    origins: dict[str, str] = {}
    for tool in TOOL_NAMES:
        for origin, _desc, dirs in stages:
            hit = next((d / tool for d in dirs if _executable(d / tool)), None)
            if hit is not None:
                found[tool] = hit
                origins[tool] = origin
                break
    # ptxas should come from the same installation as nvcc when that one has it.
    if "nvcc" in found and _executable(found["nvcc"].parent / "ptxas"):
        found["ptxas"] = found["nvcc"].parent / "ptxas"
        origins["ptxas"] = origins["nvcc"]
    return Toolchain(
        nvcc=found.get("nvcc"),
        ptxas=found.get("ptxas"),
        cuobjdump=found.get("cuobjdump"),
        nvdisasm=found.get("nvdisasm"),
        origins=origins,
        searched=tuple(desc for _origin, desc, _dirs in stages),
    )


def empty_toolchain() -> Toolchain:
    """A toolchain with nothing in it (tests, and callers that disable CUDA)."""
    return Toolchain(searched=("nothing (tools disabled)",))


def _stat_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path), st.st_mtime_ns, st.st_size)


def _read_memo_file(memo_file: Path) -> dict[str, str]:
    try:
        data = json.loads(memo_file.read_text())
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def parse_version(text: str) -> str | None:
    """'Cuda compilation tools, release 13.0, V13.0.88' -> '13.0.88'."""
    m = _VERSION_RE.search(text)
    if not m:
        return None
    return m.group(1) or m.group(2)


def tool_version(path: Path, memo_file: Path | None = None) -> str:
    """`<tool> --version`, memoised in process and (optionally) in a JSON file by path+mtime+size."""
    key = _stat_key(path)
    file_key = "|".join(map(str, key))
    version = _version_memo.get(key)
    if version is None and memo_file is not None:
        version = _read_memo_file(memo_file).get(file_key)
    if version is None:
        try:
            proc = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60, check=False)
            version = parse_version(proc.stdout + proc.stderr) or "unknown"
        except (OSError, subprocess.SubprocessError):
            version = "unknown"
    _version_memo[key] = version
    if memo_file is not None and version != "unknown" and (str(memo_file), key) not in _persisted:
        _persist_version(memo_file, file_key, version)
        _persisted.add((str(memo_file), key))
    return version


def _persist_version(memo_file: Path, file_key: str, version: str) -> None:
    data = _read_memo_file(memo_file)
    if data.get(file_key) == version:
        return
    data[file_key] = version
    try:
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=0, sort_keys=True))
        os.replace(tmp, memo_file)
    except OSError:
        pass
